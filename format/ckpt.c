/* format/ckpt.c — the checkpoint: a header BLOCK then a payload holding the
 * whole metadata (segment table, objects with their extents, dictionaries),
 * written by a bounds-checked cursor and walked by one. */
#include "format/format_internal.h"

_Static_assert(FMT_CKPT_CSUM_OFF == 80, "checkpoint header fields are 80 bytes");
_Static_assert(FMT_CKPT_HDR == FMT_CKPT_CSUM_OFF + 8, "then its checksum");
_Static_assert(FMT_CKPT_HDR <= FMT_BLOCK, "header fits its BLOCK");
_Static_assert(FMT_CKPT_OBJ_MIN == 8 + 8 + 2 + 1 + 4, "smallest object entry");

static const uint8_t ckpt_magic[4] = { 'C', 'C', 'K', 'P' };

/* Every count must be payable from payload_len at its smallest encoding, so a
 * header cannot make a reader reserve or loop for what is not there. */
static int ckpt_valid(const struct fmt_ckpt *h)
{
	if (h->replay_off % FMT_JSECT)
		return 0;
	if (h->n_objects > h->payload_len / FMT_CKPT_OBJ_MIN)
		return 0;
	uint64_t need = (uint64_t)h->segment_count * FMT_CKPT_SEG_SIZE +
			(uint64_t)h->n_dicts * FMT_CKPT_DICT_SIZE +
			h->n_objects * FMT_CKPT_OBJ_MIN;
	return need <= h->payload_len;
}

int fmt_ckpt_encode(const struct fmt_ckpt *h, uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_BLOCK || !ckpt_valid(h))
		return -EINVAL;
	memset(buf, 0, FMT_BLOCK);
	memcpy(buf, ckpt_magic, 4);
	coil_put_le16(buf + 4, FMT_VERSION);
	coil_put_le64(buf + 8, h->store_id);
	coil_put_le64(buf + 16, h->seq);
	coil_put_le64(buf + 24, h->payload_len);
	coil_put_le64(buf + 32, h->payload_csum);
	coil_put_le64(buf + 40, h->replay_off);
	coil_put_le64(buf + 48, h->replay_seq);
	coil_put_le64(buf + 56, h->next_obj_id);
	coil_put_le64(buf + 64, h->n_objects);
	coil_put_le32(buf + 72, h->segment_count);
	coil_put_le32(buf + 76, h->n_dicts);
	coil_put_le64(buf + FMT_CKPT_CSUM_OFF, fmt_csum(buf, FMT_CKPT_CSUM_OFF));
	return FMT_BLOCK;
}

int fmt_ckpt_decode(struct fmt_ckpt *h, const uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_CKPT_HDR)
		return -EINVAL;
	if (memcmp(buf, ckpt_magic, 4) || coil_get_le16(buf + 4) != FMT_VERSION)
		return -EIO;
	if (coil_get_le64(buf + FMT_CKPT_CSUM_OFF) != fmt_csum(buf, FMT_CKPT_CSUM_OFF))
		return -EIO;
	if (!fmt_all_zero(buf + 6, 2))
		return -EIO;
	struct fmt_ckpt t = {
		.store_id = coil_get_le64(buf + 8),
		.seq = coil_get_le64(buf + 16),
		.payload_len = coil_get_le64(buf + 24),
		.payload_csum = coil_get_le64(buf + 32),
		.replay_off = coil_get_le64(buf + 40),
		.replay_seq = coil_get_le64(buf + 48),
		.next_obj_id = coil_get_le64(buf + 56),
		.n_objects = coil_get_le64(buf + 64),
		.segment_count = coil_get_le32(buf + 72),
		.n_dicts = coil_get_le32(buf + 76),
	};
	if (!ckpt_valid(&t))
		return -EIO;
	*h = t;
	return 0;
}

uint64_t fmt_ckpt_block_csum(const uint8_t *block)
{
	return fmt_csum(block, FMT_BLOCK);
}

