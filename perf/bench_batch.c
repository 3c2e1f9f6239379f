/* bench_batch: N 4 KiB page writes from one thread, one by one or in atomic
 * batches.  Public API only (coil.h); perf/bench_batch.py runs it beside
 * RocksDB's db_bench and prints the table.
 *
 *   bench_batch one   STORE N B SYNC [OBJECTS [RATIO [SEED]]]
 *   bench_batch batch STORE N B SYNC [OBJECTS [RATIO [SEED]]]
 *
 * A new store with default options and OBJECTS objects (default 4), made
 * before the clock starts.  Then N writes of one 4 KiB page each, keys
 * drawn uniformly from [0, N) with repeats as db_bench's fillrandom draws
 * them: key k is page k / OBJECTS of object k % OBJECTS.
 *   one    coil_pwrite per page; with SYNC=1 a coil_sync after every B
 *          writes (and after the last)
 *   batch  B writes per batch (coil_batch_write by name, then
 *          coil_batch_commit); with SYNC=1 a coil_sync after each batch,
 *          so both modes make the same writes durable at the same points
 * The clock covers the writes and the syncs; with SYNC=0 one coil_sync
 * follows, off the clock, so the device byte count includes what the run's
 * data still owed the device.  Values are made as db_bench's
 * CompressibleString makes them (RATIO of random printable bytes, the rest
 * repeats of them; 0.5 by default: about 2:1), 256 of them before the
 * clock starts, as db_bench fills its 1 MiB value buffer up front.
 *
 * Measured: writes/s; the time of each group of B writes (a batch, or B
 * coil_pwrite calls, with its sync) as p50/p99; device bytes written over
 * the timed phase and the sync after it, from the store's
 * io.device_bytes_written (coil_stats_json) and, as a cross-check, from
 * the kernel's count for this process (/proc/self/io write_bytes minus
 * cancelled_write_bytes).  After the clock stops every key is read back
 * and compared with the last value written to it.
 *
 * Output: one JSON object on stdout; errors on stderr and exit status 1.
 * STORE must not exist (the caller deletes it afterwards). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "coil.h"
#define BENCH_PROG "bench_batch"
#include "perf/bench_util.h"

#define PAGE 4096u
#define VALUES 256u          /* distinct values, written in turn */
#define OBJECTS_MAX 64u
#define NO_VALUE 0xffffu     /* last[] of a key never written */
#define SEED_DEFAULT 0x5eedba7cu


/* A value like db_bench's CompressibleString: @ratio of it random printable
 * bytes, the rest repeats of those (as perf/fio/coil_bench.c makes the
 * pages of comparison 5), so zstd sees the same redundancy. */
static void value_fill(uint8_t *v, size_t len, double ratio, uint64_t *rng)
{
	size_t raw = (size_t)((double)len * ratio), i;

	if (raw < 1)
		raw = 1;
	for (i = 0; i < raw; i++)
		v[i] = (uint8_t)(' ' + xorshift(rng) % 95);
	for (; i < len; i++)
		v[i] = v[i - raw];
}

/* ---- /proc/self/io ------------------------------------------------------- */

/* Bytes this process sent (or, buffered, will send) to the device: all
 * threads, O_DIRECT included, less dirty pages dropped before writeback. */
static int64_t proc_write_bytes(void)
{
	int64_t w = proc_field("/proc/self/io", "write_bytes", 1);
	int64_t c = proc_field("/proc/self/io", "cancelled_write_bytes", 1);

	return w < 0 || c < 0 ? -1 : w - c;
}

/* ---- stats JSON ---------------------------------------------------------- */

struct snap {
	uint64_t dev_written, fsyncs, flushes, batches, batch_failed;
	uint64_t jchunks, jchunk_bytes, ckpt_bytes, stored, in_memory;
	int64_t proc_written;
};

