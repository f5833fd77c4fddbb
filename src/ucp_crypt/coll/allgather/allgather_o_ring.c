/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * O-Ring: a ring by rank; a block is sealed only where it crosses nodes,
 * once, by the node that owns it, and forwarded as it is.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

crypt_coll_status_t crypt_allgather_o_ring(crypt_coll_team_t *team,
                                           uint8_t *rbuf, size_t m)
{
    const int p = team->size, r = team->rank;
    const int right = (r + 1) % p, left = (r - 1 + p) % p;
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *frames = crypt_coll_workspace(team, CRYPT_COLL_WS_FRAMES,
                                           frame_len * (size_t)p);
    uint8_t *out    = crypt_coll_workspace(team, CRYPT_COLL_WS_OUT, frame_len);
    char *have_frame = calloc((size_t)p, 1);
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int s, failed = 0;

    if ((frames == NULL) || (out == NULL) || (have_frame == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (s = 0; (status == CRYPT_COLL_OK) && (s < p - 1); ++s) {
        int send_idx = (r - s + p) % p, recv_idx = (r - s - 1 + p) % p;
        int seal_out = !crypt_coll_same_node(team, right);
        int sealed_in = !crypt_coll_same_node(team, left);
        const uint8_t *sbuf = rbuf + (size_t)send_idx * m;
        size_t slen = m;

        if (seal_out) {
            /* a frame that came from another node goes on as it is: the
             * block is sealed once, by the node that owns it */
            if (have_frame[send_idx]) {
                sbuf = frames + (size_t)send_idx * frame_len;
            } else {
                status = crypt_coll_seal(team, send_idx, CRYPT_COLL_DEST_ANY,
                                         sbuf, m, out);
                sbuf   = out;
            }
            slen = frame_len;
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, right, sbuf, slen, seal_out, left,
                                 sealed_in ? frames + (size_t)recv_idx * frame_len :
                                             rbuf + (size_t)recv_idx * m,
                                 sealed_in ? frame_len : m);
        if ((status == CRYPT_COLL_OK) && sealed_in) {
            /* a failed open keeps the schedule going (the peers would wait
             * forever otherwise); the agreement step reports it */
            if (crypt_coll_open(team, recv_idx, CRYPT_COLL_SEALER_ANY,
                                CRYPT_COLL_DEST_ANY,
                                frames + (size_t)recv_idx * frame_len, m,
                                rbuf + (size_t)recv_idx * m) != CRYPT_COLL_OK) {
                failed = 1;
            }
            have_frame[recv_idx] = 1;
        }
    }
    free(have_frame);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}
