/* engine/io/read.c — the read path.
 *
 *   coil_read (caller)     under mlock: map [off, off+len) to holes and
 *                          pieces of blobs (a blob read once however many
 *                          pieces of it are wanted); take blob references;
 *                          zero the holes; one ring read per run of blobs
 *                          lying together on the device (read_group_add)
 *   read_io_done (ring)    raw blobs: verify just the 4 KiB sectors read
 *   read_all_done          compressed blobs: decoded on this thread when
 *                          the read is small and alone or a coil_pread
 *                          caller finishes it (read_decode_here), else one
 *                          pool request of DECODE tasks, never blocking
 *                          (POOL_NONBLOCK; when the pool is saturated the
 *                          ring thread decodes itself, counted in stats,
 *                          rather than stall or requeue)
 *   read_finish            keep small blobs, copy the pieces, release,
 *                          call back
 *
 * coil_pread (engine_pread) waits on its own thread; the thread that brings
 * a small read's last blob wakes it, and it decodes and copies there: a
 * cache hit involves no other thread, a miss one hand-off.
 *
 * A raw blob read touches only the sectors asked for.  Any checksum or
 * device failure makes the whole read -EIO; no byte of a failed blob is ever
 * copied out, and nothing of a failed read is kept in the cache.
 *
 * The decoded-blob cache and readahead (io/bcache.c, io/readahead.c):
 * each blob is looked up in the cache (key: dev_off + its segment's gen)
 * before any I/O, decoded or, for a small page, stored (then decoded from
 * the cache's bytes); a miss whose unit a prefetch has queued or in flight
 * waits for that job (no thread blocks: read_blob_resume continues it) or
 * takes its retained failure; otherwise it is read here.  A compressed blob
 * the read wants whole is decoded straight into the caller's buffer (a
 * small one's stored bytes are then kept, bcache_keep_small), a blob wanted
 * in part into a cache value that is inserted. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "cache/cache.h"
#include "engine/io/bcache.h"
#include "engine/io/read.h"
#include "engine/io/readahead.h"
#include "engine/io/zctx.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/extmap.h"
#include "engine/place/segment.h"
#include "engine/place/object.h"
#include "engine/store.h"

static struct rreq *rreq_get(struct coil_store *s)
{
	struct rreq *r;
	bool coil = engine_on_coil_thread(s);

	pthread_mutex_lock(&s->rq_mu);
	while (!s->rfree) {
		if (coil) {
			pthread_mutex_unlock(&s->rq_mu);
			return NULL;
		}
		pthread_cond_wait(&s->rq_cond, &s->rq_mu);
	}
	r = s->rfree;
	s->rfree = r->next_free;
	pthread_mutex_unlock(&s->rq_mu);
	return r;
}

static void rreq_put(struct coil_store *s, struct rreq *r)
{
	if (r->cap_rb > 64) {
		free(r->rb);
		r->rb = NULL;
		r->cap_rb = 0;
	}
	if (r->cap_pc > 256) {
		free(r->pc);
		r->pc = NULL;
		r->cap_pc = 0;
	}
	if (r->cap_tasks > 64) {
		free(r->tasks);
		free(r->task_blob);
		r->tasks = NULL;
		r->task_blob = NULL;
		r->cap_tasks = 0;
	}
	pthread_mutex_lock(&s->rq_mu);
	r->next_free = s->rfree;
	s->rfree = r;
	pthread_cond_broadcast(&s->rq_cond);
	pthread_mutex_unlock(&s->rq_mu);
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
	uint32_t ncap;
	void *np;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 8;
	while (ncap < need)
		ncap *= 2;
	np = realloc(*p, (size_t)ncap * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

static void read_release(struct coil_store *s, struct rreq *r)
{
	for (uint32_t i = 0; i < r->nrb; i++) {
		struct rblob *rb = &r->rb[i];
		if (rb->io_owner)
			bufpool_put(&s->bp, rb->io_base);
		bufpool_put(&s->bp, rb->dec); /* not pooled: freed */
		rb->iobuf = rb->dec = rb->io_base = NULL;
		rb->io_owner = false;
		rb->win_len = 0;
		rb->blk = false;
		bcache_release(s, rb);
		bcache_put_stored(s, rb);
		if (!rb->mem)
			COUNT_SUB(&s->segs[seg_of(s, rb->b->dev_off)].readers,
				  1);
		rb->mem = NULL;
		blobd_unref(rb->b);
		rb->b = NULL;
	}
	r->nrb = 0;
	r->npc = 0;
}

