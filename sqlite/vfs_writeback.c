/* vfs_writeback.c — the VFS's write-back window: SQLite's writes held in
 * order, then sent to coil in batches, journal and WAL before database (the
 * order argument is in docs/sqlite.md and at vfile_write in coil_vfs.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vfs.h"

/* Completion of a sent piece, on a coil thread: only cmu. */
/* A piece's result: the send's first error (st->cmu held). */
static void wpiece_result_locked(struct vstore *st, struct vfile *f,
				 int64_t res)
{
	if (res < 0 && !st->werr) {
		st->werr = res;
		st->werr_node = f->node;
	}
}

static void wpiece_done(void *arg, int64_t res)
{
	struct vfile *f = arg;
	struct vstore *st = f->st;

	pthread_mutex_lock(&st->cmu);
	wpiece_result_locked(st, f, res);
	st->inflight--;
	pthread_cond_broadcast(&st->ccv);
	pthread_mutex_unlock(&st->cmu);
}

/* A piece written with coil_pwrite: its result, as wpiece_done records
 * an asynchronous one's. */
static void wpiece_sync_done(struct vstore *st, struct vfile *f, int64_t res)
{
	pthread_mutex_lock(&st->cmu);
	wpiece_result_locked(st, f, res);
	pthread_mutex_unlock(&st->cmu);
}

static void wb_wait_inflight(struct vstore *st)
{
	pthread_mutex_lock(&st->cmu);
	while (st->inflight > 0)
		pthread_cond_wait(&st->ccv, &st->cmu);
	pthread_mutex_unlock(&st->cmu);
}

