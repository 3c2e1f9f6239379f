/* engine/cleaner.c — space management: the segment cleaner, the
 * free-segment reserve, throttling of foreground writers, turning on TRIM of
 * freed segments (place/segment.c does it), the live-byte recount and the
 * cleaner's stats.  On top of the engine: it calls the write-request steps
 * (io/wreq.c), the journal, the checkpoint and placement; only io/write.c
 * (throttle, kick), store.c and stats.c call it.
 *
 * A pass (on the cleaner's own thread):
 *   1. under mlock: pick victims among the SEALED segments by LFS
 *      cost-benefit, (1 - u) * age / (1 + u), u = live / capacity; hold
 *      their reader counts (so no checkpoint frees one under the pass);
 *   2. under mlock: walk the extent maps once, collect every extent whose
 *      blob lies in a victim (object and blob references taken);
 *   3. per victim: a sequential read of the segment (up to its last live
 *      byte, in CLEAN_READ_PIECE pieces one after another), verify each
 *      live blob, copy its stored bytes VERBATIM into a batch; per object
 *      and batch one relocation through the write path's steps
 *      (wreq_place, allowed into the reserve; wreq_send), its data runs
 *      and one WRITE record with the REMAP flag in the journal;
 *   4. at apply (ticket order, like every write), meta_apply_remap
 *      installs the copy only where the map still maps the same blob
 *      content at the same alignment (compare-and-swap); a copy that lost
 *      the race is never live, i.e. dead space;
 *   5. release the victims and wait for a checkpoint: the emptied victims
 *      were PENDING and become FREE (ckpt_write discards them first,
 *      seg_discard_freed).
 *
 * The optimizer's pass (opt_on) also merges: step 2 plans, per object and
 * aligned window of the blob size, the small blobs to join (members may
 * be in segments that are not victims: they hold a reader count until
 * read); step 3 encodes a window as one blob at its first member in the
 * victims and journals a REWRITE pair per member in the same batch
 * (merge_group).
 *
 * Copies are verbatim, so a relocated blob has the same descriptor as the
 * original except dev_off: the compare-and-swap compares content identity
 * (codec, lengths, checksums) rather than a location, which replay can
 * evaluate from the record alone and reaches the same decision as the live
 * path (it applies the same records in the same order to the same state).
 *
 * The reserve: the last cleaner_reserve_segs() free segments are placed into
 * only by relocations.  Checkpoints live in their own area and never need a
 * data segment, so the reserve is the cleaner's alone.
 *
 * Throttling happens in engine_write before a write takes its ticket: a
 * relocation's record is applied in ticket order, so a writer that waited
 * for space while holding a ticket would wait for itself. */
#include <errno.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cleaner.h"
#include "engine/grow.h"
#include "engine/io/wreq.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/io/recode.h"
#include "engine/place/blob.h"
#include "engine/place/dev.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"

/* Victims per pass at most: bounds the pass's memory; the normal policy
 * takes about CLEAN_PASS_SPAN bytes of segments per pass, so the one
 * checkpoint a pass costs (it writes all metadata) is spread over tens of
 * MiB freed. */
#define CLEAN_VICTIMS_MAX 256u
#define CLEAN_PASS_SPAN (256ull << 20)
/* Relocated bytes per pass at most (keeps a pass bounded). */
#define CLEAN_PASS_BYTES_MAX (64ull << 20)
/* One relocation batch: stored bytes, blobs, extents.  The byte bound and
 * the read piece are small because the device serves requests about in
 * order: a foreground write queued behind a 1 MiB cleaner read or
 * relocation waited for all of it (the space benchmark's p99 and IOPS
 * both moved with these, docs/space.md). */
#define CLEAN_BATCH_BYTES (256u << 10)
#define CLEAN_READ_PIECE (128u << 10)
/* A victim is read where it is live, not whole: dead stretches shorter
 * than CLEAN_READ_GAP are read through (one request instead of two), and
 * up to CLEAN_READ_WAVE reads are in flight at once. */
#define CLEAN_READ_GAP (16u << 10)
#define CLEAN_READ_WAVE 16u
#define CLEAN_BATCH_BLOBS 256u
#define CLEAN_BATCH_EXTS 1024u
/* A segment more than this full (per mille of its capacity) is not worth
 * cleaning: copying 9 bytes to free 1 is a bad trade. */
#define CLEAN_U_MAX_PERMILLE 900u
/* Longest a foreground write is delayed in total, and the longest of the
 * proportional delays while space is low but the write fits. */
#define CLEANER_THROTTLE_MAX_NS (1000ull * 1000 * 1000)
#define CLEANER_DELAY_MAX_NS (1000ull * 1000)
/* The cleaner looks at free space this often even when nobody kicks it. */
#define CLEANER_TICK_NS (100ull * 1000 * 1000)
/* The background optimizer's pass: its level, and the live bytes of
 * segments it takes at most (a pass ends with a checkpoint, so it is
 * not made much smaller). */
#define OPT_BG_LEVEL 19
#define OPT_BG_BUDGET (16ull << 20)
/* While the foreground reads or writes, the optimizer reads at most this
 * many bytes a second (what it reads it also writes, smaller, and
 * encodes): its device I/O and its CPU (at idle priority, but on two
 * vCPUs that still cost the foreground) scale with its pace, and so
 * does what it costs the foreground.  With no foreground I/O it goes at
 * the speed of its encoder.  Under fio's 4 KiB random mix at QD 32
 * (docs/benchmarks.md): unpaced it read 17 MB/s, IOPS 0.85-0.89x of a
 * run without it; at 8 MiB/s 0.81-0.86x; at 2 MiB/s 0.91-0.99x. */
#define OPT_FG_RATE (2ull << 20)
#define OPT_PACE_NAP_NS (20ull * 1000 * 1000)
/* The optimizer's merges: extents of one object that each map a blob of
 * less than half the store's blob size, within one window of that size
 * aligned in the object, become one blob; at most this many extents a
 * merged blob (a merge's record carries two descriptors per member: 64
 * compressed members are about 8 KiB of it, raw ones never merge). */
#define MERGE_MEMBERS_MAX 64u
#define CGRP_NONE UINT32_MAX

struct citem {
	struct object *o;
	struct blobd *b;
	uint64_t off;
	uint32_t len, skip;
	uint32_t seg;
	uint32_t k;             /* blob index in the batch */
	uint32_t nskip;         /* skip into the relocated blob */
	uint32_t grp;           /* the merge it belongs to, or CGRP_NONE */
	bool rw;                /* the copy is the optimizer's re-encoding:
				 * a REWRITE pair, not a REMAP */
};

/* A merge's member: an extent of a small blob (place/blob.h), held
 * (object and blob references) from the pick until the pass ends. */
struct cmember {
	struct object *o;
	struct blobd *b;
	uint64_t off;
	uint32_t len, skip;
	uint32_t seg;            /* where its blob is */
	size_t item;             /* its index in cl->items while collecting
				  * (SIZE_MAX: its blob is in no victim) */
	uint32_t nskip;          /* where its bytes are in the merged blob */
};

/* A window's members [m0, m1) of cl->mems, in offset order.  Until it is
 * tried, each member holds a reader count on its blob's segment, so the
 * bytes stay there to be read whatever the victims' order. */
enum { CGRP_PENDING, CGRP_MERGED, CGRP_DECLINED };
struct cgroup {
	size_t m0, m1;
	uint8_t state;
};

/* The batch being filled: runs from r0, nb blobs in slot bytes, rec
 * bytes of record, next extents. */
struct cbatch {
	size_t r0, slot;
	uint32_t nb, rec, next;
};

/* A run: items [i0, i1) whose bytes one relocated blob carries: a whole
 * compressed blob, or the live sectors [lo, hi) of a raw one (a raw blob
 * half overwritten keeps only what is still referenced, so relocation
 * never copies dead sectors twice). */
struct crun {
	size_t i0, i1;
	uint32_t lo, hi;
};

/* Bytes [off, end) of a victim (from its segment's base) to read. */
struct crange {
	uint32_t off, end;
};

/* One wave of the victim's reads. */
struct cwave {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned left;
	int res;
	struct uring_io io[CLEAN_READ_WAVE];
};

struct cleaner {
	struct coil_store *s;
	pthread_t th;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;       /* wakes the cleaner */
	pthread_cond_t space_cv; /* wakes throttled writers (every pass) */
	pthread_cond_t reloc_cv; /* a relocation completed */
	bool stop, want, running;
	uint64_t force_victims;  /* cleaner_run_now: 0 = normal policy */
	uint64_t rounds_done;    /* rounds finished (under mu) */
	bool stuck;              /* last pass: nothing to clean or free */
	bool reloc_fin;
	int reloc_res;

	/* thresholds (free segments, reserve included) */
	_Atomic uint32_t reserve; /* the marks change when the store grows */
	_Atomic uint32_t clean_lo;      /* start cleaning below */
	_Atomic uint32_t clean_hi;      /* stop cleaning at */
	_Atomic uint32_t throttle;      /* delay writers below */
	uint32_t need_free;      /* free segments a waiting writer needs
				  * (under mu; 0 = none): a round cleans
				  * until there are this many, even above
				  * the high mark */
	_Atomic uint32_t victims_max;   /* per pass (normal policy) */

	/* per segment, for age: the gen last seen and when */
	uint32_t *gen_seen;
	uint64_t *born_ns;
	uint8_t *victim;

	/* pass state (cleaner thread only) */
	struct citem *items;
	size_t nitems, cap_items;
	struct crun *runs;
	size_t cap_runs;
	struct crange *ranges;   /* cap_runs of them */
	struct cwave wave;
	uint32_t *vlist;
	uint8_t *seg_buf;        /* one segment */
	uint8_t *scratch;        /* blob decode (verification) */
	/* the optimizer's merges (pass state): windows and their members,
	 * the batch's merged extents (appended to its items when it is
	 * sent, in bitems), a member read from outside the victim at hand
	 * and the window's bytes */
	struct cmember *mems;
	size_t nmems, cap_mems;
	struct cgroup *grps;
	size_t ngrps, cap_grps;
	struct citem *xitems, *bitems;
	size_t nx, cap_x, cap_b;
	uint8_t *mread;
	uint8_t *mlog;
	ZSTD_DCtx *dctx;
	struct fmt_blob rb;      /* the run's blob as read */
	struct fmt_blob nfb;     /* its re-encoding (optimizer) */
	struct wreq w;           /* the relocation context */
	struct fmt_extent fe;
	uint32_t rec_max;

	/* stats */
	_Atomic uint64_t passes, segs_cleaned, segs_freed, bytes_read;
	_Atomic uint64_t bytes_relocated, logical_relocated, blobs_relocated;
	_Atomic uint64_t cas_installed, cas_dropped, verify_failures;
	_Atomic uint64_t reloc_failures;
	_Atomic uint64_t throttled, throttle_ns;
	_Atomic uint64_t throttle_ns_max, enospc_hints;
	_Atomic uint64_t pick_lock_ns_last, pick_lock_ns_max; /* mlock held */
	_Atomic bool stopping;   /* close: finish the batch in flight only */

	/* the optimizer (optimize.h): a pass with opt_on set re-encodes */
	struct optimizer opt;
	bool opt_on;             /* this pass optimizes (cleaner thread) */
	bool compact_on;         /* this pass moves data toward the front */
	bool compact_req;        /* compaction requested (under mu) */
	int opt_req;             /* a level requested (under mu; 0: none) */
	bool opt_busy;           /* a caller is in cleaner_optimize (mu) */
	uint64_t opt_budget;     /* bytes of victims per request */
	int opt_res;             /* the request's result: 1 more, 0 done */
	uint64_t opt_taken;      /* the request's victims' live bytes */
	uint64_t opt_done;       /* requests finished (under mu) */
	/* the background optimizer (s->opt_idle_ns): the write count last
	 * seen and since when it has not moved; the count at which a pass
	 * last found nothing to do (no retry until it moves) */
	bool opt_bg;             /* this pass is the background one */
	bool bg_due;
	uint64_t bg_writes, bg_quiet_ns, bg_nothing_at;
	void (*opt_hook)(void *); /* tests: called with each optimizer batch
				   * encoded, before it is placed */
	void *opt_hook_arg;
};

static int grow_policy(struct coil_store *s, uint64_t need, bool force);

/* ---- thresholds, capacity ----------------------------------------------- */

