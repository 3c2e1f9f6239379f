/* tests/test_batch.c — batches across objects and rename, against the
 * contract in include/coil.h ("rename and batches"):
 *
 *   three_objects        pages and a multi-blob write to three objects in one
 *                        batch read back, through handles opened before too;
 *                        coil_batch_submit's callback runs once with 0
 *   create_write_rename  create, write and rename in one batch, onto a free
 *                        name and over an existing object
 *   rename_replaces      the replaced object's handles are -EBADF, the
 *                        renamed object's handles follow it
 *   noreplace_applies_nothing / missing_applies_nothing  -EEXIST and -ENOENT
 *                        fail the batch at submission and none of its other
 *                        operations applies; the callback never runs
 *   ops_in_order         write, truncate, write of one object; remove and
 *                        create of one name; a chain of renames
 *   limit_ops            1024 operations commit; the 1025th is -E2BIG and
 *                        leaves the batch as it was
 *   limit_bytes          16 MiB of data commit (in pieces and in one
 *                        write); a byte more is -E2BIG, and the batch still
 *                        takes operations
 *   chunk_limit          records larger than a journal chunk: -E2BIG at
 *                        submission, nothing applied
 *   bad_args, rdonly, closed_store, from_callback
 *   replay               batches and renames (two names swapped through a
 *                        temporary one) come back after a clean close, after
 *                        a process exit without close (journal replay), and
 *                        from a checkpoint taken between them
 *   full_store           a batch against a full store fails whole with
 *                        -ENOSPC; after a remove the same batch applies
 *   io_error             a device error at each I/O of a batch: it fails
 *                        (and the store refuses more) or completes, and
 *                        after a reopen it is all there or not at all
 *   obj_rename           coil_obj_rename's cases
 *   isolation            readers never see part of a batch, within one
 *                        object or across the two it writes, and see a batch
 *                        once it completed
 *   order_with_writes    single writes and batches of one object apply in
 *                        submission order
 *   concurrent_renames[_kill9]  threads swap and move objects between
 *                        shared names with batches and renames, and create
 *                        objects outside batches: no object is ever lost or
 *                        doubled, live, after a reopen, after kill -9
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "engine/log/ckpt.h"
#include "tests/engine_test_util.h"
#include "uring/uring_fault.h"

#define MiB (1u << 20)
#define PG 4096u

/* ---- a byte model of named objects --------------------------------------- */

#define M_NAMES 12
#define M_MAX (1280u << 10)

struct mobj {
	char name[80];
	bool exists;
	uint64_t size;
	uint8_t *data;            /* M_MAX bytes, zeros past size */
};

struct model {
	struct mobj o[M_NAMES];
	unsigned n;
};

static struct model *model_new(void)
{
	struct model *m = calloc(1, sizeof(*m));

	cr_assert(m);
	for (unsigned i = 0; i < M_NAMES; i++) {
		m->o[i].data = calloc(1, M_MAX);
		cr_assert(m->o[i].data);
	}
	return m;
}

static void model_free(struct model *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < M_NAMES; i++)
		free(m->o[i].data);
	free(m);
}

static void model_copy(struct model *d, const struct model *s)
{
	d->n = s->n;
	for (unsigned i = 0; i < s->n; i++) {
		memcpy(d->o[i].name, s->o[i].name, sizeof(d->o[i].name));
		d->o[i].exists = s->o[i].exists;
		d->o[i].size = s->o[i].size;
		memcpy(d->o[i].data, s->o[i].data, M_MAX);
	}
}

/* The entry of @name, added (missing) when new. */
static struct mobj *m_get(struct model *m, const char *name)
{
	struct mobj *o;

	for (unsigned i = 0; i < m->n; i++)
		if (!strcmp(m->o[i].name, name))
			return &m->o[i];
	cr_assert_lt(m->n, M_NAMES);
	cr_assert_lt(strlen(name), sizeof(o->name));
	o = &m->o[m->n++];
	strcpy(o->name, name);
	o->exists = false;
	o->size = 0;
	memset(o->data, 0, M_MAX);
	return o;
}

/* Each m_* applies one operation and returns what the batch must then
 * fail with, or 0. */
static int m_write(struct model *m, const char *name, const uint8_t *buf,
		   size_t len, uint64_t off)
{
	struct mobj *o = m_get(m, name);

	if (!o->exists)
		return -ENOENT;
	cr_assert_leq(off + len, M_MAX);
	memcpy(o->data + off, buf, len);
	if (off + len > o->size)
		o->size = off + len;
	return 0;
}

static int m_truncate(struct model *m, const char *name, uint64_t size)
{
	struct mobj *o = m_get(m, name);

	if (!o->exists)
		return -ENOENT;
	cr_assert_leq(size, M_MAX);
	if (size < o->size)
		memset(o->data + size, 0, o->size - size);
	o->size = size;
	return 0;
}

static int m_create(struct model *m, const char *name)
{
	struct mobj *o = m_get(m, name);

	if (o->exists)
		return -EEXIST;
	o->exists = true;
	o->size = 0;
	memset(o->data, 0, M_MAX);
	return 0;
}

static int m_remove(struct model *m, const char *name)
{
	struct mobj *o = m_get(m, name);

	if (!o->exists)
		return -ENOENT;
	o->exists = false;
	o->size = 0;
	memset(o->data, 0, M_MAX);
	return 0;
}

static int m_rename(struct model *m, const char *old, const char *new_name,
		    unsigned flags)
{
	struct mobj *a = m_get(m, old), *b = m_get(m, new_name);
	uint8_t *t;

	if (!a->exists)
		return -ENOENT;
	if (a == b)
		return 0;
	if (b->exists && (flags & COIL_RENAME_NOREPLACE))
		return -EEXIST;
	t = b->data;
	b->data = a->data;
	a->data = t;
	b->exists = true;
	b->size = a->size;
	a->exists = false;
	a->size = 0;
	memset(a->data, 0, M_MAX);
	return 0;
}

/* ---- reading the store back ---------------------------------------------- */

/* @name holds exactly @want[0, n): size, bytes, nothing past the end. */
static void expect_obj(coil_store *s, const char *name, const uint8_t *want,
		       size_t n)
{
	uint8_t *rd = malloc(n + PG);
	coil_obj *h;
	uint64_t size;
	int rc;

	cr_assert(rd);
	rc = coil_obj_open(s, name, 0, &h);
	cr_assert_eq(rc, 0, "open %s: %s", name, coil_strerror(rc));
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, n, "%s: size %llu, want %zu", name,
		     (unsigned long long)size, n);
	cr_assert_eq(coil_pread(h, rd, n + PG, 0), (int64_t)n,
		     "%s: read length", name);
	for (size_t i = 0; i < n; i++)
		if (rd[i] != want[i])
			cr_assert_fail("%s: byte %zu is 0x%02x, want 0x%02x",
				       name, i, rd[i], want[i]);
	cr_assert_eq(coil_obj_close(h), 0);
	free(rd);
}

static void expect_absent(coil_store *s, const char *name)
{
	coil_obj *h;
	int rc = coil_obj_open(s, name, 0, &h);

	if (rc == 0)
		coil_obj_close(h);
	cr_assert_eq(rc, -ENOENT, "%s: open %s, want -ENOENT (exists: %d)",
		     name, coil_strerror(rc), rc == 0);
}

/* The store holds exactly what the model says, name by name. */
static void expect_model(coil_store *s, const struct model *m)
{
	for (unsigned i = 0; i < m->n; i++) {
		if (m->o[i].exists)
			expect_obj(s, m->o[i].name, m->o[i].data, m->o[i].size);
		else
			expect_absent(s, m->o[i].name);
	}
}

/* Does the store hold exactly what the model says?  (No assertion: for
 * checks that accept one of several states.) */
static bool store_is(coil_store *s, const struct model *m)
{
	uint8_t *rd = malloc(M_MAX + PG);
	bool same = rd != NULL;

	for (unsigned i = 0; same && i < m->n; i++) {
		const struct mobj *o = &m->o[i];
		coil_obj *h;
		uint64_t size = 0;
		int rc = coil_obj_open(s, o->name, 0, &h);

		if (!o->exists) {
			same = rc == -ENOENT;
			if (rc == 0)
				coil_obj_close(h);
			continue;
		}
		if (rc < 0) {
			same = false;
			break;
		}
		same = coil_obj_size(h, &size) == 0 && size == o->size &&
		       coil_pread(h, rd, M_MAX + PG, 0) == (int64_t)o->size &&
		       !memcmp(rd, o->data, o->size);
		coil_obj_close(h);
	}
	free(rd);
	return same;
}

/* Through an open handle: @want[0, n). */
static void expect_handle(coil_obj *h, const uint8_t *want, size_t n,
			  const char *what)
{
	uint8_t *rd = malloc(n + PG);
	uint64_t size;

	cr_assert(rd);
	cr_assert_eq(coil_obj_size(h, &size), 0, "%s: size", what);
	cr_assert_eq(size, n, "%s: size %llu, want %zu", what,
		     (unsigned long long)size, n);
	cr_assert_eq(coil_pread(h, rd, n + PG, 0), (int64_t)n, "%s", what);
	cr_assert(memcmp(rd, want, n) == 0, "%s: bytes differ", what);
	free(rd);
}

/* A handle to an object that is gone: every call -EBADF. */
static void expect_gone(coil_obj *h, const char *what)
{
	uint8_t buf[64] = { 0 };
	uint64_t size;

	cr_assert_eq(coil_obj_size(h, &size), -EBADF, "%s: size", what);
	cr_assert_eq(coil_pread(h, buf, sizeof(buf), 0), -EBADF, "%s: read",
		     what);
	cr_assert_eq(coil_pwrite(h, buf, sizeof(buf), 0), -EBADF, "%s: write",
		     what);
	cr_assert_eq(coil_obj_truncate(h, 0), -EBADF, "%s: truncate", what);
}

/* Write @n bytes at @off of @name through a handle (created when missing),
 * and into the model. */
