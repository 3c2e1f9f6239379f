/* test_store_grow: a file store that starts small and grows.
 *
 *   starts_small_grows_and_reopens  a new default store takes at most
 *           64 MiB on disk; 96 MiB of writes grow it in steps; the count is
 *           in the superblock, the disk bytes stay near the data, and the
 *           content and the count come back after a reopen
 *   maximum_is_respected  a 40 MiB maximum: writes fail with -ENOSPC at the
 *           maximum, never a file past it, nothing lost, reopen exact
 *   version1_store_opens  a store whose superblocks are version 1 (the
 *           fixed layout every earlier coil wrote) opens, keeps its fixed
 *           segment count, takes writes and stays version 1
 *   unknown_features_refused  an incompat bit or a superblock version this
 *           coil does not know: -EPROTONOSUPPORT, nothing written; an
 *           unknown compat bit opens and is cleared
 *   powercut_at_every_growth_step  a step writes nothing (its count goes
 *           to disk with the next checkpoint); the fault seam cuts power at
 *           each I/O of the writes placed in the new segments, in every
 *           mode: the store opens with everything synced before, at a count
 *           between the old and the new (replay counts the segments that
 *           verified records use), grows again over the tail, reopens exact
 *   growth_fails_with_enospc  the file system refuses a step (fault seam):
 *           the write gets -ENOSPC, the store is not broken, the next write
 *           after the refusal ends grows it
 *   kill9_while_growing  a child grows a store with synced writes and is
 *           killed at random moments: every synced write comes back, and
 *           some kills fall between a step and the checkpoint recording it
 *   small_writes_journal_share  4 KiB writes (the journal carries their
 *           data) through a journal allocated in part: the ring wraps at
 *           its allocated end, its use as reported stays within what is
 *           allocated, the share grows past its 8 MiB start, and every page
 *           reads back after a reopen
 *   compact_gives_back_the_tail  removing the last-written object and
 *           compacting cuts the file; content exact, the store grows again
 *   powercut_during_compact  the fault seam cuts power at each I/O of a
 *           compaction: the store opens at the old or the new count with
 *           everything, and compacts and grows again
 * COIL_REL_SCALE scales the loops. */
#include <criterion/criterion.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/grow.h"
#include "engine/io/wreq.h"
#include "engine/log/journal.h"
#include "engine/store.h"
#include "format/format.h"
#include "tests/engine_test_util.h"
#include "tests/test_util.h"
#include "uring/uring_fault.h"

#define MiB (1ull << 20)

static uint64_t file_size(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

/* Write @n bytes of object @name (seeded content) in 1 MiB pieces from
 * offset 0; the first failure's code or 0; *@done: bytes written. */
static int64_t put(coil_store *s, const char *name, uint64_t n, uint64_t seed,
		   uint64_t *done)
{
	static uint8_t buf[1 << 20];
	coil_obj *h;
	int64_t rc = 0;
	uint64_t off;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	for (off = 0; off < n && rc >= 0; off += sizeof(buf)) {
		et_fill(buf, sizeof(buf), seed + off, 0);
		rc = coil_pwrite(h, buf, sizeof(buf), off);
		if (rc < 0)
			break;
		cr_assert_eq(rc, (int64_t)sizeof(buf));
	}
	if (done)
		*done = off;
	cr_assert_eq(coil_obj_close(h), 0);
	return rc < 0 ? rc : 0;
}

/* Object @name holds [0, n) of put's content for @seed. */
static void check(coil_store *s, const char *name, uint64_t n, uint64_t seed)
{
	static uint8_t buf[1 << 20], want[1 << 20];
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0, "%s", name);
	for (uint64_t off = 0; off < n; off += sizeof(buf)) {
		et_fill(want, sizeof(want), seed + off, 0);
		cr_assert_eq(coil_pread(h, buf, sizeof(buf), off),
			     (int64_t)sizeof(buf));
		cr_assert_eq(memcmp(buf, want, sizeof(buf)), 0, "%s at %llu",
			     name, (unsigned long long)off);
	}
	cr_assert_eq(coil_obj_close(h), 0);
}

/* Both superblock copies of the closed store at @path, decoded. */
static void read_supers(const char *path, struct fmt_super *a,
			struct fmt_super *b, uint8_t *raw)
{
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, raw, 2 * FMT_BLOCK, 0), 2 * FMT_BLOCK);
	close(fd);
	cr_assert_eq(fmt_super_decode(a, raw, FMT_BLOCK), 0);
	cr_assert_eq(fmt_super_decode(b, raw + FMT_BLOCK, FMT_BLOCK), 0);
}

