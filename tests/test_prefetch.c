/* test_prefetch.c — the admission state machine: one test per rule of its
 * admission contract, then the lifecycle edges coil adds (exact errors, bounded unit
 * table, deterministic failure order, cancellation fencing). */
#include <errno.h>
#include <criterion/criterion.h>

#include "prefetch/prefetch.h"

static struct pf_unit U(uint64_t blob)
{
	return (struct pf_unit){ .obj_id = 7, .blob = blob };
}

/* The seed's MockBackend: takes the oldest admitted work, records it and
 * completes it with @result. */
struct mock_backend {
	struct pf_unit executed[16];
	unsigned n;
};

static int mock_execute(struct mock_backend *b, struct pf_machine *m,
			int result)
{
	struct pf_work w;

	cr_assert_eq(pf_begin_next(m, &w), 1, "mock backend has admitted work");
	cr_assert(b->n < 16);
	b->executed[b->n++] = w.id;
	int rc = pf_complete(m, &w, result);

	cr_assert_geq(rc, 0);
	return rc;
}

static struct pf_report rep(const struct pf_machine *m)
{
	struct pf_report r;

	pf_report_get(m, &r);
	return r;
}

/* ---- seed tests --------------------------------------------------------- */

Test(prefetch_seed, mock_backend_reuses_fifo_admission_coalescing_and_exact_completion)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 2, 0), 0);
	cr_assert_eq(pf_admit(&m, U(0), false, &w), PF_ADMITTED);
	cr_assert_eq(pf_admit(&m, U(0), false, &w), PF_COALESCED);
	cr_assert_eq(pf_admit(&m, U(1), false, &w), PF_ADMITTED);
	cr_assert_eq(pf_admit(&m, U(2), false, &w), PF_AT_CAPACITY);

	struct mock_backend b = { .n = 0 };

	cr_assert_eq(mock_execute(&b, &m, 0), PF_PUBLISHED);
	cr_assert_eq(pf_admit(&m, U(2), false, &w), PF_ADMITTED);
	mock_execute(&b, &m, 0);
	mock_execute(&b, &m, 0);
	cr_assert_eq(b.n, 3);
	for (unsigned i = 0; i < 3; i++)
		cr_assert(pf_unit_eq(b.executed[i], U(i)), "FIFO order at %u", i);
	cr_assert_eq(rep(&m).submitted, 3);
	cr_assert_eq(rep(&m).coalesced, 1);
	cr_assert_eq(rep(&m).peak_queue_occupancy, 2);
	pf_destroy(&m);
}

Test(prefetch_seed, cancellation_discards_queue_but_retains_exact_in_flight_ownership)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 2, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	pf_admit(&m, U(1), false, NULL);
	cr_assert_eq(pf_begin_next(&m, &w), 1);

	cr_assert_eq(pf_cancel_all(&m), 0);
	cr_assert_not(pf_is_idle(&m));
	cr_assert_eq(pf_finish_cancellation(&m, NULL, NULL), -EBUSY);
	cr_assert_eq(pf_complete(&m, &w, 0), PF_DISCARDED);
	cr_assert(pf_is_idle(&m));
	cr_assert_eq(pf_finish_cancellation(&m, NULL, NULL), 0);
	cr_assert_eq(rep(&m).cancelled, 2);
	cr_assert_eq(rep(&m).completed, 0);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_UNSCHEDULED);
	pf_destroy(&m);
}

Test(prefetch_seed, failure_is_delivered_once_and_a_new_attempt_supersedes_it)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 1, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	cr_assert_eq(pf_begin_next(&m, &w), 1);
	cr_assert_eq(pf_complete(&m, &w, -EIO), PF_FAILED);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_FAILED);

	cr_assert_eq(pf_admit(&m, U(0), false, &w), PF_ADMITTED);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_QUEUED);
	cr_assert_eq(pf_begin_next(&m, &w), 1);
	cr_assert_eq(pf_complete(&m, &w, 0), PF_PUBLISHED);
	cr_assert_eq(pf_resolve_demand(&m, U(0), 3000000, NULL), PF_RES_READY);
	cr_assert_eq(rep(&m).failed, 1);
	cr_assert_eq(rep(&m).completed, 1);
	cr_assert_eq(rep(&m).demand_waits, 1);
	cr_assert_eq(rep(&m).demand_wait_ns, 3000000);
	pf_destroy(&m);
}

