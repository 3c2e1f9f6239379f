/* tests/test_cache_value.c — value buffers and the stash of freed ones
 * (cache/cache_value.c): a freed page-sized value comes back for the next
 * allocation of its size and never for a larger one, the stash stays within
 * its bounds, small values bypass it, and threads turning values over never
 * get a buffer twice. */
#include "cache/cache.h"
#include "common/common.h"

#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void fresh(void)
{
	cache_value_stash_trim();
}

TestSuite(cache_value, .init = fresh, .fini = fresh);

Test(cache_value, a_freed_value_serves_the_next_one_of_its_size)
{
	struct cache_value_stats a, b;
	uint8_t *v = cache_alloc_value(65536), *w;

	cr_assert_not_null(v);
	cr_assert_eq((uintptr_t)v % 4096, 0);
	memset(v, 0x5a, 65536);
	cache_value_stash_stats(&a);
	cache_free_value(v);
	cache_value_stash_stats(&b);
	cr_assert_eq(b.kept, a.kept + 1);
	cr_assert_eq(b.bytes, a.bytes + 65536);

	w = cache_alloc_value(65536);
	cr_assert_eq(w, v, "the stashed buffer is reused");
	cache_value_stash_stats(&a);
	cr_assert_eq(a.reused, b.reused + 1);
	cr_assert_eq(a.bytes, 0);
	cache_free_value(w);
}

Test(cache_value, a_buffer_is_never_handed_out_for_more_than_it_holds)
{
	uint8_t *small = cache_alloc_value(8192), *big;

	cr_assert_not_null(small);
	cache_free_value(small);
	big = cache_alloc_value(65536);
	cr_assert_not_null(big);
	cr_assert_neq(big, small);
	cr_assert_geq(malloc_usable_size(big), 65536);
	/* every byte of it is ours to write (ASan would see an overflow) */
	memset(big, 1, 65536);
	cache_free_value(big);
	/* a length that is not a page multiple rounds up, and reuses the
	 * page-rounded class */
	small = cache_alloc_value(8000);
	cr_assert_not_null(small);
	cr_assert_geq(malloc_usable_size(small), 8192);
	memset(small, 2, 8192);
	cache_free_value(small);
}

Test(cache_value, small_values_bypass_the_stash)
{
	struct cache_value_stats a, b;
	void *v = cache_alloc_value(100);

	cr_assert_not_null(v);
	cache_value_stash_stats(&a);
	cache_free_value(v);
	cache_free_value(NULL);
	cache_value_stash_stats(&b);
	cr_assert_eq(b.kept, a.kept);
	cr_assert_eq(b.bytes, a.bytes);
	cr_assert_null(cache_alloc_value(0));
}

Test(cache_value, the_stash_stays_within_its_bounds)
{
	enum { N = 400 };
	void **v = calloc(N, sizeof(*v));
	struct cache_value_stats st;

	cr_assert_not_null(v);
	for (int i = 0; i < N; i++) {
		v[i] = cache_alloc_value(65536);
		cr_assert_not_null(v[i]);
	}
	for (int i = 0; i < N; i++)
		cache_free_value(v[i]);
	cache_value_stash_stats(&st);
	/* 64 buffers a class and 8 MiB in all */
	cr_assert_leq(st.bytes, 8u << 20);
	cr_assert_leq(st.bytes, 64u * 65536);
	cr_assert_gt(st.dropped, 0);
	/* five lengths for four classes: the fifth passes through */
	cache_value_stash_trim();
	for (int i = 0; i < 5; i++)
		v[i] = cache_alloc_value((size_t)(i + 1) * 4096);
	for (int i = 0; i < 5; i++)
		cache_free_value(v[i]);
	cache_value_stash_stats(&st);
	cr_assert_eq(st.bytes, (1 + 2 + 3 + 4) * 4096u);
	cache_value_stash_trim();
	cache_value_stash_stats(&st);
	cr_assert_eq(st.bytes, 0);
	free(v);
}

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* A stashed buffer stays poisoned until it is handed out again. */
Test(cache_value, a_stashed_buffer_is_poisoned_under_asan)
{
	uint8_t *v = cache_alloc_value(8192);

	cr_assert_not_null(v);
	cache_free_value(v);
	cr_assert(__asan_address_is_poisoned(v));
	cr_assert(__asan_address_is_poisoned(v + 8191));
	v = cache_alloc_value(8192);
	cr_assert(!__asan_address_is_poisoned(v));
	cr_assert(!__asan_address_is_poisoned(v + 8191));
	cache_free_value(v);
}
#endif

struct churn {
	int id;
	int bad;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	uint8_t *held[8] = { 0 };

	for (int i = 0; i < 20000; i++) {
		int k = i % 8;
		size_t len = (size_t)(1 + (i * 7 + c->id) % 16) * 4096;

		if (held[k]) {
			/* still holds what we wrote: nobody else got it */
			if (held[k][0] != (uint8_t)c->id ||
			    held[k][4095] != (uint8_t)c->id)
				c->bad++;
			cache_free_value(held[k]);
		}
		held[k] = cache_alloc_value(len);
		if (!held[k]) {
			c->bad++;
			continue;
		}
		memset(held[k], c->id, len);
	}
	for (int k = 0; k < 8; k++)
		cache_free_value(held[k]);
	return NULL;
}

Test(cache_value, threads_turning_values_over_never_share_one)
{
	pthread_t t[4];
	struct churn c[4];

	for (int i = 0; i < 4; i++) {
		c[i] = (struct churn){ .id = i + 1 };
		cr_assert_eq(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(c[i].bad, 0, "thread %d saw another's bytes", i + 1);
	}
}
