/* test_salvage: `coil salvage STORE DIR` exports every readable byte of a
 * store a normal open refuses — both superblocks damaged, the checkpoint
 * damaged, the file truncated — and of one with a damaged data block: an
 * intact object comes back exactly, a lost range is listed in the report
 * and zero in the file, every other byte is exact; the store is never
 * written. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "tests/cli_run.h"
#include "tests/engine_test_util.h"
#include "engine/log/ckpt.h"
#include "engine/pack.h"

#define NOBJ 4

static const char *names[NOBJ] = { "tiny", "raw", "zed", "a/b name" };
static const char *files[NOBJ] = { "tiny", "raw", "zed", "a%2Fb%20name" };
static const size_t lens[NOBJ] = { 5000, 200u << 10, 300u << 10, 70000 };
static uint8_t *want[NOBJ];
static char path[256], out[300];
static uint64_t raw_block5; /* where block 5 of "raw" is in the file */

static void put(coil_store *s, int i)
{
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, names[i], COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, want[i], lens[i], 0), (int64_t)lens[i]);
	cr_assert_eq(coil_obj_close(h), 0);
	/* a small object stays in memory until packed: packed now, the
	 * objects lie in the file in the order they were written */
	cr_assert_eq(pack_now(s), 0);
}

/* One session in a child process that ends as a crash does: a
 * checkpoint where a close would write one, everything synced, and no
 * close, so the journal stays in the ring (a clean close gives its blocks
 * back to the file system: docs/space.md, "At close").  The child reports
 * by its exit status (criterion's asserts belong to the test process). */
static void session_crashed(const struct coil_options *o, const int *objs,
			    int n)
{
	pid_t pid = fork();
	int st;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		coil_store *s;
		coil_obj *h;

		if (coil_open(path, o, &s) != 0)
			_exit(2);
		for (int k = 0; k < n; k++) {
			int i = objs[k];

			if (coil_obj_open(s, names[i], COIL_CREATE, &h) != 0 ||
			    coil_pwrite(h, want[i], lens[i], 0) !=
				    (int64_t)lens[i] ||
			    coil_obj_close(h) != 0 || pack_now(s) != 0)
				_exit(3);
		}
		if (ckpt_wait(s) != 0 || coil_sync(s) != 0)
			_exit(4);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "session: %d", st);
}

/* Two sessions, so there is an older checkpoint: tiny, raw and the
 * slashed name uncompressed in the first, zed compressed in the second.
 * @crashed: each session ends without a close (session_crashed). */
static void build_store_as(uint64_t size, bool crashed)
{
	static const int first[] = { 0, 1, 3 }, second[] = { 2 };
	struct coil_options o;
	coil_store *s;
	uint8_t *img;
	size_t len;

	et_path(path, sizeof(path), "salvage");
	snprintf(out, sizeof(out), "%s.out.d", path);
	et_opts(&o, path);
	o.size = size;
	o.compression = "none";
	if (crashed) {
		session_crashed(&o, first, 3);
	} else {
		cr_assert_eq(coil_open(path, &o, &s), 0);
		put(s, 0);
		put(s, 1);
		put(s, 3);
		cr_assert_eq(coil_close(s), 0);
	}
	o.flags &= ~COIL_CREATE;
	o.compression = "zstd";
	if (crashed) {
		session_crashed(&o, second, 1);
	} else {
		cr_assert_eq(coil_open(path, &o, &s), 0);
		put(s, 2);
		cr_assert_eq(coil_close(s), 0);
	}
	img = (uint8_t *)cr_slurp(path, &len);
	raw_block5 = 0;
	for (size_t off = 0; off + FMT_BLOCK <= len; off += FMT_BLOCK)
		if (!memcmp(img + off, "SALVAGE-BLOCK-5!", 16))
			raw_block5 = off;
	cr_assert_neq(raw_block5, 0);
	free(img);
}

static void build_store(uint64_t size)
{
	build_store_as(size, false);
}

/* The same two sessions, each ended by a crash: the journal is kept. */
static void rebuild_crashed(void)
{
	unlink(path);
	build_store_as(16ull << 20, true);
}

