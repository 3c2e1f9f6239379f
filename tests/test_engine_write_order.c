/* test_engine_write_order: a write takes its journal ticket once encoded
 * (journal_take_turn), so a write to one object does not wait for a slow
 * encode of another object's write, while writes and truncates of one
 * object still apply in the order they were submitted. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "tests/engine_test_util.h"

#define BIG (8u << 20)

/* Completions in the order they arrive. */
struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int n;
	int order[4];
	int64_t res[4];
};

#define SEEN_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, { 0 }, { 0 } }

struct seen_arg {
	struct seen *s;
	int id;
};

static void seen_cb(void *arg, int64_t res)
{
	struct seen_arg *a = arg;

	pthread_mutex_lock(&a->s->mu);
	a->s->res[a->id] = res;
	a->s->order[a->s->n++] = a->id;
	pthread_cond_broadcast(&a->s->cv);
	pthread_mutex_unlock(&a->s->mu);
}

static void seen_wait(struct seen *s, int n)
{
	pthread_mutex_lock(&s->mu);
	while (s->n < n)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

/* zstd at a high level: an 8 MiB write takes a long time to encode next to
 * a 64 KiB one (each worker takes one task of each request in turn). */
static coil_store *open_slow(char *path, size_t len, const char *tag)
{
	return et_open(path, len, tag, "zstd:12");
}

/* Object @name of @s, created, with BIG bytes of @seed's data in @big
 * written at 0 (completion to @a). */
static coil_obj *start_big(coil_store *s, const char *name, uint8_t *big,
			   uint64_t seed, struct seen_arg *a)
{
	coil_obj *h;

	et_fill(big, BIG, seed, 1);
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	cr_assert_eq(coil_write(h, big, BIG, 0, seen_cb, a), 0);
	return h;
}

static uint64_t turn_waits(coil_store *s)
{
	char js[16384];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, "\"journal\"", "turn_waits");
}

Test(engine_write_order, another_objects_write_does_not_wait_for_a_slow_encode,
     .timeout = 120)
{
	char path[256];
	coil_store *s = open_slow(path, sizeof(path), "order-objects");
	uint8_t *big = malloc(BIG), small[4096], rd[4096];
	struct seen sn = SEEN_INIT;
	struct seen_arg a0 = { &sn, 0 }, a1 = { &sn, 1 };
	coil_obj *x, *y;

	et_fill(small, sizeof(small), 4, 0);
	cr_assert_eq(coil_obj_open(s, "y", COIL_CREATE, &y), 0);
	x = start_big(s, "x", big, 3, &a0);
	cr_assert_eq(coil_write(y, small, sizeof(small), 0, seen_cb, &a1), 0);
	seen_wait(&sn, 2);
	cr_assert_eq(sn.res[0], BIG);
	cr_assert_eq(sn.res[1], (int64_t)sizeof(small));
	/* Submitted second, encoded long before: done first. */
	cr_assert_eq(sn.order[0], 1, "the small write waited for the big one");
	cr_assert_eq(turn_waits(s), 0);
	cr_assert_eq(coil_pread(y, rd, sizeof(rd), 0), (int64_t)sizeof(rd));
	cr_assert(memcmp(rd, small, sizeof(rd)) == 0);
	coil_obj_close(x);
	coil_obj_close(y);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(big);
}

/* The later write is encoded first and must wait for the earlier one's
 * ticket: it lands on top, before and after a reopen. */
Test(engine_write_order, later_overlapping_write_encoded_first_applies_last,
     .timeout = 120)
{
	char path[256];
	coil_store *s = open_slow(path, sizeof(path), "order-overlap");
	uint8_t *big = malloc(BIG), *rd = malloc(BIG), small[65536];
	struct seen sn = SEEN_INIT;
	struct seen_arg a0 = { &sn, 0 }, a1 = { &sn, 1 };
	struct coil_options o;
	coil_obj *h = NULL;
	char name[16] = "";

	et_fill(small, sizeof(small), 6, 0);
	/* The scenario needs the small write encoded while the big one still
	 * is: on a loaded machine the pool may encode them the other way, so
	 * up to five tries, each on a new object, until the small one has
	 * waited for its turn (every try must keep the order all the same). */
	for (int t = 0; t < 5 && turn_waits(s) == 0; t++) {
		snprintf(name, sizeof(name), "o%d", t);
		sn.n = 0;
		if (t)
			cr_assert_eq(coil_obj_close(h), 0);
		h = start_big(s, name, big, 5, &a0);
		cr_assert_eq(coil_write(h, small, sizeof(small), 4096, seen_cb,
					&a1), 0);
		seen_wait(&sn, 2);
		cr_assert_eq(sn.res[0], BIG);
		cr_assert_eq(sn.res[1], (int64_t)sizeof(small));
		cr_assert_eq(sn.order[0], 0,
			     "one object's writes complete in order");
		cr_assert_eq(coil_pread(h, rd, BIG, 0), BIG);
		cr_assert(memcmp(rd + 4096, small, sizeof(small)) == 0,
			  "try %d: the later write did not apply last", t);
	}
	/* the scenario happened: the small one was encoded first, waited */
	cr_assert_eq(turn_waits(s), 1);
	memcpy(big + 4096, small, sizeof(small));
	for (int pass = 0; pass < 2; pass++) {
		cr_assert_eq(coil_pread(h, rd, BIG, 0), BIG);
		cr_assert(memcmp(rd, big, BIG) == 0, "pass %d", pass);
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_close(s), 0);
		et_opts(&o, path);
		o.flags &= ~COIL_CREATE;
		cr_assert_eq(coil_open(path, &o, &s), 0);
		cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
	}
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(big);
	free(rd);
}

/* A truncate takes its ticket after the writes of its object submitted
 * before it, however long they take to encode. */
Test(engine_write_order, truncate_applies_after_the_writes_before_it,
     .timeout = 120)
{
	char path[256];
	coil_store *s = open_slow(path, sizeof(path), "order-truncate");
	uint8_t *big = malloc(BIG), rd[8192];
	struct seen sn = SEEN_INIT;
	struct seen_arg a0 = { &sn, 0 };
	uint64_t size = 0;
	coil_obj *h;

	h = start_big(s, "t", big, 7, &a0);
	cr_assert_eq(coil_obj_truncate(h, 4096), 0);
	seen_wait(&sn, 1);
	cr_assert_eq(sn.res[0], BIG);
	cr_assert_eq(turn_waits(s), 1);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, 4096);
	memset(rd, 0xee, sizeof(rd));
	cr_assert_eq(coil_pread(h, rd, sizeof(rd), 0), 4096);
	cr_assert(memcmp(rd, big, 4096) == 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(big);
}
