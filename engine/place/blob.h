/* engine/place/blob.h — a stored blob's descriptor in memory, shared by every
 * extent that maps part of it (a small overwrite splits an extent in two, and
 * both halves keep pointing at the same blob).  Refcounted so a read can hold
 * it outside the metadata lock. */
#ifndef COIL_ENGINE_BLOB_H
#define COIL_ENGINE_BLOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fmt_blob;

/* A link of a memlist's circular list (the list's head is one alone). */
struct memlink {
	struct memlink *prev, *next;
};

/* A blob kept in memory (FMT_BLOB_INLINE): a small write's encoded bytes,
 * which the journal record (and checkpoints) carry until the packer
 * (engine/pack.c) writes them densely into a segment.  Every live one is
 * on its store's list, which the packer walks; where it was written
 * (object, offset) is what the packer's relocation compares against. */
struct memblob {
	struct memlink link;     /* first: a link is its memblob */
	struct memlist *ml;
	struct blobd *b;         /* the descriptor that owns it */
	uint64_t obj_id, obj_off;
	/* extents that map it (extmap.c): the packer takes only a blob a map
	 * points at.  Before its write applies, or after an overwrite while a
	 * reader or a checkpoint still holds it, a relocation would find
	 * nothing to swap, or swap an earlier copy for another. */
	_Atomic uint32_t maprefs;
	/* its stored bytes: own[], or bytes a replay lends until
	 * memlist_settle (the journal image it applies from: most of a
	 * replay's small writes were packed, and so dropped, by a later
	 * record of the same replay), or a copy made then (neither own[]
	 * nor lent: freed with it) */
	const uint8_t *bytes;
	bool lent;
	uint8_t own[];
};

/* A store's in-memory blobs: the list and their stored bytes. */
struct memlist {
	pthread_mutex_t mu;
	struct memlink head;     /* sentinel of a circular list */
	_Atomic uint64_t bytes;  /* stored bytes of every live one */
	_Atomic uint64_t count;
	uint64_t lent;           /* made with lent bytes (under mu) */
};

_Static_assert(offsetof(struct memblob, link) == 0,
	       "memblob_of casts a link to its memblob");

static inline struct memblob *memblob_of(struct memlink *l)
{
	return (struct memblob *)(void *)l;
}

struct blobd {
	_Atomic uint32_t refs;
	uint8_t codec;
	uint8_t flags;           /* FMT_BLOB_INLINE: mem, not dev_off */
	uint16_t n_csums;
	uint32_t stored_len;
	uint32_t logical_len;
	uint32_t dict_id;
	uint32_t pad_;
	uint64_t dev_off;        /* 0 for an in-memory blob */
	struct memblob *mem;     /* NULL for a blob on the device */
	uint64_t csums[];
};

void memlist_init(struct memlist *ml);
void memlist_destroy(struct memlist *ml);

/* A new descriptor (refs = 1) copied from @fb; NULL on ENOMEM.  @fb must
 * not be FMT_BLOB_INLINE (blobd_new_mem makes those). */
struct blobd *blobd_new(const struct fmt_blob *fb);
/* A new in-memory blob: @fb's descriptor (flags become FMT_BLOB_INLINE,
 * dev_off 0) and a copy of its @bytes, written at @obj_off of object
 * @obj_id; on @ml's list until its last reference goes.  NULL on ENOMEM. */
struct blobd *blobd_new_mem(const struct fmt_blob *fb, const uint8_t *bytes,
			    struct memlist *ml, uint64_t obj_id,
			    uint64_t obj_off);
/* blobd_new_mem that keeps a pointer to @bytes instead of a copy: they
 * must stay as they are until memlist_settle.  For replay alone, before
 * any other thread of the store runs. */
struct blobd *blobd_new_mem_lent(const struct fmt_blob *fb,
				 const uint8_t *bytes, struct memlist *ml,
				 uint64_t obj_id, uint64_t obj_off);
/* Copy the bytes of every in-memory blob still made of lent ones.
 * @return how many it copied, or -ENOMEM (the blobs not copied keep their
 * lent bytes). */
int memlist_settle(struct memlist *ml);
static inline bool blobd_is_mem(const struct blobd *b)
{
	return b->mem != NULL;
}
void blobd_ref(struct blobd *b);
void blobd_unref(struct blobd *b);
/* Fill a full format descriptor (for encoders/decoders of format/). */
void blobd_to_fmt(const struct blobd *b, struct fmt_blob *fb);

#endif
