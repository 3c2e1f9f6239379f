/* engine/io/write.c — the write path (the request contexts and the steps
 * the cleaner shares are io/wreq.c).
 *
 *   coil_write (caller)      validate, take a context and a place in the
 *                            object's order, split into blobs, one pool
 *                            request of ENCODE tasks
 *   write_encoded (worker)   take the journal ticket when the object's
 *                            earlier writes have theirs (journal_take_turn;
 *                            else parked, continued by the one before), place
 *                            the blobs in the active segment (packing in
 *                            place), build the journal record, submit the
 *                            data write(s); the record joins the journal at
 *                            once, its chunk written alongside the data
 *                            (replay verifies every blob a record names)
 *   wreq_run_done (ring)     when every run is on the device, the record may
 *                            be applied and completed once its chunk is
 *   write_apply (ring, mlock) after the chunk: shadow the extents
 *   write_done (ring)        the user callback
 *
 * Blobs are cut at max_blob boundaries of the object offset, so a later
 * aligned overwrite replaces whole blobs and partial ones shadow cleanly.
 * Each blob is encoded straight into its slot of one batch buffer (slots are
 * the blob lengths rounded up to 4 KiB); placement then packs compressed
 * blobs down in place, which never overtakes a slot not yet moved. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cleaner.h"
#include "engine/io/readahead.h"
#include "engine/io/wreq.h"
#include "engine/io/zctx.h"
#include "engine/io/write.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/pack.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"

/* ---- completion --------------------------------------------------------- */

int write_apply_blobs(struct coil_store *s, struct wreq *w, struct object *o,
		      uint64_t off, uint32_t k0, uint32_t n)
{
	struct ext ex[64];
	uint64_t pos = off;
	uint32_t k = k0, end = k0 + n;
	int rc = 0;

	/* Apply in groups so the stack array stays small. */
	while (k < end && rc == 0) {
		uint32_t m = 0;
		uint64_t goff = pos;
		while (k < end && m < COIL_ARRAY_LEN(ex)) {
			ex[m].off = pos;
			ex[m].len = w->fb[k].logical_len;
			ex[m].skip = 0;
			ex[m].b = w->bd[k];
			w->bd[k] = NULL;
			pos += ex[m].len;
			m++;
			k++;
		}
		rc = meta_apply_write(s, o, goff, pos - goff, ex, m, false);
	}
	return rc;
}

static void write_apply(struct coil_store *s, struct jent *e)
{
	struct wreq *w = (struct wreq *)e;
	struct object *o = w->obj;

	if (e->status == 0 && !o->removed) {
		int rc = write_apply_blobs(s, w, o, w->off, 0, w->nblobs);
		if (rc < 0) {
			store_break(s, rc);
			e->status = rc;
		}
	}
	wreq_drop_blobs(w, 0);
	seg_inflight_done(s, w);
	w->nruns = 0;
}

static void write_done(struct coil_store *s, struct jent *e, int res)
{
	struct wreq *w = (struct wreq *)e;
	coil_cb cb = w->cb;
	void *arg = w->arg;
	int64_t ret = res < 0 ? res : (int64_t)w->len;
	struct coil_obj *h = w->h;

	COIL_ASSERT(res <= 0);
	if (res < 0)
		stat_add(&s->st.write_errors, 1);
	else {
		stat_add(&s->st.writes, 1);
		stat_add(&s->st.write_bytes, w->len);
	}
	if (!w->batch_borrowed)
		bufpool_put(&s->bp, w->batch);
	w->batch = NULL;
	wreq_put(s, w);
	COUNT_SUB(&h->inflight, 1);
	if (cb)
		cb(arg, ret);
	ops_done(s);
}

static void write_fail(struct coil_store *s, struct wreq *w, int err)
{
	/* A status of 0 would pass for a record: the journal would wait for
	 * one that never comes. */
	COIL_ASSERT(err < 0);
	wreq_drop_blobs(w, 0);
	w->je.status = err;
	w->je.rec_len = 0;
	journal_ready(s, &w->je);
}

