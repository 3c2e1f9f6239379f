/* tests/test_clone.c — clones: objects that share blobs.
 *
 *   diverge              a clone reads like its source; writes, truncates and
 *                        removes of either leave the other as it was; small
 *                        writes still in memory are copied, not shared
 *   errors               a missing source, an existing target, bad names,
 *                        read-only stores
 *   cleaner_relocates_shared_once  three objects share 8 MiB; four
 *                        fifths of each are overwritten, forced cleaner
 *                        passes move the old segments' live blobs: each
 *                        shared blob is copied once for its three extents
 *                        (logical bytes moved >= 2 x stored bytes moved),
 *                        every byte of every object reads back and the
 *                        live-byte recount matches, also after a reopen
 *   races                a writer keeps overwriting blocks of an object
 *                        (async, through a handle) and
 *                        a reader reads it while the main thread clones it,
 *                        renames clones over each other and removes them,
 *                        with forced cleaner passes: every block of every
 *                        clone is a whole version of that block, never
 *                        newer than what had completed when the clone
 *                        returned, and the source ends exactly as written;
 *                        the live-byte recount matches, also reopened
 *   space_shared         space.shared (COIL_STATS_SHARED) is 0 without
 *                        clones, even with split extents; a clone adds its
 *                        source's stored bytes, divergent writes and a
 *                        removal take them back, and a reopen finds the
 *                        same figure (blobs matched by device offset)
 *   replay               clones in the journal (no checkpoint after them)
 *                        and in a delta checkpoint reopen exactly, clones of
 *                        clones and a clone renamed over its source too
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"
#include "tests/test_util.h"

#define MiB (1u << 20)

static void put(coil_store *s, const char *name, const uint8_t *src, size_t n,
		uint64_t off)
{
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	for (size_t at = 0; at < n; at += MiB) {
		size_t k = n - at < MiB ? n - at : MiB;

		cr_assert_eq(coil_pwrite(h, src + at, k, off + at), (int64_t)k);
	}
	cr_assert_eq(coil_obj_close(h), 0);
}

Test(clone, diverge, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "clone-diverge", NULL);
	size_t n = 3 * MiB + 1234;
	uint8_t *a = malloc(n), *b = malloc(n), small[3000];
	coil_obj *h;

	et_fill(a, n, 1, 1);
	put(s, "src", a, n, 0);
	/* a small write: its blob waits in memory for the packer */
	et_fill(small, sizeof(small), 2, 0);
	put(s, "src", small, sizeof(small), 4096 + 100);
	memcpy(a + 4096 + 100, small, sizeof(small));
	cr_assert_eq(coil_obj_clone(s, "src", "dst"), 0);
	memcpy(b, a, n);
	et_check_obj(s, "dst", b, n);
	/* writes to either diverge */
	et_fill(small, sizeof(small), 3, 0);
	put(s, "src", small, sizeof(small), 4096 + 200);
	memcpy(a + 4096 + 200, small, sizeof(small));
	et_fill(small, sizeof(small), 4, 0);
	put(s, "dst", small, sizeof(small), 2 * MiB);
	memcpy(b + 2 * MiB, small, sizeof(small));
	et_check_obj(s, "src", a, n);
	et_check_obj(s, "dst", b, n);
	/* a truncate of the source, then its removal */
	cr_assert_eq(coil_obj_open(s, "src", 0, &h), 0);
	cr_assert_eq(coil_obj_truncate(h, MiB), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	et_check_obj(s, "src", a, MiB);
	et_check_obj(s, "dst", b, n);
	cr_assert_eq(coil_obj_remove(s, "src"), 0);
	et_check_obj(s, "dst", b, n);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free(a);
	free(b);
}

struct space {
	uint64_t stored, shared, allocated;
};

static struct space space_of(coil_store *s)
{
	static char js[1 << 16];
	struct space sp;

	cr_assert_gt(coil_stats_json_flags(s, js, sizeof(js), COIL_STATS_SHARED),
		     0);
	sp.stored = json_u64(js, "\"space\"", "stored");
	sp.shared = json_u64(js, "\"space\"", "shared");
	sp.allocated = json_u64(js, "\"space\"", "allocated");
	/* the plain call has no walk and no field */
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_assert_null(strstr(js, "\"shared\""));
	return sp;
}

