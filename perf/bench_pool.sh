#!/usr/bin/env bash
# perf/bench_pool.sh — fair pool vs the semaphore, side by side in one run.
#
#   perf/bench_pool.sh [BUILD_DIR] [extra bench_pool args...]
#
# Builds bench_pool (release) if needed, makes the corpus (a tar of
# /usr/include), runs the sweep and writes perf/results/pool.json.  A full
# run takes about 1-2 minutes on 2 cores.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build/release}
shift || true

if [ ! -f "$BUILD/build.ninja" ]; then
	meson setup "$BUILD" "$ROOT" --buildtype=release >/dev/null
fi
ninja -C "$BUILD" perf/bench_pool >/dev/null

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
tar -cf "$TMP/include.tar" -C /usr include 2>/dev/null || true

mkdir -p "$ROOT/perf/results"
"$BUILD/perf/bench_pool" --corpus "$TMP/include.tar" \
	--json "$ROOT/perf/results/pool.json" "$@"
echo "wrote $ROOT/perf/results/pool.json"
