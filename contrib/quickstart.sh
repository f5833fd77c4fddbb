#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ucx-crypt quick start on a fresh Debian 12 machine.
#
#   contrib/quickstart.sh          install dependencies, build, install into
#                                  _build/install, run the main job: the
#                                  encrypted two-host ping-pong vs plaintext
#   contrib/quickstart.sh build    install dependencies and build only
#   contrib/quickstart.sh check quick
#                                  the tier for every commit (under 10
#                                  minutes on 2 cores): build, the gtests,
#                                  the build checks, the fuzz corpora
#                                  replayed, one integration group per area
#                                  and the stock programs on two hosts with
#                                  UCX's defaults; same summary line
#   contrib/quickstart.sh check    build, then build the test build (tamper
#                                  hooks compiled in) and run every test,
#                                  again under ASan and UBSan (the test
#                                  build made --enable-sanitizers),
#                                  on Debian's UCX 1.13.1 and again built
#                                  against UCX 1.18.1 and 1.22.0 (PyPI
#                                  wheels, test/releases/run.sh); prints
#                                  "N passed, N failed, N skipped" last
#   contrib/quickstart.sh conformance
#                                  build, then UCX's own test suite (the
#                                  UCT and UCP gtest of the installed
#                                  release) on crypt next to tcp, every
#                                  suite: "tcp passed N / crypt passed N /
#                                  excluded N" (test/conformance; check
#                                  runs the UCT suites and a UCP selection)
#                                  (check also runs MPICH's own one-sided
#                                  tests on crypt next to tcp: test/mpich)
#   contrib/quickstart.sh bench    build, then run the crypto engine benchmark
#   contrib/quickstart.sh fuzz S   build, then run every fuzz target for S
#                                  seconds: "fuzz TARGET: N executions, M
#                                  findings" (test/fuzz/fuzz.sh)
#   contrib/quickstart.sh soak M   build, then mixed traffic over crypt for M
#                                  minutes, every byte verified, keys updated,
#                                  counters checked (test/soak/soak.sh)
#
# Re-running is cheap: nothing is re-fetched, re-configured or rebuilt that is
# up to date. Everything lands in _build/ (sources of UCX, objects, install,
# test and benchmark results).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build="$top/_build"
obj="$build/obj"                  # the product (release build)
prefix="$build/install"
obj_test="$build/obj-test"        # the test build (tamper hooks compiled in)
prefix_test="$build/install-test"
obj_asan="$build/obj-asan"        # the test build under ASan and UBSan
prefix_asan="$build/install-asan"
obj_tsan="$build/obj-tsan"        # the test build under TSan
prefix_tsan="$build/install-tsan"
# the integration groups run under the sanitizers: data of every size on
# every path, ucx_perftest, the tamper matrix, Open MPI and MPICH with the
# collectives, the wire, client/server, peer failure, leaks at exit
sanitizer_groups="test_ucp_sizes_verified|test_many_rendezvous|test_key_update|test_perftest|test_tamper|test_mpi|test_collectives|test_coll_component|test_wire|test_peer_failure|test_client_server|test_leaks"
# under TSan: where threads meet, data of every size sealed by the pool and
# handed to the progress thread (own wire and UCX inner), keys updated
# under it, and ucx_perftest
tsan_groups="test_ucp_sizes_verified|test_key_update|test_perftest"
# the quick tier's integration groups, one per area: data of every size
# on every path, start-up errors, fail closed, the tamper matrix, the
# capture, client/server (peer failure and attacks included), Open MPI
# and MPICH, the collectives, a wireup storm
quick_groups="^(test_ucp_sizes_verified|test_misconfiguration|test_fail_closed|test_tamper|test_wire|test_client_server|test_mpi|test_collectives|test_wireup_storm)$"
results="$build/results"
jobs=$(nproc 2>/dev/null || echo 2)

log() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }

do_build() {
    log "dependencies"
    "$top/contrib/install-deps.sh"

    log "UCX source tree matching the installed UCX"
    ucx_src=$("$top/contrib/fetch-ucx-src.sh" "$build/src" | tail -n 1)
    echo "$ucx_src"

    if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ] ||
       [ "$top/Makefile.am" -nt "$top/configure" ]; then
        log "autogen"
        "$top/autogen.sh"
    fi

    configure_and_build "$obj" "$prefix"
}

