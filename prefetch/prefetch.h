/* prefetch/prefetch.h — bounded prefetch admission state machine and the
 * readahead policy that feeds it.
 *
 * Readahead in coil is never fire-and-forget.  Every prefetch passes through a
 * pf_machine, which is the sole owner of FIFO ordering, bounded admission,
 * duplicate coalescing, exact operation generations, cancellation fencing,
 * failure retention and lifecycle telemetry.  The backend (engine/) owns the
 * I/O, buffers and the decoded-blob cache; it only asks this module what to
 * fetch next and tells it what happened.
 *
 * THREADS: none of its own, and no locking.  Every pf_* and ra_* call on one
 * machine / stream must be serialized by the caller (the engine holds the
 * owning object's lock around them).  PURE: no I/O, no clocks (durations and
 * "now" are passed in), no allocation except in pf_init().
 *
 * Intended use: one pf_machine and one ra_state per open object stream
 * (coil_obj), so a pattern change on one stream cancels only that stream's
 * readahead.  docs/prefetch.md has the lifecycle diagram and the policy.
 *
 * Errors are negative errnos:
 *   -EINVAL    bad argument, or a completion/rollback for work the machine
 *              does not own (not in flight / not queued)
 *   -ESTALE    completion whose generation differs from the in-flight one
 *   -EBUSY     resolve_demand on pending work; finish_cancellation while
 *              in-flight work is still owned
 *   -EOVERFLOW the cancellation generation cannot advance
 *   -ENOMEM    pf_init could not allocate its tables
 */
#ifndef COIL_PREFETCH_H
#define COIL_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------
 * Units and work
 */

/* A logical prefetch unit: chunk @blob (offset / blob_bytes, see ra_config)
 * of object @obj_id.  The engine maps it to whichever stored blobs cover that
 * range.  Small value type: compare with pf_unit_eq / pf_unit_cmp. */
struct pf_unit {
	uint64_t obj_id;
	uint64_t blob;
};

static inline bool pf_unit_eq(struct pf_unit a, struct pf_unit b)
{
	return a.obj_id == b.obj_id && a.blob == b.blob;
}

/* Total order (obj_id, then blob): the "deterministic order" in which
 * pf_finish_cancellation reports the first retained failure. */
static inline int pf_unit_cmp(struct pf_unit a, struct pf_unit b)
{
	if (a.obj_id != b.obj_id)
		return a.obj_id < b.obj_id ? -1 : 1;
	if (a.blob != b.blob)
		return a.blob < b.blob ? -1 : 1;
	return 0;
}

/* One exact logical operation: the unit and the cancellation generation it
 * was admitted in.  The backend carries it from pf_begin_next to
 * pf_complete unchanged. */
struct pf_work {
	struct pf_unit id;
	uint64_t gen;
};

/* pf_admit results (>= 0; errors are negative). */
enum pf_admit {
	PF_ADMITTED = 0,    /* new work queued; *out holds it */
	PF_COALESCED = 1,   /* queued, in flight, or resident already */
	PF_AT_CAPACITY = 2, /* bounded queue (or unit table) full: back off */
};

/* pf_complete results. */
enum pf_completion {
	PF_PUBLISHED = 0,   /* success: ready for demand */
	PF_FAILED = 1,      /* failure retained for demand */
	PF_DISCARDED = 2,   /* cancelled: this exact completion is stale */
};

/* pf_observe_demand results. */
enum pf_observation {
	PF_OBS_QUEUED = 0,      /* admitted, not yet begun: demand waits */
	PF_OBS_IN_FLIGHT = 1,   /* backend I/O in flight: demand waits */
	PF_OBS_READY = 2,       /* a published prefetch is ready to consume */
	PF_OBS_FAILED = 3,      /* a backend failure is retained */
	PF_OBS_UNSCHEDULED = 4, /* nothing owns it: demand reads it itself */
};

static inline bool pf_observation_is_pending(int obs)
{
	return obs == PF_OBS_QUEUED || obs == PF_OBS_IN_FLIGHT;
}

/* pf_resolve_demand results. */
enum pf_resolution {
	PF_RES_READY = 0,       /* background result consumed */
	PF_RES_FAILED = 1,      /* *err_out holds the retained -errno */
	PF_RES_UNSCHEDULED = 2, /* demand performs the work directly */
};

/* Pass as waited_ns to pf_resolve_demand when demand did not wait. */
#define PF_NOT_WAITED UINT64_MAX

/* ---------------------------------------------------------------------------
 * Report: every counter of the admission contract (durations in ns), plus
 * `reclaimed`.
 */
