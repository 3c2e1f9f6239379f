/* format/super.c — the superblock (two copies, newer valid wins), the store
 * geometry chosen at create, and the segment header. */
#include "format/format_internal.h"

_Static_assert(FMT_SUPER_CSUM_OFF + 8 == FMT_SUPER_SIZE, "superblock is one BLOCK");
_Static_assert(FMT_SEGHDR_SIZE == 40, "segment header is 40 bytes");
_Static_assert(FMT_CSUMS_MAX == 256, "1 MiB blob / 4 KiB sectors");

static const uint8_t super_magic[8] = { 'C', 'O', 'I', 'L', 'S', 'U', 'P', 'R' };
static const uint8_t seg_magic[4] = { 'C', 'S', 'E', 'G' };

static int is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int blob_size_ok(uint32_t max_blob)
{
	return is_pow2(max_blob) && max_blob >= FMT_BLOCK && max_blob <= FMT_BLOB_MAX;
}

/* [off, off + len) lies inside [0, size): no wrap, no overrun. */
static int area_inside(uint64_t off, uint64_t len, uint64_t size)
{
	uint64_t end;
	return !coil_add_overflows(off, len, &end) && end <= size;
}

static int areas_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

/* Every rule docs/format.md states for a superblock's fields; shared by the
 * encoder (so coil never writes what it could not read back) and the decoder.
 * Returns 1 when consistent. */
static int super_valid(const struct fmt_super *sb)
{
	if (sb->block_size != FMT_BLOCK)
		return 0;
	if (sb->version == FMT_SUPER_VERSION_V1) {
		if (sb->compat || sb->incompat)
			return 0; /* version 1 has no feature words */
	} else if (sb->version != FMT_SUPER_VERSION ||
		   (sb->incompat & ~FMT_INCOMPAT_KNOWN)) {
		return 0;
	}
	if (sb->flags & ~(FMT_SUPER_CLEAN | FMT_SUPER_FILLED))
		return 0;
	if (!blob_size_ok(sb->max_blob))
		return 0;
	/* A segment holds its header BLOCK plus at least one whole max_blob;
	 * with both powers of two that means segment_size >= 2 * max_blob. */
	if (!is_pow2(sb->segment_size) || sb->segment_size < FMT_BLOCK ||
	    sb->segment_size < 2ull * sb->max_blob)
		return 0;
	if (sb->segment_count < 2)
		return 0;

	if (sb->journal_off != FMT_JOURNAL_OFF)
		return 0;
	uint64_t offs[4] = { sb->journal_off, sb->ckpt_off[0], sb->ckpt_off[1], sb->data_off };
	uint64_t lens[4] = { sb->journal_len, sb->ckpt_len, sb->ckpt_len,
			     (uint64_t)sb->segment_count * sb->segment_size };
	for (int i = 0; i < 4; i++) {
		if (offs[i] % FMT_BLOCK || lens[i] % FMT_BLOCK || lens[i] == 0)
			return 0;
		if (offs[i] < FMT_JOURNAL_OFF || !area_inside(offs[i], lens[i], sb->store_size))
			return 0;
		for (int j = 0; j < i; j++)
			if (areas_overlap(offs[i], lens[i], offs[j], lens[j]))
				return 0;
	}
	if (sb->data_off % sb->segment_size)
		return 0;

	if (sb->ckpt_slot != 0 && sb->ckpt_slot != 1 && sb->ckpt_slot != FMT_CKPT_SLOT_NONE)
		return 0;
	if (sb->ckpt_slot != FMT_CKPT_SLOT_NONE &&
	    (sb->ckpt_bytes < FMT_BLOCK || sb->ckpt_bytes > sb->ckpt_len))
		return 0;
	/* Chunks start on sectors only in stores that say so. */
	if (sb->replay_off % ((sb->incompat & FMT_INCOMPAT_JSECT) ? FMT_JSECT :
								  FMT_BLOCK) ||
	    sb->replay_off >= sb->journal_len)
		return 0;
	/* Deltas: named exactly while the bit says so, BLOCK multiples of
	 * at least a BLOCK each, inside the area after the base. */
	if (!(sb->incompat & FMT_INCOMPAT_CKPT_DELTA))
		return !sb->delta_bytes && !sb->delta_count && !sb->delta_csum;
	if (sb->delta_count == 0 || sb->ckpt_slot == FMT_CKPT_SLOT_NONE ||
	    sb->delta_bytes % FMT_BLOCK ||
	    sb->delta_bytes / FMT_BLOCK < sb->delta_count)
		return 0;
	return COIL_ALIGN_UP(sb->ckpt_bytes, FMT_BLOCK) + sb->delta_bytes <=
	       sb->ckpt_len;
}

