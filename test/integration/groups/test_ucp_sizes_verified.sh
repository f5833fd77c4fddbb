#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_ucp_sizes_verified (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_ucp_sizes_verified.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

test_ucp_sizes_verified() {
    local sizes=0,1,7,8,1000,8124,8125,65536,1048577,4194304,67108864
    # crypt's own wire (the default over Ethernet): rendezvous as bulk
    # segments on the connection, sealed on the progress thread straight
    # into their frames, or by the pool; UCP's get and put forced; and
    # every size as records with the engine off
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_own_wire \
        "bulk bytes sealed [1-9].*handshakes [1-9]" UCX_CRYPT_BULK_THREADS=0 \
        -- -s $sizes -n 2
    verified_pair ucp_tag_sizes_verified_own_wire_pool "bulk bytes sealed [1-9]" \
        UCX_CRYPT_BULK_THREADS=2 UCX_CRYPT_BULK_SEGMENT=64k -- -s $sizes -n 2
    verified_pair ucp_tag_rendezvous_get_verified_own_wire "bulk gets served [1-9]" \
        UCX_RNDV_SCHEME=get_zcopy -- -s 65536,1048577,4194304,16777216 -n 2
    # (the threshold too: UCP 1.16+ would send these eager, its estimate
    # of crypt's AM and put bandwidth being the same)
    verified_pair ucp_tag_rendezvous_put_verified_own_wire \
        "bulk bytes sealed [1-9].*bulk gets served 0," UCX_RNDV_SCHEME=put_zcopy \
        UCX_RNDV_THRESH=65536 -- -s 65536,1048577,4194304,16777216 -n 2
    # UCP 1.16+ chooses eager fragments or rendezvous, AM or put, by each
    # operation's bandwidth estimate: crypt's is the cipher's where one core
    # seals slower than the wire (here made slow for the test), and then
    # large messages go through the bulk engine's pool by UCP's own choice
    # (UCP 1.13's rendezvous threshold takes it anyway)
    verified_pair ucp_tag_slow_cipher_chooses_the_bulk_engine "bulk bytes sealed [1-9]" \
        UCX_CRYPT_TEST_SEAL_BANDWIDTH=1e8 UCX_CRYPT_BULK_THREADS=2 \
        -- -s 0,1,65536,1048577,4194304 -n 2
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_own_wire_am_only \
        "bulk bytes sealed 0 .*handshakes [1-9]" UCX_CRYPT_BULK=n -- -s $sizes -n 2
    # rendezvous through the bulk engine (encrypted put), pipelined and naive,
    # and through AM fragments with the engine off
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_bulk_pipelined "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" -- -s $sizes -n 2
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_bulk_naive "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_BULK_MODE=naive -- -s $sizes -n 2
    verified_pair ucp_tag_sizes_0_to_64MiB_verified_am_only "bulk bytes sealed 0 " \
        "${rdma_like[@]}" UCX_CRYPT_BULK=n -- -s $sizes -n 2
    verified_pair ucp_tag_iov_datatype_verified "records sealed [1-9]" \
        -- -v -s 0,1,1000,65536,1048577,4194305 -n 2
    verified_pair ucp_tag_small_segments_many_threads_verified "bulk bytes sealed [1-9]" \
        "${rdma_like[@]}" UCX_CRYPT_BULK_SEGMENT=8k UCX_CRYPT_BULK_THREADS=2 \
        UCX_CRYPT_BULK_DEPTH=3 -- -s 65536,65537,1048577 -n 3
    # UCP's rendezvous by get (the peer seals and puts) and by put, forced
    verified_pair ucp_tag_rendezvous_get_verified "bulk gets served [1-9]" \
        "${rdma_like[@]}" UCX_RNDV_SCHEME=get_zcopy -- -s 65536,1048577,4194304,16777216 -n 2
    verified_pair ucp_tag_rendezvous_put_verified "bulk bytes sealed [1-9].*bulk gets served 0," \
        "${rdma_like[@]}" UCX_RNDV_SCHEME=put_zcopy -- -s 65536,1048577,4194304,16777216 -n 2
}

it_run test_ucp_sizes_verified
