/* tests/test_uring.c — the ring: reads/writes of every size and alignment
 * (buffered and O_DIRECT), EOF, argument checks, fsync ordering, the inbox
 * under many producers, the buffer pool, destroy draining in-flight work. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "uring/uring.h"

/* a scratch file in the working directory (the build dir: a real
 * filesystem, so O_DIRECT works; /tmp may be tmpfs) */
static int tmpfile_open(bool direct)
{
	char path[] = "uring_test_XXXXXX";
	int fd = mkstemp(path);

	cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
	if (direct) {
		int dfd = open(path, O_RDWR | O_DIRECT);

		close(fd);
		fd = dfd;
		if (fd < 0) {
			unlink(path);
			return -errno;
		}
	}
	unlink(path);
	return fd;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(seed >> 56);
	}
}

static struct uring *ring_make(int fd, bool direct, unsigned inbox_max)
{
	struct uring_opts o;
	struct uring *r = NULL;

	uring_opts_init(&o);
	o.direct = direct;
	o.nbufs = 8;
	o.buf_size = 256 * 1024;
	if (inbox_max)
		o.inbox_max = inbox_max;
	cr_assert_eq(uring_create(fd, &o, &r), 0);
	cr_assert_not_null(r);
	return r;
}

static int io_sync(struct uring *r, enum uring_op op, void *buf, uint32_t len,
		   uint64_t off)
{
	struct uring_io io;

	uring_io_prep(&io, op, buf, len, off, NULL, NULL);
	return uring_run_sync(r, &io);
}

Test(uring, create_defaults_and_stats)
{
	int fd = tmpfile_open(false);
	struct uring *r = NULL;
	struct uring_stats st;

	cr_assert_eq(uring_create(fd, NULL, &r), 0);
	cr_assert(uring_dio_align(r) >= 512);
	cr_assert(uring_buf_size(r) >= 65536);
	cr_assert(!uring_on_ring_thread(r));
	cr_assert_eq(io_sync(r, URING_OP_NOP, NULL, 0, 0), 0);
	uring_stats(r, &st);
	cr_assert_eq(st.ops[URING_OP_NOP], 1);
	cr_assert(st.fixed_file);
	cr_assert(st.fixed_bufs);
	uring_destroy(r);
	uring_destroy(NULL);
	cr_assert_eq(uring_create(-1, NULL, &r), -EINVAL);
	close(fd);
}

Test(uring, rejects_malformed_io)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, true, 0);
	uint8_t *b = uring_buf_get(r);
	struct uring_io io;
	struct uring_io *many[2];

	uring_io_prep(&io, URING_OP_READ, b, 4096, 0, NULL, NULL);
	cr_assert_eq(uring_submit(r, &io), -EINVAL, "NULL cb");
	cr_assert_eq(io_sync(r, 0, b, 4096, 0), -EINVAL);
	cr_assert_eq(io_sync(r, 99, b, 4096, 0), -EINVAL);
	cr_assert_eq(io_sync(r, URING_OP_READ, b, 0, 0), -EINVAL);
	cr_assert_eq(io_sync(r, URING_OP_READ, NULL, 4096, 0), -EINVAL);
	/* direct: buffer, offset and length must be aligned */
	cr_assert_eq(io_sync(r, URING_OP_READ, b + 1, 4096, 0), -EINVAL);
	cr_assert_eq(io_sync(r, URING_OP_READ, b, 4096, 100), -EINVAL);
	cr_assert_eq(io_sync(r, URING_OP_WRITE, b, 4000, 0), -EINVAL);
	cr_assert_eq(io_sync(r, URING_OP_DISCARD, NULL, 4096, UINT64_MAX - 10),
		     -EINVAL);
	cr_assert_eq(uring_submit(NULL, &io), -EINVAL);
	/* one bad io in a batch: nothing is posted */
	many[0] = &io;
	many[1] = NULL;
	cr_assert_eq(uring_submit_many(r, many, 2), -EINVAL);
	cr_assert_eq(uring_submit_many(r, NULL, 0), 0);
	uring_buf_put(r, b);
	uring_destroy(r);
	close(fd);
}