int fmt_ckpt_verify_payload(const struct fmt_ckpt *h, const uint8_t *payload, size_t len)
{
	if (!h || !payload || len < h->payload_len)
		return -EIO;
	return fmt_csum(payload, h->payload_len) == h->payload_csum ? 0 : -EIO;
}

int fmt_ckpt_put_seg(struct fmt_cursor *c, uint64_t live_bytes, uint8_t state)
{
	static const uint8_t pad[7];
	fmt_cursor_put_u64(c, live_bytes);
	fmt_cursor_put_u8(c, state);
	fmt_cursor_put_bytes(c, pad, sizeof(pad));
	return c->err;
}

int fmt_ckpt_get_seg(struct fmt_cursor *c, uint64_t *live_bytes, uint8_t *state)
{
	uint64_t live = fmt_cursor_get_u64(c);
	uint8_t st = fmt_cursor_get_u8(c);
	const uint8_t *pad = fmt_cursor_get_ptr(c, 7);
	if (!pad)
		return -EIO;
	if (!fmt_all_zero(pad, 7)) {
		c->err = -EIO;
		return -EIO;
	}
	*live_bytes = live;
	*state = st;
	return 0;
}

int fmt_ckpt_put_obj(struct fmt_cursor *c, uint64_t obj_id, uint64_t size,
		     const char *name, size_t name_len, uint32_t n_extents)
{
	if (!fmt_name_ok(name, name_len))
		return -EINVAL;
	fmt_cursor_put_u64(c, obj_id);
	fmt_cursor_put_u64(c, size);
	fmt_cursor_put_u16(c, (uint16_t)name_len);
	fmt_cursor_put_bytes(c, name, name_len);
	fmt_cursor_put_u32(c, n_extents);
	return c->err;
}

int fmt_ckpt_get_obj(struct fmt_cursor *c, struct fmt_ckpt_obj *o)
{
	uint64_t obj_id = fmt_cursor_get_u64(c);
	uint64_t size = fmt_cursor_get_u64(c);
	uint16_t name_len = fmt_cursor_get_u16(c);
	const char *name = (const char *)fmt_cursor_get_ptr(c, name_len);
	uint32_t n_extents = fmt_cursor_get_u32(c);
	if (c->err)
		return -EIO;
	if (!fmt_name_ok(name, name_len) ||
	    (uint64_t)n_extents * FMT_EXTENT_MIN > fmt_cursor_left(c)) {
		c->err = -EIO;
		return -EIO;
	}
	o->obj_id = obj_id;
	o->size = size;
	o->name_len = name_len;
	o->name = name;
	o->n_extents = n_extents;
	return 0;
}

int fmt_ckpt_put_dict(struct fmt_cursor *c, uint32_t dict_id, uint64_t obj_id)
{
	if (dict_id == 0)
		return -EINVAL;
	fmt_cursor_put_u32(c, dict_id);
	fmt_cursor_put_u64(c, obj_id);
	return c->err;
}

int fmt_ckpt_get_dict(struct fmt_cursor *c, uint32_t *dict_id, uint64_t *obj_id)
{
	uint32_t id = fmt_cursor_get_u32(c);
	uint64_t obj = fmt_cursor_get_u64(c);
	if (c->err)
		return -EIO;
	if (id == 0) {
		c->err = -EIO;
		return -EIO;
	}
	*dict_id = id;
	*obj_id = obj;
	return 0;
}

