/* test_rel_ioerr: the Nth I/O fails — once, and from then on — with EIO or
 * ENOSPC, comes back short, or completes -EAGAIN; in a live session and
 * during recovery (docs/reliability.md, row 3).
 *
 * A dry run of a scripted session counts its ring ops N; then the session
 * is repeated for every n in 1..N and every fault kind.  Expected:
 *   short results and -EAGAIN (within the ring's retry bound) are retried
 *     invisibly: the session sees no error at all and every write is there;
 *   EIO / ENOSPC (once or sticky) may fail writes, syncs or the close, but
 *     nothing is ever reported as success that is not: after a clean reopen
 *     every write a successful coil_sync acknowledged reads back exactly,
 *     and if close returned 0, every completed write does (close flushes);
 *   reads in the faulted session return the right bytes or a negative errno
 *     (I3), never bytes of no version;
 *   the store opens afterwards, every time (I4).
 * Recovery: a child writes, syncs and exits without closing; the image it
 * leaves is reopened with the n-th op of recovery faulted, for every n.  A
 * failed open is allowed for EIO/ENOSPC but must not damage the store: the
 * next clean open must recover every write the child completed.
 * Plus: a store really filled to -ENOSPC loses nothing already written. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "tests/rel/rel.h"
#include "uring/uring_fault.h"

#define NSLOTS 6
/* small on purpose: each run costs an open, a close and a few fsyncs, and
 * the count that matters is runs (every op of the session, every kind) */
#define WRITES 8
#define SYNC_EVERY 4

enum fkind {
	F_EIO_ONCE,
	F_EIO_STICKY,
	F_ENOSPC_ONCE,
	F_ENOSPC_STICKY,
	F_SHORT,
	F_EAGAIN,
	F_NKINDS
};

static const char *fkind_name[] = { "eio_once", "eio_sticky", "enospc_once",
				    "enospc_sticky", "short", "eagain" };

static bool fkind_invisible(int k)
{
	return k == F_SHORT || k == F_EAGAIN;
}

/* @op: the op kind a fail fault targets (URING_FAULT_ANY or one kind) */
static void fault_spec(struct uring_fault_spec *sp, int kind, uint64_t n,
		       unsigned op)
{
	memset(sp, 0, sizeof(*sp));
	switch (kind) {
	case F_EIO_ONCE:
	case F_EIO_STICKY:
	case F_ENOSPC_ONCE:
	case F_ENOSPC_STICKY:
		sp->fail_kind = (uint8_t)op;
		sp->fail_nth = n;
		sp->fail_errno = kind <= F_EIO_STICKY ? EIO : ENOSPC;
		sp->fail_sticky = kind == F_EIO_STICKY || kind == F_ENOSPC_STICKY;
		break;
	case F_SHORT:
		/* n counts reads and writes only; the caller maps it */
		sp->short_kind = 0;
		sp->short_nth = n;
		sp->short_len = 0;
		break;
	case F_EAGAIN:
		sp->eagain_kind = URING_FAULT_ANY;
		sp->eagain_nth = n;
		/* below URING_RETRY_MAX: must stay invisible */
		sp->eagain_times = 1 + (unsigned)(n % (URING_RETRY_MAX - 1));
		break;
	}
}

struct tally {
	uint64_t runs;
	uint64_t bad;
	uint64_t failed_sessions;   /* a write/sync/close reported an error */
	uint64_t read_errs;
	uint64_t per_kind[F_NKINDS];
};


/* Live-session faults over every op of one workload. */
static void live_faults(const char *path, const struct coil_options *o,
			const struct rel_layout *l, struct rel_track *t,
			uint64_t seed, uint64_t wseed, uint8_t *buf,
			struct tally *ty)
{
	struct rel_session ss;
	uint64_t nops, nrw;
	char what[160];

	rel_session_run(path, o, l, t, seed, wseed, WRITES, SYNC_EVERY, true,
			buf, &ss);
	cr_assert_eq(ss.open_rc, 0);
	cr_assert_eq(ss.first_err, 0, "fault-free session: %s",
		     coil_strerror(ss.first_err));
	cr_assert_eq(ss.close_rc, 0);
	ty->bad += ss.bad;
	ty->bad += rel_verify(path, o, l, t, seed, REL_FLOOR_COMPLETED,
			      "ioerr dry run");
	nops = ss.ops;
	/* reads + writes: short faults count only those */
	nrw = nops - ss.fsyncs;

