/* tests/test_engine_space.c — space accounting, the cleaner, the
 * reserve and -ENOSPC.
 *
 *   fill_enospc        fill a 64 MiB store until -ENOSPC; every completed
 *                      write reads back; it reopens full; removing half the
 *                      objects makes room again
 *   sustained_overwrite rewrite a 24 MiB object 40 times (random order of
 *                      256 KiB pieces) in a 64 MiB store: no -ENOSPC, content
 *                      right, the cleaner ran, write amplification reported
 *   cas_race           forced cleaning passes while the same blocks are
 *                      overwritten: the newest data always wins
 *   large_write_above_the_low_mark_waits_for_room  a 10 MiB write into
 *                      a store whose free space is above the cleaning mark
 *                      but short of 10 MiB starts the cleaner and waits
 *   victims_are_read_where_live  a pass over sparse raw segments reads
 *                      their live sectors (in waves, long runs in pieces),
 *                      not whole segments; content exact, also reopened
 *   small_blobs_zstd   4 KiB compressed blobs overwritten at random,
 *                      cleaned, reopened: content and accounting exact
 *   zero_fill_keeps_the_file_written  COIL_ZERO_FILL: no hole or unwritten
 *                      extent (FIEMAP), never punched, also after reopen;
 *                      a growing store is never punched either
 *   metadata_outgrows_checkpoint_area  4 KiB blobs of zeros (15 stored
 *                      bytes each) add extents far faster than segments:
 *                      writes fail with -ENOSPC once the next checkpoint
 *                      would not fit its area, nothing breaks, the store
 *                      closes, reopens read-write, and a truncate makes
 *                      room again
 * Every test recounts live bytes from the extent maps (cleaner_check_live).
 * COIL_REL_SCALE (e.g. 0.3 under ASan) scales the overwrite counts. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/log/ckpt.h"
#include "engine/pack.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"

/* A 64 KiB block's content for (block, version): cheap to regenerate. */
static void block_fill(uint8_t *p, size_t n, uint64_t blk, uint64_t ver)
{
	et_fill(p, n, blk * 1000003u + ver, 0);
	memcpy(p, &blk, 8);
	memcpy(p + 8, &ver, 8);
}

static uint64_t stat_u64(coil_store *s, const char *key)
{
	char *buf = malloc(1 << 16), *p;
	uint64_t v = UINT64_MAX;

	cr_assert(coil_stats_json(s, buf, 1 << 16) > 0);
	p = strstr(buf, key);
	if (p)
		v = strtoull(p + strlen(key), NULL, 10);
	free(buf);
	return v;
}

static double stat_dbl(coil_store *s, const char *key)
{
	char *buf = malloc(1 << 16), *p;
	double v = -1;

	cr_assert(coil_stats_json(s, buf, 1 << 16) > 0);
	p = strstr(buf, key);
	if (p)
		v = strtod(p + strlen(key), NULL);
	free(buf);
	return v;
}

#define OBJ_BYTES (1u << 20)
#define MAX_OBJS 128

