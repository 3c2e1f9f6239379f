/* cache/cache_policy.c — the eviction policies behind one interface, per shard
 * and always under the shard lock.
 *
 * S3-FIFO (Yang et al., SOSP '23): new keys enter a small FIFO (~10 % of the
 * bytes); a key that was hit while there moves to the main FIFO, the others
 * leave and are remembered in a ghost of keys.  A key that returns while in
 * the ghost goes straight to main.  Main is a FIFO with a 2-bit frequency
 * (CLOCK-like second chances).  A hit only bumps a counter: no list surgery.
 * One sequential scan passes through the small queue and leaves, so it cannot
 * flush the hot set in main.
 *
 * 2Q (Johnson & Shasha, VLDB '94, the "full" version): A1in FIFO, A1out
 * ghost, Am LRU.  LRU: one list, hit moves to the head; the baseline.
 */
#include "cache/cache_internal.h"
#include "common/common.h"

#include <errno.h>
#include <stdlib.h>

/* Ghost slots probed per lookup: bounds the work and tolerates collisions. */
#define GHOST_PROBES 4

void cache_queue_init(struct cache_queue *q)
{
	q->head.prev = q->head.next = &q->head;
	q->bytes = 0;
	q->count = 0;
}

static struct cache_node *link_node(struct cache_link *l)
{
	return (struct cache_node *)((char *)l - offsetof(struct cache_node, link));
}

static void q_push_head(struct cache_queue *q, struct cache_node *n, uint8_t id)
{
	struct cache_link *l = &n->link;

	l->prev = &q->head;
	l->next = q->head.next;
	q->head.next->prev = l;
	q->head.next = l;
	q->bytes += n->charge;
	q->count++;
	n->queue = id;
}

static void q_unlink(struct cache_queue *q, struct cache_node *n)
{
	struct cache_link *l = &n->link;

	COIL_ASSERT(q->count > 0);
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->prev = l->next = NULL;
	q->bytes -= n->charge;
	q->count--;
	n->queue = NODE_Q_NONE;
}

static struct cache_node *q_tail(struct cache_queue *q)
{
	return q->count ? link_node(q->head.prev) : NULL;
}

static struct cache_queue *node_queue(struct cache_shard *s, struct cache_node *n)
{
	COIL_ASSERT(n->queue == NODE_Q_SMALL || n->queue == NODE_Q_MAIN);
	return n->queue == NODE_Q_SMALL ? &s->small : &s->main;
}

/* --- ghost ------------------------------------------------------------- */

static uint64_t ghost_fp(uint64_t hash)
{
	return hash | 1; /* never 0, which marks an empty slot */
}

static void ghost_add(struct cache_ghost *g, uint64_t hash)
{
	uint64_t fp = ghost_fp(hash);
	uint32_t i = (uint32_t)hash & g->mask, victim = i;

	g->clock++;
	for (unsigned k = 0; k < GHOST_PROBES; k++) {
		uint32_t slot = (i + k) & g->mask;

		if (g->fp[slot] == fp || g->fp[slot] == 0) {
			victim = slot;
			break;
		}
		if (g->stamp[slot] < g->stamp[victim])
			victim = slot; /* the oldest ghost of the probe run */
	}
	g->fp[victim] = fp;
	g->stamp[victim] = g->clock;
}

/* True (and forget it) if @hash was among the last @window ghosts added. */
static bool ghost_take(struct cache_ghost *g, uint64_t hash, uint64_t window)
{
	uint64_t fp = ghost_fp(hash);
	uint32_t i = (uint32_t)hash & g->mask;

	for (unsigned k = 0; k < GHOST_PROBES; k++) {
		uint32_t slot = (i + k) & g->mask;

		if (g->fp[slot] == fp) {
			g->fp[slot] = 0;
			return g->clock - g->stamp[slot] < window;
		}
	}
	return false;
}

int cache_policy_shard_init(struct cache_shard *s, uint32_t ghost_slots)
{
	uint32_t n = 16;

	cache_queue_init(&s->small);
	cache_queue_init(&s->main);
	while (n < ghost_slots && n < (1u << 30))
		n <<= 1;
	s->ghost.fp = calloc(n, sizeof(*s->ghost.fp));
	s->ghost.stamp = calloc(n, sizeof(*s->ghost.stamp));
	if (!s->ghost.fp || !s->ghost.stamp) {
		cache_policy_shard_fini(s);
		return -ENOMEM;
	}
	s->ghost.mask = n - 1;
	s->ghost.clock = 0;
	return 0;
}

