/* pool/pool.h — the worker pool for coil's CPU-heavy typed tasks (encode a
 * blob, decode a blob, recompress one).
 *
 * A request is a batch of tasks in a caller-owned array; the task's index is
 * its ordinal.  Persistent workers (one ZSTD_CCtx and ZSTD_DCtx each, made at
 * pool_create) serve the active requests round-robin, ONE task per pick, each
 * worker with a private ring cursor.  Results land in each task's own slot
 * (`result`), so the caller reads them in ordinal order whatever order the
 * workers ran them.  In-flight tasks are bounded by queue_factor x workers:
 * pool_submit blocks (or returns -EAGAIN with POOL_NONBLOCK) while the bound
 * would be exceeded, except that an idle pool admits any request however
 * large.  POOL_MODE_SEMAPHORE keeps the batch-granularity scheduler the fair
 * pool replaced (a request reserves min(tasks, workers) worker slots or
 * waits; requests run whole, one after another) so benchmarks can put the two
 * side by side.  See docs/pool.md for the measurements.
 *
 * Every fallible call returns >= 0 or a negative errno; bad input never
 * aborts.  Nothing on the submit/run path allocates memory.
 */
#ifndef COIL_POOL_H
#define COIL_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

struct fmt_blob;	/* format/format.h */
struct pool;		/* opaque */

enum pool_task_kind {
	POOL_TASK_ENCODE_BLOB = 1,	/* u.encode: fmt_blob_encode */
	POOL_TASK_DECODE_BLOB,		/* u.decode: fmt_blob_decode */
	POOL_TASK_RECOMPRESS,		/* u.recompress: decode, then encode */
	/* Test-only: runs (spin, sleep, fail on demand) only in the
	 * COIL_FAULT_SEAM build; the shipped library rejects it with -EINVAL
	 * at submit.  It lives in the enum so the struct layout never depends
	 * on the build. */
	POOL_TASK_TEST = 100,
};

struct pool_task {			/* caller-owned array; index = ordinal */
	uint8_t kind;			/* enum pool_task_kind */
	union {
		struct {		/* fmt_blob_encode(src, len, ...) */
			const void *src;
			uint32_t len;
			int level;
			uint32_t dict_id;	/* 0 = none */
			const ZSTD_CDict *cdict;/* NULL unless dict_id */
			void *dst;
			size_t dst_cap;
			struct fmt_blob *out;	/* descriptor written here */
		} encode;
		struct {		/* fmt_blob_decode(blob, stored, ...) */
			const struct fmt_blob *blob;
			const ZSTD_DDict *ddict;/* NULL unless blob has dict */
			const void *stored;
			size_t stored_len;
			void *dst;
			size_t dst_cap;
		} decode;
		struct {		/* the optimizer: decode into scratch,
					 * encode scratch at another level/dict */
			const struct fmt_blob *blob;
			const ZSTD_DDict *ddict;
			const void *stored;
			size_t stored_len;
			void *scratch;		/* >= blob's logical length */
			size_t scratch_cap;
			int level;
			uint32_t dict_id;
			const ZSTD_CDict *cdict;
			void *dst;
			size_t dst_cap;
			struct fmt_blob *out;
		} recompress;
		struct {		/* POOL_TASK_TEST (seam build only) */
			uint32_t spin_us;	/* burn CPU this long */
			uint32_t sleep_us;	/* then sleep this long */
			int32_t fail;		/* < 0: the task returns it */
			int32_t worker;		/* out: index of the worker */
			uint64_t value;		/* result when fail == 0 */
			uint64_t seq;		/* out: pool-wide pick order */
			const int *gate;	/* if set: first wait (<= 10 s)
						 * until *gate != 0 */
		} test;
	} u;
	int64_t result;		/* set by the worker: bytes or -errno */
};

/* Per-request metrics, valid once the request completed.  All times are
 * measured from the moment pool_submit was entered, so admission waits
 * (backpressure, the semaphore) count as queue wait. */
struct pool_req_metrics {
	uint64_t queue_wait_ns;	/* submit -> first task picked */
	uint64_t span_ns;	/* submit -> last task completed */
	uint64_t cpu_ns;	/* sum of CLOCK_THREAD_CPUTIME over its tasks
				 * (each with the pick and delivery around it) */
	uint32_t tasks;
	uint32_t pad_;
	uint64_t admit_wait_ns;	/* submit -> admitted (blocked in submit) */
};

/* One request.  The caller allocates it (typically embedded in its own
 * operation context) and must not touch the private fields.  The pool owns
 * it from pool_submit until pool_join returns or the done callback is
 * entered; after that the caller may reuse or free it. */
