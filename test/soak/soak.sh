#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Soak: mixed traffic over crypt for a bounded time, every byte verified,
# keys updated every few hundred records, and at the end of every round
# each process's counters read: not one record or segment may have failed
# authentication, sequencing or its connection.
#
#   test/soak/soak.sh OBJDIR PREFIX RESULTS_DIR SECONDS
#
# A round, on crypt's own wire over loopback (every process in its own
# pid namespace is not needed here: UCX_TLS leaves shared memory out):
#   - Open MPI, 4 ranks on 2 nodes as the coll component sees them, through
#     the shipped site configuration: point-to-point eager and rendezvous,
#     MPI_Put / MPI_Get, collectives (mpi_check), every byte checked;
#   - two UCP processes (ucp_check): tag messages of every size class,
#     contiguous and as an iov, the bulk engine sealing on the progress
#     thread and on the pool in turn, and with it off (AM records).
# Records and bulk keys are updated every UCX_CRYPT_REKEY_RECORDS (300).
# One test result (soak_mixed_traffic_verified) and a summary line with the
# rounds, the time and the volume sealed.
set -uo pipefail

obj=${1:?usage: $0 OBJDIR PREFIX RESULTS_DIR SECONDS}
prefix=${2:?}
results=${3:?}
seconds=${4:?}
here=$(cd "$(dirname "$0")" && pwd)
plugin="$prefix/lib/libuct_crypt.so"
check="$obj/test/integration/ucp_check"
site_conf="$prefix/share/ucx-crypt/openmpi-mca-params.conf"
work=$(mktemp -d /tmp/ucx-crypt-soak.XXXXXX)
. "$here/../lib/report.sh"
. "$here/../lib/ports.sh"
port=$(test_port_base) || exit 1

# the background server this script started, by PID (mpirun runs in the
# foreground): `timeout` passes SIGTERM on to it
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null
    [ -n "${KEEP_WORK:-}" ] && echo "logs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT

"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null
if ! mpicc -O2 -o "$work/mpi_check" "$here/../integration/mpi_check.c" 2>"$work/cc.log"; then
    record soak_mixed_traffic_verified fail "mpi_check: $(tail -1 "$work/cc.log")"
    write_report soak "$results/soak.xml"
    exit 1
fi

crypt_env=(UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key"
           UCX_CRYPT_STATS=y UCX_CRYPT_REKEY_RECORDS=300 UCX_WARN_UNUSED_ENV_VARS=n)
# (not the wire's "connections failed": it also counts a connection whose
# peer exited first at the job's end, which is no loss; a loss mid-run is
# "connection lost" and an MPI error)
failure_fields='authentication failed|replayed record|reordered or dropped record|record of an unknown flow|malformed record|handshake refused|record on a failed flow|bulk segment out of order|out of resources on this side|connection lost'

# check_counters LOG EXPECTED_LINES: every process printed its counters,
# all failure counters are 0; adds the volume to the totals
sealed_total=0 bulk_total=0 rekeys_total=0
check_counters() {
    local log=$1 want=$2 lines bad
    lines=$(grep -o '\[ucx-crypt pid [0-9]*\] records sealed [^[]*' "$log")
    [ "$(printf '%s\n' "$lines" | grep -c 'records sealed')" -ge "$want" ] || {
        echo "counters of $(printf '%s\n' "$lines" | grep -c 'records sealed') processes, expected $want"
        return 1; }
    bad=$(printf '%s\n' "$lines" | grep -oE "($failure_fields) [1-9][0-9]*" | sort -u | tr '\n' ';')
    [ -z "$bad" ] || {
        echo "failures counted: $bad; the log says: $(grep -h 'UCX  ERROR' "$log" |
                                                    head -3 | tr '\n' ' ')"
        return 1; }
    local s b k
    read -r s b k < <(printf '%s\n' "$lines" | awk '
        { for (i = 1; i <= NF; ++i) {
              if ($i == "sealed" && $(i-1) == "records") s += $(i+1)
              if ($i == "sealed" && $(i-1) == "bytes" && $(i-2) == "bulk") b += $(i+1)
              if ($i == "updates" && $(i-1) == "key") k += $(i+1)
          } }
        END { printf "%d %d %d\n", s, b, k }')
    sealed_total=$((sealed_total + s)); bulk_total=$((bulk_total + b))
    rekeys_total=$((rekeys_total + k))
}

