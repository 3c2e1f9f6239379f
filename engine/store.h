/* engine/store.h — the store: the state every engine file works on, its
 * open/close (store.c), the synchronous waiter, and the small helpers all
 * paths share.  The types of the areas it holds come from their headers;
 * nothing here calls into an area.  See docs/architecture.md for the
 * threads, the paths and the file dependency picture.
 *
 * Locks, always taken in this order:
 *   s->mlock  metadata: object table, extent maps, segment table, allocator
 *   s->jlock  journal: tickets, the reorder ring, the commit cycle, flushes
 *   s->ckpt_mu one checkpoint at a time, superblock writes
 * Neither lock is ever held across I/O or a user callback.
 */
#ifndef COIL_ENGINE_STORE_H
#define COIL_ENGINE_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <zstd.h>

#include "coil.h"
#include "common/common.h"
#include "engine/log/journal.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/dict.h"
#include "engine/place/extmap.h"
#include "engine/place/segment.h"
#include "format/format.h"
#include "pool/pool.h"
#include "uring/uring.h"

/* coil_obj_open for the engine's own objects, whose names start with
 * COIL_NAME_RESERVED (and must). */
int engine_obj_open_internal(coil_store *s, const char *name, unsigned flags,
			     coil_obj **out);

struct cache;
struct cleaner;
struct scrub;
struct object;
struct ra_stream;
struct ra_store;
struct rreq;
struct wreq;

#define STORE_MAGIC 0x4c494f43u      /* "COIL" */
#define STORE_MAGIC_DEAD 0x44414544u /* "DEAD" */
#define HANDLE_MAGIC 0x4a424f43u     /* "COBJ" */
#define HANDLE_MAGIC_DEAD 0x4a424f44u

/* Notes a salvage open keeps (coil_stats_json "salvage"). */
#define STORE_SALVAGE_NOTES 8u

/* Largest object: offsets stay far from u64 overflow in every sum. */
#define ENGINE_OBJ_SIZE_MAX (1ull << 60)
struct coil_obj {
	uint32_t magic;
	struct coil_store *s;
	struct object *obj;
	_Atomic uint32_t inflight;
	/* Bytes of this handle's reads submitted and not yet completed:
	 * readahead stands aside for a reader that keeps a window's worth of
	 * other reads in flight (readahead.c, readahead_on_read). */
	_Atomic uint64_t rd_bytes;
	struct coil_obj *next;     /* free list / open list */
	/* The slot in the process-wide handle table (handle.c) and its
	 * generation, which the public handle carries. */
	_Atomic uint32_t gen;
	uint32_t slot;
	uint32_t free_next;        /* next free slot, under handle.c's lock */
	struct ra_stream *ra;      /* readahead stream (readahead.c),
				    * NULL when prefetch or the cache is off */
	int level;                 /* compression of its writes: the store's,
				    * or ENGINE_LEVEL_SHORTLIVED */
};

/* zstd's level for writes of a COIL_SHORTLIVED handle on a compressing
 * store: its fast mode.  SQLite's pages in 64 KiB blobs (zstd -b):
 * level 1 590 MB/s at 5.6:1, -1 737 at 4.7:1, -3 851 at 4.1:1, -5 941 at
 * 4.1:1, -7 973 at 3.7:1, -10 1033 at 2.9:1; in 4 KiB pages level 1 341
 * MB/s, -5 634. */
#define ENGINE_LEVEL_SHORTLIVED (-5)

