/* engine/scrub.h — the scrub: a background, rate-limited pass that reads
 * back and verifies every referenced blob and the store's metadata, and
 * coil_check's accounting walk.  See docs/reliability.md.
 *
 * On top of the engine like the cleaner: it reads through the ring
 * (place/dev.c), walks the extent maps under mlock, reads journal chunks
 * the way recovery does (log/recovery.h).  Only store.c, api.c
 * (the public calls) and stats.c call it. */
#ifndef COIL_ENGINE_SCRUB_H
#define COIL_ENGINE_SCRUB_H

#include <stddef.h>
#include <stdint.h>

#include "coil.h"

struct coil_store;
struct coil_options;

/* The public calls' work, on a store api.c found valid: coil_scrub_start,
 * coil_scrub_wait, coil_scrub_info, coil_scrub_damage, coil_check (same
 * arguments and returns, documented in coil.h). */
int scrub_request(struct coil_store *s);
int scrub_wait(struct coil_store *s);
int scrub_info(struct coil_store *s, struct coil_scrub_info *info);
int scrub_damage(struct coil_store *s, coil_damage_fn fn, void *arg);
int scrub_check(struct coil_store *s, coil_damage_fn fn, void *arg,
		struct coil_scrub_info *info);

/* Start the scrub thread (store.c, after the cleaner).  Read-only stores
 * get one too: a scrub only reads.  @return 0 or -errno. */
int scrub_start(struct coil_store *s, const struct coil_options *o);
/* Cut a pass short and join the thread (coil_close, before it waits for
 * the operations in flight).  Safe when never started. */
void scrub_stop(struct coil_store *s);
/* Stop and free (store_free, before the ring goes). */
void scrub_destroy(struct coil_store *s);

/* The "scrub" member of coil_stats_json, without braces around it or a
 * comma: "scrub":{...}.  Appends to a malloc'd buffer (*@buf, *@len used,
 * *@cap allocated).  @return 0 or -ENOMEM. */
int scrub_stats_json(struct coil_store *s, char **buf, size_t *len,
		     size_t *cap);

#endif
