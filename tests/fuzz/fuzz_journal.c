/* fuzz_journal — a journal chunk: header decode, payload checksum, and the
 * record walk with every typed body decoder.  Checksums are fixed up on a
 * copy so the walk sees structure the fuzzer chose. */
#include "fuzz_common.h"

static uint8_t buf[1 << 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fmt_jchunk h;
	int rc = fmt_jchunk_decode(&h, data, size);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EINVAL);
	if (rc == 0) {
		FUZZ_CHECK((h.nblocks == 0) != (h.nsect == 0));
		FUZZ_CHECK((uint64_t)h.payload_len + FMT_JCHUNK_HDR <= fmt_jchunk_len(&h));
		rc = fmt_jchunk_verify_payload(&h, data + FMT_JCHUNK_HDR, size - FMT_JCHUNK_HDR);
		FUZZ_CHECK(rc == 0 || rc == -EIO);
	}
	/* the payload as written: records checked as they are */
	if (size > FMT_JCHUNK_HDR) {
		(void)fuzz_walk_records(data + FMT_JCHUNK_HDR, size - FMT_JCHUNK_HDR);
		/* the decoders replay uses on a chunk its walk checked, given
		 * bytes nobody checked: bounds hold all the same */
		(void)fuzz_walk_records_as(data + FMT_JCHUNK_HDR,
					   size - FMT_JCHUNK_HDR, true);
	}

	/* the same bytes as a payload with every record checksum made valid,
	 * then sealed into a chunk and read back the way replay does */
	size_t n = size < sizeof(buf) - FMT_BLOCK ? size : sizeof(buf) - FMT_BLOCK;
	uint8_t *p = buf + FMT_JCHUNK_HDR;
	memcpy(p, data, n);
	fuzz_fix_records(p, n);
	int total = fmt_jchunk_seal(buf, sizeof(buf), 1, 2, 0, (uint32_t)n, 0,
				    size & 1 ? FMT_JSECT : FMT_BLOCK);
	FUZZ_CHECK(total > 0 && total % (size & 1 ? FMT_JSECT : FMT_BLOCK) == 0);
	FUZZ_CHECK(fmt_jchunk_decode(&h, buf, (size_t)total) == 0);
	FUZZ_CHECK(fmt_jchunk_verify_payload(&h, p, (size_t)total - FMT_JCHUNK_HDR) == 0);
	/* what the checking walk accepts, the known walk reads the same */
	int checked = fuzz_walk_records(p, h.payload_len);
	if (checked >= 0)
		FUZZ_CHECK(fuzz_walk_records_as(p, h.payload_len, true) == checked);
	return 0;
}