/* every size from 1 byte up, at odd offsets and odd buffer addresses */
Test(uring, rw_every_size_and_alignment_buffered)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 0);
	const size_t max = 300 * 1024;
	uint8_t *src = malloc(max + 64), *dst = malloc(max + 64);
	uint8_t *chk = malloc(max);
	static const uint32_t sizes[] = { 1, 2, 3, 511, 512, 513, 4095, 4096,
					  4097, 8191, 65536, 65537, 131071,
					  262144, 300 * 1024 };
	static const uint64_t offs[] = { 0, 1, 511, 4096, 4097, 1048575 };
	uint64_t seed = 1;

	for (size_t s = 0; s < COIL_ARRAY_LEN(sizes); s++)
		for (size_t o = 0; o < COIL_ARRAY_LEN(offs); o++) {
			uint32_t n = sizes[s];
			size_t mis = (s + o) % 13;

			fill(src + mis, n, seed++);
			cr_assert_eq(io_sync(r, URING_OP_WRITE, src + mis, n,
					     offs[o]), (int)n);
			cr_assert_eq(pread(fd, chk, n, (off_t)offs[o]), (ssize_t)n);
			cr_assert_eq(memcmp(chk, src + mis, n), 0,
				     "write size %u off %lu", n,
				     (unsigned long)offs[o]);
			memset(dst, 0xAA, max + 64);
			cr_assert_eq(io_sync(r, URING_OP_READ, dst + 3, n,
					     offs[o]), (int)n);
			cr_assert_eq(memcmp(dst + 3, src + mis, n), 0);
			cr_assert_eq(dst[2], 0xAA);
			cr_assert_eq(dst[3 + n], 0xAA, "no overrun");
		}
	free(src);
	free(dst);
	free(chk);
	uring_destroy(r);
	close(fd);
}

/* O_DIRECT: every multiple of 4 KiB up to 256 KiB through registered
 * buffers (READ/WRITE_FIXED), and larger I/O from a plain aligned buffer */
Test(uring, rw_direct_fixed_and_plain)
{
	int fd = tmpfile_open(true);
	struct uring *r;
	struct uring_stats st;
	uint8_t *b, *big = NULL, *chk = NULL;
	uint32_t a;

	if (fd == -EINVAL)
		cr_skip_test("filesystem without O_DIRECT");
	cr_assert(fd >= 0);
	r = ring_make(fd, true, 0);
	a = uring_dio_align(r);
	b = uring_buf_get(r);
	cr_assert_not_null(b);
	cr_assert_eq((uintptr_t)b % a, 0);
	cr_assert(posix_memalign((void **)&chk, 4096, 1 << 20) == 0);
	cr_assert(posix_memalign((void **)&big, 4096, 1 << 20) == 0);
	for (uint32_t n = 4096; n <= uring_buf_size(r); n += 4096) {
		uint64_t off = (uint64_t)(n / 4096 % 7) * 8192 + 4096;

		fill(b, n, n);
		cr_assert_eq(io_sync(r, URING_OP_WRITE, b, n, off), (int)n);
		memset(b, 0, n);
		cr_assert_eq(io_sync(r, URING_OP_READ, b, n, off), (int)n);
		fill(chk, n, n);
		cr_assert_eq(memcmp(b, chk, n), 0, "size %u", n);
	}
	uring_stats(r, &st);
	cr_assert(st.fixed_ios >= 2 * 64, "fixed ios %lu",
		  (unsigned long)st.fixed_ios);
	/* 1 MiB from a non-registered buffer */
	fill(big, 1 << 20, 77);
	cr_assert_eq(io_sync(r, URING_OP_WRITE, big, 1 << 20, 1 << 20), 1 << 20);
	memset(chk, 0, 1 << 20);
	cr_assert_eq(io_sync(r, URING_OP_READ, chk, 1 << 20, 1 << 20), 1 << 20);
	cr_assert_eq(memcmp(big, chk, 1 << 20), 0);
	cr_assert_eq(io_sync(r, URING_OP_FSYNC, NULL, 0, 0), 0);
	uring_buf_put(r, b);
	free(big);
	free(chk);
	uring_destroy(r);
	close(fd);
}

/* URING_IO_BUFFERED on an O_DIRECT ring: writes of any alignment through
 * the page cache, read back exactly by a direct read (the kernel keeps the
 * two coherent), by a buffered read, and covered by an fsync. */