	for (int k = 0; k < F_NKINDS; k++) {
		uint64_t lim = k == F_SHORT ? nrw : nops;

		for (uint64_t n = 1; n <= lim; n++) {
			struct uring_fault_spec sp;
			enum rel_floor fl;

			fault_spec(&sp, k, n, URING_FAULT_ANY);
			uring_fault_set_next(&sp);
			rel_session_run(path, o, l, t, seed, wseed, WRITES,
					SYNC_EVERY, true, buf, &ss);
			uring_fault_set_next(NULL);
			snprintf(what, sizeof(what), "ioerr %s at op %llu",
				 fkind_name[k], (unsigned long long)n);
			ty->runs++;
			ty->per_kind[k]++;
			ty->bad += ss.bad;
			ty->read_errs += ss.read_errs;
			if (ss.open_rc < 0 || ss.first_err < 0 || ss.close_rc < 0)
				ty->failed_sessions++;
			if (fkind_invisible(k) &&
			    (ss.open_rc < 0 || ss.first_err < 0 ||
			     ss.close_rc < 0 || ss.read_errs)) {
				fprintf(stderr, "rel: VIOLATION %s: not retried "
					"invisibly (open %d, first error %s, "
					"close %d, %u read errors)\n", what,
					ss.open_rc, coil_strerror(ss.first_err),
					ss.close_rc, ss.read_errs);
				ty->bad++;
			}
			/* close returning 0 claims every completed write is
			 * durable; otherwise only what a sync acknowledged */
			fl = ss.open_rc == 0 && ss.close_rc == 0 ?
				REL_FLOOR_COMPLETED : REL_FLOOR_DURABLE;
			/* a read-only reopen (recovery in memory) is cheap;
			 * every fourth check reopens read-write (the next
			 * session's open recovers for real anyway) */
			if (n % 4 == 0)
				ty->bad += rel_verify(path, o, l, t, seed, fl, what);
			else
				ty->bad += rel_verify_ro(path, o, l, t, seed, fl,
							 what);
		}
	}
}

/* Child: open, write, sync, and leave without closing (an unclean image
 * whose open must replay the journal). */
static void make_unclean(const char *path, const struct coil_options *o,
			 const struct rel_layout *l, struct rel_track *t,
			 uint64_t seed, uint64_t wseed)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		coil_obj *h[REL_OBJS_MAX];
		coil_store *s;
		uint8_t *buf = malloc(rel_layout_maxlen(l));
		uint64_t rs = wseed;

		if (coil_open(path, o, &s) < 0 || rel_objs_open(s, l, h) < 0)
			_exit(3);
		for (int i = 0; i < 16; i++) {
			uint32_t slot = (uint32_t)(rel_rng(&rs) % l->nslots);
			if (rel_slot_write(h, l, t, seed, slot, buf) < 0)
				_exit(4);
			if (i == 7 && rel_sync(s, l, t) < 0)
				_exit(5);
		}
		_exit(0); /* no close: the journal holds the writes */
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unclean writer: %x", st);
}

/* One recovery with a fault: restore the image, open with the fault armed,
 * check what the faulted open shows, close, then check a clean reopen. */
static void recovery_one(const char *path, const struct rel_image *golden,
			 const struct coil_options *o,
			 const struct rel_layout *l, struct rel_track *t,
			 const struct rel_track *gt, uint64_t seed,
			 const struct uring_fault_spec *sp, bool invisible,
			 const char *what, struct tally *ty)
{
	coil_store *s;
	int rc;

	cr_assert_geq(rel_image_restore(golden, path), 0);
	memcpy(t, gt, sizeof(*t));
	uring_fault_set_next(sp);
	rc = coil_open(path, o, &s);
	uring_fault_set_next(NULL);
	ty->runs++;
	if (rc == 0) {
		unsigned errs = 0;
		ty->bad += rel_check_slots(s, l, t, seed, REL_FLOOR_COMPLETED,
					   REL_CHECK_ERR_OK, what, &errs);
		ty->read_errs += errs;
		if (invisible && errs) {
			fprintf(stderr, "rel: VIOLATION %s: %u read errors\n",
				what, errs);
			ty->bad++;
		}
		rc = coil_close(s);
	} else {
		ty->failed_sessions++;
	}
	if (invisible && rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: not retried invisibly: %s\n",
			what, coil_strerror(rc));
		ty->bad++;
	}
	/* the child completed these: a failed recovery must not have cost
	 * them (read-only reopen; the next trial restores the image) */
	ty->bad += rel_verify_ro(path, o, l, t, seed, REL_FLOOR_COMPLETED, what);
}

