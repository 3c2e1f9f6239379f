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
#include "engine/log/ckpt.h"
#include "engine/optimize.h"
#include "engine/pack.h"
#include "engine/place/dict.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "format/format.h"

/* ---- dictionaries: up to DICT_POOL_MAX per cohort, trained on a sample -- */

static int dict_store(coil_store *s, const char *cohort, const void *buf,
		      uint32_t len);

/* A cohort's sample: every DICT_SAMPLE_STRIDE-th piece of its objects (a
 * piece: 64 KiB, or a smaller object whole), up to DICT_SAMPLE_MAX bytes.
 * Even pieces train the dictionary, odd ones (up to DICT_EVAL_MAX bytes)
 * judge it, so it is judged on data it was not trained on. */
#define DICT_PIECE (64u << 10)
#define DICT_SAMPLE_STRIDE 10u
#define DICT_SAMPLE_MAX (8u << 20)
/* and at most this many pieces (a cohort of tiny objects would otherwise
 * make its sample of millions of them) */
#define DICT_SAMPLE_PIECES_MAX 16384u
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
	uint32_t np;
	size_t cap;
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
	if (coil_grow((void **)&c->p, &c->cap, (size_t)c->np + 1,
		      sizeof(*c->p)))
		return -ENOMEM;
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
	struct dict *pool[DICT_POOL_MAX];

	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o; o = o->id_next) {
			struct cohort *k;

			if (dict_name_internal(o->name, o->name_len) ||
			    o->size == 0)
				continue;
			dict_cohort_of(o->name, o->name_len, name);
			if (dict_pool(s, name, pool))
				continue;
			k = cohort_get(c, n, name);
			if (!k)
				continue;
			k->bytes += o->size;
			for (uint64_t off = 0; off < o->size; off += DICT_PIECE) {
				uint32_t len = (uint32_t)COIL_MIN(
					(uint64_t)DICT_PIECE, o->size - off);

				if (k->pieces_seen++ % DICT_SAMPLE_STRIDE ||
				    k->sample_bytes >= DICT_SAMPLE_MAX ||
				    k->np >= DICT_SAMPLE_PIECES_MAX)
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
 * pieces read into @buf, their sizes in @sizes and the index of each in
 * @c->p in @from. */
static unsigned sample_read(coil_store *s, const struct cohort *c,
			    uint8_t *buf, size_t *sizes, uint32_t *from)
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
		from[n] = i;
		sizes[n++] = (size_t)got;
		at += (size_t)got;
	}
	return n;
}

/* Bytes of one piece encoded at @level, with @cd or without. */
static uint64_t piece_encoded(ZSTD_CCtx *cc, const ZSTD_CDict *cd, int level,
			      const uint8_t *p, size_t len, uint8_t *tmp)
{
	size_t r = cd ? ZSTD_compress_usingCDict(cc, tmp, DICT_PIECE * 2, p,
						 len, cd) :
			ZSTD_compressCCtx(cc, tmp, DICT_PIECE * 2, p, len,
					  level);

	return ZSTD_isError(r) ? len : COIL_MIN(r, len);
}

/* A cohort's pool is chosen from up to DICT_CANDS_MAX candidates: one
 * trained on the whole training half of the sample, up to two on the
 * largest groups of it by name (the second path component, or for an
 * object directly in the cohort's folder its extension), and two on a
 * split by content: the pieces the first one helps least, and the others.
 * Names find kinds of data that their folders or extensions separate;
 * the split finds those mixed under the same names. */
#define DICT_CANDS_MAX 5u
#define DICT_GROUPS_MAX 2u
/* A dictionary is trained on at least this many pieces (fewer teach it
 * nothing it can be judged on). */
#define DICT_TRAIN_PIECES_MIN 8u

struct cand {
	uint8_t *dict;
	size_t len;
	uint64_t *saved;         /* per evaluation piece, bytes saved */
	bool kept;
};

/* The training half of a cohort's sample: pieces back to back in @buf,
 * their sizes, and for each its group by name. */
