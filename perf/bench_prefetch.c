/* bench_prefetch.c — does readahead through the prefetch state machine pay
 * for itself?  One reader at queue depth 1 reads a file blob by blob through
 * coil's ring (uring/, O_DIRECT, so every read goes to the device) and
 * verifies each blob (XXH3, standing in for the engine's checksum+decode).
 *
 *   off: every blob is a synchronous demand read (prefetch disabled)
 *   on:  the same reads, plus a pf_machine + ra_state per stream that admit
 *        blobs ahead of the reader; begun work is read into registered
 *        buffers by the ring thread; demand consumes ready blobs, waits for
 *        in-flight ones, and reads unscheduled ones itself
 *
 * Two access patterns, each run off/on alternating, several repeats:
 * sequential (readahead should win) and random blob order (readahead must
 * not lose: the policy should stay quiet).  Prints medians and on/off
 * ratios, and the prefetch report of the last "on" run as JSON.
 *
 * usage: bench_prefetch [file] [MiB=256] [repeats=9] [window_max_blobs=8]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/common.h"
#include "prefetch/prefetch.h"
#include "uring/uring.h"

#define BLOB (64u * 1024u)
#define SLOTS 32 /* prefetch buffers: bounds in-flight + ready blobs */

struct slot {
	struct uring_io io;
	struct pf_work work;
	void *buf;
	int res;
	bool busy;     /* owns a prefetch (in flight or ready) */
	bool done;     /* completion arrived */
	struct stream *st;
};

struct stream {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct uring *ring;
	struct pf_machine pf;
	struct ra_state ra;
	struct slot slots[SLOTS];
	uint64_t size;
	uint32_t inflight_max;
	uint32_t inflight;
};

static void die(const char *what, int err)
{
	fprintf(stderr, "bench_prefetch: %s: %s\n", what, strerror(err));
	exit(1);
}

