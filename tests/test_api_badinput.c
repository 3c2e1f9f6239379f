/* test_api_badinput: every public function with NULL, zero, huge and
 * overflowing arguments, closed and removed handles, a missing store and a
 * second open — each gets its negative errno, nothing aborts. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "tests/engine_test_util.h"

static char path[256];
static struct coil_options opts;

static coil_store *mk(const char *tag)
{
	coil_store *s;

	et_path(path, sizeof(path), tag);
	et_opts(&opts, path);
	opts.size = 32ull << 20;
	cr_assert_eq(coil_open(path, &opts, &s), 0);
	opts.flags &= ~COIL_CREATE;
	return s;
}

static void nop_cb(void *arg, int64_t res)
{
	int64_t *r = arg;
	*r = res;
}

Test(api_badinput, open_arguments)
{
	struct coil_options o;
	coil_store *s = (coil_store *)0x1;

	coil_options_init(NULL);
	et_path(path, sizeof(path), "bad-open");
	et_opts(&o, path);
	cr_assert_eq(coil_open(NULL, &o, &s), -EINVAL);
	cr_assert_eq(coil_open(path, &o, NULL), -EINVAL);
	cr_assert_eq(coil_open("", &o, &s), -EINVAL);
	cr_assert_null(s);
	o.compression = "lz4";
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.compression = "zstd:99";
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.compression = "zstd:";
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.compression = "zstd:3";
	o.max_blob = 3000;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.max_blob = 2u << 20;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.max_blob = 65536;
	o.flags |= 0x100;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.flags = COIL_CREATE | COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.flags = COIL_CREATE;
	o.pool_mode = 7;
	cr_assert_eq(coil_open(path, &o, &s), -EINVAL);
	o.pool_mode = COIL_POOL_FAIR;
	o.flags = 0;
	cr_assert_eq(coil_open(path, &o, &s), -ENOENT);
	o.flags = COIL_CREATE;
	o.size = 4096;
	cr_assert_eq(coil_open(path, &o, &s), -ENOSPC);
	cr_assert_eq(access(path, F_OK), -1, "a failed create leaves no file");
	mkdir("engine-stores/adir", 0755);
	cr_assert_lt(coil_open("engine-stores/adir", &o, &s), 0);
	cr_assert_eq(coil_open("engine-stores/no/such/dir/x", &o, &s), -ENOENT);
	/* NULL options: all defaults (a 1 GiB store, created sparse). */
	o.size = 1ull << 30;
	et_path(path, sizeof(path), "bad-open-defaults");
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, NULL, &s), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(api_badinput, second_open_busy)
{
	coil_store *s = mk("busy"), *s2 = NULL;
	pid_t pid;
	int st;

	cr_assert_eq(coil_open(path, &opts, &s2), -EBUSY);
	pid = fork();
	if (pid == 0) {
		coil_store *x;
		_exit(coil_open(path, &opts, &x) == -EBUSY ? 0 : 1);
	}
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "another process must get -EBUSY");
	cr_assert_eq(coil_close(s), 0);
	cr_assert_eq(coil_open(path, &opts, &s2), 0);
	cr_assert_eq(coil_close(s2), 0);
	unlink(path);
}

Test(api_badinput, close_rules)
{
	coil_store *s = mk("close");
	coil_obj *h;

	cr_assert_eq(coil_close(NULL), 0);
	cr_assert_eq(coil_obj_close(NULL), 0);
	cr_assert_eq(coil_obj_open(s, "x", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_close(s), -EBUSY);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_obj_close(h), -EBADF);
	cr_assert_eq(coil_close(s), 0);
	/* The closed store is detected, not dereferenced. */
	cr_assert_eq(coil_close(s), -EBADF);
	cr_assert_eq(coil_obj_open(s, "x", 0, &h), -EBADF);
	cr_assert_eq(coil_sync(s), -EBADF);
	cr_assert_eq(coil_obj_remove(s, "x"), -EBADF);
	cr_assert_eq(coil_stats_json(s, NULL, 0), -EBADF);
	unlink(path);
}

