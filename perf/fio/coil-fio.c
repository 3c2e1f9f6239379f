/* coil-fio.c — fio external ioengine that drives coil through coil.h.
 *
 *   ioengine=external:/path/to/coil-fio.so
 *   coil_store=PATH        store file (created when missing)
 *   coil_size=BYTES        the most a new store may grow to (default: as
 *                          large as the file system; with coil_zero_fill,
 *                          a fixed store of max(1 GiB, 2 x job size))
 *   coil_compression=none|zstd|zstd:N
 *   coil_pool=fair|semaphore
 *   coil_prefetch=0|1
 *   coil_cache=BYTES       decoded-blob cache budget (empty = coil default)
 *   coil_workers=N         pool workers (0 = one per core)
 *   coil_zero_fill=0|1     create the store written whole (COIL_ZERO_FILL)
 *   coil_optimize=0|1      run the optimizer next to the job (default 0): a
 *                          thread started once the store is open calls
 *                          coil_optimize() with a 16 MiB budget again and
 *                          again until it returns 0 (nothing cold left:
 *                          data written in the last optimize_cold seconds,
 *                          default 30, is left alone) or an error, or the
 *                          job ends; the job's cleanup stops it (after the
 *                          call in progress) and joins it before the store
 *                          is closed.  One thread per job
 *                          that sets it.  Used by perf/bench_optimize_fg.py
 *                          to measure the optimizer's foreground cost.
 *
 * Every fio file is a coil object named by its filename.  Jobs run with
 * thread=1 in one fio process share one open store through a refcounted
 * process-wide table keyed by the store path; coil itself lets one process
 * open a store, so jobs in separate processes get a clear -EBUSY error.
 * The first job to open a store chooses its options.  In thread mode the
 * store stays open until fio unloads the engine, so stonewalled jobs share
 * its cache and statistics.
 *
 * I/O is asynchronous: ->queue() parks the io_u, ->commit() submits the
 * batch with coil_read()/coil_write()/coil_flush(), completions arrive on a
 * coil thread and are pushed into a bounded per-job completion ring that
 * ->getevents() waits on (honouring its timeout) and ->event() drains.
 * DDIR_SYNC/DATASYNC become coil_flush; trims are refused (EOPNOTSUPP).
 * A write larger than coil_write's 16 MiB limit goes out in parts that
 * complete the io_u together (fio-level atomicity is not needed there).
 *
 * Setting COIL_FIO_STATS=FILE makes coil_stats_json() of each store be
 * written into FILE as it closes (used by perf/demo.sh and perf/bench_*).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fio.h"
#include "optgroup.h"

#include "coil.h"

struct coil_fio_options {
	void *pad;			/* fio: off1 must not be 0 */
	char *store;
	unsigned long long size;
	char *compression;
	unsigned int pool;
	unsigned int prefetch;
	char *cache;
	unsigned int workers;
	unsigned int zero_fill;
	unsigned int poll_us;
	unsigned int inline_cb;
	unsigned int optimize;
};

