/* test_engine_extmap: the extent map against a byte-level model — random
 * shadowing inserts, punches and truncates; every byte must map to the blob
 * and blob offset the model says, live-byte drops must add up, and blob
 * references must balance. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/place/blob.h"
#include "engine/place/extmap.h"
#include "format/format.h"
#include "tests/test_util.h"

#define SPAN 200000u

struct cell {
	struct blobd *b; /* NULL = hole */
	uint32_t boff;
};

static uint64_t dropped;

static void drop(void *arg, struct blobd *b, uint32_t len)
{
	(void)arg;
	(void)b;
	dropped += len;
}

static struct blobd *new_blob(uint32_t len, uint64_t id)
{
	struct fmt_blob fb;

	memset(&fb, 0, sizeof(fb));
	fb.dev_off = id * 4096;
	fb.stored_len = fb.logical_len = len;
	fb.codec = FMT_CODEC_RAW;
	fb.n_csums = (uint16_t)((len + 4095) / 4096);
	return blobd_new(&fb);
}

/* The map against a model of its first @span bytes: every extent where
 * the model puts it, the holes empty, the totals and the end right, and
 * an iteration started anywhere finds the extent holding its offset. */
static void check_span(const struct extmap *m, const struct cell *model,
		       uint32_t span)
{
	struct extmap_iter it;
	const struct ext *e;
	uint64_t pos = 0, n = 0, bytes = 0;

	extmap_iter_init(&it, m, 0);
	while ((e = extmap_iter_next(&it))) {
		cr_assert_geq(e->off, pos, "extents overlap or are unsorted");
		cr_assert_gt(e->len, 0);
		cr_assert_leq(e->off + e->len, span);
		for (uint64_t i = pos; i < e->off; i++)
			cr_assert_null(model[i].b, "byte %lu should be mapped",
				       (unsigned long)i);
		for (uint32_t i = 0; i < e->len; i++) {
			const struct cell *c = &model[e->off + i];

			cr_assert_eq(c->b, e->b, "byte %lu maps to the wrong blob",
				     (unsigned long)(e->off + i));
			cr_assert_eq(c->boff, e->skip + i);
		}
		cr_assert_leq(e->skip + e->len, e->b->logical_len);
		pos = e->off + e->len;
		bytes += e->len;
		n++;
	}
	for (uint64_t i = pos; i < span; i++)
		cr_assert_null(model[i].b);
	cr_assert_eq(n, m->n);
	cr_assert_eq(bytes, m->bytes);
	cr_assert_eq(extmap_end(m), pos);
	for (uint32_t o = 0; o < span; o += 37) {
		extmap_iter_init(&it, m, o);
		e = extmap_iter_next(&it);
		if (e)
			cr_assert_gt(e->off + e->len, o);
	}
}

static void check(const struct extmap *m, const struct cell *model)
{
	check_span(m, model, SPAN);
}

/* Insert a new blob of @len bytes at @off (its bytes from @skip) into the
 * map and the model; @return the bytes mapped. */
static uint32_t model_insert(struct extmap *m, struct cell *model,
			     uint64_t off, uint32_t len, uint32_t skip,
			     uint64_t *id)
{
	struct ext e = { off, len, skip, new_blob(len + skip, (*id)++) };

	cr_assert_eq(extmap_insert(m, &e, drop, NULL), 0);
	for (uint32_t i = 0; i < len; i++) {
		model[off + i].b = e.b;
		model[off + i].boff = skip + i;
	}
	return len;
}

/* Punch [@off, @off + @len) of the map, and of the model up to @span. */
static void model_punch(struct extmap *m, struct cell *model, uint64_t off,
			uint64_t len, uint64_t span)
{
	cr_assert_eq(extmap_punch(m, off, len, drop, NULL), 0);
	memset(&model[off], 0, COIL_MIN(len, span - off) * sizeof(*model));
}

/* The map against the model one last time, then every mapped byte
 * dropped exactly once through destroy. */
static void model_finish(struct extmap *m, struct cell *model,
			 uint64_t inserted)
{
	check(m, model);
	cr_assert_eq(inserted, dropped + m->bytes);
	extmap_destroy(m, drop, NULL);
	cr_assert_eq(inserted, dropped);
	free(model);
}

