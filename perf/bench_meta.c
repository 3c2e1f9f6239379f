/* bench_meta: how coil's metadata costs grow with the number of objects and
 * of blobs.  Public API only (coil.h).
 *
 *   bench_meta objects STORE N   a new store; N objects "dNNN/objNNNNNNNN",
 *                                100 bytes each (coil_pwrite, QD1), one
 *                                coil_sync at the end
 *   bench_meta blobs STORE M     a new store; one object, M writes of 4 KiB
 *                                at i * 64 KiB in a shuffled order (fixed
 *                                seed): each its own extent
 *
 * Measured per run: the load (create+write) wall time and ops/s, the sync,
 * the store's checkpoint counters from coil_stats_json (count, bytes
 * written, the current metadata payload, the area), the device bytes
 * written (the stats' io.device_bytes_written; /proc/self/io write_bytes,
 * which counts O_DIRECT writes too, is reported next to it), VmRSS before
 * the open and after the load, the close (a checkpoint), then a reopen in a
 * fresh process (this program, `reopen STORE`, exec'd) timing coil_open —
 * recovery — and its VmRSS, so the reopen's RSS is not inflated by what the
 * load left in this process's heap.  The store file's st_blocks * 512 last.
 *
 * Output: one JSON object on stdout; errors on stderr and exit status 1.
 * STORE must not exist (the caller deletes it afterwards).
 * perf/bench_meta.py runs the sizes and prints the table. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#define BENCH_PROG "bench_meta"
#include "perf/bench_util.h"

#define OBJ_BYTES 100u
/* The blob load's write size: 4 KiB ("blobs"), 64 KiB ("blobs64", the
 * size a store of large objects is made of); each write at its own 64 KiB
 * stride, so each is one blob and one extent. */
#define BLOB_MAX (64u << 10)
#define BLOB_STRIDE (64ull << 10)
static uint32_t blob_bytes = 4096u;
#define SEED 0x5eedc011u

/* ---- /proc ---------------------------------------------------------------- */

static int64_t rss_bytes(void)
{
	int64_t v = proc_field("/proc/self/status", "VmRSS", 1024);

	if (v < 0)
		die("no VmRSS in /proc/self/status");
	return v;
}

/* Bytes this process caused to be sent to the storage layer (all threads;
 * O_DIRECT writes included).  -1 where /proc/self/io is not readable
 * (a kernel without task I/O accounting). */
static int64_t proc_write_bytes(void)
{
	return proc_field("/proc/self/io", "write_bytes", 1);
}

/* ---- stats JSON ------------------------------------------------------------ */

/* A number of a flat one-level JSON object (the reopen child's output). */
static bool flat_num(const char *json, const char *key, double *out)
{
	char pat[128];
	const char *p;
	char *end;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	if (!p)
		return false;
	p += strlen(pat);
	*out = strtod(p, &end);
	return end != p;
}

/* ---- the store ---------------------------------------------------------- */

struct snap {
	uint64_t ckpts, ckpt_bytes, meta_bytes, area_bytes, dev_written;
	uint64_t objects, extents, disk_bytes, journal_bytes;
	uint64_t in_memory_bytes, ckpt_last_ns, logical, stored;
	uint64_t jchunks, jchunk_bytes;
	uint64_t meta_mem; /* stats metadata_memory.bytes */
};

static void snap_take(coil_store *s, struct snap *sn)
{
	char *j = stats_text(s);

	sn->ckpts = need_u64(j, "checkpoint", "count");
	sn->ckpt_bytes = need_u64(j, "checkpoint", "bytes_written");
	sn->meta_bytes = need_u64(j, "checkpoint", "metadata_bytes");
	sn->area_bytes = need_u64(j, "checkpoint", "area_bytes");
	sn->ckpt_last_ns = need_u64(j, "checkpoint", "last_ns");
	sn->dev_written = need_u64(j, "io", "device_bytes_written");
	sn->objects = need_u64(j, "store", "objects");
	sn->extents = need_u64(j, "store", "extents");
	sn->disk_bytes = need_u64(j, "space", "disk_bytes");
	sn->journal_bytes = need_u64(j, "journal", "bytes");
	sn->logical = need_u64(j, "space", "logical");
	sn->jchunks = need_u64(j, "journal", "chunks");
	sn->jchunk_bytes = need_u64(j, "journal", "chunk_bytes");
	sn->stored = need_u64(j, "space", "stored");
	/* small writes the packer has not written out yet: optional */
	if (!json_u64(j, "small_writes", "in_memory_bytes", &sn->in_memory_bytes))
		sn->in_memory_bytes = 0;
	sn->meta_mem = need_u64(j, "metadata_memory", "bytes");
	free(j);
}

