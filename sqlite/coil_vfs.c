/* coil_vfs.c — SQLite VFS "coil": databases, journals and WALs as coil
 * objects.  See coil_vfs.h for how a database finds its store and
 * docs/sqlite.md for the design and the measurements.
 *
 * Shape:
 *   - one coil store per store path, opened on the first file that needs it
 *     and closed (flushed, checkpointed) when the last file on it closes;
 *     coil's store lock keeps every other process out, so one process owns
 *     the store and in-process locking is the whole locking story;
 *   - one node per object name open in a store, holding the SQLite lock
 *     state every connection to that object shares (like os_unix.c's inode
 *     info);
 *   - write-back per store (vfs_writeback.c): SQLite writes a journal
 *     record as three small writes (page number, page, checksum), a commit
 *     as ascending page runs, a cache spill as a journal record then one
 *     page; a synchronous coil write is a round trip through coil's threads
 *     (~0.3 ms on the shared 2-core box), and a spill would pay two.
 *     Writes are instead collected in order in an arena and sent when
 *     something needs them in coil: xSync, the end of a transaction
 *     (SQLITE_FCNTL_COMMIT_PHASETWO), truncate, delete, access, close, a
 *     full arena — or a journal/WAL write that rewrites bytes while other
 *     objects have writes pending.  A send issues the journal/WAL writes,
 *     waits, then the database writes, and waits: a page never reaches the
 *     store before the journal record that undoes it, and a journal header
 *     is never rewritten ahead of the pages it commits (docs/sqlite.md has
 *     the argument);
 *   - a chunk cache per store (vfs_cache.h), written through; a miss reads
 *     the chunk from coil and lays the arena's pending writes on top, so
 *     SQLite's page re-reads rarely cost a coil round trip and never force
 *     a send;
 *   - the WAL index on the heap (vfs_shm.c): one process owns the store,
 *     so WAL also works in normal locking mode between its connections.
 *
 * Temp databases and statement journals (and nameless files) go to the
 * default VFS: they never outlive the process, so keeping them in the store
 * would only cost store space and journal traffic.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#include "coil_vfs.h"
#include "coil_vfs_internal.h"
#include "vfs.h"
#include "vfs_cache.h"

#define VFS_NAME "coil"
#define VFS_PATHNAME_MAX 512
#define STORE_SIZE_DEFAULT (1ull << 30)
#define STATS_JSON_MAX (1u << 20)
#define STORE_BUSY_WAIT_MS 1000
/* A database cut by at least this much at once (and a quarter of its
 * size) has its store give free space back at close (vfile_truncate). */
#define SHRINK_COMPACT (4ull << 20)
#define VCACHE_BYTES_DEFAULT (64ull << 20)
/* vfs_mu guards the store list, every store's node list and every lock state.
 * It is held across coil_open/coil_close so two connections never race to
 * open one store (the loser would see -EBUSY from coil's own lock). */
pthread_mutex_t vfs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vstore *g_stores;
static struct vfile *g_dbfiles; /* open main databases (vfile.db_next) */
static char *g_store_default; /* from coil_sqlite_register(), or NULL */
static sqlite3_vfs *g_root;   /* the VFS temp files and utilities go to */
static int g_registered;

static const sqlite3_io_methods vfile_methods;

/* --- errors ------------------------------------------------------------ */

/* The reason behind this thread's last failed call: SQLite's own message is
 * only the result code's ("unable to open database file", "database is
 * locked"), so the VFS keeps coil's text and the store path for
 * xGetLastError (which SQLite also asks for sqlite3_system_errno()) and
 * sends it to sqlite3_log. */
static __thread struct {
	int err; /* positive errno */
	char msg[512];
} t_last;

static void vfs_fail(int code, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void vfs_fail(int code, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t_last.msg, sizeof(t_last.msg), fmt, ap);
	va_end(ap);
	t_last.err = err < 0 ? -err : err;
	sqlite3_log(code, "%s", t_last.msg);
}

int vfs_err_to_sqlite(int64_t err, int ioerr)
{
	if (err < 0 && err > -4096)
		vfs_fail(ioerr, (int)err, "coil: %s", coil_strerror((int)err));
	switch (err) {
	case -ENOSPC:
	case -EFBIG:
		return SQLITE_FULL;
	case -ENOMEM:
		return SQLITE_IOERR_NOMEM;
	case -EROFS:
		return SQLITE_READONLY;
	default:
		return ioerr;
	}
}

/* --- stores ------------------------------------------------------------ */

static void store_key(const char *path, char *key, size_t key_len)
{
	char real[PATH_MAX];

	if (realpath(path, real))
		path = real;
	snprintf(key, key_len, "%s", path);
}

/* A byte count from the environment: digits with an optional K/M/G/T
 * suffix (binary); @dflt when unset or not understood. */
static uint64_t bytes_from_env(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	unsigned long long n;
	char *end;

	if (!v || !*v)
		return dflt;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || end == v)
		goto bad;
	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'g': case 'G': n <<= 30; end++; break;
	case 't': case 'T': n <<= 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'b' || *end == 'B')
		end++;
	if (*end)
		goto bad;
	return n;
bad:
	sqlite3_log(SQLITE_WARNING, "coil: %s=%s not understood, using %llu",
		    name, v, (unsigned long long)dflt);
	return dflt;
}

