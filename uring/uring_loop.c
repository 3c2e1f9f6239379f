/* uring/uring_loop.c — the ring thread: ring setup (on this thread), the
 * turn loop (drain inbox, issue, sleep in one place, reap a bounded batch),
 * and the corrections the kernel leaves to us: short I/O resubmission,
 * -EAGAIN/-EINTR retry, fsync held until earlier writes complete. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "uring/uring_internal.h"

void uring_set_ring_thread(struct uring *r);

#ifndef BLOCK_URING_CMD_DISCARD
#define BLOCK_URING_CMD_DISCARD _IO(0x12, 0)
#endif

/* ---- intrusive FIFO ----------------------------------------------------- */

static void list_push(struct io_list *l, struct uring_io *io)
{
	io->_next = NULL;
	if (l->tail)
		l->tail->_next = io;
	else
		l->head = io;
	l->tail = io;
	l->n++;
}

static void list_push_front(struct io_list *l, struct uring_io *io)
{
	io->_next = l->head;
	l->head = io;
	if (!l->tail)
		l->tail = io;
	l->n++;
}

/* Remove io, which follows prev (NULL: io is the head). */
static void list_unlink(struct io_list *l, struct uring_io *prev,
			struct uring_io *io)
{
	if (prev)
		prev->_next = io->_next;
	else
		l->head = io->_next;
	if (l->tail == io)
		l->tail = prev;
	io->_next = NULL;
	l->n--;
}

static struct uring_io *list_pop(struct io_list *l)
{
	struct uring_io *io = l->head;

	if (io)
		list_unlink(l, NULL, io);
	return io;
}

static bool is_write_kind(const struct uring_io *io)
{
	return io->op == URING_OP_WRITE || io->op == URING_OP_DISCARD;
}

static bool is_barrier(const struct uring_io *io)
{
	return io->op == URING_OP_FSYNC || (io->_iflags & IF_QUIESCE);
}

/* ---- acceptance and the fsync barrier ----------------------------------- */

/* Every io enters the ring thread's world here, in submission order. */
void uring_accept_local(struct uring *r, struct uring_io *io)
{
	io->_state = IO_QUEUED;
	if (is_write_kind(io)) {
		io->_seq = ++r->write_seq;
		r->open_unattr++;
	} else if (is_barrier(io)) {
		io->_seq = r->write_seq;
		io->_done = r->open_unattr;  /* writes of its segment */
		r->open_unattr = 0;
		r->last_barrier = r->write_seq;
		if (io->_done || r->held.head) {
			io->_state = IO_HELD;
			list_push(&r->held, io);
			STAT_ADD(r, fsync_held, 1);
			return;
		}
	}
	list_push(&r->local, io);
}

/* A write or discard finished (success or not): it no longer holds back
 * the fsync of its segment. */
static void write_finished(struct uring *r, const struct uring_io *io)
{
	struct uring_io *f;

	if (io->_seq > r->last_barrier) {
		COIL_ASSERT(r->open_unattr > 0);
		r->open_unattr--;
		return;
	}
	for (f = r->held.head; f; f = f->_next)
		if (f->_seq >= io->_seq)
			break;
	COIL_ASSERT(f && f->_done > 0);
	f->_done--;
	/* barriers are in order: release every leading one that is clear */
	while (r->held.head && r->held.head->_done == 0) {
		f = list_pop(&r->held);
		f->_state = IO_QUEUED;
		list_push(&r->local, f);
	}
}

/* ---- setup ---------------------------------------------------------------- */

