#!/usr/bin/env bash
# perf/demo.sh — what tools/dev.sh demo runs after building: load a real
# corpus (a tar of /usr/include) into a fresh coil store under var/demo/,
# read it back verified, run a short fio job through the coil ioengine,
# check the store with the coil CLI, and report every figure next to its
# baseline measured in the same run: the disk alone (fio, O_DIRECT, on a
# plain file) and zstd alone (same objects, same blob size, one thread).
# Ends with a one-line verdict and a plot.  About a minute on 2 cores.
#
# Environment: BUILD (default build/release), DEMO_DIR (default var/demo).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build/release}
DIR=${DEMO_DIR:-var/demo}
LOADER=$BUILD/perf/fio/demo_load
PLUGIN=$BUILD/perf/fio/coil-fio.so
CLI=$BUILD/tools/coil

step() { printf '\n\033[1m[%s] %s\033[0m\n' "$1" "$2"; }

if [ ! -x "$LOADER" ]; then
	echo "demo: $LOADER is missing; run tools/dev.sh demo (it builds first)" >&2
	exit 1
fi
t0=$SECONDS
rm -rf "$DIR"
mkdir -p "$DIR"
STORE=$DIR/demo.coil

step 1/6 "the corpus: a tar of /usr/include"
tar -cf "$DIR/corpus.tar" -C /usr include 2>/dev/null || true
tar_bytes=$(stat -c %s "$DIR/corpus.tar")
printf '   %s entries that are not folders, %s MiB\n' \
	"$(tar -tf "$DIR/corpus.tar" | grep -vc '/$' || true)" "$((tar_bytes >> 20))"

# The loader stores every file, the whole tar again and 32 MiB of random
# bytes; the disk baseline moves the same number of bytes.
logical_guess=$((2 * tar_bytes + (32 << 20)))
disk_ok=0
if command -v fio >/dev/null; then
	step 2/6 "baseline: the disk alone (fio, io_uring, O_DIRECT, a plain file of $((logical_guess >> 20)) MiB)"
	if fio --output-format=json --output="$DIR/disk.json" --ioengine=io_uring \
		--direct=1 --thread=1 --filename="$DIR/disk.bin" --size="$logical_guess" \
		--name=write --rw=write --bs=1m --iodepth=32 --end_fsync=1 \
		--name=read --stonewall --rw=read --bs=1m --iodepth=32 \
		--name=randread --stonewall --rw=randread --bs=4k --iodepth=16 --size=128m \
		--norandommap --time_based --runtime=3 \
		--name=randwrite --stonewall --rw=randwrite --bs=4k --iodepth=16 --size=128m \
		--norandommap --time_based --runtime=3 >/dev/null; then
		disk_ok=1
		echo "   1 MiB writes then reads at queue depth 32; 4 KiB random reads, then writes, at depth 16 for 3 s each"
	else
		echo "   fio on a plain file failed; the report will have no disk baseline" >&2
	fi
	rm -f "$DIR/disk.bin"
else
	step 2/6 "skipped: fio is missing, so there is no disk baseline (tools/dev.sh deps installs it)"
fi

step 3/6 "coil: every file as an object, then all of it read back cold and compared"
"$LOADER" "$STORE" "$DIR/corpus.tar" "$DIR/load.json" $((2 << 30)) "$DIR/latency.tsv"

fio_ok=0
if [ -e "$PLUGIN" ] && command -v fio >/dev/null; then
	step 4/6 "fio through the coil ioengine: 128 KiB writes + verify, then 4 KiB random reads"
	echo "   job file: perf/fio/demo.fio  (ioengine=external:$PLUGIN)"
	if COIL_FIO=$(realpath "$PLUGIN") COIL_STORE=$(realpath "$STORE") \
		COIL_FIO_STATS="$DIR/fio-stats.json" \
		fio --output-format=json --output="$DIR/fio.json" perf/fio/demo.fio; then
		fio_ok=1
	else
		echo "   fio failed; see $DIR/fio.json" >&2
	fi
else
	step 4/6 "skipped: $PLUGIN not built (tools/dev.sh deps fetches fio's source) or fio missing"
fi

check_line=
if [ -x "$CLI" ]; then
	step 5/6 "the coil command-line tool re-reads every object and checks every checksum"
	echo "   \$ $CLI check $STORE"
	check_line=$("$CLI" check "$STORE" 2>&1 | tail -n 1) || true
	echo "   $check_line"
else
	step 5/6 "skipped: $CLI not built"
fi

step 6/6 "report"
python3 perf/demo_report.py "$DIR" "$fio_ok" "$disk_ok" "$check_line" "$(nproc)"
echo
echo "demo: finished in $((SECONDS - t0)) s; everything is under $DIR"
echo "look around: $CLI ls $STORE | head; $CLI stats $STORE"
