/* fuzz_prefetch_json.c — libFuzzer target for pf_report_from_json: any bytes
 * either parse or are refused with -EINVAL, never read out of bounds; what
 * parses re-encodes to text that parses back to the same report. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "prefetch/prefetch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pf_report r, again;
	char buf[1024];

	/* Copy so the parser sees exactly @size bytes with nothing after
	 * them: ASan then catches any read past the end. */
	char *text = malloc(size ? size : 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	int rc = pf_report_from_json(text, size, &r);

	free(text);
	COIL_ASSERT(rc == 0 || rc == -EINVAL);
	if (rc == 0) {
		int n = pf_report_to_json(&r, buf, sizeof(buf));

		COIL_ASSERT(n > 0 && (size_t)n < sizeof(buf));
		COIL_ASSERT(pf_report_from_json(buf, (size_t)n, &again) == 0);
		COIL_ASSERT(memcmp(&r, &again, sizeof(r)) == 0);
	}
	return 0;
}
