/* tests/test_small_write.c — small writes kept inline in the journal:
 * they complete without a data write and are read back from memory; they
 * survive kill -9 through the journal (replay) and through a checkpoint
 * that carries them; the packer writes them densely into segments (pages
 * compressed 2:1 share blocks) and relocates them by compare-and-swap, so
 * overwrites, truncates and removes racing it always win; a read never
 * returns a page's old bytes after an overwrite, whichever of memory, the
 * cache or the device served the old one; the superblock says the store
 * needs the inline-blob feature; a deep writer of raw blocks is placed in
 * segments instead. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "engine/log/ckpt.h"
#include "engine/pack.h"
#include "engine/store.h"
#include "format/format.h"
#include "uring/uring_fault.h"
#include "tests/engine_test_util.h"

#define PG 4096u

/* Page @p at version @v, about 2:1 compressible (a database's page). */
static void page_fill(uint8_t *b, uint32_t p, uint32_t v)
{
	uint64_t x = ((uint64_t)p << 32 | v) * 0x9E3779B97F4A7C15ull + 11;

	memcpy(b, &p, 4);
	memcpy(b + 4, &v, 4);
	for (uint32_t i = 8; i < PG / 2; i++) {
		tu_xorshift(&x);
		b[i] = (uint8_t)(' ' + x % 95);
	}
	for (uint32_t i = PG / 2; i < PG; i++)
		b[i] = b[i - PG / 2 + 8];
}

/* @return the version page @p holds, UINT32_MAX when torn or foreign. */
static uint32_t page_version(const uint8_t *b, uint32_t p)
{
	uint8_t want[PG];
	uint32_t gp, v;

	memcpy(&gp, b, 4);
	memcpy(&v, b + 4, 4);
	if (gp != p)
		return UINT32_MAX;
	page_fill(want, p, v);
	return memcmp(want, b, PG) == 0 ? v : UINT32_MAX;
}

static uint64_t stat_of(coil_store *s, const char *section, const char *key)
{
	static char js[65536];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, section, key);
}

static coil_store *open_at(const char *path, bool create)
{
	struct coil_options o;
	coil_store *s;

	et_opts(&o, path);
	o.size = 256ull << 20;
	if (!create)
		o.flags &= ~COIL_CREATE;
	int rc = coil_open(path, &o, &s);

	cr_assert_eq(rc, 0, "open %s: %s", path, coil_strerror(rc));
	return s;
}

static void write_pages(coil_obj *h, uint32_t first, uint32_t n, uint32_t v)
{
	uint8_t b[PG];

	for (uint32_t p = first; p < first + n; p++) {
		page_fill(b, p, v);
		cr_assert_eq(coil_pwrite(h, b, PG, (uint64_t)p * PG), PG);
	}
}

static void check_pages(coil_obj *h, uint32_t first, uint32_t n, uint32_t v)
{
	uint8_t b[PG];

	for (uint32_t p = first; p < first + n; p++) {
		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_version(b, p), v, "page %u: want v%u", p, v);
	}
}

Test(small_write, completes_without_a_data_write)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t dev0, dev1;

	et_path(path, sizeof(path), "sw-mem");
	s = open_at(path, true);
	cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
	dev0 = stat_of(s, "\"io\"", "device_bytes_written");
	write_pages(h, 0, 64, 1);
	dev1 = stat_of(s, "\"io\"", "device_bytes_written");
	cr_assert_eq(stat_of(s, "small_writes", "inline"), 64);
	cr_assert_eq(stat_of(s, "small_writes", "in_memory_blobs"), 64);
	/* only journal chunks went out (one block each at queue depth 1,
	 * a compressed page and its record, and the odd one of another
	 * thread's); a data write per page would double it */
	cr_assert_leq(dev1 - dev0, 66ull * PG,
		     "%llu device bytes for 64 small writes",
		     (unsigned long long)(dev1 - dev0));
	check_pages(h, 0, 64, 1);
	/* a write over 16 KiB takes the segment path */
	{
		static uint8_t big[64 << 10];

		et_fill(big, sizeof(big), 3, 1);
		cr_assert_eq(coil_pwrite(h, big, sizeof(big), 1 << 20),
			     (int64_t)sizeof(big));
		cr_assert_eq(stat_of(s, "small_writes", "inline"), 64);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	/* close packs what is in memory */
	cr_assert_eq(coil_close(s), 0);
	s = open_at(path, false);
	cr_assert_eq(stat_of(s, "small_writes", "in_memory_blobs"), 0);
	cr_assert_eq(coil_obj_open(s, "db", 0, &h), 0);
	check_pages(h, 0, 64, 1);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* The closed store at @path opened again: pages first.. of "db" hold
 * version @v. */
static void reopened_check(const char *path, uint32_t first, uint32_t n,
			   uint32_t v)
{
	coil_store *s = open_at(path, false);
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "db", 0, &h), 0);
	check_pages(h, first, n, v);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
}

