/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The team layer's entry points: the blocking collectives (not while a
 * task of the team is in flight), crypt_coll_run for a collective given as
 * arguments, and the agreement step that ends every collective.
 * Algorithm names and cost terms follow "Efficient Algorithms for
 * Encrypted All-gather Operation", section IV and Table II.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

/* Every rank learns whether any rank failed: an all-gather of one status
 * byte per rank, sealed across nodes like data: O-RD2 (Bruck, merged
 * frames), ceil(log2 p) rounds, so that the step costs every collective
 * a logarithmic number of latencies, not p - 1 as a ring would. Without it a rank
 * that opened its blocks cleanly could return data that a node peer had
 * forwarded after a failed open (zeros), as success. An attacker who
 * tampers with this step itself makes the ranks downstream fail while the
 * others return their data, which they authenticated in full: no finite
 * exchange can make every rank agree against an active network (the two
 * generals), so the MPI adapters abort the job on any failure. */
static crypt_coll_status_t crypt_coll_agree(crypt_coll_team_t *team,
                                            crypt_coll_status_t mine)
{
    uint8_t *flags = calloc((size_t)team->size, 1);
    crypt_coll_status_t status;
    int r, failed = (mine != CRYPT_COLL_OK);

    if (flags == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    crypt_coll_counters_t algorithm = team->counters;

    /* 1 means OK; anything else, including the zero a failed open leaves,
     * is a failure, so tampering with this step cannot pass for success */
    flags[team->rank] = (mine == CRYPT_COLL_OK) ? 1 : 2;
    ++team->collective; /* its own AAD domain */
    status = crypt_allgather_o_rd(team, flags, 1, CRYPT_COLL_FRAMES_MERGED);
    /* the counters describe the algorithm (Table II), not this step; a
     * plaintext leak would still show */
    algorithm.inter_node_plaintext_bytes = team->counters.inter_node_plaintext_bytes;
    team->counters = algorithm;
    for (r = 0; r < team->size; ++r) {
        failed |= (flags[r] != 1);
    }
    free(flags);
    if (status != CRYPT_COLL_OK) {
        return status;
    }
    return failed ? ((mine != CRYPT_COLL_OK) ? mine : CRYPT_COLL_ERR_AUTH) :
                    CRYPT_COLL_OK;
}

/* The end of every collective: the agreement step, and on any failure
 * no data that anyone could take for a result. */
crypt_coll_status_t crypt_coll_finish(crypt_coll_team_t *team,
                                      crypt_coll_status_t status,
                                      int failed, void *buf, size_t len)
{
    ++team->collective;
    if ((status == CRYPT_COLL_OK) && failed) {
        status = CRYPT_COLL_ERR_AUTH;
    }
    if (status != CRYPT_COLL_ERR_IO) {
        status = crypt_coll_agree(team, status);
    }
    if (status != CRYPT_COLL_OK) {
        memset(buf, 0, len);
    }
    return status;
}

crypt_coll_status_t crypt_coll_run(crypt_coll_team_t *team,
                                   const crypt_coll_args_t *a)
{
    switch (a->coll) {
    case CRYPT_COLL_ALLGATHER:
        return crypt_coll_allgather(team, (a->alg < 0) ?
                                    crypt_coll_allgather_select(team, a->m, NULL) :
                                    (crypt_allgather_alg_t)a->alg, a->sbuf,
                                    a->rbuf, a->m);
    case CRYPT_COLL_BCAST:
        return crypt_coll_bcast(team, a->rbuf, a->m, a->root);
    case CRYPT_COLL_ALLREDUCE:
        return crypt_coll_allreduce(team, a->sbuf, a->rbuf, a->m, a->elem_size,
                                    a->op, a->op_arg);
    case CRYPT_COLL_ALLTOALL:
        return crypt_coll_alltoall(team, a->sbuf, a->rbuf, a->m);
    case CRYPT_COLL_ALLGATHERV:
        return crypt_coll_allgatherv(team, a->sbuf, a->rbuf, a->counts, a->displs);
    case CRYPT_COLL_ALLTOALLV:
        return crypt_coll_alltoallv(team, a->sbuf, a->counts, a->displs, a->rbuf,
                                    a->rcounts, a->rdispls);
    default:
        return CRYPT_COLL_ERR_PARAM;
    }
}

crypt_coll_status_t crypt_coll_allgather(crypt_coll_team_t *team,
                                         crypt_allgather_alg_t alg,
                                         const void *sbuf, void *rbuf, size_t m)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_allgather_run(team, alg, sbuf, rbuf, m);
}

crypt_coll_status_t crypt_coll_bcast(crypt_coll_team_t *team, void *buf,
                                     size_t m, int root)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_bcast_run(team, buf, m, root);
}

crypt_coll_status_t crypt_coll_allreduce(crypt_coll_team_t *team,
                                         const void *sbuf, void *rbuf,
                                         size_t count, size_t elem_size,
                                         crypt_coll_reduce_t op, void *op_arg)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_allreduce_run(team, sbuf, rbuf, count, elem_size, op, op_arg);
}

crypt_coll_status_t crypt_coll_alltoall(crypt_coll_team_t *team,
                                        const void *sbuf, void *rbuf, size_t m)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_alltoall_run(team, sbuf, rbuf, m);
}

crypt_coll_status_t crypt_coll_allgatherv(crypt_coll_team_t *team,
                                          const void *sbuf, void *rbuf,
                                          const size_t *counts,
                                          const size_t *displs)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_allgatherv_run(team, sbuf, rbuf, counts, displs);
}

crypt_coll_status_t crypt_coll_alltoallv(crypt_coll_team_t *team,
                                         const void *sbuf, const size_t *scounts,
                                         const size_t *sdispls, void *rbuf,
                                         const size_t *rcounts,
                                         const size_t *rdispls)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_alltoallv_run(team, sbuf, scounts, sdispls, rbuf, rcounts,
                                    rdispls);
}
