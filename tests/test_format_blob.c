/* test_format_blob.c — the blob codec: raw/zstd round trips over many sizes,
 * the 12.5 % rule, every corruption is -EIO, partial sector verification. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#include "format/format.h"
#include "tests/test_util.h"

static ZSTD_CCtx *cctx;
static ZSTD_DCtx *dctx;
static uint8_t *src, *enc, *dec;

static void setup(void)
{
	cctx = ZSTD_createCCtx();
	dctx = ZSTD_createDCtx();
	src = malloc(FMT_BLOB_MAX + 8192);
	enc = malloc(FMT_BLOB_MAX + 8192);
	dec = malloc(FMT_BLOB_MAX + 8192);
	cr_assert(cctx && dctx && src && enc && dec);
}

static void teardown(void)
{
	ZSTD_freeCCtx(cctx);
	ZSTD_freeDCtx(dctx);
	free(src);
	free(enc);
	free(dec);
}

TestSuite(format_blob, .init = setup, .fini = teardown);

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd(void)
{
	return (uint32_t)(tu_xorshift(&rng) >> 11);
}

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

/* Symbols from an alphabet of @k values: entropy log2(k) bits per byte. */
static void fill_alphabet(uint8_t *p, size_t n, unsigned k)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(rnd() % k);
}

static void fill_text(uint8_t *p, size_t n)
{
	static const char *words[] = { "storage ", "engine ", "io_uring ", "blob ", "zstd ",
				       "checksum ", "segment ", "journal\n" };
	size_t i = 0;
	while (i < n) {
		const char *w = words[rnd() % 8];
		for (size_t j = 0; w[j] && i < n; j++)
			p[i++] = (uint8_t)w[j];
	}
}

static void round_trip(uint32_t len, int level, int expect_codec)
{
	struct fmt_blob b;
	int r = fmt_blob_encode(cctx, level, NULL, 0, src, len, enc, fmt_blob_bound(len), &b);
	cr_assert_gt(r, 0, "len %u rc %d", len, r);
	cr_assert_eq((uint32_t)r, b.stored_len);
	cr_assert_eq(b.logical_len, len);
	cr_assert_eq(b.dev_off, 0);
	cr_assert_eq(b.flags, 0);
	cr_assert_eq(fmt_blob_check(&b), 0);
	if (expect_codec >= 0)
		cr_assert_eq(b.codec, expect_codec, "len %u level %d", len, level);
	if (b.codec == FMT_CODEC_ZSTD) {
		cr_assert_leq(b.stored_len, len - len / 8);
		cr_assert_eq(b.n_csums, 2);
		cr_assert_eq(b.csums[0], fmt_csum(enc, b.stored_len));
		cr_assert_eq(b.csums[1], fmt_csum(src, len));
	} else {
		cr_assert_eq(b.stored_len, len);
		cr_assert_eq(b.n_csums, (len + 4095) / 4096);
		cr_assert_eq(memcmp(enc, src, len), 0);
	}
	memset(dec, 0xa5, len);
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len, dec, len), (int)len);
	cr_assert_eq(memcmp(dec, src, len), 0, "len %u", len);
}

static const uint32_t sizes[] = {
	1, 2, 7, 8, 9, 100, 511, 4095, 4096, 4097, 8191, 8192, 12345, 65535, 65536,
	65537, 200000, FMT_BLOB_MAX - 1, FMT_BLOB_MAX,
};

Test(format_blob, random_data_is_stored_raw)
{
	for (size_t i = 0; i < COIL_ARRAY_LEN(sizes); i++) {
		fill_random(src, sizes[i]);
		round_trip(sizes[i], 1, FMT_CODEC_RAW);
		round_trip(sizes[i], 0, FMT_CODEC_RAW);
	}
}

Test(format_blob, compressible_data_is_zstd)
{
	for (size_t i = 0; i < COIL_ARRAY_LEN(sizes); i++) {
		fill_text(src, sizes[i]);
		/* tiny blobs cannot pay for a zstd frame header */
		round_trip(sizes[i], 1, sizes[i] >= 512 ? FMT_CODEC_ZSTD : -1);
		round_trip(sizes[i], 3, sizes[i] >= 512 ? FMT_CODEC_ZSTD : -1);
		round_trip(sizes[i], 0, FMT_CODEC_RAW);
		/* a negative level is zstd's fast mode: it still compresses
		 * text once the blob is a few blocks */
		round_trip(sizes[i], -5, sizes[i] >= 4096 ? FMT_CODEC_ZSTD : -1);
	}
	/* no context: raw whatever the level */
	struct fmt_blob b;
	fill_text(src, 65536);
	cr_assert_eq(fmt_blob_encode(NULL, 3, NULL, 0, src, 65536, enc, 65536, &b), 65536);
	cr_assert_eq(b.codec, FMT_CODEC_RAW);
}

