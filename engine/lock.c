/* engine/lock.c — one writer per store, whatever name it is opened by.
 *
 * A flock on the path's inode names a device node, not the device: a second
 * node of the same block device (mknod, another /dev) has an inode of its
 * own, and a loop device over a store file reaches that file without ever
 * opening it.  Two writers on one store lose synced data (each overwrites
 * the other's journal), so a store is held by every name that reaches it:
 *
 *   - a regular file: flock on the file (LOCK_EX, or LOCK_SH read-only);
 *   - a block device: a writer opens it O_EXCL, which the kernel enforces
 *     per device against every other O_EXCL open and every mount, through
 *     any node; read-only opens cannot share such a claim, so they check
 *     that no writer holds it.  Readers and writers also flock the device's
 *     own sysfs file (/sys/dev/block/M:m/dev: one inode per device, whatever
 *     node opened it), which keeps a writer out while readers are open;
 *     without sysfs (or in another network namespace, which has a sysfs of
 *     its own) that falls back to the flock on the node, and writers still
 *     exclude each other through the claim;
 *   - a loop device: also its backing file, found through sysfs and checked
 *     against the inode the loop driver reports, locked as above (a loop
 *     device over a block device claims that one in turn).  A backing file
 *     that cannot be found or does not match (deleted, renamed, another
 *     mount namespace, no sysfs) is -ENOLCK: refusing an open is
 *     recoverable, a second writer is not.
 *
 * Every lock lives on a descriptor of its own that never reaches the ring:
 * io_uring keeps its registered file alive for a while after the process
 * dies (the ring is torn down asynchronously), and a lock on that
 * description would make the restart after kill -9 see -EBUSY.  These die
 * with the process.  Tests: tests/test_engine_lock.c. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/common.h"
#include "engine/lock.h"

/* Descriptors one store can hold: the store's own name and its sysfs file,
 * then the same for at most LOCK_DEPTH_MAX backing files of loop devices
 * stacked under it. */
#define LOCK_DEPTH_MAX 3
#define LOCK_FDS_MAX (2 * (LOCK_DEPTH_MAX + 1))

struct store_lock {
	int fd[LOCK_FDS_MAX];
	unsigned n;
};

void store_lock_id(const struct stat *st, dev_t *dev, ino_t *ino)
{
	if (S_ISBLK(st->st_mode)) {
		/* inode 0 is never a file's: no file collides with it */
		*dev = st->st_rdev;
		*ino = 0;
	} else {
		*dev = st->st_dev;
		*ino = st->st_ino;
	}
}

