/* tests/test_util.h — the deterministic generator and the run-length scale
 * every test shares (tests/rel/rel.c and the criterion suites alike). */
#ifndef COIL_TEST_UTIL_H
#define COIL_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64: reproducible "random" data and choices from a seed.  @x must
 * not be 0 (it would stay 0). */
static inline uint64_t tu_xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* COIL_REL_SCALE (default 1; unset, empty, 0 or negative mean 1): long runs
 * are made shorter or longer with it without editing the tests. */
static inline double tu_scale(void)
{
	const char *e = getenv("COIL_REL_SCALE");
	double v;

	if (!e || !*e)
		return 1.0;
	v = strtod(e, NULL);
	return v > 0 ? v : 1.0;
}

/* @base scaled by tu_scale(), rounded, and never below @min. */
static inline uint64_t tu_scaled(uint64_t base, uint64_t min)
{
	uint64_t n = (uint64_t)((double)base * tu_scale() + 0.5);

	return n < min ? min : n;
}

/* Text that zstd level 1 leaves room on (the optimizer's tests): words
 * from a small vocabulary with numbers in between, like source code or
 * logs, from the xorshift state @x (not 0). */
static inline void tu_text_fill(uint8_t *p, size_t n, uint64_t x)
{
	static const char *w[] = { "struct", "return", "static", "const",
				   "uint64_t", "if", "for", "while", "buf",
				   "len", "coil_store", "(", ")", "{", "}",
				   ";", "=", "->", "int", "rc", "\n\t",
				   "\n", "/* ", " */", "0x", "NULL" };
	size_t i = 0;

	while (i < n) {
		const char *t;
		char num[24];
		size_t k;

		tu_xorshift(&x);
		if (x % 7 == 0) {
			snprintf(num, sizeof(num), "%llu ",
				 (unsigned long long)(x >> 40) % 100000);
			t = num;
		} else {
			t = w[(x >> 8) % (sizeof(w) / sizeof(w[0]))];
		}
		k = strlen(t);
		for (size_t j = 0; j < k && i < n; j++)
			p[i++] = (uint8_t)t[j];
		if (i < n && x % 3)
			p[i++] = ' ';
	}
}

#endif
