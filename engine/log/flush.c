/* engine/log/flush.c — coil_flush: group device flushes, one at a time.
 *
 * A flush must make durable every write that completed before it was
 * called, and every create, remove and truncate called before it.  A
 * completed write's data and journal chunk have been written; a metadata
 * operation has its ticket, and its record is written by the cycle that
 * takes it.  So a flush waits until every ticket taken before the call is
 * in a retired cycle (usually at once, at most one chunk round trip), and
 * then any fdatasync covers it: the ring holds an fdatasync until every
 * write accepted before it has completed.  Flushes therefore need no
 * journal cycle of their own: they used to ride one, and a cycle with flushes waited
 * for its fdatasync before it retired, so every write record in it (and in
 * every cycle behind it) waited for a device flush it did not need, and a
 * few threads calling coil_flush in a loop brought 4 KiB writers down to a
 * few writes a second.
 *
 * Now at most one fdatasync is in flight (FLUSH_FSYNCS_MAX): flushes that
 * arrive meanwhile join the next group, which is issued when it completes,
 * so one device flush serves every flush that came during the previous
 * one.  Flushes waiting or in flight are bounded (ENGINE_FLUSH_MAX, taken
 * from a pool made at open): beyond it coil_flush waits for one, or is
 * -EAGAIN on a coil thread, which must not block; a caller that loops on
 * coil_flush without waiting cannot queue unbounded work and callbacks
 * ahead of the writers.  Writes with sync_writes still make their journal
 * cycle fdatasync (journal.c).  A coil_sync that starts a group of its own
 * alone does the fdatasync on its own thread (group_now): no ring round
 * trip for a database's commit.  Tests: tests/test_engine_flush_fair.c;
 * perf/bench_flush.sh measures writers next to flush loops. */
#include <errno.h>
#include <stdlib.h>

#include "engine/store.h"
#include "engine/log/flush.h"

#define FLUSH_FSYNCS_MAX 1u

struct flushq {
	pthread_mutex_t mu;
	pthread_cond_t cond;          /* a waiter was returned to the pool */
	struct flush_waiter *pool;    /* ENGINE_FLUSH_MAX */
	struct flush_waiter *free;
	struct flush_waiter *next;    /* for the next fdatasync, FIFO */
	struct flush_waiter **next_tail;
	struct flush_waiter *group;   /* covered by the one in flight */
	uint32_t out;                 /* taken from the pool */
	uint32_t fsyncs;              /* in flight, <= FLUSH_FSYNCS_MAX */
	uint64_t mark;                /* its chunks: journal_sync_mark */
	struct uring_io io;
};

int flush_init(struct coil_store *s)
{
	struct flushq *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	q->pool = calloc(ENGINE_FLUSH_MAX, sizeof(*q->pool));
	if (!q->pool) {
		free(q);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ENGINE_FLUSH_MAX; i++) {
		q->pool[i].next = q->free;
		q->free = &q->pool[i];
	}
	q->next_tail = &q->next;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cond, NULL);
	s->fq = q;
	return 0;
}

void flush_destroy(struct coil_store *s)
{
	struct flushq *q = s->fq;

	if (!q)
		return;
	COIL_ASSERT(q->out == 0 && q->fsyncs == 0);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cond);
	free(q->pool);
	free(q);
	s->fq = NULL;
}

static void fsync_group_done(struct uring_io *io, int res);

static uint64_t retired_ticket(struct coil_store *s, uint64_t *mark)
{
	uint64_t t;

	pthread_mutex_lock(&s->jlock); /* q->mu -> jlock: the lock order */
	t = s->retired_ticket;
	*mark = journal_sync_mark_locked(s);
	pthread_mutex_unlock(&s->jlock);
	return t;
}

/* If a group may go (an fdatasync slot is free and the first waiter's
 * records are written), prepare the fdatasync for the leading waiters of
 * q->next whose records are written (tickets are taken in order, so they
 * are a prefix); the caller submits it once q->mu is released.  The
 * retired ticket is read once: both tests must see the same value, or the
 * first could pass on a newer one than the prefix is cut with.  q->mu
 * held.  @return whether a group was started. */
static bool group_start(struct coil_store *s, struct flushq *q)
{
	uint64_t done, mark;
	struct flush_waiter **pp = &q->next;

	if (q->fsyncs >= FLUSH_FSYNCS_MAX || !q->next)
		return false;
	done = retired_ticket(s, &mark);
	if (q->next->ticket > done)
		return false;
	while (*pp && (*pp)->ticket <= done)
		pp = &(*pp)->next;
	COIL_ASSERT(pp != &q->next);
	q->group = q->next;
	q->next = *pp;
	*pp = NULL;
	if (!q->next)
		q->next_tail = &q->next;
	q->fsyncs++;
	q->mark = mark;
	stat_max(&s->st.flush_fsyncs_inflight_max, q->fsyncs);
	stat_add(&s->st.fsyncs, 1);
	uring_io_prep(&q->io, URING_OP_FSYNC, NULL, 0, 0, fsync_group_done, s);
	return true;
}

