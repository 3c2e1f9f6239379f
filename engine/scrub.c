/* engine/scrub.c — the scrub (a background, rate-limited read-back of every
 * referenced blob and of the metadata) and coil_check (the same pass at
 * full speed on the caller's thread, plus the accounting walk).
 *
 * A pass:
 *   1. metadata, under ckpt_mu (no checkpoint or superblock write can run
 *      meanwhile): both superblock copies decode; the checkpoint the
 *      superblock names reads back with the checksum the superblock holds
 *      for it, its header and payload verify.  Then, without the lock, the
 *      journal from the checkpoint's replay point up to the last applied
 *      chunk is walked chunk by chunk the way recovery reads it
 *      (replay_read_chunk); a walk that ends early is damage, unless a
 *      checkpoint moved the replay point meanwhile (then the journal it
 *      walked is no longer in use and the finding is dropped).
 *   2. under mlock: every extent of every object is collected (its blob
 *      and object referenced, with its segment's generation), then sorted
 *      by device offset.
 *   3. per segment: under mlock, the segment's generation is compared (a
 *      segment freed and reused since step 2 holds other bytes: its items
 *      are skipped, their blobs were relocated and verified by the cleaner)
 *      and a reader count taken, so no checkpoint frees it while it is
 *      read; the blobs are read in windows of at most SCRUB_READ_MAX bytes
 *      (the cleaner's reason: a large read delays the foreground I/O
 *      queued behind it) through the ring, synchronously, one at a time,
 *      and each is checked: a raw blob sector by sector (so damage is
 *      located to 4 KiB), a zstd blob whole (checksum of the stored bytes,
 *      decompression, checksum of the result).  After each window the pass
 *      sleeps as long as the rate limit asks.
 *   4. a damaged blob becomes findings only where an object still maps it
 *      (under mlock, the map is looked up again): a blob overwritten since
 *      step 2 is dead space, not damage anyone can read.
 *
 * Nothing is repaired: coil keeps one copy of every byte.  Findings are
 * kept per pass (the first SCRUB_FINDINGS_MAX; the counts cover all) and
 * shown by coil_stats_json, coil_scrub_damage and coil_check's callback.
 *
 * Tests: tests/test_scrub.c (every data block of a small store damaged in
 * turn, each found and named), tests/test_check_deep.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/log/ckpt.h"
#include "engine/log/recovery.h"
#include "engine/log/salvage.h"
#include "engine/place/blob.h"
#include "engine/place/dev.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/scrub.h"
#include "engine/store.h"

/* Bytes of one read: as the cleaner's pieces, small enough that a
 * foreground read queued behind it waits little. */
#define SCRUB_READ_MAX (128u << 10)
/* Findings a pass keeps (each holds a copy of an object name). */
#define SCRUB_FINDINGS_MAX 1024u
/* Findings coil_stats_json lists (the counts cover the rest). */
#define SCRUB_JSON_FINDINGS 64u
/* The longest journal chunk the committer writes (journal_init). */

struct sitem {
	struct object *o;
	struct blobd *b;
	uint64_t off;
	uint32_t len, skip;
	uint32_t seg, gen;
};

struct sfind {
	char *name;         /* NULL: store metadata */
	size_t name_len;
	uint64_t off, len;
	char what[96];
};

/* A damaged range of a blob's logical bytes, before it is mapped back to
 * the objects that reference it. */
struct sbad {
	struct object *o;
	struct blobd *b;
	uint64_t off;       /* object offset */
	uint32_t len;
	uint32_t blo;       /* the blob's logical byte at @off */
	const char *what;
};

/* One pass (the thread's, or coil_check's on its caller's thread). */
struct spass {
	uint64_t rate;      /* bytes per second, 0 = no limit */
	uint64_t next_ns;   /* the rate limit's clock */
	coil_damage_fn fn;  /* coil_check: every finding */
	void *arg;
	int fn_rc;
};

struct scrub {
	struct coil_store *s;
	pthread_t th;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;       /* wakes the thread; the rate limit's sleep */
	pthread_cond_t done_cv;  /* a pass ended */
	bool stop;               /* under mu */
	bool want;               /* coil_scrub_start asked for a pass */
	bool busy;               /* a pass is asked for or running */
	_Atomic bool stopping;
	uint64_t rate;
	uint64_t interval_ns;
	uint64_t due_ns;         /* next automatic pass (under mu; 0: none) */
	int last_rc;             /* of the last pass: 0, -EIO, -ESHUTDOWN */

	/* findings of the current or last pass (under mu) */
	struct sfind *find;
	uint32_t nfind;

	/* pass state (one pass at a time: the busy flag) */
	struct sitem *items;
	size_t nitems, cap_items;
	struct sbad *bad, *out;
	size_t nbad, cap_bad, cap_out;
	uint8_t *buf;            /* one read window */
	uint32_t buf_cap;
	uint8_t *scratch;        /* a zstd blob's decoded bytes */
	ZSTD_DCtx *dctx;
	struct fmt_blob fb;

	/* progress of the current or last pass; totals since the open */
	_Atomic uint64_t passes, running, bytes_total, bytes_done;
	_Atomic uint64_t blobs_verified, blobs_moved, damaged_ranges;
	_Atomic uint64_t damaged_bytes, metadata_errors, accounting_errors;
	_Atomic uint64_t bytes_read_all, pass_ns_last;
};

/* ---- findings ------------------------------------------------------------ */

