/* engine/grow.c — a file store's data area grows in segment steps.
 *
 * A growing store (FMT_INCOMPAT_GROW) records in its superblock how many
 * segments are in use; the layout (journal, checkpoint areas, the largest
 * data area) is sized from the maximum, and the file holds only what has
 * been written or allocated: holes elsewhere.  A step:
 *
 *   1. check the file system has room for the new segments and extend
 *      the file (their blocks are allocated when each first takes writes,
 *      reserve.c: free segments ahead of the writer take no disk), and
 *      allocate the journal's share for the larger store;
 *   2. raise the segment count the next superblock write records
 *      (seg_count_grown: a checkpoint writes it after its fdatasync);
 *   3. hand the segments to the allocator (mlock).
 *
 * A step writes nothing and waits for no fdatasync: three of them (the
 * new blocks, then each superblock copy) in a writer's path cost fio's
 * 1 GiB sequential write into a fresh store two thirds of its rate.  What
 * keeps that safe:
 *   - every write placed in a new segment comes after its fallocate, so
 *     a flush that makes the write durable makes the allocation durable
 *     too (fdatasync covers the file's block map);
 *   - replay accepts a blob in a segment past the durable segment_count
 *     (up to the maximum) when its bytes read back and verify, and raises
 *     the count to hold it (recovery.c); a record whose blocks were never
 *     made durable fails that check and replay stops there, as at any
 *     torn tail;
 *   - open's first checkpoint writes the count replay found (store.c);
 *     those segments are allocated when they first take writes.
 * A crash leaves at most a longer file, whose tail the next step
 * allocates again (fallocate of allocated blocks is a no-op).  A file
 * system that is full fails step 1 with -ENOSPC: nothing changed, the
 * writer that needed the room gets -ENOSPC, and the next write tries
 * again.  When to grow is the space policy's call (cleaner.c,
 * cleaner_grow).  Tests: tests/test_store_grow.c. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/grow.h"
#include "engine/io/wreq.h"
#include "engine/log/ckpt.h"
#include "engine/place/dev.h"
#include "engine/place/reserve.h"
#include "engine/place/segment.h"
#include "engine/store.h"

int grow_truncate(struct coil_store *s, uint32_t keep)
{
	if (!s->grows)
		return 0;
	if (ftruncate(s->fd, (off_t)seg_base(s, keep)) < 0)
		return -errno;
	return 0;
}

uint64_t grow_step_bytes(const struct coil_store *s, uint32_t nseg)
{
	uint64_t quarter = (uint64_t)nseg * s->sb.segment_size / 4;

	return COIL_MIN(GROW_STEP_BYTES, COIL_MAX(GROW_STEP_MIN_BYTES, quarter));
}

uint64_t grow_journal_target(const struct coil_store *s, uint32_t nseg)
{
	uint64_t jlen = s->sb.journal_len;
	uint64_t t = (uint64_t)nseg * s->sb.segment_size / 16;

	t = COIL_ALIGN_UP(t / 4, 1ull << 20); /* a sixty-fourth of the data */
	/* A checkpoint writes all the metadata each time half the journal
	 * is used: a journal of 8 checkpoints keeps that to an eighth of
	 * the journal bytes.  Small writes use the journal for their data
	 * (a block each at queue depth 1): at a sixty-fourth of 96 MiB of
	 * pages, 20,000 page writes took 62 checkpoints of 2.5 MB and
	 * waited for a full journal 17 times.  The metadata part only: the
	 * small writes' blobs a checkpoint also carries (up to 16 MiB) are
	 * bounded by the packer, not by the store's size, and counting
	 * them made a 33 MB page store allocate a 128 MiB journal. */
	t = COIL_MAX(t, COIL_ALIGN_UP(8 * atomic_load(&s->st.ckpt_last_meta),
				      1ull << 20));
	/* In-memory blobs the last checkpoint carried beyond what a packer
	 * that keeps up holds (twice the mark it starts at) are a backlog
	 * of small writes, and each checkpoint writes them again: give it
	 * journal room in the same proportion.  Without this, fio's 4 KiB
	 * random writes into a fresh store took 57 checkpoints carrying
	 * ~10 MB each for 256 MiB of data (93 MiB/s; 141-168 MiB/s with it),
	 * while a QD 1 page store, whose packer keeps up, keeps its 8 MiB. */
	{
		uint64_t all = atomic_load(&s->st.ckpt_last_bytes);
		uint64_t meta = atomic_load(&s->st.ckpt_last_meta);
		uint64_t inl = all > meta ? all - meta : 0;
		uint64_t kept = 2ull * ENGINE_PACK_AT;

		if (inl > kept)
			t = COIL_MAX(t, COIL_ALIGN_UP(8 * inl, 1ull << 20));
	}
	/* What the writers put in the journal in a checkpoint spacing, up
	 * to a quarter of the segments: a store's journal stays in
	 * proportion to its data while it is open. */
	{
		uint64_t rate = atomic_load(&s->j_rate);
		uint64_t cap = (uint64_t)nseg * s->sb.segment_size / 4;
		uint64_t want = cap;

		if (rate < cap / 2)
			want = 2 * rate * (GROW_CKPT_SPACING_NS / 1000000) /
			       1000;
		t = COIL_MAX(t, COIL_ALIGN_UP(COIL_MIN(want, cap), 1ull << 20));
	}
	t = COIL_MAX(t, COIL_MIN(jlen, GROW_JOURNAL_MIN));
	return COIL_MIN(t, jlen);
}