Test(uring, buffered_writes_beside_direct)
{
	int fd = tmpfile_open(true);
	struct uring *r;
	struct uring_io io;
	uint8_t *b = NULL, *chk = NULL;

	if (fd == -EINVAL)
		cr_skip_test("filesystem without O_DIRECT");
	cr_assert(fd >= 0);
	r = ring_make(fd, true, 0);
	cr_assert(posix_memalign((void **)&b, 4096, 65536) == 0);
	cr_assert(posix_memalign((void **)&chk, 4096, 65536) == 0);
	/* an unaligned buffered write is accepted; direct it is -EINVAL */
	fill(b, 65536, 9);
	uring_io_prep(&io, URING_OP_WRITE, b + 1, 5000, 123, NULL, NULL);
	cr_assert_eq(uring_run_sync(r, &io), -EINVAL);
	uring_io_prep(&io, URING_OP_WRITE, b + 1, 5000, 123, NULL, NULL);
	io.flags = URING_IO_BUFFERED;
	cr_assert_eq(uring_run_sync(r, &io), 5000);
	/* a block-aligned one, then read back both ways */
	uring_io_prep(&io, URING_OP_WRITE, b, 16384, 8192, NULL, NULL);
	io.flags = URING_IO_BUFFERED;
	cr_assert_eq(uring_run_sync(r, &io), 16384);
	cr_assert_eq(io_sync(r, URING_OP_FSYNC, NULL, 0, 0), 0);
	memset(chk, 0, 65536);
	cr_assert_eq(io_sync(r, URING_OP_READ, chk, 24576, 0), 24576);
	cr_assert_eq(memcmp(chk + 123, b + 1, 5000), 0);
	cr_assert_eq(memcmp(chk + 8192, b, 16384), 0);
	memset(chk, 0, 65536);
	uring_io_prep(&io, URING_OP_READ, chk + 3, 100, 8192 + 7, NULL, NULL);
	io.flags = URING_IO_BUFFERED;
	cr_assert_eq(uring_run_sync(r, &io), 100);
	cr_assert_eq(memcmp(chk + 3, b + 7, 100), 0);
	free(b);
	free(chk);
	uring_destroy(r);
	close(fd);
}

/* URING_OP_WRITEBACK starts the page cache's writeback of a range of the
 * buffered descriptor: 0 on success, counted in the stats; a range the
 * kernel cannot take is -EINVAL before it gets there; the bytes written
 * read back the same. */
Test(uring, writeback_of_buffered_writes)
{
	int fd = tmpfile_open(false);
	struct uring *r;
	struct uring_io io;
	struct uring_stats st0, st1;
	static uint8_t b[65536], chk[65536];

	cr_assert(fd >= 0);
	r = ring_make(fd, false, 0);
	fill(b, sizeof(b), 21);
	uring_io_prep(&io, URING_OP_WRITE, b, sizeof(b), 0, NULL, NULL);
	io.flags = URING_IO_BUFFERED;
	cr_assert_eq(uring_run_sync(r, &io), (int)sizeof(b));
	uring_stats(r, &st0);
	cr_assert_eq(io_sync(r, URING_OP_WRITEBACK, NULL, sizeof(b), 0), 0);
	cr_assert_eq(io_sync(r, URING_OP_WRITEBACK, NULL, 0, 0), -EINVAL);
	cr_assert_eq(io_sync(r, URING_OP_WRITEBACK, NULL, 4096, UINT64_MAX - 100),
		     -EINVAL);
	uring_stats(r, &st1);
	cr_assert_eq(st1.ops[URING_OP_WRITEBACK] - st0.ops[URING_OP_WRITEBACK], 1);
	cr_assert_str_eq(uring_op_name(URING_OP_WRITEBACK), "writeback");
	cr_assert_eq(io_sync(r, URING_OP_READ, chk, sizeof(chk), 0),
		     (int)sizeof(chk));
	cr_assert_eq(memcmp(b, chk, sizeof(b)), 0);
	uring_destroy(r);
	close(fd);
}

/* Caller regions (uring_opts.xreg) go out as READ/WRITE_FIXED, at
 * any offset inside them, and round-trip exactly; a bad region is -EINVAL. */
