/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Naive all-gather (the paper's baseline): every rank seals its own block,
 * the frames go round a ring, every rank opens all of them.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

crypt_coll_status_t crypt_allgather_naive(crypt_coll_team_t *team,
                                          uint8_t *rbuf, size_t m)
{
    const int p = team->size, r = team->rank;
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *frames = crypt_coll_workspace(team, CRYPT_COLL_WS_FRAMES,
                                           frame_len * (size_t)p);
    crypt_coll_status_t status, result = CRYPT_COLL_OK;
    int s, j;

    if (frames == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    status = crypt_coll_seal(team, r, CRYPT_COLL_DEST_ANY, rbuf + (size_t)r * m, m,
                             frames + (size_t)r * frame_len);
    for (s = 0; (status == CRYPT_COLL_OK) && (s < p - 1); ++s) {
        int send_idx = (r - s + p) % p, recv_idx = (r - s - 1 + p) % p;
        status = crypt_coll_move(team, (r + 1) % p,
                                 frames + (size_t)send_idx * frame_len,
                                 frame_len, 1, (r - 1 + p) % p,
                                 frames + (size_t)recv_idx * frame_len, frame_len);
    }
    for (j = 0; (status == CRYPT_COLL_OK) && (j < p); ++j) {
        if ((j != r) &&
            (crypt_coll_open(team, j, j, CRYPT_COLL_DEST_ANY,
                             frames + (size_t)j * frame_len, m,
                             rbuf + (size_t)j * m) != CRYPT_COLL_OK)) {
            result = CRYPT_COLL_ERR_AUTH; /* keep going: zero every bad block */
        }
    }
    return (status != CRYPT_COLL_OK) ? status : result;
}
