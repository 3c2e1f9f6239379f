/* engine/io/readahead.c — readahead: one prefetch stream per open handle.
 *
 * Each coil_obj with prefetch on (and a cache to publish into) owns a
 * ra_stream: the readahead policy (struct ra_state), the admission state
 * machine (struct pf_machine, prefetch/) and RA_JOBS job slots, the bound on
 * this stream's prefetch I/O in flight.  docs/readahead.md has the picture.
 *
 *   demand read   read.c calls readahead_demand per blob: a blob whose unit
 *                 is queued is promoted (pf_begin_unit) and started now; a
 *                 blob in flight gets the read's rblob hooked on the job
 *                 (no thread waits: the job's completion resumes it); a
 *                 retained failure of that very blob is the read's error
 *                 when the read needs the whole blob (fail_covers); a
 *                 read of some sectors of a raw blob reads them itself
 *   after it      readahead_on_read: ra_on_read -> pf_apply (admit, cancel
 *                 on a pattern change) -> start queued work in free slots
 *   job           map the unit to its stored blobs (mlock), ring read each
 *                 into a buffer, DECODE on the pool (or verify raw sectors),
 *                 cache_insert(CACHE_INSERT_PREFETCH), pf_complete, resume
 *                 the waiters, start more work
 *
 * Cancellation bumps the machine's generation (pf_cancel_all): queued work
 * is dropped at once; a job in flight finishes its I/O (its buffers and the
 * blob references are returned then) and is discarded by generation: its
 * bytes go to the cache only if a demand read is waiting for them.  Close
 * waits for every job to finish before the stream is freed.
 *
 * Locks: st->mu (the machine, the policy, the job slots) -> s->mlock (to map
 * a unit to blobs and read the object size).  Never held across a ring or
 * pool submit (a pool worker's uring_submit may wait for the ring thread,
 * which may need st->mu to complete a job), nor across a user callback.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "engine/io/bcache.h"
#include "engine/io/read.h"
#include "engine/io/readahead.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "prefetch/prefetch.h"

/* The readahead window's maximum, in blobs (ra_config; prefetch/'s default
 * is 8).  The window is refilled in batches of half of it, and a reader
 * that outruns the device waits for the first blob of a batch and finds the
 * rest ready, so the share of blobs ready before demand is about 1 - 2/W:
 * 75 % at 8 (measured 74-77 %), ~94 % at 32 (docs/readahead.md). */
#define RA_WINDOW_MAX 32u
#define RA_REFILL 1u
/* Job slots per stream: prefetch I/O in flight is bounded by this.
 * Readahead uses at most RA_JOBS_AHEAD slots so a demand read can always
 * promote its queued unit into one of the others instead of waiting behind
 * the FIFO. */
#define RA_JOBS 36u
#define RA_JOBS_AHEAD 32u
/* Admitted, not yet started work (the pf_machine queue bound). */
#define RA_QUEUE_CAP 32u
/* Stored blobs fetched per unit.  A unit is one max_blob chunk of the
 * object; writes cut blobs at those boundaries, so it is one blob unless
 * small overwrites split it.  More than this: the rest is read on demand. */
#define RA_JOB_BLOBS 2u
/* Reads in a row with less than a window of the handle's other reads in
 * flight before a deep reader counts as shallow again (readahead_on_read).
 * A reader at QD 1 gets its readahead back four reads after a deep run. */
#define RA_DEEP_HOLD 4u
/* Retained failures remembered with the key of the blob that failed, so a
 * failure surfaces only to a demand for the same stored blob (an overwrite
 * after the failure gives the range a new blob, which reads normally). */
#define RA_FAILS 16u

struct ra_jblob {
	struct blobd *b;
	struct ra_job *job;
	uint32_t gen;
	uint32_t rd_len;
	uint64_t rd_off;
	uint8_t *iobuf;         /* stored bytes (raw blobs: == val) */
	uint8_t *val;           /* decoded bytes, from cache_alloc_value
				 * (zstd: taken when the decode starts) */
	/* A demand read hooked on this blob that wants it whole, adopted
	 * before the decode started (st->mu): the blob is decoded straight
	 * into that read's buffer and not inserted into the cache. */
	struct rblob *direct;
	bool decoding;          /* st->mu: the decode's target is chosen */
	int res;
	struct uring_io io;
	struct fmt_blob fb;
};

struct ra_job {
	struct ra_stream *st;
	struct pf_work w;
	bool busy;
	uint32_t nb;
	_Atomic uint32_t pending;
	struct rblob *waiters;  /* demand reads resumed at completion */
	struct ra_job *next;    /* start list */
	struct pool_req preq;
	uint32_t ntasks;
	uint32_t task_blob[RA_JOB_BLOBS];
	struct pool_task tasks[RA_JOB_BLOBS];
	struct ra_jblob bl[RA_JOB_BLOBS];
};

