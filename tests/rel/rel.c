/* tests/rel/rel.c — data generator, slot model and checks of the
 * reliability suite.  See rel.h. */
#include "tests/rel/rel.h"
#include "uring/uring_fault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include "tests/test_util.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

uint64_t rel_mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

uint64_t rel_rng(uint64_t *state)
{
	*state += 0x9E3779B97F4A7C15ull;
	return rel_mix(*state);
}

bool rel_kill_early(uint64_t r, uint64_t cycle)
{
	return cycle > 0 && r % 3 == 0;
}

uint64_t rel_seed(void)
{
	static uint64_t seed;
	static bool done;
	const char *e;

	if (done)
		return seed;
	e = getenv("COIL_REL_SEED");
	if (e && *e) {
		seed = strtoull(e, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = rel_mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
			       (uint64_t)getpid());
	}
	done = true;
	return seed;
}

double rel_scale(void)
{
	return tu_scale();
}

uint64_t rel_scaled(uint64_t base, uint64_t min)
{
	return tu_scaled(base, min);
}

void rel_announce(const char *test, uint64_t seed)
{
	fprintf(stderr,
		"rel: %s seed=0x%016llx scale=%g  replay: COIL_REL_SEED=0x%016llx "
		"COIL_REL_SCALE=%g <test binary> --filter '*/%s'\n",
		test, (unsigned long long)seed, rel_scale(),
		(unsigned long long)seed, rel_scale(), test);
}

void rel_report(const char *row, const char *unit, uint64_t count,
		uint64_t violations, uint64_t seed)
{
	char line[256];

	snprintf(line, sizeof(line), "rel: %s %s=%llu violations=%llu seed=0x%016llx\n",
		 row, unit, (unsigned long long)count,
		 (unsigned long long)violations, (unsigned long long)seed);
	fputs(line, stderr);
}

/* ---- data ---- */

static const char text[] =
	"coil keeps every byte checksummed; a flushed write survives power "
	"loss and nothing ever reads back wrong. ";

void rel_fill(uint8_t *p, size_t len, uint64_t seed, uint32_t key,
	      uint64_t ver)
{
	uint64_t base = rel_mix(seed ^ rel_mix(((uint64_t)key << 44) ^ ver));
	unsigned mode = (unsigned)(base % 3);

	for (size_t s = 0; s * 4096 < len; s++) {
		uint8_t *q = p + s * 4096;
		size_t n = len - s * 4096 < 4096 ? len - s * 4096 : 4096;
		uint64_t x = rel_mix(base + s), h[2];
		bool rnd = mode == 0 || (mode == 2 && (s & 1));
		size_t i = 0;

		/* Every sector names its key, version and index, so a stale or
		 * misplaced sector can never pass for the right one. */
		h[0] = ((uint64_t)key << 44) | ver;
		h[1] = base ^ s;
		if (n >= 16) {
			memcpy(q, h, 16);
			i = 16;
		}
		if (rnd) {
			for (; i + 8 <= n; i += 8) {
				tu_xorshift(&x);
				memcpy(q + i, &x, 8);
			}
			for (; i < n; i++)
				q[i] = (uint8_t)(x >> (8 * (i & 7)));
		} else {
			for (; i < n; i++)
				q[i] = (uint8_t)text[(i + base + ver) % (sizeof(text) - 1)];
			if (n >= 64)
				memcpy(q + 32, &x, 8); /* a little entropy */
		}
	}
}

uint64_t rel_ident(const uint8_t *p, size_t len, uint64_t seed, uint32_t key,
		   uint8_t *scratch)
{
	uint64_t w0, ver;
	size_t i;

	for (i = 0; i < len && p[i] == 0; i++)
		;
	if (i == len)
		return REL_ABSENT;
	if (len < 16)
		return REL_WRONG;
	memcpy(&w0, p, 8);
	if ((w0 >> 44) != key)
		return REL_WRONG;
	ver = w0 & ((1ull << 44) - 1);
	if (ver == 0)
		return REL_WRONG;
	rel_fill(scratch, len, seed, key, ver);
	return memcmp(scratch, p, len) ? REL_WRONG : ver;
}

/* ---- stores ---- */

void rel_path(char *buf, size_t len, const char *tag)
{
	mkdir("rel-stores", 0755);
	snprintf(buf, len, "rel-stores/%s-%d.coil", tag, (int)getpid());
	unlink(buf);
}