int grow_journal(struct coil_store *s, uint64_t target)
{
	uint64_t have;
	int rc;

	pthread_mutex_lock(&s->jlock);
	have = s->j_alloc;
	pthread_mutex_unlock(&s->jlock);
	if (target <= have)
		return 0;
	rc = reserve_range(s, s->sb.journal_off + have, target - have);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&s->jlock);
	if (target > s->j_alloc)
		s->j_alloc = target;
	pthread_mutex_unlock(&s->jlock);
	return 0;
}

void grow_journal_follow(struct coil_store *s)
{
	uint32_t n;

	pthread_mutex_lock(&s->mlock);
	n = s->nseg;
	pthread_mutex_unlock(&s->mlock);
	(void)grow_journal(s, grow_journal_target(s, n));
}

int grow_step(struct coil_store *s, uint32_t want)
{
	int rc;

	pthread_mutex_lock(&s->grow_mu);
	rc = grow_step_locked(s, want);
	pthread_mutex_unlock(&s->grow_mu);
	return rc;
}

int grow_step_locked(struct coil_store *s, uint32_t want)
{
	uint32_t old, n;
	uint64_t off, len;
	int rc;

	if (!s->grows)
		return 0;
	pthread_mutex_lock(&s->mlock);
	old = s->nseg;
	pthread_mutex_unlock(&s->mlock);
	n = COIL_MIN(want, s->seg_cap - old);
	if (n == 0)
		return 0;
	/* The journal's share first: best effort, the ring wraps early
	 * without it. */
	(void)grow_journal(s, grow_journal_target(s, old + n));
	off = seg_base(s, old);
	len = (uint64_t)n * s->sb.segment_size;
	rc = reserve_extend(s, off + len, len);
	if (rc == 0)
		atomic_store(&s->seg_count_grown, old + n);
	if (rc < 0) {
		stat_add(&s->st.grow_fails, 1);
		return rc;
	}
	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = old; i < old + n; i++) {
		struct seg *g = &s->segs[i];

		g->live = 0;
		g->unopt = 0;
		g->placed_ns = 0;
		g->inflight = 0;
		g->state = SEG_FREE;
		g->in_ckpt = 0;
		g->reserved = false; /* allocated at first use */
	}
	s->nseg = old + n;
	s->free_segs += n;
	pthread_mutex_unlock(&s->mlock);
	stat_add(&s->st.grows, 1);
	stat_add(&s->st.grow_segs, n);
	return (int)n;
}
