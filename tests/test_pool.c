/* tests/test_pool.c — the worker pool's scheduler: ordinal reassembly,
 * backpressure, the idle-admission deadlock, round-robin fairness, shutdown,
 * error isolation, non-blocking submit, and the semaphore mode it replaced.
 * Each corner the seed (000) found the hard way is pinned here.  Task
 * durations come from the seam-only POOL_TASK_TEST kind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "pool/pool.h"
#include "tests/test_util.h"

static struct pool *mk(unsigned workers, unsigned qf, unsigned mode)
{
	struct pool_opts o = { .workers = workers, .queue_factor = qf, .mode = mode };
	struct pool *p = NULL;

	cr_assert_eq(pool_create(&o, &p), 0);
	cr_assert_not_null(p);
	return p;
}

static void test_task(struct pool_task *t, uint64_t value, uint32_t sleep_us,
		      uint32_t spin_us, int fail)
{
	memset(t, 0, sizeof(*t));
	t->kind = POOL_TASK_TEST;
	t->u.test.value = value;
	t->u.test.sleep_us = sleep_us;
	t->u.test.spin_us = spin_us;
	t->u.test.fail = fail;
	t->u.test.worker = -1;
}

/* Tasks given a gate hold their worker until the test opens it. */
static void gate_open(int *gate)
{
	__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
}

Test(pool, ordinal_order_under_random_durations)
{
	enum { R = 6, N = 24 };
	struct pool *p = mk(3, 8, POOL_MODE_FAIR);
	static struct pool_task t[R][N];
	static struct pool_req req[R];
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	bool out_of_order = false;

	for (int r = 0; r < R; r++) {
		for (int i = 0; i < N; i++)
			test_task(&t[r][i], (uint64_t)r * 1000 + i, (uint32_t)tu_xorshift(&seed) % 400, 0, 0);
		cr_assert_eq(pool_submit(p, &req[r], t[r], N, NULL, NULL, 0), 0);
	}
	for (int r = 0; r < R; r++) {
		cr_assert_eq(pool_join(&req[r]), 0);
		cr_assert_eq(req[r].m.tasks, N);
		for (int i = 0; i < N; i++) {
			cr_assert_eq(t[r][i].result, (int64_t)r * 1000 + i,
				     "request %d ordinal %d", r, i);
			if (i && t[r][i].u.test.seq < t[r][i - 1].u.test.seq)
				out_of_order = true;
		}
		cr_assert_leq(req[r].m.queue_wait_ns, req[r].m.span_ns);
	}
	/* Picks are in ordinal order within a request (the pending queue is a
	 * FIFO), but completion order is not: the slots still read in order. */
	cr_assert_not(out_of_order);
	pool_destroy(p);
}

/* 16 submitters against capacity 8: the bound holds and every request gets
 * its own results. */
struct sub_arg {
	struct pool *p;
	int id;
	int failures;
};

static void *submitter(void *a_)
{
	struct sub_arg *a = a_;
	struct pool_task t[8];
	struct pool_req r;
	uint64_t seed = 0x1234567ull + (uint64_t)a->id * 7919;

	for (int k = 0; k < 12; k++) {
		unsigned n = 1 + (uint32_t)tu_xorshift(&seed) % 8;

		for (unsigned i = 0; i < n; i++)
			test_task(&t[i], (uint64_t)a->id << 32 | (uint64_t)k << 8 | i,
				  (uint32_t)tu_xorshift(&seed) % 150, 0, 0);
		if (pool_submit(a->p, &r, t, n, NULL, NULL, 0) != 0 || pool_join(&r) != 0) {
			a->failures++;
			continue;
		}
		for (unsigned i = 0; i < n; i++)
			if (t[i].result != (int64_t)((uint64_t)a->id << 32 | (uint64_t)k << 8 | i))
				a->failures++;
	}
	return NULL;
}