/* Rewrite both superblock copies of the closed store at @path with @fn
 * applied to the raw bytes, re-checksummed. */
static void patch_supers(const char *path, void (*fn)(uint8_t *blk))
{
	uint8_t raw[2 * FMT_BLOCK];
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, raw, sizeof(raw), 0), (ssize_t)sizeof(raw));
	for (int i = 0; i < 2; i++) {
		uint8_t *p = raw + i * FMT_BLOCK;

		fn(p);
		coil_put_le64(p + FMT_SUPER_CSUM_OFF,
			      fmt_csum(p, FMT_SUPER_CSUM_OFF));
	}
	cr_assert_eq(pwrite(fd, raw, sizeof(raw), 0), (ssize_t)sizeof(raw));
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

static void opts(struct coil_options *o, uint64_t max)
{
	et_opts(o, NULL);
	o->size = max;
	o->compression = "none";
}

Test(store_grow, starts_small_grows_and_reopens, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	struct fmt_super a, b;
	uint8_t raw[2 * FMT_BLOCK];
	coil_store *s;
	uint32_t n0, n1;
	uint64_t d0, d1;

	et_path(path, sizeof(path), "grow-basic");
	opts(&o, 0); /* the default: no maximum but the file system */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert(s->grows);
	n0 = s->nseg;
	cr_assert_lt(n0, s->seg_cap);
	d0 = et_disk_bytes(path);
	cr_assert_leq(d0, 64 * MiB, "a new store takes %llu bytes",
		      (unsigned long long)d0);
	cr_assert_eq(put(s, "a", 96 * MiB, 1, NULL), 0);
	cr_assert_eq(coil_sync(s), 0);
	n1 = s->nseg;
	cr_assert_gt(n1, n0);
	cr_assert_gt(atomic_load(&s->st.grows), 0);
	/* A step writes no superblock: the next checkpoint records the
	 * count (read back from disk after the close below). */
	cr_assert_eq(atomic_load(&s->seg_count_grown), n1,
		     "the count in use is kept for the next superblock");
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	d1 = et_disk_bytes(path);
	/* data, at most a step and the low mark of free segments, the
	 * journal's share, checkpoints */
	cr_assert_leq(d1, 96 * MiB + GROW_STEP_BYTES + 16 * MiB,
		      "96 MiB of data take %llu bytes", (unsigned long long)d1);
	cr_assert_geq(file_size(path), (uint64_t)n1 * (1u << 20));
	read_supers(path, &a, &b, raw);
	cr_assert_eq(a.version, FMT_SUPER_VERSION);
	cr_assert_eq(a.incompat & ~FMT_INCOMPAT_CKPT_DELTA,
		     FMT_INCOMPAT_GROW | FMT_INCOMPAT_INLINE | FMT_INCOMPAT_JSECT |
			     FMT_INCOMPAT_BATCH | FMT_INCOMPAT_REWRITE);
	cr_assert_eq(COIL_MAX(a.seq, b.seq) == a.seq ? a.segment_count :
		     b.segment_count, n1);

	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(s->nseg, n1);
	check(s, "a", 96 * MiB, 1);
	cr_assert_eq(put(s, "b", 16 * MiB, 2, NULL), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "a", 96 * MiB, 1);
	check(s, "b", 16 * MiB, 2);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(store_grow, maximum_is_respected, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	uint64_t done = 0;
	int64_t rc;

	et_path(path, sizeof(path), "grow-max");
	opts(&o, 40 * MiB);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	rc = put(s, "a", 64 * MiB, 3, &done);
	cr_assert_eq(rc, -ENOSPC);
	cr_assert_gt(done, 8 * MiB);
	cr_assert_eq(s->nseg, s->seg_cap, "grew to the maximum");
	cr_assert_eq(atomic_load(&s->broken), 0);
	cr_assert_leq(file_size(path), 40 * MiB);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "a", done, 3);
	cr_assert_eq(coil_obj_remove(s, "a"), 0);
	cr_assert_eq(put(s, "b", 16 * MiB, 4, NULL), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

static void to_version1(uint8_t *p)
{
	coil_put_le32(p + 8, FMT_SUPER_VERSION_V1);
	memset(p + 160, 0, 16);
	/* An earlier coil's chunks ended on blocks.  After the clean close
	 * nothing follows the replay point, at the sector it is or at the
	 * next block. */
	coil_put_le64(p + 144, COIL_ALIGN_UP(coil_get_le64(p + 144), FMT_BLOCK) %
				       coil_get_le64(p + 56));
}

Test(store_grow, version1_store_opens, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	struct fmt_super a, b;
	uint8_t raw[2 * FMT_BLOCK];
	coil_store *s;
	uint32_t n;
	int64_t rc;

	/* The fixed layout every earlier coil wrote: COIL_ZERO_FILL still
	 * makes it; with its superblocks rewritten as version 1 it is byte
	 * for byte what an earlier coil left. */
	et_path(path, sizeof(path), "grow-v1");
	opts(&o, 24 * MiB);
	o.flags |= COIL_ZERO_FILL;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert(!s->grows);
	n = s->nseg;
	cr_assert_eq(put(s, "a", 4 * MiB, 5, NULL), 0);
	/* an earlier coil wrote whole checkpoints only */
	pthread_mutex_lock(&s->mlock);
	s->ck_base_next = true;
	pthread_mutex_unlock(&s->mlock);
	cr_assert_eq(coil_close(s), 0);
	patch_supers(path, to_version1);

	o.flags &= ~(COIL_CREATE | COIL_ZERO_FILL);
	/* read-only: read as it is, nothing written */
	o.flags |= COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(s->sb.version, FMT_SUPER_VERSION_V1);
	check(s, "a", 4 * MiB, 5);
	cr_assert_eq(coil_close(s), 0);
	read_supers(path, &a, &b, raw);
	cr_assert_eq(a.version, FMT_SUPER_VERSION_V1, "a read-only open converts nothing");
	o.flags &= ~COIL_RDONLY;
	/* read-write: converted to version 2 with the in-memory blob feature
	 * (small writes), its fixed layout kept */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(s->sb.version, FMT_SUPER_VERSION);
	/* and its first checkpoint, a delta after the base it loaded */
	cr_assert_eq(s->sb.incompat,
		     FMT_INCOMPAT_INLINE | FMT_INCOMPAT_CKPT_DELTA |
			     FMT_INCOMPAT_JSECT | FMT_INCOMPAT_BATCH |
			     FMT_INCOMPAT_REWRITE);
	cr_assert(!s->grows, "a version 1 store keeps its fixed count");
	cr_assert_eq(s->nseg, n);
	check(s, "a", 4 * MiB, 5);
	rc = put(s, "b", 64 * MiB, 6, NULL);
	cr_assert_eq(rc, -ENOSPC, "full at its fixed size, not grown");
	cr_assert_eq(s->nseg, n);
	cr_assert_eq(coil_close(s), 0);
	read_supers(path, &a, &b, raw);
	cr_assert_eq(COIL_MAX(a.seq, b.seq) == a.seq ? a.version : b.version,
		     FMT_SUPER_VERSION, "converted");
	cr_assert_eq(a.segment_count, n);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "a", 4 * MiB, 5);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

static void add_incompat(uint8_t *p)
{
	coil_put_le64(p + 168, coil_get_le64(p + 168) | (1ull << 13));
}

static void later_version(uint8_t *p)
{
	coil_put_le32(p + 8, FMT_SUPER_VERSION + 1);
}

static void add_compat(uint8_t *p)
{
	coil_put_le64(p + 160, 1ull << 21);
}

/* The whole file, for "nothing was written". */
static uint8_t *slurp(const char *path, size_t *n)
{
	size_t len = (size_t)file_size(path);
	uint8_t *p = malloc(len);
	int fd = open(path, O_RDONLY);

	cr_assert_not_null(p);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, p, len, 0), (ssize_t)len);
	close(fd);
	*n = len;
	return p;
}