static void build(void)
{
	for (int i = 0; i < NOBJ; i++) {
		want[i] = malloc(lens[i]);
		et_fill(want[i], lens[i], (uint64_t)i + 21, i == 2);
	}
	memcpy(want[1] + 5 * FMT_BLOCK, "SALVAGE-BLOCK-5!", 16);
	build_store(16ull << 20);
}

static void rm_out(void)
{
	char p[700];

	for (int i = 0; i < NOBJ; i++) {
		snprintf(p, sizeof(p), "%s/objects/%s", out, files[i]);
		unlink(p);
	}
	snprintf(p, sizeof(p), "%s/objects", out);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/report.txt", out);
	unlink(p);
	rmdir(out);
}

static void finish(void)
{
	rm_out();
	unlink(path);
	for (int i = 0; i < NOBJ; i++)
		free(want[i]);
}

TestSuite(salvage, .init = build, .fini = finish);

/* Run the salvage; check the store was not written; check each object's
 * file: its bytes are the written ones except in the ranges the report
 * lists as lost, which are zeros.  @return the exit status; *@lost: bytes
 * listed as lost per object. */
static int salvage(char **report, uint64_t lost[NOBJ])
{
	size_t before_len, after_len;
	char *before = cr_slurp(path, &before_len), *after, p[700];
	struct cli_run r;
	int status;

	rm_out();
	r = cli_run(path, "salvage", path, out, NULL);
	status = r.status;
	after = cr_slurp(path, &after_len);
	cr_assert_eq(before_len, after_len);
	cr_assert(!memcmp(before, after, before_len), "salvage wrote the store");
	free(before);
	free(after);
	if (status != 0 && status != 3) {
		*report = strdup(r.err);
		cli_run_free(&r);
		return status;
	}
	snprintf(p, sizeof(p), "%s/report.txt", out);
	*report = cr_slurp(p, NULL);
	/* stdout is the report without its object -> file lines */
	cr_assert(strstr(*report, strrchr(r.out, '\n') ? "salvaged " : "?"));
	cr_assert(strstr(r.out, "salvaged "), "%s", r.out);
	cli_run_free(&r);
	for (int i = 0; i < NOBJ; i++) {
		uint8_t *mask = calloc(lens[i], 1);
		char *got, pat[300], *q = *report;
		size_t got_len;

		lost[i] = 0;
		snprintf(pat, sizeof(pat), "lost: object '%s' bytes [", names[i]);
		while ((q = strstr(q, pat))) {
			unsigned long long a, z;

			cr_assert_eq(sscanf(q + strlen(pat), "%llu, %llu)", &a,
					    &z), 2);
			cr_assert(a < z && z <= lens[i]);
			memset(mask + a, 1, z - a);
			lost[i] += z - a;
			q += strlen(pat);
		}
		snprintf(p, sizeof(p), "%s/objects/%s", out, files[i]);
		got = cr_slurp(p, &got_len);
		cr_assert_eq(got_len, lens[i], "%s: %zu bytes", names[i], got_len);
		for (size_t k = 0; k < lens[i]; k++)
			cr_assert_eq((uint8_t)got[k], mask[k] ? 0 : want[i][k],
				     "%s byte %zu", names[i], k);
		free(got);
		free(mask);
	}
	return status;
}

Test(salvage, intact_store_comes_back_whole)
{
	uint64_t lost[NOBJ];
	char *rep;

	cr_assert_eq(salvage(&rep, lost), 0, "%s", rep);
	for (int i = 0; i < NOBJ; i++)
		cr_assert_eq(lost[i], 0);
	cr_assert(strstr(rep, "4 intact, 0 damaged"), "%s", rep);
	free(rep);
}

/* Damage both superblock copies: the store does not open, and salvage
 * brings every object back whole from a layout rebuilt from the
 * checkpoint. */
static void both_superblocks_damaged(void)
{
	uint64_t lost[NOBJ];
	char *rep;
	coil_store *s;

	flip_byte(path, 100);
	flip_byte(path, FMT_BLOCK + 100);
	cr_assert_eq(coil_open(path, NULL, &s), -EIO);
	cr_assert_eq(salvage(&rep, lost), 3, "%s", rep);
	for (int i = 0; i < NOBJ; i++)
		cr_assert_eq(lost[i], 0, "%s lost %lu", names[i],
			     (unsigned long)lost[i]);
	cr_assert(strstr(rep, "metadata: both superblock copies are damaged: "
			      "layout rebuilt from the checkpoint"), "%s", rep);
	free(rep);
}

