#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# One large message, end to end: ucx_perftest tag_lat (ping-pong) and
# tag_bw (stream) between two emulated hosts, plaintext tcp and crypt
# alternating in the same run, with UCX's defaults on both (crypt's pool as
# the node allows), the load average beside every round. On these wires:
#
#   bare   the veth as it is (on 2 cores the CPU is the bound)
#   4gbit  the veth paced on both ends (tc tbf rate 4gbit burst 1mb
#   8gbit  latency 20ms): the wire, not the cipher, is the bound
#   lo     both processes in one namespace over loopback
#
# Prints a table per wire (medians over ROUNDS, crypt/plain as a speed:
# plain time / crypt time for tag_lat, crypt MB/s / plain MB/s for tag_bw)
# and the model's bound beside it (pingpong_model.py: plaintext plus one
# segment sealed and opened, the segment sizes the engine picks, the
# cipher's speed from crypt_calibrate). Saves CSV, JSON and a PNG with the
# machine's description. Not a test: nothing here asserts.
#
#   test/perf/pingpong_bench.sh PREFIX OBJDIR RESULTS_DIR
#   WIRES="bare 4gbit" SIZES="1048576 4194304" ROUNDS=5 test/perf/pingpong_bench.sh ...
set -uo pipefail

prefix=${1:?usage: $0 PREFIX OBJDIR RESULTS_DIR}
obj=${2:?}
results=${3:?}
here=$(cd "$(dirname "$0")" && pwd)
plugin="$prefix/lib/libuct_crypt.so"
wires=${WIRES:-bare 4gbit 8gbit lo}
sizes=${SIZES:-8 65536 262144 1048576 4194304 16777216}
bw_sizes=${BW_SIZES:-4194304}
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/ucx-crypt-pingpong.XXXXXX)
. "$here/../lib/ports.sh"
port=$(test_port_base) || exit 1
. "$here/../netns.sh"
. "$here/../lib/machine.sh"
mkdir -p "$results"
csv="$results/pingpong_bench.csv"
profile="$results/crypt_profile.txt"
py=/usr/bin/python3
[ -x "$py" ] || py=python3

cleanup() {
    netns_down ucxc-q1 ucxc-q2
    rm -rf "$work"
}
trap cleanup EXIT

bench_hosts ucxc-q1 ucxc-q2 ucxcq-v1 ucxcq-v2 10.77.0.1 10.77.0.2
"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null
machine="$(bench_machine)"

echo "== the cipher on this machine (crypt_calibrate)"
"$obj/test/perf/crypt_calibrate" --csv "$results/crypt_calibrate.csv" \
    --profile "$profile" --min-time 0.1 --threads 1,2 | tail -n 4

pace() { # rate|none: both ends of the veth
    local ns dev
    for ns in "ucxc-q1 ucxcq-v1" "ucxc-q2 ucxcq-v2"; do
        set -- $ns
        ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null
        if [ "$rate" != none ]; then
            ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" \
                burst 1mb latency 20ms || return 1
        fi
    done
}

# "median_us avg_MBs" of one ucx_perftest run
run_one() { # wire mode test size
    local wire=$1 mode=$2 test=$3 size=$4 envs n srv
    if [ "$mode" = crypt ]; then
        envs=(LD_PRELOAD="$plugin" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
              UCX_CRYPT_KEY_FILE="$work/job.key")
    else
        envs=(UCX_TLS=tcp)
    fi
    n=2000
    [ "$size" -ge 262144 ] && n=200
    [ "$size" -ge 4194304 ] && n=60
    [ "$size" -ge 16777216 ] && n=20
    port=$((port + 1))
    if [ "$wire" = lo ]; then
        env "${envs[@]}" timeout 120 ucx_perftest -p $port >"$work/srv.log" 2>&1 &
        srv=$!
        wait_listening - $port "$!"
        env "${envs[@]}" timeout 120 ucx_perftest 127.0.0.1 -p $port -t "$test" \
            -s "$size" -n "$n" >"$work/cli.log" 2>&1
    else
        on_host_defaults ucxc-q1 env "${envs[@]}" timeout 120 ucx_perftest -p $port \
            >"$work/srv.log" 2>&1 &
        srv=$!
        wait_listening ucxc-q1 $port "$!"
        on_host_defaults ucxc-q2 env "${envs[@]}" timeout 120 ucx_perftest 10.77.0.1 \
            -p $port -t "$test" -s "$size" -n "$n" >"$work/cli.log" 2>&1
    fi
    wait $srv
    awk '/^Final:/ {print $4, $6}' "$work/cli.log"
}

echo "# $machine" >"$csv"
echo "wire,test,size,round,mode,median_us,avg_MBs,load1" >>"$csv"
for wire in $wires; do
    case $wire in
    bare|lo) rate=none ;;
    *) rate=$wire ;;
    esac
    [ "$wire" = lo ] || pace || { echo "cannot pace the veth (tc)"; continue; }
    specs=()
    for s in $sizes; do specs+=("tag_lat $s"); done
    for s in $bw_sizes; do specs+=("tag_bw $s"); done
    for spec in "${specs[@]}"; do
        set -- $spec
        for r in $(seq "$rounds"); do
            for mode in plain crypt; do
                load=$(cut -d' ' -f1 /proc/loadavg)
                read -r l b < <(run_one "$wire" "$mode" "$1" "$2")
                echo "$wire,$1,$2,$r,$mode,${l:-},${b:-},$load" >>"$csv"
            done
        done
    done
done
rate=none pace 2>/dev/null

"$py" "$here/pingpong_model.py" "$csv" "$profile" "$results" "$machine"
