/* engine/io/write.h — engine_write: encode (pool or inline), take the
 * object's turn for a ticket, place, send, apply in ticket order. */
#ifndef COIL_ENGINE_WRITE_H
#define COIL_ENGINE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "coil.h"

struct coil_obj;
struct coil_store;
struct fmt_cursor;
struct object;
struct wreq;

int engine_write(struct coil_obj *h, const void *buf, size_t len, uint64_t off,
		 coil_cb cb, void *arg);

/* The steps engine_write is made of, for a batch (engine/batch.c), whose
 * one request holds the blobs of several writes. */

/* Qualify @w's encoded blobs for the inline path (small, memory below its
 * cap, checkpoint room reserved).  @return true when reserved. */
bool write_inline_reserve(struct coil_store *s, struct wreq *w);
/* Place @w's blobs in segments, waiting for a checkpoint or growing the
 * store as a write does before it gives up.  @return 0, -ENOSPC, -ENOMEM. */
int write_place(struct coil_store *s, struct wreq *w);
/* Blob descriptors for w's blobs [k0, k0 + n) (in memory when @inl) and
 * the WRITE record of [off, off + len) of object @obj_id that maps them,
 * appended at @c.  @return 0, -ENOMEM, the encoder's error. */
int write_describe_range(struct coil_store *s, struct wreq *w,
			 uint64_t obj_id, uint64_t off, uint64_t len,
			 uint32_t k0, uint32_t n, bool inl,
			 struct fmt_cursor *c);
/* The most bytes write_describe_range appends for those blobs. */
size_t write_record_bound(const struct wreq *w, uint32_t k0, uint32_t n,
			  bool inl);
/* Map w's blobs [k0, k0 + n) into @o from @off (mlock held; the blob
 * references move into the map).  @return 0 or -ENOMEM. */
int write_apply_blobs(struct coil_store *s, struct wreq *w, struct object *o,
		      uint64_t off, uint32_t k0, uint32_t n);

#endif
