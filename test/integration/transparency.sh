#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# crypt run the way users run it: stock programs, UCX's default settings,
# two hosts, and the same program over plain UCX (tcp) in the same test as
# the control. A test passes when the control passes and crypt does what
# the control did; a control that fails fails the test too (the harness,
# not crypt, is then to be looked at).
#
#   test/integration/transparency.sh OBJDIR PREFIX RESULTS_DIR
#
#   +----------------------------+          +----------------------------+
#   | netns ucxt-h1              |   veth   | netns ucxt-h2              |
#   |  lo 127.0.0.1              |          |  lo 127.0.0.1              |
#   |  ucxt-v1 10.78.0.1 <-------+----------+-> ucxt-v2 10.78.0.2        |
#   |  server / mpirun           |          |  client / remote rank      |
#   +----------------------------+          +----------------------------+
#
# No UCX_NET_DEVICES anywhere: UCX opens lo and the veth on each host, as it
# does on a cluster node, and must never dial the other host's 127.0.0.1.
# Each process runs in fresh pid and ipc namespaces (no shared memory across
# the hosts). Processes are ended by the PIDs this script started; logs of a
# failed test are kept and their path printed. Report:
# RESULTS_DIR/transparency.xml.
. "$(dirname "$0")/../lib/group.sh" transparency "$@"

run="$prefix/bin/ucx-crypt-run"
keygen="$prefix/bin/ucx-crypt-keygen"
site_conf="$prefix/share/ucx-crypt/openmpi-mca-params.conf"
agent="$here/../netns-agent.sh"
examples=/usr/share/doc/libucx-dev/examples
port_base=$(test_port_base) || exit 1

"$keygen" "$work/job.key" || exit 1
# what a user sets: crypt, its network, the key file; the launcher does
# the rest (the plugin, crypt's connection manager)
crypt_env=(env UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key"
           "$run")
plain_env=(env)

group_hosts ucxt-h1 ucxt-h2
if ! netns_up ucxt-h1 ucxt-h2 ucxt-v1 ucxt-v2 10.78.0.1 10.78.0.2; then
    verdict transparency_setup 0 "cannot create network namespaces"
    group_finish
fi

# ---- UCX's own client/server example --------------------------------------
# The server serves clients one after the other; each client sends its
# messages, waits for each to complete, closes and exits. Every message
# must arrive, no error callback on the server, no failed close, no hang.
cs_bin="$work/ucp_client_server"
gcc -O2 -o "$cs_bin" "$examples/ucp_client_server.c" -I"$examples" -lucp -lucs \
    2>"$work/cc.log" || cs_bin=""