Test(prefetch_seed, rollback_and_residency_observation_preserve_admission_accounting)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 1, 0), 0);
	cr_assert_eq(pf_admit(&m, U(0), false, &w), PF_ADMITTED,
		     "missing unit should be admitted");
	cr_assert_eq(pf_rollback_admission(&m, &w), 0);
	cr_assert_eq(rep(&m).submitted, 0);
	cr_assert(pf_is_idle(&m));

	cr_assert_eq(pf_admit(&m, U(0), true, NULL), PF_COALESCED);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_READY);
	cr_assert_eq(pf_resolve_demand(&m, U(0), PF_NOT_WAITED, NULL),
		     PF_RES_READY);
	cr_assert_eq(rep(&m).ready_before_demand, 1);
	cr_assert_eq(rep(&m).demand_waits, 0);
	pf_destroy(&m);
}

Test(prefetch_seed, report_serialization_round_trip_preserves_stable_fields)
{
	struct pf_machine m;
	char buf[1024];
	struct pf_report dec;

	cr_assert_eq(pf_init(&m, 3, 0), 0);
	pf_begin_backpressure(&m);
	cr_assert_eq(rep(&m).backpressure_count, 1);
	cr_assert_eq(rep(&m).backpressure_ns, 0);
	pf_finish_backpressure(&m, 7000000);
	pf_admit(&m, U(0), false, NULL);

	struct pf_report r = rep(&m);
	int n = pf_report_to_json(&r, buf, sizeof(buf));

	cr_assert(n > 0 && (size_t)n < sizeof(buf));
	cr_assert_eq(pf_report_from_json(buf, (size_t)n, &dec), 0);
	cr_assert_eq(memcmp(&dec, &r, sizeof(r)), 0);
	cr_assert_eq(dec.queue_capacity, 3);
	cr_assert_eq(dec.backpressure_count, 1);
	cr_assert_eq(dec.backpressure_ns, 7000000);
	pf_destroy(&m);
}

/* ---- lifecycle edges ---------------------------------------------------- */

Test(prefetch, init_rejects_zero_capacity_and_bad_sizes)
{
	struct pf_machine m;

	cr_assert_eq(pf_init(&m, 0, 0), -EINVAL);
	cr_assert_eq(pf_init(&m, 4, 3), -EINVAL);
	cr_assert_eq(pf_init(&m, 1u << 25, 0), -EINVAL);
	cr_assert_eq(pf_init(NULL, 4, 0), -EINVAL);
	pf_destroy(&m); /* zeroed by the failed init: safe */
	pf_destroy(NULL);
	cr_assert_eq(pf_admit(&m, U(0), false, NULL), -EINVAL,
		     "an unsized machine refuses work instead of crashing");
}

Test(prefetch, completion_for_unknown_or_stale_work_is_an_error_not_a_crash)
{
	struct pf_machine m;
	struct pf_work w, bogus;

	cr_assert_eq(pf_init(&m, 2, 0), 0);
	bogus = (struct pf_work){ .id = U(9), .gen = 0 };
	cr_assert_eq(pf_complete(&m, &bogus, 0), -EINVAL, "never admitted");

	pf_admit(&m, U(0), false, &w);
	cr_assert_eq(pf_complete(&m, &w, 0), -EINVAL, "queued, not in flight");
	cr_assert_eq(pf_begin_next(&m, &w), 1);

	struct pf_work wrong = w;

	wrong.gen = w.gen + 5;
	cr_assert_eq(pf_complete(&m, &wrong, 0), -ESTALE);
	cr_assert_eq(pf_in_flight(&m), 1, "a bad completion changes nothing");
	cr_assert_eq(pf_complete(&m, &w, 0), PF_PUBLISHED);
	cr_assert_eq(pf_complete(&m, &w, 0), -EINVAL, "completed twice");
	cr_assert_eq(pf_rollback_admission(&m, &w), -EINVAL, "not queued");
	cr_assert_eq(rep(&m).completed, 1);
	pf_destroy(&m);
}

Test(prefetch, rollback_needs_the_exact_generation_and_keeps_fifo_order)
{
	struct pf_machine m;
	struct pf_work w0, w1, w2, got;

	cr_assert_eq(pf_init(&m, 3, 0), 0);
	pf_admit(&m, U(0), false, &w0);
	pf_admit(&m, U(1), false, &w1);
	pf_admit(&m, U(2), false, &w2);

	struct pf_work stale = w1;

	stale.gen++;
	cr_assert_eq(pf_rollback_admission(&m, &stale), -EINVAL);
	cr_assert_eq(pf_rollback_admission(&m, &w1), 0);
	cr_assert_eq(pf_queue_len(&m), 2);
	cr_assert_eq(pf_begin_next(&m, &got), 1);
	cr_assert(pf_unit_eq(got.id, U(0)));
	cr_assert_eq(pf_begin_next(&m, &got), 1);
	cr_assert(pf_unit_eq(got.id, U(2)));
	cr_assert_eq(pf_begin_next(&m, &got), 0, "queue drained");
	cr_assert_eq(rep(&m).submitted, 2);
	pf_destroy(&m);
}

