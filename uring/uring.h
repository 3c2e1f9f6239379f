/* uring/uring.h — coil's single io_uring ring and the thread that drives it.
 *
 * All of coil's disk I/O goes through one ring owned by one thread (the "ring
 * thread").  Any thread posts I/O intents (struct uring_io, caller-owned) to a
 * bounded inbox; the ring thread batches them into SQEs, resubmits short
 * reads/writes, retries -EAGAIN/-EINTR, holds each fsync until the writes
 * submitted before it have completed, and calls io->cb on the ring thread.
 *
 * This module knows nothing of objects or extents.  Every function that can
 * fail returns >= 0 or a negative errno; bad arguments never abort.
 */
#ifndef COIL_URING_H
#define COIL_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct uring;

enum uring_op {
	URING_OP_READ = 1,
	URING_OP_WRITE,
	/* fdatasync: covers every write *completed* before it was issued.  The
	 * module holds an fsync until every write/discard submitted before it
	 * (inbox order) has completed, so it covers all of them. */
	URING_OP_FSYNC,
	/* fallocate(PUNCH_HOLE|KEEP_SIZE) on files, BLKDISCARD on block
	 * devices.  Ordered like a write with respect to a later fsync. */
	URING_OP_DISCARD,
	/* no I/O: just call cb on the ring thread (a way to run code there) */
	URING_OP_NOP,
	/* Start the page cache's writeback of [off, off + len) of the buffered
	 * descriptor (sync_file_range(SYNC_FILE_RANGE_WRITE), run by the
	 * kernel's io-wq): nothing becomes durable, a later FSYNC just finds
	 * less to write.  Not ordered against writes or fsyncs, and not seen
	 * by the fault seam (it changes nothing a power cut could lose).
	 * -EOPNOTSUPP without a buffered descriptor. */
	URING_OP_WRITEBACK,
	URING_OP_MAX_ /* number of op kinds + 1; not an op */
};

/* -EAGAIN/-EINTR completions (and writes that make no progress) are retried
 * this many times per io before the error reaches cb. */
#define URING_RETRY_MAX 8

/* io->flags (set by the caller; 0 is the normal case) */
enum uring_io_flags {
	/* do not retry -EAGAIN/-EINTR and do not resubmit a short result:
	 * complete with whatever the kernel returned (bytes done or -errno) */
	URING_IO_NORETRY = 1u << 0,
	/* READ/WRITE through a second, buffered descriptor on the same file
	 * (the page cache): no alignment rules, and a write completes once
	 * the kernel holds its bytes.  An fsync covers it (same file). */
	URING_IO_BUFFERED = 1u << 1,
};

/* One I/O.  Caller-owned, embedded in the caller's op context; the module
 * never allocates per I/O.  Fill the public fields (or use uring_io_prep),
 * then uring_submit().  The struct must stay valid and untouched until cb has
 * been called; cb may reuse or free it (or resubmit it) immediately. */
struct uring_io {
	uint8_t op;            /* enum uring_op */
	uint8_t flags;         /* enum uring_io_flags */
	void *buf;             /* READ/WRITE: data; ignored otherwise */
	uint64_t off;          /* READ/WRITE/DISCARD/WRITEBACK: byte offset */
	uint32_t len;          /* READ/WRITE/DISCARD/WRITEBACK: bytes (> 0) */
	/* res: len (after short-I/O resubmission), fewer bytes only for a read
	 * that reached EOF, 0 for fsync/discard/nop/writeback, or the original
	 * -errno of the failing attempt.  Runs on the ring thread; must not
	 * block.  It may call uring_submit (queued locally, issued on the next
	 * turn). */
	void (*cb)(struct uring_io *io, int res);
	void *arg;             /* the caller's; untouched */

