/* tests/test_read_cache.c — small pages read whole are kept in the cache
 * (their stored bytes) and reread from memory: rereads send nothing to the
 * device, through coil_pread and coil_read, compressed or raw; the budget
 * holds; a scan does not push a reused set out; and no read ever returns a
 * page's old bytes after an overwrite, truncate, remove, cleaner relocation
 * or segment reuse, alone or with writers, readers and the cleaner running
 * together; a miss while the cache has room takes a window of blocks. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/pack.h"
#include "tests/engine_test_util.h"

#define PG 4096u

/* Page @p at version @v: a header naming both, then half bytes drawn from
 * (p, v) and half repeats of them, so zstd halves it like a database page. */
static void page_fill(uint8_t *b, uint32_t p, uint32_t v)
{
	uint64_t x = ((uint64_t)p << 32 | v) * 0x9E3779B97F4A7C15ull + 7;

	memcpy(b, &p, 4);
	memcpy(b + 4, &v, 4);
	for (uint32_t i = 8; i < PG / 2; i++) {
		tu_xorshift(&x);
		b[i] = (uint8_t)(' ' + x % 95);
	}
	for (uint32_t i = PG / 2; i < PG; i++)
		b[i] = b[i - PG / 2 + 8];
}

/* The version a page read back carries, after checking every byte of it
 * against that version: a torn or foreign page fails the test. */
static uint32_t page_check(const uint8_t *b, uint32_t p)
{
	uint8_t want[PG];
	uint32_t gp, v;

	memcpy(&gp, b, 4);
	memcpy(&v, b + 4, 4);
	cr_assert_eq(gp, p, "page %u holds page %u's bytes", p, gp);
	page_fill(want, p, v);
	cr_assert(memcmp(want, b, PG) == 0, "page %u v%u torn", p, v);
	return v;
}

/* As page_check, for threads other than the test's (criterion's asserts
 * belong to its own): @return the version, or UINT32_MAX if torn/foreign. */
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

static coil_store *open_store(const char *tag, char *path, size_t plen,
			      uint64_t cache_bytes, const char *compression,
			      unsigned prefetch)
{
	struct coil_options o;
	coil_store *s;

	et_path(path, plen, tag);
	et_opts(&o, path);
	o.cache_bytes = cache_bytes;
	o.prefetch = prefetch;
	if (compression)
		o.compression = compression;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	return s;
}

static coil_store *reopen(const char *path, uint64_t cache_bytes,
			  unsigned prefetch)
{
	struct coil_options o;
	coil_store *s;

	et_opts(&o, path);
	o.flags &= ~COIL_CREATE;
	o.cache_bytes = cache_bytes;
	o.prefetch = prefetch;
	cr_assert_eq(coil_open(path, &o, &s), 0);
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

static void read_pages(coil_obj *h, uint32_t first, uint32_t n, uint32_t v)
{
	uint8_t b[PG];

	for (uint32_t p = first; p < first + n; p++) {
		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_check(b, p), v, "page %u", p);
	}
}

static uint64_t stat_of(coil_store *s, const char *section, const char *key)
{
	char js[16384];

	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	return json_u64(js, section, key);
}

static uint64_t dev_read(coil_store *s)
{
	return stat_of(s, "\"io\"", "device_bytes_read");
}

/* Write @n pages at version 1 into object "pages" and close the store. */
static void make_pages(const char *tag, char *path, size_t plen, uint32_t n,
		       const char *compression)
{
	coil_store *s = open_store(tag, path, plen, 64u << 20, compression, 1);
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "pages", COIL_CREATE, &h), 0);
	write_pages(h, 0, n, 1);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
}

static void cb_store(void *arg, int64_t res)
{
	_Atomic int64_t *r = arg;

	atomic_store(r, res);
}

