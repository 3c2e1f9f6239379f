/* test_prefetch_readahead.c — the readahead policy: sequential detection,
 * window growth and reset, cancellation signals (pattern change, overwrite,
 * truncate, close), hints, and pf_apply driving a real pf_machine (capacity
 * backpressure, residency, cancellation of in-flight readahead). */
#include <errno.h>
#include <criterion/criterion.h>

#include "prefetch/prefetch.h"

#define BS 65536ull
#define OBJ 3

static struct ra_state ra;
static struct ra_advice adv;

static void setup(void)
{
	struct ra_config c;

	ra_config_init(&c, BS);
	cr_assert_eq(ra_init(&ra, &c), 0);
}

/* One whole-blob read of blob @b of an object @size_blobs long. */
static void read_blob(uint64_t b, uint64_t size_blobs)
{
	cr_assert_eq(ra_on_read(&ra, b * BS, BS, size_blobs * BS, &adv), 0);
}

static void expect(uint8_t kind, uint64_t first, uint32_t n, uint8_t cancel)
{
	cr_assert_eq(adv.kind, kind, "kind %u want %u", adv.kind, kind);
	cr_assert_eq(adv.cancel, cancel, "cancel %u want %u", adv.cancel, cancel);
	if (kind != RA_NONE) {
		cr_assert_eq(adv.first_blob, first, "first %llu want %llu",
			     (unsigned long long)adv.first_blob,
			     (unsigned long long)first);
		cr_assert_eq(adv.nblobs, n, "n %u want %u", adv.nblobs, n);
	}
}

/* Admit the advice in full, as pf_apply would with room to spare. */
static void commit_all(void)
{
	ra_commit(&ra, &adv, adv.nblobs);
}

Test(prefetch_readahead, config_is_validated, .init = setup)
{
	struct ra_config c;
	struct ra_state r2;

	ra_config_init(&c, 0);
	cr_assert_eq(ra_init(&r2, &c), -EINVAL);
	ra_config_init(&c, BS);
	c.window_max_blobs = 0;
	cr_assert_eq(ra_init(&r2, &c), -EINVAL);
	ra_config_init(&c, BS);
	c.seq_trigger = 0;
	cr_assert_eq(ra_init(&r2, &c), -EINVAL);
	ra_config_init(&c, BS);
	c.window_max_blobs = 1u << 20;
	cr_assert_eq(ra_init(&r2, &c), -EINVAL);
	cr_assert_eq(ra_on_read(&ra, UINT64_MAX, 2, UINT64_MAX, &adv), -EINVAL,
		     "off + len overflow");
	cr_assert_eq(ra_on_read(&ra, 0, 1, 1, NULL), -EINVAL);
	cr_assert_eq(ra_on_hint(&ra, 1, UINT64_MAX, 10, &adv), -EINVAL);
	cr_assert_eq(ra_on_write(&ra, 1, UINT64_MAX, &adv), -EINVAL);
}

