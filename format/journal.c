/* format/journal.c — journal chunks (a 64-byte header, then records) and the
 * self-validating records inside them.
 *
 * Each record carries its own body checksum and each WRITE carries the full
 * descriptors (and so the checksums) of the blobs it references: one device
 * flush orders data and metadata, and replay stops at the first record whose
 * bytes or whose blobs do not verify. */
#include "format/format_internal.h"

#include <stdbool.h>
#include <xxhash.h>

_Static_assert(FMT_JCHUNK_HDR == 64, "journal chunk header is 64 bytes");
_Static_assert(FMT_JREC_HDR == 16, "journal record header is 16 bytes");

static const uint8_t jnl_magic[4] = { 'C', 'J', 'N', 'L' };

/* A record's checksum covers its body and, through the seed, its type, flags
 * and length (record bytes [0, 8)): a flipped type must not turn a valid body
 * into a different valid record. */
uint64_t fmt_jrec_csum(const uint8_t *hdr, const uint8_t *body, size_t len)
{
	return XXH3_64bits_withSeed(body, len, coil_get_le64(hdr));
}

#define WRITE_FIXED FMT_JREC_WRITE_FIXED /* obj_id, off, len, n_extents */

static int jchunk_valid(const struct fmt_jchunk *h)
{
	if ((h->nblocks == 0) == (h->nsect == 0))
		return 0;
	if ((uint64_t)h->payload_len > fmt_jchunk_len(h) - FMT_JCHUNK_HDR)
		return 0;
	if (h->synced && h->synced >= h->seq)
		return 0;
	/* Every record has a 16-byte header: a count the payload cannot hold
	 * is a lie, caught before anyone loops on it. */
	if ((uint64_t)h->nrec * FMT_JREC_HDR > h->payload_len)
		return 0;
	return 1;
}

int fmt_jchunk_encode(const struct fmt_jchunk *h, uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_JCHUNK_HDR || !jchunk_valid(h))
		return -EINVAL;
	memset(buf, 0, FMT_JCHUNK_HDR);
	memcpy(buf, jnl_magic, 4);
	coil_put_le16(buf + 4, FMT_VERSION);
	coil_put_le64(buf + 8, h->store_id);
	coil_put_le64(buf + 16, h->seq);
	coil_put_le32(buf + 24, h->nblocks);
	coil_put_le32(buf + 28, h->payload_len);
	coil_put_le32(buf + 32, h->nrec);
	coil_put_le32(buf + 36, h->nsect);
	coil_put_le64(buf + 40, h->payload_csum);
	coil_put_le64(buf + 48, h->synced);
	coil_put_le64(buf + 56, fmt_csum(buf, 56));
	return FMT_JCHUNK_HDR;
}

int fmt_jchunk_decode(struct fmt_jchunk *h, const uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_JCHUNK_HDR)
		return -EINVAL;
	if (memcmp(buf, jnl_magic, 4) || coil_get_le16(buf + 4) != FMT_VERSION)
		return -EIO;
	if (coil_get_le64(buf + 56) != fmt_csum(buf, 56))
		return -EIO;
	if (!fmt_all_zero(buf + 6, 2))
		return -EIO;
	struct fmt_jchunk t = {
		.store_id = coil_get_le64(buf + 8),
		.seq = coil_get_le64(buf + 16),
		.nblocks = coil_get_le32(buf + 24),
		.payload_len = coil_get_le32(buf + 28),
		.nrec = coil_get_le32(buf + 32),
		.nsect = coil_get_le32(buf + 36),
		.payload_csum = coil_get_le64(buf + 40),
		.synced = coil_get_le64(buf + 48),
	};
	if (!jchunk_valid(&t))
		return -EIO;
	*h = t;
	return 0;
}

int fmt_jchunk_verify_payload(const struct fmt_jchunk *h, const uint8_t *payload, size_t len)
{
	if (!h || !payload || len < h->payload_len)
		return -EIO;
	return fmt_csum(payload, h->payload_len) == h->payload_csum ? 0 : -EIO;
}