Test(engine_extmap, random_shadowing_vs_model, .timeout = 60)
{
	struct cell *model = calloc(SPAN, sizeof(*model));
	struct extmap m;
	uint64_t x = 42, inserted = 0, id = 1;
	uint32_t leaf = 0;

	extmap_init(&m, NULL);
	dropped = 0;
	for (int op = 0; op < 6000; op++) {
		tu_xorshift(&x);
		uint32_t len = 1 + (uint32_t)(x % ((op % 7 == 0) ? 20000 : 900));
		uint64_t off = (x >> 24) % (SPAN - len);

		/* replay's prefetch hint, its later stages given a leaf
		 * index from an older shape of the map or any number: it
		 * reads only inside the map (ASan) and changes nothing (the
		 * model check) */
		if (op % 3 == 0) {
			leaf = extmap_prefetch(&m, off, 0, 0);
			cr_assert(m.nleaf == 0 || leaf < m.nleaf);
		} else {
			(void)extmap_prefetch(&m, off, op % 3,
					      op % 2 ? leaf : (uint32_t)(x >> 40));
		}
		if (x % 11 == 0) {
			uint64_t plen = 1 + (x >> 8) % 5000;
			if (off + plen > SPAN)
				plen = SPAN - off;
			cr_assert_eq(extmap_punch(&m, off, plen, drop, NULL), 0);
			memset(&model[off], 0, plen * sizeof(*model));
		} else {
			inserted += model_insert(&m, model, off, len,
						 (uint32_t)((x >> 5) % 64), &id);
		}
		if (op % 500 == 0)
			check(&m, model);
	}
	check(&m, model);
	cr_assert_eq(inserted, dropped + m.bytes, "every byte mapped is dropped once");
	/* Truncate to 1000 bytes. */
	cr_assert_eq(extmap_punch(&m, 1000, UINT64_MAX - 1000, drop, NULL), 0);
	memset(&model[1000], 0, (SPAN - 1000) * sizeof(*model));
	check(&m, model);
	cr_assert_leq(extmap_end(&m), 1000);
	extmap_destroy(&m, drop, NULL);
	cr_assert_eq(inserted, dropped);
	free(model); /* ASan's leak check proves blob references balanced */
}

Test(engine_extmap, middle_split_keeps_both_sides)
{
	struct extmap m;
	struct extmap_iter it;
	const struct ext *e;
	struct blobd *big = new_blob(65536, 1);

	extmap_init(&m, NULL);
	struct ext a = { 0, 65536, 0, big };
	cr_assert_eq(extmap_insert(&m, &a, NULL, NULL), 0);
	struct ext b = { 4096, 4096, 0, new_blob(4096, 2) };
	cr_assert_eq(extmap_insert(&m, &b, NULL, NULL), 0);
	cr_assert_eq(m.n, 3);
	extmap_iter_init(&it, &m, 0);
	e = extmap_iter_next(&it);
	cr_assert(e->off == 0 && e->len == 4096 && e->b == big && e->skip == 0);
	e = extmap_iter_next(&it);
	cr_assert(e->off == 4096 && e->len == 4096 && e->b != big);
	e = extmap_iter_next(&it);
	cr_assert(e->off == 8192 && e->len == 65536 - 8192 && e->b == big &&
		  e->skip == 8192);
	cr_assert_null(extmap_iter_next(&it));
	/* Iteration from the middle of an extent starts at that extent. */
	extmap_iter_init(&it, &m, 5000);
	e = extmap_iter_next(&it);
	cr_assert_eq(e->off, 4096);
	extmap_destroy(&m, NULL, NULL);
}

/* A map of one leaf sizes that leaf to its extents: it grows from two to a
 * whole leaf, splits, shrinks back to nothing and starts again.  Inserts
 * over everything mapped (the punch empties the lone leaf just before the
 * insert needs one) and punches of everything come often. */
Test(engine_extmap, small_maps_grow_split_and_empty, .timeout = 60)
{
	struct cell *model = calloc(SPAN, sizeof(*model));
	struct extmap m;
	uint64_t x = 7, inserted = 0, id = 1;
	const uint32_t span = 96 * 64; /* up to 96 extents of 64 bytes */

	extmap_init(&m, NULL);
	dropped = 0;
	for (int op = 0; op < 20000; op++) {
		uint32_t off, len;

		tu_xorshift(&x);
		if (x % 13 == 0) {
			/* everything mapped, shadowed by one extent */
			off = 0;
			len = span;
		} else {
			len = 1 + (uint32_t)(x % ((op / 1000) % 2 ? 64 : 700));
			off = (uint32_t)((x >> 24) % (span - len + 1));
		}
		if (x % 17 == 0)
			model_punch(&m, model, off, (x >> 8) % 2 ? span : len,
				    span);
		else
			inserted += model_insert(&m, model, off, len, 0, &id);
		if (op % 97 == 0)
			check(&m, model);
	}
	model_finish(&m, model, inserted);
}

