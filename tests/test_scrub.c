/* test_scrub: the background scrub finds every damaged data block of a
 * small store and names the object and the range it spoils; it finds
 * damage to a superblock copy and to a journal chunk in use; a clean store
 * scrubs clean (also while it is written and cleaned); stats show it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/engine_test_util.h"

#define NOBJ 2
#define OBJ_BLOCKS 12
#define MARK 16

struct found {
	int n, meta;
	char name[64];
	uint64_t off, len;
	char what[128];
};

static int collect(void *arg, const struct coil_damage *d)
{
	struct found *f = arg;

	if (!d->object) {
		f->meta++;
		snprintf(f->what, sizeof(f->what), "%s", d->what);
		return 0;
	}
	if (f->n++ == 0) {
		snprintf(f->name, sizeof(f->name), "%.*s", (int)d->object_len,
			 d->object);
		f->off = d->off;
		f->len = d->len;
	}
	return 0;
}

static void flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x5a;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	cr_assert_eq(fsync(fd), 0);
	close(fd);
}

static void block_mark(uint8_t *blk, int obj, int k)
{
	memset(blk, 0, MARK);
	snprintf((char *)blk, MARK, "SCRB%02d:%04d", obj, k);
}

/* Run one pass on @path (read-only open) and collect what it finds.
 * @return coil_scrub_wait's result. */
static int scrub_once(const char *path, const struct coil_options *base,
		      struct found *f, struct coil_scrub_info *info)
{
	struct coil_options o = *base;
	coil_store *s;
	int rc;

	o.flags = (o.flags & ~COIL_CREATE) | COIL_RDONLY;
	o.scrub_rate = 0;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	memset(f, 0, sizeof(*f));
	cr_assert_eq(coil_scrub_start(s), 0);
	rc = coil_scrub_wait(s);
	cr_assert_eq(coil_scrub_damage(s, collect, f), 0);
	if (info)
		cr_assert_eq(coil_scrub_info(s, info), 0);
	cr_assert_eq(coil_close(s), 0);
	return rc;
}

/* Raw (uncompressed) objects whose every 4 KiB block starts with a mark
 * naming it: each block's place in the store file is found by its mark,
 * damaged alone, and must be reported as exactly that object and block. */
