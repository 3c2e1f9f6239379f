/* engine/io/recode.c — the optimizer's encoder, its check and its counters
 * (the pass is the cleaner's relocation, engine/cleaner.c; the entry point
 * and dictionary training are engine/optimize.c; recode.h says how they
 * fit). */
#include <errno.h>
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

int optimizer_init(struct optimizer *op)
{
	memset(op, 0, sizeof(*op));
	return 0;
}

void optimizer_destroy(struct optimizer *op)
{
	optimizer_end(op);
}

int optimizer_begin(struct optimizer *op, int level)
{
	if (level < 1 || level > ZSTD_maxCLevel())
		return -EINVAL;
	op->level = level;
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
static uint64_t blob_cost(const struct fmt_blob *b)
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

int optimize_blob(struct optimizer *op, const struct fmt_blob *old,
		  const uint8_t *logical, struct dict *const *pool,
		  unsigned npool, struct fmt_blob *nfb,
		  const uint8_t **bytes)
{
	uint64_t t0 = thread_cpu_ns();
	struct dict *d = npool > 1 ? pool_choose(op, logical, old->logical_len,
						  pool, npool) :
				     npool ? pool[0] : NULL;
	const ZSTD_CDict *cd = d ? dict_cdict(d, op->level) : NULL;
	uint32_t bad;
	int rc;

	atomic_fetch_add_explicit(&op->scanned, 1, memory_order_relaxed);
	rc = fmt_blob_encode(op->cctx, op->level, cd, cd ? d->id : 0, logical,
			     old->logical_len, op->obuf, FMT_BLOB_MAX, nfb);
	if (rc < 0 || blob_cost(nfb) >= blob_cost(old)) {
		atomic_fetch_add_explicit(&op->no_gain, 1,
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
			    op->vbuf, FMT_BLOB_MAX) != (int)old->logical_len ||
	    memcmp(op->vbuf, logical, old->logical_len) != 0) {
		atomic_fetch_add_explicit(&op->errors, 1, memory_order_relaxed);
		rc = -EIO;
		goto out;
	}
	nfb->flags = FMT_BLOB_OPTIMIZED;
	nfb->dev_off = 0;
	*bytes = op->obuf;
	rc = 1;
out:
	atomic_fetch_add_explicit(&op->cpu_ns, thread_cpu_ns() - t0,
				  memory_order_relaxed);
	return rc;
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
		     "\"cpu_ns\":%llu}",
		     LD(op->passes), LD(op->scanned), LD(op->rewritten),
		     LD(op->saved_bytes), LD(op->stale_skips),
		     LD(op->stale_bytes), LD(op->no_gain), LD(op->errors),
		     LD(op->bytes_read), LD(op->bytes_written),
		     LD(op->installed_bytes), LD(op->cpu_ns));
	return n < 0 ? -EIO : n;
}
