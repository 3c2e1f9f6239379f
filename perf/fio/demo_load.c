/* demo_load — load a tar archive into a coil store, one object per member,
 * read everything back verified, and report what happened as JSON.
 *
 *   demo_load STORE TAR RESULT.json [STORE_SIZE_BYTES [LATENCIES.tsv]]
 *
 * Objects: every regular file of the tar under its member path, plus a few
 * larger objects: "big/corpus.tar" (the whole archive, compressible) and
 * "big/random.bin" (32 MiB incompressible).  Writes go through the async API
 * with a bounded number in flight (QD); the store is then closed and
 * reopened so the read-back starts cold, and every byte is compared with
 * the source.  Progress goes to stderr, the report to RESULT.json, every
 * request's latency to LATENCIES.tsv (for the demo's plot).
 *
 * The baseline the report needs is measured here too, on the same objects:
 * zstd alone (one thread, the store's level and blob size, and coil's rule
 * of keeping a blob raw unless it shrinks by 1/8) — what the compression
 * costs and saves with no storage engine around it.  Apart from that
 * baseline, the program uses only coil.h, like any program embedding libcoil.
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

#include <zstd.h>

#include "coil.h"

#define QD 32			/* requests in flight */
#define CHUNK (1u << 20)	/* largest single coil_write / coil_read */
#define BATCH 256		/* objects open at once */
#define RANDOM_BYTES (32u << 20)
#define NAME_MAX_TAR 1024
#define BLOB 65536u		/* coil_options.max_blob's default */
#define ZSTD_LEVEL 1		/* coil_options.compression's default, zstd:1 */

/* What the archive held, so the report can reconcile "files in the tar"
 * with "objects written": only non-empty regular files become objects. */
struct tar_counts {
	long regular;		/* loaded */
	long empty;		/* regular, 0 bytes: nothing to store */
	long links;		/* symbolic and hard links */
	long dirs;
	long other;		/* devices, fifos, names over COIL_NAME_MAX */
};

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
		      size_t m_max, struct tar_counts *c)
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
			if (type == '1' || type == '2') {
				c->links++;
			} else if (type == '5') {
				c->dirs++;
			} else if (type != '0' && type != '\0') {
				c->other++;
			} else if (size == 0) {
				c->empty++;
			} else if (n < m_max && strlen(name) <= COIL_NAME_MAX) {
				/* Fits: the length was checked just above. */
				memcpy(m[n].name, name, strlen(name) + 1);
				m[n].data = t + off + 512;
				m[n].len = size;
				n++;
				c->regular++;
			} else {
				c->other++;
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

/* p50 / p99 / max of the op latencies in microseconds, over the requests
 * whose size is in [@lo, @hi]: small files (one request each) and the
 * 1 MiB pieces of the big objects queue very differently, and one p99 over
 * both would be the big pieces' alone. */
static void latency_report(FILE *fp, const char *key, struct runner *r,
			   int64_t lo, int64_t hi)
{
	uint64_t *l = malloc((r->nops ? r->nops : 1) * sizeof(*l));
	size_t i, n = 0;

	if (!l)
		die("malloc", ENOMEM);
	for (i = 0; i < r->nops; i++)
		if (r->ops[i].want >= lo && r->ops[i].want <= hi)
			l[n++] = r->ops[i].lat_ns;
	qsort(l, n, sizeof(*l), cmp_u64);
	if (n == 0)
		l[0] = 0;
	fprintf(fp, "\"%s\": {\"ops\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f, "
		"\"max_us\": %.1f}", key, n,
		l[n / 2] / 1e3, l[n ? (n * 99) / 100 : 0] / 1e3,
		l[n ? n - 1 : 0] / 1e3);
	free(l);
}

static void latency_reports(FILE *fp, struct runner *r)
{
	latency_report(fp, "latency", r, 0, INT64_MAX);
	fprintf(fp, ", ");
	latency_report(fp, "latency_small", r, 0, CHUNK - 1);
	fprintf(fp, ", ");
	latency_report(fp, "latency_1mib", r, CHUNK, CHUNK);
}

/* One line per request: phase, bytes, microseconds (the demo's plot). */
static void latency_dump(FILE *fp, const char *phase, struct runner *r)
{
	size_t i;

	if (!fp)
		return;
	for (i = 0; i < r->nops; i++)
		fprintf(fp, "%s\t%" PRId64 "\t%.1f\n", phase, r->ops[i].want,
			r->ops[i].lat_ns / 1e3);
}

/* zstd alone over the same objects cut into the same blobs; its JSON
 * fields go to @fp. */
static void zstd_alone(FILE *fp, const struct member *m, size_t n)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	size_t cap = ZSTD_compressBound(BLOB);
	uint8_t *dst = malloc(cap), *back = malloc(BLOB);
	uint64_t logical = 0, stored = 0, c_ns = 0, d_ns = 0, t;
	size_t i, raw_blobs = 0, blobs = 0;

	if (!cc || !dc || !dst || !back)
		die("zstd baseline", ENOMEM);
	for (i = 0; i < n; i++) {
		uint64_t off;

		for (off = 0; off < m[i].len; off += BLOB) {
			size_t len = m[i].len - off < BLOB ?
				     (size_t)(m[i].len - off) : BLOB;
			size_t keep = len - len / 8, r;

			t = now_ns();
			r = ZSTD_compressCCtx(cc, dst, keep, m[i].data + off,
					      len, ZSTD_LEVEL);
			c_ns += now_ns() - t;
			blobs++;
			logical += len;
			if (ZSTD_isError(r) || r == 0 || r > keep) {
				stored += len;
				raw_blobs++;
				continue;
			}
			stored += r;
			t = now_ns();
			if (ZSTD_decompressDCtx(dc, back, BLOB, dst, r) != len)
				die("zstd baseline round trip", EIO);
			d_ns += now_ns() - t;
		}
	}
	fprintf(fp, " \"zstd_alone\": {\"level\": %d, \"blob_bytes\": %u, "
		"\"blobs\": %zu, \"raw_blobs\": %zu, \"logical_bytes\": %" PRIu64
		", \"stored_bytes\": %" PRIu64 ", \"compress_seconds\": %.3f, "
		"\"decompress_seconds\": %.3f},\n", ZSTD_LEVEL, BLOB, blobs,
		raw_blobs, logical, stored, c_ns / 1e9, d_ns / 1e9);
	free(dst);
	free(back);
	ZSTD_freeCCtx(cc);
	ZSTD_freeDCtx(dc);
}

