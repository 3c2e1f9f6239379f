/* engine/log/ckpt.h — the checkpoint writer: snapshot the metadata, write
 * it to the inactive area, flip the superblock, free PENDING segments; its
 * thread; the checkpoint area's sizing.  Loading a checkpoint is recovery's
 * (log/recovery.h).
 *
 * Feedback loop: the journal triggers checkpoints when it fills
 * (log/journal.c); a finished checkpoint frees journal space and kicks it. */
#ifndef COIL_ENGINE_CKPT_H
#define COIL_ENGINE_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct coil_store;
struct wreq;

int ckpt_write(struct coil_store *s, bool clean);
/* The piece (a multiple of BLOCK) a base's payload is encoded and written
 * in: 4 MiB.  Tests make it one BLOCK, so that a small base is written
 * in many (a power cut between them, items straddling them). */
extern uint32_t ckpt_write_piece;
/* The payload the next checkpoint would write for the metadata as it is
 * now: ckpt_write's sizing, from running totals (mlock held). */
uint64_t ckpt_payload_now(const struct coil_store *s);
/* mlock held.  May @w's extents (each blob's extent, and a split at each
 * end) join the metadata and still fit the checkpoint area?  If so they
 * are reserved (w->ckpt_res, released by seg_inflight_done); if not,
 * -ENOSPC: a store whose metadata outgrew its checkpoint area could never
 * checkpoint again, its journal would fill and it would break.  @inl: the
 * blobs are kept in memory, and written whole into checkpoints. */
int ckpt_reserve_write(struct coil_store *s, struct wreq *w, bool inl);
/* What the extents a write may split at its two ends add to a checkpoint,
 * at most. */
uint64_t ckpt_split_bytes(const struct coil_store *s);
/* mlock held.  @bytes more for @w (a batch's objects, names and extra
 * extents), released with the rest.  0 or -ENOSPC. */
int ckpt_reserve_more(struct coil_store *s, struct wreq *w, uint64_t bytes);
/* mlock held.  Room in the checkpoint area for one more object named with
 * @name_len bytes?  0 or -ENOSPC. */
int ckpt_room_for_object(const struct coil_store *s, size_t name_len);
int ckpt_thread_start(struct coil_store *s);
void ckpt_thread_stop(struct coil_store *s);
void ckpt_trigger(struct coil_store *s);
/* Trigger a checkpoint and wait until one that began after this call has
 * finished.  Not from the ring thread.  @return 0 or -ESHUTDOWN. */
int ckpt_wait(struct coil_store *s);
int super_write(struct coil_store *s, bool clean);
/* At close, after the close checkpoint is durable: give back each area's
 * bytes past the base and its chain (older bases and deltas no superblock
 * names).  @return the bytes punched. */
uint64_t ckpt_give_back(struct coil_store *s);

#endif