static void put(coil_store *s, struct model *m, const char *name,
		const uint8_t *src, size_t n, uint64_t off)
{
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	for (size_t at = 0; at < n; at += MiB) {
		size_t k = n - at < MiB ? n - at : MiB;

		cr_assert_eq(coil_pwrite(h, src + at, k, off + at), (int64_t)k);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	if (m) {
		if (!m_get(m, name)->exists)
			m_create(m, name);
		cr_assert_eq(m_write(m, name, src, n, off), 0);
	}
}

/* ---- a batch and its staged model ---------------------------------------- */

/* In a forked child a failed check must not reach criterion's runner: the
 * child exits with a code the parent reports. */
static bool in_child;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			if (in_child) {                                       \
				fprintf(stderr, "child: line %d: ", __LINE__); \
				fprintf(stderr, __VA_ARGS__);                 \
				fprintf(stderr, "\n");                        \
				_exit(10);                                    \
			}                                                     \
			cr_assert_fail(__VA_ARGS__);                          \
		}                                                             \
	} while (0)

/* Operations go into the batch and into a copy of the model; the copy
 * replaces the model only when the commit returns 0, and the commit must
 * return what the model says (the first failing operation's code).  With
 * no store (s NULL) only the model moves, as if the commit had returned
 * that. */
struct tx {
	coil_batch *b;
	struct model *m;
	int expect;
};

static void tx_begin(struct tx *t, coil_store *s, const struct model *base)
{
	t->b = NULL;
	if (s) {
		int rc = coil_batch_new(s, &t->b);

		CHECK(rc == 0 && t->b, "coil_batch_new: %s", coil_strerror(rc));
	}
	t->m = model_new();
	model_copy(t->m, base);
	t->expect = 0;
}

static void tx_write(struct tx *t, const char *name, const uint8_t *buf,
		     size_t len, uint64_t off)
{
	int rc = t->b ? coil_batch_write(t->b, name, buf, len, off) : 0;

	CHECK(rc == 0, "coil_batch_write %s: %s", name, coil_strerror(rc));
	if (!t->expect)
		t->expect = m_write(t->m, name, buf, len, off);
}

static void tx_truncate(struct tx *t, const char *name, uint64_t size)
{
	int rc = t->b ? coil_batch_truncate(t->b, name, size) : 0;

	CHECK(rc == 0, "coil_batch_truncate %s: %s", name, coil_strerror(rc));
	if (!t->expect)
		t->expect = m_truncate(t->m, name, size);
}

static void tx_create(struct tx *t, const char *name)
{
	int rc = t->b ? coil_batch_create(t->b, name) : 0;

	CHECK(rc == 0, "coil_batch_create %s: %s", name, coil_strerror(rc));
	if (!t->expect)
		t->expect = m_create(t->m, name);
}

static void tx_remove(struct tx *t, const char *name)
{
	int rc = t->b ? coil_batch_remove(t->b, name) : 0;

	CHECK(rc == 0, "coil_batch_remove %s: %s", name, coil_strerror(rc));
	if (!t->expect)
		t->expect = m_remove(t->m, name);
}

static void tx_rename(struct tx *t, const char *old, const char *new_name,
		      unsigned flags)
{
	int rc = t->b ? coil_batch_rename(t->b, old, new_name, flags) : 0;

	CHECK(rc == 0, "coil_batch_rename %s %s: %s", old, new_name,
	      coil_strerror(rc));
	if (!t->expect)
		t->expect = m_rename(t->m, old, new_name, flags);
}

/* Commit; on 0 the staged model becomes @base.  @return the result. */
static int tx_commit(struct tx *t, struct model *base)
{
	int rc = t->b ? coil_batch_commit(t->b) : t->expect;

	CHECK(rc == t->expect, "commit: %s, want %s", coil_strerror(rc),
	      coil_strerror(t->expect));
	if (rc == 0)
		model_copy(base, t->m);
	model_free(t->m);
	t->m = NULL;
	t->b = NULL;
	return rc;
}

/* coil_obj_rename, and the same in the model (s NULL: the model only). */
static void obj_rename(coil_store *s, struct model *m, const char *old,
		       const char *new_name, unsigned flags)
{
	int want = m_rename(m, old, new_name, flags);
	int rc = s ? coil_obj_rename(s, old, new_name, flags) : want;

	CHECK(rc == want, "coil_obj_rename %s %s: %s, want %s", old, new_name,
	      coil_strerror(rc), coil_strerror(want));
}

static uint8_t *data_new(size_t n, uint64_t seed)
{
	uint8_t *p = malloc(n);

	cr_assert(p);
	et_fill(p, n, seed, 1);
	return p;
}

static void nop_cb(void *arg, int64_t res)
{
	(void)arg;
	(void)res;
}

/* ---- tests --------------------------------------------------------------- */

Test(batch, three_objects, .timeout = 60)
{
	static const char *nm[3] = { "t0", "t1/with/slash", "t2 \xe2\x9c\x93" };
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-three", NULL);
	struct model *m = model_new();
	struct counter ctr = COUNTER_INIT;
	uint8_t *base = data_new(M_MAX, 1), *pg = data_new(64 * PG, 2);
	uint8_t *big = data_new(150000, 3);
	coil_obj *h[3];
	struct tx t;

	for (int i = 0; i < 3; i++) {
		put(s, m, nm[i], base + i * 1000, 300000, 0);
		cr_assert_eq(coil_obj_open(s, nm[i], 0, &h[i]), 0);
	}
	/* pages scattered over each object (some past its end), and one write
	 * of several blobs at an unaligned offset */
	tx_begin(&t, s, m);
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 12; k++)
			tx_write(&t, nm[i], pg + (size_t)(i * 12 + k) * PG, PG,
				 (uint64_t)((k * 7 + i) % 90) * PG);
	tx_write(&t, nm[1], big, 150000, 70001);
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	/* handles opened before the batch see it */
	for (int i = 0; i < 3; i++) {
		struct mobj *o = m_get(m, nm[i]);
		expect_handle(h[i], o->data, o->size, nm[i]);
	}

	/* coil_batch_submit: the callback runs once, with 0 */
	tx_begin(&t, s, m);
	for (int i = 0; i < 3; i++)
		tx_write(&t, nm[i], pg + (size_t)(40 + i) * PG, 3 * PG,
			 (uint64_t)(i + 1) * 5000);
	counter_add(&ctr);
	cr_assert_eq(coil_batch_submit(t.b, count_cb, &ctr), 0);
	counter_wait(&ctr);
	cr_assert_eq(ctr.calls, 1);
	cr_assert_eq(ctr.errors, 0);
	model_copy(m, t.m);
	model_free(t.m);
	usleep(20000); /* a second call would come now */
	cr_assert_eq(ctr.calls, 1);
	expect_model(s, m);
	for (int i = 0; i < 3; i++) {
		struct mobj *o = m_get(m, nm[i]);
		expect_handle(h[i], o->data, o->size, nm[i]);
		cr_assert_eq(coil_obj_close(h[i]), 0);
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(base);
	free(pg);
	free(big);
}

Test(batch, create_write_rename, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-cwr", NULL);
	struct model *m = model_new();
	uint8_t *a = data_new(300000, 10), *b = data_new(200000, 11);
	coil_obj *hf, *hn;
	struct tx t;

	m_get(m, "draft");
	/* onto a free name */
	tx_begin(&t, s, m);
	tx_create(&t, "draft");
	tx_write(&t, "draft", a, 100000, 0);
	tx_write(&t, "draft", a + 100000, 5000, 200000); /* a hole between */
	tx_rename(&t, "draft", "final", 0);
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	cr_assert_eq(m_get(m, "final")->size, 205000);

	/* over an existing object: its handle is -EBADF afterwards */
	cr_assert_eq(coil_obj_open(s, "final", 0, &hf), 0);
	tx_begin(&t, s, m);
	tx_create(&t, "draft");
	tx_write(&t, "draft", b, 200000, 0);
	tx_truncate(&t, "draft", 150000);
	tx_rename(&t, "draft", "final", 0);
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	expect_gone(hf, "handle to the replaced final");
	coil_obj_close(hf);
	cr_assert_eq(coil_obj_open(s, "final", 0, &hn), 0);
	expect_handle(hn, b, 150000, "new final");
	cr_assert_eq(coil_obj_close(hn), 0);

	/* written under its new name later in the same batch; an object
	 * created and removed in one batch leaves nothing */
	tx_begin(&t, s, m);
	tx_create(&t, "y");
	tx_rename(&t, "y", "z", COIL_RENAME_NOREPLACE);
	tx_write(&t, "z", a, 7000, 3);
	tx_create(&t, "ghost");
	tx_write(&t, "ghost", b, 1000, 0);
	tx_remove(&t, "ghost");
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	expect_absent(s, "y");
	expect_absent(s, "ghost");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(a);
	free(b);
}

Test(batch, rename_replaces, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-replace", NULL);
	struct model *m = model_new();
	uint8_t *a = data_new(180000, 20), *b = data_new(90000, 21);
	uint8_t *w = data_new(5000, 22), *big = data_new(150001, 23);
	struct counter ctr = COUNTER_INIT;
	coil_obj *ha, *hb, *hb2, *h;
	struct tx t;

	put(s, m, "a", a, 180000, 0);
	put(s, m, "b", b, 90000, 0);
	cr_assert_eq(coil_obj_open(s, "a", 0, &ha), 0);
	cr_assert_eq(coil_obj_open(s, "b", 0, &hb), 0);
	cr_assert_eq(coil_obj_open(s, "b", 0, &hb2), 0);
	/* writes in flight through both handles when the batch is
	 * submitted: the one to a applies before the rename (submission
	 * order) and moves with it, the one to b lands in the replaced
	 * object */
	counter_add(&ctr);
	cr_assert_eq(coil_write(ha, big, 150000, 20000, count_cb, &ctr), 0);
	counter_add(&ctr);
	cr_assert_eq(coil_write(hb, big + 1, 150000, 0, count_cb, &ctr), 0);
	cr_assert_eq(m_write(m, "a", big, 150000, 20000), 0);
	tx_begin(&t, s, m);
	tx_rename(&t, "a", "b", 0);
	cr_assert_eq(tx_commit(&t, m), 0);
	counter_wait(&ctr);
	expect_model(s, m);
	expect_absent(s, "a");
	/* the replaced object's handles are stale, both of them */
	expect_gone(hb, "first handle to the replaced b");
	expect_gone(hb2, "second handle to the replaced b");
	coil_obj_close(hb);
	coil_obj_close(hb2);
	/* the renamed object's handle follows it: its data, and a write
	 * through it lands in "b" */
	expect_handle(ha, m_get(m, "b")->data, m_get(m, "b")->size,
		      "handle of a, renamed to b");
	cr_assert_eq(coil_pwrite(ha, w, 5000, 1000), 5000);
	cr_assert_eq(m_write(m, "b", w, 5000, 1000), 0);
	expect_model(s, m);
	/* a new "a" is another object */
	put(s, m, "a", w, 100, 0);
	expect_model(s, m);
	cr_assert_eq(coil_obj_open(s, "b", 0, &h), 0);
	cr_assert_eq(coil_obj_close(ha), 0);
	expect_handle(h, m_get(m, "b")->data, m_get(m, "b")->size, "b");
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	/* and after a reopen */
	{
		struct coil_options o;

		et_opts(&o, path);
		o.flags &= ~COIL_CREATE;
		cr_assert_eq(coil_open(path, &o, &s), 0);
		expect_model(s, m);
		cr_assert_eq(coil_close(s), 0);
	}
	unlink(path);
	model_free(m);
	free(a);
	free(b);
	free(w);
	free(big);
}

