/* coil.h — the whole public API of libcoil.
 *
 * coil is an embeddable storage engine: a store (a regular file or a raw block
 * device) holds named, sparse, byte-addressable objects.  Reads and writes are
 * asynchronous; every byte on disk is checksummed and data is compressed with
 * zstd.
 *
 * Conventions (every function):
 *   - returns 0, a byte count, or a NEGATIVE errno; errno is never left for the
 *     caller to read.  coil_strerror() names each code.
 *   - bad arguments are -EINVAL and never abort the process.
 *   - completions (coil_cb) carry the same: bytes, 0, or -errno.
 *
 * Threads: every handle is safe to use from many threads at once.  Callbacks
 * run on one of coil's own threads (the ring thread or a pool worker), never
 * on the caller's thread inside the submitting call (unless the store was
 * opened with COIL_INLINE_CB, for reads that need no device I/O); a callback must not block
 * and must not call the synchronous API (coil_pread, coil_pwrite, coil_sync,
 * coil_close, coil_obj_close); submitting further async operations from a
 * callback is allowed.
 */
#ifndef COIL_H
#define COIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COIL_API __attribute__((visibility("default")))
#else
#define COIL_API
#endif

/* coil_open: the store was written by a later coil with a format feature
 * this library does not have (a newer superblock version, or an incompat
 * feature bit it does not know).  Nothing of the store was read past its
 * superblock and nothing was written; open it with a coil that knows the
 * feature.  A negative errno like every other code (-EPROTONOSUPPORT). */
#define COIL_EFEATURE EPROTONOSUPPORT

typedef struct coil_store coil_store; /* opaque: one open store */
typedef struct coil_obj coil_obj;     /* opaque: one open object */

/* Completion of an asynchronous operation.  @res is the byte count for reads
 * and writes, 0 for flush, or a negative errno.  Runs on a coil thread. */
typedef void (*coil_cb)(void *arg, int64_t res);

/* Flags for coil_options.flags and coil_obj_open(). */
#define COIL_CREATE    0x1u /* create the store / object when missing */
#define COIL_RDONLY    0x2u /* store: open read-only; writes fail with -EROFS */
#define COIL_NO_DIRECT 0x4u /* store: do not use O_DIRECT (tmpfs and the like) */
#define COIL_EXCL      0x8u /* object: with COIL_CREATE, fail -EEXIST if present */
/* store creation on a regular file (expert option): a fixed-size store of
 * o->size bytes, the whole file written (zeros) before formatting, that
 * never grows.  Creation takes as long as writing the file once; in return
 * every later O_DIRECT write is an overwrite of written blocks, which file
 * systems (ext4, XFS) do without converting unwritten extents.  Without it
 * (the default) the store starts small and grows (docs/space.md).  Freed
 * segments of a file are never punched either way.  Ignored for block
 * devices and existing stores. */
#define COIL_ZERO_FILL 0x10u
/* store: a coil_read that needs no device I/O (every byte from the cache,
 * holes, at or past the end) runs its callback on the caller's thread
 * before coil_read returns, instead of a round trip through the ring thread
 * (two thread wake-ups, tens of microseconds on a virtual machine).  Only
 * for callers whose callback may run inside their own submitting call: it
 * must not take a lock the submitter holds, and a callback that submits the
 * next read runs that read's callback nested (bound such chains). */
#define COIL_INLINE_CB 0x20u
/* store: open a damaged store to export what is left of it (what
 * `coil salvage` does).  Implies COIL_RDONLY: nothing is ever written.
 * Where a normal open gives up, this one takes the newest metadata that
 * still verifies: the other superblock copy, or a layout rebuilt from a
 * checkpoint found by scanning the store when both copies are damaged;
 * the older checkpoint area, or none, when the current checkpoint is
 * damaged; a store file shorter than its superblock says (reads past its
 * end fail with -EIO).  Journal replay goes on past records whose data
 * does not verify (reads of those ranges then fail with -EIO instead of
 * the older bytes being returned as current), and stops at the first
 * chunk that does not read or verify.  What it had to give up on is
 * listed in coil_stats_json under "salvage".  Reads never return wrong
 * bytes: every blob is still verified against its checksums. */
