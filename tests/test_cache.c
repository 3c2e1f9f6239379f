/* tests/test_cache.c — the decoded-blob cache: hits and misses, the byte
 * budget, handle lifetimes across eviction, invalidation, scan resistance,
 * concurrent readers and writers never seeing another key's bytes, and the
 * prefetch counters. */
#include "cache/cache.h"
#include "common/common.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const enum cache_policy all_policies[] = {
	CACHE_POLICY_S3FIFO, CACHE_POLICY_LRU, CACHE_POLICY_2Q,
};

static struct cache *mk(uint64_t bytes, enum cache_policy p, uint32_t shards)
{
	struct cache_options o;
	struct cache *c = NULL;

	cache_options_init(&o);
	o.bytes_max = bytes;
	o.policy = p;
	o.shards = shards;
	cr_assert_eq(cache_create(&o, &c), 0);
	cr_assert_not_null(c);
	return c;
}

/* Each value's bytes are a function of its key and position, so a reader
 * can tell whether the bytes it got belong to the key it asked for. */
static uint64_t key_mix(const struct cache_key *k)
{
	uint64_t x = k->dev_off * 0x9E3779B97F4A7C15ull ^ k->gen * 0xC2B2AE3D27D4EB4Full;

	return x ^ x >> 29 ^ x >> 47;
}

static uint8_t pat_h(uint64_t h, uint32_t i)
{
	return (uint8_t)((uint8_t)(h >> (i & 56)) + (uint8_t)i + (uint8_t)(i >> 8));
}

static void *mkval(const struct cache_key *k, uint32_t len)
{
	uint8_t *v = cache_alloc_value(len);
	uint64_t h = key_mix(k);

	cr_assert_not_null(v);
	for (uint32_t i = 0; i < len; i++)
		v[i] = pat_h(h, i);
	return v;
}

static bool val_ok(const struct cache_entry *e, const struct cache_key *k,
		   uint32_t len)
{
	if (e->len != len || e->key.dev_off != k->dev_off || e->key.gen != k->gen)
		return false;
	uint64_t h = key_mix(k);

	/* Spot checks keep the concurrent test fast under ASan. */
	for (uint32_t i = 0; i < len; i += 97)
		if (e->data[i] != pat_h(h, i))
			return false;
	return e->data[len - 1] == pat_h(h, len - 1);
}

static int insert_new(struct cache *c, uint64_t off, uint64_t gen, uint32_t len,
		      unsigned flags)
{
	struct cache_key k = { off, gen };
	void *v = mkval(&k, len);
	int rc = cache_insert(c, &k, v, len, flags, NULL);

	if (rc < 0)
		cache_free_value(v);
	return rc;
}

static bool cached(struct cache *c, uint64_t off, uint64_t gen)
{
	return cache_contains(c, &(struct cache_key){ off, gen }) == 1;
}

Test(cache, hit_miss_and_dup)
{
	struct cache *c = mk(8 << 20, CACHE_POLICY_S3FIFO, 0);
	struct cache_key k = { 4096, 7 }, k2 = { 4096, 8 };
	const struct cache_entry *e, *e2;
	struct cache_stats st;
	void *v;

	cr_assert_eq(cache_get(c, &k, &e), -ENOENT);
	cr_assert_null(e);
	v = mkval(&k, 5000);
	cr_assert_eq(cache_insert(c, &k, v, 5000, 0, &e), 0);
	cr_assert(val_ok(e, &k, 5000));
	cache_put(c, e);
	cr_assert_eq(cache_get(c, &k, &e), 0);
	cr_assert(val_ok(e, &k, 5000));
	cache_put(c, e);
	/* another generation at the same offset is another blob */
	cr_assert_eq(cache_get(c, &k2, &e), -ENOENT);
	cr_assert_eq(cache_contains(c, &k), 1);
	cr_assert_eq(cache_contains(c, &k2), 0);

	/* a second insert of the same key keeps the first entry */
	v = mkval(&k, 5000);
	cr_assert_eq(cache_insert(c, &k, v, 5000, 0, &e2), 1);
	cr_assert(val_ok(e2, &k, 5000));
	cr_assert_eq(cache_get(c, &k, &e), 0);
	cr_assert_eq(e, e2);
	cache_put(c, e);
	cache_put(c, e2);

	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_eq(st.hits, 2);
	cr_assert_eq(st.misses, 2);
	cr_assert_eq(st.inserts, 1);
	cr_assert_eq(st.insert_dups, 1);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(st.bytes, COIL_ALIGN_UP(5000, 64) + CACHE_ENTRY_OVERHEAD);
	cache_destroy(c);
}

