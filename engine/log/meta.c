/* engine/log/meta.c — applying records to the in-memory metadata (the live path
 * and journal replay share these), and the metadata operations create,
 * remove and truncate, which travel through the journal like writes.
 *
 * Ordering: create and remove change the object table at once, under mlock,
 * in the same step that takes their ticket, so the table order is the journal
 * order.  A write applied after its object was removed is dropped, exactly as
 * replay drops a WRITE for an id that no longer exists.  Truncate is applied
 * at its turn in the journal (after every write submitted before it), so the
 * caller waits for it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/bcache.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/place/blob.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"

int meta_apply_write(struct coil_store *s, struct object *o, uint64_t off,
		     uint64_t len, const struct ext *ex, uint32_t n, bool remap)
{
	for (uint32_t i = 0; i < n; i++) {
		bool mem = blobd_is_mem(ex[i].b);
		uint32_t idx = mem ? 0 : seg_of(s, ex[i].b->dev_off);
		int rc;

		COIL_ASSERT(mem || idx < s->nseg);
		rc = extmap_insert(&o->map, &ex[i], meta_extent_dropped, s);
		if (rc < 0) {
			for (uint32_t j = i; j < n; j++)
				blobd_unref(ex[j].b);
			return rc;
		}
		if (!mem)
			seg_live_add(s, idx, ex[i].b, ex[i].len);
		obj_dirty_range(s, o, ex[i].off, ex[i].off + ex[i].len);
	}
	if (!remap && len && off + len > o->size) {
		o->size = off + len;
		obj_dirty_range(s, o, o->size, o->size);
	}
	return 0;
}

int meta_apply_punch(struct coil_store *s, struct object *o, uint64_t lo,
		     uint64_t hi)
{
	int rc = extmap_punch(&o->map, lo, hi - lo, meta_extent_dropped, s);

	if (rc == 0)
		obj_dirty_range(s, o, lo, hi);
	return rc;
}

int meta_apply_truncate(struct coil_store *s, struct object *o, uint64_t size)
{
	if (size < o->size) {
		int rc = meta_apply_punch(s, o, size, UINT64_MAX);
		if (rc < 0)
			return rc;
	}
	if (size != o->size)
		obj_dirty_range(s, o, size, size);
	o->size = size;
	return 0;
}

void meta_apply_remove(struct coil_store *s, struct object *o)
{
	objtab_unlink(s, o, meta_extent_dropped);
}

int meta_clone(struct coil_store *s, struct object *src, uint64_t dst_id,
	       const char *name, size_t len, struct object **out)
{
	struct extmap_iter it;
	const struct ext *e;
	struct object *d;
	struct ext ex[64];
	uint32_t n = 0;
	int rc;

	rc = objtab_add(s, dst_id, name, len, &d);
	if (rc < 0)
		return rc;
	extmap_iter_init(&it, &src->map, 0);
	while (rc == 0 && (e = extmap_iter_next(&it))) {
		struct blobd *b = e->b;

		if (blobd_is_mem(b)) {
			/* An in-memory blob belongs to the one place the
			 * packer moves it from: the clone gets its own copy
			 * (small, and only until packed). */
			struct fmt_blob fb;

			blobd_to_fmt(e->b, &fb);
			b = blobd_new_mem(&fb, e->b->mem->bytes, &s->mem,
					  dst_id, e->off - e->skip);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
		} else {
			blobd_ref(b);
		}
		ex[n++] = (struct ext){ .off = e->off, .len = e->len,
					.skip = e->skip, .b = b };
		if (n == COIL_ARRAY_LEN(ex)) {
			rc = meta_apply_write(s, d, 0, 0, ex, n, true);
			n = 0;
		}
	}
	if (rc == 0 && n)
		rc = meta_apply_write(s, d, 0, 0, ex, n, true);
	else
		for (uint32_t i = 0; i < n; i++)
			blobd_unref(ex[i].b);
	if (rc < 0)
		return rc;
	d->size = src->size;
	*out = d;
	return 0;
}

/* ---- metadata ops through the journal ----------------------------------- */

struct mop {
	struct jent je;
	struct object *o;
	uint64_t size;
	bool waited;
	bool fin;
	int res;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t rec[FMT_JREC_HDR + 16 + FMT_NAME_MAX];
};

static void mop_apply_none(struct coil_store *s, struct jent *e)
{
	(void)s;
	(void)e;
}

static void mop_done_free(struct coil_store *s, struct jent *e, int res)
{
	(void)res;
	journal_release_meta(s);
	free(e);
}

static void mop_apply_truncate(struct coil_store *s, struct jent *e)
{
	struct mop *m = (struct mop *)e;

	if (e->status == 0 && !m->o->removed) {
		int rc = meta_apply_truncate(s, m->o, m->size);
		if (rc < 0) {
			store_break(s, rc);
			e->status = rc;
		}
	}
}

