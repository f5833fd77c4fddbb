#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_wireup_storm (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_wireup_storm.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# ---- a big job's wireup storm is not an attack --------------------------------
# Ranks of many nodes wiring up to rank 0 at once: 64 UCP workers of one
# process on one emulated host open 64 endpoints each to one worker on the
# other, 4,096 flows, and send a message on each (test/perf/many_peers.c,
# -w/-e and -r). Every message arrives once, over plain UCX tcp (the
# control, same run) and over crypt; and at crypt's hub no honest
# connection is taken for a stranger's (reclaimed from the half-open
# slots), none is answered with a cookie reply (a round trip the storm
# did not need), no flow is refused, and neither side counts a failure.
# many_peers.sh measures the same storm (setup time, memory per flow).
storm_workers=64
storm_eps=64

storm_run() { # LABEL ENV... -> the hub's log in $work/LABEL.hub.log; rc
    local label=$1 storm rc
    shift
    rm -f "$work/$label.addr"*
    on_host ucxc-h1 ucxc-v1 "$@" timeout 120 "$obj/test/perf/many_peers" \
        -r $((storm_workers * storm_eps)) -f "$work/$label.addr" \
        >"$work/$label.hub.log" 2>&1 &
    local hub=$!
    on_host ucxc-h2 ucxc-v2 "$@" timeout 120 "$obj/test/perf/many_peers" \
        -w $storm_workers -e $storm_eps -f "$work/$label.addr" \
        >"$work/$label.storm.log" 2>&1 &
    storm=$!
    wait $hub
    rc=$?
    wait $storm || rc=$?
    return $rc
}

# the hub's counter NAME from its UCX_CRYPT_STATS line ("NAME N")
hub_counter() { # LABEL NAME
    grep -o "$2 [0-9]*" "$work/$1.hub.log" | head -1 | awk '{print $NF}'
}

test_wireup_storm() {
    two_hosts_up wireup_storm_setup || return
    local flows=$((storm_workers * storm_eps)) name

    name=wireup_storm_plain_tcp_control
    if storm_run plain UCX_TLS=tcp &&
       grep -q "^hub: flows $flows " "$work/plain.hub.log" &&
       grep -q "^storm: closed" "$work/plain.storm.log"; then
        record "$name" pass
    else
        record "$name" fail "$(tail -n 2 "$work/plain.hub.log" "$work/plain.storm.log")"
    fi

    name=wireup_storm_every_flow_established_no_refusal_no_eviction_no_cookie
    storm_run crypt LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp \
        UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_BULK_THREADS=0 UCX_CRYPT_STATS=y
    local rc=$? evicted cookies refused failed
    evicted=$(hub_counter crypt "strangers refused")
    cookies=$(hub_counter crypt "cookie replies")
    refused=$(sed -n 's/.*flows ended [0-9]*, refused \([0-9]*\).*/\1/p' \
              "$work/crypt.hub.log" | head -1)
    # every failure reason, both sides: "reason N" where N is not 0
    failed=$(cat "$work/crypt.hub.log" "$work/crypt.storm.log" |
             grep -o "\(failed\|replayed record\|dropped record\|unknown flow\|malformed record\|handshake refused\|failed flow\|out of order\|this side\|connection lost\|connections failed\) [1-9][0-9]*" |
             tr '\n' ' ')
    echo "  crypt hub: $(sed -n 's/^hub: flows/flows/p' "$work/crypt.hub.log"); reclaimed from" \
         "the half-open slots $evicted, cookie replies $cookies, flows refused $refused"
    if [ $rc = 0 ] && grep -q "^hub: flows $flows " "$work/crypt.hub.log" &&
       grep -q "^storm: closed" "$work/crypt.storm.log" &&
       [ "$evicted" = 0 ] && [ "$cookies" = 0 ] && [ "$refused" = 0 ] && [ -z "$failed" ]; then
        record "$name" pass
    else
        record "$name" fail "rc $rc, reclaimed ${evicted:-?}, cookie replies ${cookies:-?}, flows refused ${refused:-?}, failures: ${failed:-none}; $(tail -n 2 "$work/crypt.hub.log" "$work/crypt.storm.log" | cut -c1-300)"
    fi
}

it_run test_wireup_storm