static coil_store *store_open(const char *path, unsigned flags)
{
	struct coil_options o;
	coil_store *s = NULL;
	int rc;

	coil_options_init(&o);
	o.flags = flags;
	rc = coil_open(path, &o, &s);
	if (rc < 0)
		die("coil_open %s: %s (%d)", path, coil_strerror(rc), rc);
	return s;
}

/* 100 bytes (or 4 KiB) that compress somewhat: an id, a random half and a
 * repeated half. */
static void fill(uint8_t *buf, size_t len, uint64_t id, uint64_t *rng)
{
	size_t half = len / 2;

	for (size_t i = 0; i < half; i += 8) {
		uint64_t r = xorshift(rng);
		size_t k = half - i < 8 ? half - i : 8;

		memcpy(buf + i, &r, k);
	}
	memset(buf + half, 'a' + (int)(id % 26), len - half);
	memcpy(buf, &id, sizeof(id));
}

/* ---- the two loads ------------------------------------------------------ */

static void load_objects(coil_store *s, uint64_t first, uint64_t n)
{
	uint8_t buf[OBJ_BYTES];
	uint64_t rng = SEED + first;
	char name[64];

	for (uint64_t i = first; i < first + n; i++) {
		coil_obj *o = NULL;
		int64_t w;
		int rc;

		snprintf(name, sizeof(name), "d%03" PRIu64 "/obj%08" PRIu64,
			 i / 1000, i);
		rc = coil_obj_open(s, name, COIL_CREATE | COIL_EXCL, &o);
		if (rc < 0)
			die("coil_obj_open %s: %s (%d)", name, coil_strerror(rc), rc);
		fill(buf, sizeof(buf), i, &rng);
		w = coil_pwrite(o, buf, sizeof(buf), 0);
		if (w != (int64_t)sizeof(buf))
			die_rc(name, w < 0 ? w : -EIO);
		rc = coil_obj_close(o);
		if (rc < 0)
			die_rc("coil_obj_close", rc);
	}
}

/* Blob @k of the blob load: blob_bytes at k * BLOB_STRIDE. */
static void put_blob(coil_obj *o, uint64_t k, uint64_t *rng)
{
	static uint8_t buf[BLOB_MAX];
	int64_t w;

	fill(buf, blob_bytes, k, rng);
	w = coil_pwrite(o, buf, blob_bytes, k * BLOB_STRIDE);
	if (w != (int64_t)blob_bytes)
		die_rc("coil_pwrite", w < 0 ? w : -EIO);
}

static void load_blobs(coil_store *s, uint64_t m)
{
	uint64_t rng = SEED, prng = SEED ^ 0xabcdefull;
	uint32_t *order;
	coil_obj *o = NULL;
	int rc;

	if (m > UINT32_MAX)
		die("M too large");
	order = malloc(m * sizeof(*order));
	if (!order)
		die("out of memory");
	for (uint64_t i = 0; i < m; i++)
		order[i] = (uint32_t)i;
	for (uint64_t i = m; i > 1; i--) { /* Fisher-Yates, fixed seed */
		uint64_t j = xorshift(&prng) % i;
		uint32_t t = order[i - 1];

		order[i - 1] = order[j];
		order[j] = t;
	}
	rc = coil_obj_open(s, "blobs", COIL_CREATE | COIL_EXCL, &o);
	if (rc < 0)
		die_rc("coil_obj_open blobs", rc);
	for (uint64_t i = 0; i < m; i++)
		put_blob(o, order[i], &rng);
	rc = coil_obj_close(o);
	if (rc < 0)
		die_rc("coil_obj_close", rc);
	free(order);
}

/* ---- reopen, in a fresh process ------------------------------------------- */

/* `bench_meta reopen STORE`: time coil_open (journal replay and checkpoint
 * load; a clean close leaves little to replay), VmRSS after it, the
 * close.  Prints a flat JSON object. */