static void pass_reset(struct scrub *sc)
{
	pthread_mutex_lock(&sc->mu);
	for (uint32_t i = 0; i < sc->nfind; i++)
		free(sc->find[i].name);
	sc->nfind = 0;
	pthread_mutex_unlock(&sc->mu);
	atomic_store(&sc->bytes_total, 0);
	atomic_store(&sc->bytes_done, 0);
	atomic_store(&sc->blobs_verified, 0);
	atomic_store(&sc->blobs_moved, 0);
	atomic_store(&sc->damaged_ranges, 0);
	atomic_store(&sc->damaged_bytes, 0);
	atomic_store(&sc->metadata_errors, 0);
	atomic_store(&sc->accounting_errors, 0);
}

/* Record a finding (no store lock held): kept in the pass's list (merged
 * with the previous one when it continues the same object's range) and
 * handed to coil_check's callback.  @counter: which count it adds to. */
static void finding(struct scrub *sc, struct spass *p, const char *name,
		    size_t name_len, uint64_t off, uint64_t len,
		    const char *what, _Atomic uint64_t *counter)
{
	bool merged = false;

	pthread_mutex_lock(&sc->mu);
	if (name && sc->nfind) {
		struct sfind *f = &sc->find[sc->nfind - 1];

		if (f->name && f->name_len == name_len &&
		    !memcmp(f->name, name, name_len) && f->off + f->len == off &&
		    !strcmp(f->what, what)) {
			f->len += len;
			merged = true;
		}
	}
	if (!merged && sc->nfind < SCRUB_FINDINGS_MAX) {
		struct sfind *f = &sc->find[sc->nfind];

		f->name = NULL;
		f->name_len = 0;
		if (name) {
			f->name = malloc(name_len + 1);
			if (f->name) {
				memcpy(f->name, name, name_len);
				f->name[name_len] = 0;
				f->name_len = name_len;
			}
		}
		if (!name || f->name) {
			f->off = off;
			f->len = len;
			snprintf(f->what, sizeof(f->what), "%s", what);
			sc->nfind++;
		}
	}
	pthread_mutex_unlock(&sc->mu);
	if (!merged || counter != &sc->damaged_ranges)
		stat_add(counter, 1);
	if (counter == &sc->damaged_ranges)
		stat_add(&sc->damaged_bytes, len);
	if (p->fn && p->fn_rc == 0) {
		struct coil_damage d = { .object = name, .object_len = name_len,
					 .off = off, .len = len, .what = what };

		p->fn_rc = p->fn(p->arg, &d);
	}
}

static void meta_finding(struct scrub *sc, struct spass *p, uint64_t dev_off,
			 uint64_t len, const char *what)
{
	finding(sc, p, NULL, 0, dev_off, len, what, &sc->metadata_errors);
}

/* ---- the rate limit -------------------------------------------------------- */

/* Account @n bytes read; sleep until the pass is back under its rate (or
 * the store closes). */
