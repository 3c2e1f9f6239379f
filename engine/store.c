/* engine/store.c — opening, creating and closing a store.
 *
 * Open: the file or block device (O_DIRECT unless COIL_NO_DIRECT), an
 * exclusive lock on every name that reaches the store (lock.c; a second
 * open, in this process too, is -EBUSY — the process-wide registry answers
 * before the locks so the reason is unambiguous), the ring, the
 * superblocks, the checkpoint, journal replay, then a checkpoint (unless read-only) that makes the recovered state the
 * new base.  Close: wait for everything in flight, flush, checkpoint with the
 * clean flag, stop the threads, release. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/cleaner.h"
#include "engine/grow.h"
#include "engine/pack.h"
#include "engine/io/bcache.h"
#include "engine/io/readahead.h"
#include "engine/io/wreq.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/log/recovery.h"
#include "engine/log/salvage.h"
#include "engine/lock.h"
#include "engine/options.h"
#include "engine/place/bufpool.h"
#include "engine/place/dev.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/place/reserve.h"
#include "engine/place/segment.h"
#include "engine/scrub.h"
#include "engine/store.h"

/* ---- process-wide registry of open stores ------------------------------- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct coil_store *reg_head;

static bool reg_find_locked(dev_t dev, ino_t ino)
{
	for (struct coil_store *s = reg_head; s; s = s->reg_next)
		if (s->dev == dev && s->ino == ino)
			return true;
	return false;
}

/* true if @s is an open store (not closed, not garbage).  Store-level calls
 * check this so a closed store handle is -EBADF, not a crash. */
bool store_valid(struct coil_store *s)
{
	bool ok = false;

	if (!s)
		return false;
	pthread_mutex_lock(&reg_mu);
	for (struct coil_store *p = reg_head; p; p = p->reg_next)
		if (p == s) {
			ok = s->magic == STORE_MAGIC;
			break;
		}
	pthread_mutex_unlock(&reg_mu);
	return ok;
}

static void reg_remove(struct coil_store *s)
{
	pthread_mutex_lock(&reg_mu);
	for (struct coil_store **pp = &reg_head; *pp; pp = &(*pp)->reg_next)
		if (*pp == s) {
			*pp = s->reg_next;
			break;
		}
	pthread_mutex_unlock(&reg_mu);
}

/* ---- helpers ------------------------------------------------------------ */

static int validate_options(const struct coil_options *o, int *level)
{
	int rc = engine_parse_compression(o->compression, level);

	if (rc < 0)
		return rc;
	if (o->flags & ~(COIL_CREATE | COIL_RDONLY | COIL_NO_DIRECT |
			 COIL_ZERO_FILL | COIL_INLINE_CB | COIL_SALVAGE))
		return -EINVAL;
	if ((o->flags & COIL_CREATE) &&
	    (o->flags & (COIL_RDONLY | COIL_SALVAGE)))
		return -EINVAL;
	/* a century: past it, seconds in nanoseconds would overflow */
	if (o->scrub_interval > 100ull * 365 * 24 * 3600 ||
	    o->optimize_idle > 100ull * 365 * 24 * 3600 ||
	    o->optimize_cold > 100ull * 365 * 24 * 3600)
		return -EINVAL;
	if (o->max_blob < 4096 || o->max_blob > FMT_BLOB_MAX ||
	    (o->max_blob & (o->max_blob - 1)))
		return -EINVAL;
	if (o->pool_mode != COIL_POOL_FAIR && o->pool_mode != COIL_POOL_SEMAPHORE)
		return -EINVAL;
	if (o->workers > 1024)
		return -EINVAL;
	return 0;
}