Test(salvage, both_superblocks_damaged)
{
	both_superblocks_damaged();
}

/* The same store made with a maximum of 1 GiB: it grew to far less, so
 * the file's length no longer tells the layout (the areas' places depend
 * on the maximum); the scan finds it from the checkpoint and the segment
 * headers. */
Test(salvage, growing_store_both_superblocks_damaged)
{
	struct stat st;

	unlink(path);
	build_store(1ull << 30);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_lt((uint64_t)st.st_size, 256ull << 20, "the store grows");
	both_superblocks_damaged();
}

Test(salvage, checkpoint_damaged)
{
	struct fmt_super sb;
	uint64_t lost[NOBJ];
	char *rep;
	coil_store *s;

	/* the journal after the older deltas is what brings the newest
	 * one's changes back: sessions that crashed keep it (a clean close
	 * gives the journal back; checkpoint_damaged_after_close) */
	rebuild_crashed();
	read_super(path, &sb);
	cr_assert_neq(sb.ckpt_slot, FMT_CKPT_SLOT_NONE);
	/* The sessions' checkpoints after the first are deltas after one
	 * base: damage the newest delta.  The base and the deltas before it
	 * load, and the journal after them (still in the ring, in one
	 * session) brings the rest back. */
	cr_assert(sb.incompat & FMT_INCOMPAT_CKPT_DELTA);
	cr_assert_geq(sb.delta_count, 2);
	/* in both copies: one alone is read from the other
	 * (tests/test_ckpt_mirror.c) */
	for (int slot = 0; slot < 2; slot++)
		flip_byte(path, sb.ckpt_off[slot] +
					COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK) +
					sb.delta_bytes - FMT_BLOCK + 20);
	cr_assert_eq(coil_open(path, NULL, &s), -EIO);
	cr_assert_eq(salvage(&rep, lost), 3, "%s", rep);
	for (int i = 0; i < NOBJ; i++)
		cr_assert_eq(lost[i], 0, "%s lost %lu", names[i],
			     (unsigned long)lost[i]);
	cr_assert(strstr(rep, "does not verify: the"), "%s", rep);
	free(rep);
}

/* `coil salvage` of a store no checkpoint of which is usable: the journal
 * is replayed from its oldest chunk; what it holds comes back exact (the
 * first session's objects: their creates and writes are still in the
 * ring, the second session's follow a sequence gap), and the report says
 * what was given up (@note too, if not NULL). */
static void salvage_journal_alone(const char *note)
{
	struct cli_run r;
	char p[700], *rep, *got;
	size_t len;

	rm_out();
	r = cli_run(path, "salvage", path, out, NULL);
	cr_assert_eq(r.status, 3, "%s%s", r.out, r.err);
	snprintf(p, sizeof(p), "%s/report.txt", out);
	rep = cr_slurp(p, NULL);
	if (note)
		cr_assert(strstr(rep, note), "%s", rep);
	cr_assert(strstr(rep, "journal replayed from its oldest chunk"), "%s",
		  rep);
	for (int i = 0; i < NOBJ; i++) {
		if (i == 2)
			continue; /* the second session's: after a sequence gap */
		snprintf(p, sizeof(p), "%s/objects/%s", out, files[i]);
		got = cr_slurp(p, &len);
		cr_assert_eq(len, lens[i], "%s", names[i]);
		cr_assert(!memcmp(got, want[i], len), "%s differs", names[i]);
		free(got);
	}
	free(rep);
	cli_run_free(&r);
}

/* The base checkpoint damaged in both copies: the deltas after it cannot
 * be used without it, so the journal is replayed from its oldest chunk:
 * the first session's objects come back exact, the second session's (after
 * a sequence gap) do not.  docs/format.md lists this. */
Test(salvage, base_checkpoint_damaged)
{
	struct fmt_super sb;
	coil_store *s;

	rebuild_crashed();
	read_super(path, &sb);
	cr_assert_neq(sb.ckpt_slot, FMT_CKPT_SLOT_NONE);
	flip_byte(path, sb.ckpt_off[0] + 20);
	flip_byte(path, sb.ckpt_off[1] + 20);
	cr_assert_eq(coil_open(path, NULL, &s), -EIO);
	salvage_journal_alone(NULL);
}