#define COIL_SALVAGE 0x40u
/* object handle (coil_obj_open), a hint: what is written through this
 * handle is short-lived, rewritten or removed soon (a database's
 * write-ahead log or rollback journal).  A compressing store encodes it
 * with zstd's fastest mode instead of the store's level: about 1.6x the
 * throughput of level 1 for a quarter less saving on database pages, so
 * the writer pays less CPU for bytes it keeps briefly, while they still
 * take little space while they live (BlueStore takes such hints; RocksDB
 * leaves its WAL uncompressed).  Every handle reads every blob. */
#define COIL_SHORTLIVED 0x80u

/* Worker pool scheduling (coil_options.pool_mode). */
#define COIL_POOL_FAIR      0u /* per-request round-robin (default) */
#define COIL_POOL_SEMAPHORE 1u /* batch-granularity semaphore, for comparison */

/* Largest object name, in bytes, not counting the terminating NUL.  Names are
 * any bytes except NUL. */
#define COIL_NAME_MAX 255
/* A name whose first byte is this one belongs to coil (its dictionaries):
 * -EINVAL to every call that takes a name; coil_obj_list skips them. */
#define COIL_NAME_RESERVED 0x01

/* The smallest store coil_open creates with the default max_blob (room for
 * the superblocks, journal, two checkpoint areas and two data segments); a
 * larger max_blob needs larger segments, so more.  Smaller is -ENOSPC. */
#define COIL_MIN_SIZE (6ull << 20)

struct coil_options {
	uint64_t size;           /* the largest a new file-backed store may
	                            grow to, bytes (at least COIL_MIN_SIZE);
	                            default 0: as large as the file system
	                            (at most 1 TiB).  The file starts at most
	                            64 MiB on disk and grows as data arrives.
	                            Ignored for block devices (the whole
	                            device) and existing stores */
	unsigned flags;          /* COIL_CREATE, COIL_RDONLY, COIL_NO_DIRECT,
	                            COIL_ZERO_FILL, COIL_INLINE_CB */
	const char *compression; /* "none", "zstd", "zstd:N" (default "zstd:1");
	                            the pointer need only live during coil_open */
	uint32_t max_blob;       /* largest blob, a power of two from 4096 to
	                            1 MiB (default 65536) */
	uint64_t cache_bytes;    /* decoded-blob cache budget (default 64 MiB) */
	unsigned workers;        /* pool workers; 0 = number of cores */
	unsigned pool_mode;      /* COIL_POOL_FAIR or COIL_POOL_SEMAPHORE */
	unsigned prefetch;       /* 1 = readahead on (default), 0 = off */
	unsigned sync_writes;    /* 1 = each write is durable when it completes */
	uint64_t scrub_rate;     /* background scrub: stored bytes read per
	                            second at most (default 32 MiB/s; 0 = no
	                            limit).  See coil_scrub_start. */
	uint64_t scrub_interval; /* seconds between automatic scrub passes,
	                            counted from the open or the end of the
	                            last pass (default 604800, a week; 0 = only
	                            when coil_scrub_start asks) */
	uint64_t optimize_idle;  /* background optimizer (coil_optimize): after
	                            this many seconds without a write, a pass
	                            at zstd level 19 takes segments sealed at
	                            least as long ago, and stops at the next
	                            write (default 60; 0 = only when
	                            coil_optimize asks) */
	uint64_t optimize_cold;  /* the optimizer (background or coil_optimize)
	                            leaves data alone until nothing new has
	                            landed in its segment for this many
	                            seconds: data still being rewritten is not
	                            worth encoding again (default 30; data
	                            written before the open counts as cold;
	                            0 = all data) */
	/* Fields may be added after this point in later versions;
	 * coil_options_init() always sets every one of them. */
};

/* Fill @o with every default.  Always call it before setting fields. */
COIL_API void coil_options_init(struct coil_options *o);