static void reread_from_memory(const char *tag, const char *compression)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t d0, d1;
	uint8_t b[PG];

	make_pages(tag, path, sizeof(path), 64, compression);
	s = reopen(path, 64u << 20, 1);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	/* out of order, so readahead sees no stream */
	for (uint32_t i = 0; i < 64; i++) {
		uint32_t p = (i * 37) % 64;

		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_check(b, p), 1);
	}
	d0 = dev_read(s);
	cr_assert_gt(d0, 0);
	if (compression && strcmp(compression, "none") == 0) {
		cr_assert_eq(stat_of(s, "\"io\"", "small_blobs_kept"), 64);
	} else {
		/* packed compressed pages: their device blocks are kept, and
		 * a block brought by one page's read serves its neighbours */
		cr_assert_gt(stat_of(s, "\"io\"", "packed_blocks_kept"), 0);
		cr_assert_gt(stat_of(s, "\"io\"", "packed_block_hits"), 0);
		cr_assert_lt(d0, 48u * PG, "%llu device bytes for 64 pages",
			     (unsigned long long)d0);
	}
	/* a miss through coil_pread: its caller reads the device itself
	 * (no ring round trip), then decodes and copies */
	cr_assert_gt(stat_of(s, "\"io\"", "device_reads_by_caller"), 0,
		     "a miss through coil_pread is read by its caller");
	read_pages(h, 0, 64, 1);
	/* and through the asynchronous call */
	for (uint32_t p = 0; p < 64; p += 7) {
		_Atomic int64_t res = 1;

		memset(b, 0, PG);
		cr_assert_eq(coil_read(h, b, PG, (uint64_t)p * PG, cb_store,
				       (void *)&res), 0);
		while (atomic_load(&res) == 1)
			sched_yield();
		cr_assert_eq(atomic_load(&res), PG);
		cr_assert_eq(page_check(b, p), 1);
	}
	d1 = dev_read(s);
	cr_assert_eq(d1, d0, "rereads went to the device (%llu more bytes)",
		     (unsigned long long)(d1 - d0));
	cr_assert_geq(stat_of(s, "\"cache\"", "hits"), 64 + 10);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(read_cache, compressed_pages_reread_from_memory, .timeout = 60)
{
	reread_from_memory("rc-zstd", NULL);
}

Test(read_cache, raw_pages_reread_from_memory, .timeout = 60)
{
	reread_from_memory("rc-raw", "none");
}

/* A page whose stored bytes are damaged fails with -EIO every time and is
 * never kept: the cache holds only what verified.  Raw pages, so the test
 * can find the page's bytes in the store file. */
Test(read_cache, damaged_page_fails_every_time_and_is_not_kept, .timeout = 60)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint8_t want[PG], b[PG];
	int fd;
	off_t at = -1, size;

	make_pages("rc-bad", path, sizeof(path), 8, "none");
	page_fill(want, 5, 1);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	size = lseek(fd, 0, SEEK_END);
	for (off_t o = 0; o + PG <= size && at < 0; o += PG) {
		cr_assert_eq(pread(fd, b, PG, o), PG);
		if (memcmp(b, want, PG) == 0)
			at = o;
	}
	cr_assert_geq(at, 0, "page 5 not found in the store file");
	b[100] ^= 0x5a;
	cr_assert_eq(pwrite(fd, b, PG, at), PG);
	cr_assert_eq(fsync(fd), 0);
	close(fd);

	s = reopen(path, 64u << 20, 1);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(coil_pread(h, b, PG, 5 * PG), -EIO);
		read_pages(h, 0, 5, 1);
		read_pages(h, 6, 2, 1);
	}
	cr_assert_eq(stat_of(s, "\"io\"", "small_blobs_kept"), 7);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Flip byte @at of the file at @path. */
static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	uint8_t c;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &c, 1, at), 1);
	c ^= 0x5a;
	cr_assert_eq(pwrite(fd, &c, 1, at), 1);
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

struct frame_at {
	off_t off;
	size_t len;
	uint32_t page;
};

