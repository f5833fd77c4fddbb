#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The failure sweep (issue 29): a local resource that fails (memory for
# secrets, a cipher context, randomness, a key derivation) must fail the
# endpoint with its reason, never put a byte in clear on the wire, never
# hang, and never cost the other side its next honest peer. As SQLite's
# tests sweep out-of-memory, this fails the N-th such call of one process,
# for N = 1, 2, ... up to the number of calls the process makes, once in
# the client and once in the server of a pair across two emulated hosts,
# and captures the veth.
#
#   test/integration/failure_sweep.sh OBJDIR PREFIX RESULTS_DIR
#
# SWEEP_ROLES (client server), SWEEP_CALLS (the N to fail, all by default)
# and SWEEP_ENV (more VAR=VALUE for every crypt process, UCX_LOG_LEVEL=diag
# say) narrow a run down to a failure; KEEP_WORK=1 keeps the logs.
#
# OBJDIR/PREFIX: a test build (--enable-fault-injection: CRYPT_TEST_FAIL_CALL
# exists only there). The pair is cs_check (UCP's client/server API, error
# mode peer: crypt's connection manager, its own wire, records and the bulk
# engine), every size class, UCX's default device list, as a user runs it.
#
# Each N, failing in the client: a server serves; the failing client runs;
# then an honest client must be served. Failing in the server: the server
# runs failing and honest clients connect one after the other: the one the
# failure hits may fail, each that starts after it must be served while
# the server lives. A step passes when
#   - no marker byte string crossed the veth in it (the capture),
#   - the failing process ended by itself, not by a signal or the timeout,
#   - it said what failed (a crypt error naming the resource), and
#     either verified its data or ended with an error,
#   - the honest clients ended, and were served where the server lived.
# A control run with plain UCX tcp shows that the capture sees the marker.
# The report says how many calls and distinct call sites were reached.
. "$(dirname "$0")/../lib/group.sh" failure_sweep "$@"

run="$prefix/bin/ucx-crypt-run"
keygen="$prefix/bin/ucx-crypt-keygen"
check="$obj/test/integration/cs_check"
plugin=$(ls "$prefix"/lib/libuct_crypt.so* 2>/dev/null | head -1)
sizes=${SWEEP_SIZES:-8,1000,65536,1048577}
if [ ! -x "$check" ] || [ -z "$plugin" ]; then
    verdict failure_sweep_setup 0 "no $check or no plugin under $prefix/lib"
    group_finish
fi
if ! grep -qa CRYPT_TEST_FAIL_CALL "$plugin"; then
    verdict failure_sweep_setup 0 "$plugin is not a test build (configure --enable-fault-injection)"
    group_finish
fi

