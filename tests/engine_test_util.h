/* tests/engine_test_util.h — helpers shared by the engine's test files. */
#ifndef COIL_TEST_ENGINE_UTIL_H
#define COIL_TEST_ENGINE_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "coil.h"
#include "tests/test_util.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

/* The file's allocated bytes (du): st_blocks, in bytes. */
static inline uint64_t et_disk_bytes(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	return (uint64_t)st.st_blocks * 512;
}

/* What the file system has allocated in [@a, @z) of a file, by FIEMAP
 * (synced first): bytes written, bytes allocated and unwritten, extents.
 * Unlike SEEK_DATA, it does not read an unwritten extent as data where the
 * page cache holds pages over it. */
struct et_fmap {
	uint64_t written, unwritten, extents;
};

/* @return 0, or -1 when the file system cannot say (tmpfs). */
static inline int et_fiemap(const char *path, uint64_t a, uint64_t z,
			    struct et_fmap *m)
{
	enum { NEXT = 256 };
	struct fiemap *fm = calloc(1, sizeof(*fm) + NEXT * sizeof(struct fiemap_extent));
	int fd = open(path, O_RDONLY), rc = 0;
	uint64_t start = a;
	bool last = false;

	cr_assert(fd >= 0 && fm);
	memset(m, 0, sizeof(*m));
	while (!last && start < z) {
		fm->fm_start = start;
		fm->fm_length = z - start;
		fm->fm_flags = FIEMAP_FLAG_SYNC;
		fm->fm_extent_count = NEXT;
		if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0) {
			rc = -1;
			break;
		}
		if (fm->fm_mapped_extents == 0)
			break;
		for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
			struct fiemap_extent *e = &fm->fm_extents[i];
			uint64_t x = e->fe_logical > a ? e->fe_logical : a;
			uint64_t y = e->fe_logical + e->fe_length;

			y = y > z ? z : y;
			if (y > x) {
				if (e->fe_flags & FIEMAP_EXTENT_UNWRITTEN)
					m->unwritten += y - x;
				else
					m->written += y - x;
				m->extents++;
			}
			start = e->fe_logical + e->fe_length;
			last = e->fe_flags & FIEMAP_EXTENT_LAST;
		}
	}
	close(fd);
	free(fm);
	return rc;
}

/* Async completions counted: counter_add before each submit, count_cb as
 * its callback, then counter_wait (all done) or counter_wait_below (a
 * window: fewer than @n in flight). */
struct counter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int pending;
	int calls;
	int errors;
};

#define COUNTER_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 }

