/* test_rel_optimize: the optimizer (coil_optimize) never changes what an
 * object holds, across power cuts and kill -9 (docs/reliability.md, row
 * "optimizer").
 *
 * Both tests start from a store image built from the seed: eight objects
 * (a ninth, c1, is made by the foreground's changes) in 8 KiB blobs
 * (so ~170 KiB, what zstd-19 gets through quickly, are many blobs,
 * extents and records).  Text that zstd-1 (the default) leaves room on,
 * written whole and in unaligned pieces, overwritten in part; a clone
 * (coil_obj_clone) that then diverges while its source is truncated;
 * incompressible bytes (scanned, no gain); small unaligned writes (kept
 * in memory, then packed) and a raw stretch among text; and bytes zstd-1
 * often stores raw that zstd-19 often shrinks, with the first sector of
 * two blobs overwritten (a raw blob's live run of sectors is then
 * rewritten alone); and a page store's object, 1 KiB pages written one
 * by one at shuffled offsets, half of them packed into an earlier segment
 * than the rest (the pass merges each window's pages into one blob, its
 * members in victims and in segments it did not pick).  Junk written and
 * removed between them
 * spreads them over four sealed segments, so a pass has several victims.
 * The parent keeps every object's bytes.  A crash at any moment of a pass
 * must leave every object — which exist, sizes, every byte — exactly as
 * in the image (the optimizer's REWRITE pairs install by compare-and-
 * swap, live and in replay), a store whose checksums and accounting agree
 * (coil_check: a scrub of every referenced blob, then every segment's live
 * bytes, the extent, byte and stored totals and the blob references
 * against a walk of the maps; cleaner_check_live), and a pass that can be
 * finished after it.
 *
 *   optimize_powercut  a session (open, coil_optimize until it returns 0,
 *                      coil_sync, close) is run from the image once per
 *                      ring op index k, the seam cutting power at op k
 *                      (drop all, random, torn, in turn) until a run
 *                      finishes uncut; a quarter of the cuts are followed
 *                      by one inside the recovery.  Two series per image:
 *                      the call with NULL options (the whole pass in one
 *                      call), and calls with a one-segment budget (a
 *                      checkpoint after each, so most cuts leave a pass
 *                      half done) during which the foreground, while the
 *                      pass holds at its first batch (cleaner_optimize_
 *                      hook), clones one object (the clone keeps the old
 *                      blobs the pass goes on to rewrite for its source),
 *                      overwrites part of it, writes a few bytes into
 *                      c0's source, overwrites a page of pg, truncates a
 *                      third, removes a fourth and syncs — so the rest of the pass carries stale
 *                      rewrites, which the compare-and-swap must refuse
 *                      live and in replay; the second series starts after
 *                      open (its open is the first's, op for op).  After each cut: open
 *                      (I4), every object exact (in the second series each
 *                      changed object wholly before or after its change,
 *                      and after it once the sync returned), coil_check
 *                      clean; then coil_optimize to 0 on the recovered
 *                      store (a half-done pass resumes, no candidate fails
 *                      its check), a further call scans nothing, every
 *                      object as found and coil_check clean again, a clean
 *                      close, and (every eighth cut) a read-only reopen
 *                      that must still hold every byte.  Below
 *                      COIL_REL_SCALE 0.3 (the sanitizer pass) only every
 *                      (0.3 / scale)-th op, from a random first one
 *   optimize_kill9     a forked child opens the store (recovering what the
 *                      last one left) and runs coil_optimize with a one-
 *                      segment budget in a loop on one thread, while its
 *                      main thread — half the children — first makes the
 *                      second series' changes a moment into the pass
 *                      (racing it; made again by a later child they write
 *                      the same bytes anew), then clones the checked
 *                      objects into extra objects, writes text and junk
 *                      into those (new work for the optimizer, and clones
 *                      that diverge from the blobs the pass is rewriting),
 *                      truncates and removes them, and syncs now and then;
 *                      SIGKILL after a random delay: a third of the time
 *                      inside open and recovery, else 1-300 ms after the
 *                      child's first optimizer call started (or, half of
 *                      those, returned).  Every third cycle is left
 *                      unchecked, so the next child's open recovers it and
 *                      may itself be killed; after every fifth check the
 *                      image is put back, so the checked objects are
 *                      optimized again.  Checked: every checked object
 *                      exact — in its changed state once a change's write
 *                      returned (kill -9 keeps it) or the change was seen,
 *                      else either — no unknown object listed, coil_check
 *                      clean.  At the end coil_optimize runs to 0, a
 *                      second call scans nothing, and a read-only reopen
 *                      holds every byte
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/io/recode.h"
#include "engine/pack.h"
#include "tests/rel/rel.h"
#include "tests/test_util.h"
#include "uring/uring_fault.h"

#define KiB (1u << 10)
#define NOBJ 9
#define NEXTRA 4
#define OBJ_MAX (128u * KiB)
#define BLOB (8u * KiB)            /* coil_options.max_blob */
#define SPACER (1024u * KiB)

/* the checked objects; the kill test's child adds extras "x0".."x3" */
static const char *names[NOBJ] = { "t0", "t1/dir", "t2 space", "c0", "raw",
				   "mix", "marg", "c1", "pg" };
/* the objects the foreground's changes touch (fg_apply); c1 is made by
 * them, a clone of t2 */
#define FG_MASK ((1u << 0) | (1u << 1) | (1u << 2) | (1u << 5) | (1u << 7) | \
		 (1u << 8))
/* pg: a page store's object, 1 KiB pages (small: less than half of BLOB)
 * written one by one at shuffled offsets, in two halves packed into two
 * segments; the optimizer merges each 8 KiB window's pages into a blob */
#define PG_PAGE 1024u
#define PG_PAGES 32u
static const char *extra[NEXTRA] = { "x0", "x1", "x2", "x3" };

/* ---- data ------------------------------------------------------------------ */

/* Text that zstd-1 leaves room on (tests/test_optimize.c): words from a
 * small vocabulary with numbers in between, like source code or logs. */
/* This file's text (tests/test_util.h), one stream per seed. */
static void text_fill(uint8_t *p, size_t n, uint64_t seed)
{
	tu_text_fill(p, n, rel_mix(seed) | 1);
}

/* Bytes no compressor shrinks (raw blobs). */
static void junk_fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t st = rel_mix(seed ^ 0x6a756e6b);

	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rel_rng(&st);

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Bytes zstd-1 barely shrinks and often stores raw (it must save an
 * eighth), which zstd-19 often does shrink: chunks of text among random
 * ones.  The optimizer then turns raw blobs — and runs of live sectors of
 * raw blobs partly overwritten — into compressed ones. */
