/* cache/cache_internal.h — the cache's private types, shared by cache.c (the
 * index, handles, budget) and cache_policy.c (the eviction policies).
 * Everything here is called with the shard lock held unless said otherwise. */
#ifndef COIL_CACHE_INTERNAL_H
#define COIL_CACHE_INTERNAL_H

#include "cache/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct cache_link {
	struct cache_link *prev, *next;
};

/* One FIFO/LRU queue: a circular list through a sentinel; head.next is the
 * newest entry, head.prev the oldest (the eviction end). */
struct cache_queue {
	struct cache_link head;
	uint64_t bytes;
	uint32_t count;
};

enum {
	NODE_Q_NONE = 0,
	NODE_Q_SMALL = 1, /* S3-FIFO small / 2Q A1in */
	NODE_Q_MAIN = 2,  /* S3-FIFO main / 2Q Am / LRU */
};

enum {
	NODE_F_INDEXED = 1u,    /* reachable through the hash table */
	NODE_F_UNDEMANDED = 2u, /* inserted by prefetch, no demand yet */
};

/* An entry header.  The public view comes first so a handle converts back. */
struct cache_node {
	struct cache_entry pub;
	struct cache_link link;     /* queue membership */
	struct cache_node *hnext;   /* hash chain, or the shard free list */
	uint64_t hash;
	void *value;                /* owned: freed with the node */
	/* One reference belongs to the index while NODE_F_INDEXED; readers hold
	 * the others.  Whoever drops the count to zero frees the node, so a
	 * reader's bytes outlive eviction. */
	atomic_uint refs;
	uint32_t charge;            /* bytes counted in the shard budget */
	uint16_t shard;
	uint8_t queue;              /* NODE_Q_* */
	uint8_t freq;               /* S3-FIFO 2-bit access count (0..3) */
	uint8_t flags;              /* NODE_F_*; changed under the shard lock */
};

_Static_assert(offsetof(struct cache_node, pub) == 0,
	       "a handle is the address of its node");

/* Ghost keys: an open-addressed table of hash fingerprints stamped with an
 * insertion clock.  A fingerprint counts as present while fewer than @window
 * ghosts were added after it, which makes the ghost a FIFO of the last
 * @window evicted keys without a list, deletions or allocation. */
struct cache_ghost {
	uint64_t *fp;      /* 0 = empty */
	uint64_t *stamp;
	uint32_t mask;
	uint64_t clock;
};

struct cache_counters {
	uint64_t hits, misses, inserts, insert_dups, insert_rejects;
	uint64_t evictions, invalidations;
	uint64_t prefetch_inserts, ready_before_demand, evicted_before_use;
	uint64_t ghost_hits;
};

struct cache_shard {
	pthread_mutex_t lock;
	struct cache_node **buckets;
	uint32_t bucket_mask;
	uint32_t entries;           /* indexed */
	uint32_t headers;           /* headers owned by this shard */
	struct cache_node *free;    /* free headers, linked through hnext */
	uint64_t bytes;             /* charged: indexed + zombies */
	uint64_t bytes_max;
	uint64_t small_max;         /* S3-FIFO small / 2Q A1in target bytes */
	struct cache_queue small, main;
	struct cache_ghost ghost;
	struct cache_counters n;
	uint8_t policy;
} __attribute__((aligned(64)));

struct cache {
	struct cache_shard *shards;
	struct cache_node *nodes;   /* every header, allocated at create */
	uint32_t nshards;
	uint32_t shard_shift;       /* shard = hash >> shard_shift */
	uint32_t value_len_max;
	uint64_t bytes_max;
	enum cache_policy policy;
};

/* cache_policy.c — all called with the shard lock held. */
int cache_policy_shard_init(struct cache_shard *s, uint32_t ghost_slots);
void cache_policy_shard_fini(struct cache_shard *s);
/* Queue a new node; @ghost_hit says its key was recently evicted. */
void cache_policy_insert(struct cache_shard *s, struct cache_node *n);
void cache_policy_hit(struct cache_shard *s, struct cache_node *n);
/* Unlink a node from its queue (invalidation). */
void cache_policy_remove(struct cache_shard *s, struct cache_node *n);
/* Choose, unlink and return the next victim (and remember it in the ghost
 * where the policy has one); NULL when the shard holds no entries. */
struct cache_node *cache_policy_victim(struct cache_shard *s);

void cache_queue_init(struct cache_queue *q);

#endif
