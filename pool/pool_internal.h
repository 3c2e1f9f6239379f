/* pool/pool_internal.h — the pool's private types, shared by pool.c (the
 * scheduler) and pool_task.c (the typed task executor). */
#ifndef COIL_POOL_INTERNAL_H
#define COIL_POOL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <zstd.h>

#include "pool/pool.h"

#define POOL_WORKERS_MAX 256u
#define POOL_QUEUE_FACTOR_DEFAULT 4u
#define POOL_QUEUE_FACTOR_MAX 4096u

enum pool_req_state {
	POOL_REQ_QUEUED = 0x51,	/* admitted, not complete */
	POOL_REQ_COMPLETE = 0xC0,
};

struct pool_worker {
	struct pool *pool;
	unsigned index;
	pthread_t thread;
	ZSTD_CCtx *cctx;	/* made at pool_create: no per-task allocation */
	ZSTD_DCtx *dctx;
	/* Private ring cursor (starts at the index, +1 per pick): a SHARED
	 * cursor pins each request to one worker when workers
	 * == active requests (it wraps every W picks, so a worker's picks all
	 * land on the same ring slot). */
	size_t cursor;
	uint64_t last_id;	/* request of the previous pick (0 = none);
				 * an id, not a pointer: callers reuse their
				 * pool_req for the next request */
	uint64_t consecutive;
};

/* A submitter parked for admission in fair mode.  Lives on its stack; the
 * FIFO list makes admission first-come first-served and lets a completion
 * wake only the head instead of every parked submitter. */
struct pool_waiter {
	pthread_cond_t cv;
	uint32_t need;		/* tasks of its request */
	struct pool_waiter *next;
};

struct pool {
	pthread_mutex_t lock;	/* everything below */
	pthread_cond_t work_cv;	/* idle workers park here */
	pthread_cond_t sem_cv;	/* semaphore mode: submitters park here */
	unsigned mode;
	unsigned nworkers;
	uint64_t capacity;	/* queue_factor x workers */
	uint64_t in_flight;	/* admitted, unfinished tasks */
	unsigned slots_used;	/* semaphore mode: worker slots reserved */
	/* Active ring: requests with pending tasks, in admission order.  At
	 * most `capacity` long: every active request holds >= 1 in-flight
	 * task, and a request is admitted past the bound only into an idle
	 * pool (then it is alone). */
	struct pool_req **active;
	size_t active_n;
	size_t active_max;
	struct pool_waiter *wait_head, *wait_tail;
	unsigned waiters;
	unsigned overtakes;	/* non-blocking admissions past the head */
	bool shutdown;
	uint64_t pick_seq;
	uint64_t next_id;	/* request ids start at 1 */
	struct pool_stats st;
	struct pool_worker *workers;
	unsigned started;	/* threads created */
};

/* Run one task on worker @w (no lock held).  @return bytes or -errno. */
int64_t pool_task_run(struct pool_worker *w, struct pool_task *t);
/* 0 if @t's kind may be submitted in this build, else -EINVAL. */
int pool_task_check(const struct pool_task *t);

#endif
