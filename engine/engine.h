/* engine/engine.h — the engine's private types, shared by the files of
 * engine/ (never by other modules).  See docs/architecture.md for the threads
 * and the write/read/flush/checkpoint/recovery paths.
 *
 * Locks, always taken in this order:
 *   s->mlock  metadata: object table, extent maps, segment table, allocator
 *   s->jlock  journal: tickets, the reorder ring, the commit cycle, flushes
 *   s->ckpt_mu one checkpoint at a time, superblock writes
 * Neither lock is ever held across I/O or a user callback.
 */
#ifndef COIL_ENGINE_H
#define COIL_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <zstd.h>

#include "coil.h"
#include "common/common.h"
#include "engine/blob.h"
#include "engine/cleaner.h"
#include "engine/extmap.h"
#include "format/format.h"
#include "pool/pool.h"
#include "uring/uring.h"

/* issue 8: cache/ and readahead types, used by pointer only */
struct cache;
struct cache_entry;
struct ra_stream;
struct ra_store;

#define STORE_MAGIC 0x4c494f43u      /* "COIL" */
#define STORE_MAGIC_DEAD 0x44414544u /* "DEAD" */
#define HANDLE_MAGIC 0x4a424f43u     /* "COBJ" */
#define HANDLE_MAGIC_DEAD 0x4a424f44u

/* The largest single write.  A write is one journal record and must fit one
 * chunk: at max_blob 4 KiB, 16 MiB is 4096 raw extents = 197 KiB of record. */
#define ENGINE_WRITE_MAX (16u << 20)
/* Uncompressed writes up to this size are encoded (copied, checksummed) on
 * the caller's thread instead of the pool. */
#define ENGINE_RAW_INLINE_MAX (256u << 10)
/* Largest object: offsets stay far from u64 overflow in every sum. */
#define ENGINE_OBJ_SIZE_MAX (1ull << 60)
/* Request contexts (writes, reads) made at open; the reorder ring of the
 * journal holds every ticket a write or metadata op can have outstanding. */
#define ENGINE_WREQ_MAX 512u
#define ENGINE_RREQ_MAX 512u
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
/* Checkpoints a write that found no free segment, with emptied ones
 * pending, waits for before it fails with -ENOSPC (write.c). */
#define ENGINE_SPACE_CKPT_TRIES 3
/* Checkpoint when the journal is this full (percent). */
#define ENGINE_CKPT_PERCENT 50u

enum seg_state {
	SEG_FREE = 0,
	SEG_ACTIVE = 1,   /* open for appending */
	SEG_SEALED = 2,   /* holds blobs; not appended to */
	SEG_PENDING = 3,  /* sealed, no live bytes: free after next checkpoint */
};

struct seg {
	uint64_t live;        /* logical bytes referenced by extent maps */
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

struct object {
	uint64_t id;
	uint64_t size;
	struct extmap map;
	char *name;
	uint16_t name_len;
	bool removed;
	uint32_t refs;         /* table link + handles + requests; under mlock */
	/* Writes and truncates of this object take their journal tickets in
	 * the order they were submitted (journal_turn); under jlock. */
	uint64_t turn_next;     /* the next submission's place */
	uint64_t turn_done;     /* places that have taken their ticket */
	uint32_t turn_waiters;  /* truncates waiting for their place */
	struct jent *turn_parked; /* encoded writes waiting for theirs */
	struct object *name_next;
	struct object *id_next;
};

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
	struct ra_stream *ra;      /* issue 8: readahead stream (readahead.c),
				    * NULL when prefetch or the cache is off */
};

/* One journal entry: a record waiting for its ticket's turn. */
struct jent {
	uint64_t ticket;
	uint8_t *rec;          /* encoded record (may be NULL: failed op) */
	uint32_t rec_len;
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
	uint8_t *chunk;         /* chunk_cap bytes, 4 KiB aligned */
	uint32_t chunk_len;     /* 0: nothing to write (a NOP carries it) */
	uint64_t chunk_lin;     /* linear journal offset of the chunk */
	uint64_t chunk_seq;
	struct uring_io jio;
	struct uring_io fio;
};

struct wrun {
	struct uring_io io;
	struct wreq *w;
	uint32_t seg;
};

