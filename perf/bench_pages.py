#!/usr/bin/env python3
"""Comparison 5: a 4 KiB page store.  N unique pages written in random
order, then N uniformly random page reads, then bytes on disk:
coil (one object, page i at offset 4096*i, zstd:1, single submitting thread
at QD 1 and at QD 32) vs RocksDB db_bench (filluniquerandom, compact,
readrandom; 16-byte keys, 4096-byte values, zstd, one thread, O_DIRECT
reads and flushes).  Values on both sides are made the same way
(db_bench's compression_ratio=0.5 scheme: half random printable bytes,
half repeats), so zstd sees the same redundancy.

Then 5b, a database's path: default options on both sides.  N unique
pages written in random order by one thread at QD 1 (db_bench
filluniquerandom with zstd, sync=false; coil_write), a cold reopen (the
page cache dropped for RocksDB; coil reads O_DIRECT), then 3N uniformly
random page reads at QD 1 (db_bench readrandom; coil_pread).  Beside them,
the QD 1 latency of a 4 KiB read that the cache holds and of one it does
not (coil: a page's rereads, and reads of random pages right after a fresh
open; a page's first read in the run is often served by the block a
neighbour's read brought, reported apart), next to fio's io_uring
engine at QD 1 on a plain file of the same size (O_DIRECT: the device;
buffered, after one pass over the file: the page cache).

  perf/bench_pages.py           both parts
  perf/bench_pages.py qd1       only 5b
  perf/bench_pages.py optimize  5c: coil's page store (5b's writes,
                                defaults) before and after `coil optimize`:
                                stored and allocated bytes of its segments,
                                the file's allocated blocks (du), the
                                optimizer's seconds

Knobs: BENCH_PAGES (N, default 20000 x BENCH_SCALE), BENCH_PAGES_RATIO (0.5),
BENCH_PAGES_READS (reads per page in 5b, default 3).
"""
import os
import re
import subprocess
import sys
import time

import bench_common as bc

N = int(os.environ.get('BENCH_PAGES', str(max(1000, int(20000 * bc.SCALE)))))
READS = int(os.environ.get('BENCH_PAGES_READS', '3'))
PLAIN = os.path.join(bc.VAR, 'plain.dat')
RATIO = float(os.environ.get('BENCH_PAGES_RATIO', '0.5'))
DB = os.path.join(bc.VAR, 'rocksdb')
STORE = os.path.join(bc.VAR, 'pages.coil')
TOOL = os.path.join(bc.BUILD, 'perf', 'fio', 'coil_bench')
CLI = os.path.join(bc.BUILD, 'tools', 'coil')
MIB = 1048576.0
LINE = re.compile(r'^(\w+)\s*:\s*([\d.]+) micros/op (\d+) ops/sec')
PCT = re.compile(r'P50: ([\d.]+) .*P99: ([\d.]+)')


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
            'disk_bytes': bc.du(DB), 'stored_bytes': bc.du(DB)}


