/* tests/test_optimize.c — the optimizer (coil_optimize): cold blobs
 * re-encoded smaller through the cleaner's relocation.
 *
 *   shrinks           text written at zstd-1, optimized at zstd-19: fewer
 *                     stored bytes, saved_bytes equal to the drop, every
 *                     byte reads back, also after a reopen; a second call
 *                     scans nothing (blobs are marked); live accounting
 *                     matches a recount
 *   budget            a small byte budget: the call says more remains, and
 *                     calls in a row finish the work
 *   bad_candidate     candidates corrupted before their check: none is
 *                     committed, errors counted, every byte intact
 *   cas_seam          the pass is held after encoding while the foreground
 *                     overwrites, truncates and removes what it read: those
 *                     rewrites are stale skips, never installed; the model
 *                     holds, also after a reopen (replay decides the same)
 *   clones            an object and its clone share blobs: one rewrite,
 *                     both objects follow, both read back
 *   dictionaries      a cohort of 24 MiB of text gets a dictionary: fewer
 *                     stored bytes than without, the dictionary counted in
 *                     them (saved_bytes less its bytes is the drop), not
 *                     listed and not reachable by name (reserved names are
 *                     -EINVAL), every byte reads back, also reopened (the
 *                     dictionary is read at open)
 *   dictionary_damaged the dictionary's bytes damaged on disk: the store
 *                     opens, the blobs that need it read -EIO (never other
 *                     bytes), coil_check names them, the rest reads
 *   background        optimize_idle = 1 s: with the store idle, the cleaner
 *                     thread optimizes on its own; every byte reads back
 *   full_store        a store filled until -ENOSPC: a call does what room
 *                     allows (never the cleaner's reserve), breaks
 *                     nothing, every byte reads back, and writes succeed
 *                     again once an object is removed
 *   errors            bad arguments, a read-only store
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/place/object.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"
#include "tests/opt_seam.h"
#include "tests/test_util.h"

#define KiB (1u << 10)
#define MiB (1u << 20)
#define NOBJ 6
#define OBJ_LEN (768u * KiB)

/* This file's text (tests/test_util.h), one stream per seed. */
static void text_fill(uint8_t *p, size_t n, uint64_t seed)
{
	tu_text_fill(p, n, seed * 0x9e3779b97f4a7c15ull + 1);
}

static char name_of_buf[NOBJ][16];

static const char *name_of(int i)
{
	snprintf(name_of_buf[i], sizeof(name_of_buf[i]), "dir/o%d", i);
	return name_of_buf[i];
}

static void put_all(coil_store *s, uint8_t **data)
{
	for (int i = 0; i < NOBJ; i++) {
		coil_obj *h;

		data[i] = malloc(OBJ_LEN);
		text_fill(data[i], OBJ_LEN, (uint64_t)i + 1);
		cr_assert_eq(coil_obj_open(s, name_of(i), COIL_CREATE, &h), 0);
		for (uint32_t at = 0; at < OBJ_LEN; at += 64 * KiB)
			cr_assert_eq(coil_pwrite(h, data[i] + at, 64 * KiB, at),
				     64 * KiB);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_sync(s), 0);
}

static uint64_t stored_of(coil_store *s)
{
	static char js[1 << 16];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, "\"space\"", "stored");
}

static coil_store *open_store(const char *path, bool create)
{
	coil_store *s;

	cr_assert_eq(et_open_sized(path, 128ull << 20, create, &s), 0);
	return s;
}

static void free_all(uint8_t **data)
{
	for (int i = 0; i < NOBJ; i++)
		free(data[i]);
}

Test(optimize, shrinks, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ];
	struct coil_optimize_report rep;
	uint64_t s0, s1;
	coil_store *s;

	et_path(path, sizeof(path), "opt-shrinks");
	s = open_store(path, true);
	put_all(s, data);
	s0 = stored_of(s);
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	s1 = stored_of(s);
	cr_log_info("stored %llu -> %llu (%.3f), %llu of %llu blobs rewritten",
		    (unsigned long long)s0, (unsigned long long)s1,
		    (double)s1 / (double)s0, (unsigned long long)rep.rewritten,
		    (unsigned long long)rep.scanned);
	cr_assert_gt(rep.scanned, 0);
	cr_assert_gt(rep.rewritten, 0);
	cr_assert_eq(rep.errors, 0);
	cr_assert_eq(rep.stale_skips, 0);
	cr_assert_lt(s1, s0 - s0 / 20, "zstd-19 saved less than 5 %%");
	cr_assert_eq(rep.saved_bytes, s0 - s1, "saved %llu, stored fell %llu",
		     (unsigned long long)rep.saved_bytes,
		     (unsigned long long)(s0 - s1));
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	cr_assert_eq(cleaner_check_live(s), 0);
	/* every blob is marked: nothing to do the second time */
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(rep.rewritten, 0);
	cr_assert_eq(coil_close(s), 0);

	s = open_store(path, false);
	cr_assert_eq(stored_of(s), s1);
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_eq(rep.scanned, 0, "the marks did not survive a reopen");
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
}