struct wreq {
	struct jent je;
	struct coil_store *s;
	struct coil_obj *h;
	struct object *obj;
	const uint8_t *src;
	uint64_t off;
	uint64_t len;
	coil_cb cb;
	void *arg;
	uint32_t nblobs, cap_blobs;
	struct pool_req preq;
	struct pool_task *tasks;
	struct fmt_blob *fb;
	struct blobd **bd;
	uint32_t *slot;         /* each blob's slot offset in batch */
	uint8_t *batch;
	size_t batch_cap;
	size_t batch_len;       /* sum of the slots: an upper bound of the runs */
	int enc_rc;             /* encoding's result, kept while parked */
	bool space_pending;     /* -ENOSPC, but a checkpoint would free space */
	bool use_reserve;       /* issue 7: a relocation may use the reserve */
	uint64_t ckpt_res;      /* checkpoint bytes reserved at placement */
	struct wrun *runs;
	uint32_t nruns, cap_runs;
	_Atomic uint32_t runs_pending;
	_Atomic int io_status;
	uint8_t *recbuf;
	size_t rec_cap;
	uint64_t logical, stored;
	struct wreq *next_free;
};

struct rblob {
	struct blobd *b;
	struct rreq *r;
	uint32_t lo, hi;        /* logical bytes needed */
	uint64_t rd_off;
	uint32_t rd_len;
	uint8_t *iobuf;
	uint8_t *dec;           /* decoded logical bytes (zstd) */
	uint32_t npieces;       /* pieces of the read that use this blob */
	uint32_t piece;         /* index of its first piece */
	bool direct;            /* decoded straight into the caller's buffer */
	bool dec_value;         /* dec came from the cache's allocator: it may
				 * be handed to the cache (a bufpool fallback
				 * may not) */
	bool use_once;          /* a prefetched entry this read takes whole */
	bool io_owner;          /* iobuf is this blob's to return: it leads a
				 * device read (others may share its buffer) */
	int res;
	/* A device read may fetch several blobs lying together on the device
	 * (read.c, read_group_add): the first one's io reads them all, the others
	 * are chained here and point into its buffer. */
	struct rblob *io_next;
	struct uring_io io;
	struct fmt_blob fb;
	/* issue 8: the blob's cache key is {b->dev_off, gen}; ce is the cache
	 * entry serving it (held until release); pf_next/pf_wait_ns link a
	 * demand waiting for the prefetch job fetching this blob */
	uint32_t gen;
	const struct cache_entry *ce;
	struct rblob *pf_next;
	uint64_t pf_wait_ns;
};

struct rpiece {
	uint64_t dst;           /* offset in the caller's buffer */
	uint32_t blob;          /* index in rb[] */
	uint32_t skip;          /* logical offset in the blob */
	uint32_t len;
};

struct rreq {
	struct coil_store *s;
	struct coil_obj *h;
	uint8_t *dst;
	uint64_t off;
	uint64_t len;           /* bytes the read returns */
	coil_cb cb;
	void *arg;
	uint32_t nrb, cap_rb;
	struct rblob *rb;
	uint32_t npc, cap_pc;
	struct rpiece *pc;
	struct pool_task *tasks;
	uint32_t *task_blob;
	uint32_t ntasks, cap_tasks;
	struct pool_req preq;
	_Atomic uint32_t pending;
	int status;
	struct uring_io nop;
	struct rreq *next_free;
};

/* Fixed-size aligned buffers made at open (I/O buffers, decode scratch). */
struct bufpool {
	pthread_mutex_t mu;
	uint8_t *base;
	size_t size;            /* bytes each */
	uint32_t count;
	uint32_t nfree;
	uint8_t **free;
	_Atomic uint64_t misses; /* served by malloc because empty or too big */
	struct bufpool *large;   /* a second size class, tried next */
};