static void store_free(struct coil_store *s)
{
	scrub_destroy(s);   /* joins the thread before the ring goes */
	pack_destroy(s);    /* the same */
	cleaner_destroy(s); /* joins the thread before the ring goes */
	if (s->pool)
		pool_destroy(s->pool);
	s->pool = NULL;
	if (s->ring)
		uring_destroy(s->ring);
	s->ring = NULL;
	readahead_store_destroy(s); /* after the ring: no prefetch I/O left */
	bcache_destroy(s);
	objtab_destroy(s);
	journal_destroy(s);
	reqs_destroy(s);
	if (s->bp.base)
		bufpool_destroy(&s->bp);
	if (s->bp_mid.base)
		bufpool_destroy(&s->bp_mid);
	if (s->bp_large.base)
		bufpool_destroy(&s->bp_large);
	if (s->zc)
		ZSTD_freeCCtx(s->zc);
	if (s->zd)
		ZSTD_freeDCtx(s->zd);
	free(s->segs);
	free(s->path);
	if (s->fd >= 0)
		close(s->fd);
	store_lock_drop(s->lock);
	pthread_mutex_destroy(&s->mlock);
	pthread_mutex_destroy(&s->jlock);
	pthread_mutex_destroy(&s->rq_mu);
	pthread_mutex_destroy(&s->zmu);
	pthread_mutex_destroy(&s->ckpt_mu);
	pthread_mutex_destroy(&s->ck_mu);
	pthread_mutex_destroy(&s->grow_mu);
	memlist_destroy(&s->mem);
	dict_destroy(s);
	pthread_cond_destroy(&s->mcond);
	pthread_cond_destroy(&s->jcond);
	pthread_cond_destroy(&s->rq_cond);
	pthread_cond_destroy(&s->ck_cond);
	pthread_cond_destroy(&s->ck_done_cond);
	s->magic = STORE_MAGIC_DEAD;
	free(s);
}

/* Lay out a new store and write its superblocks. */
/* COIL_ZERO_FILL: write zeros over [0, size) of the new file, so every
 * later write overwrites written blocks (no unwritten-extent conversion in
 * the file system).  Plain pwrite: the ring is not up yet. */
static int zero_fill(int fd, uint64_t size)
{
	const size_t step = 1u << 20;
	uint8_t *z = NULL;
	int rc = 0;

	if (posix_memalign((void **)&z, 4096, step))
		return -ENOMEM;
	memset(z, 0, step);
	for (uint64_t off = 0; off < size && rc == 0;) {
		size_t n = (size_t)COIL_MIN((uint64_t)step, size - off);
		ssize_t w = pwrite(fd, z, n, (off_t)off);

		if (w > 0)
			off += (uint64_t)w;
		else if (w < 0 && errno != EINTR)
			rc = -errno;
		else if (w == 0)
			rc = -EIO;
	}
	free(z);
	return rc;
}

/* The segments a new growing store starts with: its first 64 MiB on disk
 * hold these, the superblocks, the journal's first part and the
 * checkpoints. */
static uint32_t grow_initial_segs(const struct fmt_super *sb)
{
	uint64_t n = COIL_MAX(2ull, GROW_INITIAL_BYTES / sb->segment_size);

	return (uint32_t)COIL_MIN(n, (uint64_t)fmt_super_seg_capacity(sb));
}

/* @grows: a file store whose data area starts small and grows. */
static int store_format(struct coil_store *s, uint64_t size, uint32_t max_blob,
			bool filled, bool grows)
{
	int rc = fmt_super_layout(size, max_blob, &s->sb);

	if (rc < 0)
		return rc;
	if (filled)
		s->sb.flags = FMT_SUPER_FILLED;
	if (grows) {
		s->sb.incompat |= FMT_INCOMPAT_GROW;
		s->sb.segment_count = grow_initial_segs(&s->sb);
	}
	if (getrandom(s->sb.uuid, sizeof(s->sb.uuid), 0) !=
	    (ssize_t)sizeof(s->sb.uuid)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
			     (uint64_t)getpid() << 48;
		memcpy(s->sb.uuid, &x, 8);
		x = x * 0x9E3779B97F4A7C15ull + coil_now_ns();
		memcpy(s->sb.uuid + 8, &x, 8);
	}
	s->sb.seq = 0;
	s->sb.replay_off = 0;
	s->sb.replay_seq = 1;
	s->store_id = fmt_super_store_id(&s->sb);
	return super_write(s, false);
}

