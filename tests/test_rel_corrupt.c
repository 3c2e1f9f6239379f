/* test_rel_corrupt: byte flips, zeroed sectors and stale (older-version)
 * blocks in the data area, the journal, the checkpoints and the superblocks
 * (docs/reliability.md, row 4).  The count that matters: 0 wrong bytes.
 *
 * Three images of one store are made: OLD (version 1 of every slot, closed),
 * CLEAN (later versions, closed: everything in the checkpoint, the
 * journal given back to the file system) and UNCLEAN
 * (more versions written and synced by a child that exits without closing:
 * the journal must be replayed).  Each trial damages one 4 KiB block of a
 * used part of one region of CLEAN or UNCLEAN:
 *   flip   one random bit of one byte;
 *   zero   a 512-byte sector or the whole 4 KiB block;
 *   stale  the block as OLD had it at the same offset (a lost write), or
 *          another used block of the same region (a misdirected write);
 * then opens the store (read-only: recovery in memory, so only the damaged
 * block needs putting back; every eighth trial read-write, then the whole
 * image is restored) and reads every slot.  Allowed: open fails with a
 * negative errno, a read fails with a negative errno, and — when metadata
 * was damaged, or the journal referenced the damaged blob — an older
 * version (recovery keeps a prefix).  Never allowed: bytes of no version,
 * a version never written, or, for a damaged blob that only the checkpoint
 * references, an older version instead of -EIO. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/rel/rel.h"

#define NSLOTS 12

enum region { R_SUPER, R_JOURNAL, R_CKPT, R_DATA, R_N };
enum ckind { K_FLIP, K_ZERO, K_STALE, K_N };
static const char *region_name[] = { "super", "journal", "ckpt", "data" };
static const char *kind_name[] = { "flip", "zero", "stale" };

struct img {
	struct rel_image im;
	uint64_t expect[REL_SLOTS_MAX];   /* version each slot must hold */
	uint32_t *used[R_N];              /* used 4 KiB block numbers */
	uint32_t nused[R_N];
	bool clean;
};

struct counts {
	uint64_t trials, bad, open_failed, read_errors, rolled_back, intact;
	uint64_t per_region[R_N], per_kind[K_N], open_failed_region[R_N];
};

static enum region region_of(const struct fmt_super *sb, uint64_t off)
{
	if (off < sb->journal_off)
		return R_SUPER;
	if (off < sb->journal_off + sb->journal_len)
		return R_JOURNAL;
	if ((off >= sb->ckpt_off[0] && off < sb->ckpt_off[0] + sb->ckpt_len) ||
	    (off >= sb->ckpt_off[1] && off < sb->ckpt_off[1] + sb->ckpt_len))
		return R_CKPT;
	if (off >= sb->data_off)
		return R_DATA;
	return R_N;
}

static bool block_zero(const uint8_t *p)
{
	for (int i = 0; i < 4096; i++)
		if (p[i])
			return false;
	return true;
}

/* Blocks of each region that hold anything in this image or in OLD. */
static void img_index(struct img *g, const struct rel_image *old,
		      const struct fmt_super *sb)
{
	size_t nb = g->im.size / 4096;

	for (int r = 0; r < R_N; r++) {
		g->used[r] = calloc(nb, sizeof(uint32_t));
		g->nused[r] = 0;
	}
	for (size_t b = 0; b < nb; b++) {
		enum region r = region_of(sb, (uint64_t)b * 4096);
		if (r == R_N)
			continue;
		if (block_zero(g->im.buf + b * 4096) &&
		    (b * 4096 >= old->size || block_zero(old->buf + b * 4096)))
			continue;
		g->used[r][g->nused[r]++] = (uint32_t)b;
	}
}

static void img_free(struct img *g)
{
	rel_image_free(&g->im);
	for (int r = 0; r < R_N; r++)
		free(g->used[r]);
}

static int write_block(const char *path, const uint8_t *p, uint64_t off)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_DIRECT);
	int rc = 0;

	if (fd < 0)
		fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (pwrite(fd, p, 4096, (off_t)off) != 4096)
		rc = -EIO;
	close(fd);
	return rc;
}

