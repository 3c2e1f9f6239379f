/* tests/opt_seam.h — holding the optimizer's pass open for the tests of
 * its compare-and-swap: cleaner_optimize_hook stops the pass after its
 * first batch is encoded, the test changes the objects the foreground way,
 * then lets the pass go on and commit what is now stale. */
#ifndef COIL_TESTS_OPT_SEAM_H
#define COIL_TESTS_OPT_SEAM_H

#include <pthread.h>

#include "coil.h"
#include "engine/cleaner.h"

struct seam {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state;               /* 0 waiting, 1 held, 2 released */
	coil_store *s;
	struct coil_optimize_opts opts;
	int rc;
	struct coil_optimize_report rep;
	pthread_t th;
};

static inline void seam_hook(void *arg)
{
	struct seam *sm = arg;

	pthread_mutex_lock(&sm->mu);
	if (sm->state == 0) {
		sm->state = 1;
		pthread_cond_broadcast(&sm->cv);
		while (sm->state == 1)
			pthread_cond_wait(&sm->cv, &sm->mu);
	}
	pthread_mutex_unlock(&sm->mu);
}

static inline void *seam_optimize(void *arg)
{
	struct seam *sm = arg;

	sm->rc = coil_optimize(sm->s, &sm->opts, &sm->rep);
	return NULL;
}

/* Start coil_optimize(@s, @opts) on a thread of its own and return once
 * its pass is held.  @return 0, or pthread_create's error. */
static inline int seam_hold(struct seam *sm, coil_store *s,
			    const struct coil_optimize_opts *opts)
{
	int rc;

	pthread_mutex_init(&sm->mu, NULL);
	pthread_cond_init(&sm->cv, NULL);
	sm->state = 0;
	sm->s = s;
	sm->opts = *opts;
	cleaner_optimize_hook(s, seam_hook, sm);
	rc = pthread_create(&sm->th, NULL, seam_optimize, sm);
	if (rc)
		return rc;
	pthread_mutex_lock(&sm->mu);
	while (sm->state == 0)
		pthread_cond_wait(&sm->cv, &sm->mu);
	pthread_mutex_unlock(&sm->mu);
	return 0;
}

/* Let the held pass go on, wait for its call to return (its result in
 * sm->rc and sm->rep) and take the hook away. */
static inline int seam_release(struct seam *sm)
{
	int rc;

	pthread_mutex_lock(&sm->mu);
	sm->state = 2;
	pthread_cond_broadcast(&sm->cv);
	pthread_mutex_unlock(&sm->mu);
	rc = pthread_join(sm->th, NULL);
	cleaner_optimize_hook(sm->s, NULL, NULL);
	pthread_cond_destroy(&sm->cv);
	pthread_mutex_destroy(&sm->mu);
	return rc;
}

#endif
