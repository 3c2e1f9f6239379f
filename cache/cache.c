/* cache/cache.c — the index, the handles and the byte budget of the
 * decoded-blob cache.  The eviction order lives in cache_policy.c.
 *
 * Concurrency: the key hash picks a shard; each shard has one mutex guarding
 * its hash table, queues, free headers, byte count and counters.  Under the
 * lock we only touch headers (lookup, a counter or a list move); blob bytes
 * are never copied under it: an insert takes ownership of a buffer the caller
 * already filled, and a reader copies from a referenced entry after the lock
 * is gone.  Freeing evicted values also happens after unlocking.
 *
 * Budget: each shard owns bytes_max / nshards and never goes past it.  An
 * entry is charged len (rounded up to 64) + CACHE_ENTRY_OVERHEAD from insert
 * until its memory is actually freed — so an evicted entry a reader still
 * holds (a zombie) stays charged until the last cache_put.
 */
#include "cache/cache_internal.h"
#include "common/common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#define SHARDS_DEFAULT 16u
#define SHARDS_MAX 256u
/* A shard should hold several of the largest values, or a 1 MiB blob would
 * evict everything else in its shard; small budgets get fewer shards. */
#define SHARD_VALUES_MIN 4u
#define ENTRIES_MAX_LIMIT (1u << 24)
/* Values freed after unlocking, per call; more are freed under the lock
 * (only a huge invalidate_range or clear gets there). */
#define DEFER_MAX 32

struct defer {
	void *v[DEFER_MAX];
	unsigned n;
};

const char *cache_policy_name(enum cache_policy p)
{
	switch (p) {
	case CACHE_POLICY_S3FIFO: return "s3fifo";
	case CACHE_POLICY_LRU: return "lru";
	case CACHE_POLICY_2Q: return "2q";
	}
	return "?";
}

int cache_policy_parse(const char *name, enum cache_policy *out)
{
	static const enum cache_policy all[] = {
		CACHE_POLICY_S3FIFO, CACHE_POLICY_LRU, CACHE_POLICY_2Q,
	};

	if (!name || !out)
		return -EINVAL;
	for (unsigned i = 0; i < COIL_ARRAY_LEN(all); i++)
		if (!strcmp(name, cache_policy_name(all[i]))) {
			*out = all[i];
			return 0;
		}
	return -EINVAL;
}

void cache_options_init(struct cache_options *o)
{
	memset(o, 0, sizeof(*o));
	o->bytes_max = 64ull << 20;
	o->policy = CACHE_POLICY_S3FIFO;
}

static uint32_t charge_of(uint32_t len)
{
	return (uint32_t)COIL_ALIGN_UP((uint64_t)len, 64) + CACHE_ENTRY_OVERHEAD;
}

static uint32_t pow2_at_least(uint64_t x)
{
	uint32_t n = 1;

	while (n < x && n < (1u << 31))
		n <<= 1;
	return n;
}

static uint64_t key_hash(const struct cache_key *k)
{
	uint64_t b[2] = { k->dev_off, k->gen };

	return XXH3_64bits(b, sizeof(b));
}

static struct cache_shard *shard_of(struct cache *c, uint64_t hash)
{
	uint32_t i = c->nshards > 1 ? (uint32_t)(hash >> c->shard_shift) : 0;

	return &c->shards[i];
}

static void defer_free(struct defer *d, void *v)
{
	if (d->n < DEFER_MAX)
		d->v[d->n++] = v;
	else
		cache_free_value(v);
}

static void defer_run(struct defer *d)
{
	for (unsigned i = 0; i < d->n; i++)
		cache_free_value(d->v[i]);
	d->n = 0;
}

/* --- create / destroy ------------------------------------------------ */