/* Open (read-only or not), read every slot, judge.  @return violations. */
static unsigned judge(const char *path, const struct coil_options *o,
		      const struct rel_layout *l, const struct img *g,
		      uint64_t seed, enum region rg, bool rw, const char *what,
		      struct counts *c)
{
	struct coil_options oo = *o;
	uint32_t max = rel_layout_maxlen(l);
	uint8_t *rd = malloc(max), *scratch = malloc(max);
	coil_obj *h[REL_OBJS_MAX] = { 0 };
	coil_store *s;
	unsigned bad = 0;
	bool rolled = false, errs = false;
	int rc;

	if (!rw)
		oo.flags |= COIL_RDONLY;
	rc = coil_open(path, &oo, &s);
	if (rc < 0) {
		c->open_failed++;
		c->open_failed_region[rg]++;
		free(rd);
		free(scratch);
		return 0;
	}
	for (uint32_t i = 0; i < l->nobj; i++) {
		char name[32];
		snprintf(name, sizeof(name), "rel-%u", i);
		if (coil_obj_open(s, name, 0, &h[i]) < 0)
			h[i] = NULL; /* metadata rolled back past the create */
	}
	for (uint32_t i = 0; i < l->nslots; i++) {
		const struct rel_slot *sl = &l->slot[i];
		uint64_t v;
		int64_t n;

		if (!h[sl->obj]) {
			rolled = true;
			continue;
		}
		n = coil_pread(h[sl->obj], rd, sl->len, sl->off);
		if (n < 0) {
			errs = true;
			continue;
		}
		memset(rd + n, 0, sl->len - (size_t)n);
		v = rel_ident(rd, sl->len, seed, i, scratch);
		if (v == REL_WRONG || (v != REL_ABSENT && v > g->expect[i])) {
			fprintf(stderr, "rel: VIOLATION %s: slot %u: %s\n", what,
				i, v == REL_WRONG ? "WRONG BYTES (I3)" :
						    "a version never written");
			bad++;
		} else if (v != g->expect[i]) {
			/* a blob only the checkpoint references cannot roll
			 * back: its damage must be -EIO */
			if (g->clean && rg == R_DATA) {
				fprintf(stderr, "rel: VIOLATION %s: slot %u: "
					"version %llu instead of %llu or -EIO "
					"(stale data served)\n", what, i,
					(unsigned long long)v,
					(unsigned long long)g->expect[i]);
				bad++;
			}
			rolled = true;
		}
	}
	for (uint32_t i = 0; i < l->nobj; i++)
		coil_obj_close(h[i]);
	coil_close(s);
	c->read_errors += errs;
	c->rolled_back += rolled;
	c->intact += !errs && !rolled && !bad;
	free(rd);
	free(scratch);
	return bad;
}

static void trial(const char *path, const struct coil_options *o,
		  const struct rel_layout *l, const struct img *g,
		  const struct rel_image *old, uint64_t seed, uint64_t *st,
		  enum region rg, enum ckind k, uint64_t no, struct counts *c)
{
	uint8_t *blk = NULL;
	uint64_t r = rel_rng(st), off;
	uint32_t b;
	bool rw = no % 8 == 7;
	char what[160];

