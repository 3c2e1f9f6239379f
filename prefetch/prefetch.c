/* prefetch/prefetch.c — the bounded admission and lifecycle state machine
 * (tests/test_prefetch.c pins each rule of its contract).
 *
 * The contract is stated as five collections (queue, queued set, in-flight
 * map, completed set, failure map).  A unit is in at most one of them at a time
 * (admission removes completed/failed state before queueing; completion
 * moves in-flight work to exactly one of completed/failed), so here each
 * tracked unit owns exactly one slot carrying its state.  The slots live in
 * one array sized at pf_init, found through an open-addressed hash index;
 * the FIFO queue is a ring of slot numbers.  Nothing allocates afterwards.
 *
 * Stated that way, the completed/failure sets are unbounded.  coil bounds
 * them with
 * units_max: when a new unit needs a slot and none is free, the oldest
 * terminal (ready or failed) slot is forgotten.  Forgetting is safe: demand
 * for that unit sees "unscheduled" and reads it itself, which is what it
 * would do anyway after an eviction.
 */
#include <errno.h>
#include <stdlib.h>

#include "common/common.h"
#include "prefetch/prefetch.h"

#define NIL UINT32_MAX
#define PF_SIZE_MAX (1u << 24)

enum slot_state {
	ST_FREE = 0,
	ST_QUEUED,
	ST_IN_FLIGHT,
	ST_READY,
	ST_FAILED,
};

struct pf_slot {
	struct pf_unit id;
	uint64_t gen;
	uint32_t prev;  /* terminal list */
	uint32_t next;  /* terminal list, or free list */
	int32_t err;    /* ST_FAILED: the retained -errno */
	uint8_t state;  /* enum slot_state */
};

static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
	uint64_t s;

	return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

static inline uint64_t sat_inc(uint64_t a)
{
	return a == UINT64_MAX ? a : a + 1;
}

/* splitmix64's finalizer: the blob indexes of one stream are consecutive,
 * so the hash must spread neighbours across the index. */
static inline uint32_t unit_hash(struct pf_unit id)
{
	uint64_t x = id.obj_id * 0x9e3779b97f4a7c15ull ^ id.blob;

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (uint32_t)x;
}

/* ---- unit table --------------------------------------------------------- */

/* Position in the index holding @id's slot, or of the empty cell where it
 * would go. */
static uint32_t index_find(const struct pf_machine *m, struct pf_unit id)
{
	uint32_t i = unit_hash(id) & m->index_mask;

	/* The index is at least twice units_max, so an empty cell exists and
	 * the probe ends. */
	for (;;) {
		uint32_t s = m->index[i];

		if (s == NIL || pf_unit_eq(m->slots[s].id, id))
			return i;
		i = (i + 1) & m->index_mask;
	}
}

static uint32_t slot_lookup(const struct pf_machine *m, struct pf_unit id)
{
	return m->index[index_find(m, id)];
}

/* Backward-shift deletion keeps every probe chain unbroken without
 * tombstones, so lookups stay short however long the machine runs. */
static void index_erase(struct pf_machine *m, uint32_t pos)
{
	uint32_t i = pos, j = pos;

	for (;;) {
		j = (j + 1) & m->index_mask;
		if (m->index[j] == NIL)
			break;
		uint32_t home = unit_hash(m->slots[m->index[j]].id) &
				m->index_mask;
		/* Move j into the hole at i unless its home lies cyclically in
		 * (i, j], where it is already reachable. */
		bool reachable = i <= j ? (home > i && home <= j)
					: (home > i || home <= j);
		if (!reachable) {
			m->index[i] = m->index[j];
			i = j;
		}
	}
	m->index[i] = NIL;
}

static void term_unlink(struct pf_machine *m, uint32_t s)
{
	struct pf_slot *sl = &m->slots[s];

	if (sl->prev != NIL)
		m->slots[sl->prev].next = sl->next;
	else
		m->term_head = sl->next;
	if (sl->next != NIL)
		m->slots[sl->next].prev = sl->prev;
	else
		m->term_tail = sl->prev;
	sl->prev = sl->next = NIL;
}

