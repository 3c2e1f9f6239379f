/* test_engine_enospc: a store file on a small file system.  Creating one
 * larger than the free space is -ENOSPC and leaves no file; a file system
 * that fills up under a growing store makes its writes -ENOSPC without
 * breaking it, and once space is back they succeed again.  Mounts a size-limited tmpfs
 * (root); skips where mounting is not permitted. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "coil.h"
#include "tests/engine_test_util.h"

static char mnt[256], store[300], filler[300];

static void fs_mount(const char *size)
{
	char opt[32];

	mkdir("engine-stores", 0755);
	snprintf(mnt, sizeof(mnt), "engine-stores/enospc-%d", (int)getpid());
	mkdir(mnt, 0755);
	snprintf(opt, sizeof(opt), "size=%s", size);
	if (mount("tmpfs", mnt, "tmpfs", 0, opt) != 0) {
		rmdir(mnt);
		cr_skip_test("cannot mount a tmpfs (%s)", strerror(errno));
	}
	snprintf(store, sizeof(store), "%s/store", mnt);
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
}

/* the suite's fini: also after a failed assertion */
static void fs_unmount(void)
{
	if (!mnt[0])
		return;
	umount2(mnt, MNT_DETACH);
	rmdir(mnt);
	mnt[0] = 0;
}

TestSuite(engine_enospc, .fini = fs_unmount);

static void opts(struct coil_options *o, uint64_t size)
{
	coil_options_init(o);
	o->flags = COIL_CREATE | COIL_NO_DIRECT; /* tmpfs has no O_DIRECT */
	o->size = size;
	o->workers = 2;
	o->compression = "none";
}

static uint64_t fs_free(void)
{
	struct statvfs sv;

	cr_assert_eq(statvfs(mnt, &sv), 0);
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

Test(engine_enospc, too_big_store_is_refused)
{
	struct coil_options o;
	coil_store *s = NULL;
	struct stat st;
	uint64_t before;
	int fd;

	fs_mount("8m");
	before = fs_free();
	opts(&o, 64ull << 20);
	cr_expect_eq(coil_open(store, &o, &s), -ENOSPC);
	cr_expect_null(s);
	cr_expect_eq(stat(store, &st), -1, "no file is left behind");
	cr_expect_eq(fs_free(), before, "no space is left taken");

	/* an empty file given to be made a store stays an empty file */
	fd = open(store, O_RDWR | O_CREAT, 0644);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_expect_eq(coil_open(store, &o, &s), -ENOSPC);
	cr_assert_eq(stat(store, &st), 0);
	cr_expect_eq(st.st_size, 0);
	cr_expect_eq(fs_free(), before);
	unlink(store);

	/* one that fits is made */
	opts(&o, 6ull << 20);
	cr_expect_eq(coil_open(store, &o, &s), 0);
	cr_expect_eq(coil_close(s), 0);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	et_fill(p, n, seed, 0); /* incompressible */
}

/* Write @n bytes of object @name in 64 KiB pieces; the first failure's
 * code, or 0. */
static int64_t write_obj(coil_store *s, const char *name, size_t n,
			 uint64_t seed)
{
	static uint8_t buf[64 << 10];
	coil_obj *h;
	int64_t rc = 0;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	for (size_t off = 0; off < n && rc >= 0; off += sizeof(buf)) {
		fill(buf, sizeof(buf), seed + off);
		rc = coil_pwrite(h, buf, sizeof(buf), off);
		if (rc >= 0)
			cr_assert_eq(rc, (int64_t)sizeof(buf));
	}
	cr_assert_eq(coil_obj_close(h), 0);
	return rc < 0 ? rc : 0;
}

static void check_obj(coil_store *s, const char *name, size_t n,
		      uint64_t seed)
{
	static uint8_t buf[64 << 10], want[64 << 10];
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
	for (size_t off = 0; off < n; off += sizeof(buf)) {
		fill(want, sizeof(want), seed + off);
		cr_assert_eq(coil_pread(h, buf, sizeof(buf), off),
			     (int64_t)sizeof(buf));
		cr_assert_eq(memcmp(buf, want, sizeof(buf)), 0, "at %zu", off);
	}
	cr_assert_eq(coil_obj_close(h), 0);
}

/* A growing store on a file system that fills up: the blocks the writes
 * need are refused (a segment's allocation when it first takes writes, or
 * a growth step), the writes fail with -ENOSPC, nothing written
 * before is lost, and once space is back the same session grows and takes
 * them. */
Test(engine_enospc, full_file_system_then_space_again, .timeout = 120)
{
	static uint8_t chunk[1 << 20];
	struct coil_options o;
	char js[8192];
	coil_store *s;
	int64_t rc;
	int fd;

	fs_mount("64m");
	opts(&o, 0); /* as large as the file system */
	cr_assert_eq(coil_open(store, &o, &s), 0);
	cr_assert_eq(write_obj(s, "a", 8u << 20, 1), 0);
	cr_assert_eq(coil_sync(s), 0);

	/* someone else takes every free byte */
	fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	memset(chunk, 0xab, sizeof(chunk));
	while (write(fd, chunk, sizeof(chunk)) > 0)
		;
	close(fd);

	rc = write_obj(s, "b", 40u << 20, 2);
	cr_expect_eq(rc, -ENOSPC, "a full file system: %lld", (long long)rc);
	rc = write_obj(s, "b", 40u << 20, 2);
	cr_expect_eq(rc, -ENOSPC, "still full, still -ENOSPC: %lld",
		     (long long)rc);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_expect_eq(json_u64(js, "\"store\"", "broken"), 0, "%s", js);
	cr_expect_gt(json_u64(js, "\"space\"", "grow_failures") +
		     json_u64(js, "\"space\"", "reserve_failures"), 0, "%s", js);
	check_obj(s, "a", 8u << 20, 1);

	/* space comes back: the same store grows and takes the writes */
	cr_assert_eq(unlink(filler), 0);
	cr_expect_eq(write_obj(s, "b", 40u << 20, 2), 0);
	cr_expect_eq(coil_sync(s), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(store, &o, &s), 0);
	check_obj(s, "a", 8u << 20, 1);
	check_obj(s, "b", 40u << 20, 2);
	cr_assert_eq(coil_close(s), 0);
}
