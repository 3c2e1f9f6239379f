#!/usr/bin/env bash
# perf/demo.sh — what tools/dev.sh demo runs after building: load a real
# corpus (a tar of /usr/include) into a fresh coil store under var/demo/,
# read it back verified, run a short fio job through the coil ioengine,
# check it with the coil CLI, and explain the numbers.  Takes well under a
# minute on 2 cores once built.
#
# Environment: BUILD (default build/release), DEMO_DIR (default var/demo).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build/release}
DIR=${DEMO_DIR:-var/demo}
LOADER=$BUILD/perf/fio/demo_load
PLUGIN=$BUILD/perf/fio/coil-fio.so

step() { printf '\n\033[1m[%s] %s\033[0m\n' "$1" "$2"; }

if [ ! -x "$LOADER" ]; then
	echo "demo: $LOADER is missing; run tools/dev.sh demo (it builds first)" >&2
	exit 1
fi
t0=$SECONDS
rm -rf "$DIR"
mkdir -p "$DIR"
STORE=$DIR/demo.coil

step 1/5 "making the corpus: a tar of /usr/include"
tar -cf "$DIR/corpus.tar" -C /usr include 2>/dev/null || true
n_files=$(tar -tf "$DIR/corpus.tar" | grep -vc '/$' || true)
printf '   %s files, %s MiB\n' "$n_files" "$(( $(stat -c %s "$DIR/corpus.tar") >> 20 ))"

step 2/5 "loading every file as a coil object, then reading all of it back cold and verified"
"$LOADER" "$STORE" "$DIR/corpus.tar" "$DIR/load.json" $((2 << 30))

fio_ok=0
if [ -e "$PLUGIN" ] && command -v fio >/dev/null; then
	step 3/5 "fio through the coil ioengine: 128 KiB writes + verify, then 4 KiB random reads"
	echo "   job file: perf/fio/demo.fio  (ioengine=external:$PLUGIN)"
	if COIL_FIO=$(realpath "$PLUGIN") COIL_STORE=$(realpath "$STORE") \
		COIL_FIO_STATS="$DIR/fio-stats.json" \
		fio --output-format=json --output="$DIR/fio.json" perf/fio/demo.fio; then
		fio_ok=1
	else
		echo "   fio failed; see $DIR/fio.json" >&2
	fi
else
	step 3/5 "skipped: $PLUGIN not built (tools/dev.sh deps fetches fio's source) or fio missing"
fi

CLI=$BUILD/tools/coil
if [ -x "$CLI" ]; then
	step 4/5 "the coil command-line tool re-reads every object and checks every checksum"
	echo "   \$ $CLI check $STORE"
	"$CLI" check "$STORE" | tail -n 1 | sed 's/^/   /'
else
	step 4/5 "skipped: $CLI not built"
fi

step 5/5 "report"
BUILD=$BUILD python3 - "$DIR" "$fio_ok" "$STORE" <<'PY'
import json, os, sys

d, fio_ok, store = sys.argv[1], sys.argv[2] == '1', sys.argv[3]
load = json.load(open(os.path.join(d, 'load.json')))


def find(obj, *names):
    """First value under any of @names, searched depth first."""
    if isinstance(obj, dict):
        for n in names:
            if n in obj and not isinstance(obj[n], (dict, list)):
                return obj[n]
        for v in obj.values():
            r = find(v, *names)
            if r is not None:
                return r
    return None


def section(obj, name):
    if isinstance(obj, dict):
        if name in obj and isinstance(obj[name], dict):
            return obj[name]
        for v in obj.values():
            r = section(v, name)
            if r:
                return r
    return {}


def mib(b):
    return '%.1f MiB' % (b / 1048576.0)


def rate(h, m):
    return '%.0f %%' % (100.0 * h / (h + m)) if (h or 0) + (m or 0) else 'n/a'


def cache_line(st):
    c = section(st, 'cache')
    h = find(c, 'hits', 'hit')
    m = find(c, 'misses', 'miss')
    if h is None or m is None:
        return 'not reported'
    if not h and not m:
        return 'no cache lookups recorded (reads went straight to the device)'
    return '%s of blob lookups hit the decoded-blob cache (%d hits, %d misses)' % (rate(h, m), h, m)