static void read_finish(struct rreq *r)
{
	struct coil_store *s = r->s;
	coil_cb cb = r->cb;
	void *arg = r->arg;
	int64_t ret;
	struct coil_obj *h = r->h;
	int status = r->status;

	COIL_ASSERT(status <= 0);
	COIL_ASSERT(r->npc <= r->cap_pc && r->nrb <= r->cap_rb);
	for (uint32_t i = 0; status == 0 && i < r->nrb; i++)
		if (r->rb[i].res < 0)
			status = r->rb[i].res;
	if (status == 0) {
		/* every blob verified and decoded: the small ones just read
		 * from the device are kept for the next reader */
		for (uint32_t i = 0; i < r->nrb; i++) {
			bcache_keep_small(s, &r->rb[i]);
			bcache_keep_window(s, &r->rb[i]);
		}
		for (uint32_t i = 0; i < r->npc; i++) {
			struct rpiece *pc = &r->pc[i];
			struct rblob *rb = &r->rb[pc->blob];
			const uint8_t *src;

			if (rb->ce)
				src = rb->ce->data + pc->skip;
			else if (rb->mem && rb->b->codec == FMT_CODEC_RAW)
				src = rb->mem + pc->skip;
			else if (rb->b->codec == FMT_CODEC_RAW)
				src = rb->iobuf + (rb->b->dev_off - rb->rd_off) +
				      pc->skip;
			else if (rb->direct)
				continue; /* decoded in place */
			else
				src = rb->dec + pc->skip;
			memcpy(r->dst + pc->dst, src, pc->len);
		}
	}
	ret = status < 0 ? status : (int64_t)r->len;
	if (status < 0) {
		stat_add(&s->st.read_errors, 1);
	} else {
		stat_add(&s->st.reads, 1);
		stat_add(&s->st.read_bytes, r->len);
	}
	COUNT_SUB(&h->rd_bytes, r->len);
	read_release(s, r);
	rreq_put(s, r);
	COUNT_SUB(&h->inflight, 1);
	if (cb)
		cb(arg, ret);
	ops_done(s);
}

static void read_decoded(struct pool_req *preq, void *arg)
{
	struct rreq *r = arg;

	(void)preq;
	for (uint32_t i = 0; i < r->ntasks; i++) {
		struct rblob *rb = &r->rb[r->task_blob[i]];
		if (r->tasks[i].result < 0) {
			rb->res = -EIO;
			stat_add(&r->s->st.csum_failures, 1);
		} else if (rb->dec && rb->dec_value) {
			/* a bufpool fallback is never the cache's to free */
			bcache_publish(r->s, rb);
		}
	}
	read_finish(r);
}

/* ---- decode steps shared with readahead.c -------------------------------- */

/* The read wants all of this blob, in one piece (engine.h). */
void read_decode_task(struct coil_store *s, struct pool_task *t,
		      const struct fmt_blob *fb, const struct blobd *b,
		      const uint8_t *iobuf, uint64_t rd_off, uint8_t *dst)
{
	memset(t, 0, sizeof(*t));
	t->kind = POOL_TASK_DECODE_BLOB;
	t->u.decode.blob = fb;
	/* NULL for a dictionary that did not load: the decode is -EIO */
	t->u.decode.ddict = dict_ddict(s, fb->dict_id);
	t->u.decode.stored = iobuf + (b->dev_off - rd_off);
	t->u.decode.stored_len = b->stored_len;
	t->u.decode.dst = dst;
	t->u.decode.dst_cap = b->logical_len;
}

