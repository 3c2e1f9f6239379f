/* prefetch/report_json.c — the pf_report as one flat JSON object, and back.
 *
 * The report is embedded in coil_stats_json and read back by tools and
 * tests, so the round trip must be lossless: every field is an unsigned
 * 64-bit decimal, durations carry their unit in the key (…_ns).  The parser
 * is deliberately small (flat object, scalar values) and never trusts its
 * input: every byte is bounds-checked against @len.
 */
#include <errno.h>
#include <stdio.h>

#include "common/common.h"
#include "prefetch/prefetch.h"

struct field {
	const char *name;
	size_t off;
};

#define F(x) { #x, offsetof(struct pf_report, x) }
static const struct field fields[] = {
	F(submitted),
	F(coalesced),
	F(started),
	F(completed),
	F(cancelled),
	F(failed),
	F(queue_capacity),
	F(peak_queue_occupancy),
	F(backpressure_count),
	F(backpressure_ns),
	F(demand_waits),
	F(demand_wait_ns),
	F(ready_before_demand),
	F(in_flight_at_demand),
	F(evicted_before_use),
	F(reclaimed),
};
#undef F

#define NFIELDS COIL_ARRAY_LEN(fields)
_Static_assert(sizeof(struct pf_report) == NFIELDS * sizeof(uint64_t),
	       "every pf_report field must be serialized");

static uint64_t *field_ptr(struct pf_report *r, size_t i)
{
	return (uint64_t *)((char *)r + fields[i].off);
}

int pf_report_to_json(const struct pf_report *r, char *buf, size_t len)
{
	if (!r || (!buf && len))
		return -EINVAL;

	size_t need = 0;

	for (size_t i = 0; i < NFIELDS; i++) {
		uint64_t v = *field_ptr((struct pf_report *)r, i);
		size_t room = need < len ? len - need : 0;
		int n = snprintf(room ? buf + need : NULL, room, "%s\"%s\":%llu",
				 i == 0 ? "{" : ",", fields[i].name,
				 (unsigned long long)v);

		if (n < 0)
			return -EINVAL;
		need += (size_t)n;
	}
	if (need + 1 < len) {
		buf[need] = '}';
		buf[need + 1] = '\0';
	} else if (len) {
		buf[len - 1] = '\0';
	}
	need += 1;
	/* 16 fields of at most ~45 bytes: always fits an int. */
	return (int)need;
}

struct cursor {
	const char *p;
	const char *end;
};

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' ||
				 *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static bool eat(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return true;
	}
	return false;
}

/* A string: sets [*s, *s + *n) to its raw bytes (escapes left as is; no
 * known key contains one, so an escaped key simply never matches). */
static int parse_string(struct cursor *c, const char **s, size_t *n)
{
	if (!eat(c, '"'))
		return -EINVAL;
	*s = c->p;
	while (c->p < c->end && *c->p != '"') {
		if ((unsigned char)*c->p < 0x20)
			return -EINVAL;
		if (*c->p == '\\') {
			c->p++;
			if (c->p >= c->end)
				return -EINVAL;
		}
		c->p++;
	}
	if (c->p >= c->end)
		return -EINVAL;
	*n = (size_t)(c->p - *s);
	c->p++;
	return 0;
}

static int parse_u64(struct cursor *c, uint64_t *v)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p < '0' || *c->p > '9')
		return -EINVAL;
	/* JSON forbids leading zeros; refusing them keeps the text canonical. */
	if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' &&
	    c->p[1] <= '9')
		return -EINVAL;

	uint64_t x = 0;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		if (__builtin_mul_overflow(x, 10, &x) ||
		    __builtin_add_overflow(x, (uint64_t)(*c->p - '0'), &x))
			return -EINVAL;
		c->p++;
	}
	if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
		return -EINVAL;
	*v = x;
	return 0;
}

/* Skips a scalar value of an unknown key: string, number, true/false/null.
 * Nested values are refused: the report is flat. */
static int skip_scalar(struct cursor *c)
{
	skip_ws(c);
	if (c->p >= c->end)
		return -EINVAL;
	if (*c->p == '"') {
		const char *s;
		size_t n;

		return parse_string(c, &s, &n);
	}
	static const char *const words[] = { "true", "false", "null" };

	for (size_t i = 0; i < COIL_ARRAY_LEN(words); i++) {
		size_t n = strlen(words[i]);

		if ((size_t)(c->end - c->p) >= n &&
		    memcmp(c->p, words[i], n) == 0) {
			c->p += n;
			return 0;
		}
	}
	const char *start = c->p;

	while (c->p < c->end && (*c->p == '-' || *c->p == '+' ||
				 *c->p == '.' || *c->p == 'e' ||
				 *c->p == 'E' || (*c->p >= '0' && *c->p <= '9')))
		c->p++;
	return c->p > start ? 0 : -EINVAL;
}

int pf_report_from_json(const char *json, size_t len, struct pf_report *out)
{
	if (!json || !out)
		return -EINVAL;

	struct cursor c = { json, json + len };
	struct pf_report r;
	bool seen[NFIELDS] = { false };
	size_t nseen = 0;

	memset(&r, 0, sizeof(r));
	if (!eat(&c, '{'))
		return -EINVAL;
	if (!eat(&c, '}')) {
		/* Bounded: each iteration consumes at least one byte. */
		for (;;) {
			const char *key;
			size_t klen;
			size_t i;

			if (parse_string(&c, &key, &klen) < 0 || !eat(&c, ':'))
				return -EINVAL;
			for (i = 0; i < NFIELDS; i++)
				if (strlen(fields[i].name) == klen &&
				    memcmp(fields[i].name, key, klen) == 0)
					break;
			if (i < NFIELDS) {
				if (seen[i] || parse_u64(&c, field_ptr(&r, i)) < 0)
					return -EINVAL;
				seen[i] = true;
				nseen++;
			} else if (skip_scalar(&c) < 0) {
				return -EINVAL;
			}
			if (eat(&c, '}'))
				break;
			if (!eat(&c, ','))
				return -EINVAL;
		}
	}
	skip_ws(&c);
	/* Allow one trailing NUL so a C string's full size may be passed. */
	if (c.p < c.end && *c.p == '\0' && c.p + 1 == c.end)
		c.p++;
	if (c.p != c.end || nseen != NFIELDS)
		return -EINVAL;
	*out = r;
	return 0;
}