Test(clone, space_shared, .timeout = 60)
{
	const size_t n = 4 * MiB, piece = 64u << 10;
	char path[256], js[64];
	struct coil_options o;
	struct space before, cl, dv, after;
	coil_store *s;
	uint8_t *a = malloc(n), *b = malloc(n), *p = malloc(piece);

	et_path(path, sizeof(path), "clone-shared");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_stats_json_flags(s, js, sizeof(js), 0x2), -EINVAL);
	et_fill(a, n, 7, 0);
	put(s, "a", a, n, 0);
	/* split a's extents: one object's pieces of a blob are not shared */
	et_fill(p, piece, 8, 0);
	put(s, "a", p, piece, MiB + piece);
	memcpy(a + MiB + piece, p, piece);
	cr_assert_eq(coil_sync(s), 0);
	before = space_of(s);
	cr_assert_eq(before.shared, 0);
	cr_assert_geq(before.stored, n);

	cr_assert_eq(coil_obj_clone(s, "a", "b"), 0);
	memcpy(b, a, n);
	cl = space_of(s);
	cr_assert_eq(cl.stored, 2 * before.stored);
	cr_assert_eq(cl.shared, before.stored, "shared %llu, want %llu",
		     (unsigned long long)cl.shared,
		     (unsigned long long)before.stored);
	cr_assert_lt(cl.allocated, cl.stored);

	/* b diverges in its first MiB: that much is no longer shared */
	for (size_t off = 0; off < MiB; off += piece) {
		et_fill(p, piece, 100 + off, 0);
		put(s, "b", p, piece, off);
		memcpy(b + off, p, piece);
	}
	cr_assert_eq(coil_sync(s), 0);
	dv = space_of(s);
	cr_assert_eq(dv.shared, before.stored - MiB, "shared %llu",
		     (unsigned long long)dv.shared);

	/* reopened: the blobs are found shared again by their offsets */
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	after = space_of(s);
	cr_assert_eq(after.shared, dv.shared);
	cr_assert_eq(after.stored, dv.stored);
	et_check_obj(s, "a", a, n);
	et_check_obj(s, "b", b, n);

	cr_assert_eq(coil_obj_remove(s, "a"), 0);
	after = space_of(s);
	cr_assert_eq(after.shared, 0);
	et_check_obj(s, "b", b, n);
	cr_assert_eq(coil_close(s), 0);
	free(a);
	free(b);
	free(p);
}

Test(clone, errors, .timeout = 60)
{
	char path[256], longname[COIL_NAME_MAX + 2];
	coil_store *s = et_open(path, sizeof(path), "clone-errors", NULL);
	struct coil_options o;
	uint8_t buf[100] = { 1 };

	put(s, "a", buf, sizeof(buf), 0);
	put(s, "b", buf, sizeof(buf), 0);
	cr_assert_eq(coil_obj_clone(s, "missing", "c"), -ENOENT);
	cr_assert_eq(coil_obj_clone(s, "a", "b"), -EEXIST);
	cr_assert_eq(coil_obj_clone(s, "a", "a"), -EEXIST);
	cr_assert_eq(coil_obj_clone(s, "a", ""), -EINVAL);
	cr_assert_eq(coil_obj_clone(s, NULL, "c"), -EINVAL);
	cr_assert_eq(coil_obj_clone(NULL, "a", "c"), -EINVAL);
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	cr_assert_eq(coil_obj_clone(s, "a", longname), -ENAMETOOLONG);
	/* nothing of the failed clones exists */
	{
		coil_obj *h;
		cr_assert_eq(coil_obj_open(s, "c", 0, &h), -ENOENT);
	}
	cr_assert_eq(coil_close(s), 0);
	et_opts(&o, path);
	o.flags = COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_clone(s, "a", "c"), -EROFS);
	cr_assert_eq(coil_close(s), 0);
}

