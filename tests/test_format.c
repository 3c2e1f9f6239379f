/* test_format.c — superblock, segment header, extent record, checkpoint and
 * the cursor: round trips, every field corrupted in turn, every truncation. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "format/format.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static uint8_t block[FMT_BLOCK];

/* ---- cursor ---- */

Test(format_cursor, round_trip_and_sticky_errors)
{
	uint8_t buf[15];
	struct fmt_cursor c;
	fmt_cursor_init(&c, buf, sizeof(buf));
	fmt_cursor_put_u8(&c, 0xab);
	fmt_cursor_put_u16(&c, 0x1234);
	fmt_cursor_put_u32(&c, 0xdeadbeef);
	fmt_cursor_put_u64(&c, 0x0102030405060708ull);
	cr_assert_eq(c.err, 0);
	cr_assert_eq(c.pos, 15);
	fmt_cursor_put_u8(&c, 1);
	cr_assert_eq(c.err, -ENOSPC);
	cr_assert_eq(c.pos, 15);
	/* little-endian on disk */
	cr_assert_eq(buf[1], 0x34);
	cr_assert_eq(buf[2], 0x12);
	cr_assert_eq(buf[7], 0x08);

	fmt_cursor_init_ro(&c, buf, sizeof(buf));
	cr_assert_eq(fmt_cursor_get_u8(&c), 0xab);
	cr_assert_eq(fmt_cursor_get_u16(&c), 0x1234);
	cr_assert_eq(fmt_cursor_get_u32(&c), 0xdeadbeef);
	cr_assert_eq(fmt_cursor_get_u64(&c), 0x0102030405060708ull);
	cr_assert_eq(fmt_cursor_remaining(&c), 0);
	cr_assert_eq(fmt_cursor_get_u8(&c), 0);
	cr_assert_eq(c.err, -EIO);
	/* sticky: nothing more happens, even a get that would fit */
	fmt_cursor_rewind(&c, 0);
	cr_assert_eq(c.err, 0);
	cr_assert_eq(fmt_cursor_get_u8(&c), 0xab);
	c.err = -EIO;
	cr_assert_eq(fmt_cursor_get_u8(&c), 0);
	cr_assert_eq(c.pos, 1);
}

/* ---- superblock ---- */

static void super_sample(struct fmt_super *sb, uint64_t size)
{
	cr_assert_eq(fmt_super_layout(size, 65536, sb), 0);
	for (int i = 0; i < 16; i++)
		sb->uuid[i] = (uint8_t)(0x11 * (i + 1));
	sb->seq = 42;
	sb->flags = FMT_SUPER_CLEAN;
	sb->ckpt_slot = 1;
	sb->ckpt_seq = 7;
	sb->ckpt_bytes = 3 * FMT_BLOCK;
	sb->ckpt_csum = 0x1234567890abcdefull;
	sb->replay_off = 5 * FMT_BLOCK;
	sb->replay_seq = 99;
}

static void super_assert_eq(const struct fmt_super *a, const struct fmt_super *b)
{
	cr_assert_eq(a->version, b->version);
	cr_assert_eq(a->block_size, b->block_size);
	cr_assert_arr_eq(a->uuid, b->uuid, 16);
	cr_assert_eq(a->seq, b->seq);
	cr_assert_eq(a->store_size, b->store_size);
	cr_assert_eq(a->journal_off, b->journal_off);
	cr_assert_eq(a->journal_len, b->journal_len);
	cr_assert_eq(a->ckpt_off[0], b->ckpt_off[0]);
	cr_assert_eq(a->ckpt_off[1], b->ckpt_off[1]);
	cr_assert_eq(a->ckpt_len, b->ckpt_len);
	cr_assert_eq(a->data_off, b->data_off);
	cr_assert_eq(a->compat, b->compat);
	cr_assert_eq(a->incompat, b->incompat);
	cr_assert_eq(a->segment_size, b->segment_size);
	cr_assert_eq(a->segment_count, b->segment_count);
	cr_assert_eq(a->max_blob, b->max_blob);
	cr_assert_eq(a->flags, b->flags);
	cr_assert_eq(a->ckpt_slot, b->ckpt_slot);
	cr_assert_eq(a->ckpt_seq, b->ckpt_seq);
	cr_assert_eq(a->ckpt_bytes, b->ckpt_bytes);
	cr_assert_eq(a->ckpt_csum, b->ckpt_csum);
	cr_assert_eq(a->replay_off, b->replay_off);
	cr_assert_eq(a->replay_seq, b->replay_seq);
}

