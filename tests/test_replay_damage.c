/* test_replay_damage: replay tells damaged data from an unflushed tail.
 *
 * A child process writes two objects and leaves without closing, so the
 * next open replays their records.  Then one 4 KiB block of the first
 * object's data is damaged in the store file:
 * - when a flush covered that write (and a later chunk says so), the
 *   damage is damage: replay applies the record without reading its data
 *   and goes on; the damaged block reads -EIO, the rest of that object and
 *   the object written after it read back whole;
 * - when no flush covered it, the same bytes are what a power cut leaves of
 *   a write that never reached the device: replay ends there, and the
 *   object written after it is not there (a prefix, never wrong bytes),
 *   whether or not the walker of the journal read that tail ahead. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/engine_test_util.h"

#define BLOCKS 16 /* per write: 64 KiB, past the in-journal small writes */
#define MARK 16
#define DAMAGED 3 /* the block of the second write that is damaged */

static void marked(uint8_t *p, int obj, int nblocks, uint64_t seed)
{
	et_fill(p, (size_t)nblocks * FMT_BLOCK, seed, 0);
	for (int k = 0; k < nblocks; k++) {
		memset(p + (size_t)k * FMT_BLOCK, 0, MARK);
		snprintf((char *)p + (size_t)k * FMT_BLOCK, MARK, "RPLD%02u:%04u",
			 (unsigned)obj % 100u, (unsigned)k % 10000u);
	}
}

static void put(coil_store *s, const char *name, const uint8_t *p,
		size_t len, uint64_t off)
{
	coil_obj *h;

	if (coil_obj_open(s, name, COIL_CREATE, &h) != 0 ||
	    coil_pwrite(h, p, len, off) != (int64_t)len ||
	    coil_obj_close(h) != 0)
		_exit(3);
}

struct child_data {
	const uint8_t *a, *b;
	bool flush;
};

/* In the child: "a" (two writes), then "b"; a flush after each if
 * asked (et_child_run makes the second). */
static int write_ab(coil_store *s, void *arg)
{
	const struct child_data *d = arg;

	put(s, "a", d->a, BLOCKS * FMT_BLOCK, 0);
	put(s, "a", d->a + BLOCKS * FMT_BLOCK, BLOCKS * FMT_BLOCK,
	    BLOCKS * FMT_BLOCK);
	if (d->flush && coil_sync(s) != 0)
		return -1;
	put(s, "b", d->b, BLOCKS * FMT_BLOCK, 0);
	return 0;
}

/* "a" and "b" written by a child that leaves without closing. */
static void child_writes(const char *path, const struct coil_options *o,
			 const uint8_t *a, const uint8_t *b, bool flush)
{
	struct child_data d = { a, b, flush };

	et_child_run(path, o, write_ab, &d, flush);
}

/* Damage the block of "a" that starts with the mark of block @k. */
static void damage_block(const char *path, int k)
{
	char mark[MARK];
	int fd = open(path, O_RDWR);
	off_t size = lseek(fd, 0, SEEK_END);
	uint8_t blk[FMT_BLOCK];
	int found = 0;

	cr_assert_geq(fd, 0);
	memset(mark, 0, sizeof(mark));
	snprintf(mark, sizeof(mark), "RPLD%02u:%04u", 0u, (unsigned)k % 10000u);
	for (off_t off = 0; off < size; off += FMT_BLOCK) {
		cr_assert_eq(pread(fd, blk, sizeof(blk), off), (ssize_t)sizeof(blk));
		if (memcmp(blk, mark, MARK))
			continue;
		blk[100] ^= 0x5a;
		cr_assert_eq(pwrite(fd, blk, sizeof(blk), off), (ssize_t)sizeof(blk));
		found++;
	}
	cr_assert_eq(fsync(fd), 0);
	close(fd);
	cr_assert_eq(found, 1, "the block is in the store once");
}

static int64_t read_at(coil_store *s, const char *name, uint8_t *buf,
		       size_t len, uint64_t off)
{
	coil_obj *h;
	int64_t rc;
	int orc = coil_obj_open(s, name, 0, &h);

	if (orc < 0)
		return orc;
	rc = coil_pread(h, buf, len, off);
	cr_assert_eq(coil_obj_close(h), 0);
	return rc;
}