Test(batch, noreplace_applies_nothing, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-noreplace", NULL);
	struct model *m = model_new();
	struct counter ctr = COUNTER_INIT;
	uint8_t *a = data_new(100000, 30), *b = data_new(100000, 31);
	uint8_t *w = data_new(70000, 32);
	coil_obj *ha, *hb;
	struct tx t;

	put(s, m, "a", a, 100000, 0);
	put(s, m, "b", b, 100000, 0);
	put(s, m, "c", b, 3000, 0);
	m_get(m, "new");
	cr_assert_eq(coil_obj_open(s, "a", 0, &ha), 0);
	cr_assert_eq(coil_obj_open(s, "b", 0, &hb), 0);
	/* everything before the failing rename, and after it */
	tx_begin(&t, s, m);
	tx_write(&t, "a", w, 70000, 0);
	tx_create(&t, "new");
	tx_write(&t, "new", w, 1000, 0);
	tx_truncate(&t, "b", 10);
	tx_remove(&t, "c");
	tx_rename(&t, "a", "b", COIL_RENAME_NOREPLACE);
	tx_write(&t, "b", w, 100, 0);
	cr_assert_eq(t.expect, -EEXIST);
	cr_assert_eq(tx_commit(&t, m), -EEXIST);
	expect_model(s, m);
	expect_handle(ha, a, 100000, "a");
	expect_handle(hb, b, 100000, "b");

	/* a create of an existing object, through submit: the callback
	 * never runs */
	tx_begin(&t, s, m);
	tx_write(&t, "a", w, 5000, 0);
	tx_remove(&t, "b");
	tx_remove(&t, "c");
	tx_create(&t, "c");       /* fine: removed just before */
	tx_create(&t, "a");       /* a exists */
	cr_assert_eq(t.expect, -EEXIST);
	cr_assert_eq(coil_batch_submit(t.b, count_cb, &ctr), -EEXIST);
	model_free(t.m);
	usleep(20000);
	cr_assert_eq(ctr.calls, 0, "the callback ran for a refused batch");
	expect_model(s, m);
	expect_handle(hb, b, 100000, "b after the refused create");

	/* a no-replace rename onto a name the batch itself frees is fine */
	tx_begin(&t, s, m);
	tx_remove(&t, "b");
	tx_rename(&t, "a", "b", COIL_RENAME_NOREPLACE);
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	expect_gone(hb, "removed b");
	expect_handle(ha, a, 100000, "a renamed to b");
	coil_obj_close(ha);
	coil_obj_close(hb);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(a);
	free(b);
	free(w);
}

Test(batch, missing_applies_nothing, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-missing", NULL);
	struct model *m = model_new();
	uint8_t *a = data_new(100000, 40), *w = data_new(200000, 41);
	struct tx t;

	put(s, m, "a", a, 100000, 0);
	put(s, m, "b", a, 50000, 7);
	m_get(m, "new");
	m_get(m, "missing");

	for (int kind = 0; kind < 6; kind++) {
		tx_begin(&t, s, m);
		tx_write(&t, "a", w, 200000, 3);         /* multi-blob */
		tx_write(&t, "b", w + 5, 4000, 0);       /* small */
		tx_create(&t, "new");
		tx_write(&t, "new", w, 10, 0);
		tx_truncate(&t, "a", 1);
		switch (kind) {
		case 0:
			tx_write(&t, "missing", w, 10, 0);
			break;
		case 1:
			tx_truncate(&t, "missing", 0);
			break;
		case 2:
			tx_remove(&t, "missing");
			break;
		case 3:
			tx_rename(&t, "missing", "a", 0);
			break;
		case 4: /* removed earlier in the batch */
			tx_remove(&t, "b");
			tx_write(&t, "b", w, 10, 0);
			break;
		default: /* renamed away earlier in the batch */
			tx_rename(&t, "b", "c", 0);
			tx_truncate(&t, "b", 10);
			break;
		}
		cr_assert_eq(t.expect, -ENOENT, "kind %d", kind);
		cr_assert_eq(tx_commit(&t, m), -ENOENT, "kind %d", kind);
		expect_model(s, m);
		expect_absent(s, "c");
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(a);
	free(w);
}

Test(batch, ops_in_order, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-order", NULL);
	struct model *m = model_new();
	uint8_t *x = data_new(200000, 50), *y = data_new(100000, 51);
	coil_obj *h;
	struct tx t;
	char from[16], to[16];

	/* write, truncate, write: the truncate cuts the first write, the
	 * second lands after a hole */
	put(s, m, "o", y, 1000, 0);
	tx_begin(&t, s, m);
	tx_write(&t, "o", x, 200000, 0);
	tx_truncate(&t, "o", 10000);
	tx_write(&t, "o", y, 10000, 20000);
	tx_truncate(&t, "o", 25000);
	tx_write(&t, "o", y + 500, 3000, 9000);
	cr_assert_eq(tx_commit(&t, m), 0);
	cr_assert_eq(m_get(m, "o")->size, 25000);
	expect_model(s, m);

	/* remove and create one name: a new, empty object; the old handle
	 * is stale */
	cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
	tx_begin(&t, s, m);
	tx_remove(&t, "o");
	tx_create(&t, "o");
	tx_write(&t, "o", x, 5, 100);
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	expect_gone(h, "handle to the removed o");
	coil_obj_close(h);

	/* a chain of renames moves one object along, a write at each step */
	cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
	tx_begin(&t, s, m);
	for (int i = 0; i < 8; i++) {
		snprintf(from, sizeof(from), i ? "r%d" : "o", i);
		snprintf(to, sizeof(to), "r%d", i + 1);
		tx_rename(&t, from, to, COIL_RENAME_NOREPLACE);
		tx_write(&t, to, y + i * 100, 100, (uint64_t)i * 100);
	}
	cr_assert_eq(tx_commit(&t, m), 0);
	expect_model(s, m);
	expect_handle(h, m_get(m, "r8")->data, m_get(m, "r8")->size,
		      "handle followed 8 renames");
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(x);
	free(y);
}

Test(batch, limit_ops, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-limit-ops", NULL);
	uint8_t *rd;
	uint8_t small[16];
	coil_batch *b;
	coil_obj *h;
	uint64_t size;
	int rc;

	rd = malloc(32 * COIL_BATCH_OPS_MAX + PG);
	cr_assert(rd);
	cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_obj_close(h), 0);

	/* COIL_BATCH_OPS_MAX operations; the next one is -E2BIG, of every
	 * kind, and the batch is unchanged: it commits the 1024 */
	cr_assert_eq(coil_batch_new(s, &b), 0);
	for (uint32_t i = 0; i < COIL_BATCH_OPS_MAX; i++) {
		memset(small, (int)(i & 0xff), sizeof(small));
		memcpy(small, &i, sizeof(i));
		cr_assert_eq(coil_batch_write(b, "o", small, sizeof(small),
					      (uint64_t)i * 32), 0, "op %u", i);
	}
	cr_assert_eq(coil_batch_write(b, "o", small, sizeof(small), 1u << 20),
		     -E2BIG);
	cr_assert_eq(coil_batch_truncate(b, "o", 0), -E2BIG);
	cr_assert_eq(coil_batch_create(b, "p"), -E2BIG);
	cr_assert_eq(coil_batch_remove(b, "o"), -E2BIG);
	cr_assert_eq(coil_batch_rename(b, "o", "q", 0), -E2BIG);
	rc = coil_batch_commit(b);
	cr_assert_eq(rc, 0, "a batch of %u operations: %s", COIL_BATCH_OPS_MAX,
		     coil_strerror(rc));
	cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, (uint64_t)(COIL_BATCH_OPS_MAX - 1) * 32 + 16,
		     "size %llu: the refused operations applied?",
		     (unsigned long long)size);
	cr_assert_eq(coil_pread(h, rd, 32 * COIL_BATCH_OPS_MAX, 0),
		     (int64_t)size);
	for (uint32_t i = 0; i < COIL_BATCH_OPS_MAX; i++) {
		uint32_t got;

		memcpy(&got, rd + (size_t)i * 32, 4);
		cr_assert_eq(got, i, "op %u", i);
		cr_assert_eq(rd[(size_t)i * 32 + 15], (uint8_t)(i & 0xff));
	}
	cr_assert_eq(coil_obj_close(h), 0);
	expect_absent(s, "p");
	expect_absent(s, "q");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(rd);
}