static int ring_setup(struct uring *r)
{
	/* DEFER_TASKRUN needs SINGLE_ISSUER; both need a 6.0/6.1 kernel.
	 * Older kernels say -EINVAL and we step down. */
	static const uint32_t tries[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN |
			IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	struct io_uring_params p;
	struct iovec *iov;
	int ret = -EINVAL;

	for (size_t i = 0; i < COIL_ARRAY_LEN(tries); i++) {
		memset(&p, 0, sizeof(p));
		p.flags = tries[i] | IORING_SETUP_CQSIZE;
		p.cq_entries = 2 * r->entries;
		ret = io_uring_queue_init_params(r->entries, &r->ring, &p);
		if (ret != -EINVAL)
			break;
	}
	if (ret < 0)
		return ret;
	r->st.setup_flags = r->ring.flags;
	/* at most cq_entries CQEs can be pending; one is the eventfd read's */
	r->inflight_max = p.cq_entries - 1;
	r->entries = p.sq_entries;

	{
		int fds[2] = { r->fd, r->bfd };

		r->st.fixed_file = io_uring_register_files(&r->ring, fds,
				r->bfd >= 0 ? 2 : 1) == 0;
	}
	if ((r->nbufs || r->nxreg) &&
	    io_uring_register_buffers_sparse(&r->ring,
					     r->nbufs + r->nxreg) == 0) {
		r->reg_state = calloc(r->nbufs + r->nxreg, 1);
		if (!r->reg_state) {
			io_uring_queue_exit(&r->ring);
			return -ENOMEM;
		}
		r->st.fixed_bufs = r->nbufs > 0;
		r->xreg_ok = r->nxreg > 0;
	} else if (r->nbufs || r->nxreg) {
		iov = calloc(r->nbufs + r->nxreg, sizeof(*iov));
		if (!iov) {
			io_uring_queue_exit(&r->ring);
			return -ENOMEM;
		}
		for (unsigned i = 0; i < r->nbufs; i++) {
			iov[i].iov_base = r->buf_base + (size_t)i * r->buf_size;
			iov[i].iov_len = r->buf_size;
		}
		for (unsigned i = 0; i < r->nxreg; i++) {
			iov[r->nbufs + i].iov_base = r->xreg_base[i];
			iov[r->nbufs + i].iov_len = r->xreg_len[i];
		}
		/* failure (e.g. memlock limits) is not fatal: the buffers
		 * still work, just without READ/WRITE_FIXED.  Try the pool
		 * alone when the caller's regions made it fail. */
		r->xreg_ok = r->nxreg && io_uring_register_buffers(
				&r->ring, iov, r->nbufs + r->nxreg) == 0;
		if (r->xreg_ok)
			r->st.fixed_bufs = true;
		else if (r->nbufs)
			r->st.fixed_bufs = io_uring_register_buffers(
					&r->ring, iov, r->nbufs) == 0;
		free(iov);
	}
	/* saves an fd lookup per io_uring_enter; optional */
	(void)io_uring_register_ring_fd(&r->ring);
	if (r->xreg_ok) {
		struct io_uring_probe *pr = io_uring_get_probe_ring(&r->ring);

		r->vfixed = pr && io_uring_opcode_supported(
				pr, URING_OP_WRITEV_FIXED_);
		if (pr)
			io_uring_free_probe(pr);
	}
	return 0;
}

/* ---- issue ---------------------------------------------------------------- */

static void wake_arm(struct uring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	if (!sqe)
		return; /* SQ full this turn: arm on the next */
	io_uring_prep_read(sqe, r->efd, &r->efd_val, sizeof(r->efd_val), 0);
	io_uring_sqe_set_data64(sqe, URING_UD_WAKE);
	r->efd_armed = true;
}

enum { REG_NOT_YET = 0, REG_DONE, REG_FAILED };

/* Is buffer slot @slot registered?  Registers it on its first use where
 * registration is lazy.  A slot the kernel refuses (memlock limits) is
 * used unregistered from then on: READ/WRITE rather than their FIXED
 * forms, the same bytes. */
static bool slot_ready(struct uring *r, unsigned slot)
{
	struct iovec iov;
	__u64 tag = 0;

	if (!r->reg_state)
		return true;
	if (r->reg_state[slot] == REG_NOT_YET) {
		if (slot < r->nbufs) {
			iov.iov_base = r->buf_base + (size_t)slot * r->buf_size;
			iov.iov_len = r->buf_size;
		} else {
			iov.iov_base = r->xreg_base[slot - r->nbufs];
			iov.iov_len = r->xreg_len[slot - r->nbufs];
		}
		r->reg_state[slot] = io_uring_register_buffers_update_tag(
					     &r->ring, slot, &iov, &tag, 1) == 1 ?
				     REG_DONE : REG_FAILED;
		STAT_ADD(r, lazy_regs, 1);
	}
	return r->reg_state[slot] == REG_DONE;
}

/* the index of the caller region holding [p, p+n), or -1 */
static int xreg_find(const struct uring *r, const uint8_t *p, uint32_t n)
{
	if (!r->xreg_ok)
		return -1;
	for (unsigned i = 0; i < r->nxreg; i++) {
		uintptr_t a = (uintptr_t)p, b = (uintptr_t)r->xreg_base[i];

		if (a >= b && a - b < r->xreg_len[i] &&
		    r->xreg_len[i] - (a - b) >= n)
			return (int)i;
	}
	return -1;
}

/* The registered slot that holds [@p, @p + @n), registered now if it
 * was not yet; -1 where there is none (a plain READ/WRITE then). */
static int fixed_slot(struct uring *r, const uint8_t *p, uint32_t n)
{
	int slot = -1, xi;

	if (r->st.fixed_bufs && uring_buf_owns(r, p, n))
		slot = (int)((size_t)(p - r->buf_base) / r->buf_size);
	else if ((xi = xreg_find(r, p, n)) >= 0)
		slot = (int)r->nbufs + xi;
	return slot >= 0 && slot_ready(r, (unsigned)slot) ? slot : -1;
}

static void prep_rw(struct uring *r, struct io_uring_sqe *sqe,
		    struct uring_io *io, int fdx)
{
	uint32_t rest = io->len - io->_done;
	uint32_t n = io->_sub_len && io->_sub_len < rest ? io->_sub_len : rest;
	uint8_t *p = (uint8_t *)io->buf + io->_done;
	uint64_t off = io->off + io->_done;
	bool rd = io->op == URING_OP_READ;
	int slot = fixed_slot(r, p, n);

	io->_sub_len = n;
	if (slot >= 0) {
		if (rd)
			io_uring_prep_read_fixed(sqe, fdx, p, n, off, slot);
		else
			io_uring_prep_write_fixed(sqe, fdx, p, n, off, slot);
		STAT_ADD(r, fixed_ios, 1);
	} else if (rd) {
		io_uring_prep_read(sqe, fdx, p, n, off);
	} else {
		io_uring_prep_write(sqe, fdx, p, n, off);
	}
}

/* Synchronous BLKDISCARD for kernels without the block uring_cmd: blocks
 * the ring thread for the discard's duration (rare; discards are
 * background work). */
static int discard_sync(struct uring *r, const struct uring_io *io)
{
	uint64_t range[2] = { io->off, io->len };

	return ioctl(r->fd, BLKDISCARD, range) < 0 ? -errno : 0;
}

/* A buffered write, done here on the ring thread: a copy into the page
 * cache.  Through the ring, a file system without asynchronous buffered
 * writes (ext4 here) hands it to an io-wq worker: a thread wake-up each
 * way, most of a queue-depth-1 page write's latency.  Honours a forced
 * short length (the fault seam's) like prep_rw.  @return bytes or -errno. */
static int buffered_write_sync(struct uring *r, struct uring_io *io)
{
	uint32_t rest = io->len - io->_done;
	uint32_t n = io->_sub_len && io->_sub_len < rest ? io->_sub_len : rest;
	ssize_t w = pwrite(r->bfd, (uint8_t *)io->buf + io->_done, n,
			   (off_t)(io->off + io->_done));

	io->_sub_len = n;
	return w < 0 ? -errno : (int)w;
}

/* @return 0, or -EBUSY when the SQ is full (io untouched). */
static int issue_one(struct uring *r, struct uring_io *io)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	int fdx = r->st.fixed_file ? 0 : r->fd;

	if (!sqe)
		return -EBUSY;
	io->_iflags &= (uint8_t)~(IF_INJECT | IF_KWRITE);
	if (io->_iflags & IF_QUIESCE) {
		io_uring_prep_nop(sqe);
		goto out;
	}
#ifdef COIL_FAULT_SEAM
	/* a writeback makes nothing durable: no power cut can tell it ran */
	if (io->op != URING_OP_WRITEBACK &&
	    fault_on_issue(r, io) == FAULT_INJECTED) {
		io_uring_prep_nop(sqe);
		io->_iflags |= IF_INJECT;
		/* an injected byte count stands for the whole remainder */
		io->_sub_len = io->len - io->_done;
		goto out;
	}
#endif
	/* counted before the switch: the synchronous blkdev discard also
	 * reaches the device and completes through the CQ */
	if (is_write_kind(io))
		io->_iflags |= IF_KWRITE;
	switch (io->op) {
	case URING_OP_READ:
	case URING_OP_WRITE:
		if (io->_iflags & IF_MERGED) {
			struct uring_merge *g = io->arg;

			g->vfixed = r->vfixed && g->reg >= 0 &&
				    slot_ready(r, r->nbufs + (unsigned)g->reg);
			if (g->vfixed) {
				io_uring_prep_rw(URING_OP_WRITEV_FIXED_, sqe,
						 fdx, g->iov, g->n, io->off);
				sqe->buf_index = (uint16_t)(r->nbufs +
							    (unsigned)g->reg);
				STAT_ADD(r, fixed_ios, 1);
			} else {
				io_uring_prep_writev(sqe, fdx, g->iov, g->n,
						     io->off);
			}
			io->_sub_len = io->len;
		} else if ((io->flags & URING_IO_BUFFERED) &&
			   io->op == URING_OP_WRITE) {
			io_uring_prep_nop(sqe);
			io->_inject = buffered_write_sync(r, io);
			io->_iflags |= IF_INJECT;
			goto out;
		} else if (io->flags & URING_IO_BUFFERED) {
			prep_rw(r, sqe, io, r->st.fixed_file ? 1 : r->bfd);
		} else {
			prep_rw(r, sqe, io, fdx);
		}
		break;
	case URING_OP_FSYNC:
		io_uring_prep_fsync(sqe, fdx, IORING_FSYNC_DATASYNC);
		break;
	case URING_OP_WRITEBACK:
		io_uring_prep_sync_file_range(sqe, r->st.fixed_file ? 1 : r->bfd,
					      io->len, io->off,
					      SYNC_FILE_RANGE_WRITE);
		break;
	case URING_OP_DISCARD:
		if (!r->is_blkdev) {
			io_uring_prep_fallocate(sqe, fdx,
				FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(off_t)io->off, (off_t)io->len);
		} else if (r->blk_discard_sync) {
			io_uring_prep_nop(sqe);
			io->_inject = discard_sync(r, io);
			io->_iflags |= IF_INJECT;
			goto out;
		} else {
			io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fdx, NULL,
					 0, 0);
			sqe->cmd_op = BLOCK_URING_CMD_DISCARD;
			sqe->addr = io->off;
			sqe->addr3 = io->len;
		}
		break;
	default:
		io_uring_prep_nop(sqe);
		goto out;
	}
	if (r->st.fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
out:
	io_uring_sqe_set_data(sqe, io);
	io->_state = IO_INFLIGHT;
	r->inflight++;
	if (r->inflight > r->st.inflight_peak)
		STAT_ADD(r, inflight_peak, r->inflight - r->st.inflight_peak);
	return 0;
}