/* Open (or with COIL_CREATE, create) the store at @path.
 * @o may be NULL for all defaults.  On success *@out holds the store, valid
 * until coil_close(); on failure *@out is NULL.
 * COIL_CREATE makes a store only where there is none: a missing or empty
 * regular file (sized to o->size, at least COIL_MIN_SIZE), or a block device
 * with no valid coil superblock (sized by the device).  A non-empty file that
 * is not a store is -EMEDIUMTYPE, never overwritten.  Opening recovers from a crash (journal replay);
 * then, unless COIL_RDONLY, a checkpoint makes the recovered state the new
 * base.  COIL_RDONLY recovers in memory only and writes nothing.
 * One writer per store: a store open for writing is held by every name
 * that reaches it — another device node of the same block device, a loop
 * device over the store file, the file under a loop device — and a block
 * device is opened O_EXCL (a mounted device is refused).  Read-only opens
 * share a store with each other.
 * @return 0, or -EINVAL (bad option or path), -ENOENT (missing, no
 *   COIL_CREATE), -EISDIR (a directory), -EBUSY (open in this or another
 *   process, by any name, or mounted), -ENOLCK (a loop device whose backing
 *   file cannot be found to lock it: deleted, renamed or not visible here),
 *   -EMEDIUMTYPE (not a coil store: neither superblock copy has coil's
 *   magic, or the file is too short to hold them), -EIO (a damaged store:
 *   both superblocks corrupt, its checkpoint corrupt, or a device read
 *   failed during recovery), -EPROTONOSUPPORT (COIL_EFEATURE: written by a
 *   later coil with a format feature this one does not know), -ENOSPC (new
 *   store smaller than COIL_MIN_SIZE, or a file system without room for a
 *   new store's first 64 MiB: nothing is left behind; or, opening a growing
 *   store file for writing, no room to allocate its journal again, which
 *   its last clean close gave back: COIL_RDONLY still opens it), -ENOMEM,
 *   or the errno of a failed system call (-EACCES...). */
COIL_API int coil_open(const char *path, const struct coil_options *o,
                       coil_store **out);

/* Flush, checkpoint and release the store.  Every object handle must be
 * closed first (-EBUSY otherwise, and nothing is released).  Accepts NULL
 * (returns 0).  Waits for all operations in flight.  Not from a callback
 * (-EDEADLK).  A growing store file then gives back to its file system
 * the blocks that hold nothing a later open reads (the journal, stale
 * checkpoint bytes, blocks allocated and never written); the next
 * writable open allocates its journal again (docs/space.md, "At close").
 * @return 0, -EBADF (already closed), -EBUSY, or the first error met while
 *   flushing (the store is still released). */
COIL_API int coil_close(coil_store *s);

/* Open the object @name (1..COIL_NAME_MAX bytes, NUL-terminated).
 * @flags: 0, COIL_CREATE, COIL_CREATE|COIL_EXCL, each with or without
 * COIL_SHORTLIVED (a hint for this handle's writes).  *@out is valid until
 * coil_obj_close(); many handles may name the same object.  A create is
 * ordered with the writes after it and durable with the next flush.
 * @return 0, -EINVAL, -ENAMETOOLONG, -ENOENT, -EEXIST, -EROFS (create on a
 *   read-only store), -EIO (create on a store that failed a write before),
 *   -ENOMEM, -EMFILE (2^20 handles open in the process),
 *   -EBADF (store closed), -EAGAIN (from a callback, when the store's queue
 *   of metadata operations is full). */
COIL_API int coil_obj_open(coil_store *s, const char *name, unsigned flags,
                           coil_obj **out);

/* Close an object handle after its operations in flight complete.  Accepts
 * NULL (returns 0).  Not from a callback (-EDEADLK).
 * A closed handle stays closed: every call through it (this one included)
 * returns -EBADF and touches nothing, whatever was opened since — another
 * handle to any object, of this store or another, also after its store
 * was closed.  A handle value is never given out again (strictly: one
 * internal slot would have to be reopened 2^32 times in between).  A value
 * coil never returned is -EBADF as well, not a crash.
 * @return 0, -EBADF, -EDEADLK. */
COIL_API int coil_obj_close(coil_obj *o);

/* Remove the object @name.  Open handles to it then fail with -EBADF (close
 * them as usual); the name is free at once; its space is released (reused
 * after the next checkpoint).  Writes submitted before the remove and still
 * in flight complete but are dropped.
 * @return 0, -ENOENT, -EINVAL, -ENAMETOOLONG, -EROFS, -EBADF (store closed),
 *   -EIO (the store failed a write before and accepts no more), -EAGAIN
 *   (from a callback, when the store's queue of metadata operations is
 *   full). */
COIL_API int coil_obj_remove(coil_store *s, const char *name);

/* *@size = the end of the furthest write or the last truncate.
 * @return 0, -EINVAL, -EBADF (removed). */