int fmt_jchunk_seal(uint8_t *chunk, size_t cap, uint64_t store_id, uint64_t seq,
		    uint64_t synced, uint32_t payload_len, uint32_t nrec,
		    uint32_t align)
{
	if (!chunk || (align != FMT_JSECT && align != FMT_BLOCK))
		return -EINVAL;
	uint64_t total = COIL_ALIGN_UP((uint64_t)FMT_JCHUNK_HDR + payload_len, align);
	if (total > INT32_MAX)
		return -EINVAL;
	if (cap < total)
		return -ENOSPC;
	uint8_t *payload = chunk + FMT_JCHUNK_HDR;
	memset(payload + payload_len, 0, total - FMT_JCHUNK_HDR - payload_len);
	struct fmt_jchunk h = {
		.store_id = store_id,
		.seq = seq,
		.synced = synced,
		.nsect = (uint32_t)(total / FMT_JSECT),
		.payload_len = payload_len,
		.nrec = nrec,
		.payload_csum = fmt_csum(payload, payload_len),
	};
	int rc = fmt_jchunk_encode(&h, chunk, cap);
	return rc < 0 ? rc : (int)total;
}

/* ---- records ---- */

static int flags_ok(uint16_t type, uint16_t flags)
{
	if (type != FMT_JREC_WRITE)
		return flags == 0;
	return !(flags & ~(FMT_JREC_REMAP | FMT_JREC_REWRITE)) &&
	       flags != (FMT_JREC_REMAP | FMT_JREC_REWRITE);
}

/* Start a record: the header with a placeholder length and checksum. */
static int jrec_begin(struct fmt_cursor *c, size_t *start, uint16_t type, uint16_t flags)
{
	*start = c->pos;
	fmt_cursor_put_u16(c, type);
	fmt_cursor_put_u16(c, flags);
	fmt_cursor_put_u32(c, 0);
	fmt_cursor_put_u64(c, 0);
	return c->err;
}

/* Close the record begun at @start: body length and checksum. */
static int jrec_end(struct fmt_cursor *c, size_t start)
{
	if (c->err)
		return c->err;
	size_t body = c->pos - start - FMT_JREC_HDR;
	if (body > UINT32_MAX) {
		fmt_cursor_rewind(c, start);
		return -EINVAL;
	}
	uint8_t *h = c->p + start;
	coil_put_le32(h + 4, (uint32_t)body);
	coil_put_le64(h + 8, fmt_jrec_csum(h, h + FMT_JREC_HDR, body));
	return 0;
}

int fmt_jrec_put_create(struct fmt_cursor *c, uint64_t obj_id, const char *name, size_t name_len)
{
	size_t start;
	if (!fmt_name_ok(name, name_len))
		return -EINVAL;
	jrec_begin(c, &start, FMT_JREC_CREATE, 0);
	fmt_cursor_put_u64(c, obj_id);
	fmt_cursor_put_u16(c, (uint16_t)name_len);
	fmt_cursor_put_bytes(c, name, name_len);
	return jrec_end(c, start);
}

int fmt_jrec_put_remove(struct fmt_cursor *c, uint64_t obj_id)
{
	size_t start;
	jrec_begin(c, &start, FMT_JREC_REMOVE, 0);
	fmt_cursor_put_u64(c, obj_id);
	return jrec_end(c, start);
}

int fmt_jrec_put_truncate(struct fmt_cursor *c, uint64_t obj_id, uint64_t size)
{
	size_t start;
	jrec_begin(c, &start, FMT_JREC_TRUNCATE, 0);
	fmt_cursor_put_u64(c, obj_id);
	fmt_cursor_put_u64(c, size);
	return jrec_end(c, start);
}