static void term_append(struct pf_machine *m, uint32_t s)
{
	struct pf_slot *sl = &m->slots[s];

	sl->prev = m->term_tail;
	sl->next = NIL;
	if (m->term_tail != NIL)
		m->slots[m->term_tail].next = s;
	else
		m->term_head = s;
	m->term_tail = s;
}

static bool is_terminal(const struct pf_slot *sl)
{
	return sl->state == ST_READY || sl->state == ST_FAILED;
}

static void slot_free(struct pf_machine *m, uint32_t s)
{
	struct pf_slot *sl = &m->slots[s];
	uint32_t pos = index_find(m, sl->id);

	COIL_ASSERT(m->index[pos] == s);
	if (is_terminal(sl))
		term_unlink(m, s);
	index_erase(m, pos);
	sl->state = ST_FREE;
	sl->next = m->free_head;
	m->free_head = s;
	COIL_ASSERT(m->used > 0);
	m->used--;
}

/* A slot for a new unit @id (not yet tracked), reclaiming the oldest
 * terminal slot when the table is full.  NIL if every slot is owned by
 * queued or in-flight work. */
static uint32_t slot_alloc(struct pf_machine *m, struct pf_unit id)
{
	if (m->free_head == NIL) {
		if (m->term_head == NIL)
			return NIL;
		slot_free(m, m->term_head);
		m->report.reclaimed = sat_inc(m->report.reclaimed);
	}
	uint32_t s = m->free_head;
	struct pf_slot *sl = &m->slots[s];

	m->free_head = sl->next;
	uint32_t pos = index_find(m, id);

	COIL_ASSERT(m->index[pos] == NIL);
	m->index[pos] = s;
	sl->id = id;
	sl->gen = 0;
	sl->err = 0;
	sl->prev = sl->next = NIL;
	sl->state = ST_FREE;
	m->used++;
	return s;
}

static void set_terminal(struct pf_machine *m, uint32_t s, uint8_t state)
{
	struct pf_slot *sl = &m->slots[s];

	if (is_terminal(sl))
		term_unlink(m, s);
	sl->state = state;
	term_append(m, s);
}

/* ---- lifecycle ---------------------------------------------------------- */

int pf_init(struct pf_machine *m, uint32_t queue_capacity, uint32_t units_max)
{
	if (!m)
		return -EINVAL;
	memset(m, 0, sizeof(*m));
	if (queue_capacity == 0 || queue_capacity > PF_SIZE_MAX)
		return -EINVAL;
	if (units_max == 0)
		units_max = queue_capacity > PF_SIZE_MAX / 4 ? PF_SIZE_MAX
							     : queue_capacity * 4;
	if (units_max < queue_capacity || units_max > PF_SIZE_MAX)
		return -EINVAL;

	uint32_t index_len = 2;

	while (index_len < 2 * units_max)
		index_len <<= 1;
	m->queue = malloc(sizeof(*m->queue) * queue_capacity);
	m->slots = malloc(sizeof(*m->slots) * units_max);
	m->index = malloc(sizeof(*m->index) * index_len);
	if (!m->queue || !m->slots || !m->index) {
		pf_destroy(m);
		return -ENOMEM;
	}
	m->queue_capacity = queue_capacity;
	m->units_max = units_max;
	m->index_mask = index_len - 1;
	for (uint32_t i = 0; i < index_len; i++)
		m->index[i] = NIL;
	for (uint32_t i = 0; i < units_max; i++) {
		m->slots[i].state = ST_FREE;
		m->slots[i].prev = NIL;
		m->slots[i].next = i + 1 < units_max ? i + 1 : NIL;
	}
	m->free_head = 0;
	m->term_head = m->term_tail = NIL;
	m->report.queue_capacity = queue_capacity;
	return 0;
}

void pf_destroy(struct pf_machine *m)
{
	if (!m)
		return;
	free(m->queue);
	free(m->slots);
	free(m->index);
	memset(m, 0, sizeof(*m));
}

int pf_admit(struct pf_machine *m, struct pf_unit id, bool resident,
	     struct pf_work *out)
{
	if (!m || !m->slots)
		return -EINVAL;

