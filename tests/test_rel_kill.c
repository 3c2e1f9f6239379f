/* test_rel_kill: kill -9 of a multi-threaded writer at random moments, on a
 * real file (docs/reliability.md, row 1).
 *
 * A forked child opens the store (recovering what the previous child left)
 * and runs three writer threads, each owning a third of the slots, writing
 * whole versions with coil_pwrite; one of them also calls coil_sync now and
 * then.  The parent kills it with SIGKILL after a random delay — a third of
 * the time within the first few milliseconds, inside open and recovery.  The
 * child records in shared memory which version of each slot it submitted
 * and which completed, so after the kill the parent checks: the store opens
 * (I4), every slot holds exactly one version (I2, I3) and no completed write
 * is lost (I1; coil's contract is stronger than the table's: a completed
 * write survives kill -9, flushed or not).  Every third cycle the parent
 * does not check, so the next child's open is itself a recovery that may be
 * killed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "tests/rel/rel.h"

#define NOBJ 3
#define NSLOTS 12
#define NTHREADS 3

struct child_thread {
	pthread_t tid;
	coil_store *s;
	coil_obj **h;
	const struct rel_layout *l;
	struct rel_track *t;
	uint64_t seed;
	uint64_t rng;
	int idx;
};

static void *child_writer(void *arg)
{
	struct child_thread *c = arg;
	uint8_t *buf = malloc(rel_layout_maxlen(c->l));
	uint32_t mine = (NSLOTS + NTHREADS - 1) / NTHREADS;

	for (uint64_t i = 0; buf; i++) {
		uint32_t slot = (uint32_t)(rel_rng(&c->rng) % mine) * NTHREADS +
				(uint32_t)c->idx;

		if (slot >= c->l->nslots)
			continue;
		if (rel_slot_write(c->h, c->l, c->t, c->seed, slot, buf) < 0)
			_exit(5);
		if (c->idx == 0 && i % 4 == 3 && rel_sync(c->s, c->l, c->t) < 0)
			_exit(6);
	}
	return NULL;
}

/* The child: open (recover), write until killed.  Never returns. */
static void child_run(const char *path, const struct coil_options *o,
		      const struct rel_layout *l, struct rel_track *t,
		      uint64_t seed, uint64_t cseed)
{
	struct child_thread th[NTHREADS];
	coil_obj *h[REL_OBJS_MAX];
	coil_store *s;
	int rc = coil_open(path, o, &s);

	if (rc < 0) {
		fprintf(stderr, "rel kill child: open: %s\n", coil_strerror(rc));
		_exit(3);
	}
	if (rel_objs_open(s, l, h) < 0)
		_exit(3);
	atomic_fetch_add(&t->opened, 1);
	for (int i = 0; i < NTHREADS; i++) {
		th[i] = (struct child_thread){ .s = s, .h = h, .l = l, .t = t,
					       .seed = seed, .idx = i,
					       .rng = rel_mix(cseed + (uint64_t)i) };
		if (pthread_create(&th[i].tid, NULL, child_writer, &th[i]))
			_exit(3);
	}
	for (;;)
		pause();
}

/* Until the child of @pid is past coil_open (or gone, or 10 s). */
static void wait_opened(struct rel_track *t, uint64_t opened0, pid_t pid)
{
	for (int i = 0; i < 50000 && atomic_load(&t->opened) == opened0; i++) {
		siginfo_t si;

		/* ended on its own? (WNOWAIT: the caller's waitpid still
		 * reaps and reports it) */
		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid != 0)
			return;
		usleep(200);
	}
}

Test(rel, kill9, .timeout = 900)
{
	uint64_t seed = rel_seed();
	uint64_t cycles = rel_scaled(152, 3), checked = 0, bad = 0;
	uint64_t early = 0, st = seed ^ 0x4b11;
	struct rel_track *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct rel_layout l;
	struct coil_options o;
	char path[256], what[96];

	cr_assert_neq(t, MAP_FAILED);
	memset((void *)t, 0, sizeof(*t));
	rel_announce("kill9", seed);
	rel_layout_make(&l, seed, NOBJ, NSLOTS);
	rel_path(path, sizeof(path), "kill9");
	rel_opts(&o, 16ull << 20);
	cr_assert_eq(rel_store_create(path, &o, &l), 0);
	o.flags &= ~COIL_CREATE;

	for (uint64_t c = 0; c < cycles; c++) {
		uint64_t r = rel_rng(&st);
		useconds_t us;
		pid_t pid;
		int wst;

		uint64_t opened0 = atomic_load(&t->opened);

		fflush(NULL);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0)
			child_run(path, &o, &l, t, seed, rel_mix(seed ^ c));
		if (rel_kill_early(r, c)) {
			/* from the fork: often inside open and recovery */
			us = (useconds_t)(r >> 8) % 4000;
			early++;
		} else {
			/* from the end of open, so a slow machine's recovery
			 * does not eat the writing time */
			us = 5000 + (useconds_t)((r >> 8) % 40000);
			wait_opened(t, opened0, pid);
		}
		usleep(us);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &wst, 0), pid);
		if (!(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL)) {
			fprintf(stderr, "rel: VIOLATION kill9 cycle %llu: child "
				"ended on its own (status 0x%x: 3 = open failed "
				"(I4), 5 = write failed, 6 = sync failed)\n",
				(unsigned long long)c,
				WIFEXITED(wst) ? WEXITSTATUS(wst) : wst);
			bad++;
		}
		/* leave every third recovery to the next child */
		if (c % 3 == 1 && c + 1 < cycles)
			continue;
		snprintf(what, sizeof(what), "kill9 cycle %llu (killed after %u us)",
			 (unsigned long long)c, (unsigned)us);
		bad += rel_verify(path, &o, &l, t, seed, REL_FLOOR_COMPLETED, what);
		checked++;
	}
	uint64_t vers = 0;
	for (uint32_t i = 0; i < l.nslots; i++)
		vers += atomic_load(&t->submitted[i]);
	/* a suite whose children never got to write would prove nothing */
	cr_assert_gt(vers, cycles, "children wrote only %llu versions",
		     (unsigned long long)vers);
	fprintf(stderr, "rel: kill9 checked=%llu killed_early=%llu "
		"versions_written=%llu\n", (unsigned long long)checked,
		(unsigned long long)early, (unsigned long long)vers);
	rel_report("kill9", "cycles", cycles, bad, seed);
	cr_assert_eq(bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)bad, (unsigned long long)seed);
	unlink(path);
	munmap((void *)t, sizeof(*t));
}
