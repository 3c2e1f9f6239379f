/* uring/uring.c — the ring's API side: create/destroy, the inbox producers
 * post to, the registered buffer pool, stats.  The ring thread itself lives
 * in uring_loop.c. */
#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uring/uring_internal.h"

static __thread struct uring *tls_ring;

void uring_opts_init(struct uring_opts *o)
{
	*o = (struct uring_opts){ .entries = 256, .nbufs = 64,
				  .buf_size = 65536, .inbox_max = 1024,
				  .direct = false };
}

const char *uring_op_name(unsigned op)
{
	static const char *const names[URING_OP_MAX_] = {
		[URING_OP_READ] = "read", [URING_OP_WRITE] = "write",
		[URING_OP_FSYNC] = "fsync", [URING_OP_DISCARD] = "discard",
		[URING_OP_NOP] = "nop", [URING_OP_WRITEBACK] = "writeback",
	};
	if (op == 0 || op >= URING_OP_MAX_)
		return "?";
	return names[op];
}

/* statx(STATX_DIOALIGN) through the raw syscall: glibc 2.36's struct statx
 * predates the dio fields, <linux/stat.h>'s has them.  Also tells us whether
 * fd is a block device. */
static int probe_fd(int fd, uint32_t *align, bool *blkdev)
{
	struct statx sx;

	memset(&sx, 0, sizeof(sx));
	*align = 4096;
	if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH,
		    STATX_TYPE | STATX_DIOALIGN, &sx) < 0)
		return -errno;
	*blkdev = (sx.stx_mode & 0170000) == 0060000;
	if ((sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align) {
		uint32_t a = COIL_MAX(sx.stx_dio_mem_align,
				      sx.stx_dio_offset_align);
		/* never below 512, and a power of two, or we ignore it */
		if (a >= 512 && (a & (a - 1)) == 0)
			*align = a;
	}
	return 0;
}

static int bufs_setup(struct uring *r, unsigned nbufs, size_t buf_size)
{
	size_t align = COIL_MAX((size_t)4096, (size_t)r->dio_align);
	size_t total;
	void *p;

	if (nbufs > URING_NBUFS_MAX || buf_size > (1u << 30))
		return -EINVAL;
	r->buf_size = COIL_ALIGN_UP(buf_size, align);
	r->nbufs = nbufs;
	if (__builtin_mul_overflow(r->buf_size, (size_t)nbufs, &total))
		return -EINVAL;
	if (posix_memalign(&p, align, total))
		return -ENOMEM;
	r->buf_base = p;
	r->buf_next = calloc(nbufs ? nbufs : 1, sizeof(*r->buf_next));
	if (!r->buf_next)
		return -ENOMEM;
	for (unsigned i = 0; i < nbufs; i++)
		r->buf_next[i] = i + 1 < nbufs ? i + 2 : 0;
	atomic_store(&r->buf_head, nbufs ? 1 : 0);
	return 0;
}

