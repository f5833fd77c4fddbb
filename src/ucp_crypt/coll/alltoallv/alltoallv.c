/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All-to-all with counts per pair: every block to another node sealed once.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

/* alltoall with a length per pair: the same pairwise exchange */
crypt_coll_status_t crypt_coll_alltoallv_run(crypt_coll_team_t *team,
                                             const void *sbuf,
                                             const size_t *scounts,
                                             const size_t *sdispls,
                                             void *rbuf,
                                             const size_t *rcounts,
                                             const size_t *rdispls)
{
    const int p = team->size, r = team->rank;
    const uint8_t *src_buf = sbuf;
    uint8_t *dst_buf = rbuf, *out = NULL, *in = NULL;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    size_t max_s = 0, max_r = 0;
    int s, q, failed = 0;

    for (q = 0; q < p; ++q) {
        max_s = (scounts[q] > max_s) ? scounts[q] : max_s;
        max_r = (rcounts[q] > max_r) ? rcounts[q] : max_r;
    }
    out = malloc(max_s + CRYPT_COLL_FRAME_OVERHEAD);
    in  = malloc(max_r + CRYPT_COLL_FRAME_OVERHEAD);
    if ((out == NULL) || (in == NULL) || (sbuf == rbuf) || (scounts[r] != rcounts[r])) {
        status = CRYPT_COLL_ERR_PARAM;
    } else {
        memcpy(dst_buf + rdispls[r], src_buf + sdispls[r], scounts[r]);
    }
    for (s = 1; (status == CRYPT_COLL_OK) && (s < p); ++s) {
        int to = (r + s) % p, from = (r - s + p) % p;
        int seal_out = !crypt_coll_same_node(team, to);
        int sealed_in = !crypt_coll_same_node(team, from);

        if (seal_out) {
            /* owner = the destination, length = this block's (AAD) */
            status = crypt_coll_seal(team, to, to, src_buf + sdispls[to],
                                     scounts[to], out);
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, to,
                                 seal_out ? out : src_buf + sdispls[to],
                                 scounts[to] + (seal_out ? CRYPT_COLL_FRAME_OVERHEAD : 0),
                                 seal_out, from,
                                 sealed_in ? in : dst_buf + rdispls[from],
                                 rcounts[from] + (sealed_in ? CRYPT_COLL_FRAME_OVERHEAD : 0));
        if ((status == CRYPT_COLL_OK) && sealed_in &&
            (crypt_coll_open(team, r, from, r, in, rcounts[from],
                             dst_buf + rdispls[from]) != CRYPT_COLL_OK)) {
            failed = 1;
        }
    }
    free(in);
    free(out);
    status = crypt_coll_finish(team, status, failed, rbuf, 0);
    if (status != CRYPT_COLL_OK) {
        for (q = 0; q < p; ++q) {
            memset(dst_buf + rdispls[q], 0, rcounts[q]);
        }
    }
    return status;
}