int cache_create(const struct cache_options *o, struct cache **out)
{
	struct cache *c;
	uint32_t nshards, vmax, per_shard, entries;
	uint64_t bmax;

	if (!o || !out)
		return -EINVAL;
	*out = NULL;
	nshards = o->shards ? o->shards : SHARDS_DEFAULT;
	vmax = o->value_len_max ? o->value_len_max : CACHE_VALUE_LEN_MAX_DEFAULT;
	if (nshards > SHARDS_MAX || (nshards & (nshards - 1)) ||
	    o->policy > CACHE_POLICY_2Q || o->small_percent > 90 ||
	    vmax > (UINT32_MAX >> 1))
		return -EINVAL;
	bmax = o->bytes_max;
	while (nshards > 1 && bmax / nshards < (uint64_t)SHARD_VALUES_MIN * vmax)
		nshards >>= 1;

	entries = o->entries_max;
	if (!entries)
		entries = (uint32_t)COIL_MIN(bmax / 4096, ENTRIES_MAX_LIMIT);
	if (entries > ENTRIES_MAX_LIMIT)
		return -EINVAL;
	per_shard = COIL_MAX(entries / nshards, 8u);

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->nshards = nshards;
	c->shard_shift = 64 - (uint32_t)__builtin_ctz(nshards);
	c->value_len_max = vmax;
	c->bytes_max = bmax / nshards * nshards;
	c->policy = o->policy;
	c->shards = aligned_alloc(64, sizeof(*c->shards) * nshards);
	c->nodes = calloc((size_t)per_shard * nshards, sizeof(*c->nodes));
	if (!c->shards || !c->nodes) {
		free(c->shards);
		free(c->nodes);
		free(c);
		return -ENOMEM;
	}
	memset(c->shards, 0, sizeof(*c->shards) * nshards);

	for (uint32_t i = 0; i < nshards; i++) {
		struct cache_shard *s = &c->shards[i];
		uint32_t small_pct = o->small_percent ? o->small_percent :
				     (o->policy == CACHE_POLICY_2Q ? 25 : 10);
		uint32_t nb = pow2_at_least(per_shard);

		s->policy = (uint8_t)o->policy;
		s->bytes_max = bmax / nshards;
		s->small_max = s->bytes_max * small_pct / 100;
		s->headers = per_shard;
		s->buckets = calloc(nb, sizeof(*s->buckets));
		s->bucket_mask = nb - 1;
		if (!s->buckets || cache_policy_shard_init(s, 2 * per_shard) ||
		    pthread_mutex_init(&s->lock, NULL)) {
			free(s->buckets);
			cache_policy_shard_fini(s);
			c->nshards = i;
			cache_destroy(c);
			return -ENOMEM;
		}
		for (uint32_t k = 0; k < per_shard; k++) {
			struct cache_node *n = &c->nodes[(size_t)i * per_shard + k];

			n->shard = (uint16_t)i;
			n->hnext = s->free;
			s->free = n;
		}
	}
	*out = c;
	return 0;
}

void cache_destroy(struct cache *c)
{
	if (!c)
		return;
	cache_clear(c);
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct cache_shard *s = &c->shards[i];

		/* A handle still held here is the caller's bug; its node
		 * memory goes away with the cache. */
		COIL_DASSERT(s->bytes == 0);
		free(s->buckets);
		cache_policy_shard_fini(s);
		pthread_mutex_destroy(&s->lock);
	}
	free(c->shards);
	free(c->nodes);
	free(c);
}

/* --- index ------------------------------------------------------------ */

static struct cache_node *index_find(struct cache_shard *s, uint64_t hash,
				     const struct cache_key *k)
{
	struct cache_node *n = s->buckets[hash & s->bucket_mask];

	for (; n; n = n->hnext)
		if (n->hash == hash && n->pub.key.dev_off == k->dev_off &&
		    n->pub.key.gen == k->gen)
			return n;
	return NULL;
}

static void index_add(struct cache_shard *s, struct cache_node *n)
{
	struct cache_node **b = &s->buckets[n->hash & s->bucket_mask];

	n->hnext = *b;
	*b = n;
	n->flags |= NODE_F_INDEXED;
	s->entries++;
}

static void index_del(struct cache_shard *s, struct cache_node *n)
{
	struct cache_node **p = &s->buckets[n->hash & s->bucket_mask];

	while (*p != n) {
		COIL_ASSERT(*p);
		p = &(*p)->hnext;
	}
	*p = n->hnext;
	n->hnext = NULL;
	n->flags &= (uint8_t)~NODE_F_INDEXED;
	s->entries--;
}

/* Return a node with no references left to the free list. */
static void node_release(struct cache_shard *s, struct cache_node *n,
			 struct defer *d)
{
	COIL_ASSERT(s->bytes >= n->charge);
	s->bytes -= n->charge;
	defer_free(d, n->value);
	n->value = NULL;
	n->pub.data = NULL;
	n->hnext = s->free;
	s->free = n;
}

/* Take a node out of the index (it is already out of its queue) and drop the
 * index's reference; readers still holding it keep it alive. */
static void node_drop(struct cache_shard *s, struct cache_node *n,
		      struct defer *d)
{
	index_del(s, n);
	if (atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1)
		node_release(s, n, d);
}

static bool evict_one(struct cache_shard *s, struct defer *d)
{
	struct cache_node *n = cache_policy_victim(s);

	if (!n)
		return false;
	s->n.evictions++;
	if (n->flags & NODE_F_UNDEMANDED)
		s->n.evicted_before_use++;
	node_drop(s, n, d);
	return true;
}

/* --- the operations -------------------------------------------------- */

