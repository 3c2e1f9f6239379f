/* engine/place/object.c — the object table: objects by name and by id.
 *
 * Two hash tables over the same objects, grown by doubling, all under
 * s->mlock.  By id: chains, which every walk of the objects follows.  By
 * name: open addressing with linear probing, each slot the name's hash
 * beside its object, at most three quarters full; a lookup reads a line or
 * two of the table and touches an object only where the hash matches.  A
 * checkpoint's load links its names all at once in slot order (a name
 * twice is damage): looked up one by one in random order, with chains,
 * each lookup walked the objects of its bucket, a cache and a TLB miss
 * each in a heap of hundreds of MB (30 % of an open of 1.1 million
 * objects).  An object lives while its table link, open handles or
 * requests in flight hold a reference; a removed object is unlinked at once
 * (its name is free for a new object) and freed on the last put. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/place/extmap.h"
#include "engine/place/dict.h"
#include "engine/place/object.h"
#include "engine/store.h"

static uint32_t name_hash(const char *name, size_t len)
{
	return (uint32_t)fmt_csum(name, len);
}

/* Ids are handed out in order (next_obj_id), so the id itself spreads
 * them evenly over a power-of-two table, and objects made one after the
 * other share cache lines of it: replay and checkpoint loads look ids up
 * in nearly the order they were made.  A mixing hash sent each lookup to
 * a cold line: replaying 60,756 records (40,000 objects created after a
 * checkpoint of 110,000), 6 alternated opens, took a median 0.102 s with
 * it and 0.093 s with the id. */
static uint64_t id_hash(uint64_t id)
{
	return id;
}

int objtab_init(struct coil_store *s)
{
	s->tab_cap = 256;
	s->name_cap = 2 * s->tab_cap;
	s->by_name = calloc(s->name_cap, sizeof(*s->by_name));
	s->by_id = calloc(s->tab_cap, sizeof(*s->by_id));
	if (!s->by_name || !s->by_id)
		return -ENOMEM;
	s->nobj = 0;
	return 0;
}

static void object_free(struct coil_store *s, struct object *o)
{
	extmap_destroy(&o->map, o->removed ? NULL : seg_drop_live, s);
	free(o->range);
	if (o->name != o->name_inl)
		free(o->name);
	free(o);
}

/* ---- what changed since the last checkpoint ------------------------------ */

/* A change to @o: its id joins the list the next delta walks. */
static void dirty_note(struct coil_store *s, struct object *o)
{
	if (o->dirty != OBJ_CLEAN)
		return;
	if (s->ndirty == s->capdirty) {
		size_t cap = s->capdirty ? 2 * s->capdirty : 256;
		uint64_t *p = realloc(s->dirty_ids, cap * sizeof(*p));

		if (!p) {
			s->ck_base_next = true;
			return;
		}
		s->dirty_ids = p;
		s->capdirty = cap;
	}
	s->dirty_ids[s->ndirty++] = o->id;
}

static void dirty_all(struct coil_store *s, struct object *o)
{
	dirty_note(s, o);
	o->dirty = OBJ_DIRTY_ALL;
	free(o->range);
	o->range = NULL;
	o->nrange = o->caprange = 0;
}