static void throttle(struct scrub *sc, struct spass *p, uint64_t n)
{
	uint64_t now = coil_now_ns();
	struct timespec ts;

	stat_add(&sc->bytes_read_all, n);
	if (!p->rate)
		return;
	if (p->next_ns < now)
		p->next_ns = now;
	p->next_ns += n * 1000000000ull / p->rate;
	if (p->next_ns <= now)
		return;
	ts.tv_sec = (time_t)(p->next_ns / 1000000000ull);
	ts.tv_nsec = (long)(p->next_ns % 1000000000ull);
	pthread_mutex_lock(&sc->mu);
	while (!sc->stop && coil_now_ns() < p->next_ns)
		if (pthread_cond_timedwait(&sc->cv, &sc->mu, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&sc->mu);
}

/* ---- metadata -------------------------------------------------------------- */

/* Walk the journal chunks in use: from the replay point (@pos, @seq) for
 * @want linear bytes.  @return 0, or 1 with *@bad_pos and *@bad_seq when a
 * chunk that should be there does not read back, or -errno (memory). */
static int walk_journal(struct scrub *sc, struct spass *p, uint64_t pos,
			uint64_t seq, uint64_t want, uint64_t *bad_pos,
			uint64_t *bad_seq)
{
	struct coil_store *s = sc->s;
	uint64_t jlen = s->sb.journal_len, walked = 0;
	uint8_t *chunk = NULL;
	int rc = 0;

	if (posix_memalign((void **)&chunk, 4096, REPLAY_CHUNK_BUF))
		return -ENOMEM;
	while (walked < want && !atomic_load(&sc->stopping)) {
		struct fmt_jchunk h;
		uint64_t at;
		/* no read-ahead: the journal is being written */
		int got = replay_read_chunk(s, chunk, pos, seq, &h, &at, NULL);

		if (got <= 0) {
			*bad_pos = pos;
			*bad_seq = seq;
			rc = 1;
			break;
		}
		walked += (at >= pos ? at - pos : jlen - pos) +
			  fmt_jchunk_len(&h);
		pos = at + fmt_jchunk_len(&h);
		if (pos >= jlen)
			pos = 0;
		seq++;
		throttle(sc, p, fmt_jchunk_len(&h));
	}
	free(chunk);
	return rc;
}

/* Findings made under ckpt_mu, reported after it is released (a
 * coil_check callback may call coil). */
struct meta_pending {
	unsigned n;
	struct { uint64_t off, len; char what[96]; } f[3];
};

static void pend(struct meta_pending *m, uint64_t off, uint64_t len,
		 const char *what)
{
	COIL_ASSERT(m->n < 3);
	m->f[m->n].off = off;
	m->f[m->n].len = len;
	snprintf(m->f[m->n].what, sizeof(m->f[m->n].what), "%s", what);
	m->n++;
}

static void scrub_meta(struct scrub *sc, struct spass *p)
{
	struct coil_store *s = sc->s;
	struct meta_pending m = { .n = 0 };
	struct fmt_super sb, copy;
	uint64_t tail, end, bad_pos = 0, bad_seq = 0;
	uint8_t *buf = NULL;
	bool moved, heal = false;
	char what[96];
	int rc;

	if (posix_memalign((void **)&buf, 4096, 2 * FMT_BLOCK))
		return;
	pthread_mutex_lock(&s->ckpt_mu);
	sb = s->sb;
	pthread_mutex_lock(&s->jlock);
	tail = s->j_tail_lin;
	pthread_mutex_unlock(&s->jlock);
	pthread_mutex_lock(&s->mlock);
	end = s->applied_end_lin;
	pthread_mutex_unlock(&s->mlock);
	rc = store_io_sync(s, URING_OP_READ, buf, 2 * FMT_BLOCK, 0);
	for (int i = 0; i < 2; i++) {
		if (rc == 0 && fmt_super_decode(&copy, buf + i * FMT_BLOCK,
						FMT_BLOCK) == 0 &&
		    fmt_super_store_id(&copy) == s->store_id)
			continue;
		snprintf(what, sizeof(what), "superblock copy %c %s",
			 i ? 'B' : 'A', rc < 0 ? "does not read" :
						 "does not verify");
		pend(&m, (uint64_t)i * FMT_BLOCK, FMT_BLOCK, what);
	}
	if (sb.ckpt_slot != FMT_CKPT_SLOT_NONE) {
		/* the checkpoint, then its mirror (the same bytes, the same
		 * checks, in the other area) */
		for (int mirror = 0; mirror < 2; mirror++) {
			struct fmt_super at = sb;

			if (mirror && !s->ck_mirror)
				break;
			if (mirror)
				at.ckpt_slot = sb.ckpt_slot ? 0 : 1;
			rc = ckpt_verify(s, &at);
			if (rc >= 0 || rc == -ENOMEM)
				continue;
			snprintf(what, sizeof(what), "checkpoint%s (sequence %"
				 PRIu64 ") does not %s",
				 mirror ? " mirror" : "", sb.ckpt_seq,
				 rc == -EIO ? "verify" : "read");
			pend(&m, at.ckpt_off[at.ckpt_slot],
			     COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK) +
			     sb.delta_bytes, what);
			/* Heal: the next checkpoint is whole, written to
			 * both areas again (the damaged copy is the next
			 * base's place, or its mirror's). */
			heal = true;
		}
	}
	pthread_mutex_unlock(&s->ckpt_mu);
	if (heal && !s->rdonly) {
		pthread_mutex_lock(&s->mlock);
		s->ck_base_next = true;
		pthread_mutex_unlock(&s->mlock);
		ckpt_trigger(s);
	}
	free(buf);
	for (unsigned i = 0; i < m.n; i++)
		meta_finding(sc, p, m.f[i].off, m.f[i].len, m.f[i].what);
	throttle(sc, p, 2 * FMT_BLOCK + COIL_ALIGN_UP(sb.ckpt_bytes, FMT_BLOCK) +
			sb.delta_bytes);

	/* The journal recovery would replay.  The tail is the replay point's
	 * linear offset once the checkpoint that set it released the journal
	 * before it; a snapshot taken between the two is not walked. */
	if (end < tail || tail % sb.journal_len != sb.replay_off)
		return;
	rc = walk_journal(sc, p, sb.replay_off, sb.replay_seq, end - tail,
			  &bad_pos, &bad_seq);
	if (rc != 1)
		return;
	pthread_mutex_lock(&s->ckpt_mu);
	moved = s->sb.ckpt_seq != sb.ckpt_seq;
	pthread_mutex_unlock(&s->ckpt_mu);
	if (moved)
		return;
	snprintf(what, sizeof(what), "journal chunk (sequence %" PRIu64
		 ") does not verify; recovery would stop there", bad_seq);
	meta_finding(sc, p, sb.journal_off + bad_pos, FMT_BLOCK, what);
}

/* ---- data ------------------------------------------------------------------ */

static int cmp_sitem(const void *pa, const void *pb)
{
	const struct sitem *a = pa, *b = pb;

	if (a->b->dev_off != b->b->dev_off)
		return a->b->dev_off < b->b->dev_off ? -1 : 1;
	if (a->b != b->b)
		return (uintptr_t)a->b < (uintptr_t)b->b ? -1 : 1;
	if (a->o->id != b->o->id)
		return a->o->id < b->o->id ? -1 : 1;
	return a->off < b->off ? -1 : a->off > b->off;
}

/* Every extent of every object, referenced.  mlock taken. */
static int collect(struct scrub *sc)
{
	struct coil_store *s = sc->s;
	int rc = 0;

	sc->nitems = 0;
	pthread_mutex_lock(&s->mlock);
	for (uint32_t k = 0; k < s->tab_cap && rc == 0; k++) {
		for (struct object *o = s->by_id[k]; o && rc == 0;
		     o = o->id_next) {
			struct extmap_iter it;
			const struct ext *e;

			if (o->removed)
				continue;
			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it))) {
				uint32_t seg;

				/* in memory: checked when it was loaded */
				if (blobd_is_mem(e->b))
					continue;
				seg = seg_of(s, e->b->dev_off);

				rc = coil_grow((void **)&sc->items, &sc->cap_items,
					  sc->nitems + 1, sizeof(*sc->items));
				if (rc < 0)
					break;
				COIL_ASSERT(seg < s->nseg);
				sc->items[sc->nitems++] = (struct sitem){
					.o = o, .b = e->b, .off = e->off,
					.len = e->len, .skip = e->skip,
					.seg = seg, .gen = s->segs[seg].gen };
				blobd_ref(e->b);
				o->refs++;
			}
		}
	}
	pthread_mutex_unlock(&s->mlock);
	return rc;
}

