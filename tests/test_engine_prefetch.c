/* tests/test_engine_prefetch.c — readahead wired into reads: sequential
 * reads are served by prefetch, coil_prefetch admits, the report's counters
 * add up, cancellation races (close while in flight, overwrite, truncate),
 * and a failed prefetch read reaches the demand read as its error. */
#include <criterion/criterion.h>
#include <errno.h>
#include <unistd.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coil.h"
#include "engine_test_util.h"
#include "prefetch/prefetch.h"
#include "uring/uring_fault.h"

/* The merged report, parsed back with the prefetch module's own parser. */
static void get_report(coil_store *s, struct pf_report *r)
{
	static char js[16384];
	const char *p, *q;

	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	p = strstr(js, "\"report\":");
	cr_assert(p, "%s", js);
	p += strlen("\"report\":");
	q = strchr(p, '}');
	cr_assert(q);
	cr_assert_eq(pf_report_from_json(p, (size_t)(q - p + 1), r), 0, "%.*s",
		     (int)(q - p + 1), p);
}

/* submitted = completed + failed + cancelled once every stream is idle
 * (closed): each admission ends in exactly one of those. */
static void check_report_adds_up(const struct pf_report *r)
{
	cr_assert_eq(r->submitted, r->completed + r->failed + r->cancelled,
		     "submitted %llu != completed %llu + failed %llu + cancelled %llu",
		     (unsigned long long)r->submitted,
		     (unsigned long long)r->completed,
		     (unsigned long long)r->failed,
		     (unsigned long long)r->cancelled);
	cr_assert_leq(r->started, r->submitted);
	cr_assert_leq(r->completed + r->failed, r->started);
	/* READY comes from a completion or from a resident admission */
	cr_assert_leq(r->ready_before_demand, r->completed + r->coalesced);
	cr_assert_leq(r->in_flight_at_demand, r->started);
	cr_assert_leq(r->peak_queue_occupancy, r->queue_capacity);
}

static coil_store *make_store(const char *name, char *path, size_t plen,
			      struct coil_options *o, const char *obj,
			      uint8_t *src, size_t n)
{
	coil_store *s;

	et_path(path, plen, name);
	et_opts(o, path);
	et_fill(src, n, 3, 1);
	et_write_closed(path, o, obj, src, n);
	cr_assert_eq(coil_open(path, o, &s), 0); /* cold */
	return s;
}

Test(engine_prefetch, sequential_reads_are_prefetched)
{
	char path[256], js[16384];
	struct coil_options o;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 4u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	s = make_store("pf-seq", path, sizeof(path), &o, "seq", src, n);
	cr_assert_eq(coil_obj_open(s, "seq", 0, &h), 0);
	for (size_t off = 0; off < n; off += 16384)
		cr_assert_eq(coil_pread(h, dst + off, 16384, off), 16384);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	get_report(s, &r);
	check_report_adds_up(&r);
	/* 64 blobs; readahead starts on the third read */
	cr_assert_geq(r.completed, 55, "completed %llu",
		      (unsigned long long)r.completed);
	cr_assert_geq(r.ready_before_demand, 55);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"cache\"", "prefetch_inserts"), 50, "%s", js);
	cr_assert_gt(json_u64(js, "\"readahead\"", "sequential_reads"), 200);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Use-once: a scan that takes each prefetched blob whole drops it from the
 * cache as it goes (its memory serves the next prefetch); a reader that
 * takes blobs in parts keeps them, and reading them again hits. */
