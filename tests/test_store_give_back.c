/* test_store_give_back: what a growing file store gives back to its file
 * system at close (engine/store.c, close_give_back; docs/space.md, "At
 * close").
 *
 *   close_gives_back_what_holds_nothing  small writes (their data goes
 *           through the journal) and large ones, closed: the journal ring
 *           holds no block, each checkpoint area none past its base and
 *           chain, the data area no block allocated and never written;
 *           the file takes less than while it was open; it reopens with
 *           every byte, allocates its journal again before it writes, and
 *           does the same over a second session
 *   buffered_reader_before_close  pages a buffered reader left over
 *           blocks allocated ahead of writes do not keep them allocated
 *   powercut_at_every_close_step  the fault seam cuts power at each I/O
 *           of a close (its sync, checkpoint, superblocks, mirror, each
 *           punch and the flush after them), dropping, keeping at random
 *           or tearing what was not flushed (a punch is undone like a
 *           write): the store opens with every synced byte, and closes and
 *           reopens exact again
 *   kill9_while_closing  a child writes, syncs and closes, and is killed
 *           at a random moment of it: every synced byte comes back
 * COIL_REL_SCALE scales the loops. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#include "engine/grow.h"
#include "engine/store.h"
#include "format/format.h"
#include "tests/engine_test_util.h"
#include "tests/super_util.h"
#include "tests/test_util.h"
#include "uring/uring_fault.h"

#define MiB (1ull << 20)
#define PAGE 4096u

/* Bytes of [@a, @z) of the file that hold data (SEEK_DATA / SEEK_HOLE: a
 * block allocated and never written reads as a hole there, unless the page
 * cache holds pages over it). */
static uint64_t data_in(const char *path, uint64_t a, uint64_t z)
{
	int fd = open(path, O_RDONLY);
	uint64_t got = 0, off = a;

	cr_assert_geq(fd, 0);
	while (off < z) {
		off_t d = lseek(fd, (off_t)off, SEEK_DATA), h;

		if (d < 0 || (uint64_t)d >= z)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		cr_assert_geq(h, d);
		got += COIL_MIN((uint64_t)h, z) - (uint64_t)d;
		off = (uint64_t)h;
	}
	close(fd);
	return got;
}

static void opts(struct coil_options *o, const char *path)
{
	et_opts(o, path);
	o->size = 256 * MiB; /* 1 MiB segments, a 16 MiB journal */
}

/* Page @i of session @gen: half compressible, so zstd keeps it small and
 * it travels inline in the journal. */
static void page_fill(uint8_t *p, uint32_t i, uint32_t gen)
{
	et_fill(p, PAGE, (uint64_t)gen * 1000003u + i, 1);
	memcpy(p, &i, sizeof(i));
}

/* Session @gen writes pages [0, @npages) of "pages" in a scattered order,
 * and (gen 1) a 3 MiB object "big" through the segment path; synced. */
static void write_session(coil_store *s, uint32_t npages, uint32_t gen)
{
	uint8_t buf[PAGE];
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "pages", COIL_CREATE, &h), 0);
	for (uint32_t k = 0; k < npages; k++) {
		uint32_t i = (uint32_t)(((uint64_t)k * 7919u) % npages);

		page_fill(buf, i, gen);
		cr_assert_eq(coil_pwrite(h, buf, PAGE, (uint64_t)i * PAGE),
			     (int64_t)PAGE);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	if (gen == 1) {
		uint8_t *big = malloc(3 * MiB);

		et_fill(big, 3 * MiB, 77, 0);
		cr_assert_eq(coil_obj_open(s, "big", COIL_CREATE, &h), 0);
		cr_assert_eq(coil_pwrite(h, big, 3 * MiB, 0), (int64_t)(3 * MiB));
		cr_assert_eq(coil_obj_close(h), 0);
		free(big);
	}
	cr_assert_eq(coil_sync(s), 0);
}

