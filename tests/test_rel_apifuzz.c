/* test_rel_apifuzz: random sequences of API calls against an in-memory
 * model, with power cuts mixed in (docs/reliability.md, row 5, second
 * half).
 *
 * Ops: create (with and without EXCL), write (random offset and length,
 * holes, extensions), read (compared byte for byte: I3), truncate (shrink
 * and grow), remove (then the old handle must say -EBADF), coil_obj_size,
 * coil_sync, clean close + reopen (everything must be there), bad arguments
 * (each must be a negative errno, never a crash), and power cuts of two
 * kinds: between ops (the seam reverts what no fsync covered: all, a random
 * subset, or torn sectors), and at a random ring op in the middle of the
 * sequence (the op in flight fails).  After a cut the store must open (I4)
 * and each object must be in a state it passed through since the last
 * successful sync (I1 + I2: the per-object prefix), whole. */
#ifdef REL_STANDALONE
#include "tests/rel/standalone.h"
#else
#include <criterion/criterion.h>
#endif
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "common/common.h"
#include "tests/rel/rel.h"
#include "uring/uring_fault.h"

#define NNAMES 3
#define OBJ_MAX (192u * 1024)
#define HIST_MAX 24
#define WRITE_MAX 70000u

struct state {
	bool exists;
	uint64_t size;
	uint8_t *data;           /* OBJ_MAX bytes; zeros past size */
};

struct fz {
	uint64_t seed, st, opno;
	struct coil_options o;
	char path[256];
	coil_store *s;
	coil_obj *h[NNAMES];
	struct state cur[NNAMES];
	struct state hist[NNAMES][HIST_MAX]; /* states since the last sync */
	unsigned nhist[NNAMES];
	bool maybe_pending;      /* an op failed during a cut: it may be there */
	uint8_t *buf, *rd;
	char last[8][96];        /* the last ops, for a violation report */
	bool midcut;             /* this sequence arms cuts at random ops */
	uint64_t bad, cuts, mid_cuts, rec_cuts, reopens, ops, syncs, badargs;
};

/* The spec each ring of a sequence gets: record (so a cut can revert), and
 * in half of the sequences a cut at a random op of that ring. */
static void spec_make(struct fz *f, struct uring_fault_spec *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->record = true;
	if (f->midcut) {
		uint64_t r = rel_rng(&f->st);
		sp->cut_kind = URING_FAULT_ANY;
		sp->cut_nth = 8 + r % 150;
		sp->cut_mode = (int)(1 + (r >> 16) % 3);
		sp->cut_seed = r >> 24;
	}
}

static const char *names[NNAMES] = { "alpha", "beta/with/slashes",
				     "gamma \xe2\x9c\x93 unicode" };

static void __attribute__((format(printf, 2, 3)))
note(struct fz *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->last[f->opno % 8], sizeof(f->last[0]), fmt, ap);
	va_end(ap);
	f->opno++;
}

static void __attribute__((format(printf, 2, 3)))
violation(struct fz *f, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rel: VIOLATION apifuzz seq op %llu: ",
		(unsigned long long)f->opno);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n  last ops:");
	for (uint64_t i = f->opno > 8 ? f->opno - 8 : 0; i < f->opno; i++)
		fprintf(stderr, " [%s]", f->last[i % 8]);
	fprintf(stderr, "\n");
	f->bad++;
}

static void state_copy(struct state *d, const struct state *s)
{
	d->exists = s->exists;
	d->size = s->size;
	memcpy(d->data, s->data, OBJ_MAX);
}

/* The durable base: after a successful sync or a recovery. */
static void hist_reset(struct fz *f)
{
	for (int i = 0; i < NNAMES; i++) {
		state_copy(&f->hist[i][0], &f->cur[i]);
		f->nhist[i] = 1;
	}
}

static int do_sync(struct fz *f)
{
	int rc = coil_sync(f->s);

	note(f, "sync -> %d", rc);
	f->syncs++;
	if (rc == 0)
		hist_reset(f);
	return rc;
}

/* Object i changed: remember the state (forcing a sync when the history is
 * full keeps it bounded). */
static void hist_push(struct fz *f, int i)
{
	if (f->nhist[i] == HIST_MAX && do_sync(f) < 0)
		return;
	if (f->nhist[i] < HIST_MAX)
		state_copy(&f->hist[i][f->nhist[i]++], &f->cur[i]);
}

