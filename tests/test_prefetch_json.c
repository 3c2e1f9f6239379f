/* test_prefetch_json.c — the prefetch report's JSON form: lossless round
 * trip at the extremes, snprintf-style sizing, and refusal of bad text. */
#include <errno.h>
#include <stdio.h>
#include <criterion/criterion.h>

#include "prefetch/prefetch.h"

#define NF (sizeof(struct pf_report) / sizeof(uint64_t))

static void fill(struct pf_report *r, uint64_t seed)
{
	uint64_t *f = (uint64_t *)r;

	for (size_t i = 0; i < NF; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		f[i] = seed >> (i % 64);
	}
}

static void round_trip(const struct pf_report *r)
{
	char buf[1024];
	struct pf_report dec;
	int n = pf_report_to_json(r, buf, sizeof(buf));

	cr_assert(n > 0 && (size_t)n < sizeof(buf));
	cr_assert_eq(strlen(buf), (size_t)n);
	memset(&dec, 0xa5, sizeof(dec));
	cr_assert_eq(pf_report_from_json(buf, (size_t)n, &dec), 0, "%s", buf);
	cr_assert_eq(memcmp(&dec, r, sizeof(*r)), 0, "%s", buf);
}

Test(prefetch_json, round_trip_is_lossless_at_zero_max_and_random_values)
{
	struct pf_report r;

	memset(&r, 0, sizeof(r));
	round_trip(&r);
	memset(&r, 0xff, sizeof(r));
	round_trip(&r);
	for (uint64_t s = 1; s < 200; s++) {
		fill(&r, s);
		round_trip(&r);
	}
}

Test(prefetch_json, keys_carry_units_and_every_field_appears)
{
	struct pf_report r;
	char buf[1024];

	memset(&r, 0, sizeof(r));
	r.backpressure_ns = 7000000;
	r.demand_wait_ns = 3;
	pf_report_to_json(&r, buf, sizeof(buf));
	cr_assert(strstr(buf, "\"backpressure_ns\":7000000"));
	cr_assert(strstr(buf, "\"demand_wait_ns\":3"));
	const char *keys[] = { "submitted", "coalesced", "started",
		"completed", "cancelled", "failed", "queue_capacity",
		"peak_queue_occupancy", "backpressure_count", "demand_waits",
		"ready_before_demand", "in_flight_at_demand",
		"evicted_before_use", "reclaimed" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char k[64];

		snprintf(k, sizeof(k), "\"%s\":", keys[i]);
		cr_assert(strstr(buf, k), "missing %s", keys[i]);
	}
}

Test(prefetch_json, sizing_works_like_snprintf)
{
	struct pf_report r;
	char full[1024], small[20];

	memset(&r, 0xff, sizeof(r));
	int need = pf_report_to_json(&r, NULL, 0);

	cr_assert_gt(need, 0);
	cr_assert_eq(pf_report_to_json(&r, full, sizeof(full)), need);
	memset(small, 'x', sizeof(small));
	cr_assert_eq(pf_report_to_json(&r, small, sizeof(small)), need);
	cr_assert_eq(small[sizeof(small) - 1], '\0');
	cr_assert_eq(strncmp(small, full, sizeof(small) - 1), 0);
	/* Exactly one byte short: the closing brace must not fit. */
	char *tight = malloc((size_t)need);

	cr_assert_eq(pf_report_to_json(&r, tight, (size_t)need), need);
	cr_assert_eq(strlen(tight), (size_t)need - 1);
	free(tight);
	cr_assert_eq(pf_report_to_json(NULL, full, sizeof(full)), -EINVAL);
}

