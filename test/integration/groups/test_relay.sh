#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_relay (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_relay.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

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
    ip netns exec ucxc-h1 timeout 30 python3 "$it_dir/relay.py" 10.77.0.1 "$relay1" \
        10.77.0.1 "$wire1" "$mode" 4096 >"$log.relay1.log" 2>&1 &
    local r1=$!
    ip netns exec ucxc-h2 timeout 30 python3 "$it_dir/relay.py" 10.77.0.2 "$relay2" \
        10.77.0.2 "$wire2" "$mode" 4096 >"$log.relay2.log" 2>&1 &
    local r2=$!
    # (until both listen, or one ended: the event, not a guess of the time)
    until { grep -q "relay: listening" "$log.relay1.log" 2>/dev/null &&
            grep -q "relay: listening" "$log.relay2.log" 2>/dev/null; } ||
          ! kill -0 $r1 2>/dev/null || ! kill -0 $r2 2>/dev/null; do
        sleep 0.1
    done
    on_host ucxc-h1 ucxc-v1 "${envs[@]}" UCX_CRYPT_WIRE_PORT="$wire1" \
        UCX_CRYPT_WIRE_ADVERTISE_PORT="$relay1" timeout 30 "$check" -l "$port" \
        >"$log.s.log" 2>&1 &
    local srv=$!
    wait_listening ucxc-h1 "$port" "$!"
    on_host ucxc-h2 ucxc-v2 "${envs[@]}" UCX_CRYPT_WIRE_PORT="$wire2" \
        UCX_CRYPT_WIRE_ADVERTISE_PORT="$relay2" timeout 30 "$check" -c 10.77.0.1 \
        -p "$port" -s 8,65536 -n 3000 >"$log.c.log" 2>&1 &
    local cli=$!
    local failed="dropped a record from peer [0-9a-f]\{8\}\|crypt: connection \(to\|from\) 10.77.0.[12]:[0-9]* (peer [0-9a-f]\{8\}) ended: "
    # (until both ends said it, or one ended: their own limit ends a hang)
    until { grep -q "$failed" "$log.c.log" && grep -q "$failed" "$log.s.log"; } ||
          ! kill -0 $cli 2>/dev/null || ! kill -0 $srv 2>/dev/null; do
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

it_run test_relay
