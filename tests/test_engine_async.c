/* test_engine_async: the asynchronous API under load — hundreds of writes in
 * flight with every callback counted once, overlapping in-flight writes
 * applied in submission order, submissions from inside callbacks, and many
 * threads on many objects at once. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "tests/engine_test_util.h"


static coil_store *open_store(char *path, size_t len, const char *tag)
{
	return et_open(path, len, tag, NULL);
}

Test(engine_async, hundreds_in_flight, .timeout = 120)
{
	char path[256];
	coil_store *s = open_store(path, sizeof(path), "async-many");
	struct counter c = COUNTER_INIT;
	const int n = 400, sz = 12288;
	uint8_t *data = malloc((size_t)n * sz), *rd = malloc((size_t)n * sz);
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "many", COIL_CREATE, &h), 0);
	et_fill(data, (size_t)n * sz, 5, 1);
	for (int i = 0; i < n; i++) {
		counter_add(&c);
		/* Interleaved order so neighbours are not submitted together. */
		int k = (i * 37) % n;
		cr_assert_eq(coil_write(h, data + (size_t)k * sz, sz,
					(uint64_t)k * sz, count_cb, &c), 0);
	}
	counter_wait(&c);
	cr_assert_eq(c.calls, n);
	cr_assert_eq(c.errors, 0);
	/* Reads in flight too, each its own range. */
	memset(rd, 0, (size_t)n * sz);
	for (int i = 0; i < n; i++) {
		counter_add(&c);
		cr_assert_eq(coil_read(h, rd + (size_t)i * sz, sz, (uint64_t)i * sz,
				       count_cb, &c), 0);
	}
	counter_wait(&c);
	cr_assert_eq(c.calls, 2 * n);
	cr_assert_eq(c.errors, 0);
	cr_assert(memcmp(rd, data, (size_t)n * sz) == 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(data);
	free(rd);
}

Test(engine_async, overlapping_apply_in_submission_order, .timeout = 120)
{
	char path[256];
	coil_store *s = open_store(path, sizeof(path), "async-order");
	struct counter c = COUNTER_INIT;
	const uint32_t region = 1u << 20;
	const int n = 300;
	uint8_t *model = calloc(1, region), *rd = malloc(region);
	uint8_t **bufs = calloc(n, sizeof(*bufs));
	uint64_t x = 77, end = 0, size;
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, "order", COIL_CREATE, &h), 0);
	for (int i = 0; i < n; i++) {
		tu_xorshift(&x);
		uint64_t len = 1 + x % 200000;
		uint64_t off = (x >> 20) % (region - len);
		if (i % 10 == 0) { /* whole-region rewrites now and then */
			off = 0;
			len = region / 2;
		}
		bufs[i] = malloc(len);
		/* Big writes compress well, small ones do not: they finish
		 * encoding in a different order than they were submitted. */
		et_fill(bufs[i], len, (uint64_t)i + 1000, len > 65536);
		memcpy(model + off, bufs[i], len);
		if (off + len > end)
			end = off + len;
		counter_add(&c);
		cr_assert_eq(coil_write(h, bufs[i], len, off, count_cb, &c), 0);
	}
	counter_wait(&c);
	cr_assert_eq(c.errors, 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, end);
	cr_assert_eq(coil_pread(h, rd, region, 0), (int64_t)end);
	cr_assert(memcmp(rd, model, end) == 0, "overlapping writes out of order");
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	for (int i = 0; i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(model);
	free(rd);
}

struct chain {
	coil_obj *h;
	uint8_t *buf;
	atomic_int left;
	atomic_int done;
	atomic_int errors;
};

static void chain_cb(void *arg, int64_t res)
{
	struct chain *ch = arg;
	int k = atomic_fetch_sub(&ch->left, 1) - 1;

	if (res != 4096)
		atomic_fetch_add(&ch->errors, 1);
	if (k > 0) {
		/* Submitting from a callback is allowed (it never blocks). */
		int rc;
		while ((rc = coil_write(ch->h, ch->buf, 4096, (uint64_t)k * 4096,
					chain_cb, ch)) == -EAGAIN)
			;
		if (rc < 0) {
			atomic_fetch_add(&ch->errors, 1);
			atomic_store(&ch->done, 1);
		}
	} else {
		atomic_store(&ch->done, 1);
	}
}

