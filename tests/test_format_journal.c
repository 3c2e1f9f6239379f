/* test_format_journal.c — journal chunks and records: round trips of every
 * record type, every header byte and payload byte corrupted, truncation at
 * every length, unknown types and flags, WRITE extent consistency. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"

#define STORE 0x0123456789abcdefull
#define CHUNK_CAP (4 * FMT_BLOCK)

static uint8_t chunk[CHUNK_CAP];
static struct fmt_extent ext[3];

static void make_extents(void)
{
	memset(ext, 0, sizeof(ext));
	for (int i = 0; i < 3; i++) {
		ext[i].obj_off = 100000 + 20000u * i;
		ext[i].len = 20000;
		ext[i].blob.dev_off = 8 * 1048576 + 65536u * i;
	}
	/* raw, 5 sectors */
	ext[0].blob.codec = FMT_CODEC_RAW;
	ext[0].blob.stored_len = ext[0].blob.logical_len = 20000;
	ext[0].blob.n_csums = 5;
	for (int s = 0; s < 5; s++)
		ext[0].blob.csums[s] = 1000 + s;
	/* zstd, skipping into its blob */
	for (int i = 1; i < 3; i++) {
		ext[i].blob_skip = 5000;
		ext[i].blob.codec = FMT_CODEC_ZSTD;
		ext[i].blob.stored_len = 9000;
		ext[i].blob.logical_len = 65536;
		ext[i].blob.n_csums = 2;
		ext[i].blob.dict_id = (uint32_t)i - 1;
		ext[i].blob.csums[0] = 7;
		ext[i].blob.csums[1] = 8;
	}
}

/* Payload with one record of each type; returns payload bytes, *nrec. */
static size_t build_payload(uint8_t *p, size_t cap, uint32_t *nrec)
{
	struct fmt_cursor c;
	make_extents();
	fmt_cursor_init(&c, p, cap);
	cr_assert_eq(fmt_jrec_put_create(&c, 5, "tables/users", 12), 0);
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, 100000, 60000, ext, 3), 0);
	cr_assert_eq(fmt_jrec_put_truncate(&c, 5, 123456), 0);
	cr_assert_eq(fmt_jrec_put_dict(&c, 9, 6), 0);
	cr_assert_eq(fmt_jrec_put_write(&c, FMT_JREC_REMAP, 5, 100000, 20000, ext, 1), 0);
	size_t mark;
	cr_assert_eq(fmt_jrec_write_begin(&c, &mark, 0, 7, 0, 0), 0);
	cr_assert_eq(fmt_jrec_write_end(&c, mark, 0), 0);        /* an empty write */
	cr_assert_eq(fmt_jrec_put_remove(&c, 5), 0);
	cr_assert_eq(fmt_jrec_put_batch(&c, 1), 0);
	cr_assert_eq(fmt_jrec_put_rename(&c, 7, 0, "t/new", 5), 0);
	cr_assert_eq(fmt_jrec_put_rename(&c, 7, 7, "t/new", 5), -EINVAL);
	cr_assert_eq(fmt_jrec_put_batch(&c, 0), -EINVAL);
	cr_assert_eq(fmt_jrec_put_clone(&c, 7, 8, "t/copy", 6), 0);
	cr_assert_eq(fmt_jrec_put_clone(&c, 8, 8, "t/copy", 6), -EINVAL);
	*nrec = 10;
	return c.pos;
}

/* Walk a payload; returns records seen, or the negative error. */
static int walk(const uint8_t *p, size_t len, int decode_bodies)
{
	struct fmt_cursor c;
	struct fmt_jrec r;
	int n = 0, rc;
	fmt_cursor_init_ro(&c, p, len);
	while ((rc = fmt_jrec_next(&c, &r)) == 1) {
		n++;
		if (!decode_bodies)
			continue;
		struct fmt_jrec_create cr_;
		struct fmt_jrec_remove rm;
		struct fmt_jrec_truncate tr;
		struct fmt_jrec_dict di;
		struct fmt_jrec_write w;
		struct fmt_jrec_rename rn;
		struct fmt_jrec_batch ba;
		struct fmt_jrec_clone cl;
		static struct fmt_extent e;
		switch (r.type) {
		case FMT_JREC_CLONE: rc = fmt_jrec_clone_decode(&r, &cl); break;
		case FMT_JREC_RENAME: rc = fmt_jrec_rename_decode(&r, &rn); break;
		case FMT_JREC_BATCH: rc = fmt_jrec_batch_decode(&r, &ba); break;
		case FMT_JREC_CREATE: rc = fmt_jrec_create_decode(&r, &cr_); break;
		case FMT_JREC_REMOVE: rc = fmt_jrec_remove_decode(&r, &rm); break;
		case FMT_JREC_TRUNCATE: rc = fmt_jrec_truncate_decode(&r, &tr); break;
		case FMT_JREC_DICT: rc = fmt_jrec_dict_decode(&r, &di); break;
		case FMT_JREC_WRITE:
			rc = fmt_jrec_write_decode(&r, &w);
			while (rc == 0 && (rc = fmt_jrec_write_next(&w, &e)) == 1)
				;
			break;
		}
		if (rc < 0)
			return rc;
	}
	return rc < 0 ? rc : n;
}

