/* perf/bench_pool.c — the fair pool against the semaphore it replaced, in
 * one run.
 *
 * T concurrent requesters (1, 2, 4, 8, 16) each submit requests of 16
 * ENCODE_BLOB tasks (zstd level 3 on 64 KiB chunks of a real corpus: a tar
 * of /usr/include) and wait for them.  The total work per point is fixed
 * (--requests), so useful CPU should be flat across T and only the latency
 * distribution and the wall can move.  Every round runs every T in both
 * modes, alternating which mode goes first, and the report is the median
 * over rounds of each metric plus the median of the per-round fair /
 * semaphore ratios (paired in time, so machine noise mostly cancels).
 *
 *   bench_pool [--corpus FILE] [--rounds 7] [--requests 160]
 *              [--workers 0] [--queue-factors 4,32] [--json FILE]
 *
 * Each queue factor is a separate table: 4 is the pool's default (on 2
 * workers its capacity of 8 is below one 16-task request, so the fair pool
 * admits requests one at a time, FIFO); 32 lets several requests interleave
 * task by task, which is the round-robin the fair pool exists for.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "format/format.h"
#include "pool/pool.h"

#define TASKS 16
#define CHUNK 65536u
#define LEVEL 3
#define CORPUS_MAX (64u << 20)
#define NT 5
static const unsigned sweep[NT] = { 1, 2, 4, 8, 16 };
#define ROUNDS_MAX 32

static uint8_t *corpus;
static size_t corpus_chunks;

/* One requester's preallocated state: nothing is allocated while timed. */
struct requester {
	struct pool *p;
	unsigned id, nreq, stride;
	uint8_t *dst;			/* TASKS x CHUNK */
	struct fmt_blob blob[TASKS];
	struct pool_task t[TASKS];
	struct pool_req r;
	uint64_t *lat_ns;		/* nreq */
	uint64_t cpu_ns;
	int err;
	pthread_barrier_t *start;
};

static void *requester_main(void *arg)
{
	struct requester *q = arg;

	pthread_barrier_wait(q->start);
	for (unsigned k = 0; k < q->nreq; k++) {
		/* Requests walk the corpus so every one compresses different
		 * bytes (no warm-cache advantage for either mode). */
		size_t base = ((size_t)(q->id + k * q->stride) * TASKS) % corpus_chunks;
		uint64_t t0;
		int rc;

		for (unsigned i = 0; i < TASKS; i++) {
			struct pool_task *t = &q->t[i];

			t->kind = POOL_TASK_ENCODE_BLOB;
			t->u.encode.src = corpus + ((base + i) % corpus_chunks) * CHUNK;
			t->u.encode.len = CHUNK;
			t->u.encode.level = LEVEL;
			t->u.encode.cdict = NULL;
			t->u.encode.dict_id = 0;
			t->u.encode.dst = q->dst + (size_t)i * CHUNK;
			t->u.encode.dst_cap = CHUNK;
			t->u.encode.out = &q->blob[i];
		}
		t0 = coil_now_ns();
		rc = pool_submit(q->p, &q->r, q->t, TASKS, NULL, NULL, 0);
		if (rc == 0)
			rc = pool_join(&q->r);
		q->lat_ns[k] = coil_now_ns() - t0;
		if (rc < 0)
			q->err = rc;
		q->cpu_ns += q->r.m.cpu_ns;
	}
	return NULL;
}

struct point {
	double wall_ms, p50_ms, p99_ms, max_ms, cpu_ms, p99_p50, mean_ms;
	uint64_t max_consec, peak_in_flight;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]. */