Test(batch, limit_bytes, .timeout = 120)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-limit-bytes", "none");
	uint8_t *big = data_new(COIL_BATCH_BYTES_MAX + PG, 60), *rd;
	coil_batch *b;
	coil_obj *h;
	uint64_t size;

	rd = malloc(COIL_BATCH_BYTES_MAX + PG);
	cr_assert(rd);
	put(s, NULL, "o", big, 100, 0);

	/* 16 MiB of data in 1 MiB writes; one byte more is -E2BIG, in one
	 * write or in a new one, and the batch still takes operations
	 * without data */
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_write(b, "big", big, COIL_BATCH_BYTES_MAX + 1,
				      0), -E2BIG);
	cr_assert_eq(coil_batch_create(b, "big"), 0);
	for (uint32_t i = 0; i < COIL_BATCH_BYTES_MAX / MiB; i++)
		cr_assert_eq(coil_batch_write(b, "big", big + (size_t)i * MiB,
					      MiB, (uint64_t)i * MiB), 0);
	cr_assert_eq(coil_batch_write(b, "big", big, 1, 0), -E2BIG);
	cr_assert_eq(coil_batch_write(b, "o", big, PG, 0), -E2BIG);
	cr_assert_eq(coil_batch_write(b, "o", big, 0, 0), 0);
	cr_assert_eq(coil_batch_truncate(b, "o", 8), 0);
	cr_assert_eq(coil_batch_rename(b, "o", "o2", 0), 0);
	cr_assert_eq(coil_batch_commit(b), 0);
	cr_assert_eq(coil_obj_open(s, "big", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, COIL_BATCH_BYTES_MAX);
	cr_assert_eq(coil_pread(h, rd, COIL_BATCH_BYTES_MAX + PG, 0),
		     (int64_t)COIL_BATCH_BYTES_MAX);
	cr_assert(memcmp(rd, big, COIL_BATCH_BYTES_MAX) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	expect_absent(s, "o");
	cr_assert_eq(coil_obj_open(s, "o2", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, 8);
	cr_assert_eq(coil_obj_close(h), 0);

	/* a single write of 16 MiB is within the limit too */
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_write(b, "big", big + PG, COIL_BATCH_BYTES_MAX,
				      0), 0);
	cr_assert_eq(coil_batch_commit(b), 0);
	cr_assert_eq(coil_obj_open(s, "big", 0, &h), 0);
	cr_assert_eq(coil_pread(h, rd, COIL_BATCH_BYTES_MAX, 0),
		     (int64_t)COIL_BATCH_BYTES_MAX);
	cr_assert(memcmp(rd, big + PG, COIL_BATCH_BYTES_MAX) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(big);
	free(rd);
}

/* Records that do not fit one journal chunk: a 16 MiB store has a 1 MiB
 * journal, so 256 KiB chunks; 1000 renames between 255-byte names take
 * about 500 KiB of records. */
Test(batch, chunk_limit, .timeout = 60)
{
	char path[256], n0[COIL_NAME_MAX + 1], n1[COIL_NAME_MAX + 1];
	struct coil_options o;
	struct model *m = model_new();
	uint8_t *a = data_new(5000, 70);
	coil_store *s;
	coil_batch *b;
	int rc;

	et_path(path, sizeof(path), "batch-chunk");
	et_opts(&o, path);
	o.size = 16ull << 20;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	put(s, m, "keep", a, 5000, 0);
	memset(n0, 'a', COIL_NAME_MAX);
	n0[COIL_NAME_MAX] = 0;
	memcpy(n1, n0, sizeof(n1));
	n1[0] = 'b';
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_write(b, "keep", a + 1, 100, 0), 0);
	cr_assert_eq(coil_batch_create(b, n0), 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(coil_batch_rename(b, i % 2 ? n1 : n0,
					       i % 2 ? n0 : n1, 0), 0);
	rc = coil_batch_commit(b);
	cr_assert_eq(rc, -E2BIG, "a batch larger than a journal chunk: %s",
		     coil_strerror(rc));
	expect_model(s, m);
	expect_absent(s, n0);
	expect_absent(s, n1);
	/* the store goes on; a smaller one of the same kind applies */
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_create(b, n0), 0);
	for (int i = 0; i < 11; i++)
		cr_assert_eq(coil_batch_rename(b, i % 2 ? n1 : n0,
					       i % 2 ? n0 : n1, 0), 0);
	cr_assert_eq(coil_batch_commit(b), 0);
	expect_absent(s, n0);
	expect_obj(s, n1, a, 0);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(a);
}

Test(batch, bad_args, .timeout = 60)
{
	char path[256], longname[COIL_NAME_MAX + 2];
	coil_store *s = et_open(path, sizeof(path), "batch-badargs", NULL);
	struct model *m = model_new();
	struct counter ctr = COUNTER_INIT;
	uint8_t buf[100] = { 7 };
	coil_batch *b;
	int rc;

	put(s, m, "a", buf, sizeof(buf), 0);
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;

	coil_batch_free(NULL);
	cr_assert_eq(coil_batch_new(NULL, &b), -EINVAL);
	cr_assert_eq(coil_batch_new(s, NULL), -EINVAL);
	cr_assert_eq(coil_batch_write(NULL, "a", buf, 1, 0), -EINVAL);
	cr_assert_eq(coil_batch_truncate(NULL, "a", 0), -EINVAL);
	cr_assert_eq(coil_batch_create(NULL, "a"), -EINVAL);
	cr_assert_eq(coil_batch_remove(NULL, "a"), -EINVAL);
	cr_assert_eq(coil_batch_rename(NULL, "a", "b", 0), -EINVAL);
	cr_assert_eq(coil_batch_submit(NULL, count_cb, &ctr), -EINVAL);
	cr_assert_eq(coil_batch_commit(NULL), -EINVAL);

	cr_assert_eq(coil_batch_new(s, &b), 0);
	/* names */
	cr_assert_eq(coil_batch_write(b, NULL, buf, 1, 0), -EINVAL);
	cr_assert_eq(coil_batch_write(b, "", buf, 1, 0), -EINVAL);
	cr_assert_eq(coil_batch_write(b, longname, buf, 1, 0), -ENAMETOOLONG);
	cr_assert_eq(coil_batch_truncate(b, NULL, 0), -EINVAL);
	cr_assert_eq(coil_batch_truncate(b, "", 0), -EINVAL);
	cr_assert_eq(coil_batch_truncate(b, longname, 0), -ENAMETOOLONG);
	cr_assert_eq(coil_batch_create(b, NULL), -EINVAL);
	cr_assert_eq(coil_batch_create(b, ""), -EINVAL);
	cr_assert_eq(coil_batch_create(b, longname), -ENAMETOOLONG);
	cr_assert_eq(coil_batch_remove(b, NULL), -EINVAL);
	cr_assert_eq(coil_batch_remove(b, ""), -EINVAL);
	cr_assert_eq(coil_batch_remove(b, longname), -ENAMETOOLONG);
	cr_assert_eq(coil_batch_rename(b, NULL, "b", 0), -EINVAL);
	cr_assert_eq(coil_batch_rename(b, "a", NULL, 0), -EINVAL);
	cr_assert_eq(coil_batch_rename(b, "a", "", 0), -EINVAL);
	cr_assert_eq(coil_batch_rename(b, "", "b", 0), -EINVAL);
	cr_assert_eq(coil_batch_rename(b, "a", longname, 0), -ENAMETOOLONG);
	cr_assert_eq(coil_batch_rename(b, longname, "b", 0), -ENAMETOOLONG);
	/* flags, buffers, ranges */
	cr_assert_eq(coil_batch_rename(b, "a", "b", 0x2), -EINVAL);
	cr_assert_eq(coil_batch_rename(b, "a", "b", ~0u), -EINVAL);
	cr_assert_eq(coil_batch_write(b, "a", NULL, 10, 0), -EINVAL);
	cr_assert_eq(coil_batch_write(b, "a", buf, 10, UINT64_MAX - 4),
		     -EINVAL);
	cr_assert_eq(coil_batch_write(b, "a", buf, 10, 1ull << 60), -EFBIG);
	cr_assert_eq(coil_batch_write(b, "a", buf, 10, (1ull << 60) - 5),
		     -EFBIG);
	cr_assert_eq(coil_batch_truncate(b, "a", (1ull << 60) + 1), -EFBIG);
	cr_assert_eq(coil_batch_truncate(b, "a", UINT64_MAX), -EFBIG);
	/* none of those was added: the batch holds only what follows */
	cr_assert_eq(coil_batch_write(b, "a", buf + 1, 10, 200), 0);
	cr_assert_eq(m_write(m, "a", buf + 1, 10, 200), 0);
	cr_assert_eq(coil_batch_commit(b), 0);
	expect_model(s, m);
	expect_absent(s, "b");

	/* an empty batch: refused, or applied with one callback */
	cr_assert_eq(coil_batch_new(s, &b), 0);
	rc = coil_batch_submit(b, count_cb, &ctr);
	if (rc == 0) {
		counter_add(&ctr);
		counter_wait(&ctr);
		cr_assert_eq(ctr.calls, 1);
	} else {
		cr_assert_eq(rc, -EINVAL, "empty batch: %s", coil_strerror(rc));
		usleep(20000);
		cr_assert_eq(ctr.calls, 0);
	}
	/* a batch built and never submitted */
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_write(b, "a", buf, 50, 0), 0);
	coil_batch_free(b);
	expect_model(s, m);

	/* coil_obj_rename */
	cr_assert_eq(coil_obj_rename(NULL, "a", "b", 0), -EINVAL);
	cr_assert_eq(coil_obj_rename(s, NULL, "b", 0), -EINVAL);
	cr_assert_eq(coil_obj_rename(s, "a", NULL, 0), -EINVAL);
	cr_assert_eq(coil_obj_rename(s, "", "b", 0), -EINVAL);
	cr_assert_eq(coil_obj_rename(s, "a", "", 0), -EINVAL);
	cr_assert_eq(coil_obj_rename(s, "a", "b", 0x2), -EINVAL);
	cr_assert_eq(coil_obj_rename(s, "a", longname, 0), -ENAMETOOLONG);
	cr_assert_eq(coil_obj_rename(s, longname, "b", 0), -ENAMETOOLONG);
	expect_model(s, m);
	expect_absent(s, "b");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
}

Test(batch, rdonly, .timeout = 60)
{
	char path[256];
	struct coil_options o;
	coil_store *s = et_open(path, sizeof(path), "batch-rdonly", NULL);
	struct model *m = model_new();
	struct counter ctr = COUNTER_INIT;
	uint8_t buf[3000];
	coil_batch *b;
	int rc;

	et_fill(buf, sizeof(buf), 80, 0);
	put(s, m, "a", buf, sizeof(buf), 0);
	cr_assert_eq(coil_close(s), 0);
	et_opts(&o, path);
	o.flags = (o.flags & ~COIL_CREATE) | COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_write(b, "a", buf + 1, 100, 0), 0);
	cr_assert_eq(coil_batch_create(b, "b"), 0);
	cr_assert_eq(coil_batch_submit(b, count_cb, &ctr), -EROFS);
	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_rename(b, "a", "c", 0), 0);
	cr_assert_eq(coil_batch_commit(b), -EROFS);
	cr_assert_eq(coil_obj_rename(s, "a", "c", 0), -EROFS);
	rc = coil_obj_rename(s, "a", "a", 0);
	cr_assert(rc == -EROFS || rc == 0, "rename to itself: %s",
		  coil_strerror(rc));
	usleep(20000);
	cr_assert_eq(ctr.calls, 0);
	expect_model(s, m);
	expect_absent(s, "b");
	expect_absent(s, "c");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
}