# cs_series LABEL PORT RUNS API SIZE ENV...: RUNS clients one after the
# other to one server; prints "clients-ok received error-callbacks
# failed-closes"
cs_series() {
    local label=$1 port=$2 runs=$3 api=$4 size=$5 ok=0 r
    shift 5
    # (line-buffered: the server's log is read while it runs, and a
    # server stopped at the end loses no line)
    on_host_defaults ucxt-h1 "$@" timeout $((60 + 10 * runs)) stdbuf -oL -eL "$cs_bin" \
        -p "$port" -c "$api" -s "$size" -i 3 >"$work/$label.server.log" 2>&1 &
    local srv=$!
    echo "$srv" >>"$work/pids"
    if wait_listening ucxt-h1 "$port" "$!"; then
        for r in $(seq "$runs"); do
            on_host_defaults ucxt-h2 "$@" timeout 30 "$cs_bin" -a 10.78.0.1 -p "$port" \
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

cs_case() { # NAME API SIZE RUNS
    local name=$1 api=$2 size=$3 runs=$4
    local want="$runs $((2 * runs)) 0 0" plain crypt
    port_base=$((port_base + 2))
    plain=$(cs_series "$name.plain" $port_base "$runs" "$api" "$size" "${plain_env[@]}")
    crypt=$(cs_series "$name.crypt" $((port_base + 1)) "$runs" "$api" "$size" \
            "${crypt_env[@]}")
    echo "  $name: plain tcp [$plain], crypt [$crypt] (clients ok, received, error callbacks, failed closes; want $want)"
    if [ "$plain" != "$want" ]; then
        verdict "$name" 0 "the plain control failed: $plain"
    else
        verdict "$name" "$([ "$crypt" = "$want" ] && echo 1 || echo 0)" "crypt: $crypt, plain: $plain"
    fi
}

# The client closes right after its last send. Its disconnect, on the
# connection manager's own socket, can reach the server while its last
# messages are still on their way, most of all on a busy host; UCP 1.13
# fails a connected ep at a remote disconnect and drops its stream data
# (ucp_ep_cm_remote_disconnect_progress). crypt's connection manager
# reports the disconnect once that data is in (cm/README.md). So the
# small sizes run again beside busy loops on every core
# (TRANSPARENCY_BUSY_RUNS, 20 a mode; before that fix crypt's stream
# modes failed 19 of 20 there, plain tcp none). The AM mode is left out:
# with busy loops the example's clients hang over plain tcp too.
if [ -n "$cs_bin" ]; then
    # rendezvous sizes: crypt's lanes to the other host over the veth, never
    # lo (before the fix every client failed here)
    for api in tag stream; do
        cs_case "stock_client_server_${api}_1048576B_defaults" "$api" 1048576 \
            "${TRANSPARENCY_RUNS:-5}"
    done
    busy=()
    for r in $(seq "$(nproc)"); do
        (while :; do :; done) &
        busy+=($!)
        pids+=($!)
    done
    echo "  load average before the busy host's cases: $(cut -d' ' -f1-3 /proc/loadavg)," \
         "$(nproc) cores, ${#busy[@]} busy loops"
    for api in tag stream; do
        for size in 64 200000; do
            cs_case "busy_host_client_closes_after_${api}_${size}B" "$api" "$size" \
                "${TRANSPARENCY_BUSY_RUNS:-20}"
        done
    done
    for r in "${busy[@]}"; do
        kill "$r" 2>/dev/null
        wait "$r" 2>/dev/null
    done
else
    verdict stock_client_server_builds 0 "$(tail -3 "$work/cc.log")"
fi

# every server of the series ended with it: none left polling (a leftover
# slows everything after it; killing `unshare` alone left them, orphaned)
if [ -n "$cs_bin" ]; then
    sleep 0.2
    left=$(pgrep -f "^$cs_bin" | wc -l)
    verdict stock_client_server_series_leave_no_process "$([ "$left" = 0 ] && echo 1 || echo 0)" \
        "$left servers still running"
fi

# ---- Open MPI across the two hosts, UCX's defaults --------------------------
# mpirun on h1, the remote daemon through netns-agent.sh on h2 with no
# UCX_NET_DEVICES; pml ucx either way (Debian's default MCA file turns UCX
# off): the control with UCX's own transports, crypt with the site file.
mpi_src="$here/mpi_check.c"
# mpi_two_hosts_verdict NAME LABEL PLAIN_RC CRYPT_RC: both ranks said
# "MPI OK" in WORK/LABEL-plain.log (the control) and WORK/LABEL-crypt.log,
# and both crypt ranks' statistics show records opened
mpi_two_hosts_verdict() {
    local name=$1 plain_log="$work/$2-plain.log" crypt_log="$work/$2-crypt.log"
    local plain=$3 crypt=$4
    echo "  $name: plain rc $plain, crypt rc $crypt"
    if [ "$plain" != 0 ] || [ "$(grep -c '^MPI OK rank' "$plain_log")" != 2 ]; then
        verdict "$name" 0 "the plain control failed: rc $plain"
    else
        verdict "$name" "$([ "$crypt" = 0 ] &&
                           [ "$(grep -c '^MPI OK rank' "$crypt_log")" = 2 ] &&
                           [ "$(grep -c 'ucx-crypt pid.*opened [1-9]' "$crypt_log")" = 2 ] &&
                           echo 1 || echo 0)" \
            "crypt rc $crypt: $(grep -v '^\[ucx-crypt' "$crypt_log" | tail -2)"
    fi
}
if mpicc.openmpi -O2 -o "$work/mpi_check" "$mpi_src" 2>>"$work/cc.log"; then
    ompi_two_hosts() { # LABEL PARAM_FILE [mpirun args...]: prints rc
        local label=$1 params=$2
        shift 2
        on_host_defaults ucxt-h1 env OMPI_MCA_mca_base_param_files="$params" \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            NETNS_AGENT_HOSTS="10.78.0.1=ucxt-h1= 10.78.0.2=ucxt-h2=" \
            timeout 120 mpirun -np 2 --host 10.78.0.1,10.78.0.2 --mca plm_rsh_agent "$agent" \
            --mca oob_tcp_if_include ucxt-v1,ucxt-v2 -x UCX_CRYPT_KEY_FILE="$work/job.key" \
            -x UCX_CRYPT_STATS=y "$@" "$work/mpi_check" -s 8,1000,65536,1048576 \
            >"$work/$label.log" 2>&1
        echo $?
    }
    plain=$(ompi_two_hosts ompi-plain /dev/null --mca pml ucx --mca osc ucx \
            --mca btl self,vader --mca opal_common_ucx_tls any \
            --mca opal_common_ucx_devices any)
    crypt=$(ompi_two_hosts ompi-crypt "$site_conf")
    mpi_two_hosts_verdict openmpi_two_hosts_defaults_verified ompi "$plain" "$crypt"
