/* perf/bench_cache.c — choose the decoded-blob cache's eviction policy by
 * measurement.  Every policy replays the same traces in the same run,
 * alternating order across repeats, and we print medians and ratios vs LRU.
 *
 * Trace per thread: blob keys drawn from a Zipfian hot set (YCSB-style,
 * alpha 0.99 over --keys blobs), and in the "scan" workload, every --period
 * operations one sequential scan of --scan blobs never read before (a table
 * scan, a backup, a cleaner pass) — 2x the cache by default.  Each operation
 * is what the engine's read path does: cache_get; on a hit copy 4 KiB out of
 * the entry and put it; on a miss allocate a value, touch it (stands in for
 * the decode) and cache_insert it.  ops/s therefore measures the cache's own
 * cost (locking, policy, allocation) — a real miss also pays a device read
 * and a decode, which is why the hit ratio is the number that matters most.
 *
 * A third workload has every hot key fit in the cache (after warm-up nearly
 * all hits): it isolates what a hit costs under each policy — LRU moves the
 * entry to the head of a list under the shard lock, S3-FIFO bumps a counter.
 *
 * usage: bench_cache [--threads N] [--ops N] [--repeats N] [--cache-mb N]
 *                    [--blob-kb N] [--keys N] [--scan N] [--period N]
 *                    [--alpha-pct N]   (zipf alpha x 100, default 99)
 *                    [--small-pct N]   (S3-FIFO small / 2Q A1in share, 0 = default)
 */
#include "cache/cache.h"
#include "common/common.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS_MAX 16
#define REPEATS_MAX 15
#define SCAN_BIT (1ull << 63) /* marks a scan op in a trace */

struct cfg {
	unsigned threads, repeats, small_pct;
	uint64_t ops, cache_bytes, keys, scan, period;
	uint32_t blob;
	double alpha;
};

struct trace {
	uint64_t *op; /* blob index, SCAN_BIT set for scan ops */
	uint64_t n;
};

struct run {
	struct cache *c;
	const struct trace *t;
	uint32_t blob;
	uint64_t hot_ops, hot_hits, scan_ops, scan_hits, rejects;
	uint64_t sink;
	uint64_t cpu_ns;
};

struct result {
	double hot_hit, all_hit, mops, cpu_ns_op;
};

static const enum cache_policy policies[] = {
	CACHE_POLICY_LRU, CACHE_POLICY_S3FIFO, CACHE_POLICY_2Q,
};
#define NPOL (sizeof(policies) / sizeof(policies[0]))

static uint64_t rng_next(uint64_t *s)
{
	/* splitmix64: cheap and good enough to draw a trace */
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ z >> 27) * 0x94D049BB133111EBull;
	return z ^ z >> 31;
}

static double *zipf_cdf(uint64_t n, double alpha)
{
	double *cdf = malloc(n * sizeof(*cdf)), sum = 0, run = 0;

	if (!cdf)
		return NULL;
	for (uint64_t i = 0; i < n; i++)
		sum += 1.0 / pow((double)(i + 1), alpha);
	for (uint64_t i = 0; i < n; i++) {
		run += 1.0 / pow((double)(i + 1), alpha);
		cdf[i] = run / sum;
	}
	return cdf;
}

