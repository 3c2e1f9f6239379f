/* engine/optimize.c — coil_optimize: dictionaries trained per cohort on
 * the caller's thread, then the cleaner thread's optimizer passes
 * (engine/cleaner.c, io/recode.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zdict.h>
#include <zstd.h>

#include "engine/cleaner.h"
#include "engine/io/recode.h"
#include "engine/optimize.h"
#include "engine/pack.h"
#include "engine/place/dict.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "format/format.h"

/* ---- dictionaries: one per cohort, trained on a sample ------------------ */

static int dict_store(coil_store *s, const char *cohort, const void *buf,
		      uint32_t len);

/* A cohort's sample: every DICT_SAMPLE_STRIDE-th piece of its objects (a
 * piece: 64 KiB, or a smaller object whole), up to DICT_SAMPLE_MAX bytes.
 * Even pieces train the dictionary, odd ones (up to DICT_EVAL_MAX bytes)
 * judge it, so it is judged on data it was not trained on. */
#define DICT_PIECE (64u << 10)
#define DICT_SAMPLE_STRIDE 10u
#define DICT_SAMPLE_MAX (8u << 20)
#define DICT_EVAL_MAX (1u << 20)
#define DICT_TRAIN_BYTES (110u << 10)
/* Cohorts looked at per call, and the smallest one worth a dictionary
 * (the dictionary must pay for itself many times over to be worth its
 * training). */
#define DICT_COHORTS_MAX 64u
#define DICT_COHORT_MIN (4ull << 20)

struct piece {
	char *name;
	uint64_t off;
	uint32_t len;
};

struct cohort {
	char name[DICT_COHORT_MAX + 1];
	uint64_t bytes, pieces_seen, sample_bytes;
	struct piece *p;
	uint32_t np, cap;
};

static struct cohort *cohort_get(struct cohort *c, uint32_t *n,
				 const char *name)
{
	for (uint32_t i = 0; i < *n; i++)
		if (strcmp(c[i].name, name) == 0)
			return &c[i];
	if (*n == DICT_COHORTS_MAX)
		return NULL;
	memset(&c[*n], 0, sizeof(c[*n]));
	strcpy(c[*n].name, name);
	return &c[(*n)++];
}

static int piece_add(struct cohort *c, const struct object *o, uint64_t off,
		     uint32_t len)
{
	if (c->np == c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : 64;
		struct piece *p = realloc(c->p, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		c->p = p;
		c->cap = cap;
	}
	c->p[c->np].name = strndup(o->name, o->name_len);
	if (!c->p[c->np].name)
		return -ENOMEM;
	c->p[c->np].off = off;
	c->p[c->np].len = len;
	c->np++;
	c->sample_bytes += len;
	return 0;
}

/* One walk of the object table (mlock held): each user object's bytes go
 * to its cohort's total, and every DICT_SAMPLE_STRIDE-th piece of those
 * without a dictionary into its sample. */
static int cohorts_collect(struct coil_store *s, struct cohort *c,
			   uint32_t *n)
{
	char name[DICT_COHORT_MAX + 1];

	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o; o = o->id_next) {
			struct cohort *k;

			if (dict_name_internal(o->name, o->name_len) ||
			    o->size == 0)
				continue;
			dict_cohort_of(o->name, o->name_len, name);
			if (dict_for_cohort(s, name))
				continue;
			k = cohort_get(c, n, name);
			if (!k)
				continue;
			k->bytes += o->size;
			for (uint64_t off = 0; off < o->size; off += DICT_PIECE) {
				uint32_t len = (uint32_t)COIL_MIN(
					(uint64_t)DICT_PIECE, o->size - off);

				if (k->pieces_seen++ % DICT_SAMPLE_STRIDE ||
				    k->sample_bytes >= DICT_SAMPLE_MAX)
					continue;
				if (piece_add(k, o, off, len) < 0)
					return -ENOMEM;
			}
		}
	}
	return 0;
}

/* Read the sample's pieces (objects may have changed since: a piece that
 * reads short is what it is; one that fails is left out).  @return
 * pieces read into @buf, their sizes in @sizes. */
static unsigned sample_read(coil_store *s, const struct cohort *c,
			    uint8_t *buf, size_t *sizes)
{
	unsigned n = 0;
	size_t at = 0;

	for (uint32_t i = 0; i < c->np; i++) {
		coil_obj *h;
		int64_t got;

		if (coil_obj_open(s, c->p[i].name, 0, &h) < 0)
			continue;
		got = coil_pread(h, buf + at, c->p[i].len, c->p[i].off);
		coil_obj_close(h);
		if (got <= 0)
			continue;
		sizes[n++] = (size_t)got;
		at += (size_t)got;
	}
	return n;
}

/* Bytes of @n pieces (sizes @sz, back to back at @p) encoded at @level,
 * with @cd or without. */
