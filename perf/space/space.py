#!/usr/bin/env python3
"""The space benchmark: sustained 4 KiB random writes (QD32) on a 1 GiB
object in a 3 GiB coil store — where the cleaner must run to keep up —
next to fio's io_uring engine on a plain 1 GiB O_DIRECT file, same job,
same run, alternating (ABBA), repeated; medians and coil/io_uring ratios
of IOPS and p99, and coil's write amplification (device bytes written /
logical bytes written, from coil_stats_json of each coil run).

Phases:
  prefill   1 GiB sequential into the plain file and into the coil object
  age       random 4 KiB writes into coil until it has written the free
            space once over (2.2 GiB): from then on every segment the
            writes need comes from the cleaner (not timed against the peer;
            its IOPS and WA are reported as the "fresh" numbers)
  repeats   REPEATS x (coil, io_uring) time-based runs of RUNTIME s each

Knobs (environment): SPACE_SIZE_MIB (1024), SPACE_RUNTIME (15 s),
SPACE_REPEATS (3), SPACE_AGE_MIB (2.2 x size), SPACE_ZERO_FILL (1: the
store is written whole at creation and never punched, like the peer's
prefilled file; 0: the default sparse store), BUILD (build/release),
SPACE_DIR (var/space).  The default run takes about 3-4 minutes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
import bench_common as bc  # noqa: E402

SIZE = int(os.environ.get('SPACE_SIZE_MIB', '1024')) << 20
RUNTIME = int(os.environ.get('SPACE_RUNTIME', '15'))
REPEATS = max(1, int(os.environ.get('SPACE_REPEATS', '3')))
AGE = int(os.environ.get('SPACE_AGE_MIB', str(int(SIZE * 2.2) >> 20))) << 20
# coil_zero_fill: 1 = the store is written whole at creation and never
# punched, like the peer's prefilled file (docs/space.md); 0 = sparse.
ZERO_FILL = os.environ.get('SPACE_ZERO_FILL', '1')
DIR = os.path.abspath(os.environ.get('SPACE_DIR', os.path.join(bc.ROOT, 'var', 'space')))
PLAIN = os.path.join(DIR, 'plain.dat')
STORE = os.path.join(DIR, 'space.coil')
STATS = os.path.join(DIR, 'stats.json')
JOB = ['--rw=randwrite', '--bs=4k', '--iodepth=32',
       '--iodepth_batch_complete_max=32', '--size=%d' % SIZE,
       '--norandommap', '--randrepeat=0']


def coil(extra, env_stats=True):
    if os.path.exists(STATS):
        os.unlink(STATS)
    doc = bc.fio(['--name=coil', '--filename=obj'] + JOB + extra +
                 bc.coil_args(STORE, compression='none', size=str(SIZE * 3),
                              zero_fill=ZERO_FILL,
                              cache='8M'),
                 env={'COIL_FIO_STATS': STATS} if env_stats else None)
    st = {}
    if os.path.exists(STATS):
        with open(STATS) as f:
            text = f.read()
        st = json.loads(text[text.find('{'):])
    return doc, st


def stats_row(doc, st):
    row = bc.fio_summary(doc, 'write')
    cl = st.get('cleaner', {})
    sp = st.get('space', {})
    row['write_amplification'] = cl.get('write_amplification', 0.0)
    row['bytes_cleaned'] = cl.get('bytes_cleaned', 0)
    row['segments_cleaned'] = cl.get('segments_cleaned', 0)
    row['throttle_wait_ns_max'] = cl.get('throttle_wait_ns_max', 0)
    row['throttled_writes'] = cl.get('throttled_writes', 0)
    row['histogram'] = cl.get('live_fraction_histogram', [])
    row['free_bytes'] = sp.get('free', 0)
    row['checkpoints'] = st.get('checkpoint', {}).get('count', 0)
    row['checkpoint_bytes'] = st.get('checkpoint', {}).get('bytes_written', 0)
    return row


def main():
    bc.need_plugin()
    os.makedirs(DIR, exist_ok=True)
    bc.log('space: %d MiB object in a %d MiB store, 4 KiB randwrite QD32, '
           '%d s x %d repeats' % (SIZE >> 20, 3 * SIZE >> 20, RUNTIME, REPEATS))
    bc.log('   prefill')
    for p in (PLAIN, STORE):
        if os.path.exists(p):
            os.unlink(p)
    bc.fio(['--name=fill', '--ioengine=io_uring', '--direct=1',
            '--filename=' + PLAIN, '--rw=write', '--bs=1M', '--iodepth=8',
            '--size=%d' % SIZE])
    coil(['--rw=write', '--bs=1M', '--iodepth=8'])
    bc.log('   age: %d MiB of random writes into coil' % (AGE >> 20))
    doc, st = coil(['--io_size=%d' % AGE])
    fresh = stats_row(doc, st)
    bc.log('   age: %.0f IOPS, WA %.3f, %d segments cleaned' % (
        fresh['iops'], fresh['write_amplification'], fresh['segments_cleaned']))

    def run_coil():
        d, s = coil(['--time_based', '--runtime=%d' % RUNTIME])
        return stats_row(d, s)

    def run_uring():
        d = bc.fio(['--name=io_uring', '--ioengine=io_uring', '--direct=1',
                    '--filename=' + PLAIN] + JOB +
                   ['--time_based', '--runtime=%d' % RUNTIME])
        return bc.fio_summary(d, 'write')

    runs = {'coil': [], 'io_uring': []}
    for r, side, fn in bc.alternate(REPEATS, {'coil': run_coil,
                                              'io_uring': run_uring}):
        row = fn()
        runs[side].append(row)
        bc.log('   %d %-8s %8.0f IOPS  p99 %7.0f us%s' % (
            r, side, row['iops'], row['p99_us'],
            ('  WA %.3f  cleaned %d seg' % (row['write_amplification'],
                                           row['segments_cleaned']))
            if side == 'coil' else ''))
    med = bc.summarize(runs, ['iops', 'p50_us', 'p99_us', 'p999_us',
                              'cpu_us_per_io'])
    med['coil']['write_amplification'] = bc.median(
        [x['write_amplification'] for x in runs['coil']])
    iops_ratio = bc.ratio(med['coil']['iops'], med['io_uring']['iops'])
    p99_ratio = bc.ratio(med['coil']['p99_us'], med['io_uring']['p99_us'])
    bc.log('   median: coil %.0f IOPS p99 %.0f us WA %.3f | io_uring %.0f IOPS '
           'p99 %.0f us | IOPS ratio %.2fx (target >= 1.0: %s), p99 ratio %.2fx' % (
               med['coil']['iops'], med['coil']['p99_us'],
               med['coil']['write_amplification'], med['io_uring']['iops'],
               med['io_uring']['p99_us'], iops_ratio,
               bc.verdict(iops_ratio, 1.0), p99_ratio))
    doc = {
        'benchmark': 'space: sustained 4 KiB random writes, 1 GiB object in '
                     'a 3 GiB store vs io_uring on a plain 1 GiB file',
        'command': 'perf/bench_space.sh',
        'size_bytes': SIZE, 'store_bytes': 3 * SIZE, 'runtime_s': RUNTIME,
        'zero_fill': ZERO_FILL == '1',
        'age_bytes': AGE, 'fresh_age_phase': fresh,
        'runs': runs, 'median': med,
        'ratio': {'iops': iops_ratio, 'p99': p99_ratio},
        'target': {'iops_ratio': 1.0,
                   'verdict': bc.verdict(iops_ratio, 1.0)},
        'repeats_space': REPEATS,
    }
    out = os.environ.get('SPACE_RESULT', 'space')
    bc.save(out, doc)


if __name__ == '__main__':
    main()
