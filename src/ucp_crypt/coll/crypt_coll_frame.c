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

/* Leave this rank's epoch before its share of the key's limits is spent
 * (crypt_coll_team_set_epoch_limit); the frame header says which epoch. */
static crypt_aead_key_t *crypt_coll_seal_key(crypt_coll_team_t *team, size_t m)
{
    if ((team->next_nonce >= team->epoch_max_records) ||
        (team->epoch_bytes + m > team->epoch_max_bytes)) {
        if (team->seal_epoch == UINT16_MAX) {
            return NULL; /* 65535 epochs spent: the team must end */
        }
        ++team->seal_epoch;
        team->next_nonce  = 0;
        team->epoch_bytes = 0;
    }
    return crypt_coll_epoch_key(team, team->seal_epoch);
}

/* frame = epoch, sealer, sequence (the nonce) || ciphertext || tag
 * (crypt_coll_wire.h) */
crypt_coll_status_t crypt_coll_seal(crypt_coll_team_t *team, int owner,
                                    int dest, const uint8_t *plain, size_t m,
                                    uint8_t *frame)
{
    crypt_aead_key_t *key = crypt_coll_seal_key(team, m);
    crypt_coll_frame_hdr_t hdr;
    crypt_coll_aad_t aad;
    uint64_t seq;

    if ((key == NULL) || (m > team->epoch_max_bytes)) {
        return CRYPT_COLL_ERR_PARAM;
    }
    seq          = team->next_nonce++;
    hdr.epoch    = htobe16((uint16_t)team->seal_epoch);
    hdr.sealer   = htobe16((uint16_t)team->rank);
    hdr.sequence = htobe64(seq);
    memcpy(frame, &hdr, sizeof(hdr));
    crypt_coll_aad(&aad, team, owner, team->rank, dest, m);
    /* the header's first 4 bytes are the nonce's fixed field */
    if (crypt_record_seal(key, frame, seq, &aad, sizeof(aad), plain, m,
                          frame + CRYPT_COLL_FRAME_HDR,
                          frame + CRYPT_COLL_FRAME_HDR + m) != CRYPT_AEAD_OK) {
        return CRYPT_COLL_ERR_PARAM;
    }
    team->epoch_bytes += m;
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
    crypt_coll_frame_hdr_t hdr;
    crypt_aead_key_t *key;
    uint32_t sealer, epoch;
    crypt_coll_aad_t aad;

    memcpy(&hdr, frame, sizeof(hdr));
    sealer = be16toh(hdr.sealer);
    epoch  = be16toh(hdr.epoch);
    /* Ranks move through epochs one at a time: an epoch far ahead of any
     * this rank has seen or sealed in is refused before a key is derived
     * for it (the fuzzer found a forged header making the receiver derive
     * up to 65535 keys, when epochs were a ratchet) */
    key    = (crypt_coll_sealer_expected(team, owner, expected_sealer, sealer) &&
              (epoch <= crypt_coll_max_u32(team->epoch_seen, team->seal_epoch) +
                        CRYPT_COLL_EPOCH_WINDOW)) ?
             crypt_coll_epoch_key(team, epoch) : NULL;
    if (key == NULL) {
        memset(plain, 0, m);
        return CRYPT_COLL_ERR_AUTH;
    }
    crypt_coll_aad(&aad, team, owner, (int)sealer, dest, m);
    team->counters.open_calls++;
    team->counters.bytes_opened += m;
    /* a failed open zeroes `plain` (aead.h) */
    if (crypt_record_open(key, frame, be64toh(hdr.sequence), &aad, sizeof(aad),
                          frame + CRYPT_COLL_FRAME_HDR, m, plain,
                          frame + CRYPT_COLL_FRAME_HDR + m) != CRYPT_AEAD_OK) {
        return CRYPT_COLL_ERR_AUTH;
    }
    team->epoch_seen = crypt_coll_max_u32(team->epoch_seen, epoch);
    return CRYPT_COLL_OK;
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
