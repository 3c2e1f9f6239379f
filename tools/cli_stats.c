/* tools/cli_stats.c — coil stats: the library's JSON (coil_stats_json),
 * either as it is (--json, --pretty) or read back and laid out for a
 * person.  The reader below knows only as much JSON as that text uses:
 * objects, arrays of numbers, strings without escapes, numbers, booleans. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

/* Bounds of what the reader accepts: the stats text is a few hundred
 * fields, four levels deep. */
#define JSON_DEPTH_MAX 16
#define JSON_PATH_MAX 128

struct jfield {
	char path[JSON_PATH_MAX]; /* "space.logical", "prefetch.report.failed" */
	const char *v;            /* the value's text, not NUL-terminated */
	size_t vlen;
};

struct jdoc {
	struct jfield *f;
	size_t n, cap;
};

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static int jdoc_add(struct jdoc *d, const char *path, const char *v, size_t vlen)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 256;
		struct jfield *f = realloc(d->f, cap * sizeof(*f));
		if (!f)
			return -ENOMEM;
		d->f = f;
		d->cap = cap;
	}
	snprintf(d->f[d->n].path, JSON_PATH_MAX, "%s", path);
	d->f[d->n].v = v;
	d->f[d->n].vlen = vlen;
	d->n++;
	return 0;
}

/* The end of the string starting at the quote @p, after its closing quote. */
static const char *string_end(const char *p)
{
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && p[1])
			p++;
	return *p == '"' ? p + 1 : NULL;
}

/* Parse the value at @p under @path (a buffer of JSON_PATH_MAX).
 * @return the text after it, or NULL when the text is not what the
 * reader knows. */
static const char *jvalue(struct jdoc *d, const char *p, char *path, int depth)
{
	const char *q;

	p = skip_ws(p);
	if (depth > JSON_DEPTH_MAX)
		return NULL;
	if (*p == '{') {
		size_t plen = strlen(path);

		p = skip_ws(p + 1);
		if (*p == '}')
			return p + 1;
		for (;;) {
			if (*p != '"' || !(q = string_end(p)))
				return NULL;
			snprintf(path + plen, JSON_PATH_MAX - plen, "%s%.*s",
				 plen ? "." : "", (int)(q - p - 2), p + 1);
			p = skip_ws(q);
			if (*p != ':')
				return NULL;
			p = jvalue(d, p + 1, path, depth + 1);
			path[plen] = 0;
			if (!p)
				return NULL;
			p = skip_ws(p);
			if (*p == '}')
				return p + 1;
			if (*p != ',')
				return NULL;
			p = skip_ws(p + 1);
		}
	}
	if (*p == '[') {
		int nest = 0;

		for (q = p; *q; q++) {
			if (*q == '"') {
				const char *e = string_end(q);
				if (!e)
					return NULL;
				q = e - 1;
				continue;
			}
			if (*q == '[')
				nest++;
			else if (*q == ']' && --nest == 0)
				break;
		}
		if (*q != ']' || jdoc_add(d, path, p, (size_t)(q + 1 - p)) < 0)
			return NULL;
		return q + 1;
	}
	if (*p == '"') {
		q = string_end(p);
		if (!q || jdoc_add(d, path, p + 1, (size_t)(q - p - 2)) < 0)
			return NULL;
		return q;
	}
	q = p;
	while (*q && !strchr(",}] \n\t\r", *q))
		q++;
	if (q == p || jdoc_add(d, path, p, (size_t)(q - p)) < 0)
		return NULL;
	return q;
}

static const struct jfield *jget(const struct jdoc *d, const char *path)
{
	for (size_t i = 0; i < d->n; i++)
		if (!strcmp(d->f[i].path, path))
			return &d->f[i];
	return NULL;
}

/* A number field; 0 when absent (an older library without the field). */
static double jnum(const struct jdoc *d, const char *path)
{
	const struct jfield *f = jget(d, path);
	char buf[64];

	if (!f || f->vlen >= sizeof(buf))
		return 0;
	memcpy(buf, f->v, f->vlen);
	buf[f->vlen] = 0;
	return strtod(buf, NULL);
}

static unsigned long long ju(const struct jdoc *d, const char *path)
{
	return (unsigned long long)jnum(d, path);
}

static bool jtrue(const struct jdoc *d, const char *path)
{
	const struct jfield *f = jget(d, path);

	return f && f->vlen == 4 && !memcmp(f->v, "true", 4);
}

static const char *jstr(const struct jdoc *d, const char *path, char *buf,
			size_t len)
{
	const struct jfield *f = jget(d, path);

	snprintf(buf, len, "%.*s", f ? (int)f->vlen : 1, f ? f->v : "?");
	return buf;
}

