/* pool/pool_task.c — the typed task executor.  Tasks are a closed set of
 * kinds (no generic closures): each calls the format/ codec with the
 * worker's own zstd contexts. */
#include <errno.h>
#include <time.h>

#include "common/common.h"
#include "format/format.h"
#include "pool/pool_internal.h"

int pool_task_check(const struct pool_task *t)
{
	switch (t->kind) {
	case POOL_TASK_ENCODE_BLOB:
	case POOL_TASK_DECODE_BLOB:
	case POOL_TASK_RECOMPRESS:
		return 0;
#ifdef COIL_FAULT_SEAM
	case POOL_TASK_TEST:
		return 0;
#endif
	default:
		return -EINVAL;
	}
}

static int64_t run_encode(struct pool_worker *w, struct pool_task *t)
{
	const typeof(t->u.encode) *e = &t->u.encode;

	if (!e->src || !e->dst || !e->out)
		return -EINVAL;
	return fmt_blob_encode(w->cctx, e->level, e->cdict, e->dict_id, e->src,
			       e->len, e->dst, e->dst_cap, e->out);
}

static int64_t run_decode(struct pool_worker *w, struct pool_task *t)
{
	const typeof(t->u.decode) *d = &t->u.decode;

	if (!d->blob || !d->stored || !d->dst)
		return -EINVAL;
	return fmt_blob_decode(w->dctx, d->ddict, d->blob, d->stored,
			       d->stored_len, d->dst, d->dst_cap);
}

/* The optimizer's re-encode: one task, not two, so the decoded bytes stay
 * in this worker's cache between the halves. */
static int64_t run_recompress(struct pool_worker *w, struct pool_task *t)
{
	const typeof(t->u.recompress) *rc = &t->u.recompress;
	int n;

	if (!rc->blob || !rc->stored || !rc->scratch || !rc->dst || !rc->out)
		return -EINVAL;
	n = fmt_blob_decode(w->dctx, rc->ddict, rc->blob, rc->stored,
			    rc->stored_len, rc->scratch, rc->scratch_cap);
	if (n < 0)
		return n;
	if (n == 0)
		return -EIO;	/* format never makes an empty blob */
	return fmt_blob_encode(w->cctx, rc->level, rc->cdict, rc->dict_id,
			       rc->scratch, (uint32_t)n, rc->dst, rc->dst_cap,
			       rc->out);
}

#ifdef COIL_FAULT_SEAM
/* Test kind: controlled durations and failures, so ordering, fairness and
 * error-isolation tests do not depend on how fast zstd is on this box. */
static int64_t run_test(struct pool_worker *w, struct pool_task *t)
{
	typeof(t->u.test) *x = &t->u.test;

	x->worker = (int32_t)w->index;
	if (x->gate) {
		/* Lets a test hold workers for exactly as long as it needs
		 * instead of guessing a sleep; bounded so a broken test
		 * fails instead of hanging. */
		struct timespec ts = { .tv_nsec = 100000 };
		uint64_t end = coil_now_ns() + 10000000000ull;

		while (!__atomic_load_n(x->gate, __ATOMIC_ACQUIRE)) {
			if (coil_now_ns() > end)
				return -ETIMEDOUT;
			nanosleep(&ts, NULL);
		}
	}
	if (x->spin_us) {
		uint64_t end = coil_thread_cpu_ns() + (uint64_t)x->spin_us * 1000;
		uint64_t wall_end = coil_now_ns() + 20ull * x->spin_us * 1000;

		/* Bounded by wall time too: on a starved box CPU time may
		 * accrue very slowly. */
		while (coil_thread_cpu_ns() < end && coil_now_ns() < wall_end)
			;
	}
	if (x->sleep_us) {
		struct timespec ts = {
			.tv_sec = x->sleep_us / 1000000,
			.tv_nsec = (long)(x->sleep_us % 1000000) * 1000,
		};
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	if (x->fail < 0)
		return x->fail;
	return (int64_t)x->value;
}
#endif

int64_t pool_task_run(struct pool_worker *w, struct pool_task *t)
{
	switch (t->kind) {
	case POOL_TASK_ENCODE_BLOB:
		return run_encode(w, t);
	case POOL_TASK_DECODE_BLOB:
		return run_decode(w, t);
	case POOL_TASK_RECOMPRESS:
		return run_recompress(w, t);
#ifdef COIL_FAULT_SEAM
	case POOL_TASK_TEST:
		return run_test(w, t);
#endif
	default:
		return -EINVAL;	/* pool_submit rejects these first */
	}
}
