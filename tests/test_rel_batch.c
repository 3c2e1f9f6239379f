/* test_rel_batch: batches are all or nothing across a crash — kill -9 and
 * power cuts at every ring op (docs/reliability.md, row "batches").
 *
 * Batch n is derived from (seed, n) and the set of objects that exist
 * after batch n - 1: writes to two or three objects (512 B to 150 KB, one
 * to three blobs, unaligned), a create, a rename over an existing object or
 * two names swapped through a free one, a clone (which the batch's writes
 * may then change, either side), a remove, a truncate, in a
 * shuffled order; and always a write of version n of the object "seq".  So
 * the parent can compute the state after any number k of batches, and a
 * store names its own k (the version "seq" holds: every batch writes it,
 * and a crash keeps a prefix of each object's writes).  After a crash the
 * store must open (I4), hold k batches with floor <= k <= submitted, and
 * every object — which exist, their sizes and every byte — must be exactly
 * the state after k batches: a batch is never seen in part, across objects
 * or within one (I2), and no completed batch is lost (I1: kill -9 keeps
 * every batch whose commit returned; a power cut every one acknowledged
 * before the last coil_sync that returned 0).
 *
 *   batch_kill9     a forked child commits batches (up to three in flight,
 *                   coil_batch_submit) until SIGKILL after a random delay,
 *                   a third of the time inside open and recovery; every
 *                   third cycle is left unchecked, so the next child's open
 *                   recovers it, and may itself be killed
 *   batch_powercut  a session (open, 12 batches, coil_sync every 3, close)
 *                   is run from the same store image once per ring op index
 *                   k, the seam cutting power at op k (drop all, random,
 *                   torn, in turn) until a run finishes uncut; every fourth
 *                   cut is followed by one inside the recovery.  Below
 *                   COIL_REL_SCALE 0.3 (the sanitizer pass) only every
 *                   (0.3 / scale)-th op, from a random first one
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
#include <unistd.h>

#include "coil.h"
#include "tests/rel/rel.h"
#include "uring/uring_fault.h"

#define NOBJ 5
#define OBJ_MAX (256u << 10)
#define OPS_MAX 16
#define SEQ_KEY 0xfffffu          /* rel_fill key of "seq" */
#define SEQ_LEN 4096u

static const char *names[NOBJ] = { "b0", "b1/dir", "b2 space", "b3", "b4" };

/* ---- batches and the model ----------------------------------------------- */

enum { OP_WRITE, OP_TRUNCATE, OP_CREATE, OP_REMOVE, OP_RENAME, OP_CLONE,
       OP_SEQ };

struct op {
	uint8_t kind;
	uint8_t a, b;              /* objects; rename, clone: a to b */
	unsigned flags;            /* rename */
	uint32_t off, len;         /* write; truncate: len is the size */
};

/* The state after n batches.  data NULL: only which objects exist (what
 * the generator needs; the child keeps that much). */
struct model {
	uint64_t n;
	bool exists[NOBJ];
	uint32_t size[NOBJ];
	uint8_t *data[NOBJ];       /* OBJ_MAX bytes each, zeros past size */
};

static void model_init(struct model *m, bool bytes)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < NOBJ; i++) {
		m->exists[i] = i < 3;
		if (bytes) {
			m->data[i] = calloc(1, OBJ_MAX);
			cr_assert(m->data[i]);
		}
	}
}

static void model_free(struct model *m)
{
	for (int i = 0; i < NOBJ; i++)
		free(m->data[i]);
}

static void model_copy(struct model *d, const struct model *s)
{
	d->n = s->n;
	for (int i = 0; i < NOBJ; i++) {
		d->exists[i] = s->exists[i];
		d->size[i] = s->size[i];
		if (d->data[i] && s->data[i])
			memcpy(d->data[i], s->data[i], OBJ_MAX);
	}
}

static int pick(uint64_t *st, const bool *ex, bool want, int not)
{
	int start = (int)(rel_rng(st) % NOBJ);

	for (int k = 0; k < NOBJ; k++) {
		int i = (start + k) % NOBJ;

		if (ex[i] == want && i != not)
			return i;
	}
	return -1;
}

