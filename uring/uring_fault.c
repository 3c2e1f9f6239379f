/* uring/uring_fault.c — the fault seam: fail/short/-EAGAIN/torn injection
 * and the power-loss simulation (see uring_fault.h).  Compiled to nothing
 * unless COIL_FAULT_SEAM is defined, so the shipped library has none of it.
 *
 * Threading: the spec and the op counters are shared with test threads and
 * live under f->lock; the power-loss records are touched only by the ring
 * thread (a cut from another thread hands the revert to the ring thread and
 * waits for it). */
#ifdef COIL_FAULT_SEAM

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "uring/uring_fault.h"
#include "uring/uring_internal.h"

#define SECTOR 4096u

int uring_run_quiesce(struct uring *r);

struct fault_rec {
	struct fault_rec *prev, *next;
	uint64_t off;
	uint32_t len;
	uint32_t pre_len;      /* bytes that existed before (EOF cuts it) */
	uint64_t done_gen;     /* 0 until the write finished */
	uint8_t *pre;
};

struct uring_fault {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct uring_fault_spec spec;
	uint64_t count[URING_OP_MAX_];   /* [0] = any */
	uint64_t base[URING_OP_MAX_];    /* counts when the spec was armed */
	bool fail_active;                /* sticky failure triggered */
	bool fail_fired, short_fired, eagain_fired, tear_fired, cut_fired;
	struct uring_io *eagain_io;
	unsigned eagain_left;
	int bfd;                         /* buffered fd on the same file */
	uint32_t kwrites;                /* write attempts in the kernel */

	bool cut;                        /* under lock; also read by ring */
	bool reverted;
	int cut_mode;
	uint64_t cut_seed;

	/* ring thread only */
	struct fault_rec *rec_head, *rec_tail;
	unsigned nrec;
	uint64_t gen;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uring_fault_spec g_next;
static bool g_has_next;
static struct uring *g_last;

static bool spec_ok(const struct uring_fault_spec *s)
{
	if (s->fail_kind >= URING_OP_MAX_ || s->short_kind >= URING_OP_MAX_ ||
	    s->eagain_kind >= URING_OP_MAX_ || s->cut_kind >= URING_OP_MAX_)
		return false;
	if (s->fail_errno < 0 || s->fail_errno > 4095)
		return false;
	if (s->cut_nth && (s->cut_mode < URING_CUT_DROP_ALL ||
			   s->cut_mode > URING_CUT_TORN))
		return false;
	return true;
}

static void arm_locked(struct uring_fault *f, const struct uring_fault_spec *s)
{
	if (s)
		f->spec = *s;
	else
		memset(&f->spec, 0, sizeof(f->spec));
	memcpy(f->base, f->count, sizeof(f->base));
	f->fail_active = false;
	f->fail_fired = f->short_fired = f->eagain_fired = false;
	f->tear_fired = f->cut_fired = false;
	f->eagain_io = NULL;
	f->eagain_left = 0;
}

int fault_attach(struct uring *r)
{
	struct uring_fault *f = calloc(1, sizeof(*f));
	char path[64];

	if (!f)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	/* a second, buffered descriptor on the same file: pre-images and
	 * reverts need no alignment, and the kernel keeps the page cache
	 * coherent with the O_DIRECT descriptor */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fd);
	f->bfd = open(path, O_RDWR | O_CLOEXEC);
	if (f->bfd < 0)
		f->bfd = open(path, O_RDONLY | O_CLOEXEC);
	r->fault = f;
	pthread_mutex_lock(&g_lock);
	if (g_has_next) {
		arm_locked(f, &g_next);
		g_has_next = false;
	}
	g_last = r;
	pthread_mutex_unlock(&g_lock);
	return 0;
}

static void recs_free(struct uring_fault *f)
{
	struct fault_rec *x, *n;

	for (x = f->rec_head; x; x = n) {
		n = x->next;
		free(x->pre);
		free(x);
	}
	f->rec_head = f->rec_tail = NULL;
	__atomic_store_n(&f->nrec, 0, __ATOMIC_RELAXED);
}

