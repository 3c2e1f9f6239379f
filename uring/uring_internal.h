/* uring/uring_internal.h — private state of the ring module.  Only the files of uring/
 * include this. */
#ifndef COIL_URING_INTERNAL_H
#define COIL_URING_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "common/common.h"
#include "uring/uring.h"

/* Completions reaped per turn, i.e. between two submits.  Small on purpose:
 * a completed slot is refilled after at most 8 callbacks instead of after
 * the whole backlog (our reading of why it helps: the device is kept fed
 * smoothly instead of in convoys; fio refills 1-4 at a time).  Measured on
 * the virtio disk here, 4 KiB randread QD32, 8 alternating pairs: a bound of
 * 8 beat 64 in 8/8 pairs, median +18% IOPS, at about the same CPU per I/O;
 * 4 was about equal to 8, 16 in between.  It also bounds the time between
 * inbox drains when the CQ is busy. */
#define URING_REAP_MAX 8
/* io_uring caps registered buffers at 16 Ki entries. */
#define URING_NBUFS_MAX 16384u
/* user_data of the armed eventfd read (an io is never at address 1) */
#define URING_UD_WAKE 1ull

/* io->_state */
enum { IO_IDLE = 0, IO_QUEUED, IO_HELD, IO_INFLIGHT };

/* io->_iflags (private) */
enum {
	IF_COUNTED = 1u << 0,  /* the seam has counted this op */
	IF_INJECT = 1u << 1,   /* this attempt's result is io->_inject */
	IF_QUIESCE = 1u << 2,  /* internal NOP held like an fsync, never
				* issued: completes once earlier writes are
				* done (the seam's cut uses it) */
	IF_KWRITE = 1u << 3,   /* this attempt is a write/discard in the
				* kernel (the seam waits for these) */
	IF_MERGED = 1u << 4,   /* a uring_merge's own io (never a caller's) */
	IF_NOMERGE = 1u << 5,  /* a write that came back from a merged write
				* that did not finish whole: retried alone */
};

/* Write gathering.  Writes queued close to each other (within
 * URING_MERGE_LOOK) that continue each other on the device (an append log's runs: coil places
 * concurrent writes one after another in the active segment) go to the
 * kernel as one vectored write, so the filesystem maps, allocates and
 * converts once per gather and the device sees one request instead of up
 * to URING_MERGE_MAX.  The group completes each member with its own length
 * (in queue order); a short, -EAGAIN or zero-progress result sends the
 * members not wholly written back one by one; an error fails them all. */
#define URING_MERGE_MAX 32u
#define URING_MERGE_BYTES (1u << 20)
#define URING_MERGE_SLOTS 16u
/* IORING_OP_WRITEV_FIXED (Linux 6.15): a vectored write whose iovecs lie
 * in one registered buffer (sqe->buf_index), so no page is pinned per
 * request.  liburing 2.3's headers predate it; the value is the kernel's
 * (uapi enum io_uring_op, append-only), and it is used only when the
 * ring's probe says the kernel supports it. */
#define URING_OP_WRITEV_FIXED_ 61
/* queued ios (from the head) searched for each continuation */
#define URING_MERGE_LOOK 64u

struct uring_merge {
	struct uring_io io;      /* what the kernel sees: WRITEV of iov[] */
	unsigned n;
	int reg;                 /* caller region (xreg) holding every
				  * member, or -1 */
	bool vfixed;             /* issued as WRITEV_FIXED */
	struct uring_merge *next_free;
	struct uring_io *m[URING_MERGE_MAX];
	struct iovec iov[URING_MERGE_MAX];
};

/* intrusive FIFO of ios linked by _next (singly) */
struct io_list {
	struct uring_io *head, *tail;
	unsigned n;
};

struct uring_fault;

/* ---- read pacing ----------------------------------------------------------
 *
 * How a turn's reads go to the kernel: all with the turn's one
 * io_uring_enter (a plugged batch, one device notification), or each with
 * its own as it is issued.  Which serves more reads a second is the
 * machine's: fio 4 KiB random reads at QD 32 through coil went from 46-51k
 * to 54-59k a second one by one on a virtual disk that serves bursts
 * slowly, and from 65-75k to 100-119k batched on another machine of the
 * same kind, whose disk keeps up and where each notification is a costly
 * exit to the host (a fifth of the ring thread's time).  So the ring
 * measures: while turns issue several reads, it spends RD_EPOCH_NS in each
 * pacing, twice, and keeps the one that completed more reads a second
 * (batched unless one by one is RD_MARGIN_PCT faster: it costs the ring
 * less CPU), then measures again RD_PERIOD_NS later.  A probe whose
 * epochs see too few such turns (the load changed) keeps the pacing it
 * had.  Ring thread only; rd_pace_turn is pure, so tests drive it with a
 * clock of their own. */
#define RD_EPOCH_NS (10ull * 1000 * 1000)
#define RD_PERIOD_NS (1000ull * 1000 * 1000)
#define RD_EPOCH_WAVES 16u  /* turns of 2+ reads an epoch must see */
#define RD_MARGIN_PCT 5u
enum { RD_BATCH = 0, RD_SINGLE = 1 };

struct rd_pace {
	uint8_t mode;           /* RD_BATCH or RD_SINGLE: what issue_local does */
	uint8_t best;           /* the last probe's pick */
	uint8_t phase;          /* 0: settled; 1-4: probe epochs S, B, S, B */
	uint64_t t0;            /* start of this epoch (probing) */
	uint64_t next_probe;    /* settled: no probe before */
	uint64_t reads, waves;  /* this epoch's completed reads, turns of 2+ */
	uint64_t got[2], ns[2]; /* the probe's reads and time per pacing */
	uint64_t probes, switches;
};

