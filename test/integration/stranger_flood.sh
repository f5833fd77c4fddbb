#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Strangers must not starve an honest peer (issue 29, item 2). A stranger
# on a third emulated host (flooder.py: no job secret) holds 1000
# connections to every port the victim's host listens on, silent, and
# sends garbage and replays of an honest client's first messages on fresh
# connections, for FLOOD_SECONDS (30) and until the honest runs are done.
# Meanwhile an honest client on the second host connects and runs to the
# end, against each listener:
#   - cs_check (UCP's client/server API: crypt's connection manager, then
#     its own wire), every byte checked;
#   - ucx_perftest tag_bw (crypt's own wire only), a bandwidth test.
# The same two run first without a flood: the table prints connect time
# and throughput of both. Plain UCX tcp runs all of it first, the control:
# without a flood it must serve (the setup works), and the table shows
# what the same flood does to UCX's own listeners.
#
#   test/integration/stranger_flood.sh OBJDIR PREFIX RESULTS_DIR
#
# Verdicts, never on timings: the honest runs complete with their data
# verified; the victim counted what it refused; replayed first messages
# cost it no Diffie-Hellman (its stats: "stranger DH 0").
#
#   h1 10.81.0.1 (victim), h2 10.81.0.2 (honest client), h3 10.81.0.3
#   (flooder): one switch (a bridge), every process with UCX's defaults
. "$(dirname "$0")/../lib/group.sh" stranger_flood "$@"

run="$prefix/bin/ucx-crypt-run"
keygen="$prefix/bin/ucx-crypt-keygen"
check="$obj/test/integration/cs_check"
seconds=${FLOOD_SECONDS:-30}

# three hosts on one switch: a bridge in a namespace of its own, a veth
# from each host to it
hosts_up() {
    local i
    ip netns add ucxs-sw && ip -n ucxs-sw link add ucxs-br type bridge &&
    ip -n ucxs-sw link set ucxs-br up || return 1
    for i in 1 2 3; do
        ip netns add ucxs-h$i &&
        ip link add ucxs-v$i type veth peer name ucxs-p$i &&
        ip link set ucxs-v$i netns ucxs-h$i && ip link set ucxs-p$i netns ucxs-sw &&
        ip -n ucxs-sw link set ucxs-p$i master ucxs-br &&
        ip -n ucxs-sw link set ucxs-p$i up &&
        ip -n ucxs-h$i addr add 10.81.0.$i/24 dev ucxs-v$i &&
        ip -n ucxs-h$i link set ucxs-v$i up && ip -n ucxs-h$i link set lo up || return 1
    done
}

if [ ! -x "$check" ] || [ ! -x "$run" ]; then
    verdict stranger_flood_setup 0 "no $check or no $run"
    group_finish
fi
"$keygen" "$work/job.key" >/dev/null || exit 1
crypt_env=(env UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key"
           UCX_CRYPT_STATS=y "$run")
plain_env=(env UCX_TLS=tcp)
port=$(test_port_base) || exit 1

group_hosts ucxs-h1 ucxs-h2 ucxs-h3 ucxs-sw
if ! hosts_up; then
    verdict stranger_flood_setup 0 "cannot create network namespaces"
    group_finish
fi

now() { date +%s.%N; }

# victim_ports OOB: every TCP port h1 listens on where h3 reaches it (not
# its loopback), but the perftest's own address-exchange port
victim_ports() {
    ip netns exec ucxs-h1 ss -ltnH | awk '{print $4}' |
        grep -E '^(0\.0\.0\.0|\*|\[::\]|10\.81\.0\.1):' | sed 's/.*://' |
        grep -v "^$1\$" | sort -u | paste -sd, -
}

# perftest_server LABEL ENV...: a tag_bw server on h1 at $pf_port
perftest_server() {
    local label=$1
    shift
    pf_port=$((port + 1))
    port=$pf_port
    on_host_defaults ucxs-h1 "$@" timeout 120 ucx_perftest -p "$pf_port" \
        >"$work/$label.server.log" 2>&1 &
    pf_server=$!
    pids+=("$pf_server")
    wait_listening ucxs-h1 "$pf_port" "$!"
}

# perftest_client LABEL ENV...: its client on h2; prints "rc MB/s"
perftest_client() {
    local label=$1 rc bw
    shift
    on_host_defaults ucxs-h2 "$@" timeout 120 ucx_perftest 10.81.0.1 -p "$pf_port" \
        -t tag_bw -s 1048576 -n 2000 -w 100 >"$work/$label.client.log" 2>&1
    rc=$?
    wait "$pf_server"
    bw=$(awk '/^Final:/ {print $6}' "$work/$label.client.log")
    echo "$rc ${bw:-?}"
}

