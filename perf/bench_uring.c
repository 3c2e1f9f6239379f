/* perf/bench_uring.c — a tiny driver: 4 KiB random reads at a fixed queue
 * depth through uring/ (O_DIRECT, registered buffers), for a fixed time.
 * perf/bench_uring.sh runs it next to fio's io_uring engine on the same
 * file.  Each completion resubmits from the ring thread, as an engine would
 * chain its next step, so the queue stays full without a producer thread.
 *
 * usage: bench_uring FILE [seconds=8] [qd=32] [bs=4096] [ring|inbox]
 * mode "inbox": completions are handed back to the main thread, which
 * resubmits them in batches through the inbox (uring_submit_many) — the
 * path engine callers and pool workers take — so the eventfd wake and the
 * inbox lock are in the loop.
 * prints one JSON object: {"iops":..., "ios":..., "seconds":..., ...}
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "uring/uring.h"

struct bench {
	struct uring *r;
	uint64_t nblocks;
	uint32_t bs;
	uint64_t deadline_ns;
	uint64_t rng;          /* ring thread only */
	uint64_t ios;          /* ring thread only */
	uint64_t errors;       /* ring thread only */
	atomic_uint inflight;
	bool inbox_mode;
	/* inbox mode: completed ios handed to the main thread */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct bio *ready;
	bool waiting;
};

