#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_aux_lane (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_aux_lane.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

test_aux_lane() {
    two_hosts_up aux_setup || return
    local res
    res=$(wire_run aux 1 0,8,65536,1048576,67108864 "${aux_envs[@]}" "${aux_tls[@]}" \
          UCX_LOG_LEVEL=debug)
    read -r -a res <<<"$res"
    if [ "${res[0]}" = 0 ] && [ "${res[1]}" = 0 ] && grep -q "DATA OK" "$work/aux.c.log" &&
       grep -q "aux_ep .* using crypt_aux/" "$work/aux.c.log" &&
       grep -q "lane\[0\]: .*crypt/ucxc-v2" "$work/aux.c.log"; then
        record connect_to_ep_lanes_wired_up_through_crypt_aux pass
    else
        record connect_to_ep_lanes_wired_up_through_crypt_aux fail \
            "rc/markers ${res[*]}; $(grep -m2 'ERROR\|unreachable' "$work/aux.c.log")"
    fi

    mpi_programs aux_mpi_programs_build || return
    local aux_x=() e
    for e in "${aux_envs[@]}"; do aux_x+=(-x "$e"); done
    mpi_wire_verdict openmpi_across_hosts_with_connect_to_ep_lanes \
        "$(mpi_wire_run mpi-aux "$site_conf" "${aux_x[@]}")" "$work/mpi-aux.log"

    env UCX_TLS=crypt,tcp,self UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
        UCX_CRYPT_STATS=y "${aux_envs[@]}" timeout 120 "$prefix/bin/ucx-crypt-run" \
        mpiexec.mpich -n 2 "$work/mpi_check_mpich" >"$work/mpich-aux.log" 2>&1
    mpi_verdict mpich_with_connect_to_ep_lanes_verified "$work/mpich-aux.log" 2
    netns_down ucxc-h1 ucxc-h2
}

it_run test_aux_lane
