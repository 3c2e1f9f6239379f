/* engine/log/ckpt.c — the checkpoint writer and the superblocks.
 *
 * Checkpoint: snapshot the whole metadata under mlock at the journal's
 * applied point (every chunk up to it applied; some entries of the next may
 * be too, since entries apply as their data lands, and replay re-applies
 * them), write it to the checkpoint area the superblock does not point at,
 * fdatasync, then switch the superblock (both copies, one after the other,
 * each synced, so either copy alone names the newest checkpoint), then
 * release the journal before the snapshot point and free the segments that
 * were pending at snapshot and that no record after it can reference.
 * Loading one, and replaying the journal after it, is log/recovery.c.
 *
 * Feedback loop: log/journal.c triggers a checkpoint when the journal
 * fills; the finished checkpoint moves the replay point and kicks the
 * journal (journal_kick) so writers waiting for its space go on. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/io/wreq.h"
#include "engine/grow.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/place/blob.h"
#include "engine/place/dev.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/place/reserve.h"
#include "engine/store.h"

/* Write both superblock copies for the current state.  ckpt_mu held (or
 * single-threaded open/close). */
int super_write(struct coil_store *s, bool clean)
{
	uint8_t *buf = bufpool_get(&s->bp, FMT_BLOCK);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	s->sb.flags = (s->sb.flags & FMT_SUPER_FILLED) |
		      (clean ? FMT_SUPER_CLEAN : 0);
	/* Conversion rule for compat features: a writer that does not know
	 * one clears it, since what it describes may be stale after this
	 * session's writes (docs/format.md, "Format changes"). */
	s->sb.compat &= FMT_COMPAT_KNOWN;
	/* Growth steps since the last write (grow.c): their blocks are
	 * made durable before a superblock names them. */
	uint32_t grown = atomic_load(&s->seg_count_grown);

	if (grown > s->sb.segment_count) {
		rc = store_io_sync(s, URING_OP_FSYNC, NULL, 0, 0);
		if (rc == 0)
			s->sb.segment_count = grown;
	}
	for (int i = 0; i < 2 && rc == 0; i++) {
		s->sb.seq++;
		rc = fmt_super_encode(&s->sb, buf, FMT_BLOCK);
		if (rc < 0)
			break;
		rc = store_io_sync(s, URING_OP_WRITE, buf, FMT_BLOCK,
				   (s->sb.seq % 2) * FMT_BLOCK);
		if (rc == 0)
			rc = store_io_sync(s, URING_OP_FSYNC, NULL, 0, 0);
	}
	bufpool_put(&s->bp, buf);
	return rc < 0 ? rc : 0;
}

/* ---- checkpoint --------------------------------------------------------- */

uint64_t ckpt_payload_now(const struct coil_store *s)
{
	/* In-memory blobs are written whole with each extent that maps
	 * them (ext_acct.inl). */
	return (uint64_t)s->nseg * FMT_CKPT_SEG_SIZE +
	       s->nobj * (FMT_CKPT_OBJ_MIN - 1) + s->name_bytes +
	       s->ext_acct.n * FMT_EXTENT_FIXED + 8u * s->ext_acct.csums +
	       s->ext_acct.inl;
}

/* What admission leaves free of the area: a sixteenth, for the cleaner's
 * relocations (not admitted: they replace extents one for one) and for
 * objects still mapped by open handles after their removal. */
static uint64_t payload_limit(const struct coil_store *s)
{
	uint64_t area = s->sb.ckpt_len - FMT_BLOCK;

	return area - area / 16;
}

uint64_t ckpt_split_bytes(const struct coil_store *s)
{
	/* No blob of a store is larger than its max_blob (writes cut there,
	 * relocations copy verbatim or less, the packer takes small ones):
	 * one checksum per 4 KiB raw, two for a compressed blob. */
	uint32_t csums = COIL_MAX(2u, s->max_blob / FMT_BLOCK);

	return 2u * (FMT_EXTENT_FIXED + 8u * csums);
}

int ckpt_reserve_write(struct coil_store *s, struct wreq *w, bool inl)
{
	/* The extents at either end the write may split.  Splitting an
	 * in-memory blob writes its bytes twice: rare (a small write over
	 * part of another), and within the sixteenth payload_limit keeps. */
	uint64_t need = ckpt_split_bytes(s);

	w->ckpt_res = 0;
	if (w->use_reserve)
		return 0;
	for (uint32_t k = 0; k < w->nblobs; k++)
		need += FMT_EXTENT_FIXED + 8u * w->fb[k].n_csums +
			(inl ? w->fb[k].stored_len : 0);
	if (ckpt_payload_now(s) + s->ckpt_reserved + need > payload_limit(s)) {
		stat_add(&s->st.ckpt_area_full, 1);
		return -ENOSPC;
	}
	s->ckpt_reserved += need;
	w->ckpt_res = need;
	return 0;
}

int ckpt_reserve_more(struct coil_store *s, struct wreq *w, uint64_t bytes)
{
	if (ckpt_payload_now(s) + s->ckpt_reserved + bytes > payload_limit(s)) {
		stat_add(&s->st.ckpt_area_full, 1);
		return -ENOSPC;
	}
	s->ckpt_reserved += bytes;
	w->ckpt_res += bytes;
	return 0;
}

int ckpt_room_for_object(const struct coil_store *s, size_t name_len)
{
	uint64_t need = FMT_CKPT_OBJ_MIN - 1 + name_len;

	return ckpt_payload_now(s) + s->ckpt_reserved + need > payload_limit(s) ?
	       -ENOSPC : 0;
}

/* One extent of a snapshot: the map's {off, len, skip} and a copy of its
 * blob's descriptor.  Copying takes no reference: a reference is an atomic
 * increment on a descriptor that lies wherever malloc put it, and those
 * increments, one cache miss each that cannot overlap, were most of the
 * 10-30 ms a snapshot of 260k extents held mlock.  Plain loads of the same
 * descriptors, prefetched ahead, overlap and take about a millisecond.  A
 * blob with more checksums than fit here (a raw blob over 8 KiB) is
 * referenced instead and read again when encoding. */
#define SNAP_CSUMS 2

