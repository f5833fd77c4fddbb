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
# SWEEP_ROLES (client server mpich), SWEEP_KINDS (call seal), SWEEP_CALLS
# (the N to fail: every call, every SWEEP_MPICH_STRIDE-th (6) of MPICH's,
# and the seal series by default)
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
#
# The same for an MPI job as users run one (issue 44): MPICH's ping-pong
# (mpi_check), 2 ranks on one emulated host, UCP error mode none (MPI's
# default), both ranks failing their N-th call: the job ends by itself
# within its limit, with its data verified or an error that names the
# resource; never a hang. And for seals (CRYPT_TEST_FAIL_SEAL=N, counted
# apart from the resource calls): the cipher failing on a record, a
# handshake, a control frame or a bulk segment, N in a Fibonacci series up
# to the number a run makes.
. "$(dirname "$0")/../lib/group.sh" failure_sweep "$@"

run="$prefix/bin/ucx-crypt-run"
mpi_check="$work/mpi_check_mpich"
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

# The veth's capture, one file for a whole series. Each step checks the
# packets written since the step before (markers_since: from where the
# last check stopped up to the step's end time; the file grows to a GB in
# a series, and a check that read it whole made the sweep quadratic)
capture_start() { # FILE [INTERFACE]
    ip netns exec ucxf-h1 tcpdump -i "${2:-ucxf-v1}" -U -s 0 -w "$1" \
        >"$1.log" 2>&1 &
    capture_pid=$!
    pids+=("$capture_pid")
    rm -f "$1.checked"
    sleep 1
}

capture_stop() {
    sleep 0.3
    kill -INT "$capture_pid" 2>/dev/null
    wait "$capture_pid" 2>/dev/null
}

# markers_since PCAP TO: packets with the marker among those captured up to
# TO (seconds since the epoch; "end": all) that no call has checked yet. A
# packet tcpdump wrote late belongs to the step it came in, or the one
# before: either way a marker in it fails a step
markers_since() {
    python3 - "$@" <<'EOF'
import os, struct, sys
path, to = sys.argv[1], sys.argv[2]
mark = path + '.checked'
pos = int(open(mark).read()) if os.path.exists(mark) else 24
with open(path, 'rb') as f:
    head = f.read(24)
    f.seek(pos)
    data = f.read()
order = '<' if head[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1') else '>'
nano = head[:4] in (b'\x4d\x3c\xb2\xa1', b'\xa1\xb2\x3c\x4d')
at, hits = 0, 0
while at + 16 <= len(data):
    sec, frac, incl, _ = struct.unpack(order + 'IIII', data[at:at + 16])
    if at + 16 + incl > len(data) or \
       (to != 'end' and sec + frac / (1e9 if nano else 1e6) > float(to)):
        break
    hits += b'UCXCRYPT-MARKER-' in data[at + 16:at + 16 + incl]
    at += 16 + incl
open(mark, 'w').write(str(pos + at))
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
    wait_listening ucxf-h1 "$port" "$!"
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

# mpich LABEL ENV...: MPICH's 2-rank ping-pong on host 1 (UCX's defaults,
# error mode none); prints its exit status. Each rank logs UCX's lines to
# a file of its own: the launcher drops what a rank it ends had not
# forwarded yet
mpich() {
    local label=$1 rc
    shift
    on_host_defaults ucxf-h1 env UCX_LOG_FILE="$work/$label.ucx.%p" "$@" \
        timeout 20 mpiexec.mpich -n 2 "$mpi_check" -s "$sizes" \
        >"$work/$label.log" 2>&1
    rc=$?
    cat "$work/$label".ucx.* >>"$work/$label.log" 2>/dev/null
    rm -f "$work/$label".ucx.*
    echo "$rc"
}

# the N to fail of KIND for a run that makes COUNT: every call; for seals
# a Fibonacci series (a run makes thousands, one per record)
fail_points() { # KIND COUNT
    local a=1 b=2 t
    if [ "$1" = call ]; then
        seq 1 "$(($2 + 2))"
        return
    fi
    while [ "$a" -le "$(($2 + 2))" ]; do
        echo "$a"
        t=$((a + b)); a=$b; b=$t
    done
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
plain_hits=$(markers_since "$work/control.pcap" end)
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
    grep -q "UCX  ERROR *crypt: .*\(no memory for secrets\|cipher context\|random generator\|X25519\|HKDF\|HMAC-SHA256\|SHA-256\|failed to seal\)" "$1"
}

# one_run ROLE LABEL ENV...: the process of ROLE that ENV fails (the
# client, the server or both MPI ranks) runs once with its peers; sets rc
# (the failing process's status), why (its log), step_ok and reason
one_run() {
    local role=$1 label=$2 honest hit k
    shift 2
    case "$role" in
    client)
        server_start "$label" 0 "${crypt_env[@]}"
        rc=$(client "$label-client" "${crypt_env[@]}" "$@")
        why="$work/$label-client.log"
        if [[ "$*" != *=0 ]]; then # (a step, not the count's run)
            honest=$(client "$label-honest" "${crypt_env[@]}")
            [ "$honest" = 0 ] || { step_ok=0; reason="the next honest client: rc $honest"; }
        fi
        stop_tree "$server_pid"
        ;;
    server)
        # (two clients, then it exits by itself and says its count)
        server_start "$label" 2 "${crypt_env[@]}" "$@"
        why="$work/$label.server.log"
        rc=0
        # honest clients one after the other: the one the failure hits
        # may fail (said why), one that starts after it must be served
        # while the server lives; none may hang
        for k in 1 2; do
            hit=0
            grep -q "TESTING: failing [a-z]* [0-9]* " "$why" && hit=1
            honest=$(client "$label-honest$k" "${crypt_env[@]}")
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
        stop_tree "$server_pid"
        ;;
    mpich)
        rc=$(mpich "$label" "${crypt_env[@]}" "$@")
        why="$work/$label.log"
        ;;
    esac
}

