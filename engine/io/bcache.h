/* engine/io/bcache.h — the read path's glue to the decoded-blob cache
 * (cache/): keys are {device offset, segment generation}; docs/readahead.md.
 * Calls down only (cache/, place/). */
#ifndef COIL_ENGINE_BCACHE_H
#define COIL_ENGINE_BCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blobs of at most this many logical bytes that a read wants whole are
 * kept in the cache after their device read: a database's pages. */
#define BCACHE_SMALL_MAX (16u << 10)

struct coil_store;
struct rblob;
struct blobd;

int bcache_init(struct coil_store *s);
void bcache_destroy(struct coil_store *s);
/* Cache lookup for a demand blob: sets rb->ce.  @return 1 hit, 0 miss. */
int bcache_lookup(struct coil_store *s, struct rblob *rb);
/* A buffer to decode a blob into (cache_alloc_value); NULL if no cache. */
void *bcache_value_alloc(struct coil_store *s, uint32_t len);
/* Insert rb->dec (from bcache_value_alloc, decoded): on success the cache
 * owns it (rb->dec = NULL) and rb->ce serves the read. */
void bcache_publish(struct coil_store *s, struct rblob *rb);
void bcache_release(struct coil_store *s, struct rblob *rb);
/* Residency probe for readahead (no stats, no policy effect): blob @b of
 * segment generation @gen is cached, decoded or stored. */
bool bcache_contains(struct coil_store *s, const struct blobd *b, uint32_t gen);
/* Release rb->sce (the stored bytes a lookup found), if any. */
void bcache_put_stored(struct coil_store *s, struct rblob *rb);
/* After a successful read: a small blob the read brought from the device
 * whole is put in the cache (its stored bytes; a raw one's bytes). */
void bcache_keep_small(struct coil_store *s, struct rblob *rb);
/* Blocks a packed small blob's device read takes around it while the
 * cache has room: about a 64 KiB read costs this device twice a 4 KiB one
 * (89 against 43 us at QD 1) and brings the blocks of some 30 neighbouring
 * pages, so a database's cache warms at a fraction of its misses. */
#define BCACHE_WINDOW (64u << 10)
/* The device range [*@wa, *@wz) of a read led by @lead (a miss): widened
 * to a window of blocks around it when the blob is packed and small, the
 * cache has room, and only within what its segment has written for good
 * (rblob.win_end: a sealed segment, or the active one below its head, with
 * no write in flight). */
void bcache_window(struct coil_store *s, const struct rblob *lead,
		   uint64_t *wa, uint64_t *wz);
/* After a successful read: the blocks a leading blob's window brought
 * beyond its group's own are put in the cache, unverified like a packed
 * blob's neighbours (whoever is served from them verifies them). */
void bcache_keep_window(struct coil_store *s, struct rblob *rb);
/* An extent of @b (of @len bytes, in a segment of generation @gen) is
 * dropped: if it was the blob's last reference, drop its entry early. */
void bcache_drop_blob(struct coil_store *s, const struct blobd *b,
		      uint32_t len, uint32_t gen);
/* A segment is reused: drop its old entries early (memory only; keys with
 * the old generation can never be looked up again). */
void bcache_invalidate_seg(struct coil_store *s, uint32_t idx);
int bcache_stats_json(struct coil_store *s, char *buf, size_t len);

#endif