static void recovery_faults(const char *path, const struct rel_image *golden,
			    const struct coil_options *o,
			    const struct rel_layout *l, struct rel_track *t,
			    const struct rel_track *gt, uint64_t seed,
			    struct tally *ty)
{
	static const unsigned ops[] = { URING_OP_READ, URING_OP_WRITE,
					URING_OP_FSYNC };
	uint64_t count[URING_OP_MAX_], nops;
	struct uring_fault_spec sp;
	coil_store *s;
	char what[160];
	/* Under the sanitizer pass (a small scale) every third op of each
	 * kind, from an offset the seed picks: another seed covers the
	 * others.  At scale 0.3 and above, every op. */
	const uint64_t stride = rel_scale() < 0.3 ? 3 : 1;
	const uint64_t first = 1 + seed % stride;

	/* dry run: how many ops of each kind does this recovery issue? */
	cr_assert_geq(rel_image_restore(golden, path), 0);
	cr_assert_eq(coil_open(path, o, &s), 0);
	for (unsigned k = 0; k < URING_OP_MAX_; k++)
		count[k] = uring_fault_count(uring_fault_last(), k);
	nops = count[URING_FAULT_ANY];
	cr_assert_eq(coil_close(s), 0);

	/* fail faults: the n-th op of each kind in turn */
	for (int k = F_EIO_ONCE; k <= F_ENOSPC_STICKY; k++) {
		for (unsigned j = 0; j < sizeof(ops) / sizeof(ops[0]); j++) {
			for (uint64_t n = first; n <= count[ops[j]];
			     n += stride) {
				snprintf(what, sizeof(what), "ioerr recovery %s "
					 "at %s %llu", fkind_name[k],
					 uring_op_name(ops[j]),
					 (unsigned long long)n);
				fault_spec(&sp, k, n, ops[j]);
				ty->per_kind[k]++;
				recovery_one(path, golden, o, l, t, gt, seed,
					     &sp, false, what, ty);
			}
		}
	}
	for (int k = F_SHORT; k <= F_EAGAIN; k++) {
		uint64_t lim = k == F_SHORT ? count[URING_OP_READ] +
					      count[URING_OP_WRITE] : nops;

		for (uint64_t n = first; n <= lim; n += stride) {
			snprintf(what, sizeof(what), "ioerr recovery %s at op %llu",
				 fkind_name[k], (unsigned long long)n);
			fault_spec(&sp, k, n, URING_FAULT_ANY);
			ty->per_kind[k]++;
			recovery_one(path, golden, o, l, t, gt, seed, &sp, true,
				     what, ty);
		}
	}
}

Test(rel, ioerr, .timeout = 900)
{
	uint64_t seed = rel_seed();
	uint64_t target = rel_scaled(1500, 40);
	struct tally ty = { 0 };
	uint64_t live_runs, rec_runs, w = 0;
	struct rel_track *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct rel_track *gt = calloc(1, sizeof(*gt));
	struct rel_layout l;
	struct coil_options o;
	char path[256];
	struct rel_image golden;
	uint8_t *buf;

	cr_assert_neq(t, MAP_FAILED);
	memset((void *)t, 0, sizeof(*t));
	rel_announce("ioerr", seed);
	rel_layout_make(&l, seed, 2, NSLOTS);
	buf = malloc(rel_layout_maxlen(&l));
	rel_path(path, sizeof(path), "ioerr");
	rel_opts(&o, 8ull << 20);
	cr_assert_eq(rel_store_create(path, &o, &l), 0);
	o.flags &= ~COIL_CREATE;

	/* about two thirds live, one third during recovery, at least one
	 * workload of each */
	do {
		live_faults(path, &o, &l, t, seed, rel_mix(seed ^ (w + 1)), buf,
			    &ty);
		w++;
	} while (ty.runs < target * 2 / 3);
	live_runs = ty.runs;
	do {
		make_unclean(path, &o, &l, t, seed, rel_mix(seed ^ (w + 77)));
		memcpy(gt, t, sizeof(*t));
		cr_assert_eq(rel_image_load(&golden, path), 0);
		recovery_faults(path, &golden, &o, &l, t, gt, seed, &ty);
		rel_image_free(&golden);
		w++;
	} while (ty.runs < target);
	rec_runs = ty.runs - live_runs;
	fprintf(stderr, "rel: ioerr live=%llu recovery=%llu",
		(unsigned long long)live_runs, (unsigned long long)rec_runs);
	for (int k = 0; k < F_NKINDS; k++)
		fprintf(stderr, " %s=%llu", fkind_name[k],
			(unsigned long long)ty.per_kind[k]);
	fprintf(stderr, " failed_sessions=%llu read_errors=%llu\n",
		(unsigned long long)ty.failed_sessions,
		(unsigned long long)ty.read_errs);
	rel_report("ioerr", "runs", ty.runs, ty.bad, seed);
	cr_assert_eq(ty.bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)ty.bad, (unsigned long long)seed);
	/* the faults must have bitten: many sessions saw an error */
	cr_assert_gt(ty.failed_sessions, ty.runs / 10);
	unlink(path);
	free(buf);
	free(gt);
	munmap((void *)t, sizeof(*t));
}