	uint32_t s = slot_lookup(m, id);
	struct pf_report *r = &m->report;

	if (s != NIL && (m->slots[s].state == ST_QUEUED ||
			 m->slots[s].state == ST_IN_FLIGHT)) {
		r->coalesced = sat_inc(r->coalesced);
		return PF_COALESCED;
	}
	if (s != NIL && m->slots[s].state == ST_READY && !resident) {
		slot_free(m, s);
		s = NIL;
		r->evicted_before_use = sat_inc(r->evicted_before_use);
	}
	if (resident) {
		/* A resident copy supersedes any failure and is ready for
		 * demand.  Re-appending refreshes its place in the reclaim
		 * order: the backend just vouched for it. */
		if (s == NIL)
			s = slot_alloc(m, id);
		if (s != NIL)
			set_terminal(m, s, ST_READY);
		/* else: every slot is owned by pending work; the unit stays
		 * untracked and demand finds it in the backend's cache. */
		r->coalesced = sat_inc(r->coalesced);
		return PF_COALESCED;
	}
	if (m->queue_len == m->queue_capacity)
		return PF_AT_CAPACITY;
	if (s == NIL) {
		s = slot_alloc(m, id);
		if (s == NIL)
			return PF_AT_CAPACITY;
	} else {
		/* A new explicit attempt supersedes a retained failure;
		 * demand will see the result of this exact generation. */
		COIL_ASSERT(m->slots[s].state == ST_FAILED);
		term_unlink(m, s);
	}

	struct pf_slot *sl = &m->slots[s];

	sl->state = ST_QUEUED;
	sl->gen = m->generation;
	sl->err = 0;
	m->queue[(m->queue_head + m->queue_len) % m->queue_capacity] = s;
	m->queue_len++;
	r->submitted = sat_inc(r->submitted);
	if (m->queue_len > r->peak_queue_occupancy)
		r->peak_queue_occupancy = m->queue_len;
	if (out) {
		out->id = id;
		out->gen = sl->gen;
	}
	return PF_ADMITTED;
}

/* Takes slot @s out of the middle of the FIFO (rollback, demand promotion,
 * withdrawal).  The queue is at most its capacity long, so closing the gap
 * by shifting is fine; the order of the rest is kept. */
static void queue_remove(struct pf_machine *m, uint32_t s)
{
	uint32_t cap = m->queue_capacity, k;

	for (k = 0; k < m->queue_len; k++)
		if (m->queue[(m->queue_head + k) % cap] == s)
			break;
	COIL_ASSERT(k < m->queue_len);
	for (; k + 1 < m->queue_len; k++)
		m->queue[(m->queue_head + k) % cap] =
			m->queue[(m->queue_head + k + 1) % cap];
	m->queue_len--;
}

int pf_rollback_admission(struct pf_machine *m, const struct pf_work *w)
{
	if (!m || !m->slots || !w)
		return -EINVAL;

	uint32_t s = slot_lookup(m, w->id);

	if (s == NIL || m->slots[s].state != ST_QUEUED ||
	    m->slots[s].gen != w->gen)
		return -EINVAL;

	queue_remove(m, s);
	slot_free(m, s);
	if (m->report.submitted > 0)
		m->report.submitted--;
	return 0;
}

int pf_begin_next(struct pf_machine *m, struct pf_work *out)
{
	if (!m || !m->slots || !out)
		return -EINVAL;
	if (m->queue_len == 0)
		return 0;

	uint32_t s = m->queue[m->queue_head];
	struct pf_slot *sl = &m->slots[s];

	m->queue_head = (m->queue_head + 1) % m->queue_capacity;
	m->queue_len--;
	COIL_ASSERT(sl->state == ST_QUEUED);
	sl->state = ST_IN_FLIGHT;
	m->in_flight++;
	m->report.started = sat_inc(m->report.started);
	out->id = sl->id;
	out->gen = sl->gen;
	return 1;
}

int pf_begin_unit(struct pf_machine *m, struct pf_unit id,
		  struct pf_work *out)
{
	if (!m || !m->slots || !out)
		return -EINVAL;

	uint32_t s = slot_lookup(m, id);

