/* engine/io/bcache.c — the engine's glue to the decoded-blob cache (cache/).
 *
 * A blob is keyed by where it is stored (dev_off) plus its segment's
 * generation (struct seg.gen, bumped each time a segment is reused), read
 * under mlock together with the extent that points at the blob.  Writes
 * never overwrite a stored blob in place, so a key always names the same
 * bytes: an overwrite or truncate just stops the extent map from pointing at
 * the old key, and a reused segment gets a new generation.  That is why
 * nothing here has to invalidate for correctness: bcache_drop_blob (a blob's
 * last extent dropped by an overwrite, truncate, remove or the cleaner) and
 * bcache_invalidate_seg (a segment reused) only return memory early.
 *
 * What goes into the cache: every compressed blob a demand read wants part
 * of (decoded straight into a cache value, no extra copy) and every blob the
 * readahead fetches (compressed or raw, whole) unless a demand read that
 * wants it whole adopted it before its decode started; the first demand
 * read that takes such a blob whole drops it again (use-once, below).  A compressed blob a
 * read wants whole is decoded into the caller's buffer and not cached: no
 * value to allocate and fault in, no copy, and a scan does not evict.  A demand read of a raw blob
 * keeps the sector-only path (4 KiB read + verify) and inserts nothing: a
 * partial raw blob cannot be cached, and reading the whole 64 KiB blob to
 * serve a 4 KiB request costs 16x the device bytes on a miss (~2.3x the
 * latency here; docs/readahead.md).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "engine/io/bcache.h"
#include "engine/io/read.h"
#include "engine/place/blob.h"
#include "engine/place/segment.h"
#include "engine/place/object.h"
#include "engine/store.h"

int bcache_init(struct coil_store *s)
{
	struct cache_options co;

	s->cache = NULL;
	if (s->cache_bytes == 0)
		return 0;
	cache_options_init(&co);
	co.bytes_max = s->cache_bytes;
	/* a blob is at most max_blob logical bytes (raw blobs read by
	 * readahead are rounded up to the 4 KiB sector) */
	co.value_len_max = COIL_MAX(s->max_blob, 4096u);
	return cache_create(&co, &s->cache);
}

void bcache_destroy(struct coil_store *s)
{
	cache_destroy(s->cache);
	s->cache = NULL;
}

static struct cache_key rb_key(const struct rblob *rb)
{
	return (struct cache_key){ .dev_off = rb->b->dev_off, .gen = rb->gen };
}

int bcache_lookup(struct coil_store *s, struct rblob *rb)
{
	struct cache_key k;
	int rc;

	if (!s->cache || rb->ce)
		return rb->ce ? 1 : 0;
	k = rb_key(rb);
	rc = cache_get(s->cache, &k, &rb->ce);
	if (rc < 0) {
		rb->ce = NULL;
		return 0;
	}
	COIL_ASSERT(rb->ce->len == rb->b->logical_len);
	/* Use-once: the first demand of a blob readahead brought, taking it
	 * whole, is a scan passing by.  bcache_release drops the entry, so
	 * the value's memory goes back to the allocator for the next
	 * prefetch instead of the scan filling the budget with fresh pages
	 * (each first touch a page fault) and evicting what other readers
	 * reuse.  A blob read in part stays: its other bytes are next. */
	rb->use_once = rc == CACHE_HIT_PREFETCHED && read_blob_whole(rb);
	return 1;
}

void *bcache_value_alloc(struct coil_store *s, uint32_t len)
{
	if (!s->cache)
		return NULL;
#ifdef COIL_FAULT_SEAM
	if (atomic_load(&s->fault_value_alloc))
		return NULL;
#endif
	return cache_alloc_value(len);
}

void bcache_publish(struct coil_store *s, struct rblob *rb)
{
	struct cache_key k = rb_key(rb);
	int rc;

	if (!s->cache || !rb->dec || rb->ce)
		return;
	rc = cache_insert(s->cache, &k, rb->dec, rb->b->logical_len, 0, &rb->ce);
	if (rc >= 0)
		rb->dec = NULL; /* the cache owns (or freed) it */
	else
		rb->ce = NULL;  /* no room: rb->dec is still ours */
}

void bcache_release(struct coil_store *s, struct rblob *rb)
{
	if (rb->ce && rb->use_once) {
		struct cache_key k = rb_key(rb);

		if (cache_invalidate(s->cache, &k) > 0)
			stat_add(&s->st.ra_use_once, 1);
	}
	if (rb->ce)
		cache_put(s->cache, rb->ce);
	rb->ce = NULL;
	rb->use_once = false;
}

void bcache_drop_blob(struct coil_store *s, const struct blobd *b,
		      uint32_t len, uint32_t gen)
{
	struct cache_key k = { .dev_off = b->dev_off, .gen = gen };

	/* Only when this drop ends the blob: the last extent reference
	 * (reads in flight hold their own) going away whole.  A partial drop
	 * (an overwrite trimming an extent) keeps the entry; if that piece
	 * was the last, the entry just ages out. */
	if (!s->cache || len != b->logical_len ||
	    atomic_load_explicit(&b->refs, memory_order_relaxed) != 1)
		return;
	cache_invalidate(s->cache, &k);
}

void bcache_invalidate_seg(struct coil_store *s, uint32_t idx)
{
	uint64_t lo;

	if (!s->cache)
		return;
	lo = seg_base(s, idx);
	cache_invalidate_range(s->cache, lo, lo + s->sb.segment_size);
}

int bcache_stats_json(struct coil_store *s, char *buf, size_t len)
{
	if (s->cache)
		return cache_stats_json(s->cache, buf, len);
	return snprintf(buf, len, "{\"policy\":\"off\",\"hits\":0,\"misses\":0,"
			"\"evictions\":0,\"bytes\":0,\"bytes_max\":0,"
			"\"entries\":0,\"evicted_before_use\":0}");
}
