/* test_rel_optdict: power cuts while coil_optimize trains, stores and
 * uses a dictionary (docs/reliability.md, row "optimizer").  A cohort
 * "logs/" of text objects whose 64 KiB pieces share a 3 KiB header (what a
 * dictionary pays for), plus "other"; a session (open, coil_optimize at
 * level 3 until it returns 0, sync, close) is run from the same image with
 * a power cut at every stride-th ring op, so cuts land in the dictionary's
 * object (its create, its data, the sync that makes it durable), in the
 * passes that use it and in their checkpoints.  After each cut: the store
 * opens, every object reads back exactly (the optimizer changes no
 * content), coil_check is clean, the pass resumes to 0 (a dictionary is
 * made again if the cut lost it), every object is exact again, and a
 * read-only reopen reads them too. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coil.h"
#include "common/common.h"
#include "engine/cleaner.h"
#include "tests/rel/rel.h"
#include "tests/test_util.h"
#include "uring/uring_fault.h"

#define KiB (1u << 10)
#define NOBJ 15
#define OBJ_LEN (768u * KiB)
#define LEVEL 3

static char nm[NOBJ][32];
static uint8_t *data[NOBJ];
static uint32_t len[NOBJ];

/* This file's text (tests/test_util.h), one stream per seed. */
static void text_fill(uint8_t *p, size_t n, uint64_t seed)
{
	tu_text_fill(p, n, rel_mix(seed) | 1);
}

static void build(const char *path, struct coil_options *o, uint64_t seed)
{
	uint8_t head[16 * KiB];
	coil_store *s;

	text_fill(head, sizeof(head), seed ^ 7777);
	cr_assert_eq(coil_open(path, o, &s), 0);
	for (int i = 0; i < NOBJ; i++) {
		coil_obj *h;

		len[i] = i < NOBJ - 1 ? OBJ_LEN : 256 * KiB;
		snprintf(nm[i], sizeof(nm[i]), i < NOBJ - 1 ? "logs/%02d" :
			 "other", i);
		data[i] = malloc(OBJ_LEN);
		text_fill(data[i], len[i], seed + 100 + (uint64_t)i);
		for (uint32_t at = 0; at < len[i]; at += 64 * KiB)
			memcpy(data[i] + at, head, sizeof(head));
		cr_assert_eq(coil_obj_open(s, nm[i], COIL_CREATE, &h), 0);
		for (uint32_t at = 0; at < len[i]; at += 64 * KiB)
			cr_assert_eq(coil_pwrite(h, data[i] + at, 64 * KiB, at),
				     64 * KiB);
		cr_assert_eq(coil_obj_close(h), 0);
	}
	cr_assert_eq(coil_sync(s), 0);
	cr_assert_eq(coil_close(s), 0);
	o->flags &= ~COIL_CREATE;
}

static unsigned compare(coil_store *s, uint8_t *buf, const char *what)
{
	unsigned bad = 0;

	for (int i = 0; i < NOBJ; i++) {
		coil_obj *h;
		uint64_t size = 0;
		int64_t n;
		int rc = coil_obj_open(s, nm[i], 0, &h);

		if (rc < 0) {
			fprintf(stderr, "rel: VIOLATION %s: %s open %s\n", what,
				nm[i], coil_strerror(rc));
			bad++;
			continue;
		}
		coil_obj_size(h, &size);
		n = coil_pread(h, buf, OBJ_LEN, 0);
		coil_obj_close(h);
		if (size != len[i] || n != (int64_t)len[i] ||
		    memcmp(buf, data[i], len[i])) {
			fprintf(stderr, "rel: VIOLATION %s: %s size %llu read "
				"%lld (%s) or bytes differ\n", what, nm[i],
				(unsigned long long)size, (long long)n,
				n < 0 ? coil_strerror((int)n) : "-");
			bad++;
		}
	}
	return bad;
}

static int damage_cb(void *arg, const struct coil_damage *d)
{
	fprintf(stderr, "rel: VIOLATION %s: coil_check: %.*s %llu+%llu: %s\n",
		(const char *)arg, d->object ? (int)d->object_len : 1,
		d->object ? d->object : "-", (unsigned long long)d->off,
		(unsigned long long)d->len, d->what);
	return 0;
}

