/* tests/test_engine_prefetch.c — readahead wired into reads: sequential
 * reads are served by prefetch, the report's counters add up, cancellation
 * races (close while in flight), failures reach the demand read. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
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

Test(engine_prefetch, sequential_reads_are_prefetched)
{
	char path[256], js[8192];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 4u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	et_path(path, sizeof(path), "pf-seq");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(src, n, 3, 1);
	cr_assert_eq(coil_obj_open(s, "seq", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "seq", 0, &h), 0);
	for (size_t off = 0; off < n; off += 16384)
		cr_assert_eq(coil_pread(h, dst + off, 16384, off), 16384);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"report\"", "completed"), 40, "%s", js);
	cr_assert_gt(json_u64(js, "\"report\"", "ready_before_demand"), 40, "%s", js);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}
