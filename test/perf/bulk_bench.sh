#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Bulk engine benchmark: ucx_perftest tag_bw 64 KiB .. 16 MiB and tag_lat,
# plaintext vs crypt in the same run: "own" is crypt on its own Ethernet
# wire (what tcp users get: bulk segments as frames of the connection,
# the pool's threads as the machine allows), "own-am" the same with the
# bulk engine off (rendezvous as AM records); "pipelined", "naive", "am"
# and "pipe64k" are the bulk engine over an inner with puts (rc at a
# site): UCX's tcp stands in for rc there, which only a test build can do
# (UCX_CRYPT_INNER_UCX_TCP; pass PREFIX=_build/install-test). On two
# wires:
#
#   veth      two emulated hosts (netns + veth, own pid/ipc namespaces)
#   fastwire  loopback, crypto backend forced to OpenSSL: a wire faster than
#             one core's GCM, as in the CryptMPI paper's setting
#
# Then calibrates the crypto side (crypt_calibrate: thread scaling, the
# profile the shim reads) and compares the model with the measurements
# (bulk_model.py: table and PNG). Tables on stdout; CSV, JSON and PNG in
# RESULTS_DIR, each with the machine's description. Not a test: nothing here
# asserts; this machine is shared and noisy, read ratios.
#
#   test/perf/bulk_bench.sh PREFIX OBJDIR RESULTS_DIR [quick]
set -uo pipefail

prefix=${1:?usage: $0 PREFIX OBJDIR RESULTS_DIR [quick]}
obj=${2:?}
results=${3:?}
quick=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
plugin="$prefix/lib/libuct_crypt.so"
work=$(mktemp -d /tmp/ucx-crypt-bulk.XXXXXX)
. "$here/../lib/ports.sh"
port=$(test_port_base) || exit 1
mkdir -p "$results"
# Debian's python3 (with python3-matplotlib), not whatever is first on PATH
py=/usr/bin/python3
[ -x "$py" ] || py=python3
csv="$results/bulk_bench.csv"
profile="$results/crypt_profile.txt"

. "$here/../netns.sh"
. "$here/../lib/machine.sh"

cleanup() {
    netns_down ucxc-b1 ucxc-b2
    rm -rf "$work"
}
trap cleanup EXIT

bench_hosts ucxc-b1 ucxc-b2 ucxcb-v1 ucxcb-v2 10.79.0.1 10.79.0.2
"$prefix/bin/ucx-crypt-keygen" "$work/job.key" >/dev/null

machine="$(bench_machine)"

echo "== crypto side: thread scaling and calibration profile"
"$obj/test/perf/crypt_calibrate" --csv "$results/crypt_calibrate.csv" \
    --profile "$profile" ${quick:+--min-time 0.05 --threads 1,2}
echo

spare=$(spare_pus_per_rank) # crypto threads per emulated host
# the bulk engine's inner: UCX's tcp standing in for rc (test builds only)
rc_like=UCX_CRYPT_INNER_UCX_TCP=y
bulk_modes=(pipelined naive am pipe64k)
profile_env="UCX_CRYPT_PROFILE=$profile" # (test builds read the profile)
if ! is_test_build "$prefix"; then
    echo "note: $prefix is a release build: only plaintext and crypt's own wire" \
         "(pass _build/install-test for the bulk engine's rows)"
    bulk_modes=()
    profile_env=""
fi
mode_env() { # mode -> env assignments for both sides
    case $1 in
    plain)     echo "UCX_TLS=tcp" ;;
    own)       echo "LD_PRELOAD=$plugin UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/job.key $profile_env UCX_CRYPT_BULK_THREADS=$spare" ;;
    own-am)    echo "LD_PRELOAD=$plugin UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/job.key UCX_CRYPT_BULK=n" ;;
    pipelined) echo "LD_PRELOAD=$plugin UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/job.key $rc_like $profile_env UCX_CRYPT_BULK_THREADS=$spare" ;;
    pipe64k)   echo "LD_PRELOAD=$plugin UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/job.key $rc_like $profile_env UCX_CRYPT_BULK_THREADS=$spare UCX_CRYPT_BULK_SEGMENT=64k" ;;
    naive)     echo "LD_PRELOAD=$plugin UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/job.key $rc_like UCX_CRYPT_BULK_MODE=naive" ;;
    am)        echo "LD_PRELOAD=$plugin UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE=$work/job.key $rc_like UCX_CRYPT_BULK=n" ;;
    esac
}

