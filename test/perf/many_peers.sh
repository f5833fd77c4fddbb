#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# One process and many peers across two emulated hosts, over crypt and over
# plaintext UCX tcp in the same run: how long it takes the hub to connect
# to N peers and exchange a message with each (every connection made, every
# handshake done), how long closing them takes, and what each peer costs
# the hub in memory and file descriptors. Then a wireup storm the other
# way: W workers of one process open E endpoints each to the hub at once
# (ranks of many nodes wiring up to rank 0), and the hub's time to the
# last message and memory per flow. Tables, and CSV beside them.
#
#   test/perf/many_peers.sh PREFIX OBJDIR RESULTS_DIR [PEERS...]   (default 50 200 500)
#   STORM="WxE ..." (default "64x64 16x16"): the storms
#
#   netns ucxc-p1 (10.79.0.1): the hub, one UCP worker
#   netns ucxc-p2 (10.79.0.2): N UCP workers in one process, the peers
#
# Benchmarks are not tests: nothing here asserts.
set -uo pipefail

prefix=${1:?usage: $0 PREFIX OBJDIR RESULTS_DIR [PEERS...]}
obj=${2:?}
results=${3:?}
shift 3
counts=("$@")
[ ${#counts[@]} -eq 0 ] && counts=(50 200 500)
plugin="$prefix/lib/libuct_crypt.so"
prog="$obj/test/perf/many_peers"
work=$(mktemp -d /tmp/ucx-crypt-peers.XXXXXX)
mkdir -p "$results"
csv="$results/many_peers.csv"

. "$(dirname "$0")/../netns.sh"
. "$(dirname "$0")/../lib/machine.sh"

peers_pid=""
cleanup() {
    [ -n "$peers_pid" ] && stop_tree "$peers_pid"
    netns_down ucxc-p1 ucxc-p2
    rm -rf "$work"
}
trap cleanup EXIT

bench_hosts ucxc-p1 ucxc-p2 ucxcp-v1 ucxcp-v2 10.79.0.1 10.79.0.2
"$prefix/bin/ucx-crypt-keygen" "$work/job.key"

# prints the hub's line: peers setup_s close_s rss... per_peer_kib fds...
run() { # mode peers
    local mode=$1 n=$2 envs
    if [ "$mode" = crypt ]; then
        # (the peers' workers seal inline: a pool per worker would be
        # hundreds of threads in one process)
        envs=(LD_PRELOAD="$plugin" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
              UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_BULK_THREADS=0)
    else
        envs=(UCX_TLS=tcp)
    fi
    rm -f "$work/addresses"
    on_host ucxc-p2 ucxcp-v2 "${envs[@]}" timeout 300 "$prog" -s "$n" \
        -f "$work/addresses" >"$work/peers.log" 2>&1 &
    peers_pid=$!
    for _ in $(seq 600); do
        [ -f "$work/addresses" ] && break
        kill -0 "$peers_pid" 2>/dev/null || break
        sleep 0.1
    done
    on_host ucxc-p1 ucxcp-v1 "${envs[@]}" timeout 120 "$prog" -c -f "$work/addresses" \
        >"$work/hub.log" 2>&1
    # (the peers run until killed; the program is pid 1 of its namespace
    # and ignores SIGTERM: a kill of the subshell left it spinning)
    stop_tree "$peers_pid"
    peers_pid=""
    sed -n 's/^hub: //p' "$work/hub.log"
}

echo "# $(bench_machine)" >"$csv"
echo "transport,peers,setup_s,close_s,hub_rss_before_kib,hub_rss_after_kib,per_peer_kib,fds_before,fds_after" >>"$csv"
printf '\nOne hub, N peers across two emulated hosts (%s)\n\n' "$(bench_machine)"
printf '%-10s %6s %10s %10s %14s %12s\n' transport peers "setup (s)" "close (s)" "KiB per peer" "fds per peer"
for n in "${counts[@]}"; do
    for mode in plain crypt; do
        line=$(run "$mode" "$n")
        # peers N setup_s S close_s C rss_kib R0 R1 R2 per_peer_kib P fds F0 F1 F2
        read -r _ peers _ setup _ close _ r0 r1 _ _ per _ f0 f1 _ <<<"$line"
        if [ -z "${peers:-}" ]; then
            printf '%-10s %6s %s\n' "$mode" "$n" "failed: $(tail -n 2 "$work/hub.log" "$work/peers.log" | tr '\n' ' ')"
            continue
        fi
        printf '%-10s %6s %10s %10s %14s %12s\n' "$mode" "$peers" "$setup" "$close" "$per" \
            "$(awk -v a="$f0" -v b="$f1" -v n="$peers" 'BEGIN {printf "%.2f", (b - a) / n}')"
        echo "$mode,$peers,$setup,$close,$r0,$r1,$per,$f0,$f1" >>"$csv"
    done
done

# a storm: prints the hub's line (flows N setup_s S rss_kib R0 R1 per_flow_kib P fds F0 F1)
storm() { # mode workers eps
    local mode=$1 w=$2 e=$3 envs storm_pid
    if [ "$mode" = crypt ]; then
        envs=(LD_PRELOAD="$plugin" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
              UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_BULK_THREADS=0
              UCX_CRYPT_STATS=y)
    else
        envs=(UCX_TLS=tcp)
    fi
    rm -f "$work/storm.addr"*
    on_host ucxc-p2 ucxcp-v2 "${envs[@]}" timeout 300 "$prog" -w "$w" -e "$e" \
        -f "$work/storm.addr" >"$work/storm.log" 2>&1 &
    storm_pid=$!
    on_host ucxc-p1 ucxcp-v1 "${envs[@]}" timeout 300 "$prog" -r $((w * e)) \
        -f "$work/storm.addr" >"$work/hub.log" 2>&1
    wait "$storm_pid" 2>/dev/null
    sed -n 's/^hub: flows/flows/p' "$work/hub.log"
    # (what crypt's hub reclaimed or answered with a cookie)
    grep -o "strangers refused [0-9]*\|cookie replies [0-9]*" "$work/hub.log" | tr '\n' ' '
}

storm_csv="$results/wireup_storm.csv"
echo "# $(bench_machine)" >"$storm_csv"
echo "transport,workers,eps_each,flows,setup_s,hub_rss_before_kib,hub_rss_after_kib,per_flow_kib,fds_before,fds_after" >>"$storm_csv"
printf '\nA wireup storm: W workers open E endpoints each to one hub at once\n\n'
printf '%-10s %8s %10s %14s %12s  %s\n' transport flows "setup (s)" "KiB per flow" "fds per flow" "crypt's hub"
for s in ${STORM:-64x64 16x16}; do
    for mode in plain crypt; do
        out=$(storm "$mode" "${s%x*}" "${s#*x}")
        # flows N setup_s S rss_kib R0 R1 per_flow_kib P fds F0 F1
        read -r _ flows _ setup _ r0 r1 _ per _ f0 f1 <<<"$(head -1 <<<"$out")"
        if [ -z "${flows:-}" ]; then
            printf '%-10s %8s %s\n' "$mode" "$s" "failed: $(tail -n 2 "$work/hub.log" "$work/storm.log" | tr '\n' ' ')"
            continue
        fi
        printf '%-10s %8s %10s %14s %12s  %s\n' "$mode" "$flows" "$setup" "$per" \
            "$(awk -v a="$f0" -v b="$f1" -v n="$flows" 'BEGIN {printf "%.2f", (b - a) / n}')" \
            "$(tail -n +2 <<<"$out")"
        echo "$mode,${s%x*},${s#*x},$flows,$setup,$r0,$r1,$per,$f0,$f1" >>"$storm_csv"
    done
done
printf '\nCSV: %s, %s\n' "$csv" "$storm_csv"
