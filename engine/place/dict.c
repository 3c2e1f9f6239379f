/* engine/place/dict.c — the dictionary table (see dict.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/place/blob.h"
#include "engine/place/dev.h"
#include "engine/place/dict.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/store.h"
#include "format/format.h"
#include "uring/uring.h"

void dict_destroy(struct coil_store *s)
{
	for (uint32_t i = 0; i < DICT_MAX; i++) {
		struct dict *d = atomic_load(&s->dicts.tab[i]);

		if (!d)
			continue;
		ZSTD_freeDDict(d->dd);
		ZSTD_freeCDict(d->cd[0]);
		ZSTD_freeCDict(d->cd[1]);
		free(d->bytes);
		free(d);
		atomic_store(&s->dicts.tab[i], NULL);
	}
}

const ZSTD_DDict *dict_ddict(struct coil_store *s, uint32_t id)
{
	struct dict *d;

	if (id == 0 || id >= DICT_MAX)
		return NULL;
	d = atomic_load_explicit(&s->dicts.tab[id], memory_order_acquire);
	return d ? __atomic_load_n(&d->dd, __ATOMIC_ACQUIRE) : NULL;
}

/* "\x01d/<id>/<cohort>": the id, and where the cohort starts. */
static bool parse_name(const char *name, size_t len, uint32_t *id,
		       size_t *cohort_at)
{
	size_t p = strlen(DICT_NAME_PREFIX);
	uint64_t v = 0;

	if (len <= p || memcmp(name, DICT_NAME_PREFIX, p) != 0)
		return false;
	for (; p < len && name[p] >= '0' && name[p] <= '9'; p++) {
		v = v * 10 + (uint64_t)(name[p] - '0');
		if (v >= DICT_MAX)
			return false;
	}
	if (p >= len || name[p] != '/' || v == 0 ||
	    len - p - 1 > DICT_COHORT_MAX)
		return false;
	*id = (uint32_t)v;
	*cohort_at = p + 1;
	return true;
}