Test(pool, inflight_bound_holds_with_16_submitters)
{
	struct pool *p = mk(2, 4, POOL_MODE_FAIR);
	pthread_t th[16];
	struct sub_arg a[16];
	struct pool_stats st;

	for (int i = 0; i < 16; i++) {
		a[i] = (struct sub_arg){ .p = p, .id = i };
		cr_assert_eq(pthread_create(&th[i], NULL, submitter, &a[i]), 0);
	}
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(a[i].failures, 0, "submitter %d", i);
	}
	pool_stats(p, &st);
	cr_assert_eq(st.capacity, 8);
	cr_assert_leq(st.peak_in_flight, st.capacity, "peak %lu > capacity %lu",
		      (unsigned long)st.peak_in_flight, (unsigned long)st.capacity);
	cr_assert_gt(st.submits_blocked, 0, "16 submitters never hit the bound");
	cr_assert_eq(st.requests_completed, st.requests_submitted);
	cr_assert_eq(st.in_flight, 0);
	pool_destroy(p);
}

/* Regression: a naive `in_flight + n > capacity` wait never
 * admits a request larger than the capacity into an idle pool — in_flight
 * is 0 and cannot drop further.  40 tasks against capacity 32. */
Test(pool, idle_pool_admits_oversized_request, .timeout = 20)
{
	struct pool *p = mk(4, 8, POOL_MODE_FAIR);
	struct pool_task t[40];
	struct pool_req r;
	struct pool_stats st;

	for (int i = 0; i < 40; i++)
		test_task(&t[i], (uint64_t)i, 0, 0, 0);
	cr_assert_eq(pool_submit(p, &r, t, 40, NULL, NULL, POOL_NONBLOCK), 0);
	cr_assert_eq(pool_join(&r), 0);
	for (int i = 0; i < 40; i++)
		cr_assert_eq(t[i].result, i);
	pool_stats(p, &st);
	cr_assert_eq(st.capacity, 32);
	cr_assert_eq(st.peak_in_flight, 40);
	/* ...and the pool is idle again, so a second one is admitted too. */
	cr_assert_eq(pool_submit(p, &r, t, 40, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&r), 0);
	pool_destroy(p);
}

/* While a blocker runs on the only worker, three requests queue; the worker
 * must then alternate A0 B0 C0 A1 B1 C1 ... and never pick one request twice
 * in a row while two or more are active. */
Test(pool, round_robin_one_task_per_pick)
{
	struct pool *p = mk(1, 16, POOL_MODE_FAIR);
	struct pool_task blk, t[3][4];
	struct pool_req rb, r[3];
	struct pool_stats st;
	int gate = 0;

	test_task(&blk, 0, 0, 0, 0);
	blk.u.test.gate = &gate;
	cr_assert_eq(pool_submit(p, &rb, &blk, 1, NULL, NULL, 0), 0);
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < 4; i++)
			test_task(&t[k][i], 0, 0, 0, 0);
		cr_assert_eq(pool_submit(p, &r[k], t[k], 4, NULL, NULL, 0), 0);
	}
	gate_open(&gate);
	cr_assert_eq(pool_join(&rb), 0);
	for (int k = 0; k < 3; k++)
		cr_assert_eq(pool_join(&r[k]), 0);
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 4; i++)
			cr_assert_eq(t[k][i].u.test.seq, blk.u.test.seq + 1 + i * 3 + k,
				     "request %d ordinal %d picked at %lu", k, i,
				     (unsigned long)t[k][i].u.test.seq);
	pool_stats(p, &st);
	cr_assert_eq(st.max_consecutive_same_req, 1);
	pool_destroy(p);
}

/* Regression: with a SHARED cursor and workers == active
 * requests, the cursor wraps every W picks and each request is pinned to one
 * worker (max consecutive grew to W).  Private cursors spread every request
 * over several workers and keep the witness at 1. */
