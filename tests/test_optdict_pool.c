/* tests/test_optdict_pool.c — a cohort's pool of dictionaries: up to
 * DICT_POOL_MAX per cohort, chosen greedily by what each adds, and each
 * blob encoded with the best of its cohort's.
 *
 *   mixed_cohort      a cohort of C-like text and JSON-like records (each
 *                     kind drawing on its own phrase book, larger than one
 *                     dictionary holds for both) gets more than one
 *                     dictionary, at most DICT_POOL_MAX; the blobs of each
 *                     kind name a dictionary of their cohort, and the two
 *                     kinds mostly different ones; a homogeneous cohort
 *                     beside it gets exactly one; the report's counts and
 *                     the stats' match the table; every byte reads back,
 *                     also after a reopen (the pool is read at open); a
 *                     second call makes no dictionary and encodes nothing
 *   mixed_names       the same two kinds under names that do not tell them
 *                     apart: the split by content still gives the cohort
 *                     more than one dictionary, every byte reads back
 *   pool_bound        a cohort with more dictionaries on disk than
 *                     DICT_POOL_MAX (written as the optimizer writes them):
 *                     its pool is the first DICT_POOL_MAX by id, no blob
 *                     names another one, every byte reads back
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zdict.h>

#include "coil.h"
#include "engine/place/dict.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"
#include "tests/test_util.h"

#define KiB (1u << 10)
#define MiB (1u << 20)
#define PER_KIND 16
#define OBJ_LEN MiB
#define PHRASES 1400
#define PHRASE_MAX 96
/* The level the tests encode at: what they check is which dictionaries
 * are made and used, which level 19 would only make slower. */
#define LEVEL 3

enum kind { KIND_C, KIND_JSON };

struct book {
	char p[PHRASES][PHRASE_MAX];
	size_t len[PHRASES];
};

static struct book books[2];

static void ident(char *out, size_t n, uint64_t *x)
{
	for (size_t i = 0; i < n; i++) {
		tu_xorshift(x);
		out[i] = (char)('a' + (*x >> 20) % 26);
	}
	out[n] = 0;
}

/* Each kind's phrase book: about 1400 phrases of 40-90 bytes (more than
 * 100 KiB), so one dictionary cannot hold both kinds' books. */
static void books_make(void)
{
	uint64_t x = 0x1234567887654321ull;

	for (int i = 0; i < PHRASES; i++) {
		char a[16], b[16], c[16];
		int n;

		ident(a, 8, &x);
		ident(b, 10, &x);
		ident(c, 6, &x);
		n = snprintf(books[KIND_C].p[i], PHRASE_MAX,
			     "static int %s_%s(struct %s *p)\n{\n\treturn p->%s;\n}\n",
			     a, c, b, c);
		books[KIND_C].len[i] = (size_t)n;
		ident(a, 9, &x);
		ident(b, 12, &x);
		ident(c, 7, &x);
		n = snprintf(books[KIND_JSON].p[i], PHRASE_MAX,
			     "{\"%s\": \"%s\", \"tags\": [\"%s\"], \"n\": ",
			     a, b, c);
		books[KIND_JSON].len[i] = (size_t)n;
	}
}

/* @n bytes of @kind from @seed: phrases of its book, each followed by a
 * number (C: a comment, JSON: a value). */
static void kind_fill(uint8_t *p, size_t n, enum kind k, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i = 0;

	while (i < n) {
		char num[32];
		uint32_t w;
		int m;

		tu_xorshift(&x);
		w = (uint32_t)((x >> 16) % PHRASES);
		for (size_t j = 0; j < books[k].len[w] && i < n; j++)
			p[i++] = (uint8_t)books[k].p[w][j];
		m = snprintf(num, sizeof(num), k == KIND_C ? "/* %u */\n" :
			     "%u}\n", (unsigned)(x >> 40) % 100000);
		for (int j = 0; j < m && i < n; j++)
			p[i++] = (uint8_t)num[j];
	}
}

struct obj {
	char name[48];
	enum kind kind;
	uint8_t *data;
};

#define MIXED (2 * PER_KIND)
#define PLAIN 24
#define NOBJS (MIXED + PLAIN)

static struct obj objs[NOBJS];

/* The mixed cohort "mix" (each kind's names by @name_fmt: %s the kind,
 * %02d the object), and the homogeneous cohort "plain" (JSON only,
 * 24 MiB). */