int fmt_super_encode(const struct fmt_super *sb, uint8_t *buf, size_t len)
{
	if (!sb || !buf || len < FMT_SUPER_SIZE || !super_valid(sb))
		return -EINVAL;
	memset(buf, 0, FMT_SUPER_SIZE);
	memcpy(buf, super_magic, 8);
	coil_put_le32(buf + 8, sb->version);
	coil_put_le32(buf + 12, sb->block_size);
	memcpy(buf + 16, sb->uuid, 16);
	coil_put_le64(buf + 32, sb->seq);
	coil_put_le64(buf + 40, sb->store_size);
	coil_put_le64(buf + 48, sb->journal_off);
	coil_put_le64(buf + 56, sb->journal_len);
	coil_put_le64(buf + 64, sb->ckpt_off[0]);
	coil_put_le64(buf + 72, sb->ckpt_off[1]);
	coil_put_le64(buf + 80, sb->ckpt_len);
	coil_put_le64(buf + 88, sb->data_off);
	coil_put_le32(buf + 96, sb->segment_size);
	coil_put_le32(buf + 100, sb->segment_count);
	coil_put_le32(buf + 104, sb->max_blob);
	coil_put_le32(buf + 108, sb->flags);
	coil_put_le32(buf + 112, sb->ckpt_slot);
	coil_put_le64(buf + 120, sb->ckpt_seq);
	coil_put_le64(buf + 128, sb->ckpt_bytes);
	coil_put_le64(buf + 136, sb->ckpt_csum);
	coil_put_le64(buf + 144, sb->replay_off);
	coil_put_le64(buf + 152, sb->replay_seq);
	if (sb->version >= FMT_SUPER_VERSION) {
		coil_put_le64(buf + 160, sb->compat);
		coil_put_le64(buf + 168, sb->incompat);
		coil_put_le64(buf + 176, sb->delta_bytes);
		coil_put_le32(buf + 184, sb->delta_count);
		coil_put_le64(buf + 192, sb->delta_csum);
	}
	coil_put_le64(buf + FMT_SUPER_CSUM_OFF, fmt_csum(buf, FMT_SUPER_CSUM_OFF));
	return FMT_SUPER_SIZE;
}

int fmt_super_decode(struct fmt_super *sb, const uint8_t *buf, size_t len)
{
	if (!sb || !buf || len < FMT_SUPER_SIZE)
		return -EINVAL;
	if (memcmp(buf, super_magic, 8))
		return -EIO;
	if (coil_get_le64(buf + FMT_SUPER_CSUM_OFF) != fmt_csum(buf, FMT_SUPER_CSUM_OFF))
		return -EIO;
	struct fmt_super s;
	s.version = coil_get_le32(buf + 8);
	s.compat = s.incompat = 0;
	s.delta_bytes = s.delta_csum = 0;
	s.delta_count = 0;
	/* The version and the incompat word come first: a later format is
	 * refused as such, not as damage, and nothing else of it is read. */
	if (s.version > FMT_SUPER_VERSION)
		return -FMT_EFEATURE;
	size_t zero_from = 160;
	if (s.version >= FMT_SUPER_VERSION) {
		s.compat = coil_get_le64(buf + 160);
		s.incompat = coil_get_le64(buf + 168);
		if (s.incompat & ~FMT_INCOMPAT_KNOWN)
			return -FMT_EFEATURE;
		zero_from = 176;
		if (s.incompat & FMT_INCOMPAT_CKPT_DELTA) {
			s.delta_bytes = coil_get_le64(buf + 176);
			s.delta_count = coil_get_le32(buf + 184);
			s.delta_csum = coil_get_le64(buf + 192);
			if (!fmt_all_zero(buf + 188, 4))
				return -EIO;
			zero_from = 200;
		}
	}
	if (!fmt_all_zero(buf + 116, 4) ||
	    !fmt_all_zero(buf + zero_from, FMT_SUPER_CSUM_OFF - zero_from))
		return -EIO;
	s.block_size = coil_get_le32(buf + 12);
	memcpy(s.uuid, buf + 16, 16);
	s.seq = coil_get_le64(buf + 32);
	s.store_size = coil_get_le64(buf + 40);
	s.journal_off = coil_get_le64(buf + 48);
	s.journal_len = coil_get_le64(buf + 56);
	s.ckpt_off[0] = coil_get_le64(buf + 64);
	s.ckpt_off[1] = coil_get_le64(buf + 72);
	s.ckpt_len = coil_get_le64(buf + 80);
	s.data_off = coil_get_le64(buf + 88);
	s.segment_size = coil_get_le32(buf + 96);
	s.segment_count = coil_get_le32(buf + 100);
	s.max_blob = coil_get_le32(buf + 104);
	s.flags = coil_get_le32(buf + 108);
	s.ckpt_slot = coil_get_le32(buf + 112);
	s.ckpt_seq = coil_get_le64(buf + 120);
	s.ckpt_bytes = coil_get_le64(buf + 128);
	s.ckpt_csum = coil_get_le64(buf + 136);
	s.replay_off = coil_get_le64(buf + 144);
	s.replay_seq = coil_get_le64(buf + 152);
	if (!super_valid(&s))
		return -EIO;
	*sb = s;
	return 0;
}

