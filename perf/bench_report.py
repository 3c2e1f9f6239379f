#!/usr/bin/env python3
"""Turn perf/results/*.json into perf/results/report.md and PNG plots.

  bench_report.py "COMMAND THAT MADE THE RESULTS"

The report is made anew by every run; docs/benchmarks.md is written by
hand from it (its tables keep each figure's history and what changed
between runs, which a generated page would drop).
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RES = os.path.join(ROOT, 'perf', 'results')
TMP = os.path.join(RES, 'tmp')
DOC = os.path.join(RES, 'report.md')


def load(name):
    p = os.path.join(RES, name + '.json')
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def plot(name, title, ylabel, header, rows):
    """rows: [(group_label, [value per series])]."""
    os.makedirs(TMP, exist_ok=True)
    dat = os.path.join(TMP, name + '.dat')
    with open(dat, 'w') as f:
        f.write('group ' + ' '.join(h.replace(' ', '_') for h in header) + '\n')
        for label, vals in rows:
            f.write('%s %s\n' % (label.replace(' ', '_'), ' '.join('%g' % v for v in vals)))
    png = os.path.join(RES, name + '.png')
    try:
        subprocess.run(['gnuplot', '-e',
                        "datafile='%s'; outfile='%s'; ttl='%s'; ylab='%s'; ncol=%d"
                        % (dat, png, title, ylabel, len(header) + 1),
                        os.path.join(ROOT, 'perf', 'plot.gp')],
                       check=True, capture_output=True)
        return os.path.relpath(png, os.path.join(ROOT, 'docs'))
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write('plot %s: %s\n' % (name, e))
        return None


def img(lines, path, alt):
    if path:
        lines.append('![%s](%s)\n' % (alt, path))


def fio_section(d, L):
    L.append('### 1. fio: coil ioengine vs fio\'s io_uring engine on a plain file\n')
    zf = d['coil_options'].get('zero_fill', '0') == '1'
    L.append('%d MiB object / file, coil compression off, coil_cache=%s, coil_poll_us=%s, %s, %d repeats '
             '(medians; ratio = coil / io_uring).\n' % (d['size_bytes'] >> 20,
                                                       d['coil_options'].get('cache'),
                                                       d['coil_options'].get('poll_us', '0'),
                                                       'coil_zero_fill=1 (the store written whole at creation, '
                                                       'like the peer\'s prefilled file)' if zf else
                                                       'coil_zero_fill=0 (a sparse, fallocated store)',
                                                       d['repeats']))
    L.append('| workload | io_uring MiB/s | coil MiB/s | ratio | target | p99 io_uring µs | p99 coil µs | CPU µs/IO io_uring | CPU µs/IO coil |')
    L.append('|---|---|---|---|---|---|---|---|---|')
    tp, lat = [], []
    for name, c in d['cases'].items():
        a, b = c['median']['io_uring'], c['median']['coil']
        L.append('| %s | %.1f | %.1f | **%.2f×** | ≥ %.2f× (%s) | %.0f | %.0f | %.2f | %.2f |'
                 % (name, a['bw_mib_s'], b['bw_mib_s'], c['ratio_bw'], c['target'], c['verdict'],
                    a['p99_us'], b['p99_us'], a['cpu_us_per_io'], b['cpu_us_per_io']))
        tp.append((name, [a['bw_mib_s'], b['bw_mib_s']]))
        for p in ('p50_us', 'p99_us', 'p999_us'):
            lat.append(('%s %s' % (name.split('_')[0], p[:-3]), [a[p], b[p]]))
    L.append('')
    if any('ratio_bw_defaults' in c for c in d['cases'].values()):
        L.append('Defaults only (a fresh store made and driven with only `coil_store`, `coil_size`, '
                 '`coil_compression=none`), alternating with the rows above in the same run:\n')
        L.append('| workload | io_uring MiB/s | coil defaults MiB/s | ratio | target | p99 io_uring µs | p99 coil µs | CPU µs/IO io_uring | CPU µs/IO coil |')
        L.append('|---|---|---|---|---|---|---|---|---|')
        for name, c in d['cases'].items():
            if 'ratio_bw_defaults' not in c:
                continue
            a, b = c['median']['io_uring'], c['median']['coil_defaults']
            L.append('| %s | %.1f | %.1f | **%.2f×** | ≥ %.2f× (%s) | %.0f | %.0f | %.2f | %.2f |'
                     % (name, a['bw_mib_s'], b['bw_mib_s'], c['ratio_bw_defaults'],
                        c.get('target_defaults', c['target']),
                        c['verdict_defaults'], a['p99_us'], b['p99_us'], a['cpu_us_per_io'],
                        b['cpu_us_per_io']))
        L.append('')
        new = [(n, c) for n, c in d['cases'].items() if 'ratio_bw_new_file' in c]
        if new:
            L.append('First writes: fio\'s io_uring engine writing a new file it lays out with '
                     'fallocate (blocks allocated, never written, as a fresh store\'s are), same run:\n')
            L.append('| workload | io_uring prefilled MiB/s | io_uring new file MiB/s | new / prefilled | '
                     'coil defaults MiB/s | coil defaults / new file |')
            L.append('|---|---|---|---|---|---|')
            for n, c in new:
                m = c['median']
                L.append('| %s | %.1f | %.1f | %.2f× | %.1f | %.2f× |'
                         % (n, m['io_uring']['bw_mib_s'], m['io_uring_new']['bw_mib_s'],
                            c['ratio_bw_new_file'], m['coil_defaults']['bw_mib_s'],
                            c['ratio_bw_defaults_vs_new_file']))
            L.append('')
    prof = [(n, c) for n, c in d['cases'].items() if c.get('profile')]
    if prof:
        L.append('Where coil\'s time goes (one extra coil run per workload under `perf record -F 999`, '
                 'share of on-CPU samples of every thread of the fio process, top symbols):\n')
        for n, c in prof:
            L.append('- **%s**: ' % n + '; '.join('%s %.0f %%' % (t['sym'].replace('|', '/'), t['pct'])
                                                  for t in c['profile'][:8]))
        L.append('')
    for n, c in d['cases'].items():
        st = c.get('coil_stats_last') or {}
        io, pool = st.get('io', {}), st.get('pool', {})
        wb = io.get('write_bytes') or 0
        ops = (io.get('writes') or 0) + (io.get('reads') or 0)
        if ops:
            L.append('- %s (coil stats, last run): %.2f ring ops per request, device bytes '
                     'written / logical %.2f, pool CPU %.1f µs per request'
                     % (n, sum((io.get('ring_ops') or {}).values()) / ops,
                        (io.get('device_bytes_written') or 0) / wb if wb else 0,
                        (pool.get('cpu_ns') or 0) / 1e3 / ops))
    L.append('')
    img(L, plot('fio_throughput', 'fio: coil vs io_uring (median MiB/s)', 'MiB/s',
                ['io_uring', 'coil'], tp), 'throughput')
    img(L, plot('fio_latency', 'fio: completion latency percentiles (median us)', 'us',
                ['io_uring', 'coil'], lat), 'latency')


def codec_section(d, L):
    L.append('### 2. compressed throughput per core: coil vs `zstd -b%d -B%d`\n' % (d['level'], d['blob']))
    L.append('%d MiB of a tar of /usr/include, %d-byte blocks, level %d. Per core = logical bytes / '
             'CPU seconds: for coil, of the whole process (every coil thread); for libzstd, the '
             'codec alone on the same blocks on one thread; `zstd -b` prints wall-clock speed, '
             'which a busy machine lowers, so it is shown for reference only. Both coil_bench '
             'sides touch the data from user space before their clocks start (a first touch '
             'traps on these guests). '
             'Overhead = libzstd / coil − 1 (target ≤ 15 %%).\n' % (d['bytes'] >> 20, d['blob'], d['level']))
    z, c = d['median']['libzstd'], d['median']['coil']
    zc = d['median'].get('zstd_cli', {})
    L.append('| | zstd -b MB/s (wall) | libzstd MB/s/core | coil MB/s/core | coil overhead beyond codec | target |')
    L.append('|---|---|---|---|---|---|')
    L.append('| write (compress) | %.0f | %.0f | %.0f | **%+.0f %%** | ≤ 15 %% (%s) |'
             % (zc.get('write_mb_per_cpu_s', 0), z['write_mb_per_cpu_s'], c['write_mb_per_cpu_s'],
                d['overhead_write'] * 100, d['verdict_write']))
    L.append('| read (decompress) | %.0f | %.0f | %.0f | **%+.0f %%** | ≤ 15 %% (%s) |'
             % (zc.get('read_mb_per_cpu_s', 0), z['read_mb_per_cpu_s'], c['read_mb_per_cpu_s'],
                d['overhead_read'] * 100, d['verdict_read']))
    if 'overhead_vs_cli_read' in d:
        L.append('\nAgainst `zstd -b` as it prints (wall clock, one thread): write %+.0f %%, '
                 'read %+.0f %%. libzstd decoding the blocks after flushing them from every '
                 'cache level: %.0f MB/s per core (warm: %.0f), so warm caches do not '
                 'flatter the peer.'
                 % (d['overhead_vs_cli_write'] * 100, d['overhead_vs_cli_read'] * 100,
                    z.get('read_cold_mb_per_cpu_s', 0), z['read_mb_per_cpu_s']))
    L.append('\nCompression ratio: libzstd %.2f, coil %.2f (logical / stored as coil counts them). '
             'coil wall-clock: write %.0f MB/s, read %.0f MB/s (p99 %.0f / %.0f µs per 1 MiB request).\n'
             % (z['ratio'], c['ratio'], c.get('write_mb_s', 0), c.get('read_mb_s', 0),
                c.get('write_p99_us', 0), c.get('read_p99_us', 0)))
    img(L, plot('codec_per_core', 'MB/s per core: coil vs the codec alone', 'MB/s per CPU second',
                ['zstd_-b_(wall)', 'libzstd', 'coil'],
                [(k, [zc.get(k + '_mb_per_cpu_s', 0), z[k + '_mb_per_cpu_s'], c[k + '_mb_per_cpu_s']])
                 for k in ('write', 'read')]),
        'per-core throughput')


def pool_section(d, L):
    L.append('### 3. %d concurrent writers of 1 MiB: coil_pool=fair vs semaphore\n' % d['jobs'])
    L.append('fio, thread=1, one store, %d MiB per job, zstd:1, 50 %% compressible buffers. '
             'Worst-job p99: each job\'s p99, the worst of the %d. Each repeat runs both '
             'pools on a store on the disk and, where /dev/shm is tmpfs, on a store there '
             '(no device stall reaches a request: the pools alone), and the disk alone: fio\'s '
             'io_uring engine, the same jobs of O_DIRECT 1 MiB writes to plain files, paced at '
             'the bandwidth coil reached.\n' % (d['mib_per_job'], d['jobs']))
    med = d['median']
    f, s = med['fair'], med['semaphore']
    fr, sr = med.get('fair_ram'), med.get('semaphore_ram')
    dev = med.get('device')
    ram = d.get('ram')
    L.append('| | semaphore | fair | fair / semaphore | target |')
    L.append('|---|---|---|---|---|')
    rows = [('disk', s, f, d)]
    if ram and fr and sr:
        rows.append(('RAM store', sr, fr, ram))
    for where, s_, f_, v in rows:
        L.append('| %s: worst-job p99 µs | %.0f | %.0f | **%.2f×** | ≤ 0.6× (%s) |'
                 % (where, s_['p99_us'], f_['p99_us'], v['ratio_p99'], v['verdict_p99']))
        L.append('| %s: total MiB/s | %.1f | %.1f | **%.2f×** | ≥ 0.95× (%s) |'
                 % (where, s_['bw_mib_s'], f_['bw_mib_s'], v['ratio_bw'], v['verdict_bw']))
        L.append('| %s: p50 µs (worst job) | %.0f | %.0f | %.2f× | |'
                 % (where, s_['p50_us'], f_['p50_us'],
                    f_['p50_us'] / s_['p50_us'] if s_['p50_us'] else 0))
    if dev and dev.get('bw_mib_s'):
        L.append('\nThe disk alone at that pace (%.0f MiB/s in all): worst-job p99 %.0f µs, '
                 'p50 %.0f µs.' % (dev['bw_mib_s'], dev['p99_us'], dev['p50_us']))
    L.append('')
    img(L, plot('pool_latency', 'pool: 16 writers, worst-job latency (median us)', 'us',
                ['semaphore', 'fair'], [(p[:-3], [s[p], f[p]]) for p in ('p50_us', 'p99_us', 'p999_us')]),
        'pool latency')
    img(L, plot('pool_throughput', 'pool: 16 writers, total MiB/s', 'MiB/s',
                ['semaphore', 'fair'], [('bandwidth', [s['bw_mib_s'], f['bw_mib_s']])]), 'pool throughput')


def prefetch_section(d, L):
    L.append('### 4. cold sequential QD1 reads: prefetch on vs off\n')
    L.append('fio, %d MiB object (zstd:1), bs=%s, a fresh process per run.\n' % (d['mib'], d['bs']))
    on, off = d['median']['on'], d['median']['off']
    L.append('| | off | on | on / off | target |')
    L.append('|---|---|---|---|---|')
    L.append('| MiB/s | %.1f | %.1f | **%.2f×** | ≥ 2× (%s) |' % (off['bw_mib_s'], on['bw_mib_s'], d['ratio_bw'], d['verdict']))
    L.append('| p50 µs | %.0f | %.0f | | |' % (off['p50_us'], on['p50_us']))
    L.append('| p99 µs | %.0f | %.0f | | |' % (off['p99_us'], on['p99_us']))
    L.append('')
    img(L, plot('prefetch', 'cold sequential QD1 read (median MiB/s)', 'MiB/s', ['off', 'on'],
                [('bandwidth', [off['bw_mib_s'], on['bw_mib_s']])]), 'prefetch')
    img(L, plot('prefetch_latency', 'cold sequential QD1 read latency (median us)', 'us', ['off', 'on'],
                [(p[:-3], [off[p], on[p]]) for p in ('p50_us', 'p99_us', 'p999_us')]), 'prefetch latency')


def pages_section(d, L):
    L.append('### 5. 4 KiB page store: coil vs RocksDB `db_bench` (zstd)\n')
    L.append('%d unique pages written in random order, %d random reads after a cold open, '
             'values %.0f %% compressible the db_bench way (%.0f MiB of values). RocksDB: '
             'filluniquerandom, compact, readrandom, one thread, O_DIRECT reads and flushes. '
             'coil: one object, one submitting thread at QD 1 and QD 32.\n'
             % (d['pages'], d['pages'], (1 - d['ratio']) * 100, d['value_bytes'] / 1048576.0))
    m = d['median']
    L.append('| | RocksDB | coil QD1 | coil QD32 | QD1 / RocksDB | QD32 / RocksDB |')
    L.append('|---|---|---|---|---|---|')
    for key, lab, fmt in (('write_ops_s', 'random writes / s', '%.0f'), ('write_p99_us', 'write p99 µs', '%.0f'),
                          ('read_ops_s', 'random reads / s', '%.0f'), ('read_p99_us', 'read p99 µs', '%.0f'),
                          ('disk_bytes', 'bytes on disk (MiB)', '%.1f'),
                          ('stored_bytes', 'stored bytes (MiB)', '%.1f')):
        div = 1048576.0 if key.endswith('_bytes') else 1.0
        r, a, b = (m[s].get(key, 0) for s in ('rocksdb', 'coil_qd1', 'coil_qd32'))
        L.append('| %s | %s | %s | %s | %.2f× | %.2f× |' % (lab, fmt % (r / div), fmt % (a / div), fmt % (b / div),
                                                      a / r if r else 0, b / r if r else 0))
    L.append('')
    img(L, plot('pages_ops', 'page store: operations per second (median)', 'ops/s',
                ['rocksdb', 'coil_qd1', 'coil_qd32'],
                [(k, [m[s][k + '_ops_s'] for s in ('rocksdb', 'coil_qd1', 'coil_qd32')]) for k in ('write', 'read')]),
        'page store ops')
    img(L, plot('pages_latency', 'page store: p99 latency (median us)', 'us',
                ['rocksdb', 'coil_qd1', 'coil_qd32'],
                [(k, [m[s][k + '_p99_us'] for s in ('rocksdb', 'coil_qd1', 'coil_qd32')]) for k in ('write', 'read')]),
        'page store latency')
    img(L, plot('pages_disk', 'page store: bytes on disk (MiB)', 'MiB',
                ['rocksdb', 'coil_qd1', 'coil_qd32'],
                [('disk', [m[s]['disk_bytes'] / 1048576.0 for s in ('rocksdb', 'coil_qd1', 'coil_qd32')])]),
        'page store bytes on disk')


def bc_verdict(r):
    return 'meets' if r >= 1.0 else 'misses'


def pages_qd1_section(d, L):
    L.append('### 5b. a database\'s path at QD 1: coil vs RocksDB `db_bench`, defaults on both sides\n')
    L.append('%d unique 4 KiB pages (50 %% compressible the db_bench way) written in random order by '
             'one thread at QD 1, a cold reopen (page cache dropped for RocksDB; coil reads O_DIRECT), '
             'then %d uniformly random page reads at QD 1. RocksDB: db_bench filluniquerandom, then '
             'readrandom with --use_existing_db, zstd, sync=false, every other option its default '
             '(buffered reads, 8 MiB block cache). coil: coil_pwrite, then coil_pread (the synchronous calls a database makes), default options '
             '(64 MiB cache). Latency of a 4 KiB QD 1 read: coil\'s reads of random pages just after a '
             'fresh open (uncached), its rereads (cached), and a page\'s first read in the run (the '
             'device, or the cached block a neighbouring page\'s read brought), beside fio\'s io_uring engine at QD 1 on a plain file of the same '
             'size (O_DIRECT: the device; buffered, the file in the page cache).\n'
             % (d['pages'], d['reads']))
    m, x = d['median'], d['ratios']
    c, k, f = m['coil'], m['rocksdb'], m['fio']
    L.append('| | coil | RocksDB | coil / RocksDB |')
    L.append('|---|---|---|---|')
    L.append('| random reads / s (cold reopen, QD 1) | %.0f | %.0f | **%.2f×** |'
             % (c['read_ops_s'], k['read_ops_s'], x['read_ops']))
    L.append('| read p50 / p99 µs, all reads | %.1f / %.1f | %.1f / %.1f | |'
             % (c['read_p50_us'], c['read_p99_us'], k['read_p50_us'], k['read_p99_us']))
    L.append('| random writes / s (QD 1) | %.0f | %.0f | **%.2f×** |'
             % (c['write_ops_s'], k['write_ops_s'], x['write_ops']))
    if 'write_ops_sync100' in x:
        L.append('| random writes / s, a sync every 100 (coil_sync / db_bench --sync=1 --batch_size=100) | %.0f | %.0f | %.2f× |'
                 % (m['coil_sync100']['write_ops_s'], m['rocksdb_sync100']['write_ops_s'],
                    x['write_ops_sync100']))
    L.append('| bytes on disk (MiB, du) | %.1f | %.1f | **%.2f×** |'
             % (c['disk_bytes'] / 1048576.0, k['disk_bytes'] / 1048576.0, x['disk_bytes']))
    if c.get('segment_bytes'):
        L.append('| coil: segments holding the data (MiB) | %.1f | | %.2f× |'
                 % (c['segment_bytes'] / 1048576.0, c['segment_bytes'] / k['disk_bytes']))
    L.append('')
    L.append('| 4 KiB read at QD 1, p50 / p99 µs | coil | fio io_uring, plain file | coil / fio (p50) |')
    L.append('|---|---|---|---|')
    L.append('| uncached (device) | %.1f / %.1f | %.1f / %.1f (O_DIRECT) | %.2f× |'
             % (c['uncached_p50_us'], c['uncached_p99_us'], f['uncached_p50_us'],
                f['uncached_p99_us'], x['uncached_p50_vs_fio']))
    L.append('| cached (memory) | %.1f / %.1f | %.1f / %.1f (page cache) | %.2f× |'
             % (c['cached_p50_us'], c['cached_p99_us'], f['cached_p50_us'],
                f['cached_p99_us'], x['cached_p50_vs_fio']))
    if c.get('first_p50_us'):
        L.append('| a page\'s first read in the run | %.1f / %.1f | | |'
                 % (c['first_p50_us'], c['first_p99_us']))
    if c.get('write_p50_us') and f.get('write_direct_p50_us'):
        L.append('| write (coil_pwrite, completes at memory speed) | %.1f / %.1f | %.1f / %.1f (O_DIRECT); %.1f / %.1f (psync, buffered) | %.2f× (buffered) |'
                 % (c['write_p50_us'], c['write_p99_us'], f['write_direct_p50_us'],
                    f['write_direct_p99_us'], f['write_buffered_p50_us'],
                    f['write_buffered_p99_us'], c['write_p50_us'] / f['write_buffered_p50_us']))
def disk_section(d, L):
    L.append('### 6. disk bytes of a default store\n')
    L.append('`coil create STORE 0` (no maximum), %d MiB of incompressible data written through '
             'the library (`coil put`, 1 MiB writes), then removed (`coil rm`) and the store '
             'compacted (`coil compact`); bytes are `du`.\n'
             % (d['data_bytes'] >> 20))
    L.append('| state | on disk | target |')
    L.append('|---|---|---|')
    L.append('| empty | %.1f MiB | ≤ 64 MiB (%s) |' % (d['empty_bytes'] / 2**20, d['empty_verdict']))
    L.append('| holding the data | %.1f MiB = **%.3f×** the data | ≤ 1.1× (%s) |'
             % (d['full_bytes'] / 2**20, d['ratio_full'], d['full_verdict']))
    L.append('| everything removed | %.1f MiB | |' % (d['removed_bytes'] / 2**20))
    L.append('| then `coil compact` | %.1f MiB | ≤ 128 MiB (%s) |'
             % (d['compacted_bytes'] / 2**20, d['compacted_verdict']))
    L.append('')


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ('-h', '--help'):
        print(__doc__.strip())
        return
    cmd = sys.argv[1] if len(sys.argv) > 1 else 'tools/dev.sh bench'
    L = ['# coil benchmarks: the last run\n',
         'Made by the command below; docs/benchmarks.md has the curated tables, '
         'their history and the analysis.\n',
         'Every comparison runs coil and its peer **in the same run**, alternating the order '
         'each repeat (ABBA), and reports medians over the repeats and the ratio. The machine is '
         'shared and noisy: read the ratios, not the absolute numbers. Raw results: '
         '`perf/results/*.json`; plots: `perf/results/*.png`.\n',
         '## Running them\n',
         '```',
         'tools/dev.sh bench            # all six, ~11 min on 2 cores',
         'tools/dev.sh bench 1 4        # only comparisons 1 and 4',
         'BENCH_REPEATS=5 BENCH_SCALE=4 tools/dev.sh bench   # more repeats, 4x the data',
         '```\n',
         'Scratch stores and files go to `var/bench/` (O_DIRECT needs a real filesystem; `/tmp` '
         'may be tmpfs) and are removed afterwards unless `BENCH_KEEP=1`. Per-comparison knobs '
         'are documented at the top of each `perf/bench_*.py`. `tools/dev.sh demo` is the '
         'two-minute tour (perf/demo.sh).\n',
         '## The fio ioengine\n',
         '`meson install` puts it at `<prefix>/<libdir>/coil/coil-fio.so` (in a build tree: '
         '`build/release/perf/fio/coil-fio.so`; it is built when `-Dfio_source=` names a configured '
         'fio source tree, which `tools/dev.sh deps` prepares). It embeds the engine, so it needs no '
         'library path:\n',
         '```ini',
         '[global]',
         'ioengine=external:/usr/local/lib/x86_64-linux-gnu/coil/coil-fio.so',
         'coil_store=/data/bench.coil   ; created when missing',
         'coil_size=8g                  ; the most a new store may grow to (default 2 x size)',
         'coil_compression=zstd:1       ; none | zstd | zstd:N',
         'coil_pool=fair                ; fair | semaphore',
         'coil_prefetch=1               ; readahead on/off',
         'coil_cache=64m                ; decoded-blob cache (default: coil\'s)',
         'coil_workers=0                ; pool threads, 0 = one per core',
         'coil_zero_fill=0              ; 1 = expert: a fixed store written whole at creation',
         'coil_poll_us=0                ; poll for completions up to N us before sleeping',
         'coil_inline_cb=1              ; cache hits complete inside the submit (COIL_INLINE_CB)',
         'thread=1                      ; jobs in one process share the store',
         '',
         '[job]',
         'filename=my-object            ; every fio file is a coil object of that name',
         'rw=randrw',
         'bs=4k',
         'iodepth=32',
         'size=1g',
         '```\n',
         'Jobs run as processes (no `thread=1`) cannot share a store: coil opens a store from one '
         'process at a time, and the second gets a clear error. `fsync=`/`fdatasync=` map to '
         '`coil_flush`; trims are refused; requests above coil_write\'s 16 MiB limit are sent in parts. `verify=` works at any block size, including '
         '`bs_unaligned`, and `verify_only` in a later process. `fio --enghelp=/path/coil-fio.so` '
         'lists the options (fio 3.33 does not accept the `external:` prefix there). '
         'The plugin\'s tests: `meson test -C build/release fio_plugin` (perf/fio/test_fio.sh).\n',
         '## Latest results\n',
         'Made by:\n', '```', cmd, '```\n']
    # One line per target (docs/benchmarks.md), before the detail.
    summary = []
    d = load('fio_vs_io_uring')
    if d:
        for n, c in d['cases'].items():
            summary.append('| 1 | fio %s, coil / io_uring bandwidth | %.2f× | ≥ %.2f× | %s |'
                           % (n, c['ratio_bw'], c['target'], c['verdict']))
        for n, c in d['cases'].items():
            if 'ratio_bw_defaults' in c:
                summary.append('| 1 | fio %s, **defaults only**, coil / io_uring bandwidth (CPU/IO ratio) | %.2f× (%.2f×) | ≥ %.2f× | %s |'
                               % (n, c['ratio_bw_defaults'], c['ratio_cpu_per_io_defaults'],
                                  c.get('target_defaults', c['target']),
                                  c['verdict_defaults']))
    d = load('codec_vs_zstd')
    if d:
        summary.append('| 2 | compressed write, overhead beyond the codec per core | %+.0f %% | ≤ 15 %% | %s |'
                       % (d['overhead_write'] * 100, d['verdict_write']))
        summary.append('| 2 | compressed read, overhead beyond the codec per core | %+.0f %% | ≤ 15 %% | %s |'
                       % (d['overhead_read'] * 100, d['verdict_read']))
    d = load('pool_fair_vs_semaphore')
    if d:
        summary.append('| 3 | 16 writers, worst-job p99 fair / semaphore | %.2f× | ≤ 0.6× | %s |'
                       % (d['ratio_p99'], d['verdict_p99']))
        summary.append('| 3 | 16 writers, bandwidth fair / semaphore | %.2f× | ≥ 0.95× | %s |'
                       % (d['ratio_bw'], d['verdict_bw']))
        if d.get('ram'):
            summary.append('| 3 | the same on a RAM store: p99, bandwidth | %.2f×, %.2f× | ≤ 0.6×, ≥ 0.95× | %s, %s |'
                           % (d['ram']['ratio_p99'], d['ram']['ratio_bw'],
                              d['ram']['verdict_p99'], d['ram']['verdict_bw']))
    d = load('prefetch_on_vs_off')
    if d:
        summary.append('| 4 | cold sequential QD1 read, prefetch on / off | %.2f× | ≥ 2× | %s |'
                       % (d['ratio_bw'], d['verdict']))
    d = load('pages_vs_rocksdb')
    if d:
        for side in ('coil_qd1', 'coil_qd32'):
            x = d['ratios'][side]
            summary.append('| 5 | pages, %s / RocksDB: writes, reads, bytes on disk | %.2f×, %.2f×, %.2f× | (no target) | |'
                           % (side, x['write_ops'], x['read_ops'], x['disk_bytes']))
    d = load('pages_qd1_vs_rocksdb')
    if d:
        x = d['ratios']
        summary.append('| 5b | pages at QD 1, defaults, coil / RocksDB: reads after a cold reopen, writes | %.2f×, %.2f× | ≥ 1.0×, ≥ 1.0× | %s, %s |'
                       % (x['read_ops'], x['write_ops'], bc_verdict(x['read_ops']), bc_verdict(x['write_ops'])))
        if 'write_ops_sync100' in x:
            summary.append('| 5b | the same writes with a sync every 100 | %.2f× | ≥ 1.0× | %s |'
                           % (x['write_ops_sync100'], bc_verdict(x['write_ops_sync100'])))
        summary.append('| 5b | bytes on disk (du), coil / RocksDB | %.2f× | ≤ 1.0× | %s |'
                       % (x['disk_bytes'], 'meets' if x['disk_bytes'] <= 1.0 else 'misses'))
    d = load('disk_space')
    if d:
        summary.append('| 6 | empty default store on disk | %.1f MiB | ≤ 64 MiB | %s |'
                       % (d['empty_bytes'] / 2**20, d['empty_verdict']))
        summary.append('| 6 | store holding %d MiB, disk / data | %.3f× | ≤ 1.1× | %s |'
                       % (d['data_bytes'] >> 20, d['ratio_full'], d['full_verdict']))
        summary.append('| 6 | after removing everything and `coil compact` | %.1f MiB | ≤ 128 MiB | %s |'
                       % (d['compacted_bytes'] / 2**20, d['compacted_verdict']))
    if summary:
        L += ['| # | measure | median | target | |', '|---|---|---|---|---|'] + summary + ['']
    first = None
    for name, fn in (('fio_vs_io_uring', fio_section), ('codec_vs_zstd', codec_section),
                     ('pool_fair_vs_semaphore', pool_section),
                     ('prefetch_on_vs_off', prefetch_section), ('pages_vs_rocksdb', pages_section),
                     ('pages_qd1_vs_rocksdb', pages_qd1_section),
                     ('disk_space', disk_section)):
        d = load(name)
        if d is None:
            L.append('### %s\n\nNot run in this invocation (no perf/results/%s.json).\n' % (name, name))
            continue
        first = first or d
        try:
            fn(d, L)
        except (KeyError, TypeError, ZeroDivisionError) as e:
            L.append('(could not render %s: %r)\n' % (name, e))
        L.append('_%s, %d repeats, scale %g, %d CPUs, kernel %s._\n'
                 % (d['when'], d['repeats'], d.get('scale', 1), d['host']['cpus'], d['host']['kernel']))
    with open(DOC, 'w') as f:
        f.write('\n'.join(L) + '\n')
    print('wrote %s' % os.path.relpath(DOC, ROOT))


if __name__ == '__main__':
    main()
