/* engine/place/extmap.c — the per-object extent map (see extmap.h). */
#include "engine/place/extmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "engine/place/blob.h"

/* Spare leaves kept so that a punch + insert (at most two leaf splits) never
 * fails half way: every allocation happens in extmap_reserve, before the map
 * is touched. */
#define EXTMAP_SPARES 2
/* The first leaf's capacity: a punch + insert adds at most two extents. */
#define EXTMAP_LEAF_MIN 2

/* What a leaf of @cap extents, and a leaf array of @cap (its spares and
 * keys with it), take: acct->mem counts them. */
static uint64_t leaf_bytes(uint32_t cap)
{
	return sizeof(struct extmap_leaf) + (uint64_t)cap * sizeof(struct ext);
}

static uint64_t array_bytes(uint32_t cap)
{
	return (uint64_t)(cap + EXTMAP_SPARES) * sizeof(struct extmap_leaf *) +
	       (uint64_t)cap * sizeof(uint64_t);
}

static void mem_add(struct extmap *m, uint64_t add, uint64_t sub)
{
	if (!m->acct)
		return;
	COIL_ASSERT(m->acct->mem + add >= sub);
	m->acct->mem = m->acct->mem + add - sub;
}

static struct extmap_leaf *leaf_alloc(struct extmap_leaf *l, uint32_t cap)
{
	struct extmap_leaf *n = realloc(l, leaf_bytes(cap));

	if (!n)
		return NULL;
	if (!l)
		n->n = 0;
	n->cap = cap;
	return n;
}

void extmap_init(struct extmap *m, struct extmap_acct *acct)
{
	memset(m, 0, sizeof(*m));
	m->acct = acct;
}

static void acct_add(struct extmap *m, const struct ext *e)
{
	if (e->b->mem)
		atomic_fetch_add(&e->b->mem->maprefs, 1);
	if (m->acct) {
		m->acct->n++;
		m->acct->csums += e->b->n_csums;
		if (e->b->mem)
			m->acct->inl += e->b->stored_len;
	}
}

/* @e's length and stored share join (span_add) or leave (span_sub) the
 * map's and the store's running sums: around every change of a length. */
static void span_add(struct extmap *m, const struct ext *e)
{
	uint64_t st = ext_stored(e);

	m->bytes += e->len;
	m->stored += st;
	if (m->acct) {
		m->acct->bytes += e->len;
		m->acct->stored += st;
	}
}

static void span_sub(struct extmap *m, const struct ext *e)
{
	uint64_t st = ext_stored(e);

	COIL_ASSERT(m->bytes >= e->len);
	COIL_ASSERT(m->stored >= st);
	m->bytes -= e->len;
	m->stored -= st;
	if (m->acct) {
		COIL_ASSERT(m->acct->bytes >= e->len);
		COIL_ASSERT(m->acct->stored >= st);
		m->acct->bytes -= e->len;
		m->acct->stored -= st;
	}
}

/* The map keeps its one extent inline (no leaf array). */
static inline bool is_one(const struct extmap *m)
{
	return !m->leaf && m->n == 1;
}

static void acct_sub(struct extmap *m, const struct ext *e)
{
	if (e->b->mem)
		atomic_fetch_sub(&e->b->mem->maprefs, 1);
	if (m->acct) {
		m->acct->n--;
		m->acct->csums -= e->b->n_csums;
		if (e->b->mem) {
			COIL_ASSERT(m->acct->inl >= e->b->stored_len);
			m->acct->inl -= e->b->stored_len;
		}
	}
}

/* The dense first keys: key i = leaf i's first offset, for the search.
 * They follow the leaf array's spares in its allocation. */
static inline uint64_t *keys(const struct extmap *m)
{
	return (uint64_t *)(void *)(m->leaf + m->cap + EXTMAP_SPARES);
}

static struct extmap_leaf **spares(struct extmap *m)
{
	/* Spare leaves are stored past nleaf in the leaf array's capacity. */
	return m->leaf + m->cap;
}

/* The leaf array is allocated with EXTMAP_SPARES extra slots after cap.
 * After it, the punch and insert ahead cannot need memory: a lone leaf has
 * room for two more extents or is whole, and whole spares wait for any leaf
 * that is whole to split. */
