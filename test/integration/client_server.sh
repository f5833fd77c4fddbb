# SPDX-License-Identifier: BSD-3-Clause
# Client/server UCP programs (UCP's sockaddr API) over crypt's connection
# manager, between the two emulated hosts: sourced by run.sh, which gives
# record, on_host, next_port, $work, $plugin and the hosts.
#
# cs_check (beside this file) is the program: tag, stream and AM echo,
# every byte checked, the marker as payload; the veth is captured.

cs_check="$obj/test/integration/cs_check"
cs_crypt=(LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp
          UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_STATS=y
          UCX_CRYPT_KEEPIDLE=1s UCX_CRYPT_KEEPINTVL=1s UCX_WARN_UNUSED_ENV_VARS=n)
cs_plain=(UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n)

# cs_pair LABEL "SERVER ENV" "CLIENT ENV" SERVER_ARGS -- CLIENT_ARGS:
# one server (-k 1) on h1, one client on h2; prints "server_rc client_rc
# markers_on_the_wire"
cs_pair() {
    local label=$1 port; port=$(cs_port)
    local -a senv cenv sargs=()
    read -r -a senv <<<"$2"
    read -r -a cenv <<<"$3"
    shift 3
    while [ "$1" != -- ]; do sargs+=("$1"); shift; done
    shift
    capture_start "$label"
    on_host ucxc-h1 ucxc-v1 "${senv[@]}" timeout 90 "$cs_check" -l "$port" \
        "${sargs[@]}" >"$work/$label.s.log" 2>&1 &
    local srv=$!
    cs_listening "$work/$label.s.log" "$!"
    on_host ucxc-h2 ucxc-v2 "${cenv[@]}" timeout 60 "$cs_check" -p "$port" "$@" \
        >"$work/$label.c.log" 2>&1
    local crc=$?
    if [ "$crc" != 0 ]; then
        kill $srv 2>/dev/null
    fi
    wait $srv
    local src=$?
    echo "$src $crc $(capture_stop "$label")"
}

cs_verdict() { # NAME RESULT(server client markers) LABEL
    local name=$1 res=$2 label=$3
    if [ "$res" = "0 0 0" ] && grep -q "^DATA OK" "$work/$label.c.log" &&
       grep -q "cm: refused 0, handshakes [1-9]" "$work/$label.c.log"; then
        record "$name" pass
    else
        record "$name" fail "server/client/markers $res; $(tail -n 2 \
            "$work/$label.c.log" "$work/$label.s.log" | tr '\n' ' ')"
    fi
}

cs_sizes=0,1,8,1000,8125,65536,1048577,16777216