static uint64_t encoded_bytes(ZSTD_CCtx *cc, const ZSTD_CDict *cd, int level,
			      const uint8_t *p, const size_t *sz, unsigned n,
			      uint8_t *tmp)
{
	uint64_t total = 0;

	for (unsigned i = 0; i < n; p += sz[i], i++) {
		size_t r = cd ? ZSTD_compress_usingCDict(cc, tmp, DICT_PIECE * 2,
							 p, sz[i], cd) :
				ZSTD_compressCCtx(cc, tmp, DICT_PIECE * 2, p,
						  sz[i], level);

		total += ZSTD_isError(r) ? sz[i] : COIL_MIN(r, sz[i]);
	}
	return total;
}

/* Train one cohort's dictionary, judge it, and if it pays for itself
 * store it.  @return 1 stored, 0 not worth it, -errno. */
static int cohort_train(coil_store *s, const struct cohort *c, int level,
			struct dict_stats *st)
{
	uint8_t *buf = malloc(c->sample_bytes ? c->sample_bytes : 1);
	uint8_t *tr = malloc(c->sample_bytes ? c->sample_bytes : 1);
	uint8_t *ev = malloc(DICT_EVAL_MAX + DICT_PIECE);
	uint8_t *dict = malloc(DICT_TRAIN_BYTES), *tmp = malloc(DICT_PIECE * 2);
	size_t *sz = calloc(c->np + 1, sizeof(*sz));
	size_t *trs = calloc(c->np + 1, sizeof(*trs));
	size_t *evs = calloc(c->np + 1, sizeof(*evs));
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_CDict *cd = NULL;
	unsigned n, ntr = 0, nev = 0;
	size_t trb = 0, evb = 0, dlen;
	uint64_t plain, with, gain;
	int rc = 0;

	if (!buf || !tr || !ev || !dict || !tmp || !sz || !trs || !evs ||
	    !cc) {
		rc = -ENOMEM;
		goto out;
	}
	n = sample_read(s, c, buf, sz);
	/* even pieces train, odd ones judge */
	for (unsigned i = 0, at = 0; i < n; at += (unsigned)sz[i], i++) {
		if (i % 2 == 0) {
			memcpy(tr + trb, buf + at, sz[i]);
			trs[ntr++] = sz[i];
			trb += sz[i];
		} else if (evb + sz[i] <= DICT_EVAL_MAX) {
			memcpy(ev + evb, buf + at, sz[i]);
			evs[nev++] = sz[i];
			evb += sz[i];
		}
	}
	if (ntr < 8 || nev == 0)
		goto out; /* too little to learn from */
	dlen = ZDICT_trainFromBuffer(dict, DICT_TRAIN_BYTES, tr, trs, ntr);
	if (ZDICT_isError(dlen)) {
		/* nothing to learn (random bytes): not worth one either */
		st->rejected++;
		goto out;
	}
	cd = ZSTD_createCDict(dict, dlen, level);
	if (!cd) {
		rc = -ENOMEM;
		goto out;
	}
	plain = encoded_bytes(cc, NULL, level, ev, evs, nev, tmp);
	with = encoded_bytes(cc, cd, level, ev, evs, nev, tmp);
	gain = plain > with ? (plain - with) * c->bytes / evb : 0;
	st->trained++;
	/* the cohort's projected saving must exceed the dictionary's bytes
	 * (twice: the projection is from a sample) */
	if (gain <= 2 * (uint64_t)dlen) {
		st->rejected++;
		goto out;
	}
	rc = dict_store(s, c->name, dict, (uint32_t)dlen);
	if (rc == 0) {
		st->made++;
		st->bytes += dlen;
		rc = 1;
	}
out:
	ZSTD_freeCDict(cd);
	ZSTD_freeCCtx(cc);
	free(buf);
	free(tr);
	free(ev);
	free(dict);
	free(tmp);
	free(sz);
	free(trs);
	free(evs);
	return rc;
}

/* Write dictionary @buf as the object DICT_NAME_PREFIX "<id>/<cohort>",
 * make it durable, then use it: its name binds it (dict.h), and no blob
 * names it before it is durable, so a replay that meets such a blob has
 * it.  @return 0 or -errno (an object left behind by a failure binds an
 * id no blob names). */
static int dict_store(coil_store *s, const char *cohort, const void *buf,
		      uint32_t len)
{
	char name[COIL_NAME_MAX + 1];
	uint32_t id = atomic_load(&s->dicts.next_id);
	coil_obj *h;
	int64_t w;
	int rc;

	if (id == 0)
		id = 1;
	if (id >= DICT_MAX)
		return -ENOSPC;
	snprintf(name, sizeof(name), "%s%u/%s", DICT_NAME_PREFIX, id, cohort);
	rc = engine_obj_open_internal(s, name, COIL_CREATE | COIL_EXCL, &h);
	if (rc < 0)
		return rc;
	w = coil_pwrite(h, buf, len, 0);
	rc = coil_obj_close(h);
	if (w != (int64_t)len)
		return w < 0 ? (int)w : -EIO;
	if (rc == 0)
		rc = coil_sync(s);
	if (rc == 0)
		rc = dict_publish(s, id, buf, len);
	return rc;
}