Test(format_journal, round_trip_every_record_type)
{
	uint32_t nrec;
	size_t n = build_payload(chunk + FMT_JCHUNK_HDR, CHUNK_CAP - FMT_JCHUNK_HDR, &nrec);
	memset(chunk + FMT_JCHUNK_HDR + n, 0xee, 64);
	int total = fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1234, 0, (uint32_t)n, nrec, FMT_BLOCK);
	cr_assert_eq(total, (int)COIL_ALIGN_UP(FMT_JCHUNK_HDR + n, FMT_BLOCK));
	for (int i = FMT_JCHUNK_HDR + (int)n; i < total; i++)
		cr_assert_eq(chunk[i], 0, "padding is zero");
	cr_assert_eq(memcmp(chunk, "CJNL", 4), 0);

	struct fmt_jchunk h;
	cr_assert_eq(fmt_jchunk_decode(&h, chunk, (size_t)total), 0);
	cr_assert_eq(h.store_id, STORE);
	cr_assert_eq(h.seq, 1234);
	cr_assert_eq(h.nsect, (uint32_t)total / FMT_JSECT);
	cr_assert_eq(h.nblocks, 0);
	cr_assert_eq(fmt_jchunk_len(&h), (uint64_t)total);
	cr_assert_eq(h.payload_len, n);
	cr_assert_eq(h.nrec, 10);
	cr_assert_eq(fmt_jchunk_verify_payload(&h, chunk + FMT_JCHUNK_HDR, (size_t)total - 64), 0);

	struct fmt_cursor c;
	struct fmt_jrec r;
	fmt_cursor_init_ro(&c, chunk + FMT_JCHUNK_HDR, h.payload_len);

	struct fmt_jrec_create cr_;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(r.type, FMT_JREC_CREATE);
	cr_assert_eq(fmt_jrec_create_decode(&r, &cr_), 0);
	cr_assert_eq(cr_.obj_id, 5);
	cr_assert_eq(cr_.name_len, 12);
	cr_assert_eq(memcmp(cr_.name, "tables/users", 12), 0);
	cr_assert_eq(fmt_jrec_remove_decode(&r, &(struct fmt_jrec_remove){ 0 }), -EIO);

	struct fmt_jrec_write w;
	static struct fmt_extent e;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), 0);
	cr_assert_eq(w.flags, 0);
	cr_assert_eq(w.obj_id, 5);
	cr_assert_eq(w.off, 100000);
	cr_assert_eq(w.len, 60000);
	cr_assert_eq(w.n_extents, 3);
	/* the unchecked peek (a prefetch hint) walks the same extents */
	struct fmt_jrec_write wp = w;
	uint64_t poff;
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(fmt_jrec_write_peek(&wp, &poff), 1);
		cr_assert_eq(poff, ext[i].obj_off);
	}
	cr_assert_eq(fmt_jrec_write_peek(&wp, &poff), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(fmt_jrec_write_next(&w, &e), 1);
		cr_assert_eq(e.obj_off, ext[i].obj_off);
		cr_assert_eq(e.len, ext[i].len);
		cr_assert_eq(e.blob_skip, ext[i].blob_skip);
		cr_assert_eq(e.blob.dev_off, ext[i].blob.dev_off);
		cr_assert_eq(e.blob.codec, ext[i].blob.codec);
		cr_assert_eq(e.blob.dict_id, ext[i].blob.dict_id);
		cr_assert_eq(e.blob.n_csums, ext[i].blob.n_csums);
		cr_assert_arr_eq(e.blob.csums, ext[i].blob.csums, 8u * e.blob.n_csums);
	}
	cr_assert_eq(fmt_jrec_write_next(&w, &e), 0);

	struct fmt_jrec_truncate tr;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_truncate_decode(&r, &tr), 0);
	cr_assert_eq(tr.obj_id, 5);
	cr_assert_eq(tr.size, 123456);

	struct fmt_jrec_dict di;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_dict_decode(&r, &di), 0);
	cr_assert_eq(di.dict_id, 9);
	cr_assert_eq(di.obj_id, 6);

	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), 0);
	cr_assert_eq(w.flags, FMT_JREC_REMAP);
	cr_assert_eq(w.n_extents, 1);

	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), 0);
	cr_assert_eq(w.n_extents, 0);
	cr_assert_eq(fmt_jrec_write_next(&w, &e), 0);

	struct fmt_jrec_remove rm;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_remove_decode(&r, &rm), 0);
	cr_assert_eq(rm.obj_id, 5);

	struct fmt_jrec_batch ba;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_batch_decode(&r, &ba), 0);
	cr_assert_eq(ba.n_records, 1);
	struct fmt_jrec_rename rn;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_rename_decode(&r, &rn), 0);
	cr_assert_eq(rn.obj_id, 7);
	cr_assert_eq(rn.replaced, 0);
	cr_assert_eq(rn.name_len, 5);
	cr_assert_eq(memcmp(rn.name, "t/new", 5), 0);
	cr_assert_eq(fmt_jrec_batch_decode(&r, &ba), -EIO);
	struct fmt_jrec_clone cl;
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_clone_decode(&r, &cl), 0);
	cr_assert_eq(cl.src_id, 7);
	cr_assert_eq(cl.dst_id, 8);
	cr_assert_eq(memcmp(cl.name, "t/copy", 6), 0);
	cr_assert_eq(fmt_jrec_rename_decode(&r, &rn), -EIO);
	cr_assert_eq(fmt_jrec_next(&c, &r), 0);
	cr_assert_eq(fmt_jrec_next(&c, &r), 0);
}

