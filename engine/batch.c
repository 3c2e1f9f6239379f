/* engine/batch.c — atomic batches across objects, and rename (a batch of
 * one).
 *
 * A batch is one journal entry: a BATCH record and, after it in the same
 * chunk, one record per operation (WRITE, TRUNCATE, CREATE, REMOVE,
 * RENAME).  A chunk is written and checksummed whole, replay verifies every
 * blob of the batch before it applies any record of it (recovery.c), and
 * the live path applies the whole entry in one step under mlock: after a
 * crash, and to every reader, a batch is all there or not at all.
 *
 *   coil_batch_submit (caller)
 *     claim     under mlock, wait for other batches naming the same objects,
 *               then resolve every name in order against the table as the
 *               batch's own earlier operations change it (a view), and
 *               claim the names: a create, remove or rename outside a batch
 *               that names one waits until this batch has applied
 *     encode    every write's blobs into one request (one buffer, one
 *               placement: the data of a batch lands as one run), on this
 *               thread; inline in the record when small, as a write is
 *     place     the segment path of a write (write_place), and the
 *               checkpoint room for what the batch adds
 *     describe  ids for created objects, then the records
 *     turns     one place in each existing object it names, taken together;
 *               the ticket once every earlier write and truncate of those
 *               objects has its own (journal_take_turns)
 *     send      data runs, then the entry (wreq_send)
 *   batch_apply (ring, mlock, ticket order)   every operation, in order
 *   batch_done  the callback
 *
 * Creates, removes and renames outside a batch change the table when they
 * take their ticket; a batch's apply when it applies.  The claims keep the
 * two from meeting on one name, so the table's history is the same seen
 * from either side, and replay (which applies both at their records) ends
 * in the same state. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/batch.h"
#include "engine/cleaner.h"
#include "engine/io/wreq.h"
#include "engine/io/write.h"
#include "engine/io/zctx.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/pack.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"

enum bop_kind {
	BOP_WRITE, BOP_TRUNCATE, BOP_CREATE, BOP_REMOVE, BOP_RENAME, BOP_CLONE
};

/* An object the batch names: one of the table (referenced while the batch
 * is in flight) or one it creates. */
struct bind {
	struct object *o;      /* NULL for a created one until applied */
	uint64_t id;           /* created: given at describe */
	bool created;
};

struct bop {
	uint8_t kind;
	unsigned flags;
	uint16_t name_len, name2_len;
	char *name, *name2;    /* NUL-terminated copies */
	uint64_t off, len;     /* write; truncate: len is the size */
	size_t data_off;       /* write: its bytes in b->data */
	/* resolved at claim */
	uint32_t t, rep;       /* binds + 1; 0: none */
	bool noop;             /* rename onto its own name */
	uint32_t blob0, nblobs;
};

struct coil_batch {
	struct coil_store *s;
	struct bop *ops;
	uint32_t nops, cap_ops;
	uint8_t *data;
	size_t data_len, data_cap;
	/* in flight */
	struct bind *binds;
	uint32_t nbinds;
	struct coil_batch *claim_next; /* s->batches, under mlock */
	bool claimed;
	struct wreq *w;
	uint8_t *rec;
	uint32_t nrec;
	bool inl;
	coil_cb cb;
	void *arg;
};

/* ---- building -------------------------------------------------------------- */

COIL_API int coil_batch_new(coil_store *s, coil_batch **out)
{
	struct coil_batch *b;

	if (out)
		*out = NULL;
	if (!s || !out)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->s = s;
	*out = b;
	return 0;
}

static void ops_free(struct coil_batch *b)
{
	for (uint32_t i = 0; i < b->nops; i++) {
		free(b->ops[i].name);
		free(b->ops[i].name2);
	}
	free(b->ops);
	free(b->data);
	free(b->binds);
	free(b->rec);
	free(b);
}

COIL_API void coil_batch_free(coil_batch *b)
{
	if (b)
		ops_free(b);
}