/* Sweep the entropy of the input across the 7/8 boundary: the encoder keeps
 * zstd exactly when plain zstd would save at least 12.5 %. */
Test(format_blob, the_twelve_and_a_half_percent_rule)
{
	static uint8_t tmp[ZSTD_COMPRESSBOUND(65536)];
	const uint32_t len = 65536;
	int saw_raw = 0, saw_zstd = 0;
	for (unsigned k = 16; k <= 256; k += 4) {
		fill_alphabet(src, len, k);
		size_t plain = ZSTD_compressCCtx(cctx, tmp, sizeof(tmp), src, len, 1);
		cr_assert(!ZSTD_isError(plain));
		struct fmt_blob b;
		cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, len, enc, len, &b), 0);
		int want = plain <= len - len / 8 ? FMT_CODEC_ZSTD : FMT_CODEC_RAW;
		cr_assert_eq(b.codec, want, "alphabet %u plain %zu", k, plain);
		saw_raw |= want == FMT_CODEC_RAW;
		saw_zstd |= want == FMT_CODEC_ZSTD;
		cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len, dec, len), (int)len);
		cr_assert_eq(memcmp(dec, src, len), 0);
	}
	cr_assert(saw_raw && saw_zstd, "sweep must cross the boundary");
}

static void flip_every_byte(struct fmt_blob *b, uint32_t stride)
{
	for (uint32_t i = 0; i < b->stored_len; i += stride) {
		enc[i] ^= 0x20;
		cr_assert_eq(fmt_blob_decode(dctx, NULL, b, enc, b->stored_len, dec, b->logical_len),
			     -EIO, "byte %u codec %u", i, b->codec);
		enc[i] ^= 0x20;
	}
	cr_assert_eq(fmt_blob_decode(dctx, NULL, b, enc, b->stored_len, dec, b->logical_len),
		     (int)b->logical_len);
}

Test(format_blob, flipped_stored_bytes_are_eio)
{
	struct fmt_blob b;
	fill_text(src, 20000);
	cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, 20000, enc, 20000, &b), 0);
	cr_assert_eq(b.codec, FMT_CODEC_ZSTD);
	flip_every_byte(&b, 1);
	fill_random(src, 20000);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, 20000, enc, 20000, &b), 20000);
	flip_every_byte(&b, 7);
	fill_text(src, FMT_BLOB_MAX);
	cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, FMT_BLOB_MAX, enc, FMT_BLOB_MAX, &b), 0);
	flip_every_byte(&b, 997);
}

Test(format_blob, bad_descriptor_is_eio)
{
	struct fmt_blob b, t;
	fill_text(src, 30000);
	cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, 30000, enc, 30000, &b), 0);
	cr_assert_eq(b.codec, FMT_CODEC_ZSTD);
	for (int i = 0; i < 2; i++) {
		t = b;
		t.csums[i] ^= 1;
		cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30000), -EIO);
	}
	t = b;
	t.logical_len -= 1;      /* frame is longer than the descriptor says */
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30000), -EIO);
	t = b;
	t.logical_len += 1;      /* shorter */
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30001), -EIO);
	t = b;
	t.stored_len -= 1;       /* frame cut short (csum recomputed: zstd itself notices) */
	t.csums[0] = fmt_csum(enc, t.stored_len);
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30000), -EIO);
	t = b;
	t.codec = 7;
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30000), -EIO);
	t = b;
	t.n_csums = 3;
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30000), -EIO);
	t = b;
	t.codec = FMT_CODEC_RAW;  /* codec flipped: lengths no longer agree */
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, t.stored_len, dec, 30000), -EIO);

	/* raw: each sector checksum matters */
	fill_random(src, 10000);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, 10000, enc, 10000, &b), 10000);
	for (int i = 0; i < 3; i++) {
		t = b;
		t.csums[i] ^= 1ull << 63;
		cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, 10000, dec, 10000), -EIO);
	}
	t = b;
	t.codec = FMT_CODEC_ZSTD;
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &t, enc, 10000, dec, 10000), -EIO);
}