# cs_listening LOG PID: until the server whose log is LOG listens, or
# its process PID ended (the event, not a guess of the time; 300 s at most)
cs_listening() {
    local _
    for _ in $(seq 3000); do
        grep -q "^listening on port" "$1" 2>/dev/null && return 0
        [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

# a fresh port per server (counted in a file: the callers run in command
# substitutions), from 500 above the run's base
cs_port() {
    local p
    p=$(( $(cat "$work/cs.port" 2>/dev/null || echo $((port_base + 500))) + 1 ))
    echo $p >"$work/cs.port"
    echo $p
}

test_client_server() {
    # what ucx_info shows: the connection manager and its knobs
    local info knobs
    info=$(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp \
           UCX_CRYPT_KEY_FILE="$work/job.key" ucx_info -d 2>&1)
    # (read whole, not piped into grep -q: under pipefail, grep leaving at
    # its first match made ucx_info's SIGPIPE the pipeline's status)
    knobs=$(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp ucx_info -c -f 2>&1)
    if grep -q "Connection manager: crypt" <<<"$info" &&
       ! grep -q "Connection manager: tcp" <<<"$info" &&
       grep -q "UCX_CRYPT_CM_PRIV_DATA_LEN" <<<"$knobs"; then
        record cs_ucx_info_shows_the_connection_manager_and_its_knobs pass
    else
        record cs_ucx_info_shows_the_connection_manager_and_its_knobs fail \
            "$(grep -i "connection manager" <<<"$info" | tr '\n' ' ')"
    fi

    two_hosts_up client_server_setup || return
    ip -n ucxc-h1 addr add fd77::1/64 dev ucxc-v1 nodad
    ip -n ucxc-h2 addr add fd77::2/64 dev ucxc-v2 nodad
    local res mode
    local crypt="${cs_crypt[*]}" plain="${cs_plain[*]}"

    # the control: UCX's own tcp puts the marker on the wire
    res=$(cs_pair cs-plain "$plain" "$plain" -- -c 10.77.0.1 -s 1000,65536 -n 2)
    if [ "${res%% *}" = 0 ] && [ "${res##* }" -gt 0 ]; then
        record cs_marker_visible_without_crypt pass
    else
        record cs_marker_visible_without_crypt fail "plain run: $res"
    fi
    for mode in tag stream am; do
        res=$(cs_pair "cs-$mode" "$crypt" "$crypt" -m "$mode" -- -c 10.77.0.1 \
              -m "$mode" -s "$cs_sizes" -n 2)
        echo "  client/server $mode over crypt (server/client rc, markers): $res"
        cs_verdict "cs_${mode}_0_to_16MiB_verified_marker_never_on_wire" "$res" "cs-$mode"
    done
    res=$(cs_pair cs-none "$crypt" "$crypt" -e none -- -c 10.77.0.1 -e none \
          -s "$cs_sizes" -n 1)
    cs_verdict cs_error_mode_none_verified "$res" cs-none
    res=$(cs_pair cs-ipv6 "$crypt" "$crypt" -6 -- -c fd77::1 -s 0,65536,1048577 -n 2)
    cs_verdict cs_ipv6_listener_verified "$res" cs-ipv6
    # data lanes that connect only ep to ep, as rc's (test builds:
    # UCX_CRYPT_EMULATE_CONNECT_TO_EP): UCP wires them from the addresses
    # in the private data, with the device address the CM carries
    res=$(cs_pair cs-c2ep "$crypt ${aux_envs[*]} ${aux_tls[*]}" \
          "$crypt ${aux_envs[*]} ${aux_tls[*]}" -- -c 10.77.0.1 \
          -s "$cs_sizes" -n 1)
    cs_verdict cs_connect_to_ep_lanes_verified "$res" cs-c2ep
    test_client_server_many
    test_client_server_outsiders
    test_client_server_faults
    test_client_server_forged_record
    test_client_server_attacks
    netns_down ucxc-h1 ucxc-h2
}

# several clients: one after the other (stream) and at once (tag)
test_client_server_many() {
    local port pids=() ok=1 i srv
    for mode in stream tag; do
        port=$(cs_port); pids=(); ok=1
        on_host ucxc-h1 ucxc-v1 "${cs_crypt[@]}" timeout 120 "$cs_check" -l "$port" \
            -m "$mode" -k 4 >"$work/cs-many-$mode.s.log" 2>&1 &
        srv=$!
        cs_listening "$work/cs-many-$mode.s.log" "$!"
        for i in 1 2 3 4; do
            on_host ucxc-h2 ucxc-v2 "${cs_crypt[@]}" timeout 90 "$cs_check" -c 10.77.0.1 \
                -p "$port" -m "$mode" -s 1000,1048577 -n 3 >"$work/cs-many-$mode.$i.log" 2>&1 &
            pids+=($!)
            [ "$mode" = stream ] && { wait "${pids[-1]}" || ok=0; }
        done
        [ "$mode" = tag ] && for i in "${pids[@]}"; do wait "$i" || ok=0; done
        wait $srv || ok=0
        if [ $ok = 1 ] && [ "$(cat "$work"/cs-many-$mode.[1-4].log | grep -c "^DATA OK")" = 4 ] &&
           grep -q "^SERVED 4" "$work/cs-many-$mode.s.log"; then
            record "cs_server_serves_4_clients_${mode/stream/in_sequence}" pass
        else
            record "cs_server_serves_4_clients_${mode/stream/in_sequence}" fail \
                "$(tail -n 2 "$work"/cs-many-$mode.*.log | tr '\n' ' ')"
        fi
    done
}

# cs_refused NAME LABEL "CLIENT ENV" [TOLD]: a client that is not of this
# job fails with a clear error (with TOLD, a pattern its log must hold:
# what the server told it), leaves nothing on the wire, and the server
# goes on to serve an honest client
cs_refused() {
    local name=$1 label=$2 told=${4:-} port; port=$(cs_port)
    local -a cenv
    read -r -a cenv <<<"$3"
    capture_start "$label"
    on_host ucxc-h1 ucxc-v1 "${cs_crypt[@]}" timeout 60 "$cs_check" -l "$port" -k 1 \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    cs_listening "$work/$label.s.log" "$!"
    on_host ucxc-h2 ucxc-v2 "${cenv[@]}" timeout 30 "$cs_check" -c 10.77.0.1 -p "$port" \
        -s 1000 -n 1 >"$work/$label.bad.log" 2>&1
    local bad=$?
    on_host ucxc-h2 ucxc-v2 "${cs_crypt[@]}" timeout 30 "$cs_check" -c 10.77.0.1 -p "$port" \
        -s 1000,65536 -n 2 >"$work/$label.c.log" 2>&1
    local good=$?
    wait $srv
    local src=$?
    local markers; markers=$(capture_stop "$label")
    echo "  $label: refused client rc $bad ($(grep -a -m1 -o "ENDPOINT ERROR.*\|cs_check: .*" \
        "$work/$label.bad.log")); server: $(grep -a -m1 -o "refused a connection.*(" "$work/$label.s.log")"
    if [ "$bad" != 0 ] && [ "$good" = 0 ] && [ "$src" = 0 ] && [ "$markers" = 0 ] &&
       ! grep -q "^DATA OK" "$work/$label.bad.log" &&
       grep -q "^DATA OK" "$work/$label.c.log" &&
       { [ -z "$told" ] || grep -q "$told" "$work/$label.bad.log"; } &&
       grep -q "connection manager refused a connection from 10.77.0.2" "$work/$label.s.log"; then
        record "$name" pass
    else
        record "$name" fail "bad $bad good $good server $src markers $markers; $(tail -n 2 \
            "$work/$label.bad.log" "$work/$label.s.log" | tr '\n' ' ')"
    fi
}

test_client_server_outsiders() {
    cs_refused cs_client_without_job_secret_refused_server_serves_on cs-nosecret \
        "LD_PRELOAD=$preload UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_UNAUTHENTICATED=y UCX_WARN_UNUSED_ENV_VARS=n"
    # told what happened: another job secret, in the server's own word
    cs_refused cs_client_of_another_job_refused_server_serves_on cs-otherjob \
        "LD_PRELOAD=$preload UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/other.key UCX_WARN_UNUSED_ENV_VARS=n" \
        "cannot connect to 10.77.0.1.*the server refused the handshake: it holds another job secret"
    cs_refused cs_plaintext_client_refused_server_serves_on cs-plainclient "${cs_plain[*]}"

    # a crypt client against a plaintext UCX server: the client stops
    # with a reason within the handshake timeout; only the 68-byte
    # handshake left it (no private data, no marker)
    local res
    res=$(cs_pair cs-plainserver "${cs_plain[*]}" "${cs_crypt[*]}" -- -c 10.77.0.1 -s 1000 -n 1)
    echo "  crypt client, plaintext server (server/client rc, markers): $res;" \
         "$(grep -a -m1 -o "ENDPOINT ERROR.*" "$work/cs-plainserver.c.log")"
    if [ "$(echo "$res" | cut -d' ' -f2)" != 0 ] && [ "${res##* }" = 0 ] &&
       grep -q "ENDPOINT ERROR" "$work/cs-plainserver.c.log" &&
       grep -q "connection manager: cannot connect to 10.77.0.1.*not a crypt server" \
           "$work/cs-plainserver.c.log"; then
        record cs_crypt_client_against_plaintext_server_fails_clearly pass
    else
        record cs_crypt_client_against_plaintext_server_fails_clearly fail \
            "$res; $(tail -n 2 "$work/cs-plainserver.c.log" | tr '\n' ' ')"
    fi
}

# cs_fault LABEL how(kill-server|kill-client|cut) -> seconds until the
# survivor reports its endpoint error (error mode peer), or "none"; for a
# cut link both sides must: "CLIENT/SERVER" seconds
cs_fault() {
    local label=$1 how=$2 port; port=$(cs_port)
    on_host ucxc-h1 ucxc-v1 "${cs_crypt[@]}" timeout 60 "$cs_check" -l "$port" -k 1 \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    cs_listening "$work/$label.s.log" "$!"
    on_host ucxc-h2 ucxc-v2 "${cs_crypt[@]}" timeout 60 "$cs_check" -c 10.77.0.1 -p "$port" \
        -s 65536,1048576 -n 100000 >"$work/$label.c.log" 2>&1 &
    local cli=$!
    sleep "$((2 + RANDOM % 2)).$((RANDOM % 10))"
    local t0 survivor; t0=$(date +%s.%N)
    case $how in
    kill-server) kill -KILL "$(program_pid "$srv")"
                 survivor="$work/$label.c.log" ;;
    kill-client) kill -KILL "$(program_pid "$cli")"
                 survivor="$work/$label.s.log" ;;
    cut)         ip -n ucxc-h2 link set ucxc-v2 down
                 survivor="$work/$label.c.log" ;;
    esac
    local t="" t2="" other="$work/$label.s.log"
    for _ in $(seq 300); do
        if [ -z "$t" ] && grep -q "^ENDPOINT ERROR" "$survivor" 2>/dev/null; then
            t=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.1f", a - b}')
        fi
        # a cut link: the server's side must learn too
        if [ "$how" = cut ] && [ -z "$t2" ] &&
           grep -q "^ENDPOINT ERROR" "$other" 2>/dev/null; then
            t2=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.1f", a - b}')
        fi
        [ -n "$t" ] && { [ "$how" != cut ] || [ -n "$t2" ]; } && break
        sleep 0.1
    done
    [ "$how" = cut ] && t="${t:-none}/${t2:-none}"
    kill $cli $srv 2>/dev/null
    wait $cli $srv 2>/dev/null
    [ "$how" = cut ] && ip -n ucxc-h2 link set ucxc-v2 up
    echo "${t:-none}"
}

