/* fuzz_blob — fmt_blob_decode and fmt_blob_verify_sectors on a descriptor
 * (an extent record) followed by stored bytes.  The stored checksum is fixed
 * up so zstd's decoder sees the fuzzer's frames; the result must still be
 * -EIO unless every checksum holds, and never write past logical_len. */
#include "fuzz_common.h"

static ZSTD_DCtx *dctx;
static struct fmt_extent e;
static uint8_t dst[FMT_BLOB_MAX + 64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dctx)
		dctx = ZSTD_createDCtx();
	int n = fmt_extent_decode(&e, data, size);
	if (n < 0)
		return 0;
	const uint8_t *stored = data + n;
	size_t len = size - (size_t)n;
	struct fmt_blob b = e.blob;

	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			/* make the stored-bytes checksums true */
			if (b.codec == FMT_CODEC_ZSTD && len >= b.stored_len)
				b.csums[0] = fmt_csum(stored, b.stored_len);
			else if (b.codec == FMT_CODEC_RAW && len >= b.stored_len)
				for (uint32_t i = 0; i < b.n_csums; i++) {
					uint32_t off = i * FMT_BLOCK;
					uint32_t sl = b.logical_len - off < FMT_BLOCK ? b.logical_len - off : FMT_BLOCK;
					b.csums[i] = fmt_csum(stored + off, sl);
				}
		}
		memset(dst + b.logical_len, 0x5a, 64);
		int rc = fmt_blob_decode(dctx, NULL, &b, stored, len, dst, b.logical_len);
		FUZZ_CHECK(rc == (int)b.logical_len || rc == -EIO || rc == -EINVAL);
		for (int i = 0; i < 64; i++)
			FUZZ_CHECK(dst[b.logical_len + i] == 0x5a);
		if (rc > 0)
			FUZZ_CHECK(fmt_csum(dst, b.logical_len) ==
				   (b.codec == FMT_CODEC_ZSTD ? b.csums[1] : fmt_csum(stored, b.logical_len)));
		if (b.codec == FMT_CODEC_RAW && len > 0) {
			uint32_t first = n < (int)size ? data[size - 1] % (b.n_csums + 1) : 0;
			uint64_t start = (uint64_t)first * FMT_BLOCK;
			if (start < len) {
				rc = fmt_blob_verify_sectors(&b, first, stored + start, len - start);
				FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EINVAL);
			}
		}
	}
	return 0;
}