static unsigned check(coil_store *s, const char *what)
{
	struct coil_scrub_info info;
	int rc;

	memset(&info, 0, sizeof(info));
	rc = coil_check(s, damage_cb, (void *)what, &info);
	if (rc || info.damaged_ranges || info.metadata_errors ||
	    info.accounting_errors || cleaner_check_live(s)) {
		fprintf(stderr, "rel: VIOLATION %s: check %d %llu %llu %llu\n",
			what, rc, (unsigned long long)info.damaged_ranges,
			(unsigned long long)info.metadata_errors,
			(unsigned long long)info.accounting_errors);
		return 1;
	}
	return 0;
}

struct sess {
	int open_rc, err, close_rc;
	bool cut;
	uint64_t ops, dicts;
};

static void session(const char *path, const struct coil_options *o,
		    struct sess *out)
{
	struct coil_optimize_opts oo = { .level = LEVEL };
	struct coil_optimize_report rep;
	coil_store *s;
	struct uring *r;
	int rc = 1, calls = 0;

	memset(out, 0, sizeof(*out));
	out->open_rc = coil_open(path, o, &s);
	if (out->open_rc < 0) {
		out->cut = true;
		return;
	}
	while (rc == 1 && calls++ < 64) {
		memset(&rep, 0, sizeof(rep));
		rc = coil_optimize(s, &oo, &rep);
		out->dicts += rep.dicts_made;
		if (getenv("DICT_DBG"))
			fprintf(stderr, "DBG call rc %d scanned %llu rw %llu dicts %llu rej %llu passes %llu\n", rc, (unsigned long long)rep.scanned, (unsigned long long)rep.rewritten, (unsigned long long)rep.dicts_made, (unsigned long long)rep.dicts_rejected, (unsigned long long)rep.passes);
	}
	if (rc < 0)
		out->err = rc;
	else if ((rc = coil_sync(s)) < 0)
		out->err = rc;
	r = uring_fault_last();
	out->cut = uring_fault_is_cut(r);
	out->ops = uring_fault_count(r, URING_FAULT_ANY);
	out->close_rc = coil_close(s);
}

static unsigned verify(const char *path, const struct coil_options *o,
		       uint8_t *buf, const char *what, uint64_t *dicts)
{
	struct coil_optimize_opts oo = { .level = LEVEL };
	struct coil_optimize_report rep;
	struct coil_options ro = *o;
	unsigned bad = 0;
	coil_store *s;
	int rc = coil_open(path, o, &s), calls = 0;

	if (rc < 0) {
		fprintf(stderr, "rel: VIOLATION %s: open %s\n", what,
			coil_strerror(rc));
		return 1;
	}
	bad += compare(s, buf, what);
	bad += check(s, what);
	rc = 1;
	while (!bad && rc == 1 && calls++ < 64) {
		memset(&rep, 0, sizeof(rep));
		rc = coil_optimize(s, &oo, &rep);
		*dicts += rep.dicts_made;
	}
	if (!bad && rc != 0) {
		fprintf(stderr, "rel: VIOLATION %s: resume %d\n", what, rc);
		bad++;
	}
	if (!bad) {
		bad += compare(s, buf, what);
		bad += check(s, what);
	}
	if (coil_close(s) < 0)
		bad++;
	ro.flags |= COIL_RDONLY;
	if (!bad) {
		rc = coil_open(path, &ro, &s);
		if (rc < 0) {
			fprintf(stderr, "rel: VIOLATION %s: ro open %s\n", what,
				coil_strerror(rc));
			return bad + 1;
		}
		bad += compare(s, buf, what);
		coil_close(s);
	}
	return bad;
}