static void marginal_fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t st = rel_mix(seed ^ 0x6d617267);

	for (size_t i = 0; i < n; i += 192) {
		size_t k = n - i < 192 ? n - i : 192;

		if (rel_rng(&st) % 100 < 27)
			text_fill(p + i, k, rel_rng(&st));
		else
			junk_fill(p + i, k, rel_rng(&st));
	}
}

/* ---- the image and its model ---------------------------------------------- */

struct model {
	uint32_t size[NOBJ];
	bool gone[NOBJ];           /* removed (the foreground's changes) */
	uint8_t *data[NOBJ];       /* OBJ_MAX bytes each, zeros past size */
};

static void model_init(struct model *m)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < NOBJ; i++) {
		m->data[i] = calloc(1, OBJ_MAX);
		cr_assert(m->data[i]);
	}
}

static void model_free(struct model *m)
{
	for (int i = 0; i < NOBJ; i++)
		free(m->data[i]);
}

/* Write @len bytes of @src at @off of object @i, in pieces of @piece, and
 * keep them in @m (@i < 0: an object the model does not hold). */
static void put(coil_store *s, struct model *m, int i, const char *name,
		const uint8_t *src, uint32_t off, uint32_t len, uint32_t piece)
{
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0, "open %s",
		     name);
	for (uint32_t at = 0; at < len; at += piece) {
		uint32_t n = len - at < piece ? len - at : piece;

		cr_assert_eq(coil_pwrite(h, src + at, n, off + at), (int64_t)n,
			     "write %s", name);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	if (i >= 0) {
		cr_assert_leq(off + len, OBJ_MAX);
		memcpy(m->data[i] + off, src, len);
		if (off + len > m->size[i])
			m->size[i] = off + len;
	}
}

static void put_text(coil_store *s, struct model *m, int i, uint8_t *buf,
		     uint64_t tseed, uint32_t off, uint32_t len, uint32_t piece)
{
	text_fill(buf, len, tseed);
	put(s, m, i, names[i], buf, off, len, piece);
}

/* Junk appended to "junk" (removed at the end of the build): it fills
 * the segment in use, so what comes next starts another one. */
static void spacer(coil_store *s, uint8_t *buf, uint64_t seed, uint32_t *at)
{
	junk_fill(buf, SPACER, seed);
	put(s, NULL, -1, "junk", buf, *at, SPACER, 64 * KiB);
	*at += SPACER;
}

/* pg's pages in a shuffled order. */
static void pg_order(uint32_t *pg, uint64_t *st)
{
	for (uint32_t i = 0; i < PG_PAGES; i++)
		pg[i] = i;
	for (uint32_t i = PG_PAGES - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rel_rng(st) % (i + 1)), t = pg[i];

		pg[i] = pg[j];
		pg[j] = t;
	}
}

/* Pages @pg[a, z) of pg, one write each. */
static void pg_put(coil_store *s, struct model *m, uint8_t *buf,
		   uint64_t seed, const uint32_t *pg, uint32_t a, uint32_t z)
{
	for (uint32_t i = a; i < z; i++)
		put_text(s, m, 8, buf, seed ^ (200 + (uint64_t)pg[i]),
			 pg[i] * PG_PAGE, PG_PAGE, PG_PAGE);
}

/* The image: the objects of the header comment, sizes and places from
 * @seed, spread over four segments that end sealed; @m gets what each
 * holds.  The store is closed after. */
