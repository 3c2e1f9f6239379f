#!/usr/bin/env python3
"""demo_report.py DIR FIO_OK DISK_OK CHECK_LINE NCPU — the demo's report.

Reads what perf/demo.sh left in DIR (load.json from demo_load, disk.json
and fio.json from fio, latency.tsv) and prints each coil figure next to its
baseline from the same run, a one-line verdict, and DIR/demo.png.

One ratio convention everywhere: stored / logical (lower is better), with
"N.Nx smaller" beside it.  Throughputs are logical MiB/s: the bytes the
program asked to write or read, whatever coil put on the disk.
"""
import json
import os
import re
import shutil
import subprocess
import sys

MIB = 1048576.0
QD = 32                 # demo_load's requests in flight
CHUNK = 1 << 20         # demo_load's largest request

d, fio_ok, disk_ok, check_line, ncpu = sys.argv[1], sys.argv[2] == '1', \
    sys.argv[3] == '1', sys.argv[4], int(sys.argv[5])
load = json.load(open(os.path.join(d, 'load.json')))
st_load, st_read = load['stats_after_load'], load['stats_after_read']
za = load['zstd_alone']
tarc = load['tar']


def ratio(stored, logical):
    r = stored / logical if logical else 0
    return '%.2f (%.1fx smaller)' % (r, 1 / r) if r else 'n/a'


def mibs(b, s):
    return b / MIB / s if s else 0.0


def fio_job(fj, name, ddir):
    for j in fj['jobs']:
        if j['jobname'] == name and j[ddir]['io_bytes']:
            s = j[ddir]
            pct = s['clat_ns'].get('percentile', {})
            return {'mibs': s['bw_bytes'] / MIB, 'iops': s['iops'],
                    'p50': pct.get('50.000000', 0) / 1e3,
                    'p99': pct.get('99.000000', 0) / 1e3, 'error': j.get('error', 0)}
    return None


w, r = load['write'], load['read']
logical = load['logical_bytes']
space = st_load['space']
stored, alloc = space['stored'], space['allocated']
dev_w = st_load['io']['device_bytes_written']
dev_r = st_read['io']['device_bytes_read']
z_c = mibs(za['logical_bytes'], za['compress_seconds'])
z_d = mibs(za['logical_bytes'], za['decompress_seconds'])
disk = json.load(open(os.path.join(d, 'disk.json'))) if disk_ok else None
dw = fio_job(disk, 'write', 'write') if disk else None
dr = fio_job(disk, 'read', 'read') if disk else None
drr = fio_job(disk, 'randread', 'read') if disk else None

# --- counts ------------------------------------------------------------------
check_objs = None
m = re.search(r'(\d+) objects', check_line or '')
if m:
    check_objs = int(m.group(1))
entries = tarc['regular_loaded'] + tarc['empty_skipped'] + tarc['links_skipped'] + \
    tarc['other_skipped']
print('Corpus')
print('  %d tar entries that are not folders: %d regular files loaded as objects,'
      % (entries, tarc['regular_loaded']))
print('  %d links and %d empty files skipped (nothing to store)%s'
      % (tarc['links_skipped'], tarc['empty_skipped'],
         ', %d other entries skipped' % tarc['other_skipped'] if tarc['other_skipped'] else ''))
print('  + big/corpus.tar (the whole tar again) + big/random.bin (32 MiB of random bytes)')
line = '  = %d objects written, %.1f MiB logical' % (load['objects'], logical / MIB)
if check_objs is not None:
    extra = check_objs - load['objects']
    line += '; coil check counted %d' % check_objs
    if extra == 1 and fio_ok:
        line += ' (+1: fio\'s object fio/demo-object)'
    elif extra:
        line += ' (%+d unexplained)' % extra
print(line)

# --- space -------------------------------------------------------------------
print()
print('Space (stored/logical, lower is better; same objects, 64 KiB blobs, zstd -1)')
print('  zstd alone       %8.1f MiB   %s   %d of %d blobs kept raw'
      % (za['stored_bytes'] / MIB, ratio(za['stored_bytes'], za['logical_bytes']),
         za['raw_blobs'], za['blobs']))
print('  coil, stored     %8.1f MiB   %s   %d of %d blobs kept raw'
      % (stored / MIB, ratio(stored, logical), st_load['compression']['blobs_raw'],
         st_load['compression']['blobs_raw'] + st_load['compression']['blobs_zstd']))
print('  coil, allocated  %8.1f MiB   %s   blobs packed into 4 KiB-aligned batches'
      % (alloc / MIB, ratio(alloc, logical)))
print('  device bytes written %.1f MiB (data, journal, checkpoint) = %.2f of logical'
      % (dev_w / MIB, dev_w / logical))