/* ---- write gathering (uring_internal.h) ---------------------------------- */

static bool mergeable(const struct uring_io *io)
{
	return io->op == URING_OP_WRITE && io->_done == 0 &&
	       io->_sub_len == 0 &&
	       !(io->flags & (URING_IO_NORETRY | URING_IO_BUFFERED)) &&
	       !(io->_iflags & (IF_QUIESCE | IF_NOMERGE | IF_MERGED));
}

static bool continues(const struct uring_io *io, uint64_t end, uint32_t len)
{
	return io && mergeable(io) && io->off == end &&
	       len + (uint64_t)io->len <= URING_MERGE_BYTES;
}

/* The first write among the first URING_MERGE_LOOK queued ios that
 * continues the device range at @end; unlinked from the queue.  Skipping
 * over others is safe: the queue's order matters only to barriers, which
 * wait in `held` until the writes accepted before them complete, and
 * writes in flight together complete in any order anyway. */
static struct uring_io *take_continuation(struct uring *r, uint64_t end,
					  uint32_t len)
{
	struct uring_io *p = NULL, *io = r->local.head;

	for (unsigned look = 0; io && look < URING_MERGE_LOOK;
	     p = io, io = io->_next, look++) {
		if (continues(io, end, len)) {
			list_unlink(&r->local, p, io);
			return io;
		}
	}
	return NULL;
}

