#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_tamper (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_tamper.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

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
    [ "$tool" = stream ] && wait_listening - "$port" "$srv"
    "${crypt_env[@]}" "${both[@]}" "$@" timeout 30 "${cli_cmd[@]}" >"$work/tc.log" 2>&1 &
    local cli=$!
    # the peer that detects it fails its endpoint; the tamperer then waits
    # forever for an answer: stop both once the verdict is in the log, or
    # when either ended (their own time limit ends a hang): the event, not
    # a guess of the time a busy host takes
    while kill -0 $cli 2>/dev/null && kill -0 $srv 2>/dev/null &&
          ! grep -q "dropped a record" "$work/ts.log"; do
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
bulk_flip_ciphertext    authentication_failed       bulk      3
bulk_flip_tag           authentication_failed       bulk      3
bulk_drop               bulk_segment_out_of_order   bulk      3
bulk_reorder            bulk_segment_out_of_order   bulk      3
bulk_truncate           authentication_failed       bulk      3
bulk_move               authentication_failed       bulk      3
bulk_splice             bulk_segment_out_of_order   bulk      3
EOT
    # (bulk: segments of the encrypted put of a 1 MiB rendezvous, over
    # the stand-in for rc; the server gets the same inner. Segments ramp,
    # 64, 128, 256, 256, 256, 64 KiB: the third is in the middle of the
    # first message, with segments after it that show a dropped one and
    # room in the region for a moved one; the sixth, its last, is neither)

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

it_run test_tamper