void read_decode_inline(struct coil_store *s, struct pool_task *tasks,
			uint32_t n)
{
	/* Bounded work, and it keeps the ring thread from ever waiting on
	 * the pool.  Counted per blob, like the pool's tasks_run. */
	stat_add(&s->st.inline_decodes, n);
	pthread_mutex_lock(&s->zmu);
	for (uint32_t i = 0; i < n; i++) {
		struct pool_task *t = &tasks[i];
		t->result = fmt_blob_decode(s->zd, t->u.decode.ddict,
					    t->u.decode.blob,
					    t->u.decode.stored,
					    t->u.decode.stored_len,
					    t->u.decode.dst,
					    t->u.decode.dst_cap);
	}
	pthread_mutex_unlock(&s->zmu);
}

int read_io_result(struct coil_store *s, int res, const struct fmt_blob *fb,
		   const struct blobd *b, const uint8_t *iobuf,
		   uint64_t rd_off, uint32_t rd_len)
{
	if (res >= 0 && (uint32_t)res != rd_len)
		res = -EIO;
	if (res < 0)
		return res;
	if (b->codec == FMT_CODEC_RAW) {
		/* Raw sectors are checked here (the decoder checks the
		 * others): those read, from the first one in the buffer.  A
		 * blob shorter than a block may start anywhere (packed): the
		 * read covers it whole, from before its start. */
		uint64_t first = rd_off > b->dev_off ?
				 (rd_off - b->dev_off) / FMT_BLOCK : 0;
		uint64_t skip = rd_off < b->dev_off ? b->dev_off - rd_off : 0;
		uint64_t have = COIL_MIN((uint64_t)rd_len - skip,
					 b->logical_len - first * FMT_BLOCK);
		if (fmt_blob_verify_sectors(fb, (uint32_t)first, iobuf + skip,
					    have) < 0) {
			stat_add(&s->st.csum_failures, 1);
			return -EIO;
		}
	}
	return 0;
}

/* Decoded by the thread that finds the blobs ready rather than handed to
 * the pool, up to this many logical bytes per read: one default blob.  A
 * hand-off costs two thread wake-ups (tens of microseconds on a virtual
 * machine), more than decoding a 4-16 KiB page (a few), and the pool gains
 * nothing from splitting one blob.  A read of several large blobs still
 * spreads them over the workers. */
#define READ_LOCAL_DECODE_MAX (64u << 10)

/* The blob still has to be decoded: compressed, read without error, not
 * served decoded by the cache, not already decoded into the caller's
 * buffer by the prefetch it waited for. */
static bool read_blob_to_decode(const struct rblob *rb)
{
	return rb->res == 0 && rb->b->codec != FMT_CODEC_RAW && !rb->ce &&
	       !rb->direct;
}

/* @return blobs of @r to decode; *@bytes (if not NULL) their logical bytes. */
static uint32_t read_decode_need(const struct rreq *r, uint64_t *bytes)
{
	uint32_t n = 0;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < r->nrb; i++) {
		if (!read_blob_to_decode(&r->rb[i]))
			continue;
		n++;
		sum += r->rb[i].b->logical_len;
	}
	if (bytes)
		*bytes = sum;
	return n;
}

/* Decode on this thread: a coil_pread caller finishing its own read, or a
 * read alone in the store (queue depth 1), with little to decode. */
static bool read_decode_here(const struct rreq *r)
{
	uint64_t bytes;

	read_decode_need(r, &bytes);
	if (bytes > READ_LOCAL_DECODE_MAX)
		return false;
	return r->waiter || atomic_load(&r->s->ops_inflight) <= 1;
}

static void read_decode_local(struct coil_store *s, struct pool_task *tasks,
			      uint32_t n)
{
	ZSTD_DCtx *d = zctx_thread_d();

	if (!d) { /* no context of our own: the store's, under its lock */
		read_decode_inline(s, tasks, n);
		return;
	}
	stat_add(&s->st.rd_local_decodes, n);
	for (uint32_t i = 0; i < n; i++) {
		struct pool_task *t = &tasks[i];

		t->result = fmt_blob_decode(d, t->u.decode.ddict,
					    t->u.decode.blob,
					    t->u.decode.stored,
					    t->u.decode.stored_len,
					    t->u.decode.dst,
					    t->u.decode.dst_cap);
	}
}

