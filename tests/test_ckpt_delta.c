/* tests/test_ckpt_delta.c — delta checkpoints (engine/log/ckpt.c): a
 * checkpoint writes what changed since the one before, after a whole base,
 * until the deltas add up to the base's size.
 *
 *   small_change_small_delta   one changed object in a store of thousands:
 *                              its delta is a few blocks, the base is not
 *                              rewritten, and everything reopens exact
 *   model_across_deltas        creates, writes, truncates and removes of a
 *                              few objects with checkpoints between them
 *                              (deltas and whole ones both happen), reopened
 *                              after a clean close and after _exit in a
 *                              child: every object as a model says
 *   name_reused_in_one_delta   a removed name created again before the next
 *                              checkpoint loads as the new object
 *   scrub_sees_a_damaged_delta the scrub's metadata walk names a delta that
 *                              does not verify */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "engine/log/ckpt.h"
#include "engine/store.h"
#include "format/format.h"
#include "tests/engine_test_util.h"
#include "tests/test_util.h"

static void force_base(coil_store *s)
{
	pthread_mutex_lock(&s->mlock);
	s->ck_base_next = true;
	pthread_mutex_unlock(&s->mlock);
}

static void put_small(coil_store *s, const char *name, const void *buf,
		      size_t len, uint64_t off)
{
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, len, off), (int64_t)len);
	cr_assert_eq(coil_obj_close(h), 0);
}

static void expect_obj(coil_store *s, const char *name, const uint8_t *want,
		       uint64_t size)
{
	uint8_t *got = malloc(size ? size : 1);
	coil_obj *h;
	uint64_t sz;

	cr_assert_not_null(got);
	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0, "%s", name);
	cr_assert_eq(coil_obj_size(h, &sz), 0);
	cr_assert_eq(sz, size, "%s: size %llu, want %llu", name,
		     (unsigned long long)sz, (unsigned long long)size);
	if (size)
		cr_assert_eq(coil_pread(h, got, size, 0), (int64_t)size);
	cr_assert(memcmp(got, want, size) == 0, "%s differs", name);
	cr_assert_eq(coil_obj_close(h), 0);
	free(got);
}

static uint64_t stat_of(coil_store *s, const char *key)
{
	static char js[65536];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, "\"checkpoint\"", key);
}

Test(ckpt_delta, small_change_small_delta, .timeout = 120)
{
	char path[256], name[32];
	struct coil_options o;
	uint8_t v[100];
	coil_store *s;
	unsigned n = (unsigned)tu_scaled(4000, 1000);
	uint64_t wrote, deltas;

	et_path(path, sizeof(path), "delta-small");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	for (unsigned i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "d/obj%06u", i);
		memset(v, (int)(i & 0xff), sizeof(v));
		put_small(s, name, v, sizeof(v), 0);
	}
	force_base(s);
	cr_assert_eq(ckpt_write(s, false), 0);
	cr_assert_gt(stat_of(s, "base_bytes"), (uint64_t)n * 40);

	memset(v, 0xee, sizeof(v));
	put_small(s, "d/obj000007", v, sizeof(v), 0);
	wrote = stat_of(s, "bytes_written");
	deltas = stat_of(s, "deltas");
	cr_assert_eq(ckpt_write(s, false), 0);
	cr_assert_geq(stat_of(s, "deltas"), deltas + 1);
	cr_assert_geq(stat_of(s, "chain_deltas"), 1);
	/* one object's record, its header and padding: a block or two, not
	 * the whole table (the checkpoint thread may add an empty delta of
	 * a block of its own) */
	cr_assert_leq(stat_of(s, "bytes_written") - wrote, 3 * FMT_BLOCK);
	cr_assert_leq(stat_of(s, "chain_bytes"), 4 * FMT_BLOCK);
	cr_assert(s->sb.incompat & FMT_INCOMPAT_CKPT_DELTA);
	cr_assert_eq(coil_close(s), 0);

	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	for (unsigned i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "d/obj%06u", i);
		memset(v, i == 7 ? 0xee : (int)(i & 0xff), sizeof(v));
		expect_obj(s, name, v, sizeof(v));
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* ---- a model of a few objects ------------------------------------------ */

#define NOBJ 12
#define OBJ_MAX (96u << 10)

struct model {
	bool live[NOBJ];
	uint64_t size[NOBJ];
	uint8_t *bytes[NOBJ];
};

static void model_init(struct model *m)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < NOBJ; i++) {
		m->bytes[i] = calloc(1, OBJ_MAX);
		cr_assert_not_null(m->bytes[i]);
	}
}

static void model_free(struct model *m)
{
	for (int i = 0; i < NOBJ; i++)
		free(m->bytes[i]);
}

static void obj_name(char *buf, size_t len, int i)
{
	snprintf(buf, len, "m/%02d", i);
}

/* One random operation on the store (@s may be NULL: the model alone, to
 * replay a child's run) and the model. */