Test(scrub, every_data_block_found_and_named)
{
	struct coil_options o;
	uint8_t *data = malloc(OBJ_BLOCKS * FMT_BLOCK), *img;
	uint64_t where[NOBJ][OBJ_BLOCKS] = { { 0 } };
	char path[256];
	coil_store *s;
	coil_obj *h;
	off_t size;
	int fd;

	et_path(path, sizeof(path), "scrub-blocks");
	et_opts(&o, path);
	o.size = 16ull << 20;
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	for (int obj = 0; obj < NOBJ; obj++) {
		char name[16];

		et_fill(data, OBJ_BLOCKS * FMT_BLOCK, (uint64_t)obj + 7, 0);
		for (int k = 0; k < OBJ_BLOCKS; k++)
			block_mark(data + (size_t)k * FMT_BLOCK, obj, k);
		snprintf(name, sizeof(name), "obj%d", obj);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		/* two writes: two blobs, so ranges inside a blob are named */
		cr_assert_eq(coil_pwrite(h, data, 6 * FMT_BLOCK, 0),
			     6 * FMT_BLOCK);
		cr_assert_eq(coil_pwrite(h, data + 6 * FMT_BLOCK,
					 (OBJ_BLOCKS - 6) * FMT_BLOCK,
					 6 * FMT_BLOCK),
			     (OBJ_BLOCKS - 6) * FMT_BLOCK);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_close(s), 0);

	/* where each block landed */
	fd = open(path, O_RDONLY);
	size = lseek(fd, 0, SEEK_END);
	img = malloc((size_t)size);
	cr_assert_eq(pread(fd, img, (size_t)size, 0), size);
	close(fd);
	for (off_t off = 0; off < size; off += FMT_BLOCK) {
		int obj, k;

		if (sscanf((char *)img + off, "SCRB%2d:%4d", &obj, &k) == 2 &&
		    obj >= 0 && obj < NOBJ && k >= 0 && k < OBJ_BLOCKS) {
			cr_assert_eq(where[obj][k], 0, "block %d/%d twice", obj, k);
			where[obj][k] = (uint64_t)off;
		}
	}
	free(img);

	for (int obj = 0; obj < NOBJ; obj++) {
		for (int k = 0; k < OBJ_BLOCKS; k++) {
			struct found f;
			char name[16];

			cr_assert_neq(where[obj][k], 0, "block %d/%d not found",
				      obj, k);
			snprintf(name, sizeof(name), "obj%d", obj);
			/* damage one byte inside the block, not its mark */
			flip(path, where[obj][k] + 100 + (uint64_t)k * 7);
			cr_assert_eq(scrub_once(path, &o, &f, NULL), -EIO);
			cr_assert_eq(f.n, 1, "block %d/%d: %d findings", obj, k,
				     f.n);
			cr_assert_eq(f.meta, 0);
			cr_assert_str_eq(f.name, name);
			cr_assert_eq(f.off, (uint64_t)k * FMT_BLOCK,
				     "block %d/%d: off %lu", obj, k,
				     (unsigned long)f.off);
			cr_assert_eq(f.len, FMT_BLOCK);
			flip(path, where[obj][k] + 100 + (uint64_t)k * 7);
		}
	}
	/* and undamaged again: clean */
	{
		struct found f;
		struct coil_scrub_info in;

		cr_assert_eq(scrub_once(path, &o, &f, &in), 0);
		cr_assert_eq(f.n + f.meta, 0);
		cr_assert_eq(in.passes, 1);
		cr_assert_eq(in.blobs_verified, 2 * NOBJ);
		cr_assert_eq(in.bytes_done, in.bytes_total);
		cr_assert_eq(in.bytes_total,
			     (uint64_t)NOBJ * OBJ_BLOCKS * FMT_BLOCK);
	}
	free(data);
	unlink(path);
}

/* Compressed blobs: a damaged stored byte spoils its whole blob (64 KiB of
 * the object, aligned as written). */
Test(scrub, compressed_blob_damage_names_the_blob_range)
{
	struct coil_options o;
	struct fmt_super sb;
	uint8_t *data = malloc(256u << 10), blk[FMT_BLOCK];
	uint64_t seg_end, damaged = 0;
	char path[256];
	int fd;

	et_path(path, sizeof(path), "scrub-zstd");
	et_opts(&o, path);
	o.size = 16ull << 20;
	et_fill(data, 256u << 10, 3, 1);
	et_write_closed(path, &o, "z", data, 256u << 10);
	fd = open(path, O_RDONLY);
	cr_assert_eq(pread(fd, blk, FMT_BLOCK, 0), FMT_BLOCK);
	if (fmt_super_decode(&sb, blk, FMT_BLOCK) < 0) {
		cr_assert_eq(pread(fd, blk, FMT_BLOCK, FMT_BLOCK), FMT_BLOCK);
		cr_assert_eq(fmt_super_decode(&sb, blk, FMT_BLOCK), 0);
	}
	seg_end = sb.data_off + (uint64_t)sb.segment_count * sb.segment_size;
	/* every non-zero block of the data area past segment headers */
	for (uint64_t off = sb.data_off; off < seg_end; off += FMT_BLOCK) {
		bool zero = true;
		struct found f;

		if ((off - sb.data_off) % sb.segment_size == 0)
			continue;
		cr_assert_eq(pread(fd, blk, FMT_BLOCK, (off_t)off), FMT_BLOCK);
		for (uint32_t i = 0; i < FMT_BLOCK && zero; i++)
			zero = blk[i] == 0;
		if (zero)
			continue;
		flip(path, off + 17);
		cr_assert_eq(scrub_once(path, &o, &f, NULL), -EIO);
		cr_assert_geq(f.n, 1);
		cr_assert_str_eq(f.name, "z");
		cr_assert_eq(f.off % 65536, 0);
		cr_assert_eq(f.len % 65536, 0);
		cr_assert_gt(f.len, 0);
		flip(path, off + 17);
		damaged++;
	}
	close(fd);
	cr_assert_gt(damaged, 0);
	free(data);
	unlink(path);
}