Test(format_journal, chunk_header_flips_and_truncation)
{
	uint32_t nrec;
	size_t n = build_payload(chunk + FMT_JCHUNK_HDR, CHUNK_CAP - FMT_JCHUNK_HDR, &nrec);
	int total = fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, (uint32_t)n, nrec, FMT_BLOCK);
	cr_assert_gt(total, 0);
	struct fmt_jchunk h;
	for (unsigned i = 0; i < FMT_JCHUNK_HDR; i++) {
		chunk[i] ^= 0x80;
		cr_assert_eq(fmt_jchunk_decode(&h, chunk, (size_t)total), -EIO, "byte %u", i);
		chunk[i] ^= 0x80;
	}
	for (size_t len = 0; len < FMT_JCHUNK_HDR; len++)
		cr_assert_eq(fmt_jchunk_decode(&h, chunk, len), -EINVAL);
	cr_assert_eq(fmt_jchunk_decode(&h, chunk, FMT_JCHUNK_HDR), 0);
	/* a block of zeros (never-written journal) is not a chunk */
	static uint8_t zero[FMT_BLOCK];
	cr_assert_eq(fmt_jchunk_decode(&h, zero, sizeof(zero)), -EIO);
}

/* Patch a header field and re-checksum: the semantic checks reject it. */
static void jchunk_patch_rejected(unsigned off, unsigned width, uint32_t v)
{
	struct fmt_jchunk h;
	uint32_t nrec;
	size_t n = build_payload(chunk + FMT_JCHUNK_HDR, CHUNK_CAP - FMT_JCHUNK_HDR, &nrec);
	cr_assert_gt(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, (uint32_t)n, nrec, FMT_BLOCK), 0);
	if (width == 2)
		coil_put_le16(chunk + off, (uint16_t)v);
	else
		coil_put_le32(chunk + off, v);
	coil_put_le64(chunk + 56, fmt_csum(chunk, 56));
	cr_assert_eq(fmt_jchunk_decode(&h, chunk, CHUNK_CAP), -EIO, "off %u value %u", off, v);
}

