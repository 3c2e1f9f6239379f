/* tests/super_util.h — the superblock a store file opens with, read the way
 * the engine picks it (both copies decoded, fmt_super_pick), for tests that
 * look at the layout on disk. */
#ifndef COIL_TESTS_SUPER_UTIL_H
#define COIL_TESTS_SUPER_UTIL_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <unistd.h>

#include "format/format.h"

static inline struct fmt_super et_newest_super(const char *path)
{
	uint8_t raw[2 * FMT_BLOCK];
	struct fmt_super a, b;
	int fd = open(path, O_RDONLY), ra, rb, pick;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, raw, sizeof(raw), 0), (ssize_t)sizeof(raw));
	close(fd);
	ra = fmt_super_decode(&a, raw, FMT_BLOCK);
	rb = fmt_super_decode(&b, raw + FMT_BLOCK, FMT_BLOCK);
	pick = fmt_super_pick(&a, ra, &b, rb);
	cr_assert_geq(pick, 0, "%s: no valid superblock", path);
	return pick == 0 ? a : b;
}

#endif