struct engine_stats {
	_Atomic uint64_t writes, write_bytes, write_errors;
	_Atomic uint64_t reads, read_bytes, read_errors;
	_Atomic uint64_t csum_failures;
	_Atomic uint64_t blobs_raw, blobs_zstd;
	_Atomic uint64_t enc_logical, enc_stored;
	_Atomic uint64_t dev_bytes_written, dev_bytes_read;
	_Atomic uint64_t flushes, fsyncs;
	_Atomic uint64_t reserve_fails; /* segments the file system refused */
	/* high-water marks of coil_flush calls waiting or in flight (bound:
	 * ENGINE_FLUSH_MAX) and of their fdatasyncs in flight (bound: 1) */
	_Atomic uint64_t flush_waiters_max, flush_fsyncs_inflight_max;
	_Atomic uint64_t chunks, chunk_bytes, records;
	_Atomic uint64_t chunks_overlapped; /* started with another in flight */
	/* encoded before a write submitted earlier to its object: waited for
	 * that one's ticket (journal_take_turn) */
	_Atomic uint64_t turn_waits;
	_Atomic uint64_t ckpts, ckpt_bytes, ckpt_ns_last, ckpt_failures;
	/* issue 7: how long a checkpoint's snapshot held mlock (writers'
	 * apply and every read wait that long) */
	_Atomic uint64_t ckpt_snap_ns_last, ckpt_snap_ns_max;
	_Atomic uint64_t ckpt_area_full; /* writes refused: checkpoint area full */
	_Atomic uint64_t journal_waits;
	_Atomic uint64_t replayed_chunks, replayed_records;
	_Atomic uint64_t inline_encodes, inline_decodes;
	_Atomic uint64_t read_splits;  /* joined reads that failed, read again
					* blob by blob (read.c) */
	_Atomic uint64_t prefetch_hints;
	_Atomic uint64_t ra_use_once;  /* prefetched entries dropped after a whole read */
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
	pthread_cond_t mcond;   /* truncate/remove/ticket waiters */
	struct object **by_name;
	struct object **by_id;
	uint32_t tab_cap;       /* buckets (power of two) */
	uint64_t nobj;
	uint64_t next_obj_id;
	/* What the next checkpoint's payload holds (ckpt_payload_bound): the
	 * maps' extents and checksums, the names; and what placed writes not
	 * yet applied may add to it (ckpt_reserved, released with their
	 * segments' inflight counts). */
	struct extmap_acct ext_acct;
	uint64_t name_bytes;
	uint64_t ckpt_reserved;
	struct seg *segs;
	uint32_t nseg;
	uint32_t active;        /* UINT32_MAX: none */
	uint64_t active_head;   /* next free byte, relative to the segment */
	uint32_t alloc_cursor;
	uint32_t free_segs;
	uint32_t nhandles;       /* open handles */
	uint64_t applied_end_lin;/* journal linear offset after the last applied chunk */
	uint64_t applied_next_seq;
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
	struct flushq *fq;       /* coil_flush's groups (flush.c) */
	struct jent *aq_first, *aq_last; /* chunk written, waiting to apply */
	bool draining, drain_again;
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
	uint64_t j_tail_lin;     /* replay point of the durable checkpoint */
	uint64_t j_next_seq;
	uint32_t nonwrite_out;   /* metadata ops holding tickets */

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
	/* ckpt_write's working memory, kept from one checkpoint to the next
	 * (ckpt_mu): allocated fresh each time, its pages were faulted in
	 * again each time, the snapshot's under mlock (ckpt.c) */
	struct ckpt_mem *ckmem;
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

	/* ---- issue 7: space management (engine/cleaner.c) ---- */
	struct cleaner *cl;     /* NULL: read-only, or not started */

	/* issue 8: decoded-blob cache (NULL: cache_bytes 0) and the
	 * store-wide readahead state (live streams, closed reports) */
	struct cache *cache;
	/* tests: bcache_value_alloc fails (the read falls back to bufpool);
	 * only the COIL_FAULT_SEAM build looks at it.  Not under the #ifdef
	 * itself, so every translation unit sees one layout. */
	atomic_bool fault_value_alloc;
	struct ra_store *ras;
};

/* ---- options.c ---- */
int engine_parse_compression(const char *spec, int *level);

/* ---- bufpool.c ---- */
int bufpool_init(struct bufpool *bp, size_t size, uint32_t count);
void bufpool_destroy(struct bufpool *bp);
/* An aligned buffer of at least @len bytes (pool when it fits, else
 * aligned malloc).  NULL on ENOMEM. */
void *bufpool_get(struct bufpool *bp, size_t len);
void bufpool_put(struct bufpool *bp, void *p);

/* ---- object.c ---- */
int objtab_init(struct coil_store *s);
void objtab_destroy(struct coil_store *s);
struct object *objtab_find_name(struct coil_store *s, const char *name,
				size_t len);
struct object *objtab_find_id(struct coil_store *s, uint64_t id);
/* Create and link an object (refs = 1 for the table).  -ENOMEM. */
int objtab_add(struct coil_store *s, uint64_t id, const char *name,
	       size_t len, struct object **out);
void objtab_unlink(struct coil_store *s, struct object *o);
void object_put(struct coil_store *s, struct object *o);
/* Extent-map drop callback: @arg is the store. */
void seg_drop_live(void *arg, struct blobd *b, uint32_t len);

/* ---- segment.c ---- */
uint32_t seg_of(const struct coil_store *s, uint64_t dev_off);
uint64_t seg_base(const struct coil_store *s, uint32_t idx);
void seg_maybe_pending(struct coil_store *s, uint32_t idx);
/* Place @nblobs encoded blobs; fills runs and blob dev_offs (mlock held by
 * the function).  @return 0, -ENOSPC, -ENOMEM. */