Test(format_super, layout_follows_the_doc)
{
	struct fmt_super sb;
	cr_assert_eq(fmt_super_layout(64 * MiB, 65536, &sb), 0);
	cr_assert_eq(sb.journal_off, 2 * FMT_BLOCK);
	cr_assert_eq(sb.journal_len, 4 * MiB);          /* size / 16 */
	cr_assert_eq(sb.ckpt_len, 2 * MiB);             /* size / 32 */
	cr_assert_eq(sb.ckpt_off[0], sb.journal_off + sb.journal_len);
	cr_assert_eq(sb.ckpt_off[1], sb.ckpt_off[0] + sb.ckpt_len);
	cr_assert_eq(sb.segment_size, MiB);
	cr_assert_eq(sb.data_off % sb.segment_size, 0);
	cr_assert_geq(sb.data_off, sb.ckpt_off[1] + sb.ckpt_len);
	cr_assert_eq(sb.segment_count, (64 * MiB - sb.data_off) / MiB);
	cr_assert_eq(sb.ckpt_slot, FMT_CKPT_SLOT_NONE);

	/* clamps */
	cr_assert_eq(fmt_super_layout(8 * MiB, 4096, &sb), 0);
	cr_assert_eq(sb.journal_len, MiB);
	cr_assert_eq(sb.ckpt_len, MiB);
	cr_assert_eq(fmt_super_layout(64 * GiB, 65536, &sb), 0);
	cr_assert_eq(sb.journal_len, 128 * MiB);
	cr_assert_eq(sb.ckpt_len, 512 * MiB);
	cr_assert_eq(sb.segment_size, 4 * MiB);
	cr_assert_eq(fmt_super_layout(4 * GiB - 1, 65536, &sb), 0);
	cr_assert_eq(sb.segment_size, MiB);
	/* a segment holds its header block plus a whole max_blob */
	cr_assert_eq(fmt_super_layout(64 * MiB, FMT_BLOB_MAX, &sb), 0);
	cr_assert_eq(sb.segment_size, 2 * MiB);

	/* every layout decodes */
	uint64_t sizes[] = { 6 * MiB, 7 * MiB + 4095, 100 * MiB, 3 * GiB, 5 * GiB, 1ull << 40, 1ull << 50, UINT64_MAX };
	for (size_t i = 0; i < COIL_ARRAY_LEN(sizes); i++) {
		struct fmt_super d;
		cr_assert_eq(fmt_super_layout(sizes[i], 65536, &sb), 0, "size %llu",
			     (unsigned long long)sizes[i]);
		cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
		cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
		super_assert_eq(&sb, &d);
	}
}

Test(format_super, layout_rejects)
{
	struct fmt_super sb;
	cr_assert_eq(fmt_super_layout(5 * MiB, 65536, &sb), -ENOSPC);
	cr_assert_eq(fmt_super_layout(0, 65536, &sb), -ENOSPC);
	cr_assert_eq(fmt_super_layout(6 * MiB, 65536, &sb), 0);
	cr_assert_eq(sb.segment_count, 2);
	cr_assert_eq(fmt_super_layout(6 * MiB - 1, 65536, &sb), -ENOSPC);
	uint32_t bad[] = { 0, 1, 2048, 4095, 4097, 65535, 2 * FMT_BLOB_MAX, 3 << 12 };
	for (size_t i = 0; i < COIL_ARRAY_LEN(bad); i++)
		cr_assert_eq(fmt_super_layout(GiB, bad[i], &sb), -EINVAL);
}

Test(format_super, round_trip)
{
	struct fmt_super sb, d;
	super_sample(&sb, GiB);
	memset(block, 0xee, sizeof(block));
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	cr_assert_eq(memcmp(block, "COILSUPR", 8), 0);
	for (unsigned i = 160; i < FMT_SUPER_CSUM_OFF; i++)
		cr_assert_eq(block[i], 0);
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
	super_assert_eq(&sb, &d);
	cr_assert_eq(fmt_super_store_id(&d), coil_get_le64(sb.uuid));
	/* a longer buffer is fine */
	static uint8_t big[2 * FMT_BLOCK];
	memcpy(big, block, FMT_BLOCK);
	cr_assert_eq(fmt_super_decode(&d, big, sizeof(big)), 0);
}

Test(format_super, every_byte_flipped_is_rejected)
{
	struct fmt_super sb, d;
	super_sample(&sb, GiB);
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	for (unsigned i = 0; i < FMT_BLOCK; i++) {
		for (unsigned bit = 0; bit < 8; bit += 3) {
			block[i] ^= (uint8_t)(1u << bit);
			cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), -EIO,
				     "byte %u bit %u", i, bit);
			block[i] ^= (uint8_t)(1u << bit);
		}
	}
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
}

Test(format_super, truncated_at_every_length)
{
	struct fmt_super sb, d;
	super_sample(&sb, GiB);
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	for (size_t len = 0; len < FMT_BLOCK; len++)
		cr_assert_eq(fmt_super_decode(&d, block, len), -EINVAL, "len %zu", len);
	cr_assert_eq(fmt_super_encode(&sb, block, FMT_BLOCK - 1), -EINVAL);
}

/* Rewrite one field with a valid checksum: the semantic checks alone must
 * reject it, and the encoder must refuse to write it. */
static void super_field_rejected(void (*mut)(struct fmt_super *), const char *what)
{
	struct fmt_super sb, d;
	super_sample(&sb, GiB);
	mut(&sb);
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), -EINVAL, "encode %s", what);
	/* force it onto "disk" anyway: encode a valid one, patch, re-checksum */
	struct fmt_super ok;
	super_sample(&ok, GiB);
	cr_assert_eq(fmt_super_encode(&ok, block, sizeof(block)), FMT_BLOCK);
	coil_put_le32(block + 8, sb.version);
	if (sb.version == FMT_SUPER_VERSION_V1)
		coil_put_le64(block + 168, sb.incompat); /* in v1's zero area */
	coil_put_le32(block + 12, sb.block_size);
	coil_put_le64(block + 40, sb.store_size);
	coil_put_le64(block + 48, sb.journal_off);
	coil_put_le64(block + 56, sb.journal_len);
	coil_put_le64(block + 64, sb.ckpt_off[0]);
	coil_put_le64(block + 72, sb.ckpt_off[1]);
	coil_put_le64(block + 80, sb.ckpt_len);
	coil_put_le64(block + 88, sb.data_off);
	coil_put_le32(block + 96, sb.segment_size);
	coil_put_le32(block + 100, sb.segment_count);
	coil_put_le32(block + 104, sb.max_blob);
	coil_put_le32(block + 108, sb.flags);
	coil_put_le32(block + 112, sb.ckpt_slot);
	coil_put_le64(block + 128, sb.ckpt_bytes);
	coil_put_le64(block + 144, sb.replay_off);
	coil_put_le64(block + FMT_SUPER_CSUM_OFF, fmt_csum(block, FMT_SUPER_CSUM_OFF));
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), -EIO, "decode %s", what);
}

