#!/usr/bin/env bash
# perf/bench_scrub.sh — what a background scrub costs foreground I/O: two
# QD1 4 KiB random readers and one 4 KiB random writer alone, next to a
# scrub at the default rate (32 MiB/s) and next to an unlimited one; the
# phases alternate in one run (bench_scrub), then the medians over the
# rounds and their ratio to the phase without a scrub.
#
#   perf/bench_scrub.sh [BUILD_DIR] [--seconds S] [--rounds R]
#
# The store lives in var/bench/scrub/ under the checkout (O_DIRECT needs a
# real file system).  Default: 3 rounds of 3 s phases, under a minute.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build/release}
shift || true

ninja -C "$BUILD" perf/bench_scrub >/dev/null
mkdir -p "$ROOT/var/bench/scrub"
"$BUILD/perf/bench_scrub" "$ROOT/var/bench/scrub" --seconds 3 --rounds 3 "$@" |
	tee "$ROOT/var/bench/scrub/run.log"
python3 - "$ROOT/var/bench/scrub/run.log" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if not f or not f[0].isdigit():
        continue
    mode = " ".join(f[1:-4])
    rows.setdefault(mode, []).append([float(x) for x in f[-4:]])
med = {m: [statistics.median(c) for c in zip(*v)] for m, v in rows.items()}
base = med["none"]
print("\nmedians: mode, reads/s, writes/s, p99 read us, scrubbed MiB; ratios to none")
for m, v in med.items():
    print(f"  {m:16s} {v[0]:8.0f} {v[1]:8.0f} {v[2]:8.0f} {v[3]:8.1f}   "
          f"reads {v[0] / base[0]:.2f}x  writes {v[1] / base[1]:.2f}x  p99 {v[2] / base[2]:.2f}x")
PY
