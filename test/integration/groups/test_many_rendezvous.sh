#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_many_rendezvous (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_many_rendezvous.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# ---- many rendezvous at once -------------------------------------------------
# Windows of messages outstanding together, each way (ucp_check -w): UCP
# queues them on its pending queues, the bulk engine on its bounce pool
# (a few segments deep here), the own wire behind its send buffer; every
# message arrives intact under its own tag.
test_many_rendezvous() {
    verified_pair many_rendezvous_in_flight_own_wire "bulk bytes sealed [1-9]" \
        UCX_CRYPT_BULK_THREADS=2 UCX_CRYPT_BULK_SEGMENT=64k -- \
        -s 8,65536,1048577 -w 128 -n 2
    verified_pair many_rendezvous_in_flight_bounce_pool_exhausted "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_BULK_SEGMENT=16k UCX_CRYPT_BULK_DEPTH=2 \
        UCX_CRYPT_BULK_THREADS=2 -- -s 65536,1048577 -w 128 -n 2
    verified_pair many_rendezvous_gets_in_flight "bulk gets served [1-9]" \
        "${rdma_like[@]}" UCX_RNDV_SCHEME=get_zcopy UCX_CRYPT_BULK_DEPTH=2 -- \
        -s 1048577,4194304 -w 32 -n 2
    verified_pair many_rendezvous_gets_in_flight_own_wire "bulk gets served [1-9]" \
        UCX_RNDV_SCHEME=get_zcopy -- -s 1048577,4194304 -w 32 -n 2
}

it_run test_many_rendezvous
