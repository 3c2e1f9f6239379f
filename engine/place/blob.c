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
	ml->lent = 0;
}

void memlist_destroy(struct memlist *ml)
{
	pthread_mutex_destroy(&ml->mu);
}

static struct blobd *new_mem(const struct fmt_blob *fb, const uint8_t *bytes,
			     struct memlist *ml, uint64_t obj_id,
			     uint64_t obj_off, bool lend)
{
	struct fmt_blob d = *fb;
	struct memblob *m;
	struct blobd *b;

	d.flags = 0;
	d.dev_off = 0;
	b = blobd_new(&d);
	m = malloc(sizeof(*m) + (lend ? 0 : fb->stored_len));
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
	m->lent = lend;
	if (lend) {
		m->bytes = bytes;
	} else {
		memcpy(m->own, bytes, fb->stored_len);
		m->bytes = m->own;
	}
	pthread_mutex_lock(&ml->mu);
	m->link.next = &ml->head;
	m->link.prev = ml->head.prev;
	m->link.prev->next = &m->link;
	ml->head.prev = &m->link;
	ml->lent += lend;
	pthread_mutex_unlock(&ml->mu);
	atomic_fetch_add(&ml->bytes, fb->stored_len);
	atomic_fetch_add(&ml->count, 1);
	return b;
}

struct blobd *blobd_new_mem(const struct fmt_blob *fb, const uint8_t *bytes,
			    struct memlist *ml, uint64_t obj_id,
			    uint64_t obj_off)
{
	return new_mem(fb, bytes, ml, obj_id, obj_off, false);
}

struct blobd *blobd_new_mem_lent(const struct fmt_blob *fb,
				 const uint8_t *bytes, struct memlist *ml,
				 uint64_t obj_id, uint64_t obj_off)
{
	return new_mem(fb, bytes, ml, obj_id, obj_off, true);
}

int memlist_settle(struct memlist *ml)
{
	int rc = 0;

	pthread_mutex_lock(&ml->mu);
	/* Bounded: one pass over the list, which nothing else changes while
	 * replay runs. */
	for (struct memlink *l = ml->head.next; l != &ml->head && ml->lent;
	     l = l->next) {
		struct memblob *m = memblob_of(l);
		uint8_t *copy;

		if (!m->lent)
			continue;
		copy = malloc(m->b->stored_len ? m->b->stored_len : 1);
		if (!copy) {
			rc = -ENOMEM;
			break;
		}
		memcpy(copy, m->bytes, m->b->stored_len);
		m->bytes = copy;
		m->lent = false;
		ml->lent--;
		rc++;
	}
	pthread_mutex_unlock(&ml->mu);
	return rc;
}

static void memblob_free(struct blobd *b)
{
	struct memblob *m = b->mem;
	struct memlist *ml = m->ml;

	pthread_mutex_lock(&ml->mu);
	m->link.prev->next = m->link.next;
	m->link.next->prev = m->link.prev;
	ml->lent -= m->lent;
	pthread_mutex_unlock(&ml->mu);
	atomic_fetch_sub(&ml->bytes, b->stored_len);
	atomic_fetch_sub(&ml->count, 1);
	if (!m->lent && m->bytes != m->own)
		free((void *)m->bytes);
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
