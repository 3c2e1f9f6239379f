/* format/extent.c — the blob descriptor and the extent record that carries
 * it.  The descriptor lives in the *referencing* record so a misdirected or
 * stale blob write can never vouch for itself. */
#include "format/format_internal.h"

#include <stdbool.h>

_Static_assert(FMT_EXTENT_FIXED == 40, "extent fixed part is 40 bytes");
_Static_assert(FMT_EXTENT_MIN == FMT_EXTENT_FIXED + 8, "one csum at least");

int fmt_blob_check(const struct fmt_blob *b)
{
	if (b->logical_len == 0 || b->logical_len > FMT_BLOB_MAX ||
	    (b->flags & ~(FMT_BLOB_INLINE | FMT_BLOB_OPTIMIZED)))
		return -EIO;
	if ((b->flags & FMT_BLOB_INLINE) &&
	    (b->dev_off || b->stored_len > FMT_INLINE_MAX))
		return -EIO;
	switch (b->codec) {
	case FMT_CODEC_RAW:
		/* A raw blob is verified sector by sector; a dictionary
		 * would mean nothing. */
		if (b->stored_len != b->logical_len || b->dict_id ||
		    b->n_csums != (b->logical_len + FMT_BLOCK - 1) / FMT_BLOCK)
			return -EIO;
		return 0;
	case FMT_CODEC_ZSTD:
		/* stored <= logical keeps fmt_blob_bound() a true bound for
		 * read buffers; the encoder keeps zstd only at <= 7/8. */
		if (b->n_csums != 2 || b->stored_len == 0 || b->stored_len > b->logical_len)
			return -EIO;
		return 0;
	default:
		return -EIO;
	}
}

/* Record-level rules on top of the descriptor's. */
static int extent_check(const struct fmt_extent *e)
{
	uint64_t end;

	if (fmt_blob_check(&e->blob) < 0)
		return -EIO;
	if (e->len == 0 || (uint64_t)e->blob_skip + e->len > e->blob.logical_len)
		return -EIO;
	if (coil_add_overflows(e->obj_off, e->len, &end))
		return -EIO;
	return 0;
}

size_t fmt_extent_size(const struct fmt_extent *e)
{
	size_t n = FMT_EXTENT_FIXED + 8u * (size_t)e->blob.n_csums;

	if (e->blob.flags & FMT_BLOB_INLINE)
		n += e->blob.stored_len;
	return n;
}

/* An inline blob's bytes against its checksums: raw per sector, zstd the
 * stored bytes (the logical ones are checked when it is decoded). */
static int inline_check(const struct fmt_blob *b, const uint8_t *p)
{
	if (b->codec == FMT_CODEC_RAW)
		return fmt_blob_verify_sectors(b, 0, p, b->stored_len) < 0 ?
		       -EIO : 0;
	return fmt_csum(p, b->stored_len) == b->csums[0] ? 0 : -EIO;
}

int fmt_extent_encode(const struct fmt_extent *e, uint8_t *buf, size_t len)
{
	if (!e || !buf || extent_check(e) < 0)
		return -EINVAL;
	if ((e->blob.flags & FMT_BLOB_INLINE) && !e->inl)
		return -EINVAL;
	size_t need = fmt_extent_size(e);
	if (len < need)
		return -ENOSPC;
	coil_put_le64(buf + 0, e->obj_off);
	coil_put_le32(buf + 8, e->len);
	coil_put_le32(buf + 12, e->blob_skip);
	coil_put_le64(buf + 16, e->blob.dev_off);
	coil_put_le32(buf + 24, e->blob.stored_len);
	coil_put_le32(buf + 28, e->blob.logical_len);
	buf[32] = e->blob.codec;
	buf[33] = e->blob.flags;
	coil_put_le16(buf + 34, e->blob.n_csums);
	coil_put_le32(buf + 36, e->blob.dict_id);
	for (unsigned i = 0; i < e->blob.n_csums; i++)
		coil_put_le64(buf + FMT_EXTENT_FIXED + 8 * i, e->blob.csums[i]);
	if (e->blob.flags & FMT_BLOB_INLINE)
		memcpy(buf + FMT_EXTENT_FIXED + 8u * e->blob.n_csums, e->inl,
		       e->blob.stored_len);
	return (int)need;
}