COIL_API int coil_obj_size(coil_obj *o, uint64_t *size);

/* What one object holds, as coil_obj_stat reports it. */
struct coil_obj_info {
	uint64_t size;    /* as coil_obj_size */
	uint64_t mapped;  /* logical bytes that hold data (holes excluded) */
	uint64_t stored;  /* its share of the stored (compressed) blob bytes */
};

/* Fill *@info for the object behind @o: a consistent snapshot of its size
 * and of the bytes its data takes before and after compression.  Blocks
 * shared with other data and per-blob padding are not attributed to one
 * object: the sum of every object's @stored equals the store's stored
 * bytes in coil_stats_json, not its allocated bytes.
 * @return 0, -EINVAL, -EBADF (closed handle or removed object). */
COIL_API int coil_obj_stat(coil_obj *o, struct coil_obj_info *info);

/* Set the object's size; growing adds a hole (reads as zeros), shrinking
 * drops data past @size.  Ordered after every write submitted before it:
 * the call waits until the truncate took its turn.  Not from a callback
 * (-EDEADLK).
 * @return 0, -EINVAL, -EBADF, -EROFS, -EFBIG (past 2^60), -EIO. */
COIL_API int coil_obj_truncate(coil_obj *o, uint64_t size);

/* Write @len bytes of @buf at @off, asynchronously.  @buf must stay valid
 * and unchanged until @cb runs.  The write is atomic: after any crash it is
 * wholly present or wholly absent.  Overlapping writes apply in submission
 * order.  Once @cb has run with success the write survives the process
 * being killed; after a later coil_flush, it survives power loss.
 * @cb (may be NULL) receives @len or a negative errno: -ENOSPC (the store
 * is full; the store stays usable, and writes succeed again once space is
 * freed), -ENOMEM (no memory to place or apply it), -EIO (a device error,
 * or the store failed a write before), or, for writes in flight when a
 * device write failed, that write's own error.
 * @return 0 when submitted (then @cb runs exactly once), or a negative errno
 *   and @cb never runs: -EINVAL (NULL buf with len > 0, off + len overflows,
 *   len > 16 MiB: one write is one journal record), -EFBIG (off + len past
 *   2^60), -EBADF, -EROFS, -EIO (the store failed a write before and
 *   accepts no more), -ENOMEM (no buffer for the write), -EAGAIN (from a
 *   callback, when all 512 write contexts are busy; outside callbacks the
 *   call waits for one). */
COIL_API int coil_write(coil_obj *o, const void *buf, size_t len, uint64_t off,
                        coil_cb cb, void *arg);

/* Read up to @len bytes at @off into @buf, asynchronously.  Like pread(2):
 * short at the end of the object, 0 at or past it; holes read as zeros.
 * Sees every write that completed before this call.  @buf must stay valid
 * until @cb runs.  @cb receives the byte count or a negative errno; -EIO
 * means a checksum or device failure and no wrong bytes are ever delivered
 * (the buffer's contents are then unspecified).
 * @return 0 when submitted, or a negative errno (then @cb never runs):
 *   -EINVAL, -EBADF, -ENOMEM, -EAGAIN (from a callback, all 512 read
 *   contexts busy). */
COIL_API int coil_read(coil_obj *o, void *buf, size_t len, uint64_t off,
                       coil_cb cb, void *arg);

/* Make durable every write that completed before this call.  One device
 * flush is in flight at a time; flushes called meanwhile share the next
 * one.  At most 64 flushes wait or are in flight per store: beyond that
 * the call waits for one to complete (a flush loop cannot starve writers).
 * @cb (required) receives 0 or a negative errno.
 * @return 0 when submitted, or a negative errno (then @cb never runs):
 *   -EINVAL, -EBADF, -EROFS, -EAGAIN (from a callback, when 64 flushes are
 *   waiting or in flight). */
COIL_API int coil_flush(coil_store *s, coil_cb cb, void *arg);

/* A hint: read [@off, @off + @len) into the cache ahead of demand.
 * @return 0 (admitted, coalesced or dropped under backpressure), -EINVAL,
 *   -EBADF. */
COIL_API int coil_prefetch(coil_obj *o, uint64_t off, uint64_t len);

