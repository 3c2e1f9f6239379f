/* test_rel_apifuzz: random sequences of API calls against an in-memory
 * model, with power cuts mixed in (docs/reliability.md, row 5, second
 * half).
 *
 * Ops: create (with and without EXCL), write (random offset and length,
 * holes, extensions), read (compared byte for byte: I3), truncate (shrink
 * and grow), remove (then the old handle must say -EBADF), coil_obj_size,
 * coil_sync, clean close + reopen (everything must be there), batches of
 * one to six random operations (writes, truncates, creates, removes,
 * renames with and without COIL_RENAME_NOREPLACE, onto the own name too,
 * clones (onto a free name mostly, then written, truncated and removed
 * independently of their source, which the model checks byte for byte),
 * and bad arguments, which must be refused as they are added) committed
 * against a staged copy of the model: the commit must return what the
 * model says (0, or -ENOENT / -EEXIST from the first operation that
 * fails, and then nothing applies), the model takes the batch only when
 * it returned 0, a handle follows its object to its new name and one to
 * an object the batch removed or replaced says -EBADF; coil_obj_rename and
 * coil_obj_clone;
 * bad arguments (each must be a negative errno, never a crash), and power
 * cuts of two kinds: between ops (the seam reverts what no fsync covered:
 * all, a random subset, or torn sectors), and at a random ring op in the
 * middle of the sequence (the op in flight fails).  After a cut the store
 * must open (I4) and each object must be in a state it passed through
 * since the last successful sync (I1 + I2: the per-object prefix),
 * whole. */
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
	struct state stage[NNAMES]; /* a batch's staged model */
	uint64_t oid[NNAMES];    /* which object each name holds (h[i] is a
				  * handle to oid[i]); 0: none */
	uint64_t next_oid;
	char last[8][96];        /* the last ops, for a violation report */
	bool midcut;             /* this sequence arms cuts at random ops */
	uint64_t bad, cuts, mid_cuts, rec_cuts, reopens, ops, syncs, badargs;
	uint64_t batches, batches_refused, renames, clones;
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
		f->oid[i] = f->cur[i].exists ? ++f->next_oid : 0;
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
		f->oid[i] = got[i].exists ? ++f->next_oid : 0;
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
		f->oid[i] = ++f->next_oid;
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

/* ---- batches and renames ------------------------------------------------- */

/* One operation on the staged model (f->stage, f->oid staged in @oid).
 * @return what the batch must then fail with, or 0. */
enum { B_WRITE, B_TRUNCATE, B_CREATE, B_REMOVE, B_RENAME, B_CLONE };

static int stage_op(struct fz *f, uint64_t *oid, int kind, int i, int j,
		    unsigned flags, uint64_t off, uint32_t len)
{
	struct state *a = &f->stage[i], *b = &f->stage[j];

	switch (kind) {
	case B_WRITE:
		if (!a->exists)
			return -ENOENT;
		memcpy(a->data + off, f->buf, len);
		if (off + len > a->size)
			a->size = off + len;
		return 0;
	case B_TRUNCATE:
		if (!a->exists)
			return -ENOENT;
		if (off < a->size)
			memset(a->data + off, 0, a->size - off);
		a->size = off;
		return 0;
	case B_CREATE:
		if (a->exists)
			return -EEXIST;
		a->exists = true;
		a->size = 0;
		memset(a->data, 0, OBJ_MAX);
		oid[i] = ++f->next_oid;
		return 0;
	case B_REMOVE:
		if (!a->exists)
			return -ENOENT;
		a->exists = false;
		a->size = 0;
		memset(a->data, 0, OBJ_MAX);
		oid[i] = 0;
		return 0;
	case B_CLONE: /* i to a new j: shares i's blobs */
		if (!a->exists)
			return -ENOENT;
		if (b->exists)
			return -EEXIST;
		state_copy(b, a);
		oid[j] = ++f->next_oid;
		return 0;
	default: /* B_RENAME i to j */
		if (!a->exists)
			return -ENOENT;
		if (i == j)
			return 0;
		if (b->exists && (flags & COIL_RENAME_NOREPLACE))
			return -EEXIST;
		state_copy(b, a);
		a->exists = false;
		a->size = 0;
		memset(a->data, 0, OBJ_MAX);
		oid[j] = oid[i];
		oid[i] = 0;
		return 0;
	}
}

/* A name whose staged object exists (@exists) or not, from @i on; @i
 * when there is none. */
static int stage_pick(const struct fz *f, bool exists, int i)
{
	for (int k = 0; k < NNAMES; k++)
		if (f->stage[(i + k) % NNAMES].exists == exists)
			return (i + k) % NNAMES;
	return i;
}