int fmt_jrec_put_dict(struct fmt_cursor *c, uint32_t dict_id, uint64_t obj_id)
{
	size_t start;
	if (dict_id == 0)
		return -EINVAL;
	jrec_begin(c, &start, FMT_JREC_DICT, 0);
	fmt_cursor_put_u32(c, dict_id);
	fmt_cursor_put_u64(c, obj_id);
	return jrec_end(c, start);
}


/* RENAME and CLONE: two ids, then a name. */
static int put_ids_name(struct fmt_cursor *c, uint16_t type, uint64_t a, uint64_t b,
			const char *name, size_t name_len)
{
	size_t start;
	if (!fmt_name_ok(name, name_len) || a == b)
		return -EINVAL;
	jrec_begin(c, &start, type, 0);
	fmt_cursor_put_u64(c, a);
	fmt_cursor_put_u64(c, b);
	fmt_cursor_put_u16(c, (uint16_t)name_len);
	fmt_cursor_put_bytes(c, name, name_len);
	return jrec_end(c, start);
}

int fmt_jrec_put_rename(struct fmt_cursor *c, uint64_t obj_id, uint64_t replaced,
			const char *name, size_t name_len)
{
	return put_ids_name(c, FMT_JREC_RENAME, obj_id, replaced, name, name_len);
}

int fmt_jrec_put_clone(struct fmt_cursor *c, uint64_t src_id, uint64_t dst_id,
		       const char *name, size_t name_len)
{
	return put_ids_name(c, FMT_JREC_CLONE, src_id, dst_id, name, name_len);
}

int fmt_jrec_put_batch(struct fmt_cursor *c, uint32_t n_records)
{
	size_t start;
	if (n_records == 0 || n_records > FMT_BATCH_RECS_MAX)
		return -EINVAL;
	jrec_begin(c, &start, FMT_JREC_BATCH, 0);
	fmt_cursor_put_u32(c, n_records);
	fmt_cursor_put_u32(c, 0);
	return jrec_end(c, start);
}

int fmt_jrec_write_begin(struct fmt_cursor *c, size_t *mark, uint16_t flags, uint64_t obj_id,
			 uint64_t off, uint64_t len)
{
	uint64_t end;
	if (!mark || !flags_ok(FMT_JREC_WRITE, flags) || coil_add_overflows(off, len, &end))
		return -EINVAL;
	jrec_begin(c, mark, FMT_JREC_WRITE, flags);
	fmt_cursor_put_u64(c, obj_id);
	fmt_cursor_put_u64(c, off);
	fmt_cursor_put_u64(c, len);
	fmt_cursor_put_u32(c, 0); /* n_extents, set by fmt_jrec_write_end */
	return c->err;
}

int fmt_jrec_write_end(struct fmt_cursor *c, size_t mark, uint32_t n_extents)
{
	if (c->err)
		return c->err;
	if (mark > c->pos || c->pos - mark < FMT_JREC_HDR + WRITE_FIXED)
		return -EINVAL;
	coil_put_le32(c->p + mark + FMT_JREC_HDR + 24, n_extents);
	int rc = jrec_end(c, mark);
	if (rc < 0)
		return rc;
	/* Decode what was just built: coil never journals a record its own
	 * replay would reject (extent outside the write, wrong count). */
	struct fmt_cursor rd;
	struct fmt_jrec r;
	struct fmt_jrec_write w;
	fmt_cursor_init_ro(&rd, c->p + mark, c->pos - mark);
	if (fmt_jrec_next(&rd, &r) != 1 || fmt_jrec_write_decode(&r, &w) < 0) {
		fmt_cursor_rewind(c, mark);
		return -EINVAL;
	}
	return 0;
}

