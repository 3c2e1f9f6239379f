/* format/csum.c — the format's one checksum (XXH3-64), used by every
 * on-disk structure and every blob sector.  Its own file because it is the
 * hot one: format/csum_avx2.c is the same function built for AVX2. */
#include "format/format_internal.h"

#include <xxhash.h>

uint64_t fmt_csum(const void *p, size_t len)
{
#ifdef COIL_CSUM_AVX2
	/* The CPU was probed once at load (libgcc's constructor); this is a
	 * load and a test.  Blob checksums are most of coil's hashing: a
	 * 64 KiB blob is 1.2 us with AVX2 and 3.9 with SSE2 here. */
	if (__builtin_cpu_supports("avx2"))
		return fmt_csum_avx2(p, len);
#endif
	return XXH3_64bits(p, len);
}
