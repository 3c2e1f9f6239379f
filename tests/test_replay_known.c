/* test_replay_known: replay checks each journal chunk once.  The walk of the
 * chain (on its own thread while the checkpoint loads) checks every chunk
 * whole, payload, records and inline blobs, and the apply after it decodes
 * those chunks without computing their checksums again (recovery.c,
 * walk_check_chunk).  What the apply skips must then have been checked by
 * the walk: a chunk whose own checksum is right but which carries a record
 * that is not (its checksum, or its inline blob's) is where replay stops,
 * as it did when the apply checked everything itself.
 *
 * A child writes PAGES small pages (their data rides in the journal),
 * flushes and leaves without closing.  The test then rewrites, in the
 * store file, the record of page FORGED with one byte of its data changed,
 * and seals its chunk again with a right checksum:
 *   inline_blob_forged  the record's checksum recomputed too: only the
 *                       inline blob's checksum is wrong;
 *   record_forged       the record's checksum left as it was.
 * The open replays the pages before FORGED and stops at it: the object
 * ends where page FORGED began, and no read returns the changed byte. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil.h"
#include "format/format.h"
#include "tests/engine_test_util.h"
#include "tests/super_util.h"

#define PAGES 8u
#define FORGED 5u
#define PAGE 4096u
#define JREAD (1u << 20)

static void page_of(uint8_t *buf, uint32_t p)
{
	et_fill(buf, PAGE, 0x5eed00u + p, 0);
}

/* In the child: PAGES small writes of object "a" (et_child_run syncs
 * and leaves without a close). */
static int write_pages(coil_store *s, void *arg)
{
	static uint8_t buf[PAGE];
	coil_obj *h;

	(void)arg;
	if (coil_obj_open(s, "a", COIL_CREATE, &h) != 0)
		return -1;
	for (uint32_t p = 0; p < PAGES; p++) {
		page_of(buf, p);
		if (coil_pwrite(h, buf, PAGE, (uint64_t)p * PAGE) != PAGE)
			return -1;
	}
	return 0;
}

/* The chunk at @pos of @j (@len journal bytes from the replay point), if
 * one starts there or at the next block. */
static bool chunk_at(const uint8_t *j, uint64_t len, uint64_t *pos,
		     struct fmt_jchunk *h)
{
	uint64_t tries[2] = { *pos, (*pos + FMT_BLOCK - 1) / FMT_BLOCK * FMT_BLOCK };

	for (int i = 0; i < 2; i++) {
		if (tries[i] + FMT_BLOCK > len ||
		    fmt_jchunk_decode(h, j + tries[i], len - tries[i]) < 0 ||
		    tries[i] + fmt_jchunk_len(h) > len)
			continue;
		*pos = tries[i];
		return true;
	}
	return false;
}

/* Change one byte of page FORGED's data in its record and seal the chunk
 * again; @record_csum: recompute the record's checksum as well. */
static void forge(const char *path, bool record_csum)
{
	struct fmt_super sb = et_newest_super(path);
	uint8_t *j = malloc(JREAD);
	uint64_t pos = 0, len;
	bool done = false;
	int fd = open(path, O_RDWR);
	ssize_t got;

	cr_assert_geq(fd, 0);
	/* the chain from the replay point, up to the ring's end or the
	 * file's (a new store's chain is short and does not wrap) */
	len = sb.journal_len - sb.replay_off < JREAD ?
		      sb.journal_len - sb.replay_off : JREAD;
	got = pread(fd, j, len, (off_t)(sb.journal_off + sb.replay_off));
	cr_assert_gt(got, 0);
	len = (uint64_t)got;
	for (struct fmt_jchunk h; !done && chunk_at(j, len, &pos, &h);
	     pos += fmt_jchunk_len(&h)) {
		uint8_t *payload = j + pos + FMT_JCHUNK_HDR;
		struct fmt_cursor c;
		struct fmt_jrec r;

		cr_assert_eq(fmt_jchunk_verify_payload(&h, payload, h.payload_len), 0);
		fmt_cursor_init_ro(&c, payload, h.payload_len);
		while (!done && fmt_jrec_next(&c, &r) == 1) {
			struct fmt_jrec_write w;
			struct fmt_extent e;
			uint8_t *hdr = (uint8_t *)r.body - FMT_JREC_HDR;

			if (r.type != FMT_JREC_WRITE ||
			    fmt_jrec_write_decode(&r, &w) < 0 ||
			    w.off != (uint64_t)FORGED * PAGE)
				continue;
			cr_assert_eq(fmt_jrec_write_next(&w, &e), 1);
			cr_assert(e.blob.flags & FMT_BLOB_INLINE,
				  "page %u rides in the journal", FORGED);
			((uint8_t *)e.inl)[100] ^= 0x40;
			if (record_csum)
				coil_put_le64(hdr + 8, fmt_jrec_csum(hdr, r.body,
								     r.len));
			h.payload_csum = fmt_csum(payload, h.payload_len);
			cr_assert_eq(fmt_jchunk_encode(&h, j + pos, FMT_JCHUNK_HDR),
				     FMT_JCHUNK_HDR);
			done = true;
		}
	}
	cr_assert(done, "page %u's record is in the journal", FORGED);
	cr_assert_eq(pwrite(fd, j, len, (off_t)(sb.journal_off + sb.replay_off)),
		     (ssize_t)len);
	cr_assert_eq(fsync(fd), 0);
	close(fd);
	free(j);
}

static void forged_replay(bool record_csum)
{
	static uint8_t want[PAGE], got[PAGE];
	struct coil_options o;
	char path[256], js[16384];
	coil_store *s;
	coil_obj *h;
	uint64_t size, chunks, known;

	et_path(path, sizeof(path), "replay-known");
	et_opts(&o, path);
	o.compression = "none";
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_close(s), 0);
	o.flags &= ~COIL_CREATE;
	et_child_run(path, &o, write_pages, NULL, true);
	forge(path, record_csum);

	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_gt(coil_stats_json(s, js, sizeof(js)), 0);
	chunks = json_u64(js, "\"journal\"", "replayed_chunks");
	known = json_u64(js, "\"journal\"", "replay_known_chunks");
	/* the walk stopped checking at the forged chunk, and the apply
	 * checked that one itself */
	cr_assert_lt(known, chunks, "%llu of %llu chunks taken as checked",
		     (unsigned long long)known, (unsigned long long)chunks);
	cr_assert_eq(coil_obj_open(s, "a", 0, &h), 0);
	cr_assert_eq(coil_obj_size(h, &size), 0);
	cr_assert_eq(size, (uint64_t)FORGED * PAGE,
		     "replay stops at the forged record: size %llu",
		     (unsigned long long)size);
	for (uint32_t p = 0; p < FORGED; p++) {
		page_of(want, p);
		cr_assert_eq(coil_pread(h, got, PAGE, (uint64_t)p * PAGE), PAGE);
		cr_assert(memcmp(got, want, PAGE) == 0, "page %u", p);
	}
	cr_assert_eq(coil_pread(h, got, PAGE, (uint64_t)FORGED * PAGE), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
}

Test(replay_known, inline_blob_forged, .timeout = 60)
{
	forged_replay(true);
}

Test(replay_known, record_forged, .timeout = 60)
{
	forged_replay(false);
}
