#!/usr/bin/env bash
# perf/bench_flush.sh — do flushes starve writers?  Two 4 KiB writers alone,
# next to 32 threads calling coil_flush in a loop, and next to 32 threads
# calling coil_sync in a loop: phases alternate in one run (bench_flush),
# then the medians over the rounds and their ratio to the writers alone.
#
#   perf/bench_flush.sh [BUILD_DIR] [--seconds S] [--flushers N] [--rounds R]
#
# The store lives in var/bench/flush/ under the checkout (O_DIRECT needs a
# real file system).  Default: 5 rounds of 3 s phases, under a minute.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build/release}
shift || true

ninja -C "$BUILD" perf/bench_flush >/dev/null
mkdir -p "$ROOT/var/bench/flush"
"$BUILD/perf/bench_flush" "$ROOT/var/bench/flush" --seconds 3 --rounds 5 "$@" |
	tee "$ROOT/var/bench/flush/run.log"
awk '
	$1 ~ /^[0-9]+$/ && NF >= 5 {
		m = $2 " " $3; if (NF == 5) m = $2
		v[m] = v[m] " " $(NF - 2)
	}
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
			if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		base = median(v["none"])
		printf "\nmedian writes/s: alone %.0f | flush loop %.0f (%.2fx) | sync loop %.0f (%.2fx)\n",
			base, median(v["flush loop"]), median(v["flush loop"]) / base,
			median(v["sync loop"]), median(v["sync loop"]) / base
	}' "$ROOT/var/bench/flush/run.log"