void rel_opts(struct coil_options *o, uint64_t size)
{
	struct statfs sf;

	coil_options_init(o);
	o->flags = COIL_CREATE;
	o->size = size;
	o->workers = 2;
	o->cache_bytes = 4u << 20;
	o->optimize_cold = 0; /* the tests optimize what they just wrote */
	/* COIL_REL_PREFETCH=0 turns readahead off: narrows a failure down */
	if (getenv("COIL_REL_PREFETCH"))
		o->prefetch = (unsigned)atoi(getenv("COIL_REL_PREFETCH"));
	mkdir("rel-stores", 0755);
	if (statfs("rel-stores", &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		o->flags |= COIL_NO_DIRECT;
}

/* ---- slots ---- */

void rel_layout_make(struct rel_layout *l, uint64_t seed, uint32_t nobj,
		     uint32_t nslots)
{
	/* one sector, unaligned, exactly one blob, a blob plus change, up to
	 * four blobs: each path of the write splitter */
	static const uint32_t sizes[] = { 512, 4096, 5000, 20000, 65536,
					  70000, 131072, 200000 };
	uint64_t st = seed ^ 0x51075;
	uint64_t end[REL_OBJS_MAX] = { 0 };

	if (nobj > REL_OBJS_MAX)
		nobj = REL_OBJS_MAX;
	if (nslots > REL_SLOTS_MAX)
		nslots = REL_SLOTS_MAX;
	memset(l, 0, sizeof(*l));
	l->nobj = nobj;
	l->nslots = nslots;
	for (uint32_t i = 0; i < nslots; i++) {
		uint64_t r = rel_rng(&st);
		struct rel_slot *sl = &l->slot[i];

		sl->obj = i % nobj;
		sl->len = sizes[r % (sizeof(sizes) / sizeof(sizes[0]))];
		/* sometimes a gap (a hole that must read as zeros) */
		sl->off = end[sl->obj] + ((r >> 8) % 4 == 0 ? 3000 : 0);
		end[sl->obj] = sl->off + sl->len;
	}
}

uint32_t rel_layout_maxlen(const struct rel_layout *l)
{
	uint32_t m = 0;

	for (uint32_t i = 0; i < l->nslots; i++)
		if (l->slot[i].len > m)
			m = l->slot[i].len;
	return m;
}

static void obj_name(char *buf, size_t len, uint32_t obj)
{
	snprintf(buf, len, "rel-%u", obj);
}

int rel_store_create(const char *path, const struct coil_options *o,
		     const struct rel_layout *l)
{
	coil_store *s;
	coil_obj *h[REL_OBJS_MAX];
	int rc = coil_open(path, o, &s);

	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < l->nobj; i++) {
		char name[32];
		obj_name(name, sizeof(name), i);
		rc = coil_obj_open(s, name, COIL_CREATE, &h[i]);
		if (rc < 0) {
			coil_close(s);
			return rc;
		}
		coil_obj_close(h[i]);
	}
	return coil_close(s);
}

int rel_objs_open(coil_store *s, const struct rel_layout *l, coil_obj **h)
{
	for (uint32_t i = 0; i < l->nobj; i++) {
		char name[32];
		int rc;

		obj_name(name, sizeof(name), i);
		rc = coil_obj_open(s, name, 0, &h[i]);
		if (rc < 0) {
			while (i--)
				coil_obj_close(h[i]);
			return rc;
		}
	}
	return 0;
}

void rel_objs_close(const struct rel_layout *l, coil_obj **h)
{
	for (uint32_t i = 0; i < l->nobj; i++)
		coil_obj_close(h[i]);
}

int64_t rel_slot_write(coil_obj **h, const struct rel_layout *l,
		       struct rel_track *t, uint64_t seed, uint32_t slot,
		       uint8_t *buf)
{
	const struct rel_slot *sl = &l->slot[slot];
	uint64_t ver = atomic_load(&t->submitted[slot]) + 1;
	int64_t rc;

	rel_fill(buf, sl->len, seed, slot, ver);
	/* submitted is raised before the write can reach the disk */
	atomic_store(&t->submitted[slot], ver);
	rc = coil_pwrite(h[sl->obj], buf, sl->len, sl->off);
	if (rc == (int64_t)sl->len)
		atomic_store(&t->completed[slot], ver);
	return rc;
}

int rel_sync(coil_store *s, const struct rel_layout *l, struct rel_track *t)
{
	uint64_t snap[REL_SLOTS_MAX];
	int rc;

	for (uint32_t i = 0; i < l->nslots; i++)
		snap[i] = atomic_load(&t->completed[i]);
	rc = coil_sync(s);
	if (rc == 0)
		for (uint32_t i = 0; i < l->nslots; i++)
			if (snap[i] > atomic_load(&t->durable[i]))
				atomic_store(&t->durable[i], snap[i]);
	return rc;
}

unsigned rel_check_slots(coil_store *s, const struct rel_layout *l,
			 struct rel_track *t, uint64_t seed,
			 enum rel_floor floor, unsigned flags, const char *what,
			 unsigned *errs)
{
	uint32_t max = rel_layout_maxlen(l);
	uint8_t *rd = malloc(max), *scratch = malloc(max);
	coil_obj *h[REL_OBJS_MAX] = { 0 };
	bool have[REL_OBJS_MAX] = { 0 };
	unsigned bad = 0;

	for (uint32_t i = 0; i < l->nobj; i++) {
		char name[32];
		int rc;

		obj_name(name, sizeof(name), i);
		rc = coil_obj_open(s, name, 0, &h[i]);
		if (rc == 0) {
			have[i] = true;
		} else {
			fprintf(stderr, "rel: VIOLATION %s: object %s: open %s\n",
				what, name, coil_strerror(rc));
			bad++;
		}
	}
	for (uint32_t i = 0; i < l->nslots && rd && scratch; i++) {
		const struct rel_slot *sl = &l->slot[i];
		uint64_t lo = 0, hi = atomic_load(&t->submitted[i]), v;
		int64_t n;

		if (!have[sl->obj])
			continue;
		if (floor == REL_FLOOR_DURABLE)
			lo = atomic_load(&t->durable[i]);
		else if (floor == REL_FLOOR_COMPLETED)
			lo = atomic_load(&t->completed[i]);
		memset(rd, 0xa5, sl->len);
		n = coil_pread(h[sl->obj], rd, sl->len, sl->off);
		if (n < 0 && (flags & REL_CHECK_ERR_OK)) {
			if (errs)
				(*errs)++;
			continue;
		}
		if (n < 0) {
			fprintf(stderr, "rel: VIOLATION %s: slot %u: read %s "
				"(I1/I3: no device fault was injected)\n",
				what, i, coil_strerror((int)n));
			bad++;
			continue;
		}
		/* short at the end of the object: the rest is beyond EOF */
		memset(rd + n, 0, sl->len - (size_t)n);
		v = rel_ident(rd, sl->len, seed, i, scratch);
		if (v == REL_WRONG) {
			fprintf(stderr, "rel: VIOLATION %s: slot %u (obj %u off %llu "
				"len %u): bytes of no version (torn or wrong; I2/I3)\n",
				what, i, sl->obj, (unsigned long long)sl->off, sl->len);
			bad++;
			continue;
		}
		if (v < lo || v > hi) {
			fprintf(stderr, "rel: VIOLATION %s: slot %u: version %llu "
				"outside [%llu, %llu] (%s)\n", what, i,
				(unsigned long long)v, (unsigned long long)lo,
				(unsigned long long)hi,
				v < lo ? "I1: acknowledged write lost" :
					 "never written");
			bad++;
			continue;
		}
		if (flags & REL_CHECK_REBASE) {
			atomic_store(&t->completed[i], v);
			atomic_store(&t->durable[i], v);
		}
	}
	for (uint32_t i = 0; i < l->nobj; i++)
		if (have[i])
			coil_obj_close(h[i]);
	free(rd);
	free(scratch);
	return bad;
}

static unsigned verify(const char *path, const struct coil_options *o,
		       const struct rel_layout *l, struct rel_track *t,
		       uint64_t seed, enum rel_floor floor, const char *what,
		       bool rdonly)
{
	struct coil_options oo = *o;
	coil_store *s;
	unsigned bad;
	int rc;

	oo.flags &= ~COIL_CREATE;
	if (rdonly)
		oo.flags |= COIL_RDONLY;
	rc = coil_open(path, &oo, &s);
	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: store does not open: %s (I4)\n",
			what, coil_strerror(rc));
		return 1;
	}
	bad = rel_check_slots(s, l, t, seed, floor, REL_CHECK_REBASE, what,
			      NULL);
	rc = coil_close(s);
	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: clean close failed: %s\n",
			what, coil_strerror(rc));
		bad++;
	}
	return bad;
}