Test(uring, caller_regions_are_fixed)
{
	int fd = tmpfile_open(true);
	struct uring_opts o;
	struct uring_stats st0, st1;
	struct uring *r = NULL;
	uint8_t *reg = NULL, *chk = NULL;
	const size_t rlen = 256 * 1024;

	if (fd == -EINVAL)
		cr_skip_test("filesystem without O_DIRECT");
	cr_assert(fd >= 0);
	cr_assert(posix_memalign((void **)&reg, 4096, rlen) == 0);
	cr_assert(posix_memalign((void **)&chk, 4096, rlen) == 0);
	uring_opts_init(&o);
	o.direct = true;
	o.nbufs = 2;
	o.buf_size = 65536;
	o.nxreg = URING_XREG_MAX + 1;
	o.xreg[0].base = reg;
	o.xreg[0].len = rlen;
	cr_assert_eq(uring_create(fd, &o, &r), -EINVAL);
	o.nxreg = 1;
	o.xreg[0].len = 0;
	cr_assert_eq(uring_create(fd, &o, &r), -EINVAL);
	o.xreg[0].len = rlen;
	cr_assert_eq(uring_create(fd, &o, &r), 0);
	uring_stats(r, &st0);
	cr_assert(st0.fixed_bufs, "registration failed (memlock?)");
	/* registered when an I/O first uses it, not at setup */
	cr_assert_eq(st0.lazy_regs, 0);
	/* every 4 KiB-aligned piece of the region, ending at its last byte */
	for (size_t at = 0; at < rlen; at += 60 * 1024) {
		uint32_t n = (uint32_t)COIL_MIN((size_t)64 * 1024, rlen - at);

		fill(reg + at, n, at + 1);
		cr_assert_eq(io_sync(r, URING_OP_WRITE, reg + at, n, at), (int)n);
	}
	memset(reg, 0, rlen);
	cr_assert_eq(io_sync(r, URING_OP_READ, reg, (uint32_t)rlen, 0),
		     (int)rlen);
	for (size_t at = 0; at < rlen; at += 60 * 1024)
		fill(chk + at, COIL_MIN((size_t)64 * 1024, rlen - at), at + 1);
	cr_assert_eq(memcmp(reg, chk, rlen), 0);
	uring_stats(r, &st1);
	cr_assert_eq(st1.fixed_ios - st0.fixed_ios, 6, "fixed ios %lu",
		     (unsigned long)(st1.fixed_ios - st0.fixed_ios));
	/* the region once; the pool's slices were never used */
	cr_assert_eq(st1.lazy_regs, 1, "lazy registrations %lu",
		     (unsigned long)st1.lazy_regs);
	uring_destroy(r);
	free(reg);
	free(chk);
	close(fd);
}

Test(uring, read_at_eof_is_short_not_a_loop)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 0);
	uint8_t buf[16384];

	memset(buf, 7, sizeof(buf));
	cr_assert_eq(pwrite(fd, buf, 10000, 0), 10000);
	cr_assert_eq(io_sync(r, URING_OP_READ, buf, 16384, 0), 10000);
	cr_assert_eq(io_sync(r, URING_OP_READ, buf, 16384, 20000), 0);
	uring_destroy(r);
	close(fd);
}

