/* Page-mapped buffers (common.h, coil_pages_resize/coil_pages_free): what
 * a resize keeps, that a freed buffer's pages leave the process at once
 * (why checkpoints use them), and the poisoned tail under ASan. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifdef T_ASAN
#include <sanitizer/asan_interface.h>
#endif

static long rss_pages(void)
{
	long size = 0, rss = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%ld %ld", &size, &rss), 2);
	fclose(f);
	return rss;
}

Test(pages, resize_keeps_the_bytes_before_it)
{
	size_t len = 100, big = (3u << 20) + 7;
	uint8_t *p = coil_pages_resize(NULL, 0, len);

	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % 4096, 0, "a new buffer is page aligned");
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(p[i], 0);
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 7 + 1);
	p = coil_pages_resize(p, len, big);
	cr_assert_not_null(p);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(p[i], (uint8_t)(i * 7 + 1), "byte %zu", i);
	for (size_t i = len; i < big; i += 4093)
		cr_assert_eq(p[i], 0, "byte %zu of the grown part", i);
	memset(p + len, 0xa5, big - len);
	p = coil_pages_resize(p, big, 50);
	cr_assert_not_null(p);
	for (size_t i = 0; i < 50; i++)
		cr_assert_eq(p[i], (uint8_t)(i * 7 + 1));
	coil_pages_free(p, 50);
	coil_pages_free(NULL, 0);
}

/* The point of them: an allocator keeps a freed block's pages; these go. */
Test(pages, freed_pages_leave_the_process)
{
	size_t len = 16u << 20;
	long pg = sysconf(_SC_PAGESIZE), before, touched, after;
	uint8_t *p;

	before = rss_pages();
	p = coil_pages_resize(NULL, 0, len);
	cr_assert_not_null(p);
	memset(p, 1, len);
	touched = rss_pages();
	cr_assert_geq(touched - before, (long)(len / 2) / pg,
		      "touching 16 MiB added %ld pages", touched - before);
	coil_pages_free(p, len);
	after = rss_pages();
	cr_assert_leq(after, touched - (long)(len / 2) / pg,
		      "freeing 16 MiB left %ld of %ld pages", after - before,
		      touched - before);
}

#ifdef T_ASAN
Test(pages, the_tail_past_the_length_is_poisoned)
{
	uint8_t *p = coil_pages_resize(NULL, 0, 1000);

	cr_assert_not_null(p);
	cr_assert_not(__asan_address_is_poisoned(p + 999));
	cr_assert(__asan_address_is_poisoned(p + 1000));
	cr_assert(__asan_address_is_poisoned(p + 4095));
	p = coil_pages_resize(p, 1000, 5000);
	cr_assert_not_null(p);
	cr_assert_not(__asan_address_is_poisoned(p + 1000));
	cr_assert_not(__asan_address_is_poisoned(p + 4999));
	cr_assert(__asan_address_is_poisoned(p + 5000));
	coil_pages_free(p, 5000);
}
#endif
