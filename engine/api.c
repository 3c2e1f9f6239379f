/* engine/api.c — the public object and I/O calls: argument checks, handle
 * validation, the synchronous wrappers.  Every check here turns bad input
 * into a negative errno before any engine state is touched. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/batch.h"
#include "engine/cleaner.h"
#include "engine/io/read.h"
#include "engine/io/readahead.h"
#include "engine/io/wreq.h"
#include "engine/io/write.h"
#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/handle.h"
#include "engine/place/segment.h"
#include "engine/pack.h"
#include "engine/place/object.h"
#include "engine/scrub.h"
#include "engine/stats.h"
#include "engine/store.h"

/* Every call on a handle runs between handle_enter and handle_leave.
 * The caller's handle @ho names a slot and a generation (handle.c): a
 * closed handle is -EBADF whoever has the slot now, and never reaches
 * another object.  A close racing a call on another thread is either seen
 * by the call (-EBADF) or waits for it: the call counts itself in
 * h->inflight before it looks at the magic, coil_obj_close marks the magic
 * dead before it waits for h->inflight to drain (both sequentially
 * consistent, so at least one of them sees the other).  Only then does
 * close drop h->obj and free the slot. */
static int handle_enter(coil_obj *ho, struct coil_obj **out)
{
	struct coil_obj *h;
	uint32_t gen;

	if (!ho)
		return -EINVAL;
	h = handle_lookup(ho, &gen);
	if (!h)
		return -EBADF;
	atomic_fetch_add(&h->inflight, 1);
	if (__atomic_load_n(&h->magic, __ATOMIC_SEQ_CST) != HANDLE_MAGIC ||
	    atomic_load(&h->gen) != gen ||
	    __atomic_load_n(&h->obj->removed, __ATOMIC_ACQUIRE)) {
		COUNT_SUB(&h->inflight, 1);
		return -EBADF;
	}
	*out = h;
	return 0;
}

static void handle_leave(struct coil_obj *h)
{
	COUNT_SUB(&h->inflight, 1);
}

/* An open store and an object name of 1..COIL_NAME_MAX bytes before its
 * NUL.  @return 0 with the name's length in @len, or -EBADF / -EINVAL /
 * -ENAMETOOLONG. */
