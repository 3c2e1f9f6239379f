/* format/format.h — every byte coil puts on disk: encode/decode pairs for the
 * superblock, segment header, extent record (blob descriptor), journal chunk
 * and records, checkpoint header and payload, and the blob codec.
 *
 * docs/format.md is the contract; this header is its C face.
 *
 * Rules of the module:
 *   - pure: no I/O, no threads, no allocation (zstd contexts come from the
 *     caller, one per pool worker);
 *   - every decoder takes the buffer length, never reads past it, and returns
 *     a negative errno for bad bytes (-EIO) or a caller's short buffer
 *     (-EINVAL); nothing here aborts on bad input;
 *   - every encoder validates what it is given (-EINVAL) so coil never writes
 *     a structure its own decoder would reject;
 *   - integers are little-endian, checksums XXH3-64 with seed 0 (journal
 *     records seed theirs with their own header: fmt_jrec_csum).
 *
 * Reserved fields and padding are zero in version 1 and decoders reject
 * anything else, so encode(decode(x)) == x for every structure.
 *
 * Pointers returned inside decoded structures (record bodies, names, extent
 * cursors) point into the caller's buffer and are valid as long as it is.
 */
#ifndef COIL_FORMAT_H
#define COIL_FORMAT_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <errno.h>
#include <zstd.h>

#include "common/common.h"

#define FMT_VERSION 1u
#define FMT_BLOCK 4096u
#define FMT_BLOB_MAX (1u << 20)
#define FMT_CSUMS_MAX (FMT_BLOB_MAX / FMT_BLOCK) /* 256 */

enum fmt_codec { FMT_CODEC_RAW = 0, FMT_CODEC_ZSTD = 1 };

/* XXH3-64, seed 0: the one checksum of the format. */
uint64_t fmt_csum(const void *p, size_t len);
/* fmt_csum of bytes that arrive in pieces (a checkpoint read through a
 * window): the value fmt_csum gives over all of them at once. */
struct fmt_csum_stream;
struct fmt_csum_stream *fmt_csum_stream_new(void); /* NULL: ENOMEM */
void fmt_csum_stream_reset(struct fmt_csum_stream *h);
void fmt_csum_stream_add(struct fmt_csum_stream *h, const void *p, size_t len);
uint64_t fmt_csum_stream_value(const struct fmt_csum_stream *h);
void fmt_csum_stream_free(struct fmt_csum_stream *h);
/* Reserved bytes and padding are zero; a later use of reserved bytes bumps
 * the version, so a non-zero one is corruption, not a newer writer.
 * @return 1 when the @n bytes at @p are all zero. */
static inline int fmt_all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* ---- bounds-checked cursor --------------------------------------------- */

/* A cursor over a caller's buffer.  Errors are sticky: after the first
 * failure every put/get is a no-op (gets return 0) and err keeps the first
 * code: -ENOSPC when a put does not fit, -EIO when a get runs past the end.
 * A writer can roll back a partial record with fmt_cursor_rewind(). */
struct fmt_cursor {
	uint8_t *p;
	size_t len, pos;
	int err;
	/* Bytes of the structure that follow the buffer, not in it yet (a
	 * reader that takes a large payload through a window of it): counts
	 * read from the structure are checked against what is left of it,
	 * fmt_cursor_left().  0 unless the reader sets it. */
	uint64_t more;
};

static inline void fmt_cursor_init(struct fmt_cursor *c, void *p, size_t len)
{
	c->p = (uint8_t *)p;
	c->len = len;
	c->pos = 0;
	c->err = 0;
	c->more = 0;
}

/* A cursor for reading only; the buffer is never written through it. */
static inline void fmt_cursor_init_ro(struct fmt_cursor *c, const void *p, size_t len)
{
	fmt_cursor_init(c, (void *)(uintptr_t)p, len);
}

static inline size_t fmt_cursor_remaining(const struct fmt_cursor *c)
{
	return c->err ? 0 : c->len - c->pos;
}

/* What is left of the structure: the buffer's remaining bytes and those
 * that follow it. */
static inline uint64_t fmt_cursor_left(const struct fmt_cursor *c)
{
	return c->err ? 0 : c->len - c->pos + c->more;
}

/* Back to @pos (<= current pos) and clear the error: drops a partial put. */
static inline void fmt_cursor_rewind(struct fmt_cursor *c, size_t pos)
{
	if (pos <= c->pos)
		c->pos = pos;
	c->err = 0;
}

/* Reserve @n bytes for writing; NULL (and err = -ENOSPC) if they don't fit. */
static inline uint8_t *fmt_cursor_put_ptr(struct fmt_cursor *c, size_t n)
{
	if (c->err)
		return NULL;
	if (n > c->len - c->pos) {
		c->err = -ENOSPC;
		return NULL;
	}
	uint8_t *q = c->p + c->pos;
	c->pos += n;
	return q;
}

