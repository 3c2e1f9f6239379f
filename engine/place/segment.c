/* engine/place/segment.c — the data area: segment states, live bytes, and placing
 * a write's encoded blobs into the active segment.
 *
 * Live bytes count the logical bytes extent maps reference in a segment (an
 * extent split by an overwrite keeps exact sums).  A sealed segment with no
 * live bytes and no write in flight becomes PENDING: it is reused only after
 * the next checkpoint is durable, because until then the journal may still
 * hold records whose replay must find (and verify) those blobs.
 *
 * The allocator calls nothing above it: the checkpoint, the cleaner and the
 * cache are told what happened through the report seg_place_write returns
 * (SEG_REPORT_*), and their caller decides (io/wreq.c, io/write.c). */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/wreq.h"
#include "engine/place/bufpool.h"
#include "engine/place/dev.h"
#include "engine/place/object.h"
#include "engine/place/reserve.h"
#include "engine/place/segment.h"
#include "engine/store.h"

uint32_t seg_of(const struct coil_store *s, uint64_t dev_off)
{
	COIL_ASSERT(dev_off >= s->sb.data_off);
	return (uint32_t)((dev_off - s->sb.data_off) / s->sb.segment_size);
}

uint64_t seg_base(const struct coil_store *s, uint32_t idx)
{
	return s->sb.data_off + (uint64_t)idx * s->sb.segment_size;
}

void seg_maybe_pending(struct coil_store *s, uint32_t idx)
{
	struct seg *g = &s->segs[idx];

	if (g->state == SEG_SEALED && g->live == 0 && g->inflight == 0) {
		g->state = SEG_PENDING;
		g->pending_lin = s->applied_hi_lin;
	}
}

void seg_drop_live(void *arg, struct blobd *b, uint32_t len)
{
	struct coil_store *s = arg;
	uint32_t idx;

	if (blobd_is_mem(b))
		return;
	idx = seg_of(s, b->dev_off);

	COIL_ASSERT(idx < s->nseg);
	COIL_ASSERT(s->segs[idx].live >= len);
	s->segs[idx].live -= len;
	if (!(b->flags & FMT_BLOB_OPTIMIZED)) {
		COIL_ASSERT(s->segs[idx].unopt >= len);
		s->segs[idx].unopt -= len;
	}
	seg_maybe_pending(s, idx);
}

static void seghdr_written(struct uring_io *io, int res)
{
	struct coil_store *s = io->arg;

	/* The header is informational (docs/format.md): a failed write of it
	 * costs nothing but a debugging aid. */
	(void)res;
	bufpool_put(&s->bp, io->buf);
	free(io);
}

static void seg_write_header(struct coil_store *s, uint32_t idx)
{
	struct uring_io *io = malloc(sizeof(*io));
	uint8_t *buf = bufpool_get(&s->bp, FMT_BLOCK);
	struct fmt_seghdr h = { .store_id = s->store_id, .index = idx };

	pthread_mutex_lock(&s->jlock); /* mlock -> jlock: the lock order */
	h.open_seq = s->j_next_seq;
	pthread_mutex_unlock(&s->jlock);

	if (!io || !buf || fmt_seghdr_encode(&h, buf, FMT_BLOCK) < 0) {
		free(io);
		bufpool_put(&s->bp, buf);
		return;
	}
	uring_io_prep(io, URING_OP_WRITE, buf, FMT_BLOCK, seg_base(s, idx),
		      seghdr_written, s);
	if (uring_submit(s->ring, io) < 0) {
		bufpool_put(&s->bp, buf);
		free(io);
		return;
	}
	stat_add(&s->st.dev_bytes_written, FMT_BLOCK);
}

bool seg_seal_active(struct coil_store *s)
{
	uint32_t a = s->active;

	if (a == UINT32_MAX || s->segs[a].inflight)
		return false;
	s->segs[a].state = SEG_SEALED;
	seg_maybe_pending(s, a);
	s->active = UINT32_MAX;
	return true;
}