/* Data still taking writes is left alone: the optimizer takes a segment
 * once nothing new has landed in it for optimize_cold seconds, and data
 * written before the open counts as cold. */
Test(optimize, cold, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ];
	struct coil_optimize_report rep;
	struct coil_options o;
	coil_store *s;

	et_path(path, sizeof(path), "opt-cold");
	et_opts(&o, path);
	o.size = 128ull << 20;
	o.optimize_cold = 2;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	put_all(s, data);
	/* all of it just written: nothing to do, and nothing said to be
	 * left (a caller looping until done would spin) */
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_eq(rep.scanned, 0, "encoded data still taking writes");
	sleep(3);
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_gt(rep.scanned, 0, "cold data left alone");
	cr_assert_gt(rep.rewritten, 0);
	/* new data, then a reopen with the default: cold at once */
	for (int i = 0; i < NOBJ; i++) {
		coil_obj *h;

		text_fill(data[i], OBJ_LEN, (uint64_t)i + 100);
		cr_assert_eq(coil_obj_open(s, name_of(i), 0, &h), 0);
		cr_assert_eq(coil_pwrite(h, data[i], OBJ_LEN, 0), OBJ_LEN);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(coil_close(s), 0);
	coil_options_init(&o);
	et_opts(&o, path);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(o.optimize_cold, 0); /* et_opts' */
	o.optimize_cold = 30;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_gt(rep.scanned, 0, "data from before the open left alone");
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
}

Test(optimize, budget, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ];
	struct coil_optimize_opts o = { .budget_bytes = 1 };
	struct coil_optimize_report rep;
	uint64_t rewritten = 0;
	coil_store *s;
	int rc, calls = 0;

	et_path(path, sizeof(path), "opt-budget");
	s = open_store(path, true);
	put_all(s, data);
	/* one segment a call (a pass takes at least one); the data spans
	 * more than one, so the first call leaves work */
	do {
		rc = coil_optimize(s, &o, &rep);
		cr_assert_geq(rc, 0);
		cr_assert_leq(rep.passes, 1);
		cr_assert(calls > 0 || rc == 1, "the budget did not bound "
			  "the first call");
		rewritten += rep.rewritten;
		calls++;
	} while (rc == 1 && calls < 100);
	cr_assert_eq(rc, 0);
	cr_assert_gt(rewritten, 0);
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
}

Test(optimize, bad_candidate, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ];
	struct coil_optimize_report rep;
	uint64_t s0;
	coil_store *s;

	et_path(path, sizeof(path), "opt-bad");
	s = open_store(path, true);
	put_all(s, data);
	s0 = stored_of(s);
	cleaner_optimize_inject(s, 1u << 30);
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cleaner_optimize_inject(s, 0);
	cr_assert_gt(rep.errors, 0);
	cr_assert_eq(rep.rewritten, 0);
	cr_assert_eq(rep.saved_bytes, 0);
	cr_assert_eq(stored_of(s), s0);
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	cr_assert_eq(coil_close(s), 0);
	s = open_store(path, false);
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
}

/* ---- the compare-and-swap, held open ---------------------------------- */