int fmt_super_has_magic(const uint8_t *buf, size_t len)
{
	return buf && len >= sizeof(super_magic) &&
	       !memcmp(buf, super_magic, sizeof(super_magic));
}

static uint64_t clamp_blocks(uint64_t v, uint64_t lo, uint64_t hi)
{
	v = COIL_ALIGN_DOWN(v, FMT_BLOCK);
	return v < lo ? lo : v > hi ? hi : v;
}

int fmt_super_layout(uint64_t store_size, uint32_t max_blob, struct fmt_super *sb)
{
	const uint64_t mib = 1ull << 20;

	if (!sb || !blob_size_ok(max_blob))
		return -EINVAL;
	memset(sb, 0, sizeof(*sb));
	sb->version = FMT_SUPER_VERSION;
	sb->block_size = FMT_BLOCK;
	sb->store_size = store_size;
	sb->max_blob = max_blob;
	sb->ckpt_slot = FMT_CKPT_SLOT_NONE;

	uint64_t seg = store_size < (4ull << 30) ? mib : 4 * mib;
	if (seg < 2ull * max_blob)
		seg = 2ull * max_blob;
	sb->segment_size = (uint32_t)seg;
	sb->journal_off = FMT_JOURNAL_OFF;
	sb->journal_len = clamp_blocks(store_size / 16, mib, 128 * mib);
	sb->ckpt_len = clamp_blocks(store_size / 32, mib, 512 * mib);
	sb->ckpt_off[0] = sb->journal_off + sb->journal_len;
	sb->ckpt_off[1] = sb->ckpt_off[0] + sb->ckpt_len;
	sb->data_off = COIL_ALIGN_UP(sb->ckpt_off[1] + sb->ckpt_len, seg);
	if (store_size <= sb->data_off || (store_size - sb->data_off) / seg < 2)
		return -ENOSPC;
	uint64_t count = (store_size - sb->data_off) / seg;
	sb->segment_count = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
	COIL_ASSERT(super_valid(sb));
	return 0;
}

int fmt_super_pick(const struct fmt_super *a, int a_rc, const struct fmt_super *b, int b_rc)
{
	if (a_rc < 0 && b_rc < 0)
		return -EIO;
	if (b_rc < 0)
		return 0;
	if (a_rc < 0)
		return 1;
	if (memcmp(a->uuid, b->uuid, sizeof(a->uuid)))
		return -EIO;
	return b->seq > a->seq ? 1 : 0;
}

uint32_t fmt_super_seg_capacity(const struct fmt_super *sb)
{
	uint64_t n;

	if (!sb || !sb->segment_size || sb->store_size <= sb->data_off)
		return 0;
	n = (sb->store_size - sb->data_off) / sb->segment_size;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* ---- segment header ---- */

int fmt_seghdr_encode(const struct fmt_seghdr *h, uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_BLOCK)
		return -EINVAL;
	memset(buf, 0, FMT_BLOCK);
	memcpy(buf, seg_magic, 4);
	coil_put_le16(buf + 4, FMT_VERSION);
	coil_put_le64(buf + 8, h->store_id);
	coil_put_le32(buf + 16, h->index);
	coil_put_le64(buf + 24, h->open_seq);
	coil_put_le64(buf + 32, fmt_csum(buf, 32));
	return FMT_BLOCK;
}

int fmt_seghdr_decode(struct fmt_seghdr *h, const uint8_t *buf, size_t len)
{
	if (!h || !buf || len < FMT_SEGHDR_SIZE)
		return -EINVAL;
	if (memcmp(buf, seg_magic, 4) || coil_get_le16(buf + 4) != FMT_VERSION)
		return -EIO;
	if (coil_get_le64(buf + 32) != fmt_csum(buf, 32))
		return -EIO;
	if (!fmt_all_zero(buf + 6, 2) || !fmt_all_zero(buf + 20, 4))
		return -EIO;
	h->store_id = coil_get_le64(buf + 8);
	h->index = coil_get_le32(buf + 16);
	h->open_seq = coil_get_le64(buf + 24);
	return 0;
}
