/* engine/options.c — option defaults, the compression spec, coil_strerror. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/options.h"
#include "engine/store.h"

COIL_API void coil_options_init(struct coil_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = 0; /* no maximum but the file system's (docs/space.md) */
	o->compression = "zstd:1";
	o->max_blob = 65536;
	o->cache_bytes = 64ull << 20;
	o->workers = 0;
	o->pool_mode = COIL_POOL_FAIR;
	o->prefetch = 1;
	o->sync_writes = 0;
	/* A background pass at 32 MiB/s takes under a minute per GiB
	 * stored and a small share of a disk's bandwidth; once a week
	 * finds latent damage while other copies (backups) are recent. */
	o->scrub_rate = 32ull << 20;
	o->scrub_interval = 7ull * 24 * 3600;
	o->optimize_idle = 60;
	/* Data a database is still rewriting is overwritten before the
	 * encoding pays off; half a minute without new data in a segment
	 * is past a checkpoint interval of most databases. */
	o->optimize_cold = 30;
}

/* "none" -> 0, "zstd" -> 1, "zstd:N" -> N (1..19; zstd's fast negative
 * levels are not offered: the 12.5 % rule would reject most of their
 * output). */
int engine_parse_compression(const char *spec, int *level)
{
	char *end;
	long v;

	if (!spec || !strcmp(spec, "zstd")) {
		*level = 1;
		return 0;
	}
	if (!strcmp(spec, "none")) {
		*level = 0;
		return 0;
	}
	if (strncmp(spec, "zstd:", 5) != 0 || !spec[5])
		return -EINVAL;
	errno = 0;
	v = strtol(spec + 5, &end, 10);
	if (errno || *end || v < 1 || v > 19)
		return -EINVAL;
	*level = (int)v;
	return 0;
}

COIL_API const char *coil_strerror(int err)
{
	if (err > 0)
		err = -err;
	switch (err) {
	case 0: return "success";
	case -EINVAL: return "invalid argument";
	case -ENOENT: return "no such store or object";
	case -EEXIST: return "object exists";
	case -EIO: return "I/O error or corruption (checksum mismatch)";
	case -ENOSPC: return "store is full";
	case -EBADF: return "closed or removed handle";
	case -EROFS: return "store is read-only";
	case -EBUSY: return "store or object busy (already open / handles open)";
	case -ENOMEM: return "out of memory";
	case -EFBIG: return "offset past the largest object";
	case -ENAMETOOLONG: return "object name too long";
	case -EAGAIN: return "resources busy, try again";
	case -EACCES: return "permission denied";
	case -EPERM: return "operation not permitted";
	case -ENOTDIR: return "not a directory";
	case -EISDIR: return "is a directory";
	case -ENODEV: return "no such device";
	case -ESHUTDOWN: return "store is closing";
	case -EOVERFLOW: return "value too large";
	case -ENOTSUP: return "not supported";
	case -EMEDIUMTYPE: return "not a coil store (no valid superblock)";
	case -COIL_EFEATURE: return "store needs a newer coil (unknown format version or feature)";
	case -EDEADLK: return "not allowed from a coil callback (it would wait for itself)";
	case -EMFILE: return "too many open handles or files";
	case -ENFILE: return "too many open files in the system";
	case -ENOLCK: return "cannot lock the store (a loop device's backing file not found)";
	case -ENXIO: return "no such device or address";
	case -ELOOP: return "too many symbolic links";
	case -ETXTBSY: return "file busy";
	case -EINTR: return "interrupted";
	case -ETIMEDOUT: return "timed out";
	case -EUCLEAN: return "store structure inconsistent";
	case -ESTALE: return "stale state";
	case -ENOTTY: return "not supported by this device";
	case -ENOBUFS: return "no buffer space";
	case -EFAULT: return "bad address";
	case -EALREADY: return "already in progress";
	default: {
		/* a system call's errno coil passes on: the C library's
		 * static description (never NULL for a known code) */
		const char *d = NULL;

		/* INT_MIN has no positive counterpart: not a code either way */
		if (err < 0 && err > INT_MIN)
			d = strerrordesc_np(-err);
		return d ? d : "unknown error";
	}
	}
}