test_client_server_faults() {
    local how t
    for how in kill-server kill-client cut; do
        t=$(cs_fault "cs-$how" "$how")
        echo "  client/server, $how mid-transfer (error mode peer, keepalive 1 s + 3 probes 1 s apart):" \
             "the survivor's endpoint failed after ${t} s" \
             "$([ "$how" = cut ] && echo "(client/server)")"
        if [[ $t != *none* ]] &&
           awk -v t="$t" 'BEGIN {split(t, a, "/"); exit !(a[1] < 25 && (a[2] == "" || a[2] < 25))}'; then
            record "cs_${how//-/_}_surfaces_as_endpoint_error" pass
        else
            record "cs_${how//-/_}_surfaces_as_endpoint_error" fail "after $t s"
        fi
    done

    # a client reconnects to a restarted server (same port)
    local port; port=$(cs_port)
    local senv=("${cs_crypt[@]}" UCX_CRYPT_CM_REUSEADDR=y) ok=1 round
    for round in 1 2; do
        on_host ucxc-h1 ucxc-v1 "${senv[@]}" timeout 60 "$cs_check" -l "$port" -k 0 \
            >"$work/cs-restart.$round.s.log" 2>&1 &
        local srv=$!
        cs_listening "$work/cs-restart.$round.s.log" "$!"
        on_host ucxc-h2 ucxc-v2 "${cs_crypt[@]}" timeout 30 "$cs_check" -c 10.77.0.1 \
            -p "$port" -s 1000,1048577 -n 2 >"$work/cs-restart.$round.c.log" 2>&1 || ok=0
        kill -KILL "$(program_pid "$srv")"
        wait $srv 2>/dev/null
    done
    if [ $ok = 1 ] && grep -q "^DATA OK" "$work/cs-restart.2.c.log"; then
        record cs_client_reconnects_after_server_restart pass
    else
        record cs_client_reconnects_after_server_restart fail \
            "$(tail -n 2 "$work"/cs-restart.*.log | tr '\n' ' ')"
    fi
}