Test(engine_space, fill_enospc, .timeout = 120)
{
	char path[256], name[32];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint8_t *buf = malloc(OBJ_BYTES), *rd = malloc(OBJ_BYTES);
	int n = 0, extra = 0, tail;
	int64_t r = 0;

	et_path(path, sizeof(path), "space-fill");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	/* Fill with 1 MiB objects until a write fails. */
	for (n = 0; n < MAX_OBJS; n++) {
		snprintf(name, sizeof(name), "o%03d", n);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		block_fill(buf, OBJ_BYTES, (uint64_t)n, 1);
		r = coil_pwrite(h, buf, OBJ_BYTES, 0);
		coil_obj_close(h);
		if (r < 0)
			break;
		cr_assert_eq(r, OBJ_BYTES);
	}
	cr_assert_eq(r, -ENOSPC, "fill ended with %s after %d objects",
		     coil_strerror((int)r), n);
	cr_assert_gt(n, 40, "only %d MiB fit a 64 MiB store", n);
	cr_log_info("fill: %d x 1 MiB fit before -ENOSPC", n);
	/* The failed object exists but holds nothing. */
	snprintf(name, sizeof(name), "o%03d", n);
	cr_assert_eq(coil_obj_remove(s, name), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	/* Top up with 64 KiB writes until those fail too: the store is
	 * really full then, and reads still work. */
	cr_assert_eq(coil_obj_open(s, "tail", COIL_CREATE, &h), 0);
	for (tail = 0; tail < 64; tail++) {
		block_fill(buf, 65536, 5000u + (uint64_t)tail, 1);
		r = coil_pwrite(h, buf, 65536, (uint64_t)tail * 65536);
		if (r < 0)
			break;
	}
	cr_assert_eq(r, -ENOSPC);
	cr_assert_lt(tail, 64);
	coil_obj_close(h);
	cr_assert_eq(coil_obj_open(s, "o000", 0, &h), 0);
	cr_assert_eq(coil_pread(h, rd, OBJ_BYTES, 0), OBJ_BYTES);
	block_fill(buf, OBJ_BYTES, 0, 1);
	cr_assert_eq(memcmp(buf, rd, OBJ_BYTES), 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);

	/* Reopen full: every completed write reads back. */
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0, "reopen of a full store");
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_obj_open(s, "tail", 0, &h), 0);
	for (int i = 0; i < tail; i++) {
		cr_assert_eq(coil_pread(h, rd, 65536, (uint64_t)i * 65536),
			     65536);
		block_fill(buf, 65536, 5000u + (uint64_t)i, 1);
		cr_assert_eq(memcmp(buf, rd, 65536), 0, "tail block %d", i);
	}
	coil_obj_close(h);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "o%03d", i);
		cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
		cr_assert_eq(coil_pread(h, rd, OBJ_BYTES, 0), OBJ_BYTES);
		block_fill(buf, OBJ_BYTES, (uint64_t)i, 1);
		cr_assert_eq(memcmp(buf, rd, OBJ_BYTES), 0, "object %d", i);
		coil_obj_close(h);
	}
	/* Remove every other object: room again (their blobs share
	 * segments with the survivors, so this needs the cleaner). */
	for (int i = 0; i < n; i += 2) {
		snprintf(name, sizeof(name), "o%03d", i);
		cr_assert_eq(coil_obj_remove(s, name), 0);
	}
	for (extra = 0; extra < n / 2 - 4; extra++) {
		snprintf(name, sizeof(name), "n%03d", extra);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		block_fill(buf, OBJ_BYTES, 1000u + (uint64_t)extra, 1);
		r = coil_pwrite(h, buf, OBJ_BYTES, 0);
		coil_obj_close(h);
		cr_assert_eq(r, OBJ_BYTES, "write %d after removals: %s", extra,
			     coil_strerror((int)r));
	}
	cr_assert_eq(cleaner_check_live(s), 0);
	for (int i = 1; i < n; i += 2) {
		snprintf(name, sizeof(name), "o%03d", i);
		cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
		cr_assert_eq(coil_pread(h, rd, OBJ_BYTES, 0), OBJ_BYTES);
		block_fill(buf, OBJ_BYTES, (uint64_t)i, 1);
		cr_assert_eq(memcmp(buf, rd, OBJ_BYTES), 0, "survivor %d", i);
		coil_obj_close(h);
	}
	cr_log_info("after removing %d objects: %d new ones written, "
		    "segments cleaned %lu", (n + 1) / 2, extra,
		    (unsigned long)stat_u64(s, "\"segments_cleaned\":"));
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
	free(rd);
}

#define BLK (64u << 10)

static void check_object(coil_obj *h, const uint64_t *ver, uint32_t nblk)
{
	uint8_t *want = malloc(BLK), *rd = malloc(BLK);

	for (uint32_t b = 0; b < nblk; b++) {
		cr_assert_eq(coil_pread(h, rd, BLK, (uint64_t)b * BLK), BLK);
		block_fill(want, BLK, b, ver[b]);
		cr_assert_eq(memcmp(want, rd, BLK), 0,
			     "block %u: version %lu expected", b,
			     (unsigned long)ver[b]);
	}
	free(want);
	free(rd);
}

