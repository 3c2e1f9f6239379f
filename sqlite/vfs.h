/* vfs.h — private to sqlite/: the types and calls coil_vfs.c (stores,
 * nodes, io and vfs methods), vfs_writeback.c (the write-back window) and
 * vfs_shm.c (the heap WAL index) share. */
#ifndef COIL_VFS_VFS_H
#define COIL_VFS_VFS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sqlite3.h>

#include "coil.h"
#include "vfs_cache.h"

/* The write-back arena (COIL_SQLITE_WRITEBACK bytes, allocated when the
 * store opens).  32 MiB by default: on the 200k-row workload a page is
 * spilled ~40 times on average (1.6 GB of page writes for a 37 MiB
 * database) and a longer window folds more of the rewrites — 8 MiB sent
 * 1.1 GB to coil, 32 MiB 0.66 GB.  A second arena of the same size is
 * allocated at the first spill: a full arena is sent by the store's sender
 * thread while SQLite fills the other (vfs_writeback.c). */
#define WB_BYTES_DEFAULT (32ull << 20)
#define WB_BYTES_MIN (256u << 10)
#define WB_BYTES_MAX (1ull << 30)
#define WB_RUNS 16384
/* Largest coil write the VFS issues: coil caps one write (one journal
 * record) at 16 MiB; 1 MiB is 16 blobs its pool encodes in parallel. */
#define SEND_MAX (1u << 20)
/* Pieces of a send in flight together: 8 MiB, then wait and reuse. */
#define WSEND_BYTES (8u << 20)
/* Bound on the heap WAL index: 4096 regions of 32 KiB index 16 M frames,
 * a 64 GiB WAL of 4 KiB pages. */
#define SHM_REGIONS_MAX 4096

struct vnode {
	struct vnode *next;
	char *name;
	int refs;   /* vfiles naming this object */
	int shared; /* vfiles holding SHARED or stronger */
	int lock;   /* the strongest lock any vfile holds */
	/* The WAL index (xShm*) lives on the heap: coil's store lock makes
	 * this process the only one that can open the database, so process
	 * memory is all the sharing there is. */
	void **shm;                          /* shm_n regions of shm_size */
	int shm_n;
	int shm_size;
	int shm_maps;                        /* vfiles that mapped it */
	int shm_readers[SQLITE_SHM_NLOCK];   /* holders of each shared slot */
	unsigned char shm_writer[SQLITE_SHM_NLOCK]; /* slot held exclusive */
	int wb_runs[2];  /* runs of this object in each arena; under wmu */
	/* its latest run in each arena, + 1 (0: none); under wmu */
	uint32_t wb_last[2];
	uint64_t size;   /* size as SQLite's writes left it; under wmu */
	/* A send (any connection's) that failed with writes of this object
	 * in the window dropped them: every later write, sync, truncate,
	 * size and commit of the object fails with this until its handles
	 * are all closed (the next open rolls a hot journal back).  Under
	 * wmu. */
	int64_t wb_err;
};

struct vfile;
struct vstore;

struct wrun {
	struct vfile *f; /* whose handle sends it */
	uint64_t off;
	uint32_t len;
	uint32_t at;     /* offset in its arena's bytes */
};

/* One arena of the write-back window: SQLite's writes in arrival order. */
struct warena {
	unsigned char *wb;    /* vstore.wb_cap bytes */
	struct wrun *runs;    /* WB_RUNS */
	uint32_t nruns;
	uint64_t used;
};

