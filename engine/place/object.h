/* engine/place/object.h — the object table: objects by name and by id,
 * each with its extent map.  Under s->mlock. */
#ifndef COIL_ENGINE_OBJECT_H
#define COIL_ENGINE_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/place/extmap.h"

struct coil_store;
struct jent;

/* What changed in an object since the last checkpoint (log/ckpt.c writes
 * only that in a delta).  Under mlock. */
enum obj_dirty { OBJ_CLEAN = 0, OBJ_DIRTY_RANGES, OBJ_DIRTY_ALL };

struct obj_range {
	uint64_t lo, hi;
};

struct object {
	uint64_t id;
	uint64_t size;
	struct extmap map;
	char *name;
	uint16_t name_len;
	bool removed;
	bool name_detached;    /* out of the name table (objtab_name_detach) */
	uint32_t refs;         /* table link + handles + requests; under mlock */
	/* Writes and truncates of this object take their journal tickets in
	 * the order they were submitted (journal_turn); under jlock. */
	uint64_t turn_next;     /* the next submission's place */
	uint64_t turn_done;     /* places that have taken their ticket */
	uint32_t turn_waiters;  /* truncates waiting for their place */
	/* the name's hash (name_hash): unlinking finds the slot by it, and
	 * a growth of the name table does not rehash */
	uint32_t name_h;
	struct jent *turn_parked; /* encoded writes waiting for theirs */
	struct object *id_next;
	/* OBJ_DIRTY_RANGES: the byte ranges whose extents changed (and the
	 * size, which a delta always records), unsorted, merged when the
	 * array fills (obj_dirty_range) and when a delta is taken. */
	uint8_t dirty;
	uint32_t nrange, caprange;
	struct obj_range *range;
	/* the name it was created with, in its own allocation (name points
	 * here until a rename gives it one of its own) */
	char name_inl[];
};

/* A slot of the name table: the name's hash beside its object, so a probe
 * compares hashes without touching an object (NULL: empty). */
struct name_slot {
	uint32_t h;
	struct object *o;
};

int objtab_init(struct coil_store *s);
/* Size the tables for @n objects at once (a checkpoint's load knows its
 * count): no chain of doublings, each rehashing every object. */
void objtab_reserve(struct coil_store *s, uint64_t n);
/* Call @fn(@arg, o, e) for every extent of every object, in no order.
 * mlock held (or single-threaded); @fn must not change the table. */
void objtab_each_extent(struct coil_store *s,
			void (*fn)(void *arg, struct object *o,
				   const struct ext *e),
			void *arg);
void objtab_destroy(struct coil_store *s);
struct object *objtab_find_name(struct coil_store *s, const char *name,
				size_t len);
struct object *objtab_find_id(struct coil_store *s, uint64_t id);
/* Create and link an object (refs = 1 for the table).  -ENOMEM. */
int objtab_add(struct coil_store *s, uint64_t id, const char *name,
	       size_t len, struct object **out);
/* objtab_add without linking the name: a checkpoint's load adds its
 * objects so and links the names of all of them at once. */
int objtab_add_unnamed(struct coil_store *s, uint64_t id, const char *name,
		       size_t len, struct object **out);
/* Link the names of objects added unnamed, @ents[0..n) each { name_h,
 * object } (reordered here): in the order of their slots, so the table is
 * written front to back rather than at a random line per name, and no
 * object is touched but where two hashes match.  @return 0, or -EIO when
 * a name is there twice (or already linked). */
int objtab_link_names(struct coil_store *s, struct name_slot *ents,
		      uint64_t n);
/* Unlink a removed object; its extents are dropped through @drop (@arg:
 * the store), so the caller decides who else hears of them. */
void objtab_unlink(struct coil_store *s, struct object *o,
		   extmap_drop_fn drop);
void object_put(struct coil_store *s, struct object *o);
/* Give @o the name @name (the caller made sure no other object holds it).
 * 0, -EINVAL, -ENOMEM (nothing changed). */
int objtab_rename(struct coil_store *s, struct object *o, const char *name,
		  size_t len);
/* Take @o out of the name table until objtab_rename gives it a name again
 * or it is removed: loading a delta in which objects traded names. */
void objtab_name_detach(struct coil_store *s, struct object *o);

/* ---- what changed since the last checkpoint ------------------------------
 *
 * Every change to an object's extents or size is reported here by the code
 * that applies it (log/meta.c: writes, truncates, relocations, live and in
 * replay); creates and removes by the table itself.  The store keeps the
 * ids of changed objects (s->dirty_ids); a removed one is found missing when
 * the delta is taken.  Running out of memory here is never an error: the
 * next checkpoint is then a whole one (s->ck_base_next). */
void obj_dirty_range(struct coil_store *s, struct object *o, uint64_t lo,
		     uint64_t hi);
/* Sort and merge @o's ranges; @return how many remain. */
uint32_t obj_dirty_normalize(struct object *o);
/* Forget @o's changes (a checkpoint has them). */
void obj_dirty_clear(struct object *o);
/* Forget every change of every object (after a whole checkpoint, or after
 * loading one). */
void objtab_dirty_reset(struct coil_store *s);

#endif