# cs_client LABEL ENV...: one client of the cs_check server on h1 at
# $cs_port; prints "rc connect_seconds"
cs_client() {
    local label=$1
    shift
    on_host_defaults ucxs-h2 "$@" timeout 120 "$check" -c 10.81.0.1 -p "$cs_port" \
        -s 8,65536,1048576 -n 100 >"$work/$label.log" 2>&1
    local rc=$?
    local t; t=$(sed -n 's/^connected (name [0-9]*) after \([0-9.]*\) s/\1/p' "$work/$label.log")
    if [ "$rc" = 0 ] && ! grep -q "^DATA OK" "$work/$label.log"; then
        rc=1
    fi
    echo "$rc ${t:-?}"
}

# flood_start LABEL: the flooder on h3, against every port h1 listens on
# now and every one it opens during the flood (the perftest server opens
# its wire's once its client came: a watcher keeps the list)
flood_start() {
    local label=$1
    victim_ports "$pf_port" >"$work/$label.ports"
    echo "  $label: flooding h1's ports $(cat "$work/$label.ports") and what" \
         "opens later, from h3 for $seconds s" >&2
    flood_end=$(( $(date +%s) + seconds ))
    ip netns exec ucxs-h3 timeout 600 python3 "$here/flooder.py" \
        10.81.0.1 "@$work/$label.ports" "$work/$label.baseline.pcap" 590 1000 \
        >"$work/$label.flooder.log" 2>&1 &
    flood_pid=$!
    pids+=("$flood_pid")
    ( while kill -0 "$flood_pid" 2>/dev/null; do
          { cat "$work/$label.ports"; victim_ports "$pf_port" | tr , '\n'; } |
              tr , '\n' | sort -un >"$work/$label.ports.new"
          mv "$work/$label.ports.new" "$work/$label.ports"
          sleep 0.2
      done ) &
    pids+=("$!")
    sleep 3 # the flood is up before the honest client starts
}

# silent_before_endpoints: a stranger's silent connections to the wire of
# a server that has no endpoint yet (nothing of UCP's progresses it but
# what its epoll fd says) end at the handshake deadline all the same
silent_before_endpoints() {
    local wire; wire=$(victim_ports "$cs_port" | tr , '\n' | grep -v "^$cs_port\$" | head -n 1)
    ip netns exec ucxs-h3 python3 - 10.81.0.1 "$wire" >"$work/silent.log" 2>&1 <<'EOF'
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
socks = [socket.create_connection((host, port), timeout=2) for _ in range(70)]
time.sleep(9)  # the deadline (5 s) and the timer's period
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(f"silent connections to the wire at port {port}: 70 opened, {closed} closed by the victim")
EOF
    sed 's/^/  /' "$work/silent.log" >&2
    grep -q " 70 closed by the victim" "$work/silent.log" && echo 1 >"$work/silent.ok"
}

# scenario LABEL ENV...: the baseline (no flood, captured for the
# replays), then the same under the flood; prints the table's rows, and
# writes "cs_base perftest_base cs_flood perftest_flood server" exit
# statuses to $work/LABEL.rc
scenario() {
    local label=$1
    shift
    cs_port=$((port + 500))
    port=$((port + 1))
    on_host_defaults ucxs-h1 "$@" timeout 300 "$check" -l "$cs_port" -k 2 \
        >"$work/$label.cs_server.log" 2>&1 &
    local srv=$!
    pids+=("$srv")
    wait_listening ucxs-h1 "$cs_port" "$!"
    [ "$label" = crypt ] && silent_before_endpoints
    # (the first bytes of each packet: the replays are first messages)
    ip netns exec ucxs-h1 tcpdump -i ucxs-v1 -U -s 256 -w "$work/$label.baseline.pcap" \
        >"$work/$label.tcpdump.log" 2>&1 &
    local dump=$!
    pids+=("$dump")
    sleep 1
    local cs_base pf_base cs_flood pf_flood
    cs_base=$(cs_client "$label.cs_base" "$@")
    sleep 0.3
    kill -INT "$dump"; wait "$dump" 2>/dev/null
    perftest_server "$label.pf_base" "$@"
    pf_base=$(perftest_client "$label.pf_base" "$@")

    # under the flood: the cs_check server (the same process: its
    # listener and its wire) and a new perftest server (its wire)
    perftest_server "$label.pf_flood" "$@"
    flood_start "$label"
    cs_flood=$(cs_client "$label.cs_flood" "$@")
    pf_flood=$(perftest_client "$label.pf_flood" "$@")
    # the flood lasts its time, and at least as long as the honest runs
    while [ "$(date +%s)" -lt "$flood_end" ]; do sleep 0.5; done
    kill -INT "$flood_pid" 2>/dev/null
    wait "$flood_pid"
    wait "$srv"; local src=$?
    printf '  %-6s %-26s %-10s %-12s %-10s %-12s\n' "$label" "" "connect s" "cs rc" \
        "tag_bw MB/s" "perftest rc" >&2
    printf '  %-6s %-26s %-10s %-12s %-10s %-12s\n' "" "no flood" "${cs_base#* }" \
        "${cs_base%% *}" "${pf_base#* }" "${pf_base%% *}" >&2
    printf '  %-6s %-26s %-10s %-12s %-10s %-12s\n' "" "1000 held + garbage + replays" \
        "${cs_flood#* }" "${cs_flood%% *}" "${pf_flood#* }" "${pf_flood%% *}" >&2
    sed 's/^/    /' "$work/$label.flooder.log" >&2
    echo "${cs_base%% *} ${pf_base%% *} ${cs_flood%% *} ${pf_flood%% *} $src" \
        >"$work/$label.rc"
}