/* Append io to group g; g->reg stays a region only while every member
 * lies in it. */
static void merge_add(struct uring *r, struct uring_merge *g,
		      struct uring_io *io)
{
	int xi = xreg_find(r, io->buf, io->len);

	g->reg = g->n == 0 || xi == g->reg ? xi : -1;
	g->m[g->n] = io;
	g->iov[g->n].iov_base = io->buf;
	g->iov[g->n].iov_len = io->len;
	g->n++;
	g->io.len += io->len;
}

/* io was just popped: gather the queued writes that continue it on the
 * device (looking a bounded distance ahead: a journal chunk or a read may
 * sit between two data runs).  @return io itself, or the group's io. */
static struct uring_io *merge_writes(struct uring *r, struct uring_io *io)
{
	struct uring_merge *g = r->mfree;
	struct uring_io *nx;

	if (!g || !mergeable(io) || !r->local.head)
		return io;
#ifdef COIL_FAULT_SEAM
	/* faults are injected and power cuts recorded per caller io */
	if (fault_armed(r))
		return io;
#endif
	nx = take_continuation(r, io->off + io->len, io->len);
	if (!nx)
		return io;
	r->mfree = g->next_free;
	memset(&g->io, 0, sizeof(g->io));
	g->io.op = URING_OP_WRITE;
	g->io.off = io->off;
	g->io.arg = g;
	g->io._iflags = IF_MERGED;
	g->n = 0;
	merge_add(r, g, io);
	for (io = nx; io;) {
		merge_add(r, g, io);
		io = g->n == URING_MERGE_MAX ? NULL :
		     take_continuation(r, g->io.off + g->io.len, g->io.len);
	}
	return &g->io;
}