int fmt_jrec_put_write(struct fmt_cursor *c, uint16_t flags, uint64_t obj_id, uint64_t off,
		       uint64_t len, const struct fmt_extent *ext, uint32_t n_extents)
{
	size_t mark;
	if (n_extents && !ext)
		return -EINVAL;
	int rc = fmt_jrec_write_begin(c, &mark, flags, obj_id, off, len);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < n_extents; i++) {
		rc = fmt_cursor_put_extent(c, &ext[i]);
		if (rc == -EINVAL) {
			fmt_cursor_rewind(c, mark);
			return rc;
		}
		if (rc < 0)
			return rc;
	}
	return fmt_jrec_write_end(c, mark, n_extents);
}

static int jrec_next(struct fmt_cursor *c, struct fmt_jrec *out, bool known)
{
	if (c->err)
		return -EIO;
	if (c->pos == c->len)
		return 0;
	const uint8_t *h = fmt_cursor_get_ptr(c, FMT_JREC_HDR);
	if (!h)
		return -EIO;
	uint16_t type = coil_get_le16(h);
	uint16_t flags = coil_get_le16(h + 2);
	uint32_t len = coil_get_le32(h + 4);
	const uint8_t *body = fmt_cursor_get_ptr(c, len);
	if (!body)
		return -EIO;
	if (!known && fmt_jrec_csum(h, body, len) != coil_get_le64(h + 8))
		goto bad;
	if (type < FMT_JREC_CREATE || type > FMT_JREC_CLONE || !flags_ok(type, flags))
		goto bad;
	out->type = type;
	out->flags = flags;
	out->len = len;
	out->body = body;
	out->known = known;
	return 1;
bad:
	c->err = -EIO;
	return -EIO;
}

int fmt_jrec_next(struct fmt_cursor *c, struct fmt_jrec *out)
{
	return jrec_next(c, out, false);
}

int fmt_jrec_next_known(struct fmt_cursor *c, struct fmt_jrec *out)
{
	return jrec_next(c, out, true);
}

int fmt_jrec_create_decode(const struct fmt_jrec *r, struct fmt_jrec_create *out)
{
	if (r->type != FMT_JREC_CREATE || r->len < 10)
		return -EIO;
	uint16_t n = coil_get_le16(r->body + 8);
	const char *name = (const char *)r->body + 10;
	if (r->len != 10u + n || !fmt_name_ok(name, n))
		return -EIO;
	out->obj_id = coil_get_le64(r->body);
	out->name_len = n;
	out->name = name;
	return 0;
}

int fmt_jrec_remove_decode(const struct fmt_jrec *r, struct fmt_jrec_remove *out)
{
	if (r->type != FMT_JREC_REMOVE || r->len != 8)
		return -EIO;
	out->obj_id = coil_get_le64(r->body);
	return 0;
}

int fmt_jrec_truncate_decode(const struct fmt_jrec *r, struct fmt_jrec_truncate *out)
{
	if (r->type != FMT_JREC_TRUNCATE || r->len != 16)
		return -EIO;
	out->obj_id = coil_get_le64(r->body);
	out->size = coil_get_le64(r->body + 8);
	return 0;
}

int fmt_jrec_dict_decode(const struct fmt_jrec *r, struct fmt_jrec_dict *out)
{
	if (r->type != FMT_JREC_DICT || r->len != 12)
		return -EIO;
	out->dict_id = coil_get_le32(r->body);
	out->obj_id = coil_get_le64(r->body + 4);
	if (out->dict_id == 0)
		return -EIO;
	return 0;
}

/* RENAME and CLONE bodies: two different ids, a name. */
static int ids_name_decode(const struct fmt_jrec *r, uint16_t type, uint64_t *a,
			   uint64_t *b, uint16_t *name_len, const char **name)
{
	if (r->type != type || r->len < 18)
		return -EIO;
	uint16_t n = coil_get_le16(r->body + 16);
	const char *nm = (const char *)r->body + 18;
	if (r->len != 18u + n || !fmt_name_ok(nm, n))
		return -EIO;
	*a = coil_get_le64(r->body);
	*b = coil_get_le64(r->body + 8);
	if (*a == *b)
		return -EIO;
	*name_len = n;
	*name = nm;
	return 0;
}

