/* engine/optimize.h — coil_optimize's dictionary training (the entry
 * point is coil_optimize in optimize.c; the encoder and its counters are
 * io/recode.h). */
#ifndef COIL_ENGINE_OPTIMIZE_H
#define COIL_ENGINE_OPTIMIZE_H

#include <stdint.h>

struct coil_store;

/* What a round of dictionary training did. */
struct dict_stats {
	uint64_t trained;   /* candidate dictionaries trained */
	uint64_t rejected;  /* of them, not kept (not worth their bytes) */
	uint64_t made;      /* stored and in use */
	uint64_t bytes;     /* their bytes */
};

/* Train candidate dictionaries for each cohort (the first component of
 * object names) of at least a few MiB that has none, from a tenth of its
 * bytes (at most 8 MiB), and keep up to DICT_POOL_MAX of them, chosen
 * greedily by what each saves at @level beyond those chosen before it,
 * each kept only if that projected saving is more than twice its own
 * bytes: stored as internal objects, made durable, used by the passes
 * after (place/dict.h; each blob uses the best of its cohort's).  The caller's thread
 * (reads and writes through the public calls).  @return 0 or -errno. */
int optimize_train(struct coil_store *s, int level, struct dict_stats *st);

#endif
