#!/usr/bin/env python3
"""Metadata scale: how coil's metadata costs grow with the number of objects
and of blobs (perf/bench_meta.c is the driver; tools/dev.sh bench-meta runs
this).  Not a side-by-side comparison: one series per mode, one fresh store
per size, deleted after its run.

  objects N   N objects of 100 bytes each (create + coil_pwrite, QD1), sync
  blobs M     one object, M writes of 4 KiB at i * 64 KiB in a shuffled
              order (each its own extent), sync
  blobs64 M   the same with writes of 64 KiB (back to back, each its own
              blob and extent): metadata bytes per data byte of a store of
              large objects

Per size: load ops/s, checkpoint bytes written during the load per op,
device bytes written per op (the store's io.device_bytes_written), RSS
growth per object (or blob) over the store's fixed memory, coil_open time of
the closed store in a fresh process (recovery), the metadata payload a
checkpoint of the final state holds.  Between consecutive sizes the growth
exponent log(metric ratio) / log(size ratio): 0 is flat per op; 1 for
checkpoint bytes per op means the total checkpoint bytes grow with the
square of the size.

Knobs:
  BENCH_META_SIZES   object counts (default 1e4,1e5,1e6; "10^3", "1e3" and
                     "1000" all work; empty or "none" skips the series)
  BENCH_META_BLOBS   blob counts (default 1e5,1e6)
  BENCH_META_BLOBS64 64 KiB blob counts (default 1e4,1e5: 6.4 GB of data)
  BENCH_META_REPEATS runs per size (default 1; the table shows medians)
  BENCH_META_DIR     where the scratch stores go (default var/meta)
  BENCH_META_BIN     the driver (default $BUILD/perf/bench_meta)
  BUILD              build directory (default build/release)
Quick: BENCH_META_SIZES=1e3,1e4 BENCH_META_BLOBS=1e4.
Results: perf/results/bench_meta.json (every run's raw driver output).
"""
import json
import math
import os
import subprocess
import sys
import time

import bench_common as bc


def sizes(var, default):
    text = os.environ.get(var, default).strip()
    if text.lower() in ('', 'none', '0'):
        return []
    out = []
    for tok in text.replace(' ', ',').split(','):
        if not tok:
            continue
        try:
            if '^' in tok:
                b, e = tok.split('^')
                v = int(b) ** int(e)
            else:
                v = int(float(tok))
        except ValueError:
            sys.exit('bench_meta: %s: bad size %r' % (var, tok))
        if v <= 0:
            sys.exit('bench_meta: %s: bad size %r' % (var, tok))
        out.append(v)
    return out


OBJECTS = sizes('BENCH_META_SIZES', '1e4,1e5,1e6')
BLOBS = sizes('BENCH_META_BLOBS', '1e5,1e6')
BLOBS64 = sizes('BENCH_META_BLOBS64', '1e4,1e5')
REPEATS = max(1, int(os.environ.get('BENCH_META_REPEATS', '1')))
DIR = os.path.abspath(os.path.join(bc.ROOT, os.environ.get('BENCH_META_DIR', 'var/meta')))
BIN = os.path.abspath(os.path.join(bc.ROOT, os.environ.get(
    'BENCH_META_BIN', os.path.join(bc.BUILD, 'perf', 'bench_meta'))))

# The table's columns: (heading, key, format).
COLUMNS = [('ops/s', 'ops_s', '%.0f'),
           ('ckpts', 'ckpts', '%d'),
           ('ckpt B/op', 'ckpt_bytes_per_op', '%.1f'),
           ('dev B written/op', 'dev_write_bytes_per_op', '%.0f'),
           ('RSS B/obj', 'rss_per_obj', '%.0f'),
           ('meta mem B/obj', 'meta_mem_per_obj', '%.0f'),
           ('open s', 'open_s', '%.3f'),
           ('open s after kill', 'replay_open_s', '%.3f'),
           ('replayed KiB', 'replayed_kib', '%.0f'),
           ('replay s/GiB', 'replay_s_per_gib', '%.1f'),
           ('tail read KiB', 'tail_read_kib', '%.0f'),
           ('meta bytes', 'meta_bytes', '%d'),
           ('meta % of data', 'meta_pct', '%.3f'),
           ('run s', 'wall_s', '%.1f')]
# After each run: a tenth more objects (or a tenth of the blobs written
# again), synced, then _exit without a close, and the open after it
# (journal replay on top of the checkpoint).
KILL_ONLY = ()
GROWTH = [('ckpt B/op', 'ckpt_bytes_per_op'), ('ops/s', 'ops_s')]
# What each object (blob) adds between a row and the one above.  Memory
# the store takes once, on first use after its creation (buffers of the
# ring's and the packer's threads, ~3 MB), and a whole checkpoint's
# snapshot when one is running as the load ends (~5 MB at 10^4 objects,
# given back when it ends), weigh on the smallest row's RSS B/obj alone.
MARGINAL = [('RSS B/obj added', 'rss_load')]


def run_one(mode, n):
    store = os.path.join(DIR, '%s-%d.coil' % (mode, n))
    bc.fresh(store)
    t0 = time.monotonic()
    try:
        p = subprocess.run([BIN, mode, store, str(n)], capture_output=True, text=True)
    finally:
        bc.fresh(store)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise RuntimeError('%s %s %d failed (exit %d)' % (BIN, mode, n, p.returncode))
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    doc['wall_s'] = wall
    doc['replayed_kib'] = doc.get('replayed_bytes', 0) / 1024.0
    doc['tail_read_kib'] = doc.get('replay_tail_read_bytes', 0) / 1024.0
    doc['rss_load'] = doc['rss_bytes'] - doc['rss_before_open'] - doc['rss_fixed']
    # the checkpoint's metadata over the objects' logical bytes
    doc['meta_pct'] = (100.0 * doc['meta_bytes'] / doc['logical_bytes']
                       if doc.get('logical_bytes') else None)
    return doc