static int seg_open_next(struct coil_store *s, unsigned *rep)
{
	uint32_t pending = 0;
	int rc;

	if (s->active != UINT32_MAX) {
		s->segs[s->active].state = SEG_SEALED;
		seg_maybe_pending(s, s->active);
		s->active = UINT32_MAX;
	}
	/* A file takes its lowest free segment: one freed keeps its blocks
	 * (they are not punched) and is used again before a segment that
	 * has none, so the file grows only when every segment it has is
	 * taken (after a pass of the cleaner or the optimizer, say).  A
	 * device goes round from its cursor. */
	uint32_t from = s->is_blk ? s->alloc_cursor : 0;

	for (uint32_t n = 0; n < s->nseg; n++) {
		uint32_t i = (from + n) % s->nseg;
		struct seg *g = &s->segs[i];

		if (g->state == SEG_PENDING)
			pending++;
		if (g->state != SEG_FREE)
			continue;
		rc = reserve_seg(s, i, seg_base(s, i));
		if (rc < 0)
			return rc; /* the file system is full: it stays free */
		g->state = SEG_ACTIVE;
		g->gen++; /* the old tenant's cache keys die with it */
		g->live = 0;
		g->unopt = 0;
		g->placed_ns = 0;
		s->active = i;
		s->active_head = FMT_BLOCK;
		s->alloc_cursor = (i + 1) % s->nseg;
		s->free_segs--;
		seg_write_header(s, i);
		/* Keep a quarter of the segments free: pending ones come back
		 * only through a checkpoint (the policy above decides who
		 * takes it: the cleaner's passes, or wreq_place). */
		*rep |= SEG_REPORT_OPENED;
		if (s->free_segs < s->nseg / 4)
			*rep |= SEG_REPORT_LOW;
		return 0;
	}
	if (pending)
		*rep |= SEG_REPORT_PENDING;
	return -ENOSPC;
}

/* Close the run [start, p) of the batch at device offset dev: pad to BLOCK
 * and describe its write. */
static int run_close(struct coil_store *s, struct wreq *w, size_t start,
		     size_t *p, uint64_t dev, bool *fresh)
{
	size_t len = COIL_ALIGN_UP(*p - start, FMT_BLOCK);
	struct wrun *r;

	if (w->nruns == w->cap_runs) {
		uint32_t ncap = w->cap_runs ? w->cap_runs * 2 : 4;
		struct wrun *nr = realloc(w->runs, ncap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		w->runs = nr;
		w->cap_runs = ncap;
	}
	memset(w->batch + *p, 0, start + len - *p);
	r = &w->runs[w->nruns++];
	r->w = w;
	r->seg = s->active;
	r->seg_fresh = *fresh;
	*fresh = false;
	uring_io_prep(&r->io, URING_OP_WRITE, w->batch + start, (uint32_t)len,
		      dev, NULL, r);
	s->active_head = dev + len - seg_base(s, s->active);
	s->segs[s->active].inflight++;
	*p = start + len;
	return 0;
}

uint64_t seg_bytes_per_free(const struct coil_store *s)
{
	return s->sb.segment_size - FMT_BLOCK - (s->max_blob + FMT_BLOCK);
}

/* Bytes of batch the free space can surely take. */
static uint64_t seg_capacity(const struct coil_store *s)
{
	uint64_t cap = (uint64_t)s->free_segs * seg_bytes_per_free(s);

	if (s->active != UINT32_MAX &&
	    s->active_head + s->max_blob + FMT_BLOCK < s->sb.segment_size)
		cap += s->sb.segment_size - s->active_head - s->max_blob - FMT_BLOCK;
	return cap;
}

int seg_room_check(struct coil_store *s, struct wreq *w, uint64_t keep,
		   unsigned *rep)
{
	uint64_t cap = seg_capacity(s);

	w->space_pending = false;
	/* Refuse before touching the batch (placement packs it in place, so
	 * a write cannot be placed twice): a caller that sees -ENOSPC with
	 * space_pending may wait for the checkpoint that frees the PENDING
	 * segments and try again. */
	if (w->batch_len <= (cap > keep ? cap - keep : 0))
		return 0;
	for (uint32_t i = 0; i < s->nseg && !w->space_pending; i++)
		w->space_pending = s->segs[i].state == SEG_PENDING;
	if (w->space_pending)
		*rep |= SEG_REPORT_PENDING;
	return -ENOSPC;
}

int seg_place_write(struct coil_store *s, struct wreq *w, unsigned *rep)
{
	uint64_t now = coil_now_ns();
	size_t p = 0, start = 0;
	uint64_t run_dev = 0;
	bool open = false, fresh = false;
	int rc = 0;

	w->nruns = 0;
	for (uint32_t k = 0; k < w->nblobs; k++) {
		struct fmt_blob *fb = &w->fb[k];
		bool raw = fb->codec == FMT_CODEC_RAW;
		size_t q;
		uint64_t seg_end;

		for (int attempt = 0;; attempt++) {
			if (!open) {
				if (s->active == UINT32_MAX ||
				    s->active_head + FMT_BLOCK > s->sb.segment_size) {
					rc = seg_open_next(s, rep);
					if (rc < 0)
						goto fail;
					fresh = true;
				}
				start = p; /* aligned: runs end padded */
				run_dev = seg_base(s, s->active) + s->active_head;
				open = true;
			}
			/* raw blobs start on a block (a partial read takes
			 * just its sectors), except one shorter than a block:
			 * packed like a compressed one (small objects, the
			 * packer's batches) */
			q = raw && fb->logical_len >= FMT_BLOCK ?
			    COIL_ALIGN_UP(p, FMT_BLOCK) : p;
			seg_end = seg_base(s, s->active) + s->sb.segment_size;
			if (run_dev + (q - start) + fb->stored_len <= seg_end)
				break;
			COIL_ASSERT(attempt == 0);
			/* Does not fit: finish this run, seal the segment. */
			if (p > start) {
				rc = run_close(s, w, start, &p, run_dev, &fresh);
				if (rc < 0)
					goto fail;
			}
			s->active_head = s->sb.segment_size;
			open = false;
		}
		COIL_ASSERT(q <= w->slot[k]);
		if (q != w->slot[k])
			memmove(w->batch + q, w->batch + w->slot[k],
				fb->stored_len);
		fb->dev_off = run_dev + (q - start);
		s->segs[s->active].placed_ns = now;
		p = q + fb->stored_len;
	}
	if (open && p > start)
		rc = run_close(s, w, start, &p, run_dev, &fresh);
	if (rc < 0)
		goto fail;
	return 0;
fail:
	/* Space already taken by closed runs is dead: their segments get no
	 * live bytes and become reusable once sealed. */
	seg_inflight_done(s, w);
	w->nruns = 0;
	return rc;
}

/* The write's extents were applied (or the write failed): its segments may
 * become reusable. */
void seg_inflight_done(struct coil_store *s, struct wreq *w)
{
	for (uint32_t i = 0; i < w->nruns; i++) {
		struct seg *g = &s->segs[w->runs[i].seg];
		COIL_ASSERT(g->inflight > 0);
		g->inflight--;
		seg_maybe_pending(s, w->runs[i].seg);
	}
	COIL_ASSERT(s->ckpt_reserved >= w->ckpt_res);
	s->ckpt_reserved -= w->ckpt_res;
	w->ckpt_res = 0;
}

bool seg_recount_live(struct coil_store *s, uint64_t *live)
{
	bool past_size = false;

	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o; o = o->id_next) {
			struct extmap_iter it;
			const struct ext *e;

			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it))) {
				if (e->off + e->len > o->size)
					past_size = true;
				if (!blobd_is_mem(e->b))
					live[seg_of(s, e->b->dev_off)] +=
						e->len;
			}
		}
	}
	return past_size;
}