static int range_cmp(const void *a, const void *b)
{
	const struct obj_range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

uint32_t obj_dirty_normalize(struct object *o)
{
	uint32_t n = 0;

	if (o->nrange < 2)
		return o->nrange;
	qsort(o->range, o->nrange, sizeof(*o->range), range_cmp);
	for (uint32_t i = 1; i < o->nrange; i++) {
		if (o->range[i].lo <= o->range[n].hi) {
			if (o->range[i].hi > o->range[n].hi)
				o->range[n].hi = o->range[i].hi;
		} else {
			o->range[++n] = o->range[i];
		}
	}
	o->nrange = n + 1;
	return o->nrange;
}

void obj_dirty_range(struct coil_store *s, struct object *o, uint64_t lo,
		     uint64_t hi)
{
	struct obj_range *last;

	if (o->dirty == OBJ_DIRTY_ALL)
		return;
	dirty_note(s, o);
	o->dirty = OBJ_DIRTY_RANGES;
	/* Sequential writes extend the last range. */
	last = o->nrange ? &o->range[o->nrange - 1] : NULL;
	if (last && lo <= last->hi && hi >= last->lo) {
		last->lo = COIL_MIN(last->lo, lo);
		last->hi = COIL_MAX(last->hi, hi);
		return;
	}
	if (o->nrange == o->caprange) {
		/* Merge first; grow only if that left the array 3/4 full,
		 * so it holds at most twice the distinct ranges. */
		if (o->caprange == 0 ||
		    obj_dirty_normalize(o) > o->caprange / 4 * 3) {
			uint32_t cap = o->caprange ? 2 * o->caprange : 4;
			struct obj_range *p = realloc(o->range,
						      cap * sizeof(*p));

			if (!p) {
				dirty_all(s, o);
				return;
			}
			o->range = p;
			o->caprange = cap;
		}
	}
	o->range[o->nrange++] = (struct obj_range){ lo, hi };
}

void obj_dirty_clear(struct object *o)
{
	o->dirty = OBJ_CLEAN;
	o->nrange = 0;
	if (o->caprange > 64) {
		free(o->range);
		o->range = NULL;
		o->caprange = 0;
	}
}

void objtab_dirty_reset(struct coil_store *s)
{
	for (uint32_t b = 0; b < s->tab_cap; b++)
		for (struct object *o = s->by_id[b]; o; o = o->id_next)
			obj_dirty_clear(o);
	s->ndirty = 0;
	s->ck_base_next = false;
}

void objtab_destroy(struct coil_store *s)
{
	if (s->by_id) {
		for (uint32_t i = 0; i < s->tab_cap; i++) {
			struct object *o = s->by_id[i];
			while (o) {
				struct object *n = o->id_next;
				o->removed = true; /* no live accounting */
				object_free(s, o);
				o = n;
			}
		}
	}
	free(s->by_name);
	free(s->by_id);
	s->by_name = NULL;
	s->by_id = NULL;
	free(s->dirty_ids);
	s->dirty_ids = NULL;
	s->ndirty = s->capdirty = 0;
}

static void tab_resize(struct coil_store *s, uint32_t ncap)
{
	struct object **bi = calloc(ncap, sizeof(*bi));

	if (!bi)
		return; /* longer chains, not a failure */
	for (uint32_t i = 0; i < s->tab_cap; i++) {
		struct object *o = s->by_id[i];
		while (o) {
			struct object *n = o->id_next;
			uint64_t h = id_hash(o->id) & (ncap - 1);
			o->id_next = bi[h];
			bi[h] = o;
			o = n;
		}
	}
	free(s->by_id);
	s->by_id = bi;
	s->tab_cap = ncap;
}

/* ---- the name table ----------------------------------------------------- */

/* The slot of @o (linked), or of the first empty slot @h's probe meets. */
static uint32_t name_slot_of(const struct coil_store *s, uint32_t h,
			     const struct object *o)
{
	uint32_t mask = s->name_cap - 1, i = h & mask;

	while (s->by_name[i].o && s->by_name[i].o != o)
		i = (i + 1) & mask;
	return i;
}

static void name_put(struct name_slot *t, uint32_t cap, struct object *o)
{
	uint32_t mask = cap - 1, i = o->name_h & mask;

	while (t[i].o)
		i = (i + 1) & mask;
	t[i] = (struct name_slot){ .h = o->name_h, .o = o };
}

/* Grow the name table to @ncap slots.  @return false on ENOMEM (the table
 * is unchanged; the caller may go on only while a slot stays empty). */
static bool name_resize(struct coil_store *s, uint32_t ncap)
{
	struct name_slot *t = calloc(ncap, sizeof(*t));

	if (!t)
		return false;
	for (uint32_t i = 0; i < s->name_cap; i++)
		if (s->by_name[i].o)
			name_put(t, ncap, s->by_name[i].o);
	free(s->by_name);
	s->by_name = t;
	s->name_cap = ncap;
	return true;
}

/* Make room for one more name: at most three quarters of the slots used,
 * at least one empty (so every probe ends) even when growing failed.
 * @return 0 or -ENOMEM. */
static int name_room(struct coil_store *s, uint64_t used)
{
	if ((used + 1) * 4 <= (uint64_t)s->name_cap * 3 ||
	    s->name_cap >= (1u << 31))
		return used + 1 < s->name_cap ? 0 : -ENOMEM;
	if (name_resize(s, s->name_cap * 2) || used + 1 < s->name_cap)
		return 0;
	return -ENOMEM;
}

/* Link @o (o->name_h set) into the name table (name_room said yes). */
static void name_link(struct coil_store *s, struct object *o)
{
	name_put(s->by_name, s->name_cap, o);
}

/* Take @o out of the name table (its name stays in o->name): its slot is
 * emptied and the probe run after it shifted back, so no lookup needs a
 * tombstone to go on past it. */
static void name_unlink(struct coil_store *s, struct object *o)
{
	uint32_t mask = s->name_cap - 1;
	uint32_t i = name_slot_of(s, o->name_h, o), j = i;

	COIL_ASSERT(s->by_name[i].o == o);
	for (;;) {
		uint32_t home;

		j = (j + 1) & mask;
		if (!s->by_name[j].o)
			break;
		home = s->by_name[j].h & mask;
		/* Slot j's entry may move to the hole at i only if its
		 * home is not in (i, j], cyclically. */
		if (i <= j ? (home > i && home <= j) : (home > i || home <= j))
			continue;
		s->by_name[i] = s->by_name[j];
		i = j;
	}
	s->by_name[i] = (struct name_slot){ 0 };
}

void objtab_reserve(struct coil_store *s, uint64_t n)
{
	uint64_t cap = s->tab_cap, ncap = s->name_cap;

	/* the same load factors as objtab_add keeps (ids: at most one per
	 * bucket; names: at most three quarters of the slots), within the
	 * u32 the capacities are */
	while (cap < n && cap < (1ull << 31))
		cap *= 2;
	if (cap > s->tab_cap)
		tab_resize(s, (uint32_t)cap);
	while (ncap * 3 < 4 * n && ncap < (1ull << 31))
		ncap *= 2;
	if (ncap > s->name_cap)
		(void)name_resize(s, (uint32_t)ncap);
}

struct object *objtab_find_name(struct coil_store *s, const char *name,
				size_t len)
{
	uint32_t h = name_hash(name, len), mask = s->name_cap - 1;

	for (uint32_t i = h & mask; s->by_name[i].o; i = (i + 1) & mask) {
		struct object *o = s->by_name[i].o;

		if (s->by_name[i].h == h && o->name_len == len &&
		    !memcmp(o->name, name, len))
			return o;
	}
	return NULL;
}

struct object *objtab_find_id(struct coil_store *s, uint64_t id)
{
	struct object *o = s->by_id[id_hash(id) & (s->tab_cap - 1)];

	for (; o; o = o->id_next)
		if (o->id == id)
			return o;
	return NULL;
}

static int objtab_add_as(struct coil_store *s, uint64_t id, const char *name,
			 size_t len, bool link, struct object **out)
{
	struct object *o;
	uint64_t h;

	if (len == 0 || len > COIL_NAME_MAX)
		return -EINVAL;
	if (name_room(s, s->nobj) < 0)
		return -ENOMEM;
	o = calloc(1, sizeof(*o) + len + 1);
	if (!o)
		return -ENOMEM;
	o->name = o->name_inl;
	memcpy(o->name, name, len);
	o->name[len] = 0;
	o->name_len = (uint16_t)len;
	o->id = id;
	o->refs = 1;
	extmap_init(&o->map, &s->ext_acct);
	if (s->nobj + 1 > (uint64_t)s->tab_cap)
		tab_resize(s, s->tab_cap * 2);
	o->name_h = name_hash(name, len);
	if (link)
		name_link(s, o);
	h = id_hash(id) & (s->tab_cap - 1);
	o->id_next = s->by_id[h];
	s->by_id[h] = o;
	s->nobj++;
	s->name_bytes += len;
	if (id >= s->next_obj_id)
		s->next_obj_id = id + 1;
	dirty_all(s, o);
	/* a dictionary's object: its name is its binding */
	dict_note(s, o);
	*out = o;
	return 0;
}

int objtab_add(struct coil_store *s, uint64_t id, const char *name,
	       size_t len, struct object **out)
{
	return objtab_add_as(s, id, name, len, true, out);
}

int objtab_add_unnamed(struct coil_store *s, uint64_t id, const char *name,
		       size_t len, struct object **out)
{
	return objtab_add_as(s, id, name, len, false, out);
}

/* Sort @e[0..n) by home slot (the low bits of h under @mask): two passes
 * of a radix sort through @tmp.  The hashes travel in the entries, so no
 * object is touched. */
static void sort_by_home(struct name_slot *e, struct name_slot *tmp,
			 uint64_t n, uint32_t mask)
{
	uint32_t bits = (uint32_t)__builtin_popcount(mask), lo = bits / 2;
	uint32_t hi = bits - lo;
	uint64_t *cnt = calloc((size_t)1 << (lo > hi ? lo : hi), sizeof(*cnt));
	struct name_slot *src = e, *dst = tmp;

	if (!cnt)
		return; /* unsorted: the links are the same, only slower */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t shift = pass ? lo : 0, w = pass ? hi : lo;
		uint64_t nb = (uint64_t)1 << w, sum = 0;

		memset(cnt, 0, nb * sizeof(*cnt));
		for (uint64_t i = 0; i < n; i++)
			cnt[((src[i].h & mask) >> shift) & (nb - 1)]++;
		for (uint64_t b = 0; b < nb; b++) {
			uint64_t c = cnt[b];

			cnt[b] = sum;
			sum += c;
		}
		for (uint64_t i = 0; i < n; i++)
			dst[cnt[((src[i].h & mask) >> shift) & (nb - 1)]++] =
				src[i];
		src = dst;
		dst = dst == tmp ? e : tmp;
	}
	free(cnt); /* after two passes the order is back in @e */
}