/* ---- rename and batches ----------------------------------------------------
 *
 * A batch changes several objects of one store at once: writes, truncates,
 * creates, removes, renames and clones, applied in the order they were
 * added.
 * After any crash the whole batch is present or wholly absent (a completed
 * batch survives the process being killed; after a later coil_flush, power
 * loss), and no reader ever sees part of it: a read submitted after the
 * batch completed sees all of it, one that completed before it was
 * submitted sees none, and every object it changes changes in one step.
 * Batches and single writes to the same object apply in submission order.
 * Objects are named, not opened: a batch may create an object and write
 * it, or write one and rename it over another.  Open handles follow a
 * renamed object; handles to an object the batch removes (or renames
 * another over) then fail with -EBADF, as after coil_obj_remove.
 *
 * Limits, checked as each operation is added (-E2BIG, and the batch is
 * unchanged): COIL_BATCH_OPS_MAX operations, COIL_BATCH_BYTES_MAX bytes of
 * write data.  The encoded batch must also fit one journal chunk (at most
 * 1 MiB, a quarter of the journal); a batch that does not is refused whole
 * with -E2BIG at submission.  With the default max_blob the data limit
 * is what binds. */
#define COIL_BATCH_OPS_MAX   1024u
#define COIL_BATCH_BYTES_MAX (16u << 20)
/* coil_obj_rename / coil_batch_rename: fail with -EEXIST instead of
 * replacing an object that holds the new name. */
#define COIL_RENAME_NOREPLACE 0x1u

typedef struct coil_batch coil_batch; /* opaque: operations not yet submitted */

/* A new empty batch for store @s.  @return 0, -EINVAL, -EBADF, -ENOMEM. */
COIL_API int coil_batch_new(coil_store *s, coil_batch **out);
/* Add a write of @len bytes of @buf at @off to the object @name (which must
 * exist when the batch applies, or be created earlier in it).  The bytes
 * are copied: @buf may be reused at once.
 * @return 0, -EINVAL, -ENAMETOOLONG, -EFBIG (past 2^60), -E2BIG, -ENOMEM. */
COIL_API int coil_batch_write(coil_batch *b, const char *name, const void *buf,
                              size_t len, uint64_t off);
/* Add a truncate (as coil_obj_truncate).  Same errors. */
COIL_API int coil_batch_truncate(coil_batch *b, const char *name, uint64_t size);
/* Add the creation of an empty object @name; the batch fails with -EEXIST
 * if it exists then.  Same errors. */
COIL_API int coil_batch_create(coil_batch *b, const char *name);
/* Add the removal of @name; the batch fails with -ENOENT if it is missing
 * then.  Same errors. */
COIL_API int coil_batch_remove(coil_batch *b, const char *name);
/* Add a rename of @old to @new_name (as coil_obj_rename; flags 0 or
 * COIL_RENAME_NOREPLACE).  Same errors. */
COIL_API int coil_batch_rename(coil_batch *b, const char *old,
                               const char *new_name, unsigned flags);
/* Add a clone of @src as a new object @dst (as coil_obj_clone); the batch
 * fails with -EEXIST if @dst exists then.  Same errors. */
COIL_API int coil_batch_clone(coil_batch *b, const char *src, const char *dst);
/* Submit the batch; it is consumed (freed) whatever the result.  Checks it
 * against the store first: a batch that fails a check changes nothing.
 * The call may wait on the calling thread for the writes submitted before
 * it to the same objects, and for other batches naming the same objects.
 * Not from a callback (-EDEADLK).
 * @cb (may be NULL) receives 0 or a negative errno: -ENOSPC (nothing of the
 * batch applied; the store stays usable), -EIO, -ENOMEM.
 * @return 0 when submitted (then @cb runs exactly once), or a negative
 *   errno and @cb never runs: -EINVAL, -EBADF, -EROFS, -EIO (the store
 *   failed a write before), -ENOENT (an operation names an object that is
 *   missing at that point of the batch), -EEXIST (a create or a
 *   no-replace rename onto an object that exists), -E2BIG, -ENOSPC,
 *   -ENOMEM, -EDEADLK. */
COIL_API int coil_batch_submit(coil_batch *b, coil_cb cb, void *arg);
/* coil_batch_submit, waiting for the completion.  @return 0 or -errno. */
COIL_API int coil_batch_commit(coil_batch *b);
/* Discard a batch that was not submitted.  Accepts NULL. */
COIL_API void coil_batch_free(coil_batch *b);

