/* tests/test_optmerge.c — the optimizer's merges: the small blobs of a
 * page store (4 KiB writes at shuffled offsets of one object) become one
 * blob per 64 KiB window of the object.
 *
 *   merges     packed pages, then coil_optimize: the object's blobs fall to
 *              about one per window, stored bytes fall, merges counted,
 *              every byte reads back, also after a reopen; live bytes
 *              match a recount; a second call merges nothing
 *   spread     the pages packed in four rounds into four segments, then
 *              calls with a budget of one segment: a window's members in
 *              segments that are not the pass's victims are merged too,
 *              and the segments they emptied are freed, not left behind
 *   sparse     windows with pages missing, a page's middle overwritten by a
 *              smaller write (an extent into part of a blob) and a write
 *              across two windows: the pages merge around them, every
 *              byte reads back, also after a reopen
 *   clones     the object cloned before the call: its blobs are shared,
 *              so nothing merges (a merge for one object would keep the
 *              old blobs for the other); both read back
 *   cas_seam   the pass is held after its first batch is encoded while
 *              the foreground overwrites a page of every window,
 *              truncates the object and removes another: the newer data
 *              wins, stale skips counted, the same after a reopen
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
#include "engine/cleaner.h"
#include "engine/log/ckpt.h"
#include "engine/pack.h"
#include "engine/place/blob.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"
#include "tests/opt_seam.h"
#include "tests/test_util.h"

#define KiB (1u << 10)
#define PAGE (4u * KiB)
#define NPAGES 512u             /* 2 MiB: 32 windows of 64 KiB */
#define WIN_PAGES 16u

static coil_store *open_store(const char *path, bool create)
{
	coil_store *s;

	cr_assert_eq(et_open_sized(path, 128ull << 20, create, &s), 0);
	return s;
}

/* Reopen the store at @path and check "db/pages" against @model and the
 * segments' live counts against a walk of the maps. */
static coil_store *reopen_checked(const char *path, const uint8_t *model,
				  uint64_t size)
{
	coil_store *s = open_store(path, false);

	et_check_obj(s, "db/pages", model, size);
	cr_assert_eq(cleaner_check_live(s), 0);
	return s;
}

static uint64_t stat_of(coil_store *s, const char *section, const char *key)
{
	static char js[1 << 16];

	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	return json_u64(js, section, key);
}

/* A page's text (compressible, different for every page and @gen). */
static void page_fill(uint8_t *p, uint32_t page, uint32_t gen)
{
	tu_text_fill(p, PAGE, ((uint64_t)page << 8 | gen) * 0x9e3779b97f4a7c15ull
				      + 7);
}

static void shuffle(uint32_t *v, uint32_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j, t;

		tu_xorshift(&x);
		j = (uint32_t)(x % (i + 1));
		t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
}

/* Pages @order[a, z) of @name, one 4 KiB write each, also into @model. */
static void write_pages(coil_store *s, const char *name, const uint32_t *order,
			uint32_t a, uint32_t z, uint8_t *model)
{
	coil_obj *h;

	cr_assert_eq(coil_obj_open(s, name, COIL_CREATE, &h), 0);
	for (uint32_t i = a; i < z; i++) {
		uint8_t *p = model + (size_t)order[i] * PAGE;

		page_fill(p, order[i], 0);
		cr_assert_eq(coil_pwrite(h, p, PAGE, (uint64_t)order[i] * PAGE),
			     PAGE);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_sync(s), 0);
}

/* The distinct blobs @name's extents map (a blob in memory by its
 * descriptor, one on the device by its place: a reopen makes one
 * descriptor per extent). */
static uint32_t blobs_of(coil_store *s, const char *name)
{
	uint64_t *key = calloc(4 * NPAGES, sizeof(*key));
	struct extmap_iter it;
	const struct ext *e;
	struct object *o;
	uint32_t n = 0, d = 0;

	pthread_mutex_lock(&s->mlock);
	o = objtab_find_name(s, name, strlen(name));
	cr_assert(o, "no %s", name);
	extmap_iter_init(&it, &o->map, 0);
	while ((e = extmap_iter_next(&it))) {
		cr_assert_lt(n, 4 * NPAGES);
		key[n++] = blobd_is_mem(e->b) ? (uint64_t)(uintptr_t)e->b :
						e->b->dev_off;
	}
	pthread_mutex_unlock(&s->mlock);
	for (uint32_t i = 0; i < n; i++) {
		bool seen = false;

		for (uint32_t j = 0; j < i && !seen; j++)
			seen = key[j] == key[i];
		d += !seen;
	}
	free(key);
	return d;
}

