#!/usr/bin/env python3
"""Comparison 3: 16 concurrent fio writers of 1 MiB requests into one store
(thread=1, one object each, compressible data, zstd:1), coil_pool=fair vs
coil_pool=semaphore.  Targets: worst-job p99 fair/semaphore <= 0.6,
total bandwidth fair/semaphore >= 0.95.

Each repeat runs, alternating the order (ABBA):
  disk  both pools on a store under var/bench (the machine's disk);
  ram   both pools on a store under /dev/shm (tmpfs; skipped when missing
        or short of room), where no device stall reaches a request, so
        the pool's own effect on the tail shows;
  dev   the disk alone: fio's io_uring engine, the same 16 jobs of 1 MiB
        QD1 O_DIRECT writes to plain files, each paced at the per-job
        bandwidth coil reached on the disk in this repeat.  Its worst-job
        p99 is the device's own tail at that load, which a request of
        either pool waits through.

Knobs: BENCH_POOL_MIB_PER_JOB (default 32 x BENCH_SCALE), BENCH_POOL_JOBS (16).
"""
import os
import shutil

import bench_common as bc

PER_JOB = int(os.environ.get('BENCH_POOL_MIB_PER_JOB', str(max(4, int(32 * bc.SCALE)))))
JOBS = int(os.environ.get('BENCH_POOL_JOBS', '16'))
STORE = os.path.join(bc.VAR, 'pool.coil')
SHM = '/dev/shm'
STORE_RAM = os.path.join(SHM, 'coil-bench-pool.coil')
STORE_SIZE = (JOBS * PER_JOB * 3 + 256) << 20
KEYS = ['bw_mib_s', 'p50_us', 'p99_us', 'p999_us', 'cpu_us_per_io']


def run(mode, store=STORE):
    bc.fresh(store)
    try:
        doc = bc.fio(['--name=w', '--thread', '--numjobs=%d' % JOBS, '--rw=write',
                      '--bs=1M', '--iodepth=1', '--size=%dM' % PER_JOB,
                      '--buffer_compress_percentage=50', '--randrepeat=0']
                     + bc.coil_args(store, pool=mode, compression='zstd:1',
                                    size=str(STORE_SIZE)))
    finally:
        bc.fresh(store)
    return bc.fio_summary(doc, 'write')


def run_device(rate_mib_s):
    """The disk alone at coil's per-job pace (see the module comment)."""
    files = os.path.join(bc.VAR, 'pool-dev.$jobnum')
    try:
        doc = bc.fio(['--name=d', '--ioengine=io_uring', '--direct=1', '--thread',
                      '--numjobs=%d' % JOBS, '--rw=write', '--bs=1M', '--iodepth=1',
                      '--size=%dM' % PER_JOB, '--filename_format=' + files,
                      '--rate=%dk' % max(1024, int(rate_mib_s * 1024))])
    finally:
        for j in range(JOBS):
            bc.fresh(os.path.join(bc.VAR, 'pool-dev.%d' % j))
    return bc.fio_summary(doc, 'write')


def ram_store_fits():
    """tmpfs at /dev/shm with room for what the run writes (sparse store)."""
    try:
        with open('/proc/mounts') as f:
            if not any(l.split()[1] == SHM and l.split()[2] == 'tmpfs' for l in f):
                return False
        return shutil.disk_usage(SHM).free > 2 * (JOBS * PER_JOB << 20) + (512 << 20)
    except OSError:
        return False


def verdicts(med, tag):
    f, s = med['fair' + tag], med['semaphore' + tag]
    rp, rb = bc.ratio(f['p99_us'], s['p99_us']), bc.ratio(f['bw_mib_s'], s['bw_mib_s'])
    return {'ratio_p99': rp, 'ratio_bw': rb,
            'verdict_p99': bc.verdict(rp, 0.6, False), 'verdict_bw': bc.verdict(rb, 0.95)}


def main():
    bc.need_plugin()
    os.makedirs(bc.VAR, exist_ok=True)
    ram = ram_store_fits()
    bc.log('== 3. pool: %d writers x 1 MiB, fair vs semaphore (%d MiB each, %d repeats%s)'
           % (JOBS, PER_JOB, bc.REPEATS, ', disk and RAM stores' if ram else ''))
    if not ram:
        bc.log('   (no tmpfs with room at %s: the RAM-store side is skipped)' % SHM)
    sides = {'semaphore': lambda: run('semaphore'), 'fair': lambda: run('fair')}
    if ram:
        sides['fair_ram'] = lambda: run('fair', STORE_RAM)
        sides['semaphore_ram'] = lambda: run('semaphore', STORE_RAM)
    runs = {k: [] for k in sides}
    runs['device'] = []
    for r, side, fn in bc.alternate(bc.REPEATS, sides):
        s = fn()
        runs[side].append(s)
        bc.log('   rep %d %-13s %8.1f MiB/s  worst-job p99 %9.1f us  p50 %8.1f us'
               % (r + 1, side, s['bw_mib_s'], s['p99_us'], s['p50_us']))
        if side in ('semaphore', 'fair') and len(runs['semaphore']) == len(runs['fair']) == r + 1:
            # Both disk runs of this repeat are done: the disk alone at
            # their pace.
            pace = (runs['semaphore'][r]['bw_mib_s'] + runs['fair'][r]['bw_mib_s']) / 2 / JOBS
            d = run_device(pace)
            runs['device'].append(d)
            bc.log('   rep %d %-13s %8.1f MiB/s  worst-job p99 %9.1f us  p50 %8.1f us  (paced %.0f MiB/s per job)'
                   % (r + 1, 'disk alone', d['bw_mib_s'], d['p99_us'], d['p50_us'], pace))
    med = bc.summarize(runs, KEYS)
    doc = {'comparison': 'pool_fair_vs_semaphore', 'jobs': JOBS,
           'mib_per_job': PER_JOB, 'runs': runs, 'median': med,
           'target_p99': 0.6, 'target_bw': 0.95}
    doc.update(verdicts(med, ''))
    bc.log('   median fair/semaphore on the disk: worst-job p99 %.2fx (target <= 0.6: %s), '
           'bandwidth %.2fx (>= 0.95: %s); the disk alone at that pace: worst-job p99 %.0f us'
           % (doc['ratio_p99'], doc['verdict_p99'], doc['ratio_bw'], doc['verdict_bw'],
              med['device']['p99_us']))
    if ram:
        doc['ram'] = verdicts(med, '_ram')
        bc.log('   median fair/semaphore on a RAM store: worst-job p99 %.2fx (%s), bandwidth %.2fx (%s)'
               % (doc['ram']['ratio_p99'], doc['ram']['verdict_p99'],
                  doc['ram']['ratio_bw'], doc['ram']['verdict_bw']))
    bc.save('pool_fair_vs_semaphore', doc)


if __name__ == '__main__':
    main()