struct train_set {
	const uint8_t *buf;
	const size_t *sz;
	const size_t *at;        /* where each piece starts in buf */
	uint32_t *group;
	unsigned n;
	size_t bytes;
};

/* What groups an object's pieces by name inside its cohort: its second
 * path component when it has one, else its extension ("" for none). */
static void name_key(const char *name, char *out, size_t cap)
{
	const char *p = strchr(name, '/');
	const char *q, *k;
	size_t n;

	p = p ? p + 1 : name;
	q = strchr(p, '/');
	if (q) {
		k = p;
		n = (size_t)(q - p);
	} else {
		k = strrchr(p, '.');
		k = k ? k : p + strlen(p);
		n = strlen(k);
	}
	n = COIL_MIN(n, cap - 1);
	memcpy(out, k, n);
	out[n] = 0;
}

struct keyed {
	char key[DICT_COHORT_MAX + 1];
	double ratio;
	unsigned i;
};

static int keyed_by_key(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int keyed_by_ratio(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;

	if (x->ratio != y->ratio)
		return x->ratio < y->ratio ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

/* Group every training piece by its name's key: @group[i] is the index
 * of the first piece with the same key.  @names: each piece's object;
 * @kb: t->n entries of scratch. */
static void groups_find(struct train_set *t, const char *const *names,
			struct keyed *kb)
{
	for (unsigned i = 0; i < t->n; i++) {
		name_key(names[i], kb[i].key, sizeof(kb[i].key));
		kb[i].i = i;
	}
	qsort(kb, t->n, sizeof(*kb), keyed_by_key);
	for (unsigned i = 0; i < t->n; i++)
		t->group[kb[i].i] = i && strcmp(kb[i].key, kb[i - 1].key) == 0 ?
					    t->group[kb[i - 1].i] :
					    kb[i].i;
}

/* Train a candidate on the training pieces @pick selects (NULL: all)
 * into @k.  @return 1 trained, 0 too little or training failed, -ENOMEM. */
static int cand_train(const struct train_set *t, const bool *pick,
		      uint8_t *scratch, size_t *ssz, struct cand *k)
{
	unsigned m = 0;
	size_t b = 0, len;

	for (unsigned i = 0; i < t->n; i++) {
		if (pick && !pick[i])
			continue;
		memcpy(scratch + b, t->buf + t->at[i], t->sz[i]);
		ssz[m++] = t->sz[i];
		b += t->sz[i];
	}
	if (m < DICT_TRAIN_PIECES_MIN)
		return 0;
	k->dict = malloc(DICT_TRAIN_BYTES);
	if (!k->dict)
		return -ENOMEM;
	len = ZDICT_trainFromBuffer(k->dict, DICT_TRAIN_BYTES, scratch, ssz, m);
	if (ZDICT_isError(len)) {
		free(k->dict);
		k->dict = NULL;
		return 0;
	}
	k->len = len;
	return 1;
}

/* The candidates of a training set, in @k (at most DICT_CANDS_MAX).
 * @return how many, or -ENOMEM. */
static int cands_make(const struct train_set *t, ZSTD_CCtx *cc,
		      uint8_t *tmp, struct keyed *kb, struct cand *k)
{
	uint8_t *scratch = malloc(t->bytes ? t->bytes : 1);
	size_t *ssz = calloc(t->n + 1, sizeof(*ssz));
	bool *pick = calloc(t->n + 1, sizeof(*pick));
	uint32_t *gbytes = calloc(t->n + 1, sizeof(*gbytes));
	ZSTD_CDict *cd = NULL;
	int n = 0, r;

	if (!scratch || !ssz || !pick || !gbytes) {
		n = -ENOMEM;
		goto out;
	}
	r = cand_train(t, NULL, scratch, ssz, &k[n]);
	if (r <= 0) {
		n = r;
		goto out;
	}
	n++;
	/* the largest groups by name, if the names split the set at all */
	for (unsigned i = 0; i < t->n; i++)
		gbytes[t->group[i]] += (uint32_t)t->sz[i];
	for (unsigned g = 0; g < DICT_GROUPS_MAX; g++) {
		unsigned best = t->n;

		for (unsigned i = 0; i < t->n; i++)
			if (gbytes[i] && gbytes[i] < t->bytes &&
			    (best == t->n || gbytes[i] > gbytes[best]))
				best = i;
		if (best == t->n)
			break;
		gbytes[best] = 0;
		for (unsigned i = 0; i < t->n; i++)
			pick[i] = t->group[i] == best;
		r = cand_train(t, pick, scratch, ssz, &k[n]);
		if (r < 0) {
			n = r;
			goto out;
		}
		n += r;
	}
	/* split by content: how much the first candidate helps each piece,
	 * at the quick level; the half it helps least gets its own, and so
	 * does the other half */
	cd = ZSTD_createCDict(k[0].dict, k[0].len, OPTIMIZE_CHOOSE_LEVEL);
	if (!cd) {
		n = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < t->n; i++) {
		uint64_t with = piece_encoded(cc, cd, 0, t->buf + t->at[i],
					      t->sz[i], tmp);
		uint64_t plain = piece_encoded(cc, NULL, OPTIMIZE_CHOOSE_LEVEL,
					       t->buf + t->at[i], t->sz[i],
					       tmp);

		kb[i].ratio = plain ? (double)with / (double)plain : 1.0;
		kb[i].i = i;
	}
	/* a median split, ties by position */
	qsort(kb, t->n, sizeof(*kb), keyed_by_ratio);
	for (unsigned half = 0; half < 2; half++) {
		for (unsigned j = 0; j < t->n; j++)
			pick[kb[j].i] = (j >= t->n / 2) == (half == 0);
		r = cand_train(t, pick, scratch, ssz, &k[n]);
		if (r < 0) {
			n = r;
			goto out;
		}
		n += r;
	}
out:
	COIL_ASSERT(n <= (int)DICT_CANDS_MAX);
	ZSTD_freeCDict(cd);
	free(scratch);
	free(ssz);
	free(pick);
	free(gbytes);
	return n;
}

/* Projected over @cohort_bytes from @evb bytes: what @k saves on @nev
 * pieces beyond @covered, less twice its bytes (a dictionary is kept only
 * if this is positive: the projection is from a sample). */
static int64_t cand_net(const struct cand *k, const uint64_t *covered,
			unsigned nev, uint64_t evb, uint64_t cohort_bytes)
{
	uint64_t gain = 0;

	for (unsigned p = 0; p < nev; p++)
		if (k->saved[p] > covered[p])
			gain += k->saved[p] - covered[p];
	return (int64_t)(gain * cohort_bytes / evb) - 2 * (int64_t)k->len;
}

/* What the kept candidates other than @skip save on each piece (each
 * piece uses the best of them), in @covered. */
static void pool_cover(const struct cand *k, unsigned nk, unsigned skip,
		       unsigned nev, uint64_t *covered)
{
	memset(covered, 0, nev * sizeof(*covered));
	for (unsigned i = 0; i < nk; i++)
		if (k[i].kept && i != skip)
			for (unsigned p = 0; p < nev; p++)
				covered[p] = COIL_MAX(covered[p],
						      k[i].saved[p]);
}

/* Choose a cohort's pool from @nk scored candidates: greedily, each
 * time the one whose saving over what the pool chosen so far already
 * saves (each piece counts only its improvement: it will use the best of
 * the pool) is largest, as long as that pays for the candidate
 * (cand_net), at most DICT_POOL_MAX.  Then each kept one is checked again
 * against all the others: the first choice, trained on everything, is
 * often made redundant by the narrower ones chosen after it.  Marks the
 * kept ones; @covered: @nev entries of scratch.  @return how many. */
static unsigned pool_select(struct cand *k, unsigned nk, unsigned nev,
			    uint64_t evb, uint64_t cohort_bytes,
			    uint64_t *covered)
{
	unsigned kept = 0;

	memset(covered, 0, nev * sizeof(*covered));
	while (kept < DICT_POOL_MAX) {
		unsigned best = nk;
		int64_t best_net = 0;

		for (unsigned i = 0; i < nk; i++) {
			int64_t net;

			if (k[i].kept)
				continue;
			net = cand_net(&k[i], covered, nev, evb, cohort_bytes);
			if (net > best_net) {
				best_net = net;
				best = i;
			}
		}
		if (best == nk)
			break;
		k[best].kept = true;
		kept++;
		for (unsigned p = 0; p < nev; p++)
			covered[p] = COIL_MAX(covered[p], k[best].saved[p]);
	}
	for (unsigned i = 0; i < nk && kept > 1; i++) {
		if (!k[i].kept)
			continue;
		pool_cover(k, nk, i, nev, covered);
		if (cand_net(&k[i], covered, nev, evb, cohort_bytes) <= 0) {
			k[i].kept = false;
			kept--;
		}
	}
	COIL_ASSERT(kept <= DICT_POOL_MAX);
	return kept;
}

/* Train a cohort's candidate dictionaries, score each on pieces none was
 * trained on, and store the pool that pays for itself.  @return 1 some
 * stored, 0 none worth it (or too little to learn from), -errno. */
static int cohort_train(coil_store *s, const struct cohort *c, int level,
			struct dict_stats *st)
{
	unsigned made = 0;
	uint8_t *buf = malloc(c->sample_bytes ? c->sample_bytes : 1);
	uint8_t *tr = malloc(c->sample_bytes ? c->sample_bytes : 1);
	uint8_t *ev = malloc(DICT_EVAL_MAX + DICT_PIECE);
	uint8_t *tmp = malloc(DICT_PIECE * 2);
	size_t *sz = calloc(c->np + 1, sizeof(*sz));
	size_t *trs = calloc(c->np + 1, sizeof(*trs));
	size_t *tra = calloc(c->np + 1, sizeof(*tra));
	size_t *evs = calloc(c->np + 1, sizeof(*evs));
	uint32_t *from = calloc(c->np + 1, sizeof(*from));
	uint32_t *group = calloc(c->np + 1, sizeof(*group));
	const char **names = calloc(c->np + 1, sizeof(*names));
	uint64_t *plain = calloc(c->np + 1, sizeof(*plain));
	uint64_t *covered = calloc(c->np + 1, sizeof(*covered));
	struct keyed *kb = calloc(c->np + 1, sizeof(*kb));
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	struct cand k[DICT_CANDS_MAX] = { 0 };
	struct train_set t = { 0 };
	unsigned n, nev = 0;
	size_t evb = 0;
	int nk = 0, rc = 0;

	if (!buf || !tr || !ev || !tmp || !sz || !trs || !tra || !evs ||
	    !from || !group || !names || !plain || !covered || !kb || !cc) {
		rc = -ENOMEM;
		goto out;
	}
	n = sample_read(s, c, buf, sz, from);
	/* even pieces train, odd ones judge */
	for (unsigned i = 0, at = 0; i < n; at += (unsigned)sz[i], i++) {
		if (i % 2 == 0) {
			memcpy(tr + t.bytes, buf + at, sz[i]);
			names[t.n] = c->p[from[i]].name;
			tra[t.n] = t.bytes;
			trs[t.n++] = sz[i];
			t.bytes += sz[i];
		} else if (evb + sz[i] <= DICT_EVAL_MAX) {
			memcpy(ev + evb, buf + at, sz[i]);
			evs[nev++] = sz[i];
			evb += sz[i];
		}
	}
	if (t.n < DICT_TRAIN_PIECES_MIN || nev == 0)
		goto out; /* too little to learn from */
	t.buf = tr;
	t.sz = trs;
	t.at = tra;
	t.group = group;
	groups_find(&t, names, kb);
	nk = cands_make(&t, cc, tmp, kb, k);
	if (nk <= 0) {
		/* nothing to learn from (random bytes): the one candidate
		 * tried counts as not kept */
		if (nk == 0)
			st->rejected++;
		rc = nk;
		goto out;
	}
	/* each candidate's saving per evaluation piece, at the pass's level */
	for (unsigned p = 0, at = 0; p < nev; at += (unsigned)evs[p], p++)
		plain[p] = piece_encoded(cc, NULL, level, ev + at, evs[p], tmp);
	for (int i = 0; i < nk; i++) {
		ZSTD_CDict *cd = ZSTD_createCDict(k[i].dict, k[i].len, level);

		k[i].saved = calloc(nev, sizeof(*k[i].saved));
		if (!cd || !k[i].saved) {
			ZSTD_freeCDict(cd);
			rc = -ENOMEM;
			goto out;
		}
		for (unsigned p = 0, at = 0; p < nev;
		     at += (unsigned)evs[p], p++) {
			uint64_t with = piece_encoded(cc, cd, level, ev + at,
						      evs[p], tmp);

			k[i].saved[p] = plain[p] > with ? plain[p] - with : 0;
		}
		ZSTD_freeCDict(cd);
	}
	st->trained += (uint64_t)nk;
	pool_select(k, (unsigned)nk, nev, evb, c->bytes, covered);
	for (int i = 0; i < nk; i++) {
		if (!k[i].kept) {
			st->rejected++;
			continue;
		}
		if (rc < 0)
			continue;
		rc = dict_store(s, c->name, k[i].dict, (uint32_t)k[i].len);
		if (rc == 0) {
			st->made++;
			st->bytes += k[i].len;
			made++;
		}
	}
	if (rc == 0 && made)
		rc = 1;
out:
	for (int i = 0; i < (int)DICT_CANDS_MAX; i++) {
		free(k[i].dict);
		free(k[i].saved);
	}
	ZSTD_freeCCtx(cc);
	free(buf);
	free(tr);
	free(ev);
	free(tmp);
	free(sz);
	free(trs);
	free(tra);
	free(evs);
	free(from);
	free(group);
	free(names);
	free(plain);
	free(covered);
	free(kb);
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

/* Does the segment being filled hold data, none of it new for
 * optimize_cold?  (One still taking writes is left to fill: sealing it
 * for the optimizer would leave it part empty, for data likely to be
 * rewritten.)  mlock held. */
static bool active_cold(struct coil_store *s)
{
	return s->active != UINT32_MAX && s->active_head > FMT_BLOCK &&
	       seg_cold(s, s->active, coil_now_ns());
}

/* Has the foreground written nothing for optimize_cold, as far as the
 * calls of coil_optimize have seen?  (The first call of an open counts
 * the writes since the open.) */
static bool writes_cold(struct coil_store *s)
{
	uint64_t w = atomic_load(&s->st.writes), now = coil_now_ns();
	bool cold;

	pthread_mutex_lock(&s->mlock);
	if (w != s->opt_writes_seen) {
		s->opt_writes_seen = w;
		s->opt_writes_since = now;
	}
	cold = !s->opt_cold_ns || now - s->opt_writes_since >= s->opt_cold_ns ||
	       s->opt_writes_since == 0;
	pthread_mutex_unlock(&s->mlock);
	return cold;
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
	/* Small writes still in memory go to a segment first, once they
	 * are cold: no write for optimize_cold (as these calls see the
	 * write count); packing the newest ones ahead of the packer's own
	 * pace would only make the foreground's writes wait. */
	if (writes_cold(s)) {
		rc = pack_now(s);
		if (rc == -ENOSPC)
			rc = 0;
	}
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
			/* the passes' own writes into it settle first (a
			 * segment with writes in flight is not sealed), and
			 * the victims they emptied are freed */
			if (ckpt_wait(s) < 0) {
				rc = -EIO;
				break;
			}
			pthread_mutex_lock(&s->mlock);
			more = active_cold(s) && seg_seal_active(s);
			pthread_mutex_unlock(&s->mlock);
			if (more)
				continue;
			break;
		}
		if (rc == 0 && !sealed) {
			/* the budget ran out: the segment being filled is
			 * still to do, by a later call */
			pthread_mutex_lock(&s->mlock);
			if (active_cold(s))
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
	/* Done: the segments the passes emptied wait for a checkpoint (a
	 * pass takes one only when space is short) */
	if (rc == 0) {
		opt_counters(s, &r1);
		if (r1.passes != r0.passes && ckpt_wait(s) < 0)
			rc = -EIO;
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