/* A size field in words: "3.1 MiB".  Eight rotating buffers, so one
 * printf can hold a few. */
static const char *jsize(const struct jdoc *d, const char *path)
{
	static char bufs[8][32];
	static int next;
	char *b = bufs[next++ & 7];

	return cli_human((uint64_t)jnum(d, path), b, 32);
}

static void row(const char *label, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void row(const char *label, const char *fmt, ...)
{
	va_list ap;

	printf("  %-16s ", label);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static void render(const struct jdoc *d, const char *store)
{
	unsigned long long level = ju(d, "store.compression_level");
	double logical = jnum(d, "space.logical");
	double stored = jnum(d, "space.stored");
	double hits = jnum(d, "cache.hits"), misses = jnum(d, "cache.misses");
	char b1[64];

	printf("store '%s'\n", store);
	row("size", "%s (%llu segments of %s; blobs up to %s)",
	    jsize(d, "store.size"), ju(d, "store.segments"),
	    jsize(d, "store.segment_size"), jsize(d, "store.max_blob"));
	row("objects", "%llu (%llu extents)", ju(d, "store.objects"),
	    ju(d, "store.extents"));
	if (jnum(d, "store.broken") != 0)
		row("state", "failed: %s (no more writes are accepted)",
		    coil_strerror((int)jnum(d, "store.broken")));

	printf("\nspace\n");
	row("logical", "%-12s the objects' data", jsize(d, "space.logical"));
	row("stored", "%-12s that data on disk, after compression",
	    jsize(d, "space.stored"));
	if (logical > 0)
		row("ratio", "%-12.2f stored / logical (%.0f %% saved)",
		    stored / logical, 100.0 * (1.0 - stored / logical));
	else
		row("ratio", "%-12s stored / logical", "-");
	row("shared", "%-12s of stored, claimed by more than one object "
	    "(clones; on disk once)", jsize(d, "space.shared"));
	row("allocated", "%-12s in segments, including data not yet cleaned",
	    jsize(d, "space.allocated"));
	row("free", "%-12s %llu free segments", jsize(d, "space.free"),
	    ju(d, "space.segments_free"));
	row("on disk", "%-12s the store file's allocated blocks (du): segments, "
	    "journal, checkpoints", jsize(d, "space.disk_bytes"));

	printf("\nmetadata\n");
	row("journal", "%s ring, %s of it allocated, %s in use",
	    jsize(d, "journal.bytes"), jsize(d, "journal.allocated"),
	    jsize(d, "journal.used"));
	row("checkpoint", "%s of a %s area (sequence %llu)",
	    jsize(d, "checkpoint.metadata_bytes"),
	    jsize(d, "checkpoint.area_bytes"), ju(d, "checkpoint.seq"));
	row("in memory", "%s: objects %s, extent maps %s, blob descriptors "
	    "%s, tables %s", jsize(d, "metadata_memory.bytes"),
	    jsize(d, "metadata_memory.objects"),
	    jsize(d, "metadata_memory.extent_maps"),
	    jsize(d, "metadata_memory.blob_descriptors"),
	    jsize(d, "metadata_memory.tables"));

	printf("\nthis process (counted since this command opened the store)\n");
	/* What the open cost: the checkpoint's load, and the journal's
	 * replay, whose walk of the chain ran beside the load. */
	row("open", "%.1f ms: checkpoint load %.1f ms, journal walk %.1f ms "
	    "(beside it), replay %.1f ms of %s", jnum(d, "store.open_ns") / 1e6,
	    jnum(d, "checkpoint.load_ns") / 1e6,
	    jnum(d, "journal.replay_walk_ns") / 1e6,
	    jnum(d, "journal.replay_ns") / 1e6,
	    jsize(d, "journal.replayed_bytes"));
	/* Records no later chunk showed flushed have their data read back
	 * and verified: the part of a slow replay that is device reads. */
	if (jnum(d, "journal.replay_read_bytes") > 0)
		row("", "replay read back %s of data no flush was known to cover",
		    jsize(d, "journal.replay_read_bytes"));
	/* The codec is an option of each open, not a property of the store:
	 * data keeps the codec it was written with. */
	if (level)
		row("codec", "zstd level %llu (for writes of this open)", level);
	else
		row("codec", "none (for writes of this open)");
	row("written", "%s logical as %s stored (%llu zstd blobs, %llu raw)",
	    jsize(d, "compression.written_logical"),
	    jsize(d, "compression.written_stored"),
	    ju(d, "compression.blobs_zstd"), ju(d, "compression.blobs_raw"));
	row("cache", "%s, %s of %s in %llu entries",
	    jstr(d, "cache.policy", b1, sizeof(b1)), jsize(d, "cache.bytes"),
	    jsize(d, "cache.bytes_max"), ju(d, "cache.entries"));
	row("cache hits", "%.0f hits, %.0f misses (hit ratio %.2f)", hits, misses,
	    hits + misses > 0 ? hits / (hits + misses) : 0.0);
	row("pool", "%llu workers (%s), %llu tasks run, %llu failed, %.1f ms CPU",
	    ju(d, "pool.workers"), jstr(d, "pool.mode", b1, sizeof(b1)),
	    ju(d, "pool.tasks_run"), ju(d, "pool.tasks_failed"),
	    jnum(d, "pool.cpu_ns") / 1e6);
	row("prefetch", "%s, %llu blobs fetched, %llu ready before demand, "
	    "%llu evicted before use",
	    jtrue(d, "prefetch.enabled") ? "on" : "off",
	    ju(d, "prefetch.blobs_fetched"),
	    ju(d, "prefetch.report.ready_before_demand"),
	    ju(d, "prefetch.report.evicted_before_use"));
	row("scrub", "%s (%llu passes in this open; %llu damaged ranges, %llu "
	    "metadata errors); %s a second, every %llu s",
	    jstr(d, "scrub.last_result", b1, sizeof(b1)),
	    ju(d, "scrub.passes"), ju(d, "scrub.damaged_ranges"),
	    ju(d, "scrub.metadata_errors"),
	    ju(d, "scrub.rate_bytes_per_s") ? jsize(d, "scrub.rate_bytes_per_s") :
					      "no limit",
	    ju(d, "scrub.interval_s"));
	printf("\n'coil stats --json --pretty' shows every counter.\n");
}

/* Indent the one-line JSON: one field a line, arrays kept on one line. */
static void print_pretty(const char *j)
{
	int depth = 0, in_array = 0;

	for (const char *p = j; *p; p++) {
		if (*p == '"') {
			const char *q = string_end(p);
			size_t n = q ? (size_t)(q - p) : strlen(p);
			fwrite(p, 1, n, stdout);
			p += n - 1;
			continue;
		}
		switch (*p) {
		case '{':
			if (p[1] == '}') {
				fputs("{}", stdout);
				p++;
				break;
			}
			depth++;
			printf("{\n%*s", 2 * depth, "");
			break;
		case '}':
			depth--;
			printf("\n%*s}", 2 * depth, "");
			break;
		case '[':
			in_array++;
			putchar('[');
			break;
		case ']':
			in_array--;
			putchar(']');
			break;
		case ',':
			if (in_array)
				fputs(", ", stdout);
			else
				printf(",\n%*s", 2 * depth, "");
			break;
		case ':':
			fputs(": ", stdout);
			break;
		default:
			putchar(*p);
		}
	}
	putchar('\n');
}

int cmd_stats(int argc, char **argv)
{
	bool json = false, pretty = false;
	const struct cli_opt opts[] = {
		{ "--json", 0, NULL, &json },
		{ "--pretty", 0, NULL, &pretty },
		{ 0 },
	};
	struct jdoc d = { 0 };
	char *pos[1], *buf = NULL, path[JSON_PATH_MAX] = "";
	coil_store *s;
	int npos, n, rc, ret = CLI_FAIL;

	rc = cli_parse_args("stats", argc, argv, opts, pos, 1, &npos);
	if (rc)
		return rc;
	if (npos != 1)
		return cli_usage_error("stats", "expected STORE");
	if (pretty && !json)
		return cli_usage_error("stats", "--pretty goes with --json");
	if (cli_open_store("stats", pos[0], COIL_RDONLY, &s) < 0)
		return CLI_FAIL;
	/* a tool's own read-only open: no writer for the walk to hold up */
	n = coil_stats_json_dup(s, COIL_STATS_SHARED, &buf);
	if (n < 0) {
		cli_err("stats '%s': %s", pos[0], cli_reason(n));
	} else if (json) {
		if (pretty)
			print_pretty(buf);
		else
			puts(buf);
		ret = CLI_OK;
	} else if (!jvalue(&d, buf, path, 0)) {
		cli_err("stats '%s': the library's JSON did not parse (try "
			"--json)", pos[0]);
	} else {
		render(&d, pos[0]);
		ret = CLI_OK;
	}
	free(d.f);
	free(buf);
	if (fflush(stdout) != 0) {
		cli_err("stats: writing: %s", strerror(errno));
		ret = CLI_FAIL;
	}
	if (cli_close_store(pos[0], s) < 0)
		ret = CLI_FAIL;
	return ret;
}