int write_describe_range(struct coil_store *s, struct wreq *w,
			 uint64_t obj_id, uint64_t off, uint64_t len,
			 uint32_t k0, uint32_t n, bool inl,
			 struct fmt_cursor *c)
{
	uint64_t pos = off;
	size_t mark;
	int rc = 0;

	for (uint32_t k = k0; k < k0 + n; k++) {
		struct fmt_blob *fb = &w->fb[k];

		w->stored += fb->stored_len;
		if (fb->codec == FMT_CODEC_RAW)
			stat_add(&s->st.blobs_raw, 1);
		else
			stat_add(&s->st.blobs_zstd, 1);
		if (fb->codec != FMT_CODEC_RAW && w->h && w->h->level < 0)
			stat_add(&s->st.blobs_zstd_fast, 1);
		w->bd[k] = inl ? blobd_new_mem(fb, w->batch + w->slot[k],
					       &s->mem, obj_id, pos) :
				 blobd_new(fb);
		if (!w->bd[k])
			rc = -ENOMEM;
		pos += fb->logical_len;
	}
	if (rc < 0)
		return rc;
	pos = off;
	rc = fmt_jrec_write_begin(c, &mark, 0, obj_id, off, len);
	for (uint32_t k = k0; rc == 0 && k < k0 + n; k++) {
		struct fmt_extent ex;

		rc = wreq_put_extent(c, &ex, pos, w->fb[k].logical_len, 0,
				     &w->fb[k],
				     inl ? w->bd[k]->mem->bytes : NULL);
		pos += w->fb[k].logical_len;
	}
	if (rc == 0)
		rc = fmt_jrec_write_end(c, mark, n);
	return rc;
}

size_t write_record_bound(const struct wreq *w, uint32_t k0, uint32_t n,
			  bool inl)
{
	size_t need = FMT_JREC_HDR + FMT_JREC_WRITE_FIXED;

	for (uint32_t k = k0; k < k0 + n; k++)
		need += FMT_EXTENT_FIXED + 8u * w->fb[k].n_csums +
			(inl ? w->fb[k].stored_len : 0);
	return need;
}

/* The write's blob descriptors (in memory for an inline write: the encoded
 * bytes are copied out of the batch) and its journal record.  @return 0,
 * -ENOMEM, or the record encoder's error. */
static int write_describe(struct coil_store *s, struct wreq *w, bool inl)
{
	size_t need = write_record_bound(w, 0, w->nblobs, inl);
	struct fmt_cursor c;
	int rc;

	rc = wreq_rec_room(w, need);
	if (rc < 0)
		return rc;
	fmt_cursor_init(&c, w->recbuf, w->rec_cap);
	rc = write_describe_range(s, w, w->obj->id, w->off, w->len, 0,
				  w->nblobs, inl, &c);
	stat_add(&s->st.enc_logical, w->len);
	stat_add(&s->st.enc_stored, w->stored);
	w->je.rec = w->recbuf;
	w->je.rec_len = (uint32_t)c.pos;
	return rc;
}

/* Stored bytes of in-memory blobs a store holds at most: they are written
 * into every checkpoint until packed, so a small share of the checkpoint
 * area, and memory.  Past it a small write takes the segment path. */
static uint64_t write_mem_cap(const struct coil_store *s)
{
	return COIL_MIN((uint64_t)ENGINE_MEM_MAX, (s->sb.ckpt_len - FMT_BLOCK) / 8);
}

/* Every blob of @w stored raw, in whole blocks of the object. */
static bool write_raw_blocks(const struct wreq *w)
{
	if (w->off % FMT_BLOCK || w->len % FMT_BLOCK)
		return false;
	for (uint32_t k = 0; k < w->nblobs; k++)
		if (w->fb[k].codec != FMT_CODEC_RAW)
			return false;
	return true;
}