Test(pool, private_cursor_does_not_pin_requests_to_workers)
{
	enum { W = 4, N = 16 };
	struct pool *p = mk(W, 32, POOL_MODE_FAIR);	/* all 68 tasks fit */
	struct pool_task blk[W], t[W][N];
	struct pool_req rb, r[W];
	struct pool_stats st;
	int gate = 0;

	/* Hold every worker so all four requests are active before any pick. */
	for (int i = 0; i < W; i++) {
		test_task(&blk[i], 0, 0, 0, 0);
		blk[i].u.test.gate = &gate;
	}
	cr_assert_eq(pool_submit(p, &rb, blk, W, NULL, NULL, 0), 0);
	usleep(10000);
	for (int k = 0; k < W; k++) {
		for (int i = 0; i < N; i++)
			test_task(&t[k][i], 0, 2000, 0, 0);
		cr_assert_eq(pool_submit(p, &r[k], t[k], N, NULL, NULL, 0), 0);
	}
	gate_open(&gate);
	cr_assert_eq(pool_join(&rb), 0);
	for (int k = 0; k < W; k++) {
		unsigned seen = 0;

		cr_assert_eq(pool_join(&r[k]), 0);
		for (int i = 0; i < N; i++) {
			cr_assert(t[k][i].u.test.worker >= 0 && t[k][i].u.test.worker < W);
			seen |= 1u << t[k][i].u.test.worker;
		}
		cr_assert_gt(__builtin_popcount(seen), 1,
			     "request %d pinned to one worker (mask %x)", k, seen);
	}
	pool_stats(p, &st);
	cr_assert_eq(st.max_consecutive_same_req, 1);
	pool_destroy(p);
}

/* The semaphore mode keeps batch granularity: queued requests run whole,
 * one after another (what the fair pool was built to replace). */
Test(pool, semaphore_runs_requests_whole)
{
	struct pool *p = mk(1, 16, POOL_MODE_SEMAPHORE);
	struct pool_task t[3][4];
	struct pool_req r[3];
	int rc[3];

	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 4; i++)
			test_task(&t[k][i], 0, 2000, 0, 0);
	cr_assert_eq(pool_submit(p, &r[0], t[0], 4, NULL, NULL, 0), 0);
	/* One worker = one slot, held by r[0]: the others must wait. */
	cr_assert_eq(pool_submit(p, &r[1], t[1], 4, NULL, NULL, POOL_NONBLOCK), -EAGAIN);
	cr_assert_eq(pool_join(&r[0]), 0);
	rc[1] = pool_submit(p, &r[1], t[1], 4, NULL, NULL, 0);
	rc[2] = pool_submit(p, &r[2], t[2], 4, NULL, NULL, 0); /* blocks for r[1] */
	cr_assert_eq(rc[1], 0);
	cr_assert_eq(rc[2], 0);
	cr_assert_eq(pool_join(&r[1]), 0);
	cr_assert_eq(pool_join(&r[2]), 0);
	for (int k = 0; k < 3; k++)
		for (int i = 1; i < 4; i++)
			cr_assert_eq(t[k][i].u.test.seq, t[k][i - 1].u.test.seq + 1);
	/* r[2] waited in submit for all of r[1] (4 x 2 ms on one worker), and
	 * that wait is part of its queue wait. */
	cr_assert_geq(r[2].m.admit_wait_ns, 4000000ull, "admit wait %lu",
		      (unsigned long)r[2].m.admit_wait_ns);
	cr_assert_geq(r[2].m.queue_wait_ns, r[2].m.admit_wait_ns);
	pool_destroy(p);
}

/* Seed test `budget_serializes_oversized_requests`: a request wanting the
 * whole machine holds it; a second one cannot start until it is released. */
struct later_arg {
	struct pool *p;
	struct pool_req r;
	struct pool_task t[2];
	atomic_int admitted;
};

static void *later_submit(void *a_)
{
	struct later_arg *a = a_;

	for (int i = 0; i < 2; i++)
		test_task(&a->t[i], 7, 0, 0, 0);
	if (pool_submit(a->p, &a->r, a->t, 2, NULL, NULL, 0) == 0)
		atomic_store(&a->admitted, 1);
	return NULL;
}

