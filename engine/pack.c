/* engine/pack.c — the packer.
 *
 * A small write (io/write.c, write_inline) completes once its journal
 * record, which carries the encoded blob, is in the page cache; the blob
 * stays in memory (struct memblob, on the store's list) and checkpoints
 * write it whole, so the journal can be reused whatever the packer does.
 * The packer moves those blobs to the device, on its own thread, when
 * they reach ENGINE_PACK_AT bytes (and at close):
 *
 *   1. take up to PACK_BATCH_BYTES of them off the list (references);
 *   2. copy their stored bytes one after another into one batch: placement
 *      (wreq_place, the write path's own step) packs compressed blobs at
 *      byte granularity, so pages compressed to 2 KiB share 4 KiB blocks;
 *   3. one data write, waited for, then one journal entry holding a REMAP
 *      WRITE record per object (the cleaner's relocation record): its
 *      ticket is taken only then, so no write behind it in apply order
 *      waits for the device;
 *   4. at apply, in ticket order, meta_apply_remap (the cleaner's
 *      compare-and-swap) installs each copy only where the map still maps
 *      the same content: an overwrite or truncate that came first wins,
 *      and the copy is dead space for the cleaner.
 *
 * Replay of the REMAP record makes the same decision; a record lost with
 * its chunk leaves the blob in memory (it is in the checkpoint or in the
 * earlier record that made it), to be packed again. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cleaner.h"
#include "engine/io/wreq.h"
#include "engine/log/journal.h"
#include "engine/log/meta.h"
#include "engine/pack.h"
#include "engine/place/blob.h"
#include "engine/place/bufpool.h"
#include "engine/place/object.h"
#include "engine/place/segment.h"
#include "engine/store.h"

/* One batch: its stored bytes, its blobs.  A quarter of a default
 * segment: a foreground read queued behind the batch's write waits for all
 * of it (see the cleaner's batch bound); 512 tiny objects of 10-160 bytes
 * still share a few blocks. */
#define PACK_BATCH_BYTES (256u << 10)
#define PACK_BATCH_BLOBS 512u
/* Where the first blob's copy starts in the batch buffer: placement packs
 * blobs down towards the front (seg_place_write), and a run it closes at a
 * segment's end is padded to a block; a batch this size spans at most two
 * segments, so this gap keeps every blob's packed place at or before its
 * copy. */
#define PACK_LEAD (2u * FMT_BLOCK)

/* A blob's slot in the batch: back to back, except a raw blob of a block
 * or more, which placement starts on a block. */
static size_t pack_slot(const struct blobd *b, size_t *total)
{
	size_t at = b->codec == FMT_CODEC_RAW && b->logical_len >= FMT_BLOCK ?
		    COIL_ALIGN_UP(*total, FMT_BLOCK) : *total;

	*total = at + b->stored_len;
	return at;
}

struct pitem {
	struct object *o;
	struct blobd *b;        /* the in-memory blob (a reference) */
	uint64_t obj_id, off;   /* where it was written */
	uint32_t k;             /* its copy's index in the batch */
};

struct packer {
	struct coil_store *s;
	pthread_t th;
	bool started, stop, want;
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* wakes the packer */
	pthread_cond_t done_cv; /* a forced round, a relocation, finished */
	uint64_t asked, answered; /* pack_now rounds */
	int round_res;
	bool fin;
	int fin_res;
	bool data_fin;
	struct wreq w;
	struct pitem items[PACK_BATCH_BLOBS];
	uint32_t nitems;
	struct fmt_extent fe;
};

static bool blobd_tryref(struct blobd *b)
{
	uint32_t r = atomic_load(&b->refs);

	while (r)
		if (atomic_compare_exchange_weak(&b->refs, &r, r + 1))
			return true;
	return false; /* being freed: no longer live */
}

