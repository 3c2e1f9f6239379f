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

#endif