/* Cut in the middle of the data: what lies before the cut comes back,
 * what lies after is listed, nothing is wrong. */
Test(salvage, truncated_file)
{
	struct fmt_super sb;
	uint64_t lost[NOBJ], total = 0;
	char *rep;

	read_super(path, &sb);
	cr_assert_eq(truncate(path, (off_t)(raw_block5 + 1000)), 0);
	cr_assert_eq(salvage(&rep, lost), 3, "%s", rep);
	cr_assert_eq(lost[0], 0, "tiny lies before the cut");
	cr_assert_geq(lost[1], lens[1] - 5 * FMT_BLOCK,
		      "raw past its block 5 lies after the cut");
	cr_assert_leq(lost[1], lens[1] - 4 * FMT_BLOCK);
	for (int i = 0; i < NOBJ; i++)
		total += lost[i];
	cr_assert(strstr(rep, "bytes shorter than its superblock says"), "%s",
		  rep);
	cr_assert(strstr(rep, "damaged,"), "%s", rep);
	cr_assert_gt(total, 0);
	free(rep);
}

Test(salvage, damaged_block_is_listed_and_zero)
{
	uint64_t lost[NOBJ];
	char *rep;

	flip_byte(path, raw_block5 + 2000);
	cr_assert_eq(salvage(&rep, lost), 3, "%s", rep);
	cr_assert(strstr(rep, "lost: object 'raw' bytes [20480, 24576): "
			      "unreadable"), "%s", rep);
	cr_assert_eq(lost[1], FMT_BLOCK);
	cr_assert_eq(lost[0] + lost[2] + lost[3], 0);
	cr_assert(strstr(rep, "3 intact, 1 damaged"), "%s", rep);
	free(rep);
}

Test(salvage, not_a_store_and_bad_target)
{
	struct cli_run r;
	char junk[300];
	int fd;

	snprintf(junk, sizeof(junk), "%s.junk", path);
	fd = open(junk, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 8 << 20), 0);
	close(fd);
	rm_out();
	r = cli_run(path, "salvage", junk, out, NULL);
	cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
	cli_run_free(&r);
	unlink(junk);
	/* a directory that already holds a salvage is not overwritten */
	r = cli_run(path, "salvage", path, out, NULL);
	cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
	cr_expect(strstr(r.err, "salvage into a new directory"), "%s", r.err);
	cli_run_free(&r);
	r = cli_run(path, "salvage", path, NULL);
	cr_expect_eq(r.status, 2);
	cli_run_free(&r);
}

/* Both checkpoint areas damaged: no checkpoint verifies, the journal is
 * replayed from its oldest chunk; what it holds comes back exact (the
 * first session's objects: their creates and writes are still in the
 * ring), and the report says what was given up. */
Test(salvage, both_checkpoints_damaged_journal_alone)
{
	struct fmt_super sb;

	rebuild_crashed();
	read_super(path, &sb);
	flip_byte(path, sb.ckpt_off[0] + FMT_BLOCK + 20);
	flip_byte(path, sb.ckpt_off[1] + FMT_BLOCK + 20);
	salvage_journal_alone("the other area holds none that verifies");
}

/* After a clean close the journal holds nothing (its blocks went back to
 * the file system): a checkpoint damaged in both copies has no journal to
 * fall back on, and salvage says so instead of inventing objects.  The
 * trade docs/space.md ("At close") describes: the mirror is what guards
 * the checkpoint. */
Test(salvage, checkpoint_damaged_after_close)
{
	struct fmt_super sb;
	struct cli_run r;
	char p[700], *rep;

	read_super(path, &sb);
	flip_byte(path, sb.ckpt_off[0] + 20);
	flip_byte(path, sb.ckpt_off[1] + 20);
	rm_out();
	r = cli_run(path, "salvage", path, out, NULL);
	cr_assert_neq(r.status, 0, "%s%s", r.out, r.err);
	snprintf(p, sizeof(p), "%s/report.txt", out);
	rep = cr_slurp(p, NULL);
	cr_assert(strstr(rep, "no journal chunk of this store is left"), "%s",
		  rep);
	free(rep);
	cli_run_free(&r);
}