Test(engine_prefetch, whole_blob_scan_uses_prefetched_blobs_once)
{
	char path[256], js[16384];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 4u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	uint64_t dropped, bytes, hits0;

	s = make_store("pf-once", path, sizeof(path), &o, "once", src, n);
	cr_assert_eq(coil_obj_open(s, "once", 0, &h), 0);
	for (size_t off = 0; off < n; off += 65536)
		cr_assert_eq(coil_pread(h, dst + off, 65536, off), 65536);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	dropped = json_u64(js, "\"prefetch\"", "used_once_dropped");
	bytes = json_u64(js, "\"cache\"", "bytes");
	/* 64 blobs: the ones read after readahead caught up were dropped,
	 * and what stays cached is at most the window still ahead */
	cr_assert_geq(dropped, 40, "%s", js);
	cr_assert_leq(bytes, 40u * 65536, "%s", js);
	cr_assert_eq(coil_close(s), 0);

	/* The same blobs read 16 KiB at a time: nothing is dropped ... */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "once", 0, &h), 0);
	for (size_t off = 0; off < n; off += 16384)
		cr_assert_eq(coil_pread(h, dst + off, 16384, off), 16384);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"prefetch\"", "used_once_dropped"), 0,
		     "%s", js);
	cr_assert_gt(json_u64(js, "\"cache\"", "bytes"), 40u * 65536, "%s", js);
	/* ... and a second pass over them hits the cache */
	hits0 = json_u64(js, "\"cache\"", "hits");
	for (size_t off = 0; off < n; off += 65536)
		cr_assert_eq(coil_pread(h, dst + off, 65536, off), 65536);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_geq(json_u64(js, "\"cache\"", "hits"), hits0 + 60, "%s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Read [from, n) in @bs requests, @qd in flight. */
static void scan_async_from(coil_obj *h, uint8_t *dst, size_t from, size_t n,
			    size_t bs, int qd)
{
	struct counter c = COUNTER_INIT;

	for (size_t off = from; off < n; off += bs) {
		counter_wait_below(&c, qd);
		counter_add(&c);
		cr_assert_eq(coil_read(h, dst + off, bs, off, count_cb, &c), 0);
	}
	counter_wait(&c);
	cr_assert_eq(c.errors, 0);
}

static void scan_async(coil_obj *h, uint8_t *dst, size_t n, size_t bs,
		       int qd)
{
	scan_async_from(h, dst, 0, n, bs, qd);
}

/* Open @name, read it whole (@bs requests, @qd in flight), compare with
 * @src, close it, and leave the store's stats in @js. */
static void scan_checked(coil_store *s, const char *name, const uint8_t *src,
			 uint8_t *dst, size_t n, size_t bs, int qd, char *js,
			 size_t jlen)
{
	coil_obj *h;

	memset(dst, 0, n);
	cr_assert_eq(coil_obj_open(s, name, 0, &h), 0);
	scan_async(h, dst, n, bs, qd);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert(coil_stats_json(s, js, jlen) > 0);
}

/* A reader that keeps a readahead window's worth (32 blobs, 2 MiB) of other
 * reads in flight while it submits one is its own readahead: prefetching ahead of it would
 * decode each blob into a cache value only to copy it out a moment later.
 * The engine drops the policy's advice then (counted) and the reader's
 * demands decode straight into its buffer.  The same file read at QD 1
 * (sequential_reads_are_prefetched) is prefetched. */
Test(engine_prefetch, deep_reader_is_its_own_readahead, .timeout = 120)
{
	char path[256], js[16384];
	struct coil_options o;
	coil_store *s;
	size_t n = 16u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	uint64_t skips, fetched;

	s = make_store("pf-own", path, sizeof(path), &o, "own", src, n);
	scan_checked(s, "own", src, dst, n, 1u << 20, 4, js, sizeof(js));
	skips = json_u64(js, "\"prefetch\"", "deep_reader_skips");
	fetched = json_u64(js, "\"prefetch\"", "blobs_fetched");
	/* 13 reads continue the run once it triggers (the third); each is
	 * submitted with up to 3 others in flight, 2-4 MiB.  A reader the
	 * scheduler kept from submitting until its reads had drained is
	 * shallow at that moment, and readahead rightly runs then. */
	cr_assert_geq(skips, 1, "%s", js);
	cr_assert_lt(fetched, n / 65536 / 2, "%s", js);
	/* what was not prefetched was decoded into the caller's buffer: no
	 * cache values were made for it */
	cr_assert_leq(json_u64(js, "\"cache\"", "inserts"), fetched, "%s", js);
	cr_assert_eq(coil_close(s), 0);

	/* One large read at a time (4 MiB, QD 1) is a shallow reader: only
	 * the others in flight count, so it is prefetched. */
	cr_assert_eq(coil_open(path, &o, &s), 0);
	scan_checked(s, "own", src, dst, n, 4u << 20, 1, js, sizeof(js));
	cr_assert_eq(json_u64(js, "\"prefetch\"", "deep_reader_skips"), 0,
		     "%s", js);
	cr_assert_gt(json_u64(js, "\"prefetch\"", "blobs_fetched"), 0, "%s",
		     js);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* A deep reader's reads complete in bursts, and the read it submits after
 * one finds few or none of its others in flight.  That is no sign that it
 * went shallow: readahead stays out of its way for the next three reads,
 * and comes back on the fourth in a row that finds less than a window in
 * flight (a reader that really went to QD 1). */
Test(engine_prefetch, deep_reader_stays_deep_through_a_burst, .timeout = 120)
{
	char path[256], js[16384];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 16u << 20, mib = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	uint64_t adv0;

	s = make_store("pf-burst", path, sizeof(path), &o, "burst", src, n);
	cr_assert_eq(coil_obj_open(s, "burst", 0, &h), 0);
	/* deep: the last read of each batch of 4 (submitted at once: 4 may be
	 * in flight) has 3 MiB of others in flight */
	scan_async_from(h, dst, 0, 4 * mib, mib, 4);
	scan_async_from(h, dst, 4 * mib, 8 * mib, mib, 4);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	adv0 = json_u64(js, "\"readahead\"", "blobs_advised");
	/* drained: three reads at QD 1 are still the deep reader's */
	for (size_t off = 8 * mib; off < 11 * mib; off += mib)
		cr_assert_eq(coil_pread(h, dst + off, mib, off), (int64_t)mib);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"readahead\"", "blobs_advised"), adv0,
		     "readahead ran right after the burst: %s", js);
	cr_assert_geq(json_u64(js, "\"prefetch\"", "deep_reader_skips"), 1,
		      "%s", js);
	/* still at QD 1: a shallow reader now, prefetched */
	for (size_t off = 11 * mib; off < n; off += mib)
		cr_assert_eq(coil_pread(h, dst + off, mib, off), (int64_t)mib);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"readahead\"", "blobs_advised"), adv0,
		     "%s", js);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* A scan that starts shallow (QD 1 of 64 KiB reads: readahead opens its
 * window, up to 32 blobs admitted ahead) and then goes deep, with more blob
 * demands in flight than readahead has job slots (QD 4 of 1 MiB reads: 64
 * blobs, 4 slots kept for demand), into the work already admitted.  A
 * demand that finds its unit queued and cannot promote it reads the blob
 * itself; the queued prefetch must then be withdrawn, or it fetches and
 * decodes the blob a second time into a cache value nobody takes.  So:
 * every blob is decoded exactly once, and every prefetched value is
 * consumed. */