Test(optimize, cas_seam, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ], *p = malloc(OBJ_LEN);
	uint64_t size[NOBJ];
	bool gone[NOBJ] = { false };
	struct coil_optimize_opts opts = { 0 };
	struct seam sm;
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "opt-seam");
	s = open_store(path, true);
	put_all(s, data);
	for (int i = 0; i < NOBJ; i++)
		size[i] = OBJ_LEN;
	cr_assert_eq(seam_hold(&sm, s, &opts), 0);

	/* The first batch is encoded and held.  Change every object the
	 * foreground way: an overwrite of its first half, a truncate of
	 * another, a removal of a third; the rest keep what was read. */
	for (int i = 0; i < NOBJ; i++) {
		if (i % 3 == 2) {
			cr_assert_eq(coil_obj_remove(s, name_of(i)), 0);
			gone[i] = true;
			continue;
		}
		cr_assert_eq(coil_obj_open(s, name_of(i), 0, &h), 0);
		if (i % 3 == 0) {
			et_fill(p, OBJ_LEN / 2, 50 + i, 1);
			cr_assert_eq(coil_pwrite(h, p, OBJ_LEN / 2, 0),
				     OBJ_LEN / 2);
			memcpy(data[i], p, OBJ_LEN / 2);
		} else {
			cr_assert_eq(coil_obj_truncate(h, 100 * KiB + 17), 0);
			size[i] = 100 * KiB + 17;
		}
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(seam_release(&sm), 0);
	cr_assert_geq(sm.rc, 0);
	cr_log_info("seam: scanned %llu rewritten %llu stale %llu",
		    (unsigned long long)sm.rep.scanned,
		    (unsigned long long)sm.rep.rewritten,
		    (unsigned long long)sm.rep.stale_skips);
	cr_assert_gt(sm.rep.stale_skips, 0,
		     "no rewrite met the foreground's changes");
	for (int i = 0; i < NOBJ; i++)
		if (!gone[i])
			et_check_obj(s, name_of(i), data[i], size[i]);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);

	/* replay makes the same decisions from the records */
	s = open_store(path, false);
	for (int i = 0; i < NOBJ; i++) {
		if (gone[i])
			cr_assert_eq(coil_obj_open(s, name_of(i), 0, &h),
				     -ENOENT);
		else
			et_check_obj(s, name_of(i), data[i], size[i]);
	}
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
	free(p);
}

Test(optimize, clones, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ];
	struct coil_optimize_report rep;
	coil_store *s;

	et_path(path, sizeof(path), "opt-clones");
	s = open_store(path, true);
	put_all(s, data);
	cr_assert_eq(coil_obj_clone(s, name_of(0), "copy"), 0);
	cr_assert_eq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_gt(rep.rewritten, 0);
	et_check_obj(s, name_of(0), data[0], OBJ_LEN);
	et_check_obj(s, "copy", data[0], OBJ_LEN);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	s = open_store(path, false);
	et_check_obj(s, name_of(0), data[0], OBJ_LEN);
	et_check_obj(s, "copy", data[0], OBJ_LEN);
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
}

#define DOBJ 24

/* A cohort a dictionary pays for: every 64 KiB piece of its objects
 * starts with the same 3 KiB (a schema, a header), which zstd finds only
 * once in each blob, and a dictionary once for all of them. */
