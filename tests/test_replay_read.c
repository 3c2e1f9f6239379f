/* tests/test_replay_read.c — how replay reads the journal (recovery.c,
 * jwindow): the chain from the replay point is read once, in large pieces,
 * and kept for the pass that applies it; a chain that wraps at the ring's
 * end is read in two parts.
 *
 *   wrapped_chain_read_once  a child writes random 4 KiB pages (their data
 *                            rides in the journal), syncing every few, until
 *                            the chain since the durable checkpoint holds
 *                            more than REPLAY_MIN bytes and wraps, then
 *                            leaves without closing.  The open replays it:
 *                            every synced page reads back as last written;
 *                            replay's reads of the journal are about one
 *                            per 2 MiB of chain, and their bytes the chain
 *                            plus one read's overshoot per part (read in
 *                            1 MiB pieces once per pass, as before, they
 *                            were two reads per MiB); the walk that read
 *                            them (on its own thread while the checkpoint
 *                            loaded) is timed in the stats.  That walk
 *                            also checked every chunk whole, so the apply
 *                            hashed none again; the replayed small writes'
 *                            blobs pointed into the journal's image, and
 *                            those still in memory at the end were copied
 *                            before it went (every page read after the
 *                            open, under ASan too, is from the copies). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coil.h"
#include "engine/store.h"
#include "tests/engine_test_util.h"
#include "tests/test_util.h"

#define PAGES 1024u
#define PAGE 4096u
#define SYNC_EVERY 16u
#define REPLAY_MIN (3ull << 20)
#define WRITES_MAX 200000u

/* The content of write @i (to page @p). */
static void page_of(uint8_t *buf, uint32_t i, uint32_t p)
{
	et_fill(buf, PAGE, ((uint64_t)i << 20) | p, 0);
}

/* Does the chain since the durable checkpoint hold at least REPLAY_MIN
 * bytes and wrap at the ring's end (or its allocated part's)? */
static bool chain_wraps(coil_store *s)
{
	bool yes;

	pthread_mutex_lock(&s->jlock);
	yes = s->j_head_lin - s->j_tail_lin >= REPLAY_MIN &&
	      s->j_wrap_len && s->j_wrap_lin >= s->j_tail_lin;
	pthread_mutex_unlock(&s->jlock);
	return yes;
}

/* In a child: write until the chain wraps, syncing every SYNC_EVERY, and
 * leave after a sync; the number of writes goes to @fd.  Exit status 0,
 * or where it failed. */
static void child(const char *path, int fd)
{
	static uint8_t buf[PAGE];
	uint64_t seed = 0x7e5a;
	coil_store *s;
	coil_obj *h;
	uint32_t i;

	if (et_open_sized(path, 256ull << 20, false, &s) != 0 ||
	    coil_obj_open(s, "pages", 0, &h) != 0)
		_exit(2);
	for (i = 0; i < WRITES_MAX; i++) {
		uint32_t p = (uint32_t)(tu_xorshift(&seed) % PAGES);

		page_of(buf, i, p);
		if (coil_pwrite(h, buf, PAGE, (uint64_t)p * PAGE) != PAGE)
			_exit(3);
		if ((i + 1) % SYNC_EVERY)
			continue;
		if (coil_sync(s) != 0)
			_exit(4);
		if (chain_wraps(s))
			break;
	}
	if (i == WRITES_MAX)
		_exit(5);
	i++;
	if (write(fd, &i, sizeof(i)) != (ssize_t)sizeof(i))
		_exit(6);
	_exit(0);
}

Test(replay_read, wrapped_chain_read_once, .timeout = 300)
{
	static uint8_t buf[PAGE], got[PAGE];
	static uint32_t last[PAGES];
	static char js[65536];
	uint64_t seed = 0x7e5a, replayed, read_bytes, reads, walk_ns;
	uint64_t chunks, known, lent, copied;
	char path[256];
	coil_store *s;
	coil_obj *h;
	uint32_t n = 0;
	int fds[2], st;
	pid_t pid;

	et_path(path, sizeof(path), "replay-read");
	cr_assert_eq(et_open_sized(path, 256ull << 20, true, &s), 0);
	cr_assert_eq(coil_obj_open(s, "pages", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		child(path, fds[1]);
	}
	close(fds[1]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	cr_assert_eq(read(fds[0], &n, sizeof(n)), (ssize_t)sizeof(n));
	close(fds[0]);
	for (uint32_t k = 0; k < PAGES; k++)
		last[k] = UINT32_MAX;
	for (uint32_t i = 0; i < n; i++)
		last[tu_xorshift(&seed) % PAGES] = i;

	cr_assert_eq(et_open_sized(path, 256ull << 20, false, &s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	replayed = json_u64(js, "\"journal\"", "replayed_bytes");
	read_bytes = json_u64(js, "\"journal\"", "replay_journal_read_bytes");
	reads = json_u64(js, "\"journal\"", "replay_journal_reads");
	walk_ns = json_u64(js, "\"journal\"", "replay_walk_ns");
	chunks = json_u64(js, "\"journal\"", "replayed_chunks");
	known = json_u64(js, "\"journal\"", "replay_known_chunks");
	lent = json_u64(js, "\"journal\"", "replay_blobs_lent");
	copied = json_u64(js, "\"journal\"", "replay_blobs_copied");
	cr_log_info("%llu chunks, %llu checked by the walk; %llu blobs lent, "
		    "%llu copied", (unsigned long long)chunks,
		    (unsigned long long)known, (unsigned long long)lent,
		    (unsigned long long)copied);
	cr_log_info("%u writes; replayed %llu bytes of journal, read %llu in "
		    "%llu reads", n, (unsigned long long)replayed,
		    (unsigned long long)read_bytes, (unsigned long long)reads);
	cr_assert_geq(replayed, REPLAY_MIN);
	cr_assert_gt(walk_ns, 0, "the walk of %llu bytes of chain untimed",
		     (unsigned long long)replayed);
	/* Pieces of 2 MiB (recovery.c's REPLAY_WINDOW); each of the two
	 * parts starts with a small probe and may read one piece past what
	 * it needs, and the wrap skipped the bytes before the ring's end (at
	 * most a chunk). */
	cr_assert_leq(reads, replayed / (2ull << 20) + 4,
		      "%llu reads for %llu bytes of chain",
		      (unsigned long long)reads, (unsigned long long)replayed);
	cr_assert_leq(read_bytes, replayed + 2 * (2ull << 20) + (1ull << 20),
		      "replay read %llu bytes for %llu of chain",
		      (unsigned long long)read_bytes,
		      (unsigned long long)replayed);
	/* nothing was damaged and the image held the whole chain */
	cr_assert_gt(chunks, 0);
	cr_assert_eq(known, chunks, "%llu of %llu chunks checked by the walk",
		     (unsigned long long)known, (unsigned long long)chunks);
	/* a page's blob: one each for the writes replayed (some of them
	 * overwritten or packed within the replay) */
	cr_assert_gt(lent, 0);
	cr_assert_leq(copied, lent);
	cr_assert_leq(copied, PAGES, "%llu copies for %u pages",
		      (unsigned long long)copied, PAGES);
	cr_assert_eq(coil_obj_open(s, "pages", 0, &h), 0);
	for (uint32_t p = 0; p < PAGES; p++) {
		if (last[p] == UINT32_MAX)
			continue;
		page_of(buf, last[p], p);
		cr_assert_eq(coil_pread(h, got, PAGE, (uint64_t)p * PAGE),
			     PAGE);
		cr_assert(memcmp(got, buf, PAGE) == 0,
			  "page %u: not write %u", p, last[p]);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}
