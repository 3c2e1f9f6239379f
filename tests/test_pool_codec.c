/* tests/test_pool_codec.c — the typed tasks through the real format/ codec:
 * ENCODE, DECODE and RECOMPRESS on the pool's per-worker zstd contexts give
 * byte-identical results in fair and semaphore mode, round-trip, and a
 * corrupt blob fails only its own slot. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "format/format.h"
#include "pool/pool.h"
#include "tests/test_util.h"

enum { CHUNKS = 24, CHUNK = 65536 };

static uint8_t *corpus;		/* CHUNKS x CHUNK */

/* Deterministic mixed corpus: C-like text (compressible), some random
 * chunks (stored raw), some short-period runs, a short last chunk. */
static void corpus_make(void)
{
	static const char *words[] = { "static ", "int ", "struct ", "return ",
		"pool_", "submit", "(void)", ";\n", "{\n", "}\n", "\t", "if (", ") ",
		"uint64_t ", "const ", "char *", "#include <", ".h>\n", "/* ", " */" };
	uint64_t s = 0x2545F4914F6CDD1Dull;

	corpus = malloc((size_t)CHUNKS * CHUNK);
	cr_assert_not_null(corpus);
	for (size_t c = 0; c < CHUNKS; c++) {
		uint8_t *p = corpus + c * CHUNK;
		size_t off = 0;

		if (c % 5 == 3) {	/* incompressible */
			for (; off < CHUNK; off++) {
				tu_xorshift(&s);
				p[off] = (uint8_t)s;
			}
			continue;
		}
		while (off < CHUNK) {
			const char *w;

			tu_xorshift(&s);
			w = words[s % COIL_ARRAY_LEN(words)];
			for (; *w && off < CHUNK; w++)
				p[off++] = (uint8_t)*w;
		}
	}
}

static void corpus_free(void)
{
	free(corpus);
}

static uint32_t chunk_len(int c)
{
	return c == CHUNKS - 1 ? 12345 : CHUNK;	/* a short tail blob */
}

struct run {
	uint8_t *dst;			/* CHUNKS x CHUNK stored bytes */
	struct fmt_blob blob[CHUNKS];
	struct pool_task t[CHUNKS];
	struct pool_req r;
};

static void encode_all(struct pool *p, struct run *x, int level,
		       const ZSTD_CDict *cdict, uint32_t dict_id)
{
	x->dst = malloc((size_t)CHUNKS * CHUNK);
	cr_assert_not_null(x->dst);
	for (int c = 0; c < CHUNKS; c++) {
		struct pool_task *t = &x->t[c];

		memset(t, 0, sizeof(*t));
		t->kind = POOL_TASK_ENCODE_BLOB;
		t->u.encode.src = corpus + (size_t)c * CHUNK;
		t->u.encode.len = chunk_len(c);
		t->u.encode.level = level;
		t->u.encode.cdict = cdict;
		t->u.encode.dict_id = dict_id;
		t->u.encode.dst = x->dst + (size_t)c * CHUNK;
		t->u.encode.dst_cap = CHUNK;
		t->u.encode.out = &x->blob[c];
	}
	cr_assert_eq(pool_submit(p, &x->r, x->t, CHUNKS, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&x->r), 0);
	for (int c = 0; c < CHUNKS; c++)
		cr_assert_eq(x->t[c].result, x->blob[c].stored_len);
}

static void decode_check(struct pool *p, struct run *x, const ZSTD_DDict *ddict)
{
	static struct pool_task t[CHUNKS];
	struct pool_req r;
	uint8_t *out = malloc((size_t)CHUNKS * CHUNK);

	cr_assert_not_null(out);
	for (int c = 0; c < CHUNKS; c++) {
		memset(&t[c], 0, sizeof(t[c]));
		t[c].kind = POOL_TASK_DECODE_BLOB;
		t[c].u.decode.blob = &x->blob[c];
		t[c].u.decode.ddict = ddict;
		t[c].u.decode.stored = x->dst + (size_t)c * CHUNK;
		t[c].u.decode.stored_len = x->blob[c].stored_len;
		t[c].u.decode.dst = out + (size_t)c * CHUNK;
		t[c].u.decode.dst_cap = CHUNK;
	}
	cr_assert_eq(pool_submit(p, &r, t, CHUNKS, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&r), 0);
	for (int c = 0; c < CHUNKS; c++) {
		cr_assert_eq(t[c].result, chunk_len(c));
		cr_assert_eq(memcmp(out + (size_t)c * CHUNK, corpus + (size_t)c * CHUNK,
				    chunk_len(c)), 0, "chunk %d", c);
	}
	free(out);
}

