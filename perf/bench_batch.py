#!/usr/bin/env python3
"""Atomic batches: N 4 KiB pages written by one thread, one by one or in
batches of B, coil vs RocksDB db_bench, default options on both sides
(perf/bench_batch.c is coil's driver; tools/dev.sh bench-batch runs this).

Keys are drawn uniformly from [0, N) with repeats, as db_bench's fillrandom
draws them (about 63 % of the keys end up written); in coil key k is page
k / 4 of one of 4 objects (k % 4), so a batch spans every object.  Values
are 50 % compressible the db_bench way (half random printable bytes, the
rest repeats of them: about 2:1 for zstd), as perf/bench_pages.py makes
them.

With a sync every B writes:
  coil one      coil_pwrite per page, coil_sync after every B
  coil batch    B coil_batch_write per batch, coil_batch_commit, coil_sync
                after each batch (the same durability points)
  RocksDB       db_bench --benchmarks=fillrandom --batch_size=B --sync=1
                --value_size=4096 --key_size=16 --compression_type=zstd
                --compression_ratio=0.5 --num=N (one WriteBatch of B keys,
                the WAL synced at each), every other option its default
Without syncs: the same with no coil_sync and --sync=0.

Reported, medians over BENCH_REPEATS repeats that alternate the order of
the sides: writes/s (db_bench's ops/sec, which counts each key of a batch;
coil: N / the time of the writes and their syncs), the time of a group of
B writes (a batch, or B coil_pwrite calls, with its sync) as p50/p99
(db_bench --histogram=1 records one sample per batch), and device bytes
written per logical byte (N x 4096 bytes of values; keys not counted):
  coil     the store's io.device_bytes_written (coil_stats_json) over the
           writes and their syncs; without syncs, over the writes and one
           coil_sync after them, off the clock, so the bytes the run still
           owed the device are in.  The object creates before and the close
           after are not counted.  The kernel's count for the driver over
           the same span (/proc/self/io write_bytes less
           cancelled_write_bytes) is saved beside it as a cross-check.
  RocksDB  the kernel's count for the db_bench process, whole: write_bytes
           less cancelled_write_bytes from /proc/<pid>/io, read after it
           exited and before it was reaped.  write_bytes counts a buffered
           page when it is dirtied, so the WAL written with --sync=0 counts
           though db_bench exits before writeback; cancelled_write_bytes
           takes back dirty pages of files deleted before writeback (WAL
           files after a flush).  The open's few KiB (OPTIONS, MANIFEST,
           LOG) are in it.  The DB directory's growth would miss the WAL
           files RocksDB deletes after a flush, so it is saved but not used.
Neither side's deferred work after the writes is counted: the small writes
coil still holds for its packer (saved as in_memory_bytes) and RocksDB's
memtable, which the close does not flush (the WAL holds it), nor any
compaction after the run.

Knobs:
  BENCH_BATCH_N        pages written (default 20000 x BENCH_SCALE, >= 1000)
  BENCH_BATCH_B        writes per batch / per sync (default 100, <= 1024)
  BENCH_BATCH_OBJECTS  coil objects the pages are spread over (default 4)
  BENCH_BATCH_RATIO    compressible fraction (default 0.5)
  BENCH_BATCH_BIN      the driver (default $BUILD/perf/bench_batch)
  BENCH_REPEATS, BENCH_SCALE, BUILD: see perf/bench_common.py
  BENCH_KEEP=1         keep the last store and database under var/bench/
Results: perf/results/batch_vs_rocksdb.json (every run's raw numbers).
"""
import os
import re
import shutil
import subprocess
import sys

import bench_common as bc

N = int(os.environ.get('BENCH_BATCH_N', str(max(1000, int(20000 * bc.SCALE)))))
B = int(os.environ.get('BENCH_BATCH_B', '100'))
OBJECTS = int(os.environ.get('BENCH_BATCH_OBJECTS', '4'))
RATIO = float(os.environ.get('BENCH_BATCH_RATIO', '0.5'))
BIN = os.path.abspath(os.path.join(bc.ROOT, os.environ.get(
    'BENCH_BATCH_BIN', os.path.join(bc.BUILD, 'perf', 'bench_batch'))))
KEEP = bool(os.environ.get('BENCH_KEEP'))
DB = os.path.join(bc.VAR, 'batch-rocksdb')
STORE = os.path.join(bc.VAR, 'batch.coil')
LINE = re.compile(r'^(\w+)\s*:\s*([\d.]+) micros/op (\d+) ops/sec')
PCT = re.compile(r'P50: ([\d.]+) .*P99: ([\d.]+)')


def proc_io(pid):
    """write_bytes less cancelled_write_bytes of a child that has exited
    but is not reaped, or None where /proc/<pid>/io cannot be read."""
    try:
        with open('/proc/%d/io' % pid) as f:
            io = dict(line.split(':', 1) for line in f if ':' in line)
        return int(io['write_bytes']) - int(io['cancelled_write_bytes'])
    except (OSError, KeyError, ValueError):
        return None


