/* engine/stats.h — coil_stats_json. */
#ifndef COIL_ENGINE_STATS_H
#define COIL_ENGINE_STATS_H

#include <stddef.h>

struct coil_store;

int engine_stats_json(struct coil_store *s, char *buf, size_t len);

#endif