int fmt_ckpt_payload_check(const struct fmt_ckpt *h, const uint8_t *payload, size_t len)
{
	struct fmt_cursor c;
	struct fmt_extent e;
	struct fmt_ckpt_obj o;
	uint64_t live;
	uint8_t state;
	uint32_t dict_id;
	uint64_t obj_id;

	if (!h || !payload || len < h->payload_len)
		return -EIO;
	fmt_cursor_init_ro(&c, payload, (size_t)h->payload_len);
	for (uint32_t i = 0; i < h->segment_count; i++)
		if (fmt_ckpt_get_seg(&c, &live, &state) < 0)
			return -EIO;
	/* Bounded: n_objects <= payload_len / 23 (header check) and every
	 * entry consumes at least 23 bytes. */
	for (uint64_t i = 0; i < h->n_objects; i++) {
		if (fmt_ckpt_get_obj(&c, &o) < 0)
			return -EIO;
		for (uint32_t j = 0; j < o.n_extents; j++)
			if (fmt_cursor_get_extent(&c, &e) < 0)
				return -EIO;
	}
	for (uint32_t i = 0; i < h->n_dicts; i++)
		if (fmt_ckpt_get_dict(&c, &dict_id, &obj_id) < 0)
			return -EIO;
	return c.pos == c.len ? 0 : -EIO;
}

/* ---- delta checkpoints --------------------------------------------------- */

_Static_assert(FMT_DELTA_CSUM_OFF + 8 == FMT_DELTA_HDR, "delta header then its checksum");
_Static_assert(FMT_DREC_RANGES_MIN == 1 + 8 + 8 + 4, "smallest RANGES record");

static const uint8_t delta_magic[4] = { 'C', 'C', 'K', 'D' };

static int delta_valid(const struct fmt_ckpt_delta *h)
{
	return h->index != 0 && h->replay_off % FMT_JSECT == 0 &&
	       h->n_records <= h->payload_len / FMT_DREC_MIN;
}

int fmt_delta_encode(const struct fmt_ckpt_delta *h, uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_DELTA_HDR || !delta_valid(h))
		return -EINVAL;
	memset(buf, 0, FMT_DELTA_HDR);
	memcpy(buf, delta_magic, 4);
	coil_put_le16(buf + 4, FMT_VERSION);
	coil_put_le64(buf + 8, h->store_id);
	coil_put_le64(buf + 16, h->base_seq);
	coil_put_le32(buf + 24, h->index);
	coil_put_le32(buf + 28, h->n_records);
	coil_put_le64(buf + 32, h->payload_len);
	coil_put_le64(buf + 40, h->payload_csum);
	coil_put_le64(buf + 48, h->replay_off);
	coil_put_le64(buf + 56, h->replay_seq);
	coil_put_le64(buf + 64, h->next_obj_id);
	coil_put_le64(buf + 72, h->prev_csum);
	coil_put_le32(buf + 80, h->segment_count);
	coil_put_le64(buf + FMT_DELTA_CSUM_OFF, fmt_csum(buf, FMT_DELTA_CSUM_OFF));
	return FMT_DELTA_HDR;
}

int fmt_delta_decode(struct fmt_ckpt_delta *h, const uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_DELTA_HDR)
		return -EINVAL;
	if (memcmp(buf, delta_magic, 4) || coil_get_le16(buf + 4) != FMT_VERSION)
		return -EIO;
	if (coil_get_le64(buf + FMT_DELTA_CSUM_OFF) != fmt_csum(buf, FMT_DELTA_CSUM_OFF))
		return -EIO;
	if (!fmt_all_zero(buf + 6, 2) || !fmt_all_zero(buf + 84, 4))
		return -EIO;
	struct fmt_ckpt_delta t = {
		.store_id = coil_get_le64(buf + 8),
		.base_seq = coil_get_le64(buf + 16),
		.index = coil_get_le32(buf + 24),
		.n_records = coil_get_le32(buf + 28),
		.payload_len = coil_get_le64(buf + 32),
		.payload_csum = coil_get_le64(buf + 40),
		.replay_off = coil_get_le64(buf + 48),
		.replay_seq = coil_get_le64(buf + 56),
		.next_obj_id = coil_get_le64(buf + 64),
		.prev_csum = coil_get_le64(buf + 72),
		.segment_count = coil_get_le32(buf + 80),
		.csum = coil_get_le64(buf + FMT_DELTA_CSUM_OFF),
	};
	if (!delta_valid(&t))
		return -EIO;
	*h = t;
	return 0;
}

