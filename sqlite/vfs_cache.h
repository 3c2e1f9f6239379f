/* vfs_cache.h — the VFS's chunk cache (private to sqlite/).
 *
 * A bounded cache of 64 KiB chunks of objects, keyed by (node, offset),
 * CLOCK eviction, written through by every write the VFS accepts, so it
 * always holds what coil would return.  Why it exists: each coil_pread is a
 * round trip through coil's threads (~0.2-0.3 ms on the shared 2-core box,
 * measured) and decodes a whole blob, while SQLite reads one page at a time
 * and re-reads pages that fall out of its own cache; one chunk read serves
 * the 16 pages around it.  Not thread-safe: the caller holds the store's
 * I/O mutex. */
#ifndef VFS_CACHE_H
#define VFS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define VCACHE_CHUNK 65536u

struct vc_slot {
	const void *key;
	uint64_t off;  /* chunk offset, a multiple of VCACHE_CHUNK */
	uint32_t len;  /* valid bytes; < VCACHE_CHUNK when the object ended */
	uint8_t used;
	uint8_t ref;   /* CLOCK bit */
	int32_t next;  /* hash chain */
};

struct vcache {
	struct vc_slot *slots;
	unsigned char *data; /* n * VCACHE_CHUNK */
	int32_t *buckets;
	uint32_t n, nb, hand;
	uint64_t hits, misses;
};

/* Allocate @bytes of chunks (rounded down; 0 disables the cache).
 * @return 0 or -ENOMEM. */
int vcache_init(struct vcache *c, uint64_t bytes);
void vcache_fini(struct vcache *c);

/* The cached chunk at @off (a chunk offset), or NULL; *@len its valid
 * bytes. */
unsigned char *vcache_lookup(struct vcache *c, const void *key, uint64_t off,
			     uint32_t *len);

/* A slot for the chunk at @off, evicting another; the caller fills it and
 * calls vcache_fill_done(), or vcache_fill_abort() when the read failed.
 * @return the slot index, or -1 when the cache is disabled. */
int32_t vcache_fill_begin(struct vcache *c, const void *key, uint64_t off,
			  unsigned char **data);
void vcache_fill_done(struct vcache *c, int32_t slot, uint32_t len);
void vcache_fill_abort(struct vcache *c, int32_t slot);

/* Write through: update every cached chunk [@off, @off + @len) touches. */
void vcache_write(struct vcache *c, const void *key, uint64_t off,
		  const unsigned char *buf, size_t len);

/* Forget every chunk of @key (truncate, remove, node freed, write error). */
void vcache_drop(struct vcache *c, const void *key);

#endif
