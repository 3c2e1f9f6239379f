/* test_api_errors: every return code include/coil.h documents has a name of
 * its own in coil_strerror (the header is read as it is, so a code added to
 * the documentation without a name fails here). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"

#ifndef COIL_HEADER
#error "COIL_HEADER: the path of include/coil.h"
#endif

#define E(x) { #x, x }
static const struct { const char *name; int code; } known[] = {
	E(EINVAL), E(ENOENT), E(EEXIST), E(EIO), E(ENOSPC), E(EBADF),
	E(EROFS), E(EBUSY), E(ENOMEM), E(EFBIG), E(ENAMETOOLONG), E(EAGAIN),
	E(EACCES), E(EPERM), E(ENOTDIR), E(EISDIR), E(ENODEV), E(ESHUTDOWN),
	E(EOVERFLOW), E(ENOTSUP), E(EDEADLK), E(EMFILE), E(ENFILE), E(ENOLCK),
	E(ENXIO), E(ELOOP), E(ETXTBSY), E(EINTR), E(ETIMEDOUT), E(EUCLEAN),
	E(ESTALE), E(ENOTTY), E(ENOBUFS), E(EFAULT), E(EMEDIUMTYPE),
	E(EALREADY),
	E(EPROTONOSUPPORT),
};

static int code_of(const char *name)
{
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(known[i].name, name) == 0)
			return known[i].code;
	return 0;
}

/* Every distinct "-Exxx" in the header. */
static size_t documented(char names[][32], size_t max)
{
	FILE *f = fopen(COIL_HEADER, "r");
	size_t n = 0;
	int c, prev = 0;

	cr_assert_not_null(f, "open %s", COIL_HEADER);
	while ((c = fgetc(f)) != EOF) {
		char w[32];
		size_t k = 0;
		bool dup = false;

		if (!(prev == '-' && c == 'E')) {
			prev = c;
			continue;
		}
		w[k++] = 'E';
		while ((c = fgetc(f)) != EOF && isupper(c) && k < sizeof(w) - 1)
			w[k++] = (char)c;
		w[k] = 0;
		prev = c;
		if (k < 3)
			continue;
		for (size_t i = 0; i < n; i++)
			dup |= strcmp(names[i], w) == 0;
		if (!dup && n < max)
			strcpy(names[n++], w);
	}
	fclose(f);
	return n;
}

Test(api_errors, every_documented_code_is_named)
{
	char names[64][32];
	size_t n = documented(names, 64);

	cr_assert_geq(n, 15, "found only %zu codes in %s", n, COIL_HEADER);
	for (size_t i = 0; i < n; i++) {
		int code = code_of(names[i]);
		const char *msg;

		cr_assert_neq(code, 0, "coil.h documents -%s: add it to this "
			      "test and to coil_strerror", names[i]);
		msg = coil_strerror(-code);
		cr_assert_not_null(msg);
		cr_expect_str_neq(msg, "unknown error", "-%s has no name",
				  names[i]);
		cr_expect_str_eq(coil_strerror(code), msg, "%s: sign", names[i]);
		for (size_t j = 0; j < i; j++)
			cr_expect_str_neq(msg, coil_strerror(-code_of(names[j])),
					  "-%s and -%s share a name", names[i],
					  names[j]);
	}
}

Test(api_errors, never_null)
{
	cr_expect_str_eq(coil_strerror(0), "success");
	cr_assert_not_null(coil_strerror(-123456));
	cr_assert_not_null(coil_strerror(123456));
	cr_assert_not_null(coil_strerror(-2147483647));
}
