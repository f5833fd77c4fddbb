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
#include "ompi_config.h"
#include "crypt_mpi.h"

#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/request/request.h"
#include "opal/runtime/opal_progress.h"

#include <dlfcn.h>
#include <stdlib.h>

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

static int mca_coll_crypt_priority = 80;

static void mca_coll_crypt_module_construct(mca_coll_crypt_module_t *module)
{
#define MCA_COLL_CRYPT_CLEAR(_name) module->prev_##_name##_module = NULL;
    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_CLEAR)
#undef MCA_COLL_CRYPT_CLEAR
}

static void mca_coll_crypt_module_destruct(mca_coll_crypt_module_t *module)
{
#define MCA_COLL_CRYPT_RELEASE(_name) \
    if (module->prev_##_name##_module != NULL) { \
        OBJ_RELEASE(module->prev_##_name##_module); \
    }
    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_RELEASE)
#undef MCA_COLL_CRYPT_RELEASE
}

OBJ_CLASS_INSTANCE(mca_coll_crypt_module_t, mca_coll_base_module_t,
                   mca_coll_crypt_module_construct, mca_coll_crypt_module_destruct);

/* ---- the blocking collectives -------------------------------------------------- */

/* The adapter's answer, or the layer below's call */
#define MCA_COLL_CRYPT_CALL(_name, _adapter_call, _prev_args) \
    do { \
        mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module; \
        int ret = _adapter_call; \
        return (ret != CRYPT_MPI_DECLINED) ? ret : m->prev_##_name _prev_args; \
    } while (0)

static int mca_coll_crypt_allgather(const void *sbuf, int scount,
                                    struct ompi_datatype_t *sdtype, void *rbuf,
                                    int rcount, struct ompi_datatype_t *rdtype,
                                    struct ompi_communicator_t *comm,
                                    mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_CALL(allgather,
        crypt_mpi_allgather(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, NULL),
        (sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, m->prev_allgather_module));
}

static int mca_coll_crypt_bcast(void *buf, int count, struct ompi_datatype_t *dtype,
                                int root, struct ompi_communicator_t *comm,
                                mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_CALL(bcast,
        crypt_mpi_bcast(buf, count, dtype, root, comm, NULL),
        (buf, count, dtype, root, comm, m->prev_bcast_module));
}

static int mca_coll_crypt_allreduce(const void *sbuf, void *rbuf, int count,
                                    struct ompi_datatype_t *dtype,
                                    struct ompi_op_t *op,
                                    struct ompi_communicator_t *comm,
                                    mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_CALL(allreduce,
        crypt_mpi_allreduce(sbuf, rbuf, count, dtype, op, comm, NULL),
        (sbuf, rbuf, count, dtype, op, comm, m->prev_allreduce_module));
}

static int mca_coll_crypt_alltoall(const void *sbuf, int scount,
                                   struct ompi_datatype_t *sdtype, void *rbuf,
                                   int rcount, struct ompi_datatype_t *rdtype,
                                   struct ompi_communicator_t *comm,
                                   mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_CALL(alltoall,
        crypt_mpi_alltoall(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, NULL),
        (sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, m->prev_alltoall_module));
}

static int mca_coll_crypt_allgatherv(const void *sbuf, int scount,
                                     struct ompi_datatype_t *sdtype, void *rbuf,
                                     const int *rcounts, const int *disps,
                                     struct ompi_datatype_t *rdtype,
                                     struct ompi_communicator_t *comm,
                                     mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_CALL(allgatherv,
        crypt_mpi_allgatherv(sbuf, scount, sdtype, rbuf, rcounts, disps, rdtype,
                             comm, NULL),
        (sbuf, scount, sdtype, rbuf, rcounts, disps, rdtype, comm,
         m->prev_allgatherv_module));
}

static int mca_coll_crypt_alltoallv(const void *sbuf, const int *scounts,
                                    const int *sdisps, struct ompi_datatype_t *sdtype,
                                    void *rbuf, const int *rcounts, const int *rdisps,
                                    struct ompi_datatype_t *rdtype,
                                    struct ompi_communicator_t *comm,
                                    mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_CALL(alltoallv,
        crypt_mpi_alltoallv(sbuf, scounts, sdisps, sdtype, rbuf, rcounts, rdisps,
                            rdtype, comm, NULL),
        (sbuf, scounts, sdisps, sdtype, rbuf, rcounts, rdisps, rdtype, comm,
         m->prev_alltoallv_module));
}

