#!/usr/bin/env python3
"""Comparison 5: a 4 KiB page store.  N unique pages written in random
order, then N uniformly random page reads, then bytes on disk:
coil (one object, page i at offset 4096*i, zstd:1, single submitting thread
at QD 1 and at QD 32) vs RocksDB db_bench (filluniquerandom, compact,
readrandom; 16-byte keys, 4096-byte values, zstd, one thread, O_DIRECT
reads and flushes).  Values on both sides are made the same way
(db_bench's compression_ratio=0.5 scheme: half random printable bytes,
half repeats), so zstd sees the same redundancy.

Knobs: BENCH_PAGES (N, default 20000 x BENCH_SCALE), BENCH_PAGES_RATIO (0.5).
"""
import os
import re
import subprocess

import bench_common as bc

N = int(os.environ.get('BENCH_PAGES', str(max(1000, int(20000 * bc.SCALE)))))
RATIO = float(os.environ.get('BENCH_PAGES_RATIO', '0.5'))
DB = os.path.join(bc.VAR, 'rocksdb')
STORE = os.path.join(bc.VAR, 'pages.coil')
TOOL = os.path.join(bc.BUILD, 'perf', 'fio', 'coil_bench')
LINE = re.compile(r'^(\w+)\s*:\s*([\d.]+) micros/op (\d+) ops/sec')
PCT = re.compile(r'P50: ([\d.]+) .*P99: ([\d.]+)')


def du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def run_rocksdb():
    bc.fresh(DB)
    ru0 = bc.resource.getrusage(bc.resource.RUSAGE_CHILDREN)
    p = subprocess.run(['db_bench', '--benchmarks=filluniquerandom,compact,readrandom',
                        '--num=%d' % N, '--value_size=4096', '--key_size=16',
                        '--compression_type=zstd', '--compression_ratio=%g' % RATIO,
                        '--db=' + DB, '--threads=1', '--histogram=1',
                        '--use_direct_reads=true',
                        '--use_direct_io_for_flush_and_compaction=true'],
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('db_bench: ' + p.stderr[-2000:])
    out, cur = {}, None
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        if m:
            cur = m.group(1)
            out[cur] = {'ops_s': float(m.group(3))}
            continue
        m = PCT.search(line)
        if m and cur:
            out[cur]['p50_us'] = float(m.group(1))
            out[cur]['p99_us'] = float(m.group(2))
    w, r = out['filluniquerandom'], out['readrandom']
    return {'write_ops_s': w['ops_s'], 'write_p99_us': w.get('p99_us', 0),
            'read_ops_s': r['ops_s'], 'read_p99_us': r.get('p99_us', 0),
            'disk_bytes': du(DB), 'stored_bytes': du(DB)}


def run_coil(qd):
    bc.fresh(STORE)
    p = subprocess.run([TOOL, 'pages', STORE, str(N), str(qd), str(RATIO),
                        'zstd:1', '12345'], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('coil_bench pages: ' + p.stderr[-2000:])
    d = bc.json.loads(p.stdout)
    space = d.get('stats', {}).get('space', {})
    # Bytes on disk: what coil has allocated in its data segments (the file
    # itself is preallocated to its capacity, so its blocks say nothing);
    # stored = the compressed bytes those segments hold.
    disk = space.get('allocated') or space.get('allocated_bytes') or d['file_allocated_bytes']
    return {'write_ops_s': d['write']['ops_s'], 'write_p99_us': d['write']['latency']['p99_us'],
            'read_ops_s': d['read']['ops_s'], 'read_p99_us': d['read']['latency']['p99_us'],
            'disk_bytes': disk, 'file_allocated_bytes': d['file_allocated_bytes'],
            'stored_bytes': space.get('stored') or space.get('stored_bytes') or 0}


def main():
    if not os.path.exists(TOOL):
        raise SystemExit('bench: %s missing; build first' % TOOL)
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== 5. pages: %d x 4 KiB pages, coil vs RocksDB db_bench (zstd, %d repeats)'
           % (N, bc.REPEATS))
    sides = {'rocksdb': run_rocksdb, 'coil_qd1': lambda: run_coil(1),
             'coil_qd32': lambda: run_coil(32)}
    runs = {k: [] for k in sides}
    for r, side, fn in bc.alternate(bc.REPEATS, sides):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d %-9s write %8.0f ops/s p99 %8.1f us | read %8.0f ops/s p99 %8.1f us | disk %6.1f MiB'
               % (r + 1, side, s['write_ops_s'], s['write_p99_us'], s['read_ops_s'],
                  s['read_p99_us'], s['disk_bytes'] / 1048576.0))
    keys = ['write_ops_s', 'write_p99_us', 'read_ops_s', 'read_p99_us', 'disk_bytes',
            'stored_bytes']
    med = bc.summarize(runs, keys)
    doc = {'comparison': 'pages_vs_rocksdb', 'pages': N, 'value_bytes': N * 4096,
           'ratio': RATIO, 'runs': runs, 'median': med, 'ratios': {}}
    for side in ('coil_qd1', 'coil_qd32'):
        doc['ratios'][side] = {
            'write_ops': bc.ratio(med[side]['write_ops_s'], med['rocksdb']['write_ops_s']),
            'read_ops': bc.ratio(med[side]['read_ops_s'], med['rocksdb']['read_ops_s']),
            'disk_bytes': bc.ratio(med[side]['disk_bytes'], med['rocksdb']['disk_bytes'])}
        x = doc['ratios'][side]
        bc.log('   median %s/rocksdb: writes %.2fx, reads %.2fx, bytes on disk %.2fx'
               % (side, x['write_ops'], x['read_ops'], x['disk_bytes']))
    bc.save('pages_vs_rocksdb', doc)


if __name__ == '__main__':
    main()
