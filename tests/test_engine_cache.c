/* tests/test_engine_cache.c — the decoded-blob cache in the read path:
 * re-reads hit it, it never serves stale bytes under concurrent overwrites
 * and truncates, its budget holds, and coil_stats_json reports it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
#include "engine/store.h"
#include "engine_test_util.h"

static coil_store *open_store(const char *name, char *path, size_t plen,
			      uint64_t cache_bytes, unsigned prefetch)
{
	struct coil_options o;
	coil_store *s = NULL;

	et_path(path, plen, name);
	et_opts(&o, path);
	o.cache_bytes = cache_bytes;
	o.prefetch = prefetch;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	return s;
}

Test(engine_cache, reread_hits_and_is_exact)
{
	char path[256], js[8192];
	coil_store *s = open_store("cache-hit", path, sizeof(path), 8u << 20, 0);
	coil_obj *h;
	size_t n = 512u << 10;
	uint8_t *src = malloc(n), *dst = malloc(n);
	uint64_t misses1;

	et_fill(src, n, 7, 1);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	for (int pass = 0; pass < 3; pass++) {
		memset(dst, 0xee, n);
		for (size_t off = 0; off < n; off += 4096)
			cr_assert_eq(coil_pread(h, dst + off, 4096, off), 4096);
		cr_assert(memcmp(src, dst, n) == 0, "pass %d", pass);
		cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
		if (pass == 0)
			misses1 = json_u64(js, "\"cache\"", "misses");
		else /* every compressed blob stayed cached: no new miss */
			cr_assert_eq(json_u64(js, "\"cache\"", "misses"), misses1,
				     "%s", js);
	}
	cr_assert_gt(json_u64(js, "\"cache\"", "hits"), 0, "%s", js);
	cr_assert_gt(json_u64(js, "\"cache\"", "inserts"), 0, "%s", js);
	cr_assert_eq(json_u64(js, "\"cache\"", "bytes_max"), 8u << 20);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

Test(engine_cache, off_reports_zero_and_reads_exact)
{
	char path[256], js[8192];
	coil_store *s = open_store("cache-off", path, sizeof(path), 0, 1);
	coil_obj *h;
	size_t n = 256u << 10;
	uint8_t *src = malloc(n), *dst = malloc(n);

	et_fill(src, n, 9, 1);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	for (size_t off = 0; off < n; off += 16384)
		cr_assert_eq(coil_pread(h, dst + off, 16384, off), 16384);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_prefetch(h, 0, n), 0); /* dropped: no cache */
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"cache\"", "hits"), 0);
	cr_assert_eq(json_u64(js, "\"cache\"", "bytes_max"), 0);
	cr_assert(strstr(js, "\"enabled\":false"), "%s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* A part of a compressed blob is decoded into a cache value; when that
 * allocation fails the read decodes into a pool buffer instead, which the
 * cache must never take (it would free() a slice of the pool later). */
Test(engine_cache, failed_value_allocation_reads_and_caches_nothing)
{
	char path[256], js[8192];
	coil_store *s = open_store("cache-nomem", path, sizeof(path), 8u << 20, 0);
	coil_obj *h;
	size_t n = 64u << 10;
	uint8_t *src = malloc(n), *dst = malloc(n);

	et_fill(src, n, 11, 1);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	atomic_store(&s->fault_value_alloc, true);
	for (size_t off = 0; off < n; off += 4096)
		cr_assert_eq(coil_pread(h, dst + off, 4096, off), 4096);
	atomic_store(&s->fault_value_alloc, false);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"compression\"", "blobs_zstd"), 0, "%s", js);
	cr_assert_eq(json_u64(js, "\"cache\"", "inserts"), 0, "%s", js);
	/* with the allocator back, a read fills the cache as usual */
	cr_assert_eq(coil_pread(h, dst, 4096, 0), 4096);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"cache\"", "inserts"), 1, "%s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Budget: a 1 MiB cache read through 8 MiB of data many times, with the
 * charged bytes sampled after every read. */