/* Consume @n bytes for reading; NULL (and err = -EIO) if they aren't there. */
static inline const uint8_t *fmt_cursor_get_ptr(struct fmt_cursor *c, size_t n)
{
	if (c->err)
		return NULL;
	if (n > c->len - c->pos) {
		c->err = -EIO;
		return NULL;
	}
	const uint8_t *q = c->p + c->pos;
	c->pos += n;
	return q;
}

static inline void fmt_cursor_put_u8(struct fmt_cursor *c, uint8_t v)
{
	uint8_t *q = fmt_cursor_put_ptr(c, 1);
	if (q)
		q[0] = v;
}
static inline void fmt_cursor_put_u16(struct fmt_cursor *c, uint16_t v)
{
	uint8_t *q = fmt_cursor_put_ptr(c, 2);
	if (q)
		coil_put_le16(q, v);
}
static inline void fmt_cursor_put_u32(struct fmt_cursor *c, uint32_t v)
{
	uint8_t *q = fmt_cursor_put_ptr(c, 4);
	if (q)
		coil_put_le32(q, v);
}
static inline void fmt_cursor_put_u64(struct fmt_cursor *c, uint64_t v)
{
	uint8_t *q = fmt_cursor_put_ptr(c, 8);
	if (q)
		coil_put_le64(q, v);
}
static inline void fmt_cursor_put_bytes(struct fmt_cursor *c, const void *src, size_t n)
{
	uint8_t *q = fmt_cursor_put_ptr(c, n);
	if (q && n)
		memcpy(q, src, n);
}
static inline uint8_t fmt_cursor_get_u8(struct fmt_cursor *c)
{
	const uint8_t *q = fmt_cursor_get_ptr(c, 1);
	return q ? q[0] : 0;
}
static inline uint16_t fmt_cursor_get_u16(struct fmt_cursor *c)
{
	const uint8_t *q = fmt_cursor_get_ptr(c, 2);
	return q ? coil_get_le16(q) : 0;
}
static inline uint32_t fmt_cursor_get_u32(struct fmt_cursor *c)
{
	const uint8_t *q = fmt_cursor_get_ptr(c, 4);
	return q ? coil_get_le32(q) : 0;
}
static inline uint64_t fmt_cursor_get_u64(struct fmt_cursor *c)
{
	const uint8_t *q = fmt_cursor_get_ptr(c, 8);
	return q ? coil_get_le64(q) : 0;
}
static inline void fmt_cursor_get_bytes(struct fmt_cursor *c, void *dst, size_t n)
{
	const uint8_t *q = fmt_cursor_get_ptr(c, n);
	if (q && n)
		memcpy(dst, q, n);
}

/* ---- superblock --------------------------------------------------------- */

#define FMT_SUPER_SIZE FMT_BLOCK
#define FMT_SUPER_CSUM_OFF 4088u
#define FMT_SUPER_CLEAN 0x1u           /* flags bit 0: clean shutdown */
#define FMT_SUPER_FILLED 0x2u          /* bit 1: the file was written whole at
                                          creation; freed segments of a
                                          regular file are not punched */
#define FMT_CKPT_SLOT_NONE 0xFFFFFFFFu /* ckpt_slot: no checkpoint yet */
/* Superblock versions: 1 (fixed layout, no feature words) and 2 (feature
 * words at bytes 160 and 168).  Structures other than the superblock stay
 * at FMT_VERSION; a format change after this one sets a feature bit
 * (docs/format.md, "Format changes"), it does not bump a version. */
#define FMT_SUPER_VERSION_V1 1u
#define FMT_SUPER_VERSION 2u
/* incompat bit 0: the data area grows.  segment_count is the number of
 * segments in use (the file ends at or after data_off +
 * segment_count * segment_size) and store_size is the largest the store
 * may become.  A reader that ignored it would read a shorter file as
 * damaged, or write segments past the file's end that no one allocated. */
#define FMT_INCOMPAT_GROW 0x1ull
/* incompat bit 1: extents may carry their blob's stored bytes inline
 * (FMT_BLOB_INLINE) in journal records and checkpoints.  A reader that
 * ignored it would reject those extents as damaged (flags != 0). */
#define FMT_INCOMPAT_INLINE 0x2ull
/* incompat bit 2: the checkpoint the superblock names is followed, in its
 * area, by delta_count delta checkpoints (delta_bytes bytes, the last one's
 * header checksum delta_csum), each holding what changed since the one
 * before; replay starts at the last delta's replay point.  Set exactly
 * while delta_count > 0.  A reader that ignored it would load the base
 * alone and replay from a journal point already released. */
#define FMT_INCOMPAT_CKPT_DELTA 0x4ull
/* incompat bit 3: journal chunks may start and end on any FMT_JSECT
 * boundary (their length in sectors, header bytes 36..40) instead of whole
 * blocks, so small records share a block.  A reader that ignored it would
 * stop replay at the first such chunk and lose the synced writes after it. */
#define FMT_INCOMPAT_JSECT 0x8ull
/* incompat bit 4: the journal may hold RENAME, CLONE and BATCH records
 * (a batch: the records after it that apply together or not at all).  A
 * reader that ignored it would stop replay at the first one and lose the
 * synced writes after it, or apply part of a batch. */
