/* engine/cleaner.h — space management (issue 7): the segment cleaner, the
 * free-segment reserve, foreground throttling, TRIM of freed segments, the
 * live-byte recount, and the space part of coil_stats_json.  See
 * docs/space.md.
 *
 * Locking: every function that looks at the segment table takes s->mlock
 * itself unless its comment says "mlock held".
 */
#ifndef COIL_ENGINE_CLEANER_H
#define COIL_ENGINE_CLEANER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct coil_store;
struct object;
struct ext;
struct wreq;
struct fmt_extent;

/* Start/stop the cleaner thread (store.c: after the checkpoint thread
 * starts; before close waits for the operations in flight).  stop is safe
 * on a store whose cleaner never started.  @return 0 or -errno. */
int cleaner_start(struct coil_store *s);
void cleaner_stop(struct coil_store *s);

/* seg_open_next (mlock held; the cleaner's own lock nests inside it): a
 * segment was opened; wake the cleaner if free space is below its low
 * mark.  With a cleaner running, its passes (not every segment open below
 * a quarter free) take the checkpoints that free emptied segments. */
void cleaner_kick(struct coil_store *s);

/* Free segments kept for the cleaner (foreground writes may not use them). */
uint32_t cleaner_reserve_segs(const struct coil_store *s);

/* seg_place_write: the capacity a write may use, given @cap the bytes the
 * free space can take.  A write with w->use_reserve (a relocation) gets it
 * all; a foreground write gets what is left above the reserve.  mlock held. */
uint64_t cleaner_write_cap(const struct coil_store *s, const struct wreq *w,
			   uint64_t cap);

/* engine_write, before the write takes its ticket (so the cleaner, whose
 * relocations take later tickets, can always progress): when free space is
 * low, kick the cleaner and delay the caller — a short wait proportional to
 * how far free space is below the throttle mark, at most
 * CLEANER_THROTTLE_MAX_NS in total when the write would not fit at all.
 * Never waits on a coil thread, nor when cleaning cannot help (the write
 * then fails with -ENOSPC at placement). */
void cleaner_throttle(struct coil_store *s, uint64_t need);

/* ckpt_write, after the new checkpoint is durable and before it marks the
 * PENDING segments it snapshotted FREE (ckpt_mu held, mlock not): punch /
 * discard exactly those (PENDING, in the checkpoint, no reader: nothing can
 * reference them or start reading them any more), contiguous runs at once.
 * Synchronous, on the checkpoint thread, so no discard can land after a
 * freed segment is reused.  Errors are counted, never fatal; a device or
 * file system without support turns discards off. */
void cleaner_discard_freed(struct coil_store *s);
void cleaner_discard_range(struct coil_store *s, uint32_t first, uint32_t n);
/* Stop (if needed) and free the cleaner: store_free. */
void cleaner_destroy(struct coil_store *s);

/* Install a relocated extent @ex (its blob a verbatim copy of an older one)
 * over exactly those parts of [ex->off, ex->off + ex->len) that still map
 * the same blob content (same codec, lengths and checksums) at the same
 * alignment: the relocation's compare-and-swap.  The live path and replay
 * make the same decision (replay reaches the same map state in the same
 * record order).  Takes its own blob references.  mlock held (or
 * single-threaded replay).  @return logical bytes installed, or -ENOMEM. */
int64_t cleaner_remap_extent(struct coil_store *s, struct object *o,
			     const struct ext *ex);
/* Replay of a REMAP WRITE record's extent (already bounds-checked and
 * verified by replay).  @return 0 or -ENOMEM. */
int cleaner_replay_remap(struct coil_store *s, struct object *o,
			 const struct fmt_extent *fe);

/* Recount every segment's live bytes from the extent maps and compare with
 * the running counts.  @return 0 if equal, -EUCLEAN if not (and logs the
 * first difference to stderr).  Takes mlock.  For tests and debugging. */
int cleaner_check_live(struct coil_store *s);

/* The "cleaner" member of coil_stats_json (no braces around it, no comma):
 * "cleaner":{...}.  @return bytes needed (like snprintf). */
int cleaner_stats_fmt(struct coil_store *s, char *buf, size_t len);

/* Test hooks (built into every configuration; cheap): run one cleaning
 * pass now, cleaning every sealed segment with reclaimable space down to
 * @max_victims (0 = the normal policy), and wait for it.  @return segments
 * freed by the pass or -errno. */
int cleaner_run_now(struct coil_store *s, uint32_t max_victims);

#endif