static void put_all(coil_store *s, const char *const name_fmt[2])
{
	books_make();
	for (int i = 0; i < NOBJS; i++) {
		struct obj *o = &objs[i];
		coil_obj *h;

		if (i < MIXED) {
			/* the kinds interleaved, as a folder lists them */
			o->kind = i % 2 ? KIND_JSON : KIND_C;
			snprintf(o->name, sizeof(o->name),
				 name_fmt[o->kind], i);
		} else {
			o->kind = KIND_JSON;
			snprintf(o->name, sizeof(o->name), "plain/%02d", i);
		}
		o->data = malloc(OBJ_LEN);
		cr_assert(o->data);
		kind_fill(o->data, OBJ_LEN, o->kind, 1000 + (uint64_t)i);
		cr_assert_eq(coil_obj_open(s, o->name, COIL_CREATE, &h), 0);
		for (uint32_t at = 0; at < OBJ_LEN; at += 64 * KiB)
			cr_assert_eq(coil_pwrite(h, o->data + at, 64 * KiB, at),
				     64 * KiB);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_sync(s), 0);
}

static void check_all(coil_store *s)
{
	for (int i = 0; i < NOBJS; i++)
		et_check_obj(s, objs[i].name, objs[i].data, OBJ_LEN);
}

static void free_all(void)
{
	for (int i = 0; i < NOBJS; i++) {
		free(objs[i].data);
		objs[i].data = NULL;
	}
}

static coil_store *open_store(const char *path, bool create)
{
	coil_store *s;

	cr_assert_eq(et_open_sized(path, 256ull << 20, create, &s), 0);
	return s;
}

/* The dictionaries in the table of @cohort: how many, their bytes. */
static unsigned dicts_of(coil_store *s, const char *cohort, uint64_t *bytes)
{
	unsigned n = 0;

	for (uint32_t i = 1; i < DICT_MAX; i++) {
		struct dict *d = s->dicts.tab[i];

		if (d && strcmp(d->cohort, cohort) == 0) {
			n++;
			if (bytes)
				*bytes += d->len;
		}
	}
	return n;
}

static unsigned dicts_all(coil_store *s)
{
	unsigned n = 0;

	for (uint32_t i = 1; i < DICT_MAX; i++)
		n += s->dicts.tab[i] != NULL;
	return n;
}

/* Per kind of the mixed cohort: blobs per dictionary id (0: none). */
struct uses {
	uint64_t by_id[2][DICT_MAX];
	uint64_t blobs[2];
};

/* Every blob of the mixed cohort's objects: counted by the dictionary it
 * names, which must be one of the cohort's (or none). */
static void uses_count(coil_store *s, struct uses *u)
{
	memset(u, 0, sizeof(*u));
	pthread_mutex_lock(&s->mlock);
	for (int i = 0; i < MIXED; i++) {
		struct object *o = objtab_find_name(s, objs[i].name,
					       strlen(objs[i].name));
		struct extmap_iter it;
		const struct ext *e;

		cr_assert(o, "%s", objs[i].name);
		extmap_iter_init(&it, &o->map, 0);
		while ((e = extmap_iter_next(&it))) {
			uint32_t id = e->b->dict_id;

			cr_assert_lt(id, DICT_MAX);
			if (id)
				cr_assert(s->dicts.tab[id] &&
					  !strcmp(s->dicts.tab[id]->cohort,
						  "mix"),
					  "%s names dictionary %u of another "
					  "cohort", objs[i].name, id);
			u->by_id[objs[i].kind][id]++;
			u->blobs[objs[i].kind]++;
		}
	}
	pthread_mutex_unlock(&s->mlock);
}

/* The dictionary most of @kind's blobs name, and how many do. */
static uint32_t uses_top(const struct uses *u, int kind, uint64_t *count)
{
	uint32_t top = 0;

	for (uint32_t id = 1; id < DICT_MAX; id++)
		if (u->by_id[kind][id] > u->by_id[kind][top])
			top = id;
	*count = u->by_id[kind][top];
	return top;
}

static uint64_t stats_u64(coil_store *s, const char *section,
			  const char *key)
{
	static char js[1 << 16];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, section, key);
}

