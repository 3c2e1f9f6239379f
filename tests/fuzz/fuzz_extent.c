/* fuzz_extent — a run of extent records through the cursor; each decoded
 * extent must re-encode to exactly the bytes it came from, and the
 * unchecked peek (a prefetch hint) must agree with the decode wherever the
 * decode succeeds and never read past the bytes it is given. */
#include "fuzz_common.h"

static struct fmt_extent e;
static uint8_t out[FMT_EXTENT_INLINE_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fmt_cursor c;
	fmt_cursor_init_ro(&c, data, size);
	for (int i = 0; i < 64; i++) {
		size_t at = c.pos, psize = 0;
		uint64_t poff = 0;
		int peek = fmt_extent_peek(data + at, size - at, &poff, &psize);

		FUZZ_CHECK(peek == 0 || (psize >= FMT_EXTENT_FIXED &&
					 psize <= size - at));
		if (fmt_cursor_get_extent(&c, &e) < 0) {
			FUZZ_CHECK(c.err == -EIO);
			break;
		}
		size_t n = c.pos - at;
		/* an inline extent carries its blob's bytes too */
		FUZZ_CHECK(n == fmt_extent_size(&e) && n >= FMT_EXTENT_MIN &&
			   n <= ((e.blob.flags & FMT_BLOB_INLINE) ?
				 FMT_EXTENT_INLINE_MAX : FMT_EXTENT_MAX));
		FUZZ_CHECK(fmt_blob_check(&e.blob) == 0);
		FUZZ_CHECK((uint64_t)e.blob_skip + e.len <= e.blob.logical_len);
		FUZZ_CHECK(fmt_extent_encode(&e, out, sizeof(out)) == (int)n);
		FUZZ_CHECK(memcmp(out, data + at, n) == 0);
		FUZZ_CHECK(peek == 1 && psize == n && poff == e.obj_off);
		if (c.pos == size)
			break;
	}
	int rc = fmt_extent_decode(&e, data, size);
	FUZZ_CHECK(rc == -EIO || (rc >= (int)FMT_EXTENT_MIN && (size_t)rc <= size));
	return 0;
}
