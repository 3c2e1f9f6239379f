/* engine/log/recovery.c — recovery at open: newest valid superblock (read
 * by store.c) -> its checkpoint -> replay the journal from the checkpoint's
 * replay point while chunks and records validate and every blob a WRITE
 * references reads back and verifies.  Replay writes nothing; open then
 * takes a checkpoint, so a crash during recovery just recovers again from
 * the same place.
 *
 * Segment live bytes are never trusted from disk: they are recomputed from
 * the extents as they are loaded and replayed, so the accounting after
 * recovery is exact by construction. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/log/recovery.h"
#include "engine/log/salvage.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/dev.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"

/* ---- loading ------------------------------------------------------------ */

/* A blob descriptor from disk must point inside one of the first @nseg
 * segments of the data area. */
static int blob_in_segs(const struct coil_store *s, const struct fmt_blob *b,
			uint32_t nseg)
{
	uint64_t end, idx;

	if (b->dev_off < s->sb.data_off || b->stored_len == 0)
		return -EIO;
	/* No blob of this store is larger than its max_blob: a bigger one
	 * would overrun the read buffers sized by it. */
	if (b->logical_len > s->sb.max_blob || b->stored_len > s->sb.max_blob)
		return -EIO;
	idx = (b->dev_off - s->sb.data_off) / s->sb.segment_size;
	if (idx >= nseg)
		return -EIO;
	end = s->sb.data_off + (idx + 1) * s->sb.segment_size;
	if (b->dev_off + b->stored_len > end)
		return -EIO;
	/* a raw blob starts on a block, unless it is shorter than one
	 * (packed with others: stores with the INLINE feature) */
	if (b->codec == FMT_CODEC_RAW && b->dev_off % FMT_BLOCK &&
	    (b->logical_len >= FMT_BLOCK ||
	     !(s->sb.incompat & FMT_INCOMPAT_INLINE)))
		return -EIO;
	if (b->dict_id >= DICT_MAX)
		return -EIO;
	return 0;
}

static int blob_in_bounds(const struct coil_store *s, const struct fmt_blob *b)
{
	return blob_in_segs(s, b, s->nseg);
}

/* An inline blob (its bytes in the record, checked against its checksums
 * by the decoder) obeys the store's blob size and sits at or after the
 * object's start. */
static int blob_inline_ok(const struct coil_store *s,
			  const struct fmt_extent *fe)
{
	const struct fmt_blob *b = &fe->blob;

	if (!(s->sb.incompat & FMT_INCOMPAT_INLINE) ||
	    b->logical_len > s->sb.max_blob || b->stored_len > s->sb.max_blob ||
	    b->dict_id != 0 || fe->obj_off < fe->blob_skip)
		return -EIO;
	return 0;
}

/* Install @fe in @o's map; @lend: an inline blob keeps pointing at
 * @fe->inl (blobd_new_mem_lent) instead of a copy. */
static int insert_fmt_extent(struct coil_store *s, struct object *o,
			     const struct fmt_extent *fe, bool lend)
{
	bool inl = fe->blob.flags & FMT_BLOB_INLINE;
	struct ext e;

	if (inl ? blob_inline_ok(s, fe) < 0 : blob_in_bounds(s, &fe->blob) < 0)
		return -EIO;
	e.off = fe->obj_off;
	e.len = fe->len;
	e.skip = fe->blob_skip;
	if (!inl)
		e.b = blobd_new(&fe->blob);
	else if (lend)
		e.b = blobd_new_mem_lent(&fe->blob, fe->inl, &s->mem, o->id,
					 fe->obj_off - fe->blob_skip);
	else
		e.b = blobd_new_mem(&fe->blob, fe->inl, &s->mem, o->id,
				    fe->obj_off - fe->blob_skip);
	if (!e.b)
		return -ENOMEM;
	return meta_apply_write(s, o, 0, 0, &e, 1, true);
}

/* ---- a checkpoint's payload, read through a window ---------------------
 *
 * A base is read a piece at a time instead of whole: its payload is as
 * large as the metadata (56 MB for 10^6 extents), and on the machines coil
 * is measured on, memory touched for the first time costs ten times what
 * reading it does (145 ms to fault in 56 MB, 12 ms to read it).  The
 * window keeps the bytes not yet consumed (fewer than WIN_SLACK) in front
 * of each new piece, so the largest item a loader takes, an inline
 * extent, lies whole in the buffer.  A delta is loaded from memory through
 * the same type (win_over: nothing more to read). */
#define WIN_SLACK COIL_ALIGN_UP(FMT_EXTENT_INLINE_MAX, FMT_BLOCK)
uint32_t ckpt_load_piece = 4u << 20;

struct win {
	struct coil_store *s;
	uint8_t *buf;              /* WIN_SLACK + piece, BLOCK aligned */
	uint32_t piece;            /* ckpt_load_piece at win_alloc */
	uint64_t dev_off;          /* the next piece's device offset */
	uint64_t region_left;      /* payload and its padding not read yet */
	uint32_t pieces;           /* read since win_start */
	struct fmt_csum_stream *h; /* over the payload bytes read */
	struct fmt_cursor c;       /* read, not consumed; c.more: the
				      payload bytes not read yet */
};

/* A window over @len bytes already in memory. */
static void win_over(struct win *w, const uint8_t *p, uint64_t len)
{
	*w = (struct win){ 0 };
	fmt_cursor_init_ro(&w->c, p, len);
}

/* The buffer is mapped, not allocated: freed, it leaves the process at
 * once (an allocator keeps a few MiB it freed resident for a while, and
 * open's RSS would count them). */