	if (!g->nused[rg])
		return;
	b = g->used[rg][r % g->nused[rg]];
	off = (uint64_t)b * 4096;
	cr_assert_eq(posix_memalign((void **)&blk, 4096, 4096), 0);
	memcpy(blk, g->im.buf + off, 4096);
	switch (k) {
	case K_FLIP:
		blk[(r >> 20) % 4096] ^= (uint8_t)(1u << ((r >> 40) % 8));
		break;
	case K_ZERO:
		if ((r >> 20) & 1)
			memset(blk, 0, 4096);
		else
			memset(blk + 512 * ((r >> 21) % 8), 0, 512);
		break;
	case K_STALE:
		if ((r >> 20) % 2 == 0 && off + 4096 <= old->size &&
		    memcmp(old->buf + off, blk, 4096)) {
			memcpy(blk, old->buf + off, 4096); /* lost write */
		} else {
			uint32_t b2 = g->used[rg][(r >> 24) % g->nused[rg]];
			memcpy(blk, g->im.buf + (uint64_t)b2 * 4096, 4096);
		}
		break;
	default:
		break;
	}
	snprintf(what, sizeof(what), "corrupt #%llu %s %s %s block %u%s",
		 (unsigned long long)no, g->clean ? "clean" : "unclean",
		 region_name[rg], kind_name[k], b, rw ? " (rw open)" : "");
	cr_assert_eq(write_block(path, blk, off), 0);
	c->bad += judge(path, o, l, g, seed, rg, rw, what, c);
	c->trials++;
	c->per_region[rg]++;
	c->per_kind[k]++;
	/* put the image back: one block after a read-only open, a diff of
	 * the whole file after a read-write one */
	if (rw)
		cr_assert_geq(rel_image_restore(&g->im, path), 0);
	else
		cr_assert_eq(write_block(path, g->im.buf + off, off), 0);
	free(blk);
}

/* Child: write more versions, sync, exit without closing. */
static void write_unclean(const char *path, const struct coil_options *o,
			  const struct rel_layout *l, struct rel_track *t,
			  uint64_t seed)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		coil_obj *h[REL_OBJS_MAX];
		coil_store *s;
		uint8_t *buf = malloc(rel_layout_maxlen(l));

		if (coil_open(path, o, &s) < 0 || rel_objs_open(s, l, h) < 0)
			_exit(3);
		for (uint32_t i = 0; i < l->nslots; i += 2)
			if (rel_slot_write(h, l, t, seed, i, buf) < 0)
				_exit(4);
		if (rel_sync(s, l, t) < 0)
			_exit(5);
		for (uint32_t i = 1; i < l->nslots; i += 3)
			if (rel_slot_write(h, l, t, seed, i, buf) < 0)
				_exit(4);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void write_all(const char *path, const struct coil_options *o,
		      const struct rel_layout *l, struct rel_track *t,
		      uint64_t seed, int rounds)
{
	coil_obj *h[REL_OBJS_MAX];
	coil_store *s;
	uint8_t *buf = malloc(rel_layout_maxlen(l));

	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(rel_objs_open(s, l, h), 0);
	for (int r = 0; r < rounds; r++)
		for (uint32_t i = 0; i < l->nslots; i++)
			if (r == 0 || (i + (uint32_t)r) % 2)
				cr_assert_eq(rel_slot_write(h, l, t, seed, i, buf),
					     (int64_t)l->slot[i].len);
	rel_objs_close(l, h);
	cr_assert_eq(coil_close(s), 0);
	free(buf);
}

