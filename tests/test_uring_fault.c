/* tests/test_uring_fault.c — the fault seam: fail the Nth op (once and
 * sticky), forced short I/O is resubmitted, -EAGAIN retried (and surfaced
 * past the bound), torn writes, and power-loss cuts that revert uncovered
 * writes and keep covered ones. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "uring/uring.h"
#include "uring/uring_fault.h"

#define SEC 4096

static int scratch(bool direct)
{
	char path[] = "uring_fault_XXXXXX";
	int fd = mkstemp(path);

	cr_assert(fd >= 0);
	if (direct) {
		int dfd = open(path, O_RDWR | O_DIRECT);

		close(fd);
		fd = dfd < 0 ? -errno : dfd;
	}
	unlink(path);
	return fd;
}

static struct uring *mk(int fd, bool direct)
{
	struct uring_opts o;
	struct uring *r;

	uring_opts_init(&o);
	o.direct = direct;
	o.nbufs = 4;
	cr_assert_eq(uring_create(fd, &o, &r), 0);
	return r;
}

static int rw(struct uring *r, enum uring_op op, void *buf, uint32_t len,
	      uint64_t off)
{
	struct uring_io io;

	uring_io_prep(&io, op, buf, len, off, NULL, NULL);
	return uring_run_sync(r, &io);
}

/* write `len` bytes of value v at off through the ring */
static int put(struct uring *r, uint8_t v, uint32_t len, uint64_t off)
{
	uint8_t *b = NULL;
	int ret;

	cr_assert(posix_memalign((void **)&b, SEC, len) == 0);
	memset(b, v, len);
	ret = rw(r, URING_OP_WRITE, b, len, off);
	free(b);
	return ret;
}

/* the byte at off, read around the ring (buffered) */
static uint8_t peek(int fd, uint64_t off)
{
	char path[64];
	uint8_t v = 0xEE;
	int bfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	bfd = open(path, O_RDONLY);
	cr_assert(bfd >= 0);
	if (pread(bfd, &v, 1, (off_t)off) != 1)
		v = 0xEE;
	close(bfd);
	return v;
}

static void preset(int fd, uint8_t v, size_t len)
{
	char path[64];
	uint8_t *b = malloc(len);
	int bfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	bfd = open(path, O_RDWR);
	memset(b, v, len);
	cr_assert_eq(pwrite(bfd, b, len, 0), (ssize_t)len);
	cr_assert_eq(fsync(bfd), 0);
	close(bfd);
	free(b);
}

Test(uring_fault, fail_nth_once_keeps_errno)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_fault_spec s = { .fail_kind = URING_OP_WRITE,
				      .fail_nth = 3, .fail_errno = ENOSPC };

	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 1, 100, 0), 100);
	cr_assert_eq(rw(r, URING_OP_FSYNC, NULL, 0, 0), 0, "fsyncs don't count");
	cr_assert_eq(put(r, 2, 100, 100), 100);
	cr_assert_eq(put(r, 3, 100, 200), -ENOSPC);
	cr_assert_eq(put(r, 4, 100, 300), 100, "once, not sticky");
	cr_assert_eq(peek(fd, 250), 0, "the failed write never reached the file");
	cr_assert_eq(uring_fault_count(r, URING_OP_WRITE), 4);
	cr_assert_eq(uring_fault_count(r, URING_OP_FSYNC), 1);
	cr_assert_eq(uring_fault_count(r, URING_FAULT_ANY), 5);
	s.fail_kind = 99;
	cr_assert_eq(uring_fault_arm(r, &s), -EINVAL);
	uring_destroy(r);
	close(fd);
}

Test(uring_fault, fail_sticky_from_then_on)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_fault_spec s = { .fail_kind = URING_OP_READ, .fail_nth = 2,
				      .fail_sticky = true };
	uint8_t b[64];

	cr_assert_eq(put(r, 9, 64, 0), 64);
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(rw(r, URING_OP_READ, b, 64, 0), 64);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(rw(r, URING_OP_READ, b, 64, 0), -EIO);
	cr_assert_eq(put(r, 9, 64, 0), 64, "writes unaffected");
	cr_assert_eq(uring_fault_arm(r, NULL), 0);
	cr_assert_eq(rw(r, URING_OP_READ, b, 64, 0), 64, "disarmed");
	uring_destroy(r);
	close(fd);
}