static int win_alloc(struct win *w, struct coil_store *s)
{
	*w = (struct win){ .s = s, .piece = ckpt_load_piece };
	COIL_ASSERT(w->piece >= FMT_BLOCK && w->piece % FMT_BLOCK == 0);
	w->h = fmt_csum_stream_new();
	if (!w->h)
		return -ENOMEM;
	w->buf = mmap(NULL, WIN_SLACK + w->piece, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->buf == MAP_FAILED) {
		w->buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void win_free(struct win *w)
{
	if (w->h)
		fmt_csum_stream_free(w->h);
	if (w->buf)
		munmap(w->buf, WIN_SLACK + w->piece);
}

/* Read the @plen payload bytes at device offset @off (BLOCK aligned, and
 * padded with zeros to a BLOCK there) from the start. */
static void win_start(struct win *w, uint64_t off, uint64_t plen)
{
	w->dev_off = off;
	w->region_left = COIL_ALIGN_UP(plen, FMT_BLOCK);
	w->pieces = 0;
	fmt_csum_stream_reset(w->h);
	fmt_cursor_init_ro(&w->c, w->buf + WIN_SLACK, 0);
	w->c.more = plen;
}

/* Make the next @n (<= WIN_SLACK) bytes of the payload contiguous at the
 * cursor, or all of it that is left.  @return 0, -EIO (the padding after
 * the payload is not zero, or the read failed), or -ENOMEM. */
static int win_need(struct win *w, size_t n)
{
	while (fmt_cursor_remaining(&w->c) < n && w->region_left &&
	       !w->c.err) {
		size_t t = fmt_cursor_remaining(&w->c);
		uint32_t got = (uint32_t)COIL_MIN(w->region_left,
						  (uint64_t)w->piece);
		uint64_t pb = COIL_MIN((uint64_t)got, w->c.more);
		uint8_t *dst = w->buf + WIN_SLACK;
		int rc;

		COIL_ASSERT(t < WIN_SLACK);
		memmove(dst - t, w->c.p + w->c.pos, t);
		rc = store_io_big(w->s, URING_OP_READ, dst, got, w->dev_off);
		if (rc < 0)
			return rc == -ENOMEM ? rc : -EIO;
		w->dev_off += got;
		w->region_left -= got;
		w->pieces++;
		fmt_csum_stream_add(w->h, dst, pb);
		if (!fmt_all_zero(dst + pb, got - pb))
			return -EIO;
		uint64_t more = w->c.more - pb;
		fmt_cursor_init_ro(&w->c, dst - t, t + pb);
		w->c.more = more;
	}
	return 0;
}

/* After the walk: every byte of the payload was consumed and its checksum
 * is @csum. */
static bool win_done(const struct win *w, uint64_t csum)
{
	return !w->c.err && fmt_cursor_remaining(&w->c) == 0 &&
	       w->c.more == 0 && w->region_left == 0 &&
	       fmt_csum_stream_value(w->h) == csum;
}

/* Walk the payload once more.  One piece held all of it: the bytes are
 * still in the buffer (@return true); else the caller starts again. */
static bool win_rewind(struct win *w, uint64_t plen)
{
	if (w->pieces != 1)
		return false;
	fmt_cursor_init_ro(&w->c, w->buf + WIN_SLACK, plen);
	return true;
}

/* ---- delta checkpoints -------------------------------------------------- */

struct delta_load {
	struct coil_store *s;
	struct fmt_extent *fe;
	/* objects whose name a later object of this delta took (renames
	 * that traded names): each must be renamed or gone by its end */
	uint64_t detached;
};

/* The next @n extents at @w into @o's map. */
static int load_extents(struct coil_store *s, struct object *o,
			struct win *w, struct fmt_extent *fe, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		int rc = win_need(w, FMT_EXTENT_INLINE_MAX);

		if (rc < 0)
			return rc;
		if (fmt_cursor_get_extent(&w->c, fe) < 0)
			return -EIO;
		rc = insert_fmt_extent(s, o, fe, false);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The next object record of a base or a delta, checked: its size within
 * the engine's limit, no NUL in its name.  @return 0 or -EIO. */
static int get_obj(struct fmt_cursor *c, struct fmt_ckpt_obj *co)
{
	if (fmt_ckpt_get_obj(c, co) < 0 || co->size > ENGINE_OBJ_SIZE_MAX ||
	    memchr(co->name, 0, co->name_len))
		return -EIO;
	return 0;
}

/* An object whole, from a delta's FMT_DREC_OBJ record: it replaces one of
 * the same id, and may take the name of another that this delta renames or
 * removes too (@dl counts those). */
static int load_whole_obj(struct coil_store *s, struct win *w,
			  struct fmt_extent *fe, struct delta_load *dl)
{
	struct object *holder;
	struct fmt_ckpt_obj co;
	struct object *o;
	int rc;

	if (get_obj(&w->c, &co) < 0)
		return -EIO;
	o = objtab_find_id(s, co.obj_id);
	if (o) {
		if (o->name_detached)
			dl->detached--;
		meta_apply_remove(s, o);
	}
	holder = objtab_find_name(s, co.name, co.name_len);
	if (holder) {
		objtab_name_detach(s, holder);
		dl->detached++;
	}
	rc = objtab_add(s, co.obj_id, co.name, co.name_len, &o);
	if (rc < 0)
		return rc;
	o->size = co.size;
	return load_extents(s, o, w, fe, co.n_extents);
}

/* An object of a base: checked and added, its name linked later with all
 * the others (objtab_link_names finds a name twice).  With @out NULL, only
 * checked as the format defines it (a base's first walk). */
static int load_base_obj(struct coil_store *s, struct win *w,
			 struct fmt_extent *fe, struct name_slot *out)
{
	struct fmt_ckpt_obj co;
	struct object *o;
	int rc = win_need(w, FMT_CKPT_OBJ_MAX);

	if (rc < 0)
		return rc;
	if (!out) {
		if (fmt_ckpt_get_obj(&w->c, &co) < 0)
			return -EIO;
		for (uint32_t k = 0; k < co.n_extents; k++)
			if ((rc = win_need(w, FMT_EXTENT_INLINE_MAX)) < 0 ||
			    (rc = fmt_cursor_get_extent(&w->c, fe)) < 0)
				return rc;
		return 0;
	}
	if (get_obj(&w->c, &co) < 0 || objtab_find_id(s, co.obj_id))
		return -EIO;
	rc = objtab_add_unnamed(s, co.obj_id, co.name, co.name_len, &o);
	if (rc < 0)
		return rc;
	*out = (struct name_slot){ .h = o->name_h, .o = o };
	o->size = co.size;
	return load_extents(s, o, w, fe, co.n_extents);
}

/* One changed range of @o: punch it, insert what maps it now. */
static int load_range(struct coil_store *s, struct object *o,
		      struct win *w, struct fmt_extent *fe)
{
	uint64_t lo, hi;
	uint32_t n;
	int rc;

	if (fmt_delta_get_range(&w->c, &lo, &hi, &n) < 0)
		return -EIO;
	if (lo < hi) {
		rc = meta_apply_punch(s, o, lo, hi);
		if (rc < 0)
			return rc;
	}
	return load_extents(s, o, w, fe, n);
}

/* Apply one verified delta (fmt_delta_chain_walk's callback). */
static int delta_apply(void *arg, const struct fmt_ckpt_delta *h,
		       const uint8_t *payload)
{
	struct delta_load *dl = arg;
	struct coil_store *s = dl->s;
	struct win w;
	struct object *o;
	uint64_t id, size;
	uint32_t nr;
	int rc;

	win_over(&w, payload, h->payload_len);
	for (uint32_t i = 0; i < h->n_records; i++) {
		switch (fmt_delta_get_kind(&w.c)) {
		case FMT_DREC_OBJ:
			rc = load_whole_obj(s, &w, dl->fe, dl);
			if (rc < 0)
				return rc;
			break;
		case FMT_DREC_RANGES:
			if (fmt_delta_get_ranges(&w.c, &id, &size, &nr) < 0)
				return -EIO;
			o = objtab_find_id(s, id);
			if (!o || size > ENGINE_OBJ_SIZE_MAX)
				return -EIO;
			for (uint32_t k = 0; k < nr; k++) {
				rc = load_range(s, o, &w, dl->fe);
				if (rc < 0)
					return rc;
			}
			o->size = size;
			break;
		case FMT_DREC_GONE:
			if (fmt_delta_get_gone(&w.c, &id) < 0)
				return -EIO;
			/* an object created and removed between two
			 * checkpoints was never in one */
			o = objtab_find_id(s, id);
			if (o && o->name_detached)
				dl->detached--;
			if (o)
				meta_apply_remove(s, o);
			break;
		default:
			return -EIO;
		}
	}
	if (fmt_cursor_remaining(&w.c) != 0 || dl->detached)
		return -EIO;
	s->applied_end_lin = h->replay_off;
	s->applied_next_seq = h->replay_seq;
	if (h->next_obj_id > s->next_obj_id)
		s->next_obj_id = h->next_obj_id;
	return 0;
}

/* Walk a base's payload at @w: the segment table, then every object.
 * With @loaded NULL the walk checks the payload as the format defines it,
 * and its checksum; else it loads the objects too, each name into
 * @loaded for objtab_link_names. */
static int base_walk(struct coil_store *s, struct win *w,
		     const struct fmt_ckpt *h, struct fmt_extent *fe,
		     struct name_slot *loaded)
{
	for (uint32_t i = 0; i < h->segment_count; i++) {
		uint64_t live;
		uint8_t st;
		int rc = win_need(w, FMT_CKPT_SEG_SIZE);

		if (rc < 0)
			return rc;
		if (fmt_ckpt_get_seg(&w->c, &live, &st) < 0)
			return -EIO;
		if (!loaded)
			continue;
		/* A growing store may have grown after this checkpoint:
		 * the segments it does not list were added empty. */
		s->segs[i].state = st == SEG_FREE ? SEG_FREE : SEG_SEALED;
		s->segs[i].live = 0; /* recomputed from the extents */
		s->segs[i].unopt = 0;
	}
	for (uint64_t i = 0; i < h->n_objects; i++) {
		int rc = load_base_obj(s, w, fe, loaded ? &loaded[i] : NULL);

		if (rc < 0)
			return rc;
	}
	/* n_dicts is 0 (base_read) */
	return win_done(w, h->payload_csum) ? 0 : -EIO;
}

/* Read and verify the base the superblock names from area @slot (where it
 * is, or its mirror): its header BLOCK into @blk, decoded into *@h, then
 * its payload through @w, every record checked and the checksum
 * compared before anything is loaded.  @return 0, -EIO (does not verify),
 * or -errno. */
static int base_read(struct coil_store *s, uint32_t slot, uint8_t *blk,
		     struct win *w, struct fmt_extent *fe, struct fmt_ckpt *h)
{
	int rc = store_io_sync(s, URING_OP_READ, blk, FMT_BLOCK,
			       s->sb.ckpt_off[slot]);

	if (rc < 0)
		return rc == -ENOMEM ? rc : -EIO;
	if (fmt_ckpt_block_csum(blk) != s->sb.ckpt_csum ||
	    fmt_ckpt_decode(h, blk, FMT_BLOCK) < 0)
		return -EIO;
	if (h->store_id != s->store_id || h->seq != s->sb.ckpt_seq ||
	    FMT_BLOCK + h->payload_len != s->sb.ckpt_bytes ||
	    h->segment_count > s->nseg || h->n_dicts != 0)
		return -EIO;
	/* the padding to the block is zero too (win_need): no byte goes
	 * unchecked */
	win_start(w, s->sb.ckpt_off[slot] + FMT_BLOCK, h->payload_len);
	rc = base_walk(s, w, h, fe, NULL);
	return rc == -ENOMEM ? rc : rc < 0 ? -EIO : 0;
}

/* Does the other area hold a copy of the base just read from the named
 * one (its header block, which carries the payload's checksum)?  Then
 * checkpoints from here keep it a mirror. */
static bool mirror_matches(struct coil_store *s, const uint8_t *base)
{
	uint8_t *blk = NULL;
	bool same;

	if (posix_memalign((void **)&blk, 4096, FMT_BLOCK))
		return false;
	same = store_io_sync(s, URING_OP_READ, blk, FMT_BLOCK,
			     s->sb.ckpt_off[s->sb.ckpt_slot ? 0 : 1]) == 0 &&
	       !memcmp(blk, base, FMT_BLOCK);
	free(blk);
	return same;
}

/* The chain in @buf does not verify whole: take, delta by delta, the
 * mirror's copy where the first one stops verifying, for as long as that
 * gets further.  @return whether the chain verifies now. */
static bool deltas_from_mirror(struct coil_store *s, const struct fmt_super *sb,
			       uint8_t *buf, uint64_t off, bool *used)
{
	uint8_t *mir = NULL;
	uint64_t end, last, prev_end = UINT64_MAX;
	bool ok = false;
	int n;

	if (posix_memalign((void **)&mir, 4096, sb->delta_bytes))
		return false;
	if (store_io_big(s, URING_OP_READ, mir, sb->delta_bytes,
			 sb->ckpt_off[sb->ckpt_slot ? 0 : 1] + off) < 0)
		goto out;
	/* Bounded: each pass verifies at least one delta more. */
	for (;;) {
		struct fmt_ckpt_delta h;
		uint64_t len;

		n = fmt_delta_chain_walk(sb, buf, sb->delta_bytes, NULL, NULL,
					 &end, &last);
		if (n == (int)sb->delta_count && end == sb->delta_bytes &&
		    last == sb->delta_csum) {
			ok = true;
			break;
		}
		if (end == prev_end || end >= sb->delta_bytes ||
		    fmt_delta_decode(&h, mir + end, sb->delta_bytes - end) < 0)
			break;
		len = COIL_ALIGN_UP(FMT_DELTA_HDR + (uint64_t)h.payload_len,
				    FMT_BLOCK);
		if (len > sb->delta_bytes - end)
			break;
		memcpy(buf + end, mir + end, len);
		stat_add(&s->st.ckpt_mirror_reads, 1);
		*used = true;
		prev_end = end;
	}
out:
	free(mir);
	return ok;
}

/* The deltas after the base just loaded.  A chain that does not verify
 * whole fails the open (-EIO), unless this is a salvage open: then the
 * deltas before the first bad one are applied and replay starts after the
 * last of them. */
static int ckpt_load_deltas(struct coil_store *s, struct fmt_extent *fe,
			    bool *mirror_used)
{
	struct fmt_super sb = s->sb;
	struct delta_load dl = { s, fe, 0 };
	uint64_t end, last;
	uint8_t *buf = NULL;
	int rc, n;

	if (!(sb.incompat & FMT_INCOMPAT_CKPT_DELTA))
		return 0;
	if (posix_memalign((void **)&buf, 4096, sb.delta_bytes))
		return -ENOMEM;
	rc = store_io_big(s, URING_OP_READ, buf, sb.delta_bytes,
			  sb.ckpt_off[sb.ckpt_slot] +
			  COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK));
	if (rc < 0)
		goto out;
	/* the whole chain verifies before any of it is applied */
	n = fmt_delta_chain_walk(&sb, buf, sb.delta_bytes, NULL, NULL, &end,
				 &last);
	if ((n != (int)sb.delta_count || end != sb.delta_bytes ||
	     last != sb.delta_csum) &&
	    deltas_from_mirror(s, &sb, buf,
			       COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK),
			       mirror_used))
		n = fmt_delta_chain_walk(&sb, buf, sb.delta_bytes, NULL, NULL,
					 &end, &last);
	if (n != (int)sb.delta_count || end != sb.delta_bytes ||
	    last != sb.delta_csum) {
		rc = -EIO;
		if (!s->salvage)
			goto out;
		salvage_note(s, "delta checkpoint %d of %u after checkpoint "
			     "(sequence %" PRIu64 ") does not verify: the %d "
			     "before it were used", n + 1, sb.delta_count,
			     sb.ckpt_seq, n);
		sb.delta_count = (uint32_t)n;
	}
	rc = fmt_delta_chain_walk(&sb, buf, end, delta_apply, &dl, &end, &last);
	if (rc >= 0)
		rc = rc == (int)sb.delta_count ? 0 : -EIO;
	if (rc == 0 && sb.delta_count != s->sb.delta_count) {
		/* salvage: replay from the last delta applied */
		s->sb.replay_off = s->applied_end_lin;
		s->sb.replay_seq = s->applied_next_seq;
	}
out:
	free(buf);
	return rc;
}

int ckpt_load(struct coil_store *s)
{
	bool mirror_used = false;
	uint8_t *blk = NULL;
	struct name_slot *loaded = NULL;
	struct fmt_extent *fe = NULL;
	struct fmt_ckpt h;
	struct win w = { 0 };
	uint32_t slot = s->sb.ckpt_slot;
	int rc;

	s->applied_end_lin = s->sb.replay_off;
	s->applied_next_seq = s->sb.replay_seq;
	if (slot == FMT_CKPT_SLOT_NONE) {
		s->next_obj_id = 1;
		return 0;
	}
	if (s->sb.ckpt_bytes < FMT_BLOCK || s->sb.ckpt_bytes > s->sb.ckpt_len)
		return -EIO;
	fe = malloc(sizeof(*fe));
	if (!fe || posix_memalign((void **)&blk, FMT_BLOCK, FMT_BLOCK) ||
	    win_alloc(&w, s) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	/* the base the superblock names, or its mirror in the other area */
	rc = base_read(s, slot, blk, &w, fe, &h);
	if (rc == -EIO) {
		slot = slot ? 0 : 1;
		rc = base_read(s, slot, blk, &w, fe, &h);
		if (rc == 0) {
			stat_add(&s->st.ckpt_mirror_reads, 1);
			mirror_used = true;
		}
	} else if (rc == 0) {
		s->ck_mirror = mirror_matches(s, blk);
	}
	if (rc < 0)
		goto out;
	/* the count is paid for by the payload (checked on decode) */
	objtab_reserve(s, h.n_objects);
	loaded = malloc(COIL_MAX(h.n_objects, 1) * sizeof(*loaded));
	if (!loaded) {
		rc = -ENOMEM;
		goto out;
	}
	/* The same bytes again (a device that answers differently the
	 * second time fails the checksum in base_walk). */
	if (!win_rewind(&w, h.payload_len))
		win_start(&w, s->sb.ckpt_off[slot] + FMT_BLOCK, h.payload_len);
	rc = base_walk(s, &w, &h, fe, loaded);
	if (rc < 0)
		goto out;
	rc = objtab_link_names(s, loaded, h.n_objects);
	if (rc < 0)
		goto out;
	if (h.next_obj_id > s->next_obj_id)
		s->next_obj_id = h.next_obj_id;
	if (s->next_obj_id == 0)
		s->next_obj_id = 1;
	s->applied_end_lin = h.replay_off;
	s->applied_next_seq = h.replay_seq;
	rc = ckpt_load_deltas(s, fe, &mirror_used);
	/* What was loaded is on disk: only changes from here (replay, then
	 * the session) go into the next delta.  A salvage open's first
	 * checkpoint is whole, and so is the first after a piece was read
	 * from the mirror, or when the other area holds no mirror (a store
	 * from before mirrors, a mirror write cut short, a damaged mirror
	 * header): it writes both copies. */
	objtab_dirty_reset(s);
	s->ck_base_next = s->salvage || mirror_used || !s->ck_mirror;
	if (mirror_used)
		s->ck_mirror = false;
out:
	win_free(&w);
	free(loaded);
	free(fe);
	free(blk);
	return rc;
}

/* ---- replay ------------------------------------------------------------- */

/* The most replay reads at once to verify the unflushed tail's blobs, and
 * the gap after a window that still counts as reading on (the next
 * segment's first blob lies past the segment's header) */
#define REPLAY_VERIFY_MAX (1u << 20)
#define REPLAY_VERIFY_GAP (128u << 10)

/* The journal replay has read, kept for the walk after it: part 0 from the
 * replay point on, part 1 from where the chain wrapped to the ring's start
 * (or from wherever a chunk was looked for out of order: the last part is
 * replaced).  A part grows by reads of REPLAY_WINDOW (a new one by a
 * REPLAY_PROBE first), so a chain of many small chunks costs a few large
 * reads, and the pass that applies the records reads nothing the pre-pass
 * read.  Replaying 4.7 MB of journal (12,414 records) after a kill took a
 * median 24 ms in 1 MiB reads made once per pass, ~3 ms of it applying;
 * 17.5 ms so (fio read this device at 2.1-2.4 GB/s in 2 MiB pieces, 1.3
 * in 1 MiB).  The whole ring's worth of address space and a little more
 * (parts read past a piece stop at the ring's end), touched only where
 * read: with a 64 MiB image, journals past it were read a piece at a
 * time, and a kill's 74 MB replayed in 666 ms against 73 ms for 32 MB
 * (the journal's share follows the write rate, so such journals are
 * common: grow.c).  Only while the journal does not change (open). */
#define REPLAY_WINDOW (2u << 20)
#define REPLAY_PROBE (64u << 10)
#define REPLAY_IMAGE_SLACK (4u * REPLAY_WINDOW)
struct jwindow {
	uint8_t *buf;           /* cap bytes, or NULL */
	uint64_t cap;
	uint64_t used;          /* bytes of buf the parts hold */
	struct jpart {
		uint64_t off, len;  /* journal [off, off + len) */
		uint64_t at;        /* at buf + at */
	} part[2];
	int nparts;
	/* bumped when a part is replaced: bytes handed out before may have
	 * been read over since */
	uint64_t epoch;
	/* in-memory blobs point into the image (replay_lend): no part is
	 * replaced, a piece that does not fit is read alone */
	bool pinned;
};

struct replay {
	struct coil_store *s;
	ZSTD_DCtx *dctx;
	uint8_t *io;      /* read buffer */
	uint8_t *dec;     /* decode scratch */
	size_t io_cap;
	/* the device range rp->io holds (io_len 0: none): packed blobs lie
	 * many to a block, and each relocation record verifies its own */
	uint64_t io_off, io_len;
	uint64_t file_end; /* a file store's size at open (0: a device) */
	struct fmt_extent fe;
	struct fmt_extent want; /* a REWRITE pair's expected extent */
	struct jwindow win;     /* the journal read ahead */
	/* the chunk being applied */
	uint64_t seq;
	/* the largest fmt_jchunk.synced of the chain: every chunk up to it
	 * was flushed (a later chunk says so) */
	uint64_t synced_max;
	uint8_t *chunk;         /* REPLAY_CHUNK_BUF: a chunk read whole */
	/* the walk for synced_max, on its own thread while the checkpoint
	 * loads (replay_prefetch): from where */
	uint64_t walk_pos, walk_seq;
	/* The walk also checked the chunks of sequence [walk_seq, known_end)
	 * whole, as the apply would (payload, records, inline blobs), in the
	 * window at epoch known_epoch: the apply computes none of those
	 * checksums again while the window still holds them. */
	uint64_t known_end, known_epoch;
	/* Blobs of the unflushed tail the walker read and verified after its
	 * walk (walk_verify_tail), by a hash of their whole descriptor: the
	 * apply places those without reading them again.  Open addressing,
	 * 0 = empty. */
	uint64_t *vkey;
	uint32_t vcap, vn;
	pthread_t walker;
};

static int chunk_find(struct coil_store *s, uint8_t *chunk, uint64_t pos,
		      uint64_t seq, struct fmt_jchunk *h, uint64_t *at,
		      struct jwindow *win, const uint8_t **blk);
static int chunk_get(struct coil_store *s, uint8_t *chunk, uint64_t pos,
		     uint64_t seq, struct fmt_jchunk *h, uint64_t *at,
		     struct jwindow *win, const uint8_t **out, bool check);

/* Is @p in @win's image (not read alone into the chunk buffer)? */
static bool jwindow_has(const struct jwindow *win, const uint8_t *p)
{
	return win->buf && p >= win->buf && p < win->buf + win->used;
}

/* Does the payload of the chunk @h at @p match its checksum? */
static bool chunk_payload_ok(const struct fmt_jchunk *h, const uint8_t *p)
{
	return fmt_jchunk_verify_payload(h, p + FMT_JCHUNK_HDR,
					 fmt_jchunk_len(h) - FMT_JCHUNK_HDR) == 0;
}

/* Check the chunk @h at @p (chunk_get's) whole, as its apply will: the
 * payload, every record and every WRITE's extents (inline blobs'
 * checksums).  The walk runs beside the checkpoint's load, so the apply
 * after it, on the open's critical path, then decodes without hashing the
 * journal's bytes again: a chunk's bytes were hashed up to five times
 * there (the payload, the record, and each inline blob on decode, verify
 * and apply).  @return true when all of it checks and it lies in the
 * window. */
static bool walk_check_chunk(struct replay *rp, const struct fmt_jchunk *h,
			     const uint8_t *p)
{
	struct fmt_cursor c;
	struct fmt_jrec r;
	struct fmt_jrec_write w;
	int got;

	if (!jwindow_has(&rp->win, p) || !chunk_payload_ok(h, p))
		return false;
	fmt_cursor_init_ro(&c, p + FMT_JCHUNK_HDR, h->payload_len);
	while ((got = fmt_jrec_next(&c, &r)) == 1)
		if (r.type == FMT_JREC_WRITE && fmt_jrec_write_decode(&r, &w) < 0)
			return false;
	return got == 0;
}

/* Walk the chain from (@pos, @seq) as replay will, for the largest synced
 * field.  A chunk carries only a seq below its own, so every chunk up to
 * the largest has a later one that vouches it was flushed.  Headers only:
 * a header that checks was written by this store's writer, and its synced
 * field is true of the chunks before it whatever became of any payload
 * in between (a chunk a flush covered was durable; one that does not
 * verify now is damage, and replay stops at it all the same). */
static uint64_t chain_synced_max(struct replay *rp, uint64_t pos,
				 uint64_t seq)
{
	struct coil_store *s = rp->s;
	uint64_t jlen = s->sb.journal_len, max = 0;
	uint64_t epoch = rp->win.epoch;
	bool checking = true;

	rp->known_end = seq;
	/* Bounded: one chunk of the ring per pass, in sequence. */
	for (;;) {
		struct fmt_jchunk h;
		const uint8_t *blk;
		uint64_t at;
		int rc = 0;

		/* the whole chunk while the run of checked ones lasts, then
		 * headers only */
		if (checking)
			rc = chunk_get(s, rp->chunk, pos, seq, &h, &at,
				       &rp->win, &blk, false);
		if (rc <= 0) {
			checking = false;
			rc = chunk_find(s, rp->chunk, pos, seq, &h, &at,
					&rp->win, &blk);
		}
		if (rc <= 0)
			break;
		max = COIL_MAX(max, h.synced);
		/* the chunks checked whole run from the start, unbroken */
		checking = checking && walk_check_chunk(rp, &h, blk);
		if (checking)
			rp->known_end = seq + 1;
		pos = at + fmt_jchunk_len(&h);
		if (pos >= jlen)
			pos = 0;
		seq++;
	}
	/* a part replaced during the walk may have held checked chunks */
	if (rp->win.epoch != epoch)
		rp->known_end = 0;
	rp->known_epoch = rp->win.epoch;
	return max;
}

/* Was the chunk being applied flushed? */
static bool replay_chunk_flushed(const struct replay *rp)
{
	return rp->synced_max && rp->seq <= rp->synced_max;
}

/* How much to read for a blob in [@a, @z) of segment @idx that the window
 * does not hold.  The unflushed tail's blobs mostly lie back to back: the
 * packer and the writers append to a segment in the order their records
 * follow.  A read that starts where the last window ended (or a little
 * after it) doubles the window, up to REPLAY_VERIFY_MAX; any other reads
 * the blob alone, so scattered blobs cost no more than one read each.
 * Never past the segment's end (a blob does not cross it) nor the file's. */
static uint64_t replay_window(struct replay *rp, uint32_t idx, uint64_t a,
			      uint64_t z)
{
	struct coil_store *s = rp->s;
	uint64_t seg_end = s->sb.data_off +
			   (uint64_t)(idx + 1) * s->sb.segment_size;
	uint64_t want = z - a;

	if (rp->io_len && a >= rp->io_off &&
	    a <= rp->io_off + rp->io_len + REPLAY_VERIFY_GAP)
		want = COIL_MAX(want, COIL_MIN(2 * rp->io_len,
					       (uint64_t)REPLAY_VERIFY_MAX));
	want = COIL_MIN(want, seg_end - a);
	if (rp->file_end && a + want > rp->file_end)
		want = COIL_MAX(z, rp->file_end) - a;
	return COIL_ALIGN_UP(want, FMT_BLOCK);
}

/* Read the blob (through rp->io's window) and decode it, every checksum
 * checked; idx is its segment.  @return 0 verified, 1 it does not, or a
 * negative errno from the device. */
static int blob_read_check(struct replay *rp, const struct fmt_blob *b,
			   uint32_t idx, const ZSTD_DDict *ddict)
{
	uint64_t a = COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK);
	uint64_t z = COIL_ALIGN_UP(b->dev_off + b->stored_len, FMT_BLOCK);
	int rc;

	if (a < rp->io_off || z > rp->io_off + rp->io_len) {
		uint64_t len = replay_window(rp, idx, a, z);

		rp->io_len = 0;
		rc = store_io_sync(rp->s, URING_OP_READ, rp->io, (uint32_t)len,
				   a);
		if (rc < 0)
			return rc;
		rp->io_off = a;
		rp->io_len = len;
		stat_add(&rp->s->st.replay_reads, 1);
		stat_add(&rp->s->st.replay_read_bytes, len);
	}
	rc = fmt_blob_decode(rp->dctx, ddict, b,
			     rp->io + (b->dev_off - rp->io_off),
			     b->stored_len, rp->dec, FMT_BLOB_MAX);
	return rc < 0 ? 1 : 0;
}

/* The key of a blob's whole descriptor in rp->vkey (never 0). */
static uint64_t vset_key(const struct fmt_blob *b)
{
	uint8_t d[32 + 8 * FMT_CSUMS_MAX];
	size_t n = 0;

	coil_put_le64(d, b->dev_off);
	coil_put_le32(d + 8, b->stored_len);
	coil_put_le32(d + 12, b->logical_len);
	d[16] = b->codec;
	d[17] = b->flags;
	coil_put_le16(d + 18, b->n_csums);
	coil_put_le32(d + 20, b->dict_id);
	n = 24;
	for (unsigned i = 0; i < b->n_csums && i < FMT_CSUMS_MAX; i++, n += 8)
		coil_put_le64(d + n, b->csums[i]);
	uint64_t k = fmt_csum(d, n);

	return k ? k : 1;
}

/* The slot of @k in @keys (@cap of them, a power of two): where it is, or
 * the empty one where it would go. */
static uint32_t vset_slot(const uint64_t *keys, uint32_t cap, uint64_t k)
{
	uint32_t i = (uint32_t)k & (cap - 1);

	while (keys[i] && keys[i] != k)
		i = (i + 1) & (cap - 1);
	return i;
}

static bool vset_has(const struct replay *rp, const struct fmt_blob *b)
{
	uint64_t k;

	if (!rp->vn)
		return false;
	k = vset_key(b);
	return rp->vkey[vset_slot(rp->vkey, rp->vcap, k)] == k;
}

/* @return false when the set cannot grow (the walker stops there). */
static bool vset_add(struct replay *rp, const struct fmt_blob *b)
{
	uint64_t k = vset_key(b);
	uint32_t i;

	if ((rp->vn + 1) * 4u > rp->vcap * 3u) {
		uint32_t ncap = rp->vcap ? rp->vcap * 2 : 1024;
		uint64_t *nk;

		if (ncap > (1u << 22))
			return false;
		nk = calloc(ncap, sizeof(*nk));
		if (!nk)
			return false;
		for (uint32_t j = 0; j < rp->vcap; j++)
			if (rp->vkey[j])
				nk[vset_slot(nk, ncap, rp->vkey[j])] =
					rp->vkey[j];
		free(rp->vkey);
		rp->vkey = nk;
		rp->vcap = ncap;
	}
	i = vset_slot(rp->vkey, rp->vcap, k);
	if (!rp->vkey[i]) {
		rp->vkey[i] = k;
		rp->vn++;
	}
	return true;
}

/* Read a blob and check every checksum its descriptor carries.
 * @return 0 verified, 1 it does not (replay stops there), or a negative
 * errno when the device failed: that is not evidence about the journal, so
 * open fails instead of dropping (and then checkpointing away) a suffix of
 * acknowledged writes. */
static int replay_verify_blob(struct replay *rp, const struct fmt_blob *b,
			      bool read)
{
	struct coil_store *s = rp->s;
	uint64_t a = COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK);
	uint64_t z = COIL_ALIGN_UP(b->dev_off + b->stored_len, FMT_BLOCK);
	uint32_t idx;
	struct stat st;
	int rc;

	/* A growing store's superblock may name fewer segments than its
	 * records use: a growth step writes no superblock (grow.c).  A blob
	 * past the count but within the maximum is accepted when its bytes
	 * are in the file and verify; the count then covers it. */
	if (blob_in_segs(s, b, s->grows ? s->seg_cap : s->nseg) < 0)
		return 1;
	if (z - a > rp->io_cap)
		return 1;
	idx = seg_of(s, b->dev_off);
	if (idx >= s->nseg &&
	    (fstat(s->fd, &st) < 0 || (uint64_t)st.st_size < z))
		return 1;
	if (!read)
		goto placed;
	/* read and verified already, by the walker */
	if (vset_has(rp, b)) {
		stat_add(&s->st.replay_verified_ahead, 1);
		goto placed;
	}
	/* a dictionary is read when a blob first needs it (its object's
	 * records came first); one that does not load fails the blob */
	if (b->dict_id && dict_load(s, b->dict_id) < 0)
		return 1;
	rc = blob_read_check(rp, b, idx, dict_ddict(s, b->dict_id));
	if (rc != 0)
		return rc;
placed:
	if (idx >= s->nseg) {
		s->nseg = idx + 1;
		stat_add(&s->st.grow_replayed, 1);
	}
	return 0;
}

