/* tests/test_engine_clean_crash.c — crashes in the middle of
 * cleaning lose nothing and never double-count space.
 *
 *   kill9_while_cleaning  a forked child overwrites 64 KiB blocks while a
 *                         second thread forces cleaning passes; it is
 *                         killed (SIGKILL) at a random moment.  After
 *                         recovery every block holds a version between its
 *                         last completed and its last submitted write, and
 *                         the live bytes recounted from the extent maps
 *                         equal the segment table's.
 *   powercut_while_cleaning  dead space is made and synced, then a power
 *                         cut (uring fault seam: drop / keep at random /
 *                         tear unsynced writes) is armed a random number of
 *                         ops into a forced cleaning pass: segment reads,
 *                         relocation writes, REMAP records, the checkpoint,
 *                         discards.  Every synced block comes back exactly.
 * COIL_REL_SCALE scales the cycle counts (e.g. 0.3 under ASan). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/log/ckpt.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"
#include "uring/uring_fault.h"

#define BLK (64u << 10)
#define NBLK 128u /* an 8 MiB object in a 32 MiB store */

struct shared {
	volatile uint64_t submitted[NBLK];
	volatile uint64_t completed[NBLK];
	volatile uint64_t passes;
	volatile int ready;
};

static void block_fill(uint8_t *p, uint64_t blk, uint64_t ver)
{
	et_fill(p, BLK, blk * 1000003u + ver, 0);
	memcpy(p, &blk, 8);
	memcpy(p + 8, &ver, 8);
}

/* The version a block holds, or UINT64_MAX if its bytes are not exactly
 * one version's. */
static uint64_t block_version(const uint8_t *p, uint64_t blk)
{
	static __thread uint8_t want[BLK];
	uint64_t b, v;

	memcpy(&b, p, 8);
	memcpy(&v, p + 8, 8);
	if (b != blk)
		return UINT64_MAX;
	block_fill(want, blk, v);
	return memcmp(want, p, BLK) ? UINT64_MAX : v;
}

static void make_store(char *path, size_t len, const char *tag,
		       struct coil_options *o, struct shared *sh)
{
	uint8_t *buf = malloc(BLK);
	coil_store *s;
	coil_obj *h;

	et_path(path, len, tag);
	et_opts(o, path);
	o->size = 32ull << 20;
	o->compression = "none";
	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "data", COIL_CREATE, &h), 0);
	for (uint32_t b = 0; b < NBLK; b++) {
		block_fill(buf, b, 1);
		cr_assert_eq(coil_pwrite(h, buf, BLK, (uint64_t)b * BLK), BLK);
		sh->submitted[b] = sh->completed[b] = 1;
	}
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
	free(buf);
}

/* Reopen and check every block against [completed, submitted]; the state
 * found becomes the base of the next cycle. */
static void verify(const char *path, const struct coil_options *o,
		   struct shared *sh, int cycle)
{
	uint8_t *rd = malloc(BLK);
	coil_store *s;
	coil_obj *h;
	int rc = coil_open(path, o, &s);

	cr_assert_eq(rc, 0, "cycle %d: reopen: %s", cycle, coil_strerror(rc));
	cr_assert_eq(cleaner_check_live(s), 0,
		     "cycle %d: live bytes differ from a recount", cycle);
	cr_assert_eq(seg_verify_accounting(s, NULL), 0, "cycle %d", cycle);
	cr_assert_eq(coil_obj_open(s, "data", 0, &h), 0);
	for (uint32_t b = 0; b < NBLK; b++) {
		uint64_t v;

		cr_assert_eq(coil_pread(h, rd, BLK, (uint64_t)b * BLK), BLK,
			     "cycle %d block %u", cycle, b);
		v = block_version(rd, b);
		cr_assert_neq(v, UINT64_MAX, "cycle %d block %u: wrong bytes",
			      cycle, b);
		cr_assert_geq(v, sh->completed[b],
			      "cycle %d block %u: version %lu < completed %lu",
			      cycle, b, (unsigned long)v,
			      (unsigned long)sh->completed[b]);
		cr_assert_leq(v, sh->submitted[b],
			      "cycle %d block %u: version %lu from the future",
			      cycle, b, (unsigned long)v);
		sh->submitted[b] = sh->completed[b] = v;
	}
	coil_obj_close(h);
	cr_assert_eq(coil_close(s), 0);
	free(rd);
}

static uint64_t stat_relocated(coil_store *s)
{
	char *buf = malloc(1 << 16), *p;
	uint64_t v = 0;

	if (coil_stats_json(s, buf, 1 << 16) > 0 &&
	    (p = strstr(buf, "\"blobs_relocated\":")))
		v = strtoull(p + strlen("\"blobs_relocated\":"), NULL, 10);
	free(buf);
	return v;
}

struct racer {
	coil_store *s;
	struct shared *sh;
	volatile int stop;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;

	while (!r->stop) {
		if (cleaner_run_now(r->s, 2) < 0)
			break;
		r->sh->passes++;
	}
	return NULL;
}

static void child_run(const char *path, const struct coil_options *o,
		      struct shared *sh, uint64_t seed)
{
	uint8_t *buf = malloc(BLK);
	struct racer r = { 0 };
	pthread_t th;
	coil_store *s;
	coil_obj *h;

