/* engine/cleaner.h — space management: the segment cleaner, the
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
struct optimizer;

/* Start/stop the cleaner thread (store.c: after the checkpoint thread
 * starts; before close waits for the operations in flight).  stop is safe
 * on a store whose cleaner never started.  @return 0 or -errno. */
int cleaner_start(struct coil_store *s);
void cleaner_stop(struct coil_store *s);

/* engine_write, when the allocator reports a segment opened (mlock not
 * held; taken here to read the free count): wake the cleaner if free space
 * is below its low mark.  With a cleaner running, its passes (not every
 * segment open below a quarter free) take the checkpoints that free
 * emptied segments. */
void cleaner_kick(struct coil_store *s);

/* Free segments kept for the cleaner (foreground writes may not use them). */
uint32_t cleaner_reserve_segs(const struct coil_store *s);
/* A write of @need bytes found no room (write_ticketed, a pool worker
 * holding its ticket): grow a growing store by a step if it can (grow.c).
 * Never from the ring thread.  @return segments added, 0, -ENOSPC, -EIO. */
int cleaner_grow(struct coil_store *s, uint64_t need);
/* coil_compact: give the free segments at the end of a growing store's
 * file back to the file system (the emptied segments first become free
 * through checkpoints); *@returned: the disk bytes the file gave back.
 * @return 0, -EROFS, -EDEADLK (a coil thread), or a checkpoint's error. */
int cleaner_compact(struct coil_store *s, uint64_t *returned);

/* The free bytes a write may not take: the cleaner's reserve for a
 * foreground write, nothing for a relocation (w->use_reserve) or without a
 * cleaner.  Constant while the cleaner runs. */
uint64_t cleaner_write_keep(const struct coil_store *s, const struct wreq *w);

/* engine_write, before the write takes its ticket (so the cleaner, whose
 * relocations take later tickets, can always progress): when free space is
 * low, kick the cleaner and delay the caller — a short wait proportional to
 * how far free space is below the throttle mark, at most
 * CLEANER_THROTTLE_MAX_NS in total when the write would not fit at all.
 * Never waits on a coil thread, nor when cleaning cannot help (the write
 * then fails with -ENOSPC at placement). */
void cleaner_throttle(struct coil_store *s, uint64_t need);

/* Stop (if needed) and free the cleaner: store_free. */
void cleaner_destroy(struct coil_store *s);

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

/* One optimizer pass (optimize.h) at zstd @level over at most @budget
 * bytes of live data, run by the cleaner thread; waits for it.  *@taken:
 * the live bytes of the segments it took.  @return 1 when data not yet
 * optimized remains in sealed segments, 0 when none, -EROFS (no cleaner:
 * read-only), -EDEADLK (a coil thread), -ESHUTDOWN, -EIO, -ENOMEM. */
int cleaner_optimize(struct coil_store *s, int level, uint64_t budget,
		     uint64_t *taken);
/* The optimizer's counters; NULL without a cleaner. */
const struct optimizer *cleaner_optimizer(struct coil_store *s);
/* Tests: the next @bad candidates are corrupted before their check. */
void cleaner_optimize_inject(struct coil_store *s, uint32_t bad);
/* Tests: @fn(@arg) runs on the cleaner thread with each optimizer batch
 * encoded, before it is placed and journaled (NULL: none). */
void cleaner_optimize_hook(struct coil_store *s, void (*fn)(void *),
			   void *arg);

#endif
