/* engine/pack.h — the packer: in-memory blobs of small writes (kept in
 * the journal records that made them, and in checkpoints) written densely
 * into a segment, and relocated there by the same compare-and-swap the
 * cleaner's relocations use (engine/pack.c). */
#ifndef COIL_ENGINE_PACK_H
#define COIL_ENGINE_PACK_H

#include <stdint.h>

struct coil_store;

/* The packer's thread (writable stores): store_start.  @return 0 or
 * -errno. */
int pack_start(struct coil_store *s);
/* Close: pack what is left (unless the store is broken), stop the thread.
 * Accepts a store without a packer. */
void pack_stop(struct coil_store *s);
void pack_destroy(struct coil_store *s);
/* In-memory bytes reached the mark (or the cap): wake the packer. */
void pack_kick(struct coil_store *s);
/* Pack every in-memory blob now and wait (tests, `coil compact`).
 * @return 0 or -errno (-ENOSPC: no segment for them; they stay in
 * memory and in the journal, nothing is lost). */
int pack_now(struct coil_store *s);

#endif
