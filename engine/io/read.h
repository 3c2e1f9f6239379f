/* engine/io/read.h — the read path: plan the blobs and pieces of a read,
 * take them from the cache or the device (several blobs in one device read
 * when they lie together), decode, copy.
 *
 * Feedback loop: a demand may find its blob being prefetched and wait for
 * it (io/readahead.c); the prefetch, when it lands, resumes the read
 * (read_blob_resume).  Readahead also reuses the read's decode and I/O
 * result steps. */
#ifndef COIL_ENGINE_READ_H
#define COIL_ENGINE_READ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coil.h"
#include "engine/place/blob.h"
#include "format/format.h"
#include "pool/pool.h"
#include "uring/uring.h"

struct coil_store;
struct coil_obj;
struct cache_entry;

#define ENGINE_RREQ_MAX 512u

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
	bool io_owner;          /* io_base is this blob's to return: it leads
				 * a device read (others share its buffer) */
	/* win_end: with no write in flight in the blob's segment (checked
	 * under mlock when planned), every block of it before win_end is
	 * written and stays as it is until the segment is reused under a new
	 * generation (the end of a sealed segment, the head of the active
	 * one; 0: no such blocks), so the blob's device read may take a
	 * window of them into the cache (bcache_window).  win_off/win_len:
	 * the window a leading blob's read took (win_len 0: none); io_base:
	 * the buffer that read went into, win_off's byte */
	uint64_t win_end;
	uint32_t win_len;
	uint64_t win_off;
	uint8_t *io_base;
	int res;
	/* A device read may fetch several blobs lying together on the device
	 * (read.c, read_group_add): the first one's io reads them all, the others
	 * are chained here and point into its buffer. */
	struct rblob *io_next;
	struct uring_io io;
	struct fmt_blob fb;
	/* the blob's cache key is {b->dev_off, gen}; ce is the cache
	 * entry serving it (held until release); pf_next/pf_wait_ns link a
	 * demand waiting for the prefetch job fetching this blob */
	uint32_t gen;
	const struct cache_entry *ce;
	/* sce: a cache entry holding this blob's stored (compressed) bytes,
	 * its own or the one device block a packed small blob lies in: it
	 * is decoded from there instead of read from the device (bcache.c);
	 * sce_off is the device offset of sce->data[0] */
	const struct cache_entry *sce;
	uint64_t sce_off;
	/* mem: an in-memory blob's stored bytes (a small write not yet
	 * packed, FMT_BLOB_INLINE): served like a cache hit, the blob's
	 * reference keeping them */
	const uint8_t *mem;
	/* blk: a packed small blob whose device blocks the cache held
	 * (bcache.c): copied into iobuf as if just read, and verified by its
	 * decode like any device read */
	bool blk;
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
	/* coil_pread's waiting caller: when the last blob is in, the thread
	 * that brought it wakes the caller, who decodes and copies on its
	 * own thread (one hand-off per miss) */
	struct read_waiter *waiter;
	struct rreq *next_free;
};

/* The blob needs no device read: the cache holds it, decoded or stored. */
static inline bool read_blob_cached(const struct rblob *rb)
{
	return rb->ce || rb->sce || rb->mem || rb->blk;
}

/* The read wants all of @rb's blob, in one piece: it can be decoded
 * straight into the caller's buffer. */
static inline bool read_blob_whole(const struct rblob *rb)
{
	const struct rpiece *pc = &rb->r->pc[rb->piece];

	return rb->npieces == 1 && pc->skip == 0 &&
	       pc->len == rb->b->logical_len;
}

int engine_read(struct coil_obj *h, void *buf, size_t len, uint64_t off,
		coil_cb cb, void *arg);
/* coil_pread: the read completes on the calling thread.  A read the cache
 * serves is decoded and copied here with no other thread involved; a miss
 * costs one hand-off (the ring thread's completion wakes this thread,
 * which then decodes and copies).  @return bytes read or -errno. */
int64_t engine_pread(struct coil_obj *h, void *buf, size_t len,
		     uint64_t off);
/* a blob that waited for a prefetch continues (rb->ce or rb->res
 * set, or neither: its own ring read is issued now). */
void read_blob_resume(struct rblob *rb);
/* Shared with readahead.c: fill a DECODE task for blob @b read at @rd_off
 * into @iobuf, decoding into @dst; and decode @n such tasks on this thread
 * when the pool is saturated. */
void read_decode_task(struct coil_store *s, struct pool_task *t,
		      const struct fmt_blob *fb, const struct blobd *b,
		      const uint8_t *iobuf, uint64_t rd_off, uint8_t *dst);
void read_decode_inline(struct coil_store *s, struct pool_task *tasks,
			uint32_t n);
/* Shared with readahead.c: the result of a ring read of blob @b's
 * device bytes [rd_off, rd_off + rd_len) into @iobuf: @res's error, -EIO
 * for a short read or a raw sector's checksum mismatch, else 0. */
int read_io_result(struct coil_store *s, int res, const struct fmt_blob *fb,
		   const struct blobd *b, const uint8_t *iobuf,
		   uint64_t rd_off, uint32_t rd_len);

#endif
