/* engine/place/reserve.h — space a file system owes a store before coil writes. */
#ifndef COIL_ENGINE_RESERVE_H
#define COIL_ENGINE_RESERVE_H

#include <stdint.h>

struct coil_store;

/* Size the new, empty store file @fd (@path, for the message) to @size and
 * allocate its blocks.  A size the file system's free space cannot hold is
 * -ENOSPC before anything is allocated; a failure leaves the file empty.
 * @return 0, -ENOSPC, or the errno of fallocate/ftruncate. */
int reserve_file_create(int fd, const char *path, uint64_t size);

/* Segment @idx of a file store is about to take writes: allocate its
 * blocks unless they are known to be (freed segments are punched, and the
 * file system may have given the space to someone else since); @off is
 * where it starts in the file.  The segment table calls down here, never
 * the other way.  mlock held.
 * @return 0, -ENOSPC (nothing allocated is lost: the segment stays free),
 *   -EIO. */
int reserve_seg(struct coil_store *s, uint32_t idx, uint64_t off);

/* A growing store's data area reaches file offset @end, @len bytes more
 * than before (a growth step, engine/grow.c).  The new segments' blocks are
 * allocated when each first takes writes (reserve_seg), so free segments
 * ahead of the writer take no disk; a step only asks that the file system
 * has @len bytes free now, and extends the file's length.  @return 0,
 * -ENOSPC, -EIO. */
int reserve_extend(struct coil_store *s, uint64_t end, uint64_t len);

/* Allocate [@off, @off + @len) of a growing store's file (a checkpoint
 * area before it is written, the journal ring, a new stretch of segments;
 * engine/grow.c): 0, -ENOSPC, -EIO.  A file system without fallocate is not
 * an error (the file is extended).  Block devices: nothing to do. */
int reserve_range(struct coil_store *s, uint64_t off, uint64_t len);

#endif
