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

struct object {
	uint64_t id;
	uint64_t size;
	struct extmap map;
	char *name;
	uint16_t name_len;
	bool removed;
	uint32_t refs;         /* table link + handles + requests; under mlock */
	/* Writes and truncates of this object take their journal tickets in
	 * the order they were submitted (journal_turn); under jlock. */
	uint64_t turn_next;     /* the next submission's place */
	uint64_t turn_done;     /* places that have taken their ticket */
	uint32_t turn_waiters;  /* truncates waiting for their place */
	struct jent *turn_parked; /* encoded writes waiting for theirs */
	struct object *name_next;
	struct object *id_next;
};

int objtab_init(struct coil_store *s);
void objtab_destroy(struct coil_store *s);
struct object *objtab_find_name(struct coil_store *s, const char *name,
				size_t len);
struct object *objtab_find_id(struct coil_store *s, uint64_t id);
/* Create and link an object (refs = 1 for the table).  -ENOMEM. */
int objtab_add(struct coil_store *s, uint64_t id, const char *name,
	       size_t len, struct object **out);
/* Unlink a removed object; its extents are dropped through @drop (@arg:
 * the store), so the caller decides who else hears of them. */
void objtab_unlink(struct coil_store *s, struct object *o,
		   extmap_drop_fn drop);
void object_put(struct coil_store *s, struct object *o);

#endif
