/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Broadcast, sealed once: the root seals, a binomial tree over the nodes
 * carries the frame, each node opens it once and spreads it inside.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

crypt_coll_status_t crypt_coll_bcast_run(crypt_coll_team_t *team, void *buf,
                                         size_t m, int root)
{
    const int r = team->rank, my_node = team->node_of[r];
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *frame = NULL;
    int N, root_node, rel, head, mask, failed = 0;

    if ((root < 0) || (root >= team->size) || (crypt_coll_layout(team, &l) != 0)) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N         = l.num_nodes;
    root_node = team->node_of[root];
    rel       = (my_node - root_node + N) % N;
    /* one rank per node talks to other nodes: the root on its node */
    head      = (my_node == root_node) ? root : l.ranks[my_node][0];
    frame     = malloc(frame_len);
    if (frame == NULL) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    if ((status == CRYPT_COLL_OK) && (r == head) && (N > 1)) {
        if (r == root) {
            status = crypt_coll_seal(team, (int)CRYPT_COLL_OWNER_BCAST(root),
                                     CRYPT_COLL_DEST_ANY,
                                     buf, m, frame);
        }
        /* binomial tree over the nodes, rooted at the root's node */
        for (mask = 1; (status == CRYPT_COLL_OK) && (mask < N); mask <<= 1) {
            int peer_rel;
            if (rel < mask) {
                peer_rel = rel + mask;
                if (peer_rel < N) {
                    int n = (peer_rel + root_node) % N;
                    status = crypt_coll_move(team, l.ranks[n][0], frame, frame_len, 1,
                                             -1, NULL, 0);
                }
            } else if (rel < 2 * mask) {
                int n = (rel - mask + root_node) % N;
                int from = (n == root_node) ? root : l.ranks[n][0];
                status = crypt_coll_move(team, -1, NULL, 0, 1, from, frame, frame_len);
                if ((status == CRYPT_COLL_OK) &&
                    (crypt_coll_open(team, (int)CRYPT_COLL_OWNER_BCAST(root), root,
                                     CRYPT_COLL_DEST_ANY, frame,
                                     m, buf) != CRYPT_COLL_OK)) {
                    failed = 1; /* the frame still goes on: peers must not wait */
                }
            }
        }
    }
    if (status == CRYPT_COLL_OK) {
        status = crypt_coll_node_spread(team, &l, head, buf, m);
    }
    free(frame);
    crypt_coll_layout_free(&l);
    return crypt_coll_finish(team, status, failed, buf, m);
}