static int name_copy(const char *name, char **out, uint16_t *len)
{
	size_t n;

	if (!name)
		return -EINVAL;
	n = strnlen(name, COIL_NAME_MAX + 1);
	if (n == 0 || (uint8_t)name[0] == COIL_NAME_RESERVED)
		return -EINVAL;
	if (n > COIL_NAME_MAX)
		return -ENAMETOOLONG;
	*out = malloc(n + 1);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, name, n + 1);
	*len = (uint16_t)n;
	return 0;
}

/* A new operation at the end of @b, its names copied; nothing added on
 * failure. */
static int op_add(struct coil_batch *b, uint8_t kind, const char *name,
		  const char *name2, struct bop **out)
{
	struct bop op;
	int rc;

	if (!b)
		return -EINVAL;
	if (b->nops >= COIL_BATCH_OPS_MAX)
		return -E2BIG;
	memset(&op, 0, sizeof(op));
	op.kind = kind;
	rc = name_copy(name, &op.name, &op.name_len);
	if (rc == 0 && (kind == BOP_RENAME || kind == BOP_CLONE))
		rc = name_copy(name2, &op.name2, &op.name2_len);
	if (rc == 0 && b->nops == b->cap_ops) {
		uint32_t cap = b->cap_ops ? 2 * b->cap_ops : 8;
		struct bop *p = realloc(b->ops, cap * sizeof(*p));

		if (p) {
			b->ops = p;
			b->cap_ops = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc < 0) {
		free(op.name);
		free(op.name2);
		return rc;
	}
	b->ops[b->nops] = op;
	*out = &b->ops[b->nops++];
	return 0;
}

COIL_API int coil_batch_write(coil_batch *b, const char *name, const void *buf,
			      size_t len, uint64_t off)
{
	struct bop *op;
	uint64_t end;
	int rc;

	if (!b || (!buf && len) || coil_add_overflows(off, len, &end))
		return -EINVAL;
	if (end > ENGINE_OBJ_SIZE_MAX)
		return -EFBIG;
	if (len > COIL_BATCH_BYTES_MAX - b->data_len)
		return -E2BIG;
	if (b->data_len + len > b->data_cap) {
		size_t cap = COIL_MAX(b->data_cap * 2, b->data_len + len);
		uint8_t *p;

		cap = COIL_MIN(cap, (size_t)COIL_BATCH_BYTES_MAX);
		p = realloc(b->data, cap);
		if (!p)
			return -ENOMEM;
		b->data = p;
		b->data_cap = cap;
	}
	rc = op_add(b, BOP_WRITE, name, NULL, &op);
	if (rc < 0)
		return rc;
	op->off = off;
	op->len = len;
	op->data_off = b->data_len;
	if (len)
		memcpy(b->data + b->data_len, buf, len);
	b->data_len += len;
	return 0;
}

COIL_API int coil_batch_truncate(coil_batch *b, const char *name, uint64_t size)
{
	struct bop *op;
	int rc;

	if (size > ENGINE_OBJ_SIZE_MAX)
		return b ? -EFBIG : -EINVAL;
	rc = op_add(b, BOP_TRUNCATE, name, NULL, &op);
	if (rc == 0)
		op->len = size;
	return rc;
}

COIL_API int coil_batch_create(coil_batch *b, const char *name)
{
	struct bop *op;

	return op_add(b, BOP_CREATE, name, NULL, &op);
}

COIL_API int coil_batch_remove(coil_batch *b, const char *name)
{
	struct bop *op;

	return op_add(b, BOP_REMOVE, name, NULL, &op);
}

COIL_API int coil_batch_rename(coil_batch *b, const char *old,
			       const char *new_name, unsigned flags)
{
	struct bop *op;
	int rc;

	if (flags & ~COIL_RENAME_NOREPLACE)
		return -EINVAL;
	rc = op_add(b, BOP_RENAME, old, new_name, &op);
	if (rc == 0)
		op->flags = flags;
	return rc;
}

COIL_API int coil_batch_clone(coil_batch *b, const char *src, const char *dst)
{
	struct bop *op;

	return op_add(b, BOP_CLONE, src, dst, &op);
}

/* ---- claim and resolve (mlock) ------------------------------------------ */

static bool name_eq(const char *a, uint16_t al, const char *b, uint16_t bl)
{
	return al == bl && !memcmp(a, b, al);
}

static bool batch_names(const struct coil_batch *b, const char *name,
			uint16_t len)
{
	for (uint32_t i = 0; i < b->nops; i++) {
		const struct bop *op = &b->ops[i];

		if (name_eq(op->name, op->name_len, name, len) ||
		    (op->name2 && name_eq(op->name2, op->name2_len, name, len)))
			return true;
	}
	return false;
}

/* Is @name claimed by a batch in flight other than @self?  mlock held. */
static bool name_claimed(struct coil_store *s, const char *name, size_t len,
			 const struct coil_batch *self)
{
	for (struct coil_batch *b = s->batches; b; b = b->claim_next)
		if (b != self && batch_names(b, name, (uint16_t)len))
			return true;
	return false;
}

int batch_name_wait(struct coil_store *s, const char *name, size_t len)
{
	while (name_claimed(s, name, len, NULL)) {
		if (engine_on_coil_thread(s))
			return -EAGAIN;
		stat_add(&s->st.batch_waits, 1);
		pthread_cond_wait(&s->mcond, &s->mlock);
	}
	return 0;
}

static bool batch_conflicts(struct coil_store *s, const struct coil_batch *b)
{
	for (uint32_t i = 0; i < b->nops; i++) {
		const struct bop *op = &b->ops[i];

		if (name_claimed(s, op->name, op->name_len, b) ||
		    (op->name2 &&
		     name_claimed(s, op->name2, op->name2_len, b)))
			return true;
	}
	return false;
}

/* The view: what each name the batch touched so far names (binds + 1, 0:
 * nothing), newest last.  Earlier operations of the batch win over the
 * table. */
struct view {
	const char **name;
	uint16_t *len;
	uint32_t *bind;
	uint32_t n;
};

static uint32_t bind_of(struct coil_batch *b, struct object *o)
{
	for (uint32_t i = 0; i < b->nbinds; i++)
		if (b->binds[i].o == o)
			return i + 1;
	b->binds[b->nbinds].o = o;
	b->binds[b->nbinds].created = false;
	o->refs++;
	return ++b->nbinds;
}

static uint32_t view_get(struct coil_store *s, struct coil_batch *b,
			 const struct view *v, const char *name, uint16_t len)
{
	struct object *o;

	for (uint32_t i = v->n; i-- > 0;)
		if (name_eq(v->name[i], v->len[i], name, len))
			return v->bind[i];
	o = objtab_find_name(s, name, len);
	return o ? bind_of(b, o) : 0;
}

static void view_set(struct view *v, const char *name, uint16_t len,
		     uint32_t bind)
{
	v->name[v->n] = name;
	v->len[v->n] = len;
	v->bind[v->n++] = bind;
}

/* Every operation against the table as the earlier ones leave it.  mlock
 * held.  @return 0, -ENOENT, -EEXIST, -ENOMEM. */
static int batch_resolve(struct coil_store *s, struct coil_batch *b)
{
	struct view v;
	int rc = 0;

	/* at most one bind per operation, two view entries per rename */
	v.name = malloc(2 * (size_t)b->nops * sizeof(*v.name));
	v.len = malloc(2 * (size_t)b->nops * sizeof(*v.len));
	v.bind = malloc(2 * (size_t)b->nops * sizeof(*v.bind));
	b->binds = calloc(2 * (size_t)b->nops, sizeof(*b->binds));
	v.n = 0;
	if (!v.name || !v.len || !v.bind || !b->binds)
		rc = -ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < b->nops; i++) {
		struct bop *op = &b->ops[i];
		uint32_t t = view_get(s, b, &v, op->name, op->name_len);

		switch (op->kind) {
		case BOP_CREATE:
			if (t) {
				rc = -EEXIST;
				break;
			}
			b->binds[b->nbinds].created = true;
			op->t = ++b->nbinds;
			view_set(&v, op->name, op->name_len, op->t);
			break;
		case BOP_REMOVE:
			if (!t) {
				rc = -ENOENT;
				break;
			}
			op->t = t;
			view_set(&v, op->name, op->name_len, 0);
			break;
		case BOP_CLONE:
			if (!t) {
				rc = -ENOENT;
				break;
			}
			op->t = t;
			if (view_get(s, b, &v, op->name2, op->name2_len)) {
				rc = -EEXIST;
				break;
			}
			b->binds[b->nbinds].created = true;
			op->rep = ++b->nbinds; /* the new object */
			view_set(&v, op->name2, op->name2_len, op->rep);
			break;
		case BOP_RENAME:
			if (!t) {
				rc = -ENOENT;
				break;
			}
			op->t = t;
			if (name_eq(op->name, op->name_len, op->name2,
				    op->name2_len)) {
				op->noop = true;
				break;
			}
			op->rep = view_get(s, b, &v, op->name2, op->name2_len);
			if (op->rep && (op->flags & COIL_RENAME_NOREPLACE)) {
				rc = -EEXIST;
				break;
			}
			view_set(&v, op->name, op->name_len, 0);
			view_set(&v, op->name2, op->name2_len, t);
			break;
		default: /* write, truncate */
			if (!t)
				rc = -ENOENT;
			op->t = t;
			break;
		}
	}
	free(v.name);
	free(v.len);
	free(v.bind);
	return rc;
}