#define MUT(name, body) static void name(struct fmt_super *s) { body; }
MUT(m_version, s->version = 1; s->incompat = FMT_INCOMPAT_GROW)
MUT(m_version0, s->version = 0)
MUT(m_block, s->block_size = 512)
MUT(m_flags, s->flags = 4)
MUT(m_maxblob_np2, s->max_blob = 65536 + 4096)
MUT(m_maxblob_small, s->max_blob = 2048)
MUT(m_maxblob_big, s->max_blob = 2 * FMT_BLOB_MAX)
MUT(m_seg_np2, s->segment_size = 3 * MiB)
MUT(m_seg_small, s->segment_size = 2048)
MUT(m_seg_vs_blob, s->segment_size = 65536; s->max_blob = 65536)
MUT(m_seg_count0, s->segment_count = 0)
MUT(m_seg_count1, s->segment_count = 1)
MUT(m_data_past_end, s->segment_count += 1)
MUT(m_data_huge, s->segment_count = UINT32_MAX)
MUT(m_data_unaligned, s->data_off += FMT_BLOCK)
MUT(m_data_overlaps, s->data_off = s->ckpt_off[1])
MUT(m_journal_off, s->journal_off = 3 * FMT_BLOCK)
MUT(m_journal_len0, s->journal_len = 0)
MUT(m_journal_unaligned, s->journal_len += 512)
MUT(m_journal_overlaps, s->journal_len += FMT_BLOCK)
MUT(m_ckpt_overlap, s->ckpt_off[1] = s->ckpt_off[0])
MUT(m_ckpt_in_super, s->ckpt_off[0] = 0)
MUT(m_ckpt_unaligned, s->ckpt_off[1] += 8)
MUT(m_ckpt_len0, s->ckpt_len = 0)
MUT(m_ckpt_wrap, s->ckpt_off[1] = UINT64_MAX - FMT_BLOCK + 1)
MUT(m_store_small, s->store_size = s->data_off)
MUT(m_slot, s->ckpt_slot = 2)
MUT(m_ckpt_bytes0, s->ckpt_bytes = 0)
MUT(m_ckpt_bytes_big, s->ckpt_bytes = s->ckpt_len + 1)
MUT(m_replay_unaligned, s->replay_off = 100)
MUT(m_replay_past, s->replay_off = s->journal_len)

Test(format_super, each_field_checked_semantically)
{
	struct { void (*f)(struct fmt_super *); const char *n; } m[] = {
		{ m_version, "version" }, { m_version0, "version0" }, { m_block, "block_size" },
		{ m_flags, "flags" }, { m_maxblob_np2, "max_blob np2" },
		{ m_maxblob_small, "max_blob small" }, { m_maxblob_big, "max_blob big" },
		{ m_seg_np2, "segment np2" }, { m_seg_small, "segment small" },
		{ m_seg_vs_blob, "segment vs blob" }, { m_seg_count0, "count 0" },
		{ m_seg_count1, "count 1" }, { m_data_past_end, "data past end" },
		{ m_data_huge, "data huge" }, { m_data_unaligned, "data unaligned" },
		{ m_data_overlaps, "data overlaps" }, { m_journal_off, "journal_off" },
		{ m_journal_len0, "journal_len 0" }, { m_journal_unaligned, "journal unaligned" },
		{ m_journal_overlaps, "journal overlaps" }, { m_ckpt_overlap, "ckpt overlap" },
		{ m_ckpt_in_super, "ckpt in super" }, { m_ckpt_unaligned, "ckpt unaligned" },
		{ m_ckpt_len0, "ckpt_len 0" }, { m_ckpt_wrap, "ckpt wrap" },
		{ m_store_small, "store small" }, { m_slot, "slot" },
		{ m_ckpt_bytes0, "ckpt_bytes 0" }, { m_ckpt_bytes_big, "ckpt_bytes big" },
		{ m_replay_unaligned, "replay unaligned" }, { m_replay_past, "replay past" },
	};
	for (size_t i = 0; i < COIL_ARRAY_LEN(m); i++)
		super_field_rejected(m[i].f, m[i].n);
}

/* Re-checksum a patched superblock block. */
static void super_reseal(void)
{
	coil_put_le64(block + FMT_SUPER_CSUM_OFF, fmt_csum(block, FMT_SUPER_CSUM_OFF));
}

/* The feature words: an unknown incompat bit or a later version is refused
 * as such (-FMT_EFEATURE), and only when the checksum holds; unknown compat
 * bits decode and re-encode unchanged; version 1 has no feature words. */
