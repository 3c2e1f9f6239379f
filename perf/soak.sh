#!/usr/bin/env bash
# perf/soak.sh [MINUTES] [BUILD_DIR] — the reliability soak (docs/reliability.md).
#
# Two phases, each about half of MINUTES (default 10):
#  1. in parallel, for the phase's duration:
#       - test_rel_concurrent: 16 threads of mixed reads, writes, flushes,
#         truncates and removes on one store, checked against models as they
#         go and after a reopen (COIL_REL_SECONDS);
#       - fio verify through the coil ioengine (when the plugin is built:
#         BUILD_DIR/perf/fio/coil-fio.so or $COIL_FIO), random writes with
#         crc32c verify_backlog, time based; and the same job with fio's own
#         io_uring engine on a plain file (the machine's own sanity check);
#       - a sampler: RSS (VmRSS) of every process above every 5 s into
#         rss.csv; jemalloc's own stats printed at the end of the concurrent
#         run (MALLOC_CONF=stats_print:true, when jemalloc is linked).
#  2. the generators of the CI suite (kill -9, power cuts, Nth-I/O faults,
#     corruption, API fuzzing with cuts, fuzz targets) with their counts
#     scaled to the duration (COIL_REL_SCALE), one after another.
# Every run prints its seed; a failure is replayed with COIL_REL_SEED and the
# same COIL_REL_SCALE (docs/reliability.md).
#
# Bounds (environment): SOAK_RSS_MAX_MIB (default 1024) is the most any
# sampled process may reach; the concurrent test itself fails if its RSS
# grows by more than 64 MiB after the first quarter of its run.
# Exit status 0 only when every run passed, no violation was reported and
# the RSS bound held.  Output: var/soak-<time>/ (logs, rss.csv, summary.txt).
set -uo pipefail

MIN=${1:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${2:-$ROOT/build/soak}
RSS_MAX_MIB=${SOAK_RSS_MAX_MIB:-1024}
OUT=$ROOT/var/soak-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
cd "$ROOT" || exit 1

log() { echo "soak: $*" | tee -a "$OUT/summary.txt"; }

if [ ! -f "$BUILD/build.ninja" ]; then
	meson setup "$BUILD" --buildtype=release >"$OUT/setup.log" 2>&1 ||
		{ cat "$OUT/setup.log"; exit 1; }
fi
ninja -C "$BUILD" >"$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log"; exit 1; }
T=$BUILD/tests
[ -x "$T/test_rel_concurrent" ] || { echo "soak: $T/test_rel_concurrent missing"; exit 1; }

half=$(awk -v m="$MIN" 'BEGIN { s = m * 30; if (s < 20) s = 20; printf "%d", s }')
# the CI counts take ~2 min on 2 busy cores: scale so phase 2 fills ~half
scale=$(awk -v m="$MIN" 'BEGIN { s = m / 4; if (s < 1) s = 1; printf "%.2f", s }')
log "minutes=$MIN phase1=${half}s scale=$scale build=$BUILD out=$OUT"

fail=0
pids=()
names=()

# ---- phase 1 ----------------------------------------------------------------
(cd "$T" && MALLOC_CONF=stats_print:true COIL_REL_SECONDS=$half \
	./test_rel_concurrent -j1 >"$OUT/concurrent.log" 2>&1) &
pids+=($!); names+=(concurrent)

PLUGIN=${COIL_FIO:-$BUILD/perf/fio/coil-fio.so}
FIOARGS="--rw=randwrite --bsrange=4k-128k --size=64m --iodepth=16 --verify=crc32c
	--verify_backlog=256 --do_verify=1 --time_based --runtime=$half
	--buffer_compress_percentage=50"