Test(scrub, superblock_copy_damage_is_a_metadata_finding)
{
	struct coil_options o;
	struct found f;
	struct coil_scrub_info in;
	uint8_t data[8192];
	char path[256];

	et_path(path, sizeof(path), "scrub-super");
	et_opts(&o, path);
	o.size = 16ull << 20;
	et_fill(data, sizeof(data), 5, 0);
	et_write_closed(path, &o, "a", data, sizeof(data));
	flip(path, 200); /* copy A: the store opens from B */
	cr_assert_eq(scrub_once(path, &o, &f, &in), -EIO);
	cr_assert_eq(f.n, 0);
	cr_assert_eq(f.meta, 1);
	cr_assert(strstr(f.what, "superblock copy A"), "%s", f.what);
	cr_assert_eq(in.metadata_errors, 1);
	unlink(path);
}

/* A journal chunk the store still needs (written after the checkpoint of
 * the open) damaged under the open store: recovery would stop there. */
Test(scrub, journal_chunk_damage_is_found)
{
	struct coil_options o;
	struct fmt_super sb, b2;
	struct found f;
	uint8_t data[8192], blk[FMT_BLOCK];
	char path[256];
	coil_store *s;
	coil_obj *h;
	int fd, rc;

	et_path(path, sizeof(path), "scrub-journal");
	et_opts(&o, path);
	o.size = 16ull << 20;
	et_fill(data, sizeof(data), 9, 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "j", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, data, sizeof(data), 0), sizeof(data));
	cr_assert_eq(coil_sync(s), 0);
	fd = open(path, O_RDONLY);
	cr_assert_eq(pread(fd, blk, FMT_BLOCK, 0), FMT_BLOCK);
	rc = fmt_super_decode(&sb, blk, FMT_BLOCK);
	cr_assert_eq(pread(fd, blk, FMT_BLOCK, FMT_BLOCK), FMT_BLOCK);
	if (fmt_super_decode(&b2, blk, FMT_BLOCK) == 0 &&
	    (rc < 0 || b2.seq > sb.seq))
		sb = b2;
	close(fd);
	flip(path, sb.journal_off + sb.replay_off + 10); /* chunk header */
	memset(&f, 0, sizeof(f));
	cr_assert_eq(coil_scrub_start(s), 0);
	cr_assert_eq(coil_scrub_wait(s), -EIO);
	cr_assert_eq(coil_scrub_damage(s, collect, &f), 0);
	cr_assert_eq(f.meta, 1);
	cr_assert(strstr(f.what, "journal chunk"), "%s", f.what);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

static void *writer(void *arg)
{
	coil_obj *h = arg;
	uint8_t buf[16384];

	for (int i = 0; i < 600; i++) {
		et_fill(buf, sizeof(buf), (uint64_t)i + 1, i % 2);
		cr_assert_eq(coil_pwrite(h, buf, sizeof(buf),
					 (uint64_t)(i % 97) * 16384),
			     sizeof(buf));
	}
	return NULL;
}

/* Passes while the store is overwritten (the cleaner relocating and
 * freeing segments under the pass) find nothing. */
