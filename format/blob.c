/* format/blob.c — the blob codec: raw or zstd, checksummed, no allocation.
 *
 * Raw blobs carry one checksum per 4 KiB sector so a single sector can be
 * read and verified alone; zstd blobs carry the checksum of the stored bytes
 * (checked before decompressing anything) and of the logical bytes (the
 * end-to-end check after decompression). */
#include "format/format.h"

static uint32_t sectors_of(uint32_t len)
{
	return (len + FMT_BLOCK - 1) / FMT_BLOCK;
}

static void raw_csums(const uint8_t *p, uint32_t len, uint64_t *csums)
{
	for (uint32_t i = 0, off = 0; off < len; i++, off += FMT_BLOCK)
		csums[i] = fmt_csum(p + off, COIL_MIN(FMT_BLOCK, len - off));
}

/* Describe @len bytes at @p as a raw blob (*out's header already zeroed). */
static int blob_raw(const uint8_t *p, uint32_t len, struct fmt_blob *out)
{
	out->codec = FMT_CODEC_RAW;
	out->stored_len = len;
	out->n_csums = (uint16_t)sectors_of(len);
	raw_csums(p, len, out->csums);
	return (int)len;
}

size_t fmt_blob_bound(uint32_t logical_len)
{
	return logical_len;
}

int fmt_blob_encode(ZSTD_CCtx *cctx, int level, const ZSTD_CDict *cdict, uint32_t dict_id,
		    const void *src, uint32_t len, void *dst, size_t dst_cap, struct fmt_blob *out)
{
	if (!src || !dst || !out || len == 0 || len > FMT_BLOB_MAX)
		return -EINVAL;
	if ((cdict != NULL) != (dict_id != 0))
		return -EINVAL;
	if (dst_cap < len)
		return -ENOSPC;
	memset(out, 0, offsetof(struct fmt_blob, csums));
	out->logical_len = len;
	/* Raw in place: the bytes are already where they go. */
	if (dst == src && !(cctx && level != 0) && !cdict)
		return blob_raw(dst, len, out);
	/* zstd cannot compress in place. */
	if ((const uint8_t *)dst < (const uint8_t *)src + len &&
	    (const uint8_t *)src < (const uint8_t *)dst + dst_cap)
		return -EINVAL;

	if (cctx && level != 0) {
		/* Capping the output at 7/8 of the input makes zstd give up as
		 * soon as the saving rule cannot be met. */
		size_t cap = len - len / 8;
		size_t r = cdict ? ZSTD_compress_usingCDict(cctx, dst, cap, src, len, cdict)
				 : ZSTD_compressCCtx(cctx, dst, cap, src, len, level);
		if (!ZSTD_isError(r) && r > 0 && r <= cap) {
			out->codec = FMT_CODEC_ZSTD;
			out->stored_len = (uint32_t)r;
			out->dict_id = dict_id;
			out->n_csums = 2;
			out->csums[0] = fmt_csum(dst, r);
			out->csums[1] = fmt_csum(src, len);
			return (int)r;
		}
	}
	/* Raw: whatever zstd left in dst is overwritten. */
	memcpy(dst, src, len);
	return blob_raw(dst, len, out);
}

/* Verify raw sectors [first, first + n) of @data (which starts at sector
 * @first); the last sector of the blob may be short. */
static int raw_verify(const struct fmt_blob *b, uint32_t first, uint32_t n, const uint8_t *data)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)(first + i) * FMT_BLOCK;
		uint32_t slen = (uint32_t)COIL_MIN((uint64_t)FMT_BLOCK, b->logical_len - off);
		if (fmt_csum(data + (uint64_t)i * FMT_BLOCK, slen) != b->csums[first + i])
			return -EIO;
	}
	return 0;
}

int fmt_blob_decode(ZSTD_DCtx *dctx, const ZSTD_DDict *ddict, const struct fmt_blob *b,
		    const void *stored, size_t stored_len, void *dst, size_t dst_cap)
{
	if (!b || !stored || !dst)
		return -EINVAL;
	if (fmt_blob_check(b) < 0)
		return -EIO;
	if (stored_len < b->stored_len || dst_cap < b->logical_len)
		return -EINVAL;

	if (b->codec == FMT_CODEC_RAW) {
		/* Copy first, verify the copy: what the caller gets is what
		 * was checked, even if the source buffer changes under us. */
		if (dst != stored)
			memmove(dst, stored, b->logical_len);
		return raw_verify(b, 0, b->n_csums, dst) < 0 ? -EIO : (int)b->logical_len;
	}

	if (!dctx)
		return -EINVAL;
	/* The dictionary the blob names is not there (never loaded, or
	 * unreadable): these bytes cannot be read. */
	if (b->dict_id && !ddict)
		return -EIO;
	if (fmt_csum(stored, b->stored_len) != b->csums[0])
		return -EIO;
	/* dst capacity is exactly logical_len: a frame that claims more fails
	 * instead of writing past what the descriptor promised. */
	size_t r = b->dict_id
		? ZSTD_decompress_usingDDict(dctx, dst, b->logical_len, stored, b->stored_len, ddict)
		: ZSTD_decompressDCtx(dctx, dst, b->logical_len, stored, b->stored_len);
	if (ZSTD_isError(r) || r != b->logical_len)
		return -EIO;
	if (fmt_csum(dst, b->logical_len) != b->csums[1])
		return -EIO;
	return (int)b->logical_len;
}

int fmt_blob_verify_sectors(const struct fmt_blob *b, uint32_t first_sector,
			    const void *data, size_t len)
{
	if (!b || !data || len == 0)
		return -EINVAL;
	if (fmt_blob_check(b) < 0)
		return -EIO;
	if (b->codec != FMT_CODEC_RAW || first_sector >= b->n_csums)
		return -EINVAL;
	uint64_t start = (uint64_t)first_sector * FMT_BLOCK;
	/* Bytes past the blob's end are block padding: ignore them. */
	uint64_t avail = COIL_MIN((uint64_t)len, b->logical_len - start);
	uint64_t end = start + avail;
	if (end != b->logical_len && end % FMT_BLOCK)
		return -EINVAL;
	uint32_t n = (uint32_t)((avail + FMT_BLOCK - 1) / FMT_BLOCK);
	return raw_verify(b, first_sector, n, data);
}