struct ra_fail {
	struct pf_unit u;
	uint64_t dev_off;
	uint32_t gen;
	int err;
};

struct ra_stream {
	struct coil_store *s;
	struct object *obj;
	uint64_t obj_id;
	pthread_mutex_t mu;
	pthread_cond_t idle;
	struct pf_machine m;
	struct ra_state ra;
	uint32_t busy;          /* job slots in use */
	bool closing;
	bool cancel_pending;    /* pf_finish_cancellation once idle */
	uint32_t deep;          /* reads still counted deep (readahead_on_read) */
	uint32_t nfails;
	struct ra_fail fails[RA_FAILS];
	struct ra_stream *next, *prev;
	/* RA_JOBS slots, made the first time the stream prefetches (a job
	 * carries full blob descriptors, ~4.5 KiB: handles that never read
	 * sequentially or hint do not pay ~160 KiB each) */
	struct ra_job *jobs;
};

/* Store-wide: the live streams and what closed ones reported. */
struct ra_store {
	pthread_mutex_t mu;
	struct ra_stream *live;
	uint64_t streams;
	struct pf_report closed;
	struct ra_stats ra_closed;
	_Atomic uint64_t jobs_started, blobs_fetched, blobs_skipped;
	_Atomic uint64_t discarded_blobs, demand_promotions, fail_mismatch;
	_Atomic uint64_t demand_takeovers; /* queued units demand read itself */
	/* first demands of a unit whose prefetch had published and whose
	 * blob was in the cache: ready before demand without any wait (the
	 * report's ready_before_demand also counts demands that waited) */
	_Atomic uint64_t ready_no_wait;
	/* readahead advice dropped: the reader had a window in flight */
	_Atomic uint64_t deep_reader_skips;
};

static void ra_stats_add(struct ra_stats *a, const struct ra_stats *b)
{
	a->reads += b->reads;
	a->sequential_reads += b->sequential_reads;
	a->random_reads += b->random_reads;
	a->rereads += b->rereads;
	a->windows_grown += b->windows_grown;
	a->blobs_advised += b->blobs_advised;
	a->hints += b->hints;
	for (int i = 0; i < 5; i++)
		a->cancels[i] += b->cancels[i];
}

int readahead_store_init(struct coil_store *s)
{
	struct ra_store *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return -ENOMEM;
	pthread_mutex_init(&rs->mu, NULL);
	s->ras = rs;
	return 0;
}

void readahead_store_destroy(struct coil_store *s)
{
	struct ra_store *rs = s->ras;

	if (!rs)
		return;
	COIL_ASSERT(rs->live == NULL);
	pthread_mutex_destroy(&rs->mu);
	free(rs);
	s->ras = NULL;
}

static struct ra_stream *stream_of(struct coil_obj *h)
{
	return __atomic_load_n(&h->ra, __ATOMIC_ACQUIRE);
}

static uint64_t unit_of(const struct coil_store *s, uint64_t off)
{
	return off / s->max_blob;
}

/* The distinct stored blobs mapping unit @u of @o, at most @max, with their
 * segments' generations.  mlock held. */
static uint32_t unit_map(struct coil_store *s, struct object *o, uint64_t u,
			 struct blobd **bv, uint32_t *gv, uint32_t max)
{
	struct extmap_iter it;
	const struct ext *e;
	uint64_t lo = u * s->max_blob, hi;
	uint32_t n = 0;

	if (o->removed || lo >= o->size)
		return 0;
	hi = COIL_MIN(lo + s->max_blob, o->size);
	extmap_iter_init(&it, &o->map, lo);
	while (n < max && (e = extmap_iter_next(&it)) && e->off < hi) {
		bool dup = false;

		for (uint32_t i = 0; i < n; i++)
			dup |= bv[i] == e->b;
		/* in memory: nothing to fetch; a packed raw blob under a
		 * block (unaligned): left to the demand read, which reads
		 * around it */
		if (dup || blobd_is_mem(e->b) ||
		    (e->b->codec == FMT_CODEC_RAW && e->b->dev_off % FMT_BLOCK))
			continue;
		bv[n] = e->b;
		gv[n] = s->segs[seg_of(s, e->b->dev_off)].gen;
		n++;
	}
	return n;
}

/* pf_resident_fn: every stored blob of the unit is in the cache. */
static bool unit_resident(void *arg, struct pf_unit id)
{
	struct ra_stream *st = arg;
	struct coil_store *s = st->s;
	struct blobd *bv[RA_JOB_BLOBS];
	uint32_t gv[RA_JOB_BLOBS], n;
	bool all = true;

	pthread_mutex_lock(&s->mlock);
	n = unit_map(s, st->obj, id.blob, bv, gv, RA_JOB_BLOBS);
	for (uint32_t i = 0; i < n && all; i++)
		all = bcache_contains(s, bv[i], gv[i]);
	pthread_mutex_unlock(&s->mlock);
	return n > 0 && all;
}