	if (s == NIL || m->slots[s].state != ST_QUEUED)
		return 0;
	queue_remove(m, s);

	struct pf_slot *sl = &m->slots[s];

	sl->state = ST_IN_FLIGHT;
	m->in_flight++;
	m->report.started = sat_inc(m->report.started);
	out->id = sl->id;
	out->gen = sl->gen;
	return 1;
}

int pf_withdraw(struct pf_machine *m, struct pf_unit id)
{
	if (!m || !m->slots)
		return -EINVAL;

	uint32_t s = slot_lookup(m, id);

	if (s == NIL || m->slots[s].state != ST_QUEUED)
		return 0;
	queue_remove(m, s);
	slot_free(m, s);
	m->report.cancelled = sat_inc(m->report.cancelled);
	return 1;
}

int pf_complete(struct pf_machine *m, const struct pf_work *w, int result)
{
	if (!m || !m->slots || !w)
		return -EINVAL;

	uint32_t s = slot_lookup(m, w->id);

	if (s == NIL || m->slots[s].state != ST_IN_FLIGHT)
		return -EINVAL;
	if (m->slots[s].gen != w->gen)
		return -ESTALE;

	struct pf_report *r = &m->report;

	COIL_ASSERT(m->in_flight > 0);
	m->in_flight--;
	if (w->gen != m->generation) {
		/* Fenced by pf_cancel_all: the backend has now released this
		 * exact operation, and its result is not published. */
		slot_free(m, s);
		r->cancelled = sat_inc(r->cancelled);
		return PF_DISCARDED;
	}
	if (result >= 0) {
		set_terminal(m, s, ST_READY);
		r->completed = sat_inc(r->completed);
		return PF_PUBLISHED;
	}
	set_terminal(m, s, ST_FAILED);
	m->slots[s].err = result;
	r->failed = sat_inc(r->failed);
	return PF_FAILED;
}

int pf_observe_demand(struct pf_machine *m, struct pf_unit id)
{
	if (!m || !m->slots)
		return -EINVAL;

	uint32_t s = slot_lookup(m, id);

	if (s == NIL)
		return PF_OBS_UNSCHEDULED;
	switch (m->slots[s].state) {
	case ST_QUEUED:
		return PF_OBS_QUEUED;
	case ST_IN_FLIGHT:
		m->report.in_flight_at_demand =
			sat_inc(m->report.in_flight_at_demand);
		return PF_OBS_IN_FLIGHT;
	case ST_FAILED:
		return PF_OBS_FAILED;
	case ST_READY:
		return PF_OBS_READY;
	}
	COIL_ASSERT(!"tracked slot in free state");
	return -EINVAL;
}

bool pf_is_pending(const struct pf_machine *m, struct pf_unit id)
{
	if (!m || !m->slots)
		return false;

	uint32_t s = slot_lookup(m, id);

	return s != NIL && (m->slots[s].state == ST_QUEUED ||
			    m->slots[s].state == ST_IN_FLIGHT);
}

int pf_resolve_demand(struct pf_machine *m, struct pf_unit id,
		      uint64_t waited_ns, int *err_out)
{
	if (!m || !m->slots)
		return -EINVAL;

	uint32_t s = slot_lookup(m, id);
	struct pf_report *r = &m->report;

	if (s != NIL && (m->slots[s].state == ST_QUEUED ||
			 m->slots[s].state == ST_IN_FLIGHT))
		return -EBUSY;
	if (waited_ns != PF_NOT_WAITED) {
		r->demand_waits = sat_inc(r->demand_waits);
		r->demand_wait_ns = sat_add(r->demand_wait_ns, waited_ns);
	}
	if (s == NIL)
		return PF_RES_UNSCHEDULED;
	if (m->slots[s].state == ST_FAILED) {
		if (err_out)
			*err_out = m->slots[s].err;
		slot_free(m, s);
		return PF_RES_FAILED;
	}
	COIL_ASSERT(m->slots[s].state == ST_READY);
	slot_free(m, s);
	r->ready_before_demand = sat_inc(r->ready_before_demand);
	return PF_RES_READY;
}