# --- throughput --------------------------------------------------------------
# Two parts with different ceilings.  Small files cost a request each, so
# their baseline is the disk's 4 KiB request rate at a similar depth.  The
# big objects stream in 1 MiB requests: coil could reach either the disk's
# sequential rate over the bytes coil actually moved, or zstd on every core,
# whichever is lower.
def part(ph):
    big_b = ph['bytes'] - ph['small_bytes']
    big_s = ph['seconds'] - ph['small_seconds']
    return ph['small_files'] / ph['small_seconds'], mibs(ph['small_bytes'], ph['small_seconds']), \
        mibs(big_b, big_s)


w_req, w_small, w_big = part(w)
r_req, r_small, r_big = part(r)
drw = fio_job(disk, 'randwrite', 'write') if disk else None
print()
print('Small files (%d, one request each, %d in flight)     write      read'
      % (w['small_files'], QD))
print('  coil, requests/s                               %8.0f  %8.0f' % (w_req, r_req))
if drw and drr:
    print('  disk alone, 4 KiB random requests/s (QD16)     %8.0f  %8.0f'
          % (drw['iops'], drr['iops']))
print('  coil, logical MiB/s                            %8.1f  %8.1f' % (w_small, r_small))
ceil_w = z_c * ncpu
ceil_r = z_d * ncpu
if dw and dr:
    ceil_w = min(ceil_w, dw['mibs'] * logical / dev_w)
    if dev_r:
        ceil_r = min(ceil_r, dr['mibs'] * logical / dev_r)
print()
print('Big objects (1 MiB requests), logical MiB/s         write      read')
if dw and dr:
    print('  disk alone (1 MiB, QD32, raw bytes)            %8.1f  %8.1f' % (dw['mibs'], dr['mibs']))
print('  zstd alone, one core                           %8.1f  %8.1f' % (z_c, z_d))
print('  ceiling for coil: the lower of disk x logical/ %8.1f  %8.1f'
      % (ceil_w, ceil_r))
print('    device bytes, and zstd x %d cores' % ncpu)
print('  coil                                           %8.1f  %8.1f   = %.0f %% / %.0f %% of it'
      % (w_big, r_big, 100 * w_big / ceil_w, 100 * r_big / ceil_r))
print('  (reads start cold: the store is reopened first; %s)'
      % ('every byte matched the source' if r['verified'] else 'BYTES DID NOT MATCH'))

# --- latency -----------------------------------------------------------------
print()
print('Loader latency, microseconds          p50        p99        max')
for key, what in (('latency_small', 'under 1 MiB'), ('latency_1mib', '1 MiB pieces')):
    for name, ph in (('write', w), ('read', r)):
        l = ph[key]
        print('  %-5s %-13s (%5d reqs) %9.0f  %9.0f  %9.0f'
              % (name, what, l['ops'], l['p50_us'], l['p99_us'], l['max_us']))
print('  The big objects\' 1 MiB pieces queue %d deep: %d MiB in flight at the %.0f MiB/s'
      % (QD, QD, r_big))
print('  the read reached makes ~%.0f ms each by Little\'s law (measured p50: %.0f ms). The'
      % (QD * CHUNK / MIB / r_big * 1e3, r['latency_1mib']['p50_us'] / 1e3))
print('  tail of a p99 over all requests is these deep queues, not a stall.')

# --- fio -----------------------------------------------------------------------
fr = None
if fio_ok:
    fj = json.load(open(os.path.join(d, 'fio.json')))
    fw = fio_job(fj, 'write-and-verify', 'write')
    fv = fio_job(fj, 'write-and-verify', 'read')
    fr = fio_job(fj, 'random-read', 'read')
    print()
    print('fio (perf/fio/demo.fio)                 MiB/s       IOPS   p99 us')
    if fw:
        print('  coil, 128 KiB writes, QD16        %8.1f  %9.0f  %7.0f' % (fw['mibs'], fw['iops'], fw['p99']))
    if fv:
        print('  coil, read back + crc32c verify   %8.1f  %9.0f  %7.0f' % (fv['mibs'], fv['iops'], fv['p99']))
    if fr:
        print('  coil, 4 KiB random reads, QD16    %8.1f  %9.0f  %7.0f' % (fr['mibs'], fr['iops'], fr['p99']))
    if drr:
        print('  disk alone, 4 KiB random, QD16    %8.1f  %9.0f  %7.0f' % (drr['mibs'], drr['iops'], drr['p99']))
    errs = sum(j.get('error', 0) for j in fj['jobs'])
    print('  verify: %s' % ('every block checked out' if not errs else 'FAILED (error %d)' % errs))
    p = os.path.join(d, 'fio-stats.json')
    if os.path.exists(p):
        c = json.load(open(p))

        def find(o, k):
            if isinstance(o, dict):
                if k in o and isinstance(o[k], dict):
                    return o[k]
                for v in o.values():
                    x = find(v, k)
                    if x:
                        return x
            return {}
        cache = find(c, 'cache')
        h, mm = cache.get('hits', 0), cache.get('misses', 0)
        if h + mm:
            print('  %.0f %% of coil\'s blob lookups hit its decoded-blob cache (%d of %d): the'
                  % (100.0 * h / (h + mm), h, h + mm))
            print('  128 MiB object is 64 MiB stored, the cache holds 64 MiB decoded')

