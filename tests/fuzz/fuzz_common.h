/* tests/fuzz/fuzz_common.h — helpers the fuzz targets share: checksum
 * "fix-ups" so the fuzzer reaches the checks behind each checksum (a random
 * mutation almost never carries a valid XXH3), and a trap that turns a
 * broken invariant into a crash libFuzzer reports. */
#ifndef COIL_FUZZ_COMMON_H
#define COIL_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"

#define FUZZ_CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

/* Re-checksum every record of a payload in place, as far as the record
 * headers stay inside it. */
static inline void fuzz_fix_records(uint8_t *p, size_t len)
{
	size_t pos = 0;
	while (len - pos >= FMT_JREC_HDR) {
		uint32_t body = coil_get_le32(p + pos + 4);
		if (body > len - pos - FMT_JREC_HDR)
			break;
		coil_put_le64(p + pos + 8, fmt_jrec_csum(p + pos, p + pos + FMT_JREC_HDR, body));
		pos += FMT_JREC_HDR + body;
	}
}

/* Walk a payload and decode every record body; returns records or -errno. */
/* The records of a payload, each typed body decoded; @known: read as
 * replay reads a chunk its walk checked (fmt_jrec_next_known: no checksum
 * computed, every bound still checked).  @return records, or -EIO. */
static inline int fuzz_walk_records_as(const uint8_t *p, size_t len,
				       bool known)
{
	static struct fmt_extent e;
	struct fmt_cursor c;
	struct fmt_jrec r;
	int n = 0, rc;
	fmt_cursor_init_ro(&c, p, len);
	while ((rc = known ? fmt_jrec_next_known(&c, &r) :
			     fmt_jrec_next(&c, &r)) == 1) {
		n++;
		FUZZ_CHECK(r.body >= p && r.body + r.len <= p + len);
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
				FUZZ_CHECK(u.c.name_len >= 1 && u.c.name_len <= FMT_NAME_MAX &&
					   !memchr(u.c.name, 0, u.c.name_len));
			break;
		case FMT_JREC_REMOVE: (void)fmt_jrec_remove_decode(&r, &u.rm); break;
		case FMT_JREC_TRUNCATE: (void)fmt_jrec_truncate_decode(&r, &u.t); break;
		case FMT_JREC_DICT: (void)fmt_jrec_dict_decode(&r, &u.d); break;
		case FMT_JREC_RENAME:
			if (fmt_jrec_rename_decode(&r, &u.rn) == 0)
				FUZZ_CHECK(u.rn.name_len >= 1 && u.rn.name_len <= FMT_NAME_MAX &&
					   !memchr(u.rn.name, 0, u.rn.name_len) &&
					   u.rn.obj_id != u.rn.replaced);
			break;
		case FMT_JREC_BATCH:
			if (fmt_jrec_batch_decode(&r, &u.b) == 0)
				FUZZ_CHECK(u.b.n_records >= 1 &&
					   u.b.n_records <= FMT_BATCH_RECS_MAX);
			break;
		case FMT_JREC_CLONE:
			if (fmt_jrec_clone_decode(&r, &u.cl) == 0)
				FUZZ_CHECK(u.cl.name_len >= 1 && u.cl.name_len <= FMT_NAME_MAX &&
					   !memchr(u.cl.name, 0, u.cl.name_len) &&
					   u.cl.src_id != u.cl.dst_id);
			break;
		case FMT_JREC_WRITE:
			if (fmt_jrec_write_decode(&r, &u.w) == 0) {
				uint32_t got = 0;
				int x;
				/* decode validated every extent: iteration cannot fail */
				while ((x = fmt_jrec_write_next(&u.w, &e)) == 1) {
					FUZZ_CHECK(e.obj_off >= u.w.off &&
						   e.obj_off + e.len <= u.w.off + u.w.len);
					FUZZ_CHECK(fmt_blob_check(&e.blob) == 0);
					got++;
				}
				FUZZ_CHECK(x == 0 && got == u.w.n_extents);
			}
			break;
		default:
			FUZZ_CHECK(0);
		}
	}
	return rc < 0 ? rc : n;
}

static inline int fuzz_walk_records(const uint8_t *p, size_t len)
{
	return fuzz_walk_records_as(p, len, false);
}

#endif