/* The journal's linear head: how many bytes its chunks have taken. */
static uint64_t journal_head(coil_store *s)
{
	uint64_t v;

	pthread_mutex_lock(&s->jlock);
	v = s->j_head_lin;
	pthread_mutex_unlock(&s->jlock);
	return v;
}

/* While its writers flush, the journal is written back behind its head
 * (so a flush finds little left to write), never more than the journal
 * took; a store nobody flushes leaves it to the page cache, and so does
 * one whose last flush is over a second old.  Nothing of it changes what
 * reads back. */
Test(small_write, journal_written_behind_while_writers_flush)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t h0, asks, bytes;

	et_path(path, sizeof(path), "sw-wb");
	s = open_at(path, true);
	cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
	write_pages(h, 0, 256, 1);
	cr_assert_eq(stat_of(s, "\"journal\"", "writebehind_asks"), 0,
		     "no flush yet");
	h0 = journal_head(s);
	for (uint32_t i = 0; i < 512; i += 16) {
		write_pages(h, i, 16, 2);
		cr_assert_eq(coil_sync(s), 0);
	}
	asks = stat_of(s, "\"journal\"", "writebehind_asks");
	bytes = stat_of(s, "\"journal\"", "writebehind_bytes");
	cr_assert_gt(asks, 0);
	/* from up to a step before the flushes began */
	cr_assert_leq(bytes, journal_head(s) - h0 + 2 * ENGINE_JWB_BYTES,
		      "%llu bytes written behind %llu of journal",
		      (unsigned long long)bytes,
		      (unsigned long long)(journal_head(s) - h0));
	/* The last flush over a second ago: no more.  Counted from after
	 * the pause: journal writes of the store's own (the packer's
	 * records) may still ask within a second of the last flush. */
	usleep((useconds_t)(ENGINE_JWB_RECENT_NS / 1000 + 200000));
	asks = stat_of(s, "\"journal\"", "writebehind_asks");
	h0 = journal_head(s);
	write_pages(h, 0, 256, 3);
	/* their records reach the journal behind the writes' callbacks */
	for (int i = 0; i < 500 && journal_head(s) - h0 <= 2 * ENGINE_JWB_BYTES;
	     i++)
		usleep(10000);
	cr_assert_gt(journal_head(s) - h0, 2 * ENGINE_JWB_BYTES);
	cr_assert_eq(stat_of(s, "\"journal\"", "writebehind_asks"), asks);
	check_pages(h, 0, 256, 3);
	check_pages(h, 256, 256, 2);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	reopened_check(path, 0, 256, 3);
	reopened_check(path, 256, 256, 2);
	unlink(path);
}

/* @n page writes (pages first.., version 1) kept @depth in flight at
 * once; every one must succeed.  @return small_writes.inline's growth. */
static uint64_t write_deep(coil_store *s, coil_obj *h, uint32_t first,
			   uint32_t n, int depth)
{
	struct counter c = COUNTER_INIT;
	uint8_t *bufs = malloc((size_t)n * PG);
	uint64_t in0 = stat_of(s, "small_writes", "inline");

	cr_assert_not_null(bufs);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *b = bufs + (size_t)i * PG;

		page_fill(b, first + i, 1);
		counter_wait_below(&c, depth);
		counter_add(&c);
		cr_assert_eq(coil_write(h, b, PG, (uint64_t)(first + i) * PG,
					count_cb, &c), 0);
	}
	counter_wait(&c);
	cr_assert_eq(c.errors, 0);
	free(bufs);
	return stat_of(s, "small_writes", "inline") - in0;
}

