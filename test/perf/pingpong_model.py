#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Tables, JSON and a plot of pingpong_bench.sh's CSV, with the model's bound.

The model is CryptMPI's (Naser et al., section IV-C): a pipelined message
costs its plaintext time plus one segment sealed (the first, before
anything is on the wire) and one opened (the last, after everything
arrived), as long as no stage is slower than the wire:

  T_crypt(m) = T_plain(m) + s_first / E + s_last / D

T_plain: the plaintext ping-pong measured in the same run and wire; E, D:
one thread's seal and open rates from crypt_calibrate; the segments are
the engine's (a ramp from 64 KiB to the profile's segment, the last one
what is left). Where the CPU is the wire (bare veth, loopback) and a rank
has no spare PU (2 cores, 2 ranks), the cipher cannot hide behind the wire:
each side's one core also seals or opens every byte, and the bound adds
m / min(E, D). The bound is a model of crypt against UCX's tcp: crypt's
own wire can beat the plaintext transport it is compared with.

usage: pingpong_model.py CSV PROFILE RESULTS_DIR MACHINE
"""
import csv
import json
import math
import os
import statistics
import sys


def profile(path):
    p = {}
    try:
        for line in open(path):
            parts = line.split()
            if len(parts) == 2 and not line.startswith('#'):
                p[parts[0]] = float(parts[1])
    except OSError:
        pass
    return p


def segments(m, seg, first=65536):
    """the engine's segment sizes for an m-byte put (bulk/bulk.c)"""
    out, size, left = [], min(first, seg), m
    while left > 0:
        out.append(min(size, left))
        left -= out[-1]
        size = min(size * 2, seg)
    return out or [0]


def main():
    path, prof, results, machine = sys.argv[1:5]
    rows = [r for r in csv.DictReader(l for l in open(path) if not l.startswith('#'))]
    p = profile(prof)
    seg = int(p.get('segment', 262144))
    E = p.get('seal_GBs_1', 4.0) * 1e9
    D = p.get('open_GBs', 4.0) * 1e9
    spare = max(0, ((os.cpu_count() or 2) - 2) // 2)

    med, loads = {}, {}
    for r in rows:
        key = (r['wire'], r['test'], int(r['size']), r['mode'])
        v = r['median_us'] if r['test'] == 'tag_lat' else r['avg_MBs']
        if v and v != 'nan':
            med.setdefault(key, []).append(float(v))
        loads.setdefault(r['wire'], []).append(float(r['load1'] or 0))
    med = {k: statistics.median(v) for k, v in med.items()}

    lat = lambda w, m, mode: med.get((w, 'tag_lat', m, mode))
    wires = []
    for r in rows:
        if r['wire'] not in wires:
            wires.append(r['wire'])
    out = []
    print('\n# %s' % machine)
    print('# cipher: seal %.1f GB/s, open %.1f GB/s a thread; segment %d; spare PUs a '
          'rank %d' % (E / 1e9, D / 1e9, seg, spare))
    for w in wires:
        ld = loads.get(w, [0])
        print('\n== %s (load average %.2f..%.2f)' % (w, min(ld), max(ld)))
        print('%-7s %9s %11s %11s %8s %11s %8s' % ('test', 'size', 'plain', 'crypt',
                                                    'speed', 'bound', 'vs bound'))
        sizes = sorted({m for (ww, test, m, mode) in med if ww == w})
        for test in ('tag_lat', 'tag_bw'):
            for m in sizes:
                pl, cr = med.get((w, test, m, 'plain')), med.get((w, test, m, 'crypt'))
                if pl is None or cr is None:
                    continue
                speed = pl / cr if test == 'tag_lat' else cr / pl
                model = None
                if test == 'tag_lat' and m >= 65536:
                    sz = segments(m, seg)
                    cpu_wire = w in ('bare', 'lo') and spare == 0
                    model = pl + (m / min(E, D) * 1e6 if cpu_wire else 0) + \
                        (sz[0] / E + sz[-1] / D) * 1e6
                unit = 'us' if test == 'tag_lat' else 'MB/s'
                print('%-7s %9d %9.1f%-2s %9.1f%-2s %8.2f %9s%-2s %8s' % (
                    test, m, pl, unit[:2], cr, unit[:2], speed,
                    '%.1f' % model if model else '-', 'us' if model else '',
                    '%.2f' % (model / cr) if model else '-'))
                out.append({'wire': w, 'test': test, 'size': m, 'plain': pl, 'crypt': cr,
                            'speed': speed, 'model_us': model,
                            'load_min': min(ld), 'load_max': max(ld)})
    base = os.path.join(results, 'pingpong_bench')
    json.dump({'machine': machine, 'profile': p, 'rows': out},
              open(base + '.json', 'w'), indent=1)
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib missing: no plot (contrib/install-deps.sh installs it)')
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for w in wires:
        pts = sorted((r['size'], r['speed'], r['model_us'], r['plain'])
                     for r in out if r['wire'] == w and r['test'] == 'tag_lat')
        if not pts:
            continue
        line, = ax.plot([x[0] for x in pts], [x[1] for x in pts], 'o-', label=w)
        mp = [(x[0], x[3] / x[2]) for x in pts if x[2]]
        if mp:
            ax.plot([x[0] for x in mp], [x[1] for x in mp], '--', color=line.get_color(),
                    label=w + ' model')
    ax.set_xscale('log', base=2)
    top = max([1.15] + [r['speed'] * 1.05 for r in out if r['test'] == 'tag_lat'])
    ax.set_ylim(0, top)
    ax.axhline(1.0, color='k', lw=0.5)
    ax.set_xlabel('message size (bytes)')
    ax.set_ylabel('crypt / plaintext speed (ping-pong)')
    ax.set_title(machine[:90], fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(base + '.png', dpi=110)
    print('\nCSV: %s  JSON: %s.json  plot: %s.png' % (path, base, base))


if __name__ == '__main__':
    main()