unsigned rel_verify(const char *path, const struct coil_options *o,
		    const struct rel_layout *l, struct rel_track *t,
		    uint64_t seed, enum rel_floor floor, const char *what)
{
	return verify(path, o, l, t, seed, floor, what, false);
}

unsigned rel_verify_ro(const char *path, const struct coil_options *o,
		       const struct rel_layout *l, struct rel_track *t,
		       uint64_t seed, enum rel_floor floor, const char *what)
{
	return verify(path, o, l, t, seed, floor, what, true);
}

int rel_image_load(struct rel_image *img, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	int rc = 0;

	memset(img, 0, sizeof(*img));
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_size <= 0) {
		rc = -EIO;
		goto out;
	}
	img->size = (size_t)st.st_size;
	if (posix_memalign((void **)&img->buf, 4096, img->size)) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t off = 0; off < img->size;) {
		ssize_t n = pread(fd, img->buf + off, img->size - off, (off_t)off);
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)n;
	}
out:
	close(fd);
	if (rc < 0)
		rel_image_free(img);
	return rc;
}

int64_t rel_image_restore(const struct rel_image *img, const char *path)
{
	const size_t piece = 1u << 20;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_DIRECT);
	uint8_t *cur = NULL;
	int64_t written = 0;

	if (fd < 0)
		fd = open(path, O_RDWR | O_CLOEXEC); /* tmpfs: no O_DIRECT */
	if (fd < 0)
		return -errno;
	if (posix_memalign((void **)&cur, 4096, piece)) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t off = 0; off < img->size && written >= 0; off += piece) {
		size_t len = img->size - off < piece ? img->size - off : piece;
		ssize_t n = pread(fd, cur, len, (off_t)off);

		if (n != (ssize_t)len) {
			written = n < 0 ? -errno : -EIO;
			break;
		}
		for (size_t b = 0; b < len; b += 4096) {
			size_t bl = len - b < 4096 ? len - b : 4096;
			if (!memcmp(cur + b, img->buf + off + b, bl))
				continue;
			if (pwrite(fd, img->buf + off + b, bl,
				   (off_t)(off + b)) != (ssize_t)bl) {
				written = -EIO;
				break;
			}
			written++;
		}
	}
	if (written >= 0 && ftruncate(fd, (off_t)img->size) < 0)
		written = -errno;
	free(cur);
	close(fd);
	return written;
}