/* Raw whole-block writes from a writer that keeps many in flight are
 * placed in a segment (written once) instead of the journal (written
 * twice); the same writer at queue depth 1, or writing compressed pages
 * (which packing stores densely), keeps the journal path. */
Test(small_write, deep_raw_writer_takes_the_segment_path)
{
	const char *codec[] = { "none", "zstd:1" };

	for (int k = 0; k < 2; k++) {
		struct coil_options o;
		char path[256];
		coil_store *s;
		coil_obj *h;
		uint64_t deep;

		et_path(path, sizeof(path), k ? "sw-deep-z" : "sw-deep-raw");
		et_opts(&o, path);
		o.size = 256ull << 20;
		o.compression = codec[k];
		/* each write waits for a device flush: a writer's depth
		 * builds up whatever this machine's speed */
		o.sync_writes = 1;
		cr_assert_eq(coil_open(path, &o, &s), 0);
		cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
		write_pages(h, 0, 16, 1);
		cr_assert_eq(stat_of(s, "small_writes", "inline"), 16,
			     "%s: queue depth 1 goes through the journal",
			     codec[k]);
		/* all 256 submitted at once: each waits for a flush, so the
		 * depth passes 8 once this thread submits faster than
		 * flushes complete.  How soon is the machine's: a loaded
		 * ASan run sent 131 through the journal before it did, a
		 * quiet release run 7, three busy loops beside ASan 7-41.
		 * At depth 1 none is placed; here a quarter of them at
		 * least.  Without the depth rule 239-248 go through the
		 * journal (the in-memory cap places the rest), so the bound
		 * still tells the rule's absence. */
		deep = write_deep(s, h, 16, 256, 256);
		if (k == 0)
			cr_assert_lt(deep, 192, "raw, 256 in flight: %llu "
				     "through the journal",
				     (unsigned long long)deep);
		else
			cr_assert_eq(deep, 256, "compressed pages stay inline");
		check_pages(h, 0, 272, 1);
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_close(s), 0);
		reopened_check(path, 0, 272, 1);
		unlink(path);
	}
}

Test(small_write, superblock_needs_the_feature)
{
	char path[256];
	uint8_t sb[2 * FMT_BLOCK];
	struct fmt_super a, b;
	int fd, ra, rb;
	coil_store *s;

	et_path(path, sizeof(path), "sw-feature");
	s = open_at(path, true);
	cr_assert_eq(coil_close(s), 0);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, sb, sizeof(sb), 0), (ssize_t)sizeof(sb));
	close(fd);
	ra = fmt_super_decode(&a, sb, FMT_BLOCK);
	rb = fmt_super_decode(&b, sb + FMT_BLOCK, FMT_BLOCK);
	cr_assert(ra == 0 || rb == 0);
	cr_assert(((ra == 0 ? a : b).incompat & FMT_INCOMPAT_INLINE) != 0);
	unlink(path);
}

/* A child writes pages (small writes, in memory and the journal only),
 * records each completed one in shared memory, then dies by SIGKILL: every
 * completed write is back after reopen.  @ckpt: the child has the
 * checkpoint thread write a checkpoint first, so the pages come back from
 * the checkpoint's inline blobs rather than from replayed records. */