/* fmt_extent_decode; @inl_csum false skips an inline blob's checksums
 * (bytes the caller had checked before, in memory since). */
static int extent_decode(struct fmt_extent *e, const uint8_t *buf,
			 size_t len, bool inl_csum)
{
	if (!e || !buf || len < FMT_EXTENT_FIXED)
		return -EIO;
	uint16_t n = coil_get_le16(buf + 34);
	/* Count checked before anything is read through it. */
	if (n > FMT_CSUMS_MAX || len < FMT_EXTENT_FIXED + 8u * n)
		return -EIO;
	e->obj_off = coil_get_le64(buf + 0);
	e->len = coil_get_le32(buf + 8);
	e->blob_skip = coil_get_le32(buf + 12);
	e->blob.dev_off = coil_get_le64(buf + 16);
	e->blob.stored_len = coil_get_le32(buf + 24);
	e->blob.logical_len = coil_get_le32(buf + 28);
	e->blob.codec = buf[32];
	e->blob.flags = buf[33];
	e->blob.n_csums = n;
	e->blob.dict_id = coil_get_le32(buf + 36);
	for (unsigned i = 0; i < n; i++)
		e->blob.csums[i] = coil_get_le64(buf + FMT_EXTENT_FIXED + 8 * i);
	e->inl = NULL;
	if (extent_check(e) < 0)
		return -EIO;
	size_t need = fmt_extent_size(e);
	if (e->blob.flags & FMT_BLOB_INLINE) {
		if (len < need)
			return -EIO;
		e->inl = buf + FMT_EXTENT_FIXED + 8u * n;
		if (inl_csum && inline_check(&e->blob, e->inl) < 0)
			return -EIO;
	}
	return (int)need;
}

int fmt_extent_decode(struct fmt_extent *e, const uint8_t *buf, size_t len)
{
	return extent_decode(e, buf, len, true);
}

int fmt_extent_peek(const uint8_t *buf, size_t len, uint64_t *obj_off,
		    size_t *size)
{
	size_t n;

	if (!buf || len < FMT_EXTENT_FIXED)
		return 0;
	n = FMT_EXTENT_FIXED + 8u * (size_t)coil_get_le16(buf + 34);
	if (buf[33] & FMT_BLOB_INLINE)
		n += coil_get_le32(buf + 24);
	if (n > len)
		return 0;
	*obj_off = coil_get_le64(buf);
	*size = n;
	return 1;
}

int fmt_cursor_put_extent(struct fmt_cursor *c, const struct fmt_extent *e)
{
	if (c->err)
		return c->err;
	if (extent_check(e) < 0 ||
	    ((e->blob.flags & FMT_BLOB_INLINE) && !e->inl))
		return -EINVAL;
	uint8_t *q = fmt_cursor_put_ptr(c, fmt_extent_size(e));
	if (!q)
		return c->err;
	int rc = fmt_extent_encode(e, q, fmt_extent_size(e));
	COIL_ASSERT(rc == (int)fmt_extent_size(e));
	return 0;
}

int fmt_cursor_get_extent(struct fmt_cursor *c, struct fmt_extent *e)
{
	return fmt_cursor_get_extent_as(c, e, true);
}

int fmt_cursor_get_extent_as(struct fmt_cursor *c, struct fmt_extent *e,
			     bool inl_csum)
{
	if (c->err)
		return c->err;
	int rc = extent_decode(e, c->p + c->pos, c->len - c->pos, inl_csum);
	if (rc < 0) {
		c->err = -EIO;
		return -EIO;
	}
	c->pos += (size_t)rc;
	return 0;
}