/* Every page is session @gen's, "big" is whole. */
static void check_all(coil_store *s, uint32_t npages, uint32_t gen)
{
	uint8_t want[PAGE], got[PAGE], *big = malloc(3 * MiB);
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	for (uint32_t i = 0; i < npages; i++) {
		page_fill(want, i, gen);
		cr_assert_eq(coil_pread(h, got, PAGE, (uint64_t)i * PAGE),
			     (int64_t)PAGE);
		cr_assert(memcmp(got, want, PAGE) == 0, "page %u of session %u",
			  i, gen);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	et_fill(big, 3 * MiB, 77, 0);
	et_check_obj(s, "big", big, 3 * MiB);
	free(big);
}

/* Bytes of [@a, @z) the file system has allocated (written or not), by
 * FIEMAP; by SEEK_DATA where it cannot say (tmpfs). */
static uint64_t allocated_in(const char *path, uint64_t a, uint64_t z)
{
	struct et_fmap m;

	if (et_fiemap(path, a, z, &m) != 0)
		return data_in(path, a, z);
	return m.written + m.unwritten;
}

/* The closed store holds no allocated block that nothing reads. */
static void check_given_back(const char *path)
{
	struct fmt_super sb = et_newest_super(path);
	uint64_t keep, seg_end, data, du;
	struct et_fmap m;

	cr_assert(sb.incompat & FMT_INCOMPAT_GROW);
	cr_assert(sb.flags & FMT_SUPER_CLEAN);
	cr_assert_eq(allocated_in(path, sb.journal_off, sb.journal_off +
				  sb.journal_len), 0, "the journal holds no block");
	keep = COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK) + sb.delta_bytes;
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(allocated_in(path, sb.ckpt_off[i] + keep,
					  sb.ckpt_off[i] + sb.ckpt_len), 0,
			     "area %d holds nothing past its base and chain", i);
		cr_assert_eq(data_in(path, sb.ckpt_off[i], sb.ckpt_off[i] + keep),
			     keep, "area %d holds its base and chain", i);
	}
	seg_end = sb.data_off + (uint64_t)sb.segment_count * sb.segment_size;
	if (et_fiemap(path, 0, UINT64_MAX, &m) == 0) {
		/* no block allocated and never written, anywhere: also not
		 * under pages a buffered reader left in the page cache (the
		 * fault seam's pre-images put them there), where SEEK_DATA
		 * reads such a block as data */
		cr_assert_eq(m.unwritten, 0, "%llu bytes allocated, unwritten",
			     (unsigned long long)m.unwritten);
		/* the rest of du is the file system's extent tree: a block
		 * holds 340 extents, punches leave its leaves part full */
		data = m.written;
		du = et_disk_bytes(path);
		cr_assert_leq(du, data + (m.extents / 32 + 16) * 4096ull,
			      "du %llu, written %llu, %llu extents",
			      (unsigned long long)du, (unsigned long long)data,
			      (unsigned long long)m.extents);
	} else {
		data = data_in(path, 0, seg_end);
		du = et_disk_bytes(path);
		cr_assert_leq(du, data + 64 * 1024,
			      "du %llu, data %llu: allocated blocks that hold nothing",
			      (unsigned long long)du, (unsigned long long)data);
	}
	cr_assert_geq(du, data);
}

/* A new store at @path (tag @tag) with its first session of @npages
 * written; *@o is left set to reopen it.  @return the open store. */
static coil_store *first_session(char *path, size_t len, const char *tag,
				 struct coil_options *o, uint32_t npages)
{
	coil_store *s;

	et_path(path, len, tag);
	opts(o, path);
	cr_assert_eq(coil_open(path, o, &s), 0);
	o->flags &= ~COIL_CREATE;
	write_session(s, npages, 1);
	return s;
}

/* Close @s, check what the close gave back, reopen: every page is session
 * @gen's; closed again. */
static void close_and_recheck(coil_store *s, const char *path,
			      const struct coil_options *o, uint32_t npages,
			      uint32_t gen)
{
	cr_assert_eq(coil_close(s), 0);
	check_given_back(path);
	cr_assert_eq(coil_open(path, o, &s), 0);
	check_all(s, npages, gen);
	cr_assert_eq(coil_close(s), 0);
}