static void kill_case(const char *tag, bool ckpt)
{
	char path[256];
	_Atomic uint32_t *done = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	coil_store *s;
	coil_obj *h;
	pid_t pid;
	int st;

	cr_assert_neq(done, MAP_FAILED);
	et_path(path, sizeof(path), tag);
	s = open_at(path, true);
	cr_assert_eq(coil_close(s), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		uint8_t b[PG];

		s = open_at(path, false);
		if (coil_obj_open(s, "db", COIL_CREATE, &h) < 0)
			_exit(2);
		for (uint32_t p = 0; p < 96; p++) {
			page_fill(b, p, 7);
			if (coil_pwrite(h, b, PG, (uint64_t)p * PG) != PG)
				_exit(3);
			atomic_store(&done[0], p + 1);
			if (ckpt && p == 63) {
				/* every page so far into a checkpoint,
				 * still in memory (not packed) */
				if (ckpt_write(s, false) < 0)
					_exit(4);
				atomic_store(&done[1],
					     (uint32_t)atomic_load(&s->mem.count));
			}
		}
		/* the writes were completed on this thread (the journal's
		 * chunk written by its writer), the path under test */
		atomic_store(&done[2], (uint32_t)stat_of(s, "\"journal\"",
							"chunks_by_writer"));
		kill(getpid(), SIGKILL);
		_exit(5);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "child exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	cr_assert_eq(atomic_load(&done[0]), 96);
	cr_assert_gt(atomic_load(&done[2]), 0);
	if (ckpt)
		cr_assert_eq(atomic_load(&done[1]), 64,
			     "the checkpoint held the 64 pages in memory");
	s = open_at(path, false);
	cr_assert_eq(coil_obj_open(s, "db", 0, &h), 0);
	check_pages(h, 0, 96, 7);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	munmap((void *)done, 4096);
	unlink(path);
}

Test(small_write, kill9_replays_inline_records)
{
	kill_case("sw-kill", false);
}

Test(small_write, kill9_after_checkpoint_of_inline_blobs)
{
	kill_case("sw-killck", true);
}

Test(small_write, packing_is_dense)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t stored, packed, blobs;
	const uint32_t n = 1024;

	et_path(path, sizeof(path), "sw-dense");
	s = open_at(path, true);
	cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
	write_pages(h, 0, n, 1);
	cr_assert_eq(pack_now(s), 0);
	/* a packed blob's memory goes when its last holder lets go (a
	 * checkpoint encoding it at that moment): give it a moment */
	for (int i = 0; i < 200 &&
	     stat_of(s, "small_writes", "in_memory_blobs"); i++)
		usleep(10000);
	cr_assert_eq(stat_of(s, "small_writes", "in_memory_blobs"), 0);
	blobs = stat_of(s, "small_writes", "packed_blobs");
	packed = stat_of(s, "small_writes", "packed_bytes");
	stored = stat_of(s, "\"compression\"", "written_stored");
	/* every page written inline was packed once (past the in-memory
	 * cap, 1 MiB for this store's checkpoint area, a page takes the
	 * segment path while the packer catches up) */
	cr_assert_eq(blobs, stat_of(s, "small_writes", "inline"),
		     "each page packed once");
	cr_assert_gt(blobs, n / 4);
	/* written_stored: the pages' compressed bytes; packed_bytes: the
	 * batches' slots.  Placement puts compressed blobs back to back
	 * in the segment, which the live accounting sees. */
	cr_assert_lt(stored, (uint64_t)n * PG * 6 / 10, "pages compress");
	/* packed_bytes: the device bytes of the packer's runs, blobs back
	 * to back, padded once a run */
	cr_assert_leq(packed, stored + stat_of(s, "small_writes",
						 "pack_batches") * 2 * FMT_BLOCK,
		      "packed %llu for %llu stored", (unsigned long long)packed,
		      (unsigned long long)stored);
	{
		uint64_t live = stat_of(s, "\"space\"", "stored");

		cr_assert_eq(live, stored, "live %llu stored %llu",
			     (unsigned long long)live,
			     (unsigned long long)stored);
	}
	check_pages(h, 0, n, 1);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Writers overwrite, truncate and remove while the packer runs again and
 * again: every page reads its last version (or zeros past a truncate). */
struct race {
	coil_store *s;
	_Atomic bool stop;
	_Atomic int err;
};

static void *packer_loop(void *arg)
{
	struct race *r = arg;

	while (!atomic_load(&r->stop)) {
		int rc = pack_now(r->s);

		if (rc < 0)
			atomic_store(&r->err, rc);
	}
	return NULL;
}

Test(small_write, packing_races_overwrites_truncates_removes)
{
	char path[256];
	struct race r = { 0 };
	pthread_t th;
	coil_store *s;
	coil_obj *h;
	const uint32_t n = 128;
	uint8_t b[PG];

	et_path(path, sizeof(path), "sw-race");
	s = open_at(path, true);
	r.s = s;
	cr_assert_eq(pthread_create(&th, NULL, packer_loop, &r), 0);
	for (uint32_t round = 1; round <= 12; round++) {
		coil_obj *t;

		cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
		write_pages(h, 0, n, round);
		/* half the pages again, the last one truncated away */
		write_pages(h, 0, n / 2, round + 100);
		cr_assert_eq(coil_obj_truncate(h, (uint64_t)(n - 1) * PG), 0);
		check_pages(h, 0, n / 2, round + 100);
		check_pages(h, n / 2, n / 2 - 1, round);
		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)(n - 1) * PG), 0);
		cr_assert_eq(coil_obj_close(h), 0);
		/* a scratch object written and removed at once */
		cr_assert_eq(coil_obj_open(s, "tmp", COIL_CREATE, &t), 0);
		write_pages(t, 0, 32, round);
		cr_assert_eq(coil_obj_close(t), 0);
		cr_assert_eq(coil_obj_remove(s, "tmp"), 0);
	}
	atomic_store(&r.stop, true);
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&r.err), 0, "%s",
		     coil_strerror(atomic_load(&r.err)));
	cr_assert_eq(pack_now(s), 0);
	cr_assert_eq(coil_obj_open(s, "db", 0, &h), 0);
	check_pages(h, 0, n / 2, 112);
	check_pages(h, n / 2, n / 2 - 1, 12);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	/* the same after recovery */
	s = open_at(path, false);
	cr_assert_eq(coil_obj_open(s, "db", 0, &h), 0);
	check_pages(h, 0, n / 2, 112);
	check_pages(h, n / 2, n / 2 - 1, 12);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* A page read from memory, then from the device after packing (and kept
 * in the cache), then overwritten: each read returns the newest bytes. */
