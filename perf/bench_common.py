"""Shared helpers for the side-by-side benchmarks under perf/.

Every comparison runs coil and its peer in the same run, alternating the
order each repeat (ABBA), and reports medians over the repeats plus the
ratio coil/peer.  Results are written to perf/results/<name>.json.

Environment knobs (all optional):
  BENCH_REPEATS   repeats per case (default 3)
  BENCH_SCALE     multiplies data sizes and run times (default 1)
  BUILD           build directory holding libcoil and coil-fio.so
                  (default build/release)
"""
import json
import resource
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get('BUILD', 'build/release')))
VAR = os.path.join(ROOT, 'var', 'bench')
RESULTS = os.path.join(ROOT, 'perf', 'results')
REPEATS = max(1, int(os.environ.get('BENCH_REPEATS', '3')))
SCALE = max(0.05, float(os.environ.get('BENCH_SCALE', '1')))
PLUGIN = os.path.join(BUILD, 'perf', 'fio', 'coil-fio.so')


def log(msg):
    print(msg, flush=True)


def need_plugin():
    if not os.path.exists(PLUGIN):
        sys.exit('bench: %s missing: build with -Dfio_source (tools/dev.sh deps)' % PLUGIN)


def fresh(path):
    """Remove a file or directory so a run starts from nothing."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def du(path):
    """Bytes allocated on disk (st_blocks) by a file, or by every file
    under a directory."""
    if not os.path.isdir(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def drop_caches():
    """Best effort: O_DIRECT sides do not need it, buffered peers do."""
    try:
        subprocess.run(['sync'], check=False)
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
    except OSError:
        pass


def mib(n):
    return int(n * SCALE) << 20


def fio(args, env=None):
    """Run fio with --output-format=json; return the parsed document."""
    cmd = ['fio', '--output-format=json'] + args
    e = dict(os.environ)
    if env:
        e.update(env)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = p.stdout
    # fio prints notes before the JSON on some paths; start at the brace.
    start = text.find('{')
    if p.returncode != 0 or start < 0:
        sys.stderr.write(' '.join(cmd) + '\n' + p.stdout[-3000:] + p.stderr[-3000:])
        raise RuntimeError('fio failed (%d)' % p.returncode)
    doc = json.loads(text[start:])
    # fio's own usr/sys_cpu count only the job thread (RUSAGE_THREAD); coil
    # works on its own threads too, so take the whole process from wait4.
    doc['process_cpu_s'] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return doc


def coil_args(store, **opts):
    a = ['--ioengine=external:' + PLUGIN, '--coil_store=' + store]
    for k, v in opts.items():
        a.append('--coil_%s=%s' % (k, v))
    return a


def pct(clat, p):
    """A latency percentile from fio's clat_ns block, in microseconds."""
    tab = clat.get('percentile') or {}
    key = '%.6f' % p
    return tab.get(key, 0) / 1000.0


def fio_summary(doc, ddir=None):
    """Flatten fio's JSON into the numbers the tables use.  Several jobs
    are summed for bandwidth; latency is reported for the worst job."""
    jobs = doc['jobs']
    out = {'bw_mib_s': 0.0, 'iops': 0.0, 'p50_us': 0.0, 'p99_us': 0.0,
           'p999_us': 0.0, 'usr_cpu': 0.0, 'sys_cpu': 0.0, 'jobs': len(jobs),
           'job_p99_us': []}
    for j in jobs:
        for d in ([ddir] if ddir else ['read', 'write']):
            s = j[d]
            if not s['io_bytes']:
                continue
            out['bw_mib_s'] += s['bw_bytes'] / 1048576.0
            out['iops'] += s['iops']
            c = s['clat_ns']
            out['p50_us'] = max(out['p50_us'], pct(c, 50))
            p99 = pct(c, 99)
            out['job_p99_us'].append(p99)
            out['p99_us'] = max(out['p99_us'], p99)
            out['p999_us'] = max(out['p999_us'], pct(c, 99.9))
        out['usr_cpu'] += j.get('usr_cpu', 0.0)
        out['sys_cpu'] += j.get('sys_cpu', 0.0)
    ios = sum(j[d]['total_ios'] for j in jobs for d in ('read', 'write'))
    out['cpu_us_per_io'] = doc.get('process_cpu_s', 0.0) * 1e6 / ios if ios else 0.0
    del out['usr_cpu'], out['sys_cpu']
    return out


def median(xs):
    return statistics.median(xs) if xs else 0.0


def alternate(repeats, sides):
    """Yield (repeat, side_name, fn) in ABBA order so drift on a shared
    machine hits both sides alike."""
    names = list(sides)
    for r in range(repeats):
        order = names if r % 2 == 0 else list(reversed(names))
        for n in order:
            yield r, n, sides[n]


def summarize(runs, keys):
    """runs: {side: [dict, ...]} -> {side: {key: median}}."""
    return {side: {k: median([r[k] for r in rs if k in r]) for k in keys}
            for side, rs in runs.items()}


def ratio(a, b):
    return a / b if b else float('nan')


def save(name, doc):
    os.makedirs(RESULTS, exist_ok=True)
    doc['when'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    doc['repeats'] = REPEATS
    doc['scale'] = SCALE
    doc['host'] = {'cpus': os.cpu_count(), 'kernel': os.uname().release}
    path = os.path.join(RESULTS, name + '.json')
    with open(path, 'w') as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    log('   -> %s' % os.path.relpath(path, ROOT))


def verdict(value, target, higher_is_better=True):
    ok = value >= target if higher_is_better else value <= target
    return 'meets' if ok else 'misses'
