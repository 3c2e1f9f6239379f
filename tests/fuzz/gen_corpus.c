/* gen_corpus.c — writes the seed corpora of the format fuzz targets: small,
 * valid encodings of every structure.  Not part of the build; regenerate with
 *   cc -std=gnu11 -D_GNU_SOURCE -DXXH_INLINE_ALL -I. -Iinclude \
 *      tests/fuzz/gen_corpus.c format/[a-z]*.c common/common.c -lzstd -o /tmp/gen_corpus &&
 *   /tmp/gen_corpus tests/fuzz/corpus
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "format/format.h"

static const char *root;

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, target);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		perror(path);
		exit(1);
	}
}

/* put with a one-byte (or two-byte) prefix */
static void put_pre(const char *target, const char *name, const uint8_t *pre, size_t np,
		    const void *p, size_t n)
{
	static uint8_t tmp[1 << 17];
	memcpy(tmp, pre, np);
	memcpy(tmp + np, p, n);
	put(target, name, tmp, np + n);
}

static void text(uint8_t *p, size_t n)
{
	static const char *w[] = { "coil ", "stores ", "blobs ", "in ", "segments\n" };
	for (size_t i = 0, k = 0; i < n; k++)
		for (const char *s = w[(k * 7) % 5]; *s && i < n; s++)
			p[i++] = (uint8_t)*s;
}