/* A WRITE record's blobs, verified (or, in a flushed chunk, only placed)
 * before any of it applies.  @return 0, 1 (replay stops here), or a device
 * error. */
static int replay_write_verify(struct replay *rp, struct fmt_jrec_write w)
{
	struct coil_store *s = rp->s;
	int rc;

	uint32_t i = 0;

	while ((rc = fmt_jrec_write_next(&w, &rp->fe)) == 1) {
		int v;

		/* a rewrite's expected blob is compared, never read: it may
		 * be overwritten and its space reused since */
		if ((w.flags & FMT_JREC_REWRITE) && i++ % 2 == 0)
			continue;
		if (rp->fe.blob.flags & FMT_BLOB_INLINE) {
			/* the record carries it (checked on decode); a
			 * relocation never moves into memory */
			if ((w.flags & FMT_JREC_REMAP) ||
			    blob_inline_ok(s, &rp->fe) < 0)
				return 1;
			continue;
		}
		/* A record a later chunk shows was flushed had its data
		 * durable before it (a record is written after its data, a
		 * flush covers every write completed before it): data that
		 * does not verify there is damage, not a write a power cut
		 * cut short, and costs only its range (-EIO on read; the
		 * scrub names it), so it is not read here: replay neither
		 * stops at it nor pays a device read per blob.  The
		 * unflushed tail is read and verified, and replay stops at
		 * its first blob that is not whole. */
		v = replay_verify_blob(rp, &rp->fe.blob,
				       s->salvage || !replay_chunk_flushed(rp));

		/* A salvage open applies the record anyway (unless the blob
		 * lies outside the data area): a read of its bytes then
		 * fails with -EIO and is reported, where stopping would
		 * silently drop every later write. */
		if (v != 0 && s->salvage &&
		    blob_in_bounds(s, &rp->fe.blob) == 0) {
			stat_add(&s->salvage_unverified, 1);
			continue;
		}
		if (v != 0)
			return v;
	}
	return rc < 0 ? 1 : 0;
}

