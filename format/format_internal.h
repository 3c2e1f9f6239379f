/* format/format_internal.h — helpers shared by format/'s own files only. */
#ifndef COIL_FORMAT_INTERNAL_H
#define COIL_FORMAT_INTERNAL_H

#include "format/format.h"

#include <stdbool.h>


/* Object names: 1..255 bytes, no NUL. */
static inline int fmt_name_ok(const char *name, size_t len)
{
	return name && len >= 1 && len <= FMT_NAME_MAX && !memchr(name, 0, len);
}

/* fmt_cursor_get_extent; @inl_csum false: an inline blob's checksums are
 * not computed again (its bytes were checked before, in memory since). */
int fmt_cursor_get_extent_as(struct fmt_cursor *c, struct fmt_extent *e,
			     bool inl_csum);

#ifdef COIL_CSUM_AVX2
/* format/csum_avx2.c: fmt_csum's AVX2 build, same values. */
uint64_t fmt_csum_avx2(const void *p, size_t len);
#endif

#endif
