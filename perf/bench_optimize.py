#!/usr/bin/env python3
"""The optimizer on a real tree: what `coil optimize` saves, what it costs,
and how fast the data it wrote decodes, next to zstd alone on the same
bytes (tools/dev.sh bench-optimize runs this).

The corpus is every regular file under BENCH_OPT_DIR (default /usr/include),
exactly what `coil import` takes: symbolic links (to files or folders) and
other files that are not regular are skipped, and the files are taken in
the order of their paths relative to the folder (byte order, the order in
which import names its objects).  Its logical size, the sum of the files'
sizes, must equal the count import prints, and every check must read it.

Peers, made once per run before the repeats (their sizes do not vary):
  zstd, each file alone, 64 KiB blocks: every file cut into 64 KiB pieces
        (its last one shorter), each piece compressed alone: the unit coil
        compresses (each file is its own object, written in blobs of at
        most 64 KiB), so small files are compressed alone, on both sides;
  zstd, tar in 64 KiB blocks: a tar of the same files (`tar cf -C DIR
        --no-recursion -T LIST`: regular files only, in the same order,
        with tar's 512-byte headers and padding, which are in its input
        and so in its compressed size) cut into 64 KiB pieces that span
        files, each compressed alone: the "per-64 KiB zstd" of the target;
  zstd -3, whole tar: `zstd -3 --single-thread -c` of the tar, one frame.
  Each piece is a file of its own, compressed by `zstd -L -q
  --single-thread --no-check --filelist LIST --output-dir-flat DIR` (one
  frame per piece, no checksum, no dictionary), at L = 1 (coil's
  foreground level) and 19 (the optimizer's); the frames are then
  concatenated in order into one file per set and level, and their sizes
  summed.  So the sizes are per 64 KiB block by construction; as a cross-
  check, `zstd -b1 -B65536` on the tar and on the file list (zstd's
  benchmark cuts its input into 64 KiB blocks, per file, and compresses
  each alone) must print the same level-1 totals (saved as
  zstd_b_check), and each concatenation must decode to the bytes it was
  made from (sha256).  The two level-19 sets are compressed by two zstd
  processes at once (only their sizes and CPU matter).
All ratios use the corpus's logical bytes (the files' contents) over the
stored or compressed bytes, so a tar peer's ratio is a little lower than
zstd's own (its input also holds the headers): comparing ratios is
comparing stored bytes.

Each repeat (BENCH_REPEATS, default 3):
  1. two fresh stores with default options (`coil create STORE SIZE`, then
     `coil import STORE DIR`), "imported" and "optimized";
  2. `coil stats --json` of each: space.logical, .stored, .allocated,
     .disk_bytes, and du of the store file (st_blocks);
  3. `coil optimize STORE` (level 19, the default) on "optimized", timed:
     wall clock, and the process's CPU (user + system, every thread) as the
     delta of resource.getrusage(RUSAGE_CHILDREN) around it; its one-line
     report is parsed (blobs encoded again, written smaller, saved bytes:
     the "optimizer" section of `coil stats --json` counts only the
     process that prints it, so it is all zeros there; also the
     dictionaries it trained and kept, and their bytes); then its stats
     and du again;
  4. decode speed, as logical MB (10^6 bytes) per CPU second of a process
     (getrusage as above), each side twice, the sides in one order and
     then the reverse (the reverse first on odd repeats), a side's figure
     the mean of its two runs:
       coil check STORE, on "imported" and on "optimized": a fresh process
         opens the store read-only with an empty cache and reads every byte
         of every object (O_DIRECT), verifying the checksum of the stored
         bytes and of the decoded ones; its whole life counts (open, the
         metadata, the close), not only the decoding;
       zstd -d -q -c --no-asyncio FRAMES >/dev/null, on each set's
         concatenated level-1 and level-19 frames: the decoder alone, one
         thread, one input file (no checksum to verify: made with
         --no-check).
     zstd -b's own speeds are not used: it times by the wall clock, which
     another process on a shared 2-CPU machine skews (they are saved with
     the cross-check, for the record);
  5. `coil compact STORE` on "optimized", and du once more: the optimizer
     relocates into new segments, so the file can end larger than before
     until compact gives back the free segments at its end.
The figures reported are medians over the repeats.  The load average is
saved at each repeat's start and end: wall times on a shared machine are
read against it.

Knobs:
  BENCH_OPT_DIR     the tree (default /usr/include)
  BENCH_OPT_SIZE    the stores' maximum size (default 2G: 1 MiB segments;
                    from 4G a store has 4 MiB segments, docs/guide.md)
  BENCH_REPEATS, BUILD: see perf/bench_common.py (BENCH_SCALE is not used:
  the corpus is what it is)
  BENCH_KEEP=1      keep the last stores, the tar and the frames under
                    var/bench/optimize/
Results: perf/results/optimize_corpus.json (every repeat's raw numbers).
For /usr/include (120 MB): about 4 minutes on 2 idle CPUs, 7 on the shared
machine with a load average of 6; most of it is level-19 encoding (coil
optimize, 35 CPU seconds once a repeat; zstd -19 of both sets, 50 CPU
seconds each, once a run).
"""
import hashlib
import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import time

