#!/usr/bin/env python3
"""Comparison 2: compressed write and read throughput per core, coil vs
`zstd -b` on the same data (a tar of /usr/include) and block size.

Three sides, alternated:
  coil     streams the file into a fresh store (zstd:L, 64 KiB blobs, 1 MiB
           requests, QD 4) and reads it back cold and verified; per core =
           logical bytes / CPU seconds of the whole process (every coil
           thread: submit, ring, pool workers).
  libzstd  the codec alone on the same blocks (coil_bench zstd): the same
           file cut into blob-sized blocks, ZSTD_compressCCtx and
           ZSTD_decompressDCtx on one thread, per CPU second.  It also
           decodes blocks flushed out of every cache level first
           (read_cold), to show whether warm caches flatter it.
  zstd -b  the command-line benchmark (-b<L> -B<blob>), as it prints it.
           It times wall clock, so a busy shared machine lowers it; it is
           reported for reference, and the overhead is computed against
           the CPU-timed libzstd side, like coil's.
Overhead beyond the codec = libzstd_per_core / coil_per_core - 1
(target <= 15 %).

Knobs: BENCH_CODEC_MIB (data size, default 128 x BENCH_SCALE),
BENCH_CODEC_LEVEL (default 1), BENCH_CODEC_BLOB (default 65536).
"""
import os
import re
import subprocess

import bench_common as bc

MIB = int(os.environ.get('BENCH_CODEC_MIB', str(int(128 * bc.SCALE))))
LEVEL = int(os.environ.get('BENCH_CODEC_LEVEL', '1'))
BLOB = int(os.environ.get('BENCH_CODEC_BLOB', '65536'))
DATA = os.path.join(bc.VAR, 'codec-corpus.tar')
STORE = os.path.join(bc.VAR, 'codec.coil')
TOOL = os.path.join(bc.BUILD, 'perf', 'fio', 'coil_bench')

ZSTD_RE = re.compile(r':\s*(\d+)\s*->\s*(\d+)\s*\(x?([\d.]+)\),\s*([\d.]+)\s*MB/s,\s*([\d.]+)\s*MB/s')