bool write_inline_reserve(struct coil_store *s, struct wreq *w)
{
	uint64_t stored = 0;
	int rc;

	if (!s->inline_ok || w->len > ENGINE_INLINE_MAX || w->nblobs == 0)
		return false;
	/* Raw whole blocks gain no density from packing, and the journal
	 * path writes them twice (the journal, then the packer's segment
	 * write).  A writer keeping many writes in flight wants throughput,
	 * not a write's latency: the segment path writes them once (fio 4
	 * KiB random writes at QD 32 into a raw store, 5 alternated runs:
	 * 245-321 MiB/s through the journal, 308-364 placed).  A writer at
	 * low depth (a database's page at QD 1) keeps the journal path's
	 * memory-speed completion. */
	if (w->h && atomic_load(&w->h->inflight) > ENGINE_INLINE_DEPTH_MAX &&
	    write_raw_blocks(w))
		return false;
	for (uint32_t k = 0; k < w->nblobs; k++)
		stored += w->fb[k].stored_len;
	if (atomic_load(&s->mem.bytes) + stored > write_mem_cap(s)) {
		pack_kick(s);
		return false;
	}
	w->nruns = 0;
	pthread_mutex_lock(&s->mlock);
	rc = ckpt_reserve_write(s, w, true);
	pthread_mutex_unlock(&s->mlock);
	if (rc < 0)
		return false; /* the segment path says -ENOSPC, or relieves */
	stat_add(&s->st.inline_writes, 1);
	return true;
}

/* A small write completes at memory speed: its encoded blobs travel inside
 * its journal record, which reaches the page cache (journal.c), and stay in
 * memory (reads are served from there) until the packer writes them densely
 * into a segment (engine/pack.c).  No data write, no placement.  @return
 * false when the write does not qualify (the caller places it). */
static bool write_inline(struct coil_store *s, struct wreq *w)
{
	int rc;

	if (!write_inline_reserve(s, w))
		return false;
	rc = write_describe(s, w, true);
	if (rc < 0) {
		write_fail(s, w, rc);
		return true;
	}
	if (atomic_load(&s->mem.bytes) >= ENGINE_PACK_AT)
		pack_kick(s);
	journal_ready(s, &w->je);
	return true;
}

int write_place(struct coil_store *s, struct wreq *w)
{
	uint64_t keep = cleaner_write_keep(s, w);
	unsigned rep = 0;
	int rc;

	rc = wreq_place(s, w, keep, &rep);
	for (int tries = 0; rc == -ENOSPC && w->space_pending &&
	     tries < ENGINE_SPACE_CKPT_TRIES && !uring_on_ring_thread(s->ring) &&
	     ckpt_wait(s) == 0; tries++) {
		/* Emptied segments come back through a checkpoint: wait for
		 * it (a pool worker may; the ring thread may not) and retry.
		 * One may not free them all: a segment emptied by a chunk
		 * still applied in part waits for the next (ckpt.c).
		 * -ENOSPC only when space is really gone. */
		rc = wreq_place(s, w, keep, &rep);
	}
	/* A growing store that has room left to grow takes it now rather
	 * than fail the write (writes in flight together can outrun the
	 * step cleaner_throttle took for each). */
	for (int tries = 0; rc == -ENOSPC && s->grows && tries < 4 &&
	     !uring_on_ring_thread(s->ring) &&
	     cleaner_grow(s, w->batch_len) > 0; tries++)
		rc = wreq_place(s, w, keep, &rep);
	/* The cleaner's own policy: a segment opened may bring free space
	 * under its low mark (its passes take the checkpoints then). */
	if (rep & SEG_REPORT_OPENED)
		cleaner_kick(s);
	return rc;
}

/* Encoded and holding its ticket: place, describe, submit (or fail).  Runs
 * on a pool worker, or on whichever thread encoded it or released it. */
