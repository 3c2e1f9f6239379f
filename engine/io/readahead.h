/* engine/io/readahead.h — per-handle readahead streams feeding prefetch/'s
 * admission machine, and the prefetch reads they issue; docs/readahead.md.
 *
 * Feedback loop: read -> readahead_demand (may wait for a prefetch) ->
 * read_blob_resume when the prefetch lands (io/read.h). */
#ifndef COIL_ENGINE_READAHEAD_H
#define COIL_ENGINE_READAHEAD_H

#include <stdint.h>
#include <stddef.h>

struct coil_store;
struct coil_obj;
struct rreq;
struct rblob;

int readahead_store_init(struct coil_store *s);
void readahead_store_destroy(struct coil_store *s);
int readahead_open(struct coil_obj *h);
/* Cancels, waits for the stream's prefetch I/O, merges its report. */
void readahead_close(struct coil_obj *h);
/* Demand for blob @rb of read @r.  @return 0 read it; 1 it waits for a
 * prefetch (read_blob_resume follows); 2 settled (rb->ce, or rb->res). */
int readahead_demand(struct coil_obj *h, struct rreq *r, struct rblob *rb);
/* The read of [off, off+len) was submitted; the handle's rd_bytes do not
 * count it yet (they are its other reads in flight). */
void readahead_on_read(struct coil_obj *h, uint64_t off, uint64_t len);
void readahead_on_write(struct coil_obj *h, uint64_t off, uint64_t len);
void readahead_on_truncate(struct coil_obj *h, uint64_t size);
int readahead_hint(struct coil_obj *h, uint64_t off, uint64_t len);
int readahead_stats_json(struct coil_store *s, char *buf, size_t len);

#endif