int uring_create(int fd, const struct uring_opts *o, struct uring **out)
{
	struct uring_opts d;
	struct uring *r;
	int ret;

	if (!out || fd < 0)
		return -EINVAL;
	*out = NULL;
	uring_opts_init(&d);
	if (o) {
		d.entries = o->entries ? o->entries : d.entries;
		d.nbufs = o->nbufs ? o->nbufs : d.nbufs;
		d.buf_size = o->buf_size ? o->buf_size : d.buf_size;
		d.inbox_max = o->inbox_max ? o->inbox_max : d.inbox_max;
		d.direct = o->direct;
		d.nxreg = o->nxreg;
		memcpy(d.xreg, o->xreg, sizeof(d.xreg));
	}
	if (d.entries > 32768 || d.inbox_max > (1u << 24) ||
	    d.nxreg > URING_XREG_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < d.nxreg; i++)
		if (!d.xreg[i].base || !d.xreg[i].len ||
		    d.xreg[i].len > (1u << 30))
			return -EINVAL;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fd = fd;
	r->efd = -1;
	{
		/* A new open file description of the same file: O_DIRECT is
		 * a property of the description, so a dup would share it. */
		char path[64];

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		r->bfd = open(path, O_RDWR | O_CLOEXEC);
		if (r->bfd < 0)
			r->bfd = open(path, O_RDONLY | O_CLOEXEC);
	}
	r->direct = d.direct;
	r->entries = d.entries;
	r->inbox_max = d.inbox_max;
	r->nxreg = d.nxreg;
	for (unsigned i = 0; i < d.nxreg; i++) {
		r->xreg_base[i] = d.xreg[i].base;
		r->xreg_len[i] = d.xreg[i].len;
	}
	for (unsigned i = 0; i < URING_MERGE_SLOTS; i++) {
		r->merge[i].next_free = r->mfree;
		r->mfree = &r->merge[i];
	}
	pthread_mutex_init(&r->inbox_lock, NULL);
	pthread_cond_init(&r->inbox_cond, NULL);
	pthread_mutex_init(&r->start_lock, NULL);
	pthread_cond_init(&r->start_cond, NULL);

	ret = probe_fd(fd, &r->dio_align, &r->is_blkdev);
	if (ret < 0)
		goto fail;
	ret = bufs_setup(r, d.nbufs, d.buf_size);
	if (ret < 0)
		goto fail;
	r->inbox = calloc(r->inbox_max, sizeof(*r->inbox));
	if (!r->inbox) {
		ret = -ENOMEM;
		goto fail;
	}
	/* blocking on purpose: io_uring returns -EAGAIN for a read on an
	 * O_NONBLOCK file instead of arming poll */
	r->efd = eventfd(0, EFD_CLOEXEC);
	if (r->efd < 0) {
		ret = -errno;
		goto fail;
	}
#ifdef COIL_FAULT_SEAM
	ret = fault_attach(r);
	if (ret < 0)
		goto fail;
#endif
	/* The ring is created on its own thread: SINGLE_ISSUER and
	 * DEFER_TASKRUN bind it to the task that creates it. */
	ret = -pthread_create(&r->thread, NULL, uring_thread_main, r);
	if (ret < 0)
		goto fail;
	pthread_mutex_lock(&r->start_lock);
	while (!r->started)
		pthread_cond_wait(&r->start_cond, &r->start_lock);
	ret = r->start_res;
	pthread_mutex_unlock(&r->start_lock);
	if (ret < 0) {
		pthread_join(r->thread, NULL);
		goto fail;
	}
	*out = r;
	return 0;
fail:
#ifdef COIL_FAULT_SEAM
	fault_detach(r);
#endif
	if (r->efd >= 0)
		close(r->efd);
	if (r->bfd >= 0)
		close(r->bfd);
	free(r->inbox);
	free(r->reg_state);
	free(r->buf_next);
	free(r->buf_base);
	pthread_mutex_destroy(&r->inbox_lock);
	pthread_cond_destroy(&r->inbox_cond);
	pthread_mutex_destroy(&r->start_lock);
	pthread_cond_destroy(&r->start_cond);
	free(r);
	return ret;
}

static void kick(struct uring *r)
{
	static const uint64_t one = 1;

	/* seq_cst: pairs with the ring thread's sleeping store + inbox_count
	 * load (see struct uring) */
	if (atomic_load(&r->sleeping) && !atomic_exchange(&r->kicked, 1)) {
		ssize_t n;
		do
			n = write(r->efd, &one, sizeof(one));
		while (n < 0 && errno == EINTR);
	}
}

void uring_destroy(struct uring *r)
{
	if (!r)
		return;
	COIL_ASSERT(!uring_on_ring_thread(r));
	pthread_mutex_lock(&r->inbox_lock);
	__atomic_store_n(&r->stopping, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&r->inbox_cond);
	pthread_mutex_unlock(&r->inbox_lock);
	/* always wake: the thread may be asleep with nothing to do, and an
	 * extra eventfd write costs at most one spurious turn */
	{
		static const uint64_t one = 1;
		ssize_t n;
		do
			n = write(r->efd, &one, sizeof(one));
		while (n < 0 && errno == EINTR);
	}
	pthread_join(r->thread, NULL);
#ifdef COIL_FAULT_SEAM
	fault_detach(r);
#endif
	close(r->efd);
	if (r->bfd >= 0)
		close(r->bfd);
	free(r->inbox);
	free(r->reg_state);
	free(r->buf_next);
	free(r->buf_base);
	pthread_mutex_destroy(&r->inbox_lock);
	pthread_cond_destroy(&r->inbox_cond);
	pthread_mutex_destroy(&r->start_lock);
	pthread_cond_destroy(&r->start_cond);
	free(r);
}

