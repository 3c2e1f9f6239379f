/* engine/log/journal.c — tickets, the reorder ring, group commit.
 *
 * Every mutation takes a ticket: create and remove when submitted, writes
 * and truncates in their object's submission order (journal_take_turn,
 * below), a write once it is encoded.  Its journal entry becomes ready later
 * (a write: once its data is on the device), in any order; the committer
 * takes ready entries strictly in ticket order, so records enter the journal
 * — and are applied to the extent maps — in ticket order, which with the
 * per-object order is what makes overlapping in-flight writes land in the
 * order they were issued.
 *
 * A commit cycle gathers every ready entry at the head (group commit),
 * writes them as one chunk, and fdatasyncs if a flush or a sync_writes
 * record asked for it.  Up to ENGINE_JCYCLES cycles are in flight at once
 * (a chunk is written while earlier ones are still on their way: the
 * latency of a write is not the wait for the previous chunk plus its own);
 * when every slot is busy, ready entries wait and the next chunk carries
 * them all, so the batch grows with the load.  Cycles retire strictly in
 * order: their records are applied under mlock and completed in ticket
 * order, and a cycle after a failed one fails too.  Chunks may land on the
 * device out of order; replay takes the longest prefix of chunks in
 * sequence, and nothing in a later chunk was acknowledged before every
 * earlier one was written.  A cycle with a sync_writes record fdatasyncs
 * when it reaches the head (the ring holds it until every write submitted
 * before it, earlier chunks included, has completed).  coil_flush needs no
 * cycle: engine/log/flush.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/wreq.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/place/object.h"
#include "engine/store.h"
#include "engine/log/flush.h"
#include "engine/place/dev.h"

int journal_init(struct coil_store *s)
{
	uint64_t cap = COIL_MIN(1u << 20, s->sb.journal_len / 4);

	s->jslot = calloc(ENGINE_JSLOTS, sizeof(*s->jslot));
	if (!s->jslot)
		return -ENOMEM;
	s->chunk_cap = (uint32_t)COIL_ALIGN_DOWN(cap, FMT_BLOCK);
	for (uint32_t i = 0; i < ENGINE_JCYCLES; i++) {
		s->cyc[i].s = s;
		if (posix_memalign((void **)&s->cyc[i].buf, 4096,
				   s->chunk_cap + 2 * FMT_BLOCK))
			return -ENOMEM;
	}
	return flush_init(s);
}

uint64_t journal_sync_mark_locked(const struct coil_store *s)
{
	return s->j_retired_seq;
}

/* *@a = max(*@a, @v), for the seqs that only move forward. */
static void seq_raise(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load(a);

	while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
		;
}

void journal_synced(struct coil_store *s, uint64_t mark)
{
	seq_raise(&s->j_synced, mark);
}

void journal_destroy(struct coil_store *s)
{
	flush_destroy(s);
	free(s->jslot);
	s->jslot = NULL;
	for (uint32_t i = 0; i < ENGINE_JCYCLES; i++) {
		free(s->cyc[i].buf);
		s->cyc[i].buf = NULL;
	}
}

int journal_reserve_meta(struct coil_store *s, bool can_wait)
{
	pthread_mutex_lock(&s->jlock);
	while (s->nonwrite_out >= ENGINE_JSLOTS - ENGINE_WREQ_MAX) {
		if (!can_wait) {
			pthread_mutex_unlock(&s->jlock);
			return -EAGAIN;
		}
		pthread_cond_wait(&s->jcond, &s->jlock);
	}
	s->nonwrite_out++;
	pthread_mutex_unlock(&s->jlock);
	return 0;
}

void journal_release_meta(struct coil_store *s)
{
	pthread_mutex_lock(&s->jlock);
	COIL_ASSERT(s->nonwrite_out > 0);
	s->nonwrite_out--;
	pthread_cond_broadcast(&s->jcond);
	pthread_mutex_unlock(&s->jlock);
}

uint64_t journal_ticket(struct coil_store *s)
{
	uint64_t t;

	pthread_mutex_lock(&s->jlock);
	t = s->next_ticket++;
	COIL_ASSERT(t - s->head_ticket < ENGINE_JSLOTS);
	pthread_mutex_unlock(&s->jlock);
	return t;
}

