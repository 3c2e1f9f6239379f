/* engine/log/salvage.c — the fallbacks of a COIL_SALVAGE open, and the
 * checkpoint verification it shares with the scrub.
 *
 * A normal open trusts one chain: the newest valid superblock copy names a
 * checkpoint whose checksum it holds, the checkpoint names the journal
 * point replay starts from.  Any broken link fails the open (-EIO), which
 * is right for a store that is to be written again.  A salvage open only
 * reads, so it takes the newest metadata that still verifies by itself:
 *   - both superblock copies damaged: the store is scanned block by block
 *     for checkpoint headers (magic, version, header checksum); the newest
 *     whose payload verifies, at an offset where a store of the file's
 *     size puts a checkpoint area, gives the layout (fmt_super_layout) and
 *     the replay point; a growing store's maximum is not its length, so
 *     the maxima that put an area there are tried, and the one whose
 *     segment headers sit where it says is taken;
 *   - the named checkpoint damaged: the other area's checkpoint, verified
 *     by its own header and payload checksums (the superblock no longer
 *     holds its checksum); else none, and replay starts at the oldest
 *     journal chunk of the store still in the ring.
 * Every structure is still decoded by format/ and every blob verified on
 * read, so a guess that does not fit shows up as data that does not read
 * (reported), never as wrong bytes.  Tests: tests/test_salvage.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/log/salvage.h"
#include "engine/place/dev.h"
#include "engine/store.h"

/* Bytes read at a time by the scans. */
#define SALVAGE_SCAN_PIECE (1u << 20)

void salvage_note(struct coil_store *s, const char *fmt, ...)
{
	va_list ap;

	if (s->nsalvage_notes >= STORE_SALVAGE_NOTES)
		return;
	va_start(ap, fmt);
	vsnprintf(s->salvage_notes[s->nsalvage_notes++],
		  sizeof(s->salvage_notes[0]), fmt, ap);
	va_end(ap);
}

/* The base checkpoint @sb names, and with @deltas the chain after it. */
static int base_verify(struct coil_store *s, const struct fmt_super *sb,
		       bool deltas);

int ckpt_verify(struct coil_store *s, const struct fmt_super *sb)
{
	return base_verify(s, sb, true);
}

/* The deltas that follow the base @sb names in its area, as far as they
 * link to it and verify: *@sb then names them, and replays after the last.
 * Used when no superblock names them.  @return 0 or -ENOMEM. */
static int find_deltas(struct coil_store *s, struct fmt_super *sb)
{
	uint64_t area = sb->ckpt_off[sb->ckpt_slot];
	uint64_t start = COIL_ALIGN_UP(sb->ckpt_bytes, FMT_BLOCK);
	uint64_t pos = start, prev = sb->ckpt_csum;
	uint8_t *buf = NULL;
	size_t cap = 0;
	int rc = 0;

	for (uint32_t i = 1; pos + FMT_BLOCK <= sb->ckpt_len; i++) {
		struct fmt_ckpt_delta h;
		uint64_t len;

		if (cap < FMT_BLOCK) {
			if (posix_memalign((void **)&buf, 4096, FMT_BLOCK)) {
				rc = -ENOMEM;
				break;
			}
			cap = FMT_BLOCK;
		}
		if (store_io_sync(s, URING_OP_READ, buf, FMT_BLOCK,
				  area + pos) < 0 ||
		    fmt_delta_decode(&h, buf, FMT_BLOCK) < 0 ||
		    h.store_id != fmt_super_store_id(sb) ||
		    h.base_seq != sb->ckpt_seq || h.index != i ||
		    h.prev_csum != prev || h.replay_off >= sb->journal_len)
			break;
		len = COIL_ALIGN_UP(FMT_DELTA_HDR + h.payload_len, FMT_BLOCK);
		if (len > sb->ckpt_len - pos)
			break;
		if (len > cap) {
			free(buf);
			buf = NULL;
			cap = 0;
			if (posix_memalign((void **)&buf, 4096, len)) {
				rc = -ENOMEM;
				break;
			}
			cap = len;
		}
		if (store_io_big(s, URING_OP_READ, buf, len, area + pos) < 0 ||
		    fmt_csum(buf + FMT_DELTA_HDR, h.payload_len) !=
			    h.payload_csum ||
		    fmt_delta_payload_check(&h, buf + FMT_DELTA_HDR,
					    h.payload_len) < 0)
			break;
		pos += len;
		prev = h.csum;
		sb->incompat |= FMT_INCOMPAT_CKPT_DELTA;
		sb->delta_count = i;
		sb->delta_bytes = pos - start;
		sb->delta_csum = h.csum;
		sb->replay_off = h.replay_off;
		sb->replay_seq = h.replay_seq;
		/* a growing store may have grown after its base */
		if ((sb->incompat & FMT_INCOMPAT_GROW) &&
		    h.segment_count > sb->segment_count &&
		    h.segment_count <= fmt_super_seg_capacity(sb))
			sb->segment_count = h.segment_count;
	}
	free(buf);
	return rc;
}