static void group_submit(struct coil_store *s, struct flushq *q)
{
	if (uring_submit(s->ring, &q->io) < 0)
		fsync_group_done(&q->io, -ESHUTDOWN);
}

/* A group that is only this thread's own synchronous flush (coil_sync):
 * its fdatasync done here (uring_io_now), no ring round trip.  Safe
 * without the ring's ordering: what a flush covers (writes completed and
 * records retired before the call) is already written.  @return false if
 * the group must take the ring. */
static bool group_now(struct coil_store *s, struct flushq *q,
		      const struct flush_waiter *fw)
{
	bool was;
	int rc;

	if (!engine_tls_waiter || fw->arg != engine_tls_waiter ||
	    q->group != fw || fw->next)
		return false;
	rc = uring_io_now(s->ring, &q->io);
	if (rc == -EOPNOTSUPP)
		return false;
	stat_add(&s->st.fsyncs_now, 1);
	was = engine_tls_now;
	engine_tls_now = true;
	fsync_group_done(&q->io, rc);
	engine_tls_now = was;
	return true;
}

static void fsync_group_done(struct uring_io *io, int res)
{
	struct coil_store *s = io->arg;
	struct flushq *q = s->fq;
	struct flush_waiter *fw, *last = NULL;
	uint32_t n = 0;
	bool again;

	if (res < 0 && res != -ESHUTDOWN)
		store_break(s, res);
	if (res == 0) {
		/* a journal chunk that failed before is not on the device:
		 * the flush cannot vouch for what was acknowledged after */
		pthread_mutex_lock(&s->jlock);
		res = s->jfail;
		pthread_mutex_unlock(&s->jlock);
	}
	pthread_mutex_lock(&q->mu);
	if (res == 0)
		journal_synced(s, q->mark);
	fw = q->group;
	q->group = NULL;
	COIL_ASSERT(q->fsyncs > 0);
	q->fsyncs--;
	/* keep the device busy: the next group goes before the callbacks */
	again = group_start(s, q);
	pthread_mutex_unlock(&q->mu);
	if (again)
		group_submit(s, q);
	/* the journal may owe a marker for what this flush covered
	 * (journal.c, cycle_start), written before the callbacks */
	if (res == 0 && !atomic_load(&s->jmark_off))
		journal_kick(s);

	if (!fw)
		return;
	for (struct flush_waiter *w = fw; w; w = w->next) {
		w->cb(w->arg, res);
		n++;
		last = w;
	}
	/* the whole group back at once: one wake-up for the callers
	 * waiting for a waiter, not one per waiter */
	pthread_mutex_lock(&q->mu);
	last->next = q->free;
	q->free = fw;
	COIL_ASSERT(q->out >= n);
	q->out -= n;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
	while (n--)
		ops_done(s);
}

int journal_flush(struct coil_store *s, coil_cb cb, void *arg)
{
	struct flushq *q = s->fq;
	bool can_wait = !engine_on_coil_thread(s), start;
	struct flush_waiter *fw;

	pthread_mutex_lock(&q->mu);
	while (!q->free) {
		if (!can_wait) {
			pthread_mutex_unlock(&q->mu);
			return -EAGAIN;
		}
		pthread_cond_wait(&q->cond, &q->mu);
	}
	fw = q->free;
	q->free = fw->next;
	q->out++;
	stat_max(&s->st.flush_waiters_max, q->out);
	fw->cb = cb;
	fw->arg = arg;
	fw->next = NULL;
	pthread_mutex_lock(&s->jlock);
	fw->ticket = s->next_ticket;
	pthread_mutex_unlock(&s->jlock);
	*q->next_tail = fw;
	q->next_tail = &fw->next;
	atomic_fetch_add(&s->ops_inflight, 1);
	stat_add(&s->st.flushes, 1);
	/* the journal's write-behind follows flushing writers (journal.c) */
	atomic_store_explicit(&s->jwb_flush_ns, coil_now_ns(),
			      memory_order_relaxed);
	start = group_start(s, q);
	pthread_mutex_unlock(&q->mu);
	if (start && group_now(s, q, fw))
		return 0;
	if (start)
		group_submit(s, q);
	else
		/* Feedback loop: the records it waits for go on their way;
		 * their cycle's retirement comes back through
		 * flush_journal_retired. */
		journal_kick(s);
	return 0;
}

void flush_journal_retired(struct coil_store *s)
{
	struct flushq *q = s->fq;
	bool start;

	pthread_mutex_lock(&q->mu);
	start = group_start(s, q);
	pthread_mutex_unlock(&q->mu);
	if (start)
		group_submit(s, q);
}
