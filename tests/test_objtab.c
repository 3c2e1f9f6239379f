/* tests/test_objtab.c — the object table's names (engine/place/object.c):
 * an open-addressing table whose removals shift the probe run back, and
 * which a checkpoint's load fills all at once, in slot order.
 *
 *   names_through_removes_renames_reopens
 *                          thousands of objects (the table grows from its
 *                          first size several times), a third removed, some
 *                          renamed, removed names created again, then the
 *                          same after a reopen (the names linked by the
 *                          load) and after a reopen from a whole base: every
 *                          name opens its own object, every freed name is
 *                          -ENOENT, a listing counts exactly the live ones
 *   base_with_a_name_twice_is_refused
 *                          a base whose payload names two objects the same
 *                          (checksums made to match): the open is -EIO
 *   metadata_memory_counted
 *                          the stats' metadata_memory grows with objects
 *                          and extents, is the same after a reopen (the
 *                          load makes the same maps), and its extent maps,
 *                          blob descriptors and objects fall to zero when
 *                          every object is removed */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "engine/store.h"
#include "format/format.h"
#include "tests/engine_test_util.h"
#include "tests/super_util.h"
#include "tests/test_util.h"

#define N 3000

/* What the model says of object i: gone, under "n<i>", or under "r<i>". */
enum { GONE, NAMED, RENAMED };

struct model {
	uint8_t state[N];
	uint32_t gen[N]; /* the content of the object now under i's name */
};

static void name_of(char *buf, size_t len, int i, int state)
{
	snprintf(buf, len, "%s%05d", state == RENAMED ? "r-" : "n-", i);
}

static void put(coil_store *s, int i, uint32_t gen)
{
	char name[32];
	uint64_t v = ((uint64_t)gen << 32) | (uint32_t)i;
	coil_obj *h;

	name_of(name, sizeof(name), i, NAMED);
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE | COIL_EXCL, &h), 0,
		     "%s", name);
	cr_assert_eq(coil_pwrite(h, &v, sizeof(v), 0), (int64_t)sizeof(v));
	cr_assert_eq(coil_obj_close(h), 0);
}

static int count_one(void *arg, const char *name, size_t len, uint64_t size)
{
	(void)name;
	(void)len;
	(void)size;
	(*(uint64_t *)arg)++;
	return 0;
}

static void expect(coil_store *s, const struct model *m)
{
	uint64_t live = 0, listed = 0;

	for (int i = 0; i < N; i++) {
		char name[32], other[32];
		coil_obj *h;

		name_of(name, sizeof(name), i, m->state[i] == GONE ? NAMED :
							      m->state[i]);
		name_of(other, sizeof(other), i,
			m->state[i] == RENAMED ? NAMED : RENAMED);
		cr_assert_eq(coil_obj_open(s, other, 0, &h), -ENOENT, "%s",
			     other);
		if (m->state[i] == GONE) {
			cr_assert_eq(coil_obj_open(s, name, 0, &h), -ENOENT,
				     "%s", name);
			continue;
		}
		live++;
		uint64_t v = 0, want = ((uint64_t)m->gen[i] << 32) |
				       (uint32_t)i;
		cr_assert_eq(coil_obj_open(s, name, 0, &h), 0, "%s", name);
		cr_assert_eq(coil_pread(h, &v, sizeof(v), 0),
			     (int64_t)sizeof(v));
		cr_assert_eq(v, want, "%s holds %llx, want %llx", name,
			     (unsigned long long)v, (unsigned long long)want);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_obj_list(s, count_one, &listed), 0);
	cr_assert_eq(listed, live);
}

/* Remove every @k-th live object from @first, rename every other one of
 * the rest still under its first name, create again every @k-th gone one. */