	/* ---- private to uring/ (layout does not depend on build flags) ---- */
	struct uring_io *_next;
	struct uring_io *_prev;
	uint64_t _seq;         /* write/discard: acceptance order; fsync: barrier */
	uint32_t _done;        /* bytes completed so far */
	uint16_t _tries;       /* -EAGAIN/-EINTR retries so far */
	uint8_t _state;
	uint8_t _iflags;
	int32_t _inject;       /* fault seam: forced result of this attempt */
	uint32_t _sub_len;     /* bytes asked of the kernel in this attempt */
	void *_rec;            /* fault seam: power-loss record */
};

/* Fill the public fields and clear the private ones. */
static inline void uring_io_prep(struct uring_io *io, enum uring_op op,
				 void *buf, uint32_t len, uint64_t off,
				 void (*cb)(struct uring_io *, int), void *arg)
{
	*io = (struct uring_io){ .op = (uint8_t)op, .buf = buf, .len = len,
				 .off = off, .cb = cb, .arg = arg };
}

struct uring_opts {
	unsigned entries;   /* SQ size; 0 = 256.  CQ is 2x; in-flight ops are
			     * capped at the CQ size so the CQ cannot overflow */
	unsigned nbufs;     /* registered buffers; 0 = 64 */
	size_t buf_size;    /* bytes each, rounded up to the dio alignment;
			     * 0 = 65536 */
	unsigned inbox_max; /* bounded inbox capacity; 0 = 1024 */
	bool direct;        /* fd is O_DIRECT: uring_submit rejects a read or
			     * write whose buf, off or len is not a multiple of
			     * uring_dio_align() with -EINVAL (not the kernel) */
	/* Caller-owned memory to register as well (the engine's I/O
	 * buffer pools: page pinning was about 7 % of a 128 KiB sequential
	 * write's CPU), so reads and writes in it use
	 * READ/WRITE_FIXED and skip the per-I/O page pinning.  Each region
	 * must stay allocated until uring_destroy; at most URING_XREG_MAX
	 * regions, each page-aligned and <= 1 GiB.  Registration failure is
	 * not fatal (those ios fall back to plain READ/WRITE). */
	unsigned nxreg;
	struct { void *base; size_t len; } xreg[4];
};
#define URING_XREG_MAX 4u

/* uring_opts with every default filled in. */
void uring_opts_init(struct uring_opts *o);

/* Create a ring for fd (a regular file or block device, opened by the caller
 * and kept open until uring_destroy).  Registers fd as a fixed file,
 * allocates and registers the buffer pool, starts the ring thread (the ring
 * is created on it: SINGLE_ISSUER|COOP_TASKRUN|DEFER_TASKRUN, falling back
 * when the kernel says -EINVAL).  o may be NULL (defaults).
 * @return 0 and *out, or -EINVAL/-ENOMEM/the kernel's -errno. */
int uring_create(int fd, const struct uring_opts *o, struct uring **out);

/* Completes everything submitted (every cb is called), then joins the thread
 * and frees.  Call from a non-ring thread after producers have stopped
 * submitting.  NULL is ok. */
void uring_destroy(struct uring *r);

/* Post io.  Any thread.  Blocks while the inbox is full; from the ring
 * thread (inside a cb) it never blocks: the io is queued locally.
 * Order: ios are accepted in inbox order (per thread: program order), and
 * an fsync waits for the writes accepted before it; otherwise the kernel
 * runs and completes ios in any order, so two overlapping writes in flight
 * at once land in an unspecified order (wait for the first's cb). 
 * @return 0 (cb will be called exactly once), -EINVAL for a malformed io
 * (bad op, NULL cb, len 0, misaligned under direct; cb is NOT called), or
 * -ESHUTDOWN if uring_destroy has begun. */
int uring_submit(struct uring *r, struct uring_io *io);

