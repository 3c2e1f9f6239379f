/* engine/log/flush.h — coil_flush's group device flushes (flush.c).
 * journal_flush (log/journal.h) is the submitting call. */
#ifndef COIL_ENGINE_FLUSH_H
#define COIL_ENGINE_FLUSH_H

struct coil_store;

/* The waiter pool (ENGINE_FLUSH_MAX): journal_init.  @return 0, -ENOMEM. */
int flush_init(struct coil_store *s);
/* After every flush completed: journal_destroy.  Accepts a store without. */
void flush_destroy(struct coil_store *s);
/* A journal cycle retired (jlock not held): flushes waiting for its
 * records may go. */
void flush_journal_retired(struct coil_store *s);

#endif