static void release_all(struct scrub *sc)
{
	struct coil_store *s = sc->s;

	pthread_mutex_lock(&s->mlock);
	for (size_t i = 0; i < sc->nitems; i++) {
		blobd_unref(sc->items[i].b);
		object_put(s, sc->items[i].o);
	}
	pthread_mutex_unlock(&s->mlock);
	sc->nitems = 0;
}

/* Blob logical bytes [lo, hi) of items [i, j) (one blob) are damaged:
 * queue what each item maps of them. */
static int mark_bad(struct scrub *sc, size_t i, size_t j, uint32_t lo,
		    uint32_t hi, const char *what)
{
	for (size_t k = i; k < j; k++) {
		const struct sitem *it = &sc->items[k];
		uint32_t a = COIL_MAX(lo, it->skip);
		uint32_t z = COIL_MIN(hi, it->skip + it->len);

		if (a >= z)
			continue;
		if (coil_grow((void **)&sc->bad, &sc->cap_bad, sc->nbad + 1,
			 sizeof(*sc->bad)))
			return -ENOMEM;
		sc->bad[sc->nbad++] = (struct sbad){
			.o = it->o, .b = it->b, .off = it->off + (a - it->skip),
			.len = z - a, .blo = a, .what = what };
	}
	return 0;
}

/* Check the blob of items [i, j), whose stored bytes are at @src. */
static int verify_blob(struct scrub *sc, size_t i, size_t j,
		       const uint8_t *src)
{
	const struct blobd *b = sc->items[i].b;
	struct fmt_blob *fb = &sc->fb;
	uint32_t bad_lo = 0, bad_hi = 0;
	int rc = 0;

	blobd_to_fmt(b, fb);
	if (b->codec != FMT_CODEC_RAW) {
		if (fmt_blob_decode(sc->dctx, dict_ddict(sc->s, fb->dict_id),
				    fb, src, b->stored_len,
				    sc->scratch, FMT_BLOB_MAX) < 0)
			rc = mark_bad(sc, i, j, 0, b->logical_len,
				      "checksum or decompression failed");
		return rc;
	}
	/* raw: sector by sector, adjacent bad sectors as one range */
	for (uint32_t lo = 0; lo < b->logical_len && rc == 0; lo += FMT_BLOCK) {
		uint32_t n = COIL_MIN(FMT_BLOCK, b->logical_len - lo);
		bool ok = fmt_blob_verify_sectors(fb, lo / FMT_BLOCK, src + lo,
						  n) == 0;

		if (!ok && bad_hi == lo) {
			bad_hi = lo + n;
		} else if (!ok) {
			bad_lo = lo;
			bad_hi = lo + n;
		}
		if (bad_hi > bad_lo && (ok || lo + n == b->logical_len)) {
			rc = mark_bad(sc, i, j, bad_lo, bad_hi,
				      "checksum mismatch");
			bad_lo = bad_hi = 0;
		}
	}
	return rc;
}

/* The queued damage, where objects still map it, as findings. */
static void report_bad(struct scrub *sc, struct spass *p)
{
	struct coil_store *s = sc->s;
	size_t n = 0;
	int rc = 0;

	/* Look the maps up again under mlock: only what an object still
	 * maps to the same blob bytes is damage anyone can read. */
	pthread_mutex_lock(&s->mlock);
	for (size_t k = 0; k < sc->nbad && rc == 0; k++) {
		const struct sbad *q = &sc->bad[k];
		struct extmap_iter it;
		const struct ext *e;

		if (q->o->removed)
			continue;
		extmap_iter_init(&it, &q->o->map, q->off);
		while ((e = extmap_iter_next(&it)) && e->off < q->off + q->len) {
			uint64_t a = COIL_MAX(e->off, q->off);
			uint64_t z = COIL_MIN(e->off + e->len, q->off + q->len);

			if (e->b != q->b || a >= z ||
			    e->skip + (a - e->off) != q->blo + (a - q->off))
				continue;
			rc = coil_grow((void **)&sc->out, &sc->cap_out, n + 1,
				  sizeof(*sc->out));
			if (rc < 0)
				break;
			sc->out[n++] = (struct sbad){ .o = q->o, .b = q->b,
				.off = a, .len = (uint32_t)(z - a),
				.what = q->what };
		}
	}
	pthread_mutex_unlock(&s->mlock);
	/* the objects are held by the pass's items: names stay valid */
	for (size_t k = 0; k < n; k++)
		finding(sc, p, sc->out[k].o->name, sc->out[k].o->name_len,
			sc->out[k].off, sc->out[k].len, sc->out[k].what,
			&sc->damaged_ranges);
	sc->nbad = 0;
}