Test(format_journal, chunk_header_fields_checked)
{
	jchunk_patch_rejected(4, 2, 2);               /* unknown version */
	jchunk_patch_rejected(4, 2, 0);
	jchunk_patch_rejected(36, 4, 0);              /* no length at all */
	jchunk_patch_rejected(24, 4, 1);              /* blocks beside sectors */
	jchunk_patch_rejected(28, 4, FMT_BLOCK);      /* payload longer than one block can hold */
	jchunk_patch_rejected(28, 4, UINT32_MAX);
	jchunk_patch_rejected(32, 4, UINT32_MAX);     /* nrec the payload cannot hold */
	jchunk_patch_rejected(6, 2, 1);               /* reserved bytes */
	jchunk_patch_rejected(48, 4, 1);              /* synced not below seq (1) */
	jchunk_patch_rejected(52, 4, 1u << 24);
	struct fmt_jchunk h = { .nblocks = 1, .payload_len = FMT_BLOCK - 63 };
	cr_assert_eq(fmt_jchunk_encode(&h, chunk, CHUNK_CAP), -EINVAL);
	h.payload_len = FMT_BLOCK - 64;
	cr_assert_eq(fmt_jchunk_encode(&h, chunk, CHUNK_CAP), FMT_JCHUNK_HDR);
	cr_assert_eq(fmt_jchunk_encode(&h, chunk, FMT_JCHUNK_HDR - 1), -EINVAL);
	h.nblocks = 0;
	cr_assert_eq(fmt_jchunk_encode(&h, chunk, CHUNK_CAP), -EINVAL);
	/* a length in sectors instead */
	h.nsect = 1;
	cr_assert_eq(fmt_jchunk_encode(&h, chunk, CHUNK_CAP), -EINVAL);
	h.payload_len = FMT_JSECT - 64;
	cr_assert_eq(fmt_jchunk_encode(&h, chunk, CHUNK_CAP), FMT_JCHUNK_HDR);
	struct fmt_jchunk t;
	cr_assert_eq(fmt_jchunk_decode(&t, chunk, FMT_JCHUNK_HDR), 0);
	cr_assert_eq(t.nsect, 1);
	cr_assert_eq(t.nblocks, 0);
	cr_assert_eq(fmt_jchunk_len(&t), FMT_JSECT);
}

Test(format_journal, seal_bounds)
{
	/* exactly one block, then one byte more */
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, FMT_BLOCK - 64, 0, FMT_BLOCK), FMT_BLOCK);
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, FMT_BLOCK - 63, 0, FMT_BLOCK), 2 * FMT_BLOCK);
	cr_assert_eq(fmt_jchunk_seal(chunk, FMT_BLOCK, STORE, 1, 0, FMT_BLOCK - 63, 0, FMT_BLOCK), -ENOSPC);
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, 0, 0, FMT_BLOCK), FMT_BLOCK);
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, 10, 1, FMT_BLOCK), -EINVAL);
	/* sector chunks: the same edges at 512 bytes, the length in sectors */
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, FMT_JSECT - 64, 0, FMT_JSECT), FMT_JSECT);
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, FMT_JSECT - 63, 0, FMT_JSECT), 2 * FMT_JSECT);
	struct fmt_jchunk h;
	cr_assert_eq(fmt_jchunk_decode(&h, chunk, CHUNK_CAP), 0);
	cr_assert_eq(h.nsect, 2);
	cr_assert_eq(h.nblocks, 0);
	cr_assert_eq(fmt_jchunk_verify_payload(&h, chunk + FMT_JCHUNK_HDR, 2 * FMT_JSECT - 64), 0);
	cr_assert_eq(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 1, 0, 0, 0, 1024), -EINVAL);
	/* what was durable when the chunk was written rides in its header */
	cr_assert_gt(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 10, 9, 0, 0, FMT_JSECT), 0);
	cr_assert_eq(fmt_jchunk_decode(&h, chunk, CHUNK_CAP), 0);
	cr_assert_eq(h.synced, 9);
	cr_assert_lt(fmt_jchunk_seal(chunk, CHUNK_CAP, STORE, 10, 10, 0, 0, FMT_JSECT), 0);
}