#define FMT_INCOMPAT_BATCH 0x10ull
/* incompat bit 5: WRITE records may carry FMT_JREC_REWRITE (the
 * optimizer's re-encoded blobs, installed only where the map still holds
 * what was read) and blobs may carry FMT_BLOB_OPTIMIZED.  A reader that
 * ignored it would install a rewrite over newer data, or reject the
 * record and stop replay there. */
#define FMT_INCOMPAT_REWRITE 0x20ull
#define FMT_INCOMPAT_KNOWN \
	(FMT_INCOMPAT_GROW | FMT_INCOMPAT_INLINE | FMT_INCOMPAT_CKPT_DELTA | \
	 FMT_INCOMPAT_JSECT | FMT_INCOMPAT_BATCH | FMT_INCOMPAT_REWRITE)
#define FMT_COMPAT_KNOWN 0x0ull
/* fmt_super_decode: a superblock that is intact (checksum) but needs a
 * feature or version this code does not know.  The same value as the
 * public COIL_EFEATURE. */
#define FMT_EFEATURE EPROTONOSUPPORT
#define FMT_JOURNAL_OFF (2u * FMT_BLOCK)

struct fmt_super {
	uint32_t version;     /* FMT_SUPER_VERSION (or _V1 for an old store) */
	uint32_t block_size;  /* FMT_BLOCK */
	uint8_t uuid[16];     /* first 8 bytes (LE) are the store_id */
	uint64_t seq;         /* written to copy seq % 2 */
	uint64_t store_size;
	uint64_t journal_off; /* FMT_JOURNAL_OFF */
	uint64_t journal_len;
	uint64_t ckpt_off[2];
	uint64_t ckpt_len;
	uint64_t data_off;    /* segment aligned */
	uint32_t segment_size;
	uint32_t segment_count;
	uint32_t max_blob;
	uint32_t flags;       /* FMT_SUPER_CLEAN, FMT_SUPER_FILLED */
	uint32_t ckpt_slot;   /* 0, 1, FMT_CKPT_SLOT_NONE */
	uint64_t ckpt_seq;
	uint64_t ckpt_bytes;  /* header block + payload */
	uint64_t ckpt_csum;   /* fmt_ckpt_block_csum() of the header block */
	uint64_t replay_off;  /* relative to journal_off, BLOCK aligned */
	uint64_t replay_seq;
	/* version 2 only (zero in version 1): feature words.  Decode keeps
	 * compat bits it does not know (encode(decode(x)) == x); the engine
	 * clears them when it rewrites the superblock. */
	uint64_t compat;
	uint64_t incompat;
	/* FMT_INCOMPAT_CKPT_DELTA only (zero without it): the deltas that
	 * follow the checkpoint in its area, from the BLOCK after its last
	 * byte */
	uint64_t delta_bytes; /* BLOCK multiple */
	uint32_t delta_count;
	uint64_t delta_csum;  /* the last delta's header checksum */
};

static inline uint64_t fmt_super_store_id(const struct fmt_super *sb)
{
	return coil_get_le64(sb->uuid);
}

/* Writes one whole BLOCK (zero padded).  @return FMT_BLOCK, or -EINVAL when
 * len < FMT_BLOCK or @sb would not decode (geometry, version, slot...). */
int fmt_super_encode(const struct fmt_super *sb, uint8_t *buf, size_t len);
/* @return 0; -EINVAL if len < FMT_BLOCK; -EIO for bad magic, checksum or
 * geometry; -FMT_EFEATURE for an intact superblock of a later version or
 * with an incompat bit this code does not know (checked right after the
 * checksum, before any other field is trusted). */
int fmt_super_decode(struct fmt_super *sb, const uint8_t *buf, size_t len);
/* 1 when the BLOCK at @buf starts with the superblock magic, whatever the
 * rest holds: a copy without it was never a coil superblock, a copy with it
 * that does not decode is a damaged one. */
int fmt_super_has_magic(const uint8_t *buf, size_t len);
/* Zeroes @sb and fills version (FMT_SUPER_VERSION), block_size, max_blob,
 * the geometry for a new store of @store_size bytes (docs/format.md) and
 * ckpt_slot = NONE; the caller sets uuid and seq, and for a growing store
 * incompat |= FMT_INCOMPAT_GROW and a smaller segment_count.  @return 0, -EINVAL (max_blob not a power of two
 * in [4096, 1 MiB]), -ENOSPC (fewer than 2 data segments fit). */
int fmt_super_layout(uint64_t store_size, uint32_t max_blob, struct fmt_super *sb);
/* Choose between the two decoded copies (rc = their decode results).
 * @return 0 = A, 1 = B (valid one with the larger seq; A on a tie), -EIO when
 * neither is valid or both are valid but belong to different stores (uuid):
 * an interrupted create must not resurrect an older store. */
int fmt_super_pick(const struct fmt_super *a, int a_rc, const struct fmt_super *b, int b_rc);
/* Segments the layout has room for: (store_size - data_off) / segment_size,
 * at most UINT32_MAX.  A fixed store uses them all; a growing one starts
 * with fewer. */