void fault_detach(struct uring *r)
{
	struct uring_fault *f = r->fault;

	pthread_mutex_lock(&g_lock);
	if (g_last == r)
		g_last = NULL;
	pthread_mutex_unlock(&g_lock);
	if (!f)
		return;
	recs_free(f);
	if (f->bfd >= 0)
		close(f->bfd);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f);
	r->fault = NULL;
}

/* ---- records (ring thread) ---------------------------------------------- */

static void rec_unlink(struct uring_fault *f, struct fault_rec *x)
{
	if (x->prev)
		x->prev->next = x->next;
	else
		f->rec_head = x->next;
	if (x->next)
		x->next->prev = x->prev;
	else
		f->rec_tail = x->prev;
	free(x->pre);
	free(x);
	__atomic_store_n(&f->nrec, f->nrec - 1, __ATOMIC_RELAXED);
}

static struct fault_rec *rec_make(struct uring_fault *f,
				  const struct uring_io *io)
{
	struct fault_rec *x = calloc(1, sizeof(*x));
	uint32_t got = 0;
	ssize_t n;

	/* test-only allocation; a failure just means no record */
	if (!x)
		return NULL;
	x->pre = malloc(io->len);
	if (!x->pre) {
		free(x);
		return NULL;
	}
	x->off = io->off;
	x->len = io->len;
	while (got < io->len) {
		n = pread(f->bfd, x->pre + got, io->len - got,
			  (off_t)(io->off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (uint32_t)n;
	}
	x->pre_len = got;
	x->prev = f->rec_tail;
	if (f->rec_tail)
		f->rec_tail->next = x;
	else
		f->rec_head = x;
	f->rec_tail = x;
	__atomic_store_n(&f->nrec, f->nrec + 1, __ATOMIC_RELAXED);
	return x;
}

static int pwrite_all(int fd, const uint8_t *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* ---- reverting (ring thread) -------------------------------------------- */

struct span {
	uint64_t a, b;
};

struct spans {
	struct span *v;
	size_t n, cap;
};

static void spans_add(struct spans *s, uint64_t a, uint64_t b)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct span *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return; /* test-only; worst case we revert too much */
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (struct span){ a, b };
}

static uint64_t rnd_next(uint64_t *s)
{
	/* xorshift64*: deterministic per seed, good enough for coin flips */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

/* Put back the pre-image of x over [a, b), except bytes a newer write that
 * was kept owns. */
static void revert_range(struct uring_fault *f, const struct fault_rec *x,
			 uint64_t a, uint64_t b, const struct spans *kept)
{
	static const uint8_t zeros[SECTOR];
	uint64_t pos = a;

	while (pos < b) {
		uint64_t end = b;
		bool covered = false;

		for (size_t i = 0; i < kept->n; i++) {
			const struct span *k = &kept->v[i];

			if (k->a <= pos && pos < k->b) {
				pos = COIL_MIN(k->b, b);
				covered = true;
				break;
			}
			if (k->a > pos && k->a < end)
				end = k->a;
		}
		if (covered)
			continue;
		for (uint64_t p = pos; p < end;) {
			uint64_t rel = p - x->off;
			uint64_t n;

			if (rel < x->pre_len) {
				n = COIL_MIN(end - p, x->pre_len - rel);
				(void)pwrite_all(f->bfd, x->pre + rel, n, p);
			} else {
				/* past the old EOF: zeros, size stays */
				n = COIL_MIN(end - p, (uint64_t)SECTOR);
				(void)pwrite_all(f->bfd, zeros, n, p);
			}
			p += n;
		}
		pos = end;
	}
}

static void do_revert(struct uring_fault *f)
{
	struct spans kept = { 0 };
	uint64_t rs = f->cut_seed ? f->cut_seed : 0x9E3779B97F4A7C15ull;

	/* newest first: an older revert must not undo a newer kept write */
	for (struct fault_rec *x = f->rec_tail; x; x = x->prev) {
		bool keep_all = false;
		uint64_t end = x->off + x->len;

		if (f->cut_mode == URING_CUT_RANDOM)
			keep_all = rnd_next(&rs) & 1;
		for (uint64_t a = x->off; a < end;) {
			uint64_t b = COIL_MIN(COIL_ALIGN_DOWN(a, SECTOR) + SECTOR,
					      end);
			bool keep = keep_all;

			if (f->cut_mode == URING_CUT_TORN)
				keep = rnd_next(&rs) & 1;
			if (keep)
				spans_add(&kept, a, b);
			else
				revert_range(f, x, a, b, &kept);
			a = b;
		}
	}
	free(kept.v);
	if (f->bfd >= 0)
		(void)fdatasync(f->bfd);
	recs_free(f);
}

/* ---- hooks from uring_loop.c -------------------------------------------- */

static bool kind_is(unsigned want, unsigned op)
{
	return want == URING_FAULT_ANY || want == op;
}

static uint64_t rel(const struct uring_fault *f, unsigned kind)
{
	return f->count[kind] - f->base[kind];
}

static void inject(struct uring_io *io, int res)
{
	io->_inject = res;
}

/* the tear_nth write: only the kept sectors reach the file, synchronously
 * through the buffered fd; the op reports full success */
static void tear_write(struct uring_fault *f, struct uring_io *io)
{
	uint64_t end = io->off + io->len;
	unsigned i = 0;

	for (uint64_t a = io->off; a < end; i++) {
		uint64_t b = COIL_MIN(COIL_ALIGN_DOWN(a, SECTOR) + SECTOR, end);
		unsigned bit = i < 64 ? i : 63;

		if (f->spec.tear_keep_mask >> bit & 1)
			(void)pwrite_all(f->bfd,
					 (const uint8_t *)io->buf + (a - io->off),
					 b - a, a);
		a = b;
	}
}

static void start_cut_locked(struct uring_fault *f, int mode, uint64_t seed)
{
	if (f->cut)
		return;
	f->cut = true;
	f->cut_mode = mode;
	f->cut_seed = seed;
}

int fault_on_issue(struct uring *r, struct uring_io *io)
{
	struct uring_fault *f = r->fault;
	const struct uring_fault_spec *s;
	bool first = false, tear = false;
	int ret = FAULT_PASS;

	if (!f)
		return FAULT_PASS;
	s = &f->spec;
	pthread_mutex_lock(&f->lock);
	if (!(io->_iflags & IF_COUNTED)) {
		io->_iflags |= IF_COUNTED;
		f->count[io->op]++;
		f->count[URING_FAULT_ANY]++;
		first = true;
	}
	if (f->cut) {
		inject(io, -EIO);
		ret = FAULT_INJECTED;
		goto out;
	}
	if (io->_iflags & IF_MERGED) {
		/* gathered only while nothing was armed (fault_armed) */
		f->kwrites++;
		goto out;
	}
	if (first) {
		if (s->cut_nth && !f->cut_fired && kind_is(s->cut_kind, io->op) &&
		    rel(f, s->cut_kind) == s->cut_nth) {
			f->cut_fired = true;
			start_cut_locked(f, s->cut_mode, s->cut_seed);
			inject(io, -EIO);
			ret = FAULT_INJECTED;
			goto out;
		}
		if (s->fail_nth && kind_is(s->fail_kind, io->op) &&
		    (f->fail_active || (!f->fail_fired &&
					rel(f, s->fail_kind) == s->fail_nth))) {
			f->fail_fired = true;
			f->fail_active = s->fail_sticky;
			inject(io, -(s->fail_errno ? s->fail_errno : EIO));
			ret = FAULT_INJECTED;
			goto out;
		}
		if (s->eagain_nth && !f->eagain_fired &&
		    kind_is(s->eagain_kind, io->op) &&
		    rel(f, s->eagain_kind) == s->eagain_nth) {
			f->eagain_fired = true;
			f->eagain_io = io;
			f->eagain_left = s->eagain_times ? s->eagain_times : 1;
		}
		if (s->short_nth && !f->short_fired &&
		    (io->op == URING_OP_READ || io->op == URING_OP_WRITE) &&
		    kind_is(s->short_kind, io->op) &&
		    rel(f, s->short_kind) == s->short_nth) {
			uint32_t n = s->short_len ? s->short_len : io->len / 2;

			if (r->direct)
				n = COIL_MAX((uint32_t)COIL_ALIGN_DOWN(n, r->dio_align),
					     r->dio_align);
			n = COIL_MAX(n, 1u);
			f->short_fired = true;
			if (n < io->len)
				io->_sub_len = n;
		}
		if (s->tear_nth && !f->tear_fired && io->op == URING_OP_WRITE &&
		    rel(f, URING_OP_WRITE) == s->tear_nth) {
			f->tear_fired = true;
			tear = true;
		}
	}
	if (f->eagain_io == io && f->eagain_left) {
		if (--f->eagain_left == 0)
			f->eagain_io = NULL;
		inject(io, -EAGAIN);
		ret = FAULT_INJECTED;
		goto out;
	}
	if ((io->op == URING_OP_WRITE || io->op == URING_OP_DISCARD) &&
	    s->record && !io->_rec && f->bfd >= 0)
		io->_rec = rec_make(f, io);
	if (tear) {
		tear_write(f, io);
		inject(io, (int)io->len);
		ret = FAULT_INJECTED;
		goto out;
	}
	if (io->op == URING_OP_FSYNC)
		io->_rec = (void *)(uintptr_t)f->gen;   /* what it will cover */
	if (io->op == URING_OP_WRITE || io->op == URING_OP_DISCARD)
		f->kwrites++;
out:
	pthread_mutex_unlock(&f->lock);
	return ret;
}

int fault_on_cqe(struct uring *r, struct uring_io *io, int res)
{
	struct uring_fault *f = r->fault;
	bool cut;

	if (!f)
		return res;
	if (io->_iflags & IF_KWRITE) {
		COIL_ASSERT(f->kwrites > 0);
		f->kwrites--;
	}
	pthread_mutex_lock(&f->lock);
	cut = f->cut;
	pthread_mutex_unlock(&f->lock);
	/* the device vanished: whatever the kernel said, the caller hears
	 * -EIO (the data may or may not have landed: it is recorded) */
	if (cut && !(io->_iflags & IF_QUIESCE))
		return -EIO;
	return res;
}

void fault_on_finish(struct uring *r, struct uring_io *io, int res)
{
	struct uring_fault *f = r->fault;
	struct fault_rec *x, *n;
	uint64_t upto;
	bool cut;

	if (!f)
		return;
	if (io->op == URING_OP_WRITE || io->op == URING_OP_DISCARD) {
		x = io->_rec;
		if (x)
			x->done_gen = ++f->gen;
		io->_rec = NULL;
		return;
	}
	if (io->op != URING_OP_FSYNC)
		return;
	upto = (uint64_t)(uintptr_t)io->_rec;
	io->_rec = NULL;
	pthread_mutex_lock(&f->lock);
	cut = f->cut;
	pthread_mutex_unlock(&f->lock);
	if (res < 0 || cut)
		return;
	/* the fsync covered every write that finished before it was issued */
	for (x = f->rec_head; x; x = n) {
		n = x->next;
		if (x->done_gen && x->done_gen <= upto)
			rec_unlink(f, x);
	}
}

/* uring_io_now's I/O: counted like one through the ring, or refused
 * (false) while anything is armed, so faults and power cuts see it on the
 * ring instead. */
bool fault_on_now(struct uring *r, struct uring_io *io)
{
	struct uring_fault *f = r->fault;
	const struct uring_fault_spec *s;
	bool armed;

	if (!f)
		return true;
	pthread_mutex_lock(&f->lock);
	s = &f->spec;
	armed = f->cut || f->eagain_io || s->fail_nth || s->short_nth ||
		s->eagain_nth || s->tear_nth || s->record || s->cut_nth;
	if (!armed) {
		f->count[io->op]++;
		f->count[URING_FAULT_ANY]++;
	}
	pthread_mutex_unlock(&f->lock);
	return !armed;
}

bool fault_armed(struct uring *r)
{
	struct uring_fault *f = r->fault;
	const struct uring_fault_spec *s;
	bool armed;

	if (!f)
		return false;
	pthread_mutex_lock(&f->lock);
	s = &f->spec;
	armed = f->cut || f->eagain_io || s->fail_nth || s->short_nth ||
		s->eagain_nth || s->tear_nth || s->record || s->cut_nth;
	pthread_mutex_unlock(&f->lock);
	return armed;
}

void fault_poll(struct uring *r)
{
	struct uring_fault *f = r->fault;
	bool go;

	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	go = f->cut && !f->reverted;
	pthread_mutex_unlock(&f->lock);
	/* only once every write in the kernel has landed, or a late write
	 * would overwrite the revert */
	if (!go || f->kwrites)
		return;
	do_revert(f);
	pthread_mutex_lock(&f->lock);
	f->reverted = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

bool fault_busy(struct uring *r)
{
	struct uring_fault *f = r->fault;
	bool busy;

	if (!f)
		return false;
	pthread_mutex_lock(&f->lock);
	busy = f->cut && !f->reverted;
	pthread_mutex_unlock(&f->lock);
	return busy;
}

/* ---- public seam API ---------------------------------------------------- */

int uring_fault_arm(struct uring *r, const struct uring_fault_spec *spec)
{
	if (!r || !r->fault || (spec && !spec_ok(spec)))
		return -EINVAL;
	pthread_mutex_lock(&r->fault->lock);
	arm_locked(r->fault, spec);
	pthread_mutex_unlock(&r->fault->lock);
	return 0;
}

uint64_t uring_fault_count(struct uring *r, unsigned kind)
{
	uint64_t n;

	if (!r || !r->fault || kind >= URING_OP_MAX_)
		return 0;
	pthread_mutex_lock(&r->fault->lock);
	n = r->fault->count[kind];
	pthread_mutex_unlock(&r->fault->lock);
	return n;
}

unsigned uring_fault_uncovered(struct uring *r)
{
	if (!r || !r->fault)
		return 0;
	return __atomic_load_n(&r->fault->nrec, __ATOMIC_RELAXED);
}

bool uring_fault_is_cut(struct uring *r)
{
	bool cut;

	if (!r || !r->fault)
		return false;
	pthread_mutex_lock(&r->fault->lock);
	cut = r->fault->cut;
	pthread_mutex_unlock(&r->fault->lock);
	return cut;
}

int uring_fault_cut(struct uring *r, int mode, uint64_t seed)
{
	struct uring_fault *f;
	int ret;

	if (!r || !r->fault || mode < URING_CUT_DROP_ALL || mode > URING_CUT_TORN)
		return -EINVAL;
	f = r->fault;
	pthread_mutex_lock(&f->lock);
	start_cut_locked(f, mode, seed);
	pthread_mutex_unlock(&f->lock);
	if (uring_on_ring_thread(r))
		return 0;
	/* a turn of the ring thread after the writes before us finished;
	 * its result is -EIO or 0, either is fine */
	ret = uring_run_quiesce(r);
	if (ret == -ESHUTDOWN)
		return ret;
	pthread_mutex_lock(&f->lock);
	while (!f->reverted)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
	return 0;
}

void uring_fault_set_next(const struct uring_fault_spec *spec)
{
	pthread_mutex_lock(&g_lock);
	g_has_next = spec != NULL;
	if (spec)
		g_next = *spec;
	pthread_mutex_unlock(&g_lock);
}

struct uring *uring_fault_last(void)
{
	struct uring *r;

	pthread_mutex_lock(&g_lock);
	r = g_last;
	pthread_mutex_unlock(&g_lock);
	return r;
}

#else
/* ISO C forbids an empty translation unit */
typedef int uring_fault_unused;
#endif