static struct ra_job *job_take(struct ra_stream *st)
{
	if (!st->jobs) {
		st->jobs = calloc(RA_JOBS, sizeof(*st->jobs));
		if (!st->jobs)
			return NULL; /* no readahead now; demand reads */
		for (uint32_t i = 0; i < RA_JOBS; i++)
			st->jobs[i].st = st;
	}
	for (uint32_t i = 0; i < RA_JOBS; i++) {
		if (!st->jobs[i].busy) {
			st->jobs[i].busy = true;
			st->busy++;
			return &st->jobs[i];
		}
	}
	return NULL;
}

static void job_put(struct ra_stream *st, struct ra_job *j)
{
	COIL_ASSERT(j->busy && st->busy > 0);
	j->busy = false;
	j->nb = 0;
	j->waiters = NULL;
	if (--st->busy == 0)
		pthread_cond_broadcast(&st->idle);
}

/* Map the job's unit to blobs and take buffers (st->mu held).  Blobs
 * already cached are skipped.  @return blobs to read. */
static uint32_t job_prepare(struct ra_stream *st, struct ra_job *j)
{
	struct coil_store *s = st->s;
	struct blobd *bv[RA_JOB_BLOBS];
	uint32_t gv[RA_JOB_BLOBS], n;

	j->nb = 0;
	j->waiters = NULL;
	pthread_mutex_lock(&s->mlock);
	n = unit_map(s, st->obj, j->w.id.blob, bv, gv, RA_JOB_BLOBS);
	for (uint32_t i = 0; i < n; i++) {
		struct ra_jblob *jb;

		if (bcache_contains(s, bv[i], gv[i]))
			continue;
		jb = &j->bl[j->nb++];
		jb->b = bv[i];
		jb->gen = gv[i];
		blobd_ref(jb->b);
		/* the segment cannot be freed while a read holds it */
		atomic_fetch_add(&s->segs[seg_of(s, jb->b->dev_off)].readers, 1);
	}
	pthread_mutex_unlock(&s->mlock);

	for (uint32_t i = 0; i < j->nb; i++) {
		struct ra_jblob *jb = &j->bl[i];
		struct blobd *b = jb->b;

		jb->job = j;
		jb->res = 0;
		jb->iobuf = jb->val = NULL;
		jb->direct = NULL;
		jb->decoding = false;
		blobd_to_fmt(b, &jb->fb);
		if (b->codec == FMT_CODEC_RAW) {
			/* raw blobs start 4 KiB aligned: read the whole blob
			 * straight into the cache value */
			jb->rd_off = b->dev_off;
			jb->rd_len = (uint32_t)COIL_ALIGN_UP(b->logical_len,
							     FMT_BLOCK);
			jb->val = cache_alloc_value(jb->rd_len);
			jb->iobuf = jb->val;
		} else {
			uint64_t a = COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK);
			uint64_t z = COIL_ALIGN_UP(b->dev_off + b->stored_len,
						   FMT_BLOCK);
			jb->rd_off = a;
			jb->rd_len = (uint32_t)(z - a);
			/* the value is taken when the decode starts, unless a
			 * demand read adopted the blob by then */
			jb->iobuf = bufpool_get(&s->bp, jb->rd_len);
		}
		if (!jb->iobuf)
			jb->res = 1; /* no memory: skipped, not a failure */
	}
	return j->nb;
}

static void job_finish(struct ra_job *j);

static void job_decoded(struct pool_req *preq, void *arg)
{
	struct ra_job *j = arg;

	(void)preq;
	for (uint32_t i = 0; i < j->ntasks; i++) {
		if (j->tasks[i].result < 0) {
			j->bl[j->task_blob[i]].res = -EIO;
			stat_add(&j->st->s->st.csum_failures, 1);
		}
	}
	job_finish(j);
}

static void job_io_all_done(struct ra_job *j)
{
	struct coil_store *s = j->st->s;
	struct rblob *direct[RA_JOB_BLOBS];

	/* From here no demand read adopts a blob of this job: it gets the
	 * blob through the cache like any waiter. */
	pthread_mutex_lock(&j->st->mu);
	for (uint32_t i = 0; i < j->nb; i++) {
		j->bl[i].decoding = true;
		direct[i] = j->bl[i].direct;
	}
	pthread_mutex_unlock(&j->st->mu);

	j->ntasks = 0;
	for (uint32_t i = 0; i < j->nb; i++) {
		struct ra_jblob *jb = &j->bl[i];
		uint8_t *dst;

		if (jb->res != 0 || jb->b->codec == FMT_CODEC_RAW)
			continue;
		if (direct[i]) {
			struct rreq *r = direct[i]->r;

			dst = r->dst + r->pc[direct[i]->piece].dst;
		} else {
			jb->val = cache_alloc_value(jb->b->logical_len);
			if (!jb->val) {
				jb->res = 1; /* no memory: skipped */
				continue;
			}
			dst = jb->val;
		}
		read_decode_task(s, &j->tasks[j->ntasks], &jb->fb, jb->b,
				 jb->iobuf, jb->rd_off, dst);
		j->task_blob[j->ntasks++] = i;
	}
	if (j->ntasks == 0) {
		job_finish(j);
		return;
	}
	if (pool_submit(s->pool, &j->preq, j->tasks, j->ntasks, job_decoded,
			j, POOL_NONBLOCK) == 0)
		return;
	/* Saturated: decode here, with the demand path's own routine. */
	read_decode_inline(s, j->tasks, j->ntasks);
	job_decoded(&j->preq, j);
}