static int name_check(struct coil_store *s, const char *name, size_t *len)
{
	if (!store_valid(s))
		return -EBADF;
	*len = strnlen(name, COIL_NAME_MAX + 1);
	if (*len == 0 || (uint8_t)name[0] == COIL_NAME_RESERVED)
		return -EINVAL;
	if (*len > COIL_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* The engine's own objects (dictionaries): a reserved name is fine. */
static int name_check_open(struct coil_store *s, const char *name,
			   size_t *len, bool internal)
{
	if (!internal)
		return name_check(s, name, len);
	if (!store_valid(s))
		return -EBADF;
	*len = strnlen(name, COIL_NAME_MAX + 1);
	if (*len == 0 || *len > COIL_NAME_MAX ||
	    (uint8_t)name[0] != COIL_NAME_RESERVED)
		return -EINVAL;
	return 0;
}

/* May the store take a change?  -EROFS, or -EIO once a failed write broke
 * it: what broke it (-ENOSPC from the device, -ENOMEM applying a write) is
 * that write's own error and the stats' "broken"; to every later call the
 * store is simply one that accepts no more changes, as coil.h says. */
static int store_writable_check(struct coil_store *s)
{
	if (s->rdonly)
		return -EROFS;
	if (atomic_load(&s->broken))
		return -EIO;
	return 0;
}

static int obj_open(coil_store *s, const char *name, unsigned flags,
		    coil_obj **out, bool internal);

COIL_API int coil_obj_open(coil_store *s, const char *name, unsigned flags,
			   coil_obj **out)
{
	return obj_open(s, name, flags, out, false);
}

int engine_obj_open_internal(coil_store *s, const char *name, unsigned flags,
			     coil_obj **out)
{
	return obj_open(s, name, flags, out, true);
}

static int obj_open(coil_store *s, const char *name, unsigned flags,
		    coil_obj **out, bool internal)
{
	struct coil_obj *h;
	struct object *o;
	bool reserved = false;
	size_t len;
	int rc = 0;

	if (out)
		*out = NULL;
	if (!s || !name || !out)
		return -EINVAL;
	if (flags & ~(COIL_CREATE | COIL_EXCL | COIL_SHORTLIVED))
		return -EINVAL;
	if ((flags & COIL_EXCL) && !(flags & COIL_CREATE))
		return -EINVAL;
	rc = name_check_open(s, name, &len, internal);
	if (rc < 0)
		return rc;
	if ((flags & COIL_CREATE) && !s->rdonly) {
		rc = journal_reserve_meta(s, !engine_on_coil_thread(s));
		if (rc < 0)
			return rc;
		reserved = true;
	}
	rc = handle_alloc(&h);
	if (rc < 0) {
		if (reserved)
			journal_release_meta(s);
		return rc;
	}

	pthread_mutex_lock(&s->mlock);
	o = objtab_find_name(s, name, len);
	if (!o && (flags & COIL_CREATE) && !s->rdonly) {
		/* a batch that creates or renames onto it decides first */
		rc = batch_name_wait(s, name, len);
		o = objtab_find_name(s, name, len);
	}
	if (rc < 0) {
		/* a coil thread may not wait */
	} else if (o) {
		if (flags & COIL_EXCL)
			rc = -EEXIST;
	} else if (!(flags & COIL_CREATE)) {
		rc = -ENOENT;
	} else if (s->rdonly) {
		rc = -EROFS;
	} else if (atomic_load(&s->broken)) {
		rc = -EIO; /* as store_writable_check */
	} else {
		rc = meta_create(s, name, len, &o);
		if (rc == 0)
			reserved = false; /* the entry owns the slot now */
	}
	if (rc == 0) {
		o->refs++;
		h->s = s;
		h->obj = o;
		h->next = NULL;
		h->level = (flags & COIL_SHORTLIVED) && s->level ?
			   ENGINE_LEVEL_SHORTLIVED : s->level;
		__atomic_store_n(&h->magic, HANDLE_MAGIC, __ATOMIC_RELEASE);
		s->nhandles++;
	}
	pthread_mutex_unlock(&s->mlock);
	if (rc < 0)
		handle_free(h); /* never published */
	if (reserved)
		journal_release_meta(s);
	if (rc == 0) {
		journal_kick(s);
		/* without a stream the handle reads without
		 * readahead; not a reason to fail the open */
		readahead_open(h);
		*out = handle_public(h);
	}
	return rc;
}

COIL_API int coil_obj_close(coil_obj *ho)
{
	struct coil_store *s;
	struct coil_obj *h;
	uint32_t gen;

	if (!ho)
		return 0;
	h = handle_lookup(ho, &gen);
	if (!h)
		return -EBADF;
	/* Entered while it looks at h->s, so the slot's owner cannot close
	 * it (and its store) meanwhile; a removed object's handle closes. */
	atomic_fetch_add(&h->inflight, 1);
	if (__atomic_load_n(&h->magic, __ATOMIC_SEQ_CST) != HANDLE_MAGIC ||
	    atomic_load(&h->gen) != gen) {
		atomic_fetch_sub(&h->inflight, 1);
		return -EBADF;
	}
	s = h->s;
	if (engine_on_coil_thread(s)) {
		atomic_fetch_sub(&h->inflight, 1);
		return -EDEADLK;
	}
	pthread_mutex_lock(&s->mlock);
	if (h->magic != HANDLE_MAGIC) {
		pthread_mutex_unlock(&s->mlock);
		atomic_fetch_sub(&h->inflight, 1);
		return -EBADF; /* closed concurrently */
	}
	__atomic_store_n(&h->magic, HANDLE_MAGIC_DEAD, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&s->mlock);
	atomic_fetch_sub(&h->inflight, 1);
	/* calls that got past handle_enter, and their requests in flight */
	while (atomic_load(&h->inflight))
		usleep(100);
	/* cancel its readahead and wait for the prefetch I/O (the
	 * stream maps units through h->obj, so before the put) */
	readahead_close(h);
	pthread_mutex_lock(&s->mlock);
	object_put(s, h->obj);
	h->obj = NULL;
	COIL_ASSERT(s->nhandles > 0);
	s->nhandles--;
	pthread_mutex_unlock(&s->mlock);
	handle_free(h);
	return 0;
}

COIL_API int coil_obj_remove(coil_store *s, const char *name)
{
	struct object *o;
	size_t len;
	int rc;

	if (!s || !name)
		return -EINVAL;
	rc = name_check(s, name, &len);
	if (rc < 0)
		return rc;
	rc = store_writable_check(s);
	if (rc < 0)
		return rc;
	rc = journal_reserve_meta(s, !engine_on_coil_thread(s));
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&s->mlock);
	rc = batch_name_wait(s, name, len);
	o = rc == 0 ? objtab_find_name(s, name, len) : NULL;
	if (rc == 0)
		rc = o ? meta_remove(s, o) : -ENOENT;
	pthread_mutex_unlock(&s->mlock);
	if (rc < 0)
		journal_release_meta(s);
	else
		journal_kick(s);
	return rc;
}

static int obj_size(struct coil_obj *h, uint64_t *size)
{
	int rc = 0;

	if (!size)
		return -EINVAL;
	pthread_mutex_lock(&h->s->mlock);
	if (h->obj->removed)
		rc = -EBADF;
	else
		*size = h->obj->size;
	pthread_mutex_unlock(&h->s->mlock);
	return rc;
}

COIL_API int coil_obj_size(coil_obj *ho, uint64_t *size)
{
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	rc = obj_size(h, size);
	handle_leave(h);
	return rc;
}

static int obj_stat(struct coil_obj *h, struct coil_obj_info *info)
{
	int rc = 0;

	if (!info)
		return -EINVAL;
	pthread_mutex_lock(&h->s->mlock);
	if (h->obj->removed) {
		rc = -EBADF;
	} else {
		info->size = h->obj->size;
		info->mapped = h->obj->map.bytes;
		info->stored = h->obj->map.stored;
	}
	pthread_mutex_unlock(&h->s->mlock);
	return rc;
}

COIL_API int coil_obj_stat(coil_obj *ho, struct coil_obj_info *info)
{
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	rc = obj_stat(h, info);
	handle_leave(h);
	return rc;
}

static int obj_truncate(struct coil_obj *h, uint64_t size)
{
	int rc;

	if (size > ENGINE_OBJ_SIZE_MAX)
		return -EFBIG;
	rc = store_writable_check(h->s);
	if (rc < 0)
		return rc;
	if (engine_on_coil_thread(h->s))
		return -EDEADLK;
	readahead_on_truncate(h, size); /* cancel past the cut */
	return meta_truncate(h->s, h->obj, size);
}

COIL_API int coil_obj_truncate(coil_obj *ho, uint64_t size)
{
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	rc = obj_truncate(h, size);
	handle_leave(h);
	return rc;
}

static int io_args(const void *buf, size_t len, uint64_t off)
{
	uint64_t end;

	if (!buf && len)
		return -EINVAL;
	if (coil_add_overflows(off, len, &end))
		return -EINVAL;
	return 0;
}

static int write_submit(struct coil_obj *h, const void *buf, size_t len,
			uint64_t off, coil_cb cb, void *arg)
{
	int rc = io_args(buf, len, off);

	if (rc < 0)
		return rc;
	if (off + len > ENGINE_OBJ_SIZE_MAX)
		return -EFBIG;
	if (len > ENGINE_WRITE_MAX)
		return -EINVAL;
	rc = store_writable_check(h->s);
	if (rc < 0)
		return rc;
	return engine_write(h, buf, len, off, cb, arg);
}

COIL_API int coil_write(coil_obj *ho, const void *buf, size_t len, uint64_t off,
			coil_cb cb, void *arg)
{
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	rc = write_submit(h, buf, len, off, cb, arg);
	handle_leave(h);
	return rc;
}

static int read_submit(struct coil_obj *h, void *buf, size_t len,
		       uint64_t off, coil_cb cb, void *arg)
{
	int rc = io_args(buf, len, off);

	if (rc < 0)
		return rc;
	/* Reads of any length are fine: they are clipped to the object. */
	if (len > (size_t)ENGINE_OBJ_SIZE_MAX)
		len = (size_t)ENGINE_OBJ_SIZE_MAX;
	return engine_read(h, buf, len, off, cb, arg);
}

COIL_API int coil_read(coil_obj *ho, void *buf, size_t len, uint64_t off,
		       coil_cb cb, void *arg)
{
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	rc = read_submit(h, buf, len, off, cb, arg);
	handle_leave(h);
	return rc;
}

COIL_API int coil_flush(coil_store *s, coil_cb cb, void *arg)
{
	if (!s || !cb)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	if (s->rdonly)
		return -EROFS;
	return journal_flush(s, cb, arg);
}

COIL_API int coil_prefetch(coil_obj *ho, uint64_t off, uint64_t len)
{
	uint64_t end;
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	if (coil_add_overflows(off, len, &end)) {
		rc = -EINVAL;
	} else {
		/* admitted through the handle's readahead stream
		 * (dropped when prefetch or the cache is off, which the API
		 * allows) */
		stat_add(&h->s->st.prefetch_hints, 1);
		rc = readahead_hint(h, off, len);
	}
	handle_leave(h);
	return rc;
}

/* ---- synchronous wrappers ------------------------------------------------ */

/* A synchronous call waits for a callback that a coil thread would have to
 * run itself: refuse it there.  The handle stays entered until the
 * request completes (a close waits for it). */
COIL_API int64_t coil_pwrite(coil_obj *ho, const void *buf, size_t len,
			     uint64_t off)
{
	struct store_waiter w;
	int64_t ret;
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	if (engine_on_coil_thread(h->s)) {
		handle_leave(h);
		return -EDEADLK;
	}
	store_waiter_init(&w);
	engine_tls_waiter = &w;
	rc = write_submit(h, buf, len, off, store_waiter_cb, &w);
	engine_tls_waiter = NULL;
	ret = store_waiter_wait(&w, rc);
	handle_leave(h);
	return ret;
}

COIL_API int64_t coil_pread(coil_obj *ho, void *buf, size_t len, uint64_t off)
{
	int64_t ret;
	struct coil_obj *h = NULL;
	int rc = handle_enter(ho, &h);

	if (rc < 0)
		return rc;
	if (engine_on_coil_thread(h->s)) {
		handle_leave(h);
		return -EDEADLK;
	}
	rc = io_args(buf, len, off);
	if (rc < 0) {
		handle_leave(h);
		return rc;
	}
	/* as coil_read, but finished on this thread: a read the cache serves
	 * involves no other thread, a miss one hand-off (engine_pread) */
	if (len > (size_t)ENGINE_OBJ_SIZE_MAX)
		len = (size_t)ENGINE_OBJ_SIZE_MAX;
	ret = engine_pread(h, buf, len, off);
	handle_leave(h);
	return ret;
}

COIL_API int coil_sync(coil_store *s)
{
	if (!s)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	if (s->rdonly)
		return 0;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	return coil_sync_internal(s);
}

COIL_API int coil_compact(coil_store *s, uint64_t *returned)
{
	uint64_t r = 0;
	int rc;

	if (!s)
		return -EINVAL;
	rc = store_maint_check(s);
	if (rc < 0)
		return rc;
	/* Small writes still in memory first: packed, they take their
	 * share of a block and no longer pin anything in the journal. */
	rc = pack_now(s);
	if (rc == -ENOSPC)
		rc = 0; /* they stay where they are; nothing is lost */
	if (rc == 0)
		rc = coil_sync_internal(s);
	if (rc == 0)
		rc = cleaner_compact(s, &r);
	if (returned)
		*returned = r;
	return rc;
}

COIL_API int coil_stats_json_flags(coil_store *s, char *buf, size_t len,
				   unsigned flags)
{
	if (!s || (!buf && len) || (flags & ~COIL_STATS_SHARED))
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return engine_stats_json(s, buf, len, flags);
}

COIL_API int coil_stats_json(coil_store *s, char *buf, size_t len)
{
	return coil_stats_json_flags(s, buf, len, 0);
}

COIL_API int coil_stats_json_dup(coil_store *s, unsigned flags, char **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!s || (flags & ~COIL_STATS_SHARED))
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return engine_stats_json_text(s, flags, out);
}