Test(format_journal, every_payload_byte_flipped)
{
	static uint8_t p[8192];
	uint32_t nrec;
	size_t n = build_payload(p, sizeof(p), &nrec);
	struct fmt_jchunk h = { .store_id = STORE, .seq = 1, .nblocks = 3,
				.payload_len = (uint32_t)n, .nrec = nrec, .payload_csum = fmt_csum(p, n) };
	cr_assert_eq(walk(p, n, 1), 10);
	for (size_t i = 0; i < n; i++) {
		p[i] ^= 0x10;
		cr_assert_eq(fmt_jchunk_verify_payload(&h, p, n), -EIO, "byte %zu", i);
		/* each record vouches for itself, header fields included */
		cr_assert_eq(walk(p, n, 0), -EIO, "byte %zu", i);
		p[i] ^= 0x10;
	}
	cr_assert_eq(fmt_jchunk_verify_payload(&h, p, n - 1), -EIO);
}

Test(format_journal, truncated_at_every_length)
{
	static uint8_t p[8192];
	size_t bounds[16];
	int nb = 0;
	uint32_t nrec;
	size_t n = build_payload(p, sizeof(p), &nrec);
	/* record boundaries */
	struct fmt_cursor c;
	struct fmt_jrec r;
	fmt_cursor_init_ro(&c, p, n);
	bounds[nb++] = 0;
	while (fmt_jrec_next(&c, &r) == 1)
		bounds[nb++] = c.pos;
	cr_assert_eq(nb, 11);
	for (size_t len = 0; len <= n; len++) {
		int at = -1;
		for (int b = 0; b < nb; b++)
			if (bounds[b] == len)
				at = b;
		int got = walk(p, len, 1);
		if (at >= 0)
			cr_assert_eq(got, at, "len %zu", len);
		else
			cr_assert_eq(got, -EIO, "len %zu", len);
	}
}

/* Build a record by hand with a valid checksum. */
static size_t hand_record(uint8_t *p, uint16_t type, uint16_t flags, const void *body, uint32_t len)
{
	coil_put_le16(p, type);
	coil_put_le16(p + 2, flags);
	coil_put_le32(p + 4, len);
	memcpy(p + 16, body, len);
	coil_put_le64(p + 8, fmt_jrec_csum(p, p + 16, len));
	return 16 + len;
}

Test(format_journal, unknown_types_flags_and_bad_bodies)
{
	uint8_t p[256], body[64];
	struct fmt_cursor c;
	struct fmt_jrec r;
	memset(body, 0, sizeof(body));
	body[0] = 1;

	uint16_t bad_types[] = { 0, FMT_JREC_CLONE + 1, 0xffff };
	for (size_t i = 0; i < COIL_ARRAY_LEN(bad_types); i++) {
		size_t n = hand_record(p, bad_types[i], 0, body, 8);
		fmt_cursor_init_ro(&c, p, n);
		cr_assert_eq(fmt_jrec_next(&c, &r), -EIO, "type %u", bad_types[i]);
	}
	for (uint16_t t = FMT_JREC_CREATE; t <= FMT_JREC_CLONE; t++) {
		/* WRITE knows REMAP and REWRITE, never both at once */
		uint16_t f[] = { t == FMT_JREC_WRITE ? 4 : 1, 0x8000,
				 t == FMT_JREC_WRITE ?
					 FMT_JREC_REMAP | FMT_JREC_REWRITE : 2 };
		for (size_t k = 0; k < COIL_ARRAY_LEN(f); k++) {
			size_t n = hand_record(p, t, f[k], body, 8);
			fmt_cursor_init_ro(&c, p, n);
			cr_assert_eq(fmt_jrec_next(&c, &r), -EIO,
				     "flags 0x%x on type %u", f[k], t);
		}
	}
	/* body lengths that disagree with the type */
	struct { uint16_t type; uint32_t len; } wrong[] = {
		{ FMT_JREC_REMOVE, 7 }, { FMT_JREC_REMOVE, 9 }, { FMT_JREC_TRUNCATE, 15 },
		{ FMT_JREC_TRUNCATE, 17 }, { FMT_JREC_DICT, 11 }, { FMT_JREC_DICT, 13 },
		{ FMT_JREC_CREATE, 9 }, { FMT_JREC_CREATE, 10 }, { FMT_JREC_WRITE, 27 },
		{ FMT_JREC_RENAME, 17 }, { FMT_JREC_RENAME, 18 }, { FMT_JREC_BATCH, 7 },
		{ FMT_JREC_BATCH, 9 }, { FMT_JREC_CLONE, 17 }, { FMT_JREC_CLONE, 18 },
	};
	for (size_t i = 0; i < COIL_ARRAY_LEN(wrong); i++) {
		size_t n = hand_record(p, wrong[i].type, 0, body, wrong[i].len);
		fmt_cursor_init_ro(&c, p, n);
		cr_assert_eq(walk(p, n, 1), -EIO, "type %u len %u", wrong[i].type, wrong[i].len);
	}
	/* CREATE: name length vs body, empty, NUL inside */
	uint8_t cb[8 + 2 + 4] = { 0 };
	memcpy(cb + 10, "ab\0d", 4);
	coil_put_le16(cb + 8, 4);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_CREATE, 0, cb, 14), 1), -EIO);
	coil_put_le16(cb + 8, 2);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_CREATE, 0, cb, 12), 1), 1);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_CREATE, 0, cb, 14), 1), -EIO);
	coil_put_le16(cb + 8, 0);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_CREATE, 0, cb, 10), 1), -EIO);
	/* RENAME: onto itself; BATCH: no records, too many, reserved bits */
	uint8_t rb[18 + 1] = { 0 };
	coil_put_le64(rb, 7);
	coil_put_le64(rb + 8, 9);
	coil_put_le16(rb + 16, 1);
	rb[18] = 'x';
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_RENAME, 0, rb, 19), 1), 1);
	coil_put_le64(rb + 8, 7);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_RENAME, 0, rb, 19), 1), -EIO);
	uint8_t bb[8] = { 0 };
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_BATCH, 0, bb, 8), 1), -EIO);
	coil_put_le32(bb, FMT_BATCH_RECS_MAX + 1);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_BATCH, 0, bb, 8), 1), -EIO);
	coil_put_le32(bb, 3);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_BATCH, 0, bb, 8), 1), 1);
	coil_put_le32(bb + 4, 1);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_BATCH, 0, bb, 8), 1), -EIO);
	/* DICT id 0 */
	uint8_t db[12] = { 0 };
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_DICT, 0, db, 12), 1), -EIO);
	/* a record longer than the payload */
	size_t n = hand_record(p, FMT_JREC_REMOVE, 0, body, 8);
	coil_put_le32(p + 4, 1000);
	cr_assert_eq(walk(p, n, 0), -EIO);
}

