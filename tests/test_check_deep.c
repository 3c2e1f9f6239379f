/* test_check_deep: `coil check --deep` and `coil scrub` exit by severity
 * (0 clean, 3 object data damaged, 4 store metadata or accounting damaged
 * or the store does not open) and name what they find; coil_check finds a
 * live-byte count that disagrees with the maps. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "engine/place/segment.h"
#include "engine/store.h"
#include "tests/cli_run.h"
#include "tests/engine_test_util.h"

#define R_LEN (128u << 10)
#define MARK "DEEPCHECK-BLOCK3"

static char path[256];
static uint64_t mark_off; /* where block 3 of "r" is in the file */

/* A store with a raw object "r" (block 3 marked, so its place in the file
 * is found) and a compressed one "z". */
static void build(void)
{
	struct coil_options o;
	uint8_t *r = malloc(R_LEN), *z = malloc(R_LEN), *img;
	coil_store *s;
	coil_obj *h;
	size_t len;

	et_path(path, sizeof(path), "deep");
	et_opts(&o, path);
	o.size = 16ull << 20;
	o.compression = "none";
	et_fill(r, R_LEN, 11, 0);
	memcpy(r + 3 * FMT_BLOCK, MARK, 16);
	et_fill(z, R_LEN, 12, 1);
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "r", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, r, R_LEN, 0), R_LEN);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	o.compression = "zstd";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "z", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, z, R_LEN, 0), R_LEN);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	img = (uint8_t *)cr_slurp(path, &len);
	mark_off = 0;
	for (size_t off = 0; off + FMT_BLOCK <= len; off += FMT_BLOCK)
		if (!memcmp(img + off, MARK, 16))
			mark_off = off;
	cr_assert_neq(mark_off, 0);
	free(img);
	free(r);
	free(z);
}

static void finish(void)
{
	unlink(path);
}

TestSuite(check_deep, .init = build, .fini = finish);

Test(check_deep, clean_store_exits_0)
{
	struct cli_run r = cli_run(path, "check", "--deep", path, NULL);

	cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "no damage"), "%s", r.out);
	cli_run_free(&r);
	r = cli_run(path, "scrub", path, NULL);
	cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "scrubbed 4 blobs"), "%s", r.out);
	cli_run_free(&r);
}

Test(check_deep, data_damage_exits_3_and_names_the_range)
{
	struct cli_run r;

	flip_byte(path, mark_off + 1000);
	r = cli_run(path, "check", "--deep", path, NULL);
	cr_expect_eq(r.status, 3, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "damaged: object 'r' bytes [12288, 16384): "
				"checksum mismatch\n"), "%s", r.out);
	cr_expect(strstr(r.out, "1 damaged ranges (4096 bytes)"), "%s", r.out);
	cli_run_free(&r);
	r = cli_run(path, "scrub", "--rate", "64M", path, NULL);
	cr_expect_eq(r.status, 3, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "damaged: object 'r' bytes [12288, 16384)"),
		  "%s", r.out);
	cli_run_free(&r);
	/* the plain check finds it too, by reading */
	r = cli_run(path, "check", path, NULL);
	cr_expect_eq(r.status, 3, "%s%s", r.out, r.err);
	cli_run_free(&r);
}

Test(check_deep, superblock_damage_exits_4_and_worst_wins)
{
	struct cli_run r;

	flip_byte(path, FMT_BLOCK + 300); /* copy B: still opens from A */
	r = cli_run(path, "check", "--deep", path, NULL);
	cr_expect_eq(r.status, 4, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "damaged: store metadata at device bytes "
				"[4096, 8192): superblock copy B does not "
				"verify\n"), "%s", r.out);
	cli_run_free(&r);
	flip_byte(path, mark_off + 50); /* and data: 4 still */
	r = cli_run(path, "check", "--deep", path, NULL);
	cr_expect_eq(r.status, 4, "%s%s", r.out, r.err);
	cr_expect(strstr(r.out, "damaged: object 'r'"), "%s", r.out);
	cli_run_free(&r);
}

Test(check_deep, store_that_does_not_open_exits_4)
{
	struct cli_run r;

	flip_byte(path, 300);
	flip_byte(path, FMT_BLOCK + 300);
	r = cli_run(path, "check", "--deep", path, NULL);
	cr_expect_eq(r.status, 4, "%s%s", r.out, r.err);
	cr_expect(strstr(r.err, "coil salvage"), "%s", r.err);
	cli_run_free(&r);
	r = cli_run(path, "check", "--deep", "no-such-store", NULL);
	cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
	cli_run_free(&r);
}

struct msgs {
	int acct, data;
	char last[128];
};

static int note(void *arg, const struct coil_damage *d)
{
	struct msgs *m = arg;

	if (d->object)
		m->data++;
	else if (d->len == 0)
		m->acct++;
	snprintf(m->last, sizeof(m->last), "%s", d->what);
	return 0;
}

/* A live-byte count off by one (set through the engine's own struct, as
 * a bug would leave it) is an accounting finding. */
Test(check_deep, accounting_mismatch_is_found)
{
	struct coil_options o;
	struct coil_scrub_info in;
	struct msgs m = { 0 };
	coil_store *s;

	et_opts(&o, path);
	o.flags = COIL_RDONLY;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_check(s, note, &m, &in), 0);
	cr_assert_eq(in.accounting_errors + in.damaged_ranges +
		     in.metadata_errors, 0);
	cr_assert_eq(in.blobs_verified, 4);
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++) {
		if (s->segs[i].live) {
			s->segs[i].live++;
			break;
		}
	}
	pthread_mutex_unlock(&s->mlock);
	cr_assert_eq(coil_check(s, note, &m, &in), 0);
	cr_assert_eq(in.accounting_errors, 1);
	cr_assert_eq(m.acct, 1);
	cr_assert(strstr(m.last, "live bytes"), "%s", m.last);
	cr_assert_eq(coil_scrub_wait(s), -EIO);
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg; i++) {
		if (s->segs[i].live) {
			s->segs[i].live--;
			break;
		}
	}
	pthread_mutex_unlock(&s->mlock);
	cr_assert_eq(coil_check(s, NULL, NULL, &in), 0);
	cr_assert_eq(in.accounting_errors, 0);
	cr_assert_eq(coil_close(s), 0);
}
