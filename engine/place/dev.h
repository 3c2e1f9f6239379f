/* engine/place/dev.h — synchronous device I/O through the ring, for the
 * threads that may block: open, checkpoints, recovery, discard. */
#ifndef COIL_ENGINE_DEV_H
#define COIL_ENGINE_DEV_H

#include <stdint.h>

struct coil_store;

/* One synchronous ring operation (URING_OP_*) of @len bytes at @off.
 * @return 0, -EIO on a short transfer, or the operation's -errno. */
int store_io_sync(struct coil_store *s, int op, void *buf, uint32_t len,
		  uint64_t off);
/* store_io_sync for any length, in pieces the ring takes. */
int store_io_big(struct coil_store *s, int op, uint8_t *buf, uint64_t len,
		 uint64_t off);
/* Give [@off, @off + @len) of a store file back to its file system
 * (fallocate PUNCH_HOLE | KEEP_SIZE, through the ring, so the fault seam
 * treats it as a write a power cut may undo).  BLOCK aligned.  A block
 * device gets nothing: what it holds there costs no space.  @return 0 or
 * the punch's -errno (-EOPNOTSUPP where the file system has no punch). */
int store_punch(struct coil_store *s, uint64_t off, uint64_t len);

#endif
