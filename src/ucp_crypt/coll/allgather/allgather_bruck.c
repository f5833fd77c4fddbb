/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Bruck's recursive doubling for any number of members, the heart of
 * O-RD (a frame per block), O-RD2 (one merged frame per message), C-RD and
 * the leaders' exchange of HS1/HS2.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

/*
 * All-gather among `k` members (ranks, `pos` is ours) of the blocks in
 * slots 0..k-1, slot i owned by rank owner[i] (-1: an empty slot, nothing
 * to move). Bruck's algorithm (ceil(lg k) rounds, any k): in round s we
 * send the slots pos .. pos+cnt-1 to member pos - 2^s and receive the
 * slots pos+2^s .. from member pos + 2^s, cnt = min(2^s, k - 2^s).
 * Plaintext blocks live in rbuf at their owner's place; frames[] holds the
 * frame of each slot we have one for.
 */
crypt_coll_status_t
crypt_coll_bruck(crypt_coll_team_t *team, const int *members, const int *owner,
                 int k, int pos, crypt_coll_framing_t framing, uint8_t *rbuf,
                 size_t m, int *failed)
{
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *frames = crypt_coll_workspace(team, CRYPT_COLL_WS_FRAMES,
                                           frame_len * (size_t)k + 1);
    char *have_frame = calloc((size_t)k + 1, 1);
    uint8_t *out = crypt_coll_workspace(team, CRYPT_COLL_WS_OUT,
                                        (frame_len + m) * (size_t)k +
                                        CRYPT_COLL_FRAME_OVERHEAD);
    uint8_t *in  = crypt_coll_workspace(team, CRYPT_COLL_WS_IN,
                                        (frame_len + m) * (size_t)k +
                                        CRYPT_COLL_FRAME_OVERHEAD);
    uint8_t *merged = crypt_coll_workspace(team, CRYPT_COLL_WS_MERGED,
                                           m * (size_t)k + 1);
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int dist, step = 0;

    if (!frames || !have_frame || !out || !in || !merged) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (dist = 1; (status == CRYPT_COLL_OK) && (dist < k); dist *= 2, ++step) {
        int cnt = (dist < k - dist) ? dist : k - dist, j;
        int to = members[(pos - dist + k) % k], from = members[(pos + dist) % k];
        int seal_out = !crypt_coll_same_node(team, to);
        int sealed_in = !crypt_coll_same_node(team, from);
        size_t out_len = 0, in_len = 0, plain_len = 0;

        /* what goes out */
        for (j = 0; j < cnt; ++j) {
            int slot = (pos + j) % k, o = owner[slot];
            if (o < 0) {
                continue;
            }
            if (!seal_out) {
                memcpy(out + out_len, rbuf + (size_t)o * m, m);
                out_len += m;
            } else if (framing == CRYPT_COLL_FRAMES_MERGED) {
                memcpy(merged + plain_len, rbuf + (size_t)o * m, m);
                plain_len += m;
            } else {
                if (!have_frame[slot]) {
                    status = crypt_coll_seal(team, o, CRYPT_COLL_DEST_ANY,
                                             rbuf + (size_t)o * m, m,
                                             frames + (size_t)slot * frame_len);
                    have_frame[slot] = 1;
                }
                memcpy(out + out_len, frames + (size_t)slot * frame_len, frame_len);
                out_len += frame_len;
            }
        }
        if (seal_out && (framing == CRYPT_COLL_FRAMES_MERGED) && (plain_len > 0)) {
            /* owner field: the round, marked, so a merged frame cannot pass
             * for a block (AAD) */
            status = crypt_coll_seal(team, (int)CRYPT_COLL_OWNER_MERGED(step),
                                     to, merged, plain_len, out);
            out_len = plain_len + CRYPT_COLL_FRAME_OVERHEAD;
        }
        /* what comes in: known from the slots alone */
        for (j = 0, plain_len = 0; j < cnt; ++j) {
            if (owner[(pos + dist + j) % k] >= 0) {
                plain_len += m;
                in_len    += (sealed_in && (framing == CRYPT_COLL_FRAMES_PER_BLOCK)) ?
                             frame_len : m;
            }
        }
        if (sealed_in && (framing == CRYPT_COLL_FRAMES_MERGED) && (plain_len > 0)) {
            in_len = plain_len + CRYPT_COLL_FRAME_OVERHEAD;
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, to, out, out_len, seal_out, from, in, in_len);
        if (status != CRYPT_COLL_OK) {
            break;
        }

        /* unpack */
        if (sealed_in && (framing == CRYPT_COLL_FRAMES_MERGED) && (plain_len > 0) &&
            (crypt_coll_open(team, (int)CRYPT_COLL_OWNER_MERGED(step), from,
                             team->rank, in, plain_len, merged) != CRYPT_COLL_OK)) {
            *failed = 1;
        }
        for (j = 0, in_len = 0, plain_len = 0; j < cnt; ++j) {
            int slot = (pos + dist + j) % k, o = owner[slot];
            if (o < 0) {
                continue;
            }
            if (!sealed_in) {
                memcpy(rbuf + (size_t)o * m, in + in_len, m);
                in_len += m;
            } else if (framing == CRYPT_COLL_FRAMES_MERGED) {
                memcpy(rbuf + (size_t)o * m, merged + plain_len, m);
                plain_len += m;
            } else {
                memcpy(frames + (size_t)slot * frame_len, in + in_len, frame_len);
                have_frame[slot] = 1;
                in_len += frame_len;
                if (crypt_coll_open(team, o, CRYPT_COLL_SEALER_ANY,
                                    CRYPT_COLL_DEST_ANY,
                                    frames + (size_t)slot * frame_len, m,
                                    rbuf + (size_t)o * m) != CRYPT_COLL_OK) {
                    *failed = 1; /* keep the schedule; the agreement reports it */
                }
            }
        }
    }
    free(have_frame);
    return status;
}