int seg_place_write(struct coil_store *s, struct wreq *w);
void seg_inflight_done(struct coil_store *s, struct wreq *w);
int seg_verify_accounting(struct coil_store *s, uint32_t *bad_seg);
/* dedupe: add each extent's logical bytes to @live[its segment] (nseg
 * entries, zeroed by the caller; mlock held) — the one recount the checks
 * share.  @return true if some extent ends past its object's size. */
bool seg_recount_live(struct coil_store *s, uint64_t *live);

/* ---- journal.c ---- */
int journal_init(struct coil_store *s);
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

/* ---- write.c / read.c ---- */
int engine_write(struct coil_obj *h, const void *buf, size_t len, uint64_t off,
		 coil_cb cb, void *arg);
int engine_read(struct coil_obj *h, void *buf, size_t len, uint64_t off,
		coil_cb cb, void *arg);
int reqs_init(struct coil_store *s);
void reqs_destroy(struct coil_store *s);
bool engine_on_coil_thread(struct coil_store *s);
/* Wait for a free write context (blocks unless on a coil thread). */
struct wreq *wreq_get(struct coil_store *s);
void wreq_put(struct coil_store *s, struct wreq *w);

/* ---- write.c: steps of the write path the cleaner's relocation shares
 * (dedupe: one copy of run completion, extent description, submission) ---- */
/* Drop the blob descriptors w->bd[from..nblobs) (NULL entries allowed). */
void wreq_drop_blobs(struct wreq *w, uint32_t from);
/* Describe one extent of @fb into a journal record; @fe is scratch.
 * @return 0 or -errno from the cursor. */
int wreq_put_extent(struct fmt_cursor *c, struct fmt_extent *fe,
		    uint64_t obj_off, uint32_t len, uint32_t skip,
		    const struct fmt_blob *fb);
/* Completion of one data run (the io's arg is its struct wrun). */
void wreq_run_done(struct uring_io *io, int res);
/* Submit w's placed runs (if any), then ready its journal entry. */
void wreq_send(struct coil_store *s, struct wreq *w);
/* Free the arrays a context owns (not w->batch: whose it is varies). */
void wreq_free_arrays(struct wreq *w);

/* ---- meta.c: apply records (live path and replay) ---- */
int meta_apply_write(struct coil_store *s, struct object *o, uint64_t off,
		     uint64_t len, const struct ext *ex, uint32_t n, bool remap);
int meta_apply_truncate(struct coil_store *s, struct object *o, uint64_t size);
void meta_apply_remove(struct coil_store *s, struct object *o);
/* Metadata ops through the journal (sync: they wait for the commit). */
int meta_create(struct coil_store *s, const char *name, size_t len,
		struct object **out);
int meta_remove(struct coil_store *s, struct object *o);
int meta_truncate(struct coil_store *s, struct object *o, uint64_t size);

/* ---- ckpt.c ---- */
int ckpt_write(struct coil_store *s, bool clean);
/* The payload the next checkpoint would write for the metadata as it is
 * now: ckpt_write's sizing, from running totals (mlock held). */
uint64_t ckpt_payload_now(const struct coil_store *s);
/* mlock held.  May @w's extents (each blob's extent, and a split at each
 * end) join the metadata and still fit the checkpoint area?  If so they
 * are reserved (w->ckpt_res, released by seg_inflight_done); if not,
 * -ENOSPC: a store whose metadata outgrew its checkpoint area could never
 * checkpoint again, its journal would fill and it would break. */
int ckpt_reserve_write(struct coil_store *s, struct wreq *w);
/* mlock held.  Room in the checkpoint area for one more object named with
 * @name_len bytes?  0 or -ENOSPC. */
int ckpt_room_for_object(const struct coil_store *s, size_t name_len);
void ckpt_mem_free(struct coil_store *s);
int ckpt_load(struct coil_store *s);
int ckpt_thread_start(struct coil_store *s);
void ckpt_thread_stop(struct coil_store *s);
void ckpt_trigger(struct coil_store *s);
/* Trigger a checkpoint and wait until one that began after this call has
 * finished.  Not from the ring thread.  @return 0 or -ESHUTDOWN. */
int ckpt_wait(struct coil_store *s);
int replay_journal(struct coil_store *s);
int super_write(struct coil_store *s, bool clean);

/* ---- store.c / api.c ---- */
bool store_valid(struct coil_store *s);
int coil_sync_internal(struct coil_store *s);

/* ---- stats.c ---- */
int engine_stats_json(struct coil_store *s, char *buf, size_t len);

/* ---- issue 8: decoded-blob cache (rcache.c) and readahead (readahead.c);
 * docs/readahead.md ---- */