/* Recount every segment's live bytes from the extent maps and compare
 * with the running counts (tests, `coil check`).  @return 0, or -EIO with
 * the first mismatch in *@bad_seg. */
int seg_verify_accounting(struct coil_store *s, uint32_t *bad_seg)
{
	uint64_t *live = calloc(s->seg_cap ? s->seg_cap : 1, sizeof(*live));
	int rc = 0;

	if (!live)
		return -ENOMEM;
	pthread_mutex_lock(&s->mlock);
	if (seg_recount_live(s, live))
		rc = -EIO; /* an extent past its object's size */
	for (uint32_t i = 0; i < s->nseg && rc == 0; i++) {
		const struct seg *g = &s->segs[i];
		if (g->live != live[i] ||
		    (live[i] && (g->state == SEG_FREE || g->state == SEG_PENDING))) {
			rc = -EIO;
			if (bad_seg)
				*bad_seg = i;
		}
	}
	pthread_mutex_unlock(&s->mlock);
	free(live);
	return rc;
}

/* ---- discard ------------------------------------------------------------- */

int seg_discard_init(struct coil_store *s, bool off)
{
	s->disc.run = calloc(s->seg_cap, sizeof(*s->disc.run));
	if (!s->disc.run)
		return -ENOMEM;
	atomic_store(&s->disc.off, off);
	return 0;
}

void seg_discard_destroy(struct coil_store *s)
{
	free(s->disc.run);
	s->disc.run = NULL;
}

