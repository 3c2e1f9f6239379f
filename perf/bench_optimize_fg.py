#!/usr/bin/env python3
"""The optimizer's foreground cost: fio's 4 KiB random mix through the coil
ioengine with the optimizer running (coil_optimize=1) vs not, in the same
run; and how fast the blobs it wrote decode per core next to the blobs the
foreground wrote (tools/dev.sh bench-optimize-fg runs this).

  4 KiB randrw (70 % reads), optimizer / none: p99 <= 1.25x, IOPS >= 0.9x
  4 KiB randread, the same (reads do not stop the optimizer; writes do not
    either: coil_optimize is called explicitly, only the idle-time
    background pass yields to writes)

1. Prefill, once: fio writes SIZE bytes sequentially (bs=1M, QD 8) into the
   object "obj" of a new store through the coil ioengine, every coil option
   at its default but coil_store and coil_size (3 x SIZE), with
   buffer_compress_percentage=BENCH_OPTFG_COMPRESS (default 60),
   buffer_compress_chunk=4k and refill_buffers: zstd level 1 stores it in
   64 KiB blobs at about 0.4 of its size.  fio's generator makes each 4 KiB
   chunk random bytes then zeros; zstd level 19 finds little more there
   than level 1 (0.6 % with `zstd -1` / `-19` on 64 KiB pieces), so the
   optimizer does its full work (decode, encode at 19, decode and compare)
   on every blob but saves little.  The decode rows below therefore also
   run on a real corpus (BENCH_OPTFG_CORPUS).
2. Each run starts from a copy of the prefilled store (cp --sparse=always,
   then sync, so both sides start from the same bytes and no writeback of
   the copy lands in the run), then runs one fio job on it:
     --rw=randrw --rwmixread=70 (or --rw=randread) --bs=4k
     --iodepth=BENCH_OPTFG_QD (default 32) --iodepth_batch_complete_max=QD
     --time_based --runtime=BENCH_OPTFG_RUNTIME (default 20 x BENCH_SCALE
     seconds; randread at most 50: past optimize_idle's 60 s without a
     write the store's own background optimizer would start on the "none"
     side) --norandommap --randrepeat=0, writes with the same
     buffer_compress_percentage, default coil options,
   with coil_optimize=1 ("optimizer": the plugin's thread calls
   coil_optimize with a 16 MiB budget again and again from the store's open
   to the job's end) or without ("none").  The two sides alternate their
   order each repeat (ABBA) over BENCH_REPEATS repeats.  From fio's JSON:
   read and write IOPS, their p50 and p99 completion latency (clat_ns
   percentiles 50 and 99), and the fio process's CPU (getrusage of the
   child: every thread of fio and coil).  What the optimizer did in the
   run comes from coil_stats_json as the plugin closes the store
   (COIL_FIO_STATS): its counters count from the open, so `coil stats
   --json` after the job, a new open, shows them as 0; it gives the
   store's space (stored bytes) instead.  Reported: medians per side, the
   ratios optimizer / none of the medians (and per repeat, same-repeat
   pairs).
3. Decode per core: a copy of the prefilled store is optimized whole
   (`coil optimize COPY`, its wall and CPU time is the optimizer's own
   speed), then `coil check` (every byte of every object read and
   verified, a fresh process and cache, O_DIRECT) runs on the prefilled
   store ("foreground", zstd-1 blobs) and on the optimized copy, the two
   alternating over BENCH_REPEATS repeats.  CPU seconds of the child
   (getrusage RUSAGE_CHILDREN deltas: every thread, user + system) ->
   logical MB (10^6 bytes) per CPU-second; `coil ls` on the same store
   (open, list, close) is timed the same way and "net" subtracts it.  The
   same again for a tar of BENCH_OPTFG_CORPUS (default /usr/include; ''
   skips it) put into a store with `coil put` (zstd-1, 64 KiB blobs), where
   level 19 and the optimizer's dictionary do shrink the data.

Knobs:
  BENCH_OPTFG_SIZE_MIB  the object's size (default 1024 x BENCH_SCALE)
  BENCH_OPTFG_RUNTIME   seconds per fio run (default 20 x BENCH_SCALE)
  BENCH_OPTFG_QD        iodepth of the random jobs (default 32)
  BENCH_OPTFG_COMPRESS  fio's buffer_compress_percentage (default 60)
  BENCH_OPTFG_CORPUS    directory tarred for the second decode rows
                        (default /usr/include; '' = none)
  BENCH_REPEATS, BENCH_SCALE, BUILD: see perf/bench_common.py
  BENCH_KEEP=1          keep the stores under var/bench/
Results: perf/results/optimize_fg.json (every run's raw numbers).
"""
import json
import os
import re
import subprocess
import sys
import tarfile
import time

