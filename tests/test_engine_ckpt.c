/* tests/test_engine_ckpt.c — each checkpoint sizes its working memory to
 * its snapshot (engine/log/ckpt.c, struct ckpt_mem): the metadata growing and
 * shrinking between checkpoints, and writers changing it while a checkpoint
 * sizes its snapshot, still give a checkpoint that reopens to exactly what
 * was written; the snapshot's lock hold is reported.  The snapshot copies
 * each blob's descriptor (a raw blob over 8 KiB is referenced instead): a
 * checkpoint encodes every kind of descriptor right while writers drop the
 * blobs it copied.  A checkpoint taken while a chunk is applied only in part
 * frees no segment a record after its replay point still needs, and one
 * that already holds a re-created name replays the older create. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"

#define OBJ_LEN (8u << 20)

/* 4 KiB writes at random 4 KiB offsets: each a blob and an extent of its
 * own, so the extent count (and the checkpoint) grows with the writes. */
static void scatter(coil_obj *h, uint8_t *model, unsigned n, uint64_t *rng)
{
	uint8_t buf[4096];

	for (unsigned i = 0; i < n; i++) {
		uint64_t off = (tu_xorshift(rng) % (OBJ_LEN / 4096)) * 4096;

		for (unsigned k = 0; k < sizeof(buf); k++)
			buf[k] = (uint8_t)(tu_xorshift(rng) >> 24);
		cr_assert_eq(coil_pwrite(h, buf, sizeof(buf), off), 4096);
		memcpy(model + off, buf, sizeof(buf));
	}
}

static void verify(coil_store *s, const uint8_t *model, uint64_t size)
{
	uint8_t *got = malloc(OBJ_LEN);
	coil_obj *h;
	uint64_t sz;

	cr_assert_not_null(got);
	cr_assert_eq(coil_obj_open(s, "o", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &sz), 0);
	cr_assert_eq(sz, size);
	cr_assert_eq(coil_pread(h, got, size, 0), (int64_t)size);
	cr_assert(memcmp(got, model, size) == 0, "contents differ after reopen");
	cr_assert_eq(coil_obj_close(h), 0);
	free(got);
}

/* A new uncompressed store with object "o" of OBJ_LEN bytes (a hole), open
 * in *@h. */
static coil_store *new_store(const char *name, char *path, size_t plen,
			     struct coil_options *o, coil_obj **h)
{
	coil_store *s;

	et_path(path, plen, name);
	et_opts(o, path);
	o->compression = "none";
	cr_assert_eq(coil_open(path, o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, h), 0);
	cr_assert_eq(coil_obj_truncate(*h, OBJ_LEN), 0);
	return s;
}

Test(engine_ckpt, memory_kept_across_growing_and_shrinking_metadata,
     .timeout = 120)
{
	char path[256], js[16384];
	struct coil_options o;
	uint8_t *model = calloc(1, OBJ_LEN);
	uint64_t rng = 0x9e3779b97f4a7c15ull, size = OBJ_LEN;
	coil_store *s;
	coil_obj *h;

	cr_assert_not_null(model);
	s = new_store("ckpt-mem", path, sizeof(path), &o, &h);
	/* grow: each checkpoint has more extents than the buffers held */
	for (unsigned round = 1; round <= 4; round++) {
		scatter(h, model, 200 * round, &rng);
		cr_assert_eq(ckpt_write(s, false), 0);
	}
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"checkpoint\"", "snapshot_lock_ns_last"), 0,
		     "%s", js);
	cr_assert_geq(json_u64(js, "\"checkpoint\"", "snapshot_lock_ns_max"),
		      json_u64(js, "\"checkpoint\"", "snapshot_lock_ns_last"));
	/* shrink: a smaller checkpoint in the larger buffers must not carry
	 * a stale tail */
	size = OBJ_LEN / 4;
	cr_assert_eq(coil_obj_truncate(h, size), 0);
	memset(model + size, 0, OBJ_LEN - size);
	cr_assert_eq(ckpt_write(s, false), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);

	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	verify(s, model, size);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	/* what reopened came from the checkpoint, not a replay */
	cr_assert_eq(json_u64(js, "\"journal\"", "replayed_records"), 0, "%s", js);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(model);
}

