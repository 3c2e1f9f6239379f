/* tests/rel/rel.h — shared pieces of the reliability suite
 * (docs/reliability.md).
 *
 * Every test of the suite derives its data from (seed, key, version), so no
 * copy of what was written is needed to check what comes back: rel_ident()
 * names the version a buffer holds, or says that it holds none (torn or
 * wrong bytes).  A "key" is a slot: a fixed byte range of one object, always
 * written whole, so after any crash a slot must hold exactly one version.
 *
 * Environment (read once per process):
 *   COIL_REL_SEED   the run's seed (decimal or 0x hex); printed by every
 *                   test so a failure can be replayed exactly
 *   COIL_REL_SCALE  multiplies every count (default 1; e.g. 0.3 for the
 *                   ASan pass, 20 for a soak)
 *
 * Each test prints one line per row of the table in docs/reliability.md:
 *   rel: <row> <unit>=<count> violations=<n> seed=0x...
 */
#ifndef COIL_TESTS_REL_H
#define COIL_TESTS_REL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coil.h"

/* ---- run parameters ---- */
uint64_t rel_seed(void);
double rel_scale(void);
/* base * scale, at least @min */
uint64_t rel_scaled(uint64_t base, uint64_t min);
/* Print the replay hint for @test (the criterion test name). */
void rel_announce(const char *test, uint64_t seed);
/* The row's summary line (stderr). */
void rel_report(const char *row, const char *unit, uint64_t count,
		uint64_t violations, uint64_t seed);

/* ---- randomness ---- */
uint64_t rel_mix(uint64_t x);           /* splitmix64 finalizer */
uint64_t rel_rng(uint64_t *state);      /* next value of a splitmix64 stream */
/* Does the kill tests' cycle @cycle (drawing @r) kill its child early,
 * from the fork (often inside open and recovery), rather than after the
 * child has opened and got to work?  A third of the cycles by @r, never the
 * first: with few cycles (the sanitizer pass runs 5) a seed could draw
 * every kill early, and a run whose children all died before they wrote
 * checks nothing. */
bool rel_kill_early(uint64_t r, uint64_t cycle);

/* ---- data ---- */
/* Fill @p with the bytes of version @ver (>= 1) of @key.  The mix of
 * compressible and random sectors depends on the version, so the same slot
 * alternates between zstd and raw blobs. */
void rel_fill(uint8_t *p, size_t len, uint64_t seed, uint32_t key,
	      uint64_t ver);
#define REL_ABSENT 0ull          /* the slot reads as all zeros */
#define REL_WRONG UINT64_MAX     /* bytes of no version: torn or wrong */
/* The version @p holds, REL_ABSENT, or REL_WRONG.  @scratch: len bytes. */
uint64_t rel_ident(const uint8_t *p, size_t len, uint64_t seed, uint32_t key,
		   uint8_t *scratch);

/* ---- stores ---- */
/* A store path under the test's working directory (the build dir: a real
 * filesystem, so O_DIRECT works), removed first. */
void rel_path(char *buf, size_t len, const char *tag);
/* Options for a small test store: @size bytes, 2 workers, zstd:1. */
void rel_opts(struct coil_options *o, uint64_t size);

/* ---- the slot model ---- */
#define REL_OBJS_MAX 4
#define REL_SLOTS_MAX 32

struct rel_slot {
	uint32_t obj;            /* object index: name "rel-<obj>" */
	uint64_t off;
	uint32_t len;
};

struct rel_layout {
	uint32_t nobj;
	uint32_t nslots;
	struct rel_slot slot[REL_SLOTS_MAX];
};

/* What the writer knows about each slot.  Lives in shared memory for the
 * kill test (the parent reads what the dead child wrote), so plain words
 * written in order: submitted before the write, completed after it. */
struct rel_track {
	_Atomic uint64_t submitted[REL_SLOTS_MAX]; /* highest version issued */
	_Atomic uint64_t completed[REL_SLOTS_MAX]; /* highest version acked */
	_Atomic uint64_t durable[REL_SLOTS_MAX];   /* acked before an ok flush */
	_Atomic uint64_t opened;                   /* children past coil_open */
};

/* @nslots slots over @nobj objects with sizes from 512 B to ~200 KiB (one
 * to four 64 KiB blobs, unaligned ends), derived from @seed. */
void rel_layout_make(struct rel_layout *l, uint64_t seed, uint32_t nobj,
		     uint32_t nslots);
/* The largest slot. */
uint32_t rel_layout_maxlen(const struct rel_layout *l);
/* Create the store and its objects. @return 0 or -errno. */
int rel_store_create(const char *path, const struct coil_options *o,
		     const struct rel_layout *l);
