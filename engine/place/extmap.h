/* engine/place/extmap.h — one object's extent map: which bytes of which blob back
 * each byte range of the object.
 *
 * Extents are kept sorted by object offset and never overlap.  A new extent
 * shadows whatever it covers: older extents are trimmed or split, never
 * rewritten on disk (no foreground read-modify-write).  The map is a two-level
 * structure (a sorted array of leaves of up to EXTMAP_LEAF_MAX extents) so an
 * insert costs O(log n + leaf) instead of a memmove of the whole map: a 1 GiB
 * object overwritten in 4 KiB pieces holds 262144 extents.  A map of one
 * leaf sizes that leaf to its extents (a whole leaf is 1.5 KiB), and a map
 * that has only ever held one extent keeps it inline (struct extmap.one),
 * with no leaf at all: most objects of a store of small objects are one
 * extent, and the leaf array and leaf it would take were about 110 bytes
 * of each such object's memory and two of its allocations.
 *
 * Not thread-safe: the engine calls it under the store's metadata lock.
 */
#ifndef COIL_ENGINE_EXTMAP_H
#define COIL_ENGINE_EXTMAP_H

#include <stddef.h>
#include <stdint.h>

#include "engine/place/blob.h" /* an extent holds a reference to its blob */

struct ext {
	uint64_t off;     /* object offset */
	uint32_t len;     /* > 0 */
	uint32_t skip;    /* offset into the blob's logical bytes */
	struct blobd *b;  /* one reference held by the map */
};

#define EXTMAP_LEAF_MAX 64

struct extmap_leaf {
	uint32_t n;
	uint32_t cap;     /* EXTMAP_LEAF_MAX except in a map of one leaf */
	struct ext e[];
};

/* Totals over every map that shares it (a store's): how many extents and
 * how many blob checksums they carry, which is what a checkpoint's size
 * depends on.  Kept by the maps; read under the same lock. */
struct extmap_acct {
	uint64_t n;
	uint64_t csums;
	uint64_t bytes;   /* logical bytes mapped */
	uint64_t stored;  /* their share of the blobs' stored bytes */
	uint64_t inl;     /* in-memory blobs' stored bytes, once per extent
			     (a checkpoint writes them with each) */
	uint64_t mem;     /* bytes the maps allocated: leaves (spares too),
			     leaf arrays and their keys */
};

struct extmap {
	/* NULL until the map needs leaves: it then holds n (0 or 1) extents
	 * in one.  A second extent, or a punch that splits the one, moves
	 * it into a leaf for good (extmap_reserve). */
	struct extmap_leaf **leaf;
	/* leaf: cap leaves, EXTMAP_SPARES spares, then cap first keys
	 * (extmap.c, keys()) */
	uint32_t nleaf;
	uint32_t cap;
	uint64_t n;       /* extents in the map */
	uint64_t bytes;   /* sum of extent lengths (logical bytes mapped) */
	uint64_t stored;  /* sum of ext_stored(): their stored share */
	struct extmap_acct *acct; /* NULL: none */
	struct ext one;           /* the extent while leaf is NULL and n is 1 */
};

/* Called for each piece an insert or punch removes from the map: @len bytes
 * of blob @b stop being referenced (live-byte accounting). */
typedef void (*extmap_drop_fn)(void *arg, struct blobd *b, uint32_t len);

/* An extent's share of its blob's stored bytes (pro rata of its logical
 * length).  Running sums of it (struct extmap, struct extmap_acct) are
 * kept per extent, so they equal a walk of the maps exactly. */
static inline uint64_t ext_stored(const struct ext *e)
{
	return (uint64_t)e->len * e->b->stored_len / e->b->logical_len;
}

void extmap_init(struct extmap *m, struct extmap_acct *acct);

/* Warm the cache for a lookup of @off soon after (replay applies a
 * record's extents a few behind where it peeks at them): @stage 0 the
 * leaf that holds @off (@return its index, for the later stages' @li), 1
 * the extents near @off in it, 2 the blob an overwrite of @off will drop.
 * Each stage reads only what the one before it brought in.  The map is
 * not changed. */
uint32_t extmap_prefetch(const struct extmap *m, uint64_t off, int stage,
			 uint32_t li);

/* Drop every extent (reporting each through @drop if not NULL), free. */
void extmap_destroy(struct extmap *m, extmap_drop_fn drop, void *arg);

/* Remove [off, off + len) from the map.  @return 0 or -ENOMEM (a split
 * needed a new leaf; the map is unchanged then). */
int extmap_punch(struct extmap *m, uint64_t off, uint64_t len,
		 extmap_drop_fn drop, void *arg);

/* Shadow [e->off, e->off + e->len) with @e; the map takes over the reference
 * to e->b on success.  @return 0 or -ENOMEM (map unchanged... except that the
 * punched range may already be gone; the engine treats -ENOMEM on apply as
 * fatal for the store). */
int extmap_insert(struct extmap *m, const struct ext *e, extmap_drop_fn drop,
		  void *arg);

/* Iteration in offset order starting at the first extent that ends after
 * @off.  Valid only while the map is not modified. */
struct extmap_iter {
	const struct extmap *m;
	uint32_t li;
	uint32_t i;
};
void extmap_iter_init(struct extmap_iter *it, const struct extmap *m,
		      uint64_t off);
/* @return the next extent or NULL. */
const struct ext *extmap_iter_next(struct extmap_iter *it);

/* The extent end (off + len) of the last extent, or 0 if empty. */
uint64_t extmap_end(const struct extmap *m);

#endif