/* ---- per-object order ------------------------------------------------------
 *
 * A write used to take its ticket when submitted, so its record waited in
 * ticket order behind every write submitted before it, on any object, until
 * that one was encoded: a 4 KiB write to one object waited for a 16 MiB
 * write to another to be compressed, and under load a write admitted to the
 * pool late held up every write behind it.  A write now takes its ticket
 * once encoded.  Only writes and truncates of one object need their
 * submission order (overlapping writes in flight apply in submission order;
 * a truncate applies after the writes submitted before it), and that is
 * kept per object: each takes a place at submission, and a place takes its
 * ticket only after every earlier one of its object has taken its own.
 * Records of different objects enter the journal in the order they became
 * ready.  Removal needs no place: it applies at submission, and the writes
 * of a removed object are dropped at apply and skipped by replay. */

uint64_t journal_turn(struct coil_store *s, struct object *o)
{
	uint64_t t;

	pthread_mutex_lock(&s->jlock);
	t = o->turn_next++;
	pthread_mutex_unlock(&s->jlock);
	return t;
}

/* @o's place after the one that just took its ticket: continue, with a
 * ticket each, the parked entries this makes first, appended at *@tail.
 * jlock held. */
static void turn_release(struct coil_store *s, struct object *o,
			 struct jent ***tail)
{
	o->turn_done++;
	for (;;) {
		struct jent **pp, *e;

		for (pp = &o->turn_parked; *pp && (*pp)->turn != o->turn_done;
		     pp = &(*pp)->turn_next)
			;
		if (!*pp)
			break;
		e = *pp;
		*pp = e->turn_next;
		e->turn_next = NULL;
		COIL_ASSERT(s->next_ticket - s->head_ticket < ENGINE_JSLOTS);
		e->ticket = s->next_ticket++;
		o->turn_done++;
		**tail = e;
		*tail = &e->turn_next;
	}
	if (o->turn_waiters)
		pthread_cond_broadcast(&s->jcond);
}

/* @e is first of @o: its ticket, then every parked entry this makes first.
 * jlock held.  @return the released entries, in ticket order. */
static struct jent *turn_ticket(struct coil_store *s, struct object *o,
				struct jent *e)
{
	struct jent *head = NULL, **tail = &head;

	COIL_ASSERT(s->next_ticket - s->head_ticket < ENGINE_JSLOTS);
	e->ticket = s->next_ticket++;
	turn_release(s, o, &tail);
	return head;
}

/* Continue entries released by a ticket, in ticket order. */
static void turn_continue(struct coil_store *s, struct jent *rel)
{
	struct jent *next;

	for (; rel; rel = next) {
		next = rel->turn_next;
		rel->turn_next = NULL;
		rel->ticketed(s, rel);
	}
}

/* Wait (jlock held) until @turn is @o's next place. */
static void turn_wait(struct coil_store *s, struct object *o, uint64_t turn)
{
	if (o->turn_done == turn)
		return;
	COIL_ASSERT(turn > o->turn_done);
	stat_add(&s->st.turn_waits, 1);
	o->turn_waiters++;
	while (o->turn_done != turn)
		pthread_cond_wait(&s->jcond, &s->jlock);
	o->turn_waiters--;
}

void journal_turns(struct coil_store *s, struct object **o, uint64_t *turn,
		   uint32_t n)
{
	pthread_mutex_lock(&s->jlock);
	for (uint32_t i = 0; i < n; i++)
		turn[i] = o[i]->turn_next++;
	pthread_mutex_unlock(&s->jlock);
}

void journal_take_turns(struct coil_store *s, struct object **o,
			const uint64_t *turn, uint32_t n, struct jent *e)
{
	struct jent *head = NULL, **tail = &head;

	pthread_mutex_lock(&s->jlock);
	/* Only its holder moves a place on: the places waited for stay. */
	for (uint32_t i = 0; i < n; i++)
		turn_wait(s, o[i], turn[i]);
	COIL_ASSERT(s->next_ticket - s->head_ticket < ENGINE_JSLOTS);
	e->ticket = s->next_ticket++;
	for (uint32_t i = 0; i < n; i++)
		turn_release(s, o[i], &tail);
	pthread_mutex_unlock(&s->jlock);
	turn_continue(s, head);
}

bool journal_take_turn(struct coil_store *s, struct object *o, struct jent *e,
		       bool wait)
{
	struct jent *rel;

	pthread_mutex_lock(&s->jlock);
	if (o->turn_done != e->turn && !wait) {
		COIL_ASSERT(e->turn > o->turn_done);
		stat_add(&s->st.turn_waits, 1);
		e->turn_next = o->turn_parked;
		o->turn_parked = e;
		pthread_mutex_unlock(&s->jlock);
		return false;
	}
	turn_wait(s, o, e->turn);
	rel = turn_ticket(s, o, e);
	pthread_mutex_unlock(&s->jlock);
	e->ticketed(s, e);
	turn_continue(s, rel);
	return true;
}