static void step(coil_store *s, struct model *m, uint64_t *rng)
{
	static uint8_t buf[20000];
	int i = (int)(tu_xorshift(rng) % NOBJ), op = (int)(tu_xorshift(rng) % 10);
	char name[16];
	coil_obj *h;

	obj_name(name, sizeof(name), i);
	if (op < 6) {
		uint64_t len = 1 + tu_xorshift(rng) % sizeof(buf);
		uint64_t off = tu_xorshift(rng) % (OBJ_MAX - len);

		et_fill(buf, len, tu_xorshift(rng), op & 1);
		if (s) {
			cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
			cr_assert_eq(coil_pwrite(h, buf, len, off), (int64_t)len);
			cr_assert_eq(coil_obj_close(h), 0);
		}
		if (!m->live[i]) {
			m->live[i] = true;
			m->size[i] = 0;
			memset(m->bytes[i], 0, OBJ_MAX);
		}
		memcpy(m->bytes[i] + off, buf, len);
		if (off + len > m->size[i])
			m->size[i] = off + len;
	} else if (op < 8) {
		uint64_t size = tu_xorshift(rng) % OBJ_MAX;

		if (!m->live[i])
			return;
		if (s) {
			cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
			cr_assert_eq(coil_obj_truncate(h, size), 0);
			cr_assert_eq(coil_obj_close(h), 0);
		}
		if (size < m->size[i])
			memset(m->bytes[i] + size, 0, OBJ_MAX - size);
		m->size[i] = size;
	} else if (op == 8) {
		if (!m->live[i])
			return;
		if (s)
			cr_assert_eq(coil_obj_remove(s, name), 0);
		m->live[i] = false;
	} else if (s) {
		/* every tenth step: a checkpoint, now and then a whole one */
		if (tu_xorshift(rng) % 8 == 0)
			force_base(s);
		cr_assert_eq(ckpt_write(s, false), 0);
	} else {
		(void)tu_xorshift(rng);
	}
}

static void expect_model(coil_store *s, const struct model *m)
{
	char name[16];
	coil_obj *h;

	for (int i = 0; i < NOBJ; i++) {
		obj_name(name, sizeof(name), i);
		if (m->live[i])
			expect_obj(s, name, m->bytes[i], m->size[i]);
		else
			cr_assert_eq(coil_obj_open(s, name, 0, &h), -ENOENT,
				     "%s was removed", name);
	}
}

Test(ckpt_delta, model_across_deltas, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	struct model m, again;
	uint64_t rng = 0x5eed, crng;
	unsigned rounds = (unsigned)tu_scaled(6, 2);
	unsigned steps = (unsigned)tu_scaled(400, 150);
	uint64_t deltas = 0, ckpts = 0;
	coil_store *s;
	pid_t pid;
	int st;

	model_init(&m);
	et_path(path, sizeof(path), "delta-model");
	et_opts(&o, path);
	o.compression = "zstd";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	o.flags &= ~COIL_CREATE;
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned k = 0; k < steps; k++)
			step(s, &m, &rng);
		deltas += stat_of(s, "deltas");
		ckpts += stat_of(s, "count");
		cr_assert_eq(coil_close(s), 0);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		expect_model(s, &m);
	}
	cr_assert_gt(deltas, 0, "deltas were written");
	cr_assert_gt(ckpts, deltas, "and whole checkpoints too");

	/* A child runs on with checkpoints and leaves without closing: what
	 * it completed is back, through the deltas and the journal after. */
	cr_assert_eq(coil_close(s), 0);
	crng = rng;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (coil_open(path, &o, &s) != 0)
			_exit(2);
		for (unsigned k = 0; k < steps; k++)
			step(s, &m, &crng);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d", st);
	model_init(&again);
	for (int i = 0; i < NOBJ; i++) {
		again.live[i] = m.live[i];
		again.size[i] = m.size[i];
		memcpy(again.bytes[i], m.bytes[i], OBJ_MAX);
	}
	for (unsigned k = 0; k < steps; k++)
		step(NULL, &again, &rng);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_model(s, &again);
	cr_assert_eq(coil_close(s), 0);
	model_free(&again);
	model_free(&m);
	unlink(path);
}

Test(ckpt_delta, name_reused_in_one_delta, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	uint8_t a[3000], b[5000];
	coil_store *s;

	et_path(path, sizeof(path), "delta-reuse");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(a, sizeof(a), 1, 1);
	et_fill(b, sizeof(b), 2, 0);
	put_small(s, "x", a, sizeof(a), 0);
	put_small(s, "keep", a, sizeof(a), 0);
	force_base(s);
	cr_assert_eq(ckpt_write(s, false), 0);
	/* removed and created again between two checkpoints */
	cr_assert_eq(coil_obj_remove(s, "x"), 0);
	put_small(s, "x", b, sizeof(b), 0);
	cr_assert_eq(ckpt_write(s, false), 0);
	cr_assert_eq(stat_of(s, "chain_deltas"), 1);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	expect_obj(s, "x", b, sizeof(b));
	expect_obj(s, "keep", a, sizeof(a));
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

static int count_damage(void *arg, const struct coil_damage *d)
{
	(void)d;
	++*(int *)arg;
	return 0;
}

Test(ckpt_delta, scrub_sees_a_damaged_delta, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	uint8_t a[3000];
	struct fmt_super sb;
	coil_store *s;
	uint64_t off;
	int damaged = 0;
	FILE *f;
	int c;

	et_path(path, sizeof(path), "delta-scrub");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(a, sizeof(a), 3, 1);
	put_small(s, "a", a, sizeof(a), 0);
	force_base(s);
	cr_assert_eq(ckpt_write(s, false), 0);
	put_small(s, "b", a, sizeof(a), 0);
	cr_assert_eq(ckpt_write(s, false), 0);
	sb = s->sb;
	cr_assert_eq(sb.delta_count, 1);
	/* a byte of the delta's payload, under the running store */
	off = sb.ckpt_off[sb.ckpt_slot] + COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK) +
	      FMT_DELTA_HDR + 4;
	f = fopen(path, "r+b");
	cr_assert_not_null(f);
	cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
	c = fgetc(f);
	cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
	fputc(c ^ 0x40, f);
	fclose(f);
	cr_assert_eq(coil_check(s, count_damage, &damaged, NULL), 0);
	cr_assert_gt(damaged, 0, "the damaged delta is reported");
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