static void churn(coil_store *s, struct model *m, int first, int k,
		  uint32_t gen)
{
	char name[32], to[32];

	for (int i = first; i < N; i += k) {
		if (m->state[i] == GONE)
			continue;
		name_of(name, sizeof(name), i, m->state[i]);
		cr_assert_eq(coil_obj_remove(s, name), 0, "%s", name);
		m->state[i] = GONE;
	}
	for (int i = first + 1; i < N; i += 2) {
		if (m->state[i] != NAMED)
			continue;
		name_of(name, sizeof(name), i, NAMED);
		name_of(to, sizeof(to), i, RENAMED);
		cr_assert_eq(coil_obj_rename(s, name, to,
					     COIL_RENAME_NOREPLACE), 0, "%s", name);
		m->state[i] = RENAMED;
	}
	for (int i = 0; i < N; i += k) {
		if (m->state[i] != GONE)
			continue;
		put(s, i, gen);
		m->state[i] = NAMED;
		m->gen[i] = gen;
	}
}

static void force_base(coil_store *s)
{
	pthread_mutex_lock(&s->mlock);
	s->ck_base_next = true;
	pthread_mutex_unlock(&s->mlock);
}

static coil_store *reopen(const char *path, coil_store *s)
{
	if (s)
		cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(et_open_sized(path, 128ull << 20, false, &s), 0);
	return s;
}

Test(objtab, names_through_removes_renames_reopens, .timeout = 300)
{
	static struct model m;
	char path[256];
	coil_store *s;

	et_path(path, sizeof(path), "objtab");
	cr_assert_eq(et_open_sized(path, 128ull << 20, true, &s), 0);
	for (int i = 0; i < N; i++) {
		put(s, i, 1);
		m.state[i] = NAMED;
		m.gen[i] = 1;
	}
	churn(s, &m, 0, 3, 2);
	expect(s, &m);

	/* the names a load links, then removals and renames among them */
	s = reopen(path, s);
	expect(s, &m);
	churn(s, &m, 1, 5, 3);
	expect(s, &m);

	/* everything in one base */
	force_base(s);
	cr_assert_eq(coil_sync(s), 0);
	s = reopen(path, s);
	expect(s, &m);
	churn(s, &m, 2, 7, 4);
	s = reopen(path, s);
	expect(s, &m);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(objtab, base_with_a_name_twice_is_refused, .timeout = 120)
{
	char path[256];
	uint8_t *area, sbuf[FMT_BLOCK];
	struct fmt_super sb;
	struct fmt_ckpt h;
	coil_store *s;
	uint64_t off;
	uint8_t *hit;
	int fd;

	et_path(path, sizeof(path), "objtab-twice");
	cr_assert_eq(et_open_sized(path, 64ull << 20, true, &s), 0);
	put(s, 1, 1);
	put(s, 2, 1);
	force_base(s);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(coil_close(s), 0);

	sb = et_newest_super(path);
	cr_assert_neq(sb.ckpt_slot, FMT_CKPT_SLOT_NONE);
	cr_assert_eq(sb.delta_count, 0, "the close wrote a delta");
	off = sb.ckpt_off[sb.ckpt_slot];
	area = aligned_alloc(4096, COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK));
	cr_assert_not_null(area);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, area, sb.ckpt_bytes, (off_t)off),
		     (ssize_t)sb.ckpt_bytes);
	cr_assert_eq(fmt_ckpt_decode(&h, area, FMT_BLOCK), 0);
	cr_assert_eq(h.n_objects, 2);

	/* "n-00002" becomes "n-00001": the payload, its checksum, the
	 * header's, and the superblock's copy of it all agree again */
	hit = memmem(area + FMT_BLOCK, h.payload_len, "n-00002", 7);
	cr_assert_not_null(hit);
	hit[6] = '1';
	h.payload_csum = fmt_csum(area + FMT_BLOCK, h.payload_len);
	cr_assert_eq(fmt_ckpt_encode(&h, area, FMT_BLOCK), FMT_BLOCK);
	cr_assert_eq(fmt_ckpt_verify_payload(&h, area + FMT_BLOCK,
					     h.payload_len), 0);
	cr_assert_eq(pwrite(fd, area, sb.ckpt_bytes, (off_t)off),
		     (ssize_t)sb.ckpt_bytes);
	sb.ckpt_csum = fmt_ckpt_block_csum(area);
	for (int copy = 0; copy < 2; copy++) {
		cr_assert_eq(fmt_super_encode(&sb, sbuf, sizeof(sbuf)),
			     FMT_BLOCK);
		cr_assert_eq(pwrite(fd, sbuf, FMT_BLOCK,
				    (off_t)(sb.seq % 2) * FMT_BLOCK),
			     FMT_BLOCK);
		sb.seq++;
	}
	cr_assert_eq(fsync(fd), 0);
	close(fd);
	free(area);

	cr_assert_eq(et_open_sized(path, 64ull << 20, false, &s), -EIO);
	unlink(path);
}