Test(small_write, no_stale_read_across_memory_cache_device)
{
	char path[256];
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "sw-stale");
	s = open_at(path, true);
	cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
	for (uint32_t v = 1; v <= 6; v++) {
		write_pages(h, 0, 8, v);
		check_pages(h, 0, 8, v);          /* from memory */
		cr_assert_eq(pack_now(s), 0);
		check_pages(h, 0, 8, v);          /* device, then kept */
		check_pages(h, 0, 8, v);          /* the cache */
		write_pages(h, 0, 4, v + 50);     /* overwrite half */
		check_pages(h, 0, 4, v + 50);
		check_pages(h, 4, 4, v);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Unaligned small writes over each other, reads of any range, truncates:
 * the object always equals a byte model (compressible and random data,
 * so both codecs and partial reads of both are exercised). */
Test(small_write, unaligned_overwrites_match_a_model)
{
	enum { OBJ = 96 << 10, WMAX = 12 << 10 };
	static uint8_t model[OBJ], buf[WMAX], rd[WMAX];
	char path[256];
	uint64_t x = 0x5eed, size = 0;
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "sw-model");
	s = open_at(path, true);
	cr_assert_eq(coil_obj_open(s, "m", COIL_CREATE, &h), 0);
	for (uint32_t n = 0; n < 4000; n++) {
		uint64_t r = tu_xorshift(&x);
		uint64_t off = (r >> 8) % (OBJ - 1);
		uint32_t len = 1 + (uint32_t)((r >> 32) % WMAX);

		if (off + len > OBJ)
			len = (uint32_t)(OBJ - off);
		switch (r % 8) {
		case 0: case 1: case 2: case 3:
			et_fill(buf, len, r, (int)(r >> 3) & 1);
			if ((r >> 3) & 1)
				memset(buf, 'a' + (int)(r % 26), len / 2);
			cr_assert_eq(coil_pwrite(h, buf, len, off), len);
			memcpy(model + off, buf, len);
			if (off + len > size)
				size = off + len;
			break;
		case 4: case 5: case 6: {
			int64_t want = off >= size ? 0 :
				(int64_t)COIL_MIN((uint64_t)len, size - off);

			cr_assert_eq(coil_pread(h, rd, len, off), want);
			for (int64_t i = 0; i < want; i++)
				cr_assert_eq(rd[i], model[off + i],
					     "op %u: byte %llu of [%llu, +%u)",
					     n, (unsigned long long)(off + i),
					     (unsigned long long)off, len);
			break;
		}
		default:
			if (r & (1u << 20)) {
				cr_assert_eq(pack_now(s), 0);
				break;
			}
			cr_assert_eq(coil_obj_truncate(h, off), 0);
			if (off < size)
				memset(model + off, 0, size - off);
			size = off;
			break;
		}
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Power cuts (the fault seam) at every I/O of a session that writes pages
 * inline, flushes, overwrites, packs, checkpoints (journal reuse) and
 * packs again: after each cut the store opens, every page reads a version
 * it was given (nothing torn or foreign), never older than the last one a
 * flush covered. */
#define PC_PAGES 48u

static int pc_session(const char *path, uint32_t *floor, uint32_t *ceil)
{
	coil_store *s;
	coil_obj *h;
	uint8_t b[PG];
	int rc;

	s = NULL;
	h = NULL;
	rc = coil_open(path, NULL, &s);
	if (rc < 0)
		return rc;
	rc = coil_obj_open(s, "db", 0, &h);
	if (rc < 0)
		h = NULL;
	for (uint32_t v = 2; rc == 0 && v <= 4; v++) {
		/* pages [0, n) get version v; n shrinks so versions differ */
		uint32_t n = PC_PAGES >> (v - 2);

		for (uint32_t p = 0; p < n && rc == 0; p++) {
			page_fill(b, p, v);
			ceil[p] = v;
			rc = coil_pwrite(h, b, PG, (uint64_t)p * PG) == PG ? 0 : -EIO;
		}
		if (rc == 0)
			rc = coil_sync(s);
		if (rc == 0)
			for (uint32_t p = 0; p < n; p++)
				floor[p] = v;
		if (rc == 0)
			rc = v == 3 ? ckpt_write(s, false) : pack_now(s);
	}
	if (h)
		coil_obj_close(h);
	if (coil_close(s) < 0 && rc == 0)
		rc = -EIO; /* the cut came during close */
	return rc;
}

Test(small_write, power_cut_at_every_step, .timeout = 240)
{
	char path[256];
	uint32_t floor[PC_PAGES], ceil[PC_PAGES];
	uint64_t cuts = 0;
	/* every I/O in the release run; every step-th one when scaled down
	 * (the sanitizer pass), the modes still rotating */
	uint64_t step = 100 / tu_scaled(100, 10);
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "sw-cut");
	for (uint64_t k = 1;; k += step) {
		struct uring_fault_spec spec;
		int rc;

		/* a fresh store with every page at version 1, flushed */
		unlink(path);
		s = open_at(path, true);
		cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &h), 0);
		write_pages(h, 0, PC_PAGES, 1);
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_close(s), 0);
		for (uint32_t p = 0; p < PC_PAGES; p++)
			floor[p] = ceil[p] = 1;

		memset(&spec, 0, sizeof(spec));
		spec.record = true;
		spec.cut_kind = URING_FAULT_ANY;
		spec.cut_nth = k;
		spec.cut_mode = (int)(1 + k % 3);
		spec.cut_seed = k * 0x9E3779B97F4A7C15ull;
		uring_fault_set_next(&spec);
		rc = pc_session(path, floor, ceil);
		uring_fault_set_next(NULL);
		if (rc == 0)
			break; /* past the session's last I/O: no cut */
		cuts++;
		s = open_at(path, false);
		cr_assert_eq(coil_obj_open(s, "db", 0, &h), 0);
		for (uint32_t p = 0; p < PC_PAGES; p++) {
			uint8_t b[PG];
			uint32_t v;

			int64_t got = coil_pread(h, b, PG, (uint64_t)p * PG);

			cr_assert_eq(got, PG, "cut %llu: page %u: %lld",
				     (unsigned long long)k, p, (long long)got);
			v = page_version(b, p);
			cr_assert(v != UINT32_MAX && v >= floor[p] && v <= ceil[p],
				  "cut at I/O %llu (mode %d): page %u reads v%u, "
				  "flushed v%u, last written v%u",
				  (unsigned long long)k, spec.cut_mode, p, v,
				  floor[p], ceil[p]);
		}
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_close(s), 0);
	}
	cr_assert_gt(cuts * step, 100, "the session has more I/O than that");
	unlink(path);
}

