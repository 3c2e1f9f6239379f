#!/usr/bin/env python3
"""Comparison 6: what a default store takes on disk (du), next to the data
it holds.

  an empty store made with the defaults (no maximum given)   target <= 64 MiB
  the same holding 1.5 GiB written through the API           target <= 1.1x the data
  after removing everything and `coil compact`               target <= 128 MiB
  the same data written again after the compaction           its rate / the first fill's

The data goes in through the library (`coil put`, 1 MiB writes, incompressible
bytes), the store's disk bytes are st_blocks (du), the peer is the data's own
size. Knobs: BENCH_DISK_MIB (default 1536 x BENCH_SCALE).
"""
import os
import subprocess
import time

import bench_common as bc

DATA = int(os.environ.get('BENCH_DISK_MIB', str(int(1536 * bc.SCALE)))) << 20
STORE = os.path.join(bc.VAR, 'disk.coil')
SRC = os.path.join(bc.VAR, 'disk-data.bin')
CLI = os.path.join(bc.BUILD, 'tools', 'coil')


def coil(*args, stdin=None):
    subprocess.run([CLI] + list(args), check=True, stdin=stdin)


def main():
    os.makedirs(bc.VAR, exist_ok=True)
    bc.log('== 6. disk bytes of a default store (%d MiB of data)' % (DATA >> 20))
    bc.fresh(STORE)
    coil('create', STORE, '0')
    empty = bc.du(STORE)
    bc.log('   empty default store: %.1f MiB on disk' % (empty / 2**20))
    # incompressible data from a fixed-seed generator, so every run
    # stores the same bytes; a file, read from the page cache by both
    # fills, so that they time the store and not the generator
    subprocess.run(['python3', '-c',
                    'import random\n'
                    'r=random.Random(7); n=%d\n' % DATA +
                    'with open(%r, "wb") as o:\n' % SRC +
                    ' while n>0:\n'
                    '  k=min(n,1<<20); o.write(r.randbytes(k)); n-=k\n'],
                   check=True)

    def fill():
        t0 = time.monotonic()
        coil('put', '-c', 'none', STORE, 'data', SRC)
        return time.monotonic() - t0

    first_s = fill()
    full = bc.du(STORE)
    bc.log('   holding %d MiB: %.1f MiB on disk, %.3fx the data'
           % (DATA >> 20, full / 2**20, full / DATA))
    coil('rm', STORE, 'data')
    removed = bc.du(STORE)
    bc.log('   after removing it: %.1f MiB on disk' % (removed / 2**20))
    coil('compact', STORE)
    compacted = bc.du(STORE)
    bc.log('   after coil compact: %.1f MiB on disk' % (compacted / 2**20))
    # a compacted store written again: its file grows again as a new
    # store's does (docs/space.md), at the first fill's rate
    again_s = fill()
    bc.log('   the same data again after compaction: %.0f MiB/s, the first '
           'fill %.0f MiB/s: %.2fx' % ((DATA >> 20) / again_s,
                                        (DATA >> 20) / first_s,
                                        first_s / again_s))
    res = {'comparison': 'disk_space', 'data_bytes': DATA,
           'empty_bytes': empty, 'empty_target': 64 << 20,
           'empty_verdict': bc.verdict(empty, 64 << 20, higher_is_better=False),
           'full_bytes': full, 'ratio_full': full / DATA, 'full_target': 1.1,
           'full_verdict': bc.verdict(full / DATA, 1.1, higher_is_better=False),
           'removed_bytes': removed,
           'compacted_bytes': compacted, 'compacted_target': 128 << 20,
           'compacted_verdict': bc.verdict(compacted, 128 << 20, higher_is_better=False),
           'first_fill_s': first_s, 'refill_after_compact_s': again_s,
           'ratio_refill_rate': first_s / again_s}
    bc.save('disk_space', res)
    bc.fresh(STORE)
    bc.fresh(SRC)


if __name__ == '__main__':
    main()