static void mop_done_wake(struct coil_store *s, struct jent *e, int res)
{
	struct mop *m = (struct mop *)e;

	journal_release_meta(s);
	pthread_mutex_lock(&m->mu);
	m->res = res;
	m->fin = true;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

static struct mop *mop_new(void)
{
	struct mop *m = calloc(1, sizeof(*m));

	if (m) {
		m->je.apply = mop_apply_none;
		m->je.done = mop_done_free;
		m->je.rec = m->rec;
	}
	return m;
}

static int mop_encode(struct mop *m, int (*put)(struct fmt_cursor *c,
						  struct mop *m))
{
	struct fmt_cursor c;
	int rc;

	fmt_cursor_init(&c, m->rec, sizeof(m->rec));
	rc = put(&c, m);
	if (rc < 0)
		return rc;
	m->je.rec_len = (uint32_t)c.pos;
	return 0;
}

static int put_remove(struct fmt_cursor *c, struct mop *m)
{
	return fmt_jrec_put_remove(c, m->o->id);
}

static int put_truncate(struct fmt_cursor *c, struct mop *m)
{
	return fmt_jrec_put_truncate(c, m->o->id, m->size);
}

int meta_create(struct coil_store *s, const char *name, size_t len,
		struct object **out)
{
	struct mop *m = mop_new();
	struct fmt_cursor c;
	struct object *o;
	int rc;

	/* mlock is held by the caller; the ticket slot was reserved. */
	if (!m)
		return -ENOMEM;
	rc = ckpt_room_for_object(s, len);
	if (rc == 0)
		rc = objtab_add(s, s->next_obj_id, name, len, &o);
	if (rc < 0) {
		free(m);
		return rc;
	}
	fmt_cursor_init(&c, m->rec, sizeof(m->rec));
	rc = fmt_jrec_put_create(&c, o->id, name, len);
	COIL_ASSERT(rc == 0);
	m->je.rec_len = (uint32_t)c.pos;
	m->je.ticket = journal_ticket(s);
	*out = o;
	/* journal_ready takes jlock only; mlock -> jlock is the lock order. */
	journal_ready_nokick(s, &m->je);
	return 0;
}

int meta_remove(struct coil_store *s, struct object *o)
{
	struct mop *m = mop_new();
	int rc;

	/* mlock held by the caller; slot reserved. */
	if (!m)
		return -ENOMEM;
	m->o = o;
	rc = mop_encode(m, put_remove);
	COIL_ASSERT(rc == 0);
	m->o = NULL;
	m->je.ticket = journal_ticket(s);
	meta_apply_remove(s, o);
	journal_ready_nokick(s, &m->je);
	return 0;
}

int meta_truncate(struct coil_store *s, struct object *o, uint64_t size)
{
	struct mop m;
	int rc;

	memset(&m, 0, sizeof(m));
	m.je.apply = mop_apply_truncate;
	m.je.done = mop_done_wake;
	m.je.rec = m.rec;
	m.o = o;
	m.size = size;
	pthread_mutex_init(&m.mu, NULL);
	pthread_cond_init(&m.cv, NULL);
	rc = mop_encode(&m, put_truncate);
	COIL_ASSERT(rc == 0);
	rc = journal_reserve_meta(s, true);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&s->mlock);
	o->refs++;
	pthread_mutex_unlock(&s->mlock);
	/* After the writes of @o submitted before it (journal.c); it
	 * changes nothing until applied, so its ticket needs no mlock. */
	m.je.turn = journal_turn(s, o);
	m.je.ticketed = journal_ready;
	journal_take_turn(s, o, &m.je, true);
	pthread_mutex_lock(&m.mu);
	while (!m.fin)
		pthread_cond_wait(&m.cv, &m.mu);
	pthread_mutex_unlock(&m.mu);
	pthread_mutex_lock(&s->mlock);
	object_put(s, o);
	pthread_mutex_unlock(&s->mlock);
	pthread_mutex_destroy(&m.mu);
	pthread_cond_destroy(&m.cv);
	return m.res;
}

void meta_extent_dropped(void *arg, struct blobd *b, uint32_t len)
{
	struct coil_store *s = arg;
	uint32_t idx;

	if (blobd_is_mem(b))
		return; /* in no segment, never in the cache */
	idx = seg_of(s, b->dev_off);
	COIL_ASSERT(idx < s->nseg);
	bcache_drop_blob(s, b, len, s->segs[idx].gen);
	seg_drop_live(arg, b, len);
}

/* ---- relocation's compare-and-swap (live path and replay) ---------------- */

static bool blob_same_content(const struct blobd *a, const struct blobd *b)
{
	return a->codec == b->codec &&
	       a->n_csums == b->n_csums && a->stored_len == b->stored_len &&
	       a->logical_len == b->logical_len && a->dict_id == b->dict_id &&
	       !memcmp(a->csums, b->csums, (size_t)a->n_csums * 8u);
}

static uint32_t sector_len(const struct blobd *b, uint32_t i)
{
	return (uint32_t)COIL_MIN((uint64_t)FMT_BLOCK,
				  b->logical_len - (uint64_t)i * FMT_BLOCK);
}

