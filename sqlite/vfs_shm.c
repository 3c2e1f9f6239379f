/* vfs_shm.c — the WAL index on the heap.  coil's store lock makes one
 * process the only one that can open a database in a store, so process
 * memory is all the sharing SQLite's xShm* methods need; with it WAL also
 * works in normal locking mode between that process's connections. */
#include <stdlib.h>

#include "vfs.h"

void vfs_shm_free(struct vnode *node)
{
	int i;

	for (i = 0; i < node->shm_n; i++)
		free(node->shm[i]);
	free(node->shm);
	node->shm = NULL;
	node->shm_n = 0;
	node->shm_size = 0;
}

/* Release @f's WAL-index locks and mapping (vfs_mu held); the last mapping
 * frees the regions: no connection then has the WAL open, and the next one
 * rebuilds the index from the WAL. */
void vfs_shm_unmap_locked(struct vfile *f)
{
	struct vnode *n = f->node;
	int i;

	if (!f->shm_mapped)
		return;
	for (i = 0; i < SQLITE_SHM_NLOCK; i++) {
		if (f->shm_excl_mask & (1u << i))
			n->shm_writer[i] = 0;
		if (f->shm_shared_mask & (1u << i))
			n->shm_readers[i]--;
	}
	f->shm_excl_mask = 0;
	f->shm_shared_mask = 0;
	f->shm_mapped = 0;
	if (--n->shm_maps == 0)
		vfs_shm_free(n);
}

int vfs_shm_map(sqlite3_file *file, int region, int size, int extend,
			 void volatile **out)
{
	struct vfile *f = (struct vfile *)file;
	struct vnode *n = f->node;
	int rc = SQLITE_OK;

	*out = NULL;
	if (region < 0 || size <= 0)
		return SQLITE_IOERR_SHMMAP;
	pthread_mutex_lock(&vfs_mu);
	if (n->shm_size && n->shm_size != size) {
		rc = SQLITE_IOERR_SHMSIZE;
		goto out;
	}
	if (!f->shm_mapped) {
		f->shm_mapped = 1;
		n->shm_maps++;
	}
	n->shm_size = size;
	if (region >= n->shm_n) {
		void **grown;

		if (!extend)
			goto out;
		if (region >= SHM_REGIONS_MAX) {
			rc = SQLITE_IOERR_SHMMAP;
			goto out;
		}
		grown = realloc(n->shm, sizeof(*grown) * (size_t)(region + 1));
		if (!grown) {
			rc = SQLITE_IOERR_NOMEM;
			goto out;
		}
		n->shm = grown;
		while (n->shm_n <= region) {
			n->shm[n->shm_n] = calloc(1, (size_t)size);
			if (!n->shm[n->shm_n]) {
				rc = SQLITE_IOERR_NOMEM;
				goto out;
			}
			n->shm_n++;
		}
	}
	*out = n->shm[region];
out:
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

/* The WAL-index locks: SQLITE_SHM_NLOCK slots, each shared by many or held
 * exclusive by one connection (os_unix.c's rules, in-process only). */
int vfs_shm_lock(sqlite3_file *file, int ofst, int cnt, int flags)
{
	struct vfile *f = (struct vfile *)file;
	struct vnode *n = f->node;
	unsigned mask;
	int i, rc = SQLITE_OK;

	if (ofst < 0 || cnt < 1 || ofst + cnt > SQLITE_SHM_NLOCK)
		return SQLITE_IOERR_SHMLOCK;
	mask = (1u << (ofst + cnt)) - (1u << ofst);
	pthread_mutex_lock(&vfs_mu);
	if (flags & SQLITE_SHM_UNLOCK) {
		for (i = ofst; i < ofst + cnt; i++) {
			if (f->shm_excl_mask & (1u << i))
				n->shm_writer[i] = 0;
			if (f->shm_shared_mask & (1u << i))
				n->shm_readers[i]--;
		}
		f->shm_excl_mask &= ~mask;
		f->shm_shared_mask &= ~mask;
	} else if (flags & SQLITE_SHM_SHARED) {
		if ((f->shm_shared_mask & mask) == mask)
			goto out;
		for (i = ofst; i < ofst + cnt; i++) {
			if (n->shm_writer[i] && !(f->shm_excl_mask & (1u << i))) {
				rc = SQLITE_BUSY;
				goto out;
			}
		}
		for (i = ofst; i < ofst + cnt; i++) {
			if (!(f->shm_shared_mask & (1u << i)))
				n->shm_readers[i]++;
		}
		f->shm_shared_mask |= mask;
	} else {
		for (i = ofst; i < ofst + cnt; i++) {
			int mine = !!(f->shm_shared_mask & (1u << i));

			if ((n->shm_writer[i] && !(f->shm_excl_mask & (1u << i))) ||
			    n->shm_readers[i] - mine > 0) {
				rc = SQLITE_BUSY;
				goto out;
			}
		}
		for (i = ofst; i < ofst + cnt; i++) {
			if (f->shm_shared_mask & (1u << i))
				n->shm_readers[i]--;
			n->shm_writer[i] = 1;
		}
		f->shm_shared_mask &= ~mask;
		f->shm_excl_mask |= mask;
	}
out:
	pthread_mutex_unlock(&vfs_mu);
	return rc;
}

void vfs_shm_barrier(sqlite3_file *file)
{
	(void)file;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

int vfs_shm_unmap(sqlite3_file *file, int delete_flag)
{
	struct vfile *f = (struct vfile *)file;

	(void)delete_flag; /* heap memory: nothing outlives the last mapping */
	pthread_mutex_lock(&vfs_mu);
	vfs_shm_unmap_locked(f);
	pthread_mutex_unlock(&vfs_mu);
	return SQLITE_OK;
}

