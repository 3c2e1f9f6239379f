/* tests/rel/fuzz_replay.c — every fuzz target on its corpus plus a short
 * run, in the ordinary test build (docs/reliability.md, row 5, first
 * half).
 *
 * Linked once per target with that target's LLVMFuzzerTestOneInput (meson
 * makes one test binary per entry of coil_fuzzers), so it needs neither
 * clang nor libFuzzer and runs under ASan/UBSan with everything else.  It
 * feeds every file of the target's seed corpus, then a seeded run of
 * mutations of them (bit flips, byte sets, inserts, deletes, truncations,
 * splices, interesting integers).  A broken invariant in a target traps
 * (FUZZ_CHECK) and criterion reports the crash; COIL_REL_SEED replays the
 * exact inputs, and COIL_REL_FUZZ_SAVE=1 writes each input to
 * rel-stores/fuzz-<name>-last before running it, so the one that crashed is
 * on disk. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/rel/rel.h"

#ifndef REL_FUZZ_NAME
#error "REL_FUZZ_NAME must name the target"
#endif
#ifndef REL_FUZZ_CORPUS
#define REL_FUZZ_CORPUS ""
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUTS_MAX 256
#define INPUT_LEN_MAX (1u << 20)

struct corpus {
	uint8_t *in[INPUTS_MAX];
	size_t len[INPUTS_MAX];
	unsigned n;
};

static void corpus_load(struct corpus *c, const char *dir)
{
	DIR *d = dir[0] ? opendir(dir) : NULL;
	struct dirent *e;

	while (d && (e = readdir(d)) && c->n < INPUTS_MAX) {
		char p[1024];
		struct stat st;
		FILE *fp;

		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (stat(p, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (size_t)st.st_size > INPUT_LEN_MAX)
			continue;
		fp = fopen(p, "rb");
		if (!fp)
			continue;
		c->in[c->n] = malloc((size_t)st.st_size + 1);
		c->len[c->n] = fread(c->in[c->n], 1, (size_t)st.st_size, fp);
		fclose(fp);
		c->n++;
	}
	if (d)
		closedir(d);
}

static void save(const uint8_t *p, size_t n)
{
	static int on = -1;
	char path[256];
	FILE *fp;

	if (on < 0)
		on = getenv("COIL_REL_FUZZ_SAVE") != NULL;
	if (!on)
		return;
	mkdir("rel-stores", 0755);
	snprintf(path, sizeof(path), "rel-stores/fuzz-%s-last", REL_FUZZ_NAME);
	fp = fopen(path, "wb");
	if (fp) {
		fwrite(p, 1, n, fp);
		fclose(fp);
	}
}

/* One mutation of buf[0..*n) in place (cap bytes available). */
static void mutate(uint8_t *buf, size_t *n, size_t cap, uint64_t *st,
		   const struct corpus *c)
{
	static const uint64_t interesting[] = { 0, 1, 0x7f, 0x80, 0xff, 0x100,
		0x1000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff,
		0x100000000ull, UINT64_MAX, UINT64_MAX - 1, 4096, 4095, 65536 };
	uint64_t r = rel_rng(st);
	size_t at = *n ? (size_t)((r >> 8) % *n) : 0;

	switch (r % 8) {
	case 0: /* flip a bit */
		if (*n)
			buf[at] ^= (uint8_t)(1u << ((r >> 40) % 8));
		break;
	case 1: /* set a byte */
		if (*n)
			buf[at] = (uint8_t)(r >> 40);
		break;
	case 2: { /* an interesting little-endian integer */
		uint64_t v = interesting[(r >> 40) % (sizeof(interesting) /
						      sizeof(interesting[0]))];
		size_t w = (size_t)1 << ((r >> 50) % 4);
		for (size_t i = 0; i < w && at + i < *n; i++)
			buf[at + i] = (uint8_t)(v >> (8 * i));
		break;
	}
	case 3: { /* insert random bytes */
		size_t k = 1 + (size_t)((r >> 40) % 64);
		if (*n + k > cap)
			break;
		memmove(buf + at + k, buf + at, *n - at);
		for (size_t i = 0; i < k; i++)
			buf[at + i] = (uint8_t)rel_rng(st);
		*n += k;
		break;
	}
	case 4: { /* delete bytes */
		size_t k = 1 + (size_t)((r >> 40) % 64);
		if (at + k > *n)
			k = *n - at;
		memmove(buf + at, buf + at + k, *n - at - k);
		*n -= k;
		break;
	}
	case 5: /* truncate */
		*n = at;
		break;
	case 6: { /* splice in part of another input */
		const uint8_t *o;
		size_t ol, from, k;
		if (!c->n)
			break;
		o = c->in[(r >> 40) % c->n];
		ol = c->len[(r >> 40) % c->n];
		if (!ol)
			break;
		from = (size_t)(rel_rng(st) % ol);
		k = 1 + (size_t)(rel_rng(st) % (ol - from));
		if (at + k > cap)
			k = cap - at;
		memcpy(buf + at, o + from, k);
		if (at + k > *n)
			*n = at + k;
		break;
	}
	default: /* duplicate a block of itself */
		if (*n && *n * 2 <= cap && ((r >> 40) & 3) == 0) {
			memcpy(buf + *n, buf, *n);
			*n *= 2;
		} else if (*n) {
			buf[at] = (uint8_t)~buf[at];
		}
		break;
	}
}