void journal_ready_nokick(struct coil_store *s, struct jent *e)
{
	pthread_mutex_lock(&s->jlock);
	COIL_ASSERT(e->ticket >= s->head_ticket);
	COIL_ASSERT(!s->jslot[e->ticket % ENGINE_JSLOTS]);
	s->jslot[e->ticket % ENGINE_JSLOTS] = e;
	pthread_mutex_unlock(&s->jlock);
}

void journal_ready(struct coil_store *s, struct jent *e)
{
	journal_ready_nokick(s, e);
	journal_kick(s);
}

/* Journal bytes between tail and head that hold chunks: not the bytes an
 * early wrap skipped (they are linear distance, not use).  jlock held. */
static uint64_t journal_used_locked(const struct coil_store *s)
{
	uint64_t used = s->j_head_lin - s->j_tail_lin;

	if (s->j_wrap_len && s->j_wrap_lin >= s->j_tail_lin &&
	    s->j_wrap_lin + s->j_wrap_len <= s->j_head_lin)
		used -= s->j_wrap_len;
	return used;
}

void journal_usage(struct coil_store *s, uint64_t *used, uint64_t *len)
{
	pthread_mutex_lock(&s->jlock);
	*used = journal_used_locked(s);
	*len = s->sb.journal_len;
	pthread_mutex_unlock(&s->jlock);
}

uint64_t journal_give_back(struct coil_store *s)
{
	uint64_t jlen = s->sb.journal_len;
	bool idle;

	pthread_mutex_lock(&s->jlock);
	/* Nothing between tail and head, no cycle or entry in flight, and
	 * the durable replay point is the head: replay from it finds no
	 * chunk with its seq whatever the ring holds (a hole holds no valid
	 * chunk), so no byte of the ring is read again. */
	idle = s->cyc_n == 0 && !s->aq_first &&
	       s->j_tail_lin == s->j_head_lin &&
	       s->sb.replay_off == s->j_head_lin % jlen &&
	       s->sb.replay_seq == s->j_next_seq;
	if (idle)
		s->j_alloc = 0;
	pthread_mutex_unlock(&s->jlock);
	if (!idle || store_punch(s, s->sb.journal_off, jlen) < 0)
		return 0;
	return jlen;
}

static void journal_drain(struct coil_store *s);

static void drain_nop_done(struct uring_io *io, int res)
{
	struct coil_store *s = io->arg;

	(void)res;
	pthread_mutex_lock(&s->jlock);
	s->drain_posted = false;
	pthread_mutex_unlock(&s->jlock);
	journal_drain(s);
}

/* A thread completing its own write leaves the rest of the apply queue to
 * the ring thread: other callers' callbacks run on coil threads (coil.h),
 * never inside someone's coil_pwrite.  jlock held; returns with it
 * released.  @return false if the ring took it, true if the caller must
 * drain after all (the ring is shutting down). */
static bool drain_hand_off(struct coil_store *s)
{
	bool post = !s->drain_posted;

	s->drain_posted = true;
	pthread_mutex_unlock(&s->jlock);
	if (!post)
		return false;
	uring_io_prep(&s->drain_io, URING_OP_NOP, NULL, 0, 0, drain_nop_done, s);
	if (uring_submit(s->ring, &s->drain_io) == 0)
		return false;
	pthread_mutex_lock(&s->jlock);
	s->drain_posted = false;
	pthread_mutex_unlock(&s->jlock);
	return true;
}

/* Apply and complete, in ticket order, every entry at the head of the apply
 * queue whose data is on the device.  One drainer at a time (others leave a
 * note and return), so completions keep ticket order without anyone waiting
 * on a lock across user callbacks.  A thread completing its own write
 * (engine_tls_now) takes only its own entries from the head, and hands
 * whatever else is ready to the ring thread. */