static void short_io(bool direct)
{
	int fd = scratch(direct);
	struct uring *r;
	struct uring_stats st;
	struct uring_fault_spec s = { 0 };
	uint8_t *w = NULL, *g = NULL;
	const uint32_t n = 64 * 1024;

	if (fd == -EINVAL)
		cr_skip_test("no O_DIRECT here");
	r = mk(fd, direct);
	cr_assert(posix_memalign((void **)&w, SEC, n) == 0);
	cr_assert(posix_memalign((void **)&g, SEC, n) == 0);
	for (uint32_t i = 0; i < n; i++)
		w[i] = (uint8_t)(i * 31 + 7);
	/* the write's first attempt gets 12 KiB, then its remainder; the
	 * read's first attempt 4 KiB */
	s.short_kind = URING_OP_WRITE;
	s.short_nth = 1;
	s.short_len = 3 * SEC;
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(rw(r, URING_OP_WRITE, w, n, 8 * SEC), (int)n);
	s.short_kind = URING_OP_READ;
	s.short_len = direct ? 100 : 1;   /* rounded to 4 KiB under direct */
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	memset(g, 0, n);
	cr_assert_eq(rw(r, URING_OP_READ, g, n, 8 * SEC), (int)n);
	cr_assert_eq(memcmp(w, g, n), 0);
	uring_stats(r, &st);
	cr_assert_eq(st.short_resubmits, 2, "resubmits %lu",
		     (unsigned long)st.short_resubmits);
	free(w);
	free(g);
	uring_destroy(r);
	close(fd);
}

Test(uring_fault, short_io_resubmitted_buffered) { short_io(false); }
Test(uring_fault, short_io_resubmitted_direct) { short_io(true); }

Test(uring_fault, eagain_retried_then_surfaced)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_stats st;
	struct uring_fault_spec s = { .eagain_kind = URING_OP_WRITE,
				      .eagain_nth = 1, .eagain_times = 3 };
	struct uring_io io;

	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 5, 4096, 0), 4096);
	uring_stats(r, &st);
	cr_assert_eq(st.eagain_retries, 3);
	cr_assert_eq(peek(fd, 4095), 5);
	/* more than the bound: the caller hears -EAGAIN */
	s.eagain_times = URING_RETRY_MAX + 1;
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 6, 4096, 0), -EAGAIN);
	/* NORETRY: the first -EAGAIN goes straight back */
	s.eagain_times = 1;
	s.eagain_kind = URING_OP_FSYNC;
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	uring_io_prep(&io, URING_OP_FSYNC, NULL, 0, 0, NULL, NULL);
	io.flags = URING_IO_NORETRY;
	cr_assert_eq(uring_run_sync(r, &io), -EAGAIN);
	uring_destroy(r);
	close(fd);
}

/* the fsync is held while the write before it is stuck in -EAGAIN retries:
 * it must complete after that write */
struct seqd {
	atomic_int clock;
	int write_at, fsync_at, write_res, fsync_res;
};

static void w_cb(struct uring_io *io, int res)
{
	struct seqd *d = io->arg;

	d->write_res = res;
	d->write_at = atomic_fetch_add(&d->clock, 1) + 1;
}

static void f_cb(struct uring_io *io, int res)
{
	struct seqd *d = io->arg;

	d->fsync_res = res;
	d->fsync_at = atomic_fetch_add(&d->clock, 1) + 1;
}