struct mm {
	uint64_t bytes, objects, tables, maps, blobs;
};

static struct mm mm_of(coil_store *s)
{
	static char js[65536];
	struct mm m;

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	m.bytes = json_u64(js, "\"metadata_memory\"", "bytes");
	m.objects = json_u64(js, "\"metadata_memory\"", "objects");
	m.tables = json_u64(js, "\"metadata_memory\"", "tables");
	m.maps = json_u64(js, "\"metadata_memory\"", "extent_maps");
	m.blobs = json_u64(js, "\"metadata_memory\"", "blob_descriptors");
	cr_assert_eq(m.bytes, m.objects + m.tables + m.maps + m.blobs);
	return m;
}

Test(objtab, metadata_memory_counted, .timeout = 120)
{
	static uint8_t buf[8 * 4096];
	char path[256], name[32];
	struct mm m0, m1, m2, m3;
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "objtab-mem");
	cr_assert_eq(et_open_sized(path, 128ull << 20, true, &s), 0);
	m0 = mm_of(s);
	cr_assert_eq(m0.maps, 0);
	cr_assert_eq(m0.blobs, 0);
	/* 500 objects; every tenth with 8 scattered extents (a map that
	 * outgrows its first leaf and array) */
	for (int i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "m-%04d", i);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		et_fill(buf, sizeof(buf), (uint64_t)i, 1);
		for (int k = 0; k < (i % 10 ? 1 : 8); k++)
			cr_assert_eq(coil_pwrite(h, buf + k * 4096, 4096,
						 (uint64_t)k * 65536), 4096);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	m1 = mm_of(s);
	cr_assert_geq(m1.objects, m0.objects + 500 * 100);
	/* the 50 maps of 8 extents have leaves; the 450 of one extent
	 * keep it inline and take no map memory */
	cr_assert_gt(m1.maps, 50 * 8 * 24, "maps %llu",
		     (unsigned long long)m1.maps);
	cr_assert_lt(m1.maps, 50 * 1024, "maps %llu: one-extent maps "
		     "took memory", (unsigned long long)m1.maps);
	cr_assert_gt(m1.blobs, 0);

	/* a reopen loads the same maps (spares aside: a load makes none
	 * where the session's inserts did) */
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(et_open_sized(path, 128ull << 20, false, &s), 0);
	m2 = mm_of(s);
	cr_assert_eq(m2.objects, m1.objects);
	cr_assert_eq(m2.blobs, m1.blobs);
	cr_assert_gt(m2.maps, 0);
	cr_assert_leq(m2.maps, m1.maps);

	for (int i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "m-%04d", i);
		cr_assert_eq(coil_obj_remove(s, name), 0);
	}
	m3 = mm_of(s);
	cr_assert_eq(m3.maps, 0, "maps %llu after removing every object",
		     (unsigned long long)m3.maps);
	cr_assert_eq(m3.blobs, 0);
	cr_assert_eq(m3.objects, m0.objects);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