struct vstore {
	struct vstore *next;
	char *key; /* realpath of the store file, else the path as given */
	coil_store *s;
	int refs; /* vfiles plus transient users (xAccess, xDelete) */
	struct vnode *nodes;
	/* wmu: the I/O state (write-back window, chunk cache, counters);
	 * held across coil calls.  cmu: completion state only, never held
	 * across a coil call, so completions (coil threads) never wait on a
	 * thread that is inside coil. */
	pthread_mutex_t wmu;
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	/* The window: arena[cur] takes SQLite's writes; arena[!cur], when it
	 * has runs, is being sent by the sender thread (a spill) and is
	 * read-only until settled.  Sends never overlap: each one waits for
	 * the one before (vfs_writeback.c).  Under wmu, but for the sending
	 * arena's bytes and runs, which the sender reads without it. */
	struct warena arena[2];
	int cur;
	uint64_t wb_cap;
	unsigned char *wsend; /* WSEND_BYTES: pieces of a send in flight */
	uint32_t *order;      /* WB_RUNS: runs sorted for a send */
	int inflight;         /* under cmu */
	int64_t werr;         /* first failed write of a send; cmu */
	struct vnode *werr_node; /* ... and its object; cmu */
	/* The sender thread (started at the first spill), under cmu: a
	 * spill sets bg_busy and signals scv; the sender sends arena
	 * bg_idx, leaves its result in bg_err and its counts in bg_calls
	 * and bg_bytes, clears bg_busy and broadcasts ccv. */
	pthread_t sender;
	bool sender_started;
	bool sender_stop;
	bool bg_busy;
	int bg_idx;
	int64_t bg_err;
	uint64_t bg_calls, bg_bytes;
	pthread_cond_t scv;
	struct vcache rc;     /* chunk cache, under wmu */
	/* Counters for PRAGMA coil_vfs_stats, under wmu. */
	uint64_t n_reads, n_read_calls, n_writes, n_write_calls, n_syncs;
	uint64_t n_spills; /* arenas handed to the sender */
	uint64_t n_wb_inplace; /* writes over bytes the window held */
	uint64_t b_write_db, b_write_other, b_sent;
	/* A database of this store shrank by a VACUUM's worth (set under
	 * wmu; read when the last file has closed): the store gives its free
	 * space back when it closes. */
	bool compact_at_close;
};

struct vfile {
	sqlite3_file base;
	struct vstore *st;
	struct vnode *node;
	coil_obj *obj;
	int lock;  /* this handle's SQLite lock level */
	int flags; /* SQLITE_OPEN_* it was opened with */
	int shm_mapped;
	unsigned shm_shared_mask; /* WAL-index slots held shared */
	unsigned shm_excl_mask;   /* ... and exclusive */
	/* A main database: the journal and WAL names SQLite built with it
	 * (sqlite3_filename_journal/_wal), the very pointers its pager later
	 * hands to xAccess and xDelete, so those find this file's store even
	 * when the same name is open in several stores.  Linked in g_dbfiles
	 * under vfs_mu. */
	const char *jname, *wname;
	struct vfile *db_next;
};

/* Guards the store list, every store's node list and every lock state
 * (SQLite's and the WAL index's); held across coil_open/coil_close. */
extern pthread_mutex_t vfs_mu;

/* A coil error as the SQLite code of the failed operation @ioerr. */
int vfs_err_to_sqlite(int64_t err, int ioerr);

/* vfs_writeback.c (st->wmu held for the _locked ones) */
int vfs_wb_init(struct vstore *st);
void vfs_wb_fini(struct vstore *st);
/* Take SQLite's write of @len bytes at @off into the window: a full arena
 * is spilled first.  @return SQLITE_OK or the error of an earlier send. */
int vfs_wb_write_locked(struct vfile *f, const unsigned char *p, size_t len,
			uint64_t off);
/* @node has writes in the window (pending or being sent). */
bool vfs_wb_has(const struct vnode *node);
/* Objects other than @node have writes in the window. */
bool vfs_wb_others(const struct vstore *st, const struct vnode *node);
int vfs_wb_flush_locked(struct vstore *st);
int vfs_wb_flush(struct vstore *st);
/* vfs_wb_flush, then @node's remembered failure (vnode.wb_err) as @deflt's
 * SQLite code: what a sync or commit of @node must report. */
int vfs_wb_flush_for(struct vstore *st, struct vnode *node, int deflt);
int vfs_wb_flush_for_locked(struct vstore *st, struct vnode *node, int deflt);
int vfs_wb_flush_node(struct vstore *st, struct vnode *node);
uint32_t vfs_wb_overlay(struct vstore *st, const struct vnode *node,
			uint64_t chunk, unsigned char *data, uint32_t clen);

/* vfs_shm.c (vfs_mu held for the _locked one) */
void vfs_shm_free(struct vnode *node);
void vfs_shm_unmap_locked(struct vfile *f);
int vfs_shm_map(sqlite3_file *file, int region, int size, int extend,
		void volatile **out);
int vfs_shm_lock(sqlite3_file *file, int ofst, int cnt, int flags);
void vfs_shm_barrier(sqlite3_file *file);
int vfs_shm_unmap(sqlite3_file *file, int delete_flag);

#endif