/* Rename object @old to @new_name atomically, like rename(2): an object
 * holding @new_name is replaced (removed in the same step) unless @flags
 * has COIL_RENAME_NOREPLACE.  Renaming an object to its own name does
 * nothing.  Open handles follow the object.  Durable with the next flush;
 * once it returns, it survives the process being killed.  Not from a
 * callback (-EDEADLK).
 * @return 0, -EINVAL, -ENAMETOOLONG, -ENOENT, -EEXIST, -EROFS, -EBADF, -EIO,
 *   -ENOSPC, -ENOMEM, -EDEADLK. */
COIL_API int coil_obj_rename(coil_store *s, const char *old,
                             const char *new_name, unsigned flags);

/* Make @dst a copy of @src that shares @src's data: no data is copied (a
 * small write's bytes still waiting in memory to be packed are the
 * exception), and later writes to either object diverge.  @dst must not
 * exist.  Atomic, ordered after the writes to @src submitted before it,
 * durable like a rename.  Space: shared blocks count once in the store's
 * allocated bytes and in each object's coil_obj_stat.  Not from a callback
 * (-EDEADLK).
 * @return 0, -EINVAL, -ENAMETOOLONG, -ENOENT, -EEXIST, -EROFS, -EBADF, -EIO,
 *   -ENOSPC, -ENOMEM, -EDEADLK. */
COIL_API int coil_obj_clone(coil_store *s, const char *src, const char *dst);

/* Synchronous wrappers of coil_write / coil_read / coil_flush: they wait
 * on the calling thread.  Not from a callback (-EDEADLK).
 * @return bytes written or read (or 0), or a negative errno. */
COIL_API int64_t coil_pwrite(coil_obj *o, const void *buf, size_t len,
                             uint64_t off);
COIL_API int64_t coil_pread(coil_obj *o, void *buf, size_t len, uint64_t off);
COIL_API int coil_sync(coil_store *s);

/* Write one JSON object describing the store (space, compression, cache,
 * pool, journal, prefetch) into @buf, NUL-terminated, truncated to @len.
 * @return the length the whole text needs (excluding the NUL), or a negative
 *   errno.  Call with len 0 to size the buffer. */
COIL_API int coil_stats_json(coil_store *s, char *buf, size_t len);

/* coil_stats_json with extra figures that cost a walk of the metadata:
 * COIL_STATS_SHARED adds space.shared, the part of space.stored that more
 * than one object claims (blocks clones share: stored counts them once
 * per object, allocated once).  The walk visits every extent of the store
 * under the metadata lock (writers' completions wait for it; 24 bytes of
 * memory per extent) — for tools and occasional checks, not a hot loop.
 * @return as coil_stats_json; -EINVAL for an unknown flag. */
#define COIL_STATS_SHARED 0x1u
COIL_API int coil_stats_json_flags(coil_store *s, char *buf, size_t len,
				   unsigned flags);
/* coil_stats_json_flags into a buffer of its own, returned in *@out (free
 * it with free()).  On a store in use the text can grow between a call
 * that sizes a buffer and the call that fills it (counters move on other
 * threads: one more digit truncates the text, and truncated JSON does not
 * parse); this call hands over the text whole, as it was built.  @return
 * the text's length, or a negative errno as coil_stats_json_flags
 * (-ENOMEM among them); *@out is NULL on failure. */
COIL_API int coil_stats_json_dup(coil_store *s, unsigned flags, char **out);

/* Call @fn(@arg, name, name_len, size) once for every object of the store, in
 * no particular order, from the calling thread and with no coil lock held
 * (the list is a snapshot taken at the call; @fn may call coil).  @name is
 * NUL-terminated and valid only during the call.  Iteration stops when @fn
 * returns nonzero, and that value is returned.
 * @return 0, @fn's nonzero value, -EINVAL, -EBADF, -ENOMEM. */
typedef int (*coil_list_fn)(void *arg, const char *name, size_t name_len,
			    uint64_t size);
COIL_API int coil_obj_list(coil_store *s, coil_list_fn fn, void *arg);