struct pf_report {
	uint64_t submitted;            /* admitted for background execution */
	uint64_t coalesced;            /* duplicates / resident folded in */
	uint64_t started;              /* handed to the backend (begin_next) */
	uint64_t completed;            /* published successfully */
	uint64_t cancelled;            /* queued or in-flight work discarded
					* (pf_cancel_all, pf_withdraw) */
	uint64_t failed;               /* failures retained for demand */
	uint64_t queue_capacity;       /* bound on admitted, unbegun work */
	uint64_t peak_queue_occupancy; /* largest observed queue length */
	uint64_t backpressure_count;   /* admissions that met full capacity */
	uint64_t backpressure_ns;      /* time until backpressure resolved */
	uint64_t demand_waits;         /* demands that waited for work */
	uint64_t demand_wait_ns;       /* time demand spent waiting */
	uint64_t ready_before_demand;  /* prefetches consumed by demand */
	uint64_t in_flight_at_demand;  /* prefetches in flight when demanded */
	uint64_t evicted_before_use;   /* published, then evicted unused */
	uint64_t reclaimed;            /* terminal results forgotten to keep
					* the unit table bounded (coil only) */
};

/* Writes @r as one JSON object into @buf (NUL-terminated, truncated to
 * @len).  @return the length the full text needs, excluding the NUL, like
 * snprintf; -EINVAL on NULL @r. */
int pf_report_to_json(const struct pf_report *r, char *buf, size_t len);

/* Parses the object pf_report_to_json wrote (whitespace-tolerant, any key
 * order, unknown keys ignored; every known key required exactly once).
 * Lossless: from_json(to_json(r)) == r.  @return 0, or -EINVAL on malformed
 * text, a missing/duplicate key, or a number that does not fit uint64. */
int pf_report_from_json(const char *json, size_t len, struct pf_report *out);

/* Adds @r into @sum (saturating) for a store-wide view of many streams:
 * counters and durations add; queue_capacity and peak take the maximum. */
void pf_report_merge(struct pf_report *sum, const struct pf_report *r);

/* ---------------------------------------------------------------------------
 * The admission state machine.  Fields are private; embed the struct and use
 * the functions.
 */
struct pf_slot;

struct pf_machine {
	uint64_t generation;
	uint32_t queue_capacity;
	uint32_t units_max;
	/* FIFO ring of slot indices: admitted, not yet begun */
	uint32_t *queue;
	uint32_t queue_head;
	uint32_t queue_len;
	/* unit table: one slot per tracked unit, a free list, a hash index */
	struct pf_slot *slots;
	uint32_t free_head;
	uint32_t used;
	uint32_t *index;
	uint32_t index_mask;
	/* terminal (ready/failed) slots, oldest first: the reclaim order */
	uint32_t term_head;
	uint32_t term_tail;
	uint32_t in_flight;
	uint64_t term_seq;
	struct pf_report report;
};

/* Sizes the machine once.  @queue_capacity (nonzero) bounds admitted work
 * awaiting pf_begin_next.  @units_max bounds every unit the machine tracks at
 * once (queued + in flight + ready + failed); 0 picks 4 * queue_capacity.
 * When the table is full, admitting a new unit forgets the oldest terminal
 * (ready/failed) unit (report.reclaimed); if none is terminal the admission
 * is PF_AT_CAPACITY.  With units_max large enough never to fill, behaviour is
 * exactly the unbounded contract's.  @return 0, -EINVAL (zero capacity, units_max <
 * queue_capacity, or sizes above 1 << 24), -ENOMEM. */
int pf_init(struct pf_machine *m, uint32_t queue_capacity, uint32_t units_max);

/* Releases the tables.  Accepts NULL and an uninitialised-by-pf_init zeroed
 * struct.  Work still in flight is simply forgotten. */
void pf_destroy(struct pf_machine *m);

/* Admits a missing unit, coalesces existing work, or reports backpressure.
 * @resident: the backend's view of its own cache for @id.  A published
 * result that is no longer resident counts as evicted_before_use and may be
 * admitted again.  A new attempt supersedes a retained failure.
 * On PF_ADMITTED, *@out (may be NULL) is the exact work.
 * Does not count backpressure: call pf_begin_backpressure when a submitter
 * first meets PF_AT_CAPACITY.  @return enum pf_admit, or -EINVAL. */
int pf_admit(struct pf_machine *m, struct pf_unit id, bool resident,
	     struct pf_work *out);

/* Rolls back one admitted, still-queued operation (e.g. the backend could
 * not be notified); submitted is decremented.  @return 0, or -EINVAL if @w
 * (id and generation) is not queued. */
int pf_rollback_admission(struct pf_machine *m, const struct pf_work *w);

/* Moves the oldest admitted operation to in flight.  @return 1 with *@out
 * filled, 0 when nothing is queued, -EINVAL on NULL. */
int pf_begin_next(struct pf_machine *m, struct pf_work *out);