static uint64_t zipf_draw(const double *cdf, uint64_t n, uint64_t *seed)
{
	double u = (double)(rng_next(seed) >> 11) / (double)(1ull << 53);
	uint64_t lo = 0, hi = n - 1;

	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Thread @ti's trace.  Scan blobs are numbered past the hot key space and
 * never repeat, so a scan op can only hit by accident of policy (never). */
static int trace_make(const struct cfg *cfg, const double *cdf, unsigned ti,
		      bool scans, struct trace *t)
{
	uint64_t seed = 12345 + ti * 7919, scan_next = cfg->keys +
		(uint64_t)ti * (cfg->ops / cfg->period + 1) * cfg->scan;
	uint64_t i = 0;

	t->n = cfg->ops;
	t->op = malloc(t->n * sizeof(*t->op));
	if (!t->op)
		return -ENOMEM;
	while (i < t->n) {
		if (scans && i && i % cfg->period == 0) {
			for (uint64_t k = 0; k < cfg->scan && i < t->n; k++)
				t->op[i++] = (scan_next++) | SCAN_BIT;
			if (i >= t->n)
				break;
		}
		/* rank -> blob: a fixed scramble, so hot blobs are not adjacent */
		t->op[i++] = zipf_draw(cdf, cfg->keys, &seed) * 0x9E3779B1ull % cfg->keys;
	}
	return 0;
}

static void *run_thread(void *p)
{
	struct run *r = p;
	uint8_t page[4096];
	uint64_t cpu0 = coil_thread_cpu_ns();

	for (uint64_t i = 0; i < r->t->n; i++) {
		uint64_t op = r->t->op[i];
		bool scan = op & SCAN_BIT;
		struct cache_key k = { (op & ~SCAN_BIT) * r->blob, 1 };
		const struct cache_entry *e;
		int rc = cache_get(r->c, &k, &e);

		if (scan)
			r->scan_ops++;
		else
			r->hot_ops++;
		if (rc >= 0) {
			/* the engine copies the caller's 4 KiB out of the blob */
			memcpy(page, e->data + (i & 7) * 512, sizeof(page));
			r->sink += page[(i * 131) & 4095];
			cache_put(r->c, e);
			if (scan)
				r->scan_hits++;
			else
				r->hot_hits++;
			continue;
		}
		uint8_t *v = cache_alloc_value(r->blob);

		if (!v)
			abort();
		/* stands in for the decode: write the first and last pages */
		memset(v, (int)op, 4096);
		memset(v + r->blob - 4096, (int)op, 4096);
		if (cache_insert(r->c, &k, v, r->blob, 0, NULL) < 0) {
			cache_free_value(v);
			r->rejects++;
		}
	}
	/* CPU time per op is steadier than wall time on a shared machine:
	 * it does not count the time another tenant held our core */
	r->cpu_ns = coil_thread_cpu_ns() - cpu0;
	return NULL;
}

static int run_once(const struct cfg *cfg, enum cache_policy pol,
		    const struct trace *traces, struct result *res)
{
	struct cache_options o;
	struct cache *c;
	struct run r[THREADS_MAX];
	pthread_t th[THREADS_MAX];
	uint64_t t0, t1, hot = 0, hot_hits = 0, all = 0, all_hits = 0, cpu = 0;
	int rc;

	cache_options_init(&o);
	o.bytes_max = cfg->cache_bytes;
	o.policy = pol;
	o.small_percent = cfg->small_pct;
	rc = cache_create(&o, &c);
	if (rc)
		return rc;
	t0 = coil_now_ns();
	for (unsigned i = 0; i < cfg->threads; i++) {
		r[i] = (struct run){ .c = c, .t = &traces[i], .blob = cfg->blob };
		if (pthread_create(&th[i], NULL, run_thread, &r[i]))
			abort();
	}
	for (unsigned i = 0; i < cfg->threads; i++)
		pthread_join(th[i], NULL);
	t1 = coil_now_ns();
	for (unsigned i = 0; i < cfg->threads; i++) {
		hot += r[i].hot_ops;
		hot_hits += r[i].hot_hits;
		all += r[i].hot_ops + r[i].scan_ops;
		all_hits += r[i].hot_hits + r[i].scan_hits;
		cpu += r[i].cpu_ns;
	}
	res->cpu_ns_op = all ? (double)cpu / (double)all : 0;
	res->hot_hit = hot ? (double)hot_hits / (double)hot : 0;
	res->all_hit = all ? (double)all_hits / (double)all : 0;
	res->mops = (double)all / ((double)(t1 - t0) / 1e9) / 1e6;
	cache_destroy(c);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int workload(const struct cfg *cfg, const double *cdf, bool scans)
{
	struct trace traces[THREADS_MAX];
	struct result res[NPOL][REPEATS_MAX];
	int rc = 0;

	for (unsigned i = 0; i < cfg->threads; i++) {
		rc = trace_make(cfg, cdf, i, scans, &traces[i]);
		if (rc)
			return rc;
	}
	printf("\n== workload: zipf(%.2f) over %lu blobs of %u KiB%s, cache %lu MiB"
	       " (%.0f%% of the hot keys' bytes), %u threads, %lu ops/thread\n",
	       cfg->alpha, (unsigned long)cfg->keys, cfg->blob >> 10,
	       scans ? " + scans" : "", (unsigned long)(cfg->cache_bytes >> 20),
	       100.0 * (double)cfg->cache_bytes / ((double)cfg->keys * cfg->blob),
	       cfg->threads, (unsigned long)cfg->ops);
	if (scans)
		printf("   every %lu ops each thread scans %lu new blobs (%.1fx the cache)\n",
		       (unsigned long)cfg->period, (unsigned long)cfg->scan,
		       (double)cfg->scan * cfg->blob / (double)cfg->cache_bytes);
	for (unsigned rep = 0; rep < cfg->repeats; rep++) {
		printf("   repeat %u:", rep);
		/* rotate the order so no policy always runs first (cold
		 * allocator) or last (warm) */
		for (unsigned j = 0; j < NPOL; j++) {
			unsigned p = (j + rep) % NPOL;

			rc = run_once(cfg, policies[p], traces, &res[p][rep]);
			if (rc)
				goto out;
			printf("  %s hot %.3f %.2f Mops/s %.0f ns",
			       cache_policy_name(policies[p]), res[p][rep].hot_hit,
			       res[p][rep].mops, res[p][rep].cpu_ns_op);
		}
		printf("\n");
		fflush(stdout);
	}
	printf("   %-7s %11s %11s %10s %12s %14s %11s %11s\n", "policy",
	       "hot-hit med", "all-hit med", "Mops/s med", "cpu ns/op med",
	       "hot-miss ratio", "ops/s ratio", "cpu ratio");
	{
		double lru_hot = 0, lru_mops = 0, lru_cpu = 0;

		for (unsigned p = 0; p < NPOL; p++) {
			double h[REPEATS_MAX], a[REPEATS_MAX], m[REPEATS_MAX];
			double u[REPEATS_MAX], mh, ma, mm, mu;

			for (unsigned rep = 0; rep < cfg->repeats; rep++) {
				h[rep] = res[p][rep].hot_hit;
				a[rep] = res[p][rep].all_hit;
				m[rep] = res[p][rep].mops;
				u[rep] = res[p][rep].cpu_ns_op;
			}
			mh = median(h, cfg->repeats);
			ma = median(a, cfg->repeats);
			mm = median(m, cfg->repeats);
			mu = median(u, cfg->repeats);
			if (policies[p] == CACHE_POLICY_LRU) {
				lru_hot = mh;
				lru_mops = mm;
				lru_cpu = mu;
			}
			/* misses are what cost device reads: compare them */
			printf("   %-7s %11.4f %11.4f %10.2f %12.0f %13.3fx %10.3fx %10.3fx\n",
			       cache_policy_name(policies[p]), mh, ma, mm, mu,
			       (1 - mh) / (1 - lru_hot), mm / lru_mops, mu / lru_cpu);
		}
		printf("   (ratios vs lru; hot-miss < 1 = fewer misses on the hot set,"
		       " cpu < 1 = cheaper per op)\n");
	}
out:
	for (unsigned i = 0; i < cfg->threads; i++)
		free(traces[i].op);
	return rc;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end || end == s ? -EINVAL : 0;
}

int main(int argc, char **argv)
{
	struct cfg cfg = {
		.threads = 2, .repeats = 5, .ops = 1000000,
		.cache_bytes = 64ull << 20, .keys = 8192, .blob = 32768,
		.alpha = 0.99, .scan = 0, .period = 100000,
	};
	double *cdf;
	int rc;

	for (int i = 1; i + 1 < argc; i += 2) {
		uint64_t v;

		if (parse_u64(argv[i + 1], &v)) {
			fprintf(stderr, "bad value for %s\n", argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--threads") && v >= 1 && v <= THREADS_MAX)
			cfg.threads = (unsigned)v;
		else if (!strcmp(argv[i], "--ops") && v >= 1000)
			cfg.ops = v;
		else if (!strcmp(argv[i], "--repeats") && v >= 1 && v <= REPEATS_MAX)
			cfg.repeats = (unsigned)v;
		else if (!strcmp(argv[i], "--cache-mb") && v >= 1)
			cfg.cache_bytes = v << 20;
		else if (!strcmp(argv[i], "--blob-kb") && v >= 8 && v <= 1024)
			cfg.blob = (uint32_t)v << 10;
		else if (!strcmp(argv[i], "--keys") && v >= 16)
			cfg.keys = v;
		else if (!strcmp(argv[i], "--scan"))
			cfg.scan = v;
		else if (!strcmp(argv[i], "--period") && v >= 100)
			cfg.period = v;
		else if (!strcmp(argv[i], "--small-pct") && v <= 90)
			cfg.small_pct = (unsigned)v;
		else if (!strcmp(argv[i], "--alpha-pct") && v >= 1 && v <= 300)
			cfg.alpha = (double)v / 100;
		else {
			fprintf(stderr, "usage: see the comment at the top of %s\n",
				__FILE__);
			return 2;
		}
	}
	if (!cfg.scan)
		cfg.scan = 2 * cfg.cache_bytes / cfg.blob;
	cdf = zipf_cdf(cfg.keys, cfg.alpha);
	if (!cdf)
		return 1;
	printf("bench_cache: policies lru (baseline), s3fifo, 2q; medians of %u repeats;"
	       " small share %u%% (0 = default)\n", cfg.repeats, cfg.small_pct);
	rc = workload(&cfg, cdf, false);
	if (!rc)
		rc = workload(&cfg, cdf, true);
	free(cdf);
	if (!rc) {
		/* the hit path: every hot blob fits (80 % of the budget) */
		struct cfg fit = cfg;

		fit.keys = cfg.cache_bytes * 8 / 10 / cfg.blob;
		cdf = zipf_cdf(fit.keys, fit.alpha);
		if (!cdf)
			return 1;
		rc = workload(&fit, cdf, false);
		free(cdf);
	}
	if (rc)
		fprintf(stderr, "bench_cache: %s\n", strerror(-rc));
	return rc ? 1 : 0;
}