static int cmp_item(const void *pa, const void *pb)
{
	const struct pitem *x = pa, *y = pb;

	if (x->obj_id != y->obj_id)
		return x->obj_id < y->obj_id ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Step 1: blobs off the list, their objects held.  @return how many. */
static uint32_t pack_collect(struct packer *pk)
{
	struct coil_store *s = pk->s;
	struct memlist *ml = &s->mem;
	size_t total = PACK_LEAD;
	uint32_t n = 0, keep = 0;

	pthread_mutex_lock(&ml->mu);
	for (struct memlink *l = ml->head.next;
	     l != &ml->head && n < PACK_BATCH_BLOBS; l = l->next) {
		struct memblob *m = memblob_of(l);
		size_t t = total;

		(void)pack_slot(m->b, &t);
		if (t > PACK_BATCH_BYTES + PACK_LEAD)
			break;
		if (!atomic_load(&m->maprefs) || !blobd_tryref(m->b))
			continue;
		pk->items[n++] = (struct pitem){ .b = m->b,
						 .obj_id = m->obj_id,
						 .off = m->obj_off };
		total = t;
	}
	pthread_mutex_unlock(&ml->mu);

	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < n; i++) {
		struct object *o = objtab_find_id(s, pk->items[i].obj_id);

		if (!o || o->removed) {
			blobd_unref(pk->items[i].b); /* mlock -> ml->mu */
			continue;
		}
		o->refs++;
		pk->items[i].o = o;
		pk->items[keep++] = pk->items[i];
	}
	pthread_mutex_unlock(&s->mlock);
	qsort(pk->items, keep, sizeof(pk->items[0]), cmp_item);
	pk->nitems = keep;
	return keep;
}

static void pack_release(struct packer *pk)
{
	struct coil_store *s = pk->s;

	pthread_mutex_lock(&s->mlock);
	for (uint32_t i = 0; i < pk->nitems; i++) {
		blobd_unref(pk->items[i].b);
		object_put(s, pk->items[i].o);
	}
	pthread_mutex_unlock(&s->mlock);
	pk->nitems = 0;
}

static void pack_apply(struct coil_store *s, struct jent *e)
{
	struct packer *pk = s->pk;
	struct wreq *w = (struct wreq *)e;

	for (uint32_t i = 0; e->status == 0 && i < pk->nitems; i++) {
		struct pitem *it = &pk->items[i];
		struct ext ex = { .off = it->off, .len = it->b->logical_len,
				  .skip = 0, .b = w->bd[it->k] };
		int64_t got;

		if (it->o->removed)
			continue;
		got = meta_apply_remap(s, it->o, &ex);
		if (got < 0) {
			store_break(s, (int)got);
			e->status = (int)got;
			break;
		}
		stat_add(&s->st.pack_installed, (uint64_t)got);
	}
	wreq_drop_blobs(w, 0);
	seg_inflight_done(s, w);
	w->nruns = 0;
}

static void pack_done(struct coil_store *s, struct jent *e, int res)
{
	struct packer *pk = s->pk;

	(void)e;
	journal_release_meta(s);
	pthread_mutex_lock(&pk->mu);
	pk->fin = true;
	pk->fin_res = res;
	pthread_cond_broadcast(&pk->done_cv);
	pthread_mutex_unlock(&pk->mu);
}

/* A data run of the batch landed (ring thread). */
static void pack_run_done(struct uring_io *io, int res)
{
	struct wrun *r = io->arg;
	struct packer *pk = r->w->s->pk;

	if (!wreq_run_result(r, res))
		return;
	pthread_mutex_lock(&pk->mu);
	pk->data_fin = true;
	pthread_cond_broadcast(&pk->done_cv);
	pthread_mutex_unlock(&pk->mu);
}

/* Write the batch's runs and wait for them.  Unlike a write's, the
 * relocation's record goes to the journal only once its data is on the
 * device: its ticket would otherwise hold every write after it back in
 * apply order for a device write (a queue-depth-1 writer's p99 was that
 * wait).  @return 0 or the first run's error. */
static int pack_send_data(struct packer *pk)
{
	struct coil_store *s = pk->s;
	struct wreq *w = &pk->w;

	if (w->nruns == 0)
		return 0;
	pthread_mutex_lock(&pk->mu);
	pk->data_fin = false;
	pthread_mutex_unlock(&pk->mu);
	wreq_submit_runs(s, w, pack_run_done);
	pthread_mutex_lock(&pk->mu);
	while (!pk->data_fin)
		pthread_cond_wait(&pk->done_cv, &pk->mu);
	pthread_mutex_unlock(&pk->mu);
	return atomic_load(&w->io_status);
}

/* The REMAP records, one per object (items sorted by object).  @return
 * records written, or -errno. */