int optimize_train(coil_store *s, int level, struct dict_stats *st)
{
	struct cohort *c = calloc(DICT_COHORTS_MAX, sizeof(*c));
	uint32_t n = 0;
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&s->mlock);
	rc = cohorts_collect(s, c, &n);
	pthread_mutex_unlock(&s->mlock);
	for (uint32_t i = 0; i < n && rc >= 0; i++) {
		bool skip;

		if (c[i].bytes < DICT_COHORT_MIN)
			continue;
		pthread_mutex_lock(&s->mlock);
		skip = dict_rejected(s, c[i].name, c[i].bytes);
		pthread_mutex_unlock(&s->mlock);
		if (skip)
			continue;
		rc = cohort_train(s, &c[i], level, st);
		if (rc == 0) {
			pthread_mutex_lock(&s->mlock);
			dict_reject_note(s, c[i].name, c[i].bytes);
			pthread_mutex_unlock(&s->mlock);
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t k = 0; k < c[i].np; k++)
			free(c[i].p[k].name);
		free(c[i].p);
	}
	free(c);
	return rc < 0 ? rc : 0;
}

static uint64_t ld(const _Atomic uint64_t *x)
{
	return atomic_load(x);
}

/* The optimizer's counters now, as a report (a call's is the difference). */
static void opt_counters(coil_store *s, struct coil_optimize_report *r)
{
	const struct optimizer *op = cleaner_optimizer(s);

	memset(r, 0, sizeof(*r));
	if (!op)
		return;
	r->passes = ld(&op->passes);
	r->scanned = ld(&op->scanned);
	r->rewritten = ld(&op->rewritten);
	r->saved_bytes = ld(&op->saved_bytes);
	r->stale_skips = ld(&op->stale_skips);
	r->no_gain = ld(&op->no_gain);
	r->errors = ld(&op->errors);
	r->bytes_written = ld(&op->bytes_written);
}

COIL_API int coil_optimize(coil_store *s, const struct coil_optimize_opts *opts,
			   struct coil_optimize_report *rep)
{
	struct coil_optimize_opts o = { 0 };
	struct coil_optimize_report r0, r1;
	struct dict_stats ds = { 0 };
	uint64_t left, t0 = coil_now_ns(), taken;
	bool sealed = false, more;
	int rc;

	if (!s)
		return -EINVAL;
	if (opts)
		o = *opts;
	if (o.level == 0)
		o.level = 19;
	if (o.level < 1 || o.level > 22 || (o.flags & ~COIL_OPTIMIZE_NO_DICTS))
		return -EINVAL;
	rc = store_maint_check(s);
	if (rc < 0)
		return rc;
	left = o.budget_bytes ? o.budget_bytes : UINT64_MAX;
	opt_counters(s, &r0);
	/* Small writes still in memory go to a segment first. */
	rc = pack_now(s);
	if (rc == -ENOSPC)
		rc = 0;
	/* Dictionaries first, so the passes below can use them. */
	if (rc == 0 && !(o.flags & COIL_OPTIMIZE_NO_DICTS))
		rc = optimize_train(s, o.level, &ds);
	while (rc == 0 || rc == 1) {
		rc = cleaner_optimize(s, o.level, left, &taken);
		if (rc == 0 && !sealed && left > taken) {
			/* The sealed segments are done: the segment being
			 * filled holds what was written last.  Sealed once a
			 * call, and only then (a caller that loops on small
			 * budgets next to its writers would otherwise seal it
			 * every call and encode its newest data again and
			 * again). */
			sealed = true;
			left -= taken;
			pthread_mutex_lock(&s->mlock);
			more = s->active != UINT32_MAX &&
			       s->active_head > FMT_BLOCK && seg_seal_active(s);
			pthread_mutex_unlock(&s->mlock);
			if (more)
				continue;
			break;
		}
		if (rc == 0 && !sealed) {
			/* the budget ran out: the segment being filled is
			 * still to do, by a later call */
			pthread_mutex_lock(&s->mlock);
			if (s->active != UINT32_MAX &&
			    s->active_head > FMT_BLOCK)
				rc = 1;
			pthread_mutex_unlock(&s->mlock);
		}
		if (rc != 1)
			break;
		if (taken == 0)
			break; /* no room to relocate into now: more remains */
		left -= COIL_MIN(left, taken);
		if (left == 0 || (o.budget_ms &&
				  coil_now_ns() - t0 >= o.budget_ms * 1000000ull))
			break;
	}
	if (rep) {
		opt_counters(s, &r1);
		rep->passes = r1.passes - r0.passes;
		rep->scanned = r1.scanned - r0.scanned;
		rep->rewritten = r1.rewritten - r0.rewritten;
		rep->saved_bytes = r1.saved_bytes - r0.saved_bytes;
		rep->stale_skips = r1.stale_skips - r0.stale_skips;
		rep->no_gain = r1.no_gain - r0.no_gain;
		rep->errors = r1.errors - r0.errors;
		rep->bytes_written = r1.bytes_written - r0.bytes_written;
		rep->dicts_made = ds.made;
		rep->dict_bytes = ds.bytes;
		rep->dicts_rejected = ds.rejected;
	}
	return rc;
}