Test(engine_cache, budget_never_exceeded)
{
	char path[256], js[8192];
	coil_store *s = open_store("cache-budget", path, sizeof(path), 1u << 20, 1);
	coil_obj *h;
	size_t n = 8u << 20;
	uint8_t *src = malloc(n), *dst = malloc(65536);
	uint64_t x = 5, peak = 0;

	et_fill(src, n, 11, 1);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	for (int i = 0; i < 600; i++) {
		uint64_t off, len;

		tu_xorshift(&x);
		off = x % (n - 65536);
		len = 1 + (x >> 40) % 65536;
		if (i % 100 < 30) /* sequential stretches feed readahead */
			off = (uint64_t)(i % 100) * 65536;
		cr_assert_eq(coil_pread(h, dst, len, off), (int64_t)len);
		cr_assert(memcmp(dst, src + off, len) == 0, "read %d", i);
		cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
		uint64_t b = json_u64(js, "\"cache\"", "bytes");
		cr_assert_leq(b, 1u << 20, "charged %llu > budget",
			      (unsigned long long)b);
		peak = b > peak ? b : peak;
	}
	cr_assert_gt(peak, 256u << 10, "the cache was used");
	cr_assert_gt(json_u64(js, "\"cache\"", "evictions"), 0, "%s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Never stale.  Writers overwrite 64 KiB blobs with versioned contents
 * (every 4 KiB block carries the blob, the version and a pattern derived
 * from both); readers read random ranges, and every block they get must be
 * self-consistent and at least the version whose write had completed
 * before the read began.  Readers use their own handles (with readahead),
 * and one of them also truncates-and-restores nothing: truncates are
 * covered by the test below. */
#define NS_BLOBS 32u
#define NS_BLOB 65536u

static _Atomic uint32_t ns_done[NS_BLOBS];   /* newest completed version */
static _Atomic int ns_stop;
static _Atomic uint64_t ns_checked, ns_errors;
static coil_store *ns_store;

static void ns_fill(uint8_t *p, uint32_t blob, uint32_t ver)
{
	for (uint32_t b = 0; b < NS_BLOB / 4096; b++) {
		uint8_t *q = p + b * 4096;
		uint32_t hdr[4] = { 0xC011CAFE, blob, ver, b };

		memcpy(q, hdr, sizeof(hdr));
		for (uint32_t i = sizeof(hdr); i < 4096; i++) /* compressible */
			q[i] = (uint8_t)((blob * 7 + ver * 13 + i / 64) & 0xff);
	}
}

static bool ns_check(const uint8_t *q, uint32_t blob, uint32_t blk,
		     uint32_t min_ver)
{
	uint32_t hdr[4];

	memcpy(hdr, q, sizeof(hdr));
	if (hdr[0] != 0xC011CAFE || hdr[1] != blob || hdr[3] != blk ||
	    hdr[2] < min_ver)
		return false;
	for (uint32_t i = sizeof(hdr); i < 4096; i++)
		if (q[i] != (uint8_t)((blob * 7 + hdr[2] * 13 + i / 64) & 0xff))
			return false;
	return true;
}

static void *ns_writer(void *arg)
{
	coil_obj *h;
	uint8_t *buf = malloc(NS_BLOB);
	uint64_t x = (uintptr_t)arg + 1;

	if (coil_obj_open(ns_store, "ns", 0, &h) != 0) {
		atomic_fetch_add(&ns_errors, 1);
		free(buf);
		return NULL;
	}
	while (!atomic_load(&ns_stop)) {
		uint32_t blob, ver;

		tu_xorshift(&x);
		blob = (uint32_t)(x % NS_BLOBS);
		/* one writer per blob parity, so versions of a blob rise */
		if (blob % 2 != (uint32_t)(uintptr_t)arg)
			continue;
		ver = atomic_load(&ns_done[blob]) + 1;
		ns_fill(buf, blob, ver);
		if (coil_pwrite(h, buf, NS_BLOB, (uint64_t)blob * NS_BLOB) !=
		    NS_BLOB)
			atomic_fetch_add(&ns_errors, 1);
		atomic_store(&ns_done[blob], ver);
	}
	coil_obj_close(h);
	free(buf);
	return NULL;
}

static void *ns_reader(void *arg)
{
	coil_obj *h;
	uint8_t *buf = malloc(4 * NS_BLOB);
	uint64_t x = (uintptr_t)arg * 977 + 3;

	if (coil_obj_open(ns_store, "ns", 0, &h) != 0) {
		atomic_fetch_add(&ns_errors, 1);
		free(buf);
		return NULL;
	}
	while (!atomic_load(&ns_stop)) {
		uint32_t first, nblk, minv[NS_BLOBS];
		uint64_t off;

		tu_xorshift(&x);
		/* runs of sequential 16 KiB reads (readahead) and random
		 * reads of 4 KiB .. 64 KiB */
		first = (uint32_t)(x % (NS_BLOBS * 16 - 16));
		nblk = 1 + (uint32_t)((x >> 32) % 16);
		for (uint32_t b = 0; b < NS_BLOBS; b++)
			minv[b] = atomic_load(&ns_done[b]);
		off = (uint64_t)first * 4096;
		for (uint32_t step = 0; step < ((x >> 50) % 2 ? 8 : 1); step++) {
			uint64_t o2 = off + (uint64_t)step * nblk * 4096;
			if (o2 + nblk * 4096ull > (uint64_t)NS_BLOBS * NS_BLOB)
				break;
			if (coil_pread(h, buf, nblk * 4096, o2) != nblk * 4096) {
				atomic_fetch_add(&ns_errors, 1);
				continue;
			}
			for (uint32_t k = 0; k < nblk; k++) {
				uint32_t blk = (uint32_t)(o2 / 4096) + k;
				uint32_t blob = blk / 16;
				if (!ns_check(buf + k * 4096, blob, blk % 16,
					      minv[blob]))
					atomic_fetch_add(&ns_errors, 1);
				atomic_fetch_add(&ns_checked, 1);
			}
		}
	}
	coil_obj_close(h);
	free(buf);
	return NULL;
}

Test(engine_cache, never_stale_under_concurrent_overwrites, .timeout = 120)
{
	char path[256], js[8192];
	coil_obj *h;
	pthread_t w[2], r[3];
	uint8_t *buf = malloc(NS_BLOB);

	/* a cache smaller than the object, so entries come and go */
	ns_store = open_store("cache-stale", path, sizeof(path), 1u << 20, 1);
	cr_assert_eq(coil_obj_open(ns_store, "ns", COIL_CREATE, &h), 0);
	for (uint32_t b = 0; b < NS_BLOBS; b++) {
		ns_fill(buf, b, 1);
		cr_assert_eq(coil_pwrite(h, buf, NS_BLOB, (uint64_t)b * NS_BLOB),
			     NS_BLOB);
		atomic_store(&ns_done[b], 1);
	}
	atomic_store(&ns_stop, 0);
	for (uintptr_t i = 0; i < 2; i++)
		pthread_create(&w[i], NULL, ns_writer, (void *)i);
	for (uintptr_t i = 0; i < 3; i++)
		pthread_create(&r[i], NULL, ns_reader, (void *)i);
	usleep(2500 * 1000);
	atomic_store(&ns_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(r[i], NULL);
	cr_assert_eq(atomic_load(&ns_errors), 0, "stale or wrong blocks: %llu",
		     (unsigned long long)atomic_load(&ns_errors));
	cr_assert_gt(atomic_load(&ns_checked), 1000);
	cr_assert(coil_stats_json(ns_store, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"cache\"", "hits"), 0, "%s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(ns_store), 0);
	unlink(path);
	free(buf);
}

/* Truncate and rewrite: a cached blob of the old contents must never come
 * back through the new extents, including after its segment is reused. */
Test(engine_cache, truncate_rewrite_and_segment_reuse_never_stale,
     .timeout = 120)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 2u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	et_path(path, sizeof(path), "cache-trunc");
	et_opts(&o, path);
	o.size = 24ull << 20; /* small: segments are reused across rounds */
	o.cache_bytes = 16u << 20;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "t", COIL_CREATE, &h), 0);
	for (int round = 0; round < 24; round++) {
		et_fill(src, n, 100 + (uint64_t)round, 1);
		cr_assert_eq(coil_obj_truncate(h, 0), 0);
		cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
		/* read it all (sequential: readahead and cache fill) */
		for (size_t off = 0; off < n; off += 16384)
			cr_assert_eq(coil_pread(h, dst + off, 16384, off), 16384);
		cr_assert(memcmp(src, dst, n) == 0, "round %d", round);
		/* overwrite the middle, read across it */
		et_fill(src + n / 2, 65536 * 3, 999 + (uint64_t)round, 1);
		cr_assert_eq(coil_pwrite(h, src + n / 2, 65536 * 3, n / 2),
			     65536 * 3);
		cr_assert_eq(coil_pread(h, dst, n, 0), (int64_t)n);
		cr_assert(memcmp(src, dst, n) == 0, "round %d (overwrite)", round);
		if (round % 6 == 5)
			cr_assert_eq(coil_sync(s), 0);
	}
	{
		char js[8192];

		/* whole blobs dropped by truncate/overwrite left the cache
		 * early (memory only: their keys are unreachable anyway) */
		cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
		cr_assert_gt(json_u64(js, "\"cache\"", "invalidations"), 0,
			     "%s", js);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}