static void same_blobs(const struct run *a, const struct run *b)
{
	for (int c = 0; c < CHUNKS; c++) {
		const struct fmt_blob *x = &a->blob[c], *y = &b->blob[c];

		cr_assert_eq(x->codec, y->codec);
		cr_assert_eq(x->stored_len, y->stored_len);
		cr_assert_eq(x->logical_len, y->logical_len);
		cr_assert_eq(x->n_csums, y->n_csums);
		cr_assert_eq(memcmp(x->csums, y->csums, x->n_csums * sizeof(x->csums[0])), 0);
		cr_assert_eq(memcmp(a->dst + (size_t)c * CHUNK, b->dst + (size_t)c * CHUNK,
				    x->stored_len), 0, "chunk %d stored bytes differ", c);
	}
}

TestSuite(pool_codec, .init = corpus_make, .fini = corpus_free);

Test(pool_codec, fair_and_semaphore_encode_identically)
{
	struct pool_opts fo = { .workers = 3, .mode = POOL_MODE_FAIR };
	struct pool_opts so = { .workers = 3, .mode = POOL_MODE_SEMAPHORE };
	struct pool *fp, *sp;
	static struct run f, s;
	int raw = 0, zstd = 0;

	cr_assert_eq(pool_create(&fo, &fp), 0);
	cr_assert_eq(pool_create(&so, &sp), 0);
	encode_all(fp, &f, 3, NULL, 0);
	encode_all(sp, &s, 3, NULL, 0);
	same_blobs(&f, &s);
	for (int c = 0; c < CHUNKS; c++) {
		raw += f.blob[c].codec == FMT_CODEC_RAW;
		zstd += f.blob[c].codec == FMT_CODEC_ZSTD;
	}
	cr_assert_gt(raw, 0, "random chunks should be stored raw");
	cr_assert_gt(zstd, 0, "text chunks should compress");
	decode_check(sp, &f, NULL);
	decode_check(fp, &s, NULL);
	pool_destroy(fp);
	pool_destroy(sp);
	free(f.dst);
	free(s.dst);
}

Test(pool_codec, recompress_at_higher_level_round_trips)
{
	struct pool_opts o = { .workers = 2 };
	struct pool *p;
	static struct run lo, hi;
	static struct pool_task t[CHUNKS];
	struct pool_req r;
	uint8_t *scratch = malloc((size_t)CHUNKS * CHUNK);
	uint64_t lo_bytes = 0, hi_bytes = 0;

	cr_assert_not_null(scratch);
	cr_assert_eq(pool_create(&o, &p), 0);
	encode_all(p, &lo, 1, NULL, 0);
	hi.dst = malloc((size_t)CHUNKS * CHUNK);
	cr_assert_not_null(hi.dst);
	for (int c = 0; c < CHUNKS; c++) {
		memset(&t[c], 0, sizeof(t[c]));
		t[c].kind = POOL_TASK_RECOMPRESS;
		t[c].u.recompress.blob = &lo.blob[c];
		t[c].u.recompress.stored = lo.dst + (size_t)c * CHUNK;
		t[c].u.recompress.stored_len = lo.blob[c].stored_len;
		t[c].u.recompress.scratch = scratch + (size_t)c * CHUNK;
		t[c].u.recompress.scratch_cap = CHUNK;
		t[c].u.recompress.level = 12;
		t[c].u.recompress.dst = hi.dst + (size_t)c * CHUNK;
		t[c].u.recompress.dst_cap = CHUNK;
		t[c].u.recompress.out = &hi.blob[c];
	}
	cr_assert_eq(pool_submit(p, &r, t, CHUNKS, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&r), 0);
	for (int c = 0; c < CHUNKS; c++) {
		cr_assert_eq(t[c].result, hi.blob[c].stored_len);
		lo_bytes += lo.blob[c].stored_len;
		hi_bytes += hi.blob[c].stored_len;
	}
	cr_assert_lt(hi_bytes, lo_bytes, "level 12 (%lu) not smaller than level 1 (%lu)",
		     (unsigned long)hi_bytes, (unsigned long)lo_bytes);
	decode_check(p, &hi, NULL);
	pool_destroy(p);
	free(lo.dst);
	free(hi.dst);
	free(scratch);
}