static int count(const bool *ex)
{
	int c = 0;

	for (int i = 0; i < NOBJ; i++)
		c += ex[i];
	return c;
}

/* Batch m->n + 1, valid in @m's state.  @return the number of ops. */
static unsigned batch_gen(uint64_t seed, const struct model *m, struct op *ops)
{
	static const uint32_t sizes[] = { 512, 4096, 5000, 20000, 70000,
					  150000 };
	uint8_t plan[9] = { OP_WRITE, OP_WRITE, OP_WRITE, OP_CREATE, OP_RENAME,
			    OP_REMOVE, OP_TRUNCATE, OP_CREATE, OP_CLONE };
	uint64_t st = rel_mix(seed ^ rel_mix(m->n + 1));
	unsigned n = 0, seq_at;
	bool ex[NOBJ];

	memcpy(ex, m->exists, sizeof(ex));
	for (int i = 8; i > 0; i--) {
		int j = (int)(rel_rng(&st) % (uint64_t)(i + 1));
		uint8_t t = plan[i];

		plan[i] = plan[j];
		plan[j] = t;
	}
	seq_at = (unsigned)(rel_rng(&st) % 10);
	for (unsigned p = 0; p <= 9; p++) {
		uint64_t r = rel_rng(&st);
		int a, b, t;

		if (p == seq_at)
			ops[n++] = (struct op){ .kind = OP_SEQ };
		if (p == 9)
			break;
		switch (plan[p]) {
		case OP_WRITE:
			a = pick(&st, ex, true, -1);
			if (a < 0)
				break;
			ops[n].kind = OP_WRITE;
			ops[n].a = (uint8_t)a;
			ops[n].len = sizes[r % 6];
			ops[n].off = (uint32_t)((r >> 8) %
						(OBJ_MAX - ops[n].len + 1));
			n++;
			break;
		case OP_TRUNCATE:
			a = pick(&st, ex, true, -1);
			if (a < 0)
				break;
			ops[n++] = (struct op){ .kind = OP_TRUNCATE,
						.a = (uint8_t)a,
						.len = (uint32_t)(r % (OBJ_MAX + 1)) };
			break;
		case OP_CREATE:
			a = pick(&st, ex, false, -1);
			if (a < 0)
				break;
			ex[a] = true;
			ops[n++] = (struct op){ .kind = OP_CREATE, .a = (uint8_t)a };
			break;
		case OP_CLONE:
			/* a copy sharing a's blobs; the batch's other ops
			 * may write either afterwards */
			a = pick(&st, ex, true, -1);
			b = a < 0 ? -1 : pick(&st, ex, false, -1);
			if (b < 0)
				break;
			ex[b] = true;
			ops[n++] = (struct op){ .kind = OP_CLONE, .a = (uint8_t)a,
						.b = (uint8_t)b };
			break;
		case OP_REMOVE:
			if (count(ex) < 3)
				break;
			a = pick(&st, ex, true, -1);
			ex[a] = false;
			ops[n++] = (struct op){ .kind = OP_REMOVE, .a = (uint8_t)a };
			break;
		default: /* OP_RENAME */
			a = pick(&st, ex, true, -1);
			b = a < 0 ? -1 : pick(&st, ex, true, a);
			if (b < 0)
				break;
			t = pick(&st, ex, false, -1);
			if (t >= 0 && r % 3 == 0) {
				/* a and b swap names through a free one */
				ops[n++] = (struct op){ .kind = OP_RENAME,
					.a = (uint8_t)a, .b = (uint8_t)t,
					.flags = COIL_RENAME_NOREPLACE };
				ops[n++] = (struct op){ .kind = OP_RENAME,
					.a = (uint8_t)b, .b = (uint8_t)a,
					.flags = COIL_RENAME_NOREPLACE };
				ops[n++] = (struct op){ .kind = OP_RENAME,
					.a = (uint8_t)t, .b = (uint8_t)b,
					.flags = COIL_RENAME_NOREPLACE };
				break;
			}
			/* a over b, which it replaces */
			ex[a] = false;
			ops[n++] = (struct op){ .kind = OP_RENAME, .a = (uint8_t)a,
						.b = (uint8_t)b };
			break;
		}
	}
	/* eight of the plan at most, a swap's three renames, seq */
	if (n > OPS_MAX)
		abort();
	return n;
}