int objtab_link_names(struct coil_store *s, struct name_slot *ents,
		      uint64_t n)
{
	struct name_slot *tmp;
	uint32_t mask;

	if (n == 0)
		return 0;
	objtab_reserve(s, s->nobj + 1);
	mask = s->name_cap - 1;
	tmp = malloc(n * sizeof(*tmp));
	if (tmp)
		sort_by_home(ents, tmp, n, mask);
	free(tmp);
	for (uint64_t k = 0; k < n; k++) {
		const struct object *o = ents[k].o;
		uint32_t i = ents[k].h & mask;

		COIL_ASSERT(o->name_h == ents[k].h);
		for (; s->by_name[i].o; i = (i + 1) & mask) {
			const struct object *x = s->by_name[i].o;

			if (s->by_name[i].h == ents[k].h &&
			    x->name_len == o->name_len &&
			    !memcmp(x->name, o->name, o->name_len))
				return -EIO; /* one name twice */
		}
		s->by_name[i] = ents[k];
	}
	return 0;
}

void objtab_name_detach(struct coil_store *s, struct object *o)
{
	COIL_ASSERT(!o->removed && !o->name_detached);
	name_unlink(s, o);
	o->name_detached = true;
}

int objtab_rename(struct coil_store *s, struct object *o, const char *name,
		  size_t len)
{
	char *n;

	COIL_ASSERT(!o->removed);
	if (len == 0 || len > COIL_NAME_MAX)
		return -EINVAL;
	n = malloc(len + 1);
	if (!n)
		return -ENOMEM;
	memcpy(n, name, len);
	n[len] = 0;
	if (!o->name_detached)
		name_unlink(s, o);
	o->name_detached = false;
	s->name_bytes -= o->name_len;
	if (o->name != o->name_inl)
		free(o->name);
	o->name = n;
	o->name_len = (uint16_t)len;
	s->name_bytes += len;
	o->name_h = name_hash(name, len);
	name_link(s, o);
	/* a delta records a renamed object whole (name and extents) */
	dirty_all(s, o);
	return 0;
}