int fmt_delta_put_obj(struct fmt_cursor *c, uint64_t obj_id, uint64_t size,
		      const char *name, size_t name_len, uint32_t n_extents)
{
	if (!fmt_name_ok(name, name_len))
		return -EINVAL;
	fmt_cursor_put_u8(c, FMT_DREC_OBJ);
	return fmt_ckpt_put_obj(c, obj_id, size, name, name_len, n_extents);
}

int fmt_delta_put_ranges(struct fmt_cursor *c, uint64_t obj_id, uint64_t size,
			 uint32_t n_ranges)
{
	fmt_cursor_put_u8(c, FMT_DREC_RANGES);
	fmt_cursor_put_u64(c, obj_id);
	fmt_cursor_put_u64(c, size);
	fmt_cursor_put_u32(c, n_ranges);
	return c->err;
}

int fmt_delta_put_range(struct fmt_cursor *c, uint64_t lo, uint64_t hi,
			uint32_t n_extents)
{
	if (lo > hi)
		return -EINVAL;
	fmt_cursor_put_u64(c, lo);
	fmt_cursor_put_u64(c, hi);
	fmt_cursor_put_u32(c, n_extents);
	return c->err;
}

int fmt_delta_put_gone(struct fmt_cursor *c, uint64_t obj_id)
{
	fmt_cursor_put_u8(c, FMT_DREC_GONE);
	fmt_cursor_put_u64(c, obj_id);
	return c->err;
}

static int cursor_fail(struct fmt_cursor *c)
{
	c->err = -EIO;
	return -EIO;
}

int fmt_delta_get_kind(struct fmt_cursor *c)
{
	uint8_t k = fmt_cursor_get_u8(c);

	if (c->err)
		return -EIO;
	if (k != FMT_DREC_OBJ && k != FMT_DREC_RANGES && k != FMT_DREC_GONE)
		return cursor_fail(c);
	return k;
}

int fmt_delta_get_ranges(struct fmt_cursor *c, uint64_t *obj_id,
			 uint64_t *size, uint32_t *n_ranges)
{
	uint64_t id = fmt_cursor_get_u64(c);
	uint64_t sz = fmt_cursor_get_u64(c);
	uint32_t n = fmt_cursor_get_u32(c);

	if (c->err)
		return -EIO;
	if ((uint64_t)n * FMT_DRANGE_SIZE > fmt_cursor_remaining(c))
		return cursor_fail(c);
	*obj_id = id;
	*size = sz;
	*n_ranges = n;
	return 0;
}

int fmt_delta_get_range(struct fmt_cursor *c, uint64_t *lo, uint64_t *hi,
			uint32_t *n_extents)
{
	uint64_t a = fmt_cursor_get_u64(c);
	uint64_t z = fmt_cursor_get_u64(c);
	uint32_t n = fmt_cursor_get_u32(c);

	if (c->err)
		return -EIO;
	if (a > z || (uint64_t)n * FMT_EXTENT_MIN > fmt_cursor_remaining(c))
		return cursor_fail(c);
	*lo = a;
	*hi = z;
	*n_extents = n;
	return 0;
}

int fmt_delta_get_gone(struct fmt_cursor *c, uint64_t *obj_id)
{
	uint64_t id = fmt_cursor_get_u64(c);

	if (c->err)
		return -EIO;
	*obj_id = id;
	return 0;
}

/* One range's extents: each decodes and lies inside [lo, hi). */
static int delta_range_check(struct fmt_cursor *c, struct fmt_extent *e)
{
	uint64_t lo, hi, end;
	uint32_t n;

	if (fmt_delta_get_range(c, &lo, &hi, &n) < 0)
		return -EIO;
	for (uint32_t j = 0; j < n; j++) {
		if (fmt_cursor_get_extent(c, e) < 0)
			return -EIO;
		if (e->obj_off < lo ||
		    coil_add_overflows(e->obj_off, e->len, &end) || end > hi)
			return cursor_fail(c);
	}
	return 0;
}