static int base_verify(struct coil_store *s, const struct fmt_super *sb,
		       bool deltas)
{
	uint64_t total, chain;
	struct fmt_ckpt h;
	uint8_t *buf = NULL;
	int rc;

	if (sb->ckpt_slot > 1 || sb->ckpt_bytes < FMT_BLOCK ||
	    sb->ckpt_bytes > sb->ckpt_len)
		return -EIO;
	total = COIL_ALIGN_UP(sb->ckpt_bytes, FMT_BLOCK);
	/* the base and the deltas after it (none without the bit) */
	chain = deltas ? sb->delta_bytes : 0;
	if (posix_memalign((void **)&buf, 4096, total + chain))
		return -ENOMEM;
	rc = store_io_big(s, URING_OP_READ, buf, total + chain,
			  sb->ckpt_off[sb->ckpt_slot]);
	/* A growing store's count may rise after the checkpoint was
	 * written (the next superblock write records growth). */
	if (rc == 0 && (fmt_ckpt_block_csum(buf) != sb->ckpt_csum ||
			fmt_ckpt_decode(&h, buf, FMT_BLOCK) < 0 ||
			h.store_id != fmt_super_store_id(sb) ||
			h.seq != sb->ckpt_seq ||
			FMT_BLOCK + h.payload_len != sb->ckpt_bytes ||
			h.segment_count > sb->segment_count ||
			fmt_ckpt_verify_payload(&h, buf + FMT_BLOCK,
						h.payload_len) < 0 ||
			!fmt_all_zero(buf + FMT_BLOCK + h.payload_len,
				      total - FMT_BLOCK - h.payload_len) ||
			fmt_ckpt_payload_check(&h, buf + FMT_BLOCK,
					       h.payload_len) < 0 ||
			(deltas && !fmt_delta_chain_whole(sb, buf + total))))
		rc = -EIO;
	free(buf);
	return rc;
}

/* @sb pointed at the checkpoint whose header BLOCK is @blk (decoded: @h),
 * in area @slot. */
static void point_at(struct fmt_super *sb, uint32_t slot, const uint8_t *blk,
		     const struct fmt_ckpt *h)
{
	sb->ckpt_slot = slot;
	sb->ckpt_seq = h->seq;
	sb->ckpt_bytes = FMT_BLOCK + h->payload_len;
	sb->ckpt_csum = fmt_ckpt_block_csum(blk);
	sb->replay_off = h->replay_off;
	sb->replay_seq = h->replay_seq;
	/* a base found this way is used alone */
	sb->delta_bytes = sb->delta_csum = 0;
	sb->delta_count = 0;
	sb->incompat &= ~FMT_INCOMPAT_CKPT_DELTA;
}

/* The store id as a uuid's first 8 bytes (fmt_super_store_id's reading). */
static void set_store_id(struct fmt_super *sb, uint64_t id)
{
	for (int i = 0; i < 8; i++)
		sb->uuid[i] = (uint8_t)(id >> (8 * i));
}

struct cand {
	uint64_t off;
	struct fmt_ckpt h;
	uint8_t blk[FMT_BLOCK];
};

static int cmp_cand(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	return a->h.seq > b->h.seq ? -1 : a->h.seq < b->h.seq;
}

/* A layout of a @size-byte store with a checkpoint area at @off and
 * @nseg segments: the largest max_blob that gives it (blobs up to it are
 * then accepted).  @return 0 and *@sb, or -EIO. */
static int layout_for(uint64_t size, uint64_t off, uint32_t nseg,
		      struct fmt_super *sb)
{
	for (uint32_t mb = FMT_BLOB_MAX; mb >= 4096; mb /= 2) {
		struct fmt_super t;

		if (fmt_super_layout(size, mb, &t) < 0 ||
		    t.segment_count != nseg ||
		    (t.ckpt_off[0] != off && t.ckpt_off[1] != off))
			continue;
		*sb = t;
		return 0;
	}
	return -EIO;
}

/* Does segment @i of layout @t start with this store's header for it? */
static bool seghdr_fits(struct coil_store *s, const struct fmt_super *t,
			uint64_t store_id, uint32_t i, uint8_t *blk)
{
	struct fmt_seghdr h;

	return store_io_sync(s, URING_OP_READ, blk, FMT_BLOCK,
			     t->data_off + (uint64_t)i * t->segment_size) == 0 &&
	       fmt_seghdr_decode(&h, blk, FMT_BLOCK) == 0 &&
	       h.store_id == store_id && h.index == i;
}