/* The group could not be issued: its writes go back to the queue's front,
 * in their order. */
static void unmerge(struct uring *r, struct uring_merge *g)
{
	for (unsigned i = g->n; i-- > 0;)
		list_push_front(&r->local, g->m[i]);
	g->next_free = r->mfree;
	r->mfree = g;
}

/* Issue queued ios until the queue is empty, the in-flight cap is reached
 * or this turn's budget (one SQ's worth) is spent. */
static void issue_local(struct uring *r)
{
	unsigned budget = r->entries;
	struct uring_io *io;

	while (budget && r->local.head && r->inflight < r->inflight_max) {
		io = merge_writes(r, list_pop(&r->local));
		if (issue_one(r, io) < 0) {
			if (io->_iflags & IF_MERGED)
				unmerge(r, io->arg);
			else
				list_push_front(&r->local, io);
			break;
		}
		if (io->_iflags & IF_MERGED) {
			struct uring_merge *g = io->arg;

			for (unsigned i = 0; i < g->n; i++)
				g->m[i]->_state = IO_INFLIGHT;
			STAT_ADD(r, merge_ops, 1);
			STAT_ADD(r, merged_writes, g->n);
		}
		/* Paced one by one (rd_pace), a read with more I/O queued
		 * behind it goes to the kernel now, not with the batch: on a
		 * virtio disk that serves bursts slowly, 0.50-0.55 ms of
		 * device time per read batched (~5 a batch) against
		 * 0.34-0.37 ms one by one.  The last one goes with the loop's
		 * wait, so a lone read costs no extra enter.  Writes keep the
		 * batch (merged runs, no measurable difference). */
		if (io->op == URING_OP_READ) {
			r->turn_issued++;
			if (r->pace.mode == RD_SINGLE && r->local.head)
				io_uring_submit(&r->ring);
		}
		budget--;
	}
}

/* ---- completion ----------------------------------------------------------- */