crypt_coll_status_t crypt_allgather_o_rd(crypt_coll_team_t *team,
                                         uint8_t *rbuf, size_t m,
                                         crypt_coll_framing_t framing)
{
    int *ranks = malloc(sizeof(int) * (size_t)team->size), r, failed = 0;
    crypt_coll_status_t status;

    if (ranks == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    for (r = 0; r < team->size; ++r) {
        ranks[r] = r;
    }
    status = crypt_coll_bruck(team, ranks, ranks, team->size, team->rank,
                              framing, rbuf, m, &failed);
    free(ranks);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}

/* Bruck among the node leaders over opaque sealed slots (one per node,
 * slot n at base + off[n], len[n] bytes): frames only, forwarded as they are */
crypt_coll_status_t crypt_coll_bruck_frames(crypt_coll_team_t *team,
                                            const int *leaders, int k,
                                            int pos, uint8_t *base,
                                            const size_t *off,
                                            const size_t *len)
{
    crypt_coll_status_t status = CRYPT_COLL_OK;
    uint8_t *out = NULL, *in = NULL;
    size_t total = 0;
    int dist, j;

    for (j = 0; j < k; ++j) {
        total += len[j];
    }
    out = crypt_coll_workspace(team, CRYPT_COLL_WS_OUT, total + 1);
    in  = crypt_coll_workspace(team, CRYPT_COLL_WS_IN, total + 1);
    if ((out == NULL) || (in == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (dist = 1; (status == CRYPT_COLL_OK) && (dist < k); dist *= 2) {
        int cnt = (dist < k - dist) ? dist : k - dist;
        size_t out_len = 0, in_len = 0;
        for (j = 0; j < cnt; ++j) {
            int slot = (pos + j) % k;
            memcpy(out + out_len, base + off[slot], len[slot]);
            out_len += len[slot];
            in_len  += len[(pos + dist + j) % k];
        }
        status = crypt_coll_move(team, leaders[(pos - dist + k) % k], out, out_len,
                                 1, leaders[(pos + dist) % k], in, in_len);
        for (j = 0, in_len = 0; (status == CRYPT_COLL_OK) && (j < cnt); ++j) {
            int slot = (pos + dist + j) % k;
            memcpy(base + off[slot], in + in_len, len[slot]);
            in_len += len[slot];
        }
    }
    return status;
}