Test(format_super, feature_words)
{
	struct fmt_super sb, d;

	super_sample(&sb, GiB);
	cr_assert_eq(sb.version, FMT_SUPER_VERSION);
	sb.incompat = FMT_INCOMPAT_GROW;
	sb.segment_count = 3;
	sb.compat = 1ull << 40; /* unknown here: kept */
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
	cr_assert_eq(d.compat, 1ull << 40);
	cr_assert_eq(d.incompat, FMT_INCOMPAT_GROW);
	cr_assert_eq(coil_get_le64(block + 168), FMT_INCOMPAT_GROW);

	/* an incompat bit this code does not know: every bit outside the
	 * known set, so a new feature bit cannot slip past this check */
	for (int bit = 0; bit < 64; bit++) {
		if (FMT_INCOMPAT_KNOWN & (1ull << bit))
			continue;
		cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
		coil_put_le64(block + 168, FMT_INCOMPAT_GROW | (1ull << bit));
		super_reseal();
		cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)),
			     -FMT_EFEATURE, "bit %d", bit);
		/* the same bytes with a bad checksum are damage, not a feature */
		block[FMT_SUPER_CSUM_OFF] ^= 1;
		cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), -EIO);
	}
	d = sb;
	d.incompat |= 1ull << 9;
	cr_assert(!(FMT_INCOMPAT_KNOWN & (1ull << 9)));
	cr_assert_eq(fmt_super_encode(&d, block, sizeof(block)), -EINVAL);

	/* a later version, whatever its fields */
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	coil_put_le32(block + 8, FMT_SUPER_VERSION + 1);
	memset(block + 300, 0xee, 64);
	super_reseal();
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), -FMT_EFEATURE);
	cr_assert_eq(-FMT_EFEATURE, -EPROTONOSUPPORT);

	/* version 1: a fixed store, no feature words */
	super_sample(&sb, GiB);
	sb.version = FMT_SUPER_VERSION_V1;
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	for (unsigned i = 160; i < FMT_SUPER_CSUM_OFF; i++)
		cr_assert_eq(block[i], 0, "v1 byte %u", i);
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
	cr_assert_eq(d.version, FMT_SUPER_VERSION_V1);
	cr_assert_eq(d.compat | d.incompat, 0);
	for (unsigned off = 160; off < 176; off += 8) {
		cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
		block[off] = 1;
		super_reseal();
		cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), -EIO,
			     "v1 byte %u", off);
	}
	sb.compat = 1;
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), -EINVAL);
}

/* A growing store's geometry: the capacity is what the maximum holds, the
 * count in use anything from 2 up to it. */
Test(format_super, growing_count_up_to_capacity)
{
	struct fmt_super sb, d;
	uint32_t cap;

	super_sample(&sb, GiB);
	cap = fmt_super_seg_capacity(&sb);
	cr_assert_eq(cap, sb.segment_count);
	cr_assert_eq(cap, (GiB - sb.data_off) / sb.segment_size);
	sb.incompat = FMT_INCOMPAT_GROW;
	for (uint32_t n = 2; n <= cap; n += cap / 7) {
		sb.segment_count = n;
		cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
		cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
		cr_assert_eq(d.segment_count, n);
	}
	sb.segment_count = cap + 1;
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), -EINVAL);
}

Test(format_super, no_checkpoint_yet_is_valid)
{
	struct fmt_super sb, d;
	super_sample(&sb, GiB);
	sb.ckpt_slot = FMT_CKPT_SLOT_NONE;
	sb.ckpt_bytes = 0;
	cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
	cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), 0);
	cr_assert_eq(d.ckpt_slot, FMT_CKPT_SLOT_NONE);
}

Test(format_super, pick_newer_valid_copy)
{
	struct fmt_super a, b;
	super_sample(&a, GiB);
	super_sample(&b, GiB);
	a.seq = 10;
	b.seq = 11;
	cr_assert_eq(fmt_super_pick(&a, 0, &b, 0), 1);
	cr_assert_eq(fmt_super_pick(&b, 0, &a, 0), 0);
	cr_assert_eq(fmt_super_pick(&a, 0, &b, -EIO), 0);
	cr_assert_eq(fmt_super_pick(&a, -EIO, &b, 0), 1);
	cr_assert_eq(fmt_super_pick(&a, -EIO, &b, -EIO), -EIO);
	cr_assert_eq(fmt_super_pick(&a, -EINVAL, &b, -EIO), -EIO);
	b.seq = 10;
	cr_assert_eq(fmt_super_pick(&a, 0, &b, 0), 0);
	/* an interrupted create must not resurrect the old store's copy */
	b.seq = 1000;
	b.uuid[3] ^= 1;
	cr_assert_eq(fmt_super_pick(&a, 0, &b, 0), -EIO);
	cr_assert_eq(fmt_super_pick(&a, 0, &b, -EIO), 0);
}

Test(format_super, encode_and_decode_over_real_bytes_from_both_copies)
{
	/* the store's first two blocks as the engine would read them */
	static uint8_t dev[2 * FMT_BLOCK];
	struct fmt_super sb, a, b;
	super_sample(&sb, GiB);
	for (uint64_t seq = 1; seq <= 5; seq++) {
		sb.seq = seq;
		cr_assert_eq(fmt_super_encode(&sb, dev + (seq % 2) * FMT_BLOCK, FMT_BLOCK), FMT_BLOCK);
	}
	/* torn write of copy seq 6 (slot 0): the older copy wins */
	sb.seq = 6;
	cr_assert_eq(fmt_super_encode(&sb, dev, FMT_BLOCK), FMT_BLOCK);
	memset(dev + 2048, 0, 2048);
	int ra = fmt_super_decode(&a, dev, FMT_BLOCK);
	int rb = fmt_super_decode(&b, dev + FMT_BLOCK, FMT_BLOCK);
	cr_assert_eq(ra, -EIO);
	cr_assert_eq(rb, 0);
	cr_assert_eq(fmt_super_pick(&a, ra, &b, rb), 1);
	cr_assert_eq(b.seq, 5);
}

/* ---- segment header ---- */