Test(pool, semaphore_serializes_full_size_requests)
{
	struct pool *p = mk(2, 4, POOL_MODE_SEMAPHORE);
	struct pool_task t[2];
	struct pool_req r;
	struct later_arg la = { .p = p };
	pthread_t th;
	struct pool_stats st;
	int gate = 0;

	for (int i = 0; i < 2; i++) {
		test_task(&t[i], 1, 0, 0, 0);
		t[i].u.test.gate = &gate;
	}
	cr_assert_eq(pool_submit(p, &r, t, 2, NULL, NULL, 0), 0);
	cr_assert_eq(pthread_create(&th, NULL, later_submit, &la), 0);
	usleep(50000);
	cr_assert_eq(atomic_load(&la.admitted), 0,
		     "second batch admitted while the first held every slot");
	gate_open(&gate);
	cr_assert_eq(pool_join(&r), 0);
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&la.admitted), 1);
	cr_assert_eq(pool_join(&la.r), 0);
	pool_stats(p, &st);
	cr_assert_geq(st.submits_blocked, 1);
	cr_assert_geq(st.max_waiters, 1);
	pool_destroy(p);
}

/* A failed task reports in its own slot; join reports the lowest failed
 * ordinal even if a later one failed first; other requests are untouched. */
Test(pool, error_isolation)
{
	struct pool *p = mk(2, 16, POOL_MODE_FAIR);
	struct pool_task a[8], b[8];
	struct pool_req ra, rb;

	for (int i = 0; i < 8; i++) {
		test_task(&a[i], 100 + i, 0, 0, 0);
		test_task(&b[i], 200 + i, 500, 0, 0);
	}
	a[3].u.test.fail = -EIO;
	a[3].u.test.sleep_us = 30000;	/* finishes after ordinal 6 */
	a[6].u.test.fail = -ENOSPC;
	cr_assert_eq(pool_submit(p, &ra, a, 8, NULL, NULL, 0), 0);
	cr_assert_eq(pool_submit(p, &rb, b, 8, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&ra), -EIO);
	cr_assert_eq(pool_req_status(&ra), -EIO);
	cr_assert_eq(pool_join(&rb), 0);
	for (int i = 0; i < 8; i++) {
		if (i == 3)
			cr_assert_eq(a[i].result, -EIO);
		else if (i == 6)
			cr_assert_eq(a[i].result, -ENOSPC);
		else
			cr_assert_eq(a[i].result, 100 + i);
		cr_assert_eq(b[i].result, 200 + i);
	}
	pool_destroy(p);
}

/* Shutdown with work pending: every admitted request still runs and its
 * callback fires; a submitter parked on the bound wakes with -ESHUTDOWN. */
static atomic_int cb_count;

static void count_cb(struct pool_req *r, void *arg)
{
	(void)arg;
	if (pool_req_status(r) == 0)
		atomic_fetch_add(&cb_count, 1);
}

struct parked_arg {
	struct pool *p;
	struct pool_req r;
	struct pool_task t[4];
	int rc;
};

static void *parked_submit(void *a_)
{
	struct parked_arg *a = a_;

	for (int i = 0; i < 4; i++)
		test_task(&a->t[i], 0, 0, 0, 0);
	a->rc = pool_submit(a->p, &a->r, a->t, 4, NULL, NULL, 0);
	return NULL;
}

Test(pool, shutdown_drains_pending_work)
{
	enum { R = 8, N = 4 };
	struct pool *p = mk(2, 16, POOL_MODE_FAIR);
	static struct pool_task t[R][N];
	static struct pool_req r[R];
	struct parked_arg pa = { .rc = 1 };
	struct pool_stats st;
	pthread_t th;

	atomic_store(&cb_count, 0);
	for (int k = 0; k < R; k++) {
		for (int i = 0; i < N; i++)
			test_task(&t[k][i], (uint64_t)k * 10 + i, 3000, 0, 0);
		cr_assert_eq(pool_submit(p, &r[k], t[k], N, count_cb, NULL, 0), 0);
	}
	/* 32 in flight = capacity: the next submit parks. */
	pa.p = p;
	cr_assert_eq(pthread_create(&th, NULL, parked_submit, &pa), 0);
	for (int spin = 0; spin < 200; spin++) {
		pool_stats(p, &st);
		if (st.submits_blocked)
			break;
		usleep(1000);
	}
	pool_destroy(p);
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&cb_count), R);
	for (int k = 0; k < R; k++)
		for (int i = 0; i < N; i++)
			cr_assert_eq(t[k][i].result, k * 10 + i);
	/* Admitted before shutdown (it ran) or refused: never lost. */
	if (pa.rc == 0)
		for (int i = 0; i < 4; i++)
			cr_assert_eq(pa.t[i].result, 0);
	else
		cr_assert_eq(pa.rc, -ESHUTDOWN);
}