/* Apply a batch to the model (its bytes when it has them). */
static void model_apply(struct model *m, uint64_t seed, const struct op *ops,
			unsigned nops, uint8_t *buf)
{
	uint64_t ver = m->n + 1;

	for (unsigned i = 0; i < nops; i++) {
		const struct op *op = &ops[i];
		uint8_t *t;

		switch (op->kind) {
		case OP_WRITE:
			if (m->data[op->a]) {
				rel_fill(buf, op->len, seed, i, ver);
				memcpy(m->data[op->a] + op->off, buf, op->len);
			}
			if (op->off + op->len > m->size[op->a])
				m->size[op->a] = op->off + op->len;
			break;
		case OP_TRUNCATE:
			if (m->data[op->a] && op->len < m->size[op->a])
				memset(m->data[op->a] + op->len, 0,
				       m->size[op->a] - op->len);
			m->size[op->a] = op->len;
			break;
		case OP_CREATE:
			m->exists[op->a] = true;
			m->size[op->a] = 0;
			break;
		case OP_REMOVE:
			m->exists[op->a] = false;
			if (m->data[op->a])
				memset(m->data[op->a], 0, m->size[op->a]);
			m->size[op->a] = 0;
			break;
		case OP_CLONE:
			if (m->data[op->b])
				memcpy(m->data[op->b], m->data[op->a], OBJ_MAX);
			m->exists[op->b] = true;
			m->size[op->b] = m->size[op->a];
			break;
		case OP_RENAME:
			t = m->data[op->b];
			m->data[op->b] = m->data[op->a];
			m->data[op->a] = t;
			if (t)
				memset(t, 0, m->size[op->b]);
			m->exists[op->b] = true;
			m->size[op->b] = m->size[op->a];
			m->exists[op->a] = false;
			m->size[op->a] = 0;
			break;
		default: /* OP_SEQ: "seq" holds version n, seen by its reader */
			break;
		}
	}
	m->n = ver;
}

/* Move @m forward to @k batches. */
static void model_step_to(struct model *m, uint64_t seed, uint64_t k,
			  uint8_t *buf)
{
	struct op ops[OPS_MAX];

	while (m->n < k) {
		unsigned n = batch_gen(seed, m, ops);

		model_apply(m, seed, ops, n, buf);
	}
}

/* The batch for @m's next step, built (data from @buf, OBJ_MAX bytes). */
static int batch_build(coil_store *s, uint64_t seed, const struct model *m,
		       const struct op *ops, unsigned nops, uint8_t *buf,
		       coil_batch **out)
{
	uint64_t ver = m->n + 1;
	coil_batch *b;
	int rc = coil_batch_new(s, &b);

	for (unsigned i = 0; rc == 0 && i < nops; i++) {
		const struct op *op = &ops[i];

		switch (op->kind) {
		case OP_WRITE:
			rel_fill(buf, op->len, seed, i, ver);
			rc = coil_batch_write(b, names[op->a], buf, op->len,
					      op->off);
			break;
		case OP_TRUNCATE:
			rc = coil_batch_truncate(b, names[op->a], op->len);
			break;
		case OP_CREATE:
			rc = coil_batch_create(b, names[op->a]);
			break;
		case OP_REMOVE:
			rc = coil_batch_remove(b, names[op->a]);
			break;
		case OP_RENAME:
			rc = coil_batch_rename(b, names[op->a], names[op->b],
					       op->flags);
			break;
		case OP_CLONE:
			rc = coil_batch_clone(b, names[op->a], names[op->b]);
			break;
		default:
			rel_fill(buf, SEQ_LEN, seed, SEQ_KEY, ver);
			rc = coil_batch_write(b, "seq", buf, SEQ_LEN, 0);
			break;
		}
	}
	if (rc < 0) {
		coil_batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

/* ---- checking a store ---------------------------------------------------- */

/* The number of batches the open store holds ("seq"'s version), or -1
 * with a message when "seq" holds no version. */
static int64_t store_batches(coil_store *s, uint64_t seed, uint8_t *buf,
			     uint8_t *scratch, const char *what)
{
	coil_obj *h;
	uint64_t v;
	int64_t n;
	int rc = coil_obj_open(s, "seq", 0, &h);

	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: seq: open %s\n", what,
			coil_strerror(rc));
		return -1;
	}
	memset(buf, 0, SEQ_LEN);
	n = coil_pread(h, buf, SEQ_LEN, 0);
	coil_obj_close(h);
	if (n != 0 && n != SEQ_LEN) {
		fprintf(stderr, "rel: VIOLATION %s: seq: read %lld\n", what,
			(long long)n);
		return -1;
	}
	v = rel_ident(buf, SEQ_LEN, seed, SEQ_KEY, scratch);
	if (v == REL_WRONG) {
		fprintf(stderr, "rel: VIOLATION %s: seq holds bytes of no "
			"version (torn or wrong; I2/I3)\n", what);
		return -1;
	}
	return (int64_t)v;
}

