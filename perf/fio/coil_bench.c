/* coil_bench — the coil side of the harness comparisons fio cannot drive:
 * streaming a real file through the codec (comparison 2) and a 4 KiB page
 * store (comparison 5).  Uses only coil.h; prints one JSON object.
 *
 *   coil_bench copy-in  STORE FILE OBJ BS QD COMPRESSION
 *       write FILE into object OBJ of a fresh store in BS-byte requests
 *   coil_bench copy-out STORE FILE OBJ BS QD
 *       read OBJ back cold (fresh open) and compare with FILE
 *   coil_bench zstd     FILE BLOB LEVEL
 *       the codec alone, in this process: FILE cut into BLOB-byte blocks,
 *       each compressed and decompressed with libzstd on one thread,
 *       speeds per CPU second (the baseline coil's overhead is measured
 *       against; zstd -b reports wall-clock speed, which a busy machine
 *       lowers).  Decoded twice: from compressed blocks still in the
 *       caches from the compress pass, as zstd -b does, and from blocks
 *       flushed out of every cache level first, as bytes a device has
 *       just written into memory are (read_cold_mb_per_cpu_s)
 *   coil_bench pages    STORE N QD RATIO COMPRESSION SEED [READS [SYNC]]
 *       N unique 4 KiB pages written in random order, then READS x N
 *       (default 1) random page reads after a cold reopen (QD 1: coil_pread,
 *       with first reads and rereads timed apart); values are made like
 *       db_bench's (RATIO of each value random printable bytes, the rest
 *       repeats).  SYNC > 0: a coil_sync after every SYNC writes (a
 *       database's commit), timed with the writes.  COIL_BENCH_OPTIMIZE=1:
 *       coil_optimize (defaults) after the writes, before the reopen, so
 *       the reads are of the optimized store (the store opened with
 *       optimize_cold = 0: the pages just written count as cold)
 *
 * Times are wall clock; cpu_s is the whole process (every coil thread);
 * page_faults counts the minor faults of the timed part (on a guest with
 * shadowed page tables each one costs microseconds).
 */
#include <errno.h>
#include <fcntl.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "coil.h"

#define QD_MAX 256
#define PAGE 4096u

struct win {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned inflight;
	int64_t err;
	uint64_t *lat_ns;	/* one slot per op, for percentiles */
	size_t nlat, nlat_max;
	unsigned free_slots[QD_MAX];	/* stack of idle op slots */
	unsigned nfree;
};

struct op {
	struct win *w;
	uint64_t t0;
	int64_t want;
	unsigned slot;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Page faults of the whole process so far (minor: no disk read). */
static uint64_t minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_minflt;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "coil_bench: %s: %s\n", what,
		err < 0 ? coil_strerror(err) : strerror(err));
	exit(1);
}

