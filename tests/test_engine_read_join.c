/* tests/test_engine_read_join.c — the blobs of one read that lie together on
 * the device are fetched by one device read (engine/io/read.c, read_groups):
 * how many reads a request costs, that bytes are exact for compressed, raw
 * and partly wanted blobs, that a blob elsewhere (overwritten later) starts
 * another read, and that a corrupt or failed blob fails exactly the reads
 * that include it, never giving wrong bytes to the others. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "engine_test_util.h"
#include "format/format.h"
#include "uring/uring_fault.h"

#define BLOB 65536u
#define MIB (1u << 20)

/* A closed store holding object "d" = src[0, n), written in one stream.
 * @compression "zstd:1" or "none". */
static void build(const char *name, char *path, size_t plen,
		  struct coil_options *o, const char *compression,
		  uint8_t *src, size_t n)
{
	et_path(path, plen, name);
	et_opts(o, path);
	o->compression = compression;
	o->prefetch = 0; /* one request, one plan: no readahead reads */
	o->cache_bytes = 0;
	et_fill(src, n, 9, 1);
	et_write_closed(path, o, "d", src, n);
}

/* A store holding "d", built and then opened with it. */
struct jstore {
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	uint8_t *src;
	size_t n;
};

static void jopen(struct jstore *j, const char *name, const char *codec,
		  size_t n)
{
	j->n = n;
	j->src = malloc(n);
	cr_assert_not_null(j->src);
	build(name, j->path, sizeof(j->path), &j->o, codec, j->src, n);
	cr_assert_eq(coil_open(j->path, &j->o, &j->s), 0);
	cr_assert_eq(coil_obj_open(j->s, "d", 0, &j->h), 0);
}

static void jclose(struct jstore *j)
{
	cr_assert_eq(coil_obj_close(j->h), 0);
	cr_assert_eq(coil_close(j->s), 0);
	unlink(j->path);
	free(j->src);
}

static uint64_t dev_reads(void)
{
	return uring_fault_count(uring_fault_last(), URING_OP_READ);
}

/* Read [off, off+len) and compare; @return the device reads it took. */
static uint64_t read_exact(coil_obj *h, const uint8_t *src, uint64_t off,
			   size_t len)
{
	uint8_t *dst = malloc(len);
	uint64_t r0 = dev_reads();

	cr_assert_eq(coil_pread(h, dst, len, off), (int64_t)len, "read at %llu",
		     (unsigned long long)off);
	cr_assert(memcmp(dst, src + off, len) == 0, "bytes at %llu",
		  (unsigned long long)off);
	free(dst);
	return dev_reads() - r0;
}

Test(engine_read_join, a_stream_of_blobs_is_one_device_read_a_segment,
     .timeout = 60)
{
	const char *codecs[] = { "zstd:1", "none" };
	struct jstore j;

	for (int c = 0; c < 2; c++) {
		jopen(&j, "join", codecs[c], 4 * MIB);
		/* 16 blobs written in order: one device read, or two where
		 * they run on into the next 1 MiB segment (its header and the
		 * last one's unused tail between them) */
		for (uint64_t off = 0; off < j.n; off += MIB)
			cr_assert_leq(read_exact(j.h, j.src, off, MIB), 2,
				      "%s at %llu", codecs[c],
				      (unsigned long long)off);
		/* unaligned, partly wanted blobs at both ends */
		cr_assert_leq(read_exact(j.h, j.src, 100000, 700001), 2, "%s",
			      codecs[c]);
		/* one blob, and a piece of one */
		cr_assert_eq(read_exact(j.h, j.src, 3 * BLOB, BLOB), 1);
		cr_assert_eq(read_exact(j.h, j.src, 5 * BLOB + 4097, 3000), 1);
		jclose(&j);
	}
}

/* A blob rewritten later lies elsewhere: the read splits around it (three
 * reads: before, the new blob, after); the old copy's dead bytes between
 * blobs 6 and 8 are not returned to anyone. */
Test(engine_read_join, a_blob_elsewhere_starts_another_read, .timeout = 60)
{
	struct jstore j;

	jopen(&j, "join-split", "zstd:1", 2 * MIB);
	et_fill(j.src + 7 * BLOB, BLOB, 77, 1);
	cr_assert_eq(coil_pwrite(j.h, j.src + 7 * BLOB, BLOB, 7 * BLOB),
		     (int64_t)BLOB);
	cr_assert_eq(read_exact(j.h, j.src, 0, MIB), 3);
	cr_assert_eq(read_exact(j.h, j.src, 6 * BLOB, BLOB), 1);
	cr_assert_eq(read_exact(j.h, j.src, 8 * BLOB, BLOB), 1);
	jclose(&j);
}

/* Flip a byte somewhere in the data: each 1 MiB read is -EIO exactly when
 * one of its 64 KiB blobs alone reads -EIO, and right otherwise. */