/* Demand promotion: moves @id from the queue to in flight out of FIFO
 * order, so demand that finds its unit PF_OBS_QUEUED can issue the read
 * itself instead of waiting behind the dispatcher (which may be out of
 * buffers held by ready readahead that only this reader will consume).
 * Counted as started; complete it with pf_complete as usual.
 * @return 1 with *@out filled, 0 if @id is not queued, -EINVAL on NULL. */
int pf_begin_unit(struct pf_machine *m, struct pf_unit id,
		  struct pf_work *out);

/* Demand takeover: the demand read of @id will read the unit itself (it
 * found it queued and the backend had no slot to promote it), so the queued
 * operation is dropped, counted as cancelled.  Without this the dispatcher
 * would fetch the unit again after demand had it: the same bytes read
 * twice, and a published result nobody consumes.
 * @return 1 if @id was queued and is gone, 0 if it was not queued (in
 * flight or terminal work is never touched), -EINVAL on NULL. */
int pf_withdraw(struct pf_machine *m, struct pf_unit id);

/* Applies one exact backend completion.  @result: >= 0 success, < 0 the
 * backend's -errno (retained for demand).  @return enum pf_completion;
 * -EINVAL if @w's unit is not in flight, -ESTALE if the in-flight operation
 * has another generation (state unchanged in both cases). */
int pf_complete(struct pf_machine *m, const struct pf_work *w, int result);

/* Observes who owns @id when demand first arrives (counts
 * in_flight_at_demand).  @return enum pf_observation, or -EINVAL. */
int pf_observe_demand(struct pf_machine *m, struct pf_unit id);

/* Whether queued or in-flight work still owns @id. */
bool pf_is_pending(const struct pf_machine *m, struct pf_unit id);

/* Consumes the terminal result for one demand acquisition, once.
 * @waited_ns: how long demand waited, or PF_NOT_WAITED.  On PF_RES_FAILED,
 * *@err_out (may be NULL) is the retained -errno.  @return enum
 * pf_resolution; -EBUSY if work is still pending for @id (nothing counted). */
int pf_resolve_demand(struct pf_machine *m, struct pf_unit id,
		      uint64_t waited_ns, int *err_out);

/* Backpressure telemetry: count one submitter meeting full capacity, then
 * add how long it waited once it resolved. */
void pf_begin_backpressure(struct pf_machine *m);
void pf_finish_backpressure(struct pf_machine *m, uint64_t waited_ns);

/* Bumps the generation, drops every queued operation at once (counted as
 * cancelled) and fences in-flight work: its completion is PF_DISCARDED.
 * Ready/failed results stay until pf_finish_cancellation.
 * @return 0, or -EOVERFLOW (generation exhausted; nothing changed). */
int pf_cancel_all(struct pf_machine *m);

/* Finishes a cancellation once pf_is_idle(): forgets published results and
 * retained failures.  @return 1 with the first retained failure in
 * pf_unit_cmp order in *@id_out / *@err_out (either may be NULL), 0 if none
 * was retained, -EBUSY while in-flight work is still owned. */
int pf_finish_cancellation(struct pf_machine *m, struct pf_unit *id_out,
			   int *err_out);

/* No queued and no in-flight work. */
bool pf_is_idle(const struct pf_machine *m);

uint64_t pf_generation(const struct pf_machine *m);
uint32_t pf_queue_len(const struct pf_machine *m);
uint32_t pf_in_flight(const struct pf_machine *m);

/* Snapshot of the telemetry. */
void pf_report_get(const struct pf_machine *m, struct pf_report *out);

/* ---------------------------------------------------------------------------
 * Readahead policy: one ra_state per open object stream.  It only advises;
 * pf_apply() turns advice into admissions on the stream's pf_machine.
 */
struct ra_config {
	uint64_t blob_bytes;       /* size of a pf_unit chunk (max_blob) */
	uint32_t window_min_blobs; /* first window once sequential (1) */
	uint32_t window_max_blobs; /* doubling stops here (8) */
	uint32_t seq_trigger;      /* continuing reads before readahead (2) */
	uint32_t refill_blobs;     /* top the window up once this many blobs
				    * of it were consumed; 0 = half the
				    * window (0) */
};

/* Defaults for @blob_bytes chunks: window 1 doubling to 8 blobs (with 64 KiB
 * blobs: 64 KiB -> 512 KiB, cf. RocksDB's 8 KiB -> 256 KiB), trigger 2. */
void ra_config_init(struct ra_config *c, uint64_t blob_bytes);

enum ra_kind {
	RA_NONE = 0,      /* nothing to admit */
	RA_READAHEAD = 1, /* admit [first_blob, +nblobs) ahead of the reader */
	RA_HINT = 2,      /* explicit coil_prefetch range */
};