# sweep ROLE KIND: fail the N-th resource call (KIND call) or seal (seal)
# of the client, the server or both MPI ranks; N from 1 to the count
sweep() {
    local role=$1 kind=$2 count n hits rc k step_ok reason made
    local var why reached=0 bad=0 absorbed=0 errors=0 tag=$1
    local fib_next=2 t made_re
    var=CRYPT_TEST_FAIL_CALL made_re='s/.*TESTING: \([0-9]*\) fallible calls.*/\1/p'
    if [ "$kind" = seal ]; then
        var=CRYPT_TEST_FAIL_SEAL tag=$role-seal
        made_re='s/.*TESTING: [0-9]* fallible calls, \([0-9]*\) seals.*/\1/p'
    fi
    : >"$work/$tag.sites"
    # The count: the same run, nothing failed. Which side opens crypt's own
    # connection, and so how many calls each makes, differs from run to run
    # (the lower key's side carries both directions): the most of three
    # runs, and two past it. A client's count grows with what its steps
    # made (each step is one client's whole life); a server's steps serve
    # two clients, the count one.
    count=0
    for k in 1 2 3; do
        step_ok=1
        if [ "$role" = server ]; then
            # (one client: the server exits by itself and prints its count)
            server_start "$tag-count$k" 1 "${crypt_env[@]}" env $var=0
            rc=$(client "$tag-count$k-client" "${crypt_env[@]}")
            wait "$server_pid"
            why="$work/$tag-count$k.server.log"
        else
            one_run "$role" "$tag-count$k" env $var=0
        fi
        made=$(sed -n "$made_re" "$why" | sort -n | tail -1)
        if [ "$rc" != 0 ] || [ -z "$made" ]; then
            verdict "failure_sweep_${tag}_count" 0 "the unfailed run: rc $rc, count '$made'"
            return
        fi
        [ "$made" -gt "$count" ] && count=$made
    done
    local limit=$((count + 2)) i=0 calls=(${SWEEP_CALLS:-})
    capture_start "$work/$tag.pcap" "$([ "$role" = mpich ] && echo any || echo ucxf-v1)"
    n=0
    while :; do
        if [ "${#calls[@]}" -gt 0 ]; then
            [ "$i" -lt "${#calls[@]}" ] || break
            n=${calls[$i]}
        elif [ "$kind" = call ]; then
            # (MPICH's job: every sixth call, both ranks failing theirs:
            # about 90 jobs of a second or two, in the minutes the full
            # tier has; the hangs it found were runs of neighbouring
            # calls, 22 of the 50 from 171 to 220, the handshakes)
            if [ "$role" = mpich ] && [ "$n" -gt 0 ]; then
                n=$((n + ${SWEEP_MPICH_STRIDE:-6}))
            else
                n=$((n + 1))
            fi
        else
            # seals: a Fibonacci series (a run makes one per record)
            [ "$n" = 0 ] && n=1 || { t=$((n + fib_next)); n=$fib_next; fib_next=$t; }
        fi
        [ "${#calls[@]}" -gt 0 ] || [ "$n" -le "$limit" ] || break
        i=$((i + 1))
        step_ok=1 reason=""
        one_run "$role" "$tag-$n" env $var=$n
        hits=$(markers_since "$work/$tag.pcap" "$(date +%s.%N)")
        [ "$hits" = 0 ] || { step_ok=0; reason="$hits packets with the marker in clear"; }
        # (timeout's 124; mpiexec itself says 143 for ranks that aborted)
        if [ "$rc" = 124 ] || { [ "$role" != mpich ] && [ "$rc" -ge 124 ]; }; then
            step_ok=0; reason="the failing process did not end by itself: rc $rc"
        fi
        if grep -q "TESTING: failing $kind $n " "$why"; then
            reached=$((reached + 1))
            sed -n "s/.*TESTING: failing $kind $n (\([a-z_]*\)) at \(.*\)/\1 \2/p" "$why" \
                >>"$work/$tag.sites"
            if ! said_why "$why"; then
                step_ok=0; reason="rc $rc and no reason said: $(grep -v TESTING "$why" | tail -1)"
            elif [ "$rc" = 0 ] && { [ "$role" = server ] || grep -q "DATA OK\|MPI OK" "$why"; }; then
                absorbed=$((absorbed + 1))
            else
                errors=$((errors + 1))
            fi
        fi
        if [ "$role" = client ]; then
            made=$(sed -n "$made_re" "$why" | sort -n | tail -1)
            [ -n "$made" ] && [ $((made + 2)) -gt "$limit" ] && limit=$((made + 2))
        fi
        if [ "$step_ok" = 0 ]; then
            bad=$((bad + 1))
            echo "  $role $kind $n: $reason"
            echo "$n $reason" >>"$work/$tag.failures"
        fi
    done
    capture_stop
    hits=$(markers_since "$work/$tag.pcap" end)
    if [ "$hits" != 0 ]; then
        bad=$((bad + 1))
        echo "$n (the last step) $hits packets with the marker in clear" >>"$work/$tag.failures"
    fi
    local sites
    sites=$(sort -u "$work/$tag.sites" | wc -l)

    echo "  $role: $reached ${kind}s failed one by one at $sites distinct sites" \
         "($(cut -d' ' -f1 "$work/$tag.sites" | sort | uniq -c | tr -s ' ' |
             tr '\n' ',' | sed 's/,$//')); $errors ended with the reason," \
         "$absorbed went on verified, $bad broke a rule"
    verdict "failure_sweep_${tag}_fails_closed" \
        "$([ "$bad" = 0 ] && [ "$reached" -gt 0 ] && echo 1 || echo 0)" \
        "$bad of $i steps broke a rule (first: $(head -1 "$work/$tag.failures" 2>/dev/null)); $reached reached"
}

if [[ " ${SWEEP_ROLES:-mpich} " == *" mpich "* ]] &&
   ! mpicc.mpich -O2 -o "$mpi_check" "$here/mpi_check.c" >"$work/cc.log" 2>&1; then
    verdict failure_sweep_mpich_setup 0 "mpicc.mpich failed: $(tail -1 "$work/cc.log")"
    group_finish
fi
for kind in ${SWEEP_KINDS:-call seal}; do
    for role in ${SWEEP_ROLES:-client server mpich}; do
        sweep "$role" "$kind"
    done
done
group_finish