static void image_build(const char *path, struct coil_options *o,
			uint64_t seed, struct model *m)
{
	uint64_t st = rel_mix(seed ^ 0x1a6e);
	uint8_t *buf = malloc(SPACER);
	uint32_t l0, l1, at, jat = 0, pg[PG_PAGES];
	coil_store *s;
	coil_obj *h;

	cr_assert(buf);
	cr_assert_eq(coil_open(path, o, &s), 0);
	/* Writes over 16 KiB go to a segment at once; smaller ones are
	 * kept in memory (and the journal) and packed later, together.
	 * t0: whole blobs; raw: incompressible, scanned for nothing */
	l0 = 24 * KiB + (uint32_t)(rel_rng(&st) % (8 * KiB));
	put_text(s, m, 0, buf, seed ^ 1, 0, l0, l0);
	junk_fill(buf, 12 * KiB + 777, seed ^ 2);
	put(s, m, 4, names[4], buf, 0, 12 * KiB + 777, BLOB);
	spacer(s, buf, seed ^ 3, &jat);
	/* t1: unaligned pieces; t2: text, then its middle overwritten
	 * (extents into part of a blob, at a skip) */
	l1 = 26 * KiB + (uint32_t)(rel_rng(&st) % (6 * KiB));
	put_text(s, m, 1, buf, seed ^ 4, 0, l1,
		 17000 + (uint32_t)(rel_rng(&st) % 4000));
	put_text(s, m, 2, buf, seed ^ 5, 0, 24 * KiB, 24 * KiB);
	at = 3000 + (uint32_t)(rel_rng(&st) % 5000);
	put_text(s, m, 2, buf, seed ^ 6, at, 10000, 10000);
	spacer(s, buf, seed ^ 7, &jat);
	/* c0: a clone of t0 (shared blobs) that diverges; t0 is cut short */
	cr_assert_eq(coil_obj_clone(s, names[0], names[3]), 0);
	memcpy(m->data[3], m->data[0], OBJ_MAX);
	m->size[3] = m->size[0];
	at = 5000 + (uint32_t)(rel_rng(&st) % 5000);
	put_text(s, m, 3, buf, seed ^ 8, at, 17000, 17000);
	cr_assert_eq(coil_obj_open(s, names[0], 0, &h), 0);
	cr_assert_eq(coil_obj_truncate(h, l0 - 6173), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	memset(m->data[0] + l0 - 6173, 0, 6173);
	m->size[0] = l0 - 6173;
	/* mix: text, small unaligned writes into it, a raw stretch */
	put_text(s, m, 5, buf, seed ^ 9, 0, 20 * KiB, 20 * KiB);
	for (int k = 0; k < 10; k++) {
		uint32_t len = 200 + (uint32_t)(rel_rng(&st) % 700);

		at = (uint32_t)(rel_rng(&st) % (20 * KiB));
		put_text(s, m, 5, buf, seed ^ (100 + (uint64_t)k), at, len, len);
	}
	junk_fill(buf, 4 * KiB, seed ^ 10);
	put(s, m, 5, names[5], buf, 8 * KiB, 4 * KiB, 4 * KiB);
	/* pg: the first half of its pages, packed before the spacer */
	pg_order(pg, &st);
	pg_put(s, m, buf, seed, pg, 0, PG_PAGES / 2);
	cr_assert_eq(pack_now(s), 0);
	spacer(s, buf, seed ^ 11, &jat);
	pg_put(s, m, buf, seed, pg, PG_PAGES / 2, PG_PAGES);
	/* marg: raw and barely compressed blobs, the first sector of two
	 * overwritten (a raw one then has a live run of sectors that is
	 * not the whole blob) and a stretch inside a third */
	marginal_fill(buf, 40 * KiB, seed ^ 15);
	put(s, m, 6, names[6], buf, 0, 40 * KiB, 40 * KiB);
	l1 = 4096 + (uint32_t)(rel_rng(&st) % 3000);
	put_text(s, m, 6, buf, seed ^ 16, 8192, l1, l1);
	l1 = 4096 + (uint32_t)(rel_rng(&st) % 2000);
	marginal_fill(buf, l1, seed ^ 17);
	put(s, m, 6, names[6], buf, 24576, l1, l1);
	at = 33000 + (uint32_t)(rel_rng(&st) % 3000);
	marginal_fill(buf, 1000, seed ^ 18);
	put(s, m, 6, names[6], buf, at, 1000, 1000);
	/* t1 and t2 overwritten again */
	at = 1000 + (uint32_t)(rel_rng(&st) % 10000);
	put_text(s, m, 1, buf, seed ^ 12, at, 8000, 8000);
	put_text(s, m, 2, buf, seed ^ 13, 16 * KiB, 6000, 6000);
	/* c1 is not there yet (the foreground's changes clone it) */
	m->gone[7] = true;
	/* more junk, then none: the segments holding the text are sealed */
	spacer(s, buf, seed ^ 14, &jat);
	cr_assert_eq(coil_obj_remove(s, "junk"), 0);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
	free(buf);
}

/* Both tests' options: small blobs, so the image's ~170 KiB (what zstd-19
 * gets through quickly) are many blobs, extents and records. */
static void opts(struct coil_options *o, uint64_t size)
{
	rel_opts(o, size);
	o->max_blob = BLOB;
}

/* ---- checking a store ------------------------------------------------------ */

/* The stored bytes of the checked objects (coil_obj_stat: a blob counts
 * once per object that maps it, so extras sharing them change nothing):
 * how much of the optimizer's work on them a store holds. */
static uint64_t stored_of(coil_store *s)
{
	uint64_t sum = 0;

	for (int i = 0; i < NOBJ; i++) {
		struct coil_obj_info info;
		coil_obj *h;

		if (coil_obj_open(s, names[i], 0, &h) < 0)
			continue;
		if (coil_obj_stat(h, &info) == 0)
			sum += info.stored;
		coil_obj_close(h);
	}
	return sum;
}

struct listing {
	unsigned checked;          /* names[] found */
	unsigned extras;           /* extra[] found */
	unsigned unknown;          /* neither names[] nor extra[] */
	char first_unknown[64];
};

static int list_cb(void *arg, const char *name, size_t len, uint64_t size)
{
	struct listing *l = arg;

	(void)len;
	(void)size;
	for (int i = 0; i < NOBJ; i++)
		if (!strcmp(name, names[i])) {
			l->checked++;
			return 0;
		}
	for (int i = 0; i < NEXTRA; i++)
		if (!strcmp(name, extra[i])) {
			l->extras++;
			return 0;
		}
	if (!l->unknown++)
		snprintf(l->first_unknown, sizeof(l->first_unknown), "%s", name);
	return 0;
}

/* Which state a checked object must be in: the image's, the one after
 * the foreground's changes (optimize_powercut's second series), or either
 * (then set to the one found, which the later checks hold it to). */
enum { PICK_A, PICK_B, PICK_ANY };

/* Does object @i differ from its state in @m?  @msg: how. */
static bool obj_differs(coil_store *s, const struct model *m, int i,
			uint8_t *buf, char *msg, size_t mlen)
{
	uint64_t size = 0;
	coil_obj *h;
	int64_t n;
	int rc = coil_obj_open(s, names[i], 0, &h);

	if (m->gone[i]) {
		if (rc == 0)
			coil_obj_close(h);
		if (rc == -ENOENT)
			return false;
		snprintf(msg, mlen, "open %s, it was removed",
			 coil_strerror(rc));
		return true;
	}
	if (rc < 0) {
		snprintf(msg, mlen, "open %s (lost)", coil_strerror(rc));
		return true;
	}
	rc = coil_obj_size(h, &size);
	memset(buf, 0xa5, OBJ_MAX);
	n = coil_pread(h, buf, OBJ_MAX, 0);
	coil_obj_close(h);
	if (rc < 0 || size != m->size[i] || n != (int64_t)m->size[i]) {
		snprintf(msg, mlen, "size %llu read %lld (%s), want %u",
			 (unsigned long long)size, (long long)n,
			 n < 0 ? coil_strerror((int)n) : "bytes", m->size[i]);
		return true;
	}
	for (uint32_t k = 0; k < m->size[i]; k++)
		if (buf[k] != m->data[i][k]) {
			uint32_t e = k;

			while (e < m->size[i] && buf[e] != m->data[i][e])
				e++;
			snprintf(msg, mlen, "bytes %u.. (a run of %u) differ",
				 k, e - k);
			return true;
		}
	return false;
}

/* Every checked object of the open store against its state (@pick[i] of
 * @a and @b; @pick NULL: all @a), and the listing (@extras: the extra
 * objects may be there).  @return violations. */
static unsigned compare(coil_store *s, const struct model *a,
			const struct model *b, uint8_t *pick, uint8_t *buf,
			bool extras, const char *what, const char *when)
{
	struct listing l = { 0 };
	unsigned bad = 0, want = 0;
	char ma[160], mb[160];
	int rc;

	for (int i = 0; i < NOBJ; i++) {
		uint8_t p = pick ? pick[i] : PICK_A;

		ma[0] = mb[0] = 0;
		if (p != PICK_B && !obj_differs(s, a, i, buf, ma, sizeof(ma))) {
			if (pick)
				pick[i] = PICK_A;
			want += !a->gone[i];
			continue;
		}
		if (p != PICK_A && b &&
		    !obj_differs(s, b, i, buf, mb, sizeof(mb))) {
			pick[i] = PICK_B;
			want += !b->gone[i];
			continue;
		}
		fprintf(stderr, "rel: VIOLATION %s %s: %s: %s%s%s%s%s (I3: the "
			"optimizer changed content)\n", what, when, names[i],
			ma[0] ? "against the image: " : "", ma,
			ma[0] && mb[0] ? "; " : "",
			mb[0] ? "against the state after the foreground's "
				"changes: " : "", mb);
		bad++;
		want += !a->gone[i];
	}
	rc = coil_obj_list(s, list_cb, &l);
	if (rc < 0 || l.checked != want || l.unknown || (l.extras && !extras)) {
		fprintf(stderr, "rel: VIOLATION %s %s: listing rc %d: %u of %u "
			"objects, %u extra, %u unknown (%s)\n", what, when, rc,
			l.checked, want, l.extras, l.unknown,
			l.unknown ? l.first_unknown : "-");
		bad++;
	}
	return bad;
}

static int damage_cb(void *arg, const struct coil_damage *d)
{
	const char *what = arg;

	fprintf(stderr, "rel: VIOLATION %s: coil_check: %.*s off %llu len %llu: "
		"%s\n", what, d->object ? (int)d->object_len : 7,
		d->object ? d->object : "(store)", (unsigned long long)d->off,
		(unsigned long long)d->len, d->what);
	return 0;
}

/* coil_check (every blob's checksums, the metadata, the accounting against
 * a walk of the maps) and the live-byte recount.  @return violations. */
static unsigned check_store(coil_store *s, const char *what, const char *when)
{
	struct coil_scrub_info info;
	char tag[200];
	unsigned bad = 0;
	int rc;

	snprintf(tag, sizeof(tag), "%s %s", what, when);
	memset(&info, 0, sizeof(info));
	rc = coil_check(s, damage_cb, tag, &info);
	if (rc != 0 || info.damaged_ranges || info.metadata_errors ||
	    info.accounting_errors) {
		fprintf(stderr, "rel: VIOLATION %s: coil_check %s: %llu damaged "
			"ranges, %llu metadata, %llu accounting errors\n", tag,
			coil_strerror(rc),
			(unsigned long long)info.damaged_ranges,
			(unsigned long long)info.metadata_errors,
			(unsigned long long)info.accounting_errors);
		bad++;
	}
	rc = cleaner_check_live(s);
	if (rc != 0) {
		fprintf(stderr, "rel: VIOLATION %s: cleaner_check_live %s "
			"(segment live bytes disagree with the maps)\n", tag,
			coil_strerror(rc));
		bad++;
	}
	return bad;
}

/* coil_optimize until it returns 0 (at most 64 calls), then once more:
 * that call must scan nothing (every blob is marked).  @rw: blobs
 * rewritten.  @return violations. */
static unsigned optimize_all(coil_store *s, const char *what, uint64_t *rw)
{
	struct coil_optimize_report rep;
	unsigned bad = 0;
	int rc = 1, calls = 0;

	while (rc == 1 && calls < 64) {
		memset(&rep, 0, sizeof(rep));
		rc = coil_optimize(s, NULL, &rep);
		calls++;
		*rw += rep.rewritten;
		if (rep.errors) {
			fprintf(stderr, "rel: VIOLATION %s: %llu candidates "
				"failed their check\n", what,
				(unsigned long long)rep.errors);
			bad++;
		}
	}
	if (rc != 0) {
		fprintf(stderr, "rel: VIOLATION %s: coil_optimize after "
			"recovery: %s after %d calls (a half-done pass must be "
			"resumable)\n", what,
			rc == 1 ? "still more" : coil_strerror(rc), calls);
		return bad + 1;
	}
	memset(&rep, 0, sizeof(rep));
	rc = coil_optimize(s, NULL, &rep);
	if (rc != 0 || rep.scanned) {
		fprintf(stderr, "rel: VIOLATION %s: coil_optimize once more: "
			"%s, %llu blobs scanned (want 0, none: every blob was "
			"gone over)\n", what, rc == 1 ? "more" : coil_strerror(rc),
			(unsigned long long)rep.scanned);
		bad++;
	}
	return bad;
}

/* What a recovered store held compared with the image and the fully
 * optimized state (by the checked objects' stored bytes; informative, not
 * a check), and which of the foreground's changes it kept. */
struct tally {
	uint64_t none, partial, whole;  /* of the pass's savings kept */
	uint64_t resumed_rw;            /* blobs rewritten after recovery */
	uint64_t rdonly;                /* read-only reopens checked */
	uint64_t fg_none, fg_some, fg_all; /* objects in the changed state */
};

/* Open @path (I4), check every object against @a / @b as @pick0 says
 * (or @picks, per object, when not NULL), coil_check, optimize to
 * completion, check again (each object held to the state found first),
 * close; with @ro_after, reopen read-only and compare once more.
 * @return violations. */
static unsigned verify(const char *path, const struct coil_options *o,
		       const struct model *a, const struct model *b,
		       uint8_t pick0, const uint8_t *picks, bool extras,
		       bool ro_after, uint64_t st_img, uint64_t st_done,
		       struct tally *t, const char *what)
{
	struct coil_options oo = *o;
	uint8_t *buf = malloc(OBJ_MAX);
	uint8_t pick[NOBJ];
	unsigned bad = 0, nb = 0;
	uint64_t rw = 0, st;
	coil_store *s;
	int rc;

	cr_assert(buf);
	for (int i = 0; i < NOBJ; i++)
		pick[i] = picks ? picks[i] : pick0;
	oo.flags &= ~(COIL_CREATE | COIL_RDONLY);
	rc = coil_open(path, &oo, &s);
	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: store does not open: %s "
			"(I4)\n", what, coil_strerror(rc));
		free(buf);
		return 1;
	}
	st = stored_of(s);
	bad += compare(s, a, b, pick, buf, extras, what, "after recovery");
	if (t && !b) {
		if (st >= st_img)
			t->none++;
		else if (st <= st_done)
			t->whole++;
		else
			t->partial++;
	} else if (t && !bad) {
		for (int i = 0; i < NOBJ; i++)
			nb += ((FG_MASK >> i) & 1) && pick[i] == PICK_B;
		if (nb == 0)
			t->fg_none++;
		else if (nb == (unsigned)__builtin_popcount(FG_MASK))
			t->fg_all++;
		else
			t->fg_some++;
	}
	bad += check_store(s, what, "after recovery");
	if (!bad) {
		bad += optimize_all(s, what, &rw);
		if (t)
			t->resumed_rw += rw;
		bad += compare(s, a, b, pick, buf, extras, what,
			       "after the resumed pass");
		bad += check_store(s, what, "after the resumed pass");
	}
	rc = coil_close(s);
	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: clean close failed: %s\n",
			what, coil_strerror(rc));
		bad++;
	}
	if (!bad && ro_after) {
		oo.flags |= COIL_RDONLY;
		rc = coil_open(path, &oo, &s);
		if (rc < 0) {
			fprintf(stderr, "rel: VIOLATION %s: read-only reopen: "
				"%s\n", what, coil_strerror(rc));
			bad++;
		} else {
			bad += compare(s, a, b, pick, buf, extras, what,
				       "reopened after the resumed pass");
			coil_close(s);
			if (t)
				t->rdonly++;
		}
	}
	free(buf);
	return bad;
}