/* Tiny objects and tiny overwrites take their bytes, not a block each:
 * 20,000 objects of 10-160 bytes take under 8 MiB of segments (a block
 * each was 80 MiB; 55,861 of them filled a 256 MiB store), and 10,000
 * overwrites of 1-3 bytes of a 16 MiB object fit a 64 MiB store (a block
 * each filled it after 8,767).  Both read back after a reopen. */
static void tiny_fill(uint8_t *b, uint32_t n, uint32_t i)
{
	for (uint32_t k = 0; k < n; k++)
		b[k] = (uint8_t)(i * 131 + k * 7 + (i >> 8));
}

Test(small_write, tiny_objects_are_packed, .timeout = 240)
{
	char path[256], name[32];
	struct coil_options o;
	const uint32_t nobj = (uint32_t)tu_scaled(20000, 4000);
	uint8_t b[160], r[160];
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "sw-tiny");
	et_opts(&o, path);
	o.size = 256ull << 20;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	for (uint32_t i = 0; i < nobj; i++) {
		uint32_t n = 10 + i % 151;

		snprintf(name, sizeof(name), "t%u", i);
		tiny_fill(b, n, i);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		cr_assert_eq(coil_pwrite(h, b, n, 0), n, "object %u", i);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_lt(stat_of(s, "\"space\"", "allocated"), 8ull << 20,
		     "%u tiny objects in whole blocks", nobj);
	for (uint32_t i = 0; i < nobj; i += 7) {
		uint32_t n = 10 + i % 151;

		snprintf(name, sizeof(name), "t%u", i);
		tiny_fill(b, n, i);
		cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
		cr_assert_eq(coil_pread(h, r, sizeof(r), 0), n);
		cr_assert(memcmp(r, b, n) == 0, "object %u", i);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(small_write, tiny_overwrites_are_packed, .timeout = 240)
{
	enum { OBJ = 16 << 20 };
	char path[256];
	struct coil_options o;
	const uint32_t nw = (uint32_t)tu_scaled(10000, 2000);
	uint8_t *model = malloc(OBJ), *rd = malloc(OBJ);
	uint64_t x = 77;
	coil_store *s;
	coil_obj *h;

	cr_assert(model && rd);
	et_fill(model, OBJ, 5, 1);
	et_path(path, sizeof(path), "sw-tinyover");
	et_opts(&o, path);
	o.size = 64ull << 20;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "big", COIL_CREATE, &h), 0);
	for (uint32_t off = 0; off < OBJ; off += 1u << 20)
		cr_assert_eq(coil_pwrite(h, model + off, 1u << 20, off),
			     1 << 20);
	for (uint32_t i = 0; i < nw; i++) {
		uint64_t r = tu_xorshift(&x);
		uint32_t n = 1 + (uint32_t)(r % 3);
		uint64_t off = (r >> 8) % (OBJ - n);

		for (uint32_t k = 0; k < n; k++)
			model[off + k] = (uint8_t)(r >> (16 + 8 * k));
		cr_assert_eq(coil_pwrite(h, model + off, n, off), n,
			     "overwrite %u", i);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "big", 0, &h), 0);
	cr_assert_eq(coil_pread(h, rd, OBJ, 0), OBJ);
	cr_assert(memcmp(rd, model, OBJ) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	free(model);
	free(rd);
	unlink(path);
}