Test(prefetch, capacity_backpressure_then_room_after_begin)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 4, 64), 0);
	for (uint64_t b = 0; b < 4; b++)
		cr_assert_eq(pf_admit(&m, U(b), false, NULL), PF_ADMITTED);
	cr_assert_eq(pf_admit(&m, U(4), false, NULL), PF_AT_CAPACITY);
	pf_begin_backpressure(&m);
	cr_assert_eq(pf_admit(&m, U(4), false, NULL), PF_AT_CAPACITY);
	cr_assert_eq(pf_admit(&m, U(3), false, NULL), PF_COALESCED,
		     "a duplicate coalesces even at capacity");
	/* In-flight work does not hold queue room. */
	cr_assert_eq(pf_begin_next(&m, &w), 1);
	cr_assert_eq(pf_admit(&m, U(4), false, NULL), PF_ADMITTED);
	pf_finish_backpressure(&m, 1234);
	struct pf_report r = rep(&m);

	cr_assert_eq(r.backpressure_count, 1);
	cr_assert_eq(r.backpressure_ns, 1234);
	cr_assert_eq(r.peak_queue_occupancy, 4);
	cr_assert_eq(r.submitted, 5);
	pf_destroy(&m);
}

Test(prefetch, duplicates_coalesce_in_every_owned_state)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 4, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	cr_assert_eq(pf_admit(&m, U(0), false, NULL), PF_COALESCED, "queued");
	cr_assert_eq(pf_admit(&m, U(0), true, NULL), PF_COALESCED,
		     "queued beats resident");
	pf_begin_next(&m, &w);
	cr_assert_eq(pf_admit(&m, U(0), false, NULL), PF_COALESCED, "in flight");
	pf_complete(&m, &w, 0);
	cr_assert_eq(pf_admit(&m, U(0), true, NULL), PF_COALESCED, "resident");
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_READY);
	cr_assert_eq(rep(&m).coalesced, 4);
	cr_assert_eq(rep(&m).submitted, 1);
	cr_assert_eq(rep(&m).evicted_before_use, 0);

	/* Published but gone from the cache: evicted before use, and the
	 * unit may be fetched again. */
	cr_assert_eq(pf_admit(&m, U(0), false, &w), PF_ADMITTED);
	cr_assert_eq(rep(&m).evicted_before_use, 1);
	cr_assert_eq(rep(&m).submitted, 2);
	pf_destroy(&m);
}

Test(prefetch, evicted_count_stands_even_when_readmission_meets_capacity)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 1, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	pf_begin_next(&m, &w);
	pf_complete(&m, &w, 0);
	pf_admit(&m, U(1), false, NULL); /* fills the queue */
	cr_assert_eq(pf_admit(&m, U(0), false, NULL), PF_AT_CAPACITY);
	cr_assert_eq(rep(&m).evicted_before_use, 1);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_UNSCHEDULED,
		     "the evicted result is no longer ready");
	pf_destroy(&m);
}

Test(prefetch, failure_survives_a_full_queue_and_resident_supersedes_it)
{
	struct pf_machine m;
	struct pf_work w;
	int err = 0;

	cr_assert_eq(pf_init(&m, 1, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	pf_begin_next(&m, &w);
	cr_assert_eq(pf_complete(&m, &w, -ENOSPC), PF_FAILED);
	pf_admit(&m, U(1), false, NULL);
	cr_assert_eq(pf_admit(&m, U(0), false, NULL), PF_AT_CAPACITY);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_FAILED,
		     "a refused attempt does not supersede the failure");
	cr_assert_eq(pf_admit(&m, U(0), true, NULL), PF_COALESCED);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_READY);
	cr_assert_eq(pf_resolve_demand(&m, U(0), PF_NOT_WAITED, &err),
		     PF_RES_READY);
	cr_assert_eq(err, 0);
	pf_destroy(&m);
}

