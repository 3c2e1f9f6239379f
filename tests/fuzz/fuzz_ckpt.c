/* fuzz_ckpt — checkpoint header decode (raw and re-checksummed) and the
 * payload walk, with counts taken from the input so the walker is reached;
 * the same for a delta checkpoint's header and records, and a chain walk
 * over the input as the deltas after a base. */
#include "fuzz_common.h"

static uint8_t blk[FMT_BLOCK];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fmt_ckpt h;
	int rc = fmt_ckpt_decode(&h, data, size);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EINVAL);
	if (rc == 0 && size >= FMT_CKPT_HDR) {
		rc = fmt_ckpt_payload_check(&h, data + FMT_CKPT_HDR, size - FMT_CKPT_HDR);
		FUZZ_CHECK(rc == 0 || rc == -EIO);
	}

	uint8_t hdr[FMT_CKPT_HDR] = { 0 };
	memcpy(hdr, data, size < sizeof(hdr) ? size : sizeof(hdr));
	coil_put_le64(hdr + FMT_CKPT_CSUM_OFF, fmt_csum(hdr, FMT_CKPT_CSUM_OFF));
	if (fmt_ckpt_decode(&h, hdr, sizeof(hdr)) == 0) {
		struct fmt_ckpt d;
		FUZZ_CHECK(fmt_ckpt_encode(&h, blk, sizeof(blk)) == FMT_BLOCK);
		FUZZ_CHECK(memcmp(blk, hdr, sizeof(hdr)) == 0);
		FUZZ_CHECK(fmt_ckpt_decode(&d, blk, sizeof(blk)) == 0);
	}

	/* A delta: header decode, raw and re-checksummed. */
	struct fmt_ckpt_delta dh;
	rc = fmt_delta_decode(&dh, data, size);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EINVAL);
	if (rc == 0) {
		rc = fmt_delta_payload_check(&dh, data + FMT_DELTA_HDR,
					     size - FMT_DELTA_HDR);
		FUZZ_CHECK(rc == 0 || rc == -EIO);
	}
	uint8_t dhdr[FMT_DELTA_HDR] = { 0 };
	memcpy(dhdr, data, size < sizeof(dhdr) ? size : sizeof(dhdr));
	coil_put_le64(dhdr + FMT_DELTA_CSUM_OFF, fmt_csum(dhdr, FMT_DELTA_CSUM_OFF));
	if (fmt_delta_decode(&dh, dhdr, sizeof(dhdr)) == 0) {
		uint8_t again[FMT_DELTA_HDR];
		FUZZ_CHECK(fmt_delta_encode(&dh, again, sizeof(again)) == FMT_DELTA_HDR);
		FUZZ_CHECK(memcmp(again, dhdr, sizeof(dhdr)) == 0);
	}
	/* Delta records with a count from the first byte. */
	if (size >= 1) {
		struct fmt_ckpt_delta r = {
			.index = 1,
			.n_records = data[0] % 8,
			.payload_len = size - 1,
		};
		rc = fmt_delta_payload_check(&r, data + 1, size - 1);
		FUZZ_CHECK(rc == 0 || rc == -EIO);
	}
	/* The input as a chain of deltas after a base. */
	if (size >= 8) {
		struct fmt_super sb = { 0 };
		uint64_t end, last;
		int n;
		sb.delta_count = data[0] % 4 + 1;
		sb.delta_bytes = size;
		n = fmt_delta_chain_walk(&sb, data, size, NULL, NULL, &end, &last);
		FUZZ_CHECK(n >= 0 && n <= (int)sb.delta_count && end <= size);
	}

	/* Small counts from the first bytes, the rest as the payload. */
	if (size < 3)
		return 0;
	struct fmt_ckpt w = {
		.segment_count = data[0] % 8,
		.n_objects = data[1] % 8,
		.n_dicts = data[2] % 8,
		.payload_len = size - 3,
	};
	rc = fmt_ckpt_payload_check(&w, data + 3, size - 3);
	FUZZ_CHECK(rc == 0 || rc == -EIO);
	if (rc == 0) {
		/* a payload that checks walks cleanly item by item */
		static struct fmt_extent e;
		struct fmt_cursor c;
		struct fmt_ckpt_obj o;
		uint64_t live, obj;
		uint8_t st;
		uint32_t dict;
		fmt_cursor_init_ro(&c, data + 3, size - 3);
		for (uint32_t i = 0; i < w.segment_count; i++)
			FUZZ_CHECK(fmt_ckpt_get_seg(&c, &live, &st) == 0);
		for (uint64_t i = 0; i < w.n_objects; i++) {
			FUZZ_CHECK(fmt_ckpt_get_obj(&c, &o) == 0);
			for (uint32_t j = 0; j < o.n_extents; j++)
				FUZZ_CHECK(fmt_cursor_get_extent(&c, &e) == 0);
		}
		for (uint32_t i = 0; i < w.n_dicts; i++)
			FUZZ_CHECK(fmt_ckpt_get_dict(&c, &dict, &obj) == 0);
		FUZZ_CHECK(fmt_cursor_remaining(&c) == 0);
	}
	return 0;
}