Test(clone, cleaner_relocates_shared_once, .timeout = 240)
{
	const size_t n = 8 * MiB, piece = 64u << 10;
	char path[256];
	struct coil_options o;
	coil_store *s;
	uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
	uint8_t *base = malloc(n), *p = malloc(piece);
	uint64_t x = 99, moved_log, moved_st, d;
	char *js = malloc(1 << 16);

	et_path(path, sizeof(path), "clone-clean");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(base, n, 5, 0);
	put(s, "a", base, n, 0);
	cr_assert_eq(coil_obj_clone(s, "a", "b"), 0);
	cr_assert_eq(coil_obj_clone(s, "b", "c"), 0);
	memcpy(a, base, n);
	memcpy(b, base, n);
	memcpy(c, base, n);
	/* Overwrite four fifths of each object, the same pieces in all three
	 * (each its own bytes): the old segments keep a fifth of their blobs,
	 * each mapped by all three objects, and become the cleaner's best
	 * victims (a shared blob's bytes count once per extent in the live
	 * bytes, so they look 60 % live). */
	for (size_t k = 0; k < n / piece; k++) {
		size_t off = k * piece;

		if (tu_xorshift(&x) % 5 == 0)
			continue;
		et_fill(p, piece, 1000 + k, 0);
		memcpy(a + off, p, piece);
		put(s, "a", p, piece, off);
		et_fill(p, piece, 2000 + k, 0);
		memcpy(b + off, p, piece);
		put(s, "b", p, piece, off);
		et_fill(p, piece, 3000 + k, 0);
		memcpy(c + off, p, piece);
		put(s, "c", p, piece, off);
	}
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	for (int i = 0; i < 8; i++)
		cr_assert_geq(cleaner_run_now(s, 4), 0);
	cr_assert(coil_stats_json(s, js, 1 << 16) > 0);
	moved_log = json_u64(js, "\"cleaner\"", "logical_bytes_cleaned");
	moved_st = json_u64(js, "\"cleaner\"", "bytes_cleaned");
	cr_log_info("cleaner moved %llu stored bytes for %llu logical",
		    (unsigned long long)moved_st,
		    (unsigned long long)moved_log);
	cr_assert_gt(moved_st, 0, "the cleaner moved nothing");
	/* Every shared blob moved once for the (up to) three extents that
	 * map it: well over the 1x a copy per extent would give. */
	cr_assert_geq(moved_log, 2 * moved_st,
		      "shared blobs were copied per object (%llu logical, "
		      "%llu stored)", (unsigned long long)moved_log,
		      (unsigned long long)moved_st);
	cr_assert_eq(cleaner_check_live(s), 0);
	et_check_obj(s, "a", a, n);
	et_check_obj(s, "b", b, n);
	et_check_obj(s, "c", c, n);
	cr_assert_eq(coil_close(s), 0);
	/* three objects of 8 MiB each, raw: far less than 24 MiB of data */
	d = et_disk_bytes(path);
	cr_log_info("store: %llu bytes on disk", (unsigned long long)d);

	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	et_check_obj(s, "a", a, n);
	et_check_obj(s, "b", b, n);
	et_check_obj(s, "c", c, n);
	for (int i = 0; i < 4; i++)
		cr_assert_geq(cleaner_run_now(s, 4), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	et_check_obj(s, "a", a, n);
	et_check_obj(s, "b", b, n);
	et_check_obj(s, "c", c, n);
	cr_assert_eq(coil_close(s), 0);
	free(a);
	free(b);
	free(c);
	free(base);
	free(p);
	free(js);
}

#define RBLK (64u << 10)
#define RNBLK 64u

/* A block's bytes for (block, version), its first 16 bytes naming both. */
static void rblock(uint8_t *p, uint64_t blk, uint64_t ver)
{
	et_fill(p, RBLK, blk * 7919u + ver, 1);
	memcpy(p, &blk, 8);
	memcpy(p + 8, &ver, 8);
}

struct racer {
	coil_store *s;
	coil_obj *h;
	_Atomic bool stop;
	/* per block: the newest version submitted and completed */
	_Atomic uint64_t done[RNBLK];
	_Atomic uint64_t sub[RNBLK];
	_Atomic int errors;
};

struct rwrite {
	struct racer *r;
	uint64_t blk, ver;
	struct counter *c;
	uint8_t buf[RBLK];
};

static void rwrite_cb(void *arg, int64_t res)
{
	struct rwrite *w = arg;
	uint64_t cur;

	if (res != (int64_t)RBLK)
		atomic_fetch_add(&w->r->errors, 1);
	cur = atomic_load(&w->r->done[w->blk]);
	while (cur < w->ver &&
	       !atomic_compare_exchange_weak(&w->r->done[w->blk], &cur, w->ver))
		;
	count_cb(w->c, 0);
	free(w);
}

static void *race_writer(void *arg)
{
	struct racer *r = arg;
	struct counter c = COUNTER_INIT;
	uint64_t x = 4242;

	while (!atomic_load(&r->stop)) {
		struct rwrite *w = malloc(sizeof(*w));
		uint64_t blk = tu_xorshift(&x) % RNBLK;

		w->r = r;
		w->blk = blk;
		w->ver = atomic_fetch_add(&r->sub[blk], 1) + 1;
		w->c = &c;
		rblock(w->buf, blk, w->ver);
		counter_add(&c);
		if (coil_write(r->h, w->buf, RBLK, blk * RBLK, rwrite_cb, w) != 0) {
			atomic_fetch_add(&r->errors, 1);
			count_cb(&c, 0);
			free(w);
		}
		counter_wait_below(&c, 1);
	}
	counter_wait(&c);
	return NULL;
}

static void *race_reader(void *arg)
{
	struct racer *r = arg;
	uint8_t *buf = malloc(RBLK);
	uint64_t x = 99;

	while (!atomic_load(&r->stop)) {
		uint64_t blk = tu_xorshift(&x) % RNBLK, b, v;

		if (coil_pread(r->h, buf, RBLK, blk * RBLK) != (int64_t)RBLK) {
			atomic_fetch_add(&r->errors, 1);
			continue;
		}
		memcpy(&b, buf, 8);
		memcpy(&v, buf + 8, 8);
		if (b != blk)
			atomic_fetch_add(&r->errors, 1);
	}
	free(buf);
	return NULL;
}

/* Every block of @name is a whole version of itself, at most @max[blk]. */
static void check_versions(coil_store *s, const char *name,
			   const uint64_t *max)
{
	uint8_t *buf = malloc(RBLK), *want = malloc(RBLK);
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0, "open %s", name);
	for (uint64_t blk = 0; blk < RNBLK; blk++) {
		uint64_t b, v;

		cr_assert_eq(coil_pread(h, buf, RBLK, blk * RBLK),
			     (int64_t)RBLK);
		memcpy(&b, buf, 8);
		memcpy(&v, buf + 8, 8);
		cr_assert_eq(b, blk, "%s: block %llu names block %llu", name,
			     (unsigned long long)blk, (unsigned long long)b);
		cr_assert_leq(v, max[blk], "%s: block %llu has version %llu, "
			      "newer than %llu", name, (unsigned long long)blk,
			      (unsigned long long)v,
			      (unsigned long long)max[blk]);
		rblock(want, blk, v);
		cr_assert(memcmp(buf, want, RBLK) == 0, "%s: block %llu torn",
			  name, (unsigned long long)blk);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	free(buf);
	free(want);
}

Test(clone, races, .timeout = 240)
{
	int rounds = (int)tu_scaled(200, 20);
	char path[256], name[32];
	struct coil_options o;
	struct racer r;
	pthread_t wt, rt;
	uint64_t max[RNBLK];
	uint8_t *buf = malloc(RBLK);

	memset(&r, 0, sizeof(r));
	et_path(path, sizeof(path), "clone-races");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &r.s), 0);
	cr_assert_eq(coil_obj_open(r.s, "src", COIL_CREATE, &r.h), 0);
	for (uint64_t blk = 0; blk < RNBLK; blk++) {
		rblock(buf, blk, 0);
		cr_assert_eq(coil_pwrite(r.h, buf, RBLK, blk * RBLK),
			     (int64_t)RBLK);
	}
	cr_assert_eq(pthread_create(&wt, NULL, race_writer, &r), 0);
	cr_assert_eq(pthread_create(&rt, NULL, race_reader, &r), 0);
	for (int i = 0; i < rounds; i++) {
		int rc;

		snprintf(name, sizeof(name), "c%d", i % 4);
		rc = coil_obj_clone(r.s, "src", name);
		cr_assert(rc == 0 || rc == -EEXIST, "clone: %d", rc);
		/* a write submitted after the clone returned is not in it */
		for (uint64_t blk = 0; blk < RNBLK; blk++)
			max[blk] = atomic_load(&r.sub[blk]);
		if (i % 3 == 0) {
			cr_assert_eq(coil_obj_rename(r.s, name, "keep", 0), 0);
			if (rc == 0)
				check_versions(r.s, "keep", max);
		} else if (i % 3 == 1 && rc == 0)
			cr_assert_eq(coil_obj_remove(r.s, name), 0);
		if (i % 5 == 0)
			cr_assert_geq(cleaner_run_now(r.s, 2), 0);
	}
	atomic_store(&r.stop, true);
	pthread_join(wt, NULL);
	pthread_join(rt, NULL);
	cr_assert_eq(atomic_load(&r.errors), 0);
	for (uint64_t blk = 0; blk < RNBLK; blk++)
		max[blk] = atomic_load(&r.done[blk]);
	check_versions(r.s, "keep", max);
	cr_assert_eq(coil_obj_close(r.h), 0);
	cr_assert_eq(cleaner_check_live(r.s), 0);
	cr_assert_eq(coil_close(r.s), 0);
	/* the source holds exactly the last version of every block */
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &r.s), 0);
	for (uint64_t blk = 0; blk < RNBLK; blk++) {
		uint8_t *want = malloc(RBLK);
		coil_obj *h;

		cr_assert_eq(coil_obj_open(r.s, "src", 0, &h), 0);
		cr_assert_eq(coil_pread(h, buf, RBLK, blk * RBLK),
			     (int64_t)RBLK);
		rblock(want, blk, atomic_load(&r.sub[blk]));
		cr_assert(memcmp(buf, want, RBLK) == 0, "src block %llu",
			  (unsigned long long)blk);
		cr_assert_eq(coil_obj_close(h), 0);
		free(want);
	}
	check_versions(r.s, "keep", max);
	cr_assert_eq(cleaner_check_live(r.s), 0);
	cr_assert_eq(coil_close(r.s), 0);
	free(buf);
}

