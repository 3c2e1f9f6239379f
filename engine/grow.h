/* engine/grow.h — a file store's data area grows in segment steps as data
 * arrives (FMT_INCOMPAT_GROW).  See docs/space.md, "Growth". */
#ifndef COIL_ENGINE_GROW_H
#define COIL_ENGINE_GROW_H

#include <stdbool.h>
#include <stdint.h>

struct coil_store;

/* Segments a new growing store starts with (the data area's share of its
 * first 64 MiB on disk). */
#define GROW_INITIAL_BYTES (32ull << 20)
/* Growth steps (cleaner.c decides them) are at least a quarter of the data area,
 * between these bounds: a small store stays near its data (a 33 MB page
 * store grew to 96 MiB in one 64 MiB step), a large one pays few steps. */
#define GROW_STEP_MIN_BYTES (8ull << 20)
#define GROW_STEP_BYTES (64ull << 20)
/* Journal bytes allocated at least (when the ring is that long). */
#define GROW_JOURNAL_MIN (8ull << 20)
/* A growing store's journal holds at least what its writers put in it
 * in this long, twice (a checkpoint comes when half is used): under
 * sustained writes, checkpoints about this far apart at most.  Each
 * checkpoint costs its fdatasyncs, and on ext4 those hold up every
 * O_DIRECT write into newly allocated blocks (their extents convert in
 * the same journal).  4 KiB random writes at QD 32 into a fresh store,
 * 256 MiB, 4 alternated pairs: with the share at the store's size alone
 * (its 8 MiB floor here) 11-15 checkpoints and 219 MiB/s (median), with
 * this rule 5 and 261 MiB/s, p99.9 26-43 -> 14-21 ms.  At most a
 * quarter of the segments' bytes (the journal stays in proportion to
 * the data while the store is open), and it goes back to the file
 * system at close. */
#define GROW_CKPT_SPACING_NS 1000000000ull

/* The smallest growth step for a data area of @nseg segments. */
uint64_t grow_step_bytes(const struct coil_store *s, uint32_t nseg);
/* Journal bytes to allocate for a data area of @nseg segments. */
uint64_t grow_journal_target(const struct coil_store *s, uint32_t nseg);
/* Allocate the journal ring up to @target bytes from its start and raise
 * s->j_alloc; best effort (the ring keeps wrapping at what it has).
 * @return 0 or -errno of the allocation. */
int grow_journal(struct coil_store *s, uint64_t target);
/* grow_journal to the target for the store's current size (best effort). */
void grow_journal_follow(struct coil_store *s);

/* One growth step of at least @want segments (fewer if the maximum is
 * near): check the file system has room, extend the file, raise the count
 * the next superblock write records, then hand them to the allocator (the
 * caller updates its marks).  Not from the ring thread.  @return segments
 * added, 0 at the maximum, -ENOSPC, -EIO. */
int grow_step(struct coil_store *s, uint32_t want);
/* Shrink a growing store to @keep segments (the caller made sure every
 * segment from @keep on is FREE, took them out of the table and wrote a
 * checkpoint and superblock with the smaller count): cut the file after
 * them.  s->grow_mu held.  @return 0 or -errno. */
int grow_truncate(struct coil_store *s, uint32_t keep);
/* The same with s->grow_mu held (a policy that decided under it). */
int grow_step_locked(struct coil_store *s, uint32_t want);

#endif