/* Extents added in order (a checkpoint's load, a sequential writer) fill
 * their leaves whole, and the map stays right when random writes and
 * punches land in those full leaves afterwards. */
Test(engine_extmap, appends_fill_leaves_then_shadow, .timeout = 60)
{
	struct cell *model = calloc(SPAN, sizeof(*model));
	struct extmap m;
	uint64_t x = 11, inserted = 0, id = 1;
	const uint32_t step = 100, n = 1000; /* 100-byte extents, gaps */

	extmap_init(&m, NULL);
	dropped = 0;
	for (uint32_t k = 0; k < n; k++)
		inserted += model_insert(&m, model,
					 k * step + (k % 3 == 0 ? 10 : 0),
					 step - 10, 0, &id);
	check(&m, model);
	cr_assert_eq(m.nleaf, (n + EXTMAP_LEAF_MAX - 1) / EXTMAP_LEAF_MAX,
		     "%u leaves for %u extents in order", m.nleaf, n);
	for (int op = 0; op < 4000; op++) {
		uint32_t off, len;

		tu_xorshift(&x);
		len = 1 + (uint32_t)(x % 300);
		off = (uint32_t)((x >> 24) % (n * step + 200 - len));
		if (x % 7 == 0)
			model_punch(&m, model, off, len, SPAN);
		else
			inserted += model_insert(&m, model, off, len, 0, &id);
		if (op % 53 == 0)
			check(&m, model);
	}
	model_finish(&m, model, inserted);
}

/* A map that has only held one extent keeps it inline, with no leaf
 * memory; shadowing it whole or trimming it keeps it so; a second extent
 * or a split moves it into a leaf.  Thousands of short lives of a map
 * against the model, each ending in destroy with every byte dropped once
 * and the store's running totals back at zero. */
Test(engine_extmap, one_extent_inline_then_leaves, .timeout = 60)
{
	const uint32_t span = 256;
	struct cell model[256];
	struct extmap_acct acct;
	uint64_t x = 99, id = 1;

	memset(&acct, 0, sizeof(acct));
	for (int life = 0; life < 3000; life++) {
		struct extmap m;
		uint64_t inserted = 0;
		bool leaves = false;
		int ops = 1 + life % 6;

		extmap_init(&m, &acct);
		memset(model, 0, sizeof(model));
		dropped = 0;
		for (int op = 0; op < ops; op++) {
			uint32_t off, len;

			tu_xorshift(&x);
			off = (uint32_t)(x % span);
			len = 1 + (uint32_t)((x >> 16) % (span - off));
			switch ((x >> 40) % 5) {
			case 0: /* anywhere */
				inserted += model_insert(&m, model, off, len,
							 (uint32_t)(x >> 50) % 9,
							 &id);
				break;
			case 1: /* over everything mapped */
				inserted += model_insert(&m, model, 0, span, 0,
							 &id);
				break;
			case 2: /* a punch: left, right, middle or whole */
			case 3:
				model_punch(&m, model, off, len, span);
				break;
			default: /* past the end: a second extent, if any */
				if (extmap_end(&m) < span)
					inserted += model_insert(
						&m, model, extmap_end(&m),
						span - (uint32_t)extmap_end(&m),
						0, &id);
				break;
			}
			check_span(&m, model, span);
			leaves |= m.n > 1;
			if (!leaves) {
				cr_assert_eq(acct.mem, 0,
					     "a map of at most one extent "
					     "took leaf memory");
				cr_assert_null(m.leaf);
			} else {
				cr_assert(m.leaf && acct.mem > 0);
			}
			cr_assert_eq(acct.n, m.n);
			cr_assert_eq(acct.bytes, m.bytes);
		}
		cr_assert_eq(inserted, dropped + m.bytes);
		extmap_destroy(&m, drop, NULL);
		cr_assert_eq(inserted, dropped);
		cr_assert_eq(acct.mem, 0);
		cr_assert_eq(acct.n, 0);
		cr_assert_eq(acct.bytes, 0);
		cr_assert_eq(acct.stored, 0);
	}
}
