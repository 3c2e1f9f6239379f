/* engine/stats.h — coil_stats_json. */
#ifndef COIL_ENGINE_STATS_H
#define COIL_ENGINE_STATS_H

#include <stddef.h>

struct coil_store;

/* @flags: COIL_STATS_* of coil.h. */
int engine_stats_json(struct coil_store *s, char *buf, size_t len,
		      unsigned flags);

#endif
