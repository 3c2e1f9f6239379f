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
 * of (decoded straight into a cache value, no extra copy); every blob the
 * readahead fetches (compressed or raw, whole) unless a demand read that
 * wants it whole adopted it before its decode started, and the first
 * demand read that takes such a large blob whole drops it again (use-once,
 * below); and every small blob (BCACHE_SMALL_MAX, a database's page) a
 * demand read brought from the device whole and verified, in its stored
 * form: compressed bytes under the key with BCACHE_GEN_STORED set, raw
 * bytes under the plain key (bcache_keep_small).  Stored, not decoded:
 * about twice the pages per budget, and on a page store the working set
 * decides (20,000 pages of 4 KiB, 2:1, 64 MiB: all kept vs 80 %, 3N random
 * QD1 reads 10.7-11.0k/s vs 7.3-8.8k/s, though a hit decodes: p50 5.5 us
 * vs 2.6 us; docs/readahead.md).  A small compressed blob packed with
 * others (sharing a 4 KiB block) is kept as the device blocks its read
 * brought instead (keep_blocks), so one page's read serves its neighbours.
 * A large compressed blob a read wants
 * whole is decoded into the caller's buffer and not cached: no value to
 * allocate and fault in, no copy, and a scan does not evict.  A demand
 * read of part of a raw blob keeps the sector-only path (4 KiB read +
 * verify) and inserts nothing: a partial raw blob cannot be cached, and
 * reading the whole 64 KiB blob to serve a 4 KiB request costs 16x the
 * device bytes on a miss (~2.3x the latency here; docs/readahead.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "engine/io/bcache.h"
#include "engine/io/read.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
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
	/* Entry headers for values of 2 KiB on average: a 4 KiB page
	 * compressed 2:1, kept in its stored form (bcache_keep_small).  The
	 * cache's own default (one per 4 KiB) ran out of headers with half
	 * the budget unused on a page store. */
	co.entries_max = (uint32_t)COIL_MIN(s->cache_bytes / 2048, 1u << 24);
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

/* A blob's stored (compressed) bytes are cached under its key with this
 * bit set in the generation (segment generations are 32 bits), so both
 * forms of one blob can never be mistaken for each other. */
#define BCACHE_GEN_STORED (1ull << 32)

static struct cache_key rb_key_stored(const struct rblob *rb)
{
	return (struct cache_key){ .dev_off = rb->b->dev_off,
				   .gen = rb->gen | BCACHE_GEN_STORED };
}

/* A small blob a read wants whole: kept after its device read. */
static bool small_whole(const struct rblob *rb)
{
	return rb->b->logical_len <= BCACHE_SMALL_MAX && read_blob_whole(rb);
}

/* A blob that may be cached in its stored form. */
static bool small_compressed(const struct rblob *rb)
{
	return rb->b->codec != FMT_CODEC_RAW &&
	       rb->b->logical_len <= BCACHE_SMALL_MAX;
}

/* Packed small blobs (compressed ones the packer and small writes put back
 * to back, a few to a 4 KiB block) are kept as the device blocks their read
 * brought, not as their own bytes: under each block's offset, with this bit
 * in the generation.  The read of one page then serves the pages beside it,
 * as a file system's page cache does for a database reading its file
 * (20,000 pages of 4 KiB at 2:1, 3N random reads at QD 1: a device read
 * for about one page in two instead of every page's first read).  A block
 * holds bytes of blobs nobody verified yet: a blob served from blocks is
 * verified by its decode (checksums of the stored and of the decoded
 * bytes), like one just read.  A block never changes under its key: a
 * segment is written in runs that start on a block and are never written
 * again until the segment is reused, which bumps its generation. */
#define BCACHE_GEN_BLOCK (2ull << 32)
/* blocks a small compressed blob can span */
#define BCACHE_BLOCKS_MAX (BCACHE_SMALL_MAX / FMT_BLOCK + 2)

static struct cache_key blk_key(uint64_t off, uint32_t gen)
{
	return (struct cache_key){ .dev_off = off, .gen = gen | BCACHE_GEN_BLOCK };
}

/* A small compressed blob sharing a block with others. */
static bool packed_blob(const struct blobd *b)
{
	return b->codec != FMT_CODEC_RAW &&
	       b->logical_len <= BCACHE_SMALL_MAX && !blobd_is_mem(b) &&
	       (b->dev_off % FMT_BLOCK ||
		(b->dev_off + b->stored_len) % FMT_BLOCK);
}

static bool packed_small(const struct rblob *rb)
{
	return packed_blob(rb->b);
}

/* Every block of a packed blob is cached. */
static bool blocks_contained(struct coil_store *s, const struct blobd *b,
			     uint32_t gen)
{
	uint64_t a = COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK);

	for (; a < b->dev_off + b->stored_len; a += FMT_BLOCK) {
		struct cache_key k = blk_key(a, gen);

		if (cache_contains(s->cache, &k) != 1)
			return false;
	}
	return true;
}

/* A packed blob whose blocks are all cached: copied into a buffer as if
 * read from the device (the read decodes and verifies it from there).
 * Counts a hit per block, or one miss. */
static int bcache_lookup_blocks(struct coil_store *s, struct rblob *rb)
{
	const struct cache_entry *e[BCACHE_BLOCKS_MAX];
	uint64_t a = COIL_ALIGN_DOWN(rb->b->dev_off, FMT_BLOCK);
	uint64_t z = COIL_ALIGN_UP(rb->b->dev_off + rb->b->stored_len,
				   FMT_BLOCK);
	uint32_t n = (uint32_t)((z - a) / FMT_BLOCK), got = 0;
	struct cache_key k;
	uint8_t *buf;

	COIL_ASSERT(n >= 1 && n <= BCACHE_BLOCKS_MAX);
	if (n == 1) {
		/* Within one block: decoded straight from the cache's copy,
		 * held until the read releases it (no buffer, no copy, one
		 * lookup, which counts the hit or the miss). */
		k = blk_key(a, rb->gen);
		if (cache_get(s->cache, &k, &rb->sce) < 0) {
			rb->sce = NULL;
			return 0;
		}
		COIL_ASSERT(rb->sce->len == FMT_BLOCK);
		rb->sce_off = a;
		blobd_to_fmt(rb->b, &rb->fb); /* the decoder's descriptor */
		stat_add(&s->st.rd_block_hits, 1);
		return 1;
	}
	for (uint32_t i = 0; i < n; i++) {
		k = blk_key(a + (uint64_t)i * FMT_BLOCK, rb->gen);
		if (cache_contains(s->cache, &k) != 1) {
			/* the miss, counted once */
			if (cache_get(s->cache, &k, &e[0]) == 0)
				cache_put(s->cache, e[0]);
			return 0;
		}
	}
	buf = bufpool_get(&s->bp, z - a);
	if (!buf)
		return 0;
	for (; got < n; got++) {
		k = blk_key(a + (uint64_t)got * FMT_BLOCK, rb->gen);
		if (cache_get(s->cache, &k, &e[got]) < 0)
			break; /* evicted since the probe */
		COIL_ASSERT(e[got]->len == FMT_BLOCK);
	}
	for (uint32_t i = 0; i < got; i++) {
		if (got == n)
			memcpy(buf + (uint64_t)i * FMT_BLOCK, e[i]->data,
			       FMT_BLOCK);
		cache_put(s->cache, e[i]);
	}
	if (got < n) {
		bufpool_put(&s->bp, buf);
		return 0;
	}
	rb->iobuf = rb->io_base = buf;
	rb->io_owner = true;
	rb->rd_off = a;
	rb->rd_len = (uint32_t)(z - a);
	rb->blk = true;
	blobd_to_fmt(rb->b, &rb->fb); /* the decoder's descriptor */
	stat_add(&s->st.rd_block_hits, 1);
	return 1;
}

/* The stored form of a small compressed blob: decode instead of read. */
static int bcache_lookup_stored(struct coil_store *s, struct rblob *rb)
{
	struct cache_key k;

	if (!small_compressed(rb))
		return 0;
	if (packed_small(rb))
		return bcache_lookup_blocks(s, rb);
	k = rb_key_stored(rb);
	if (cache_get(s->cache, &k, &rb->sce) < 0) {
		rb->sce = NULL;
		return 0;
	}
	COIL_ASSERT(rb->sce->len == rb->b->stored_len);
	rb->sce_off = rb->b->dev_off;
	blobd_to_fmt(rb->b, &rb->fb); /* the decoder's descriptor */
	return 1;
}

int bcache_lookup(struct coil_store *s, struct rblob *rb)
{
	struct cache_key k;
	int rc;

	if (!s->cache || read_blob_cached(rb))
		return read_blob_cached(rb) ? 1 : 0;
	k = rb_key(rb);
	/* A small compressed blob is nearly always kept stored; its decoded
	 * form (a partial read's, a prefetch's) is probed without counting,
	 * so the cache counts one hit or one miss per blob looked up. */
	if (small_compressed(rb) && cache_contains(s->cache, &k) != 1)
		return bcache_lookup_stored(s, rb);
	rc = cache_get(s->cache, &k, &rb->ce);
	if (rc < 0) {
		rb->ce = NULL;
		return bcache_lookup_stored(s, rb);
	}
	COIL_ASSERT(rb->ce->len == rb->b->logical_len);
	/* Use-once: the first demand of a blob readahead brought, taking it
	 * whole, is a scan passing by.  bcache_release drops the entry, so
	 * the value's memory goes back to the allocator for the next
	 * prefetch instead of the scan filling the budget with fresh pages
	 * (each first touch a page fault) and evicting what other readers
	 * reuse.  A blob read in part stays: its other bytes are next; so
	 * does a small one, kept like any small blob read whole (a page a
	 * database reads again; the policy sees a scan of them through). */
	rb->use_once = rc == CACHE_HIT_PREFETCHED && read_blob_whole(rb) &&
		       rb->b->logical_len > BCACHE_SMALL_MAX;
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

	/* an in-memory blob has no device key (dev_off 0): never cached */
	if (!s->cache || !rb->dec || rb->ce || rb->mem)
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

bool bcache_contains(struct coil_store *s, const struct blobd *b, uint32_t gen)
{
	struct cache_key k = { .dev_off = b->dev_off, .gen = gen };

	if (cache_contains(s->cache, &k) == 1)
		return true;
	if (packed_blob(b))
		return blocks_contained(s, b, gen);
	k.gen |= BCACHE_GEN_STORED;
	return cache_contains(s->cache, &k) == 1;
}

void bcache_put_stored(struct coil_store *s, struct rblob *rb)
{
	if (rb->sce)
		cache_put(s->cache, rb->sce);
	rb->sce = NULL;
}

/* The blocks [off, off + len) of a segment of generation @gen, read into
 * @buf, that the cache does not hold yet; each one kept is counted in
 * @kept.  Their bytes are verified by whoever is served from them. */
static void keep_range(struct coil_store *s, const uint8_t *buf, uint64_t off,
		       uint64_t len, uint32_t gen, _Atomic uint64_t *kept)
{
	COIL_ASSERT(off % FMT_BLOCK == 0 && len % FMT_BLOCK == 0);
	for (uint64_t i = 0; i < len / FMT_BLOCK; i++) {
		struct cache_key k = blk_key(off + i * FMT_BLOCK, gen);
		uint8_t *v;

		if (cache_contains(s->cache, &k) == 1)
			continue;
		v = cache_alloc_value(FMT_BLOCK);
		if (!v)
			return;
		memcpy(v, buf + i * FMT_BLOCK, FMT_BLOCK);
		if (cache_insert(s->cache, &k, v, FMT_BLOCK, 0, NULL) < 0) {
			cache_free_value(v);
			return;
		}
		stat_add(kept, 1);
	}
}

/* The blocks a packed blob's device read brought (its own verified). */
static void keep_blocks(struct coil_store *s, struct rblob *rb)
{
	keep_range(s, rb->iobuf, rb->rd_off, rb->rd_len, rb->gen,
		   &s->st.rd_blocks_kept);
}

/* A window is taken only while the cache has this much room left after
 * it (of its budget): it fills a cache that would otherwise sit empty,
 * and never evicts what readers brought. */
#define BCACHE_WINDOW_ROOM_PCT 75

void bcache_window(struct coil_store *s, const struct rblob *lead,
		   uint64_t *wa, uint64_t *wz)
{
	uint64_t a = *wa, z = *wz, lo, hi;
	uint32_t idx;
	struct cache_stats st;

	if (!s->cache || !packed_blob(lead->b) || z > lead->win_end ||
	    z - a >= BCACHE_WINDOW)
		return;
	if (cache_stats_get(s->cache, &st) < 0 ||
	    (st.bytes + BCACHE_WINDOW) * 100 >
		    st.bytes_max * BCACHE_WINDOW_ROOM_PCT)
		return;
	idx = seg_of(s, lead->rd_off);
	lo = seg_base(s, idx);
	hi = lead->win_end;
	/* the aligned window holding the blobs' first block, within what
	 * their segment has written for good */
	a = COIL_MAX(COIL_ALIGN_DOWN(*wa, BCACHE_WINDOW), lo);
	z = COIL_MIN(COIL_MAX(a + BCACHE_WINDOW, *wz), hi);
	/* no need to read again what the cache holds at its edges */
	while (a < *wa && cache_contains(s->cache, &(struct cache_key){
			  .dev_off = a,
			  .gen = lead->gen | BCACHE_GEN_BLOCK }) == 1)
		a += FMT_BLOCK;
	while (z > *wz && cache_contains(s->cache, &(struct cache_key){
			  .dev_off = z - FMT_BLOCK,
			  .gen = lead->gen | BCACHE_GEN_BLOCK }) == 1)
		z -= FMT_BLOCK;
	COIL_ASSERT(a <= *wa && z >= *wz);
	*wa = a;
	*wz = z;
}

void bcache_keep_window(struct coil_store *s, struct rblob *rb)
{
	uint64_t own = rb->rd_off + rb->rd_len;

	if (!s->cache || !rb->win_len || rb->res != 0)
		return;
	COIL_ASSERT(rb->win_off % FMT_BLOCK == 0 &&
		    rb->win_len % FMT_BLOCK == 0);
	COIL_ASSERT(rb->win_off <= rb->rd_off &&
		    own <= rb->win_off + rb->win_len);
	/* the blocks before the blobs the read wanted, and after them (the
	 * blobs' own are kept by keep_blocks, or not at all) */
	keep_range(s, rb->io_base, rb->win_off, rb->rd_off - rb->win_off,
		   rb->gen, &s->st.rd_window_blocks);
	keep_range(s, rb->io_base + (own - rb->win_off), own,
		   rb->win_off + rb->win_len - own, rb->gen,
		   &s->st.rd_window_blocks);
}

void bcache_keep_small(struct coil_store *s, struct rblob *rb)
{
	struct cache_key k;
	uint32_t len;
	uint8_t *v;
	const uint8_t *src;

	/* Only what this read brought from the device itself, whole, and
	 * verified (the caller checked rb->res): not a blob the cache or a
	 * prefetch served. */
	if (!s->cache || rb->res != 0 || !rb->iobuf || read_blob_cached(rb) ||
	    rb->dec || !small_whole(rb))
		return;
	if (packed_small(rb)) {
		keep_blocks(s, rb);
		return;
	}
	src = rb->iobuf + (rb->b->dev_off - rb->rd_off);
	if (rb->b->codec == FMT_CODEC_RAW) {
		k = rb_key(rb);
		len = rb->b->logical_len;
	} else {
		k = rb_key_stored(rb);
		len = rb->b->stored_len;
	}
	v = cache_alloc_value(len);
	if (!v)
		return;
	memcpy(v, src, len);
	if (cache_insert(s->cache, &k, v, len, 0, NULL) < 0) {
		cache_free_value(v);
		return;
	}
	stat_add(&s->st.rd_small_kept, 1);
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
	k.gen |= BCACHE_GEN_STORED;
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
