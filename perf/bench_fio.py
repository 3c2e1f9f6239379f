#!/usr/bin/env python3
"""Comparison 1: fio through coil (compression off) vs fio's io_uring engine
on a plain O_DIRECT file of the same size, same job, same run.

  4 KiB random read QD32      target coil/io_uring >= 0.75
  128 KiB sequential write QD16   target >= 0.75
  4 KiB random write QD32     target >= 1.0

Knobs: BENCH_FIO_SIZE_MIB (default 1024 x BENCH_SCALE), BENCH_FIO_RUNTIME
(seconds per random-read run, default 5 x BENCH_SCALE), BENCH_FIO_CACHE
(coil_cache for the coil side, default 8M so the cache cannot hold the data
set and random reads go to the device like the peer's do),
BENCH_FIO_ZERO_FILL (coil_zero_fill of coil's stores, default 1: written
whole like the peer's prefilled file; 0 = the default sparse store),
BENCH_FIO_POLL_US (coil_poll_us, default 50: the plugin polls for
completions up to 50 us before it sleeps; 0 = sleep at once), BENCH_PROFILE
(1 = after the repeats, one more coil run per workload under `perf record`
to show where coil's time goes; default 1 when perf works).

Every case also runs a third side, coil_defaults: a fresh store made and
driven with only coil_store, coil_size and coil_compression=none (what a new
user types), alternating with the other two in the same run; its ratios are
the "defaults" rows (BENCH_FIO_DEFAULTS=0 leaves it out).  The write cases
also run io_uring_new: fio's io_uring engine writing a new file it lays out
with fallocate, as a fresh coil store's first writes land in allocated but
never written blocks; its ratio to the prefilled file is what the file
system charges any engine for first writes (unwritten-extent conversion).
"""
import os
import re
import shutil
import subprocess

import bench_common as bc

SIZE = int(os.environ.get('BENCH_FIO_SIZE_MIB', str(int(1024 * bc.SCALE)))) << 20
RUNTIME = max(1, int(float(os.environ.get('BENCH_FIO_RUNTIME', str(5 * bc.SCALE)))))
CACHE = os.environ.get('BENCH_FIO_CACHE', '8M')
ZERO_FILL = os.environ.get('BENCH_FIO_ZERO_FILL', '1')
POLL_US = os.environ.get('BENCH_FIO_POLL_US', '50')
DEFAULTS = os.environ.get('BENCH_FIO_DEFAULTS', '1') != '0'

PLAIN = os.path.join(bc.VAR, 'plain.dat')
PLAIN_NEW = os.path.join(bc.VAR, 'plain-new.dat')
STORE_R = os.path.join(bc.VAR, 'fio-read.coil')
STORE_W = os.path.join(bc.VAR, 'fio-write.coil')
STORE_RD = os.path.join(bc.VAR, 'fio-read-defaults.coil')
STATS = os.path.join(bc.VAR, 'fio-stats.json')

# The defaults side's targets: a new user's store, driven with defaults,
# next to the prefilled plain file (randread 0.95x, seqwrite 0.9x,
# randwrite 1.0x); the tuned side keeps the targets in CASES.
DEFAULTS_TARGET = {'randread_4k_qd32': 0.95, 'seqwrite_128k_qd16': 0.9,
                   'randwrite_4k_qd32': 1.0}