Test(pool_codec, dictionary_encode_decode)
{
	struct pool_opts o = { .workers = 2 };
	struct pool *p;
	static struct run d;
	ZSTD_CDict *cd;
	ZSTD_DDict *dd;

	/* A raw-content dictionary: the first 16 KiB of text. */
	cd = ZSTD_createCDict(corpus, 16384, 3);
	dd = ZSTD_createDDict(corpus, 16384);
	cr_assert(cd && dd);
	cr_assert_eq(pool_create(&o, &p), 0);
	encode_all(p, &d, 3, cd, 9);
	for (int c = 0; c < CHUNKS; c++)
		if (d.blob[c].codec == FMT_CODEC_ZSTD)
			cr_assert_eq(d.blob[c].dict_id, 9);
	decode_check(p, &d, dd);
	pool_destroy(p);
	ZSTD_freeCDict(cd);
	ZSTD_freeDDict(dd);
	free(d.dst);
}

/* A corrupt blob is -EIO in its own slot; the rest of the request decodes
 * and a concurrent request is unaffected. */
Test(pool_codec, corrupt_blob_fails_only_its_slot)
{
	struct pool_opts o = { .workers = 2 };
	struct pool *p;
	static struct run x;
	static struct pool_task t[CHUNKS];
	struct pool_req r;
	uint8_t *out = malloc((size_t)CHUNKS * CHUNK);
	int bad = -1, bad_raw = -1;

	cr_assert_not_null(out);
	cr_assert_eq(pool_create(&o, &p), 0);
	encode_all(p, &x, 3, NULL, 0);
	for (int c = 0; c < CHUNKS; c++) {
		if (bad < 0 && x.blob[c].codec == FMT_CODEC_ZSTD)
			bad = c;
		if (bad_raw < 0 && x.blob[c].codec == FMT_CODEC_RAW)
			bad_raw = c;
	}
	cr_assert(bad >= 0 && bad_raw >= 0);
	x.dst[(size_t)bad * CHUNK + x.blob[bad].stored_len / 2] ^= 0x40;
	x.dst[(size_t)bad_raw * CHUNK + 5000] ^= 0x01;
	for (int c = 0; c < CHUNKS; c++) {
		memset(&t[c], 0, sizeof(t[c]));
		t[c].kind = POOL_TASK_DECODE_BLOB;
		t[c].u.decode.blob = &x.blob[c];
		t[c].u.decode.stored = x.dst + (size_t)c * CHUNK;
		t[c].u.decode.stored_len = x.blob[c].stored_len;
		t[c].u.decode.dst = out + (size_t)c * CHUNK;
		t[c].u.decode.dst_cap = CHUNK;
	}
	cr_assert_eq(pool_submit(p, &r, t, CHUNKS, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&r), -EIO);
	for (int c = 0; c < CHUNKS; c++) {
		if (c == bad || c == bad_raw) {
			cr_assert_eq(t[c].result, -EIO, "chunk %d", c);
			continue;
		}
		cr_assert_eq(t[c].result, chunk_len(c));
		cr_assert_eq(memcmp(out + (size_t)c * CHUNK, corpus + (size_t)c * CHUNK,
				    chunk_len(c)), 0);
	}
	/* A task with missing buffers is -EINVAL in its slot, not a crash. */
	t[0].u.decode.dst = NULL;
	cr_assert_eq(pool_submit(p, &r, t, 1, NULL, NULL, 0), 0);
	cr_assert_eq(pool_join(&r), -EINVAL);
	pool_destroy(p);
	free(x.dst);
	free(out);
}
