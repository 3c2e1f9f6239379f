/* fuzz_seghdr — fmt_seghdr_decode on arbitrary bytes, raw and re-checksummed. */
#include "fuzz_common.h"

static uint8_t blk[FMT_BLOCK];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fmt_seghdr h, d;
	int rc = fmt_seghdr_decode(&h, data, size);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EINVAL);
	FUZZ_CHECK(size >= FMT_SEGHDR_SIZE || rc == -EINVAL);

	uint8_t hdr[FMT_SEGHDR_SIZE] = { 0 };
	memcpy(hdr, data, size < sizeof(hdr) ? size : sizeof(hdr));
	coil_put_le64(hdr + 32, fmt_csum(hdr, 32));
	if (fmt_seghdr_decode(&h, hdr, sizeof(hdr)) == 0) {
		FUZZ_CHECK(fmt_seghdr_encode(&h, blk, sizeof(blk)) == FMT_BLOCK);
		FUZZ_CHECK(fmt_seghdr_decode(&d, blk, sizeof(blk)) == 0);
		FUZZ_CHECK(d.store_id == h.store_id && d.index == h.index && d.open_seq == h.open_seq);
	}
	return 0;
}