static bool aligned(const struct uring *r, uint64_t v)
{
	return (v & (r->dio_align - 1)) == 0;
}

/* A byte range the kernel takes: 1..INT32_MAX bytes, ending within off_t. */
static bool range_ok(const struct uring_io *io)
{
	uint64_t end;

	return io->len > 0 && io->len <= INT32_MAX &&
	       !coil_add_overflows(io->off, io->len, &end) && end <= INT64_MAX;
}

static int io_check(const struct uring *r, const struct uring_io *io)
{
	if (!io || !io->cb || io->op == 0 || io->op >= URING_OP_MAX_)
		return -EINVAL;
	switch (io->op) {
	case URING_OP_READ:
	case URING_OP_WRITE:
		if (!io->buf || !range_ok(io))
			return -EINVAL;
		if ((io->flags & URING_IO_BUFFERED) && r->bfd < 0)
			return -EOPNOTSUPP;
		if (r->direct && !(io->flags & URING_IO_BUFFERED) &&
		    (!aligned(r, (uintptr_t)io->buf) ||
				  !aligned(r, io->off) || !aligned(r, io->len)))
			return -EINVAL;
		return 0;
	case URING_OP_WRITEBACK:
		if (r->bfd < 0)
			return -EOPNOTSUPP;
		return range_ok(io) ? 0 : -EINVAL;
	case URING_OP_DISCARD:
		return range_ok(io) ? 0 : -EINVAL;
	default:
		return 0;
	}
}

static void io_reset(struct uring_io *io)
{
	io->_next = io->_prev = NULL;
	io->_seq = 0;
	io->_done = 0;
	io->_tries = 0;
	io->_state = IO_QUEUED;
	io->_iflags &= IF_QUIESCE;
	io->_inject = 0;
	io->_sub_len = 0;
	io->_rec = NULL;
}

/* Post n checked ios; blocks while full.  All or nothing: a batch larger
 * than the free space goes in parts, and once its first part is posted the
 * rest follows even if destroy begins meanwhile (the ring thread does not
 * exit while a batch is part-posted, inbox_partial), so a caller never
 * sees -ESHUTDOWN for ios whose callbacks will run.  @return n, or
 * -ESHUTDOWN if none was posted. */
static int inbox_post(struct uring *r, struct uring_io **ios, unsigned n)
{
	unsigned done = 0;
	bool partial = false;

	pthread_mutex_lock(&r->inbox_lock);
	while (done < n) {
		unsigned cnt = atomic_load_explicit(&r->inbox_count,
						    memory_order_relaxed);
		if (r->stopping && done == 0)
			break;
		if (cnt == r->inbox_max) {
			/* producers write these under the lock; relaxed
			 * atomics because uring_stats reads without it */
			__atomic_store_n(&r->st.inbox_full_waits,
					 r->st.inbox_full_waits + 1,
					 __ATOMIC_RELAXED);
			r->inbox_waiters++;
			pthread_cond_wait(&r->inbox_cond, &r->inbox_lock);
			r->inbox_waiters--;
			continue;
		}
		while (done < n && cnt < r->inbox_max) {
			io_reset(ios[done]);
			r->inbox[(r->inbox_head + cnt) % r->inbox_max] = ios[done];
			cnt++;
			done++;
		}
		if (cnt > r->st.inbox_peak)
			__atomic_store_n(&r->st.inbox_peak, cnt,
					 __ATOMIC_RELAXED);
		/* seq_cst store, then kick() reads sleeping (Dekker pair) */
		atomic_store(&r->inbox_count, cnt);
		if (done < n) {
			/* full mid-batch: wake the consumer before waiting */
			if (!partial) {
				partial = true;
				r->inbox_partial++;
			}
			pthread_mutex_unlock(&r->inbox_lock);
			kick(r);
			pthread_mutex_lock(&r->inbox_lock);
		}
	}
	if (partial)
		r->inbox_partial--;
	pthread_mutex_unlock(&r->inbox_lock);
	if (done)
		kick(r);
	return done ? (int)done : -ESHUTDOWN;
}