struct snap_ext {
	uint64_t off;
	uint32_t len, skip;
	struct blobd *b;        /* referenced iff n_csums > SNAP_CSUMS */
	uint64_t dev_off;
	uint32_t stored_len, logical_len, dict_id;
	uint8_t codec, flags;
	uint16_t n_csums;
	uint64_t csums[SNAP_CSUMS];
};

/* How far ahead snap_fill_blobs prefetches descriptors. */
#define SNAP_PREFETCH 16

/* Fill the blob part of each of the @n extents from the descriptor its
 * map reference points at (mlock held: the map's references keep them). */
static void snap_fill_blobs(struct snap_ext *x, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		const struct blobd *b = x[i].b;

		if (i + SNAP_PREFETCH < n)
			__builtin_prefetch(x[i + SNAP_PREFETCH].b, 0, 3);
		x[i].dev_off = b->dev_off;
		x[i].stored_len = b->stored_len;
		x[i].logical_len = b->logical_len;
		x[i].dict_id = b->dict_id;
		x[i].codec = b->codec;
		x[i].flags = b->flags;
		x[i].n_csums = b->n_csums;
		/* an in-memory blob's bytes go into the checkpoint: keep
		 * them until it is encoded */
		if (b->n_csums > SNAP_CSUMS || b->mem) {
			blobd_ref(x[i].b);
			continue;
		}
		memcpy(x[i].csums, b->csums, b->n_csums * sizeof(uint64_t));
		x[i].b = NULL;
	}
}

static void ext_to_fmt(const struct snap_ext *x, struct fmt_extent *fe)
{
	struct fmt_blob *fb = &fe->blob;

	fe->obj_off = x->off;
	fe->len = x->len;
	fe->blob_skip = x->skip;
	fe->inl = NULL;
	if (x->b) {
		blobd_to_fmt(x->b, fb);
		if (x->b->mem)
			fe->inl = x->b->mem->bytes;
		return;
	}
	fb->dev_off = x->dev_off;
	fb->stored_len = x->stored_len;
	fb->logical_len = x->logical_len;
	fb->codec = x->codec;
	fb->flags = x->flags;
	fb->n_csums = x->n_csums;
	fb->dict_id = x->dict_id;
	memcpy(fb->csums, x->csums, x->n_csums * sizeof(uint64_t));
}

/* A copy of the metadata at one applied point (ckpt_write phase 1): every
 * object (a base), or what changed since the last checkpoint (a delta). */
struct snap_obj {
	uint64_t id, size;
	uint64_t first_ext, n_ext;
	size_t name_off;
	uint16_t name_len;
	uint8_t kind;           /* FMT_DREC_*: OBJ always in a base */
	uint32_t first_range, n_range; /* FMT_DREC_RANGES */
};

/* A changed range of a FMT_DREC_RANGES object and the extents (clipped to
 * it) that map it at the snapshot. */
struct snap_range {
	uint64_t lo, hi;
	uint64_t first_ext, n_ext;
};

struct snap {
	bool delta;
	struct snap_obj *obj;
	struct snap_ext *ext;
	struct snap_range *rng;
	uint64_t nrng;
	char *names;
	uint64_t *seg_live;
	uint8_t *seg_state;
	uint32_t nseg;        /* segments in use at the snapshot (grow.c
			       * may add more before the encode) */
	uint64_t nobj, next;
	uint64_t lin, next_seq, next_obj_id;
	uint64_t inl;         /* stored bytes of in-memory blobs it carries */
};

/* The arrays of a snapshot and the checkpoint's write buffer (one
 * checkpoint's, on ckpt_write's stack), grown as it needs them and given
 * back to the kernel when it ends (ckpt_mem_release).  Kept between checkpoints,
 * they held a copy of the last whole checkpoint's metadata (about 1.2x
 * its base) for as long as the store was open, and the piece buffer's
 * pages besides: RSS per object after loading 10^6 4 KiB blobs fell
 * from 242-244 to 152-174 B when they went back (but in runs that end
 * while a whole checkpoint is running), after 10^6 objects from 638-652
 * to 515 B.  Taken again, they are faulted in again: outside mlock
 * (mem_fit), and once per checkpoint, not per operation.  The write
 * buffer is a piece of a base (base_stream) or a whole delta (a delta
 * chain adds up to at most its base's size). */
struct ckpt_mem {
	struct snap_obj *obj;
	struct snap_ext *ext;
	struct snap_range *rng;
	char *names;
	uint64_t *seg_live;
	uint8_t *seg_state;
	uint8_t *buf;
	size_t cap_obj, cap_ext, cap_rng, cap_names, cap_live, cap_state,
	       cap_buf;
};

static void ckpt_mem_release(struct ckpt_mem *m)
{
	coil_pages_free(m->obj, m->cap_obj * sizeof(*m->obj));
	coil_pages_free(m->ext, m->cap_ext * sizeof(*m->ext));
	coil_pages_free(m->rng, m->cap_rng * sizeof(*m->rng));
	coil_pages_free(m->names, m->cap_names);
	coil_pages_free(m->seg_live, m->cap_live * sizeof(*m->seg_live));
	coil_pages_free(m->seg_state, m->cap_state);
	coil_pages_free(m->buf, m->cap_buf);
	memset(m, 0, sizeof(*m));
}

/* Make *@p hold @n elements of @size (1/8 slack, so a map growing while
 * the snapshot counts again does not map again at once).  The new part
 * is touched here, outside mlock: its first touch faults each page in,
 * and the snapshot would otherwise take those faults while holding the
 * lock.  @return 0 or -ENOMEM. */
static int mem_fit(void **p, size_t *cap, size_t n, size_t size)
{
	void *q;

	n = COIL_MAX(n, 1);
	if (n <= *cap)
		return 0;
	n += n / 8;
	q = coil_pages_resize(*p, *cap * size, n * size);
	if (!q)
		return -ENOMEM;
	memset((char *)q + *cap * size, 0, (n - *cap) * size);
	*p = q;
	*cap = n;
	return 0;
}

/* The checkpoint's write buffer, @len bytes, page aligned for O_DIRECT. */
static uint8_t *ckpt_buf(struct ckpt_mem *m, size_t len)
{
	void *p;

	if (len <= m->cap_buf)
		return m->buf;
	p = coil_pages_resize(NULL, 0, len);
	if (!p)
		return NULL;
	coil_pages_free(m->buf, m->cap_buf);
	m->buf = p;
	m->cap_buf = len;
	return m->buf;
}