/* ---- the nonblocking collectives ------------------------------------------------ */

typedef struct mca_coll_crypt_request {
    ompi_request_t super;
    int            freed;   /* MPI_Request_free'd before the collective ended */
} mca_coll_crypt_request_t;

OBJ_CLASS_INSTANCE(mca_coll_crypt_request_t, ompi_request_t, NULL, NULL);

static int mca_coll_crypt_progress_registered;

static int mca_coll_crypt_progress(void)
{
    return crypt_mpi_progress();
}

static int mca_coll_crypt_request_free(ompi_request_t **request)
{
    mca_coll_crypt_request_t *req = (mca_coll_crypt_request_t*)*request;

    OMPI_REQUEST_FINI(&req->super);
    if (REQUEST_COMPLETE(&req->super)) {
        OBJ_RELEASE(req);
    } else {
        req->freed = 1; /* the collective still runs; released when it ends */
    }
    *request = MPI_REQUEST_NULL;
    return OMPI_SUCCESS;
}

/* a collective cannot be cancelled (MPI 3.1 section 5.12) */
static int mca_coll_crypt_request_cancel(ompi_request_t *request, int complete)
{
    (void)request; (void)complete;
    return MPI_ERR_REQUEST;
}

/* the adapter's crypt_mpi_nb_t callback (authentication failures abort
 * the job before it: a request only ever completes with success) */
static void mca_coll_crypt_request_complete(void *arg)
{
    mca_coll_crypt_request_t *req = arg;

    if (req->freed) {
        OBJ_RELEASE(req);
        return;
    }
    req->super.req_status.MPI_ERROR = MPI_SUCCESS;
    ompi_request_complete(&req->super, true);
}

static mca_coll_crypt_request_t *
mca_coll_crypt_request_new(struct ompi_communicator_t *comm, crypt_mpi_nb_t *nb)
{
    mca_coll_crypt_request_t *req = OBJ_NEW(mca_coll_crypt_request_t);

    if (req == NULL) {
        return NULL;
    }
    if (!mca_coll_crypt_progress_registered) {
        opal_progress_register(mca_coll_crypt_progress);
        mca_coll_crypt_progress_registered = 1;
    }
    OMPI_REQUEST_INIT(&req->super, false);
    req->super.req_type            = OMPI_REQUEST_COLL;
    req->super.req_state           = OMPI_REQUEST_ACTIVE;
    req->super.req_free            = mca_coll_crypt_request_free;
    req->super.req_cancel          = mca_coll_crypt_request_cancel;
    req->super.req_mpi_object.comm = comm;
    req->super.req_status          = ompi_status_empty;
    req->freed                     = 0;
    nb->complete = mca_coll_crypt_request_complete;
    nb->arg      = req;
    return req;
}

/* The adapter's answer: our request, or the layer below's call. A request
 * the adapter declined never started. */
#define MCA_COLL_CRYPT_NB_CALL(_name, _adapter_call, _prev_args) \
    do { \
        mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module; \
        crypt_mpi_nb_t nb; \
        mca_coll_crypt_request_t *req = mca_coll_crypt_request_new(comm, &nb); \
        int ret = (req != NULL) ? _adapter_call : CRYPT_MPI_DECLINED; \
        if (ret != CRYPT_MPI_DECLINED) { \
            *request = &req->super; \
            return ret; \
        } \
        if (req != NULL) { \
            OMPI_REQUEST_FINI(&req->super); \
            OBJ_RELEASE(req); \
        } \
        return m->prev_##_name _prev_args; \
    } while (0)

static int mca_coll_crypt_iallgather(const void *sbuf, int scount,
                                     struct ompi_datatype_t *sdtype, void *rbuf,
                                     int rcount, struct ompi_datatype_t *rdtype,
                                     struct ompi_communicator_t *comm,
                                     ompi_request_t **request,
                                     mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_NB_CALL(iallgather,
        crypt_mpi_allgather(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, &nb),
        (sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, request,
         m->prev_iallgather_module));
}

static int mca_coll_crypt_ibcast(void *buf, int count, struct ompi_datatype_t *dtype,
                                 int root, struct ompi_communicator_t *comm,
                                 ompi_request_t **request,
                                 mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_NB_CALL(ibcast,
        crypt_mpi_bcast(buf, count, dtype, root, comm, &nb),
        (buf, count, dtype, root, comm, request, m->prev_ibcast_module));
}