/* One line rewritten in place on a terminal; only the last one in a log. */
static void progress(const char *what, size_t done, size_t total,
		     uint64_t bytes)
{
	static int tty = -1;

	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (tty) {
		fprintf(stderr, "\r   %s %zu/%zu objects, %" PRIu64 " MiB   ",
			what, done, total, bytes >> 20);
		if (done == total)
			fputc('\n', stderr);
	} else if (done == total) {
		fprintf(stderr, "   %s %zu/%zu objects, %" PRIu64 " MiB\n", what,
			done, total, bytes >> 20);
	}
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
	char *buf;
	int n = coil_stats_json_dup(s, 0, &buf);

	if (n < 0)
		die("coil_stats_json_dup", n);
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
	struct tar_counts tc = { 0 };
	struct member *m;
	coil_store *s;
	FILE *lat = NULL;
	uint8_t *tar, *rnd, *scratch;
	uint64_t tar_len, total = 0, wbytes, rbytes, t0, w_ns, r_ns;
	uint64_t w_small, r_small, w_small_ns, r_small_ns;
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
	n = tar_parse(tar, tar_len, m, n_max - 2, &tc);
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
	if (argc > 5 && !(lat = fopen(argv[5], "w")))
		die(argv[5], errno);
	ret = coil_open(argv[1], &co, &s);
	if (ret < 0)
		die(argv[1], ret);

	fprintf(stderr, "   %ld objects, %.1f MiB logical\n", n, total / 1048576.0);
	t0 = now_ns();
	/* The files first, then the two big objects: timed apart, since one
	 * request per small file and 1 MiB streams have different ceilings. */
	w_small = run_all(s, m, (size_t)n - 2, 1, &r, NULL);
	w_small_ns = now_ns() - t0;
	wbytes = w_small + run_all(s, m + n - 2, 2, 1, &r, NULL);
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
	fprintf(out, " \"tar\": {\"regular_loaded\": %ld, \"empty_skipped\": %ld, "
		"\"links_skipped\": %ld, \"dirs\": %ld, \"other_skipped\": %ld},\n",
		tc.regular, tc.empty, tc.links, tc.dirs, tc.other);
	fprintf(out, " \"write\": {\"bytes\": %" PRIu64 ", \"seconds\": %.3f, "
		"\"small_files\": %ld, \"small_bytes\": %" PRIu64 ", "
		"\"small_seconds\": %.3f, ", wbytes, w_ns / 1e9, n - 2, w_small,
		w_small_ns / 1e9);
	latency_reports(out, &r);
	fprintf(out, "},\n");
	latency_dump(lat, "write", &r);

	/* Reopen so the read-back starts with a cold cache. */
	ret = coil_close(s);
	if (ret < 0)
		die("coil_close", ret);
	co.flags = 0;
	ret = coil_open(argv[1], &co, &s);
	if (ret < 0)
		die("reopen", ret);
	r.nops = 0;
	/* Fault the destination in first: a read should not be timed
	 * waiting for the kernel to hand the loader fresh pages. */
	memset(scratch, 0, total);
	t0 = now_ns();
	r_small = run_all(s, m, (size_t)n - 2, 0, &r, scratch);
	r_small_ns = now_ns() - t0;
	rbytes = r_small + run_all(s, m + n - 2, 2, 0, &r, scratch + r_small);
	r_ns = now_ns() - t0;
	if (r.first_err)
		die("read back", (int)r.first_err);
	ret = verify_all(m, (size_t)n, scratch);
	st_read = stats_get(s);
	fprintf(out, " \"read\": {\"bytes\": %" PRIu64 ", \"seconds\": %.3f, "
		"\"small_files\": %ld, \"small_bytes\": %" PRIu64 ", "
		"\"small_seconds\": %.3f, \"verified\": %s, ", rbytes, r_ns / 1e9,
		n - 2, r_small, r_small_ns / 1e9, ret == 0 ? "true" : "false");
	latency_reports(out, &r);
	fprintf(out, "},\n");
	latency_dump(lat, "read", &r);
	if (lat)
		fclose(lat);
	/* After coil's runs, so it does not warm the page cache for them
	 * (coil reads with O_DIRECT anyway) or share the cores with them. */
	zstd_alone(out, m, (size_t)n);
	fprintf(out, " \"stats_after_load\": %s,\n \"stats_after_read\": %s}\n",
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
