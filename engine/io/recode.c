/* engine/io/recode.c — the optimizer's encoder, its check and its counters
 * (the pass is the cleaner's relocation, engine/cleaner.c; the entry point
 * and dictionary training are engine/optimize.c; recode.h says how they
 * fit). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "engine/io/recode.h"
#include "engine/place/blob.h"
#include "engine/place/dict.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/store.h"
#include "format/format.h"

enum { ENC_IDLE, ENC_POSTED, ENC_DONE, ENC_STOP };

/* One encoding handed to the encoder thread: encode_checked's work and
 * its result. */
struct enc_job {
	const uint8_t *logical;
	uint32_t len, nref, nblobs;
	uint64_t old_cost;
	struct dict *const *pool;
	unsigned npool;
	struct fmt_blob *nfb;
	const uint8_t **bytes;
	int rc;
};

static int encode_checked(struct optimizer *op, struct enc_job *j);

static void *enc_main(void *arg)
{
	struct optimizer *op = arg;
	struct sched_param sp = { .sched_priority = 0 };

	coil_thread_name("optenc", -1);
	atomic_store(&op->enc_idle,
		     pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) ==
			     0);
	pthread_mutex_lock(&op->enc_mu);
	for (;;) {
		struct enc_job *j;

		while (op->enc_state != ENC_POSTED && op->enc_state != ENC_STOP)
			pthread_cond_wait(&op->enc_cv, &op->enc_mu);
		if (op->enc_state == ENC_STOP)
			break;
		j = op->job;
		pthread_mutex_unlock(&op->enc_mu);
		j->rc = encode_checked(op, j);
		pthread_mutex_lock(&op->enc_mu);
		op->enc_state = ENC_DONE;
		pthread_cond_broadcast(&op->enc_cv);
	}
	pthread_mutex_unlock(&op->enc_mu);
	return NULL;
}

int optimizer_init(struct optimizer *op)
{
	memset(op, 0, sizeof(*op));
	if (pthread_mutex_init(&op->enc_mu, NULL))
		return -ENOMEM;
	if (pthread_cond_init(&op->enc_cv, NULL)) {
		pthread_mutex_destroy(&op->enc_mu);
		return -ENOMEM;
	}
	op->ready = true;
	return 0;
}

void optimizer_destroy(struct optimizer *op)
{
	if (op->enc_started) {
		pthread_mutex_lock(&op->enc_mu);
		op->enc_state = ENC_STOP;
		pthread_cond_broadcast(&op->enc_cv);
		pthread_mutex_unlock(&op->enc_mu);
		pthread_join(op->enc_th, NULL);
		op->enc_started = false;
	}
	optimizer_end(op);
	if (op->ready) {
		pthread_cond_destroy(&op->enc_cv);
		pthread_mutex_destroy(&op->enc_mu);
		op->ready = false;
	}
}

int optimizer_begin(struct optimizer *op, int level)
{
	if (level < 1 || level > ZSTD_maxCLevel())
		return -EINVAL;
	op->level = level;
	if (!op->enc_started && op->ready) {
		op->enc_state = ENC_IDLE;
		/* without it the cleaner thread encodes */
		op->enc_started = pthread_create(&op->enc_th, NULL, enc_main,
						 op) == 0;
	}
	if (!op->cctx)
		op->cctx = ZSTD_createCCtx();
	if (!op->dctx)
		op->dctx = ZSTD_createDCtx();
	if (!op->obuf)
		op->obuf = malloc(FMT_BLOB_MAX);
	if (!op->vbuf)
		op->vbuf = malloc(FMT_BLOB_MAX);
	if (!op->cctx || !op->dctx || !op->obuf || !op->vbuf) {
		optimizer_end(op);
		return -ENOMEM;
	}
	return 0;
}

void optimizer_end(struct optimizer *op)
{
	ZSTD_freeCCtx(op->cctx);
	ZSTD_freeDCtx(op->dctx);
	free(op->obuf);
	free(op->vbuf);
	op->cctx = op->dctx = NULL;
	op->obuf = op->vbuf = NULL;
	op->level = 0;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What a blob costs on disk beyond its place: its stored bytes and the
 * descriptor's checksums (the rest of a descriptor is the same size for
 * every blob). */