def make_corpus():
    if os.path.exists(DATA) and os.path.getsize(DATA) == MIB << 20:
        return
    bc.log('   corpus: first %d MiB of a tar of /usr/include' % MIB)
    with open(DATA, 'wb') as out:
        tar = subprocess.Popen(['tar', '-cf', '-', '-C', '/usr', 'include'],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        left = MIB << 20
        while left:
            chunk = tar.stdout.read(min(left, 1 << 20))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
        tar.kill()
        tar.wait()
        # A short /usr/include: repeat what we have to reach the size.
        while left > 0:
            with open(DATA, 'rb') as src:
                chunk = src.read(min(left, 1 << 20))
            out.write(chunk)
            left -= len(chunk)


def run_zstd():
    p = subprocess.run(['zstd', '-b%d' % LEVEL, '-B%d' % BLOB, '-i1', DATA],
                       capture_output=True, text=True)
    text = (p.stdout + p.stderr).replace('\r', '\n')
    m = None
    for m in ZSTD_RE.finditer(text):
        pass
    if not m:
        raise RuntimeError('cannot parse zstd -b output: ' + text[-400:])
    return {'write_mb_per_cpu_s': float(m.group(4)),
            'read_mb_per_cpu_s': float(m.group(5)),
            'ratio': float(m.group(3)), 'stored_bytes': int(m.group(2))}


def run_libzstd():
    p = subprocess.run([TOOL, 'zstd', DATA, str(BLOB), str(LEVEL)],
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('coil_bench zstd: ' + p.stderr)
    d = bc.json.loads(p.stdout)
    return {'write_mb_per_cpu_s': d['write_mb_per_cpu_s'],
            'read_mb_per_cpu_s': d['read_mb_per_cpu_s'],
            'read_cold_mb_per_cpu_s': d['read_cold_mb_per_cpu_s'],
            'ratio': d['ratio'], 'stored_bytes': d['stored_bytes']}


def run_coil():
    bc.fresh(STORE)
    w = subprocess.run([TOOL, 'copy-in', STORE, DATA, 'data', str(1 << 20), '4',
                        'zstd:%d' % LEVEL], capture_output=True, text=True)
    if w.returncode:
        raise RuntimeError('coil_bench copy-in: ' + w.stderr)
    r = subprocess.run([TOOL, 'copy-out', STORE, DATA, 'data', str(1 << 20), '4'],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError('coil_bench copy-out: ' + r.stderr)
    wd, rd = bc.json.loads(w.stdout), bc.json.loads(r.stdout)
    space = wd.get('stats', {}).get('space', {})
    stored = space.get('stored') or space.get('stored_bytes') or 0
    logical = space.get('logical') or space.get('logical_bytes') or 0
    return {'write_mb_per_cpu_s': wd['mb_per_cpu_s'],
            'read_mb_per_cpu_s': rd['mb_per_cpu_s'],
            'write_mb_s': wd['mb_s'], 'read_mb_s': rd['mb_s'],
            'write_page_faults': wd.get('page_faults', 0),
            'read_page_faults': rd.get('page_faults', 0),
            'write_p99_us': wd['latency']['p99_us'],
            'read_p99_us': rd['latency']['p99_us'],
            'ratio': logical / stored if stored else 0.0,
            'stored_bytes': stored}


def main():
    if not os.path.exists(TOOL):
        raise SystemExit('bench: %s missing; build first' % TOOL)
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== 2. codec: coil compressed write/read per core vs zstd -b%d -B%d (%d MiB, %d repeats)'
           % (LEVEL, BLOB, MIB, bc.REPEATS))
    make_corpus()
    sides = {'zstd_cli': run_zstd, 'libzstd': run_libzstd, 'coil': run_coil}
    runs = {k: [] for k in sides}
    for r, side, fn in bc.alternate(bc.REPEATS, sides):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d %-8s write %7.1f MB/s/core  read %7.1f MB/s/core  ratio %.2f'
               % (r + 1, side, s['write_mb_per_cpu_s'], s['read_mb_per_cpu_s'], s['ratio']))
    keys = sorted(set(k for rs in runs.values() for k in rs[0]))
    med = bc.summarize(runs, keys)
    ow = bc.ratio(med['libzstd']['write_mb_per_cpu_s'], med['coil']['write_mb_per_cpu_s']) - 1
    orr = bc.ratio(med['libzstd']['read_mb_per_cpu_s'], med['coil']['read_mb_per_cpu_s']) - 1
    doc = {'comparison': 'codec_vs_zstd', 'level': LEVEL, 'blob': BLOB,
           'bytes': MIB << 20, 'runs': runs, 'median': med,
           'overhead_write': ow, 'overhead_read': orr, 'target': 0.15,
           'verdict_write': bc.verdict(ow, 0.15, False),
           'verdict_read': bc.verdict(orr, 0.15, False)}
    bc.log('   median overhead beyond the codec: write %+.0f %%, read %+.0f %% (target <= 15 %%: %s/%s)'
           % (ow * 100, orr * 100, doc['verdict_write'], doc['verdict_read']))
    cli, cold = med['zstd_cli'], med['libzstd'].get('read_cold_mb_per_cpu_s', 0)
    doc['overhead_vs_cli_write'] = bc.ratio(cli['write_mb_per_cpu_s'], med['coil']['write_mb_per_cpu_s']) - 1
    doc['overhead_vs_cli_read'] = bc.ratio(cli['read_mb_per_cpu_s'], med['coil']['read_mb_per_cpu_s']) - 1
    bc.log('   against zstd -b as it prints (wall clock): write %+.0f %%, read %+.0f %%; '
           'libzstd decoding blocks flushed from the caches: %.0f MB/s per core (warm %.0f)'
           % (doc['overhead_vs_cli_write'] * 100, doc['overhead_vs_cli_read'] * 100, cold,
              med['libzstd']['read_mb_per_cpu_s']))
    bc.save('codec_vs_zstd', doc)


if __name__ == '__main__':
    main()
