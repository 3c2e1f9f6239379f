/* tests/test_uring_gather.c — write gathering: writes that continue each
 * other on the device and sit next to each other in the queue go to the
 * kernel as one vectored write; each caller still hears its own result, in
 * order; a short gathered write finishes the members it covered and sends
 * the rest again alone; nothing is gathered while a fault spec is armed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/common.h"
#include "uring/uring.h"
#include "uring/uring_fault.h"

#define N 100
#define BS 4096u

struct gio {
	struct uring_io io;
	int idx;
};

static int res[N];
static int order[N];
static atomic_int ndone;

static void gio_cb(struct uring_io *io, int r)
{
	struct gio *g = (struct gio *)io;

	res[g->idx] = r;
	order[atomic_fetch_add(&ndone, 1)] = g->idx;
}

static int scratch(bool direct)
{
	char path[] = "uring_gather_XXXXXX";
	int fd = mkstemp(path), dfd;

	cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
	if (direct) {
		dfd = open(path, O_RDWR | O_DIRECT);
		close(fd);
		fd = dfd;
		cr_assert(fd >= 0, "O_DIRECT: %s", strerror(errno));
	}
	unlink(path);
	return fd;
}

static struct uring *make(int fd, bool direct)
{
	struct uring_opts o;
	struct uring *r = NULL;

	uring_opts_init(&o);
	o.direct = direct;
	cr_assert_eq(uring_create(fd, &o, &r), 0);
	return r;
}

/* Post n writes of len bytes each from buf (n * len bytes) at the file
 * offsets off[i], in one inbox batch, and wait for every callback. */
static void post(struct uring *r, uint8_t *buf, uint32_t len,
		 const uint64_t *off, int n)
{
	static struct gio ios[N];
	struct uring_io *p[N];

	atomic_store(&ndone, 0);
	for (int i = 0; i < n; i++) {
		uring_io_prep(&ios[i].io, URING_OP_WRITE, buf + (size_t)i * len,
			      len, off[i], gio_cb, NULL);
		ios[i].idx = i;
		res[i] = 1;
		p[i] = &ios[i].io;
	}
	cr_assert_eq(uring_submit_many(r, p, (unsigned)n), 0);
	while (atomic_load(&ndone) < n)
		usleep(100);
}

static void *aligned(size_t n)
{
	void *p = NULL;

	cr_assert_eq(posix_memalign(&p, 4096, n), 0);
	for (size_t i = 0; i < n; i++)
		((uint8_t *)p)[i] = (uint8_t)(i * 131 + i / 4096);
	return p;
}

static void contiguous(bool direct)
{
	int fd = scratch(direct);
	struct uring *r = make(fd, direct);
	uint8_t *buf = aligned((size_t)N * BS), *back = aligned((size_t)N * BS);
	uint64_t off[N];
	struct uring_stats st;

	for (int i = 0; i < N; i++)
		off[i] = (uint64_t)i * BS;
	post(r, buf, BS, off, N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(res[i], (int)BS, "write %d: %d", i, res[i]);
	uring_stats(r, &st);
	/* the batch may be split across turns, but 100 adjacent writes in
	 * one post are gathered at least once, never more than 32 a group */
	cr_assert_geq(st.merge_ops, 1);
	cr_assert_geq(st.merged_writes, 2 * st.merge_ops);
	cr_assert_leq(st.merged_writes, 32 * st.merge_ops);
	cr_assert_geq(st.merge_ops, st.merged_writes / 32);
	cr_assert_eq(st.ops[URING_OP_WRITE], N, "stats count the callers' ios");
	cr_assert_eq(st.bytes_written, (uint64_t)N * BS);
	cr_assert_eq(pread(fd, back, (size_t)N * BS, 0), (ssize_t)N * BS);
	cr_assert_eq(memcmp(buf, back, (size_t)N * BS), 0);
	uring_destroy(r);
	close(fd);
	free(buf);
	free(back);
}

Test(uring_gather, adjacent_writes_become_one_vectored_write_direct)
{
	contiguous(true);
}

Test(uring_gather, adjacent_writes_become_one_vectored_write_buffered)
{
	contiguous(false);
}

Test(uring_gather, writes_with_gaps_or_out_of_order_go_alone)
{
	int fd = scratch(true);
	struct uring *r = make(fd, true);
	uint8_t *buf = aligned((size_t)N * BS), *back = aligned(BS);
	uint64_t off[N];
	struct uring_stats st;

	for (int i = 0; i < N; i++)
		off[i] = (uint64_t)i * 2 * BS; /* a 4 KiB hole between each */
	post(r, buf, BS, off, N);
	for (int i = 0; i < N; i++)
		off[i] = (uint64_t)(N - i) * BS * 512; /* descending */
	post(r, buf, BS, off, N);
	uring_stats(r, &st);
	cr_assert_eq(st.merge_ops, 0);
	cr_assert_eq(st.merged_writes, 0);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(res[i], (int)BS);
		cr_assert_eq(pread(fd, back, BS, (off_t)off[i]), (ssize_t)BS);
		cr_assert_eq(memcmp(back, buf + (size_t)i * BS, BS), 0);
	}
	uring_destroy(r);
	close(fd);
	free(buf);
	free(back);
}