struct engine_stats {
	_Atomic uint64_t writes, write_bytes, write_errors;
	_Atomic uint64_t reads, read_bytes, read_errors;
	_Atomic uint64_t csum_failures;
	_Atomic uint64_t blobs_raw, blobs_zstd;
	_Atomic uint64_t blobs_zstd_fast; /* of blobs_zstd: COIL_SHORTLIVED */
	_Atomic uint64_t writes_zero_copy; /* written from the caller's buffer */
	_Atomic uint64_t inline_writes; /* small writes kept in the journal */
	/* batches applied, failed after submission, and waits for another
	 * batch's claim on a name (engine/batch.c) */
	_Atomic uint64_t batches, batch_errors, batch_waits;
	_Atomic uint64_t pack_batches, pack_blobs, pack_bytes, pack_installed;
	_Atomic uint64_t rd_mem; /* blobs reads took from memory */
	_Atomic uint64_t ckpt_last_bytes; /* the last checkpoint's size */
	_Atomic uint64_t ckpt_last_meta;  /* the same without in-memory blobs */
	_Atomic uint64_t enc_logical, enc_stored;
	_Atomic uint64_t dev_bytes_written, dev_bytes_read;
	_Atomic uint64_t flushes, fsyncs;
	_Atomic uint64_t reserve_fails; /* segments the file system refused */
	/* growth of the data area (engine/grow.c): steps taken, segments
	 * added, steps the file system refused (-ENOSPC) */
	_Atomic uint64_t grows, grow_segs, grow_fails;
	/* segments replay found in use past the superblock's count (a
	 * growth step's count is written by the next checkpoint) */
	_Atomic uint64_t grow_replayed;
	/* high-water marks of coil_flush calls waiting or in flight (bound:
	 * ENGINE_FLUSH_MAX) and of their fdatasyncs in flight (bound: 1) */
	_Atomic uint64_t flush_waiters_max, flush_fsyncs_inflight_max;
	_Atomic uint64_t chunks, chunk_bytes, records;
	_Atomic uint64_t chunks_overlapped; /* started with another in flight */
	_Atomic uint64_t chunks_now; /* written by their own writer's thread */
	_Atomic uint64_t chunks_marker; /* empty chunks saying a flush landed */
	_Atomic uint64_t jwb_asks, jwb_bytes; /* journal write-behind */
	_Atomic uint64_t rd_now;     /* device reads done by their reader */
	_Atomic uint64_t fsyncs_now; /* a coil_sync's own, on its thread */
	/* encoded before a write submitted earlier to its object: waited for
	 * that one's ticket (journal_take_turn) */
	_Atomic uint64_t turn_waits;
	_Atomic uint64_t ckpts, ckpt_bytes, ckpt_ns_last, ckpt_failures;
	_Atomic uint64_t ckpt_deltas, ckpt_delta_bytes; /* of ckpts, bytes */
	/* open: checkpoint pieces (base, deltas) read from the mirror
	 * because the first copy did not verify */
	_Atomic uint64_t ckpt_mirror_reads;
	_Atomic uint64_t ckpt_mirror_bytes; /* written to the mirror */
	/* how long a checkpoint's snapshot held mlock (writers'
	 * apply and every read wait that long) */
	_Atomic uint64_t ckpt_snap_ns_last, ckpt_snap_ns_max;
	_Atomic uint64_t ckpt_area_full; /* writes refused: checkpoint area full */
	_Atomic uint64_t journal_waits;
	_Atomic uint64_t replayed_chunks, replayed_records;
	_Atomic uint64_t replayed_bytes; /* journal bytes those chunks span */
	_Atomic uint64_t replay_ns;      /* the replay's time (open) */
	/* its walk of the journal's chain, on the coil-replay thread while
	 * the checkpoint loaded (replay_ns counts only the wait for it) */
	_Atomic uint64_t replay_walk_ns;
	/* chunks that walk checked whole (payload, records, inline blobs),
	 * which the apply then decoded without hashing them again */
	_Atomic uint64_t replay_known_chunks;
	/* small writes' blobs replay kept in the journal image instead of
	 * copying them, and those still in memory at its end, copied then */
	_Atomic uint64_t replay_blobs_lent, replay_blobs_copied;
	/* unflushed blobs the walker read and verified while the checkpoint
	 * loaded, which the apply then placed without a read */
	_Atomic uint64_t replay_verified_ahead;
	/* this open: all of coil_open, and its checkpoint load */
	_Atomic uint64_t open_ns, ckpt_load_ns;
	/* device reads replay made to verify the unflushed tail's blobs,
	 * and the bytes they read (a window spans blobs back to back) */
	_Atomic uint64_t replay_reads, replay_read_bytes;
	/* reads of the journal itself by replay (recovery.c, jwindow) */
	_Atomic uint64_t replay_journal_reads, replay_journal_read_bytes;
	_Atomic uint64_t inline_encodes, inline_decodes;
	_Atomic uint64_t read_splits;  /* joined reads that failed, read again
					* blob by blob (read.c) */
	_Atomic uint64_t prefetch_hints;
	_Atomic uint64_t ra_use_once;  /* prefetched entries dropped after a whole read */
	/* small blobs read whole and kept in the cache (bcache_keep_small);
	 * reads a coil_pread caller finished on its own thread after a
	 * device read; blobs decoded by the thread that found them ready
	 * (caller or ring) instead of handed to the pool */
	_Atomic uint64_t rd_small_kept, rd_caller_finished, rd_local_decodes;
	_Atomic uint64_t rd_blocks_kept, rd_block_hits;
	/* device reads widened to a window, and the blocks they kept */
	_Atomic uint64_t rd_windows, rd_window_blocks;
};