Test(uring_fault, fsync_waits_for_a_retried_write)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_fault_spec s = { .eagain_kind = URING_OP_WRITE,
				      .eagain_nth = 1,
				      .eagain_times = URING_RETRY_MAX };
	struct uring_io w, f;
	struct uring_io *v[2] = { &w, &f };
	struct seqd d = { 0 };
	uint8_t buf[512];

	memset(buf, 1, sizeof(buf));
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	uring_io_prep(&w, URING_OP_WRITE, buf, sizeof(buf), 0, w_cb, &d);
	uring_io_prep(&f, URING_OP_FSYNC, NULL, 0, 0, f_cb, &d);
	cr_assert_eq(uring_submit_many(r, v, 2), 0);
	while (atomic_load(&d.clock) < 2)
		usleep(100);
	cr_assert_eq(d.write_res, 512);
	cr_assert_eq(d.fsync_res, 0);
	cr_assert_lt(d.write_at, d.fsync_at);
	uring_destroy(r);
	close(fd);
}

Test(uring_fault, torn_write_keeps_only_chosen_sectors)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_fault_spec s = { .tear_nth = 2, .tear_keep_mask = 0x5 };

	preset(fd, 0x11, 8 * SEC);
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 0x22, SEC, 7 * SEC), SEC);
	/* sectors 0 and 2 of the 4 land; the write still says it worked */
	cr_assert_eq(put(r, 0x33, 4 * SEC, 0), 4 * SEC);
	cr_assert_eq(peek(fd, 0), 0x33);
	cr_assert_eq(peek(fd, SEC), 0x11);
	cr_assert_eq(peek(fd, 2 * SEC + 100), 0x33);
	cr_assert_eq(peek(fd, 4 * SEC - 1), 0x11);
	cr_assert_eq(peek(fd, 7 * SEC), 0x22);
	uring_destroy(r);
	close(fd);
}

/* power loss: A (fsynced) survives, B (not fsynced) is reverted, and from
 * the cut on every op fails -EIO */
static void cut_drop_all(bool direct)
{
	int fd = scratch(direct);
	struct uring *r;
	struct uring_fault_spec s = { .record = true };
	uint8_t b[SEC] __attribute__((aligned(SEC)));

	if (fd == -EINVAL)
		cr_skip_test("no O_DIRECT here");
	preset(fd, 0x00, 4 * SEC);
	r = mk(fd, direct);
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 0xA1, SEC, 0), SEC);
	cr_assert_eq(rw(r, URING_OP_FSYNC, NULL, 0, 0), 0);
	cr_assert_eq(uring_fault_uncovered(r), 0, "covered by the fsync");
	cr_assert_eq(put(r, 0xB2, SEC, SEC), SEC);
	cr_assert_eq(put(r, 0xC3, 2 * SEC, 2 * SEC), 2 * SEC);
	cr_assert_eq(uring_fault_uncovered(r), 2);
	cr_assert_eq(uring_fault_cut(r, URING_CUT_DROP_ALL, 1), 0);
	cr_assert(uring_fault_is_cut(r));
	cr_assert_eq(rw(r, URING_OP_READ, b, SEC, 0), -EIO, "device gone");
	cr_assert_eq(put(r, 0xD4, SEC, 0), -EIO);
	cr_assert_eq(rw(r, URING_OP_FSYNC, NULL, 0, 0), -EIO);
	uring_destroy(r);
	/* a fresh ring on the same file sees the post-crash state */
	r = mk(fd, direct);
	cr_assert_eq(rw(r, URING_OP_READ, b, SEC, 0), SEC);
	cr_assert_eq(b[0], 0xA1);
	cr_assert_eq(b[SEC - 1], 0xA1);
	cr_assert_eq(rw(r, URING_OP_READ, b, SEC, SEC), SEC);
	cr_assert_eq(b[0], 0x00, "uncovered write reverted");
	cr_assert_eq(rw(r, URING_OP_READ, b, SEC, 3 * SEC), SEC);
	cr_assert_eq(b[SEC - 1], 0x00);
	uring_destroy(r);
	close(fd);
}

Test(uring_fault, cut_drop_all_buffered) { cut_drop_all(false); }
Test(uring_fault, cut_drop_all_direct) { cut_drop_all(true); }

/* A writeback makes nothing durable: the seam neither counts it nor takes
 * it for an fsync; the write it started back is still lost to a cut. */