struct placed {
	uint64_t data_off, seg;
};

static bool tried_before(const struct placed *p, uint32_t n, uint64_t data_off,
			 uint64_t seg)
{
	for (uint32_t i = 0; i < n; i++)
		if (p[i].data_off == data_off && p[i].seg == seg)
			return true;
	return false;
}

/* A growing store's layout: its maximum is not the file's length, and the
 * areas' places depend on the maximum only through journal_len (size/16)
 * and ckpt_len (size/32), clamped.  Every maximum that puts a checkpoint
 * area at @off with room for @nseg segments is a candidate (one per
 * journal or checkpoint length, and one past both clamps); the first
 * whose first segments carry this store's headers at their places wins.
 * @return 0 and *@sb (GROW, @nseg segments in use), or -EIO. */
static int layout_grow_for(struct coil_store *s, uint64_t off,
			   uint64_t store_id, uint32_t nseg,
			   struct fmt_super *sb)
{
	const uint64_t mib = 1ull << 20;
	struct placed tried[32];
	uint32_t ntried = 0;
	uint8_t *blk = NULL;
	int rc = -EIO;

	if (posix_memalign((void **)&blk, 4096, FMT_BLOCK))
		return -ENOMEM;
	for (uint64_t k = 0; rc < 0 && k < 2 * (512 * mib / FMT_BLOCK) + 1; k++) {
		/* journal lengths first (16x), then checkpoint lengths
		 * (32x), then a maximum past every clamp */
		uint64_t jn = 128 * mib / FMT_BLOCK, size;

		if (k < jn)
			size = 16 * (mib + k * FMT_BLOCK);
		else if (k < jn + 512 * mib / FMT_BLOCK)
			size = 32 * (mib + (k - jn) * FMT_BLOCK);
		else
			size = 1ull << 40;
		for (uint32_t mb = FMT_BLOB_MAX; mb >= 4096; mb /= 2) {
			struct fmt_super t;
			uint32_t probe;

			if (fmt_super_layout(size, mb, &t) < 0 ||
			    (t.ckpt_off[0] != off && t.ckpt_off[1] != off) ||
			    fmt_super_seg_capacity(&t) < nseg)
				continue;
			/* many maxima give the same places: look once */
			if (tried_before(tried, ntried, t.data_off,
					 t.segment_size))
				continue;
			if (ntried < COIL_ARRAY_LEN(tried)) {
				tried[ntried].data_off = t.data_off;
				tried[ntried++].seg = t.segment_size;
			}
			probe = COIL_MIN(nseg, 4u);
			for (uint32_t i = 0; i < probe; i++) {
				if (!seghdr_fits(s, &t, store_id, i, blk))
					continue;
				t.incompat |= FMT_INCOMPAT_GROW;
				t.segment_count = nseg;
				t.max_blob = mb;
				*sb = t;
				rc = 0;
				break;
			}
			if (rc == 0)
				break;
		}
	}
	free(blk);
	return rc;
}

int salvage_super(struct coil_store *s, uint64_t size)
{
	struct cand *c = NULL;
	size_t n = 0, cap = 0;
	uint8_t *buf = NULL;
	uint64_t end = COIL_ALIGN_DOWN(size, FMT_BLOCK);
	int rc = -EIO;

	if (posix_memalign((void **)&buf, 4096, SALVAGE_SCAN_PIECE))
		return -ENOMEM;
	for (uint64_t off = 2 * FMT_BLOCK; off < end;) {
		uint32_t len = (uint32_t)COIL_MIN(SALVAGE_SCAN_PIECE, end - off);

		if (store_io_sync(s, URING_OP_READ, buf, len, off) < 0) {
			off += len; /* a piece that does not read: skipped */
			continue;
		}
		for (uint32_t b = 0; b < len; b += FMT_BLOCK) {
			struct fmt_ckpt h;

			if (memcmp(buf + b, "CCKP", 4) ||
			    fmt_ckpt_decode(&h, buf + b, FMT_BLOCK) < 0)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 8;
				struct cand *m = realloc(c, nc * sizeof(*c));

				if (!m) {
					rc = -ENOMEM;
					goto out;
				}
				c = m;
				cap = nc;
			}
			c[n].off = off + b;
			c[n].h = h;
			memcpy(c[n].blk, buf + b, FMT_BLOCK);
			n++;
		}
		off += len;
	}
	if (n > 1)
		qsort(c, n, sizeof(*c), cmp_cand);
	for (size_t i = 0; i < n; i++) {
		struct fmt_super sb;

		if (layout_for(end, c[i].off, c[i].h.segment_count, &sb) < 0 &&
		    layout_grow_for(s, c[i].off, c[i].h.store_id,
				    c[i].h.segment_count, &sb) < 0)
			continue;
		set_store_id(&sb, c[i].h.store_id);
		point_at(&sb, sb.ckpt_off[0] == c[i].off ? 0 : 1, c[i].blk,
			 &c[i].h);
		sb.seq = 1;
		if (base_verify(s, &sb, false) < 0)
			continue;
		rc = find_deltas(s, &sb);
		if (rc < 0)
			goto out;
		s->sb = sb;
		s->store_id = c[i].h.store_id;
		salvage_note(s, "both superblock copies are damaged: layout "
			     "rebuilt from the checkpoint (sequence %" PRIu64
			     ") found at byte %" PRIu64, c[i].h.seq, c[i].off);
		rc = 0;
		break;
	}
	if (rc < 0)
		salvage_note(s, "both superblock copies are damaged and no "
			     "checkpoint found fits a layout");