Test(uring, discard_punches_a_hole)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 0);
	uint8_t buf[3 * 4096], z[4096] = { 0 };
	int ret;

	memset(buf, 0x5A, sizeof(buf));
	cr_assert_eq(pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ret = io_sync(r, URING_OP_DISCARD, NULL, 4096, 4096);
	if (ret == -EOPNOTSUPP)
		cr_skip_test("filesystem without punch hole");
	cr_assert_eq(ret, 0);
	cr_assert_eq(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	cr_assert_eq(memcmp(buf + 4096, z, 4096), 0);
	cr_assert_eq(buf[0], 0x5A);
	cr_assert_eq(buf[8192], 0x5A);
	cr_assert_eq(lseek(fd, 0, SEEK_END), (off_t)sizeof(buf), "KEEP_SIZE");
	uring_destroy(r);
	close(fd);
}

/* ---- callbacks on the ring thread -------------------------------------- */

struct ctx {
	struct uring *r;
	atomic_int done;
	atomic_int bad;
	int res_nested;
};

static void nested_cb(struct uring_io *io, int res)
{
	struct ctx *c = io->arg;

	if (res != 0 || !uring_on_ring_thread(c->r))
		atomic_fetch_add(&c->bad, 1);
	atomic_fetch_add(&c->done, 1);
}

static void outer_cb(struct uring_io *io, int res)
{
	struct ctx *c = io->arg;
	struct uring_io tmp;

	/* run_sync from the ring thread would deadlock: refused */
	uring_io_prep(&tmp, URING_OP_NOP, NULL, 0, 0, NULL, NULL);
	c->res_nested = uring_run_sync(c->r, &tmp);
	if (res != 0)
		atomic_fetch_add(&c->bad, 1);
	/* resubmitting from a cb queues locally and never blocks */
	uring_io_prep(io, URING_OP_NOP, NULL, 0, 0, nested_cb, c);
	if (uring_submit(c->r, io) != 0)
		atomic_fetch_add(&c->bad, 1);
}

Test(uring, callbacks_run_on_ring_thread_and_may_resubmit)
{
	int fd = tmpfile_open(false);
	struct ctx c = { 0 };
	struct uring_io io;

	c.r = ring_make(fd, false, 0);
	uring_io_prep(&io, URING_OP_NOP, NULL, 0, 0, outer_cb, &c);
	cr_assert_eq(uring_submit(c.r, &io), 0);
	while (atomic_load(&c.done) < 1)
		usleep(100);
	cr_assert_eq(c.res_nested, -EDEADLK);
	cr_assert_eq(atomic_load(&c.bad), 0);
	uring_destroy(c.r);
	close(fd);
}

/* ---- fsync ordering ---------------------------------------------------- */

#define ORD_N 64

struct ord {
	atomic_int seq;
	int done_at[ORD_N + 1];
	int res[ORD_N + 1];
};

struct ord_io {
	struct uring_io io;
	struct ord *o;
	int idx;
};

static void ordio_cb(struct uring_io *io, int res)
{
	struct ord_io *x = (struct ord_io *)io;

	x->o->res[x->idx] = res;
	x->o->done_at[x->idx] = atomic_fetch_add(&x->o->seq, 1) + 1;
}

/* 64 writes then an fsync in one batch: the fsync must not finish before
 * any of them (it is held until they complete) */
Test(uring, fsync_completes_after_every_earlier_write)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 0);
	static struct ord_io ios[ORD_N + 1];
	struct uring_io *p[ORD_N + 1];
	struct uring_stats st;
	struct ord o = { 0 };
	static uint8_t data[ORD_N][65536];

	for (int round = 0; round < 4; round++) {
		memset(&o, 0, sizeof(o));
		for (int i = 0; i < ORD_N; i++) {
			uring_io_prep(&ios[i].io, URING_OP_WRITE, data[i],
				      sizeof(data[i]), (uint64_t)i * 65536,
				      ordio_cb, NULL);
			ios[i].o = &o;
			ios[i].idx = i;
			p[i] = &ios[i].io;
		}
		uring_io_prep(&ios[ORD_N].io, URING_OP_FSYNC, NULL, 0, 0,
			      ordio_cb, NULL);
		ios[ORD_N].o = &o;
		ios[ORD_N].idx = ORD_N;
		p[ORD_N] = &ios[ORD_N].io;
		cr_assert_eq(uring_submit_many(r, p, ORD_N + 1), 0);
		while (atomic_load(&o.seq) < ORD_N + 1)
			usleep(100);
		for (int i = 0; i < ORD_N; i++) {
			cr_assert_eq(o.res[i], 65536);
			cr_assert_lt(o.done_at[i], o.done_at[ORD_N]);
		}
		cr_assert_eq(o.res[ORD_N], 0);
	}
	uring_stats(r, &st);
	cr_assert(st.fsync_held >= 1, "the barrier was exercised");
	uring_destroy(r);
	close(fd);
}

/* ---- many producers ---------------------------------------------------- */

#define PROD_THREADS 12
#define PROD_OPS 3000

struct prod {
	struct uring *r;
	int fd;
	atomic_long sum;
	atomic_int done;
	atomic_int bad;
};

struct prod_io {
	struct uring_io io;
	struct prod *p;
	uint64_t want;
	uint64_t got;
	atomic_int busy;
};

static void prod_cb(struct uring_io *io, int res)
{
	struct prod_io *x = (struct prod_io *)io;

	if (res != 8 || x->got != x->want)
		atomic_fetch_add(&x->p->bad, 1);
	atomic_fetch_add(&x->p->done, 1);
	atomic_store(&x->busy, 0);
}

static void *producer(void *arg)
{
	struct prod *p = arg;
	/* each thread keeps a window of ios in flight, reusing them */
	struct prod_io win[32];
	int posted = 0;
	static atomic_int tid;
	int me = atomic_fetch_add(&tid, 1);

	memset(win, 0, sizeof(win));
	while (posted < PROD_OPS) {
		for (int i = 0; i < 32 && posted < PROD_OPS; i++) {
			struct prod_io *x = &win[i];

			if (atomic_load(&x->busy))
				continue; /* still in flight */
			atomic_store(&x->busy, 1);
			x->p = p;
			x->want = (uint64_t)((me * 7 + posted) % 1024);
			x->got = 0;
			uring_io_prep(&x->io, URING_OP_READ, &x->got, 8,
				      x->want * 8, prod_cb, p);
			if (uring_submit(p->r, &x->io) != 0)
				atomic_fetch_add(&p->bad, 1);
			posted++;
		}
	}
	/* wait for the window to drain before the stack goes away */
	for (int i = 0; i < 32; i++)
		while (atomic_load(&win[i].busy))
			usleep(50);
	return NULL;
}