/* Pieces of 4 blocks (256 KiB) in a new random order each round: the dead
 * blobs of a round are scattered over every segment. */
#define PIECE_BLKS 4u

Test(engine_space, sustained_overwrite, .timeout = 300)
{
	const uint32_t nblk = (24u << 20) / BLK, npiece = nblk / PIECE_BLKS;
	int rounds = (int)(40 * tu_scale());
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint64_t *ver = calloc(nblk, sizeof(*ver)), x = 0x5ace;
	uint32_t *perm = malloc(npiece * sizeof(*perm));
	uint8_t *buf = malloc(BLK * PIECE_BLKS);
	uint64_t t0 = coil_now_ns(), worst = 0;
	double wa;

	if (rounds < 4)
		rounds = 4;
	et_path(path, sizeof(path), "space-overwrite");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "big", COIL_CREATE, &h), 0);
	for (uint32_t p = 0; p < npiece; p++)
		perm[p] = p;
	for (int r = 0; r < rounds; r++) {
		for (uint32_t p = npiece - 1; p > 0; p--) {
			uint32_t j = (uint32_t)(tu_xorshift(&x) % (p + 1)), t = perm[p];
			perm[p] = perm[j];
			perm[j] = t;
		}
		for (uint32_t k = 0; k < npiece; k++) {
			uint32_t b0 = perm[k] * PIECE_BLKS;
			uint64_t w0 = coil_now_ns(), dt;
			int64_t rc;

			for (uint32_t i = 0; i < PIECE_BLKS; i++)
				block_fill(buf + i * BLK, BLK, b0 + i,
					   (uint64_t)r + 1);
			rc = coil_pwrite(h, buf, BLK * PIECE_BLKS,
					 (uint64_t)b0 * BLK);
			dt = coil_now_ns() - w0;
			worst = dt > worst ? dt : worst;
			cr_assert_eq(rc, BLK * PIECE_BLKS, "round %d piece %u: %s",
				     r, perm[k], coil_strerror((int)rc));
			for (uint32_t i = 0; i < PIECE_BLKS; i++)
				ver[b0 + i] = (uint64_t)r + 1;
		}
		if (r % 8 == 7) {
			check_object(h, ver, nblk);
			cr_assert_eq(cleaner_check_live(s), 0);
		}
	}
	check_object(h, ver, nblk);
	cr_assert_eq(cleaner_check_live(s), 0);
	wa = stat_dbl(s, "\"write_amplification\":");
	cr_log_info("overwrite: %d x 24 MiB in %.1f s, write amplification "
		    "%.3f, segments cleaned %lu, bytes cleaned %lu, throttled "
		    "%lu, slowest write %.1f ms", rounds,
		    (double)(coil_now_ns() - t0) / 1e9, wa,
		    (unsigned long)stat_u64(s, "\"segments_cleaned\":"),
		    (unsigned long)stat_u64(s, "\"bytes_cleaned\":"),
		    (unsigned long)stat_u64(s, "\"throttled_writes\":"),
		    (double)worst / 1e6);
	cr_assert_gt(wa, 1.0);
	cr_assert_gt(stat_u64(s, "\"segments_cleaned\":"), 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	/* and after a reopen (replay of whatever the last checkpoint did not
	 * cover, live bytes recomputed) */
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_obj_open(s, "big", 0, &h), 0);
	check_object(h, ver, nblk);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(ver);
	free(perm);
	free(buf);
}

struct racer {
	coil_store *s;
	volatile int stop;
	int passes;
};

static void *race_cleaner(void *arg)
{
	struct racer *r = arg;

	while (!r->stop) {
		cr_assert_geq(cleaner_run_now(r->s, 4), 0);
		r->passes++;
	}
	return NULL;
}

#define HALF (BLK / 2)