uint32_t fmt_super_seg_capacity(const struct fmt_super *sb);

/* ---- segment header ----------------------------------------------------- */

#define FMT_SEGHDR_SIZE 40u /* encoded bytes at the start of the segment BLOCK */

struct fmt_seghdr {
	uint64_t store_id;
	uint32_t index;
	uint64_t open_seq;
};

/* Writes one whole BLOCK (header + zeros).  @return FMT_BLOCK or -EINVAL. */
int fmt_seghdr_encode(const struct fmt_seghdr *h, uint8_t *buf, size_t len);
/* Needs len >= FMT_SEGHDR_SIZE.  @return 0, -EINVAL (short), -EIO (bad).
 * The caller compares store_id and index with what it expects. */
int fmt_seghdr_decode(struct fmt_seghdr *h, const uint8_t *buf, size_t len);

/* ---- blob descriptor and extent record ---------------------------------- */

/* What the extent record carries about a blob. */
struct fmt_blob {
	uint64_t dev_off;     /* absolute byte offset of the stored bytes */
	uint32_t stored_len, logical_len;
	uint8_t codec;        /* enum fmt_codec */
	uint8_t flags;        /* 0 or FMT_BLOB_INLINE */
	uint16_t n_csums;     /* raw: ceil(logical/4096); zstd: 2 */
	uint32_t dict_id;     /* zstd dictionary, 0 = none */
	uint64_t csums[FMT_CSUMS_MAX]; /* raw: per sector; zstd: [stored, logical] */
};

/* blob flag: the blob lives in the record that describes it, not on the
 * device: its stored_len stored bytes follow the extent's checksums,
 * dev_off is 0, stored_len <= FMT_INLINE_MAX.  Small writes are kept this
 * way in the journal (and in checkpoints) until they are packed into a
 * segment; needs FMT_INCOMPAT_INLINE. */
#define FMT_BLOB_INLINE 0x1u
/* blob flag: the optimizer has been over this blob (re-encoded it, or
 * found nothing smaller): a later pass skips it.  Advisory: reads ignore
 * it.  Needs FMT_INCOMPAT_REWRITE. */
#define FMT_BLOB_OPTIMIZED 0x2u
#define FMT_INLINE_MAX (64u << 10)

/* Maps object bytes [obj_off, obj_off + len) onto the blob's logical bytes
 * [blob_skip, blob_skip + len). */
struct fmt_extent {
	uint64_t obj_off;
	uint32_t len, blob_skip;
	struct fmt_blob blob;
	/* FMT_BLOB_INLINE: the stored bytes (encode reads them; decode
	 * points into the caller's buffer after checking them against the
	 * blob's checksums).  NULL otherwise. */
	const uint8_t *inl;
};

#define FMT_EXTENT_FIXED 40u     /* encoded bytes before the csums */
#define FMT_EXTENT_MIN 48u       /* smallest valid encoding (one csum) */
/* largest encoding of an extent on the device / inline */
#define FMT_EXTENT_MAX (FMT_EXTENT_FIXED + 8u * FMT_CSUMS_MAX)
#define FMT_EXTENT_INLINE_MAX \
	(FMT_EXTENT_FIXED + 8u * (FMT_INLINE_MAX / FMT_BLOCK) + FMT_INLINE_MAX)

/* 0 if the blob descriptor is self-consistent (docs/format.md), else -EIO. */
int fmt_blob_check(const struct fmt_blob *b);
/* Encoded bytes of @e: 40 + 8 * n_csums (+ stored_len inline). */
size_t fmt_extent_size(const struct fmt_extent *e);
/* @return bytes written, -ENOSPC (buffer), -EINVAL (@e inconsistent). */
int fmt_extent_encode(const struct fmt_extent *e, uint8_t *buf, size_t len);
/* @return bytes consumed, or -EIO (short or inconsistent). */
int fmt_extent_decode(struct fmt_extent *e, const uint8_t *buf, size_t len);
/* Cursor forms: 0 or the cursor's (sticky) error. */
int fmt_cursor_put_extent(struct fmt_cursor *c, const struct fmt_extent *e);
int fmt_cursor_get_extent(struct fmt_cursor *c, struct fmt_extent *e);
/* The object offset of the extent at @buf and its encoded size, read
 * without checking it: a hint for a reader that runs ahead to warm its
 * cache (fmt_extent_decode checks the extent when it is used).  @return 1,
 * or 0 where @len cannot hold it. */
int fmt_extent_peek(const uint8_t *buf, size_t len, uint64_t *obj_off,
		    size_t *size);

/* ---- blob codec ---------------------------------------------------------- */

/* Worst-case stored bytes of a blob of @logical_len: the encoder keeps zstd
 * output only when it is <= 7/8 of the input, else stores raw, so the bound
 * is logical_len itself. */
size_t fmt_blob_bound(uint32_t logical_len);