import bench_common as bc

SIZE = int(os.environ.get('BENCH_OPTFG_SIZE_MIB', str(int(1024 * bc.SCALE)))) << 20
RUNTIME = max(2, int(float(os.environ.get('BENCH_OPTFG_RUNTIME', str(20 * bc.SCALE)))))
READ_RUNTIME = min(RUNTIME, 50)
QD = int(os.environ.get('BENCH_OPTFG_QD', '32'))
COMPRESS = int(os.environ.get('BENCH_OPTFG_COMPRESS', '60'))
CORPUS = os.environ.get('BENCH_OPTFG_CORPUS', '/usr/include')
KEEP = bool(os.environ.get('BENCH_KEEP'))
COIL = os.path.join(bc.BUILD, 'tools', 'coil')

BASE = os.path.join(bc.VAR, 'optfg-base.coil')
RUN = os.path.join(bc.VAR, 'optfg-run.coil')
OPTIMIZED = os.path.join(bc.VAR, 'optfg-optimized.coil')
CBASE = os.path.join(bc.VAR, 'optfg-corpus.coil')
COPTIMIZED = os.path.join(bc.VAR, 'optfg-corpus-optimized.coil')
TAR = os.path.join(bc.VAR, 'optfg-corpus.tar')
STATS = os.path.join(bc.VAR, 'optfg-stats.json')

DATA = ['--buffer_compress_percentage=%d' % COMPRESS, '--buffer_compress_chunk=4k',
        '--refill_buffers']
CASES = [
    # name, fio rw arguments, runtime
    ('randrw_70_4k', ['--rw=randrw', '--rwmixread=70'], RUNTIME),
    ('randread_4k', ['--rw=randread'], READ_RUNTIME),
]
SIDES = ['none', 'optimizer']
OPT_KEYS = ['passes', 'scanned', 'rewritten', 'saved_bytes', 'no_gain', 'stale_skips',
            'bytes_read', 'bytes_written', 'installed_bytes', 'cpu_ns']