static void check_units(coil_obj *h, const uint64_t *ver, uint32_t nunit)
{
	uint8_t *want = malloc(HALF), *rd = malloc(HALF);

	for (uint32_t u = 0; u < nunit; u++) {
		cr_assert_eq(coil_pread(h, rd, HALF, (uint64_t)u * HALF), HALF);
		block_fill(want, HALF, u, ver[u]);
		cr_assert_eq(memcmp(want, rd, HALF), 0,
			     "unit %u: version %lu expected", u,
			     (unsigned long)ver[u]);
	}
	free(want);
	free(rd);
}

/* Forced passes clean the very segments being overwritten: a relocation
 * that read a block before an overwrite must not resurrect it.  Half-block
 * writes split the 64 KiB extents, so relocations carry partial extents. */
Test(engine_space, cas_race, .timeout = 120)
{
	const uint32_t nunit = 128;
	int rounds = (int)(30 * tu_scale());
	char path[256];
	struct coil_options o;
	struct racer rc = { 0 };
	pthread_t th;
	coil_store *s;
	coil_obj *h;
	uint64_t ver[128] = { 0 }, x = 77;
	uint8_t *buf = malloc(BLK);

	if (rounds < 5)
		rounds = 5;
	et_path(path, sizeof(path), "space-race");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "hot", COIL_CREATE, &h), 0);
	for (uint32_t u = 0; u < nunit; u++) {
		block_fill(buf, HALF, u, 1);
		cr_assert_eq(coil_pwrite(h, buf, HALF, (uint64_t)u * HALF),
			     HALF);
		ver[u] = 1;
	}
	rc.s = s;
	cr_assert_eq(pthread_create(&th, NULL, race_cleaner, &rc), 0);
	for (int r = 0; r < rounds; r++) {
		for (uint32_t k = 0; k < nunit / 4; k++) {
			uint32_t u = (uint32_t)(tu_xorshift(&x) % nunit);

			if ((tu_xorshift(&x) & 1) && u + 1 < nunit && u % 2 == 0) {
				/* a whole 64 KiB block: two units */
				block_fill(buf, HALF, u, ver[u] + 1);
				block_fill(buf + HALF, HALF, u + 1,
					   ver[u + 1] + 1);
				cr_assert_eq(coil_pwrite(h, buf, BLK,
							 (uint64_t)u * HALF),
					     BLK);
				ver[u]++;
				ver[u + 1]++;
			} else {
				block_fill(buf, HALF, u, ver[u] + 1);
				cr_assert_eq(coil_pwrite(h, buf, HALF,
							 (uint64_t)u * HALF),
					     HALF);
				ver[u]++;
			}
		}
		check_units(h, ver, nunit);
	}
	rc.stop = 1;
	pthread_join(th, NULL);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_log_info("cas_race: %d forced passes, %lu bytes installed, %lu "
		    "dropped by the compare-and-swap", rc.passes,
		    (unsigned long)stat_u64(s, "\"cas_installed_bytes\":"),
		    (unsigned long)stat_u64(s, "\"cas_dropped_bytes\":"));
	cr_assert_gt(stat_u64(s, "\"cas_installed_bytes\":"), 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_obj_open(s, "hot", 0, &h), 0);
	check_units(h, ver, nunit);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
}

/* Reopen the closed store at @path: live bytes recount right, and object
 * @name reads back as @model's @len bytes (asking for @size). */