Test(uring, inbox_under_many_producers, .timeout = 60)
{
	struct prod p = { 0 };
	pthread_t th[PROD_THREADS];
	struct uring_stats st;
	uint64_t v[1024];

	p.fd = tmpfile_open(false);
	for (uint64_t i = 0; i < 1024; i++)
		v[i] = i;
	cr_assert_eq(pwrite(p.fd, v, sizeof(v), 0), (ssize_t)sizeof(v));
	/* a tiny inbox so producers really block on it */
	p.r = ring_make(p.fd, false, 8);
	for (int i = 0; i < PROD_THREADS; i++)
		pthread_create(&th[i], NULL, producer, &p);
	for (int i = 0; i < PROD_THREADS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&p.done), PROD_THREADS * PROD_OPS);
	cr_assert_eq(atomic_load(&p.bad), 0);
	uring_stats(&*p.r, &st);
	cr_assert_eq(st.ops[URING_OP_READ], PROD_THREADS * PROD_OPS);
	cr_assert_leq(st.inbox_peak, 8);
	cr_log_info("inbox: peak %lu, full waits %lu, wakeups %lu, enters %lu, setup flags 0x%x",
		    (unsigned long)st.inbox_peak, (unsigned long)st.inbox_full_waits,
		    (unsigned long)st.wakeups, (unsigned long)st.submit_calls,
		    st.setup_flags);
	cr_assert_eq(st.cq_overflows, 0);
	uring_destroy(p.r);
	close(p.fd);
}

/* ---- buffers ------------------------------------------------------------ */

static void *buf_churn(void *arg)
{
	struct uring *r = arg;

	for (int i = 0; i < 20000; i++) {
		uint8_t *b = uring_buf_get(r);

		if (b) {
			/* owning it exclusively: a double hand-out would
			 * show up as a torn marker */
			b[0] = (uint8_t)i;
			b[1] = (uint8_t)~i;
			if ((uint8_t)(b[1] ^ b[0]) != 0xFF)
				abort();
			uring_buf_put(r, b);
		}
	}
	return NULL;
}

Test(uring, buffer_pool_get_put)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 0);
	void *got[8];
	pthread_t th[4];

	for (int i = 0; i < 8; i++) {
		got[i] = uring_buf_get(r);
		cr_assert_not_null(got[i]);
		cr_assert(uring_buf_owns(r, got[i], uring_buf_size(r)));
		for (int j = 0; j < i; j++)
			cr_assert_neq(got[i], got[j]);
	}
	cr_assert_null(uring_buf_get(r), "pool of 8 is empty");
	cr_assert(!uring_buf_owns(r, (uint8_t *)got[0] + 1,
				  uring_buf_size(r)), "crosses a buffer end");
	for (int i = 0; i < 8; i++)
		uring_buf_put(r, got[i]);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, buf_churn, r);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 8; i++)
		cr_assert_not_null(uring_buf_get(r), "all 8 came back");
	uring_destroy(r);
	close(fd);
}

/* ---- destroy ------------------------------------------------------------ */

static void count_cb(struct uring_io *io, int res)
{
	atomic_int *n = io->arg;

	if (res >= 0)
		atomic_fetch_add(n, 1);
}

Test(uring, destroy_completes_everything_in_flight)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 16);
	static struct uring_io ios[500];
	static uint8_t bufs[500][512];
	atomic_int n = 0;

	for (int i = 0; i < 500; i++) {
		uring_io_prep(&ios[i], i % 5 == 4 ? URING_OP_FSYNC : URING_OP_WRITE,
			      bufs[i], 512, (uint64_t)i * 512, count_cb, &n);
		cr_assert_eq(uring_submit(r, &ios[i]), 0);
	}
	uring_destroy(r);
	cr_assert_eq(atomic_load(&n), 500);
	close(fd);
}

/* more ios than the CQ holds: the module caps what is in the kernel so the
 * CQ cannot overflow, and the rest waits its turn */