out:
	free(c);
	free(buf);
	return rc;
}

/* The checkpoint in area @slot, if it verifies by itself: *@sb is s->sb
 * pointed at it.  @return 0, -EIO, -ENOMEM. */
static int other_ckpt(struct coil_store *s, uint32_t slot,
		      struct fmt_super *sb)
{
	uint8_t *blk = NULL;
	struct fmt_ckpt h;
	int rc;

	if (posix_memalign((void **)&blk, 4096, FMT_BLOCK))
		return -ENOMEM;
	rc = store_io_sync(s, URING_OP_READ, blk, FMT_BLOCK,
			   s->sb.ckpt_off[slot]);
	if (rc == 0 && (fmt_ckpt_decode(&h, blk, FMT_BLOCK) < 0 ||
			h.store_id != s->store_id))
		rc = -EIO;
	if (rc == 0) {
		*sb = s->sb;
		point_at(sb, slot, blk, &h);
		rc = base_verify(s, sb, false);
		if (rc == 0)
			rc = find_deltas(s, sb);
	}
	free(blk);
	return rc < 0 && rc != -ENOMEM ? -EIO : rc;
}

/* No checkpoint: replay from the oldest chunk of this store in the ring. */
static int oldest_chunk(struct coil_store *s)
{
	uint64_t jlen = s->sb.journal_len, best_seq = UINT64_MAX, best = 0;
	uint8_t *buf = NULL;

	if (posix_memalign((void **)&buf, 4096, SALVAGE_SCAN_PIECE))
		return -ENOMEM;
	for (uint64_t off = 0; off < jlen;) {
		uint32_t len = (uint32_t)COIL_MIN(SALVAGE_SCAN_PIECE, jlen - off);

		if (store_io_sync(s, URING_OP_READ, buf, len,
				  s->sb.journal_off + off) == 0) {
			for (uint32_t b = 0; b < len; b += FMT_JSECT) {
				struct fmt_jchunk h;

				if (fmt_jchunk_decode(&h, buf + b, len - b) < 0 ||
				    h.store_id != s->store_id ||
				    h.seq >= best_seq)
					continue;
				best_seq = h.seq;
				best = off + b;
			}
		}
		off += len;
	}
	free(buf);
	if (best_seq == UINT64_MAX) {
		salvage_note(s, "no journal chunk of this store is left");
		s->sb.replay_off = 0;
		s->sb.replay_seq = 0; /* no chunk carries it: nothing replays */
		return 0;
	}
	s->sb.replay_off = best;
	s->sb.replay_seq = best_seq;
	salvage_note(s, "journal replayed from its oldest chunk (sequence %"
		     PRIu64 "); objects created before it are lost", best_seq);
	return 0;
}

int salvage_ckpt(struct coil_store *s)
{
	struct fmt_super sb;
	uint32_t other;
	int rc;

	if (s->sb.ckpt_slot == FMT_CKPT_SLOT_NONE)
		return 0;
	/* The base alone: a chain after it that does not verify whole is
	 * cut at its first bad delta by ckpt_load. */
	rc = base_verify(s, &s->sb, false);
	if (rc == 0 || rc == -ENOMEM)
		return rc;
	other = s->sb.ckpt_slot ? 0 : 1;
	rc = other_ckpt(s, other, &sb);
	if (rc == -ENOMEM)
		return rc;
	if (rc == 0) {
		salvage_note(s, "checkpoint (sequence %" PRIu64 ") is damaged: "
			     "the older one (sequence %" PRIu64 ") was used; "
			     "changes after it come only from the journal",
			     s->sb.ckpt_seq, sb.ckpt_seq);
		s->sb = sb;
		return 0;
	}
	salvage_note(s, "checkpoint (sequence %" PRIu64 ") is damaged and the "
		     "other area holds none that verifies", s->sb.ckpt_seq);
	s->sb.ckpt_slot = FMT_CKPT_SLOT_NONE;
	return oldest_chunk(s);
}
