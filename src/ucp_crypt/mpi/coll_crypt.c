/*
 * Open MPI front end of the MPI adapter (crypt_mpi.h): a coll component,
 * "crypt", built out of tree against the installed Open MPI 4.1 headers
 * (../shared/research/collectives-integration.md section 2(b)) and loaded
 * from the shipped site configuration (mca_base_component_path).
 *
 * Unlike PMPI interposition it sees every caller: C, both Fortran bindings,
 * and collectives the library runs itself. Priority 80 by default
 * (coll_crypt_priority), above tuned (30), sync (50) and self (75, which
 * only matters on one-rank communicators: we refuse those). On each
 * communicator it keeps the module below it for every call it takes over
 * (allgather, allgatherv, bcast, allreduce, alltoall, alltoallv) and hands
 * it whatever the adapter declines. Nothing else is replaced.
 *
 * It stands aside (the library's own collectives run, over the crypt
 * transport) where there is no job secret (UCX_CRYPT_KEY_FILE: the team
 * keys come from it) and where the PMPI library is preloaded as well (one
 * front end at a time; each keeps its own teams).
 */
#include "ompi_config.h"
#include "crypt_mpi.h"

#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/coll/base/base.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef struct mca_coll_crypt_module {
    mca_coll_base_module_t super;
    /* the layer below ours, for what the adapter declines */
    mca_coll_base_module_allgather_fn_t prev_allgather;
    mca_coll_base_module_t              *prev_allgather_module;
    mca_coll_base_module_bcast_fn_t     prev_bcast;
    mca_coll_base_module_t              *prev_bcast_module;
    mca_coll_base_module_allreduce_fn_t prev_allreduce;
    mca_coll_base_module_t              *prev_allreduce_module;
    mca_coll_base_module_alltoall_fn_t  prev_alltoall;
    mca_coll_base_module_t              *prev_alltoall_module;
    mca_coll_base_module_allgatherv_fn_t prev_allgatherv;
    mca_coll_base_module_t              *prev_allgatherv_module;
    mca_coll_base_module_alltoallv_fn_t prev_alltoallv;
    mca_coll_base_module_t              *prev_alltoallv_module;
} mca_coll_crypt_module_t;

static int mca_coll_crypt_priority = 80;

static void mca_coll_crypt_module_construct(mca_coll_crypt_module_t *module)
{
    module->prev_allgather_module = NULL;
    module->prev_bcast_module     = NULL;
    module->prev_allreduce_module = NULL;
    module->prev_alltoall_module  = NULL;
    module->prev_allgatherv_module = NULL;
    module->prev_alltoallv_module  = NULL;
}

static void mca_coll_crypt_module_destruct(mca_coll_crypt_module_t *module)
{
    if (module->prev_allgather_module != NULL) {
        OBJ_RELEASE(module->prev_allgather_module);
    }
    if (module->prev_bcast_module != NULL) {
        OBJ_RELEASE(module->prev_bcast_module);
    }
    if (module->prev_allreduce_module != NULL) {
        OBJ_RELEASE(module->prev_allreduce_module);
    }
    if (module->prev_alltoall_module != NULL) {
        OBJ_RELEASE(module->prev_alltoall_module);
    }
    if (module->prev_allgatherv_module != NULL) {
        OBJ_RELEASE(module->prev_allgatherv_module);
    }
    if (module->prev_alltoallv_module != NULL) {
        OBJ_RELEASE(module->prev_alltoallv_module);
    }
}

OBJ_CLASS_INSTANCE(mca_coll_crypt_module_t, mca_coll_base_module_t,
                   mca_coll_crypt_module_construct, mca_coll_crypt_module_destruct);

/* ---- the four collectives ---------------------------------------------------- */

static int mca_coll_crypt_allgather(const void *sbuf, int scount,
                                    struct ompi_datatype_t *sdtype, void *rbuf,
                                    int rcount, struct ompi_datatype_t *rdtype,
                                    struct ompi_communicator_t *comm,
                                    mca_coll_base_module_t *module)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;
    int ret = crypt_mpi_allgather(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           m->prev_allgather(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm,
                             m->prev_allgather_module);
}

static int mca_coll_crypt_bcast(void *buf, int count, struct ompi_datatype_t *dtype,
                                int root, struct ompi_communicator_t *comm,
                                mca_coll_base_module_t *module)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;
    int ret = crypt_mpi_bcast(buf, count, dtype, root, comm);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           m->prev_bcast(buf, count, dtype, root, comm, m->prev_bcast_module);
}

static int mca_coll_crypt_allreduce(const void *sbuf, void *rbuf, int count,
                                    struct ompi_datatype_t *dtype,
                                    struct ompi_op_t *op,
                                    struct ompi_communicator_t *comm,
                                    mca_coll_base_module_t *module)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;
    int ret = crypt_mpi_allreduce(sbuf, rbuf, count, dtype, op, comm);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           m->prev_allreduce(sbuf, rbuf, count, dtype, op, comm,
                             m->prev_allreduce_module);
}

static int mca_coll_crypt_alltoall(const void *sbuf, int scount,
                                   struct ompi_datatype_t *sdtype, void *rbuf,
                                   int rcount, struct ompi_datatype_t *rdtype,
                                   struct ompi_communicator_t *comm,
                                   mca_coll_base_module_t *module)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;
    int ret = crypt_mpi_alltoall(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           m->prev_alltoall(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm,
                            m->prev_alltoall_module);
}

