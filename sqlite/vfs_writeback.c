/* vfs_writeback.c — the VFS's write-back window: SQLite's writes held in
 * order, then sent to coil in batches, journal and WAL before database (the
 * order argument is in docs/sqlite.md and at vfile_write in coil_vfs.c).
 *
 * The window is two arenas.  SQLite writes into one; when it is full in
 * the middle of a transaction (a spill), the store's sender thread sends
 * it while SQLite goes on in the other.  Every other send (a sync, a
 * commit, a read that needs coil's bytes, a lock change) first waits for
 * that one, then sends on the caller's thread.  So sends still happen one
 * at a time, in the order SQLite's writes filled them, with the same
 * contents as with one arena: only where SQLite waits has moved.  A
 * spill's failure reaches SQLite at the next write, sync or flush, and no
 * later send goes out after it (the arena behind it is dropped as failed,
 * as a failed journal send keeps a send's database pages back). */
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
 * order: a later write wins an overlap), copied out of arena @a into
 * @dst. */
static void wb_assemble(const struct warena *a, const uint32_t *order,
			uint32_t n, uint64_t p0, uint64_t p1, unsigned char *dst)
{
	for (uint32_t k = 0; k < n; k++) {
		const struct wrun *r = &a->runs[order[k]];
		uint64_t x = r->off > p0 ? r->off : p0;
		uint64_t y = r->off + r->len < p1 ? r->off + r->len : p1;

		if (x < y)
			memcpy(dst + (x - p0), a->wb + r->at + (x - r->off),
			       y - x);
	}
}

/* What a send issued: coil write calls and bytes, for the VFS's stats. */
struct wcount {
	uint64_t calls, bytes;
};

/* Send arena @a's runs of one kind (database or not) and wait for them:
 * on the caller's thread with st->wmu held, or on the sender thread, which
 * alone uses wsend, order and the completion state while a spill is in
 * flight.  Runs are merged first: sorted by object and offset,
 * touching runs form one extent — scattered spilled pages that turn out
 * adjacent, a page spilled twice (the later copy wins), journal records
 * split by page writes between them.  An extent goes out in pieces cut at
 * SEND_MAX-aligned offsets (never inside a page: pages are at most 64 KiB
 * and aligned), each one coil write, assembled in wsend and all in flight
 * until wsend is full.  Within one kind the order of writes carries no
 * meaning for SQLite between syncs (see vfs_wb_flush_locked), and a torn
 * journal record can only exist while no page of this send is written.
 * @return the first error. */
static int64_t wb_send(struct vstore *st, const struct warena *a, int db,
		       struct wcount *cnt)
{
	uint32_t i, j, n = 0;
	uint64_t used = 0;
	int64_t err;