static int count_cb(void *arg, const char *name, size_t len, uint64_t size)
{
	(void)name;
	(void)len;
	(void)size;
	(*(unsigned *)arg)++;
	return 0;
}

/* Every object of the open store against @m.  @return violations. */
static unsigned compare(coil_store *s, const struct model *m, uint8_t *buf,
			const char *what)
{
	unsigned bad = 0, listed = 0;

	for (int i = 0; i < NOBJ; i++) {
		coil_obj *h;
		uint64_t size = 0;
		int64_t n;
		int rc = coil_obj_open(s, names[i], 0, &h);

		if (!m->exists[i]) {
			if (rc != -ENOENT) {
				fprintf(stderr, "rel: VIOLATION %s: %s exists "
					"(open %s) after batch %llu removed or "
					"renamed it (I2)\n", what, names[i],
					coil_strerror(rc),
					(unsigned long long)m->n);
				bad++;
			}
			if (rc == 0)
				coil_obj_close(h);
			continue;
		}
		if (rc < 0) {
			fprintf(stderr, "rel: VIOLATION %s: %s: open %s, it "
				"exists after batch %llu (I2)\n", what, names[i],
				coil_strerror(rc), (unsigned long long)m->n);
			bad++;
			continue;
		}
		rc = coil_obj_size(h, &size);
		n = coil_pread(h, buf, OBJ_MAX, 0);
		coil_obj_close(h);
		if (rc < 0 || size != m->size[i] || n != (int64_t)m->size[i]) {
			fprintf(stderr, "rel: VIOLATION %s: %s: size %llu read "
				"%lld, after batch %llu it is %u (I2)\n", what,
				names[i], (unsigned long long)size, (long long)n,
				(unsigned long long)m->n, m->size[i]);
			bad++;
			continue;
		}
		for (uint32_t k = 0; k < m->size[i]; k++)
			if (buf[k] != m->data[i][k]) {
				fprintf(stderr, "rel: VIOLATION %s: %s: byte %u "
					"differs from the state after batch %llu "
					"(I2/I3)\n", what, names[i], k,
					(unsigned long long)m->n);
				bad++;
				break;
			}
	}
	if (coil_obj_list(s, count_cb, &listed) == 0 &&
	    listed != (unsigned)count(m->exists) + 1) {
		fprintf(stderr, "rel: VIOLATION %s: %u objects listed, the state "
			"after batch %llu has %d and seq\n", what, listed,
			(unsigned long long)m->n, count(m->exists));
		bad++;
	}
	return bad;
}

/* Open @path (I4), read k, check floor <= k <= hi, move @base (a bytes
 * model at or before k) to k and compare every object.  @return
 * violations; *@k the store's batch count. */