/* Read and check the blobs of items [a, z) (one segment, sorted). */
static int scrub_segment(struct scrub *sc, struct spass *p, size_t a,
			 size_t z)
{
	struct coil_store *s = sc->s;
	int rc = 0;

	for (size_t i = a, j; i < z && rc == 0; i = j) {
		uint64_t wa = COIL_ALIGN_DOWN(sc->items[i].b->dev_off, FMT_BLOCK);
		uint64_t wz = wa, stored = 0;
		uint32_t nblobs = 0;
		int rd;

		/* a window: whole blobs, SCRUB_READ_MAX bytes at most unless
		 * one blob alone is larger */
		for (j = i; j < z; j++) {
			const struct blobd *b = sc->items[j].b;
			uint64_t bz = COIL_ALIGN_UP(b->dev_off + b->stored_len,
						    FMT_BLOCK);

			if (j > i && b != sc->items[j - 1].b) {
				if (bz - wa > SCRUB_READ_MAX)
					break;
			}
			wz = COIL_MAX(wz, bz);
		}
		COIL_ASSERT(wz - wa <= sc->buf_cap);
		rd = store_io_sync(s, URING_OP_READ, sc->buf,
				   (uint32_t)(wz - wa), wa);
		for (size_t k = i, l; k < j && rc == 0; k = l) {
			const struct blobd *b = sc->items[k].b;

			for (l = k; l < j && sc->items[l].b == b; l++)
				;
			nblobs++;
			stored += b->stored_len;
			if (rd < 0)
				rc = mark_bad(sc, k, l, 0, b->logical_len,
					      "device read error");
			else
				rc = verify_blob(sc, k, l,
						 sc->buf + (b->dev_off - wa));
		}
		stat_add(&sc->blobs_verified, nblobs);
		stat_add(&sc->bytes_done, stored);
		report_bad(sc, p);
		throttle(sc, p, wz - wa);
		if (atomic_load(&sc->stopping))
			rc = -ESHUTDOWN;
	}
	return rc;
}

static int scrub_data(struct scrub *sc, struct spass *p)
{
	struct coil_store *s = sc->s;
	uint64_t total = 0;
	int rc = collect(sc);

	if (rc == 0 && sc->nitems > 1)
		qsort(sc->items, sc->nitems, sizeof(*sc->items), cmp_sitem);
	for (size_t i = 0; i < sc->nitems; i++)
		if (i == 0 || sc->items[i].b != sc->items[i - 1].b)
			total += sc->items[i].b->stored_len;
	atomic_store(&sc->bytes_total, total);
	for (size_t a = 0, z; rc == 0 && a < sc->nitems; a = z) {
		uint32_t seg = sc->items[a].seg;
		struct seg *g = &s->segs[seg];
		bool ok;

		for (z = a; z < sc->nitems && sc->items[z].seg == seg; z++)
			;
		pthread_mutex_lock(&s->mlock);
		ok = g->gen == sc->items[a].gen && g->state != SEG_FREE;
		if (ok)
			atomic_fetch_add(&g->readers, 1);
		pthread_mutex_unlock(&s->mlock);
		if (!ok) {
			/* freed (and maybe reused) since: its blobs moved */
			for (size_t i = a; i < z; i++)
				if (i == a || sc->items[i].b != sc->items[i - 1].b) {
					stat_add(&sc->blobs_moved, 1);
					stat_add(&sc->bytes_done,
						 sc->items[i].b->stored_len);
				}
			continue;
		}
		rc = scrub_segment(sc, p, a, z);
		pthread_mutex_lock(&s->mlock);
		COUNT_SUB(&g->readers, 1);
		seg_maybe_pending(s, seg);
		pthread_mutex_unlock(&s->mlock);
	}
	release_all(sc);
	return rc;
}

/* One whole pass.  @return 0 clean, -EIO damage found, -ESHUTDOWN cut
 * short, -ENOMEM. */
static int scrub_pass(struct scrub *sc, struct spass *p)
{
	uint64_t t0 = coil_now_ns();
	int rc;

	pass_reset(sc);
	atomic_store(&sc->running, 1);
	scrub_meta(sc, p);
	rc = scrub_data(sc, p);
	if (rc == 0 && atomic_load(&sc->stopping))
		rc = -ESHUTDOWN;
	if (rc == 0 && (atomic_load(&sc->damaged_ranges) ||
			atomic_load(&sc->metadata_errors)))
		rc = -EIO;
	atomic_store(&sc->pass_ns_last, coil_now_ns() - t0);
	atomic_store(&sc->running, 0);
	if (rc != -ESHUTDOWN && rc != -ENOMEM)
		stat_add(&sc->passes, 1);
	return rc;
}

/* ---- the thread ------------------------------------------------------------ */

/* A pass ended (the thread's or coil_check's, which counts as one: the
 * next automatic pass is an interval after it). */
static void pass_end(struct scrub *sc, int rc)
{
	pthread_mutex_lock(&sc->mu);
	sc->last_rc = rc;
	sc->busy = false;
	if (sc->interval_ns)
		sc->due_ns = coil_now_ns() + sc->interval_ns;
	pthread_cond_broadcast(&sc->done_cv);
	pthread_cond_broadcast(&sc->cv);
	pthread_mutex_unlock(&sc->mu);
}

static void *scrub_main(void *arg)
{
	struct scrub *sc = arg;

	coil_thread_name("scrub", -1);
	pthread_mutex_lock(&sc->mu);
	while (!sc->stop) {
		struct spass p = { .rate = sc->rate };
		int rc;

		/* coil_scrub_start sets want (and busy, so its caller's
		 * coil_scrub_wait waits); a due pass waits for coil_check */
		bool run = sc->want || (!sc->busy && sc->due_ns &&
					coil_now_ns() >= sc->due_ns);

		if (!run) {
			struct timespec ts;

			if (sc->busy || !sc->due_ns) {
				pthread_cond_wait(&sc->cv, &sc->mu);
				continue;
			}
			ts.tv_sec = (time_t)(sc->due_ns / 1000000000ull);
			ts.tv_nsec = (long)(sc->due_ns % 1000000000ull);
			pthread_cond_timedwait(&sc->cv, &sc->mu, &ts);
			continue;
		}
		sc->want = false;
		sc->busy = true;
		pthread_mutex_unlock(&sc->mu);
		rc = scrub_pass(sc, &p);
		pass_end(sc, rc);
		pthread_mutex_lock(&sc->mu);
	}
	pthread_mutex_unlock(&sc->mu);
	return NULL;
}