static int extmap_reserve(struct extmap *m)
{
	bool whole;

	if (is_one(m)) {
		/* the inline extent moves into a leaf with room for the punch
		 * and insert ahead, in an array with room for their splits:
		 * both allocated before the map is touched */
		const uint32_t ncap = 4, lcap = 4;
		struct extmap_leaf **nl = calloc(1, array_bytes(ncap));
		struct extmap_leaf *l = nl ? leaf_alloc(NULL, lcap) : NULL;

		if (!l) {
			free(nl);
			return -ENOMEM;
		}
		mem_add(m, array_bytes(ncap) + leaf_bytes(lcap), 0);
		l->e[0] = m->one;
		l->n = 1;
		nl[0] = l;
		m->leaf = nl;
		m->cap = ncap;
		m->nleaf = 1;
		keys(m)[0] = m->one.off;
		memset(&m->one, 0, sizeof(m->one));
	}

	if (m->nleaf + 2 > m->cap) {
		uint32_t ncap = m->cap ? m->cap * 2 : 2;
		struct extmap_leaf **nl;

		while (ncap < m->nleaf + 2)
			ncap *= 2;
		uint64_t *nk;

		/* the leaf array and the keys in one allocation (a map of
		 * one leaf, most objects', makes two instead of three) */
		nl = calloc(1, array_bytes(ncap));
		if (!nl)
			return -ENOMEM;
		nk = (uint64_t *)(void *)(nl + ncap + EXTMAP_SPARES);
		if (m->leaf) {
			memcpy(nl, m->leaf, m->nleaf * sizeof(*nl));
			memcpy(nl + ncap, m->leaf + m->cap,
			       EXTMAP_SPARES * sizeof(*nl));
			memcpy(nk, keys(m), m->nleaf * sizeof(*nk));
			free(m->leaf);
		}
		mem_add(m, array_bytes(ncap), m->leaf ? array_bytes(m->cap) : 0);
		m->leaf = nl;
		m->cap = ncap;
	}
	if (m->nleaf == 0) {
		/* the first extent's leaf, at its smallest */
		if (!spares(m)[0] && !spares(m)[1]) {
			spares(m)[0] = leaf_alloc(NULL, EXTMAP_LEAF_MIN);
			if (!spares(m)[0])
				return -ENOMEM;
			mem_add(m, leaf_bytes(EXTMAP_LEAF_MIN), 0);
		}
		return 0;
	}
	if (m->nleaf == 1 && m->leaf[0]->cap < EXTMAP_LEAF_MAX &&
	    m->leaf[0]->n + 2 > m->leaf[0]->cap) {
		uint32_t cap = COIL_MAX(m->leaf[0]->cap * 2, m->leaf[0]->n + 2);
		uint32_t was = m->leaf[0]->cap;
		struct extmap_leaf *l;

		l = leaf_alloc(m->leaf[0], COIL_MIN(cap, EXTMAP_LEAF_MAX));
		if (!l)
			return -ENOMEM;
		m->leaf[0] = l;
		mem_add(m, leaf_bytes(l->cap), leaf_bytes(was));
	}
	whole = m->nleaf > 1 || m->leaf[0]->cap == EXTMAP_LEAF_MAX;
	for (int i = 0; whole && i < EXTMAP_SPARES; i++) {
		struct extmap_leaf *l = spares(m)[i];
		uint64_t was;

		if (l && l->cap == EXTMAP_LEAF_MAX)
			continue;
		was = l ? leaf_bytes(l->cap) : 0;
		l = leaf_alloc(l, EXTMAP_LEAF_MAX);
		if (!l)
			return -ENOMEM;
		mem_add(m, leaf_bytes(EXTMAP_LEAF_MAX), was);
		l->n = 0;
		spares(m)[i] = l;
	}
	return 0;
}

static struct extmap_leaf *take_spare(struct extmap *m)
{
	for (int i = 0; i < EXTMAP_SPARES; i++) {
		struct extmap_leaf *l = spares(m)[i];
		if (l) {
			spares(m)[i] = NULL;
			l->n = 0;
			return l;
		}
	}
	COIL_ASSERT(!"extmap: no spare leaf reserved");
	return NULL;
}

