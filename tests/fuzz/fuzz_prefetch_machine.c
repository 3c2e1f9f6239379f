/* fuzz_prefetch_machine.c — libFuzzer target driving one pf_machine and one
 * readahead stream with operations decoded from the input.  Any sequence of
 * calls, including completions of work never begun or with forged
 * generations, must return a value from the documented set, keep the
 * accounting identities, and never crash or leak. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "common/common.h"
#include "prefetch/prefetch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct in {
	const uint8_t *p;
	size_t n;
};

static uint8_t take(struct in *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct pf_machine m;
	struct ra_state ra;
	struct ra_config c;
	struct pf_work held[32];
	unsigned nheld = 0;
	uint32_t cap = 1 + take(&in) % 16;

	if (pf_init(&m, cap, cap + take(&in) % 32) != 0)
		return 0;
	ra_config_init(&c, 4096);
	c.window_max_blobs = 1 + take(&in) % 16;
	COIL_ASSERT(ra_init(&ra, &c) == 0);

	for (unsigned step = 0; step < 4096 && in.n > 0; step++) {
		uint8_t op = take(&in) % 12;
		struct pf_unit id = { take(&in) % 3, take(&in) % 24 };
		struct ra_advice adv;
		struct pf_work w;
		int rc = 0, err;

		switch (op) {
		case 0:
			rc = pf_admit(&m, id, take(&in) & 1, &w);
			COIL_ASSERT(rc >= PF_ADMITTED && rc <= PF_AT_CAPACITY);
			break;
		case 1:
			rc = (take(&in) & 3) ? pf_begin_next(&m, &w)
					     : pf_begin_unit(&m, id, &w);
			COIL_ASSERT(rc == 0 || rc == 1);
			if (rc == 1 && nheld < 32)
				held[nheld++] = w;
			break;
		case 2: {
			int res = (take(&in) & 1) ? -EIO : 0;

			if (nheld && (take(&in) & 3)) {
				unsigned k = take(&in) % nheld;

				rc = pf_complete(&m, &held[k], res);
				if (rc >= 0)
					held[k] = held[--nheld];
			} else {
				w = (struct pf_work){ id, take(&in) % 4 };
				rc = pf_complete(&m, &w, res);
			}
			COIL_ASSERT(rc == -EINVAL || rc == -ESTALE ||
				    (rc >= PF_PUBLISHED && rc <= PF_DISCARDED));
			break;
		}
		case 3:
			rc = pf_observe_demand(&m, id);
			COIL_ASSERT(rc >= PF_OBS_QUEUED && rc <= PF_OBS_UNSCHEDULED);
			break;
		case 4:
			rc = pf_resolve_demand(&m, id, take(&in), &err);
			COIL_ASSERT(rc == -EBUSY ||
				    (rc >= PF_RES_READY && rc <= PF_RES_UNSCHEDULED));
			break;
		case 5:
			COIL_ASSERT(pf_cancel_all(&m) == 0);
			break;
		case 6: {
			bool idle = pf_is_idle(&m);

			rc = pf_finish_cancellation(&m, &id, &err);
			COIL_ASSERT(idle ? (rc == 0 || rc == 1) : rc == -EBUSY);
			break;
		}
		case 7:
			if (take(&in) & 1) {
				w = (struct pf_work){ id, take(&in) % 4 };
				rc = pf_rollback_admission(&m, &w);
				COIL_ASSERT(rc == 0 || rc == -EINVAL);
			} else {
				bool queued = pf_observe_demand(&m, id) ==
					      PF_OBS_QUEUED;

				rc = pf_withdraw(&m, id);
				COIL_ASSERT(rc == (queued ? 1 : 0));
				COIL_ASSERT(!queued || pf_observe_demand(&m, id) ==
						       PF_OBS_UNSCHEDULED);
			}
			break;
		case 8:
			COIL_ASSERT(ra_on_read(&ra, (uint64_t)take(&in) * 1024,
					       take(&in) * 64, 96 * 1024,
					       &adv) == 0);
			if (adv.kind == RA_READAHEAD && (take(&in) & 3) == 0) {
				/* the engine's deep reader: declined */
				uint64_t advised = ra.stats.blobs_advised;
				uint32_t n = adv.nblobs;
				uint8_t cancel = adv.cancel;

				ra_decline(&ra, &adv);
				COIL_ASSERT(adv.kind == RA_NONE &&
					    adv.cancel == cancel);
				COIL_ASSERT(ra.stats.blobs_advised ==
					    advised - n);
				COIL_ASSERT(ra.ahead_want >= ra.ahead_hi);
			}
			COIL_ASSERT(pf_apply(&m, &ra, id.obj_id, &adv, NULL,
					     NULL, step) >= 0);
			break;
		case 9:
			COIL_ASSERT(ra_on_write(&ra, (uint64_t)take(&in) * 1024,
						take(&in) * 64, &adv) == 0);
			COIL_ASSERT(pf_apply(&m, &ra, id.obj_id, &adv, NULL,
					     NULL, step) >= 0);
			break;
		case 10:
			COIL_ASSERT(ra_on_hint(&ra, (uint64_t)take(&in) * 1024,
					       take(&in) * 256, 96 * 1024,
					       &adv) == 0);
			COIL_ASSERT(pf_apply(&m, &ra, id.obj_id, &adv, NULL,
					     NULL, step) >= 0);
			break;
		default:
			COIL_ASSERT(ra_on_truncate(&ra, (uint64_t)take(&in) * 512,
						   &adv) == 0);
			COIL_ASSERT(pf_apply(&m, &ra, id.obj_id, &adv, NULL,
					     NULL, step) >= 0);
			break;
		}
		COIL_ASSERT(pf_queue_len(&m) <= cap);
		COIL_ASSERT(pf_queue_len(&m) + pf_in_flight(&m) <= m.units_max);

		struct pf_report r;

		pf_report_get(&m, &r);
		COIL_ASSERT(r.peak_queue_occupancy <= cap);
		COIL_ASSERT(r.started >= pf_in_flight(&m));
	}
	pf_destroy(&m);
	return 0;
}