struct coil_store {
	uint32_t magic;
	int fd;
	struct store_lock *lock; /* keeps other openers out (lock.c) */
	dev_t dev;
	ino_t ino;
	char *path;
	bool rdonly;
	bool direct;
	bool is_blk;            /* a block device, not a regular file */
	bool filled;            /* zero-filled at creation (FMT_SUPER_FILLED):
	                           its segments need no reserving; set at open,
	                           read without a lock (sb.flags is rewritten
	                           by super_write under ckpt_mu) */
	bool sync_writes;
	bool inline_cb;         /* COIL_INLINE_CB */
	int level;              /* zstd level, 0 = no compression */
	unsigned pool_mode;
	unsigned prefetch;
	uint64_t cache_bytes;
	uint32_t max_blob;      /* effective: min(option, segment/2) */
	struct fmt_super sb;
	uint64_t store_id;
	struct uring *ring;
	struct pool *pool;
	_Atomic int broken;     /* first fatal error: writes fail with it */

	/* ---- metadata (mlock) ---- */
	pthread_mutex_t mlock;
	pthread_cond_t mcond;   /* truncate/remove/ticket waiters, and
				 * waiters for a batch's names */
	/* batches between claiming their names and applying (batch.c) */
	struct coil_batch *batches;
	/* names: open addressing (object.c); ids: chains */
	struct name_slot *by_name;
	uint32_t name_cap;      /* slots (power of two) */
	struct object **by_id;
	uint32_t tab_cap;       /* id buckets (power of two) */
	uint64_t nobj;
	uint64_t next_obj_id;
	/* What the next checkpoint's payload holds (ckpt_payload_bound): the
	 * maps' extents and checksums, the names; and what placed writes not
	 * yet applied may add to it (ckpt_reserved, released with their
	 * segments' inflight counts). */
	struct extmap_acct ext_acct;
	/* Small writes' blobs held in memory until packed (engine/pack.c);
	 * inline_ok: this store may write them (read-write, and the
	 * superblock carries FMT_INCOMPAT_INLINE). */
	struct memlist mem;
	struct dicts dicts;      /* zstd dictionaries (place/dict.c) */
	bool inline_ok;
	uint64_t name_bytes;
	uint64_t ckpt_reserved;
	/* Objects changed since the last checkpoint (place/object.c): the
	 * next delta checkpoint walks these ids.  ck_base_next: the next
	 * checkpoint must be whole (after loading, a failed checkpoint, a
	 * compaction, or when these lists could not grow). */
	uint64_t *dirty_ids;
	size_t ndirty, capdirty;
	bool ck_base_next;
	/* The checkpoint area the superblock does not name holds a copy of
	 * the base it names, at the same place, and gets each delta too:
	 * recovery reads a piece there when the first copy does not verify. */
	bool ck_mirror;
	struct seg *segs;       /* seg_cap entries; the first nseg in use */
	uint32_t nseg;          /* segments in use: changes only under mlock,
				 * and only upward while open (grow.c) */
	uint32_t seg_cap;       /* segments the layout has room for */
	bool grows;             /* a file store whose data area grows
				 * (FMT_INCOMPAT_GROW) */
	uint32_t active;        /* UINT32_MAX: none */
	uint64_t active_head;   /* next free byte, relative to the segment */
	uint32_t alloc_cursor;
	uint32_t free_segs;
	uint32_t nhandles;       /* open handles */
	uint64_t applied_end_lin;/* journal linear offset after the last applied chunk */
	uint64_t applied_next_seq;
	/* Every chunk up to this seq is durable (a device flush that covered
	 * it completed); each new chunk carries it (fmt_jchunk.synced). */
	_Atomic uint64_t j_synced;
	/* the seq of the last chunk retired (written, in order): what a
	 * device flush issued now covers; under jlock */
	uint64_t j_retired_seq;
	/* the largest chunk end of any record applied: ahead of
	 * applied_end_lin while a chunk is applied in part (its entries
	 * apply as their data lands, and mlock is released in between) */
	uint64_t applied_hi_lin;