static bool same_object(const struct stat *a, const struct stat *b)
{
	if ((a->st_mode & S_IFMT) != (b->st_mode & S_IFMT))
		return false;
	if (S_ISBLK(a->st_mode))
		return a->st_rdev == b->st_rdev;
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

static int lock_path(struct store_lock *l, const char *path,
		     const struct stat *st, bool shared, unsigned depth);

/* The loop driver reports its backing file's st_dev in the kernel's
 * "huge" encoding (12-bit major at bit 8, minor split around it). */
static bool loop_backs(const struct loop_info64 *li, const struct stat *st)
{
	uint64_t d = li->lo_device;
	unsigned maj = (unsigned)((d >> 8) & 0xfff);
	unsigned min = (unsigned)((d & 0xff) | ((d >> 12) & 0xfff00));

	return li->lo_inode == st->st_ino && maj == major(st->st_dev) &&
	       min == minor(st->st_dev);
}

/* flock the device's sysfs file; nothing to do where there is none */
static int lock_sysfs_dev(struct store_lock *l, dev_t rdev, bool shared)
{
	char sys[64];
	int fd;

	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u/dev", major(rdev),
		 minor(rdev));
	fd = open(sys, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	COIL_ASSERT(l->n < LOCK_FDS_MAX);
	l->fd[l->n++] = fd;
	if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return 0;
}

static int read_backing_path(dev_t rdev, char *buf, size_t len)
{
	/* a partition's attributes are in its disk's directory */
	static const char *const fmt[] = {
		"/sys/dev/block/%u:%u/loop/backing_file",
		"/sys/dev/block/%u:%u/../loop/backing_file",
	};

	for (size_t i = 0; i < sizeof(fmt) / sizeof(fmt[0]); i++) {
		char sys[96];
		ssize_t n;
		int fd;

		snprintf(sys, sizeof(sys), fmt[i], major(rdev), minor(rdev));
		fd = open(sys, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, len - 1);
		close(fd);
		if (n <= 0)
			continue;
		while (n > 0 && buf[n - 1] == '\n')
			n--;
		buf[n] = 0;
		return 0;
	}
	return -ENOENT;
}

/* @fd is an open block device: if it is a bound loop device, lock the file
 * behind it too. */
static int lock_loop_backing(struct store_lock *l, int fd,
			     const struct stat *st, bool shared,
			     unsigned depth)
{
	struct loop_info64 li;
	struct stat bst;
	char *bpath;
	int rc;

	if (ioctl(fd, LOOP_GET_STATUS64, &li) < 0)
		return 0; /* not a loop device, or one with nothing bound */
	if (depth >= LOCK_DEPTH_MAX) {
		fprintf(stderr, "coil: loop devices stacked deeper than %d: "
			"cannot lock what is under them\n", LOCK_DEPTH_MAX);
		return -ENOLCK;
	}
	bpath = malloc(PATH_MAX);
	if (!bpath)
		return -ENOMEM;
	rc = read_backing_path(st->st_rdev, bpath, PATH_MAX);
	if (rc == 0 && (stat(bpath, &bst) < 0 || !loop_backs(&li, &bst)))
		rc = -ENOENT;
	if (rc < 0) {
		fprintf(stderr, "coil: loop device %u:%u: its backing file "
			"cannot be found to lock it (deleted, renamed, or "
			"not visible here); refusing to open\n",
			major(st->st_rdev), minor(st->st_rdev));
		free(bpath);
		return -ENOLCK;
	}
	rc = lock_path(l, bpath, &bst, shared, depth + 1);
	free(bpath);
	return rc;
}

static int lock_path(struct store_lock *l, const char *path,
		     const struct stat *st, bool shared, unsigned depth)
{
	bool blk = S_ISBLK(st->st_mode);
	struct stat now;
	int fd, rc;

	COIL_ASSERT(l->n < LOCK_FDS_MAX);
	fd = open(path, O_RDONLY | O_CLOEXEC | (blk && !shared ? O_EXCL : 0));
	if (fd < 0)
		return errno == EBUSY ? -EBUSY : -errno;
	l->fd[l->n++] = fd;
	if (fstat(fd, &now) < 0)
		return -errno;
	if (!same_object(st, &now))
		return -EBUSY; /* replaced under us while being opened */
	if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	if (blk && shared) {
		/* No writer may hold the device through another node.  Another
		 * reader's probe holds the claim for a moment: look again
		 * before calling it busy (a writer or a mount keeps it). */
		for (int tries = 0;; tries++) {
			int probe = open(path, O_RDONLY | O_CLOEXEC | O_EXCL);

			if (probe >= 0) {
				close(probe);
				break;
			}
			if (errno != EBUSY)
				return -errno;
			if (tries == 3)
				return -EBUSY;
			usleep(1000);
		}
	}
	if (!blk)
		return 0;
	rc = lock_sysfs_dev(l, st->st_rdev, shared);
	if (rc < 0)
		return rc;
	return lock_loop_backing(l, fd, st, shared, depth);
}

int store_lock_take(const char *path, const struct stat *st, bool shared,
		    struct store_lock **out)
{
	struct store_lock *l = calloc(1, sizeof(*l));
	int rc;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	rc = lock_path(l, path, st, shared, 0);
	if (rc < 0) {
		store_lock_drop(l);
		return rc;
	}
	*out = l;
	return 0;
}

void store_lock_drop(struct store_lock *l)
{
	if (!l)
		return;
	for (unsigned i = 0; i < l->n; i++)
		close(l->fd[i]); /* releases its flock or O_EXCL claim */
	free(l);
}