/* ---- power cuts ------------------------------------------------------------ */

/* ---- the foreground's changes, in the middle of a pass ------------------- */

/* Made while the pass holds at its first batch (encoded, not yet placed
 * or journaled), then synced: t2 cloned as c1 (the pass collected its
 * extents before: c1 keeps t2's old blobs where the pass rewrites t2's,
 * so a victim is not empty after it), part of t2 overwritten (a segment
 * write),
 * a small write into t0 (kept in memory; t0's blobs are c0's too, and
 * c0's extents must still take their rewrites), a page of pg overwritten
 * (a member of a merge the pass planned), t1 truncated, mix removed.  Every rewrite of the pass for what those changed is stale:
 * the compare-and-swap must refuse it live, and in replay — where the
 * write's record comes before the REWRITE's — after any cut.  With @b,
 * only the state after them is made (from @a's).  @done (may be NULL):
 * bit i set once object i's write or clone returned (kill -9 keeps
 * those).
 * Made again, they change nothing (the same bytes; mix already gone).
 * @return the first error. */
static int fg_apply(coil_store *s, uint64_t seed, uint8_t *buf,
		    struct model *b, const struct model *a,
		    _Atomic uint64_t *done)
{
	static const struct { int obj; uint32_t off, len; uint64_t tseed; }
		wr[3] = { { 2, 2000, 17000, 20 }, { 0, 5000, 3000, 21 },
			  { 8, 9 * PG_PAGE, PG_PAGE, 22 } };
	coil_obj *h;
	int64_t n;
	int rc;

	if (b) {
		for (int i = 0; i < NOBJ; i++) {
			memcpy(b->data[i], a->data[i], OBJ_MAX);
			b->size[i] = a->size[i];
			b->gone[i] = a->gone[i];
		}
		memcpy(b->data[7], a->data[2], OBJ_MAX);
		b->size[7] = a->size[2];
		b->gone[7] = false;
		for (int k = 0; k < 3; k++) {
			text_fill(buf, wr[k].len, seed ^ wr[k].tseed);
			memcpy(b->data[wr[k].obj] + wr[k].off, buf, wr[k].len);
		}
		memset(b->data[1] + 10000, 0, OBJ_MAX - 10000);
		b->size[1] = 10000;
		memset(b->data[5], 0, OBJ_MAX);
		b->size[5] = 0;
		b->gone[5] = true;
		return 0;
	}
	/* made again: c1 is there already (a clone survives kill -9 once
	 * it returned, like a rename) */
	rc = coil_obj_clone(s, names[2], names[7]);
	if (rc < 0 && rc != -EEXIST)
		return rc;
	if (done)
		atomic_fetch_or(done, 1ull << 7);
	for (int k = 0; k < 3; k++) {
		text_fill(buf, wr[k].len, seed ^ wr[k].tseed);
		if ((rc = coil_obj_open(s, names[wr[k].obj], 0, &h)) < 0)
			return rc;
		n = coil_pwrite(h, buf, wr[k].len, wr[k].off);
		coil_obj_close(h);
		if (n != (int64_t)wr[k].len)
			return n < 0 ? (int)n : -EIO;
		if (done)
			atomic_fetch_or(done, 1ull << wr[k].obj);
	}
	if ((rc = coil_obj_open(s, names[1], 0, &h)) < 0)
		return rc;
	rc = coil_obj_truncate(h, 10000);
	coil_obj_close(h);
	if (rc < 0)
		return rc;
	rc = coil_obj_remove(s, names[5]);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	return coil_sync(s);
}

