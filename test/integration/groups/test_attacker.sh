#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_attacker (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_attacker.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

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
    capture_start "$label"
    on_host ucxc-h1 ucxc-v1 "$@" UCX_CRYPT_STATS=y timeout 300 "$check" -l "$port" -C \
        >"$work/$label.victim.log" 2>&1 &
    local victim=$! canary="" ports=""
    # (until the victim said it, or ended)
    while kill -0 $victim 2>/dev/null; do
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
    kill -INT "$capture_pid"; wait "$capture_pid" 2>/dev/null
    ip netns exec ucxc-h2 timeout 100 python3 "$it_dir/attacker.py" 10.77.0.1 \
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

it_run test_attacker
