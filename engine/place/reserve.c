/* engine/place/reserve.c — space a file system owes a store before coil writes.
 *
 * A store file's data writes must never meet -ENOSPC from the file system:
 * a data write fails after its journal record may already be on the device,
 * and replay stops at a record whose blobs do not verify, so a failed data
 * write breaks the store for the rest of the session.  Running out of space
 * must instead be an ordinary -ENOSPC for the write that needed it, with the
 * store still usable once space comes back.  So the blocks are allocated
 * before anything is written to them: the whole file when a fixed-size
 * store is created (refused up front when the file system has not that
 * much free), a growing store's segment when it first takes writes, and a
 * segment again before it is reused after it was punched (the cleaner gives
 * freed segments back to the file system; see seg_discard_range) or
 * after the store was opened (an earlier session may have punched it).  A
 * segment whose allocation fails stays free, and the write that needed it
 * fails with -ENOSPC before any of its data is placed there.
 *
 * Block devices and zero-filled files (never punched) need none of this.  A
 * file system without fallocate gets a sparse file: there a full file
 * system can still fail a data write, which breaks the store (-EIO), as
 * coil.h says.  Tests: tests/test_engine_enospc.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/store.h"
#include "engine/place/reserve.h"

static bool no_fallocate(int err)
{
	return err == EOPNOTSUPP || err == ENOSYS;
}

/* fallocate(@fd, 0, @off, @len), again after a signal. */
static int falloc(int fd, uint64_t off, uint64_t len)
{
	int rc;

	do
		rc = fallocate(fd, 0, (off_t)off, (off_t)len);
	while (rc < 0 && errno == EINTR);
	return rc;
}

int reserve_file_create(int fd, const char *path, uint64_t size)
{
	struct statvfs sv;
	int rc;

	if (fstatvfs(fd, &sv) == 0) {
		uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;

		if (size > avail) {
			fprintf(stderr, "coil: %s: a store of %" PRIu64
				" bytes does not fit: the file system has %"
				PRIu64 " bytes free\n", path, size, avail);
			return -ENOSPC;
		}
	}
	if (fallocate(fd, 0, 0, (off_t)size) == 0)
		return 0;
	rc = -errno;
	if (no_fallocate(-rc)) {
		if (ftruncate(fd, (off_t)size) == 0)
			return 0;
		rc = -errno;
	}
	if (rc == -ENOSPC)
		fprintf(stderr, "coil: %s: the file system cannot hold a store "
			"of %" PRIu64 " bytes\n", path, size);
	/* give back whatever a partial allocation took */
	if (ftruncate(fd, 0) < 0)
		rc = rc < 0 ? rc : -errno;
	return rc;
}

/* Segments a reservation takes at once: the next free ones that are not
 * allocated either, up to this many bytes.  One fallocate per 1 MiB
 * segment, under mlock, cost a fresh store's sequential writes a few
 * percent; what is reserved ahead is disk a store keeps beyond its data. */
#define RESERVE_AHEAD_BYTES (4ull << 20)

int reserve_seg(struct coil_store *s, uint32_t idx, uint64_t off)
{
	struct seg *g = &s->segs[idx];
	uint32_t n = 1;
	int rc;

	if (g->reserved || s->is_blk || s->filled)
		return 0;
	while (idx + n < s->nseg &&
	       (uint64_t)(n + 1) * s->sb.segment_size <= RESERVE_AHEAD_BYTES &&
	       !s->segs[idx + n].reserved &&
	       s->segs[idx + n].state == SEG_FREE)
		n++;
	rc = falloc(s->fd, off, (uint64_t)n * s->sb.segment_size);
	if (rc < 0 && n > 1 && (errno == ENOSPC || errno == EDQUOT)) {
		n = 1; /* the one that is needed, if it fits */
		rc = falloc(s->fd, off, s->sb.segment_size);
	}
	if (rc < 0 && no_fallocate(errno)) {
		/* nothing to reserve with: never ask again */
		for (uint32_t i = 0; i < s->nseg; i++)
			s->segs[i].reserved = true;
		return 0;
	}
	if (rc < 0) {
		stat_add(&s->st.reserve_fails, 1);
		return errno == ENOSPC || errno == EDQUOT ? -ENOSPC : -EIO;
	}
	for (uint32_t i = 0; i < n; i++)
		s->segs[idx + i].reserved = true;
	return 0;
}

static int fault_errno(struct coil_store *s)
{
#ifdef COIL_FAULT_SEAM
	return atomic_load(&s->fault_grow_errno);
#else
	(void)s;
	return 0;
#endif
}

int reserve_extend(struct coil_store *s, uint64_t end, uint64_t len)
{
	struct statvfs sv;
	struct stat st;
	int err = fault_errno(s);

	if (s->is_blk)
		return 0;
	if (err)
		return err == ENOSPC || err == EDQUOT ? -ENOSPC : -EIO;
	if (fstatvfs(s->fd, &sv) == 0 &&
	    len > (uint64_t)sv.f_bavail * sv.f_frsize) {
		stat_add(&s->st.reserve_fails, 1);
		return -ENOSPC;
	}
	if (fstat(s->fd, &st) < 0)
		return -EIO;
	if ((uint64_t)st.st_size < end && ftruncate(s->fd, (off_t)end) < 0)
		return errno == EFBIG ? -ENOSPC : -EIO;
	return 0;
}

int reserve_range(struct coil_store *s, uint64_t off, uint64_t len)
{
	int rc, err = fault_errno(s);

	if (s->is_blk || len == 0)
		return 0;
	if (err)
		return err == ENOSPC || err == EDQUOT ? -ENOSPC : -EIO;
	rc = falloc(s->fd, off, len);
	if (rc == 0)
		return 0;
	if (errno == EOPNOTSUPP || errno == ENOSYS) {
		/* No fallocate: extend the file; a full file system then
		 * fails a data write later (docs/space.md). */
		struct stat st;

		if (fstat(s->fd, &st) < 0)
			return -EIO;
		if ((uint64_t)st.st_size < off + len &&
		    ftruncate(s->fd, (off_t)(off + len)) < 0)
			return errno == ENOSPC ? -ENOSPC : -EIO;
		return 0;
	}
	stat_add(&s->st.reserve_fails, 1);
	return errno == ENOSPC || errno == EDQUOT ? -ENOSPC : -EIO;
}