static void scrub_free(struct scrub *sc)
{
	for (uint32_t i = 0; i < sc->nfind; i++)
		free(sc->find[i].name);
	free(sc->find);
	free(sc->items);
	free(sc->bad);
	free(sc->out);
	free(sc->buf);
	free(sc->scratch);
	if (sc->dctx)
		ZSTD_freeDCtx(sc->dctx);
	pthread_mutex_destroy(&sc->mu);
	pthread_cond_destroy(&sc->cv);
	pthread_cond_destroy(&sc->done_cv);
	free(sc);
}

int scrub_start(struct coil_store *s, const struct coil_options *o)
{
	struct scrub *sc = calloc(1, sizeof(*sc));
	pthread_condattr_t ca;
	int rc;

	if (!sc)
		return -ENOMEM;
	sc->s = s;
	sc->rate = o->scrub_rate;
	sc->interval_ns = o->scrub_interval * 1000000000ull;
	sc->due_ns = sc->interval_ns ? coil_now_ns() + sc->interval_ns : 0;
	pthread_mutex_init(&sc->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sc->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&sc->done_cv, NULL);
	sc->buf_cap = COIL_MAX(SCRUB_READ_MAX, s->sb.max_blob + 2 * FMT_BLOCK);
	if (posix_memalign((void **)&sc->buf, 4096, sc->buf_cap))
		sc->buf = NULL;
	sc->scratch = malloc(FMT_BLOB_MAX);
	sc->dctx = ZSTD_createDCtx();
	sc->find = calloc(SCRUB_FINDINGS_MAX, sizeof(*sc->find));
	if (!sc->buf || !sc->scratch || !sc->dctx || !sc->find) {
		scrub_free(sc);
		return -ENOMEM;
	}
	rc = pthread_create(&sc->th, NULL, scrub_main, sc);
	if (rc) {
		scrub_free(sc);
		return -rc;
	}
	sc->started = true;
	s->scrub = sc;
	return 0;
}

void scrub_stop(struct coil_store *s)
{
	struct scrub *sc = s->scrub;

	if (!sc || !sc->started)
		return;
	atomic_store(&sc->stopping, true);
	pthread_mutex_lock(&sc->mu);
	sc->stop = true;
	pthread_cond_broadcast(&sc->cv);
	pthread_mutex_unlock(&sc->mu);
	pthread_join(sc->th, NULL);
	sc->started = false;
	/* a pass asked for and never run ends here */
	pthread_mutex_lock(&sc->mu);
	if (sc->busy && !atomic_load(&sc->running)) {
		sc->busy = false;
		sc->last_rc = -ESHUTDOWN;
	}
	pthread_cond_broadcast(&sc->done_cv);
	pthread_mutex_unlock(&sc->mu);
}

void scrub_destroy(struct coil_store *s)
{
	if (!s->scrub)
		return;
	scrub_stop(s);
	scrub_free(s->scrub);
	s->scrub = NULL;
}

/* ---- the accounting walk (coil_check) -------------------------------------- */

static int cmp_ptr(const void *pa, const void *pb)
{
	uintptr_t a = (uintptr_t)*(void *const *)pa;
	uintptr_t b = (uintptr_t)*(void *const *)pb;

	return a < b ? -1 : a > b;
}

/* One accounting finding, formatted (mlock held: queued as text). */
struct acct_msgs {
	char (*msg)[96];
	size_t n, cap;
};