COIL_API int coil_obj_list(coil_store *s, coil_list_fn fn, void *arg)
{
	struct item {
		uint64_t size;
		uint16_t len;
		char name[COIL_NAME_MAX + 1];
	} *items;
	uint64_t n = 0, cap;
	int rc = 0;

	if (!s || !fn)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	pthread_mutex_lock(&s->mlock);
	cap = s->nobj;
	items = malloc((size_t)COIL_MAX(cap, 1) * sizeof(*items));
	if (!items) {
		pthread_mutex_unlock(&s->mlock);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o && n < cap; o = o->id_next) {
			/* the engine's own objects are not the caller's */
			if (dict_name_internal(o->name, o->name_len))
				continue;
			items[n].size = o->size;
			items[n].len = o->name_len;
			memcpy(items[n].name, o->name, o->name_len);
			items[n].name[o->name_len] = 0;
			n++;
		}
	}
	pthread_mutex_unlock(&s->mlock);
	for (uint64_t i = 0; i < n && rc == 0; i++)
		rc = fn(arg, items[i].name, items[i].len, items[i].size);
	free(items);
	return rc;
}

/* ---- scrub and check (engine/scrub.c) ------------------------------------ */

COIL_API int coil_scrub_start(coil_store *s)
{
	if (!s)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return scrub_request(s);
}

COIL_API int coil_scrub_wait(coil_store *s)
{
	if (!s)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return scrub_wait(s);
}

COIL_API int coil_scrub_info(coil_store *s, struct coil_scrub_info *info)
{
	if (!s || !info)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return scrub_info(s, info);
}

COIL_API int coil_scrub_damage(coil_store *s, coil_damage_fn fn, void *arg)
{
	if (!s || !fn)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return scrub_damage(s, fn, arg);
}

COIL_API int coil_check(coil_store *s, coil_damage_fn fn, void *arg,
			struct coil_scrub_info *info)
{
	if (!s)
		return -EINVAL;
	if (!store_valid(s))
		return -EBADF;
	return scrub_check(s, fn, arg, info);
}
