/* bench_flush: do flushes starve writers?  Two threads write 4 KiB at
 * random offsets (coil_pwrite) for a while, next to nothing, next to N
 * threads calling coil_flush in a loop (each flush's callback counted, the
 * loop never waits for it), and next to N threads calling coil_sync in a
 * loop; the three phases alternate in one run and print writes/s, the worst
 * write latency, and the ratio to the phase without flushers.
 *
 *   bench_flush DIR [--seconds S] [--flushers N] [--rounds R]
 *
 * perf/bench_flush.sh builds and runs it. */
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

#define WRITERS 2
#define OBJ_BYTES (64ull << 20)

enum mode { MODE_NONE, MODE_FLUSH, MODE_SYNC };
static const char *const mode_name[] = { "none", "flush loop", "sync loop" };

struct run {
	coil_store *s;
	coil_obj *h[WRITERS];
	enum mode mode;
	atomic_bool stop;
	atomic_uint_fast64_t writes, write_errors, worst_ns;
	atomic_uint_fast64_t flushes, flush_done, flush_errors;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct writer_arg {
	struct run *r;
	int i;
};

static void *writer_main(void *arg)
{
	struct writer_arg *wa = arg;
	struct run *r = wa->r;
	uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(wa->i + 1);
	uint8_t buf[4096];

	memset(buf, 0x5a + wa->i, sizeof(buf));
	while (!atomic_load(&r->stop)) {
		uint64_t t0, dt, off, m;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		off = (x % (OBJ_BYTES / 4096)) * 4096;
		memcpy(buf, &x, sizeof(x)); /* not all alike */
		t0 = now_ns();
		if (coil_pwrite(r->h[wa->i], buf, sizeof(buf), off) != 4096) {
			atomic_fetch_add(&r->write_errors, 1);
			continue;
		}
		dt = now_ns() - t0;
		atomic_fetch_add(&r->writes, 1);
		m = atomic_load(&r->worst_ns);
		while (dt > m && !atomic_compare_exchange_weak(&r->worst_ns, &m, dt))
			;
	}
	return NULL;
}

static void flush_cb(void *arg, int64_t res)
{
	struct run *r = arg;

	if (res < 0)
		atomic_fetch_add(&r->flush_errors, 1);
	atomic_fetch_add(&r->flush_done, 1);
}

static void *flusher_main(void *arg)
{
	struct run *r = arg;

	while (!atomic_load(&r->stop)) {
		int rc = r->mode == MODE_FLUSH ? coil_flush(r->s, flush_cb, r) :
						 coil_sync(r->s);

		if (rc < 0 && rc != -EAGAIN)
			atomic_fetch_add(&r->flush_errors, 1);
		else if (rc == 0)
			atomic_fetch_add(&r->flushes, 1);
	}
	return NULL;
}

static void phase(struct run *r, enum mode mode, unsigned nflush,
		  double seconds, double *wps, double *worst_ms)
{
	pthread_t wt[WRITERS], *ft = calloc(nflush ? nflush : 1, sizeof(*ft));
	struct writer_arg wa[WRITERS];
	unsigned nf = mode == MODE_NONE ? 0 : nflush;
	uint64_t t0, t1;

	r->mode = mode;
	atomic_store(&r->stop, false);
	atomic_store(&r->writes, 0);
	atomic_store(&r->worst_ns, 0);
	atomic_store(&r->flushes, 0);
	atomic_store(&r->flush_done, 0);
	for (unsigned i = 0; i < nf; i++)
		pthread_create(&ft[i], NULL, flusher_main, r);
	t0 = now_ns();
	for (int i = 0; i < WRITERS; i++) {
		wa[i].r = r;
		wa[i].i = i;
		pthread_create(&wt[i], NULL, writer_main, &wa[i]);
	}
	usleep((useconds_t)(seconds * 1e6));
	atomic_store(&r->stop, true);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(wt[i], NULL);
	t1 = now_ns();
	for (unsigned i = 0; i < nf; i++)
		pthread_join(ft[i], NULL);
	/* every flush of the phase done before the next begins */
	coil_sync(r->s);
	while (atomic_load(&r->flush_done) < atomic_load(&r->flushes) &&
	       mode == MODE_FLUSH)
		usleep(1000);
	*wps = (double)atomic_load(&r->writes) / ((double)(t1 - t0) / 1e9);
	*worst_ms = (double)atomic_load(&r->worst_ns) / 1e6;
	free(ft);
}

int main(int argc, char **argv)
{
	struct coil_options o;
	struct run r;
	char path[4096];
	double seconds = 3;
	unsigned nflush = 32, rounds = 2;
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR [--seconds S] [--flushers N] "
			"[--rounds R]\n", argv[0]);
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--flushers"))
			nflush = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = (unsigned)atoi(argv[i + 1]);
	}
	snprintf(path, sizeof(path), "%s/flush.coil", argv[1]);
	unlink(path);
	memset(&r, 0, sizeof(r));
	coil_options_init(&o);
	o.flags = COIL_CREATE;
	o.size = 1ull << 30;
	rc = coil_open(path, &o, &r.s);
	if (rc == -EINVAL) {
		o.flags |= COIL_NO_DIRECT;
		rc = coil_open(path, &o, &r.s);
	}
	if (rc < 0) {
		fprintf(stderr, "coil_open %s: %s\n", path, coil_strerror(rc));
		return 1;
	}
	for (int i = 0; i < WRITERS; i++) {
		char name[16];

		snprintf(name, sizeof(name), "w%d", i);
		rc = coil_obj_open(r.s, name, COIL_CREATE, &r.h[i]);
		if (rc < 0) {
			fprintf(stderr, "coil_obj_open: %s\n", coil_strerror(rc));
			return 1;
		}
	}
	printf("%u writers x 4 KiB coil_pwrite, %u flushers, %.1f s per phase\n",
	       WRITERS, nflush, seconds);
	printf("%-6s %-11s %12s %14s %10s\n", "round", "flushers", "writes/s",
	       "worst write ms", "vs none");
	for (unsigned k = 0; k < rounds; k++) {
		double base = 0;

		for (int m = MODE_NONE; m <= MODE_SYNC; m++) {
			double wps, worst;

			phase(&r, (enum mode)m, nflush, seconds, &wps, &worst);
			if (m == MODE_NONE)
				base = wps;
			printf("%-6u %-11s %12.0f %14.1f %9.2fx\n", k + 1,
			       mode_name[m], wps, worst, base > 0 ? wps / base : 0);
			fflush(stdout);
		}
	}
	if (atomic_load(&r.write_errors) || atomic_load(&r.flush_errors))
		printf("errors: %" PRIuFAST64 " writes, %" PRIuFAST64
		       " flushes\n", atomic_load(&r.write_errors),
		       atomic_load(&r.flush_errors));
	for (int i = 0; i < WRITERS; i++)
		coil_obj_close(r.h[i]);
	rc = coil_close(r.s);
	unlink(path);
	return rc < 0 ? 1 : 0;
}
