/* fuzz_roundtrip — decode -> encode -> decode gives the same bytes, for every
 * structure; and blob encode -> decode gives the input back.  The first byte
 * picks the structure. */
#include "fuzz_common.h"

static ZSTD_CCtx *cctx;
static ZSTD_DCtx *dctx;
static uint8_t enc[FMT_BLOB_MAX], dec[FMT_BLOB_MAX];
static uint8_t blk[FMT_BLOCK], out[1 << 16];
static struct fmt_extent e;

static void rt_blob(const uint8_t *d, size_t n)
{
	if (n < 2)
		return;
	int level = (int)(d[0] % 8) - 4; /* fast modes, raw, levels 1-3 */
	d++, n--;
	if (n > FMT_BLOB_MAX)
		n = FMT_BLOB_MAX;
	struct fmt_blob b;
	int rc = fmt_blob_encode(cctx, level, NULL, 0, d, (uint32_t)n, enc, n, &b);
	FUZZ_CHECK(rc > 0 && (uint32_t)rc == b.stored_len && b.logical_len == n);
	FUZZ_CHECK(fmt_blob_check(&b) == 0);
	if (b.codec == FMT_CODEC_ZSTD)
		FUZZ_CHECK(b.stored_len <= n - n / 8);
	FUZZ_CHECK(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len, dec, n) == (int)n);
	FUZZ_CHECK(memcmp(dec, d, n) == 0);
	if (b.codec == FMT_CODEC_RAW)
		FUZZ_CHECK(fmt_blob_verify_sectors(&b, 0, enc, n) == 0);
}

static void rt_super(const uint8_t *d, size_t n)
{
	struct fmt_super s, t;
	memset(blk, 0, sizeof(blk));
	/* the fields and the feature words (version 2) */
	memcpy(blk, d, n < 176 ? n : 176);
	coil_put_le64(blk + FMT_SUPER_CSUM_OFF, fmt_csum(blk, FMT_SUPER_CSUM_OFF));
	if (fmt_super_decode(&s, blk, sizeof(blk)) < 0)
		return;
	FUZZ_CHECK(fmt_super_encode(&s, out, FMT_BLOCK) == FMT_BLOCK);
	FUZZ_CHECK(memcmp(out, blk, FMT_BLOCK) == 0);
	FUZZ_CHECK(fmt_super_decode(&t, out, FMT_BLOCK) == 0);
}

static void rt_extent(const uint8_t *d, size_t n)
{
	int rc = fmt_extent_decode(&e, d, n);
	if (rc < 0)
		return;
	FUZZ_CHECK(fmt_extent_encode(&e, out, sizeof(out)) == rc);
	FUZZ_CHECK(memcmp(out, d, (size_t)rc) == 0);
}

static void rt_jchunk(const uint8_t *d, size_t n)
{
	struct fmt_jchunk h, t;
	uint8_t hdr[FMT_JCHUNK_HDR] = { 0 };
	memcpy(hdr, d, n < 56 ? n : 56);
	coil_put_le64(hdr + 56, fmt_csum(hdr, 56));
	if (fmt_jchunk_decode(&h, hdr, sizeof(hdr)) < 0)
		return;
	FUZZ_CHECK(fmt_jchunk_encode(&h, out, sizeof(out)) == FMT_JCHUNK_HDR);
	FUZZ_CHECK(fmt_jchunk_decode(&t, out, FMT_JCHUNK_HDR) == 0);
	FUZZ_CHECK(t.seq == h.seq && t.payload_len == h.payload_len && t.nrec == h.nrec &&
		   t.nblocks == h.nblocks && t.nsect == h.nsect && t.payload_csum == h.payload_csum);
}

/* Every record that decodes re-encodes, through the public encoders, to the
 * very bytes it was read from. */
