/* engine/handle.h — the process-wide table behind coil_obj handles. */
#ifndef COIL_ENGINE_HANDLE_H
#define COIL_ENGINE_HANDLE_H

#include "engine/store.h"

/* A free slot (magic dead, fields cleared; inflight and gen kept).
 * @return 0, -ENOMEM, -EMFILE (every slot is open). */
int handle_alloc(struct coil_obj **out);

/* Give the slot back: its generation advances, so every public handle to
 * it is stale from here on.  The caller marked it dead first. */
void handle_free(struct coil_obj *h);

/* The value callers hold for @h as it is now (never an address). */
coil_obj *handle_public(const struct coil_obj *h);

/* The slot @pub names and, in *@gen, the generation it was opened under;
 * NULL when @pub is no handle coil ever made. */
struct coil_obj *handle_lookup(const coil_obj *pub, uint32_t *gen);

#endif