Test(format_journal, write_record_consistency)
{
	static uint8_t p[8192], body[4096];
	struct fmt_cursor c;
	make_extents();
	fmt_cursor_init(&c, p, sizeof(p));
	/* extents must lie inside the write */
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, 100001, 60000, ext, 3), -EINVAL);
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, 100000, 59999, ext, 3), -EINVAL);
	cr_assert_eq(fmt_jrec_put_write(&c, 4, 5, 100000, 60000, ext, 3), -EINVAL);
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, UINT64_MAX, 2, ext, 0), -EINVAL);
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, 0, 1, NULL, 1), -EINVAL);
	ext[1].len = 0;
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, 100000, 60000, ext, 3), -EINVAL);
	cr_assert_eq(c.pos, 0, "failed puts leave nothing behind");
	cr_assert_eq(c.err, 0);
	make_extents();
	/* no room: -ENOSPC, sticky, rewind drops the partial record */
	fmt_cursor_init(&c, p, 100);
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 5, 100000, 60000, ext, 3), -ENOSPC);
	fmt_cursor_rewind(&c, 0);
	cr_assert_eq(fmt_jrec_put_remove(&c, 1), 0);
	cr_assert_eq(walk(p, c.pos, 1), 1);

	/* by hand: count larger than the bytes, trailing bytes, extent outside */
	size_t elen = 0;
	coil_put_le64(body, 5);
	coil_put_le64(body + 8, 100000);
	coil_put_le64(body + 16, 60000);
	for (int i = 0; i < 3; i++)
		elen += (size_t)fmt_extent_encode(&ext[i], body + 28 + elen, sizeof(body) - 28 - elen);
	coil_put_le32(body + 24, 3);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen), 1), 1);
	coil_put_le32(body + 24, 4);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen), 1), -EIO);
	coil_put_le32(body + 24, UINT32_MAX);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen), 1), -EIO);
	coil_put_le32(body + 24, 2);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen), 1), -EIO);
	coil_put_le32(body + 24, 3);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen + 1), 1), -EIO);
	coil_put_le64(body + 16, 59999);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen), 1), -EIO);
	coil_put_le64(body + 8, UINT64_MAX);
	cr_assert_eq(walk(p, hand_record(p, FMT_JREC_WRITE, 0, body, 28 + (uint32_t)elen), 1), -EIO);

	/* incremental build checks itself at the end */
	size_t mark;
	fmt_cursor_init(&c, p, sizeof(p));
	cr_assert_eq(fmt_jrec_write_begin(&c, &mark, 0, 5, 100000, 40000), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &ext[0]), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &ext[2]), 0);      /* outside */
	cr_assert_eq(fmt_jrec_write_end(&c, mark, 2), -EINVAL);
	cr_assert_eq(c.pos, mark);
	cr_assert_eq(fmt_jrec_write_begin(&c, &mark, 0, 5, 100000, 40000), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &ext[0]), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &ext[1]), 0);
	cr_assert_eq(fmt_jrec_write_end(&c, mark, 3), -EINVAL);    /* wrong count */
	cr_assert_eq(fmt_jrec_write_begin(&c, &mark, 0, 5, 100000, 40000), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &ext[0]), 0);
	cr_assert_eq(fmt_cursor_put_extent(&c, &ext[1]), 0);
	cr_assert_eq(fmt_jrec_write_end(&c, mark, 2), 0);
	cr_assert_eq(walk(p, c.pos, 1), 1);
}

