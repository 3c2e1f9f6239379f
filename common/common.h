/* common/common.h — the few helpers every coil module shares: asserts in two
 * tiers, little-endian loads and stores, time, bounds helpers.  Nothing here
 * knows about any module. */
#ifndef COIL_COMMON_H
#define COIL_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdio.h>

#define COIL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define COIL_UNLIKELY(x) __builtin_expect(!!(x), 0)

void coil_assert_fail(const char *expr, const char *file, int line)
	__attribute__((noreturn, cold));

/* COIL_ASSERT stays on in release builds: cheap invariants whose violation
 * means coil's own memory is wrong, where continuing could write bad bytes to
 * disk.  It is never used for bad input from callers or from disk — those get
 * a negative errno. */
#define COIL_ASSERT(x) \
	do { if (COIL_UNLIKELY(!(x))) coil_assert_fail(#x, __FILE__, __LINE__); } while (0)

/* COIL_DASSERT is for expensive invariants, compiled only in debug builds. */
#ifdef COIL_DEBUG
#define COIL_DASSERT(x) COIL_ASSERT(x)
#else
#define COIL_DASSERT(x) ((void)sizeof(!(x)))
#endif

#define COIL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define COIL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define COIL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define COIL_ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))
#define COIL_ALIGN_DOWN(x, a) (((x) / (a)) * (a))

/* Explicit little-endian access: disk bytes are never cast to structs. */
static inline uint16_t coil_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t coil_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static inline uint64_t coil_get_le64(const uint8_t *p)
{
	return (uint64_t)coil_get_le32(p) | (uint64_t)coil_get_le32(p + 4) << 32;
}
static inline void coil_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void coil_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}
static inline void coil_put_le64(uint8_t *p, uint64_t v)
{
	coil_put_le32(p, (uint32_t)v);
	coil_put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Monotonic and per-thread CPU clocks in nanoseconds. */
static inline uint64_t coil_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Name the calling thread "coil-<what><n>" (n < 0: no number), so top -H,
 * perf and gdb tell coil's threads from the application's.  Best effort:
 * Linux keeps 15 characters. */
static inline void coil_thread_name(const char *what, int n)
{
	char name[16];

	if (n >= 0)
		snprintf(name, sizeof(name), "coil-%.5s%u", what,
			 (unsigned)n % 1000u);
	else
		snprintf(name, sizeof(name), "coil-%.10s", what);
	(void)pthread_setname_np(pthread_self(), name);
}

static inline uint64_t coil_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* a + b without wrapping; returns -EOVERFLOW style failure as false. */
static inline int coil_add_overflows(uint64_t a, uint64_t b, uint64_t *sum)
{
	return __builtin_add_overflow(a, b, sum);
}

/* Number of online cores (at least 1). */
unsigned coil_ncpus(void);

/* Memory mapped from the kernel for large buffers that are used now and
 * then (a checkpoint's snapshot and write buffer): freed, its pages go
 * back at once, where the allocator keeps a freed block resident.
 * coil_pages_resize keeps the first min(@old, @len) bytes (*@p NULL: a
 * new mapping); both lengths count from *@p.  @return the mapping or NULL
 * (*@p unchanged). */
void *coil_pages_resize(void *p, size_t old, size_t len);
void coil_pages_free(void *p, size_t len);

/* *@p (an array of @size-byte elements, *@cap of them) holds at least
 * @need, doubling from 64.  @return 0 or -ENOMEM (*@p and *@cap unchanged). */
static inline int coil_grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, n * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

#endif
