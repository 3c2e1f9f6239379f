#!/usr/bin/env python3
"""engine_graph.py: the call graph and the include graph of engine/, by file.

A file X depends on a file Y when X calls a function defined in Y (found by
name: every non-static function defined in an engine .c file is owned by that
file).  Cycles are reported; the feedback loops docs/architecture.md names
are allowed.  The include graph of engine/ headers is checked for cycles too.

  tools/engine_graph.py          # edges, then cycles; exit 1 on an unnamed cycle
  tools/engine_graph.py --dot    # the file graph in Graphviz form
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, 'engine')

# Feedback loops that stay, each named in a comment at both ends:
#   journal full -> checkpoint -> journal space freed; and a flush kicks the
#   journal for the records it waits for -> a retired cycle lets it go
#   read <-> readahead: a demand may wait for a prefetch; it resumes the read
ALLOWED = [
    {'log/journal.c', 'log/ckpt.c', 'log/flush.c'},
    {'io/read.c', 'io/readahead.c'},
]

DEF_RE = re.compile(r'^(?!static\b)(?:[a-z_][\w \*]*?[\s\*])(\w+)\([^;]*$')
CALL_RE = re.compile(r'\b(\w+)\s*\(')
INC_RE = re.compile(r'^#include "engine/([^"]+)"', re.M)


def files(ext):
    out = []
    for d, _, fs in os.walk(ENGINE):
        for f in fs:
            if f.endswith(ext):
                out.append(os.path.relpath(os.path.join(d, f), ENGINE))
    return sorted(out)


def strip(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def main():
    owner = {}
    srcs = files('.c')
    body = {}
    for f in srcs:
        text = strip(open(os.path.join(ENGINE, f)).read())
        body[f] = text
        for line in text.split('\n'):
            m = DEF_RE.match(line)
            if m and not line.rstrip().endswith(';'):
                owner[m.group(1)] = f
    edges = {f: set() for f in srcs}
    for f, text in body.items():
        for name in set(CALL_RE.findall(text)):
            g = owner.get(name)
            if g and g != f:
                edges[f].add(g)

    if '--dot' in sys.argv:
        print('digraph engine {')
        for f in srcs:
            for g in sorted(edges[f]):
                print(f'  "{f}" -> "{g}";')
        print('}')
        return 0

    for f in srcs:
        print(f'{f:24} -> {" ".join(sorted(edges[f]))}')

    # strongly connected components (Tarjan)
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in srcs:
        if v not in index:
            visit(v)
    bad = 0
    for comp in sccs:
        ok = comp in ALLOWED
        print(('named loop: ' if ok else 'CYCLE: ') + ' '.join(sorted(comp)))
        bad += not ok

    # header include cycles
    hdr = {h: set(INC_RE.findall(open(os.path.join(ENGINE, h)).read()))
           for h in files('.h')}
    state = {}

    def dfs(h, path):
        state[h] = 1
        for g in hdr.get(h, ()):
            if state.get(g) == 1:
                print('INCLUDE CYCLE: ' + ' -> '.join(path + [g]))
                return 1
            if g in hdr and not state.get(g) and dfs(g, path + [g]):
                return 1
        state[h] = 2
        return 0

    for h in hdr:
        if not state.get(h):
            bad += dfs(h, [h])
    print('cycles outside the named loops:', bad)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
