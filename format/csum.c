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

/* The streaming form is XXH3's own (its state needs the library's aligned
 * allocation), and its value equals the one-shot hash over the same bytes. */
static XXH3_state_t *st(struct fmt_csum_stream *h)
{
	return (XXH3_state_t *)(void *)h;
}

struct fmt_csum_stream *fmt_csum_stream_new(void)
{
	XXH3_state_t *s = XXH3_createState();

	if (s)
		XXH3_64bits_reset(s);
	return (struct fmt_csum_stream *)(void *)s;
}

void fmt_csum_stream_reset(struct fmt_csum_stream *h)
{
	XXH3_64bits_reset(st(h));
}

void fmt_csum_stream_add(struct fmt_csum_stream *h, const void *p, size_t len)
{
	XXH3_64bits_update(st(h), p, len);
}

uint64_t fmt_csum_stream_value(const struct fmt_csum_stream *h)
{
	return XXH3_64bits_digest((const XXH3_state_t *)(const void *)h);
}

void fmt_csum_stream_free(struct fmt_csum_stream *h)
{
	XXH3_freeState(st(h));
}