Test(store_give_back, close_gives_back_what_holds_nothing, .timeout = 120)
{
	uint32_t npages = (uint32_t)(6000 * COIL_MAX(tu_scale(), 0.2));
	struct coil_options o;
	char path[256], js[16384];
	uint64_t open_du, closed_du;
	coil_store *s;

	s = first_session(path, sizeof(path), "give-back", &o, npages);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	open_du = json_u64(js, "\"space\"", "disk_bytes");
	cr_assert_eq(open_du, et_disk_bytes(path), "the stats' disk_bytes is du");
	cr_assert_eq(coil_close(s), 0);
	closed_du = et_disk_bytes(path);
	cr_assert_lt(closed_du + GROW_JOURNAL_MIN / 2, open_du,
		     "closed %llu, open %llu", (unsigned long long)closed_du,
		     (unsigned long long)open_du);
	check_given_back(path);

	/* reopen: every byte; the journal is allocated again before any
	 * chunk is written to it */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check_all(s, npages, 1);
	cr_assert_geq(et_disk_bytes(path), closed_du + GROW_JOURNAL_MIN,
		      "the journal's blocks are allocated again at open");
	cr_assert_geq(s->j_alloc, GROW_JOURNAL_MIN);
	write_session(s, npages, 2);
	cr_assert_eq(coil_close(s), 0);
	check_given_back(path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check_all(s, npages, 2);
	cr_assert_eq(coil_close(s), 0);
	/* a read-only open gives back nothing and takes nothing */
	closed_du = et_disk_bytes(path);
	o.flags |= COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	check_all(s, npages, 2);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(et_disk_bytes(path), closed_du);
	unlink(path);
}

/* A buffered reader of the open store's file (a backup, cat) leaves
 * pages in the page cache over blocks allocated ahead of writes; SEEK_DATA
 * reads those as data.  The close gives them back all the same. */
Test(store_give_back, buffered_reader_before_close, .timeout = 120)
{
	uint32_t npages = (uint32_t)(2000 * COIL_MAX(tu_scale(), 0.2));
	struct coil_options o;
	struct et_fmap m;
	char path[256], *buf = malloc(1 << 20);
	coil_store *s;
	ssize_t n;
	int fd;

	s = first_session(path, sizeof(path), "give-back-reader", &o, npages);
	if (et_fiemap(path, 0, UINT64_MAX, &m) != 0) {
		cr_assert_eq(coil_close(s), 0);
		unlink(path);
		free(buf);
		cr_skip_test("no FIEMAP on this file system: nothing tells "
			     "an unwritten block under cached pages from data");
	}
	cr_assert_gt(m.unwritten, 0, "the open store has blocks ahead of writes");
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	while ((n = read(fd, buf, 1 << 20)) > 0)
		;
	cr_assert_eq(n, 0);
	close(fd);
	free(buf);
	close_and_recheck(s, path, &o, npages, 1);
	unlink(path);
}

/* Holes inside segments, as writes lost to a power cut leave them: in
 * free segments, every other block written (junk: they are free) and the
 * blocks between allocated but never written.  A close gives every such
 * block back, also past two holes per segment (it stopped there once,
 * and the power-cut suite's store reached 70 holes against that bound). */
Test(store_give_back, many_holes_inside_segments, .timeout = 120)
{
	uint32_t npages = 200, nfree = 0, holes = 0;
	struct coil_options o;
	char path[256];
	uint8_t junk[PAGE];
	coil_store *s;
	int fd;

	s = first_session(path, sizeof(path), "give-back-holes", &o, npages);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	memset(junk, 0xa5, sizeof(junk));
	for (uint32_t i = 0; i < s->nseg && nfree < 2; i++) {
		uint64_t base = s->sb.data_off + (uint64_t)i * s->sb.segment_size;

		if (s->segs[i].state != SEG_FREE)
			continue;
		nfree++;
		/* from the second block: the first is the segment's header */
		for (uint64_t b = 2; b + 1 < s->sb.segment_size / PAGE; b += 2) {
			cr_assert_eq(pwrite(fd, junk, PAGE, (off_t)(base + b * PAGE)),
				     (ssize_t)PAGE);
			cr_assert_eq(fallocate(fd, FALLOC_FL_KEEP_SIZE,
					       (off_t)(base + (b + 1) * PAGE),
					       PAGE), 0);
			holes++;
		}
	}
	cr_assert_eq(nfree, 2, "the store has free segments");
	cr_assert_gt(holes, 2 * s->nseg + 2, "more holes than two a segment");
	cr_assert_eq(fsync(fd), 0);
	close(fd);
	close_and_recheck(s, path, &o, npages, 1);
	unlink(path);
}

/* Power cut at the @k-th I/O of a close, mode @mode. */
static void cut_close(const char *path, struct coil_options *o, uint32_t npages,
		      uint64_t k, int mode, uint64_t seed)
{
	struct uring_fault_spec spec;
	coil_store *s;

	memset(&spec, 0, sizeof(spec));
	spec.record = true;
	uring_fault_set_next(&spec);
	cr_assert_eq(coil_open(path, o, &s), 0);
	write_session(s, npages, 2);
	spec.cut_kind = URING_FAULT_ANY;
	spec.cut_nth = k; /* from the arming: the close's k-th I/O */
	spec.cut_mode = mode;
	spec.cut_seed = seed;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &spec), 0);
	(void)coil_close(s);
	uring_fault_set_next(NULL);

	cr_assert_eq(coil_open(path, o, &s), 0, "k %llu mode %d",
		     (unsigned long long)k, mode);
	check_all(s, npages, 2);
	close_and_recheck(s, path, o, npages, 2);
}

