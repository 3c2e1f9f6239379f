/* engine/log/journal.h — the journal: tickets, per-object turns, commit
 * cycles (chunk write, fdatasync), applying records in ticket order.
 *
 * Feedback loop (the one place the log calls itself back): a journal that
 * fills past ENGINE_CKPT_PERCENT triggers a checkpoint (log/ckpt.c), and the
 * checkpoint, once durable, moves the replay point and kicks the journal
 * (journal_kick) so writers waiting for space go on. */
#ifndef COIL_ENGINE_JOURNAL_H
#define COIL_ENGINE_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "coil.h"
#include "uring/uring.h"

struct coil_store;
struct object;

/* The reorder ring of the journal holds every ticket a write or metadata op
 * can have outstanding. */
#define ENGINE_JSLOTS 2048u
/* After recovery the chunk sequence jumps by this much, so a chunk left from
 * before the crash can never carry a sequence the new session will expect. */
#define ENGINE_SEQ_GAP (1ull << 20)
/* Journal chunks in flight at once (write, and fdatasync when asked): a
 * chunk is built and written while earlier ones are still on their way;
 * they are applied and completed strictly in order. */
#define ENGINE_JCYCLES 4u
/* coil_flush calls waiting or in flight (flush.c): a flush loop that does
 * not wait for its callbacks waits here instead of queueing without end.
 * Far above what callers waiting for their flushes reach (one each). */
#define ENGINE_FLUSH_MAX 64u
/* A chunk goes out while another is in flight once its records fill more
 * than this (about four 4 KiB write records).  At a full block (~15
 * records) a QD32 writer spent one chunk round trip waiting for the chunk
 * ahead and one in its own: 4 KiB random writes, same run, alternating:
 * 76-94k IOPS with a block, 100-102k with a quarter block (fio's io_uring
 * engine on a plain file: 85-92k); on a store the cleaner is busy in,
 * 59-71k vs 72-82k. */
#define ENGINE_JCHUNK_ALONGSIDE (FMT_BLOCK / 4)
/* Write-behind (journal.c, writebehind): while a store's writers flush,
 * the page cache is asked to start writing the journal back every
 * ENGINE_JWB_BYTES behind the head, so a flush's fdatasync finds little
 * left to write.  "While they flush": a flush called within the last
 * ENGINE_JWB_RECENT_NS.  A store nobody flushes leaves its journal to the
 * page cache, where a block rewritten before the kernel's own writeback
 * reaches the device once.  QD 1 4 KiB page writes with a coil_sync every
 * 100 (~200 KiB of journal), alternated with no write-behind: the sync's
 * p50 333 -> 235 us at 64 KiB for 10 % more CPU, 279 -> 208 us at 128 KiB
 * for 5 %; the write rate the same. */
#define ENGINE_JWB_BYTES (128u << 10)
#define ENGINE_JWB_RECENT_NS 1000000000ull
/* Checkpoint when the journal is this full (percent). */
#define ENGINE_CKPT_PERCENT 50u

/* One journal entry: a record waiting for its ticket's turn. */
struct jent {
	uint64_t ticket;
	uint8_t *rec;          /* encoded record (may be NULL: failed op) */
	uint32_t rec_len;
	uint32_t nrec;         /* records in rec; 0 counts as 1 */
	int status;            /* < 0: the op failed; no record */
	bool need_sync;
	/* A write's record may reach the journal before its data is on the
	 * device (the record vouches for the blobs by checksum, and replay
	 * stops at a record whose blobs do not verify); it is applied and
	 * completed only once both are done.  Under jlock. */
	bool data_pending;
	bool data_failed;
	bool in_chunk;         /* its record is in the cycle's chunk */
	bool chunk_last;       /* last entry of a chunk: applying it moves the
				  applied point to chunk_end_lin/next_seq */
	uint64_t chunk_end_lin; /* end of its cycle's chunk; 0: not in one */
	uint64_t chunk_next_seq;
	/* under mlock, in ticket order, after the chunk is durable enough */
	void (*apply)(struct coil_store *s, struct jent *e);
	/* after apply, outside every lock: completes the op */
	void (*done)(struct coil_store *s, struct jent *e, int res);
	struct jent *next;
	/* journal_take_turn: the entry's place in its object's order, and
	 * what continues it once it holds its ticket (at once, or when a
	 * predecessor's ticket released it) */
	uint64_t turn;
	struct jent *turn_next;
	void (*ticketed)(struct coil_store *s, struct jent *e);
	/* a synchronous caller's waiter (engine_tls_waiter at submission):
	 * that thread may write and complete the entry itself */
	const void *owner;
};