uint32_t cleaner_reserve_segs(const struct coil_store *s)
{
	return s->cl ? s->cl->reserve : 0;
}

/* Bytes a free segment can surely take (as the allocator counts). */
static uint64_t per_seg(const struct coil_store *s)
{
	return seg_bytes_per_free(s);
}

uint64_t cleaner_write_keep(const struct coil_store *s, const struct wreq *w)
{
	if (w->use_reserve || !s->cl)
		return 0;
	return (uint64_t)s->cl->reserve * per_seg(s);
}

/* Foreground capacity: what a write may take now.  mlock held. */
static uint64_t fg_cap_locked(const struct coil_store *s)
{
	uint64_t cap = 0;
	uint32_t r = cleaner_reserve_segs(s);

	if (s->free_segs > r)
		cap = (uint64_t)(s->free_segs - r) * per_seg(s);
	if (s->active != UINT32_MAX &&
	    s->active_head + s->max_blob + FMT_BLOCK < s->sb.segment_size)
		cap += s->sb.segment_size - s->active_head - s->max_blob -
		       FMT_BLOCK;
	return cap;
}

static void thresholds(struct cleaner *cl, uint32_t nseg, uint64_t seg_size,
		       bool grows)
{
	/* Two segments (up to 16 in a large store) for the cleaner to
	 * relocate into; in the smallest stores one, so that half of the
	 * segments stay for data (a 6 MiB store has two). */
	uint32_t r = COIL_MIN(COIL_MAX(2u, COIL_MIN(16u, nseg / 64)),
			      COIL_MAX(1u, nseg / 2));
	uint32_t band = grows ? COIL_MAX(1u, nseg / 128) : COIL_MAX(2u, nseg / 32);

	/* Clean late: the less free space is kept, the more dead bytes the
	 * sealed segments hold and the emptier the victims (cheaper to read
	 * and to relocate).  A sixteenth of the store plus a band: on the
	 * space benchmark (3 GiB store, 1 GiB live) victims went from about
	 * a fifth live to less, WA 1.50 -> 1.32, no writer throttled.  With
	 * whole-segment victim reads the cleaner could not keep up this late
	 * (writers were throttled); reading the live ranges it can. */
	cl->reserve = r;
	/* A growing store below its maximum keeps less free: what it keeps
	 * is disk it holds beyond its data, and it grows (grow.c) before it
	 * cleans while its segments are mostly live.  At its maximum it is
	 * a fixed store. */
	cl->clean_lo = r + (grows ? COIL_MAX(nseg / 128, 1u) :
				    COIL_MAX(nseg / 16, 2u)) + band;
	cl->clean_hi = cl->clean_lo + band;
	cl->throttle = r + COIL_MAX(2u, (cl->clean_lo - r) / 3);
	/* a pass holds its victims' space until its checkpoint: in a small
	 * store, a few at a time */
	cl->victims_max = (uint32_t)COIL_MIN((uint64_t)CLEAN_VICTIMS_MAX,
					     CLEAN_PASS_SPAN / seg_size);
	cl->victims_max = COIL_MAX(2u, COIL_MIN(cl->victims_max, nseg / 8));
	if (cl->clean_lo >= nseg) {
		/* tiny stores: clean whenever anything is reclaimable */
		cl->clean_lo = nseg;
		cl->clean_hi = nseg;
	}
}

/* ---- time ---------------------------------------------------------------- */

static void abstime_in(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ns / 1000000000ull);
	ts->tv_nsec += (long)(ns % 1000000000ull);
	if (ts->tv_nsec >= 1000000000l) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000l;
	}
}

static void kick_locked(struct cleaner *cl)
{
	cl->want = true;
	pthread_cond_signal(&cl->cv);
}

void cleaner_kick(struct coil_store *s)
{
	struct cleaner *cl = s->cl;

	uint32_t free_segs;

	if (!cl)
		return;
	pthread_mutex_lock(&s->mlock);
	free_segs = s->free_segs;
	pthread_mutex_unlock(&s->mlock);
	if (free_segs >= cl->clean_lo)
		return;
	pthread_mutex_lock(&cl->mu);
	if (!cl->running)
		kick_locked(cl);
	pthread_mutex_unlock(&cl->mu);
}

/* ---- the compare-and-swap install ---------------------------------------- */

/* ---- live-byte recount --------------------------------------------------- */

/* The running extent totals coil_stats_json prints against a walk of the
 * maps.  mlock held. */
static int check_map_totals(struct coil_store *s)
{
	uint64_t n = 0, bytes = 0, stored = 0;

	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o; o = o->id_next) {
			struct extmap_iter it;
			const struct ext *e;

			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it))) {
				n++;
				bytes += e->len;
				stored += ext_stored(e);
			}
		}
	}
	if (n == s->ext_acct.n && bytes == s->ext_acct.bytes &&
	    stored == s->ext_acct.stored)
		return 0;
	fprintf(stderr, "coil: extents %" PRIu64 "/%" PRIu64 ", bytes %" PRIu64
		"/%" PRIu64 ", stored %" PRIu64 "/%" PRIu64
		" (walked/kept)\n", n, s->ext_acct.n, bytes, s->ext_acct.bytes,
		stored, s->ext_acct.stored);
	return -EUCLEAN;
}

int cleaner_check_live(struct coil_store *s)
{
	uint64_t *live = calloc(s->seg_cap, sizeof(*live));
	uint64_t *unopt = calloc(s->seg_cap, sizeof(*unopt));
	uint32_t nfree = 0;
	int rc = 0;

	if (!live || !unopt) {
		free(live);
		free(unopt);
		return -ENOMEM;
	}
	pthread_mutex_lock(&s->mlock);
	(void)seg_recount_live(s, live); /* sizes are seg_verify_accounting's */
	optimize_seg_bytes(s, unopt);
	for (uint32_t i = 0; i < s->nseg && rc == 0; i++) {
		const struct seg *g = &s->segs[i];

		if (g->state == SEG_FREE)
			nfree++;
		if (g->unopt != unopt[i]) {
			fprintf(stderr, "coil: segment %u: %" PRIu64
				" bytes not optimized counted, %" PRIu64
				" recounted\n", i, g->unopt, unopt[i]);
			rc = -EUCLEAN;
		}
		if (g->live != live[i] ||
		    ((g->state == SEG_FREE || g->state == SEG_PENDING) &&
		     live[i] != 0)) {
			fprintf(stderr, "coil: segment %u: live %" PRIu64
				" counted, %" PRIu64 " recounted, state %u\n",
				i, g->live, live[i], g->state);
			rc = -EUCLEAN;
		}
	}
	if (rc == 0 && nfree != s->free_segs) {
		fprintf(stderr, "coil: free_segs %u, %u segments FREE\n",
			s->free_segs, nfree);
		rc = -EUCLEAN;
	}
	if (rc == 0)
		rc = check_map_totals(s);
	pthread_mutex_unlock(&s->mlock);
	free(live);
	free(unopt);
	return rc;
}

/* An optimizer pair applied: @saved stored bytes fewer (modulo 2^64: a
 * merge's pair may add some), @got logical bytes installed, @lost not
 * (newer data there: the compare-and-swap). */
static void opt_installed(struct cleaner *cl, uint64_t saved, uint64_t got,
			  uint64_t lost)
{
	stat_add(&cl->opt.saved_bytes, saved);
	stat_add(&cl->opt.installed_bytes, got);
	if (lost) {
		stat_add(&cl->opt.stale_skips, 1);
		stat_add(&cl->opt.stale_bytes, lost);
	}
}

static void reloc_apply(struct coil_store *s, struct jent *e)
{
	struct wreq *w = (struct wreq *)e;
	struct cleaner *cl = s->cl;
	struct citem *it = (struct citem *)w->src;
	uint32_t n = (uint32_t)w->len;

	/* w->src/w->len carry the batch's items (see reloc_submit). */
	if (e->status == 0) {
		for (uint32_t i = 0; i < n; i++) {
			struct object *o = it[i].o;
			struct ext ex;
			int64_t got;

			if (it[i].k == UINT32_MAX || o->removed)
				continue;
			ex = (struct ext){ .off = it[i].off, .len = it[i].len,
					   .skip = it[i].nskip,
					   .b = w->bd[it[i].k] };
			if (it[i].rw) {
				struct ext want = { .off = it[i].off,
						    .len = it[i].len,
						    .skip = it[i].skip,
						    .b = it[i].b };
				uint64_t st0 = s->ext_acct.stored;

				/* A merge's pair may raise stored: a member
				 * that compressed better alone takes its
				 * pro-rata share of the merged blob.  The
				 * counter wraps, so it sums to the drop. */
				got = meta_apply_rewrite(s, o, &want, &ex);
				if (got >= 0)
					opt_installed(cl, st0 - s->ext_acct.stored,
						      (uint64_t)got,
						      it[i].len - (uint64_t)got);
			} else {
				got = meta_apply_remap(s, o, &ex);
			}

			if (got < 0) {
				store_break(s, (int)got);
				e->status = (int)got;
				break;
			}
			stat_add(&cl->cas_installed, (uint64_t)got);
			stat_add(&cl->cas_dropped, it[i].len - (uint64_t)got);
		}
	}
	wreq_drop_blobs(w, 0);
	seg_inflight_done(s, w);
	w->nruns = 0;
}

static void reloc_done(struct coil_store *s, struct jent *e, int res)
{
	struct cleaner *cl = s->cl;

	(void)e;
	COIL_ASSERT(res <= 0);
	journal_release_meta(s);
	pthread_mutex_lock(&cl->mu);
	cl->reloc_fin = true;
	cl->reloc_res = res;
	pthread_cond_broadcast(&cl->reloc_cv);
	pthread_mutex_unlock(&cl->mu);
}

static int cmp_item_obj(const void *pa, const void *pb)
{
	const struct citem *a = *(const struct citem *const *)pa;
	const struct citem *b = *(const struct citem *const *)pb;

	if (a->o->id != b->o->id)
		return a->o->id < b->o->id ? -1 : 1;
	return a->off < b->off ? -1 : (a->off > b->off);
}

/* The batch's records: one REMAP WRITE per object among @n items, each
 * with the extents of that object's items.  @return records, or -errno. */
static int reloc_records(struct cleaner *cl, struct citem *items, uint32_t n,
			 struct fmt_cursor *c)
{
	struct wreq *w = &cl->w;
	struct citem **ord;
	int nrec = 0, rc = 0;

	ord = malloc((n ? n : 1) * sizeof(*ord));
	if (!ord)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		ord[i] = &items[i];
	qsort(ord, n, sizeof(*ord), cmp_item_obj);
	for (uint32_t i = 0, j; rc == 0 && i < n; i = j) {
		struct object *o = ord[i]->o;

		for (j = i; j < n && ord[j]->o == o; j++)
			;
		/* verbatim copies, then the optimizer's re-encodings */
		for (int rw = 0; rc == 0 && rw < 2; rw++) {
			uint64_t lo = UINT64_MAX, hi = 0;
			uint32_t next = 0;
			size_t mark;

			for (uint32_t k = i; k < j; k++) {
				if (ord[k]->k == UINT32_MAX ||
				    ord[k]->rw != rw)
					continue;
				lo = COIL_MIN(lo, ord[k]->off);
				hi = COIL_MAX(hi, ord[k]->off + ord[k]->len);
				next++;
			}
			if (!next)
				continue;
			rc = fmt_jrec_write_begin(c, &mark, rw ?
						  FMT_JREC_REWRITE :
						  FMT_JREC_REMAP,
						  o->id, lo, hi - lo);
			for (uint32_t k = i; rc == 0 && k < j; k++) {
				const struct citem *it = ord[k];
				struct fmt_blob old;

				if (it->k == UINT32_MAX || it->rw != rw)
					continue;
				if (rw) {
					/* what was read: the pair's first */
					blobd_to_fmt(it->b, &old);
					rc = wreq_put_extent(c, &cl->fe,
							     it->off, it->len,
							     it->skip, &old,
							     NULL);
					if (rc < 0)
						break;
				}
				rc = wreq_put_extent(c, &cl->fe, it->off,
						     it->len, it->nskip,
						     &w->fb[it->k], NULL);
			}
			if (rc == 0)
				rc = fmt_jrec_write_end(c, mark,
							rw ? 2 * next : next);
			nrec++;
		}
	}
	free(ord);
	return rc < 0 ? rc : nrec;
}