/* Drop the claims and the references (mlock held). */
static void batch_unclaim(struct coil_store *s, struct coil_batch *b)
{
	if (b->claimed) {
		struct coil_batch **pp = &s->batches;

		while (*pp != b)
			pp = &(*pp)->claim_next;
		*pp = b->claim_next;
		b->claimed = false;
		pthread_cond_broadcast(&s->mcond);
	}
	for (uint32_t i = 0; i < b->nbinds; i++) {
		if (b->binds[i].o && !b->binds[i].created)
			object_put(s, b->binds[i].o);
		b->binds[i].o = NULL;
	}
	b->nbinds = 0;
}

static int batch_claim(struct coil_store *s, struct coil_batch *b)
{
	int rc = 0;

	pthread_mutex_lock(&s->mlock);
	while (batch_conflicts(s, b)) {
		stat_add(&s->st.batch_waits, 1);
		pthread_cond_wait(&s->mcond, &s->mlock);
	}
	if (atomic_load(&s->broken))
		rc = -EIO;
	if (rc == 0)
		rc = batch_resolve(s, b);
	if (rc == 0) {
		b->claim_next = s->batches;
		s->batches = b;
		b->claimed = true;
	} else {
		batch_unclaim(s, b);
	}
	pthread_mutex_unlock(&s->mlock);
	return rc;
}