# cs_forged LABEL SERVER_ENV...: a server on h1 serving one client on h2
# whose crypt flips a ciphertext bit in its 12th record (the client ends
# with its endpoint error); prints the server's exit code, once it ended by
# itself
cs_forged() {
    local label=$1 port; port=$(cs_port)
    shift
    on_host ucxc-h1 ucxc-v1 "${cs_crypt[@]}" "$@" timeout 60 "$cs_check" -l "$port" \
        >"$work/$label.s.log" 2>&1 &
    local srv=$!
    cs_listening "$work/$label.s.log" "$!"
    on_host ucxc-h2 ucxc-v2 "${cs_crypt[@]}" UCX_CRYPT_FAULT=flip_ciphertext \
        UCX_CRYPT_FAULT_AFTER=12 timeout 60 "$cs_check" -c 10.77.0.1 -p "$port" \
        -s "$cs_sizes" -n 2 >"$work/$label.c.log" 2>&1
    wait $srv
    echo $?
}

# A record forged on an established connection. Error mode peer: the
# server's endpoint to that client fails, UCP's handler takes it, and the
# server goes on and exits by itself. The same server as an MPI rank
# (PMI_SIZE set, as Hydra and Slurm set it) ends, naming the peer and the
# reason (UCX_CRYPT_ABORT_ON_EP_FAILURE=auto), on every UCX release: 1.22's
# UCP takes every endpoint error and never says that nobody handles one.
test_client_server_forged_record() {
    local dropped="dropped a record from peer [0-9a-f]\{8\} flow .*authentication failed"
    local aborted="crypt: endpoint to peer [0-9a-f]\{8\} .*failed ([a-z ]*): aborting"
    local rc log="$work/cs-forged.s.log"
    rc=$(cs_forged cs-forged)
    if [ "$rc" = 0 ] && grep -q "$dropped" "$log" && grep -q "^ENDPOINT ERROR" "$log" &&
       ! grep -q "$aborted" "$log"; then
        record cs_forged_record_fails_the_endpoint_and_the_server_goes_on pass
    else
        record cs_forged_record_fails_the_endpoint_and_the_server_goes_on fail \
            "server rc $rc; $(grep -m3 "crypt\|ERROR\|Fatal" "$log" | tr '\n' ' ')"
    fi
    log="$work/cs-forged-mpi.s.log"
    rc=$(cs_forged cs-forged-mpi PMI_SIZE=2)
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "$dropped" "$log" &&
       grep -q "$aborted (UCX_CRYPT_ABORT_ON_EP_FAILURE=auto, in an MPI rank)" "$log"; then
        record cs_forged_record_ends_an_mpi_rank_with_the_reason pass
    else
        record cs_forged_record_ends_an_mpi_rank_with_the_reason fail \
            "server rc $rc; $(grep -m3 "crypt\|Fatal" "$log" | tr '\n' ' ')"
    fi
}