/* Relocate the batch in cl->w (blobs copied into w->batch at w->slot[k],
 * descriptors in w->fb[k]) for @n items, of one object or of several that
 * share its blobs; wait for it.  @return 0 or -errno. */
static int reloc_submit(struct cleaner *cl, struct citem *items, uint32_t n)
{
	struct coil_store *s = cl->s;
	struct wreq *w = &cl->w;
	uint64_t stored = 0;
	struct fmt_cursor c;
	unsigned rep = 0;
	int rc, nrec = 0;

	w->je = (struct jent){ .apply = reloc_apply, .done = reloc_done };
	w->s = s;
	w->h = NULL;
	w->obj = NULL;
	w->src = (const uint8_t *)items;
	w->len = n;
	w->use_reserve = true;
	/* The reserve is the cleaner's: keep nothing back.  A segment opened
	 * here kicks no one (the cleaner is running). */
	rc = wreq_place(s, w, 0, &rep);
	if (rc < 0)
		return rc;
	for (uint32_t k = 0; k < w->nblobs; k++) {
		w->bd[k] = blobd_new(&w->fb[k]);
		if (!w->bd[k])
			rc = -ENOMEM;
		stored += w->fb[k].stored_len;
	}
	fmt_cursor_init(&c, w->recbuf, w->rec_cap);
	if (rc == 0) {
		nrec = reloc_records(cl, items, n, &c);
		rc = nrec < 0 ? nrec : 0;
	}
	if (rc < 0) {
		/* Nothing was submitted: give the placed space back as dead
		 * (the segments' in-flight counts drop, nothing is live). */
		pthread_mutex_lock(&s->mlock);
		wreq_drop_blobs(w, 0);
		seg_inflight_done(s, w);
		w->nruns = 0;
		pthread_mutex_unlock(&s->mlock);
		return rc;
	}
	w->je.nrec = (uint32_t)nrec;
	rc = journal_reserve_meta(s, true);
	if (rc < 0)
		return rc; /* cannot happen when waiting */
	w->je.rec = w->recbuf;
	w->je.rec_len = (uint32_t)c.pos;
	pthread_mutex_lock(&cl->mu);
	cl->reloc_fin = false;
	pthread_mutex_unlock(&cl->mu);
	w->je.ticket = journal_ticket(s);
	wreq_send(s, w);
	pthread_mutex_lock(&cl->mu);
	while (!cl->reloc_fin)
		pthread_cond_wait(&cl->reloc_cv, &cl->mu);
	rc = cl->reloc_res;
	pthread_mutex_unlock(&cl->mu);
	if (rc == 0) {
		stat_add(&cl->bytes_relocated, stored);
		stat_add(&cl->blobs_relocated, w->nblobs);
	}
	return rc < 0 ? rc : 0;
}

/* ---- a pass ---------------------------------------------------------------- */

static uint32_t free_now(struct coil_store *s);

static int cmp_item(const void *pa, const void *pb)
{
	const struct citem *a = pa, *b = pb;

	if (a->seg != b->seg)
		return a->seg < b->seg ? -1 : 1;
	if (a->b->dev_off != b->b->dev_off)
		return a->b->dev_off < b->b->dev_off ? -1 : 1;
	if (a->o->id != b->o->id)
		return a->o->id < b->o->id ? -1 : 1;
	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	return 0;
}

struct cand {
	double score;
	uint32_t seg;
};

static int cmp_cand(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	return a->seg < b->seg ? -1 : (a->seg > b->seg);
}

/* Pick victims (mlock held).  @return how many, in cl->vlist. */
static uint32_t pick_victims(struct cleaner *cl, uint32_t max_v,
			     struct cand *cand)
{
	struct coil_store *s = cl->s;
	uint64_t cap = s->sb.segment_size - FMT_BLOCK, now = coil_now_ns();
	uint64_t budget, taken = 0;
	uint32_t nc = 0, nv = 0;

	/* Relocations must fit the free space, reserve included, with one
	 * segment to spare for the blob that does not fit a segment's end. */
	budget = s->free_segs > 1 ? (uint64_t)(s->free_segs - 1) * per_seg(s) :
				    0;
	budget = COIL_MIN(budget, CLEAN_PASS_BYTES_MAX);
	for (uint32_t i = 0; i < s->nseg; i++) {
		struct seg *g = &s->segs[i];
		double u, age;

		if (g->gen != cl->gen_seen[i]) {
			cl->gen_seen[i] = g->gen;
			cl->born_ns[i] = now;
		}
		if (g->state != SEG_SEALED || g->inflight || g->live == 0 ||
		    g->live * 1000 > cap * CLEAN_U_MAX_PERMILLE)
			continue;
		u = (double)g->live / (double)cap;
		age = (double)(now - cl->born_ns[i]) / 1e9 + 1.0;
		cand[nc].score = (1.0 - u) * age / (1.0 + u);
		cand[nc].seg = i;
		nc++;
	}
	if (nc > 1)
		qsort(cand, nc, sizeof(*cand), cmp_cand);
	for (uint32_t j = 0; j < nc && nv < max_v; j++) {
		struct seg *g = &s->segs[cand[j].seg];

		/* live is logical; stored can only be smaller or equal up to
		 * raw padding: count whole blocks to stay on the safe side. */
		uint64_t need = COIL_MIN(g->live + g->live / 8, cap);
		if (taken + need > budget)
			continue;
		taken += need;
		cl->vlist[nv++] = cand[j].seg;
		cl->victim[cand[j].seg] = 1;
		atomic_fetch_add(&g->readers, 1);
	}
	COIL_ASSERT(nv <= max_v);
	COIL_ASSERT(taken <= budget);
	return nv;
}

/* The optimizer's victims (mlock held): sealed segments holding bytes it
 * has not been over, those with the most first, as many as the relocation
 * room and @budget bytes of live data allow.  *@left: candidates left
 * for a later pass. */
static uint32_t pick_opt_victims(struct cleaner *cl, uint32_t max_v,
				 struct cand *cand, uint64_t budget,
				 uint32_t *left)
{
	struct coil_store *s = cl->s;
	uint64_t cap = s->sb.segment_size - FMT_BLOCK, taken = 0, room;
	uint64_t now = coil_now_ns();
	uint32_t nc = 0, nv = 0, spare = cl->reserve + 1;

	/* Room above the reserve only: the reserve is for cleaning, which
	 * must stay possible whatever the optimizer has in flight. */
	room = s->free_segs > spare ?
		       (uint64_t)(s->free_segs - spare) * per_seg(s) : 0;
	budget = COIL_MIN(COIL_MIN(budget, room), CLEAN_PASS_BYTES_MAX);
	/* Every sealed segment that has taken no new data for a while
	 * (optimize_cold: what is still being rewritten is not worth
	 * encoding again; it is not counted as left either, so a caller
	 * looping until nothing is left does not spin on it).  The segment
	 * being filled is never taken. */
	for (uint32_t i = 0; i < s->nseg; i++) {
		struct seg *g = &s->segs[i];

		if (g->state != SEG_SEALED || g->inflight || g->unopt == 0 ||
		    !seg_cold(s, i, now))
			continue;
		cand[nc].score = (double)g->unopt;
		cand[nc].seg = i;
		nc++;
	}
	if (nc > 1)
		qsort(cand, nc, sizeof(*cand), cmp_cand);
	for (uint32_t j = 0; j < nc; j++) {
		struct seg *g = &s->segs[cand[j].seg];
		uint64_t need = COIL_MIN(g->live + g->live / 8, cap);

		/* the first victim even past the budget: a pass always
		 * makes progress when there is room for it */
		if (nv == max_v || (nv && taken + need > budget) ||
		    need > room) {
			(*left)++;
			continue;
		}
		taken += need;
		cl->vlist[nv++] = cand[j].seg;
		cl->victim[cand[j].seg] = 1;
		atomic_fetch_add(&g->readers, 1);
	}
	cl->opt_taken = taken;
	return nv;
}

/* Compaction's victims (mlock held): the sealed segments holding data at
 * the highest indexes, one for each free segment below it, so that moved
 * down (placement opens the lowest free segment: the caller set the
 * cursor to 0) they leave the end of the store free for the cut.
 * *@left: such segments a later pass may still move. */
static uint32_t pick_compact_victims(struct cleaner *cl, uint32_t max_v,
				     uint32_t *left)
{
	struct coil_store *s = cl->s;
	uint64_t room, taken = 0, cap = s->sb.segment_size - FMT_BLOCK;
	uint32_t lo = 0, hi = s->nseg, nv = 0;

	room = s->free_segs > 1 ? (uint64_t)(s->free_segs - 1) * per_seg(s) : 0;
	room = COIL_MIN(room, CLEAN_PASS_BYTES_MAX);
	while (lo < hi) {
		struct seg *g;
		uint64_t need;

		if (s->segs[lo].state != SEG_FREE) {
			lo++;
			continue;
		}
		g = &s->segs[hi - 1];
		if (g->state != SEG_SEALED || g->live == 0 || g->inflight) {
			hi--;
			continue;
		}
		need = COIL_MIN(g->live + g->live / 8, cap);
		if (nv == max_v || taken + need > room) {
			(*left)++;
			break;
		}
		taken += need;
		cl->vlist[nv++] = hi - 1;
		cl->victim[hi - 1] = 1;
		atomic_fetch_add(&g->readers, 1);
		lo++;
		hi--;
	}
	return nv;
}

static int items_push(struct cleaner *cl, const struct citem *it)
{
	if (coil_grow((void **)&cl->items, &cl->cap_items, cl->nitems + 1,
		      sizeof(*cl->items)))
		return -ENOMEM;
	cl->items[cl->nitems++] = *it;
	return 0;
}

/* Can extent @e be a merge member?  Its blob is on the device,
 * compressed (a raw one gains nothing and its checksums are per sector),
 * not yet optimized, small, and mapped by @e alone: one reference, so no
 * other extent, clone, reader or checkpoint holds it (the merge's pairs
 * then leave it wholly unreferenced).  @e lies within one window. */
static bool merge_member(const struct cleaner *cl, const struct ext *e,
			 uint64_t now)
{
	const struct blobd *b = e->b;
	uint64_t win = cl->s->max_blob;

	return !blobd_is_mem(b) && b->codec != FMT_CODEC_RAW &&
	       seg_cold(cl->s, seg_of(cl->s, b->dev_off), now) &&
	       !(b->flags & FMT_BLOB_OPTIMIZED) &&
	       b->logical_len < cl->s->max_blob / 2 &&
	       atomic_load(&b->refs) == 1 && e->len > 0 &&
	       e->off / win == (e->off + e->len - 1) / win;
}

/* The window's members [m0, cl->nmems): a merge when there are two or
 * more and one of them is in a victim (the merge rides on that victim's
 * relocation); its members take their references and reader counts, and
 * their items point at it.  Else they are forgotten.  mlock held. */
static int group_close(struct cleaner *cl, size_t m0, bool in_victim)
{
	struct coil_store *s = cl->s;
	uint32_t g = (uint32_t)cl->ngrps;
	int rc;

	if (cl->nmems - m0 < 2 || !in_victim) {
		cl->nmems = m0;
		return 0;
	}
	rc = coil_grow((void **)&cl->grps, &cl->cap_grps, cl->ngrps + 1,
		      sizeof(*cl->grps));
	if (rc < 0) {
		cl->nmems = m0;
		return rc;
	}
	cl->grps[cl->ngrps++] = (struct cgroup){ .m0 = m0, .m1 = cl->nmems,
						 .state = CGRP_PENDING };
	for (size_t m = m0; m < cl->nmems; m++) {
		struct cmember *mb = &cl->mems[m];

		blobd_ref(mb->b);
		mb->o->refs++;
		atomic_fetch_add(&s->segs[mb->seg].readers, 1);
		if (mb->item != SIZE_MAX)
			cl->items[mb->item].grp = g;
	}
	return 0;
}

/* A merge's members let their segments go (mlock taken): once read, or
 * when the pass ends without having tried it. */
static void group_unhold(struct cleaner *cl, const struct cgroup *gp)
{
	struct coil_store *s = cl->s;

	pthread_mutex_lock(&s->mlock);
	for (size_t m = gp->m0; m < gp->m1; m++) {
		uint32_t seg = cl->mems[m].seg;

		COUNT_SUB(&s->segs[seg].readers, 1);
		seg_maybe_pending(s, seg);
	}
	pthread_mutex_unlock(&s->mlock);
}

