/* engine/place/blob.c — refcounted blob descriptors and small shared helpers. */
#include "engine/place/blob.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "format/format.h"

struct blobd *blobd_new(const struct fmt_blob *fb)
{
	struct blobd *b;

	if (fb->n_csums > FMT_CSUMS_MAX)
		return NULL;
	b = malloc(sizeof(*b) + (size_t)fb->n_csums * sizeof(uint64_t));
	if (!b)
		return NULL;
	atomic_init(&b->refs, 1);
	b->codec = fb->codec;
	b->flags = fb->flags;
	b->n_csums = fb->n_csums;
	b->stored_len = fb->stored_len;
	b->logical_len = fb->logical_len;
	b->dict_id = fb->dict_id;
	b->pad_ = 0;
	b->dev_off = fb->dev_off;
	b->mem = NULL;
	memcpy(b->csums, fb->csums, (size_t)fb->n_csums * sizeof(uint64_t));
	return b;
}

void memlist_init(struct memlist *ml)
{
	pthread_mutex_init(&ml->mu, NULL);
	ml->head.prev = ml->head.next = &ml->head;
	atomic_init(&ml->bytes, 0);
	atomic_init(&ml->count, 0);
}

void memlist_destroy(struct memlist *ml)
{
	pthread_mutex_destroy(&ml->mu);
}

struct blobd *blobd_new_mem(const struct fmt_blob *fb, const uint8_t *bytes,
			    struct memlist *ml, uint64_t obj_id,
			    uint64_t obj_off)
{
	struct fmt_blob d = *fb;
	struct memblob *m;
	struct blobd *b;

	d.flags = 0;
	d.dev_off = 0;
	b = blobd_new(&d);
	m = malloc(sizeof(*m) + fb->stored_len);
	if (!b || !m) {
		free(b);
		free(m);
		return NULL;
	}
	b->flags = FMT_BLOB_INLINE;
	b->mem = m;
	m->ml = ml;
	m->b = b;
	m->obj_id = obj_id;
	m->obj_off = obj_off;
	atomic_init(&m->maprefs, 0);
	memcpy(m->bytes, bytes, fb->stored_len);
	pthread_mutex_lock(&ml->mu);
	m->link.next = &ml->head;
	m->link.prev = ml->head.prev;
	m->link.prev->next = &m->link;
	ml->head.prev = &m->link;
	pthread_mutex_unlock(&ml->mu);
	atomic_fetch_add(&ml->bytes, fb->stored_len);
	atomic_fetch_add(&ml->count, 1);
	return b;
}

static void memblob_free(struct blobd *b)
{
	struct memblob *m = b->mem;
	struct memlist *ml = m->ml;

	pthread_mutex_lock(&ml->mu);
	m->link.prev->next = m->link.next;
	m->link.next->prev = m->link.prev;
	pthread_mutex_unlock(&ml->mu);
	atomic_fetch_sub(&ml->bytes, b->stored_len);
	atomic_fetch_sub(&ml->count, 1);
	free(m);
}

void blobd_ref(struct blobd *b)
{
	uint32_t old = atomic_fetch_add_explicit(&b->refs, 1,
						 memory_order_relaxed);
	COIL_ASSERT(old > 0);
}

void blobd_unref(struct blobd *b)
{
	uint32_t old;

	if (!b)
		return;
	old = atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel);
	COIL_ASSERT(old > 0);
	if (old == 1) {
		if (b->mem)
			memblob_free(b);
		free(b);
	}
}

void blobd_to_fmt(const struct blobd *b, struct fmt_blob *fb)
{
	fb->dev_off = b->dev_off;
	fb->stored_len = b->stored_len;
	fb->logical_len = b->logical_len;
	fb->codec = b->codec;
	fb->flags = b->flags;
	fb->n_csums = b->n_csums;
	fb->dict_id = b->dict_id;
	memcpy(fb->csums, b->csums, (size_t)b->n_csums * sizeof(uint64_t));
}
