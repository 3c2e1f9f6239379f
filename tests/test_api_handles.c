/* test_api_handles: a closed handle is -EBADF for every call and never
 * reaches another object, however handles are reopened afterwards — the
 * next open, many opens and closes, another store, after its store closed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "coil.h"
#include "tests/engine_test_util.h"

static char path[256];

static void nop_cb(void *arg, int64_t res)
{
	(void)arg;
	(void)res;
}

/* Every call through @h, which was closed: -EBADF, nothing written. */
static void expect_stale(coil_obj *h)
{
	char buf[4096];
	uint64_t size;

	memset(buf, 'X', sizeof(buf));
	cr_expect_eq(coil_pwrite(h, buf, sizeof(buf), 0), -EBADF);
	cr_expect_eq(coil_write(h, buf, sizeof(buf), 0, nop_cb, NULL), -EBADF);
	cr_expect_eq(coil_pread(h, buf, sizeof(buf), 0), -EBADF);
	cr_expect_eq(coil_read(h, buf, sizeof(buf), 0, nop_cb, NULL), -EBADF);
	cr_expect_eq(coil_obj_size(h, &size), -EBADF);
	cr_expect_eq(coil_obj_truncate(h, 1), -EBADF);
	cr_expect_eq(coil_prefetch(h, 0, 4096), -EBADF);
	cr_expect_eq(coil_obj_close(h), -EBADF);
}

/* Object @name holds exactly @n bytes of @c. */
static void expect_content(coil_store *s, const char *name, char c, size_t n)
{
	char buf[8192];
	coil_obj *h;
	uint64_t size;

	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_expect_eq(size, n, "%s: size %llu", name, (unsigned long long)size);
	cr_assert_leq(n, sizeof(buf));
	cr_expect_eq(coil_pread(h, buf, sizeof(buf), 0), (int64_t)n);
	for (size_t i = 0; i < n; i++)
		if (buf[i] != c) {
			cr_expect_fail("%s: byte %zu is %d", name, i, buf[i]);
			break;
		}
	cr_assert_eq(coil_obj_close(h), 0);
}

static void write_obj(coil_store *s, const char *name, char c, coil_obj **out)
{
	char buf[4096];

	memset(buf, c, sizeof(buf));
	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, out), 0);
	cr_assert_eq(coil_pwrite(*out, buf, sizeof(buf), 0), 4096);
}

Test(api_handles, next_open_does_not_revive_closed)
{
	coil_store *s = et_open(path, sizeof(path), "handles-next", NULL);
	coil_obj *a, *b;

	write_obj(s, "a", 'a', &a);
	cr_assert_eq(coil_obj_close(a), 0);
	write_obj(s, "b", 'b', &b);
	expect_stale(a);
	cr_assert_eq(coil_obj_close(b), 0);
	expect_content(s, "a", 'a', 4096);
	expect_content(s, "b", 'b', 4096);
	cr_assert_eq(coil_close(s), 0);
}

Test(api_handles, many_reopens)
{
	coil_store *s = et_open(path, sizeof(path), "handles-many", NULL);
	coil_obj *first, *h[8];
	char name[32];

	write_obj(s, "first", 'f', &first);
	cr_assert_eq(coil_obj_close(first), 0);
	/* open and close in every pattern a free list could recycle in */
	for (int round = 0; round < 200; round++) {
		int n = 1 + round % 8;

		for (int i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "o%d", i);
			cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h[i]),
				     0);
			cr_assert_neq(h[i], first);
		}
		for (int i = round % 2 ? 0 : n - 1; i >= 0 && i < n;
		     i += round % 2 ? 1 : -1)
			cr_assert_eq(coil_obj_close(h[i]), 0);
		expect_stale(first);
	}
	/* the last round's handles are closed too */
	expect_stale(h[0]);
	expect_content(s, "first", 'f', 4096);
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "o%d", i);
		expect_content(s, name, 0, 0);
	}
	cr_assert_eq(coil_close(s), 0);
}

Test(api_handles, after_store_close)
{
	char path2[256];
	coil_store *s = et_open(path, sizeof(path), "handles-st1", NULL), *t;
	coil_obj *a, *b;

	write_obj(s, "a", 'a', &a);
	cr_assert_eq(coil_obj_close(a), 0);
	cr_assert_eq(coil_close(s), 0);
	/* a new store and a new handle, perhaps where the old ones were */
	t = et_open(path2, sizeof(path2), "handles-st2", NULL);
	write_obj(t, "b", 'b', &b);
	expect_stale(a);
	cr_assert_eq(coil_obj_close(b), 0);
	expect_content(t, "b", 'b', 4096);
	cr_assert_eq(coil_close(t), 0);
}

Test(api_handles, not_a_handle)
{
	coil_store *s = et_open(path, sizeof(path), "handles-garbage", NULL);
	uint64_t junk[64];

	memset(junk, 0x5a, sizeof(junk));
	expect_stale((coil_obj *)junk);
	expect_stale((coil_obj *)(uintptr_t)0x1000);
	cr_assert_eq(coil_close(s), 0);
}