static int mca_coll_crypt_iallreduce(const void *sbuf, void *rbuf, int count,
                                     struct ompi_datatype_t *dtype,
                                     struct ompi_op_t *op,
                                     struct ompi_communicator_t *comm,
                                     ompi_request_t **request,
                                     mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_NB_CALL(iallreduce,
        crypt_mpi_allreduce(sbuf, rbuf, count, dtype, op, comm, &nb),
        (sbuf, rbuf, count, dtype, op, comm, request, m->prev_iallreduce_module));
}

static int mca_coll_crypt_ialltoall(const void *sbuf, int scount,
                                    struct ompi_datatype_t *sdtype, void *rbuf,
                                    int rcount, struct ompi_datatype_t *rdtype,
                                    struct ompi_communicator_t *comm,
                                    ompi_request_t **request,
                                    mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_NB_CALL(ialltoall,
        crypt_mpi_alltoall(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, &nb),
        (sbuf, scount, sdtype, rbuf, rcount, rdtype, comm, request,
         m->prev_ialltoall_module));
}

static int mca_coll_crypt_iallgatherv(const void *sbuf, int scount,
                                      struct ompi_datatype_t *sdtype, void *rbuf,
                                      const int *rcounts, const int *disps,
                                      struct ompi_datatype_t *rdtype,
                                      struct ompi_communicator_t *comm,
                                      ompi_request_t **request,
                                      mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_NB_CALL(iallgatherv,
        crypt_mpi_allgatherv(sbuf, scount, sdtype, rbuf, rcounts, disps, rdtype,
                             comm, &nb),
        (sbuf, scount, sdtype, rbuf, rcounts, disps, rdtype, comm, request,
         m->prev_iallgatherv_module));
}

static int mca_coll_crypt_ialltoallv(const void *sbuf, const int *scounts,
                                     const int *sdisps, struct ompi_datatype_t *sdtype,
                                     void *rbuf, const int *rcounts, const int *rdisps,
                                     struct ompi_datatype_t *rdtype,
                                     struct ompi_communicator_t *comm,
                                     ompi_request_t **request,
                                     mca_coll_base_module_t *module)
{
    MCA_COLL_CRYPT_NB_CALL(ialltoallv,
        crypt_mpi_alltoallv(sbuf, scounts, sdisps, sdtype, rbuf, rcounts, rdisps,
                            rdtype, comm, &nb),
        (sbuf, scounts, sdisps, sdtype, rbuf, rcounts, rdisps, rdtype, comm,
         request, m->prev_ialltoallv_module));
}

/* ---- module and component ------------------------------------------------------ */

/* Modules are enabled in rising priority, each on top of what is in
 * c_coll already (coll_base_comm_select.c): below ours is there now. */
static int mca_coll_crypt_module_enable(mca_coll_base_module_t *module,
                                        struct ompi_communicator_t *comm)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;

#define MCA_COLL_CRYPT_SAVE(_name) \
    m->prev_##_name          = comm->c_coll->coll_##_name; \
    m->prev_##_name##_module = comm->c_coll->coll_##_name##_module; \
    if ((m->prev_##_name == NULL) || (m->prev_##_name##_module == NULL)) { \
        return OMPI_ERR_NOT_FOUND; /* nothing to fall back to */ \
    } \
    OBJ_RETAIN(m->prev_##_name##_module);

    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_SAVE)
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
    m->super.coll_iallgather     = mca_coll_crypt_iallgather;
    m->super.coll_ibcast         = mca_coll_crypt_ibcast;
    m->super.coll_iallreduce     = mca_coll_crypt_iallreduce;
    m->super.coll_ialltoall      = mca_coll_crypt_ialltoall;
    m->super.coll_iallgatherv    = mca_coll_crypt_iallgatherv;
    m->super.coll_ialltoallv     = mca_coll_crypt_ialltoallv;
    return &m->super;
}

static int mca_coll_crypt_register(void);

static int mca_coll_crypt_close(void)
{
    if (mca_coll_crypt_progress_registered) {
        opal_progress_unregister(mca_coll_crypt_progress);
        mca_coll_crypt_progress_registered = 0;
    }
    return OMPI_SUCCESS;
}

__attribute__((visibility("default")))
mca_coll_base_component_2_0_0_t mca_coll_crypt_component = {
    .collm_version = {
        MCA_COLL_BASE_VERSION_2_0_0,
        .mca_component_name = "crypt",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                              OMPI_RELEASE_VERSION),
        .mca_register_component_params = mca_coll_crypt_register,
        .mca_close_component = mca_coll_crypt_close
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
