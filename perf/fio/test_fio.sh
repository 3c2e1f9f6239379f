#!/usr/bin/env bash
# perf/fio/test_fio.sh PLUGIN — the coil fio ioengine against real fio runs:
# option help, verify= at aligned and unaligned block sizes with compression
# off and on, fsync -> coil_flush, jobs sharing a store with thread=1,
# verify_only in a new process, and the clear error for a second process.
set -uo pipefail
PLUGIN=$(realpath "${1:?usage: test_fio.sh path/to/coil-fio.so}")
# Under the checkout so O_DIRECT works (/tmp may be tmpfs).
HERE=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d "$HERE/var/test-fio.XXXXXX" 2>/dev/null || { mkdir -p "$HERE/var" && mktemp -d "$HERE/var/test-fio.XXXXXX"; })
trap 'rm -rf "$W"' EXIT
pass=0 fail=0

# A sanitizer build of the plugin needs its runtimes loaded before fio's own
# libraries; fio itself leaks at exit, which is not ours to report.
pre=
for lib in libasan libubsan; do
	p=$(ldd "$PLUGIN" 2>/dev/null | awk -v l="$lib" '$1 ~ "^"l {print $3}')
	[ -n "$p" ] && pre="$pre${pre:+:}$p"
done
if [ -n "$pre" ]; then
	export LD_PRELOAD=$pre
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi

ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -f "$W/out" ] && tail -n 25 "$W/out"; fail=$((fail + 1)); }
run() { fio --ioengine=external:"$PLUGIN" "$@" >"$W/out" 2>&1; }

# 1. every option of the ioengine is known to fio.  (fio 3.33's --enghelp does
# not strip the "external:" prefix; it takes the plain path.)
fio --enghelp="$PLUGIN" >"$W/out" 2>&1
miss=
for o in coil_store coil_size coil_compression coil_pool coil_prefetch coil_cache coil_workers coil_zero_fill coil_poll_us coil_inline_cb; do
	grep -q "^$o\b\|^ *$o" "$W/out" || miss="$miss $o"
done
[ -z "$miss" ] && ok "enghelp lists all options" || bad "enghelp misses:$miss"

# 2-7. write then verify: block sizes x compression (fio's verify header
# needs blocks of at least a few dozen bytes; 512 is its smallest bsrange)
i=0
for comp in none zstd:1; do
	for bsargs in "--bs=4k" "--bsrange=512-70000 --bs_unaligned=1" \
		"--bsrange=60000-3000000 --bs_unaligned=1"; do
		i=$((i + 1))
		S="$W/v$i.coil"
		if run --name=v --coil_store="$S" --coil_compression=$comp --filename=obj \
			--rw=randwrite $bsargs --size=8m --iodepth=8 --verify=crc32c \
			--do_verify=1 --buffer_compress_percentage=50 \
			&& grep -q "err= 0" "$W/out"; then
			ok "verify comp=$comp $bsargs"
		else
			bad "verify comp=$comp $bsargs"
		fi
	done
done

# 6. DDIR_SYNC maps to coil_flush
if run --name=s --coil_store="$W/s.coil" --filename=obj --rw=write --bs=64k \
	--size=4m --iodepth=4 --fsync=4 && grep -q "err= 0" "$W/out" &&
	grep -Eq "sync.*: *(min|avg)|fsync" "$W/out"; then
	ok "fsync=4 through coil_flush"
else
	bad "fsync=4 through coil_flush"
fi

# 7. four jobs, one process (thread=1), one store, own objects, verified
if run --name=t --thread --numjobs=4 --coil_store="$W/t.coil" --rw=write \
	--bs=32k --size=4m --iodepth=4 --verify=md5 --do_verify=1 &&
	[ "$(grep -c "err= 0" "$W/out")" -ge 4 ]; then
	ok "4 threads share one store"
else
	bad "4 threads share one store"
fi

# 7a. requests above coil_write's 16 MiB limit are sent in parts
if run --name=big --coil_store="$W/big.coil" --coil_compression=zstd:1 --filename=obj \
	--rw=write --bsrange=15m-41m --bs_unaligned=1 --size=96m --iodepth=2 \
	--verify=crc32c --do_verify=1 --buffer_compress_percentage=50 &&
	grep -q "err= 0" "$W/out"; then
	ok "verify with 15..41 MiB requests"
else
	bad "verify with 15..41 MiB requests"
fi

# 7b. two spellings of one store path are one store, not -EBUSY
if (cd "$W" && run --thread --name=a --coil_store=sp.coil --filename=a --rw=write \
	--bs=64k --size=2m --name=b --coil_store=./sp.coil --filename=b --rw=write \
	--bs=64k --size=2m) && [ "$(grep -c "err= 0" "$W/out")" -ge 2 ]; then
	ok "./x.coil and x.coil share one store"