static unsigned verify(const char *path, const struct coil_options *o,
		       struct model *base, uint64_t seed, uint64_t floor,
		       uint64_t hi, bool rdonly, const char *what,
		       uint64_t *k_out)
{
	struct coil_options oo = *o;
	uint8_t *buf = malloc(OBJ_MAX), *scratch = malloc(OBJ_MAX);
	unsigned bad = 0;
	coil_store *s;
	int64_t k;
	int rc;

	oo.flags &= ~COIL_CREATE;
	if (rdonly)
		oo.flags |= COIL_RDONLY;
	rc = coil_open(path, &oo, &s);
	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: store does not open: %s "
			"(I4)\n", what, coil_strerror(rc));
		free(buf);
		free(scratch);
		return 1;
	}
	k = store_batches(s, seed, buf, scratch, what);
	if (k < 0) {
		bad++;
	} else if ((uint64_t)k < floor || (uint64_t)k > hi ||
		   (uint64_t)k < base->n) {
		fprintf(stderr, "rel: VIOLATION %s: the store holds %lld "
			"batches, outside [%llu, %llu] (%s)\n", what,
			(long long)k, (unsigned long long)floor,
			(unsigned long long)hi,
			(uint64_t)k < floor ? "I1: an acknowledged batch lost" :
					      "never submitted");
		bad++;
	} else {
		model_step_to(base, seed, (uint64_t)k, buf);
		bad += compare(s, base, buf, what);
		*k_out = (uint64_t)k;
	}
	rc = coil_close(s);
	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: clean close failed: %s\n",
			what, coil_strerror(rc));
		bad++;
	}
	free(buf);
	free(scratch);
	return bad;
}

/* A store with "seq" and the objects that exist before batch 1, empty. */
static void store_create(const char *path, struct coil_options *o)
{
	coil_store *s;
	coil_obj *h;
	struct model m;

	model_init(&m, false);
	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "seq", COIL_CREATE, &h), 0);
	coil_obj_close(h);
	for (int i = 0; i < NOBJ; i++)
		if (m.exists[i]) {
			cr_assert_eq(coil_obj_open(s, names[i], COIL_CREATE, &h), 0);
			coil_obj_close(h);
		}
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
}

/* ---- kill -9 ------------------------------------------------------------- */

/* What the child tells the parent (shared memory): plain words written in
 * order, submitted before the batch can reach the disk, acked after its
 * completion. */
struct kshared {
	_Atomic uint64_t submitted;  /* the newest batch submitted */
	_Atomic uint64_t acked;      /* the newest whose callback ran with 0 */
	_Atomic uint64_t opened;     /* children past coil_open */
};

struct inflight {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int n;
	int err;
	struct kshared *sh;
};

struct kcb {
	struct inflight *f;
	uint64_t n;
};

static void kill_cb(void *arg, int64_t res)
{
	struct kcb *c = arg;
	struct inflight *f = c->f;
	uint64_t cur = atomic_load(&f->sh->acked);

	/* batches of one object apply in order: the newest completed one
	 * says all before it are there too */
	while (res == 0 && cur < c->n &&
	       !atomic_compare_exchange_weak(&f->sh->acked, &cur, c->n))
		;
	pthread_mutex_lock(&f->mu);
	if (res < 0 && !f->err)
		f->err = (int)res;
	f->n--;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	free(c);
}

/* The child: open (recover), find where the store is, commit batches with
 * up to three in flight until killed.  Never returns. */
static void child_run(const char *path, const struct coil_options *o,
		      struct model *m, uint64_t seed, struct kshared *sh)
{
	struct inflight f = { PTHREAD_MUTEX_INITIALIZER,
			      PTHREAD_COND_INITIALIZER, 0, 0, sh };
	uint8_t *buf = malloc(OBJ_MAX), *scratch = malloc(OBJ_MAX);
	struct op ops[OPS_MAX];
	coil_store *s;
	int64_t k;
	int rc = coil_open(path, o, &s);