Test(format_journal, create_and_dict_arguments)
{
	uint8_t p[512];
	char name[300];
	struct fmt_cursor c;
	memset(name, 'n', sizeof(name));
	fmt_cursor_init(&c, p, sizeof(p));
	cr_assert_eq(fmt_jrec_put_create(&c, 1, name, 0), -EINVAL);
	cr_assert_eq(fmt_jrec_put_create(&c, 1, name, 256), -EINVAL);
	cr_assert_eq(fmt_jrec_put_create(&c, 1, "a\0", 2), -EINVAL);
	cr_assert_eq(fmt_jrec_put_create(&c, 1, NULL, 3), -EINVAL);
	cr_assert_eq(fmt_jrec_put_dict(&c, 0, 1), -EINVAL);
	cr_assert_eq(c.pos, 0);
	cr_assert_eq(fmt_jrec_put_create(&c, 1, name, 255), 0);
	cr_assert_eq(walk(p, c.pos, 1), 1);
}

/* REWRITE: pairs (expected, new) over the same object bytes, never inline,
 * not together with REMAP; encode refuses what decode would. */
Test(format_journal, rewrite_pairs)
{
	uint8_t p[8192];
	struct fmt_cursor c, rd;
	struct fmt_extent pair[2], got;
	struct fmt_jrec r;
	struct fmt_jrec_write w;

	make_extents();
	pair[0] = ext[1];                 /* what was read: zstd */
	pair[1] = ext[0];                 /* its re-encoding: raw here */
	pair[1].obj_off = pair[0].obj_off;
	pair[1].len = pair[0].len;
	pair[1].blob.flags = FMT_BLOB_OPTIMIZED;
	fmt_cursor_init(&c, p, sizeof(p));
	cr_assert_eq(fmt_jrec_put_write(&c, FMT_JREC_REWRITE, 5, 100000, 60000,
					pair, 2), 0);
	fmt_cursor_init_ro(&rd, p, c.pos);
	cr_assert_eq(fmt_jrec_next(&rd, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), 0);
	cr_assert_eq(w.flags, FMT_JREC_REWRITE);
	cr_assert_eq(w.n_extents, 2);
	cr_assert_eq(fmt_jrec_write_next(&w, &got), 1);
	cr_assert_eq(got.blob.codec, FMT_CODEC_ZSTD);
	cr_assert_eq(fmt_jrec_write_next(&w, &got), 1);
	cr_assert_eq(got.blob.flags, FMT_BLOB_OPTIMIZED);

	/* an odd count, a pair over other bytes, an inline blob */
	fmt_cursor_init(&c, p, sizeof(p));
	cr_assert_eq(fmt_jrec_put_write(&c, FMT_JREC_REWRITE, 5, 100000, 60000,
					pair, 1), -EINVAL);
	cr_assert_eq(c.pos, 0);
	pair[1].len--;
	cr_assert_eq(fmt_jrec_put_write(&c, FMT_JREC_REWRITE, 5, 100000, 60000,
					pair, 2), -EINVAL);
	pair[1].len++;
	pair[1].obj_off++;
	cr_assert_eq(fmt_jrec_put_write(&c, FMT_JREC_REWRITE, 5, 100000, 60000,
					pair, 2), -EINVAL);
	pair[1].obj_off--;
	cr_assert_eq(fmt_jrec_put_write(&c, FMT_JREC_REWRITE |
					FMT_JREC_REMAP, 5, 100000, 60000,
					pair, 2), -EINVAL);
	/* an unknown blob flag in a pair */
	pair[1].blob.flags = 0x4;
	cr_assert_lt(fmt_jrec_put_write(&c, FMT_JREC_REWRITE, 5, 100000,
					60000, pair, 2), 0);
	cr_assert_eq(c.pos, 0);
}