int main(int argc, char **argv)
{
	static uint8_t blk[FMT_BLOCK], buf[1 << 16], data[1 << 16], stored[1 << 16];
	static struct fmt_extent ex[3];
	struct fmt_super sb;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();

	root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
	mkdir(root, 0755);

	/* superblocks */
	fmt_super_layout(64ull << 20, 65536, &sb);
	memset(sb.uuid, 0x5c, 16);
	sb.seq = 1;
	fmt_super_encode(&sb, blk, sizeof(blk));
	put("superblock", "new_64m", blk, FMT_BLOCK);
	put_pre("roundtrip", "super_new", (const uint8_t *)"\x01", 1, blk, 160);
	fmt_super_layout(1ull << 40, FMT_BLOB_MAX, &sb);
	sb.seq = 77;
	sb.ckpt_slot = 1;
	sb.ckpt_bytes = 3 * FMT_BLOCK;
	sb.ckpt_seq = 5;
	sb.replay_off = 16 * FMT_BLOCK;
	sb.flags = FMT_SUPER_CLEAN;
	fmt_super_encode(&sb, blk, sizeof(blk));
	put("superblock", "ckpt_1t", blk, FMT_BLOCK);
	put_pre("roundtrip", "super_ckpt", (const uint8_t *)"\x01", 1, blk, 160);
	/* a growing store: feature words (incompat GROW, an unknown compat
	 * bit), a count below the capacity */
	fmt_super_layout(4ull << 30, 65536, &sb);
	memset(sb.uuid, 0x6d, 16);
	sb.seq = 3;
	sb.incompat = FMT_INCOMPAT_GROW;
	sb.compat = 1ull << 17;
	sb.segment_count = 8;
	fmt_super_encode(&sb, blk, sizeof(blk));
	put("superblock", "grow_4g", blk, FMT_BLOCK);
	put_pre("roundtrip", "super_grow", (const uint8_t *)"\x01", 1, blk, 176);
	/* an unknown incompat bit (refused as a feature) */
	coil_put_le64(blk + 168, FMT_INCOMPAT_GROW | (1ull << 6));
	coil_put_le64(blk + FMT_SUPER_CSUM_OFF, fmt_csum(blk, FMT_SUPER_CSUM_OFF));
	put("superblock", "grow_unknown_incompat", blk, FMT_BLOCK);
	/* version 1: the fixed layout of every earlier store */
	fmt_super_layout(64ull << 20, 65536, &sb);
	memset(sb.uuid, 0x7e, 16);
	sb.version = FMT_SUPER_VERSION_V1;
	sb.seq = 9;
	fmt_super_encode(&sb, blk, sizeof(blk));
	put("superblock", "v1_64m", blk, FMT_BLOCK);
	put_pre("roundtrip", "super_v1", (const uint8_t *)"\x01", 1, blk, 160);

	/* segment headers */
	struct fmt_seghdr sh = { .store_id = 0x5c5c5c5c5c5c5c5cull, .index = 3, .open_seq = 9 };
	fmt_seghdr_encode(&sh, blk, sizeof(blk));
	put("seghdr", "seg3", blk, FMT_SEGHDR_SIZE);

	/* blobs + extents */
	text(data, sizeof(data));
	struct fmt_blob b;
	int n = fmt_blob_encode(cctx, 1, NULL, 0, data, 20000, stored, sizeof(stored), &b);
	ex[0] = (struct fmt_extent){ .obj_off = 4096, .len = 15000, .blob_skip = 100, .blob = b };
	ex[0].blob.dev_off = 10 << 20;
	int en = fmt_extent_encode(&ex[0], buf, sizeof(buf));
	put("extent", "zstd", buf, (size_t)en);
	put_pre("roundtrip", "extent_zstd", (const uint8_t *)"\x02", 1, buf, (size_t)en);
	memcpy(buf + en, stored, (size_t)n);
	put("blob", "zstd_20000", buf, (size_t)en + (size_t)n);

	for (int i = 0; i < 3000; i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13);
	fmt_blob_encode(NULL, 0, NULL, 0, data, 3000, stored, sizeof(stored), &b);
	ex[1] = (struct fmt_extent){ .obj_off = 19096, .len = 3000, .blob = b };
	ex[1].blob.dev_off = 11 << 20;
	en = fmt_extent_encode(&ex[1], buf, sizeof(buf));
	put("extent", "raw", buf, (size_t)en);
	memcpy(buf + en, stored, 3000);
	put("blob", "raw_3000", buf, (size_t)en + 3000);
	fmt_blob_encode(NULL, 0, NULL, 0, data, 9000, stored, sizeof(stored), &b);
	ex[2] = (struct fmt_extent){ .obj_off = 22096, .len = 9000, .blob = b };
	en = fmt_extent_encode(&ex[2], buf, sizeof(buf));
	memcpy(buf + en, stored, 9000);
	buf[en + 9000] = 1; /* last byte picks the sector fmt_blob_verify_sectors starts at */
	put("blob", "raw_9000", buf, (size_t)en + 9001);

	struct fmt_cursor c;
	fmt_cursor_init(&c, buf, sizeof(buf));
	for (int i = 0; i < 3; i++)
		fmt_cursor_put_extent(&c, &ex[i]);
	put("extent", "run3", buf, c.pos);

	text(data, 70000 > sizeof(data) ? sizeof(data) : 70000);
	put_pre("roundtrip", "blob_text_l1", (const uint8_t *)"\x00\x01", 2, data, 6000);
	put_pre("roundtrip", "blob_text_raw", (const uint8_t *)"\x00\x00", 2, data, 500);
	put_pre("roundtrip", "blob_mixed_l3", (const uint8_t *)"\x00\x03", 2, stored, 5000);

	/* journal: every record type in one chunk */
	uint8_t *p = buf + FMT_JCHUNK_HDR;
	fmt_cursor_init(&c, p, sizeof(buf) - FMT_JCHUNK_HDR);
	fmt_jrec_put_create(&c, 1, "db/main", 7);
	fmt_jrec_put_write(&c, 0, 1, 4096, 30000, ex, 3);
	fmt_jrec_put_truncate(&c, 1, 20000);
	fmt_jrec_put_dict(&c, 1, 2);
	fmt_jrec_put_write(&c, FMT_JREC_REMAP, 1, 19096, 3000, &ex[1], 1);
	fmt_jrec_put_remove(&c, 1);
	size_t plen = c.pos;
	int total = fmt_jchunk_seal(buf, sizeof(buf), 0x5c5c5c5c5c5c5c5cull, 12, 0, (uint32_t)plen, 6, FMT_BLOCK);
	put("journal", "all_types", buf, (size_t)total);
	put_pre("roundtrip", "records", (const uint8_t *)"\x04", 1, p, plen);
	put_pre("roundtrip", "jchunk", (const uint8_t *)"\x03", 1, buf, 56);
	fmt_cursor_init(&c, p, sizeof(buf) - FMT_JCHUNK_HDR);
	fmt_jrec_put_create(&c, 2, "x", 1);
	total = fmt_jchunk_seal(buf, sizeof(buf), 0x5c5c5c5c5c5c5c5cull, 13, 0, (uint32_t)c.pos, 1, FMT_BLOCK);
	put("journal", "one_create", buf, (size_t)total);

	/* checkpoint: header bytes then payload; and the 3-count-byte form */
	static uint8_t ck[1 << 16];
	uint8_t *pl = ck + FMT_CKPT_HDR;
	fmt_cursor_init(&c, pl, sizeof(ck) - FMT_CKPT_HDR);
	fmt_ckpt_put_seg(&c, 100000, 1);
	fmt_ckpt_put_seg(&c, 0, 0);
	fmt_ckpt_put_obj(&c, 1, 31096, "db/main", 7, 3);
	for (int i = 0; i < 3; i++)
		fmt_cursor_put_extent(&c, &ex[i]);
	fmt_ckpt_put_obj(&c, 2, 0, "db/wal", 6, 0);
	fmt_ckpt_put_dict(&c, 1, 2);
	struct fmt_ckpt ch = { .store_id = 0x5c5c5c5c5c5c5c5cull, .seq = 3,
			       .payload_len = c.pos, .payload_csum = fmt_csum(pl, c.pos),
			       .replay_off = 8 * FMT_BLOCK, .replay_seq = 12, .next_obj_id = 3,
			       .n_objects = 2, .segment_count = 2, .n_dicts = 1 };
	fmt_ckpt_encode(&ch, blk, sizeof(blk));
	memcpy(ck, blk, FMT_CKPT_HDR);
	put("ckpt", "two_objects", ck, FMT_CKPT_HDR + c.pos);
	uint8_t counts[4] = { 5, 2, 2, 1 };
	put_pre("ckpt", "counts_form", counts + 1, 3, pl, c.pos);
	put_pre("roundtrip", "ckpt", counts, 4, pl, c.pos);

	ZSTD_freeCCtx(cctx);
	return 0;
}
