#!/usr/bin/env bash
# tools/dev.sh — the one entry point for developers and CI.
#
#   tools/dev.sh deps    install what is missing (Debian packages, fio source)
#   tools/dev.sh build   release build in build/release
#   tools/dev.sh test    deps + release (-Werror) + ASan/UBSan + TSan, all suites
#   tools/dev.sh fuzz    libFuzzer on every fuzz target (FUZZ_SECONDS each, default 30)
#   tools/dev.sh demo    load a real corpus into a store and report what happened
#   tools/dev.sh bench   the side-by-side benchmarks under perf/
#   tools/dev.sh bench-meta  metadata cost against object/blob count (perf/bench_meta.py)
#   tools/dev.sh bench-batch page writes one by one vs in batches, and RocksDB (perf/bench_batch.py)
#   tools/dev.sh bench-optimize  coil optimize on /usr/include vs zstd per 64 KiB block (perf/bench_optimize.py)
#   tools/dev.sh bench-optimize-fg  fio's 4 KiB random mix with the optimizer running vs not (perf/bench_optimize_fg.py)
#   tools/dev.sh sqlite-suite [FILE...]  SQLite's TCL tests, default VFS vs coil
#   tools/dev.sh soak    the release suites with the crash/fault loops at full count, then fuzz
#
# Everything it makes lives under the checkout (build/, .cache/, var/).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE="$ROOT/.cache"
JOBS=${JOBS:-$(nproc)}

PKGS=(build-essential meson ninja-build pkg-config clang
      liburing-dev libzstd-dev libjemalloc-dev libxxhash-dev libcriterion-dev
      fio zstd dpkg-dev libsqlite3-dev sqlite3 rocksdb-tools gnuplot-nox
      python3 tcl-dev mount)

