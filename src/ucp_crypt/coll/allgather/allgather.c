/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All-gather: the algorithm given or chosen, then the agreement step.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

crypt_coll_status_t crypt_coll_allgather_run(crypt_coll_team_t *team,
                                             crypt_allgather_alg_t alg,
                                             const void *sbuf, void *rbuf, size_t m)
{
    crypt_coll_status_t status;

    if (sbuf != NULL) {
        memmove((uint8_t*)rbuf + (size_t)team->rank * m, sbuf, m);
    }
    switch (alg) {
    case CRYPT_ALLGATHER_NAIVE:
        status = crypt_allgather_naive(team, rbuf, m);
        break;
    case CRYPT_ALLGATHER_O_RING:
        status = crypt_allgather_o_ring(team, rbuf, m);
        break;
    case CRYPT_ALLGATHER_O_RD:
        status = crypt_allgather_o_rd(team, rbuf, m, CRYPT_COLL_FRAMES_PER_BLOCK);
        break;
    case CRYPT_ALLGATHER_O_RD2:
        status = crypt_allgather_o_rd(team, rbuf, m, CRYPT_COLL_FRAMES_MERGED);
        break;
    case CRYPT_ALLGATHER_C_RING:
        status = crypt_allgather_concurrent(team, rbuf, m, 0);
        break;
    case CRYPT_ALLGATHER_C_RD:
        status = crypt_allgather_concurrent(team, rbuf, m, 1);
        break;
    case CRYPT_ALLGATHER_HS1:
    case CRYPT_ALLGATHER_HS2:
        if ((team->node_shm == NULL) ||
            (team->node_shm_size < crypt_coll_node_shm_size(team->size, m))) {
            return CRYPT_COLL_ERR_PARAM; /* not available: nothing was sent */
        }
        status = crypt_allgather_hs(team, rbuf, m, alg == CRYPT_ALLGATHER_HS2);
        break;
    default:
        return CRYPT_COLL_ERR_PARAM;
    }
    return crypt_coll_finish(team, status, 0, rbuf, (size_t)team->size * m);
}