static int pack_records(struct packer *pk)
{
	struct wreq *w = &pk->w;
	size_t need = 0;
	struct fmt_cursor c;
	int nrec = 0, rc = 0;

	for (uint32_t i = 0; i < pk->nitems; i++)
		need += FMT_JREC_HDR + FMT_JREC_WRITE_FIXED + FMT_EXTENT_FIXED +
			8u * w->fb[pk->items[i].k].n_csums;
	if (wreq_rec_room(w, need) < 0)
		return -ENOMEM;
	fmt_cursor_init(&c, w->recbuf, w->rec_cap);
	for (uint32_t i = 0; rc == 0 && i < pk->nitems;) {
		uint32_t j = i;
		uint64_t lo = UINT64_MAX, hi = 0;
		size_t mark;

		while (j < pk->nitems && pk->items[j].o == pk->items[i].o) {
			lo = COIL_MIN(lo, pk->items[j].off);
			hi = COIL_MAX(hi, pk->items[j].off +
					  pk->items[j].b->logical_len);
			j++;
		}
		rc = fmt_jrec_write_begin(&c, &mark, FMT_JREC_REMAP,
					  pk->items[i].o->id, lo, hi - lo);
		for (uint32_t k = i; rc == 0 && k < j; k++)
			rc = wreq_put_extent(&c, &pk->fe, pk->items[k].off,
					     pk->items[k].b->logical_len, 0,
					     &w->fb[pk->items[k].k], NULL);
		if (rc == 0)
			rc = fmt_jrec_write_end(&c, mark, j - i);
		nrec++;
		i = j;
	}
	w->je.rec = w->recbuf;
	w->je.rec_len = (uint32_t)c.pos;
	return rc < 0 ? rc : nrec;
}

/* One batch: steps 2-4, waiting for it to apply.  @return blobs packed,
 * 0 when there was nothing to pack, or -errno. */
static int pack_batch(struct packer *pk)
{
	struct coil_store *s = pk->s;
	struct wreq *w = &pk->w;
	size_t total = PACK_LEAD;
	uint64_t dev_bytes = 0;
	unsigned rep = 0;
	int rc, nrec;

	if (pack_collect(pk) == 0)
		return 0;
	for (uint32_t i = 0; i < pk->nitems; i++) {
		struct blobd *b = pk->items[i].b;

		pk->items[i].k = i;
		blobd_to_fmt(b, &w->fb[i]);
		w->fb[i].flags = 0;
		w->fb[i].dev_off = 0;
		w->slot[i] = (uint32_t)pack_slot(b, &total);
		w->bd[i] = NULL;
	}
	total = COIL_ALIGN_UP(total, FMT_BLOCK); /* the last run's padding */
	w->batch = bufpool_get(&s->bp, total);
	if (!w->batch) {
		pack_release(pk);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < pk->nitems; i++)
		memcpy(w->batch + w->slot[i], pk->items[i].b->mem->bytes,
		       pk->items[i].b->stored_len);
	w->je = (struct jent){ .apply = pack_apply, .done = pack_done };
	w->s = s;
	w->h = NULL;
	w->obj = NULL;
	w->nblobs = pk->nitems;
	w->batch_len = total;
	w->use_reserve = false;
	rc = wreq_place(s, w, cleaner_write_keep(s, w), &rep);
	if (rep & SEG_REPORT_OPENED)
		cleaner_kick(s);
	if (rc < 0)
		goto out;
	for (uint32_t i = 0; i < w->nruns; i++)
		dev_bytes += w->runs[i].io.len;
	for (uint32_t k = 0; k < w->nblobs; k++) {
		w->bd[k] = blobd_new(&w->fb[k]);
		if (!w->bd[k])
			rc = -ENOMEM;
	}
	nrec = rc == 0 ? pack_records(pk) : rc;
	if (nrec >= 0) {
		rc = pack_send_data(pk);
		if (rc < 0)
			nrec = rc;
	}
	if (nrec < 0) {
		/* nothing journaled: the placed space is dead */
		rc = nrec;
		pthread_mutex_lock(&s->mlock);
		wreq_drop_blobs(w, 0);
		seg_inflight_done(s, w);
		w->nruns = 0;
		pthread_mutex_unlock(&s->mlock);
		goto out;
	}
	w->je.nrec = (uint32_t)nrec;
	(void)journal_reserve_meta(s, true); /* waits: cannot fail */
	pthread_mutex_lock(&pk->mu);
	pk->fin = false;
	pthread_mutex_unlock(&pk->mu);
	w->je.ticket = journal_ticket(s);
	journal_ready(s, &w->je); /* its data is on the device */
	pthread_mutex_lock(&pk->mu);
	while (!pk->fin)
		pthread_cond_wait(&pk->done_cv, &pk->mu);
	rc = pk->fin_res;
	pthread_mutex_unlock(&pk->mu);
	if (rc == 0) {
		stat_add(&s->st.pack_batches, 1);
		stat_add(&s->st.pack_blobs, pk->nitems);
		stat_add(&s->st.pack_bytes, dev_bytes);
	}
out:
	bufpool_put(&s->bp, w->batch);
	w->batch = NULL;
	rc = rc < 0 ? rc : (int)pk->nitems;
	pack_release(pk);
	return rc;
}