Test(rel_fuzz, corpus_and_short_run, .timeout = 600)
{
	struct corpus c = { .n = 0 };
	uint64_t seed = rel_seed(), st = seed ^ 0xf022;
	uint64_t runs = rel_scaled(10000, 300), done = 0;
	const double budget_s = 8.0 * rel_scale(); /* per target, wall */
	size_t maxlen = 4096, cap;
	struct timespec t0, t1;
	uint8_t *buf;
	char row[96];

	rel_announce("rel_fuzz " REL_FUZZ_NAME, seed);
	corpus_load(&c, REL_FUZZ_CORPUS);
	for (unsigned i = 0; i < c.n; i++) {
		save(c.in[i], c.len[i]);
		LLVMFuzzerTestOneInput(c.in[i], c.len[i]);
		if (c.len[i] > maxlen)
			maxlen = c.len[i];
	}
	cap = maxlen * 2 + 4096;
	buf = malloc(cap);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (done = 0; done < runs; done++) {
		size_t n = 0;
		unsigned muts = 1 + (unsigned)(rel_rng(&st) % 6);

		if (c.n) {
			unsigned k = (unsigned)(rel_rng(&st) % c.n);
			n = c.len[k];
			memcpy(buf, c.in[k], n);
		} else {
			n = (size_t)(rel_rng(&st) % 2048);
			for (size_t i = 0; i < n; i++)
				buf[i] = (uint8_t)rel_rng(&st);
		}
		for (unsigned m = 0; m < muts; m++)
			mutate(buf, &n, cap, &st, &c);
		save(buf, n);
		LLVMFuzzerTestOneInput(buf, n);
		/* under sanitizers a slow target stops at the time budget;
		 * checked every 64 runs, so the inputs stay replayable */
		if (done % 64 == 63) {
			clock_gettime(CLOCK_MONOTONIC, &t1);
			if ((double)(t1.tv_sec - t0.tv_sec) +
			    (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9 > budget_s) {
				done++;
				break;
			}
		}
	}
	snprintf(row, sizeof(row), "fuzz %s corpus=%u", REL_FUZZ_NAME, c.n);
	/* a crash never gets here: criterion reports it with the seed above */
	rel_report(row, "runs", c.n + done, 0, seed);
	cr_assert_geq(done, 1);
	for (unsigned i = 0; i < c.n; i++)
		free(c.in[i]);
	free(buf);
}