Test(uring_fault, writeback_is_not_durability)
{
	int fd = scratch(false);
	struct uring *r;
	struct uring_fault_spec s = { .record = true };
	uint8_t b[SEC] __attribute__((aligned(SEC)));
	uint64_t any;

	preset(fd, 0x00, 2 * SEC);
	r = mk(fd, false);
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 0xB2, SEC, SEC), SEC);
	any = uring_fault_count(r, URING_FAULT_ANY);
	cr_assert_eq(rw(r, URING_OP_WRITEBACK, NULL, 2 * SEC, 0), 0);
	cr_assert_eq(uring_fault_count(r, URING_FAULT_ANY), any);
	cr_assert_eq(uring_fault_uncovered(r), 1);
	cr_assert_eq(uring_fault_cut(r, URING_CUT_DROP_ALL, 1), 0);
	uring_destroy(r);
	r = mk(fd, false);
	cr_assert_eq(rw(r, URING_OP_READ, b, SEC, SEC), SEC);
	cr_assert_eq(b[0], 0x00, "written back, never synced: reverted");
	uring_destroy(r);
	close(fd);
}

/* RANDOM: every uncovered write is wholly old or wholly new, decided
 * independently; over seeds both outcomes happen */
Test(uring_fault, cut_random_is_per_write_and_seeded)
{
	int kept = 0, reverted = 0;
	uint8_t first[8] = { 0 };

	for (uint64_t seed = 1; seed <= 8; seed++) {
		int fd = scratch(false);
		struct uring *r = mk(fd, false);
		struct uring_fault_spec s = { .record = true };

		preset(fd, 0, 8 * 2 * SEC);
		cr_assert_eq(uring_fault_arm(r, &s), 0);
		for (int w = 0; w < 8; w++)
			cr_assert_eq(put(r, (uint8_t)(w + 1), 2 * SEC,
					 (uint64_t)w * 2 * SEC), 2 * SEC);
		cr_assert_eq(uring_fault_cut(r, URING_CUT_RANDOM, seed), 0);
		uring_destroy(r);
		for (int w = 0; w < 8; w++) {
			uint8_t a = peek(fd, (uint64_t)w * 2 * SEC);
			uint8_t z = peek(fd, (uint64_t)w * 2 * SEC + 2 * SEC - 1);

			cr_assert_eq(a, z, "write %d torn under RANDOM", w);
			cr_assert(a == 0 || a == w + 1);
			a ? kept++ : reverted++;
			if (seed == 1)
				first[w] = a;
		}
		close(fd);
	}
	cr_assert_gt(kept, 0);
	cr_assert_gt(reverted, 0);
	/* the same seed gives the same outcome */
	{
		int fd = scratch(false);
		struct uring *r = mk(fd, false);
		struct uring_fault_spec s = { .record = true };

		preset(fd, 0, 8 * 2 * SEC);
		cr_assert_eq(uring_fault_arm(r, &s), 0);
		for (int w = 0; w < 8; w++)
			put(r, (uint8_t)(w + 1), 2 * SEC, (uint64_t)w * 2 * SEC);
		cr_assert_eq(uring_fault_cut(r, URING_CUT_RANDOM, 1), 0);
		uring_destroy(r);
		for (int w = 0; w < 8; w++)
			cr_assert_eq(peek(fd, (uint64_t)w * 2 * SEC), first[w]);
		close(fd);
	}
}

/* TORN: each 4 KiB sector of an uncovered write is old or new on its own */
Test(uring_fault, cut_torn_mixes_sectors)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_fault_spec s = { .record = true };
	int old = 0, neu = 0;

	preset(fd, 0x10, 32 * SEC);
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	cr_assert_eq(put(r, 0x20, 32 * SEC, 0), 32 * SEC);
	cr_assert_eq(uring_fault_cut(r, URING_CUT_TORN, 42), 0);
	uring_destroy(r);
	for (int i = 0; i < 32; i++) {
		uint8_t a = peek(fd, (uint64_t)i * SEC);

		cr_assert_eq(peek(fd, (uint64_t)i * SEC + SEC - 1), a,
			     "a sector is atomic");
		cr_assert(a == 0x10 || a == 0x20);
		a == 0x10 ? old++ : neu++;
	}
	cr_assert_gt(old, 0);
	cr_assert_gt(neu, 0);
	close(fd);
}