Test(store_grow, unknown_features_refused, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	struct fmt_super a, b;
	uint8_t raw[2 * FMT_BLOCK];
	void (*refused[])(uint8_t *) = { add_incompat, later_version };
	coil_store *s;

	et_path(path, sizeof(path), "grow-feat");
	opts(&o, 32 * MiB);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(put(s, "a", 2 * MiB, 7, NULL), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	for (size_t i = 0; i < COIL_ARRAY_LEN(refused); i++) {
		uint8_t *before, *after;
		size_t n0, n1;

		patch_supers(path, refused[i]);
		before = slurp(path, &n0);
		s = NULL;
		cr_assert_eq(coil_open(path, &o, &s), -COIL_EFEATURE, "case %zu", i);
		cr_assert_null(s);
		o.flags |= COIL_RDONLY;
		cr_assert_eq(coil_open(path, &o, &s), -EPROTONOSUPPORT);
		o.flags &= ~COIL_RDONLY;
		cr_assert_str_neq(coil_strerror(-COIL_EFEATURE), "unknown error");
		after = slurp(path, &n1);
		cr_assert_eq(n0, n1);
		cr_assert_eq(memcmp(before, after, n0), 0, "nothing written");
		free(before);
		free(after);
		/* put it back as this coil wrote it */
		unlink(path);
		opts(&o, 32 * MiB);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		cr_assert_eq(put(s, "a", 2 * MiB, 7, NULL), 0);
		cr_assert_eq(coil_close(s), 0);
		o.flags &= ~COIL_CREATE;
	}

	/* an unknown compat bit: opens, and this coil's writes clear it */
	patch_supers(path, add_compat);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "a", 2 * MiB, 7);
	cr_assert_eq(coil_close(s), 0);
	read_supers(path, &a, &b, raw);
	cr_assert_eq(a.compat | b.compat, 0);
	unlink(path);
}