Test(format_blob, argument_errors)
{
	struct fmt_blob b;
	fill_text(src, 8192);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, 0, enc, 8192, &b), -EINVAL);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, FMT_BLOB_MAX + 1, enc,
				     FMT_BLOB_MAX + 8192, &b), -EINVAL);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, 8192, enc, 8191, &b), -ENOSPC);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, 8192, src + 100, 8192, &b), -EINVAL);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 5, src, 8192, enc, 8192, &b), -EINVAL);
	cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, 8192, enc, 8192, &b), 0);
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len - 1, dec, 8192), -EINVAL);
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len, dec, 8191), -EINVAL);
	cr_assert_eq(fmt_blob_decode(NULL, NULL, &b, enc, b.stored_len, dec, 8192), -EINVAL);
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len, dec, 8192), 8192);
}

Test(format_blob, raw_decodes_in_place)
{
	struct fmt_blob b;
	fill_random(src, 9000);
	cr_assert_eq(fmt_blob_encode(cctx, 0, NULL, 0, src, 9000, enc, 9000, &b), 9000);
	cr_assert_eq(fmt_blob_decode(NULL, NULL, &b, enc, 9000, enc, 9000), 9000);
	cr_assert_eq(memcmp(enc, src, 9000), 0);
	enc[8999] ^= 1;
	cr_assert_eq(fmt_blob_decode(NULL, NULL, &b, enc, 9000, enc, 9000), -EIO);
}

Test(format_blob, dictionary)
{
	static uint8_t dict[16384];
	fill_text(dict, sizeof(dict));
	ZSTD_CDict *cd = ZSTD_createCDict(dict, sizeof(dict), 3);
	ZSTD_DDict *dd = ZSTD_createDDict(dict, sizeof(dict));
	static uint8_t other[16384];
	fill_random(other, sizeof(other));
	ZSTD_DDict *wrong = ZSTD_createDDict(other, sizeof(other));
	cr_assert(cd && dd && wrong);

	struct fmt_blob b, plain;
	fill_text(src, 3000);
	cr_assert_gt(fmt_blob_encode(cctx, 1, cd, 42, src, 3000, enc, 3000, &b), 0);
	cr_assert_eq(b.codec, FMT_CODEC_ZSTD);
	cr_assert_eq(b.dict_id, 42);
	cr_assert_eq(fmt_blob_encode(cctx, 1, cd, 0, src, 3000, dec, 3000, &plain), -EINVAL);
	cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, 3000, dec, 3000, &plain), 0);
	cr_assert_lt(b.stored_len, plain.stored_len, "a dictionary helps small blobs");
	cr_assert_eq(plain.dict_id, 0);

	cr_assert_eq(fmt_blob_decode(dctx, dd, &b, enc, b.stored_len, dec, 3000), 3000);
	cr_assert_eq(memcmp(dec, src, 3000), 0);
	cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, enc, b.stored_len, dec, 3000), -EIO);
	cr_assert_eq(fmt_blob_decode(dctx, wrong, &b, enc, b.stored_len, dec, 3000), -EIO);

	/* level <= 0 stays raw even with a dictionary at hand */
	cr_assert_eq(fmt_blob_encode(cctx, 0, cd, 42, src, 3000, enc, 3000, &b), 3000);
	cr_assert_eq(b.codec, FMT_CODEC_RAW);
	cr_assert_eq(b.dict_id, 0);
	ZSTD_freeCDict(cd);
	ZSTD_freeDDict(dd);
	ZSTD_freeDDict(wrong);
}