static void acct_add(struct acct_msgs *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void acct_add(struct acct_msgs *m, const char *fmt, ...)
{
	va_list ap;

	if (coil_grow((void **)&m->msg, &m->cap, m->n + 1, sizeof(*m->msg)))
		return;
	va_start(ap, fmt);
	vsnprintf(m->msg[m->n++], sizeof(*m->msg), fmt, ap);
	va_end(ap);
}

/* Every count the engine keeps against a walk of the maps. */
static int check_accounting(struct scrub *sc, struct spass *p)
{
	struct coil_store *s = sc->s;
	struct acct_msgs m = { 0 };
	uint64_t *live = calloc(s->nseg, sizeof(*live));
	struct blobd **blobs = NULL;
	size_t nblobs = 0, cap_blobs = 0;
	uint64_t n = 0, bytes = 0, stored = 0, nobj = 0;
	uint32_t nfree = 0;
	int rc = 0;

	if (!live)
		return -ENOMEM;
	pthread_mutex_lock(&s->mlock);
	if (seg_recount_live(s, live))
		acct_add(&m, "an extent ends past its object's size");
	for (uint32_t i = 0; i < s->nseg; i++) {
		const struct seg *g = &s->segs[i];

		nfree += g->state == SEG_FREE;
		if (g->live != live[i])
			acct_add(&m, "segment %u: live bytes %" PRIu64
				 " counted, %" PRIu64 " in the maps", i,
				 g->live, live[i]);
		else if (live[i] && (g->state == SEG_FREE ||
				     g->state == SEG_PENDING))
			acct_add(&m, "segment %u: %s but %" PRIu64
				 " bytes are mapped there", i,
				 g->state == SEG_FREE ? "free" : "pending",
				 live[i]);
	}
	if (nfree != s->free_segs)
		acct_add(&m, "free segments: %u counted, %u free", s->free_segs,
			 nfree);
	for (uint32_t k = 0; k < s->tab_cap && rc == 0; k++) {
		for (struct object *o = s->by_id[k]; o && rc == 0;
		     o = o->id_next) {
			struct extmap_iter it;
			const struct ext *e;

			nobj++;
			if (o->refs == 0)
				acct_add(&m, "object id %" PRIu64 ": in the "
					 "table with no reference", o->id);
			extmap_iter_init(&it, &o->map, 0);
			while ((e = extmap_iter_next(&it))) {
				n++;
				bytes += e->len;
				stored += ext_stored(e);
				rc = coil_grow((void **)&blobs, &cap_blobs,
					  nblobs + 1, sizeof(*blobs));
				if (rc < 0)
					break;
				blobs[nblobs++] = e->b;
			}
		}
	}
	if (nobj != s->nobj)
		acct_add(&m, "objects: %" PRIu64 " counted, %" PRIu64
			 " in the table", s->nobj, nobj);
	if (n != s->ext_acct.n || bytes != s->ext_acct.bytes ||
	    stored != s->ext_acct.stored)
		acct_add(&m, "extent totals: %" PRIu64 " extents, %" PRIu64
			 " bytes, %" PRIu64 " stored counted; %" PRIu64 ", %"
			 PRIu64 ", %" PRIu64 " in the maps", s->ext_acct.n,
			 s->ext_acct.bytes, s->ext_acct.stored, n, bytes,
			 stored);
	/* each blob is referenced at least once per extent that maps it
	 * (reads and the cache may hold more) */
	if (rc == 0 && nblobs > 1)
		qsort(blobs, nblobs, sizeof(*blobs), cmp_ptr);
	for (size_t i = 0, j; rc == 0 && i < nblobs; i = j) {
		uint32_t refs = atomic_load(&blobs[i]->refs);

		for (j = i; j < nblobs && blobs[j] == blobs[i]; j++)
			;
		if (refs < j - i)
			acct_add(&m, "blob at device offset %" PRIu64 ": %u "
				 "references, %zu extents map it",
				 blobs[i]->dev_off, refs, j - i);
	}
	pthread_mutex_unlock(&s->mlock);
	for (size_t i = 0; i < m.n; i++)
		finding(sc, p, NULL, 0, 0, 0, m.msg[i], &sc->accounting_errors);
	free(m.msg);
	free(blobs);
	free(live);
	return rc;
}

/* ---- what the public calls do (api.c checks the store first) -------------- */

/* The store was checked valid by api.c. */
static int scrub_of(struct coil_store *s, struct scrub **out)
{
	if (!s->scrub)
		return -EBADF;
	*out = s->scrub;
	return 0;
}

int scrub_request(struct coil_store *s)
{
	struct scrub *sc;
	int rc = scrub_of(s, &sc);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&sc->mu);
	if (sc->stop) {
		rc = -EBADF;
	} else if (sc->busy) {
		rc = -EALREADY;
	} else {
		sc->busy = true; /* coil_scrub_wait from now on waits */
		sc->want = true;
		pthread_cond_broadcast(&sc->cv);
	}
	pthread_mutex_unlock(&sc->mu);
	return rc;
}

int scrub_wait(struct coil_store *s)
{
	struct scrub *sc;
	int rc = scrub_of(s, &sc);

	if (rc < 0)
		return rc;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	pthread_mutex_lock(&sc->mu);
	while (sc->busy)
		pthread_cond_wait(&sc->done_cv, &sc->mu);
	rc = sc->last_rc;
	pthread_mutex_unlock(&sc->mu);
	return rc == -ENOMEM ? -ENOMEM : rc;
}

static void info_fill(struct scrub *sc, struct coil_scrub_info *info)
{
	*info = (struct coil_scrub_info){
		.passes = atomic_load(&sc->passes),
		.running = atomic_load(&sc->running),
		.bytes_total = atomic_load(&sc->bytes_total),
		.bytes_done = atomic_load(&sc->bytes_done),
		.blobs_verified = atomic_load(&sc->blobs_verified),
		.damaged_ranges = atomic_load(&sc->damaged_ranges),
		.damaged_bytes = atomic_load(&sc->damaged_bytes),
		.metadata_errors = atomic_load(&sc->metadata_errors),
		.accounting_errors = atomic_load(&sc->accounting_errors),
	};
}

int scrub_info(struct coil_store *s, struct coil_scrub_info *info)
{
	struct scrub *sc;
	int rc = info ? scrub_of(s, &sc) : -EINVAL;

	if (rc < 0)
		return rc;
	info_fill(sc, info);
	return 0;
}

int scrub_damage(struct coil_store *s, coil_damage_fn fn, void *arg)
{
	struct scrub *sc;
	struct sfind *copy;
	uint32_t n;
	int rc = fn ? scrub_of(s, &sc) : -EINVAL;

	if (rc < 0)
		return rc;
	/* a copy, so @fn runs with no lock held */
	pthread_mutex_lock(&sc->mu);
	n = sc->nfind;
	copy = calloc(n ? n : 1, sizeof(*copy));
	for (uint32_t i = 0; copy && i < n; i++) {
		copy[i] = sc->find[i];
		if (sc->find[i].name) {
			copy[i].name = malloc(sc->find[i].name_len + 1);
			if (copy[i].name)
				memcpy(copy[i].name, sc->find[i].name,
				       sc->find[i].name_len + 1);
			else
				copy[i].name_len = 0;
		}
	}
	pthread_mutex_unlock(&sc->mu);
	if (!copy)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct coil_damage d = { .object = copy[i].name,
					 .object_len = copy[i].name_len,
					 .off = copy[i].off, .len = copy[i].len,
					 .what = copy[i].what };

		if (rc == 0)
			rc = fn(arg, &d);
		free(copy[i].name);
	}
	free(copy);
	return rc;
}