static void journal_drain(struct coil_store *s)
{
	bool now = engine_tls_now;

	pthread_mutex_lock(&s->jlock);
	if (s->draining) {
		s->drain_again = true;
		pthread_mutex_unlock(&s->jlock);
		return;
	}
	s->draining = true;
	for (;;) {
		struct jent *first = s->aq_first, *last = NULL, *e, *next;

		for (e = s->aq_first; e && !e->data_pending; e = e->next) {
			if (now && e->owner != engine_tls_waiter)
				break;
			last = e;
		}
		if (!last && now && s->aq_first && !s->aq_first->data_pending) {
			/* ready entries that are not ours */
			s->draining = false;
			s->drain_again = false;
			if (!drain_hand_off(s))
				return;
			now = false; /* shutting down: drain them here */
			pthread_mutex_lock(&s->jlock);
			s->draining = true;
			continue;
		}
		if (!last) {
			if (s->drain_again) {
				s->drain_again = false;
				continue;
			}
			s->draining = false;
			pthread_mutex_unlock(&s->jlock);
			return;
		}
		s->aq_first = last->next;
		if (!s->aq_first)
			s->aq_last = NULL;
		last->next = NULL;
		pthread_mutex_unlock(&s->jlock);

		pthread_mutex_lock(&s->mlock);
		for (e = first; e; e = e->next) {
			/* After a write whose data failed, nothing later may
			 * succeed: its record may be in the journal, and
			 * replay stops there. */
			if (e->data_failed && !s->apply_err)
				s->apply_err = e->status;
			if (s->apply_err && e->status == 0)
				e->status = s->apply_err;
			if (e->chunk_end_lin > s->applied_hi_lin)
				s->applied_hi_lin = e->chunk_end_lin;
			e->apply(s, e);
			if (e->chunk_last) {
				s->applied_end_lin = e->chunk_end_lin;
				s->applied_next_seq = e->chunk_next_seq;
			}
		}
		pthread_mutex_unlock(&s->mlock);
		for (e = first; e; e = next) {
			next = e->next;
			e->done(s, e, e->status);
		}
		pthread_mutex_lock(&s->jlock);
	}
}

void journal_data_done(struct coil_store *s, struct jent *e, int status)
{
	if (status < 0)
		store_break(s, status);
	pthread_mutex_lock(&s->jlock);
	COIL_ASSERT(e->data_pending);
	e->data_pending = false;
	if (status < 0) {
		e->status = status;
		e->data_failed = true;
	}
	pthread_mutex_unlock(&s->jlock);
	journal_drain(s);
}

static void fsync_done(struct uring_io *io, int res);

/* Retire one cycle (the oldest; jlock held, returned held): its entries
 * join the apply queue and complete as their data lands. */
static void cycle_retire(struct coil_store *s, struct jcycle *c)
{
	struct jent *first = c->first, *e;
	int res = c->res;
	bool trigger;

	if (s->jfail)
		res = s->jfail;
	else if (res < 0)
		s->jfail = res;
	for (e = first; e; e = e->next) {
		if (res < 0 && e->status == 0)
			e->status = res;
		e->chunk_last = false;
		e->chunk_end_lin = res == 0 && c->chunk_len && e->in_chunk ?
				   c->chunk_lin + c->chunk_len : 0;
	}
	if (res == 0 && c->chunk_len)
		s->j_retired_seq = c->chunk_seq;
	if (c->last && res == 0 && c->chunk_len) {
		c->last->chunk_last = true;
		c->last->chunk_end_lin = c->chunk_lin + c->chunk_len;
		c->last->chunk_next_seq = c->chunk_seq + 1;
	}
	if (first) {
		if (s->aq_last)
			s->aq_last->next = first;
		else
			s->aq_first = first;
		s->aq_last = c->last;
	}
	if (c->last)
		s->retired_ticket = c->last->ticket + 1;
	c->first = c->last = NULL;
	s->cyc_head = (s->cyc_head + 1) % ENGINE_JCYCLES;
	s->cyc_n--;
	pthread_cond_broadcast(&s->jcond);
	/* A ring allocated in part wraps early (cycle_start): fill that
	 * part, not the whole ring, to the mark, and count only what holds
	 * chunks (the bytes a wrap skips made every retire trigger another
	 * checkpoint until the tail passed them: 58 checkpoints for fio's
	 * 256 MiB of 4 KiB random writes, against 8 with the ring whole). */
	trigger = journal_used_locked(s) * 100 >
		  COIL_MIN(s->sb.journal_len, s->j_alloc) * ENGINE_CKPT_PERCENT;
	pthread_mutex_unlock(&s->jlock);

	journal_kick(s);
	/* Feedback loop: a flush that kicked the journal for these records
	 * may go now (log/flush.c). */
	flush_journal_retired(s);
	journal_drain(s);
	if (trigger)
		ckpt_trigger(s);
	pthread_mutex_lock(&s->jlock);
}

/* Retire every finished cycle at the head, in order (jlock held; returned
 * held).  A cycle that asked for an fdatasync issues it when it reaches the
 * head: every earlier chunk has completed by then, so the ring (which holds
 * an fsync until every write submitted before it has completed) makes it
 * cover them, the records' data, and its own chunk.  One thread retires at
 * a time; an event meanwhile is left for it to find. */