# The test build: the same sources with the tamper hooks the tests drive
# (configure --enable-fault-injection), installed apart from the product.
do_build_tests() {
    configure_and_build "$obj_test" "$prefix_test" --enable-fault-injection
}

configure_and_build() {
    local dir=$1 to=$2
    shift 2
    mkdir -p "$dir"
    if [ ! -f "$dir/config.status" ] || [ "$top/configure" -nt "$dir/config.status" ]; then
        log "configure $dir"
        (cd "$dir" && "$top/configure" --prefix="$to" --with-ucx=/usr \
                                       --with-ucx-src="$ucx_src" "$@")
    fi

    log "build and install into $to"
    make -C "$dir" -j"$jobs" --no-print-directory
    make -C "$dir" install --no-print-directory >/dev/null
}

# Run one GoogleTest binary with a JUnit XML report; the summary is added up
# from all reports at the end, so that one binary failing does not hide the
# others.
run_gtest() {
    local name=$1
    shift
    log "test: $name"
    "$@" --gtest_output="xml:$results/$name.xml" || true
    if [ ! -s "$results/$name.xml" ]; then
        # the binary died before writing its report: count it as a failure
        printf '<testsuites tests="1" failures="1" errors="0" disabled="0">\n' \
            >"$results/$name.xml"
        printf '<testcase name="%s" result="crashed"/></testsuites>\n' "$name" \
            >>"$results/$name.xml"
    fi
}

