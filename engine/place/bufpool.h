/* engine/place/bufpool.h — fixed-size aligned buffers made at open (I/O
 * buffers, decode scratch), chained by size class.  Leaf: calls nothing in
 * engine/. */
#ifndef COIL_ENGINE_BUFPOOL_H
#define COIL_ENGINE_BUFPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct bufpool {
	pthread_mutex_t mu;
	uint8_t *base;
	size_t size;            /* bytes each */
	uint32_t count;
	uint32_t nfree;
	uint8_t **free;
	_Atomic uint64_t misses; /* served by malloc because empty or too big */
	struct bufpool *large;   /* a second size class, tried next */
};


int bufpool_init(struct bufpool *bp, size_t size, uint32_t count);
void bufpool_destroy(struct bufpool *bp);
/* An aligned buffer of at least @len bytes (pool when it fits, else
 * aligned malloc).  NULL on ENOMEM. */
void *bufpool_get(struct bufpool *bp, size_t len);
void bufpool_put(struct bufpool *bp, void *p);

#endif