Test(cache, value_alignment_and_shards)
{
	struct cache *c;
	char buf[512];
	void *v;

	/* 4 KiB aligned from one page up: a raw blob can be read O_DIRECT
	 * straight into the buffer the cache will own */
	for (size_t len = 4096; len <= (1u << 20); len = len * 3 + 5) {
		v = cache_alloc_value(len);
		cr_assert_not_null(v);
		cr_assert_eq((uintptr_t)v % 4096, 0, "len %zu", len);
		cache_free_value(v);
	}
	cache_free_value(NULL);
	/* the default 64 MiB keeps 16 shards; a 4 MiB cache gets 1 so a
	 * 1 MiB blob does not evict its whole shard */
	c = mk(64 << 20, CACHE_POLICY_S3FIFO, 0);
	cr_assert_gt(cache_stats_json(c, buf, sizeof(buf)), 0);
	cr_assert_not_null(strstr(buf, "\"shards\":16}"), "%s", buf);
	cache_destroy(c);
	c = mk(4 << 20, CACHE_POLICY_S3FIFO, 0);
	cr_assert_gt(cache_stats_json(c, buf, sizeof(buf)), 0);
	cr_assert_not_null(strstr(buf, "\"shards\":1}"), "%s", buf);
	cache_destroy(c);
}

Test(cache, bad_input_is_an_error_not_a_crash)
{
	struct cache_options o;
	struct cache *c = NULL;
	struct cache_key k = { 0, 0 };
	const struct cache_entry *e;
	void *v;

	cache_options_init(&o);
	o.shards = 3;
	cr_assert_eq(cache_create(&o, &c), -EINVAL);
	cache_options_init(&o);
	o.policy = (enum cache_policy)9;
	cr_assert_eq(cache_create(&o, &c), -EINVAL);
	cr_assert_eq(cache_create(NULL, &c), -EINVAL);
	cache_destroy(NULL);
	cache_put(NULL, NULL);
	cr_assert_null(cache_alloc_value(0));

	c = mk(4 << 20, CACHE_POLICY_S3FIFO, 0);
	v = mkval(&k, 64);
	cr_assert_eq(cache_insert(c, &k, v, 0, 0, NULL), -EINVAL);
	cr_assert_eq(cache_insert(c, &k, v, (1u << 20) + 1, 0, NULL), -EINVAL);
	cr_assert_eq(cache_insert(c, &k, v, 64, 0x80, NULL), -EINVAL);
	cr_assert_eq(cache_insert(c, NULL, v, 64, 0, NULL), -EINVAL);
	cr_assert_eq(cache_get(c, NULL, &e), -EINVAL);
	cr_assert_eq(cache_get(c, &k, NULL), -EINVAL);
	cr_assert_eq(cache_invalidate_range(c, 10, 5), -EINVAL);
	cr_assert_eq(cache_invalidate_range(c, 5, 5), 0);
	cache_free_value(v); /* still ours after every refusal */
	cache_destroy(c);

	/* a budget of 0 turns the cache off: inserts are refused, not lost */
	c = mk(0, CACHE_POLICY_S3FIFO, 0);
	v = mkval(&k, 64);
	cr_assert_eq(cache_insert(c, &k, v, 64, 0, &e), -ENOBUFS);
	cr_assert_null(e);
	cache_free_value(v);
	cr_assert_eq(cache_get(c, &k, &e), -ENOENT);
	cache_destroy(c);
}