static void read_all_done(struct rreq *r)
{
	struct coil_store *s = r->s;
	uint32_t n = 0;
	int rc;

	/* rb->direct already set here: the prefetch job this read waited
	 * for decoded the blob straight into the caller's buffer. */
	n = read_decode_need(r, NULL);
	if (n == 0 || r->status) {
		read_finish(r);
		return;
	}
	if (n > r->cap_tasks) {
		struct pool_task *t = realloc(r->tasks, n * sizeof(*t));
		uint32_t *tb;

		if (t)
			r->tasks = t;
		tb = realloc(r->task_blob, n * sizeof(*tb));
		if (tb)
			r->task_blob = tb;
		if (!t || !tb) {
			r->status = -ENOMEM;
			read_finish(r);
			return;
		}
		r->cap_tasks = n;
	}
	r->ntasks = 0;
	for (uint32_t i = 0; i < r->nrb; i++) {
		struct rblob *rb = &r->rb[i];
		struct pool_task *t;

		if (!read_blob_to_decode(rb))
			continue;
		/* A blob the caller wants whole is decoded straight into its
		 * buffer, cache or not: no value to allocate (and fault in),
		 * no copy, and a scan of whole blobs does not push the cache's
		 * other entries out.  A blob wanted in part is decoded into a
		 * cache value (inserted after the decode) and copied out, so
		 * the next read of its other bytes costs no I/O. */
		rb->direct = read_blob_whole(rb);
		if (!rb->direct)
			rb->dec = bcache_value_alloc(s, rb->b->logical_len);
		rb->dec_value = rb->dec != NULL;
		if (!rb->direct && !rb->dec)
			rb->dec = bufpool_get(&s->bp, rb->b->logical_len);
		if (!rb->direct && !rb->dec) {
			rb->res = -ENOMEM;
			continue;
		}
		t = &r->tasks[r->ntasks];
		/* Direct: the caller wants this whole blob: decode straight
		 * into its buffer (the decoder never returns wrong bytes,
		 * only -EIO, which fails the whole read). */
		if (rb->sce || rb->mem) /* stored bytes in the cache, memory */
			read_decode_task(s, t, &rb->fb, rb->b,
					 rb->sce ? rb->sce->data : rb->mem,
					 rb->sce ? rb->sce_off : rb->b->dev_off,
					 rb->direct ?
					 r->dst + r->pc[rb->piece].dst : rb->dec);
		else
			read_decode_task(s, t, &rb->fb, rb->b, rb->iobuf,
					 rb->rd_off, rb->direct ?
					 r->dst + r->pc[rb->piece].dst : rb->dec);
		r->task_blob[r->ntasks++] = i;
	}
	if (r->ntasks == 0) {
		read_finish(r);
		return;
	}
	if (read_decode_here(r)) {
		read_decode_local(s, r->tasks, r->ntasks);
		read_decoded(&r->preq, r);
		return;
	}
	rc = pool_submit(s->pool, &r->preq, r->tasks, r->ntasks, read_decoded,
			 r, POOL_NONBLOCK);
	if (rc == 0)
		return;
	/* Saturated (or shutting down): decode here. */
	read_decode_inline(s, r->tasks, r->ntasks);
	read_decoded(&r->preq, r);
}

/* A coil_pread caller waiting for its read (engine_pread). */
struct read_waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rreq *r;
	int64_t res;
	bool ready;     /* every blob is in: the caller finishes the read */
	bool done;      /* the read finished: res is its result */
};