/* An argument coil_batch_* must refuse as it is added (the batch then
 * holds no trace of it).  @return the call's result. */
static int batch_bad_arg(struct fz *f, coil_batch *b, uint64_t r)
{
	char longname[COIL_NAME_MAX + 8];

	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	f->badargs++;
	switch (r % 7) {
	case 0:
		return coil_batch_write(b, names[0], NULL, 10, 0);
	case 1:
		return coil_batch_write(b, "", f->buf, 10, 0);
	case 2:
		return coil_batch_create(b, longname);
	case 3:
		return coil_batch_rename(b, names[0], names[1], 0x4);
	case 4:
		return coil_batch_write(b, names[1], f->buf, 10, UINT64_MAX - 4);
	case 5:
		return coil_batch_truncate(b, names[2], UINT64_MAX);
	default:
		return coil_batch_rename(b, names[2], NULL, 0);
	}
}

/* The batch applied (commit returned 0): the model takes the staged state,
 * and each handle follows its object — to its new name, or, when the batch
 * removed or replaced it, to -EBADF. */
static void batch_applied(struct fz *f, const uint64_t *oid)
{
	coil_obj *nh[NNAMES] = { NULL };
	bool changed[NNAMES];

	for (int i = 0; i < NNAMES; i++) {
		uint64_t sz = 0;
		int j, rc;

		if (!f->h[i])
			continue;
		for (j = 0; j < NNAMES && oid[j] != f->oid[i]; j++)
			;
		rc = coil_obj_size(f->h[i], &sz);
		if (j == NNAMES) {
			if (rc != -EBADF)
				violation(f, "handle of %d, whose object the "
					  "batch removed or replaced: size "
					  "%d, not -EBADF", i, rc);
			coil_obj_close(f->h[i]);
		} else {
			if (rc != 0 || sz != f->stage[j].size)
				violation(f, "handle of %d, whose object is %d "
					  "now: size %d %llu, model %llu", i, j,
					  rc, (unsigned long long)sz,
					  (unsigned long long)f->stage[j].size);
			nh[j] = f->h[i];
		}
	}
	for (int i = 0; i < NNAMES; i++) {
		changed[i] = oid[i] != f->oid[i] ||
			     !state_eq(&f->stage[i], &f->cur[i]);
		f->h[i] = nh[i];
		f->oid[i] = oid[i];
		if (changed[i])
			state_copy(&f->cur[i], &f->stage[i]);
	}
	/* all of the batch is in the model before a push may sync */
	for (int i = 0; i < NNAMES; i++)
		if (changed[i])
			hist_push(f, i);
}

/* A batch of one to six random operations, some invalid, or (@single) a
 * coil_obj_rename or coil_obj_clone.  @return true when the sequence must
 * stop. */
