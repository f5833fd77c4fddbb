/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Frames (crypt_coll_wire.h): a block sealed once under the team key by
 * the node that owns it, opened once per receiving node; and the one path
 * every byte of an algorithm takes, which refuses plaintext to another
 * node.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

#include <endian.h>

static void crypt_coll_aad(crypt_coll_aad_t *aad, const crypt_coll_team_t *team,
                           int owner, int sealer, int dest, size_t m)
{
    aad->collective = htole64(team->collective);
    aad->owner      = htole32((uint32_t)owner);
    aad->sealer     = htole32((uint32_t)sealer);
    aad->dest       = htole32((uint32_t)dest);
    aad->length     = htole64(m);
}

/* frame = be32 sealer || be64 sequence || ciphertext || tag */
crypt_coll_status_t crypt_coll_seal(crypt_coll_team_t *team, int owner,
                                    int dest, const uint8_t *plain, size_t m,
                                    uint8_t *frame)
{
    uint32_t sealer = htobe32((uint32_t)team->rank);
    uint64_t seq    = team->next_nonce++;
    uint64_t be_seq = htobe64(seq);
    crypt_coll_aad_t aad;

    memcpy(frame, &sealer, 4);
    memcpy(frame + 4, &be_seq, 8);
    crypt_coll_aad(&aad, team, owner, team->rank, dest, m);
    if (crypt_record_seal(&team->key, frame, seq, &aad, sizeof(aad), plain, m,
                          frame + CRYPT_COLL_FRAME_HDR,
                          frame + CRYPT_COLL_FRAME_HDR + m) != CRYPT_AEAD_OK) {
        return CRYPT_COLL_ERR_PARAM;
    }
    team->counters.bytes_sealed += m;
    team->counters.seal_calls++;
    return CRYPT_COLL_OK;
}

/* The sealer in the frame's header is checked against what the receiver
 * knows before the tag is: it selects the nonce, and it is bound into the
 * associated data, so a frame redirected from another sender fails. */
static int crypt_coll_sealer_expected(const crypt_coll_team_t *team, int owner,
                                      int expected, uint32_t sealer)
{
    if (sealer >= (uint32_t)team->size) {
        return 0;
    }
    if (expected != CRYPT_COLL_SEALER_ANY) {
        return sealer == (uint32_t)expected;
    }
    /* any sealer only for one rank's block: the tag binds the frame to that
     * block of this collective, whose bytes every rank that seals it has
     * the same of; a frame of several blocks must name its sealer */
    return (owner >= 0) && (owner < team->size);
}

crypt_coll_status_t crypt_coll_open(crypt_coll_team_t *team, int owner,
                                    int expected_sealer, int dest,
                                    const uint8_t *frame, size_t m,
                                    uint8_t *plain)
{
    uint32_t sealer;
    uint64_t seq;
    crypt_coll_aad_t aad;

    memcpy(&sealer, frame, 4);
    memcpy(&seq, frame + 4, 8);
    sealer = be32toh(sealer);
    seq    = be64toh(seq);
    if (!crypt_coll_sealer_expected(team, owner, expected_sealer, sealer)) {
        memset(plain, 0, m);
        return CRYPT_COLL_ERR_AUTH;
    }
    crypt_coll_aad(&aad, team, owner, (int)sealer, dest, m);
    team->counters.open_calls++;
    team->counters.bytes_opened += m;
    /* a failed open zeroes `plain` (aead.h) */
    return (crypt_record_open(&team->key, frame, seq, &aad, sizeof(aad),
                              frame + CRYPT_COLL_FRAME_HDR, m, plain,
                              frame + CRYPT_COLL_FRAME_HDR + m) == CRYPT_AEAD_OK) ?
           CRYPT_COLL_OK : CRYPT_COLL_ERR_AUTH;
}

int crypt_coll_same_node(const crypt_coll_team_t *team, int peer)
{
    return team->node_of[peer] == team->node_of[team->rank];
}

/* every move goes through here: plaintext to another node is refused */
crypt_coll_status_t crypt_coll_move(crypt_coll_team_t *team, int dst,
                                    const void *sbuf, size_t slen,
                                    int sealed, int src, void *rbuf,
                                    size_t rlen)
{
    if ((dst >= 0) && !sealed && !crypt_coll_same_node(team, dst)) {
        team->counters.inter_node_plaintext_bytes += slen;
        return CRYPT_COLL_ERR_PARAM; /* a bug in an algorithm: never send it */
    }
    if (dst >= 0) {
        team->counters.bytes_sent += slen;
    }
    if (team->task != NULL) {
        return (crypt_coll_task_move(team, dst, sbuf, slen, src, rbuf, rlen) == 0) ?
               CRYPT_COLL_OK : CRYPT_COLL_ERR_IO;
    }
    return (team->sendrecv(team->ctx, dst, sbuf, slen, src, rbuf, rlen) == 0) ?
           CRYPT_COLL_OK : CRYPT_COLL_ERR_IO;
}