void pf_begin_backpressure(struct pf_machine *m)
{
	if (m)
		m->report.backpressure_count =
			sat_inc(m->report.backpressure_count);
}

void pf_finish_backpressure(struct pf_machine *m, uint64_t waited_ns)
{
	if (m)
		m->report.backpressure_ns =
			sat_add(m->report.backpressure_ns, waited_ns);
}

int pf_cancel_all(struct pf_machine *m)
{
	if (!m || !m->slots)
		return -EINVAL;
	if (m->generation == UINT64_MAX)
		return -EOVERFLOW;
	m->generation++;
	m->report.cancelled = sat_add(m->report.cancelled, m->queue_len);
	/* Queued work never reached the backend: drop it synchronously. */
	while (m->queue_len > 0) {
		uint32_t s = m->queue[m->queue_head];

		m->queue_head = (m->queue_head + 1) % m->queue_capacity;
		m->queue_len--;
		slot_free(m, s);
	}
	return 0;
}

int pf_finish_cancellation(struct pf_machine *m, struct pf_unit *id_out,
			   int *err_out)
{
	if (!m || !m->slots)
		return -EINVAL;
	if (!pf_is_idle(m))
		return -EBUSY;

	/* Idle: every tracked slot is terminal, so walking the terminal
	 * list forgets everything. */
	bool found = false;
	struct pf_unit first = { 0, 0 };
	int err = 0;

	while (m->term_head != NIL) {
		uint32_t s = m->term_head;
		const struct pf_slot *sl = &m->slots[s];

		if (sl->state == ST_FAILED &&
		    (!found || pf_unit_cmp(sl->id, first) < 0)) {
			found = true;
			first = sl->id;
			err = sl->err;
		}
		slot_free(m, s);
	}
	COIL_ASSERT(m->used == 0);
	if (!found)
		return 0;
	if (id_out)
		*id_out = first;
	if (err_out)
		*err_out = err;
	return 1;
}

bool pf_is_idle(const struct pf_machine *m)
{
	return !m || (m->queue_len == 0 && m->in_flight == 0);
}

uint64_t pf_generation(const struct pf_machine *m)
{
	return m ? m->generation : 0;
}

uint32_t pf_queue_len(const struct pf_machine *m)
{
	return m ? m->queue_len : 0;
}

uint32_t pf_in_flight(const struct pf_machine *m)
{
	return m ? m->in_flight : 0;
}

void pf_report_get(const struct pf_machine *m, struct pf_report *out)
{
	if (!out)
		return;
	if (!m) {
		memset(out, 0, sizeof(*out));
		return;
	}
	*out = m->report;
}

void pf_report_merge(struct pf_report *sum, const struct pf_report *r)
{
	if (!sum || !r)
		return;
	sum->submitted = sat_add(sum->submitted, r->submitted);
	sum->coalesced = sat_add(sum->coalesced, r->coalesced);
	sum->started = sat_add(sum->started, r->started);
	sum->completed = sat_add(sum->completed, r->completed);
	sum->cancelled = sat_add(sum->cancelled, r->cancelled);
	sum->failed = sat_add(sum->failed, r->failed);
	sum->queue_capacity = COIL_MAX(sum->queue_capacity, r->queue_capacity);
	sum->peak_queue_occupancy =
		COIL_MAX(sum->peak_queue_occupancy, r->peak_queue_occupancy);
	sum->backpressure_count =
		sat_add(sum->backpressure_count, r->backpressure_count);
	sum->backpressure_ns = sat_add(sum->backpressure_ns, r->backpressure_ns);
	sum->demand_waits = sat_add(sum->demand_waits, r->demand_waits);
	sum->demand_wait_ns = sat_add(sum->demand_wait_ns, r->demand_wait_ns);
	sum->ready_before_demand =
		sat_add(sum->ready_before_demand, r->ready_before_demand);
	sum->in_flight_at_demand =
		sat_add(sum->in_flight_at_demand, r->in_flight_at_demand);
	sum->evicted_before_use =
		sat_add(sum->evicted_before_use, r->evicted_before_use);
	sum->reclaimed = sat_add(sum->reclaimed, r->reclaimed);
}
