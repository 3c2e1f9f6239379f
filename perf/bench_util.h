/* perf/bench_util.h — what the C benchmark drivers share: dying with a
 * message (a driver defines BENCH_PROG, its name, before including this),
 * a monotonic clock and a cheap generator. */
#ifndef COIL_PERF_BENCH_UTIL_H
#define COIL_PERF_BENCH_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coil.h"

static const char *prog = BENCH_PROG;

static inline void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static inline void die_rc(const char *what, int64_t rc)
{
	die("%s: %s (%" PRId64 ")", what, coil_strerror((int)rc), rc);
}

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* ---- /proc ----------------------------------------------------------- */

/* The number after @key in a "key: value" /proc file, times @unit.
 * Returns -1 when the file or the key is missing. */
static inline int64_t proc_field(const char *path, const char *key, int64_t unit)
{
	FILE *f = fopen(path, "r");
	char line[256];
	size_t kl = strlen(key);
	int64_t v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			v = strtoll(line + kl + 1, NULL, 10) * unit;
			break;
		}
	}
	fclose(f);
	return v;
}

/* ---- stats JSON ------------------------------------------------------ */

static inline char *stats_text(coil_store *s)
{
	char dummy[1];
	int need = coil_stats_json(s, dummy, sizeof(dummy));
	char *buf;
	int rc;

	if (need < 0)
		die_rc("coil_stats_json", need);
	buf = malloc((size_t)need + 1);
	if (!buf)
		die("out of memory");
	rc = coil_stats_json(s, buf, (size_t)need + 1);
	if (rc < 0)
		die_rc("coil_stats_json", rc);
	if (rc > need) /* grew between the calls: fine, truncated */
		buf[need] = '\0';
	return buf;
}

/* The unsigned number at key @key directly inside the section @sect
 * ("checkpoint" -> {"count":N,...}) of @json.  Only the section's own
 * level is searched (a nested object is skipped).  Returns false when
 * either is missing or the value is not a number. */
static inline bool json_u64(const char *json, const char *sect, const char *key,
		     uint64_t *out)
{
	char pat[128];
	const char *p;
	size_t kl;
	int depth = 0;
	bool in_str = false;

	snprintf(pat, sizeof(pat), "\"%s\":{", sect);
	p = strstr(json, pat);
	if (!p)
		return false;
	p += strlen(pat);
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	kl = strlen(pat);
	for (; *p; p++) {
		if (in_str) {
			if (*p == '\\' && p[1])
				p++;
			else if (*p == '"')
				in_str = false;
			continue;
		}
		if (*p == '{' || *p == '[') {
			depth++;
		} else if (*p == '}' || *p == ']') {
			if (depth-- == 0)
				return false; /* end of the section */
		} else if (*p == '"') {
			if (depth == 0 && strncmp(p, pat, kl) == 0) {
				char *end;
				unsigned long long v;

				p += kl;
				if (*p < '0' || *p > '9')
					return false;
				errno = 0;
				v = strtoull(p, &end, 10);
				if (errno || end == p)
					return false;
				*out = v;
				return true;
			}
			in_str = true;
		}
	}
	return false;
}

/* Like json_u64, but a missing key is fatal: the output would silently
 * report a zero otherwise. */
static inline uint64_t need_u64(const char *json, const char *sect, const char *key)
{
	uint64_t v;

	if (!json_u64(json, sect, key, &v))
		die("stats JSON has no %s.%s (engine/stats.c changed?)", sect, key);
	return v;
}

#endif