struct pool_req {
	/* private */
	struct pool *pool_;
	struct pool_task *tasks_;
	uint32_t n_;		/* tasks */
	uint32_t next_;		/* next ordinal to hand out (pending queue) */
	uint32_t done_n_;	/* tasks completed */
	uint32_t slots_;	/* semaphore mode: worker slots held */
	uint64_t id_;		/* admission sequence number, never reused */
	int state_;		/* POOL_REQ_* in pool.c */
	int status_;		/* first failed task's error by ordinal, or 0 */
	void (*done_)(struct pool_req *r, void *arg);
	void *arg_;
	pthread_cond_t cv_;	/* pool_join waits here (with the pool lock) */
	uint64_t submit_ns_;
	uint64_t first_ns_;
	/* public, read-only, valid after completion */
	struct pool_req_metrics m;
};

enum pool_mode {
	POOL_MODE_FAIR = 0,	/* task-level round-robin (default) */
	POOL_MODE_SEMAPHORE = 1,/* batch-level: a worker budget per batch */
};

struct pool_opts {
	unsigned workers;	/* 0 = number of cores */
	unsigned queue_factor;	/* 0 = default 4; capacity = factor x workers */
	unsigned mode;		/* enum pool_mode */
};

struct pool_stats {
	unsigned workers;
	unsigned mode;
	uint64_t capacity;	/* in-flight bound (fair mode) */
	uint64_t in_flight;	/* submitted-but-unfinished tasks, now */
	uint64_t peak_in_flight;
	uint64_t active;	/* requests with pending tasks, now */
	/* Fairness witness: the longest run of consecutive picks of one
	 * request by one worker while >= 2 requests were active.  Stays 1 in
	 * fair mode; grows in semaphore mode (requests run whole). */
	uint64_t max_consecutive_same_req;
	uint64_t tasks_run;
	uint64_t tasks_failed;
	uint64_t requests_submitted;
	uint64_t requests_completed;
	uint64_t submits_blocked;	/* had to wait for admission */
	uint64_t submits_eagain;	/* POOL_NONBLOCK refused */
	uint64_t nonblock_overtakes;	/* POOL_NONBLOCK admitted ahead of
					 * parked submitters */
	uint64_t max_waiters;		/* peak submitters parked at once */
	uint64_t cpu_ns;		/* sum of task thread-CPU */
};

/* Create a pool.  @return 0, -EINVAL (bad opts), -ENOMEM, or the error of
 * pthread_create.  *out is set only on success. */
int pool_create(const struct pool_opts *o, struct pool **out);

/* Drain every admitted task (their callbacks run), refuse new submits with
 * -ESHUTDOWN (blocked submitters wake with it), join the workers, free.
 * NULL is ok.  Must not be called from a worker (a done callback). */
void pool_destroy(struct pool *p);

#define POOL_NONBLOCK 1u

/* Submit n tasks (tasks[i] is ordinal i).  r and tasks must stay valid and
 * untouched until the request completes.  done (may be NULL) runs on a
 * worker thread after the last task, when the pool no longer touches r; it
 * must not block.  Instead of done the caller may pool_join(r) (use one or
 * the other).
 * Blocking submitters are admitted FIFO.  A POOL_NONBLOCK submit is admitted
 * whenever it fits the bound, passing parked submitters at most `workers`
 * times per parked head (so they never starve).
 * In semaphore mode a submit waits for min(n, workers) free worker slots.
 * @return 0 submitted; -EAGAIN with POOL_NONBLOCK when the in-flight bound
 * would be exceeded (or the parked head has used up its passes; semaphore
 * mode: no free slots); -EINVAL (n == 0, n > POOL_TASKS_MAX, unknown kind,
 * NULL, unknown flags);
 * -EDEADLK for a blocking submit from one of this pool's workers (a done
 * callback must use POOL_NONBLOCK); -ESHUTDOWN once pool_destroy began. */
#define POOL_TASKS_MAX (1u << 20)
int pool_submit(struct pool *p, struct pool_req *r, struct pool_task *tasks,
		unsigned n, void (*done)(struct pool_req *r, void *arg),
		void *arg, unsigned flags);

/* Block until every task of r completed.  @return 0, or the error of the
 * lowest-ordinal failed task; -EDEADLK when called from a worker of r's
 * pool; -EINVAL if r was not admitted (e.g. its pool_submit failed). */
int pool_join(struct pool_req *r);

/* The request's status once complete: 0 or the error of the lowest-ordinal
 * failed task; -EINVAL if not complete.  Call it from the done callback or
 * after pool_join (it takes no lock). */
int pool_req_status(const struct pool_req *r);

/* A snapshot of the pool's counters.  NULL p fills zeros. */
void pool_stats(struct pool *p, struct pool_stats *out);

/* The calling thread's worker index in its pool, or -1 if it is not a pool
 * worker. */
int pool_worker_index(void);

#endif