else
	bad "./x.coil and x.coil share one store"
fi

# 8. verify_only in a new process reads back what the first one wrote
V="$W/vo.coil"
if run --name=vo --coil_store="$V" --coil_compression=zstd --filename=obj \
	--rw=write --bsrange=512-40000 --bs_unaligned=1 --size=8m --iodepth=8 \
	--verify=crc32c --do_verify=0 --randseed=7 &&
	run --name=vo --coil_store="$V" --filename=obj --rw=write \
	--bsrange=512-40000 --bs_unaligned=1 --size=8m --iodepth=8 \
	--verify=crc32c --verify_only=1 --randseed=7 &&
	grep -q "err= 0" "$W/out" && grep -q "READ:" "$W/out"; then
	ok "verify_only in a new process"
else
	bad "verify_only in a new process"
fi

# 9. a corrupted expectation must fail: verify_only with another seed
if run --name=vo --coil_store="$V" --filename=obj --rw=write \
	--bsrange=512-40000 --bs_unaligned=1 --size=8m --iodepth=8 \
	--verify=crc32c --verify_only=1 --randseed=8; then
	bad "verify_only with the wrong layout must fail"
else
	ok "verify_only with the wrong layout fails"
fi

# 10. two processes on one store: one gets a clear error, nothing corrupt
run --name=p --numjobs=2 --coil_store="$W/p.coil" --rw=write --bs=64k \
	--size=64m --time_based --runtime=2 --iodepth=4
if grep -q "open in another process" "$W/out"; then
	ok "second process gets a clear -EBUSY error"
else
	bad "second process gets a clear -EBUSY error"
fi

# 11. options are applied: a bad compression name is refused
if run --name=b --coil_store="$W/b.coil" --coil_compression=lz4 --filename=obj \
	--rw=write --bs=4k --size=1m; then
	bad "coil_compression=lz4 must be refused"
else
	ok "coil_compression=lz4 refused"
fi

# 12. every option reaches the store (read back from coil_stats_json)
if COIL_FIO_STATS="$W/st.json" run --name=o --coil_store="$W/o.coil" --filename=obj \
	--rw=write --bs=64k --size=2m --coil_size=256m --coil_pool=semaphore \
	--coil_workers=1 --coil_prefetch=0 --coil_cache=3m --coil_compression=zstd:5 &&
	python3 - "$W/st.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s['store']['size'] == 256 << 20, s['store']
assert s['store']['compression_level'] == 5, s['store']
assert s['pool']['mode'] == 'semaphore' and s['pool']['workers'] == 1, s['pool']
assert s['cache']['bytes_max'] == 3 << 20, s['cache']
assert s['prefetch']['enabled'] is False, s['prefetch']
PY
then
	ok "coil_size/compression/pool/workers/prefetch/cache applied"
else
	bad "coil_size/compression/pool/workers/prefetch/cache applied"
fi

# 13. coil_poll_us: the reaper polls before it sleeps; several threads on
# one store, every block verified, reads and writes
if run --name=p --thread --numjobs=2 --coil_store="$W/p.coil" --rw=randrw \
	--bs=4k --size=4m --iodepth=16 --coil_poll_us=50 --verify=crc32c \
	--do_verify=1 && [ "$(grep -c "err= 0" "$W/out")" -ge 2 ]; then
	ok "coil_poll_us=50 with 2 threads, verified"
else
	bad "coil_poll_us=50 with 2 threads, verified"
fi

# 14. a store that cannot be opened: fio reports coil's errno and reason,
# not the EINVAL it used to get for every open failure
echo "not a store" >"$W/text.coil"
mkdir -p "$W/dir.coil"
got=
run --name=e --coil_store="$W/text.coil" --rw=read --size=1m
grep -q "coil: cannot open store $W/text.coil: not a coil store" "$W/out" &&
	grep -q "err=124/.*func=coil_open, error=Wrong medium type" "$W/out" && got=1
run --name=e --coil_store="$W/dir.coil" --rw=read --size=1m
grep -q "coil: cannot open store $W/dir.coil: is a directory" "$W/out" &&
	grep -q "err=21/.*func=coil_open, error=Is a directory" "$W/out" && got=$got.2
if [ "$got" = 1.2 ]; then
	ok "open failures carry coil's errno and reason"
else
	bad "open failures carry coil's errno and reason"
fi

echo "fio plugin: $pass passed, $fail failed"
[ "$fail" = 0 ]
