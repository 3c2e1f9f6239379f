/* cache/cache.h — the decoded-blob cache: a byte-budgeted, sharded map from a
 * stored blob's identity to its decoded (logical) bytes.
 *
 * The cache knows nothing of I/O, objects or the engine.  The engine keys each
 * blob by where it is stored (device offset) plus a generation the engine bumps
 * whenever a segment is reused.  Writes never overwrite a stored blob in place
 * (new data goes to a new location), so an overwrite can never make a cached
 * entry stale: the extent map simply stops pointing at the old key.  Explicit
 * invalidation (cache_invalidate, cache_invalidate_range) releases memory
 * early for blobs that are gone (truncate, remove, cleaner freed a segment).
 *
 * Lifetimes: cache_get and cache_insert hand out a referenced, read-only
 * entry; its data stays valid until the matching cache_put, even if the entry
 * is evicted or invalidated meanwhile (it is then freed on the last put).
 *
 * Thread safety: every function may be called from any thread concurrently,
 * except cache_destroy, which needs every handle put and no concurrent call.
 *
 * Errors: >= 0 on success, a negative errno on failure; bad input never
 * aborts.
 */
#ifndef COIL_CACHE_H
#define COIL_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct cache;

/* A blob's identity.  dev_off is the device offset of the stored blob; gen is
 * the generation of the segment holding it (bumped on reuse), so a lookup
 * through a current extent map can never meet bytes of a previous tenant. */
struct cache_key {
	uint64_t dev_off;
	uint64_t gen;
};

/* The read-only view a reader gets.  Valid until cache_put(). */
struct cache_entry {
	const uint8_t *data;    /* decoded bytes, @len long */
	uint32_t len;
	struct cache_key key;
};

enum cache_policy {
	CACHE_POLICY_S3FIFO = 0, /* default: small FIFO + main FIFO + ghost keys */
	CACHE_POLICY_LRU = 1,    /* baseline: one LRU list per shard */
	CACHE_POLICY_2Q = 2,     /* A1in FIFO + A1out ghost + Am LRU */
};

/* Largest value the cache accepts unless options say otherwise. */
#define CACHE_VALUE_LEN_MAX_DEFAULT (1u << 20)

/* Bytes charged per entry on top of its value, for the header, the hash slot
 * and allocator slack; the budget counts charge = len (rounded to 64) + this. */
#define CACHE_ENTRY_OVERHEAD 128u

struct cache_options {
	uint64_t bytes_max;      /* the budget (coil_options.cache_bytes); 0 = off */
	uint32_t shards;         /* power of two; 0 = 16, reduced for small budgets */
	uint32_t entries_max;    /* entry headers preallocated; 0 = derived */
	uint32_t value_len_max;  /* largest value accepted; 0 = 1 MiB */
	enum cache_policy policy;
	uint32_t small_percent;  /* S3-FIFO small queue / 2Q A1in share; 0 = 10 */
};

/* Fill @o with defaults (64 MiB, S3-FIFO).  Then set fields. */
void cache_options_init(struct cache_options *o);

/* Create a cache.  All entry headers and tables are allocated here; the hot
 * path allocates nothing but the value buffers the caller fills.
 * @return 0 and *@out, -EINVAL for bad options, -ENOMEM. */
int cache_create(const struct cache_options *o, struct cache **out);

/* Free the cache and every cached value.  Accepts NULL.  Every handle from
 * cache_get/cache_insert must have been put before. */
void cache_destroy(struct cache *c);

/* Value buffers (cache_value.c).  A value inserted into the cache must come
 * from cache_alloc_value: the malloc family, 4 KiB aligned and a whole
 * number of pages when @len >= 4096 (so a raw blob can be read with
 * O_DIRECT straight into it), reused from a bounded process-wide stash of
 * freed buffers when one of that size is there.
 * @return NULL if @len is 0 or allocation fails. */
void *cache_alloc_value(size_t len);
/* Free a buffer from cache_alloc_value that the cache does not own; it may
 * go to the stash instead of the allocator.  NULL ok. */
void cache_free_value(void *buf);

struct cache_value_stats {
	uint64_t bytes;   /* held by the stash now */
	uint64_t reused;  /* allocations served from the stash */
	uint64_t kept;    /* frees the stash took */
	uint64_t dropped; /* frees it passed to free(): full, or no class */
};
void cache_value_stash_stats(struct cache_value_stats *st);
/* Free everything the stash holds. */
void cache_value_stash_trim(void);