static void job_io_done(struct uring_io *io, int res)
{
	struct ra_jblob *jb = io->arg;
	struct ra_job *j = jb->job;
	struct coil_store *s = j->st->s;

	/* a raw blob is read whole from its start: all its sectors */
	res = read_io_result(s, res, &jb->fb, jb->b, jb->iobuf, jb->rd_off,
			     jb->rd_len);
	if (res < 0)
		jb->res = res;
	stat_add(&s->st.dev_bytes_read, jb->rd_len);
	if (atomic_fetch_sub(&j->pending, 1) == 1)
		job_io_all_done(j);
}

/* Submit the prepared jobs of a start list (no lock held). */
static void jobs_submit(struct ra_job *list)
{
	while (list) {
		struct ra_job *j = list;
		struct coil_store *s = j->st->s;

		list = j->next;
		j->next = NULL;
		atomic_fetch_add(&s->ras->jobs_started, 1);
		atomic_store(&j->pending, j->nb + 1);
		for (uint32_t i = 0; i < j->nb; i++) {
			struct ra_jblob *jb = &j->bl[i];
			int rc;

			if (jb->res != 0) {
				atomic_fetch_sub(&j->pending, 1);
				continue;
			}
			uring_io_prep(&jb->io, URING_OP_READ, jb->iobuf,
				      jb->rd_len, jb->rd_off, job_io_done, jb);
			rc = uring_submit(s->ring, &jb->io);
			if (rc < 0)
				job_io_done(&jb->io, rc);
		}
		if (atomic_fetch_sub(&j->pending, 1) == 1)
			job_io_all_done(j);
	}
}

static void fail_record(struct ra_stream *st, struct pf_unit u,
			const struct ra_jblob *jb)
{
	struct ra_fail *f = &st->fails[st->nfails++ % RA_FAILS];

	f->u = u;
	f->dev_off = jb->b->dev_off;
	f->gen = jb->gen;
	f->err = jb->res;
}

/* The retained failure of unit @u applies to blob @rb only if it is that
 * very stored blob. */
static bool fail_matches(struct ra_stream *st, struct pf_unit u,
			 const struct rblob *rb)
{
	uint32_t n = COIL_MIN(st->nfails, RA_FAILS);

	for (uint32_t i = 0; i < n; i++) {
		const struct ra_fail *f = &st->fails[i];
		if (pf_unit_eq(f->u, u) && f->dev_off == rb->b->dev_off &&
		    f->gen == rb->gen)
			return true;
	}
	return false;
}

/* A job's failure to fetch a whole blob is @rb's failure too only when
 * @rb needs what the job needed: all of a compressed blob (one checksum,
 * one decode), or all of a raw one.  A raw blob is checked per 4 KiB
 * sector, so a read of some of its sectors reads them itself: one bad
 * sector must not fail a read of the good ones next to it. */
static bool fail_covers(const struct rblob *rb)
{
	return rb->b->codec != FMT_CODEC_RAW || read_blob_whole(rb);
}

/* Start queued work in free slots (st->mu held); prepared jobs are pushed
 * on *@list for jobs_submit after the unlock. */
static void dispatch(struct ra_stream *st, struct ra_job **list)
{
	struct pf_work w;

	while (!st->closing && st->busy < RA_JOBS_AHEAD &&
	       pf_queue_len(&st->m) > 0) {
		struct ra_job *j = job_take(st);

		if (!j || pf_begin_next(&st->m, &w) != 1) {
			if (j)
				job_put(st, j);
			break;
		}
		j->st = st;
		j->w = w;
		if (job_prepare(st, j) == 0) {
			/* a hole, or all of it cached meanwhile */
			pf_complete(&st->m, &w, 0);
			job_put(st, j);
			continue;
		}
		j->next = *list;
		*list = j;
	}
	if (st->cancel_pending && pf_is_idle(&st->m)) {
		pf_finish_cancellation(&st->m, NULL, NULL);
		st->nfails = 0;
		st->cancel_pending = false;
	}
}

