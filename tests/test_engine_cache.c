/* tests/test_engine_cache.c — the decoded-blob cache in the read path:
 * re-reads hit it, it never serves stale bytes under concurrent overwrites,
 * its budget holds, and the stats report it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "coil.h"
#include "engine/engine.h"
#include "engine_test_util.h"

static uint64_t json_u64(const char *js, const char *section, const char *key)
{
	const char *p = strstr(js, section);
	char pat[96];

	cr_assert(p, "no %s in %s", section, js);
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(p, pat);
	cr_assert(p, "no %s in %s", key, js);
	return strtoull(p + strlen(pat), NULL, 10);
}

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

	et_fill(src, n, 7, 1);
	cr_assert_eq(coil_obj_open(s, "a", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	for (int pass = 0; pass < 3; pass++) {
		for (size_t off = 0; off < n; off += 4096) {
			cr_assert_eq(coil_pread(h, dst + off, 4096, off), 4096);
		}
		cr_assert(memcmp(src, dst, n) == 0, "pass %d", pass);
	}
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	/* compressible half of the blobs decodes once, then hits */
	cr_assert_gt(json_u64(js, "\"cache\"", "hits"), 0, "%s", js);
	cr_assert_gt(json_u64(js, "\"cache\"", "inserts"), 0, "%s", js);
	cr_assert_eq(json_u64(js, "\"cache\"", "bytes_max"), 8u << 20);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}