def run_coil(qd):
    bc.fresh(STORE)
    p = subprocess.run([TOOL, 'pages', STORE, str(N), str(qd), str(RATIO),
                        'zstd:1', '12345'], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('coil_bench pages: ' + p.stderr[-2000:])
    d = bc.json.loads(p.stdout)
    space = d.get('stats', {}).get('space', {})
    # Bytes on disk: the store file's allocated blocks (du), as for the
    # peer (a default store grows with its data); stored = the compressed
    # bytes its segments hold.
    disk = d['file_allocated_bytes']
    return {'write_ops_s': d['write']['ops_s'], 'write_p99_us': d['write']['latency']['p99_us'],
            'read_ops_s': d['read']['ops_s'], 'read_p99_us': d['read']['latency']['p99_us'],
            'disk_bytes': disk, 'file_allocated_bytes': d['file_allocated_bytes'],
            'stored_bytes': space.get('stored') or space.get('stored_bytes') or 0}


def db_bench(args):
    p = subprocess.run(['db_bench'] + args, capture_output=True, text=True)
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
    return out


def run_rocksdb_qd1():
    """db_bench's defaults but zstd: buffered reads, 8 MiB block cache,
    sync=false; one thread.  The fill and the reads are two runs, so the
    reads start from a reopened database with the page cache dropped."""
    bc.fresh(DB)
    common = ['--num=%d' % N, '--value_size=4096', '--key_size=16',
              '--compression_type=zstd', '--compression_ratio=%g' % RATIO,
              '--db=' + DB, '--threads=1', '--histogram=1']
    w = db_bench(common + ['--benchmarks=filluniquerandom'])['filluniquerandom']
    bc.drop_caches()
    r = db_bench(common + ['--benchmarks=readrandom', '--use_existing_db=1',
                           '--reads=%d' % (N * READS)])['readrandom']
    return {'write_ops_s': w['ops_s'], 'read_ops_s': r['ops_s'],
            'read_p50_us': r.get('p50_us', 0), 'read_p99_us': r.get('p99_us', 0),
            'disk_bytes': bc.du(DB)}


def run_coil_qd1():
    bc.fresh(STORE)
    bc.drop_caches()
    p = subprocess.run([TOOL, 'pages', STORE, str(N), '1', str(RATIO),
                        'zstd:1', '12345', str(READS)], capture_output=True,
                       text=True)
    if p.returncode:
        raise RuntimeError('coil_bench pages: ' + p.stderr[-2000:])
    d = bc.json.loads(p.stdout)
    rd, space = d['read'], d.get('stats', {}).get('space', {})
    return {'write_ops_s': d['write']['ops_s'], 'read_ops_s': rd['ops_s'],
            'write_p50_us': d['write']['latency']['p50_us'],
            'write_p99_us': d['write']['latency']['p99_us'],
            'read_p50_us': rd['latency']['p50_us'], 'read_p99_us': rd['latency']['p99_us'],
            # a page's first read (the device, or a block a neighbouring
            # page's read brought) and the device alone (a fresh open)
            'first_p50_us': rd['latency_first']['p50_us'],
            'first_p99_us': rd['latency_first']['p99_us'],
            'uncached_p50_us': d['read_device']['latency']['p50_us'],
            'uncached_p99_us': d['read_device']['latency']['p99_us'],
            'cached_p50_us': rd['latency_again']['p50_us'],
            'cached_p99_us': rd['latency_again']['p99_us'],
            'cache_hit_ratio': d['stats']['cache'].get('hit_ratio', 0),
            # bytes on disk: the store file's allocated blocks (du) once
            # the store is closed, as RocksDB's directory is measured after
            # db_bench exits (and as comparison 5 does); the same while the
            # read session had it open (its journal allocated again), and
            # the segments holding data beside
            'disk_bytes': d['file_allocated_bytes'],
            'disk_bytes_open': space.get('disk_bytes', 0),
            'segment_bytes': space.get('allocated', 0)}


def run_rocksdb_sync():
    """The same fill with a sync every 100 writes: db_bench batches of
    100 (--batch_size) written with --sync=1."""
    bc.fresh(DB)
    w = db_bench(['--num=%d' % N, '--value_size=4096', '--key_size=16',
                  '--compression_type=zstd', '--compression_ratio=%g' % RATIO,
                  '--db=' + DB, '--threads=1', '--histogram=1',
                  '--benchmarks=filluniquerandom', '--sync=1',
                  '--batch_size=100'])['filluniquerandom']
    # db_bench counts a batch of 100 as 100 ops
    return {'write_ops_s': w['ops_s']}


def run_coil_sync():
    """coil_write at QD 1 with a coil_sync after every 100 writes."""
    bc.fresh(STORE)
    p = subprocess.run([TOOL, 'pages', STORE, str(N), '1', str(RATIO),
                        'zstd:1', '12345', '1', '100'], capture_output=True,
                       text=True)
    if p.returncode:
        raise RuntimeError('coil_bench pages: ' + p.stderr[-2000:])
    d = bc.json.loads(p.stdout)
    sl = d['write']['sync_latency']
    return {'write_ops_s': d['write']['ops_s'], 'sync_p50_us': sl['p50_us'],
            'sync_p99_us': sl['p99_us']}


def run_fio_qd1():
    """fio io_uring QD 1 4 KiB random reads of a plain file of the pages'
    size: O_DIRECT (the device), then buffered with the file already in the
    page cache (the kernel's cache hit)."""
    size = N * 4096
    base = ['--name=qd1', '--filename=' + PLAIN, '--size=%d' % size,
            '--ioengine=io_uring', '--iodepth=1', '--rw=randread', '--bs=4k',
            '--time_based', '--runtime=%d' % max(2, int(3 * bc.SCALE)),
            '--randrepeat=0']
    if not os.path.exists(PLAIN) or os.path.getsize(PLAIN) != size:
        bc.fio(['--name=mk', '--filename=' + PLAIN, '--size=%d' % size,
                '--rw=write', '--bs=1M', '--ioengine=psync'])
    dev = bc.fio_summary(bc.fio(base + ['--direct=1']), 'read')
    bc.fio(['--name=warm', '--filename=' + PLAIN, '--size=%d' % size,
            '--rw=read', '--bs=1M', '--ioengine=psync', '--invalidate=0'])
    hot = bc.fio_summary(bc.fio(base + ['--direct=0', '--invalidate=0']), 'read')
    wbase = [a.replace('randread', 'randwrite') for a in base]
    wdev = bc.fio_summary(bc.fio(wbase + ['--direct=1']), 'write')
    wbuf = bc.fio_summary(bc.fio([a.replace('io_uring', 'psync') for a in wbase] +
                                 ['--direct=0']), 'write')
    # a commit's cost next to coil_sync's: fdatasync after every 100
    # buffered page writes (fio's sync latency)
    wsync = bc.fio([a.replace('io_uring', 'psync') for a in wbase] +
                   ['--direct=0', '--fdatasync=100'])['jobs'][0]['sync']['lat_ns']
    return {'uncached_p50_us': dev['p50_us'], 'uncached_p99_us': dev['p99_us'],
            'write_direct_p50_us': wdev['p50_us'], 'write_direct_p99_us': wdev['p99_us'],
            'write_buffered_p50_us': wbuf['p50_us'], 'write_buffered_p99_us': wbuf['p99_us'],
            'sync_p50_us': bc.pct(wsync, 50), 'sync_p99_us': bc.pct(wsync, 99),
            'read_ops_s': dev['iops'],
            'cached_p50_us': hot['p50_us'], 'cached_p99_us': hot['p99_us'],
            'cached_ops_s': hot['iops']}


def main_qd1():
    bc.log('== 5b. pages at QD 1, defaults: %d x 4 KiB pages written, cold reopen, '
           '%d random reads; coil vs RocksDB db_bench (zstd, sync=false), '
           'fio io_uring QD 1 beside (%d repeats)' % (N, N * READS, bc.REPEATS))
    sides = {'rocksdb': run_rocksdb_qd1, 'coil': run_coil_qd1, 'fio': run_fio_qd1,
             'rocksdb_sync100': run_rocksdb_sync, 'coil_sync100': run_coil_sync}
    runs = {k: [] for k in sides}
    for r, side, fn in bc.alternate(bc.REPEATS, sides):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d %-7s %s' % (r + 1, side, ' '.join(
            '%s=%.4g' % (k, v) for k, v in sorted(s.items()))))
    keys = ['write_ops_s', 'read_ops_s', 'read_p50_us', 'read_p99_us',
            'uncached_p50_us', 'uncached_p99_us', 'first_p50_us',
            'first_p99_us', 'cached_p50_us',
            'cached_p99_us', 'cached_ops_s', 'cache_hit_ratio', 'disk_bytes',
            'disk_bytes_open', 'segment_bytes', 'write_p50_us', 'write_p99_us', 'write_direct_p50_us',
            'write_direct_p99_us', 'write_buffered_p50_us', 'write_buffered_p99_us',
            'sync_p50_us', 'sync_p99_us']
    med = bc.summarize(runs, keys)
    c, k, f = med['coil'], med['rocksdb'], med['fio']
    doc = {'comparison': 'pages_qd1_vs_rocksdb', 'pages': N, 'reads': N * READS,
           'ratio': RATIO, 'runs': runs, 'median': med, 'ratios': {
               'write_ops': bc.ratio(c['write_ops_s'], k['write_ops_s']),
               'write_ops_sync100': bc.ratio(med['coil_sync100']['write_ops_s'],
                                             med['rocksdb_sync100']['write_ops_s']),
               'read_ops': bc.ratio(c['read_ops_s'], k['read_ops_s']),
               'disk_bytes': bc.ratio(c['disk_bytes'], k['disk_bytes']),
               'uncached_p50_vs_fio': bc.ratio(c['uncached_p50_us'], f['uncached_p50_us']),
               'cached_p50_vs_fio': bc.ratio(c['cached_p50_us'], f['cached_p50_us'])}}
    x = doc['ratios']
    bc.log('   median coil/rocksdb: reads/s %.0f / %.0f = %.2fx, writes/s %.0f / %.0f = %.2fx, '
           'bytes on disk %.2fx' % (c['read_ops_s'], k['read_ops_s'], x['read_ops'],
                                     c['write_ops_s'], k['write_ops_s'], x['write_ops'],
                                     x['disk_bytes']))
    bc.log('   median QD1 4 KiB read latency p50/p99 us: coil uncached %.1f/%.1f, cached %.1f/%.1f, '
           'a page\'s first read %.1f/%.1f; '
           'fio io_uring O_DIRECT %.1f/%.1f, page cache %.1f/%.1f; rocksdb (all reads) %.1f/%.1f'
           % (c['uncached_p50_us'], c['uncached_p99_us'], c['cached_p50_us'], c['cached_p99_us'],
              c['first_p50_us'], c['first_p99_us'],
              f['uncached_p50_us'], f['uncached_p99_us'], f['cached_p50_us'], f['cached_p99_us'],
              k['read_p50_us'], k['read_p99_us']))
    bc.log('   median writes/s with a sync every 100: coil %.0f, rocksdb %.0f = %.2fx'
           % (med['coil_sync100']['write_ops_s'], med['rocksdb_sync100']['write_ops_s'],
              x['write_ops_sync100']))
    bc.log('   median QD1 4 KiB write latency p50/p99 us: coil %.1f/%.1f; fio io_uring '
           'O_DIRECT %.1f/%.1f, psync buffered %.1f/%.1f'
           % (c['write_p50_us'], c['write_p99_us'], f['write_direct_p50_us'],
              f['write_direct_p99_us'], f['write_buffered_p50_us'], f['write_buffered_p99_us']))
    cs = med['coil_sync100']
    bc.log('   median sync after every 100 page writes, p50/p99 us: coil_sync %.1f/%.1f; '
           'fio psync buffered + fdatasync %.1f/%.1f'
           % (cs['sync_p50_us'], cs['sync_p99_us'], f['sync_p50_us'], f['sync_p99_us']))
    bc.save('pages_qd1_vs_rocksdb', doc)


