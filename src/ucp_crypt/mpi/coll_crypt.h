/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Open MPI front end of the MPI adapter (crypt_mpi.h): a coll component,
 * "crypt", built out of tree against the installed Open MPI 4.1 headers
 * (docs/mpi.md) and loaded from the shipped site configuration
 * (mca_base_component_path).
 *
 * Unlike PMPI interposition it sees every caller: C, both Fortran bindings,
 * and collectives the library runs itself. Priority 80 by default
 * (coll_crypt_priority), above tuned (30), sync (50) and self (75, which
 * only matters on one-rank communicators: we refuse those). On each
 * communicator it keeps the module below it for every call it takes over
 * (allgather, allgatherv, bcast, allreduce, alltoall, alltoallv, and their
 * nonblocking forms) and hands it whatever the adapter declines. Nothing
 * else is replaced.
 *
 * A nonblocking collective is an ompi_request_t of ours; the adapter's
 * queued collectives move in an opal_progress callback (registered on
 * first use, unregistered when the component closes), so MPI_Wait/Test
 * and every other call that progresses MPI drive them.
 *
 * It stands aside (the library's own collectives run, over the crypt
 * transport) where there is no job secret (UCX_CRYPT_KEY_FILE: the team
 * keys come from it) and where the PMPI library is preloaded as well (one
 * front end at a time; each keeps its own teams).
 */
#ifndef MCA_COLL_CRYPT_H
#define MCA_COLL_CRYPT_H

#include "ompi_config.h"
#include "crypt_mpi.h"

#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/request/request.h"

/* Every collective we take over: (name, the slot's function type) */
#define MCA_COLL_CRYPT_FOREACH(_do) \
    _do(allgather) _do(bcast) _do(allreduce) _do(alltoall) \
    _do(allgatherv) _do(alltoallv) \
    _do(iallgather) _do(ibcast) _do(iallreduce) _do(ialltoall) \
    _do(iallgatherv) _do(ialltoallv)

typedef struct mca_coll_crypt_module {
    mca_coll_base_module_t super;
    /* the layer below ours, for what the adapter declines */
#define MCA_COLL_CRYPT_PREV(_name) \
    mca_coll_base_module_##_name##_fn_t prev_##_name; \
    mca_coll_base_module_t              *prev_##_name##_module;
    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_PREV)
#undef MCA_COLL_CRYPT_PREV
} mca_coll_crypt_module_t;

OBJ_CLASS_DECLARATION(mca_coll_crypt_module_t);

/* coll_crypt_component.c */
extern int mca_coll_crypt_priority;
/* the adapter's progress in opal_progress, from the first nonblocking call
 * to the component's close */
void mca_coll_crypt_progress_register(void);

/* coll_crypt_module.c */
mca_coll_base_module_t *
mca_coll_crypt_comm_query(struct ompi_communicator_t *comm, int *priority);

/* coll_crypt_ops.c: the module's collectives into its c_coll slots */
void mca_coll_crypt_module_set_ops(mca_coll_crypt_module_t *m);

#endif