static void rt_records(const uint8_t *d, size_t n)
{
	static uint8_t p[1 << 16];
	if (n > sizeof(p))
		n = sizeof(p);
	memcpy(p, d, n);
	fuzz_fix_records(p, n);
	struct fmt_cursor c, w;
	struct fmt_jrec r;
	fmt_cursor_init_ro(&c, p, n);
	for (;;) {
		size_t at = c.pos;
		if (fmt_jrec_next(&c, &r) != 1)
			break;
		fmt_cursor_init(&w, out, sizeof(out));
		int rc = -1;
		union {
			struct fmt_jrec_create c;
			struct fmt_jrec_remove rm;
			struct fmt_jrec_truncate t;
			struct fmt_jrec_dict d;
			struct fmt_jrec_write w;
			struct fmt_jrec_rename rn;
			struct fmt_jrec_batch b;
			struct fmt_jrec_clone cl;
		} u;
		switch (r.type) {
		case FMT_JREC_CREATE:
			if (fmt_jrec_create_decode(&r, &u.c) == 0)
				rc = fmt_jrec_put_create(&w, u.c.obj_id, u.c.name, u.c.name_len);
			break;
		case FMT_JREC_REMOVE:
			if (fmt_jrec_remove_decode(&r, &u.rm) == 0)
				rc = fmt_jrec_put_remove(&w, u.rm.obj_id);
			break;
		case FMT_JREC_TRUNCATE:
			if (fmt_jrec_truncate_decode(&r, &u.t) == 0)
				rc = fmt_jrec_put_truncate(&w, u.t.obj_id, u.t.size);
			break;
		case FMT_JREC_DICT:
			if (fmt_jrec_dict_decode(&r, &u.d) == 0)
				rc = fmt_jrec_put_dict(&w, u.d.dict_id, u.d.obj_id);
			break;
		case FMT_JREC_RENAME:
			if (fmt_jrec_rename_decode(&r, &u.rn) == 0)
				rc = fmt_jrec_put_rename(&w, u.rn.obj_id, u.rn.replaced,
							 u.rn.name, u.rn.name_len);
			break;
		case FMT_JREC_BATCH:
			if (fmt_jrec_batch_decode(&r, &u.b) == 0)
				rc = fmt_jrec_put_batch(&w, u.b.n_records);
			break;
		case FMT_JREC_CLONE:
			if (fmt_jrec_clone_decode(&r, &u.cl) == 0)
				rc = fmt_jrec_put_clone(&w, u.cl.src_id, u.cl.dst_id,
							u.cl.name, u.cl.name_len);
			break;
		case FMT_JREC_WRITE:
			if (fmt_jrec_write_decode(&r, &u.w) == 0) {
				size_t mark;
				FUZZ_CHECK(fmt_jrec_write_begin(&w, &mark, u.w.flags, u.w.obj_id,
								u.w.off, u.w.len) == 0);
				while (fmt_jrec_write_next(&u.w, &e) == 1)
					FUZZ_CHECK(fmt_cursor_put_extent(&w, &e) == 0);
				rc = fmt_jrec_write_end(&w, mark, u.w.n_extents);
			}
			break;
		}
		if (rc == -1)
			continue; /* body did not decode: nothing to compare */
		FUZZ_CHECK(rc == 0);
		FUZZ_CHECK(w.pos == c.pos - at);
		FUZZ_CHECK(memcmp(out, p + at, w.pos) == 0);
	}
}

static void rt_ckpt(const uint8_t *d, size_t n)
{
	if (n < 3)
		return;
	struct fmt_ckpt h = {
		.segment_count = d[0] % 8, .n_objects = d[1] % 8, .n_dicts = d[2] % 8,
		.payload_len = n - 3,
	};
	d += 3, n -= 3;
	if (fmt_ckpt_payload_check(&h, d, n) < 0)
		return;
	struct fmt_cursor c, w;
	struct fmt_ckpt_obj o;
	uint64_t live, obj;
	uint8_t st;
	uint32_t dict;
	fmt_cursor_init_ro(&c, d, n);
	fmt_cursor_init(&w, out, sizeof(out));
	for (uint32_t i = 0; i < h.segment_count; i++) {
		FUZZ_CHECK(fmt_ckpt_get_seg(&c, &live, &st) == 0);
		FUZZ_CHECK(fmt_ckpt_put_seg(&w, live, st) == 0);
	}
	for (uint64_t i = 0; i < h.n_objects; i++) {
		FUZZ_CHECK(fmt_ckpt_get_obj(&c, &o) == 0);
		FUZZ_CHECK(fmt_ckpt_put_obj(&w, o.obj_id, o.size, o.name, o.name_len, o.n_extents) == 0);
		for (uint32_t j = 0; j < o.n_extents; j++) {
			FUZZ_CHECK(fmt_cursor_get_extent(&c, &e) == 0);
			FUZZ_CHECK(fmt_cursor_put_extent(&w, &e) == 0);
		}
	}
	for (uint32_t i = 0; i < h.n_dicts; i++) {
		FUZZ_CHECK(fmt_ckpt_get_dict(&c, &dict, &obj) == 0);
		FUZZ_CHECK(fmt_ckpt_put_dict(&w, dict, obj) == 0);
	}
	FUZZ_CHECK(w.pos == n && memcmp(out, d, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!cctx) {
		cctx = ZSTD_createCCtx();
		dctx = ZSTD_createDCtx();
	}
	if (size < 1)
		return 0;
	const uint8_t *d = data + 1;
	size_t n = size - 1;
	switch (data[0] % 6) {
	case 0: rt_blob(d, n); break;
	case 1: rt_super(d, n); break;
	case 2: rt_extent(d, n); break;
	case 3: rt_jchunk(d, n); break;
	case 4: rt_records(d, n); break;
	case 5: rt_ckpt(d, n); break;
	}
	return 0;
}