# Each step says when it began (seconds since the command started): the
# test command must stay under fifteen minutes, and a slow step shows.
log() { printf '\033[1m== %s\033[0m (+%ss)\n' "$*" "$SECONDS"; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# --- deps -----------------------------------------------------------------

deps_packages() {
	local missing=()
	for p in "${PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing: ${missing[*]}"
		as_root apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

# Source packages are not enabled on a stock machine.  Derive a deb-src entry
# from the machine's own Debian sources (whatever mirror it already uses), so
# no mirror address is ever written into this repository.
enable_deb_src() {
	if apt-cache showsrc fio 2>/dev/null | grep -q '^Package: fio'; then
		return
	fi
	local src=/etc/apt/sources.list.d/debian.sources
	if [ -f "$src" ]; then
		sed -e 's/^Types:.*/Types: deb-src/' "$src" |
			as_root tee /etc/apt/sources.list.d/coil-deb-src.sources >/dev/null
	elif [ -f /etc/apt/sources.list ]; then
		grep -E '^deb ' /etc/apt/sources.list | sed -e 's/^deb /deb-src /' |
			as_root tee /etc/apt/sources.list.d/coil-deb-src.list >/dev/null
	else
		echo "dev.sh: no Debian sources file to derive deb-src from" >&2
		return 1
	fi
	as_root apt-get update -qq
}

# fetch_source PKG VER DIR: Debian's source of PKG=VER unpacked as DIR
# (replacing it), through a scratch folder so an interrupted fetch leaves
# no half tree at DIR.
fetch_source() {
	local pkg=$1 ver=$2 dir=$3 tree
	enable_deb_src
	rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
	(cd "$dir.tmp" && apt-get source -qq "$pkg=$ver" >/dev/null 2>&1 ||
		apt-get source "$pkg=$ver")
	tree=$(find "$dir.tmp" -mindepth 1 -maxdepth 1 -type d -name "$pkg-*" | head -n1)
	[ -n "$tree" ] || { echo "dev.sh: apt-get source $pkg produced no tree" >&2; return 1; }
	rm -rf "$dir" && mv "$tree" "$dir" && rm -rf "$dir.tmp"
}

# fio's ioengine plugin must be built against the headers of the fio that is
# installed, configured the same way; cache that tree under .cache/.
deps_fio_source() {
	local ver dir
	ver=$(dpkg-query -W -f='${Version}' fio)
	dir="$CACHE/fio-src-$ver"
	# The link is relative: a checkout whose .cache is a symlink to
	# another's (a worktree sharing the download) must not point the
	# shared link into itself.
	if [ -f "$dir/.configured" ]; then
		ln -sfn "fio-src-$ver" "$CACHE/fio-src"
		return
	fi
	log "fetching fio $ver source (apt-get source)"
	fetch_source fio "$ver" "$dir"
	(cd "$dir" && ./configure >/dev/null)
	touch "$dir/.configured"
	ln -sfn "fio-src-$ver" "$CACHE/fio-src"
}

cmd_deps() {
	mkdir -p "$CACHE"
	deps_packages
	deps_fio_source
}

# --- build ----------------------------------------------------------------

# setup DIR [meson args...]: configure once, reconfigure when args change.
setup() {
	local dir=$1; shift
	local stamp="$dir/.dev-args" args="$*"
	if [ -f "$dir/build.ninja" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$args" ]; then
		return
	fi
	rm -rf "$dir"
	meson setup "$dir" "$@" >/dev/null
	echo "$args" >"$stamp"
}

fio_arg() {
	if [ -f "$CACHE/fio-src/.configured" ]; then
		echo "-Dfio_source=$CACHE/fio-src"
	fi
}

build_release() {
	setup build/release --buildtype=release -Dwerror=true -Dwarning_level=2 \
		-Dpkgconfig.relocatable=true $(fio_arg)
	ninja -C build/release -j "$JOBS"
}

build_asan() {
	setup build/asan --buildtype=debug -Dwerror=true -Db_sanitize=address,undefined \
		-Db_lundef=false -Djemalloc=false
	ninja -C build/asan -j "$JOBS"
}

build_fuzz() {
	CC=clang setup build/fuzz --buildtype=debugoptimized -Djemalloc=false -Dtests=false \
		-Dfuzz=true -Dsqlite=false -Db_lundef=false \
		"-Dc_args=-fsanitize=fuzzer-no-link,address,undefined" \
		"-Dc_link_args=-fsanitize=address,undefined"
	# only the fuzz targets (and the library they link): the tools and
	# benchmarks of this build would never run
	local targets
	targets=$(ninja -C build/fuzz -t targets all |
		sed -n 's|^\(tests/fuzz_[a-z_]*\):.*|\1|p')
	ninja -C build/fuzz -j "$JOBS" $targets
}

# ThreadSanitizer: criterion's runner does not start under TSan, so the
# concurrency tests are also built as plain programs (suite rel-tsan).
build_tsan() {
	setup build/tsan --buildtype=debug -Db_sanitize=thread -Djemalloc=false \
		-Db_lundef=false -Dsqlite=false
	ninja -C build/tsan -j "$JOBS" tests/rel/rel_tsan_concurrent tests/rel/rel_tsan_apifuzz
}

cmd_build() {
	build_release
}

# --- test -----------------------------------------------------------------

# Sum criterion's "Synthesis" lines from a meson test log.
criterion_totals() {
	python3 - "$@" <<'EOF'
import re, sys
passed = failed = 0
names = []
for path in sys.argv[1:]:
    try:
        text = open(path, errors='replace').read()
    except OSError:
        continue
    for m in re.finditer(r'Synthesis: Tested: *(\d+) \| Passing: *(\d+) \| Failing: *(\d+) \| Crashing: *(\d+)', text):
        passed += int(m.group(2))
        failed += int(m.group(3)) + int(m.group(4))
# A suite that died before criterion's synthesis (a signal, a sanitizer
# abort, a timeout) counts as a failure too: read meson's JSON log.
import json, os
for path in sys.argv[1:]:
    jpath = path.replace('.txt', '.json')
    if not os.path.exists(jpath):
        continue
    for line in open(jpath):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get('result') not in ('OK', 'SKIP', 'EXPECTEDFAIL'):
            failed += 1
            names.append('%s: %s (%s)' % (os.path.basename(path), r.get('name'), r.get('result')))
print(passed, failed)
# Which ones, so the last lines of a run name what to look at.
for path in sys.argv[1:]:
    try:
        text = open(path, errors='replace').read()
    except OSError:
        continue
    for m in re.finditer(r'\[(?:FAIL|----)\] (\S+::\S+)(?:: (.*))?', text):
        names.append('%s: %s %s' % (os.path.basename(path), m.group(1), m.group(2) or ''))
    # and what failed in them: criterion's assertion lines (where, then
    # the message), so the run's tail alone says why
    for m in re.finditer(r'\[----\] (\S+\.c:\d+): (.*)\n((?:\[----\] .*\n){0,4})', text):
        msg = ' '.join(l[7:].strip() for l in m.group(3).splitlines() if l[7:].strip())
        names.append('%s: %s: %s %s' % (os.path.basename(path), m.group(1), m.group(2), msg))
for n in dict.fromkeys(names):
    print('failed:', n)
EOF
}

run_suites() {
	local dir=$1 label=$2
	log "criterion suites ($label)"
	local rc=0
	meson test -C "$dir" --num-processes "$JOBS" --print-errorlogs \
		${COIL_TEST_ARGS:-} || rc=$?
	# meson's own log carries every suite's output.
	cp "$dir/meson-logs/testlog.txt" "$ROOT/build/testlog-$label.txt" 2>/dev/null || true
	cp "$dir/meson-logs/testlog.json" "$ROOT/build/testlog-$label.json" 2>/dev/null || true
	return $rc
}

# One fuzz target for $secs on a copy of its checked-in corpus; its verdict
# goes to build/fuzz/NAME.status.
fuzz_one() {
	local exe=$1 secs=$2
	local name=${exe##*/fuzz_}
	local corpus="tests/fuzz/corpus/$name"
	local work="build/fuzz/corpus-$name"
	rm -rf "$work" && mkdir -p "$work"
	[ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
	if "$exe" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=0 \
		"$work" >"build/fuzz/$name.log" 2>&1; then
		echo ok >"build/fuzz/$name.status"
	else
		echo FAILED >"build/fuzz/$name.status"
	fi
}

run_fuzzers() {
	local secs=${FUZZ_SECONDS:-6} rc=0 n=0 running=0
	local exes=()
	log "fuzz targets (${secs}s each, on their checked-in corpus, $JOBS at a time)"
	for exe in build/fuzz/tests/fuzz_*; do
		[ -f "$exe" ] && [ -x "$exe" ] || continue
		exes+=("$exe")
		rm -f "build/fuzz/${exe##*/fuzz_}.status"
		fuzz_one "$exe" "$secs" &
		running=$((running + 1))
		if [ "$running" -ge "$JOBS" ]; then
			wait -n || true
			running=$((running - 1))
		fi
	done
	wait
	for exe in "${exes[@]}"; do
		local name=${exe##*/fuzz_}
		if [ "$(cat "build/fuzz/$name.status" 2>/dev/null)" = ok ]; then
			echo "fuzz $name: ok ($(grep -c '' "build/fuzz/$name.log") log lines, 0 crashes)"
		else
			echo "fuzz $name: FAILED"; tail -n 40 "build/fuzz/$name.log"; rc=1
		fi
		n=$((n + 1))
	done
	echo "fuzz targets run: $n"
	return $rc
}

cmd_test() {
	local t0=$SECONDS rc=0
	cmd_deps
	log "release build (-Wall -Wextra -Werror)"
	build_release
	# The crash/fault loops run at a fifth of their full count here, to
	# keep the whole command under fifteen minutes on two cores: a fresh
	# clone took 830-861 s at 0.5, and 951 s at 0.4 (ASan pass at 0.08,
	# the TSan pass at 0.3, libFuzzer's runs in it) on a machine of the
	# same kind whose first touches of memory cost ~50x a second touch,
	# 875-913 s at 0.25; `tools/dev.sh soak` runs them at full count
	# (COIL_REL_SCALE=1).
	COIL_REL_SCALE=${COIL_TEST_SCALE:-0.2} \
		run_suites build/release release || rc=1
	run_sqlite_suite_quick || rc=1
	log "ASan+UBSan build"
	build_asan
	# The sanitizer pass runs every suite; the long crash/fault loops are
	# scaled down there (their full counts run in the release pass above).
	COIL_REL_SCALE=${COIL_ASAN_SCALE:-0.05} \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	LSAN_OPTIONS=suppressions="$ROOT/tests/lsan.supp":print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		run_suites build/asan asan || rc=1
	log "TSan build of the concurrency tests"
	build_tsan
	meson test -C build/tsan --no-rebuild --suite rel-tsan --print-errorlogs || rc=1
	# The fuzz targets' checked-in corpora replay in both passes above
	# (suites rel_fuzz_*); libFuzzer's own search runs in `tools/dev.sh
	# fuzz` and in the soak (its clang build and runs were 100 s of a
	# fresh clone's 875-912 s here, against the fifteen minutes).
	local totals
	totals=$(criterion_totals build/testlog-release.txt build/testlog-asan.txt build/tsan/meson-logs/testlog.txt)
	read -r p f <<<"$totals"
	log "done in $((SECONDS - t0))s"
	tail -n +2 <<<"$totals" | head -n 40
	# The plain closing line: every criterion test case of both builds.
	echo "tests: $p passed, $f failed"
	[ "$f" = 0 ] || rc=1
	return $rc
}

# --- demo / bench -----------------------------------------------------------

# The demo's build: one line on the terminal, the whole log in a file
# (its tail is shown when the build fails).
build_release_quietly() {
	local logf=build/build-release.log
	mkdir -p build
	printf 'building build/release (full log: %s) ... ' "$logf"
	if ! build_release >"$logf" 2>&1; then
		echo failed; tail -n 40 "$logf"
		return 1
	fi
	echo done
}

cmd_demo() {
	cmd_deps
	build_release_quietly
	exec perf/demo.sh "$@"
}

cmd_bench() {
	cmd_deps
	build_release
	exec perf/bench.sh "$@"
}

# Metadata scale (not part of `bench` or `test`: the 10^6 sizes take long).
# Sizes: BENCH_META_SIZES / BENCH_META_BLOBS (see perf/bench_meta.py).
cmd_bench_meta() {
	cmd_deps
	build_release
	BUILD=build/release PYTHONDONTWRITEBYTECODE=1 exec python3 perf/bench_meta.py "$@"
}

# --- sqlite-suite -----------------------------------------------------------

# SQLite's own `testfixture`, built once from the Debian source of the
# installed sqlite3 under .cache/sqlite-src-VER, with tests/sqlite/suite_init.c
# linked in as SQLITE_EXTRA_INIT (SQLite's code unchanged): with
# COIL_SUITE_EXT set it makes the coil VFS the default.  Rebuilt when the
# hook changes.
deps_sqlite_testfixture() {
	local ver dir hook stamp
	ver=$(dpkg-query -W -f='${Version}' sqlite3)
	dir="$CACHE/sqlite-src-$ver"
	hook="$ROOT/tests/sqlite/suite_init.c"
	stamp=$(sha256sum "$hook" | cut -c1-16)
	SQLITE_SRC="$dir"
	if [ -x "$dir/testfixture" ] && [ "$(cat "$dir/.coil-hook" 2>/dev/null)" = "$stamp" ]; then
		return
	fi
	if [ ! -f "$dir/.configured" ]; then
		log "fetching sqlite3 $ver source (apt-get source)"
		fetch_source sqlite3 "$ver" "$dir"
		# Configured where it stays: the Makefile records the absolute
		# path of the tree it was configured in.
		(cd "$dir" && ./configure --with-tcl=/usr/lib/tcl8.6 >configure.log 2>&1) ||
			{ tail -n 30 "$dir/configure.log"; return 1; }
		touch "$dir/.configured"
	fi
	log "building SQLite's testfixture (once, in $dir)"
	rm -f "$dir/testfixture"
	cc -O2 -I/usr/include/tcl8.6 -c -o "$dir/coil_suite_init.o" "$hook"
	# One gcc compiles the amalgamation and the test sources: at
	# configure's "-g -O2" it took 57 s of a fresh clone's test run
	# here, at -O1 25 s.
	(cd "$dir" && nice -n 10 make -j2 testfixture CFLAGS="-O1" \
		OPTS="-DSQLITE_EXTRA_INIT=coil_suite_init" \
		LIBS="$dir/coil_suite_init.o" >make.log 2>&1) ||
		{ tail -n 30 "$dir/make.log"; return 1; }
	echo "$stamp" >"$dir/.coil-hook"
}

# The files `tools/dev.sh sqlite-suite` runs with no argument, and the short
# set `tools/dev.sh test` runs (docs/sqlite.md has the table and the reasons
# for what still fails on coil).
SQLITE_SUITE_FILES=(select1 insert update delete index lock crash2 crash3
	crash4 crash5 crash7 crash8 walcrash walcrash4 ioerr ioerr2 corrupt
	corrupt2 corrupt3 corruptA corruptC fuzz fuzz2 e_select e_insert
	e_delete e_update trans shared pager1 journal1 wal vacuum vacuum2
	vacuum4 vacuum5 autovacuum incrvacuum e_vacuum)
SQLITE_SUITE_QUICK=(select1 insert update delete index lock)

run_sqlite_suite() {
	python3 tests/sqlite/suite.py --testfixture "$SQLITE_SRC/testfixture" \
		--ext build/release/sqlite/libcoil_sqlite.so --srcdir "$SQLITE_SRC" \
		--out build/sqlite-suite "$@"
}

# Inside `tools/dev.sh test`: the short set, well under a minute.
run_sqlite_suite_quick() {
	log "SQLite's TCL tests, default VFS vs coil (short set)"
	deps_sqlite_testfixture || return 1
	run_sqlite_suite --timeout 120 "${SQLITE_SUITE_QUICK[@]}"
}

cmd_sqlite_suite() {
	cmd_deps
	build_release
	deps_sqlite_testfixture
	if [ $# -eq 0 ]; then
		set -- "${SQLITE_SUITE_FILES[@]}"
	fi
	run_sqlite_suite --timeout "${SQLITE_SUITE_TIMEOUT:-1200}" "$@"
}

# The release suites with every crash/fault loop at full count (or
# COIL_REL_SCALE's, e.g. 4 for an overnight soak).
# libFuzzer on every fuzz target, from its checked-in corpus
# (FUZZ_SECONDS each, default 30).
cmd_fuzz() {
	cmd_deps
	log "fuzz build (clang libFuzzer)"
	build_fuzz
	FUZZ_SECONDS=${FUZZ_SECONDS:-30} run_fuzzers
}

cmd_soak() {
	local t0=$SECONDS rc=0 totals
	cmd_deps
	build_release
	COIL_REL_SCALE=${COIL_REL_SCALE:-1} run_suites build/release soak || rc=1
	log "fuzz build (clang libFuzzer)"
	build_fuzz
	FUZZ_SECONDS=${FUZZ_SECONDS:-30} run_fuzzers || rc=1
	totals=$(criterion_totals build/testlog-soak.txt)
	read -r p f <<<"$totals"
	log "done in $((SECONDS - t0))s"
	tail -n +2 <<<"$totals" | head -n 40
	echo "tests: $p passed, $f failed"
	[ "$f" = 0 ] || rc=1
	return $rc
}

usage() {
	sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
}

case "${1:-}" in
deps) cmd_deps ;;
build) cmd_deps; cmd_build ;;
test) cmd_test ;;
fuzz) cmd_fuzz ;;
demo) shift; cmd_demo "$@" ;;
bench) shift; cmd_bench "$@" ;;
bench-meta) shift; cmd_bench_meta "$@" ;;
bench-batch) shift; cmd_deps; build_release
	BUILD=build/release PYTHONDONTWRITEBYTECODE=1 exec python3 perf/bench_batch.py "$@" ;;
bench-optimize) shift; cmd_deps; build_release
	BUILD=build/release PYTHONDONTWRITEBYTECODE=1 exec python3 perf/bench_optimize.py "$@" ;;
bench-optimize-fg) shift; cmd_deps; build_release
	BUILD=build/release PYTHONDONTWRITEBYTECODE=1 exec python3 perf/bench_optimize_fg.py "$@" ;;
sqlite-suite) shift; cmd_sqlite_suite "$@" ;;
soak) cmd_soak ;;
*) usage; exit 2 ;;
esac
