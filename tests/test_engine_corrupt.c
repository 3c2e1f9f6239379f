/* test_engine_corrupt: flip bytes in the data, journal, checkpoint and
 * superblocks of a closed store.  Reads must give the right bytes or -EIO
 * (never wrong bytes); open must fail cleanly or recover from the other
 * superblock copy; nothing may crash or hang. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/engine_test_util.h"

#define OBJ_LEN (1u << 20)
#define J_LEN (512u << 10)

static uint8_t *want_z, *want_r, *want_j;
static char path[256];
static struct coil_options opts;
static struct fmt_super sb;

static void build_store(void)
{
	coil_store *s;
	coil_obj *h;
	pid_t pid;
	int st;

	want_z = malloc(OBJ_LEN);
	want_r = malloc(OBJ_LEN);
	want_j = malloc(J_LEN);
	et_fill(want_z, OBJ_LEN, 1, 1);
	for (uint32_t i = 0; i < OBJ_LEN; i++)
		want_z[i] = (i / 8192) % 2 ? want_z[i] : (uint8_t)"abcdefgh"[i % 8];
	et_fill(want_r, OBJ_LEN, 2, 0);
	et_fill(want_j, J_LEN, 3, 1);
	et_path(path, sizeof(path), "corrupt");
	et_opts(&opts, path);
	opts.size = 32ull << 20;
	cr_assert_eq(coil_open(path, &opts, &s), 0);
	cr_assert_eq(coil_obj_open(s, "z", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, want_z, OBJ_LEN, 0), OBJ_LEN);
	coil_obj_close(h);
	cr_assert_eq(coil_obj_open(s, "r", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, want_r, OBJ_LEN, 0), OBJ_LEN);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	opts.flags &= ~COIL_CREATE;

	/* Object j lives only in the journal: written by a process that
	 * never closes the store. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (coil_open(path, &opts, &s) < 0 ||
		    coil_obj_open(s, "j", COIL_CREATE, &h) < 0)
			_exit(1);
		for (uint32_t off = 0; off < J_LEN; off += 65536)
			if (coil_pwrite(h, want_j + off, 65536, off) != 65536)
				_exit(1);
		if (coil_sync(s) < 0)
			_exit(1);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	int fd = open(path, O_RDONLY);
	uint8_t blk[FMT_BLOCK];
	cr_assert_eq(pread(fd, blk, FMT_BLOCK, 0), FMT_BLOCK);
	if (fmt_super_decode(&sb, blk, FMT_BLOCK) < 0) {
		cr_assert_eq(pread(fd, blk, FMT_BLOCK, FMT_BLOCK), FMT_BLOCK);
		cr_assert_eq(fmt_super_decode(&sb, blk, FMT_BLOCK), 0);
	}
	close(fd);
}

static uint8_t flip_at(uint64_t off, uint8_t x)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= x;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	fsync(fd);
	close(fd);
	return b;
}

/* Every byte read is right or the read is -EIO.  For j (journal only)
 * a lost suffix of writes is allowed, never other bytes. */
static void check_object(coil_store *s, const char *name, const uint8_t *want,
			 uint32_t len, bool may_lose, int *eio)
{
	uint8_t *rd = malloc(65536);
	coil_obj *h;
	uint64_t size;
	int rc = coil_obj_open(s, name, 0, &h);

	if (rc == -ENOENT && may_lose) {
		free(rd);
		return;
	}
	cr_assert_eq(rc, 0, "open %s: %s", name, coil_strerror(rc));
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert(size == len || (may_lose && size <= len), "%s size %lu", name,
		  (unsigned long)size);
	for (uint64_t off = 0; off < size; off += 65536) {
		int64_t n = coil_pread(h, rd, 65536, off);
		if (n == -EIO) {
			(*eio)++;
			continue;
		}
		cr_assert_eq(n, (int64_t)(size - off < 65536 ? size - off : 65536),
			     "%s read at %lu: %ld", name, (unsigned long)off, (long)n);
		for (int64_t i = 0; i < n; i++) {
			uint8_t w = want[off + (uint64_t)i];
			cr_assert(rd[i] == w || (may_lose && rd[i] == 0),
				  "%s: wrong byte at %lu", name,
				  (unsigned long)(off + (uint64_t)i));
		}
	}
	coil_obj_close(h);
	free(rd);
}

/* Open read-only (the file stays as it is, so a flip can be undone) and
 * check everything.  @return the open's result. */
static int open_and_check(int *eio)
{
	struct coil_options o = opts;
	coil_store *s;
	int rc;

	o.flags |= COIL_RDONLY;
	rc = coil_open(path, &o, &s);
	if (rc < 0) {
		cr_assert(rc == -EIO || rc == -ENOMEM, "open: %s", coil_strerror(rc));
		return rc;
	}
	check_object(s, "z", want_z, OBJ_LEN, false, eio);
	check_object(s, "r", want_r, OBJ_LEN, false, eio);
	check_object(s, "j", want_j, J_LEN, true, eio);
	cr_assert_eq(coil_close(s), 0);
	return 0;
}

