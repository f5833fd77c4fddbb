#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_perftest (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_perftest.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# ---- ucx_perftest over crypt ------------------------------------------------
test_perftest() {
    local t
    for t in "tag_lat -s 8" "tag_bw -s 1048576" "ucp_am_lat -s 64" "ucp_am_bw -s 65536" \
             "stream_bw -s 65536" "ucp_put_bw -s 65536" "ucp_get -s 65536"; do
        local port name; port=$(next_port); name="perftest_${t%% *}_over_crypt"
        "${crypt_env[@]}" timeout 60 ucx_perftest -p "$port" >"$work/ps.log" 2>&1 &
        local srv=$!
        wait_listening - "$port" "$!"
        if "${crypt_env[@]}" UCX_CRYPT_STATS=y timeout 60 ucx_perftest 127.0.0.1 -p "$port" \
               -t $t -n 200 >"$work/pc.log" 2>&1 && wait $srv &&
           grep -q "^Final:" "$work/pc.log" && grep -q "opened [1-9]" "$work/pc.log"; then
            record "$name" pass
        else
            kill $srv 2>/dev/null; wait $srv 2>/dev/null
            record "$name" fail "$(tail -3 "$work/pc.log")"
        fi
    done
}

it_run test_perftest
