#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The transport on the other UCX releases it builds against, next to
# Debian's 1.13.1: 1.18.1 and 1.22.0 from the PyPI wheels, with their own
# internal headers (contrib/fetch-ucx-releases.sh). Per release: the test
# build against that UCX, the UCT tests, and the integration groups that
# run the plugin under UCP (data 0 B..64 MiB, fail-closed, tamper, the wire
# capture across two emulated hosts, Open MPI and MPICH, the aux lane,
# client/server, and on 1.22 the plugin loaded by UCX itself), on that
# UCX's libraries and tools, loaded as on 1.13.1 (LD_PRELOAD); and the
# launcher picking this release's build out of a shared prefix.
#
#   test/releases/run.sh TOP BUILD_DIR RESULTS_DIR
#
# Reports: uct_ucx-<v>.xml and integration_ucx-<v>.xml in RESULTS_DIR, test
# names prefixed "ucx-<v>/". What does not hold on a release yet is named
# below, reported as skipped with the reason (the summary counts it).
set -uo pipefail

top=${1:?usage: $0 TOP BUILD_DIR RESULTS_DIR}
build=${2:?}
results=${3:?}
jobs=$(nproc 2>/dev/null || echo 2)
. "$top/test/lib/report.sh"
. "$top/test/lib/ports.sh"

# Known not to hold yet, per release (reported as skipped, with why):
# - UCP 1.18's protocol selection does not take the bulk engine for tag
#   rendezvous here by itself (eager am_zcopy, then AM rendezvous): the data
#   tests pass, their check that segments were sealed does not, and the
#   bulk tamper hooks find no segment to tamper with. UCP chooses by
#   crypt's bandwidth estimate per operation (uct_crypt_iface_estimate_perf),
#   and over this machine's tcp the wire, not the cipher, is the bound, so
#   AM and the engine estimate alike. It does take the engine where one core
#   seals slower than the wire (ucp_tag_slow_cipher_chooses_the_bulk_engine)
#   and for a get rendezvous (ucp_tag_rendezvous_get_verified), and every
#   MPI_Get goes over crypt's bulk get (test_mpi). UCP 1.22 takes the engine
#   for rendezvous through crypt's get_zcopy: nothing skipped there;
# - the 1.18.1 wheel's ucx_perftest is a corrupt ELF (crashes in ld.so):
#   the tests that run it.
no_bulk='ucp_tag_sizes_0_to_64MiB_verified_own_wire|ucp_tag_sizes_verified_own_wire_pool|ucp_tag_sizes_0_to_64MiB_verified_bulk_(pipelined|naive)|ucp_tag_small_segments_many_threads_verified|tamper_bulk_[a-z_]*_detected'
declare -A skip reason
skip[1.18.1]="^($no_bulk|no_job_secret_refused_unless_asked_for_by_name|tamper_(reorder|drop)_detected)\$"
reason[1.18.1]='UCP 1.18 does not take the bulk engine for tag rendezvous over tcp here (counters; bulk tamper), or the test runs the 1.18.1 wheel ucx_perftest, a corrupt ELF'