static void finish(struct uring *r, struct uring_io *io, int res)
{
	if (is_write_kind(io))
		write_finished(r, io);
#ifdef COIL_FAULT_SEAM
	fault_on_finish(r, io, res);
#endif
	if (!(io->_iflags & IF_QUIESCE)) {
		STAT_ADD(r, ops[io->op], 1);
		if (res < 0)
			STAT_ADD(r, errors, 1);
		else if (io->op == URING_OP_READ)
			STAT_ADD(r, bytes_read, (uint64_t)res);
		else if (io->op == URING_OP_WRITE)
			STAT_ADD(r, bytes_written, (uint64_t)res);
	}
	io->_state = IO_IDLE;
	/* last touch of io: cb may free or resubmit it */
	io->cb(io, res);
}

static void requeue(struct uring *r, struct uring_io *io)
{
	io->_state = IO_QUEUED;
	list_push(&r->local, io);
}

/* A group's completion: members wholly written finish with their length,
 * in order; on an error every member finishes with it; after a short,
 * -EAGAIN/-EINTR or zero-progress result the rest are sent again alone
 * (each with its own retry bound; a partly written one resumes where the
 * group stopped). */
static void merged_done(struct uring *r, struct uring_merge *g, int res)
{
	bool fail = res < 0 && res != -EAGAIN && res != -EINTR;
	uint32_t left = res > 0 ? (uint32_t)res : 0;

	if (g->vfixed && (res == -EINVAL || res == -EFAULT ||
			  res == -EOPNOTSUPP)) {
		/* the kernel refused the fixed vectored form: plain WRITEV
		 * from now on, and these go again alone (a real error then
		 * reaches each of them) */
		r->vfixed = false;
		fail = false;
	}

	COIL_ASSERT(left <= g->io.len);
	for (unsigned i = 0; i < g->n; i++) {
		struct uring_io *m = g->m[i];

		if (fail) {
			finish(r, m, res);
		} else if (left >= m->len) {
			left -= m->len;
			m->_done = m->len;
			finish(r, m, (int)m->len);
		} else {
			m->_done = left;
			left = 0;
			m->_iflags |= IF_NOMERGE;
			STAT_ADD(r, short_resubmits, 1);
			requeue(r, m);
		}
	}
	g->next_free = r->mfree;
	r->mfree = g;
}

static void on_cqe(struct uring *r, struct uring_io *io, int res)
{
	COIL_ASSERT(io->_state == IO_INFLIGHT && r->inflight > 0);
	r->inflight--;
	if (io->_iflags & IF_INJECT)
		res = io->_inject;
#ifdef COIL_FAULT_SEAM
	res = fault_on_cqe(r, io, res);
#endif
	io->_iflags &= (uint8_t)~(IF_INJECT | IF_KWRITE);
	if (io->_iflags & IF_QUIESCE) {
		finish(r, io, 0);
		return;
	}
	if (io->_iflags & IF_MERGED) {
		merged_done(r, io->arg, res);
		return;
	}
	if (res == -EAGAIN || res == -EINTR) {
		if (!(io->flags & URING_IO_NORETRY) &&
		    io->_tries < URING_RETRY_MAX) {
			io->_tries++;
			STAT_ADD(r, eagain_retries, 1);
			requeue(r, io);
			return;
		}
		finish(r, io, res);
		return;
	}
	if (res < 0) {
		if (io->op == URING_OP_DISCARD && r->is_blkdev &&
		    !r->blk_discard_sync &&
		    (res == -EOPNOTSUPP || res == -EINVAL || res == -ENOTTY)) {
			r->blk_discard_sync = true;
			requeue(r, io);
			return;
		}
		finish(r, io, res);
		return;
	}
	if (io->op != URING_OP_READ && io->op != URING_OP_WRITE) {
		finish(r, io, 0);
		return;
	}
	/* the kernel never returns more than asked; if it did, trusting it
	 * would run past the caller's buffer */
	COIL_ASSERT((uint32_t)res <= io->_sub_len);
	io->_sub_len = 0;  /* a forced short cap applies to one attempt */
	io->_done += (uint32_t)res;
	if (io->_done == io->len) {
		finish(r, io, (int)io->len);
	} else if (res == 0 && io->op == URING_OP_READ) {
		finish(r, io, (int)io->_done);          /* EOF */
	} else if (io->flags & URING_IO_NORETRY) {
		finish(r, io, (int)io->_done);
	} else if (res == 0) {
		/* a write that makes no progress: bounded retries, then the
		 * caller hears -EIO instead of a silent loop */
		if (io->_tries++ < URING_RETRY_MAX)
			requeue(r, io);
		else
			finish(r, io, -EIO);
	} else {
		STAT_ADD(r, short_resubmits, 1);
		requeue(r, io);
	}
}