	if (rc < 0) {
		fprintf(stderr, "rel batch child: open: %s\n", coil_strerror(rc));
		_exit(3);
	}
	/* the last child's batches that got acknowledged are all there */
	k = store_batches(s, seed, buf, scratch, "child open");
	if (k < 0 || (uint64_t)k < atomic_load(&sh->acked) ||
	    (uint64_t)k > atomic_load(&sh->submitted) || (uint64_t)k < m->n) {
		fprintf(stderr, "rel batch child: the store holds %lld batches, "
			"acked %llu submitted %llu\n", (long long)k,
			(unsigned long long)atomic_load(&sh->acked),
			(unsigned long long)atomic_load(&sh->submitted));
		_exit(7);
	}
	model_step_to(m, seed, (uint64_t)k, buf);
	atomic_store(&sh->acked, (uint64_t)k);
	atomic_store(&sh->submitted, (uint64_t)k);
	atomic_fetch_add(&sh->opened, 1);
	for (;;) {
		unsigned n = batch_gen(seed, m, ops);
		struct kcb *c = malloc(sizeof(*c));
		coil_batch *b;

		pthread_mutex_lock(&f.mu);
		while (f.n >= 3 && !f.err)
			pthread_cond_wait(&f.cv, &f.mu);
		if (f.err)
			_exit(5);
		f.n++;
		pthread_mutex_unlock(&f.mu);
		if (!c || batch_build(s, seed, m, ops, n, buf, &b) < 0)
			_exit(5);
		c->f = &f;
		c->n = m->n + 1;
		atomic_store(&sh->submitted, c->n);
		rc = coil_batch_submit(b, kill_cb, c);
		if (rc < 0) {
			fprintf(stderr, "rel batch child: submit %llu: %s\n",
				(unsigned long long)c->n, coil_strerror(rc));
			_exit(5);
		}
		model_apply(m, seed, ops, n, buf);
		if (m->n % 16 == 0 && coil_sync(s) < 0)
			_exit(6);
	}
}

/* Until the child of @pid is past coil_open and has a batch acknowledged
 * beyond @acked0 (or is gone, or 10 s): the kill then lands among batches,
 * whatever the build's speed (a sanitizer's open can outlast the random
 * delay, and a run whose children never commit proves nothing). */
static void wait_opened(struct kshared *sh, uint64_t opened0, uint64_t acked0,
			pid_t pid)
{
	for (int i = 0; i < 50000 && (atomic_load(&sh->opened) == opened0 ||
				      atomic_load(&sh->acked) <= acked0); i++) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid != 0)
			return;
		usleep(200);
	}
}

Test(rel, batch_kill9, .timeout = 900)
{
	uint64_t seed = rel_seed();
	uint64_t cycles = rel_scaled(60, 3), checked = 0, bad = 0, early = 0;
	uint64_t waited = 0;
	uint64_t beyond = 0;
	uint64_t st = seed ^ 0xba7c4;
	struct kshared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct model base;
	struct coil_options o;
	char path[256], what[128];

	cr_assert_neq(sh, MAP_FAILED);
	memset((void *)sh, 0, sizeof(*sh));
	rel_announce("batch_kill9", seed);
	rel_path(path, sizeof(path), "batch-kill9");
	rel_opts(&o, 32ull << 20);
	store_create(path, &o);
	model_init(&base, true);

	for (uint64_t c = 0; c < cycles && !bad; c++) {
		uint64_t r = rel_rng(&st), opened0 = atomic_load(&sh->opened);
		uint64_t acked0 = atomic_load(&sh->acked);
		uint64_t k = 0, acked;
		useconds_t us;
		pid_t pid;
		int wst;

		fflush(NULL);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			struct model m;

			/* which objects exist is all the child needs */
			model_init(&m, false);
			model_copy(&m, &base);
			child_run(path, &o, &m, seed, sh);
		}
		if (rel_kill_early(r, c)) {
			us = (useconds_t)(r >> 8) % 4000;
			early++;
		} else {
			us = 5000 + (useconds_t)((r >> 8) % 40000);
			wait_opened(sh, opened0, acked0, pid);
			waited++;
		}
		usleep(us);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &wst, 0), pid);
		if (!(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL)) {
			fprintf(stderr, "rel: VIOLATION batch_kill9 cycle %llu: "
				"child ended on its own (status 0x%x: 3 = open "
				"failed (I4), 5 = a batch failed, 6 = sync "
				"failed, 7 = the store lost acknowledged "
				"batches)\n", (unsigned long long)c,
				WIFEXITED(wst) ? WEXITSTATUS(wst) : wst);
			bad++;
		}
		/* leave every third recovery to the next child */
		if (c % 3 == 1 && c + 1 < cycles)
			continue;
		snprintf(what, sizeof(what), "batch_kill9 cycle %llu (killed "
			 "after %u us)", (unsigned long long)c, (unsigned)us);
		acked = atomic_load(&sh->acked);
		bad += verify(path, &o, &base, seed, acked,
			      atomic_load(&sh->submitted), c % 2 == 0, what, &k);
		beyond += k > acked;
		atomic_store(&sh->acked, k);
		atomic_store(&sh->submitted, k);
		checked++;
	}
	/* A run whose children never got to commit would prove nothing.
	 * Each cycle that was not killed early waited for a batch
	 * acknowledged beyond the ones before it, and acknowledged batches
	 * survive (verify checks it), so the store holds at least one per
	 * such cycle; fewer means the children could not commit (the wait
	 * gave up after 10 s).  Early kills may land before the open, so
	 * they promise nothing: a bound on all cycles failed when a
	 * sanitizer's slow run drew them. */
	cr_assert_geq(base.n, waited, "only %llu batches after %llu cycles "
		      "that waited for one", (unsigned long long)base.n,
		      (unsigned long long)waited);
	cr_assert_gt(base.n, 0, "no batch in %llu cycles",
		     (unsigned long long)cycles);
	fprintf(stderr, "rel: batch_kill9 checked=%llu killed_early=%llu "
		"batches=%llu in_flight_kept=%llu\n", (unsigned long long)checked,
		(unsigned long long)early, (unsigned long long)base.n,
		(unsigned long long)beyond);
	rel_report("batch_kill9", "cycles", cycles, bad, seed);
	cr_assert_eq(bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)bad, (unsigned long long)seed);
	unlink(path);
	model_free(&base);
	munmap((void *)sh, sizeof(*sh));
}