Test(scrub, clean_while_written)
{
	struct coil_options o;
	struct coil_scrub_info in;
	char path[256], *js;
	coil_store *s;
	coil_obj *h;
	pthread_t th;
	int n, passes = 0;

	et_path(path, sizeof(path), "scrub-busy");
	et_opts(&o, path);
	o.size = 12ull << 20;
	o.scrub_rate = 0;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "w", COIL_CREATE, &h), 0);
	cr_assert_eq(pthread_create(&th, NULL, writer, h), 0);
	for (int i = 0; i < 20; i++) {
		int rc = coil_scrub_start(s);

		cr_assert(rc == 0 || rc == -EALREADY);
		cr_assert_eq(coil_scrub_wait(s), 0);
		passes++;
	}
	pthread_join(th, NULL);
	cr_assert_eq(coil_check(s, NULL, NULL, &in), 0);
	cr_assert_eq(in.damaged_ranges + in.metadata_errors +
		     in.accounting_errors, 0);
	n = coil_stats_json(s, NULL, 0);
	cr_assert_gt(n, 0);
	js = malloc((size_t)n + 1);
	cr_assert_eq(coil_stats_json(s, js, (size_t)n + 1), n);
	cr_assert(strstr(js, "\"scrub\":{\"running\":false"), "%s", js);
	cr_assert(strstr(js, "\"last_result\":\"clean\""));
	free(js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_gt(passes, 0);
	unlink(path);
}

Test(scrub, interval_runs_a_pass_and_bad_calls)
{
	struct coil_options o;
	struct coil_scrub_info in;
	char path[256];
	coil_store *s;

	et_path(path, sizeof(path), "scrub-interval");
	et_opts(&o, path);
	o.size = 8ull << 20;
	o.scrub_interval = 1;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	/* a pass comes by itself (bounded wait, not a timing claim) */
	for (int i = 0; i < 3000; i++) {
		cr_assert_eq(coil_scrub_info(s, &in), 0);
		if (in.passes)
			break;
		usleep(10000);
	}
	cr_assert_geq(in.passes, 1);
	cr_assert_eq(coil_scrub_info(s, NULL), -EINVAL);
	cr_assert_eq(coil_scrub_info(NULL, &in), -EINVAL);
	cr_assert_eq(coil_scrub_start(NULL), -EINVAL);
	cr_assert_eq(coil_scrub_wait(NULL), -EINVAL);
	cr_assert_eq(coil_scrub_damage(s, NULL, NULL), -EINVAL);
	cr_assert_eq(coil_check(NULL, NULL, NULL, NULL), -EINVAL);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	o.scrub_interval = ~0ull;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	unlink(path);
}

/* The rate limit holds a pass back (64 KiB/s over 1 MiB would take 16 s:
 * far from half done after a moment), and close cuts it short. */
Test(scrub, rate_limit_holds_a_pass_and_close_cuts_it)
{
	struct coil_options o;
	struct coil_scrub_info in;
	uint8_t *data = malloc(1u << 20);
	char path[256];
	coil_store *s;

	et_path(path, sizeof(path), "scrub-rate");
	et_opts(&o, path);
	o.size = 16ull << 20;
	o.compression = "none";
	et_fill(data, 1u << 20, 4, 0);
	et_write_closed(path, &o, "big", data, 1u << 20);
	o.scrub_rate = 65536;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_scrub_start(s), 0);
	cr_assert_eq(coil_scrub_start(s), -EALREADY);
	for (int i = 0; i < 3000; i++) {
		cr_assert_eq(coil_scrub_info(s, &in), 0);
		if (in.bytes_total)
			break;
		usleep(10000);
	}
	cr_assert_eq(in.bytes_total, 1u << 20);
	usleep(300000);
	cr_assert_eq(coil_scrub_info(s, &in), 0);
	cr_assert_eq(in.running, 1);
	cr_assert_lt(in.bytes_done, in.bytes_total / 2, "done %lu",
		     (unsigned long)in.bytes_done);
	cr_assert_eq(coil_close(s), 0);
	free(data);
	unlink(path);
}
