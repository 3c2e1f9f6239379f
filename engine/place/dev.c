/* engine/place/dev.c — synchronous device I/O through the ring, for the
 * threads that may block on it: open, the checkpoint thread, recovery,
 * discard.  The paths that may not block submit their own uring_io. */
#include <errno.h>

#include "engine/place/dev.h"
#include "engine/store.h"

int store_io_sync(struct coil_store *s, int op, void *buf, uint32_t len,
		  uint64_t off)
{
	struct uring_io io;
	int rc;

	uring_io_prep(&io, (enum uring_op)op, buf, len, off, NULL, NULL);
	rc = uring_run_sync(s->ring, &io);
	if (rc < 0)
		return rc;
	if ((op == URING_OP_READ || op == URING_OP_WRITE) && (uint32_t)rc != len)
		return -EIO;
	if (op == URING_OP_WRITE)
		stat_add(&s->st.dev_bytes_written, len);
	return 0;
}

/* Large transfers in pieces (uring lengths are 32-bit). */
int store_io_big(struct coil_store *s, int op, uint8_t *buf, uint64_t len,
		  uint64_t off)
{
	const uint64_t step = 8u << 20;

	for (uint64_t done = 0; done < len; done += step) {
		uint32_t n = (uint32_t)COIL_MIN(step, len - done);
		int rc = store_io_sync(s, op, buf + done, n, off + done);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int store_punch(struct coil_store *s, uint64_t off, uint64_t len)
{
	const uint64_t step = 1ull << 30; /* uring lengths are 32-bit */

	COIL_ASSERT(off % FMT_BLOCK == 0);
	COIL_ASSERT(len % FMT_BLOCK == 0);
	if (s->is_blk)
		return 0;
	for (uint64_t done = 0; done < len; done += step) {
		uint32_t n = (uint32_t)COIL_MIN(step, len - done);
		int rc = store_io_sync(s, URING_OP_DISCARD, NULL, n, off + done);
		if (rc < 0)
			return rc;
	}
	return 0;
}
