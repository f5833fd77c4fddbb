/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All-gather with counts per rank, leader-based.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

/* The blocks of `ranks` (n of them) packed in that order, or unpacked */
static void crypt_coll_pack_v(uint8_t *packed, const uint8_t *buf, const int *ranks,
                              int n, const size_t *counts, const size_t *displs,
                              int unpack)
{
    size_t off = 0;
    int i;

    for (i = 0; i < n; ++i) {
        if (unpack) {
            memcpy((uint8_t*)buf + displs[ranks[i]], packed + off, counts[ranks[i]]);
        } else {
            memcpy(packed + off, buf + displs[ranks[i]], counts[ranks[i]]);
        }
        off += counts[ranks[i]];
    }
}

/* Leader-based (HS1's shape with messages instead of a shared segment):
 * each node's first rank gathers the node's blocks in plaintext, seals
 * them as one frame, the leaders pass the frames round a ring, each
 * leader opens every other node's frame once, and spreads the result in
 * its node. Per node: s_e = its own bytes, s_d = everyone else's (the
 * bound), r_d = N - 1 at the leader. */
crypt_coll_status_t crypt_coll_allgatherv_run(crypt_coll_team_t *team,
                                              const void *sbuf, void *rbuf,
                                              const size_t *counts,
                                              const size_t *displs)
{
    const int p = team->size, r = team->rank, my_node = team->node_of[r];
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    size_t *node_bytes = NULL, *frame_off = NULL, total = 0, all_frames = 0;
    uint8_t *frames = NULL, *plain = NULL, *out = rbuf;
    int N, n, q, s, head, failed = 0;

    if (sbuf != NULL) {
        memmove(out + displs[r], sbuf, counts[r]);
    }
    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N          = l.num_nodes;
    head       = l.ranks[my_node][0];
    node_bytes = calloc((size_t)N, sizeof(size_t));
    frame_off  = calloc((size_t)N + 1, sizeof(size_t));
    if ((node_bytes == NULL) || (frame_off == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
        goto out;
    }
    for (q = 0; q < p; ++q) {
        node_bytes[team->node_of[q]] += counts[q];
        total                        += counts[q];
    }
    for (n = 0; n < N; ++n) {
        frame_off[n + 1] = frame_off[n] + node_bytes[n] + CRYPT_COLL_FRAME_OVERHEAD;
    }
    all_frames = frame_off[N];
    plain      = malloc(total + 1);
    frames     = (r == head) ? malloc(all_frames) : NULL;
    if ((plain == NULL) || ((r == head) && (frames == NULL))) {
        status = CRYPT_COLL_ERR_PARAM;
        goto out;
    }

    /* 1. the node's blocks to its leader, in plaintext */
    if (r != head) {
        status = crypt_coll_move(team, head, out + displs[r], counts[r], 0, -1, NULL, 0);
    }
    for (q = 1; (r == head) && (status == CRYPT_COLL_OK) && (q < l.count[my_node]); ++q) {
        int from = l.ranks[my_node][q];
        status = crypt_coll_move(team, -1, NULL, 0, 0, from, out + displs[from],
                                 counts[from]);
    }

    /* 2. leaders: seal the node once, ring the frames, open each once */
    if ((r == head) && (N > 1) && (status == CRYPT_COLL_OK)) {
        int next = l.ranks[(my_node + 1) % N][0], prev = l.ranks[(my_node - 1 + N) % N][0];

        crypt_coll_pack_v(plain, out, l.ranks[my_node], l.count[my_node], counts,
                          displs, 0);
        status = crypt_coll_seal(team, head, CRYPT_COLL_DEST_ANY, plain,
                                 node_bytes[my_node],
                                 frames + frame_off[my_node]);
        for (s = 0; (status == CRYPT_COLL_OK) && (s < N - 1); ++s) {
            int send_node = (my_node - s + N) % N, recv_node = (my_node - s - 1 + N) % N;
            status = crypt_coll_move(team, next, frames + frame_off[send_node],
                                     node_bytes[send_node] + CRYPT_COLL_FRAME_OVERHEAD,
                                     1, prev, frames + frame_off[recv_node],
                                     node_bytes[recv_node] + CRYPT_COLL_FRAME_OVERHEAD);
        }
        for (n = 0; (status == CRYPT_COLL_OK) && (n < N); ++n) {
            if (n == my_node) {
                continue;
            }
            /* sealed by that node's leader, for this collective, this long */
            if (crypt_coll_open(team, l.ranks[n][0], l.ranks[n][0],
                                CRYPT_COLL_DEST_ANY,
                                frames + frame_off[n], node_bytes[n], plain) !=
                CRYPT_COLL_OK) {
                failed = 1; /* zeros: the blocks are zeroed at the end */
            }
            crypt_coll_pack_v(plain, out, l.ranks[n], l.count[n], counts, displs, 1);
        }
    }

    /* 3. everyone's blocks to the node, in plaintext */
    if (status == CRYPT_COLL_OK) {
        int all[CRYPT_COLL_MAX_RANKS];
        for (q = 0; q < p; ++q) {
            all[q] = q;
        }
        if (r == head) {
            crypt_coll_pack_v(plain, out, all, p, counts, displs, 0);
        }
        status = crypt_coll_node_spread(team, &l, head, plain, total);
        if ((status == CRYPT_COLL_OK) && (r != head)) {
            crypt_coll_pack_v(plain, out, all, p, counts, displs, 1);
        }
    }

out:
    free(frames);
    free(plain);
    free(frame_off);
    free(node_bytes);
    crypt_coll_layout_free(&l);
    status = crypt_coll_finish(team, status, failed, rbuf, 0);
    if (status != CRYPT_COLL_OK) {
        /* the blocks only: what lies between them is not ours to touch */
        for (q = 0; q < p; ++q) {
            memset(out + displs[q], 0, counts[q]);
        }
    }
    return status;
}
