/* engine/stats.h — coil_stats_json. */
#ifndef COIL_ENGINE_STATS_H
#define COIL_ENGINE_STATS_H

#include <stddef.h>

struct coil_store;

/* @flags: COIL_STATS_* of coil.h.  The text is built once, in a buffer
 * that grows as it is written: *@text (the caller frees it) holds the
 * whole of it, whatever other threads change meanwhile.  @return its
 * length, -ENOMEM, -EIO, -EOVERFLOW or the shared-space walk's error. */
int engine_stats_json_text(struct coil_store *s, unsigned flags,
			   char **text);
/* The same text copied into @buf (cut at @len - 1 bytes, NUL-terminated
 * when @len > 0).  @return its whole length, as engine_stats_json_text. */
int engine_stats_json(struct coil_store *s, char *buf, size_t len,
		      unsigned flags);

#endif