static uint64_t pct(const uint64_t *v, size_t n, double q)
{
	size_t i = (size_t)(q * (double)n + 0.999999);

	if (i < 1)
		i = 1;
	return v[COIL_MIN(i, n) - 1];
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct requester *reqs;
static uint64_t *lat_all;

static int run_point(unsigned mode, unsigned workers, unsigned qf,
		     unsigned T, unsigned total, struct point *out)
{
	struct pool_opts o = { .workers = workers, .queue_factor = qf, .mode = mode };
	struct pool *p;
	pthread_t th[16];
	pthread_barrier_t bar;
	struct pool_stats st;
	uint64_t t0, wall, cpu = 0, sum = 0;
	unsigned nreq = total / T, n = 0;
	int rc = pool_create(&o, &p);

	if (rc < 0)
		return rc;
	pthread_barrier_init(&bar, NULL, T + 1);
	for (unsigned i = 0; i < T; i++) {
		reqs[i].p = p;
		reqs[i].id = i;
		reqs[i].nreq = nreq;
		reqs[i].stride = T;
		reqs[i].cpu_ns = 0;
		reqs[i].err = 0;
		reqs[i].start = &bar;
		pthread_create(&th[i], NULL, requester_main, &reqs[i]);
	}
	pthread_barrier_wait(&bar);
	t0 = coil_now_ns();
	for (unsigned i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	wall = coil_now_ns() - t0;
	pool_stats(p, &st);
	pool_destroy(p);
	pthread_barrier_destroy(&bar);

	for (unsigned i = 0; i < T; i++) {
		if (reqs[i].err)
			return reqs[i].err;
		memcpy(lat_all + n, reqs[i].lat_ns, nreq * sizeof(uint64_t));
		n += nreq;
		for (unsigned k = 0; k < nreq; k++)
			sum += reqs[i].lat_ns[k];
		cpu += reqs[i].cpu_ns;
	}
	qsort(lat_all, n, sizeof(*lat_all), cmp_u64);
	out->wall_ms = (double)wall / 1e6;
	out->p50_ms = (double)pct(lat_all, n, 0.50) / 1e6;
	out->p99_ms = (double)pct(lat_all, n, 0.99) / 1e6;
	out->max_ms = (double)lat_all[n - 1] / 1e6;
	out->cpu_ms = (double)cpu / 1e6;
	out->p99_p50 = out->p99_ms / out->p50_ms;
	out->mean_ms = (double)sum / n / 1e6;
	out->max_consec = st.max_consecutive_same_req;
	out->peak_in_flight = st.peak_in_flight;
	return 0;
}

static int corpus_load(const char *path)
{
	char tmpl[] = "/tmp/coil-bench-pool-XXXXXX";
	char cmd[256];
	struct stat sb;
	ssize_t got;
	size_t len;
	int fd;

	if (!path) {
		/* The real corpus: /usr/include as one tar stream. */
		fd = mkstemp(tmpl);
		if (fd < 0)
			return -errno;
		close(fd);
		snprintf(cmd, sizeof(cmd), "tar -cf %s -C /usr include 2>/dev/null", tmpl);
		if (system(cmd) == -1)
			return -errno;
		path = tmpl;
	}
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		close(fd);
		return -errno;
	}
	len = COIL_MIN((size_t)sb.st_size, (size_t)CORPUS_MAX);
	len -= len % CHUNK;
	if (len < TASKS * CHUNK) {
		close(fd);
		fprintf(stderr, "bench_pool: corpus %s too small\n", path);
		return -EINVAL;
	}
	corpus = malloc(len);
	if (!corpus) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t off = 0; off < len; off += (size_t)got) {
		got = pread(fd, corpus + off, len - off, (off_t)off);
		if (got <= 0) {
			close(fd);
			return got < 0 ? -errno : -EIO;
		}
	}
	close(fd);
	if (path == tmpl)
		unlink(tmpl);
	corpus_chunks = len / CHUNK;
	return 0;
}

#define QF_MAX 4

static struct point pt[ROUNDS_MAX][QF_MAX][NT][2];

static double field(const struct point *x, unsigned f)
{
	double v[7] = { x->wall_ms, x->p50_ms, x->p99_ms, x->max_ms, x->cpu_ms,
			x->p99_p50, x->mean_ms };
	return v[f];
}

