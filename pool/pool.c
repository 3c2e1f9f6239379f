/* pool/pool.c — the scheduler: admission (backpressure or the semaphore),
 * the active ring, round-robin picks, delivery by ordinal, shutdown.
 *
 * Two admission modes.  Measured at 16 writers, a batch-level semaphore
 * serialises whole batches (p99/p50 4.9, every competing request parks ~50 ms) while the
 * task-level round-robin pool cut p99 by 68 % and wall by 29 % for +2.7 %
 * CPU.  Its hard-won corners, each pinned by a test in tests/test_pool.c:
 *   - an idle pool admits a request larger than the bound (else deadlock);
 *   - each worker has a private cursor (a shared one pins requests to
 *     workers when workers == active requests);
 *   - a request becomes visible to workers only once wholly admitted;
 *   - results reassemble by ordinal, never by execution order.
 *
 * One mutex guards all scheduler state.  A worker takes it once per task:
 * delivering the previous task's result and picking the next happen in the
 * same critical section, and the task itself runs with no lock held.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "pool/pool_internal.h"

static __thread struct pool_worker *tls_worker;

int pool_worker_index(void)
{
	return tls_worker ? (int)tls_worker->index : -1;
}

static bool on_worker_of(const struct pool *p)
{
	return tls_worker && tls_worker->pool == p;
}

/* ---- admission ------------------------------------------------------------ */

/* Fair mode bound.  The idle exception prevents a deadlock: with
 * in_flight == 0 nothing can ever drain, so a request larger than the
 * capacity (a 64-blob read against capacity 32) would wait forever. */
static bool fair_fits(const struct pool *p, uint32_t n)
{
	return p->in_flight == 0 || p->in_flight + n <= p->capacity;
}

/* Semaphore mode: a request reserves min(n, workers) worker slots. */
static unsigned sem_want(const struct pool *p, uint32_t n)
{
	return n < p->nworkers ? n : p->nworkers;
}

static bool sem_fits(const struct pool *p, uint32_t n)
{
	return p->slots_used + sem_want(p, n) <= p->nworkers;
}

/* Wake the head of the fair admission queue if its request now fits.  Only
 * the head: admission is FIFO, so nobody behind it could proceed anyway, and
 * waking all of them on every task completion would burn the CPU the
 * workers need. */
static void fair_wake_head(struct pool *p)
{
	struct pool_waiter *h = p->wait_head;

	if (h && (p->shutdown || fair_fits(p, h->need)))
		pthread_cond_signal(&h->cv);
}

static void waiter_unlink_head(struct pool *p)
{
	struct pool_waiter *h = p->wait_head;

	p->wait_head = h->next;
	if (!p->wait_head)
		p->wait_tail = NULL;
	p->waiters--;
	p->overtakes = 0;	/* a new head: its own budget of passes */
}

static void note_waiter(struct pool *p)
{
	p->waiters++;
	p->st.submits_blocked++;
	if (p->waiters > p->st.max_waiters)
		p->st.max_waiters = p->waiters;
}

/* Called with the lock held.  @return 0 admitted, -EAGAIN, -ESHUTDOWN. */
static int admit_fair(struct pool *p, uint32_t n, bool nonblock)
{
	struct pool_waiter w;

	if (fair_fits(p, n)) {
		if (!p->wait_head)
			return 0;
		/* A non-blocking caller (the ring thread) that fits may pass
		 * parked submitters: refusing it would push its work inline
		 * onto a thread that must not stall (the inline fallback was
		 * measured inflating CPU ~5x).  At most `workers`
		 * passes per head, so a parked request is delayed by a
		 * bounded amount of work and never starves. */
		if (nonblock && p->overtakes < p->nworkers) {
			p->overtakes++;
			p->st.nonblock_overtakes++;
			return 0;
		}
	}
	if (nonblock)
		return -EAGAIN;
	pthread_cond_init(&w.cv, NULL);
	w.need = n;
	w.next = NULL;
	if (p->wait_tail)
		p->wait_tail->next = &w;
	else
		p->wait_head = &w;
	p->wait_tail = &w;
	note_waiter(p);
	while (!p->shutdown && !(p->wait_head == &w && fair_fits(p, n)))
		pthread_cond_wait(&w.cv, &p->lock);
	if (p->shutdown) {
		/* pool_destroy wakes every waiter; unlink ourselves wherever
		 * we are in the list. */
		struct pool_waiter **pp = &p->wait_head, *prev = NULL;

		while (*pp != &w) {
			prev = *pp;
			pp = &(*pp)->next;
		}
		*pp = w.next;
		if (p->wait_tail == &w)
			p->wait_tail = prev;
		p->waiters--;
		pthread_cond_destroy(&w.cv);
		return -ESHUTDOWN;
	}
	waiter_unlink_head(p);
	pthread_cond_destroy(&w.cv);
	/* The next in line may fit as well (several small requests). */
	fair_wake_head(p);
	return 0;
}