static void snap_take(coil_store *s, struct snap *sn)
{
	char *j = stats_text(s);

	sn->dev_written = need_u64(j, "io", "device_bytes_written");
	sn->fsyncs = need_u64(j, "io", "fsyncs");
	sn->flushes = need_u64(j, "io", "flushes");
	sn->batches = need_u64(j, "batches", "applied");
	sn->batch_failed = need_u64(j, "batches", "failed");
	sn->jchunks = need_u64(j, "journal", "chunks");
	sn->jchunk_bytes = need_u64(j, "journal", "chunk_bytes");
	sn->ckpt_bytes = need_u64(j, "checkpoint", "bytes_written");
	sn->stored = need_u64(j, "space", "stored");
	/* small writes the packer has yet to write to a segment: bytes the
	 * device is still owed beyond dev_written */
	sn->in_memory = need_u64(j, "small_writes", "in_memory_bytes");
	free(j);
	sn->proc_written = proc_write_bytes();
}

/* ---- the run ------------------------------------------------------------- */

struct run {
	coil_store *s;
	coil_obj *obj[OBJECTS_MAX];
	char name[OBJECTS_MAX][16];
	unsigned nobj;
	uint64_t n, b;
	bool sync, batch;
	uint8_t *values;  /* VALUES pages */
	uint16_t *last;   /* per key: index of the value last written */
	double *group_s;  /* per group of b writes: its time */
	uint64_t ngroups;
};

static void sync_now(struct run *r)
{
	int rc = coil_sync(r->s);

	if (rc < 0)
		die_rc("coil_sync", rc);
}

/* Writes [@first, @first + @count) of the run as one batch. */
static void group_batch(struct run *r, uint64_t first, uint64_t count,
			uint64_t *rng)
{
	coil_batch *b = NULL;
	int rc = coil_batch_new(r->s, &b);

	if (rc < 0)
		die_rc("coil_batch_new", rc);
	for (uint64_t i = first; i < first + count; i++) {
		uint64_t k = xorshift(rng) % r->n;
		uint16_t v = (uint16_t)(i % VALUES);

		rc = coil_batch_write(b, r->name[k % r->nobj],
				      r->values + (size_t)v * PAGE, PAGE,
				      (k / r->nobj) * PAGE);
		if (rc < 0)
			die_rc("coil_batch_write", rc);
		r->last[k] = v;
	}
	rc = coil_batch_commit(b); /* consumes b */
	if (rc < 0)
		die_rc("coil_batch_commit", rc);
}

/* The same writes, one coil_pwrite each. */
static void group_one(struct run *r, uint64_t first, uint64_t count,
		      uint64_t *rng)
{
	for (uint64_t i = first; i < first + count; i++) {
		uint64_t k = xorshift(rng) % r->n;
		uint16_t v = (uint16_t)(i % VALUES);
		int64_t w = coil_pwrite(r->obj[k % r->nobj],
					r->values + (size_t)v * PAGE, PAGE,
					(k / r->nobj) * PAGE);

		if (w != PAGE)
			die_rc("coil_pwrite", w < 0 ? w : -EIO);
		r->last[k] = v;
	}
}

static double run_writes(struct run *r, uint64_t seed)
{
	uint64_t rng = seed | 1;
	double t0 = now_s();

	for (uint64_t i = 0; i < r->n; i += r->b) {
		uint64_t count = r->n - i < r->b ? r->n - i : r->b;
		double g0 = now_s();

		if (r->batch)
			group_batch(r, i, count, &rng);
		else
			group_one(r, i, count, &rng);
		if (r->sync)
			sync_now(r);
		r->group_s[r->ngroups++] = now_s() - g0;
	}
	return now_s() - t0;
}

/* Read every key back and compare it with the value last written to it
 * (a key never written reads as zeros or past the end). */