static void read_waiter_wake(struct read_waiter *w, bool done, int64_t res)
{
	pthread_mutex_lock(&w->mu);
	if (done) {
		w->done = true;
		w->res = res;
	} else {
		w->ready = true;
	}
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* @n blobs of @r are in.  The last one finishes the read here, or, when a
 * coil_pread caller waits and the rest is small, wakes that caller to
 * decode and copy on its own thread: the only hand-off of a miss. */
static void read_pending_put(struct rreq *r, uint32_t n)
{
	if (atomic_fetch_sub(&r->pending, n) != n)
		return;
	if (r->waiter && read_decode_here(r)) {
		read_waiter_wake(r->waiter, false, 0);
		return;
	}
	read_all_done(r);
}

static void read_group_split(struct coil_store *s, struct rblob *lead);

/* The blob leading a device read and those chained on its io_next
 * (read_group_add) are done with @res (the read's length, or -errno): each
 * is checked on its own bytes. */
static void read_group_done(struct rblob *lead, int res)
{
	struct rreq *r = lead->r;
	uint32_t n = 0;

	for (struct rblob *rb = lead; rb; rb = rb->io_next, n++) {
		int rr = read_io_result(r->s, res < 0 ? res : (int)rb->rd_len,
					&rb->fb, rb->b, rb->iobuf, rb->rd_off,
					rb->rd_len);

		if (rr < 0)
			rb->res = rr;
	}
	read_pending_put(r, n);
}

static void read_io_done(struct uring_io *io, int res)
{
	struct rblob *lead = io->arg;

	if (res >= 0 && (uint32_t)res != io->len)
		res = -EIO;
	if (res < 0 && (lead->io_next || lead->win_len)) {
		read_group_split(lead->r->s, lead);
		return;
	}
	if (res >= 0)
		stat_add(&lead->r->s->st.dev_bytes_read, io->len);
	read_group_done(lead, res);
}

/* A joined read failed: read its blobs again one by one, into the same
 * buffer, so that an error in bytes nobody asked for (a dead stretch read
 * through, or a blob of another request's range) fails only the blobs that
 * hold it.  Each completes on its own (read_io_done with no chain). */
static void read_group_split(struct coil_store *s, struct rblob *lead)
{
	struct rblob *rb = lead, *next;

	stat_add(&s->st.read_splits, 1);
	lead->win_len = 0; /* what the failed read brought is not kept */
	for (; rb; rb = next) {
		int rc;

		next = rb->io_next;
		rb->io_next = NULL;
		uring_io_prep(&rb->io, URING_OP_READ, rb->iobuf, rb->rd_len,
			      rb->rd_off, read_io_done, rb);
		rc = uring_submit(s->ring, &rb->io);
		if (rc < 0)
			read_io_done(&rb->io, rc);
	}
}

/* The coil_pread waiter of this thread while it plans its read. */
static _Thread_local const struct read_waiter *tls_pread;

/* Start the device read of @lead and the blobs chained on it, which lie in
 * [lead->rd_off, end).  A coil_pread caller planning its own read does it
 * right here (uring_io_now): it waits for it anyway, and through the ring
 * the read costs two thread wake-ups, the ring thread's and then the
 * caller's (docs/readahead.md). */
static void read_group_submit(struct coil_store *s, struct rblob *lead,
			      uint64_t end)
{
	uint64_t wa = lead->rd_off, wz = end;
	uint32_t len;
	uint8_t *buf;
	int rc;

	/* a miss while the cache has room takes the blocks around it */
	bcache_window(s, lead, &wa, &wz);
	len = (uint32_t)(wz - wa);
	buf = bufpool_get(&s->bp, len);
	if (!buf && len != end - lead->rd_off) {
		wa = lead->rd_off; /* no buffer that large: just the blobs */
		len = (uint32_t)(end - wa);
		buf = bufpool_get(&s->bp, len);
	}
	if (!buf) {
		read_group_done(lead, -ENOMEM); /* no buffer to split into */
		return;
	}
	uring_io_prep(&lead->io, URING_OP_READ, buf, len, wa, read_io_done,
		      lead);
	lead->io_owner = true;
	lead->io_base = buf;
	lead->win_off = wa;
	lead->win_len = len == end - lead->rd_off ? 0 : len;
	if (lead->win_len)
		stat_add(&s->st.rd_windows, 1);
	for (struct rblob *rb = lead; rb; rb = rb->io_next)
		rb->iobuf = buf + (rb->rd_off - wa);
	if (lead->r->waiter && lead->r->waiter == tls_pread) {
		rc = uring_io_now(s->ring, &lead->io);
		if (rc != -EOPNOTSUPP) {
			stat_add(&s->st.rd_now, 1);
			read_io_done(&lead->io, rc);
			return;
		}
	}
	rc = uring_submit(s->ring, &lead->io);
	if (rc < 0)
		read_io_done(&lead->io, rc);
}

static void read_nop_done(struct uring_io *io, int res)
{
	struct rreq *r = io->arg;

	(void)res;
	read_all_done(r);
}

void read_blob_resume(struct rblob *rb)
{
	struct rreq *r = rb->r;

	if (rb->res == 0 && !rb->ce && !rb->sce && !rb->blk && !rb->direct) {
		/* the prefetch did not bring it (evicted, no memory, or a
		 * different blob by now): read it ourselves (rb->direct: the
		 * job decoded it into the caller's buffer); it never joined
		 * a group, so its io_next is NULL */
		read_group_submit(r->s, rb, rb->rd_off + rb->rd_len);
		return;
	}
	read_pending_put(r, 1);
}

/* Blobs of one read that lie together on the device are fetched by one
 * device read: a request costs this device about as much as 14 KiB of
 * transfer, and the CPU (here a virtio kick, a VM exit) about as much as
 * decoding 20 KiB.  Read in order, a request's blobs were written in order
 * and sit side by side (compressed ones share the 4 KiB blocks between
 * them); a dead stretch up to READ_JOIN_GAP is read through rather than
 * split on; a read stays within one large buffer. */
#define READ_JOIN_GAP (16u << 10)
#define READ_JOIN_MAX (1u << 20)

struct rgroup {
	struct rblob *lead, *tail;
	uint64_t end;
};

/* Add @rb (NULL: no more) to the open group or start a new one; a group
 * that cannot take @rb is submitted.  @return device reads started. */
static uint32_t read_group_add(struct coil_store *s, struct rgroup *g,
			       struct rblob *rb)
{
	uint32_t started = 0;

	if (g->lead && rb && rb->rd_off >= g->lead->rd_off &&
	    rb->rd_off <= g->end + READ_JOIN_GAP &&
	    COIL_MAX(g->end, rb->rd_off + rb->rd_len) - g->lead->rd_off <=
		    READ_JOIN_MAX) {
		g->tail->io_next = rb;
		g->tail = rb;
		g->end = COIL_MAX(g->end, rb->rd_off + rb->rd_len);
		return 0;
	}
	if (g->lead) {
		read_group_submit(s, g->lead, g->end);
		started = 1;
	}
	g->lead = g->tail = rb;
	if (rb) {
		rb->io_next = NULL;
		g->end = rb->rd_off + rb->rd_len;
	}
	return started;
}

/* Add the piece [skip, skip+len) of blob b for destination offset dst. */
static int add_piece(struct coil_store *s, struct rreq *r, struct blobd *b,
		     uint64_t dst, uint32_t skip, uint32_t len)
{
	uint32_t bi = UINT32_MAX;
	struct rpiece *pc;

	/* Pieces of one blob are nearly always adjacent in the map. */
	for (uint32_t i = r->nrb; i > 0 && i + 4 > r->nrb; i--) {
		if (r->rb[i - 1].b == b) {
			bi = i - 1;
			break;
		}
	}
	if (bi == UINT32_MAX) {
		struct rblob *rb;

		if (grow((void **)&r->rb, &r->cap_rb, r->nrb + 1, sizeof(*r->rb)))
			return -ENOMEM;
		bi = r->nrb++;
		rb = &r->rb[bi];
		rb->b = b;
		blobd_ref(b);
		rb->mem = blobd_is_mem(b) ? b->mem->bytes : NULL;
		if (rb->mem)
			stat_add(&s->st.rd_mem, 1);
		else
			atomic_fetch_add(&s->segs[seg_of(s, b->dev_off)].readers,
					 1);
		rb->r = r;
		rb->lo = skip;
		rb->hi = skip + len;
		rb->iobuf = rb->dec = rb->io_base = NULL;
		rb->win_len = 0;
		rb->win_end = 0;
		rb->res = 0;
		rb->npieces = 0;
		rb->piece = r->npc;
		rb->direct = false;
		rb->dec_value = false;
		rb->use_once = false;
		rb->io_owner = false;
		rb->io_next = NULL;
		if (!rb->mem) {
			uint32_t idx = seg_of(s, b->dev_off);
			const struct seg *g = &s->segs[idx];

			rb->gen = g->gen;
			if (g->state == SEG_SEALED && !g->inflight)
				rb->win_end = seg_base(s, idx) +
					      s->sb.segment_size;
			else if (idx == s->active && !g->inflight)
				rb->win_end = seg_base(s, idx) + s->active_head;
		} else {
			rb->gen = 0;
		}
		if (rb->mem)
			blobd_to_fmt(b, &rb->fb); /* the decoder's */
		rb->ce = NULL;
		rb->sce = NULL;
		rb->blk = false;
		rb->pf_next = NULL;
	} else {
		struct rblob *rb = &r->rb[bi];
		rb->lo = COIL_MIN(rb->lo, skip);
		rb->hi = COIL_MAX(rb->hi, skip + len);
	}
	r->rb[bi].npieces++;
	if (grow((void **)&r->pc, &r->cap_pc, r->npc + 1, sizeof(*r->pc)))
		return -ENOMEM;
	pc = &r->pc[r->npc++];
	pc->dst = dst;
	pc->blob = bi;
	pc->skip = skip;
	pc->len = len;
	return 0;
}

/* Walk @o's extents over [off, off + r->len) under mlock: a piece per
 * extent, zeros for the holes between them.  @return 0 or -ENOMEM. */
static int read_plan(struct coil_store *s, struct rreq *r, struct object *o)
{
	uint64_t off = r->off, end = r->off + r->len, pos = r->off;
	struct extmap_iter it;
	const struct ext *e;
	int rc = 0;

	extmap_iter_init(&it, &o->map, off);
	while (r->len && (e = extmap_iter_next(&it)) && e->off < end) {
		uint64_t a = COIL_MAX(e->off, off);
		uint64_t b = COIL_MIN(e->off + e->len, end);

		if (a > pos)
			memset(r->dst + (pos - off), 0, a - pos);
		rc = add_piece(s, r, e->b, a - off,
			       (uint32_t)(e->skip + (a - e->off)),
			       (uint32_t)(b - a));
		if (rc < 0)
			return rc;
		pos = b;
	}
	if (end > pos)
		memset(r->dst + (pos - off), 0, end - pos);
	return 0;
}

/* Each blob the cache does not hold: the device bytes to read for it. */
static void read_ranges(struct coil_store *s, struct rreq *r)
{
	for (uint32_t i = 0; i < r->nrb; i++) {
		struct rblob *rb = &r->rb[i];
		struct blobd *b = rb->b;
		uint64_t a, z;

		if (bcache_lookup(s, rb))
			continue;
		blobd_to_fmt(b, &rb->fb);
		if (b->codec == FMT_CODEC_RAW && b->dev_off % FMT_BLOCK == 0) {
			a = b->dev_off + COIL_ALIGN_DOWN(rb->lo, FMT_BLOCK);
			z = b->dev_off + COIL_ALIGN_UP(rb->hi, FMT_BLOCK);
		} else { /* compressed, or a packed raw blob under a block */
			a = COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK);
			z = COIL_ALIGN_UP(b->dev_off + b->stored_len, FMT_BLOCK);
		}
		COIL_ASSERT(z > a);
		COIL_ASSERT(z - a <= UINT32_MAX);
		rb->rd_off = a;
		rb->rd_len = (uint32_t)(z - a);
	}
}