struct bio {
	struct uring_io io;
	struct bench *b;
	struct bio *next;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

/* an io leaves the run; the last one out wakes main, which sleeps until
 * then (no polling: a waking main thread would compete with the ring thread
 * for the 2 cores) */
static void retire(struct bench *b)
{
	if (atomic_fetch_sub(&b->inflight, 1) == 1 || b->inbox_mode) {
		pthread_mutex_lock(&b->lock);
		pthread_cond_signal(&b->cond);
		pthread_mutex_unlock(&b->lock);
	}
}

static void read_cb(struct uring_io *io, int res)
{
	struct bio *x = (struct bio *)io;
	struct bench *b = x->b;

	if (res != (int)b->bs)
		b->errors++;
	else
		b->ios++;
	if (coil_now_ns() >= b->deadline_ns || b->errors > 100) {
		retire(b);
		return;
	}
	if (b->inbox_mode) {
		/* a short critical section, never a wait: cb must not block */
		pthread_mutex_lock(&b->lock);
		x->next = b->ready;
		b->ready = x;
		if (b->waiting)
			pthread_cond_signal(&b->cond);
		pthread_mutex_unlock(&b->lock);
		return;
	}
	io->off = rnd(&b->rng) % b->nblocks * b->bs;
	if (uring_submit(b->r, io) != 0) {
		b->errors++;
		retire(b);
	}
}

int main(int argc, char **argv)
{
	struct bench b = { .rng = 0x1234567887654321ull };
	struct uring_opts o;
	struct uring_stats st;
	struct bio *ios;
	struct stat sb;
	struct rusage ru0, ru1;
	double secs = 8, cpu_s;
	unsigned qd = 32;
	uint64_t t0, t1;
	int fd, ret;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [seconds] [qd] [bs]\n", argv[0]);
		return 2;
	}
	if (argc > 2)
		secs = atof(argv[2]);
	if (argc > 3)
		qd = (unsigned)atoi(argv[3]);
	b.bs = argc > 4 ? (uint32_t)atoi(argv[4]) : 4096;
	b.inbox_mode = argc > 5 && strcmp(argv[5], "inbox") == 0;
	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cond, NULL);
	if (qd == 0 || qd > 4096 || b.bs == 0 || b.bs % 4096 || secs <= 0) {
		fprintf(stderr, "bad qd/bs/seconds\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	b.nblocks = (uint64_t)sb.st_size / b.bs;
	if (b.nblocks == 0) {
		fprintf(stderr, "%s: too small\n", argv[1]);
		return 1;
	}
	uring_opts_init(&o);
	o.direct = true;
	o.entries = qd < 64 ? 64 : qd;
	o.nbufs = qd;
	o.buf_size = b.bs;
	ret = uring_create(fd, &o, &b.r);
	if (ret < 0) {
		fprintf(stderr, "uring_create: %s\n", strerror(-ret));
		return 1;
	}
	ios = calloc(qd, sizeof(*ios));
	if (!ios)
		return 1;
	getrusage(RUSAGE_SELF, &ru0);
	t0 = coil_now_ns();
	b.deadline_ns = t0 + (uint64_t)(secs * 1e9);
	atomic_store(&b.inflight, qd);
	for (unsigned i = 0; i < qd; i++) {
		void *buf = uring_buf_get(b.r);

		if (!buf) {
			fprintf(stderr, "buffer pool short\n");
			return 1;
		}
		ios[i].b = &b;
		uring_io_prep(&ios[i].io, URING_OP_READ, buf, b.bs,
			      (uint64_t)(i * 7919u) % b.nblocks * b.bs,
			      read_cb, NULL);
		ret = uring_submit(b.r, &ios[i].io);
		if (ret < 0) {
			fprintf(stderr, "submit: %s\n", strerror(-ret));
			return 1;
		}
	}
	if (b.inbox_mode) {
		struct uring_io **batch = calloc(qd, sizeof(*batch));
		uint64_t rng = 0x9E3779B97F4A7C15ull;

		pthread_mutex_lock(&b.lock);
		while (atomic_load(&b.inflight) > 0) {
			struct bio *x;
			unsigned n = 0;

			if (!b.ready) {
				b.waiting = true;
				pthread_cond_wait(&b.cond, &b.lock);
				b.waiting = false;
				continue;
			}
			x = b.ready;
			b.ready = NULL;
			pthread_mutex_unlock(&b.lock);
			for (; x; x = x->next) {
				x->io.off = rnd(&rng) % b.nblocks * b.bs;
				batch[n++] = &x->io;
			}
			ret = uring_submit_many(b.r, batch, n);
			if (ret < 0) {
				fprintf(stderr, "submit: %s\n", strerror(-ret));
				return 1;
			}
			pthread_mutex_lock(&b.lock);
		}
		pthread_mutex_unlock(&b.lock);
		free(batch);
	} else {
		/* the ring thread does all the work; the deadline stops it */
		pthread_mutex_lock(&b.lock);
		while (atomic_load(&b.inflight) > 0)
			pthread_cond_wait(&b.cond, &b.lock);
		pthread_mutex_unlock(&b.lock);
	}
	t1 = coil_now_ns();
	uring_stats(b.r, &st);
	uring_destroy(b.r);
	getrusage(RUSAGE_SELF, &ru1);
	close(fd);
	/* process CPU (ring thread + this one) over the measured interval */
	cpu_s = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
		(double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
		(double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
		(double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
	free(ios);
	/* every completion and counter update happened on the ring thread,
	 * which uring_destroy joined */
	printf("{\"iops\": %.0f, \"ios\": %lu, \"errors\": %lu, \"seconds\": %.3f, "
	       "\"qd\": %u, \"bs\": %u, \"enters\": %lu, \"fixed_ios\": %lu, "
	       "\"setup_flags\": %u, \"cpu_us_per_io\": %.3f, "
	       "\"mode\": \"%s\", \"wakeups\": %lu}\n",
	       (double)b.ios / ((double)(t1 - t0) / 1e9), (unsigned long)b.ios,
	       (unsigned long)b.errors, (double)(t1 - t0) / 1e9, qd, b.bs,
	       (unsigned long)st.submit_calls, (unsigned long)st.fixed_ios,
	       st.setup_flags, b.ios ? cpu_s * 1e6 / (double)b.ios : 0.0,
	       b.inbox_mode ? "inbox" : "ring", (unsigned long)st.wakeups);
	return b.errors ? 1 : 0;
}
