#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The main demo: ucx_perftest between two emulated hosts, over crypt and over
# plaintext tcp in the same run, as a table (and CSV beside it).
#
#   test/perf/two_host_perftest.sh PREFIX RESULTS_DIR [ITERATIONS]
#
#   netns ucxc-d1 (10.78.0.1, ucxcd-v1) <--veth--> netns ucxc-d2 (10.78.0.2, ucxcd-v2)
#
# Each side also gets its own pid/ipc namespaces, so nothing goes through
# shared memory. This machine is shared and noisy: read the ratios, not the
# absolute numbers. Benchmarks are not tests: nothing here asserts.
set -uo pipefail

prefix=${1:?usage: $0 PREFIX RESULTS_DIR [ITERATIONS]}
results=${2:?}
iters=${3:-2000}
plugin="$prefix/lib/libuct_crypt.so"
work=$(mktemp -d /tmp/ucx-crypt-demo.XXXXXX)
. "$(dirname "$0")/../lib/ports.sh"
port=$(test_port_base) || exit 1
mkdir -p "$results"
csv="$results/two_host_perftest.csv"

. "$(dirname "$0")/../netns.sh"
. "$(dirname "$0")/../lib/machine.sh"

cleanup() {
    netns_down ucxc-d1 ucxc-d2
    rm -rf "$work"
}
trap cleanup EXIT

bench_hosts ucxc-d1 ucxc-d2 ucxcd-v1 ucxcd-v2 10.78.0.1 10.78.0.2

"$prefix/bin/ucx-crypt-keygen" "$work/job.key"

spare=$(spare_pus_per_rank) # crypto threads per emulated host

# prints the median latency (us) and the average bandwidth (MB/s) of one test
run_pair() { # mode test size
    local mode=$1 test=$2 size=$3 envs
    if [ "$mode" = crypt ]; then
        envs=(LD_PRELOAD="$plugin" UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_KEY_FILE="$work/job.key"
              UCX_CRYPT_BULK_THREADS=$spare)
    else
        envs=(UCX_TLS=tcp)
    fi
    port=$((port + 1))
    on_host ucxc-d1 ucxcd-v1 "${envs[@]}" timeout 120 ucx_perftest -p $port \
        >"$work/srv.log" 2>&1 &
    local srv=$!
    sleep 0.5
    local n=$iters
    [ "$size" -ge 1048576 ] && n=$((iters / 10 + 10))
    on_host ucxc-d2 ucxcd-v2 "${envs[@]}" timeout 120 ucx_perftest 10.78.0.1 -p $port \
        -t "$test" -s "$size" -n "$n" >"$work/cli.log" 2>&1
    wait $srv
    # Final: iters 50%ile avg overall bw_avg bw_overall ...
    awk '/^Final:/ {print $3, $6}' "$work/cli.log"
}

# one core's AES-128-GCM speed through OpenSSL, 16 KiB blocks: the scale
# crypt's bandwidth is read against (ipsec-mb is faster where it has VAES)
gcm_mbs=$(openssl speed -seconds 1 -bytes 16384 -evp aes-128-gcm 2>/dev/null |
          awk '/^AES-128-GCM/ {sub(/k$/, "", $2); printf "%.0f", $2 * 1000 / 1e6}')
printf '# %s, AES-128-GCM %s MB/s per core (OpenSSL, 16 KiB)\n' \
    "$(bench_machine)" "${gcm_mbs:-?}" | tee "$csv"
echo "test,size,plain_lat_us,crypt_lat_us,plain_bw_MBs,crypt_bw_MBs,bw_ratio" >>"$csv"
lat_rows=() bw_rows=()
for spec in "tag_lat 8" "tag_lat 1024" "tag_bw 65536" "tag_bw 1048576" "tag_bw 4194304"; do
    set -- $spec
    read -r plat pbw < <(run_pair plain "$1" "$2")
    read -r clat cbw < <(run_pair crypt "$1" "$2")
    if [ -z "${plat:-}" ] || [ -z "${clat:-}" ]; then
        printf '%-8s %9s   run failed (see logs)\n' "$1" "$2"
        continue
    fi
    ratio=$(awk -v c="$cbw" -v p="$pbw" 'BEGIN {printf "%.3f", c / p}')
    delta=$(awk -v c="$clat" -v p="$plat" 'BEGIN {printf "%+.2f", c - p}')
    if [ "$1" = tag_lat ]; then
        lat_rows+=("$(printf '%-8s %9s %12s %12s %9s' "$1" "$2" "$plat" "$clat" "$delta")")
    else
        bw_rows+=("$(printf '%-8s %9s %12s %12s %9s' "$1" "$2" "$pbw" "$cbw" "$ratio")")
    fi
    echo "$1,$2,$plat,$clat,$pbw,$cbw,$ratio" >>"$csv"
done
printf '\n%-8s %9s %12s %12s %9s\n' test size "plain us" "crypt us" "+us"
printf '%s\n' "${lat_rows[@]}"
printf '\n%-8s %9s %12s %12s %9s\n' test size "plain MB/s" "crypt MB/s" "ratio"
printf '%s\n' "${bw_rows[@]}"
echo
echo "CSV: $csv"
