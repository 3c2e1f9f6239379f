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

static size_t pages_len(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (len + pg - 1) / pg * pg;
}

void *coil_pages_resize(void *p, size_t old, size_t len)
{
	void *q;

	if (!p)
		q = mmap(NULL, pages_len(len), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	else
		q = mremap(p, pages_len(old), pages_len(len), MREMAP_MAYMOVE);
	return q == MAP_FAILED ? NULL : q;
}

void coil_pages_free(void *p, size_t len)
{
	if (p)
		munmap(p, pages_len(len));
}
