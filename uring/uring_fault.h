/* uring/uring_fault.h — the fault seam (test builds only).
 *
 * The implementation is compiled only with -DCOIL_FAULT_SEAM (the
 * coil_test_internal archive); the shipped library has none of it, so only
 * tests may call these.  The struct uring_io layout is the same either way.
 *
 * Counting: every op is counted once, when its first attempt is issued (a
 * short-I/O remainder or an -EAGAIN retry is not a new op).  "nth" in a spec
 * is relative to the moment the spec is armed: 1 = the next op of that kind.
 * A spec installed with uring_fault_set_next() is armed when the next ring is
 * created, so nth there counts from the ring's first op.
 *
 * Power loss: with spec.record set, the seam reads the pre-image of every
 * write/discard (pread on the ring thread, before issue) and keeps it until
 * an fsync issued after that write completed has itself completed.  A cut
 * stops all I/O — every later op (and every op still in flight) completes
 * with -EIO, as if the device vanished — waits for writes already in the
 * kernel to land, then for each uncovered write independently:
 *   URING_CUT_DROP_ALL  reverts it;
 *   URING_CUT_RANDOM    keeps or reverts it (coin flip from seed);
 *   URING_CUT_TORN      reverts a random subset of its 4 KiB sectors.
 * Reverts go newest first and never undo bytes of a newer write that was
 * kept, so the file is a state a real device could have left.  Bytes a write
 * added past the old end of file revert to zeros (the size stays).
 * Model: SQLite src/test6.c, RocksDB FaultInjectionTestFS.
 */
#ifndef COIL_URING_FAULT_H
#define COIL_URING_FAULT_H

#include "uring/uring.h"

/* kinds for specs and counts: the enum uring_op values, or 0 = any op */
#define URING_FAULT_ANY 0

enum uring_cut_mode {
	URING_CUT_DROP_ALL = 1,
	URING_CUT_RANDOM,
	URING_CUT_TORN,
};

struct uring_fault_spec {
	/* fail the fail_nth op of fail_kind with -fail_errno (positive errno,
	 * 0 = EIO), without issuing it; sticky: every later op of that kind
	 * fails too */
	uint8_t fail_kind;
	uint64_t fail_nth;      /* 0 = off */
	int fail_errno;
	bool fail_sticky;

	/* the short_nth read/write of short_kind (0 = either): its first
	 * attempt asks the kernel for only short_len bytes (0 = half, at least
	 * 1; rounded down to 4096 under direct, and then at least 4096), so
	 * the module must resubmit the remainder */
	uint8_t short_kind;
	uint64_t short_nth;
	uint32_t short_len;

	/* the eagain_nth op of eagain_kind completes -EAGAIN eagain_times
	 * times in a row (0 = once) before it is really issued; more than
	 * the module's retry bound (URING_RETRY_MAX) surfaces -EAGAIN */
	uint8_t eagain_kind;
	uint64_t eagain_nth;
	unsigned eagain_times;

	/* tear the tear_nth write: only the 4 KiB sectors of it whose bit is
	 * set in tear_keep_mask (bit i = i-th 4 KiB-aligned sector the write
	 * touches) reach the file; the write still reports success (a device
	 * that lies) */
	uint64_t tear_nth;
	uint64_t tear_keep_mask;

	/* power loss: record uncovered writes (see top) */
	bool record;

	/* cut automatically when the cut_nth op of cut_kind is issued (that
	 * op itself fails -EIO and does not reach the file) */
	uint8_t cut_kind;
	uint64_t cut_nth;       /* 0 = off */
	int cut_mode;           /* enum uring_cut_mode */
	uint64_t cut_seed;
};

/* Replace r's spec.  Any thread.  @return 0 or -EINVAL. */
int uring_fault_arm(struct uring *r, const struct uring_fault_spec *spec);
/* Ops of kind (URING_FAULT_ANY or an enum uring_op) issued since creation. */
uint64_t uring_fault_count(struct uring *r, unsigned kind);
/* Uncovered writes currently recorded (power loss). */
unsigned uring_fault_uncovered(struct uring *r);
/* Cut now (see top).  From a non-ring thread it returns once the reverts are
 * done; from the ring thread (a cb) it only starts the cut, and the reverts
 * happen as soon as the writes in the kernel have landed (at the latest in
 * uring_destroy).  A second cut is a no-op.  @return 0 or -errno. */
int uring_fault_cut(struct uring *r, int mode, uint64_t seed);
/* true once a cut has started */
bool uring_fault_is_cut(struct uring *r);

/* Process-global hooks for tests that do not create the ring themselves (the
 * engine creates it inside coil_open): the next uring_create() arms a copy
 * of spec (NULL clears); uring_fault_last() is the most recently created ring
 * still alive, or NULL. */
void uring_fault_set_next(const struct uring_fault_spec *spec);
struct uring *uring_fault_last(void);

#endif
