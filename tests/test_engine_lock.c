/* test_engine_lock: one writer per store by any name — a second node of the
 * same block device, a loop device over a store file held open, the file
 * under a loop device held open — is -EBUSY, in this process and in
 * another.  Needs root and loop devices (losetup); skips without them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "tests/engine_test_util.h"

static char file[256], loopdev[64], alias[256];

/* A 64 MiB file in the build dir with a loop device over it, or skip. */
static void loop_setup(const char *tag)
{
	char cmd[512];
	FILE *p;
	int fd;

	if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0)
		cr_skip_test("needs root and /dev/loop-control");
	et_path(file, sizeof(file), tag);
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 64 << 20), 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", file);
	p = popen(cmd, "r");
	loopdev[0] = 0;
	if (p) {
		if (!fgets(loopdev, sizeof(loopdev), p))
			loopdev[0] = 0;
		pclose(p);
	}
	loopdev[strcspn(loopdev, "\n")] = 0;
	if (loopdev[0] != '/') {
		unlink(file);
		cr_skip_test("losetup failed");
	}
}

/* the suite's fini: also after a failed assertion */
static void loop_teardown(void)
{
	char cmd[128];

	if (alias[0])
		unlink(alias);
	alias[0] = 0;
	if (loopdev[0]) {
		snprintf(cmd, sizeof(cmd), "losetup -d %s", loopdev);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot detach %s\n", loopdev);
	}
	loopdev[0] = 0;
	if (file[0])
		unlink(file);
	file[0] = 0;
}

TestSuite(engine_lock, .fini = loop_teardown);

/* A second device node of the loop device, as mknod would make it. */
static void make_alias(void)
{
	struct stat st;

	cr_assert_eq(stat(loopdev, &st), 0);
	snprintf(alias, sizeof(alias), "engine-stores/alias-%d", (int)getpid());
	unlink(alias);
	cr_assert_eq(mknod(alias, S_IFBLK | 0600, st.st_rdev), 0);
}

static coil_store *open_ok(const char *path, unsigned flags)
{
	struct coil_options o;
	coil_store *s = NULL;

	et_opts(&o, path);
	o.flags = (o.flags & ~COIL_CREATE) | flags;
	cr_assert_eq(coil_open(path, &o, &s), 0, "open %s", path);
	return s;
}

/* coil_open(@path) in this process; on success close again. */
static int open_here(const char *path, unsigned flags)
{
	struct coil_options o;
	coil_store *s = NULL;
	int rc;

	et_opts(&o, path);
	o.flags = (o.flags & ~COIL_CREATE) | flags;
	rc = coil_open(path, &o, &s);
	if (rc == 0)
		coil_close(s);
	return rc;
}

/* coil_open(@path) in another process (tests/lock_open.c: a forked child
 * would inherit this process's registry of open stores and never reach
 * the locks): what it returned. */
static int open_elsewhere(const char *path, unsigned flags)
{
	struct coil_options o;
	pid_t pid;
	int status;

	et_opts(&o, path);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execl("./lock_open", "lock_open", path,
		      flags & COIL_RDONLY ? "ro" : "rw",
		      o.flags & COIL_NO_DIRECT ? "nodirect" : "direct",
		      (char *)NULL);
		_exit(254);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_neq(WEXITSTATUS(status), 254, "cannot run ./lock_open");
	return -WEXITSTATUS(status);
}

/* Write one object and sync it, so a second writer would have something
 * to destroy. */
static void write_synced(coil_store *s, const char *name)
{
	char buf[4096];
	coil_obj *h;

	memset(buf, 'a', sizeof(buf));
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, sizeof(buf), 0), 4096);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(coil_obj_close(h), 0);
}

Test(engine_lock, second_device_node)
{
	coil_store *s;

	loop_setup("lock-alias");
	s = open_ok(loopdev, COIL_CREATE);
	write_synced(s, "a");
	make_alias();
	cr_expect_eq(open_here(alias, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(alias, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(loopdev, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(alias, COIL_RDONLY), -EBUSY);
	cr_assert_eq(coil_close(s), 0);
	/* released with the store: the other node opens it now */
	cr_expect_eq(open_elsewhere(alias, 0), 0);
	cr_expect_eq(open_here(alias, 0), 0);
}

Test(engine_lock, loop_over_held_file)
{
	struct coil_options o;
	coil_store *s;

	loop_setup("lock-file");
	/* the store file is the loop device's backing file */
	cr_assert_eq(unlink(file) == 0 || errno == ENOENT, 1);
	et_opts(&o, file);
	s = NULL;
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "losetup -d %s", loopdev);
		cr_assert_eq(system(cmd), 0);
		loopdev[0] = 0;
	}
	cr_assert_eq(coil_open(file, &o, &s), 0);
	write_synced(s, "a");
	{
		char cmd[512];
		FILE *p;

		snprintf(cmd, sizeof(cmd), "losetup -f --show %s", file);
		p = popen(cmd, "r");
		cr_assert_not_null(p);
		if (!fgets(loopdev, sizeof(loopdev), p))
			loopdev[0] = 0;
		pclose(p);
		loopdev[strcspn(loopdev, "\n")] = 0;
		cr_assert_eq(loopdev[0], '/', "losetup over the store");
	}
	cr_expect_eq(open_here(loopdev, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(loopdev, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(loopdev, COIL_RDONLY), -EBUSY);
	cr_assert_eq(coil_close(s), 0);
	cr_expect_eq(open_elsewhere(loopdev, 0), 0);
}

Test(engine_lock, file_under_held_loop)
{
	coil_store *s;

	loop_setup("lock-under");
	s = open_ok(loopdev, COIL_CREATE);
	write_synced(s, "a");
	cr_expect_eq(open_here(file, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(file, 0), -EBUSY);
	cr_expect_eq(open_elsewhere(file, COIL_RDONLY), -EBUSY);
	cr_assert_eq(coil_close(s), 0);
	cr_expect_eq(open_elsewhere(file, 0), 0);
}

Test(engine_lock, readers_share_a_device)
{
	coil_store *s;

	loop_setup("lock-readers");
	s = open_ok(loopdev, COIL_CREATE);
	write_synced(s, "a");
	cr_assert_eq(coil_close(s), 0);
	make_alias();
	s = open_ok(loopdev, COIL_RDONLY);
	cr_expect_eq(open_elsewhere(alias, COIL_RDONLY), 0);
	cr_expect_eq(open_elsewhere(alias, 0), -EBUSY);
	cr_assert_eq(coil_close(s), 0);
}