/* The pass is over: every merge's batch has been applied; drop what the
 * members hold (mlock taken). */
static void groups_release(struct cleaner *cl)
{
	struct coil_store *s = cl->s;

	for (size_t g = 0; g < cl->ngrps; g++)
		if (cl->grps[g].state == CGRP_PENDING)
			group_unhold(cl, &cl->grps[g]);
	pthread_mutex_lock(&s->mlock);
	for (size_t g = 0; g < cl->ngrps; g++) {
		for (size_t m = cl->grps[g].m0; m < cl->grps[g].m1; m++) {
			blobd_unref(cl->mems[m].b);
			object_put(s, cl->mems[m].o);
		}
	}
	pthread_mutex_unlock(&s->mlock);
	cl->ngrps = 0;
	cl->nmems = 0;
}

/* Collect the extents that reference the victims (mlock held).  An
 * optimizer pass also plans its merges here, in the same walk: per
 * object, the members of each window in offset order (they need not be
 * adjacent: the merged blob holds their bytes back to back). */
static int collect_items(struct cleaner *cl)
{
	struct coil_store *s = cl->s;
	uint64_t win = s->max_blob, now = coil_now_ns();
	int rc = 0;

	cl->nitems = 0;
	cl->nmems = 0;
	cl->ngrps = 0;
	for (uint32_t b = 0; b < s->tab_cap && rc == 0; b++) {
		for (struct object *o = s->by_id[b]; o && rc == 0;
		     o = o->id_next) {
			bool merge = cl->opt_on &&
				     !dict_name_internal(o->name, o->name_len);
			uint64_t wid = UINT64_MAX;
			size_t m0 = cl->nmems;
			bool wvic = false;
			struct extmap_iter it;
			const struct ext *e;

			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it))) {
				/* before this walk's own reference */
				bool member = merge && merge_member(cl, e, now);
				size_t idx = SIZE_MAX;
				uint32_t i;
				struct citem ci;

				if (blobd_is_mem(e->b))
					continue;
				i = seg_of(s, e->b->dev_off);
				if (cl->victim[i]) {
					ci = (struct citem){ .o = o, .b = e->b,
							     .off = e->off,
							     .len = e->len,
							     .skip = e->skip,
							     .seg = i,
							     .grp = CGRP_NONE };
					rc = items_push(cl, &ci);
					if (rc < 0)
						break;
					blobd_ref(e->b);
					o->refs++;
					idx = cl->nitems - 1;
				}
				if (!member)
					continue;
				if (e->off / win != wid) {
					rc = group_close(cl, m0, wvic);
					if (rc < 0)
						break;
					m0 = cl->nmems;
					wid = e->off / win;
					wvic = false;
				}
				if (cl->nmems - m0 == MERGE_MEMBERS_MAX)
					continue;
				rc = coil_grow((void **)&cl->mems,
					      &cl->cap_mems, cl->nmems + 1,
					      sizeof(*cl->mems));
				if (rc < 0)
					break;
				cl->mems[cl->nmems++] = (struct cmember){
					.o = o, .b = e->b, .off = e->off,
					.len = e->len, .skip = e->skip,
					.seg = i, .item = idx };
				wvic |= idx != SIZE_MAX;
			}
			if (rc == 0)
				rc = group_close(cl, m0, wvic);
			else
				cl->nmems = m0;
		}
	}
	return rc;
}

/* The record bytes one item may take: its extent, and a record header of
 * its own (a batch holds a record per object, and objects sharing a blob
 * share a run). */
static uint32_t item_rec_bytes(uint32_t n_csums)
{
	return FMT_EXTENT_FIXED + 8u * n_csums + FMT_JREC_HDR +
	       FMT_JREC_WRITE_FIXED;
}

/* Runs of items [a, z) (sorted by blob, object, offset).  A blob that
 * objects share (clones) is one run: it is copied once and every extent
 * that maps it moves to the copy.  A run is cut where its records would
 * outgrow half a batch's record space (a blob shared very widely is then
 * copied more than once).  @return how many, in cl->runs. */
static int make_runs(struct cleaner *cl, size_t a, size_t z, size_t *nrun)
{
	size_t n = 0;

	if (z - a > cl->cap_runs) {
		struct crun *r = realloc(cl->runs, (z - a) * sizeof(*r));
		struct crange *g;

		if (!r)
			return -ENOMEM;
		cl->runs = r;
		g = realloc(cl->ranges, (z - a) * sizeof(*g));
		if (!g)
			return -ENOMEM;
		cl->ranges = g;
		cl->cap_runs = z - a;
	}
	for (size_t i = a; i < z; i++) {
		const struct citem *it = &cl->items[i];
		const struct blobd *b = it->b;
		uint32_t lo = 0, hi = b->logical_len;
		struct crun *r = n ? &cl->runs[n - 1] : NULL;

		if (b->codec == FMT_CODEC_RAW) {
			lo = COIL_ALIGN_DOWN(it->skip, FMT_BLOCK);
			hi = (uint32_t)COIL_MIN((uint64_t)COIL_ALIGN_UP(
				(uint64_t)it->skip + it->len, FMT_BLOCK),
				(uint64_t)b->logical_len);
		}
		if (r && cl->items[r->i0].b->dev_off == b->dev_off &&
		    lo <= r->hi &&
		    (uint64_t)(i + 1 - r->i0) * item_rec_bytes(b->n_csums) <=
			    cl->rec_max / 2) {
			r->hi = COIL_MAX(r->hi, hi);
			r->lo = COIL_MIN(r->lo, lo);
			r->i1 = i + 1;
			continue;
		}
		cl->runs[n++] = (struct crun){ .i0 = i, .i1 = i + 1, .lo = lo,
					      .hi = hi };
	}
	*nrun = n;
	return 0;
}

/* Relocate what batch @bt holds: the items of runs [bt->r0, @r1) and the
 * merged extents it took (cl->xitems); @bt is empty after. */
static int batch_flush(struct cleaner *cl, struct cbatch *bt, size_t r1)
{
	struct wreq *w = &cl->w;
	size_t i0 = cl->runs[bt->r0].i0;
	size_t i1 = r1 > bt->r0 ? cl->runs[r1 - 1].i1 : i0;
	struct citem *items = &cl->items[i0];
	size_t n = i1 - i0;
	int rc;

	if (bt->nb == 0)
		return 0;
	if (cl->nx) {
		/* one relocation: the merged extents are items of the batch
		 * like the runs' (one record per object, one apply) */
		rc = coil_grow((void **)&cl->bitems, &cl->cap_b, n + cl->nx,
			      sizeof(*cl->bitems));
		if (rc < 0)
			return rc;
		memcpy(cl->bitems, items, n * sizeof(*items));
		memcpy(cl->bitems + n, cl->xitems, cl->nx * sizeof(*items));
		items = cl->bitems;
		n += cl->nx;
		cl->nx = 0;
	}
	w->nblobs = bt->nb;
	w->batch_len = bt->slot;
	if (cl->opt_on && cl->opt_hook)
		cl->opt_hook(cl->opt_hook_arg);
	rc = reloc_submit(cl, items, (uint32_t)n);
	if (rc < 0)
		stat_add(&cl->reloc_failures, 1);
	*bt = (struct cbatch){ .r0 = r1 };
	return rc;
}

/* Before run @r adds a blob of @slot_len bytes, @ext extents and @rec
 * bytes of record: the batch so far goes first when it would outgrow a
 * bound. */
static int batch_room(struct cleaner *cl, struct cbatch *bt, size_t r,
		      uint32_t slot_len, uint32_t ext, uint32_t rec)
{
	int rc = 0;

	if (bt->nb && (bt->nb == CLEAN_BATCH_BLOBS ||
		       bt->slot + slot_len > CLEAN_BATCH_BYTES ||
		       bt->next + ext > CLEAN_BATCH_EXTS ||
		       bt->rec + rec > cl->rec_max))
		rc = batch_flush(cl, bt, r);
	if (bt->nb == 0)
		bt->r0 = r;
	return rc;
}

static int cmp_range(const void *pa, const void *pb)
{
	const struct crange *x = pa, *y = pb;

	return x->off < y->off ? -1 : x->off > y->off;
}

static void wave_done(struct uring_io *io, int res)
{
	struct cwave *wv = io->arg;

	if (res >= 0 && (uint32_t)res != io->len)
		res = -EIO;
	pthread_mutex_lock(&wv->mu);
	if (res < 0 && wv->res == 0)
		wv->res = res;
	if (--wv->left == 0)
		pthread_cond_signal(&wv->cv);
	pthread_mutex_unlock(&wv->mu);
}

/* Read what runs [0, nrun) use of the segment at base into cl->seg_buf, at
 * the same offsets: the live bytes, merged across short dead stretches, in
 * pieces of at most CLEAN_READ_PIECE, a wave at a time (a victim a fifth
 * live reads about a third of the segment).  *bytes: how much was read. */
