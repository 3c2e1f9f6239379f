/* test_rel_powercut: simulated power cuts at every flush point of a scripted
 * workload, in each of the seam's three modes (docs/reliability.md,
 * row 2).
 *
 * A workload (seeded) writes whole versions of slots and syncs every few
 * writes.  A dry run first shows how many fsyncs the session issues (open's
 * checkpoint, each coil_sync, close); then the session is run again once per
 * (fsync k, mode), cutting the power when the k-th fsync is issued: the cut
 * fsync and everything after it fail, and the writes no completed fsync
 * covers are dropped, kept at random, or torn at 4 KiB.  After each cut the
 * store must open (I4) and every slot must hold exactly one version (I2, I3)
 * no older than what a successful coil_sync acknowledged (I1).  Every fourth
 * cut, the recovery itself is cut too (at a random op of the reopen), and
 * the store must still open afterwards. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "tests/rel/rel.h"
#include "uring/uring_fault.h"

#define NSLOTS 8
#define WRITES 16
#define SYNC_EVERY 2

Test(rel, powercut, .timeout = 900)
{
	static const int modes[] = { URING_CUT_DROP_ALL, URING_CUT_RANDOM,
				     URING_CUT_TORN };
	static const char *mode_name[] = { "", "drop_all", "random", "torn" };
	uint64_t seed = rel_seed();
	uint64_t workloads = rel_scaled(24, 2);
	uint64_t cuts = 0, rec_cuts = 0, bad = 0, st = seed ^ 0xc07;
	uint64_t per_mode[4] = { 0 };
	struct rel_layout l;
	struct rel_track *t = calloc(1, sizeof(*t));
	struct coil_options o;
	struct rel_session ss;
	char path[256], what[160];
	uint8_t *buf;

	rel_announce("powercut", seed);
	rel_layout_make(&l, seed, 2, NSLOTS);
	buf = malloc(rel_layout_maxlen(&l));
	rel_path(path, sizeof(path), "powercut");
	rel_opts(&o, 16ull << 20);
	cr_assert_eq(rel_store_create(path, &o, &l), 0);
	o.flags &= ~COIL_CREATE;

	for (uint64_t w = 0; w < workloads; w++) {
		uint64_t wseed = rel_mix(seed + w);
		uint64_t points;

		/* dry run: the flush points of this workload */
		rel_session_run(path, &o, &l, t, seed, wseed, WRITES,
				SYNC_EVERY, false, buf, &ss);
		cr_assert_eq(ss.open_rc, 0, "open: %s", coil_strerror(ss.open_rc));
		cr_assert_eq(ss.first_err, 0, "workload %llu without faults: %s",
			     (unsigned long long)w, coil_strerror(ss.first_err));
		cr_assert_eq(ss.close_rc, 0);
		snprintf(what, sizeof(what), "workload %llu dry run",
			 (unsigned long long)w);
		bad += rel_verify(path, &o, &l, t, seed, REL_FLOOR_COMPLETED, what);
		points = ss.fsyncs;

		/* k runs past the last fsync seen before close, into close's
		 * own, until a session finishes with no cut at all */
		for (uint64_t k = 1; k <= points + 16; k++) {
			bool any_cut = false;

			for (int m = 0; m < 3; m++) {
				struct uring_fault_spec spec;
				bool cut;

				memset(&spec, 0, sizeof(spec));
				spec.record = true;
				spec.cut_kind = URING_OP_FSYNC;
				spec.cut_nth = k;
				spec.cut_mode = modes[m];
				spec.cut_seed = rel_rng(&st);
				uring_fault_set_next(&spec);
				rel_session_run(path, &o, &l, t, seed, wseed,
						WRITES, SYNC_EVERY, false, buf, &ss);
				uring_fault_set_next(NULL);
				/* a cut inside open (its checkpoint) makes open
				 * fail, one inside close makes close fail */
				cut = ss.open_rc < 0 || ss.cut_before_close ||
				      ss.close_rc < 0;
				if (!cut)
					continue;
				any_cut = true;
				cuts++;
				per_mode[modes[m]]++;
				if (rel_rng(&st) % 4 == 0)
					rel_cut_recovery(path, &o, &st, 12, &rec_cuts);
				snprintf(what, sizeof(what),
					 "workload %llu cut at fsync %llu mode %s",
					 (unsigned long long)w,
					 (unsigned long long)k, mode_name[modes[m]]);
				/* one mode in three reopens read-write (recovery
				 * plus its checkpoint, I4 in full); the others
				 * recover in memory (read-only, cheaper) and the
				 * next session's open does it for real */
				if (m == 0 || rel_rng(&st) % 3 == 0)
					bad += rel_verify(path, &o, &l, t, seed,
							  REL_FLOOR_DURABLE, what);
				else
					bad += rel_verify_ro(path, &o, &l, t, seed,
							     REL_FLOOR_DURABLE, what);
			}
			if (!any_cut && k > points)
				break;
		}
	}
	fprintf(stderr, "rel: powercut drop_all=%llu random=%llu torn=%llu "
		"recovery_cuts=%llu workloads=%llu\n",
		(unsigned long long)per_mode[1], (unsigned long long)per_mode[2],
		(unsigned long long)per_mode[3], (unsigned long long)rec_cuts,
		(unsigned long long)workloads);
	rel_report("powercut", "cuts", cuts, bad, seed);
	cr_assert_eq(bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)bad, (unsigned long long)seed);
	/* every workload has several flush points; fewer cuts than that
	 * means the seam or the counting broke, not that coil is fine */
	cr_assert_geq(cuts, workloads * 3 * 4, "only %llu cuts happened",
		      (unsigned long long)cuts);
	unlink(path);
	free(buf);
	free(t);
}
