/* perf/bench_readahead.c — readahead and the decoded-blob cache, measured
 * side by side in one run (docs/readahead.md).
 *
 * 1. Sequential cold read at queue depth 1: 16 KiB coil_pread calls from the
 *    start to the end of a compressible object, prefetch on vs prefetch off
 *    (the peer: the same engine, same cache, no readahead).  Cold: every run
 *    opens a new store handle (close + reopen), so coil's cache is empty, and
 *    the store is O_DIRECT, so the page cache holds nothing either.
 * 2. Random 4 KiB reads at queue depth 1 from a working set that fits the
 *    cache and from one that does not, cache on vs cache off (cache_bytes 0),
 *    prefetch on in both (the policy admits nothing for random reads).
 *
 * Modes alternate within each repeat (order flipped every repeat); printed:
 * per-run numbers, the median per mode, and the median of the per-repeat
 * paired ratios.  Every 8th read is checked against the generator.
 *
 * usage: bench_readahead DIR [--mib N] [--repeats N] [--rand-ops N]
 *                            [--fit-mib N] [--nofit-mib N] [--cache-mib N]
 *                            [--json FILE]
 * Env: COIL_RA_MIB overrides --mib (768 for the full-size run).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "common/common.h"

#define REPEATS_MAX 15

struct cfg {
	const char *dir;
	const char *json;
	uint64_t mib, fit_mib, nofit_mib, cache_mib, rand_ops;
	unsigned repeats;
};

/* Compressible, deterministic by offset: each 4 KiB block is text-like
 * (a few words repeated) or random, about half each, so zstd:1 stores a
 * 64 KiB blob in roughly half its size. */