int uring_submit_many(struct uring *r, struct uring_io **ios, unsigned n)
{
	int ret;

	if (!r || (!ios && n))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		ret = io_check(r, ios[i]);
		if (ret < 0)
			return ret;
	}
	if (n == 0)
		return 0;
	if (uring_on_ring_thread(r)) {
		for (unsigned i = 0; i < n; i++) {
			io_reset(ios[i]);
			uring_accept_local(r, ios[i]);
		}
		return 0;
	}
	ret = inbox_post(r, ios, n);
	return ret < 0 ? ret : 0;
}

int uring_submit(struct uring *r, struct uring_io *io)
{
	return uring_submit_many(r, &io, 1);
}

/* uring_io_now's fdatasync: the descriptors share one inode, so either
 * covers what both wrote. */
static int fsync_now(struct uring *r, struct uring_io *io)
{
	int res;

	(void)io; /* counted by the fault seam only */
	if (uring_on_ring_thread(r))
		return -EDEADLK;
	if (__atomic_load_n(&r->stopping, __ATOMIC_RELAXED))
		return -ESHUTDOWN;
#ifdef COIL_FAULT_SEAM
	if (!fault_on_now(r, io))
		return -EOPNOTSUPP;
#endif
	while ((res = fdatasync(r->fd)) < 0 && errno == EINTR)
		;
	res = res < 0 ? -errno : 0;
	STAT_ADD(r, ops[URING_OP_FSYNC], 1);
	if (res < 0)
		STAT_ADD(r, errors, 1);
	return res;
}

int uring_io_now(struct uring *r, struct uring_io *io)
{
	bool rd, buffered;
	uint32_t done = 0;
	int fd, res;

	if (!r || !io)
		return -EINVAL;
	if (io->op == URING_OP_FSYNC)
		return fsync_now(r, io);
	if (!io->buf || !io->len)
		return -EINVAL;
	rd = io->op == URING_OP_READ;
	buffered = io->flags & URING_IO_BUFFERED;
	if (!rd && (io->op != URING_OP_WRITE || !buffered))
		return -EINVAL;
	if (uring_on_ring_thread(r))
		return -EDEADLK;
	fd = buffered ? r->bfd : r->fd;
	if (fd < 0)
		return -EOPNOTSUPP;
	if (!buffered && r->direct &&
	    ((uintptr_t)io->buf % r->dio_align || io->off % r->dio_align ||
	     io->len % r->dio_align))
		return -EINVAL;
	if (__atomic_load_n(&r->stopping, __ATOMIC_RELAXED))
		return -ESHUTDOWN;
#ifdef COIL_FAULT_SEAM
	if (!fault_on_now(r, io))
		return -EOPNOTSUPP;
#endif
	/* as the ring does: resume a short transfer; a read stops at EOF, a
	 * write gets a bounded number of zero-progress tries, then -EIO */
	for (unsigned tries = 0; done < io->len;) {
		uint8_t *p = (uint8_t *)io->buf + done;
		off_t off = (off_t)(io->off + done);
		ssize_t n = rd ? pread(fd, p, io->len - done, off) :
				 pwrite(fd, p, io->len - done, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			res = -errno;
			goto out;
		}
		if (n == 0 && rd)
			break;
		if (n == 0 && tries++ >= URING_RETRY_MAX) {
			res = -EIO;
			goto out;
		}
		done += (uint32_t)n;
	}
	res = (int)done;
out:
	STAT_ADD(r, ops[io->op], 1);
	if (res < 0)
		STAT_ADD(r, errors, 1);
	else if (rd)
		STAT_ADD(r, bytes_read, (uint64_t)res);
	else
		STAT_ADD(r, bytes_written, (uint64_t)res);
	return res;
}

struct sync_wait {
	sem_t sem;
	int res;
};