# --- verdict -----------------------------------------------------------------
short = []
if not r['verified']:
    short.append('read-back did not match')
if check_objs is None or 'bad' in check_line and not re.search(r'\b0 bad', check_line):
    short.append('coil check did not pass')
if stored > za['stored_bytes'] * 1.05:
    short.append('stored %.0f %% more than zstd alone' % (100.0 * stored / za['stored_bytes'] - 100))
for name, v, c in (('big-object write', w_big, ceil_w), ('big-object read', r_big, ceil_r)):
    if v < 0.5 * c:
        short.append('%s at %.0f %% of its ceiling' % (name, 100 * v / c))
for name, v, dj in (('small-file write', w_req, drw), ('small-file read', r_req, drr)):
    if dj and v < 0.5 * dj['iops']:
        short.append('%s at %.0f %% of the disk\'s request rate' % (name, 100 * v / dj['iops']))
if fr and drr and fr['iops'] < 0.5 * drr['iops']:
    short.append('random reads at %.0f %% of the disk\'s IOPS' % (100 * fr['iops'] / drr['iops']))
print()
if short:
    print('Verdict: coil fell short here: %s.' % '; '.join(short))
else:
    print('Verdict: coil did well: every byte verified, space within 5 %% of zstd alone, '
          'big objects at %.0f %% (write) and %.0f %% (read) of what disk and zstd allow, '
          'small files at least half the disk\'s request rate.'
          % (100 * w_big / ceil_w, 100 * r_big / ceil_r))

# --- plot --------------------------------------------------------------------
png = os.path.join(d, 'demo.png')
if shutil.which('gnuplot'):
    bars = os.path.join(d, 'plot-bars.dat')
    with open(bars, 'w') as f:
        f.write('what write read\n')
        if dw and dr:
            f.write('"disk alone" %.1f %.1f\n' % (dw['mibs'], dr['mibs']))
        f.write('"zstd x %d cores" %.1f %.1f\n' % (ncpu, z_c * ncpu, z_d * ncpu))
        f.write('"coil (big objects)" %.1f %.1f\n' % (w_big, r_big))
        f.write('"coil (small files)" %.1f %.1f\n' % (w_small, r_small))
    lat = {}
    for ln in open(os.path.join(d, 'latency.tsv')):
        ph, size, us = ln.split('\t')
        key = '%s %s' % (ph, '1 MiB' if int(size) >= CHUNK else 'small')
        lat.setdefault(key, []).append(float(us))
    cdfs = []
    for key in sorted(lat):
        v = sorted(lat[key])
        path = os.path.join(d, 'plot-cdf-%s.dat' % key.replace(' ', '-'))
        with open(path, 'w') as f:
            step = max(1, len(v) // 500)
            for i in range(0, len(v), step):
                f.write('%.1f %.4f\n' % (v[i], (i + 1) / len(v)))
            f.write('%.1f 1.0\n' % v[-1])
        cdfs.append((key, path))
    gp = ['set terminal pngcairo size 1200,480 font ",10"', 'set output "%s"' % png,
          'set multiplot layout 1,2 title "coil demo: %.0f MiB of /usr/include, %d objects"'
          % (logical / MIB, load['objects']),
          'set title "throughput, logical MiB/s (disk: raw bytes)"', 'set style data histograms',
          'set style histogram clustered gap 1', 'set style fill solid 0.8 border -1',
          'set key top left', 'set yrange [0:*]', 'set grid ytics',
          'plot "%s" using 2:xtic(1) title columnheader(2), "" using 3 title columnheader(3)' % bars,
          'set title "loader request latency (QD32)"', 'set logscale x', 'set xlabel "microseconds"',
          'set ylabel "fraction of requests"', 'set key top left', 'set style data lines',
          'set yrange [0:1]', 'unset xtics', 'set xtics', 'set grid xtics ytics',
          'plot ' + ', '.join('"%s" using 1:2 with lines lw 2 title "%s"' % (p, k) for k, p in cdfs),
          'unset multiplot']
    try:
        subprocess.run(['gnuplot'], input='\n'.join(gp).encode(), check=True,
                       stderr=subprocess.PIPE)
        print('Plot: %s (left: throughput next to its baselines; right: latency by request size)' % png)
    except subprocess.CalledProcessError as e:
        print('Plot: gnuplot failed: %s' % e.stderr.decode(errors='replace').strip())
else:
    print('Plot: skipped, gnuplot is missing (tools/dev.sh deps installs it)')