static void reopen_and_compare(const char *path, struct coil_options *o,
			       const char *name, const uint8_t *model,
			       uint8_t *rd, size_t size, size_t len)
{
	coil_store *s;
	coil_obj *h;

	o->flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
	memset(rd, 0, size);
	cr_assert_eq(coil_pread(h, rd, size, 0), (int64_t)len);
	cr_assert_eq(memcmp(rd, model, len), 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
}

/* A write larger than the room the cleaning marks keep free: above the
 * low mark nothing else starts the cleaner, so the write itself must,
 * and wait for the room (half-dead segments, none wholly dead, so no
 * checkpoint alone frees any). */
Test(engine_space, large_write_above_the_low_mark_waits_for_room,
     .timeout = 120)
{
	const size_t size = 28u << 20, big = 10u << 20;
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *a, *b;
	uint8_t *buf = malloc(big), *rd = malloc(big);
	uint64_t free_segs, clean_lo;

	et_path(path, sizeof(path), "space-big-write");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &a), 0);
	for (size_t off = 0; off < size; off += BLK) {
		block_fill(buf, BLK, off / BLK, 1);
		cr_assert_eq(coil_pwrite(a, buf, BLK, off), BLK);
	}
	/* every other 64 KiB block again: the first copies' segments are
	 * half dead */
	for (size_t off = 0; off < size; off += 2 * BLK) {
		block_fill(buf, BLK, off / BLK, 2);
		cr_assert_eq(coil_pwrite(a, buf, BLK, off), BLK);
	}
	cr_assert_eq(coil_sync(s), 0);
	free_segs = stat_u64(s, "\"segments_free\":");
	clean_lo = stat_u64(s, "\"clean_below_free_segments\":");
	cr_log_info("big write: %lu free segments, cleaning below %lu",
		    (unsigned long)free_segs, (unsigned long)clean_lo);
	cr_assert_geq(free_segs, clean_lo, "the scenario needs free space "
		      "above the low mark");
	cr_assert_lt(free_segs * (1u << 20), big + (4u << 20),
		     "the scenario needs a write that does not fit as is");
	et_fill(buf, big, 99, 0);
	cr_assert_eq(coil_obj_open(s, "b", COIL_CREATE, &b), 0);
	cr_assert_eq(coil_pwrite(b, buf, big, 0), (ssize_t)big);
	cr_assert_eq(coil_pread(b, rd, big, 0), (ssize_t)big);
	cr_assert_eq(memcmp(rd, buf, big), 0);
	for (size_t off = 0; off < size; off += BLK) {
		uint64_t ver = (off / BLK) % 2 == 0 ? 2 : 1;

		block_fill(buf, BLK, off / BLK, ver);
		cr_assert_eq(coil_pread(a, rd, BLK, off), BLK);
		cr_assert_eq(memcmp(rd, buf, BLK), 0, "block %zu", off / BLK);
	}
	cr_assert_eq(cleaner_check_live(s), 0);
	coil_obj_close(a);
	coil_obj_close(b);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
	free(rd);
}

/* A victim is read where it is live: raw 64 KiB blobs overwritten down
 * to two 4 KiB sectors each (28 KiB dead between them, so every sector is
 * its own read: more reads than one wave), with the first five blobs
 * left whole (a live stretch longer than one read piece).  A forced pass
 * cleans them; it reads well under half of what it cleaned, and every
 * byte is right before and after a reopen. */
Test(engine_space, victims_are_read_where_live, .timeout = 120)
{
	const size_t size = 6u << 20, sec = 4096;
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint8_t *model = malloc(size), *rd = malloc(size);
	uint64_t read0, cleaned0, seg, read_b, cleaned_segs;

	et_path(path, sizeof(path), "space-live-reads");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "sparse", COIL_CREATE, &h), 0);
	for (size_t b = 0; b < size / BLK; b++)
		block_fill(model + b * BLK, BLK, b, 1);
	for (size_t off = 0; off < size; off += BLK)
		cr_assert_eq(coil_pwrite(h, model + off, BLK, off), BLK);
	/* keep sectors 0 and 8 of every blob past the fifth */
	for (size_t b = 5; b < size / BLK; b++) {
		for (size_t k = 0; k < 2; k++) {
			size_t off = b * BLK + sec + k * 8 * sec;

			block_fill(model + off, 7 * sec, b * 16 + 1 + k * 8, 2);
			cr_assert_eq(coil_pwrite(h, model + off, 7 * sec, off),
				     (ssize_t)(7 * sec));
		}
	}
	cr_assert_eq(coil_sync(s), 0);
	seg = stat_u64(s, "\"segment_size\":");
	read0 = stat_u64(s, "\"bytes_read\":");
	cleaned0 = stat_u64(s, "\"segments_cleaned\":");
	cr_assert_geq(cleaner_run_now(s, 64), 0);
	read_b = stat_u64(s, "\"bytes_read\":") - read0;
	cleaned_segs = stat_u64(s, "\"segments_cleaned\":") - cleaned0;
	cr_log_info("live reads: %lu segments cleaned, %lu bytes read",
		    (unsigned long)cleaned_segs, (unsigned long)read_b);
	cr_assert_geq(cleaned_segs, 3, "the sparse segments were cleaned");
	cr_assert_gt(read_b, 0);
	cr_assert_lt(read_b, cleaned_segs * seg / 2,
		     "%lu bytes read for %lu segments", (unsigned long)read_b,
		     (unsigned long)cleaned_segs);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_pread(h, rd, size, 0), (ssize_t)size);
	cr_assert_eq(memcmp(rd, model, size), 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	reopen_and_compare(path, &o, "sparse", model, rd, size, size);
	unlink(path);
	free(model);
	free(rd);
}