/* Random sizes up to 1 MiB, random re-reads, some handles held: the charged
 * bytes never pass the budget, after every single operation. */
Test(cache, budget_never_exceeded)
{
	for (unsigned p = 0; p < COIL_ARRAY_LEN(all_policies); p++) {
		uint64_t budget = 6 << 20;
		struct cache *c = mk(budget, all_policies[p], 0);
		const struct cache_entry *held[8] = { 0 };
		struct cache_stats st;
		unsigned seed = 42 + p;

		for (int i = 0; i < 3000; i++) {
			uint64_t off = (uint64_t)(rand_r(&seed) % 500) * 4096;
			uint32_t len = 1 + (uint32_t)rand_r(&seed) %
				       (rand_r(&seed) % 8 ? 65536 : (1u << 20));
			struct cache_key k = { off, 1 };
			const struct cache_entry *e;
			unsigned slot = (unsigned)rand_r(&seed) % 8;

			if (cache_get(c, &k, &e) == 0) {
				cr_assert_eq(e->key.dev_off, off);
				cache_put(c, held[slot]);
				held[slot] = e;
			} else {
				void *v = mkval(&k, len);
				int rc = cache_insert(c, &k, v, len, 0, NULL);

				if (rc < 0) {
					cr_assert_eq(rc, -ENOBUFS);
					cache_free_value(v);
				}
			}
			cr_assert_eq(cache_stats_get(c, &st), 0);
			cr_assert_leq(st.bytes, st.bytes_max,
				      "%s: %lu > %lu at op %d",
				      cache_policy_name(all_policies[p]),
				      (unsigned long)st.bytes,
				      (unsigned long)st.bytes_max, i);
			cr_assert_leq(st.bytes_max, budget);
		}
		cr_assert_gt(st.evictions, 100);
		for (unsigned i = 0; i < 8; i++)
			cache_put(c, held[i]);
		cr_assert_eq(cache_clear(c), (int64_t)st.entries);
		cr_assert_eq(cache_stats_get(c, &st), 0);
		cr_assert_eq(st.bytes, 0);
		cr_assert_eq(st.entries, 0);
		cache_destroy(c);
	}
}

/* A reader's handle outlives eviction and invalidation: the bytes stay
 * readable (ASan would flag a use after free) and charged until the put. */
Test(cache, handle_keeps_evicted_bytes_alive)
{
	struct cache *c = mk(1 << 20, CACHE_POLICY_LRU, 1);
	struct cache_key k = { 0, 1 };
	const struct cache_entry *e, *e2;
	struct cache_stats st;
	uint32_t charge = COIL_ALIGN_UP(65536, 64) + CACHE_ENTRY_OVERHEAD;

	cr_assert_eq(insert_new(c, 0, 1, 65536, 0), 0);
	cr_assert_eq(cache_get(c, &k, &e), 0);
	/* flood: key 0 is evicted while held */
	for (uint64_t i = 1; i < 64; i++)
		cr_assert_eq(insert_new(c, i * 65536, 1, 65536, 0), 0);
	cr_assert_eq(cache_contains(c, &k), 0);
	cr_assert(val_ok(e, &k, 65536));
	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_leq(st.bytes, st.bytes_max);
	cr_assert_eq(st.bytes, (st.entries + 1) * charge, "zombie still charged");

	/* a re-insert of the evicted key is a new entry; both stay valid */
	cr_assert_eq(insert_new(c, 0, 1, 65536, 0), 0);
	cr_assert_eq(cache_get(c, &k, &e2), 0);
	cr_assert_neq(e, e2);
	cr_assert_eq(cache_invalidate(c, &k), 1);
	cr_assert(val_ok(e2, &k, 65536));
	cr_assert(val_ok(e, &k, 65536));
	cache_put(c, e);
	cache_put(c, e2);
	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_eq(st.bytes, st.entries * charge, "zombies freed on put");
	cache_destroy(c);
}