# cs_attack LABEL ATTACKS ENV...: a server (-k 1) on h1 serving an honest
# client on h2 while attacker.py, a stranger on h2, runs ATTACKS against
# every port h1 listens on; the client goes on until the attacker is done
# (-u), so that every attack meets a server at work, however fast the
# machine; prints "client_rc server_rc"
cs_attack() {
    local label=$1 attacks=$2 port; port=$(cs_port)
    shift 2
    capture_start "$label" 2048 # (the attacker reads handshakes and addresses)
    on_host ucxc-h1 ucxc-v1 "$@" timeout 300 "$cs_check" -l "$port" -k 1 \
        >"$work/$label.victim.log" 2>&1 &
    local victim=$!
    cs_listening "$work/$label.victim.log" "$!"
    on_host ucxc-h2 ucxc-v2 "$@" timeout 300 "$cs_check" -c 10.77.0.1 -p "$port" \
        -s 8,65536,1048576 -n 100 -u "$work/$label.attacked" \
        >"$work/$label.client.log" 2>&1 &
    local client=$!
    sleep 1.5
    local ports
    ports=$(ip netns exec ucxc-h1 ss -ltnH | awk '{print $4}' | sed 's/.*://' |
            sort -u | paste -sd, -)
    echo "  $label: the server's host listens on $ports (the listener: $port)"
    ip netns exec ucxc-h2 timeout 120 python3 "$it_dir/attacker.py" 10.77.0.1 \
        "$ports" 0 "$work/$label.pcap" "$attacks" >"$work/$label.attacker.log" 2>&1
    touch "$work/$label.attacked"
    wait $client; local crc=$?
    wait $victim; local vrc=$?
    capture_stop "$label" >/dev/null
    echo "$crc $vrc"
}

