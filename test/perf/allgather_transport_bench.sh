#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# MPI_Allgather as a user of ucx-crypt gets it, Open MPI, one run, three
# ways side by side (OSU-style latency, test/perf/allgather_bench.c):
#   plain      no encryption at all (pml ucx over plain tcp)
#   transport  the crypt transport under Open MPI's own all-gather (every
#              hop sealed and opened again: the site configuration with
#              the coll component turned off)
#   <alg>      the site configuration as shipped: the coll component,
#              frames on the collective lane (sealed once per node), with
#              the score table ("table") or one algorithm forced
#   plain-nb, table-nb  MPI_Iallgather + MPI_Wait: Open MPI's libnbc in
#              plaintext, and the coll component's tasks
# on two emulated hosts (network namespaces joined by a veth, fresh pid and
# ipc namespaces per host: test/netns.sh), P/2 ranks each, so that inside
# a host MPI uses shared memory and only host-to-host traffic is on the
# wire, as at a site. Table, CSV with the machine's description. Not a
# test. With more ranks than PUs the absolute times are oversubscription:
# read the ratios. Root (namespaces).
#
#   test/perf/allgather_transport_bench.sh PREFIX RESULTS_DIR [P] [quick]
set -uo pipefail

prefix=${1:?usage: $0 PREFIX RESULTS_DIR [P] [N] [quick]}
results=${2:?}
p=${3:-4}
quick=${4:-}
nodes=2
here=$(cd "$(dirname "$0")" && pwd)
agent="$(cd "$here/.." && pwd)/netns-agent.sh"
work=$(mktemp -d /tmp/ucx-crypt-agtbench.XXXXXX)
. "$here/../netns.sh"
. "$here/../lib/machine.sh"
cleanup() {
    netns_down ucxc-g1 ucxc-g2
    rm -rf "$work"
    rm -f /dev/shm/ucx-crypt-threads.$(id -u)
}
trap cleanup EXIT
bench_hosts ucxc-g1 ucxc-g2 ucxc-gv1 ucxc-gv2 10.78.0.1 10.78.0.2
mkdir -p "$results"
csv="$results/allgather_transport_bench.csv"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
site="$prefix/share/ucx-crypt/openmpi-mca-params.conf"

mpicc -O2 -o "$work/allgather_bench" "$here/allgather_bench.c" || exit 1
"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null
iters=20
[ -n "$quick" ] && iters=5

run() { # LABEL PARAM_FILE [mpirun args...]: mpirun on host 1, ranks 0..P/2-1
    local label=$1 params=$2 nb=""; shift 2
    [[ $label == *-nb ]] && nb=-n
    on_host ucxc-g1 ucxc-gv1 env OMPI_MCA_mca_base_param_files="$params" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        NETNS_AGENT_HOSTS="10.78.0.1=ucxc-g1=ucxc-gv1 10.78.0.2=ucxc-g2=ucxc-gv2" \
        timeout 600 mpirun -np "$p" --oversubscribe \
        --host 10.78.0.1:$((p / 2)),10.78.0.2:$((p - p / 2)) \
        --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include ucxc-gv1,ucxc-gv2 \
        --mca mpi_yield_when_idle 1 -x UCX_WARN_UNUSED_ENV_VARS=n "$@" \
        "$work/allgather_bench" -i $iters $nb \
        2>"$work/$label.err" |
        awk -v a="$label" '/^[0-9]+ [0-9.]+$/ {print a "," $1 "," $2}' >>"$csv"
}

echo "# $(bench_machine), Open MPI $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p'), p=$p on 2 emulated hosts over veth" >"$csv"
echo "config,size,latency_us" >>"$csv"
plain=(--mca pml ucx --mca osc ucx --mca btl self,vader --mca opal_common_ucx_tls any
       --mca opal_common_ucx_devices any -x UCX_TLS=tcp,sm,self)
run plain /dev/null "${plain[@]}"
run plain-nb /dev/null "${plain[@]}"
run transport "$site" --mca coll ^crypt -x UCX_TLS=crypt,tcp,sm,self \
    -x UCX_CRYPT_KEY_FILE="$work/job.key"
# the two hosts share one hostname, so MPI's shared-memory split sees one
# node: the node map is given (ranks 0..P/2-1 on host 1)
for alg in table table-nb naive o-ring o-rd2 c-ring c-rd; do
    tune=()
    [ "${alg%-nb}" != table ] && tune=(-x UCX_CRYPT_COLL_TUNE=allgather:$alg)
    run "$alg" "$site" -x UCX_TLS=crypt,tcp,sm,self -x UCX_CRYPT_KEY_FILE="$work/job.key" \
        -x UCX_CRYPT_COLL_NODES=$nodes:block "${tune[@]}"
done

"$py" - "$csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith('#')))
cfgs = ['plain', 'transport', 'table', 'naive', 'o-ring', 'o-rd2', 'c-ring', 'c-rd']
nb = ['plain-nb', 'table-nb']
lat = {(r['config'], int(r['size'])): float(r['latency_us']) for r in rows}
sizes = sorted({int(r['size']) for r in rows})
print(open(sys.argv[1]).readline().strip())
print('%9s' % 'size' + ''.join('%10s' % c for c in cfgs) +
      '  best-enc  /plain  /transport')
for m in sizes:
    v = [lat.get((c, m)) for c in cfgs]
    enc = [(x, c) for x, c in zip(v[2:], cfgs[2:]) if x is not None]
    best = min(enc) if enc else (None, '-')
    r_plain = best[0] / v[0] if best[0] and v[0] else float('nan')
    r_tr = best[0] / v[1] if best[0] and v[1] else float('nan')
    print('%9d' % m + ''.join('%10.1f' % x if x is not None else '%10s' % '-' for x in v)
          + '  %8s  %6.2f  %10.2f' % (best[1], r_plain, r_tr))
print()
print('nonblocking (MPI_Iallgather + MPI_Wait; libnbc in plaintext vs the tasks)')
print('%9s' % 'size' + ''.join('%10s' % c for c in nb + ['table']) + '  tasks/plain-nb  tasks/blocking')
for m in sizes:
    v = [lat.get((c, m)) for c in nb + ['table']]
    ok = all(x is not None for x in v)
    print('%9d' % m + ''.join('%10.1f' % x if x is not None else '%10s' % '-' for x in v)
          + ('  %14.2f  %14.2f' % (v[1] / v[0], v[1] / v[2]) if ok else ''))
PYEOF
echo "CSV: $csv"
