/* prefetch/readahead.c — the readahead policy of one object stream, and
 * pf_apply, which turns its advice into admissions.
 *
 * The policy follows the shape RocksDB's auto-readahead and Linux's
 * ondemand readahead share: stay quiet until the reader has continued where
 * it left off seq_trigger times in a row (RocksDB starts on the third
 * sequential read), then keep a window of blobs admitted ahead of the reader
 * and double it up to a maximum each time the reader has consumed half of it
 * (Linux's asynchronous readahead mark: refills come in batches of at least
 * half a window, which lets the engine coalesce adjacent blob reads).  A
 * read elsewhere is a pattern change: the stream's queued prefetch is
 * useless, so the caller cancels, and the next run starts from half the
 * window the broken run had reached.  Windows are counted in blobs because
 * a blob is coil's unit of decode and checksum: fetching part of one saves
 * nothing.
 */
#include <errno.h>

#include "common/common.h"
#include "prefetch/prefetch.h"

#define RA_WINDOW_MAX 65536u
#define RA_TRIGGER_MAX 1024u

void ra_config_init(struct ra_config *c, uint64_t blob_bytes)
{
	if (!c)
		return;
	c->blob_bytes = blob_bytes;
	c->window_min_blobs = 1;
	c->window_max_blobs = 8;
	c->seq_trigger = 2;
	c->refill_blobs = 0;
}

int ra_init(struct ra_state *ra, const struct ra_config *c)
{
	if (!ra || !c)
		return -EINVAL;
	if (c->blob_bytes == 0 || c->window_min_blobs == 0 ||
	    c->window_max_blobs < c->window_min_blobs ||
	    c->window_max_blobs > RA_WINDOW_MAX || c->seq_trigger == 0 ||
	    c->seq_trigger > RA_TRIGGER_MAX)
		return -EINVAL;
	memset(ra, 0, sizeof(*ra));
	ra->cfg = *c;
	ra_reset(ra);
	return 0;
}

void ra_reset(struct ra_state *ra)
{
	if (!ra)
		return;
	/* No read has happened, so none can "continue": UINT64_MAX is an
	 * offset no read of nonzero length starts at and still fits. */
	ra->seq_next = UINT64_MAX;
	ra->seq_count = 0;
	ra->window = 0;
	ra->window_restart = ra->cfg.window_min_blobs;
	ra->ahead_lo = ra->ahead_hi = ra->ahead_want = 0;
}

static inline uint64_t blob_ceil(uint64_t bytes, uint64_t bs)
{
	return bytes / bs + (bytes % bs != 0);
}

static void advice_none(struct ra_advice *adv)
{
	adv->kind = RA_NONE;
	adv->cancel = RA_CANCEL_NONE;
	adv->nblobs = 0;
	adv->first_blob = 0;
}

/* Stops the current run; the caller must cancel queued readahead. */
static void stop_run(struct ra_state *ra, struct ra_advice *adv, uint8_t why)
{
	if (ra->window > 0)
		ra->window_restart =
			COIL_MAX(ra->cfg.window_min_blobs, ra->window / 2);
	ra->window = 0;
	ra->ahead_lo = ra->ahead_hi = ra->ahead_want = 0;
	adv->cancel = why;
	ra->stats.cancels[why]++;
}