static int read_supers(struct coil_store *s)
{
	uint8_t *buf = bufpool_get(&s->bp, 2 * FMT_BLOCK);
	struct fmt_super a, b;
	int ra, rb, pick, rc;
	bool foreign;

	if (!buf)
		return -ENOMEM;
	rc = store_io_sync(s, URING_OP_READ, buf, 2 * FMT_BLOCK, 0);
	if (rc < 0) {
		bufpool_put(&s->bp, buf);
		return rc;
	}
	ra = fmt_super_decode(&a, buf, FMT_BLOCK);
	rb = fmt_super_decode(&b, buf + FMT_BLOCK, FMT_BLOCK);
	/* Neither copy has the magic: this was never a store (a user's file,
	 * an empty device), which callers report differently from a store
	 * whose superblocks are damaged. */
	foreign = !fmt_super_has_magic(buf, FMT_BLOCK) &&
		  !fmt_super_has_magic(buf + FMT_BLOCK, FMT_BLOCK);
	bufpool_put(&s->bp, buf);
	/* An intact copy from a later format: refuse the store before
	 * anything else of it is read, whatever the other copy says (it is
	 * older, and replaying under it would lose what the newer wrote). */
	if (ra == -FMT_EFEATURE || rb == -FMT_EFEATURE)
		return -COIL_EFEATURE;
	pick = fmt_super_pick(&a, ra, &b, rb);
	if (pick < 0)
		return foreign ? -EMEDIUMTYPE : -EIO;
	if (s->salvage && (ra < 0 || rb < 0))
		salvage_note(s, "superblock copy %c is damaged; copy %c was used",
			     ra < 0 ? 'A' : 'B', ra < 0 ? 'B' : 'A');
	s->sb = pick == 0 ? a : b;
	s->store_id = fmt_super_store_id(&s->sb);
	return 0;
}

static int dev_size(int fd, const struct stat *st, uint64_t *size)
{
	if (S_ISBLK(st->st_mode)) {
		uint64_t n;
		if (ioctl(fd, BLKGETSIZE64, &n) < 0)
			return -errno;
		*size = n;
		return 0;
	}
	if (S_ISREG(st->st_mode)) {
		*size = (uint64_t)st->st_size;
		return 0;
	}
	/* A read-only open(2) of a directory succeeds; say what it is. */
	return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
}

/* Keep appending to the emptiest partly used segment instead of starting a
 * new one at every open (a store opened many times for small updates would
 * otherwise strand a partial segment each time).  Appending after the last
 * byte any extent references is safe: a journal record that might point
 * further was never replayed, and the sequence gap keeps it from ever being
 * replayed later. */
static int resume_active_segment(struct coil_store *s)
{
	uint64_t *ends = calloc(s->nseg, sizeof(*ends));
	uint32_t best = UINT32_MAX;
	uint64_t best_room = 0;

	if (!ends)
		return -ENOMEM;
	for (uint32_t b = 0; b < s->tab_cap; b++) {
		for (struct object *o = s->by_id[b]; o; o = o->id_next) {
			struct extmap_iter it;
			const struct ext *e;

			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it))) {
				if (blobd_is_mem(e->b))
					continue;
				uint32_t i = seg_of(s, e->b->dev_off);
				uint64_t end = e->b->dev_off + e->b->stored_len -
					       seg_base(s, i);
				if (end > ends[i])
					ends[i] = end;
			}
		}
	}
	for (uint32_t i = 0; i < s->nseg; i++) {
		uint64_t used = COIL_ALIGN_UP(COIL_MAX(ends[i], FMT_BLOCK),
					      FMT_BLOCK);
		uint64_t room = s->sb.segment_size - used;
		if (s->segs[i].state == SEG_SEALED && room > best_room) {
			best_room = room;
			best = i;
		}
	}
	if (best != UINT32_MAX && best_room >= s->sb.segment_size / 4) {
		s->segs[best].state = SEG_ACTIVE;
		s->active = best;
		s->active_head = s->sb.segment_size - best_room;
	}
	free(ends);
	return 0;
}

/* ---- open, in its phases ------------------------------------------------ */