/* A batch built while its store was open and submitted after the store
 * closed: -EBADF (detected, not dereferenced), and freed. */
Test(batch, closed_store, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-closed", NULL);
	struct counter ctr = COUNTER_INIT;
	coil_batch *b, *b2;

	cr_assert_eq(coil_batch_new(s, &b), 0);
	cr_assert_eq(coil_batch_create(b, "x"), 0);
	cr_assert_eq(coil_batch_new(s, &b2), 0);
	cr_assert_eq(coil_batch_create(b2, "y"), 0);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_batch_submit(b, count_cb, &ctr), -EBADF);
	cr_assert_eq(coil_batch_commit(b2), -EBADF);
	cr_assert_eq(coil_batch_new(s, &b), -EBADF);
	cr_assert_eq(coil_obj_rename(s, "x", "y", 0), -EBADF);
	cr_assert_eq(ctr.calls, 0);
	unlink(path);
}

/* From a callback: submit and rename are -EDEADLK, the batch consumed. */
struct cb_probe {
	coil_store *s;
	atomic_int submit_rc, commit_rc, rename_rc, done;
};

static void probe_cb(void *arg, int64_t res)
{
	struct cb_probe *p = arg;
	coil_batch *b;

	(void)res;
	if (coil_batch_new(p->s, &b) == 0 && coil_batch_create(b, "cb1") == 0)
		atomic_store(&p->submit_rc, coil_batch_submit(b, nop_cb, NULL));
	if (coil_batch_new(p->s, &b) == 0 && coil_batch_create(b, "cb2") == 0)
		atomic_store(&p->commit_rc, coil_batch_commit(b));
	atomic_store(&p->rename_rc, coil_obj_rename(p->s, "a", "cb3", 0));
	atomic_store(&p->done, 1);
}

Test(batch, from_callback, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-fromcb", NULL);
	struct cb_probe p = { .s = s };
	uint8_t buf[4096] = { 1 };
	coil_obj *h;

	atomic_store(&p.submit_rc, 1);
	atomic_store(&p.commit_rc, 1);
	atomic_store(&p.rename_rc, 1);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_write(h, buf, sizeof(buf), 0, probe_cb, &p), 0);
	for (int i = 0; i < 10000 && !atomic_load(&p.done); i++)
		usleep(1000);
	cr_assert(atomic_load(&p.done));
	cr_assert_eq(atomic_load(&p.submit_rc), -EDEADLK);
	cr_assert_eq(atomic_load(&p.commit_rc), -EDEADLK);
	cr_assert_eq(atomic_load(&p.rename_rc), -EDEADLK);
	expect_absent(s, "cb1");
	expect_absent(s, "cb2");
	expect_absent(s, "cb3");
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* ---- replay -------------------------------------------------------------- */

/* Scripts of batches and renames over a, b, c, tmp and n<k>, each valid in
 * the state the one before leaves; against a store and the model, or the
 * model alone (s NULL). */
static void script(coil_store *s, struct model *m, const uint8_t *d, int which)
{
	struct tx t;

	switch (which) {
	case 0: /* three objects created and written in one batch */
		tx_begin(&t, s, m);
		tx_create(&t, "a");
		tx_write(&t, "a", d, 300000, 0);
		tx_create(&t, "b");
		tx_write(&t, "b", d + 1000, 3000, 100);
		tx_create(&t, "c");
		tx_write(&t, "c", d + 2000, 70000, 0);
		tx_truncate(&t, "c", 65536);
		CHECK(tx_commit(&t, m) == 0, "script 0");
		break;
	case 1: /* a and b swapped through tmp; c rewritten and renamed */
		tx_begin(&t, s, m);
		tx_rename(&t, "a", "tmp", COIL_RENAME_NOREPLACE);
		tx_rename(&t, "b", "a", COIL_RENAME_NOREPLACE);
		tx_rename(&t, "tmp", "b", COIL_RENAME_NOREPLACE);
		tx_write(&t, "c", d + 5, 5000, 60000);
		tx_rename(&t, "c", "n1", 0);
		CHECK(tx_commit(&t, m) == 0, "script 1");
		break;
	case 2: /* a plain rename over an object, then a remove */
		obj_rename(s, m, "n1", "a", 0);
		tx_begin(&t, s, m);
		tx_write(&t, "b", d + 7, 200000, 1);
		tx_remove(&t, "a");
		tx_create(&t, "c");
		tx_write(&t, "c", d + 9, 10, 0);
		CHECK(tx_commit(&t, m) == 0, "script 2");
		break;
	case 3: /* b and c swapped back; a name reused at once */
		tx_begin(&t, s, m);
		tx_rename(&t, "b", "tmp", 0);
		tx_rename(&t, "c", "b", 0);
		tx_rename(&t, "tmp", "c", 0);
		tx_create(&t, "a");
		tx_write(&t, "a", d + 11, 4096, 4096);
		tx_truncate(&t, "c", 150000);
		CHECK(tx_commit(&t, m) == 0, "script 3");
		break;
	case 4: /* a rename over the object written just before */
		tx_begin(&t, s, m);
		tx_write(&t, "c", d + 13, 9000, 0);
		tx_write(&t, "a", d + 17, 100000, 50000);
		tx_rename(&t, "a", "c", 0);
		tx_create(&t, "tmp");
		CHECK(tx_commit(&t, m) == 0, "script 4");
		obj_rename(s, m, "b", "n2", COIL_RENAME_NOREPLACE);
		break;
	default: /* back to the state script 4 starts from */
		tx_begin(&t, s, m);
		tx_rename(&t, "n2", "b", 0);
		tx_rename(&t, "c", "a", 0);
		tx_create(&t, "c");
		tx_write(&t, "c", d + 19, 12345, 0);
		tx_remove(&t, "tmp");
		CHECK(tx_commit(&t, m) == 0, "script 5");
		break;
	}
}

/* In a forked child: open, scripts @from..@to (a checkpoint after the
 * first when @ckpt), then exit without a sync or a close.  The parent's
 * model follows the same scripts. */
static void child_scripts(const char *path, const struct coil_options *o,
			  struct model *m, const uint8_t *d, int from, int to,
			  bool ckpt)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		coil_store *s;

		in_child = true;
		if (coil_open(path, o, &s) != 0)
			_exit(2);
		for (int i = from; i <= to; i++) {
			script(s, m, d, i);
			if (ckpt && i == from && ckpt_wait(s) != 0)
				_exit(3);
		}
		/* completed batches survive the process dying */
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "child status 0x%x (exit 10: a check failed, see above)", st);
	for (int i = from; i <= to; i++)
		script(NULL, m, d, i);
}

Test(batch, replay, .timeout = 120)
{
	static const char *names[] = { "a", "b", "c", "tmp", "n1", "n2" };
	char path[256];
	struct coil_options o;
	struct model *m = model_new();
	uint8_t *d = data_new(M_MAX, 90);
	coil_store *s;

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		m_get(m, names[i]);
	et_path(path, sizeof(path), "batch-replay");
	et_opts(&o, path);

	/* the journal alone: a new store, two batches, no close */
	child_scripts(path, &o, m, d, 0, 1, false);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, m);

	/* live, with a checkpoint between, then a clean close */
	script(s, m, d, 2);
	cr_assert_eq(ckpt_wait(s), 0);
	script(s, m, d, 3);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);

	/* a checkpoint that holds the renamed objects, the next script in
	 * the journal on top of it; then the same without the checkpoint */
	for (int round = 0; round < 2; round++) {
		child_scripts(path, &o, m, d, 4, 5, round == 0);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		expect_model(s, m);
		cr_assert_eq(coil_close(s), 0);
		/* and after that recovery's own checkpoint */
		cr_assert_eq(coil_open(path, &o, &s), 0);
		expect_model(s, m);
		cr_assert_eq(coil_close(s), 0);
	}
	/* read-only recovery of a journal full of renames */
	child_scripts(path, &o, m, d, 4, 4, false);
	o.flags |= COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(d);
}

/* ---- a full store -------------------------------------------------------- */

Test(batch, full_store, .timeout = 120)
{
	const size_t len = 96 * 1024;
	char path[256];
	struct coil_options o;
	struct model *m = model_new();
	uint8_t *buf = malloc(len), *w = data_new(2 * MiB, 100);
	coil_store *s;
	coil_obj *h;
	int nospc = 0, rc;
	struct tx t;

	et_path(path, sizeof(path), "batch-full");
	et_opts(&o, path);
	o.size = 8ull << 20;
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(buf, len, 101, 0);
	put(s, m, "keep", buf, 50000, 0);
	put(s, m, "other", buf + 7, 30000, 0);
	m_get(m, "new");
	m_get(m, "moved");
	/* fill it: writes of 96 KiB until three in a row are refused */
	cr_assert_eq(coil_obj_open(s, "fill", COIL_CREATE, &h), 0);
	for (uint32_t k = 0; k < 4096 && nospc < 3; k++) {
		int64_t r;

		et_fill(buf, len, 1000 + k, 0);
		r = coil_pwrite(h, buf, len, (uint64_t)k * len);
		if (r == -ENOSPC) {
			nospc++;
			continue;
		}
		cr_assert_eq(r, (int64_t)len, "fill %u: %s", k,
			     coil_strerror((int)r));
		nospc = 0;
	}
	cr_assert_eq(nospc, 3, "an 8 MiB store did not fill");
	cr_assert_eq(coil_obj_close(h), 0);

	/* 512 KiB of data over two objects (a 96 KiB write no longer fits),
	 * with metadata operations: the whole batch fails, nothing of it
	 * applied.  (Small enough that it fits once "fill" is removed:
	 * the store has four 1 MiB data segments, and the cleaner keeps a
	 * reserve of them.) */
	for (int round = 0; round < 2; round++) {
		tx_begin(&t, s, m);
		tx_write(&t, "keep", w, 256u << 10, 0);
		tx_create(&t, "new");
		tx_write(&t, "new", w + MiB, 256u << 10, 4096);
		tx_truncate(&t, "other", 100);
		tx_rename(&t, "other", "moved", 0);
		if (round == 0) {
			rc = coil_batch_commit(t.b);
			cr_assert_eq(rc, -ENOSPC, "a batch into a full store: %s",
				     coil_strerror(rc));
			model_free(t.m);
			expect_model(s, m);
			continue;
		}
		/* space back: the same batch applies */
		cr_assert_eq(coil_obj_remove(s, "fill"), 0);
		cr_assert_eq(coil_sync(s), 0);
		cr_assert_eq(tx_commit(&t, m), 0);
		expect_model(s, m);
	}
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, m);
	expect_absent(s, "fill");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(buf);
	free(w);
}

