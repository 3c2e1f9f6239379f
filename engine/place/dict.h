/* engine/place/dict.h — zstd dictionaries: trained by the optimizer per
 * cohort of objects (engine/optimize.c), stored as internal objects of the
 * store, loaded at open, used by every decode of a blob whose descriptor
 * names one.
 *
 * A dictionary is the whole content of an object named
 * COIL_NAME_RESERVED "d/<id>/<cohort>".  The name is the binding: it
 * reaches the disk in the object's CREATE record and in every checkpoint,
 * base or delta, like any name, so no other record is needed.  Callers
 * cannot name such an object (the reserved first byte is refused),
 * listing skips it, and it is never removed: a blob may name its
 * dictionary for as long as the blob exists.  Its bytes are read when the
 * store opens (or, in replay, when a blob that names it is first
 * verified); a dictionary that cannot be read stays unloaded and every
 * blob that names it reads as -EIO — never as other bytes (the blob's
 * checksum over its decoded bytes would catch a wrong dictionary too). */
#ifndef COIL_ENGINE_DICT_H
#define COIL_ENGINE_DICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

struct coil_store;
struct object;

/* Dictionary ids are 1..DICT_MAX - 1 (the table is indexed by id). */
#define DICT_MAX 4096u
/* The largest dictionary: bounds what a load reads. */
#define DICT_BYTES_MAX (256u << 10)
/* A cohort's name in the dictionary object's name. */
#define DICT_COHORT_MAX 200u
/* Dictionaries per cohort, at most: each blob of a cohort tries every
 * one of them (dict_pool), so the bound is also the cost of choosing. */
#define DICT_POOL_MAX 4u
/* "\x01d/" */
#define DICT_NAME_PREFIX "\x01" "d/"

struct dict {
	uint32_t id;
	uint64_t obj_id;
	struct object *obj;      /* its object: never removed, so it stays */
	uint32_t len;            /* its bytes, once loaded */
	char cohort[DICT_COHORT_MAX + 1];
	ZSTD_DDict *dd;          /* NULL: not loaded (yet, or it failed) */
	bool failed;             /* a load was tried and failed */
	/* the optimizer's encoders (its thread): one for the pass's level,
	 * one for the quick level that chooses among a cohort's pool */
	ZSTD_CDict *cd[2];
	int cd_level[2];
	unsigned cd_next;        /* the slot a third level replaces */
	uint8_t *bytes;          /* kept for the encoder (len of them) */
};

/* Cohorts judged not worth a dictionary, remembered (in memory) with the
 * bytes they held then, so a caller looping on coil_optimize does not
 * read and train on the same sample every call. */
#define DICT_REJECTS_MAX 64u

struct dict_reject {
	char cohort[DICT_COHORT_MAX + 1];
	uint64_t bytes;
};

/* The table, in struct coil_store. */
struct dicts {
	struct dict_reject rej[DICT_REJECTS_MAX]; /* mlock */
	uint32_t nrej, rej_next;                  /* mlock */
	struct dict *_Atomic tab[DICT_MAX];
	_Atomic uint32_t next_id; /* one past the largest id seen */
	_Atomic uint32_t count;  /* bound (their objects are in nobj) */
	_Atomic uint64_t bytes, loaded, failed;
};

void dict_destroy(struct coil_store *s);

/* The decoder dictionary of @id, or NULL (0, unknown, not loaded).
 * Lock-free: an entry is published whole, its dd set once. */
const ZSTD_DDict *dict_ddict(struct coil_store *s, uint32_t id);
/* Is @name (of @len bytes) an internal object's? */
static inline bool dict_name_internal(const char *name, size_t len)
{
	return len > 0 && name[0] == '\x01';
}

/* An object named @name was added to the table (objtab_add): a
 * dictionary's name notes its binding (not its bytes).  mlock held, or
 * single-threaded (load, replay). */
void dict_note(struct coil_store *s, struct object *o);
/* Read @id's bytes from its object now if they are not loaded (replay,
 * the end of recovery).  @return 0 or -EIO (unknown, unreadable). */
int dict_load(struct coil_store *s, uint32_t id);
/* dict_load for every noted dictionary; failures are counted. */
void dict_load_all(struct coil_store *s);
/* A dictionary the optimizer just wrote (its object @o, bytes @buf):
 * noted by the object's creation, loaded from @buf.  @return 0, -ENOMEM,
 * -EIO (not noted). */
int dict_publish(struct coil_store *s, uint32_t id, const void *buf,
		 uint32_t len);

/* The first path component of an object name (what a cohort is), cut at
 * DICT_COHORT_MAX bytes; "" without a '/'.  @return its length. */
size_t dict_cohort_of(const char *name, size_t len, char *out);
/* The loaded dictionaries of @cohort, at most DICT_POOL_MAX, by id, in
 * @out.  @return how many. */
unsigned dict_pool(struct coil_store *s, const char *cohort,
		   struct dict **out);
/* Was @cohort judged not worth a dictionary when it held more than half
 * of @bytes?  (Trained again once it has doubled.)  mlock held. */
bool dict_rejected(struct coil_store *s, const char *cohort, uint64_t bytes);
/* Remember that @cohort, holding @bytes, was not worth a dictionary (the
 * oldest entry goes when the list is full).  mlock held. */
void dict_reject_note(struct coil_store *s, const char *cohort,
		      uint64_t bytes);
/* @d's level-@level encoder (made on first use, kept for two levels).
 * NULL on ENOMEM. */
const ZSTD_CDict *dict_cdict(struct dict *d, int level);

#endif