int ra_on_read(struct ra_state *ra, uint64_t off, uint64_t len,
	       uint64_t obj_size, struct ra_advice *adv)
{
	uint64_t end;

	if (!ra || !adv || ra->cfg.blob_bytes == 0 ||
	    __builtin_add_overflow(off, len, &end))
		return -EINVAL;
	advice_none(adv);
	if (len == 0)
		return 0;

	const uint64_t bs = ra->cfg.blob_bytes;

	ra->stats.reads++;
	if (ra->seq_next == UINT64_MAX) {
		/* The stream's first read starts a run; it is not random. */
		ra->seq_next = end;
		return 0;
	}
	/* A forward skip that lands inside what is already admitted (a
	 * database stepping over dead pages) still follows the run. */
	bool follows = off == ra->seq_next ||
		       (ra->window > 0 && off > ra->seq_next &&
			off / bs < ra->ahead_hi);

	/* Re-reading what the reader has just read, within the blob it is
	 * in (SQLite re-reads its current page), is not a pattern change:
	 * that blob is already fetched, and the run goes on from seq_next. */
	if (!follows && ra->window > 0 && off < ra->seq_next &&
	    end <= ra->seq_next && ra->ahead_lo > 0 &&
	    off / bs >= ra->ahead_lo - 1) {
		ra->stats.rereads++;
		return 0;
	}
	if (!follows) {
		ra->stats.random_reads++;
		if (ra->window > 0)
			stop_run(ra, adv, RA_CANCEL_PATTERN);
		else
			/* Random reads with no run decay the memory of the
			 * last run: the next one starts small again. */
			ra->window_restart = COIL_MAX(ra->cfg.window_min_blobs,
						      ra->window_restart / 2);
		ra->seq_count = 0;
		ra->seq_next = end;
		return 0;
	}

	ra->stats.sequential_reads++;
	ra->seq_next = end;
	if (ra->seq_count < UINT32_MAX)
		ra->seq_count++;
	if (ra->seq_count < ra->cfg.seq_trigger)
		return 0;

	/* The blob holding byte `end` is the one the reader is inside (its
	 * demand read fetched it whole) unless end is on a boundary; either
	 * way the first blob wholly ahead is ceil(end / bs). */
	uint64_t next = blob_ceil(end, bs);
	uint64_t size_blobs = blob_ceil(obj_size, bs);
	bool first = ra->window == 0;

	if (first) {
		ra->window = ra->window_restart;
		ra->ahead_hi = ra->ahead_want = next;
	}
	if (ra->ahead_hi < next)
		ra->ahead_hi = next;     /* the reader overtook readahead */
	if (ra->ahead_want < ra->ahead_hi)
		ra->ahead_want = ra->ahead_hi;
	ra->ahead_lo = next;

	uint64_t left = ra->ahead_hi - next;
	/* Top up once half the window was consumed by default (fewer,
	 * larger admissions), or once refill_blobs were: a small refill
	 * keeps a reader as fast as the pipeline from draining it. */
	uint64_t keep = ra->cfg.refill_blobs == 0 ? ra->window / 2 :
			ra->window - COIL_MIN(ra->cfg.refill_blobs, ra->window);

	if (left > keep)
		return 0;
	/* Grow only when the last advice was admitted in full: a window
	 * that could not be filled (capacity) must not grow. */
	if (!first && ra->ahead_hi >= ra->ahead_want &&
	    ra->window < ra->cfg.window_max_blobs) {
		ra->window = COIL_MIN(ra->window * 2, ra->cfg.window_max_blobs);
		ra->stats.windows_grown++;
	}
	if (next >= size_blobs)
		return 0;

	uint64_t target = next + COIL_MIN((uint64_t)ra->window,
					  size_blobs - next);

	if (target <= ra->ahead_hi)
		return 0;
	adv->kind = RA_READAHEAD;
	adv->first_blob = ra->ahead_hi;
	adv->nblobs = (uint32_t)(target - ra->ahead_hi);
	ra->ahead_want = target;
	ra->stats.blobs_advised += adv->nblobs;
	return 0;
}

int ra_on_hint(struct ra_state *ra, uint64_t off, uint64_t len,
	       uint64_t obj_size, struct ra_advice *adv)
{
	uint64_t end;

	if (!ra || !adv || ra->cfg.blob_bytes == 0 ||
	    __builtin_add_overflow(off, len, &end))
		return -EINVAL;
	advice_none(adv);
	ra->stats.hints++;
	end = COIL_MIN(end, obj_size);
	if (len == 0 || off >= end)
		return 0;

	const uint64_t bs = ra->cfg.blob_bytes;
	uint64_t first = off / bs;
	uint64_t n = blob_ceil(end, bs) - first;

	/* A hint is bounded like a window: a caller hinting a whole file
	 * gets its head admitted now and hints again as it goes. */
	n = COIL_MIN(n, (uint64_t)ra->cfg.window_max_blobs);
	adv->kind = RA_HINT;
	adv->first_blob = first;
	adv->nblobs = (uint32_t)n;
	ra->stats.blobs_advised += n;
	return 0;
}

int ra_on_write(struct ra_state *ra, uint64_t off, uint64_t len,
		struct ra_advice *adv)
{
	uint64_t end;

	if (!ra || !adv || ra->cfg.blob_bytes == 0 ||
	    __builtin_add_overflow(off, len, &end))
		return -EINVAL;
	advice_none(adv);

	const uint64_t bs = ra->cfg.blob_bytes;