int fmt_delta_payload_check(const struct fmt_ckpt_delta *h,
			    const uint8_t *payload, size_t len)
{
	struct fmt_cursor c;
	struct fmt_extent e;
	struct fmt_ckpt_obj o;
	uint64_t id, size;
	uint32_t nr;

	if (!h || !payload || len < h->payload_len)
		return -EIO;
	fmt_cursor_init_ro(&c, payload, (size_t)h->payload_len);
	/* Bounded: n_records <= payload_len / 9 (header check), every
	 * record consumes at least 9 bytes, every range 20, every extent
	 * 48. */
	for (uint32_t i = 0; i < h->n_records; i++) {
		switch (fmt_delta_get_kind(&c)) {
		case FMT_DREC_OBJ:
			if (fmt_ckpt_get_obj(&c, &o) < 0)
				return -EIO;
			for (uint32_t j = 0; j < o.n_extents; j++)
				if (fmt_cursor_get_extent(&c, &e) < 0)
					return -EIO;
			break;
		case FMT_DREC_RANGES:
			if (fmt_delta_get_ranges(&c, &id, &size, &nr) < 0)
				return -EIO;
			for (uint32_t k = 0; k < nr; k++)
				if (delta_range_check(&c, &e) < 0)
					return -EIO;
			break;
		case FMT_DREC_GONE:
			if (fmt_delta_get_gone(&c, &id) < 0)
				return -EIO;
			break;
		default:
			return -EIO;
		}
	}
	return c.pos == c.len ? 0 : -EIO;
}

/* ---- a chain of deltas ---- */

int fmt_delta_chain_walk(const struct fmt_super *sb, const uint8_t *buf,
			 uint64_t len, fmt_delta_fn fn, void *arg,
			 uint64_t *end, uint64_t *last)
{
	uint64_t pos = 0, prev = sb->ckpt_csum;
	uint32_t i;

	for (i = 0; i < sb->delta_count; i++) {
		struct fmt_ckpt_delta h;
		const uint8_t *pl;
		int rc;

		if (len - pos < FMT_DELTA_HDR ||
		    fmt_delta_decode(&h, buf + pos, len - pos) < 0 ||
		    h.store_id != fmt_super_store_id(sb) ||
		    h.base_seq != sb->ckpt_seq || h.index != i + 1 ||
		    h.prev_csum != prev ||
		    h.payload_len > len - pos - FMT_DELTA_HDR ||
		    COIL_ALIGN_UP(FMT_DELTA_HDR + h.payload_len, FMT_BLOCK) >
			    len - pos ||
		    h.replay_off >= sb->journal_len)
			break;
		pl = buf + pos + FMT_DELTA_HDR;
		/* the padding to the block is zero: no byte goes unchecked */
		if (fmt_csum(pl, h.payload_len) != h.payload_csum ||
		    !fmt_all_zero(pl + h.payload_len,
				  COIL_ALIGN_UP(FMT_DELTA_HDR + h.payload_len,
						FMT_BLOCK) -
					  FMT_DELTA_HDR - h.payload_len) ||
		    fmt_delta_payload_check(&h, pl, h.payload_len) < 0)
			break;
		if (fn) {
			rc = fn(arg, &h, pl);
			if (rc < 0)
				return rc;
		}
		prev = h.csum;
		pos += COIL_ALIGN_UP(FMT_DELTA_HDR + h.payload_len, FMT_BLOCK);
	}
	*end = pos;
	*last = prev;
	return (int)i;
}

int fmt_delta_chain_whole(const struct fmt_super *sb, const uint8_t *buf)
{
	uint64_t end, last;
	int n;

	if (sb->delta_count == 0)
		return sb->delta_bytes == 0;
	n = fmt_delta_chain_walk(sb, buf, sb->delta_bytes, NULL, NULL, &end,
				 &last);
	return n == (int)sb->delta_count && end == sb->delta_bytes &&
	       last == sb->delta_csum;
}
