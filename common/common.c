#include "common/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void coil_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "coil: assertion failed: %s (%s:%d)\n", expr, file, line);
	abort();
}

unsigned coil_ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

/* Under AddressSanitizer the bytes past the length asked for, to the end
 * of the last page, are poisoned: an overrun there is reported as it
 * would be past a malloc'd block. */
#if defined(__SANITIZE_ADDRESS__)
#define PAGES_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAGES_ASAN 1
#endif
#endif
#ifdef PAGES_ASAN
#include <sanitizer/asan_interface.h>
#define PAGES_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define PAGES_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define PAGES_POISON(p, n) ((void)(p), (void)(n))
#define PAGES_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static size_t pages_len(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (COIL_MAX(len, 1) + pg - 1) / pg * pg;
}

void *coil_pages_resize(void *p, size_t old, size_t len)
{
	void *q;

	if (p)
		PAGES_UNPOISON(p, pages_len(old));
	if (!p)
		q = mmap(NULL, pages_len(len), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	else
		q = mremap(p, pages_len(old), pages_len(len), MREMAP_MAYMOVE);
	if (q == MAP_FAILED) {
		if (p)
			PAGES_POISON((char *)p + old, pages_len(old) - old);
		return NULL;
	}
	PAGES_POISON((char *)q + len, pages_len(len) - len);
	return q;
}

void coil_pages_free(void *p, size_t len)
{
	if (!p)
		return;
	PAGES_UNPOISON(p, pages_len(len));
	munmap(p, pages_len(len));
}