static void snap_release(struct snap *sn)
{
	for (uint64_t i = 0; i < sn->next; i++)
		blobd_unref(sn->ext[i].b); /* NULL unless referenced */
	/* the arrays belong to the checkpoint's struct ckpt_mem */
	memset(sn, 0, sizeof(*sn));
}

/* Extents of @o's map that overlap [lo, hi), or with @x, copy them there
 * clipped to it.  @return how many. */
static uint64_t range_exts(const struct object *o, uint64_t lo, uint64_t hi,
			   struct snap_ext *x)
{
	struct extmap_iter it;
	const struct ext *e;
	uint64_t n = 0;

	if (lo == hi)
		return 0;
	extmap_iter_init(&it, &o->map, lo);
	while ((e = extmap_iter_next(&it)) && e->off < hi) {
		uint64_t a = COIL_MAX(e->off, lo);
		uint64_t z = COIL_MIN(e->off + e->len, hi);

		if (a >= z)
			continue;
		if (x) {
			x[n].off = a;
			x[n].len = (uint32_t)(z - a);
			x[n].skip = e->skip + (uint32_t)(a - e->off);
			x[n].b = e->b;
		}
		n++;
	}
	return n;
}

/* What a snapshot needs room for.  A delta counts the changed objects
 * (a removed one as a record) and, of an object changed in ranges, the
 * ranges and the extents in them; mlock held. */
static void snap_count(struct coil_store *s, bool delta, uint64_t *nobj,
		       uint64_t *next, size_t *names, uint64_t *nrng)
{
	*nobj = *next = *nrng = 0;
	*names = 0;
	if (!delta) {
		for (uint32_t b = 0; b < s->tab_cap; b++) {
			for (struct object *o = s->by_id[b]; o; o = o->id_next) {
				++*nobj;
				*next += o->map.n;
				*names += o->name_len;
			}
		}
		return;
	}
	for (size_t i = 0; i < s->ndirty; i++) {
		struct object *o = objtab_find_id(s, s->dirty_ids[i]);

		++*nobj;
		if (!o)
			continue;
		if (o->dirty == OBJ_DIRTY_ALL) {
			*next += o->map.n;
			*names += o->name_len;
			continue;
		}
		*nrng += obj_dirty_normalize(o);
		for (uint32_t k = 0; k < o->nrange; k++)
			*next += range_exts(o, o->range[k].lo, o->range[k].hi,
					    NULL);
	}
}

/* One object of a snapshot: the whole of it (name and every extent). */
static void snap_whole(struct snap *sn, struct object *o, size_t *name_pos)
{
	struct snap_obj *so = &sn->obj[sn->nobj++];
	struct extmap_iter it;
	const struct ext *e;

	so->kind = FMT_DREC_OBJ;
	so->first_range = so->n_range = 0;
	so->id = o->id;
	so->size = o->size;
	so->name_len = o->name_len;
	so->name_off = *name_pos;
	memcpy(sn->names + *name_pos, o->name, o->name_len);
	*name_pos += o->name_len;
	so->first_ext = sn->next;
	extmap_iter_init(&it, &o->map, 0);
	while ((e = extmap_iter_next(&it))) {
		struct snap_ext *x = &sn->ext[sn->next++];

		x->off = e->off;
		x->len = e->len;
		x->skip = e->skip;
		x->b = e->b;
	}
	so->n_ext = sn->next - so->first_ext;
}

/* A delta's objects: each changed one whole, in its changed ranges, or
 * gone; their changes are then forgotten (the snapshot has them). */
static void snap_changes(struct coil_store *s, struct snap *sn,
			 size_t *name_pos)
{
	for (size_t i = 0; i < s->ndirty; i++) {
		struct object *o = objtab_find_id(s, s->dirty_ids[i]);
		struct snap_obj *so;

		if (o && o->dirty == OBJ_DIRTY_ALL) {
			snap_whole(sn, o, name_pos);
			obj_dirty_clear(o);
			continue;
		}
		so = &sn->obj[sn->nobj++];
		memset(so, 0, sizeof(*so));
		so->id = s->dirty_ids[i];
		if (!o) {
			so->kind = FMT_DREC_GONE;
			continue;
		}
		so->kind = FMT_DREC_RANGES;
		so->size = o->size;
		so->first_range = (uint32_t)sn->nrng;
		for (uint32_t k = 0; k < o->nrange; k++) {
			struct snap_range *r = &sn->rng[sn->nrng++];

			r->lo = o->range[k].lo;
			r->hi = o->range[k].hi;
			r->first_ext = sn->next;
			r->n_ext = range_exts(o, r->lo, r->hi,
					      &sn->ext[sn->next]);
			sn->next += r->n_ext;
		}
		so->n_range = (uint32_t)(sn->nrng - so->first_range);
		obj_dirty_clear(o);
	}
	s->ndirty = 0;
}

/* @delta: take what changed since the last checkpoint, if the store has
 * kept track of it (else, and for !@delta, everything). */
static int snap_take(struct coil_store *s, struct ckpt_mem *m,
		     struct snap *sn, bool delta)
{
	uint64_t nobj = 0, next = 0, nrng = 0;
	size_t names = 0, name_pos = 0;
	uint64_t t0, held;

