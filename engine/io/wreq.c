/* engine/io/wreq.c — write request contexts (made at open, with the read
 * contexts) and the steps of a write the cleaner's relocation shares with
 * engine_write: place, send, put extent, drop.  One copy of each, so the
 * cleaner's relocated data reaches the device and the journal exactly as a
 * foreground write's does.  Calls only down: place/ (allocator), the
 * checkpoint's reservation and trigger, the journal, the cache's
 * invalidation of reused segments. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/bcache.h"
#include "engine/io/read.h"
#include "engine/io/wreq.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/place/blob.h"
#include "engine/place/segment.h"
#include "engine/place/object.h"
#include "engine/store.h"

int reqs_init(struct coil_store *s)
{
	s->wreqs = calloc(ENGINE_WREQ_MAX, sizeof(*s->wreqs));
	s->rreqs = calloc(ENGINE_RREQ_MAX, sizeof(*s->rreqs));
	if (!s->wreqs || !s->rreqs)
		return -ENOMEM;
	for (uint32_t i = 0; i < ENGINE_WREQ_MAX; i++) {
		s->wreqs[i].next_free = s->wfree;
		s->wfree = &s->wreqs[i];
	}
	for (uint32_t i = 0; i < ENGINE_RREQ_MAX; i++) {
		s->rreqs[i].next_free = s->rfree;
		s->rfree = &s->rreqs[i];
	}
	return 0;
}

void wreq_free_arrays(struct wreq *w)
{
	free(w->tasks);
	free(w->fb);
	free(w->bd);
	free(w->slot);
	free(w->runs);
	free(w->recbuf);
}

void reqs_destroy(struct coil_store *s)
{
	if (s->wreqs) {
		for (uint32_t i = 0; i < ENGINE_WREQ_MAX; i++)
			wreq_free_arrays(&s->wreqs[i]);
	}
	if (s->rreqs) {
		for (uint32_t i = 0; i < ENGINE_RREQ_MAX; i++) {
			struct rreq *r = &s->rreqs[i];
			free(r->rb);
			free(r->pc);
			free(r->tasks);
			free(r->task_blob);
		}
	}
	free(s->wreqs);
	free(s->rreqs);
	s->wreqs = NULL;
	s->rreqs = NULL;
}

struct wreq *wreq_get(struct coil_store *s)
{
	struct wreq *w;
	bool coil = engine_on_coil_thread(s);

	pthread_mutex_lock(&s->rq_mu);
	while (!s->wfree) {
		if (coil) {
			/* A callback must not block: the caller may retry. */
			pthread_mutex_unlock(&s->rq_mu);
			return NULL;
		}
		pthread_cond_wait(&s->rq_cond, &s->rq_mu);
	}
	w = s->wfree;
	s->wfree = w->next_free;
	pthread_mutex_unlock(&s->rq_mu);
	return w;
}

void wreq_put(struct coil_store *s, struct wreq *w)
{
	/* A context that grew for one huge write gives the memory back. */
	if (w->cap_blobs > 64) {
		free(w->tasks);
		free(w->fb);
		free(w->bd);
		free(w->slot);
		w->tasks = NULL;
		w->fb = NULL;
		w->bd = NULL;
		w->slot = NULL;
		w->cap_blobs = 0;
	}
	pthread_mutex_lock(&s->rq_mu);
	w->next_free = s->wfree;
	s->wfree = w;
	pthread_cond_signal(&s->rq_cond);
	pthread_mutex_unlock(&s->rq_mu);
}

int wreq_reserve(struct wreq *w, uint32_t n)
{
	struct pool_task *t;
	struct fmt_blob *fb;
	struct blobd **bd;
	uint32_t *slot;

	if (n <= w->cap_blobs)
		return 0;
	t = realloc(w->tasks, n * sizeof(*t));
	if (t)
		w->tasks = t;
	fb = realloc(w->fb, n * sizeof(*fb));
	if (fb)
		w->fb = fb;
	bd = realloc(w->bd, n * sizeof(*bd));
	if (bd)
		w->bd = bd;
	slot = realloc(w->slot, n * sizeof(*slot));
	if (slot)
		w->slot = slot;
	if (!t || !fb || !bd || !slot)
		return -ENOMEM;
	w->cap_blobs = n;
	return 0;
}