/* Open the coil store at @path (vfs_mu held).  @return 0 or -errno. */
static int store_open_coil(const char *path, int create, coil_store **out)
{
	struct coil_options o;
	const char *codec = getenv("COIL_COMPRESSION");
	uint64_t wait_ms = bytes_from_env("COIL_SQLITE_BUSY_WAIT_MS",
					  STORE_BUSY_WAIT_MS);
	uint64_t waited_ms;
	int rc;

	coil_options_init(&o);
	o.size = bytes_from_env("COIL_STORE_SIZE", STORE_SIZE_DEFAULT);
	if (o.size == 0)
		o.size = STORE_SIZE_DEFAULT;
	if (create)
		o.flags |= COIL_CREATE;
	if (codec && *codec)
		o.compression = codec;
	for (waited_ms = 0;; waited_ms += 10) {
		rc = coil_open(path, &o, out);
		if (rc == -EINVAL && !(o.flags & COIL_NO_DIRECT)) {
			/* tmpfs and some overlays refuse O_DIRECT. */
			o.flags |= COIL_NO_DIRECT;
			continue;
		}
		/* A process killed with the store open keeps its lock until
		 * the kernel has torn down its io_uring, asynchronously
		 * (~0.2 s measured): a restart right after a crash waits that
		 * out instead of failing; a live owner costs the wait once. */
		if (rc != -EBUSY || waited_ms >= wait_ms)
			return rc;
		nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
	}
}

static int store_io_init(struct vstore *st)
{
	st->wb_cap = bytes_from_env("COIL_SQLITE_WRITEBACK", WB_BYTES_DEFAULT);
	if (st->wb_cap < WB_BYTES_MIN)
		st->wb_cap = WB_BYTES_MIN;
	if (st->wb_cap > WB_BYTES_MAX)
		st->wb_cap = WB_BYTES_MAX;
	if (vfs_wb_init(st))
		return -ENOMEM;
	if (vcache_init(&st->rc, bytes_from_env("COIL_SQLITE_CACHE",
						VCACHE_BYTES_DEFAULT))) {
		vfs_wb_fini(st);
		return -ENOMEM;
	}
	pthread_mutex_init(&st->wmu, NULL);
	return 0;
}

static void store_io_fini(struct vstore *st)
{
	pthread_mutex_destroy(&st->wmu);
	vcache_fini(&st->rc);
	vfs_wb_fini(st);
}

/* Find or open the store at @path and take a reference (vfs_mu held).
 * @return SQLITE_OK, SQLITE_BUSY (another process holds it),
 *   SQLITE_CANTOPEN or SQLITE_NOMEM. */
static int store_get(const char *path, int create, struct vstore **out)
{
	char key[PATH_MAX];
	struct vstore *st;
	int rc;

	store_key(path, key, sizeof(key));
	for (st = g_stores; st; st = st->next) {
		if (!strcmp(st->key, key)) {
			st->refs++;
			*out = st;
			return SQLITE_OK;
		}
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return SQLITE_NOMEM;
	if (store_io_init(st)) {
		free(st);
		return SQLITE_NOMEM;
	}
	rc = store_open_coil(path, create, &st->s);
	if (rc < 0) {
		if (rc == -EBUSY)
			vfs_fail(SQLITE_BUSY, rc, "coil: store %s is in use by "
				 "another process (a store admits one process "
				 "at a time): %s", path, coil_strerror(rc));
		else if (rc == -ENOENT && !create)
			vfs_fail(SQLITE_CANTOPEN, rc, "coil: store %s does not "
				 "exist (it is created only when the database "
				 "is opened with SQLITE_OPEN_CREATE)", path);
		else
			vfs_fail(SQLITE_CANTOPEN, rc, "coil: cannot open store "
				 "%s: %s", path, coil_strerror(rc));
		store_io_fini(st);
		free(st);
		if (rc == -EBUSY)
			return SQLITE_BUSY;
		return rc == -ENOMEM ? SQLITE_NOMEM : SQLITE_CANTOPEN;
	}
	/* The file exists now: key it by its real path. */
	store_key(path, key, sizeof(key));
	st->key = strdup(key);
	if (!st->key) {
		coil_close(st->s);
		store_io_fini(st);
		free(st);
		return SQLITE_NOMEM;
	}
	st->refs = 1;
	st->next = g_stores;
	g_stores = st;
	*out = st;
	return SQLITE_OK;
}

/* Drop a reference (vfs_mu held); the last one closes the store. */
static void store_put(struct vstore *st)
{
	struct vstore **pp;
	int rc;

	if (--st->refs > 0)
		return;
	for (pp = &g_stores; *pp; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			break;
		}
	}
	if (st->compact_at_close) {
		uint64_t back = 0;

		/* best effort: what stays is reused by the next writes */
		rc = coil_compact(st->s, &back);
		if (rc < 0)
			sqlite3_log(SQLITE_IOERR, "coil: giving back the free "
				    "space of store %s: %s", st->key,
				    coil_strerror(rc));
	}
	rc = coil_close(st->s);
	if (rc < 0)
		sqlite3_log(SQLITE_IOERR, "coil: closing store %s: %s",
			    st->key, coil_strerror(rc));
	store_io_fini(st);
	free(st->key);
	free(st);
}

/* The store holding @name when no URI says: the store of an open object
 * whose name is the longest prefix of @name (a journal, WAL or super
 * journal follows its database), else the only open store.  Two stores
 * with an equally long match (the same database name open in both) is no
 * answer: *@ambiguous, NULL.  Takes a reference.  vfs_mu held. */
static struct vstore *store_by_sibling(const char *name, bool *ambiguous)
{
	struct vstore *st, *best = NULL;
	size_t best_len = 0;
	int nstores = 0;

	*ambiguous = false;
	for (st = g_stores; st; st = st->next) {
		struct vnode *n;

		nstores++;
		for (n = st->nodes; n; n = n->next) {
			size_t len = strlen(n->name);

			if (strncmp(name, n->name, len))
				continue;
			if (len > best_len) {
				best = st;
				best_len = len;
				*ambiguous = false;
			} else if (len == best_len && st != best) {
				*ambiguous = true;
			}
		}
	}
	if (*ambiguous)
		return NULL;
	if (!best && nstores == 1)
		best = g_stores;
	if (best)
		best->refs++;
	return best;
}

static const char *store_default_path(void)
{
	if (g_store_default)
		return g_store_default;
	return getenv("COIL_STORE");
}

/* --- nodes ------------------------------------------------------------- */

static struct vnode *node_get(struct vstore *st, const char *name)
{
	struct vnode *n;