enum ra_cancel_reason {
	RA_CANCEL_NONE = 0,
	RA_CANCEL_PATTERN = 1,   /* sequential run broken by a random read */
	RA_CANCEL_OVERWRITE = 2, /* write overlapped the prefetched range */
	RA_CANCEL_TRUNCATE = 3,  /* truncate cut into the prefetched range */
	RA_CANCEL_CLOSE = 4,     /* stream closing */
};

/* What the caller should do.  If cancel != RA_CANCEL_NONE, pf_cancel_all
 * first; then admit [first_blob, first_blob + nblobs). */
struct ra_advice {
	uint8_t kind;   /* enum ra_kind */
	uint8_t cancel; /* enum ra_cancel_reason */
	uint32_t nblobs;
	uint64_t first_blob;
};

struct ra_stats {
	uint64_t reads;
	uint64_t sequential_reads;
	uint64_t random_reads;
	uint64_t rereads;    /* re-reads inside the current blob: ignored */
	uint64_t windows_grown;
	uint64_t blobs_advised;
	uint64_t hints;
	uint64_t cancels[5]; /* by enum ra_cancel_reason */
};

struct ra_state {
	struct ra_config cfg;
	uint64_t seq_next;   /* byte where the current run would continue */
	uint32_t seq_count;  /* consecutive continuing reads */
	uint32_t window;     /* current window in blobs; 0 = inactive */
	uint32_t window_restart; /* window for the next run (shrinks) */
	uint64_t ahead_lo;   /* admitted readahead range [lo, hi) in blobs */
	uint64_t ahead_hi;
	uint64_t ahead_want; /* end of the last advised range */
	uint64_t bp_since_ns; /* when backpressure began, if bp_active */
	bool bp_active;
	struct ra_stats stats;
};

/* @return 0, or -EINVAL (blob_bytes 0, min 0, max < min, max > 65536,
 * trigger 0 or > 1024). */
int ra_init(struct ra_state *ra, const struct ra_config *c);

/* Forgets the access pattern (no cancel advised; the caller decides). */
void ra_reset(struct ra_state *ra);

/* A demand read of [off, off+len) on an object of @obj_size bytes.  Fills
 * *@adv.  @return 0, or -EINVAL (NULL, off+len overflows). */
int ra_on_read(struct ra_state *ra, uint64_t off, uint64_t len,
	       uint64_t obj_size, struct ra_advice *adv);

/* An explicit coil_prefetch(off, len) hint: the blobs covering the range,
 * clipped to the object and to window_max_blobs; the pattern is untouched.
 * @return 0, or -EINVAL. */
int ra_on_hint(struct ra_state *ra, uint64_t off, uint64_t len,
	       uint64_t obj_size, struct ra_advice *adv);

/* Signals that may cancel: a write of [off, off+len), a truncate to @size,
 * a close.  Fill *@adv (kind RA_NONE, cancel set when needed).
 * @return 0, or -EINVAL. */
int ra_on_write(struct ra_state *ra, uint64_t off, uint64_t len,
		struct ra_advice *adv);
int ra_on_truncate(struct ra_state *ra, uint64_t size, struct ra_advice *adv);
int ra_on_close(struct ra_state *ra, struct ra_advice *adv);

/* Records that the first @done blobs of a RA_READAHEAD advice were admitted
 * or coalesced (the rest met capacity and will be advised again).
 * pf_apply calls it; call it yourself only if you admit by hand. */
void ra_commit(struct ra_state *ra, const struct ra_advice *adv,
	       uint32_t done);

/* The caller will not carry out @adv, a RA_READAHEAD advice ra_on_read just
 * gave (its reader already keeps that much in flight itself): the blobs are
 * not counted as advised, and the window does not take them for a shortfall
 * (it grows again as if they had been admitted).  The run is still followed,
 * so the next read advises from the reader's position.  *@adv becomes
 * RA_NONE; a cancel in it stands. */
void ra_decline(struct ra_state *ra, struct ra_advice *adv);

/* The backend's residency check for one unit (its decoded-blob cache). */
typedef bool (*pf_resident_fn)(void *arg, struct pf_unit id);

/* Carries out @adv for object @obj_id: pf_cancel_all when advised, then
 * pf_admit each blob in order until PF_AT_CAPACITY, then ra_commit.  The
 * first refusal of an episode counts backpressure; its duration is added
 * when a later advice admits in full or a cancel empties the queue (with
 * @ra NULL, e.g. a hint with no stream, every refusal counts and no
 * duration is kept).  @resident may be NULL (nothing resident).  @now_ns:
 * the caller's clock (coil_now_ns()).  The caller then drains work with
 * pf_begin_next.  @return blobs newly admitted (>= 0), or -errno. */
int pf_apply(struct pf_machine *m, struct ra_state *ra, uint64_t obj_id,
	     const struct ra_advice *adv, pf_resident_fn resident, void *arg,
	     uint64_t now_ns);

#endif