static void put_cohort(coil_store *s, uint8_t **data)
{
	uint8_t head[3 * KiB];
	char name[32];

	text_fill(head, sizeof(head), 7777);
	for (int i = 0; i < DOBJ; i++) {
		coil_obj *h;

		data[i] = malloc(MiB);
		text_fill(data[i], MiB, 100 + (uint64_t)i);
		for (uint32_t at = 0; at < MiB; at += 64 * KiB)
			memcpy(data[i] + at, head, sizeof(head));
		snprintf(name, sizeof(name), "logs/%02d", i);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		for (uint32_t at = 0; at < MiB; at += 64 * KiB)
			cr_assert_eq(coil_pwrite(h, data[i] + at, 64 * KiB, at),
				     64 * KiB);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	/* and one object of another cohort, too small for one */
	data[DOBJ] = malloc(MiB);
	text_fill(data[DOBJ], MiB, 99);
	{
		coil_obj *h;

		cr_assert_eq(coil_obj_open(s, "other", COIL_CREATE, &h), 0);
		cr_assert_eq(coil_pwrite(h, data[DOBJ], MiB, 0), MiB);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_sync(s), 0);
}

static void check_cohort(coil_store *s, uint8_t **data)
{
	char name[32];

	for (int i = 0; i < DOBJ; i++) {
		snprintf(name, sizeof(name), "logs/%02d", i);
		et_check_obj(s, name, data[i], MiB);
	}
	et_check_obj(s, "other", data[DOBJ], MiB);
}

static int list_cb(void *arg, const char *name, size_t len, uint64_t size)
{
	(void)size;
	cr_assert(len > 0 && name[0] != COIL_NAME_RESERVED,
		  "an internal object listed");
	(*(int *)arg)++;
	return 0;
}

/* The dictionary tests encode at level 3: what they check is how
 * dictionaries are made, stored, loaded and used, and level 19 would
 * spend most of the suite's time (under the sanitizers too) encoding. */
#define DICT_TEST_LEVEL 3

static uint64_t optimized_stored(const char *path, uint8_t **data,
				 unsigned flags,
				 struct coil_optimize_report *rep)
{
	struct coil_optimize_opts o = { .flags = flags,
					.level = DICT_TEST_LEVEL };
	coil_store *s = open_store(path, true);
	uint64_t st;

	put_cohort(s, data);
	cr_assert_eq(coil_optimize(s, &o, rep), 0);
	st = stored_of(s);
	cr_assert_eq(coil_close(s), 0);
	return st;
}

Test(optimize, dictionaries, .timeout = 240)
{
	char path[256], p2[256];
	uint8_t *data[DOBJ + 1], *d2[DOBJ + 1];
	struct coil_optimize_opts lvl = { .level = DICT_TEST_LEVEL };
	struct coil_optimize_report rep, rep0;
	uint64_t s0, s1, plain;
	coil_store *s;
	coil_obj *h;
	int n = 0;

	/* the same data without dictionaries, for comparison */
	et_path(p2, sizeof(p2), "opt-nodict");
	plain = optimized_stored(p2, d2, COIL_OPTIMIZE_NO_DICTS, &rep0);
	cr_assert_eq(rep0.dicts_made, 0);
	for (int i = 0; i <= DOBJ; i++)
		free(d2[i]);

	et_path(path, sizeof(path), "opt-dict");
	s = open_store(path, true);
	put_cohort(s, data);
	s0 = stored_of(s);
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	s1 = stored_of(s);
	cr_log_info("stored %llu -> %llu with a dictionary (%llu bytes), "
		    "%llu without", (unsigned long long)s0,
		    (unsigned long long)s1, (unsigned long long)rep.dict_bytes,
		    (unsigned long long)plain);
	cr_assert_eq(rep.dicts_made, 1, "made %llu, rejected %llu",
		     (unsigned long long)rep.dicts_made,
		     (unsigned long long)rep.dicts_rejected);
	cr_assert_gt(rep.dict_bytes, 0);
	cr_assert_lt(s1, plain, "the dictionary did not pay for itself");
	/* stored holds the dictionary's object: the drop is the rewrites'
	 * saving less what it stores */
	cr_assert_gt(s1 + rep.saved_bytes, s0);
	cr_assert_leq(s1 + rep.saved_bytes - s0, rep.dict_bytes);
	check_cohort(s, data);
	cr_assert_eq(coil_obj_list(s, list_cb, &n), 0);
	cr_assert_eq(n, DOBJ + 1);
	/* its name is coil's: no call reaches it */
	{
		char nm[8] = { COIL_NAME_RESERVED, 'd', '/', '1', '/', 'l', 0 };
		coil_batch *b;

		cr_assert_eq(coil_obj_open(s, nm, 0, &h), -EINVAL);
		cr_assert_eq(coil_obj_open(s, nm, COIL_CREATE, &h), -EINVAL);
		cr_assert_eq(coil_obj_remove(s, nm), -EINVAL);
		cr_assert_eq(coil_obj_rename(s, "other", nm, 0), -EINVAL);
		cr_assert_eq(coil_obj_clone(s, "other", nm), -EINVAL);
		cr_assert_eq(coil_batch_new(s, &b), 0);
		cr_assert_eq(coil_batch_remove(b, nm), -EINVAL);
		coil_batch_free(b);
	}
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);

	s = open_store(path, false);
	cr_assert_eq(stored_of(s), s1);
	check_cohort(s, data);
	/* a second call: nothing to train, nothing to encode */
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	cr_assert_eq(rep.dicts_made, 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(coil_close(s), 0);
	for (int i = 0; i <= DOBJ; i++)
		free(data[i]);
}

struct found {
	uint64_t logs, dict, other;
};

static int found_cb(void *arg, const struct coil_damage *d)
{
	struct found *f = arg;

	if (d->object && d->object_len >= 5 && !memcmp(d->object, "logs/", 5))
		f->logs++;
	else if (d->object && d->object[0] == COIL_NAME_RESERVED)
		f->dict++;  /* the dictionary itself, by its own name */
	else if (d->object)
		f->other++;
	return 0;
}

Test(optimize, dictionary_damaged, .timeout = 240)
{
	char path[256];
	uint8_t *data[DOBJ + 1], *rd = malloc(MiB), junk[512];
	struct coil_optimize_opts lvl = { .level = DICT_TEST_LEVEL };
	struct coil_optimize_report rep;
	struct coil_scrub_info info;
	struct found f = { 0 };
	uint64_t dev_off = 0;
	coil_store *s;
	coil_obj *h;
	int fd;

	et_path(path, sizeof(path), "opt-dict-bad");
	s = open_store(path, true);
	put_cohort(s, data);
	cr_assert_eq(coil_optimize(s, &lvl, &rep), 0);
	cr_assert_eq(rep.dicts_made, 1);
	/* where the dictionary's bytes are */
	pthread_mutex_lock(&s->mlock);
	{
		struct dict *d = s->dicts.tab[1];
		struct object *o = d ? objtab_find_id(s, d->obj_id) : NULL;
		struct extmap_iter it;
		const struct ext *e;

		cr_assert(o);
		extmap_iter_init(&it, &o->map, 0);
		e = extmap_iter_next(&it);
		cr_assert(e && !blobd_is_mem(e->b));
		dev_off = e->b->dev_off;
	}
	pthread_mutex_unlock(&s->mlock);
	cr_assert_eq(coil_close(s), 0);

	memset(junk, 0x5a, sizeof(junk));
	fd = open(path, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), (off_t)dev_off + 100),
		     (ssize_t)sizeof(junk));
	close(fd);

	s = open_store(path, false);
	cr_assert_eq(coil_obj_open(s, "logs/03", 0, &h), 0);
	cr_assert_eq(coil_pread(h, rd, MiB, 0), -EIO);
	cr_assert_eq(coil_obj_close(h), 0);
	et_check_obj(s, "other", data[DOBJ], MiB);
	cr_assert_eq(coil_check(s, found_cb, &f, &info), 0);
	cr_assert_gt(f.logs, 0, "coil_check named no damaged range");
	cr_assert_eq(f.dict, 1);
	cr_assert_eq(f.other, 0);
	cr_assert_gt(info.damaged_ranges, 0);
	cr_assert_eq(coil_close(s), 0);
	for (int i = 0; i <= DOBJ; i++)
		free(data[i]);
	free(rd);
}