Test(store_give_back, powercut_at_every_close_step, .timeout = 600)
{
	uint32_t npages = (uint32_t)(2000 * COIL_MAX(tu_scale(), 0.2));
	uint64_t seed = 0x9b ^ (uint64_t)time(NULL);
	struct coil_options o;
	char path[256];
	coil_store *s;
	uint64_t k;

	s = first_session(path, sizeof(path), "give-back-cut", &o, npages);
	cr_assert_eq(coil_close(s), 0);
	/* a close here takes 16 I/Os (its sync, the packer's last batch,
	 * the checkpoint, two superblocks, the mirror, the punches, the
	 * flush after them), the punches last: every one of them, and a
	 * few past the end */
	for (k = 1; k <= 24; k++)
		cut_close(path, &o, npages, k, URING_CUT_DROP_ALL + (int)(k % 3),
			  tu_xorshift(&seed));
	unlink(path);
}

Test(store_give_back, kill9_while_closing, .timeout = 300)
{
	uint32_t npages = (uint32_t)(1500 * COIL_MAX(tu_scale(), 0.2));
	int rounds = tu_scale() < 0.5 ? 4 : 10;
	uint64_t seed = 0x4b1 ^ (uint64_t)time(NULL);
	struct coil_options o;
	char path[256];
	coil_store *s;

	s = first_session(path, sizeof(path), "give-back-kill", &o, npages);
	cr_assert_eq(coil_close(s), 0);
	for (int r = 0; r < rounds; r++) {
		int pfd[2], st;
		char c;
		pid_t pid;

		cr_assert_eq(pipe(pfd), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			uint8_t buf[PAGE];
			coil_obj *h;

			close(pfd[0]);
			if (coil_open(path, &o, &s) != 0 ||
			    coil_obj_open(s, "pages", 0, &h) != 0)
				_exit(2);
			/* the same content again: whatever the kill leaves,
			 * every page is session 2's */
			for (uint32_t i = 0; i < npages; i++) {
				page_fill(buf, i, 2);
				if (coil_pwrite(h, buf, PAGE, (uint64_t)i * PAGE) !=
				    (int64_t)PAGE)
					_exit(3);
			}
			if (coil_obj_close(h) != 0 || coil_sync(s) != 0)
				_exit(4);
			(void)!write(pfd[1], "s", 1);
			coil_close(s);
			_exit(0);
		}
		close(pfd[1]);
		cr_assert_eq(read(pfd[0], &c, 1), 1);
		close(pfd[0]);
		/* somewhere in the close: its checkpoint or a punch */
		usleep((useconds_t)(tu_xorshift(&seed) % 20000));
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert_eq(coil_open(path, &o, &s), 0, "round %d", r);
		check_all(s, npages, 2);
		cr_assert_eq(coil_close(s), 0);
		check_given_back(path);
	}
	unlink(path);
}