static int read_live(struct cleaner *cl, uint64_t base, size_t nrun,
		     uint64_t *bytes)
{
	struct coil_store *s = cl->s;
	struct cwave *wv = &cl->wave;
	struct uring_io *ios[CLEAN_READ_WAVE];
	size_t n = 0, k = 0;

	for (size_t r = 0; r < nrun; r++) {
		const struct crun *run = &cl->runs[r];
		const struct blobd *b = cl->items[run->i0].b;
		uint64_t lo = b->dev_off - base, hi;

		if (b->codec == FMT_CODEC_RAW) {
			hi = lo + run->hi;
			lo += run->lo;
		} else {
			hi = lo + b->stored_len;
		}
		cl->ranges[n++] = (struct crange){
			.off = (uint32_t)COIL_ALIGN_DOWN(lo, FMT_BLOCK),
			.end = (uint32_t)COIL_ALIGN_UP(hi, FMT_BLOCK) };
	}
	qsort(cl->ranges, n, sizeof(*cl->ranges), cmp_range);
	/* merged across short dead stretches, in place */
	for (size_t r = 1; r < n; r++) {
		struct crange *g = &cl->ranges[k];

		if (cl->ranges[r].off <= g->end + CLEAN_READ_GAP)
			g->end = COIL_MAX(g->end, cl->ranges[r].end);
		else
			cl->ranges[++k] = cl->ranges[r];
	}
	n = n ? k + 1 : 0;
	*bytes = 0;
	for (k = 0; k < n;) {
		unsigned m = 0;
		int rc;

		/* the next wave: pieces of the merged ranges, in order */
		for (; m < CLEAN_READ_WAVE && k < n; m++) {
			struct crange *g = &cl->ranges[k];
			uint32_t len = COIL_MIN(g->end - g->off,
						CLEAN_READ_PIECE);

			uring_io_prep(&wv->io[m], URING_OP_READ,
				      cl->seg_buf + g->off, len, base + g->off,
				      wave_done, wv);
			ios[m] = &wv->io[m];
			*bytes += len;
			g->off += len;
			if (g->off == g->end)
				k++;
		}
		wv->left = m;
		wv->res = 0;
		rc = uring_submit_many(s->ring, ios, m);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&wv->mu);
		while (wv->left)
			pthread_cond_wait(&wv->cv, &wv->mu);
		rc = wv->res;
		pthread_mutex_unlock(&wv->mu);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Member @mb's bytes, from its blob verified, at cl->mlog + @pos: from
 * the victim's bytes when its blob is in victim @seg at @base (read_live
 * read it whole: it is compressed), else read from the device (its
 * segment's reader count, taken at the pick, keeps it there).  @return 0,
 * or 1 when it cannot be read or does not verify (the merge is then not
 * made; a read of those bytes fails as it would have anyway). */
static int member_read(struct cleaner *cl, const struct cmember *mb,
		       uint32_t seg, uint64_t base, uint32_t pos)
{
	struct coil_store *s = cl->s;
	const uint8_t *src;
	struct fmt_blob fb;

	blobd_to_fmt(mb->b, &fb);
	if (fb.stored_len > FMT_BLOB_MAX || pos + (uint64_t)mb->len >
						    FMT_BLOB_MAX ||
	    mb->skip + (uint64_t)mb->len > fb.logical_len)
		return 1;
	if (mb->seg == seg) {
		COIL_ASSERT(fb.dev_off >= base);
		COIL_ASSERT(fb.dev_off - base + fb.stored_len <=
			    s->sb.segment_size);
		src = cl->seg_buf + (fb.dev_off - base);
	} else {
		uint64_t a = COIL_ALIGN_DOWN(fb.dev_off, FMT_BLOCK);
		uint64_t z = COIL_ALIGN_UP(fb.dev_off + fb.stored_len,
					   FMT_BLOCK);

		if (store_io_sync(s, URING_OP_READ, cl->mread,
				  (uint32_t)(z - a), a) < 0)
			return 1;
		stat_add(&cl->bytes_read, z - a);
		stat_add(&cl->opt.bytes_read, z - a);
		src = cl->mread + (fb.dev_off - a);
	}
	if (fmt_blob_decode(cl->dctx, dict_ddict(s, fb.dict_id), &fb, src,
			    fb.stored_len, cl->scratch, FMT_BLOB_MAX) !=
	    (int)fb.logical_len) {
		stat_add(&cl->verify_failures, 1);
		return 1;
	}
	memcpy(cl->mlog + pos, cl->scratch + mb->skip, mb->len);
	return 0;
}

/* Try merge @g, met at run @r of victim @seg (at @base): its members read
 * and verified, their bytes encoded as one blob, checked as optimize_blob
 * checks one; when it costs less than they do, it joins batch @bt with a
 * REWRITE pair per member, each on its own extent, so the compare-and-swap
 * decides each member alone.  Otherwise the members stay as they are (in
 * victims they are relocated each with its blob).  @return 0 or -errno. */
static int merge_group(struct cleaner *cl, uint32_t g, uint32_t seg,
		       uint64_t base, size_t r, struct cbatch *bt)
{
	struct coil_store *s = cl->s;
	struct wreq *w = &cl->w;
	struct cgroup *gp = &cl->grps[g];
	const struct cmember *m0 = &cl->mems[gp->m0];
	uint32_t n = (uint32_t)(gp->m1 - gp->m0), pos = 0, ncs = 0;
	uint32_t slot_len, rec;
	char cohort[DICT_COHORT_MAX + 1];
	struct dict *pool[DICT_POOL_MAX];
	unsigned np;
	const uint8_t *bytes = NULL;
	uint64_t cost = 0;
	int rc = 0;

	COIL_ASSERT(gp->state == CGRP_PENDING);
	COIL_ASSERT(n >= 2 && n <= MERGE_MEMBERS_MAX);
	gp->state = CGRP_DECLINED;
	/* A merge places the bytes of members outside the victims too,
	 * which the pass's room did not count (their segments are freed
	 * only once all their data has gone): it yields to writers short of
	 * space, as the pass does between victims, and the members are then
	 * optimized one by one. */
	if (free_now(s) <= cl->throttle)
		rc = 1;
	for (size_t m = gp->m0; m < gp->m1 && rc == 0; m++) {
		struct cmember *mb = &cl->mems[m];

		rc = member_read(cl, mb, seg, base, pos);
		mb->nskip = pos;
		pos += mb->len;
		cost += (uint64_t)mb->b->stored_len + 8u * mb->b->n_csums;
		ncs += mb->b->n_csums;
	}
	/* the members' bytes are read: their segments may go */
	group_unhold(cl, gp);
	if (rc != 0)
		return 0;
	dict_cohort_of(m0->o->name, m0->o->name_len, cohort);
	np = dict_pool(s, cohort, pool);
	if (optimize_merge(&cl->opt, cl->mlog, pos, n, cost, pool, np,
			   &cl->nfb, &bytes) != 1)
		return 0;
	slot_len = COIL_ALIGN_UP(cl->nfb.stored_len, FMT_BLOCK);
	rec = n * (item_rec_bytes(cl->nfb.n_csums) + FMT_EXTENT_FIXED) +
	      8u * ncs;
	if (rec > cl->rec_max / 2)
		return 0;
	rc = batch_room(cl, bt, r, slot_len, n, rec);
	if (rc == 0)
		rc = coil_grow((void **)&cl->xitems, &cl->cap_x, cl->nx + n,
			      sizeof(*cl->xitems));
	if (rc < 0)
		return rc;
	for (size_t m = gp->m0; m < gp->m1; m++) {
		const struct cmember *mb = &cl->mems[m];

		cl->xitems[cl->nx++] = (struct citem){
			.o = mb->o, .b = mb->b, .off = mb->off, .len = mb->len,
			.skip = mb->skip, .seg = mb->seg, .k = bt->nb,
			.nskip = mb->nskip, .grp = g, .rw = true };
		stat_add(&cl->logical_relocated, mb->len);
	}
	w->fb[bt->nb] = cl->nfb;
	memcpy(w->batch + bt->slot, bytes, cl->nfb.stored_len);
	w->slot[bt->nb] = (uint32_t)bt->slot;
	bt->slot += slot_len;
	bt->nb++;
	bt->rec += rec;
	bt->next += n;
	gp->state = CGRP_MERGED;
	stat_add(&cl->opt.rewritten, n);
	stat_add(&cl->opt.bytes_written, cl->nfb.stored_len);
	stat_add(&cl->opt.merges, 1);
	stat_add(&cl->opt.merged_blobs, n);
	return 0;
}

static bool item_merged(const struct cleaner *cl, const struct citem *ci)
{
	return ci->grp != CGRP_NONE && cl->grps[ci->grp].state == CGRP_MERGED;
}

/* Copy, batch and relocate the items of one victim, [a, z) of cl->items.
 * Items of a blob that does not verify get k == UINT32_MAX and stay. */
static int clean_victim(struct cleaner *cl, size_t a, size_t z)
{
	struct coil_store *s = cl->s;
	struct wreq *w = &cl->w;
	uint32_t seg = cl->items[a].seg;
	uint64_t base = seg_base(s, seg), end = 0;
	struct cbatch bt = { 0 };
	size_t nrun;
	char cohort[DICT_COHORT_MAX + 1];
	int rc;

	rc = make_runs(cl, a, z, &nrun);
	if (rc < 0)
		return rc;
	rc = read_live(cl, base, nrun, &end);
	if (rc < 0)
		return rc;
	stat_add(&cl->bytes_read, end);
	if (cl->opt_on)
		stat_add(&cl->opt.bytes_read, end);

	cl->nx = 0;
	for (size_t r = 0; r < nrun; r++) {
		const struct crun *run = &cl->runs[r];
		const struct citem *it = &cl->items[run->i0];
		const struct blobd *b = it->b;
		bool raw = b->codec == FMT_CODEC_RAW;
		uint32_t stored = raw ? run->hi - run->lo : b->stored_len;
		uint32_t ncs = raw ? (run->hi - run->lo + FMT_BLOCK - 1) /
					     FMT_BLOCK : b->n_csums;
		uint32_t slot_len, ext_len;
		const uint8_t *src = cl->seg_buf + (b->dev_off - base) +
				     (raw ? run->lo : 0);
		struct fmt_blob *fb = &cl->rb;
		bool ok, rw = false, rest = false;

		/* Merges first: an extent a merge took moves with it, not
		 * with its blob (nothing else maps a member's blob). */
		for (size_t i = run->i0; i < run->i1; i++) {
			struct citem *ci = &cl->items[i];

			if (ci->grp != CGRP_NONE &&
			    cl->grps[ci->grp].state == CGRP_PENDING) {
				rc = merge_group(cl, ci->grp, seg, base, r,
						 &bt);
				if (rc < 0)
					return rc;
			}
			if (item_merged(cl, ci))
				ci->k = UINT32_MAX;
			else
				rest = true;
		}
		if (!rest)
			continue;
		blobd_to_fmt(b, fb);
		if (raw) {
			/* the live sectors only: their checksums carry over */
			memmove(fb->csums, fb->csums + run->lo / FMT_BLOCK,
				(size_t)ncs * 8u);
			fb->n_csums = (uint16_t)ncs;
			fb->logical_len = fb->stored_len = stored;
		}
		/* Verify before copying: bytes that do not read back right
		 * stay where they are (reads of them fail with -EIO, as they
		 * would have anyway). */
		ok = fmt_blob_decode(cl->dctx, dict_ddict(s, fb->dict_id), fb,
				     src, stored, cl->scratch,
				     FMT_BLOB_MAX) >= 0;
		/* The optimizer's pass: a blob not yet optimized is encoded
		 * again from the verified bytes; the smaller candidate, if
		 * any, is what the batch carries (a REWRITE pair per
		 * extent), else the blob is copied marked as optimized. */
		if (ok && cl->opt_on && !(fb->flags & FMT_BLOB_OPTIMIZED) &&
		    dict_name_internal(it->o->name, it->o->name_len)) {
			/* coil's own objects (dictionaries) are never
			 * re-encoded: moved as they are, marked, so the
			 * segment they land in is not picked for them again */
			fb->flags |= FMT_BLOB_OPTIMIZED;
		} else if (ok && cl->opt_on &&
			   !(fb->flags & FMT_BLOB_OPTIMIZED)) {
			const uint8_t *nb_bytes = NULL;
			struct dict *pool[DICT_POOL_MAX];
			unsigned np;
			int o;

			/* the cohort's dictionaries, by the first object that
			 * maps the blob (clones share one encoding) */
			dict_cohort_of(it->o->name, it->o->name_len, cohort);
			np = dict_pool(s, cohort, pool);
			o = optimize_blob(&cl->opt, fb, cl->scratch, pool, np,
					  &cl->nfb, &nb_bytes);

			if (o == 1) {
				*fb = cl->nfb;
				src = nb_bytes;
				stored = fb->stored_len;
				rw = true;
			} else {
				/* nothing smaller, or a candidate that failed
				 * its check: the blob moves as it was, marked
				 * (a pass that met a failure would otherwise
				 * meet it again on every pass after) */
				fb->flags |= FMT_BLOB_OPTIMIZED;
			}
		}
		slot_len = COIL_ALIGN_UP(stored, FMT_BLOCK);
		ext_len = (uint32_t)(run->i1 - run->i0) *
			  (item_rec_bytes(fb->n_csums) +
			   (rw ? FMT_EXTENT_FIXED + 8u * b->n_csums : 0));

		/* Close the batch at a bound. */
		if (ok) {
			rc = batch_room(cl, &bt, r, slot_len,
					(uint32_t)(run->i1 - run->i0), ext_len);
			if (rc < 0)
				return rc;
		}
		if (bt.nb == 0)
			bt.r0 = r;
		for (size_t i = run->i0; i < run->i1; i++) {
			struct citem *ci = &cl->items[i];

			if (item_merged(cl, ci))
				continue;
			ci->k = ok ? bt.nb : UINT32_MAX;
			ci->nskip = ci->skip - (raw ? run->lo : 0);
			ci->rw = rw;
			if (ok)
				stat_add(&cl->logical_relocated, ci->len);
		}
		if (!ok) {
			stat_add(&cl->verify_failures, 1);
			continue;
		}
		if (rw) {
			stat_add(&cl->opt.rewritten, 1);
			stat_add(&cl->opt.bytes_written, stored);
		}
		w->fb[bt.nb] = *fb;
		memcpy(w->batch + bt.slot, src, stored);
		w->slot[bt.nb] = (uint32_t)bt.slot;
		bt.slot += slot_len;
		bt.nb++;
		bt.rec += ext_len;
		bt.next += (uint32_t)(run->i1 - run->i0);
	}
	return batch_flush(cl, &bt, nrun);
}

/* Drop the references of items [a, z) and, when @seg is a victim, its
 * reader count, so a checkpoint may free it (mlock taken). */
static void release_items(struct cleaner *cl, size_t a, size_t z, uint32_t seg)
{
	struct coil_store *s = cl->s;

	pthread_mutex_lock(&s->mlock);
	for (size_t i = a; i < z; i++) {
		blobd_unref(cl->items[i].b);
		object_put(s, cl->items[i].o);
	}
	COIL_ASSERT(seg == UINT32_MAX || seg < s->nseg);
	if (seg != UINT32_MAX && cl->victim[seg]) {
		cl->victim[seg] = 0;
		COUNT_SUB(&s->segs[seg].readers, 1);
		seg_maybe_pending(s, seg);
	}
	pthread_mutex_unlock(&s->mlock);
}

/* Has the foreground written since the background pass began? */
static bool bg_written(struct cleaner *cl)
{
	return atomic_load(&cl->s->st.writes) != cl->bg_writes;
}

/* One pass; with cl->opt_on, the optimizer's (victims by bytes not yet
 * optimized, at most @budget bytes of them; *@left: segments left for a
 * later pass, and it stops early when free space runs low, leaving the
 * rest).  @return segments it freed (>= 0) or -errno. */
/* The foreground's reads and writes so far (user calls). */
static uint64_t fg_ops(const struct coil_store *s)
{
	return atomic_load(&s->st.reads) + atomic_load(&s->st.writes);
}

/* Between an optimizer pass's victims: while the foreground does I/O
 * (its count moved since @*fg), wait until the pass's reads since @t0
 * (@rd0: the optimizer's count then) are within OPT_FG_RATE, in naps,
 * cut short by a close or by writers short of space. */
static void opt_pace(struct cleaner *cl, uint64_t t0, uint64_t rd0,
		     uint64_t *fg)
{
	struct coil_store *s = cl->s;
	uint64_t f = fg_ops(s), now, due;

	if (f == *fg)
		return;
	*fg = f;
	due = t0 + (atomic_load(&cl->opt.bytes_read) - rd0) * 1000000000ull /
			   OPT_FG_RATE;
	while ((now = coil_now_ns()) < due && !atomic_load(&cl->stopping) &&
	       free_now(s) > cl->throttle) {
		struct timespec ts = { 0, (long)COIL_MIN(due - now,
							 OPT_PACE_NAP_NS) };

		nanosleep(&ts, NULL);
		stat_add(&cl->opt.paced_ns, coil_now_ns() - now);
	}
}

static int clean_pass(struct cleaner *cl, uint32_t max_v, uint64_t budget,
		      uint32_t *left)
{
	uint64_t pace_t0 = coil_now_ns(), pace_rd0 = 0, pace_fg = 0;
	uint64_t pace_fg0 = 0;
	struct coil_store *s = cl->s;
	struct cand *cand = malloc((size_t)s->seg_cap * sizeof(*cand));
	uint32_t nv, free0, free1, npending = 0;
	uint64_t t0, held;
	int rc = 0;

	if (!cand)
		return -ENOMEM;
	pthread_mutex_lock(&s->mlock);
	t0 = coil_now_ns();
	free0 = s->free_segs;
	if (cl->opt_on)
		nv = pick_opt_victims(cl, max_v, cand, budget, left);
	else if (cl->compact_on)
		nv = pick_compact_victims(cl, max_v, left);
	else
		nv = pick_victims(cl, max_v, cand);
	for (uint32_t i = 0; i < s->nseg; i++)
		npending += s->segs[i].state == SEG_PENDING;
	if (nv)
		rc = collect_items(cl);
	held = coil_now_ns() - t0;
	pthread_mutex_unlock(&s->mlock);
	atomic_store(&cl->pick_lock_ns_last, held);
	stat_max(&cl->pick_lock_ns_max, held);
	free(cand);
	stat_add(&cl->passes, 1);
	if (nv == 0 && npending == 0)
		return 0;
	if (cl->opt_on) {
		pace_rd0 = atomic_load(&cl->opt.bytes_read);
		pace_fg = pace_fg0 = fg_ops(s);
	}
	/* The items hold their objects and blobs until released. */
	if (cl->nitems > 1) /* qsort(NULL, 0) is undefined (UBSan) */
		qsort(cl->items, cl->nitems, sizeof(*cl->items), cmp_item);
	for (size_t a = 0, z; a < cl->nitems; a = z) {
		uint32_t seg = cl->items[a].seg;

		for (z = a; z < cl->nitems && cl->items[z].seg == seg; z++)
			;
		if (rc == 0 && atomic_load(&cl->stopping))
			rc = -ESHUTDOWN;
		/* the optimizer yields to writers short of space: the
		 * victims not yet started stay as they are */
		if (rc == 0 && cl->opt_on && (free_now(s) <= cl->throttle ||
					      (cl->opt_bg && bg_written(cl)))) {
			release_items(cl, a, z, seg);
			(*left)++;
			continue;
		}
		if (rc == 0) {
			rc = clean_victim(cl, a, z);
			if (rc == 0 && atomic_load(&s->broken))
				rc = -EIO;
		}
		/* Each victim is let go as soon as it is relocated: a
		 * checkpoint (ours below, or one writers wait for) can free
		 * it while the pass goes on. */
		release_items(cl, a, z, seg);
		if (rc == 0 && free_now(s) <= cl->throttle)
			ckpt_trigger(s);
		if (rc == 0 && cl->opt_on)
			opt_pace(cl, pace_t0, pace_rd0, &pace_fg);
	}
	cl->nitems = 0;
	for (uint32_t j = 0; j < nv; j++)
		release_items(cl, 0, 0, cl->vlist[j]);
	/* before the checkpoint: segments the merges emptied are PENDING
	 * and free with the victims once no member holds them */
	groups_release(cl);
	/* The emptied victims are PENDING: a checkpoint frees them.  An
	 * optimizer pass next to foreground I/O leaves them to the next one
	 * unless space is short (a checkpoint a pass, with the fdatasyncs in
	 * it, cost the foreground's writes; coil_optimize takes one when it
	 * is done); alone, it frees them now, so the next pass writes into
	 * them rather than into new space. */
	if ((rc == 0 || rc == -ENOSPC) &&
	    (!cl->opt_on || rc == -ENOSPC || nv == 0 ||
	     fg_ops(s) == pace_fg0 || free_now(s) <= cl->clean_lo)) {
		if (ckpt_wait(s) < 0)
			return -ESHUTDOWN;
	}
	free1 = free_now(s);
	stat_add(&cl->segs_cleaned, nv);
	if (free1 > free0)
		stat_add(&cl->segs_freed, free1 - free0);
	if (rc < 0)
		return rc;
	return free1 > free0 ? (int)(free1 - free0) : 0;
}

static uint32_t free_now(struct coil_store *s)
{
	uint32_t f;

	pthread_mutex_lock(&s->mlock);
	f = s->free_segs;
	pthread_mutex_unlock(&s->mlock);
	return f;
}

/* At a tick: is the store idle long enough for a background pass (and
 * not known to have nothing for it)?  cl->mu held. */
static bool bg_due_locked(struct cleaner *cl)
{
	struct coil_store *s = cl->s;
	uint64_t w = atomic_load(&s->st.writes), now = coil_now_ns();

	if (!s->opt_idle_ns || atomic_load(&s->broken))
		return false;
	if (w != cl->bg_writes || !cl->bg_quiet_ns) {
		cl->bg_writes = w;
		cl->bg_quiet_ns = now;
		return false;
	}
	return now - cl->bg_quiet_ns >= s->opt_idle_ns &&
	       w != cl->bg_nothing_at;
}

/* One optimizer pass at @level over at most @budget bytes of live data
 * (cleaner thread).  @return 1 when segments with data not yet optimized
 * remain, 0 when none, or -errno. */
static int opt_round(struct cleaner *cl, int level, uint64_t budget)
{
	uint32_t left = 0;
	int rc;

	if (atomic_load(&cl->s->broken))
		return -EIO;
	rc = optimizer_begin(&cl->opt, level);
	if (rc < 0)
		return rc;
	cl->opt_on = true;
	cl->opt_taken = 0;
	rc = clean_pass(cl, CLEAN_VICTIMS_MAX, budget, &left);
	cl->opt_on = false;
	optimizer_end(&cl->opt);
	if (cl->opt_taken) /* a pass that found nothing is not one */
		stat_add(&cl->opt.passes, 1);
	if (rc < 0)
		return rc;
	return left ? 1 : 0;
}

/* One compaction pass (cleaner thread): the segment being filled is
 * sealed and placement starts again from the front, then the sealed
 * segments nearest the end move down.  @return 1 when a later pass may
 * move more, 0 when nothing is left to move, or -errno. */
static int compact_round(struct cleaner *cl)
{
	struct coil_store *s = cl->s;
	uint32_t left = 0;
	int rc;

	if (atomic_load(&s->broken))
		return -EIO;
	pthread_mutex_lock(&s->mlock);
	(void)seg_seal_active(s);
	s->alloc_cursor = 0;
	pthread_mutex_unlock(&s->mlock);
	cl->compact_on = true;
	rc = clean_pass(cl, CLEAN_VICTIMS_MAX, UINT64_MAX, &left);
	cl->compact_on = false;
	if (rc < 0)
		return rc;
	return left ? 1 : 0;
}

static void *cleaner_main(void *arg)
{
	struct cleaner *cl = arg;
	struct coil_store *s = cl->s;

	coil_thread_name("clean", -1);
	pthread_mutex_lock(&cl->mu);
	for (;;) {
		uint32_t force, goal;
		bool stuck = true;
		int rc;

		while (!cl->want && !cl->stop) {
			struct timespec ts;

			abstime_in(&ts, CLEANER_TICK_NS);
			if (pthread_cond_timedwait(&cl->cv, &cl->mu, &ts) ==
			    ETIMEDOUT) {
				uint32_t goal = COIL_MAX(cl->clean_lo,
							 cl->need_free);

				if (bg_due_locked(cl))
					cl->want = cl->bg_due = true;
				pthread_mutex_unlock(&cl->mu);
				if (free_now(s) < goal)
					cl->want = true;
				/* the journal's share follows the metadata */
				if (s->grows)
					grow_journal_follow(s);
				pthread_mutex_lock(&cl->mu);
			}
		}
		if (cl->stop)
			break;
		cl->want = false;
		cl->running = true;
		if (cl->compact_req) {
			cl->compact_req = false;
			pthread_mutex_unlock(&cl->mu);
			rc = compact_round(cl);
			pthread_mutex_lock(&cl->mu);
			cl->opt_res = rc;
			cl->opt_done++;
			pthread_cond_broadcast(&cl->space_cv);
		} else if (cl->opt_req) {
			int level = cl->opt_req;
			uint64_t budget = cl->opt_budget;

			cl->opt_req = 0;
			pthread_mutex_unlock(&cl->mu);
			rc = opt_round(cl, level, budget);
			pthread_mutex_lock(&cl->mu);
			cl->opt_res = rc;
			cl->opt_done++;
			pthread_cond_broadcast(&cl->space_cv);
		} else if (cl->bg_due) {
			/* Idle: a bounded pass over cold data, stopped by the
			 * next write.  Found nothing: not again until written. */
			uint64_t w = cl->bg_writes;

			cl->bg_due = false;
			pthread_mutex_unlock(&cl->mu);
			cl->opt_bg = true;
			rc = opt_round(cl, OPT_BG_LEVEL, OPT_BG_BUDGET);
			cl->opt_bg = false;
			pthread_mutex_lock(&cl->mu);
			if (rc == 0)
				cl->bg_nothing_at = w;
		}
		force = (uint32_t)cl->force_victims;
		cl->force_victims = 0;
		goal = COIL_MAX(cl->clean_hi, cl->need_free);
		cl->need_free = 0;  /* a writer still short sets it again */
		pthread_mutex_unlock(&cl->mu);

		/* A growing store grows first when its segments are mostly
		 * live (writers on coil threads cannot grow it themselves). */
		if (s->grows && !force)
			(void)grow_policy(s, 0, false);
		/* A round: passes until free space is back above the high
		 * mark (hysteresis), or nothing more can be gained. */
		for (int pass = 0; pass < 64; pass++) {
			if (atomic_load(&s->broken))
				break;
			if (!force && free_now(s) >= goal)
				break;
			rc = clean_pass(cl, force ? force : cl->victims_max,
					UINT64_MAX, NULL);
			pthread_mutex_lock(&cl->mu);
			pthread_cond_broadcast(&cl->space_cv);
			if (cl->stop) {
				pthread_mutex_unlock(&cl->mu);
				break;
			}
			pthread_mutex_unlock(&cl->mu);
			if (rc <= 0)
				break;
			stuck = false;
			if (force)
				break;
		}
		pthread_mutex_lock(&cl->mu);
		cl->stuck = stuck;
		cl->running = false;
		cl->rounds_done++;
		pthread_cond_broadcast(&cl->space_cv);
	}
	cl->running = false;
	pthread_cond_broadcast(&cl->space_cv);
	pthread_mutex_unlock(&cl->mu);
	return NULL;
}

/* Wait for a round that starts after now.  cl->mu held. */
static int wait_round_locked(struct cleaner *cl, uint64_t deadline_ns)
{
	uint64_t target = cl->rounds_done + (cl->running ? 2 : 1);

	kick_locked(cl);
	while (cl->rounds_done < target && !cl->stop) {
		struct timespec ts;
		uint64_t now = coil_now_ns();

		if (now >= deadline_ns)
			return -ETIMEDOUT;
		abstime_in(&ts, COIL_MIN(deadline_ns - now, 10ull * 1000 * 1000));
		pthread_cond_timedwait(&cl->space_cv, &cl->mu, &ts);
	}
	return cl->stop ? -ESHUTDOWN : 0;
}

int cleaner_run_now(struct coil_store *s, uint32_t max_victims)
{
	struct cleaner *cl = s->cl;
	uint32_t f0, f1;
	int rc;

	if (!cl)
		return -EROFS;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	f0 = free_now(s);
	pthread_mutex_lock(&cl->mu);
	cl->force_victims = max_victims ? COIL_MIN(max_victims,
						   CLEAN_VICTIMS_MAX) :
					  CLEAN_VICTIMS_MAX;
	rc = wait_round_locked(cl, coil_now_ns() + 60ull * 1000000000ull);
	pthread_mutex_unlock(&cl->mu);
	f1 = free_now(s);
	if (rc < 0)
		return rc;
	return f1 > f0 ? (int)(f1 - f0) : 0;
}

/* Ask the cleaner thread for an optimizer pass (@level > 0) or a
 * compaction pass (@level 0) and wait for its result. */
static int cleaner_request(struct coil_store *s, int level, uint64_t budget,
			   uint64_t *taken)
{
	struct cleaner *cl = s->cl;
	uint64_t target;
	int rc;

	*taken = 0;
	if (!cl)
		return -EROFS;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	pthread_mutex_lock(&cl->mu);
	/* one caller at a time: a second waits for the first's answer */
	while (cl->opt_busy && !cl->stop)
		pthread_cond_wait(&cl->space_cv, &cl->mu);
	cl->opt_busy = true;
	if (level)
		cl->opt_req = level;
	else
		cl->compact_req = true;
	cl->opt_budget = budget;
	target = cl->opt_done + 1;
	kick_locked(cl);
	while (cl->opt_done < target && !cl->stop)
		pthread_cond_wait(&cl->space_cv, &cl->mu);
	rc = cl->stop && cl->opt_done < target ? -ESHUTDOWN : cl->opt_res;
	*taken = cl->opt_taken;
	cl->opt_busy = false;
	pthread_cond_broadcast(&cl->space_cv);
	pthread_mutex_unlock(&cl->mu);
	return rc;
}

int cleaner_optimize(struct coil_store *s, int level, uint64_t budget,
		     uint64_t *taken)
{
	return level > 0 ? cleaner_request(s, level, budget, taken) : -EINVAL;
}

const struct optimizer *cleaner_optimizer(struct coil_store *s)
{
	return s->cl ? &s->cl->opt : NULL;
}

void cleaner_optimize_inject(struct coil_store *s, uint32_t bad)
{
	if (s->cl)
		atomic_store(&s->cl->opt.inject_bad, bad);
}

void cleaner_optimize_hook(struct coil_store *s, void (*fn)(void *),
			   void *arg)
{
	if (s->cl) {
		s->cl->opt_hook = fn;
		s->cl->opt_hook_arg = arg;
	}
}

/* ---- throttling ------------------------------------------------------------ */

/* A writer needs @need bytes that the free segments above the reserve do
 * not hold: the next round cleans until they do, even when free space is
 * above the marks (a write larger than the room the marks keep would
 * otherwise fail with -ENOSPC while dead space waits).  cl->mu held. */
static void want_room_locked(struct cleaner *cl, struct coil_store *s,
			     uint64_t need)
{
	uint64_t segs = cl->reserve + (need + per_seg(s) - 1) / per_seg(s) + 1;

	if (segs > s->nseg)
		segs = s->nseg;
	if (segs > cl->need_free)
		cl->need_free = (uint32_t)segs;
}

void cleaner_throttle(struct coil_store *s, uint64_t need)
{
	struct cleaner *cl = s->cl;
	uint64_t t0, deadline, delay, waited, target;
	uint32_t f;
	uint64_t cap;

	if (!cl)
		return;
	pthread_mutex_lock(&s->mlock);
	f = s->free_segs;
	cap = fg_cap_locked(s);
	pthread_mutex_unlock(&s->mlock);
	if (f >= cl->clean_lo && cap >= need)
		return;
	/* A growing store takes more disk before it cleans while its
	 * segments are mostly live (grow.c decides); a coil thread never
	 * waits for the file system, the cleaner's round grows for it. */
	if (s->grows && !engine_on_coil_thread(s) &&
	    grow_policy(s, need, false) > 0) {
		pthread_mutex_lock(&s->mlock);
		f = s->free_segs;
		cap = fg_cap_locked(s);
		pthread_mutex_unlock(&s->mlock);
		if (f >= cl->clean_lo && cap >= need)
			return;
	}
	pthread_mutex_lock(&cl->mu);
	if (cap < need)
		want_room_locked(cl, s, need);
	if (!cl->running)
		kick_locked(cl);
	pthread_mutex_unlock(&cl->mu);
	if (f >= cl->throttle && cap >= need)
		return;
	if (engine_on_coil_thread(s))
		return; /* callbacks never block */
	/* Below the throttle mark: a delay that grows as free space shrinks
	 * toward the reserve, so writers slow down smoothly instead of
	 * running into a wall.  A hard wait (for space, up to
	 * CLEANER_THROTTLE_MAX_NS) only when the write does not fit or only
	 * the reserve is left; it ends early when a whole round of cleaning
	 * that began after we came gained nothing (then the store is full:
	 * placement fails with -ENOSPC). */
	t0 = coil_now_ns();
	deadline = t0 + CLEANER_THROTTLE_MAX_NS;
	delay = CLEANER_DELAY_MAX_NS *
		(cl->throttle - COIL_MIN(f, cl->throttle)) /
		(cl->throttle - cl->reserve + 1);
	pthread_mutex_lock(&cl->mu);
	target = cl->rounds_done + (cl->running ? 2 : 1);
	kick_locked(cl);
	for (;;) {
		struct timespec ts;
		uint64_t now = coil_now_ns();
		bool hard = cap < need || f <= cl->reserve;

		if (!hard && (f >= cl->throttle || now - t0 >= delay))
			break;
		if (hard && cl->rounds_done >= target && cl->stuck) {
			stat_add(&cl->enospc_hints, 1);
			break;
		}
		if (cl->stop || now >= deadline)
			break;
		if (cl->rounds_done >= target) {
			target = cl->rounds_done + (cl->running ? 2 : 1);
			if (cap < need)
				want_room_locked(cl, s, need);
			kick_locked(cl);
		}
		/* Checkpoints free segments without telling us: poll. */
		abstime_in(&ts, 1000ull * 1000);
		pthread_cond_timedwait(&cl->space_cv, &cl->mu, &ts);
		pthread_mutex_unlock(&cl->mu);
		pthread_mutex_lock(&s->mlock);
		f = s->free_segs;
		cap = fg_cap_locked(s);
		pthread_mutex_unlock(&s->mlock);
		pthread_mutex_lock(&cl->mu);
	}
	pthread_mutex_unlock(&cl->mu);
	waited = coil_now_ns() - t0;
	stat_add(&cl->throttled, 1);
	stat_add(&cl->throttle_ns, waited);
	stat_max(&cl->throttle_ns_max, waited);
}

/* The data area grew (grow.c): the marks follow the segment count. */
static void cleaner_resize(struct coil_store *s)
{
	struct cleaner *cl = s->cl;
	uint32_t n;

	if (!cl)
		return;
	pthread_mutex_lock(&s->mlock);
	n = s->nseg;
	pthread_mutex_unlock(&s->mlock);
	pthread_mutex_lock(&cl->mu);
	thresholds(cl, n, s->sb.segment_size, s->grows && n < s->seg_cap);
	pthread_mutex_unlock(&cl->mu);
}

/* Growth policy (the mechanism is grow.c).  Grow when free segments are
 * under the low mark or a write of @need bytes does not fit, unless half
 * the segments in use or more are dead: then the cleaner gets the room back
 * cheaper than the file system would give more (live bytes are logical:
 * with compression they overstate, and the store grows sooner).  @force:
 * a write failed for room (grow if it can at all; 1 when the room is
 * there already).  @return segments added, 0, -ENOSPC, -EIO. */
static int grow_policy(struct coil_store *s, uint64_t need, bool force)
{
	uint32_t nseg, f, lo, used, want;
	uint64_t live = 0, per = per_seg(s), cap;
	int rc;

	if (!s->grows || !s->cl)
		return 0;
	/* One decision at a time: a writer and the cleaner's round that
	 * both find free space short must not both grow for it. */
	pthread_mutex_lock(&s->grow_mu);
	pthread_mutex_lock(&s->mlock);
	nseg = s->nseg;
	f = s->free_segs;
	cap = fg_cap_locked(s);
	lo = s->cl->clean_lo;
	if (nseg >= s->seg_cap || (f >= lo && cap >= need)) {
		pthread_mutex_unlock(&s->mlock);
		pthread_mutex_unlock(&s->grow_mu);
		/* a failed write finds room another step made: try again */
		return force && cap >= need ? 1 : 0;
	}
	for (uint32_t i = 0; i < nseg; i++)
		live += s->segs[i].live;
	pthread_mutex_unlock(&s->mlock);
	used = nseg - f;
	if (!force && cap >= need && used &&
	    live * 2 < (uint64_t)used * s->sb.segment_size) {
		pthread_mutex_unlock(&s->grow_mu);
		return 0;
	}
	/* A step: a thirty-second of the store, at least grow_step_bytes
	 * and what the low mark and the write need (a step costs two
	 * superblock writes and three fdatasyncs, in a writer's path: 2 MiB
	 * steps halved fio's sequential writes; the free space it leaves is
	 * disk the store holds beyond its data). */
	want = (uint32_t)COIL_MAX(COIL_MAX(2ull, nseg / 32),
				 grow_step_bytes(s, nseg) / s->sb.segment_size);
	want = COIL_MAX(want, lo > f ? lo - f + 1 : 0);
	if (cap < need)
		want = COIL_MAX(want, (uint32_t)COIL_MIN(
			(need - cap + per - 1) / per + 1,
			(uint64_t)UINT32_MAX / 2));
	rc = grow_step_locked(s, want);
	pthread_mutex_unlock(&s->grow_mu);
	if (rc > 0)
		cleaner_resize(s);
	return rc;
}

int cleaner_grow(struct coil_store *s, uint64_t need)
{
	if (engine_on_coil_thread(s) && uring_on_ring_thread(s->ring))
		return 0;
	return grow_policy(s, need, true);
}

/* ---- compaction ---------------------------------------------------------------- */

/* Checkpoint rounds a compaction waits for at most before it cuts the
 * file (each frees what the one before left pending). */
#define COMPACT_CKPT_ROUNDS 6

static uint32_t pending_segs(struct coil_store *s)
{
	uint32_t n = 0;

	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++)
		n += s->segs[i].state == SEG_PENDING;
	pthread_mutex_unlock(&s->mlock);
	return n;
}