/* Order runs by object, then offset, then arrival. */
static int wrun_cmp(const void *a, const void *b, void *ctx)
{
	const struct wrun *runs = ctx;
	uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
	const struct wrun *ra = &runs[ia], *rb = &runs[ib];
	uintptr_t na = (uintptr_t)ra->f->node, nb = (uintptr_t)rb->f->node;

	if (na != nb)
		return na < nb ? -1 : 1;
	if (ra->off != rb->off)
		return ra->off < rb->off ? -1 : 1;
	return ia < ib ? -1 : ia > ib;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Bytes [@p0, @p1) of an extent made of the @n runs @order (in arrival
 * order: a later write wins an overlap), copied out of the arena into
 * @dst. */
static void wb_assemble(const struct vstore *st, const uint32_t *order,
			uint32_t n, uint64_t p0, uint64_t p1, unsigned char *dst)
{
	for (uint32_t k = 0; k < n; k++) {
		const struct wrun *r = &st->runs[order[k]];
		uint64_t a = r->off > p0 ? r->off : p0;
		uint64_t b = r->off + r->len < p1 ? r->off + r->len : p1;

		if (a < b)
			memcpy(dst + (a - p0), st->wb + r->at + (a - r->off),
			       b - a);
	}
}

/* Send the arena's runs of one kind (database or not) and wait for them
 * (st->wmu held).  Runs are merged first: sorted by object and offset,
 * touching runs form one extent — scattered spilled pages that turn out
 * adjacent, a page spilled twice (the later copy wins), journal records
 * split by page writes between them.  An extent goes out in pieces cut at
 * SEND_MAX-aligned offsets (never inside a page: pages are at most 64 KiB
 * and aligned), each one coil write, assembled in wsend and all in flight
 * until wsend is full.  Within one kind the order of writes carries no
 * meaning for SQLite between syncs (see vfs_wb_flush_locked), and a torn
 * journal record can only exist while no page of this send is written.
 * @return the first error. */
static int64_t wb_send(struct vstore *st, int db)
{
	uint32_t i, j, n = 0;
	uint64_t used = 0;
	int64_t err;

	for (i = 0; i < st->nruns; i++)
		if (!!(st->runs[i].f->flags & SQLITE_OPEN_MAIN_DB) == db)
			st->order[n++] = i;
	if (n == 0)
		return 0;
	qsort_r(st->order, n, sizeof(*st->order), wrun_cmp, st->runs);
	for (i = 0; i < n; i = j) {
		const struct wrun *r0 = &st->runs[st->order[i]];
		struct vfile *f = r0->f;
		uint64_t p0, p1, end = r0->off + r0->len;

		for (j = i + 1; j < n; j++) {
			const struct wrun *r = &st->runs[st->order[j]];

			if (r->f->node != f->node || r->off > end)
				break;
			if (r->off + r->len > end)
				end = r->off + r->len;
		}
		/* The extent is order[i, j): copy its runs in arrival order,
		 * so a later write wins an overlap. */
		qsort(st->order + i, j - i, sizeof(*st->order), u32_cmp);
		for (p0 = r0->off; p0 < end; p0 = p1) {
			unsigned char *dst;
			int rc;

			p1 = (p0 / SEND_MAX + 1) * SEND_MAX;
			if (p1 > end)
				p1 = end;
			if (j == i + 1) {
				/* One run (a WAL's or a journal's appends, a
				 * page): sent from the arena itself, which
				 * nothing changes until this send has
				 * waited for its writes (wmu held). */
				dst = st->wb + r0->at + (p0 - r0->off);
			} else {
				if (used + (p1 - p0) > WSEND_BYTES) {
					wb_wait_inflight(st);
					used = 0;
				}
				dst = st->wsend + used;
				used += p1 - p0;
				wb_assemble(st, st->order + i, j - i, p0, p1, dst);
			}
			st->n_write_calls++;
			st->b_sent += p1 - p0;
			pthread_mutex_lock(&st->cmu);
			if (st->inflight == 0 && p1 == end && j == n) {
				/* The send's only piece (a small commit's
				 * WAL frames or journal record): the
				 * synchronous call, which coil completes on
				 * this thread, no ring round trip. */
				int64_t w;

				pthread_mutex_unlock(&st->cmu);
				w = coil_pwrite(f->obj, dst, p1 - p0, p0);
				wpiece_sync_done(st, f, w);
				break;
			}
			st->inflight++;
			pthread_mutex_unlock(&st->cmu);
			rc = coil_write(f->obj, dst, p1 - p0, p0, wpiece_done, f);
			if (rc < 0)
				wpiece_done(f, rc); /* not submitted: no callback */
		}
	}
	wb_wait_inflight(st);
	pthread_mutex_lock(&st->cmu);
	err = st->werr;
	pthread_mutex_unlock(&st->cmu);
	return err;
}

/* Every write the VFS accepted is completed in coil (st->wmu held):
 * journal and WAL writes first, then — only if they all succeeded — the
 * database writes.  @return SQLITE_OK or the error of the first failure. */
int vfs_wb_flush_locked(struct vstore *st)
{
	int64_t err = 0;
	uint32_t i;

	if (st->nruns == 0)
		return SQLITE_OK;
	err = wb_send(st, 0);
	if (err == 0)
		err = wb_send(st, 1);
	pthread_mutex_lock(&st->cmu);
	st->werr = 0;
	st->werr_node = NULL;
	pthread_mutex_unlock(&st->cmu);
	for (i = 0; i < st->nruns; i++) {
		struct vnode *n = st->runs[i].f->node;

		/* On failure the cache may hold bytes coil never took (@bad,
		 * or any object whose writes were then not sent), and the
		 * connection that wrote them may not be the one this error
		 * returns to: the object remembers it (vnode.wb_err). */
		if (err < 0) {
			vcache_drop(&st->rc, n);
			if (!n->wb_err)
				n->wb_err = err;
		}
		n->wb_runs = 0;
	}
	st->nruns = 0;
	st->wb_used = 0;
	return err < 0 ? vfs_err_to_sqlite(err, SQLITE_IOERR_WRITE) : SQLITE_OK;
}

int vfs_wb_flush(struct vstore *st)
{
	int rc;

	pthread_mutex_lock(&st->wmu);
	rc = vfs_wb_flush_locked(st);
	pthread_mutex_unlock(&st->wmu);
	return rc;
}

int vfs_wb_flush_for_locked(struct vstore *st, struct vnode *node, int deflt)
{
	int rc = vfs_wb_flush_locked(st);

	if (rc == SQLITE_OK && node->wb_err)
		rc = vfs_err_to_sqlite(node->wb_err, deflt);
	return rc;
}

int vfs_wb_flush_for(struct vstore *st, struct vnode *node, int deflt)
{
	int rc;

	pthread_mutex_lock(&st->wmu);
	rc = vfs_wb_flush_for_locked(st, node, deflt);
	pthread_mutex_unlock(&st->wmu);
	return rc;
}

/* Flush only when @node has writes pending: reads and sizes of other
 * objects need not wait. */
int vfs_wb_flush_node(struct vstore *st, struct vnode *node)
{
	int rc = SQLITE_OK;

	pthread_mutex_lock(&st->wmu);
	if (node->wb_runs > 0)
		rc = vfs_wb_flush_locked(st);
	if (rc == SQLITE_OK && node->wb_err)
		rc = vfs_err_to_sqlite(node->wb_err, SQLITE_IOERR_FSTAT);
	pthread_mutex_unlock(&st->wmu);
	return rc;
}

/* Lay the arena's pending writes to @node over the chunk at @chunk just
 * read from coil (@clen bytes; past them the object was a hole or ended),
 * in arrival order.  @return the chunk's new valid length. */
uint32_t vfs_wb_overlay(struct vstore *st, const struct vnode *node,
			   uint64_t chunk, unsigned char *data, uint32_t clen)
{
	uint32_t i;

	memset(data + clen, 0, VCACHE_CHUNK - clen);
	for (i = 0; i < st->nruns; i++) {
		const struct wrun *r = &st->runs[i];
		uint64_t a, b;

		if (r->f->node != node || r->off >= chunk + VCACHE_CHUNK ||
		    r->off + r->len <= chunk)
			continue;
		a = r->off > chunk ? r->off : chunk;
		b = r->off + r->len < chunk + VCACHE_CHUNK ? r->off + r->len
							   : chunk + VCACHE_CHUNK;
		memcpy(data + (a - chunk), st->wb + r->at + (a - r->off), b - a);
		if (b - chunk > clen)
			clen = (uint32_t)(b - chunk);
	}
	return clen;
}

