#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_plaintext_peer (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_plaintext_peer.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

test_plaintext_peer() {
    local port; port=$(next_port)
    "${crypt_env[@]}" timeout 15 "$check" -l "$port" >"$work/s.log" 2>&1 &
    local srv=$!
    env UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 15 "$check" -c 127.0.0.1 -p "$port" -s 8 -n 1 \
        >"$work/c.log" 2>&1
    local rc=$?
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
    if [ $rc -ne 0 ] && ! grep -q "DATA OK" "$work/c.log"; then
        record plaintext_peer_cannot_connect pass
    else
        record plaintext_peer_cannot_connect fail "plaintext client got through"
    fi
}

it_run test_plaintext_peer