/* 4 KiB zstd blobs (byte-packed, several per 4 KiB block), partial
 * overwrites, forced cleaning, reopen: byte-exact against a model. */
Test(engine_space, small_blobs_zstd, .timeout = 120)
{
	const size_t size = 4u << 20;
	/* at least 3000 (small writes packed in batches leave denser
	 * segments): fewer leave no sparse segment for the cleaner to
	 * relocate from, and the test asserts it relocated */
	int ops = COIL_MAX((int)(3000 * tu_scale()), 3000);
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint8_t *model = calloc(1, size), *rd = malloc(size), *buf = malloc(16384);
	uint64_t x = 4242, end = 0;

	et_path(path, sizeof(path), "space-zstd");
	et_opts(&o, path);
	o.max_blob = 4096;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "p", COIL_CREATE, &h), 0);
	for (int i = 0; i < ops; i++) {
		size_t len = 1 + tu_xorshift(&x) % 12000;
		uint64_t off = tu_xorshift(&x) % (size - len);

		et_fill(buf, len, tu_xorshift(&x), 1);
		cr_assert_eq(coil_pwrite(h, buf, len, off), (int64_t)len);
		memcpy(model + off, buf, len);
		end = off + len > end ? off + len : end;
		/* writes up to 16 KiB stay in memory until packed: pack
		 * often, so the overwrites leave sparse segments to clean */
		if (i % 100 == 99)
			cr_assert_eq(pack_now(s), 0);
		if (i % 1000 == 999)
			cr_assert_geq(cleaner_run_now(s, 8), 0);
	}
	cr_assert_eq(pack_now(s), 0);
	cr_assert_geq(cleaner_run_now(s, 16), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_gt(stat_u64(s, "\"blobs_relocated\":"), 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	reopen_and_compare(path, &o, "p", model, rd, size, end);
	unlink(path);
	free(model);
	free(rd);
	free(buf);
}

/* Bytes of [0, size) of the file that are holes or unwritten extents, by
 * FIEMAP; UINT64_MAX when the file system cannot say (tmpfs). */
static uint64_t unwritten_bytes(const char *path, uint64_t size)
{
	struct et_fmap m;

	if (et_fiemap(path, 0, size, &m) != 0)
		return UINT64_MAX;
	return size - m.written;
}

/* Overwrite an 8 MiB object @rounds times in 64 KiB pieces, then clean. */
static void churn_and_clean(coil_store *s, int rounds)
{
	uint8_t *buf = malloc(BLK);
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "churn", COIL_CREATE, &h), 0);
	for (int r = 0; r < rounds; r++)
		for (uint32_t b = 0; b < (8u << 20) / BLK; b++) {
			block_fill(buf, BLK, b, (uint64_t)r + 1);
			cr_assert_eq(coil_pwrite(h, buf, BLK, (uint64_t)b * BLK),
				     BLK);
		}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_gt(cleaner_run_now(s, 32), 0, "the pass freed segments");
	cr_assert_eq(cleaner_check_live(s), 0);
	free(buf);
}