Test(engine_read_join, a_corrupt_blob_fails_the_reads_that_include_it,
     .timeout = 120)
{
	char path[256];
	struct coil_options o;
	struct fmt_super sb;
	uint8_t blk[FMT_BLOCK], *dst = malloc(MIB);
	coil_store *s;
	coil_obj *h;
	size_t n = 2 * MIB;
	uint8_t *src = malloc(n);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	int fd, bad_runs = 0;

	build("join-corrupt", path, sizeof(path), &o, "zstd:1", src, n);
	o.flags |= COIL_RDONLY;
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, blk, FMT_BLOCK, 0), FMT_BLOCK);
	cr_assert_eq(fmt_super_decode(&sb, blk, FMT_BLOCK), 0);
	for (int it = 0; it < 24; it++) {
		uint64_t off;
		uint8_t b;
		bool bad[2 * MIB / BLOB];

		tu_xorshift(&seed);
		/* the object's stored bytes: about 1 MiB from the data start */
		off = sb.data_off + FMT_BLOCK + seed % MIB;
		cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
		b ^= (uint8_t)(1u << (seed >> 61));
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
		fsync(fd);

		cr_assert_eq(coil_open(path, &o, &s), 0);
		cr_assert_eq(coil_obj_open(s, "d", 0, &h), 0);
		for (uint32_t i = 0; i < n / BLOB; i++) {
			int64_t r = coil_pread(h, dst, BLOB, (uint64_t)i * BLOB);

			cr_assert(r == BLOB || r == -EIO, "blob %u: %lld", i,
				  (long long)r);
			bad[i] = r == -EIO;
			cr_assert(bad[i] ||
				  memcmp(dst, src + (size_t)i * BLOB, BLOB) == 0);
		}
		for (uint32_t m = 0; m < n / MIB; m++) {
			bool want_bad = false;
			int64_t r = coil_pread(h, dst, MIB, (uint64_t)m * MIB);

			for (uint32_t i = 0; i < MIB / BLOB; i++)
				want_bad |= bad[m * (MIB / BLOB) + i];
			cr_assert_eq(r, want_bad ? -EIO : (int64_t)MIB,
				     "MiB %u after a flip at %llu", m,
				     (unsigned long long)off);
			cr_assert(want_bad ||
				  memcmp(dst, src + (size_t)m * MIB, MIB) == 0);
			bad_runs += want_bad;
		}
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_close(s), 0);

		b ^= (uint8_t)(1u << (seed >> 61)); /* undo */
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
		fsync(fd);
	}
	/* most flips land in stored blob bytes */
	cr_assert_gt(bad_runs, 12);
	close(fd);
	unlink(path);
	free(src);
	free(dst);
}

/* A joined read that fails is read again blob by blob: a failure in one
 * request to the device (a transient error, or bytes nobody wanted) costs
 * nothing but the retry; a short read is finished inside the ring; a blob
 * that cannot be read fails the request, and the next read is right. */
Test(engine_read_join, a_failed_joined_read_is_read_again_blob_by_blob,
     .timeout = 60)
{
	struct uring_fault_spec f;
	struct jstore j;
	uint8_t *dst = malloc(MIB);
	char js[8192];
	uint64_t r0;

	jopen(&j, "join-fail", "zstd:1", 2 * MIB);
	/* the joined read fails once; its blobs, read one by one, do not */
	memset(&f, 0, sizeof(f));
	f.fail_kind = URING_OP_READ;
	f.fail_nth = 1;
	f.fail_errno = EIO;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
	r0 = dev_reads();
	cr_assert_eq(coil_pread(j.h, dst, 256 << 10, 0), (int64_t)(256 << 10));
	cr_assert(memcmp(dst, j.src, 256 << 10) == 0);
	cr_assert_eq(dev_reads() - r0, 1 + 4, "one joined read, then 4 blobs");
	cr_assert(coil_stats_json(j.s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"io\"", "read_splits"), 1, "%s", js);
	/* a short read is resubmitted by the ring, not split */
	memset(&f, 0, sizeof(f));
	f.short_kind = URING_OP_READ;
	f.short_nth = 1;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
	cr_assert_eq(coil_pread(j.h, dst, MIB, MIB), (int64_t)MIB);
	cr_assert(memcmp(dst, j.src + MIB, MIB) == 0);
	/* every read fails: the request fails, once */
	memset(&f, 0, sizeof(f));
	f.fail_kind = URING_OP_READ;
	f.fail_nth = 1;
	f.fail_errno = EIO;
	f.fail_sticky = true;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
	cr_assert_eq(coil_pread(j.h, dst, MIB, 0), -EIO);
	memset(&f, 0, sizeof(f));
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
	cr_assert_leq(read_exact(j.h, j.src, 0, MIB), 2);
	cr_assert(coil_stats_json(j.s, js, sizeof(js)) > 0);
	cr_assert_geq(json_u64(js, "\"io\"", "read_splits"), 2, "%s", js);
	jclose(&j);
	free(dst);
}
