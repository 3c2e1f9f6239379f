/* engine/batch.h — atomic batches across objects, and rename (batch.c). */
#ifndef COIL_ENGINE_BATCH_H
#define COIL_ENGINE_BATCH_H

#include <stddef.h>

struct coil_store;

/* A create or remove outside a batch, mlock held: wait while a batch in
 * flight names @name (its claim ends when it applies).  @return 0, or
 * -EAGAIN on a coil thread, which must not wait. */
int batch_name_wait(struct coil_store *s, const char *name, size_t len);

#endif
