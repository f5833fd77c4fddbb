#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# NetPIPE (Debian's netpipe-openmpi and netpipe-mpich2) between two emulated
# hosts, with UCX's defaults, as a user runs it: Open MPI through the
# shipped site configuration against pml ucx on plain tcp, MPICH under
# ucx-crypt-run against ch4:ucx on UCX's own transports. Ping-pong of
# 64 KiB .. 16 MiB (no perturbation), plain and crypt alternating, ROUNDS
# rounds (2), median time per size; the load average beside every run.
# RATE=4gbit paces the veth on both ends (tc tbf, burst 1mb, latency
# 20ms): the wire, not the cipher, is the bound. Not a test: nothing here
# asserts. (On the 2-vCPU machine of 2026-12-02 Open MPI's NetPIPE times
# came in quanta of 4 and 20 ms, plaintext and crypt alike, where MPICH's
# and mpi_bench's did not: read Open MPI's rows there as a check that it
# runs, MPICH's for the ratio.)
#
#   test/perf/netpipe_bench.sh PREFIX RESULTS_DIR
set -uo pipefail

prefix=$(cd "${1:?usage: $0 PREFIX RESULTS_DIR}" && pwd)
results=${2:?}
rounds=${ROUNDS:-2}
rate=${RATE:-none}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ucx-crypt-netpipe.XXXXXX)
agent="$here/../netns-agent.sh"
csv="$results/netpipe_bench.csv"
mkdir -p "$results"
. "$here/../netns.sh"
. "$here/../lib/machine.sh"

cleanup() {
    netns_down ucxc-n1 ucxc-n2
    rm -rf "$work"
}
trap cleanup EXIT
bench_hosts ucxc-n1 ucxc-n2 ucxcn-v1 ucxcn-v2 10.81.0.1 10.81.0.2
if [ "$rate" != none ]; then
    ip netns exec ucxc-n1 tc qdisc add dev ucxcn-v1 root tbf rate "$rate" burst 1mb latency 20ms &&
    ip netns exec ucxc-n2 tc qdisc add dev ucxcn-v2 root tbf rate "$rate" burst 1mb latency 20ms || {
        echo "cannot pace the veth (tc)" >&2; exit 1; }
fi
"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null
site_conf="$prefix/share/ucx-crypt/openmpi-mca-params.conf"
np_args=(-l 65536 -u 16777216 -p 0)

ompi() { # mode out: NPopenmpi across the hosts
    local params=/dev/null extra=()
    if [ "$1" = plain ]; then
        extra=(--mca pml ucx --mca osc ucx --mca btl self,vader
               --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any)
    else
        params=$site_conf
    fi
    (cd "$work" && on_host_defaults ucxc-n1 env OMPI_MCA_mca_base_param_files="$params" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        NETNS_AGENT_HOSTS="10.81.0.1=ucxc-n1= 10.81.0.2=ucxc-n2=" \
        timeout 300 mpirun -np 2 --host 10.81.0.1,10.81.0.2 --mca plm_rsh_agent "$agent" \
        --mca oob_tcp_if_include ucxcn-v1,ucxcn-v2 --mca mpi_yield_when_idle 0 \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" \
        "${extra[@]}" NPopenmpi "${np_args[@]}" -o "$2") >"$work/run.log" 2>&1
}

mpich() { # mode out: NPmpich2 across the hosts
    local wrap=()
    [ "$1" = crypt ] && wrap=(env UCX_CRYPT_KEY_FILE="$work/job.key"
                              "$prefix/bin/ucx-crypt-run")
    (cd "$work" && on_host_defaults ucxc-n1 env \
        NETNS_AGENT_HOSTS="10.81.0.1=ucxc-n1= 10.81.0.2=ucxc-n2=" \
        "${wrap[@]}" timeout 300 mpiexec.mpich -n 2 -hosts 10.81.0.1,10.81.0.2 \
        -launcher ssh -launcher-exec "$agent" -iface ucxcn-v1 \
        NPmpich2 "${np_args[@]}" -o "$2") >"$work/run.log" 2>&1
}

echo "# $(bench_machine), wire: veth${rate/none/}" >"$csv"
echo "mpi,mode,round,bytes,usec,load1" >>"$csv"
for mpi in ompi mpich; do
    for r in $(seq "$rounds"); do
        for mode in plain crypt; do
            load=$(cut -d' ' -f1 /proc/loadavg)
            out="$work/$mpi-$mode-$r.out"
            if ! "$mpi" "$mode" "$out" || [ ! -s "$out" ]; then
                echo "$mpi $mode round $r failed: $(tail -2 "$work/run.log")" >&2
                continue
            fi
            cp "$out" "$results/" # NetPIPE's own file, as it wrote it
            # its columns: bytes, Mbps, seconds (one way)
            awk -v m="$mpi" -v mo="$mode" -v r="$r" -v l="$load" \
                '{printf "%s,%s,%s,%d,%.3f,%s\n", m, mo, r, $1, $3 * 1e6, l}' \
                "$out" >>"$csv"
        done
    done
done

/usr/bin/python3 - "$csv" "$results/netpipe_bench.json" <<'EOF'
import csv, json, statistics, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith('#'))]
machine = open(sys.argv[1]).readline()[2:].strip()
t = {}
for r in rows:
    t.setdefault((r['mpi'], r['mode'], int(r['bytes'])), []).append(float(r['usec']))
med = {k: statistics.median(v) for k, v in t.items()}
print('# ' + machine)
print('%-6s %10s %12s %12s %8s' % ('mpi', 'bytes', 'plain us', 'crypt us', 'speed'))
out = []
for (mpi, mode, size) in sorted(k for k in med if k[1] == 'plain'):
    c = med.get((mpi, 'crypt', size))
    if c is None or size & (size - 1):
        continue  # powers of two only, in the table
    p = med[(mpi, 'plain', size)]
    print('%-6s %10d %12.1f %12.1f %8.2f' % (mpi, size, p, c, p / c))
    out.append({'mpi': mpi, 'bytes': size, 'plain_us': p, 'crypt_us': c, 'speed': p / c})
json.dump({'machine': machine, 'rows': out}, open(sys.argv[2], 'w'), indent=1)
EOF
echo "CSV: $csv"
