#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_key_update (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_key_update.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# key updates: both sides ratchet every 50 records, data stays intact
test_key_update() {
    verified_pair key_update_every_50_records_keeps_data_intact "key updates [1-9]" \
        UCX_CRYPT_REKEY_RECORDS=50 UCX_CRYPT_BULK=n -- -s 8,1000,100000 -n 100
    # bulk keys: updated between puts once 3 segments went out under one
    verified_pair bulk_key_update_every_3_segments_keeps_data_intact \
        "bulk key updates [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_REKEY_RECORDS=3 UCX_CRYPT_BULK_SEGMENT=64k -- \
        -s 1048577,262144,4194304 -n 4
    # ... and on crypt's own wire, sealed straight into frames and by the pool
    verified_pair bulk_key_update_own_wire_keeps_data_intact "bulk key updates [1-9]" \
        UCX_CRYPT_REKEY_RECORDS=3 UCX_CRYPT_BULK_SEGMENT=64k UCX_CRYPT_BULK_THREADS=0 -- \
        -s 1048577,262144,4194304 -n 4
    verified_pair bulk_key_update_own_wire_pool_keeps_data_intact "bulk key updates [1-9]" \
        UCX_CRYPT_REKEY_RECORDS=3 UCX_CRYPT_BULK_SEGMENT=64k UCX_CRYPT_BULK_THREADS=2 -- \
        -s 1048577,262144,4194304 -n 4
}

it_run test_key_update