static void write_ticketed(struct coil_store *s, struct jent *e)
{
	struct wreq *w = (struct wreq *)e;
	int rc = w->enc_rc;

	if (rc == 0 && w->nblobs == 0) {
		journal_ready(s, &w->je); /* zero-length: nothing to map */
		return;
	}

	for (uint32_t k = 0; rc == 0 && k < w->nblobs; k++)
		if (w->tasks[k].result < 0)
			rc = (int)w->tasks[k].result;
	if (rc < 0) {
		write_fail(s, w, rc);
		return;
	}
	for (uint32_t k = 0; k < w->nblobs; k++)
		w->bd[k] = NULL;
	if (write_inline(s, w))
		return;
	rc = write_place(s, w);
	if (rc < 0) {
		write_fail(s, w, rc);
		return;
	}
	rc = write_describe(s, w, false);
	if (rc < 0) {
		/* Space was placed: the runs' inflight counts are released
		 * when the failed entry is applied. */
		write_fail(s, w, rc);
		return;
	}
	wreq_send(s, w);
}

/* Encoded (or failed, @rc): the ticket, then write_ticketed, now or when
 * the object's write before this one takes its ticket. */
static void write_encoded_go(struct wreq *w, int rc)
{
	w->enc_rc = rc;
	journal_take_turn(w->s, w->obj, &w->je, false);
}

static void write_encoded(struct pool_req *preq, void *arg)
{
	write_encoded_go(arg, pool_req_status(preq));
}

/* The pool refused a coil thread's request (it must not block): encode on
 * this thread with the store's spare context. */
static void write_encode_inline(struct coil_store *s, struct wreq *w)
{
	stat_add(&s->st.inline_encodes, w->nblobs); /* per blob */
	pthread_mutex_lock(&s->zmu);
	for (uint32_t k = 0; k < w->nblobs; k++) {
		struct pool_task *t = &w->tasks[k];
		t->result = fmt_blob_encode(s->zc, t->u.encode.level, NULL, 0,
					    t->u.encode.src, t->u.encode.len,
					    t->u.encode.dst,
					    t->u.encode.dst_cap,
					    t->u.encode.out);
	}
	pthread_mutex_unlock(&s->zmu);
}

/* Cut [off, off + len) into @n blobs at max_blob boundaries of the object
 * offset: each blob's slot in one batch buffer (its length rounded up to
 * 4 KiB) and its ENCODE task.  @return 0 or -ENOMEM. */
static int write_split(struct coil_store *s, struct wreq *w, const void *buf,
		       uint32_t n)
{
	uint64_t pos, off = w->off, end = w->off + w->len;
	uint32_t mb = s->max_blob;
	size_t total = 0;

	pos = off;
	for (uint32_t k = 0; k < n; k++) {
		uint64_t bend = COIL_MIN(COIL_ALIGN_DOWN(pos, mb) + mb, end);

		w->slot[k] = (uint32_t)total;
		w->bd[k] = NULL;
		total += COIL_ALIGN_UP(bend - pos, FMT_BLOCK);
		pos = bend;
	}
	w->batch = NULL;
	w->batch_len = total;
	/* Stored raw, block-aligned in memory and in the object: every blob
	 * is whole blocks at its own place in @buf, which is already what
	 * its slot would hold, and placement moves and pads nothing.  The
	 * data is written from the caller's buffer (which coil_write's
	 * contract keeps unchanged until the callback) and not copied. */
	w->batch_borrowed = n && w->h->level == 0 &&
			    (uintptr_t)buf % FMT_BLOCK == 0 &&
			    off % FMT_BLOCK == 0 && w->len % FMT_BLOCK == 0;
	if (w->batch_borrowed) {
		w->batch = (uint8_t *)(uintptr_t)buf;
		COIL_ASSERT(total == w->len);
		stat_add(&s->st.writes_zero_copy, 1);
	} else if (n) {
		w->batch = bufpool_get(&s->bp, total);
		if (!w->batch)
			return -ENOMEM;
	}
	pos = off;
	for (uint32_t k = 0; k < n; k++) {
		uint64_t bend = COIL_MIN(COIL_ALIGN_DOWN(pos, mb) + mb, end);
		struct pool_task *t = &w->tasks[k];

		memset(t, 0, sizeof(*t));
		t->kind = POOL_TASK_ENCODE_BLOB;
		t->u.encode.src = (const uint8_t *)buf + (pos - off);
		t->u.encode.len = (uint32_t)(bend - pos);
		t->u.encode.level = w->h->level;
		t->u.encode.dst = w->batch + w->slot[k];
		t->u.encode.dst_cap = COIL_ALIGN_UP(bend - pos, FMT_BLOCK);
		t->u.encode.out = &w->fb[k];
		pos = bend;
	}
	return 0;
}