/* ---- encode, place, describe ------------------------------------------------ */

/* Cut every write into blobs at max_blob boundaries of its object offset:
 * each blob's slot in one buffer (its length rounded up to 4 KiB) and its
 * source, then encode them all here.  @return 0, -ENOMEM, or an encoder's
 * error. */
static int batch_encode(struct coil_store *s, struct coil_batch *b)
{
	struct wreq *w = b->w;
	uint32_t mb = s->max_blob, n = 0;
	size_t total = 0;
	ZSTD_CCtx *cc = s->level ? zctx_thread_c() : NULL;
	int rc;

	for (uint32_t i = 0; i < b->nops; i++) {
		struct bop *op = &b->ops[i];
		uint64_t pos = op->off, end = op->off + op->len;

		if (op->kind != BOP_WRITE)
			continue;
		op->blob0 = n;
		for (; pos < end; n++)
			pos = COIL_MIN(COIL_ALIGN_DOWN(pos, mb) + mb, end);
		op->nblobs = n - op->blob0;
	}
	rc = wreq_reserve(w, n ? n : 1);
	if (rc < 0)
		return rc;
	w->nblobs = n;
	for (uint32_t i = 0; i < b->nops; i++) {
		struct bop *op = &b->ops[i];
		uint64_t pos = op->off, end = op->off + op->len;

		for (uint32_t k = op->blob0;
		     op->kind == BOP_WRITE && k < op->blob0 + op->nblobs; k++) {
			uint64_t bend = COIL_MIN(COIL_ALIGN_DOWN(pos, mb) + mb,
						 end);
			struct pool_task *t = &w->tasks[k];

			w->slot[k] = (uint32_t)total;
			w->bd[k] = NULL;
			t->u.encode.src = b->data + op->data_off +
					  (pos - op->off);
			t->u.encode.len = (uint32_t)(bend - pos);
			total += COIL_ALIGN_UP(bend - pos, FMT_BLOCK);
			pos = bend;
		}
	}
	w->batch_len = total;
	if (!n)
		return 0;
	w->batch = bufpool_get(&s->bp, total);
	if (!w->batch)
		return -ENOMEM;
	for (uint32_t k = 0; k < n && rc >= 0; k++) {
		const struct pool_task *t = &w->tasks[k];

		rc = fmt_blob_encode(cc, cc ? s->level : 0, NULL, 0,
				     t->u.encode.src, t->u.encode.len,
				     w->batch + w->slot[k],
				     COIL_ALIGN_UP(t->u.encode.len, FMT_BLOCK),
				     &w->fb[k]);
	}
	return rc < 0 ? rc : 0;
}

