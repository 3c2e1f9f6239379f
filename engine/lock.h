/* engine/lock.h — one writer per store, whatever name it is opened by. */
#ifndef COIL_ENGINE_LOCK_H
#define COIL_ENGINE_LOCK_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

struct store_lock;

/* What names the store for the process-wide registry: the device number of
 * a block device (every node of it, under any name, is the same device),
 * else the file's (st_dev, st_ino). */
void store_lock_id(const struct stat *st, dev_t *dev, ino_t *ino);

/* Keep every other opener of the store at @path (fstat'ed into @st) out:
 * exclusive (or @shared, for a read-only open) as long as *@out lives.
 * @return 0, -EBUSY (open elsewhere: another process, another device node,
 *   a mount, a loop device over the same file, or the file under this loop
 *   device), -ENOLCK (a loop device whose backing file cannot be found to
 *   lock it), -ENOMEM, or the errno of a failed open. */
int store_lock_take(const char *path, const struct stat *st, bool shared,
		    struct store_lock **out);

/* Release every lock; accepts NULL. */
void store_lock_drop(struct store_lock *l);

#endif
