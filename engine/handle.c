/* engine/handle.c — object handles a use after close can never turn into
 * another object's.
 *
 * coil.h promises -EBADF for a call on a closed handle.  Were the handle a
 * pointer to memory that a later coil_obj_open may hand out again, a write
 * through a closed handle would land in whichever object now owns that
 * memory.  So the pointer a caller holds is not an address: it names a slot
 * of one process-wide table and the slot's generation,
 *
 *   bits 56..63  HANDLE_TAG (non-canonical: dereferencing it faults)
 *   bits 20..51  generation of the slot when the handle was opened
 *   bits  0..19  slot index
 *
 * and a slot's generation advances every time it is freed.  A call through
 * a closed handle finds the slot free, or taken again under a later
 * generation: -EBADF either way, before and after its store is closed,
 * unless the one slot was opened and closed 2^32 times in between.  Slots
 * live in chunks that are never freed (the table holds at most
 * HANDLE_SLOTS_MAX handles open at once), so a stale handle always reads
 * valid memory; a freed slot is reused first, so the table is as large as
 * the most handles ever open at once.  Lookups take no lock: a chunk
 * pointer, once published, never changes.  Tests: tests/test_api_handles.c. */
#include <errno.h>
#include <stdlib.h>

#include "engine/store.h"
#include "engine/handle.h"

_Static_assert(sizeof(void *) == 8, "a handle needs 64 bits");

#define HANDLE_TAG (0xc0ull << 56)
#define HANDLE_TAG_MASK (0xfffull << 52) /* with the unused bits 52..55 */
#define HANDLE_SLOT_BITS 20
#define HANDLE_CHUNK_SLOTS 1024u
#define HANDLE_SLOTS_MAX (1u << HANDLE_SLOT_BITS)
#define HANDLE_CHUNKS (HANDLE_SLOTS_MAX / HANDLE_CHUNK_SLOTS)

static pthread_mutex_t handle_mu = PTHREAD_MUTEX_INITIALIZER;
static struct coil_obj *_Atomic handle_chunk[HANDLE_CHUNKS];
static uint32_t handle_used;             /* slots ever handed out */
static uint32_t handle_free_head = UINT32_MAX;

static struct coil_obj *slot_at(uint32_t slot)
{
	struct coil_obj *c;

	if (slot >= HANDLE_SLOTS_MAX)
		return NULL;
	c = atomic_load_explicit(&handle_chunk[slot / HANDLE_CHUNK_SLOTS],
				 memory_order_acquire);
	return c ? &c[slot % HANDLE_CHUNK_SLOTS] : NULL;
}

int handle_alloc(struct coil_obj **out)
{
	struct coil_obj *h;
	uint32_t slot;

	pthread_mutex_lock(&handle_mu);
	if (handle_free_head != UINT32_MAX) {
		slot = handle_free_head;
		h = slot_at(slot);
		handle_free_head = h->free_next;
	} else if (handle_used < HANDLE_SLOTS_MAX) {
		slot = handle_used;
		if (slot % HANDLE_CHUNK_SLOTS == 0) {
			struct coil_obj *c = calloc(HANDLE_CHUNK_SLOTS,
						    sizeof(*c));
			if (!c) {
				pthread_mutex_unlock(&handle_mu);
				return -ENOMEM;
			}
			for (uint32_t i = 0; i < HANDLE_CHUNK_SLOTS; i++) {
				c[i].slot = slot + i;
				c[i].magic = HANDLE_MAGIC_DEAD;
			}
			atomic_store_explicit(
				&handle_chunk[slot / HANDLE_CHUNK_SLOTS], c,
				memory_order_release);
		}
		handle_used++;
		h = slot_at(slot);
	} else {
		pthread_mutex_unlock(&handle_mu);
		return -EMFILE;
	}
	pthread_mutex_unlock(&handle_mu);
	COIL_ASSERT(h && h->slot == slot);
	COIL_ASSERT(h->magic != HANDLE_MAGIC);
	h->s = NULL;
	h->obj = NULL;
	h->next = NULL;
	h->ra = NULL;
	atomic_store(&h->rd_bytes, 0);
	*out = h;
	return 0;
}

void handle_free(struct coil_obj *h)
{
	COIL_ASSERT(h->magic != HANDLE_MAGIC);
	pthread_mutex_lock(&handle_mu);
	/* Before the slot can be handed out again: a call through a handle
	 * of the old generation that finds the slot live again sees the new
	 * generation (the new owner publishes its magic with release). */
	atomic_fetch_add(&h->gen, 1);
	h->free_next = handle_free_head;
	handle_free_head = h->slot;
	pthread_mutex_unlock(&handle_mu);
}

coil_obj *handle_public(const struct coil_obj *h)
{
	uint64_t gen = atomic_load(&h->gen);

	return (coil_obj *)(uintptr_t)(HANDLE_TAG | gen << HANDLE_SLOT_BITS |
				       h->slot);
}

struct coil_obj *handle_lookup(const coil_obj *pub, uint32_t *gen)
{
	uint64_t v = (uint64_t)(uintptr_t)pub;

	if ((v & HANDLE_TAG_MASK) != HANDLE_TAG)
		return NULL;
	*gen = (uint32_t)(v >> HANDLE_SLOT_BITS);
	return slot_at((uint32_t)(v & (HANDLE_SLOTS_MAX - 1)));
}