/* cache_insert flags */
#define CACHE_INSERT_PREFETCH 1u  /* inserted by readahead, not yet demanded */

/* Insert @value (@len bytes, from cache_alloc_value) under @key.
 * On success the cache owns @value, and if @out is not NULL *@out is a
 * referenced entry for @key (release it with cache_put) so the caller can
 * copy from it without a second lookup.
 * @return 0 inserted; 1 @key was already cached: @value was freed and *@out
 *         is the existing entry (same key = same bytes);
 *         -EINVAL bad arguments (len 0 or > value_len_max), -ENOBUFS the
 *         value cannot fit the budget (cache off, or everything pinned).
 *         On a negative return the caller still owns @value. */
int cache_insert(struct cache *c, const struct cache_key *key, void *value,
		 uint32_t len, unsigned flags, const struct cache_entry **out);

/* Demand lookup: counts a hit or a miss and feeds the eviction policy.
 * @return 0 hit, CACHE_HIT_PREFETCHED hit that is the first demand of an
 *         entry readahead inserted (ready-before-demand), -ENOENT miss,
 *         -EINVAL bad arguments.  On a hit *@out is referenced: cache_put it. */
#define CACHE_HIT_PREFETCHED 1
int cache_get(struct cache *c, const struct cache_key *key,
	      const struct cache_entry **out);

/* Residency probe for readahead: no stats, no policy effect, no reference.
 * @return 1 cached, 0 not. */
int cache_contains(struct cache *c, const struct cache_key *key);

/* Release a handle from cache_get/cache_insert.  NULL ok. */
void cache_put(struct cache *c, const struct cache_entry *e);

/* Drop @key if cached (its bytes live on until the last put).
 * @return 1 dropped, 0 not cached. */
int cache_invalidate(struct cache *c, const struct cache_key *key);

/* Drop every entry, any generation, with lo <= dev_off < hi (a segment freed
 * by the cleaner, extents of a removed or truncated object).  Walks every
 * entry of every shard, one shard lock at a time: meant for rare events.
 * @return the number of entries dropped, -EINVAL if lo > hi. */
int64_t cache_invalidate_range(struct cache *c, uint64_t dev_off_lo,
			       uint64_t dev_off_hi);

/* Drop every entry (store close, tests). @return entries dropped. */
int64_t cache_clear(struct cache *c);

struct cache_stats {
	uint64_t hits;               /* cache_get found the key */
	uint64_t misses;             /* cache_get did not */
	uint64_t inserts;            /* cache_insert returned 0 */
	uint64_t insert_dups;        /* cache_insert returned 1 */
	uint64_t insert_rejects;     /* cache_insert returned -ENOBUFS */
	uint64_t evictions;          /* entries dropped to make room */
	uint64_t invalidations;      /* entries dropped by invalidate/clear */
	uint64_t bytes;              /* charged bytes now (incl. zombies) */
	uint64_t bytes_max;          /* the budget */
	uint64_t entries;            /* entries indexed now */
	uint64_t prefetch_inserts;   /* inserts with CACHE_INSERT_PREFETCH */
	uint64_t ready_before_demand;/* first demand hit on a prefetched entry */
	uint64_t evicted_before_use; /* prefetched entries evicted undemanded */
	uint64_t ghost_hits;         /* S3-FIFO/2Q: inserts admitted to main */
};

/* Sum the per-shard counters (each shard read under its lock; the sum is not
 * one atomic snapshot).  @return 0, -EINVAL. */
int cache_stats_get(struct cache *c, struct cache_stats *st);

/* Write the statistics as one JSON object (for coil_stats_json's "cache"
 * member), NUL-terminated, truncated to fit @len like snprintf.
 * @return the length the whole object needs (without the NUL), -EINVAL. */
int cache_stats_json(struct cache *c, char *buf, size_t len);

/* Name of a policy ("s3fifo", "lru", "2q"); "?" if unknown. */
const char *cache_policy_name(enum cache_policy p);
/* Parse a policy name as above.  @return 0, -EINVAL. */
int cache_policy_parse(const char *name, enum cache_policy *out);

#endif