/* A journal chunk or a read may sit between two data runs in the queue:
 * gathering looks past them (a bounded distance) for the continuation. */
Test(uring_gather, continuations_are_found_past_other_ios)
{
	int fd = scratch(true);
	struct uring *r = make(fd, true);
	uint8_t *buf = aligned((size_t)8 * BS), *back = aligned((size_t)8 * BS);
	static const uint64_t blk[8] = { 0, 2, 100, 1, 3, 200, 5, 4 };
	uint64_t off[8];
	struct uring_stats st;

	for (int i = 0; i < 8; i++)
		off[i] = blk[i] * BS;
	post(r, buf, BS, off, 8);
	uring_stats(r, &st);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(res[i], (int)BS);
		cr_assert_eq(pread(fd, back, BS, (off_t)off[i]), (ssize_t)BS);
		cr_assert_eq(memcmp(back, buf + (size_t)i * BS, BS), 0);
	}
	/* 0,1,2,3,4,5 continue each other out of queue order: one group */
	cr_assert_eq(st.merge_ops, 1);
	cr_assert_eq(st.merged_writes, 6);
	/* its members complete in device order: blocks 0..5 are the ios
	 * 0, 3, 1, 4, 7, 6 */
	{
		static const int want[6] = { 0, 3, 1, 4, 7, 6 };
		int k = 0;

		for (int i = 0; i < 8 && k < 6; i++)
			if (order[i] == want[k])
				k++;
		cr_assert_eq(k, 6, "gathered members complete in order");
	}
	uring_destroy(r);
	close(fd);
	free(buf);
	free(back);
}

Test(uring_gather, a_group_never_exceeds_one_mib)
{
	int fd = scratch(true);
	struct uring *r = make(fd, true);
	uint32_t len = 256 * 1024;
	uint8_t *buf = aligned((size_t)16 * len);
	uint64_t off[16];
	struct uring_stats st;

	for (int i = 0; i < 16; i++)
		off[i] = (uint64_t)i * len;
	post(r, buf, len, off, 16);
	uring_stats(r, &st);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(res[i], (int)len);
	cr_assert_geq(st.merge_ops, 1);
	cr_assert_leq(st.merged_writes, 4 * st.merge_ops, "1 MiB = 4 x 256 KiB");
	uring_destroy(r);
	close(fd);
	free(buf);
}

/* RLIMIT_FSIZE makes the kernel write a gathered write only up to the
 * limit (a real short result), then fail what lies beyond with -EFBIG:
 * the members below the limit succeed, the one the limit cuts is resumed
 * alone where the group stopped, the rest are sent alone and fail. */