struct session {
	int open_rc, first_err, close_rc;
	bool cut;                  /* the seam cut power (or open failed) */
	bool fg_started;           /* the foreground's changes began */
	bool fg_synced;            /* ... and their coil_sync returned 0 */
	uint64_t ops;              /* ring ops before close */
	uint64_t open_ops;         /* of them, coil_open's */
	uint64_t calls, rewritten, scanned, stale;
	uint64_t merges;           /* merged blobs written */
};

/* The pass: coil_optimize until it returns 0 (@budget 0: NULL options,
 * one call; else that budget a call).  On its own thread when the
 * foreground changes things meanwhile. */
struct pass {
	coil_store *s;
	uint64_t budget;
	struct session *out;
	int rc;
	/* the seam (cleaner_optimize_hook) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state;                 /* 0 running, 1 held, 2 released */
	bool done;
};

static void *pass_run(void *arg)
{
	struct pass *p = arg;
	struct coil_optimize_opts oo = { .budget_bytes = p->budget };
	struct coil_optimize_report rep;
	int rc = 1;

	while (rc == 1 && p->out->calls < 64) {
		memset(&rep, 0, sizeof(rep));
		rc = coil_optimize(p->s, p->budget ? &oo : NULL, &rep);
		p->out->calls++;
		p->out->rewritten += rep.rewritten;
		p->out->scanned += rep.scanned;
		p->out->stale += rep.stale_skips;
	}
	pthread_mutex_lock(&p->mu);
	p->rc = rc;
	p->done = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* The cleaner thread, with a batch encoded: the first time, hold until
 * the foreground is done. */
static void pass_hook(void *arg)
{
	struct pass *p = arg;

	pthread_mutex_lock(&p->mu);
	if (p->state == 0) {
		p->state = 1;
		pthread_cond_broadcast(&p->cv);
		while (p->state == 1)
			pthread_cond_wait(&p->cv, &p->mu);
	}
	pthread_mutex_unlock(&p->mu);
}

/* Open, the pass (with @fg, the foreground's changes at its first batch),
 * coil_sync, close.  Stops at the first error. */
static void session_run(const char *path, const struct coil_options *o,
			uint64_t budget, bool fg, uint64_t seed, uint8_t *buf,
			struct session *out)
{
	struct pass p = { .budget = budget, .out = out,
			  .mu = PTHREAD_MUTEX_INITIALIZER,
			  .cv = PTHREAD_COND_INITIALIZER };
	struct uring *r;
	pthread_t th;
	int rc;

	memset(out, 0, sizeof(*out));
	out->open_rc = coil_open(path, o, &p.s);
	if (out->open_rc < 0) {
		out->cut = true;
		return;
	}
	out->open_ops = uring_fault_count(uring_fault_last(), URING_FAULT_ANY);
	if (!fg) {
		pass_run(&p);
	} else {
		cleaner_optimize_hook(p.s, pass_hook, &p);
		cr_assert_eq(pthread_create(&th, NULL, pass_run, &p), 0);
		pthread_mutex_lock(&p.mu);
		while (p.state == 0 && !p.done)
			pthread_cond_wait(&p.cv, &p.mu);
		out->fg_started = p.state == 1;
		pthread_mutex_unlock(&p.mu);
		if (out->fg_started) {
			rc = fg_apply(p.s, seed, buf, NULL, NULL, NULL);
			out->fg_synced = rc == 0;
			if (rc < 0)
				out->first_err = rc;
			pthread_mutex_lock(&p.mu);
			p.state = 2;
			pthread_cond_broadcast(&p.cv);
			pthread_mutex_unlock(&p.mu);
		}
		pthread_join(th, NULL);
		cleaner_optimize_hook(p.s, NULL, NULL);
	}
	rc = p.rc;
	if (rc < 0 && !out->first_err)
		out->first_err = rc;
	else if (!out->first_err && (rc = coil_sync(p.s)) < 0)
		out->first_err = rc;
	r = uring_fault_last();
	out->cut = uring_fault_is_cut(r);
	out->ops = uring_fault_count(r, URING_FAULT_ANY);
	out->merges = atomic_load(&cleaner_optimizer(p.s)->merges);
	out->close_rc = coil_close(p.s);
}


Test(rel, optimize_powercut, .timeout = 900)
{
	static const char *mode_name[] = { "", "drop_all", "random", "torn" };
	static const char *kind[] = { "whole", "by_segment+writes" };
	uint64_t seed = rel_seed();
	uint64_t images = rel_scaled(2, 1);
	uint64_t cuts = 0, rec_cuts = 0, bad = 0, st = seed ^ 0x0971c;
	/* every op at full scale (tools/dev.sh soak), every other one in
	 * tools/dev.sh test (0.4), fewer under the sanitizers */
	uint64_t stride = rel_scale() >= 0.8 ? 1 :
			  (uint64_t)(0.8 / rel_scale() + 0.5);
	uint64_t per_mode[4] = { 0 }, points = 0, stale = 0;
	uint8_t *buf = malloc(OBJ_MAX);
	struct tally t = { 0 };
	struct coil_options o;
	char path[256], what[160];
	double t0 = now_s();

	rel_announce("optimize_powercut", seed);
	for (uint64_t w = 0; w < 2 * images && !bad; w++) {
		uint64_t wseed = w / 2 ? rel_mix(seed + w / 2) : seed;
		/* 1: a segment a call, the foreground's changes at the
		 * first batch */
		uint64_t budget = w % 2;
		bool fg = budget;
		uint64_t st_img, st_done, n, first;
		struct rel_image before;
		struct session ss;
		struct model m, mb;
		coil_store *s;

		rel_path(path, sizeof(path), "opt-powercut");
		opts(&o, 16ull << 20);
		model_init(&m);
		model_init(&mb);
		image_build(path, &o, wseed, &m);
		fg_apply(NULL, wseed, buf, &mb, &m, NULL);
		cr_assert_eq(rel_image_load(&before, path), 0);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		st_img = stored_of(s);
		cr_assert_eq(coil_close(s), 0);
		cr_assert_geq(rel_image_restore(&before, path), 0);

		/* dry run: the session's ring ops, and the state it ends in */
		rel_fault_arm(0, 0, 0);
		session_run(path, &o, budget, fg, wseed, buf, &ss);
		uring_fault_set_next(NULL);
		cr_assert_eq(ss.open_rc, 0, "open: %s", coil_strerror(ss.open_rc));
		cr_assert_eq(ss.fg_synced, fg, "the foreground's changes were "
			     "%smade", ss.fg_started ? "not all " : "not ");
		cr_assert_eq(ss.first_err, 0, "the session without faults: %s",
			     coil_strerror(ss.first_err));
		cr_assert_eq(ss.close_rc, 0);
		/* a session that optimizes nothing would prove nothing */
		cr_assert_gt(ss.rewritten, 0, "the dry run rewrote no blob "
			     "(%llu scanned)", (unsigned long long)ss.scanned);
		cr_assert_gt(ss.merges, 0, "the dry run merged no small blobs");
		n = ss.ops;
		points += n;
		stale += ss.stale;
		cr_assert_eq(coil_open(path, &o, &s), 0);
		st_done = stored_of(s);
		cr_assert_eq(coil_close(s), 0);
		snprintf(what, sizeof(what), "optimize_powercut image %llu "
			 "%s dry run", (unsigned long long)w / 2, kind[budget]);
		bad += verify(path, &o, &m, fg ? &mb : NULL,
			      fg ? PICK_B : PICK_A, NULL, false, true,
			      st_img, st_done, NULL, what);
		fprintf(stderr, "rel: optimize_powercut image %llu %s: stored "
			"%llu -> %llu after the pass (%llu calls, %llu scanned, "
			"%llu rewritten, %llu stale, %llu merges), %llu ring "
			"ops (%llu in open)\n",
			(unsigned long long)w / 2, kind[budget],
			(unsigned long long)st_img, (unsigned long long)st_done,
			(unsigned long long)ss.calls,
			(unsigned long long)ss.scanned,
			(unsigned long long)ss.rewritten,
			(unsigned long long)ss.stale,
			(unsigned long long)ss.merges, (unsigned long long)n,
			(unsigned long long)ss.open_ops);

		/* a cut at every op of the session, open and close included,
		 * until one past the last op runs uncut (below scale 0.3, the
		 * sanitizer pass's, at every stride-th from a random one); the
		 * second series from the first op after open (its open is the
		 * first's, op for op) */
		first = budget ? ss.open_ops + 1 : 1;
		for (uint64_t c = first + rel_rng(&st) % stride;
		     c <= n + 64 && !bad; c += stride) {
			int mode = (int)(1 + (c / stride) % 3);

			cr_assert_geq(rel_image_restore(&before, path), 0);
			rel_fault_arm(c, mode, rel_rng(&st));
			session_run(path, &o, budget, fg, wseed, buf, &ss);
			uring_fault_set_next(NULL);
			if (!ss.cut && ss.close_rc == 0 && ss.first_err == 0 &&
			    ss.open_rc == 0) {
				if (c > n)
					break;
				continue; /* the op came after close */
			}
			cuts++;
			per_mode[mode]++;
			if (rel_rng(&st) % 4 == 0)
				rel_cut_recovery(path, &o, &st, 12, &rec_cuts);
			snprintf(what, sizeof(what), "optimize_powercut image "
				 "%llu %s cut at op %llu of %llu mode %s",
				 (unsigned long long)w / 2, kind[budget],
				 (unsigned long long)c,
				 (unsigned long long)n, mode_name[mode]);
			/* the changes: none made, all synced, or any of
			 * them, each whole or not at all */
			bad += verify(path, &o, &m, fg ? &mb : NULL,
				      !ss.fg_started ? PICK_A :
				      ss.fg_synced ? PICK_B : PICK_ANY, NULL,
				      false, cuts % 8 == 0, st_img, st_done, &t,
				      what);
		}
		rel_image_free(&before);
		model_free(&m);
		model_free(&mb);
		if (!bad)
			unlink(path);
	}
	fprintf(stderr, "rel: optimize_powercut drop_all=%llu random=%llu "
		"torn=%llu recovery_cuts=%llu images=%llu ops=%llu stride=%llu "
		"kept_none=%llu kept_part=%llu kept_all=%llu "
		"rewritten_after=%llu rdonly_checks=%llu stale_dry=%llu "
		"writes_kept none=%llu some=%llu all=%llu %.1fs\n",
		(unsigned long long)per_mode[1], (unsigned long long)per_mode[2],
		(unsigned long long)per_mode[3], (unsigned long long)rec_cuts,
		(unsigned long long)images, (unsigned long long)points,
		(unsigned long long)stride, (unsigned long long)t.none,
		(unsigned long long)t.partial, (unsigned long long)t.whole,
		(unsigned long long)t.resumed_rw, (unsigned long long)t.rdonly,
		(unsigned long long)stale, (unsigned long long)t.fg_none,
		(unsigned long long)t.fg_some, (unsigned long long)t.fg_all,
		now_s() - t0);
	rel_report("optimize_powercut", "cuts", cuts, bad, seed);
	cr_assert_eq(bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx "
		     "COIL_REL_SCALE=%g; the store is left at %s)",
		     (unsigned long long)bad, (unsigned long long)seed,
		     rel_scale(), path);
	/* fewer cuts than a tenth of the ops means the seam or the
	 * counting broke, not that coil is fine */
	cr_assert_geq(cuts, points / stride / 10, "only %llu cuts",
		      (unsigned long long)cuts);
	free(buf);
}

/* ---- kill -9 --------------------------------------------------------------- */

/* What the children tell the parent (shared memory). */
struct kshared {
	_Atomic uint64_t opened;     /* children past coil_open */
	_Atomic uint64_t calls;      /* coil_optimize calls returned */
	_Atomic uint64_t started;    /* coil_optimize calls started */
	_Atomic uint64_t rewritten;  /* blobs rewritten, as reported */
	_Atomic uint64_t extra_ops;  /* clones, writes, removes of extras */
	_Atomic uint64_t fg_done;    /* bit i: object i's change returned
				      * (since the image was put back) */
	_Atomic uint64_t fg_runs;    /* children that made the changes */
};

struct kchild {
	coil_store *s;
	struct kshared *sh;
};

static void *child_optimize(void *arg)
{
	struct kchild *k = arg;
	struct coil_optimize_opts oo = { .budget_bytes = 1 };

	for (;;) {
		struct coil_optimize_report rep;
		int rc;

		memset(&rep, 0, sizeof(rep));
		atomic_fetch_add(&k->sh->started, 1);
		rc = coil_optimize(k->s, &oo, &rep);
		if (rc < 0) {
			fprintf(stderr, "rel optimize child: coil_optimize: "
				"%s\n", coil_strerror(rc));
			_exit(5);
		}
		if (rep.errors)
			_exit(8);
		atomic_fetch_add(&k->sh->calls, 1);
		atomic_fetch_add(&k->sh->rewritten, rep.rewritten);
		if (rc == 0)
			usleep(2000); /* the other thread makes more */
	}
	return NULL;
}

/* The child of @cycle: open (recover), optimize on a thread, change the
 * extras on this one (choices from the seed and @cycle) until killed.
 * Never returns. */
static void child_run(const char *path, const struct coil_options *o,
		      uint64_t seed, uint64_t cycle, struct kshared *sh)
{
	uint8_t *buf = malloc(OBJ_MAX);
	uint64_t st = rel_mix(seed ^ rel_mix(cycle + 1));
	struct kchild k = { .sh = sh };
	pthread_t th;
	int rc = coil_open(path, o, &k.s);

	if (rc < 0) {
		fprintf(stderr, "rel optimize child: open: %s\n",
			coil_strerror(rc));
		_exit(3);
	}
	atomic_fetch_add(&sh->opened, 1);
	if (!buf || pthread_create(&th, NULL, child_optimize, &k) != 0)
		_exit(4);
	/* Half the children make the foreground's changes (fg_apply; again
	 * when an earlier child did: the same bytes, new blobs) a moment
	 * into the pass, racing it, and say which returned. */
	if (rel_rng(&st) % 2) {
		usleep((useconds_t)(rel_rng(&st) % 30000));
		rc = fg_apply(k.s, seed, buf, NULL, NULL, &sh->fg_done);
		if (rc < 0) {
			fprintf(stderr, "rel optimize child: the foreground's "
				"changes: %s\n", coil_strerror(rc));
			_exit(9);
		}
		atomic_fetch_add(&sh->fg_runs, 1);
	}
	for (uint64_t n = 0;; n++) {
		uint64_t r = rel_rng(&st);
		const char *x = extra[r % NEXTRA];
		uint32_t off = (uint32_t)((r >> 8) % (300 * KiB));
		uint32_t len = 1000 + (uint32_t)((r >> 32) % (120 * KiB));
		coil_obj *h;

		switch ((r >> 4) % 8) {
		case 0: case 1: case 2:
			/* a clone of a checked object, or -EEXIST (or
			 * -ENOENT: mix, removed by the changes) */
			rc = coil_obj_clone(k.s, names[(r >> 40) % NOBJ], x);
			if (rc == -EEXIST || rc == -ENOENT)
				rc = 0;
			break;
		case 3: case 4:
			/* text (work for the optimizer) or junk into an extra
			 * (diverging from what it shares, filling segments) */
			if ((r >> 48) % 3)
				text_fill(buf, len, r);
			else
				junk_fill(buf, len, r);
			rc = coil_obj_open(k.s, x, COIL_CREATE, &h);
			if (rc == 0) {
				int64_t w = coil_pwrite(h, buf, len, off);

				rc = w < 0 ? (int)w : 0;
				coil_obj_close(h);
			}
			break;
		case 5:
			rc = coil_obj_open(k.s, x, 0, &h);
			if (rc == 0) {
				rc = coil_obj_truncate(h, off);
				coil_obj_close(h);
			} else if (rc == -ENOENT) {
				rc = 0;
			}
			break;
		case 6:
			rc = coil_obj_remove(k.s, x);
			if (rc == -ENOENT)
				rc = 0;
			break;
		default:
			rc = n % 4 == 0 ? coil_sync(k.s) : 0;
			break;
		}
		if (rc < 0) {
			fprintf(stderr, "rel optimize child: extra op %llu on "
				"%s: %s\n", (unsigned long long)((r >> 4) % 8),
				x, coil_strerror(rc));
			_exit(6);
		}
		atomic_fetch_add(&sh->extra_ops, 1);
		usleep(200 + (useconds_t)((r >> 20) % 800));
	}
}

/* Until the child @pid is past coil_open and an optimizer call of its own
 * has started — with @returned, has returned — (or it is gone, or 10 s):
 * the kill then lands among passes, whatever the build's speed (a
 * sanitizer's open can outlast a random delay). */
static void wait_started(struct kshared *sh, uint64_t opened0,
			 uint64_t started0, uint64_t calls0, bool returned,
			 pid_t pid)
{
	for (int i = 0; i < 50000 && (atomic_load(&sh->opened) == opened0 ||
				      atomic_load(&sh->started) <= started0 ||
				      (returned &&
				       atomic_load(&sh->calls) <= calls0)); i++) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid != 0)
			return;
		usleep(200);
	}
}