Test(format_seghdr, round_trip_flips_truncation)
{
	struct fmt_seghdr h = { .store_id = 0xfeedfacecafebeefull, .index = 77, .open_seq = 1234 }, d;
	memset(block, 0xee, sizeof(block));
	cr_assert_eq(fmt_seghdr_encode(&h, block, sizeof(block)), FMT_BLOCK);
	cr_assert_eq(memcmp(block, "CSEG", 4), 0);
	for (unsigned i = FMT_SEGHDR_SIZE; i < FMT_BLOCK; i++)
		cr_assert_eq(block[i], 0);
	cr_assert_eq(fmt_seghdr_decode(&d, block, sizeof(block)), 0);
	cr_assert_eq(d.store_id, h.store_id);
	cr_assert_eq(d.index, h.index);
	cr_assert_eq(d.open_seq, h.open_seq);
	cr_assert_eq(fmt_seghdr_decode(&d, block, FMT_SEGHDR_SIZE), 0);
	for (size_t len = 0; len < FMT_SEGHDR_SIZE; len++)
		cr_assert_eq(fmt_seghdr_decode(&d, block, len), -EINVAL);
	for (unsigned i = 0; i < FMT_SEGHDR_SIZE; i++) {
		block[i] ^= 0x40;
		cr_assert_eq(fmt_seghdr_decode(&d, block, sizeof(block)), -EIO, "byte %u", i);
		block[i] ^= 0x40;
	}
	/* unknown version with a valid checksum */
	coil_put_le16(block + 4, 2);
	coil_put_le64(block + 32, fmt_csum(block, 32));
	cr_assert_eq(fmt_seghdr_decode(&d, block, sizeof(block)), -EIO);
	cr_assert_eq(fmt_seghdr_encode(&h, block, FMT_BLOCK - 1), -EINVAL);
}

/* ---- extent record ---- */

static void extent_raw(struct fmt_extent *e, uint32_t logical)
{
	memset(e, 0, sizeof(*e));
	e->obj_off = 1ull << 40;
	e->len = logical > 100 ? logical - 100 : logical;
	e->blob_skip = logical - e->len;
	e->blob.dev_off = 123 * FMT_BLOCK;
	e->blob.codec = FMT_CODEC_RAW;
	e->blob.stored_len = e->blob.logical_len = logical;
	e->blob.n_csums = (uint16_t)((logical + FMT_BLOCK - 1) / FMT_BLOCK);
	for (unsigned i = 0; i < e->blob.n_csums; i++)
		e->blob.csums[i] = 0x9e3779b97f4a7c15ull * (i + 1);
}

static void extent_zstd(struct fmt_extent *e)
{
	memset(e, 0, sizeof(*e));
	e->obj_off = 8192;
	e->len = 65536;
	e->blob.dev_off = 5 * MiB + 17;
	e->blob.codec = FMT_CODEC_ZSTD;
	e->blob.stored_len = 1000;
	e->blob.logical_len = 65536;
	e->blob.dict_id = 3;
	e->blob.n_csums = 2;
	e->blob.csums[0] = 111;
	e->blob.csums[1] = 222;
}

static void extent_assert_eq(const struct fmt_extent *a, const struct fmt_extent *b)
{
	cr_assert_eq(a->obj_off, b->obj_off);
	cr_assert_eq(a->len, b->len);
	cr_assert_eq(a->blob_skip, b->blob_skip);
	cr_assert_eq(a->blob.dev_off, b->blob.dev_off);
	cr_assert_eq(a->blob.stored_len, b->blob.stored_len);
	cr_assert_eq(a->blob.logical_len, b->blob.logical_len);
	cr_assert_eq(a->blob.codec, b->blob.codec);
	cr_assert_eq(a->blob.flags, b->blob.flags);
	cr_assert_eq(a->blob.n_csums, b->blob.n_csums);
	cr_assert_eq(a->blob.dict_id, b->blob.dict_id);
	cr_assert_arr_eq(a->blob.csums, b->blob.csums, 8u * a->blob.n_csums);
}

Test(format_extent, round_trip_raw_and_zstd)
{
	static uint8_t buf[FMT_EXTENT_MAX + 8];
	static struct fmt_extent e, d;
	uint32_t sizes[] = { 1, 100, 4095, 4096, 4097, 65536, 65537, FMT_BLOB_MAX };
	for (size_t i = 0; i < COIL_ARRAY_LEN(sizes); i++) {
		extent_raw(&e, sizes[i]);
		size_t n = fmt_extent_size(&e);
		cr_assert_eq(n, 40 + 8 * e.blob.n_csums);
		cr_assert_eq(fmt_extent_encode(&e, buf, sizeof(buf)), (int)n);
		cr_assert_eq(fmt_extent_decode(&d, buf, sizeof(buf)), (int)n);
		extent_assert_eq(&e, &d);
		cr_assert_eq(fmt_extent_encode(&e, buf, n - 1), -ENOSPC);
		/* truncated at every length */
		for (size_t len = 0; len < n; len++)
			cr_assert_eq(fmt_extent_decode(&d, buf, len), -EIO);
	}
	extent_zstd(&e);
	cr_assert_eq(fmt_extent_encode(&e, buf, sizeof(buf)), 56);
	cr_assert_eq(coil_get_le64(buf + 16), e.blob.dev_off);
	cr_assert_eq(buf[32], FMT_CODEC_ZSTD);
	cr_assert_eq(fmt_extent_decode(&d, buf, 56), 56);
	extent_assert_eq(&e, &d);
	for (size_t len = 0; len < 56; len++)
		cr_assert_eq(fmt_extent_decode(&d, buf, len), -EIO);
}

static void ex_len0(struct fmt_extent *e) { e->len = 0; }
static void ex_skip(struct fmt_extent *e) { e->blob_skip = e->blob.logical_len - e->len + 1; }
static void ex_skip_wrap(struct fmt_extent *e) { e->blob_skip = UINT32_MAX; }
static void ex_overflow(struct fmt_extent *e) { e->obj_off = UINT64_MAX - 10; }
static void ex_codec(struct fmt_extent *e) { e->blob.codec = 2; }
static void ex_flags(struct fmt_extent *e) { e->blob.flags = 1; }
static void ex_logical0(struct fmt_extent *e) { e->blob.logical_len = 0; }
static void ex_logical_big(struct fmt_extent *e) { e->blob.logical_len = FMT_BLOB_MAX + 1; }
static void ex_stored(struct fmt_extent *e)
{
	e->blob.stored_len = e->blob.codec == FMT_CODEC_RAW ? e->blob.logical_len - 1 : 0;
}
static void ex_stored_big(struct fmt_extent *e) { e->blob.stored_len = e->blob.logical_len + 1; }
static void ex_ncsums_up(struct fmt_extent *e) { e->blob.n_csums++; }
static void ex_ncsums_down(struct fmt_extent *e) { e->blob.n_csums--; }
static void ex_ncsums_max(struct fmt_extent *e) { e->blob.n_csums = FMT_CSUMS_MAX + 1; }
static void ex_dict_raw(struct fmt_extent *e) { if (e->blob.codec == FMT_CODEC_RAW) e->blob.dict_id = 9; else e->len = 0; }