/* Median over rounds of field f (0 wall, 1 p50, 2 p99, 3 max, 4 cpu,
 * 5 p99/p50, 6 mean) of one (qf, T, mode) cell, or of the per-round
 * fair/semaphore ratio when mode < 0. */
static double cell(unsigned rounds, unsigned qi, unsigned ti, int mode, unsigned f)
{
	double v[ROUNDS_MAX];

	for (unsigned r = 0; r < rounds; r++) {
		if (mode >= 0)
			v[r] = field(&pt[r][qi][ti][mode], f);
		else
			v[r] = field(&pt[r][qi][ti][0], f) / field(&pt[r][qi][ti][1], f);
	}
	return median(v, rounds);
}

static const char *fname[7] = { "wall_ms", "p50_ms", "p99_ms", "max_ms", "cpu_ms",
				"p99_over_p50", "mean_ms" };

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "corpus", required_argument, NULL, 'c' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "requests", required_argument, NULL, 'n' },
		{ "workers", required_argument, NULL, 'w' },
		{ "queue-factors", required_argument, NULL, 'q' },
		{ "json", required_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	const char *corpus_path = NULL, *json_path = NULL;
	unsigned rounds = 7, total = 160, workers = 0, nqf = 0;
	unsigned qfs[QF_MAX] = { 0 };
	FILE *js = NULL;
	int c, rc;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'c': corpus_path = optarg; break;
		case 'r': rounds = (unsigned)atoi(optarg); break;
		case 'n': total = (unsigned)atoi(optarg); break;
		case 'w': workers = (unsigned)atoi(optarg); break;
		case 'q':
			for (char *tok = strtok(optarg, ","); tok && nqf < QF_MAX;
			     tok = strtok(NULL, ","))
				qfs[nqf++] = (unsigned)atoi(tok);
			break;
		case 'j': json_path = optarg; break;
		default:
			fprintf(stderr, "usage: %s [--corpus F] [--rounds N] [--requests N] "
				"[--workers N] [--queue-factors 4,32] [--json F]\n", argv[0]);
			return 2;
		}
	}
	if (!nqf) {
		qfs[0] = 4;	/* the pool's default */
		qfs[1] = 32;	/* capacity for several 16-task requests on 2 cores */
		nqf = 2;
	}
	if (rounds < 1 || rounds > ROUNDS_MAX || total < 16 || total % 16) {
		fprintf(stderr, "bench_pool: rounds 1..%d, requests a multiple of 16\n", ROUNDS_MAX);
		return 2;
	}
	rc = corpus_load(corpus_path);
	if (rc < 0) {
		fprintf(stderr, "bench_pool: corpus: %s\n", strerror(-rc));
		return 1;
	}
	reqs = calloc(16, sizeof(*reqs));
	lat_all = calloc(total, sizeof(*lat_all));
	if (!reqs || !lat_all)
		return 1;
	for (unsigned i = 0; i < 16; i++) {
		reqs[i].dst = malloc((size_t)TASKS * CHUNK);
		reqs[i].lat_ns = calloc(total, sizeof(uint64_t));
		if (!reqs[i].dst || !reqs[i].lat_ns)
			return 1;
	}
	if (!workers)
		workers = coil_ncpus();
	printf("bench_pool: corpus %zu MiB of a tar of /usr/include (%zu chunks of 64 KiB), "
	       "%u workers, %u requests x %d ENCODE tasks (zstd %d) per point, %u rounds\n",
	       corpus_chunks * CHUNK >> 20, corpus_chunks, workers, total, TASKS, LEVEL, rounds);

	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned qi = 0; qi < nqf; qi++) {
			for (unsigned ti = 0; ti < NT; ti++) {
				/* Alternate which mode runs first, so a drift in
				 * the machine's speed favours neither. */
				for (unsigned k = 0; k < 2; k++) {
					unsigned mode = (k + r + ti + qi) % 2;

					rc = run_point(mode, workers, qfs[qi], sweep[ti], total,
						       &pt[r][qi][ti][mode]);
					if (rc < 0) {
						fprintf(stderr, "bench_pool: %s\n", strerror(-rc));
						return 1;
					}
				}
			}
		}
		fprintf(stderr, "round %u/%u done\n", r + 1, rounds);
	}

	if (json_path) {
		js = fopen(json_path, "w");
		if (!js) {
			perror(json_path);
			return 1;
		}
		fprintf(js, "{\n  \"bench\": \"pool\",\n  \"workers\": %u,\n"
			"  \"tasks_per_request\": %d,\n  \"chunk_bytes\": %u,\n  \"zstd_level\": %d,\n"
			"  \"requests_per_point\": %u,\n  \"rounds\": %u,\n"
			"  \"note\": \"medians over rounds; ratio = median of per-round fair/semaphore\",\n"
			"  \"configs\": [\n", workers, TASKS, CHUNK, LEVEL, total, rounds);
	}
	for (unsigned qi = 0; qi < nqf; qi++) {
		printf("\nqueue_factor %u (fair capacity %u tasks = %.1f requests); medians over "
		       "%u rounds, ms; ratio = median of per-round fair/semaphore\n", qfs[qi],
		       qfs[qi] * workers, (double)(qfs[qi] * workers) / TASKS, rounds);
		printf("%4s | %-5s | %8s %8s %8s %8s %8s %9s %7s | %6s\n", "T", "mode", "wall",
		       "mean", "p50", "p99", "max", "cpu", "p99/p50", "maxrun");
		if (js)
			fprintf(js, "   {\"queue_factor\": %u, \"capacity\": %u, \"points\": [\n",
				qfs[qi], qfs[qi] * workers);
		for (unsigned ti = 0; ti < NT; ti++) {
			for (int mode = 0; mode < 2; mode++)
				printf("%4u | %-5s | %8.1f %8.2f %8.2f %8.2f %8.2f %9.1f %7.2f | %6lu\n",
				       sweep[ti], mode ? "sem" : "fair",
				       cell(rounds, qi, ti, mode, 0), cell(rounds, qi, ti, mode, 6),
				       cell(rounds, qi, ti, mode, 1), cell(rounds, qi, ti, mode, 2),
				       cell(rounds, qi, ti, mode, 3), cell(rounds, qi, ti, mode, 4),
				       cell(rounds, qi, ti, mode, 5),
				       (unsigned long)pt[rounds - 1][qi][ti][mode].max_consec);
			printf("%4u | ratio | %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f\n", sweep[ti],
			       cell(rounds, qi, ti, -1, 0), cell(rounds, qi, ti, -1, 6),
			       cell(rounds, qi, ti, -1, 1), cell(rounds, qi, ti, -1, 2),
			       cell(rounds, qi, ti, -1, 3), cell(rounds, qi, ti, -1, 4));
			if (!js)
				continue;
			fprintf(js, "    {\"requesters\": %u", sweep[ti]);
			for (int mode = -1; mode < 2; mode++) {
				fprintf(js, ",\n     \"%s\": {", mode < 0 ? "ratio_fair_over_semaphore" :
					mode ? "semaphore" : "fair");
				for (unsigned f = 0; f < 7; f++)
					fprintf(js, "%s\"%s\": %.3f", f ? ", " : "", fname[f],
						cell(rounds, qi, ti, mode, f));
				fprintf(js, "}");
			}
			fprintf(js, "}%s\n", ti + 1 < NT ? "," : "");
		}
		if (js)
			fprintf(js, "   ]}%s\n", qi + 1 < nqf ? "," : "");
	}
	if (js) {
		fprintf(js, "  ]\n}\n");
		fclose(js);
	}
	return 0;
}
