/* test_engine_flush_fair: 32 threads calling coil_flush in a loop, never
 * waiting for their callbacks, next to two 4 KiB writers.  The writers
 * finish, every flush completes with 0, and the bounds hold: flushes
 * waiting or in flight never exceed the pool, device flushes in flight
 * never exceed one (read from the stats; no timing).  And a flush still
 * covers what was called before it besides completed writes: a create. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "coil.h"
#include "tests/engine_test_util.h"
#include "uring/uring_fault.h"

#define FLUSHERS 32
#define WRITERS 2
#define WRITES 300

static coil_store *s;
static atomic_bool stop;
static atomic_long submitted, completed, failed, refused;

static void flush_cb(void *arg, int64_t res)
{
	(void)arg;
	if (res != 0)
		atomic_fetch_add(&failed, 1);
	atomic_fetch_add(&completed, 1);
}

static void *flusher(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		int rc = coil_flush(s, flush_cb, NULL);

		if (rc == 0)
			atomic_fetch_add(&submitted, 1);
		else
			atomic_fetch_add(&refused, 1);
	}
	return NULL;
}

static void *writer(void *arg)
{
	coil_obj *h = arg;
	uint8_t buf[4096];

	for (int i = 0; i < WRITES; i++) {
		memset(buf, i, sizeof(buf));
		cr_assert_eq(coil_pwrite(h, buf, sizeof(buf),
					 (uint64_t)(i * 7919 % 1024) * 4096),
			     4096);
	}
	return NULL;
}

Test(engine_flush_fair, flush_loops_next_to_writers, .timeout = 300)
{
	char path[256], js[8192];
	pthread_t ft[FLUSHERS], wt[WRITERS];
	coil_obj *h[WRITERS];

	s = et_open(path, sizeof(path), "flush-fair", "none");
	for (int i = 0; i < WRITERS; i++) {
		char name[8] = { 'w', (char)('0' + i), 0 };

		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h[i]), 0);
	}
	for (int i = 0; i < FLUSHERS; i++)
		cr_assert_eq(pthread_create(&ft[i], NULL, flusher, NULL), 0);
	for (int i = 0; i < WRITERS; i++)
		cr_assert_eq(pthread_create(&wt[i], NULL, writer, h[i]), 0);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(wt[i], NULL);
	atomic_store(&stop, true);
	for (int i = 0; i < FLUSHERS; i++)
		pthread_join(ft[i], NULL);
	cr_assert_eq(coil_sync(s), 0);

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	cr_expect_gt(json_u64(js, "\"io\"", "flushes_in_flight_max"), 1, "%s",
		     js);
	cr_expect_leq(json_u64(js, "\"io\"", "flushes_in_flight_max"),
		      json_u64(js, "\"io\"", "flush_slots"), "%s", js);
	cr_expect_eq(json_u64(js, "\"io\"", "flush_fsyncs_in_flight_max"), 1,
		     "%s", js);
	/* one device flush served many coil_flush calls */
	cr_expect_lt(json_u64(js, "\"io\"", "fsyncs"), atomic_load(&submitted),
		     "%s", js);
	for (int i = 0; i < WRITERS; i++)
		cr_assert_eq(coil_obj_close(h[i]), 0);
	cr_assert_eq(coil_close(s), 0); /* waits for every flush */
	cr_expect_eq(atomic_load(&completed), atomic_load(&submitted));
	cr_expect_eq(atomic_load(&failed), 0);
	/* outside callbacks a full pool waits instead of refusing */
	cr_expect_eq(atomic_load(&refused), 0);
}

/* Keeps journal cycles in flight, so a create's record may wait for the
 * chunk ahead of it. */
static void *bg_writer(void *arg)
{
	coil_obj *h = arg;
	uint8_t buf[4096];

	memset(buf, 7, sizeof(buf));
	for (uint64_t i = 0; !atomic_load(&stop); i++)
		if (coil_pwrite(h, buf, sizeof(buf), (i % 256) * 4096) < 0)
			break;
	return NULL;
}

/* A create is durable with the next flush even while other writes keep
 * the journal busy: the flush waits until the create's record is written,
 * then flushes the device.  Power is cut right after the flush (every
 * write it did not cover is lost). */
Test(engine_flush_fair, flush_covers_a_create, .timeout = 300)
{
	struct uring_fault_spec spec;
	struct coil_options o;
	char path[256];
	coil_obj *h, *bg;
	pthread_t t;
	int lost = 0;

	et_path(path, sizeof(path), "flush-create");
	et_opts(&o, path);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	for (int round = 0; round < 40; round++) {
		char name[16];

		memset(&spec, 0, sizeof(spec));
		spec.record = true;
		uring_fault_set_next(&spec);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		cr_assert_eq(coil_obj_open(s, "bg", COIL_CREATE, &bg), 0);
		atomic_store(&stop, false);
		cr_assert_eq(pthread_create(&t, NULL, bg_writer, bg), 0);
		usleep(2000);
		snprintf(name, sizeof(name), "made%d", round);
		cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
		cr_assert_eq(coil_sync(s), 0);
		cr_assert_eq(uring_fault_cut(uring_fault_last(),
					     URING_CUT_DROP_ALL, 1), 0);
		atomic_store(&stop, true);
		pthread_join(t, NULL);
		cr_assert_eq(coil_obj_close(h), 0);
		cr_assert_eq(coil_obj_close(bg), 0);
		coil_close(s); /* fails: the power is off */
		uring_fault_set_next(NULL);
		cr_assert_eq(coil_open(path, &o, &s), 0);
		if (coil_obj_open(s, name, 0, &h) == 0)
			cr_assert_eq(coil_obj_close(h), 0);
		else
			lost++;
		cr_assert_eq(coil_close(s), 0);
	}
	cr_expect_eq(lost, 0, "%d of 40 flushed creates lost", lost);
}