void cache_policy_shard_fini(struct cache_shard *s)
{
	free(s->ghost.fp);
	free(s->ghost.stamp);
	s->ghost.fp = NULL;
	s->ghost.stamp = NULL;
}

/* --- the policies ----------------------------------------------------- */

/* The ghost remembers about as many keys as main holds (S3-FIFO) or half the
 * resident entries (2Q's Kout); entry counts, since values vary in size. */
static uint64_t ghost_window(const struct cache_shard *s)
{
	if (s->policy == CACHE_POLICY_2Q)
		return s->entries / 2 + 1;
	return (uint64_t)s->main.count + 1;
}

void cache_policy_insert(struct cache_shard *s, struct cache_node *n)
{
	n->freq = 0;
	switch (s->policy) {
	case CACHE_POLICY_LRU:
		q_push_head(&s->main, n, NODE_Q_MAIN);
		return;
	case CACHE_POLICY_S3FIFO:
	case CACHE_POLICY_2Q:
	default:
		if (ghost_take(&s->ghost, n->hash, ghost_window(s))) {
			s->n.ghost_hits++;
			q_push_head(&s->main, n, NODE_Q_MAIN);
		} else {
			q_push_head(&s->small, n, NODE_Q_SMALL);
		}
		return;
	}
}

void cache_policy_hit(struct cache_shard *s, struct cache_node *n)
{
	switch (s->policy) {
	case CACHE_POLICY_S3FIFO:
		if (n->freq < 3)
			n->freq++;
		return;
	case CACHE_POLICY_2Q:
		if (n->queue != NODE_Q_MAIN)
			return; /* A1in is a FIFO: a hit there changes nothing */
		__attribute__((fallthrough)); /* Am is an LRU */
	case CACHE_POLICY_LRU:
	default:
		if (s->main.head.next != &n->link) {
			q_unlink(&s->main, n);
			q_push_head(&s->main, n, NODE_Q_MAIN);
		}
		return;
	}
}

void cache_policy_remove(struct cache_shard *s, struct cache_node *n)
{
	q_unlink(node_queue(s, n), n);
}

/* Evict from small when it is over its share (or main is empty). */
static bool small_turn(const struct cache_shard *s)
{
	return s->small.count && (s->small.bytes > s->small_max || !s->main.count);
}

static struct cache_node *s3fifo_victim(struct cache_shard *s)
{
	struct cache_node *n;
	/* Each small entry moves to main at most once and each main entry has
	 * at most 3 second chances, so this bounds the loop. */
	uint64_t bound = (uint64_t)s->small.count + 4ull * (s->main.count +
							    s->small.count) + 1;

	while (bound--) {
		if (small_turn(s)) {
			n = q_tail(&s->small);
			q_unlink(&s->small, n);
			if (n->freq >= 1) {
				/* Hit while on probation: a real reuser. */
				n->freq = 0;
				q_push_head(&s->main, n, NODE_Q_MAIN);
				continue;
			}
			ghost_add(&s->ghost, n->hash);
			return n;
		}
		n = q_tail(&s->main);
		if (!n)
			return NULL;
		if (n->freq) {
			n->freq--;
			q_unlink(&s->main, n);
			q_push_head(&s->main, n, NODE_Q_MAIN);
			continue;
		}
		q_unlink(&s->main, n);
		return n;
	}
	COIL_ASSERT(!"s3fifo eviction bound");
	return NULL;
}

static struct cache_node *twoq_victim(struct cache_shard *s)
{
	struct cache_node *n;

	if (small_turn(s)) {
		n = q_tail(&s->small);
		q_unlink(&s->small, n);
		ghost_add(&s->ghost, n->hash);
		return n;
	}
	n = q_tail(&s->main);
	if (n)
		q_unlink(&s->main, n);
	return n;
}

struct cache_node *cache_policy_victim(struct cache_shard *s)
{
	struct cache_node *n;

	switch (s->policy) {
	case CACHE_POLICY_S3FIFO:
		return s3fifo_victim(s);
	case CACHE_POLICY_2Q:
		return twoq_victim(s);
	case CACHE_POLICY_LRU:
	default:
		n = q_tail(&s->main);
		if (n)
			q_unlink(&s->main, n);
		return n;
	}
}