import bench_common as bc

CORPUS = os.path.abspath(os.environ.get('BENCH_OPT_DIR', '/usr/include'))
SIZE = os.environ.get('BENCH_OPT_SIZE', '2G')
KEEP = bool(os.environ.get('BENCH_KEEP'))
CLI = os.path.join(bc.BUILD, 'tools', 'coil')
WORK = os.path.join(bc.VAR, 'optimize')
TAR = os.path.join(WORK, 'corpus.tar')
STORES = {'imported': os.path.join(WORK, 'imported.coil'),
          'optimized': os.path.join(WORK, 'optimized.coil')}
LEVEL = 19  # coil optimize's default, and the peers' high level
LEVELS = (1, LEVEL)
SETS = ('files', 'tar')
BLOCK = 65536
MB = 1e6
MIB = float(1 << 20)
GIB = float(1 << 30)

OPT_LINE = re.compile(r'(\d+) blobs encoded again, (\d+) written smaller, saved .*?'
                      r'\((\d+) bytes\); (\d+) no smaller, (\d+) overtaken by newer '
                      r'writes, (\d+) failed their check')
DICT_LINE = re.compile(r'(\d+) dictionaries trained \((\d+) bytes\)')
IMPORT_LINE = re.compile(r'imported (\d+) files, (\d+) bytes')
CHECK_LINE = re.compile(r'checked (\d+) objects, .*\((\d+) bytes\): no damage')
ZSTD_B_LINE = re.compile(r':\s*(\d+)\s*->\s*(\d+)\s*\(x?([\d.]+)\),\s*([\d.]+)\s*MB/s,'
                         r'\s*([\d.]+)\s*MB/s')


def loadavg():
    with open('/proc/loadavg') as f:
        return float(f.read().split()[0])


