#!/usr/bin/env bash
# perf/bench_sqlite.sh — SQLite on the coil VFS vs SQLite's default VFS, in
# one run, alternating, medians and ratios (perf/sqlite/bench_sqlite.py).
#
#   BUILD=build/release BENCH_REPEATS=5 BENCH_SCALE=1 perf/bench_sqlite.sh
#
# Builds the extension first when the build directory exists; writes
# perf/results/sqlite.json.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build/release}
if [ ! -d "$BUILD" ]; then
	meson setup "$BUILD" --buildtype=release >/dev/null
fi
if ! out=$(ninja -C "$BUILD" sqlite/libcoil_sqlite.so 2>&1); then
	printf '%s\n' "$out" >&2
	exit 1
fi
export BUILD
exec python3 perf/sqlite/bench_sqlite.py "$@"