static void sync_cb(struct uring_io *io, int res)
{
	struct sync_wait *w = io->arg;

	w->res = res;
	sem_post(&w->sem);
}

int uring_run_sync(struct uring *r, struct uring_io *io)
{
	struct sync_wait w;
	int ret;

	if (!r || !io)
		return -EINVAL;
	if (uring_on_ring_thread(r))
		return -EDEADLK;
	io->cb = sync_cb;
	io->arg = &w;
	sem_init(&w.sem, 0, 0);
	w.res = 0;
	ret = uring_submit(r, io);
	if (ret == 0) {
		while (sem_wait(&w.sem) < 0 && errno == EINTR)
			;
		ret = w.res;
	}
	sem_destroy(&w.sem);
	return ret;
}

/* internal: a quiesce NOP (see IF_QUIESCE), for the seam */
int uring_run_quiesce(struct uring *r);
int uring_run_quiesce(struct uring *r)
{
	struct uring_io io;

	uring_io_prep(&io, URING_OP_NOP, NULL, 0, 0, NULL, NULL);
	io._iflags = IF_QUIESCE;
	return uring_run_sync(r, &io);
}

void *uring_buf_get(struct uring *r)
{
	uint64_t head, next;
	uint32_t idx;

	if (!r)
		return NULL;
	head = atomic_load(&r->buf_head);
	do {
		idx = (uint32_t)head;
		if (idx == 0)
			return NULL;
		/* reading buf_next of an index another thread just popped is
		 * harmless: the tag makes our CAS fail then */
		next = ((head >> 32) + 1) << 32 |
		       __atomic_load_n(&r->buf_next[idx - 1], __ATOMIC_RELAXED);
	} while (!atomic_compare_exchange_weak(&r->buf_head, &head, next));
	return r->buf_base + (size_t)(idx - 1) * r->buf_size;
}

void uring_buf_put(struct uring *r, void *buf)
{
	uint64_t head, next;
	size_t idx;

	if (!r || !buf)
		return;
	COIL_ASSERT(uring_buf_owns(r, buf, 1));
	idx = ((uint8_t *)buf - r->buf_base) / r->buf_size;
	COIL_ASSERT(r->buf_base + idx * r->buf_size == buf);
	head = atomic_load(&r->buf_head);
	do {
		__atomic_store_n(&r->buf_next[idx], (uint32_t)head,
				 __ATOMIC_RELAXED);
		next = ((head >> 32) + 1) << 32 | (uint32_t)(idx + 1);
	} while (!atomic_compare_exchange_weak(&r->buf_head, &head, next));
}

size_t uring_buf_size(struct uring *r)
{
	return r ? r->buf_size : 0;
}

bool uring_buf_owns(struct uring *r, const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p, base;

	if (!r || !r->nbufs || len == 0)
		return false;
	base = (uintptr_t)r->buf_base;
	if (a < base || a - base >= r->buf_size * r->nbufs)
		return false;
	return (a - base) % r->buf_size + len <= r->buf_size;
}

bool uring_on_ring_thread(struct uring *r)
{
	return r && tls_ring == r;
}

void uring_set_ring_thread(struct uring *r);
void uring_set_ring_thread(struct uring *r)
{
	tls_ring = r;
}

uint32_t uring_dio_align(struct uring *r)
{
	return r ? r->dio_align : 4096;
}

void uring_stats(struct uring *r, struct uring_stats *out)
{
	const uint64_t *src;
	uint64_t *dst;

	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!r)
		return;
	/* counters are single-writer (ring thread, or producers under the
	 * inbox lock); a relaxed copy is a consistent-enough snapshot */
	src = (const uint64_t *)&r->st;
	dst = (uint64_t *)out;
	for (size_t i = 0; i < offsetof(struct uring_stats, setup_flags) / 8; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	out->setup_flags = __atomic_load_n(&r->st.setup_flags, __ATOMIC_RELAXED);
	out->fixed_bufs = __atomic_load_n(&r->st.fixed_bufs, __ATOMIC_RELAXED);
	out->fixed_file = __atomic_load_n(&r->st.fixed_file, __ATOMIC_RELAXED);
}