static void gen_block(uint8_t *p, uint64_t blk)
{
	uint64_t x = blk * 0x9E3779B97F4A7C15ull + 0x1234567ull;
	static const char words[] = "coil reads blobs ahead of the reader ";

	x ^= x >> 31;
	if (((x >> 7) & 1) == 0) {
		for (unsigned i = 0; i < 4096; i++)
			p[i] = (uint8_t)words[(i + blk) % (sizeof(words) - 1)];
		memcpy(p, &blk, sizeof(blk));
		return;
	}
	for (unsigned i = 0; i < 4096; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
}

static void gen(uint8_t *p, uint64_t off, size_t len)
{
	uint8_t blk[4096];

	while (len) {
		uint64_t b = off / 4096, skip = off % 4096;
		size_t n = COIL_MIN(len, (size_t)(4096 - skip));

		gen_block(blk, b);
		memcpy(p, blk + skip, n);
		p += n;
		off += n;
		len -= n;
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	double t[REPEATS_MAX];

	memcpy(t, v, n * sizeof(*v));
	qsort(t, n, sizeof(*t), cmp_d);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static uint64_t json_u64(const char *js, const char *section, const char *key)
{
	const char *p = section ? strstr(js, section) : js;
	char pat[96];

	if (!p)
		return 0;
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(p, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

static char store_path[4096];

static int open_store(const struct cfg *c, unsigned prefetch,
		      uint64_t cache_bytes, bool create, coil_store **s)
{
	struct coil_options o;

	coil_options_init(&o);
	o.size = (c->mib + c->nofit_mib) * 2 * (1ull << 20) + (256ull << 20);
	o.flags = create ? COIL_CREATE : 0;
	o.prefetch = prefetch;
	o.cache_bytes = cache_bytes;
	return coil_open(store_path, &o, s);
}

static int fill(const struct cfg *c, const char *name, uint64_t mib)
{
	coil_store *s;
	coil_obj *h;
	uint8_t *buf = malloc(1u << 20);
	int rc;

	rc = open_store(c, 1, 64ull << 20, false, &s);
	if (rc < 0)
		return rc;
	rc = coil_obj_open(s, name, COIL_CREATE, &h);
	for (uint64_t off = 0; rc == 0 && off < mib << 20; off += 1u << 20) {
		int64_t n;

		gen(buf, off, 1u << 20);
		n = coil_pwrite(h, buf, 1u << 20, off);
		if (n != 1 << 20)
			rc = n < 0 ? (int)n : -EIO;
	}
	if (rc == 0)
		rc = coil_obj_close(h);
	if (rc == 0)
		rc = coil_sync(s);
	coil_close(s);
	free(buf);
	return rc;
}

struct seq_res {
	double mb_s;
	double ready_pct;    /* blobs ready in the cache at first demand */
	double served_pct;   /* blobs served by a prefetch, waited or not */
	uint64_t ready, served, waits, wait_ns, blobs, completed, cancelled, inline_dec;
};

static int run_seq(const struct cfg *c, unsigned prefetch, struct seq_res *r)
{
	coil_store *s;
	coil_obj *h;
	uint8_t *buf = malloc(16384), *want = malloc(16384);
	uint64_t size = c->mib << 20, t0, t1, bad = 0;
	static char js[16384];
	int rc;

	rc = open_store(c, prefetch, c->cache_mib << 20, false, &s);
	if (rc < 0)
		return rc;
	rc = coil_obj_open(s, "seq", 0, &h);
	t0 = coil_now_ns();
	for (uint64_t off = 0, i = 0; rc == 0 && off < size; off += 16384, i++) {
		int64_t n = coil_pread(h, buf, 16384, off);

		if (n != 16384) {
			rc = n < 0 ? (int)n : -EIO;
			break;
		}
		if (i % 8 == 0) {
			gen(want, off, 16384);
			bad += memcmp(buf, want, 16384) != 0;
		}
	}
	t1 = coil_now_ns();
	if (rc == 0)
		rc = coil_obj_close(h);
	coil_stats_json(s, js, sizeof(js));
	coil_close(s);
	if (bad) {
		fprintf(stderr, "bench_readahead: %" PRIu64 " wrong reads\n", bad);
		rc = -EIO;
	}
	r->mb_s = (double)size / 1e6 / ((double)(t1 - t0) / 1e9);
	r->blobs = size / 65536;
	r->ready = json_u64(js, "\"prefetch\"", "ready_no_wait");
	r->served = json_u64(js, "\"report\"", "ready_before_demand");
	r->waits = json_u64(js, "\"report\"", "demand_waits");
	r->wait_ns = json_u64(js, "\"report\"", "demand_wait_ns");
	r->completed = json_u64(js, "\"report\"", "completed");
	r->cancelled = json_u64(js, "\"report\"", "cancelled");
	r->inline_dec = json_u64(js, "\"io\"", "inline_decodes");
	r->ready_pct = 100.0 * (double)r->ready / (double)r->blobs;
	r->served_pct = 100.0 * (double)r->served / (double)r->blobs;
	free(buf);
	free(want);
	return rc;
}

struct rand_res {
	double iops;
	double hit_pct;
};

static int run_rand(const struct cfg *c, uint64_t ws_mib, uint64_t cache_bytes,
		    uint64_t seed, struct rand_res *r)
{
	coil_store *s;
	coil_obj *h;
	uint8_t buf[4096], want[4096];
	uint64_t x = seed * 2654435761u + 1, t0, t1, blocks = (ws_mib << 20) / 4096;
	uint64_t bad = 0, hits, misses;
	static char js[16384];
	int rc;

	rc = open_store(c, 1, cache_bytes, false, &s);
	if (rc < 0)
		return rc;
	rc = coil_obj_open(s, "seq", 0, &h);
	t0 = coil_now_ns();
	for (uint64_t i = 0; rc == 0 && i < c->rand_ops; i++) {
		uint64_t off;
		int64_t n;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		off = (x % blocks) * 4096;
		n = coil_pread(h, buf, 4096, off);
		if (n != 4096) {
			rc = n < 0 ? (int)n : -EIO;
			break;
		}
		if (i % 8 == 0) {
			gen(want, off, 4096);
			bad += memcmp(buf, want, 4096) != 0;
		}
	}
	t1 = coil_now_ns();
	if (rc == 0)
		rc = coil_obj_close(h);
	coil_stats_json(s, js, sizeof(js));
	coil_close(s);
	if (bad)
		rc = -EIO;
	hits = json_u64(js, "\"cache\"", "hits");
	misses = json_u64(js, "\"cache\"", "misses");
	r->iops = (double)c->rand_ops / ((double)(t1 - t0) / 1e9);
	r->hit_pct = hits + misses ? 100.0 * (double)hits / (double)(hits + misses) : 0;
	return rc;
}

static uint64_t arg_u64(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		fprintf(stderr, "missing value for %s\n", argv[*i]);
		exit(2);
	}
	return strtoull(argv[++*i], NULL, 10);
}

int main(int argc, char **argv)
{
	struct cfg c = { .mib = 256, .fit_mib = 32, .nofit_mib = 256,
			 .cache_mib = 64, .rand_ops = 6000, .repeats = 5 };
	struct seq_res seq[2][REPEATS_MAX];
	struct rand_res rnd[4][REPEATS_MAX]; /* fit/on fit/off nofit/on nofit/off */
	double v[REPEATS_MAX], ratio_seq[REPEATS_MAX], ratio_fit[REPEATS_MAX],
		ratio_nofit[REPEATS_MAX];
	const char *env = getenv("COIL_RA_MIB");
	FILE *jf = NULL;
	coil_store *s;
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR [--mib N] [--repeats N] "
			"[--rand-ops N] [--fit-mib N] [--nofit-mib N] "
			"[--cache-mib N] [--json FILE]\n", argv[0]);
		return 2;
	}
	c.dir = argv[1];
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--mib"))
			c.mib = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--repeats"))
			c.repeats = (unsigned)arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--rand-ops"))
			c.rand_ops = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--fit-mib"))
			c.fit_mib = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--nofit-mib"))
			c.nofit_mib = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--cache-mib"))
			c.cache_mib = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			c.json = argv[++i];
		else {
			fprintf(stderr, "unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (env && *env)
		c.mib = strtoull(env, NULL, 10);
	if (c.repeats < 1 || c.repeats > REPEATS_MAX || c.mib < 16 ||
	    c.nofit_mib > c.mib || c.fit_mib > c.mib || c.fit_mib == 0) {
		fprintf(stderr, "bad sizes/repeats (need 16 <= mib, fit/nofit <= mib)\n");
		return 2;
	}
	snprintf(store_path, sizeof(store_path), "%s/readahead.coil", c.dir);
	unlink(store_path);
	rc = open_store(&c, 1, 64ull << 20, true, &s);
	if (rc == 0)
		rc = coil_close(s);
	if (rc == 0)
		rc = fill(&c, "seq", c.mib);
	if (rc < 0) {
		fprintf(stderr, "setup: %s\n", coil_strerror(rc));
		return 1;
	}
	printf("# bench_readahead: %" PRIu64 " MiB object, zstd:1, O_DIRECT, "
	       "cache %" PRIu64 " MiB, %u repeats\n", c.mib, c.cache_mib,
	       c.repeats);
	printf("# 1. sequential cold read, QD1, 16 KiB requests\n");
	for (unsigned r = 0; r < c.repeats; r++) {
		for (unsigned k = 0; k < 2; k++) {
			unsigned on = (r + k) % 2; /* flip the order each repeat */
			struct seq_res *x = &seq[on][r];

			rc = run_seq(&c, on, x);
			if (rc < 0) {
				fprintf(stderr, "seq: %s\n", coil_strerror(rc));
				return 1;
			}
			printf("rep %u prefetch %-3s %8.1f MB/s  ready-before-demand "
			       "%5.1f %% (%" PRIu64 "/%" PRIu64 ")  served by "
			       "prefetch %5.1f %%  waits %" PRIu64
			       " (avg %.0f us)  inline decodes %" PRIu64 "\n", r + 1,
			       on ? "on" : "off", x->mb_s, x->ready_pct, x->ready,
			       x->blobs, x->served_pct, x->waits,
			       x->waits ? (double)x->wait_ns / (double)x->waits / 1e3 : 0.0,
			       x->inline_dec);
			fflush(stdout);
		}
		ratio_seq[r] = seq[1][r].mb_s / seq[0][r].mb_s;
	}
	printf("# 2. random 4 KiB reads, QD1, %" PRIu64 " reads per run, cold "
	       "handle\n", c.rand_ops);
	for (unsigned r = 0; r < c.repeats; r++) {
		for (unsigned k = 0; k < 4; k++) {
			unsigned m = (k + r) % 4;
			uint64_t ws = m < 2 ? c.fit_mib : c.nofit_mib;
			uint64_t cb = m % 2 == 0 ? c.cache_mib << 20 : 0;

			rc = run_rand(&c, ws, cb, r + 1, &rnd[m][r]);
			if (rc < 0) {
				fprintf(stderr, "rand: %s\n", coil_strerror(rc));
				return 1;
			}
			printf("rep %u ws %4" PRIu64 " MiB cache %-3s %8.0f IOPS  hit %5.1f %%\n",
			       r + 1, ws, cb ? "on" : "off", rnd[m][r].iops,
			       rnd[m][r].hit_pct);
			fflush(stdout);
		}
		ratio_fit[r] = rnd[0][r].iops / rnd[1][r].iops;
		ratio_nofit[r] = rnd[2][r].iops / rnd[3][r].iops;
	}
	unlink(store_path);

	{
		double on_mb, off_mb, rs, rdy, srv, rf, rn, io[4], hit[4];
		unsigned n = c.repeats;

		for (unsigned i = 0; i < n; i++) v[i] = seq[1][i].mb_s;
		on_mb = median(v, n);
		for (unsigned i = 0; i < n; i++) v[i] = seq[0][i].mb_s;
		off_mb = median(v, n);
		for (unsigned i = 0; i < n; i++) v[i] = seq[1][i].ready_pct;
		rdy = median(v, n);
		for (unsigned i = 0; i < n; i++) v[i] = seq[1][i].served_pct;
		srv = median(v, n);
		rs = median(ratio_seq, n);
		rf = median(ratio_fit, n);
		rn = median(ratio_nofit, n);
		for (unsigned m = 0; m < 4; m++) {
			for (unsigned i = 0; i < n; i++) v[i] = rnd[m][i].iops;
			io[m] = median(v, n);
			for (unsigned i = 0; i < n; i++) v[i] = rnd[m][i].hit_pct;
			hit[m] = median(v, n);
		}
		printf("# medians\n");
		printf("sequential QD1 16K: prefetch on %.1f MB/s, off %.1f MB/s, "
		       "on/off %.2fx (median of paired ratios; target >= 2x: %s); "
		       "ready-before-demand %.1f %% without any wait (target >= "
		       "90 %%: %s), %.1f %% served by prefetch incl. demands "
		       "that waited for an in-flight prefetch\n",
		       on_mb, off_mb, rs, rs >= 2.0 ? "meets" : "misses", rdy,
		       rdy >= 90.0 ? "meets" : "misses", srv);
		printf("random 4K, ws %" PRIu64 " MiB (fits): cache on %.0f IOPS "
		       "(hit %.1f %%), off %.0f IOPS, on/off %.2fx\n",
		       c.fit_mib, io[0], hit[0], io[1], rf);
		printf("random 4K, ws %" PRIu64 " MiB (does not fit): cache on %.0f "
		       "IOPS (hit %.1f %%), off %.0f IOPS, on/off %.2fx\n",
		       c.nofit_mib, io[2], hit[2], io[3], rn);
		if (c.json)
			jf = fopen(c.json, "w");
		if (jf) {
			fprintf(jf, "{\"bench\":\"bench_readahead\",\"mib\":%" PRIu64
				",\"cache_mib\":%" PRIu64 ",\"repeats\":%u,"
				"\"rand_ops\":%" PRIu64 ",\n\"sequential_qd1_16k\":{"
				"\"on_mb_s\":[", c.mib, c.cache_mib, n, c.rand_ops);
			for (unsigned i = 0; i < n; i++)
				fprintf(jf, "%s%.1f", i ? "," : "", seq[1][i].mb_s);
			fprintf(jf, "],\"off_mb_s\":[");
			for (unsigned i = 0; i < n; i++)
				fprintf(jf, "%s%.1f", i ? "," : "", seq[0][i].mb_s);
			fprintf(jf, "],\"ready_before_demand_pct\":[");
			for (unsigned i = 0; i < n; i++)
				fprintf(jf, "%s%.1f", i ? "," : "", seq[1][i].ready_pct);
			fprintf(jf, "],\"served_by_prefetch_pct\":[");
			for (unsigned i = 0; i < n; i++)
				fprintf(jf, "%s%.1f", i ? "," : "", seq[1][i].served_pct);
			fprintf(jf, "],\"median_on_mb_s\":%.1f,\"median_off_mb_s\":%.1f,"
				"\"median_ratio\":%.3f,\"median_ready_pct\":%.1f,"
				"\"median_served_pct\":%.1f,"
				"\"target_ratio\":2.0,\"target_ready_pct\":90},\n",
				on_mb, off_mb, rs, rdy, srv);
			fprintf(jf, "\"random_4k\":{\"fit_mib\":%" PRIu64 ",\"nofit_mib\":%"
				PRIu64 ",\"fit_cache_on_iops\":%.0f,\"fit_cache_off_iops\":%.0f,"
				"\"fit_hit_pct\":%.1f,\"fit_ratio\":%.3f,"
				"\"nofit_cache_on_iops\":%.0f,\"nofit_cache_off_iops\":%.0f,"
				"\"nofit_hit_pct\":%.1f,\"nofit_ratio\":%.3f}}\n",
				c.fit_mib, c.nofit_mib, io[0], io[1], hit[0], rf,
				io[2], io[3], hit[2], rn);
			fclose(jf);
		}
	}
	return 0;
}
