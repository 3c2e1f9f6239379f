/* engine/place/blob.h — a stored blob's descriptor in memory, shared by every
 * extent that maps part of it (a small overwrite splits an extent in two, and
 * both halves keep pointing at the same blob).  Refcounted so a read can hold
 * it outside the metadata lock. */
#ifndef COIL_ENGINE_BLOB_H
#define COIL_ENGINE_BLOB_H

#include <stdatomic.h>
#include <stdint.h>

struct fmt_blob;

struct blobd {
	_Atomic uint32_t refs;
	uint8_t codec;
	uint8_t flags;
	uint16_t n_csums;
	uint32_t stored_len;
	uint32_t logical_len;
	uint32_t dict_id;
	uint32_t pad_;
	uint64_t dev_off;
	uint64_t csums[];
};

/* A new descriptor (refs = 1) copied from @fb; NULL on ENOMEM. */
struct blobd *blobd_new(const struct fmt_blob *fb);
void blobd_ref(struct blobd *b);
void blobd_unref(struct blobd *b);
/* Fill a full format descriptor (for encoders/decoders of format/). */
void blobd_to_fmt(const struct blobd *b, struct fmt_blob *fb);

#endif