/* Encode @len (1..FMT_BLOB_MAX) bytes of @src into @dst (dst_cap >= len;
 * dst must not overlap src, except dst == src when storing raw: the bytes
 * are described where they are, not copied).
 * level 0 or cctx NULL: raw; a negative level is zstd's fast mode.  With @cdict (its level wins) dict_id is
 * recorded (must be non-zero); without it dict_id must be 0.  zstd output is
 * kept only if stored <= len - len/8, else raw (src copied to dst).  Fills
 * codec, lengths, n_csums, csums, dict_id; dev_off = 0, flags = 0.
 * @return stored_len, -EINVAL (arguments, overlap), -ENOSPC (dst_cap < len). */
int fmt_blob_encode(ZSTD_CCtx *cctx, int level, const ZSTD_CDict *cdict, uint32_t dict_id,
		    const void *src, uint32_t len, void *dst, size_t dst_cap, struct fmt_blob *out);

/* Decode the @b->stored_len bytes at @stored into @dst and verify every
 * checksum (raw: each sector; zstd: stored bytes, then logical bytes).
 * Raw blobs may be decoded in place (dst == stored).  dict_id != 0 needs the
 * matching @ddict (without one: -EIO).  Never returns wrong bytes.
 * @return logical_len; -EIO on a bad descriptor, any mismatch, or a missing
 * dictionary; -EINVAL if stored_len < b->stored_len, dst_cap <
 * b->logical_len, or a needed dctx is missing. */
int fmt_blob_decode(ZSTD_DCtx *dctx, const ZSTD_DDict *ddict, const struct fmt_blob *b,
		    const void *stored, size_t stored_len, void *dst, size_t dst_cap);

/* Raw blobs: verify the sectors covering @len bytes of @data, which starts at
 * logical byte first_sector * 4096 (a partial read).  Bytes of @data past
 * logical_len (block padding) are ignored; every covered sector must be
 * whole within @data (or end at logical_len).
 * @return 0, -EIO (mismatch / bad descriptor), -EINVAL (zstd blob, range
 * outside the blob, len 0, or a sector cut short). */
int fmt_blob_verify_sectors(const struct fmt_blob *b, uint32_t first_sector,
			    const void *data, size_t len);

/* ---- journal ------------------------------------------------------------- */

#define FMT_JCHUNK_HDR 64u
/* The unit of a sector chunk's length and position (FMT_INCOMPAT_JSECT). */
#define FMT_JSECT 512u

/* A chunk's length is given in blocks (stores before FMT_INCOMPAT_JSECT) or
 * in sectors: exactly one of nblocks and nsect is nonzero. */
struct fmt_jchunk {
	uint64_t store_id, seq;
	uint32_t nblocks;      /* chunk bytes / BLOCK, or 0 */
	uint32_t nsect;        /* chunk bytes / FMT_JSECT, or 0 */
	uint32_t payload_len;  /* <= chunk bytes - 64 */
	uint32_t nrec;
	uint64_t payload_csum; /* fmt_csum of the payload_len payload bytes */
	/* Every chunk up to this seq was durable (a device flush covering it
	 * had completed) when this one was written; 0: none known.  Below
	 * seq.  Replay uses it to tell damage from an unflushed tail. */
	uint64_t synced;
};

/* The chunk's length in bytes. */
static inline uint64_t fmt_jchunk_len(const struct fmt_jchunk *h)
{
	return h->nsect ? (uint64_t)h->nsect * FMT_JSECT :
			  (uint64_t)h->nblocks * FMT_BLOCK;
}

/* Writes the 64-byte header.  @return FMT_JCHUNK_HDR, -EINVAL. */
int fmt_jchunk_encode(const struct fmt_jchunk *h, uint8_t *buf, size_t len);
/* Checks magic, version, header checksum and lengths (not the payload).
 * @return 0, -EINVAL (len < 64), -EIO.  Caller compares store_id and seq. */
int fmt_jchunk_decode(struct fmt_jchunk *h, const uint8_t *buf, size_t len);
/* @payload has @len bytes (the bytes after the header).  @return 0 or -EIO
 * (len < payload_len or checksum mismatch). */
int fmt_jchunk_verify_payload(const struct fmt_jchunk *h, const uint8_t *payload, size_t len);
/* Finish a chunk built in place: records were appended at
 * chunk + FMT_JCHUNK_HDR (payload_len bytes, nrec records).  Zero-pads to a
 * multiple of @align (FMT_JSECT or FMT_BLOCK), computes the payload
 * checksum, writes the header (length in sectors).
 * @return chunk bytes, -ENOSPC if cap is too small, -EINVAL. */
int fmt_jchunk_seal(uint8_t *chunk, size_t cap, uint64_t store_id, uint64_t seq,
		    uint64_t synced, uint32_t payload_len, uint32_t nrec,
		    uint32_t align);

