#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A client that closes right after its last send loses nothing, on a busy
# host: UCX's own client/server example, client and server on two emulated
# hosts, UCX's defaults, two busy loops on the machine's cores beside them,
# every mode (tag and stream; 64 B and 200,000 B) RUNS times over crypt
# and over plain UCX tcp in the same test as the control. (The example's
# AM mode is left out: with two busy loops its clients hang over plain
# tcp too, 9 of 10 in a run.)
#
#   test/integration/busy_close.sh OBJDIR PREFIX RESULTS_DIR
#
# UCP 1.13 fails a connected ep when the connection manager reports the
# peer's disconnect, and drops the stream data the application has not
# taken yet (ucp_ep_cm_remote_disconnect_progress). The client's disconnect
# goes on the connection manager's own socket, its data on the data
# connections: over crypt the receiving end holds the disconnect until the
# data the peer sent before it has been delivered (cm/README.md).
# BUSY_CLOSE_RUNS (20), BUSY_CLOSE_LOOPS (2). Report:
# RESULTS_DIR/busy_close.xml.
. "$(dirname "$0")/../lib/group.sh" busy_close "$@"

run="$prefix/bin/ucx-crypt-run"
keygen="$prefix/bin/ucx-crypt-keygen"
examples=/usr/share/doc/libucx-dev/examples
port_base=$(test_port_base) || exit 1
runs=${BUSY_CLOSE_RUNS:-20}

"$keygen" "$work/job.key" || exit 1
crypt_env=(env UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key"
           "$run")
plain_env=(env)

group_hosts ucxb-h1 ucxb-h2
if ! netns_up ucxb-h1 ucxb-h2 ucxb-v1 ucxb-v2 10.79.0.1 10.79.0.2; then
    verdict busy_close_setup 0 "cannot create network namespaces"
    group_finish
fi
cs_bin="$work/ucp_client_server"
if ! gcc -O2 -o "$cs_bin" "$examples/ucp_client_server.c" -I"$examples" -lucp -lucs \
        2>"$work/cc.log"; then
    verdict busy_close_example_builds 0 "$(tail -3 "$work/cc.log")"
    group_finish
fi

# series LABEL PORT API SIZE ENV...: RUNS clients one after the other to
# one server; prints "clients-ok received error-callbacks failed-closes"
series() {
    local label=$1 port=$2 api=$3 size=$4 ok=0 r srv
    shift 4
    # (line-buffered: the server's log is read while it runs, and a
    # server stopped at the end loses no line)
    on_host_defaults ucxb-h1 "$@" timeout $((60 + 10 * runs)) stdbuf -oL "$cs_bin" \
        -p "$port" -c "$api" -s "$size" -i 3 >"$work/$label.server.log" 2>&1 &
    srv=$!
    echo "$srv" >>"$work/pids"
    if wait_listening ucxb-h1 "$port" "$srv"; then
        for r in $(seq "$runs"); do
            on_host_defaults ucxb-h2 "$@" timeout 30 "$cs_bin" -a 10.79.0.1 -p "$port" \
                -c "$api" -s "$size" -i 3 >"$work/$label.client$r.log" 2>&1 &&
                ok=$((ok + 1))
        done
    fi
    # the server's last receive: its log has every message, or it ended
    for r in $(seq 100); do
        [ "$(grep -c 'UCX data message was received' "$work/$label.server.log")" -ge \
          $((2 * runs)) ] && break
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    stop_tree "$srv"
    # (the server prints the first and the last of the 3 iterations)
    echo "$ok $(grep -c 'UCX data message was received' "$work/$label.server.log")" \
         "$(grep -c 'error handling callback' "$work/$label.server.log")" \
         "$(grep -c 'failed to close' "$work/$label.server.log")"
}

busy=()
for r in $(seq "${BUSY_CLOSE_LOOPS:-2}"); do
    (while :; do :; done) &
    busy+=($!)
    pids+=($!)
done
echo "  load average at the start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, ${#busy[@]} busy loops"
want="$runs $((2 * runs)) 0 0"
for api in tag stream; do
    for size in 64 200000; do
        name="busy_host_client_closes_after_${api}_${size}B"
        port_base=$((port_base + 2))
        plain=$(series "$name.plain" $port_base "$api" "$size" "${plain_env[@]}")
        crypt=$(series "$name.crypt" $((port_base + 1)) "$api" "$size" "${crypt_env[@]}")
        echo "  $name: plain tcp [$plain], crypt [$crypt] (clients ok, received, error callbacks, failed closes; want $want)"
        if [ "$plain" != "$want" ]; then
            verdict "$name" 0 "the plain control failed: $plain"
        else
            verdict "$name" "$([ "$crypt" = "$want" ] && echo 1 || echo 0)" \
                "crypt: $crypt, plain: $plain"
        fi
    done
done
for r in "${busy[@]}"; do
    kill "$r" 2>/dev/null
    wait "$r" 2>/dev/null
done
echo "  load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
group_finish