if command -v fio >/dev/null; then
	if [ -f "$PLUGIN" ]; then
		fio --name=coil --ioengine=external:"$PLUGIN" \
			--coil_store="$OUT/fio.coil" --filename=obj $FIOARGS \
			>"$OUT/fio-coil.log" 2>&1 &
		pids+=($!); names+=(fio-coil)
	else
		log "fio plugin not built ($PLUGIN): coil fio verify skipped"
	fi
	fio --name=plain --ioengine=io_uring --direct=1 \
		--filename="$OUT/fio-plain.dat" $FIOARGS >"$OUT/fio-plain.log" 2>&1 &
	pids+=($!); names+=(fio-plain)
else
	log "fio not installed: fio verify skipped"
fi

# RSS sampler: the test runs in a criterion child, so sample the whole
# process tree under each pid.
echo "t_s,name,pid,rss_kib" >"$OUT/rss.csv"
(
	t0=$SECONDS
	while :; do
		alive=0
		for i in "${!pids[@]}"; do
			for p in ${pids[$i]} $(pgrep -P "${pids[$i]}" 2>/dev/null) \
				$(pgrep -P "$(pgrep -P "${pids[$i]}" 2>/dev/null | head -n1)" 2>/dev/null); do
				r=$(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null)
				[ -n "$r" ] && { echo "$((SECONDS - t0)),${names[$i]},$p,$r"; alive=1; }
			done
		done
		[ $alive = 1 ] || break
		sleep 5
	done >>"$OUT/rss.csv"
) &
sampler=$!

for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then
		log "phase1 ${names[$i]}: ok"
	else
		log "phase1 ${names[$i]}: FAILED (see $OUT/${names[$i]}.log)"
		fail=1
	fi
done
wait "$sampler" 2>/dev/null
grep -h "^rel: concurrent" "$OUT/concurrent.log" | tee -a "$OUT/summary.txt"
grep -h "Allocated:\|^Allocated" "$OUT/concurrent.log" | tail -n 1 |
	sed 's/^/soak: jemalloc /' | tee -a "$OUT/summary.txt"
for f in fio-coil fio-plain; do
	[ -f "$OUT/$f.log" ] || continue
	if grep -q "err= 0" "$OUT/$f.log" && ! grep -qi "verify.*bad\|crc32c.*mismatch" "$OUT/$f.log"; then
		log "$f: verify clean ($(grep -o 'write: IOPS=[^,]*' "$OUT/$f.log" | head -n1))"
	else
		log "$f: verify FAILED"; fail=1
	fi
done
peak=$(awk -F, 'NR > 1 && $4 > m { m = $4; n = $2 } END { printf "%d %s", m / 1024, n }' "$OUT/rss.csv")
log "peak RSS ${peak% *} MiB (${peak#* }), bound $RSS_MAX_MIB MiB"
[ "${peak% *}" -le "$RSS_MAX_MIB" ] || { log "RSS bound exceeded"; fail=1; }

# ---- phase 2 ----------------------------------------------------------------
for t in kill powercut ioerr corrupt apifuzz; do
	if (cd "$T" && COIL_REL_SCALE=$scale ./test_rel_$t -j1 >"$OUT/$t.log" 2>&1); then
		log "phase2 $t: ok"
	else
		log "phase2 $t: FAILED (see $OUT/$t.log)"; fail=1
	fi
	grep -h "^rel: [a-z0-9_]* [a-z]*=[0-9]* violations=" "$OUT/$t.log" | tee -a "$OUT/summary.txt"
done
for f in "$T"/test_rel_fuzz_*; do
	[ -f "$f" ] && [ -x "$f" ] || continue
	n=${f##*/}
	if (cd "$T" && COIL_REL_SCALE=$scale "./$n" >"$OUT/$n.log" 2>&1); then :; else
		log "phase2 $n: FAILED (see $OUT/$n.log)"; fail=1
	fi
	grep -h "^rel: fuzz" "$OUT/$n.log" | tee -a "$OUT/summary.txt"
done

if grep -h "violations=" "$OUT"/*.log | grep -qv "violations=0 "; then
	log "violations reported"; fail=1
fi
[ $fail = 0 ] && log "PASS" || log "FAIL"
exit $fail