def coil_space(store):
    p = subprocess.run([CLI, 'stats', '--json', store], capture_output=True,
                       text=True)
    if p.returncode:
        raise RuntimeError('coil stats: ' + p.stderr[-2000:])
    space = bc.json.loads(p.stdout)['space']
    return {'stored': space['stored'], 'allocated': space['allocated'],
            'du': bc.du(store)}


def run_coil_optimize():
    """5b's pages written (defaults), then `coil optimize` on the store."""
    bc.fresh(STORE)
    p = subprocess.run([TOOL, 'pages', STORE, str(N), '1', str(RATIO),
                        'zstd:1', '12345'], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('coil_bench pages: ' + p.stderr[-2000:])
    before = coil_space(STORE)
    t0 = time.time()
    p = subprocess.run([CLI, 'optimize', STORE], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('coil optimize: ' + p.stderr[-2000:])
    secs = time.time() - t0
    after = coil_space(STORE)
    out = {'optimize_s': secs}
    for k in before:
        out[k + '_before'] = before[k]
        out[k + '_after'] = after[k]
    return out


def main_optimize():
    bc.log('== 5c. coil\'s page store before and after coil optimize: %d x 4 KiB '
           'pages written at QD 1, defaults (%d repeats)' % (N, bc.REPEATS))
    runs = {'coil': []}
    for r in range(bc.REPEATS):
        s = run_coil_optimize()
        runs['coil'].append(s)
        bc.log('   rep %d stored %.2f -> %.2f MiB, allocated %.2f -> %.2f MiB, '
               'du %.2f -> %.2f MiB, optimize %.1f s'
               % (r + 1, s['stored_before'] / MIB, s['stored_after'] / MIB,
                  s['allocated_before'] / MIB, s['allocated_after'] / MIB,
                  s['du_before'] / MIB, s['du_after'] / MIB, s['optimize_s']))
    keys = sorted(runs['coil'][0].keys())
    med = bc.summarize(runs, keys)
    bc.save('pages_optimize', {'comparison': 'pages_optimize', 'pages': N,
                               'ratio': RATIO, 'runs': runs, 'median': med})


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
    main_qd1()


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == 'optimize':
        if not os.path.exists(TOOL) or not os.path.exists(CLI):
            raise SystemExit('bench: %s or %s missing; build first' % (TOOL, CLI))
        os.makedirs(bc.VAR, exist_ok=True)
        main_optimize()
    elif len(sys.argv) > 1 and sys.argv[1] == 'qd1':
        if not os.path.exists(TOOL):
            raise SystemExit('bench: %s missing; build first' % TOOL)
        os.makedirs(bc.VAR, exist_ok=True)
        main_qd1()
    else:
        main()
