/* vfs_cache.c — the VFS's chunk cache; see vfs_cache.h for why. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vfs_cache.h"

#define VCACHE_SLOTS_MAX (1u << 16) /* 4 GiB of chunks */

static uint32_t vc_hash(const struct vcache *c, const void *key, uint64_t off)
{
	uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;

	h ^= (off / VCACHE_CHUNK) * 0xC2B2AE3D27D4EB4Full;
	h ^= h >> 29;
	return (uint32_t)h & (c->nb - 1);
}

int vcache_init(struct vcache *c, uint64_t bytes)
{
	uint64_t n = bytes / VCACHE_CHUNK;
	uint32_t i;

	memset(c, 0, sizeof(*c));
	if (n == 0)
		return 0;
	if (n > VCACHE_SLOTS_MAX)
		n = VCACHE_SLOTS_MAX;
	c->n = (uint32_t)n;
	for (c->nb = 1; c->nb < 2 * c->n; c->nb <<= 1)
		;
	c->slots = calloc(c->n, sizeof(*c->slots));
	c->buckets = malloc(sizeof(*c->buckets) * c->nb);
	c->data = malloc((size_t)c->n * VCACHE_CHUNK);
	if (!c->slots || !c->buckets || !c->data) {
		vcache_fini(c);
		return -ENOMEM;
	}
	for (i = 0; i < c->nb; i++)
		c->buckets[i] = -1;
	return 0;
}

void vcache_fini(struct vcache *c)
{
	free(c->slots);
	free(c->buckets);
	free(c->data);
	memset(c, 0, sizeof(*c));
}

static int32_t vc_find(const struct vcache *c, const void *key, uint64_t off)
{
	int32_t i;

	for (i = c->buckets[vc_hash(c, key, off)]; i >= 0; i = c->slots[i].next)
		if (c->slots[i].key == key && c->slots[i].off == off)
			return i;
	return -1;
}

static void vc_unlink(struct vcache *c, int32_t slot)
{
	struct vc_slot *s = &c->slots[slot];
	int32_t *pp = &c->buckets[vc_hash(c, s->key, s->off)];

	while (*pp >= 0 && *pp != slot)
		pp = &c->slots[*pp].next;
	if (*pp == slot)
		*pp = s->next;
	s->used = 0;
	s->key = NULL;
}

unsigned char *vcache_lookup(struct vcache *c, const void *key, uint64_t off,
			     uint32_t *len)
{
	int32_t i;

	if (!c->n)
		return NULL;
	i = vc_find(c, key, off);
	if (i < 0) {
		c->misses++;
		return NULL;
	}
	c->hits++;
	c->slots[i].ref = 1;
	*len = c->slots[i].len;
	return c->data + (size_t)i * VCACHE_CHUNK;
}

int32_t vcache_fill_begin(struct vcache *c, const void *key, uint64_t off,
			  unsigned char **data)
{
	struct vc_slot *s;
	int32_t i, b;

	if (!c->n)
		return -1;
	i = vc_find(c, key, off);
	if (i >= 0)
		vc_unlink(c, i); /* refilled below: the caller saw it stale */
	/* CLOCK: at most two sweeps, since each pass clears ref bits. */
	for (;;) {
		s = &c->slots[c->hand];
		if (!s->used || !s->ref)
			break;
		s->ref = 0;
		c->hand = (c->hand + 1) % c->n;
	}
	i = (int32_t)c->hand;
	c->hand = (c->hand + 1) % c->n;
	if (s->used)
		vc_unlink(c, i);
	s->key = key;
	s->off = off;
	s->len = 0;
	s->used = 1;
	s->ref = 1;
	b = (int32_t)vc_hash(c, key, off);
	s->next = c->buckets[b];
	c->buckets[b] = i;
	*data = c->data + (size_t)i * VCACHE_CHUNK;
	return i;
}

void vcache_fill_done(struct vcache *c, int32_t slot, uint32_t len)
{
	c->slots[slot].len = len;
}

void vcache_fill_abort(struct vcache *c, int32_t slot)
{
	vc_unlink(c, slot);
}

void vcache_write(struct vcache *c, const void *key, uint64_t off,
		  const unsigned char *buf, size_t len)
{
	uint64_t pos = off, end = off + len;

	if (!c->n)
		return;
	while (pos < end) {
		uint64_t chunk = pos - pos % VCACHE_CHUNK;
		uint32_t a = (uint32_t)(pos - chunk);
		uint32_t b = end - chunk < VCACHE_CHUNK ? (uint32_t)(end - chunk)
							: VCACHE_CHUNK;
		int32_t i = vc_find(c, key, chunk);

		if (i >= 0) {
			struct vc_slot *s = &c->slots[i];
			unsigned char *d = c->data + (size_t)i * VCACHE_CHUNK;

			/* Bytes between the old end and this write were a
			 * hole: zeros, as coil reads them. */
			if (a > s->len)
				memset(d + s->len, 0, a - s->len);
			memcpy(d + a, buf + (pos - off), b - a);
			if (b > s->len)
				s->len = b;
		}
		pos = chunk + b;
	}
}

void vcache_drop(struct vcache *c, const void *key)
{
	uint32_t i;

	for (i = 0; i < c->n; i++)
		if (c->slots[i].used && c->slots[i].key == key)
			vc_unlink(c, (int32_t)i);
}
