/* engine/stats.c — coil_stats_json: one JSON object describing the store. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "engine/cleaner.h"
#include "engine/io/bcache.h"
#include "engine/io/readahead.h"
#include "engine/log/ckpt.h"
#include "engine/log/journal.h"
#include "engine/io/recode.h"
#include "engine/place/blob.h"
#include "engine/place/extmap.h"
#include "engine/place/object.h"
#include "engine/scrub.h"
#include "engine/stats.h"
#include "engine/store.h"

struct sbuf {
	char *p;
	size_t len, cap;
	int err;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EIO;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = (b->cap + (size_t)n + 1) * 2;
		char *np = realloc(b->p, ncap);
		if (!np) {
			b->err = -ENOMEM;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

#define LD(x) ((unsigned long long)atomic_load(&(x)))

/* One on-device extent's claim on its blob, for the sharing walk. */
struct claim {
	uint64_t dev_off;
	uint64_t obj_id;
	uint64_t stored;
};

static int claim_cmp(const void *a, const void *b)
{
	const struct claim *x = a, *y = b;

	if (x->dev_off != y->dev_off)
		return x->dev_off < y->dev_off ? -1 : 1;
	if (x->obj_id != y->obj_id)
		return x->obj_id < y->obj_id ? -1 : 1;
	return 0;
}

/* The part of space.stored that more than one object claims: per blob on
 * the device, the extents' shares summed over every object, less the
 * largest one object's sum.  Zero without clones (a blob split by an
 * overwrite stays with its one object); a whole clone adds its source's
 * stored bytes; divergent writes take it back down.  Blobs are found by
 * device offset, so sharing that replay or a checkpoint load left in
 * separate descriptors is found too.  A walk of every extent map under
 * mlock, then a sort: O(extents log extents) time, 24 bytes per extent. */
struct claims {
	struct claim *c;
	size_t n, cap;
};

static void claim_ext(void *arg, struct object *o, const struct ext *e)
{
	struct claims *cl = arg;

	if (blobd_is_mem(e->b) || cl->n == cl->cap)
		return;
	cl->c[cl->n++] = (struct claim){ e->b->dev_off, o->id, ext_stored(e) };
}

static int space_shared(struct coil_store *s, uint64_t *out)
{
	struct claims cl;
	struct claim *c;
	size_t n, cap;
	uint64_t shared = 0;

	pthread_mutex_lock(&s->mlock);
	cap = s->ext_acct.n;
	c = malloc((cap ? cap : 1) * sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&s->mlock);
		return -ENOMEM;
	}
	cl = (struct claims){ c, 0, cap };
	objtab_each_extent(s, claim_ext, &cl);
	n = cl.n;
	pthread_mutex_unlock(&s->mlock);
	qsort(c, n, sizeof(*c), claim_cmp);
	for (size_t i = 0; i < n;) {
		uint64_t total = 0, best = 0;
		size_t j = i;

		while (j < n && c[j].dev_off == c[i].dev_off) {
			uint64_t mine = 0, id = c[j].obj_id;

			while (j < n && c[j].dev_off == c[i].dev_off &&
			       c[j].obj_id == id)
				mine += c[j++].stored;
			total += mine;
			if (mine > best)
				best = mine;
		}
		shared += total - best;
		i = j;
	}
	free(c);
	*out = shared;
	return 0;
}

/* Long, but a flat list: one sb_printf per JSON section, in the order the
 * text has them (docs list the fields in that order).  Split into functions
 * it would only pass the same dozen locals around. */