static bool open_store(struct fz *f, const struct uring_fault_spec *sp)
{
	int rc;

	uring_fault_set_next(sp);
	rc = coil_open(f->path, &f->o, &f->s);
	uring_fault_set_next(NULL);
	if (rc < 0 && sp && sp->cut_nth) {
		/* the armed cut came inside open (recovery or its
		 * checkpoint): a crash during recovery; open again */
		struct uring_fault_spec plain = { .record = true };
		f->rec_cuts++;
		uring_fault_set_next(&plain);
		rc = coil_open(f->path, &f->o, &f->s);
		uring_fault_set_next(NULL);
	}
	if (rc < 0) {
		violation(f, "store does not open: %s (I4)", coil_strerror(rc));
		f->s = NULL;
		return false;
	}
	for (int i = 0; i < NNAMES; i++) {
		f->h[i] = NULL;
		if (f->cur[i].exists &&
		    coil_obj_open(f->s, names[i], 0, &f->h[i]) < 0)
			f->h[i] = NULL;
	}
	return true;
}

/* @return true when the store had been cut (before or inside close). */
static bool close_store(struct fz *f)
{
	bool cut = uring_fault_is_cut(uring_fault_last());

	for (int i = 0; i < NNAMES; i++) {
		coil_obj_close(f->h[i]);
		f->h[i] = NULL;
	}
	if (coil_close(f->s) < 0)
		cut = true;
	f->s = NULL;
	return cut;
}

/* Read object i from the store into a state. */
static int load_state(struct fz *f, int i, struct state *st)
{
	coil_obj *h;
	int rc = coil_obj_open(f->s, names[i], 0, &h);

	memset(st->data, 0, OBJ_MAX);
	st->size = 0;
	st->exists = rc == 0;
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	rc = coil_obj_size(h, &st->size);
	if (rc == 0 && st->size > OBJ_MAX)
		rc = -EFBIG;
	if (rc == 0 && st->size) {
		int64_t n = coil_pread(h, st->data, st->size, 0);
		rc = n == (int64_t)st->size ? 0 : n < 0 ? (int)n : -EIO;
	}
	coil_obj_close(h);
	return rc;
}

static bool state_eq(const struct state *a, const struct state *b)
{
	if (a->exists != b->exists)
		return false;
	if (!a->exists)
		return true;
	return a->size == b->size && !memcmp(a->data, b->data, a->size);
}

/* After a cut: every object must be one of its states since the last sync
 * (or the state of an op that was in flight when the cut came).
 * @return 1 when the freshly armed cut fired during the check itself (the
 * caller recovers again), else 0. */
static int check_recovered(struct fz *f)
{
	struct state got[NNAMES];

	for (int i = 0; i < NNAMES; i++) {
		int rc;

		got[i].data = f->rd + (size_t)i * OBJ_MAX;
		rc = load_state(f, i, &got[i]);
		if (rc < 0 && uring_fault_is_cut(uring_fault_last()))
			return 1;
		if (rc < 0) {
			violation(f, "object %d unreadable after a cut: %s",
				  i, coil_strerror(rc));
			got[i] = f->cur[i]; /* keep the model */
			got[i].data = f->rd + (size_t)i * OBJ_MAX;
			memcpy(got[i].data, f->cur[i].data, OBJ_MAX);
		}
	}
	for (int i = 0; i < NNAMES; i++) {
		unsigned k;

		for (k = 0; k < f->nhist[i]; k++)
			if (state_eq(&got[i], &f->hist[i][k]))
				break;
		if (k == f->nhist[i] && !(f->maybe_pending &&
					  state_eq(&got[i], &f->cur[i]))) {
			violation(f, "object %d after a cut (exists %d size %llu) "
				  "matches none of its %u states since the last "
				  "sync (I1/I2)", i, got[i].exists,
				  (unsigned long long)got[i].size, f->nhist[i]);
		}
		/* what is there is the truth from here on */
		state_copy(&f->cur[i], &got[i]);
		if (f->h[i] == NULL && got[i].exists &&
		    coil_obj_open(f->s, names[i], 0, &f->h[i]) < 0)
			f->h[i] = NULL;
		if (f->h[i] && !got[i].exists) {
			coil_obj_close(f->h[i]);
			f->h[i] = NULL;
		}
	}
	f->maybe_pending = false;
	hist_reset(f);
	return 0;
}

