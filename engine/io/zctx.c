/* engine/io/zctx.c — per-thread zstd contexts (zctx.h). */
#include <pthread.h>
#include <stdbool.h>

#include "engine/io/zctx.h"

struct tctx {
	pthread_once_t once;
	pthread_key_t key;
	bool ok;
};

static struct tctx cctx = { PTHREAD_ONCE_INIT, 0, false };
static struct tctx dctx = { PTHREAD_ONCE_INIT, 0, false };

static void cctx_free(void *p)
{
	ZSTD_freeCCtx(p);
}

static void dctx_free(void *p)
{
	ZSTD_freeDCtx(p);
}

static void cctx_key_make(void)
{
	cctx.ok = pthread_key_create(&cctx.key, cctx_free) == 0;
}

static void dctx_key_make(void)
{
	dctx.ok = pthread_key_create(&dctx.key, dctx_free) == 0;
}

/* This thread's context under @t, made by @make on first use. */
static void *tctx_get(struct tctx *t, void (*key_make)(void),
		      void *(*make)(void), void (*release)(void *))
{
	void *p;

	pthread_once(&t->once, key_make);
	if (!t->ok)
		return NULL;
	p = pthread_getspecific(t->key);
	if (p)
		return p;
	p = make();
	if (p && pthread_setspecific(t->key, p) != 0) {
		release(p);
		p = NULL;
	}
	return p;
}

static void *cctx_make(void)
{
	return ZSTD_createCCtx();
}

static void *dctx_make(void)
{
	return ZSTD_createDCtx();
}

ZSTD_CCtx *zctx_thread_c(void)
{
	return tctx_get(&cctx, cctx_key_make, cctx_make, cctx_free);
}

ZSTD_DCtx *zctx_thread_d(void)
{
	return tctx_get(&dctx, dctx_key_make, dctx_make, dctx_free);
}