Test(engine_async, submit_from_callback, .timeout = 60)
{
	char path[256];
	coil_store *s = open_store(path, sizeof(path), "async-chain");
	struct chain ch = { 0 };
	uint8_t rd[4096];

	ch.buf = malloc(4096);
	et_fill(ch.buf, 4096, 9, 0);
	atomic_store(&ch.left, 200);
	cr_assert_eq(coil_obj_open(s, "chain", COIL_CREATE, &ch.h), 0);
	cr_assert_eq(coil_write(ch.h, ch.buf, 4096, 200 * 4096, chain_cb, &ch), 0);
	while (!atomic_load(&ch.done))
		usleep(1000);
	cr_assert_eq(atomic_load(&ch.errors), 0);
	for (int k = 1; k <= 200; k++) {
		cr_assert_eq(coil_pread(ch.h, rd, 4096, (uint64_t)k * 4096), 4096);
		cr_assert(memcmp(rd, ch.buf, 4096) == 0);
	}
	/* The synchronous API refuses coil threads instead of deadlocking:
	 * checked indirectly — it works from this thread. */
	cr_assert_eq(coil_sync(s), 0);
	coil_obj_close(ch.h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(ch.buf);
}

struct thr {
	coil_store *s;
	int id;
	int errors;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	char name[32];
	coil_obj *h;
	uint8_t *buf = malloc(65536 * 2), *rd = malloc(65536 * 2);

	snprintf(name, sizeof(name), "thread-%d", t->id);
	if (coil_obj_open(t->s, name, COIL_CREATE, &h) < 0) {
		t->errors++;
		return NULL;
	}
	for (int i = 0; i < 60; i++) {
		uint64_t off = (uint64_t)((i * 7) % 16) * 40000;
		size_t len = 1000 + (size_t)((i * 7919) % 120000);
		et_fill(buf, len, (uint64_t)(t->id * 1000 + i), i % 2);
		if (coil_pwrite(h, buf, len, off) != (int64_t)len)
			t->errors++;
		if (coil_pread(h, rd, len, off) != (int64_t)len ||
		    memcmp(rd, buf, len))
			t->errors++; /* read-your-writes */
		if (i % 20 == 19 && coil_sync(t->s) < 0)
			t->errors++;
	}
	coil_obj_close(h);
	free(buf);
	free(rd);
	return NULL;
}

Test(engine_async, threads_on_objects, .timeout = 120)
{
	char path[256];
	coil_store *s = open_store(path, sizeof(path), "async-threads");
	pthread_t th[8];
	struct thr t[8];

	for (int i = 0; i < 8; i++) {
		t[i].s = s;
		t[i].id = i;
		t[i].errors = 0;
		pthread_create(&th[i], NULL, thr_main, &t[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(t[i].errors, 0, "thread %d", i);
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* Writes whose records span several journal blocks (4 KiB blobs: 128
 * extents a record) are committed in chunks that fly together; they must
 * still complete in submission order, apply in that order (overlaps), and
 * come back the same after a reopen. */
struct ord {
	atomic_int next;        /* completions so far */
	atomic_int bad;         /* completions out of submission order */
	atomic_int errors;
	atomic_int pending;
};

struct ord_arg {
	struct ord *o;
	int idx;
};

static void ord_cb(void *arg, int64_t res)
{
	struct ord_arg *a = arg;
	int at = atomic_fetch_add(&a->o->next, 1);

	if (at != a->idx)
		atomic_fetch_add(&a->o->bad, 1);
	if (res < 0)
		atomic_fetch_add(&a->o->errors, 1);
	atomic_fetch_sub(&a->o->pending, 1);
}

Test(engine_async, pipelined_chunks_complete_and_apply_in_order, .timeout = 120)
{
	char path[256], *js = malloc(1 << 16), *p;
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	const uint32_t region = 8u << 20, len = 512u << 10;
	const int n = 160;
	uint8_t *model = calloc(1, region), *rd = malloc(region);
	uint8_t *bufs = malloc((size_t)n * len);
	struct ord ord = { 0 };
	struct ord_arg *args = calloc(n, sizeof(*args));
	uint64_t x = 99, overlapped, end = 0;

	et_path(path, sizeof(path), "async-pipelined");
	et_opts(&o, path);
	o.size = 128ull << 20;
	o.compression = "none";
	o.max_blob = 4096;
	/* A chunk reaches the page cache in microseconds: with an
	 * fdatasync per cycle, cycles stay in flight long enough for the
	 * next ones to start beside them. */
	o.sync_writes = 1;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "p", COIL_CREATE, &h), 0);
	for (int i = 0; i < n; i++) {
		uint64_t off;

		tu_xorshift(&x);
		off = (x % ((region - len) / 4096)) * 4096;
		et_fill(bufs + (size_t)i * len, len, (uint64_t)i + 7, 0);
		memcpy(model + off, bufs + (size_t)i * len, len);
		end = off + len > end ? off + len : end;
		args[i].o = &ord;
		args[i].idx = i;
		atomic_fetch_add(&ord.pending, 1);
		cr_assert_eq(coil_write(h, bufs + (size_t)i * len, len, off,
					ord_cb, &args[i]), 0);
	}
	while (atomic_load(&ord.pending))
		usleep(200);
	cr_assert_eq(atomic_load(&ord.errors), 0);
	cr_assert_eq(atomic_load(&ord.bad), 0, "completions out of order");
	cr_assert(coil_stats_json(s, js, 1 << 16) > 0);
	p = strstr(js, "\"chunks_overlapped\":");
	cr_assert_not_null(p);
	overlapped = strtoull(p + strlen("\"chunks_overlapped\":"), NULL, 10);
	cr_log_info("chunks written while another was in flight: %lu",
		    (unsigned long)overlapped);
	cr_assert_gt(overlapped, 0, "the test did not pipeline any chunk");
	memset(rd, 0, region);
	cr_assert_eq(coil_pread(h, rd, region, 0), (int64_t)end);
	cr_assert(memcmp(rd, model, end) == 0);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "p", 0, &h), 0);
	memset(rd, 0, region);
	cr_assert_eq(coil_pread(h, rd, region, 0), (int64_t)end);
	cr_assert(memcmp(rd, model, end) == 0, "after reopen");
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(js);
	free(model);
	free(rd);
	free(bufs);
	free(args);
}

/* The stats text while other threads move its counters: coil_stats_json_dup
 * returns it whole every time (a buffer sized by one call and filled by the
 * next would be cut short when a counter gains a digit in between). */
struct stats_writer {
	coil_store *s;
	atomic_bool stop;
};

static void *stats_writer_main(void *arg)
{
	struct stats_writer *w = arg;
	uint8_t page[4096];
	coil_obj *h;
	uint64_t i = 0;

	if (coil_obj_open(w->s, "moving", COIL_CREATE, &h) != 0)
		return (void *)1;
	while (!atomic_load(&w->stop)) {
		memset(page, (int)i, sizeof(page));
		if (coil_pwrite(h, page, sizeof(page), (i % 256) * 4096) != 4096)
			break;
		if (++i % 32 == 0 && coil_sync(w->s) != 0)
			break;
	}
	coil_obj_close(h);
	return NULL;
}

/* Braces and brackets of @js balance outside strings, and close last. */
static bool json_whole(const char *js, size_t n)
{
	int depth = 0;
	bool str = false;

	for (size_t i = 0; i < n; i++) {
		char c = js[i];

		if (str) {
			if (c == '\\' && i + 1 < n)
				i++;
			else if (c == '"')
				str = false;
		} else if (c == '"') {
			str = true;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			if (--depth == 0 && i != n - 1)
				return false;
		}
	}
	return depth == 0 && !str && n > 0 && js[n - 1] == '}';
}

Test(engine_async, stats_text_whole_while_writing, .timeout = 120)
{
	char path[256];
	struct stats_writer w = { .s = open_store(path, sizeof(path),
						  "async-stats") };
	pthread_t th;
	void *ret;

	cr_assert_eq(pthread_create(&th, NULL, stats_writer_main, &w), 0);
	for (int k = 0; k < 300; k++) {
		char *js;
		int n = coil_stats_json_dup(w.s, 0, &js);

		cr_assert_gt(n, 100, "coil_stats_json_dup: %d", n);
		cr_assert_eq(strlen(js), (size_t)n);
		cr_assert(json_whole(js, (size_t)n), "call %d: %s", k, js);
		free(js);
	}
	atomic_store(&w.stop, true);
	cr_assert_eq(pthread_join(th, &ret), 0);
	cr_assert_null(ret);
	cr_assert_eq(coil_close(w.s), 0);
	unlink(path);
}