static void job_finish(struct ra_job *j)
{
	struct ra_stream *st = j->st;
	struct coil_store *s = st->s;
	struct ra_job *list = NULL;
	struct rblob *waiters, *rb;
	bool fenced;
	int err = 0;
	uint64_t now;

	for (uint32_t i = 0; i < j->nb; i++)
		if (j->bl[i].res < 0 && err == 0)
			err = j->bl[i].res;
	pthread_mutex_lock(&st->mu);
	fenced = j->w.gen != pf_generation(&st->m);
	waiters = j->waiters;
	pthread_mutex_unlock(&st->mu);

	/* Publish outside st->mu.  A fenced job's bytes are still the right
	 * bytes for their key (keys never change meaning), but nobody asked
	 * for them: return the memory unless a demand read is waiting. */
	for (uint32_t i = 0; i < j->nb; i++) {
		struct ra_jblob *jb = &j->bl[i];

		if (jb->res == 0 && jb->direct) {
			/* decoded into the adopting read's buffer */
			atomic_fetch_add(&s->ras->blobs_fetched, 1);
		} else if (jb->res == 0 && (!fenced || waiters)) {
			struct cache_key k = { jb->b->dev_off, jb->gen };
			int rc = cache_insert(s->cache, &k, jb->val,
					      jb->b->logical_len,
					      fenced ? 0 : CACHE_INSERT_PREFETCH,
					      NULL);
			if (rc >= 0)
				jb->val = NULL;
			atomic_fetch_add(&s->ras->blobs_fetched, 1);
		} else if (jb->res == 0) {
			atomic_fetch_add(&s->ras->discarded_blobs, 1);
		} else if (jb->res > 0) {
			atomic_fetch_add(&s->ras->blobs_skipped, 1);
		}
		if (jb->b->codec != FMT_CODEC_RAW)
			bufpool_put(&s->bp, jb->iobuf);
		cache_free_value(jb->val);
		jb->iobuf = jb->val = NULL;
	}

	pthread_mutex_lock(&st->mu);
	/* under st->mu, as demands hooking on the job stamp pf_wait_ns: no
	 * waiter's stamp is later than this (read before the lock, one hooked
	 * in between made the wait negative, saturating demand_wait_ns) */
	now = coil_now_ns();
	waiters = j->waiters;
	if (pf_complete(&st->m, &j->w, err) == PF_FAILED) {
		for (uint32_t i = 0; i < j->nb; i++)
			if (j->bl[i].res < 0)
				fail_record(st, j->w.id, &j->bl[i]);
	}
	for (rb = waiters; rb; rb = rb->pf_next) {
		int e = 0;
		int rc = pf_resolve_demand(&st->m, j->w.id,
					   now - rb->pf_wait_ns, &e);

		(void)rc;
		/* the read's own blob decides: its failure is the read's
		 * error; success leaves the blob in the cache */
		for (uint32_t i = 0; i < j->nb; i++) {
			if (j->bl[i].b == rb->b && j->bl[i].gen == rb->gen &&
			    j->bl[i].res < 0 && fail_covers(rb))
				rb->res = j->bl[i].res;
		}
	}
	for (uint32_t i = 0; i < j->nb; i++) {
		struct ra_jblob *jb = &j->bl[i];
		COUNT_SUB(&s->segs[seg_of(s, jb->b->dev_off)].readers, 1);
		blobd_unref(jb->b);
		jb->b = NULL;
	}
	job_put(st, j);
	dispatch(st, &list);
	pthread_mutex_unlock(&st->mu);
	/* From here the stream may be gone (close waits only for the slots),
	 * unless the start list holds slots again. */
	jobs_submit(list);
	while (waiters) {
		rb = waiters;
		waiters = rb->pf_next;
		rb->pf_next = NULL;
		if (rb->res == 0 && !rb->direct)
			bcache_lookup(s, rb);
		read_blob_resume(rb);
	}
}

int readahead_open(struct coil_obj *h)
{
	struct coil_store *s = h->s;
	struct ra_stream *st;
	struct ra_config cfg;
	int rc;

	__atomic_store_n(&h->ra, NULL, __ATOMIC_RELEASE);
	if (!s->prefetch || !s->cache || !s->ras)
		return 0; /* readahead needs somewhere to publish */
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->s = s;
	st->obj = h->obj;
	st->obj_id = h->obj->id;
	ra_config_init(&cfg, s->max_blob);
	cfg.window_max_blobs = RA_WINDOW_MAX;
	cfg.refill_blobs = RA_REFILL;
	rc = ra_init(&st->ra, &cfg);
	if (rc == 0)
		rc = pf_init(&st->m, RA_QUEUE_CAP, 0);
	if (rc < 0) {
		free(st);
		return rc;
	}
	pthread_mutex_init(&st->mu, NULL);
	pthread_cond_init(&st->idle, NULL);
	pthread_mutex_lock(&s->ras->mu);
	st->next = s->ras->live;
	if (st->next)
		st->next->prev = st;
	s->ras->live = st;
	s->ras->streams++;
	pthread_mutex_unlock(&s->ras->mu);
	__atomic_store_n(&h->ra, st, __ATOMIC_RELEASE);
	return 0;
}