static void retire_ready(struct coil_store *s)
{
	struct jcycle *c;
	int rc;

	if (s->retiring)
		return;
	s->retiring = true;
	while (s->cyc_n) {
		c = &s->cyc[s->cyc_head];
		if (!c->done)
			break;
		if (c->sync && c->res == 0 && !s->jfail && !c->synced) {
			if (c->sync_issued)
				break;  /* fsync_done comes back here */
			c->sync_issued = true;
			c->sync_mark = c->chunk_len ? c->chunk_seq :
				       journal_sync_mark_locked(s);
			pthread_mutex_unlock(&s->jlock);
			stat_add(&s->st.fsyncs, 1);
			uring_io_prep(&c->fio, URING_OP_FSYNC, NULL, 0, 0,
				      fsync_done, c);
			rc = uring_submit(s->ring, &c->fio);
			pthread_mutex_lock(&s->jlock);
			if (rc < 0) {
				c->res = -EIO;
				c->synced = true;
			}
			continue;
		}
		c->done = c->sync_issued = c->synced = false;
		cycle_retire(s, c);
	}
	s->retiring = false;
}

/* The chunk write of c is over (res). */
static void cycle_finish(struct jcycle *c, int res)
{
	struct coil_store *s = c->s;

	pthread_mutex_lock(&s->jlock);
	COIL_ASSERT(!c->done);
	c->res = res;
	c->done = true;
	retire_ready(s);
	pthread_mutex_unlock(&s->jlock);
}

static void fsync_done(struct uring_io *io, int res)
{
	struct jcycle *c = io->arg;
	struct coil_store *s = c->s;

	if (res < 0)
		store_break(s, res);
	else
		journal_synced(s, c->sync_mark);
	pthread_mutex_lock(&s->jlock);
	if (res < 0)
		c->res = res;
	c->synced = true;
	retire_ready(s);
	pthread_mutex_unlock(&s->jlock);
}

static void writebehind_done(struct uring_io *io, int res)
{
	struct coil_store *s = io->arg;

	(void)res; /* a hint: what it did not start, the flush writes */
	pthread_mutex_lock(&s->jlock);
	s->jwb_busy = false;
	pthread_mutex_unlock(&s->jlock);
}

/* A chunk went into the page cache: once ENGINE_JWB_BYTES of journal lie
 * between the last ask and this chunk, and the store's writers flush, ask
 * the kernel to start writing them back (URING_OP_WRITEBACK, on its own
 * worker, neither this thread nor the ring's).  Not the chunk's last
 * block, which the next chunk may share (sector chunks): written back now
 * it would be written again.  Stops at the ring's end; the rest is asked
 * for from there.  A hint only: nothing waits for it, and a flush's
 * fdatasync covers whatever it has not written. */
static void writebehind(struct coil_store *s, const struct jcycle *c)
{
	uint64_t jl = s->sb.journal_len;
	uint64_t end = c->chunk_lin - c->pre + c->io_len - FMT_BLOCK;
	uint64_t from;
	bool go = false;

	pthread_mutex_lock(&s->jlock);
	from = s->jwb_lin;
	/* a ring allocated in part wraps at its allocated end */
	if (from % jl >= s->j_alloc)
		from += jl - from % jl;
	if (end < from || end - from > jl) {
		s->jwb_lin = end; /* the first chunk of a session */
	} else if (end - from >= ENGINE_JWB_BYTES && !s->jwb_busy) {
		end = COIL_MIN(end, from - from % jl + s->j_alloc);
		s->jwb_lin = end;
		go = coil_now_ns() - atomic_load(&s->jwb_flush_ns) <
		     ENGINE_JWB_RECENT_NS;
		s->jwb_busy = go;
	}
	pthread_mutex_unlock(&s->jlock);
	if (!go)
		return;
	uring_io_prep(&s->jwb_io, URING_OP_WRITEBACK, NULL,
		      (uint32_t)COIL_MIN(end - from, (uint64_t)INT32_MAX),
		      s->sb.journal_off + from % jl, writebehind_done, s);
	if (uring_submit(s->ring, &s->jwb_io) < 0) {
		writebehind_done(&s->jwb_io, 0);
		return;
	}
	stat_add(&s->st.jwb_asks, 1);
	stat_add(&s->st.jwb_bytes, end - from);
}

