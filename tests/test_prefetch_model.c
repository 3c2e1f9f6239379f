/* test_prefetch_model.c — randomized model tests.  Thousands of random
 * operation sequences run against the pf_machine and against a plain
 * reference model of the seed's lifecycle (a state per unit and a FIFO
 * list, no hashing, no rings); every return value, the full report and the
 * observable state must agree after every step.  A second test drives the
 * readahead policy through pf_apply with random reads, writes, truncates and
 * hints and checks its invariants. */
#include <errno.h>
#include <criterion/criterion.h>

#include "prefetch/prefetch.h"

#define NOBJ 2
#define NBLOB 6
#define NU (NOBJ * NBLOB)
#define QMAX 8

enum { M_NONE, M_QUEUED, M_IN_FLIGHT, M_READY, M_FAILED };

struct model {
	uint64_t gen;
	unsigned cap, units_max;
	struct pf_work queue[QMAX];
	unsigned qlen;
	int state[NU];
	uint64_t gen_of[NU];
	int err[NU];
	uint64_t stamp[NU]; /* order of entering ready/failed: reclaim order */
	uint64_t seq;
	unsigned in_flight;
	struct pf_report r;
};

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64*: deterministic per seed, so a failure replays. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static unsigned rndn(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static struct pf_unit unit_of(unsigned u)
{
	return (struct pf_unit){ .obj_id = 100 + u / NBLOB, .blob = u % NBLOB };
}

static unsigned index_of(struct pf_unit id)
{
	return (unsigned)((id.obj_id - 100) * NBLOB + id.blob);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static unsigned tracked(const struct model *md)
{
	unsigned n = 0;

	for (unsigned u = 0; u < NU; u++)
		n += md->state[u] != M_NONE;
	return n;
}

static bool terminal(int s)
{
	return s == M_READY || s == M_FAILED;
}

/* Frees the oldest terminal unit when the table is full; false if every
 * tracked unit is pending. */
static bool model_make_room(struct model *md)
{
	if (tracked(md) < md->units_max)
		return true;

	int best = -1;

	for (unsigned u = 0; u < NU; u++)
		if (terminal(md->state[u]) &&
		    (best < 0 || md->stamp[u] < md->stamp[best]))
			best = (int)u;
	if (best < 0)
		return false;
	md->state[best] = M_NONE;
	md->r.reclaimed++;
	return true;
}

static void make_terminal(struct model *md, unsigned u, int s)
{
	md->state[u] = s;
	md->stamp[u] = ++md->seq;
}

static int model_admit(struct model *md, unsigned u, bool resident,
		       struct pf_work *out)
{
	if (md->state[u] == M_QUEUED || md->state[u] == M_IN_FLIGHT) {
		md->r.coalesced++;
		return PF_COALESCED;
	}
	if (md->state[u] == M_READY && !resident) {
		md->state[u] = M_NONE;
		md->r.evicted_before_use++;
	}
	if (resident) {
		if (md->state[u] != M_NONE || model_make_room(md))
			make_terminal(md, u, M_READY);
		md->r.coalesced++;
		return PF_COALESCED;
	}
	if (md->qlen == md->cap)
		return PF_AT_CAPACITY;
	if (md->state[u] == M_NONE && !model_make_room(md))
		return PF_AT_CAPACITY;
	md->state[u] = M_QUEUED;
	md->gen_of[u] = md->gen;
	md->queue[md->qlen++] = (struct pf_work){ unit_of(u), md->gen };
	md->r.submitted++;
	if (md->qlen > md->r.peak_queue_occupancy)
		md->r.peak_queue_occupancy = md->qlen;
	*out = md->queue[md->qlen - 1];
	return PF_ADMITTED;
}

static int model_rollback(struct model *md, const struct pf_work *w)
{
	for (unsigned i = 0; i < md->qlen; i++) {
		if (pf_unit_eq(md->queue[i].id, w->id) &&
		    md->queue[i].gen == w->gen) {
			memmove(&md->queue[i], &md->queue[i + 1],
				(md->qlen - i - 1) * sizeof(md->queue[0]));
			md->qlen--;
			md->state[index_of(w->id)] = M_NONE;
			if (md->r.submitted)
				md->r.submitted--;
			return 0;
		}
	}
	return -EINVAL;
}

static int model_begin(struct model *md, struct pf_work *out)
{
	if (md->qlen == 0)
		return 0;
	*out = md->queue[0];
	memmove(&md->queue[0], &md->queue[1],
		(md->qlen - 1) * sizeof(md->queue[0]));
	md->qlen--;
	md->state[index_of(out->id)] = M_IN_FLIGHT;
	md->in_flight++;
	md->r.started++;
	return 1;
}

static int model_begin_unit(struct model *md, unsigned u, struct pf_work *out)
{
	for (unsigned i = 0; i < md->qlen; i++) {
		if (index_of(md->queue[i].id) != u)
			continue;
		*out = md->queue[i];
		memmove(&md->queue[i], &md->queue[i + 1],
			(md->qlen - i - 1) * sizeof(md->queue[0]));
		md->qlen--;
		md->state[u] = M_IN_FLIGHT;
		md->in_flight++;
		md->r.started++;
		return 1;
	}
	return 0;
}

static int model_complete(struct model *md, const struct pf_work *w, int res)
{
	if (w->id.obj_id < 100 || w->id.obj_id >= 100 + NOBJ ||
	    w->id.blob >= NBLOB)
		return -EINVAL;

	unsigned u = index_of(w->id);

	if (md->state[u] != M_IN_FLIGHT)
		return -EINVAL;
	if (md->gen_of[u] != w->gen)
		return -ESTALE;
	md->in_flight--;
	if (w->gen != md->gen) {
		md->state[u] = M_NONE;
		md->r.cancelled++;
		return PF_DISCARDED;
	}
	if (res >= 0) {
		make_terminal(md, u, M_READY);
		md->r.completed++;
		return PF_PUBLISHED;
	}
	make_terminal(md, u, M_FAILED);
	md->err[u] = res;
	md->r.failed++;
	return PF_FAILED;
}

static int model_observe(struct model *md, unsigned u)
{
	switch (md->state[u]) {
	case M_QUEUED:
		return PF_OBS_QUEUED;
	case M_IN_FLIGHT:
		md->r.in_flight_at_demand++;
		return PF_OBS_IN_FLIGHT;
	case M_FAILED:
		return PF_OBS_FAILED;
	case M_READY:
		return PF_OBS_READY;
	}
	return PF_OBS_UNSCHEDULED;
}

static int model_resolve(struct model *md, unsigned u, uint64_t waited,
			 int *err)
{
	if (md->state[u] == M_QUEUED || md->state[u] == M_IN_FLIGHT)
		return -EBUSY;
	if (waited != PF_NOT_WAITED) {
		md->r.demand_waits++;
		md->r.demand_wait_ns = sat_add(md->r.demand_wait_ns, waited);
	}
	if (md->state[u] == M_FAILED) {
		*err = md->err[u];
		md->state[u] = M_NONE;
		return PF_RES_FAILED;
	}
	if (md->state[u] == M_READY) {
		md->state[u] = M_NONE;
		md->r.ready_before_demand++;
		return PF_RES_READY;
	}
	return PF_RES_UNSCHEDULED;
}

static int model_cancel(struct model *md)
{
	md->gen++;
	md->r.cancelled += md->qlen;
	for (unsigned i = 0; i < md->qlen; i++)
		md->state[index_of(md->queue[i].id)] = M_NONE;
	md->qlen = 0;
	return 0;
}

static int model_finish(struct model *md, struct pf_unit *id, int *err)
{
	if (md->qlen || md->in_flight)
		return -EBUSY;

	int found = 0;

	/* Units are numbered in pf_unit_cmp order, so the first failed
	 * index is the smallest unit. */
	for (unsigned u = 0; u < NU; u++) {
		if (md->state[u] == M_FAILED && !found) {
			found = 1;
			*id = unit_of(u);
			*err = md->err[u];
		}
		md->state[u] = M_NONE;
	}
	return found;
}

static void check_state(struct pf_machine *m, struct model *md,
			unsigned seq, unsigned step)
{
	struct pf_report r;

	pf_report_get(m, &r);
	cr_assert_eq(memcmp(&r, &md->r, sizeof(r)), 0,
		     "report differs, seq %u step %u", seq, step);
	cr_assert_eq(pf_queue_len(m), md->qlen, "seq %u step %u", seq, step);
	cr_assert_eq(pf_in_flight(m), md->in_flight);
	cr_assert_eq(pf_is_idle(m), md->qlen == 0 && md->in_flight == 0);
	cr_assert_eq(pf_generation(m), md->gen);
	for (unsigned u = 0; u < NU; u++)
		cr_assert_eq(pf_is_pending(m, unit_of(u)),
			     md->state[u] == M_QUEUED ||
				     md->state[u] == M_IN_FLIGHT,
			     "pending differs for unit %u, seq %u step %u", u,
			     seq, step);
}

/* Outcomes seen across all sequences: the test insists every branch of the
 * lifecycle was exercised, so a broken generator cannot pass vacuously. */
enum { H_ADMITTED, H_AT_CAP, H_ROLLBACK, H_DISCARDED, H_FAILED, H_STALE,
       H_UNKNOWN, H_BUSY, H_FINISH_FAIL, H_RES_FAILED, H_RECLAIMED,
       H_EVICTED, H_PROMOTED, H_NHITS };
static unsigned long hits[H_NHITS];

/* Works handed out by begin_next and not yet completed (some stale). */
struct outstanding {
	struct pf_work w[NU * 4];
	unsigned n;
};

static void run_sequence(unsigned seq, unsigned steps)
{
	struct pf_machine m;
	struct model md;
	struct outstanding out = { .n = 0 };
	struct pf_work admitted[64];
	unsigned nadmitted = 0;

	memset(&md, 0, sizeof(md));
	md.cap = 1 + rndn(QMAX);
	/* Half the runs have room for every unit (exactly the seed); half
	 * squeeze the table so reclaim and table backpressure happen. */
	md.units_max = rndn(2) ? NU + rndn(4)
			       : md.cap + rndn(NU - md.cap + 1);
	if (md.units_max < md.cap)
		md.units_max = md.cap;
	md.r.queue_capacity = md.cap;
	cr_assert_eq(pf_init(&m, md.cap, md.units_max), 0);

	for (unsigned step = 0; step < steps; step++) {
		unsigned op = rndn(100);
		unsigned u = rndn(NU);
		int a, b;

		if (op < 30) {
			bool res = rndn(4) == 0;
			struct pf_work w1 = { { 0, 0 }, 0 }, w2 = { { 0, 0 }, 0 };

			a = pf_admit(&m, unit_of(u), res, &w1);
			b = model_admit(&md, u, res, &w2);
			cr_assert_eq(a, b, "admit seq %u step %u", seq, step);
			hits[H_AT_CAP] += a == PF_AT_CAPACITY;
			hits[H_ADMITTED] += a == PF_ADMITTED;
			if (a == PF_ADMITTED) {
				cr_assert(pf_unit_eq(w1.id, w2.id) &&
					  w1.gen == w2.gen);
				admitted[nadmitted++ % 64] = w1;
			}
		} else if (op < 33 && nadmitted) {
			struct pf_work w = admitted[rndn(nadmitted < 64 ? nadmitted : 64)];

			if (rndn(4) == 0)
				w.gen += 1;
			a = pf_rollback_admission(&m, &w);
			b = model_rollback(&md, &w);
			cr_assert_eq(a, b, "rollback seq %u step %u", seq, step);
			hits[H_ROLLBACK] += a == 0;
		} else if (op < 53) {
			struct pf_work w1 = { { 0, 0 }, 0 }, w2 = w1;
			bool promote = rndn(5) == 0;

			a = promote ? pf_begin_unit(&m, unit_of(u), &w1)
				    : pf_begin_next(&m, &w1);
			b = promote ? model_begin_unit(&md, u, &w2)
				    : model_begin(&md, &w2);
			hits[H_PROMOTED] += promote && a == 1;
			cr_assert_eq(a, b);
			if (a == 1) {
				cr_assert(pf_unit_eq(w1.id, w2.id) &&
					  w1.gen == w2.gen,
					  "FIFO order, seq %u step %u", seq,
					  step);
				cr_assert(out.n < NU * 4);
				out.w[out.n++] = w1;
			}
		} else if (op < 73) {
			struct pf_work w;
			int res = rndn(3) == 0 ? -(int)(1 + rndn(120)) : 0;
			unsigned k = 0;
			bool real = out.n && rndn(8) != 0;

			if (real) {
				k = rndn(out.n);
				w = out.w[k];
			} else {
				w = (struct pf_work){ unit_of(u), rndn(3) };
			}
			a = pf_complete(&m, &w, res);
			b = model_complete(&md, &w, res);
			cr_assert_eq(a, b, "complete seq %u step %u", seq, step);
			hits[H_DISCARDED] += a == PF_DISCARDED;
			hits[H_FAILED] += a == PF_FAILED;
			hits[H_STALE] += a == -ESTALE;
			hits[H_UNKNOWN] += a == -EINVAL;
			if (real && a >= 0)
				out.w[k] = out.w[--out.n];
		} else if (op < 81) {
			a = pf_observe_demand(&m, unit_of(u));
			b = model_observe(&md, u);
			cr_assert_eq(a, b, "observe seq %u step %u", seq, step);
		} else if (op < 89) {
			uint64_t waited = rndn(3) ? PF_NOT_WAITED
				: rndn(8) == 0 ? UINT64_MAX - 1 : rnd() % 1000;
			int e1 = 1, e2 = 1;

			a = pf_resolve_demand(&m, unit_of(u), waited, &e1);
			b = model_resolve(&md, u, waited, &e2);
			cr_assert_eq(a, b, "resolve seq %u step %u", seq, step);
			hits[H_BUSY] += a == -EBUSY;
			hits[H_RES_FAILED] += a == PF_RES_FAILED;
			if (a == PF_RES_FAILED)
				cr_assert_eq(e1, e2);
		} else if (op < 92) {
			uint64_t ns = rnd() % 5000;

			pf_begin_backpressure(&m);
			md.r.backpressure_count++;
			pf_finish_backpressure(&m, ns);
			md.r.backpressure_ns += ns;
		} else if (op < 96) {
			a = pf_cancel_all(&m);
			b = model_cancel(&md);
			cr_assert_eq(a, b);
		} else {
			struct pf_unit i1 = { 0, 0 }, i2 = { 0, 0 };
			int e1 = 0, e2 = 0;

			a = pf_finish_cancellation(&m, &i1, &e1);
			b = model_finish(&md, &i2, &e2);
			cr_assert_eq(a, b, "finish seq %u step %u", seq, step);
			hits[H_FINISH_FAIL] += a == 1;
			if (a == 1) {
				cr_assert(pf_unit_eq(i1, i2));
				cr_assert_eq(e1, e2);
			}
		}
		check_state(&m, &md, seq, step);
	}
	/* Drain: every outstanding work completes exactly once. */
	for (unsigned k = 0; k < out.n; k++) {
		int a = pf_complete(&m, &out.w[k], 0);
		int b = model_complete(&md, &out.w[k], 0);

		cr_assert_eq(a, b);
	}
	struct pf_work w;

	while (pf_begin_next(&m, &w) == 1) {
		model_begin(&md, &w);
		cr_assert_eq(pf_complete(&m, &w, 0), model_complete(&md, &w, 0));
	}
	cr_assert(pf_is_idle(&m));
	check_state(&m, &md, seq, steps);
	hits[H_RECLAIMED] += md.r.reclaimed;
	hits[H_EVICTED] += md.r.evicted_before_use;
	pf_destroy(&m);
}

Test(prefetch_model, random_sequences_match_the_reference_lifecycle)
{
	/* 3000 sequences of 300 operations: about a million checked steps,
	 * a couple of seconds under ASan. */
	for (unsigned seq = 0; seq < 3000; seq++) {
		rng_state = 0x9e3779b97f4a7c15ull * (seq + 1);
		run_sequence(seq, 300);
	}
	for (unsigned h = 0; h < H_NHITS; h++)
		cr_assert_gt(hits[h], 0, "outcome %u never exercised", h);
}

/* ---- readahead policy under random traffic ------------------------------ */

#define BS 4096ull

static void check_advice(const struct ra_state *ra, const struct ra_advice *adv,
			 uint64_t size, uint64_t read_end)
{
	if (adv->kind == RA_NONE)
		return;
	cr_assert_gt(adv->nblobs, 0, "empty advice must be RA_NONE");
	uint64_t size_blobs = (size + BS - 1) / BS;

	cr_assert_leq(adv->first_blob + adv->nblobs, size_blobs,
		      "advice past the end of the object");
	cr_assert_leq(adv->nblobs, ra->cfg.window_max_blobs);
	if (adv->kind == RA_READAHEAD) {
		cr_assert_geq(adv->first_blob, (read_end + BS - 1) / BS,
			      "readahead behind the reader");
		cr_assert_leq(adv->first_blob + adv->nblobs,
			      (read_end + BS - 1) / BS + ra->window,
			      "readahead beyond the window");
	}
}

Test(prefetch_model, readahead_policy_holds_its_invariants_under_random_traffic)
{
	for (unsigned run = 0; run < 300; run++) {
		struct ra_config c;
		struct ra_state ra;
		struct ra_advice adv;
		struct pf_machine m;
		struct pf_work w;
		uint64_t size = (1 + rndn(64)) * BS + rndn(BS);
		uint64_t pos = 0;

		rng_state = 0x1234567ull * (run + 1);
		ra_config_init(&c, BS);
		c.window_min_blobs = 1 + rndn(3);
		c.window_max_blobs = c.window_min_blobs + rndn(16);
		c.seq_trigger = 1 + rndn(3);
		cr_assert_eq(ra_init(&ra, &c), 0);
		cr_assert_eq(pf_init(&m, 1 + rndn(8), 0), 0);
		for (unsigned step = 0; step < 400; step++) {
			unsigned op = rndn(100);
			uint64_t len = 1 + rndn(3 * BS);
			uint64_t now = step * 10ull;

			if (op < 70) {
				/* Mostly sequential, sometimes a jump. */
				if (rndn(10) == 0)
					pos = rnd() % (size + BS);
				cr_assert_eq(ra_on_read(&ra, pos, len, size, &adv), 0);
				check_advice(&ra, &adv, size, pos + len);
				pos += len;
			} else if (op < 78) {
				cr_assert_eq(ra_on_write(&ra, rnd() % (size + 1), len, &adv), 0);
				cr_assert_eq(adv.kind, RA_NONE);
				if (pos + len > size && rndn(2))
					size = pos + len;
			} else if (op < 82) {
				size = rnd() % (size + 1);
				cr_assert_eq(ra_on_truncate(&ra, size, &adv), 0);
				cr_assert_eq(adv.kind, RA_NONE);
				/* Without a cancel nothing admitted may lie
				 * past the cut. */
				cr_assert(ra.ahead_hi <= ra.ahead_lo ||
					  ra.ahead_hi <= size / BS);
			} else if (op < 86) {
				cr_assert_eq(ra_on_hint(&ra, rnd() % (size + 1),
							rnd() % (8 * BS), size,
							&adv), 0);
				check_advice(&ra, &adv, size, 0);
			} else if (op < 88) {
				cr_assert_eq(ra_on_close(&ra, &adv), 0);
				cr_assert_eq(adv.cancel, RA_CANCEL_CLOSE);
			} else {
				while (pf_begin_next(&m, &w) == 1)
					cr_assert_eq(pf_complete(&m, &w, 0),
						     PF_PUBLISHED);
				continue;
			}
			uint32_t q0 = pf_queue_len(&m);
			int rc = pf_apply(&m, &ra, 1, &adv, NULL, NULL, now);

			cr_assert_geq(rc, 0);
			if (adv.cancel != RA_CANCEL_NONE)
				cr_assert_eq(pf_queue_len(&m), (uint32_t)rc,
					     "cancel empties the queue first");
			else
				cr_assert_eq(pf_queue_len(&m), q0 + (uint32_t)rc);
			cr_assert_leq(ra.ahead_hi - ra.ahead_lo,
				      (uint64_t)c.window_max_blobs);
			cr_assert_leq(ra.window, c.window_max_blobs);
			if (ra.window)
				cr_assert_geq(ra.window, c.window_min_blobs);
		}
		struct pf_report r;

		pf_report_get(&m, &r);
		cr_assert_eq(r.submitted, r.started + pf_queue_len(&m) +
			     (r.cancelled - (r.started - r.completed -
					     pf_in_flight(&m))),
			     "every admission is begun, queued or cancelled");
		pf_destroy(&m);
	}
}