int engine_stats_json_text(struct coil_store *s, unsigned flags,
			   char **text)
{
	struct sbuf b = { .p = malloc(4096), .cap = 4096 };
	uint64_t logical = 0, stored = 0, allocated = 0, free_b = 0, nobj, next, meta;
	uint64_t nsealed = 0, nfree = 0, npending = 0, nactive = 0, next_total = 0;
	uint64_t jused, jlen, jalloc, disk = 0, shared = 0;
	uint64_t mm_obj, mm_tab, mm_map, mm_blob;
	struct pool_stats ps;
	struct uring_stats us;
	int rc;

	if (!b.p)
		return -ENOMEM;
	if ((flags & COIL_STATS_SHARED) && (rc = space_shared(s, &shared))) {
		free(b.p);
		return rc;
	}
	/* Running totals, not a walk of the extent maps: mlock is held for a
	 * pass over the segment table only, so a stats call never holds up
	 * the writers' apply (every extent of a large store took ms). */
	pthread_mutex_lock(&s->mlock);
	logical = s->ext_acct.bytes;
	stored = s->ext_acct.stored;
	next_total = s->ext_acct.n;
	for (uint32_t i = 0; i < s->nseg; i++) {
		switch (s->segs[i].state) {
		case SEG_FREE: nfree++; break;
		case SEG_ACTIVE: nactive++; break;
		case SEG_SEALED: nsealed++; break;
		default: npending++; break;
		}
	}
	allocated = (nsealed + npending) * s->sb.segment_size;
	if (s->active != UINT32_MAX)
		allocated += s->active_head;
	free_b = nfree * s->sb.segment_size;
	if (s->active != UINT32_MAX)
		free_b += s->sb.segment_size - s->active_head;
	nobj = s->nobj - atomic_load(&s->dicts.count); /* the caller's */
	next = s->next_obj_id;
	meta = ckpt_payload_now(s);
	/* Metadata in memory, by the sizes asked of the allocator (it adds
	 * its own overhead): objects and their names, the two tables, the
	 * maps' allocations, and a blob descriptor per extent (an upper
	 * bound: extents that share a blob share one). */
	mm_obj = s->nobj * (sizeof(struct object) + 1) + s->name_bytes;
	mm_tab = (uint64_t)s->tab_cap * sizeof(*s->by_id) +
		 (uint64_t)s->name_cap * sizeof(*s->by_name);
	mm_map = s->ext_acct.mem;
	mm_blob = s->ext_acct.n * sizeof(struct blobd) +
		  s->ext_acct.csums * sizeof(uint64_t);
	pthread_mutex_unlock(&s->mlock);
	journal_usage(s, &jused, &jlen);
	pthread_mutex_lock(&s->jlock);
	jalloc = COIL_MIN(s->j_alloc, jlen);
	pthread_mutex_unlock(&s->jlock);
	/* What the store takes from its file system (du); a device's size */
	{
		struct stat st;

		if (fstat(s->fd, &st) == 0)
			disk = s->is_blk ? s->sb.store_size :
					   (uint64_t)st.st_blocks * 512;
	}
	pool_stats(s->pool, &ps);
	uring_stats(s->ring, &us);

	sb_printf(&b, "{\"store\":{\"size\":%llu,\"segment_size\":%u,"
		  "\"segments\":%u,\"max_blob\":%u,\"compression_level\":%d,"
		  "\"direct\":%s,\"read_only\":%s,\"sync_writes\":%s,"
		  "\"broken\":%d,\"objects\":%llu,\"next_obj_id\":%llu,"
		  "\"extents\":%llu,\"open_ns\":%llu},",
		  (unsigned long long)s->sb.store_size, s->sb.segment_size,
		  s->nseg, s->max_blob, s->level, s->direct ? "true" : "false",
		  s->rdonly ? "true" : "false",
		  s->sync_writes ? "true" : "false", atomic_load(&s->broken),
		  (unsigned long long)nobj, (unsigned long long)next,
		  (unsigned long long)next_total, LD(s->st.open_ns));
	sb_printf(&b, "\"space\":{\"logical\":%llu,\"stored\":%llu,"
		  "\"allocated\":%llu,\"free\":%llu,\"segments_free\":%llu,"
		  "\"segments_sealed\":%llu,\"segments_pending\":%llu,"
		  "\"segments_active\":%llu,\"reserve_failures\":%llu,"
		  "\"grows\":%s,\"segments_max\":%u,\"grow_steps\":%llu,"
		  "\"grow_segments\":%llu,\"grow_failures\":%llu,"
		  "\"grow_replayed\":%llu,\"disk_bytes\":%llu",
		  (unsigned long long)logical, (unsigned long long)stored,
		  (unsigned long long)allocated, (unsigned long long)free_b,
		  (unsigned long long)nfree, (unsigned long long)nsealed,
		  (unsigned long long)npending, (unsigned long long)nactive,
		  LD(s->st.reserve_fails), s->grows ? "true" : "false",
		  s->seg_cap, LD(s->st.grows), LD(s->st.grow_segs),
		  LD(s->st.grow_fails), LD(s->st.grow_replayed),
		  (unsigned long long)disk);
	if (flags & COIL_STATS_SHARED)
		sb_printf(&b, ",\"shared\":%llu", (unsigned long long)shared);
	sb_printf(&b, "},");
	{
		uint64_t el = atomic_load(&s->st.enc_logical);
		uint64_t es = atomic_load(&s->st.enc_stored);
		sb_printf(&b, "\"compression\":{\"ratio\":%.4f,"
			  "\"written_logical\":%llu,\"written_stored\":%llu,"
			  "\"blobs_raw\":%llu,\"blobs_zstd\":%llu,"
			  "\"blobs_zstd_fast\":%llu,\"writes_zero_copy\":%llu},",
			  logical ? (double)stored / (double)logical : 1.0,
			  (unsigned long long)el, (unsigned long long)es,
			  LD(s->st.blobs_raw), LD(s->st.blobs_zstd),
			  LD(s->st.blobs_zstd_fast), LD(s->st.writes_zero_copy));
		/* small writes kept in memory (and the journal) until the
		 * packer writes them densely to a segment */
		sb_printf(&b, "\"small_writes\":{\"inline\":%llu,"
			  "\"in_memory_bytes\":%llu,\"in_memory_blobs\":%llu,"
			  "\"pack_batches\":%llu,\"packed_blobs\":%llu,"
			  "\"packed_bytes\":%llu,\"pack_installed\":%llu,"
			  "\"memory_reads\":%llu},",
			  LD(s->st.inline_writes), LD(s->mem.bytes),
			  LD(s->mem.count), LD(s->st.pack_batches),
			  LD(s->st.pack_blobs), LD(s->st.pack_bytes),
			  LD(s->st.pack_installed), LD(s->st.rd_mem));
	}
	sb_printf(&b, "\"batches\":{\"applied\":%llu,\"failed\":%llu,"
		  "\"name_waits\":%llu},",
		  LD(s->st.batches), LD(s->st.batch_errors),
		  LD(s->st.batch_waits));
	sb_printf(&b, "\"io\":{\"writes\":%llu,\"write_bytes\":%llu,"
		  "\"write_errors\":%llu,\"reads\":%llu,\"read_bytes\":%llu,"
		  "\"read_errors\":%llu,\"checksum_failures\":%llu,"
		  "\"device_bytes_written\":%llu,\"device_bytes_read\":%llu,"
		  "\"flushes\":%llu,\"fsyncs\":%llu,\"fsyncs_by_caller\":%llu,"
		  "\"flush_slots\":%u,\"flushes_in_flight_max\":%llu,"
		  "\"flush_fsyncs_in_flight_max\":%llu,\"inline_encodes\":%llu,"
		  "\"inline_decodes\":%llu,\"read_splits\":%llu,"
		  "\"small_blobs_kept\":%llu,\"packed_blocks_kept\":%llu,"
		  "\"packed_block_hits\":%llu,\"packed_windows\":%llu,"
		  "\"packed_window_blocks\":%llu,\"reads_finished_by_caller\":%llu,"
		  "\"device_reads_by_caller\":%llu,\"local_decodes\":%llu,"
		  "\"buffer_pool_misses\":%llu,"
		  "\"ring_ops\":{\"read\":%llu,\"write\":%llu,\"fsync\":%llu,"
		  "\"nop\":%llu,\"writeback\":%llu},\"ring_errors\":%llu,"
		  "\"gathered_writes\":%llu,\"gather_ops\":%llu,"
		  "\"ring_enters\":%llu,\"ring_wakeups\":%llu,"
		  "\"ring_reads_one_by_one\":%llu,\"ring_read_pacing_probes\":%llu,"
		  "\"ring_read_pacing_switches\":%llu},",
		  LD(s->st.writes), LD(s->st.write_bytes), LD(s->st.write_errors),
		  LD(s->st.reads), LD(s->st.read_bytes), LD(s->st.read_errors),
		  LD(s->st.csum_failures), LD(s->st.dev_bytes_written),
		  LD(s->st.dev_bytes_read), LD(s->st.flushes), LD(s->st.fsyncs),
		  LD(s->st.fsyncs_now),
		  ENGINE_FLUSH_MAX, LD(s->st.flush_waiters_max),
		  LD(s->st.flush_fsyncs_inflight_max),
		  LD(s->st.inline_encodes), LD(s->st.inline_decodes),
		  LD(s->st.read_splits), LD(s->st.rd_small_kept),
		  LD(s->st.rd_blocks_kept), LD(s->st.rd_block_hits),
		  LD(s->st.rd_windows), LD(s->st.rd_window_blocks),
		  LD(s->st.rd_caller_finished), LD(s->st.rd_now),
		  LD(s->st.rd_local_decodes),
		  LD(s->bp.misses),
		  (unsigned long long)us.ops[URING_OP_READ],
		  (unsigned long long)us.ops[URING_OP_WRITE],
		  (unsigned long long)us.ops[URING_OP_FSYNC],
		  (unsigned long long)us.ops[URING_OP_NOP],
		  (unsigned long long)us.ops[URING_OP_WRITEBACK],
		  (unsigned long long)us.errors,
		  (unsigned long long)us.merged_writes,
		  (unsigned long long)us.merge_ops,
		  (unsigned long long)us.submit_calls,
		  (unsigned long long)us.wakeups,
		  (unsigned long long)us.read_single,
		  (unsigned long long)us.read_probes,
		  (unsigned long long)us.read_switches);
	{
		char cj[2048]; /* cleaner, histogram, amplification */

		if (cleaner_stats_fmt(s, cj, sizeof(cj)) < 0 ||
		    strlen(cj) + 1 >= sizeof(cj))
			strcpy(cj, "\"cleaner\":{}");
		sb_printf(&b, "%s,", cj);
		if (optimizer_stats_fmt(cleaner_optimizer(s), cj,
					sizeof(cj)) < 0 ||
		    strlen(cj) + 1 >= sizeof(cj))
			strcpy(cj, "\"optimizer\":{}");
		sb_printf(&b, "%s,", cj);
		/* the optimizer's dictionaries (their objects' bytes are in
		 * space.logical and space.stored too) */
		sb_printf(&b, "\"dictionaries\":{\"loaded\":%llu,"
			  "\"bytes\":%llu,\"load_failures\":%llu},",
			  LD(s->dicts.loaded), LD(s->dicts.bytes),
			  LD(s->dicts.failed));
	}
	if (!b.err) {
		/* the scrub section appends to the same buffer */
		int r = scrub_stats_json(s, &b.p, &b.len, &b.cap);

		if (r < 0)
			b.err = r;
		sb_printf(&b, ",");
	}
	/* a salvage open's notes: coil's own text, no quotes in it */
	sb_printf(&b, "\"salvage\":{\"open\":%s,\"unverified_records\":%llu,"
		  "\"notes\":[", s->salvage ? "true" : "false",
		  LD(s->salvage_unverified));
	for (uint32_t i = 0; i < s->nsalvage_notes; i++)
		sb_printf(&b, "%s\"%s\"", i ? "," : "", s->salvage_notes[i]);
	sb_printf(&b, "]},");
	sb_printf(&b, "\"journal\":{\"bytes\":%llu,\"used\":%llu,"
		  "\"chunks\":%llu,\"chunk_bytes\":%llu,\"records\":%llu,"
		  "\"full_waits\":%llu,\"replayed_chunks\":%llu,"
		  "\"replayed_records\":%llu,\"replayed_bytes\":%llu,"
		  "\"replay_ns\":%llu,\"replay_walk_ns\":%llu,"
		  "\"replay_known_chunks\":%llu,\"replay_blobs_lent\":%llu,"
		  "\"replay_blobs_copied\":%llu,\"replay_verified_ahead\":%llu,"
		  "\"replay_reads\":%llu,"
		  "\"replay_read_bytes\":%llu,\"replay_journal_reads\":%llu,"
		  "\"replay_journal_read_bytes\":%llu,"
		  "\"chunks_overlapped\":%llu,"
		  "\"chunks_by_writer\":%llu,\"turn_waits\":%llu,"
		  "\"flush_markers\":%llu,\"writebehind_asks\":%llu,"
		  "\"writebehind_bytes\":%llu,\"allocated\":%llu,"
		  "\"rate_bytes_per_s\":%llu},",
		  (unsigned long long)jlen, (unsigned long long)jused,
		  LD(s->st.chunks), LD(s->st.chunk_bytes), LD(s->st.records),
		  LD(s->st.journal_waits), LD(s->st.replayed_chunks),
		  LD(s->st.replayed_records), LD(s->st.replayed_bytes),
		  LD(s->st.replay_ns), LD(s->st.replay_walk_ns),
		  LD(s->st.replay_known_chunks), LD(s->st.replay_blobs_lent),
		  LD(s->st.replay_blobs_copied), LD(s->st.replay_verified_ahead),
		  LD(s->st.replay_reads),
		  LD(s->st.replay_read_bytes), LD(s->st.replay_journal_reads),
		  LD(s->st.replay_journal_read_bytes),
		  LD(s->st.chunks_overlapped),
		  LD(s->st.chunks_now), LD(s->st.turn_waits),
		  LD(s->st.chunks_marker), LD(s->st.jwb_asks),
		  LD(s->st.jwb_bytes), (unsigned long long)jalloc,
		  LD(s->j_rate));
	sb_printf(&b, "\"checkpoint\":{\"count\":%llu,\"bytes_written\":%llu,"
		  "\"last_ns\":%llu,\"snapshot_lock_ns_last\":%llu,"
		  "\"snapshot_lock_ns_max\":%llu,\"failures\":%llu,\"seq\":%llu,"
		  "\"area_bytes\":%llu,\"metadata_bytes\":%llu,"
		  "\"area_full_refusals\":%llu,\"deltas\":%llu,"
		  "\"delta_bytes_written\":%llu,\"base_bytes\":%llu,"
		  "\"chain_deltas\":%llu,\"chain_bytes\":%llu,"
		  "\"mirror\":%s,\"mirror_bytes_written\":%llu,"
		  "\"mirror_reads\":%llu,\"load_ns\":%llu},",
		  LD(s->st.ckpts), LD(s->st.ckpt_bytes), LD(s->st.ckpt_ns_last),
		  LD(s->st.ckpt_snap_ns_last), LD(s->st.ckpt_snap_ns_max),
		  LD(s->st.ckpt_failures), (unsigned long long)s->sb.ckpt_seq,
		  (unsigned long long)s->sb.ckpt_len, (unsigned long long)meta,
		  LD(s->st.ckpt_area_full), LD(s->st.ckpt_deltas),
		  LD(s->st.ckpt_delta_bytes),
		  (unsigned long long)s->sb.ckpt_bytes,
		  (unsigned long long)s->sb.delta_count,
		  (unsigned long long)s->sb.delta_bytes,
		  s->ck_mirror ? "true" : "false", LD(s->st.ckpt_mirror_bytes),
		  LD(s->st.ckpt_mirror_reads), LD(s->st.ckpt_load_ns));
	sb_printf(&b, "\"metadata_memory\":{\"bytes\":%llu,\"objects\":%llu,"
		  "\"tables\":%llu,\"extent_maps\":%llu,"
		  "\"blob_descriptors\":%llu},",
		  (unsigned long long)(mm_obj + mm_tab + mm_map + mm_blob),
		  (unsigned long long)mm_obj, (unsigned long long)mm_tab,
		  (unsigned long long)mm_map, (unsigned long long)mm_blob);
	sb_printf(&b, "\"pool\":{\"workers\":%u,\"mode\":\"%s\",\"capacity\":%llu,"
		  "\"in_flight\":%llu,\"peak_in_flight\":%llu,"
		  "\"tasks_run\":%llu,\"tasks_failed\":%llu,"
		  "\"requests_submitted\":%llu,\"requests_completed\":%llu,"
		  "\"submits_blocked\":%llu,\"submits_eagain\":%llu,"
		  "\"max_consecutive_same_req\":%llu,\"cpu_ns\":%llu},",
		  ps.workers, ps.mode == POOL_MODE_SEMAPHORE ? "semaphore" : "fair",
		  (unsigned long long)ps.capacity,
		  (unsigned long long)ps.in_flight,
		  (unsigned long long)ps.peak_in_flight,
		  (unsigned long long)ps.tasks_run,
		  (unsigned long long)ps.tasks_failed,
		  (unsigned long long)ps.requests_submitted,
		  (unsigned long long)ps.requests_completed,
		  (unsigned long long)ps.submits_blocked,
		  (unsigned long long)ps.submits_eagain,
		  (unsigned long long)ps.max_consecutive_same_req,
		  (unsigned long long)ps.cpu_ns);
	{
		/* cache statistics and the merged prefetch report */
		char cj[1024], pj[2048];

		if (bcache_stats_json(s, cj, sizeof(cj)) < 0)
			strcpy(cj, "{}");
		if (readahead_stats_json(s, pj, sizeof(pj)) < 0)
			strcpy(pj, "{}");
		sb_printf(&b, "\"cache\":%s,\"prefetch\":%s}", cj, pj);
	}
	rc = b.err ? b.err : b.len > INT32_MAX ? -EOVERFLOW : (int)b.len;
	if (rc < 0) {
		free(b.p);
		return rc;
	}
	*text = b.p;
	return rc;
}

int engine_stats_json(struct coil_store *s, char *out, size_t outlen,
		      unsigned flags)
{
	char *text;
	int n = engine_stats_json_text(s, flags, &text);

	if (n < 0)
		return n;
	if (outlen) {
		size_t k = COIL_MIN((size_t)n, outlen - 1);

		memcpy(out, text, k);
		out[k] = 0;
	}
	free(text);
	return n;
}