def exponent(a, b, na, nb):
    if a is None or b is None or a <= 0 or b <= 0 or na == nb:
        return None
    return math.log(b / a) / math.log(nb / na)


def table(mode, rows):
    """rows: [(n, median dict)] in size order -> markdown lines."""
    unit = {'objects': 'objects', 'blobs64': 'blobs of 64 KiB'}.get(mode, 'blobs')
    cols = [c for c in COLUMNS if mode == 'objects' or c[1] not in KILL_ONLY]
    head = [unit] + [c[0] for c in cols] + [g[0] for g in MARGINAL] + \
        ['exp %s' % g[0] for g in GROWTH]
    lines = ['| ' + ' | '.join(head) + ' |',
             '|' + '|'.join(['---'] + ['---:'] * (len(head) - 1)) + '|']
    prev = None
    for n, m in rows:
        cells = ['%d' % n]
        for _, key, fmt in cols:
            v = m.get(key)
            cells.append(fmt % v if v is not None else '-')
        for _, key in MARGINAL:
            v = (m.get(key) - prev[1].get(key)) / (n - prev[0]) if prev else None
            cells.append('%.0f' % v if v is not None else '-')
        for _, key in GROWTH:
            e = exponent(prev[1].get(key), m.get(key), prev[0], n) if prev else None
            cells.append('%+.2f' % e if e is not None else '-')
        lines.append('| ' + ' | '.join(cells) + ' |')
        prev = (n, m)
    return lines


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit('bench_meta: %s missing: build it (ninja -C %s perf/bench_meta) or set '
                 'BENCH_META_BIN' % (BIN, os.path.relpath(bc.BUILD, bc.ROOT)))
    os.makedirs(DIR, exist_ok=True)
    series = [('objects', OBJECTS), ('blobs', BLOBS), ('blobs64', BLOBS64)]
    bc.log('== metadata scale: objects %s, blobs %s, blobs64 %s, %d run(s) each (%s)'
           % (OBJECTS or '-', BLOBS or '-', BLOBS64 or '-', REPEATS,
              os.path.relpath(BIN, bc.ROOT)))
    runs, failed, tables = [], [], []
    keys = [c[1] for c in COLUMNS] + [g[1] for g in MARGINAL]
    for mode, ns in series:
        rows = []
        for n in ns:
            got = []
            for r in range(REPEATS):
                try:
                    d = run_one(mode, n)
                except (RuntimeError, ValueError) as e:
                    bc.log('   %s %d: FAILED: %s' % (mode, n, e))
                    failed.append('%s %d' % (mode, n))
                    break
                runs.append(d)
                got.append(d)
                bc.log('   %-7s %9d  %7.0f ops/s  ckpts %3d  ckpt %7.1f B/op  journal %6.0f B/op'
                       '  dev %6.0f B/op  rss %5.0f B/op  open %.3f s  (%.1f s)'
                       % (mode, n, d['ops_s'], d['ckpts'], d['ckpt_bytes_per_op'],
                          d.get('journal_bytes_per_op', 0), d['dev_write_bytes_per_op'],
                          d['rss_per_obj'], d['open_s'], d['wall_s']))
            if len(got) == REPEATS:
                rows.append((n, {k: bc.median([g[k] for g in got]) for k in keys}))
        if rows:
            tables.append((mode, rows))
    try:
        os.rmdir(DIR)  # only when empty: someone else's files stay
    except OSError:
        pass
    doc = {'comparison': 'meta_scale', 'objects': OBJECTS, 'blobs': BLOBS,
           'blobs64': BLOBS64,
           'driver': os.path.relpath(BIN, bc.ROOT), 'runs': runs, 'failed': failed,
           'tables': {mode: [dict(m, n=n) for n, m in rows] for mode, rows in tables}}
    bc.REPEATS = REPEATS  # what bc.save records
    bc.save('bench_meta', doc)
    for mode, rows in tables:
        print()
        print('\n'.join(table(mode, rows)))
    print()
    print('exp = log(metric ratio) / log(size ratio) from the row above; 0 = flat '
          'per op, +1 on ckpt B/op = total checkpoint bytes grow with size^2.')
    print('dev B written/op: the store\'s io.device_bytes_written over the load '
          '(the create excluded); RSS B/obj: VmRSS growth over the load / size; '
          'RSS B/obj added: that growth less the row above\'s, over the objects '
          'between them; '
          'meta mem B/obj: the growth of stats metadata_memory.bytes (objects, '
          'names, tables, extent maps, blob descriptors as asked of the '
          'allocator) / size.')
    print('open s after kill: a tenth more objects (blobs: a tenth of them '
          'written again) written and synced, the process gone without a close, then the open (checkpoint load and the journal '
          'replay of "replayed KiB"); replay s/GiB: the replay\'s own time '
          '(stats journal.replay_ns) per GiB replayed; tail read KiB: the data '
          'of the records no later chunk showed flushed, read back to verify '
          'them (stats journal.replay_read_bytes).')
    if failed:
        sys.exit('bench_meta: failed: ' + ', '.join(failed))


if __name__ == '__main__':
    main()