struct writer {
	coil_store *s;
	uint8_t *model;
	atomic_bool stop;
	unsigned writes;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t rng = 0xdeadbeefcafef00dull;
	coil_obj *h;

	cr_assert_eq(coil_obj_open(w->s, "o", 0, &h), 0);
	while (!atomic_load(&w->stop)) {
		scatter(h, w->model, 16, &rng);
		w->writes += 16;
	}
	cr_assert_eq(coil_obj_close(h), 0);
	return NULL;
}

/* The metadata grows while checkpoints size their snapshot (counted under
 * mlock, grown outside it, counted again): every checkpoint is whole. */
Test(engine_ckpt, checkpoints_while_writers_grow_the_map, .timeout = 180)
{
	char path[256];
	struct coil_options o;
	struct writer w = { 0 };
	pthread_t t;
	coil_store *s;
	coil_obj *h;

	w.model = calloc(1, OBJ_LEN);
	cr_assert_not_null(w.model);
	s = new_store("ckpt-race", path, sizeof(path), &o, &h);
	cr_assert_eq(coil_obj_close(h), 0);
	w.s = s;
	cr_assert_eq(pthread_create(&t, NULL, writer_main, &w), 0);
	for (int i = 0; i < 40; i++)
		cr_assert_eq(ckpt_write(s, false), 0);
	atomic_store(&w.stop, true);
	pthread_join(t, NULL);
	cr_assert_gt(w.writes, 0);
	/* the last checkpoint is taken with nothing in flight: reopen from
	 * it alone and compare */
	cr_assert_eq(ckpt_write(s, false), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	verify(s, w.model, OBJ_LEN);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(w.model);
}

/* One write of a kind the snapshot handles differently: a 4 KiB raw blob
 * (one checksum, copied), a 64 KiB raw blob (16 checksums, referenced), a
 * 64 KiB compressible one (zstd: two checksums, copied), or 1000 bytes
 * inside an older extent (the map splits it; both halves share a blob). */
static void mixed_write(coil_obj *h, uint8_t *model, uint64_t *rng)
{
	uint8_t buf[65536];
	uint64_t r = tu_xorshift(rng), off;
	uint32_t len;

	switch (r % 4) {
	case 0:
		len = 4096;
		off = (tu_xorshift(rng) % (OBJ_LEN / len)) * len;
		break;
	case 3:
		len = 1000;
		off = tu_xorshift(rng) % (OBJ_LEN - len);
		break;
	default:
		len = 65536;
		off = (tu_xorshift(rng) % (OBJ_LEN / len)) * len;
		break;
	}
	for (uint32_t k = 0; k < len; k++)
		buf[k] = r % 4 == 2 ? (uint8_t)(k / 512 + r) :
				      (uint8_t)(tu_xorshift(rng) >> 24);
	cr_assert_eq(coil_pwrite(h, buf, len, off), (int64_t)len);
	memcpy(model + off, buf, len);
}

static void *mixed_writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t rng = 0x0123456789abcdefull;
	coil_obj *h;

	cr_assert_eq(coil_obj_open(w->s, "o", 0, &h), 0);
	while (!atomic_load(&w->stop)) {
		mixed_write(h, w->model, &rng);
		w->writes++;
	}
	cr_assert_eq(coil_obj_close(h), 0);
	return NULL;
}