static uint64_t optimize_cost(const struct fmt_blob *b)
{
	return (uint64_t)b->stored_len + 8u * b->n_csums;
}

/* Of @n dictionaries @pool and none, the one that encodes @len bytes
 * @logical smallest at OPTIMIZE_CHOOSE_LEVEL (into op->obuf, which the
 * real encoding overwrites): NULL for none.  A quick level ranks them
 * nearly as the pass's level would, at a small part of its cost (measured
 * in docs/benchmarks.md, "The optimizer"). */
static struct dict *pool_choose(struct optimizer *op, const uint8_t *logical,
				uint32_t len, struct dict *const *pool,
				unsigned n)
{
	const int level = OPTIMIZE_CHOOSE_LEVEL;
	struct dict *best = NULL;
	size_t r, best_len;

	r = ZSTD_compressCCtx(op->cctx, op->obuf, FMT_BLOB_MAX, logical, len,
			      level);
	best_len = ZSTD_isError(r) ? SIZE_MAX : r;
	for (unsigned i = 0; i < n; i++) {
		const ZSTD_CDict *cd = dict_cdict(pool[i], level);

		if (!cd)
			continue;
		r = ZSTD_compress_usingCDict(op->cctx, op->obuf, FMT_BLOB_MAX,
					     logical, len, cd);
		if (!ZSTD_isError(r) && r < best_len) {
			best_len = r;
			best = pool[i];
		}
	}
	return best;
}

/* Encode @j->len bytes of @j->logical with the best of its pool's
 * dictionaries (pool_choose, with more than one); keep the candidate only
 * when it costs less than @j->old_cost with its checksums carried by
 * @j->nref extents, and decodes back to exactly the logical bytes.
 * @j->nblobs: the blobs it replaces (the counters count blobs). */
static int encode_checked(struct optimizer *op, struct enc_job *j)
{
	const uint8_t *logical = j->logical;
	struct fmt_blob *nfb = j->nfb;
	uint32_t len = j->len;
	uint64_t t0 = thread_cpu_ns();
	struct dict *d = j->npool > 1 ? pool_choose(op, logical, len, j->pool,
						    j->npool) :
				j->npool ? j->pool[0] : NULL;
	const ZSTD_CDict *cd = d ? dict_cdict(d, op->level) : NULL;
	uint32_t bad;
	int rc;

	atomic_fetch_add_explicit(&op->scanned, j->nblobs,
				  memory_order_relaxed);
	rc = fmt_blob_encode(op->cctx, op->level, cd, cd ? d->id : 0, logical,
			     len, op->obuf, FMT_BLOB_MAX, nfb);
	if (rc < 0 || (uint64_t)nfb->stored_len +
			      8ull * nfb->n_csums * j->nref >= j->old_cost) {
		atomic_fetch_add_explicit(&op->no_gain, j->nblobs,
					  memory_order_relaxed);
		rc = rc < 0 ? -EIO : 0;
		goto out;
	}
	bad = atomic_load(&op->inject_bad);
	while (bad && !atomic_compare_exchange_weak(&op->inject_bad, &bad,
						    bad - 1))
		;
	if (bad)
		op->obuf[nfb->stored_len / 2] ^= 0x20;
	/* The optimizer never decides what the bytes are: the candidate is
	 * decoded as a read would decode it and must give back exactly what
	 * was read. */
	if (fmt_blob_decode(op->dctx, cd ? d->dd : NULL, nfb, op->obuf,
			    nfb->stored_len,
			    op->vbuf, FMT_BLOB_MAX) != (int)len ||
	    memcmp(op->vbuf, logical, len) != 0) {
		atomic_fetch_add_explicit(&op->errors, 1, memory_order_relaxed);
		rc = -EIO;
		goto out;
	}
	nfb->flags = FMT_BLOB_OPTIMIZED;
	nfb->dev_off = 0;
	*j->bytes = op->obuf;
	rc = 1;
out:
	atomic_fetch_add_explicit(&op->cpu_ns, thread_cpu_ns() - t0,
				  memory_order_relaxed);
	return rc;
}

