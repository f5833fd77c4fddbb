# SPDX-License-Identifier: BSD-3-Clause
# Two emulated hosts on one machine, sourced by the integration tests and
# the benchmarks (style of WireGuard's src/tests/netns.sh):
#
#   netns NS1 (ADDR1 on DEV1) <--- veth ---> netns NS2 (ADDR2 on DEV2)
#
# `on_host NS DEV cmd...` runs cmd inside NS, in fresh pid and ipc
# namespaces (so UCX cannot use shared memory across "hosts") with their
# own /proc (UCX looks itself up in /proc by pid: without --mount-proc it
# finds the host's pid 11, and an MPI rank's endpoint to itself fails), with
# UCX_NET_DEVICES=DEV. The caller removes the namespaces (netns_down).

netns_up() { # NS1 NS2 DEV1 DEV2 ADDR1 ADDR2 (addresses without prefix)
    ip netns add "$1" && ip netns add "$2" &&
    ip link add "$3" type veth peer name "$4" &&
    ip link set "$3" netns "$1" && ip link set "$4" netns "$2" &&
    ip -n "$1" addr add "$5/24" dev "$3" && ip -n "$2" addr add "$6/24" dev "$4" &&
    ip -n "$1" link set "$3" up && ip -n "$2" link set "$4" up &&
    ip -n "$1" link set lo up && ip -n "$2" link set lo up
}

# bench_hosts NS1 NS2 DEV1 DEV2 ADDR1 ADDR2: a benchmark's two hosts, made
# anew (what an earlier run that was killed left behind goes first); the
# script ends, said, where they cannot be made. Its own cleanup removes
# them (netns_down).
bench_hosts() {
    netns_down "$1" "$2"
    netns_up "$@" || {
        echo "cannot create network namespaces (needs root)" >&2; exit 1; }
}

netns_down() { # NS...
    local ns
    for ns in "$@"; do
        ip netns del "$ns" 2>/dev/null
    done
    return 0
}

on_host() { # NS DEV command...
    local ns=$1 dev=$2
    shift 2
    ip netns exec "$ns" unshare --pid --ipc --fork --mount-proc env UCX_NET_DEVICES="$dev" "$@"
}

# wait_listening NS PORT PID: until a TCP listener is up there, or the
# process PID that should listen ended; NS "-": this namespace. It waits
# for the event, not a guess of the time a busy host takes (the listener's
# own time limit ends a hang); 300 s at most.
wait_listening() {
    local i in_ns=(ip netns exec "$1")
    [ "$1" = - ] && in_ns=()
    for i in $(seq 3000); do
        "${in_ns[@]}" ss -Hltn "sport = :$2" | grep -q . && return 0
        [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

# on_host_defaults NS command...: as on_host, with UCX's default device
# list (every device, lo included), as a user runs it
on_host_defaults() {
    local ns=$1
    shift
    ip netns exec "$ns" unshare --pid --ipc --fork --mount-proc "$@"
}

# stop_tree PID: what on_host_defaults started in the background is a
# subshell, then `unshare`, then the program, which is pid 1 of its pid
# namespace and ignores SIGTERM: the whole tree goes, deepest first, with
# SIGKILL (killing `unshare` alone left the program running, orphaned and
# polling). PID is one the caller started.
# program_pid PID: the program a PID the caller started runs, the deepest
# of its first children (on_host: unshare, env, timeout, the program), to
# signal that program alone, by PID
program_pid() {
    local pid=$1 child
    while child=$(pgrep -P "$pid" | head -1) && [ -n "$child" ]; do
        pid=$child
    done
    echo "$pid"
}

stop_tree() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do
        stop_tree "$child"
    done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

# PUs each of two ranks on this machine can give to crypto threads: the
# emulated hosts share the machine (CryptMPI's T0 - T1, halved), which the
# shim cannot see from inside the emulation
spare_pus_per_rank() {
    local spare=$(( ($(nproc) - 2) / 2 ))
    [ $spare -lt 0 ] && spare=0
    echo $spare
}