	if (coil_open(path, o, &s) < 0 || coil_obj_open(s, "data", 0, &h) < 0)
		_exit(3);
	r.s = s;
	r.sh = sh;
	if (pthread_create(&th, NULL, racer_main, &r))
		_exit(3);
	sh->ready = 1;
	for (;;) {
		uint32_t b = (uint32_t)(tu_xorshift(&seed) % NBLK);
		uint64_t v = sh->submitted[b] + 1;

		block_fill(buf, b, v);
		sh->submitted[b] = v;
		if (coil_pwrite(h, buf, BLK, (uint64_t)b * BLK) != BLK)
			_exit(5);
		sh->completed[b] = v;
	}
}

Test(engine_clean_crash, kill9_while_cleaning, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t seed = 0xc1ea11 ^ (uint64_t)time(NULL);
	int cycles = (int)(16 * tu_scale());

	cr_assert_neq(sh, MAP_FAILED);
	memset((void *)sh, 0, sizeof(*sh));
	if (cycles < 4)
		cycles = 4;
	make_store(path, sizeof(path), "cleankill", &o, sh);
	for (int c = 0; c < cycles; c++) {
		uint64_t r = tu_xorshift(&seed);
		pid_t pid;
		int st;

		sh->ready = 0;
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0)
			child_run(path, &o, sh, r | 1);
		while (!sh->ready) {
			if (waitpid(pid, &st, WNOHANG) == pid)
				cr_assert_fail("cycle %d: child exited %d", c,
					       WEXITSTATUS(st));
			usleep(1000);
		}
		usleep((useconds_t)(20000 + r % 250000));
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		cr_assert(WIFSIGNALED(st), "cycle %d: child exited %d", c,
			  WEXITSTATUS(st));
		verify(path, &o, sh, c);
	}
	cr_log_info("kill9_while_cleaning: %d cycles, %lu forced passes ran "
		    "before the kills", cycles, (unsigned long)sh->passes);
	cr_assert_gt(sh->passes, 0);
	unlink(path);
	munmap((void *)sh, sizeof(*sh));
}

Test(engine_clean_crash, powercut_while_cleaning, .timeout = 300)
{
	char path[256];
	struct coil_options o;
	struct shared *sh = calloc(1, sizeof(*sh));
	uint8_t *buf = malloc(BLK);
	uint64_t seed = 0x90c07 ^ (uint64_t)time(NULL);
	int cycles = (int)(40 * tu_scale()), in_pass = 0, relocated = 0;

	if (cycles < 8)
		cycles = 8;
	/* checkpoints are written a BLOCK at a time: cuts land between
	 * the pieces of a base too */
	ckpt_write_piece = FMT_BLOCK;
	make_store(path, sizeof(path), "cleancut", &o, sh);
	for (int c = 0; c < cycles; c++) {
		struct uring_fault_spec spec;
		uint64_t r = tu_xorshift(&seed);
		coil_store *s;
		coil_obj *h;

		cr_assert_eq(coil_open(path, &o, &s), 0);
		cr_assert_eq(coil_obj_open(s, "data", 0, &h), 0);
		/* Scatter dead space, then make it durable. */
		for (int k = 0; k < 96; k++) {
			uint32_t b = (uint32_t)(tu_xorshift(&seed) % NBLK);
			uint64_t v = sh->submitted[b] + 1;

			int64_t wr;

			block_fill(buf, b, v);
			wr = coil_pwrite(h, buf, BLK, (uint64_t)b * BLK);
			if (wr != BLK) {
				char *js = malloc(1 << 16);
				coil_stats_json(s, js, 1 << 16);
				fprintf(stderr, "%s\n", js);
				free(js);
			}
			cr_assert_eq(wr, BLK, "cycle %d write %d: %s", c, k,
				     coil_strerror((int)wr));
			sh->submitted[b] = v;
		}
		cr_assert_eq(coil_sync(s), 0);
		for (uint32_t b = 0; b < NBLK; b++)
			sh->completed[b] = sh->submitted[b];
		memset(&spec, 0, sizeof(spec));
		spec.record = true;
		spec.cut_kind = URING_FAULT_ANY;
		spec.cut_nth = 1 + r % 24;
		spec.cut_mode = (int)(1 + (r >> 20) % 3);
		spec.cut_seed = r >> 8;
		cr_assert_eq(uring_fault_arm(uring_fault_last(), &spec), 0);
		(void)cleaner_run_now(s, 1 + (uint32_t)((r >> 12) % 4));
		if (uring_fault_is_cut(uring_fault_last())) {
			in_pass++;
		} else {
			(void)uring_fault_cut(uring_fault_last(),
					      spec.cut_mode, spec.cut_seed);
		}
		relocated += stat_relocated(s) > 0;
		coil_obj_close(h);
		(void)coil_close(s);
		verify(path, &o, sh, c);
	}
	cr_log_info("powercut_while_cleaning: %d cycles, %d cut inside the "
		    "pass, %d sessions relocated blobs before the cut", cycles,
		    in_pass, relocated);
	cr_assert_gt(in_pass, cycles / 5);
	unlink(path);
	free(sh);
	free(buf);
}