	if (mem_fit((void **)&m->seg_live, &m->cap_live, s->seg_cap,
		    sizeof(*m->seg_live)) ||
	    mem_fit((void **)&m->seg_state, &m->cap_state, s->seg_cap, 1))
		return -ENOMEM;
	pthread_mutex_lock(&s->mlock);
	for (;;) {
		t0 = coil_now_ns();
		if (s->ck_base_next)
			delta = false;
		snap_count(s, delta, &nobj, &next, &names, &nrng);
		/* mem_fit sizes for at least one element, as here */
		if (COIL_MAX(nobj, 1) <= m->cap_obj &&
		    COIL_MAX(next, 1) <= m->cap_ext &&
		    COIL_MAX(nrng, 1) <= m->cap_rng &&
		    COIL_MAX(names, 1) <= m->cap_names)
			break;
		/* Grow outside the lock, then count again: the metadata
		 * may change meanwhile. */
		pthread_mutex_unlock(&s->mlock);
		if (mem_fit((void **)&m->obj, &m->cap_obj, nobj,
			    sizeof(*m->obj)) ||
		    mem_fit((void **)&m->ext, &m->cap_ext, next,
			    sizeof(*m->ext)) ||
		    mem_fit((void **)&m->rng, &m->cap_rng, nrng,
			    sizeof(*m->rng)) ||
		    mem_fit((void **)&m->names, &m->cap_names, names, 1))
			return -ENOMEM;
		pthread_mutex_lock(&s->mlock);
	}
	sn->delta = delta;
	sn->inl = s->ext_acct.inl;
	sn->obj = m->obj;
	sn->ext = m->ext;
	sn->rng = m->rng;
	sn->names = m->names;
	sn->seg_live = m->seg_live;
	sn->seg_state = m->seg_state;
	sn->nseg = s->nseg;
	for (uint32_t i = 0; i < s->nseg; i++) {
		struct seg *g = &s->segs[i];
		/* A pending segment is free in the checkpoint, and freed
		 * (and discarded) once it is written, unless a record after
		 * the replay point may still reference it: a chunk applied
		 * only in part (its entries apply as their data lands) can
		 * have filled the segment and emptied it again, and replay
		 * from the replay point verifies that record's blobs.  It
		 * stays pending for the next checkpoint then.  (A delta
		 * carries no segment table: recovery derives every
		 * segment's state from the extents.) */
		bool freeable = g->state == SEG_PENDING &&
				g->pending_lin <= s->applied_end_lin;

		sn->seg_state[i] = (g->state == SEG_FREE || freeable) ?
				   SEG_FREE : SEG_SEALED;
		sn->seg_live[i] = g->live;
		g->in_ckpt = freeable;
	}
	if (delta) {
		snap_changes(s, sn, &name_pos);
	} else {
		for (uint32_t b = 0; b < s->tab_cap; b++)
			for (struct object *o = s->by_id[b]; o; o = o->id_next)
				snap_whole(sn, o, &name_pos);
		/* a whole checkpoint has every change */
		objtab_dirty_reset(s);
	}
	snap_fill_blobs(sn->ext, sn->next);
	sn->lin = s->applied_end_lin;
	sn->next_seq = s->applied_next_seq;
	sn->next_obj_id = s->next_obj_id;
	held = coil_now_ns() - t0;
	pthread_mutex_unlock(&s->mlock);
	atomic_store(&s->st.ckpt_snap_ns_last, held);
	stat_max(&s->st.ckpt_snap_ns_max, held);
	COIL_ASSERT(sn->nobj == nobj && sn->next == next && sn->nrng == nrng);
	return 0;
}

/* An extent's encoded size in a checkpoint. */
static uint64_t ext_bytes(const struct snap_ext *x)
{
	return FMT_EXTENT_FIXED + 8u * x->n_csums +
	       ((x->flags & FMT_BLOB_INLINE) ? x->stored_len : 0);
}

static void put_exts(struct fmt_cursor *c, const struct snap *sn,
		     struct fmt_extent *fe, uint64_t first, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++) {
		ext_to_fmt(&sn->ext[first + k], fe);
		fmt_cursor_put_extent(c, fe);
	}
}

/* Phase 2 of a delta: its payload after the header's FMT_DELTA_HDR bytes,
 * in the checkpoint's write buffer, zero padded to a BLOCK.  @return 0,
 * -ENOMEM, -EIO. */
static int delta_encode(struct ckpt_mem *m, const struct snap *sn,
			struct fmt_extent *fe, uint8_t **bufp,
			uint64_t *payloadp)
{
	uint64_t payload = 0, total;
	struct fmt_cursor c;
	uint8_t *buf;
	int rc = 0;

	for (uint64_t i = 0; i < sn->nobj; i++) {
		const struct snap_obj *so = &sn->obj[i];

		if (so->kind == FMT_DREC_GONE)
			payload += FMT_DREC_MIN;
		else if (so->kind == FMT_DREC_OBJ)
			payload += FMT_CKPT_OBJ_MIN + so->name_len;
		else
			payload += FMT_DREC_RANGES_MIN +
				   (uint64_t)so->n_range * FMT_DRANGE_SIZE;
	}
	for (uint64_t i = 0; i < sn->next; i++)
		payload += ext_bytes(&sn->ext[i]);
	*payloadp = payload;
	total = COIL_ALIGN_UP(FMT_DELTA_HDR + payload, FMT_BLOCK);
	buf = ckpt_buf(m, total);
	if (!buf)
		return -ENOMEM;
	*bufp = buf;
	memset(buf + FMT_DELTA_HDR + payload, 0,
	       total - FMT_DELTA_HDR - payload);
	fmt_cursor_init(&c, buf + FMT_DELTA_HDR, payload);
	for (uint64_t i = 0; i < sn->nobj && rc == 0; i++) {
		const struct snap_obj *so = &sn->obj[i];

		switch (so->kind) {
		case FMT_DREC_GONE:
			fmt_delta_put_gone(&c, so->id);
			break;
		case FMT_DREC_OBJ:
			fmt_delta_put_obj(&c, so->id, so->size,
					  sn->names + so->name_off,
					  so->name_len, (uint32_t)so->n_ext);
			put_exts(&c, sn, fe, so->first_ext, so->n_ext);
			break;
		default:
			fmt_delta_put_ranges(&c, so->id, so->size,
					     so->n_range);
			for (uint32_t k = 0; k < so->n_range; k++) {
				const struct snap_range *r =
					&sn->rng[so->first_range + k];

				fmt_delta_put_range(&c, r->lo, r->hi,
						    (uint32_t)r->n_ext);
				put_exts(&c, sn, fe, r->first_ext, r->n_ext);
			}
			break;
		}
		rc = c.err;
	}
	if (rc == 0 && c.pos != payload)
		rc = -EIO;
	return rc;
}

/* Phase 2 of a base: the payload's size (the write is reserved and
 * checked against the area before any of it is encoded). */
static uint64_t ckpt_payload_size(const struct snap *sn)
{
	uint64_t payload = (uint64_t)sn->nseg * FMT_CKPT_SEG_SIZE;

	for (uint64_t i = 0; i < sn->nobj; i++)
		payload += FMT_CKPT_OBJ_MIN - 1 + sn->obj[i].name_len;
	for (uint64_t i = 0; i < sn->next; i++)
		payload += ext_bytes(&sn->ext[i]);
	return payload;
}