Test(format_extent, every_inconsistency_rejected)
{
	static uint8_t buf[FMT_EXTENT_MAX + 16];
	static struct fmt_extent e, d;
	void (*mut[])(struct fmt_extent *) = {
		ex_len0, ex_skip, ex_skip_wrap, ex_overflow, ex_codec, ex_flags, ex_logical0,
		ex_logical_big, ex_stored, ex_stored_big, ex_ncsums_up, ex_ncsums_down,
		ex_ncsums_max, ex_dict_raw,
	};
	for (int kind = 0; kind < 2; kind++) {
		for (size_t i = 0; i < COIL_ARRAY_LEN(mut); i++) {
			if (kind == 0)
				extent_raw(&e, 3 * FMT_BLOCK + 5);
			else
				extent_zstd(&e);
			mut[i](&e);
			cr_assert_eq(fmt_extent_encode(&e, buf, sizeof(buf)), -EINVAL,
				     "kind %d mut %zu", kind, i);
			/* write the bad fields by hand, as a corrupt disk would */
			uint16_t n = e.blob.n_csums > FMT_CSUMS_MAX ? FMT_CSUMS_MAX : e.blob.n_csums;
			memset(buf, 0, sizeof(buf));
			coil_put_le64(buf, e.obj_off);
			coil_put_le32(buf + 8, e.len);
			coil_put_le32(buf + 12, e.blob_skip);
			coil_put_le32(buf + 24, e.blob.stored_len);
			coil_put_le32(buf + 28, e.blob.logical_len);
			buf[32] = e.blob.codec;
			buf[33] = e.blob.flags;
			coil_put_le16(buf + 34, e.blob.n_csums);
			coil_put_le32(buf + 36, e.blob.dict_id);
			(void)n;
			cr_assert_eq(fmt_extent_decode(&d, buf, sizeof(buf)), -EIO,
				     "kind %d mut %zu", kind, i);
		}
	}
	/* the cursor forms agree */
	struct fmt_cursor c;
	extent_raw(&e, 100);
	fmt_cursor_init(&c, buf, 47);
	cr_assert_eq(fmt_cursor_put_extent(&c, &e), -ENOSPC);
	fmt_cursor_init(&c, buf, sizeof(buf));
	cr_assert_eq(fmt_cursor_put_extent(&c, &e), 0);
	cr_assert_eq(c.pos, 48);
	e.len = 0;
	cr_assert_eq(fmt_cursor_put_extent(&c, &e), -EINVAL);
	cr_assert_eq(c.pos, 48);
	fmt_cursor_init_ro(&c, buf, 48);
	cr_assert_eq(fmt_cursor_get_extent(&c, &d), 0);
	cr_assert_eq(c.pos, 48);
	cr_assert_eq(fmt_cursor_get_extent(&c, &d), -EIO);
	cr_assert_eq(c.err, -EIO);
}

/* ---- checkpoint ---- */

/* Build a checkpoint payload: 3 segments, 2 objects (2 and 0 extents), 1 dict. */
static size_t ckpt_payload(uint8_t *buf, size_t cap, struct fmt_ckpt *h)
{
	static struct fmt_extent e1, e2;
	struct fmt_cursor c;
	fmt_cursor_init(&c, buf, cap);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(fmt_ckpt_put_seg(&c, 1000u * i, (uint8_t)i), 0);
	cr_assert_eq(fmt_ckpt_put_obj(&c, 1, 70000, "alpha", 5, 2), 0);
	extent_raw(&e1, 5000);
	extent_zstd(&e2);
	cr_assert_eq(fmt_cursor_put_extent(&c, &e1), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &e2), 0);
	cr_assert_eq(fmt_ckpt_put_obj(&c, 2, 0, "b/c", 3, 0), 0);
	cr_assert_eq(fmt_ckpt_put_dict(&c, 3, 2), 0);
	memset(h, 0, sizeof(*h));
	h->store_id = 0xabcdef;
	h->seq = 9;
	h->payload_len = c.pos;
	h->payload_csum = fmt_csum(buf, c.pos);
	h->replay_off = 8 * FMT_BLOCK;
	h->replay_seq = 77;
	h->next_obj_id = 3;
	h->n_objects = 2;
	h->segment_count = 3;
	h->n_dicts = 1;
	return c.pos;
}