static void reap(struct uring *r)
{
	struct io_uring_cqe *cqes[URING_REAP_MAX];
	struct { uint64_t ud; int res; } got[URING_REAP_MAX];
	unsigned n, ov;

	n = io_uring_peek_batch_cqe(&r->ring, cqes, URING_REAP_MAX);
	for (unsigned i = 0; i < n; i++) {
		got[i].ud = cqes[i]->user_data;
		got[i].res = cqes[i]->res;
	}
	/* release the CQ slots before running callbacks */
	io_uring_cq_advance(&r->ring, n);
	for (unsigned i = 0; i < n; i++) {
		if (got[i].ud == URING_UD_WAKE) {
			r->efd_armed = false;
			/* before the next inbox drain: a producer that still
			 * sees kicked=1 posted before this store, so that
			 * drain will find its io */
			atomic_store(&r->kicked, 0);
			STAT_ADD(r, wakeups, 1);
			continue;
		}
		struct uring_io *io = (struct uring_io *)(uintptr_t)got[i].ud;

		if (io->op == URING_OP_READ)
			r->turn_reads++;
		on_cqe(r, io, got[i].res);
	}
	/* in-flight is capped below the CQ size, so this stays 0 unless the
	 * kernel misbehaves; NODROP kernels keep overflowed CQEs anyway */
	ov = IO_URING_READ_ONCE(*r->ring.cq.koverflow);
	if (ov != r->koverflow_seen) {
		STAT_ADD(r, cq_overflows, ov - r->koverflow_seen);
		r->koverflow_seen = ov;
	}
}

/* ---- read pacing (uring_internal.h) --------------------------------------- */

static void rd_epoch_start(struct rd_pace *p, uint64_t now, uint8_t mode)
{
	p->t0 = now;
	p->reads = p->waves = 0;
	p->mode = mode;
}

void rd_pace_turn(struct rd_pace *p, uint64_t now, uint64_t reads, bool wave)
{
	p->reads += reads;
	p->waves += wave;
	if (p->phase == 0) {
		/* settled: probe once reads come in waves, then a period on */
		if (now >= p->next_probe && p->waves >= RD_EPOCH_WAVES) {
			p->phase = 1;
			p->got[0] = p->got[1] = p->ns[0] = p->ns[1] = 0;
			rd_epoch_start(p, now, RD_SINGLE);
		} else if (now >= p->next_probe) {
			p->reads = p->waves = 0; /* too few yet: look on */
			p->next_probe = now + RD_EPOCH_NS;
		}
		return;
	}
	if (now - p->t0 < RD_EPOCH_NS)
		return;
	if (p->waves < RD_EPOCH_WAVES) {
		/* the load changed under the probe: keep what was best */
		p->phase = 0;
		p->next_probe = now + RD_PERIOD_NS;
		rd_epoch_start(p, now, p->best);
		return;
	}
	p->got[p->mode] += p->reads;
	p->ns[p->mode] += now - p->t0;
	if (p->phase < 4) {
		p->phase++;
		rd_epoch_start(p, now, p->phase % 2 ? RD_SINGLE : RD_BATCH);
		return;
	}
	/* reads a second, compared without dividing: got[S] / ns[S] against
	 * got[B] / ns[B] with the margin */
	uint8_t pick = (unsigned __int128)p->got[RD_SINGLE] * p->ns[RD_BATCH] *
			       100 >
		       (unsigned __int128)p->got[RD_BATCH] * p->ns[RD_SINGLE] *
			       (100 + RD_MARGIN_PCT) ?
		       RD_SINGLE : RD_BATCH;

	p->probes++;
	p->switches += pick != p->best;
	p->best = pick;
	p->phase = 0;
	p->next_probe = now + RD_PERIOD_NS;
	rd_epoch_start(p, now, pick);
}

