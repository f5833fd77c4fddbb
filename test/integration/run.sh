#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration tests of the crypt transport: real processes, real UCX.
#
#   test/integration/run.sh OBJDIR PREFIX RESULTS_DIR
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
# report goes to RESULTS_DIR/integration.xml. Everything created is
# removed on exit.
set -uo pipefail

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
mpi_check_src="$(dirname "$0")/mpi_check.c"
site_conf="$prefix/share/ucx-crypt/openmpi-mca-params.conf"
agent="$(cd "$(dirname "$0")/.." && pwd)/netns-agent.sh"
keygen="$prefix/bin/ucx-crypt-keygen"
work=$(mktemp -d /tmp/ucx-crypt-it.XXXXXX)
. "$(dirname "$0")/../netns.sh"
. "$(dirname "$0")/../lib/report.sh"
. "$(dirname "$0")/../lib/ports.sh"
. "$(dirname "$0")/../lib/machine.sh"
port_base=$(test_port_base) || exit 1

cleanup() {
    netns_down ucxc-h1 ucxc-h2
    pkill -f "$check" 2>/dev/null
    pkill -f "$work/mpi_check" 2>/dev/null
    pkill -f "$work/agc_" 2>/dev/null
    if [ -n "${KEEP_WORK:-}" ]; then
        echo "logs kept in $work (KEEP_WORK)"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

next_port() { port_base=$((port_base + 1)); echo $port_base; }

"$keygen" "$work/job.key"
"$keygen" "$work/other.key"

# crypt environment for one process: crypt on, job secret, loopback
crypt_env=(env LD_PRELOAD="$preload" UCX_TLS=crypt,tcp UCX_NET_DEVICES=lo
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
        record "$name" fail "$(tail -n 3 "$work/c.log" "$work/s.log")"
    fi
}

# The bulk engine needs an inner with puts (rc at a site); crypt's own
# wire has none. UCX's tcp stands in for rc where the engine is tested
# (UCX_CRYPT_INNER_UCX_TCP, test builds only).
rdma_like=(UCX_CRYPT_INNER_UCX_TCP=y)

test_ucp_sizes_verified() {
    local sizes=0,1,7,8,1000,8124,8125,65536,1048577,4194304,67108864
    # crypt's own wire (the default over Ethernet): rendezvous as bulk
    # segments on the connection, sealed on the progress thread straight
    # into their frames, or by the pool; UCP's get and put forced; and
    # every size as records with the engine off
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_own_wire \
        "bulk bytes sealed [1-9].*handshakes [1-9]" UCX_CRYPT_BULK_THREADS=0 \
        -- -s $sizes -n 2
    verified_pair ucp_tag_sizes_verified_own_wire_pool "bulk bytes sealed [1-9]" \
        UCX_CRYPT_BULK_THREADS=2 UCX_CRYPT_BULK_SEGMENT=64k -- -s $sizes -n 2
    verified_pair ucp_tag_rendezvous_get_verified_own_wire "bulk gets served [1-9]" \
        UCX_RNDV_SCHEME=get_zcopy -- -s 65536,1048577,4194304,16777216 -n 2
    # (the threshold too: UCP 1.16+ would send these eager, its estimate
    # of crypt's AM and put bandwidth being the same)
    verified_pair ucp_tag_rendezvous_put_verified_own_wire \
        "bulk bytes sealed [1-9].*bulk gets served 0," UCX_RNDV_SCHEME=put_zcopy \
        UCX_RNDV_THRESH=65536 -- -s 65536,1048577,4194304,16777216 -n 2
    # UCP 1.16+ chooses eager fragments or rendezvous, AM or put, by each
    # operation's bandwidth estimate: crypt's is the cipher's where one core
    # seals slower than the wire (here made slow for the test), and then
    # large messages go through the bulk engine's pool by UCP's own choice
    # (UCP 1.13's rendezvous threshold takes it anyway)
    verified_pair ucp_tag_slow_cipher_chooses_the_bulk_engine "bulk bytes sealed [1-9]" \
        UCX_CRYPT_TEST_SEAL_BANDWIDTH=1e8 UCX_CRYPT_BULK_THREADS=2 \
        -- -s 0,1,65536,1048577,4194304 -n 2
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_own_wire_am_only \
        "bulk bytes sealed 0 .*handshakes [1-9]" UCX_CRYPT_BULK=n -- -s $sizes -n 2
    # rendezvous through the bulk engine (encrypted put), pipelined and naive,
    # and through AM fragments with the engine off
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_bulk_pipelined "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" -- -s $sizes -n 2
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_bulk_naive "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_BULK_MODE=naive -- -s $sizes -n 2
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_am_only "bulk bytes sealed 0 " \
        "${rdma_like[@]}" UCX_CRYPT_BULK=n -- -s $sizes -n 2
    verified_pair ucp_tag_iov_datatype_verified "records sealed [1-9]" \
        -- -v -s 0,1,1000,65536,1048577,4194305 -n 2
    verified_pair ucp_tag_small_segments_many_threads_verified "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_BULK_SEGMENT=8k UCX_CRYPT_BULK_THREADS=2 \
        UCX_CRYPT_BULK_DEPTH=3 -- -s 65536,65537,1048577 -n 3
    # UCP's rendezvous by get (the peer seals and puts) and by put, forced
    verified_pair ucp_tag_rendezvous_get_verified "bulk gets served [1-9]" \
        "${rdma_like[@]}" UCX_RNDV_SCHEME=get_zcopy -- -s 65536,1048577,4194304,16777216 -n 2
    verified_pair ucp_tag_rendezvous_put_verified "bulk bytes sealed [1-9].*bulk gets served 0," \
        "${rdma_like[@]}" UCX_RNDV_SCHEME=put_zcopy -- -s 65536,1048577,4194304,16777216 -n 2
}

# ---- many rendezvous at once -------------------------------------------------
# Windows of messages outstanding together, each way (ucp_check -w): UCP
# queues them on its pending queues, the bulk engine on its bounce pool
# (a few segments deep here), the own wire behind its send buffer; every
# message arrives intact under its own tag.
test_many_rendezvous() {
    verified_pair many_rendezvous_in_flight_own_wire "bulk bytes sealed [1-9]" \
        UCX_CRYPT_BULK_THREADS=2 UCX_CRYPT_BULK_SEGMENT=64k -- \
        -s 8,65536,1048577 -w 128 -n 2
    verified_pair many_rendezvous_in_flight_bounce_pool_exhausted "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_BULK_SEGMENT=16k UCX_CRYPT_BULK_DEPTH=2 \
        UCX_CRYPT_BULK_THREADS=2 -- -s 65536,1048577 -w 128 -n 2
    verified_pair many_rendezvous_gets_in_flight "bulk gets served [1-9]" \
        "${rdma_like[@]}" UCX_RNDV_SCHEME=get_zcopy UCX_CRYPT_BULK_DEPTH=2 -- \
        -s 1048577,4194304 -w 32 -n 2
    verified_pair many_rendezvous_gets_in_flight_own_wire "bulk gets served [1-9]" \
        UCX_RNDV_SCHEME=get_zcopy -- -s 1048577,4194304 -w 32 -n 2
}

# key updates: both sides ratchet every 50 records, data stays intact
test_key_update() {
    verified_pair key_update_every_50_records_keeps_data_intact "key updates [1-9]" \
        UCX_CRYPT_REKEY_RECORDS=50 UCX_CRYPT_BULK=n -- -s 8,1000,100000 -n 100
    # bulk keys: updated between puts once 3 segments went out under one
    verified_pair bulk_key_update_every_3_segments_keeps_data_intact \
        "bulk key updates [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_REKEY_RECORDS=3 UCX_CRYPT_BULK_SEGMENT=64k -- \
        -s 1048577,262144,4194304 -n 4
    # ... and on crypt's own wire, sealed straight into frames and by the pool
    verified_pair bulk_key_update_own_wire_keeps_data_intact "bulk key updates [1-9]" \
        UCX_CRYPT_REKEY_RECORDS=3 UCX_CRYPT_BULK_SEGMENT=64k UCX_CRYPT_BULK_THREADS=0 -- \
        -s 1048577,262144,4194304 -n 4
    verified_pair bulk_key_update_own_wire_pool_keeps_data_intact "bulk key updates [1-9]" \
        UCX_CRYPT_REKEY_RECORDS=3 UCX_CRYPT_BULK_SEGMENT=64k UCX_CRYPT_BULK_THREADS=2 -- \
        -s 1048577,262144,4194304 -n 4
}

# ---- ucx_perftest over crypt ------------------------------------------------
test_perftest() {
    local t
    for t in "tag_lat -s 8" "tag_bw -s 1048576" "ucp_am_lat -s 64" "ucp_am_bw -s 65536" \
             "stream_bw -s 65536" "ucp_put_bw -s 65536" "ucp_get -s 65536"; do
        local port name; port=$(next_port); name="perftest_${t%% *}_over_crypt"
        "${crypt_env[@]}" timeout 60 ucx_perftest -p "$port" >"$work/ps.log" 2>&1 &
        local srv=$!
        sleep 0.3
        if "${crypt_env[@]}" UCX_CRYPT_STATS=y timeout 60 ucx_perftest 127.0.0.1 -p "$port" \
               -t $t -n 200 >"$work/pc.log" 2>&1 && wait $srv &&
           grep -q "^Final:" "$work/pc.log" && grep -q "opened [1-9]" "$work/pc.log"; then
            record "$name" pass
        else
            kill $srv 2>/dev/null; wait $srv 2>/dev/null
            record "$name" fail "$(tail -3 "$work/pc.log")"
        fi
    done
}

# ---- fail closed --------------------------------------------------------------
test_fail_closed() {
    local out
    out=$(env LD_PRELOAD="$preload" UCX_TLS=all UCX_CRYPT_KEY_FILE="$work/job.key" \
          ucx_info -d 2>&1)
    if grep -q "Component: crypt" <<<"$out" && ! grep -q "Component: tcp" <<<"$out" &&
       ! grep -q "Transport: tcp" <<<"$out"; then
        record network_components_hidden_behind_crypt pass
    else
        record network_components_hidden_behind_crypt fail "tcp still listed"
    fi

    # UCX_TLS=tcp alone: no plaintext transport to fall back to
    local port; port=$(next_port)
    env LD_PRELOAD="$preload" UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 20 "$check" -l "$port" \
        >"$work/s.log" 2>&1 &
    local srv=$!
    if env LD_PRELOAD="$preload" UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 20 "$check" \
           -c 127.0.0.1 -p "$port" -s 8 -n 1 >"$work/c.log" 2>&1; then
        record ucx_tls_tcp_refuses_plaintext fail "ucp_check succeeded over UCX_TLS=tcp"
    else
        record ucx_tls_tcp_refuses_plaintext pass
    fi
    kill $srv 2>/dev/null; wait $srv 2>/dev/null

    # The documented way to switch crypt on, UCX_TLS=crypt and the inner in
    # UCX_CRYPT_TLS, fails closed when the plugin is not loaded (a launcher
    # that drops LD_PRELOAD); the list form UCX_TLS=crypt,tcp is satisfied
    # by plaintext tcp then, which is why it is not the documented one
    local form rc
    for form in documented list; do
        local tls=(UCX_TLS=crypt UCX_CRYPT_TLS=tcp)
        [ "$form" = list ] && tls=(UCX_TLS=crypt,tcp)
        port=$(next_port)
        env "${tls[@]}" UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
            timeout 20 "$check" -l "$port" >"$work/s-$form.log" 2>&1 &
        srv=$!
        env "${tls[@]}" UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
            timeout 20 "$check" -c 127.0.0.1 -p "$port" -s 8 -n 1 >"$work/c-$form.log" 2>&1
        eval "rc_$form=$?"
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
    done
    if [ "$rc_documented" -ne 0 ] && [ "$rc_list" -eq 0 ]; then
        record documented_syntax_fails_closed_without_plugin pass
    else
        record documented_syntax_fails_closed_without_plugin fail \
            "UCX_TLS=crypt UCX_CRYPT_TLS=tcp rc=$rc_documented (must fail), control rc=$rc_list"
    fi

    # no job secret: refused with the fix, unless asked for by name
    out=$(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo \
          timeout 20 ucx_perftest -l -t tag_lat -n 10 2>&1)
    rc=$?
    local out_opt
    out_opt=$(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo \
              UCX_CRYPT_UNAUTHENTICATED=y ucx_info -d 2>&1)
    if [ $rc -ne 0 ] && grep -q "UCX_CRYPT_UNAUTHENTICATED=y" <<<"$out" &&
       grep -q "Transport: crypt" <<<"$out_opt" && grep -q "NOT authenticated\|not authenticated" <<<"$out_opt"; then
        record no_job_secret_refused_unless_asked_for_by_name pass
    else
        record no_job_secret_refused_unless_asked_for_by_name fail \
            "rc=$rc; $(tail -1 <<<"$out"); opt-in: $(grep -c 'Transport: crypt' <<<"$out_opt") crypt transports"
    fi

    out=$(env LD_PRELOAD="$preload" UCX_CRYPT_ENABLE=n ucx_info -d 2>&1)
    if grep -q "NOT encrypted" <<<"$out" && grep -q "Component: tcp" <<<"$out"; then
        record disable_switch_says_so pass
    else
        record disable_switch_says_so fail "no warning or tcp missing"
    fi
}

# ---- misconfiguration fails at startup with a fix ---------------------------
expect_startup_error() { # name pattern env...
    local name=$1 pattern=$2; shift 2
    local out
    out=$(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_NET_DEVICES=lo "$@" \
          timeout 20 ucx_perftest -l -t tag_lat -n 10 2>&1)
    if [ $? -ne 0 ] && grep -q -- "$pattern" <<<"$out"; then
        record "$name" pass
    else
        record "$name" fail "$(tail -2 <<<"$out")"
    fi
}

test_misconfiguration() {
    head -c 32 /dev/urandom >"$work/open.key"; chmod 644 "$work/open.key"
    head -c 16 /dev/urandom >"$work/short.key"; chmod 600 "$work/short.key"
    expect_startup_error missing_key_file_fails_with_hint "ucx-crypt-keygen" \
        UCX_CRYPT_KEY_FILE="$work/absent.key"
    expect_startup_error readable_key_file_fails_with_hint "chmod 600" \
        UCX_CRYPT_KEY_FILE="$work/open.key"
    expect_startup_error short_key_file_fails_with_hint "expected exactly 32" \
        UCX_CRYPT_KEY_FILE="$work/short.key"
    expect_startup_error unknown_inner_transport_fails_with_hint "UCX_CRYPT_TLS" \
        UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_TLS=nosuchtl
}

# ---- tamper matrix: the receiver detects, drops, names peer and reason -------
# The client tampers with its own records (UCX_CRYPT_FAULT, a test-only
# hook); the server must drop the record, fail the endpoint and say why.
# A ping-pong (ucp_check) verifies data; a stream (perftest tag_bw) has a
# record after a dropped or held one, which a ping-pong never sends.
tamper_case() { # fault expected-reason tool [client env...]
    local fault=$1 reason=$2 tool=$3; shift 3
    local port; port=$(next_port)
    local srv_cmd=("$check" -l "$port") cli_cmd=("$check" -c 127.0.0.1 -p "$port" -s 8 -n 400)
    if [ "$tool" = stream ]; then
        srv_cmd=(ucx_perftest -p "$port")
        cli_cmd=(ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s 8 -n 5000)
    elif [ "$tool" = bulk ]; then
        cli_cmd=("$check" -c 127.0.0.1 -p "$port" -s 1048576 -n 20)
    fi
    # in a subshell: the detecting server may abort (no UCP error handler),
    # and its shell would report that on the test's output
    local both=()
    [ "$tool" = bulk ] && both=("${rdma_like[@]}")
    ("${crypt_env[@]}" "${both[@]}" timeout 30 "${srv_cmd[@]}"; exit $?) >"$work/ts.log" 2>&1 &
    local srv=$!
    [ "$tool" = stream ] && sleep 0.3
    "${crypt_env[@]}" "${both[@]}" "$@" timeout 30 "${cli_cmd[@]}" >"$work/tc.log" 2>&1 &
    local cli=$!
    # the peer that detects it fails its endpoint; the tamperer then waits
    # forever for an answer: stop both once the verdict is in the log
    for _ in $(seq 100); do
        grep -q "dropped a record" "$work/ts.log" && break
        kill -0 $cli 2>/dev/null || break
        sleep 0.1
    done
    sleep 0.2
    kill $cli $srv 2>/dev/null
    wait $cli; local rc=$?
    wait $srv 2>/dev/null
    # on crypt's own wire the log names the peer's address too
    local at=""
    [ "$tool" != bulk ] && at=" at 127.0.0.1:[0-9]*"
    if [ $rc -ne 0 ] && ! grep -q "DATA OK" "$work/tc.log" &&
       grep -q "dropped a record from peer [0-9a-f]\{8\} flow 0x[0-9a-f]*$at.*: $reason" "$work/ts.log"; then
        record "tamper_${fault}_detected" pass
    else
        record "tamper_${fault}_detected" fail "rc=$rc; $(grep -m2 crypt "$work/ts.log")"
    fi
}

test_tamper() {
    local fault reason tool after
    # fault                 expected reason             tool      FAULT_AFTER
    while read -r fault reason tool after; do
        tamper_case "$fault" "${reason//_/ }" "$tool" UCX_CRYPT_FAULT="$fault" \
            UCX_CRYPT_FAULT_AFTER="$after"
    done <<'EOT'
flip_header             authentication_failed       pingpong  20
flip_ciphertext         authentication_failed       pingpong  20
flip_tag                authentication_failed       pingpong  20
truncate                authentication_failed       pingpong  20
replay                  replayed_record             pingpong  20
reorder                 reordered_or_dropped_record stream    20
drop                    reordered_or_dropped_record stream    20
inject                  authentication_failed       pingpong  20
bulk_flip_ciphertext    authentication_failed       bulk      6
bulk_flip_tag           authentication_failed       bulk      6
bulk_drop               bulk_segment_out_of_order   bulk      6
bulk_reorder            bulk_segment_out_of_order   bulk      6
bulk_truncate           authentication_failed       bulk      6
bulk_move               authentication_failed       bulk      6
bulk_splice             bulk_segment_out_of_order   bulk      6
EOT
    # (bulk: segments of the encrypted put of a 1 MiB rendezvous, over
    # the stand-in for rc; the server gets the same inner)

    # another job secret: refused at the wire's handshake (mac1), before a
    # single record is read; the server logs it and goes on
    # (UCX logs to stdout, which a killed process never flushes: stderr here)
    local port; port=$(next_port)
    ("${crypt_env[@]}" UCX_LOG_FILE=stderr timeout 15 "$check" -l "$port"; exit $?) \
        >"$work/ts.log" 2>&1 &
    local srv=$!
    "${crypt_env[@]}" UCX_LOG_FILE=stderr UCX_CRYPT_KEY_FILE="$work/other.key" timeout 5 \
        "$check" -c 127.0.0.1 -p "$port" -s 8 -n 20 >"$work/tc.log" 2>&1
    local rc=$?
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
    if [ $rc -ne 0 ] && ! grep -q "DATA OK" "$work/tc.log" &&
       grep -q "refused a connection from 127.0.0.1:[0-9]*: handshake initiation without a valid mac1" \
           "$work/ts.log" &&
       grep -q "crypt: connection to 127.0.0.1:[0-9]* (peer [0-9a-f]\{8\}) ended: \(Connection reset\|connection closed during the handshake\)" \
           "$work/tc.log"; then
        record another_job_secret_refused_at_the_handshake pass
    else
        record another_job_secret_refused_at_the_handshake fail \
            "rc=$rc; $(grep -m2 "crypt\|ucp_check" "$work/ts.log" "$work/tc.log" | tr '\n' ' ')"
    fi
}

test_plaintext_peer() {
    local port; port=$(next_port)
    "${crypt_env[@]}" timeout 15 "$check" -l "$port" >"$work/s.log" 2>&1 &
    local srv=$!
    env UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 15 "$check" -c 127.0.0.1 -p "$port" -s 8 -n 1 \
        >"$work/c.log" 2>&1
    local rc=$?
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
    if [ $rc -ne 0 ] && ! grep -q "DATA OK" "$work/c.log"; then
        record plaintext_peer_cannot_connect pass
    else
        record plaintext_peer_cannot_connect fail "plaintext client got through"
    fi
}

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
# with crypt's bulk get (a get the peer seals and puts, uct_crypt_get.c)
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

test_mpi() {
    if ! mpicc -O2 -o "$work/mpi_check_ompi" "$mpi_check_src" 2>"$work/cc.log" ||
       ! mpicc.mpich -O2 -o "$work/mpi_check_mpich" "$mpi_check_src" 2>>"$work/cc.log"; then
        record mpi_programs_build fail "$(tail -2 "$work/cc.log")"
        return
    fi

    ompi_run 3 -x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_STATS=y \
        "$work/mpi_check_ompi" >"$work/ompi.log" 2>&1
    mpi_verdict openmpi_site_config_pt2pt_put_get_collectives_verified "$work/ompi.log" 3 gets

    env UCX_TLS=crypt,tcp,self UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
        UCX_CRYPT_STATS=y timeout 120 "$prefix/bin/ucx-crypt-run" \
        mpiexec.mpich -n 2 "$work/mpi_check_mpich" >"$work/mpich.log" 2>&1
    mpi_verdict mpich_ucx_crypt_run_pt2pt_put_get_collectives_verified "$work/mpich.log" 2 gets

    # a forged record in an MPI job: the receiving rank names peer and
    # reason and the job ends with an error (never a hang, never "OK")
    cat >"$work/rank0-tampers.sh" <<'EOS'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export UCX_CRYPT_FAULT=flip_ciphertext UCX_CRYPT_FAULT_AFTER=30
exec "$@"
EOS
    chmod +x "$work/rank0-tampers.sh"
    ompi_run 2 -x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" \
        "$work/rank0-tampers.sh" "$work/mpi_check_ompi" >"$work/ompi-tamper.log" 2>&1
    abort_verdict openmpi_forged_record_aborts_job_with_reason $? "$work/ompi-tamper.log" \
        "MPI OK" "dropped a record from peer [0-9a-f]\{8\} flow .*authentication failed"
}

# ---- encrypted collectives through the PMPI adapter --------------------------
# Every all-gather algorithm under MPICH with emulated nodes, against the
# library's own PMPI_Allgather; default tuning under Open MPI; a forged frame
# aborts the job with the reason; a missing job secret says how to fix it.
test_collectives() {
    local src="$(dirname "$0")/mpi_allgather_check.c" alg map log
    if ! mpicc -O2 -o "$work/agc_ompi" "$src" 2>"$work/cc.log" ||
       ! mpicc.mpich -O2 -o "$work/agc_mpich" "$src" 2>>"$work/cc.log"; then
        record collectives_programs_build fail "$(tail -2 "$work/cc.log")"
        return
    fi
    local mpich=(timeout 120 mpiexec.mpich -n 6 env
                 LD_PRELOAD="$runtime_first$prefix/lib/libucxcrypt_pmpi_mpich.so"
                 UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_COLL_VERBOSE=y)
    for alg in naive o-ring o-rd o-rd2 c-ring c-rd hs1 hs2; do
        for map in 3:block 3:cyclic; do
            log="$work/agc-$alg-${map#*:}.log"
            "${mpich[@]}" UCX_CRYPT_COLL_NODES=$map UCX_CRYPT_COLL_TUNE=allgather:$alg \
                "$work/agc_mpich" >"$log" 2>&1
            if [ $? -eq 0 ] && [ "$(grep -c '^COLLECTIVES OK' "$log")" = 6 ] &&
               grep -q "by $alg on the .* lane .*: sealed [1-9]" "$log" &&
               ! grep "ucx-crypt: allgather" "$log" | grep -vq "plaintext across nodes 0$"; then
                record "allgather_${alg//-/_}_${map#*:}_matches_mpich" pass
            else
                record "allgather_${alg//-/_}_${map#*:}_matches_mpich" fail "$(tail -2 "$log")"
            fi
        done
    done

    "${ompi_env[@]}" timeout 120 mpirun -np 4 --oversubscribe \
        -x LD_PRELOAD="$runtime_first$prefix/lib/libucxcrypt_pmpi_ompi.so" -x UCX_CRYPT_COLL_NODES=2:cyclic \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_COLL_VERBOSE=y \
        "$work/agc_ompi" >"$work/agc-ompi.log" 2>&1
    if [ $? -eq 0 ] && [ "$(grep -c '^COLLECTIVES OK' "$work/agc-ompi.log")" = 4 ] &&
       grep -q "by c-ring" "$work/agc-ompi.log" && grep -q "by o-rd2" "$work/agc-ompi.log"; then
        record allgather_default_tuning_matches_openmpi pass
    else
        record allgather_default_tuning_matches_openmpi fail "$(tail -2 "$work/agc-ompi.log")"
    fi

    "${mpich[@]}" UCX_CRYPT_COLL_NODES=3:block UCX_CRYPT_COLL_FAULT=1 \
        UCX_CRYPT_COLL_TUNE=allgather:c-ring "$work/agc_mpich" >"$work/agc-forged.log" 2>&1
    abort_verdict allgather_forged_frame_aborts_job_with_reason $? "$work/agc-forged.log" \
        "COLLECTIVES OK" "failed authentication"

    test_collective_lane
    test_coll_component

    # MPICH 4.0.2 over UCX 1.13 hangs in MPI_Finalize now and then once an
    # MPI shared window was freed (plaintext too): the adapter must not
    # bring one into every job (its node segment is POSIX shared memory)
    local lib windows=""
    for lib in "$prefix"/lib/libucxcrypt_pmpi_*.so "$prefix"/lib/openmpi/mca_coll_crypt.so; do
        nm -D --undefined-only "$lib" | grep -q "Win_allocate_shared" && windows+="$lib "
    done
    if [ -z "$windows" ]; then
        record adapter_uses_no_mpi_shared_window pass
    else
        record adapter_uses_no_mpi_shared_window fail "calls MPI_Win_allocate_shared: $windows"
    fi

    local attempt rc
    for attempt in 1 2; do
        timeout 60 mpiexec.mpich -n 2 env LD_PRELOAD="$runtime_first$prefix/lib/libucxcrypt_pmpi_mpich.so" \
            UCX_CRYPT_COLL_NODES=2 "$work/agc_mpich" >"$work/agc-nokey.log" 2>&1
        rc=$?
        # a second try only if no rank got as far as MPI_Init (a launcher
        # hiccup: seen once in CI, right after the aborted Open MPI jobs)
        grep -q "ucx-crypt\|UCX" "$work/agc-nokey.log" && break
    done
    if [ $rc -ne 0 ] && grep -q "UCX_CRYPT_KEY_FILE is not set: make a job secret" \
           "$work/agc-nokey.log"; then
        record allgather_without_job_secret_fails_with_hint pass
    else
        record allgather_without_job_secret_fails_with_hint fail \
            "rc=$rc; $(tail -3 "$work/agc-nokey.log" | tr '\n' ' ')"
    fi
}

# ---- the collective lane: frames between nodes not sealed a second time -----
# sealed_by_transport LOG: the crypt transport's bytes sealed (records and
# bulk), summed over the job's processes
sealed_by_transport() {
    sed -n 's/.*records sealed [0-9]* (\([0-9]*\) bytes).*bulk bytes sealed \([0-9]*\).*/\1 \2/p' "$1" |
        awk '{ s += $1 + $2 } END { print s + 0 }'
}

test_collective_lane() {
    local lane_env=(-x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo -x UCX_CRYPT_STATS=y
                    -x LD_PRELOAD="$runtime_first$prefix/lib/libucxcrypt_pmpi_ompi.so"
                    -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_COLL_VERBOSE=y)
    local mode on_lane through_mpi rc
    # steady state, 8 x 1 MiB per rank on two emulated nodes: Open MPI over
    # the crypt transport (site configuration), frames on the lane vs the
    # same run with frames through the MPI library (the control)
    for mode in auto transport; do
        ompi_run 2 "${lane_env[@]}" -x UCX_CRYPT_COLL_NODES=2 -x UCX_CRYPT_COLL_LANE=$mode \
            "$work/agc_ompi" -s 1048576 8 >"$work/lane-$mode.log" 2>&1
    done
    on_lane=$(sealed_by_transport "$work/lane-auto.log")
    through_mpi=$(sealed_by_transport "$work/lane-transport.log")
    if [ "$(grep -c '^STEADY OK' "$work/lane-auto.log")" = 2 ] &&
       [ "$(grep -c '^STEADY OK' "$work/lane-transport.log")" = 2 ] &&
       [ "$(grep -c 'on the collective lane' "$work/lane-auto.log")" = 16 ] &&
       [ "$on_lane" -lt 65536 ] && [ "$through_mpi" -ge $((2 * 8 * 1048576)) ]; then
        record collective_frames_take_the_lane_not_sealed_twice pass \
            "transport sealed $on_lane B with the lane, $through_mpi B without"
    else
        record collective_frames_take_the_lane_not_sealed_twice fail \
            "transport sealed $on_lane B with the lane, $through_mpi B without; $(grep -m2 -v '^\[ucx-crypt\|^ucx-crypt: allgather' "$work/lane-auto.log")"
    fi

    # a frame forged on the lane: the job ends with the reason
    ompi_run 4 "${lane_env[@]}" -x UCX_CRYPT_COLL_NODES=2:block -x UCX_CRYPT_COLL_FAULT=1 \
        -x UCX_CRYPT_COLL_TUNE=allgather:c-ring "$work/agc_ompi" >"$work/lane-forged.log" 2>&1
    abort_verdict collective_lane_forged_frame_aborts_job_with_reason $? \
        "$work/lane-forged.log" "COLLECTIVES OK" "failed authentication" "no collective lane"

    # MPICH over the crypt transport (the launcher's preload plus the adapter)
    timeout 120 mpiexec.mpich -n 2 env LD_PRELOAD="$preload:$prefix/lib/libucxcrypt_pmpi_mpich.so" \
        UCX_TLS=crypt,tcp UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
        UCX_CRYPT_COLL_NODES=2 UCX_CRYPT_COLL_VERBOSE=y "$work/agc_mpich" >"$work/lane-mpich.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^COLLECTIVES OK' "$work/lane-mpich.log")" = 2 ] &&
       grep -q "on the collective lane" "$work/lane-mpich.log" &&
       ! grep -q "on the MPI lane" "$work/lane-mpich.log"; then
        record collective_lane_mpich_matches_pmpi pass
    else
        record collective_lane_mpich_matches_pmpi fail "rc=$rc; $(tail -2 "$work/lane-mpich.log")"
    fi

    # Every default `ucx_info -c -f` prints for crypt, written back into the
    # environment of a job (as a site's configuration file would), with
    # only the job secret set: each knob means the same to the transport
    # and to the MPI adapter, so nothing changes
    local defaults=()
    mapfile -t defaults < <(LD_PRELOAD="$preload" ucx_info -c -f 2>/dev/null |
                            grep '^UCX_CRYPT_' | grep -v '^UCX_CRYPT_KEY_FILE=')
    timeout 120 mpiexec.mpich -n 2 env LD_PRELOAD="$preload:$prefix/lib/libucxcrypt_pmpi_mpich.so" \
        UCX_TLS=crypt,tcp UCX_NET_DEVICES=lo "${defaults[@]}" \
        UCX_CRYPT_KEY_FILE="$work/job.key" "$work/agc_mpich" >"$work/defaults.log" 2>&1
    rc=$?
    if [ ${#defaults[@]} -gt 10 ] && [ $rc -eq 0 ] &&
       [ "$(grep -c '^COLLECTIVES OK' "$work/defaults.log")" = 2 ]; then
        record printed_defaults_written_back_change_nothing pass
    else
        record printed_defaults_written_back_change_nothing fail \
            "${#defaults[@]} defaults, rc=$rc; $(grep -m2 -i 'ucx-crypt\|error' "$work/defaults.log")"
    fi

    # a value the adapter's typed parser refuses ends the job with the fix
    timeout 120 mpiexec.mpich -n 2 env LD_PRELOAD="$preload:$prefix/lib/libucxcrypt_pmpi_mpich.so" \
        UCX_TLS=crypt,tcp UCX_NET_DEVICES=lo UCX_CRYPT_COLL_NODES=2 UCX_CRYPT_COLL_LANE=sideways \
        UCX_CRYPT_KEY_FILE="$work/job.key" "$work/agc_mpich" >"$work/bad-knob.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && ! grep -q '^COLLECTIVES OK' "$work/bad-knob.log" &&
       grep -q 'UCX_CRYPT_COLL_LANE=sideways: use auto or transport' "$work/bad-knob.log"; then
        record misconfigured_collective_knob_fails_with_the_fix pass
    else
        record misconfigured_collective_knob_fails_with_the_fix fail \
            "rc=$rc; $(tail -2 "$work/bad-knob.log")"
    fi
}

# ---- Open MPI's coll component, loaded by the site configuration alone -----
test_coll_component() {
    local coll_env=(-x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo
                    -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_COLL_VERBOSE=y)
    local log="$work/coll-component.log" rc
    # every check of mpi_allgather_check: no preload, no flag
    ompi_run 4 "${coll_env[@]}" -x UCX_CRYPT_COLL_NODES=2:cyclic "$work/agc_ompi" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^COLLECTIVES OK' "$log")" = 4 ] &&
       grep -q "by c-ring on the collective lane" "$log" &&
       grep -q "by o-rd2 on the collective lane" "$log" &&
       grep -q "allgatherv on the collective lane (sent there so far [0-9]*): sealed [1-9]" "$log" &&
       grep -q "alltoallv on the collective lane (sent there so far [0-9]*): sealed [1-9]" "$log" &&
       ! grep "plaintext across nodes" "$log" | grep -vq "plaintext across nodes 0$"; then
        record openmpi_coll_component_collectives_verified pass
    else
        record openmpi_coll_component_collectives_verified fail "rc=$rc; $(tail -2 "$log")"
    fi
    # the nonblocking forms, outstanding together, through the adapter's
    # tasks (the program checked their results above); 64 KiB by the table:
    # HS2 in the node's shared segment
    local what missing=""
    for what in "iallgather 65536 B by hs2" "iallgather 3000 B by o-rd2" \
                "ibcast 100000 B" "ibcast 3000 B" "iallreduce 400000 B" \
                "ialltoall 4000 B" "iallgatherv" "ialltoallv"; do
        # on every rank; sealed by some (a bcast by its root alone)
        [ "$(grep -c "ucx-crypt: $what on the collective lane " "$log")" = 4 ] &&
            grep -q "ucx-crypt: $what on the collective lane .*: sealed [1-9]" "$log" ||
            missing+="$what; "
    done
    if [ $rc -eq 0 ] && [ -z "$missing" ]; then
        record openmpi_coll_component_nonblocking_collectives_as_tasks pass
    else
        record openmpi_coll_component_nonblocking_collectives_as_tasks fail \
            "rc=$rc; not on every rank: $missing"
    fi

    # Fortran: Open MPI's bindings bypass MPI_Allgather (PMPI cannot see
    # them); the component does, MPI_IALLGATHER included
    log="$work/coll-fortran.log"
    if ! mpif90 -O2 -o "$work/agc_fortran" "$(dirname "$0")/mpi_allgather_check.f90" \
            >"$work/cc.log" 2>&1; then
        record openmpi_coll_component_reaches_fortran fail "$(tail -2 "$work/cc.log")"
    else
        ompi_run 4 "${coll_env[@]}" -x UCX_CRYPT_COLL_NODES=2:block "$work/agc_fortran" >"$log" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && [ "$(grep -c '^FORTRAN OK' "$log")" = 4 ] &&
           [ "$(grep -c 'ucx-crypt: allgather 4000 B .*sealed [1-9]' "$log")" = 4 ] &&
           [ "$(grep -c 'ucx-crypt: iallgather 4000 B .*sealed [1-9]' "$log")" = 4 ]; then
            record openmpi_coll_component_reaches_fortran pass
        else
            record openmpi_coll_component_reaches_fortran fail "rc=$rc; $(tail -2 "$log")"
        fi
    fi

    # a forged frame ends the job with the reason, as with the PMPI library
    log="$work/coll-forged.log"
    ompi_run 4 "${coll_env[@]}" -x UCX_CRYPT_COLL_NODES=2:block -x UCX_CRYPT_COLL_FAULT=2 \
        -x UCX_CRYPT_COLL_TUNE=allgather:c-rd "$work/agc_ompi" >"$log" 2>&1
    abort_verdict openmpi_coll_component_forged_frame_aborts_job $? "$log" \
        "COLLECTIVES OK" "failed authentication"

    # nonblocking collectives first on their communicators, and large
    # ones on two communicators at once (one team's frame waits for the
    # other's to the same peer on the lane)
    log="$work/coll-nb.log"
    ompi_run 4 "${coll_env[@]}" -x UCX_CRYPT_COLL_NODES=2:cyclic \
        -x UCX_CRYPT_COLL_TUNE=allgather:o-ring "$work/agc_ompi" -n >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^NONBLOCKING OK' "$log")" = 4 ] &&
       [ "$(grep -c "ucx-crypt: iallgather 8388608 B by o-ring on the collective lane" "$log")" = 8 ]; then
        record openmpi_coll_component_concurrent_nonblocking_collectives pass
    else
        record openmpi_coll_component_concurrent_nonblocking_collectives fail \
            "rc=$rc; $(grep -m2 "ucx-crypt: \|UCX  ERROR\|differ" "$log")"
    fi

    # ... and a forged frame in a nonblocking collective ends the job too
    # (the abort then comes from inside Open MPI's progress loop)
    log="$work/coll-forged-nb.log"
    ompi_run 4 "${coll_env[@]}" -x UCX_CRYPT_COLL_NODES=2:block -x UCX_CRYPT_COLL_FAULT=1 \
        "$work/agc_ompi" -n >"$log" 2>&1
    abort_verdict openmpi_coll_component_forged_frame_in_nonblocking_aborts_job $? "$log" \
        "NONBLOCKING OK" "MPI_I\?[A-Za-z]*: a ciphertext from another node failed authentication"

    # no job secret: the component stands aside, the library's collectives
    # run (over the crypt transport, told to run without one) and the
    # program still gets its data
    log="$work/coll-nokey.log"
    ompi_run 2 -x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo -x UCX_CRYPT_COLL_VERBOSE=y \
        -x UCX_CRYPT_UNAUTHENTICATED=y \
        -x UCX_CRYPT_COLL_NODES=2 "$work/agc_ompi" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^COLLECTIVES OK' "$log")" = 2 ] &&
       ! grep -q "ucx-crypt: allgather" "$log"; then
        record openmpi_coll_component_stands_aside_without_job_secret pass
    else
        record openmpi_coll_component_stands_aside_without_job_secret fail "rc=$rc; $(tail -2 "$log")"
    fi
}

# the site configuration tool edits only its own block of the file
test_site_config_tool() {
    local conf="$work/openmpi-mca-params.conf" tool="$prefix/bin/ucx-crypt-site-config"
    printf '# site file\nbtl_tcp_if_include = eth0\n' >"$conf"
    cp "$conf" "$work/orig.conf"
    "$tool" enable "$conf" >/dev/null && "$tool" enable "$conf" >/dev/null
    local enabled; enabled=$("$tool" show "$conf")
    if [ "$(grep -c '^pml = ucx$' "$conf")" = 1 ] && grep -q "^btl_tcp_if_include = eth0" "$conf" &&
       grep -q "ucx-crypt-run$" "$conf" && [[ $enabled == *"enabled in"* ]] &&
       "$tool" disable "$conf" >/dev/null && cmp -s "$conf" "$work/orig.conf" &&
       [[ $("$tool" show "$conf") == *"not enabled"* ]]; then
        record site_config_enable_disable_round_trip pass
    else
        record site_config_enable_disable_round_trip fail "$(cat "$conf")"
    fi

    # ucx-crypt-run sets UCX_TLS and UCX_CRYPT_TLS as UCP must read them
    # before the program starts (a 1.22 plugin comes too late to change them)
    local run="$prefix/bin/ucx-crypt-run" got=""
    launched() { # UCX_TLS [UCX_CRYPT_TLS] -> "UCX_TLS|UCX_CRYPT_TLS" the program sees
        env -u UCX_TLS -u UCX_CRYPT_TLS ${1:+UCX_TLS=$1} ${2:+UCX_CRYPT_TLS=$2} \
            "$run" sh -c 'echo "${UCX_TLS-unset}|${UCX_CRYPT_TLS-unset}"'
    }
    got="$(launched crypt,tcp) $(launched crypt,rc) $(launched crypt dc) $(launched '') $(launched tcp)"
    if [ "$got" = "crypt|tcp crypt,crypt_aux:aux|rc crypt,crypt_aux:aux|dc unset|unset tcp|unset" ]; then
        record launcher_sets_ucx_tls_and_crypt_tls pass
    else
        record launcher_sets_ucx_tls_and_crypt_tls fail "got: $got"
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

# ---- the wire: two hosts, capture, marker ------------------------------------
wire_run() { # label crypt(0|1|plugin) [sizes [env...]] -> prints marker count in the capture
    local label=$1 crypt=$2 sizes=${3:-8,1000,65536,1048576} port; port=$(next_port)
    local envs=(UCX_TLS=tcp)
    [ "$crypt" = 1 ] && envs=(LD_PRELOAD="$preload" UCX_TLS=crypt,tcp
                              UCX_CRYPT_KEY_FILE="$work/job.key")
    # loaded by UCX itself (1.22+), nothing preloaded
    [ "$crypt" = plugin ] && envs=(UCX_PLUGIN_PATH="$plugin_dir" UCX_TLS=crypt
                                   UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key")
    shift 2; shift $(( $# > 0 ))
    envs+=("$@")
    ip netns exec ucxc-h1 tcpdump -i ucxc-v1 -U -s 0 -w "$work/$label.pcap" \
        >"$work/$label.tcpdump.log" 2>&1 &
    local dump=$!
    sleep 1
    on_host ucxc-h1 ucxc-v1 "${envs[@]}" timeout 60 "$check" -l "$port" \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    on_host ucxc-h2 ucxc-v2 "${envs[@]}" timeout 60 "$check" -c 10.77.0.1 -p "$port" \
        -s "$sizes" -n 3 >"$work/$label.c.log" 2>&1
    local rc=$?
    wait $srv
    sleep 0.5
    kill -INT $dump; wait $dump 2>/dev/null
    local hits
    hits=$(grep -a -o "UCXCRYPT-MARKER-" "$work/$label.pcap" | wc -l)
    echo "$rc $hits"
}

# mpi_wire_run LABEL PARAM_FILE: Open MPI across the two hosts (mpirun on
# h1, the remote daemon started through netns-agent.sh on h2), veth
# captured; prints "rc markers"
mpi_wire_run() { # LABEL PARAM_FILE [mpirun args...]
    local label=$1 params=$2
    shift 2
    ip netns exec ucxc-h1 tcpdump -i ucxc-v1 -U -s 0 -w "$work/$label.pcap" \
        >"$work/$label.tcpdump.log" 2>&1 &
    local dump=$!
    sleep 1
    on_host ucxc-h1 ucxc-v1 env OMPI_MCA_mca_base_param_files="$params" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        NETNS_AGENT_HOSTS="10.77.0.1=ucxc-h1=ucxc-v1 10.77.0.2=ucxc-h2=ucxc-v2" \
        timeout 120 mpirun -np 2 --host 10.77.0.1,10.77.0.2 --mca plm_rsh_agent "$agent" \
        --mca oob_tcp_if_include ucxc-v1,ucxc-v2 --mca btl_tcp_if_include ucxc-v1,ucxc-v2 \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_STATS=y "$@" \
        "$work/mpi_check_ompi" -s 8,1000,65536,1048576 >"$work/$label.log" 2>&1
    local rc=$?
    sleep 0.5
    kill -INT $dump; wait $dump 2>/dev/null
    echo "$rc $(grep -a -o "UCXCRYPT-MARKER-" "$work/$label.pcap" | wc -l)"
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

# coll_wire_run LABEL plain|adapter: MPI_Allgather of marker data across the
# two hosts (2 ranks each), plaintext UCX underneath (no crypt transport),
# with or without the PMPI adapter; prints "rc markers ok-ranks"
coll_wire_run() {
    local label=$1 mode=$2 pre=()
    [ "$mode" = adapter ] && pre=(-x LD_PRELOAD="$runtime_first$prefix/lib/libucxcrypt_pmpi_ompi.so"
                                  -x UCX_CRYPT_KEY_FILE="$work/job.key")
    ip netns exec ucxc-h1 tcpdump -i ucxc-v1 -U -s 0 -w "$work/$label.pcap" \
        >"$work/$label.tcpdump.log" 2>&1 &
    local dump=$!
    sleep 1
    on_host ucxc-h1 ucxc-v1 env OMPI_MCA_mca_base_param_files=/dev/null \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        NETNS_AGENT_HOSTS="10.77.0.1=ucxc-h1=ucxc-v1 10.77.0.2=ucxc-h2=ucxc-v2" \
        timeout 120 mpirun -np 4 --oversubscribe --host 10.77.0.1:2,10.77.0.2:2 \
        --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include ucxc-v1,ucxc-v2 \
        --mca pml ucx --mca osc ucx --mca btl self,vader --mca opal_common_ucx_tls any \
        --mca opal_common_ucx_devices any -x UCX_TLS=tcp,sm,self \
        -x UCX_WARN_UNUSED_ENV_VARS=n -x UCX_CRYPT_COLL_NODES=2:block "${pre[@]}" \
        "$work/agc_ompi" -m >"$work/$label.log" 2>&1
    local rc=$?
    sleep 0.5
    kill -INT $dump; wait $dump 2>/dev/null
    echo "$rc $(grep -a -o "UCXCRYPT-MARKER-" "$work/$label.pcap" | wc -l)" \
         "$(grep -c "^COLLECTIVES OK" "$work/$label.log")"
}

test_wire() {
    two_hosts_up wire_setup || return
    local plain crypt
    plain=$(wire_run plain 0)
    crypt=$(wire_run crypt 1)
    echo "  wire: plaintext run rc/markers: $plain; crypt run rc/markers: $crypt"
    if [ "${plain%% *}" = 0 ] && [ "${plain##* }" -gt 0 ]; then
        record wire_marker_visible_without_crypt pass
    else
        record wire_marker_visible_without_crypt fail "plain run: $plain"
    fi
    if [ "${crypt%% *}" = 0 ] && [ "${crypt##* }" -eq 0 ] && grep -q "DATA OK" "$work/crypt.c.log"; then
        record wire_marker_never_on_wire_with_crypt pass
    else
        record wire_marker_never_on_wire_with_crypt fail "crypt run: $crypt"
    fi

    # the same MPI program twice, all defaults: without the site
    # configuration Open MPI quietly takes ob1 + btl tcp (plaintext)
    if [ -x "$work/mpi_check_ompi" ]; then
        plain=$(mpi_wire_run mpi-plain /dev/null)
        crypt=$(mpi_wire_run mpi-crypt "$site_conf")
        echo "  wire (MPI): without site config rc/markers: $plain; with it: $crypt"
        # (the control only has to show that the capture would see the marker:
        # Open MPI 4.1.4's ob1 sometimes exits 1 at finalize across the hosts)
        if [ "${plain##* }" -gt 0 ]; then
            record mpi_wire_marker_visible_without_site_config pass
        else
            record mpi_wire_marker_visible_without_site_config fail "plain run: $plain"
        fi
        mpi_wire_verdict mpi_wire_marker_never_on_wire_with_site_config "$crypt" \
            "$work/mpi-crypt.log"
    fi

    # the collectives' adapter on its own: all-gather data between the two
    # hosts is sealed even with a plaintext transport underneath
    [ -x "$work/agc_ompi" ] || return
    local res
    plain=$(coll_wire_run coll-plain plain)
    crypt=$(coll_wire_run coll-adapter adapter)
    echo "  wire (MPI_Allgather): plaintext rc/markers/ok: $plain; adapter: $crypt"
    read -r -a res <<<"$plain"
    if [ "${res[1]}" -gt 0 ]; then
        record allgather_wire_marker_visible_without_adapter pass
    else
        record allgather_wire_marker_visible_without_adapter fail "plain run: $plain"
    fi
    read -r -a res <<<"$crypt"
    if [ "${res[0]}" = 0 ] && [ "${res[1]}" = 0 ] && [ "${res[2]}" = 4 ]; then
        record allgather_wire_marker_never_on_wire_with_adapter pass
    else
        record allgather_wire_marker_never_on_wire_with_adapter fail \
            "adapter run: $crypt; $(tail -2 "$work/coll-adapter.log")"
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
aux_envs=(UCX_CRYPT_EMULATE_CONNECT_TO_EP=y UCX_NUM_EPS=4096)

test_aux_lane() {
    two_hosts_up aux_setup || return
    local res
    res=$(wire_run aux 1 0,8,65536,1048576,67108864 "${aux_envs[@]}" UCX_LOG_LEVEL=debug)
    read -r -a res <<<"$res"
    if [ "${res[0]}" = 0 ] && [ "${res[1]}" = 0 ] && grep -q "DATA OK" "$work/aux.c.log" &&
       grep -q "aux_ep .* using crypt_aux/" "$work/aux.c.log" &&
       grep -q "lane\[0\]: .*crypt/ucxc-v2" "$work/aux.c.log"; then
        record connect_to_ep_lanes_wired_up_through_crypt_aux pass
    else
        record connect_to_ep_lanes_wired_up_through_crypt_aux fail \
            "rc/markers ${res[*]}; $(grep -m2 'ERROR\|unreachable' "$work/aux.c.log")"
    fi

    [ -x "$work/mpi_check_ompi" ] || return
    local aux_x=() e
    for e in "${aux_envs[@]}"; do aux_x+=(-x "$e"); done
    mpi_wire_verdict openmpi_across_hosts_with_connect_to_ep_lanes \
        "$(mpi_wire_run mpi-aux "$site_conf" "${aux_x[@]}")" "$work/mpi-aux.log"

    env UCX_TLS=crypt,tcp,self UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
        UCX_CRYPT_STATS=y "${aux_envs[@]}" timeout 120 "$prefix/bin/ucx-crypt-run" \
        mpiexec.mpich -n 2 "$work/mpi_check_mpich" >"$work/mpich-aux.log" 2>&1
    mpi_verdict mpich_with_connect_to_ep_lanes_verified "$work/mpich-aux.log" 2
    netns_down ucxc-h1 ucxc-h2
}

# ---- a stranger on the network ------------------------------------------------
# attacker.py (no job secret) hits every listening TCP port of a crypt
# process on the other emulated host with garbage, oversized lengths, a
# half-open flood, a replayed handshake, a forged HELLO with a real peer's
# key and UCX tcp's own frames (a PUT aimed at the victim's canary), while
# an honest client transfers verified data to it. The victim must survive
# with its canary intact, the honest transfer must complete, and the
# victim must have counted what it refused.
attack_run() { # LABEL [victim env...] -> victim, client and attacker logs
    local label=$1 port; port=$(next_port)
    shift
    # (the attacker needs the start of the honest traffic only: its first
    # messages to replay, a public key; the capture stops before the
    # attacks, its whole transfer was gigabytes)
    ip netns exec ucxc-h1 tcpdump -i ucxc-v1 -U -s 0 -w "$work/$label.pcap" \
        >"$work/$label.tcpdump.log" 2>&1 &
    local dump=$!
    sleep 1
    on_host ucxc-h1 ucxc-v1 "$@" UCX_CRYPT_STATS=y timeout 300 "$check" -l "$port" -C \
        >"$work/$label.victim.log" 2>&1 &
    local victim=$! canary="" ports=""
    for _ in $(seq 50); do
        canary=$(awk '/^CANARY 0x/ {print $2}' "$work/$label.victim.log")
        [ -n "$canary" ] && break
        sleep 0.1
    done
    # every TCP port the victim's host listens on, but the test's own
    # address-exchange socket (not part of the product)
    ports=$(ip netns exec ucxc-h1 ss -ltnH | awk '{print $4}' | sed 's/.*://' |
            grep -v "^$port\$" | sort -u | paste -sd, -)
    echo "  $label: victim ports $ports, canary $canary"
    # the honest client outlasts the attacks (about 10 s per port); its
    # 8000 round trips of 1 MiB took over 120 s on a busy 2-core machine,
    # and the victim's timeout, not the attacks, ended them (which a
    # "known open" skip had hidden)
    on_host ucxc-h2 ucxc-v2 "$@" timeout 300 "$check" -c 10.77.0.1 -p "$port" \
        -s 8,65536,1048576 -n 3000 >"$work/$label.client.log" 2>&1 &
    local client=$!
    sleep 1
    kill -INT $dump; wait $dump 2>/dev/null
    ip netns exec ucxc-h2 timeout 100 python3 "$(dirname "$0")/attacker.py" 10.77.0.1 \
        "$ports" "${canary:-0}" "$work/$label.pcap" "${ATTACKS:-}" \
        >"$work/$label.attacker.log" 2>&1
    kill -0 $client 2>/dev/null && echo "  $label: the honest transfer outlasted the attacks"
    wait $client; local crc=$?
    wait $victim; local vrc=$?
    echo "$crc $vrc"
}

test_attacker() {
    two_hosts_up attacker_setup || return
    local res refused
    res=$(attack_run attack LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp \
                     UCX_CRYPT_KEY_FILE="$work/job.key")
    echo "$res" | head -n -1
    res=$(echo "$res" | tail -n 1)
    sed 's/^/    /' "$work/attack.attacker.log"
    refused=$(grep -o "strangers refused [0-9]*" "$work/attack.victim.log" | awk '{print $3}')
    if [ "$res" = "0 0" ] && grep -q "^DATA OK" "$work/attack.client.log" &&
       grep -q "^CANARY INTACT" "$work/attack.victim.log" &&
       [ "$(grep -c "^attack " "$work/attack.attacker.log")" -ge 8 ] &&
       [ "${refused:-0}" -gt 0 ]; then
        record stranger_attacks_dropped_victim_survives_honest_data_verified pass
    else
        record stranger_attacks_dropped_victim_survives_honest_data_verified fail \
            "client/victim rc $res, refused ${refused:-none}; $(grep -m1 "CANARY\|DATA" \
            "$work/attack.victim.log" "$work/attack.client.log" | tr '\n' ' ')"
    fi
    # what the victim's log said of them: rate-limited, never a flood
    if [ "$(grep -c "refused a connection" "$work/attack.victim.log")" -le 20 ]; then
        record stranger_attacks_logged_rate_limited pass
    else
        record stranger_attacks_logged_rate_limited fail \
            "$(grep -c "refused a connection" "$work/attack.victim.log") lines"
    fi
    netns_down ucxc-h1 ucxc-h2
}

# ---- peers that die, links that are cut, peers that are busy -------------------
# Both ends learn: a peer killed mid-transfer (its kernel closes the
# connections without crypt's CLOSE) and a link taken down (nothing comes
# back at all: UCX_CRYPT_KEEPALIVE: keepalive probes on an idle connection,
# no acknowledgement for the data in flight on a busy one)
# fail the endpoints of the side that is left, with the peer's address
# and the reason, within a bounded time, which the test prints. A peer
# that is only busy fails nothing, however long (busy_peer_run).
# failure_envs [plain]: the caller's `envs`, crypt with a 3 s keepalive or
# (plain) UCX's own tcp
failure_envs() {
    envs=(LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
          UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_KEEPALIVE=3s
          UCX_LOG_FILE=stderr)
    [ -n "${1:-}" ] && envs=(UCX_TLS=tcp UCX_LOG_FILE=stderr)
    return 0
}

peer_failure_run() { # LABEL how(kill|kill-client|cut) [plain] -> seconds until the survivor's log says so
    local label=$1 how=$2 plain=${3:-} port envs; port=$(next_port)
    failure_envs "$plain"
    local noticed="crypt: connection .*ended\|crypt: connection from .*ended"
    if [ -n "$plain" ]; then
        # the same with UCX's own tcp, for comparison: what UCX or the
        # program says about the failure, if anything
        noticed="UCX  ERROR\|ucp_check: size"
    fi
    local srv_cmd=("$check" -l "$port")
    local cli_cmd=("$check" -c 10.77.0.1 -p "$port" -s 65536,1048576 -n 100000)
    on_host ucxc-h1 ucxc-v1 "${envs[@]}" timeout 60 "${srv_cmd[@]}" \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    sleep 0.3
    on_host ucxc-h2 ucxc-v2 "${envs[@]}" timeout 60 "${cli_cmd[@]}" \
        >"$work/$label.c.log" 2>&1 &
    local cli=$!
    # at a random point of the transfer loop (64 KiB and 1 MiB messages:
    # records and bulk segments both in flight)
    sleep "$((1 + RANDOM % 3)).$((RANDOM % 10))"
    local t0; t0=$(date +%s.%N)
    if [ "$how" = kill ]; then
        # the server's ucp_check: the newest process of that name on h1
        ip netns exec ucxc-h1 pkill -KILL -n -f "$check -l $port"
    elif [ "$how" = kill-client ]; then
        ip netns exec ucxc-h2 pkill -KILL -n -f "$check -c 10.77.0.1 -p $port"
    else
        ip -n ucxc-h2 link set ucxc-v2 down
    fi
    local t=""
    for _ in $(seq 200); do
        if grep -q "$noticed" "$work/$label.c.log" "$work/$label.s.log" 2>/dev/null; then
            t=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.1f", a - b}')
            break
        fi
        sleep 0.1
    done
    if [ -n "$t" ] && [[ $how == kill* ]]; then
        # UCP's error mode none (ucp_check's): nobody above takes the
        # endpoint error, so the survivor must end by itself, not wait
        local survivor=$cli gone=no
        [ "$how" = kill-client ] && survivor=$srv
        for _ in $(seq 100); do
            kill -0 "$survivor" 2>/dev/null || { gone=yes; break; }
            sleep 0.1
        done
        echo "$gone" >"$work/$label.survivor_ended"
    fi
    kill $cli $srv 2>/dev/null
    wait $cli $srv 2>/dev/null
    [ "$how" = cut ] && ip -n ucxc-h2 link set ucxc-v2 up
    echo "${t:-none}"
}

# the program an on_host PID runs (unshare -> timeout -> the program)
program_pid() { # PID
    local pid=$1 child
    while child=$(pgrep -P "$pid" | head -1) && [ -n "$child" ]; do
        pid=$child
    done
    echo "$pid"
}

# busy_peer_run LABEL [plain] -> "CLIENT_RC SERVER_RC ENDED": a bandwidth
# test whose receiver stops (SIGSTOP: a rank busy computing, a debugger)
# for three keepalive periods while the sender fills its buffers, then
# runs again. ENDED counts the connections crypt ended meanwhile.
busy_peer_run() {
    local label=$1 plain=${2:-} port envs; port=$(next_port)
    failure_envs "$plain"
    on_host ucxc-h1 ucxc-v1 "${envs[@]}" timeout 120 ucx_perftest -p "$port" \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    wait_listening ucxc-h1 "$port"
    on_host ucxc-h2 ucxc-v2 "${envs[@]}" timeout 120 \
        ucx_perftest 10.77.0.1 -p "$port" -t tag_bw -s 65536 -n 20000 \
        >"$work/$label.c.log" 2>&1 &
    local cli=$!
    sleep 0.5
    local prog; prog=$(program_pid "$srv")
    kill -STOP "$prog"
    # (the sender still running: the stop came in the middle of it)
    local running=yes
    kill -0 "$cli" 2>/dev/null || running="ended-before-the-stop"
    sleep 9
    kill -CONT "$prog"
    local crc=0 src=0
    wait "$cli" || crc=$?
    wait "$srv" || src=$?
    [ "$running" = yes ] || crc=$running
    echo "$crc $src $(cat "$work/$label.s.log" "$work/$label.c.log" | grep -c "crypt: connection .*ended")"
}

# killed_verdict NAME LABEL HOW WHO SURVIVOR_LOG DEAD_IP: kill one side
# mid-transfer; the survivor's log names the dead peer's address and why,
# and (error mode none) the survivor ends with that message within 10 s
killed_verdict() {
    local name=$1 label=$2 how=$3 who=$4 log="$work/$2.$5.log" ip=$6 t
    t=$(peer_failure_run "$label" "$how")
    echo "  $who killed mid-transfer: the other side's endpoint failed after ${t} s"
    if [ "$t" != none ] &&
       grep -q "crypt: connection \(to\|from\) $ip:[0-9]* (peer [0-9a-f]\{8\}) ended: " "$log"; then
        record "$name" pass
    else
        record "$name" fail "$(grep -m2 crypt "$log")"
    fi
    if [ "$(cat "$work/$label.survivor_ended" 2>/dev/null)" = yes ] &&
       grep -q "crypt: endpoint to peer [0-9a-f]\{8\} .*failed (connection lost) and no error handler took it: aborting" "$log"; then
        record "${label//-/_}_survivor_ends_with_the_reason_in_error_mode_none" pass
    else
        record "${label//-/_}_survivor_ends_with_the_reason_in_error_mode_none" fail \
            "ended by itself: $(cat "$work/$label.survivor_ended" 2>/dev/null); $(grep -m1 "Fatal" "$log")"
    fi
}

test_peer_failure() {
    two_hosts_up peer_failure_setup || return
    local t
    killed_verdict killed_peer_fails_the_survivors_endpoint_with_address_and_reason \
        killed kill server c 10.77.0.1
    killed_verdict killed_client_fails_the_servers_endpoint_with_address_and_reason \
        killed-client kill-client client s 10.77.0.2
    # UCX's own tcp in the same two cases, for comparison (informational:
    # ucp_check runs in UCP's error mode none)
    local pk pc
    if [ -z "$sanitizer_runtime" ]; then # (none of our code runs there)
        pk=$(peer_failure_run plain-killed kill plain)
        pc=$(peer_failure_run plain-cut cut plain)
        [ "$pk" = none ] && pk="not within 20 s" || pk="after $pk s"
        [ "$pc" = none ] && pc="not within 20 s" || pc="after $pc s"
        echo "  plaintext UCX tcp (for comparison, error mode none): peer killed:" \
             "noticed $pk; link cut: noticed $pc"
    fi
    # a busy peer is a slow one: over tcp (the control, same run) and over
    # crypt the transfer ends by itself once it runs again, nothing failed
    local plain crypt
    plain=$(busy_peer_run busy-plain plain)
    crypt=$(busy_peer_run busy)
    echo "  server stopped 9 s (3 keepalive periods) under ucx_perftest tag_bw:" \
         "plain tcp [$plain], crypt [$crypt] (client rc, server rc, connections ended; want 0 0 0)"
    if [ "$plain" != "0 0 0" ]; then
        record busy_peer_is_not_failed_and_the_transfer_ends fail "the plain control failed: $plain"
    elif [ "$crypt" = "0 0 0" ]; then
        record busy_peer_is_not_failed_and_the_transfer_ends pass
    else
        record busy_peer_is_not_failed_and_the_transfer_ends fail \
            "crypt: $crypt; $(grep -h -m2 "crypt: conn\|ERROR" "$work/busy.c.log" "$work/busy.s.log")"
    fi
    t=$(peer_failure_run cut cut)
    echo "  link cut (UCX_CRYPT_KEEPALIVE=3s): an endpoint failed after ${t} s"
    if [ "$t" != none ] && awk -v t="$t" 'BEGIN {exit !(t < 20)}'; then
        record cut_link_noticed_within_the_keepalive_bound pass
    else
        record cut_link_noticed_within_the_keepalive_bound fail \
            "after ${t} s; $(grep -m1 "crypt: conn" "$work/cut.s.log" "$work/cut.c.log")"
    fi
    netns_down ucxc-h1 ucxc-h2
}

# ---- loaded by UCX's own module loader (UCX_PLUGIN_PATH, 1.22+) ---------------
# No LD_PRELOAD: UCX loads PREFIX/lib/ucx-crypt/plugins/libuct_crypt.so.0
# from inside uct_query_components; crypt loads the other modules itself,
# takes every network component off the list before UCP's snapshot, and
# registers. UCP parsed its configuration before: UCX_TLS=crypt with the
# inner in UCX_CRYPT_TLS, and UCX_SOCKADDR_TLS_PRIORITY=crypt, as the
# launcher sets them.
test_plugin_path() {
    local version minor
    version=$(ucx_runtime_version)
    minor=$(echo "$version" | cut -d. -f2)
    if [ "${minor:-0}" -lt 22 ]; then
        record plugin_path_loading skip "UCX $version has no plugin loader (UCX_PLUGIN_PATH is 1.22+); LD_PRELOAD there"
        return
    fi
    local penv=(UCX_PLUGIN_PATH="$plugin_dir" UCX_CRYPT_KEY_FILE="$work/job.key")
    local info
    info=$(env "${penv[@]}" UCX_TLS=crypt UCX_CRYPT_TLS=tcp ucx_info -d 2>&1)
    if grep -q "Component: crypt" <<<"$info" && grep -q "Connection manager: crypt" <<<"$info" &&
       ! grep -q "Component: tcp" <<<"$info" && ! grep -q "Transport: tcp" <<<"$info"; then
        record plugin_path_ucx_info_shows_crypt_and_no_network pass
    else
        record plugin_path_ucx_info_shows_crypt_and_no_network fail \
            "$(grep "Component:" <<<"$info" | tr '\n' ' ')"
    fi
    # preloaded and named by UCX_PLUGIN_PATH at once (a launcher's preload
    # in a site that also sets the path): one crypt, no hang
    info=$(env "${penv[@]}" LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp \
           timeout 60 ucx_info -d 2>&1)
    if [ "$(grep -c "Component: crypt" <<<"$info")" = 1 ] &&
       ! grep -q "Component: tcp" <<<"$info"; then
        record plugin_path_and_preload_together_one_crypt pass
    else
        record plugin_path_and_preload_together_one_crypt fail \
            "$(grep "Component:" <<<"$info" | tr '\n' ' ')"
    fi
    # fail closed: a program that asks for tcp gets no transport
    if env "${penv[@]}" UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 30 "$check" -c 127.0.0.1 \
           -p "$(next_port)" -s 8 -n 1 >"$work/plugin-closed.log" 2>&1; then
        record plugin_path_ucx_tls_tcp_refuses_plaintext fail "ucp_check succeeded over UCX_TLS=tcp"
    elif grep -q "ucp_init: No such device" "$work/plugin-closed.log"; then
        record plugin_path_ucx_tls_tcp_refuses_plaintext pass
    else
        record plugin_path_ucx_tls_tcp_refuses_plaintext fail "$(tail -2 "$work/plugin-closed.log")"
    fi
    # connect-to-ep data lanes (the rc emulation): with nothing preloaded
    # the loader cannot add "crypt_aux:aux" to UCX_TLS; without it UCP
    # fails as it fails for rc without ud, with it the data is verified
    local tls rc port
    for tls in crypt crypt,crypt_aux:aux; do
        port=$(next_port)
        env "${penv[@]}" "${aux_envs[@]}" UCX_TLS=$tls UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo \
            timeout 60 "$check" -l "$port" >"$work/plugin-aux.s.log" 2>&1 &
        local srv=$!
        sleep 1
        env "${penv[@]}" "${aux_envs[@]}" UCX_TLS=$tls UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo \
            timeout 60 "$check" -c 127.0.0.1 -p "$port" -s 0,1000,1048577 -n 2 \
            >"$work/plugin-aux.$tls.log" 2>&1
        rc=$?
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        if [ "$tls" = crypt ]; then
            if [ $rc != 0 ] && grep -q "no auxiliary transport" "$work/plugin-aux.$tls.log"; then
                record plugin_path_connect_to_ep_without_crypt_aux_fails_as_rc_does pass
            else
                record plugin_path_connect_to_ep_without_crypt_aux_fails_as_rc_does fail \
                    "rc $rc; $(tail -2 "$work/plugin-aux.$tls.log" | tr '\n' ' ')"
            fi
        elif [ $rc = 0 ] && grep -q "DATA OK" "$work/plugin-aux.$tls.log"; then
            record plugin_path_connect_to_ep_with_crypt_aux_verified pass
        else
            record plugin_path_connect_to_ep_with_crypt_aux_verified fail \
                "rc $rc; $(tail -2 "$work/plugin-aux.$tls.log" | tr '\n' ' ')"
        fi
    done

    two_hosts_up plugin_path_setup || return
    local res
    res=$(wire_run plugin plugin 0,8,65536,1048576,16777216)
    if [ "$res" = "0 0" ] && grep -q "DATA OK" "$work/plugin.c.log"; then
        record plugin_path_data_verified_marker_never_on_wire pass
    else
        record plugin_path_data_verified_marker_never_on_wire fail \
            "rc/markers $res; $(grep -m2 'ERROR\|ucp_check' "$work/plugin.c.log")"
    fi
    res=$(cs_pair cs-plugin "${penv[*]} UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_SOCKADDR_TLS_PRIORITY=crypt UCX_CRYPT_STATS=y" \
          "${penv[*]} UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_SOCKADDR_TLS_PRIORITY=crypt UCX_CRYPT_STATS=y" \
          -- -c 10.77.0.1 -s 0,1000,1048577 -n 2)
    cs_verdict plugin_path_client_server_verified "$res" cs-plugin
    netns_down ucxc-h1 ucxc-h2
}

# ---- an on-path relay --------------------------------------------------------
# relay.py sits in front of each side's wire port (each side advertises its
# relay's port, as behind a port-forwarding middlebox: test-only
# UCX_CRYPT_WIRE_PORT / _ADVERTISE_PORT) and, past the handshake, flips,
# truncates, drops, duplicates, reorders, injects or cuts bytes of the
# established connection (the one that carries both directions). Both
# sides must fail with a reason, and nothing corrupted is delivered.
relay_case() { # MODE
    local mode=$1 port; port=$(next_port)
    # (next_port runs in a subshell: offsets from it)
    local wire1=$((port + 5000)) relay1=$((port + 6000))
    local wire2=$((port + 7000)) relay2=$((port + 8000))
    local envs=(LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
                UCX_CRYPT_KEY_FILE="$work/job.key" UCX_LOG_FILE=stderr)
    local log="$work/relay-$mode"
    # a relay in front of each side's wire port: whichever connection ends
    # up carrying both directions passes one
    ip netns exec ucxc-h1 timeout 30 python3 "$(dirname "$0")/relay.py" 10.77.0.1 "$relay1" \
        10.77.0.1 "$wire1" "$mode" 4096 >"$log.relay1.log" 2>&1 &
    local r1=$!
    ip netns exec ucxc-h2 timeout 30 python3 "$(dirname "$0")/relay.py" 10.77.0.2 "$relay2" \
        10.77.0.2 "$wire2" "$mode" 4096 >"$log.relay2.log" 2>&1 &
    local r2=$!
    for _ in $(seq 50); do
        grep -q "relay: listening" "$log.relay1.log" 2>/dev/null &&
            grep -q "relay: listening" "$log.relay2.log" 2>/dev/null && break
        sleep 0.1
    done
    on_host ucxc-h1 ucxc-v1 "${envs[@]}" UCX_CRYPT_WIRE_PORT="$wire1" \
        UCX_CRYPT_WIRE_ADVERTISE_PORT="$relay1" timeout 30 "$check" -l "$port" \
        >"$log.s.log" 2>&1 &
    local srv=$!
    sleep 0.3
    on_host ucxc-h2 ucxc-v2 "${envs[@]}" UCX_CRYPT_WIRE_PORT="$wire2" \
        UCX_CRYPT_WIRE_ADVERTISE_PORT="$relay2" timeout 30 "$check" -c 10.77.0.1 \
        -p "$port" -s 8,65536 -n 3000 >"$log.c.log" 2>&1 &
    local cli=$!
    local failed="dropped a record from peer [0-9a-f]\{8\}\|crypt: connection \(to\|from\) 10.77.0.[12]:[0-9]* (peer [0-9a-f]\{8\}) ended: "
    for _ in $(seq 100); do
        grep -q "$failed" "$log.c.log" && grep -q "$failed" "$log.s.log" && break
        kill -0 $cli 2>/dev/null || break
        sleep 0.1
    done
    sleep 0.3
    kill $cli $srv $r1 $r2 2>/dev/null
    wait $cli $srv $r1 $r2 2>/dev/null
    if cat "$log.relay1.log" "$log.relay2.log" | grep -q "relay: $mode" &&
       grep -q "$failed" "$log.s.log" && grep -q "$failed" "$log.c.log" &&
       ! grep -q "DATA MISMATCH\|DATA OK" "$log.c.log"; then
        record "on_path_${mode}_fails_both_ends_nothing_corrupted" pass
    else
        record "on_path_${mode}_fails_both_ends_nothing_corrupted" fail \
            "$(grep -h -m1 "relay: $mode\|crypt: conn\|dropped" "$log.relay1.log" \
               "$log.relay2.log" "$log.s.log" "$log.c.log" | tr '\n' ' ')"
    fi
}

test_relay() {
    two_hosts_up relay_setup || return
    local mode
    for mode in flip truncate drop duplicate reorder inject cut_record; do
        relay_case "$mode"
    done
    netns_down ucxc-h1 ucxc-h2
}

. "$(dirname "$0")/client_server.sh"

# ---- leaks at exit (a --enable-sanitizers build only) ---------------------------
# Our own UCP programs with LeakSanitizer on: everything the plugin
# allocated for workers, endpoints, connections, registrations, the bulk
# engine and the connection manager is freed by the time the program
# exits (LeakSanitizer makes the exit code non-zero otherwise).
test_leaks() {
    [[ $sanitizer_runtime == *libasan* ]] || return 0
    local leaks=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1)
    local sizes=0,1,8125,65536,1048577,4194304
    verified_pair no_leak_at_exit_own_wire_records_and_bulk "bulk bytes sealed [1-9]" \
        "${leaks[@]}" UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_BULK_THREADS=2 \
        -- -s $sizes -n 3
    verified_pair no_leak_at_exit_bulk_engine_over_a_ucx_inner "bulk bytes sealed [1-9]" \
        "${leaks[@]}" "${rdma_like[@]}" UCX_CRYPT_REKEY_RECORDS=100 -- -s $sizes -n 3
    two_hosts_up leaks_setup || return
    local res
    res=$(cs_pair cs-leaks "${cs_crypt[*]} ${leaks[*]}" "${cs_crypt[*]} ${leaks[*]}" \
          -- -c 10.77.0.1 -s 0,65536,1048577 -n 2)
    cs_verdict no_leak_at_exit_client_server "$res" cs-leaks
    netns_down ucxc-h1 ucxc-h2
}

# IT_ONLY=REGEX runs only the test groups whose function name matches
for group in test_ucp_sizes_verified test_many_rendezvous test_key_update test_perftest test_fail_closed \
             test_misconfiguration test_tamper test_plaintext_peer test_mpi \
             test_collectives test_site_config_tool test_wire test_aux_lane test_attacker test_peer_failure test_relay \
             test_client_server test_plugin_path test_leaks; do
    if [ -z "${IT_ONLY:-}" ] || [[ $group =~ $IT_ONLY ]]; then
        $group
    fi
done

# ---- report -------------------------------------------------------------------
write_report integration "$results/${IT_REPORT:-integration}.xml"
exit 0