void rel_image_free(struct rel_image *img)
{
	free(img->buf);
	img->buf = NULL;
	img->size = 0;
}

void rel_session_run(const char *path, const struct coil_options *o,
		     const struct rel_layout *l, struct rel_track *t,
		     uint64_t seed, uint64_t wseed, unsigned nwrites,
		     unsigned sync_every, bool check, uint8_t *buf,
		     struct rel_session *out)
{
	coil_obj *h[REL_OBJS_MAX];
	coil_store *s;
	uint64_t st = wseed;
	struct uring *r;

	memset(out, 0, sizeof(*out));
	out->open_rc = coil_open(path, o, &s);
	if (out->open_rc < 0) {
		out->cut_before_close = true;
		return;
	}
	if (rel_objs_open(s, l, h) == 0) {
		for (unsigned i = 0; i < nwrites; i++) {
			uint32_t slot = (uint32_t)(rel_rng(&st) % l->nslots);
			int64_t rc = rel_slot_write(h, l, t, seed, slot, buf);

			if (rc < 0) {
				out->first_err = (int)rc;
				break;
			}
			if (rc != (int64_t)l->slot[slot].len) {
				out->first_err = -EIO; /* a short write: never */
				break;
			}
			if (sync_every && i % sync_every == sync_every - 1) {
				rc = rel_sync(s, l, t);
				if (rc < 0) {
					out->first_err = (int)rc;
					break;
				}
			}
		}
		rel_objs_close(l, h);
	}
	if (check)
		out->bad += rel_check_slots(s, l, t, seed, REL_FLOOR_COMPLETED,
					    REL_CHECK_ERR_OK, "in-session read",
					    &out->read_errs);
	r = uring_fault_last();
	out->cut_before_close = uring_fault_is_cut(r);
	out->ops = uring_fault_count(r, URING_FAULT_ANY);
	out->fsyncs = uring_fault_count(r, URING_OP_FSYNC);
	out->close_rc = coil_close(s);
}

void rel_fault_arm(uint64_t nth, int mode, uint64_t seed)
{
	struct uring_fault_spec spec;

	memset(&spec, 0, sizeof(spec));
	spec.record = true;
	if (nth) {
		spec.cut_kind = URING_FAULT_ANY;
		spec.cut_nth = nth;
		spec.cut_mode = mode;
		spec.cut_seed = seed;
	}
	uring_fault_set_next(&spec);
}

void rel_cut_recovery(const char *path, const struct coil_options *o,
		      uint64_t *st, uint32_t span, uint64_t *cuts)
{
	uint64_t r = rel_rng(st);
	coil_store *s;

	rel_fault_arm(1 + r % span, (int)(1 + (r >> 16) % 3), r >> 24);
	if (coil_open(path, o, &s) == 0) {
		if (uring_fault_is_cut(uring_fault_last()))
			(*cuts)++;
		coil_close(s);
	} else {
		(*cuts)++; /* the cut made open fail: recovery was cut */
	}
	uring_fault_set_next(NULL);
}
