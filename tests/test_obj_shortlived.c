/* test_obj_shortlived: what is written through a handle opened with
 * COIL_SHORTLIVED is encoded with zstd's fast mode in a compressing store
 * (large writes and small ones alike) and still compressed, other handles
 * keep the store's level, every handle reads every blob, a raw store stays
 * raw, and the flag is checked like the others. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/engine_test_util.h"

#define BIG (1u << 20)
#define PAGE 4096u
#define LOGICAL ((uint64_t)BIG + 8 * PAGE)

static uint64_t stat_u64(coil_store *s, const char *section, const char *key)
{
	char js[16384];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, section, key);
}

/* @buf's 1 MiB at 0, then its first 8 pages one write each after it */
static void write_both(coil_obj *h, const uint8_t *buf)
{
	cr_assert_eq(coil_pwrite(h, buf, BIG, 0), (int64_t)BIG);
	/* small writes too (the journal's inline path) */
	for (uint32_t i = 0; i < 8; i++)
		cr_assert_eq(coil_pwrite(h, buf + i * PAGE, PAGE,
					 BIG + (uint64_t)i * PAGE), PAGE);
}

static void check_both(coil_obj *h, const uint8_t *buf)
{
	et_check_read(h, buf, BIG, 0);
	et_check_read(h, buf, 8 * PAGE, BIG);
}

/* Through a handle of its own, opened with @flags: @name reads back. */
static void reread(coil_store *s, const char *name, unsigned flags,
		   const uint8_t *buf)
{
	coil_obj *rd;

	cr_assert_eq(coil_obj_open(s, name, flags, &rd), 0);
	check_both(rd, buf);
	cr_assert_eq(coil_obj_close(rd), 0);
}

Test(obj_shortlived, handle_takes_fast_mode_others_the_level, .timeout = 120)
{
	uint8_t *buf = malloc(BIG);
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "shortlived", NULL);
	coil_obj *log, *db;
	uint64_t z0, f0, z1, f1, st0, st1;

	/* compressible bytes: either encoding halves them */
	et_fill(buf, BIG, 3, 1);
	cr_assert_eq(coil_obj_open(s, "log", COIL_CREATE | COIL_SHORTLIVED,
				   &log), 0);
	cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &db), 0);

	z0 = stat_u64(s, "\"compression\"", "blobs_zstd");
	f0 = stat_u64(s, "\"compression\"", "blobs_zstd_fast");
	st0 = stat_u64(s, "\"space\"", "stored");
	write_both(log, buf);
	cr_assert_eq(coil_sync(s), 0);
	z1 = stat_u64(s, "\"compression\"", "blobs_zstd");
	f1 = stat_u64(s, "\"compression\"", "blobs_zstd_fast");
	st1 = stat_u64(s, "\"space\"", "stored");
	cr_assert_gt(f1, f0, "the log's blobs take the fast mode");
	cr_assert_eq(f1 - f0, z1 - z0, "every compressed blob of the log");
	cr_assert_lt(st1 - st0, LOGICAL * 3 / 4, "still compressed: %llu",
		     (unsigned long long)(st1 - st0));

	write_both(db, buf);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_gt(stat_u64(s, "\"compression\"", "blobs_zstd"), z1,
		     "the store's other handles compress");
	cr_assert_eq(stat_u64(s, "\"compression\"", "blobs_zstd_fast"), f1,
		     "at the store's level");
	cr_assert_lt(stat_u64(s, "\"space\"", "stored") - st1,
		     LOGICAL * 3 / 4);

	/* a handle without the hint reads the log's blobs, and the reverse */
	reread(s, "log", 0, buf);
	reread(s, "db", COIL_SHORTLIVED, buf);
	cr_assert_eq(coil_obj_close(log), 0);
	cr_assert_eq(coil_obj_close(db), 0);
	cr_assert_eq(coil_close(s), 0);

	/* and from the device after a reopen */
	cr_assert_eq(et_open_sized(path, 128ull << 20, false, &s), 0);
	reread(s, "log", 0, buf);
	reread(s, "db", 0, buf);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
}

/* A raw store stays raw under the hint: nothing compressed, and aligned
 * writes still go from the caller's buffer. */
Test(obj_shortlived, raw_store_stays_raw, .timeout = 60)
{
	uint8_t *buf = aligned_alloc(FMT_BLOCK, BIG);
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "shortlived-raw", "none");
	coil_obj *h;
	uint64_t n0;

	et_fill(buf, BIG, 5, 1);
	cr_assert_eq(coil_obj_open(s, "wal", COIL_CREATE | COIL_SHORTLIVED,
				   &h), 0);
	n0 = stat_u64(s, "\"compression\"", "writes_zero_copy");
	write_both(h, buf);
	cr_assert_eq(stat_u64(s, "\"compression\"", "writes_zero_copy"),
		     n0 + 9);
	cr_assert_eq(stat_u64(s, "\"compression\"", "blobs_zstd"), 0);
	cr_assert_eq(stat_u64(s, "\"compression\"", "blobs_zstd_fast"), 0);
	check_both(h, buf);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(buf);
}

Test(obj_shortlived, flags_checked, .timeout = 60)
{
	char path[256];
	coil_store *s = et_open(path, sizeof(path), "shortlived-flags", NULL);
	coil_obj *h = NULL;

	cr_assert_eq(coil_obj_open(s, "x", COIL_SHORTLIVED, &h), -ENOENT);
	cr_assert_null(h);
	cr_assert_eq(coil_obj_open(s, "x", COIL_SHORTLIVED | 0x100u, &h),
		     -EINVAL);
	cr_assert_eq(coil_obj_open(s, "x", COIL_SHORTLIVED | COIL_EXCL, &h),
		     -EINVAL);
	cr_assert_eq(coil_obj_open(s, "x", COIL_SHORTLIVED | COIL_CREATE |
					   COIL_EXCL, &h), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
