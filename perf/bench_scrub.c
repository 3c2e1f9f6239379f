/* bench_scrub: how much does a background scrub take from foreground I/O?
 * Two threads read 4 KiB at random offsets of a 128 MiB object (QD1 each,
 * a small cache, no readahead: nearly every read goes to the device) and
 * one thread writes 4 KiB at random offsets, for a while: alone, next to a
 * scrub at the default rate (coil_options.scrub_rate, 32 MiB/s), and next
 * to a scrub without a limit (passes restarted as they end).  The three
 * phases alternate in one run and print reads/s, writes/s, the p99 read
 * latency and the ratio to the phase without a scrub.
 *
 *   bench_scrub DIR [--seconds S] [--rounds R]
 *
 * perf/bench_scrub.sh builds and runs it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"

#define READERS 2
#define OBJ_BYTES (128ull << 20)
#define LAT_MAX 200000u

enum mode { MODE_NONE, MODE_DEFAULT, MODE_UNLIMITED };
static const char *const mode_name[] = { "none", "scrub 32MiB/s",
					 "scrub unlimited" };

struct run {
	coil_store *s[3];    /* one open per mode: the rate is per open */
	coil_obj *h;
	atomic_bool stop;
	atomic_uint_fast64_t reads, writes, errors;
	uint64_t *lat;       /* read latencies, ns */
	atomic_uint_fast64_t nlat;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *reader_main(void *arg)
{
	struct run *r = arg;
	uint64_t x = now_ns() | 1;
	uint8_t buf[4096];

	while (!atomic_load(&r->stop)) {
		uint64_t off, t0, k;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		off = (x % (OBJ_BYTES / 4096)) * 4096;
		t0 = now_ns();
		if (coil_pread(r->h, buf, sizeof(buf), off) != sizeof(buf))
			atomic_fetch_add(&r->errors, 1);
		k = atomic_fetch_add(&r->nlat, 1);
		if (k < LAT_MAX)
			r->lat[k] = now_ns() - t0;
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

static void *writer_main(void *arg)
{
	struct run *r = arg;
	uint64_t x = (now_ns() * 7) | 1;
	uint8_t buf[4096];

	memset(buf, 0x3c, sizeof(buf));
	while (!atomic_load(&r->stop)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[0] = (uint8_t)x;
		if (coil_pwrite(r->h, buf, sizeof(buf),
				(x % (OBJ_BYTES / 4096)) * 4096) != sizeof(buf))
			atomic_fetch_add(&r->errors, 1);
		atomic_fetch_add(&r->writes, 1);
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* What the scrub read in this open: "bytes_read" of the "scrub" section
 * of coil_stats_json. */
static uint64_t scrub_bytes_read(coil_store *s)
{
	static char js[1 << 16];
	char *p;

	if (coil_stats_json(s, js, sizeof(js)) < 0)
		return 0;
	p = strstr(js, "\"scrub\":{");
	p = p ? strstr(p, "\"bytes_read\":") : NULL;
	return p ? strtoull(p + 13, NULL, 10) : 0;
}

static int open_mode(const char *path, enum mode m, coil_store **s)
{
	struct coil_options o;

	coil_options_init(&o);
	o.cache_bytes = 8ull << 20;
	o.prefetch = 0;
	o.scrub_interval = 0;
	if (m == MODE_UNLIMITED)
		o.scrub_rate = 0;
	return coil_open(path, &o, s);
}

/* One phase of @secs seconds.  @return reads/s; *@wps, *@p99_us. */
static double phase(const char *path, enum mode m, double secs, double *wps,
		    double *p99_us, uint64_t *scrubbed)
{
	struct run r = { 0 };
	pthread_t th[READERS + 1];
	coil_store *s;
	uint64_t t0, t1, n, end;

	if (open_mode(path, m, &s) < 0 ||
	    coil_obj_open(s, "data", 0, &r.h) < 0) {
		fprintf(stderr, "bench_scrub: open failed\n");
		exit(1);
	}
	r.lat = malloc(LAT_MAX * sizeof(*r.lat));
	for (int i = 0; i < READERS; i++)
		pthread_create(&th[i], NULL, reader_main, &r);
	pthread_create(&th[READERS], NULL, writer_main, &r);
	t0 = now_ns();
	end = t0 + (uint64_t)(secs * 1e9);
	while (now_ns() < end) {
		if (m != MODE_NONE)
			(void)coil_scrub_start(s); /* -EALREADY: one runs */
		usleep(20000);
	}
	*scrubbed = scrub_bytes_read(s);
	atomic_store(&r.stop, true);
	for (int i = 0; i <= READERS; i++)
		pthread_join(th[i], NULL);
	t1 = now_ns();
	n = atomic_load(&r.nlat);
	if (n > LAT_MAX)
		n = LAT_MAX;
	qsort(r.lat, n, sizeof(*r.lat), cmp_u64);
	*p99_us = n ? (double)r.lat[n * 99 / 100] / 1e3 : 0;
	*wps = (double)atomic_load(&r.writes) / ((double)(t1 - t0) / 1e9);
	if (atomic_load(&r.errors))
		fprintf(stderr, "bench_scrub: %" PRIuFAST64 " errors\n",
			atomic_load(&r.errors));
	free(r.lat);
	coil_obj_close(r.h);
	coil_close(s);
	return (double)atomic_load(&r.reads) / ((double)(t1 - t0) / 1e9);
}

int main(int argc, char **argv)
{
	double secs = 3;
	int rounds = 3;
	char path[4096];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint8_t *buf;

	if (argc < 2) {
		fprintf(stderr, "usage: bench_scrub DIR [--seconds S] [--rounds R]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--seconds"))
			secs = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	snprintf(path, sizeof(path), "%s/scrub.coil", argv[1]);
	unlink(path);
	coil_options_init(&o);
	o.flags = COIL_CREATE;
	o.size = 512ull << 20;
	o.compression = "none";
	o.scrub_interval = 0;
	if (coil_open(path, &o, &s) < 0 ||
	    coil_obj_open(s, "data", COIL_CREATE, &h) < 0)
		return 1;
	buf = malloc(1u << 20);
	for (uint64_t off = 0; off < OBJ_BYTES; off += 1u << 20) {
		for (size_t i = 0; i < (1u << 20); i++)
			buf[i] = (uint8_t)(off / 4096 + i * 31);
		if (coil_pwrite(h, buf, 1u << 20, off) != 1 << 20)
			return 1;
	}
	free(buf);
	coil_obj_close(h);
	coil_close(s);

	printf("round mode              reads/s  writes/s  p99_read_us  scrubbed_MiB\n");
	for (int r = 0; r < rounds; r++) {
		for (int m = 0; m < 3; m++) {
			double wps, p99, rps;
			uint64_t scrubbed;

			rps = phase(path, (enum mode)m, secs, &wps, &p99,
				    &scrubbed);
			printf("%d %-18s %8.0f %9.0f %12.0f %13.1f\n", r,
			       mode_name[m], rps, wps, p99,
			       (double)scrubbed / (1 << 20));
			fflush(stdout);
		}
	}
	unlink(path);
	return 0;
}
