/* engine/log/recovery.h — open's recovery: load the durable checkpoint,
 * then replay the journal after it (records whose blobs do not verify end
 * the replay).  Single-threaded, before any thread of the store starts,
 * but for the journal walk replay_prefetch starts. */
#ifndef COIL_ENGINE_RECOVERY_H
#define COIL_ENGINE_RECOVERY_H

#include <stdint.h>


struct coil_store;

/* Load the checkpoint the superblock names into the object table and the
 * segment table.  @return 0, -EIO (corrupt), -ENOMEM. */
int ckpt_load(struct coil_store *s);
/* The piece (a multiple of BLOCK) a base is read in: 4 MiB.  Tests make
 * it one BLOCK, so that a small base crosses pieces everywhere. */
extern uint32_t ckpt_load_piece;

/* Apply the journal's records after the checkpoint's replay point.
 * @return 0, -EIO, -ENOMEM. */
int replay_journal(struct coil_store *s);
/* Before ckpt_load: start replay's first step, the walk of the journal
 * chain (a device read of all of it) on a thread of its own, so that it
 * overlaps the checkpoint's load (CPU).  Best effort: without it,
 * replay_journal walks first.  replay_abandon ends it when open fails
 * before replay_journal. */
void replay_prefetch(struct coil_store *s);
void replay_abandon(struct coil_store *s);
struct fmt_jchunk;
/* The committer never writes a chunk larger than this (journal_init). */
#define REPLAY_CHUNK_MAX (1u << 20)
/* What replay_read_chunk needs: a chunk and the block parts around it. */
#define REPLAY_CHUNK_BUF (REPLAY_CHUNK_MAX + 2 * FMT_BLOCK)
/* Read the chunk with sequence @seq at journal offset @pos (the end of the
 * one before), at the next block boundary (the writer did not share the
 * block that one ended in), or at 0 when it did not fit before the end and
 * wrapped.  Also the scrub's walk of the journal in use.  @chunk:
 * REPLAY_CHUNK_BUF bytes, aligned.  @win: read-ahead (NULL: none).
 * @return 1 (found: *@h, *@at, the chunk at the start of @chunk, payload
 * verified), 0 (none: the journal ends), or -errno of a read. */
/* What replay has read of the journal (recovery.c); NULL: read each piece
 * as it is needed. */
struct jwindow;
int replay_read_chunk(struct coil_store *s, uint8_t *chunk, uint64_t pos,
		      uint64_t seq, struct fmt_jchunk *h, uint64_t *at,
		      struct jwindow *win);

#endif