/* ---- scrub and check ------------------------------------------------------
 *
 * A scrub pass reads back every blob that an object references and checks
 * it (each checksum; zstd blobs are decompressed and the result checked),
 * and the store's own metadata: both superblock copies, the current
 * checkpoint, and the journal chunks recovery would replay.  It runs on a
 * background thread of the store, at most coil_options.scrub_rate bytes a
 * second, through the same ring as every other read, and bypasses the
 * cache (it checks what is on the device).  It changes nothing: damage is
 * reported, never repaired (coil keeps one copy of each byte); a read of a
 * damaged range fails with -EIO as it always did. */

/* Progress and findings of the current pass, or of the last one when none
 * is running (all zero before the first). */
struct coil_scrub_info {
	uint64_t passes;          /* passes finished since the open */
	uint64_t running;         /* 1 while a pass runs */
	uint64_t bytes_total;     /* stored bytes the pass has to verify */
	uint64_t bytes_done;      /* of those, read and checked so far */
	uint64_t blobs_verified;  /* blobs read and checked */
	uint64_t damaged_ranges;  /* object ranges that do not read back */
	uint64_t damaged_bytes;   /* their total length */
	uint64_t metadata_errors; /* superblock, checkpoint or journal damage */
	uint64_t accounting_errors; /* coil_check only: counts that disagree
	                               with a walk of the metadata */
};

/* One finding.  @object (not NUL-terminated, @object_len bytes) names the
 * object whose bytes [@off, @off + @len) do not read back, or is NULL for
 * damage to the store's own structures (then @off/@len are the device
 * range when known, else 0).  @what says what failed, in words.  Pointers
 * are valid only during the callback. */
struct coil_damage {
	const char *object;
	size_t object_len;
	uint64_t off;
	uint64_t len;
	const char *what;
};
/* Called once per finding; a nonzero return stops the listing and is
 * returned. */
typedef int (*coil_damage_fn)(void *arg, const struct coil_damage *d);

/* Start a scrub pass in the background now (the pass runs at
 * coil_options.scrub_rate).  Works on read-only stores too.
 * @return 0, -EALREADY (a pass is running: it goes on), -EBADF (store
 *   closed), -EINVAL (NULL). */
COIL_API int coil_scrub_start(coil_store *s);

/* Wait until no pass runs (returns at once when none does).  Not from a
 * callback (-EDEADLK).
 * @return 0 (the last pass found nothing), -EIO (it found damage: see
 *   coil_scrub_damage), -ENOMEM (the pass could not get memory and
 *   stopped), -EBADF, -EINVAL, -EDEADLK. */
COIL_API int coil_scrub_wait(coil_store *s);

/* Fill *@info with the progress and counts of the current or last pass.
 * @return 0, -EBADF, -EINVAL. */
COIL_API int coil_scrub_info(coil_store *s, struct coil_scrub_info *info);

/* Call @fn for each finding of the current or last pass, from the calling
 * thread with no coil lock held.  A pass keeps its first 1024 findings
 * (adjacent damaged ranges of one object are merged into one); the counts
 * in coil_scrub_info cover all of them.
 * @return 0, @fn's nonzero value, -EBADF, -EINVAL, -ENOMEM. */
COIL_API int coil_scrub_damage(coil_store *s, coil_damage_fn fn, void *arg);

/* A full check, on the calling thread and without a rate limit: a scrub
 * pass (every checksum of every referenced blob, the superblocks, the
 * checkpoint, the journal in use), then the accounting cross-checked
 * against a walk of every extent map: each segment's live bytes and state,
 * the free segment count, the extent, byte and stored totals, the object
 * count, and the blob reference counts.  @fn (may be NULL) hears every
 * finding (none is dropped); *@info (may be NULL) gets the counts.
 * Waits for a background pass in progress first.  Not from a callback.
 * @return 0 when the check ran (it found damage when info's
 *   damaged_ranges, metadata_errors or accounting_errors are not 0),
 *   @fn's nonzero value, -EBADF, -EINVAL, -EDEADLK, -ENOMEM, -ESHUTDOWN. */
COIL_API int coil_check(coil_store *s, coil_damage_fn fn, void *arg,
			struct coil_scrub_info *info);