Test(prefetch, demand_resolution_is_consumed_once_and_refused_while_pending)
{
	struct pf_machine m;
	struct pf_work w;
	int err = 0;

	cr_assert_eq(pf_init(&m, 2, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	cr_assert_eq(pf_resolve_demand(&m, U(0), 5, NULL), -EBUSY);
	cr_assert_eq(rep(&m).demand_waits, 0, "a refused resolve counts nothing");
	pf_begin_next(&m, &w);
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_IN_FLIGHT);
	cr_assert_eq(rep(&m).in_flight_at_demand, 1);
	cr_assert(pf_is_pending(&m, U(0)));
	cr_assert_eq(pf_resolve_demand(&m, U(0), 5, NULL), -EBUSY);
	cr_assert_eq(pf_complete(&m, &w, -EIO), PF_FAILED);
	cr_assert_not(pf_is_pending(&m, U(0)));
	cr_assert_eq(pf_resolve_demand(&m, U(0), 10, &err), PF_RES_FAILED);
	cr_assert_eq(err, -EIO);
	cr_assert_eq(pf_resolve_demand(&m, U(0), PF_NOT_WAITED, &err),
		     PF_RES_UNSCHEDULED, "delivered once");
	cr_assert_eq(pf_resolve_demand(&m, U(5), PF_NOT_WAITED, NULL),
		     PF_RES_UNSCHEDULED);
	cr_assert_eq(rep(&m).demand_waits, 1);
	cr_assert_eq(rep(&m).demand_wait_ns, 10);
	pf_destroy(&m);
}

Test(prefetch, cancellation_during_in_flight_work_fences_every_exact_operation)
{
	struct pf_machine m;
	struct pf_work a, b, c, d;

	cr_assert_eq(pf_init(&m, 4, 0), 0);
	for (uint64_t i = 0; i < 4; i++)
		pf_admit(&m, U(i), false, NULL);
	pf_begin_next(&m, &a);
	pf_begin_next(&m, &b);
	cr_assert_eq(pf_cancel_all(&m), 0);
	cr_assert_eq(pf_generation(&m), 1);
	cr_assert_eq(pf_queue_len(&m), 0, "queue dropped at once");
	cr_assert_eq(rep(&m).cancelled, 2);

	/* Re-admitting a unit still owned by fenced in-flight work coalesces
	 * (as in the seed); its stale completion is then discarded. */
	cr_assert_eq(pf_admit(&m, U(0), false, NULL), PF_COALESCED);
	cr_assert_eq(pf_admit(&m, U(2), false, &c), PF_ADMITTED);
	cr_assert_eq(c.gen, 1, "new work carries the new generation");
	cr_assert_eq(pf_complete(&m, &a, 0), PF_DISCARDED);
	cr_assert_eq(pf_finish_cancellation(&m, NULL, NULL), -EBUSY);
	cr_assert_eq(pf_complete(&m, &b, -EIO), PF_DISCARDED,
		     "a stale failure is not retained");
	cr_assert_eq(pf_observe_demand(&m, U(1)), PF_OBS_UNSCHEDULED);
	pf_begin_next(&m, &d);
	cr_assert(pf_unit_eq(d.id, U(2)));
	cr_assert_eq(pf_complete(&m, &d, 0), PF_PUBLISHED);
	cr_assert_eq(rep(&m).cancelled, 4);
	cr_assert_eq(rep(&m).completed, 1);
	cr_assert(pf_is_idle(&m));
	cr_assert_eq(pf_finish_cancellation(&m, NULL, NULL), 0);
	cr_assert_eq(pf_observe_demand(&m, U(2)), PF_OBS_UNSCHEDULED,
		     "finishing abandons published results");
	pf_destroy(&m);
}

Test(prefetch, finish_cancellation_reports_the_smallest_failed_unit_first)
{
	struct pf_machine m;
	struct pf_work w;
	struct pf_unit id;
	int err = 0;
	const uint64_t order[] = { 5, 2, 9, 3 };
	const int errs[] = { -EIO, -ENOSPC, -EIO, 0 };

	cr_assert_eq(pf_init(&m, 4, 0), 0);
	for (unsigned i = 0; i < 4; i++)
		pf_admit(&m, U(order[i]), false, NULL);
	for (unsigned i = 0; i < 4; i++) {
		pf_begin_next(&m, &w);
		pf_complete(&m, &w, errs[i]);
	}
	cr_assert_eq(pf_cancel_all(&m), 0);
	cr_assert_eq(pf_finish_cancellation(&m, &id, &err), 1);
	cr_assert(pf_unit_eq(id, U(2)));
	cr_assert_eq(err, -ENOSPC);
	cr_assert_eq(pf_finish_cancellation(&m, &id, &err), 0,
		     "the other failures were cleared");
	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(pf_observe_demand(&m, U(order[i])),
			     PF_OBS_UNSCHEDULED);

	/* Order is by object first, then blob. */
	struct pf_unit hi = { 1, 0 }, lo = { 0, 100 };

	cr_assert_lt(pf_unit_cmp(lo, hi), 0);
	cr_assert_gt(pf_unit_cmp(hi, lo), 0);
	cr_assert_eq(pf_unit_cmp(hi, hi), 0);
	pf_destroy(&m);
}

Test(prefetch, generation_exhaustion_is_an_error_and_changes_nothing)
{
	struct pf_machine m;

	cr_assert_eq(pf_init(&m, 2, 0), 0);
	pf_admit(&m, U(0), false, NULL);
	m.generation = UINT64_MAX; /* white box: 2^64 cancels take too long */
	cr_assert_eq(pf_cancel_all(&m), -EOVERFLOW);
	cr_assert_eq(pf_queue_len(&m), 1);
	cr_assert_eq(rep(&m).cancelled, 0);
	pf_destroy(&m);
}

Test(prefetch, full_unit_table_reclaims_the_oldest_terminal_result)
{
	struct pf_machine m;
	struct pf_work w;

	/* Table of 3: fill it with three published results. */
	cr_assert_eq(pf_init(&m, 1, 3), 0);
	for (uint64_t b = 0; b < 3; b++) {
		cr_assert_eq(pf_admit(&m, U(b), false, NULL), PF_ADMITTED);
		pf_begin_next(&m, &w);
		pf_complete(&m, &w, 0);
	}
	cr_assert_eq(pf_admit(&m, U(0), true, NULL), PF_COALESCED,
		     "resident confirmation refreshes unit 0");
	cr_assert_eq(pf_admit(&m, U(3), false, NULL), PF_ADMITTED);
	cr_assert_eq(rep(&m).reclaimed, 1);
	cr_assert_eq(pf_observe_demand(&m, U(1)), PF_OBS_UNSCHEDULED,
		     "unit 1 was the oldest terminal result");
	cr_assert_eq(pf_observe_demand(&m, U(0)), PF_OBS_READY);
	cr_assert_eq(pf_observe_demand(&m, U(2)), PF_OBS_READY);

	pf_begin_next(&m, &w);
	cr_assert_eq(pf_admit(&m, U(4), false, NULL), PF_ADMITTED,
		     "reclaims unit 2");
	cr_assert_eq(pf_admit(&m, U(5), false, NULL), PF_AT_CAPACITY,
		     "queue full");
	pf_begin_next(&m, &w);
	cr_assert_eq(pf_admit(&m, U(5), false, NULL), PF_ADMITTED,
		     "reclaims unit 0");
	cr_assert_eq(rep(&m).reclaimed, 3);
	pf_begin_next(&m, &w);
	/* Every slot is owned by in-flight work: the queue has room but the
	 * table does not. */
	cr_assert_eq(pf_queue_len(&m), 0);
	cr_assert_eq(pf_admit(&m, U(6), false, NULL), PF_AT_CAPACITY);
	cr_assert_eq(pf_admit(&m, U(6), true, NULL), PF_COALESCED,
		     "resident with a full table stays untracked");
	cr_assert_eq(pf_observe_demand(&m, U(6)), PF_OBS_UNSCHEDULED);
	pf_destroy(&m);
}

Test(prefetch, many_units_across_objects_round_trip_through_the_index)
{
	struct pf_machine m;
	struct pf_work w;
	const uint32_t cap = 512;

	/* Exercises probing and backward-shift deletion under churn. */
	cr_assert_eq(pf_init(&m, cap, cap), 0);
	for (unsigned round = 0; round < 8; round++) {
		for (uint32_t i = 0; i < cap; i++) {
			struct pf_unit id = { i % 3, round * 1000 + i };

			cr_assert_eq(pf_admit(&m, id, false, NULL), PF_ADMITTED);
		}
		for (uint32_t i = 0; i < cap; i++) {
			cr_assert_eq(pf_begin_next(&m, &w), 1);
			cr_assert_eq(w.id.blob, round * 1000 + i);
			cr_assert_eq(pf_complete(&m, &w, 0), PF_PUBLISHED);
		}
		for (uint32_t i = 0; i < cap; i += 2) {
			struct pf_unit id = { i % 3, round * 1000 + i };

			cr_assert_eq(pf_resolve_demand(&m, id, PF_NOT_WAITED,
						       NULL), PF_RES_READY);
		}
		for (uint32_t i = 1; i < cap; i += 2) {
			struct pf_unit id = { i % 3, round * 1000 + i };

			cr_assert_eq(pf_observe_demand(&m, id), PF_OBS_READY);
		}
	}
	cr_assert_eq(rep(&m).reclaimed, 7 * cap / 2);
	pf_destroy(&m);
}

Test(prefetch, demand_promotes_a_queued_unit_out_of_fifo_order)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 4, 0), 0);
	for (uint64_t b = 0; b < 4; b++)
		pf_admit(&m, U(b), false, NULL);
	cr_assert_eq(pf_observe_demand(&m, U(2)), PF_OBS_QUEUED);
	cr_assert_eq(pf_begin_unit(&m, U(2), &w), 1);
	cr_assert(pf_unit_eq(w.id, U(2)));
	cr_assert_eq(pf_begin_unit(&m, U(2), &w), 0, "already in flight");
	cr_assert_eq(pf_begin_unit(&m, U(9), &w), 0, "never admitted");
	cr_assert_eq(pf_observe_demand(&m, U(2)), PF_OBS_IN_FLIGHT);
	cr_assert_eq(pf_complete(&m, &w, 0), PF_PUBLISHED);
	cr_assert_eq(pf_resolve_demand(&m, U(2), 5, NULL), PF_RES_READY);

	const uint64_t rest[] = { 0, 1, 3 };

	for (unsigned i = 0; i < 3; i++) {
		cr_assert_eq(pf_begin_next(&m, &w), 1);
		cr_assert(pf_unit_eq(w.id, U(rest[i])), "the rest keep FIFO order");
	}
	cr_assert_eq(rep(&m).started, 4);
	cr_assert_eq(pf_begin_unit(NULL, U(0), &w), -EINVAL);
	pf_destroy(&m);
}