/* After a turn's reap: the pacing sees what the turn did (a clock read
 * only when it read). */
static void rd_pace_step(struct uring *r)
{
	uint64_t reads = r->turn_reads;
	bool wave = r->turn_issued >= 2;

	r->turn_reads = 0;
	r->turn_issued = 0;
	if (!reads && !wave && r->pace.phase == 0)
		return;
	rd_pace_turn(&r->pace, coil_now_ns(), reads, wave);
	__atomic_store_n(&r->st.read_probes, r->pace.probes, __ATOMIC_RELAXED);
	__atomic_store_n(&r->st.read_switches, r->pace.switches,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&r->st.read_single, r->pace.mode == RD_SINGLE,
			 __ATOMIC_RELAXED);
}

/* ---- the turn loop -------------------------------------------------------- */

/* @return true when destroy was requested (seen under the lock) */
static bool drain_inbox(struct uring *r)
{
	bool stop;
	unsigned n;

	if (!atomic_load_explicit(&r->inbox_count, memory_order_acquire) &&
	    !__atomic_load_n(&r->stopping, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&r->inbox_lock);
	n = atomic_load_explicit(&r->inbox_count, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		uring_accept_local(r, r->inbox[r->inbox_head]);
		r->inbox_head = (r->inbox_head + 1) % r->inbox_max;
	}
	atomic_store_explicit(&r->inbox_count, 0, memory_order_relaxed);
	if (n && r->inbox_waiters)
		pthread_cond_broadcast(&r->inbox_cond);
	/* not while a producer is part-way through a batch (inbox_post) */
	stop = r->stopping && !r->inbox_partial;
	pthread_mutex_unlock(&r->inbox_lock);
	return stop;
}

static void run(struct uring *r)
{
	unsigned enter_errors = 0;
	bool stop = false;
	int ret;

	for (;;) {
		stop = drain_inbox(r) || stop;
		if (!r->efd_armed)
			wake_arm(r);
		issue_local(r);
#ifdef COIL_FAULT_SEAM
		fault_poll(r);
#endif
		if (stop && !r->local.head && !r->held.head && !r->inflight &&
		    !atomic_load(&r->inbox_count)
#ifdef COIL_FAULT_SEAM
		    && !fault_busy(r)
#endif
		    )
			break;

		bool wait = !(r->local.head && r->inflight < r->inflight_max) &&
			    !io_uring_cq_ready(&r->ring);
		if (wait) {
			/* Dekker with producers: store sleeping, then look at
			 * the inbox once more (both seq_cst) */
			atomic_store(&r->sleeping, 1);
			if (atomic_load(&r->inbox_count))
				wait = false;
		}
		if (wait)
			ret = io_uring_submit_and_wait(&r->ring, 1); /* the one sleep */
		else
			ret = io_uring_submit_and_get_events(&r->ring);
		atomic_store_explicit(&r->sleeping, 0, memory_order_relaxed);
		STAT_ADD(r, submit_calls, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -EBUSY && ret != -ETIME) {
			/* the ring itself is broken: nothing sane is left */
			COIL_ASSERT(++enter_errors < 1000);
		} else {
			enter_errors = 0;
		}
		reap(r);
		rd_pace_step(r);
	}
}

void *uring_thread_main(void *arg)
{
	struct uring *r = arg;
	int ret;

	coil_thread_name("ring", -1);
	uring_set_ring_thread(r);
	ret = ring_setup(r);
	pthread_mutex_lock(&r->start_lock);
	r->start_res = ret;
	r->started = true;
	pthread_cond_signal(&r->start_cond);
	pthread_mutex_unlock(&r->start_lock);
	if (ret < 0)
		return NULL;
	run(r);
	/* cancels the armed eventfd read */
	io_uring_queue_exit(&r->ring);
	return NULL;
}