	for (i = 0; i < a->nruns; i++)
		if (!!(a->runs[i].f->flags & SQLITE_OPEN_MAIN_DB) == db)
			st->order[n++] = i;
	if (n == 0)
		return 0;
	qsort_r(st->order, n, sizeof(*st->order), wrun_cmp, a->runs);
	for (i = 0; i < n; i = j) {
		const struct wrun *r0 = &a->runs[st->order[i]];
		struct vfile *f = r0->f;
		uint64_t p0, p1, end = r0->off + r0->len;

		for (j = i + 1; j < n; j++) {
			const struct wrun *r = &a->runs[st->order[j]];

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
				dst = a->wb + r0->at + (p0 - r0->off);
			} else {
				if (used + (p1 - p0) > WSEND_BYTES) {
					wb_wait_inflight(st);
					used = 0;
				}
				dst = st->wsend + used;
				used += p1 - p0;
				wb_assemble(a, st->order + i, j - i, p0, p1, dst);
			}
			cnt->calls++;
			cnt->bytes += p1 - p0;
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

/* Both kinds of arena @a's runs, journal and WAL first, then — only if
 * they all succeeded — the database's.  @return the first error. */
static int64_t wb_send_arena(struct vstore *st, const struct warena *a,
			     struct wcount *cnt)
{
	int64_t err = wb_send(st, a, 0, cnt);

	if (err == 0)
		err = wb_send(st, a, 1, cnt);
	pthread_mutex_lock(&st->cmu);
	st->werr = 0;
	st->werr_node = NULL;
	pthread_mutex_unlock(&st->cmu);
	return err;
}

/* Arena @idx is sent, or dropped after a failure @err (st->wmu held). */
static void wb_settle(struct vstore *st, int idx, int64_t err)
{
	struct warena *a = &st->arena[idx];

	for (uint32_t i = 0; i < a->nruns; i++) {
		struct vnode *n = a->runs[i].f->node;

		/* On failure the cache may hold bytes coil never took (@bad,
		 * or any object whose writes were then not sent), and the
		 * connection that wrote them may not be the one this error
		 * returns to: the object remembers it (vnode.wb_err). */
		if (err < 0) {
			vcache_drop(&st->rc, n);
			if (!n->wb_err)
				n->wb_err = err;
		}
		n->wb_runs[idx] = 0;
		n->wb_last[idx] = 0;
	}
	a->nruns = 0;
	a->used = 0;
}

static void *wb_sender_main(void *arg)
{
	struct vstore *st = arg;

	/* as coil names its own threads, for top -H, perf and gdb */
	(void)pthread_setname_np(pthread_self(), "coil-vfs-send");
	pthread_mutex_lock(&st->cmu);
	for (;;) {
		struct wcount cnt = { 0, 0 };
		int64_t err;
		int idx;

		while (!st->bg_busy && !st->sender_stop)
			pthread_cond_wait(&st->scv, &st->cmu);
		if (!st->bg_busy)
			break;
		idx = st->bg_idx;
		pthread_mutex_unlock(&st->cmu);
		err = wb_send_arena(st, &st->arena[idx], &cnt);
		pthread_mutex_lock(&st->cmu);
		st->bg_err = err;
		st->bg_calls += cnt.calls;
		st->bg_bytes += cnt.bytes;
		st->bg_busy = false;
		pthread_cond_broadcast(&st->ccv);
	}
	pthread_mutex_unlock(&st->cmu);
	return NULL;
}

int vfs_wb_init(struct vstore *st)
{
	pthread_mutex_init(&st->cmu, NULL);
	pthread_cond_init(&st->ccv, NULL);
	pthread_cond_init(&st->scv, NULL);
	st->arena[0].wb = malloc(st->wb_cap);
	st->arena[0].runs = calloc(WB_RUNS, sizeof(*st->arena[0].runs));
	st->wsend = malloc(WSEND_BYTES);
	st->order = calloc(WB_RUNS, sizeof(*st->order));
	if (!st->arena[0].wb || !st->arena[0].runs || !st->wsend ||
	    !st->order) {
		vfs_wb_fini(st);
		return -ENOMEM;
	}
	return 0;
}

/* Stops the sender (the window was flushed or abandoned: no spill is in
 * flight once the last file closed) and frees the window. */
void vfs_wb_fini(struct vstore *st)
{
	if (st->sender_started) {
		pthread_mutex_lock(&st->cmu);
		st->sender_stop = true;
		pthread_cond_signal(&st->scv);
		pthread_mutex_unlock(&st->cmu);
		pthread_join(st->sender, NULL);
		st->sender_started = false;
	}
	pthread_cond_destroy(&st->scv);
	pthread_cond_destroy(&st->ccv);
	pthread_mutex_destroy(&st->cmu);
	for (int k = 0; k < 2; k++) {
		free(st->arena[k].wb);
		free(st->arena[k].runs);
		st->arena[k].wb = NULL;
		st->arena[k].runs = NULL;
	}
	free(st->wsend);
	free(st->order);
	st->wsend = NULL;
	st->order = NULL;
}

/* Wait for the spill in flight, if any, and settle it (st->wmu held).
 * @return its result. */
static int64_t wb_spill_settle_locked(struct vstore *st)
{
	int idx = !st->cur;
	int64_t err;

	if (st->arena[idx].nruns == 0)
		return 0;
	pthread_mutex_lock(&st->cmu);
	while (st->bg_busy)
		pthread_cond_wait(&st->ccv, &st->cmu);
	err = st->bg_err;
	st->bg_err = 0;
	st->n_write_calls += st->bg_calls;
	st->b_sent += st->bg_bytes;
	st->bg_calls = st->bg_bytes = 0;
	pthread_mutex_unlock(&st->cmu);
	wb_settle(st, idx, err);
	return err;
}

/* The second arena and the sender thread, at the first spill.  @return
 * false when either cannot be had: the window then flushes in place. */
static bool wb_sender_ready(struct vstore *st)
{
	struct warena *b = &st->arena[!st->cur];

	if (st->sender_started)
		return true;
	if (!b->wb)
		b->wb = malloc(st->wb_cap);
	if (!b->runs)
		b->runs = calloc(WB_RUNS, sizeof(*b->runs));
	if (!b->wb || !b->runs)
		return false;
	if (pthread_create(&st->sender, NULL, wb_sender_main, st) != 0)
		return false;
	st->sender_started = true;
	return true;
}

/* Every write the VFS accepted is completed in coil (st->wmu held): the
 * spill in flight, then the arena SQLite fills.  @return SQLITE_OK or the
 * error of the first failure. */
int vfs_wb_flush_locked(struct vstore *st)
{
	struct warena *a = &st->arena[st->cur];
	struct wcount cnt = { 0, 0 };
	int64_t err = wb_spill_settle_locked(st);

	if (a->nruns == 0)
		return err < 0 ? vfs_err_to_sqlite(err, SQLITE_IOERR_WRITE)
			       : SQLITE_OK;
	if (err == 0) {
		err = wb_send_arena(st, a, &cnt);
		st->n_write_calls += cnt.calls;
		st->b_sent += cnt.bytes;
	}
	wb_settle(st, st->cur, err);
	return err < 0 ? vfs_err_to_sqlite(err, SQLITE_IOERR_WRITE) : SQLITE_OK;
}

/* The arena SQLite fills is full: hand it to the sender and go on in the
 * other, once the spill before it is settled (st->wmu held). */
static int wb_spill_locked(struct vstore *st)
{
	int64_t err = wb_spill_settle_locked(st);

	if (err < 0) {
		wb_settle(st, st->cur, err);
		return vfs_err_to_sqlite(err, SQLITE_IOERR_WRITE);
	}
	if (!wb_sender_ready(st))
		return vfs_wb_flush_locked(st);
	pthread_mutex_lock(&st->cmu);
	st->bg_idx = st->cur;
	st->bg_busy = true;
	pthread_cond_signal(&st->scv);
	pthread_mutex_unlock(&st->cmu);
	st->cur = !st->cur;
	st->n_spills++;
	return SQLITE_OK;
}

int vfs_wb_write_locked(struct vfile *f, const unsigned char *p, size_t len,
			uint64_t off)
{
	struct vstore *st = f->st;
	struct warena *a;
	struct wrun *r;
	int rc;

	if (st->arena[st->cur].used + len > st->wb_cap ||
	    st->arena[st->cur].nruns == WB_RUNS) {
		rc = wb_spill_locked(st);
		if (rc != SQLITE_OK)
			return rc;
	}
	a = &st->arena[st->cur];
	/* Bytes the object's latest run in this arena already holds (a WAL
	 * frame's page written again in the same transaction, among the
	 * frames appended after it): written over in place, as the send
	 * would have assembled them (a later write wins), so the run stays
	 * whole and goes out from the arena itself.  No send reads this
	 * arena meanwhile: the sender sends the other one, and a send of
	 * this one holds wmu, as its writer does. */
	r = f->node->wb_last[st->cur] ?
		    &a->runs[f->node->wb_last[st->cur] - 1] : NULL;
	if (r && off >= r->off && off + len <= r->off + r->len) {
		memcpy(a->wb + r->at + (off - r->off), p, len);
		st->n_wb_inplace++;
		return SQLITE_OK;
	}
	r = a->nruns ? &a->runs[a->nruns - 1] : NULL;
	if (r && r->f == f && r->off + r->len == off &&
	    r->at + r->len == a->used) {
		r->len += (uint32_t)len;
	} else {
		r = &a->runs[a->nruns++];
		r->f = f;
		r->off = off;
		r->len = (uint32_t)len;
		r->at = (uint32_t)a->used;
		f->node->wb_runs[st->cur]++;
	}
	f->node->wb_last[st->cur] = (uint32_t)(r - a->runs) + 1;
	memcpy(a->wb + a->used, p, len);
	a->used += len;
	return SQLITE_OK;
}

bool vfs_wb_has(const struct vnode *node)
{
	return node->wb_runs[0] > 0 || node->wb_runs[1] > 0;
}

bool vfs_wb_others(const struct vstore *st, const struct vnode *node)
{
	return st->arena[0].nruns > (uint32_t)node->wb_runs[0] ||
	       st->arena[1].nruns > (uint32_t)node->wb_runs[1];
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

/* Flush only when @node has writes in the window: reads and sizes of
 * other objects need not wait. */
int vfs_wb_flush_node(struct vstore *st, struct vnode *node)
{
	int rc = SQLITE_OK;

	pthread_mutex_lock(&st->wmu);
	if (vfs_wb_has(node))
		rc = vfs_wb_flush_locked(st);
	if (rc == SQLITE_OK && node->wb_err)
		rc = vfs_err_to_sqlite(node->wb_err, SQLITE_IOERR_FSTAT);
	pthread_mutex_unlock(&st->wmu);
	return rc;
}

/* Lay arena @a's writes to @node over @data, the chunk at @chunk. */
static uint32_t wb_overlay_arena(const struct warena *a,
				 const struct vnode *node, uint64_t chunk,
				 unsigned char *data, uint32_t clen)
{
	for (uint32_t i = 0; i < a->nruns; i++) {
		const struct wrun *r = &a->runs[i];
		uint64_t x, y;

		if (r->f->node != node || r->off >= chunk + VCACHE_CHUNK ||
		    r->off + r->len <= chunk)
			continue;
		x = r->off > chunk ? r->off : chunk;
		y = r->off + r->len < chunk + VCACHE_CHUNK ? r->off + r->len
							   : chunk + VCACHE_CHUNK;
		memcpy(data + (x - chunk), a->wb + r->at + (x - r->off), y - x);
		if (y - chunk > clen)
			clen = (uint32_t)(y - chunk);
	}
	return clen;
}

/* Lay the window's writes to @node over the chunk at @chunk just read
 * from coil (@clen bytes; past them the object was a hole or ended), in
 * arrival order: the spill in flight, then the arena SQLite fills.  What
 * coil returned for a range the spill is writing may be old or new; the
 * spill's bytes replace it either way.  @return the chunk's new valid
 * length. */
uint32_t vfs_wb_overlay(struct vstore *st, const struct vnode *node,
			uint64_t chunk, unsigned char *data, uint32_t clen)
{
	int bg = !st->cur;

	memset(data + clen, 0, VCACHE_CHUNK - clen);
	if (node->wb_runs[bg] > 0)
		clen = wb_overlay_arena(&st->arena[bg], node, chunk, data,
					clen);
	if (node->wb_runs[st->cur] > 0)
		clen = wb_overlay_arena(&st->arena[st->cur], node, chunk, data,
					clen);
	return clen;
}