/* Everything pinned by readers: an insert that cannot make room says so and
 * leaves the buffer with the caller instead of going over budget. */
Test(cache, all_pinned_refuses_insert)
{
	struct cache *c = mk(1 << 20, CACHE_POLICY_S3FIFO, 1);
	const struct cache_entry *e[32];
	unsigned n = 0;
	struct cache_stats st;

	for (uint64_t i = 0; i < 32; i++) {
		struct cache_key k = { i * 65536, 0 };
		void *v = mkval(&k, 65536);
		int rc = cache_insert(c, &k, v, 65536, 0, &e[n]);

		if (rc < 0) {
			cr_assert_eq(rc, -ENOBUFS);
			cache_free_value(v);
			break;
		}
		n++;
	}
	cr_assert_geq(n, 14);
	cr_assert_lt(n, 32);
	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_leq(st.bytes, st.bytes_max);
	cr_assert_eq(st.insert_rejects, 1);
	for (unsigned i = 0; i < n; i++) {
		cr_assert(val_ok(e[i], &e[i]->key, 65536));
		cache_put(c, e[i]);
	}
	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_leq(st.bytes, st.bytes_max);
	cache_destroy(c);
}

Test(cache, invalidate_and_range)
{
	struct cache *c = mk(16 << 20, CACHE_POLICY_S3FIFO, 0);
	struct cache_stats st;

	/* segment [1 MiB, 2 MiB) holds blobs of two generations */
	for (uint64_t off = 0; off < (4 << 20); off += 65536)
		cr_assert_eq(insert_new(c, off, 1, 4096, 0), 0);
	for (uint64_t off = 1 << 20; off < (2 << 20); off += 65536)
		cr_assert_eq(insert_new(c, off + 512, 2, 4096, 0), 0);
	cr_assert_eq(cache_invalidate(c, &(struct cache_key){ 0, 1 }), 1);
	cr_assert_eq(cache_invalidate(c, &(struct cache_key){ 0, 1 }), 0);
	cr_assert_eq(cache_invalidate(c, &(struct cache_key){ 65536, 2 }), 0);
	cr_assert(!cached(c, 0, 1));
	cr_assert(cached(c, 65536, 1));

	cr_assert_eq(cache_invalidate_range(c, 1 << 20, 2 << 20), 32);
	for (uint64_t off = 0; off < (4 << 20); off += 65536) {
		bool in = off >= (1 << 20) && off < (2 << 20);

		cr_assert_eq(cached(c, off, 1), !in && off != 0, "off %lu",
			     (unsigned long)off);
		cr_assert(!cached(c, off + 512, 2));
	}
	cr_assert(cached(c, 2 << 20, 1), "hi bound is exclusive");
	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_eq(st.invalidations, 33);
	cr_assert_eq(st.entries, 64 - 1 - 16);
	cache_destroy(c);
}

static void touch(struct cache *c, uint64_t off, uint32_t len)
{
	const struct cache_entry *e;
	struct cache_key k = { off, 1 };

	if (cache_get(c, &k, &e) == 0)
		cache_put(c, e);
	else
		cr_assert_eq(insert_new(c, off, 1, len, 0), 0);
}

/* A hot set that is re-read survives one sequential scan of 3x the cache
 * with S3-FIFO and 2Q; plain LRU loses all of it.  The hot set has lived in
 * the cache a while: once-read filler passed through before it was re-read
 * (2Q only promotes keys that come back from its ghost). */