/* A base's payload is encoded into a piece buffer and written as it
 * fills, not into one buffer of its whole size: that buffer (56 MB for
 * 10^6 extents) was held between checkpoints, and faulted in anew by each
 * process's first checkpoint (on the machines coil is measured on, ten
 * times the cost of writing it).  Once a piece is encoded, its whole
 * BLOCKs are written; CKPT_SLACK after the piece holds the largest item
 * (an inline extent) that starts before its end. */
#define CKPT_SLACK COIL_ALIGN_UP(FMT_EXTENT_INLINE_MAX, FMT_BLOCK)
uint32_t ckpt_write_piece = 4u << 20;

struct pout {
	struct coil_store *s;
	uint8_t *buf;               /* ckpt_write_piece + CKPT_SLACK */
	uint64_t dev_off;           /* where buf[0] goes */
	uint64_t written;           /* payload bytes written so far */
	struct fmt_csum_stream *h;  /* over them */
	struct fmt_cursor c;        /* over buf: pos bytes not written yet */
};

/* Room for @n (<= CKPT_SLACK) more bytes at the cursor: once a piece is
 * encoded, write its whole BLOCKs and keep the rest in front.  @return 0
 * or the write's -errno. */
static int pout_room(struct pout *o, size_t n)
{
	size_t whole = o->c.pos / FMT_BLOCK * FMT_BLOCK;
	int rc;

	COIL_ASSERT(n <= CKPT_SLACK);
	if (o->c.pos < ckpt_write_piece || o->c.err)
		return 0;
	rc = store_io_big(o->s, URING_OP_WRITE, o->buf, whole, o->dev_off);
	if (rc < 0)
		return rc;
	fmt_csum_stream_add(o->h, o->buf, whole);
	o->dev_off += whole;
	o->written += whole;
	memmove(o->buf, o->buf + whole, o->c.pos - whole);
	o->c.pos -= whole;
	return 0;
}

/* Encode the snapshot's @payload bytes of base payload and write them at
 * @off (the BLOCK after the header's), zero padded to a BLOCK; *@csum
 * their checksum.  @return 0, -EIO (not the size counted), or -errno. */
static int base_stream(struct coil_store *s, const struct snap *sn,
		       struct fmt_extent *fe, struct pout *o, uint64_t off,
		       uint64_t payload, uint64_t *csum)
{
	uint64_t tail;
	int rc = 0;

	o->s = s;
	o->dev_off = off;
	o->written = 0;
	fmt_csum_stream_reset(o->h);
	fmt_cursor_init(&o->c, o->buf, ckpt_write_piece + CKPT_SLACK);
	/* the cursor always has room (pout_room); its error, if any, is a
	 * payload that does not encode as counted */
	for (uint32_t i = 0; i < sn->nseg && rc == 0; i++) {
		rc = pout_room(o, FMT_CKPT_SEG_SIZE);
		fmt_ckpt_put_seg(&o->c, sn->seg_live[i], sn->seg_state[i]);
	}
	for (uint64_t i = 0; i < sn->nobj && rc == 0 && !o->c.err; i++) {
		const struct snap_obj *so = &sn->obj[i];

		rc = pout_room(o, FMT_CKPT_OBJ_MAX);
		fmt_ckpt_put_obj(&o->c, so->id, so->size,
				 sn->names + so->name_off, so->name_len,
				 (uint32_t)so->n_ext);
		for (uint64_t k = 0; k < so->n_ext && rc == 0; k++) {
			const struct snap_ext *x = &sn->ext[so->first_ext + k];

			rc = pout_room(o, ext_bytes(x));
			ext_to_fmt(x, fe);
			fmt_cursor_put_extent(&o->c, fe);
		}
	}
	if (rc < 0)
		return rc;
	if (o->c.err || o->written + o->c.pos != payload)
		return -EIO;
	fmt_csum_stream_add(o->h, o->buf, o->c.pos);
	tail = COIL_ALIGN_UP(o->c.pos, FMT_BLOCK);
	memset(o->buf + o->c.pos, 0, tail - o->c.pos);
	if (tail) {
		rc = store_io_big(s, URING_OP_WRITE, o->buf, tail, o->dev_off);
		if (rc < 0)
			return rc;
	}
	*csum = fmt_csum_stream_value(o->h);
	return 0;
}

/* A mirror write of @len bytes ended with @rc: counted, or the mirror
 * given up until the next base. */
static void mirror_end(struct coil_store *s, int rc, uint64_t len)
{
	if (rc < 0) {
		s->ck_mirror = false;
		return;
	}
	stat_add(&s->st.ckpt_mirror_bytes, len);
	stat_add(&s->st.ckpt_bytes, len);
}

/* Write @len bytes of @buf at @off of the mirror area (the one the
 * superblock does not name) too.  Best effort: the checkpoint does not
 * depend on it; a failure only ends the mirror until the next base. */
static void mirror_write(struct coil_store *s, const uint8_t *buf,
			 uint64_t len, uint64_t off)
{
	uint64_t at = s->sb.ckpt_off[s->sb.ckpt_slot ? 0 : 1] + off;
	int rc = 0;

	if (!s->ck_mirror)
		return;
	if (s->grows)
		rc = reserve_range(s, at, len);
	if (rc == 0)
		rc = store_io_big(s, URING_OP_WRITE, (void *)buf, len, at);
	mirror_end(s, rc, len);
}

/* Write the base (@hdr, its header block, then the payload from the
 * snapshot again) into the mirror area too.  Best effort, as
 * mirror_write. */
static void mirror_base(struct coil_store *s, const struct snap *sn,
			struct fmt_extent *fe, struct pout *o,
			const uint8_t *hdr, uint64_t payload, uint64_t csum)
{
	uint64_t at = s->sb.ckpt_off[s->sb.ckpt_slot ? 0 : 1];
	uint64_t len = FMT_BLOCK + COIL_ALIGN_UP(payload, FMT_BLOCK), again;
	int rc = 0;

	if (s->grows)
		rc = reserve_range(s, at, len);
	if (rc == 0)
		rc = base_stream(s, sn, fe, o, at + FMT_BLOCK, payload, &again);
	if (rc == 0 && again != csum)
		rc = -EIO;
	if (rc == 0)
		rc = store_io_sync(s, URING_OP_WRITE, (void *)hdr, FMT_BLOCK, at);
	if (rc == 0)
		rc = store_io_sync(s, URING_OP_FSYNC, NULL, 0, 0);
	mirror_end(s, rc, len);
}

