/* engine/place/bufpool.c — fixed-size, 4 KiB-aligned buffers made at open.
 *
 * Reads and small writes take their I/O and decode buffers here instead of
 * calling malloc per operation.  A request larger than one buffer (a big
 * write's batch) or one arriving when all are taken falls back to an aligned
 * malloc and is counted in `misses`, so the stats show whether the pool is
 * sized right. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/place/bufpool.h"
#include "engine/store.h"

int bufpool_init(struct bufpool *bp, size_t size, uint32_t count)
{
	memset(bp, 0, sizeof(*bp));
	pthread_mutex_init(&bp->mu, NULL);
	bp->size = COIL_ALIGN_UP(size, 4096);
	bp->count = count;
	if (posix_memalign((void **)&bp->base, 4096, bp->size * count))
		return -ENOMEM;
	bp->free = calloc(count, sizeof(*bp->free));
	if (!bp->free) {
		free(bp->base);
		bp->base = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < count; i++)
		bp->free[i] = bp->base + (size_t)i * bp->size;
	bp->nfree = count;
	return 0;
}

void bufpool_destroy(struct bufpool *bp)
{
	COIL_ASSERT(bp->nfree == bp->count || !bp->base);
	free(bp->base);
	free(bp->free);
	pthread_mutex_destroy(&bp->mu);
	bp->base = NULL;
	bp->free = NULL;
}

static bool owned(const struct bufpool *bp, const void *p)
{
	const uint8_t *q = p;
	return bp->base && q >= bp->base && q < bp->base + bp->size * bp->count;
}

static void *take(struct bufpool *bp, size_t len)
{
	void *p = NULL;

	if (bp->base && len <= bp->size) {
		pthread_mutex_lock(&bp->mu);
		if (bp->nfree)
			p = bp->free[--bp->nfree];
		pthread_mutex_unlock(&bp->mu);
	}
	return p;
}

void *bufpool_get(struct bufpool *bp, size_t len)
{
	void *p = NULL;

	/* Size classes are chained smallest first: take from the first that
	 * fits and has one free. */
	for (struct bufpool *c = bp; c && !p; c = c->large)
		p = take(c, len);
	if (p)
		return p;
	stat_add(&bp->misses, 1);
	if (posix_memalign(&p, 4096, COIL_ALIGN_UP(COIL_MAX(len, 1), 4096)))
		return NULL;
	return p;
}

void bufpool_put(struct bufpool *bp, void *p)
{
	if (!p)
		return;
	if (!owned(bp, p)) {
		if (bp->large)
			bufpool_put(bp->large, p);
		else
			free(p);
		return;
	}
	pthread_mutex_lock(&bp->mu);
	COIL_ASSERT(bp->nfree < bp->count);
	bp->free[bp->nfree++] = p;
	pthread_mutex_unlock(&bp->mu);
}