/* A RENAME, applied or found already applied.  Replay may meet records
 * whose effect the checkpoint already holds (a checkpoint can be taken
 * between the entries of one chunk), and a create or remove outside a
 * batch changes the table when it takes its ticket, so the checkpoint may
 * hold later ones too: a missing object was removed later, and a holder of
 * the name newer than both objects was created later.  @return 0, 1 (a
 * contradiction: stop), -errno. */
static int replay_rename(struct coil_store *s, const struct fmt_jrec_rename *rn)
{
	struct object *o = objtab_find_id(s, rn->obj_id), *holder, *rep;

	if (!o)
		return 0;
	rep = rn->replaced ? objtab_find_id(s, rn->replaced) : NULL;
	holder = objtab_find_name(s, rn->name, rn->name_len);
	if (holder == o)
		return 0;
	if (holder && holder != rep)
		return (holder->id > rn->obj_id && holder->id > rn->replaced) ?
			       0 : 1;
	if (rep)
		meta_apply_remove(s, rep);
	return objtab_rename(s, o, rn->name, rn->name_len);
}

/* Applying a WRITE's extents costs a few dependent cache misses each in
 * the object's extent map: the leaf, the extents in it, the blob an
 * overwrite drops (with 10^6 extents in a map, ~40 % of a replay's CPU
 * samples under perf; the packer's relocation records carry many extents
 * each).  A second cursor runs 3 * AHEAD_DIST extents ahead of the apply
 * and warms them, one stage each at 3, 2 and 1 times AHEAD_DIST ahead, so
 * that each stage's own reads hit what the stage before brought in. */