/* Phase 3: the payload, streamed from the snapshot into the area the
 * superblock does not name, then its header, fdatasync, then the
 * superblocks.  From here the checkpoint is durable.  Then the same bytes
 * into the area the old base was in: the new base's mirror (the old base
 * is not needed once the superblocks name the new). */
static int ckpt_commit(struct coil_store *s, struct ckpt_mem *m,
		       const struct snap *sn,
		       struct fmt_extent *fe, uint64_t payload,
		       const struct fmt_ckpt *hin, bool clean)
{
	struct fmt_ckpt h = *hin;
	struct pout o = { 0 };
	uint8_t *hdr = NULL;
	uint32_t slot;
	int rc;

	if (FMT_BLOCK + payload > s->sb.ckpt_len)
		return -ENOSPC;
	o.buf = ckpt_buf(m, ckpt_write_piece + CKPT_SLACK);
	o.h = fmt_csum_stream_new();
	hdr = bufpool_get(&s->bp, FMT_BLOCK);
	rc = -ENOMEM;
	if (!o.buf || !o.h || !hdr)
		goto out;
	h.store_id = s->store_id;
	h.seq = s->sb.ckpt_seq + 1;
	h.payload_len = payload;
	h.n_dicts = 0;
	slot = s->sb.ckpt_slot == 0 ? 1 : 0;
	/* A growing store's checkpoint areas are holes until written: take
	 * the blocks first, so a full file system fails the checkpoint
	 * cleanly (-ENOSPC, retried later) instead of a write in the middle
	 * of it (fallocate of allocated blocks is free). */
	if (s->grows) {
		rc = reserve_range(s, s->sb.ckpt_off[slot],
				FMT_BLOCK + COIL_ALIGN_UP(payload, FMT_BLOCK));
		if (rc < 0)
			goto out;
	}
	/* the area about to be written held the mirror */
	s->ck_mirror = false;
	rc = base_stream(s, sn, fe, &o, s->sb.ckpt_off[slot] + FMT_BLOCK,
			 payload, &h.payload_csum);
	if (rc == 0 && fmt_ckpt_encode(&h, hdr, FMT_BLOCK) < 0)
		rc = -EIO;
	if (rc == 0)
		rc = store_io_sync(s, URING_OP_WRITE, hdr, FMT_BLOCK,
				   s->sb.ckpt_off[slot]);
	if (rc == 0)
		rc = store_io_sync(s, URING_OP_FSYNC, NULL, 0, 0);
	if (rc < 0)
		goto out;
	s->sb.ckpt_slot = slot;
	s->sb.ckpt_seq = h.seq;
	s->sb.ckpt_bytes = FMT_BLOCK + payload;
	s->sb.ckpt_csum = fmt_ckpt_block_csum(hdr);
	s->sb.replay_off = h.replay_off;
	s->sb.replay_seq = h.replay_seq;
	/* a new base has no deltas yet; a binary that knows no deltas may
	 * read the store again */
	s->sb.delta_bytes = s->sb.delta_csum = 0;
	s->sb.delta_count = 0;
	s->sb.incompat &= ~FMT_INCOMPAT_CKPT_DELTA;
	rc = super_write(s, clean);
	if (rc < 0)
		goto out;
	s->ck_mirror = true;
	mirror_base(s, sn, fe, &o, hdr, payload, h.payload_csum);
out:
	if (hdr)
		bufpool_put(&s->bp, hdr);
	if (o.h)
		fmt_csum_stream_free(o.h);
	return rc;
}

/* Deltas since a base may add up to the base's size, or this much for a
 * small one, before the next checkpoint is a whole one: the bytes written
 * for whole checkpoints are then at most those written for deltas, so a
 * checkpoint costs what changed, amortized, and loading one reads at most
 * twice the metadata. */
#define CKPT_DELTA_MIN (1ull << 20)

/* The byte after the base (its last BLOCK) in its area, where the first
 * delta goes. */
static uint64_t base_end(const struct coil_store *s)
{
	return COIL_ALIGN_UP(s->sb.ckpt_bytes, FMT_BLOCK);
}

/* Whether a delta of @len bytes (BLOCK multiple) may follow the chain. */
static bool delta_fits(const struct coil_store *s, uint64_t len)
{
	uint64_t chain = s->sb.delta_bytes + len;

	return s->sb.ckpt_slot != FMT_CKPT_SLOT_NONE &&
	       base_end(s) + chain <= s->sb.ckpt_len &&
	       chain <= COIL_MAX(s->sb.ckpt_bytes, CKPT_DELTA_MIN);
}

/* What a whole checkpoint at close must give back at least: a small
 * store's chain of a few blocks stays (a 1 MiB floor left a page store's
 * 2.2 MB base and chain, against 1.1 MB whole, in place). */
#define CKPT_CLOSE_WHOLE_MIN (256ull << 10)

/* Whether the close's checkpoint is whole rather than a delta.  A growing
 * file store gives its areas' bytes past the base and chain back at close
 * (ckpt_give_back), so a whole checkpoint then leaves each area holding
 * just the new base.  Worth it when the base and chain take at least a
 * quarter more than that base will (the packer has emptied memory by
 * then, so a base written while small writes were in memory is often
 * several times the metadata; a long chain is the other case): at least
 * a quarter of the bytes it writes (twice: the mirror) come back, and at
 * least CKPT_CLOSE_WHOLE_MIN.  A close after a few changes writes its
 * small delta, and a small store keeps its chain. */
static bool whole_at_close(struct coil_store *s)
{
	uint64_t whole;

	if (!s->grows || s->filled || s->sb.ckpt_slot == FMT_CKPT_SLOT_NONE)
		return false;
	pthread_mutex_lock(&s->mlock);
	whole = COIL_ALIGN_UP(FMT_BLOCK + ckpt_payload_now(s), FMT_BLOCK);
	pthread_mutex_unlock(&s->mlock);
	return base_end(s) + s->sb.delta_bytes >=
	       whole + COIL_MAX(whole / 4, CKPT_CLOSE_WHOLE_MIN);
}