/* A record read with fmt_jrec_next_known (replay, for a chunk its walk
 * checked whole): its checksum and its inline blobs' are not computed
 * again, everything else is checked as ever.  fmt_jrec_write_next never
 * hashes an inline blob again: fmt_jrec_write_decode did. */
Test(format_journal, known_records_skip_only_checksums)
{
	static uint8_t p[16384], data[FMT_BLOCK], stored[FMT_BLOCK];
	static struct fmt_extent e, got;
	struct fmt_cursor c;
	struct fmt_jrec r;
	struct fmt_jrec_write w;
	size_t n;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 131u + 7u);
	memset(&e, 0, sizeof(e));
	cr_assert_eq(fmt_blob_encode(NULL, 0, NULL, 0, data, FMT_BLOCK, stored,
				     sizeof(stored), &e.blob), FMT_BLOCK);
	e.blob.flags = FMT_BLOB_INLINE;
	e.obj_off = 8192;
	e.len = FMT_BLOCK;
	e.inl = stored;
	fmt_cursor_init(&c, p, sizeof(p));
	cr_assert_eq(fmt_jrec_put_write(&c, 0, 9, 8192, FMT_BLOCK, &e, 1), 0);
	n = c.pos;
	/* the inline bytes inside the record */
	uint8_t *inl = memmem(p, n, stored, FMT_BLOCK);
	cr_assert_not_null(inl);

	/* as written: both read it, and the extent comes back whole */
	for (int known = 0; known < 2; known++) {
		fmt_cursor_init_ro(&c, p, n);
		cr_assert_eq(known ? fmt_jrec_next_known(&c, &r) :
				     fmt_jrec_next(&c, &r), 1);
		cr_assert_eq(r.known, known);
		cr_assert_eq(fmt_jrec_write_decode(&r, &w), 0);
		cr_assert_eq(fmt_jrec_write_next(&w, &got), 1);
		cr_assert_eq(memcmp(got.inl, stored, FMT_BLOCK), 0);
	}

	/* one inline byte changed, the record's checksum made right again:
	 * the checking read refuses the write, the known one does not */
	inl[100] ^= 1;
	coil_put_le64(p + 8, fmt_jrec_csum(p, p + FMT_JREC_HDR, (size_t)n - FMT_JREC_HDR));
	fmt_cursor_init_ro(&c, p, n);
	cr_assert_eq(fmt_jrec_next(&c, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), -EIO);
	fmt_cursor_init_ro(&c, p, n);
	cr_assert_eq(fmt_jrec_next_known(&c, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), 0);

	/* the record's checksum wrong: only the known read takes it */
	p[8] ^= 1;
	fmt_cursor_init_ro(&c, p, n);
	cr_assert_eq(fmt_jrec_next(&c, &r), -EIO);
	fmt_cursor_init_ro(&c, p, n);
	cr_assert_eq(fmt_jrec_next_known(&c, &r), 1);

	/* bounds are checked all the same: a body past the payload, an
	 * unknown type, an extent outside the write */
	fmt_cursor_init_ro(&c, p, n - 1);
	cr_assert_eq(fmt_jrec_next_known(&c, &r), -EIO);
	coil_put_le16(p, FMT_JREC_CLONE + 1);
	fmt_cursor_init_ro(&c, p, n);
	cr_assert_eq(fmt_jrec_next_known(&c, &r), -EIO);
	coil_put_le16(p, FMT_JREC_WRITE);
	coil_put_le64(p + FMT_JREC_HDR + 8, 8193); /* the write's offset */
	fmt_cursor_init_ro(&c, p, n);
	cr_assert_eq(fmt_jrec_next_known(&c, &r), 1);
	cr_assert_eq(fmt_jrec_write_decode(&r, &w), -EIO);
}