def coil_json(store):
    p = subprocess.run([COIL, 'stats', '--json', store], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError('coil stats %s: %s' % (store, p.stderr[-2000:]))
    return json.loads(p.stdout)


def copy_store(src, dst):
    bc.fresh(dst)
    subprocess.run(['cp', '--sparse=always', src, dst], check=True)
    os.sync()


def prefill():
    bc.fresh(BASE)
    t0 = time.time()
    bc.fio(['--name=fill', '--filename=obj', '--rw=write', '--bs=1M', '--iodepth=8',
            '--size=%d' % SIZE] + DATA +
           bc.coil_args(BASE, size=str(3 * SIZE)))
    sp = coil_json(BASE)['space']
    bc.log('   prefill: %d MiB in %.1f s, stored %.1f MiB (%.3f of logical)'
           % (SIZE >> 20, time.time() - t0, sp['stored'] / 1048576.0,
              sp['stored'] / float(sp['logical'])))
    return sp


def run_case(case, side):
    name, rw, runtime = case
    copy_store(BASE, RUN)
    bc.fresh(STATS)
    opts = {'size': str(3 * SIZE)}
    if side == 'optimizer':
        opts['optimize'] = '1'
    doc = bc.fio(['--name=' + name, '--filename=obj', '--bs=4k', '--iodepth=%d' % QD,
                  '--iodepth_batch_complete_max=%d' % QD, '--size=%d' % SIZE,
                  '--time_based', '--runtime=%d' % runtime, '--norandommap',
                  '--randrepeat=0'] + rw + DATA + bc.coil_args(RUN, **opts),
                 env={'COIL_FIO_STATS': STATS})
    j = doc['jobs'][0]
    out = {'process_cpu_s': doc['process_cpu_s'], 'runtime_s': j['job_runtime'] / 1000.0}
    iops = 0.0
    for d in ('read', 'write'):
        s = j[d]
        if not s['io_bytes']:
            continue
        out[d + '_iops'] = s['iops']
        out[d + '_p50_us'] = bc.pct(s['clat_ns'], 50)
        out[d + '_p99_us'] = bc.pct(s['clat_ns'], 99)
        iops += s['iops']
    out['iops'] = iops
    # the optimizer's counters, from the open the job made
    opt = {}
    try:
        with open(STATS) as f:
            st = json.load(f)
        opt = {k: st.get('optimizer', {}).get(k, 0) for k in OPT_KEYS}
        opt['dictionaries'] = st.get('dictionaries')
        out['cleaner'] = st.get('cleaner')
    except (OSError, ValueError):
        pass
    out['optimizer'] = opt
    out['opt_rewritten'] = opt.get('rewritten', 0)
    out['opt_saved_bytes'] = opt.get('saved_bytes', 0)
    out['opt_passes'] = opt.get('passes', 0)
    out['opt_cpu_s'] = opt.get('cpu_ns', 0) / 1e9
    out['opt_bytes_read'] = opt.get('bytes_read', 0)
    # the store as a new open sees it: space (its counters start at 0 here)
    after = coil_json(RUN)
    out['stored_after'] = after['space']['stored']
    out['coil_stats_after_optimizer'] = after.get('optimizer')
    if not KEEP:
        bc.fresh(RUN)
    return out


CHECK_LINE = re.compile(r'checked \d+ objects, .*\((\d+) bytes\)')


def cpu_of(cmd):
    """Run @cmd; (its CPU seconds, user + system of every thread, wall
    seconds, stdout)."""
    ru0 = bc.resource.getrusage(bc.resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    ru1 = bc.resource.getrusage(bc.resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise RuntimeError('%s (exit %d): %s' % (' '.join(cmd), p.returncode,
                                                  (p.stderr or p.stdout)[-2000:]))
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return cpu, wall, p.stdout


def check(store):
    cpu, wall, out = cpu_of([COIL, 'check', store])
    m = CHECK_LINE.search(out)
    if not m:
        raise RuntimeError('coil check printed: ' + out[-500:])
    logical = int(m.group(1))
    ls_cpu, _, _ = cpu_of([COIL, 'ls', store])
    net = max(cpu - ls_cpu, 1e-6)
    return {'cpu_s': cpu, 'wall_s': wall, 'ls_cpu_s': ls_cpu, 'logical_bytes': logical,
            'mb_per_cpu_s': logical / 1e6 / cpu, 'net_mb_per_cpu_s': logical / 1e6 / net}


def optimize(store):
    cpu, wall, out = cpu_of([COIL, 'optimize', store])
    sp = coil_json(store)['space']
    return {'cpu_s': cpu, 'wall_s': wall, 'line': out.strip(),
            'stored_after': sp['stored'], 'logical': sp['logical']}


def decode_rows(label, base, optimized):
    """Optimize a copy of @base whole, then coil check both, alternating."""
    copy_store(base, optimized)
    stored0 = coil_json(base)['space']['stored']
    o = optimize(optimized)
    bc.log('   %s: coil optimize %.1f s wall, %.1f s CPU (%.1f logical MB per CPU-s); '
           'stored %.1f -> %.1f MiB (%.4fx)' % (
               label, o['wall_s'], o['cpu_s'], o['logical'] / 1e6 / o['cpu_s'],
               stored0 / 1048576.0, o['stored_after'] / 1048576.0,
               o['stored_after'] / float(stored0)))
    o['stored_before'] = stored0
    runs = {'foreground': [], 'optimized': []}
    sides = {'foreground': lambda: check(base), 'optimized': lambda: check(optimized)}
    for r, side, fn in bc.alternate(bc.REPEATS, sides):
        c = fn()
        runs[side].append(c)
        bc.log('   %s rep %d %-10s check %.3f s CPU (ls %.3f), %.2f s wall: '
               '%.0f MB per CPU-s (net %.0f)' % (label, r + 1, side, c['cpu_s'],
                                                 c['ls_cpu_s'], c['wall_s'],
                                                 c['mb_per_cpu_s'], c['net_mb_per_cpu_s']))
    med = bc.summarize(runs, ['cpu_s', 'wall_s', 'ls_cpu_s', 'mb_per_cpu_s',
                              'net_mb_per_cpu_s'])
    if not KEEP:
        bc.fresh(optimized)
    return {'optimize': o, 'runs': runs, 'median': med,
            'ratio_mb_per_cpu_s': bc.ratio(med['optimized']['mb_per_cpu_s'],
                                           med['foreground']['mb_per_cpu_s']),
            'ratio_net_mb_per_cpu_s': bc.ratio(med['optimized']['net_mb_per_cpu_s'],
                                               med['foreground']['net_mb_per_cpu_s'])}


def corpus_store():
    """A tar of CORPUS as one object of a new store, written by coil put."""
    bc.fresh(TAR)
    with tarfile.open(TAR, 'w') as t:
        t.add(CORPUS, arcname=os.path.basename(CORPUS.rstrip('/')) or 'corpus')
    bc.fresh(CBASE)
    subprocess.run([COIL, 'create', CBASE, '0'], check=True, capture_output=True)
    subprocess.run([COIL, 'put', CBASE, 'corpus.tar', TAR], check=True, capture_output=True)
    size = os.path.getsize(TAR)
    bc.fresh(TAR)
    return size


def fmt_ratio(x):
    return '%.2f×' % x


def main():
    bc.need_plugin()
    if not os.access(COIL, os.X_OK):
        sys.exit('bench_optimize_fg: %s missing: build first (tools/dev.sh build)' % COIL)
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== the optimizer\'s foreground cost: fio 4 KiB random, QD %d, %d MiB object '
           '(%d %% compressible), coil_optimize=1 vs none, %d s runs, %d repeats'
           % (QD, SIZE >> 20, COMPRESS, RUNTIME, bc.REPEATS))
    t_start = time.time()
    space = prefill()
    doc = {'comparison': 'optimize_fg', 'size_bytes': SIZE, 'qd': QD,
           'runtime_s': RUNTIME, 'read_runtime_s': READ_RUNTIME,
           'buffer_compress_percentage': COMPRESS, 'prefill_space': space,
           'cases': {}, 'decode': {}}
    keys = ['iops', 'read_iops', 'write_iops', 'read_p50_us', 'read_p99_us',
            'write_p50_us', 'write_p99_us', 'process_cpu_s', 'opt_rewritten',
            'opt_saved_bytes', 'opt_passes', 'opt_cpu_s', 'opt_bytes_read', 'stored_after']
    for case in CASES:
        name = case[0]
        runs = {s: [] for s in SIDES}
        sides = {s: (lambda c=case, s=s: run_case(c, s)) for s in SIDES}
        for r, side, fn in bc.alternate(bc.REPEATS, sides):
            s = fn()
            runs[side].append(s)
            bc.log('   %-13s rep %d %-9s IOPS %7.0f (r %7.0f w %6.0f)  p99 r %8.0f w %8.0f us'
                   '  cpu %5.1f s  optimizer: %d passes, %d rewritten, %.1f MiB read, '
                   '%.1f s cpu' % (name, r + 1, side, s['iops'], s.get('read_iops', 0),
                                   s.get('write_iops', 0), s.get('read_p99_us', 0),
                                   s.get('write_p99_us', 0), s['process_cpu_s'],
                                   s['opt_passes'], s['opt_rewritten'],
                                   s['opt_bytes_read'] / 1048576.0, s['opt_cpu_s']))
        med = bc.summarize(runs, keys)
        rat = {}
        for k in ('iops', 'read_iops', 'write_iops', 'read_p99_us', 'write_p99_us',
                  'read_p50_us', 'write_p50_us', 'process_cpu_s'):
            if med['none'].get(k):
                rat[k] = bc.ratio(med['optimizer'][k], med['none'][k])
        per_rep = {k: [bc.ratio(o.get(k, 0), n.get(k, 0)) for o, n in
                       zip(runs['optimizer'], runs['none'])]
                   for k in rat}
        p99s = [rat[k] for k in ('read_p99_us', 'write_p99_us') if k in rat]
        iopss = [rat[k] for k in ('read_iops', 'write_iops') if k in rat]
        verdict = {'p99': bc.verdict(max(p99s), 1.25, higher_is_better=False),
                   'iops': bc.verdict(min(iopss), 0.9)}
        doc['cases'][name] = {'runs': runs, 'median': med, 'ratio': rat,
                              'ratio_per_repeat': per_rep, 'verdict': verdict,
                              'targets': {'p99_max': 1.25, 'iops_min': 0.9}}
        bc.log('   %-13s optimizer / none: IOPS %s (read %s%s), p99 read %s%s: '
               'p99 %s, IOPS %s' % (
                   name, fmt_ratio(rat['iops']), fmt_ratio(rat['read_iops']),
                   ', write %s' % fmt_ratio(rat['write_iops']) if 'write_iops' in rat else '',
                   fmt_ratio(rat['read_p99_us']),
                   ', write %s' % fmt_ratio(rat['write_p99_us']) if 'write_p99_us' in rat
                   else '', verdict['p99'], verdict['iops']))
    bc.log('== decode per core: coil check of zstd-1 blobs (as written) vs the optimizer\'s')
    doc['decode']['fio_data'] = decode_rows('fio data', BASE, OPTIMIZED)
    if CORPUS and os.path.isdir(CORPUS):
        tar_bytes = corpus_store()
        doc['decode']['corpus'] = decode_rows('corpus', CBASE, COPTIMIZED)
        doc['decode']['corpus']['source'] = CORPUS
        doc['decode']['corpus']['tar_bytes'] = tar_bytes
    if not KEEP:
        bc.fresh(BASE)
        bc.fresh(CBASE)
        bc.fresh(STATS)
    doc['elapsed_s'] = time.time() - t_start
    bc.save('optimize_fg', doc)
    print()
    print('\n'.join(table(doc)))
    print()
    print('Medians of %d repeats (order alternating), %d MiB object, %d s runs; '
          'whole bench %.0f s.' % (bc.REPEATS, SIZE >> 20, RUNTIME, doc['elapsed_s']))


def table(doc):
    lines = ['| case | side | IOPS (read + write) | read IOPS | write IOPS | read p50 / p99 µs '
             '| write p50 / p99 µs | fio process CPU s | optimizer in the run |',
             '|---|---|---:|---:|---:|---:|---:|---:|---|']
    for name, c in doc['cases'].items():
        med, rat = c['median'], c['ratio']
        for side in SIDES:
            m = med[side]
            w = ('%.0f / %.0f' % (m['write_p50_us'], m['write_p99_us'])
                 if m.get('write_iops') else '—')
            did = ('%d passes, %d blobs rewritten, %.0f MiB read, %.1f s CPU'
                   % (m['opt_passes'], m['opt_rewritten'], m['opt_bytes_read'] / 1048576.0,
                      m['opt_cpu_s']) if side == 'optimizer' else '—')
            lines.append('| %s | %s | %.0f | %.0f | %s | %.0f / %.0f | %s | %.1f | %s |' % (
                name, side, m['iops'], m['read_iops'],
                '%.0f' % m['write_iops'] if m.get('write_iops') else '—',
                m['read_p50_us'], m['read_p99_us'], w, m['process_cpu_s'], did))
        lines.append('| %s | **optimizer / none** | **%s** | %s | %s | %s / **%s** | %s | %s | '
                     'p99 %s (≤ 1.25×), IOPS %s (≥ 0.9×) |' % (
                         name, fmt_ratio(rat['iops']), fmt_ratio(rat['read_iops']),
                         fmt_ratio(rat['write_iops']) if 'write_iops' in rat else '—',
                         fmt_ratio(rat['read_p50_us']), fmt_ratio(rat['read_p99_us']),
                         '%s / **%s**' % (fmt_ratio(rat['write_p50_us']),
                                          fmt_ratio(rat['write_p99_us']))
                         if 'write_p99_us' in rat else '—',
                         fmt_ratio(rat['process_cpu_s']),
                         c['verdict']['p99'], c['verdict']['iops']))
    lines += ['', '| data | coil optimize: stored after / before | its speed, logical MB '
              'per CPU-s | check, zstd-1 blobs: MB per CPU-s (net of open) | check, '
              'optimized blobs | optimized / zstd-1 |', '|---|---:|---:|---:|---:|---:|']
    for label, d in doc['decode'].items():
        o, med = d['optimize'], d['median']
        lines.append('| %s | %.4f× | %.1f | %.0f (%.0f) | %.0f (%.0f) | **%s** (%s) |' % (
            label, o['stored_after'] / float(o['stored_before']),
            o['logical'] / 1e6 / o['cpu_s'],
            med['foreground']['mb_per_cpu_s'], med['foreground']['net_mb_per_cpu_s'],
            med['optimized']['mb_per_cpu_s'], med['optimized']['net_mb_per_cpu_s'],
            fmt_ratio(d['ratio_mb_per_cpu_s']), fmt_ratio(d['ratio_net_mb_per_cpu_s'])))
    return lines


if __name__ == '__main__':
    main()