/* Frames in the store file that decode to one of the @np pages (version
 * 1) and do not start on a block.  A page's bytes may be found more than
 * once (a journal record of the small write and its packed blob). */
static uint32_t find_page_frames(const char *path, uint32_t np,
				 struct frame_at *f, uint32_t cap)
{
	static uint8_t img[4u << 20];
	uint8_t out[PG];
	int fd = open(path, O_RDONLY);
	ssize_t n;
	off_t base = 0;
	uint32_t nf = 0;

	cr_assert_geq(fd, 0);
	/* windows overlapping by more than a frame */
	while ((n = pread(fd, img, sizeof(img), base)) > 0 && nf < cap) {
		bool last = n < (ssize_t)sizeof(img);
		ssize_t end = last ? n : n - 2 * PG;

		for (ssize_t i = 0; i + 4 <= end && nf < cap; i++) {
			size_t fl;
			uint32_t p;

			if (img[i] != 0x28 || img[i + 1] != 0xb5 ||
			    img[i + 2] != 0x2f || img[i + 3] != 0xfd ||
			    (base + i) % PG == 0)
				continue;
			fl = ZSTD_findFrameCompressedSize(img + i, n - i);
			if (ZSTD_isError(fl) || fl > PG ||
			    ZSTD_decompress(out, PG, img + i, fl) != PG)
				continue;
			memcpy(&p, out, 4);
			if (p < np && page_version(out, p) == 1)
				f[nf++] = (struct frame_at){ base + i, fl, p };
		}
		if (last)
			break;
		base += end;
	}
	close(fd);
	return nf;
}

/* A damaged compressed page packed in a block with others: the block a
 * neighbour's read keeps serves the damaged page too, and that page still
 * fails with -EIO every time (its decode verifies it) while every other
 * page reads exact.  The test finds the page's zstd frame in the store
 * file (one that does not start on a block, so it shares a block with the
 * page before it): it damages a candidate and keeps the one whose page
 * then fails. */
Test(read_cache, damaged_packed_page_fails_every_time, .timeout = 60)
{
	char path[256];
	coil_store *s = NULL;
	coil_obj *h;
	uint8_t b[PG];
	struct frame_at f[256];
	uint32_t nf, bad = UINT32_MAX;

	make_pages("rc-badpk", path, sizeof(path), 64, NULL);
	nf = find_page_frames(path, 64, f, 256);
	cr_assert_gt(nf, 0, "no packed page frame found in the store file");
	for (uint32_t i = 0; i < nf && bad == UINT32_MAX; i++) {
		off_t at = f[i].off + (off_t)(f[i].len / 2);

		flip_byte(path, at);
		s = reopen(path, 64u << 20, 0);
		cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
		if (coil_pread(h, b, PG, (uint64_t)f[i].page * PG) == -EIO) {
			bad = f[i].page;
			break;
		}
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_close(s), 0);
		flip_byte(path, at); /* not the live copy: undo */
	}
	cr_assert_neq(bad, UINT32_MAX, "no damaged frame made its page fail");
	for (int round = 0; round < 3; round++) {
		for (uint32_t p = 0; p < 64; p++) {
			int64_t r = coil_pread(h, b, PG, (uint64_t)p * PG);

			if (p == bad) {
				cr_assert_eq(r, -EIO, "round %d: damaged page "
					     "%u read %lld", round, p,
					     (long long)r);
				continue;
			}
			cr_assert_eq(r, PG, "page %u", p);
			cr_assert_eq(page_check(b, p), 1);
		}
	}
	/* the damaged page's blocks came in with its neighbours' reads */
	cr_assert_gt(stat_of(s, "\"io\"", "packed_block_hits"), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Each of pages [0, @n) at version 1, read once in a scattered order
 * (@n a power of two: 101 is coprime with it). */
static void read_scattered(coil_obj *h, uint32_t n)
{
	uint8_t b[PG];

	for (uint32_t i = 0; i < n; i++) {
		uint32_t p = (i * 101) % n;

		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_check(b, p), 1);
	}
}

