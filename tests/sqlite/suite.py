#!/usr/bin/env python3
"""Run files of SQLite's own TCL test suite on the default VFS and on coil's,
side by side (tools/dev.sh sqlite-suite).

Each test file runs in a directory of its own, once per VFS, through the
same `testfixture` (built with tests/sqlite/suite_init.c as
SQLITE_EXTRA_INIT): with COIL_SUITE_EXT set, that hook loads
libcoil_sqlite.so and makes "coil" the default VFS, with a fresh store in
the file's directory.

A failure on coil that the default VFS does not have is accepted only when
tests/sqlite/suite_known.txt lists it (file, case-id pattern, reason); any
other failure, a crash, or a file that does not finish within its timeout
fails the run.  Prints a table and writes it as Markdown to OUT/table.md.
"""
import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
PRELUDE = os.path.join(HERE, 'suite_prelude.tcl')
SUMMARY = re.compile(r'^(\d+) errors out of (\d+) tests', re.M)
FAILED_CASE = re.compile(r'^! (\S+) expected:', re.M)
REFUSED = re.compile(r'testfixture: database is locked$', re.M)
FAILURES_LINE = re.compile(r'^!?Failures on these tests: (.*)$', re.M)


def load_known(path):
    """suite_known.txt: `file  case-pattern  reason...` per line.  The
    reason's first word is its class (host-fs, unix-internals,
    two-processes, ...)."""
    known = []
    if not os.path.exists(path):
        return known
    for line in open(path):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            sys.exit(f'{path}: bad line: {line}')
        known.append((parts[0], parts[1], parts[2]))
    return known


def known_reason(known, tfile, case):
    for f, pat, reason in known:
        if f == tfile and fnmatch.fnmatchcase(case, pat):
            return reason
    return None