Test(format_ckpt, header_round_trip_flips_truncation)
{
	static uint8_t payload[8192];
	struct fmt_ckpt h, d;
	ckpt_payload(payload, sizeof(payload), &h);
	memset(block, 0xee, sizeof(block));
	cr_assert_eq(fmt_ckpt_encode(&h, block, sizeof(block)), FMT_BLOCK);
	cr_assert_eq(memcmp(block, "CCKP", 4), 0);
	for (unsigned i = FMT_CKPT_HDR; i < FMT_BLOCK; i++)
		cr_assert_eq(block[i], 0);
	cr_assert_eq(fmt_ckpt_decode(&d, block, sizeof(block)), 0);
	cr_assert_eq(d.store_id, h.store_id);
	cr_assert_eq(d.seq, h.seq);
	cr_assert_eq(d.payload_len, h.payload_len);
	cr_assert_eq(d.payload_csum, h.payload_csum);
	cr_assert_eq(d.replay_off, h.replay_off);
	cr_assert_eq(d.replay_seq, h.replay_seq);
	cr_assert_eq(d.next_obj_id, h.next_obj_id);
	cr_assert_eq(d.n_objects, h.n_objects);
	cr_assert_eq(d.segment_count, h.segment_count);
	cr_assert_eq(d.n_dicts, h.n_dicts);
	cr_assert_eq(fmt_ckpt_block_csum(block), fmt_csum(block, FMT_BLOCK));
	for (size_t len = 0; len < FMT_CKPT_HDR; len++)
		cr_assert_eq(fmt_ckpt_decode(&d, block, len), -EINVAL);
	cr_assert_eq(fmt_ckpt_decode(&d, block, FMT_CKPT_HDR), 0);
	for (unsigned i = 0; i < FMT_CKPT_HDR; i++) {
		block[i] ^= 0x08;
		cr_assert_eq(fmt_ckpt_decode(&d, block, sizeof(block)), -EIO, "byte %u", i);
		block[i] ^= 0x08;
	}
	cr_assert_eq(fmt_ckpt_encode(&h, block, FMT_BLOCK - 1), -EINVAL);
}

static void ckpt_patch_rejected(const struct fmt_ckpt *good, unsigned off, unsigned width, uint64_t v)
{
	struct fmt_ckpt d;
	cr_assert_eq(fmt_ckpt_encode(good, block, sizeof(block)), FMT_BLOCK);
	if (width == 2)
		coil_put_le16(block + off, (uint16_t)v);
	else if (width == 4)
		coil_put_le32(block + off, (uint32_t)v);
	else
		coil_put_le64(block + off, v);
	coil_put_le64(block + FMT_CKPT_CSUM_OFF, fmt_csum(block, FMT_CKPT_CSUM_OFF));
	cr_assert_eq(fmt_ckpt_decode(&d, block, sizeof(block)), -EIO, "off %u", off);
}

Test(format_ckpt, header_fields_checked)
{
	static uint8_t payload[8192];
	struct fmt_ckpt h, bad;
	ckpt_payload(payload, sizeof(payload), &h);
	ckpt_patch_rejected(&h, 4, 2, 2);                      /* version */
	ckpt_patch_rejected(&h, 4, 2, 0);
	ckpt_patch_rejected(&h, 40, 8, 100);                   /* replay_off unaligned */
	ckpt_patch_rejected(&h, 64, 8, UINT64_MAX);            /* n_objects */
	ckpt_patch_rejected(&h, 64, 8, h.payload_len);
	ckpt_patch_rejected(&h, 72, 4, UINT32_MAX);            /* segment_count */
	ckpt_patch_rejected(&h, 76, 4, UINT32_MAX);            /* n_dicts */
	ckpt_patch_rejected(&h, 24, 8, 10);                    /* payload_len too small */
	bad = h;
	bad.n_dicts = 1u << 30;
	cr_assert_eq(fmt_ckpt_encode(&bad, block, sizeof(block)), -EINVAL);
	bad = h;
	bad.replay_off = 1;
	cr_assert_eq(fmt_ckpt_encode(&bad, block, sizeof(block)), -EINVAL);
}

Test(format_ckpt, payload_walk)
{
	static uint8_t payload[8192];
	struct fmt_ckpt h;
	size_t n = ckpt_payload(payload, sizeof(payload), &h);
	cr_assert_eq(fmt_ckpt_verify_payload(&h, payload, n), 0);
	cr_assert_eq(fmt_ckpt_payload_check(&h, payload, n), 0);

	/* walk it by hand, as recovery does */
	struct fmt_cursor c;
	struct fmt_ckpt_obj o;
	static struct fmt_extent e;
	uint64_t live, obj;
	uint8_t st;
	uint32_t dict;
	fmt_cursor_init_ro(&c, payload, n);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(fmt_ckpt_get_seg(&c, &live, &st), 0);
		cr_assert_eq(live, 1000u * i);
		cr_assert_eq(st, i);
	}
	cr_assert_eq(fmt_ckpt_get_obj(&c, &o), 0);
	cr_assert_eq(o.obj_id, 1);
	cr_assert_eq(o.size, 70000);
	cr_assert_eq(o.name_len, 5);
	cr_assert_eq(memcmp(o.name, "alpha", 5), 0);
	cr_assert_eq(o.n_extents, 2);
	cr_assert_eq(fmt_cursor_get_extent(&c, &e), 0);
	cr_assert_eq(e.blob.codec, FMT_CODEC_RAW);
	cr_assert_eq(fmt_cursor_get_extent(&c, &e), 0);
	cr_assert_eq(e.blob.codec, FMT_CODEC_ZSTD);
	cr_assert_eq(fmt_ckpt_get_obj(&c, &o), 0);
	cr_assert_eq(o.n_extents, 0);
	cr_assert_eq(fmt_ckpt_get_dict(&c, &dict, &obj), 0);
	cr_assert_eq(dict, 3);
	cr_assert_eq(obj, 2);
	cr_assert_eq(fmt_cursor_remaining(&c), 0);

	/* every flipped payload byte fails the payload checksum */
	for (size_t i = 0; i < n; i++) {
		payload[i] ^= 0x01;
		cr_assert_eq(fmt_ckpt_verify_payload(&h, payload, n), -EIO, "byte %zu", i);
		payload[i] ^= 0x01;
	}
	/* truncated at every length: short buffer, or a header that claims less */
	struct fmt_ckpt t = h;
	for (size_t len = 0; len < n; len++) {
		cr_assert_eq(fmt_ckpt_payload_check(&h, payload, len), -EIO);
		cr_assert_eq(fmt_ckpt_verify_payload(&h, payload, len), -EIO);
		t.payload_len = len;
		cr_assert_eq(fmt_ckpt_payload_check(&t, payload, n), -EIO, "len %zu", len);
	}
	/* trailing bytes the counts do not explain */
	t.payload_len = n + 1;
	payload[n] = 0;
	cr_assert_eq(fmt_ckpt_payload_check(&t, payload, n + 1), -EIO);
	/* counts that disagree with the bytes */
	t = h;
	t.n_dicts = 2;
	cr_assert_eq(fmt_ckpt_payload_check(&t, payload, n), -EIO);
	t = h;
	t.n_objects = 1;
	cr_assert_eq(fmt_ckpt_payload_check(&t, payload, n), -EIO);
	/* non-zero segment padding */
	payload[9] = 1;
	cr_assert_eq(fmt_ckpt_payload_check(&h, payload, n), -EIO);
	payload[9] = 0;
	cr_assert_eq(fmt_ckpt_payload_check(&h, payload, n), 0);
}

