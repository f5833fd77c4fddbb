/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collectives the module takes over, blocking and nonblocking: the
 * adapter's (crypt_mpi.h) where it takes the call, the module below's
 * where it declines. A nonblocking collective is an ompi_request_t of
 * ours, completed from the adapter's progress.
 */
#include "coll_crypt.h"

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
    mca_coll_crypt_progress_register();
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

void mca_coll_crypt_module_set_ops(mca_coll_crypt_module_t *m)
{
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
}