def run(cmd, what, discard=False):
    """Run @cmd to its end: {out, err, wall_s, cpu_s, user_s, sys_s,
    nivcsw}.  CPU is the child's, all its threads, from wait4
    (RUSAGE_CHILDREN); nivcsw, its involuntary context switches (it was
    runnable and another thread got the CPU)."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL if discard else subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise RuntimeError('%s (exit %d): %s' % (what, p.returncode,
                                                  (p.stderr or p.stdout or '')[-2000:]))
    usr = ru1.ru_utime - ru0.ru_utime
    sys_ = ru1.ru_stime - ru0.ru_stime
    return {'out': p.stdout or '', 'err': p.stderr, 'wall_s': wall, 'cpu_s': usr + sys_,
            'user_s': usr, 'sys_s': sys_, 'nivcsw': ru1.ru_nivcsw - ru0.ru_nivcsw}


def corpus_files():
    """(relative paths in byte order, logical bytes): the regular files
    import takes.  os.walk does not descend into symbolic links to
    folders; lstat skips links to files and anything not regular."""
    out = []
    for dirpath, _, files in os.walk(CORPUS):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                out.append((os.path.relpath(p, CORPUS).encode(), st.st_size))
    out.sort()
    return [p.decode() for p, _ in out], sum(n for _, n in out)


def space(store):
    sp = json.loads(run([CLI, 'stats', '--json', store], 'coil stats')['out'])['space']
    got = {k: sp[k] for k in ('logical', 'stored', 'allocated', 'disk_bytes')}
    got['du'] = bc.du(store)
    return got


# --- the zstd peers ---------------------------------------------------------

def cut(name, sources):
    """Every source file cut into 64 KiB pieces, WORK/NAME/000000 on, in
    order (a source's last piece shorter; pieces never span two sources).
    Returns (the list file naming the pieces, their count, the sha256 of
    all the sources' bytes in order)."""
    d = os.path.join(WORK, name)
    bc.fresh(d)
    os.makedirs(d)
    names = []
    h = hashlib.sha256()
    for src in sources:
        with open(src, 'rb') as f:
            while True:
                b = f.read(BLOCK)
                if not b:
                    break
                h.update(b)
                n = os.path.join(d, '%07d' % len(names))
                with open(n, 'wb') as o:
                    o.write(b)
                names.append(n)
    lst = os.path.join(WORK, name + '.list')
    with open(lst, 'w') as f:
        f.write(''.join(n + '\n' for n in names))
    return lst, len(names), h.hexdigest()


def compress_sets(pieces, level):
    """Compress every set's pieces at @level, one zstd process per set, all
    at once; each set's frames concatenated in order into
    WORK/SET-lLEVEL.zst.  Returns {set: {compressed_bytes, frames,
    cpu_s}}."""
    procs = {}
    for name, (lst, count, _) in pieces.items():
        outdir = os.path.join(WORK, '%s-l%d.d' % (name, level))
        bc.fresh(outdir)
        os.makedirs(outdir)
        cmd = ['zstd', '-%d' % level, '-q', '--single-thread', '--no-check',
               '--filelist', lst, '--output-dir-flat', outdir]
        err = open(outdir + '.err', 'w+')
        procs[name] = (subprocess.Popen(cmd, stderr=err), err, outdir, count)
    got = {}
    for name, (p, err, outdir, count) in procs.items():
        # wait4: this child's own CPU (the others run at the same time)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        msg = err.read()
        err.close()
        os.unlink(outdir + '.err')
        if p.returncode:
            raise RuntimeError('zstd -%d of the %s pieces (exit %d): %s'
                               % (level, name, p.returncode, msg[-2000:]))
        frames = frames_path(name, level)
        total = 0
        with open(frames, 'wb') as o:
            for i in range(count):
                fp = os.path.join(outdir, '%07d.zst' % i)
                with open(fp, 'rb') as f:
                    b = f.read()
                total += len(b)
                o.write(b)
        bc.fresh(outdir)
        got[name] = {'compressed_bytes': total, 'frames': count,
                     'cpu_s': ru.ru_utime + ru.ru_stime}
    return got


def frames_path(name, level):
    return os.path.join(WORK, '%s-l%d.zst' % (name, level))


def decoded_sha(frames):
    p = subprocess.Popen(['zstd', '-d', '-q', '-c', frames], stdout=subprocess.PIPE)
    h = hashlib.sha256()
    for b in iter(lambda: p.stdout.read(1 << 20), b''):
        h.update(b)
    if p.wait():
        raise RuntimeError('zstd -d %s failed' % frames)
    return h.hexdigest()


def zstd_b1(inputs, what):
    """zstd -b1 -B65536's compressed total and speeds (the cross-check)."""
    r = run(['zstd', '-b1', '-B65536', '-i1'] + inputs, 'zstd -b1 ' + what)
    # zstd -b redraws its line with \r (on stdout when that is not a
    # terminal); the last full one has both speeds
    ms = ZSTD_B_LINE.findall((r['out'] + '\n' + r['err']).replace('\r', '\n'))
    if not ms:
        raise RuntimeError('zstd -b1 %s: no result line' % what)
    src, dst, _, cs, ds = ms[-1]
    return {'input_bytes': int(src), 'compressed_bytes': int(dst),
            'compress_mb_s_wall': float(cs), 'decompress_mb_s_wall': float(ds)}


def peers(files, logical):
    tar_list = os.path.join(WORK, 'tar.names')
    with open(tar_list, 'w') as f:
        f.write(''.join(p + '\n' for p in files))
    run(['tar', 'cf', TAR, '-C', CORPUS, '--no-recursion', '-T', tar_list], 'tar')
    full = [os.path.join(CORPUS, p) for p in files]
    bc.log('   cutting the files and the tar into 64 KiB pieces ...')
    pieces = {'files': cut('files', full), 'tar': cut('tar', [TAR])}
    out = {'tar_bytes': os.path.getsize(TAR), 'sets': {}}
    for lv in LEVELS:
        bc.log('   zstd -%d of every piece ...' % lv)
        for name, g in compress_sets(pieces, lv).items():
            out['sets']['%s_l%d' % (name, lv)] = g
    for name, (_, count, sha) in pieces.items():
        for lv in LEVELS:
            if decoded_sha(frames_path(name, lv)) != sha:
                raise RuntimeError('%s: the frames do not decode to their source'
                                   % frames_path(name, lv))
    zlist = os.path.join(WORK, 'files.zstd-list')
    with open(zlist, 'w') as f:
        f.write(''.join(p + '\n' for p in full))
    chk = {'files': zstd_b1(['--filelist', zlist], 'per file'),
           'tar': zstd_b1([TAR], 'tar')}
    for name in SETS:
        chk[name]['matches'] = (chk[name]['compressed_bytes'] ==
                                out['sets']['%s_l1' % name]['compressed_bytes'])
        if not chk[name]['matches']:
            bc.log('   WARNING: %s, level 1: pieces compressed one by one %d bytes, '
                   'zstd -b1 -B65536 %d' % (name, out['sets']['%s_l1' % name]
                                            ['compressed_bytes'], chk[name]['compressed_bytes']))
    out['zstd_b_check'] = chk
    z = subprocess.run(['zstd', '-3', '--single-thread', '-c', '-q', TAR], capture_output=True)
    if z.returncode:
        raise RuntimeError('zstd -3: %s' % z.stderr[-500:])
    out['sets']['tar_whole_l3'] = {'compressed_bytes': len(z.stdout)}
    for name in SETS:
        bc.fresh(os.path.join(WORK, name))
    bc.fresh(TAR)
    for k, v in out['sets'].items():
        v['ratio'] = logical / v['compressed_bytes']
        if 'cpu_s' in v:
            v['cpu_s_per_gib_logical'] = v['cpu_s'] / (logical / GIB)
    return out


# --- the repeats ------------------------------------------------------------

def decode_sides():
    sides = {'coil_imported': [CLI, 'check', STORES['imported']],
             'coil_optimized': [CLI, 'check', STORES['optimized']]}
    for name in SETS:
        for lv in LEVELS:
            sides['zstd_%s_l%d' % (name, lv)] = ['zstd', '-d', '-q', '-c', '--no-asyncio',
                                                  frames_path(name, lv)]
    return sides


def one_repeat(r, logical):
    rep = {'load_start': loadavg()}
    for name, store in STORES.items():
        bc.fresh(store)
        run([CLI, 'create', store, SIZE], 'coil create')
        x = run([CLI, 'import', store, CORPUS], 'coil import')
        m = IMPORT_LINE.search(x['out'])
        if not m or int(m.group(2)) != logical:
            raise RuntimeError('coil import: %r, expected %d bytes from the walk'
                               % (x['out'].strip(), logical))
        rep['import_' + name] = {'wall_s': x['wall_s'], 'cpu_s': x['cpu_s'],
                                 'files': int(m.group(1)), 'skipped': x['err'].count('skipping')}
        rep['before_' + name] = space(store)
    st = STORES['optimized']
    x = run([CLI, 'optimize', st], 'coil optimize')
    m = OPT_LINE.search(x['out'])
    if not m:
        raise RuntimeError('coil optimize printed no report: %r' % x['out'])
    if 'more remains' in x['out']:
        raise RuntimeError('coil optimize stopped early: %r' % x['out'].strip())
    before = rep['before_optimized']
    dl = DICT_LINE.search(x['out'])
    rep['optimize'] = {'dicts': int(dl.group(1)) if dl else 0,
                       'dict_bytes': int(dl.group(2)) if dl else 0,
                       'wall_s': x['wall_s'], 'cpu_s': x['cpu_s'], 'user_s': x['user_s'],
                       'sys_s': x['sys_s'], 'nivcsw': x['nivcsw'],
                       'blobs': int(m.group(1)), 'rewritten': int(m.group(2)),
                       'saved_bytes': int(m.group(3)), 'no_gain': int(m.group(4)),
                       'overtaken': int(m.group(5)), 'failed_check': int(m.group(6)),
                       'cpu_s_per_gib_logical': x['cpu_s'] / (before['logical'] / GIB),
                       'cpu_s_per_gib_stored': x['cpu_s'] / (before['stored'] / GIB)}
    rep['after'] = space(st)
    # decode: every side twice, in one order and then the reverse
    sides = decode_sides()
    order = list(sides)
    order = order + order[::-1] if r % 2 == 0 else order[::-1] + order
    runs = {k: [] for k in sides}
    for side in order:
        x = run(sides[side], side, discard=side.startswith('zstd'))
        if side.startswith('coil'):
            m = CHECK_LINE.search(x['out'])
            if not m or int(m.group(2)) != logical:
                raise RuntimeError('coil check: %r' % x['out'].strip())
        runs[side].append({'wall_s': x['wall_s'], 'cpu_s': x['cpu_s']})
    rep['decode'] = {}
    for side, xs in runs.items():
        rep['decode'][side] = {'wall_s': sum(v['wall_s'] for v in xs) / len(xs),
                               'cpu_s': sum(v['cpu_s'] for v in xs) / len(xs), 'runs': xs}
    run([CLI, 'compact', st], 'coil compact')
    rep['du_after_compact'] = bc.du(st)
    rep['load_end'] = loadavg()
    return rep


def flatten(rep, logical, tar_bytes):
    b, a, o = rep['before_optimized'], rep['after'], rep['optimize']
    f = {'stored_before': b['stored'], 'stored_after': a['stored'],
         'allocated_before': b['allocated'], 'allocated_after': a['allocated'],
         'disk_before': b['disk_bytes'], 'disk_after': a['disk_bytes'],
         'du_before': b['du'], 'du_after': a['du'], 'du_after_compact': rep['du_after_compact'],
         'import_wall_s': rep['import_optimized']['wall_s'],
         'import_cpu_s': rep['import_optimized']['cpu_s'],
         'optimize_wall_s': o['wall_s'], 'optimize_cpu_s': o['cpu_s'],
         'optimize_nivcsw': o['nivcsw'],
         'optimize_cpu_s_per_gib_logical': o['cpu_s_per_gib_logical'],
         'optimize_cpu_s_per_gib_stored': o['cpu_s_per_gib_stored'],
         'saved_bytes': o['saved_bytes'], 'dicts': o['dicts'],
         'dict_bytes': o['dict_bytes'], 'load_start': rep['load_start'],
         'load_end': rep['load_end']}
    for side, d in rep['decode'].items():
        # a tar set decodes the tar (headers too): count what it produced
        n = tar_bytes if side.startswith('zstd_tar') else logical
        f[side + '_cpu_s'] = d['cpu_s']
        f[side + '_wall_s'] = d['wall_s']
        f[side + '_mb_per_cpu_s'] = n / MB / d['cpu_s']
    f['decode_coil_l19_vs_l1'] = bc.ratio(f['coil_optimized_mb_per_cpu_s'],
                                          f['coil_imported_mb_per_cpu_s'])
    for name in SETS:
        k = 'zstd_%s_l%d_mb_per_cpu_s' % (name, LEVEL)
        if k in f:
            f['decode_zstd_%s_l19_vs_l1' % name] = bc.ratio(
                f[k], f['zstd_%s_l1_mb_per_cpu_s' % name])
    return f


# --- the report -------------------------------------------------------------

def f_mib(n):
    return '%.2f' % (n / MIB)


def table(med, logical, pz):
    lines = ['| %.1f MiB of files (%s) | stored MiB | logical / stored | / coil imported '
             '| coil optimized / this |' % (logical / MIB, CORPUS),
             '|---|---:|---:|---:|---:|']

    def row(label, stored):
        lines.append('| %s | %s | %.2f | %.3f× | %.3f× |' % (
            label, f_mib(stored), logical / stored, stored / med['stored_before'],
            med['stored_after'] / stored))

    row('coil, imported (`coil import`: zstd -1)', med['stored_before'])
    row('coil, after `coil optimize` (zstd -19)', med['stored_after'])
    if pz:
        s = pz['sets']
        row('zstd -1, each file alone, 64 KiB blocks', s['files_l1']['compressed_bytes'])
        row('zstd -19, each file alone, 64 KiB blocks', s['files_l19']['compressed_bytes'])
        row('zstd -1, tar in 64 KiB blocks', s['tar_l1']['compressed_bytes'])
        row('zstd -19, tar in 64 KiB blocks', s['tar_l19']['compressed_bytes'])
        row('zstd -3, whole tar', s['tar_whole_l3']['compressed_bytes'])
    lines += ['', '| coil store | imported | optimized | optimized / imported |',
              '|---|---:|---:|---:|']
    for label, a, b in (('stored MiB', 'stored_before', 'stored_after'),
                        ('allocated MiB (segments)', 'allocated_before', 'allocated_after'),
                        ('on disk MiB (du of the file)', 'du_before', 'du_after')):
        lines.append('| %s | %s | %s | %.3f× |' % (label, f_mib(med[a]), f_mib(med[b]),
                                                   med[b] / med[a]))
    lines.append('| on disk MiB after `coil compact` | | %s | %.3f× |' % (
        f_mib(med['du_after_compact']), med['du_after_compact'] / med['du_before']))
    lines += ['', '| decode, MB per CPU second | level 1 | level 19 | 19 / 1 |',
              '|---|---:|---:|---:|',
              '| coil check (whole process, both checksums) | %.0f | %.0f | **%.2f×** |' % (
                  med['coil_imported_mb_per_cpu_s'], med['coil_optimized_mb_per_cpu_s'],
                  med['decode_coil_l19_vs_l1'])]
    if pz:
        for name, label in (('files', 'each file alone, 64 KiB'),
                            ('tar', 'tar in 64 KiB blocks')):
            lines.append('| zstd -d, %s | %.0f | %.0f | %.2f× |' % (
                label, med['zstd_%s_l1_mb_per_cpu_s' % name],
                med['zstd_%s_l19_mb_per_cpu_s' % name],
                med['decode_zstd_%s_l19_vs_l1' % name]))
    lines += ['', '| encode at level 19 | wall s | CPU s | CPU s per GiB of files |',
              '|---|---:|---:|---:|',
              '| coil optimize (read, encode, decode and compare, write) | %.1f | %.1f | %.0f |'
              % (med['optimize_wall_s'], med['optimize_cpu_s'],
                 med['optimize_cpu_s_per_gib_logical'])]
    if pz:
        s = pz['sets']['files_l19']
        lines.append('| zstd -19, each file alone, 64 KiB (one run) | | %.1f | %.0f |'
                     % (s['cpu_s'], s['cpu_s_per_gib_logical']))
    return lines


def main():
    if not os.access(CLI, os.X_OK):
        sys.exit('bench_optimize: %s missing: build first (tools/dev.sh build)' % CLI)
    if not shutil.which('zstd') or not shutil.which('tar'):
        sys.exit('bench_optimize: the zstd and tar commands are needed (apt-get install zstd)')
    if not os.path.isdir(CORPUS):
        sys.exit('bench_optimize: %s is not a folder' % CORPUS)
    os.chdir(bc.ROOT)
    bc.fresh(WORK)
    os.makedirs(WORK)
    files, logical = corpus_files()
    if any('\n' in p for p in files):
        sys.exit('bench_optimize: a file name under %s holds a newline' % CORPUS)
    bc.log('== the optimizer: %s (%d regular files, %.1f MiB), coil import then coil '
           'optimize (level %d) vs zstd per 64 KiB block, %d repeats'
           % (CORPUS, len(files), logical / MIB, LEVEL, bc.REPEATS))
    t0 = time.monotonic()
    pz = peers(files, logical)
    reps = []
    for r in range(bc.REPEATS):
        rep = one_repeat(r, logical)
        rep['flat'] = f = flatten(rep, logical, pz['tar_bytes'])
        reps.append(rep)
        bc.log('   rep %d  stored %s -> %s MiB (%.3fx)  optimize %.1f s wall, %.1f s CPU '
               '(%.0f CPU s/GiB)  decode MB/CPU-s coil %.0f -> %.0f (%.2fx), zstd 64K '
               'files %.0f -> %.0f, tar %.0f -> %.0f  du %s -> %s MiB  load %.1f-%.1f'
               % (r + 1, f_mib(f['stored_before']), f_mib(f['stored_after']),
                  f['stored_after'] / f['stored_before'], f['optimize_wall_s'],
                  f['optimize_cpu_s'], f['optimize_cpu_s_per_gib_logical'],
                  f['coil_imported_mb_per_cpu_s'], f['coil_optimized_mb_per_cpu_s'],
                  f['decode_coil_l19_vs_l1'], f['zstd_files_l1_mb_per_cpu_s'],
                  f['zstd_files_l19_mb_per_cpu_s'], f['zstd_tar_l1_mb_per_cpu_s'],
                  f['zstd_tar_l19_mb_per_cpu_s'], f_mib(f['du_before']),
                  f_mib(f['du_after']), rep['load_start'], rep['load_end']))
    med = {k: bc.median([x['flat'][k] for x in reps]) for k in reps[0]['flat']}
    s = pz['sets']
    ratios = {'ratio_imported': logical / med['stored_before'],
              'ratio_optimized': logical / med['stored_after'],
              'optimized_vs_imported': med['stored_after'] / med['stored_before'],
              'decode_coil_l19_vs_l1': med['decode_coil_l19_vs_l1']}
    for k, v in s.items():
        ratios['optimized_vs_' + k] = med['stored_after'] / v['compressed_bytes']
    ratios['imported_vs_files_l1'] = med['stored_before'] / s['files_l1']['compressed_bytes']
    targets = {
        'stored after / before <= 0.7': bc.verdict(ratios['optimized_vs_imported'], 0.7,
                                                   False),
        'stored after < zstd -19 per 64 KiB block of the tar':
            bc.verdict(ratios['optimized_vs_tar_l19'], 1.0 - 1e-9, False)}
    doc = {'comparison': 'optimize_corpus', 'corpus': CORPUS, 'files': len(files),
           'logical_bytes': logical, 'store_size': SIZE, 'level': LEVEL,
           'cli': os.path.relpath(CLI, bc.ROOT), 'runs': reps, 'median': med,
           'peers': pz, 'ratios': ratios, 'targets': targets,
           'bench_seconds': time.monotonic() - t0}
    bc.save('optimize_corpus', doc)
    if not KEEP:
        bc.fresh(WORK)
    print()
    print('\n'.join(table(med, logical, pz)))
    print()
    print('%.1f MiB in %d regular files (%.1f MiB stored after import); the tar is %.1f MiB '
          'with its headers.  coil optimize: %d dictionaries (%d bytes), %d blobs encoded '
          'again, %d written smaller.  '
          'Medians of %d repeats (load average %.1f-%.1f); peers\' sizes from one run.  '
          'Targets: %s.'
          % (logical / MIB, len(files), med['stored_before'] / MIB, pz['tar_bytes'] / MIB,
             reps[-1]['optimize']['dicts'], reps[-1]['optimize']['dict_bytes'],
             reps[-1]['optimize']['blobs'], reps[-1]['optimize']['rewritten'], bc.REPEATS,
             min(x['load_start'] for x in reps), max(x['load_end'] for x in reps),
             '; '.join('%s: %s' % kv for kv in targets.items())))


if __name__ == '__main__':
    main()
