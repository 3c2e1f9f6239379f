/* engine/log/salvage.h — COIL_SALVAGE opens: where a normal open gives up
 * on a damaged superblock pair, checkpoint or journal, find the newest
 * metadata that still verifies.  Single-threaded, before recovery; writes
 * nothing.  What it gave up on is noted for coil_stats_json. */
#ifndef COIL_ENGINE_SALVAGE_H
#define COIL_ENGINE_SALVAGE_H

#include <stdint.h>

struct coil_store;
struct fmt_super;

/* Both superblock copies are damaged: rebuild s->sb from the newest
 * checkpoint found by scanning the @size bytes of the store (its header
 * and payload verify) and the layout a store of this size has.
 * @return 0, -EIO (no checkpoint, or no layout fits it), -ENOMEM. */
int salvage_super(struct coil_store *s, uint64_t size);

/* Before ckpt_load: when the checkpoint s->sb names does not verify, point
 * s->sb (in memory) at the other area's checkpoint if that one does, else
 * at none, with the replay point at the oldest journal chunk of the store.
 * @return 0 or -ENOMEM. */
int salvage_ckpt(struct coil_store *s);

/* The checkpoint @sb names reads back and verifies (header, the
 * superblock's checksum of it, payload).  Also the scrub's check.
 * @return 0, -EIO, a read's -errno, -ENOMEM. */
int ckpt_verify(struct coil_store *s, const struct fmt_super *sb);

/* Note what a salvage open had to give up on (kept for the stats). */
void salvage_note(struct coil_store *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