Test(pool, nonblock_submit_returns_eagain_at_the_bound)
{
	struct pool *p = mk(1, 4, POOL_MODE_FAIR);
	struct pool_task a[3], b[2], c[1];
	struct pool_req ra, rb, rc;
	struct pool_stats st;
	int gate = 0;

	for (int i = 0; i < 3; i++) {
		test_task(&a[i], 1, 0, 0, 0);
		a[i].u.test.gate = &gate;
	}
	for (int i = 0; i < 2; i++)
		test_task(&b[i], 2, 0, 0, 0);
	test_task(&c[0], 3, 0, 0, 0);
	cr_assert_eq(pool_submit(p, &ra, a, 3, NULL, NULL, POOL_NONBLOCK), 0);
	cr_assert_eq(pool_submit(p, &rb, b, 2, NULL, NULL, POOL_NONBLOCK), -EAGAIN);
	cr_assert_eq(pool_submit(p, &rc, c, 1, NULL, NULL, POOL_NONBLOCK), 0);
	gate_open(&gate);
	cr_assert_eq(pool_join(&ra), 0);
	cr_assert_eq(pool_join(&rc), 0);
	cr_assert_eq(pool_submit(p, &rb, b, 2, NULL, NULL, POOL_NONBLOCK), 0);
	cr_assert_eq(pool_join(&rb), 0);
	cr_assert_eq(b[1].result, 2);
	pool_stats(p, &st);
	cr_assert_eq(st.submits_eagain, 1);
	pool_destroy(p);
}

/* A done callback runs on a worker: a blocking submit from there could
 * deadlock the pool, so it is refused; a non-blocking one chains work. */
struct chain {
	struct pool *p;
	struct pool_req r2;
	struct pool_task t2;
	int blocking_rc, nonblock_rc, join_rc, worker;
	atomic_int done2;
};

static void chain_done2(struct pool_req *r, void *arg)
{
	struct chain *c = arg;

	(void)r;
	atomic_store(&c->done2, 1);
}

static void chain_done1(struct pool_req *r, void *arg)
{
	struct chain *c = arg;

	c->worker = pool_worker_index();
	c->join_rc = pool_join(r);	/* complete already: fine on a worker */
	test_task(&c->t2, 5, 0, 0, 0);
	c->blocking_rc = pool_submit(c->p, &c->r2, &c->t2, 1, chain_done2, c, 0);
	c->nonblock_rc = pool_submit(c->p, &c->r2, &c->t2, 1, chain_done2, c, POOL_NONBLOCK);
}

Test(pool, callback_chains_without_blocking, .timeout = 20)
{
	struct pool *p = mk(2, 4, POOL_MODE_FAIR);
	struct pool_task t;
	struct pool_req r;
	struct chain c = { .p = p, .worker = -5 };

	test_task(&t, 1, 0, 0, 0);
	cr_assert_eq(pool_submit(p, &r, &t, 1, chain_done1, &c, 0), 0);
	while (!atomic_load(&c.done2))
		usleep(1000);
	cr_assert(c.worker == 0 || c.worker == 1);
	cr_assert_eq(pool_worker_index(), -1);
	cr_assert_eq(c.join_rc, 0);
	cr_assert_eq(c.blocking_rc, -EDEADLK);
	cr_assert_eq(c.nonblock_rc, 0);
	cr_assert_eq(c.t2.result, 5);
	pool_destroy(p);
}