enum fmt_jrec_type {
	FMT_JREC_CREATE = 1,
	FMT_JREC_REMOVE,
	FMT_JREC_TRUNCATE,
	FMT_JREC_WRITE,
	FMT_JREC_DICT,
	FMT_JREC_RENAME,       /* FMT_INCOMPAT_BATCH */
	FMT_JREC_BATCH,        /* FMT_INCOMPAT_BATCH */
	FMT_JREC_CLONE,        /* FMT_INCOMPAT_BATCH */
};
/* The most records a BATCH record may group. */
#define FMT_BATCH_RECS_MAX 65536u
#define FMT_JREC_HDR 16u
#define FMT_JREC_REMAP 0x1u    /* WRITE flag: relocation, size unchanged */
/* WRITE flag (FMT_INCOMPAT_REWRITE): the optimizer's rewrite, size
 * unchanged.  Its extents come in pairs over the same object bytes: what
 * the optimizer read (the expected extent and blob), then the re-encoded
 * blob that replaces it, installed only on the bytes the map still holds
 * the expected content at the same alignment (compare-and-swap).  Neither
 * blob of a pair is inline.  Not together with REMAP. */
#define FMT_JREC_REWRITE 0x2u
#define FMT_JREC_WRITE_FIXED 28u /* WRITE body before its extents */
#define FMT_NAME_MAX 255u

/* One record found in a payload; body points into the payload. */
struct fmt_jrec {
	uint16_t type, flags;
	uint32_t len;
	const uint8_t *body;
	/* from fmt_jrec_next_known: decoders skip the inline blobs'
	 * checksums too */
	bool known;
};

/* A record's checksum: XXH3-64 of the body seeded with the record's first 8
 * bytes (type, flags, len), so the header fields are covered too. */
uint64_t fmt_jrec_csum(const uint8_t *hdr, const uint8_t *body, size_t len);

/* Next record of a payload cursor (fmt_cursor_init_ro over the payload).
 * Checks header bounds, body checksum, known type and flags.
 * @return 1 got one, 0 end of payload, -EIO. */
int fmt_jrec_next(struct fmt_cursor *c, struct fmt_jrec *out);
/* fmt_jrec_next over a payload whose records fmt_jrec_next and their
 * decoders accepted before, in memory since (a replay whose walk checked
 * the chunk): bounds, type and flags are checked again; the record's
 * checksum and its inline blobs' are not computed a second time. */
int fmt_jrec_next_known(struct fmt_cursor *c, struct fmt_jrec *out);

/* Record encoders append one whole record at the cursor.
 * @return 0 or the cursor error (-ENOSPC; rewind to drop the partial record),
 * -EINVAL for bad arguments (nothing written). */
int fmt_jrec_put_create(struct fmt_cursor *c, uint64_t obj_id, const char *name, size_t name_len);
int fmt_jrec_put_remove(struct fmt_cursor *c, uint64_t obj_id);
int fmt_jrec_put_truncate(struct fmt_cursor *c, uint64_t obj_id, uint64_t size);
int fmt_jrec_put_dict(struct fmt_cursor *c, uint32_t dict_id, uint64_t obj_id);
/* RENAME: object @obj_id takes @name; @replaced (0: none) is the object
 * that held the name, removed in the same step. */
int fmt_jrec_put_rename(struct fmt_cursor *c, uint64_t obj_id, uint64_t replaced,
			const char *name, size_t name_len);
/* BATCH: the @n_records records after it (1..FMT_BATCH_RECS_MAX, none of
 * them a BATCH) apply together or not at all.  They follow it in the same
 * chunk. */
int fmt_jrec_put_batch(struct fmt_cursor *c, uint32_t n_records);
/* CLONE: a new object @dst_id named @name maps what object @src_id maps
 * at this point of the journal (its size and extents; the blobs shared). */
int fmt_jrec_put_clone(struct fmt_cursor *c, uint64_t src_id, uint64_t dst_id,
		       const char *name, size_t name_len);
/* WRITE with all extents at once; each extent must lie in [off, off + len). */
int fmt_jrec_put_write(struct fmt_cursor *c, uint16_t flags, uint64_t obj_id, uint64_t off,
		       uint64_t len, const struct fmt_extent *ext, uint32_t n_extents);
/* WRITE built incrementally: begin, fmt_cursor_put_extent() n times, end.
 * begin stores the record start in *mark; end fills the extent count, body
 * length and checksum.  @return 0 or -errno. */
int fmt_jrec_write_begin(struct fmt_cursor *c, size_t *mark, uint16_t flags, uint64_t obj_id,
			 uint64_t off, uint64_t len);
int fmt_jrec_write_end(struct fmt_cursor *c, size_t mark, uint32_t n_extents);

struct fmt_jrec_create { uint64_t obj_id; uint16_t name_len; const char *name; /* not NUL terminated */ };
struct fmt_jrec_remove { uint64_t obj_id; };
struct fmt_jrec_truncate { uint64_t obj_id, size; };
struct fmt_jrec_dict { uint32_t dict_id; uint64_t obj_id; };
struct fmt_jrec_rename {
	uint64_t obj_id, replaced;
	uint16_t name_len;
	const char *name; /* not NUL terminated */
};
struct fmt_jrec_batch { uint32_t n_records; };
struct fmt_jrec_clone {
	uint64_t src_id, dst_id;
	uint16_t name_len;
	const char *name; /* not NUL terminated */
};
struct fmt_jrec_write {
	uint16_t flags;
	uint64_t obj_id, off, len;
	uint32_t n_extents;
	struct fmt_cursor ext; /* over the extent bytes; use fmt_jrec_write_next */
	uint32_t ext_done;
};