#define AHEAD_DIST 4u
#define AHEAD_RING 16u /* > 3 * AHEAD_DIST, a power of two */

struct ext_ahead {
	struct fmt_jrec_write lead;
	const struct extmap *m;
	uint32_t n; /* extents the lead has passed */
	struct {
		uint64_t off;
		uint32_t leaf; /* stage 0's answer */
	} ring[AHEAD_RING];
};

static void ahead_stage(struct ext_ahead *a, uint32_t i, int stage)
{
	uint32_t k = i % AHEAD_RING;

	if (i < a->n)
		a->ring[k].leaf = extmap_prefetch(a->m, a->ring[k].off, stage,
						  a->ring[k].leaf);
}

/* Before the apply of extent @i of the record. */
static void ahead_step(struct ext_ahead *a, uint32_t i)
{
	uint64_t off;

	while (a->n <= i + 3 * AHEAD_DIST &&
	       fmt_jrec_write_peek(&a->lead, &off) == 1) {
		a->ring[a->n % AHEAD_RING].off = off;
		ahead_stage(a, a->n++, 0);
	}
	ahead_stage(a, i + 2 * AHEAD_DIST, 1);
	ahead_stage(a, i + AHEAD_DIST, 2);
}

/* May an inline extent's blob point at its bytes in the journal image
 * instead of a copy?  Most small writes a replay installs are packed by a
 * later record of the same replay and dropped: copying each first was a
 * seventh of the apply's CPU samples (10^6 4 KiB blobs, 44 MB replayed).
 * The image then keeps every byte it holds until the end of replay, which
 * copies the blobs still lent (memlist_settle). */