test_client_server_attacks() {
    local res refused
    # the attack, first against UCX's own tcp connection manager (what a
    # client/server program runs on without crypt): a stranger's bytes
    # become a connection request that the server's application takes
    res=$(cs_attack cs-attack-plain forged_connection_request "${cs_plain[@]}")
    echo "$res" | head -n -1
    res=$(echo "$res" | tail -n 1)
    echo "  plaintext UCX server after a forged connection request: client/server rc $res;" \
         "$(grep -a -m1 "conn_request\|cs_check:" "$work/cs-attack-plain.victim.log")"
    if [ "${res##* }" != 0 ] &&
       grep -q "conn_request\|cs_check: server ucp_ep_create" "$work/cs-attack-plain.victim.log"; then
        record cs_forged_connection_request_reaches_plaintext_ucx_application pass
    else
        record cs_forged_connection_request_reaches_plaintext_ucx_application fail \
            "client/server rc $res; $(tail -n 2 "$work/cs-attack-plain.victim.log" | tr '\n' ' ')"
    fi

    # every attack against crypt's listener and wire, an honest client beside
    res=$(cs_attack cs-attack-crypt "" "${cs_crypt[@]}")
    echo "$res" | head -n -1
    res=$(echo "$res" | tail -n 1)
    sed 's/^/    /' "$work/cs-attack-crypt.attacker.log"
    refused=$(grep -a -o "cm: refused [0-9]*" "$work/cs-attack-crypt.victim.log" | awk '{print $3}')
    if [ "$res" = "0 0" ] && grep -q "^DATA OK" "$work/cs-attack-crypt.client.log" &&
       grep -q "^SERVED 1" "$work/cs-attack-crypt.victim.log" &&
       [ "$(grep -c "^attack " "$work/cs-attack-crypt.attacker.log")" -ge 8 ] &&
       [ "${refused:-0}" -gt 0 ] &&
       [ "$(grep -c "refused a connection" "$work/cs-attack-crypt.victim.log")" -le 30 ]; then
        record cs_stranger_attacks_refused_server_serves_honest_client pass
    else
        record cs_stranger_attacks_refused_server_serves_honest_client fail \
            "client/server rc $res, cm refused ${refused:-none}; $(tail -n 2 \
            "$work/cs-attack-crypt.victim.log" "$work/cs-attack-crypt.client.log" | tr '\n' ' ')"
    fi
}