	if (len == 0 || ra->ahead_hi <= ra->ahead_lo)
		return 0;
	if (off / bs >= ra->ahead_hi || blob_ceil(end, bs) <= ra->ahead_lo)
		return 0;
	/* Prefetched bytes of the old version are now stale.  The pattern
	 * itself did not change: keep the window, re-admit from the reader's
	 * position at its next read. */
	adv->cancel = RA_CANCEL_OVERWRITE;
	ra->stats.cancels[RA_CANCEL_OVERWRITE]++;
	/* ahead_want keeps the old target, so the refill does not count as
	 * the reader consuming a window and does not grow it. */
	ra->ahead_hi = ra->ahead_lo;
	return 0;
}

int ra_on_truncate(struct ra_state *ra, uint64_t size, struct ra_advice *adv)
{
	if (!ra || !adv || ra->cfg.blob_bytes == 0)
		return -EINVAL;
	advice_none(adv);

	/* Blob size / bs loses its tail (or all of it): any admitted blob
	 * from there on may hold bytes that no longer exist. */
	uint64_t cut = size / ra->cfg.blob_bytes;

	if (ra->ahead_hi <= ra->ahead_lo || ra->ahead_hi <= cut)
		return 0;
	adv->cancel = RA_CANCEL_TRUNCATE;
	ra->stats.cancels[RA_CANCEL_TRUNCATE]++;
	ra->ahead_hi = ra->ahead_lo; /* as for an overwrite: no growth */
	return 0;
}

int ra_on_close(struct ra_state *ra, struct ra_advice *adv)
{
	if (!ra || !adv)
		return -EINVAL;
	advice_none(adv);
	/* Always: hinted work is not tracked here, and a generation bump
	 * costs nothing.  The caller still drains in-flight work
	 * (pf_is_idle) and calls pf_finish_cancellation. */
	adv->cancel = RA_CANCEL_CLOSE;
	ra->stats.cancels[RA_CANCEL_CLOSE]++;
	ra_reset(ra);
	return 0;
}

void ra_commit(struct ra_state *ra, const struct ra_advice *adv, uint32_t done)
{
	if (!ra || !adv || adv->kind != RA_READAHEAD)
		return;
	/* Only advice for the current edge counts; anything older was
	 * overtaken by a cancel or a newer read. */
	if (adv->first_blob != ra->ahead_hi || ra->window == 0)
		return;
	ra->ahead_hi += COIL_MIN(done, adv->nblobs);
}

void ra_decline(struct ra_state *ra, struct ra_advice *adv)
{
	if (!ra || !adv || adv->kind != RA_READAHEAD)
		return;
	ra->stats.blobs_advised -= adv->nblobs;
	if (ra->ahead_want == adv->first_blob + adv->nblobs)
		ra->ahead_want = adv->first_blob;
	adv->kind = RA_NONE;
	adv->first_blob = 0;
	adv->nblobs = 0;
}

/* A caller's clock that stepped back must not wrap into ~584 years. */
static uint64_t elapsed(const struct ra_state *ra, uint64_t now_ns)
{
	return now_ns >= ra->bp_since_ns ? now_ns - ra->bp_since_ns : 0;
}

int pf_apply(struct pf_machine *m, struct ra_state *ra, uint64_t obj_id,
	     const struct ra_advice *adv, pf_resident_fn resident, void *arg,
	     uint64_t now_ns)
{
	if (!m || !adv)
		return -EINVAL;
	if (adv->cancel != RA_CANCEL_NONE) {
		int rc = pf_cancel_all(m);

		if (rc < 0)
			return rc;
		/* The queue is empty now: whatever waited for room has it. */
		if (ra && ra->bp_active) {
			pf_finish_backpressure(m, elapsed(ra, now_ns));
			ra->bp_active = false;
		}
	}
	if (adv->kind == RA_NONE || adv->nblobs == 0)
		return 0;

	uint32_t i;
	int admitted = 0;

	for (i = 0; i < adv->nblobs; i++) {
		struct pf_unit id = { obj_id, adv->first_blob + i };
		bool res = resident ? resident(arg, id) : false;
		int rc = pf_admit(m, id, res, NULL);

		if (rc < 0)
			return rc;
		if (rc == PF_AT_CAPACITY) {
			if (!ra || !ra->bp_active)
				pf_begin_backpressure(m);
			if (ra && !ra->bp_active) {
				ra->bp_active = true;
				ra->bp_since_ns = now_ns;
			}
			break;
		}
		if (rc == PF_ADMITTED)
			admitted++;
	}
	if (ra && i == adv->nblobs && ra->bp_active) {
		pf_finish_backpressure(m, elapsed(ra, now_ns));
		ra->bp_active = false;
	}
	if (ra)
		ra_commit(ra, adv, i);
	return admitted;
}