	/* ---- journal (jlock) ---- */
	pthread_mutex_t jlock;
	pthread_cond_t jcond;
	struct jent **jslot;     /* ENGINE_JSLOTS, by ticket */
	uint64_t next_ticket;
	uint64_t head_ticket;
	uint64_t retired_ticket; /* every ticket below is in a retired cycle */
	bool jwait_space;
	/* Markers (journal.c, cycle_start): the seq of the last chunk with
	 * records (jlock), the largest synced value any chunk header has
	 * carried, and no marker from coil_close on. */
	uint64_t j_rec_seq;
	_Atomic uint64_t j_vouched;
	_Atomic bool jmark_off;
	struct flushq *fq;       /* coil_flush's groups (flush.c) */
	struct jent *aq_first, *aq_last; /* chunk written, waiting to apply */
	bool draining, drain_again;
	/* a drain handed to the ring thread by a thread that completed its
	 * own write (journal.c): others' callbacks run on coil threads */
	struct uring_io drain_io;
	bool drain_posted;
	int apply_err;           /* under mlock: a data write failed */
	/* cycles in flight, oldest first: cyc[(cyc_head + i) % ENGINE_JCYCLES]
	 * for i < cyc_n */
	struct jcycle cyc[ENGINE_JCYCLES];
	uint32_t cyc_head, cyc_n;
	bool retiring;           /* one thread retires finished cycles */
	int jfail;               /* a chunk or its fdatasync failed: every
				  * later cycle fails with it */
	uint32_t chunk_cap;
	uint64_t j_head_lin;     /* next chunk's linear offset */
	/* Sector chunks (FMT_INCOMPAT_JSECT): a chunk may start in the block
	 * the one before ended in, rewriting that block whole with its
	 * earlier bytes, which are still in the buffer of the cycle that
	 * wrote them (cyc[jtail_slot].buf + jtail_off holds the block the
	 * head is in, while jtail_ok: not after open).  Only when no cycle is
	 * in flight: then nothing writes that buffer. */
	bool jsect;
	bool jtail_ok;
	uint32_t jtail_slot, jtail_off;
	uint64_t j_tail_lin;     /* replay point of the durable checkpoint */
	/* The last early wrap (a ring allocated in part wraps at its
	 * allocated end): linear offset where the skipped bytes start, and
	 * how many.  Only one wrap can lie between tail and head. */
	uint64_t j_wrap_lin, j_wrap_len;
	uint64_t j_next_seq;
	uint32_t nonwrite_out;   /* metadata ops holding tickets */
	/* Write-behind (journal.c): the linear offset the page cache was
	 * asked to write the journal back up to, whether that ask is in
	 * flight (one at a time), and when coil_flush was last called. */
	uint64_t jwb_lin;
	bool jwb_busy;
	struct uring_io jwb_io;
	_Atomic uint64_t jwb_flush_ns;

	/* ---- requests ---- */
	pthread_mutex_t rq_mu;
	pthread_cond_t rq_cond;
	struct wreq *wfree;
	struct rreq *rfree;
	struct wreq *wreqs;
	struct rreq *rreqs;
	_Atomic uint64_t ops_inflight; /* writes/reads/flushes submitted, not done */
	/* Buffer size classes, chained: bp (8 KiB: small blobs and pages) ->
	 * bp_mid (max_blob + 8 KiB: a whole blob read or decode) -> bp_large
	 * (1 MiB + 8 KiB: the batch of a big write).  Always use &s->bp. */
	struct bufpool bp;
	struct bufpool bp_mid;
	struct bufpool bp_large;