static void check_exact(struct fz *f, const char *when)
{
	struct state got = { .data = f->rd };

	for (int i = 0; i < NNAMES; i++) {
		int rc = load_state(f, i, &got);
		if (rc < 0 || !state_eq(&got, &f->cur[i])) {
			fprintf(stderr, "rel: apifuzz %s: object %d differs "
				"(rc %d, size %llu vs %llu)\n", when, i, rc,
				(unsigned long long)got.size,
				(unsigned long long)f->cur[i].size);
			violation(f, "object %d differs from the model %s", i,
				  when);
		}
	}
}

/* Reopen after a cut and check; the store is already closed. */
static void reopen_after_cut(struct fz *f)
{
	struct uring_fault_spec sp;

	f->cuts++;
	spec_make(f, &sp);
	while (open_store(f, &sp) && check_recovered(f) == 1) {
		/* the new ring's cut came during the check: that is one
		 * more crash during recovery; recover once more, uncut */
		f->rec_cuts++;
		close_store(f);
		memset(&sp, 0, sizeof(sp));
		sp.record = true;
	}
}

/* A cut: now (between ops), or already happened mid-op. */
static void recover(struct fz *f, bool now)
{
	uint64_t r = rel_rng(&f->st);

	if (now) {
		int mode = (int)(1 + r % 3);
		uring_fault_cut(uring_fault_last(), mode, r >> 8);
	}
	close_store(f);
	reopen_after_cut(f);
}

/* An op failed.  Under a cut that is expected: go recover.  Otherwise it
 * is a violation.  @return true when the sequence must stop. */
static bool op_failed(struct fz *f, const char *what, int64_t rc)
{
	if (uring_fault_is_cut(uring_fault_last())) {
		f->maybe_pending = true;
		f->mid_cuts++;
		recover(f, false);
		return f->s == NULL;
	}
	violation(f, "%s failed: %s, no fault injected", what,
		  coil_strerror((int)rc));
	return false;
}

static void ensure_open(struct fz *f, int i)
{
	int rc;

	if (f->h[i])
		return;
	rc = coil_obj_open(f->s, names[i], COIL_CREATE, &f->h[i]);
	note(f, "create %d -> %d", i, rc);
	if (rc < 0) {
		f->h[i] = NULL;
		op_failed(f, "create", rc);
		return;
	}
	if (!f->cur[i].exists) {
		f->cur[i].exists = true;
		f->cur[i].size = 0;
		memset(f->cur[i].data, 0, OBJ_MAX);
		hist_push(f, i);
	}
}