/* A store filled for real: every write up to the first -ENOSPC (and every
 * one that succeeded after it) must read back, before and after reopen. */
Test(rel, enospc_fill, .timeout = 300)
{
	uint64_t seed = rel_seed();
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	char path[256];
	const size_t len = 96 * 1024;
	uint8_t *buf = malloc(len), *rd = malloc(len), *scratch = malloc(len);
	uint32_t ok = 0, bad = 0, nospc = 0, key;
	static bool written[4096];
	int64_t rc;

	rel_announce("enospc_fill", seed);
	rel_path(path, sizeof(path), "enospc");
	rel_opts(&o, 8ull << 20);
	o.compression = "none"; /* random data would not compress anyway */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "fill", COIL_CREATE, &h), 0);
	/* key i at offset i*len, version 1; random data (odd keys mix) */
	for (key = 0; key < 4096 && nospc < 3; key++) {
		rel_fill(buf, len, seed, key, 1);
		rc = coil_pwrite(h, buf, len, (uint64_t)key * len);
		if (rc == -ENOSPC) {
			nospc++;
			continue;
		}
		cr_assert_eq(rc, (int64_t)len, "key %u: %s", key,
			     coil_strerror((int)rc));
		written[key] = true;
		ok++;
	}
	cr_assert_gt(nospc, 0, "an 8 MiB store took %u writes of 96 KiB", ok);
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			coil_obj_close(h);
			rc = coil_close(s);
			cr_assert(rc == 0 || rc == -ENOSPC, "close: %s",
				  coil_strerror((int)rc));
			o.flags &= ~COIL_CREATE;
			cr_assert_eq(coil_open(path, &o, &s), 0, "I4: reopen");
			cr_assert_eq(coil_obj_open(s, "fill", 0, &h), 0);
		}
		for (uint32_t k = 0; k < key; k++) {
			uint64_t v;
			rc = coil_pread(h, rd, len, (uint64_t)k * len);
			if (rc < 0) {
				fprintf(stderr, "rel: VIOLATION enospc pass %d "
					"key %u: read %s\n", pass, k,
					coil_strerror((int)rc));
				bad++;
				continue;
			}
			memset(rd + rc, 0, len - (size_t)rc);
			v = rel_ident(rd, len, seed, k, scratch);
			/* a write that got -ENOSPC is absent, the others
			 * hold version 1 */
			if (v == REL_WRONG || (written[k] && v != 1) ||
			    (!written[k] && v != REL_ABSENT)) {
				fprintf(stderr, "rel: VIOLATION enospc pass %d "
					"key %u: version %llx (written %d)\n",
					pass, k, (unsigned long long)v,
					written[k]);
				bad++;
			}
		}
	}
	coil_obj_close(h);
	coil_close(s);
	fprintf(stderr, "rel: enospc_fill writes_ok=%u enospc=%u\n", ok, nospc);
	rel_report("enospc_fill", "reads", 2ull * key, bad, seed);
	cr_assert_eq(bad, 0);
	unlink(path);
	free(buf);
	free(rd);
	free(scratch);
}

/* Regression test for engine bug B2 (docs/reliability.md): a full store
 * whose objects were removed answered -ENOSPC, because emptied segments
 * came back only through a checkpoint the allocator triggered but did not
 * wait for. */
Test(rel, enospc_reuse_after_remove, .timeout = 120)
{
	uint64_t seed = rel_seed();
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	char path[256];
	const size_t len = 96 * 1024;
	uint8_t *buf = malloc(len);
	int64_t rc = 0;
	int full = 0;

	rel_announce("enospc_reuse_after_remove", seed);
	rel_path(path, sizeof(path), "enospc-reuse");
	rel_opts(&o, 8ull << 20);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "fill", COIL_CREATE, &h), 0);
	for (uint32_t key = 0; key < 4096 && !full; key++) {
		rel_fill(buf, len, seed, key, 1);
		rc = coil_pwrite(h, buf, len, (uint64_t)key * len);
		full = rc == -ENOSPC;
	}
	cr_assert(full);
	coil_obj_close(h);
	cr_assert_eq(coil_obj_remove(s, "fill"), 0);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(coil_obj_open(s, "after", COIL_CREATE, &h), 0);
	rel_fill(buf, len, seed, 9999, 1);
	/* the store is empty now: this write must find space */
	rc = coil_pwrite(h, buf, len, 0);
	coil_obj_close(h);
	coil_close(s);
	unlink(path);
	free(buf);
	cr_assert_eq(rc, (int64_t)len, "write into an emptied store: %s",
		     coil_strerror((int)rc));
}