/* The records' size bound, for the chunk limit and the buffer. */
static size_t batch_rec_bound(const struct coil_batch *b, bool inl)
{
	size_t need = FMT_JREC_HDR + 8;

	for (uint32_t i = 0; i < b->nops; i++) {
		const struct bop *op = &b->ops[i];

		switch (op->kind) {
		case BOP_WRITE:
			need += write_record_bound(b->w, op->blob0,
						   op->nblobs, inl);
			break;
		default: /* the largest body: a rename's (ids, length, name) */
			need += FMT_JREC_HDR + 18 + op->name_len +
				(op->name2 ? op->name2_len : 0);
			break;
		}
	}
	return need;
}

/* What a clone of @o adds to a checkpoint: its extents again (and an
 * in-memory blob's bytes with each).  mlock held. */
static uint64_t clone_ckpt_bytes(const struct object *o)
{
	struct extmap_iter it;
	const struct ext *e;
	uint64_t need = 0;

	if (!o)
		return 0; /* created by the batch: its writes reserved theirs */
	extmap_iter_init(&it, &o->map, 0);
	while ((e = extmap_iter_next(&it)))
		need += FMT_EXTENT_FIXED + 8u * e->b->n_csums +
			(blobd_is_mem(e->b) ? e->b->stored_len : 0);
	return need;
}

/* What the batch adds to the next checkpoint beyond its blobs: a new
 * object per create, a renamed object's new name, a clone's extents, and
 * the extents each write or truncate may split (ckpt_reserve_write counts
 * one write's).  mlock held. */
static uint64_t batch_ckpt_extra(const struct coil_batch *b)
{
	uint64_t need = 0, split = ckpt_split_bytes(b->s);

	for (uint32_t i = 0; i < b->nops; i++) {
		const struct bop *op = &b->ops[i];

		if (op->kind == BOP_CREATE)
			need += FMT_CKPT_OBJ_MIN - 1 + op->name_len;
		else if (op->kind == BOP_CLONE)
			need += FMT_CKPT_OBJ_MIN - 1 + op->name2_len +
				clone_ckpt_bytes(b->binds[op->t - 1].o);
		else if (op->kind == BOP_RENAME)
			need += op->name2_len;
		else if (op->kind != BOP_REMOVE)
			need += split;
	}
	return need;
}

/* Place the batch's data (inline in its record when small) and reserve its
 * checkpoint room.  @return 0, -ENOSPC, -ENOMEM. */
