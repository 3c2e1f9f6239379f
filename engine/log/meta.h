/* engine/log/meta.h — applying records to the metadata (the live path in
 * ticket order, and replay), and the metadata operations (create, remove,
 * truncate) that go through the journal. */
#ifndef COIL_ENGINE_META_H
#define COIL_ENGINE_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct coil_store;
struct object;
struct ext;
struct blobd;
struct fmt_extent;

int meta_apply_write(struct coil_store *s, struct object *o, uint64_t off,
		     uint64_t len, const struct ext *ex, uint32_t n, bool remap);
int meta_apply_truncate(struct coil_store *s, struct object *o, uint64_t size);
/* Unmap [lo, hi) of @o (hi may be UINT64_MAX: to the end).  0 or -ENOMEM. */
int meta_apply_punch(struct coil_store *s, struct object *o, uint64_t lo,
		     uint64_t hi);
void meta_apply_remove(struct coil_store *s, struct object *o);
/* A new object @dst_id named @name that maps what @src maps now: the same
 * size and extents, its blobs shared (in-memory blobs copied).  The live
 * path and replay both.  @return 0, -ENOMEM (the new object may then hold
 * part of the extents: the caller breaks the store or fails the open). */
int meta_clone(struct coil_store *s, struct object *src, uint64_t dst_id,
	       const char *name, size_t len, struct object **out);
/* Metadata ops through the journal (sync: they wait for the commit). */
int meta_create(struct coil_store *s, const char *name, size_t len,
		struct object **out);
int meta_remove(struct coil_store *s, struct object *o);
int meta_truncate(struct coil_store *s, struct object *o, uint64_t size);

/* The extent-map drop callback of record apply (@arg is the store): the
 * segment loses the live bytes and the cache drops the blob's entry when
 * this was its last reference. */
void meta_extent_dropped(void *arg, struct blobd *b, uint32_t len);

/* Install a relocated extent @ex (its blob a verbatim copy of an older one)
 * over exactly those parts of [ex->off, ex->off + ex->len) that still map
 * the same blob content (same codec, lengths and checksums) at the same
 * alignment: the relocation's compare-and-swap.  The live path and replay
 * make the same decision (replay reaches the same map state in the same
 * record order).  Takes its own blob references.  mlock held (or
 * single-threaded replay).  @return logical bytes installed, or -ENOMEM. */
int64_t meta_apply_remap(struct coil_store *s, struct object *o,
			 const struct ext *ex);
/* Replay of a REMAP WRITE record's extent (already bounds-checked and
 * verified by replay).  @return 0 or -ENOMEM. */
int meta_replay_remap(struct coil_store *s, struct object *o,
		      const struct fmt_extent *fe);
/* The optimizer's compare-and-swap: install @ex (a re-encoding of the
 * same logical bytes, over the same object range as @want) on the parts of
 * that range where the map still holds @want's blob content at @want's
 * alignment, wherever a relocation has moved it since.  A newer write,
 * truncate or remove there wins.  Same locking and return as
 * meta_apply_remap. */
int64_t meta_apply_rewrite(struct coil_store *s, struct object *o,
			   const struct ext *want, const struct ext *ex);
/* Replay of one REWRITE pair (@fw expected, @fe new; bounds-checked, @fe
 * verified).  @return 0 or -ENOMEM. */
int meta_replay_rewrite(struct coil_store *s, struct object *o,
			const struct fmt_extent *fw,
			const struct fmt_extent *fe);

#endif