/* A miss of a packed page while the cache has room reads the 64 KiB
 * window of blocks around it and keeps them: a cold page store warms at a
 * fraction of its misses.  Once the cache is three quarters full a miss
 * reads just its own blocks again. */
Test(read_cache, miss_takes_window_while_cache_has_room, .timeout = 60)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint8_t b[PG];
	uint64_t win, max;

	make_pages("rc-win", path, sizeof(path), 512, NULL);
	s = reopen(path, 64u << 20, 0);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	cr_assert_eq(coil_pread(h, b, PG, 256ull * PG), PG);
	cr_assert_eq(page_check(b, 256), 1);
	cr_assert_eq(stat_of(s, "\"io\"", "packed_windows"), 1);
	cr_assert_geq(stat_of(s, "\"io\"", "packed_window_blocks"), 8);
	cr_assert_geq(dev_read(s), 32u << 10);
	read_scattered(h, 512);
	/* ~1.1 MB of packed pages: some 18 windows, not a read per page */
	win = stat_of(s, "\"io\"", "packed_windows");
	cr_assert_lt(win, 40, "%llu windows", (unsigned long long)win);
	cr_assert_gt(stat_of(s, "\"io\"", "packed_block_hits"), 400);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);

	/* 256 KiB of cache: windows only until 192 KiB is charged */
	s = reopen(path, 256u << 10, 0);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	read_scattered(h, 512);
	win = stat_of(s, "\"io\"", "packed_windows");
	cr_assert_leq(win, 3, "%llu windows", (unsigned long long)win);
	cr_assert_gt(win, 0);
	max = stat_of(s, "\"cache\"", "bytes_max");
	cr_assert_leq(stat_of(s, "\"cache\"", "bytes"), max);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(read_cache, off_keeps_nothing_and_reads_exact, .timeout = 60)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t d0;

	make_pages("rc-off", path, sizeof(path), 32, NULL);
	s = reopen(path, 0, 1);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	read_pages(h, 0, 32, 1);
	d0 = dev_read(s);
	read_pages(h, 0, 32, 1);
	cr_assert_gt(dev_read(s), d0, "no cache: rereads read the device");
	cr_assert_eq(stat_of(s, "\"io\"", "small_blobs_kept"), 0);
	cr_assert_eq(stat_of(s, "\"io\"", "packed_blocks_kept"), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* A budget of 256 KiB against 512 pages: entries are evicted, the
 * charged bytes never pass the budget, and every page reads exact. */
Test(read_cache, budget_respected, .timeout = 60)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t max;

	make_pages("rc-budget", path, sizeof(path), 512, NULL);
	s = reopen(path, 256u << 10, 1);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	for (int round = 0; round < 2; round++) {
		for (uint32_t i = 0; i < 512; i++) {
			uint32_t p = (i * 101) % 512;
			uint8_t b[PG];

			cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
			cr_assert_eq(page_check(b, p), 1);
			if (i % 64 == 0) {
				max = stat_of(s, "\"cache\"", "bytes_max");
				cr_assert_leq(stat_of(s, "\"cache\"", "bytes"),
					      max);
			}
		}
	}
	max = stat_of(s, "\"cache\"", "bytes_max");
	cr_assert_leq(max, 256u << 10);
	cr_assert_gt(max, 128u << 10);
	cr_assert_leq(stat_of(s, "\"cache\"", "bytes"), max);
	cr_assert_gt(stat_of(s, "\"cache\"", "evictions"), 0);
	cr_assert_gt(stat_of(s, "\"io\"", "small_blobs_kept") +
		     stat_of(s, "\"io\"", "packed_blocks_kept"), 256);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* A reused set of 100 pages survives a one-pass scan of 2000 others in a
 * cache that holds about 400: the rereads after the scan read (almost)
 * nothing from the device.  An LRU cache would have lost all of them. */
Test(read_cache, scan_resistant, .timeout = 120)
{
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint64_t d0, d1;
	const uint32_t hot = 100, cold = 2000;

	make_pages("rc-scan", path, sizeof(path), hot + cold, NULL);
	s = reopen(path, 1u << 20, 0);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	for (int round = 0; round < 3; round++)
		read_pages(h, 0, hot, 1);
	for (uint32_t i = 0; i < cold; i++) {
		uint32_t p = hot + (i * 7919) % cold;
		uint8_t b[PG];

		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_check(b, p), 1);
	}
	d0 = dev_read(s);
	read_pages(h, 0, hot, 1);
	d1 = dev_read(s);
	cr_assert_leq(d1 - d0, (uint64_t)hot / 10 * PG,
		      "the scan pushed the reused pages out: %llu bytes read",
		      (unsigned long long)(d1 - d0));
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Each page is overwritten and read back many times, interleaved with the
 * reads of the others: a cache keyed by anything that survives an
 * overwrite (the object offset, a reused device offset) returns an old
 * version here. */
Test(read_cache, overwrite_then_read_never_stale, .timeout = 120)
{
	char path[256];
	coil_store *s = open_store("rc-over", path, sizeof(path), 64u << 20,
				   NULL, 1);
	coil_obj *h;
	uint32_t ver[16] = { 0 };
	uint8_t b[PG];

	cr_assert_eq(coil_obj_open(s, "pages", COIL_CREATE, &h), 0);
	for (uint32_t p = 0; p < 16; p++) {
		ver[p] = 1;
		write_pages(h, p, 1, 1);
	}
	for (uint32_t i = 0; i < 600; i++) {
		uint32_t p = (i * 5) % 16, q = (i * 11 + 3) % 16;

		/* cache p's current version, replace it, read it again */
		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_check(b, p), ver[p]);
		write_pages(h, p, 1, ++ver[p]);
		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)p * PG), PG);
		cr_assert_eq(page_check(b, p), ver[p], "stale after overwrite");
		cr_assert_eq(coil_pread(h, b, PG, (uint64_t)q * PG), PG);
		cr_assert_eq(page_check(b, q), ver[q]);
		/* a small write stays in memory until packed: every few
		 * rounds the pages go to the device, so reads alternate
		 * between memory, the device and the cache */
		if (i % 4 == 3)
			cr_assert_eq(pack_now(s), 0);
	}
	cr_assert_gt(stat_of(s, "\"cache\"", "hits"), 300);
	cr_assert_gt(stat_of(s, "\"small_writes\"", "memory_reads"), 300);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