static int batch_place(struct coil_store *s, struct coil_batch *b)
{
	struct wreq *w = b->w;
	int rc;

	w->nruns = 0;
	w->ckpt_res = 0;
	w->len = b->data_len;
	b->inl = w->nblobs &&
		 batch_rec_bound(b, true) + FMT_JCHUNK_HDR <= s->chunk_cap &&
		 write_inline_reserve(s, w);
	if (!b->inl && w->nblobs) {
		cleaner_throttle(s, w->batch_len);
		rc = write_place(s, w);
		if (rc < 0)
			return rc;
	}
	pthread_mutex_lock(&s->mlock);
	rc = w->nblobs ? 0 : ckpt_reserve_write(s, w, false);
	if (rc == 0)
		rc = ckpt_reserve_more(s, w, batch_ckpt_extra(b));
	pthread_mutex_unlock(&s->mlock);
	return rc;
}

/* Ids for the created objects, then the records.  @return 0, -E2BIG (does
 * not fit a chunk), -ENOMEM. */
static int batch_describe(struct coil_store *s, struct coil_batch *b)
{
	struct wreq *w = b->w;
	size_t need = batch_rec_bound(b, b->inl);
	struct fmt_cursor c;
	int rc;

	b->rec = malloc(need);
	if (!b->rec)
		return -ENOMEM;
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < b->nbinds; i++)
		if (b->binds[i].created)
			b->binds[i].id = s->next_obj_id++;
		else
			b->binds[i].id = b->binds[i].o->id;
	pthread_mutex_unlock(&s->mlock);

	fmt_cursor_init(&c, b->rec, need);
	b->nrec = 0;
	rc = fmt_jrec_put_batch(&c, b->nops);
	for (uint32_t i = 0; rc == 0 && i < b->nops; i++) {
		struct bop *op = &b->ops[i];
		uint64_t id = b->binds[op->t - 1].id;

		switch (op->kind) {
		case BOP_WRITE:
			rc = write_describe_range(s, w, id, op->off, op->len,
						  op->blob0, op->nblobs,
						  b->inl, &c);
			break;
		case BOP_TRUNCATE:
			rc = fmt_jrec_put_truncate(&c, id, op->len);
			break;
		case BOP_CREATE:
			rc = fmt_jrec_put_create(&c, id, op->name,
						 op->name_len);
			break;
		case BOP_REMOVE:
			rc = fmt_jrec_put_remove(&c, id);
			break;
		case BOP_CLONE:
			rc = fmt_jrec_put_clone(&c, id,
						b->binds[op->rep - 1].id,
						op->name2, op->name2_len);
			break;
		case BOP_RENAME:
			rc = fmt_jrec_put_rename(&c, id,
						 op->noop || !op->rep ? 0 :
						 b->binds[op->rep - 1].id,
						 op->noop ? op->name :
							    op->name2,
						 op->noop ? op->name_len :
							    op->name2_len);
			break;
		}
	}
	if (rc < 0)
		return rc;
	stat_add(&s->st.enc_logical, b->data_len);
	stat_add(&s->st.enc_stored, w->stored);
	b->nrec = b->nops + 1;
	w->je.rec = b->rec;
	w->je.rec_len = (uint32_t)c.pos;
	w->je.nrec = b->nrec;
	return 0;
}

/* ---- apply and complete ------------------------------------------------------ */

static struct object *bind_obj(struct coil_batch *b, uint32_t t)
{
	struct object *o = b->binds[t - 1].o;

	return o && !o->removed ? o : NULL;
}

/* One operation of an applying batch (mlock held).  @return 0, -ENOMEM. */
static int batch_apply_op(struct coil_store *s, struct coil_batch *b,
			  struct bop *op)
{
	struct object *o;
	int rc = 0;