static bool replay_lend(struct replay *rp, const struct fmt_extent *fe)
{
	if (!(fe->blob.flags & FMT_BLOB_INLINE) ||
	    !jwindow_has(&rp->win, fe->inl))
		return false;
	rp->win.pinned = true;
	stat_add(&rp->s->st.replay_blobs_lent, 1);
	return true;
}

/* Apply one record (@verify: check a WRITE's blobs first; a batch checked
 * all of its own before applying any).  @return 0 applied (or a no-op), 1
 * stop replay here, < 0 a device error (open fails rather than silently
 * dropping a suffix). */
static int replay_record(struct replay *rp, const struct fmt_jrec *r,
			 bool verify)
{
	struct coil_store *s = rp->s;
	struct object *o;
	int rc;

	switch (r->type) {
	case FMT_JREC_CREATE: {
		struct fmt_jrec_create cr;
		if (fmt_jrec_create_decode(r, &cr) < 0 ||
		    memchr(cr.name, 0, cr.name_len))
			return 1;
		/* applied already (a later rename may have renamed it) */
		if (objtab_find_id(s, cr.obj_id))
			return 0;
		o = objtab_find_name(s, cr.name, cr.name_len);
		if (o)	/* A later object holds the name: this one was
			 * removed after (create and remove change the table
			 * when they take their ticket, so a checkpoint may
			 * hold their effect before its replay point reaches
			 * their records; ids only grow).  Its WRITEs and
			 * REMOVE find no id and are skipped.  An older
			 * holder is a contradiction: stop. */
			return o->id > cr.obj_id ? 0 : 1;
		rc = objtab_add(s, cr.obj_id, cr.name, cr.name_len, &o);
		return rc < 0 ? rc : 0;
	}
	case FMT_JREC_REMOVE: {
		struct fmt_jrec_remove rm;
		if (fmt_jrec_remove_decode(r, &rm) < 0)
			return 1;
		o = objtab_find_id(s, rm.obj_id);
		if (o)
			meta_apply_remove(s, o);
		return 0;
	}
	case FMT_JREC_RENAME: {
		struct fmt_jrec_rename rn;
		if (fmt_jrec_rename_decode(r, &rn) < 0)
			return 1;
		return replay_rename(s, &rn);
	}
	case FMT_JREC_CLONE: {
		struct fmt_jrec_clone cl;
		struct object *src;
		if (fmt_jrec_clone_decode(r, &cl) < 0)
			return 1;
		/* as CREATE: applied already, or its name taken later */
		if (objtab_find_id(s, cl.dst_id))
			return 0;
		o = objtab_find_name(s, cl.name, cl.name_len);
		if (o)
			return o->id > cl.dst_id ? 0 : 1;
		src = objtab_find_id(s, cl.src_id);
		if (!src)
			return 0; /* both gone since (see RENAME) */
		rc = meta_clone(s, src, cl.dst_id, cl.name, cl.name_len, &o);
		return rc < 0 ? rc : 0;
	}
	case FMT_JREC_TRUNCATE: {
		struct fmt_jrec_truncate tr;
		if (fmt_jrec_truncate_decode(r, &tr) < 0 ||
		    tr.size > ENGINE_OBJ_SIZE_MAX)
			return 1;
		o = objtab_find_id(s, tr.obj_id);
		if (o) {
			rc = meta_apply_truncate(s, o, tr.size);
			if (rc < 0)
				return rc;
		}
		return 0;
	}
	case FMT_JREC_WRITE: {
		struct fmt_jrec_write w;
		struct ext_ahead a;
		bool ahead;

		if (fmt_jrec_write_decode(r, &w) < 0 ||
		    w.off + w.len > ENGINE_OBJ_SIZE_MAX)
			return 1;
		o = objtab_find_id(s, w.obj_id);
		if (!o)
			return 0; /* removed later: nothing to verify */
		/* Every blob first, so the write applies whole or not. */
		if (verify) {
			rc = replay_write_verify(rp, w);
			if (rc != 0)
				return rc;
		}
		ahead = w.n_extents > AHEAD_DIST;
		if (ahead) {
			a.lead = w;
			a.m = &o->map;
			a.n = 0;
		}
		for (;;) {
			if (ahead)
				ahead_step(&a, w.ext_done);
			if ((rc = fmt_jrec_write_next(&w, &rp->fe)) != 1)
				break;
			/* a relocation or a rewrite installs only where the
			 * map still holds the same blob (as the live path
			 * did) */
			if (w.flags & FMT_JREC_REWRITE) {
				rp->want = rp->fe;
				if (fmt_jrec_write_next(&w, &rp->fe) != 1 ||
				    blob_in_bounds(s, &rp->fe.blob) < 0)
					return 1;
				rc = meta_replay_rewrite(s, o, &rp->want,
							 &rp->fe);
			} else if (w.flags & FMT_JREC_REMAP)
				rc = meta_replay_remap(s, o, &rp->fe);
			else
				rc = insert_fmt_extent(s, o, &rp->fe,
						       replay_lend(rp, &rp->fe));
			if (rc < 0)
				return rc;
		}
		if (!(w.flags & (FMT_JREC_REMAP | FMT_JREC_REWRITE)) && w.len &&
		    w.off + w.len > o->size)
			o->size = w.off + w.len;
		return 0;
	}
	default:
		return 1; /* DICT and unknown: not in this version; a BATCH
			   * inside a batch is malformed */
	}
}

/* Does a WRITE to @id in a batch need its blobs verified: its object exists
 * now, or an earlier record of the batch creates it. */
static bool batch_obj_live(struct coil_store *s, const struct fmt_jrec *m,
			   uint32_t upto, uint64_t id)
{
	if (objtab_find_id(s, id))
		return true;
	for (uint32_t i = 0; i < upto; i++) {
		struct fmt_jrec_create cr;
		struct fmt_jrec_clone cl;

		if (fmt_jrec_create_decode(&m[i], &cr) == 0 && cr.obj_id == id)
			return true;
		if (fmt_jrec_clone_decode(&m[i], &cl) == 0 && cl.dst_id == id)
			return true;
	}
	return false;
}

/* A BATCH record and the @n records after it in the chunk (at @c): every
 * one decodes and every blob verifies, or none applies.  @return 0, 1
 * (replay stops before the batch), -errno. */
static int replay_batch(struct replay *rp, struct fmt_cursor *c, uint32_t n,
			bool known)
{
	struct coil_store *s = rp->s;
	struct fmt_jrec *m = malloc((size_t)n * sizeof(*m));
	int rc = 0;

	if (!m)
		return -ENOMEM;
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		if ((known ? fmt_jrec_next_known(c, &m[i]) :
			     fmt_jrec_next(c, &m[i])) != 1 ||
		    m[i].type == FMT_JREC_BATCH ||
		    m[i].type == FMT_JREC_DICT)
			rc = 1;
	}
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		union {
			struct fmt_jrec_create cr;
			struct fmt_jrec_remove rm;
			struct fmt_jrec_rename rn;
			struct fmt_jrec_clone cl;
			struct fmt_jrec_truncate tr;
			struct fmt_jrec_write w;
		} u;

		switch (m[i].type) {
		case FMT_JREC_CREATE:
			rc = fmt_jrec_create_decode(&m[i], &u.cr) < 0;
			break;
		case FMT_JREC_REMOVE:
			rc = fmt_jrec_remove_decode(&m[i], &u.rm) < 0;
			break;
		case FMT_JREC_RENAME:
			rc = fmt_jrec_rename_decode(&m[i], &u.rn) < 0;
			break;
		case FMT_JREC_CLONE:
			rc = fmt_jrec_clone_decode(&m[i], &u.cl) < 0;
			break;
		case FMT_JREC_TRUNCATE:
			rc = fmt_jrec_truncate_decode(&m[i], &u.tr) < 0 ||
			     u.tr.size > ENGINE_OBJ_SIZE_MAX;
			break;
		default:
			if (fmt_jrec_write_decode(&m[i], &u.w) < 0 ||
			    u.w.off + u.w.len > ENGINE_OBJ_SIZE_MAX)
				rc = 1;
			else if (batch_obj_live(s, m, i, u.w.obj_id))
				rc = replay_write_verify(rp, u.w);
			break;
		}
	}
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		rc = replay_record(rp, &m[i], false);
		stat_add(&s->st.replayed_records, 1);
	}
	free(m);
	return rc;
}