static struct fio_option options[] = {
	{
		.name = "coil_store",
		.lname = "coil store path",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct coil_fio_options, store),
		.help = "Path of the coil store (created when missing)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_size",
		.lname = "coil store capacity",
		.type = FIO_OPT_STR_VAL,
		.off1 = offsetof(struct coil_fio_options, size),
		.help = "Largest a newly created store may grow to (0 = the file system's size)",
		.def = "0",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_compression",
		.lname = "coil compression",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct coil_fio_options, compression),
		.help = "none, zstd or zstd:N (default: coil's, zstd:1)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_pool",
		.lname = "coil worker pool mode",
		.type = FIO_OPT_STR,
		.off1 = offsetof(struct coil_fio_options, pool),
		.help = "Worker pool scheduling",
		.def = "fair",
		.posval = {
			{ .ival = "fair", .oval = COIL_POOL_FAIR,
			  .help = "per-request round-robin" },
			{ .ival = "semaphore", .oval = COIL_POOL_SEMAPHORE,
			  .help = "batch-granularity semaphore" },
		},
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_prefetch",
		.lname = "coil readahead",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct coil_fio_options, prefetch),
		.help = "Readahead on (1) or off (0)",
		.def = "1",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_cache",
		.lname = "coil cache bytes",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct coil_fio_options, cache),
		.help = "Decoded-blob cache budget in bytes, k/m/g suffixes (default: coil's)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_workers",
		.lname = "coil pool workers",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct coil_fio_options, workers),
		.help = "Worker pool threads (0 = one per core)",
		.def = "0",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_zero_fill",
		.lname = "coil zero-filled store",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct coil_fio_options, zero_fill),
		.help = "Create the store by writing the whole file (COIL_ZERO_FILL): no unwritten extents, freed segments not punched",
		.def = "0",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_poll_us",
		.lname = "coil completion polling",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct coil_fio_options, poll_us),
		.help = "Poll for completions up to this many microseconds before sleeping (0 = sleep at once)",
		.def = "0",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_inline_cb",
		.lname = "coil inline completions",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct coil_fio_options, inline_cb),
		.help = "Reads served without device I/O (cache hits) complete inside the submit (COIL_INLINE_CB)",
		.def = "1",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "coil_optimize",
		.lname = "coil optimizer during the job",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct coil_fio_options, optimize),
		.help = "Run coil_optimize (16 MiB per call) on a thread of its own while the job runs",
		.def = "0",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

/* --- the process-wide store table ------------------------------------- */

/* One entry per store path open in this process.  Jobs with thread=1 share
 * the entry; the last release closes the store.  The table is short (one
 * entry per distinct coil_store), so a list is enough. */