static void apply(struct ra_stream *st, const struct ra_advice *adv)
{
	if (adv->cancel != RA_CANCEL_NONE)
		st->cancel_pending = true;
	if (adv->kind == RA_NONE && adv->cancel == RA_CANCEL_NONE)
		return;
	pf_apply(&st->m, &st->ra, st->obj_id, adv, unit_resident, st,
		 coil_now_ns());
}

void readahead_close(struct coil_obj *h)
{
	struct ra_stream *st = __atomic_exchange_n(&h->ra, NULL,
						   __ATOMIC_ACQ_REL);
	struct ra_store *rs;
	struct ra_advice adv;
	struct pf_report rep;

	if (!st)
		return;
	rs = st->s->ras;
	pthread_mutex_lock(&st->mu);
	st->closing = true;
	ra_on_close(&st->ra, &adv);
	apply(st, &adv);
	/* in-flight jobs hold buffers, blob references and segment readers:
	 * wait for their I/O to end before the stream goes away */
	while (st->busy)
		pthread_cond_wait(&st->idle, &st->mu);
	pf_finish_cancellation(&st->m, NULL, NULL);
	pf_report_get(&st->m, &rep);
	pthread_mutex_unlock(&st->mu);

	pthread_mutex_lock(&rs->mu);
	if (st->prev)
		st->prev->next = st->next;
	else
		rs->live = st->next;
	if (st->next)
		st->next->prev = st->prev;
	pf_report_merge(&rs->closed, &rep);
	ra_stats_add(&rs->ra_closed, &st->ra.stats);
	pthread_mutex_unlock(&rs->mu);

	pf_destroy(&st->m);
	free(st->jobs);
	pthread_mutex_destroy(&st->mu);
	pthread_cond_destroy(&st->idle);
	free(st);
}

static uint64_t obj_size(struct ra_stream *st)
{
	uint64_t size;

	pthread_mutex_lock(&st->s->mlock);
	size = st->obj->removed ? 0 : st->obj->size;
	pthread_mutex_unlock(&st->s->mlock);
	return size;
}

/* Start queued unit @u now in job @j for a demand that wants it (st->mu
 * held); the job goes on *@list to be submitted after st->mu.  @return
 * true if the unit is now in flight. */
static bool demand_promote(struct ra_stream *st, struct ra_job *j,
			   struct pf_unit u, struct ra_job **list)
{
	struct coil_store *s = st->s;
	struct pf_work w;

	if (pf_begin_unit(&st->m, u, &w) != 1) {
		job_put(st, j);
		return false;
	}
	atomic_fetch_add(&s->ras->demand_promotions, 1);
	j->st = st;
	j->w = w;
	if (job_prepare(st, j) == 0) {
		pf_complete(&st->m, &w, 0);
		job_put(st, j);
	} else {
		j->next = *list;
		*list = j;
	}
	return true;
}

/* Unit @u is in flight: wait for the job fetching @rb's blob (st->mu
 * held).  @return 1 if @rb now waits for it (read_blob_resume follows),
 * 0 if no job holds that blob (the read fetches it itself). */
static int demand_join(struct ra_stream *st, struct pf_unit u,
		       struct rblob *rb)
{
	for (uint32_t i = 0; st->jobs && i < RA_JOBS; i++) {
		struct ra_job *j = &st->jobs[i];

		if (!j->busy || !pf_unit_eq(j->w.id, u))
			continue;
		for (uint32_t k = 0; k < j->nb; k++) {
			/* b and gen are set under st->mu; res is not (the
			 * I/O may be ending): a blob that failed hands its
			 * error to the waiter */
			struct ra_jblob *jb = &j->bl[k];

			if (jb->b != rb->b || jb->gen != rb->gen)
				continue;
			/* a read that wants the whole compressed blob has it
			 * decoded into its own buffer, if the decode has not
			 * started: no cache value, no copy */
			if (!jb->decoding && !jb->direct && jb->iobuf &&
			    rb->b->codec != FMT_CODEC_RAW &&
			    read_blob_whole(rb)) {
				jb->direct = rb;
				rb->direct = true;
			}
			rb->pf_wait_ns = coil_now_ns();
			rb->pf_next = j->waiters;
			j->waiters = rb;
			return 1;
		}
	}
	return 0;
}

