/* engine/io/zctx.h — one zstd context of each kind per thread that encodes
 * or decodes a small blob itself (a coil_pwrite or coil_pread caller, the
 * ring thread): no lock shared between callers, unlike the store's fallback
 * contexts.  Freed when the thread exits. */
#ifndef COIL_ENGINE_ZCTX_H
#define COIL_ENGINE_ZCTX_H

#include <zstd.h>

/* NULL when no context could be made (the caller falls back). */
ZSTD_CCtx *zctx_thread_c(void);
ZSTD_DCtx *zctx_thread_d(void);

#endif