void dict_note(struct coil_store *s, struct object *o)
{
	struct dict *d;
	uint32_t id;
	size_t at;

	if (!dict_name_internal(o->name, o->name_len) ||
	    !parse_name(o->name, o->name_len, &id, &at))
		return;
	d = atomic_load(&s->dicts.tab[id]);
	if (d) {
		/* the same object added again (a delta checkpoint that
		 * records it whole replaces it): follow it */
		d->obj = o;
		d->obj_id = o->id;
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return; /* its blobs will read -EIO */
	d->id = id;
	d->obj_id = o->id;
	d->obj = o;
	memcpy(d->cohort, o->name + at, o->name_len - at);
	d->cohort[o->name_len - at] = 0;
	atomic_store_explicit(&s->dicts.tab[id], d, memory_order_release);
	atomic_fetch_add(&s->dicts.count, 1);
	if (id >= s->dicts.next_id)
		s->dicts.next_id = id + 1;
}

static int set_bytes(struct coil_store *s, struct dict *d, const void *buf,
		     uint32_t len)
{
	ZSTD_DDict *dd;

	d->bytes = malloc(len ? len : 1);
	if (!d->bytes)
		return -ENOMEM;
	memcpy(d->bytes, buf, len);
	d->len = len;
	dd = ZSTD_createDDict(buf, len);
	if (!dd) {
		free(d->bytes);
		d->bytes = NULL;
		return -ENOMEM;
	}
	__atomic_store_n(&d->dd, dd, __ATOMIC_RELEASE);
	s->dicts.bytes += len;
	s->dicts.loaded++;
	return 0;
}

/* Read object @o's bytes [0, size) into @out through its extent map:
 * each blob read from the device (or memory) and decoded, no dictionary
 * (a dictionary's own blobs never use one).  mlock held or
 * single-threaded. */
static int read_object(struct coil_store *s, struct object *o, uint8_t *out)
{
	struct extmap_iter it;
	const struct ext *e;
	uint8_t *io = NULL, *dec = NULL;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	int rc = 0;

	if (!dctx || posix_memalign((void **)&io, 4096,
				    FMT_BLOB_MAX + 2 * FMT_BLOCK) ||
	    !(dec = malloc(FMT_BLOB_MAX))) {
		rc = -ENOMEM;
		goto out;
	}
	memset(out, 0, o->size);
	extmap_iter_init(&it, &o->map, 0);
	while (rc == 0 && (e = extmap_iter_next(&it)) && e->off < o->size) {
		const struct blobd *b = e->b;
		struct fmt_blob fb;
		const uint8_t *src;
		uint64_t lo, hi;

		blobd_to_fmt(b, &fb);
		if (fb.dict_id || e->off + e->len > o->size ||
		    b->stored_len > FMT_BLOB_MAX) {
			rc = -EIO;
			break;
		}
		if (blobd_is_mem(b)) {
			src = b->mem->bytes;
		} else {
			lo = COIL_ALIGN_DOWN(b->dev_off, FMT_BLOCK);
			hi = COIL_ALIGN_UP(b->dev_off + b->stored_len,
					   FMT_BLOCK);
			rc = store_io_sync(s, URING_OP_READ, io,
					   (uint32_t)(hi - lo), lo);
			if (rc < 0)
				break;
			src = io + (b->dev_off - lo);
		}
		if (fmt_blob_decode(dctx, NULL, &fb, src, b->stored_len, dec,
				    FMT_BLOB_MAX) != (int)b->logical_len) {
			rc = -EIO;
			break;
		}
		memcpy(out + e->off, dec + e->skip, e->len);
	}
out:
	ZSTD_freeDCtx(dctx);
	free(io);
	free(dec);
	return rc;
}

int dict_load(struct coil_store *s, uint32_t id)
{
	struct dict *d;
	struct object *o;
	uint8_t *buf;
	int rc;

	if (id == 0 || id >= DICT_MAX)
		return -EIO;
	d = atomic_load(&s->dicts.tab[id]);
	if (!d)
		return -EIO;
	if (d->dd)
		return 0;
	if (d->failed)
		return -EIO;
	o = d->obj;
	rc = -EIO;
	if (o && o->size > 0 && o->size <= DICT_BYTES_MAX &&
	    (buf = malloc(o->size))) {
		rc = read_object(s, o, buf);
		if (rc == 0)
			rc = set_bytes(s, d, buf, (uint32_t)o->size);
		free(buf);
	}
	if (rc < 0) {
		d->failed = true;
		s->dicts.failed++;
		return -EIO;
	}
	return 0;
}

void dict_load_all(struct coil_store *s)
{
	for (uint32_t i = 1; i < s->dicts.next_id; i++)
		if (atomic_load(&s->dicts.tab[i]))
			(void)dict_load(s, i);
}

int dict_publish(struct coil_store *s, uint32_t id, const void *buf,
		 uint32_t len)
{
	struct dict *d = id && id < DICT_MAX ? atomic_load(&s->dicts.tab[id]) :
					       NULL;

	if (!d || d->dd)
		return -EIO;
	return set_bytes(s, d, buf, len);
}

size_t dict_cohort_of(const char *name, size_t len, char *out)
{
	const char *slash = memchr(name, '/', len);
	size_t n = slash ? (size_t)(slash - name) : 0;

	n = n > DICT_COHORT_MAX ? DICT_COHORT_MAX : n;
	memcpy(out, name, n);
	out[n] = 0;
	return n;
}

unsigned dict_pool(struct coil_store *s, const char *cohort,
		   struct dict **out)
{
	uint32_t end = atomic_load(&s->dicts.next_id);
	unsigned n = 0;

	for (uint32_t i = 1; i < end && i < DICT_MAX && n < DICT_POOL_MAX;
	     i++) {
		struct dict *d = atomic_load(&s->dicts.tab[i]);

		if (d && __atomic_load_n(&d->dd, __ATOMIC_ACQUIRE) &&
		    strcmp(d->cohort, cohort) == 0)
			out[n++] = d;
	}
	return n;
}

static struct dict_reject *reject_find(struct coil_store *s,
				      const char *cohort)
{
	for (uint32_t i = 0; i < s->dicts.nrej; i++)
		if (strcmp(s->dicts.rej[i].cohort, cohort) == 0)
			return &s->dicts.rej[i];
	return NULL;
}

bool dict_rejected(struct coil_store *s, const char *cohort, uint64_t bytes)
{
	const struct dict_reject *r = reject_find(s, cohort);

	return r && bytes / 2 < r->bytes;
}

void dict_reject_note(struct coil_store *s, const char *cohort,
		      uint64_t bytes)
{
	struct dict_reject *r = reject_find(s, cohort);

	if (!r) {
		if (s->dicts.nrej < DICT_REJECTS_MAX) {
			r = &s->dicts.rej[s->dicts.nrej++];
		} else {
			r = &s->dicts.rej[s->dicts.rej_next];
			s->dicts.rej_next = (s->dicts.rej_next + 1) %
					    DICT_REJECTS_MAX;
		}
		snprintf(r->cohort, sizeof(r->cohort), "%s", cohort);
	}
	r->bytes = bytes;
}

const ZSTD_CDict *dict_cdict(struct dict *d, int level)
{
	unsigned k;

	for (k = 0; k < 2; k++)
		if (d->cd[k] && d->cd_level[k] == level)
			return d->cd[k];
	k = d->cd_next;
	d->cd_next ^= 1;
	ZSTD_freeCDict(d->cd[k]);
	d->cd[k] = d->bytes ? ZSTD_createCDict(d->bytes, d->len, level) : NULL;
	d->cd_level[k] = level;
	return d->cd[k];
}