def prefetch_line(st):
    p = section(st, 'prefetch')
    if not p:
        return 'not reported'
    rep = p.get('report') if isinstance(p.get('report'), dict) else p
    fetched = p.get('blobs_fetched', rep.get('completed', 0)) or 0
    ready = p.get('ready_no_wait', rep.get('ready_before_demand', 0)) or 0
    inflight = rep.get('in_flight_at_demand', rep.get('demand_waits', 0)) or 0
    wasted = rep.get('evicted_before_use', 0) or 0
    ra = p.get('readahead') if isinstance(p.get('readahead'), dict) else {}
    if not fetched:
        return 'no readahead was issued'
    used = min(fetched, ready + inflight)
    line = ('%d blobs read ahead, %.0f %% of them used by a read (%d ready when it came, '
            '%d still in flight); %d evicted unused'
            % (fetched, 100.0 * used / fetched, ready, inflight, wasted))
    if ra.get('reads'):
        line += '; %d of %d reads looked sequential' % (ra.get('sequential_reads', 0), ra['reads'])
    return line


st = load['stats_after_load']
logical = find(section(st, 'space'), 'logical', 'logical_bytes') or load['logical_bytes']
stored = find(section(st, 'space'), 'stored', 'stored_bytes')
alloc = find(section(st, 'space'), 'allocated', 'allocated_bytes')
w, r = load['write'], load['read']
print('Corpus: %d objects (every file of /usr/include, plus big/corpus.tar = the whole tar '
      'and big/random.bin = 32 MiB of random bytes)' % load['objects'])
print()
print('Space')
print('  logical bytes written   %s' % mib(logical))
if stored:
    print('  stored after zstd       %s   (%.2fx smaller; random bytes are kept raw)'
          % (mib(stored), logical / stored))
if alloc:
    print('  allocated on disk       %s   (in data segments: blobs packed into 4 KiB-aligned batches)' % mib(alloc))
print()
print('Loader (one thread, 32 requests in flight, requests of up to 1 MiB)')
print('  write  %7.1f MiB/s   p50 %8.0f us   p99 %8.0f us   (%d requests, then coil_sync)'
      % (w['bytes'] / 1048576.0 / w['seconds'], w['latency']['p50_us'], w['latency']['p99_us'],
         w['latency']['ops']))
print('  read   %7.1f MiB/s   p50 %8.0f us   p99 %8.0f us   (cold: store reopened; every byte %s)'
      % (r['bytes'] / 1048576.0 / r['seconds'], r['latency']['p50_us'], r['latency']['p99_us'],
         'matched the source' if r['verified'] else 'DID NOT MATCH'))
sr = load['stats_after_read']
print('  cache      %s' % cache_line(sr))
print('  readahead  %s' % prefetch_line(sr))

if fio_ok:
    fj = json.load(open(os.path.join(d, 'fio.json')))
    print()
    print('fio through the coil ioengine (perf/fio/demo.fio)')
    for j in fj['jobs']:
        for dd in ('write', 'read'):
            s = j[dd]
            if not s['io_bytes']:
                continue
            pct = s['clat_ns'].get('percentile', {})
            print('  %-16s %-5s %8.1f MiB/s %9.0f IOPS   p99 %8.0f us'
                  % (j['jobname'], dd, s['bw_bytes'] / 1048576.0, s['iops'],
                     pct.get('99.000000', 0) / 1000.0))
        if j.get('error'):
            print('  %s: error %d' % (j['jobname'], j['error']))
    verify_errs = sum(j.get('error', 0) for j in fj['jobs'])
    print('  verify: %s' % ('every block checked out (crc32c)' if not verify_errs else 'FAILED'))
    p = os.path.join(d, 'fio-stats.json')
    if os.path.exists(p):
        fs = json.load(open(p))
        print('  cache      %s' % cache_line(fs))
        print('  readahead  %s' % prefetch_line(fs))
print()
print('Everything is under %s; the full statistics are in %s/*.json.' % (d, d))
print('Look around: %s/tools/coil ls %s | head; %s/tools/coil stats %s'
      % (os.environ.get('BUILD', 'build/release'), store, os.environ.get('BUILD', 'build/release'), store))
PY
echo
echo "demo: finished in $((SECONDS - t0)) s"
