#!/usr/bin/env python3
"""Comparison 4: cold sequential reads at queue depth 1, coil_prefetch=1 vs
coil_prefetch=0, through fio.  Each run is a fresh fio process (coil's cache
starts empty; the store is O_DIRECT, so the page cache does not help either).
Target: prefetch on >= 2x the bandwidth of prefetch off.

Knobs: BENCH_PREFETCH_MIB (object size, default 256 x BENCH_SCALE),
BENCH_PREFETCH_BS (default 64k).
"""
import os

import bench_common as bc

MIB = int(os.environ.get('BENCH_PREFETCH_MIB', str(max(16, int(256 * bc.SCALE)))))
BS = os.environ.get('BENCH_PREFETCH_BS', '64k')
STORE = os.path.join(bc.VAR, 'prefetch.coil')


def prefill():
    bc.fresh(STORE)
    bc.fio(['--name=fill', '--filename=seq', '--rw=write', '--bs=1M', '--iodepth=4',
            '--size=%dM' % MIB, '--buffer_compress_percentage=50']
           + bc.coil_args(STORE, compression='zstd:1', size=str((MIB * 3 + 256) << 20)))


def run(on):
    doc = bc.fio(['--name=seqread', '--filename=seq', '--rw=read', '--bs=' + BS,
                  '--iodepth=1', '--size=%dM' % MIB]
                 + bc.coil_args(STORE, prefetch=on))
    return bc.fio_summary(doc, 'read')


def main():
    bc.need_plugin()
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== 4. prefetch: cold sequential QD1 reads (%s), on vs off (%d MiB, %d repeats)'
           % (BS, MIB, bc.REPEATS))
    prefill()
    runs = {'off': [], 'on': []}
    for r, side, fn in bc.alternate(bc.REPEATS, {'off': lambda: run(0), 'on': lambda: run(1)}):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d prefetch %-3s %8.1f MiB/s  p50 %8.1f us  p99 %8.1f us'
               % (r + 1, side, s['bw_mib_s'], s['p50_us'], s['p99_us']))
    med = bc.summarize(runs, ['bw_mib_s', 'p50_us', 'p99_us', 'p999_us', 'cpu_us_per_io'])
    rb = bc.ratio(med['on']['bw_mib_s'], med['off']['bw_mib_s'])
    doc = {'comparison': 'prefetch_on_vs_off', 'mib': MIB, 'bs': BS, 'runs': runs,
           'median': med, 'ratio_bw': rb, 'target': 2.0, 'verdict': bc.verdict(rb, 2.0)}
    bc.log('   median on/off bandwidth %.2fx (target >= 2x: %s)' % (rb, doc['verdict']))
    bc.save('prefetch_on_vs_off', doc)


if __name__ == '__main__':
    main()
