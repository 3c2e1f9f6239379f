/* engine/log/recovery.h — open's recovery: load the durable checkpoint,
 * then replay the journal after it (records whose blobs do not verify end
 * the replay).  Single-threaded: before any thread of the store starts. */
#ifndef COIL_ENGINE_RECOVERY_H
#define COIL_ENGINE_RECOVERY_H


struct coil_store;

/* Load the checkpoint the superblock names into the object table and the
 * segment table.  @return 0, -EIO (corrupt), -ENOMEM. */
int ckpt_load(struct coil_store *s);
/* Apply the journal's records after the checkpoint's replay point.
 * @return 0, -EIO, -ENOMEM. */
int replay_journal(struct coil_store *s);

#endif