/* Emptied segments become FREE through checkpoints, and one frees only
 * those whose records all lie before its replay point (ckpt.c): wait for
 * checkpoints until none is pending (@always: at least one), at most
 * COMPACT_CKPT_ROUNDS.  @return 0 or -errno. */
static int compact_settle(struct coil_store *s, bool always)
{
	int rc = 0;

	for (int i = 0; i < COMPACT_CKPT_ROUNDS && rc == 0 &&
	     ((always && i == 0) || pending_segs(s)); i++)
		rc = ckpt_wait(s);
	return rc;
}

/* Give back the tail of a growing store: every FREE segment after the last
 * one in use, down to the size a new store starts with (a few free
 * segments stay, so the next writes need no growth step at once).  Order,
 * for crashes: the segments leave the table under mlock (no write can be
 * placed in them after that), then a checkpoint and the superblock name
 * the smaller count, then the file is cut.  A crash before the superblock
 * leaves the old count (those segments were free: nothing refers to them);
 * after it, a longer file whose tail is ignored.  Live data is not moved:
 * a store whose last segment is in use keeps its length. */
int cleaner_compact(struct coil_store *s, uint64_t *returned)
{
	struct stat st;
	uint64_t before = 0, after = 0;
	uint32_t n, t, keep, floor_n;
	int rc = 0;

	*returned = 0;
	if (!s->cl)
		return -EROFS;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	if (!s->grows)
		return 0;
	if (fstat(s->fd, &st) == 0)
		before = (uint64_t)st.st_blocks * 512;
	/* Segments emptied before the call (removed objects, a deleted
	 * journal) are PENDING until a checkpoint, and the moves need them
	 * FREE to move into: a store whose free space was all pending moved
	 * nothing, and gave back only its tail. */
	rc = compact_settle(s, false);
	if (rc < 0)
		return rc;
	/* Live data first moves toward the front, through the cleaner's
	 * relocation (crash-safe as any cleaning), pass after pass while a
	 * pass moves something. */
	for (int i = 0; i < 64; i++) {
		uint64_t moved;

		rc = cleaner_request(s, 0, 0, &moved);
		if (rc <= 0)
			break;
	}
	if (rc < 0)
		return rc;
	/* The segments the moves emptied become FREE. */
	rc = compact_settle(s, true);
	if (rc < 0)
		return rc;
	floor_n = (uint32_t)COIL_MIN((uint64_t)s->seg_cap,
				     COIL_MAX(2ull, GROW_INITIAL_BYTES /
						    s->sb.segment_size));
	pthread_mutex_lock(&s->grow_mu);
	pthread_mutex_lock(&s->mlock);
	n = s->nseg;
	for (t = n; t > 0 && s->segs[t - 1].state == SEG_FREE &&
		    s->segs[t - 1].inflight == 0 &&
		    atomic_load(&s->segs[t - 1].readers) == 0; t--)
		;
	keep = COIL_MAX(t + s->cl->reserve + 2, floor_n);
	keep = COIL_MIN(keep, n);
	if (keep < n) {
		COIL_ASSERT(s->free_segs >= n - keep);
		s->free_segs -= n - keep;
		s->nseg = keep;
		if (s->alloc_cursor >= keep)
			s->alloc_cursor = 0;
	}
	pthread_mutex_unlock(&s->mlock);
	if (keep < n) {
		pthread_mutex_lock(&s->ckpt_mu);
		s->sb.segment_count = keep;
		atomic_store(&s->seg_count_grown, keep);
		pthread_mutex_unlock(&s->ckpt_mu);
		/* Whole: a base from before would still name segments
		 * past the new count, and loading it would refuse them. */
		pthread_mutex_lock(&s->mlock);
		s->ck_base_next = true;
		pthread_mutex_unlock(&s->mlock);
		rc = ckpt_write(s, false);
		if (rc == 0)
			rc = grow_truncate(s, keep);
	}
	pthread_mutex_unlock(&s->grow_mu);
	cleaner_resize(s);
	if (fstat(s->fd, &st) == 0)
		after = (uint64_t)st.st_blocks * 512;
	if (before > after)
		*returned = before - after;
	return rc;
}