static void setup(char *path, size_t len, const char *tag,
		  struct coil_options *o, uint8_t **a, uint8_t **b)
{
	coil_store *s;

	et_path(path, len, tag);
	et_opts(o, path);
	o->compression = "none";
	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
	*a = malloc(2 * BLOCKS * FMT_BLOCK);
	*b = malloc(BLOCKS * FMT_BLOCK);
	marked(*a, 0, 2 * BLOCKS, 11);
	marked(*b, 1, BLOCKS, 12);
}

Test(replay_damage, flushed_data_damage_costs_its_range_only, .timeout = 120)
{
	struct coil_options o;
	uint8_t *a, *b, *got = malloc(2 * BLOCKS * FMT_BLOCK);
	char path[256], js[16384];
	coil_store *s;

	setup(path, sizeof(path), "replay-damage", &o, &a, &b);
	child_writes(path, &o, a, b, true);
	damage_block(path, BLOCKS + DAMAGED);

	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_assert_gt(json_u64(js, "\"journal\"", "replayed_records"), 0,
		     "the writes came back through replay");
	/* the damaged block: -EIO, never other bytes */
	cr_assert_eq(read_at(s, "a", got, FMT_BLOCK,
			     (uint64_t)(BLOCKS + DAMAGED) * FMT_BLOCK), -EIO);
	/* the first write whole, and the blocks around the damaged one */
	cr_assert_eq(read_at(s, "a", got, BLOCKS * FMT_BLOCK, 0),
		     BLOCKS * FMT_BLOCK);
	cr_assert_eq(memcmp(got, a, BLOCKS * FMT_BLOCK), 0);
	for (int k = BLOCKS; k < 2 * BLOCKS; k++) {
		int64_t rc = read_at(s, "a", got, FMT_BLOCK,
				     (uint64_t)k * FMT_BLOCK);

		if (k == BLOCKS + DAMAGED)
			continue;
		cr_assert_eq(rc, FMT_BLOCK, "block %d", k);
		cr_assert_eq(memcmp(got, a + (size_t)k * FMT_BLOCK, FMT_BLOCK), 0);
	}
	/* the object written after it is all there */
	cr_assert_eq(read_at(s, "b", got, BLOCKS * FMT_BLOCK, 0),
		     BLOCKS * FMT_BLOCK);
	cr_assert_eq(memcmp(got, b, BLOCKS * FMT_BLOCK), 0);
	cr_assert_eq(coil_close(s), 0);

	/* and stays so through the checkpoint that open and close wrote */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(read_at(s, "a", got, FMT_BLOCK,
			     (uint64_t)(BLOCKS + DAMAGED) * FMT_BLOCK), -EIO);
	cr_assert_eq(read_at(s, "b", got, BLOCKS * FMT_BLOCK, 0),
		     BLOCKS * FMT_BLOCK);
	cr_assert_eq(memcmp(got, b, BLOCKS * FMT_BLOCK), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(a);
	free(b);
	free(got);
}

Test(replay_damage, unflushed_data_ends_replay, .timeout = 120)
{
	struct coil_options o;
	uint8_t *a, *b, *got = malloc(2 * BLOCKS * FMT_BLOCK);
	char path[256], js[16384];
	coil_store *s;
	coil_obj *h;

	setup(path, sizeof(path), "replay-tail", &o, &a, &b);
	child_writes(path, &o, a, b, false);
	damage_block(path, BLOCKS + DAMAGED);

	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_assert_gt(json_u64(js, "\"journal\"", "replayed_records"), 0);
	/* replay ended at the second write of "a": "b" was never created */
	cr_assert_eq(coil_obj_open(s, "b", 0, &h), -ENOENT);
	uint64_t size;

	cr_assert_eq(coil_obj_open(s, "a", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_leq(size, (uint64_t)BLOCKS * FMT_BLOCK);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(a);
	free(b);
	free(got);
}

/* A tail of TAIL_WRITES writes that land back to back, written by a child
 * that then leaves without closing; with @flush, right after a coil_sync,
 * by which the journal has said that flush landed (one flush_marker).
 * The parent reopens: every write comes back whole.  @return the open's
 * replay_reads; *@bytes its replay_read_bytes. */
#define TAIL_WRITES 48

static uint64_t tail_replay(const char *tag, bool flush, uint64_t *bytes,
			    uint64_t *ahead)
{
	struct coil_options o;
	uint8_t *a, *b, *big = malloc((size_t)TAIL_WRITES * BLOCKS * FMT_BLOCK);
	uint8_t *got = malloc(BLOCKS * FMT_BLOCK);
	char path[256], js[16384];
	coil_store *s;
	uint64_t reads;
	pid_t pid;
	int st;

	setup(path, sizeof(path), tag, &o, &a, &b);
	for (int w = 0; w < TAIL_WRITES; w++)
		marked(big + (size_t)w * BLOCKS * FMT_BLOCK, 2 + w, BLOCKS,
		       100 + (uint64_t)w);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (coil_open(path, &o, &s) != 0)
			_exit(2);
		for (int w = 0; w < TAIL_WRITES; w++)
			put(s, "c", big + (size_t)w * BLOCKS * FMT_BLOCK,
			    BLOCKS * FMT_BLOCK, (uint64_t)w * BLOCKS * FMT_BLOCK);
		if (!flush)
			_exit(0);
		if (coil_sync(s) != 0)
			_exit(4);
		/* the marker is in the page cache before coil_sync returns */
		if (coil_stats_json(s, js, sizeof(js)) <= 0)
			_exit(5);
		_exit(json_u64(js, "\"journal\"", "flush_markers") == 1 ? 0 : 6);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);

	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	reads = json_u64(js, "\"journal\"", "replay_reads");
	*bytes = json_u64(js, "\"journal\"", "replay_read_bytes");
	*ahead = json_u64(js, "\"journal\"", "replay_verified_ahead");
	cr_assert_geq(json_u64(js, "\"journal\"", "replayed_records"),
		      TAIL_WRITES);
	for (int w = 0; w < TAIL_WRITES; w++) {
		cr_assert_eq(read_at(s, "c", got, BLOCKS * FMT_BLOCK,
				     (uint64_t)w * BLOCKS * FMT_BLOCK),
			     BLOCKS * FMT_BLOCK);
		cr_assert_eq(memcmp(got, big + (size_t)w * BLOCKS * FMT_BLOCK,
				    BLOCKS * FMT_BLOCK), 0, "write %d", w);
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(a);
	free(b);
	free(big);
	free(got);
	return reads;
}

/* An unflushed tail of writes that landed back to back is verified in a
 * few large reads, not a device round trip per blob, and by the walker of
 * the journal while the checkpoint loads: the apply reads none of them
 * again (and when one does not verify, as in unflushed_data_ends_replay,
 * the apply still finds it and stops there). */
Test(replay_damage, unflushed_tail_read_in_windows, .timeout = 120)
{
	uint64_t bytes, ahead;
	uint64_t reads = tail_replay("replay-window", false, &bytes, &ahead);

	cr_assert_geq(bytes, (uint64_t)TAIL_WRITES * BLOCKS * FMT_BLOCK,
		      "every blob of the tail was read to verify it");
	cr_assert_gt(reads, 0);
	cr_assert_leq(reads, TAIL_WRITES / 4,
		      "%" PRIu64 " reads for %d blobs back to back", reads,
		      TAIL_WRITES);
	cr_assert_geq(ahead, TAIL_WRITES, "%" PRIu64 " of the tail's blobs "
		      "verified by the walker", ahead);
}

/* A tail a flush covered, with no write after it and the process gone
 * right after the flush, is not read back: the empty chunk the journal
 * writes once the flush lands says the flush covered it, so replay only
 * places its blobs. */
Test(replay_damage, flushed_tail_not_read_back, .timeout = 120)
{
	uint64_t bytes, ahead;
	uint64_t reads = tail_replay("replay-marker", true, &bytes, &ahead);

	cr_assert_eq(reads, 0, "%" PRIu64 " reads (%" PRIu64 " bytes) to "
		     "verify a tail a flush covered", reads, bytes);
	cr_assert_eq(ahead, 0);
}