/* Sealed or pending segments holding nothing: what a checkpoint frees
 * must not stay behind after a call (it ends with one). */
static uint32_t empty_held(coil_store *s)
{
	uint32_t n = 0;

	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++) {
		const struct seg *g = &s->segs[i];

		n += (g->state == SEG_SEALED || g->state == SEG_PENDING) &&
		     g->live == 0;
	}
	pthread_mutex_unlock(&s->mlock);
	return n;
}

static uint32_t *page_order(uint64_t seed)
{
	uint32_t *order = malloc(NPAGES * sizeof(*order));

	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = i;
	shuffle(order, NPAGES, seed);
	return order;
}

Test(optmerge, merges, .timeout = 120)
{
	uint8_t *model = malloc((size_t)NPAGES * PAGE);
	uint32_t *order = page_order(1);
	struct coil_optimize_opts opts = { .flags = COIL_OPTIMIZE_NO_DICTS };
	struct coil_optimize_report rep;
	uint64_t s0, s1, merges;
	uint32_t b0, b1;
	char path[256];
	coil_store *s;

	et_path(path, sizeof(path), "optmerge");
	s = open_store(path, true);
	write_pages(s, "db/pages", order, 0, NPAGES, model);
	b0 = blobs_of(s, "db/pages");
	s0 = stat_of(s, "\"space\"", "stored");
	cr_assert_eq(coil_optimize(s, &opts, &rep), 0);
	b1 = blobs_of(s, "db/pages");
	s1 = stat_of(s, "\"space\"", "stored");
	merges = stat_of(s, "\"optimizer\"", "merges");
	cr_log_info("blobs %u -> %u, stored %llu -> %llu, merges %llu "
		    "(%llu blobs)", b0, b1, (unsigned long long)s0,
		    (unsigned long long)s1, (unsigned long long)merges,
		    (unsigned long long)stat_of(s, "\"optimizer\"",
						"merged_blobs"));
	cr_assert_eq(b0, NPAGES);
	cr_assert_leq(b1, NPAGES / WIN_PAGES + NPAGES / 64,
		      "%u blobs left of %u", b1, NPAGES);
	cr_assert_geq(merges, NPAGES / WIN_PAGES - NPAGES / 64);
	cr_assert_lt(s1, s0 - s0 / 10, "stored %llu -> %llu",
		     (unsigned long long)s0, (unsigned long long)s1);
	cr_assert_eq(rep.errors, 0);
	cr_assert_eq(rep.stale_skips, 0);
	cr_assert_eq(rep.saved_bytes, s0 - s1);
	et_check_obj(s, "db/pages", model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(empty_held(s), 0);

	/* the merged blobs are marked: nothing to merge the second time */
	cr_assert_eq(coil_optimize(s, &opts, &rep), 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(stat_of(s, "\"optimizer\"", "merges"), merges);
	cr_assert_eq(coil_close(s), 0);

	s = reopen_checked(path, model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(blobs_of(s, "db/pages"), b1);
	cr_assert_eq(stat_of(s, "\"space\"", "stored"), s1);
	cr_assert_eq(coil_optimize(s, &opts, &rep), 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(stat_of(s, "\"optimizer\"", "merges"), 0);
	cr_assert_eq(coil_close(s), 0);
	free(model);
	free(order);
}

Test(optmerge, spread, .timeout = 120)
{
	uint8_t *model = malloc((size_t)NPAGES * PAGE);
	uint32_t *order = page_order(2);
	struct coil_optimize_opts opts = { .flags = COIL_OPTIMIZE_NO_DICTS,
					   .budget_bytes = 1 };
	struct coil_optimize_report rep;
	uint32_t held[4] = { 0 }, nheld = 0, b1;
	uint64_t merges0;
	char path[256];
	coil_store *s;
	int rc, calls = 0;

	et_path(path, sizeof(path), "optmerge-spread");
	s = open_store(path, true);
	/* four rounds, each packed into a segment of its own: a window's
	 * pages are spread over the four */
	for (uint32_t r = 0; r < 4; r++) {
		uint32_t a = r * NPAGES / 4, z = (r + 1) * NPAGES / 4;

		write_pages(s, "db/pages", order, a, z, model);
		cr_assert_eq(pack_now(s), 0);
		pthread_mutex_lock(&s->mlock);
		held[nheld] = s->active;
		cr_assert(seg_seal_active(s));
		pthread_mutex_unlock(&s->mlock);
		cr_assert_neq(held[nheld], UINT32_MAX);
		cr_assert(nheld == 0 || held[nheld] != held[nheld - 1]);
		nheld++;
	}
	/* one victim a call: the first call's merges take members from
	 * the three segments it did not pick */
	rc = coil_optimize(s, &opts, &rep);
	cr_assert_eq(rc, 1);
	merges0 = stat_of(s, "\"optimizer\"", "merges");
	cr_assert_geq(merges0, NPAGES / WIN_PAGES / 2,
		      "the first pass merged %llu windows",
		      (unsigned long long)merges0);
	pthread_mutex_lock(&s->mlock);
	{
		uint64_t live = 0;

		for (uint32_t i = 0; i < nheld; i++)
			live += s->segs[held[i]].state == SEG_SEALED ?
					s->segs[held[i]].live : 0;
		/* the pass's victim and the members taken from the others */
		cr_assert_lt(live, (uint64_t)NPAGES * PAGE / 2,
			     "%llu bytes still where the pages were",
			     (unsigned long long)live);
	}
	pthread_mutex_unlock(&s->mlock);
	/* a pass leaves what it emptied to the next checkpoint while space
	 * is plentiful: the members must not hold their segments from it */
	cr_assert_eq(ckpt_wait(s), 0);
	cr_assert_eq(empty_held(s), 0, "emptied segments left unfreed");
	et_check_obj(s, "db/pages", model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(cleaner_check_live(s), 0);
	while (rc == 1 && calls++ < 64)
		rc = coil_optimize(s, &opts, &rep);
	cr_assert_eq(rc, 0);
	b1 = blobs_of(s, "db/pages");
	cr_log_info("spread: blobs %u, merges %llu (first call %llu)", b1,
		    (unsigned long long)stat_of(s, "\"optimizer\"", "merges"),
		    (unsigned long long)merges0);
	cr_assert_leq(b1, NPAGES / WIN_PAGES + NPAGES / 32);
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < nheld; i++)
		cr_assert(s->segs[held[i]].state == SEG_FREE ||
			  s->segs[held[i]].live == 0 ||
			  s->segs[held[i]].state == SEG_ACTIVE,
			  "segment %u still holds %llu bytes", held[i],
			  (unsigned long long)s->segs[held[i]].live);
	pthread_mutex_unlock(&s->mlock);
	cr_assert_eq(empty_held(s), 0);
	cr_assert_eq(cleaner_check_live(s), 0);
	et_check_obj(s, "db/pages", model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(coil_close(s), 0);

	s = reopen_checked(path, model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(coil_close(s), 0);
	free(model);
	free(order);
}

Test(optmerge, sparse, .timeout = 120)
{
	uint8_t *model = calloc(NPAGES, PAGE);
	uint32_t *order = page_order(4), n = 0;
	struct coil_optimize_opts opts = { .flags = COIL_OPTIMIZE_NO_DICTS };
	struct coil_optimize_report rep;
	uint64_t merges, s0, s1;
	uint8_t *p;
	char path[256];
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "optmerge-sparse");
	s = open_store(path, true);
	/* every third page missing (not the last: the size stays) */
	for (uint32_t i = 0; i < NPAGES; i++)
		if (order[i] % 3 != 1 || order[i] == NPAGES - 1)
			order[n++] = order[i];
	write_pages(s, "db/pages", order, 0, n, model);
	cr_assert_eq(coil_obj_open(s, "db/pages", 0, &h), 0);
	/* the middle of page 42 (its blob stays mapped on both sides) */
	p = model + 42u * PAGE + 1000;
	tu_text_fill(p, 1500, 99);
	cr_assert_eq(coil_pwrite(h, p, 1500, 42u * PAGE + 1000), 1500);
	/* across windows 2 and 3 */
	p = model + 3u * WIN_PAGES * PAGE - 3000;
	tu_text_fill(p, 6000, 98);
	cr_assert_eq(coil_pwrite(h, p, 6000, 3u * WIN_PAGES * PAGE - 3000),
		     6000);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_sync(s), 0);
	s0 = stat_of(s, "\"space\"", "stored");
	cr_assert_eq(coil_optimize(s, &opts, &rep), 0);
	s1 = stat_of(s, "\"space\"", "stored");
	merges = stat_of(s, "\"optimizer\"", "merges");
	cr_log_info("sparse: blobs %u, merges %llu, stored %llu -> %llu",
		    blobs_of(s, "db/pages"), (unsigned long long)merges,
		    (unsigned long long)s0, (unsigned long long)s1);
	cr_assert_geq(merges, NPAGES / WIN_PAGES - 2);
	cr_assert_lt(s1, s0);
	cr_assert_eq(rep.saved_bytes, s0 - s1);
	et_check_obj(s, "db/pages", model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);

	s = reopen_checked(path, model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(coil_optimize(s, &opts, &rep), 0);
	cr_assert_eq(rep.scanned, 0);
	cr_assert_eq(coil_close(s), 0);
	free(model);
	free(order);
}

Test(optmerge, clones, .timeout = 120)
{
	uint8_t *model = malloc((size_t)NPAGES * PAGE);
	uint32_t *order = page_order(5);
	struct coil_optimize_opts opts = { .flags = COIL_OPTIMIZE_NO_DICTS };
	struct coil_optimize_report rep;
	uint64_t s0, s1;
	char path[256];
	coil_store *s;

	et_path(path, sizeof(path), "optmerge-clones");
	s = open_store(path, true);
	write_pages(s, "db/pages", order, 0, NPAGES, model);
	cr_assert_eq(pack_now(s), 0);
	cr_assert_eq(coil_obj_clone(s, "db/pages", "db/copy"), 0);
	s0 = stat_of(s, "\"space\"", "stored");
	cr_assert_eq(coil_optimize(s, &opts, &rep), 0);
	s1 = stat_of(s, "\"space\"", "stored");
	cr_assert_eq(stat_of(s, "\"optimizer\"", "merges"), 0,
		     "blobs two objects share were merged for one");
	cr_assert_leq(s1, s0);
	cr_assert_eq(blobs_of(s, "db/pages"), NPAGES);
	et_check_obj(s, "db/pages", model, (uint64_t)NPAGES * PAGE);
	et_check_obj(s, "db/copy", model, (uint64_t)NPAGES * PAGE);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);
	free(model);
	free(order);
}

Test(optmerge, cas_seam, .timeout = 120)
{
	uint8_t *model = malloc((size_t)NPAGES * PAGE);
	uint8_t *other = malloc((size_t)NPAGES * PAGE);
	uint32_t *order = page_order(3);
	struct coil_optimize_opts opts = { .flags = COIL_OPTIMIZE_NO_DICTS };
	struct seam sm;
	uint64_t size = (uint64_t)NPAGES * PAGE, cut;
	char path[256];
	coil_store *s;
	coil_obj *h;

	et_path(path, sizeof(path), "optmerge-seam");
	s = open_store(path, true);
	write_pages(s, "db/pages", order, 0, NPAGES, model);
	write_pages(s, "db/other", order, 0, NPAGES, other);
	cr_assert_eq(seam_hold(&sm, s, &opts), 0);

	/* The first batch is encoded and held (the pass planned every
	 * window before it): a page of every window overwritten, the last
	 * quarter of the object and a page's tail cut, the other object
	 * removed. */
	cr_assert_eq(coil_obj_open(s, "db/pages", 0, &h), 0);
	for (uint32_t w = 0; w < NPAGES / WIN_PAGES; w++) {
		uint32_t pg = w * WIN_PAGES + 5;
		uint8_t *p = model + (size_t)pg * PAGE;

		page_fill(p, pg, 1);
		cr_assert_eq(coil_pwrite(h, p, PAGE, (uint64_t)pg * PAGE),
			     PAGE);
	}
	cut = size * 3 / 4 - 1000;
	cr_assert_eq(coil_obj_truncate(h, cut), 0);
	size = cut;
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_obj_remove(s, "db/other"), 0);
	cr_assert_eq(seam_release(&sm), 0);
	cr_assert_geq(sm.rc, 0);
	cr_log_info("seam: merges %llu, stale %llu",
		    (unsigned long long)stat_of(s, "\"optimizer\"", "merges"),
		    (unsigned long long)sm.rep.stale_skips);
	cr_assert_gt(stat_of(s, "\"optimizer\"", "merges"), 0);
	cr_assert_gt(sm.rep.stale_skips, 0,
		     "no merged page met the foreground's changes");
	et_check_obj(s, "db/pages", model, size);
	cr_assert_eq(cleaner_check_live(s), 0);
	cr_assert_eq(coil_close(s), 0);

	/* replay decides each member as the live path did */
	s = reopen_checked(path, model, size);
	cr_assert_eq(coil_obj_open(s, "db/other", 0, &h), -ENOENT);
	cr_assert_eq(coil_close(s), 0);
	free(model);
	free(other);
	free(order);
}
