#!/usr/bin/env python3
"""readme_test.py SRC_DIR BUILD_DIR — run the README's examples as written.

A fenced block preceded by an HTML comment is part of the test:

    <!-- test -->                     run this sh block
    <!-- test: file hello.c -->       write this block to hello.c
    <!-- test: needs perf/fio/coil-fio.so; expect IOPS= -->

`needs P` skips the block (cleanly) when BUILD_DIR/P was not built;
`expect T` requires T in the block's output.  Blocks run in order, with
bash -e, in a scratch folder that looks like a checkout (every top-level
entry of SRC_DIR linked, build/release pointing at BUILD_DIR), so the
README's relative paths work unchanged and nothing lands in the checkout.
The two top-level commands (tools/dev.sh demo/test) carry no marker: they
are what runs this.  Exit 0 when every block passed or was skipped.
"""
import os
import re
import shutil
import subprocess
import sys
import time

BLOCK_TIMEOUT_S = 180


def blocks(readme):
    """Yield (line, directives, lang, text) for each marked fenced block."""
    lines = open(readme).read().split('\n')
    i = 0
    while i < len(lines):
        m = re.match(r'^<!--\s*test(?::\s*(.*?))?\s*-->\s*$', lines[i])
        if not m:
            i += 1
            continue
        directives = {}
        for part in (m.group(1) or '').split(';'):
            part = part.strip()
            if part:
                key, _, val = part.partition(' ')
                directives[key] = val.strip()
        start = i + 1
        while start < len(lines) and not lines[start].startswith('```'):
            start += 1
        if start >= len(lines):
            sys.exit('readme_test: marker on line %d has no fenced block' % (i + 1))
        lang = lines[start][3:].strip()
        end = start + 1
        while end < len(lines) and not lines[end].startswith('```'):
            end += 1
        yield i + 1, directives, lang, '\n'.join(lines[start + 1:end]) + '\n'
        i = end + 1


def scratch_checkout(src, build, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, 'build'))
    for name in os.listdir(src):
        if name in ('build', 'var', '.git'):
            continue
        os.symlink(os.path.join(src, name), os.path.join(work, name))
    os.symlink(build, os.path.join(work, 'build', 'release'))


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: readme_test.py SRC_DIR BUILD_DIR')
    src, build = (os.path.realpath(p) for p in sys.argv[1:])
    work = os.path.join(build, 'readme-test')
    scratch_checkout(src, build, work)
    env = dict(os.environ)
    env.pop('PKG_CONFIG_PATH', None)
    ran = skipped = failed = 0
    for line, d, lang, text in blocks(os.path.join(src, 'README.md')):
        where = 'README.md:%d' % line
        if 'file' in d:
            with open(os.path.join(work, d['file']), 'w') as f:
                f.write(text)
            print('%s: wrote %s' % (where, d['file']))
            continue
        if lang not in ('sh', 'bash'):
            sys.exit('%s: a marked block must be sh or carry "file NAME"' % where)
        need = d.get('needs')
        if need and not os.path.exists(os.path.join(build, need)):
            print('%s: skipped, %s was not built' % (where, need))
            skipped += 1
            continue
        t0 = time.monotonic()
        try:
            p = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', text], cwd=work,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=BLOCK_TIMEOUT_S)
            out, rc = p.stdout.decode(errors='replace'), p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b'').decode(errors='replace')
            rc = 'timeout after %d s' % BLOCK_TIMEOUT_S
        ok = rc == 0 and d.get('expect', '') in out
        print('%s: %s (%.1f s)' % (where, 'ok' if ok else 'FAILED', time.monotonic() - t0))
        if not ok:
            failed += 1
            print('--- block ---\n%s--- output (exit %s) ---\n%s' % (text, rc, out))
            if 'expect' in d:
                print('--- expected to find: %r' % d['expect'])
        else:
            ran += 1
    print('README blocks: %d ran, %d skipped, %d failed' % (ran, skipped, failed))
    if failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
