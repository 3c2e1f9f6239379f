#!/usr/bin/env bash
# perf/bench_uring.sh — 4 KiB random reads, QD32, O_DIRECT: coil's uring/
# driver (perf/bench_uring.c) next to fio's own io_uring engine, on the SAME
# file in the same run, alternating which goes first (ABBA), REPEATS times;
# prints medians and the ratio, writes perf/results/uring.json.
#
#   perf/bench_uring.sh [BUILD_DIR]        (default build/release)
#   env: RUNTIME=8 REPEATS=5 FILE=perf/results/tmp/uring_bench.dat SIZE_MB=1024
#        INBOX=1 also runs the driver in "inbox" mode (completions handed to
#        another thread that resubmits through the inbox: the engine's path)
#
# The file is filled with random bytes once (not sparse: reading holes would
# never touch the device) and every read is O_DIRECT, so neither side is
# served from the page cache.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${1:-build/release}
BIN=$BUILD/perf/bench_uring
RUNTIME=${RUNTIME:-8}
REPEATS=${REPEATS:-5}
FILE=${FILE:-perf/results/tmp/uring_bench.dat}
SIZE_MB=${SIZE_MB:-1024}
OUT=${OUT:-perf/results/uring.json}

[ -x "$BIN" ] || { echo "build first: ninja -C $BUILD perf/bench_uring" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio not found" >&2; exit 1; }
mkdir -p "$(dirname "$FILE")" "$(dirname "$OUT")"
if [ "$(stat -c %s "$FILE" 2>/dev/null || echo 0)" != $((SIZE_MB * 1048576)) ]; then
	echo "creating $FILE ($SIZE_MB MiB of random bytes)" >&2
	dd if=/dev/urandom of="$FILE" bs=1M count="$SIZE_MB" oflag=direct status=none
fi

# each prints "IOPS CPU_US_PER_IO" (CPU: user+sys of the whole process)
INBOX=${INBOX:-1}
run_coil() {
	"$BIN" "$FILE" "$RUNTIME" 32 4096 "${1:-ring}" |
		python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["iops"]), j["cpu_us_per_io"])'
}
run_fio() {
	fio --name=randread --filename="$FILE" --ioengine=io_uring --direct=1 \
		--rw=randread --bs=4k --iodepth=32 --runtime="$RUNTIME" \
		--time_based --size="${SIZE_MB}M" --numjobs=1 \
		--output-format=json 2>/dev/null |
		python3 -c 'import json,sys
j=json.load(sys.stdin)["jobs"][0]; r=j["read"]
cpu=(j["usr_cpu"]+j["sys_cpu"])/100*j["job_runtime"]/1000
print(round(r["iops"]), round(cpu*1e6/max(r["total_ios"],1),3))'
}

coil=() fio=() coilcpu=() fiocpu=() inb=() inbcpu=()
for i in $(seq 1 "$REPEATS"); do
	if [ $((i % 2)) -eq 1 ]; then
		read -r c cc < <(run_coil); read -r f fc < <(run_fio)
		if [ "$INBOX" = 1 ]; then read -r n nc < <(run_coil inbox); fi
	else
		if [ "$INBOX" = 1 ]; then read -r n nc < <(run_coil inbox); fi
		read -r f fc < <(run_fio); read -r c cc < <(run_coil)
	fi
	coil+=("$c") fio+=("$f") coilcpu+=("$cc") fiocpu+=("$fc")
	[ "$INBOX" = 1 ] && inb+=("$n") inbcpu+=("$nc")
	printf 'repeat %d: coil %s IOPS (%s us CPU/IO), fio %s IOPS (%s us CPU/IO), ratio %.3f' \
		"$i" "$c" "$cc" "$f" "$fc" "$(python3 -c "print($c/$f)")"
	[ "$INBOX" = 1 ] && printf '; coil via inbox %s IOPS (%s us CPU/IO)' "$n" "$nc"
	echo
done

python3 - "$OUT" "$RUNTIME" "$FILE" "$SIZE_MB" "${coil[*]}" "${fio[*]}" "${coilcpu[*]}" "${fiocpu[*]}" "${inb[*]:-}" "${inbcpu[*]:-}" <<'EOF'
import json, statistics, sys, platform, datetime
out, runtime, path, size_mb = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
coil = [int(x) for x in sys.argv[5].split()]
fio = [int(x) for x in sys.argv[6].split()]
coilcpu = [float(x) for x in sys.argv[7].split()]
fiocpu = [float(x) for x in sys.argv[8].split()]
inb = [int(x) for x in sys.argv[9].split()]
inbcpu = [float(x) for x in sys.argv[10].split()]
ratios = [c / f for c, f in zip(coil, fio)]
res = {
    "benchmark": "4 KiB random read, QD32, O_DIRECT, 1 job",
    "peer": "fio --ioengine=io_uring --direct=1 --rw=randread --bs=4k --iodepth=32",
    "file": path, "file_mib": size_mb, "runtime_s": runtime,
    "repeats": len(coil), "order": "alternating (coil first on odd repeats)",
    "coil_iops": coil, "fio_iops": fio, "ratios": [round(r, 4) for r in ratios],
    "coil_median_iops": statistics.median(coil),
    "fio_median_iops": statistics.median(fio),
    "ratio_of_medians": round(statistics.median(coil) / statistics.median(fio), 4),
    "median_ratio": round(statistics.median(ratios), 4),
    "coil_cpu_us_per_io": coilcpu, "fio_cpu_us_per_io": fiocpu,
    "coil_median_cpu_us_per_io": statistics.median(coilcpu),
    "fio_median_cpu_us_per_io": statistics.median(fiocpu),
    "order_note": "odd repeats: coil, fio, coil-inbox; even: coil-inbox, fio, coil",
    "target": ">= 0.9",
    "kernel": platform.release(),
    "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
}
if inb:
    res.update({"coil_inbox_iops": inb, "coil_inbox_cpu_us_per_io": inbcpu,
                "coil_inbox_median_iops": statistics.median(inb),
                "coil_inbox_median_cpu_us_per_io": statistics.median(inbcpu),
                "inbox_ratio_of_medians": round(statistics.median(inb) / statistics.median(fio), 4),
                "inbox_median_ratio": round(statistics.median([a / b for a, b in zip(inb, fio)]), 4)})
json.dump(res, open(out, "w"), indent=2)
print()
print("| | coil uring/ | fio io_uring |")
print("|---|---:|---:|")
print(f"| median IOPS ({len(coil)} repeats) | {res['coil_median_iops']:.0f} | {res['fio_median_iops']:.0f} |")
print(f"| ratio of medians | {res['ratio_of_medians']:.3f} | 1 |")
print(f"| median of per-repeat ratios | {res['median_ratio']:.3f} | 1 |")
print(f"| median CPU per I/O (user+sys, us) | {res['coil_median_cpu_us_per_io']:.2f} | {res['fio_median_cpu_us_per_io']:.2f} |")
if inb:
    print(f"| coil via inbox (another thread resubmits): median IOPS | {res['coil_inbox_median_iops']:.0f} | ratio of medians {res['inbox_ratio_of_medians']:.3f}, median ratio {res['inbox_median_ratio']:.3f} |")
    print(f"| coil via inbox: median CPU per I/O (us) | {res['coil_inbox_median_cpu_us_per_io']:.2f} | |")
print(f"\nwrote {out}")
EOF
