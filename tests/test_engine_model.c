/* test_engine_model: thousands of random writes, reads, truncates, removes and
 * reopens checked against an in-memory reference, at many sizes and
 * alignments, with compression on and off, across blob boundaries. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"

#define NOBJ 3
#define OBJ_MAX (3u << 20)

struct model {
	uint8_t *data[NOBJ];
	uint64_t size[NOBJ];
	int exists[NOBJ];
};

static void name_of(char *b, int i)
{
	sprintf(b, "obj/%d", i);
}

static void check_all(coil_store *s, struct model *m, coil_obj **h)
{
	uint8_t *rd = malloc(OBJ_MAX);
	uint32_t bad = 0;

	/* Live bytes per segment are exact (the cleaner picks victims by them). */
	cr_assert_eq(seg_verify_accounting(s, &bad), 0, "segment %u live bytes", bad);

	for (int i = 0; i < NOBJ; i++) {
		uint64_t size;
		if (!m->exists[i])
			continue;
		cr_assert_eq(coil_obj_size(h[i], &size), 0);
		cr_assert_eq(size, m->size[i], "obj %d size %lu want %lu", i,
			     (unsigned long)size, (unsigned long)m->size[i]);
		cr_assert_eq(coil_pread(h[i], rd, OBJ_MAX, 0), (int64_t)size);
		cr_assert(memcmp(rd, m->data[i], size) == 0, "obj %d differs", i);
	}
	(void)s;
	free(rd);
}

static void open_all(coil_store *s, struct model *m, coil_obj **h)
{
	char name[32];

	for (int i = 0; i < NOBJ; i++) {
		h[i] = NULL;
		name_of(name, i);
		if (m->exists[i])
			cr_assert_eq(coil_obj_open(s, name, 0, &h[i]), 0);
		else
			cr_assert_eq(coil_obj_open(s, name, 0, &h[i]), -ENOENT);
	}
}

static void close_all(coil_obj **h)
{
	for (int i = 0; i < NOBJ; i++) {
		cr_assert_eq(coil_obj_close(h[i]), 0);
		h[i] = NULL;
	}
}

static void run_model(const char *tag, const char *comp, uint32_t max_blob,
		      int nops, uint64_t seed)
{
	char path[256], name[32];
	struct coil_options o;
	struct model m;
	coil_store *s;
	coil_obj *h[NOBJ];
	uint8_t *buf = malloc(OBJ_MAX), *rd = malloc(OBJ_MAX);
	uint64_t x = seed;

	memset(&m, 0, sizeof(m));
	for (int i = 0; i < NOBJ; i++)
		m.data[i] = calloc(1, OBJ_MAX);
	et_path(path, sizeof(path), tag);
	et_opts(&o, path);
	o.size = 96ull << 20;
	o.compression = comp;
	o.max_blob = max_blob;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	o.flags &= ~COIL_CREATE;
	open_all(s, &m, h);

	/* a quarter of the ops at least, however scaled (the quick test
	 * command scales; the soak runs them all) */
	nops = (int)tu_scaled((uint64_t)nops, (uint64_t)nops / 4);
	for (int op = 0; op < nops; op++) {
		int i = (int)(tu_xorshift(&x) % NOBJ);
		unsigned kind = (unsigned)(tu_xorshift(&x) % 100);

		name_of(name, i);
		if (!m.exists[i]) {
			cr_assert_eq(coil_obj_open(s, name, COIL_CREATE | COIL_EXCL,
						   &h[i]), 0);
			m.exists[i] = 1;
			m.size[i] = 0;
			memset(m.data[i], 0, OBJ_MAX);
			continue;
		}
		if (kind < 55) {
			/* write: sizes from 1 byte to several blobs, offsets
			 * aligned, blob aligned, or anywhere */
			uint64_t len, off;
			unsigned shape = (unsigned)(tu_xorshift(&x) % 4);
			if (shape == 0)
				len = 1 + tu_xorshift(&x) % 64;
			else if (shape == 1)
				len = 4096 * (1 + tu_xorshift(&x) % 8);
			else if (shape == 2)
				len = 1 + tu_xorshift(&x) % (4 * max_blob);
			else
				len = max_blob * (1 + tu_xorshift(&x) % 4);
			if (len > OBJ_MAX / 2)
				len = OBJ_MAX / 2;
			off = tu_xorshift(&x) % (OBJ_MAX - len);
			if (tu_xorshift(&x) % 3 == 0)
				off = off / 4096 * 4096;
			else if (tu_xorshift(&x) % 3 == 0)
				off = off / max_blob * max_blob;
			et_fill(buf, len, tu_xorshift(&x), (int)(tu_xorshift(&x) % 2));
			cr_assert_eq(coil_pwrite(h[i], buf, len, off), (int64_t)len);
			memcpy(m.data[i] + off, buf, len);
			if (off + len > m.size[i])
				m.size[i] = off + len;
		} else if (kind < 85) {
			uint64_t off = tu_xorshift(&x) % (m.size[i] + 8192);
			uint64_t len = 1 + tu_xorshift(&x) % (3 * max_blob);
			int64_t want = off >= m.size[i] ? 0 :
				(int64_t)(len < m.size[i] - off ? len : m.size[i] - off);
			cr_assert_eq(coil_pread(h[i], rd, len, off), want,
				     "read off %lu len %lu", (unsigned long)off,
				     (unsigned long)len);
			cr_assert(memcmp(rd, m.data[i] + off, (size_t)want) == 0,
				  "read at %lu len %lu differs (op %d)",
				  (unsigned long)off, (unsigned long)len, op);
		} else if (kind < 93) {
			uint64_t ns = tu_xorshift(&x) % (m.size[i] + 100000);
			if (ns > OBJ_MAX)
				ns = OBJ_MAX;
			cr_assert_eq(coil_obj_truncate(h[i], ns), 0);
			if (ns < m.size[i])
				memset(m.data[i] + ns, 0, m.size[i] - ns);
			m.size[i] = ns;
		} else if (kind < 95) {
			cr_assert_eq(coil_obj_close(h[i]), 0);
			h[i] = NULL;
			cr_assert_eq(coil_obj_remove(s, name), 0);
			m.exists[i] = 0;
		} else if (kind < 97) {
			cr_assert_eq(coil_sync(s), 0);
			check_all(s, &m, h);
		} else {
			close_all(h);
			cr_assert_eq(coil_close(s), 0);
			cr_assert_eq(coil_open(path, &o, &s), 0);
			open_all(s, &m, h);
			check_all(s, &m, h);
		}
	}
	check_all(s, &m, h);
	close_all(h);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	open_all(s, &m, h);
	check_all(s, &m, h);
	close_all(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	for (int i = 0; i < NOBJ; i++)
		free(m.data[i]);
	free(buf);
	free(rd);
}

Test(engine_model, zstd_64k, .timeout = 120)
{
	run_model("model-zstd", "zstd:1", 65536, 1500, 11);
}

Test(engine_model, none_64k, .timeout = 120)
{
	run_model("model-none", "none", 65536, 1500, 22);
}

Test(engine_model, zstd_4k_blobs, .timeout = 120)
{
	run_model("model-4k", "zstd:3", 4096, 800, 33);
}

Test(engine_model, zstd_1m_blobs, .timeout = 120)
{
	run_model("model-1m", "zstd", 1u << 20, 600, 44);
}