"$keygen" "$work/job.key" >/dev/null || exit 1
crypt_env=(env UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key" ${SWEEP_ENV:-} "$run")
port=$(test_port_base) || exit 1

group_hosts ucxf-h1 ucxf-h2
if ! netns_up ucxf-h1 ucxf-h2 ucxf-v1 ucxf-v2 10.79.0.1 10.79.0.2; then
    verdict failure_sweep_setup 0 "cannot create network namespaces"
    group_finish
fi

# The veth's capture, one file for a whole series; each step writes its
# start and end time, and markers_between counts the marker in the packets
# captured between them
capture_start() { # FILE
    ip netns exec ucxf-h1 tcpdump -i ucxf-v1 -U -s 0 -w "$1" \
        >"$1.log" 2>&1 &
    capture_pid=$!
    pids+=("$capture_pid")
    sleep 1
}

capture_stop() {
    sleep 0.3
    kill -INT "$capture_pid" 2>/dev/null
    wait "$capture_pid" 2>/dev/null
}

# markers_between PCAP FROM TO: packets with the marker, captured from FROM
# to TO (seconds since the epoch); "all" counts the whole capture
markers_between() {
    python3 - "$@" <<'EOF'
import struct, sys
path, lo, hi = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(path, 'rb').read()
order = '<' if data[:4] == b'\xd4\xc3\xb2\xa1' else '>'
nano = data[:4] in (b'\x4d\x3c\xb2\xa1', b'\xa1\xb2\x3c\x4d')
pos, hits = 24, 0
while pos + 16 <= len(data):
    sec, frac, incl, _ = struct.unpack(order + 'IIII', data[pos:pos + 16])
    t = sec + frac / (1e9 if nano else 1e6)
    packet = data[pos + 16:pos + 16 + incl]
    pos += 16 + incl
    if lo != 'all' and not (float(lo) <= t <= float(hi)):
        continue
    hits += b'UCXCRYPT-MARKER-' in packet
print(hits)
EOF
}

# server_start LABEL CLIENTS ENV...: a server that serves CLIENTS clients
# and exits (0: until stopped)
server_start() {
    local label=$1 clients=$2
    shift 2
    port=$((port + 1))
    on_host_defaults ucxf-h1 "$@" timeout 120 "$check" -l "$port" -k "$clients" \
        >"$work/$label.server.log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    wait_listening ucxf-h1 "$port"
}

# client LABEL ENV...: one client's run; prints its exit status
client() {
    local label=$1
    shift
    on_host_defaults ucxf-h2 "$@" timeout 30 "$check" -c 10.79.0.1 -p "$port" \
        -s "$sizes" -n 1 >"$work/$label.log" 2>&1
    echo $?
}

server_alive() {
    kill -0 "$server_pid" 2>/dev/null && [ -n "$(pgrep -P "$server_pid")" ]
}

# ---- the control: plain tcp shows the marker, crypt hides it ----------------
capture_start "$work/control.pcap"
server_start control-plain 0 env UCX_TLS=tcp
plain=$(client control-plain-client env UCX_TLS=tcp)
stop_tree "$server_pid"
server_start control-crypt 0 "${crypt_env[@]}"
crypt=$(client control-crypt-client "${crypt_env[@]}")
stop_tree "$server_pid"
capture_stop
plain_hits=$(markers_between "$work/control.pcap" all all)
echo "  control: plain tcp rc $plain ($plain_hits packets with the marker)," \
     "crypt rc $crypt"
verdict failure_sweep_control_plain_shows_marker \
    "$([ "$plain" = 0 ] && [ "$plain_hits" -gt 0 ] && echo 1 || echo 0)" \
    "plain tcp rc $plain, $plain_hits packets with the marker"
if [ "$plain" != 0 ] || [ "$plain_hits" -eq 0 ] || [ "$crypt" != 0 ]; then
    verdict failure_sweep_control_crypt 0 "crypt rc $crypt: $(tail -2 "$work/control-crypt-client.log")"
    group_finish
fi

# What a failing process must say, whether it went on or not: a crypt error
# that names the resource that failed (src/aead's crypt_local_failure
# phrases), not only a status
said_why() { # LOG
    grep -q "UCX  ERROR *crypt: .*\(no memory for secrets\|cipher context\|random generator\|X25519\|HKDF\|HMAC-SHA256\|SHA-256\)" "$1"
}

# sweep ROLE: fail the N-th call of the client or the server, N = 1..count
sweep() {
    local role=$1 count n from to hits rc honest hit k step_ok reason made
    local fail_env why reached=0 bad=0 absorbed=0 errors=0
    : >"$work/$role.sites"
    # The count: the same run, nothing failed. Which side opens crypt's own
    # connection, and so how many calls each makes, differs from run to run
    # (the lower key's side carries both directions): the most of three
    # runs, and two past it. A client's count grows with what its steps
    # made (each step is one client's whole life); a server's steps serve
    # two clients, the count one.
    count=0
    for k in 1 2 3; do
        if [ "$role" = client ]; then
            server_start "$role-count" 0 "${crypt_env[@]}"
            rc=$(client "$role-count$k-client" "${crypt_env[@]}" env CRYPT_TEST_FAIL_CALL=0)
            stop_tree "$server_pid"
            why="$work/$role-count$k-client.log"
        else
            # (one client: the server exits by itself and prints its count)
            server_start "$role-count$k" 1 "${crypt_env[@]}" env CRYPT_TEST_FAIL_CALL=0
            rc=$(client "$role-count$k-client" "${crypt_env[@]}")
            wait "$server_pid"
            why="$work/$role-count$k.server.log"
        fi
        made=$(sed -n 's/.*TESTING: \([0-9]*\) fallible calls.*/\1/p' "$why" | tail -1)
        if [ "$rc" != 0 ] || [ -z "$made" ]; then
            verdict "failure_sweep_${role}_count" 0 "the unfailed run: rc $rc, count '$made'"
            return
        fi
        [ "$made" -gt "$count" ] && count=$made
    done
    local limit=$((count + 2)) i=0 calls=(${SWEEP_CALLS:-})
    capture_start "$work/$role.pcap"
    while :; do
        if [ "${#calls[@]}" -gt 0 ]; then
            [ "$i" -lt "${#calls[@]}" ] || break
            n=${calls[$i]}
        else
            n=$((i + 1))
            [ "$n" -le "$limit" ] || break
        fi
        i=$((i + 1))
        from=$(date +%s.%N)
        fail_env=(env CRYPT_TEST_FAIL_CALL=$n)
        step_ok=1 reason=""
        if [ "$role" = client ]; then
            server_start "$role-$n" 0 "${crypt_env[@]}"
            rc=$(client "$role-$n-client" "${crypt_env[@]}" "${fail_env[@]}")
            why="$work/$role-$n-client.log"
            honest=$(client "$role-$n-honest" "${crypt_env[@]}")
            [ "$honest" = 0 ] || { step_ok=0; reason="the next honest client: rc $honest"; }
        else
            # (two clients, then it exits by itself and says its count)
            server_start "$role-$n" 2 "${crypt_env[@]}" "${fail_env[@]}"
            why="$work/$role-$n.server.log"
            rc=0
            # honest clients one after the other: the one the failure hits
            # may fail (said why), one that starts after it must be served
            # while the server lives; none may hang
            for k in 1 2; do
                hit=0
                grep -q "TESTING: failing call $n " "$why" && hit=1
                honest=$(client "$role-$n-honest$k" "${crypt_env[@]}")
                if [ "$honest" -ge 124 ]; then
                    step_ok=0; reason="honest client $k did not end: rc $honest"
                elif [ "$hit" = 1 ] && [ "$honest" != 0 ] && server_alive; then
                    step_ok=0; reason="the server lives, honest client $k after the failure: rc $honest"
                fi
                server_alive || break
            done
            for k in $(seq 20); do # (a server that served both exits now)
                server_alive || break
                sleep 0.1
            done
            if ! server_alive; then
                wait "$server_pid"
                rc=$?
            fi
        fi
        stop_tree "$server_pid"
        to=$(date +%s.%N)
        hits=$(markers_between "$work/$role.pcap" "$from" "$to")
        [ "$hits" = 0 ] || { step_ok=0; reason="$hits packets with the marker in clear"; }
        if [ "$rc" -ge 124 ]; then
            step_ok=0; reason="the failing process did not end by itself: rc $rc"
        fi
        if grep -q "TESTING: failing call $n " "$why"; then
            reached=$((reached + 1))
            sed -n "s/.*TESTING: failing call $n (\([a-z_]*\)) at \(.*\)/\1 \2/p" "$why" \
                >>"$work/$role.sites"
            if ! said_why "$why"; then
                step_ok=0; reason="rc $rc and no reason said: $(grep -v TESTING "$why" | tail -1)"
            elif [ "$rc" = 0 ] && { [ "$role" = server ] || grep -q "DATA OK" "$why"; }; then
                absorbed=$((absorbed + 1))
            else
                errors=$((errors + 1))
            fi
        fi
        if [ "$role" = client ]; then
            made=$(sed -n 's/.*TESTING: \([0-9]*\) fallible calls.*/\1/p' "$why" | tail -1)
            [ -n "$made" ] && [ $((made + 2)) -gt "$limit" ] && limit=$((made + 2))
        fi
        if [ "$step_ok" = 0 ]; then
            bad=$((bad + 1))
            echo "  $role call $n: $reason"
            echo "$n $reason" >>"$work/$role.failures"
        fi
    done
    capture_stop
    local sites
    sites=$(sort -u "$work/$role.sites" | wc -l)

    echo "  $role: $reached calls failed one by one at $sites distinct sites" \
         "($(cut -d' ' -f1 "$work/$role.sites" | sort | uniq -c | tr -s ' ' |
             tr '\n' ',' | sed 's/,$//')); $errors ended with the reason," \
         "$absorbed went on verified, $bad broke a rule"
    verdict "failure_sweep_${role}_fails_closed" \
        "$([ "$bad" = 0 ] && [ "$reached" -gt 0 ] && echo 1 || echo 0)" \
        "$bad of $i steps broke a rule (first: $(head -1 "$work/$role.failures" 2>/dev/null)); $reached reached"
}

for role in ${SWEEP_ROLES:-client server}; do
    sweep "$role"
done
group_finish
