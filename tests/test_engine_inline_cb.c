/* tests/test_engine_inline_cb.c — COIL_INLINE_CB: a coil_read that needs no
 * device I/O (cache hits, holes, past the end) runs its callback on the
 * caller's thread before coil_read returns; a read that goes to the device,
 * and every read of a store opened without the flag, completes on one of
 * coil's threads, after the call. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
#include "tests/engine_test_util.h"

struct done {
	sem_t sem;
	pthread_t thread;
	_Atomic int64_t res;
	atomic_bool in_call;  /* set by the test while coil_read runs */
	atomic_bool ran_in_call;
};

static void on_done(void *arg, int64_t res)
{
	struct done *d = arg;

	d->thread = pthread_self();
	atomic_store(&d->ran_in_call, atomic_load(&d->in_call));
	atomic_store(&d->res, res);
	sem_post(&d->sem);
}

/* coil_read, then wait; @return whether the callback ran on this thread
 * (inside the call). */
static bool read_and_wait(coil_obj *h, void *buf, size_t len, uint64_t off,
			  int64_t want)
{
	struct done d;
	bool inside;

	memset(&d, 0, sizeof(d));
	sem_init(&d.sem, 0, 0);
	atomic_store(&d.in_call, true);
	cr_assert_eq(coil_read(h, buf, len, off, on_done, &d), 0);
	atomic_store(&d.in_call, false);
	while (sem_wait(&d.sem) < 0 && errno == EINTR)
		;
	cr_assert_eq(atomic_load(&d.res), want);
	/* On this thread means inside the call (after it, this thread only
	 * waits).  A coil thread may also finish a fast device read before
	 * coil_read returns: that is not "inside". */
	inside = pthread_equal(d.thread, pthread_self());
	if (inside)
		cr_assert(atomic_load(&d.ran_in_call));
	sem_destroy(&d.sem);
	return inside;
}

static coil_store *open_store(const char *name, char *path, size_t plen,
			      unsigned extra, uint8_t *src, size_t n)
{
	struct coil_options o;
	coil_store *s;
	coil_obj *h;

	et_path(path, plen, name);
	et_opts(&o, path);
	o.prefetch = 0;      /* only demand reads fill the cache here */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(src, n, 7, 1);
	cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags = (o.flags & ~COIL_CREATE) | extra;
	cr_assert_eq(coil_open(path, &o, &s), 0); /* cold cache */
	return s;
}

static void finish(coil_store *s, coil_obj *h, const char *path, void *src,
		   void *dst)
{
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

Test(engine_inline_cb, cache_hits_complete_inside_the_call)
{
	char path[256];
	size_t n = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	coil_store *s;
	coil_obj *h;

	s = open_store("icb-on", path, sizeof(path), COIL_INLINE_CB, src, n);
	cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
	/* a 16 KiB piece of a compressed 64 KiB blob: a device read, which
	 * decodes the blob into the cache */
	cr_assert_not(read_and_wait(h, dst, 16384, 65536, 16384),
		      "a device read completed inside coil_read");
	cr_assert(memcmp(dst, src + 65536, 16384) == 0);
	/* the rest of that blob: a cache hit, completed inside the call */
	cr_assert(read_and_wait(h, dst, 16384, 65536 + 16384, 16384),
		  "a cache hit did not complete inside coil_read");
	cr_assert(memcmp(dst, src + 65536 + 16384, 16384) == 0);
	/* past the end: nothing to read, inside the call */
	cr_assert(read_and_wait(h, dst, 4096, n + 8192, 0));
	/* a hole: zeros, inside the call */
	cr_assert_eq(coil_obj_truncate(h, n + (1u << 20)), 0);
	memset(dst, 0xff, 8192);
	cr_assert(read_and_wait(h, dst, 8192, n + 65536, 8192));
	for (int i = 0; i < 8192; i++)
		cr_assert_eq(dst[i], 0);
	finish(s, h, path, src, dst);
}

Test(engine_inline_cb, without_the_flag_hits_complete_on_a_coil_thread)
{
	char path[256];
	size_t n = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	coil_store *s;
	coil_obj *h;

	s = open_store("icb-off", path, sizeof(path), 0, src, n);
	cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
	cr_assert_not(read_and_wait(h, dst, 16384, 65536, 16384));
	cr_assert_not(read_and_wait(h, dst, 16384, 65536 + 16384, 16384),
		      "a cache hit completed inside coil_read without the flag");
	cr_assert(memcmp(dst, src + 65536 + 16384, 16384) == 0);
	cr_assert_not(read_and_wait(h, dst, 4096, n + 8192, 0));
	finish(s, h, path, src, dst);
}

Test(engine_inline_cb, unknown_flags_are_still_refused)
{
	char path[256];
	struct coil_options o;
	coil_store *s = NULL;

	et_path(path, sizeof(path), "icb-bad");
	et_opts(&o, path);
	o.flags |= 0x40u;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	cr_assert_null(s);
	unlink(path);
}