Test(cache, scan_resistance)
{
	const uint32_t blob = 65536;
	const uint64_t budget = 4 << 20, hot = 16, fill = budget / blob;
	const uint64_t scan = 3 * fill;

	for (unsigned p = 0; p < COIL_ARRAY_LEN(all_policies); p++) {
		struct cache *c = mk(budget, all_policies[p], 1);
		unsigned survived = 0;

		for (int round = 0; round < 3; round++)
			for (uint64_t i = 0; i < hot; i++)
				touch(c, i * blob, blob);
		for (uint64_t i = 0; i < fill; i++)
			touch(c, (500 + i) * blob, blob);
		for (int round = 0; round < 3; round++)
			for (uint64_t i = 0; i < hot; i++)
				touch(c, i * blob, blob);
		for (uint64_t i = 0; i < scan; i++) {
			const struct cache_entry *e;
			struct cache_key k = { (1000 + i) * blob, 1 };

			cr_assert_eq(cache_get(c, &k, &e), -ENOENT);
			cr_assert_eq(insert_new(c, k.dev_off, 1, blob, 0), 0);
		}
		for (uint64_t i = 0; i < hot; i++)
			survived += cached(c, i * blob, 1);
		if (all_policies[p] == CACHE_POLICY_LRU)
			cr_assert_eq(survived, 0, "lru kept %u", survived);
		else
			cr_assert_eq(survived, hot, "%s kept %u of %lu",
				     cache_policy_name(all_policies[p]), survived,
				     (unsigned long)hot);
		cache_destroy(c);
	}
}

Test(cache, prefetch_accounting)
{
	struct cache *c = mk(1 << 20, CACHE_POLICY_S3FIFO, 1);
	struct cache_key k = { 0, 3 };
	const struct cache_entry *e;
	struct cache_stats st;

	cr_assert_eq(insert_new(c, 0, 3, 4096, CACHE_INSERT_PREFETCH), 0);
	/* readahead's own residency probe is not a demand */
	cr_assert_eq(cache_contains(c, &k), 1);
	cr_assert_eq(cache_get(c, &k, &e), CACHE_HIT_PREFETCHED);
	cache_put(c, e);
	cr_assert_eq(cache_get(c, &k, &e), 0, "only the first demand counts");
	cache_put(c, e);

	/* a demand insert racing a prefetched entry marks it demanded */
	cr_assert_eq(insert_new(c, 4096, 3, 4096, CACHE_INSERT_PREFETCH), 0);
	cr_assert_eq(insert_new(c, 4096, 3, 4096, 0), 1);
	cr_assert_eq(cache_get(c, &(struct cache_key){ 4096, 3 }, &e), 0);
	cache_put(c, e);

	/* undemanded prefetches: some evicted, one invalidated, one used */
	for (uint64_t i = 0; i < 40; i++)
		cr_assert_eq(insert_new(c, (100 + i) * 65536, 3, 65536,
					CACHE_INSERT_PREFETCH), 0);
	cr_assert_eq(cache_get(c, &(struct cache_key){ 139 * 65536, 3 }, &e),
		     CACHE_HIT_PREFETCHED);
	cache_put(c, e);
	cr_assert_eq(cache_invalidate(c, &(struct cache_key){ 138 * 65536, 3 }), 1);

	cr_assert_eq(cache_stats_get(c, &st), 0);
	cr_assert_eq(st.prefetch_inserts, 42);
	cr_assert_eq(st.ready_before_demand, 2);
	cr_assert_gt(st.evicted_before_use, 0);
	cr_assert_leq(st.evicted_before_use, st.evictions);
	/* every prefetched entry is demanded, evicted, invalidated or still
	 * waiting: the report adds up */
	{
		uint64_t waiting = 0;

		for (uint64_t i = 0; i < 40; i++)
			waiting += cached(c, (100 + i) * 65536, 3);
		cr_assert_eq(st.prefetch_inserts,
			     st.ready_before_demand + 1 /* demand dup */ +
			     st.evicted_before_use + 1 /* invalidated */ +
			     waiting - 1 /* 139 is demanded, still cached */);
	}
	cache_destroy(c);
}