summarize() {
    local tests=0 failures=0 errors=0 skipped=0 f t
    for f in "$results"/*.xml; do
        t=$(grep -m1 -o '<testsuites [^>]*>' "$f")
        tests=$((tests + $(sed -n 's/.* tests="\([0-9]*\)".*/\1/p' <<<"$t")))
        failures=$((failures + $(sed -n 's/.* failures="\([0-9]*\)".*/\1/p' <<<"$t")))
        errors=$((errors + $(sed -n 's/.* errors="\([0-9]*\)".*/\1/p' <<<"$t")))
        skipped=$((skipped + $(grep -c 'result="skipped"' "$f" || true)))
    done
    local failed=$((failures + errors))
    local passed=$((tests - failed - skipped))
    log "summary"
    grep -h -B0 -A0 '<failure' "$results"/*.xml | sed 's/^/  /' | head -50 || true
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ] && [ "$tests" -gt 0 ]
}

# What both tiers start with: the test build, the gtests, the build checks
check_start() {
    rm -rf "$results"
    mkdir -p "$results"
    do_build_tests
    log "build tests"
    make -C "$obj_test" -j"$jobs" --no-print-directory check TESTS=
    run_gtest core "$obj_test/test/gtest/gtest_core"
    run_gtest uct "$obj_test/test/gtest/gtest_uct"
    # the collective lane again over UCX's tcp transport, in place of ud and
    # dc (no handshake: its chunks' tags are all that keeps strangers out)
    run_gtest uct_lane_ucx_inner env UCX_CRYPT_LANE_UCX_TCP=y \
        "$obj_test/test/gtest/gtest_uct" --gtest_filter="uct_crypt_lane*"
    # both listeners under load: every handshake goes through a cookie reply
    # (UCX_CRYPT_HANDSHAKE_RATE=0), and a replay gets one instead of a DH
    run_gtest uct_under_load env UCX_CRYPT_HANDSHAKE_RATE=0 \
        "$obj_test/test/gtest/gtest_uct" --gtest_filter="uct_crypt_wire*:uct_crypt_cm*"
    # both listeners under load give each host half their DHs a second
    # (UCX_CRYPT_HANDSHAKE_RATE=8: 4 a host): a job-secret holder's
    # connections past its host's share wait, another host's do not
    run_gtest uct_host_share env UCX_CRYPT_HANDSHAKE_RATE=8 \
        "$obj_test/test/gtest/gtest_uct" --gtest_filter="uct_crypt_wire_share_test.*:uct_crypt_cm_share_test.*"
    # flows that sleep and wake, with keys updated before they sleep (a
    # key update every 2 records and bulk segments)
    run_gtest uct_rekeyed_flows env UCX_CRYPT_REKEY_RECORDS=2 \
        "$obj_test/test/gtest/gtest_uct" --gtest_filter="*flow_sleeps*:*flow_slept*:*ended_flow*:*asleep*:*cannot_wake*"
    log "test: the product build (layering, every room's door, file sizes, knobs, exports, no test hooks)"
    "$top/test/integration/build_check.sh" "$top" "$prefix" "$prefix_test" "$results"
}

do_check() {
    check_start
    log "test: fuzz targets, ${FUZZ_SECONDS:-10} s each (regressions: the corpus)"
    "$top/test/fuzz/fuzz.sh" "$top" "$obj_test" "${FUZZ_SECONDS:-10}" "$results"
    log "test: integration (crypt transport, two processes, two emulated hosts)"
    "$top/test/integration/run.sh" "$obj_test" "$prefix_test" "$results" || true
    log "test: the failure sweep (the N-th local resource call fails, N = 1, 2, ..., in a client and in a server)"
    "$top/test/integration/failure_sweep.sh" "$obj_test" "$prefix_test" "$results" || true
    log "test: strangers flood both listeners (1000 held connections, garbage, replays) while an honest pair runs"
    "$top/test/integration/stranger_flood.sh" "$obj" "$prefix" "$results" || true
    log "test: a server's memory after client upon client"
    "$top/test/integration/server_memory.sh" "$obj" "$prefix" "$results" "$prefix_test" || true
    log "test: as users run it (stock programs, UCX's defaults, two hosts, the release build, plain tcp beside it)"
    "$top/test/integration/transparency.sh" "$obj" "$prefix" "$results" || true
    log "test: UCX's own test suite on crypt, tcp beside it (UCT suites, a UCP selection)"
    "$top/test/conformance/conformance.sh" "$ucx_src" "$obj" "$prefix" "$results" ci || true
    log "test: MPICH's own test suite (one-sided) on crypt, tcp beside it"
    mpich_src=$("$top/contrib/fetch-deb-src.sh" mpich test/mpi/rma/testlist.in "$build/src" |
                tail -n 1) || mpich_src=""
    python3 "$top/test/mpich/run.py" "$mpich_src" "$prefix" "$obj/mpich-suite" \
        "$results/mpich_suite.xml" rma || true
    log "test: a short soak, ${SOAK_SECONDS:-30} s (quickstart.sh soak MINUTES for a long one)"
    "$top/test/soak/soak.sh" "$obj_test" "$prefix_test" "$results" "${SOAK_SECONDS:-30}"
    do_check_sanitizers
    log "test: UCX 1.18.1 and 1.22.0 (PyPI wheels), built and run as 1.13.1"
    "$top/test/releases/run.sh" "$top" "$build" "$results"
    log "test: UCX 1.14.1 .. 1.21.0 (the rest), compiled against their headers"
    "$top/test/releases/compile.sh" "$top" "$obj_test" "$results"
    summarize
}

# The tier for every commit: what a change most often breaks, in minutes.
# Everything here runs in `check` too.
do_check_quick() {
    check_start
    log "test: the fuzz corpora replayed (every input of test/fuzz/corpus, none new)"
    FUZZ_RUNS=0 "$top/test/fuzz/fuzz.sh" "$top" "$obj_test" 60 "$results"
    log "test: integration, one group per area"
    IT_ONLY="$quick_groups" "$top/test/integration/run.sh" "$obj_test" "$prefix_test" "$results" || true
    log "test: as users run it (stock programs, UCX's defaults, two hosts, the release build, plain tcp beside it)"
    "$top/test/integration/transparency.sh" "$obj" "$prefix" "$results" || true
    summarize
}

# The test build again, made --enable-sanitizers: the gtests and the
# integration tests that load the plugin into UCX programs, Open MPI and
# MPICH, under AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer; any report fails the test it happened in.
do_check_sanitizers() {
    log "test: under AddressSanitizer and UndefinedBehaviorSanitizer"
    configure_and_build "$obj_asan" "$prefix_asan" --enable-fault-injection --enable-sanitizers
    make -C "$obj_asan" -j"$jobs" --no-print-directory check TESTS=
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1"
    # (the collective tasks switch stacks and tell ASan so: the test where
    # one also moves to a second thread covers the one-thread test, which
    # the plain run keeps)
    run_gtest core_sanitizers "$obj_asan/test/gtest/gtest_core" \
        --gtest_filter="-*tasks_of_two_teams_progress_together*"
    run_gtest uct_sanitizers "$obj_asan/test/gtest/gtest_uct"
    # the listeners' deferred first messages and their evictions
    run_gtest uct_host_share_sanitizers env UCX_CRYPT_HANDSHAKE_RATE=8 \
        "$obj_asan/test/gtest/gtest_uct" --gtest_filter="uct_crypt_wire_share_test.*:uct_crypt_cm_share_test.*"
    unset ASAN_OPTIONS UBSAN_OPTIONS
    IT_REPORT=integration_sanitizers REPORT_NAME_PREFIX=sanitizers/ IT_ONLY="$sanitizer_groups" \
        "$top/test/integration/run.sh" "$obj_asan" "$prefix_asan" "$results" || true

    log "test: under ThreadSanitizer"
    configure_and_build "$obj_tsan" "$prefix_tsan" --enable-fault-injection --enable-sanitizers=thread
    make -C "$obj_tsan" -j"$jobs" --no-print-directory check TESTS=
    # (UCX's memory hooks patch madvise, which glibc calls as a thread
    # exits, where TSan's interceptors no longer run: they stay off here)
    export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1" \
           UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n
    # the transport's threads: the pool, the bulk engine and its wake-up,
    # the lane (less the 1 GiB of streams, minutes under TSan)
    run_gtest uct_tsan "$obj_tsan/test/gtest/gtest_uct" \
        --gtest_filter="-*bytes_past_the_buffer_bound*"
    # the core's: the pool and the crypto it runs, and the collective
    # tasks (their stack switches annotated as fibers) with one task
    # finished on a second thread beside another team's; the rest of the
    # collectives' harness forks single-threaded ranks: the plain run
    # covers it
    run_gtest core_tsan "$obj_tsan/test/gtest/gtest_core" \
        --gtest_filter="*crypt_pool*:*aead*:*keyex*:*a_task_finishes_on_another_thread*"
    unset TSAN_OPTIONS UCX_MEM_MMAP_HOOK_MODE UCX_MEM_MALLOC_HOOKS
    IT_REPORT=integration_tsan REPORT_NAME_PREFIX=tsan/ IT_ONLY="$tsan_groups" \
        "$top/test/integration/run.sh" "$obj_tsan" "$prefix_tsan" "$results" || true
}

do_bench() {
    mkdir -p "$results"
    log "crypto engine benchmark (single thread, ours vs the raw library call)"
    "$obj/test/perf/crypt_engine_bench" --csv "$results/crypt_engine_bench.csv"
}

do_demo() {
    mkdir -p "$results"
    log "encrypted ping-pong between two emulated hosts, next to plaintext"
    "$top/test/perf/two_host_perftest.sh" "$prefix" "$results"
}

case "${1:-all}" in
all)
    do_build
    do_demo
    ;;
build)
    do_build
    ;;
check)
    do_build
    case "${2:-all}" in
    quick) do_check_quick ;;
    all)   do_check ;;
    *)     echo "usage: $0 check [quick]" >&2; exit 2 ;;
    esac
    ;;
conformance)
    do_build
    rm -rf "$results/conformance" "$results/conformance.xml"
    "$top/test/conformance/conformance.sh" "$ucx_src" "$obj" "$prefix" "$results" all
    ;;
bench)
    do_build
    do_bench
    ;;
fuzz)
    do_build
    do_build_tests
    mkdir -p "$results"
    "$top/test/fuzz/fuzz.sh" "$top" "$obj_test" "${2:?usage: $0 fuzz SECONDS}" "$results"
    ;;
soak)
    minutes=${2:?usage: $0 soak MINUTES}
    do_build
    do_build_tests
    make -C "$obj_test" -j"$jobs" --no-print-directory check TESTS=
    mkdir -p "$results"
    "$top/test/soak/soak.sh" "$obj_test" "$prefix_test" "$results" "$((minutes * 60))"
    ;;
*)
    echo "usage: $0 [build|check [quick]|conformance|bench|fuzz SECONDS|soak MINUTES]" >&2
    exit 2
    ;;
esac