/* Typed body decoders: the record must have that type and an exact body.
 * @return 0 or -EIO. */
int fmt_jrec_create_decode(const struct fmt_jrec *r, struct fmt_jrec_create *out);
int fmt_jrec_remove_decode(const struct fmt_jrec *r, struct fmt_jrec_remove *out);
int fmt_jrec_truncate_decode(const struct fmt_jrec *r, struct fmt_jrec_truncate *out);
int fmt_jrec_dict_decode(const struct fmt_jrec *r, struct fmt_jrec_dict *out);
/* Also checks obj_id != replaced. */
int fmt_jrec_rename_decode(const struct fmt_jrec *r, struct fmt_jrec_rename *out);
int fmt_jrec_batch_decode(const struct fmt_jrec *r, struct fmt_jrec_batch *out);
/* Also checks src_id != dst_id. */
int fmt_jrec_clone_decode(const struct fmt_jrec *r, struct fmt_jrec_clone *out);
/* Validates the whole WRITE body up front (every extent decodes, lies in
 * [off, off + len), count matches the bytes exactly), so a record that
 * decodes can be applied without a later failure. */
int fmt_jrec_write_decode(const struct fmt_jrec *r, struct fmt_jrec_write *out);
/* The next extent, checked again except for an inline blob's checksums,
 * which the decode above computed.  @return 1 got it, 0 done, -EIO. */
int fmt_jrec_write_next(struct fmt_jrec_write *w, struct fmt_extent *e);
/* The next extent's object offset, unchecked (fmt_extent_peek).  @return 1,
 * or 0 at the record's end or where the bytes cannot hold one. */
int fmt_jrec_write_peek(struct fmt_jrec_write *w, uint64_t *obj_off);

/* ---- checkpoint ---------------------------------------------------------- */

#define FMT_CKPT_CSUM_OFF 80u   /* header fields: bytes [0, 80) */
#define FMT_CKPT_HDR 88u        /* encoded header bytes incl. its checksum */

struct fmt_ckpt {
	uint64_t store_id, seq;
	uint64_t payload_len, payload_csum;
	uint64_t replay_off, replay_seq;
	uint64_t next_obj_id, n_objects;
	uint32_t segment_count, n_dicts;
};

/* Writes one whole BLOCK (header + zeros).  @return FMT_BLOCK or -EINVAL. */
int fmt_ckpt_encode(const struct fmt_ckpt *h, uint8_t *buf, size_t len);
/* Needs len >= FMT_CKPT_HDR.  Checks magic, version, checksum, and that the
 * counts could fit in payload_len.  @return 0, -EINVAL (short), -EIO. */
int fmt_ckpt_decode(struct fmt_ckpt *h, const uint8_t *buf, size_t len);
/* The superblock's ckpt_csum: fmt_csum over the whole header BLOCK. */
uint64_t fmt_ckpt_block_csum(const uint8_t *block);
/* @return 0 or -EIO (len < payload_len or checksum mismatch). */
int fmt_ckpt_verify_payload(const struct fmt_ckpt *h, const uint8_t *payload, size_t len);

/* ---- delta checkpoints (FMT_INCOMPAT_CKPT_DELTA) ---------------------------
 *
 * A delta is a header and its payload, back to back, padded to a BLOCK; the
 * first follows the base checkpoint's last BLOCK, each next one the one
 * before.  The payload is n_records records, each a kind byte then:
 *   FMT_DREC_OBJ     an object whole: fmt_ckpt_put_obj and its extents
 *                    (a new object, or one to load again from scratch);
 *   FMT_DREC_RANGES  u64 obj_id, u64 size, u32 n_ranges, then per range
 *                    u64 lo, u64 hi, u32 n_extents and the extents that map
 *                    [lo, hi) now (each inside it): loading punches the
 *                    range and inserts them;
 *   FMT_DREC_GONE    u64 obj_id: the object was removed. */
#define FMT_DELTA_CSUM_OFF 88u
#define FMT_DELTA_HDR 96u       /* encoded header incl. its checksum */
#define FMT_DREC_OBJ 1u
#define FMT_DREC_RANGES 2u
#define FMT_DREC_GONE 3u
#define FMT_DREC_MIN 9u         /* the smallest record (GONE) */
#define FMT_DREC_RANGES_MIN 21u /* kind, id, size, n_ranges */
#define FMT_DRANGE_SIZE 20u     /* lo, hi, n_extents */

struct fmt_ckpt_delta {
	uint64_t store_id;
	uint64_t base_seq;      /* the base checkpoint's seq */
	uint32_t index;         /* 1 for the first delta after the base */
	uint32_t n_records;
	uint64_t payload_len, payload_csum;
	uint64_t replay_off, replay_seq;
	uint64_t next_obj_id;
	uint64_t prev_csum;     /* the base's header BLOCK checksum (the
				 * superblock's ckpt_csum) for index 1, else
				 * the previous delta's header checksum */
	uint32_t segment_count; /* data segments at the delta's snapshot */
	uint64_t csum;          /* decode: the header's own checksum */
};