/* ---- device errors ------------------------------------------------------- */

Test(batch, io_error, .timeout = 120)
{
	char path[256];
	uint8_t *a = data_new(300000, 120), *w = data_new(300000, 121);
	unsigned failed = 0, completed = 0;

	for (int run = 0; run < 12; run++) {
		uint64_t nth = 1 + (uint64_t)run / 2;
		bool sticky = run & 1;
		struct model *m = model_new(), *post;
		struct uring_fault_spec spec;
		struct coil_options o;
		coil_store *s;
		coil_batch *b;
		struct tx t;
		int rc, rc2;

		et_path(path, sizeof(path), "batch-ioerr");
		et_opts(&o, path);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		put(s, m, "a", a, 100000, 0);
		put(s, m, "b", a + 1, 50000, 0);
		m_get(m, "c");
		m_get(m, "d");
		cr_assert_eq(coil_sync(s), 0);
		/* the nth ring op from here fails with EIO (not issued) */
		memset(&spec, 0, sizeof(spec));
		spec.fail_kind = URING_FAULT_ANY;
		spec.fail_nth = nth;
		spec.fail_errno = EIO;
		spec.fail_sticky = sticky;
		tx_begin(&t, s, m);
		tx_write(&t, "a", w, 300000, 1000);   /* segment path */
		tx_rename(&t, "a", "d", 0);
		tx_create(&t, "c");
		tx_write(&t, "c", w + 7, 5000, 0);   /* small */
		tx_truncate(&t, "b", 10);
		post = t.m;
		cr_assert_eq(uring_fault_arm(uring_fault_last(), &spec), 0);
		rc = coil_batch_commit(t.b);
		if (rc == 0) {
			completed++;
		} else {
			cr_assert_eq(rc, -EIO, "run %d: %s", run, coil_strerror(rc));
			failed++;
			/* the store takes nothing more */
			cr_assert_eq(coil_batch_new(s, &b), 0);
			cr_assert_eq(coil_batch_create(b, "e"), 0);
			rc2 = coil_batch_commit(b);
			cr_assert_eq(rc2, -EIO, "run %d: after a failed batch: %s",
				     run, coil_strerror(rc2));
			cr_assert_eq(coil_obj_rename(s, "b", "e", 0), -EIO);
		}
		memset(&spec, 0, sizeof(spec));
		cr_assert_eq(uring_fault_arm(uring_fault_last(), &spec), 0);
		coil_close(s); /* may fail: the store failed a write */
		o.flags &= ~COIL_CREATE;
		cr_assert_eq(coil_open(path, &o, &s), 0, "run %d: reopen", run);
		if (rc == 0)
			cr_assert(store_is(s, post), "run %d: a completed batch "
				  "is not all there after a reopen", run);
		else
			cr_assert(store_is(s, m) || store_is(s, post),
				  "run %d (op %llu fails%s): after a reopen the "
				  "failed batch is there in part", run,
				  (unsigned long long)nth,
				  sticky ? ", sticky" : "");
		expect_absent(s, "e");
		cr_assert_eq(coil_close(s), 0);
		model_free(m);
		model_free(post);
		unlink(path);
	}
	cr_log_info("io_error: %u batches failed, %u completed", failed,
		    completed);
	cr_assert_geq(failed, 4, "the injected errors missed the batches");
	free(a);
	free(w);
}

/* ---- coil_obj_rename ----------------------------------------------------- */

Test(batch, obj_rename, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-rename", NULL);
	struct model *m = model_new();
	uint8_t *a = data_new(200000, 110), *b = data_new(70000, 111);
	coil_obj *ha, *hb, *h;
	struct coil_options o;

	put(s, m, "a", a, 200000, 0);
	put(s, m, "b", b, 70000, 0);
	m_get(m, "c");
	cr_assert_eq(coil_obj_open(s, "a", 0, &ha), 0);
	cr_assert_eq(coil_obj_open(s, "b", 0, &hb), 0);

	/* to a free name: the handle follows */
	obj_rename(s, m, "a", "c", 0);
	expect_model(s, m);
	expect_handle(ha, a, 200000, "a renamed to c");
	/* to its own name: nothing happens */
	obj_rename(s, m, "c", "c", 0);
	expect_model(s, m);
	expect_handle(ha, a, 200000, "c renamed to itself");
	/* missing */
	obj_rename(s, m, "a", "d", 0);
	obj_rename(s, m, "a", "a", 0);
	cr_assert_eq(coil_obj_rename(s, "zz", "b", 0), -ENOENT);
	/* onto an existing name, refused */
	obj_rename(s, m, "c", "b", COIL_RENAME_NOREPLACE);
	expect_model(s, m);
	expect_handle(hb, b, 70000, "b after a refused rename onto it");
	/* onto an existing name, replacing it */
	obj_rename(s, m, "c", "b", 0);
	expect_model(s, m);
	expect_gone(hb, "the replaced b");
	expect_handle(ha, a, 200000, "a renamed to c then b");
	/* no-replace onto a free name */
	obj_rename(s, m, "b", "a", COIL_RENAME_NOREPLACE);
	expect_model(s, m);
	/* a write through the old handle lands in the renamed object, and a
	 * new object under the old name is another one */
	cr_assert_eq(coil_pwrite(ha, b, 1000, 250000), 1000);
	cr_assert_eq(m_write(m, "a", b, 1000, 250000), 0);
	put(s, m, "b", b + 5, 500, 0);
	expect_model(s, m);
	cr_assert_eq(coil_obj_open(s, "a", 0, &h), 0);
	expect_handle(h, m_get(m, "a")->data, m_get(m, "a")->size, "a");
	cr_assert_eq(coil_obj_close(h), 0);
	coil_obj_close(ha);
	coil_obj_close(hb);
	/* the name bytes are any but NUL */
	obj_rename(s, m, "b", "dir/sub dir/\xff\x01", 0);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);
	et_opts(&o, path);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, m);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	model_free(m);
	free(a);
	free(b);
}

/* ---- isolation ----------------------------------------------------------- */

#define ISO_PAGES 64              /* 256 KiB: four 64 KiB blobs per object */
#define ISO_LEN (ISO_PAGES * PG)

/* Page @page of object @obj (1 or 2) at generation @gen: every page names
 * all three in its first word; odd generations are random, even ones
 * compressible. */
static void iso_fill(uint8_t *p, uint32_t obj, uint32_t page, uint64_t gen)
{
	uint64_t w0 = gen << 24 | (uint64_t)obj << 16 | page;
	uint64_t x = w0 * 0x9E3779B97F4A7C15ull + 1;

	memcpy(p, &w0, 8);
	for (uint32_t i = 8; i < PG; i += 8) {
		uint64_t v = (gen & 1) ? tu_xorshift(&x) : w0 + (i & 0x70);

		memcpy(p + i, &v, 8);
	}
}

/* The generation every page of @p holds, or UINT64_MAX (a mixture, or
 * bytes of no generation); *@first_bad: the first page that differs. */
static uint64_t iso_gen(const uint8_t *p, uint32_t obj, uint32_t *first_bad)
{
	uint8_t want[PG];
	uint64_t gen = UINT64_MAX;

	for (uint32_t k = 0; k < ISO_PAGES; k++) {
		uint64_t w0, g;

		memcpy(&w0, p + (size_t)k * PG, 8);
		g = w0 >> 24;
		if ((w0 & 0xffffff) != ((uint64_t)obj << 16 | k) ||
		    (k && g != gen)) {
			*first_bad = k;
			return UINT64_MAX;
		}
		gen = g;
		iso_fill(want, obj, k, g);
		if (memcmp(want, p + (size_t)k * PG, PG)) {
			*first_bad = k;
			return UINT64_MAX;
		}
	}
	return gen;
}

struct iso {
	coil_store *s;
	_Atomic uint64_t started;  /* the newest generation submitted */
	_Atomic uint64_t done;     /* the newest whose commit returned */
	atomic_bool stop;
	atomic_uint bad;
	_Atomic uint64_t reads;
	pthread_mutex_t mu;
	char msg[512];             /* the first violation */
};

static void __attribute__((format(printf, 2, 3)))
iso_fail(struct iso *w, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&w->mu);
	if (atomic_fetch_add(&w->bad, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&w->mu);
}

static void *iso_reader(void *arg)
{
	struct iso *w = arg;
	uint8_t *buf = malloc(ISO_LEN + PG);
	coil_obj *h[2] = { NULL, NULL };
	uint64_t x = (uint64_t)(uintptr_t)&x | 1;

	if (!buf || coil_obj_open(w->s, "x", 0, &h[0]) ||
	    coil_obj_open(w->s, "y", 0, &h[1])) {
		iso_fail(w, "reader setup failed");
		goto out;
	}
	while (!atomic_load(&w->stop)) {
		uint64_t d0 = atomic_load(&w->done), g[2], hi;
		int first = (int)(tu_xorshift(&x) & 1);

		for (int j = 0; j < 2; j++) {
			int k = j ? !first : first;
			uint32_t bad = 0;
			int64_t n = coil_pread(h[k], buf, ISO_LEN + PG, 0);

			hi = atomic_load(&w->started);
			if (n != ISO_LEN) {
				iso_fail(w, "read of %s: %lld", k ? "y" : "x",
					 (long long)n);
				goto out;
			}
			g[j] = iso_gen(buf, (uint32_t)k + 1, &bad);
			if (g[j] == UINT64_MAX) {
				iso_fail(w, "one read of %s saw a mixture of "
					 "generations (or wrong bytes) from "
					 "page %u on (batch %llu was the newest "
					 "completed)", k ? "y" : "x", bad,
					 (unsigned long long)d0);
				goto out;
			}
			if (g[j] < d0 || g[j] > hi) {
				iso_fail(w, "read of %s saw generation %llu, "
					 "outside [%llu completed before it, "
					 "%llu submitted]", k ? "y" : "x",
					 (unsigned long long)g[j],
					 (unsigned long long)d0,
					 (unsigned long long)hi);
				goto out;
			}
		}
		/* the second read began after the first ended: the first
		 * one's batch had applied, to both objects */
		if (g[1] < g[0]) {
			iso_fail(w, "%s read generation %llu, then %s read "
				 "%llu: part of a batch seen",
				 first ? "y" : "x", (unsigned long long)g[0],
				 first ? "x" : "y", (unsigned long long)g[1]);
			goto out;
		}
		atomic_fetch_add(&w->reads, 1);
	}
out:
	coil_obj_close(h[0]);
	coil_obj_close(h[1]);
	free(buf);
	return NULL;
}