static void op_cb(void *arg, int64_t res)
{
	struct op *op = arg;
	struct win *w = op->w;
	uint64_t lat = now_ns() - op->t0;

	pthread_mutex_lock(&w->lock);
	if (res != op->want && !w->err)
		w->err = res < 0 ? res : -EIO;
	if (w->nlat < w->nlat_max)
		w->lat_ns[w->nlat++] = lat;
	w->inflight--;
	w->free_slots[w->nfree++] = op->slot;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Take an idle slot (op struct and buffer index) once fewer than @qd are
 * in flight; a slot is reused only after its completion ran. */
static unsigned win_wait(struct win *w, unsigned qd)
{
	unsigned slot;

	pthread_mutex_lock(&w->lock);
	while (w->inflight >= qd || !w->nfree)
		pthread_cond_wait(&w->cond, &w->lock);
	w->inflight++;
	slot = w->free_slots[--w->nfree];
	pthread_mutex_unlock(&w->lock);
	return slot;
}

static void win_drain(struct win *w)
{
	pthread_mutex_lock(&w->lock);
	while (w->inflight)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	if (w->err)
		die("i/o", (int)w->err);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void lat_print(const char *key, struct win *w)
{
	size_t n = w->nlat;

	qsort(w->lat_ns, n, sizeof(uint64_t), cmp_u64);
	printf("\"%s\": {\"ops\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f}", key, n,
	       n ? w->lat_ns[n / 2] / 1e3 : 0.0,
	       n ? w->lat_ns[(n * 99) / 100] / 1e3 : 0.0);
	w->nlat = 0;
}

static void stats_print(coil_store *s)
{
	char *buf;
	int n = coil_stats_json_dup(s, 0, &buf);

	if (n < 0)
		die("coil_stats_json_dup", n);
	printf("\"stats\": %s", buf);
	free(buf);
}

static uint8_t *slurp(const char *path, uint64_t *len)
{
	struct stat st;
	uint64_t got = 0;
	uint8_t *buf;
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
	/* Read every page once from user space before any clock starts.  The
	 * kernel filled them through its own mapping; on a guest whose page
	 * tables are shadowed by the hypervisor (this project's CI machines),
	 * the first user access to each page still costs a trap, which made a
	 * first pass over the data twice as slow as the next.  The libzstd
	 * side used to hide that cost across its passes while coil's single
	 * pass paid it all. */
	{
		volatile uint8_t sink = 0;

		for (uint64_t i = 0; i < got; i += 4096)
			sink ^= buf[i];
		(void)sink;
	}
	*len = got;
	return buf;
}

static coil_store *store_open(const char *path, unsigned flags,
			      const char *compression, uint64_t size)
{
	struct coil_options co;
	coil_store *s;
	int ret;

	coil_options_init(&co);
	co.flags = flags;
	/* COIL_BENCH_WORKERS: the pool's thread count (default: one a core) */
	if (getenv("COIL_BENCH_WORKERS"))
		co.workers = (unsigned)strtoul(getenv("COIL_BENCH_WORKERS"), NULL, 0);
	if (compression)
		co.compression = compression;
	/* COIL_BENCH_PREFETCH: 0 turns readahead off (default: on) */
	if (getenv("COIL_BENCH_PREFETCH"))
		co.prefetch = (unsigned)strtoul(getenv("COIL_BENCH_PREFETCH"), NULL, 0);
	if (size > co.size)
		co.size = size;
	/* COIL_BENCH_OPTIMIZE optimizes the pages it has just written: all
	 * data counts as cold (by default the optimizer leaves segments
	 * written in the last optimize_cold seconds alone) */
	if (getenv("COIL_BENCH_OPTIMIZE") && atoi(getenv("COIL_BENCH_OPTIMIZE")))
		co.optimize_cold = 0;
	ret = coil_open(path, &co, &s);
	if (ret < 0)
		die(path, ret);
	return s;
}

static void win_init(struct win *w, size_t nops)
{
	unsigned i;

	memset(w, 0, sizeof(*w));
	for (i = 0; i < QD_MAX; i++)
		w->free_slots[i] = QD_MAX - 1 - i;
	w->nfree = QD_MAX;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->nlat_max = nops;
	w->lat_ns = calloc(nops ? nops : 1, sizeof(uint64_t));
	if (!w->lat_ns)
		die("malloc", ENOMEM);
}

/* Stream @len bytes between @buf and @o in @bs requests, @qd in flight. */
static void stream(coil_obj *o, uint8_t *buf, uint64_t len, size_t bs,
		   unsigned qd, int write, struct win *w, struct op *ops)
{
	uint64_t off;

	for (off = 0; off < len; off += bs) {
		size_t n = len - off < bs ? (size_t)(len - off) : bs;
		unsigned slot = win_wait(w, qd);
		struct op *op = &ops[slot];
		int ret;

		op->slot = slot;
		op->w = w;
		op->want = (int64_t)n;
		op->t0 = now_ns();
		ret = write ? coil_write(o, buf + off, n, off, op_cb, op) :
			      coil_read(o, buf + off, n, off, op_cb, op);
		if (ret < 0)
			die(write ? "coil_write" : "coil_read", ret);
	}
	win_drain(w);
}

static int cmd_copy(int argc, char **argv, int write)
{
	struct op ops[QD_MAX];
	struct win w = { 0 };
	uint64_t len, t0, f0;
	uint8_t *src, *dst;
	double c0;
	coil_store *s;
	coil_obj *o;
	size_t bs;
	unsigned qd;
	int ret;

	if (argc < 7)
		return 2;
	src = slurp(argv[3], &len);
	bs = strtoul(argv[5], NULL, 0);
	qd = (unsigned)strtoul(argv[6], NULL, 0);
	if (!bs || !qd || qd > QD_MAX)
		die("bs/qd", EINVAL);
	win_init(&w, len / bs + 1);
	if (write) {
		unlink(argv[2]);
		s = store_open(argv[2], COIL_CREATE, argc > 7 ? argv[7] : NULL,
			       len * 3);
	} else {
		s = store_open(argv[2], 0, NULL, 0);
	}
	ret = coil_obj_open(s, argv[4], write ? COIL_CREATE : 0, &o);
	if (ret < 0)
		die(argv[4], ret);
	dst = write ? src : malloc(len + 1);
	if (!dst)
		die("malloc", ENOMEM);
	/* Fault the destination in before the clock starts: the libzstd side
	 * decodes into a buffer it has already touched, so the first-touch
	 * page faults and the kernel's zeroing of 128 MiB are not the
	 * engine's cost and must not be timed on this side only.  Not with
	 * zeros: the compiler turns malloc + memset(0) into calloc, which
	 * touches nothing. */
	if (!write)
		memset(dst, 0xa5, len + 1);
	f0 = minflt();
	c0 = cpu_s();
	t0 = now_ns();
	stream(o, dst, len, bs, qd, write, &w, ops);
	if (write && (ret = coil_sync(s)) < 0)
		die("coil_sync", ret);
	t0 = now_ns() - t0;
	c0 = cpu_s() - c0;
	f0 = minflt() - f0;
	if (!write && memcmp(src, dst, len) != 0)
		die("read back differs", EIO);
	printf("{\"op\": \"%s\", \"bytes\": %" PRIu64 ", \"bs\": %zu, \"qd\": %u, "
	       "\"seconds\": %.4f, \"cpu_s\": %.4f, \"mb_s\": %.1f, "
	       "\"mb_per_cpu_s\": %.1f, \"page_faults\": %" PRIu64 ", ",
	       write ? "write" : "read", len, bs, qd, t0 / 1e9, c0,
	       len / 1e6 / (t0 / 1e9), len / 1e6 / (c0 > 0 ? c0 : 1e-9), f0);
	lat_print("latency", &w);
	printf(", ");
	stats_print(s);
	printf("}\n");
	coil_obj_close(o);
	ret = coil_close(s);
	if (ret < 0)
		die("coil_close", ret);
	if (!write)
		free(dst);
	free(src);
	free(w.lat_ns);
	return 0;
}

/* A value like db_bench's CompressibleString: @ratio of it random printable
 * bytes, the rest repeats of those, so zstd sees the same redundancy. */
/* Distinct page values the pages driver makes ahead (256 MiB). */
#define VALUES_MAX 65536u

static void value_fill(uint8_t *v, size_t len, double ratio, uint64_t *rng)
{
	size_t raw = (size_t)(len * ratio), i;

	if (raw < 1)
		raw = 1;
	for (i = 0; i < raw; i++) {
		*rng ^= *rng << 13;
		*rng ^= *rng >> 7;
		*rng ^= *rng << 17;
		v[i] = (uint8_t)(' ' + *rng % 95);
	}
	for (; i < len; i++)
		v[i] = v[i - raw];
}

static void shuffle(uint64_t *a, uint64_t n, uint64_t *rng)
{
	uint64_t i;

	for (i = n; i > 1; i--) {
		uint64_t j, t;

		*rng ^= *rng << 13;
		*rng ^= *rng >> 7;
		*rng ^= *rng << 17;
		j = *rng % i;
		t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

static int cmd_pages(int argc, char **argv)
{
	struct op ops[QD_MAX];
	struct win w = { 0 }, wfirst = { 0 }, wagain = { 0 }, wsync = { 0 };
	uint64_t n, nr, i, *order, rng, t0, tw, tr, sync_every, nvals;
	uint8_t *seen;
	uint8_t *vals, *rd;
	double ratio, cw, cr;
	unsigned qd;
	coil_store *s;
	coil_obj *o;
	struct stat st;
	int ret;

	if (argc < 8)
		return 2;
	n = strtoull(argv[3], NULL, 0);
	qd = (unsigned)strtoul(argv[4], NULL, 0);
	ratio = strtod(argv[5], NULL);
	rng = strtoull(argv[7], NULL, 0) | 1;
	nr = n * (argc > 8 ? strtoull(argv[8], NULL, 0) : 1);
	sync_every = argc > 9 ? strtoull(argv[9], NULL, 0) : 0;
	if (!n || !nr || !qd || qd > QD_MAX)
		die("n/qd", EINVAL);
	/* The values are made before the clock starts, as db_bench makes
	 * its values before timing (slices of one buffer, no cost per
	 * write): made in the loop, 2048 random bytes a page took ~5 us of
	 * each QD 1 write's ~23.  One value per page up to VALUES_MAX, then
	 * round again (never written to while a write is in flight). */
	nvals = n < VALUES_MAX ? n : VALUES_MAX;
	vals = malloc((size_t)nvals * PAGE);
	rd = malloc((size_t)QD_MAX * PAGE);
	order = malloc(n * sizeof(*order));
	if (!vals || !rd || !order)
		die("malloc", ENOMEM);
	win_init(&w, nr);
	win_init(&wsync, sync_every ? n / sync_every + 1 : 1);
	for (i = 0; i < nvals; i++)
		value_fill(vals + (size_t)i * PAGE, PAGE, ratio, &rng);
	for (i = 0; i < n; i++)
		order[i] = i;
	shuffle(order, n, &rng);

	unlink(argv[2]);
	/* The default size: a store that grows as the pages arrive, as a
	 * database embedding coil opens it. */
	s = store_open(argv[2], COIL_CREATE, argv[6], 0);
	ret = coil_obj_open(s, "pages", COIL_CREATE, &o);
	if (ret < 0)
		die("pages", ret);
	cw = cpu_s();
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		if (qd == 1) {
			/* a database writing one page at a time: the
			 * synchronous call, as reads use coil_pread */
			uint64_t a;
			int64_t got;

			a = now_ns();
			got = coil_pwrite(o, vals + (size_t)(i % nvals) * PAGE,
					  PAGE, order[i] * PAGE);
			w.lat_ns[w.nlat++] = now_ns() - a;
			if (got != PAGE)
				die("coil_pwrite", got < 0 ? (int)got : EIO);
			if (sync_every && (i + 1) % sync_every == 0) {
				a = now_ns();
				ret = coil_sync(s);
				wsync.lat_ns[wsync.nlat++] = now_ns() - a;
				if (ret < 0)
					die("coil_sync", ret);
			}
			continue;
		}
		unsigned slot = win_wait(&w, qd);
		struct op *op = &ops[slot];
		const uint8_t *v = vals + (size_t)(i % nvals) * PAGE;

		op->slot = slot;
		op->w = &w;
		op->want = PAGE;
		op->t0 = now_ns();
		ret = coil_write(o, v, PAGE, order[i] * PAGE, op_cb, op);
		if (ret < 0)
			die("coil_write", ret);
		if (sync_every && (i + 1) % sync_every == 0) {
			uint64_t a;

			win_drain(&w);
			a = now_ns();
			ret = coil_sync(s);
			wsync.lat_ns[wsync.nlat++] = now_ns() - a;
			if (ret < 0)
				die("coil_sync", ret);
		}
	}
	win_drain(&w);
	ret = coil_sync(s);
	if (ret < 0)
		die("coil_sync", ret);
	tw = now_ns() - t0;
	cw = cpu_s() - cw;
	printf("{\"pages\": %" PRIu64 ", \"qd\": %u, \"write\": {\"seconds\": %.4f, "
	       "\"ops_s\": %.0f, \"cpu_s\": %.4f, ", n, qd, tw / 1e9,
	       n / (tw / 1e9), cw);
	lat_print("latency", &w);
	/* a commit's cost: each coil_sync of a QD 1 writer */
	printf(", ");
	lat_print("sync_latency", &wsync);
	printf("}, \"after_write\": {");
	stats_print(s);
	printf("}, ");
	if (getenv("COIL_BENCH_OPTIMIZE") && atoi(getenv("COIL_BENCH_OPTIMIZE"))) {
		t0 = now_ns();
		ret = coil_optimize(s, NULL, NULL);
		if (ret < 0)
			die("coil_optimize", ret);
		printf("\"optimize\": {\"seconds\": %.4f, ",
		       (now_ns() - t0) / 1e9);
		stats_print(s);
		printf("}, ");
	}
	coil_obj_close(o);
	ret = coil_close(s);
	if (ret < 0)
		die("coil_close", ret);

	/* Cold reopen, then uniformly random page reads.  At queue depth 1
	 * through coil_pread, the call a database reading one page at a time
	 * makes; the latency of a page's first read (from the device) and of
	 * its rereads (the cache, if it kept the page) are told apart. */
	s = store_open(argv[2], 0, NULL, 0);
	ret = coil_obj_open(s, "pages", 0, &o);
	if (ret < 0)
		die("pages", ret);
	win_init(&wfirst, nr);
	win_init(&wagain, nr);
	seen = calloc(n, 1);
	if (!seen)
		die("malloc", ENOMEM);
	cr = cpu_s();
	t0 = now_ns();
	for (i = 0; i < nr; i++) {
		uint64_t pg;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		pg = rng % n;
		if (qd == 1) {
			uint64_t a = now_ns(), lat;
			int64_t got = coil_pread(o, rd, PAGE, pg * PAGE);
			struct win *lw = seen[pg] ? &wagain : &wfirst;

			lat = now_ns() - a;
			if (got != PAGE)
				die("coil_pread", got < 0 ? (int)got : EIO);
			lw->lat_ns[lw->nlat++] = lat;
			w.lat_ns[w.nlat++] = lat;
			seen[pg] = 1;
			continue;
		}
		unsigned slot = win_wait(&w, qd);
		struct op *op = &ops[slot];

		op->slot = slot;
		op->w = &w;
		op->want = PAGE;
		op->t0 = now_ns();
		ret = coil_read(o, rd + (size_t)slot * PAGE, PAGE, pg * PAGE, op_cb, op);
		if (ret < 0)
			die("coil_read", ret);
	}
	win_drain(&w);
	tr = now_ns() - t0;
	cr = cpu_s() - cr;
	printf("\"read\": {\"ops\": %" PRIu64 ", \"seconds\": %.4f, "
	       "\"ops_s\": %.0f, \"cpu_s\": %.4f, ", nr, tr / 1e9,
	       nr / (tr / 1e9), cr);
	lat_print("latency", &w);
	if (qd == 1) {
		printf(", ");
		lat_print("latency_first", &wfirst);
		printf(", ");
		lat_print("latency_again", &wagain);
	}
	printf("}, ");
	stats_print(s);
	coil_obj_close(o);
	ret = coil_close(s);
	if (ret < 0)
		die("coil_close", ret);
	if (qd == 1) {
		/* A page's first read above may be served by the block a
		 * neighbouring page's read brought (packed pages share
		 * blocks).  The device's latency: a fresh open (empty
		 * cache), a few hundred random pages, few of them sharing a
		 * block. */
		struct win wdev;
		uint64_t ndev = n / 40 > 0 ? n / 40 : 1;

		win_init(&wdev, ndev);
		s = store_open(argv[2], 0, NULL, 0);
		ret = coil_obj_open(s, "pages", 0, &o);
		if (ret < 0)
			die("pages", ret);
		for (i = 0; i < ndev; i++) {
			uint64_t a, pg;
			int64_t got;

			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			pg = rng % n;
			a = now_ns();
			got = coil_pread(o, rd, PAGE, pg * PAGE);
			wdev.lat_ns[wdev.nlat++] = now_ns() - a;
			if (got != PAGE)
				die("coil_pread", got < 0 ? (int)got : EIO);
		}
		printf(", \"read_device\": {");
		lat_print("latency", &wdev);
		printf("}");
		coil_obj_close(o);
		ret = coil_close(s);
		if (ret < 0)
			die("coil_close", ret);
		free(wdev.lat_ns);
	}
	if (stat(argv[2], &st) < 0)
		die(argv[2], errno);
	printf(", \"file_bytes\": %" PRIu64 ", \"file_allocated_bytes\": %" PRIu64
	       ", \"value_bytes\": %" PRIu64 "}\n", (uint64_t)st.st_size,
	       (uint64_t)st.st_blocks * 512, n * PAGE);
	free(vals);
	free(rd);
	free(order);
	free(seen);
	free(w.lat_ns);
	free(wfirst.lat_ns);
	free(wagain.lat_ns);
	return 0;
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void zstd_decode_all(ZSTD_DCtx *dc, uint8_t *dec, uint64_t len,
			    size_t blob, const uint8_t *enc, size_t cap,
			    const size_t *clen, size_t nblk)
{
	uint64_t off;
	size_t i;

	for (i = 0, off = 0; i < nblk; i++, off += blob) {
		size_t n = len - off < blob ? (size_t)(len - off) : blob;
		size_t r = ZSTD_decompressDCtx(dc, dec + off, n, enc + i * cap,
					       clen[i]);

		if (ZSTD_isError(r) || r != n)
			die("ZSTD_decompressDCtx", EIO);
	}
}

/* Push every compressed block out of all cache levels, as a device's DMA
 * (or, on a guest, the host's copy) leaves the bytes coil decodes. */
static void zstd_flush(const uint8_t *enc, size_t cap, const size_t *clen,
		       size_t nblk)
{
#if defined(__x86_64__) || defined(__i386__)
	for (size_t i = 0; i < nblk; i++)
		for (size_t o = 0; o < clen[i]; o += 64)
			_mm_clflush(enc + i * cap + o);
	_mm_mfence();
#else
	/* no user-space flush: write over more than any last-level cache */
	static uint8_t *evict;
	const size_t n = 256u << 20;

	(void)enc, (void)cap, (void)clen, (void)nblk;
	if (!evict && !(evict = malloc(n)))
		die("malloc", ENOMEM);
	memset(evict, (int)nblk, n);
	__asm__ __volatile__("" : : "r"(evict) : "memory");
#endif
}

static int cmd_zstd(int argc, char **argv)
{
	uint64_t len, off, stored = 0, passes = 0;
	size_t blob, cap, nblk, i;
	uint8_t *src, *enc, *dec;
	size_t *clen;
	double c0, cs = 0, ds = 0, dcs = 0;
	ZSTD_CCtx *cc;
	ZSTD_DCtx *dc;
	int level;

	if (argc < 5)
		return 2;
	src = slurp(argv[2], &len);
	blob = strtoul(argv[3], NULL, 0);
	level = atoi(argv[4]);
	if (!blob || !len)
		die("blob/file", EINVAL);
	nblk = (size_t)((len + blob - 1) / blob);
	cap = ZSTD_compressBound(blob);
	enc = malloc(nblk * cap);
	/* Like zstd -b (benchzstd.c): each block decodes to its own place in
	 * a buffer as large as the input, as a reader's blocks do, and the
	 * result is checked after the clock stopped. */
	dec = malloc(len);
	clen = calloc(nblk, sizeof(*clen));
	cc = ZSTD_createCCtx();
	dc = ZSTD_createDCtx();
	if (!enc || !dec || !clen || !cc || !dc)
		die("malloc", ENOMEM);
	memset(dec, 0xa5, len); /* touched before any clock, as coil's side */
	/* Whole passes until each side has run for at least half a CPU
	 * second, so the clock's resolution does not matter. */
	while (cs < 0.5 || ds < 0.5 || dcs < 0.5) {
		c0 = thread_cpu_s();
		for (i = 0, off = 0; i < nblk; i++, off += blob) {
			size_t n = len - off < blob ? (size_t)(len - off) : blob;

			clen[i] = ZSTD_compressCCtx(cc, enc + i * cap, cap, src + off,
						    n, level);
			if (ZSTD_isError(clen[i]))
				die("ZSTD_compressCCtx", EIO);
		}
		cs += thread_cpu_s() - c0;
		c0 = thread_cpu_s();
		zstd_decode_all(dc, dec, len, blob, enc, cap, clen, nblk);
		ds += thread_cpu_s() - c0;
		if (memcmp(dec, src, len))
			die("ZSTD_decompressDCtx: wrong bytes", EIO);
		memset(dec, 0xa5, len);
		zstd_flush(enc, cap, clen, nblk);
		c0 = thread_cpu_s();
		zstd_decode_all(dc, dec, len, blob, enc, cap, clen, nblk);
		dcs += thread_cpu_s() - c0;
		if (memcmp(dec, src, len))
			die("ZSTD_decompressDCtx: wrong bytes (cold)", EIO);
		passes++;
	}
	for (i = 0; i < nblk; i++)
		stored += clen[i];
	printf("{\"bytes\": %" PRIu64 ", \"blob\": %zu, \"level\": %d, "
	       "\"passes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64 ", "
	       "\"ratio\": %.3f, \"write_mb_per_cpu_s\": %.1f, "
	       "\"read_mb_per_cpu_s\": %.1f, \"read_cold_mb_per_cpu_s\": %.1f}\n",
	       len, blob, level, passes, stored, (double)len / stored,
	       len * passes / 1e6 / cs, len * passes / 1e6 / ds,
	       len * passes / 1e6 / dcs);
	ZSTD_freeCCtx(cc);
	ZSTD_freeDCtx(dc);
	free(clen);
	free(dec);
	free(enc);
	free(src);
	return 0;
}

int main(int argc, char **argv)
{
	int ret = 2;

	if (argc > 1 && strcmp(argv[1], "copy-in") == 0)
		ret = cmd_copy(argc, argv, 1);
	else if (argc > 1 && strcmp(argv[1], "copy-out") == 0)
		ret = cmd_copy(argc, argv, 0);
	else if (argc > 1 && strcmp(argv[1], "zstd") == 0)
		ret = cmd_zstd(argc, argv);
	else if (argc > 1 && strcmp(argv[1], "pages") == 0)
		ret = cmd_pages(argc, argv);
	if (ret == 2)
		fprintf(stderr, "usage: see the comment at the top of coil_bench.c\n");
	return ret;
}