struct store_ref {
	struct store_ref *next;
	char *path;
	coil_store *store;
	unsigned int refs;
	char sig[160];		/* the options it was opened with */
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct store_ref *table;

/* Parse "123", "64k", "16M", "1g" (binary units).  @return 0 or -EINVAL. */
static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'I')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end != '\0' || (shift && v > (ULLONG_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Translate the job's engine options into coil_options.  A store created by
 * fio grows as the job writes, up to coil_size if given. */
static int options_fill(struct thread_data *td, struct coil_options *co)
{
	struct coil_fio_options *fo = td->eo;
	uint64_t want;

	coil_options_init(co);
	co->flags = COIL_CREATE | (fo->zero_fill ? COIL_ZERO_FILL : 0);
	if (read_only)
		co->flags = COIL_RDONLY;
	/* io_done only appends to the job's completion ring under its own
	 * lock, which commit does not hold: safe inside coil_read. */
	if (fo->inline_cb)
		co->flags |= COIL_INLINE_CB;
	if (fo->size) {
		co->size = fo->size;
	} else if (fo->zero_fill) {
		/* a fixed store, written whole: sized for the job */
		want = 2 * (uint64_t)td->o.size;
		co->size = want > (1ull << 30) ? want : 1ull << 30;
	}
	/* else coil's default: a store that grows, as large as the file
	 * system at most */
	if (fo->compression && fo->compression[0])
		co->compression = fo->compression;
	co->pool_mode = fo->pool;
	co->prefetch = fo->prefetch ? 1 : 0;
	co->workers = fo->workers;
	if (fo->cache && fo->cache[0] &&
	    parse_bytes(fo->cache, &co->cache_bytes) < 0) {
		log_err("coil: coil_cache=%s is not a byte count\n", fo->cache);
		return -EINVAL;
	}
	return 0;
}

/* The options that shape an open store, to warn when a job sharing it
 * asked for different ones (the first opener's win). */
static void options_sig(struct thread_data *td, char *buf, size_t len)
{
	struct coil_fio_options *fo = td->eo;

	snprintf(buf, len, "compression=%s pool=%s prefetch=%u cache=%s workers=%u inline_cb=%u",
		 fo->compression ? fo->compression : "", fo->pool ? "semaphore" : "fair",
		 fo->prefetch, fo->cache ? fo->cache : "", fo->workers, fo->inline_cb);
}

/* The table key: one spelling per file, so "a.coil" and "./a.coil" name
 * one entry (the directory resolved; the file itself may not exist yet). */
static int store_key(const char *path, char *key, size_t len)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t dlen = slash ? (size_t)(slash - path) : 0;

	if (realpath(path, real)) {
		snprintf(key, len, "%s", real);
		return 0;
	}
	if (slash && dlen == 0)
		dlen = 1;	/* "/name" */
	if (dlen >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, slash ? path : ".", slash ? dlen : 1);
	dir[slash ? dlen : 1] = '\0';
	if (!realpath(dir, real))
		return -errno;
	if ((size_t)snprintf(key, len, "%s/%s", real, base) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* Open (or share) the job's store.  @return 0 with *@out, or the negative
 * errno after logging why: fio shows the errno, so it must be coil's, not a
 * generic EINVAL. */
static int store_get(struct thread_data *td, struct store_ref **out)
{
	struct coil_fio_options *fo = td->eo;
	struct coil_options co;
	struct store_ref *r;
	char key[PATH_MAX];
	coil_store *s;
	int ret;

	*out = NULL;
	if (!fo->store || !fo->store[0]) {
		log_err("coil: %s: set coil_store=PATH\n", td->o.name);
		return -EINVAL;
	}
	ret = store_key(fo->store, key, sizeof(key));
	if (ret < 0) {
		log_err("coil: coil_store=%s: %s\n", fo->store, strerror(-ret));
		return ret;
	}
	pthread_mutex_lock(&table_lock);
	for (r = table; r; r = r->next) {
		if (strcmp(r->path, key) == 0) {
			char sig[sizeof(r->sig)];

			options_sig(td, sig, sizeof(sig));
			if (strcmp(sig, r->sig) != 0)
				log_info("coil: %s: store %s is already open with %s; "
					 "this job's %s do not apply\n", td->o.name,
					 r->path, r->sig, sig);
			r->refs++;
			pthread_mutex_unlock(&table_lock);
			*out = r;
			return 0;
		}
	}
	/* Open under the lock so two threads never race to open one path;
	 * the second would see -EBUSY from coil's advisory lock. */
	r = NULL;
	ret = options_fill(td, &co);
	if (ret < 0)
		goto out;
	ret = coil_open(fo->store, &co, &s);
	if (ret == -EBUSY) {
		log_err("coil: store %s is open in another process; coil opens a "
			"store from one process at a time. Run jobs that share "
			"a store with thread=1 (one fio process), or give each "
			"process its own coil_store.\n", fo->store);
		goto out;
	}
	if (ret < 0) {
		log_err("coil: cannot open store %s: %s\n", fo->store,
			coil_strerror(ret));
		goto out;
	}
	r = calloc(1, sizeof(*r));
	if (r)
		r->path = strdup(key);
	if (!r || !r->path) {
		free(r);
		r = NULL;
		coil_close(s);
		log_err("coil: out of memory\n");
		ret = -ENOMEM;
		goto out;
	}
	r->store = s;
	r->refs = 1;
	options_sig(td, r->sig, sizeof(r->sig));
	r->next = table;
	table = r;
out:
	pthread_mutex_unlock(&table_lock);
	*out = r;
	return r ? 0 : ret;
}

static void stats_dump(coil_store *s)
{
	const char *path = getenv("COIL_FIO_STATS");
	char *buf;
	FILE *fp;
	int n;

	if (!path || !path[0])
		return;
	n = coil_stats_json_dup(s, 0, &buf);
	if (n < 0)
		return;
	fp = fopen(path, "w");
	if (fp && n >= 0) {
		fputs(buf, fp);
		fputc('\n', fp);
	}
	if (fp)
		fclose(fp);
	free(buf);
}

static void store_close(struct store_ref *r)
{
	int ret;

	stats_dump(r->store);
	ret = coil_close(r->store);
	if (ret < 0)
		log_err("coil: closing store %s: %s\n", r->path,
			coil_strerror(ret));
	free(r->path);
	free(r);
}

/* Drop a reference.  With @linger the store stays open at zero references
 * until the process ends, so stonewalled jobs of one fio process (threads)
 * share its cache and its statistics; forked job processes leave through
 * _exit() without running destructors, so they close at once. */
static void store_put(struct store_ref *r, bool linger)
{
	struct store_ref **pp;

	if (!r)
		return;
	pthread_mutex_lock(&table_lock);
	if (--r->refs > 0 || linger) {
		pthread_mutex_unlock(&table_lock);
		return;
	}
	for (pp = &table; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	}
	store_close(r);
	pthread_mutex_unlock(&table_lock);
}

/* fio unloads the engine (or the process exits) after its last job:
 * close what lingers, which checkpoints and releases the store lock. */
__attribute__((destructor)) static void table_close_all(void)
{
	struct store_ref *r;

	pthread_mutex_lock(&table_lock);
	while ((r = table) != NULL) {
		table = r->next;
		if (r->refs)
			continue;	/* a job still runs: leave it to coil */
		store_close(r);
	}
	pthread_mutex_unlock(&table_lock);
}

/* --- per-job state ---------------------------------------------------- */

struct coil_td {
	struct store_ref *ref;
	unsigned int depth;		/* iodepth: bounds every array below */

	struct io_u **pending;		/* queued, not yet submitted */
	unsigned int npending;

	/* Completion ring, filled by coil callbacks on coil's threads. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct io_u **done;
	unsigned int done_head, done_count;
	unsigned int want;		/* waiter needs this many; 0 = none */
	uint64_t poll_ns;		/* coil_poll_us */

	struct io_u **events;		/* the last getevents() batch */

	/* coil_optimize=1: the optimizer's thread (opt_lock guards opt_stop
	 * so the thread's back-off sleep ends at once on a stop). */
	pthread_t opt_thread;
	bool opt_started;
	bool opt_stop;
	pthread_mutex_t opt_lock;
	pthread_cond_t opt_cond;
};

/* Per-io_u state, allocated once per io_u at setup (->io_u_init).  A write
 * larger than one coil_write may take is sent in parts; the io_u completes
 * when the last part does. */
struct io_state {
	struct coil_td *ct;
	struct io_u *io_u;
	atomic_uint parts;		/* completions still to come */
	atomic_int err;			/* first error (positive errno) */
	atomic_ullong bytes;		/* bytes moved by the parts */
};

/* coil_write takes at most 16 MiB: one write is one journal record. */
#define COIL_FIO_PART_MAX (16u << 20)

/* @n parts finished with @res (bytes or -errno). */
static void parts_done(struct io_state *st, int64_t res, unsigned int n)
{
	struct io_u *io_u = st->io_u;
	struct coil_td *ct = st->ct;
	unsigned long long bytes;
	int zero = 0;

	if (res < 0)
		atomic_compare_exchange_strong(&st->err, &zero, (int)-res);
	else
		atomic_fetch_add(&st->bytes, (unsigned long long)res);
	if (atomic_fetch_sub(&st->parts, n) != n)
		return;
	bytes = atomic_load(&st->bytes);
	io_u->error = atomic_load(&st->err);
	if (!io_u->error && ddir_rw(io_u->ddir) && bytes < io_u->xfer_buflen)
		io_u->resid = io_u->xfer_buflen - bytes;
	pthread_mutex_lock(&ct->lock);
	/* fio never has more than iodepth io_us in flight. */
	ct->done[(ct->done_head + ct->done_count) % ct->depth] = io_u;
	/* released for poll_done(), which reads it without the lock */
	__atomic_store_n(&ct->done_count, ct->done_count + 1, __ATOMIC_RELEASE);
	if (ct->want && ct->done_count >= ct->want)
		pthread_cond_signal(&ct->cond);
	pthread_mutex_unlock(&ct->lock);
}

static void io_done(void *arg, int64_t res)
{
	parts_done(arg, res, 1);
}

static struct io_u *fio_coil_event(struct thread_data *td, int event)
{
	struct coil_td *ct = td->io_ops_data;

	return ct->events[event];
}

/* Absolute CLOCK_MONOTONIC time @t from now. */
static void deadline_set(struct timespec *d, const struct timespec *t)
{
	clock_gettime(CLOCK_MONOTONIC, d);
	d->tv_sec += t->tv_sec;
	d->tv_nsec += t->tv_nsec;
	if (d->tv_nsec >= 1000000000L) {
		d->tv_sec++;
		d->tv_nsec -= 1000000000L;
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* coil_poll_us: wait for @min completions by watching the count for up to
 * poll_ns before the caller sleeps on the condition variable.  Completions
 * arrive on coil's ring thread; a sleeping fio thread costs a futex wake
 * per batch, and on a virtual machine an idle vCPU's wake-up is tens of
 * microseconds, a good part of a 4 KiB read's service time.  The count is
 * read without the lock: a stale value only ends the poll early or late. */
static void poll_done(struct coil_td *ct, unsigned int min)
{
	uint64_t t0 = 0;

	for (unsigned int k = 0;; k++) {
		if (__atomic_load_n(&ct->done_count, __ATOMIC_ACQUIRE) >= min)
			return;
		if ((k & 31) == 0) {
			uint64_t now = mono_ns();

			if (!t0)
				t0 = now;
			else if (now - t0 >= ct->poll_ns)
				return;
		}
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
}

static int fio_coil_getevents(struct thread_data *td, unsigned int min,
			      unsigned int max, const struct timespec *t)
{
	struct coil_td *ct = td->io_ops_data;
	struct timespec deadline;
	bool have_deadline = false;
	unsigned int n, i;
	int ret = 0;

	if (max > ct->depth)
		max = ct->depth;
	if (min > max)
		min = max;
	if (ct->poll_ns && min && (!t || t->tv_sec || t->tv_nsec))
		poll_done(ct, min);
	pthread_mutex_lock(&ct->lock);
	/* The clock is read only when the call must actually sleep: fio
	 * polls with a zero timeout often, and reaping is the hot path. */
	while (ct->done_count < min && ret != ETIMEDOUT) {
		ct->want = min;
		if (!t) {
			pthread_cond_wait(&ct->cond, &ct->lock);
			continue;
		}
		if (!t->tv_sec && !t->tv_nsec)
			break;
		if (!have_deadline) {
			deadline_set(&deadline, t);
			have_deadline = true;
		}
		ret = pthread_cond_timedwait(&ct->cond, &ct->lock, &deadline);
	}
	ct->want = 0;
	n = ct->done_count < max ? ct->done_count : max;
	for (i = 0; i < n; i++) {
		ct->events[i] = ct->done[ct->done_head];
		ct->done_head = (ct->done_head + 1) % ct->depth;
	}
	__atomic_store_n(&ct->done_count, ct->done_count - n, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&ct->lock);
	return (int)n;
}

static enum fio_q_status fio_coil_queue(struct thread_data *td,
					struct io_u *io_u)
{
	struct coil_td *ct = td->io_ops_data;

	fio_ro_check(td, io_u);
	if (io_u->ddir == DDIR_TRIM) {
		io_u->error = EOPNOTSUPP;
		return FIO_Q_COMPLETED;
	}
	if (ct->npending == ct->depth)
		return FIO_Q_BUSY;
	ct->pending[ct->npending++] = io_u;
	return FIO_Q_QUEUED;
}

/* Submit the parked batch.  A request coil refuses at submission completes
 * through the ring with its error, so fio sees it like any other. */
static int fio_coil_commit(struct thread_data *td)
{
	struct coil_td *ct = td->io_ops_data;
	struct timespec now;
	unsigned int i;

	if (!ct->npending)
		return 0;
	if (fio_fill_issue_time(td)) {
		fio_gettime(&now, NULL);
		for (i = 0; i < ct->npending; i++) {
			memcpy(&ct->pending[i]->issue_time, &now, sizeof(now));
			io_u_queued(td, ct->pending[i]);
		}
	}
	for (i = 0; i < ct->npending; i++) {
		struct io_u *io_u = ct->pending[i];
		struct io_state *st = io_u->engine_data;
		coil_obj *obj = io_u->file->engine_data;
		unsigned int nparts = 1, k;
		int ret = 0;

		if (io_u->ddir == DDIR_WRITE)
			nparts = (unsigned int)((io_u->xfer_buflen +
				  COIL_FIO_PART_MAX - 1) / COIL_FIO_PART_MAX);
		if (!nparts)
			nparts = 1;	/* a zero-length write still completes */
		atomic_store(&st->parts, nparts);
		atomic_store(&st->err, 0);
		atomic_store(&st->bytes, 0);
		switch (io_u->ddir) {
		case DDIR_READ:
			ret = coil_read(obj, io_u->xfer_buf, io_u->xfer_buflen,
					io_u->offset, io_done, st);
			k = 1;
			break;
		case DDIR_WRITE:
			for (k = 0; k < nparts && ret >= 0; k++) {
				unsigned long long off = (unsigned long long)k *
							 COIL_FIO_PART_MAX;
				unsigned long long len = io_u->xfer_buflen - off;

				if (len > COIL_FIO_PART_MAX)
					len = COIL_FIO_PART_MAX;
				ret = coil_write(obj, (char *)io_u->xfer_buf + off,
						 len, io_u->offset + off, io_done, st);
			}
			break;
		case DDIR_SYNC:
		case DDIR_DATASYNC:
		case DDIR_SYNC_FILE_RANGE:
			ret = coil_flush(ct->ref->store, io_done, st);
			k = 1;
			break;
		default:
			ret = -EOPNOTSUPP;
			k = 1;
			break;
		}
		/* The refused part and those never sent complete here. */
		if (ret < 0)
			parts_done(st, ret, nparts - k + 1);
	}
	io_u_mark_submit(td, ct->npending);
	ct->npending = 0;
	return 0;
}

/* --- coil_optimize=1 -------------------------------------------------- */

/* Bytes of live data one coil_optimize call takes at most: small enough
 * that a stop waits for one call only (seconds at zstd level 19). */
#define COIL_FIO_OPT_BUDGET (16ull << 20)
/* A call that found no room to relocate into did nothing: wait this long
 * before the next, rather than spin on the cleaner. */
#define COIL_FIO_OPT_BACKOFF_MS 100

static bool opt_stopping(struct coil_td *ct)
{
	bool stop;

	pthread_mutex_lock(&ct->opt_lock);
	stop = ct->opt_stop;
	pthread_mutex_unlock(&ct->opt_lock);
	return stop;
}

static void *optimize_main(void *arg)
{
	struct coil_td *ct = arg;
	struct coil_optimize_opts o = { .budget_bytes = COIL_FIO_OPT_BUDGET };
	int ret = 1;

	while (ret == 1 && !opt_stopping(ct)) {
		struct coil_optimize_report r;

		/* (a cohort not worth a dictionary is remembered by the
		 * store, so calling again does not train on it again) */
		ret = coil_optimize(ct->ref->store, &o, &r);
		if (ret == 1 && r.scanned == 0 && r.rewritten == 0) {
			struct timespec t = {
				.tv_nsec = COIL_FIO_OPT_BACKOFF_MS * 1000000L,
			};
			struct timespec d;

			deadline_set(&d, &t);
			pthread_mutex_lock(&ct->opt_lock);
			while (!ct->opt_stop &&
			       pthread_cond_timedwait(&ct->opt_cond, &ct->opt_lock,
						      &d) != ETIMEDOUT)
				;
			pthread_mutex_unlock(&ct->opt_lock);
		}
	}
	if (ret < 0)
		log_err("coil: optimizer on %s: %s\n", ct->ref->path,
			coil_strerror(ret));
	return NULL;
}

static int optimize_start(struct thread_data *td, struct coil_td *ct)
{
	int ret;

	if (read_only) {
		log_info("coil: %s: coil_optimize=1 ignored: read-only run\n",
			 td->o.name);
		return 0;
	}
	ret = pthread_create(&ct->opt_thread, NULL, optimize_main, ct);
	if (ret) {
		log_err("coil: %s: cannot start the optimizer thread: %s\n",
			td->o.name, strerror(ret));
		return -ret;
	}
	ct->opt_started = true;
	return 0;
}

/* Stop the optimizer's thread: the call in progress finishes its budget. */
static void optimize_stop(struct coil_td *ct)
{
	if (!ct->opt_started)
		return;
	pthread_mutex_lock(&ct->opt_lock);
	ct->opt_stop = true;
	pthread_cond_signal(&ct->opt_cond);
	pthread_mutex_unlock(&ct->opt_lock);
	pthread_join(ct->opt_thread, NULL);
	ct->opt_started = false;
}

static int fio_coil_io_u_init(struct thread_data *td, struct io_u *io_u)
{
	struct io_state *st = calloc(1, sizeof(*st));

	if (!st)
		return 1;
	st->ct = td->io_ops_data;
	st->io_u = io_u;
	io_u->engine_data = st;
	return 0;
}

static void fio_coil_io_u_free(struct thread_data fio_unused *td,
			       struct io_u *io_u)
{
	free(io_u->engine_data);
	io_u->engine_data = NULL;
}

static int fio_coil_open_file(struct thread_data *td, struct fio_file *f)
{
	struct coil_td *ct = td->io_ops_data;
	unsigned int flags = read_only ? 0 : COIL_CREATE;
	uint64_t size;
	coil_obj *obj;
	int ret;

	ret = coil_obj_open(ct->ref->store, f->file_name, flags, &obj);
	if (ret < 0) {
		log_err("coil: %s: object %s: %s\n", td->o.name, f->file_name,
			coil_strerror(ret));
		td_verror(td, -ret, "coil_obj_open");
		return 1;
	}
	FILE_SET_ENG_DATA(f, obj);
	/* fio stops at real_file_size: let the job's range (or the object,
	 * when larger) be the file. */
	if (coil_obj_size(obj, &size) < 0)
		size = 0;
	if (f->io_size != -1ULL && f->file_offset + f->io_size > size)
		size = f->file_offset + f->io_size;
	f->real_file_size = size;
	return 0;
}

static int fio_coil_close_file(struct thread_data fio_unused *td,
			       struct fio_file *f)
{
	coil_obj *obj = FILE_ENG_DATA(f);
	int ret;

	FILE_SET_ENG_DATA(f, NULL);
	ret = coil_obj_close(obj);
	return ret < 0 ? -ret : 0;
}

static int fio_coil_unlink_file(struct thread_data *td, struct fio_file *f)
{
	struct coil_td *ct = td->io_ops_data;
	int ret;

	if (!ct || !ct->ref)
		return 0;
	ret = coil_obj_remove(ct->ref->store, f->file_name);
	return ret < 0 && ret != -ENOENT ? -ret : 0;
}

/* Called before the job starts, in fio's main process when
 * create_serialize=1 (the default).  With size= given, the range is the
 * job's (-1 = unknown until open, which then sets it); without, the store
 * (if it exists) is opened briefly to read the object sizes, and closed
 * again so that forked job processes can open it. */
static int fio_coil_setup(struct thread_data *td)
{
	struct coil_fio_options *fo = td->eo;
	struct store_ref *r;
	struct fio_file *f;
	struct stat st;
	unsigned int i;
	int ret;

	if (td->o.size || td->o.file_size_low) {
		for_each_file(td, f, i)
			f->real_file_size = -1ULL;
		return 0;
	}
	for_each_file(td, f, i)
		f->real_file_size = 0;
	if (!fo->store || stat(fo->store, &st) < 0)
		return 0;
	ret = store_get(td, &r);
	if (ret < 0) {
		td_verror(td, -ret, "coil_open");
		return 1;
	}
	for_each_file(td, f, i) {
		coil_obj *obj;
		uint64_t sz = 0;

		if (coil_obj_open(r->store, f->file_name, 0, &obj) < 0)
			continue;
		if (coil_obj_size(obj, &sz) == 0)
			f->real_file_size = sz;
		coil_obj_close(obj);
	}
	store_put(r, false);
	return 0;
}

static void fio_coil_cleanup(struct thread_data *td)
{
	struct coil_td *ct = td->io_ops_data;
	struct fio_file *f;
	unsigned int i;

	if (!ct)
		return;
	/* The optimizer calls into the store: it ends before the close. */
	optimize_stop(ct);
	/* Objects left open on an error path must close before the store. */
	for_each_file(td, f, i) {
		if (FILE_ENG_DATA(f))
			fio_coil_close_file(td, f);
	}
	store_put(ct->ref, td->o.use_thread);
	pthread_cond_destroy(&ct->cond);
	pthread_mutex_destroy(&ct->lock);
	pthread_cond_destroy(&ct->opt_cond);
	pthread_mutex_destroy(&ct->opt_lock);
	free(ct->pending);
	free(ct->done);
	free(ct->events);
	free(ct);
	td->io_ops_data = NULL;
}

static int fio_coil_init(struct thread_data *td)
{
	struct coil_td *ct;
	pthread_condattr_t ca;
	int ret;

	ct = calloc(1, sizeof(*ct));
	if (!ct)
		return 1;
	ct->depth = td->o.iodepth ? td->o.iodepth : 1;
	ct->poll_ns = (uint64_t)((struct coil_fio_options *)td->eo)->poll_us * 1000u;
	ct->pending = calloc(ct->depth, sizeof(*ct->pending));
	ct->done = calloc(ct->depth, sizeof(*ct->done));
	ct->events = calloc(ct->depth, sizeof(*ct->events));
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ct->cond, &ca);
	pthread_cond_init(&ct->opt_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&ct->lock, NULL);
	pthread_mutex_init(&ct->opt_lock, NULL);
	td->io_ops_data = ct;
	if (!ct->pending || !ct->done || !ct->events) {
		fio_coil_cleanup(td);
		return 1;
	}
	ret = store_get(td, &ct->ref);
	if (ret < 0) {
		fio_coil_cleanup(td);
		td_verror(td, -ret, "coil_open");
		return 1;
	}
	if (((struct coil_fio_options *)td->eo)->optimize) {
		ret = optimize_start(td, ct);
		if (ret < 0) {
			fio_coil_cleanup(td);
			td_verror(td, -ret, "pthread_create");
			return 1;
		}
	}
	return 0;
}

/* fio finds an external engine through this symbol (dlsym "ioengine"). */
__attribute__((visibility("default"))) struct ioengine_ops ioengine = {
	.name = "coil",
	.version = FIO_IOOPS_VERSION,
	/* FIO_RAWIO: coil writes O_DIRECT itself, so fio page-aligns its
	 * buffers (its only effect besides a warning for bs_unaligned) and an
	 * uncompressed block-aligned write goes out from fio's buffer without
	 * a copy (compression.writes_zero_copy) */
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_ASYNCIO_SETS_ISSUE_TIME |
		 FIO_RAWIO,
	.setup = fio_coil_setup,
	.init = fio_coil_init,
	.queue = fio_coil_queue,
	.commit = fio_coil_commit,
	.getevents = fio_coil_getevents,
	.event = fio_coil_event,
	.cleanup = fio_coil_cleanup,
	.open_file = fio_coil_open_file,
	.close_file = fio_coil_close_file,
	.unlink_file = fio_coil_unlink_file,
	.io_u_init = fio_coil_io_u_init,
	.io_u_free = fio_coil_io_u_free,
	.options = options,
	.option_struct_size = sizeof(struct coil_fio_options),
};
