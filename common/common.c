#include "common/common.h"

#include <stdio.h>
#include <stdlib.h>
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