/* Unlink from both tables and drop the table's reference.  The extents are
 * released now (live bytes fall), even if handles still point at it. */
void objtab_unlink(struct coil_store *s, struct object *o,
		   extmap_drop_fn drop)
{
	struct object **pp;

	COIL_ASSERT(!o->removed);
	/* the next delta finds its id gone */
	dirty_note(s, o);
	obj_dirty_clear(o);
	o->dirty = OBJ_DIRTY_ALL; /* no more notes for it */
	if (!o->name_detached)
		name_unlink(s, o);
	pp = &s->by_id[id_hash(o->id) & (s->tab_cap - 1)];
	while (*pp != o)
		pp = &(*pp)->id_next;
	*pp = o->id_next;
	s->nobj--;
	s->name_bytes -= o->name_len;
	extmap_destroy(&o->map, drop, s);
	o->size = 0;
	o->removed = true;
	object_put(s, o);
}

void object_put(struct coil_store *s, struct object *o)
{
	COIL_ASSERT(o->refs > 0);
	if (--o->refs == 0) {
		COIL_ASSERT(o->removed);
		object_free(s, o);
	}
}

void objtab_each_extent(struct coil_store *s,
			void (*fn)(void *arg, struct object *o,
				   const struct ext *e),
			void *arg)
{
	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o; o = o->id_next) {
			struct extmap_iter it;
			const struct ext *e;

			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it)))
				fn(arg, o, e);
		}
	}
}