Test(engine_prefetch, deep_scan_reads_each_blob_once, .timeout = 120)
{
	char path[256], js[16384];
	struct coil_options o;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 16u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);
	uint64_t decodes, zstd_blobs, inserts, hits;

	s = make_store("pf-deep", path, sizeof(path), &o, "deep", src, n);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_eq(json_u64(js, "\"pool\"", "tasks_run"), 0, "%s", js);
	cr_assert_eq(coil_obj_open(s, "deep", 0, &h), 0);
	scan_async(h, dst, 2u << 20, 65536, 1);
	scan_async_from(h, dst, 2u << 20, n, 1u << 20, 4);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"prefetch\"", "demand_promotions") +
			     json_u64(js, "\"prefetch\"", "demand_takeovers") +
			     json_u64(js, "\"prefetch\"", "ready_no_wait"),
		     0, "the deep part never met admitted work: %s", js);
	cr_assert_eq(coil_obj_close(h), 0);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	decodes = json_u64(js, "\"pool\"", "tasks_run") +
		  json_u64(js, "\"io\"", "inline_decodes") +
		  json_u64(js, "\"io\"", "local_decodes");
	/* et_fill's blobs are half text: every one of the 256 compresses */
	zstd_blobs = n / 65536;
	/* Exactly one decode per blob, but for a value evicted between the
	 * job's insert and the demand's lookup: that costs a decode, not a
	 * byte, so up to 2 extra are let through.  (Seen on a loaded machine
	 * before readahead_demand looked again at a unit published READY
	 * after the caller's lookup: 257 for 256.)  The bug this test guards
	 * against decoded 10-15 % of a scan's blobs twice. */
	cr_assert(decodes >= zstd_blobs && decodes <= zstd_blobs + 2,
		  "decodes %llu for %llu blobs: %s",
		  (unsigned long long)decodes,
		  (unsigned long long)zstd_blobs, js);
	inserts = json_u64(js, "\"cache\"", "inserts");
	hits = json_u64(js, "\"cache\"", "hits");
	if (decodes == zstd_blobs) {
		cr_assert_eq(inserts, hits, "%s", js);
		cr_assert_eq(json_u64(js, "\"cache\"", "entries"), 0, "%s",
			     js);
	} else {
		cr_log_info("deep scan: %llu decodes for %llu blobs (the "
			    "eviction race)",
			    (unsigned long long)decodes,
			    (unsigned long long)zstd_blobs);
	}
	get_report(s, &r);
	check_report_adds_up(&r);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

