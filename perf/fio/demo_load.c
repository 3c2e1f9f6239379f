/* demo_load — load a tar archive into a coil store, one object per member,
 * read everything back verified, and report what happened as JSON.
 *
 *   demo_load STORE TAR RESULT.json [STORE_SIZE_BYTES]
 *
 * Objects: every regular file of the tar under its member path, plus a few
 * larger objects: "big/corpus.tar" (the whole archive, compressible) and
 * "big/random.bin" (32 MiB incompressible).  Writes go through the async API
 * with a bounded number in flight (QD); the store is then closed and
 * reopened so the read-back starts cold, and every byte is compared with
 * the source.  Progress goes to stderr, the report to RESULT.json.
 * Includes only coil.h, like any program embedding libcoil.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"

#define QD 32			/* requests in flight */
#define CHUNK (1u << 20)	/* largest single coil_write / coil_read */
#define BATCH 256		/* objects open at once */
#define RANDOM_BYTES (32u << 20)
#define NAME_MAX_TAR 1024

struct member {
	char name[COIL_NAME_MAX + 1];
	const uint8_t *data;
	uint64_t len;
};

struct op {
	uint64_t start_ns;
	uint64_t lat_ns;
	int64_t res;
	int64_t want;
	struct runner *run;
};

struct runner {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned inflight;
	int64_t first_err;
	struct op *ops;
	size_t nops, nops_max;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int die(const char *what, int err)
{
	fprintf(stderr, "demo_load: %s: %s\n", what,
		err < 0 ? coil_strerror(err) : strerror(err));
	exit(1);
}

/* --- tar (ustar + GNU long names) -------------------------------------- */

static uint64_t tar_octal(const char *p, size_t n)
{
	uint64_t v = 0;
	size_t i;

	for (i = 0; i < n && (p[i] == ' ' || p[i] == '\0'); i++)
		;
	for (; i < n && p[i] >= '0' && p[i] <= '7'; i++)
		v = v * 8 + (uint64_t)(p[i] - '0');
	return v;
}

/* Fill @m with the regular files of the archive @t (@len bytes); the member
 * data points into @t.  @return the member count, or -EIO on a malformed
 * archive (lengths are checked against @len before use). */
static long tar_parse(const uint8_t *t, uint64_t len, struct member *m,
		      size_t m_max)
{
	char longname[NAME_MAX_TAR];
	uint64_t off = 0;
	size_t n = 0;
	int have_long = 0;

	while (off + 512 <= len) {
		const char *h = (const char *)t + off;
		uint64_t size = tar_octal(h + 124, 12);
		char type = h[156];
		char name[NAME_MAX_TAR];

		if (h[0] == '\0')
			break;	/* end-of-archive block */
		if (size > len - off - 512)
			return -EIO;
		if (type == 'L') {
			size_t l = size < sizeof(longname) - 1 ?
				   (size_t)size : sizeof(longname) - 1;
			memcpy(longname, t + off + 512, l);
			longname[l] = '\0';
			have_long = 1;
		} else {
			if (have_long) {
				snprintf(name, sizeof(name), "%s", longname);
			} else if (memcmp(h + 257, "ustar", 5) == 0 && h[345]) {
				snprintf(name, sizeof(name), "%.155s/%.100s",
					 h + 345, h);
			} else {
				snprintf(name, sizeof(name), "%.100s", h);
			}
			have_long = 0;
			if ((type == '0' || type == '\0') && n < m_max &&
			    strlen(name) <= COIL_NAME_MAX && size > 0) {
				/* Fits: the length was checked just above. */
				memcpy(m[n].name, name, strlen(name) + 1);
				m[n].data = t + off + 512;
				m[n].len = size;
				n++;
			}
		}
		off += 512 + (size + 511) / 512 * 512;
	}
	return (long)n;
}

/* --- async runner with a bounded window ------------------------------- */

static void op_done(void *arg, int64_t res)
{
	struct op *op = arg;
	struct runner *r = op->run;

	op->lat_ns = now_ns() - op->start_ns;
	op->res = res;
	pthread_mutex_lock(&r->lock);
	if (res != op->want && r->first_err == 0)
		r->first_err = res < 0 ? res : -EIO;
	r->inflight--;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static struct op *runner_slot(struct runner *r)
{
	struct op *op;

	pthread_mutex_lock(&r->lock);
	while (r->inflight >= QD)
		pthread_cond_wait(&r->cond, &r->lock);
	r->inflight++;
	pthread_mutex_unlock(&r->lock);
	if (r->nops == r->nops_max)
		die("op table", ENOSPC);
	op = &r->ops[r->nops++];
	op->run = r;
	op->res = 0;
	return op;
}

static void runner_unslot(struct runner *r)
{
	pthread_mutex_lock(&r->lock);
	r->inflight--;
	pthread_mutex_unlock(&r->lock);
}

static void runner_drain(struct runner *r)
{
	pthread_mutex_lock(&r->lock);
	while (r->inflight)
		pthread_cond_wait(&r->cond, &r->lock);
	pthread_mutex_unlock(&r->lock);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* p50 / p99 / max of the op latencies, in microseconds. */
static void latency_report(FILE *fp, const char *key, struct runner *r)
{
	uint64_t *l = malloc((r->nops ? r->nops : 1) * sizeof(*l));
	size_t i;

	if (!l)
		die("malloc", ENOMEM);
	for (i = 0; i < r->nops; i++)
		l[i] = r->ops[i].lat_ns;
	qsort(l, r->nops, sizeof(*l), cmp_u64);
	if (r->nops == 0)
		l[0] = 0;
	fprintf(fp, "\"%s\": {\"ops\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f, "
		"\"max_us\": %.1f}", key, r->nops,
		l[r->nops / 2] / 1e3, l[r->nops ? (r->nops * 99) / 100 : 0] / 1e3,
		l[r->nops ? r->nops - 1 : 0] / 1e3);
	free(l);
}

/* One line rewritten in place on a terminal; a line per quarter in logs. */
static void progress(const char *what, size_t done, size_t total,
		     uint64_t bytes)
{
	static int tty = -1;
	static size_t last_quarter;
	size_t quarter = done * 4 / (total ? total : 1);

	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (tty) {
		fprintf(stderr, "\r   %s %zu/%zu objects, %" PRIu64 " MiB   ",
			what, done, total, bytes >> 20);
		if (done == total)
			fputc('\n', stderr);
	} else if (done == 1 || quarter != last_quarter) {
		fprintf(stderr, "   %s %zu/%zu objects, %" PRIu64 " MiB\n", what,
			done, total, bytes >> 20);
	}
	last_quarter = done == total ? 0 : quarter;
}

/* Write (or read back and compare) every member with QD requests in
 * flight.  @return logical bytes moved. */
static uint64_t run_all(coil_store *s, struct member *m, size_t n, int write,
			struct runner *r, uint8_t *scratch)
{
	coil_obj *open_objs[BATCH];
	uint64_t bytes = 0, soff = 0;
	size_t i, nopen = 0, j;

	for (i = 0; i < n; i++) {
		coil_obj *o;
		uint64_t off;
		int ret;

		ret = coil_obj_open(s, m[i].name, write ? COIL_CREATE : 0, &o);
		if (ret < 0)
			die(m[i].name, ret);
		open_objs[nopen++] = o;
		for (off = 0; off < m[i].len; off += CHUNK) {
			size_t len = m[i].len - off < CHUNK ?
				     (size_t)(m[i].len - off) : CHUNK;
			struct op *op = runner_slot(r);

			op->want = (int64_t)len;
			op->start_ns = now_ns();
			if (write) {
				ret = coil_write(o, m[i].data + off, len, off,
						 op_done, op);
			} else {
				/* Each read lands in its own slice of scratch,
				 * compared with the source at the end. */
				ret = coil_read(o, scratch + soff, len, off,
						op_done, op);
			}
			soff += len;
			if (ret < 0) {
				runner_unslot(r);
				die(write ? "coil_write" : "coil_read", ret);
			}
			bytes += len;
		}
		/* Handles stay open while their requests fly (closing one
		 * waits for them); release a batch once the window drains. */
		if (nopen == BATCH || i + 1 == n) {
			runner_drain(r);
			for (j = 0; j < nopen; j++)
				coil_obj_close(open_objs[j]);
			nopen = 0;
		}
		if ((i & 255) == 0 || i + 1 == n)
			progress(write ? "wrote" : "read ", i + 1, n, bytes);
	}
	return bytes;
}

static int verify_all(struct member *m, size_t n, const uint8_t *scratch)
{
	uint64_t soff = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (memcmp(scratch + soff, m[i].data, m[i].len) != 0) {
			fprintf(stderr, "demo_load: MISMATCH in %s\n", m[i].name);
			return -EIO;
		}
		soff += m[i].len;
	}
	return 0;
}

static char *stats_get(coil_store *s)
{
	int n = coil_stats_json(s, NULL, 0);
	char *buf;

	if (n < 0)
		die("coil_stats_json", n);
	buf = malloc((size_t)n + 1);
	if (!buf || coil_stats_json(s, buf, (size_t)n + 1) < 0)
		die("coil_stats_json", EIO);
	return buf;
}

static uint8_t *slurp(const char *path, uint64_t *len)
{
	struct stat st;
	uint8_t *buf;
	uint64_t got = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) < 0)
		die(path, errno);
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		die("malloc", ENOMEM);
	while (got < (uint64_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r <= 0)
			die(path, r < 0 ? errno : EIO);
		got += (uint64_t)r;
	}
	close(fd);
	*len = got;
	return buf;
}