Test(rel, optimize_dict_powercut, .timeout = 1800)
{
	uint64_t seed = rel_seed(), st = seed ^ 0xd1c7, cuts = 0, bad = 0;
	/* every 6th op at full scale (tools/dev.sh soak), every 14th in
	 * tools/dev.sh test, a few cuts under the sanitizers */
	uint64_t stride = COIL_MAX((uint64_t)3,
				   (uint64_t)(5.6 / rel_scale() + 0.5));
	uint64_t dicts_after = 0;
	uint8_t *buf = malloc(OBJ_LEN);
	struct coil_options o;
	struct rel_image img;
	struct sess ss;
	char path[256], what[160];

	rel_announce("optimize_dict_powercut", seed);
	rel_path(path, sizeof(path), "opt-dict");
	rel_opts(&o, 64ull << 20);
	build(path, &o, seed);
	cr_assert_eq(rel_image_load(&img, path), 0);
	rel_fault_arm(0, 0, 0);
	session(path, &o, &ss);
	uring_fault_set_next(NULL);
	cr_assert_eq(ss.err, 0, "err %s open %s", coil_strerror(ss.err), coil_strerror(ss.open_rc));
	cr_assert_eq(ss.dicts, 1, "dicts %llu", (unsigned long long)ss.dicts);
	bad += verify(path, &o, buf, "dry", &dicts_after);
	fprintf(stderr, "rel: dict dry run: %llu ops\n",
		(unsigned long long)ss.ops);
	for (uint64_t c = 1 + rel_rng(&st) % stride, n = ss.ops;
	     c <= n + 64 && !bad; c += stride) {
		int mode = (int)(1 + (c / stride) % 3);

		cr_assert_geq(rel_image_restore(&img, path), 0);
		rel_fault_arm(c, mode, rel_rng(&st));
		session(path, &o, &ss);
		uring_fault_set_next(NULL);
		if (!ss.cut && !ss.err && !ss.close_rc && !ss.open_rc) {
			if (c > n)
				break;
			continue;
		}
		cuts++;
		if (rel_rng(&st) % 3 == 0) {
			/* and a cut inside the recovery (a dictionary is read
			 * at open, or in replay when a blob first needs it) */
			uint64_t rec_cuts = 0;

			rel_cut_recovery(path, &o, &st, 16, &rec_cuts);
		}
		snprintf(what, sizeof(what), "dict cut at op %llu of %llu mode "
			 "%d", (unsigned long long)c, (unsigned long long)n,
			 mode);
		bad += verify(path, &o, buf, what, &dicts_after);
	}
	fprintf(stderr, "rel: dict cuts=%llu violations=%llu dicts_made_after_"
		"recovery=%llu seed=0x%llx\n", (unsigned long long)cuts,
		(unsigned long long)bad, (unsigned long long)dicts_after,
		(unsigned long long)seed);
	cr_assert_eq(bad, 0);
	rel_image_free(&img);
}

#include <signal.h>
#include <sys/wait.h>

Test(rel, optimize_dict_kill9, .timeout = 1800)
{
	uint64_t seed = rel_seed(), st = seed ^ 0xd1c9, bad = 0;
	uint64_t cycles = rel_scaled(30, 3);
	uint8_t *buf = malloc(OBJ_LEN);
	struct coil_options o;
	struct rel_image img;
	char path[256], what[160];

	rel_announce("optimize_dict_kill9", seed);
	rel_path(path, sizeof(path), "opt-dict-k9");
	rel_opts(&o, 64ull << 20);
	build(path, &o, seed);
	cr_assert_eq(rel_image_load(&img, path), 0);
	for (uint64_t c = 0; c < cycles && !bad; c++) {
		uint64_t r = rel_rng(&st);
		useconds_t us = (useconds_t)(r % 400000);
		coil_store *s;
		pid_t pid;
		int wst;

		/* every other cycle from the image: training again */
		if (c % 2 == 0)
			cr_assert_geq(rel_image_restore(&img, path), 0);
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			struct coil_optimize_opts oo = { .level = LEVEL,
							 .budget_bytes = 1 };
			int rc = coil_open(path, &o, &s);

			if (rc < 0)
				_exit(3);
			for (;;) {
				rc = coil_optimize(s, &oo, NULL);
				if (rc < 0)
					_exit(5);
				if (rc == 0)
					usleep(1000);
			}
		}
		usleep(us);
		kill(pid, SIGKILL);
		waitpid(pid, &wst, 0);
		if (!(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL)) {
			fprintf(stderr, "rel: VIOLATION dict kill9 cycle %llu: "
				"child status 0x%x\n", (unsigned long long)c,
				WIFEXITED(wst) ? WEXITSTATUS(wst) : wst);
			bad++;
		}
		snprintf(what, sizeof(what), "dict kill9 cycle %llu (%u us)",
			 (unsigned long long)c, (unsigned)us);
		if (coil_open(path, &o, &s) < 0) {
			fprintf(stderr, "rel: VIOLATION %s: open\n", what);
			bad++;
			break;
		}
		bad += compare(s, buf, what);
		bad += check(s, what);
		coil_close(s);
	}
	fprintf(stderr, "rel: dict kill9 cycles=%llu violations=%llu\n",
		(unsigned long long)cycles, (unsigned long long)bad);
	cr_assert_eq(bad, 0);
	rel_image_free(&img);
}