int readahead_demand(struct coil_obj *h, struct rreq *r, struct rblob *rb)
{
	struct ra_stream *st = stream_of(h);
	struct coil_store *s = h->s;
	struct ra_job *list = NULL, *j;
	struct pf_unit u;
	int obs, ret = 0, e = 0;
	bool recheck = false;

	if (!st)
		return read_blob_cached(rb) ? 2 : 0;
	u.obj_id = st->obj_id;
	u.blob = unit_of(s, r->off + r->pc[rb->piece].dst);
	pthread_mutex_lock(&st->mu);
	obs = pf_observe_demand(&st->m, u);
	if (read_blob_cached(rb)) {
		/* served by the cache; consume a published prefetch of the
		 * unit so the report counts it ready before demand */
		if (obs == PF_OBS_READY &&
		    pf_resolve_demand(&st->m, u, PF_NOT_WAITED, &e) ==
			    PF_RES_READY)
			atomic_fetch_add(&s->ras->ready_no_wait, 1);
		ret = 2;
		goto out;
	}
	if (obs == PF_OBS_QUEUED && !st->closing &&
	    st->busy < RA_JOBS && (j = job_take(st))) {
		/* promote it: start it now, then wait for it like any job */
		if (demand_promote(st, j, u, &list))
			obs = PF_OBS_IN_FLIGHT;
	} else if (obs == PF_OBS_QUEUED && pf_withdraw(&st->m, u) == 1) {
		/* No slot to promote it: this read fetches the unit itself,
		 * and the queued prefetch must not fetch it a second time
		 * (a cache value nobody takes: fresh memory, and a page
		 * fault per page, for every such blob of a scan). */
		atomic_fetch_add(&s->ras->demand_takeovers, 1);
	}
	if (obs == PF_OBS_IN_FLIGHT) {
		ret = demand_join(st, u, rb);
	} else if (obs == PF_OBS_READY || obs == PF_OBS_FAILED) {
		int res = pf_resolve_demand(&st->m, u, PF_NOT_WAITED, &e);

		if (res == PF_RES_FAILED) {
			if (fail_matches(st, u, rb) && fail_covers(rb)) {
				rb->res = e;
				ret = 2;
			} else {
				atomic_fetch_add(&s->ras->fail_mismatch, 1);
			}
		} else if (res == PF_RES_READY) {
			/* The job put the value in the cache before it
			 * published READY; the caller looked before that.
			 * Look again (outside st->mu): a second fetch and
			 * decode of the blob is the alternative.  Not there:
			 * evicted, read it. */
			recheck = true;
		}
	}
out:
	pthread_mutex_unlock(&st->mu);
	jobs_submit(list);
	if (recheck && bcache_lookup(s, rb)) {
		atomic_fetch_add(&s->ras->ready_no_wait, 1);
		ret = 2;
	}
	return ret;
}

/* The tail of a policy event, called with st->mu held (the policy ran under
 * it): apply its advice when it gave one (@rc 0), take the jobs that can
 * start, unlock, and submit them outside the lock. */
static void event_end(struct ra_stream *st, int rc,
		      const struct ra_advice *adv)
{
	struct ra_job *list = NULL;

	if (rc == 0)
		apply(st, adv);
	dispatch(st, &list);
	pthread_mutex_unlock(&st->mu);
	jobs_submit(list);
}

void readahead_on_read(struct coil_obj *h, uint64_t off, uint64_t len)
{
	struct ra_stream *st = stream_of(h);
	struct ra_advice adv;
	uint64_t others = atomic_load(&h->rd_bytes); /* not this read */
	int rc;

	if (!st)
		return;
	pthread_mutex_lock(&st->mu);
	rc = ra_on_read(&st->ra, off, len, obj_size(st), &adv);
	/* A reader that keeps a full window of other reads in flight (say
	 * 4 x 1 MiB at a time) is its own readahead: the device and the pool
	 * never wait for it, and a prefetch ahead of it would only decode each
	 * blob into a cache value to be copied out a moment later (measured:
	 * a third more CPU per byte, and slower).  It counts as deep until
	 * RA_DEEP_HOLD reads in a row found less than that: its completions
	 * come in bursts, and a read submitted right after a burst (few or
	 * none of its others still in flight) is no sign that it went
	 * shallow.  The policy still follows the run, so readahead resumes
	 * once the reader is shallow; a cancellation stands. */
	if (others >= (uint64_t)st->ra.cfg.window_max_blobs *
			      st->ra.cfg.blob_bytes)
		st->deep = RA_DEEP_HOLD;
	else if (st->deep)
		st->deep--;
	if (rc == 0 && adv.kind == RA_READAHEAD && st->deep) {
		ra_decline(&st->ra, &adv);
		atomic_fetch_add(&st->s->ras->deep_reader_skips, 1);
	}
	event_end(st, rc, &adv);
}

