/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * HS1 and HS2: hierarchical, through a node-shared memory segment (the
 * caller's): sealed once per node (HS1) or per rank (HS2), exchanged by the
 * node leaders, opened by the node's ranks jointly.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

size_t crypt_coll_node_shm_size(int size, size_t max_m)
{
    /* plaintext of every block, a frame per rank (HS2; HS1 needs less),
     * a status byte per rank */
    return (size_t)size * max_m +
           (size_t)size * (max_m + CRYPT_COLL_FRAME_OVERHEAD) + (size_t)size + 64;
}

void crypt_coll_team_set_node_shm(crypt_coll_team_t *team, void *base,
                                  size_t bytes)
{
    team->node_shm      = base;
    team->node_shm_size = bytes;
}

/* all ranks of our node have arrived: a token round the node twice */
static crypt_coll_status_t crypt_coll_node_barrier(crypt_coll_team_t *team,
                                                   const crypt_coll_layout_t *l,
                                                   int my_node, int my_local)
{
    const int count = l->count[my_node];
    const int next = l->ranks[my_node][(my_local + 1) % count];
    const int prev = l->ranks[my_node][(my_local - 1 + count) % count];
    crypt_coll_status_t status = CRYPT_COLL_OK;
    uint8_t token = 0;
    int pass;

    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (pass = 0; (count > 1) && (pass < 2) && (status == CRYPT_COLL_OK); ++pass) {
        if (my_local == 0) {
            status = crypt_coll_move(team, next, &token, 1, 0, -1, NULL, 0);
            if (status == CRYPT_COLL_OK) {
                status = crypt_coll_move(team, -1, NULL, 0, 0, prev, &token, 1);
            }
        } else {
            status = crypt_coll_move(team, -1, NULL, 0, 0, prev, &token, 1);
            if (status == CRYPT_COLL_OK) {
                status = crypt_coll_move(team, next, &token, 1, 0, -1, NULL, 0);
            }
        }
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return status;
}

crypt_coll_status_t crypt_allgather_hs(crypt_coll_team_t *team,
                                       uint8_t *rbuf, size_t m, int hs2)
{
    const int p = team->size, r = team->rank, my_node = team->node_of[r];
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *plain, *cipher, *flags, *scratch = NULL;
    size_t *off = NULL, *len = NULL;
    int *leaders = NULL;
    int n, q, my_local = 0, N, failed = 0, idx;

    if ((team->node_shm == NULL) ||
        (team->node_shm_size < crypt_coll_node_shm_size(p, m))) {
        return CRYPT_COLL_ERR_PARAM;
    }
    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N = l.num_nodes;
    for (q = 0; q < l.count[my_node]; ++q) {
        my_local = (l.ranks[my_node][q] == r) ? q : my_local;
    }
    plain   = team->node_shm;
    cipher  = plain + (size_t)p * m;
    flags   = cipher + (size_t)p * frame_len;
    off     = calloc((size_t)N, sizeof(*off));
    len     = calloc((size_t)N, sizeof(*len));
    leaders = calloc((size_t)N, sizeof(*leaders));
    scratch = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_FRAMES,
                                   (size_t)p * m + 1);
    if (!off || !len || !leaders || !scratch) {
        status = CRYPT_COLL_ERR_PARAM;
        goto out;
    }
    /* node n's slot in the ciphertext area: HS1 one frame of its l_n
     * blocks, HS2 one frame per rank, contiguous per node */
    for (n = 0; n < N; ++n) {
        len[n]     = hs2 ? (size_t)l.count[n] * frame_len :
                           (size_t)l.count[n] * m + CRYPT_COLL_FRAME_OVERHEAD;
        off[n]     = (n > 0) ? off[n - 1] + len[n - 1] : 0;
        leaders[n] = l.ranks[n][0];
    }

    /* 1: our block into the node's plaintext area */
    memcpy(plain + (size_t)r * m, rbuf + (size_t)r * m, m);
    status = crypt_coll_node_barrier(team, &l, my_node, my_local);

    if ((status == CRYPT_COLL_OK) && (N > 1)) {
        /* 2: seal once (HS1: the leader, the node's data; HS2: every rank,
         * its own block) and exchange the node slots among the leaders */
        if (hs2) {
            status = crypt_coll_seal(team, r, CRYPT_COLL_DEST_ANY,
                                     plain + (size_t)r * m, m,
                                     cipher + off[my_node] + (size_t)my_local * frame_len);
        } else if (my_local == 0) {
            for (q = 0; q < l.count[my_node]; ++q) {
                memcpy(scratch + (size_t)q * m, plain + (size_t)l.ranks[my_node][q] * m, m);
            }
            status = crypt_coll_seal(team, (int)CRYPT_COLL_OWNER_NODE(my_node),
                                     CRYPT_COLL_DEST_ANY, scratch, (size_t)l.count[my_node] * m,
                                     cipher + off[my_node]);
        }
        if ((status == CRYPT_COLL_OK) && hs2) {
            status = crypt_coll_node_barrier(team, &l, my_node, my_local);
        }
        if ((status == CRYPT_COLL_OK) && (my_local == 0)) {
            status = crypt_coll_bruck_frames(team, leaders, N, my_node, cipher, off, len);
        }
        if (status == CRYPT_COLL_OK) {
            status = crypt_coll_node_barrier(team, &l, my_node, my_local);
        }
        /* 3: the node's ranks open the foreign frames jointly, round robin */
        for (n = 0, idx = 0; (status == CRYPT_COLL_OK) && (n < N); ++n) {
            if (n == my_node) {
                continue;
            }
            if (!hs2) {
                if ((idx++ % l.count[my_node]) != my_local) {
                    continue;
                }
                if (crypt_coll_open(team, (int)CRYPT_COLL_OWNER_NODE(n),
                                    l.ranks[n][0], CRYPT_COLL_DEST_ANY,
                                    cipher + off[n], (size_t)l.count[n] * m,
                                    scratch) != CRYPT_COLL_OK) {
                    failed = 1;
                }
                for (q = 0; q < l.count[n]; ++q) {
                    memcpy(plain + (size_t)l.ranks[n][q] * m, scratch + (size_t)q * m, m);
                }
                continue;
            }
            for (q = 0; q < l.count[n]; ++q) {
                if ((idx++ % l.count[my_node]) == my_local &&
                    (crypt_coll_open(team, l.ranks[n][q], l.ranks[n][q],
                                     CRYPT_COLL_DEST_ANY,
                                     cipher + off[n] + (size_t)q * frame_len, m,
                                     plain + (size_t)l.ranks[n][q] * m) !=
                     CRYPT_COLL_OK)) {
                    failed = 1;
                }
            }
        }
    }

    /* 4: every rank copies the node's result; statuses through the node */
    flags[r] = failed ? 2 : 1;
    if (status == CRYPT_COLL_OK) {
        status = crypt_coll_node_barrier(team, &l, my_node, my_local);
    }
    for (q = 0; (status == CRYPT_COLL_OK) && (q < l.count[my_node]); ++q) {
        failed |= (flags[l.ranks[my_node][q]] != 1);
    }
    if (status == CRYPT_COLL_OK) {
        memcpy(rbuf, plain, (size_t)p * m);
        /* nobody may start the next collective over this area before all
         * have copied */
        status = crypt_coll_node_barrier(team, &l, my_node, my_local);
    }

out:
    free(leaders);
    free(len);
    free(off);
    crypt_coll_layout_free(&l);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}
