/* tests/rel/standalone.h — just enough of criterion's surface to build one
 * reliability test as a plain program (-DREL_STANDALONE).  Criterion's
 * runner does not start under ThreadSanitizer (its inheritable arena), so
 * the TSan build runs the concurrency tests this way.  One Test per file;
 * a failed assertion prints and exits 1. */
#ifndef COIL_TESTS_REL_STANDALONE_H
#define COIL_TESTS_REL_STANDALONE_H

#include <stdio.h>
#include <stdlib.h>

#define Test(suite, name, ...)                                               \
	static void rel_test_##name(void);                                   \
	int main(void)                                                       \
	{                                                                    \
		rel_test_##name();                                           \
		fprintf(stderr, "rel: standalone " #suite "/" #name " ok\n"); \
		return 0;                                                    \
	}                                                                    \
	static void rel_test_##name(void)

#define REL_SA_FAIL(cond_text)                                               \
	do {                                                                 \
		fprintf(stderr, "rel: assertion failed: %s (%s:%d)\n",       \
			cond_text, __FILE__, __LINE__);                      \
		exit(1);                                                     \
	} while (0)
#define cr_assert(c, ...) do { if (!(c)) REL_SA_FAIL(#c); } while (0)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b))
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b))
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b))
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b))
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b))
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b))

#endif