static int read_begin(struct coil_obj *h, void *buf, size_t len,
		      uint64_t off, coil_cb cb, void *arg, bool inline_cb,
		      struct read_waiter *waiter)
{
	struct coil_store *s = h->s;
	struct rreq *r;
	struct rgroup grp = { 0 };
	uint32_t nio = 0;	/* device reads this call started */
	bool counted = false;
	int rc = 0;

	r = rreq_get(s);
	if (!r)
		return -EAGAIN;
	r->s = s;
	r->h = h;
	r->dst = buf;
	r->off = off;
	r->cb = cb;
	r->arg = arg;
	r->nrb = r->npc = r->ntasks = 0;
	r->status = 0;
	r->waiter = waiter;
	if (waiter) {
		waiter->r = r;
		inline_cb = true;
	}

	pthread_mutex_lock(&s->mlock);
	if (h->obj->removed) {
		rc = -EBADF;
	} else {
		r->len = off >= h->obj->size ? 0 :
			 COIL_MIN(len, h->obj->size - off);
		rc = read_plan(s, r, h->obj);
	}
	pthread_mutex_unlock(&s->mlock);
	if (rc < 0)
		goto fail;
	read_ranges(s, r);

	atomic_fetch_add(&s->ops_inflight, 1);
	atomic_fetch_add(&h->inflight, 1);
	counted = true;
	/* One extra count held until every blob is on its way, so no
	 * completion finishes the read while blobs are still being set up. */
	atomic_store(&r->pending, r->nrb + 1);
	for (uint32_t i = 0; i < r->nrb; i++) {
		struct rblob *rb = &r->rb[i];

		/* Feedback loop: a blob being prefetched waits for it, and
		 * the prefetch resumes it (read_blob_resume). */
		switch (readahead_demand(h, r, rb)) {
		case 1: /* waits for a prefetch: read_blob_resume */
			continue;
		case 2: /* served by the cache, or the prefetch's failure */
			atomic_fetch_sub(&r->pending, 1);
			continue;
		default:
			break;
		}
		nio += read_group_add(s, &grp, rb);
	}
	nio += read_group_add(s, &grp, NULL);
	readahead_on_read(h, off, r->len ? r->len : len);
	/* counted after readahead looked at the others; the read cannot
	 * finish (and take it off) before the extra count is dropped */
	atomic_fetch_add(&h->rd_bytes, r->len);
	if (atomic_fetch_sub(&r->pending, 1) != 1)
		return 0;
	if (inline_cb || (s->inline_cb && nio == 0)) {
		/* The synchronous wrapper's own waiter, or a caller that
		 * asked for it (COIL_INLINE_CB): finishing here is safe, and
		 * a read served by the cache then costs no ring round trip
		 * (two thread switches). */
		read_all_done(r);
		return 0;
	}
	/* Nothing left in flight (holes, EOF, cache hits): complete on the
	 * ring thread anyway, so callbacks never run inside the submitting
	 * call. */
	uring_io_prep(&r->nop, URING_OP_NOP, NULL, 0, 0, read_nop_done, r);
	rc = uring_submit(s->ring, &r->nop);
	if (rc >= 0)
		return 0;
	if (r->nrb) {
		read_all_done(r); /* blobs done: finish here */
		return 0;
	}
fail:
	/* The one failure exit: undo what was counted, release what was
	 * planned (nothing is in flight: no blob, or none started). */
	COIL_ASSERT(rc < 0);
	if (counted) {
		COUNT_SUB(&h->rd_bytes, r->len);
		COUNT_SUB(&h->inflight, 1);
		COUNT_SUB(&s->ops_inflight, 1);
	}
	read_release(s, r);
	rreq_put(s, r);
	return rc;
}

int engine_read(struct coil_obj *h, void *buf, size_t len, uint64_t off,
		coil_cb cb, void *arg)
{
	return read_begin(h, buf, len, off, cb, arg, false, NULL);
}

static void pread_done(void *arg, int64_t res)
{
	read_waiter_wake(arg, true, res);
}

int64_t engine_pread(struct coil_obj *h, void *buf, size_t len,
		     uint64_t off)
{
	struct read_waiter w = { .res = 0 };
	int rc;

	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	tls_pread = &w;
	rc = read_begin(h, buf, len, off, pread_done, &w, true, &w);
	tls_pread = NULL;
	if (rc < 0) {
		w.res = rc;
		goto out;
	}
	pthread_mutex_lock(&w.mu);
	while (!w.done && !w.ready)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	if (!w.done) {
		/* Every blob is in; nobody else touches the read now.
		 * read_finish calls pread_done on this thread. */
		stat_add(&h->s->st.rd_caller_finished, 1);
		read_all_done(w.r);
		COIL_ASSERT(w.done);
	}
out:
	pthread_mutex_destroy(&w.mu);
	pthread_cond_destroy(&w.cv);
	return w.res;
}