void readahead_on_write(struct coil_obj *h, uint64_t off, uint64_t len)
{
	struct ra_stream *st = stream_of(h);
	struct ra_advice adv;

	if (!st)
		return;
	pthread_mutex_lock(&st->mu);
	event_end(st, ra_on_write(&st->ra, off, len, &adv), &adv);
}

void readahead_on_truncate(struct coil_obj *h, uint64_t size)
{
	struct ra_stream *st = stream_of(h);
	struct ra_advice adv;

	if (!st)
		return;
	pthread_mutex_lock(&st->mu);
	event_end(st, ra_on_truncate(&st->ra, size, &adv), &adv);
}

int readahead_hint(struct coil_obj *h, uint64_t off, uint64_t len)
{
	struct ra_stream *st = stream_of(h);
	struct ra_job *list = NULL;
	struct ra_advice adv;
	int rc;

	if (!st)
		return 0; /* prefetch off: a hint may be dropped */
	pthread_mutex_lock(&st->mu);
	rc = ra_on_hint(&st->ra, off, len, obj_size(st), &adv);
	if (rc == 0 && adv.kind != RA_NONE)
		rc = pf_apply(&st->m, NULL, st->obj_id, &adv, unit_resident,
			      st, coil_now_ns());
	dispatch(st, &list);
	pthread_mutex_unlock(&st->mu);
	jobs_submit(list);
	return rc < 0 ? rc : 0;
}

int readahead_stats_json(struct coil_store *s, char *buf, size_t len)
{
	struct ra_store *rs = s->ras;
	struct pf_report rep;
	struct ra_stats ras;
	char rj[1024];
	uint64_t open = 0;

	memset(&rep, 0, sizeof(rep));
	memset(&ras, 0, sizeof(ras));
	if (rs) {
		pthread_mutex_lock(&rs->mu);
		rep = rs->closed;
		ras = rs->ra_closed;
		for (struct ra_stream *st = rs->live; st; st = st->next) {
			struct pf_report r1;

			pthread_mutex_lock(&st->mu);
			pf_report_get(&st->m, &r1);
			ra_stats_add(&ras, &st->ra.stats);
			pthread_mutex_unlock(&st->mu);
			pf_report_merge(&rep, &r1);
			open++;
		}
		pthread_mutex_unlock(&rs->mu);
	}
	if (pf_report_to_json(&rep, rj, sizeof(rj)) < 0)
		rj[0] = 0;
#define U(x) ((unsigned long long)(x))
	return snprintf(buf, len,
		"{\"enabled\":%s,\"hints\":%llu,\"streams_open\":%llu,"
		"\"streams_total\":%llu,\"jobs_started\":%llu,"
		"\"blobs_fetched\":%llu,\"blobs_skipped_nomem\":%llu,"
		"\"blobs_discarded\":%llu,\"demand_promotions\":%llu,"
		"\"demand_takeovers\":%llu,"
		"\"failures_not_matching\":%llu,\"ready_no_wait\":%llu,"
		"\"deep_reader_skips\":%llu,\"used_once_dropped\":%llu,\"report\":%s,"
		"\"readahead\":{\"reads\":%llu,\"sequential_reads\":%llu,"
		"\"random_reads\":%llu,\"rereads\":%llu,\"windows_grown\":%llu,"
		"\"blobs_advised\":%llu,\"hints\":%llu,\"cancel_pattern\":%llu,"
		"\"cancel_overwrite\":%llu,\"cancel_truncate\":%llu,"
		"\"cancel_close\":%llu}}",
		s->prefetch && s->cache ? "true" : "false",
		U(atomic_load(&s->st.prefetch_hints)), U(open),
		U(rs ? rs->streams : 0),
		U(rs ? atomic_load(&rs->jobs_started) : 0),
		U(rs ? atomic_load(&rs->blobs_fetched) : 0),
		U(rs ? atomic_load(&rs->blobs_skipped) : 0),
		U(rs ? atomic_load(&rs->discarded_blobs) : 0),
		U(rs ? atomic_load(&rs->demand_promotions) : 0),
		U(rs ? atomic_load(&rs->demand_takeovers) : 0),
		U(rs ? atomic_load(&rs->fail_mismatch) : 0),
		U(rs ? atomic_load(&rs->ready_no_wait) : 0),
		U(rs ? atomic_load(&rs->deep_reader_skips) : 0),
		U(atomic_load(&s->st.ra_use_once)),
		rj[0] ? rj : "{}",
		U(ras.reads), U(ras.sequential_reads), U(ras.random_reads),
		U(ras.rereads), U(ras.windows_grown), U(ras.blobs_advised),
		U(ras.hints), U(ras.cancels[RA_CANCEL_PATTERN]),
		U(ras.cancels[RA_CANCEL_OVERWRITE]),
		U(ras.cancels[RA_CANCEL_TRUNCATE]),
		U(ras.cancels[RA_CANCEL_CLOSE]));
#undef U
}
