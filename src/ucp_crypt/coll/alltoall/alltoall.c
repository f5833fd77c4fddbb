/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All-to-all: every block to another node sealed once, by its sender.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

crypt_coll_status_t crypt_coll_alltoall_run(crypt_coll_team_t *team,
                                            const void *sbuf, void *rbuf, size_t m)
{
    const int p = team->size, r = team->rank;
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *out = malloc(frame_len), *in = malloc(frame_len);
    const uint8_t *src_buf = sbuf;
    uint8_t *dst_buf = rbuf;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int s, failed = 0;

    if ((out == NULL) || (in == NULL) || (sbuf == rbuf)) {
        status = CRYPT_COLL_ERR_PARAM;
    } else {
        memcpy(dst_buf + (size_t)r * m, src_buf + (size_t)r * m, m);
    }
    for (s = 1; (status == CRYPT_COLL_OK) && (s < p); ++s) {
        int to = (r + s) % p, from = (r - s + p) % p;
        int seal_out = !crypt_coll_same_node(team, to);
        int sealed_in = !crypt_coll_same_node(team, from);

        if (seal_out) {
            /* owner = the destination: a frame cannot be delivered to
             * another rank than the one it was sealed for */
            status = crypt_coll_seal(team, to, to, src_buf + (size_t)to * m, m,
                                     out);
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, to,
                                 seal_out ? out : src_buf + (size_t)to * m,
                                 seal_out ? frame_len : m, seal_out, from,
                                 sealed_in ? in : dst_buf + (size_t)from * m,
                                 sealed_in ? frame_len : m);
        /* sealed for us, and by no other rank than the expected sender; a
         * failed open leaves zeros */
        if ((status == CRYPT_COLL_OK) && sealed_in &&
            (crypt_coll_open(team, r, from, r, in, m, dst_buf + (size_t)from * m) !=
             CRYPT_COLL_OK)) {
            failed = 1;
        }
    }
    free(in);
    free(out);
    return crypt_coll_finish(team, status, failed, rbuf, (size_t)p * m);
}
