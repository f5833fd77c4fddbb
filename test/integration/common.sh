#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What the integration groups share (test/integration/groups/*.sh, each
# runnable alone; run.sh runs them all): the build under test, the job
# keys, the two emulated hosts, the helpers that run a verified pair, and
# it_run, which runs a group and writes its report. Sourced as
#
#   . "$(dirname "$0")/../common.sh" OBJDIR PREFIX RESULTS_DIR
#
# Topology of the wire tests (two emulated hosts):
#
#   +----------------------+            +----------------------+
#   | netns ucxc-h1        |    veth    | netns ucxc-h2        |
#   |  ucxc-v1 10.77.0.1 <-+------------+-> ucxc-v2 10.77.0.2 |
#   |  ucp_check -l        |  tcpdump   |  ucp_check -c        |
#   +----------------------+            +----------------------+
#
# Each process also runs in its own pid and ipc namespaces (unshare), so
# UCX cannot find the other through shared memory: every byte crosses the
# veth. Each test prints "PASS name" or "FAIL name: why"; a JUnit-style
# report goes to RESULTS_DIR/integration_GROUP.xml. Everything created is
# removed on exit; the logs stay when a test failed (the path is printed).
set -uo pipefail

it_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
obj=${1:?usage: $0 OBJDIR PREFIX RESULTS_DIR}
prefix=${2:?}
results=${3:?}
plugin="$prefix/lib/libuct_crypt.so"
plugin_dir="$prefix/lib/ucx-crypt/plugins"  # UCX_PLUGIN_PATH (1.22+)
# what LD_PRELOAD gets: the plugin, after the sanitizer's runtime where
# the plugin was built --enable-sanitizers (ASan and TSan must come first
# in a program that is not built with them: ucx_perftest, ucx_info, MPI
# ranks)
sanitizer_runtime=$(ldd "$plugin" 2>/dev/null | awk '/lib[at]san\.so/ {print $3}')
runtime_first="${sanitizer_runtime:+$sanitizer_runtime:}" # before any preload of ours
preload="$runtime_first$plugin"
# the wire version of the source under test, for attacker.py
CRYPT_WIRE_VERSION=$(sed -n 's/^ *CRYPT_WIRE_VERSION *= *\([0-9]*\),.*/\1/p' \
                     "$it_dir/../../src/uct_crypt/base/format.h")
export CRYPT_WIRE_VERSION
case "$sanitizer_runtime" in
*libasan*)
    # Leaks are checked in our own programs (the gtests, test_leaks); the
    # MPI launchers and libraries leak at exit without the plugin too, in
    # modules unloaded before LeakSanitizer could name them.
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1"
    ;;
*libtsan*)
    # a race ends the process (66): the test it happened in fails. UCX's
    # memory hooks patch madvise, which glibc calls as a thread exits,
    # past TSan's interceptors: off.
    export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1"
    export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n
    ;;
esac
check="$obj/test/integration/ucp_check"
mpi_check_src="$it_dir/mpi_check.c"
site_conf="$prefix/share/ucx-crypt/openmpi-mca-params.conf"
agent="$(cd "$it_dir/.." && pwd)/netns-agent.sh"
keygen="$prefix/bin/ucx-crypt-keygen"
work=$(mktemp -d /tmp/ucx-crypt-it.XXXXXX)
. "$it_dir/../netns.sh"
. "$it_dir/../lib/report.sh"
. "$it_dir/../lib/ports.sh"
. "$it_dir/../lib/machine.sh"
port_base=$(test_port_base) || exit 1