Test(rel, optimize_kill9, .timeout = 900)
{
	uint64_t seed = rel_seed();
	uint64_t cycles = rel_scaled(40, 5), checked = 0, bad = 0, early = 0;
	uint64_t restores = 0, st = seed ^ 0x0977;
	struct kshared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct tally t = { 0 };
	struct model m, mb;
	uint8_t pick[NOBJ];
	struct coil_options o;
	struct rel_image img;
	coil_store *s;
	uint8_t *buf = malloc(OBJ_MAX);
	uint64_t st_img, rw = 0;
	char path[256], what[128];
	double t0 = now_s();
	int rc;

	cr_assert_neq(sh, MAP_FAILED);
	cr_assert(buf);
	memset((void *)sh, 0, sizeof(*sh));
	rel_announce("optimize_kill9", seed);
	rel_path(path, sizeof(path), "opt-kill9");
	opts(&o, 32ull << 20);
	model_init(&m);
	model_init(&mb);
	image_build(path, &o, seed, &m);
	fg_apply(NULL, seed, buf, &mb, &m, NULL);
	memset(pick, PICK_A, sizeof(pick));
	cr_assert_eq(rel_image_load(&img, path), 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	st_img = stored_of(s);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_geq(rel_image_restore(&img, path), 0);

	for (uint64_t c = 0; c < cycles && !bad; c++) {
		uint64_t r = rel_rng(&st), opened0 = atomic_load(&sh->opened);
		uint64_t started0 = atomic_load(&sh->started);
		uint64_t calls0 = atomic_load(&sh->calls);
		useconds_t us;
		pid_t pid;
		int wst;

		fflush(NULL);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0)
			child_run(path, &o, seed, c, sh);
		if (rel_kill_early(r, c)) {
			us = (useconds_t)(r >> 8) % 4000;
			early++;
		} else {
			/* a pass over a segment takes 5-300 ms here: kills
			 * inside the child's first, or after one returned
			 * (always in the first cycle: a run whose children
			 * never finish a pass proves little) */
			wait_started(sh, opened0, started0, calls0,
				     c == 0 || (r >> 7) % 2, pid);
			us = (r >> 8) % 2 ? 1000 + (useconds_t)((r >> 9) % 60000) :
			     60000 + (useconds_t)((r >> 9) % 240000);
		}
		usleep(us);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &wst, 0), pid);
		if (!(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL)) {
			fprintf(stderr, "rel: VIOLATION optimize_kill9 cycle "
				"%llu: child ended on its own (status 0x%x: 3 = "
				"open failed (I4), 5 = coil_optimize failed, 6 "
				"= an extra's op failed, 8 = a candidate failed "
				"its check, 9 = the foreground's changes "
				"failed)\n", (unsigned long long)c,
				WIFEXITED(wst) ? WEXITSTATUS(wst) : wst);
			bad++;
		}
		/* leave every third recovery to the next child */
		if (c % 3 == 1 && c + 1 < cycles)
			continue;
		snprintf(what, sizeof(what), "optimize_kill9 cycle %llu (killed "
			 "after %u us)", (unsigned long long)c, (unsigned)us);
		{
			struct coil_options oo = o;

			oo.flags &= ~COIL_CREATE;
			rc = coil_open(path, &oo, &s);
			if (rc < 0) {
				fprintf(stderr, "rel: VIOLATION %s: store does "
					"not open: %s (I4)\n", what,
					coil_strerror(rc));
				bad++;
				break;
			}
			if (stored_of(s) < st_img)
				t.partial++;
			/* a changed object stays changed; a write of the
			 * changes that returned is there (kill -9 keeps it);
			 * the rest may be either way */
			for (int i = 0; i < NOBJ; i++)
				pick[i] = ((atomic_load(&sh->fg_done) >> i) & 1) ||
					  pick[i] == PICK_B ? PICK_B : PICK_ANY;
			bad += compare(s, &m, &mb, pick, buf, true, what,
				       "after recovery");
			for (int i = 0; i < NOBJ; i++)
				t.fg_all += pick[i] == PICK_B;
			bad += check_store(s, what, "after recovery");
			rc = coil_close(s);
			if (rc < 0) {
				fprintf(stderr, "rel: VIOLATION %s: clean close: "
					"%s\n", what, coil_strerror(rc));
				bad++;
			}
		}
		checked++;
		/* now and then the image again: the checked objects are
		 * optimized once more, under other kills */
		if (checked % 5 == 0 && c + 1 < cycles) {
			cr_assert_geq(rel_image_restore(&img, path), 0);
			memset(pick, PICK_A, sizeof(pick));
			atomic_store(&sh->fg_done, 0);
			restores++;
		}
	}
	/* the children must have optimized something, or nothing was
	 * tested */
	cr_assert_gt(atomic_load(&sh->calls), 0, "no coil_optimize call of "
		     "any child returned");
	if (!bad) {
		/* eventually the pass completes, and then has nothing left */
		uint64_t dummy = 0;

		cr_assert_eq(coil_open(path, &o, &s), 0);
		bad += optimize_all(s, "optimize_kill9 final", &dummy);
		rw += dummy;
		bad += compare(s, &m, &mb, pick, buf, true, "optimize_kill9",
			       "final");
		bad += check_store(s, "optimize_kill9", "final");
		cr_assert_eq(coil_close(s), 0);
		bad += verify(path, &o, &m, &mb, PICK_A, pick, true, true,
			      st_img, 0, NULL, "optimize_kill9 final reopen");
	}
	fprintf(stderr, "rel: optimize_kill9 checked=%llu killed_early=%llu "
		"restores=%llu optimize_calls=%llu rewritten=%llu "
		"extra_ops=%llu kept_some=%llu changes_made=%llu "
		"changed_objects_seen=%llu final_rewritten=%llu %.1fs\n",
		(unsigned long long)checked,
		(unsigned long long)early, (unsigned long long)restores,
		(unsigned long long)atomic_load(&sh->calls),
		(unsigned long long)atomic_load(&sh->rewritten),
		(unsigned long long)atomic_load(&sh->extra_ops),
		(unsigned long long)t.partial,
		(unsigned long long)atomic_load(&sh->fg_runs),
		(unsigned long long)t.fg_all, (unsigned long long)rw,
		now_s() - t0);
	rel_report("optimize_kill9", "cycles", cycles, bad, seed);
	cr_assert_eq(bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx "
		     "COIL_REL_SCALE=%g)", (unsigned long long)bad,
		     (unsigned long long)seed, rel_scale());
	unlink(path);
	rel_image_free(&img);
	model_free(&m);
	model_free(&mb);
	free(buf);
	munmap((void *)sh, sizeof(*sh));
}