	/* fallback zstd contexts for a coil thread the pool refuses */
	pthread_mutex_t zmu;
	ZSTD_CCtx *zc;
	ZSTD_DCtx *zd;

	/* ---- checkpoint thread ---- */
	pthread_mutex_t ckpt_mu;
	pthread_mutex_t ck_mu;
	pthread_cond_t ck_cond;
	pthread_t ck_thread;
	bool ck_started;
	bool ck_want;
	bool ck_stop;
	bool ck_running;
	uint64_t ck_runs;       /* checkpoints finished by the thread */
	pthread_cond_t ck_done_cond;
	uint64_t ckpt_seq;
	int ck_last_err;

	struct engine_stats st;
	struct coil_store *reg_next; /* process-wide registry */

	/* ---- growth (engine/grow.c) ---- */
	pthread_mutex_t grow_mu; /* one growth step at a time; taken before
				  * every other lock */
	/* The segment count growth steps have reached: the next superblock
	 * write records it (super_write).  A step does not take ckpt_mu,
	 * which a checkpoint holds through its fdatasyncs; lowered only by
	 * compaction, under grow_mu and ckpt_mu. */
	_Atomic uint32_t seg_count_grown;
	/* Journal bytes from the start of the ring whose blocks are
	 * allocated (journal_len when all are): the ring wraps early at it,
	 * so a journal write never needs space from the file system.  jlock. */
	uint64_t j_alloc;
	/* Journal bytes written a second between the last two checkpoints
	 * (the checkpoint thread measures it; grow.c sizes the share by it). */
	_Atomic uint64_t j_rate;
	/* tests: the next growth steps fail with this errno (0: off); only
	 * the COIL_FAULT_SEAM build looks at it */
	_Atomic int fault_grow_errno;

	/* ---- space management (engine/cleaner.c) ---- */
	struct cleaner *cl;     /* NULL: read-only, or not started */
	uint64_t opt_idle_ns;   /* background optimizer after this idle (0: off) */
	uint64_t opt_cold_ns;   /* the optimizer takes segments without new
				 * data for this long (0: all) */
	/* coil_optimize's view of the foreground's writes: the count it
	 * last saw and since when it has not moved (mlock) */
	uint64_t opt_writes_seen, opt_writes_since;
	struct packer *pk;      /* engine/pack.c; NULL: not started */
	struct scrub *scrub;    /* engine/scrub.c; NULL: not started */
	struct seg_discard disc; /* TRIM of freed segments (the cleaner's) */

	/* decoded-blob cache (NULL: cache_bytes 0) and the
	 * store-wide readahead state (live streams, closed reports) */
	struct cache *cache;
	/* tests: bcache_value_alloc fails (the read falls back to bufpool);
	 * only the COIL_FAULT_SEAM build looks at it.  Not under the #ifdef
	 * itself, so every translation unit sees one layout. */
	atomic_bool fault_value_alloc;
	struct ra_store *ras;

	/* COIL_SALVAGE (log/salvage.c): what the open had to give up on,
	 * and the replayed records whose data did not verify */
	bool salvage;
	uint32_t nsalvage_notes;
	char salvage_notes[STORE_SALVAGE_NOTES][192];
	_Atomic uint64_t salvage_unverified;
	/* open only: replay's walk of the journal, running while the
	 * checkpoint loads (log/recovery.c, replay_prefetch) */
	struct replay *replay;
};

bool store_valid(struct coil_store *s);
/* A flush of everything submitted, waited for (not from a coil thread). */
int coil_sync_internal(struct coil_store *s);

/* A synchronous call waiting for its own callback (coil_pwrite, coil_sync):
 * init, pass store_waiter_cb and the waiter, then store_waiter_wait with
 * what the async call returned (on failure its callback never comes). */
