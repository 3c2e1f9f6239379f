/* api_program — a program written only against include/coil.h: create a
 * store, write 100 MiB of mixed data (compressible text, random bytes,
 * zeros; large and small writes, async and sync, several objects), close,
 * reopen, and read everything back byte for byte.
 *
 *   api_program [STORE_PATH]        (default ./api_program.coil)
 *
 * Exit status 0 when every byte came back. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "coil.h"
#include "test_util.h"

#define TOTAL (100ull << 20)
#define NOBJ 4
#define PIECE (1u << 20)

static void gen(uint8_t *p, size_t n, uint64_t seed)
{
	static const char words[] = "the quick brown fox jumps over the lazy "
				    "dog while coil appends blobs to segments ";
	uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
	unsigned kind = (unsigned)(seed % 3);

	for (size_t i = 0; i < n; i++) {
		tu_xorshift(&x);
		if (kind == 0)
			p[i] = (uint8_t)words[(i + (x & 3)) % (sizeof(words) - 1)];
		else if (kind == 1)
			p[i] = (uint8_t)x;
		else
			p[i] = (i % 4096) < 1024 ? (uint8_t)x : 0;
	}
}

struct inflight {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int pending;
	int64_t err;
};

static void done_cb(void *arg, int64_t res)
{
	struct inflight *f = arg;

	pthread_mutex_lock(&f->mu);
	if (res < 0 && !f->err)
		f->err = res;
	f->pending--;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static int fail(const char *what, int64_t rc)
{
	fprintf(stderr, "api_program: %s: %s (%lld)\n", what,
		coil_strerror((int)rc), (long long)rc);
	return 1;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "api_program.coil";
	uint64_t per = TOTAL / NOBJ, size;
	struct coil_options o;
	struct inflight f = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
	coil_store *s;
	coil_obj *h[NOBJ];
	uint8_t *data = malloc(TOTAL), *rd = malloc(PIECE);
	struct statfs sf;
	char name[64];
	int64_t rc;

	if (!data || !rd)
		return fail("malloc", -ENOMEM);
	unlink(path);
	coil_options_init(&o);
	o.flags = COIL_CREATE;
	o.size = 512ull << 20;
	if (statfs(".", &sf) == 0 && sf.f_type == 0x01021994)
		o.flags |= COIL_NO_DIRECT; /* tmpfs has no O_DIRECT */
	for (uint64_t i = 0; i < TOTAL / 65536; i++)
		gen(data + i * 65536, 65536, i);

	if ((rc = coil_open(path, &o, &s)) < 0)
		return fail("coil_open(create)", rc);
	for (int i = 0; i < NOBJ; i++) {
		snprintf(name, sizeof(name), "api/object-%d", i);
		if ((rc = coil_obj_open(s, name, COIL_CREATE | COIL_EXCL, &h[i])) < 0)
			return fail("coil_obj_open", rc);
	}
	/* Objects 0 and 1: async 1 MiB writes, 16 in flight. */
	for (int i = 0; i < 2; i++) {
		for (uint64_t off = 0; off < per; off += PIECE) {
			pthread_mutex_lock(&f.mu);
			while (f.pending >= 16)
				pthread_cond_wait(&f.cv, &f.mu);
			f.pending++;
			pthread_mutex_unlock(&f.mu);
			rc = coil_write(h[i], data + i * per + off, PIECE, off,
					done_cb, &f);
			if (rc < 0)
				return fail("coil_write", rc);
		}
	}
	pthread_mutex_lock(&f.mu);
	while (f.pending)
		pthread_cond_wait(&f.cv, &f.mu);
	pthread_mutex_unlock(&f.mu);
	if (f.err)
		return fail("async write", f.err);
	/* Object 2: synchronous writes of odd sizes at odd offsets. */
	for (uint64_t off = 0; off < per;) {
		uint64_t len = 1 + (off * 7919) % 200000;
		if (len > per - off)
			len = per - off;
		if ((rc = coil_pwrite(h[2], data + 2 * per + off, len, off)) != (int64_t)len)
			return fail("coil_pwrite", rc);
		off += len;
	}
	/* Object 3: written back to front in 4 KiB pages, then synced. */
	for (uint64_t off = per; off > 0;) {
		off -= 4096;
		if ((rc = coil_pwrite(h[3], data + 3 * per + off, 4096, off)) != 4096)
			return fail("coil_pwrite 4k", rc);
	}
	if ((rc = coil_sync(s)) < 0)
		return fail("coil_sync", rc);
	for (int i = 0; i < NOBJ; i++)
		coil_obj_close(h[i]);
	if ((rc = coil_close(s)) < 0)
		return fail("coil_close", rc);

	o.flags &= ~COIL_CREATE;
	if ((rc = coil_open(path, &o, &s)) < 0)
		return fail("coil_open(reopen)", rc);
	for (int i = 0; i < NOBJ; i++) {
		snprintf(name, sizeof(name), "api/object-%d", i);
		if ((rc = coil_obj_open(s, name, 0, &h[i])) < 0)
			return fail("coil_obj_open(reopen)", rc);
		if ((rc = coil_obj_size(h[i], &size)) < 0 || size != per)
			return fail("coil_obj_size", rc < 0 ? rc : -EIO);
		for (uint64_t off = 0; off < per; off += PIECE) {
			rc = coil_pread(h[i], rd, PIECE, off);
			if (rc != PIECE)
				return fail("coil_pread", rc < 0 ? rc : -EIO);
			if (memcmp(rd, data + i * per + off, PIECE)) {
				fprintf(stderr, "api_program: object %d differs at %llu\n",
					i, (unsigned long long)off);
				return 1;
			}
		}
		coil_obj_close(h[i]);
	}
	{
		char stats[8192];
		int n = coil_stats_json(s, stats, sizeof(stats));
		if (n < 0)
			return fail("coil_stats_json", n);
	}
	if ((rc = coil_close(s)) < 0)
		return fail("coil_close(2)", rc);
	unlink(path);
	free(data);
	free(rd);
	printf("api_program: 100 MiB written, reopened, read back identical\n");
	return 0;
}