Test(engine_ckpt, every_descriptor_kind_while_writers_drop_blobs,
     .timeout = 180)
{
	char path[256], js[16384];
	struct coil_options o;
	struct writer w = { 0 };
	uint64_t rng = 0x5555aaaa5555aaaaull;
	pthread_t t;
	coil_store *s;
	coil_obj *h;

	w.model = calloc(1, OBJ_LEN);
	cr_assert_not_null(w.model);
	et_path(path, sizeof(path), "ckpt-kinds");
	et_opts(&o, path);
	o.compression = "zstd:1";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "o", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_obj_truncate(h, OBJ_LEN), 0);
	for (int i = 0; i < 256; i++)
		mixed_write(h, w.model, &rng);
	cr_assert_eq(coil_obj_close(h), 0);
	w.s = s;
	cr_assert_eq(pthread_create(&t, NULL, mixed_writer_main, &w), 0);
	for (int i = 0; i < 30; i++)
		cr_assert_eq(ckpt_write(s, false), 0);
	atomic_store(&w.stop, true);
	pthread_join(t, NULL);
	cr_assert_gt(w.writes, 0);
	cr_assert_eq(ckpt_write(s, false), 0);
	/* all three kinds were there to encode */
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	/* with nothing in flight, the running totals that admission checks
	 * against the checkpoint area give exactly what was written
	 * (bytes_written sums every checkpoint: take this one's share) */
	{
		uint64_t before = json_u64(js, "\"checkpoint\"", "bytes_written");
		uint64_t mirror = json_u64(js, "\"checkpoint\"",
					   "mirror_bytes_written");

		/* a whole checkpoint, not a delta of what changed */
		pthread_mutex_lock(&s->mlock);
		s->ck_base_next = true;
		pthread_mutex_unlock(&s->mlock);
		cr_assert_eq(ckpt_write(s, false), 0);
		cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
		/* less the copy written to the mirror */
		mirror = json_u64(js, "\"checkpoint\"",
				  "mirror_bytes_written") - mirror;
		cr_assert_eq(json_u64(js, "\"checkpoint\"", "bytes_written") -
				     before - mirror - 4096,
			     json_u64(js, "\"checkpoint\"", "metadata_bytes"),
			     "%s", js);
	}
	cr_assert_gt(json_u64(js, "\"compression\"", "blobs_zstd"), 0, "%s", js);
	cr_assert_gt(json_u64(js, "\"compression\"", "blobs_raw"), 0, "%s", js);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	verify(s, w.model, OBJ_LEN);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"journal\"", "replayed_records"), 0, "%s", js);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(w.model);
}

/* ---- a checkpoint between two entries of one chunk ---------------------- */

#define MIB (1u << 20)

static void nop_apply(struct coil_store *s, struct jent *e)
{
	(void)s;
	(void)e;
}

static void nop_done(struct coil_store *s, struct jent *e, int res)
{
	(void)s;
	(void)e;
	(void)res;
}

/* Wait until ticket @t's entry is ready (or already committed). */
static void wait_ready(struct coil_store *s, uint64_t t)
{
	for (;;) {
		bool ready;

		pthread_mutex_lock(&s->jlock);
		ready = t < s->head_ticket || s->jslot[t % ENGINE_JSLOTS];
		pthread_mutex_unlock(&s->jlock);
		if (ready)
			return;
		usleep(100);
	}
}

/* A PENDING segment a record after the applied point emptied, or
 * UINT32_MAX. */
static uint32_t pending_past_applied(struct coil_store *s)
{
	uint32_t found = UINT32_MAX;

	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < s->nseg && found == UINT32_MAX; i++)
		if (s->segs[i].state == SEG_PENDING &&
		    s->segs[i].pending_lin > s->applied_end_lin)
			found = i;
	pthread_mutex_unlock(&s->mlock);
	return found;
}

/* The child builds one chunk [F0 W1 W1' F2]: F0 holds the reorder ring's
 * head until W1 (1 MiB) and W1' (its overwrite) are ready, so all four go
 * out together; F2 stands for a write whose data is still on its way, so
 * the drain applies F0, W1 and W1' and stops.  W1's segments are empty
 * (PENDING) while the applied point is still before the chunk.  A
 * checkpoint now, then Z written and synced, then kill -9: replay starts
 * before the chunk and verifies W1's blobs, so the checkpoint must not have
 * freed (discarded) their segment, or replay stops at W1 and loses Z. */
static void partial_chunk_child(const char *path, struct coil_options *o,
				const uint8_t *w1, const uint8_t *w2,
				const uint8_t *z)
{
	static struct jent f0, f2;
	struct counter c = COUNTER_INIT;
	struct coil_store *s;
	coil_obj *hx, *hz;
	uint32_t seg;

	if (coil_open(path, o, &s) || coil_obj_open(s, "X", COIL_CREATE, &hx) ||
	    coil_sync(s))
		_exit(10);
	f0.apply = f2.apply = nop_apply;
	f0.done = f2.done = nop_done;
	f0.ticket = journal_ticket(s);
	counter_add(&c);
	if (coil_write(hx, w1, MIB, 0, count_cb, &c))
		_exit(11);
	wait_ready(s, f0.ticket + 1);
	counter_add(&c);
	if (coil_write(hx, w2, MIB, 0, count_cb, &c))
		_exit(11);
	wait_ready(s, f0.ticket + 2);
	f2.ticket = journal_ticket(s);
	f2.data_pending = true;
	journal_ready(s, &f2);
	journal_ready(s, &f0);
	counter_wait(&c);
	seg = pending_past_applied(s);
	if (seg == UINT32_MAX)
		_exit(12); /* the scenario was not built */
	if (ckpt_wait(s))
		_exit(13);
	if (s->segs[seg].state != SEG_PENDING)
		_exit(14); /* freed under a record replay still verifies */
	journal_data_done(s, &f2, 0);
	if (coil_obj_open(s, "Z", COIL_CREATE, &hz) ||
	    coil_pwrite(hz, z, 65536, 0) != 65536 || coil_sync(s))
		_exit(15);
	kill(getpid(), SIGKILL);
	_exit(16);
}