/* Phase 1: the store's memory, its locks, and the options it keeps. */
static struct coil_store *store_new(const char *path,
				    const struct coil_options *o, int level)
{
	struct coil_store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->fd = -1;
	memlist_init(&s->mem);
	pthread_mutex_init(&s->mlock, NULL);
	pthread_mutex_init(&s->jlock, NULL);
	pthread_mutex_init(&s->rq_mu, NULL);
	pthread_mutex_init(&s->zmu, NULL);
	pthread_mutex_init(&s->ckpt_mu, NULL);
	pthread_mutex_init(&s->ck_mu, NULL);
	pthread_mutex_init(&s->grow_mu, NULL);
	pthread_cond_init(&s->mcond, NULL);
	pthread_cond_init(&s->jcond, NULL);
	pthread_cond_init(&s->rq_cond, NULL);
	pthread_cond_init(&s->ck_cond, NULL);
	pthread_cond_init(&s->ck_done_cond, NULL);
	s->active = UINT32_MAX;
	s->salvage = (o->flags & COIL_SALVAGE) != 0;
	s->rdonly = (o->flags & COIL_RDONLY) || s->salvage;
	s->direct = !(o->flags & COIL_NO_DIRECT);
	s->sync_writes = o->sync_writes != 0;
	s->inline_cb = (o->flags & COIL_INLINE_CB) != 0;
	s->level = level;
	s->pool_mode = o->pool_mode;
	s->prefetch = o->prefetch;
	s->cache_bytes = o->cache_bytes;
	s->path = strdup(path);
	if (!s->path) {
		store_free(s);
		return NULL;
	}
	return s;
}

/* Phase 2: open (or create) the file or device; its identity and size.
 * *@created: this call made the file (a failed open removes it). */