static void chunk_written(struct uring_io *io, int res)
{
	struct jcycle *c = io->arg;
	struct coil_store *s = c->s;

	if (res >= 0 && (uint32_t)res != c->io_len)
		res = -EIO;
	if (res < 0) {
		/* A journal write that failed leaves the tail of the journal
		 * unknown: nothing more may be appended (the store is
		 * read-only from here; the next open recovers). */
		store_break(s, res);
		cycle_finish(c, res);
		return;
	}
	stat_add(&s->st.chunks, 1);
	stat_add(&s->st.chunk_bytes, c->chunk_len);
	/* A block written again to add a chunk to it reaches the device once
	 * per page-cache writeback, not once per chunk: through the page
	 * cache only its new blocks count. */
	stat_add(&s->st.dev_bytes_written,
		 c->io_len - ((c->jio.flags & URING_IO_BUFFERED) && c->pre ?
				      FMT_BLOCK : 0));
	if (c->jio.flags & URING_IO_BUFFERED)
		writebehind(s, c);
	cycle_finish(c, 0);
}

static void nop_done(struct uring_io *io, int res)
{
	struct jcycle *c = io->arg;

	(void)res;
	cycle_finish(c, atomic_load(&c->s->broken));
}

/* How much of the reorder ring, from its head, the next chunk takes: the
 * first ticket it stops at (*@t), the chunk's size, its records, whether
 * any asked for an fdatasync.  jlock held. */
static void cycle_measure(struct coil_store *s, uint64_t *t, uint64_t *size,
			  uint32_t *nrec, bool *sync)
{
	*size = FMT_JCHUNK_HDR;
	for (*t = s->head_ticket; *t < s->next_ticket; (*t)++) {
		struct jent *e = s->jslot[*t % ENGINE_JSLOTS];
		uint32_t add;

		if (!e)
			break;
		add = e->status == 0 ? e->rec_len : 0;
		if (*size + add > s->chunk_cap)
			break;
		*size += add;
		if (add)
			*nrec += e->nrec ? e->nrec : 1;
		if (e->need_sync)
			*sync = true;
	}
}

/* Move the entries [head_ticket, @t) off the reorder ring into cycle @c.
 * jlock held. */
static void cycle_take(struct coil_store *s, struct jcycle *c, uint64_t t,
		       uint32_t nrec)
{
	COIL_ASSERT(t >= s->head_ticket);
	COIL_ASSERT(t - s->head_ticket <= ENGINE_JSLOTS);
	for (uint64_t u = s->head_ticket; u < t; u++) {
		struct jent *e = s->jslot[u % ENGINE_JSLOTS];

		s->jslot[u % ENGINE_JSLOTS] = NULL;
		e->next = NULL;
		/* Decided here, under jlock: a data failure reported while
		 * the chunk is being built must not change its size. */
		e->in_chunk = nrec && e->status == 0 && e->rec_len;
		if (c->last)
			c->last->next = e;
		else
			c->first = e;
		c->last = e;
	}
	s->head_ticket = t;
}

/* Fill cycle @c's chunk with its records and submit its write.  jlock not
 * held: the slot is ours until it retires, and the entries are off the
 * reorder ring. */
static void cycle_write(struct coil_store *s, struct jcycle *c, uint32_t nrec)
{
	uint64_t size = FMT_JCHUNK_HDR;
	uint64_t synced = COIL_MIN(atomic_load(&s->j_synced), c->chunk_seq - 1);
	uint32_t end;
	int rc;

	seq_raise(&s->j_vouched, synced);
	c->chunk = c->buf + c->pre;
	for (struct jent *e = c->first; e; e = e->next) {
		if (!e->in_chunk)
			continue;
		memcpy(c->chunk + size, e->rec, e->rec_len);
		size += e->rec_len;
	}
	rc = fmt_jchunk_seal(c->chunk, s->chunk_cap, s->store_id, c->chunk_seq,
			     synced, (uint32_t)(size - FMT_JCHUNK_HDR), nrec,
			     s->jsect ? FMT_JSECT : FMT_BLOCK);
	COIL_ASSERT(rc == (int)c->chunk_len);
	end = c->pre + c->chunk_len;
	memset(c->buf + end, 0, c->io_len - end);
	stat_add(&s->st.records, nrec);
	uring_io_prep(&c->jio, URING_OP_WRITE, c->buf, c->io_len,
		      s->sb.journal_off +
			      (c->chunk_lin - c->pre) % s->sb.journal_len,
		      chunk_written, c);
	/* Through the page cache: a chunk is complete once the kernel holds
	 * it, which survives the process (kill -9) and is the contract of a
	 * completed write; coil_flush's fdatasync makes it durable.  A
	 * direct write would make every small write wait for the device. */
	c->jio.flags = URING_IO_BUFFERED;
	if (c->now) {
		/* The caller's own write alone: copy it into the page cache
		 * and complete it here.  Through the ring it costs two thread
		 * wake-ups (the ring's, then the caller's), most of a QD 1
		 * page write (docs/architecture.md, "Small writes"). */
		c->now = false;
		rc = uring_io_now(s->ring, &c->jio);
		if (rc != -EOPNOTSUPP) {
			bool was = engine_tls_now;

			if (c->first) /* a writer's own, not a marker */
				stat_add(&s->st.chunks_now, 1);
			engine_tls_now = true;
			if (rc == -ESHUTDOWN)
				cycle_finish(c, rc);
			else
				chunk_written(&c->jio, rc);
			engine_tls_now = was;
			return;
		}
	}
	rc = uring_submit(s->ring, &c->jio);
	if (rc == -EOPNOTSUPP) {
		c->jio.flags = 0; /* no buffered descriptor: direct */
		rc = uring_submit(s->ring, &c->jio);
	}
	if (rc < 0)
		cycle_finish(c, -ESHUTDOWN);
}