/* Bad arguments: each must fail with a negative errno and change nothing. */
static void bad_args(struct fz *f, int i)
{
	char longname[COIL_NAME_MAX + 8];
	coil_obj *h = NULL;
	int64_t rc;
	int which = (int)(rel_rng(&f->st) % 6);

	f->badargs++;
	switch (which) {
	case 0:
		rc = coil_obj_open(f->s, "", COIL_CREATE, &h);
		break;
	case 1:
		memset(longname, 'n', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = 0;
		rc = coil_obj_open(f->s, longname, COIL_CREATE, &h);
		break;
	case 2:
		rc = f->h[i] ? coil_pwrite(f->h[i], NULL, 10, 0) : -EINVAL;
		break;
	case 3:
		rc = f->h[i] ? coil_pwrite(f->h[i], f->buf, 10, UINT64_MAX - 4) :
			       -EINVAL;
		break;
	case 4:
		rc = f->h[i] ? coil_obj_truncate(f->h[i], UINT64_MAX) : -EINVAL;
		break;
	default:
		rc = f->h[i] ? coil_pread(f->h[i], NULL, 10, 0) : -EINVAL;
		break;
	}
	note(f, "badarg %d obj %d -> %lld", which, i, (long long)rc);
	if (rc >= 0) {
		violation(f, "bad argument case %d accepted (%lld)", which,
			  (long long)rc);
		if (h)
			coil_obj_close(h);
	}
}

static bool step(struct fz *f)
{
	uint64_t r = rel_rng(&f->st);
	int i = (int)(r % NNAMES), op = (int)((r >> 8) % 100);
	struct state *c = &f->cur[i];
	int64_t rc;

	f->ops++;
	if (op < 30) {                           /* write */
		uint64_t off = (r >> 16) % (OBJ_MAX - 1);
		uint32_t len = 1 + (uint32_t)((r >> 40) %
			COIL_MIN((uint64_t)WRITE_MAX, OBJ_MAX - off));

		ensure_open(f, i);
		if (!f->h[i])
			return f->s == NULL;
		rel_fill(f->buf, len, f->seed, (uint32_t)(f->opno & 0xfffff), 1);
		rc = coil_pwrite(f->h[i], f->buf, len, off);
		note(f, "write %d off %llu len %u -> %lld", i,
		     (unsigned long long)off, len, (long long)rc);
		if (rc == (int64_t)len) {
			memcpy(c->data + off, f->buf, len);
			if (off + len > c->size)
				c->size = off + len;
			hist_push(f, i);
		} else {
			/* in flight at a cut: it may or may not be there */
			memcpy(c->data + off, f->buf, len);
			if (off + len > c->size)
				c->size = off + len;
			return op_failed(f, "write", rc);
		}
	} else if (op < 50) {                    /* read */
		uint64_t off = (r >> 16) % (OBJ_MAX + 100);
		uint32_t len = 1 + (uint32_t)((r >> 40) % WRITE_MAX);
		int64_t want;

		if (!f->h[i])
			return false;
		want = off >= c->size ? 0 : (int64_t)COIL_MIN((uint64_t)len, c->size - off);
		rc = coil_pread(f->h[i], f->rd, len, off);
		note(f, "read %d off %llu len %u -> %lld", i,
		     (unsigned long long)off, len, (long long)rc);
		if (rc < 0)
			return op_failed(f, "read", rc);
		if (rc != want || memcmp(f->rd, c->data + off, (size_t)want))
			violation(f, "read returned %lld bytes, model says %lld, "
				  "or the bytes differ (I3)", (long long)rc,
				  (long long)want);
	} else if (op < 58) {                    /* truncate */
		uint64_t sz = (r >> 16) % OBJ_MAX;

		if (!f->h[i])
			return false;
		rc = coil_obj_truncate(f->h[i], sz);
		note(f, "truncate %d to %llu -> %lld", i,
		     (unsigned long long)sz, (long long)rc);
		if (sz < c->size)
			memset(c->data + sz, 0, c->size - sz);
		c->size = sz;
		if (rc < 0)
			return op_failed(f, "truncate", rc);
		hist_push(f, i);
	} else if (op < 63) {                    /* remove */
		rc = coil_obj_remove(f->s, names[i]);
		note(f, "remove %d -> %lld", i, (long long)rc);
		if (!c->exists) {
			/* a cut (of a background checkpoint's I/O, say) has
			 * made the store fail everything: -EIO is the cut's */
			if (rc < 0 && rc != -ENOENT &&
			    uring_fault_is_cut(uring_fault_last()))
				return op_failed(f, "remove", rc);
			if (rc != -ENOENT)
				violation(f, "remove of a missing object: %lld",
					  (long long)rc);
			return false;
		}
		c->exists = false;
		c->size = 0;
		memset(c->data, 0, OBJ_MAX);
		if (rc < 0)
			return op_failed(f, "remove", rc);
		hist_push(f, i);
		if (f->h[i]) {
			uint64_t sz;
			rc = coil_obj_size(f->h[i], &sz);
			if (rc != -EBADF)
				violation(f, "size on a removed object's handle: "
					  "%lld, not -EBADF", (long long)rc);
			coil_obj_close(f->h[i]);
			f->h[i] = NULL;
		}
	} else if (op < 68) {                    /* create, maybe EXCL */
		coil_obj *h;
		bool excl = (r >> 16) & 1;

		rc = coil_obj_open(f->s, names[i], COIL_CREATE |
				   (excl ? COIL_EXCL : 0), &h);
		note(f, "create%s %d -> %lld", excl ? " excl" : "", i,
		     (long long)rc);
		if (excl && c->exists) {
			if (rc != -EEXIST)
				violation(f, "EXCL create of an existing object: "
					  "%lld", (long long)rc);
			if (rc == 0)
				coil_obj_close(h);
			return false;
		}
		if (rc < 0)
			return op_failed(f, "create", rc);
		coil_obj_close(h);
		if (!c->exists) {
			c->exists = true;
			c->size = 0;
			hist_push(f, i);
		}
		if (!f->h[i])
			coil_obj_open(f->s, names[i], 0, &f->h[i]);
	} else if (op < 73) {                    /* size */
		uint64_t sz = 0;

		if (!f->h[i])
			return false;
		rc = coil_obj_size(f->h[i], &sz);
		note(f, "size %d -> %lld (%llu)", i, (long long)rc,
		     (unsigned long long)sz);
		if (rc < 0)
			return op_failed(f, "size", rc);
		if (sz != c->size)
			violation(f, "size %llu, model %llu",
				  (unsigned long long)sz,
				  (unsigned long long)c->size);
	} else if (op < 83) {                    /* sync */
		rc = do_sync(f);
		if (rc < 0)
			return op_failed(f, "sync", rc);
	} else if (op < 86) {                    /* clean reopen */
		struct uring_fault_spec sp;

		note(f, "reopen");
		if (close_store(f)) {
			/* the sequence's armed cut came first (maybe inside
			 * close): this is a recovery, not a clean reopen */
			f->mid_cuts++;
			reopen_after_cut(f);
			return f->s == NULL;
		}
		memset(&sp, 0, sizeof(sp));
		sp.record = true; /* a clean reopen must show everything */
		f->reopens++;
		if (!open_store(f, &sp))
			return true;
		check_exact(f, "after a clean reopen");
		hist_reset(f);
	} else if (op < 90) {                    /* cut between ops */
		note(f, "cut");
		recover(f, true);
		return f->s == NULL;
	} else {
		bad_args(f, i);
	}
	return false;
}

Test(rel, apifuzz, .timeout = 900)
{
	struct fz *f = calloc(1, sizeof(*f));
	uint64_t seqs = rel_scaled(40, 4);
	const unsigned steps = 150;

	f->seed = rel_seed();
	f->st = f->seed ^ 0xa91f;
	rel_announce("apifuzz", f->seed);
	f->buf = malloc(OBJ_MAX);
	f->rd = malloc(NNAMES * OBJ_MAX + WRITE_MAX);
	for (int i = 0; i < NNAMES; i++) {
		f->cur[i].data = calloc(1, OBJ_MAX);
		for (int k = 0; k < HIST_MAX; k++)
			f->hist[i][k].data = malloc(OBJ_MAX);
	}
	rel_path(f->path, sizeof(f->path), "apifuzz");
	rel_opts(&f->o, 24ull << 20);

	for (uint64_t q = 0; q < seqs && !f->bad; q++) {
		struct uring_fault_spec sp;

		/* a fresh store per sequence; half the sequences also get a
		 * cut at a random ring op */
		unlink(f->path);
		f->o.flags |= COIL_CREATE;
		for (int i = 0; i < NNAMES; i++) {
			f->cur[i].exists = false;
			f->cur[i].size = 0;
			memset(f->cur[i].data, 0, OBJ_MAX);
		}
		f->midcut = q % 2;
		spec_make(f, &sp);
		if (!open_store(f, &sp))
			break;
		f->o.flags &= ~COIL_CREATE;
		hist_reset(f);
		for (unsigned n = 0; n < steps && f->s; n++)
			if (step(f))
				break;
		if (f->s && close_store(f)) {
			f->mid_cuts++;
			reopen_after_cut(f);
			if (f->s)
				close_store(f);
		}
		/* the last state must survive a clean close */
		memset(&sp, 0, sizeof(sp));
		if (!f->bad && open_store(f, &sp)) {
			check_exact(f, "at the end of a sequence");
			close_store(f);
		}
	}
	fprintf(stderr, "rel: apifuzz ops=%llu syncs=%llu reopens=%llu "
		"cuts=%llu (mid-op %llu, in open %llu) bad_args=%llu\n",
		(unsigned long long)f->ops, (unsigned long long)f->syncs,
		(unsigned long long)f->reopens, (unsigned long long)f->cuts,
		(unsigned long long)f->mid_cuts, (unsigned long long)f->rec_cuts,
		(unsigned long long)f->badargs);
	rel_report("apifuzz", "sequences", seqs, f->bad, f->seed);
	cr_assert_eq(f->bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)f->bad, (unsigned long long)f->seed);
	cr_assert_gt(f->cuts, 0);
	unlink(f->path);
	for (int i = 0; i < NNAMES; i++) {
		free(f->cur[i].data);
		for (int k = 0; k < HIST_MAX; k++)
			free(f->hist[i][k].data);
	}
	free(f->buf);
	free(f->rd);
	free(f);
}