/* ---- start / stop ---------------------------------------------------------- */

static void cleaner_free(struct cleaner *cl)
{
	struct wreq *w = &cl->w;

	free(cl->gen_seen);
	free(cl->born_ns);
	free(cl->victim);
	seg_discard_destroy(cl->s);
	free(cl->vlist);
	optimizer_destroy(&cl->opt);
	free(cl->items);
	free(cl->mems);
	free(cl->grps);
	free(cl->xitems);
	free(cl->bitems);
	free(cl->mread);
	free(cl->mlog);
	free(cl->runs);
	free(cl->ranges);
	free(cl->seg_buf);
	free(cl->scratch);
	if (cl->dctx)
		ZSTD_freeDCtx(cl->dctx);
	wreq_free_arrays(w);
	free(w->batch); /* the cleaner's own, not from the bufpool */
	pthread_mutex_destroy(&cl->mu);
	pthread_cond_destroy(&cl->cv);
	pthread_cond_destroy(&cl->space_cv);
	pthread_cond_destroy(&cl->reloc_cv);
	pthread_mutex_destroy(&cl->wave.mu);
	pthread_cond_destroy(&cl->wave.cv);
	free(cl);
}

int cleaner_start(struct coil_store *s)
{
	struct cleaner *cl = calloc(1, sizeof(*cl));
	pthread_condattr_t ca;
	struct wreq *w;
	size_t batch_cap;
	int rc;

	if (!cl)
		return -ENOMEM;
	cl->s = s;
	pthread_mutex_init(&cl->mu, NULL);
	pthread_mutex_init(&cl->wave.mu, NULL);
	pthread_cond_init(&cl->wave.cv, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cl->cv, &ca);
	pthread_cond_init(&cl->space_cv, &ca);
	pthread_cond_init(&cl->reloc_cv, &ca);
	pthread_condattr_destroy(&ca);
	thresholds(cl, s->nseg, s->sb.segment_size,
		   s->grows && s->nseg < s->seg_cap);
	/* A file keeps its freed segments' blocks: punching one would only
	 * make the next write into it allocate and convert unwritten extents
	 * again (docs/space.md).  Space goes back to the file system on
	 * request (compaction).  Block devices are told (TRIM). */
	rc = seg_discard_init(s, !s->is_blk);
	/* A record must fit a chunk with room for others. */
	cl->rec_max = COIL_MIN(256u << 10, s->chunk_cap / 2);
	w = &cl->w;
	batch_cap = CLEAN_BATCH_BYTES + COIL_ALIGN_UP(FMT_BLOB_MAX, FMT_BLOCK) +
		    FMT_BLOCK;
	w->rec_cap = cl->rec_max + FMT_EXTENT_MAX + FMT_JREC_HDR +
		     FMT_JREC_WRITE_FIXED;
	cl->gen_seen = calloc(s->seg_cap, sizeof(*cl->gen_seen));
	cl->born_ns = calloc(s->seg_cap, sizeof(*cl->born_ns));
	cl->victim = calloc(s->seg_cap, 1);
	cl->vlist = calloc(CLEAN_VICTIMS_MAX + 1, sizeof(*cl->vlist));
	if (rc == 0)
		rc = optimizer_init(&cl->opt);
	cl->scratch = malloc(FMT_BLOB_MAX);
	cl->mlog = malloc(FMT_BLOB_MAX);
	if (posix_memalign((void **)&cl->mread, 4096,
			   FMT_BLOB_MAX + 2 * FMT_BLOCK))
		cl->mread = NULL;
	cl->dctx = ZSTD_createDCtx();
	w->fb = calloc(CLEAN_BATCH_BLOBS + 1, sizeof(*w->fb));
	w->bd = calloc(CLEAN_BATCH_BLOBS + 1, sizeof(*w->bd));
	w->slot = calloc(CLEAN_BATCH_BLOBS + 1, sizeof(*w->slot));
	w->recbuf = malloc(w->rec_cap);
	w->cap_blobs = CLEAN_BATCH_BLOBS;
	if (posix_memalign((void **)&cl->seg_buf, 4096, s->sb.segment_size))
		cl->seg_buf = NULL;
	if (posix_memalign((void **)&w->batch, 4096, batch_cap))
		w->batch = NULL;
	w->batch_cap = batch_cap;
	if (rc < 0 || !cl->gen_seen || !cl->born_ns || !cl->victim || !cl->vlist ||
	    !cl->scratch || !cl->mlog || !cl->mread || !cl->dctx || !w->fb ||
	    !w->bd || !w->slot || !w->recbuf || !cl->seg_buf || !w->batch) {
		cleaner_free(cl);
		return -ENOMEM;
	}
	{
		uint64_t now = coil_now_ns();
		for (uint32_t i = 0; i < s->seg_cap; i++) {
			cl->gen_seen[i] = s->segs[i].gen;
			cl->born_ns[i] = now;
		}
	}
	s->cl = cl;
	rc = pthread_create(&cl->th, NULL, cleaner_main, cl);
	if (rc) {
		s->cl = NULL;
		cleaner_free(cl);
		return -rc;
	}
	cl->started = true;
	return 0;
}