def run_one(args, tfile, vfs):
    work = os.path.join(args.out, vfs, tfile)
    saved = os.path.join(work, 'result.json')
    if args.reuse and os.path.exists(saved):
        r = json.load(open(saved))
        return parse(r['file'], r['vfs'], r['status'], r['rc'], r['secs'],
                     os.path.join(work, 'log.txt'))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ)
    env.pop('COIL_SUITE_EXT', None)
    env.pop('COIL_STORE', None)
    if vfs == 'coil':
        env['COIL_SUITE_EXT'] = args.ext
        env['COIL_STORE'] = os.path.join(work, 'store.coil')
        env.setdefault('COIL_STORE_SIZE', '256M')
        # A child the script starts while it keeps the database open is
        # refused (one process per store) after this wait; a store whose
        # owner exited is free at once.
        env.setdefault('COIL_SQLITE_BUSY_WAIT_MS', '250')
    script = os.path.join(args.srcdir, 'test', tfile + '.test')
    log = os.path.join(work, 'log.txt')
    t0 = time.monotonic()
    status = 'ok'
    with open(log, 'wb') as out:
        p = subprocess.Popen([args.testfixture, PRELUDE, script], cwd=work, env=env,
                             stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
            status = 'timeout'
    secs = time.monotonic() - t0
    with open(saved, 'w') as out:
        json.dump({'file': tfile, 'vfs': vfs, 'status': status, 'rc': rc,
                   'secs': secs}, out)
    return parse(tfile, vfs, status, rc, secs, log)


def parse(tfile, vfs, status, rc, secs, log):
    text = open(log, errors='replace').read()
    m = None
    for m in SUMMARY.finditer(text):
        pass
    errors = tests = None
    if m:
        errors, tests = int(m.group(1)), int(m.group(2))
    elif status == 'ok':
        status = 'crash' if rc is not None and rc < 0 else 'aborted'
    failed = set(FAILED_CASE.findall(text))
    fl = FAILURES_LINE.search(text)
    if fl:
        failed.update(fl.group(1).split())
    if status == 'ok' and rc is not None and rc < 0:
        status = 'crash'
    # A child process (crashsql) refused because this script still holds
    # the store: its case may pass without having tested anything.
    refused = len(REFUSED.findall(text))
    return {'file': tfile, 'vfs': vfs, 'status': status, 'rc': rc,
            'errors': errors, 'tests': tests, 'failed': failed,
            'secs': secs, 'log': log, 'refused': refused}


def cell(r):
    if r['status'] == 'timeout':
        return f"timeout ({r['secs']:.0f} s)"
    if r['errors'] is None:
        return f"{r['status']} (rc {r['rc']})"
    return f"{r['errors']}/{r['tests']}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--testfixture', required=True)
    ap.add_argument('--ext', required=True, help='libcoil_sqlite.so')
    ap.add_argument('--srcdir', required=True, help='SQLite source tree')
    ap.add_argument('--out', required=True)
    ap.add_argument('--timeout', type=float, default=300)
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--known', default=os.path.join(HERE, 'suite_known.txt'))
    ap.add_argument('--vfs', default='default,coil')
    ap.add_argument('--reuse', action='store_true',
                    help='report from the results already in OUT, run '
                         'only what is missing')
    ap.add_argument('files', nargs='+', help='test file names, no .test')
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    args.ext = os.path.abspath(args.ext)
    args.testfixture = os.path.abspath(args.testfixture)
    args.srcdir = os.path.abspath(args.srcdir)
    known = load_known(args.known)
    vfses = args.vfs.split(',')

    jobs = [(f, v) for f in args.files for v in vfses]
    results = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        futs = {ex.submit(run_one, args, f, v): (f, v) for f, v in jobs}
        for fut in futs:
            r = fut.result()
            results[(r['file'], r['vfs'])] = r
            print(f"  {r['file']:<16} {r['vfs']:<8} {cell(r):<18} "
                  f"{r['secs']:6.1f} s", flush=True)

    bad = 0
    rows = []
    for f in args.files:
        d = results.get((f, 'default'))
        c = results.get((f, 'coil'))
        notes = []
        if c is not None:
            base = d['failed'] if d else set()
            extra = sorted(c['failed'] - base)
            by_reason = {}
            for case in extra:
                reason = known_reason(known, f, case)
                if reason is None:
                    bad += 1
                    by_reason.setdefault('UNEXPECTED', []).append(case)
                else:
                    by_reason.setdefault(reason, []).append(case)
            if c['status'] != 'ok':
                reason = known_reason(known, f, '<' + c['status'] + '>')
                if reason is None:
                    bad += 1
                    notes.append(f"UNEXPECTED {c['status']}")
                else:
                    notes.append(f"{c['status']}: {reason}")
            elif c['errors'] and not extra and c['errors'] > len(c['failed']):
                # errors counted without a case id (tester's own checks)
                if c['errors'] > (d['errors'] or 0 if d else 0):
                    bad += 1
                    notes.append('UNEXPECTED errors without case ids')
            for reason, cases in by_reason.items():
                shown = ' '.join(cases[:8]) + (' …' if len(cases) > 8 else '')
                notes.append(f'{len(cases)} × {reason}: {shown}')
        if c is not None and c['refused']:
            notes.append(f"{c['refused']} child opens refused (two processes)")
        rows.append((f, cell(d) if d else '-',
                     f"{d['secs']:.0f}" if d else '-',
                     cell(c) if c else '-',
                     f"{c['secs']:.0f}" if c else '-',
                     '; '.join(notes) if notes else ('same as default' if c else '')))

    head = ('file', 'default errors/tests', 's', 'coil errors/tests', 's',
            'coil-only failures')
    md = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for row in rows:
        md.append('| ' + ' | '.join(str(x).replace('|', '\\|') for x in row) + ' |')
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'table.md'), 'w') as t:
        t.write('\n'.join(md) + '\n')
    print()
    print('\n'.join(md))
    print()
    if bad:
        print(f'sqlite-suite: {bad} unexpected failure(s) on coil '
              f'(logs under {args.out}/coil/FILE/log.txt)')
        return 1
    print('sqlite-suite: no unexpected failure on coil')
    return 0


if __name__ == '__main__':
    sys.exit(main())
