#!/usr/bin/env bash
# perf/bench.sh [N ...] — the side-by-side comparisons of docs/benchmarks.md
# (tools/dev.sh bench builds first, then runs this).
#
#   1  fio through coil vs fio's io_uring engine on a plain file
#   2  compressed write/read throughput per core vs zstd -b
#   3  16 concurrent 1 MiB writers, coil_pool=fair vs semaphore
#   4  cold sequential QD1 reads, prefetch on vs off
#   5  4 KiB page store vs RocksDB db_bench
#   6  disk bytes of a default store: empty, holding 1.5 GiB, emptied
#
# With no arguments all six run (about 11 minutes on 2 cores).
# Environment: BENCH_REPEATS (default 3), BENCH_SCALE (sizes and run times,
# default 1), BUILD (default build/release); per-comparison knobs are in
# each perf/bench_*.py.  Results: perf/results/*.json and *.png, and the
# run's tables in perf/results/report.md (docs/benchmarks.md is written by
# hand from them).  Scratch files live in var/bench/ (O_DIRECT
# needs a real filesystem; /tmp may be tmpfs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD=${BUILD:-build/release}
export PYTHONDONTWRITEBYTECODE=1

declare -A SCRIPT=([1]=bench_fio.py [2]=bench_codec.py [3]=bench_writers.py
                   [4]=bench_prefetch.py [5]=bench_pages.py [6]=bench_disk.py)
declare -A RESULT=([1]=fio_vs_io_uring [2]=codec_vs_zstd [3]=pool_fair_vs_semaphore
                   [4]=prefetch_on_vs_off [5]=pages_vs_rocksdb [6]=disk_space)
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(1 2 3 4 5 6)

for tool in fio zstd db_bench gnuplot python3; do
	command -v "$tool" >/dev/null || echo "bench: $tool not found (tools/dev.sh deps installs it)" >&2
done
if [ ! -e "$BUILD/perf/fio/coil-fio.so" ]; then
	echo "bench: $BUILD/perf/fio/coil-fio.so is missing; run tools/dev.sh deps, then build" >&2
	exit 1
fi

mkdir -p var/bench perf/results
t0=$SECONDS rc=0 failed=()
for n in "${which[@]}"; do
	s=${SCRIPT[$n]:-}
	[ -n "$s" ] || { echo "bench: no comparison $n (1-6)" >&2; exit 2; }
	# A failed comparison must not leave an older result to be reported.
	rm -f "perf/results/${RESULT[$n]}.json"
	if ! python3 "perf/$s"; then
		rc=1 failed+=("$n")
	fi
done
cmd="BENCH_REPEATS=${BENCH_REPEATS:-3} BENCH_SCALE=${BENCH_SCALE:-1} tools/dev.sh bench $*"
python3 perf/bench_report.py "$cmd"
# Scratch stores are large; keep var/bench/ only when asked.
[ -n "${BENCH_KEEP:-}" ] || rm -rf var/bench
echo "bench: done in $((SECONDS - t0)) s${failed:+; failed: ${failed[*]}}"
exit $rc