/* Does the blob @n (mapped by @ex) hold the same bytes as the map's
 * extent @e over object bytes [a, z)?  Compressed: the same blob content
 * at the same alignment.  Raw: @n may be a sector range of the old blob;
 * every sector both map in [a, z) must sit at the same place with the
 * same length and checksum.  @moved: @n is a relocated copy, which never
 * replaces a map extent already at its own place; a rewrite's expected
 * blob (!@moved) is normally exactly there. */
static bool extent_same_bytes(const struct ext *e, const struct ext *ex,
			      uint64_t a, uint64_t z, bool moved)
{
	const struct blobd *o = e->b, *n = ex->b;
	int64_t delta;
	uint32_t j0, j1, d;

	/* Where the bytes are (a segment, or memory: FMT_BLOB_INLINE) is not
	 * what they are: only the content is compared. */
	if ((moved && o->dev_off == n->dev_off && !o->mem && !n->mem) ||
	    o->codec != n->codec || o->dict_id != n->dict_id)
		return false;
	if (o->codec != FMT_CODEC_RAW)
		return e->off + ex->skip == ex->off + e->skip &&
		       blob_same_content(o, n);
	/* old byte = new byte + delta, for every object byte */
	delta = ((int64_t)e->skip - (int64_t)e->off) -
		((int64_t)ex->skip - (int64_t)ex->off);
	if (delta < 0 || delta % FMT_BLOCK)
		return false;
	d = (uint32_t)(delta / FMT_BLOCK);
	j0 = (uint32_t)((a - ex->off + ex->skip) / FMT_BLOCK);
	j1 = (uint32_t)((z - 1 - ex->off + ex->skip) / FMT_BLOCK);
	if (j1 >= n->n_csums || j1 + d >= o->n_csums)
		return false;
	for (uint32_t j = j0; j <= j1; j++)
		if (n->csums[j] != o->csums[j + d] ||
		    sector_len(n, j) != sector_len(o, j + d))
			return false;
	return true;
}

/* Install @ex on the bytes of [want->off, want->off + want->len) where
 * the map still holds @want's content at @want's alignment. */
static int64_t apply_swap(struct coil_store *s, struct object *o,
			  const struct ext *want, const struct ext *ex,
			  bool moved)
{
	uint64_t cur = want->off, end = want->off + want->len;
	int64_t done = 0;

	while (cur < end) {
		struct extmap_iter it;
		const struct ext *e;
		uint64_t a = 0, z = 0;
		bool found = false;
		struct ext ne;
		int rc;

		extmap_iter_init(&it, &o->map, cur);
		while ((e = extmap_iter_next(&it)) && e->off < end) {
			a = COIL_MAX(e->off, cur);
			z = COIL_MIN(e->off + e->len, end);
			if (a < z && extent_same_bytes(e, want, a, z, moved)) {
				found = true;
				break;
			}
		}
		if (!found)
			break;
		ne.off = a;
		ne.len = (uint32_t)(z - a);
		ne.skip = ex->skip + (uint32_t)(a - ex->off);
		ne.b = ex->b;
		blobd_ref(ex->b);
		rc = extmap_insert(&o->map, &ne, meta_extent_dropped, s);
		if (rc < 0) {
			blobd_unref(ex->b);
			return rc;
		}
		if (!blobd_is_mem(ex->b))
			seg_live_add(s, seg_of(s, ex->b->dev_off), ex->b,
				     ne.len);
		obj_dirty_range(s, o, ne.off, ne.off + ne.len);
		done += ne.len;
		cur = z;
	}
	return done;
}

int64_t meta_apply_remap(struct coil_store *s, struct object *o,
			 const struct ext *ex)
{
	return apply_swap(s, o, ex, ex, true);
}

int64_t meta_apply_rewrite(struct coil_store *s, struct object *o,
			   const struct ext *want, const struct ext *ex)
{
	COIL_ASSERT(want->off == ex->off && want->len == ex->len);
	return apply_swap(s, o, want, ex, false);
}

int meta_replay_rewrite(struct coil_store *s, struct object *o,
			const struct fmt_extent *fw,
			const struct fmt_extent *fe)
{
	struct ext w, e;
	int64_t n = -ENOMEM;

	w = (struct ext){ .off = fw->obj_off, .len = fw->len,
			  .skip = fw->blob_skip, .b = blobd_new(&fw->blob) };
	e = (struct ext){ .off = fe->obj_off, .len = fe->len,
			  .skip = fe->blob_skip, .b = blobd_new(&fe->blob) };
	if (w.b && e.b)
		n = meta_apply_rewrite(s, o, &w, &e);
	if (w.b)
		blobd_unref(w.b);
	if (e.b)
		blobd_unref(e.b);
	return n < 0 ? (int)n : 0;
}

int meta_replay_remap(struct coil_store *s, struct object *o,
			 const struct fmt_extent *fe)
{
	struct ext e;
	int64_t n;

	e.off = fe->obj_off;
	e.len = fe->len;
	e.skip = fe->blob_skip;
	e.b = blobd_new(&fe->blob);
	if (!e.b)
		return -ENOMEM;
	n = meta_apply_remap(s, o, &e);
	blobd_unref(e.b);
	return n < 0 ? (int)n : 0;
}