	if (op->kind == BOP_CREATE) {
		struct bind *bd = &b->binds[op->t - 1];

		/* the claim kept every other creator of the name away */
		COIL_ASSERT(!objtab_find_name(s, op->name, op->name_len));
		return objtab_add(s, bd->id, op->name, op->name_len, &bd->o);
	}
	o = bind_obj(b, op->t);
	if (!o)
		return 0;
	if (op->kind == BOP_CLONE) {
		struct bind *bd = &b->binds[op->rep - 1];

		COIL_ASSERT(!objtab_find_name(s, op->name2, op->name2_len));
		return meta_clone(s, o, bd->id, op->name2, op->name2_len,
				  &bd->o);
	}
	switch (op->kind) {
	case BOP_WRITE:
		rc = write_apply_blobs(s, b->w, o, op->off, op->blob0,
				       op->nblobs);
		break;
	case BOP_TRUNCATE:
		rc = meta_apply_truncate(s, o, op->len);
		break;
	case BOP_REMOVE:
		meta_apply_remove(s, o);
		break;
	case BOP_RENAME:
		if (op->noop)
			break;
		if (op->rep && bind_obj(b, op->rep))
			meta_apply_remove(s, bind_obj(b, op->rep));
		COIL_ASSERT(!objtab_find_name(s, op->name2, op->name2_len));
		rc = objtab_rename(s, o, op->name2, op->name2_len);
		break;
	}
	return rc;
}

static void batch_apply(struct coil_store *s, struct jent *e)
{
	struct wreq *w = (struct wreq *)e;
	struct coil_batch *b = w->arg;

	for (uint32_t i = 0; e->status == 0 && i < b->nops; i++) {
		int rc = batch_apply_op(s, b, &b->ops[i]);

		if (rc < 0) {
			store_break(s, rc);
			e->status = rc;
		}
	}
	wreq_drop_blobs(w, 0);
	seg_inflight_done(s, w);
	w->nruns = 0;
	batch_unclaim(s, b);
}

static void batch_release(struct coil_store *s, struct coil_batch *b)
{
	struct wreq *w = b->w;

	if (w) {
		bufpool_put(&s->bp, w->batch);
		w->batch = NULL;
		wreq_put(s, w);
	}
	ops_free(b);
}

static void batch_done(struct coil_store *s, struct jent *e, int res)
{
	struct wreq *w = (struct wreq *)e;
	struct coil_batch *b = w->arg;
	coil_cb cb = b->cb;
	void *arg = b->arg;

	if (res < 0)
		stat_add(&s->st.batch_errors, 1);
	else
		stat_add(&s->st.batches, 1);
	batch_release(s, b);
	if (cb)
		cb(arg, res);
	ops_done(s);
}

/* A batch that failed before its ticket: give back what it took. */
static void batch_abort(struct coil_store *s, struct coil_batch *b)
{
	struct wreq *w = b->w;

	pthread_mutex_lock(&s->mlock);
	if (w) {
		wreq_drop_blobs(w, 0);
		seg_inflight_done(s, w);
		w->nruns = 0;
	}
	batch_unclaim(s, b);
	pthread_mutex_unlock(&s->mlock);
	batch_release(s, b);
}

/* The existing objects the batch names, and a place in each. */
static int batch_turns(struct coil_store *s, struct coil_batch *b,
		       struct object ***objs, uint64_t **turns, uint32_t *n)
{
	*n = 0;
	*objs = malloc((b->nbinds ? b->nbinds : 1) * sizeof(**objs));
	*turns = malloc((b->nbinds ? b->nbinds : 1) * sizeof(**turns));
	if (!*objs || !*turns)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->nbinds; i++)
		if (!b->binds[i].created)
			(*objs)[(*n)++] = b->binds[i].o;
	journal_turns(s, *objs, *turns, *n);
	return 0;
}