/* Power cut at the @k-th I/O after a growth step started by hand (the
 * writes placed in the new segments), mode @mode: the store opens with
 * what was synced, at a count from the old to the new, and grows again
 * over the crash's tail. */
static void cut_growth(const char *path, struct coil_options *o, uint64_t k,
		       int mode, uint64_t seed)
{
	struct uring_fault_spec spec;
	coil_store *s;
	uint32_t n0;
	int rc;

	memset(&spec, 0, sizeof(spec));
	spec.record = true;
	uring_fault_set_next(&spec);
	cr_assert_eq(coil_open(path, o, &s), 0);
	n0 = s->nseg;
	spec.cut_kind = URING_FAULT_ANY;
	spec.cut_nth = k;
	spec.cut_mode = mode;
	spec.cut_seed = seed;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &spec), 0);
	rc = grow_step(s, 4);
	if (rc > 0) {
		/* the cut is after the step: it lands in the writes */
		static uint8_t buf[1 << 20];
		coil_obj *h;

		if (coil_obj_open(s, "late", COIL_CREATE, &h) == 0) {
			for (uint64_t off = 0; off < 4 * MiB; off += sizeof(buf))
				if (coil_pwrite(h, buf, sizeof(buf), off) < 0)
					break;
			coil_sync(s);
			coil_obj_close(h);
		}
	}
	cr_assert(uring_fault_is_cut(uring_fault_last()) || rc > 0,
		  "k %llu: rc %d", (unsigned long long)k, rc);
	coil_close(s);
	uring_fault_set_next(NULL);

	cr_assert_eq(coil_open(path, o, &s), 0, "k %llu mode %d",
		     (unsigned long long)k, mode);
	cr_assert(s->nseg >= n0 && s->nseg <= n0 + 4, "count %u after a cut "
		  "growing %u", s->nseg, n0);
	check(s, "base", 8 * MiB, 8);
	cr_assert_eq(cleaner_check_live(s), 0);
	/* grows again, over whatever tail the cut left */
	cr_assert_gt(grow_step(s, 4), 0);
	cr_assert_eq(put(s, "after", 2 * MiB, 10, NULL), 0);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, o, &s), 0);
	check(s, "base", 8 * MiB, 8);
	check(s, "after", 2 * MiB, 10);
	cr_assert_eq(coil_obj_remove(s, "after"), 0);
	coil_obj_remove(s, "late");
	cr_assert_eq(coil_close(s), 0);
}

