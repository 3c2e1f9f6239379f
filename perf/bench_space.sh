#!/bin/sh
# perf/bench_space.sh — sustained 4 KiB random writes on a 1 GiB
# object in a 3 GiB coil store (the cleaner keeps it writable) vs fio's
# io_uring engine on a plain 1 GiB file; same run, alternating, medians,
# IOPS and p99 ratios, coil's write amplification.  See perf/space/space.py
# for the phases and knobs; results go to perf/results/space.json.
#
#   BUILD=build/release perf/bench_space.sh        (about 3-4 minutes)
#   SPACE_RUNTIME=5 SPACE_REPEATS=1 SPACE_SIZE_MIB=256 perf/bench_space.sh
set -eu
cd "$(dirname "$0")/.."
exec python3 perf/space/space.py "$@"