static int mca_coll_crypt_allgatherv(const void *sbuf, int scount,
                                     struct ompi_datatype_t *sdtype, void *rbuf,
                                     const int *rcounts, const int *disps,
                                     struct ompi_datatype_t *rdtype,
                                     struct ompi_communicator_t *comm,
                                     mca_coll_base_module_t *module)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;
    int ret = crypt_mpi_allgatherv(sbuf, scount, sdtype, rbuf, rcounts, disps,
                                   rdtype, comm);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           m->prev_allgatherv(sbuf, scount, sdtype, rbuf, rcounts, disps, rdtype,
                              comm, m->prev_allgatherv_module);
}

static int mca_coll_crypt_alltoallv(const void *sbuf, const int *scounts,
                                    const int *sdisps, struct ompi_datatype_t *sdtype,
                                    void *rbuf, const int *rcounts, const int *rdisps,
                                    struct ompi_datatype_t *rdtype,
                                    struct ompi_communicator_t *comm,
                                    mca_coll_base_module_t *module)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;
    int ret = crypt_mpi_alltoallv(sbuf, scounts, sdisps, sdtype, rbuf, rcounts,
                                  rdisps, rdtype, comm);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           m->prev_alltoallv(sbuf, scounts, sdisps, sdtype, rbuf, rcounts, rdisps,
                             rdtype, comm, m->prev_alltoallv_module);
}

/* ---- module and component ------------------------------------------------------ */

/* Modules are enabled in rising priority, each on top of what is in
 * c_coll already (coll_base_comm_select.c): below ours is there now. */
static int mca_coll_crypt_module_enable(mca_coll_base_module_t *module,
                                        struct ompi_communicator_t *comm)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;

#define MCA_COLL_CRYPT_SAVE(_name) \
    m->prev_##_name        = comm->c_coll->coll_##_name; \
    m->prev_##_name##_module = comm->c_coll->coll_##_name##_module; \
    if ((m->prev_##_name == NULL) || (m->prev_##_name##_module == NULL)) { \
        return OMPI_ERR_NOT_FOUND; /* nothing to fall back to */ \
    } \
    OBJ_RETAIN(m->prev_##_name##_module)

    MCA_COLL_CRYPT_SAVE(allgather);
    MCA_COLL_CRYPT_SAVE(bcast);
    MCA_COLL_CRYPT_SAVE(allreduce);
    MCA_COLL_CRYPT_SAVE(alltoall);
    MCA_COLL_CRYPT_SAVE(allgatherv);
    MCA_COLL_CRYPT_SAVE(alltoallv);
#undef MCA_COLL_CRYPT_SAVE
    return OMPI_SUCCESS;
}

static int mca_coll_crypt_init_query(bool enable_progress_threads,
                                     bool enable_mpi_threads)
{
    (void)enable_progress_threads;
    /* the adapter keeps process-wide state without locks */
    return enable_mpi_threads ? OMPI_ERR_NOT_SUPPORTED : OMPI_SUCCESS;
}

static mca_coll_base_module_t *
mca_coll_crypt_comm_query(struct ompi_communicator_t *comm, int *priority)
{
    const char *key_file = getenv("UCX_CRYPT_KEY_FILE");
    mca_coll_crypt_module_t *m;

    if (OMPI_COMM_IS_INTER(comm) || (ompi_comm_size(comm) < 2) ||
        (key_file == NULL) || (key_file[0] == '\0') ||
        (mca_coll_crypt_priority <= 0) ||
        (dlsym(RTLD_DEFAULT, "ucx_crypt_pmpi_adapter") != NULL)) {
        return NULL;
    }
    m = OBJ_NEW(mca_coll_crypt_module_t);
    if (m == NULL) {
        return NULL;
    }
    *priority                    = mca_coll_crypt_priority;
    m->super.coll_module_enable  = mca_coll_crypt_module_enable;
    m->super.coll_allgather      = mca_coll_crypt_allgather;
    m->super.coll_bcast          = mca_coll_crypt_bcast;
    m->super.coll_allreduce      = mca_coll_crypt_allreduce;
    m->super.coll_alltoall       = mca_coll_crypt_alltoall;
    m->super.coll_allgatherv     = mca_coll_crypt_allgatherv;
    m->super.coll_alltoallv      = mca_coll_crypt_alltoallv;
    return &m->super;
}

static int mca_coll_crypt_register(void);

__attribute__((visibility("default")))
mca_coll_base_component_2_0_0_t mca_coll_crypt_component = {
    .collm_version = {
        MCA_COLL_BASE_VERSION_2_0_0,
        .mca_component_name = "crypt",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                              OMPI_RELEASE_VERSION),
        .mca_register_component_params = mca_coll_crypt_register
    },
    .collm_data = {
        MCA_BASE_METADATA_PARAM_NONE
    },
    .collm_init_query = mca_coll_crypt_init_query,
    .collm_comm_query = mca_coll_crypt_comm_query
};

static int mca_coll_crypt_register(void)
{
    (void)mca_base_component_var_register(
            &mca_coll_crypt_component.collm_version, "priority",
            "Priority of the crypt coll component (encrypted collectives of "
            "ucx-crypt; 0 turns it off)",
            MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6,
            MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_crypt_priority);
    return OMPI_SUCCESS;
}
