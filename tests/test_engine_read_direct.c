/* tests/test_engine_read_direct.c — a compressed blob a read wants whole is
 * decoded straight into the caller's buffer, also with a cache and with
 * readahead on (a demand hooked on a prefetch job still in I/O adopts the
 * blob): the bytes are exact, partial reads still go through the cache,
 * a failed prefetch still reaches an adopting read as its error, and
 * whole-blob readers racing whole-blob overwriters never see a torn or
 * stale blob. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
#include "engine_test_util.h"
#include "uring/uring_fault.h"
#include "tests/test_util.h"

#define BLOB 65536u

static coil_store *make_store(const char *name, char *path, size_t plen,
			      struct coil_options *o, uint8_t *src, size_t n)
{
	coil_store *s;

	et_path(path, plen, name);
	et_opts(o, path);
	o->compression = "zstd:1";
	et_fill(src, n, 7, 1);
	et_write_closed(path, o, "d", src, n);
	cr_assert_eq(coil_open(path, o, &s), 0); /* cold */
	return s;
}

struct win {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int inflight;
	int bad;
};

struct op {
	struct win *w;
	int64_t want;
};

static void op_done(void *arg, int64_t res)
{
	struct op *op = arg;
	struct win *w = op->w;

	pthread_mutex_lock(&w->mu);
	if (res != op->want)
		w->bad++;
	w->inflight--;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* Read [0, n) in @bs requests, @qd at a time, like the codec benchmark. */
static int read_async(coil_obj *h, uint8_t *dst, size_t n, size_t bs, int qd)
{
	struct win w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			 0, 0 };
	struct op *ops = calloc(n / bs + 1, sizeof(*ops));
	size_t i = 0;

	cr_assert(ops);
	for (size_t off = 0; off < n; off += bs, i++) {
		pthread_mutex_lock(&w.mu);
		while (w.inflight >= qd)
			pthread_cond_wait(&w.cv, &w.mu);
		w.inflight++;
		pthread_mutex_unlock(&w.mu);
		ops[i].w = &w;
		ops[i].want = (int64_t)(n - off < bs ? n - off : bs);
		cr_assert_eq(coil_read(h, dst + off, (size_t)ops[i].want, off,
				       op_done, &ops[i]), 0);
	}
	pthread_mutex_lock(&w.mu);
	while (w.inflight)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	free(ops);
	return w.bad;
}

Test(engine_read_direct, whole_blob_reads_exact_with_readahead, .timeout = 60)
{
	char path[256], js[16384];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 8u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	s = make_store("rd-seq", path, sizeof(path), &o, src, n);
	for (int round = 0; round < 3; round++) {
		/* 1 MiB requests at QD 4, and 64 KiB ones at QD 8 */
		size_t bs = round == 1 ? BLOB : 1u << 20;

		memset(dst, 0xa5, n);
		cr_assert_eq(coil_obj_open(s, "d", 0, &h), 0);
		cr_assert_eq(read_async(h, dst, n, bs, round == 1 ? 8 : 4), 0);
		cr_assert(memcmp(src, dst, n) == 0, "round %d", round);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"io\"", "checksum_failures"), 0, "%s", js);
	cr_assert_gt(json_u64(js, "\"readahead\"", "sequential_reads"), 100,
		     "%s", js);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