Test(uring_gather, a_short_gathered_write_finishes_what_it_covered)
{
	int fd = scratch(false);
	struct uring *r = make(fd, false);
	uint8_t *buf = aligned((size_t)8 * BS);
	struct rlimit rl = { .rlim_cur = 2 * BS + 2048, .rlim_max = RLIM_INFINITY };
	uint64_t off[8];
	struct uring_stats st;

	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	for (int i = 0; i < 8; i++)
		off[i] = (uint64_t)i * BS;
	post(r, buf, BS, off, 8);
	uring_stats(r, &st);
	cr_assert_geq(st.merge_ops, 1);
	cr_assert_eq(res[0], (int)BS);
	cr_assert_eq(res[1], (int)BS);
	for (int i = 2; i < 8; i++)
		cr_assert_eq(res[i], -EFBIG, "write %d: %d", i, res[i]);
	cr_assert_geq(st.short_resubmits, 1);
	uring_destroy(r);
	close(fd);
	free(buf);
}

Test(uring_gather, nothing_is_gathered_while_a_fault_is_armed)
{
	int fd = scratch(true);
	struct uring *r = make(fd, true);
	uint8_t *buf = aligned((size_t)N * BS);
	struct uring_fault_spec spec = { .fail_kind = URING_OP_READ,
					 .fail_nth = 1000000 };
	uint64_t off[N];
	struct uring_stats st;

	cr_assert_eq(uring_fault_arm(r, &spec), 0);
	for (int i = 0; i < N; i++)
		off[i] = (uint64_t)i * BS;
	post(r, buf, BS, off, N);
	uring_stats(r, &st);
	cr_assert_eq(st.merge_ops, 0, "per-io faults need per-io writes");
	for (int i = 0; i < N; i++)
		cr_assert_eq(res[i], (int)BS);
	memset(&spec, 0, sizeof(spec));
	cr_assert_eq(uring_fault_arm(r, &spec), 0);
	post(r, buf, BS, off, N);
	uring_stats(r, &st);
	cr_assert_geq(st.merge_ops, 1, "disarmed: gathered again");
	uring_destroy(r);
	close(fd);
	free(buf);
}

/* Members that all lie in one caller region registered with the ring go
 * as one WRITEV_FIXED (no page pinning per request) where the kernel has
 * it (Linux 6.15); the bytes land the same either way. */
Test(uring_gather, members_in_a_registered_region_use_the_fixed_form)
{
	int fd = scratch(true);
	uint8_t *region = aligned(1u << 20);
	struct uring_opts o;
	struct uring *r = NULL;
	struct uring_stats st;
	struct io_uring probe_ring;
	struct io_uring_probe *pr;
	bool have = false;
	uint64_t off[32];

	if (io_uring_queue_init(4, &probe_ring, 0) == 0) {
		pr = io_uring_get_probe_ring(&probe_ring);
		have = pr && io_uring_opcode_supported(pr, 61);
		if (pr)
			io_uring_free_probe(pr);
		io_uring_queue_exit(&probe_ring);
	}
	uring_opts_init(&o);
	o.direct = true;
	o.nxreg = 1;
	o.xreg[0].base = region;
	o.xreg[0].len = 1u << 20;
	cr_assert_eq(uring_create(fd, &o, &r), 0);
	/* 16 writes of 8 KiB from the region, continuing each other */
	for (int i = 0; i < 16; i++)
		off[i] = (uint64_t)i * 2 * BS;
	post(r, region, 2 * BS, off, 16);
	uring_stats(r, &st);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(res[i], (int)(2 * BS));
	cr_assert_geq(st.merge_ops, 1);
	if (have)
		cr_assert_geq(st.fixed_ios, st.merge_ops,
			      "the groups went as WRITEV_FIXED");
	else
		cr_log_info("kernel without WRITEV_FIXED: plain WRITEV");
	{
		uint8_t *got = aligned(32 * BS);

		cr_assert_eq(pread(fd, got, 32 * BS, 0), (ssize_t)(32 * BS));
		cr_assert_eq(memcmp(got, region, 32 * BS), 0);
		free(got);
	}
	uring_destroy(r);
	close(fd);
	free(region);
}