/* ---- power cuts ---------------------------------------------------------- */

#define SESSION_BATCHES 12
#define SYNC_EVERY 3

struct session {
	int open_rc, first_err, close_rc;
	bool cut;                  /* the seam cut power (or open failed) */
	uint64_t ops;              /* ring ops before close */
	uint64_t submitted, acked, durable;
};

/* Open, SESSION_BATCHES batches from @m's state (committed one at a time),
 * coil_sync every SYNC_EVERY, close.  Stops at the first error. */
static void session_run(const char *path, const struct coil_options *o,
			const struct model *m0, uint64_t seed, uint8_t *buf,
			struct session *out)
{
	struct op ops[OPS_MAX];
	struct model m;
	coil_store *s;
	struct uring *r;

	memset(out, 0, sizeof(*out));
	out->submitted = out->acked = out->durable = m0->n;
	out->open_rc = coil_open(path, o, &s);
	if (out->open_rc < 0) {
		out->cut = true;
		return;
	}
	model_init(&m, false);
	model_copy(&m, m0);
	for (unsigned i = 1; i <= SESSION_BATCHES; i++) {
		unsigned n = batch_gen(seed, &m, ops);
		coil_batch *b;
		int rc = batch_build(s, seed, &m, ops, n, buf, &b);

		out->submitted = m.n + 1;
		if (rc == 0)
			rc = coil_batch_commit(b);
		if (rc < 0) {
			out->first_err = rc;
			break;
		}
		model_apply(&m, seed, ops, n, buf);
		out->acked = m.n;
		if (i % SYNC_EVERY == 0) {
			uint64_t snap = out->acked;

			rc = coil_sync(s);
			if (rc < 0) {
				out->first_err = rc;
				break;
			}
			out->durable = snap;
		}
	}
	r = uring_fault_last();
	out->cut = uring_fault_is_cut(r);
	out->ops = uring_fault_count(r, URING_FAULT_ANY);
	out->close_rc = coil_close(s);
	/* a clean close makes every completed batch durable */
	if (!out->cut && out->close_rc == 0)
		out->durable = out->acked;
}

