#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_mpi (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_mpi.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

test_mpi() {
    mpi_programs mpi_programs_build || return

    ompi_run 3 -x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" -x UCX_CRYPT_STATS=y \
        "$work/mpi_check_ompi" >"$work/ompi.log" 2>&1
    mpi_verdict openmpi_site_config_pt2pt_put_get_collectives_verified "$work/ompi.log" 3 gets

    env UCX_TLS=crypt,tcp,self UCX_NET_DEVICES=lo UCX_CRYPT_KEY_FILE="$work/job.key" \
        UCX_CRYPT_STATS=y timeout 120 "$prefix/bin/ucx-crypt-run" \
        mpiexec.mpich -n 2 "$work/mpi_check_mpich" >"$work/mpich.log" 2>&1
    mpi_verdict mpich_ucx_crypt_run_pt2pt_put_get_collectives_verified "$work/mpich.log" 2 gets

    # a forged record in an MPI job: the receiving rank names peer and
    # reason and the job ends with an error (never a hang, never "OK")
    cat >"$work/rank0-tampers.sh" <<'EOS'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export UCX_CRYPT_FAULT=flip_ciphertext UCX_CRYPT_FAULT_AFTER=30
exec "$@"
EOS
    chmod +x "$work/rank0-tampers.sh"
    ompi_run 2 -x UCX_TLS=crypt,tcp,self -x UCX_NET_DEVICES=lo \
        -x UCX_CRYPT_KEY_FILE="$work/job.key" \
        "$work/rank0-tampers.sh" "$work/mpi_check_ompi" >"$work/ompi-tamper.log" 2>&1
    abort_verdict openmpi_forged_record_aborts_job_with_reason $? "$work/ompi-tamper.log" \
        "MPI OK" "dropped a record from peer [0-9a-f]\{8\} flow .*authentication failed"
}

it_run test_mpi