/* Writes FMT_DELTA_HDR bytes; h->csum is ignored.  @return FMT_DELTA_HDR or
 * -EINVAL. */
int fmt_delta_encode(const struct fmt_ckpt_delta *h, uint8_t *buf, size_t len);
/* Checks magic, version, checksum, padding and that n_records could fit in
 * payload_len; fills h->csum.  @return 0, -EINVAL (short), -EIO. */
int fmt_delta_decode(struct fmt_ckpt_delta *h, const uint8_t *buf, size_t len);
int fmt_delta_put_obj(struct fmt_cursor *c, uint64_t obj_id, uint64_t size,
		      const char *name, size_t name_len, uint32_t n_extents);
int fmt_delta_put_ranges(struct fmt_cursor *c, uint64_t obj_id, uint64_t size,
			 uint32_t n_ranges);
int fmt_delta_put_range(struct fmt_cursor *c, uint64_t lo, uint64_t hi,
			uint32_t n_extents);
int fmt_delta_put_gone(struct fmt_cursor *c, uint64_t obj_id);
/* The next record's kind (FMT_DREC_*), or -EIO. */
int fmt_delta_get_kind(struct fmt_cursor *c);
int fmt_delta_get_ranges(struct fmt_cursor *c, uint64_t *obj_id,
			 uint64_t *size, uint32_t *n_ranges);
/* lo <= hi, and n_extents payable from what remains.  0 or -EIO. */
int fmt_delta_get_range(struct fmt_cursor *c, uint64_t *lo, uint64_t *hi,
			uint32_t *n_extents);
int fmt_delta_get_gone(struct fmt_cursor *c, uint64_t *obj_id);
/* Walk a whole payload: every record decodes, every extent of a range lies
 * inside it, and the bytes end after the last record.  0 or -EIO. */
int fmt_delta_payload_check(const struct fmt_ckpt_delta *h,
			    const uint8_t *payload, size_t len);

typedef int (*fmt_delta_fn)(void *arg, const struct fmt_ckpt_delta *h,
			    const uint8_t *payload);
/* Walk the delta chain @sb names, read into @buf (@len bytes, from the
 * BLOCK after the base), calling @fn (if not NULL) on each delta that
 * verifies (header, link to the one before, payload) in order, stopping at
 * the first that does not.  *@end, *@last: the bytes and the last header
 * checksum of the verified prefix.  @return how many verified, or @fn's
 * negative errno. */
int fmt_delta_chain_walk(const struct fmt_super *sb, const uint8_t *buf,
			 uint64_t len, fmt_delta_fn fn, void *arg,
			 uint64_t *end, uint64_t *last);
/* 1 when the chain in @buf (sb->delta_bytes long) verifies whole, exactly
 * as the superblock names it (none: delta_bytes is 0). */
int fmt_delta_chain_whole(const struct fmt_super *sb, const uint8_t *buf);

/* Payload items, in order: segment_count segs, n_objects objects (each
 * followed by its n_extents extents, via fmt_cursor_put/get_extent), n_dicts
 * dicts.  Puts: 0 or cursor error / -EINVAL.  Gets: 0 or -EIO. */
#define FMT_CKPT_SEG_SIZE 16u
#define FMT_CKPT_DICT_SIZE 12u
#define FMT_CKPT_OBJ_MIN 23u    /* obj_id, size, name_len, 1 name byte, n_extents */
#define FMT_CKPT_OBJ_MAX (22u + FMT_NAME_MAX) /* ... a name of FMT_NAME_MAX */

struct fmt_ckpt_obj {
	uint64_t obj_id, size;
	uint16_t name_len;
	const char *name;       /* into the payload, not NUL terminated */
	uint32_t n_extents;     /* checked against the bytes remaining */
};

int fmt_ckpt_put_seg(struct fmt_cursor *c, uint64_t live_bytes, uint8_t state);
int fmt_ckpt_get_seg(struct fmt_cursor *c, uint64_t *live_bytes, uint8_t *state);
int fmt_ckpt_put_obj(struct fmt_cursor *c, uint64_t obj_id, uint64_t size,
		     const char *name, size_t name_len, uint32_t n_extents);
int fmt_ckpt_get_obj(struct fmt_cursor *c, struct fmt_ckpt_obj *o);
int fmt_ckpt_put_dict(struct fmt_cursor *c, uint32_t dict_id, uint64_t obj_id);
int fmt_ckpt_get_dict(struct fmt_cursor *c, uint32_t *dict_id, uint64_t *obj_id);
/* Walk a whole payload: every item decodes and the bytes end exactly after
 * the last dict.  @return 0 or -EIO. */
int fmt_ckpt_payload_check(const struct fmt_ckpt *h, const uint8_t *payload, size_t len);

#endif