int bcache_init(struct coil_store *s);
void bcache_destroy(struct coil_store *s);
/* Cache lookup for a demand blob: sets rb->ce.  @return 1 hit, 0 miss. */
int bcache_lookup(struct coil_store *s, struct rblob *rb);
/* A buffer to decode a blob into (cache_alloc_value); NULL if no cache. */
void *bcache_value_alloc(struct coil_store *s, uint32_t len);
/* Insert rb->dec (from bcache_value_alloc, decoded): on success the cache
 * owns it (rb->dec = NULL) and rb->ce serves the read. */
void bcache_publish(struct coil_store *s, struct rblob *rb);
void bcache_release(struct coil_store *s, struct rblob *rb);
/* An extent of @b (of @len bytes, in a segment of generation @gen) is
 * dropped: if it was the blob's last reference, drop its entry early. */
void bcache_drop_blob(struct coil_store *s, const struct blobd *b,
		      uint32_t len, uint32_t gen);
/* A segment is reused: drop its old entries early (memory only; keys with
 * the old generation can never be looked up again). */
void bcache_invalidate_seg(struct coil_store *s, uint32_t idx);
int bcache_stats_json(struct coil_store *s, char *buf, size_t len);
int readahead_store_init(struct coil_store *s);
void readahead_store_destroy(struct coil_store *s);
int readahead_open(struct coil_obj *h);
/* Cancels, waits for the stream's prefetch I/O, merges its report. */
void readahead_close(struct coil_obj *h);
/* Demand for blob @rb of read @r.  @return 0 read it; 1 it waits for a
 * prefetch (read_blob_resume follows); 2 settled (rb->ce, or rb->res). */
int readahead_demand(struct coil_obj *h, struct rreq *r, struct rblob *rb);
/* The read of [off, off+len) was submitted; the handle's rd_bytes do not
 * count it yet (they are its other reads in flight). */
void readahead_on_read(struct coil_obj *h, uint64_t off, uint64_t len);
void readahead_on_write(struct coil_obj *h, uint64_t off, uint64_t len);
void readahead_on_truncate(struct coil_obj *h, uint64_t size);
int readahead_hint(struct coil_obj *h, uint64_t off, uint64_t len);
int readahead_stats_json(struct coil_store *s, char *buf, size_t len);
/* read.c: engine_read for the synchronous wrapper: a read with nothing
 * left to wait for (cache hits, holes) completes inside the call. */
int engine_read_inline(struct coil_obj *h, void *buf, size_t len,
		       uint64_t off, coil_cb cb, void *arg);
/* read.c: a blob that waited for a prefetch continues (rb->ce or rb->res
 * set, or neither: its own ring read is issued now). */
void read_blob_resume(struct rblob *rb);
/* read.c, shared with readahead.c (dedupe): fill a DECODE task for blob @b
 * read at @rd_off into @iobuf, decoding into @dst; and decode @n such tasks
 * on this thread when the pool is saturated. */
/* The read wants all of @rb's blob, in one piece: it can be decoded
 * straight into the caller's buffer. */
bool read_blob_whole(const struct rblob *rb);
void read_decode_task(struct pool_task *t, const struct fmt_blob *fb,
		      const struct blobd *b, const uint8_t *iobuf,
		      uint64_t rd_off, uint8_t *dst);
void read_decode_inline(struct coil_store *s, struct pool_task *tasks,
			uint32_t n);
/* read.c, shared with readahead.c: the result of a ring read of blob @b's
 * device bytes [rd_off, rd_off + rd_len) into @iobuf: @res's error, -EIO
 * for a short read or a raw sector's checksum mismatch, else 0. */
int read_io_result(struct coil_store *s, int res, const struct fmt_blob *fb,
		   const struct blobd *b, const uint8_t *iobuf,
		   uint64_t rd_off, uint32_t rd_len);

/* ---- util ---- */
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

/* dedupe: the store is broken by @err unless an earlier error already
 * broke it (the first one is what later writes fail with). */
static inline void store_break(struct coil_store *s, int err)
{
	int zero = 0;

	atomic_compare_exchange_strong(&s->broken, &zero, err);
}

/* An operation counted in ops_inflight finished (after its callback). */
static inline void ops_done(struct coil_store *s)
{
	if (atomic_fetch_sub(&s->ops_inflight, 1) == 1) {
		pthread_mutex_lock(&s->rq_mu);
		pthread_cond_broadcast(&s->rq_cond);
		pthread_mutex_unlock(&s->rq_mu);
	}
}

int store_io_sync(struct coil_store *s, int op, void *buf, uint32_t len,
		  uint64_t off);

#endif