Test(pool, bad_input_is_einval_not_abort)
{
	struct pool_opts bad_mode = { .mode = 7 };
	struct pool_opts too_many = { .workers = 100000 };
	struct pool *p = NULL;
	struct pool_task t;
	struct pool_req r;
	struct pool_stats st;

	cr_assert_eq(pool_create(&bad_mode, &p), -EINVAL);
	cr_assert_eq(pool_create(&too_many, &p), -EINVAL);
	cr_assert_eq(pool_create(NULL, &p), -EINVAL);
	cr_assert_null(p);
	p = mk(1, 0, POOL_MODE_FAIR);
	test_task(&t, 0, 0, 0, 0);
	cr_assert_eq(pool_submit(p, &r, &t, 0, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(pool_submit(p, NULL, &t, 1, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(pool_submit(p, &r, NULL, 1, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(pool_submit(p, &r, &t, 1, NULL, NULL, 0x80), -EINVAL);
	t.kind = 42;
	cr_assert_eq(pool_submit(p, &r, &t, 1, NULL, NULL, 0), -EINVAL);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(pool_join(&r), -EINVAL);
	cr_assert_eq(pool_join(NULL), -EINVAL);
	pool_stats(p, &st);
	cr_assert_eq(st.capacity, 4, "queue_factor 0 means the default 4");
	cr_assert_eq(st.requests_submitted, 0);
	pool_destroy(p);
	pool_destroy(NULL);
	pool_stats(NULL, &st);
	cr_assert_eq(st.workers, 0);
}

Test(pool, metrics_account_cpu_and_waits)
{
	struct pool *p = mk(1, 8, POOL_MODE_FAIR);
	struct pool_task a[4], b[2];
	struct pool_req ra, rb;
	struct pool_stats st;

	for (int i = 0; i < 4; i++)
		test_task(&a[i], 0, 0, 3000, 0);	/* 3 ms of CPU each */
	for (int i = 0; i < 2; i++)
		test_task(&b[i], 0, 0, 0, 0);
	cr_assert_eq(pool_submit(p, &ra, a, 4, NULL, NULL, 0), 0);
	cr_assert_eq(pool_submit(p, &rb, b, 2, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&ra), 0);
	cr_assert_eq(pool_join(&rb), 0);
	cr_assert_eq(ra.m.tasks, 4);
	cr_assert_geq(ra.m.cpu_ns, 4 * 2000000ull, "cpu %lu", (unsigned long)ra.m.cpu_ns);
	cr_assert_leq(ra.m.queue_wait_ns, ra.m.span_ns);
	cr_assert_leq(rb.m.queue_wait_ns, rb.m.span_ns);
	/* One worker, a's first task already running when b arrived: b waited
	 * at least part of a task. */
	cr_assert_gt(rb.m.queue_wait_ns, 0);
	pool_stats(p, &st);
	cr_assert_eq(st.tasks_run, 6);
	cr_assert_geq(st.cpu_ns, ra.m.cpu_ns);
	pool_destroy(p);
}

/* FIFO admission: a large request parked at the bound is not overtaken by
 * blocking submitters arriving after it (it would otherwise starve); a
 * non-blocking one that fits may pass it, but only `workers` times. */
Test(pool, admission_is_fifo_with_bounded_nonblock_passes)
{
	struct pool *p = mk(1, 4, POOL_MODE_FAIR);
	struct pool_task hold[2], s1[1], s2[1];
	struct pool_req rh, r1, r2;
	struct parked_arg big = { .rc = 1 };
	pthread_t th;
	struct pool_stats st;
	int gate = 0;

	for (int i = 0; i < 2; i++) {
		test_task(&hold[i], 0, 0, 0, 0);
		hold[i].u.test.gate = &gate;
	}
	test_task(&s1[0], 11, 0, 0, 0);
	test_task(&s2[0], 12, 0, 0, 0);
	cr_assert_eq(pool_submit(p, &rh, hold, 2, NULL, NULL, 0), 0);
	big.p = p;
	cr_assert_eq(pthread_create(&th, NULL, parked_submit, &big), 0);
	for (int spin = 0; spin < 500; spin++) {
		pool_stats(p, &st);
		if (st.submits_blocked)
			break;
		usleep(1000);
	}
	cr_assert_eq(st.submits_blocked, 1, "2 in flight + 4 > 4: the big one parks");
	/* 2 + 1 fits: the ring thread's request passes the parked one... */
	cr_assert_eq(pool_submit(p, &r1, s1, 1, NULL, NULL, POOL_NONBLOCK), 0);
	/* ...3 + 1 still fits, but one worker = one pass per parked head. */
	cr_assert_eq(pool_submit(p, &r2, s2, 1, NULL, NULL, POOL_NONBLOCK), -EAGAIN);
	gate_open(&gate);
	pthread_join(th, NULL);
	cr_assert_eq(big.rc, 0);
	cr_assert_eq(pool_join(&rh), 0);
	cr_assert_eq(pool_join(&r1), 0);
	cr_assert_eq(s1[0].result, 11);
	cr_assert_eq(pool_join(&big.r), 0);
	pool_stats(p, &st);
	cr_assert_eq(st.nonblock_overtakes, 1);
	cr_assert_eq(st.submits_eagain, 1);
	/* The head was admitted: a new head would get a fresh budget. */
	cr_assert_eq(pool_submit(p, &r2, s2, 1, NULL, NULL, POOL_NONBLOCK), 0);
	cr_assert_eq(pool_join(&r2), 0);
	pool_destroy(p);
}

/* A random mix — blocking and non-blocking submits, joins and callbacks,
 * sizes up to 1.5x the capacity — in both modes: every result lands in its
 * slot, the counters balance, and only idle admissions exceed the bound. */
struct mix_arg {
	struct pool *p;
	int id;
	int bad;
	atomic_int cb_done;
};

static void mix_cb(struct pool_req *r, void *arg)
{
	struct mix_arg *a = arg;

	if (pool_req_status(r) != 0)
		a->bad++;
	atomic_store(&a->cb_done, 1);
}

static void *mixer(void *a_)
{
	struct mix_arg *a = a_;
	struct pool_task t[12];
	struct pool_req r;
	uint64_t seed = 0xabcdefull * (uint64_t)(a->id + 1);

	for (int k = 0; k < 60; k++) {
		unsigned n = 1 + (uint32_t)tu_xorshift(&seed) % 12;
		unsigned how = (uint32_t)tu_xorshift(&seed) % 3;	/* 0 join, 1 nonblock+join, 2 callback */
		int rc;

		for (unsigned i = 0; i < n; i++)
			test_task(&t[i], (uint64_t)k * 100 + i, 0, (uint32_t)tu_xorshift(&seed) % 40, 0);
		atomic_store(&a->cb_done, 0);
		rc = pool_submit(a->p, &r, t, n, how == 2 ? mix_cb : NULL, a,
				 how == 1 ? POOL_NONBLOCK : 0);
		if (rc == -EAGAIN && how == 1)
			continue;
		if (rc != 0) {
			a->bad++;
			continue;
		}
		if (how == 2) {
			while (!atomic_load(&a->cb_done))
				sched_yield();
		} else if (pool_join(&r) != 0) {
			a->bad++;
		}
		for (unsigned i = 0; i < n; i++)
			if (t[i].result != (int64_t)k * 100 + i)
				a->bad++;
	}
	return NULL;
}

Test(pool, random_mix_keeps_invariants, .timeout = 60)
{
	for (unsigned mode = 0; mode < 2; mode++) {
		struct pool *p = mk(3, 3, mode);	/* capacity 9 < 12 */
		struct mix_arg a[8];
		pthread_t th[8];
		struct pool_stats st;

		for (int i = 0; i < 8; i++) {
			a[i] = (struct mix_arg){ .p = p, .id = i };
			cr_assert_eq(pthread_create(&th[i], NULL, mixer, &a[i]), 0);
		}
		for (int i = 0; i < 8; i++) {
			pthread_join(th[i], NULL);
			cr_assert_eq(a[i].bad, 0, "mode %u thread %d", mode, i);
		}
		pool_stats(p, &st);
		cr_assert_eq(st.requests_completed, st.requests_submitted);
		cr_assert_eq(st.in_flight, 0);
		cr_assert_eq(st.active, 0);
		cr_assert_eq(st.tasks_failed, 0);
		/* Fair: past the bound of 9 only by an idle admission (<= 12).
		 * Semaphore: 3 slots = one big request or up to 3 small. */
		cr_assert_leq(st.peak_in_flight, 12);
		if (mode == POOL_MODE_FAIR)
			cr_assert_eq(st.max_consecutive_same_req, 1);
		pool_destroy(p);
	}
}
