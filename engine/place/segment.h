/* engine/place/segment.h — the data area: segment states, live bytes, the
 * allocator, discard of freed segments.  Calls only down (bufpool, extmap,
 * dev); what it learns that a policy above should act on it reports. */
#ifndef COIL_ENGINE_SEGMENT_H
#define COIL_ENGINE_SEGMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct coil_store;
struct blobd;
struct wreq;

enum seg_state {
	SEG_FREE = 0,
	SEG_ACTIVE = 1,   /* open for appending */
	SEG_SEALED = 2,   /* holds blobs; not appended to */
	SEG_PENDING = 3,  /* sealed, no live bytes: free after next checkpoint */
};

struct seg {
	uint64_t live;        /* logical bytes referenced by extent maps */
	/* the part of @live whose blob the optimizer has not been over (no
	 * FMT_BLOB_OPTIMIZED): its victims are picked by this, and a
	 * blob's flags never change, so adding and dropping extents keeps
	 * it exact */
	uint64_t unopt;
	/* when data was last placed here (coil_now_ns), 0 before this open:
	 * the optimizer leaves segments still taking data alone */
	uint64_t placed_ns;
	uint32_t inflight;    /* writes allocated here, not yet applied/failed */
	uint32_t gen;         /* bumped on reuse (cache keys) */
	_Atomic uint32_t readers; /* reads in flight holding blobs here */
	uint8_t state;
	uint8_t in_ckpt;      /* pending when the running checkpoint began,
				 and freeable by it (pending_lin) */
	bool reserved;        /* its file blocks are allocated (reserve.c);
				 false after open and once punched */
	/* s->applied_hi_lin when it went PENDING: every record that placed
	 * data here ends in a chunk at or before it.  A checkpoint whose
	 * replay point is before it must not free the segment: replay from
	 * there verifies those records' blobs (ckpt.c). */
	uint64_t pending_lin;
};

/* What seg_place_write and seg_room_check report to their caller, who
 * owns the policy (io/wreq.c: checkpoint; io/write.c: the cleaner). */
#define SEG_REPORT_PENDING 1u  /* no room, but a checkpoint frees PENDING ones */
#define SEG_REPORT_OPENED 2u   /* a segment was opened for this write */
#define SEG_REPORT_LOW 4u      /* fewer than a quarter of the segments free */

/* TRIM of freed segments (the checkpoint thread, after a checkpoint is
 * durable and before it marks the PENDING segments it snapshotted FREE).
 * Turned on by the cleaner, which owns the space policy. */
struct seg_discard {
	struct { uint32_t first, n; } *run; /* NULL: discards off */
	_Atomic bool off;      /* the device or file said it cannot */
	_Atomic uint64_t discards, bytes, errors;
};

uint32_t seg_of(const struct coil_store *s, uint64_t dev_off);
uint64_t seg_base(const struct coil_store *s, uint32_t idx);
void seg_maybe_pending(struct coil_store *s, uint32_t idx);
/* Seal the active segment now, if no write is in flight in it (the next
 * write opens another): what it holds becomes the optimizer's to take.
 * Its unused tail is dead space until the segment is cleaned.  mlock
 * held.  @return true if one was sealed. */
bool seg_seal_active(struct coil_store *s);
/* Place w's encoded blobs after seg_room_check said they fit; fills w's
 * runs (each run's seg_fresh: its segment was opened for it) and blob
 * dev_offs.  mlock held.  The allocator decides nothing above itself: what
 * the policy should do next it reports in *@rep (SEG_REPORT_*): a
 * checkpoint would free PENDING segments, a segment was opened (cleaning
 * may be due), free segments are low.  @return 0, -ENOSPC, -ENOMEM. */
int seg_place_write(struct coil_store *s, struct wreq *w, unsigned *rep);
/* Before placement, mlock held: may @w's batch fit the free space minus
 * @keep bytes?  0, or -ENOSPC with w->space_pending and SEG_REPORT_PENDING
 * in *@rep when PENDING segments would come back with a checkpoint. */
int seg_room_check(struct coil_store *s, struct wreq *w, uint64_t keep,
		   unsigned *rep);
/* Bytes a free segment can surely take: each segment loses at most one
 * blob's worth at its end to a blob that does not fit. */
uint64_t seg_bytes_per_free(const struct coil_store *s);
void seg_inflight_done(struct coil_store *s, struct wreq *w);
int seg_verify_accounting(struct coil_store *s, uint32_t *bad_seg);
/* Add each extent's logical bytes to @live[its segment] (nseg
 * entries, zeroed by the caller; mlock held) — the one recount the checks
 * share.  @return true if some extent ends past its object's size. */
bool seg_recount_live(struct coil_store *s, uint64_t *live);

/* Extent-map drop callback for live accounting alone: @arg is the store.
 * Record apply (log/meta.c, meta_extent_dropped) also drops the cache's
 * entry; this one is for the object table, whose maps die at close. */
void seg_drop_live(void *arg, struct blobd *b, uint32_t len);

/* Discards: set up (runs for @nseg segments; @off: never ask the device)
 * and torn down by the cleaner.  @return 0 or -ENOMEM. */
int seg_discard_init(struct coil_store *s, bool off);
void seg_discard_destroy(struct coil_store *s);
/* ckpt_write, ckpt_mu held, mlock not: punch / discard exactly the
 * PENDING segments the checkpoint holds that no reader is in (nothing can
 * reference them or start reading them any more), contiguous runs at once.
 * Synchronous, on the checkpoint thread, so no discard can land after a
 * freed segment is reused.  Errors are counted, never fatal; a device or
 * file system without support turns discards off. */
void seg_discard_freed(struct coil_store *s);
void seg_discard_range(struct coil_store *s, uint32_t first, uint32_t n);

/* At close (nothing in flight): give back the blocks of the data area
 * that were allocated and never written (what the file system reports as
 * a hole: unwritten extents read as zeros and hold no blob): the tail of
 * the segment being filled, segments allocated ahead of the writer, the
 * gap a sealed segment left.  Written blocks stay, also in free segments
 * (an overwrite costs the writer less than a write into new blocks,
 * docs/space.md).  @return the bytes punched. */
uint64_t seg_give_back_unwritten(struct coil_store *s);
/* At a writable open of a growing store: the segment recovery resumed
 * filling (store.c) takes writes past its used part, which an earlier
 * close may have given back (seg_give_back_unwritten): allocate it again,
 * or, if the file system has no room, fill a free segment instead. */
void seg_resume_reserve(struct coil_store *s);

#endif