/* Give space back to the file system: live data in the segments nearest
 * the end of a growing store's file moves into free segments nearer the
 * front (the cleaner's relocation, one segment for each free one below
 * it), then the free segments at the end (what removes, the cleaner, the
 * optimizer and this move emptied) are cut off, down to the size a new
 * store starts with.  Waits for the checkpoints that free emptied
 * segments.  Free space that remains stays with the store, allocated,
 * where the next writes reuse it at full speed.  Safe against crashes at any
 * point (the file is cut only after a checkpoint and the superblock name
 * the smaller size).  A fixed-size store (COIL_ZERO_FILL, a block device)
 * returns 0 bytes.  *@returned (may be NULL): bytes the file gave back.
 * @return 0, -EBADF, -EROFS (read-only), -EDEADLK (from a callback), -EIO. */
COIL_API int coil_compact(coil_store *s, uint64_t *returned);

/* The optimizer: data written at the fast foreground level (zstd-1) and
 * since left alone is encoded again at a high level, while the store is
 * in use.  A pass takes the sealed segments holding the most data it has
 * not been over, decodes each such blob, encodes it at @level, decodes
 * the candidate and compares it byte for byte with what was read, and
 * keeps it only when strictly smaller (stored bytes and checksums); the
 * rest is copied as it was and marked, so no later pass looks at it again.
 * A re-encoded blob replaces the old one only where the object still
 * holds exactly what was read (a write, truncate or remove since wins),
 * the same way in replay after a crash.  The segments read are freed like
 * the cleaner's.  Runs on the store's cleaner thread; foreground I/O goes
 * on meanwhile, and a pass stops early when writers run short of free
 * space.
 * Dictionaries: before its passes, a call trains zstd dictionaries for
 * each cohort of objects — objects whose names share their first
 * component ("dir/" of "dir/sub/file"; names without '/' are one cohort)
 * — that holds at least 4 MiB and has none, from a tenth of its bytes (at
 * most 8 MiB): a few candidates (on the whole sample, on parts of it),
 * of which it keeps up to 4, each only if, judged on other pieces of the
 * sample, it saves more than twice its own size over the cohort beyond
 * what the others kept save; each blob then uses the one of its cohort's
 * that encodes it smallest, or none.  A kept
 * dictionary (about 110 KiB) is an object of the store coil owns (its
 * name starts with COIL_NAME_RESERVED: not listed, not removable, counted
 * in space.stored), made durable before any blob uses it, read at every
 * open; a dictionary that cannot be read makes its blobs read -EIO. */
#define COIL_OPTIMIZE_NO_DICTS 0x1u /* train no new dictionaries */
struct coil_optimize_opts {
	int level;             /* zstd level, 1..22; 0: 19 */
	uint64_t budget_bytes; /* live bytes of segments to take at most
				* (a pass takes at least one); 0: no limit */
	uint64_t budget_ms;    /* start no pass after this long; 0: none */
	unsigned flags;        /* COIL_OPTIMIZE_NO_DICTS */
};
/* What a call did (this call's share of the counters in
 * coil_stats_json's "optimizer"). */
struct coil_optimize_report {
	uint64_t passes;       /* relocation passes run */
	uint64_t scanned;      /* blobs encoded again */
	uint64_t rewritten;    /* of them, written smaller */
	uint64_t saved_bytes;  /* stored bytes fewer, as installed */
	uint64_t stale_skips;  /* rewrites newer data had overtaken */
	uint64_t no_gain;      /* blobs nothing smaller was found for */
	uint64_t errors;       /* candidates that failed their check */
	uint64_t bytes_written;/* stored bytes of the rewrites */
	uint64_t dicts_made;   /* dictionaries trained and kept (up to 4
				* per cohort) */
	uint64_t dict_bytes;   /* their bytes */
	uint64_t dicts_rejected; /* candidates trained, not kept (not worth
				  * their bytes beyond the kept ones, or
				  * nothing the trainer could learn) */
};
/* Optimize @s within @opts's budget (NULL: defaults, no budget).
 * @rep (may be NULL): what was done.  Not from a callback (-EDEADLK).
 * Only cold data is taken: a segment nothing new has landed in for
 * coil_options.optimize_cold seconds (data written before the open
 * counts as cold).
 * @return 1 when cold data not yet optimized remains (call again), 0 when
 *   none, -EINVAL, -EBADF, -EROFS, -EDEADLK, -EIO, -ENOMEM. */
COIL_API int coil_optimize(coil_store *s, const struct coil_optimize_opts *opts,
			   struct coil_optimize_report *rep);

/* A static, human-readable name for a coil return code (negative errno).
 * Never NULL. */
COIL_API const char *coil_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* COIL_H */