static uint64_t verify(struct run *r)
{
	static const uint8_t zero[PAGE];
	uint8_t buf[PAGE];
	uint64_t checked = 0;

	for (uint64_t k = 0; k < r->n; k++) {
		int64_t got = coil_pread(r->obj[k % r->nobj], buf, PAGE,
					 (k / r->nobj) * PAGE);

		if (got < 0)
			die_rc("coil_pread (verify)", got);
		if (r->last[k] == NO_VALUE) {
			if (memcmp(buf, zero, (size_t)got) != 0)
				die("key %" PRIu64 " was never written but reads "
				    "nonzero", k);
			continue;
		}
		if (got != PAGE ||
		    memcmp(buf, r->values + (size_t)r->last[k] * PAGE, PAGE))
			die("key %" PRIu64 " (object %s, offset %" PRIu64
			    ") does not read back what was last written to it",
			    k, r->name[k % r->nobj], (k / r->nobj) * PAGE);
		checked++;
	}
	return checked;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct_us(double *xs, uint64_t n, double p)
{
	uint64_t i;

	if (!n)
		return 0;
	i = (uint64_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return xs[i < n ? i : n - 1] * 1e6;
}

static uint64_t parse_u64(const char *what, const char *text)
{
	char *end;
	uint64_t v;

	errno = 0;
	v = strtoull(text, &end, 0);
	if (errno || *end || end == text)
		die("bad %s '%s'", what, text);
	return v;
}

static void usage(void)
{
	fprintf(stderr, "usage: %s one|batch STORE N B SYNC(0|1) "
		"[OBJECTS [RATIO [SEED]]]\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	struct run r = { 0 };
	struct coil_options o;
	struct snap s0, s1;
	struct stat st;
	const char *path;
	uint64_t seed = SEED_DEFAULT, vrng, checked;
	double ratio = 0.5, secs, sync_s = 0, t;
	int rc;

	if (argc < 6 || argc > 9)
		usage();
	if (strcmp(argv[1], "batch") == 0)
		r.batch = true;
	else if (strcmp(argv[1], "one") != 0)
		usage();
	path = argv[2];
	r.n = parse_u64("N", argv[3]);
	r.b = parse_u64("B", argv[4]);
	r.sync = parse_u64("SYNC", argv[5]) != 0;
	r.nobj = argc > 6 ? (unsigned)parse_u64("OBJECTS", argv[6]) : 4;
	if (argc > 7) {
		char *end;

		ratio = strtod(argv[7], &end);
		if (*end || ratio <= 0 || ratio > 1)
			die("bad RATIO '%s' (0 < RATIO <= 1)", argv[7]);
	}
	if (argc > 8)
		seed = parse_u64("SEED", argv[8]);
	if (r.n == 0 || r.b == 0 || r.nobj == 0 || r.nobj > OBJECTS_MAX)
		die("need N > 0, B > 0, 0 < OBJECTS <= %u", OBJECTS_MAX);
	if (r.batch && r.b > COIL_BATCH_OPS_MAX)
		die("B %" PRIu64 " is over COIL_BATCH_OPS_MAX (%u)", r.b,
		    COIL_BATCH_OPS_MAX);
	if (stat(path, &st) == 0)
		die("%s exists: a run starts from a new store (remove it first)",
		    path);
	if (errno != ENOENT)
		die("stat %s: %s", path, strerror(errno));

	r.values = malloc((size_t)VALUES * PAGE);
	r.last = malloc(r.n * sizeof(*r.last));
	r.group_s = malloc((r.n / r.b + 1) * sizeof(*r.group_s));
	if (!r.values || !r.last || !r.group_s)
		die("out of memory");
	memset(r.last, 0xff, r.n * sizeof(*r.last));
	vrng = seed ^ 0x9e3779b97f4a7c15ull;
	for (unsigned i = 0; i < VALUES; i++)
		value_fill(r.values + (size_t)i * PAGE, PAGE, ratio, &vrng);

	coil_options_init(&o); /* defaults, as a database embedding coil */
	o.flags = COIL_CREATE;
	rc = coil_open(path, &o, &r.s);
	if (rc < 0)
		die("coil_open %s: %s (%d)", path, coil_strerror(rc), rc);
	for (unsigned i = 0; i < r.nobj; i++) {
		snprintf(r.name[i], sizeof(r.name[i]), "obj%u", i);
		rc = coil_obj_open(r.s, r.name[i], COIL_CREATE | COIL_EXCL,
				   &r.obj[i]);
		if (rc < 0)
			die_rc(r.name[i], rc);
	}
	sync_now(&r); /* the creates: not part of the run */

	snap_take(r.s, &s0);
	secs = run_writes(&r, seed);
	if (!r.sync) {
		t = now_s();
		sync_now(&r);
		sync_s = now_s() - t;
	}
	snap_take(r.s, &s1);
	checked = verify(&r);

	for (unsigned i = 0; i < r.nobj; i++) {
		rc = coil_obj_close(r.obj[i]);
		if (rc < 0)
			die_rc("coil_obj_close", rc);
	}
	rc = coil_close(r.s);
	if (rc < 0)
		die_rc("coil_close", rc);
	if (stat(path, &st) < 0)
		die("stat %s: %s", path, strerror(errno));
	qsort(r.group_s, r.ngroups, sizeof(*r.group_s), cmp_double);

	uint64_t logical = r.n * PAGE, dev = s1.dev_written - s0.dev_written;
	int64_t proc = s0.proc_written >= 0 && s1.proc_written >= 0 ?
		       s1.proc_written - s0.proc_written : -1;

	printf("{\"mode\":\"%s\",\"n\":%" PRIu64 ",\"batch\":%" PRIu64
	       ",\"sync\":%d,\"objects\":%u,\"ratio\":%.3f,"
	       "\"seconds\":%.6f,\"ops_s\":%.1f,"
	       "\"group_p50_us\":%.1f,\"group_p99_us\":%.1f,"
	       "\"groups\":%" PRIu64 ",\"final_sync_s\":%.6f,"
	       "\"logical_bytes\":%" PRIu64 ",\"dev_write_bytes\":%" PRIu64
	       ",\"dev_bytes_per_logical\":%.4f,"
	       "\"dev_write_source\":\"stats io.device_bytes_written\","
	       "\"proc_write_bytes\":%" PRId64 ",\"proc_bytes_per_logical\":%.4f,"
	       "\"fsyncs\":%" PRIu64 ",\"flushes\":%" PRIu64
	       ",\"batches_applied\":%" PRIu64 ",\"batches_failed\":%" PRIu64
	       ",\"journal_chunks\":%" PRIu64 ",\"journal_chunk_bytes\":%" PRIu64
	       ",\"ckpt_bytes\":%" PRIu64 ",\"stored_bytes\":%" PRIu64
	       ",\"in_memory_bytes\":%" PRIu64
	       ",\"keys_verified\":%" PRIu64 ",\"file_allocated_bytes\":%" PRIu64
	       "}\n",
	       r.batch ? "batch" : "one", r.n, r.b, r.sync ? 1 : 0, r.nobj,
	       ratio, secs, (double)r.n / secs,
	       pct_us(r.group_s, r.ngroups, 50), pct_us(r.group_s, r.ngroups, 99),
	       r.ngroups, sync_s, logical, dev, (double)dev / (double)logical,
	       proc, proc >= 0 ? (double)proc / (double)logical : -1.0,
	       s1.fsyncs - s0.fsyncs, s1.flushes - s0.flushes,
	       s1.batches - s0.batches, s1.batch_failed - s0.batch_failed,
	       s1.jchunks - s0.jchunks, s1.jchunk_bytes - s0.jchunk_bytes,
	       s1.ckpt_bytes - s0.ckpt_bytes, s1.stored, s1.in_memory,
	       checked, (uint64_t)st.st_blocks * 512u);
	free(r.values);
	free(r.last);
	free(r.group_s);
	return fflush(stdout) == 0 ? 0 : 1;
}
