/* fuzz_superblock — fmt_super_decode on arbitrary bytes, then again with the
 * checksum fixed so the geometry and feature checks are reached; whatever
 * decodes must re-encode to the same block.  A later version or an unknown
 * incompat bit is -FMT_EFEATURE, and only with a good checksum. */
#include "fuzz_common.h"

static uint8_t blk[FMT_BLOCK], out[FMT_BLOCK];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fmt_super a, b;
	int ra = fmt_super_decode(&a, data, size);
	FUZZ_CHECK(ra == 0 || ra == -EIO || ra == -EINVAL || ra == -FMT_EFEATURE);
	if (ra == -FMT_EFEATURE)
		FUZZ_CHECK(coil_get_le64(data + FMT_SUPER_CSUM_OFF) ==
			   fmt_csum(data, FMT_SUPER_CSUM_OFF));
	FUZZ_CHECK(size >= FMT_BLOCK || ra == -EINVAL);

	memset(blk, 0, sizeof(blk));
	memcpy(blk, data, size < FMT_BLOCK ? size : FMT_BLOCK);
	coil_put_le64(blk + FMT_SUPER_CSUM_OFF, fmt_csum(blk, FMT_SUPER_CSUM_OFF));
	int rb = fmt_super_decode(&b, blk, sizeof(blk));
	FUZZ_CHECK(rb == 0 || rb == -EIO || rb == -FMT_EFEATURE);
	if (rb == -FMT_EFEATURE)
		FUZZ_CHECK(coil_get_le32(blk + 8) > FMT_SUPER_VERSION ||
			   (coil_get_le64(blk + 168) & ~FMT_INCOMPAT_KNOWN));
	if (rb == 0) {
		struct fmt_super c;
		FUZZ_CHECK(b.version == FMT_SUPER_VERSION_V1 ||
			   b.version == FMT_SUPER_VERSION);
		FUZZ_CHECK(!(b.incompat & ~FMT_INCOMPAT_KNOWN));
		FUZZ_CHECK(b.version != FMT_SUPER_VERSION_V1 ||
			   (b.compat | b.incompat) == 0);
		FUZZ_CHECK(fmt_super_encode(&b, out, sizeof(out)) == FMT_BLOCK);
		FUZZ_CHECK(fmt_super_decode(&c, out, sizeof(out)) == 0);
		FUZZ_CHECK(memcmp(out, blk, FMT_SUPER_CSUM_OFF + 8) == 0);
		FUZZ_CHECK(b.data_off + (uint64_t)b.segment_count * b.segment_size <= b.store_size);
	}
	/* any size and max_blob: layout either refuses or yields a valid block */
	if (size >= 12) {
		struct fmt_super l, ld;
		uint64_t store_size = coil_get_le64(data);
		uint32_t max_blob = coil_get_le32(data + 8);
		int rl = fmt_super_layout(store_size, max_blob, &l);
		FUZZ_CHECK(rl == 0 || rl == -EINVAL || rl == -ENOSPC);
		if (rl == 0) {
			FUZZ_CHECK(fmt_super_encode(&l, out, sizeof(out)) == FMT_BLOCK);
			FUZZ_CHECK(fmt_super_decode(&ld, out, sizeof(out)) == 0);
		}
	}

	int p = fmt_super_pick(&a, ra, &b, rb);
	FUZZ_CHECK(p == 0 || p == 1 || p == -EIO);
	if (p == 0) FUZZ_CHECK(ra == 0);
	if (p == 1) FUZZ_CHECK(rb == 0);
	return 0;
}