def run_rocksdb(sync):
    bc.fresh(DB)
    os.sync()  # the previous run's dirty pages are not written back in this one
    cmd = ['db_bench', '--benchmarks=fillrandom', '--num=%d' % N,
           '--batch_size=%d' % B, '--sync=%d' % (1 if sync else 0),
           '--value_size=4096', '--key_size=16', '--compression_type=zstd',
           '--compression_ratio=%g' % RATIO, '--db=' + DB, '--threads=1',
           '--histogram=1']
    out_path, err_path = DB + '.out', DB + '.err'
    ru0 = bc.resource.getrusage(bc.resource.RUSAGE_CHILDREN)
    with open(out_path, 'w') as out, open(err_path, 'w') as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        # Wait for the exit but leave the zombie, so its I/O counters can
        # still be read (all its threads' counts are folded into it).
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        dev = proc_io(p.pid)
        rc = p.wait()
    ru1 = bc.resource.getrusage(bc.resource.RUSAGE_CHILDREN)
    with open(out_path) as f:
        text = f.read()
    with open(err_path) as f:
        etext = f.read()
    os.unlink(out_path)
    os.unlink(err_path)
    if rc:
        raise RuntimeError('db_bench (exit %d): %s' % (rc, (etext or text)[-2000:]))
    source = '/proc/<pid>/io write_bytes - cancelled_write_bytes'
    if dev is None:
        # ru_oublock is write_bytes / 512, without the cancelled pages
        dev = (ru1.ru_oublock - ru0.ru_oublock) * 512
        source = 'getrusage ru_oublock x 512'
    got = None
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == 'fillrandom':
            got = {'ops_s': float(m.group(3))}
            continue
        m = PCT.search(line)
        if m and got is not None and 'group_p50_us' not in got:
            got['group_p50_us'] = float(m.group(1))
            got['group_p99_us'] = float(m.group(2))
    if got is None:
        raise RuntimeError('db_bench printed no fillrandom line: ' + text[-2000:])
    got.update({'dev_write_bytes': dev, 'dev_write_source': source,
                'dev_bytes_per_logical': dev / float(N * 4096),
                'db_dir_bytes': bc.du(DB)})
    if not KEEP:
        bc.fresh(DB)
    return got


def run_coil(mode, sync):
    bc.fresh(STORE)
    os.sync()
    p = subprocess.run([BIN, mode, STORE, str(N), str(B), '1' if sync else '0',
                        str(OBJECTS), str(RATIO)], capture_output=True, text=True)
    if not KEEP:
        bc.fresh(STORE)
    if p.returncode:
        raise RuntimeError('%s %s (exit %d): %s' % (os.path.relpath(BIN, bc.ROOT), mode,
                                                    p.returncode, p.stderr[-2000:]))
    return bc.json.loads(p.stdout.strip().splitlines()[-1])


SIDES = {
    'coil_one_sync': lambda: run_coil('one', True),
    'coil_batch_sync': lambda: run_coil('batch', True),
    'rocksdb_sync': lambda: run_rocksdb(True),
    'coil_one_nosync': lambda: run_coil('one', False),
    'coil_batch_nosync': lambda: run_coil('batch', False),
    'rocksdb_nosync': lambda: run_rocksdb(False),
}
KEYS = ['ops_s', 'group_p50_us', 'group_p99_us', 'dev_write_bytes',
        'dev_bytes_per_logical', 'proc_bytes_per_logical', 'in_memory_bytes',
        'db_dir_bytes', 'fsyncs']