Test(api_badinput, object_names_and_flags)
{
	coil_store *s = mk("names");
	char name[300];
	coil_obj *h = (coil_obj *)0x1, *h2;

	cr_assert_eq(coil_obj_open(NULL, "a", 0, &h), -EINVAL);
	cr_assert_eq(coil_obj_open(s, NULL, 0, &h), -EINVAL);
	cr_assert_eq(coil_obj_open(s, "a", 0, NULL), -EINVAL);
	cr_assert_eq(coil_obj_open(s, "", COIL_CREATE, &h), -EINVAL);
	cr_assert_null(h);
	cr_assert_eq(coil_obj_open(s, "a", 0x40, &h), -EINVAL);
	cr_assert_eq(coil_obj_open(s, "a", COIL_EXCL, &h), -EINVAL);
	cr_assert_eq(coil_obj_open(s, "a", 0, &h), -ENOENT);
	memset(name, 'n', sizeof(name));
	name[256] = 0;
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), -ENAMETOOLONG);
	name[255] = 0;
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	/* Any bytes but NUL. */
	const char odd[] = "\xff\x01/../ spaced\t\xc3\xa9";
	cr_assert_eq(coil_obj_open(s, odd, COIL_CREATE | COIL_EXCL, &h), 0);
	cr_assert_eq(coil_obj_open(s, odd, COIL_CREATE | COIL_EXCL, &h2), -EEXIST);
	cr_assert_eq(coil_obj_open(s, odd, COIL_CREATE, &h2), 0);
	cr_assert_eq(coil_pwrite(h, "hi", 2, 0), 2);
	char b[4] = { 0 };
	cr_assert_eq(coil_pread(h2, b, 4, 0), 2, "many handles, one object");
	cr_assert_str_eq(b, "hi");
	coil_obj_close(h);
	coil_obj_close(h2);
	cr_assert_eq(coil_obj_remove(s, NULL), -EINVAL);
	cr_assert_eq(coil_obj_remove(NULL, "a"), -EINVAL);
	cr_assert_eq(coil_obj_remove(s, ""), -EINVAL);
	cr_assert_eq(coil_obj_remove(s, "missing"), -ENOENT);
	cr_assert_eq(coil_obj_remove(s, name), 0);
	cr_assert_eq(coil_obj_remove(s, name), -ENOENT);
	cr_assert_eq(coil_close(s), 0);
	/* The odd name survives a reopen. */
	cr_assert_eq(coil_open(path, &opts, &s), 0);
	cr_assert_eq(coil_obj_open(s, odd, 0, &h), 0);
	cr_assert_eq(coil_obj_open(s, name, 0, &h2), -ENOENT);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(api_badinput, io_arguments)
{
	coil_store *s = mk("io");
	coil_obj *h;
	uint8_t buf[8192] = { 1 };
	struct coil_obj_info info;
	uint64_t size;
	int64_t r = 12345;
	char *stats;
	int n;

	cr_assert_eq(coil_obj_open(s, "io", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_write(NULL, buf, 1, 0, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_write(h, NULL, 1, 0, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_write(h, buf, 2, UINT64_MAX, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_write(h, buf, 1, UINT64_MAX / 2, nop_cb, &r), -EFBIG);
	cr_assert_eq(coil_write(h, buf, SIZE_MAX, 0, nop_cb, &r), -EFBIG);
	cr_assert_eq(coil_write(h, buf, (64u << 20), 0, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_pwrite(h, NULL, 0, 0), 0, "zero-length write");
	cr_assert_eq(coil_pwrite(h, buf, 0, 1000), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, 0, "a zero-length write does not grow the object");
	cr_assert_eq(coil_read(NULL, buf, 1, 0, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_read(h, NULL, 1, 0, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_read(h, buf, 2, UINT64_MAX, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_pread(h, buf, sizeof(buf), UINT64_MAX - 10), -EINVAL);
	cr_assert_eq(coil_pread(h, buf, sizeof(buf), UINT64_MAX - 10000), 0);
	cr_assert_eq(coil_pwrite(h, buf, 100, 50), 100);
	/* A huge length is clipped like pread(2): short, then 0. */
	cr_assert_eq(coil_pread(h, buf, SIZE_MAX / 2, 0), 150);
	cr_assert_eq(coil_pread(h, buf, 10, 150), 0);
	cr_assert_eq(coil_pread(h, buf, 10, 145), 5);
	cr_assert_eq(coil_obj_size(NULL, &size), -EINVAL);
	cr_assert_eq(coil_obj_size(h, NULL), -EINVAL);
	cr_assert_eq(coil_obj_stat(NULL, &info), -EINVAL);
	cr_assert_eq(coil_obj_stat(h, NULL), -EINVAL);
	/* 100 bytes after a 50-byte hole: 150 long, 100 mapped, not more
	 * stored than mapped. */
	cr_assert_eq(coil_obj_stat(h, &info), 0);
	cr_assert_eq(info.size, 150);
	cr_assert_eq(info.mapped, 100);
	cr_assert(info.stored > 0 && info.stored <= 100, "stored %llu",
		  (unsigned long long)info.stored);
	cr_assert_eq(coil_obj_truncate(NULL, 0), -EINVAL);
	cr_assert_eq(coil_obj_truncate(h, UINT64_MAX), -EFBIG);
	cr_assert_eq(coil_obj_truncate(h, 1u << 30), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, 1u << 30);
	cr_assert_eq(coil_pread(h, buf, 10, (1u << 30) - 5), 5);
	cr_assert_eq(buf[0], 0, "growing truncate reads as zeros");
	cr_assert_eq(coil_flush(NULL, nop_cb, &r), -EINVAL);
	cr_assert_eq(coil_flush(s, NULL, NULL), -EINVAL);
	cr_assert_eq(coil_sync(NULL), -EINVAL);
	cr_assert_eq(coil_prefetch(NULL, 0, 1), -EINVAL);
	cr_assert_eq(coil_prefetch(h, UINT64_MAX, 2), -EINVAL);
	cr_assert_eq(coil_prefetch(h, 0, 1u << 20), 0);
	cr_assert_eq(coil_stats_json(NULL, (char *)buf, 10), -EINVAL);
	cr_assert_eq(coil_stats_json(s, NULL, 10), -EINVAL);
	n = coil_stats_json(s, NULL, 0);
	cr_assert_gt(n, 100);
	stats = malloc((size_t)n + 1);
	cr_assert_eq(coil_stats_json(s, stats, (size_t)n + 1), n);
	cr_assert_eq(stats[0], '{');
	cr_assert_eq(stats[n - 1], '}');
	cr_assert_eq(coil_stats_json(s, stats, 5), n);
	cr_assert_eq(strlen(stats), 4, "truncated and NUL-terminated");
	free(stats);
	stats = (char *)buf;
	cr_assert_eq(coil_stats_json_dup(s, 0, NULL), -EINVAL);
	cr_assert_eq(coil_stats_json_dup(NULL, 0, &stats), -EINVAL);
	cr_assert_null(stats, "*out is NULL on failure");
	stats = (char *)buf;
	cr_assert_eq(coil_stats_json_dup(s, 0x80u, &stats), -EINVAL);
	cr_assert_null(stats);
	n = coil_stats_json_dup(s, 0, &stats);
	cr_assert_gt(n, 100);
	cr_assert_eq(strlen(stats), (size_t)n);
	cr_assert_eq(stats[0], '{');
	cr_assert_eq(stats[n - 1], '}');
	free(stats);
	cr_assert_eq(coil_obj_list(s, NULL, NULL), -EINVAL);
	cr_assert_not_null(coil_strerror(0));
	cr_assert_not_null(coil_strerror(-EIO));
	cr_assert_not_null(coil_strerror(12345678));
	cr_assert_str_eq(coil_strerror(INT32_MIN), "unknown error");
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(api_badinput, removed_and_closed_handles)
{
	coil_store *s = mk("removed");
	coil_obj *h, *h2;
	uint8_t buf[16] = { 0 };
	struct coil_obj_info info;
	uint64_t size;
	int64_t r;

	cr_assert_eq(coil_obj_open(s, "gone", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, 16, 0), 16);
	cr_assert_eq(coil_obj_remove(s, "gone"), 0);
	cr_assert_eq(coil_pwrite(h, buf, 16, 0), -EBADF);
	cr_assert_eq(coil_pread(h, buf, 16, 0), -EBADF);
	cr_assert_eq(coil_obj_size(h, &size), -EBADF);
	cr_assert_eq(coil_obj_stat(h, &info), -EBADF);
	cr_assert_eq(coil_obj_truncate(h, 0), -EBADF);
	cr_assert_eq(coil_prefetch(h, 0, 1), -EBADF);
	cr_assert_eq(coil_obj_close(h), 0);
	/* The name is free again, with fresh contents. */
	cr_assert_eq(coil_obj_open(s, "gone", COIL_CREATE | COIL_EXCL, &h2), 0);
	cr_assert_eq(coil_obj_size(h2, &size), 0);
	cr_assert_eq(size, 0);
	cr_assert_eq(coil_obj_close(h2), 0);
	/* Closed handle: detected while the store is open. */
	cr_assert_eq(coil_write(h2, buf, 1, 0, nop_cb, &r), -EBADF);
	cr_assert_eq(coil_read(h2, buf, 1, 0, nop_cb, &r), -EBADF);
	cr_assert_eq(coil_obj_size(h2, &size), -EBADF);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(api_badinput, read_only_store)
{
	coil_store *s = mk("rdonly");
	struct coil_options o;
	coil_obj *h;
	uint8_t buf[4] = { 1, 2, 3, 4 };
	int64_t r;

	cr_assert_eq(coil_obj_open(s, "x", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, buf, 4, 0), 4);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	o = opts;
	o.flags |= COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "y", COIL_CREATE, &h), -EROFS);
	cr_assert_eq(coil_obj_open(s, "x", 0, &h), 0);
	cr_assert_eq(coil_write(h, buf, 4, 0, nop_cb, &r), -EROFS);
	cr_assert_eq(coil_obj_truncate(h, 0), -EROFS);
	cr_assert_eq(coil_obj_remove(s, "x"), -EROFS);
	cr_assert_eq(coil_flush(s, nop_cb, &r), -EROFS);
	cr_assert_eq(coil_pread(h, buf, 4, 0), 4);
	cr_assert_eq(buf[3], 4);
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* A handle closed while other threads still call through it: each call
 * either completes or returns -EBADF, never touches a freed stream or a
 * dropped object, and the close waits for the calls that got in. */
struct hammer {
	coil_obj *h;
	atomic_bool stop;
	unsigned ok, badf, other;
};

static void *hammer_main(void *arg)
{
	struct hammer *hm = arg;
	uint8_t buf[4096];
	uint64_t size;

	while (!atomic_load(&hm->stop)) {
		int64_t r[4];

		r[0] = coil_pread(hm->h, buf, sizeof(buf), 8192);
		r[1] = coil_prefetch(hm->h, 0, 65536);
		r[2] = coil_obj_size(hm->h, &size);
		r[3] = coil_pwrite(hm->h, buf, 512, 100);
		for (int i = 0; i < 4; i++) {
			if (r[i] >= 0)
				hm->ok++;
			else if (r[i] == -EBADF)
				hm->badf++;
			else
				hm->other++;
		}
	}
	return NULL;
}

Test(api_badinput, close_racing_calls_on_the_handle, .timeout = 120)
{
	coil_store *s = mk("close-race");
	uint8_t data[65536];
	unsigned ok = 0, badf = 0;

	memset(data, 0x5a, sizeof(data));
	for (int round = 0; round < 200; round++) {
		struct hammer hm[2] = { 0 };
		pthread_t t[2];
		coil_obj *h;

		cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, &h), 0);
		if (round == 0)
			cr_assert_eq(coil_pwrite(h, data, sizeof(data), 0),
				     (int64_t)sizeof(data));
		for (int i = 0; i < 2; i++) {
			hm[i].h = h;
			cr_assert_eq(pthread_create(&t[i], NULL, hammer_main,
						    &hm[i]), 0);
		}
		usleep(round % 7 * 100);
		cr_assert_eq(coil_obj_close(h), 0);
		for (int i = 0; i < 2; i++) {
			atomic_store(&hm[i].stop, true);
			pthread_join(t[i], NULL);
			cr_assert_eq(hm[i].other, 0, "a call failed otherwise");
			ok += hm[i].ok;
			badf += hm[i].badf;
		}
	}
	/* both outcomes happened: the race was really run */
	cr_assert_gt(ok, 0);
	cr_assert_gt(badf, 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

/* A closed handle's memory is reused by the next open.  Calls through the
 * stale pointer meanwhile count themselves in the reused handle; reopening
 * must not wipe that count, or a close of the new handle would not wait for
 * them and they would find its object gone. */
struct stale {
	coil_obj *h;
	atomic_bool stop;
	unsigned other;
};

static void *stale_main(void *arg)
{
	struct stale *st = arg;
	uint64_t size;

	while (!atomic_load(&st->stop)) {
		int rc = coil_obj_size(st->h, &size);

		if (rc != -EBADF) /* never the reopened handle's object */
			st->other++;
	}
	return NULL;
}

Test(api_badinput, stale_handle_calls_while_its_memory_is_reused,
     .timeout = 120)
{
	coil_store *s = mk("stale-reuse");
	struct stale st[2] = { 0 };
	pthread_t t[2];
	coil_obj *h, *stale;

	cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, &stale), 0);
	cr_assert_eq(coil_obj_close(stale), 0);
	for (int i = 0; i < 2; i++) {
		st[i].h = stale;
		cr_assert_eq(pthread_create(&t[i], NULL, stale_main, &st[i]), 0);
	}
	for (int i = 0; i < 100000; i++) {
		cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
		/* the one free slot, reused under a handle of its own */
		cr_assert_neq(h, stale);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	for (int i = 0; i < 2; i++) {
		atomic_store(&st[i].stop, true);
		pthread_join(t[i], NULL);
		cr_assert_eq(st[i].other, 0);
	}
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