# Two builds in one prefix, as at a site with several UCX releases: the
# main test install (1.13.1) and this release's copy in
# lib/ucx-crypt/ucx-MAJOR.MINOR. ucx-crypt-run, run with this release's
# libraries, must preload the build for it; without the copy, the default
# build refuses that UCX with its message. Loopback, ucp_check verifies.
launcher_case() { # VERSION UCX_PREFIX OBJDIR RELEASE_PREFIX
    local version=$1 ucx=$2 dir=$3 to=$4 main="$build/install-test" rc port
    local flavour="$build/install-test/lib/ucx-crypt/ucx-${1%.*}"
    "$main/bin/ucx-crypt-keygen" "$build/launcher.key" 2>/dev/null ||
        [ -f "$build/launcher.key" ]
    local envs=(LD_LIBRARY_PATH="$ucx/lib" PATH="$ucx/bin:$PATH" UCX_TLS=crypt
                UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$build/launcher.key")
    for with in 0 1; do
        rm -rf "$flavour"
        if [ $with = 1 ]; then
            mkdir -p "$flavour" && cp "$to/lib/ucx-crypt/ucx-${version%.*}/libuct_crypt.so" "$flavour/"
        fi
        port=$(( $(test_port_base) + 900 ))
        env "${envs[@]}" timeout 60 "$main/bin/ucx-crypt-run" "$dir/test/integration/ucp_check" \
            -l "$port" >"$build/launcher.s.log" 2>&1 &
        local srv=$!
        sleep 1
        env "${envs[@]}" timeout 60 "$main/bin/ucx-crypt-run" "$dir/test/integration/ucp_check" \
            -c 127.0.0.1 -p "$port" -s 0,1000,1048577 -n 2 >"$build/launcher.c.log" 2>&1
        rc=$?
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        if [ $with = 0 ]; then
            if [ $rc != 0 ] && grep -q "FATAL: built for UCX 1.13.1 but running with UCX $version" \
                   "$build/launcher.c.log"; then
                REPORT_NAME_PREFIX="ucx-$version/" record launcher_without_a_build_for_this_ucx_refuses pass
            else
                REPORT_NAME_PREFIX="ucx-$version/" record launcher_without_a_build_for_this_ucx_refuses fail \
                    "rc $rc; $(tail -2 "$build/launcher.c.log" | tr '\n' ' ')"
            fi
        elif [ $rc = 0 ] && grep -q "DATA OK" "$build/launcher.c.log"; then
            REPORT_NAME_PREFIX="ucx-$version/" record launcher_picks_the_build_for_this_ucx pass
        else
            REPORT_NAME_PREFIX="ucx-$version/" record launcher_picks_the_build_for_this_ucx fail \
                "rc $rc; $(tail -2 "$build/launcher.c.log" | tr '\n' ' ')"
        fi
    done
    rm -rf "$flavour"
}

releases=$("$top/contrib/fetch-ucx-releases.sh" "$build/ucx-releases")
status=$?
if [ $status -ne 0 ]; then
    # 3: no UCX source archives on this machine (skipped); else a failure
    record other_ucx_releases "$([ $status -eq 3 ] && echo skip || echo fail)" \
        "cannot fetch the other UCX releases (contrib/fetch-ucx-releases.sh: $status)"
    write_report releases "$results/ucx_releases.xml"
    exit 0
fi

# (fd 3: the tests below read standard input)
while read -r version ucx tree <&3; do
    dir="$build/obj-ucx-$version"
    to="$build/install-ucx-$version"
    echo "== UCX $version: build against $ucx"
    mkdir -p "$dir"
    if [ ! -f "$dir/config.status" ] || [ "$top/configure" -nt "$dir/config.status" ]; then
        (cd "$dir" && "$top/configure" --prefix="$to" --with-ucx="$ucx" \
                         --with-ucx-src="$tree" --enable-fault-injection) >"$dir.log" 2>&1 || {
            REPORT_NAME_PREFIX="ucx-$version/" record build fail "configure: $(tail -2 "$dir.log")"
            continue; }
    fi
    if ! { make -C "$dir" -j"$jobs" --no-print-directory &&
           make -C "$dir" install --no-print-directory &&
           make -C "$dir" -j"$jobs" --no-print-directory check TESTS=; } >>"$dir.log" 2>&1; then
        REPORT_NAME_PREFIX="ucx-$version/" record build fail "make: $(tail -2 "$dir.log")"
        continue
    fi

    echo "== UCX $version: UCT tests"
    LD_LIBRARY_PATH="$ucx/lib" "$dir/test/gtest/gtest_uct" \
        --gtest_output="xml:$results/uct_ucx-$version.xml" >"$dir.gtest.log" 2>&1
    grep -E '^\[  (PASSED|FAILED) ' "$dir.gtest.log"
    if [ ! -s "$results/uct_ucx-$version.xml" ]; then
        REPORT_NAME_PREFIX="ucx-$version/" record gtest_uct fail "died: $(tail -2 "$dir.gtest.log")"
    fi

    echo "== UCX $version: integration"
    PATH="$ucx/bin:$PATH" LD_LIBRARY_PATH="$ucx/lib" \
    IT_ONLY='test_ucp_sizes|test_fail_closed|test_tamper|test_wire|test_mpi|test_aux_lane|test_client_server|test_plugin_path' \
    IT_REPORT="integration_ucx-$version" REPORT_NAME_PREFIX="ucx-$version/" \
    REPORT_SKIP="${skip[$version]:-}" REPORT_SKIP_REASON="${reason[$version]:-}" \
        "$top/test/integration/run.sh" "$dir" "$to" "$results"

    echo "== UCX $version: ucx-crypt-run picks the build for it"
    launcher_case "$version" "$ucx" "$dir" "$to"
done 3<<<"$releases"

# (build failures and the launcher cases were recorded above)
[ ${#names[@]} -eq 0 ] || write_report releases "$results/ucx_releases.xml"
exit 0