/* An image for a journal ring of @jlen bytes. */
static int jwindow_init(struct jwindow *win, uint64_t jlen)
{
	uint64_t cap = jlen + REPLAY_IMAGE_SLACK;
	void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	memset(win, 0, sizeof(*win));
	if (p == MAP_FAILED)
		return -ENOMEM;
	win->buf = p;
	win->cap = cap;
	return 0;
}

static void jwindow_free(struct jwindow *win)
{
	if (win->buf)
		munmap(win->buf, win->cap);
	win->buf = NULL;
}

/* Read journal [@off, @off + @want) into the end of @win's buffer as part
 * @p's continuation.  @return 0 or -errno. */
static int jwindow_fill(struct coil_store *s, struct jwindow *win,
			struct jpart *p, uint64_t off, uint64_t want)
{
	int rc = store_io_big(s, URING_OP_READ, win->buf + win->used, want,
			      s->sb.journal_off + off);

	if (rc < 0)
		return rc;
	stat_add(&s->st.replay_journal_reads, 1);
	stat_add(&s->st.replay_journal_read_bytes, want);
	win->used += want;
	p->len += want;
	return 0;
}

/* Make [@off, @off + @len) part of @win: held already, the continuation of
 * the last part, or a new last part.  @return the part, or NULL when the
 * buffer has no room (the caller reads the piece alone); *@rc a read's
 * error. */
static struct jpart *jwindow_hold(struct coil_store *s, struct jwindow *win,
				  uint64_t off, uint64_t len, int *rc)
{
	uint64_t jlen = s->sb.journal_len, room, want;
	struct jpart *p;

	*rc = 0;
	for (int i = 0; i < win->nparts; i++) {
		p = &win->part[i];
		if (off >= p->off && off + len <= p->off + p->len)
			return p;
	}
	p = win->nparts ? &win->part[win->nparts - 1] : NULL;
	/* a piece a little past the last part's end continues it (a chunk
	 * moved on to the next block, or the walk stepped over a hole):
	 * the gap is read too */
	if (!p || off < p->off || off > p->off + p->len + REPLAY_WINDOW) {
		/* a new part: the second, or one in place of the second */
		if (win->nparts == 2) {
			if (win->pinned)
				return NULL;
			win->used = win->part[1].at;
			win->nparts = 1;
			win->epoch++;
		}
		p = &win->part[win->nparts++];
		*p = (struct jpart){ .off = off, .len = 0, .at = win->used };
	}
	/* grow the last part from its end to cover the piece, and then some:
	 * a new part by REPLAY_PROBE (most hold one look for a wrapped
	 * chunk at the ring's start), then by REPLAY_WINDOW */
	room = COIL_MIN(win->cap - win->used, jlen - (p->off + p->len));
	want = COIL_MAX(off + len - (p->off + p->len),
			p->len ? (uint64_t)REPLAY_WINDOW :
				 (uint64_t)REPLAY_PROBE);
	want = COIL_MIN(want, room);
	if (p->off + p->len + want < off + len) {
		if (p->len == 0)
			win->nparts--;
		return NULL;
	}
	*rc = jwindow_fill(s, win, p, p->off + p->len, want);
	return *rc < 0 ? NULL : p;
}

/* @len journal bytes at journal offset @off (both BLOCK multiples): in
 * @win when it holds them (read into it first when it can), else read
 * into @dst.  *@out: where they are; a place in @win stays valid until the
 * next call with @win (which may replace a part).  Replay reads each chunk
 * in place: copying 47 MiB of journal out of the window was a seventh of
 * the replay's CPU samples under perf. */
static int journal_get(struct coil_store *s, struct jwindow *win,
		       uint8_t *dst, uint64_t len, uint64_t off,
		       const uint8_t **out)
{
	struct jpart *p = NULL;
	int rc = 0;

	*out = dst;
	if (win && win->buf)
		p = jwindow_hold(s, win, off, len, &rc);
	if (rc < 0)
		return rc;
	if (p) {
		*out = win->buf + p->at + (off - p->off);
		return 0;
	}
	if (win) {
		stat_add(&s->st.replay_journal_reads, 1);
		stat_add(&s->st.replay_journal_read_bytes, len);
	}
	return store_io_big(s, URING_OP_READ, dst, len,
			    s->sb.journal_off + off);
}

/* The header of the chunk with sequence @seq, at @pos or where a writer
 * may have put it instead (replay_read_chunk): *@h, *@at, and the block it
 * starts in at *@blk (@chunk's start, or @win).  @return 1 found, 0 none,
 * -errno. */
static int chunk_find(struct coil_store *s, uint8_t *chunk, uint64_t pos,
		      uint64_t seq, struct fmt_jchunk *h, uint64_t *at,
		      struct jwindow *win, const uint8_t **blk)
{
	uint64_t jlen = s->sb.journal_len, tries[3];
	int ntries = 0, rc;

	tries[ntries++] = pos;
	if (pos % FMT_BLOCK)
		tries[ntries++] = COIL_ALIGN_UP(pos, FMT_BLOCK);
	if (pos)
		tries[ntries++] = 0; /* a chunk that did not fit wrapped */
	for (int i = 0; i < ntries; i++) {
		uint64_t base = COIL_ALIGN_DOWN(tries[i], FMT_BLOCK);
		uint64_t skip = tries[i] - base, len;

		if (base + FMT_BLOCK > jlen)
			continue;
		/* Whole blocks, whatever the sector a chunk starts at: a
		 * direct read of the store needs them. */
		rc = journal_get(s, win, chunk, FMT_BLOCK, base, blk);
		if (rc < 0)
			return rc;
		if (fmt_jchunk_decode(h, *blk + skip, FMT_BLOCK - skip) < 0 ||
		    h->store_id != s->store_id || h->seq != seq)
			continue;
		len = fmt_jchunk_len(h);
		if (tries[i] + len > jlen || len > REPLAY_CHUNK_MAX)
			continue;
		*at = tries[i];
		return 1;
	}
	return 0;
}

/* replay_read_chunk, leaving the chunk where it is: *@out, in @win or
 * in @chunk; @check false: its payload's checksum is the caller's. */
static int chunk_get(struct coil_store *s, uint8_t *chunk, uint64_t pos,
		     uint64_t seq, struct fmt_jchunk *h, uint64_t *at,
		     struct jwindow *win, const uint8_t **out, bool check)
{
	uint64_t base, skip, len, end;
	const uint8_t *p, *rest;
	int rc = chunk_find(s, chunk, pos, seq, h, at, win, &p);

	if (rc <= 0)
		return rc;
	base = COIL_ALIGN_DOWN(*at, FMT_BLOCK);
	skip = *at - base;
	len = fmt_jchunk_len(h);
	end = COIL_ALIGN_UP(*at + len, FMT_BLOCK);
	if (p != chunk) {
		/* the window holds its first block: the whole chunk from
		 * there (or, when it cannot hold the rest, read whole) */
		rc = journal_get(s, win, chunk, end - base, base, &p);
	} else if (end - base > FMT_BLOCK) {
		/* its first block is at @chunk's start: the rest after it */
		rc = journal_get(s, win, chunk + FMT_BLOCK,
				 end - base - FMT_BLOCK, base + FMT_BLOCK,
				 &rest);
		if (rc == 0 && rest != chunk + FMT_BLOCK)
			memcpy(chunk + FMT_BLOCK, rest, end - base - FMT_BLOCK);
	}
	if (rc < 0)
		return rc;
	p += skip;
	if (check && !chunk_payload_ok(h, p))
		return 0;
	*out = p;
	return 1;
}

int replay_read_chunk(struct coil_store *s, uint8_t *chunk,
			     uint64_t pos, uint64_t seq, struct fmt_jchunk *h,
			     uint64_t *at, struct jwindow *win)
{
	const uint8_t *p;
	int rc = chunk_get(s, chunk, pos, seq, h, at, win, &p, true);

	if (rc == 1 && p != chunk)
		memmove(chunk, p, fmt_jchunk_len(h));
	return rc;
}

/* Apply the records of one verified chunk.  @return 0 (all applied), 1
 * (replay stops here: a malformed record, or one whose blobs do not
 * verify), or -errno. */
static int replay_chunk_records(struct replay *rp, const uint8_t *chunk,
				const struct fmt_jchunk *h, bool known)
{
	struct fmt_cursor c;
	struct fmt_jrec r;
	int rc;

	fmt_cursor_init_ro(&c, chunk + FMT_JCHUNK_HDR, h->payload_len);
	for (;;) {
		int got = known ? fmt_jrec_next_known(&c, &r) :
				  fmt_jrec_next(&c, &r);

		if (got <= 0)
			return got < 0 ? 1 : 0;
		if (r.type == FMT_JREC_BATCH) {
			struct fmt_jrec_batch b;

			if (fmt_jrec_batch_decode(&r, &b) < 0)
				return 1;
			rc = replay_batch(rp, &c, b.n_records, known);
			if (rc != 0)
				return rc;
			continue;
		}
		rc = replay_record(rp, &r, true);
		if (rc != 0)
			return rc;
		stat_add(&rp->s->st.replayed_records, 1);
	}
}