/* Open every object of @l into h[] (no create). */
int rel_objs_open(coil_store *s, const struct rel_layout *l, coil_obj **h);
void rel_objs_close(const struct rel_layout *l, coil_obj **h);

/* Write the next version of @slot (sync).  Updates @t.  @buf: slot bytes.
 * @return the coil_pwrite result. */
int64_t rel_slot_write(coil_obj **h, const struct rel_layout *l,
		       struct rel_track *t, uint64_t seed, uint32_t slot,
		       uint8_t *buf);
/* coil_sync, and on success raise durable[] to what completed before it. */
int rel_sync(coil_store *s, const struct rel_layout *l, struct rel_track *t);

/* Which floor a check holds a slot to. */
enum rel_floor {
	REL_FLOOR_NONE,       /* any version (or absent) is fine */
	REL_FLOOR_DURABLE,    /* at least durable[] (power loss) */
	REL_FLOOR_COMPLETED,  /* at least completed[] (kill -9, clean close) */
};

#define REL_CHECK_REBASE   0x1u /* the track becomes what was found (the
				     * base of the next cycle) */
#define REL_CHECK_ERR_OK   0x2u /* a read may fail with a negative errno
				     * (faults are being injected): I3 only */
/* Check every slot through an open store: the read must succeed, the bytes
 * must be exactly one version v (or absent) with floor <= v <= submitted.
 * Prints each violation with @what.  @errs (may be NULL) counts reads that
 * failed under REL_CHECK_ERR_OK.  @return violations. */
unsigned rel_check_slots(coil_store *s, const struct rel_layout *l,
			 struct rel_track *t, uint64_t seed,
			 enum rel_floor floor, unsigned flags, const char *what,
			 unsigned *errs);

/* One scripted session: open, @nwrites whole-slot writes (slots from
 * @wseed, so the same I/O sequence every time), rel_sync every @sync_every,
 * stop at the first error; with @check, read every slot back before close
 * (REL_CHECK_ERR_OK).  Counts ops through the fault seam. */
struct rel_session {
	int open_rc;
	int first_err;          /* first failed write or sync, 0 if none */
	int close_rc;
	bool cut_before_close;  /* a seam power cut happened (or open failed) */
	uint64_t ops;           /* ring ops issued before close */
	uint64_t fsyncs;        /* fsyncs issued before close */
	unsigned bad;           /* violations seen by the in-session check */
	unsigned read_errs;     /* reads that failed in the in-session check */
};
void rel_session_run(const char *path, const struct coil_options *o,
		     const struct rel_layout *l, struct rel_track *t,
		     uint64_t seed, uint64_t wseed, unsigned nwrites,
		     unsigned sync_every, bool check, uint8_t *buf,
		     struct rel_session *out);
/* Open @path (I4: must open), rel_check_slots with REL_CHECK_REBASE,
 * close.  @return violations (an open failure counts as one). */
unsigned rel_verify(const char *path, const struct coil_options *o,
		    const struct rel_layout *l, struct rel_track *t,
		    uint64_t seed, enum rel_floor floor, const char *what);
/* The same through a COIL_RDONLY open: recovery runs in memory only and
 * nothing is written (cheap; the next read-write open redoes it). */
unsigned rel_verify_ro(const char *path, const struct coil_options *o,
		       const struct rel_layout *l, struct rel_track *t,
		       uint64_t seed, enum rel_floor floor, const char *what);

/* A whole store file held in memory, to put it back between trials. */
struct rel_image {
	uint8_t *buf;   /* 4 KiB aligned */
	size_t size;
};
int rel_image_load(struct rel_image *img, const char *path);
/* Make @path equal to @img again, writing (O_DIRECT, so the store's own
 * O_DIRECT reads see it and no page cache piles up) only the 4 KiB blocks
 * that differ.  @return blocks written or -errno. */
int64_t rel_image_restore(const struct rel_image *img, const char *path);
void rel_image_free(struct rel_image *img);

/* The next ring records its ops (uring_fault.h) and, with @nth > 0, cuts
 * power at its @nth op of any kind: @mode 1 drop all, 2 random, 3 torn,
 * @seed for the random choices. */
void rel_fault_arm(uint64_t nth, int mode, uint64_t seed);
/* Reopen @path with a cut at a random op (1..@span) of its recovery (the
 * caller's verify must then still open it); *@cuts counts the opens the
 * cut reached or failed. */
void rel_cut_recovery(const char *path, const struct coil_options *o,
		      uint64_t *st, uint32_t span, uint64_t *cuts);

#endif