/* Ring thread: publish the exact work and wake a waiting reader. */
static void prefetch_cb(struct uring_io *io, int res)
{
	struct slot *s = io->arg;
	struct stream *st = s->st;

	pthread_mutex_lock(&st->lock);
	s->res = res;
	s->done = true;
	int rc = pf_complete(&st->pf, &s->work, res < 0 ? res : 0);

	COIL_ASSERT(rc >= 0);
	st->inflight--;
	if (rc == PF_DISCARDED)
		s->busy = false;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

static struct slot *slot_of(struct stream *st, uint64_t blob)
{
	for (unsigned i = 0; i < SLOTS; i++)
		if (st->slots[i].busy && st->slots[i].work.id.blob == blob)
			return &st->slots[i];
	return NULL;
}

/* Under st->lock: hand queued work to the ring while buffers allow. */
static void dispatch(struct stream *st)
{
	while (st->inflight < st->inflight_max) {
		struct slot *s = NULL;

		for (unsigned i = 0; i < SLOTS && !s; i++)
			if (!st->slots[i].busy)
				s = &st->slots[i];
		struct pf_work w;

		if (!s || pf_begin_next(&st->pf, &w) != 1)
			return;
		s->busy = true;
		s->done = false;
		s->work = w;
		st->inflight++;
		uint64_t off = w.id.blob * BLOB;

		uring_io_prep(&s->io, URING_OP_READ, s->buf,
			      (uint32_t)COIL_MIN((uint64_t)BLOB, st->size - off),
			      off, prefetch_cb, s);
		int rc = uring_submit(st->ring, &s->io);

		if (rc < 0)
			die("uring_submit", -rc);
	}
}

static uint64_t verify(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}

/* Reads blob @b as a demand read; returns the checksum. */
static uint64_t demand_read(struct stream *st, void *buf, uint64_t b,
			    bool prefetch)
{
	uint64_t sum;
	const uint64_t off = b * BLOB;

	if (prefetch) {
		struct pf_unit u = { 1, b };

		pthread_mutex_lock(&st->lock);
		int obs = pf_observe_demand(&st->pf, u);
		uint64_t waited = PF_NOT_WAITED;
		struct pf_work mine;

		/* Queued but not begun: take it over rather than wait behind
		 * the dispatcher, and read it into the demand buffer. */
		if (obs == PF_OBS_QUEUED && pf_begin_unit(&st->pf, u, &mine) == 1) {
			pthread_mutex_unlock(&st->lock);

			struct uring_io io;
			uint32_t len = (uint32_t)COIL_MIN((uint64_t)BLOB,
							  st->size - off);

			uring_io_prep(&io, URING_OP_READ, buf, len, off, NULL, NULL);
			int r = uring_run_sync(st->ring, &io);

			pthread_mutex_lock(&st->lock);
			COIL_ASSERT(pf_complete(&st->pf, &mine, r) >= 0);
			pf_resolve_demand(&st->pf, u, PF_NOT_WAITED, NULL);
			pthread_mutex_unlock(&st->lock);
			if (r < 0)
				die("demand read", -r);
			sum = verify(buf, (size_t)r);
			goto advise;
		}
		if (pf_observation_is_pending(obs)) {
			uint64_t t0 = coil_now_ns();

			while (pf_is_pending(&st->pf, u))
				pthread_cond_wait(&st->cond, &st->lock);
			waited = coil_now_ns() - t0;
		}
		int err = 0;
		int res = pf_resolve_demand(&st->pf, u, waited, &err);
		struct slot *s = slot_of(st, b);

		if (res == PF_RES_READY && s && s->done) {
			pthread_mutex_unlock(&st->lock);
			sum = verify(s->buf, (size_t)s->res);
			pthread_mutex_lock(&st->lock);
			s->busy = false;
			pthread_mutex_unlock(&st->lock);
			goto advise;
		}
		if (res == PF_RES_FAILED)
			die("prefetch read", -err);
		pthread_mutex_unlock(&st->lock);
	}

	struct uring_io io;
	uint32_t len = (uint32_t)COIL_MIN((uint64_t)BLOB, st->size - off);

	uring_io_prep(&io, URING_OP_READ, buf, len, off, NULL, NULL);
	int res = uring_run_sync(st->ring, &io);

	if (res < 0)
		die("demand read", -res);
	sum = verify(buf, (size_t)res);
advise:
	if (prefetch) {
		struct ra_advice adv;

		pthread_mutex_lock(&st->lock);
		ra_on_read(&st->ra, off, BLOB, st->size, &adv);
		int rc = pf_apply(&st->pf, &st->ra, 1, &adv, NULL, NULL,
				  coil_now_ns());

		if (rc < 0)
			die("pf_apply", -rc);
		dispatch(st);
		pthread_mutex_unlock(&st->lock);
	}
	return sum;
}

static uint64_t run(struct stream *st, void *buf, const uint64_t *order,
		    uint64_t nblobs, bool prefetch, uint32_t window_max,
		    uint64_t *sum_out, struct pf_report *rep)
{
	struct ra_config c;

	ra_config_init(&c, BLOB);
	c.window_max_blobs = window_max;
	if (ra_init(&st->ra, &c) < 0 ||
	    pf_init(&st->pf, 2 * window_max, 4 * window_max) < 0)
		die("prefetch init", EINVAL);
	st->inflight_max = COIL_MIN(window_max, (uint32_t)SLOTS);
	uint64_t sum = 0, t0 = coil_now_ns();

	for (uint64_t i = 0; i < nblobs; i++)
		sum ^= demand_read(st, buf, order[i], prefetch);
	uint64_t ns = coil_now_ns() - t0;

	/* Close the stream: cancel, drain, finish. */
	struct ra_advice adv;

	pthread_mutex_lock(&st->lock);
	ra_on_close(&st->ra, &adv);
	pf_apply(&st->pf, &st->ra, 1, &adv, NULL, NULL, coil_now_ns());
	while (!pf_is_idle(&st->pf))
		pthread_cond_wait(&st->cond, &st->lock);
	pf_finish_cancellation(&st->pf, NULL, NULL);
	pf_report_get(&st->pf, rep);
	for (unsigned i = 0; i < SLOTS; i++)
		st->slots[i].busy = false;
	pthread_mutex_unlock(&st->lock);
	pf_destroy(&st->pf);
	*sum_out = sum;
	return ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "bench_prefetch.dat";
	uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 256;
	unsigned reps = argc > 3 ? (unsigned)atoi(argv[3]) : 9;
	uint32_t window = argc > 4 ? (uint32_t)atoi(argv[4]) : 8;

	if (mib == 0 || reps == 0 || reps > 64 || window == 0 || window > SLOTS)
		die("arguments", EINVAL);
	uint64_t size = mib << 20, nblobs = size / BLOB;

	/* Write the file once with incompressible-ish bytes. */
	int wfd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);

	if (wfd < 0)
		die(path, errno);
	char *chunk = malloc(1 << 20);
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (uint64_t m = 0; m < mib; m++) {
		for (size_t i = 0; i < (1 << 20) / 8; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			memcpy(chunk + i * 8, &x, 8);
		}
		if (write(wfd, chunk, 1 << 20) != 1 << 20)
			die("write", errno);
	}
	fsync(wfd);
	close(wfd);
	free(chunk);

	int fd = open(path, O_RDONLY | O_DIRECT);
	bool direct = fd >= 0;

	if (!direct)
		fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path, errno);

	struct stream st;
	struct uring_opts o;

	memset(&st, 0, sizeof(st));
	pthread_mutex_init(&st.lock, NULL);
	pthread_cond_init(&st.cond, NULL);
	st.size = size;
	uring_opts_init(&o);
	o.buf_size = BLOB;
	o.nbufs = SLOTS + 1;
	o.direct = direct;
	int rc = uring_create(fd, &o, &st.ring);

	if (rc < 0)
		die("uring_create", -rc);
	for (unsigned i = 0; i < SLOTS; i++) {
		st.slots[i].buf = uring_buf_get(st.ring);
		st.slots[i].st = &st;
		if (!st.slots[i].buf)
			die("uring_buf_get", ENOMEM);
	}
	void *dbuf = uring_buf_get(st.ring);

	if (!dbuf)
		die("uring_buf_get", ENOMEM);

	uint64_t *seq = malloc(nblobs * sizeof(*seq));
	uint64_t *rnd = malloc(nblobs * sizeof(*rnd));

	for (uint64_t i = 0; i < nblobs; i++)
		seq[i] = rnd[i] = i;
	for (uint64_t i = nblobs - 1; i > 0; i--) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint64_t j = x % (i + 1), t = rnd[i];

		rnd[i] = rnd[j];
		rnd[j] = t;
	}

	printf("bench_prefetch: %llu MiB, %u KiB blobs, QD1 reader, %s, "
	       "window max %u blobs, %u repeats (off/on alternating)\n",
	       (unsigned long long)mib, BLOB / 1024,
	       direct ? "O_DIRECT" : "buffered (no O_DIRECT!)", window, reps);

	const char *names[2] = { "sequential", "random" };
	const uint64_t *orders[2] = { seq, rnd };
	struct pf_report last;

	for (int p = 0; p < 2; p++) {
		uint64_t t[2][64], sums[2] = { 0, 0 };

		for (unsigned r = 0; r < reps; r++) {
			for (int k = 0; k < 2; k++) {
				/* Alternate which mode goes first so drift
				 * in a noisy machine hits both equally. */
				int mode = (r + (unsigned)k) % 2;
				struct pf_report rep;

				t[mode][r] = run(&st, dbuf, orders[p], nblobs,
						 mode == 1, window, &sums[mode],
						 &rep);
				if (mode == 1)
					last = rep;
			}
		}
		if (sums[0] != sums[1])
			die("checksum mismatch between modes", EIO);
		/* Paired ratios: each repeat's off and on ran back to back,
		 * so their ratio cancels most of the machine's drift. */
		double ratio[64];

		for (unsigned r = 0; r < reps; r++)
			ratio[r] = (double)t[0][r] / (double)t[1][r];
		for (unsigned i = 1; i < reps; i++)
			for (unsigned j = i; j > 0 && ratio[j - 1] > ratio[j]; j--) {
				double tmp = ratio[j];

				ratio[j] = ratio[j - 1];
				ratio[j - 1] = tmp;
			}
		double mb = (double)size / 1e6;
		uint64_t off_ns = median(t[0], reps), on_ns = median(t[1], reps);
		double med = reps % 2 ? ratio[reps / 2]
				      : (ratio[reps / 2 - 1] + ratio[reps / 2]) / 2;

		printf("%-10s  off %8.1f MB/s   on %8.1f MB/s   "
		       "on/off median of paired ratios %.2fx (min %.2f, max %.2f)\n",
		       names[p], mb / (off_ns / 1e9), mb / (on_ns / 1e9), med,
		       ratio[0], ratio[reps - 1]);
		char json[1024];

		pf_report_to_json(&last, json, sizeof(json));
		printf("  prefetch report (%s, last on run): %s\n", names[p], json);
	}
	/* The bookkeeping alone, no I/O: what the policy and the machine add
	 * to every demand read (both patterns, work completed at once). */
	for (int p = 0; p < 2; p++) {
		struct pf_machine m;
		struct ra_state ra;
		struct ra_config c;
		const uint64_t n = 1000000;
		uint64_t t0 = coil_now_ns();

		ra_config_init(&c, BLOB);
		c.window_max_blobs = window;
		if (pf_init(&m, 2 * window, 4 * window) < 0 || ra_init(&ra, &c) < 0)
			die("prefetch init", EINVAL);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t b = orders[p][i % nblobs];
			struct pf_unit u = { 1, b };
			struct ra_advice adv;
			struct pf_work w;

			if (i % nblobs == 0)
				ra_reset(&ra);
			pf_observe_demand(&m, u);
			pf_resolve_demand(&m, u, PF_NOT_WAITED, NULL);
			ra_on_read(&ra, b * BLOB, BLOB, size, &adv);
			pf_apply(&m, &ra, 1, &adv, NULL, NULL, i);
			while (pf_begin_next(&m, &w) == 1)
				pf_complete(&m, &w, 0);
		}
		printf("bookkeeping per demand read (%s, no I/O): %.0f ns\n",
		       names[p], (double)(coil_now_ns() - t0) / (double)n);
		pf_destroy(&m);
	}
	uring_destroy(st.ring);
	close(fd);
	unlink(path);
	free(seq);
	free(rnd);
	return 0;
}