static void replay_free(struct replay *rp)
{
	if (!rp)
		return;
	if (rp->dctx)
		ZSTD_freeDCtx(rp->dctx);
	free(rp->io);
	free(rp->dec);
	free(rp->chunk);
	free(rp->vkey);
	jwindow_free(&rp->win);
	free(rp);
}

static struct replay *replay_new(struct coil_store *s)
{
	struct replay *rp = calloc(1, sizeof(*rp));

	if (!rp)
		return NULL;
	rp->s = s;
	rp->dctx = ZSTD_createDCtx();
	rp->io_cap = REPLAY_VERIFY_MAX + FMT_BLOB_MAX + 2 * FMT_BLOCK;
	if (posix_memalign((void **)&rp->io, 4096, rp->io_cap))
		rp->io = NULL;
	rp->dec = malloc(FMT_BLOB_MAX);
	/* without it: a read per piece */
	(void)jwindow_init(&rp->win, s->sb.journal_len);
	if (posix_memalign((void **)&rp->chunk, 4096, REPLAY_CHUNK_BUF))
		rp->chunk = NULL;
	if (!rp->dctx || !rp->io || !rp->dec || !rp->chunk) {
		replay_free(rp);
		return NULL;
	}
	return rp;
}

/* The walk for synced_max, timed (stats journal.replay_walk_ns). */
static void replay_walk(struct replay *rp, uint64_t pos, uint64_t seq)
{
	uint64_t t0 = coil_now_ns();

	rp->synced_max = chain_synced_max(rp, pos, seq);
	stat_add(&rp->s->st.replay_walk_ns, coil_now_ns() - t0);
}

/* After the walk, on its thread while the checkpoint still loads: read and
 * verify the blobs the apply will, those of the WRITE records after the
 * last chunk a flush covered (replay_write_verify), and note each that
 * verifies.  Only chunks the walk checked whole; a blob whose dictionary
 * the store has not loaded yet is left to the apply, and so is the rest
 * once one does not verify or a read fails (the apply stops there, or
 * says why).  Uses nothing the load changes: the superblock's geometry,
 * the segment capacity, the file's size. */
static void walk_verify_tail(struct replay *rp)
{
	struct coil_store *s = rp->s;
	uint64_t jlen = s->sb.journal_len, pos = rp->walk_pos;
	struct stat st;

	if (fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode))
		rp->file_end = (uint64_t)st.st_size;
	/* Bounded: one chunk of the checked run per pass. */
	for (uint64_t seq = rp->walk_seq; seq < rp->known_end; seq++) {
		struct fmt_jchunk h;
		struct fmt_cursor c;
		struct fmt_jrec r;
		const uint8_t *p;
		uint64_t at;

		if (chunk_get(s, rp->chunk, pos, seq, &h, &at, &rp->win, &p,
			      false) != 1 || !jwindow_has(&rp->win, p))
			return;
		pos = at + fmt_jchunk_len(&h);
		if (pos >= jlen)
			pos = 0;
		if (rp->synced_max && seq <= rp->synced_max)
			continue; /* flushed: placed, never read */
		fmt_cursor_init_ro(&c, p + FMT_JCHUNK_HDR, h.payload_len);
		while (fmt_jrec_next_known(&c, &r) == 1) {
			struct fmt_jrec_write w;
			struct fmt_extent *fe = &rp->fe;
			uint32_t i = 0;

			if (r.type != FMT_JREC_WRITE ||
			    fmt_jrec_write_decode(&r, &w) < 0)
				continue;
			while (fmt_jrec_write_next(&w, fe) == 1) {
				const struct fmt_blob *b = &fe->blob;
				uint64_t z;

				/* a rewrite's expected blob is never read */
				if ((w.flags & FMT_JREC_REWRITE) && i++ % 2 == 0)
					continue;
				if ((b->flags & FMT_BLOB_INLINE) || b->dict_id)
					continue;
				z = COIL_ALIGN_UP(b->dev_off + b->stored_len,
						  FMT_BLOCK);
				if (blob_in_segs(s, b, s->seg_cap) < 0 ||
				    z - COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK) >
					    rp->io_cap ||
				    (rp->file_end && z > rp->file_end) ||
				    blob_read_check(rp, b,
						    seg_of(s, b->dev_off),
						    NULL) != 0 ||
				    !vset_add(rp, b))
					return;
			}
		}
	}
}

static void *replay_walker(void *arg)
{
	struct replay *rp = arg;

	coil_thread_name("replay", -1);
	replay_walk(rp, rp->walk_pos, rp->walk_seq);
	walk_verify_tail(rp);
	return NULL;
}

void replay_prefetch(struct coil_store *s)
{
	uint64_t jlen = s->sb.journal_len;
	struct replay *rp;

	if (s->replay || s->salvage || jlen == 0)
		return;
	rp = replay_new(s);
	if (!rp)
		return; /* replay_journal tries again, and says -ENOMEM */
	rp->walk_pos = s->sb.replay_off % jlen;
	rp->walk_seq = s->sb.replay_seq;
	if (pthread_create(&rp->walker, NULL, replay_walker, rp) != 0) {
		replay_free(rp);
		return;
	}
	s->replay = rp; /* its walker runs until replay_take joins it */
}

/* The walk's result, once it is done (its thread joined). */
static struct replay *replay_take(struct coil_store *s)
{
	struct replay *rp = s->replay;

	s->replay = NULL;
	if (rp)
		pthread_join(rp->walker, NULL);
	return rp;
}

void replay_abandon(struct coil_store *s)
{
	replay_free(replay_take(s));
}

int replay_journal(struct coil_store *s)
{
	uint64_t t0 = coil_now_ns();
	uint64_t jlen = s->sb.journal_len, pos = s->sb.replay_off % jlen;
	uint64_t lin = pos, seq = s->sb.replay_seq;
	struct replay *rp = replay_take(s);
	struct stat st;
	int rc = 0;

	/* The walk that ran while the checkpoint loaded started where replay
	 * starts: only a salvage moves the replay point, and a salvage does
	 * not walk ahead. */
	COIL_ASSERT(!rp || (rp->walk_pos == pos && rp->walk_seq == seq));
	if (!rp) {
		rp = replay_new(s);
		if (!rp)
			return -ENOMEM;
		replay_walk(rp, pos, seq);
	}
	if (fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode))
		rp->file_end = (uint64_t)st.st_size;
	/* Bounded: each pass consumes one chunk of the journal with the next
	 * sequence, and the journal holds finitely many. */
	for (;;) {
		struct fmt_jchunk h;
		const uint8_t *cp = NULL;
		uint64_t at;
		bool known = seq < rp->known_end;

		rc = chunk_get(s, rp->chunk, pos, seq, &h, &at, &rp->win, &cp,
			       !known);
		/* the walk checked it where the window still holds it, or
		 * it is checked now */
		if (rc == 1 && known &&
		    (rp->win.epoch != rp->known_epoch ||
		     !jwindow_has(&rp->win, cp))) {
			known = false;
			if (!chunk_payload_ok(&h, cp))
				rc = 0;
		}
		if (rc < 0 && s->salvage) {
			salvage_note(s, "journal chunk (sequence %" PRIu64 ") "
				     "does not read: replay stopped there", seq);
			rc = 0;
		}
		if (rc <= 0)
			break;
		/* The chunk is consumed from here on, even if a record in it
		 * stops replay: new chunks go after it. */
		lin += (at >= pos ? at - pos : jlen - pos) + fmt_jchunk_len(&h);
		pos = at + fmt_jchunk_len(&h);
		if (pos >= jlen)
			pos = 0;
		rp->seq = seq;
		seq++;
		stat_add(&s->st.replayed_chunks, 1);
		stat_add(&s->st.replayed_bytes, fmt_jchunk_len(&h));
		if (known)
			stat_add(&s->st.replay_known_chunks, 1);
		rc = replay_chunk_records(rp, cp, &h, known);
		if (rc != 0)
			break;
	}
	if (rc > 0)
		rc = 0;
	/* New chunks start where replay ended, with a sequence no chunk left
	 * on disk can carry (ENGINE_SEQ_GAP). */
	s->applied_end_lin = lin;
	s->applied_hi_lin = lin;
	s->j_head_lin = lin;
	s->j_tail_lin = s->sb.replay_off % jlen;
	s->j_next_seq = seq + ENGINE_SEQ_GAP;
	s->applied_next_seq = s->j_next_seq;
	/* before the image goes */
	if (rp->win.pinned) {
		int n = memlist_settle(&s->mem);

		if (n < 0 && rc == 0)
			rc = n;
		stat_add(&s->st.replay_blobs_copied, n > 0 ? (uint64_t)n : 0);
	}
	replay_free(rp);
	stat_add(&s->st.replay_ns, coil_now_ns() - t0);
	return rc;
}