static bool key_ok(const struct cache *c, const struct cache_key *k)
{
	return c && k;
}

int cache_insert(struct cache *c, const struct cache_key *key, void *value,
		 uint32_t len, unsigned flags, const struct cache_entry **out)
{
	struct cache_shard *s;
	struct cache_node *n;
	struct defer d = { .n = 0 };
	uint64_t hash;
	uint32_t charge;

	if (out)
		*out = NULL;
	if (!key_ok(c, key) || !value || len == 0 || len > c->value_len_max ||
	    (flags & ~CACHE_INSERT_PREFETCH))
		return -EINVAL;
	hash = key_hash(key);
	s = shard_of(c, hash);
	charge = charge_of(len);

	pthread_mutex_lock(&s->lock);
	n = index_find(s, hash, key);
	if (n) {
		/* Same key, same bytes: keep the entry readers may hold. */
		s->n.insert_dups++;
		if (!(flags & CACHE_INSERT_PREFETCH))
			n->flags &= (uint8_t)~NODE_F_UNDEMANDED;
		if (out) {
			atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
			*out = &n->pub;
		}
		pthread_mutex_unlock(&s->lock);
		cache_free_value(value);
		return 1;
	}
	if (charge > s->bytes_max)
		goto reject;
	while (s->bytes + charge > s->bytes_max || !s->free)
		if (!evict_one(s, &d))
			goto reject; /* what is left is pinned by readers */

	n = s->free;
	s->free = n->hnext;
	n->hnext = NULL;
	n->hash = hash;
	n->value = value;
	n->pub.data = value;
	n->pub.len = len;
	n->pub.key = *key;
	n->charge = charge;
	n->flags = (flags & CACHE_INSERT_PREFETCH) ? NODE_F_UNDEMANDED : 0;
	atomic_store_explicit(&n->refs, out ? 2u : 1u, memory_order_relaxed);
	index_add(s, n);
	cache_policy_insert(s, n);
	s->bytes += charge;
	s->n.inserts++;
	if (flags & CACHE_INSERT_PREFETCH)
		s->n.prefetch_inserts++;
	COIL_ASSERT(s->bytes <= s->bytes_max);
	pthread_mutex_unlock(&s->lock);
	defer_run(&d);
	if (out)
		*out = &n->pub;
	return 0;

reject:
	s->n.insert_rejects++;
	pthread_mutex_unlock(&s->lock);
	defer_run(&d);
	return -ENOBUFS;
}

int cache_get(struct cache *c, const struct cache_key *key,
	      const struct cache_entry **out)
{
	struct cache_shard *s;
	struct cache_node *n;
	uint64_t hash;
	int rc = 0;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!key_ok(c, key))
		return -EINVAL;
	hash = key_hash(key);
	s = shard_of(c, hash);

	pthread_mutex_lock(&s->lock);
	n = index_find(s, hash, key);
	if (!n) {
		s->n.misses++;
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
	cache_policy_hit(s, n);
	s->n.hits++;
	if (n->flags & NODE_F_UNDEMANDED) {
		n->flags &= (uint8_t)~NODE_F_UNDEMANDED;
		s->n.ready_before_demand++;
		rc = CACHE_HIT_PREFETCHED;
	}
	pthread_mutex_unlock(&s->lock);
	*out = &n->pub;
	return rc;
}

int cache_contains(struct cache *c, const struct cache_key *key)
{
	struct cache_shard *s;
	uint64_t hash;
	int rc;

	if (!key_ok(c, key))
		return 0;
	hash = key_hash(key);
	s = shard_of(c, hash);
	pthread_mutex_lock(&s->lock);
	rc = index_find(s, hash, key) != NULL;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void cache_put(struct cache *c, const struct cache_entry *e)
{
	struct cache_node *n = (struct cache_node *)e;
	struct cache_shard *s;
	struct defer d = { .n = 0 };

	if (!c || !n)
		return;
	/* The index holds a reference while the node is indexed, so only a
	 * dropped node (a zombie) can reach zero here; nobody else can find
	 * it any more, and the lock is only for the free list and bytes. */
	if (atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) != 1)
		return;
	s = &c->shards[n->shard];
	pthread_mutex_lock(&s->lock);
	COIL_ASSERT(!(n->flags & NODE_F_INDEXED));
	node_release(s, n, &d);
	pthread_mutex_unlock(&s->lock);
	defer_run(&d);
}