Test(optimize, background, .timeout = 120)
{
	char path[256];
	uint8_t *data[NOBJ];
	struct coil_options o;
	struct coil_optimize_report rep;
	static char js[1 << 16];
	uint64_t rewritten = 0, passes = 0, s0;
	coil_store *s;

	et_path(path, sizeof(path), "opt-bg");
	et_opts(&o, path);
	o.size = 128ull << 20;
	o.optimize_idle = 1;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	put_all(s, data);
	s0 = stored_of(s);
	/* segments sealed a second ago, and a second without writes */
	for (int i = 0; i < 300 && passes == 0; i++) {
		usleep(100 * 1000);
		cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
		passes = json_u64(js, "\"optimizer\"", "passes");
	}
	rewritten = json_u64(js, "\"optimizer\"", "rewritten");
	cr_assert_gt(rewritten, 0, "no background pass in 30 s");
	for (int i = 0; i < NOBJ; i++)
		et_check_obj(s, name_of(i), data[i], OBJ_LEN);
	/* the background got (at least) the sealed segments */
	cr_assert_lt(stored_of(s), s0);
	cr_assert_geq(coil_optimize(s, NULL, &rep), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free_all(data);
}

Test(optimize, full_store, .timeout = 120)
{
	char path[256], name[32];
	struct coil_options o;
	struct coil_optimize_report rep;
	uint8_t *p = malloc(MiB), *rd = malloc(MiB);
	coil_store *s;
	coil_obj *h;
	int n = 0, rc;

	et_path(path, sizeof(path), "opt-full");
	et_opts(&o, path);
	o.size = 48ull << 20;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	for (;; n++) {
		int64_t w;

		text_fill(p, MiB, 500 + (uint64_t)n);
		snprintf(name, sizeof(name), "f/%03d", n);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		w = coil_pwrite(h, p, MiB, 0);
		cr_assert_eq(coil_obj_close(h), 0);
		if (w == -ENOSPC) {
			cr_assert_eq(coil_obj_remove(s, name), 0);
			break;
		}
		cr_assert_eq(w, MiB, "write %d: %lld", n, (long long)w);
		cr_assert_lt(n, 400);
	}
	cr_assert_eq(coil_sync(s), 0);
	rc = coil_optimize(s, NULL, &rep);
	cr_assert_geq(rc, 0, "%s", coil_strerror(rc));
	cr_log_info("full store: %d objects, optimize %d, rewritten %llu",
		    n, rc, (unsigned long long)rep.rewritten);
	for (int i = 0; i < n; i++) {
		text_fill(p, MiB, 500 + (uint64_t)i);
		snprintf(name, sizeof(name), "f/%03d", i);
		et_check_obj(s, name, p, MiB);
	}
	cr_assert_eq(cleaner_check_live(s), 0);
	/* space back: writes succeed again */
	cr_assert_eq(coil_obj_remove(s, "f/000"), 0);
	cr_assert_eq(coil_obj_remove(s, "f/001"), 0);
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(coil_obj_open(s, "again", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, p, MiB, 0), MiB);
	cr_assert_eq(coil_pread(h, rd, MiB, 0), MiB);
	cr_assert(memcmp(rd, p, MiB) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	free(p);
	free(rd);
}

/* @n bytes no dictionary can help with at offset @off of @name. */
static void put_noise(coil_store *s, const char *name, uint64_t off,
		      size_t n, uint64_t seed)
{
	uint8_t *buf = malloc(n);
	coil_obj *h;

	cr_assert_not_null(buf);
	for (size_t i = 0; i < n; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		buf[i] = (uint8_t)seed;
	}
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, n, off), (int64_t)n);
	cr_assert_eq(coil_obj_close(h), 0);
	free(buf);
}