static void leaf_insert_at_top(struct extmap *m, uint32_t li,
			       struct extmap_leaf *l)
{
	COIL_ASSERT(m->nleaf < m->cap);
	memmove(&m->leaf[li + 1], &m->leaf[li],
		(m->nleaf - li) * sizeof(m->leaf[0]));
	memmove(&keys(m)[li + 1], &keys(m)[li],
		(m->nleaf - li) * sizeof(keys(m)[0]));
	m->leaf[li] = l;
	keys(m)[li] = l->n ? l->e[0].off : 0;
	m->nleaf++;
}

/* An emptied leaf is kept as a spare when a slot is free: a punch that
 * empties a map of one small leaf (which has no spares) is followed by the
 * insert that needs a leaf again. */
static void leaf_remove_from_top(struct extmap *m, uint32_t li)
{
	int i = 0;

	while (i < EXTMAP_SPARES && spares(m)[i])
		i++;
	if (i < EXTMAP_SPARES) {
		spares(m)[i] = m->leaf[li];
	} else {
		mem_add(m, 0, leaf_bytes(m->leaf[li]->cap));
		free(m->leaf[li]);
	}
	memmove(&m->leaf[li], &m->leaf[li + 1],
		(m->nleaf - li - 1) * sizeof(m->leaf[0]));
	memmove(&keys(m)[li], &keys(m)[li + 1],
		(m->nleaf - li - 1) * sizeof(keys(m)[0]));
	m->nleaf--;
}

/* The first key of leaf @li changed (or may have). */
static inline void fix_key(struct extmap *m, uint32_t li)
{
	if (li < m->nleaf && m->leaf[li]->n)
		keys(m)[li] = m->leaf[li]->e[0].off;
}

/* Put @e at position (li, i), splitting the leaf when full. */
static void put_at(struct extmap *m, uint32_t li, uint32_t i,
		   const struct ext *e)
{
	struct extmap_leaf *l;

	if (m->nleaf == 0) {
		l = take_spare(m);
		leaf_insert_at_top(m, 0, l);
		li = 0;
		i = 0;
	}
	l = m->leaf[li];
	if (l->n == l->cap && li + 1 == m->nleaf && i == l->n) {
		/* An append to the last leaf starts the next one: a map
		 * loaded or written in order fills its leaves whole instead
		 * of leaving each split half empty. */
		struct extmap_leaf *r = take_spare(m);

		COIL_ASSERT(l->cap == EXTMAP_LEAF_MAX &&
			    r->cap == EXTMAP_LEAF_MAX);
		leaf_insert_at_top(m, li + 1, r);
		l = r;
		li++;
		i = 0;
	} else if (l->n == l->cap) {
		struct extmap_leaf *r = take_spare(m);
		uint32_t half = EXTMAP_LEAF_MAX / 2;

		/* only whole leaves split (extmap_reserve) */
		COIL_ASSERT(l->cap == EXTMAP_LEAF_MAX &&
			    r->cap == EXTMAP_LEAF_MAX);
		memcpy(r->e, &l->e[half], (l->n - half) * sizeof(l->e[0]));
		r->n = l->n - half;
		l->n = half;
		leaf_insert_at_top(m, li + 1, r);
		if (i > half) {
			l = r;
			li++;
			i -= half;
		}
	}
	COIL_ASSERT(i <= l->n);
	memmove(&l->e[i + 1], &l->e[i], (l->n - i) * sizeof(l->e[0]));
	l->e[i] = *e;
	l->n++;
	m->n++;
	acct_add(m, e);
	span_add(m, e);
	if (i == 0)
		fix_key(m, li);
}

/* Index of the last leaf whose first extent starts at or before @off, or 0.
 * Searches the dense key array: touching each leaf's first extent instead
 * cost a cache miss per step (measured: 2.4 us per 4 KiB overwrite of a
 * 130k-extent map, most of it here). */