/* Generation @gen of both objects in one batch: whole-object writes,
 * page writes (small, kept inline in the journal) or two unaligned
 * pieces, x or y first. */
static int iso_commit(coil_store *s, uint8_t *buf, uint64_t gen, bool create)
{
	coil_batch *b;
	int rc = coil_batch_new(s, &b);

	if (rc < 0)
		return rc;
	for (int j = 0; j < 2 && rc == 0; j++) {
		uint32_t obj = (uint32_t)((gen & 2) ? 1 - j : j);
		const char *name = obj ? "y" : "x";
		uint8_t *p = buf + (size_t)obj * ISO_LEN;

		for (uint32_t k = 0; k < ISO_PAGES; k++)
			iso_fill(p + (size_t)k * PG, obj + 1, k, gen);
		if (create)
			rc = coil_batch_create(b, name);
		if (rc)
			break;
		switch (gen % 3) {
		case 0:
			for (uint32_t k = 0; k < ISO_PAGES && rc == 0; k++)
				rc = coil_batch_write(b, name, p + (size_t)k * PG,
						      PG, (uint64_t)k * PG);
			break;
		case 1:
			rc = coil_batch_write(b, name, p, ISO_LEN, 0);
			break;
		default:
			rc = coil_batch_write(b, name, p + 100003,
					      ISO_LEN - 100003, 100003);
			if (rc == 0)
				rc = coil_batch_write(b, name, p, 100003, 0);
			break;
		}
	}
	if (rc < 0) {
		coil_batch_free(b);
		return rc;
	}
	return coil_batch_commit(b);
}

Test(batch, isolation, .timeout = 300)
{
	enum { READERS = 3 };
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-iso", NULL);
	struct iso w = { .s = s, .mu = PTHREAD_MUTEX_INITIALIZER };
	uint64_t gens = tu_scaled(200, 20);
	uint8_t *buf = malloc(2 * ISO_LEN), *rd = malloc(ISO_LEN + PG);
	pthread_t th[READERS];
	coil_obj *h[2];

	cr_assert(buf && rd);
	cr_assert_eq(iso_commit(s, buf, 0, true), 0);
	cr_assert_eq(coil_obj_open(s, "x", 0, &h[0]), 0);
	cr_assert_eq(coil_obj_open(s, "y", 0, &h[1]), 0);
	for (int i = 0; i < READERS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, iso_reader, &w), 0);
	for (uint64_t g = 1; g <= gens && !atomic_load(&w.bad); g++) {
		int rc;

		atomic_store(&w.started, g);
		rc = iso_commit(s, buf, g, false);
		if (rc) {
			iso_fail(&w, "commit of generation %llu: %s",
				 (unsigned long long)g, coil_strerror(rc));
			break;
		}
		atomic_store(&w.done, g);
		/* the writer's own reads, after the completion: exactly g */
		for (int k = 0; k < 2; k++) {
			uint32_t bad = 0;
			int64_t n = coil_pread(h[k], rd, ISO_LEN + PG, 0);
			uint64_t got = n == ISO_LEN ?
				       iso_gen(rd, (uint32_t)k + 1, &bad) :
				       UINT64_MAX;

			if (got != g)
				iso_fail(&w, "after the commit of generation "
					 "%llu, %s reads %lld bytes of "
					 "generation %llu (page %u)",
					 (unsigned long long)g, k ? "y" : "x",
					 (long long)n, (unsigned long long)got,
					 bad);
		}
	}
	atomic_store(&w.stop, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(th[i], NULL);
	cr_log_info("isolation: %llu generations, %llu reader passes",
		    (unsigned long long)atomic_load(&w.done),
		    (unsigned long long)atomic_load(&w.reads));
	cr_assert_eq(atomic_load(&w.bad), 0, "%s", w.msg);
	cr_assert_gt(atomic_load(&w.reads), 0);
	coil_obj_close(h[0]);
	coil_obj_close(h[1]);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
	free(rd);
}

/* ---- order with single writes -------------------------------------------- */

static void expect_range(coil_obj *h, const uint8_t *want, size_t len,
			 uint64_t off, const char *what, int iter)
{
	uint8_t *rd = malloc(len);

	cr_assert(rd);
	cr_assert_eq(coil_pread(h, rd, len, off), (int64_t)len, "%s #%d", what,
		     iter);
	for (size_t i = 0; i < len; i++)
		if (rd[i] != want[i])
			cr_assert_fail("%s #%d: byte %zu of %zu differs (want "
				       "0x%02x, got 0x%02x)", what, iter, i, len,
				       want[i], rd[i]);
	free(rd);
}

Test(batch, order_with_writes, .timeout = 120)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "batch-wr-order", NULL);
	int iters = (int)tu_scaled(60, 8);
	const size_t big = 200000, small = 3 * PG;
	uint8_t *a = malloc(big), *b = malloc(big), *c = malloc(big);
	uint8_t *want = malloc(big);
	struct counter ctr = COUNTER_INIT;
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, &h), 0);
	et_fill(a, big, 7, 0);
	put(s, NULL, "p", a, 200, 0);
	for (int i = 0; i < iters; i++) {
		size_t len = (i & 1) ? small : big;
		uint64_t off = (uint64_t)(i % 3) * 1000;
		coil_batch *bt;

		et_fill(a, len, 3ull * i, i & 2);
		et_fill(b, len, 3ull * i + 1, 0);
		et_fill(c, len, 3ull * i + 2, 1);

		/* a single write in flight, then a batch over the same
		 * range: the batch's bytes win */
		counter_add(&ctr);
		cr_assert_eq(coil_write(h, a, len, off, count_cb, &ctr), 0);
		cr_assert_eq(coil_batch_new(s, &bt), 0);
		cr_assert_eq(coil_batch_write(bt, "p", c, 100, 0), 0);
		cr_assert_eq(coil_batch_write(bt, "o", b, len, off), 0);
		cr_assert_eq(coil_batch_commit(bt), 0);
		counter_wait(&ctr);
		cr_assert_eq(ctr.errors, 0);
		expect_range(h, b, len, off, "batch after a write", i);

		/* a batch in flight, then a single write: the write wins;
		 * a second write over half of it wins there */
		cr_assert_eq(coil_batch_new(s, &bt), 0);
		cr_assert_eq(coil_batch_write(bt, "o", a, len, off), 0);
		cr_assert_eq(coil_batch_write(bt, "p", a, 100, 50), 0);
		counter_add(&ctr);
		cr_assert_eq(coil_batch_submit(bt, count_cb, &ctr), 0);
		counter_add(&ctr);
		cr_assert_eq(coil_write(h, c, len, off, count_cb, &ctr), 0);
		counter_add(&ctr);
		cr_assert_eq(coil_write(h, b, len / 2, off + 7, count_cb, &ctr),
			     0);
		counter_wait(&ctr);
		cr_assert_eq(ctr.errors, 0);
		memcpy(want, c, len);
		memcpy(want + 7, b, len / 2);
		expect_range(h, want, len, off, "writes after a batch", i);

		/* a truncate in the batch between two writes */
		counter_add(&ctr);
		cr_assert_eq(coil_write(h, a, len, off, count_cb, &ctr), 0);
		cr_assert_eq(coil_batch_new(s, &bt), 0);
		cr_assert_eq(coil_batch_truncate(bt, "o", off + 10), 0);
		counter_add(&ctr);
		cr_assert_eq(coil_batch_submit(bt, count_cb, &ctr), 0);
		counter_add(&ctr);
		cr_assert_eq(coil_write(h, b, 20, off + 30, count_cb, &ctr), 0);
		counter_wait(&ctr);
		cr_assert_eq(ctr.errors, 0);
		memset(want, 0, 50);
		memcpy(want, a, 10);
		memcpy(want + 30, b, 20);
		expect_range(h, want, 50, off, "write, truncate, write", i);
		{
			uint64_t size;

			cr_assert_eq(coil_obj_size(h, &size), 0);
			cr_assert_eq(size, off + 50, "#%d: size %llu", i,
				     (unsigned long long)size);
		}
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(a);
	free(b);
	free(c);
	free(want);
}

/* ---- concurrent batches over shared names -------------------------------- */

/* Objects tagged by their content (every word of the first CONC_TAGLEN bytes
 * says the tag), moved between CONC_NAMES names by threads at once: batches
 * that swap two names through a third, single no-replace renames, batches
 * that rename and write past the tag, creates of a free name outside any
 * batch (which then writes its own tag through its handle).  Nothing ever
 * removes or replaces an object, so whatever interleaving the claims allow,
 * every tag must be under exactly one name — while it runs (readers), at
 * the end, after a reopen, and after a kill -9 at any moment (replay must
 * apply the batches in the order they applied live). */
#define CONC_NAMES 10
#define CONC_OBJS 4
#define CONC_TAGLEN 8192u
#define CONC_THREADS 3
#define CONC_TAG_EXTRA 1000u        /* tags of objects created while running */

static void conc_name(char *buf, int i)
{
	snprintf(buf, 8, "c%d", i);
}

static void tag_fill(uint8_t *p, uint32_t tag)
{
	for (uint32_t w = 0; w < CONC_TAGLEN / 8; w++) {
		uint64_t v = (uint64_t)tag << 32 | w;

		memcpy(p + 8 * w, &v, 8);
	}
}

