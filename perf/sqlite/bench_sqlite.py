#!/usr/bin/env python3
"""SQLite through the coil VFS vs SQLite's default (unix) VFS, side by side.

The same scripted workload (tests/sqlite/workload.sql: bulk insert, indexes,
updates and deletes in transactions, 100 single-statement commits, VACUUM)
runs through the stock sqlite3 shell on a plain file under var/bench/sqlite/
and on a coil store, alternating which side goes first each repeat.  Both
sides must end with the same content (the workload's summary line).

Per run: wall time and the CPU time of the shell process (user + sys,
including coil's threads); bytes on disk: the plain file's size and blocks,
and the store's space as coil_stats_json reports it (PRAGMA coil_stats)
plus the store file's allocated blocks.  Medians over the repeats and the
ratios are printed and written to perf/results/sqlite.json.

Environment: BUILD (default build/release), BENCH_REPEATS (default 5),
BENCH_SCALE (multiplies the 200000 rows), BENCH_SQLITE_MODES (journal modes,
default "delete wal"; wal runs with locking_mode=EXCLUSIVE on both sides).
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get('BUILD', 'build/release')))
VAR = os.path.join(ROOT, 'var', 'bench', 'sqlite')
RESULTS = os.path.join(ROOT, 'perf', 'results')
REPEATS = max(1, int(os.environ.get('BENCH_REPEATS', '5')))
SCALE = max(0.01, float(os.environ.get('BENCH_SCALE', '1')))
MODES = os.environ.get('BENCH_SQLITE_MODES', 'delete wal').split()
ROWS = max(1000, int(200000 * SCALE))
EXT = os.path.join(BUILD, 'sqlite', 'libcoil_sqlite.so')
SHELL = shutil.which('sqlite3') or '/usr/bin/sqlite3'


def log(msg):
    print(msg, flush=True)


def fresh(path):
    # Other benchmarks share var/bench/: recreate our folder before each run.
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for p in (path, path + '-journal', path + '-wal', path + '-shm'):
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.unlink(p)


def workload():
    with open(os.path.join(ROOT, 'tests', 'sqlite', 'workload.sql')) as f:
        return f.read().replace('@N@', str(ROWS))


def mode_lines(mode):
    if mode == 'wal':
        return 'PRAGMA locking_mode=EXCLUSIVE;\nPRAGMA journal_mode=wal;\n'
    return 'PRAGMA journal_mode=%s;\n' % mode


def shell(script):
    """Run the sqlite3 shell on @script; wall seconds, CPU seconds, stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([SHELL, '-batch', '-bail'], input=script, text=True,
                       capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 or 'Error' in p.stderr or 'Error' in p.stdout:
        sys.exit('bench_sqlite: sqlite3 failed (%d):\n%s%s' %
                 (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stdout


def summary(out):
    for line in out.splitlines():
        if line.startswith('summary|'):
            return line
    sys.exit('bench_sqlite: no summary line in:\n' + out[-2000:])


def find_space(obj):
    """The first dict in coil's stats JSON that reports stored bytes."""
    if isinstance(obj, dict):
        if 'stored' in obj or 'stored_bytes' in obj:
            return obj
        for v in obj.values():
            r = find_space(v)
            if r is not None:
                return r
    return None


def space_field(space, name):
    for k in (name, name + '_bytes'):
        if space and isinstance(space.get(k), (int, float)):
            return int(space[k])
    return None


def run_plain(mode, wl):
    db = os.path.join(VAR, 'plain.db')
    fresh(db)
    wall, cpu, out = shell('.open %s\n%s%s' % (db, mode_lines(mode), wl))
    try:
        st = os.stat(db)
        size, disk = st.st_size, st.st_blocks * 512
    except FileNotFoundError:
        size = disk = None  # perf/bench.sh may clear var/bench/ under us
    return {'side': 'default', 'wall_s': wall, 'cpu_s': cpu,
            'summary': summary(out), 'file_bytes': size,
            'disk_bytes': disk}


def run_coil(mode, wl):
    store = os.path.join(VAR, 'store.coil')
    fresh(store)
    uri = 'file:%%s?vfs=coil&coil_store=%s' % store
    # Create the store untimed: a store is made once, databases many times.
    shell('.load %s\n.open %s\nPRAGMA user_version=1;\n' % (EXT, uri % 'init'))
    script = '.load %s\n.open %s\n%s%s.print VFS\nPRAGMA coil_vfs_stats;\n' % (
        EXT, uri % 'bench.db', mode_lines(mode), wl)
    wall, cpu, out = shell(script)
    vfs = out.split('VFS\n', 1)[1].strip() if 'VFS\n' in out else '{}'
    # Bytes of the final state, untimed, from a new process: the database
    # closed (WAL checkpointed and removed), as the plain side is measured.
    _, _, after = shell('.load %s\n.open %s\n%s.print STATS\nPRAGMA coil_stats;\n' % (
        EXT, uri % 'bench.db', 'PRAGMA locking_mode=EXCLUSIVE;\n' if mode == 'wal' else ''))
    stats = after.split('STATS\n', 1)[1].strip() if 'STATS\n' in after else '{}'
    try:
        space = find_space(json.loads(stats))
    except ValueError:
        space = None
    try:
        disk = os.stat(store).st_blocks * 512
    except FileNotFoundError:
        disk = None  # perf/bench.sh may clear var/bench/ under us
    return {'side': 'coil', 'wall_s': wall, 'cpu_s': cpu,
            'summary': summary(out),
            'logical_bytes': space_field(space, 'logical'),
            'stored_bytes': space_field(space, 'stored'),
            'allocated_bytes': space_field(space, 'allocated'),
            'disk_bytes': disk, 'stats': stats[:4000], 'vfs': vfs}


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main():
    if not os.path.exists(EXT):
        sys.exit('bench_sqlite: %s missing (ninja -C %s)' % (EXT, BUILD))
    os.makedirs(VAR, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    wl = workload()
    cases = []
    log('sqlite workload: %d rows, %d repeats, modes %s, build %s' %
        (ROWS, REPEATS, ' '.join(MODES), BUILD))
    for mode in MODES:
        runs = []
        for r in range(REPEATS):
            order = [run_plain, run_coil] if r % 2 == 0 else [run_coil, run_plain]
            pair = [f(mode, wl) for f in order]
            if pair[0]['summary'] != pair[1]['summary']:
                sys.exit('bench_sqlite: content differs:\n  %s\n  %s' %
                         (pair[0]['summary'], pair[1]['summary']))
            for p in pair:
                p['repeat'] = r
                log('  %-6s %-7s rep %d: %7.3f s wall %7.3f s cpu' %
                    (mode, p['side'], r, p['wall_s'], p['cpu_s']))
            runs += pair
        plain = [x for x in runs if x['side'] == 'default']
        coil = [x for x in runs if x['side'] == 'coil']
        c = {
            'mode': mode,
            'default': {'wall_s': med(plain, 'wall_s'), 'cpu_s': med(plain, 'cpu_s'),
                        'file_bytes': med(plain, 'file_bytes'),
                        'disk_bytes': med(plain, 'disk_bytes')},
            'coil': {'wall_s': med(coil, 'wall_s'), 'cpu_s': med(coil, 'cpu_s'),
                     'logical_bytes': med(coil, 'logical_bytes'),
                     'stored_bytes': med(coil, 'stored_bytes'),
                     'allocated_bytes': med(coil, 'allocated_bytes'),
                     'disk_bytes': med(coil, 'disk_bytes')},
            'runs': runs,
        }
        # speed: >1 means coil is faster; the target is >= 0.7 (docs/benchmarks.md).
        c['speed_ratio'] = c['default']['wall_s'] / c['coil']['wall_s']
        paired = [p['wall_s'] / q['wall_s'] for p, q in zip(plain, coil)]
        c['speed_ratio_paired_median'] = statistics.median(paired)
        if c['coil']['stored_bytes']:
            c['stored_over_file'] = c['coil']['stored_bytes'] / c['default']['file_bytes']
        if c['coil']['allocated_bytes']:
            c['allocated_over_file'] = c['coil']['allocated_bytes'] / c['default']['file_bytes']
        c['cpu_ratio'] = c['coil']['cpu_s'] / c['default']['cpu_s']
        cases.append(c)

    log('')
    log('| mode | default s | coil s | speed (default/coil) | paired median | '
        'CPU default s | CPU coil s | default file | coil stored | coil allocated | '
        'on disk (du) default / coil |')
    log('|---|---|---|---|---|---|---|---|---|---|---|')
    for c in cases:
        d, k = c['default'], c['coil']

        def b(n):
            return '-' if n is None else '%.2f MiB' % (n / 1048576)
        du = ''
        if d['disk_bytes'] and k['disk_bytes']:
            du = '%s / %s (%.2fx)' % (b(d['disk_bytes']), b(k['disk_bytes']),
                                      k['disk_bytes'] / d['disk_bytes'])
        log('| %s | %.3f | %.3f | %.2fx | %.2fx | %.2f | %.2f | %s | %s%s | %s%s | %s |' % (
            c['mode'], d['wall_s'], k['wall_s'], c['speed_ratio'],
            c['speed_ratio_paired_median'], d['cpu_s'], k['cpu_s'],
            b(d['file_bytes']),
            b(k['stored_bytes']),
            ' (%.2fx)' % c['stored_over_file'] if 'stored_over_file' in c else '',
            b(k['allocated_bytes']),
            ' (%.2fx)' % c['allocated_over_file'] if 'allocated_over_file' in c else '',
            du))
    res = {'bench': 'sqlite', 'rows': ROWS, 'repeats': REPEATS,
           'sqlite': subprocess.run([SHELL, '--version'], capture_output=True,
                                    text=True).stdout.split()[0],
           'cases': cases,
           'command': 'BENCH_REPEATS=%d BENCH_SCALE=%g BUILD=%s perf/bench_sqlite.sh' %
                      (REPEATS, SCALE, os.path.relpath(BUILD, ROOT))}
    path = os.path.join(RESULTS, 'sqlite.json')
    with open(path, 'w') as f:
        json.dump(res, f, indent=1)
    log('wrote %s' % os.path.relpath(path, ROOT))


if __name__ == '__main__':
    main()