int scrub_check(struct coil_store *s, coil_damage_fn fn, void *arg,
		struct coil_scrub_info *info)
{
	struct spass p = { .rate = 0, .fn = fn, .arg = arg };
	struct scrub *sc;
	int rc = scrub_of(s, &sc);

	if (rc < 0)
		return rc;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	pthread_mutex_lock(&sc->mu);
	while (sc->busy && !sc->stop)
		pthread_cond_wait(&sc->done_cv, &sc->mu);
	if (sc->stop) {
		pthread_mutex_unlock(&sc->mu);
		return -ESHUTDOWN;
	}
	sc->busy = true;
	pthread_mutex_unlock(&sc->mu);
	rc = scrub_pass(sc, &p);
	if (rc == 0 || rc == -EIO) {
		int r2 = check_accounting(sc, &p);

		rc = r2 < 0 ? r2 : 0;
	}
	if (info)
		info_fill(sc, info);
	pass_end(sc, rc == 0 && (atomic_load(&sc->damaged_ranges) ||
				 atomic_load(&sc->metadata_errors) ||
				 atomic_load(&sc->accounting_errors)) ?
			     -EIO : rc);
	if (rc == 0 && p.fn_rc)
		rc = p.fn_rc;
	return rc;
}

/* ---- stats ----------------------------------------------------------------- */

struct jbuf {
	char *p;
	size_t len, cap;
	int err;
};

static void jb_printf(struct jbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void jb_printf(struct jbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || coil_grow((void **)&b->p, &b->cap, b->len + (size_t)n + 1, 1)) {
		b->err = -ENOMEM;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* A JSON string of arbitrary bytes: quotes, backslashes, control bytes
 * and bytes past ASCII escaped (an object name need not be UTF-8). */
static void jb_string(struct jbuf *b, const char *str, size_t len)
{
	jb_printf(b, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)str[i];

		if (c == '"' || c == '\\')
			jb_printf(b, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			jb_printf(b, "\\u%04x", c);
		else
			jb_printf(b, "%c", c);
	}
	jb_printf(b, "\"");
}

int scrub_stats_json(struct coil_store *s, char **out, size_t *outlen,
		     size_t *outcap)
{
	struct scrub *sc = s->scrub;
	struct coil_scrub_info in = { 0 };
	struct jbuf b = { .p = *out, .len = *outlen, .cap = *outcap };
	const char *last = "none";
	uint64_t rate = 0, interval = 0, pass_ns = 0, read_all = 0;

	if (sc) {
		info_fill(sc, &in);
		rate = sc->rate;
		interval = sc->interval_ns / 1000000000ull;
		pass_ns = atomic_load(&sc->pass_ns_last);
		read_all = atomic_load(&sc->bytes_read_all);
	}
	jb_printf(&b, "\"scrub\":{\"running\":%s,\"passes\":%" PRIu64
		  ",\"rate_bytes_per_s\":%" PRIu64 ",\"interval_s\":%" PRIu64
		  ",\"bytes_total\":%" PRIu64 ",\"bytes_done\":%" PRIu64
		  ",\"blobs_verified\":%" PRIu64 ",\"damaged_ranges\":%" PRIu64
		  ",\"damaged_bytes\":%" PRIu64 ",\"metadata_errors\":%" PRIu64
		  ",\"accounting_errors\":%" PRIu64 ",\"pass_ns_last\":%" PRIu64
		  ",\"bytes_read\":%" PRIu64 ",",
		  in.running ? "true" : "false", in.passes, rate, interval,
		  in.bytes_total, in.bytes_done, in.blobs_verified,
		  in.damaged_ranges, in.damaged_bytes, in.metadata_errors,
		  in.accounting_errors, pass_ns, read_all);
	if (sc) {
		pthread_mutex_lock(&sc->mu);
		if (sc->busy)
			last = "running";
		else if (in.passes == 0)
			last = "none";
		else if (sc->last_rc == 0)
			last = "clean";
		else if (sc->last_rc == -EIO)
			last = "damage found";
		else
			last = "cut short";
		jb_printf(&b, "\"last_result\":\"%s\",\"findings\":[", last);
		for (uint32_t i = 0; i < sc->nfind && i < SCRUB_JSON_FINDINGS;
		     i++) {
			const struct sfind *f = &sc->find[i];

			jb_printf(&b, "%s{\"object\":", i ? "," : "");
			if (f->name)
				jb_string(&b, f->name, f->name_len);
			else
				jb_printf(&b, "null");
			jb_printf(&b, ",\"off\":%" PRIu64 ",\"len\":%" PRIu64
				  ",\"what\":", f->off, f->len);
			jb_string(&b, f->what, strlen(f->what));
			jb_printf(&b, "}");
		}
		jb_printf(&b, "]}");
		pthread_mutex_unlock(&sc->mu);
	} else {
		jb_printf(&b, "\"last_result\":\"%s\",\"findings\":[]}", last);
	}
	*out = b.p;
	*outlen = b.len;
	*outcap = b.cap;
	return b.err;
}