	for (n = st->nodes; n; n = n->next) {
		if (!strcmp(n->name, name)) {
			n->refs++;
			return n;
		}
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	n->refs = 1;
	n->next = st->nodes;
	st->nodes = n;
	return n;
}

static void node_put(struct vstore *st, struct vnode *node)
{
	struct vnode **pp;

	if (--node->refs > 0)
		return;
	vfs_shm_free(node);
	/* The cache keys on the node's address, which a later node may
	 * reuse. */
	pthread_mutex_lock(&st->wmu);
	vcache_drop(&st->rc, node);
	pthread_mutex_unlock(&st->wmu);
	for (pp = &st->nodes; *pp; pp = &(*pp)->next) {
		if (*pp == node) {
			*pp = node->next;
			break;
		}
	}
	free(node->name);
	free(node);
}

/* --- io methods -------------------------------------------------------- */

static int vfile_unlock_locked(struct vfile *f, int level)
{
	struct vnode *n = f->node;

	if (f->lock <= level)
		return SQLITE_OK;
	if (f->lock > SQLITE_LOCK_SHARED)
		n->lock = SQLITE_LOCK_SHARED;
	if (level == SQLITE_LOCK_NONE) {
		n->shared--;
		if (n->shared == 0)
			n->lock = SQLITE_LOCK_NONE;
	}
	f->lock = level;
	return SQLITE_OK;
}

static int vfile_close(sqlite3_file *file)
{
	struct vfile *f = (struct vfile *)file;
	struct vstore *st = f->st;
	int rc = SQLITE_OK, crc;

	/* Slots in flight may be this handle's. */
	rc = vfs_wb_flush(st);

	crc = coil_obj_close(f->obj);
	if (crc < 0 && rc == SQLITE_OK)
		rc = SQLITE_IOERR_CLOSE;
	if (f->flags & SQLITE_OPEN_DELETEONCLOSE) {
		crc = coil_obj_remove(st->s, f->node->name);
		if (crc < 0 && crc != -ENOENT && rc == SQLITE_OK)
			rc = SQLITE_IOERR_DELETE;
	}

	pthread_mutex_lock(&vfs_mu);
	if (f->flags & SQLITE_OPEN_MAIN_DB) {
		struct vfile **pp = &g_dbfiles;

		while (*pp && *pp != f)
			pp = &(*pp)->db_next;
		if (*pp)
			*pp = f->db_next;
	}
	vfs_shm_unmap_locked(f);
	vfile_unlock_locked(f, SQLITE_LOCK_NONE);
	node_put(st, f->node);
	store_put(st);
	pthread_mutex_unlock(&vfs_mu);
	f->base.pMethods = NULL;
	return rc;
}

/* Read @len bytes at @off straight from coil (st->wmu held); the count
 * read, short only at the end of the object, or -errno. */
static int64_t obj_read(struct vfile *f, unsigned char *p, size_t len,
			uint64_t off, int flush)
{
	struct vstore *st = f->st;
	size_t got = 0;
	int rc;

	if (flush && vfs_wb_has(f->node)) {
		rc = vfs_wb_flush_locked(st);
		if (rc != SQLITE_OK)
			return -EIO;
	}
	while (got < len) {
		int64_t n = coil_pread(f->obj, p + got, len - got, off + got);

		st->n_read_calls++;
		if (n < 0)
			return n;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (int64_t)got;
}

/* Serve [@off, @off + @len) chunk by chunk from the cache, reading a whole
 * chunk from coil on a miss (st->wmu held).  @return bytes copied (short
 * only at the end of the object) or -errno. */
static int64_t cached_read(struct vfile *f, unsigned char *p, size_t len,
			   uint64_t off)
{
	struct vcache *rc = &f->st->rc;
	size_t done = 0;

	while (done < len) {
		uint64_t pos = off + done;
		uint64_t chunk = pos - pos % VCACHE_CHUNK;
		uint32_t a = (uint32_t)(pos - chunk), clen = 0;
		size_t want = len - done;
		unsigned char *data;
		int32_t slot;
		int64_t n;

		if (want > VCACHE_CHUNK - a)
			want = VCACHE_CHUNK - a;
		data = vcache_lookup(rc, f->node, chunk, &clen);
		/* A chunk cut short by the end of the object may since have
		 * grown past it: past clen, ask coil again. */
		if (!data || a + want > clen) {
			slot = vcache_fill_begin(rc, f->node, chunk, &data);
			if (slot < 0)
				return -ENOMEM;
			/* coil's bytes, then the writes still in the arena
			 * on top: no send needed to read. */
			n = obj_read(f, data, VCACHE_CHUNK, chunk, 0);
			if (n < 0) {
				vcache_fill_abort(rc, slot);
				return n;
			}
			clen = (uint32_t)n;
			if (vfs_wb_has(f->node))
				clen = vfs_wb_overlay(f->st, f->node, chunk, data,
						  clen);
			vcache_fill_done(rc, slot, clen);
		}
		if (a >= clen)
			break;
		if (want > clen - a)
			want = clen - a;
		memcpy(p + done, data + a, want);
		done += want;
		if (a + want < VCACHE_CHUNK && a + want == clen)
			break; /* the end of the object */
	}
	return (int64_t)done;
}

static int vfile_read(sqlite3_file *file, void *buf, int amt, sqlite3_int64 off)
{
	struct vfile *f = (struct vfile *)file;
	struct vstore *st = f->st;
	unsigned char *p = buf;
	int64_t got;

	if (amt < 0 || off < 0)
		return SQLITE_IOERR_READ;
	pthread_mutex_lock(&st->wmu);
	st->n_reads++;
	if (st->rc.n)
		got = cached_read(f, p, (size_t)amt, (uint64_t)off);
	else
		got = obj_read(f, p, (size_t)amt, (uint64_t)off, 1);
	pthread_mutex_unlock(&st->wmu);
	if (got < 0)
		return vfs_err_to_sqlite(got, SQLITE_IOERR_READ);
	if (got < amt) {
		/* SQLite relies on the unread tail being zeroed. */
		memset(p + got, 0, (size_t)(amt - got));
		return SQLITE_IOERR_SHORT_READ;
	}
	return SQLITE_OK;
}

static int vfile_write(sqlite3_file *file, const void *buf, int amt,
		       sqlite3_int64 off)
{
	struct vfile *f = (struct vfile *)file;
	struct vstore *st = f->st;
	const unsigned char *p = buf;
	size_t len = (size_t)amt;
	int rc = SQLITE_OK;

	if (amt < 0 || off < 0)
		return SQLITE_IOERR_WRITE;
	pthread_mutex_lock(&st->wmu);
	if (f->node->wb_err) {
		/* earlier writes of this object were lost (vnode.wb_err) */
		rc = vfs_err_to_sqlite(f->node->wb_err, SQLITE_IOERR_WRITE);
		pthread_mutex_unlock(&st->wmu);
		return rc;
	}
	st->n_writes++;
	if (f->flags & SQLITE_OPEN_MAIN_DB)
		st->b_write_db += len;
	else
		st->b_write_other += len;
	/* A journal or WAL rewriting its own bytes (a header) while other
	 * objects have writes pending: send those first, so the rewrite can
	 * never land ahead of the pages it commits or invalidates.  Appends
	 * need no such care: a journal record that lands before the pages
	 * of an earlier spill only restores a page not yet changed. */
	if (!(f->flags & SQLITE_OPEN_MAIN_DB) && (uint64_t)off < f->node->size &&
	    vfs_wb_others(st, f->node)) {
		rc = vfs_wb_flush_locked(st);
		if (rc != SQLITE_OK)
			goto out;
	}
	if (len > st->wb_cap) {
		size_t done = 0;

		/* Larger than the window: written straight through, after
		 * everything before it. */
		rc = vfs_wb_flush_locked(st);
		if (rc != SQLITE_OK)
			goto out;

		while (done < len) {
			size_t piece = len - done > SEND_MAX ? SEND_MAX
							     : len - done;
			int64_t n = coil_pwrite(f->obj, p + done, piece,
						(uint64_t)off + done);

			st->n_write_calls++;
			if (n <= 0) {
				vcache_drop(&st->rc, f->node);
				rc = vfs_err_to_sqlite(n ? n : -EIO,
						   SQLITE_IOERR_WRITE);
				goto out;
			}
			done += (size_t)n;
		}
	} else {
		rc = vfs_wb_write_locked(f, p, len, (uint64_t)off);
		if (rc != SQLITE_OK)
			goto out;
	}
	if ((uint64_t)off + len > f->node->size)
		f->node->size = (uint64_t)off + len;
	vcache_write(&st->rc, f->node, (uint64_t)off, p, len);
out:
	pthread_mutex_unlock(&st->wmu);
	return rc;
}

static int vfile_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	struct vfile *f = (struct vfile *)file;
	int rc;

	if (size < 0)
		return SQLITE_IOERR_TRUNCATE;
	/* Under the I/O mutex, so no read refills the cache in between. */
	pthread_mutex_lock(&f->st->wmu);
	rc = vfs_wb_flush_for_locked(f->st, f->node, SQLITE_IOERR_TRUNCATE);
	if (rc == SQLITE_OK) {
		uint64_t was = f->node->size;

		vcache_drop(&f->st->rc, f->node);
		f->node->size = (uint64_t)size;
		rc = coil_obj_truncate(f->obj, (uint64_t)size);
		rc = rc < 0 ? vfs_err_to_sqlite(rc, SQLITE_IOERR_TRUNCATE) : SQLITE_OK;
		/* A database cut by a quarter and SHRINK_COMPACT bytes or
		 * more (VACUUM, or auto_vacuum after a large delete): as
		 * with the default VFS, whose file shrinks, the space goes
		 * back to the file system, once, when the store closes.  The
		 * quarter keeps that work in proportion: auto_vacuum's
		 * small cuts of a large database do not move its data at
		 * every close. */
		if (rc == SQLITE_OK && (f->flags & SQLITE_OPEN_MAIN_DB) &&
		    (uint64_t)size + SHRINK_COMPACT <= was &&
		    (uint64_t)size <= was - was / 4)
			f->st->compact_at_close = true;
	}
	pthread_mutex_unlock(&f->st->wmu);
	return rc;
}

/* coil_flush makes every completed write of the whole store durable, so
 * syncing one file syncs them all; SQLite's flags (FULL, DATAONLY) ask for
 * nothing coil does not already do. */
static int vfile_sync(sqlite3_file *file, int flags)
{
	struct vfile *f = (struct vfile *)file;
	int rc;

	(void)flags;
	rc = vfs_wb_flush_for(f->st, f->node, SQLITE_IOERR_FSYNC);
	if (rc != SQLITE_OK)
		return rc;
	__atomic_fetch_add(&f->st->n_syncs, 1, __ATOMIC_RELAXED);
	rc = coil_sync(f->st->s);
	return rc < 0 ? vfs_err_to_sqlite(rc, SQLITE_IOERR_FSYNC) : SQLITE_OK;
}

static int vfile_size(sqlite3_file *file, sqlite3_int64 *size)
{
	struct vfile *f = (struct vfile *)file;
	uint64_t sz = 0;
	int rc;

	rc = vfs_wb_flush_node(f->st, f->node);
	if (rc != SQLITE_OK)
		return rc;
	rc = coil_obj_size(f->obj, &sz);
	if (rc < 0)
		return vfs_err_to_sqlite(rc, SQLITE_IOERR_FSTAT);
	*size = (sqlite3_int64)sz;
	return SQLITE_OK;
}

/* SQLite's five lock levels among the connections of this process, with
 * os_unix.c's rules: one RESERVED/PENDING/EXCLUSIVE holder at a time;
 * PENDING keeps new SHARED out while EXCLUSIVE waits for readers to leave.
 * Other processes never get here: coil's store lock refuses them. */
static int vfile_lock(sqlite3_file *file, int want)
{
	struct vfile *f = (struct vfile *)file;
	struct vnode *n = f->node;
	int rc = SQLITE_OK;

	if (f->lock >= want)
		return SQLITE_OK;
	pthread_mutex_lock(&vfs_mu);
	if (f->lock != n->lock &&
	    (n->lock >= SQLITE_LOCK_PENDING || want > SQLITE_LOCK_SHARED)) {
		rc = SQLITE_BUSY;
	} else if (want == SQLITE_LOCK_SHARED) {
		if (n->lock == SQLITE_LOCK_NONE)
			n->lock = SQLITE_LOCK_SHARED;
		n->shared++;
		f->lock = SQLITE_LOCK_SHARED;
	} else if (want == SQLITE_LOCK_EXCLUSIVE && n->shared > 1) {
		/* Hold PENDING so no new reader starts; SQLite retries. */
		f->lock = SQLITE_LOCK_PENDING;
		n->lock = SQLITE_LOCK_PENDING;
		rc = SQLITE_BUSY;
	} else {
		f->lock = want;
		n->lock = want;
	}
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

static int vfile_unlock(sqlite3_file *file, int level)
{
	struct vfile *f = (struct vfile *)file;

	if (f->lock <= level)
		return SQLITE_OK;
	pthread_mutex_lock(&vfs_mu);
	vfile_unlock_locked(f, level);
	pthread_mutex_unlock(&vfs_mu);
	return SQLITE_OK;
}

static int vfile_check_reserved(sqlite3_file *file, int *out)
{
	struct vfile *f = (struct vfile *)file;

	pthread_mutex_lock(&vfs_mu);
	*out = f->node->lock > SQLITE_LOCK_SHARED;
	pthread_mutex_unlock(&vfs_mu);
	return SQLITE_OK;
}

/* PRAGMA coil_stats: the store's coil_stats_json() as the pragma's value. */
static int vfile_pragma_stats(struct vfile *f, char **args)
{
	char *json;
	int need, rc;

	rc = vfs_wb_flush(f->st);
	if (rc != SQLITE_OK)
		return rc;
	need = coil_stats_json_dup(f->st->s, 0, &json);
	if (need == -ENOMEM)
		return SQLITE_NOMEM;
	if (need < 0)
		return vfs_err_to_sqlite(need, SQLITE_IOERR);
	if ((size_t)need >= STATS_JSON_MAX) {
		free(json);
		return SQLITE_TOOBIG;
	}
	args[0] = sqlite3_mprintf("%s", json);
	free(json);
	return args[0] ? SQLITE_OK : SQLITE_NOMEM;
}

/* PRAGMA coil_compact: give the store's free space back to the file
 * system (coil_compact), as `coil compact` does for a closed store; the
 * pragma's value is the bytes the store file gave back.  VACUUM shrinks a
 * database object, but the segments its old pages held stay with the
 * store for the next writes (docs/space.md); this is the request that
 * returns them. */
static int vfile_pragma_compact(struct vfile *f, char **args)
{
	uint64_t back = 0;
	int rc;

	rc = vfs_wb_flush(f->st);
	if (rc != SQLITE_OK)
		return rc;
	rc = coil_compact(f->st->s, &back);
	if (rc < 0)
		return vfs_err_to_sqlite(rc, SQLITE_IOERR);
	args[0] = sqlite3_mprintf("%llu", (unsigned long long)back);
	return args[0] ? SQLITE_OK : SQLITE_NOMEM;
}

/* PRAGMA coil_vfs_stats: what SQLite asked of the VFS and what the VFS
 * asked of coil (merged writes, cache hits). */
static int vfile_pragma_vfs_stats(struct vfile *f, char **args)
{
	struct vstore *st = f->st;

	pthread_mutex_lock(&st->wmu);
	args[0] = sqlite3_mprintf(
		"{\"sqlite_reads\":%llu,\"coil_reads\":%llu,"
		"\"sqlite_writes\":%llu,\"coil_writes\":%llu,\"syncs\":%llu,"
		"\"sqlite_write_bytes_db\":%llu,\"sqlite_write_bytes_journal\":%llu,"
		"\"coil_write_bytes\":%llu,\"spills\":%llu,"
		"\"writes_in_place\":%llu,"
		"\"cache_bytes\":%llu,\"cache_hits\":%llu,\"cache_misses\":%llu}",
		(unsigned long long)st->n_reads,
		(unsigned long long)st->n_read_calls,
		(unsigned long long)st->n_writes,
		(unsigned long long)st->n_write_calls,
		(unsigned long long)__atomic_load_n(&st->n_syncs, __ATOMIC_RELAXED),
		(unsigned long long)st->b_write_db,
		(unsigned long long)st->b_write_other,
		(unsigned long long)st->b_sent,
		(unsigned long long)st->n_spills,
		(unsigned long long)st->n_wb_inplace,
		(unsigned long long)st->rc.n * VCACHE_CHUNK,
		(unsigned long long)st->rc.hits,
		(unsigned long long)st->rc.misses);
	pthread_mutex_unlock(&st->wmu);
	return args[0] ? SQLITE_OK : SQLITE_NOMEM;
}

static int vfile_file_control(sqlite3_file *file, int op, void *arg)
{
	struct vfile *f = (struct vfile *)file;

	switch (op) {
	case SQLITE_FCNTL_LOCKSTATE:
		*(int *)arg = f->lock;
		return SQLITE_OK;
	case SQLITE_FCNTL_VFSNAME:
		*(char **)arg = sqlite3_mprintf("%s", VFS_NAME);
		return SQLITE_OK;
	case SQLITE_FCNTL_HAS_MOVED:
		*(int *)arg = 0;
		return SQLITE_OK;
	case SQLITE_FCNTL_COMMIT_PHASETWO:
		/* A transaction SQLite reports committed has all its writes
		 * completed in coil, so it survives the process being killed
		 * — as with the default VFS, whose writes sit in the page
		 * cache — even with synchronous=OFF or WAL's NORMAL, which
		 * never call xSync at commit.  A write of this object lost
		 * in another connection's failed send fails it too. */
		return vfs_wb_flush_for(f->st, f->node, SQLITE_IOERR_WRITE);
	case SQLITE_FCNTL_PRAGMA: {
		char **args = arg;

		if (args[1] && !strcasecmp(args[1], "coil_stats"))
			return vfile_pragma_stats(f, args);
		if (args[1] && !strcasecmp(args[1], "coil_vfs_stats"))
			return vfile_pragma_vfs_stats(f, args);
		if (args[1] && !strcasecmp(args[1], "coil_compact"))
			return vfile_pragma_compact(f, args);
		return SQLITE_NOTFOUND;
	}
	default:
		return SQLITE_NOTFOUND;
	}
}

static int vfile_sector_size(sqlite3_file *file)
{
	(void)file;
	return 4096;
}

/* What coil guarantees for every write (include/coil.h, docs/guide.md):
 *  ATOMIC       a write of any size is wholly present or wholly absent after
 *               any crash;
 *  SAFE_APPEND  so appended bytes and the size grow together, never garbage;
 *  SEQUENTIAL   recovery replays the longest valid prefix of coil's journal,
 *               so a write is never present without every write completed
 *               before it (the write buffer keeps SQLite's order);
 *  POWERSAFE_OVERWRITE  an extent shadows only the bytes written.
 * Not BATCH_ATOMIC: coil has no multi-write transaction to offer. */
static int vfile_device_characteristics(sqlite3_file *file)
{
	(void)file;
	return SQLITE_IOCAP_ATOMIC | SQLITE_IOCAP_SAFE_APPEND |
	       SQLITE_IOCAP_SEQUENTIAL | SQLITE_IOCAP_POWERSAFE_OVERWRITE;
}

/* Version 2: the WAL index on the heap (vfile_shm_*), so WAL works in
 * normal locking mode between the connections of this process; with
 * locking_mode=EXCLUSIVE SQLite keeps it in its own heap and never maps. */
static const sqlite3_io_methods vfile_methods = {
	.iVersion = 2,
	.xClose = vfile_close,
	.xRead = vfile_read,
	.xWrite = vfile_write,
	.xTruncate = vfile_truncate,
	.xSync = vfile_sync,
	.xFileSize = vfile_size,
	.xLock = vfile_lock,
	.xUnlock = vfile_unlock,
	.xCheckReservedLock = vfile_check_reserved,
	.xFileControl = vfile_file_control,
	.xSectorSize = vfile_sector_size,
	.xDeviceCharacteristics = vfile_device_characteristics,
	.xShmMap = vfs_shm_map,
	.xShmLock = vfs_shm_lock,
	.xShmBarrier = vfs_shm_barrier,
	.xShmUnmap = vfs_shm_unmap,
};

/* --- vfs methods ------------------------------------------------------- */

#define VFS_COIL_FILES (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | \
			SQLITE_OPEN_WAL | SQLITE_OPEN_SUPER_JOURNAL)

/* Pick the store for a file being opened; takes a reference (vfs_mu held). */
static int store_for_open(const char *name, int flags, struct vstore **out)
{
	const char *path = NULL;

	/* sqlite3_uri_parameter() is defined only on names SQLite built for
	 * the database, its journal and its WAL — never a super journal. */
	if (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL |
		     SQLITE_OPEN_WAL))
		path = sqlite3_uri_parameter(name, "coil_store");
	if (!path && !(flags & SQLITE_OPEN_MAIN_DB)) {
		bool ambiguous;

		*out = store_by_sibling(name, &ambiguous);
		if (*out)
			return SQLITE_OK;
		if (ambiguous) {
			vfs_fail(SQLITE_CANTOPEN, EINVAL, "coil: %s: its "
				 "database is open in more than one store", name);
			return SQLITE_CANTOPEN;
		}
	}
	if (!path)
		path = store_default_path();
	if (!path || !*path) {
		vfs_fail(SQLITE_CANTOPEN, ENOENT, "coil: no store for %s: "
			 "COIL_STORE is not set and the URI has no coil_store= "
			 "parameter", name);
		return SQLITE_CANTOPEN;
	}
	return store_get(path, !!(flags & SQLITE_OPEN_CREATE), out);
}

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file,
		    int flags, int *out_flags)
{
	struct vfile *f = (struct vfile *)file;
	struct vstore *st = NULL;
	unsigned oflags = 0;
	int rc, crc;

	(void)vfs;
	if (!name || !(flags & VFS_COIL_FILES))
		return g_root->xOpen(g_root, name, file, flags, out_flags);

	memset(f, 0, sizeof(*f));
	if (strlen(name) > COIL_NAME_MAX) {
		vfs_fail(SQLITE_CANTOPEN, ENAMETOOLONG, "coil: %s: an object "
			 "name is at most %d bytes", name, COIL_NAME_MAX);
		return SQLITE_CANTOPEN;
	}
	pthread_mutex_lock(&vfs_mu);
	rc = store_for_open(name, flags, &st);
	if (rc != SQLITE_OK)
		goto out;
	if (flags & SQLITE_OPEN_CREATE)
		oflags |= COIL_CREATE;
	if (flags & SQLITE_OPEN_EXCLUSIVE)
		oflags |= COIL_EXCL;
	/* zstd's fast mode for every object the VFS opens: the WAL and the
	 * journals hold each page briefly (a WAL is reset after a
	 * checkpoint, a journal deleted at commit), and a database's pages
	 * are rewritten again and again while they are hot (1.6 GB of page
	 * writes for a 37 MiB database in the benchmark's workload); what
	 * goes cold, coil's background optimizer encodes again at level 19
	 * (docs/sqlite.md). */
	oflags |= COIL_SHORTLIVED;
	crc = coil_obj_open(st->s, name, oflags, &f->obj);
	if (crc < 0) {
		vfs_fail(SQLITE_CANTOPEN, crc, "coil: %s in store %s: %s", name,
			 st->key, coil_strerror(crc));
		rc = crc == -ENOMEM ? SQLITE_NOMEM :
		     crc == -EROFS ? SQLITE_READONLY : SQLITE_CANTOPEN;
		store_put(st);
		goto out;
	}
	f->node = node_get(st, name);
	if (!f->node) {
		coil_obj_close(f->obj);
		store_put(st);
		rc = SQLITE_NOMEM;
		goto out;
	}
	if (f->node->refs == 1) {
		/* The first handle: learn where the object ends, so a write
		 * can tell an append from a rewrite. */
		uint64_t size = 0;

		crc = coil_obj_size(f->obj, &size);
		pthread_mutex_lock(&st->wmu);
		f->node->size = crc == 0 ? size : UINT64_MAX;
		pthread_mutex_unlock(&st->wmu);
	}
	f->st = st;
	f->flags = flags;
	f->base.pMethods = &vfile_methods;
	if (flags & SQLITE_OPEN_MAIN_DB) {
		f->jname = sqlite3_filename_journal(name);
		f->wname = sqlite3_filename_wal(name);
		f->db_next = g_dbfiles;
		g_dbfiles = f;
	}
	if (out_flags)
		*out_flags = flags;
out:
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

/* For xAccess and xDelete: the store a name lives in, opening the default
 * store (never creating it) when no open file points elsewhere.  *@out is
 * NULL when there is no store at all.  Takes a reference; vfs_mu held. */
static int store_for_name(const char *name, struct vstore **out)
{
	const char *path;
	bool ambiguous;
	int rc;

	/* A journal or WAL name SQLite built for an open database: its store */
	for (struct vfile *f = g_dbfiles; f; f = f->db_next) {
		if (name == f->jname || name == f->wname) {
			*out = f->st;
			f->st->refs++;
			return SQLITE_OK;
		}
	}
	*out = store_by_sibling(name, &ambiguous);
	if (*out)
		return SQLITE_OK;
	if (ambiguous) {
		vfs_fail(SQLITE_IOERR, EINVAL, "coil: %s: its database is "
			 "open in more than one store", name);
		return SQLITE_IOERR;
	}
	path = store_default_path();
	if (!path || !*path)
		return SQLITE_OK;
	rc = store_get(path, 0, out);
	if (rc == SQLITE_CANTOPEN) {
		*out = NULL; /* no store file: no object either */
		return SQLITE_OK;
	}
	return rc;
}

static int vfs_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	struct vnode *node;
	struct vstore *st;
	int rc, crc;

	(void)vfs;
	pthread_mutex_lock(&vfs_mu);
	rc = store_for_name(name, &st);
	if (rc != SQLITE_OK || !st) {
		pthread_mutex_unlock(&vfs_mu);
		return rc != SQLITE_OK ? rc : SQLITE_IOERR_DELETE_NOENT;
	}
	/* The removal must land after every write SQLite issued before it;
	 * an object still open keeps its node, whose cached chunks go. */
	pthread_mutex_lock(&st->wmu);
	rc = vfs_wb_flush_locked(st);
	for (node = st->nodes; node; node = node->next) {
		if (!strcmp(node->name, name)) {
			vcache_drop(&st->rc, node);
			node->size = 0;
		}
	}
	pthread_mutex_unlock(&st->wmu);
	if (rc == SQLITE_OK) {
		crc = coil_obj_remove(st->s, name);
		if (crc == -ENOENT)
			rc = SQLITE_IOERR_DELETE_NOENT;
		else if (crc < 0)
			rc = vfs_err_to_sqlite(crc, SQLITE_IOERR_DELETE);
		else if (sync_dir && coil_sync(st->s) < 0)
			rc = SQLITE_IOERR_DIR_FSYNC;
	}
	store_put(st);
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

/* Like os_unix.c, an empty object counts as missing: a zero-length journal
 * left by PERSIST or TRUNCATE mode is not a hot journal. */
static int vfs_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	struct vstore *st;
	coil_obj *o;
	uint64_t size = 0;
	int rc, crc;

	(void)vfs;
	*out = 0;
	if (strlen(name) > COIL_NAME_MAX)
		return SQLITE_OK;
	pthread_mutex_lock(&vfs_mu);
	rc = store_for_name(name, &st);
	if (rc != SQLITE_OK || !st)
		goto out;
	rc = vfs_wb_flush(st);
	if (rc != SQLITE_OK)
		goto put;
	crc = coil_obj_open(st->s, name, 0, &o);
	if (crc == 0) {
		crc = coil_obj_size(o, &size);
		coil_obj_close(o);
		if (crc == 0)
			*out = flags == SQLITE_ACCESS_EXISTS ? size > 0 : 1;
	} else if (crc != -ENOENT) {
		rc = vfs_err_to_sqlite(crc, SQLITE_IOERR_ACCESS);
	}
put:
	store_put(st);
out:
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

/* Append path component @c (@len bytes) to the canonical name in
 * @out[0..*@n): "" and "." add nothing, ".." drops the last component
 * (never above the root).  @return 0, or -1 when @out_len is too short. */
static int path_push(char *out, size_t *n, size_t out_len, const char *c,
		     size_t len)
{
	if (len == 0 || (len == 1 && c[0] == '.'))
		return 0;
	if (len == 2 && c[0] == '.' && c[1] == '.') {
		while (*n > 0 && out[*n - 1] != '/')
			(*n)--;
		if (*n > 0)
			(*n)--; /* the slash before it */
		return 0;
	}
	if (*n + 1 + len + 1 > out_len)
		return -1;
	out[(*n)++] = '/';
	memcpy(out + *n, c, len);
	*n += len;
	return 0;
}

/* Push every component of @path. */
static int path_push_all(char *out, size_t *n, size_t out_len, const char *path)
{
	while (*path) {
		const char *end = strchr(path, '/');
		size_t len = end ? (size_t)(end - path) : strlen(path);

		if (path_push(out, n, out_len, path, len))
			return -1;
		path += len;
		if (*path == '/')
			path++;
	}
	return 0;
}

/* An object is named by its canonical absolute path, as os_unix.c names a
 * file: a relative name is taken from the working directory, and ".",
 * ".." and repeated slashes are resolved lexically, so every spelling of
 * one path reaches one database (a second connection opening
 * "dir/../test.db" must see the same database as "test.db").  Symbolic
 * links are not followed: the name lives in the store, not on the host.
 * The store itself stays the namespace — a store file moved elsewhere keeps
 * its databases under the names they were created with. */
static int vfs_full_pathname(sqlite3_vfs *vfs, const char *name, int out_len,
			     char *out)
{
	char cwd[PATH_MAX];
	size_t n = 0;

	(void)vfs;
	if (out_len <= 1)
		return SQLITE_CANTOPEN;
	if (name[0] != '/') {
		if (!getcwd(cwd, sizeof(cwd))) {
			vfs_fail(SQLITE_CANTOPEN, errno, "coil: %s: cannot "
				 "read the working directory: %s", name,
				 strerror(errno));
			return SQLITE_CANTOPEN_FULLPATH;
		}
		if (path_push_all(out, &n, (size_t)out_len, cwd))
			return SQLITE_CANTOPEN;
	}
	if (path_push_all(out, &n, (size_t)out_len, name))
		return SQLITE_CANTOPEN;
	if (n == 0)
		out[n++] = '/';
	out[n] = '\0';
	return SQLITE_OK;
}

static void *vfs_dlopen(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	return g_root->xDlOpen(g_root, name);
}

static void vfs_dlerror(sqlite3_vfs *vfs, int n, char *msg)
{
	(void)vfs;
	g_root->xDlError(g_root, n, msg);
}

static void (*vfs_dlsym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
	(void)vfs;
	return g_root->xDlSym(g_root, h, sym);
}

static void vfs_dlclose(sqlite3_vfs *vfs, void *h)
{
	(void)vfs;
	g_root->xDlClose(g_root, h);
}

static int vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return g_root->xRandomness(g_root, n, out);
}