/* Encode the write's @n blobs: here when storing raw and small, else on the
 * pool (here too when the pool is full).  write_encoded_go follows. */
static void write_encode(struct coil_store *s, struct wreq *w, uint32_t n)
{
	int level = w->h->level;
	ZSTD_CCtx *cc = NULL;
	int rc;

	if (n == 0) {
		write_encoded_go(w, 0);
		return;
	}
	if ((level == 0 && w->len <= ENGINE_RAW_INLINE_MAX) ||
	    (w->len <= ENGINE_INLINE_MAX && !engine_on_coil_thread(s) &&
	     (cc = zctx_thread_c()))) {
		/* Storing raw is a copy and a checksum per 4 KiB, and
		 * compressing a page a few microseconds: cheaper here than
		 * the two thread hops a pool task costs (a database's page
		 * write then crosses one thread, the ring's). */
		for (uint32_t k = 0; k < n; k++) {
			struct pool_task *t = &w->tasks[k];
			t->result = fmt_blob_encode(cc, cc ? level : 0,
						    NULL, 0,
						    t->u.encode.src,
						    t->u.encode.len,
						    t->u.encode.dst,
						    t->u.encode.dst_cap,
						    t->u.encode.out);
		}
		write_encoded_go(w, 0);
		return;
	}
	rc = pool_submit(s->pool, &w->preq, w->tasks, n, write_encoded, w,
			 engine_on_coil_thread(s) ? POOL_NONBLOCK : 0);
	if (rc == -EAGAIN) {
		write_encode_inline(s, w);
		write_encoded_go(w, 0);
	} else if (rc < 0) {
		write_encoded_go(w, rc);
	}
}

int engine_write(struct coil_obj *h, const void *buf, size_t len, uint64_t off,
		 coil_cb cb, void *arg)
{
	struct coil_store *s = h->s;
	uint32_t mb = s->max_blob, n = 0;
	uint64_t pos, end = off + len;
	struct wreq *w;
	int rc;

	COIL_ASSERT(len <= ENGINE_WRITE_MAX);
	w = wreq_get(s);
	if (!w)
		return -EAGAIN;
	readahead_on_write(h, off, len); /* an overwrite of the window */
	for (pos = off; pos < end; n++)
		pos = COIL_MIN(COIL_ALIGN_DOWN(pos, mb) + mb, end);
	rc = wreq_reserve(w, n ? n : 1);
	if (rc < 0) {
		wreq_put(s, w);
		return rc;
	}
	memset(&w->je, 0, sizeof(w->je));
	w->je.apply = write_apply;
	w->je.done = write_done;
	w->je.ticketed = write_ticketed;
	w->je.need_sync = s->sync_writes;
	w->je.owner = engine_tls_waiter && arg == engine_tls_waiter ? arg : NULL;
	w->s = s;
	w->h = h;
	w->obj = h->obj;
	w->src = buf;
	w->off = off;
	w->len = len;
	w->cb = cb;
	w->arg = arg;
	w->nblobs = n;
	w->nruns = 0;
	w->ckpt_res = 0;
	w->stored = 0;
	rc = write_split(s, w, buf, n);
	if (rc < 0) {
		wreq_put(s, w);
		return rc;
	}
	/* Wait for the cleaner here, before the ticket: a relocation's
	 * record applies in ticket order after ours. */
	cleaner_throttle(s, w->batch_len);
	atomic_fetch_add(&s->ops_inflight, 1);
	atomic_fetch_add(&h->inflight, 1);
	w->je.turn = journal_turn(s, w->obj);
	write_encode(s, w, n);
	return 0;
}