struct replay_data {
	uint8_t *a, *b;
	size_t n;
	uint8_t small[5000];
};

static int child_pwrite(coil_store *s, const char *name, const uint8_t *p,
			size_t len, uint64_t off)
{
	coil_obj *h;
	int64_t r;

	if (coil_obj_open(s, name, COIL_CREATE, &h) != 0)
		return -1;
	r = coil_pwrite(h, p, len, off);
	if (coil_obj_close(h) != 0 || r != (int64_t)len)
		return -1;
	return 0;
}

static int replay_ops(coil_store *s, void *arg)
{
	struct replay_data *d = arg;

	if (child_pwrite(s, "a", d->a, d->n, 0) ||
	    coil_obj_clone(s, "a", "b") || coil_obj_clone(s, "b", "c") ||
	    child_pwrite(s, "b", d->small, sizeof(d->small), 777) ||
	    /* "c" (a's bytes) renamed over "a": a's old object is gone */
	    coil_obj_rename(s, "c", "a", 0) || coil_obj_clone(s, "a", "d"))
		return -1;
	return 0;
}

Test(clone, replay, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	struct replay_data d;
	coil_obj *h;

	d.n = 2 * MiB;
	d.a = malloc(d.n);
	d.b = malloc(d.n);
	et_path(path, sizeof(path), "clone-replay");
	et_opts(&o, path);
	et_fill(d.a, d.n, 7, 1);
	et_fill(d.small, sizeof(d.small), 8, 0);
	memcpy(d.b, d.a, d.n);
	memcpy(d.b + 777, d.small, sizeof(d.small));
	et_child_run(path, &o, replay_ops, &d, true);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_check_obj(s, "a", d.a, d.n);
	et_check_obj(s, "b", d.b, d.n);
	et_check_obj(s, "d", d.a, d.n);
	cr_assert_eq(coil_obj_open(s, "c", 0, &h), -ENOENT);
	cr_assert_eq(cleaner_check_live(s), 0);
	/* and through a checkpoint (a delta: the open wrote a base) */
	cr_assert_eq(coil_obj_clone(s, "d", "e"), 0);
	cr_assert_eq(coil_obj_rename(s, "e", "b", 0), 0);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_check_obj(s, "a", d.a, d.n);
	et_check_obj(s, "b", d.a, d.n);
	et_check_obj(s, "d", d.a, d.n);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free(d.a);
	free(d.b);
}