/* overlapping uncovered writes: the result is a state some prefix-subset
 * of them could leave — never the older write's bytes over a newer kept
 * one */
Test(uring_fault, cut_overlapping_writes_never_resurrect_older)
{
	for (uint64_t seed = 1; seed <= 16; seed++) {
		int fd = scratch(false);
		struct uring *r = mk(fd, false);
		struct uring_fault_spec s = { .record = true };
		uint8_t a;

		preset(fd, 0x01, 2 * SEC);
		cr_assert_eq(uring_fault_arm(r, &s), 0);
		cr_assert_eq(put(r, 0x02, 2 * SEC, 0), 2 * SEC);
		cr_assert_eq(put(r, 0x03, 2 * SEC, 0), 2 * SEC);
		cr_assert_eq(uring_fault_cut(r, URING_CUT_RANDOM, seed), 0);
		uring_destroy(r);
		a = peek(fd, 0);
		cr_assert(a == 0x01 || a == 0x02 || a == 0x03, "got %x", a);
		cr_assert_eq(peek(fd, 2 * SEC - 1), a);
		close(fd);
	}
}

/* a cut armed for the Nth write, installed before the ring exists (the
 * engine creates its ring inside coil_open) */
Test(uring_fault, global_spec_and_cut_at_nth_op)
{
	int fd = scratch(false);
	struct uring *r;
	struct uring_fault_spec s = { .record = true,
				      .cut_kind = URING_OP_WRITE, .cut_nth = 3,
				      .cut_mode = URING_CUT_DROP_ALL };

	preset(fd, 0, 4 * SEC);
	uring_fault_set_next(&s);
	r = mk(fd, false);
	cr_assert_eq(uring_fault_last(), r);
	cr_assert_eq(put(r, 0x61, SEC, 0), SEC);
	cr_assert_eq(rw(r, URING_OP_FSYNC, NULL, 0, 0), 0);
	cr_assert_eq(put(r, 0x62, SEC, SEC), SEC);
	cr_assert_eq(put(r, 0x63, SEC, 2 * SEC), -EIO, "the cut point");
	cr_assert(uring_fault_is_cut(r));
	cr_assert_eq(put(r, 0x64, SEC, 3 * SEC), -EIO);
	uring_destroy(r);
	cr_assert_null(uring_fault_last());
	cr_assert_eq(peek(fd, 0), 0x61);
	cr_assert_eq(peek(fd, SEC), 0x00);
	cr_assert_eq(peek(fd, 2 * SEC), 0x00);
	cr_assert_eq(peek(fd, 3 * SEC), 0x00);
	/* consumed: the next ring is clean */
	r = mk(fd, false);
	cr_assert(!uring_fault_is_cut(r));
	cr_assert_eq(put(r, 0x65, SEC, 0), SEC);
	uring_destroy(r);
	close(fd);
}

/* the crash-test loop the engine will run: count a workload's ops, then cut
 * at every point and check the invariant (here: whatever was fsynced
 * before the cut point survives) */
static int workload(struct uring *r)
{
	int ret = 0;

	for (int i = 0; i < 6 && ret >= 0; i++) {
		ret = put(r, (uint8_t)(0x40 + i), SEC, (uint64_t)i * SEC);
		if (ret >= 0 && i % 2 == 1)
			ret = rw(r, URING_OP_FSYNC, NULL, 0, 0);
	}
	return ret;
}