uint64_t ckpt_give_back(struct coil_store *s)
{
	uint64_t keep = base_end(s) + s->sb.delta_bytes, given = 0;

	if (s->sb.ckpt_slot == FMT_CKPT_SLOT_NONE || keep >= s->sb.ckpt_len)
		return 0;
	COIL_ASSERT(keep % FMT_BLOCK == 0);
	/* Both areas: the named one and the mirror hold the same base and
	 * chain at the same offsets (a mirror write that failed leaves its
	 * area without a copy the loader accepts; its bytes past the chain
	 * are no more use there).  A later delta or base allocates its
	 * blocks again before it writes (reserve_range). */
	for (uint32_t i = 0; i < 2; i++)
		if (store_punch(s, s->sb.ckpt_off[i] + keep,
				s->sb.ckpt_len - keep) == 0)
			given += s->sb.ckpt_len - keep;
	return given;
}

/* Phase 3 of a delta: its header, the write after the chain in the
 * current area (a place no superblock names yet), fdatasync, then the
 * superblocks, which name it.  @return the bytes written or -errno. */
static int64_t delta_commit(struct coil_store *s, uint8_t *buf,
			    uint64_t payload, const struct fmt_ckpt_delta *hin,
			    bool clean)
{
	struct fmt_ckpt_delta h = *hin;
	uint64_t len = COIL_ALIGN_UP(FMT_DELTA_HDR + payload, FMT_BLOCK);
	uint64_t off;
	int rc;

	if (!delta_fits(s, len))
		return -ENOSPC;
	h.store_id = s->store_id;
	h.base_seq = s->sb.ckpt_seq;
	h.index = s->sb.delta_count + 1;
	h.prev_csum = s->sb.delta_count ? s->sb.delta_csum : s->sb.ckpt_csum;
	h.payload_len = payload;
	h.payload_csum = fmt_csum(buf + FMT_DELTA_HDR, payload);
	rc = fmt_delta_encode(&h, buf, FMT_DELTA_HDR);
	if (rc < 0)
		return rc;
	off = s->sb.ckpt_off[s->sb.ckpt_slot] + base_end(s) +
	      s->sb.delta_bytes;
	if (s->grows) {
		rc = reserve_range(s, off, len);
		if (rc < 0)
			return rc;
	}
	rc = store_io_big(s, URING_OP_WRITE, buf, len, off);
	if (rc == 0)
		mirror_write(s, buf, len, base_end(s) + s->sb.delta_bytes);
	if (rc == 0)
		rc = store_io_sync(s, URING_OP_FSYNC, NULL, 0, 0);
	if (rc < 0)
		return rc;
	s->sb.delta_bytes += len;
	s->sb.delta_count++;
	s->sb.delta_csum = coil_get_le64(buf + FMT_DELTA_CSUM_OFF);
	s->sb.incompat |= FMT_INCOMPAT_CKPT_DELTA;
	if (s->sb.version == FMT_SUPER_VERSION_V1)
		s->sb.version = FMT_SUPER_VERSION;
	s->sb.replay_off = h.replay_off;
	s->sb.replay_seq = h.replay_seq;
	rc = super_write(s, clean);
	return rc < 0 ? rc : (int64_t)len;
}

/* Phase 4: what the durable checkpoint releases: the journal before its
 * snapshot point, and the segments PENDING at the snapshot that no reader
 * is in (discarded first, so no discard lands after a reuse). */
static void ckpt_release(struct coil_store *s, uint64_t snap_lin)
{
	pthread_mutex_lock(&s->jlock);
	if (snap_lin > s->j_tail_lin)
		s->j_tail_lin = snap_lin;
	pthread_mutex_unlock(&s->jlock);
	seg_discard_freed(s); /* TRIM what is freed below, before reuse */
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++) {
		struct seg *g = &s->segs[i];
		if (g->in_ckpt && g->state == SEG_PENDING &&
		    atomic_load(&g->readers) == 0) {
			COIL_ASSERT(g->live == 0);
			g->state = SEG_FREE;
			s->free_segs++;
		}
		g->in_ckpt = 0;
	}
	COIL_ASSERT(s->free_segs <= s->nseg);
	pthread_mutex_unlock(&s->mlock);
}

int ckpt_write(struct coil_store *s, bool clean)
{
	uint64_t t0 = coil_now_ns(), payload = 0, snap_lin, inl = 0;
	struct fmt_extent *fe = NULL;
	struct ckpt_mem m = { 0 };
	struct snap sn = { 0 };
	bool delta;
	int64_t wrote = 0;
	uint8_t *buf = NULL;
	int rc = 0;

	if (s->rdonly)
		return -EROFS;
	fe = malloc(sizeof(*fe));
	if (!fe)
		return -ENOMEM;
	pthread_mutex_lock(&s->ckpt_mu);
	/* A delta when the store has a base to follow; a whole checkpoint
	 * when it must (snap_take) or when the delta does not fit after
	 * the chain (then the snapshot is taken again, whole). */
	delta = s->sb.ckpt_slot != FMT_CKPT_SLOT_NONE &&
		!(clean && whole_at_close(s));
	for (;;) {
		/* Phase 1, under mlock: copy the metadata (extents with a
		 * copy of their blob's descriptor, 64 bytes each) at the
		 * applied point.  Encoding happens after the lock is
		 * released, so writers' apply steps stall only for the copy,
		 * not for building the payload. */
		rc = snap_take(s, &m, &sn, delta);
		snap_lin = sn.lin;
		inl = sn.inl;
		delta = sn.delta;
		if (rc < 0)
			break;
		if (delta) {
			struct fmt_ckpt_delta h = {
				.replay_off = sn.lin % s->sb.journal_len,
				.replay_seq = sn.next_seq,
				.next_obj_id = sn.next_obj_id,
				.n_records = (uint32_t)sn.nobj,
				.segment_count = sn.nseg,
			};

			rc = sn.nobj > UINT32_MAX ? -ENOSPC :
			     delta_encode(&m, &sn, fe, &buf, &payload);
			snap_release(&sn);
			if (rc == 0)
				wrote = delta_commit(s, buf, payload, &h, clean);
			if (rc == 0 && wrote == -ENOSPC) {
				/* no room after the chain: write it whole */
				pthread_mutex_lock(&s->mlock);
				s->ck_base_next = true;
				pthread_mutex_unlock(&s->mlock);
				delta = false;
				continue;
			}
			if (rc == 0 && wrote < 0)
				rc = (int)wrote;
		} else {
			struct fmt_ckpt h = {
				.replay_off = sn.lin % s->sb.journal_len,
				.replay_seq = sn.next_seq,
				.next_obj_id = sn.next_obj_id,
				.n_objects = sn.nobj,
				.segment_count = sn.nseg,
			};

			payload = ckpt_payload_size(&sn);
			rc = ckpt_commit(s, &m, &sn, fe, payload, &h, clean);
			snap_release(&sn);
			wrote = FMT_BLOCK + (int64_t)payload;
		}
		break;
	}
	free(fe);
	if (rc == 0) {
		/* Feedback loop, this end: the released journal space is
		 * what a full journal waits for (journal_kick follows). */
		ckpt_release(s, snap_lin);
		stat_add(&s->st.ckpts, 1);
		stat_add(&s->st.ckpt_bytes, (uint64_t)wrote);
		if (delta) {
			stat_add(&s->st.ckpt_deltas, 1);
			stat_add(&s->st.ckpt_delta_bytes, (uint64_t)wrote);
		} else {
			/* What a whole checkpoint costs is what the
			 * journal's share follows (grow.c). */
			atomic_store(&s->st.ckpt_last_bytes, (uint64_t)wrote);
			atomic_store(&s->st.ckpt_last_meta,
				     (uint64_t)wrote -
				     COIL_MIN(inl, (uint64_t)wrote));
		}
		atomic_store(&s->st.ckpt_ns_last, coil_now_ns() - t0);
	} else {
		/* The changes the snapshot took are not on disk: the next
		 * checkpoint writes everything. */
		pthread_mutex_lock(&s->mlock);
		s->ck_base_next = true;
		pthread_mutex_unlock(&s->mlock);
	}
	ckpt_mem_release(&m);
	pthread_mutex_unlock(&s->ckpt_mu);
	if (rc < 0)
		stat_add(&s->st.ckpt_failures, 1);
	return rc;
}