int cache_invalidate(struct cache *c, const struct cache_key *key)
{
	struct cache_shard *s;
	struct cache_node *n;
	struct defer d = { .n = 0 };
	uint64_t hash;

	if (!key_ok(c, key))
		return -EINVAL;
	hash = key_hash(key);
	s = shard_of(c, hash);
	pthread_mutex_lock(&s->lock);
	n = index_find(s, hash, key);
	if (n) {
		cache_policy_remove(s, n);
		s->n.invalidations++;
		node_drop(s, n, &d);
	}
	pthread_mutex_unlock(&s->lock);
	defer_run(&d);
	return n != NULL;
}

/* Drop every indexed entry of @q with lo <= dev_off <= last. */
static int64_t queue_drop_range(struct cache_shard *s, struct cache_queue *q,
				uint64_t lo, uint64_t last, struct defer *d)
{
	struct cache_link *l = q->head.next;
	int64_t dropped = 0;

	while (l != &q->head) {
		struct cache_node *n = (struct cache_node *)
			((char *)l - offsetof(struct cache_node, link));

		l = l->next;
		if (n->pub.key.dev_off < lo || n->pub.key.dev_off > last)
			continue;
		cache_policy_remove(s, n);
		s->n.invalidations++;
		node_drop(s, n, d);
		dropped++;
	}
	return dropped;
}

static int64_t drop_range(struct cache *c, uint64_t lo, uint64_t last)
{
	int64_t dropped = 0;

	for (uint32_t i = 0; i < c->nshards; i++) {
		struct cache_shard *s = &c->shards[i];
		struct defer d = { .n = 0 };

		pthread_mutex_lock(&s->lock);
		dropped += queue_drop_range(s, &s->small, lo, last, &d);
		dropped += queue_drop_range(s, &s->main, lo, last, &d);
		pthread_mutex_unlock(&s->lock);
		defer_run(&d);
	}
	return dropped;
}

int64_t cache_invalidate_range(struct cache *c, uint64_t dev_off_lo,
			       uint64_t dev_off_hi)
{
	if (!c || dev_off_lo > dev_off_hi)
		return -EINVAL;
	if (dev_off_lo == dev_off_hi)
		return 0;
	return drop_range(c, dev_off_lo, dev_off_hi - 1);
}

int64_t cache_clear(struct cache *c)
{
	if (!c)
		return -EINVAL;
	return drop_range(c, 0, UINT64_MAX);
}

int cache_stats_get(struct cache *c, struct cache_stats *st)
{
	if (!c || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->bytes_max = c->bytes_max;
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct cache_shard *s = &c->shards[i];

		pthread_mutex_lock(&s->lock);
		st->hits += s->n.hits;
		st->misses += s->n.misses;
		st->inserts += s->n.inserts;
		st->insert_dups += s->n.insert_dups;
		st->insert_rejects += s->n.insert_rejects;
		st->evictions += s->n.evictions;
		st->invalidations += s->n.invalidations;
		st->prefetch_inserts += s->n.prefetch_inserts;
		st->ready_before_demand += s->n.ready_before_demand;
		st->evicted_before_use += s->n.evicted_before_use;
		st->ghost_hits += s->n.ghost_hits;
		st->bytes += s->bytes;
		st->entries += s->entries;
		pthread_mutex_unlock(&s->lock);
	}
	return 0;
}

int cache_stats_json(struct cache *c, char *buf, size_t len)
{
	struct cache_stats st;
	uint64_t lookups;
	int n;

	if (!c || (!buf && len))
		return -EINVAL;
	cache_stats_get(c, &st);
	lookups = st.hits + st.misses;
	n = snprintf(buf, len,
		     "{\"policy\":\"%s\",\"hits\":%" PRIu64 ",\"misses\":%" PRIu64
		     ",\"hit_ratio\":%.4f,\"inserts\":%" PRIu64
		     ",\"insert_dups\":%" PRIu64 ",\"insert_rejects\":%" PRIu64
		     ",\"evictions\":%" PRIu64 ",\"invalidations\":%" PRIu64
		     ",\"bytes\":%" PRIu64 ",\"bytes_max\":%" PRIu64
		     ",\"entries\":%" PRIu64 ",\"prefetch_inserts\":%" PRIu64
		     ",\"ready_before_demand\":%" PRIu64
		     ",\"evicted_before_use\":%" PRIu64 ",\"ghost_hits\":%" PRIu64
		     ",\"shards\":%" PRIu32 "}",
		     cache_policy_name(c->policy), st.hits, st.misses,
		     lookups ? (double)st.hits / (double)lookups : 0.0, st.inserts,
		     st.insert_dups, st.insert_rejects, st.evictions,
		     st.invalidations, st.bytes, st.bytes_max, st.entries,
		     st.prefetch_inserts, st.ready_before_demand,
		     st.evicted_before_use, st.ghost_hits, c->nshards);
	return n < 0 ? -EINVAL : n;
}
