/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All-reduce, sealed once per node: each node reduces in plaintext, the
 * nodes exchange sealed partial results, each node opens them once.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

crypt_coll_status_t crypt_coll_allreduce_run(crypt_coll_team_t *team,
                                             const void *sbuf, void *rbuf,
                                             size_t count, size_t elem_size,
                                             crypt_coll_reduce_t op, void *op_arg)
{
    const int r = team->rank, my_node = team->node_of[r];
    const size_t m = count * elem_size;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *parts = NULL, *tmp = NULL;
    int *leaders = NULL, *nodes = NULL;
    int N, n, q, head, failed = 0;

    if (sbuf != NULL) {
        memmove(rbuf, sbuf, m);
    }
    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N       = l.num_nodes;
    head    = l.ranks[my_node][0];
    parts   = malloc(m * (size_t)N + 1);
    tmp     = malloc(m + 1);
    leaders = malloc(sizeof(int) * (size_t)N);
    nodes   = malloc(sizeof(int) * (size_t)N);
    if (!parts || !tmp || !leaders || !nodes) {
        status = CRYPT_COLL_ERR_PARAM;
    }

    /* 1: the node's partial result at its first rank, in local order */
    if ((status == CRYPT_COLL_OK) && (r != head)) {
        status = crypt_coll_move(team, head, rbuf, m, 0, -1, NULL, 0);
    }
    for (q = 1; (status == CRYPT_COLL_OK) && (r == head) && (q < l.count[my_node]); ++q) {
        status = crypt_coll_move(team, -1, NULL, 0, 0, l.ranks[my_node][q], tmp, m);
        if (status == CRYPT_COLL_OK) {
            op(rbuf, tmp, count, op_arg);
        }
    }

    /* 2: the first ranks all-gather the node partials, sealed once each,
     * opened once per other node, and reduce them in node order */
    if ((status == CRYPT_COLL_OK) && (r == head) && (N > 1)) {
        for (n = 0; n < N; ++n) {
            leaders[n] = l.ranks[n][0];
            nodes[n]   = n;
        }
        memcpy(parts + (size_t)my_node * m, rbuf, m);
        status = crypt_coll_bruck(team, leaders, nodes, N, my_node,
                                  CRYPT_COLL_FRAMES_PER_BLOCK, parts, m, &failed);
        if (status == CRYPT_COLL_OK) {
            memcpy(rbuf, parts, m);
            for (n = 1; n < N; ++n) {
                op(rbuf, parts + (size_t)n * m, count, op_arg);
            }
        }
    }

    /* 3: the result inside the node */
    if (status == CRYPT_COLL_OK) {
        status = crypt_coll_node_spread(team, &l, head, rbuf, m);
    }
    free(nodes);
    free(leaders);
    free(tmp);
    free(parts);
    crypt_coll_layout_free(&l);
    return crypt_coll_finish(team, status, failed, rbuf, m);
}