/* A cohort judged not worth a dictionary is not read and trained on again
 * by the next call (a caller looping on small budgets would pay for its
 * sample every call), until it has doubled. */
Test(optimize, rejected_cohort, .timeout = 120)
{
	struct coil_optimize_opts o = { .level = 3, .budget_bytes = MiB };
	struct coil_optimize_report rep;
	char path[256];
	coil_store *s;

	et_path(path, sizeof(path), "opt-reject");
	s = open_store(path, true);
	put_noise(s, "noise/a", 0, 12 * MiB, 0x1234567);
	cr_assert_geq(coil_optimize(s, &o, &rep), 0);
	cr_assert_eq(rep.dicts_made, 0);
	cr_assert_geq(rep.dicts_rejected, 1); /* a candidate each, not kept */
	cr_assert_geq(coil_optimize(s, &o, &rep), 0);
	cr_assert_eq(rep.dicts_rejected, 0, "trained again on the same cohort");
	/* grown by less than double: still not */
	put_noise(s, "noise/b", 0, 4 * MiB, 0x7654321);
	cr_assert_geq(coil_optimize(s, &o, &rep), 0);
	cr_assert_eq(rep.dicts_rejected, 0);
	/* doubled: judged again */
	put_noise(s, "noise/c", 0, 12 * MiB, 0xabcdef1);
	cr_assert_geq(coil_optimize(s, &o, &rep), 0);
	cr_assert_geq(rep.dicts_rejected, 1); /* a candidate each, not kept */
	cr_assert_eq(coil_close(s), 0);
}

Test(optimize, errors, .timeout = 60)
{
	char path[256];
	struct coil_optimize_opts o = { .level = 23 };
	struct coil_options opt;
	coil_store *s;

	cr_assert_eq(coil_optimize(NULL, NULL, NULL), -EINVAL);
	et_path(path, sizeof(path), "opt-errors");
	s = open_store(path, true);
	cr_assert_eq(coil_optimize(s, &o, NULL), -EINVAL);
	o.level = -1;
	cr_assert_eq(coil_optimize(s, &o, NULL), -EINVAL);
	/* an empty store: nothing to do */
	cr_assert_eq(coil_optimize(s, NULL, NULL), 0);
	cr_assert_eq(coil_close(s), 0);
	et_opts(&opt, path);
	opt.flags = COIL_RDONLY;
	cr_assert_eq(coil_open(path, &opt, &s), 0);
	cr_assert_eq(coil_optimize(s, NULL, NULL), -EROFS);
	cr_assert_eq(coil_close(s), 0);
}
