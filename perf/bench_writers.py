#!/usr/bin/env python3
"""Comparison 3: 16 concurrent fio writers of 1 MiB requests into one store
(thread=1, one object each, compressible data, zstd:1), coil_pool=fair vs
coil_pool=semaphore.  Targets: worst-job p99 fair/semaphore <= 0.6,
total bandwidth fair/semaphore >= 0.95.

Knobs: BENCH_POOL_MIB_PER_JOB (default 32 x BENCH_SCALE), BENCH_POOL_JOBS (16).
"""
import os

import bench_common as bc

PER_JOB = int(os.environ.get('BENCH_POOL_MIB_PER_JOB', str(max(4, int(32 * bc.SCALE)))))
JOBS = int(os.environ.get('BENCH_POOL_JOBS', '16'))
STORE = os.path.join(bc.VAR, 'pool.coil')


def run(mode):
    bc.fresh(STORE)
    doc = bc.fio(['--name=w', '--thread', '--numjobs=%d' % JOBS, '--rw=write',
                  '--bs=1M', '--iodepth=1', '--size=%dM' % PER_JOB,
                  '--buffer_compress_percentage=50', '--randrepeat=0']
                 + bc.coil_args(STORE, pool=mode, compression='zstd:1',
                                size=str((JOBS * PER_JOB * 3 + 256) << 20)))
    s = bc.fio_summary(doc, 'write')
    return s


def main():
    bc.need_plugin()
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== 3. pool: %d writers x 1 MiB, fair vs semaphore (%d MiB each, %d repeats)'
           % (JOBS, PER_JOB, bc.REPEATS))
    runs = {'semaphore': [], 'fair': []}
    sides = {'semaphore': lambda: run('semaphore'), 'fair': lambda: run('fair')}
    for r, side, fn in bc.alternate(bc.REPEATS, sides):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d %-9s %8.1f MiB/s  worst-job p99 %9.1f us  p50 %8.1f us'
               % (r + 1, side, s['bw_mib_s'], s['p99_us'], s['p50_us']))
    med = bc.summarize(runs, ['bw_mib_s', 'p50_us', 'p99_us', 'p999_us', 'cpu_us_per_io'])
    rp = bc.ratio(med['fair']['p99_us'], med['semaphore']['p99_us'])
    rb = bc.ratio(med['fair']['bw_mib_s'], med['semaphore']['bw_mib_s'])
    doc = {'comparison': 'pool_fair_vs_semaphore', 'jobs': JOBS,
           'mib_per_job': PER_JOB, 'runs': runs, 'median': med,
           'ratio_p99': rp, 'ratio_bw': rb, 'target_p99': 0.6, 'target_bw': 0.95,
           'verdict_p99': bc.verdict(rp, 0.6, False), 'verdict_bw': bc.verdict(rb, 0.95)}
    bc.log('   median fair/semaphore: worst-job p99 %.2fx (target <= 0.6: %s), bandwidth %.2fx (>= 0.95: %s)'
           % (rp, doc['verdict_p99'], rb, doc['verdict_bw']))
    bc.save('pool_fair_vs_semaphore', doc)


if __name__ == '__main__':
    main()