Test(uring, small_ring_never_overflows_the_cq)
{
	int fd = tmpfile_open(false);
	struct uring_opts o;
	struct uring *r;
	struct uring_stats st;
	static struct uring_io ios[1000];
	static uint8_t bufs[1000][64];
	atomic_int n = 0;

	uring_opts_init(&o);
	o.entries = 4;                    /* CQ of 8 */
	cr_assert_eq(uring_create(fd, &o, &r), 0);
	for (int i = 0; i < 1000; i++) {
		uring_io_prep(&ios[i], i % 3 ? URING_OP_WRITE : URING_OP_NOP,
			      bufs[i], 64, (uint64_t)i * 64, count_cb, &n);
		cr_assert_eq(uring_submit(r, &ios[i]), 0);
	}
	while (atomic_load(&n) < 1000)
		usleep(100);
	uring_stats(r, &st);
	cr_assert_leq(st.inflight_peak, 7, "peak %lu",
		      (unsigned long)st.inflight_peak);
	cr_assert_eq(st.cq_overflows, 0);
	uring_destroy(r);
	close(fd);
}

/* a real kernel error, not an injected one, reaches the cb unchanged */
Test(uring, kernel_errno_reaches_the_caller)
{
	char path[] = "uring_ro_XXXXXX";
	int wfd = mkstemp(path);
	int fd = open(path, O_RDONLY);
	struct uring *r;
	uint8_t buf[512] = { 0 };
	struct uring_stats st;

	unlink(path);
	close(wfd);
	cr_assert(fd >= 0);
	r = ring_make(fd, false, 0);
	cr_assert_eq(io_sync(r, URING_OP_WRITE, buf, sizeof(buf), 0), -EBADF);
	cr_assert_eq(io_sync(r, URING_OP_READ, buf, sizeof(buf), 0), 0, "EOF");
	uring_stats(r, &st);
	cr_assert_eq(st.errors, 1);
	cr_assert_eq(st.eagain_retries, 0, "EBADF is not retried");
	uring_destroy(r);
	close(fd);
}

/* 8 threads, each posting bursts of writes followed by an fsync, all
 * interleaved in one inbox: every fsync completes after every write its
 * thread posted before it */
#define BAR_THREADS 8
#define BAR_ROUNDS 40
#define BAR_BURST 6

struct bar_io {
	struct uring_io io;
	atomic_int *clock;
	int at;
	int res;
};

static void bar_cb(struct uring_io *io, int res)
{
	struct bar_io *x = (struct bar_io *)io;

	x->res = res;
	/* release: the poster reads res after seeing at */
	__atomic_store_n(&x->at, atomic_fetch_add(x->clock, 1) + 1,
			 __ATOMIC_RELEASE);
}

struct bar_thread {
	struct uring *r;
	atomic_int *clock;
	int id;
	int bad;
};

static void *bar_main(void *arg)
{
	struct bar_thread *t = arg;
	struct bar_io ios[BAR_BURST + 1];
	struct uring_io *v[BAR_BURST + 1];
	uint8_t buf[BAR_BURST][1024];

	for (int round = 0; round < BAR_ROUNDS; round++) {
		memset(ios, 0, sizeof(ios));
		for (int i = 0; i <= BAR_BURST; i++) {
			bool f = i == BAR_BURST;

			uring_io_prep(&ios[i].io, f ? URING_OP_FSYNC : URING_OP_WRITE,
				      f ? NULL : buf[i], 1024,
				      (uint64_t)(t->id * BAR_BURST + i) * 1024,
				      bar_cb, NULL);
			ios[i].clock = t->clock;
			v[i] = &ios[i].io;
		}
		/* half the rounds post one by one, half as a batch */
		if (round % 2) {
			if (uring_submit_many(t->r, v, BAR_BURST + 1))
				t->bad++;
		} else {
			for (int i = 0; i <= BAR_BURST; i++)
				if (uring_submit(t->r, v[i]))
					t->bad++;
		}
		for (int i = 0; i <= BAR_BURST; i++)
			while (!__atomic_load_n(&ios[i].at, __ATOMIC_ACQUIRE))
				usleep(20);
		for (int i = 0; i < BAR_BURST; i++)
			if (ios[i].res != 1024 || ios[i].at > ios[BAR_BURST].at)
				t->bad++;
		if (ios[BAR_BURST].res != 0)
			t->bad++;
	}
	return NULL;
}