CASES = [
    # name, rw, bs, qd, target, extra fio args
    ('randread_4k_qd32', 'randread', '4k', 32, 0.75,
     ['--time_based', '--runtime=%d' % RUNTIME, '--norandommap']),
    ('seqwrite_128k_qd16', 'write', '128k', 16, 0.75, []),
    ('randwrite_4k_qd32', 'randwrite', '4k', 32, 1.0,
     ['--io_size=%d' % (SIZE // 4), '--norandommap']),
]


def common(name, rw, bs, qd, extra):
    return ['--name=' + name, '--rw=' + rw, '--bs=' + bs,
            '--iodepth=%d' % qd, '--size=%d' % SIZE,
            '--iodepth_batch_complete_max=%d' % qd,
            '--randrepeat=0'] + extra


def default_opts():
    """Only what a new user sets: the store, its maximum, no compression."""
    return dict(compression='none', size=str(SIZE * 3))


def coil_opts():
    # The peer's file is written whole before the runs (prefill), so its
    # writes are overwrites; coil's store is made the same way (a store
    # written whole at creation, never punched: docs/space.md).
    # BENCH_FIO_ZERO_FILL=0 measures the default sparse store instead.
    # coil's completions arrive on its ring thread; fio's io_uring engine
    # reaps its own ring.  Polling a little before sleeping saves a futex
    # wake per batch (docs/benchmarks.md: +17 % randread IOPS, same run).
    return dict(compression='none', cache=CACHE, size=str(SIZE * 3),
                zero_fill=ZERO_FILL, poll_us=POLL_US)


def prefill():
    bc.log('   prefill: %d MiB plain file and coil object' % (SIZE >> 20))
    bc.fio(['--name=fill', '--ioengine=io_uring', '--direct=1',
            '--filename=' + PLAIN, '--rw=write', '--bs=1M', '--iodepth=8',
            '--size=%d' % SIZE])
    bc.fresh(STORE_R)
    bc.fio(['--name=fill', '--filename=obj', '--rw=write', '--bs=1M',
            '--iodepth=8', '--size=%d' % SIZE] + bc.coil_args(STORE_R, **coil_opts()))
    if DEFAULTS:
        bc.fresh(STORE_RD)
        bc.fio(['--name=fill', '--filename=obj', '--rw=write', '--bs=1M',
                '--iodepth=8', '--size=%d' % SIZE] + bc.coil_args(STORE_RD, **default_opts()))


def make_store(store, opts):
    """Create @store in a run of its own: writing a zero-filled store takes
    CPU (and profile samples) that are not the workload's; fio's clock
    already leaves it out, the process CPU per I/O must too."""
    bc.fio(['--name=mkstore', '--filename=obj', '--rw=write', '--bs=4k',
            '--size=4k'] + bc.coil_args(store, **opts))


def run_case(case, side):
    name, rw, bs, qd, _, extra = case
    args = common(name, rw, bs, qd, extra)
    if side == 'io_uring':
        doc = bc.fio(args + ['--ioengine=io_uring', '--direct=1',
                             '--filename=' + PLAIN])
        return bc.fio_summary(doc), None
    if side == 'io_uring_new':
        # a new file, laid out by fio with fallocate (unwritten extents)
        bc.fresh(PLAIN_NEW)
        doc = bc.fio(args + ['--ioengine=io_uring', '--direct=1',
                             '--fallocate=native', '--filename=' + PLAIN_NEW])
        bc.fresh(PLAIN_NEW)
        return bc.fio_summary(doc), None
    opts = default_opts() if side == 'coil_defaults' else coil_opts()
    store = STORE_RD if side == 'coil_defaults' else STORE_R
    if rw != 'randread':
        store = STORE_W
        bc.fresh(STORE_W)
        make_store(store, opts)
    bc.fresh(STATS)
    doc = bc.fio(args + ['--filename=obj'] + bc.coil_args(store, **opts),
                 env={'COIL_FIO_STATS': STATS})
    stats = None
    if os.path.exists(STATS):
        with open(STATS) as f:
            try:
                stats = bc.json.load(f)
            except ValueError:
                stats = None
    return bc.fio_summary(doc), stats


PERF_LINE = re.compile(r'^\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.+?)\s*$')


def profile(case):
    """One coil run of @case under perf record; the top symbols by share of
    the samples (on-CPU time of every thread of the fio process)."""
    if os.environ.get('BENCH_PROFILE', '1') == '0' or not shutil.which('perf'):
        return None
    name, rw, bs, qd, _, extra = case
    data = os.path.join(bc.VAR, 'perf-%s.data' % name)
    store = STORE_R
    opts = coil_opts()
    if rw != 'randread':
        store = STORE_W
        bc.fresh(STORE_W)
    if rw == 'write':
        # Long enough to outweigh fio's start-up (its clock calibration
        # would otherwise be a quarter of the samples): overwrite 4 times.
        extra = extra + ['--io_size=%d' % (4 * SIZE)]
        opts['size'] = str(6 * SIZE)
    if rw != 'randread':
        make_store(store, opts)
    # -D skips fio's start-up; the job itself runs for seconds.
    cmd = ['perf', 'record', '-q', '-F', '999', '-D', '400', '-o', data, '--', 'fio',
           '--output-format=json'] + common(name, rw, bs, qd, extra) + \
        ['--filename=obj'] + bc.coil_args(store, **opts)
    if subprocess.run(cmd, capture_output=True).returncode:
        return None
    rep = subprocess.run(['perf', 'report', '-i', data, '--stdio', '--no-children',
                          '-g', 'none', '--sort', 'dso,sym', '--percent-limit', '1.5'],
                         capture_output=True, text=True)
    top = []
    for line in rep.stdout.splitlines():
        m = PERF_LINE.match(line)
        if m:
            top.append({'pct': float(m.group(1)), 'dso': m.group(2),
                        'kernel': m.group(3) == 'k', 'sym': m.group(4)})
    bc.fresh(data)
    return top[:12]


def main():
    bc.need_plugin()
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== 1. fio: coil ioengine vs io_uring on a plain file (%d MiB, %d repeats)'
           % (SIZE >> 20, bc.REPEATS))
    prefill()
    keys = ['bw_mib_s', 'iops', 'p50_us', 'p99_us', 'p999_us', 'cpu_us_per_io']
    results = {'comparison': 'fio_vs_io_uring', 'size_bytes': SIZE,
               'coil_options': coil_opts(), 'coil_default_options': default_opts(),
               'cases': {}}
    for case in CASES:
        name, target = case[0], case[4]
        runs = {'io_uring': [], 'coil': []}
        last_stats = None
        sides = {'io_uring': lambda c=case: run_case(c, 'io_uring'),
                 'coil': lambda c=case: run_case(c, 'coil')}
        if DEFAULTS:
            runs['coil_defaults'] = []
            sides['coil_defaults'] = lambda c=case: run_case(c, 'coil_defaults')
            if case[1] != 'randread':
                runs['io_uring_new'] = []
                sides['io_uring_new'] = lambda c=case: run_case(c, 'io_uring_new')
        for r, side, fn in bc.alternate(bc.REPEATS, sides):
            s, stats = fn()
            runs[side].append(s)
            if stats is not None:
                last_stats = stats
            bc.log('   %-20s rep %d %-13s %8.1f MiB/s  p99 %8.1f us  cpu/io %6.2f us'
                   % (name, r + 1, side, s['bw_mib_s'], s['p99_us'], s['cpu_us_per_io']))
        med = bc.summarize(runs, keys)
        rat = bc.ratio(med['coil']['bw_mib_s'], med['io_uring']['bw_mib_s'])
        results['cases'][name] = {
            'runs': runs, 'median': med, 'ratio_bw': rat, 'target': target,
            'verdict': bc.verdict(rat, target),
            'ratio_cpu_per_io': bc.ratio(med['coil']['cpu_us_per_io'],
                                         med['io_uring']['cpu_us_per_io']),
            'coil_stats_last': last_stats,
            'profile': profile(case),
        }
        if DEFAULTS:
            d = results['cases'][name]
            d['ratio_bw_defaults'] = bc.ratio(med['coil_defaults']['bw_mib_s'],
                                              med['io_uring']['bw_mib_s'])
            d['target_defaults'] = DEFAULTS_TARGET[name]
            d['verdict_defaults'] = bc.verdict(d['ratio_bw_defaults'],
                                               d['target_defaults'])
            d['ratio_cpu_per_io_defaults'] = bc.ratio(
                med['coil_defaults']['cpu_us_per_io'], med['io_uring']['cpu_us_per_io'])
            bc.log('   %-20s defaults only: coil/io_uring bandwidth %.2fx (target >= %.2fx: %s), '
                   'cpu per io %.2f us vs %.2f us (%.2fx)'
                   % (name, d['ratio_bw_defaults'], d['target_defaults'],
                      d['verdict_defaults'],
                      med['coil_defaults']['cpu_us_per_io'],
                      med['io_uring']['cpu_us_per_io'], d['ratio_cpu_per_io_defaults']))
            if 'io_uring_new' in med:
                d['ratio_bw_new_file'] = bc.ratio(med['io_uring_new']['bw_mib_s'],
                                                  med['io_uring']['bw_mib_s'])
                d['ratio_bw_defaults_vs_new_file'] = bc.ratio(
                    med['coil_defaults']['bw_mib_s'], med['io_uring_new']['bw_mib_s'])
                bc.log('   %-20s first writes: io_uring into a new fallocated file / '
                       'prefilled %.2fx; coil defaults / that %.2fx'
                       % (name, d['ratio_bw_new_file'], d['ratio_bw_defaults_vs_new_file']))
        bc.log('   %-20s median coil/io_uring bandwidth %.2fx (target >= %.2fx: %s), '
               'cpu per io %.2fx' % (name, rat, target, bc.verdict(rat, target),
                                      results['cases'][name]['ratio_cpu_per_io']))
    bc.save('fio_vs_io_uring', results)


if __name__ == '__main__':
    main()