/* encode_checked on the encoder thread (the caller waits), or here
 * without one. */
static int encode_handed(struct optimizer *op, struct enc_job *j)
{
	if (!op->enc_started)
		return encode_checked(op, j);
	pthread_mutex_lock(&op->enc_mu);
	op->job = j;
	op->enc_state = ENC_POSTED;
	pthread_cond_broadcast(&op->enc_cv);
	while (op->enc_state != ENC_DONE)
		pthread_cond_wait(&op->enc_cv, &op->enc_mu);
	op->enc_state = ENC_IDLE;
	op->job = NULL;
	pthread_mutex_unlock(&op->enc_mu);
	return j->rc;
}

int optimize_blob(struct optimizer *op, const struct fmt_blob *old,
		  const uint8_t *logical, struct dict *const *pool,
		  unsigned npool, struct fmt_blob *nfb,
		  const uint8_t **bytes)
{
	struct enc_job j = { .logical = logical, .len = old->logical_len,
			     .nref = 1, .nblobs = 1,
			     .old_cost = optimize_cost(old), .pool = pool,
			     .npool = npool, .nfb = nfb, .bytes = bytes };

	return encode_handed(op, &j);
}

int optimize_merge(struct optimizer *op, const uint8_t *logical,
		   uint32_t len, uint32_t n, uint64_t old_cost,
		   struct dict *const *pool, unsigned npool,
		   struct fmt_blob *nfb, const uint8_t **bytes)
{
	struct enc_job j = { .logical = logical, .len = len, .nref = n,
			     .nblobs = n, .old_cost = old_cost, .pool = pool,
			     .npool = npool, .nfb = nfb, .bytes = bytes };

	if (len == 0 || len > FMT_BLOB_MAX || n < 2)
		return -EINVAL;
	return encode_handed(op, &j);
}

struct seg_count {
	struct coil_store *s;
	uint64_t *out;
};

static void seg_count_ext(void *arg, struct object *o, const struct ext *e)
{
	struct seg_count *c = arg;
	uint32_t i;

	(void)o;
	if (blobd_is_mem(e->b) || (e->b->flags & FMT_BLOB_OPTIMIZED))
		return;
	i = seg_of(c->s, e->b->dev_off);
	if (i < c->s->nseg)
		c->out[i] += e->len;
}

void optimize_seg_bytes(struct coil_store *s, uint64_t *out)
{
	struct seg_count c = { s, out };

	memset(out, 0, (size_t)s->nseg * sizeof(*out));
	objtab_each_extent(s, seg_count_ext, &c);
}

#define LD(x) ((unsigned long long)atomic_load(&(x)))

int optimizer_stats_fmt(const struct optimizer *op, char *buf, size_t len)
{
	static const struct optimizer zero;
	int n;

	if (!op)
		op = &zero;
	n = snprintf(buf, len,
		     "\"optimizer\":{\"passes\":%llu,\"scanned\":%llu,"
		     "\"rewritten\":%llu,\"saved_bytes\":%llu,"
		     "\"stale_skips\":%llu,\"stale_bytes\":%llu,"
		     "\"no_gain\":%llu,\"errors\":%llu,\"bytes_read\":%llu,"
		     "\"bytes_written\":%llu,\"installed_bytes\":%llu,"
		     "\"merges\":%llu,\"merged_blobs\":%llu,"
		     "\"cpu_ns\":%llu,\"paced_ns\":%llu,"
		     "\"idle_priority\":%s}",
		     LD(op->passes), LD(op->scanned), LD(op->rewritten),
		     LD(op->saved_bytes), LD(op->stale_skips),
		     LD(op->stale_bytes), LD(op->no_gain), LD(op->errors),
		     LD(op->bytes_read), LD(op->bytes_written),
		     LD(op->installed_bytes), LD(op->merges),
		     LD(op->merged_blobs), LD(op->cpu_ns), LD(op->paced_ns),
		     atomic_load(&op->enc_idle) ? "true" : "false");
	return n < 0 ? -EIO : n;
}