Test(format_ckpt, bad_items_rejected)
{
	uint8_t buf[600];
	struct fmt_cursor c;
	struct fmt_ckpt_obj o;
	uint32_t dict;
	uint64_t obj;
	char name[300];
	memset(name, 'x', sizeof(name));

	fmt_cursor_init(&c, buf, sizeof(buf));
	cr_assert_eq(fmt_ckpt_put_obj(&c, 1, 0, name, 0, 0), -EINVAL);
	cr_assert_eq(fmt_ckpt_put_obj(&c, 1, 0, name, 256, 0), -EINVAL);
	cr_assert_eq(fmt_ckpt_put_obj(&c, 1, 0, "a\0b", 3, 0), -EINVAL);
	cr_assert_eq(fmt_ckpt_put_dict(&c, 0, 1), -EINVAL);
	cr_assert_eq(c.pos, 0);
	cr_assert_eq(fmt_ckpt_put_obj(&c, 1, 0, name, 255, 0), 0);
	fmt_cursor_init(&c, buf, 20);
	cr_assert_eq(fmt_ckpt_put_obj(&c, 1, 0, "abc", 3, 0), -ENOSPC);

	/* hand-made bad entries */
	memset(buf, 0, sizeof(buf));
	fmt_cursor_init_ro(&c, buf, 23);            /* name_len 0 */
	cr_assert_eq(fmt_ckpt_get_obj(&c, &o), -EIO);
	coil_put_le16(buf + 16, 1);
	buf[18] = 'a';
	coil_put_le32(buf + 19, 1);                 /* one extent, no bytes */
	fmt_cursor_init_ro(&c, buf, 23);
	cr_assert_eq(fmt_ckpt_get_obj(&c, &o), -EIO);
	coil_put_le32(buf + 19, 0);
	fmt_cursor_init_ro(&c, buf, 23);
	cr_assert_eq(fmt_ckpt_get_obj(&c, &o), 0);
	coil_put_le16(buf + 16, 1000);              /* name past the end */
	fmt_cursor_init_ro(&c, buf, 23);
	cr_assert_eq(fmt_ckpt_get_obj(&c, &o), -EIO);
	memset(buf, 0, 12);                         /* dict id 0 */
	fmt_cursor_init_ro(&c, buf, 12);
	cr_assert_eq(fmt_ckpt_get_dict(&c, &dict, &obj), -EIO);
}

/* Reserved bytes are zero: with a valid checksum, a non-zero reserved byte
 * is still rejected (a newer layout sets a feature bit; docs/format.md). */
Test(format_reserved, nonzero_reserved_bytes_rejected)
{
	struct fmt_super sb, d;
	unsigned super_res[] = { 116, 119, 176, 2000, FMT_SUPER_CSUM_OFF - 1 };
	super_sample(&sb, GiB);
	for (size_t i = 0; i < COIL_ARRAY_LEN(super_res); i++) {
		cr_assert_eq(fmt_super_encode(&sb, block, sizeof(block)), FMT_BLOCK);
		block[super_res[i]] = 1;
		coil_put_le64(block + FMT_SUPER_CSUM_OFF, fmt_csum(block, FMT_SUPER_CSUM_OFF));
		cr_assert_eq(fmt_super_decode(&d, block, sizeof(block)), -EIO, "super %u", super_res[i]);
	}

	struct fmt_seghdr h = { 1, 2, 3 }, hd;
	unsigned seg_res[] = { 6, 7, 20, 23 };
	for (size_t i = 0; i < COIL_ARRAY_LEN(seg_res); i++) {
		cr_assert_eq(fmt_seghdr_encode(&h, block, sizeof(block)), FMT_BLOCK);
		block[seg_res[i]] = 0x80;
		coil_put_le64(block + 32, fmt_csum(block, 32));
		cr_assert_eq(fmt_seghdr_decode(&hd, block, sizeof(block)), -EIO, "seg %u", seg_res[i]);
	}

	struct fmt_ckpt c = { .store_id = 1, .seq = 2 }, cd;
	for (unsigned off = 6; off < 8; off++) {
		cr_assert_eq(fmt_ckpt_encode(&c, block, sizeof(block)), FMT_BLOCK);
		block[off] = 1;
		coil_put_le64(block + FMT_CKPT_CSUM_OFF, fmt_csum(block, FMT_CKPT_CSUM_OFF));
		cr_assert_eq(fmt_ckpt_decode(&cd, block, sizeof(block)), -EIO, "ckpt %u", off);
	}
}
