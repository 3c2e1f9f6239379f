/* cache/cache_value.c — value buffers, and the stash that keeps freed ones
 * mapped for the next allocation.
 *
 * A cold scan turns values over fast: readahead decodes a blob into a fresh
 * value, the reader copies it out, the entry is dropped (use-once) or
 * evicted, and the next blob wants a value of the same length.  The C
 * library's allocator gives large freed chunks back to the kernel (heap
 * trimming, arena shrinking), so each new value is first touched page by
 * page, and every first touch is a page fault and a page of zeroes.  On the
 * virtual machines this runs on a fault costs microseconds, and a 64 KiB
 * value's 16 faults cost more CPU than decoding it.
 *
 * The stash keeps a bounded number of freed buffers, LIFO per length
 * class, so the next value of that class reuses pages that are already
 * mapped and warm in the cache.  A class is the buffer's usable size
 * rounded down to the page (malloc_usable_size), so a buffer is only handed
 * out for a length it really holds.  Only page-multiple sizes up to
 * STASH_LEN_MAX are kept; anything else goes straight to free().  The stash
 * is process-wide, like the allocator it sits in front of, and holds at
 * most STASH_BYTES; what it holds is outside every cache's budget.
 */
#include "cache/cache.h"
#include "common/common.h"

#include <malloc.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* Under AddressSanitizer a stashed buffer is poisoned until it is handed
 * out again, so a use after cache_free_value is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#define STASH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STASH_ASAN 1
#endif
#endif
#ifdef STASH_ASAN
#include <sanitizer/asan_interface.h>
#define STASH_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define STASH_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define STASH_POISON(p, n) ((void)(p), (void)(n))
#define STASH_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define PAGE 4096u
#define STASH_CLASSES 4u
#define STASH_DEPTH 64u
#define STASH_BYTES (8u << 20)
#define STASH_LEN_MAX (1u << 20)

struct stash_class {
	uint32_t len;   /* 0 = unused */
	uint32_t n;
	void *v[STASH_DEPTH];
};

static struct {
	pthread_mutex_t mu;
	uint64_t bytes;
	struct stash_class cls[STASH_CLASSES];
	uint64_t reused, kept, dropped;
} stash = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void *stash_pop(uint32_t len)
{
	void *p = NULL;

	pthread_mutex_lock(&stash.mu);
	for (unsigned i = 0; i < STASH_CLASSES; i++) {
		struct stash_class *c = &stash.cls[i];

		if (c->len == len && c->n) {
			p = c->v[--c->n];
			STASH_UNPOISON(p, len);
			stash.bytes -= len;
			stash.reused++;
			break;
		}
	}
	pthread_mutex_unlock(&stash.mu);
	return p;
}

/* @return true if the stash took @p (class @len). */
static bool stash_push(void *p, uint32_t len)
{
	struct stash_class *c = NULL, *empty = NULL;
	bool took = false;

	pthread_mutex_lock(&stash.mu);
	for (unsigned i = 0; i < STASH_CLASSES; i++) {
		if (stash.cls[i].len == len)
			c = &stash.cls[i];
		else if (!empty && stash.cls[i].n == 0)
			empty = &stash.cls[i];
	}
	/* A class that ran dry is given to the new length: the stash follows
	 * the store's current blob sizes. */
	if (!c && empty) {
		c = empty;
		c->len = len;
	}
	if (c && c->n < STASH_DEPTH && stash.bytes + len <= STASH_BYTES) {
		STASH_POISON(p, len);
		c->v[c->n++] = p;
		stash.bytes += len;
		stash.kept++;
		took = true;
	} else {
		stash.dropped++;
	}
	pthread_mutex_unlock(&stash.mu);
	return took;
}

void *cache_alloc_value(size_t len)
{
	void *p = NULL;

	if (len == 0 || len > UINT32_MAX)
		return NULL;
	if (len < PAGE)
		return malloc(len);
	if (len <= STASH_LEN_MAX) {
		p = stash_pop((uint32_t)COIL_ALIGN_UP(len, PAGE));
		if (p)
			return p;
	}
	if (posix_memalign(&p, PAGE, COIL_ALIGN_UP(len, PAGE)))
		return NULL;
	return p;
}

void cache_free_value(void *buf)
{
	size_t usable;

	if (!buf)
		return;
	usable = malloc_usable_size(buf) & ~(size_t)(PAGE - 1);
	/* Page-aligned buffers only (cache_alloc_value's large ones): a
	 * small value from malloc may also be a page long. */
	if (usable >= PAGE && usable <= STASH_LEN_MAX &&
	    ((uintptr_t)buf & (PAGE - 1)) == 0 &&
	    stash_push(buf, (uint32_t)usable))
		return;
	free(buf);
}

void cache_value_stash_stats(struct cache_value_stats *st)
{
	pthread_mutex_lock(&stash.mu);
	st->bytes = stash.bytes;
	st->reused = stash.reused;
	st->kept = stash.kept;
	st->dropped = stash.dropped;
	pthread_mutex_unlock(&stash.mu);
}

void cache_value_stash_trim(void)
{
	pthread_mutex_lock(&stash.mu);
	for (unsigned i = 0; i < STASH_CLASSES; i++) {
		struct stash_class *c = &stash.cls[i];

		while (c->n) {
			void *p = c->v[--c->n];

			STASH_UNPOISON(p, c->len);
			free(p);
		}
		c->len = 0;
	}
	stash.bytes = 0;
	pthread_mutex_unlock(&stash.mu);
}

/* Give the stash back when the library is unloaded (dlclose, exit), so a
 * leak checker sees every buffer freed. */
__attribute__((destructor)) static void stash_fini(void)
{
	cache_value_stash_trim();
}
