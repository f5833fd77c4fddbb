#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Encrypted all-gather benchmark: OSU-style latency for p ranks on N
# emulated nodes (block and cyclic), 1 B .. 4 MiB, the library's plaintext
# MPI_Allgather next to Naive and every algorithm of the paper (through the
# PMPI adapter, MPICH), in one run; table, CSV with the machine's
# description, and a plot (PNG) with the best encrypted algorithm per size.
# Not a test. On a machine with fewer PUs than ranks the absolute times are
# dominated by oversubscription: read the ratios.
#
#   test/perf/allgather_bench.sh PREFIX RESULTS_DIR [P] [quick]
set -uo pipefail

prefix=${1:?usage: $0 PREFIX RESULTS_DIR [P] [quick]}
results=${2:?}
p=${3:-8}
quick=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/machine.sh"
work=$(mktemp -d /tmp/ucx-crypt-agbench.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
csv="$results/allgather_bench.csv"
py=/usr/bin/python3
[ -x "$py" ] || py=python3

mpicc.mpich -O2 -o "$work/allgather_bench" "$here/allgather_bench.c" || exit 1
"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null
iters=20
[ -n "$quick" ] && iters=5

echo "# $(bench_machine), p=$p" >"$csv"
echo "nodes,mapping,algorithm,size,latency_us" >>"$csv"
for nodes in 2 4; do
    for map in block cyclic; do
        for alg in plain naive o-ring o-rd o-rd2 c-ring c-rd hs1 hs2; do
            envs=(UCX_CRYPT_COLL_NODES=$nodes:$map UCX_WARN_UNUSED_ENV_VARS=n)
            [ "$alg" != plain ] && envs+=(LD_PRELOAD="$prefix/lib/libucxcrypt_pmpi_mpich.so"
                                          UCX_CRYPT_KEY_FILE="$work/job.key"
                                          UCX_CRYPT_COLL_TUNE=allgather:$alg)
            timeout 600 mpiexec.mpich -n "$p" env "${envs[@]}" "$work/allgather_bench" \
                -i $iters 2>/dev/null |
                awk -v n=$nodes -v m=$map -v a=$alg \
                    '/^[0-9]+ [0-9.]+$/ {print n "," m "," a "," $1 "," $2}' >>"$csv"
        done
    done
done

"$py" - "$csv" "$results" <<'PYEOF'
import csv, sys, os
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith('#')))
algs = ['plain', 'naive', 'o-ring', 'o-rd', 'o-rd2', 'c-ring', 'c-rd', 'hs1', 'hs2']
shapes = sorted({(r['nodes'], r['mapping']) for r in rows})
sizes = sorted({int(r['size']) for r in rows})
lat = {(r['nodes'], r['mapping'], r['algorithm'], int(r['size'])): float(r['latency_us']) for r in rows}
for shape in shapes:
    print('== N=%s %s (latency us; best encrypted / plaintext)' % shape)
    print('%9s' % 'size' + ''.join('%9s' % a for a in algs) + '%8s %7s' % ('best', 'ratio'))
    for m in sizes:
        vals = [lat.get(shape + (a, m)) for a in algs]
        enc = [(v, a) for v, a in zip(vals[1:], algs[1:]) if v is not None]
        best = min(enc) if enc else (None, '-')
        ratio = best[0] / vals[0] if best[0] and vals[0] else float('nan')
        print('%9d' % m + ''.join('%9.1f' % v if v is not None else '%9s' % '-' for v in vals)
              + '%8s %7.2f' % (best[1], ratio))
    print()
try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, axes = plt.subplots(1, len(shapes), figsize=(4.2 * len(shapes), 4), squeeze=False)
for ax, shape in zip(axes[0], shapes):
    for a in algs:
        pts = [(m, lat[shape + (a, m)]) for m in sizes if shape + (a, m) in lat]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], 'k-' if a == 'plain' else '-',
                    marker='o', ms=3, label=a, linewidth=2 if a == 'plain' else 1)
    ax.set_xscale('log', base=2); ax.set_yscale('log')
    ax.set_title('N=%s, %s' % shape); ax.set_xlabel('bytes per rank'); ax.set_ylabel('us')
    ax.grid(True, which='both', alpha=0.3)
axes[0][0].legend(fontsize=7)
fig.tight_layout()
fig.savefig(os.path.join(sys.argv[2], 'allgather_bench.png'), dpi=100)
print('plot: %s' % os.path.join(sys.argv[2], 'allgather_bench.png'))
PYEOF
echo "CSV: $csv"