void seg_discard_range(struct coil_store *s, uint32_t first, uint32_t n)
{
	struct seg_discard *d = &s->disc;
	uint64_t off = seg_base(s, first), len = (uint64_t)n * s->sb.segment_size;
	int rc = 0;

	if (!d->run || n == 0 || atomic_load(&d->off))
		return;
	/* Before the punch, which may succeed in part: a punched segment's
	 * blocks are allocated again before it takes writes (reserve.c). */
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < n; i++)
		s->segs[first + i].reserved = false;
	pthread_mutex_unlock(&s->mlock);
	/* uring lengths are 32-bit: in pieces below 4 GiB. */
	for (uint64_t done = 0; done < len && rc == 0;) {
		uint32_t step = (uint32_t)COIL_MIN(len - done, 1ull << 30);
		rc = store_io_sync(s, URING_OP_DISCARD, NULL, step, off + done);
		done += step;
	}
	if (rc == -EOPNOTSUPP || rc == -ENOTTY || rc == -EINVAL) {
		/* The file system or device cannot punch: stop asking. */
		atomic_store(&d->off, true);
	}
	if (rc < 0) {
		stat_add(&d->errors, 1);
		return;
	}
	stat_add(&d->discards, 1);
	stat_add(&d->bytes, len);
}

void seg_discard_freed(struct coil_store *s)
{
	struct seg_discard *d = &s->disc;
	uint32_t nr = 0;

	if (!d->run || atomic_load(&d->off))
		return;
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++) {
		const struct seg *g = &s->segs[i];
		bool go = g->in_ckpt && g->state == SEG_PENDING &&
			  atomic_load(&g->readers) == 0;

		if (!go)
			continue;
		if (nr && d->run[nr - 1].first + d->run[nr - 1].n == i) {
			d->run[nr - 1].n++;
		} else {
			d->run[nr].first = i;
			d->run[nr].n = 1;
			nr++;
		}
	}
	pthread_mutex_unlock(&s->mlock);
	for (uint32_t r = 0; r < nr; r++)
		seg_discard_range(s, d->run[r].first, d->run[r].n);
}

/* ---- what a closing store gives back --------------------------------------- */

uint64_t seg_give_back_unwritten(struct coil_store *s)
{
	uint64_t off = s->sb.data_off, end = seg_base(s, s->nseg), given = 0;
	uint64_t turns;

	COIL_ASSERT(off % FMT_BLOCK == 0 && end >= off);
	/* SEEK_HOLE reads an unwritten extent as data where the page cache
	 * holds pages over it (a buffered reader of the file, a backup, put
	 * them there): such blocks would stay allocated.  Coil reads the data
	 * area with O_DIRECT, so its clean pages are nobody's need; dirty ones
	 * are not dropped and stay data, which they are. */
	(void)posix_fadvise(s->fd, (off_t)off, (off_t)(end - off),
			    POSIX_FADV_DONTNEED);
	/* One turn per hole between written runs.  Not bounded by the
	 * segments: writes lost to a power cut leave holes inside one, and
	 * a bound of two per segment left the last of them allocated.  Each
	 * turn moves @off a block at least. */
	turns = (end - off) / FMT_BLOCK + 1;
	for (uint64_t n = 0; off < end && n < turns; n++) {
		off_t hole = lseek(s->fd, (off_t)off, SEEK_HOLE);
		off_t data;
		uint64_t a, z;

		if (hole < 0 || (uint64_t)hole >= end)
			break;
		data = lseek(s->fd, hole, SEEK_DATA);
		/* ENXIO: no data after the hole, it runs to the file's end */
		z = data < 0 ? end : COIL_MIN((uint64_t)data, end);
		a = COIL_ALIGN_UP((uint64_t)hole, FMT_BLOCK);
		z = COIL_ALIGN_DOWN(z, FMT_BLOCK);
		if (z > a && store_punch(s, a, z - a) == 0)
			given += z - a;
		if (data < 0)
			break;
		off = (uint64_t)data;
	}
	return given;
}

void seg_resume_reserve(struct coil_store *s)
{
	uint32_t a = s->active;

	if (a == UINT32_MAX || s->is_blk || s->filled)
		return;
	COIL_ASSERT(s->active_head % FMT_BLOCK == 0);
	COIL_ASSERT(s->active_head <= s->sb.segment_size);
	if (reserve_range(s, seg_base(s, a) + s->active_head,
			  s->sb.segment_size - s->active_head) == 0)
		return;
	/* It holds data: sealed, the cleaner's like any other. */
	s->segs[a].state = SEG_SEALED;
	s->active = UINT32_MAX;
}

/* ---- relocation ----------------------------------------------------------- */