Test(cache, stats_json_and_policy_names)
{
	struct cache *c = mk(1 << 20, CACHE_POLICY_2Q, 1);
	const struct cache_entry *e;
	enum cache_policy p;
	char buf[1024], small[16];
	int n;

	cr_assert_eq(insert_new(c, 0, 1, 100, CACHE_INSERT_PREFETCH), 0);
	cr_assert_eq(cache_get(c, &(struct cache_key){ 0, 1 }, &e), CACHE_HIT_PREFETCHED);
	cache_put(c, e);
	n = cache_stats_json(c, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_lt(n, (int)sizeof(buf));
	cr_assert_eq((size_t)n, strlen(buf));
	cr_assert_not_null(strstr(buf, "\"policy\":\"2q\""));
	cr_assert_not_null(strstr(buf, "\"hits\":1,"));
	cr_assert_not_null(strstr(buf, "\"ready_before_demand\":1,"));
	cr_assert_not_null(strstr(buf, "\"evicted_before_use\":0,"));
	cr_assert_eq(buf[0], '{');
	cr_assert_eq(buf[n - 1], '}');
	/* too small: truncated, terminated, and the needed length returned */
	cr_assert_eq(cache_stats_json(c, small, sizeof(small)), n);
	cr_assert_eq(strlen(small), sizeof(small) - 1);
	cr_assert_eq(cache_stats_json(c, NULL, 0), n);
	cr_assert_eq(cache_stats_json(NULL, buf, sizeof(buf)), -EINVAL);

	for (int i = 0; i < 3; i++) {
		cr_assert_eq(cache_policy_parse(cache_policy_name(all_policies[i]), &p), 0);
		cr_assert_eq(p, all_policies[i]);
	}
	cr_assert_eq(cache_policy_parse("arc", &p), -EINVAL);
	cr_assert_eq(cache_policy_parse(NULL, &p), -EINVAL);
	cache_destroy(c);
}

/* Against a model: after every random operation, the index holds exactly
 * the keys cache_contains reports, and the charged bytes are exactly those
 * of the resident entries plus the evicted ones readers still hold. */
Test(cache, accounting_matches_a_model)
{
	enum { KEYS = 64, HELD = 6 };

	for (unsigned p = 0; p < COIL_ARRAY_LEN(all_policies); p++) {
		struct cache *c = mk(1 << 20, all_policies[p], 1);
		const struct cache_entry *held[HELD] = { 0 };
		unsigned seed = 99 + p;

		for (int step = 0; step < 4000; step++) {
			uint64_t ki = (uint64_t)rand_r(&seed) % KEYS;
			struct cache_key k = { ki * 4096, ki % 3 };
			uint32_t len = 1 + (uint32_t)(ki * 7919 % 120000);
			unsigned op = (unsigned)rand_r(&seed) % 10, slot = ki % HELD;
			const struct cache_entry *e;
			struct cache_stats st;
			uint64_t bytes = 0, entries = 0;

			if (op < 5) {
				if (cache_get(c, &k, &e) >= 0) {
					cr_assert(val_ok(e, &k, len));
					cache_put(c, held[slot]);
					held[slot] = e;
				} else {
					insert_new(c, k.dev_off, k.gen, len, 0);
				}
			} else if (op < 7) {
				cache_invalidate(c, &k);
			} else if (op < 8) {
				cache_put(c, held[slot]);
				held[slot] = NULL;
			} else {
				insert_new(c, k.dev_off, k.gen, len, 0);
			}
			for (uint64_t i = 0; i < KEYS; i++) {
				uint32_t l = 1 + (uint32_t)(i * 7919 % 120000);

				if (cached(c, i * 4096, i % 3)) {
					entries++;
					bytes += COIL_ALIGN_UP(l, 64) + CACHE_ENTRY_OVERHEAD;
				}
			}
			for (unsigned h = 0; h < HELD; h++) {
				if (!held[h])
					continue;
				/* a held entry no longer resident is a zombie,
				 * unless the same key was cached again */
				e = NULL;
				if (cache_contains(c, &held[h]->key)) {
					cr_assert_eq(cache_get(c, &held[h]->key, &e), 0);
					cache_put(c, e);
				}
				if (e != held[h])
					bytes += COIL_ALIGN_UP(held[h]->len, 64) +
						 CACHE_ENTRY_OVERHEAD;
			}
			cr_assert_eq(cache_stats_get(c, &st), 0);
			cr_assert_eq(st.entries, entries, "step %d", step);
			cr_assert_eq(st.bytes, bytes, "step %d", step);
			cr_assert_leq(st.bytes, st.bytes_max);
		}
		for (unsigned h = 0; h < HELD; h++)
			cache_put(c, held[h]);
		cache_destroy(c);
	}
}

/* --- concurrency --------------------------------------------------------- */

#define CT_THREADS 4
#define CT_KEYS 1500

struct ct_arg {
	struct cache *c;
	unsigned seed;
	uint64_t hits, bad;
};

static uint32_t ct_len(uint64_t key_i)
{
	return 512 + (uint32_t)(key_i * 2654435761u % 8192);
}

static void *ct_run(void *p)
{
	struct ct_arg *a = p;

	for (int i = 0; i < 40000; i++) {
		uint64_t ki = (uint64_t)rand_r(&a->seed) % CT_KEYS;
		/* two generations per offset: a segment reuse must never
		 * serve the previous tenant's bytes */
		struct cache_key k = { ki * 65536, ki & 1 ? 2 : 1 };
		unsigned op = (unsigned)rand_r(&a->seed) % 100;
		const struct cache_entry *e;
		uint32_t len = ct_len(ki);

		if (op < 70) {
			if (cache_get(a->c, &k, &e) >= 0) {
				a->hits++;
				a->bad += !val_ok(e, &k, len);
				cache_put(a->c, e);
			} else {
				void *v = mkval(&k, len);
				int rc = cache_insert(a->c, &k, v, len,
						      op & 1 ? CACHE_INSERT_PREFETCH : 0, &e);

				if (rc < 0) {
					cache_free_value(v);
					continue;
				}
				a->bad += !val_ok(e, &k, len);
				cache_put(a->c, e);
			}
		} else if (op < 95) {
			cache_invalidate(a->c, &k);
		} else if (op < 96) {
			uint64_t lo = (uint64_t)rand_r(&a->seed) % CT_KEYS * 65536;

			cr_assert_geq(cache_invalidate_range(a->c, lo, lo + 8 * 65536), 0);
		} else {
			a->bad += cache_contains(a->c, &k) > 1;
		}
	}
	return NULL;
}

Test(cache, concurrent_never_serves_other_keys_bytes)
{
	for (unsigned p = 0; p < COIL_ARRAY_LEN(all_policies); p++) {
		/* small: lots of eviction races; small values so the 2 MiB
		 * really splits into 4 shards */
		struct cache_options o;
		struct cache *c;
		char js[512];
		pthread_t t[CT_THREADS];
		struct ct_arg a[CT_THREADS];
		struct cache_stats st;
		uint64_t hits = 0;

		cache_options_init(&o);
		o.bytes_max = 2 << 20;
		o.policy = all_policies[p];
		o.shards = 4;
		o.value_len_max = 16384;
		cr_assert_eq(cache_create(&o, &c), 0);
		cr_assert_gt(cache_stats_json(c, js, sizeof(js)), 0);
		cr_assert_not_null(strstr(js, "\"shards\":4}"), "%s", js);
		for (int i = 0; i < CT_THREADS; i++) {
			a[i] = (struct ct_arg){ .c = c, .seed = 7 * i + p };
			cr_assert_eq(pthread_create(&t[i], NULL, ct_run, &a[i]), 0);
		}
		for (int i = 0; i < CT_THREADS; i++) {
			pthread_join(t[i], NULL);
			cr_assert_eq(a[i].bad, 0);
			hits += a[i].hits;
		}
		cr_assert_eq(cache_stats_get(c, &st), 0);
		cr_assert_eq(st.hits, hits);
		cr_assert_gt(st.hits, 1000);
		cr_assert_gt(st.evictions, 100);
		cr_assert_leq(st.bytes, st.bytes_max);
		cr_assert_leq(st.ready_before_demand, st.prefetch_inserts);
		cache_destroy(c);
	}
}