def table(med, x):
    def f0(v):
        return '%.0f' % v

    def f2(v):
        return '%.2f' % v

    rows = []
    for tag, label in (('sync', 'a sync every %d' % B), ('nosync', 'no sync')):
        one, bat, rdb = (med['coil_one_' + tag], med['coil_batch_' + tag],
                         med['rocksdb_' + tag])
        r = x[tag]
        rows.append(('writes/s, %s' % label, f0(one['ops_s']), f0(bat['ops_s']),
                     f0(rdb['ops_s']), '**%.2f×**' % r['ops_batch_vs_one'],
                     '**%.2f×**' % r['ops_batch_vs_rocksdb']))
        rows.append(('%d writes, p50 / p99 µs, %s' % (B, label),
                     '%s / %s' % (f0(one['group_p50_us']), f0(one['group_p99_us'])),
                     '%s / %s' % (f0(bat['group_p50_us']), f0(bat['group_p99_us'])),
                     '%s / %s' % (f0(rdb['group_p50_us']), f0(rdb['group_p99_us'])),
                     '', ''))
        rows.append(('device B per logical B, %s' % label,
                     f2(one['dev_bytes_per_logical']), f2(bat['dev_bytes_per_logical']),
                     f2(rdb['dev_bytes_per_logical']), '%.2f×' % r['dev_batch_vs_one'],
                     '%.2f×' % r['dev_batch_vs_rocksdb']))
    lines = ['| | coil one by one | coil batches | RocksDB | batches / one by one '
             '| batches / RocksDB |', '|---|---:|---:|---:|---:|---:|']
    lines += ['| ' + ' | '.join(r) + ' |' for r in rows]
    return lines


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit('bench_batch: %s missing: build it (ninja -C %s perf/bench_batch) or set '
                 'BENCH_BATCH_BIN' % (BIN, os.path.relpath(bc.BUILD, bc.ROOT)))
    if not shutil.which('db_bench'):
        sys.exit('bench_batch: db_bench not found: tools/dev.sh deps installs it '
                 '(the Debian package rocksdb-tools: apt-get install rocksdb-tools)')
    if not 0 < B <= 1024:
        sys.exit('bench_batch: BENCH_BATCH_B=%d: 1 to 1024 (COIL_BATCH_OPS_MAX)' % B)
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== batches: %d x 4 KiB pages over %d objects, batches of %d, coil one by one '
           'vs coil batches vs RocksDB db_bench fillrandom (zstd, defaults), %d repeats'
           % (N, OBJECTS, B, bc.REPEATS))
    runs = {k: [] for k in SIDES}
    for r, side, fn in bc.alternate(bc.REPEATS, SIDES):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d %-17s %8.0f writes/s  %d writes p50 %7.0f p99 %7.0f us  '
               'dev %.3f B/B%s' % (r + 1, side, s['ops_s'], B, s.get('group_p50_us', 0),
                                   s.get('group_p99_us', 0), s['dev_bytes_per_logical'],
                                   ' (kernel %.3f)' % s['proc_bytes_per_logical']
                                   if 'proc_bytes_per_logical' in s else ''))
    med = bc.summarize(runs, KEYS)
    ratios, per_repeat = {}, {}
    for tag in ('sync', 'nosync'):
        one, bat, rdb = (med['coil_one_' + tag], med['coil_batch_' + tag],
                         med['rocksdb_' + tag])
        ratios[tag] = {
            'ops_batch_vs_one': bc.ratio(bat['ops_s'], one['ops_s']),
            'ops_batch_vs_rocksdb': bc.ratio(bat['ops_s'], rdb['ops_s']),
            'dev_batch_vs_one': bc.ratio(bat['dev_bytes_per_logical'],
                                         one['dev_bytes_per_logical']),
            'dev_batch_vs_rocksdb': bc.ratio(bat['dev_bytes_per_logical'],
                                             rdb['dev_bytes_per_logical'])}
        # the same ratios repeat by repeat: on this machine they move a lot
        per_repeat[tag] = {
            'ops_batch_vs_one': [bc.ratio(b['ops_s'], o['ops_s']) for b, o in
                                 zip(runs['coil_batch_' + tag], runs['coil_one_' + tag])],
            'ops_batch_vs_rocksdb': [bc.ratio(b['ops_s'], k['ops_s']) for b, k in
                                     zip(runs['coil_batch_' + tag], runs['rocksdb_' + tag])]}
    doc = {'comparison': 'batch_vs_rocksdb', 'pages': N, 'batch': B, 'objects': OBJECTS,
           'ratio': RATIO, 'value_bytes': N * 4096,
           'driver': os.path.relpath(BIN, bc.ROOT), 'runs': runs, 'median': med,
           'ratios': ratios, 'ratios_per_repeat': per_repeat}
    bc.save('batch_vs_rocksdb', doc)
    for tag in ('sync', 'nosync'):
        bc.log('   per repeat, %s: batches / one by one %s; batches / RocksDB %s' % (
            tag, ', '.join('%.2fx' % v for v in per_repeat[tag]['ops_batch_vs_one']),
            ', '.join('%.2fx' % v for v in per_repeat[tag]['ops_batch_vs_rocksdb'])))
    print()
    print('\n'.join(table(med, ratios)))
    print()
    print('%d x 4 KiB pages (fillrandom keys, %d coil objects), batches of %d, '
          'medians of %d repeats.  Device bytes: coil, the store\'s '
          'io.device_bytes_written over the writes and their syncs (the kernel\'s count '
          'for the driver: %.2f / %.2f with syncs, %.2f / %.2f without); RocksDB, the '
          'kernel\'s count for the db_bench process (/proc/<pid>/io write_bytes less '
          'cancelled_write_bytes).'
          % (N, OBJECTS, B, bc.REPEATS,
             med['coil_one_sync']['proc_bytes_per_logical'],
             med['coil_batch_sync']['proc_bytes_per_logical'],
             med['coil_one_nosync']['proc_bytes_per_logical'],
             med['coil_batch_nosync']['proc_bytes_per_logical']))


if __name__ == '__main__':
    main()