/* Pack until below the mark, or (@all) until nothing is left.  A batch
 * that packs nothing new ends it (blobs whose objects went away are
 * released by their own removal). */
static int pack_run(struct packer *pk, bool all)
{
	struct coil_store *s = pk->s;
	int rc = 0;

	while (!atomic_load(&s->broken)) {
		uint64_t have = atomic_load(&s->mem.bytes);

		if (have == 0 || (!all && have < ENGINE_PACK_AT))
			break;
		rc = pack_batch(pk);
		if (rc <= 0)
			break;
		rc = 0;
	}
	return rc < 0 ? rc : 0;
}

static void *pack_main(void *arg)
{
	struct packer *pk = arg;

	pthread_mutex_lock(&pk->mu);
	for (;;) {
		uint64_t asked;
		int rc;

		while (!pk->stop && !pk->want && pk->asked == pk->answered)
			pthread_cond_wait(&pk->cv, &pk->mu);
		if (pk->stop && pk->asked == pk->answered)
			break;
		asked = pk->asked;
		pk->want = false;
		pthread_mutex_unlock(&pk->mu);
		rc = pack_run(pk, asked != pk->answered);
		pthread_mutex_lock(&pk->mu);
		if (asked != pk->answered) {
			pk->answered = asked;
			pk->round_res = rc;
			pthread_cond_broadcast(&pk->done_cv);
		}
	}
	pthread_mutex_unlock(&pk->mu);
	return NULL;
}

int pack_start(struct coil_store *s)
{
	struct packer *pk = calloc(1, sizeof(*pk));
	struct wreq *w;
	int rc;

	if (!pk)
		return -ENOMEM;
	pk->s = s;
	w = &pk->w;
	w->fb = calloc(PACK_BATCH_BLOBS, sizeof(*w->fb));
	w->bd = calloc(PACK_BATCH_BLOBS, sizeof(*w->bd));
	w->slot = calloc(PACK_BATCH_BLOBS, sizeof(*w->slot));
	w->cap_blobs = PACK_BATCH_BLOBS;
	pthread_mutex_init(&pk->mu, NULL);
	pthread_cond_init(&pk->cv, NULL);
	pthread_cond_init(&pk->done_cv, NULL);
	s->pk = pk;
	if (!w->fb || !w->bd || !w->slot)
		return -ENOMEM; /* pack_destroy frees */
	rc = -pthread_create(&pk->th, NULL, pack_main, pk);
	if (rc == 0)
		pk->started = true;
	return rc;
}

void pack_kick(struct coil_store *s)
{
	struct packer *pk = s->pk;

	if (!pk)
		return;
	pthread_mutex_lock(&pk->mu);
	if (!pk->want) {
		pk->want = true;
		pthread_cond_signal(&pk->cv);
	}
	pthread_mutex_unlock(&pk->mu);
}

int pack_now(struct coil_store *s)
{
	struct packer *pk = s->pk;
	uint64_t ticket;
	int rc;

	if (!pk || !pk->started)
		return s->rdonly ? -EROFS : 0;
	if (engine_on_coil_thread(s))
		return -EDEADLK;
	pthread_mutex_lock(&pk->mu);
	ticket = ++pk->asked;
	pthread_cond_signal(&pk->cv);
	while (pk->answered < ticket)
		pthread_cond_wait(&pk->done_cv, &pk->mu);
	rc = pk->round_res;
	pthread_mutex_unlock(&pk->mu);
	return rc;
}

static void pack_join(struct packer *pk)
{
	pthread_mutex_lock(&pk->mu);
	pk->stop = true;
	pthread_cond_signal(&pk->cv);
	pthread_mutex_unlock(&pk->mu);
	pthread_join(pk->th, NULL);
	pk->started = false;
}

void pack_stop(struct coil_store *s)
{
	struct packer *pk = s->pk;

	if (!pk || !pk->started)
		return;
	if (!atomic_load(&s->broken))
		(void)pack_now(s); /* what is left stays in the checkpoint */
	pack_join(pk);
}

void pack_destroy(struct coil_store *s)
{
	struct packer *pk = s->pk;

	if (!pk)
		return;
	if (pk->started)
		pack_join(pk);
	free(pk->w.fb);
	free(pk->w.bd);
	free(pk->w.slot);
	free(pk->w.runs);
	free(pk->w.recbuf);
	pthread_mutex_destroy(&pk->mu);
	pthread_cond_destroy(&pk->cv);
	pthread_cond_destroy(&pk->done_cv);
	free(pk);
	s->pk = NULL;
}