COIL_API int coil_batch_submit(coil_batch *b, coil_cb cb, void *arg)
{
	struct coil_store *s;
	struct object **objs = NULL;
	uint64_t *turns = NULL;
	uint32_t nturns = 0;
	struct wreq *w;
	int rc;

	if (!b)
		return -EINVAL;
	s = b->s;
	if (!store_valid(s)) {
		ops_free(b);
		return -EBADF;
	}
	rc = s->rdonly ? -EROFS : atomic_load(&s->broken) ? -EIO : 0;
	if (rc == 0 && engine_on_coil_thread(s))
		rc = -EDEADLK;
	if (rc == 0 && b->nops == 0)
		rc = -EINVAL;
	if (rc < 0) {
		ops_free(b);
		return rc;
	}
	b->cb = cb;
	b->arg = arg;
	rc = batch_claim(s, b);
	if (rc < 0) {
		ops_free(b);
		return rc;
	}
	w = b->w = wreq_get(s);
	memset(&w->je, 0, sizeof(w->je));
	w->je.apply = batch_apply;
	w->je.done = batch_done;
	w->je.need_sync = s->sync_writes;
	w->s = s;
	w->h = NULL;
	w->obj = NULL;
	w->cb = NULL;
	w->arg = b;
	w->nblobs = 0;
	w->nruns = 0;
	w->ckpt_res = 0;
	w->stored = 0;
	w->batch = NULL;
	w->use_reserve = false;
	rc = batch_encode(s, b);
	if (rc == 0 && batch_rec_bound(b, false) + FMT_JCHUNK_HDR > s->chunk_cap)
		rc = -E2BIG;
	if (rc == 0)
		rc = batch_place(s, b);
	if (rc == 0)
		rc = batch_describe(s, b);
	if (rc == 0)
		rc = batch_turns(s, b, &objs, &turns, &nturns);
	if (rc < 0) {
		free(objs);
		free(turns);
		batch_abort(s, b);
		return rc;
	}
	atomic_fetch_add(&s->ops_inflight, 1);
	journal_take_turns(s, objs, turns, nturns, &w->je);
	free(objs);
	free(turns);
	if (b->inl && atomic_load(&s->mem.bytes) >= ENGINE_PACK_AT)
		pack_kick(s);
	wreq_send(s, w);
	return 0;
}

struct batch_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool fin;
	int res;
};

static void batch_wait_cb(void *arg, int64_t res)
{
	struct batch_wait *bw = arg;

	pthread_mutex_lock(&bw->mu);
	bw->res = (int)res;
	bw->fin = true;
	pthread_cond_signal(&bw->cv);
	pthread_mutex_unlock(&bw->mu);
}

COIL_API int coil_batch_commit(coil_batch *b)
{
	struct batch_wait bw = { .fin = false, .res = 0 };
	int rc;

	pthread_mutex_init(&bw.mu, NULL);
	pthread_cond_init(&bw.cv, NULL);
	rc = coil_batch_submit(b, batch_wait_cb, &bw);
	if (rc == 0) {
		pthread_mutex_lock(&bw.mu);
		while (!bw.fin)
			pthread_cond_wait(&bw.cv, &bw.mu);
		pthread_mutex_unlock(&bw.mu);
		rc = bw.res;
	}
	pthread_mutex_destroy(&bw.mu);
	pthread_cond_destroy(&bw.cv);
	return rc;
}

COIL_API int coil_obj_clone(coil_store *s, const char *src, const char *dst)
{
	coil_batch *b;
	int rc;

	if (!s || !src || !dst)
		return -EINVAL;
	rc = coil_batch_new(s, &b);
	if (rc < 0)
		return rc;
	rc = coil_batch_clone(b, src, dst);
	if (rc < 0) {
		coil_batch_free(b);
		return rc;
	}
	return coil_batch_commit(b);
}

COIL_API int coil_obj_rename(coil_store *s, const char *old,
			     const char *new_name, unsigned flags)
{
	coil_batch *b;
	int rc;

	if (!s || !old || !new_name)
		return -EINVAL;
	rc = coil_batch_new(s, &b);
	if (rc < 0)
		return rc;
	rc = coil_batch_rename(b, old, new_name, flags);
	if (rc < 0) {
		coil_batch_free(b);
		return rc;
	}
	return coil_batch_commit(b);
}
