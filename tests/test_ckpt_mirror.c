/* test_ckpt_mirror: the checkpoint the superblock names (its base and each
 * delta) has a copy in the other checkpoint area, and one damaged block of
 * either copy costs nothing:
 * - each block of the base and of every delta damaged alone (a flipped
 *   byte, then a zeroed block): the store opens without salvage, every
 *   object reads back whole, the stats count the piece read from the
 *   mirror, and the next checkpoint (whole) makes both copies good again;
 * - each block of the mirror damaged alone: nothing to notice;
 * - the same block damaged in both copies: the store refuses to open with
 *   -EIO (salvage's case), never opens with objects missing;
 * - a damaged mirror is a scrub finding, and the checkpoint after it is
 *   whole: both copies verify again. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "engine/log/ckpt.h"
#include "engine/log/recovery.h"
#include "format/format.h"
#include "tests/engine_test_util.h"
#include "tests/super_util.h"

#define NOBJ 200
#define LEN 100

static void content(uint8_t *p, int i, int round)
{
	for (int k = 0; k < LEN; k++)
		p[k] = (uint8_t)(i * 7 + k + round * 13);
}

static void put(coil_store *s, int i, int round)
{
	uint8_t buf[LEN];
	char name[32];
	coil_obj *h;

	content(buf, i, round);
	snprintf(name, sizeof(name), "obj-%04d", i);
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, LEN, 0), LEN);
	cr_assert_eq(coil_obj_close(h), 0);
}

/* Every object holds what round @round[i] wrote. */
static void expect_all(coil_store *s, const int *round)
{
	uint8_t buf[LEN], want[LEN];
	char name[32];
	coil_obj *h;

	for (int i = 0; i < NOBJ; i++) {
		snprintf(name, sizeof(name), "obj-%04d", i);
		cr_assert_eq(coil_obj_open(s, name, 0, &h), 0, "%s", name);
		cr_assert_eq(coil_pread(h, buf, LEN, 0), LEN);
		content(want, i, round[i]);
		cr_assert_eq(memcmp(buf, want, LEN), 0, "%s", name);
		cr_assert_eq(coil_obj_close(h), 0);
	}
}

static uint8_t *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	off_t n = lseek(fd, 0, SEEK_END);
	uint8_t *img = malloc((size_t)n);

	cr_assert_eq(pread(fd, img, (size_t)n, 0), n);
	close(fd);
	*len = (size_t)n;
	return img;
}

