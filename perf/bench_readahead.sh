#!/usr/bin/env bash
# perf/bench_readahead.sh — prefetch on vs off (cold sequential
# QD1 16 KiB reads) and the decoded-blob cache on vs off (random 4 KiB
# reads, a working set that fits the cache and one that does not), side by
# side in one run, alternating, repeated, medians and paired ratios.
#
#   perf/bench_readahead.sh [BUILD_DIR] [extra bench_readahead args...]
#   COIL_RA_MIB=768 perf/bench_readahead.sh      # the full-size run
#
# The store lives in var/bench/ under the checkout (O_DIRECT needs a real
# filesystem; /tmp may be tmpfs).  Writes perf/results/readahead.json.
# Default size (256 MiB object, 5 repeats) takes about a minute on 2 cores.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build/release-readahead}
shift || true

if [ ! -f "$BUILD/build.ninja" ]; then
	meson setup "$BUILD" "$ROOT" --buildtype=release >/dev/null
fi
ninja -C "$BUILD" perf/bench_readahead >/dev/null

mkdir -p "$ROOT/var/bench/readahead" "$ROOT/perf/results"
OUT="$ROOT/perf/results/readahead.json"
"$BUILD/perf/bench_readahead" "$ROOT/var/bench/readahead" --json "$OUT" "$@" \
	| tee "$ROOT/var/bench/readahead/run.log"
echo "wrote $OUT"
