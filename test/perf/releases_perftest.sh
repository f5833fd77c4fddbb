#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The two-host perftest table (plain vs crypt, test/perf/two_host_perftest.sh)
# on UCX 1.13.1 and 1.22.0 side by side, each with UCP's protocols v1 and
# v2 (UCX_PROTO_ENABLE=n|y), as a table and a CSV.
#
#   test/perf/releases_perftest.sh BUILD RESULTS_DIR [ITERATIONS]
#
# BUILD is the build folder of contrib/quickstart.sh (_build): its install/
# (UCX 1.13.1, Debian's) and, from the test command's releases stage,
# install-ucx-1.22.0/ with the wheel in ucx-releases/. Benchmarks are not
# tests: nothing here asserts; read the ratios, each against plaintext on
# the same UCX in the same run.
set -uo pipefail

build=$(cd "${1:?usage: $0 BUILD RESULTS_DIR [ITERATIONS]}" && pwd)
results=${2:?}
iters=${3:-2000}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$results"
csv="$results/releases_perftest.csv"
. "$here/../lib/machine.sh"

wheel=$(ls -d "$build"/ucx-releases/libucx-cu12-1.22.0/libucx 2>/dev/null)
runs=("1.13.1 n $build/install" "1.13.1 y $build/install")
if [ -n "$wheel" ] && [ -f "$build/install-ucx-1.22.0/lib/libuct_crypt.so" ]; then
    runs+=("1.22.0 n $build/install-ucx-1.22.0" "1.22.0 y $build/install-ucx-1.22.0")
else
    echo "UCX 1.22.0: no build in $build/install-ucx-1.22.0 (contrib/quickstart.sh check" \
         "builds it in its releases stage); 1.13.1 only" >&2
fi

echo "# $(bench_machine) (1.13.1; the 1.22.0 rows ran on the PyPI wheel)" >"$csv"
echo "ucx,proto,test,size,plain_lat_us,crypt_lat_us,plain_bw_MBs,crypt_bw_MBs,bw_ratio" >>"$csv"
for run in "${runs[@]}"; do
    read -r version proto prefix <<<"$run"
    echo "== UCX $version, UCX_PROTO_ENABLE=$proto"
    out="$results/releases_perftest-$version-proto_$proto"
    if [ "$version" = 1.13.1 ]; then
        UCX_PROTO_ENABLE=$proto "$here/two_host_perftest.sh" "$prefix" "$out" "$iters" \
            >"$out.log" 2>&1
    else
        PATH="$wheel/bin:$PATH" LD_LIBRARY_PATH="$wheel/lib" UCX_PROTO_ENABLE=$proto \
            "$here/two_host_perftest.sh" "$prefix" "$out" "$iters" >"$out.log" 2>&1
    fi
    grep -v '^#' "$out/two_host_perftest.csv" | tail -n +2 |
        sed "s/^/$version,$proto,/" >>"$csv"
done

# side by side: one row per test and size, a column pair per (UCX, proto)
python3 - "$csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith('#')))
cols = []
for r in rows:
    if (r['ucx'], r['proto']) not in cols:
        cols.append((r['ucx'], r['proto']))
keys = []
for r in rows:
    if (r['test'], r['size']) not in keys:
        keys.append((r['test'], r['size']))
by = {(r['ucx'], r['proto'], r['test'], r['size']): r for r in rows}
head = f"{'test':8} {'size':>8}" + "".join(f" | {u} v{'2' if p == 'y' else '1'}".ljust(24) for u, p in cols)
print(head)
print(f"{'':8} {'':>8}" + "".join(" | plain  crypt  (ratio) " for _ in cols))
for t, s in keys:
    line = f"{t:8} {s:>8}"
    for u, p in cols:
        r = by.get((u, p, t, s))
        if r is None:
            line += " | " + "-".ljust(21)
        elif t == 'tag_lat':
            line += f" | {float(r['plain_lat_us']):6.1f} {float(r['crypt_lat_us']):6.1f} us     "
        else:
            line += f" | {float(r['plain_bw_MBs']):6.0f} {float(r['crypt_bw_MBs']):6.0f} ({float(r['bw_ratio']):.2f})"
    print(line)
print("latency in us (median), bandwidth in MB/s (average); ratio = crypt / plain")
EOF
echo "CSV: $csv"