/* A coil_pwrite alone at the head of the journal is written and completed
 * on its caller's thread (no hand-off to the ring thread and back), and a
 * coil_sync alone does its fdatasync there.  Other callers' callbacks still
 * never run there, nor inside their own submitting call: a thread writing
 * pages with coil_pwrite (and coil_sync every 50) while another submits
 * asynchronous writes of other pages (and a coil_flush every 50), and
 * every callback checks the thread it runs on.  Every page reads back at its last version. */
struct mix {
	coil_store *s;
	coil_obj *h;
	pthread_t pw;              /* the coil_pwrite thread */
	_Atomic bool pw_set;
	_Atomic uint32_t inflight, bad_thread, bad_res, done;
};

static _Thread_local bool tls_submitting;

static void mix_cb(void *arg, int64_t res)
{
	struct mix *m = arg;

	if (tls_submitting ||
	    (atomic_load(&m->pw_set) && pthread_equal(pthread_self(), m->pw)))
		atomic_fetch_add(&m->bad_thread, 1);
	if (res != PG)
		atomic_fetch_add(&m->bad_res, 1);
	atomic_fetch_add(&m->done, 1);
	atomic_fetch_sub(&m->inflight, 1);
}

/* An asynchronous coil_flush's callback: the same checks. */
static void mix_flush_cb(void *arg, int64_t res)
{
	mix_cb(arg, res == 0 ? (int64_t)PG : (int64_t)-EIO);
}