Test(engine_prefetch, off_means_no_readahead)
{
	char path[256];
	struct coil_options o;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	et_path(path, sizeof(path), "pf-off");
	et_opts(&o, path);
	o.prefetch = 0;
	cr_assert_eq(coil_open(path, &o, &s), 0);
	et_fill(src, n, 4, 1);
	cr_assert_eq(coil_obj_open(s, "x", COIL_CREATE, &h), 0);
	cr_assert_eq(coil_pwrite(h, src, n, 0), (int64_t)n);
	for (size_t off = 0; off < n; off += 16384)
		cr_assert_eq(coil_pread(h, dst + off, 16384, off), 16384);
	cr_assert(memcmp(src, dst, n) == 0);
	cr_assert_eq(coil_prefetch(h, 0, n), 0);
	cr_assert_eq(coil_obj_close(h), 0);
	get_report(s, &r);
	cr_assert_eq(r.submitted, 0);
	cr_assert_eq(r.started, 0);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* coil_prefetch admits: reads of the hinted range find their blobs ready
 * or wait for them; a read that comes first to a blob still queued behind
 * busy job slots reads it itself and withdraws the prefetch.  Which of the
 * two happens is timing (a loaded machine starts the jobs late), but every
 * hinted blob is fetched once, by its prefetch or by its read: none is
 * fetched twice.  (A read may also find a prefetched blob in the cache in
 * the moment between the job's cache insert and its READY; the report
 * then counts it neither ready nor taken over, and if the handle closes
 * before that job ends, the close cancels it.) */
Test(engine_prefetch, hint_admits_and_reads_find_it)
{
	char path[256], js[16384];
	uint64_t takeovers, fetched;
	struct coil_options o;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 2u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	s = make_store("pf-hint", path, sizeof(path), &o, "h", src, n);
	cr_assert_eq(coil_obj_open(s, "h", 0, &h), 0);
	cr_assert_eq(coil_prefetch(h, 1u << 20, 8 * 65536), 0);
	/* read the hinted blobs in random order, one 4 KiB piece each */
	for (int i = 7; i >= 0; i--) {
		uint64_t off = (1u << 20) + (uint64_t)i * 65536 + 8192;
		cr_assert_eq(coil_pread(h, dst, 4096, off), 4096);
		cr_assert(memcmp(dst, src + off, 4096) == 0);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	get_report(s, &r);
	check_report_adds_up(&r);
	cr_assert_eq(r.submitted, 8);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	takeovers = json_u64(js, "\"prefetch\"", "demand_takeovers");
	fetched = json_u64(js, "\"prefetch\"", "blobs_fetched");
	cr_assert_eq(fetched + takeovers, 8,
		     "every hinted blob fetched once (%llu by prefetch + %llu "
		     "by their reads)", (unsigned long long)fetched,
		     (unsigned long long)takeovers);
	cr_assert_leq(r.ready_before_demand + takeovers, 8);
	cr_assert_geq(r.ready_before_demand + takeovers, 1);
	/* Each takeover withdrew one queued unit.  A read that found its
	 * blob in the cache between the job's insert and its READY leaves
	 * the job to end after the read: if the handle closes first, the
	 * close fences that job and it counts cancelled too.  Only those
	 * reads, the ones counted neither ready nor taken over, can add
	 * to the cancellations. */
	cr_assert_geq(r.cancelled, takeovers);
	cr_assert_leq(r.cancelled - takeovers,
		      8 - r.ready_before_demand - takeovers,
		      "cancelled %llu, takeovers %llu, ready %llu",
		      (unsigned long long)r.cancelled,
		      (unsigned long long)takeovers,
		      (unsigned long long)r.ready_before_demand);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Close while prefetch I/O is in flight: hint far ahead, close at once;
 * also start readahead with a sequential run and close in the middle.
 * Nothing leaks (ASan), close waits, and the report adds up. */
Test(engine_prefetch, close_while_in_flight, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 4u << 20;
	uint8_t *src = malloc(n), *dst = malloc(65536);

	s = make_store("pf-close", path, sizeof(path), &o, "c", src, n);
	for (int round = 0; round < 60; round++) {
		uint64_t base = (uint64_t)(round * 7 % 48) * 65536;

		cr_assert_eq(coil_obj_open(s, "c", 0, &h), 0);
		if (round % 2 == 0) {
			cr_assert_eq(coil_prefetch(h, base, 8 * 65536), 0);
		} else {
			for (int i = 0; i < 4 + round % 5; i++) {
				uint64_t off = base + (uint64_t)i * 16384;
				cr_assert_eq(coil_pread(h, dst, 16384, off), 16384);
				cr_assert(memcmp(dst, src + off, 16384) == 0);
			}
		}
		cr_assert_eq(coil_obj_close(h), 0);
		if (round % 20 == 19) { /* and a store close, cache dropped */
			cr_assert_eq(coil_close(s), 0);
			cr_assert_eq(coil_open(path, &o, &s), 0);
		}
	}
	get_report(s, &r);
	check_report_adds_up(&r);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* A pattern change cancels; an overwrite of the window and a truncate into
 * it cancel; reads after each are exact (never the old bytes). */
Test(engine_prefetch, cancel_on_pattern_overwrite_truncate, .timeout = 120)
{
	char path[256], js[16384];
	struct coil_options o;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 4u << 20;
	uint8_t *src = malloc(n), *dst = malloc(n);

	s = make_store("pf-cancel", path, sizeof(path), &o, "k", src, n);
	cr_assert_eq(coil_obj_open(s, "k", 0, &h), 0);
	for (int round = 0; round < 6; round++) {
		uint64_t base = (uint64_t)round * 10 * 65536;
		uint64_t end;

		/* sequential run: the window reaches ahead of base */
		for (int i = 0; i < 12; i++) {
			uint64_t off = base + (uint64_t)i * 16384;
			cr_assert_eq(coil_pread(h, dst, 16384, off), 16384);
			cr_assert(memcmp(dst, src + off, 16384) == 0);
		}
		end = base + 12 * 16384;
		switch (round % 3) {
		case 0: /* overwrite just ahead of the reader */
			et_fill(src + end + 65536, 65536, 500 + (uint64_t)round, 1);
			cr_assert_eq(coil_pwrite(h, src + end + 65536, 65536,
						 end + 65536), 65536);
			break;
		case 1: /* truncate into the window, then grow back */
			cr_assert_eq(coil_obj_truncate(h, end + 65536), 0);
			memset(src + end + 65536, 0, n - end - 65536);
			et_fill(src + end + 65536, 65536 * 4, 700 + (uint64_t)round, 1);
			cr_assert_eq(coil_pwrite(h, src + end + 65536, 65536 * 4,
						 end + 65536), 65536 * 4);
			cr_assert_eq(coil_obj_truncate(h, n), 0);
			break;
		default: /* random read: pattern change */
			cr_assert_eq(coil_pread(h, dst, 4096, n - 4096 * 3), 4096);
			cr_assert(memcmp(dst, src + n - 4096 * 3, 4096) == 0);
			break;
		}
		/* continue reading through the window: exact */
		cr_assert_eq(coil_pread(h, dst, 8 * 65536, end), 8 * 65536);
		cr_assert(memcmp(dst, src + end, 8 * 65536) == 0, "round %d", round);
	}
	cr_assert_eq(coil_pread(h, dst, n, 0), (int64_t)n);
	cr_assert(memcmp(dst, src, n) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	get_report(s, &r);
	check_report_adds_up(&r);
	cr_assert(coil_stats_json(s, js, sizeof(js)) > 0);
	cr_assert_gt(json_u64(js, "\"readahead\"", "cancel_overwrite") +
		     json_u64(js, "\"readahead\"", "cancel_truncate") +
		     json_u64(js, "\"readahead\"", "cancel_pattern"), 0, "%s", js);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* A prefetch read fails (fault seam: the next device read, once): the
 * demand read of that blob gets the error; the retained failure is used
 * once, and a later read of the blob succeeds. */
Test(engine_prefetch, failed_prefetch_reaches_demand, .timeout = 60)
{
	char path[256];
	struct coil_options o;
	struct uring_fault_spec f;
	struct pf_report r;
	coil_store *s;
	coil_obj *h;
	size_t n = 1u << 20;
	uint8_t *src = malloc(n), *dst = malloc(65536);
	int64_t got;

	s = make_store("pf-fail", path, sizeof(path), &o, "f", src, n);
	cr_assert_eq(coil_obj_open(s, "f", 0, &h), 0);
	memset(&f, 0, sizeof(f));
	f.fail_kind = URING_OP_READ;
	f.fail_nth = 1;
	f.fail_errno = EIO;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
	/* the hint's first job reads blob 3: that read fails */
	cr_assert_eq(coil_prefetch(h, 3 * 65536, 65536), 0);
	for (int i = 0; i < 2000; i++) {
		get_report(s, &r);
		if (r.failed)
			break;
		usleep(1000);
	}
	cr_assert_eq(r.failed, 1);
	got = coil_pread(h, dst, 4096, 3 * 65536 + 4096);
	cr_assert_eq(got, -EIO, "demand read got %lld", (long long)got);
	/* other blobs are unaffected; the failure was consumed */
	cr_assert_eq(coil_pread(h, dst, 4096, 5 * 65536), 4096);
	cr_assert(memcmp(dst, src + 5 * 65536, 4096) == 0);
	cr_assert_eq(coil_pread(h, dst, 4096, 3 * 65536 + 4096), 4096);
	cr_assert(memcmp(dst, src + 3 * 65536 + 4096, 4096) == 0);

	/* again, but the demand arrives while the failing read is in
	 * flight or queued: it waits for it and gets its error */
	memset(&f, 0, sizeof(f));
	f.fail_kind = URING_OP_READ;
	f.fail_nth = 1;
	f.fail_errno = EIO;
	cr_assert_eq(uring_fault_arm(uring_fault_last(), &f), 0);
	cr_assert_eq(coil_prefetch(h, 9 * 65536, 65536), 0);
	got = coil_pread(h, dst, 4096, 9 * 65536);
	cr_assert_eq(got, -EIO, "demand read got %lld", (long long)got);
	cr_assert_eq(coil_pread(h, dst, 4096, 9 * 65536), 4096);
	cr_assert(memcmp(dst, src + 9 * 65536, 4096) == 0);
	cr_assert_eq(coil_obj_close(h), 0);
	get_report(s, &r);
	check_report_adds_up(&r);
	cr_assert_eq(r.failed, 2);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* One damaged 4 KiB sector inside a raw blob: the prefetch of the whole
 * blob fails, yet a sequential reader of 4 KiB pieces reads every other
 * sector of that blob (each raw sector has its own checksum) and gets
 * -EIO only for the damaged one. */
Test(engine_prefetch, damaged_sector_fails_only_itself, .timeout = 60)
{
	char path[256];
	struct coil_options o;
	coil_store *s;
	coil_obj *h;
	size_t n = 1u << 20, bad = 5 * 65536 + 3 * 4096;
	uint8_t *src = malloc(n), *dst = malloc(4096), *img;
	struct stat st;
	int fd, hits = 0;
	uint64_t ra_failed = 0;

	et_path(path, sizeof(path), "pf-sector");
	et_opts(&o, path);
	o.compression = "none";
	et_fill(src, n, 7, 0); /* random: raw even if compression were on */
	et_write_closed(path, &o, "r", src, n);
	/* find the sector in the store file and flip one byte of it */
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	img = malloc(4096);
	for (off_t off = 0; off + 4096 <= st.st_size; off += 4096) {
		cr_assert_eq(pread(fd, img, 4096, off), 4096);
		if (memcmp(img, src + bad, 4096) == 0) {
			img[100] ^= 0x40;
			cr_assert_eq(pwrite(fd, img, 4096, off), 4096);
			hits++;
		}
	}
	close(fd);
	free(img);
	cr_assert_eq(hits, 1, "the sector is stored once, verbatim");

	cr_assert_eq(coil_open(path, &o, &s), 0);
	cr_assert_eq(coil_obj_open(s, "r", 0, &h), 0);
	for (size_t off = 0; off < n; off += 4096) {
		int64_t got = coil_pread(h, dst, 4096, off);

		if (off == bad) {
			cr_assert_eq(got, -EIO, "damaged sector read %lld",
				     (long long)got);
			continue;
		}
		cr_assert_eq(got, 4096, "sector at %zu: %lld", off,
			     (long long)got);
		cr_assert(memcmp(dst, src + off, 4096) == 0, "bytes at %zu", off);
	}
	cr_assert_eq(coil_obj_close(h), 0);
	{
		struct pf_report r;

		get_report(s, &r);
		ra_failed = r.failed;
	}
	/* the readahead did fetch the damaged blob whole (and failed) */
	cr_assert_geq(ra_failed, 1);
	cr_assert_eq(coil_close(s), 0);
	unlink(path);
	free(src);
	free(dst);
}

/* Many handles reading the same object sequentially at once, each with
 * its own stream, and closing while their readahead is in flight. */
static coil_store *mt_store;
static const uint8_t *mt_src;
static size_t mt_n;

static void *mt_reader(void *arg)
{
	uint8_t *buf = malloc(16384);
	uintptr_t id = (uintptr_t)arg;
	long bad = 0;

	for (int round = 0; round < 4; round++) {
		coil_obj *h;
		uint64_t start = ((id * 13 + (uint64_t)round * 5) % 32) * 65536;

		if (coil_obj_open(mt_store, "m", 0, &h) != 0) {
			bad++;
			break;
		}
		for (uint64_t off = start; off + 16384 <= mt_n &&
		     off < start + (1u << 20); off += 16384) {
			if (coil_pread(h, buf, 16384, off) != 16384 ||
			    memcmp(buf, mt_src + off, 16384) != 0)
				bad++;
		}
		if (coil_obj_close(h) != 0)
			bad++;
	}
	free(buf);
	return (void *)bad;
}

Test(engine_prefetch, concurrent_streams, .timeout = 120)
{
	char path[256];
	struct coil_options o;
	struct pf_report r;
	pthread_t t[4];
	size_t n = 4u << 20;
	uint8_t *src = malloc(n);

	mt_store = make_store("pf-mt", path, sizeof(path), &o, "m", src, n);
	mt_src = src;
	mt_n = n;
	for (uintptr_t i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, mt_reader, (void *)i);
	for (int i = 0; i < 4; i++) {
		void *bad;
		pthread_join(t[i], &bad);
		cr_assert_eq((long)bad, 0, "reader %d", i);
	}
	get_report(mt_store, &r);
	check_report_adds_up(&r);
	cr_assert_gt(r.completed, 0);
	cr_assert_eq(coil_close(mt_store), 0);
	unlink(path);
	free(src);
}