static int cmd_reopen(const char *path)
{
	int64_t rss0 = rss_bytes();
	double t0 = now_s(), t1, t2, t3;
	coil_store *s = store_open(path, 0);
	struct snap sn;
	uint64_t replayed, records, replay_ns, walk_ns, ckpt_ns, tail_read;
	int64_t rss1;
	char *js;
	int rc;

	t1 = now_s();
	rss1 = rss_bytes();
	snap_take(s, &sn);
	js = stats_text(s);
	replayed = need_u64(js, "journal", "replayed_bytes");
	records = need_u64(js, "journal", "replayed_records");
	replay_ns = need_u64(js, "journal", "replay_ns");
	walk_ns = need_u64(js, "journal", "replay_walk_ns");
	/* the unflushed tail's data, read back to verify it */
	tail_read = need_u64(js, "journal", "replay_read_bytes");
	ckpt_ns = need_u64(js, "checkpoint", "load_ns");
	free(js);
	t2 = now_s();
	rc = coil_close(s);
	if (rc < 0)
		die_rc("coil_close (reopen)", rc);
	t3 = now_s();
	printf("{\"open_s\":%.6f,\"rss_base\":%" PRId64 ",\"rss\":%" PRId64
	       ",\"close_s\":%.6f,\"objects\":%" PRIu64 ",\"extents\":%" PRIu64
	       ",\"meta_bytes\":%" PRIu64 ",\"replayed_bytes\":%" PRIu64
	       ",\"replayed_records\":%" PRIu64 ",\"replay_s\":%.6f"
	       ",\"replay_walk_s\":%.6f,\"ckpt_load_s\":%.6f"
	       ",\"replay_tail_read_bytes\":%" PRIu64 "}\n",
	       t1 - t0, rss0, rss1, t3 - t2, sn.objects, sn.extents,
	       sn.meta_bytes, replayed, records, (double)replay_ns * 1e-9,
	       (double)walk_ns * 1e-9, (double)ckpt_ns * 1e-9, tail_read);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* N 4 KiB overwrites of the blobs the blob load wrote (M of them), at
 * random. */
static void overwrite_blobs(coil_store *s, uint64_t m, uint64_t n)
{
	uint64_t rng = SEED ^ 0x5eed, prng = SEED ^ 0x1234ull;
	coil_obj *o = NULL;
	int rc = coil_obj_open(s, "blobs", 0, &o);

	if (rc < 0)
		die_rc("coil_obj_open blobs", rc);
	for (uint64_t i = 0; i < n; i++)
		put_blob(o, xorshift(&prng) % m, &rng);
	rc = coil_obj_close(o);
	if (rc < 0)
		die_rc("coil_obj_close", rc);
}

/* `bench_meta kill STORE FIRST N` (objects: N more from index FIRST) or
 * `bench_meta killblobs STORE M N` (N overwrites of the M blobs;
 * killblobs64: of 64 KiB): then a
 * coil_sync and _exit without closing: the next open replays the journal
 * written since the last checkpoint. */
static int cmd_kill(const char *path, uint64_t first, uint64_t n,
		    bool objects)
{
	coil_store *s = store_open(path, 0);
	int rc;

	if (objects)
		load_objects(s, first, n);
	else
		overwrite_blobs(s, first, n);
	rc = coil_sync(s);
	if (rc < 0)
		die_rc("coil_sync (kill)", rc);
	fflush(stdout);
	_exit(0);
}

/* Run `bench_meta kill` in a new process and wait for it. */
static void kill_child(const char *path, uint64_t first, uint64_t n,
		       bool objects)
{
	char a[32], b[32];
	pid_t pid;
	int status;

	snprintf(a, sizeof(a), "%" PRIu64, first);
	snprintf(b, sizeof(b), "%" PRIu64, n);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		execl("/proc/self/exe", prog,
		      objects ? "kill" :
		      blob_bytes == BLOB_MAX ? "killblobs64" : "killblobs",
		      path, a, b, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("kill run on %s failed (status %d)", path, status);
}

/* Run cmd_reopen in a new process and read its JSON. */
static void reopen_child(const char *path, double *open_s, double *rss,
			 double *rss_base, double *objects, double *extents,
			 double *replayed, double *replay_s,
			 double *tail_read)
{
	int fd[2];
	pid_t pid;
	char out[1024];
	size_t got = 0;
	int status;

	fflush(stdout);
	fflush(stderr);
	if (pipe(fd) < 0)
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(fd[0]);
		if (dup2(fd[1], STDOUT_FILENO) < 0)
			_exit(127);
		close(fd[1]);
		execl("/proc/self/exe", prog, "reopen", path, (char *)NULL);
		fprintf(stderr, "%s: exec /proc/self/exe: %s\n", prog, strerror(errno));
		_exit(127);
	}
	close(fd[1]);
	for (;;) {
		ssize_t r = read(fd[0], out + got, sizeof(out) - 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(out) - 1)
			break;
	}
	out[got] = '\0';
	close(fd[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("reopen of %s failed (status %d)", path, status);
	if (!flat_num(out, "open_s", open_s) || !flat_num(out, "rss", rss) ||
	    !flat_num(out, "rss_base", rss_base) ||
	    !flat_num(out, "objects", objects) ||
	    !flat_num(out, "extents", extents) ||
	    !flat_num(out, "replayed_bytes", replayed) ||
	    !flat_num(out, "replay_s", replay_s) ||
	    !flat_num(out, "replay_tail_read_bytes", tail_read))
		die("reopen printed no JSON: %s", out);
}

/* ---- main ----------------------------------------------------------------- */

static _Noreturn void usage(void)
{
	fprintf(stderr, "usage: %s objects STORE N | blobs STORE M | "
		"blobs64 STORE M\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *mode, *path;
	bool objects;
	uint64_t n;
	char *end;
	struct stat st;
	struct snap s0, s1;
	coil_store *s;
	int64_t rss0, rss_c, rss1, io_c, io1, io2;
	double t0, tc, t1, t2, t3, t4;
	double open_s, rss_open, rss_open_base, r_objects, r_extents;
	double replayed = 0, replay_open_s = 0, replay_s = 0, r_rss, r_rss_base;
	double tail_read = 0;
	uint64_t kill_n = 0;
	int rc;

	if (argc < 2)
		usage();
	mode = argv[1];
	if (strcmp(mode, "reopen") == 0) {
		if (argc != 3)
			usage();
		return cmd_reopen(argv[2]);
	}
	if (strcmp(mode, "killblobs64") == 0) {
		blob_bytes = BLOB_MAX;
		mode = "killblobs";
	}
	if (strcmp(mode, "kill") == 0 || strcmp(mode, "killblobs") == 0) {
		if (argc != 5)
			usage();
		return cmd_kill(argv[2], strtoull(argv[3], NULL, 10),
				strtoull(argv[4], NULL, 10),
				strcmp(mode, "kill") == 0);
	}
	if (argc != 4)
		usage();
	if (strcmp(mode, "objects") == 0)
		objects = true;
	else if (strcmp(mode, "blobs") == 0)
		objects = false;
	else if (strcmp(mode, "blobs64") == 0) {
		objects = false;
		blob_bytes = BLOB_MAX;
	}
	else
		usage();
	path = argv[2];
	errno = 0;
	n = strtoull(argv[3], &end, 10);
	if (errno || *end || n == 0)
		die("bad count '%s'", argv[3]);
	if (stat(path, &st) == 0)
		die("%s exists: a run starts from a new store (remove it first)", path);
	if (errno != ENOENT)
		die("stat %s: %s", path, strerror(errno));

	/* The create (formatting, its first checkpoint, the store's fixed
	 * memory: cache, buffers, rings) is measured apart: every per-op
	 * number below is a difference from the state right after it. */
	rss0 = rss_bytes();
	t0 = now_s();
	s = store_open(path, COIL_CREATE);
	tc = now_s();
	snap_take(s, &s0);
	rss_c = rss_bytes();
	io_c = proc_write_bytes();
	t1 = now_s();
	if (objects)
		load_objects(s, 0, n);
	else
		load_blobs(s, n);
	t2 = now_s();
	rc = coil_sync(s);
	if (rc < 0)
		die_rc("coil_sync", rc);
	t3 = now_s();
	rss1 = rss_bytes();
	io1 = proc_write_bytes();
	snap_take(s, &s1);
	if (s1.objects != (objects ? n : 1))
		die("store holds %" PRIu64 " objects, wrote %" PRIu64, s1.objects,
		    objects ? n : 1);
	rc = coil_close(s);
	if (rc < 0)
		die_rc("coil_close", rc);
	t4 = now_s();
	io2 = proc_write_bytes();

	reopen_child(path, &open_s, &rss_open, &rss_open_base, &r_objects,
		     &r_extents, &replayed, &replay_s, &tail_read);
	if ((uint64_t)r_objects != s1.objects || (uint64_t)r_extents != s1.extents)
		die("reopen sees %.0f objects / %.0f extents, closed with %" PRIu64
		    " / %" PRIu64, r_objects, r_extents, s1.objects, s1.extents);
	if (stat(path, &st) < 0)
		die("stat %s: %s", path, strerror(errno));
	/* Recovery: a tenth more objects (or a tenth of the blobs written
	 * again), synced, and no close; the open after it replays what the
	 * checkpoints had not taken. */
	kill_n = n / 10 ? n / 10 : 1;
	kill_child(path, n, kill_n, objects);
	reopen_child(path, &replay_open_s, &r_rss, &r_rss_base, &r_objects,
		     &r_extents, &replayed, &replay_s, &tail_read);
	if ((uint64_t)r_objects != (objects ? n + kill_n : 1))
		die("after the kill run the store holds %.0f objects",
		    r_objects);

	double load_s = t2 - t1, dn = (double)n;
	uint64_t ckpts = s1.ckpts - s0.ckpts, ckpt_bytes = s1.ckpt_bytes - s0.ckpt_bytes;
	uint64_t dev = s1.dev_written - s0.dev_written;
	int64_t proc_dev = io_c >= 0 && io1 >= 0 ? io1 - io_c : -1;
	int64_t fixed = rss_c - rss0;

	printf("{\"mode\":\"%s\",\"n\":%" PRIu64 ",\"op_bytes\":%u,"
	       "\"ops_s\":%.1f,\"load_s\":%.6f,\"sync_s\":%.6f,"
	       "\"ckpts\":%" PRIu64 ",\"ckpt_bytes\":%" PRIu64
	       ",\"ckpt_bytes_per_op\":%.2f,\"ckpt_last_s\":%.6f,"
	       "\"dev_write_bytes\":%" PRIu64 ",\"dev_write_bytes_per_op\":%.2f,"
	       "\"dev_write_source\":\"stats io.device_bytes_written\","
	       "\"proc_write_bytes\":%" PRId64 ",\"proc_write_bytes_per_op\":%.2f,"
	       "\"journal_chunks\":%" PRIu64 ",\"journal_bytes_per_op\":%.2f,"
	       "\"create_s\":%.6f,\"create_dev_write_bytes\":%" PRIu64 ","
	       "\"create_ckpts\":%" PRIu64 ","
	       "\"close_s\":%.6f,\"close_proc_write_bytes\":%" PRId64 ","
	       "\"rss_before_open\":%" PRId64 ",\"rss_fixed\":%" PRId64 ","
	       "\"rss_bytes\":%" PRId64 ",\"rss_per_obj\":%.2f,"
	       "\"meta_mem_bytes\":%" PRIu64 ",\"meta_mem_per_obj\":%.2f,"
	       "\"open_s\":%.6f,\"rss_open_bytes\":%.0f,"
	       "\"rss_open_per_obj\":%.2f,"
	       "\"meta_bytes\":%" PRIu64 ",\"meta_bytes_per_op\":%.2f,"
	       "\"ckpt_area_bytes\":%" PRIu64 ",\"journal_bytes\":%" PRIu64 ","
	       "\"objects\":%" PRIu64 ",\"extents\":%" PRIu64 ","
	       "\"logical_bytes\":%" PRIu64 ",\"stored_bytes\":%" PRIu64 ","
	       "\"in_memory_bytes\":%" PRIu64 ",\"disk_bytes\":%" PRIu64 ","
	       "\"file_allocated_bytes\":%" PRIu64 ","
	       "\"kill_ops\":%" PRIu64 ",\"replay_open_s\":%.6f,"
	       "\"replayed_bytes\":%.0f,\"replay_s\":%.6f,"
	       "\"replay_s_per_gib\":%.3f,\"replay_tail_read_bytes\":%.0f}\n",
	       objects ? "objects" : mode, n,
	       objects ? OBJ_BYTES : blob_bytes, dn / load_s, load_s, t3 - t2,
	       ckpts, ckpt_bytes, (double)ckpt_bytes / dn,
	       ckpts ? (double)s1.ckpt_last_ns * 1e-9 : 0.0,
	       dev, (double)dev / dn, proc_dev,
	       proc_dev >= 0 ? (double)proc_dev / dn : -1.0,
	       s1.jchunks - s0.jchunks,
	       (double)(s1.jchunk_bytes - s0.jchunk_bytes) / dn,
	       tc - t0, s0.dev_written, s0.ckpts,
	       t4 - t3, io2 >= 0 && io1 >= 0 ? io2 - io1 : -1,
	       rss0, fixed, rss1, (double)(rss1 - rss_c) / dn,
	       s1.meta_mem, (double)(s1.meta_mem - s0.meta_mem) / dn,
	       open_s, rss_open,
	       (rss_open - rss_open_base - (double)fixed) / dn,
	       s1.meta_bytes, (double)s1.meta_bytes / dn, s1.area_bytes,
	       s1.journal_bytes, s1.objects, s1.extents, s1.logical, s1.stored,
	       s1.in_memory_bytes, s1.disk_bytes, (uint64_t)st.st_blocks * 512u,
	       kill_n, replay_open_s, replayed, replay_s,
	       replayed > 0 ? replay_s / (replayed / (1u << 30)) : 0.0,
	       tail_read);
	return fflush(stdout) == 0 ? 0 : 1;
}