struct store_waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int64_t res;
};
void store_waiter_init(struct store_waiter *w);
void store_waiter_cb(void *arg, int64_t res);
int64_t store_waiter_wait(struct store_waiter *w, int rc);

/* The waiter of the synchronous write this thread is submitting
 * (coil_pwrite), or NULL: its journal record may be written and completed
 * on this thread (journal.c, "now" cycles). */
extern _Thread_local const void *engine_tls_waiter;
/* This thread is completing journal entries in place of the ring thread:
 * it counts as a coil thread meanwhile. */
extern _Thread_local bool engine_tls_now;

/* A ring or pool thread (or a thread completing its own write in their
 * place): it must never block on its own completions. */
static inline bool engine_on_coil_thread(struct coil_store *s)
{
	return uring_on_ring_thread(s->ring) || pool_worker_index() >= 0 ||
	       engine_tls_now;
}

/* A store that takes maintenance (compaction, the optimizer) from this
 * thread: open, writable, and a caller that may wait.  @return 0,
 * -EBADF, -EROFS, -EDEADLK (a coil thread: a callback). */
static inline int store_maint_check(struct coil_store *s)
{
	if (!store_valid(s))
		return -EBADF;
	if (s->rdonly)
		return -EROFS;
	return engine_on_coil_thread(s) ? -EDEADLK : 0;
}

static inline void stat_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* Raise *c to v if v is larger (a high-water mark). */
static inline void stat_max(_Atomic uint64_t *c, uint64_t v)
{
	uint64_t m = atomic_load_explicit(c, memory_order_relaxed);

	while (v > m && !atomic_compare_exchange_weak_explicit(
			c, &m, v, memory_order_relaxed, memory_order_relaxed))
		;
}

/* The store is broken by @err unless an earlier error already
 * broke it (the first one is what later writes fail with). */
static inline void store_break(struct coil_store *s, int err)
{
	int zero = 0;

	atomic_compare_exchange_strong(&s->broken, &zero, err);
}

/* Take @n off an atomic count that holds at least @n.  An underflow is an
 * unpaired decrement somewhere: wrapped to a huge count it would keep a
 * close or a segment reuse waiting forever, so it stops the process. */
#define COUNT_SUB(c, n)							\
	do {								\
		uint64_t n_ = (n);					\
		uint64_t old_ = atomic_fetch_sub((c), n_);		\
		COIL_ASSERT(old_ >= n_);				\
	} while (0)

/* Live bytes added to segment @idx for an extent of blob @b: the blob lies
 * inside the segment (placement and recovery's bounds check made sure),
 * and the count does not wrap.  Live bytes are logical: with compression a
 * segment's live count may exceed its size, so that is not the bound. */
static inline void seg_live_add(struct coil_store *s, uint32_t idx,
				const struct blobd *b, uint32_t len)
{
	uint64_t base = s->sb.data_off + (uint64_t)idx * s->sb.segment_size;

	COIL_ASSERT(idx < s->nseg);
	COIL_ASSERT(b->dev_off >= base &&
		    b->dev_off + b->stored_len <= base + s->sb.segment_size);
	COIL_ASSERT(s->segs[idx].live + len >= s->segs[idx].live);
	s->segs[idx].live += len;
	if (!(b->flags & FMT_BLOB_OPTIMIZED))
		s->segs[idx].unopt += len;
}

/* Has segment @idx had no new data for s->opt_cold_ns at @now (data
 * placed before the open counts as cold)?  mlock held. */
static inline bool seg_cold(const struct coil_store *s, uint32_t idx,
			    uint64_t now)
{
	uint64_t t = s->segs[idx].placed_ns;

	return t == 0 || now - t >= s->opt_cold_ns;
}

/* An operation counted in ops_inflight finished (after its callback). */
static inline void ops_done(struct coil_store *s)
{
	uint64_t old = atomic_fetch_sub(&s->ops_inflight, 1);

	COIL_ASSERT(old >= 1);
	if (old == 1) {
		pthread_mutex_lock(&s->rq_mu);
		pthread_cond_broadcast(&s->rq_cond);
		pthread_mutex_unlock(&s->rq_mu);
	}
}

#endif