Test(prefetch_readahead, window_starts_small_and_doubles_to_the_maximum, .init = setup)
{
	read_blob(0, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	read_blob(1, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	/* Two reads have continued where the last ended: start at 1 blob. */
	read_blob(2, 100);
	expect(RA_READAHEAD, 3, 1, RA_CANCEL_NONE);
	commit_all();
	read_blob(3, 100);
	expect(RA_READAHEAD, 4, 2, RA_CANCEL_NONE); /* window 2 */
	commit_all();
	read_blob(4, 100);
	expect(RA_READAHEAD, 6, 3, RA_CANCEL_NONE); /* window 4: up to 9 */
	commit_all();
	read_blob(5, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);      /* 3 ahead > 4/2 */
	read_blob(6, 100);
	expect(RA_READAHEAD, 9, 6, RA_CANCEL_NONE); /* window 8: up to 15 */
	commit_all();
	cr_assert_eq(ra.window, 8);
	for (uint64_t b = 7; b < 60; b++) {
		read_blob(b, 100);
		if (adv.kind == RA_READAHEAD) {
			cr_assert_eq(adv.first_blob, ra.ahead_hi);
			cr_assert_eq(adv.first_blob + adv.nblobs, b + 1 + 8,
				     "stays a full window ahead");
			cr_assert_geq(adv.nblobs, 4, "refills in half-window batches");
			commit_all();
		}
		cr_assert_leq(ra.ahead_hi - (b + 1), 8, "never beyond the max");
		cr_assert_gt(ra.ahead_hi - (b + 1), 8 / 2 - 1,
			     "never less than half a window ahead");
	}
	cr_assert_eq(ra.window, 8);
	cr_assert_eq(ra.stats.windows_grown, 3);
}

/* refill_blobs = 1: once the window is at its maximum, every blob the
 * reader finishes is replaced by one more, so the window stays full. */
Test(prefetch_readahead, a_refill_of_one_keeps_the_window_full)
{
	struct ra_config c;

	ra_config_init(&c, BS);
	c.refill_blobs = 1;
	cr_assert_eq(ra_init(&ra, &c), 0);
	for (uint64_t b = 0; b < 8; b++) {
		read_blob(b, 100);
		if (adv.kind == RA_READAHEAD)
			commit_all();
	}
	cr_assert_eq(ra.window, 8);
	for (uint64_t b = 8; b < 60; b++) {
		read_blob(b, 100);
		expect(RA_READAHEAD, b + 8, 1, RA_CANCEL_NONE);
		commit_all();
		cr_assert_eq(ra.ahead_hi, b + 1 + 8, "a full window ahead");
	}
	/* A refill larger than the window acts as the whole window. */
	c.refill_blobs = 1000;
	cr_assert_eq(ra_init(&ra, &c), 0);
	for (uint64_t b = 0; b < 3; b++)
		read_blob(b, 100);
	expect(RA_READAHEAD, 3, 1, RA_CANCEL_NONE);
}

/* A declined advice (the caller's reader is deep enough on its own) is not
 * counted, is advised again from the reader's position at its next read,
 * and does not stop the window from growing. */
Test(prefetch_readahead, declined_advice_is_advised_again_from_the_reader, .init = setup)
{
	uint64_t advised;

	for (uint64_t b = 0; b < 4; b++) {
		read_blob(b, 100);
		if (adv.kind == RA_READAHEAD)
			commit_all();
	}
	cr_assert_eq(ra.window, 2);
	advised = ra.stats.blobs_advised;
	read_blob(4, 100);
	expect(RA_READAHEAD, 6, 3, RA_CANCEL_NONE); /* window 4: up to 9 */
	ra_decline(&ra, &adv);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra.stats.blobs_advised, advised);
	/* the reader reads on past the admitted edge by itself */
	for (uint64_t b = 5; b < 9; b++) {
		read_blob(b, 100);
		cr_assert_eq(adv.kind, RA_READAHEAD, "blob %llu",
			     (unsigned long long)b);
		cr_assert_eq(adv.first_blob, b + 1, "from the reader");
		ra_decline(&ra, &adv);
	}
	cr_assert_eq(ra.stats.blobs_advised, advised);
	/* declining did not hold the window back: it grew to the maximum */
	cr_assert_eq(ra.window, 8);
	/* shallow again: a full window from the reader, admitted */
	read_blob(9, 100);
	expect(RA_READAHEAD, 10, 8, RA_CANCEL_NONE);
	commit_all();
	cr_assert_eq(ra.ahead_hi, 18);
	cr_assert_eq(ra.stats.blobs_advised, advised + 8);
	/* a cancel in a declined advice stands; NULL and non-readahead
	 * advice are left alone */
	ra_decline(NULL, &adv);
	ra_decline(&ra, NULL);
	read_blob(50, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_PATTERN);
	ra_decline(&ra, &adv);
	expect(RA_NONE, 0, 0, RA_CANCEL_PATTERN);
}

Test(prefetch_readahead, small_reads_trigger_only_when_crossing_into_new_blobs, .init = setup)
{
	unsigned advices = 0;

	/* 4 KiB reads: sixteen per blob. */
	for (uint64_t off = 0; off < 20 * BS; off += 4096) {
		cr_assert_eq(ra_on_read(&ra, off, 4096, 1000 * BS, &adv), 0);
		if (adv.kind == RA_READAHEAD) {
			advices++;
			cr_assert_geq(adv.first_blob, (off + 4096 + BS - 1) / BS,
				      "never admits the blob being read");
			commit_all();
		}
	}
	cr_assert_eq(ra.window, 8);
	cr_assert_lt(advices, 20, "batched, not once per read");
}

Test(prefetch_readahead, random_read_cancels_and_the_next_run_restarts_at_half, .init = setup)
{
	for (uint64_t b = 0; b < 12; b++) {
		read_blob(b, 100);
		commit_all();
	}
	cr_assert_eq(ra.window, 8);
	read_blob(50, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_PATTERN);
	cr_assert_eq(ra.window, 0, "stopped");
	cr_assert_eq(ra.ahead_hi, ra.ahead_lo);
	cr_assert_eq(ra.stats.cancels[RA_CANCEL_PATTERN], 1);
	read_blob(51, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	read_blob(52, 100);
	expect(RA_READAHEAD, 53, 4, RA_CANCEL_NONE); /* shrunk: 8 -> 4 */
	commit_all();

	/* Random reads while stopped decay the restart window to the min
	 * and never advise a cancel (nothing is admitted). */
	read_blob(10, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_PATTERN);
	for (uint64_t b = 80; b > 70; b -= 3) {
		read_blob(b, 100);
		expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	}
	cr_assert_eq(ra.window_restart, 1);
	read_blob(1, 100);
	read_blob(2, 100);
	read_blob(3, 100);
	expect(RA_READAHEAD, 4, 1, RA_CANCEL_NONE);
}

Test(prefetch_readahead, forward_skip_inside_the_admitted_range_follows_the_run, .init = setup)
{
	for (uint64_t b = 0; b < 8; b++) {
		read_blob(b, 100);
		commit_all();
	}
	uint64_t hi = ra.ahead_hi;

	cr_assert_gt(hi, 10);
	read_blob(10, 100); /* skipped 8 and 9, both admitted */
	cr_assert_eq(adv.cancel, RA_CANCEL_NONE);
	cr_assert_neq(ra.window, 0);
	/* Beyond what was admitted is a pattern change. */
	read_blob(ra.ahead_hi + 5, 100);
	cr_assert_eq(adv.cancel, RA_CANCEL_PATTERN);
	/* A backwards re-read is not sequential either. */
	setup();
	for (uint64_t b = 0; b < 6; b++) {
		read_blob(b, 100);
		commit_all();
	}
	read_blob(4, 100);
	cr_assert_eq(adv.cancel, RA_CANCEL_PATTERN);
}

Test(prefetch_readahead, rereading_the_current_blob_keeps_the_run, .init = setup)
{
	/* 16 KiB reads, so the reader sits inside blobs. */
	for (uint64_t off = 0; off < 4 * BS + 16384; off += 16384) {
		cr_assert_eq(ra_on_read(&ra, off, 16384, 100 * BS, &adv), 0);
		commit_all();
	}
	uint32_t window = ra.window;
	uint64_t hi = ra.ahead_hi;

	cr_assert_gt(window, 0);
	/* seq_next = 4 * BS + 16384: re-read the page just read, and the
	 * start of the blob the reader is in. */
	cr_assert_eq(ra_on_read(&ra, 4 * BS, 16384, 100 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra_on_read(&ra, 4 * BS, 100, 100 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra.stats.rereads, 2);
	cr_assert_eq(ra.window, window);
	cr_assert_eq(ra.ahead_hi, hi);
	/* The run continues where it was. */
	cr_assert_eq(ra_on_read(&ra, 4 * BS + 16384, 16384, 100 * BS, &adv), 0);
	cr_assert_eq(adv.cancel, RA_CANCEL_NONE);
	cr_assert_eq(ra.stats.random_reads, 0);
	/* Re-reading the previous blob is a pattern change. */
	cr_assert_eq(ra_on_read(&ra, 3 * BS, 16384, 100 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_PATTERN);
}

Test(prefetch_readahead, readahead_never_passes_the_end_of_the_object, .init = setup)
{
	for (uint64_t b = 0; b < 6; b++) {
		read_blob(b, 6);
		if (adv.kind == RA_READAHEAD) {
			cr_assert_leq(adv.first_blob + adv.nblobs, 6);
			commit_all();
		}
	}
	/* A partial last blob still counts: size 5.5 blobs has 6 blobs. */
	setup();
	for (uint64_t b = 0; b < 3; b++)
		cr_assert_eq(ra_on_read(&ra, b * BS, BS, 5 * BS + 100, &adv), 0);
	expect(RA_READAHEAD, 3, 1, RA_CANCEL_NONE);
	commit_all();
	cr_assert_eq(ra_on_read(&ra, 3 * BS, BS, 5 * BS + 100, &adv), 0);
	expect(RA_READAHEAD, 4, 2, RA_CANCEL_NONE);
}

Test(prefetch_readahead, overwrite_of_the_prefetched_range_cancels_and_readmits, .init = setup)
{
	for (uint64_t b = 0; b < 5; b++) {
		read_blob(b, 100);
		commit_all();
	}
	/* Admitted: [5, 9). */
	cr_assert_eq(ra.ahead_lo, 5);
	cr_assert_eq(ra.ahead_hi, 9);
	cr_assert_eq(ra_on_write(&ra, 0, 5 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);  /* behind the reader */
	cr_assert_eq(ra_on_write(&ra, 9 * BS, BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);  /* beyond the range */
	cr_assert_eq(ra_on_write(&ra, 7 * BS + 10, 1, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_OVERWRITE);
	cr_assert_eq(ra.ahead_hi, ra.ahead_lo);
	cr_assert_neq(ra.window, 0, "the pattern survives an overwrite");
	uint32_t window = ra.window;

	read_blob(5, 100);
	cr_assert_eq(adv.kind, RA_READAHEAD);
	cr_assert_eq(adv.first_blob, 6, "re-admits from the reader");
	cr_assert_eq(ra.window, window, "a refill is not growth");
	cr_assert_eq(adv.nblobs, window);
	cr_assert_eq(ra_on_write(&ra, 0, 0, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
}

Test(prefetch_readahead, truncate_into_the_prefetched_range_cancels, .init = setup)
{
	for (uint64_t b = 0; b < 5; b++) {
		read_blob(b, 100);
		commit_all();
	}
	cr_assert_eq(ra_on_truncate(&ra, 50 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra_on_truncate(&ra, 9 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);   /* [5,9) intact */
	cr_assert_eq(ra_on_truncate(&ra, 8 * BS + 1, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_TRUNCATE); /* blob 8 lost its tail */
	cr_assert_eq(ra.stats.cancels[RA_CANCEL_TRUNCATE], 1);
	/* Nothing admitted any more: a second truncate is quiet. */
	cr_assert_eq(ra_on_truncate(&ra, 0, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
}

Test(prefetch_readahead, close_always_cancels_and_forgets_the_pattern, .init = setup)
{
	for (uint64_t b = 0; b < 5; b++) {
		read_blob(b, 100);
		commit_all();
	}
	cr_assert_eq(ra_on_close(&ra, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_CLOSE);
	cr_assert_eq(ra.window, 0);
	read_blob(5, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra.seq_count, 0, "a reopened stream starts a new run");
}

Test(prefetch_readahead, hints_cover_the_range_clipped_and_leave_the_pattern, .init = setup)
{
	cr_assert_eq(ra_on_hint(&ra, BS + 1, 2 * BS, 100 * BS, &adv), 0);
	expect(RA_HINT, 1, 3, RA_CANCEL_NONE); /* bytes touch blobs 1..3 */
	cr_assert_eq(ra_on_hint(&ra, 0, 1000 * BS, 100 * BS, &adv), 0);
	expect(RA_HINT, 0, 8, RA_CANCEL_NONE); /* window_max */
	cr_assert_eq(ra_on_hint(&ra, 98 * BS, 10 * BS, 99 * BS + 5, &adv), 0);
	expect(RA_HINT, 98, 2, RA_CANCEL_NONE); /* end of object */
	cr_assert_eq(ra_on_hint(&ra, 200 * BS, BS, 100 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra_on_hint(&ra, 0, 0, 100 * BS, &adv), 0);
	expect(RA_NONE, 0, 0, RA_CANCEL_NONE);
	cr_assert_eq(ra.seq_count, 0);
	cr_assert_eq(ra.window, 0);
	cr_assert_eq(ra.stats.hints, 5);
}

Test(prefetch_readahead, stats_count_reads_growth_and_cancels_by_reason, .init = setup)
{
	for (uint64_t b = 0; b < 8; b++) {
		read_blob(b, 100);
		commit_all();
	}
	read_blob(40, 100);
	ra_on_hint(&ra, 0, BS, 100 * BS, &adv);
	ra_on_close(&ra, &adv);
	cr_assert_eq(ra.stats.reads, 9);
	cr_assert_eq(ra.stats.sequential_reads, 7, "the first read only starts a run");
	cr_assert_eq(ra.stats.random_reads, 1);
	cr_assert_eq(ra.stats.windows_grown, 3);
	cr_assert_eq(ra.stats.hints, 1);
	cr_assert_eq(ra.stats.cancels[RA_CANCEL_PATTERN], 1);
	cr_assert_eq(ra.stats.cancels[RA_CANCEL_CLOSE], 1);
	cr_assert_eq(ra.stats.blobs_advised, 1 + 2 + 3 + 6 + 1);
}

/* ---- pf_apply against a real machine ------------------------------------ */

Test(prefetch_readahead, apply_without_a_stream_admits_a_hint_and_counts_backpressure, .init = setup)
{
	struct pf_machine m;

	cr_assert_eq(pf_init(&m, 2, 0), 0);
	cr_assert_eq(ra_on_hint(&ra, 0, 5 * BS, 100 * BS, &adv), 0);
	cr_assert_eq(pf_apply(&m, NULL, OBJ, &adv, NULL, NULL, 0), 2);
	cr_assert_eq(pf_apply(&m, NULL, OBJ, &adv, NULL, NULL, 0), 0);
	struct pf_report r;

	pf_report_get(&m, &r);
	cr_assert_eq(r.backpressure_count, 2, "no stream: every refusal counts");
	cr_assert_eq(r.coalesced, 2);
	cr_assert_eq(pf_apply(NULL, NULL, OBJ, &adv, NULL, NULL, 0), -EINVAL);
	pf_destroy(&m);
}


static struct pf_report rep(const struct pf_machine *m)
{
	struct pf_report r;

	pf_report_get(m, &r);
	return r;
}

static bool even_resident(void *arg, struct pf_unit id)
{
	(void)arg;
	return id.blob % 2 == 0;
}

Test(prefetch_readahead, apply_backpressure_defers_the_rest_and_times_it, .init = setup)
{
	struct pf_machine m;
	struct pf_work w;

	cr_assert_eq(pf_init(&m, 2, 16), 0);
	for (uint64_t b = 0; b < 3; b++) {
		read_blob(b, 100);
		cr_assert_geq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 100), 0);
	}
	read_blob(3, 100);
	expect(RA_READAHEAD, 4, 2, RA_CANCEL_NONE);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 200), 1,
		     "one slot left in a queue of two");
	cr_assert_eq(rep(&m).backpressure_count, 1);
	cr_assert_eq(ra.ahead_hi, 5, "only the admitted blob counts");
	cr_assert(ra.bp_active);

	/* Still full: the next read re-advises the deferred blob, and the
	 * window does not grow past what could be filled. */
	read_blob(4, 100);
	expect(RA_READAHEAD, 5, 2, RA_CANCEL_NONE);
	cr_assert_eq(ra.window, 2);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 300), 0);
	cr_assert_eq(rep(&m).backpressure_count, 1, "one episode, counted once");

	/* The backend drains; the next advice fits and ends the episode. */
	while (pf_begin_next(&m, &w) == 1)
		pf_complete(&m, &w, 0);
	read_blob(5, 100);
	cr_assert_eq(adv.kind, RA_READAHEAD);
	cr_assert_eq(adv.first_blob, 6);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 1300),
		     (int)adv.nblobs);
	cr_assert_not(ra.bp_active);
	cr_assert_eq(rep(&m).backpressure_ns, 1100);
	pf_destroy(&m);
}

Test(prefetch_readahead, apply_coalesces_resident_blobs_and_duplicates, .init = setup)
{
	struct pf_machine m;

	cr_assert_eq(pf_init(&m, 16, 0), 0);
	cr_assert_eq(ra_on_hint(&ra, 0, 8 * BS, 100 * BS, &adv), 0);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, even_resident, NULL, 0), 4);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, even_resident, NULL, 0), 0,
		     "a repeated hint only coalesces");
	cr_assert_eq(rep(&m).submitted, 4);
	cr_assert_eq(rep(&m).coalesced, 12);
	cr_assert_eq(pf_observe_demand(&m, (struct pf_unit){ OBJ, 2 }),
		     PF_OBS_READY);
	cr_assert_eq(pf_observe_demand(&m, (struct pf_unit){ OBJ, 3 }),
		     PF_OBS_QUEUED);
	pf_destroy(&m);
}

Test(prefetch_readahead, pattern_change_cancels_queued_and_fences_in_flight_readahead, .init = setup)
{
	struct pf_machine m;
	struct pf_work w[4];

	cr_assert_eq(pf_init(&m, 16, 0), 0);
	for (uint64_t b = 0; b < 5; b++) {
		read_blob(b, 100);
		cr_assert_geq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 0), 0);
	}
	cr_assert_eq(pf_queue_len(&m), 6); /* blobs 3..8 */
	cr_assert_eq(pf_begin_next(&m, &w[0]), 1);
	cr_assert_eq(pf_begin_next(&m, &w[1]), 1);

	read_blob(70, 100);
	expect(RA_NONE, 0, 0, RA_CANCEL_PATTERN);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 0), 0);
	cr_assert_eq(pf_queue_len(&m), 0);
	cr_assert_eq(pf_in_flight(&m), 2);
	cr_assert_eq(pf_complete(&m, &w[0], 0), PF_DISCARDED);
	cr_assert_eq(pf_complete(&m, &w[1], -EIO), PF_DISCARDED);
	cr_assert_eq(rep(&m).cancelled, 6);

	/* A new run at the new position admits under the new generation,
	 * starting from half the window the broken run reached (4). */
	read_blob(71, 100);
	read_blob(72, 100);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 0), 2);
	cr_assert_eq(pf_begin_next(&m, &w[2]), 1);
	cr_assert_eq(w[2].id.blob, 73);
	cr_assert_eq(w[2].gen, 1);

	/* Close: cancel, drain, finish. */
	cr_assert_eq(ra_on_close(&ra, &adv), 0);
	cr_assert_eq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 0), 0);
	cr_assert_eq(pf_finish_cancellation(&m, NULL, NULL), -EBUSY);
	cr_assert_eq(pf_complete(&m, &w[2], 0), PF_DISCARDED);
	cr_assert_eq(pf_finish_cancellation(&m, NULL, NULL), 0);
	cr_assert(pf_is_idle(&m));
	pf_destroy(&m);
}