/* One turn: @now, @reads completed in it, whether it issued 2+ reads.
 * Updates @p->mode for the next turn. */
void rd_pace_turn(struct rd_pace *p, uint64_t now, uint64_t reads, bool wave);

/* counters, read relaxed by uring_stats(); mostly the ring thread's, but
 * uring_io_now counts from its caller's thread too */
#define STAT_ADD(r, field, v) \
	__atomic_fetch_add(&(r)->st.field, (v), __ATOMIC_RELAXED)

struct uring {
	struct io_uring ring;
	int fd;                  /* caller's; not closed here */
	int bfd;                 /* ours: the same file without O_DIRECT
				  * (URING_IO_BUFFERED), -1 if it failed */
	int efd;                 /* eventfd the producers write to wake us */
	uint64_t efd_val;        /* target of the armed eventfd read */
	bool efd_armed;
	bool is_blkdev;
	bool blk_discard_sync;   /* uring_cmd discard unsupported: ioctl */
	bool direct;
	uint32_t dio_align;
	unsigned entries;
	unsigned inflight_max;   /* < CQ size: the CQ cannot overflow */
	unsigned inflight;       /* ops in the kernel (not the eventfd read) */
	uint32_t koverflow_seen;

	/* registered buffer pool: one region, nbufs slices of buf_size */
	uint8_t *buf_base;
	size_t buf_size;
	unsigned nbufs;
	uint32_t *buf_next;      /* free-list links (index + 1, 0 = end) */
	_Atomic uint64_t buf_head; /* (tag << 32) | (index + 1); ABA-safe */
	/* caller regions registered after the pool (buffer index
	 * nbufs + i); xreg_ok once registration succeeded */
	unsigned nxreg;
	uint8_t *xreg_base[URING_XREG_MAX];
	size_t xreg_len[URING_XREG_MAX];
	bool xreg_ok;
	/* Where the kernel takes a sparse table, each slot (a pool slice, a
	 * caller region) is registered when an I/O first uses it (ring
	 * thread only): REG_* per slot, nbufs + nxreg of them.  Pinning all
	 * 24 MiB of a store's buffers at setup was 9.5-12 ms of a small
	 * store's 14 ms open, most of it for buffers such a store never
	 * uses.  NULL: everything was registered at setup. */
	uint8_t *reg_state;

	/* inbox: bounded MPSC ring of pointers under a mutex.  The ring
	 * thread takes the whole inbox per lock; producers hold the lock for
	 * one store, so contention stays short even with many producers. */
	pthread_mutex_t inbox_lock;
	pthread_cond_t inbox_cond;    /* producers wait here when full */
	struct uring_io **inbox;
	unsigned inbox_max;
	unsigned inbox_head;
	_Atomic unsigned inbox_count; /* written under inbox_lock */
	unsigned inbox_waiters;
	unsigned inbox_partial; /* producers with a batch part-posted */
	bool stopping;                /* under inbox_lock */
	/* Wake protocol (Dekker-style, both sides seq_cst): the ring thread
	 * stores sleeping=1 and then re-reads inbox_count before it sleeps; a
	 * producer stores inbox_count and then reads sleeping.  At least one
	 * of them sees the other, so a post is never stranded.  kicked keeps
	 * the eventfd to one write per sleep. */
	_Atomic int sleeping;
	_Atomic int kicked;

	/* ring thread only */
	pthread_t thread;
	struct io_list local;     /* accepted, waiting for an SQE */
	/* fsync barrier.  Writes (and discards) are numbered in acceptance
	 * order (_seq).  Accepting an fsync closes a "segment": the fsync
	 * takes the count of open writes accepted since the previous fsync
	 * (kept in its _done) and waits in `held` until its segment and every
	 * earlier one are empty.  A finishing write decrements the segment it
	 * belongs to.  O(1) per write unless fsyncs pile up. */
	struct io_list held;      /* fsyncs (and quiesce NOPs), barrier order */
	uint64_t write_seq;       /* last write sequence handed out */
	uint64_t last_barrier;    /* write_seq when the latest fsync came in */
	unsigned open_unattr;     /* open writes with _seq > last_barrier */
	unsigned local_turn;      /* per-turn issue bound */
	struct uring_merge merge[URING_MERGE_SLOTS];
	struct uring_merge *mfree;
	bool vfixed;              /* the kernel has WRITEV_FIXED */
	struct rd_pace pace;      /* read pacing (above) */
	uint64_t turn_reads;      /* reads completed this turn */
	unsigned turn_issued;     /* reads issued this turn */

	/* startup handshake with the ring thread */
	pthread_mutex_t start_lock;
	pthread_cond_t start_cond;
	int start_res;
	bool started;
	uint32_t setup_want;

	struct uring_stats st;

	struct uring_fault *fault; /* seam state; NULL in shipped builds */
};

/* uring_loop.c */
void *uring_thread_main(void *arg);
void uring_accept_local(struct uring *r, struct uring_io *io);

/* the seam's hooks (uring_fault.c; only with COIL_FAULT_SEAM) */
#ifdef COIL_FAULT_SEAM
enum { FAULT_PASS = 0, FAULT_INJECTED = 1 };
int fault_attach(struct uring *r);
void fault_detach(struct uring *r);
int fault_on_issue(struct uring *r, struct uring_io *io);
int fault_on_cqe(struct uring *r, struct uring_io *io, int res);
void fault_on_finish(struct uring *r, struct uring_io *io, int res);
void fault_poll(struct uring *r);
bool fault_on_now(struct uring *r, struct uring_io *io);
bool fault_busy(struct uring *r);
/* a spec is armed or a cut has begun: ios go to the kernel one by one */
bool fault_armed(struct uring *r);
#endif

#endif