Test(rel, batch_powercut, .timeout = 900)
{
	static const char *mode_name[] = { "", "drop_all", "random", "torn" };
	uint64_t seed = rel_seed();
	uint64_t workloads = rel_scaled(3, 1);
	uint64_t cuts = 0, rec_cuts = 0, bad = 0, st = seed ^ 0xc075;
	uint64_t lost = 0, kept = 0;
	uint64_t stride = rel_scale() >= 0.3 ? 1 : (uint64_t)(0.3 / rel_scale() + 0.5);
	uint64_t per_mode[4] = { 0 };
	uint8_t *buf = malloc(OBJ_MAX);
	struct model base, m;
	struct coil_options o;
	struct rel_image before, after;
	struct session ss;
	char path[256], what[160];

	rel_announce("batch_powercut", seed);
	rel_path(path, sizeof(path), "batch-powercut");
	rel_opts(&o, 16ull << 20);
	store_create(path, &o);
	model_init(&base, true);
	model_init(&m, true);

	for (uint64_t w = 0; w < workloads && !bad; w++) {
		uint64_t k = 0, points;

		cr_assert_eq(rel_image_load(&before, path), 0);
		/* dry run: the session's ring ops, and the state it ends in */
		rel_fault_arm(0, 0, 0);
		session_run(path, &o, &base, seed, buf, &ss);
		uring_fault_set_next(NULL);
		cr_assert_eq(ss.open_rc, 0, "open: %s", coil_strerror(ss.open_rc));
		cr_assert_eq(ss.first_err, 0, "workload %llu without faults: %s",
			     (unsigned long long)w, coil_strerror(ss.first_err));
		cr_assert_eq(ss.close_rc, 0);
		points = ss.ops;
		model_copy(&m, &base);
		snprintf(what, sizeof(what), "batch_powercut workload %llu dry "
			 "run", (unsigned long long)w);
		bad += verify(path, &o, &m, seed, ss.acked, ss.acked, false,
			      what, &k);
		cr_assert_eq(rel_image_load(&after, path), 0);

		/* a cut at every op of the session, open and close included,
		 * until one past the last op runs uncut (below scale 0.3, the
		 * sanitizer pass's, at every stride-th from a random one) */
		for (uint64_t c = 1 + rel_rng(&st) % stride;
		     c <= points + 64 && !bad; c += stride) {
			int mode = (int)(1 + (c / stride) % 3);

			cr_assert_geq(rel_image_restore(&before, path), 0);
			rel_fault_arm(c, mode, rel_rng(&st));
			session_run(path, &o, &base, seed, buf, &ss);
			uring_fault_set_next(NULL);
			if (!ss.cut && ss.close_rc == 0 && ss.first_err == 0 &&
			    ss.open_rc == 0) {
				if (c > points)
					break;
				continue; /* the op came after close */
			}
			cuts++;
			per_mode[mode]++;
			if (rel_rng(&st) % 4 == 0)
				rel_cut_recovery(path, &o, &st, 12, &rec_cuts);
			snprintf(what, sizeof(what), "batch_powercut workload %llu "
				 "cut at op %llu of %llu mode %s",
				 (unsigned long long)w, (unsigned long long)c,
				 (unsigned long long)points, mode_name[mode]);
			model_copy(&m, &base);
			k = 0;
			bad += verify(path, &o, &m, seed, ss.durable,
				      ss.submitted, rel_rng(&st) % 3 != 0, what,
				      &k);
			/* how far the cuts reached: unsynced batches lost,
			 * or kept */
			lost += k < ss.acked;
			kept += k > ss.durable;
		}
		/* the next workload starts where the dry run ended */
		cr_assert_geq(rel_image_restore(&after, path), 0);
		model_step_to(&base, seed, base.n + SESSION_BATCHES, buf);
		rel_image_free(&before);
		rel_image_free(&after);
	}
	fprintf(stderr, "rel: batch_powercut drop_all=%llu random=%llu "
		"torn=%llu recovery_cuts=%llu workloads=%llu batches=%llu "
		"unsynced_lost=%llu unsynced_kept=%llu\n",
		(unsigned long long)per_mode[1], (unsigned long long)per_mode[2],
		(unsigned long long)per_mode[3], (unsigned long long)rec_cuts,
		(unsigned long long)workloads, (unsigned long long)base.n,
		(unsigned long long)lost, (unsigned long long)kept);
	rel_report("batch_powercut", "cuts", cuts, bad, seed);
	cr_assert_eq(bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)bad, (unsigned long long)seed);
	/* at least a cut per batch: fewer means the seam or the counting
	 * broke, not that coil is fine */
	cr_assert_geq(cuts, workloads * SESSION_BATCHES / stride,
		      "only %llu cuts", (unsigned long long)cuts);
	unlink(path);
	model_free(&base);
	model_free(&m);
	free(buf);
}