Test(uring, fsync_barrier_under_many_producers, .timeout = 60)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 16);
	pthread_t th[BAR_THREADS];
	struct bar_thread t[BAR_THREADS];
	atomic_int clock = 0;

	for (int i = 0; i < BAR_THREADS; i++) {
		t[i] = (struct bar_thread){ .r = r, .clock = &clock, .id = i };
		pthread_create(&th[i], NULL, bar_main, &t[i]);
	}
	for (int i = 0; i < BAR_THREADS; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(t[i].bad, 0, "thread %d", i);
	}
	uring_destroy(r);
	close(fd);
}

/* tmpfs (where /tmp often lives): buffered I/O, which coil uses there
 * (COIL_NO_DIRECT); statx still gives a usable alignment */
Test(uring, tmpfs_buffered)
{
	char path[] = "/dev/shm/coil_uring_XXXXXX";
	int fd = mkstemp(path);
	struct uring *r;
	uint8_t w[10000], g[10000];

	if (fd < 0)
		cr_skip_test("no /dev/shm");
	unlink(path);
	r = ring_make(fd, false, 0);
	cr_assert(uring_dio_align(r) >= 512);
	for (uint32_t n = 1; n <= sizeof(w); n = n * 3 + 1) {
		fill(w, n, n);
		cr_assert_eq(io_sync(r, URING_OP_WRITE, w, n, 777), (int)n);
		memset(g, 0, n);
		cr_assert_eq(io_sync(r, URING_OP_READ, g, n, 777), (int)n);
		cr_assert_eq(memcmp(w, g, n), 0, "size %u", n);
	}
	cr_assert_eq(io_sync(r, URING_OP_FSYNC, NULL, 0, 0), 0);
	uring_destroy(r);
	close(fd);
}

/* uring_submit_many is all or nothing, also when destroy begins while a
 * batch larger than the free inbox space is part-posted: either 0 and
 * every callback runs, or -ESHUTDOWN and none does (a caller that frees
 * ios it was told were refused must not see their callbacks). */
static atomic_int sm_gate, sm_done;

static void sm_block_cb(struct uring_io *io, int res)
{
	(void)io;
	(void)res;
	while (!atomic_load(&sm_gate))
		usleep(100);
}

static void sm_count_cb(struct uring_io *io, int res)
{
	(void)io;
	(void)res;
	atomic_fetch_add(&sm_done, 1);
}

struct sm_batch {
	struct uring *r;
	struct uring_io *v[4];
	int ret;
};

static void *sm_submit_main(void *arg)
{
	struct sm_batch *b = arg;

	b->ret = uring_submit_many(b->r, b->v, 4);
	return NULL;
}

static void *sm_destroy_main(void *arg)
{
	uring_destroy(arg);
	return NULL;
}

Test(uring, submit_many_is_all_or_nothing_across_destroy, .timeout = 30)
{
	int fd = tmpfile_open(false);
	struct uring *r = ring_make(fd, false, 2);
	static struct uring_io blocker, ios[4];
	struct sm_batch b = { .r = r };
	struct uring_stats st;
	pthread_t ts, td;

	atomic_store(&sm_gate, 0);
	atomic_store(&sm_done, 0);
	/* the ring thread is stuck in this callback: the inbox (2) fills */
	uring_io_prep(&blocker, URING_OP_NOP, NULL, 0, 0, sm_block_cb, NULL);
	cr_assert_eq(uring_submit(r, &blocker), 0);
	for (int i = 0; i < 4; i++) {
		uring_io_prep(&ios[i], URING_OP_NOP, NULL, 0, 0, sm_count_cb, NULL);
		b.v[i] = &ios[i];
	}
	cr_assert_eq(pthread_create(&ts, NULL, sm_submit_main, &b), 0);
	do {
		usleep(1000);
		uring_stats(r, &st);
	} while (st.inbox_full_waits == 0); /* two posted, parked for more */
	cr_assert_eq(pthread_create(&td, NULL, sm_destroy_main, r), 0);
	usleep(50000); /* destroy has begun */
	atomic_store(&sm_gate, 1);
	pthread_join(ts, NULL);
	pthread_join(td, NULL);
	if (b.ret == 0)
		cr_assert_eq(atomic_load(&sm_done), 4);
	else
		cr_assert(b.ret == -ESHUTDOWN && atomic_load(&sm_done) == 0,
			  "ret %d with %d callbacks run", b.ret,
			  atomic_load(&sm_done));
	close(fd);
}