Test(store_grow, powercut_at_every_growth_step, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	uint64_t seed = 0x9e0 ^ (uint64_t)time(NULL);
	/* a step does no I/O: every cut lands in the writes after it (data
	 * and journal chunks of four 1 MiB writes, then the sync) */
	uint64_t kmax = tu_scale() < 0.5 ? 6 : 9;

	et_path(path, sizeof(path), "grow-cut");
	opts(&o, 0);
	o.size = 512 * MiB; /* room for every step */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(put(s, "base", 8 * MiB, 8, NULL), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	for (uint64_t k = 1; k <= kmax; k++)
		for (int mode = URING_CUT_DROP_ALL; mode <= URING_CUT_TORN; mode++)
			cut_growth(path, &o, k, mode, tu_xorshift(&seed));
	unlink(path);
}

Test(store_grow, growth_fails_with_enospc, .timeout = 120)
{
	char path[256], js[8192];
	struct coil_options o;
	coil_store *s;
	uint64_t done = 0;
	uint32_t n;

	et_path(path, sizeof(path), "grow-enospc");
	opts(&o, 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(put(s, "a", 8 * MiB, 11, NULL), 0);
	atomic_store(&s->fault_grow_errno, ENOSPC);
	usleep(300 * 1000); /* a step the cleaner's tick began is over */
	n = s->nseg;
	cr_assert_eq(put(s, "b", 64 * MiB, 12, &done), -ENOSPC);
	cr_assert_eq(s->nseg, n, "no step was taken: %u -> %u", n, s->nseg);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_assert_eq(json_u64(js, "\"store\"", "broken"), 0);
	cr_assert_gt(json_u64(js, "\"space\"", "grow_failures"), 0);
	check(s, "a", 8 * MiB, 11);
	check(s, "b", done, 12);
	/* space is back */
	atomic_store(&s->fault_grow_errno, 0);
	cr_assert_eq(put(s, "b", 64 * MiB, 12, NULL), 0);
	cr_assert_gt(s->nseg, n);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "a", 8 * MiB, 11);
	check(s, "b", 64 * MiB, 12);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* ---- kill -9 while growing ---- */

struct progress {
	volatile uint64_t synced; /* bytes of "g" durable */
	volatile uint64_t nseg;
};

static void child(const char *path, struct coil_options *o,
		  struct progress *pr)
{
	static uint8_t buf[1 << 20];
	coil_store *s;
	coil_obj *h;

	if (coil_open(path, o, &s) < 0)
		_exit(3);
	if (coil_obj_open(s, "g", COIL_CREATE, &h) < 0)
		_exit(4);
	for (uint64_t off = pr->synced;; off += sizeof(buf)) {
		if (off >= 320 * MiB)
			pause(); /* the maximum is near: wait for the kill */
		et_fill(buf, sizeof(buf), 77 + off, 0);
		if (coil_pwrite(h, buf, sizeof(buf), off) != (int64_t)sizeof(buf))
			_exit(5);
		if (coil_sync(s) < 0)
			_exit(6);
		pr->synced = off + sizeof(buf);
		pr->nseg = s->nseg;
	}
}

Test(store_grow, kill9_while_growing, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	struct progress *pr = mmap(NULL, sizeof(*pr), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t seed = 0x419 ^ (uint64_t)time(NULL);
	int cycles = (int)tu_scaled(10, 3);
	uint64_t replayed = 0;
	uint32_t n0, grew = 0;
	coil_store *s;

	cr_assert_neq(pr, MAP_FAILED);
	et_path(path, sizeof(path), "grow-kill");
	opts(&o, 0);
	o.size = 512 * MiB;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	n0 = s->nseg;
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	pr->synced = 0;
	for (int c = 0; c < cycles; c++) {
		uint64_t before = pr->synced, nbefore = pr->nseg;
		pid_t pid = fork();
		int st;

		cr_assert_geq(pid, 0);
		if (pid == 0)
			child(path, &o, pr);
		/* a sanitizer build is several times slower: longer lives */
		usleep((useconds_t)((200000 + tu_xorshift(&seed) % 400000) *
				    (tu_scale() < 0.5 ? 4 : 1)));
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFSIGNALED(st), "child exited %d", WEXITSTATUS(st));
		cr_assert_eq(coil_open(path, &o, &s), 0, "cycle %d", c);
		/* Segments grown after the last checkpoint are known from
		 * the records that use them (replay raises the count); the
		 * open's checkpoint records what replay found. */
		replayed += atomic_load(&s->st.grow_replayed);
		if (pr->nseg > nbefore && nbefore)
			grew++; /* grew this cycle after a synced write */
		cr_assert_geq(s->sb.segment_count, s->nseg);
		if (pr->synced) /* else it may have died before making "g" */
			check(s, "g", pr->synced, 77);
		cr_assert_eq(cleaner_check_live(s), 0);
		cr_assert_eq(coil_close(s), 0);
		cr_log_info("cycle %d: %llu -> %llu MiB synced, %u segments", c,
			    (unsigned long long)(before >> 20),
			    (unsigned long long)(pr->synced >> 20),
			    (unsigned)pr->nseg);
	}
	cr_assert(tu_scale() < 0.5 || pr->nseg > n0,
		  "the store grew past its start (%u segments)", n0);
	cr_log_info("replay raised the segment count %llu times; %u cycles "
		    "grew the store", (unsigned long long)replayed, grew);
	/* a kill in a cycle that grew the store falls between a step and
	 * the checkpoint recording it unless a checkpoint came last */
	cr_assert(grew < 2 || replayed > 0, "no kill after a growth step was "
		  "replayed past the superblock's count (%u cycles grew)", grew);
	munmap(pr, sizeof(*pr));
	unlink(path);
}

/* ---- the journal's share under small writes ---- */

/* An asynchronous 4 KiB write in flight (small_writes_journal_share). */
struct aslot {
	uint8_t page[4096];
	uint32_t p;		/* its page; UINT32_MAX when idle */
	_Atomic int done;
	int64_t res;
};

static void aslot_cb(void *arg, int64_t res)
{
	struct aslot *a = arg;

	a->res = res;
	atomic_store(&a->done, 1);
}

static void aslot_wait(struct aslot *a)
{
	if (a->p == UINT32_MAX)
		return;
	while (!atomic_load(&a->done))
		sched_yield();
	cr_assert_eq(a->res, (int64_t)sizeof(a->page), "page %u: %lld", a->p,
		     (long long)a->res);
	a->p = UINT32_MAX;
}

Test(store_grow, small_writes_journal_share, .timeout = 120)
{
	char path[256], js[8192];
	struct coil_options o;
	static uint8_t page[4096], got[4096];
	static uint32_t last[8192]; /* the write each page holds */
	static struct aslot sl[ENGINE_INLINE_DEPTH_MAX];
	/* as deep as a writer whose raw pages still go through the journal
	 * (deeper, they take the segment path: io/write.c) */
	const uint32_t depth = ENGINE_INLINE_DEPTH_MAX;
	uint32_t npages = 8192, nwrites = (uint32_t)tu_scaled(40000, 12000);
	uint64_t seed = 0x5a11, used, jalloc0, jalloc;
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "grow-journal");
	opts(&o, 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	jalloc0 = s->j_alloc;
	cr_assert_eq(coil_obj_open(s, "pages", COIL_CREATE, &h), 0);
	for (uint32_t k = 0; k < depth; k++)
		sl[k].p = UINT32_MAX;
	/* every page once, then random overwrites, @depth in flight: 4 KiB
	 * records, many times the allocated ring, faster than the packer
	 * takes them */
	for (uint32_t i = 0; i < npages + nwrites; i++) {
		uint32_t p = i < npages ? i :
			     (uint32_t)(tu_xorshift(&seed) % npages);
		struct aslot *a = &sl[i % depth];

		aslot_wait(a);
		for (uint32_t k = 0; k < depth; k++)
			if (sl[k].p == p) /* one write a page in flight */
				aslot_wait(&sl[k]);
		last[p] = i;
		et_fill(a->page, sizeof(a->page), ((uint64_t)i << 20) | p, 0);
		a->p = p;
		atomic_store(&a->done, 0);
		cr_assert_eq(coil_write(h, a->page, sizeof(a->page),
					(uint64_t)p * sizeof(a->page),
					aslot_cb, a), 0);
		if (i % 64 == 0) {
			uint64_t len, al;

			/* the bytes an early wrap skips are distance, not
			 * use (they made every retire trigger a checkpoint) */
			journal_usage(s, &used, &len);
			pthread_mutex_lock(&s->jlock);
			al = s->j_alloc;
			pthread_mutex_unlock(&s->jlock);
			cr_assert_leq(used, al, "write %u: journal use %llu of "
				      "%llu allocated", i,
				      (unsigned long long)used,
				      (unsigned long long)al);
		}
	}
	for (uint32_t k = 0; k < depth; k++)
		aslot_wait(&sl[k]);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	pthread_mutex_lock(&s->jlock);
	jalloc = s->j_alloc;
	pthread_mutex_unlock(&s->jlock);
	cr_log_info("journal share %llu -> %llu MiB, %llu checkpoints",
		    (unsigned long long)(jalloc0 >> 20),
		    (unsigned long long)(jalloc >> 20),
		    (unsigned long long)json_u64(js, "\"checkpoint\"", "count"));
	cr_assert_lt(jalloc, s->sb.journal_len, "the ring is allocated in part");
	cr_assert_geq(jalloc, jalloc0);
	/* Checkpoints that carry a backlog of in-memory blobs get journal
	 * room for it (grow.c).  Whether this loop outruns the packer is the
	 * machine's to say, so the rule is asked directly: the target as if
	 * the last checkpoint had carried its metadata alone, then 4 MiB of
	 * blobs beyond it.  So is the writers' rate (s->j_rate, which the
	 * checkpoint thread measures). */
	{
		uint32_t nseg;
		uint64_t meta = atomic_load(&s->st.ckpt_last_meta);
		uint64_t all = atomic_load(&s->st.ckpt_last_bytes);
		uint64_t rate = atomic_load(&s->j_rate), t0, t1, t2, quarter;

		pthread_mutex_lock(&s->mlock);
		nseg = s->nseg;
		pthread_mutex_unlock(&s->mlock);
		/* the backlog rule alone: no write rate */
		atomic_store(&s->j_rate, 0);
		atomic_store(&s->st.ckpt_last_bytes, meta);
		t0 = grow_journal_target(s, nseg);
		atomic_store(&s->st.ckpt_last_bytes, meta + (4ull << 20));
		t1 = grow_journal_target(s, nseg);
		atomic_store(&s->st.ckpt_last_bytes, all);
		cr_assert_geq(t1, COIL_MIN(32ull << 20, s->sb.journal_len),
			      "a 4 MiB backlog: target %llu",
			      (unsigned long long)t1);
		cr_assert_gt(t1, t0, "the share grows with a backlog");
		/* The rate rule: twice a second's journal bytes, up to a
		 * quarter of the segments, within the ring.  From the target
		 * without a backlog or a rate (t0), a rate of half of it and
		 * 1 MiB more asks for 2 MiB beyond it. */
		quarter = (uint64_t)nseg * s->sb.segment_size / 4;
		atomic_store(&s->st.ckpt_last_bytes, meta);
		atomic_store(&s->j_rate, t0 / 2 + (1ull << 20));
		t1 = grow_journal_target(s, nseg);
		cr_assert_geq(t1, COIL_MIN(COIL_MIN(t0 + (2ull << 20), quarter),
					   s->sb.journal_len),
			      "%llu B/s: target %llu (%llu without)",
			      (unsigned long long)(t0 / 2 + (1ull << 20)),
			      (unsigned long long)t1, (unsigned long long)t0);
		cr_log_info("rate rule: without %llu, with %llu, quarter %llu",
			    (unsigned long long)t0, (unsigned long long)t1,
			    (unsigned long long)quarter);
		cr_assert_gt(quarter, t0 + (2ull << 20),
			     "this store's segments leave the rule room");
		cr_assert_gt(t1, t0, "the share grows with the rate");
		atomic_store(&s->j_rate, UINT64_MAX / 4);
		t2 = grow_journal_target(s, nseg);
		cr_assert_leq(t2, COIL_MAX(COIL_ALIGN_UP(quarter, 1ull << 20),
					   t0),
			      "a rate beyond the store: target %llu, a quarter "
			      "of the segments %llu", (unsigned long long)t2,
			      (unsigned long long)quarter);
		cr_assert_geq(t2, t1);
		cr_assert_leq(t2, s->sb.journal_len);
		atomic_store(&s->st.ckpt_last_bytes, all);
		atomic_store(&s->j_rate, rate);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	for (uint32_t p = 0; p < npages; p++) {
		et_fill(page, sizeof(page), ((uint64_t)last[p] << 20) | p, 0);
		cr_assert_eq(coil_pread(h, got, sizeof(got),
					(uint64_t)p * sizeof(got)),
			     (int64_t)sizeof(got));
		cr_assert_eq(memcmp(got, page, sizeof(got)), 0, "page %u", p);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* ---- compaction ---- */

/* "b" first, then "a" at the end of the file: removing "a" frees the
 * tail. */
/* A store that grew for @a_mib MiB of "a" that is then removed: its tail
 * is free for compaction (48 MiB: one growth step to give back). */
static void compact_setup_order(const char *path, struct coil_options *o,
				uint64_t a_mib, bool b_last)
{
	coil_store *s;

	cr_assert_eq(coil_open(path, o, &s), 0);
	if (!b_last)
		cr_assert_eq(put(s, "b", 8 * MiB, 21, NULL), 0);
	cr_assert_eq(put(s, "a", a_mib * MiB, 22, NULL), 0);
	if (b_last)
		cr_assert_eq(put(s, "b", 8 * MiB, 21, NULL), 0);
	cr_assert_eq(coil_obj_remove(s, "a"), 0);
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
}

static void compact_setup(const char *path, struct coil_options *o,
			  uint64_t a_mib)
{
	compact_setup_order(path, o, a_mib, false);
}

/* Compact @s, open at @path and holding "b" (8 MiB) below 96 MiB of free
 * space, and close it: the data area shrank by more than 64 MiB, "b" reads
 * back and the live counts hold; the file then takes at most 64 MiB.
 * @return its allocated bytes. */
static uint64_t compact_to_b(const char *path, coil_store *s)
{
	uint32_t n0 = s->nseg;
	uint64_t got = 0, d;

	cr_assert_eq(coil_compact(s, &got), 0);
	cr_assert_lt(s->nseg, n0);
	cr_assert_eq(s->sb.segment_count, s->nseg);
	cr_assert_eq(file_size(path), s->sb.data_off +
		     (uint64_t)s->nseg * s->sb.segment_size);
	cr_assert_gt(got, 64 * MiB, "gave back %llu", (unsigned long long)got);
	check(s, "b", 8 * MiB, 21);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	d = et_disk_bytes(path);
	cr_assert_leq(d, 64 * MiB, "after compaction: %llu bytes",
		      (unsigned long long)d);
	return d;
}

/* "a" first and "b" after it: removing "a" frees the front, and "b" holds
 * the end of the file until compaction moves it down. */
Test(store_grow, compact_moves_data_down, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	uint64_t d0, d1;

	et_path(path, sizeof(path), "grow-compact-move");
	opts(&o, 0);
	o.size = 512 * MiB;
	compact_setup_order(path, &o, 96, true);
	d0 = et_disk_bytes(path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	d1 = compact_to_b(path, s);
	cr_assert_lt(d1, d0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "b", 8 * MiB, 21);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(put(s, "c", 32 * MiB, 23, NULL), 0);
	check(s, "c", 32 * MiB, 23);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Compaction in the session that removed "a": its segments are still
 * PENDING (freed by the next checkpoint), and the moves need them FREE to
 * move "b" into.  Before compaction settled them first, it moved nothing
 * here and gave back only holes. */
Test(store_grow, compact_right_after_remove, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;

	et_path(path, sizeof(path), "grow-compact-now");
	opts(&o, 0);
	o.size = 512 * MiB;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(put(s, "a", 96 * MiB, 22, NULL), 0);
	cr_assert_eq(put(s, "b", 8 * MiB, 21, NULL), 0);
	cr_assert_eq(coil_obj_remove(s, "a"), 0);
	(void)compact_to_b(path, s);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "b", 8 * MiB, 21);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(store_grow, compact_gives_back_the_tail, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	uint64_t got = 0, d0, d1;

	et_path(path, sizeof(path), "grow-compact");
	opts(&o, 0);
	o.size = 512 * MiB;
	compact_setup(path, &o, 96);
	d0 = et_disk_bytes(path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	d1 = compact_to_b(path, s);
	cr_assert_lt(d1, d0);
	/* reopens exact, grows again */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "b", 8 * MiB, 21);
	cr_assert_eq(put(s, "c", 64 * MiB, 23, NULL), 0);
	cr_assert_eq(coil_compact(s, &got), 0); /* nothing at the end is free */
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check(s, "b", 8 * MiB, 21);
	check(s, "c", 64 * MiB, 23);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(store_grow, powercut_during_compact, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	uint64_t seed = 0xc0de ^ (uint64_t)time(NULL);
	/* compaction: a sync, the relocation of what lies at the end (its
	 * reads, writes, journal entry, the checkpoint after it), up to
	 * three checkpoints (each a write, a flush, two superblock writes
	 * with a flush each), the last one's, then the cut */
	uint64_t kmax = tu_scale() < 0.5 ? 8 : 24;

	et_path(path, sizeof(path), "grow-compact-cut");
	for (uint64_t k = 1; k <= kmax; k++) {
		struct uring_fault_spec spec;
		int mode = URING_CUT_DROP_ALL + (int)(k % 3);
		coil_store *s;
		uint64_t got;
		uint32_t n0;

		unlink(path);
		opts(&o, 0);
		o.size = 512 * MiB;
		/* every other run: live data to move down first */
		compact_setup_order(path, &o, 48, k % 2 == 0);
		memset(&spec, 0, sizeof(spec));
		spec.record = true;
		uring_fault_set_next(&spec);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		n0 = s->nseg;
		spec.cut_kind = URING_FAULT_ANY;
		spec.cut_nth = k;
		spec.cut_mode = mode;
		spec.cut_seed = tu_xorshift(&seed);
		cr_assert_eq(uring_fault_arm(uring_fault_last(), &spec), 0);
		(void)coil_compact(s, &got);
		coil_close(s);
		uring_fault_set_next(NULL);

		cr_assert_eq(coil_open(path, &o, &s), 0, "k %llu",
			     (unsigned long long)k);
		cr_assert_leq(s->nseg, n0);
		cr_assert_geq(file_size(path), s->sb.data_off +
			      (uint64_t)s->nseg * s->sb.segment_size);
		check(s, "b", 8 * MiB, 21);
		cr_assert_eq(cleaner_check_live(s), 0);
		cr_assert_eq(coil_compact(s, &got), 0);
		cr_assert_eq(put(s, "c", 8 * MiB, 24, NULL), 0);
		cr_assert_eq(coil_close(s), 0);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		check(s, "b", 8 * MiB, 21);
		check(s, "c", 8 * MiB, 24);
		cr_assert_eq(coil_close(s), 0);
	}
	unlink(path);
}
