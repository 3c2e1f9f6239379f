/* engine/io/recode.h — the optimizer: cold blobs re-encoded smaller.
 *
 * The optimizer is a mode of the cleaner's relocation pass (cleaner.c):
 * it picks the sealed segments holding the most bytes it has not been over
 * yet, and while the pass relocates their live blobs, each one not yet
 * optimized goes through optimize_blob: decoded (the pass already did, to
 * verify it), encoded again at a high zstd level, the candidate decoded
 * and compared byte for byte, and kept only when strictly smaller.  A kept
 * candidate is journaled as a REWRITE pair (what was read, what replaces
 * it) and installed by meta_apply_rewrite's compare-and-swap; every other
 * blob is copied verbatim (a REMAP) with FMT_BLOB_OPTIMIZED set, so no
 * later pass looks at it again.  The victims end empty and the checkpoint
 * after the pass frees them, as after any cleaning.
 *
 * Small blobs of one object within one aligned window of the blob size
 * (a page store's 4 KiB pages) are merged: their bytes, joined, go through
 * optimize_merge as one blob, journaled as one REWRITE pair per member
 * extent into the merged blob, so the compare-and-swap decides each
 * member alone (the cleaner plans and commits them, cleaner.c). */
#ifndef COIL_ENGINE_RECODE_H
#define COIL_ENGINE_RECODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct coil_store;
struct dict;
struct fmt_blob;

/* The optimizer's encoder state and counters (one per store, used by the
 * cleaner thread only, counters read by stats).
 *
 * The encoding itself runs on a thread of its own at SCHED_IDLE: it is
 * the optimizer's CPU (a level-19 encode is most of it), and at idle
 * priority it takes only the cycles the foreground leaves.  An
 * unprivileged thread cannot leave SCHED_IDLE again, hence a thread of
 * its own rather than the cleaner's, which must keep up with writers.
 * The cleaner thread hands it one blob at a time and waits; it holds no
 * lock meanwhile.  If the thread cannot be made, or not made idle, the
 * encoding runs on the cleaner thread (or at normal priority), and the
 * stats say so. */
struct optimizer {
	pthread_t enc_th;
	pthread_mutex_t enc_mu;
	pthread_cond_t enc_cv;
	bool ready;              /* enc_mu and enc_cv were made */
	bool enc_started;        /* enc_th runs */
	int enc_state;           /* ENC_* (enc_mu) */
	struct enc_job *job;     /* the blob handed over (enc_mu) */
	_Atomic bool enc_idle;   /* enc_th runs at SCHED_IDLE */

	void *cctx;              /* ZSTD_CCtx, made for a pass, freed after */
	void *dctx;              /* ZSTD_DCtx for the candidate's check */
	uint8_t *obuf;           /* the candidate's stored bytes */
	uint8_t *vbuf;           /* the candidate decoded again */
	int level;               /* this pass's zstd level */
	/* test hook: corrupt the next @inject_bad candidates before their
	 * check, which must then refuse them */
	_Atomic uint32_t inject_bad;

	_Atomic uint64_t passes, scanned, rewritten, saved_bytes, stale_skips;
	_Atomic uint64_t stale_bytes, no_gain, errors, bytes_read;
	_Atomic uint64_t bytes_written, cpu_ns, installed_bytes;
	_Atomic uint64_t paced_ns;  /* waited for the foreground (cleaner.c) */
	/* merged blobs written, and the small blobs they took in */
	_Atomic uint64_t merges, merged_blobs;
};

int optimizer_init(struct optimizer *op);
/* Stops the encoder thread and frees everything. */
void optimizer_destroy(struct optimizer *op);
/* Ready for a pass at @level (1..22): the encoder is made now (and its
 * thread, the first time). */
int optimizer_begin(struct optimizer *op, int level);
/* After a pass: the encoder's memory (tens of MiB at high levels) goes. */
void optimizer_end(struct optimizer *op);

/* The quick level at which a blob chooses among its cohort's
 * dictionaries before the one encoding at the pass's level. */
#define OPTIMIZE_CHOOSE_LEVEL 3

/* Re-encode one blob whose descriptor is @old and whose @old->logical_len
 * logical bytes are @logical (already verified), with the best of the
 * @npool dictionaries @pool (its cohort's, dict_pool; 0: none): with
 * more than one, each and none are tried at OPTIMIZE_CHOOSE_LEVEL and
 * the smallest is the one used (a dictionary whose encoder cannot be made
 * is not used).  @return 1 and the candidate in *@nfb (flags
 * FMT_BLOB_OPTIMIZED, dev_off 0) and its stored bytes at *@bytes when it
 * decodes back to exactly @logical and its persisted bytes (stored bytes
 * and descriptor checksums) are strictly fewer; 0 when nothing smaller
 * was found; -EIO when the candidate failed its check (counted in errors;
 * the blob is then kept as it is). */
int optimize_blob(struct optimizer *op, const struct fmt_blob *old,
		  const uint8_t *logical, struct dict *const *pool,
		  unsigned npool, struct fmt_blob *nfb,
		  const uint8_t **bytes);

/* Encode the @len logical bytes of @n small blobs of one object (already
 * verified, concatenated) as one blob, as optimize_blob does one, with
 * the same check.  @old_cost: what the @n blobs cost (each its stored
 * bytes and 8 bytes a checksum); the candidate costs its stored bytes and
 * its checksums once per extent that will map it (every extent record
 * carries its blob's descriptor); the dictionary is chosen from @pool as
 * optimize_blob chooses it.  @return 1 and the candidate as optimize_blob
 * does when it is strictly cheaper, 0 when not, -EIO when it failed its
 * check. */
int optimize_merge(struct optimizer *op, const uint8_t *logical,
		   uint32_t len, uint32_t n, uint64_t old_cost,
		   struct dict *const *pool, unsigned npool,
		   struct fmt_blob *nfb, const uint8_t **bytes);

/* Per segment, the logical bytes of live extents whose blob the optimizer
 * has not been over (no FMT_BLOB_OPTIMIZED): @out has s->nseg entries.
 * A walk of every extent map, the recount that checks each segment's
 * running count (struct seg's unopt, which picks the victims).  mlock
 * held. */
void optimize_seg_bytes(struct coil_store *s, uint64_t *out);

/* The "optimizer" section of the stats JSON (@op NULL: zeros).  @return
 * its length or -EIO. */
int optimizer_stats_fmt(const struct optimizer *op, char *buf, size_t len);

#endif