cleanup() {
    # what this group started and is still running, by PID (children
    # first: a program inside a namespace dies before the unshare above it)
    local child
    for child in $(pgrep -P $$); do
        stop_tree "$child"
    done
    netns_down ucxc-h1 ucxc-h2
    if [ -n "${KEEP_WORK:-}" ]; then
        echo "logs kept in $work (KEEP_WORK, or a test failed)"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

next_port() { port_base=$((port_base + 1)); echo $port_base; }

"$keygen" "$work/job.key"
"$keygen" "$work/other.key"

# crypt environment for one process: crypt on, job secret, loopback
crypt_env=(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo
           UCX_CRYPT_KEY_FILE="$work/job.key" UCX_WARN_UNUSED_ENV_VARS=n)

# ---- data verified over crypt, loopback, two processes ----------------------
# verified_pair NAME COUNTER_PATTERN [ENV...] -- CLIENT_ARGS...
# Both sides get crypt_env plus ENV; passes if every byte came back and the
# client's counters (UCX_CRYPT_STATS) match COUNTER_PATTERN.
verified_pair() {
    local name=$1 counter=$2 envs=()
    shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local port; port=$(next_port)
    "${crypt_env[@]}" "${envs[@]}" timeout 120 "$check" -l "$port" >"$work/s.log" 2>&1 &
    local srv=$!
    if "${crypt_env[@]}" "${envs[@]}" UCX_CRYPT_STATS=y timeout 120 "$check" \
           -c 127.0.0.1 -p "$port" "$@" >"$work/c.log" 2>&1 && wait $srv &&
       grep -q "DATA OK" "$work/c.log" && grep -q "$counter" "$work/c.log"; then
        record "$name" pass
    else
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        # (the logs under the test's name: the next pair reuses c.log, s.log)
        cp "$work/c.log" "$work/$name.client.log"; cp "$work/s.log" "$work/$name.server.log"
        record "$name" fail "$(tail -n 3 "$work/c.log" "$work/s.log") [client: ${envs[*]} $check -c 127.0.0.1 -p $port $*; logs: $work/$name.client.log, .server.log]"
    fi
}

# The bulk engine needs an inner with puts (rc at a site); crypt's own
# wire has none. UCX's tcp stands in for rc where the engine is tested
# (UCX_CRYPT_INNER_UCX_TCP, test builds only).
rdma_like=(UCX_CRYPT_INNER_UCX_TCP=y)

# ---- MPI: Open MPI through the shipped site configuration, MPICH ----------
# Open MPI reads only the shipped parameter file (what
# `ucx-crypt-site-config enable` puts into /etc/openmpi): no flag selects
# pml ucx, osc ucx or the plugin. UCX_TLS leaves out shared memory so that
# ranks on this one machine talk through crypt.
ompi_env=(env OMPI_MCA_mca_base_param_files="$site_conf" OMPI_ALLOW_RUN_AS_ROOT=1
          OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
ompi_run() { # NP [mpirun args...] -- the rest goes to mpirun as is
    local np=$1; shift
    "${ompi_env[@]}" timeout 120 mpirun -np "$np" --oversubscribe "$@"
}

# abort_verdict NAME RC LOG OK_LINE REASON [ABSENT]: the job ended by
# itself (not by the timeout), no rank printed OK_LINE, the log gives
# REASON (and, where given, never ABSENT)
abort_verdict() {
    local name=$1 rc=$2 log=$3 ok_line=$4 reason=$5 absent=${6:-}
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! grep -q "^$ok_line" "$log" &&
       { [ -z "$absent" ] || ! grep -q "$absent" "$log"; } &&
       grep -q "$reason" "$log"; then
        record "$name" pass
    else
        record "$name" fail "rc=$rc; $(grep -m2 "crypt\|$ok_line" "$log")"
    fi
}

# mpi_verdict NAME LOG NP [gets]: every rank verified its data and sealed
# records; with "gets", every rank also served its neighbour's MPI_Gets
# with crypt's bulk get (a get the peer seals and puts, bulk/bulk_get.c)
mpi_verdict() {
    local name=$1 log=$2 np=$3 gets=${4:-}
    if [ "$(grep -c "^MPI OK rank" "$log")" != "$np" ] ||
       [ "$(grep -c "ucx-crypt pid.*opened [1-9]" "$log")" -lt "$np" ]; then
        record "$name" fail "$(grep -v '^\[ucx-crypt' "$log" | tail -3)"
    elif [ -n "$gets" ] &&
         [ "$(grep -c "ucx-crypt pid.*bulk gets served [1-9]" "$log")" -lt "$np" ]; then
        record "$name" fail "verified, but not every rank served gets over crypt's bulk get"
    else
        record "$name" pass
    fi
}

# Two emulated hosts for a test group (NAME_setup fails where they cannot be
# made); leftovers of an interrupted run are removed first
two_hosts_up() { # NAME_setup
    netns_down ucxc-h1 ucxc-h2
    netns_up ucxc-h1 ucxc-h2 ucxc-v1 ucxc-v2 10.77.0.1 10.77.0.2 && return 0
    record "$1" fail "cannot create network namespaces"
    return 1
}

# capture_start LABEL [SNAPLEN]: the veth of h1 captured into
# $work/LABEL.pcap, whole packets unless SNAPLEN bytes of each are enough
# (a long transfer beside an attack would fill gigabytes), from the moment
# tcpdump says it listens (or ended), not after a guessed sleep;
# capture_stop LABEL ends it once what was in flight arrived and prints
# how many times the marker crossed
capture_start() {
    ip netns exec ucxc-h1 tcpdump -i ucxc-v1 -U -s "${2:-0}" -w "$work/$1.pcap" \
        >"$work/$1.tcpdump.log" 2>&1 &
    capture_pid=$!
    while kill -0 "$capture_pid" 2>/dev/null; do
        grep -qs "listening on" "$work/$1.tcpdump.log" && return 0
        sleep 0.1
    done
    echo "  capture $1: tcpdump did not start: $(tail -1 "$work/$1.tcpdump.log")"
}

capture_stop() {
    sleep 0.5 # (what the kernel still holds for the capture)
    kill -INT "$capture_pid"; wait "$capture_pid" 2>/dev/null
    grep -a -o "UCXCRYPT-MARKER-" "$work/$1.pcap" | wc -l
}

# ---- the wire: two hosts, capture, marker ------------------------------------
wire_run() { # label crypt(0|1|plugin) [sizes [env...]] -> prints marker count in the capture
    local label=$1 crypt=$2 sizes=${3:-8,1000,65536,1048576} port; port=$(next_port)
    local envs=(UCX_TLS=tcp)
    [ "$crypt" = 1 ] && envs=(LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
                              UCX_CRYPT_KEY_FILE="$work/job.key")
    # loaded by UCX itself (1.22+), nothing preloaded
    [ "$crypt" = plugin ] && envs=(UCX_PLUGIN_PATH="$plugin_dir" UCX_TLS=crypt
                                   UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key")
    shift 2; shift $(( $# > 0 ))
    envs+=("$@")
    capture_start "$label"
    on_host ucxc-h1 ucxc-v1 "${envs[@]}" timeout 60 "$check" -l "$port" \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    on_host ucxc-h2 ucxc-v2 "${envs[@]}" timeout 60 "$check" -c 10.77.0.1 -p "$port" \
        -s "$sizes" -n 3 >"$work/$label.c.log" 2>&1
    local rc=$?
    wait $srv
    echo "$rc $(capture_stop "$label")"
}

# mpi_wire_run LABEL PARAM_FILE: Open MPI across the two hosts (mpirun on
# h1, the remote daemon started through netns-agent.sh on h2), veth
# captured; prints "rc markers"
mpi_wire_run() { # LABEL PARAM_FILE [mpirun args...]
    local label=$1 params=$2
    shift 2
    capture_start "$label"
    on_host ucxc-h1 ucxc-v1 env OMPI_MCA_mca_base_param_files="$params" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        NETNS_AGENT_HOSTS="10.77.0.1=ucxc-h1=ucxc-v1 10.77.0.2=ucxc-h2=ucxc-v2" \
        timeout 120 mpirun -np 2 --host 10.77.0.1,10.77.0.2 --mca plm_rsh_agent "$agent" \
        --mca oob_tcp_if_include ucxc-v1,ucxc-v2 --mca btl_tcp_if_include ucxc-v1,ucxc-v2 \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_STATS=y "$@" \
        "$work/mpi_check_ompi" -s 8,1000,65536,1048576 >"$work/$label.log" 2>&1
    local rc=$?
    echo "$rc $(capture_stop "$label")"
}

# mpi_wire_verdict NAME "RC MARKERS" LOG: the encrypted run of
# mpi_wire_run ended well, no marker crossed the veth, both ranks verified
# their data and opened records
mpi_wire_verdict() {
    local name=$1 result=$2 log=$3
    if [ "${result%% *}" = 0 ] && [ "${result##* }" -eq 0 ] &&
       [ "$(grep -c "^MPI OK rank" "$log")" = 2 ] &&
       [ "$(grep -c "ucx-crypt pid.*opened [1-9]" "$log")" = 2 ]; then
        record "$name" pass
    else
        record "$name" fail "rc/markers $result; $(grep -v '^\[ucx-crypt' "$log" | tail -2)"
    fi
}

# ---- connect-to-ep data lanes wired up through crypt_aux ---------------------
# An inner that connects only ep to ep (rc) needs a connect-to-iface
# auxiliary lane for UCP's wireup (ud, in UCX's own "rc" alias). Emulated
# here on tcp (UCX_CRYPT_EMULATE_CONNECT_TO_EP, test builds): crypt's data
# role loses CONNECT_TO_IFACE, so UCP must wire it up through crypt_aux
# exactly as it wires rc through ud; with the auxiliary role absent it
# fails as rc did ("no auxiliary transport", ucp_ep_create: unreachable).
# UCX_NUM_EPS makes tcp count as unscalable, as rc does at scale.
# Started without the launcher, a program names crypt_aux itself (the
# launcher adds it, the plugin never writes UCX_TLS): aux_tls.
aux_envs=(UCX_CRYPT_EMULATE_CONNECT_TO_EP=y UCX_NUM_EPS=4096)
aux_tls=(UCX_TLS=crypt,crypt_aux:aux UCX_CRYPT_TLS=tcp)

. "$it_dir/client_server.sh"

# mpi_program NAME SOURCE OUT: an MPI test program built for Open MPI and
# MPICH into $work/OUT_ompi and $work/OUT_mpich, by the first group
# function of this group that needs it; a failed build fails the test NAME
# (never a silent skip of what needs it)
mpi_program() { # NAME SOURCE OUT
    local out="$work/$3"
    [ -x "${out}_ompi" ] && [ -x "${out}_mpich" ] && return 0
    if ! mpicc -O2 -o "${out}_ompi" "$2" 2>"$work/cc.log" ||
       ! mpicc.mpich -O2 -o "${out}_mpich" "$2" 2>>"$work/cc.log"; then
        record "$1" fail "$(tail -2 "$work/cc.log")"
        return 1
    fi
}

# the point-to-point, one-sided and collectives check, and the all-gather one
mpi_programs() { mpi_program "$1" "$mpi_check_src" mpi_check; }
allgather_programs() { mpi_program "$1" "$it_dir/mpi_allgather_check.c" agc; }

# it_run GROUP: run the group's tests, write RESULTS_DIR/
# ${IT_REPORT:-integration}_GROUP.xml, and end: non-zero when a test
# failed (cleanup then keeps the logs and says where)
it_run() {
    local group=$1 outcome
    "$group"
    write_report integration "$results/${IT_REPORT:-integration}_$group.xml"
    for outcome in "${outcomes[@]}"; do
        if [ "$outcome" = fail ]; then
            KEEP_WORK=1
            exit 1
        fi
    done
    exit 0
}