/* A reader and a backend that keeps up: after the run is detected, demand
 * finds its blobs ready instead of reading them itself. */
Test(prefetch_readahead, sequential_reader_finds_blobs_ready, .init = setup)
{
	struct pf_machine m;
	struct pf_work w;
	unsigned ready = 0, unscheduled = 0;

	cr_assert_eq(pf_init(&m, 8, 32), 0);
	for (uint64_t b = 0; b < 200; b++) {
		struct pf_unit id = { OBJ, b };
		int obs = pf_observe_demand(&m, id);

		if (obs == PF_OBS_QUEUED || obs == PF_OBS_IN_FLIGHT) {
			/* Demand waits: the backend runs everything due. */
			while (pf_begin_next(&m, &w) == 1)
				pf_complete(&m, &w, 0);
		}
		int res = pf_resolve_demand(&m, id, PF_NOT_WAITED, NULL);

		ready += res == PF_RES_READY;
		unscheduled += res == PF_RES_UNSCHEDULED;
		read_blob(b, 200);
		cr_assert_geq(pf_apply(&m, &ra, OBJ, &adv, NULL, NULL, 0), 0);
		/* Backend completes one operation per demand read. */
		if (pf_begin_next(&m, &w) == 1)
			pf_complete(&m, &w, 0);
	}
	cr_assert_eq(unscheduled, 3, "only the detection reads go cold");
	cr_assert_eq(ready, 197);
	cr_assert_eq(rep(&m).ready_before_demand, 197);
	pf_destroy(&m);
}