static bool do_batch(struct fz *f, uint64_t r, bool single)
{
	unsigned nops = single ? 1 : 1 + (unsigned)(r % 6), added = 0;
	uint64_t oid[NNAMES];
	coil_batch *b = NULL;
	int expect = 0, rc = 0;
	char desc[64] = "";
	const char *what = "batch";

	for (int i = 0; i < NNAMES; i++) {
		state_copy(&f->stage[i], &f->cur[i]);
		oid[i] = f->oid[i];
	}
	if (!single && (rc = coil_batch_new(f->s, &b)) < 0) {
		violation(f, "coil_batch_new: %s", coil_strerror(rc));
		return false;
	}
	for (unsigned k = 0; k < nops; k++) {
		uint64_t q = rel_rng(&f->st);
		int i = (int)(q % NNAMES), j = (int)((q >> 8) % NNAMES);
		int kind = single ? ((q >> 62) & 1 ? B_CLONE : B_RENAME) :
				    (int)((q >> 16) % 9);
		unsigned flags = (q >> 20) & 1 ? COIL_RENAME_NOREPLACE : 0;
		uint64_t off = (q >> 24) % (OBJ_MAX - 1);
		uint32_t len = 0;
		uint64_t q2;
		int want;

		if (kind == 8) {             /* a bad argument */
			rc = batch_bad_arg(f, b, q >> 32);
			if (rc >= 0)
				violation(f, "batch bad argument %llu accepted",
					  (unsigned long long)((q >> 32) % 7));
			continue;
		}
		if (kind > B_CLONE)
			kind = kind == 6 ? B_WRITE : B_RENAME;
		/* mostly a name the operation is valid for at this point of
		 * the batch; one in eight stays random */
		q2 = rel_rng(&f->st);
		if (q2 % 8 != 0) {
			i = stage_pick(f, kind != B_CREATE, i);
			if ((kind == B_RENAME && (q2 >> 8) % 4 == 0) ||
			    (kind == B_CLONE && (q2 >> 8) % 4 != 0))
				j = stage_pick(f, false, j);
		}
		if (kind == B_WRITE) {
			len = 1 + (uint32_t)((q >> 40) %
				COIL_MIN((uint64_t)20000, OBJ_MAX - off));
			rel_fill(f->buf, len, f->seed,
				 (uint32_t)((f->opno * 8 + k) & 0xfffff), 1);
		}
		if (single && kind == B_CLONE)
			rc = coil_obj_clone(f->s, names[i], names[j]);
		else if (single)
			rc = coil_obj_rename(f->s, names[i], names[j], flags);
		else if (kind == B_WRITE)
			rc = coil_batch_write(b, names[i], f->buf, len, off);
		else if (kind == B_TRUNCATE)
			rc = coil_batch_truncate(b, names[i], off);
		else if (kind == B_CREATE)
			rc = coil_batch_create(b, names[i]);
		else if (kind == B_REMOVE)
			rc = coil_batch_remove(b, names[i]);
		else if (kind == B_CLONE)
			rc = coil_batch_clone(b, names[i], names[j]);
		else
			rc = coil_batch_rename(b, names[i], names[j], flags);
		want = stage_op(f, oid, kind, i, j, flags, off, len);
		if (single)
			what = kind == B_CLONE ? "clone" : "rename";
		if (!single && rc != 0) {
			violation(f, "adding batch op %d (kind %d): %s", k, kind,
				  coil_strerror(rc));
			continue;
		}
		added++;
		if (!expect)
			expect = want;
		snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc),
			 "%s%d%d%d", k ? "," : "", kind, i, j);
	}
	if (!single)
		rc = coil_batch_commit(b);
	note(f, "%s [%s] -> %d (model %d)", what, desc,
	     rc, expect);
	if (single && what[0] == 'c')
		f->clones++;
	else if (single)
		f->renames++;
	else
		f->batches++;
	if (!single && added == 0) {
		/* nothing valid was added: an empty batch, refused or not */
		if (rc != 0 && rc != -EINVAL)
			violation(f, "empty batch: %s", coil_strerror(rc));
		return false;
	}
	if (rc == expect) {
		if (rc == 0)
			batch_applied(f, oid);
		else
			f->batches_refused++;
		return false;
	}
	if (expect == 0 && uring_fault_is_cut(uring_fault_last())) {
		/* in flight at a cut: wholly there or wholly absent */
		for (int i = 0; i < NNAMES; i++)
			state_copy(&f->cur[i], &f->stage[i]);
		return op_failed(f, what, rc);
	}
	if (uring_fault_is_cut(uring_fault_last()))
		return op_failed(f, what, rc);
	violation(f, "%s returned %s, the model says %s",
		  what, coil_strerror(rc),
		  coil_strerror(expect));
	return false;
}

static bool step(struct fz *f)
{
	uint64_t r = rel_rng(&f->st);
	int i = (int)(r % NNAMES), op = (int)((r >> 8) % 112);
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
			f->oid[i] = ++f->next_oid;
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
	} else if (op < 100) {
		bad_args(f, i);
	} else if (op < 108) {                   /* batch */
		return do_batch(f, r >> 16, false);
	} else {                                 /* coil_obj_rename */
		return do_batch(f, r >> 16, true);
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
		f->stage[i].data = calloc(1, OBJ_MAX);
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
		"cuts=%llu (mid-op %llu, in open %llu) bad_args=%llu "
		"batches=%llu (refused %llu) renames=%llu clones=%llu\n",
		(unsigned long long)f->ops, (unsigned long long)f->syncs,
		(unsigned long long)f->reopens, (unsigned long long)f->cuts,
		(unsigned long long)f->mid_cuts, (unsigned long long)f->rec_cuts,
		(unsigned long long)f->badargs, (unsigned long long)f->batches,
		(unsigned long long)f->batches_refused,
		(unsigned long long)f->renames, (unsigned long long)f->clones);
	rel_report("apifuzz", "sequences", seqs, f->bad, f->seed);
	cr_assert_eq(f->bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)f->bad, (unsigned long long)f->seed);
	cr_assert_gt(f->cuts, 0);
	unlink(f->path);
	for (int i = 0; i < NNAMES; i++) {
		free(f->cur[i].data);
		free(f->stage[i].data);
		for (int k = 0; k < HIST_MAX; k++)
			free(f->hist[i][k].data);
	}
	free(f->buf);
	free(f->rd);
	free(f);
}