static void restore(const char *path, const uint8_t *img, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	cr_assert_eq(pwrite(fd, img, len, 0), (ssize_t)len);
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

/* @return false when zeroing the block changes nothing (it is zero). */
static bool damage(const char *path, uint64_t off, bool zero)
{
	uint8_t blk[FMT_BLOCK];
	int fd = open(path, O_RDWR);

	cr_assert_eq(pread(fd, blk, FMT_BLOCK, (off_t)off), FMT_BLOCK);
	if (zero && fmt_all_zero(blk, sizeof(blk))) {
		close(fd);
		return false;
	}
	if (zero)
		memset(blk, 0, sizeof(blk));
	else
		blk[300] ^= 0x20;
	cr_assert_eq(pwrite(fd, blk, FMT_BLOCK, (off_t)off), FMT_BLOCK);
	cr_assert_eq(fsync(fd), 0);
	close(fd);
	return true;
}

Test(ckpt_mirror, one_damaged_block_of_either_copy_costs_nothing,
     .timeout = 300)
{
	struct coil_options o;
	struct fmt_super sb;
	int round[NOBJ] = { 0 };
	uint8_t *img;
	char path[256], js[16384];
	uint64_t named, mirror, used;
	size_t len;
	coil_store *s;
	int trials = 0;

	/* the base is written and read a block at a time: every item that
	 * straddles two pieces, and damage in each piece, is met */
	ckpt_write_piece = FMT_BLOCK;
	ckpt_load_piece = FMT_BLOCK;
	et_path(path, sizeof(path), "ckpt-mirror");
	et_opts(&o, path);
	o.size = 64ull << 20;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	o.flags &= ~COIL_CREATE;
	for (int i = 0; i < NOBJ; i++)
		put(s, i, 0);
	cr_assert_eq(coil_close(s), 0);
	/* a few sessions of changes: deltas after the base */
	for (int r = 1; r <= 3; r++) {
		cr_assert_eq(coil_open(path, &o, &s), 0);
		for (int i = r; i < NOBJ; i += 37) {
			put(s, i, r);
			round[i] = r;
		}
		cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
		cr_assert_eq(coil_close(s), 0);
	}
	cr_assert(strstr(js, "\"mirror\":true"), "%s", js);

	sb = et_newest_super(path);
	cr_assert_neq(sb.ckpt_slot, FMT_CKPT_SLOT_NONE);
	cr_assert_gt(sb.delta_count, 0, "the chain has deltas");
	named = sb.ckpt_off[sb.ckpt_slot];
	mirror = sb.ckpt_off[sb.ckpt_slot ? 0 : 1];
	used = COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK) + sb.delta_bytes;
	img = slurp(path, &len);

	for (int zero = 0; zero < 2; zero++) {
		for (uint64_t off = 0; off < used; off += FMT_BLOCK) {
			/* the copy the superblock names */
			restore(path, img, len);
			if (!damage(path, named + off, zero))
				continue;
			cr_assert_eq(coil_open(path, &o, &s), 0,
				     "block %llu of the checkpoint damaged",
				     (unsigned long long)(off / FMT_BLOCK));
			cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
			cr_assert_geq(json_u64(js, "\"checkpoint\"", "mirror_reads"), 1,
				      "block %llu", (unsigned long long)(off / FMT_BLOCK));
			expect_all(s, round);
			cr_assert_eq(coil_close(s), 0);
			/* the whole checkpoint that followed made two good
			 * copies again (checked on the flips: the zeroed
			 * blocks take the same path) */
			if (zero)
				goto mirror_copy;
			cr_assert_eq(coil_open(path, &o, &s), 0);
			cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
			cr_assert_eq(json_u64(js, "\"checkpoint\"", "mirror_reads"), 0);
			cr_assert(strstr(js, "\"mirror\":true"), "%s", js);
			expect_all(s, round);
			cr_assert_eq(coil_close(s), 0);

			/* the mirror */
mirror_copy:
			restore(path, img, len);
			damage(path, mirror + off, zero);
			cr_assert_eq(coil_open(path, &o, &s), 0);
			expect_all(s, round);
			cr_assert_eq(coil_close(s), 0);
			trials++;
		}
	}
	/* both copies of one block: refused, not opened short */
	restore(path, img, len);
	damage(path, named, false);
	damage(path, mirror, false);
	cr_assert_eq(coil_open(path, &o, &s), -EIO);
	cr_assert_geq(trials, 2 * 3);
	free(img);
	unlink(path);
}

static int find_what(void *arg, const struct coil_damage *d)
{
	char *what = arg;

	if (!d->object && !what[0])
		snprintf(what, 128, "%s", d->what);
	return 0;
}

Test(ckpt_mirror, scrub_finds_a_damaged_mirror_and_the_next_checkpoint_heals_it,
     .timeout = 120)
{
	struct coil_options o;
	struct fmt_super sb;
	int round[NOBJ] = { 0 };
	char path[256], what[128] = "", js[16384];
	uint64_t seq;
	coil_store *s;

	et_path(path, sizeof(path), "ckpt-mirror-scrub");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	o.flags &= ~COIL_CREATE;
	for (int i = 0; i < NOBJ; i++)
		put(s, i, 0);
	cr_assert_eq(coil_close(s), 0);
	sb = et_newest_super(path);
	/* a mirror found damaged at open: the open's checkpoint is whole,
	 * and writes it again */
	cr_assert(damage(path, sb.ckpt_off[sb.ckpt_slot ? 0 : 1], false));
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_assert(strstr(js, "\"mirror\":true"), "%s", js);
	cr_assert_eq(coil_scrub_start(s), 0);
	cr_assert_eq(coil_scrub_wait(s), 0);
	expect_all(s, round);

	/* one damaged while the store is open: the scrub names it */
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	seq = json_u64(js, "\"checkpoint\"", "seq");
	sb = et_newest_super(path);
	cr_assert_eq(sb.ckpt_seq, seq);
	cr_assert(damage(path, sb.ckpt_off[sb.ckpt_slot ? 0 : 1] + FMT_BLOCK,
			 false));
	cr_assert_eq(coil_scrub_start(s), 0);
	cr_assert_eq(coil_scrub_wait(s), -EIO);
	cr_assert_eq(coil_scrub_damage(s, find_what, what), 0);
	cr_assert(strstr(what, "checkpoint mirror"), "%s", what);
	/* the scrub asked for a whole checkpoint; close writes it (or it
	 * was written already) to both areas */
	cr_assert_eq(coil_close(s), 0);

	what[0] = 0;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_scrub_start(s), 0);
	cr_assert_eq(coil_scrub_wait(s), 0);
	cr_assert_eq(coil_scrub_damage(s, find_what, what), 0);
	cr_assert_eq(what[0], 0, "%s", what);
	expect_all(s, round);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