static void *mix_pwriter(void *arg)
{
	struct mix *m = arg;
	uint8_t b[PG];

	for (uint32_t i = 0; i < 1500; i++) {
		uint32_t p = i % 64;

		page_fill(b, p, 1 + i / 64);
		if (coil_pwrite(m->h, b, PG, (uint64_t)p * PG) != PG)
			atomic_fetch_add(&m->bad_res, 1);
		if (i % 50 == 49 && coil_sync(m->s) != 0)
			atomic_fetch_add(&m->bad_res, 1);
	}
	return NULL;
}

Test(small_write, own_thread_completion_keeps_others_callbacks_off_it,
     .timeout = 120)
{
	char path[256];
	static uint8_t vals[8][PG];
	struct mix m = { 0 };
	coil_store *s;
	pthread_t t;
	uint32_t slot = 0;

	et_path(path, sizeof(path), "sw-own");
	s = open_at(path, true);
	m.s = s;
	cr_assert_eq(coil_obj_open(s, "db", COIL_CREATE, &m.h), 0);
	/* alone first: completed on this thread */
	write_pages(m.h, 0, 64, 1);
	cr_assert_gt(stat_of(s, "\"journal\"", "chunks_by_writer"), 0);

	cr_assert_eq(pthread_create(&t, NULL, mix_pwriter, &m), 0);
	m.pw = t;
	atomic_store(&m.pw_set, true);
	for (uint32_t i = 0; i < 1500; i++) {
		uint32_t p = 64 + i % 64;
		uint8_t *v = vals[slot++ % 8];

		while (atomic_load(&m.inflight) >= 8)
			sched_yield();
		page_fill(v, p, 1 + i / 64);
		atomic_fetch_add(&m.inflight, 1);
		tls_submitting = true;
		cr_assert_eq(coil_write(m.h, v, PG, (uint64_t)p * PG, mix_cb,
					&m), 0);
		if (i % 50 == 25) {
			atomic_fetch_add(&m.inflight, 1);
			cr_assert_eq(coil_flush(s, mix_flush_cb, &m), 0);
		}
		tls_submitting = false;
	}
	cr_assert_eq(pthread_join(t, NULL), 0);
	while (atomic_load(&m.inflight))
		sched_yield();
	cr_assert_eq(atomic_load(&m.done), 1500 + 30);
	/* coil_sync alone: its fdatasync done on its own thread */
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_gt(stat_of(s, "\"io\"", "fsyncs_by_caller"), 0);
	cr_assert_eq(atomic_load(&m.bad_res), 0);
	cr_assert_eq(atomic_load(&m.bad_thread), 0,
		     "%u callbacks ran on a submitting or coil_pwrite thread",
		     atomic_load(&m.bad_thread));
	/* 1500 = 23 x 64 + 28: pages below 28 reached version 24 */
	for (uint32_t p = 0; p < 128; p++) {
		uint8_t b[PG];
		uint32_t want = 1 + (1499 - ((1499 - p % 64 + 64) % 64)) / 64;

		cr_assert_eq(coil_pread(m.h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_version(b, p), want, "page %u", p);
	}
	cr_assert_eq(coil_obj_close(m.h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