static int vfs_sleep(sqlite3_vfs *vfs, int us)
{
	(void)vfs;
	return g_root->xSleep(g_root, us);
}

static int vfs_current_time(sqlite3_vfs *vfs, double *out)
{
	(void)vfs;
	return g_root->xCurrentTime(g_root, out);
}

/* The errno behind this thread's last failure (what
 * sqlite3_system_errno() reports) and, when @n > 0, its text: coil's
 * reason with the store path. */
static int vfs_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	if (n > 0 && out)
		snprintf(out, (size_t)n, "%s", t_last.msg);
	return t_last.err;
}

static int vfs_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
	double now;
	int rc;

	(void)vfs;
	if (g_root->iVersion >= 2 && g_root->xCurrentTimeInt64)
		return g_root->xCurrentTimeInt64(g_root, out);
	rc = g_root->xCurrentTime(g_root, &now);
	*out = (sqlite3_int64)(now * 86400000.0);
	return rc;
}

static sqlite3_vfs g_vfs = {
	.iVersion = 2,
	.mxPathname = VFS_PATHNAME_MAX,
	.zName = VFS_NAME,
	.xOpen = vfs_open,
	.xDelete = vfs_delete,
	.xAccess = vfs_access,
	.xFullPathname = vfs_full_pathname,
	.xDlOpen = vfs_dlopen,
	.xDlError = vfs_dlerror,
	.xDlSym = vfs_dlsym,
	.xDlClose = vfs_dlclose,
	.xRandomness = vfs_randomness,
	.xSleep = vfs_sleep,
	.xCurrentTime = vfs_current_time,
	.xGetLastError = vfs_get_last_error,
	.xCurrentTimeInt64 = vfs_current_time64,
};