int main(int argc, char **argv)
{
	struct coil_options co;
	struct runner r = { .lock = PTHREAD_MUTEX_INITIALIZER,
			    .cond = PTHREAD_COND_INITIALIZER };
	struct member *m;
	coil_store *s;
	uint8_t *tar, *rnd, *scratch;
	uint64_t tar_len, total = 0, wbytes, rbytes, t0, w_ns, r_ns;
	char *st_load, *st_read;
	size_t n_max, i;
	long n;
	FILE *out;
	int ret;

	if (argc < 4) {
		fprintf(stderr, "usage: %s STORE TAR RESULT.json [SIZE]\n", argv[0]);
		return 2;
	}
	tar = slurp(argv[2], &tar_len);
	n_max = tar_len / 512 + 3;
	m = calloc(n_max, sizeof(*m));
	rnd = malloc(RANDOM_BYTES);
	if (!m || !rnd)
		die("malloc", ENOMEM);
	n = tar_parse(tar, tar_len, m, n_max - 2);
	if (n < 0)
		die("tar archive", (int)n);
	/* The larger objects: the whole archive, and incompressible bytes. */
	snprintf(m[n].name, sizeof(m[n].name), "big/corpus.tar");
	m[n].data = tar;
	m[n].len = tar_len;
	n++;
	srandom(42);
	for (i = 0; i < RANDOM_BYTES / sizeof(long); i++)
		((long *)rnd)[i] = random() ^ (random() << 31);
	snprintf(m[n].name, sizeof(m[n].name), "big/random.bin");
	m[n].data = rnd;
	m[n].len = RANDOM_BYTES;
	n++;
	for (i = 0; i < (size_t)n; i++)
		total += m[i].len;
	r.nops_max = (size_t)(total / CHUNK) + (size_t)n + 1;
	r.ops = calloc(r.nops_max, sizeof(*r.ops));
	scratch = malloc(total);
	if (!r.ops || !scratch)
		die("malloc", ENOMEM);

	coil_options_init(&co);
	co.flags = COIL_CREATE;
	if (argc > 4)
		co.size = strtoull(argv[4], NULL, 0);
	ret = coil_open(argv[1], &co, &s);
	if (ret < 0)
		die(argv[1], ret);

	fprintf(stderr, "   %ld objects, %.1f MiB logical\n", n, total / 1048576.0);
	t0 = now_ns();
	wbytes = run_all(s, m, (size_t)n, 1, &r, NULL);
	ret = coil_sync(s);
	if (ret < 0 || r.first_err)
		die("write", ret < 0 ? ret : (int)r.first_err);
	w_ns = now_ns() - t0;
	st_load = stats_get(s);
	out = fopen(argv[3], "w");
	if (!out)
		die(argv[3], errno);
	fprintf(out, "{\"objects\": %ld, \"logical_bytes\": %" PRIu64 ",\n",
		n, total);
	fprintf(out, " \"write\": {\"bytes\": %" PRIu64 ", \"seconds\": %.3f, ",
		wbytes, w_ns / 1e9);
	latency_report(out, "latency", &r);
	fprintf(out, "},\n");

	/* Reopen so the read-back starts with a cold cache. */
	ret = coil_close(s);
	if (ret < 0)
		die("coil_close", ret);
	co.flags = 0;
	ret = coil_open(argv[1], &co, &s);
	if (ret < 0)
		die("reopen", ret);
	r.nops = 0;
	t0 = now_ns();
	rbytes = run_all(s, m, (size_t)n, 0, &r, scratch);
	r_ns = now_ns() - t0;
	if (r.first_err)
		die("read back", (int)r.first_err);
	ret = verify_all(m, (size_t)n, scratch);
	st_read = stats_get(s);
	fprintf(out, " \"read\": {\"bytes\": %" PRIu64 ", \"seconds\": %.3f, "
		"\"verified\": %s, ", rbytes, r_ns / 1e9, ret == 0 ? "true" : "false");
	latency_report(out, "latency", &r);
	fprintf(out, "},\n \"stats_after_load\": %s,\n \"stats_after_read\": %s}\n",
		st_load, st_read);
	fclose(out);
	ret = ret < 0 ? ret : coil_close(s);
	free(st_load);
	free(st_read);
	free(scratch);
	free(r.ops);
	free(rnd);
	free(m);
	free(tar);
	if (ret < 0)
		die("verify/close", ret);
	return 0;
}