int fmt_jrec_rename_decode(const struct fmt_jrec *r, struct fmt_jrec_rename *out)
{
	return ids_name_decode(r, FMT_JREC_RENAME, &out->obj_id, &out->replaced,
			       &out->name_len, &out->name);
}

int fmt_jrec_clone_decode(const struct fmt_jrec *r, struct fmt_jrec_clone *out)
{
	return ids_name_decode(r, FMT_JREC_CLONE, &out->src_id, &out->dst_id,
			       &out->name_len, &out->name);
}

int fmt_jrec_batch_decode(const struct fmt_jrec *r, struct fmt_jrec_batch *out)
{
	if (r->type != FMT_JREC_BATCH || r->len != 8 || coil_get_le32(r->body + 4))
		return -EIO;
	out->n_records = coil_get_le32(r->body);
	if (out->n_records == 0 || out->n_records > FMT_BATCH_RECS_MAX)
		return -EIO;
	return 0;
}

int fmt_jrec_write_decode(const struct fmt_jrec *r, struct fmt_jrec_write *out)
{
	uint64_t end;
	if (r->type != FMT_JREC_WRITE || r->len < WRITE_FIXED)
		return -EIO;
	struct fmt_jrec_write w = {
		.flags = r->flags,
		.obj_id = coil_get_le64(r->body),
		.off = coil_get_le64(r->body + 8),
		.len = coil_get_le64(r->body + 16),
		.n_extents = coil_get_le32(r->body + 24),
	};
	if (coil_add_overflows(w.off, w.len, &end))
		return -EIO;
	size_t rest = r->len - WRITE_FIXED;
	/* The count is checked against the bytes before anyone loops on it. */
	if ((uint64_t)w.n_extents * FMT_EXTENT_MIN > rest)
		return -EIO;
	fmt_cursor_init_ro(&w.ext, r->body + WRITE_FIXED, rest);

	/* Validate every extent now, so applying the record cannot fail
	 * halfway through. */
	struct fmt_cursor chk = w.ext;
	struct fmt_extent e, prev = { 0 };
	bool rewrite = w.flags & FMT_JREC_REWRITE;
	if (rewrite && w.n_extents % 2)
		return -EIO;
	for (uint32_t i = 0; i < w.n_extents; i++) {
		if (fmt_cursor_get_extent_as(&chk, &e, !r->known) < 0)
			return -EIO;
		if (e.obj_off < w.off || e.obj_off + e.len > end)
			return -EIO;
		/* a rewrite's pair: expected then new, same object bytes,
		 * both on the device */
		if (rewrite && (e.blob.flags & FMT_BLOB_INLINE))
			return -EIO;
		if (rewrite && i % 2 &&
		    (e.obj_off != prev.obj_off || e.len != prev.len))
			return -EIO;
		prev = e;
	}
	if (chk.pos != chk.len)
		return -EIO;
	*out = w;
	return 0;
}

int fmt_jrec_write_next(struct fmt_jrec_write *w, struct fmt_extent *e)
{
	if (w->ext_done >= w->n_extents)
		return 0;
	/* fmt_jrec_write_decode checked these bytes whole, inline blobs
	 * too: only the descriptor is decoded (and checked) again */
	if (fmt_cursor_get_extent_as(&w->ext, e, false) < 0)
		return -EIO;
	w->ext_done++;
	return 1;
}

int fmt_jrec_write_peek(struct fmt_jrec_write *w, uint64_t *obj_off)
{
	size_t size;

	if (w->ext_done >= w->n_extents || w->ext.err ||
	    !fmt_extent_peek(w->ext.p + w->ext.pos, w->ext.len - w->ext.pos,
			     obj_off, &size))
		return 0;
	w->ext.pos += size;
	w->ext_done++;
	return 1;
}