static uint32_t find_leaf(const struct extmap *m, uint64_t off)
{
	uint32_t lo = 0, hi = m->nleaf;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (keys(m)[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* The interpolation guess for @off in leaf @li of @n extents: *@g.
 * @return false where there is none (a short leaf, the last one, or @off
 * outside the leaf's key range). */
static bool leaf_guess(const struct extmap *m, uint32_t li, uint32_t n,
		       uint64_t off, uint32_t *g)
{
	if (n <= 4 || li + 1 >= m->nleaf || off < keys(m)[li] ||
	    off >= keys(m)[li + 1])
		return false;
	uint64_t per = (keys(m)[li + 1] - keys(m)[li]) / n;
	uint64_t g64 = per ? (off - keys(m)[li]) / per : 0;

	*g = (uint32_t)COIL_MIN(g64, (uint64_t)n - 1);
	return true;
}

/* First index in leaf @li whose extent ends after @off.
 *
 * A leaf is 1.5 KiB: a plain binary search in it is ~5 dependent cache
 * misses, the largest part of a random 4 KiB read's map lookup (measured:
 * extmap_iter_init 7-9 % of the fio randread profile).  The leaf's extents
 * lie in [key[li], key[li + 1]), and a map written in blob-sized pieces
 * spaces them evenly, so first guess the index by interpolation and check
 * it and its neighbour (one or two lines); only if the guess is off does
 * the binary search run, on the side of the guess the answer is on. */
static uint32_t leaf_lower_end(const struct extmap *m, uint32_t li,
			       uint64_t off)
{
	const struct extmap_leaf *l = m->leaf[li];
	uint32_t lo = 0, hi = l->n, g;

	if (leaf_guess(m, li, hi, off, &g)) {
		if (l->e[g].off + l->e[g].len <= off) {
			/* the answer is after g */
			lo = g + 1;
			if (lo < hi && l->e[lo].off + l->e[lo].len > off)
				return lo;
		} else {
			/* the answer is g or before it */
			if (g == 0 || l->e[g - 1].off + l->e[g - 1].len <= off)
				return g;
			hi = g;
		}
	}
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (l->e[mid].off + l->e[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint32_t extmap_prefetch(const struct extmap *m, uint64_t off, int stage,
			 uint32_t li)
{
	const struct extmap_leaf *l;
	uint32_t g;

	if (is_one(m)) {
		if (stage == 2 && m->one.off <= off &&
		    off < m->one.off + m->one.len)
			__builtin_prefetch(m->one.b);
		return 0;
	}
	if (m->nleaf == 0)
		return 0;
	if (stage == 0) {
		li = find_leaf(m, off);
		__builtin_prefetch(m->leaf[li]);
		return li;
	}
	/* the map may have changed shape since stage 0: any leaf will do,
	 * the wrong one costs only a useless prefetch */
	if (li >= m->nleaf)
		return li;
	l = m->leaf[li];
	if (!leaf_guess(m, li, l->n, off, &g))
		g = l->n / 2;
	if (g >= l->n)
		return li;
	if (stage == 1) {
		__builtin_prefetch(&l->e[g]);
		if (g > 0)
			__builtin_prefetch(&l->e[g - 1]);
	} else if (l->e[g].off <= off && off < l->e[g].off + l->e[g].len) {
		/* the blob an overwrite of @off will drop */
		__builtin_prefetch(l->e[g].b);
	}
	return li;
}

static void drop_piece(extmap_drop_fn drop, void *arg, struct blobd *b,
		       uint32_t len)
{
	if (drop)
		drop(arg, b, len);
}

/* @e loses its first @cut bytes (dropped through @drop). */
static void ext_cut_front(struct extmap *m, struct ext *e, uint32_t cut,
			  extmap_drop_fn drop, void *arg)
{
	drop_piece(drop, arg, e->b, cut);
	span_sub(m, e);
	e->off += cut;
	e->skip += cut;
	e->len -= cut;
	span_add(m, e);
}

/* @e keeps its first @keep bytes (the rest dropped through @drop). */
static void ext_cut_back(struct extmap *m, struct ext *e, uint32_t keep,
			 extmap_drop_fn drop, void *arg)
{
	drop_piece(drop, arg, e->b, e->len - keep);
	span_sub(m, e);
	e->len = keep;
	span_add(m, e);
}

/* The inline extent: set (the map was empty, no leaf array) or dropped
 * whole (reported through @drop, its reference released). */
static void one_put(struct extmap *m, const struct ext *e)
{
	COIL_ASSERT(!m->leaf && m->n == 0);
	m->one = *e;
	m->n = 1;
	acct_add(m, e);
	span_add(m, e);
}

static void one_drop(struct extmap *m, extmap_drop_fn drop, void *arg)
{
	COIL_ASSERT(is_one(m));
	drop_piece(drop, arg, m->one.b, m->one.len);
	span_sub(m, &m->one);
	acct_sub(m, &m->one);
	blobd_unref(m->one.b);
	memset(&m->one, 0, sizeof(m->one));
	m->n = 0;
}

/* Punch [off, end) out of the inline extent where it stays one extent (or
 * none).  @return false when it would split it in two: the caller moves it
 * into a leaf first. */
static bool one_punch(struct extmap *m, uint64_t off, uint64_t end,
		      extmap_drop_fn drop, void *arg)
{
	struct ext *e = &m->one;
	uint64_t e_end = e->off + e->len;

	if (end <= e->off || off >= e_end)
		return true;
	if (off <= e->off && end >= e_end) {
		one_drop(m, drop, arg);
		return true;
	}
	if (off > e->off && end < e_end)
		return false;
	if (off <= e->off) /* the left part goes: keep [end, e_end) */
		ext_cut_front(m, e, (uint32_t)(end - e->off), drop, arg);
	else /* the right part goes: keep [e->off, off) */
		ext_cut_back(m, e, (uint32_t)(off - e->off), drop, arg);
	return true;
}

static void punch_reserved(struct extmap *m, uint64_t off, uint64_t len,
			   extmap_drop_fn drop, void *arg)
{
	uint64_t end;
	uint32_t li, i;

	if (len == 0 || m->nleaf == 0)
		return;
	end = off + len < off ? UINT64_MAX : off + len;
	li = find_leaf(m, off);
	i = leaf_lower_end(m, li, off);
	while (li < m->nleaf) {
		struct extmap_leaf *l = m->leaf[li];

		while (i < l->n) {
			struct ext *e = &l->e[i];
			uint64_t e_end = e->off + e->len;

			if (e->off >= end) {
				fix_key(m, li);
				return;
			}
			if (e->off < off && e_end > end) {
				/* The punch falls inside one extent: keep
				 * both sides, the right one a new extent of
				 * the same blob. */
				struct ext r = *e;
				uint32_t cut = (uint32_t)(end - e->off);

				r.off = end;
				r.skip += cut;
				r.len = (uint32_t)(e_end - end);
				blobd_ref(r.b);
				span_sub(m, e);
				e->len = (uint32_t)(off - e->off);
				span_add(m, e);
				drop_piece(drop, arg, e->b, (uint32_t)(end - off));
				put_at(m, li, i + 1, &r);
				fix_key(m, li);
				return;
			}
			if (e->off < off) {
				ext_cut_back(m, e, (uint32_t)(off - e->off),
					     drop, arg);
				i++;
				continue;
			}
			if (e_end > end) {
				ext_cut_front(m, e, (uint32_t)(end - e->off),
					      drop, arg);
				fix_key(m, li);
				return;
			}
			drop_piece(drop, arg, e->b, e->len);
			span_sub(m, e);
			acct_sub(m, e);
			blobd_unref(e->b);
			memmove(&l->e[i], &l->e[i + 1],
				(l->n - i - 1) * sizeof(l->e[0]));
			l->n--;
			m->n--;
		}
		if (l->n == 0) {
			leaf_remove_from_top(m, li);
		} else {
			fix_key(m, li);
			li++;
		}
		i = 0;
	}
}

int extmap_punch(struct extmap *m, uint64_t off, uint64_t len,
		 extmap_drop_fn drop, void *arg)
{
	int rc;

	if (!m->leaf) {
		uint64_t end = off + len < off ? UINT64_MAX : off + len;

		if (m->n == 0 || len == 0 ||
		    one_punch(m, off, end, drop, arg))
			return 0;
	}
	rc = extmap_reserve(m);
	if (rc < 0)
		return rc;
	punch_reserved(m, off, len, drop, arg);
	return 0;
}

int extmap_insert(struct extmap *m, const struct ext *e, extmap_drop_fn drop,
		  void *arg)
{
	uint32_t li, i;
	int rc;

	if (!e || e->len == 0 || e->off + e->len < e->off)
		return -EINVAL;
	if (!m->leaf && m->n == 0) {
		/* a map that never held more than this one: inline */
		one_put(m, e);
		return 0;
	}
	if (is_one(m) && e->off <= m->one.off &&
	    e->off + e->len >= m->one.off + m->one.len) {
		/* it shadows the one extent whole (a small object written
		 * again): it takes its place */
		one_drop(m, drop, arg);
		one_put(m, e);
		return 0;
	}
	rc = extmap_reserve(m);
	if (rc < 0)
		return rc;
	if (m->nleaf) {
		/* At or past the map's end (a checkpoint's load, an append):
		 * nothing to punch and no search. */
		struct extmap_leaf *l = m->leaf[m->nleaf - 1];

		COIL_ASSERT(l->n > 0); /* an emptied leaf leaves the top */
		if (l->e[l->n - 1].off + l->e[l->n - 1].len <= e->off) {
			put_at(m, m->nleaf - 1, l->n, e);
			return 0;
		}
	}
	punch_reserved(m, e->off, e->len, drop, arg);
	if (m->nleaf == 0) {
		put_at(m, 0, 0, e);
		return 0;
	}
	li = find_leaf(m, e->off);
	i = leaf_lower_end(m, li, e->off);
	put_at(m, li, i, e);
	return 0;
}

void extmap_destroy(struct extmap *m, extmap_drop_fn drop, void *arg)
{
	if (is_one(m))
		one_drop(m, drop, arg);
	for (uint32_t li = 0; li < m->nleaf; li++) {
		struct extmap_leaf *l = m->leaf[li];
		for (uint32_t i = 0; i < l->n; i++) {
			drop_piece(drop, arg, l->e[i].b, l->e[i].len);
			span_sub(m, &l->e[i]);
			acct_sub(m, &l->e[i]);
			blobd_unref(l->e[i].b);
		}
		mem_add(m, 0, leaf_bytes(l->cap));
		free(l);
	}
	if (m->leaf) {
		for (int i = 0; i < EXTMAP_SPARES; i++) {
			if (spares(m)[i])
				mem_add(m, 0, leaf_bytes(spares(m)[i]->cap));
			free(spares(m)[i]);
		}
		mem_add(m, 0, array_bytes(m->cap));
		free(m->leaf); /* and the keys after it */
	}
	memset(m, 0, sizeof(*m));
}

void extmap_iter_init(struct extmap_iter *it, const struct extmap *m,
		      uint64_t off)
{
	it->m = m;
	it->li = 0;
	it->i = 0;
	if (is_one(m)) {
		/* i counts the inline extent as passed */
		it->i = m->one.off + m->one.len <= off;
		return;
	}
	if (m->nleaf == 0)
		return;
	it->li = find_leaf(m, off);
	it->i = leaf_lower_end(m, it->li, off);
}

const struct ext *extmap_iter_next(struct extmap_iter *it)
{
	const struct extmap *m = it->m;

	if (is_one(m)) {
		if (it->i)
			return NULL;
		it->i = 1;
		return &m->one;
	}
	while (it->li < m->nleaf) {
		const struct extmap_leaf *l = m->leaf[it->li];
		if (it->i < l->n)
			return &l->e[it->i++];
		it->li++;
		it->i = 0;
	}
	return NULL;
}

uint64_t extmap_end(const struct extmap *m)
{
	const struct extmap_leaf *l;

	if (is_one(m))
		return m->one.off + m->one.len;
	if (m->nleaf == 0)
		return 0;
	l = m->leaf[m->nleaf - 1];
	return l->e[l->n - 1].off + l->e[l->n - 1].len;
}