# prints "median_us avg_MBs" of one ucx_perftest run
run_pair() { # wire mode test size
    local wire=$1 mode=$2 test=$3 size=$4 envs n
    read -r -a envs <<<"$(mode_env "$mode")"
    [ "$wire" = fastwire ] && [ "$mode" != plain ] && envs+=(UCX_CRYPT_BACKEND=openssl)
    n=1000
    [ "$size" -ge 262144 ] && n=300
    [ "$size" -ge 1048576 ] && n=100
    [ "$size" -ge 16777216 ] && n=30
    [ -n "$quick" ] && n=$((n / 5 + 5))
    port=$((port + 1))
    if [ "$wire" = veth ]; then
        on_host ucxc-b1 ucxcb-v1 env "${envs[@]}" timeout 120 ucx_perftest -p $port \
            >"$work/srv.log" 2>&1 &
        local srv=$!
        sleep 0.5
        on_host ucxc-b2 ucxcb-v2 env "${envs[@]}" timeout 120 ucx_perftest 10.79.0.1 \
            -p $port -t "$test" -s "$size" -n "$n" >"$work/cli.log" 2>&1
    else
        env "${envs[@]}" UCX_NET_DEVICES=lo timeout 120 ucx_perftest -p $port \
            >"$work/srv.log" 2>&1 &
        local srv=$!
        sleep 0.5
        env "${envs[@]}" UCX_NET_DEVICES=lo timeout 120 ucx_perftest 127.0.0.1 -p $port \
            -t "$test" -s "$size" -n "$n" >"$work/cli.log" 2>&1
    fi
    wait $srv
    awk '/^Final:/ {print $3, $6}' "$work/cli.log"
}

modes=(plain own own-am "${bulk_modes[@]}")
echo "# $machine" >"$csv"
echo "wire,mode,test,size,median_us,avg_MBs" >>"$csv"
for wire in veth fastwire; do
    echo "== $wire: tag_lat (median us) and tag_bw (MB/s; ratios to plaintext and naive)"
    printf '%-9s %9s' test size
    for m in "${modes[@]}"; do printf ' %10s' "$m"; done
    printf ' %8s %8s %8s %8s\n' own/pl ownam/pl pipe/pl naive/pl
    for spec in "tag_lat 8" "tag_lat 1024" "tag_lat 65536" "tag_lat 262144" \
                "tag_lat 1048576" "tag_lat 4194304" "tag_lat 16777216" \
                "tag_bw 65536" "tag_bw 262144" "tag_bw 1048576" "tag_bw 4194304" \
                "tag_bw 16777216"; do
        set -- $spec
        declare -A lat=() bw=()
        for m in "${modes[@]}"; do
            read -r l b < <(run_pair "$wire" "$m" "$1" "$2")
            lat[$m]=${l:-nan}; bw[$m]=${b:-nan}
            echo "$wire,$m,$1,$2,${l:-},${b:-}" >>"$csv"
        done
        printf '%-9s %9s' "$1" "$2"
        if [ "$1" = tag_lat ]; then
            for m in "${modes[@]}"; do printf ' %8sus' "${lat[$m]}"; done
            echo
        else
            for m in "${modes[@]}"; do printf ' %10s' "${bw[$m]}"; done
            awk -v p="${bw[plain]}" -v o="${bw[own]}" -v a="${bw[own-am]}" \
                -v c="${bw[pipelined]:-}" -v n="${bw[naive]:-}" 'function r(x) {
                    return (p + 0 > 0 && x + 0 > 0) ? sprintf(" %8.2f", x / p) : "        -" }
                BEGIN {print r(o) r(a) r(c) r(n)}'
        fi
        unset lat bw
    done
    echo
done

"$py" - "$csv" "$results/bulk_bench.json" "$machine" <<'EOF'
import csv, json, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith('#'))]
json.dump({"machine": sys.argv[3], "runs": rows}, open(sys.argv[2], "w"), indent=1)
EOF

"$py" "$here/bulk_model.py" "$csv" "$profile" "$results"
echo "CSV: $csv  JSON: $results/bulk_bench.json  calibration: $results/crypt_calibrate.csv"
