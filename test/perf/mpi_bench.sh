#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# MPI ping-pong and multi-pair bandwidth (1, 2, 4 pairs) between two emulated
# hosts, Open MPI over UCX: plaintext (pml ucx on tcp), crypt pipelined and,
# in a test build, crypt naive (both through the shipped site
# configuration), in one run.
# A table per configuration, and a CSV with the machine's description.
#
#   test/perf/mpi_bench.sh PREFIX RESULTS_DIR [quick]
set -uo pipefail

prefix=${1:?usage: $0 PREFIX RESULTS_DIR [quick]}
results=${2:?}
quick=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ucx-crypt-mpibench.XXXXXX)
csv="$results/mpi_bench.csv"
mkdir -p "$results"

. "$here/../netns.sh"
. "$here/../lib/machine.sh"
cleanup() {
    netns_down ucxc-m1 ucxc-m2
    rm -rf "$work"
}
trap cleanup EXIT
bench_hosts ucxc-m1 ucxc-m2 ucxcm-v1 ucxcm-v2 10.80.0.1 10.80.0.2

mpicc -O2 -o "$work/mpi_bench" "$here/mpi_bench.c" || exit 1
"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null
iters=20
[ -n "$quick" ] && iters=5

run() { # mode pairs
    local mode=$1 pairs=$2 params=/dev/null extra=()
    case $mode in
    plain)
        extra=(--mca pml ucx --mca osc ucx --mca btl self,vader
               --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any
               -x UCX_TLS=tcp,self,sm -x UCX_WARN_UNUSED_ENV_VARS=n) ;;
    pipelined)
        params="$prefix/share/ucx-crypt/openmpi-mca-params.conf" ;;
    naive)
        params="$prefix/share/ucx-crypt/openmpi-mca-params.conf"
        extra=(-x UCX_CRYPT_BULK_MODE=naive) ;;
    esac
    on_host ucxc-m1 ucxcm-v1 env OMPI_MCA_mca_base_param_files="$params" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        NETNS_AGENT_HOSTS="10.80.0.1=ucxc-m1=ucxcm-v1 10.80.0.2=ucxc-m2=ucxcm-v2" \
        timeout 300 mpirun -np $((2 * pairs)) --oversubscribe \
        --host "10.80.0.1:$pairs,10.80.0.2:$pairs" \
        --mca plm_rsh_agent "$here/../netns-agent.sh" \
        --mca oob_tcp_if_include ucxcm-v1,ucxcm-v2 "${extra[@]}" \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" \
        "$work/mpi_bench" -i $iters 2>&1
}

# naive (the CryptMPI paper's baseline) is a test build's switch
modes=(plain pipelined naive)
if ! is_test_build "$prefix"; then
    echo "note: $prefix is a release build: no naive rows (pass _build/install-test)"
    modes=(plain pipelined)
fi
echo "# $(bench_machine)" >"$csv"
echo "mode,pairs,size,latency_us,aggregate_MBs" >>"$csv"
for pairs in 1 2 4; do
    for mode in "${modes[@]}"; do
        echo "== $mode, $pairs pair(s)"
        run $mode $pairs | tee "$work/out.txt" | grep -v "^\[ucx-crypt"
        awk -v m=$mode -v p=$pairs '/^ *[0-9]/ {print m "," p "," $1 "," $2 "," $3}' \
            "$work/out.txt" >>"$csv"
    done
done
echo "CSV: $csv"