Test(engine_ckpt, partly_applied_chunk_keeps_what_replay_verifies,
     .timeout = 120)
{
	char path[256];
	struct coil_options o;
	uint8_t *w1 = malloc(MIB), *w2 = malloc(MIB), *z = malloc(65536);
	uint8_t *got = malloc(MIB);
	coil_store *s;
	coil_obj *h;
	pid_t pid;
	int st;

	cr_assert(w1 && w2 && z && got);
	et_path(path, sizeof(path), "ckpt-partial");
	et_opts(&o, path);
	o.compression = "none";
	et_fill(w1, MIB, 1, 0);
	et_fill(w2, MIB, 2, 0);
	et_fill(z, 65536, 3, 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		partial_chunk_child(path, &o, w1, w2, z);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "child exited with %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "X", 0, &h), 0);
	cr_assert_eq(coil_pread(h, got, MIB, 0), MIB);
	cr_assert(memcmp(got, w2, MIB) == 0, "X does not hold W1'");
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_obj_open(s, "Z", 0, &h), 0,
		     "the synced object Z was lost");
	cr_assert_eq(coil_pread(h, got, 65536, 0), 65536);
	cr_assert(memcmp(got, z, 65536) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(w1);
	free(w2);
	free(z);
	free(got);
}

/* Create "a", remove it, create "a" again while an entry (F0) ahead of them
 * holds the reorder ring: the object table changes at once, the records
 * wait.  A checkpoint now holds only the second "a" and replays from before
 * all three records.  Then "b" is written and synced, kill -9: replay meets
 * CREATE of the first "a" while the second holds the name, and must go on,
 * or "b" is lost. */
static void recreate_child(const char *path, struct coil_options *o,
			   const uint8_t *data)
{
	static struct jent f0;
	struct coil_store *s;
	coil_obj *h;

	if (coil_open(path, o, &s) || coil_sync(s))
		_exit(10);
	f0.apply = nop_apply;
	f0.done = nop_done;
	f0.ticket = journal_ticket(s);
	if (coil_obj_open(s, "a", COIL_CREATE, &h) || coil_obj_close(h) ||
	    coil_obj_remove(s, "a") ||
	    coil_obj_open(s, "a", COIL_CREATE, &h) || coil_obj_close(h))
		_exit(11);
	if (ckpt_write(s, false))
		_exit(12);
	journal_ready(s, &f0);
	if (coil_obj_open(s, "b", COIL_CREATE, &h) ||
	    coil_pwrite(h, data, 4096, 0) != 4096 || coil_sync(s))
		_exit(13);
	kill(getpid(), SIGKILL);
	_exit(14);
}

Test(engine_ckpt, replay_skips_a_create_whose_name_was_reused,
     .timeout = 60)
{
	char path[256];
	struct coil_options o;
	uint8_t data[4096], got[4096];
	coil_store *s;
	coil_obj *h;
	uint64_t size;
	pid_t pid;
	int st;

	et_path(path, sizeof(path), "ckpt-recreate");
	et_opts(&o, path);
	et_fill(data, sizeof(data), 5, 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		recreate_child(path, &o, data);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		  "child exited with %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	o.flags &= ~COIL_CREATE;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "b", 0, &h), 0, "the synced \"b\" was lost");
	cr_assert_eq(coil_pread(h, got, sizeof(got), 0), 4096);
	cr_assert(memcmp(got, data, sizeof(got)) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_obj_open(s, "a", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