/* The tag @p holds, 0 for an empty object, UINT32_MAX for anything else. */
static uint32_t tag_of(const uint8_t *p, int64_t n)
{
	uint8_t want[CONC_TAGLEN];
	uint64_t v;

	if (n == 0)
		return 0;
	if (n != CONC_TAGLEN)
		return UINT32_MAX;
	memcpy(&v, p, 8);
	tag_fill(want, (uint32_t)(v >> 32));
	return memcmp(want, p, CONC_TAGLEN) || (v >> 32) == 0 ?
	       UINT32_MAX : (uint32_t)(v >> 32);
}

struct conc {
	coil_store *s;
	uint32_t tag_base;         /* tags of objects created in this run */
	atomic_bool stop;
	atomic_uint bad, applied, refused, created;
	pthread_mutex_t mu;
	char msg[256];
	uint64_t iters;            /* per thread; 0: until killed */
	bool no_create;
};

static void __attribute__((format(printf, 2, 3)))
conc_fail(struct conc *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->mu);
	if (atomic_fetch_add(&c->bad, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&c->mu);
}

static void conc_result(struct conc *c, const char *what, int rc)
{
	if (rc == 0)
		atomic_fetch_add(&c->applied, 1);
	else if (rc == -ENOENT || rc == -EEXIST)
		atomic_fetch_add(&c->refused, 1);
	else
		conc_fail(c, "%s: %s", what, coil_strerror(rc));
}

struct conc_thread {
	struct conc *c;
	int idx;
	pthread_t tid;
};

static void *conc_worker(void *arg)
{
	struct conc_thread *t = arg;
	struct conc *c = t->c;
	uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(t->idx + 1) | 1;
	uint8_t *buf = malloc(CONC_TAGLEN + PG);
	bool created = false;

	for (uint64_t it = 0; buf && (c->iters == 0 || it < c->iters) &&
	     !atomic_load(&c->stop); it++) {
		uint64_t r = tu_xorshift(&x);
		int i = (int)(r % CONC_NAMES), j = (int)((r >> 8) % CONC_NAMES);
		int k = (int)((r >> 16) % CONC_NAMES), op = (int)((r >> 24) % 20);
		char a[8], b[8], m[8];
		coil_batch *bt;
		coil_obj *h;
		int rc;

		if (j == i)
			j = (i + 1) % CONC_NAMES;
		while (k == i || k == j)
			k = (k + 1) % CONC_NAMES;
		conc_name(a, i);
		conc_name(b, j);
		conc_name(m, k);
		if (op < 9) {                /* swap a and b through m */
			if (coil_batch_new(c->s, &bt))
				break;
			coil_batch_rename(bt, a, m, COIL_RENAME_NOREPLACE);
			coil_batch_rename(bt, b, a, COIL_RENAME_NOREPLACE);
			coil_batch_rename(bt, m, b, COIL_RENAME_NOREPLACE);
			conc_result(c, "swap batch", coil_batch_commit(bt));
		} else if (op < 14) {        /* a to b */
			conc_result(c, "rename", coil_obj_rename(c->s, a, b,
							       COIL_RENAME_NOREPLACE));
		} else if (op < 17) {        /* a to b, a write past the tag */
			et_fill(buf, PG, r, 0);
			if (coil_batch_new(c->s, &bt))
				break;
			coil_batch_rename(bt, a, b, COIL_RENAME_NOREPLACE);
			coil_batch_write(bt, b, buf, PG, CONC_TAGLEN + (r >> 40) % 50000);
			coil_batch_rename(bt, b, m, COIL_RENAME_NOREPLACE);
			conc_result(c, "rename+write batch", coil_batch_commit(bt));
		} else if (op < 18 && !created && !c->no_create) {
			/* create a free name */
			rc = coil_obj_open(c->s, a, COIL_CREATE | COIL_EXCL, &h);
			if (rc == -EEXIST)
				continue;
			if (rc < 0) {
				conc_fail(c, "create %s: %s", a, coil_strerror(rc));
				continue;
			}
			created = true;
			atomic_fetch_add(&c->created, 1);
			/* the handle follows the object wherever it went */
			tag_fill(buf, c->tag_base + (uint32_t)t->idx);
			if (coil_pwrite(h, buf, CONC_TAGLEN, 0) != CONC_TAGLEN)
				conc_fail(c, "tag write through a handle failed");
			coil_obj_close(h);
		} else {                     /* read one */
			int64_t n;
			uint32_t tag;

			rc = coil_obj_open(c->s, a, 0, &h);
			if (rc == -ENOENT)
				continue;
			if (rc < 0) {
				conc_fail(c, "open %s: %s", a, coil_strerror(rc));
				continue;
			}
			n = coil_pread(h, buf, CONC_TAGLEN, 0);
			/* a handle whose object a concurrent batch moved still
			 * reads it: nothing is ever removed */
			tag = tag_of(buf, n);
			if (tag == UINT32_MAX)
				conc_fail(c, "%s read %lld bytes of no tag", a,
					(long long)n);
			coil_obj_close(h);
		}
	}
	free(buf);
	return NULL;
}

static void conc_run(struct conc *c)
{
	struct conc_thread th[CONC_THREADS];

	for (int i = 0; i < CONC_THREADS; i++) {
		th[i] = (struct conc_thread){ .c = c, .idx = i };
		if (pthread_create(&th[i].tid, NULL, conc_worker, &th[i]))
			abort();
	}
	for (int i = 0; i < CONC_THREADS; i++)
		pthread_join(th[i].tid, NULL);
}

/* Every name's tag.  The originals 1..CONC_OBJS exactly once; tags of
 * created objects at most once (@created_max: how many there may be) and
 * empty objects only when @created_max allows (a create whose tag write
 * had not happened). */
static void conc_check(coil_store *s, unsigned created_max, const char *when)
{
	uint8_t buf[CONC_TAGLEN];
	unsigned seen[CONC_OBJS + 1] = { 0 }, extra = 0;
	uint32_t extra_tags[CONC_NAMES];

	for (int i = 0; i < CONC_NAMES; i++) {
		char a[8];
		coil_obj *h;
		int64_t n;
		uint32_t tag;
		int rc;

		conc_name(a, i);
		rc = coil_obj_open(s, a, 0, &h);
		if (rc == -ENOENT)
			continue;
		cr_assert_eq(rc, 0, "%s: open %s: %s", when, a, coil_strerror(rc));
		n = coil_pread(h, buf, CONC_TAGLEN, 0);
		coil_obj_close(h);
		tag = tag_of(buf, n);
		cr_assert_neq(tag, UINT32_MAX, "%s: %s holds %lld bytes of no "
			      "tag", when, a, (long long)n);
		if (tag >= 1 && tag <= CONC_OBJS) {
			seen[tag]++;
			continue;
		}
		cr_assert(tag == 0 || tag >= CONC_TAG_EXTRA, "%s: %s: tag %u",
			  when, a, tag);
		for (unsigned e = 0; e < extra; e++)
			cr_assert(tag == 0 || extra_tags[e] != tag,
				  "%s: tag %u under two names", when, tag);
		extra_tags[extra++] = tag;
	}
	for (uint32_t t = 1; t <= CONC_OBJS; t++)
		cr_assert_eq(seen[t], 1, "%s: object %u is under %u names",
			     when, t, seen[t]);
	cr_assert_leq(extra, created_max, "%s: %u objects nobody created",
		      when, extra);
}

static void conc_setup(coil_store *s)
{
	uint8_t buf[CONC_TAGLEN];

	for (uint32_t t = 1; t <= CONC_OBJS; t++) {
		char a[8];

		conc_name(a, (int)t - 1);
		tag_fill(buf, t);
		put(s, NULL, a, buf, CONC_TAGLEN, 0);
	}
}

Test(batch, concurrent_renames, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	coil_store *s = et_open(path, sizeof(path), "batch-conc", NULL);
	struct conc c = { .s = s, .tag_base = CONC_TAG_EXTRA,
			.mu = PTHREAD_MUTEX_INITIALIZER };

	c.iters = tu_scaled(1500, 150);
	conc_setup(s);
	conc_run(&c);
	cr_log_info("concurrent renames: %u applied, %u refused, %u created",
		    atomic_load(&c.applied), atomic_load(&c.refused),
		    atomic_load(&c.created));
	cr_assert_eq(atomic_load(&c.bad), 0, "%s", c.msg);
	cr_assert_gt(atomic_load(&c.applied), c.iters / 10);
	conc_check(s, atomic_load(&c.created), "at the end");
	cr_assert_eq(coil_close(s), 0);
	et_opts(&o, path);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	conc_check(s, atomic_load(&c.created), "after a reopen");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(batch, concurrent_renames_kill9, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	coil_store *s = et_open(path, sizeof(path), "batch-conc-kill", NULL);
	int cycles = (int)tu_scaled(12, 3);
	uint64_t x = 0x5eed;

	conc_setup(s);
	cr_assert_eq(coil_close(s), 0);
	et_opts(&o, path);
	o.flags &= ~COIL_CREATE;
	for (int cyc = 0; cyc < cycles; cyc++) {
		useconds_t us = (useconds_t)(5000 + tu_xorshift(&x) % 60000);
		pid_t pid;
		int st;

		fflush(NULL);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			/* creates only in the first cycle: names stay free
			 * for the swaps */
			struct conc c = { .tag_base = CONC_TAG_EXTRA,
					.no_create = cyc > 0,
					.mu = PTHREAD_MUTEX_INITIALIZER };

			in_child = true;
			if (coil_open(path, &o, &c.s) != 0)
				_exit(2);
			conc_run(&c);  /* until killed */
			_exit(atomic_load(&c.bad) ? 3 : 4);
		}
		usleep(us);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFSIGNALED(st), "cycle %d: child ended on its own "
			  "(status 0x%x: 2 open failed, 3 a check failed)",
			  cyc, st);
		/* read-only every other time: the next child recovers it */
		if (cyc % 2)
			o.flags |= COIL_RDONLY;
		cr_assert_eq(coil_open(path, &o, &s), 0, "cycle %d: reopen", cyc);
		conc_check(s, CONC_THREADS, "after kill -9");
		cr_assert_eq(coil_close(s), 0);
		o.flags &= ~COIL_RDONLY;
	}
	unlink(path);
}