/* Demand takeover: a queued unit demand reads itself is withdrawn — gone
 * from the queue (the rest keep FIFO order), counted as cancelled so the
 * report still adds up; work in flight or published is never touched. */
Test(prefetch, demand_withdraws_a_queued_unit_it_reads_itself)
{
	struct pf_machine m;
	struct pf_work w, first;
	struct pf_report r;

	cr_assert_eq(pf_init(&m, 8, 64), 0);
	for (uint64_t b = 0; b < 4; b++)
		pf_admit(&m, U(b), false, NULL);
	cr_assert_eq(pf_begin_next(&m, &first), 1); /* unit 0 in flight */
	cr_assert_eq(pf_withdraw(&m, U(2)), 1);
	cr_assert_eq(pf_queue_len(&m), 2);
	cr_assert_eq(pf_observe_demand(&m, U(2)), PF_OBS_UNSCHEDULED);
	cr_assert_eq(pf_withdraw(&m, U(2)), 0, "already withdrawn");
	cr_assert_eq(pf_withdraw(&m, U(0)), 0, "in flight stays");
	cr_assert_eq(pf_withdraw(&m, U(9)), 0, "never admitted");
	cr_assert_eq(pf_withdraw(NULL, U(0)), -EINVAL);
	/* a withdrawn unit can be admitted again, like any unknown one */
	cr_assert_eq(pf_admit(&m, U(2), false, NULL), PF_ADMITTED);
	cr_assert_eq(pf_complete(&m, &first, 0), PF_PUBLISHED);
	cr_assert_eq(pf_withdraw(&m, U(0)), 0, "published stays");
	cr_assert_eq(pf_resolve_demand(&m, U(0), PF_NOT_WAITED, NULL),
		     PF_RES_READY);

	const uint64_t rest[] = { 1, 3, 2 };

	for (unsigned i = 0; i < 3; i++) {
		cr_assert_eq(pf_begin_next(&m, &w), 1);
		cr_assert(pf_unit_eq(w.id, U(rest[i])), "FIFO order kept");
		cr_assert_eq(pf_complete(&m, &w, 0), PF_PUBLISHED);
	}
	r = rep(&m);
	cr_assert_eq(r.cancelled, 1);
	cr_assert_eq(r.submitted, r.completed + r.failed + r.cancelled,
		     "submitted %llu completed %llu cancelled %llu",
		     (unsigned long long)r.submitted,
		     (unsigned long long)r.completed,
		     (unsigned long long)r.cancelled);
	pf_destroy(&m);
}