int wreq_rec_room(struct wreq *w, size_t need)
{
	if (need > w->rec_cap) {
		uint8_t *nb = realloc(w->recbuf, need);

		if (!nb)
			return -ENOMEM;
		w->recbuf = nb;
		w->rec_cap = need;
	}
	return 0;
}

/* ---- place ----------------------------------------------------------------- */

int wreq_place(struct coil_store *s, struct wreq *w, uint64_t keep,
	       unsigned *rep)
{
	unsigned now = 0; /* this call's report: a retry acts on its own */
	int rc;

	w->nruns = 0;
	w->ckpt_res = 0;
	pthread_mutex_lock(&s->mlock);
	rc = seg_room_check(s, w, keep, &now);
	if (rc == 0)
		rc = ckpt_reserve_write(s, w, false);
	if (rc == 0) {
		rc = seg_place_write(s, w, &now);
		if (rc < 0) {
			/* seg_inflight_done gave the reservation back */
			COIL_ASSERT(w->ckpt_res == 0);
		}
	}
	pthread_mutex_unlock(&s->mlock);

	/* The allocator's report, acted on outside mlock.  Without a cleaner,
	 * low free space means a checkpoint (PENDING segments come back only
	 * through one); with one, its passes take them. */
	*rep |= now;
	if ((now & SEG_REPORT_PENDING) || ((now & SEG_REPORT_LOW) && !s->cl))
		ckpt_trigger(s);
	/* A reused segment's old cache entries can never be looked up again
	 * (the generation is in the key): drop them now for the memory. */
	for (uint32_t i = 0; rc == 0 && i < w->nruns; i++)
		if (w->runs[i].seg_fresh)
			bcache_invalidate_seg(s, w->runs[i].seg);
	return rc;
}

/* ---- send, describe, drop --------------------------------------------------- */

void wreq_drop_blobs(struct wreq *w, uint32_t from)
{
	for (uint32_t k = from; k < w->nblobs; k++) {
		blobd_unref(w->bd[k]);
		w->bd[k] = NULL;
	}
}

int wreq_put_extent(struct fmt_cursor *c, struct fmt_extent *fe,
		    uint64_t obj_off, uint32_t len, uint32_t skip,
		    const struct fmt_blob *fb, const uint8_t *inl)
{
	fe->obj_off = obj_off;
	fe->len = len;
	fe->blob_skip = skip;
	/* Only the checksums the blob has: the rest of the array is unused. */
	memcpy(&fe->blob, fb,
	       offsetof(struct fmt_blob, csums) + 8u * fb->n_csums);
	fe->inl = inl;
	if (inl) {
		fe->blob.flags = FMT_BLOB_INLINE;
		fe->blob.dev_off = 0;
	}
	return fmt_cursor_put_extent(c, fe);
}

void wreq_run_done(struct uring_io *io, int res)
{
	struct wrun *r = io->arg;
	struct wreq *w = r->w;

	if (wreq_run_result(r, res))
		journal_data_done(w->s, &w->je, atomic_load(&w->io_status));
}

void wreq_submit_runs(struct coil_store *s, struct wreq *w,
		      void (*cb)(struct uring_io *io, int res))
{
	atomic_store(&w->runs_pending, w->nruns);
	atomic_store(&w->io_status, 0);
	for (uint32_t i = 0; i < w->nruns; i++) {
		struct wrun *r = &w->runs[i];
		int rc;

		r->io.cb = cb;
		r->io.arg = r;
		stat_add(&s->st.dev_bytes_written, r->io.len);
		rc = uring_submit(s->ring, &r->io);
		if (rc < 0)
			cb(&r->io, rc);
	}
}

bool wreq_run_result(struct wrun *r, int res)
{
	struct wreq *w = r->w;

	if (res >= 0 && (uint32_t)res != r->io.len)
		res = -EIO;
	if (res < 0) {
		int zero = 0;
		atomic_compare_exchange_strong(&w->io_status, &zero, res);
	}
	return atomic_fetch_sub(&w->runs_pending, 1) == 1;
}

void wreq_send(struct coil_store *s, struct wreq *w)
{
	/* Data first, then the record joins the journal: the chunk write is
	 * submitted after the runs, so an fsync after the chunk is held by
	 * the ring until the runs are done too.  The record does not wait
	 * for the data (see struct jent). */
	if (w->nruns)
		w->je.data_pending = true; /* before a run can complete */
	wreq_submit_runs(s, w, wreq_run_done);
	journal_ready(s, &w->je);
}