Test(format_blob, partial_sector_verification)
{
	struct fmt_blob b, z;
	const uint32_t len = 3 * 4096 + 1000;   /* 4 sectors, the last 1000 bytes */
	fill_random(src, len);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, len, enc, len, &b), (int)len);
	cr_assert_eq(b.codec, FMT_CODEC_RAW);
	cr_assert_eq(b.n_csums, 4);
	/* the device read of a raw blob is whole blocks: copy with padding */
	memcpy(dec, enc, len);
	memset(dec + len, 0x77, 4096 - 1000);

	for (uint32_t s = 0; s < 4; s++)
		cr_assert_eq(fmt_blob_verify_sectors(&b, s, dec + s * 4096, 4096), 0, "sector %u", s);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 1, dec + 4096, 2 * 4096), 0);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 0, dec, 4 * 4096), 0);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 3, dec + 3 * 4096, 1000), 0);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 2, dec + 2 * 4096, 4096 + 1000), 0);
	/* a sector cut short cannot be verified */
	cr_assert_eq(fmt_blob_verify_sectors(&b, 0, dec, 5000), -EINVAL);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 3, dec + 3 * 4096, 999), -EINVAL);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 0, dec, 0), -EINVAL);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 4, dec, 4096), -EINVAL);
	/* a flipped byte fails exactly the sector that holds it */
	dec[2 * 4096 + 17] ^= 1;
	cr_assert_eq(fmt_blob_verify_sectors(&b, 2, dec + 2 * 4096, 4096), -EIO);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 1, dec + 4096, 4096), 0);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 3, dec + 3 * 4096, 4096), 0);
	cr_assert_eq(fmt_blob_verify_sectors(&b, 1, dec + 4096, 2 * 4096), -EIO);
	dec[2 * 4096 + 17] ^= 1;
	dec[3 * 4096 + 999] ^= 1;
	cr_assert_eq(fmt_blob_verify_sectors(&b, 3, dec + 3 * 4096, 4096), -EIO);
	dec[3 * 4096 + 999] ^= 1;
	dec[3 * 4096 + 1000] ^= 1;   /* padding is not the blob's */
	cr_assert_eq(fmt_blob_verify_sectors(&b, 3, dec + 3 * 4096, 4096), 0);

	/* compressed blobs are verified whole, by decode */
	fill_text(src, len);
	cr_assert_gt(fmt_blob_encode(cctx, 1, NULL, 0, src, len, enc, len, &z), 0);
	cr_assert_eq(z.codec, FMT_CODEC_ZSTD);
	cr_assert_eq(fmt_blob_verify_sectors(&z, 0, enc, 4096), -EINVAL);
}

/* fmt_csum is XXH3-64 whatever code computes it (an AVX2 build is picked at
 * run time when the CPU has it): every length and alignment, against this
 * file's own XXH3 (built without AVX2) and a known value, so a store
 * written on one machine verifies on any other. */
Test(format_blob, csum_is_xxh3_on_every_path)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;

	/* XXH3_64bits("") is 0x2D06800538D394C2 (xxHash's own test vector) */
	cr_assert_eq(fmt_csum(src, 0), 0x2D06800538D394C2ull);
	for (size_t i = 0; i < FMT_BLOB_MAX + 8192; i++) {
		tu_xorshift(&x);
		src[i] = (uint8_t)x;
	}
	for (size_t len = 0; len <= 4200; len++)
		cr_assert_eq(fmt_csum(src + (len % 61), len),
			     XXH3_64bits(src + (len % 61), len), "len %zu", len);
	for (size_t len = 4096; len <= FMT_BLOB_MAX; len = len * 2 + 13) {
		cr_assert_eq(fmt_csum(src + 3, len), XXH3_64bits(src + 3, len),
			     "len %zu", len);
		cr_assert_eq(fmt_csum(src, len), XXH3_64bits(src, len),
			     "len %zu", len);
	}
	cr_assert_eq(fmt_csum(src, FMT_BLOB_MAX), XXH3_64bits(src, FMT_BLOB_MAX));
}

/* Raw in place (dst == src): the same descriptor as a copy, the bytes
 * untouched; asking to compress in place is still refused. */
Test(format_blob, raw_in_place_describes_without_copying)
{
	struct fmt_blob a, b;

	for (size_t i = 0; i < COIL_ARRAY_LEN(sizes); i++) {
		fill_random(src, sizes[i]);
		memcpy(dec, src, sizes[i]);
		cr_assert_eq(fmt_blob_encode(NULL, 0, NULL, 0, src, sizes[i], enc,
					     sizes[i], &a), (int)sizes[i]);
		cr_assert_eq(fmt_blob_encode(cctx, 0, NULL, 0, src, sizes[i], src,
					     sizes[i], &b), (int)sizes[i]);
		cr_assert_eq(a.codec, b.codec);
		cr_assert_eq(a.stored_len, b.stored_len);
		cr_assert_eq(a.logical_len, b.logical_len);
		cr_assert_eq(a.n_csums, b.n_csums);
		cr_assert_eq(memcmp(a.csums, b.csums, a.n_csums * sizeof(a.csums[0])),
			     0, "size %u", sizes[i]);
		cr_assert_eq(memcmp(src, dec, sizes[i]), 0);
		cr_assert_eq(fmt_blob_decode(dctx, NULL, &b, src, b.stored_len,
					     enc, FMT_BLOB_MAX), (int)sizes[i]);
		cr_assert_eq(memcmp(enc, dec, sizes[i]), 0);
	}
	fill_text(src, 65536);
	cr_assert_eq(fmt_blob_encode(cctx, 1, NULL, 0, src, 65536, src, 65536,
				     &b), -EINVAL);
}