run_mpi() { # round
    env OMPI_MCA_mca_base_param_files="$site_conf" OMPI_ALLOW_RUN_AS_ROOT=1 \
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 mpirun -np 4 --oversubscribe \
        $(printf -- '-x %s ' "${crypt_env[@]}") -x UCX_CRYPT_COLL_NODES=2:block \
        "$work/mpi_check" -s 8,1000,65536,1048577 >"$work/mpi.log" 2>&1 || {
        echo "mpirun exited $?: $(grep -v '^\[ucx-crypt' "$work/mpi.log" | tail -2 | tr '\n' ' ')"
        return 1; }
    [ "$(grep -c '^MPI OK rank' "$work/mpi.log")" = 4 ] || {
        echo "not every rank verified: $(grep -v '^\[ucx-crypt' "$work/mpi.log" | tail -2 | tr '\n' ' ')"
        return 1; }
    check_counters "$work/mpi.log" 4
}

run_ucp() { # round
    local round=$1 extra=() args=(-s 0,8,1000,8125,65536,1048577,4194304 -n 20)
    case $((round % 3)) in
    0) extra=(UCX_CRYPT_BULK_THREADS=0) ;;
    1) extra=(UCX_CRYPT_BULK_THREADS=2 UCX_CRYPT_BULK_SEGMENT=64k); args+=(-v) ;;
    2) extra=(UCX_CRYPT_BULK=n) ;;
    esac
    port=$((port + 1))
    env LD_PRELOAD="$plugin" "${crypt_env[@]}" "${extra[@]}" timeout 180 "$check" \
        -l "$port" >"$work/s.log" 2>&1 &
    local srv=$!
    server_pid=$srv
    env LD_PRELOAD="$plugin" "${crypt_env[@]}" "${extra[@]}" timeout 180 "$check" \
        -c 127.0.0.1 -p "$port" "${args[@]}" >"$work/c.log" 2>&1
    local rc=$?
    wait $srv
    local src=$?
    server_pid=""
    [ $rc -eq 0 ] && [ $src -eq 0 ] && grep -q "DATA OK" "$work/c.log" || {
        echo "ucp_check ${extra[*]}: rc $rc/$src: $(tail -n 2 "$work/c.log" | tr '\n' ' ')"
        return 1; }
    cat "$work/s.log" "$work/c.log" >"$work/ucp.log"
    check_counters "$work/ucp.log" 2
}

start=$(date +%s)
round=0 why=""
while [ $(($(date +%s) - start)) -lt "$seconds" ]; do
    # (in this shell, not a subshell: the totals add up here)
    run_mpi $round >"$work/why" && run_ucp $round >"$work/why" || {
        why=$(cat "$work/why"); break; }
    round=$((round + 1))
    echo "soak: round $round done after $(($(date +%s) - start)) s"
done
elapsed=$(($(date +%s) - start))
echo "soak: $round rounds in $elapsed s: $sealed_total records and" \
     "$((bulk_total / 1048576)) MiB of bulk segments sealed, $rekeys_total key updates," \
     "nothing failed authentication, sequencing or a connection"
if [ -z "$why" ] && [ "$round" -gt 0 ] && [ "$rekeys_total" -gt 0 ] && [ "$bulk_total" -gt 0 ]; then
    record soak_mixed_traffic_verified pass
else
    record soak_mixed_traffic_verified fail "round $((round + 1)): ${why:-no round completed or no key update}"
fi
write_report soak "$results/soak.xml"
exit 0 # the outcome is in the report (quickstart.sh sums them up)