/* Start one commit cycle if there is work and a free slot.  @return true
 * if it wrote a chunk (the caller looks again), false if it started none or
 * only a NOP cycle. */
static bool cycle_start(struct coil_store *s)
{
	uint64_t t, size = 0, jlen = s->sb.journal_len, pos, waste = 0;
	uint64_t head = 0;
	uint32_t nrec = 0, chunk_len = 0, pre = 0;
	bool sync = false, marker;
	struct jcycle *c;

	pthread_mutex_lock(&s->jlock);
	if (s->cyc_n == ENGINE_JCYCLES) {
		/* every slot busy: the next retirement kicks again */
		pthread_mutex_unlock(&s->jlock);
		return false;
	}
	cycle_measure(s, &t, &size, &nrec, &sync);
	/* Markers: a chunk carries the seq of the last chunk a completed
	 * device flush covered (fmt_jchunk.synced), and replay trusts the
	 * chunks up to the largest it finds: their writes are only placed,
	 * not read back and verified.  The chunks of the last flush before
	 * a crash have no later chunk to say so, and a store that flushed
	 * and then went quiet would have replay verify, at its next open,
	 * every blob that flush made durable.  So when the journal is idle
	 * and a completed flush covers the last chunk with records while no
	 * header has said so, an empty chunk says it (a flush's completion
	 * kicks the journal).  It goes through the page cache like any chunk
	 * and no device flush waits for it: lost in a power cut, replay
	 * verifies that tail as before.  Not from coil_close on (jmark_off):
	 * its checkpoint makes the tail moot, and nothing may be written
	 * into the journal it gives back. */
	marker = t == s->head_ticket && s->cyc_n == 0 &&
		 atomic_load(&s->j_vouched) < s->j_rec_seq &&
		 s->j_rec_seq <= atomic_load(&s->j_synced) &&
		 !atomic_load(&s->broken) && !atomic_load(&s->jmark_off);
	if (t == s->head_ticket && !marker) {
		pthread_mutex_unlock(&s->jlock);
		return false;
	}
	if (s->cyc_n && size <= ENGINE_JCHUNK_ALONGSIDE &&
	    !atomic_load(&s->broken)) {
		/* A chunk is on its way and this one is tiny: let it grow
		 * until that one retires (which kicks again).  Starting a
		 * cycle per ready record would triple the chunk count; making
		 * every record wait for the chunk ahead puts two device round
		 * trips on a write's path (see ENGINE_JCHUNK_ALONGSIDE). */
		pthread_mutex_unlock(&s->jlock);
		return false;
	}
	if (atomic_load(&s->broken)) {
		/* Nothing more reaches the journal: a chunk after a failed
		 * one would never be replayed, so its writes must not be
		 * reported complete.  Fail them in order. */
		nrec = 0;
		sync = false;
	}
	if (nrec || marker) {
		head = s->j_head_lin;
		chunk_len = (uint32_t)COIL_ALIGN_UP(size, s->jsect ? FMT_JSECT :
								     FMT_BLOCK);
		/* Starting inside a block means writing that block again whole:
		 * only with its earlier bytes at hand and no other write of it
		 * in flight (two writes of one block could land in either
		 * order).  Otherwise the chunk starts at the next block, where
		 * replay looks next. */
		if (head % FMT_BLOCK) {
			if (s->cyc_n == 0 && s->jtail_ok)
				pre = (uint32_t)(head % FMT_BLOCK);
			else
				head = COIL_ALIGN_UP(head, FMT_BLOCK);
		}
		pos = head % jlen;
		/* Past the allocated part of the ring the file has holes a
		 * write would need space for: wrap there as at the end (replay
		 * finds no chunk with the expected seq and looks at offset 0,
		 * docs/format.md "Journal"). */
		if (pos + chunk_len > COIL_MIN(jlen, s->j_alloc)) {
			waste = jlen - pos;
			pre = 0;
		}
		/* Journal full (up to the end of the last block written, which
		 * is zero-padded): wait (do not fail) for the checkpoint to
		 * release it; it kicks us again.  Feedback loop: journal ->
		 * ckpt_trigger -> checkpoint frees the journal -> journal_kick. */
		if (COIL_ALIGN_UP(head + waste + chunk_len, FMT_BLOCK) -
			    s->j_tail_lin > jlen) {
			if (!s->jwait_space)
				stat_add(&s->st.journal_waits, 1);
			s->jwait_space = true;
			pthread_mutex_unlock(&s->jlock);
			ckpt_trigger(s);
			return false;
		}
	}
	s->jwait_space = false;
	c = &s->cyc[(s->cyc_head + s->cyc_n) % ENGINE_JCYCLES];
	COIL_ASSERT(!c->done && !c->first);
	/* Written and completed on this thread: one record, this thread's
	 * own synchronous write, at the head of everything (no cycle before
	 * it, nothing waiting to apply), no fdatasync. */
	c->now = nrec && !sync && s->cyc_n == 0 && !s->aq_first &&
		 t == s->head_ticket + 1 && engine_tls_waiter &&
		 s->jslot[s->head_ticket % ENGINE_JSLOTS]->owner ==
		 engine_tls_waiter;
	/* A marker too, off the ring thread (which must not block in a
	 * write): written into the page cache before the flush that kicked
	 * it reports back, so a process that syncs and then dies at once
	 * leaves it behind all the same.  Kicked on the ring thread, it goes
	 * through the ring like any chunk. */
	c->now = c->now || (marker && !uring_on_ring_thread(s->ring));
	cycle_take(s, c, t, nrec);
	s->cyc_n++;
	c->sync = sync;
	c->res = 0;
	c->chunk_len = chunk_len;
	if (chunk_len) {
		if (marker)
			stat_add(&s->st.chunks_marker, 1);
		if (s->cyc_n > 1)
			stat_add(&s->st.chunks_overlapped, 1);
		if (waste) {
			s->j_wrap_lin = head;
			s->j_wrap_len = waste;
		}
		c->chunk_lin = head + waste;
		c->chunk_seq = s->j_next_seq++;
		if (nrec)
			s->j_rec_seq = c->chunk_seq;
		c->pre = pre;
		c->io_len = (uint32_t)COIL_ALIGN_UP(pre + chunk_len, FMT_BLOCK);
		/* The block this chunk shares with the one before: its
		 * earlier bytes again, unchanged, from that cycle's buffer
		 * (it has retired: no cycle was in flight). */
		if (pre)
			memmove(c->buf, s->cyc[s->jtail_slot].buf + s->jtail_off,
			       pre);
		s->j_head_lin = c->chunk_lin + chunk_len;
		s->jtail_ok = s->j_head_lin % FMT_BLOCK != 0;
		s->jtail_slot = (uint32_t)(c - s->cyc);
		s->jtail_off = (uint32_t)COIL_ALIGN_DOWN(pre + chunk_len,
							 FMT_BLOCK);
	}
	pthread_mutex_unlock(&s->jlock);

	if (!chunk_len) {
		/* Nothing to write: run the rest of the cycle on the ring
		 * thread (callbacks never run on the submitter's thread). */
		uring_io_prep(&c->jio, URING_OP_NOP, NULL, 0, 0, nop_done, c);
		if (uring_submit(s->ring, &c->jio) < 0)
			cycle_finish(c, -ESHUTDOWN);
		return false;
	}
	cycle_write(s, c, nrec);
	return true;
}

void journal_kick(struct coil_store *s)
{
	/* After a chunk is written a slot may be free still, and entries may
	 * have become ready while it was built: look again.  A loop, not a
	 * call to itself: each pass that goes on took at least one record off
	 * the reorder ring, and it stops at the first pass that starts
	 * nothing (or only a NOP cycle), as the recursion did. */
	while (cycle_start(s))
		;
}