/* The batch-level semaphore: one condvar, every waiter woken on each
 * release, no ordering among them.  Kept this simple on purpose: its
 * unfairness is part of what the fair-vs-semaphore benchmark measures. */
static int admit_sem(struct pool *p, uint32_t n, bool nonblock)
{
	if (sem_fits(p, n))
		return 0;
	if (nonblock)
		return -EAGAIN;
	note_waiter(p);
	while (!p->shutdown && !sem_fits(p, n))
		pthread_cond_wait(&p->sem_cv, &p->lock);
	p->waiters--;
	return p->shutdown ? -ESHUTDOWN : 0;
}

/* ---- submit / join -------------------------------------------------------- */

int pool_submit(struct pool *p, struct pool_req *r, struct pool_task *tasks,
		unsigned n, void (*done)(struct pool_req *r, void *arg),
		void *arg, unsigned flags)
{
	bool nonblock = flags & POOL_NONBLOCK;
	uint64_t t0 = coil_now_ns();
	int rc;

	if (!p || !r || !tasks || n == 0 || n > POOL_TASKS_MAX ||
	    (flags & ~POOL_NONBLOCK))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		rc = pool_task_check(&tasks[i]);
		if (rc < 0)
			return rc;
	}
	/* A worker parking on its own pool can deadlock it (the space it
	 * waits for is freed by workers); callbacks must not block. */
	if (!nonblock && on_worker_of(p))
		return -EDEADLK;

	memset(r, 0, sizeof(*r));
	r->pool_ = p;
	r->tasks_ = tasks;
	r->n_ = n;
	r->done_ = done;
	r->arg_ = arg;
	r->submit_ns_ = t0;
	r->m.tasks = n;
	for (unsigned i = 0; i < n; i++)
		tasks[i].result = -EINPROGRESS;

	pthread_mutex_lock(&p->lock);
	if (p->shutdown) {
		rc = -ESHUTDOWN;
	} else if (p->mode == POOL_MODE_SEMAPHORE) {
		rc = admit_sem(p, n, nonblock);
	} else {
		rc = admit_fair(p, n, nonblock);
	}
	if (rc < 0) {
		if (rc == -EAGAIN)
			p->st.submits_eagain++;
		pthread_mutex_unlock(&p->lock);
		return rc;
	}
	if (p->mode == POOL_MODE_SEMAPHORE) {
		r->slots_ = sem_want(p, n);
		p->slots_used += r->slots_;
		COIL_ASSERT(p->slots_used <= p->nworkers);
	}
	/* Visible to workers only now that the whole request is admitted. */
	pthread_cond_init(&r->cv_, NULL);
	r->state_ = POOL_REQ_QUEUED;
	r->id_ = ++p->next_id;
	r->m.admit_wait_ns = coil_now_ns() - t0;
	COIL_ASSERT(p->active_n < p->active_max);
	p->active[p->active_n++] = r;
	p->in_flight += n;
	if (p->in_flight > p->st.peak_in_flight)
		p->st.peak_in_flight = p->in_flight;
	p->st.requests_submitted++;
	if (n == 1)
		pthread_cond_signal(&p->work_cv);
	else
		pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int pool_join(struct pool_req *r)
{
	struct pool *p;
	int rc;

	/* pool_ was written by this (the submitting) thread; state_ is the
	 * workers' and is read only under the lock. */
	if (!r || !r->pool_)
		return -EINVAL;
	p = r->pool_;
	pthread_mutex_lock(&p->lock);
	if (r->state_ != POOL_REQ_QUEUED && r->state_ != POOL_REQ_COMPLETE) {
		pthread_mutex_unlock(&p->lock);
		return -EINVAL;
	}
	if (r->state_ != POOL_REQ_COMPLETE && on_worker_of(p)) {
		pthread_mutex_unlock(&p->lock);
		return -EDEADLK;
	}
	while (r->state_ != POOL_REQ_COMPLETE)
		pthread_cond_wait(&r->cv_, &p->lock);
	rc = r->status_;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int pool_req_status(const struct pool_req *r)
{
	if (!r || r->state_ != POOL_REQ_COMPLETE)
		return -EINVAL;
	return r->status_;
}

/* ---- workers -------------------------------------------------------------- */

static void active_remove(struct pool *p, size_t idx)
{
	COIL_ASSERT(idx < p->active_n);
	memmove(&p->active[idx], &p->active[idx + 1],
		(p->active_n - idx - 1) * sizeof(p->active[0]));
	p->active_n--;
}

/* Pick one task: round-robin over the active requests, one task per pick.
 * Lock held.  @return the request (ordinal in *ord) or NULL when idle. */
static struct pool_req *pick_one(struct pool *p, struct pool_worker *w,
				 uint32_t *ord)
{
	struct pool_req *r;
	size_t idx, n = p->active_n;

	if (n == 0)
		return NULL;
	if (p->mode == POOL_MODE_SEMAPHORE) {
		/* Batch granularity: the oldest admitted request runs
		 * whole, as a per-batch worker budget does. */
		idx = 0;
	} else {
		idx = w->cursor % n;
		/* The cursor alone can land on the request this worker just
		 * served when the ring shrank or grew between its picks;
		 * with >= 2 active that would let one request monopolise the
		 * worker, so step past it. */
		if (n >= 2 && p->active[idx]->id_ == w->last_id)
			idx = (idx + 1) % n;
	}
	r = p->active[idx];
	COIL_ASSERT(r->state_ == POOL_REQ_QUEUED && r->next_ < r->n_);
	*ord = r->next_++;

	if (r->id_ == w->last_id) {
		w->consecutive++;
	} else {
		w->consecutive = 1;
		w->last_id = r->id_;
	}
	if (n >= 2 && w->consecutive > p->st.max_consecutive_same_req)
		p->st.max_consecutive_same_req = w->consecutive;
	if (*ord == 0)
		r->first_ns_ = coil_now_ns();
#ifdef COIL_FAULT_SEAM
	if (r->tasks_[*ord].kind == POOL_TASK_TEST)
		r->tasks_[*ord].u.test.seq = p->pick_seq;
#endif
	p->pick_seq++;

	if (r->next_ == r->n_) {
		/* Drained: leave the ring; the next request slid into idx. */
		active_remove(p, idx);
		w->cursor = idx;
	} else {
		w->cursor = idx + 1;
	}
	return r;
}

/* Account one finished task.  Lock held.  @return true when it completed
 * the request (the caller then runs the callback, unlocked). */
static bool deliver(struct pool *p, struct pool_req *r, uint32_t ord,
		    int64_t res, uint64_t cpu_ns)
{
	COIL_ASSERT(r->done_n_ < r->n_);
	r->tasks_[ord].result = res;
	r->m.cpu_ns += cpu_ns;
	r->done_n_++;
	p->st.tasks_run++;
	p->st.cpu_ns += cpu_ns;
	if (res < 0)
		p->st.tasks_failed++;
	COIL_ASSERT(p->in_flight > 0);
	p->in_flight--;

	if (r->done_n_ < r->n_) {
		if (p->mode == POOL_MODE_FAIR)
			fair_wake_head(p);
		return false;
	}
	/* The first failure by ordinal, whatever order they ran in. */
	r->status_ = 0;
	for (uint32_t i = 0; i < r->n_; i++) {
		if (r->tasks_[i].result < 0) {
			r->status_ = (int)r->tasks_[i].result;
			break;
		}
	}
	r->m.queue_wait_ns = r->first_ns_ - r->submit_ns_;
	r->m.span_ns = coil_now_ns() - r->submit_ns_;
	r->state_ = POOL_REQ_COMPLETE;
	p->st.requests_completed++;
	if (p->mode == POOL_MODE_SEMAPHORE) {
		p->slots_used -= r->slots_;
		pthread_cond_broadcast(&p->sem_cv);
	} else {
		fair_wake_head(p);
	}
	pthread_cond_broadcast(&r->cv_);
	return true;
}

static void *worker_main(void *arg)
{
	struct pool_worker *w = arg;
	struct pool *p = w->pool;

	/* The thread's CPU clock is a system call (about 1 us on these
	 * guests, 2 % of a 64 KiB decode), so it is read once per task: the
	 * end of one task starts the next one's count when the worker goes
	 * straight on to it.  A task is thus charged with the pick and
	 * delivery around it too (a lock and a few stores); after a sleep or
	 * a completion callback (c0 = 0) the clock is read afresh, so neither
	 * is. */
	uint64_t c0 = 0;

	tls_worker = w;
	coil_thread_name("pool", (int)w->index);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct pool_req *r;
		uint32_t ord;
		uint64_t c1;
		int64_t res;
		void (*done)(struct pool_req *, void *);
		void *done_arg;

		r = pick_one(p, w, &ord);
		if (!r) {
			/* Drain before exit: shutdown waits for the ring to
			 * empty; tasks being run by other workers are
			 * delivered by those workers. */
			if (p->shutdown)
				break;
			pthread_cond_wait(&p->work_cv, &p->lock);
			c0 = 0;
			continue;
		}
		pthread_mutex_unlock(&p->lock);

		if (!c0)
			c0 = coil_thread_cpu_ns();
		res = pool_task_run(w, &r->tasks_[ord]);
		c1 = coil_thread_cpu_ns();

		pthread_mutex_lock(&p->lock);
		done = r->done_;
		done_arg = r->arg_;
		if (deliver(p, r, ord, res, c1 - c0) && done) {
			/* r belongs to the caller again once the callback is
			 * entered; the pool does not touch it after this. */
			pthread_mutex_unlock(&p->lock);
			done(r, done_arg);
			pthread_mutex_lock(&p->lock);
			c1 = 0; /* the next task reads the clock afresh */
		}
		c0 = c1;
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- lifecycle ------------------------------------------------------------ */

static void pool_free(struct pool *p)
{
	for (unsigned i = 0; p->workers && i < p->nworkers; i++) {
		ZSTD_freeCCtx(p->workers[i].cctx);
		ZSTD_freeDCtx(p->workers[i].dctx);
	}
	free(p->workers);
	free(p->active);
	pthread_cond_destroy(&p->work_cv);
	pthread_cond_destroy(&p->sem_cv);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->shutdown = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_cond_broadcast(&p->sem_cv);
	for (struct pool_waiter *w = p->wait_head; w; w = w->next)
		pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->workers[i].thread, NULL);
	/* Blocked submitters saw the flag and returned -ESHUTDOWN; wait for
	 * them to leave the lock before it is destroyed. */
	pthread_mutex_lock(&p->lock);
	while (p->waiters) {
		pthread_mutex_unlock(&p->lock);
		sched_yield();
		pthread_mutex_lock(&p->lock);
	}
	COIL_ASSERT(p->active_n == 0 && p->in_flight == 0);
	pthread_mutex_unlock(&p->lock);
}

int pool_create(const struct pool_opts *o, struct pool **out)
{
	struct pool *p;
	unsigned workers, qf;
	int rc = -ENOMEM;

	if (!o || !out || o->mode > POOL_MODE_SEMAPHORE)
		return -EINVAL;
	workers = o->workers ? o->workers : coil_ncpus();
	qf = o->queue_factor ? o->queue_factor : POOL_QUEUE_FACTOR_DEFAULT;
	if (workers > POOL_WORKERS_MAX || qf > POOL_QUEUE_FACTOR_MAX)
		return -EINVAL;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->sem_cv, NULL);
	p->mode = o->mode;
	p->nworkers = workers;
	p->capacity = (uint64_t)workers * qf;
	p->active_max = (size_t)p->capacity;
	p->active = calloc(p->active_max, sizeof(p->active[0]));
	p->workers = calloc(workers, sizeof(p->workers[0]));
	if (!p->active || !p->workers) {
		pool_free(p);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < workers; i++) {
		struct pool_worker *w = &p->workers[i];

		w->pool = p;
		w->index = i;
		w->cursor = i;
		w->cctx = ZSTD_createCCtx();
		w->dctx = ZSTD_createDCtx();
		if (!w->cctx || !w->dctx) {
			pool_free(p);
			return -ENOMEM;
		}
	}
	for (unsigned i = 0; i < workers; i++) {
		rc = pthread_create(&p->workers[i].thread, NULL, worker_main,
				    &p->workers[i]);
		if (rc) {
			pool_stop(p);
			pool_free(p);
			return -rc;
		}
		p->started++;
	}
	*out = p;
	return 0;
}

void pool_destroy(struct pool *p)
{
	if (!p)
		return;
	/* From a worker this would join itself. */
	COIL_ASSERT(!on_worker_of(p));
	pool_stop(p);
	pool_free(p);
}

void pool_stats(struct pool *p, struct pool_stats *out)
{
	if (!out)
		return;
	if (!p) {
		memset(out, 0, sizeof(*out));
		return;
	}
	pthread_mutex_lock(&p->lock);
	*out = p->st;
	out->workers = p->nworkers;
	out->mode = p->mode;
	out->capacity = p->capacity;
	out->in_flight = p->in_flight;
	out->active = p->active_n;
	pthread_mutex_unlock(&p->lock);
}