Test(uring_fault, cut_at_every_point_of_a_workload)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	uint64_t total;

	cr_assert_eq(workload(r), 0);
	total = uring_fault_count(r, URING_FAULT_ANY);
	uring_destroy(r);
	close(fd);
	cr_assert_eq(total, 9);
	for (uint64_t n = 1; n <= total; n++) {
		struct uring_fault_spec s = { .record = true,
					      .cut_kind = URING_FAULT_ANY,
					      .cut_nth = n,
					      .cut_mode = URING_CUT_RANDOM,
					      .cut_seed = n };
		int synced;

		fd = scratch(false);
		preset(fd, 0, 6 * SEC);
		uring_fault_set_next(&s);
		r = mk(fd, false);
		cr_assert_eq(workload(r), -EIO);
		uring_destroy(r);
		/* ops: w0 w1 f w2 w3 f w4 w5 f — fsync k is op 3k */
		synced = (int)((n - 1) / 3) * 2;
		for (int i = 0; i < synced; i++)
			cr_assert_eq(peek(fd, (uint64_t)i * SEC), 0x40 + i,
				     "cut at %lu lost synced write %d",
				     (unsigned long)n, i);
		close(fd);
	}
}

/* a cut while 256 writes are in flight, none fsynced: with DROP_ALL the
 * file must come back exactly as it was, whichever writes had landed */
struct flight {
	atomic_int done;
	atomic_int eio;
};

static void flight_cb(struct uring_io *io, int res)
{
	struct flight *fl = io->arg;

	if (res == -EIO)
		atomic_fetch_add(&fl->eio, 1);
	atomic_fetch_add(&fl->done, 1);
}

Test(uring_fault, cut_with_writes_in_flight_reverts_all)
{
	int fd = scratch(false);
	struct uring *r = mk(fd, false);
	struct uring_fault_spec s = { .record = true };
	static struct uring_io ios[256];
	static uint8_t data[256][SEC];
	struct flight fl = { 0 };

	preset(fd, 0x77, 256 * SEC);
	cr_assert_eq(uring_fault_arm(r, &s), 0);
	for (int i = 0; i < 256; i++) {
		memset(data[i], i, SEC);
		uring_io_prep(&ios[i], URING_OP_WRITE, data[i], SEC,
			      (uint64_t)i * SEC, flight_cb, &fl);
		cr_assert_eq(uring_submit(r, &ios[i]), 0);
	}
	cr_assert_eq(uring_fault_cut(r, URING_CUT_DROP_ALL, 9), 0);
	uring_destroy(r);
	cr_assert_eq(atomic_load(&fl.done), 256);
	for (int i = 0; i < 256; i++) {
		cr_assert_eq(peek(fd, (uint64_t)i * SEC), 0x77, "write %d", i);
		cr_assert_eq(peek(fd, (uint64_t)i * SEC + SEC - 1), 0x77);
	}
	close(fd);
}

/* the cut started from a callback on the ring thread: it returns at once
 * and the revert happens when the writes in the kernel have landed */
struct cbcut {
	struct uring *r;
	int ret;
};

static void cut_from_cb(struct uring_io *io, int res)
{
	struct cbcut *c = io->arg;

	(void)res;
	c->ret = uring_fault_cut(c->r, URING_CUT_DROP_ALL, 1);
}

Test(uring_fault, cut_from_the_ring_thread)
{
	int fd = scratch(false);
	struct uring_fault_spec s = { .record = true };
	struct cbcut c = { 0 };
	struct uring_io nop;

	preset(fd, 0x01, 2 * SEC);
	c.r = mk(fd, false);
	c.ret = 1;
	cr_assert_eq(uring_fault_arm(c.r, &s), 0);
	cr_assert_eq(put(c.r, 0x02, SEC, 0), SEC);
	uring_io_prep(&nop, URING_OP_NOP, NULL, 0, 0, cut_from_cb, &c);
	cr_assert_eq(uring_submit(c.r, &nop), 0);
	while (!uring_fault_is_cut(c.r))
		usleep(100);
	cr_assert_eq(put(c.r, 0x03, SEC, SEC), -EIO);
	uring_destroy(c.r);
	cr_assert_eq(c.ret, 0);
	cr_assert_eq(peek(fd, 0), 0x01);
	cr_assert_eq(peek(fd, SEC), 0x01);
	close(fd);
}