/* --- registration ------------------------------------------------------ */

static int vfs_register(int make_default)
{
	int rc = SQLITE_OK;

	pthread_mutex_lock(&vfs_mu);
	if (!g_registered) {
		g_root = sqlite3_vfs_find(NULL);
		if (g_root == &g_vfs || !g_root)
			g_root = sqlite3_vfs_find("unix");
		if (!g_root) {
			rc = SQLITE_ERROR;
			goto out;
		}
		g_vfs.szOsFile = (int)sizeof(struct vfile);
		if (g_root->szOsFile > g_vfs.szOsFile)
			g_vfs.szOsFile = g_root->szOsFile;
	}
	if (!g_registered || make_default) {
		rc = sqlite3_vfs_register(&g_vfs, make_default);
		if (rc == SQLITE_OK)
			g_registered = 1;
	}
out:
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

static int env_true(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

COIL_SQLITE_API int coil_sqlite_register(const char *store_path,
					 int make_default)
{
	char *copy = NULL;

	if (store_path) {
		copy = strdup(store_path);
		if (!copy)
			return SQLITE_NOMEM;
	}
	pthread_mutex_lock(&vfs_mu);
	if (!sqlite3_api)
		sqlite3_api = coil_vfs_direct_api();
	free(g_store_default);
	g_store_default = copy;
	pthread_mutex_unlock(&vfs_mu);
	return vfs_register(make_default);
}

/* The entry point `.load libcoil_sqlite` finds by itself: SQLite derives
 * sqlite3_X_init from the file name, X = "coil_sqlite" without "lib" and
 * without non-letters.  COIL_SQLITE_DEFAULT=1 makes "coil" the default
 * VFS.  The library stays loaded for the life of the process: the VFS
 * outlives the connection that loaded it. */
COIL_SQLITE_API int sqlite3_coilsqlite_init(sqlite3 *db, char **err,
					    const sqlite3_api_routines *api)
{
	int rc;

	(void)db;
	SQLITE_EXTENSION_INIT2(api);
	rc = vfs_register(env_true("COIL_SQLITE_DEFAULT"));
	if (rc != SQLITE_OK) {
		*err = sqlite3_mprintf("coil: cannot register the VFS");
		return rc;
	}
	return SQLITE_OK_LOAD_PERMANENTLY;
}
