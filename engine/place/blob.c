/* engine/place/blob.c — refcounted blob descriptors and small shared helpers. */
#include "engine/place/blob.h"

#include <errno.h>
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
	memcpy(b->csums, fb->csums, (size_t)fb->n_csums * sizeof(uint64_t));
	return b;
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
	if (old == 1)
		free(b);
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
