/* vfs_rcache.h — the VFS's chunk cache (private to sqlite/).
 *
 * A bounded cache of 64 KiB chunks of objects, keyed by (node, offset),
 * CLOCK eviction, written through by every write the VFS accepts, so it
 * always holds what coil would return.  Why it exists: each coil_pread is a
 * round trip through coil's threads (~0.2-0.3 ms on the shared 2-core box,
 * measured) and decodes a whole blob, while SQLite reads one page at a time
 * and re-reads pages that fall out of its own cache; one chunk read serves
 * the 16 pages around it.  Not thread-safe: the caller holds the store's
 * I/O mutex. */
#ifndef VFS_RCACHE_H
#define VFS_RCACHE_H

#include <stddef.h>
#include <stdint.h>

#define RCACHE_CHUNK 65536u

struct rc_slot {
	const void *key;
	uint64_t off;  /* chunk offset, a multiple of RCACHE_CHUNK */
	uint32_t len;  /* valid bytes; < RCACHE_CHUNK when the object ended */
	uint8_t used;
	uint8_t ref;   /* CLOCK bit */
	int32_t next;  /* hash chain */
};

struct rcache {
	struct rc_slot *slots;
	unsigned char *data; /* n * RCACHE_CHUNK */
	int32_t *buckets;
	uint32_t n, nb, hand;
	uint64_t hits, misses;
};

/* Allocate @bytes of chunks (rounded down; 0 disables the cache).
 * @return 0 or -ENOMEM. */
int rcache_init(struct rcache *c, uint64_t bytes);
void rcache_fini(struct rcache *c);

/* The cached chunk at @off (a chunk offset), or NULL; *@len its valid
 * bytes. */
unsigned char *rcache_lookup(struct rcache *c, const void *key, uint64_t off,
			     uint32_t *len);

/* A slot for the chunk at @off, evicting another; the caller fills it and
 * calls rcache_fill_done(), or rcache_fill_abort() when the read failed.
 * @return the slot index, or -1 when the cache is disabled. */
int32_t rcache_fill_begin(struct rcache *c, const void *key, uint64_t off,
			  unsigned char **data);
void rcache_fill_done(struct rcache *c, int32_t slot, uint32_t len);
void rcache_fill_abort(struct rcache *c, int32_t slot);

/* Write through: update every cached chunk [@off, @off + @len) touches. */
void rcache_write(struct rcache *c, const void *key, uint64_t off,
		  const unsigned char *buf, size_t len);

/* Forget every chunk of @key (truncate, remove, node freed, write error). */
void rcache_drop(struct rcache *c, const void *key);

#endif
