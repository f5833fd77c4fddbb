/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * C-Ring and C-RD: sealed sub-all-gathers among one rank per node (a ring,
 * or Bruck), all of a node's ranks at once, then a ring inside each node.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

/* the local ring packs blocks below this size into one message */
enum { CRYPT_COLL_RING_PACK_MAX = 64 * 1024 };

/* the owners of the blocks that local rank q passes on in C-Ring / C-RD's
 * local ring (every group it served, from every node), in ring order */
static int crypt_coll_group_blocks(const crypt_coll_layout_t *l, int q,
                                   int nodes_in, int *owners)
{
    int g, n, count = 0;

    for (g = 0; g < l->max_local; ++g) {
        for (n = 0; n < l->num_nodes; ++n) {
            int owner = crypt_coll_owner(l, n, g);
            if ((owner >= 0) && (g % nodes_in == q)) {
                owners[count++] = owner;
            }
        }
    }
    return count;
}

/* C-Ring (ring sub-all-gathers) and C-RD (Bruck sub-all-gathers) */
crypt_coll_status_t crypt_allgather_concurrent(crypt_coll_team_t *team,
                                               uint8_t *rbuf, size_t m,
                                               int use_bruck)
{
    const int r = team->rank, my_node = team->node_of[r];
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *frames = NULL, *pack_out = NULL, *pack_in = NULL;
    int *out_owner = NULL, *in_owner = NULL;
    int N, g, s, my_local = 0, li, nodes_in, failed = 0;

    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N = l.num_nodes;
    for (li = 0; li < l.count[my_node]; ++li) {
        if (l.ranks[my_node][li] == r) {
            my_local = li;
        }
    }
    frames   = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_FRAMES,
                                    frame_len * (size_t)N);
    if (m < CRYPT_COLL_RING_PACK_MAX) { /* the local ring packs (step 2) */
        pack_out = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_OUT,
                                        m * (size_t)N * (size_t)l.max_local + 1);
        pack_in  = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_IN,
                                        m * (size_t)N * (size_t)l.max_local + 1);
    }
    if ((frames == NULL) ||
        ((m < CRYPT_COLL_RING_PACK_MAX) && ((pack_out == NULL) || (pack_in == NULL)))) {
        status = CRYPT_COLL_ERR_PARAM;
    }

    /* step 1: for each group this rank serves, a ring over one member per
     * node (all hops cross nodes): each owner seals its block once, every
     * node opens each foreign block of the group once */
    for (g = 0; (status == CRYPT_COLL_OK) && (g < l.max_local); ++g) {
        if (crypt_coll_member(&l, my_node, g) != r) {
            continue;
        }
        if (use_bruck) {
            int n, members[N > 0 ? N : 1], owners[N > 0 ? N : 1];
            for (n = 0; n < N; ++n) {
                members[n] = crypt_coll_member(&l, n, g);
                owners[n]  = crypt_coll_owner(&l, n, g);
            }
            status = crypt_coll_bruck(team, members, owners, N, my_node,
                                      CRYPT_COLL_FRAMES_PER_BLOCK, rbuf, m,
                                      &failed);
            continue;
        }
        int next = crypt_coll_member(&l, (my_node + 1) % N, g);
        int prev = crypt_coll_member(&l, (my_node - 1 + N) % N, g);
        if ((N > 1) && (crypt_coll_owner(&l, my_node, g) == r)) {
            status = crypt_coll_seal(team, r, CRYPT_COLL_DEST_ANY,
                                     rbuf + (size_t)r * m, m,
                                     frames + (size_t)my_node * frame_len);
        }
        for (s = 0; (status == CRYPT_COLL_OK) && (s < N - 1); ++s) {
            int send_node = (my_node - s + N) % N, recv_node = (my_node - s - 1 + N) % N;
            int send_owner = crypt_coll_owner(&l, send_node, g);
            int recv_owner = crypt_coll_owner(&l, recv_node, g);
            status = crypt_coll_move(team, next,
                                     frames + (size_t)send_node * frame_len,
                                     (send_owner >= 0) ? frame_len : 0, 1, prev,
                                     frames + (size_t)recv_node * frame_len,
                                     (recv_owner >= 0) ? frame_len : 0);
            if ((status == CRYPT_COLL_OK) && (recv_owner >= 0) &&
                (crypt_coll_open(team, recv_owner, recv_owner,
                                 CRYPT_COLL_DEST_ANY,
                                 frames + (size_t)recv_node * frame_len, m,
                                 rbuf + (size_t)recv_owner * m) != CRYPT_COLL_OK)) {
                failed = 1; /* keep the schedule; the agreement reports it */
            }
        }
    }

    /* step 2: a plaintext ring inside the node; local rank q contributes
     * the blocks of every group it served, from every node. Small blocks
     * go packed, one message a step; large ones one by one, straight from
     * rbuf to rbuf (packing 8 MiB and unpacking it again cost more than
     * the extra messages) */
    nodes_in  = l.count[my_node];
    out_owner = malloc(sizeof(int) * (size_t)N * (size_t)l.max_local + 1);
    in_owner  = malloc(sizeof(int) * (size_t)N * (size_t)l.max_local + 1);
    if ((out_owner == NULL) || (in_owner == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (s = 0; (status == CRYPT_COLL_OK) && (s < nodes_in - 1); ++s) {
        int next = l.ranks[my_node][(my_local + 1) % nodes_in];
        int prev = l.ranks[my_node][(my_local - 1 + nodes_in) % nodes_in];
        int nout = crypt_coll_group_blocks(&l, (my_local - s + nodes_in) % nodes_in,
                                           nodes_in, out_owner);
        int nin  = crypt_coll_group_blocks(&l, (my_local - s - 1 + nodes_in) % nodes_in,
                                           nodes_in, in_owner);
        int i;

        if (m >= CRYPT_COLL_RING_PACK_MAX) {
            for (i = 0; (status == CRYPT_COLL_OK) && (i < nout || i < nin); ++i) {
                status = crypt_coll_move(team, (i < nout) ? next : -1,
                                         (i < nout) ? rbuf + (size_t)out_owner[i] * m : NULL,
                                         (i < nout) ? m : 0, 0, (i < nin) ? prev : -1,
                                         (i < nin) ? rbuf + (size_t)in_owner[i] * m : NULL,
                                         (i < nin) ? m : 0);
            }
            continue;
        }
        for (i = 0; i < nout; ++i) {
            memcpy(pack_out + (size_t)i * m, rbuf + (size_t)out_owner[i] * m, m);
        }
        status = crypt_coll_move(team, next, pack_out, (size_t)nout * m, 0, prev,
                                 pack_in, (size_t)nin * m);
        for (i = 0; (status == CRYPT_COLL_OK) && (i < nin); ++i) {
            memcpy(rbuf + (size_t)in_owner[i] * m, pack_in + (size_t)i * m, m);
        }
    }

    free(in_owner);
    free(out_owner);
    crypt_coll_layout_free(&l);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}