Test(optdict_pool, mixed_cohort, .timeout = 300)
{
	static const char *const fmt[2] = { "mix/%02d.c", "mix/%02d.json" };
	struct coil_optimize_opts lvl = { .level = LEVEL };
	struct coil_optimize_report rep;
	char path[256];
	uint64_t mix_bytes = 0, plain_bytes = 0, top_n[2];
	uint32_t top[2];
	unsigned nmix, nplain;
	struct uses *u = malloc(sizeof(*u));
	coil_store *s;

	cr_assert(u);
	et_path(path, sizeof(path), "optdict-pool");
	s = open_store(path, true);
	put_all(s, fmt);
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	nmix = dicts_of(s, "mix", &mix_bytes);
	nplain = dicts_of(s, "plain", &plain_bytes);
	cr_log_info("mix: %u dictionaries (%llu bytes), plain: %u; made %llu, "
		    "rejected %llu", nmix, (unsigned long long)mix_bytes,
		    nplain, (unsigned long long)rep.dicts_made,
		    (unsigned long long)rep.dicts_rejected);
	cr_assert_gt(nmix, 1, "a mixed cohort got %u dictionaries", nmix);
	cr_assert_leq(nmix, DICT_POOL_MAX);
	cr_assert_eq(nplain, 1, "a homogeneous cohort got %u", nplain);
	cr_assert_eq(rep.dicts_made, nmix + nplain);
	cr_assert_eq(rep.dicts_made, dicts_all(s));
	cr_assert_eq(rep.dict_bytes, mix_bytes + plain_bytes);
	cr_assert_gt(rep.dicts_rejected, 0,
		     "every candidate kept: nothing was chosen");
	cr_assert_eq(stats_u64(s, "\"dictionaries\"", "loaded"),
		     rep.dicts_made);
	cr_assert_eq(stats_u64(s, "\"dictionaries\"", "bytes"),
		     rep.dict_bytes);

	/* each kind's blobs name dictionaries of their cohort, and mostly
	 * each kind its own */
	uses_count(s, u);
	for (int k = 0; k < 2; k++) {
		top[k] = uses_top(u, k, &top_n[k]);
		cr_log_info("kind %d: %llu blobs, %llu with dictionary %u", k,
			    (unsigned long long)u->blobs[k],
			    (unsigned long long)top_n[k], top[k]);
		cr_assert_neq(top[k], 0, "kind %d's blobs use no dictionary",
			      k);
		cr_assert_gt(top_n[k] * 4, u->blobs[k] * 3,
			     "kind %d: only %llu of %llu blobs chose alike", k,
			     (unsigned long long)top_n[k],
			     (unsigned long long)u->blobs[k]);
	}
	cr_assert_neq(top[KIND_C], top[KIND_JSON],
		      "both kinds chose dictionary %u", top[KIND_C]);
	check_all(s);
	cr_assert_eq(coil_close(s), 0);

	s = open_store(path, false);
	cr_assert_eq(dicts_of(s, "mix", NULL), nmix);
	cr_assert_eq(stats_u64(s, "\"dictionaries\"", "loaded"),
		     nmix + nplain);
	check_all(s);
	/* a second call: the cohorts have their pools, nothing to encode */
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	cr_assert_eq(rep.dicts_made, 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(dicts_all(s), nmix + nplain);
	check_all(s);
	cr_assert_eq(coil_close(s), 0);
	free_all();
	free(u);
}

Test(optdict_pool, mixed_names, .timeout = 300)
{
	static const char *const fmt[2] = { "mix/%02d", "mix/%02d" };
	struct coil_optimize_opts lvl = { .level = LEVEL };
	struct coil_optimize_report rep;
	char path[256];
	unsigned nmix;
	coil_store *s;

	et_path(path, sizeof(path), "optdict-pool-names");
	s = open_store(path, true);
	put_all(s, fmt);
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	nmix = dicts_of(s, "mix", NULL);
	cr_log_info("mix, names alike: %u dictionaries", nmix);
	cr_assert_gt(nmix, 1, "the split by content found %u", nmix);
	cr_assert_leq(nmix, DICT_POOL_MAX);
	cr_assert_eq(dicts_of(s, "plain", NULL), 1);
	cr_assert_eq(coil_close(s), 0);
	s = open_store(path, false);
	check_all(s);
	cr_assert_eq(coil_close(s), 0);
	free_all();
}

/* Write @len bytes @buf as dictionary @id of @cohort, as the optimizer
 * does: its object made durable, then published. */
static void dict_put(coil_store *s, uint32_t id, const char *cohort,
		     const void *buf, size_t len)
{
	char name[64];
	coil_obj *h;

	snprintf(name, sizeof(name), "%s%u/%s", DICT_NAME_PREFIX, id, cohort);
	cr_assert_eq(engine_obj_open_internal(s, name, COIL_CREATE | COIL_EXCL,
					      &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, len, 0), (int64_t)len);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(dict_publish(s, id, buf, (uint32_t)len), 0);
}

/* A dictionary of @kind trained on 2 MiB of it from @seed. */
static size_t dict_train(enum kind k, uint64_t seed, uint8_t *out,
			 size_t cap)
{
	enum { N = 32 };
	uint8_t *src = malloc(N * 64 * KiB);
	size_t sz[N], len;

	cr_assert(src);
	for (int i = 0; i < N; i++) {
		kind_fill(src + (size_t)i * 64 * KiB, 64 * KiB, k,
			  seed + (uint64_t)i);
		sz[i] = 64 * KiB;
	}
	len = ZDICT_trainFromBuffer(out, cap, src, sz, N);
	cr_assert(!ZDICT_isError(len), "%s", ZDICT_getErrorName(len));
	free(src);
	return len;
}

Test(optdict_pool, pool_bound, .timeout = 300)
{
	struct coil_optimize_opts lvl = { .level = LEVEL,
					  .flags = COIL_OPTIMIZE_NO_DICTS };
	struct coil_optimize_report rep;
	struct dict *pool[DICT_POOL_MAX];
	uint8_t *dict = malloc(110 * KiB);
	uint64_t named[DICT_POOL_MAX + 2] = { 0 };
	char path[256];
	coil_store *s;

	cr_assert(dict);
	books_make();
	et_path(path, sizeof(path), "optdict-pool-bound");
	s = open_store(path, true);
	/* four that fit the data poorly (the other kind), then one that
	 * fits it: a pool without its bound would choose the fifth */
	for (uint32_t id = 1; id <= DICT_POOL_MAX + 1; id++) {
		size_t len = dict_train(id <= DICT_POOL_MAX ? KIND_C : KIND_JSON,
					77 * id, dict, 110 * KiB);

		dict_put(s, id, "many", dict, len);
	}
	cr_assert_eq(dict_pool(s, "many", pool), DICT_POOL_MAX);
	for (unsigned i = 0; i < DICT_POOL_MAX; i++)
		cr_assert_eq(pool[i]->id, i + 1);
	for (int i = 0; i < 8; i++) {
		struct obj *o = &objs[i];
		coil_obj *h;

		o->kind = KIND_JSON;
		snprintf(o->name, sizeof(o->name), "many/%02d", i);
		o->data = malloc(OBJ_LEN);
		cr_assert(o->data);
		kind_fill(o->data, OBJ_LEN, o->kind, 5000 + (uint64_t)i);
		cr_assert_eq(coil_obj_open(s, o->name, COIL_CREATE, &h), 0);
		cr_assert_eq(coil_pwrite(h, o->data, OBJ_LEN, 0), OBJ_LEN);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	cr_assert_eq(rep.dicts_made, 0);
	cr_assert_gt(rep.rewritten, 0);
	pthread_mutex_lock(&s->mlock);
	for (int i = 0; i < 8; i++) {
		struct object *o = objtab_find_name(s, objs[i].name,
						    strlen(objs[i].name));
		struct extmap_iter it;
		const struct ext *e;

		cr_assert(o);
		extmap_iter_init(&it, &o->map, 0);
		while ((e = extmap_iter_next(&it)))
			named[COIL_MIN(e->b->dict_id, DICT_POOL_MAX + 1)]++;
	}
	pthread_mutex_unlock(&s->mlock);
	cr_log_info("blobs by dictionary: none %llu, 1-4 %llu %llu %llu %llu, "
		    "5 %llu", (unsigned long long)named[0],
		    (unsigned long long)named[1], (unsigned long long)named[2],
		    (unsigned long long)named[3], (unsigned long long)named[4],
		    (unsigned long long)named[5]);
	cr_assert_eq(named[DICT_POOL_MAX + 1], 0,
		     "a blob names a dictionary beyond its cohort's pool");
	cr_assert_eq(coil_close(s), 0);
	s = open_store(path, false);
	cr_assert_eq(dict_pool(s, "many", pool), DICT_POOL_MAX);
	for (int i = 0; i < 8; i++)
		et_check_obj(s, objs[i].name, objs[i].data, OBJ_LEN);
	cr_assert_eq(coil_close(s), 0);
	for (int i = 0; i < 8; i++) {
		free(objs[i].data);
		objs[i].data = NULL;
	}
	free(dict);
}