static inline void count_cb(void *arg, int64_t res)
{
	struct counter *c = arg;

	pthread_mutex_lock(&c->mu);
	c->pending--;
	c->calls++;
	if (res < 0)
		c->errors++;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static inline void counter_wait_below(struct counter *c, int n)
{
	pthread_mutex_lock(&c->mu);
	while (c->pending >= n)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

static inline void counter_wait(struct counter *c)
{
	counter_wait_below(c, 1);
}

static inline void counter_add(struct counter *c)
{
	pthread_mutex_lock(&c->mu);
	c->pending++;
	pthread_mutex_unlock(&c->mu);
}

/* Stores live in the build dir (the tests' working directory): O_DIRECT
 * needs a real filesystem. */
static inline void et_path(char *buf, size_t len, const char *name)
{
	mkdir("engine-stores", 0755);
	snprintf(buf, len, "engine-stores/%s-%d.coil", name, (int)getpid());
	unlink(buf);
}

static inline void et_opts(struct coil_options *o, const char *path)
{
	struct statfs sf;

	coil_options_init(o);
	o->flags = COIL_CREATE;
	o->size = 64ull << 20;
	o->workers = 2;
	o->optimize_cold = 0; /* the tests optimize what they just wrote */
	if (statfs("engine-stores", &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		o->flags |= COIL_NO_DIRECT;
	(void)path;
}

/* Open the store at @path (with @create, a new one) with et_opts' options
 * and a maximum of @size bytes.  @return coil_open's. */
static inline int et_open_sized(const char *path, uint64_t size, bool create,
				coil_store **s)
{
	struct coil_options o;

	et_opts(&o, path);
	o.size = size;
	if (!create)
		o.flags &= ~COIL_CREATE;
	return coil_open(path, &o, s);
}

/* A fresh 128 MiB store at a path made from @tag, with @compression (NULL:
 * the default). */
static inline coil_store *et_open(char *path, size_t len, const char *tag,
				  const char *compression)
{
	struct coil_options o;
	coil_store *s;

	et_path(path, len, tag);
	et_opts(&o, path);
	o.size = 128ull << 20;
	if (compression)
		o.compression = compression;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	return s;
}

/* Deterministic data: half compressible text-like, half random. */
static inline void et_fill(uint8_t *p, size_t n, uint64_t seed, int mix)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < n; i++) {
		tu_xorshift(&x);
		if (mix && ((i / 8192) % 2 == 0))
			p[i] = (uint8_t)("coil engine "[(i + seed) % 12]);
		else
			p[i] = (uint8_t)x;
	}
}

/* Create the store at @path with @o (COIL_CREATE is set by et_opts), write
 * @src[0, n) into object @obj in 1 MiB writes, close it all, and clear
 * COIL_CREATE in @o for the reopen. */
static inline void et_write_closed(const char *path, struct coil_options *o,
				   const char *obj, const uint8_t *src,
				   size_t n)
{
	coil_store *s;
	coil_obj *h;

	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(coil_obj_open(s, obj, COIL_CREATE, &h), 0);
	for (size_t off = 0; off < n; off += 1u << 20) {
		size_t k = n - off < (1u << 20) ? n - off : 1u << 20;

		cr_assert_eq(coil_pwrite(h, src + off, k, off), (int64_t)k);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
}

/* The unsigned number after "key": inside the first "section" of a
 * coil_stats_json text; fails the test when either is missing. */
static inline uint64_t json_u64(const char *js, const char *section,
				const char *key)
{
	const char *p = strstr(js, section);
	char pat[96];

	cr_assert(p, "no %s in %s", section, js);
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(p, pat);
	cr_assert(p, "no %s in %s", key, js);
	return strtoull(p + strlen(pat), NULL, 10);
}

/* [@off, @off + @len) of @h reads back as @want. */
static inline void et_check_read(coil_obj *h, const uint8_t *want,
				 size_t len, uint64_t off)
{
	uint8_t *got = malloc(len ? len : 1);

	cr_assert_eq(coil_pread(h, got, len, off), (int64_t)len);
	cr_assert_eq(memcmp(got, want, len), 0, "at %lu", (unsigned long)off);
	free(got);
}

/* Object @name of @s holds exactly @n bytes, equal to @want. */
static inline void et_check_obj(coil_store *s, const char *name,
				const uint8_t *want, uint64_t n)
{
	uint8_t *rd = malloc(n ? n : 1);
	coil_obj *h;
	uint64_t size;

	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0, "open %s", name);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, n, "%s: size %llu, want %llu", name,
		     (unsigned long long)size, (unsigned long long)n);
	cr_assert_eq(coil_pread(h, rd, n, 0), (int64_t)n);
	cr_assert(memcmp(rd, want, n) == 0, "%s: content differs", name);
	cr_assert_eq(coil_obj_close(h), 0);
	free(rd);
}

/* In a forked child: @fn's operations, a sync (with @sync), then an exit
 * without a close (no checkpoint): they are in the journal only. */
static inline void et_child_run(const char *path,
				const struct coil_options *o,
				int (*fn)(coil_store *s, void *arg),
				void *arg, bool sync)
{
	pid_t pid = fork();
	int st;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		coil_store *s;

		if (coil_open(path, o, &s) != 0)
			_exit(2);
		if (fn(s, arg) != 0)
			_exit(3);
		if (sync && coil_sync(s) != 0)
			_exit(4);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

#endif
