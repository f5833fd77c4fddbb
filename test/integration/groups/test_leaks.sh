#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_leaks (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_leaks.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# ---- leaks at exit (a --enable-sanitizers build only) ---------------------------
# Our own UCP programs with LeakSanitizer on: everything the plugin
# allocated for workers, endpoints, connections, registrations, the bulk
# engine and the connection manager is freed by the time the program
# exits (LeakSanitizer makes the exit code non-zero otherwise).
test_leaks() {
    [[ $sanitizer_runtime == *libasan* ]] || return 0
    local leaks=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1)
    local sizes=0,1,8125,65536,1048577,4194304
    verified_pair no_leak_at_exit_own_wire_records_and_bulk "bulk bytes sealed [1-9]" \
        "${leaks[@]}" UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_CRYPT_BULK_THREADS=2 \
        -- -s $sizes -n 3
    verified_pair no_leak_at_exit_bulk_engine_over_a_ucx_inner "bulk bytes sealed [1-9]" \
        "${leaks[@]}" "${rdma_like[@]}" UCX_CRYPT_REKEY_RECORDS=100 -- -s $sizes -n 3
    two_hosts_up leaks_setup || return
    local res
    res=$(cs_pair cs-leaks "${cs_crypt[*]} ${leaks[*]}" "${cs_crypt[*]} ${leaks[*]}" \
          -- -c 10.77.0.1 -s 0,65536,1048577 -n 2)
    cs_verdict no_leak_at_exit_client_server "$res" cs-leaks
    netns_down ucxc-h1 ucxc-h2
}

it_run test_leaks