static int all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

Test(read_cache, truncate_and_remove_never_stale, .timeout = 120)
{
	char path[256];
	coil_store *s = open_store("rc-trunc", path, sizeof(path), 64u << 20,
				   NULL, 1);
	coil_obj *h;
	uint8_t b[PG];

	for (uint32_t round = 1; round <= 40; round++) {
		cr_assert_eq(coil_obj_open(s, "t", COIL_CREATE, &h), 0);
		write_pages(h, 0, 4, round);
		read_pages(h, 0, 4, round); /* cached now */
		/* cut inside page 2 and grow again: a hole of zeros */
		cr_assert_eq(coil_obj_truncate(h, 2 * PG + 100), 0);
		cr_assert_eq(coil_obj_truncate(h, 4 * PG), 0);
		cr_assert_eq(coil_pread(h, b, PG, 3 * PG), PG);
		cr_assert(all_zero(b, PG), "truncated page 3 came back");
		cr_assert_eq(coil_pread(h, b, PG, 2 * PG), PG);
		cr_assert(all_zero(b + 100, PG - 100), "cut page 2 came back");
		read_pages(h, 0, 2, round);
		cr_assert_eq(coil_obj_truncate(h, 0), 0);
		cr_assert_eq(coil_pread(h, b, PG, 0), 0);
		write_pages(h, 0, 4, round + 1000);
		read_pages(h, 0, 4, round + 1000);
		cr_assert_eq(coil_obj_close(h), 0);
		/* removed and made again under the same name */
		cr_assert_eq(coil_obj_remove(s, "t"), 0);
		cr_assert_eq(coil_obj_open(s, "t", COIL_CREATE, &h), 0);
		cr_assert_eq(coil_pread(h, b, PG, 0), 0);
		write_pages(h, 1, 1, round + 2000);
		cr_assert_eq(coil_pread(h, b, PG, 0), PG);
		cr_assert(all_zero(b, PG), "a removed object's page came back");
		read_pages(h, 1, 1, round + 2000);
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_obj_remove(s, "t"), 0);
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Cached pages are moved by the cleaner, their old segments freed and
 * reused for new pages: every read returns the current bytes. */
Test(read_cache, relocation_and_segment_reuse_never_stale, .timeout = 180)
{
	char path[256];
	coil_store *s = open_store("rc-reloc", path, sizeof(path), 64u << 20,
				   NULL, 0);
	coil_obj *h, *f;
	uint8_t *fill = malloc(32u * PG);
	const uint32_t n = 128;
	uint64_t cleaned = 0;

	cr_assert_eq(coil_obj_open(s, "pages", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_obj_open(s, "filler", COIL_CREATE, &f), 0);
	for (uint32_t cycle = 1; cycle <= 4; cycle++) {
		/* the pages interleaved with filler in the same segments
		 * (packed at once: small writes stay in memory until then) */
		for (uint32_t p = 0; p < n; p++) {
			write_pages(h, p, 1, cycle);
			cr_assert_eq(pack_now(s), 0);
			for (uint32_t k = 0; k < 32; k++)
				page_fill(fill + k * PG, 100000 + p, cycle);
			cr_assert_eq(coil_pwrite(f, fill, 32u * PG,
						 (uint64_t)p * 32 * PG),
				     32 * PG);
		}
		read_pages(h, 0, n, cycle); /* cached */
		/* the filler dies: the pages' segments are nearly empty */
		cr_assert_eq(coil_obj_truncate(f, 0), 0);
		cr_assert_eq(coil_sync(s), 0);
		cr_assert_geq(cleaner_run_now(s, 64), 0);
		read_pages(h, 0, n, cycle); /* after relocation */
		cr_assert_eq(cleaner_check_live(s), 0);
	}
	cleaned = stat_of(s, "\"cleaner\"", "blobs_relocated");
	cr_assert_geq(cleaned, n, "the cleaner never moved the pages");
	cr_assert_eq(coil_obj_close(f), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	free(fill);
	unlink(path);
}

/* Writers overwrite their pages over and over, readers read any page,
 * and the cleaner runs between them.  A read begun after a write of its
 * page completed must return that version or a later one (never an
 * older one), and every page read is whole. */
#define CC_PAGES 32u
#define CC_WRITERS 2u
#define CC_READERS 2u

struct cc {
	coil_obj *h;
	coil_store *s;
	_Atomic uint32_t done_ver[CC_PAGES];
	_Atomic int writers_left;
	_Atomic uint64_t checked;
	_Atomic uint64_t failures; /* errors, torn pages, old versions */
	_Atomic uint32_t bad_page, bad_ver, bad_floor;
	uint32_t rounds;
};

struct cc_arg {
	struct cc *c;
	uint32_t id;
};

static void *cc_writer(void *p)
{
	struct cc_arg *a = p;
	struct cc *c = a->c;
	uint8_t b[PG];

	for (uint32_t v = 2; v < 2 + c->rounds; v++)
		for (uint32_t pg = a->id; pg < CC_PAGES; pg += CC_WRITERS) {
			page_fill(b, pg, v);
			if (coil_pwrite(c->h, b, PG, (uint64_t)pg * PG) != PG)
				atomic_fetch_add(&c->failures, 1);
			atomic_store(&c->done_ver[pg], v);
		}
	atomic_fetch_sub(&c->writers_left, 1);
	return NULL;
}

static void *cc_reader(void *p)
{
	struct cc_arg *a = p;
	struct cc *c = a->c;
	uint64_t x = a->id + 1;
	uint8_t b[PG];

	while (atomic_load(&c->writers_left) > 0) {
		uint32_t pg, floor, v;

		tu_xorshift(&x);
		pg = (uint32_t)(x % CC_PAGES);
		floor = atomic_load(&c->done_ver[pg]);
		if (coil_pread(c->h, b, PG, (uint64_t)pg * PG) != PG)
			v = UINT32_MAX;
		else
			v = page_version(b, pg);
		if (v == UINT32_MAX || v < floor) {
			atomic_store(&c->bad_page, pg);
			atomic_store(&c->bad_ver, v);
			atomic_store(&c->bad_floor, floor);
			atomic_fetch_add(&c->failures, 1);
		}
		atomic_fetch_add(&c->checked, 1);
	}
	return NULL;
}

static void *cc_cleaner(void *p)
{
	struct cc *c = p;

	while (atomic_load(&c->writers_left) > 0) {
		if (cleaner_run_now(c->s, 4) < 0)
			atomic_fetch_add(&c->failures, 1);
		usleep(2000);
	}
	return NULL;
}

Test(read_cache, concurrent_overwrites_never_stale, .timeout = 180)
{
	char path[256];
	struct cc c = { .rounds = 60 };
	struct cc_arg wa[CC_WRITERS], ra[CC_READERS];
	pthread_t wt[CC_WRITERS], rt[CC_READERS], ct;

	c.s = open_store("rc-conc", path, sizeof(path), 64u << 20, NULL, 1);
	cr_assert_eq(coil_obj_open(c.s, "pages", COIL_CREATE, &c.h), 0);
	write_pages(c.h, 0, CC_PAGES, 1);
	for (uint32_t p = 0; p < CC_PAGES; p++)
		atomic_store(&c.done_ver[p], 1);
	atomic_store(&c.writers_left, (int)CC_WRITERS);
	for (uint32_t i = 0; i < CC_READERS; i++) {
		ra[i] = (struct cc_arg){ &c, i };
		cr_assert_eq(pthread_create(&rt[i], NULL, cc_reader, &ra[i]), 0);
	}
	cr_assert_eq(pthread_create(&ct, NULL, cc_cleaner, &c), 0);
	for (uint32_t i = 0; i < CC_WRITERS; i++) {
		wa[i] = (struct cc_arg){ &c, i };
		cr_assert_eq(pthread_create(&wt[i], NULL, cc_writer, &wa[i]), 0);
	}
	for (uint32_t i = 0; i < CC_WRITERS; i++)
		pthread_join(wt[i], NULL);
	for (uint32_t i = 0; i < CC_READERS; i++)
		pthread_join(rt[i], NULL);
	pthread_join(ct, NULL);
	cr_assert_eq(atomic_load(&c.failures), 0,
		     "page %u read as v%u after v%u completed (UINT32_MAX: "
		     "torn, foreign or failed)", atomic_load(&c.bad_page),
		     atomic_load(&c.bad_ver), atomic_load(&c.bad_floor));
	read_pages(c.h, 0, CC_PAGES, 1 + c.rounds);
	cr_assert_gt(atomic_load(&c.checked), 100);
	cr_assert_gt(stat_of(c.s, "\"cache\"", "hits") +
		     stat_of(c.s, "\"small_writes\"", "memory_reads"), 0);
	cr_assert_eq(coil_obj_close(c.h), 0);
	cr_assert_eq(coil_close(c.s), 0);
	unlink(path);
}