/* A read, a URING_IO_BUFFERED write or an fsync, done now on the calling
 * thread (any thread but the ring's), with pread/pwrite/fdatasync on the
 * ring's descriptor (the direct one, or the buffered one): no thread
 * hand-off, for a caller that waits for the result anyway.  A write is
 * complete before the call returns, so an fsync posted afterwards covers
 * it; an fsync done here does NOT wait for writes in flight on the ring
 * (the caller must need only completed ones covered).  io->cb is never
 * called.  @return bytes (a read short only at EOF; 0 for an fsync), or
 * -errno; -EINVAL as uring_submit
 * (and for a direct write: those stay on the ring), -EOPNOTSUPP when the
 * I/O must go through uring_submit instead (no such descriptor, or, in
 * test builds, the fault seam armed: its faults and power cuts act on the
 * ring's I/O; unarmed it is counted as one). */
int uring_io_now(struct uring *r, struct uring_io *io);

/* Post n ios in order.  All are validated first: if any is malformed, none
 * is posted and -EINVAL is returned.  A batch that fits the inbox's free
 * space is posted under one lock; a larger one in parts (other producers'
 * ios may come between them, each producer's order is kept).  All or
 * nothing also across uring_destroy: once a part is posted the rest
 * follows.  @return 0 (every cb will be called) or -errno as uring_submit
 * (no cb will be). */
int uring_submit_many(struct uring *r, struct uring_io **ios, unsigned n);

/* Submit io (cb/arg are overwritten) and wait for it.  Not from the ring
 * thread (-EDEADLK).  @return the completion's res. */
int uring_run_sync(struct uring *r, struct uring_io *io);

/* A registered, dio-aligned buffer of uring_buf_size() bytes, or NULL when
 * none is free.  Any thread, lock-free, no malloc.  Valid until
 * uring_buf_put.  Reads/writes whose buf lies in a registered buffer use
 * READ_FIXED/WRITE_FIXED automatically. */
void *uring_buf_get(struct uring *r);
void uring_buf_put(struct uring *r, void *buf);
size_t uring_buf_size(struct uring *r);
/* true when [p, p+len) lies inside one registered buffer */
bool uring_buf_owns(struct uring *r, const void *p, size_t len);

bool uring_on_ring_thread(struct uring *r);

/* statx STATX_DIOALIGN (max of memory and offset alignment) where
 * available, else 4096.  Never 0. */
uint32_t uring_dio_align(struct uring *r);

struct uring_stats {
	uint64_t ops[URING_OP_MAX_];  /* completed to the caller, by op */
	uint64_t errors;              /* completions with res < 0 */
	uint64_t bytes_read;
	uint64_t bytes_written;
	uint64_t fixed_ios;           /* attempts using READ/WRITE_FIXED */
	uint64_t short_resubmits;     /* remainder attempts after short I/O */
	uint64_t eagain_retries;      /* -EAGAIN/-EINTR retries */
	uint64_t cq_overflows;        /* kernel CQ overflow count seen */
	uint64_t fsync_held;          /* fsyncs that waited for writes */
	uint64_t submit_calls;        /* io_uring_enter calls */
	uint64_t wakeups;             /* eventfd wakes consumed */
	uint64_t inbox_peak;          /* max inbox depth seen */
	uint64_t inbox_full_waits;    /* producers that blocked on a full inbox */
	uint64_t inflight_peak;       /* max ops in the kernel at once */
	uint64_t merge_ops;           /* vectored writes made by gathering */
	uint64_t merged_writes;       /* writes that went in one of them */
	uint64_t lazy_regs;           /* buffer slots registered on first use */
	uint64_t read_probes;         /* measurements of the two read pacings */
	uint64_t read_switches;       /* ... that changed the pacing */
	uint64_t read_single;         /* 1: reads go to the kernel one by one */
	uint32_t setup_flags;         /* IORING_SETUP_* the ring got */
	bool fixed_bufs;              /* buffer registration succeeded */
	bool fixed_file;              /* fd registration succeeded */
};

/* A snapshot; counters are updated by the ring thread, read relaxed. */
void uring_stats(struct uring *r, struct uring_stats *out);

/* Name of an op kind ("read", ...), for logs and stats. */
const char *uring_op_name(unsigned op);

#endif
