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

# The docs/pool.md table, from the JSON just written.
python3 - "$ROOT/perf/results/pool.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("\n| T | qf | fair wall / sem | fair p50 / sem | fair p99 / sem | fair max / sem "
      "| fair CPU / sem | p99/p50 fair · sem |")
print("|---|---|---|---|---|---|---|---|")
for c in d["configs"]:
    for p in c["points"]:
        r, f, s = p["ratio_fair_over_semaphore"], p["fair"], p["semaphore"]
        print("| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f · %.2f |" % (
            p["requesters"], c["queue_factor"], r["wall_ms"], r["p50_ms"], r["p99_ms"],
            r["max_ms"], r["cpu_ms"], f["p99_over_p50"], s["p99_over_p50"]))
PY