else
    verdict openmpi_two_hosts_defaults_verified 0 "mpicc.openmpi: $(tail -2 "$work/cc.log")"
fi

# ---- MPICH across the two hosts, UCX's defaults ------------------------------
# hydra on h1 forks the local proxy and starts h2's through netns-agent.sh,
# with no UCX_NET_DEVICES on either; ch4:ucx either way: the control with
# UCX's own transports, crypt as a user starts it (ucx-crypt-run around
# mpiexec; hydra passes the environment on to both hosts).
if mpicc.mpich -O2 -o "$work/mpi_check_mpich" "$mpi_src" 2>>"$work/cc.log"; then
    mpich_two_hosts() { # LABEL [ENV...]: prints rc
        local label=$1
        shift
        on_host_defaults ucxt-h1 env NETNS_AGENT_HOSTS="10.78.0.1=ucxt-h1= 10.78.0.2=ucxt-h2=" \
            "$@" timeout 60 mpiexec.mpich -n 2 -hosts 10.78.0.1,10.78.0.2 \
            -launcher ssh -launcher-exec "$agent" -iface ucxt-v1 \
            "$work/mpi_check_mpich" -s 8,1000,65536,1048576 >"$work/$label.log" 2>&1
        echo $?
    }
    # MPICH 4.0.2's finalize has a race of its own over UCX: rank 0 waits
    # for its ucp_disconnect_nb requests while rank 1, done with its own,
    # waits in the PMI barrier and progresses UCX no more (both ranks' stacks
    # show it; over plain tcp 1 run in 40 under load hung so, after both
    # ranks verified their data). Such a run is tried once more, either
    # way, and said; any other failure counts at once.
    mpich_two_hosts_retried() { # LABEL [ENV...]: prints rc
        local rc
        rc=$(mpich_two_hosts "$@")
        if [ "$rc" = 124 ] && [ "$(grep -c '^MPI OK rank' "$work/$1.log")" = 2 ]; then
            echo "  $1: hung in MPI_Finalize after both ranks verified (MPICH's race): once more" >&2
            mv "$work/$1.log" "$work/$1.finalize-hang.log"
            rc=$(mpich_two_hosts "$@")
        fi
        echo "$rc"
    }
    plain=$(mpich_two_hosts_retried mpich-plain)
    crypt=$(mpich_two_hosts_retried mpich-crypt "${crypt_env[@]}" env UCX_CRYPT_STATS=y)
    mpi_two_hosts_verdict mpich_two_hosts_defaults_verified mpich "$plain" "$crypt"
else
    verdict mpich_two_hosts_defaults_verified 0 "mpicc.mpich: $(tail -2 "$work/cc.log")"
fi

group_finish
