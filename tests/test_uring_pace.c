/* tests/test_uring_pace.c — read pacing: the ring sends a turn's reads to
 * the kernel batched or one by one, whichever its measurements find
 * completes more reads a second.  rd_pace_turn is driven here by a model
 * device whose rate depends on the pacing, on a clock of the test's own:
 * - one by one faster (beyond the margin): the probe picks it, and a later
 *   probe goes back to batched when the device changes;
 * - one by one faster only within the margin: batched stays;
 * - turns that never issue two reads (queue depth 1) never probe;
 * - a load that stops in the middle of a probe keeps the pacing it had. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>

#include "uring/uring_internal.h"

#define TURN_NS 100000ull /* a turn every 100 us */

/* Run @p for @ns of model time: each turn completes reads at
 * @rate[mode] reads a second and issues a wave of @wave reads. */
static void drive(struct rd_pace *p, uint64_t *now, uint64_t ns,
		  const double rate[2], unsigned wave)
{
	double carry = 0;

	for (uint64_t end = *now + ns; *now < end; *now += TURN_NS) {
		double r = rate[p->mode] * (double)TURN_NS / 1e9 + carry;
		uint64_t reads = (uint64_t)r;

		carry = r - (double)reads;
		rd_pace_turn(p, *now, reads, wave >= 2);
	}
}

Test(uring_pace, one_by_one_when_measured_faster_and_back)
{
	struct rd_pace p = { 0 };
	uint64_t now = 1000;
	const double single_faster[2] = { [RD_BATCH] = 50000,
					  [RD_SINGLE] = 60000 };
	const double batch_faster[2] = { [RD_BATCH] = 100000,
					 [RD_SINGLE] = 65000 };

	cr_assert_eq(p.mode, RD_BATCH, "batched until measured");
	drive(&p, &now, RD_PERIOD_NS / 2, single_faster, 22);
	cr_assert_eq(p.probes, 1);
	cr_assert_eq(p.mode, RD_SINGLE, "the probe measured one by one faster");
	cr_assert_eq(p.switches, 1);
	/* settled for a period, then measured again on a changed device */
	drive(&p, &now, RD_PERIOD_NS, batch_faster, 22);
	cr_assert_eq(p.probes, 2);
	cr_assert_eq(p.mode, RD_BATCH);
	cr_assert_eq(p.switches, 2);
	/* and it stays there while the device does not change */
	drive(&p, &now, 3 * RD_PERIOD_NS, batch_faster, 22);
	cr_assert_geq(p.probes, 4);
	cr_assert_eq(p.mode, RD_BATCH);
	cr_assert_eq(p.switches, 2);
}

Test(uring_pace, within_the_margin_stays_batched)
{
	struct rd_pace p = { 0 };
	uint64_t now = 1000;
	const double close[2] = { [RD_BATCH] = 100000, [RD_SINGLE] = 103000 };

	drive(&p, &now, 3 * RD_PERIOD_NS, close, 22);
	cr_assert_geq(p.probes, 2);
	cr_assert_eq(p.mode, RD_BATCH);
	cr_assert_eq(p.switches, 0);
}

Test(uring_pace, single_reads_never_probe)
{
	struct rd_pace p = { 0 };
	uint64_t now = 1000;
	const double qd1[2] = { [RD_BATCH] = 8000, [RD_SINGLE] = 30000 };

	drive(&p, &now, 3 * RD_PERIOD_NS, qd1, 1);
	cr_assert_eq(p.probes, 0);
	cr_assert_eq(p.phase, 0);
	cr_assert_eq(p.mode, RD_BATCH);
}

Test(uring_pace, a_load_that_stops_mid_probe_keeps_the_pacing)
{
	struct rd_pace p = { 0 };
	uint64_t now = 1000;
	const double single_faster[2] = { [RD_BATCH] = 50000,
					  [RD_SINGLE] = 80000 };

	drive(&p, &now, RD_PERIOD_NS / 2, single_faster, 22);
	cr_assert_eq(p.mode, RD_SINGLE);
	/* the next probe starts (within a period and an epoch), then the
	 * waves stop in its first epoch */
	for (uint64_t i = 0; p.phase == 0 && i < 2 * RD_PERIOD_NS / TURN_NS; i++)
		drive(&p, &now, TURN_NS, single_faster, 22);
	cr_assert_eq(p.phase, 1, "a probe is under way");
	drive(&p, &now, 2 * RD_EPOCH_NS, single_faster, 1);
	cr_assert_eq(p.phase, 0, "abandoned");
	cr_assert_eq(p.mode, RD_SINGLE, "the pacing it had");
	cr_assert_eq(p.probes, 1);
}