Test(engine_read_direct, partial_reads_still_cached_whole_ones_not, .timeout = 60)
{
	char path[256], js[16384];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	uint64_t ins;

	s = make_store("rd-part", path, sizeof(path), &o, src, n);
	cr_assert_eq(coil_obj_open(s, "d", 0, &h), 0);
	/* random whole blobs, no readahead run: decoded into dst, and
	 * nothing enters the cache */
	for (int i = 0; i < 16; i++) {
		uint64_t b = (uint64_t)(i * 7) % 16;

		memset(dst, 0, BLOB);
		cr_assert_eq(coil_pread(h, dst, BLOB, b * BLOB), BLOB);
		cr_assert(memcmp(dst, src + b * BLOB, BLOB) == 0);
	}
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	ins = json_u64(js, "\"cache\"", "inserts");
	cr_assert_eq(ins, 0, "%s", js);
	/* a partial read of a blob decodes it into the cache; the next
	 * partial read of the same blob is a hit */
	cr_assert_eq(coil_pread(h, dst, 4096, 5 * BLOB + 8192), 4096);
	cr_assert(memcmp(dst, src + 5 * BLOB + 8192, 4096) == 0);
	cr_assert_eq(coil_pread(h, dst, 4096, 5 * BLOB + 40960), 4096);
	cr_assert(memcmp(dst, src + 5 * BLOB + 40960, 4096) == 0);
	/* and a whole read of a cached blob is served by the cache */
	cr_assert_eq(coil_pread(h, dst, BLOB, 5 * BLOB), BLOB);
	cr_assert(memcmp(dst, src + 5 * BLOB, BLOB) == 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"cache\"", "inserts"), 1, "%s", js);
	cr_assert_geq(json_u64(js, "\"cache\"", "hits"), 2, "%s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

Test(engine_read_direct, failed_prefetch_reaches_adopting_read, .timeout = 60)
{
	char path[256];
	struct coil_options o;
	struct uring_fault_spec f;
	coil_store *s;
	coil_obj *h;
	size_t n = 2u << 20;
	uint8_t *src = malloc(n), *dst = malloc(BLOB);
	int64_t got;

	s = make_store("rd-fail", path, sizeof(path), &o, src, n);
	cr_assert_eq(coil_obj_open(s, "d", 0, &h), 0);
	for (int i = 0; i < 8; i++) {
		uint64_t b = 3 + (uint64_t)i * 3;

		/* the hint's job reads blob b and that read fails; the whole
		 * blob demand right after waits for the job (or takes its
		 * retained failure): -EIO either way, once */
		memset(&f, 0, sizeof(f));
		f.fail_kind = URING_OP_READ;
		f.fail_nth = 1;
		f.fail_errno = EIO;
		cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
		cr_assert_eq(coil_prefetch(h, b * BLOB, BLOB), 0);
		got = coil_pread(h, dst, BLOB, b * BLOB);
		cr_assert_eq(got, -EIO, "blob %llu: demand read got %lld",
			     (unsigned long long)b, (long long)got);
		cr_assert_eq(coil_pread(h, dst, BLOB, b * BLOB), BLOB);
		cr_assert(memcmp(dst, src + b * BLOB, BLOB) == 0);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Writers overwrite whole blobs with versioned contents; readers with their
 * own handles (readahead on) read whole blobs and 1 MiB runs: every blob
 * read must be one version, whole, and not older than the version
 * completed before the read began. */
#define NB 32u
static coil_store *rc_s;
static _Atomic uint32_t rc_done[NB];
static atomic_bool rc_stop;
static _Atomic long rc_bad;

static void blob_fill(uint8_t *p, uint32_t b, uint32_t ver)
{
	for (uint32_t i = 0; i < BLOB; i += 8) {
		uint32_t w[2] = { b, ver };

		/* compressible, so the blob is stored zstd */
		memcpy(p + i, w, 8);
	}
}

static int blob_check(const uint8_t *p, uint32_t b, uint32_t min_ver)
{
	uint32_t w[2];

	memcpy(w, p, 8);
	if (w[0] != b || w[1] < min_ver)
		return -1;
	for (uint32_t i = 8; i < BLOB; i += 8)
		if (memcmp(p + i, p, 8) != 0)
			return -1;
	return 0;
}

static void *rc_writer(void *arg)
{
	uint8_t *buf = malloc(BLOB);
	uint64_t x = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
	coil_obj *h;

	cr_assert_eq(coil_obj_open(rc_s, "v", 0, &h), 0);
	while (!atomic_load(&rc_stop)) {
		uint32_t b, ver;

		tu_xorshift(&x);
		b = x % NB;
		/* one writer per blob parity: versions of a blob only grow */
		b = (b & ~1u) | ((uint32_t)(uintptr_t)arg & 1u);
		ver = atomic_load(&rc_done[b]) + 1;
		blob_fill(buf, b, ver);
		if (coil_pwrite(h, buf, BLOB, (uint64_t)b * BLOB) != BLOB)
			atomic_fetch_add(&rc_bad, 1);
		atomic_store(&rc_done[b], ver);
	}
	coil_obj_close(h);
	free(buf);
	return NULL;
}

static void *rc_reader(void *arg)
{
	uint8_t *buf = malloc(NB * BLOB);
	uint32_t min[NB];
	int rounds = 0;

	(void)arg;
	while (!atomic_load(&rc_stop) || rounds < 2) {
		coil_obj *h;

		if (coil_obj_open(rc_s, "v", 0, &h) != 0) {
			atomic_fetch_add(&rc_bad, 1);
			break;
		}
		/* sequential whole blobs (readahead starts), then 1 MiB runs */
		for (uint32_t b = 0; b < NB; b++) {
			uint32_t m = atomic_load(&rc_done[b]);

			if (coil_pread(h, buf, BLOB, (uint64_t)b * BLOB) != BLOB ||
			    blob_check(buf, b, m) != 0)
				atomic_fetch_add(&rc_bad, 1);
		}
		for (uint32_t b0 = 0; b0 < NB; b0 += 16) {
			for (uint32_t b = 0; b < 16; b++)
				min[b] = atomic_load(&rc_done[b0 + b]);
			if (coil_pread(h, buf, 16 * BLOB, (uint64_t)b0 * BLOB) !=
			    16 * BLOB) {
				atomic_fetch_add(&rc_bad, 1);
				continue;
			}
			for (uint32_t b = 0; b < 16; b++)
				if (blob_check(buf + (size_t)b * BLOB, b0 + b,
					       min[b]) != 0)
					atomic_fetch_add(&rc_bad, 1);
		}
		coil_obj_close(h);
		rounds++;
	}
	free(buf);
	return NULL;
}

Test(engine_read_direct, whole_blob_readers_vs_overwriters, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	pthread_t w[2], r[3];
	uint8_t *buf = malloc(BLOB);
	coil_obj *h;

	et_path(path, sizeof(path), "rd-race");
	et_opts(&o, path);
	o.compression = "zstd:1";
	o.cache_bytes = 1u << 20;
	cr_assert_eq(coil_open(path, &o, &rc_s), 0);
	cr_assert_eq(coil_obj_open(rc_s, "v", COIL_CREATE, &h), 0);
	for (uint32_t b = 0; b < NB; b++) {
		blob_fill(buf, b, 0);
		cr_assert_eq(coil_pwrite(h, buf, BLOB, (uint64_t)b * BLOB), BLOB);
		atomic_store(&rc_done[b], 0);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	atomic_store(&rc_stop, false);
	atomic_store(&rc_bad, 0);
	for (uintptr_t i = 0; i < 2; i++)
		pthread_create(&w[i], NULL, rc_writer, (void *)i);
	for (uintptr_t i = 0; i < 3; i++)
		pthread_create(&r[i], NULL, rc_reader, NULL);
	usleep(3 * 1000 * 1000);
	atomic_store(&rc_stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(r[i], NULL);
	cr_assert_eq(atomic_load(&rc_bad), 0);
	cr_assert_eq(coil_close(rc_s), 0);
	unlink(path);
	free(buf);
}