struct flush_waiter {
	coil_cb cb;
	void *arg;
	uint64_t ticket;       /* the journal's next ticket at the call */
	struct flush_waiter *next;
};

/* One commit cycle: the entries gathered into one chunk, the chunk write,
 * the fdatasync a flush or a sync_writes record asked for. */
struct jcycle {
	struct coil_store *s;
	struct jent *first, *last;
	bool sync;              /* an fdatasync at its turn */
	bool done;              /* the chunk write finished (res) */
	bool sync_issued, synced;
	int res;
	uint8_t *buf;           /* chunk_cap + 2 blocks, 4 KiB aligned */
	uint8_t *chunk;         /* the chunk, at buf + pre */
	uint32_t pre;           /* bytes of the shared block before the chunk */
	uint32_t io_len;        /* whole blocks written, from chunk_lin - pre */
	uint32_t chunk_len;     /* 0: nothing to write (a NOP carries it) */
	uint64_t chunk_lin;     /* linear journal offset of the chunk */
	uint64_t chunk_seq;
	bool now;               /* written and completed by its owner's thread */
	uint64_t sync_mark;     /* chunks its fdatasync makes durable: up to */
	struct uring_io jio;
	struct uring_io fio;
};

int journal_init(struct coil_store *s);
/* The seq up to which a device flush issued now covers every chunk (the
 * chunks retired so far, which were written in order).  jlock held. */
uint64_t journal_sync_mark_locked(const struct coil_store *s);
/* A device flush issued with @mark completed. */
void journal_synced(struct coil_store *s, uint64_t mark);
void journal_destroy(struct coil_store *s);
/* Take the next ticket now: create and remove (with mlock held, so the
 * memory change and the ticket are one step) and the cleaner's relocations.
 * Writes and truncates take theirs through journal_take_turn. */
uint64_t journal_ticket(struct coil_store *s);
/* A write or truncate of @o is submitted: its place in @o's order. */
uint64_t journal_turn(struct coil_store *s, struct object *o);
/* Take @e's ticket once every earlier place of @o has taken its own, then
 * continue it (e->ticketed).  A write that is not yet first is parked
 * (@return false): the predecessor whose ticket makes it first gives it its
 * ticket and continues it.  @wait (a truncate, on a thread that may block)
 * waits for its place instead.  Entries this call released are continued
 * after @e, in ticket order. */
bool journal_take_turn(struct coil_store *s, struct object *o, struct jent *e,
		       bool wait);
/* A batch's places in each of @n objects, taken together (so two batches
 * order alike in every object they share). */
void journal_turns(struct coil_store *s, struct object **o, uint64_t *turn,
		   uint32_t n);
/* Wait until each place is first in its object, then take one ticket for
 * @e (not continued: the caller readies it) and pass every place on.  May
 * block: not on a coil thread. */
void journal_take_turns(struct coil_store *s, struct object **o,
			const uint64_t *turn, uint32_t n, struct jent *e);
/* Metadata ops reserve a ticket slot first (writes are bounded by the write
 * contexts); waits, or -EAGAIN when @can_wait is false. */
int journal_reserve_meta(struct coil_store *s, bool can_wait);
void journal_release_meta(struct coil_store *s);
/* The entry for its ticket is ready (record built or op failed). */
void journal_ready(struct coil_store *s, struct jent *e);
/* Same, without starting a cycle (for callers holding mlock: the caller
 * kicks after unlocking). */
void journal_ready_nokick(struct coil_store *s, struct jent *e);
/* Start a commit cycle if there is work and none is running. */
void journal_kick(struct coil_store *s);
/* A write's data runs all completed (status 0) or one failed. */
void journal_data_done(struct coil_store *s, struct jent *e, int status);
int journal_flush(struct coil_store *s, coil_cb cb, void *arg);
/* Bytes of journal in use and capacity. */
void journal_usage(struct coil_store *s, uint64_t *used, uint64_t *len);
/* At close, after the close checkpoint is durable: give the ring's blocks
 * back to the file system when every chunk in it is released (the
 * superblocks' replay point is the head, nothing in flight), and set the
 * allocated part to none.  A file store's open allocates it again
 * (store.c) before any chunk is written.  @return the bytes punched (the
 * ring's length) or 0 when it kept them. */
uint64_t journal_give_back(struct coil_store *s);

#endif
