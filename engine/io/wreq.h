/* engine/io/wreq.h — the write request and the steps of the write path the
 * cleaner's relocation shares with engine_write: place (allocator plus the
 * checkpoint policy), send (data runs, then the journal entry), put extent
 * (describe it in a record), drop (blob descriptors).  Calls down only
 * (place/, log/journal, log/ckpt); the cleaner and io/write.c call it. */
#ifndef COIL_ENGINE_WREQ_H
#define COIL_ENGINE_WREQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coil.h"
#include "engine/log/journal.h"
#include "format/format.h"
#include "pool/pool.h"
#include "uring/uring.h"

struct coil_store;
struct coil_obj;
struct object;
struct blobd;

/* The largest single write.  A write is one journal record and must fit one
 * chunk: at max_blob 4 KiB, 16 MiB is 4096 raw extents = 197 KiB of record. */
#define ENGINE_WRITE_MAX (16u << 20)
/* Uncompressed writes up to this size are encoded (copied, checksummed) on
 * the caller's thread instead of the pool. */
#define ENGINE_RAW_INLINE_MAX (256u << 10)
/* Checkpoints a write that found no free segment, with emptied ones
 * pending, waits for before it fails with -ENOSPC (write.c). */
#define ENGINE_SPACE_CKPT_TRIES 3
#define ENGINE_WREQ_MAX 512u
/* Writes up to this size carry their blobs inline in the journal record
 * and complete without a data write (io/write.c, write_inline). */
#define ENGINE_INLINE_MAX (16u << 10)
/* A writer with more writes than this in flight on its handle has raw
 * whole-block writes placed in a segment rather than the journal
 * (write_inline_reserve). */
#define ENGINE_INLINE_DEPTH_MAX 8u
/* In-memory blob bytes at most (write_mem_cap), and the mark at which the
 * packer starts writing them to a segment (engine/pack.c). */
#define ENGINE_MEM_MAX (16u << 20)
#define ENGINE_PACK_AT (512u << 10)

struct wrun {
	struct uring_io io;
	struct wreq *w;
	uint32_t seg;
	bool seg_fresh;         /* its segment was opened for it (reused) */
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
	/* batch is the caller's buffer (raw aligned writes, write.c):
	 * written from, never written to nor freed */
	bool batch_borrowed;
	size_t batch_cap;
	size_t batch_len;       /* sum of the slots: an upper bound of the runs */
	int enc_rc;             /* encoding's result, kept while parked */
	bool space_pending;     /* -ENOSPC, but a checkpoint would free space */
	bool use_reserve;       /* a relocation may use the reserve */
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

int reqs_init(struct coil_store *s);
void reqs_destroy(struct coil_store *s);
/* Room for a @need-byte record in w->recbuf.  0 or -ENOMEM. */
int wreq_rec_room(struct wreq *w, size_t need);
/* Room for @n blobs in w's arrays.  0 or -ENOMEM. */
int wreq_reserve(struct wreq *w, uint32_t n);
/* Wait for a free write context (blocks unless on a coil thread). */
struct wreq *wreq_get(struct coil_store *s);
void wreq_put(struct coil_store *s, struct wreq *w);

/* Place w's encoded blobs (seg_place_write, with the checkpoint
 * reservation) and act on what the allocator reports: trigger the
 * checkpoint that frees PENDING segments, drop the cache's entries of
 * reused segments.  @keep: free bytes the write may not take (the
 * cleaner's reserve).  This call's report is ORed into *@rep, for the
 * caller's own policy (io/write.c kicks the cleaner).  @return 0,
 * -ENOSPC, -ENOMEM. */
int wreq_place(struct coil_store *s, struct wreq *w, uint64_t keep,
	       unsigned *rep);
/* Drop the blob descriptors w->bd[from..nblobs) (NULL entries allowed). */
void wreq_drop_blobs(struct wreq *w, uint32_t from);
/* Describe one extent of @fb into a journal record; @fe is scratch.
 * @inl: the blob's stored bytes, carried inline (FMT_BLOB_INLINE), or NULL.
 * @return 0 or -errno from the cursor. */
int wreq_put_extent(struct fmt_cursor *c, struct fmt_extent *fe,
		    uint64_t obj_off, uint32_t len, uint32_t skip,
		    const struct fmt_blob *fb, const uint8_t *inl);
/* Completion of one data run (the io's arg is its struct wrun). */
void wreq_run_done(struct uring_io *io, int res);
/* Submit w's placed runs (none: nothing), each completing through @cb,
 * which calls wreq_run_result. */
void wreq_submit_runs(struct coil_store *s, struct wreq *w,
		      void (*cb)(struct uring_io *io, int res));
/* A run's result (a short write is -EIO; the first error is kept in
 * w->io_status).  @return true for the last run of the write. */
bool wreq_run_result(struct wrun *r, int res);
/* Submit w's placed runs (if any), then ready its journal entry. */
void wreq_send(struct coil_store *s, struct wreq *w);
/* Free the arrays a context owns (not w->batch: whose it is varies). */
void wreq_free_arrays(struct wreq *w);

#endif