/* ---- the checkpoint thread ---------------------------------------------- */

void ckpt_trigger(struct coil_store *s)
{
	pthread_mutex_lock(&s->ck_mu);
	s->ck_want = true;
	pthread_cond_signal(&s->ck_cond);
	pthread_mutex_unlock(&s->ck_mu);
}

int ckpt_wait(struct coil_store *s)
{
	uint64_t target;
	int rc = 0;

	pthread_mutex_lock(&s->ck_mu);
	if (!s->ck_started || s->ck_stop) {
		pthread_mutex_unlock(&s->ck_mu);
		return -ESHUTDOWN;
	}
	/* One running now may have taken its snapshot already. */
	target = s->ck_runs + (s->ck_running ? 2 : 1);
	s->ck_want = true;
	pthread_cond_signal(&s->ck_cond);
	while (s->ck_runs < target && !s->ck_stop)
		pthread_cond_wait(&s->ck_done_cond, &s->ck_mu);
	if (s->ck_runs < target)
		rc = -ESHUTDOWN;
	pthread_mutex_unlock(&s->ck_mu);
	return rc;
}

/* The journal bytes written a second since the last checkpoint this
 * thread wrote (*@bytes, *@ns: the counters then), for the journal's
 * share (grow.c).  Over less than a millisecond it keeps the last. */
static void journal_rate_measure(struct coil_store *s, uint64_t *bytes,
				 uint64_t *ns)
{
	uint64_t b = atomic_load(&s->st.chunk_bytes), t = coil_now_ns();

	if (*ns && t - *ns >= 1000000 && b >= *bytes)
		atomic_store(&s->j_rate,
			     (b - *bytes) / ((t - *ns) / 1000000) * 1000);
	*bytes = b;
	*ns = t;
}

static void *ckpt_main(void *arg)
{
	struct coil_store *s = arg;
	uint64_t rate_bytes = 0, rate_ns = 0;

	coil_thread_name("ckpt", -1);

	pthread_mutex_lock(&s->ck_mu);
	for (;;) {
		int rc;
		bool waiting;

		while (!s->ck_want && !s->ck_stop)
			pthread_cond_wait(&s->ck_cond, &s->ck_mu);
		if (s->ck_stop)
			break;
		s->ck_want = false;
		s->ck_running = true;
		pthread_mutex_unlock(&s->ck_mu);
		rc = atomic_load(&s->broken) ? -EIO : ckpt_write(s, false);
		/* The journal's share follows what checkpoints cost and how
		 * fast writers fill it (grow.c): a share too small for the
		 * writes makes checkpoints back to back. */
		if (rc == 0)
			journal_rate_measure(s, &rate_bytes, &rate_ns);
		if (rc == 0 && s->grows)
			grow_journal_follow(s);
		pthread_mutex_lock(&s->jlock);
		waiting = s->jwait_space;
		pthread_mutex_unlock(&s->jlock);
		if (rc < 0 && waiting && !atomic_load(&s->broken)) {
			/* The journal is full and cannot be released: fail
			 * what waits rather than hang. */
			s->ck_last_err = rc;
			store_break(s, rc);
		}
		/* Feedback loop (log/journal.c, cycle_start): a full journal
		 * triggered this checkpoint and waits for the space it freed. */
		journal_kick(s);
		pthread_mutex_lock(&s->ck_mu);
		s->ck_running = false;
		s->ck_runs++;
		pthread_cond_broadcast(&s->ck_done_cond);
	}
	s->ck_running = false;
	pthread_cond_broadcast(&s->ck_done_cond);
	pthread_mutex_unlock(&s->ck_mu);
	return NULL;
}

int ckpt_thread_start(struct coil_store *s)
{
	int rc = pthread_create(&s->ck_thread, NULL, ckpt_main, s);

	if (rc)
		return -rc;
	s->ck_started = true;
	return 0;
}

void ckpt_thread_stop(struct coil_store *s)
{
	if (!s->ck_started)
		return;
	pthread_mutex_lock(&s->ck_mu);
	s->ck_stop = true;
	pthread_cond_signal(&s->ck_cond);
	pthread_mutex_unlock(&s->ck_mu);
	pthread_join(s->ck_thread, NULL);
	s->ck_started = false;
}