Test(rel, corrupt, .timeout = 900)
{
	uint64_t seed = rel_seed();
	uint64_t target = rel_scaled(2040, 48), st = seed ^ 0xc0ff;
	struct rel_track *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct rel_layout l;
	struct coil_options o;
	struct rel_image old;
	struct img g[2];
	struct fmt_super sb;
	struct counts c = { 0 };
	char path[256];

	cr_assert_neq(t, MAP_FAILED);
	memset((void *)t, 0, sizeof(*t));
	rel_announce("corrupt", seed);
	rel_layout_make(&l, seed, 2, NSLOTS);
	rel_path(path, sizeof(path), "corrupt");
	rel_opts(&o, 12ull << 20);
	cr_assert_eq(rel_store_create(path, &o, &l), 0);
	o.flags &= ~COIL_CREATE;

	write_all(path, &o, &l, t, seed, 1);
	cr_assert_eq(rel_image_load(&old, path), 0);
	/* the newer superblock copy names the layout */
	{
		struct fmt_super a, b;
		int ra = fmt_super_decode(&a, old.buf, 4096);
		int rb = fmt_super_decode(&b, old.buf + 4096, 4096);
		cr_assert(ra >= 0 || rb >= 0);
		sb = (ra >= 0 && (rb < 0 || a.seq >= b.seq)) ? a : b;
	}
	write_all(path, &o, &l, t, seed, 3);
	memset(g, 0, sizeof(g));
	cr_assert_eq(rel_image_load(&g[0].im, path), 0);
	g[0].clean = true;
	for (uint32_t i = 0; i < l.nslots; i++)
		g[0].expect[i] = atomic_load(&t->completed[i]);
	write_unclean(path, &o, &l, t, seed);
	cr_assert_eq(rel_image_load(&g[1].im, path), 0);
	for (uint32_t i = 0; i < l.nslots; i++)
		g[1].expect[i] = atomic_load(&t->completed[i]);
	img_index(&g[0], &old, &sb);
	img_index(&g[1], &old, &sb);

	/* undamaged, both images must read back exactly */
	for (int i = 0; i < 2; i++) {
		struct counts z = { 0 };
		cr_assert_geq(rel_image_restore(&g[i].im, path), 0);
		cr_assert_eq(judge(path, &o, &l, &g[i], seed, R_DATA, false,
				   "undamaged", &z), 0);
		cr_assert_eq(z.intact, 1, "undamaged image %d does not read back", i);
	}
	fprintf(stderr, "rel: corrupt used blocks clean super=%u journal=%u ckpt=%u "
		"data=%u, unclean super=%u journal=%u ckpt=%u data=%u\n",
		g[0].nused[0], g[0].nused[1], g[0].nused[2], g[0].nused[3],
		g[1].nused[0], g[1].nused[1], g[1].nused[2], g[1].nused[3]);

	for (int i = 0; i < 2 && c.trials < target; i++) {
		uint64_t per = (target + 1) / 2;
		enum region rs[R_N];
		uint32_t nr = 0;

		/* the regions with used blocks: a clean close gives the
		 * journal back (docs/space.md, "At close"), so CLEAN has
		 * none there */
		for (int r = 0; r < R_N; r++)
			if (g[i].nused[r])
				rs[nr++] = (enum region)r;
		cr_assert_geq(nr, R_N - 1);
		cr_assert_geq(rel_image_restore(&g[i].im, path), 0);
		for (uint64_t n = 0; n < per; n++)
			trial(path, &o, &l, &g[i], &old, seed, &st,
			      rs[n % nr], (enum ckind)((n / nr) % K_N),
			      c.trials, &c);
	}
	fprintf(stderr, "rel: corrupt super=%llu journal=%llu ckpt=%llu data=%llu "
		"flip=%llu zero=%llu stale=%llu | open_failed=%llu "
		"read_errors=%llu rolled_back=%llu intact=%llu\n",
		(unsigned long long)c.per_region[0], (unsigned long long)c.per_region[1],
		(unsigned long long)c.per_region[2], (unsigned long long)c.per_region[3],
		(unsigned long long)c.per_kind[0], (unsigned long long)c.per_kind[1],
		(unsigned long long)c.per_kind[2], (unsigned long long)c.open_failed,
		(unsigned long long)c.read_errors, (unsigned long long)c.rolled_back,
		(unsigned long long)c.intact);
	fprintf(stderr, "rel: corrupt open_failed by region: super=%llu "
		"journal=%llu ckpt=%llu data=%llu\n",
		(unsigned long long)c.open_failed_region[0],
		(unsigned long long)c.open_failed_region[1],
		(unsigned long long)c.open_failed_region[2],
		(unsigned long long)c.open_failed_region[3]);
	rel_report("corrupt", "trials", c.trials, c.bad, seed);
	cr_assert_eq(c.bad, 0, "%llu violations (replay with COIL_REL_SEED=0x%016llx)",
		     (unsigned long long)c.bad, (unsigned long long)seed);
	cr_assert_geq(c.trials, target * 9 / 10);
	img_free(&g[0]);
	img_free(&g[1]);
	rel_image_free(&old);
	unlink(path);
	munmap((void *)t, sizeof(*t));
}
