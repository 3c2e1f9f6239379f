/* test_write_zero_copy: a raw store writes block-aligned data straight from
 * the caller's buffer, and nothing keeps using that buffer once the write
 * completed: the caller may reuse it at once.  Other writes are copied. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/engine_test_util.h"

#define BIG (3u << 20) /* spans several blobs and, in a test store, segments */

static uint64_t zero_copy(coil_store *s)
{
	char js[16384];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, "\"compression\"", "writes_zero_copy");
}

Test(write_zero_copy, aligned_raw_writes_skip_the_copy, .timeout = 120)
{
	uint8_t *buf = aligned_alloc(FMT_BLOCK, BIG), *keep = malloc(BIG);
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "zc-aligned", "none");
	coil_obj *h;
	uint64_t n0;

	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	et_fill(buf, BIG, 7, 0);
	memcpy(keep, buf, BIG);
	n0 = zero_copy(s);
	cr_assert_eq(coil_pwrite(h, buf, BIG, 0), (int64_t)BIG);
	cr_assert_eq(zero_copy(s), n0 + 1);
	cr_assert_eq(memcmp(buf, keep, BIG), 0, "the caller's bytes untouched");
	/* the buffer is the caller's again: change it, the store must not see it */
	memset(buf, 0xa5, BIG);
	et_check_read(h, keep, BIG, 0);
	/* a 4 KiB overwrite in the middle, from an aligned buffer too */
	et_fill(buf, FMT_BLOCK, 8, 0);
	memcpy(keep + 5 * FMT_BLOCK, buf, FMT_BLOCK);
	cr_assert_eq(coil_pwrite(h, buf, FMT_BLOCK, 5 * FMT_BLOCK), FMT_BLOCK);
	memset(buf, 0x5a, FMT_BLOCK);
	et_check_read(h, keep, BIG, 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);

	/* and from the device after a reopen */
	cr_assert_eq(et_open_sized(path, 128ull << 20, false, &s), 0);
	cr_assert_eq(coil_obj_open(s, "a", 0, &h), 0);
	et_check_read(h, keep, BIG, 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
	free(keep);
}

Test(write_zero_copy, other_writes_are_copied, .timeout = 120)
{
	uint8_t *mem = aligned_alloc(FMT_BLOCK, BIG + FMT_BLOCK);
	uint8_t *keep = malloc(BIG);
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "zc-other", "none");
	coil_obj *h;
	uint64_t n0;

	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	n0 = zero_copy(s);
	/* a buffer off the block */
	et_fill(mem + 8, 64 * FMT_BLOCK, 9, 0);
	memcpy(keep, mem + 8, 64 * FMT_BLOCK);
	cr_assert_eq(coil_pwrite(h, mem + 8, 64 * FMT_BLOCK, 0),
		     64 * FMT_BLOCK);
	memset(mem, 0, BIG + FMT_BLOCK);
	et_check_read(h, keep, 64 * FMT_BLOCK, 0);
	/* an offset off the block */
	et_fill(mem, 64 * FMT_BLOCK, 10, 0);
	memcpy(keep, mem, 64 * FMT_BLOCK);
	cr_assert_eq(coil_pwrite(h, mem, 64 * FMT_BLOCK, 1u << 20 | 512),
		     64 * FMT_BLOCK);
	memset(mem, 0, BIG + FMT_BLOCK);
	et_check_read(h, keep, 64 * FMT_BLOCK, 1u << 20 | 512);
	/* a length off the block */
	et_fill(mem, 3 * FMT_BLOCK + 100, 11, 0);
	memcpy(keep, mem, 3 * FMT_BLOCK + 100);
	cr_assert_eq(coil_pwrite(h, mem, 3 * FMT_BLOCK + 100, 2u << 20),
		     3 * FMT_BLOCK + 100);
	memset(mem, 0, BIG + FMT_BLOCK);
	et_check_read(h, keep, 3 * FMT_BLOCK + 100, 2u << 20);
	cr_assert_eq(zero_copy(s), n0, "none of these was written in place");
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);

	/* a compressing store copies (encodes) whatever the alignment */
	s = et_open(path, sizeof(path), "zc-zstd", "zstd:1");
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	n0 = zero_copy(s);
	et_fill(mem, BIG, 12, 1);
	memcpy(keep, mem, BIG);
	cr_assert_eq(coil_pwrite(h, mem, BIG, 0), (int64_t)BIG);
	memset(mem, 0, BIG);
	et_check_read(h, keep, BIG, 0);
	cr_assert_eq(zero_copy(s), n0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(mem);
	free(keep);
}