echo "stranger_flood: plain UCX tcp (the control)"
scenario plain "${plain_env[@]}"
plain=$(cat "$work/plain.rc")
echo "stranger_flood: crypt"
scenario crypt "${crypt_env[@]}"
crypt=$(cat "$work/crypt.rc")

read -r cb pb cf pf src <<<"$plain"
verdict flood_control_plain_tcp_serves_without_flood \
    "$([ "$cb $pb" = "0 0" ] && echo 1 || echo 0)" \
    "plain tcp without a flood: cs rc $cb, perftest rc $pb"
echo "  plain UCX tcp under the flood: client/server rc $cf, server rc $src," \
     "perftest rc $pf$(grep -a -m1 -o "corrupted double-linked list\|Too many open files" \
     "$work/plain.cs_server.log" | sed 's/^/ (its server: /;s/$/)/')"
read -r cb pb cf pf src <<<"$crypt"
verdict flood_baseline_crypt "$([ "$cb $pb" = "0 0" ] && echo 1 || echo 0)" \
    "crypt without a flood: cs rc $cb, perftest rc $pb"
verdict flood_client_server_exchange_completes_verified \
    "$([ "$cf" = 0 ] && [ "$src" = 0 ] && echo 1 || echo 0)" \
    "under the flood: cs client rc $cf, server rc $src: $(tail -n 2 "$work/crypt.cs_flood.log" | tr '\n' ' ')"
verdict flood_bandwidth_test_completes "$([ "$pf" = 0 ] && echo 1 || echo 0)" \
    "under the flood: perftest rc $pf: $(tail -n 2 "$work/crypt.pf_flood.client.log" | tr '\n' ' ')"
# the flood reached all three listeners: the client/server program's
# connection manager and wire, and the perftest server's wire
flooded=$(grep -c "^flooder port .* [1-9][0-9]* held ones closed" "$work/crypt.flooder.log")
verdict flood_reached_every_listener "$([ "$flooded" -ge 3 ] && echo 1 || echo 0)" \
    "$flooded ports whose held connections the victim closed: $(grep "^flooder port" \
    "$work/crypt.flooder.log" | tr '\n' ' ')"

verdict silent_connections_end_at_the_deadline_without_endpoints \
    "$([ -f "$work/silent.ok" ] && echo 1 || echo 0)" "$(cat "$work/silent.log")"

# what the victims said: strangers refused and counted, no DH for replays
stats=$(grep -h "wire: strangers refused" "$work/crypt.cs_server.log" | tail -n 1)
echo "  cs_check server's stats: ${stats#*wire: }"
refused=$(echo "$stats" | sed -n 's/.*wire: strangers refused \([0-9]*\).*/\1/p')
cm_refused=$(echo "$stats" | sed -n 's/.*cm: refused \([0-9]*\).*/\1/p')
stranger_dh=$(echo "$stats" | sed -n 's/.*stranger DH \([0-9]*\).*/\1/p')
verdict flood_strangers_refused_and_counted \
    "$([ "${refused:-0}" -gt 0 ] && [ "${cm_refused:-0}" -gt 0 ] && echo 1 || echo 0)" \
    "wire refused ${refused:-none}, cm refused ${cm_refused:-none}"
verdict flood_replays_cost_no_dh "$([ "${stranger_dh:-x}" = 0 ] && echo 1 || echo 0)" \
    "stranger DH ${stranger_dh:-not reported}"
lines=$(grep -c "refused a connection\|connection manager: refused" "$work/crypt.cs_server.log")
verdict flood_logged_rate_limited "$([ "$lines" -le 40 ] && echo 1 || echo 0)" \
    "$lines lines about strangers in the victim's log"
group_finish