static int store_open_file(struct coil_store *s, const struct coil_options *o,
			   struct stat *st, uint64_t *size, bool *created)
{
	int flags = (s->rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC |
		    (s->direct ? O_DIRECT : 0);
	int rc;

	s->fd = open(s->path, flags);
	if (s->fd < 0 && errno == ENOENT && (o->flags & COIL_CREATE)) {
		s->fd = open(s->path, flags | O_CREAT | O_EXCL, 0644);
		*created = s->fd >= 0;
		if (s->fd < 0 && errno == EEXIST)
			s->fd = open(s->path, flags);
	}
	if (s->fd < 0) {
		int err = -errno;
		struct stat dst;

		/* Linux refuses O_DIRECT on a directory with EINVAL. */
		if (err == -EINVAL && stat(s->path, &dst) == 0 &&
		    S_ISDIR(dst.st_mode))
			err = -EISDIR;
		return err;
	}
	if (fstat(s->fd, st) < 0)
		return -errno;
	rc = dev_size(s->fd, st, size);
	if (rc < 0)
		return rc;
	store_lock_id(st, &s->dev, &s->ino);
	s->is_blk = S_ISBLK(st->st_mode);
	return 0;
}

/* Phase 3: one opener per store in this process (the registry) and across
 * processes, by every name that reaches it (lock.c).  On success the store
 * is registered. */
static int store_lock(struct coil_store *s, const struct stat *st)
{
	int rc = 0;

	pthread_mutex_lock(&reg_mu);
	if (reg_find_locked(s->dev, s->ino)) {
		rc = -EBUSY;
		goto out;
	}
	rc = store_lock_take(s->path, st, s->rdonly, &s->lock);
	if (rc < 0)
		goto out;
	s->magic = STORE_MAGIC;
	s->reg_next = reg_head;
	reg_head = s;
out:
	pthread_mutex_unlock(&reg_mu);
	return rc;
}

/* The largest store coil_options.size 0 asks for: the file system's
 * size, at most this (the segment table is sized for the maximum). */
#define STORE_UNLIMITED_MAX (1ull << 40)

/* A new growing store file: the layout for the maximum @max, a file that
 * ends after the first segments, and blocks allocated only for the first
 * part of the journal (segments when they first take writes, the rest of
 * the journal and the checkpoint areas are holes until needed).  A failure
 * leaves it empty. */
static int grow_file_create(struct coil_store *s, uint64_t max,
			    uint32_t max_blob)
{
	struct fmt_super sb;
	struct statvfs sv;
	uint64_t jlen, end, need;
	int rc = fmt_super_layout(max, max_blob, &sb);

	if (rc < 0)
		return rc;
	jlen = COIL_MIN(sb.journal_len, GROW_JOURNAL_MIN);
	end = sb.data_off + (uint64_t)grow_initial_segs(&sb) * sb.segment_size;
	need = jlen + (end - sb.data_off) + 2 * FMT_BLOCK;
	if (fstatvfs(s->fd, &sv) == 0 &&
	    need > (uint64_t)sv.f_bavail * sv.f_frsize)
		return -ENOSPC;
	if (ftruncate(s->fd, (off_t)end) < 0)
		return -errno;
	/* the segments' blocks: when each first takes writes (reserve.c) */
	rc = reserve_range(s, sb.journal_off, jlen);
	if (rc < 0 && ftruncate(s->fd, 0) < 0)
		rc = -errno;
	return rc;
}

static uint64_t seg_base_of(const struct fmt_super *sb, uint32_t idx)
{
	return sb->data_off + (uint64_t)idx * sb->segment_size;
}

/* Phase 4a: size a new file (COIL_CREATE on an empty regular file).
 * *@fresh: it is to be formatted; *@filled: it was zero-filled; *@grows:
 * it starts small and grows (the default; COIL_ZERO_FILL keeps the fixed
 * layout, written whole). */
static int store_size_new(struct coil_store *s, const struct coil_options *o,
			  const struct stat *st, uint64_t *size, bool *fresh,
			  bool *filled, bool *grows)
{
	int rc;

	/* A new file (or an empty one) with COIL_CREATE is sized and
	 * formatted; anything else must already be a store. */
	if ((o->flags & COIL_CREATE) && S_ISREG(st->st_mode) && *size == 0) {
		uint64_t max = o->size;

		if (max == 0) {
			struct statvfs sv;

			if (fstatvfs(s->fd, &sv) < 0)
				return -errno;
			max = COIL_MIN((uint64_t)sv.f_blocks * sv.f_frsize,
				       STORE_UNLIMITED_MAX);
		}
		if (max < 16 * FMT_BLOCK)
			return -ENOSPC;
		*size = COIL_ALIGN_DOWN(max, FMT_BLOCK);
		*fresh = true;
		if (!(o->flags & COIL_ZERO_FILL)) {
			*grows = true;
			return grow_file_create(s, *size, o->max_blob);
		}
		rc = reserve_file_create(s->fd, s->path, *size);
		if (rc < 0)
			return rc;
		if (o->flags & COIL_ZERO_FILL) {
			rc = zero_fill(s->fd, *size);
			if (rc < 0)
				return rc;
			*filled = true;
		}
	} else if (*size < 2 * FMT_BLOCK) {
		return -EMEDIUMTYPE; /* too short to hold the superblocks */
	}
	return 0;
}

/* Phase 4b: the buffers the ring registers, and the ring. */
static int store_ring(struct coil_store *s)
{
	struct uring_opts uo;
	int rc;

	rc = bufpool_init(&s->bp, 2 * FMT_BLOCK, 512);
	if (rc == 0)
		rc = bufpool_init(&s->bp_large, (1u << 20) + 2 * FMT_BLOCK, 16);
	if (rc < 0)
		return rc;
	uring_opts_init(&uo);
	uo.direct = s->direct;
	/* Register the small-I/O and big-batch pools with the ring
	 * (WRITE/READ_FIXED: no page pinning per I/O, ~7 % of a 128 KiB
	 * sequential write's CPU).  bp_mid is sized after the superblock. */
	uo.nxreg = 2;
	uo.xreg[0].base = s->bp.base;
	uo.xreg[0].len = s->bp.size * s->bp.count;
	uo.xreg[1].base = s->bp_large.base;
	uo.xreg[1].len = s->bp_large.size * s->bp_large.count;
	return uring_create(s->fd, &uo, &s->ring);
}

/* Phase 4c: format a new store or read an existing one's superblocks, then
 * make the tables its geometry asks for. */
static int store_format_or_load(struct coil_store *s,
				const struct coil_options *o,
				const struct stat *st, uint64_t size,
				bool fresh, bool filled, bool grows)
{
	int rc;

	if (fresh) {
		rc = store_format(s, size, o->max_blob, filled, grows);
		if (rc < 0)
			return rc;
	} else {
		rc = read_supers(s);
		if ((rc == -EIO || rc == -EMEDIUMTYPE) && s->salvage &&
		    salvage_super(s, size) == 0)
			rc = 0;
		if ((rc == -EIO || rc == -EMEDIUMTYPE) &&
		    (o->flags & COIL_CREATE) && S_ISBLK(st->st_mode)) {
			/* A device with no coil store on it: make one. */
			rc = store_format(s, COIL_ALIGN_DOWN(size, FMT_BLOCK),
					  o->max_blob, false, false);
		}
		if (rc < 0)
			return rc;
		/* A growing file store needs its segments in use; a longer
		 * file is a growth step a crash interrupted (its tail is
		 * allocated again by the next step); so does a loop device
		 * over it.  A fixed store needs the whole layout.  A salvage
		 * open reads what there is and says what is missing. */
		uint64_t need = (s->sb.incompat & FMT_INCOMPAT_GROW) ?
					seg_base_of(&s->sb, s->sb.segment_count) :
					s->sb.store_size;

		if (need > size && !s->salvage)
			return -EIO;
		if (need > size)
			salvage_note(s, "the store is %" PRIu64 " bytes shorter "
				     "than its superblock says: data past byte %"
				     PRIu64 " is lost", need - size, size);
	}
	/* A growing store seen through a block device (a loop device over
	 * its file) is as long as the device: it does not grow there. */
	s->grows = (s->sb.incompat & FMT_INCOMPAT_GROW) && !s->is_blk;
	s->filled = (s->sb.flags & FMT_SUPER_FILLED) != 0;
	s->seg_cap = s->grows ? fmt_super_seg_capacity(&s->sb) :
				s->sb.segment_count;
	s->j_alloc = s->sb.journal_len;
	/* A blob and its segment header must fit one segment. */
	s->max_blob = COIL_MIN(s->sb.max_blob, s->sb.segment_size / 2);
	/* About 16 MiB of whole-blob buffers (reads, decodes, small
	 * writes), and 16 for the batches of writes up to 1 MiB (fio's and
	 * databases' large I/O) instead of malloc. */
	rc = bufpool_init(&s->bp_mid, s->max_blob + 2 * FMT_BLOCK,
			  (uint32_t)COIL_MAX(16u, COIL_MIN(256u,
				(16u << 20) / (s->max_blob + 2 * FMT_BLOCK))));
	if (rc < 0)
		return rc;
	s->bp.large = &s->bp_mid;
	s->bp_mid.large = &s->bp_large;
	s->nseg = s->sb.segment_count;
	s->segs = calloc(s->seg_cap, sizeof(*s->segs));
	s->zc = ZSTD_createCCtx();
	s->zd = ZSTD_createDCtx();
	if (!s->segs || !s->zc || !s->zd)
		return -ENOMEM;
	rc = objtab_init(s);
	if (rc == 0)
		rc = journal_init(s);
	if (rc == 0)
		rc = reqs_init(s);
	return rc;
}

/* Phase 5: recovery (log/recovery.c), then the segment table it implies. */
static int store_recover(struct coil_store *s)
{
	int rc = s->salvage ? salvage_ckpt(s) : 0;

	/* The journal's chain is walked (read from the device) while the
	 * checkpoint's load builds the tables (CPU). */
	if (rc == 0)
		replay_prefetch(s);
	if (rc == 0) {
		uint64_t t0 = coil_now_ns();

		rc = ckpt_load(s);
		stat_add(&s->st.ckpt_load_ns, coil_now_ns() - t0);
	}
	if (rc == 0)
		rc = replay_journal(s);
	else
		replay_abandon(s); /* joins the walk, frees what it read */
	if (rc < 0)
		return rc;
	/* every dictionary the objects name, read once (a failure leaves
	 * only its blobs unreadable) */
	dict_load_all(s);
	s->free_segs = 0;
	for (uint32_t i = 0; i < s->nseg; i++) {
		struct seg *g = &s->segs[i];
		g->state = g->live ? SEG_SEALED : SEG_FREE;
		g->inflight = 0;
		if (g->state == SEG_FREE)
			s->free_segs++;
	}
	COIL_ASSERT(s->free_segs <= s->nseg);
	s->alloc_cursor = 0;
	s->ckpt_seq = s->sb.ckpt_seq;
	return resume_active_segment(s);
}

/* Phase 6: the worker pool, the cache and readahead, and (writable) the
 * first checkpoint of the session, its thread and the cleaner. */
static int store_start(struct coil_store *s, const struct coil_options *o)
{
	struct pool_opts po;
	int rc;

	memset(&po, 0, sizeof(po));
	po.workers = o->workers;
	/* Capacity for a few whole max-size writes (docs/pool.md: 1 MiB
	 * writes of 64 KiB blobs on 2 cores -> 32), so concurrent readers
	 * rarely meet -EAGAIN and the ring thread rarely decodes inline. */
	po.queue_factor = 32;
	po.mode = o->pool_mode == COIL_POOL_SEMAPHORE ? POOL_MODE_SEMAPHORE :
							POOL_MODE_FAIR;
	rc = pool_create(&po, &s->pool);
	if (rc == 0)
		rc = bcache_init(s);
	if (rc == 0)
		rc = readahead_store_init(s);
	if (rc == 0)
		rc = scrub_start(s, o);
	if (rc < 0 || s->rdonly)
		return rc;
	if (s->grows) {
		/* The journal's allocated part: this size's share if the
		 * file system has it, else what create allocated, from the
		 * ring's start: a close gave it back (close_give_back), and no
		 * chunk may be written to blocks the file system still owes
		 * (allocating allocated blocks is free).  Without even that
		 * the store cannot take writes: -ENOSPC, open it read-only. */
		s->j_alloc = 0;
		rc = grow_journal(s, grow_journal_target(s, s->nseg));
		if (rc < 0)
			rc = grow_journal(s, COIL_MIN(s->sb.journal_len,
						      GROW_JOURNAL_MIN));
		if (rc < 0)
			return rc;
		/* the segment recovery resumed: its tail may be given back */
		seg_resume_reserve(s);
		/* Segments replay found in use past the superblock's count
		 * (a growth step leaves the count to the next checkpoint):
		 * this checkpoint writes the count that holds them.  Their
		 * blocks are allocated when the allocator first uses them
		 * (reserve.c), like any segment not yet reserved. */
		atomic_store(&s->seg_count_grown, s->nseg);
	}
	/* Conversion to the inline-blob format: this checkpoint writes the
	 * superblock with the bit before any record can carry such a blob,
	 * so an older binary refuses the store from then on. */
	if (s->sb.version == FMT_SUPER_VERSION_V1)
		s->sb.version = FMT_SUPER_VERSION; /* feature words from now */
	s->sb.incompat |= FMT_INCOMPAT_INLINE;
	s->inline_ok = true;
	/* Likewise sector chunks: every chunk from here on. */
	s->sb.incompat |= FMT_INCOMPAT_JSECT;
	s->jsect = true;
	/* And RENAME and BATCH records (engine/batch.c). */
	s->sb.incompat |= FMT_INCOMPAT_BATCH;
	/* And the optimizer's REWRITE records and OPTIMIZED blobs. */
	s->sb.incompat |= FMT_INCOMPAT_REWRITE;
	/* The recovered state becomes the new base: nothing written before
	 * this point is needed from the journal again. */
	rc = ckpt_write(s, false);
	if (rc < 0)
		return rc;
	rc = ckpt_thread_start(s);
	if (rc < 0)
		return rc;
	s->opt_idle_ns = o->optimize_idle * 1000000000ull;
	s->opt_cold_ns = o->optimize_cold * 1000000000ull;
	rc = cleaner_start(s);
	if (rc == 0)
		rc = pack_start(s);
	if (rc < 0)
		ckpt_thread_stop(s);
	return rc;
}

COIL_API int coil_open(const char *path, const struct coil_options *o,
		       coil_store **out)
{
	struct coil_options def;
	struct coil_store *s;
	struct stat st;
	uint64_t size = 0, t0 = coil_now_ns();
	bool fresh = false, created = false, filled = false, locked = false;
	bool grows = false;
	int level, rc;

	if (out)
		*out = NULL;
	if (!path || !out || !*path)
		return -EINVAL;
	if (!o) {
		coil_options_init(&def);
		o = &def;
	}
	rc = validate_options(o, &level);
	if (rc < 0)
		return rc;
	s = store_new(path, o, level);
	if (!s)
		return -ENOMEM;

	rc = store_open_file(s, o, &st, &size, &created);
	if (rc < 0)
		created = false; /* removed on failure only once it was opened */
	fresh = created;
	if (rc == 0)
		rc = store_lock(s, &st);
	locked = rc == 0;
	if (rc == 0)
		rc = store_size_new(s, o, &st, &size, &fresh, &filled, &grows);
	if (rc == 0)
		rc = store_ring(s);
	if (rc == 0)
		rc = store_format_or_load(s, o, &st, size, fresh, filled,
					  grows);
	if (rc == 0)
		rc = store_recover(s);
	if (rc == 0)
		rc = store_start(s, o);
	if (rc < 0)
		goto fail;
	COIL_ASSERT(s->magic == STORE_MAGIC);
	stat_add(&s->st.open_ns, coil_now_ns() - t0);
	*out = s;
	return 0;

fail:
	/* One exit for every phase: each undoes only what it finds done. */
	COIL_ASSERT(rc < 0);
	if (locked)
		reg_remove(s);
	if (created)
		unlink(s->path);
	store_free(s);
	return rc;
}

/* ---- the synchronous waiter (coil_pwrite, coil_pread, coil_sync, close) -- */

_Thread_local const void *engine_tls_waiter;
_Thread_local bool engine_tls_now;

void store_waiter_init(struct store_waiter *w)
{
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->done = false;
	w->res = 0;
}

void store_waiter_cb(void *arg, int64_t res)
{
	struct store_waiter *w = arg;

	pthread_mutex_lock(&w->mu);
	w->res = res;
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* @rc is what the async call returned: on failure its callback never
 * comes, so return @rc (after freeing the waiter) instead of waiting. */
int64_t store_waiter_wait(struct store_waiter *w, int rc)
{
	if (rc < 0) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		return rc;
	}
	pthread_mutex_lock(&w->mu);
	while (!w->done)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	return w->res;
}

int coil_sync_internal(struct coil_store *s)
{
	struct store_waiter w;
	int rc;

	store_waiter_init(&w);
	engine_tls_waiter = &w;
	rc = journal_flush(s, store_waiter_cb, &w);
	engine_tls_waiter = NULL;
	return (int)store_waiter_wait(&w, rc);
}

/* At close, after the close checkpoint is durable (both superblocks name
 * it, replay starts at the journal's head): give the file system back
 * what holds nothing a replay, the checkpoint loader or its mirror reads
 * again: the journal ring, each checkpoint area past its base and chain,
 * and data blocks allocated but never written.  Growing file stores only
 * (a fixed store keeps its preallocated layout, a device keeps all).  Each
 * punch alone is safe, in any order and cut anywhere (a power cut may
 * keep or drop any of them): every byte it covers is one no durable
 * superblock leads to (docs/space.md, "At close").  Best effort: a punch
 * that fails leaves its blocks.  @return the bytes punched (holes too). */
static uint64_t close_give_back(struct coil_store *s)
{
	uint64_t given;

	if (!s->grows || s->filled || s->is_blk || s->rdonly)
		return 0;
	given = journal_give_back(s);
	given += ckpt_give_back(s);
	given += seg_give_back_unwritten(s);
	/* The punches are metadata: durable now, so the space is back for
	 * good rather than after the file system's next commit. */
	if (given)
		(void)store_io_sync(s, URING_OP_FSYNC, NULL, 0, 0);
	return given;
}

COIL_API int coil_close(coil_store *s)
{
	int rc = 0, r2;

	if (!s)
		return 0;
	if (!store_valid(s))
		return -EBADF;
	pthread_mutex_lock(&s->mlock);
	if (s->nhandles) {
		pthread_mutex_unlock(&s->mlock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&s->mlock);
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	/* Close is for one thread: from here the handle is dead to others. */
	reg_remove(s);
	scrub_stop(s);   /* a pass in progress is cut short */
	cleaner_stop(s); /* no relocation after this point */

	pthread_mutex_lock(&s->rq_mu);
	while (atomic_load(&s->ops_inflight))
		pthread_cond_wait(&s->rq_cond, &s->rq_mu);
	pthread_mutex_unlock(&s->rq_mu);
	/* Small writes still in memory go to a segment now, so the store
	 * opens next time with nothing to load into memory. */
	pack_stop(s);

	if (!s->rdonly) {
		atomic_store(&s->jmark_off, true); /* journal.c, "markers" */
		rc = coil_sync_internal(s);
		ckpt_thread_stop(s);
		if (!atomic_load(&s->broken)) {
			r2 = ckpt_write(s, true);
			/* what the store no longer needs goes back to the
			 * file system, once that checkpoint is durable */
			if (r2 == 0)
				(void)close_give_back(s);
			if (rc == 0)
				rc = r2;
		} else if (rc == 0) {
			rc = atomic_load(&s->broken);
		}
	}
	store_free(s);
	return rc;
}