void cleaner_stop(struct coil_store *s)
{
	struct cleaner *cl = s->cl;

	if (!cl)
		return;
	atomic_store(&cl->stopping, true);
	pthread_mutex_lock(&cl->mu);
	cl->stop = true;
	pthread_cond_broadcast(&cl->cv);
	pthread_cond_broadcast(&cl->space_cv);
	pthread_mutex_unlock(&cl->mu);
	if (cl->started)
		pthread_join(cl->th, NULL);
	/* Checkpoints (and their discards) may still run until close: keep
	 * the struct; cleaner_destroy frees it. */
}

void cleaner_destroy(struct coil_store *s)
{
	if (!s->cl)
		return;
	cleaner_stop(s);
	cleaner_free(s->cl);
	s->cl = NULL;
}

/* ---- stats ----------------------------------------------------------------- */

#define LDA(x) ((unsigned long long)atomic_load(&(x)))

int cleaner_stats_fmt(struct coil_store *s, char *buf, size_t len)
{
	struct cleaner *cl = s->cl;
	uint64_t hist[10] = { 0 }, cap = s->sb.segment_size - FMT_BLOCK;
	uint64_t dev = atomic_load(&s->st.dev_bytes_written);
	uint64_t logical = atomic_load(&s->st.write_bytes);
	static const struct cleaner zero_cl;
	const struct cleaner *c = cl ? cl : &zero_cl;
	int n;

	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++) {
		const struct seg *g = &s->segs[i];
		uint64_t b;

		if (g->state != SEG_SEALED && g->state != SEG_ACTIVE)
			continue;
		b = g->live * 10 / cap;
		hist[COIL_MIN(b, 9u)]++;
	}
	pthread_mutex_unlock(&s->mlock);
	n = snprintf(buf, len,
		"\"cleaner\":{\"running\":%s,\"reserve_segments\":%u,"
		"\"clean_below_free_segments\":%u,\"throttle_below_free_segments\":%u,"
		"\"live_fraction_histogram\":[%llu,%llu,%llu,%llu,%llu,%llu,%llu,"
		"%llu,%llu,%llu],\"passes\":%llu,\"segments_cleaned\":%llu,"
		"\"segments_freed\":%llu,\"bytes_read\":%llu,"
		"\"bytes_cleaned\":%llu,\"logical_bytes_cleaned\":%llu,"
		"\"blobs_relocated\":%llu,\"cas_installed_bytes\":%llu,"
		"\"cas_dropped_bytes\":%llu,\"verify_failures\":%llu,"
		"\"relocation_failures\":%llu,\"discards\":%llu,"
		"\"discard_bytes\":%llu,\"discard_errors\":%llu,"
		"\"throttled_writes\":%llu,\"throttle_wait_ns\":%llu,"
		"\"throttle_wait_ns_max\":%llu,\"enospc_after_wait\":%llu,"
		"\"write_amplification\":%.4f,\"device_bytes_written\":%llu,"
		"\"logical_bytes_written\":%llu,\"pick_lock_ns_last\":%llu,"
		"\"pick_lock_ns_max\":%llu}",
		cl ? "true" : "false", c->reserve, c->clean_lo, c->throttle,
		(unsigned long long)hist[0], (unsigned long long)hist[1],
		(unsigned long long)hist[2], (unsigned long long)hist[3],
		(unsigned long long)hist[4], (unsigned long long)hist[5],
		(unsigned long long)hist[6], (unsigned long long)hist[7],
		(unsigned long long)hist[8], (unsigned long long)hist[9],
		LDA(c->passes), LDA(c->segs_cleaned), LDA(c->segs_freed),
		LDA(c->bytes_read), LDA(c->bytes_relocated),
		LDA(c->logical_relocated), LDA(c->blobs_relocated),
		LDA(c->cas_installed), LDA(c->cas_dropped),
		LDA(c->verify_failures), LDA(c->reloc_failures),
		LDA(s->disc.discards), LDA(s->disc.bytes),
		LDA(s->disc.errors), LDA(c->throttled), LDA(c->throttle_ns),
		LDA(c->throttle_ns_max), LDA(c->enospc_hints),
		logical ? (double)dev / (double)logical : 0.0,
		(unsigned long long)dev, (unsigned long long)logical,
		LDA(c->pick_lock_ns_last), LDA(c->pick_lock_ns_max));
	return n < 0 ? -EIO : n;
}