/* COIL_ZERO_FILL writes the whole file at creation (no hole, no unwritten
 * extent), records it in the superblock, and freed segments are never
 * punched, before or after a reopen without the flag; a store made without
 * it grows by fallocated steps, and its freed segments are not punched
 * either (they stay allocated for reuse). */
Test(engine_space, zero_fill_keeps_the_file_written, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	uint64_t size = 64ull << 20, u;

	et_path(path, sizeof(path), "space-zerofill");
	et_opts(&o, path);
	o.compression = "none";
	o.flags |= COIL_ZERO_FILL;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_neq(s->sb.flags & FMT_SUPER_FILLED, 0);
	u = unwritten_bytes(path, size);
	if (u == UINT64_MAX)
		cr_log_warn("no FIEMAP here: only the discard counts are checked");
	else
		cr_assert_eq(u, 0, "%lu bytes unwritten after a zero-filled "
			     "creation", (unsigned long)u);
	churn_and_clean(s, 4);
	cr_assert_eq(stat_u64(s, "\"discards\":"), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~(COIL_CREATE | COIL_ZERO_FILL);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_neq(s->sb.flags & FMT_SUPER_FILLED, 0, "the flag persists");
	churn_and_clean(s, 3);
	cr_assert_eq(stat_u64(s, "\"discards\":"), 0);
	cr_assert_eq(coil_close(s), 0);
	if (u != UINT64_MAX)
		cr_assert_eq(unwritten_bytes(path, size), 0);
	unlink(path);

	/* the control: a default (growing) store is fallocated as it grows,
	 * and its freed segments are not punched either */
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(s->sb.flags & FMT_SUPER_FILLED, 0);
	cr_assert(s->grows);
	if (u != UINT64_MAX)
		cr_assert_gt(unwritten_bytes(path, size), 0,
			     "fallocate leaves the data area unwritten");
	churn_and_clean(s, 4);
	cr_assert_eq(stat_u64(s, "\"discards\":"), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(engine_space, metadata_outgrows_checkpoint_area, .timeout = 300)
{
	char path[256], js[16384];
	struct coil_options o;
	const size_t len = 4u << 20;
	uint8_t *zero = calloc(1, len), *got = malloc(len);
	uint64_t written = 0;
	int64_t r = 0;
	coil_store *s;
	coil_obj *h;

	cr_assert(zero && got);
	et_path(path, sizeof(path), "space-ckpt-area");
	et_opts(&o, path);
	o.max_blob = 4096;
	o.compression = "zstd:1";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "z", COIL_CREATE, &h), 0);
	/* a 2 MiB area holds ~40k extents: ~160 MiB of 4 KiB blobs */
	for (int i = 0; i < 256; i++) {
		r = coil_pwrite(h, zero, len, written);
		if (r < 0)
			break;
		cr_assert_eq(r, (int64_t)len);
		written += len;
	}
	cr_assert_eq(r, -ENOSPC, "no -ENOSPC after %llu bytes",
		     (unsigned long long)written);
	cr_assert_gt(written, 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"checkpoint\"", "area_full_refusals"), 0);
	cr_assert_eq(json_u64(js, "\"store\"", "broken"), 0, "%s", js);
	/* most segments are still free: it is the metadata that is full */
	cr_assert_gt(json_u64(js, "\"space\"", "segments_free"), 30, "%s", js);
	/* the store still checkpoints, closes and reopens read-write */
	cr_assert_eq(ckpt_write(s, false), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "z", 0, &h), 0);
	for (uint64_t off = 0; off < written; off += len) {
		memset(got, 0xee, len);
		cr_assert_eq(coil_pread(h, got, len, off), (int64_t)len);
		cr_assert(memcmp(got, zero, len) == 0, "at %llu",
			  (unsigned long long)off);
	}
	/* dropping extents makes room for new ones */
	cr_assert_eq(coil_obj_truncate(h, written / 2), 0);
	cr_assert_eq(coil_pwrite(h, zero, len, written / 2), (int64_t)len);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(zero);
	free(got);
}