static void flip_region(const char *what, uint64_t lo, uint64_t hi, int iters,
			uint64_t seed, bool must_open)
{
	int opened = 0, failed = 0, eio = 0;

	for (int i = 0; i < iters; i++) {
		tu_xorshift(&seed);
		uint64_t off = lo + seed % (hi - lo);
		uint8_t x = (uint8_t)(1u << ((seed >> 40) % 8));
		flip_at(off, x);
		int rc = open_and_check(&eio);
		if (rc == 0)
			opened++;
		else
			failed++;
		cr_assert(!must_open || rc == 0, "%s: open failed after flip at %lu",
			  what, (unsigned long)off);
		flip_at(off, x); /* undo */
	}
	cr_log_info("%s: %d flips, %d opened, %d refused (-EIO), %d reads -EIO",
		    what, iters, opened, failed, eio);
}

Test(engine_corrupt, flips_everywhere, .timeout = 300)
{
	int eio = 0;

	build_store();
	cr_assert_eq(open_and_check(&eio), 0);
	cr_assert_eq(eio, 0);

	/* Data: the first segments hold z and r. */
	flip_region("data", sb.data_off, sb.data_off + 4 * sb.segment_size, 40,
		    11, true);
	/* Journal: the records of j (after the checkpoint's replay point). */
	flip_region("journal", sb.journal_off + sb.replay_off,
		    sb.journal_off + sb.replay_off + 32 * 1024, 30, 22, true);
	/* Checkpoint: header and payload. */
	flip_region("checkpoint", sb.ckpt_off[sb.ckpt_slot],
		    sb.ckpt_off[sb.ckpt_slot] + sb.ckpt_bytes, 20, 33, false);
	/* One superblock copy: the other one opens the store. */
	flip_region("superblock A", 0, FMT_SUPER_CSUM_OFF + 8, 15, 44, true);
	flip_region("superblock B", FMT_BLOCK, FMT_BLOCK + FMT_SUPER_CSUM_OFF + 8,
		    15, 55, true);
	/* Both copies: the store must not open. */
	flip_at(40, 0x10);
	flip_at(FMT_BLOCK + 40, 0x10);
	cr_assert_eq(open_and_check(&eio), -EIO);
	flip_at(40, 0x10);
	flip_at(FMT_BLOCK + 40, 0x10);
	cr_assert_eq(open_and_check(&eio), 0);
	unlink(path);
}

Test(engine_corrupt, garbage_and_short_files, .timeout = 60)
{
	char p[256];
	struct coil_options o;
	coil_store *s;
	uint8_t junk[65536];
	int fd;

	et_path(p, sizeof(p), "garbage");
	et_opts(&o, p);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(p, &o, &s), -ENOENT);
	et_fill(junk, sizeof(junk), 99, 0);
	fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	/* Not a store at all, which is not the same as a damaged one. */
	cr_assert_eq(coil_open(p, &o, &s), -EMEDIUMTYPE);
	/* COIL_CREATE never formats over an existing non-empty file. */
	o.flags |= COIL_CREATE;
	cr_assert_eq(coil_open(p, &o, &s), -EMEDIUMTYPE);
	fd = open(p, O_WRONLY | O_TRUNC);
	cr_assert_eq(write(fd, junk, 100), 100);
	close(fd);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(p, &o, &s), -EMEDIUMTYPE);
	unlink(p);
}

/* Only one copy with coil's magic, and that one damaged: a damaged store
 * (-EIO), not a foreign file. */
Test(engine_corrupt, one_magic_is_a_damaged_store, .timeout = 60)
{
	char p[256];
	struct coil_options o;
	coil_store *s;
	uint8_t blk[4096] = { 0 };
	int fd;

	et_path(p, sizeof(p), "onemagic");
	et_opts(&o, p);
	cr_assert_eq(coil_open(p, &o, &s), 0);
	cr_assert_eq(coil_close(s), 0);
	fd = open(p, O_RDWR);
	cr_assert_eq(pwrite(fd, blk, sizeof(blk), 4096), (ssize_t)sizeof(blk));
	cr_assert_eq(pread(fd, blk, sizeof(blk), 0), (ssize_t)sizeof(blk));
	blk[40] ^= 0x10; /* keep A's magic, break its checksum */
	cr_assert_eq(pwrite(fd, blk, sizeof(blk), 0), (ssize_t)sizeof(blk));
	close(fd);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(p, &o, &s), -EIO);
	unlink(p);
}

Test(engine_corrupt, directory_is_eisdir, .timeout = 60)
{
	struct coil_options o;
	coil_store *s;

	mkdir("engine-stores", 0755);
	et_opts(&o, "engine-stores");
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open("engine-stores", &o, &s), -EISDIR);
	o.flags |= COIL_RDONLY;
	cr_assert_eq(coil_open("engine-stores", &o, &s), -EISDIR);
	o.flags |= COIL_NO_DIRECT;
	cr_assert_eq(coil_open("engine-stores", &o, &s), -EISDIR);
}