Test(prefetch_json, parser_accepts_whitespace_any_order_and_unknown_scalars)
{
	struct pf_report r, dec;
	char buf[1024], text[2048];

	fill(&r, 42);
	pf_report_to_json(&r, buf, sizeof(buf));
	/* Rebuild it reversed, spaced, with foreign keys mixed in. */
	char *fieldsv[32];
	int nf = 0;
	char *save = NULL;
	char body[1024];

	snprintf(body, sizeof(body), "%.*s", (int)strlen(buf) - 2, buf + 1);
	for (char *t = strtok_r(body, ",", &save); t; t = strtok_r(NULL, ",", &save))
		fieldsv[nf++] = t;
	size_t at = (size_t)snprintf(text, sizeof(text),
		"\n{ \"future\" : \"x\\\"y\", \"ratio\": -1.5e3 ,\"ok\":true");
	for (int i = nf - 1; i >= 0; i--)
		at += (size_t)snprintf(text + at, sizeof(text) - at, " ,\t%s",
				       fieldsv[i]);
	snprintf(text + at, sizeof(text) - at, ", \"z\": null }\r\n");
	cr_assert_eq(pf_report_from_json(text, strlen(text), &dec), 0, "%s", text);
	cr_assert_eq(memcmp(&dec, &r, sizeof(r)), 0);
	/* The C string's size including its NUL is accepted too. */
	cr_assert_eq(pf_report_from_json(buf, strlen(buf) + 1, &dec), 0);
}

static void refuse(const char *text)
{
	struct pf_report dec;

	memset(&dec, 0x5a, sizeof(dec));
	cr_assert_eq(pf_report_from_json(text, strlen(text), &dec), -EINVAL,
		     "accepted: %s", text);
	for (size_t i = 0; i < sizeof(dec); i++)
		cr_assert_eq(((unsigned char *)&dec)[i], 0x5a,
			     "output touched on failure");
}

Test(prefetch_json, malformed_text_is_refused_without_touching_output)
{
	struct pf_report r;
	char buf[1024], bad[1100];

	memset(&r, 0, sizeof(r));
	r.submitted = 5;
	int n = pf_report_to_json(&r, buf, sizeof(buf));

	refuse("");
	refuse("{");
	refuse("{}");
	refuse("[]");
	refuse("{\"submitted\":1}");
	/* every proper prefix */
	for (int i = 0; i < n; i++) {
		snprintf(bad, sizeof(bad), "%.*s", i, buf);
		refuse(bad);
	}
	/* trailing garbage, duplicate key, overflow, sign, float, lead zero */
	snprintf(bad, sizeof(bad), "%sx", buf);
	refuse(bad);
	snprintf(bad, sizeof(bad), "{\"submitted\":1,%s", buf + 1);
	refuse(bad);
	const char *swaps[] = { "18446744073709551616", "-5", "5.0", "05",
				"5e1", "\"5\"", "{}" };
	for (size_t i = 0; i < sizeof(swaps) / sizeof(swaps[0]); i++) {
		const char *p = strstr(buf, "\"submitted\":5");

		cr_assert(p);
		snprintf(bad, sizeof(bad), "%.*s\"submitted\":%s%s",
			 (int)(p - buf), buf, swaps[i],
			 p + strlen("\"submitted\":5"));
		refuse(bad);
	}
	/* nested unknown value */
	snprintf(bad, sizeof(bad), "{\"x\":{\"a\":1},%s", buf + 1);
	refuse(bad);
	/* max uint64 is fine */
	const char *p = strstr(buf, "\"submitted\":5");

	snprintf(bad, sizeof(bad), "%.*s\"submitted\":18446744073709551615%s",
		 (int)(p - buf), buf, p + strlen("\"submitted\":5"));
	struct pf_report dec;

	cr_assert_eq(pf_report_from_json(bad, strlen(bad), &dec), 0);
	cr_assert_eq(dec.submitted, UINT64_MAX);
	cr_assert_eq(pf_report_from_json(NULL, 0, &dec), -EINVAL);
}

Test(prefetch_json, merge_adds_counters_saturating_and_keeps_peaks)
{
	struct pf_report a, b;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.submitted = 3;
	a.queue_capacity = 8;
	a.peak_queue_occupancy = 5;
	a.demand_wait_ns = UINT64_MAX - 1;
	b.submitted = 4;
	b.queue_capacity = 16;
	b.peak_queue_occupancy = 2;
	b.demand_wait_ns = 10;
	pf_report_merge(&a, &b);
	cr_assert_eq(a.submitted, 7);
	cr_assert_eq(a.queue_capacity, 16);
	cr_assert_eq(a.peak_queue_occupancy, 5);
	cr_assert_eq(a.demand_wait_ns, UINT64_MAX);
}
