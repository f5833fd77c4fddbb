/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A record's bytes, sealed and checked (record/record_input.h). libc
 * and src/aead only: the fuzz target test/fuzz/fuzz_record.c runs it.
 *
 * The order of the checks is the point: everything that refuses a record
 * without its key comes first and changes nothing; the sequence number is
 * compared before the tag only to refuse (a replay costs no AES), and the
 * one comparison that fails a flow (REORDER) waits until the tag has shown
 * that the flow's own peer sent it.
 */
#include "uct_crypt/record/record_input.h"

#include <endian.h>
#include <string.h>

void uct_crypt_record_aad(crypt_record_aad_t *aad, const crypt_record_hdr_t *hdr,
                          size_t payload_len)
{
    memset(aad, 0, sizeof(*aad));
    aad->hdr    = *hdr;
    aad->length = htole32((uint32_t)payload_len);
}

int uct_crypt_record_seal_in_place(crypt_aead_key_t *aead,
                                   const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                   uint32_t generation, uint8_t *record,
                                   size_t hdr_len, size_t payload_len)
{
    uint8_t *sealed = record + hdr_len;
    crypt_record_hdr_t hdr;
    crypt_record_aad_t aad;

    memcpy(&hdr, record, sizeof(hdr));
    hdr.key_generation = (uint8_t)generation;
    memcpy(record, &hdr, sizeof(hdr));
    uct_crypt_record_aad(&aad, &hdr, payload_len);
    return crypt_record_seal(aead, prefix, le64toh(hdr.sequence), &aad,
                             sizeof(aad), sealed, CRYPT_RECORD_AM_ID_LEN + payload_len,
                             sealed,
                             sealed + CRYPT_RECORD_AM_ID_LEN + payload_len) ==
           CRYPT_AEAD_OK;
}

uct_crypt_fail_reason_t uct_crypt_record_parse(void *data, size_t length,
                                               uct_crypt_record_in_t *rec)
{
    size_t hdr_len = CRYPT_RECORD_HDR_LEN;

    memset(rec, 0, sizeof(*rec));
    if (length < CRYPT_RECORD_HDR_LEN + CRYPT_RECORD_AM_ID_LEN + CRYPT_AEAD_TAG_LEN) {
        return UCT_CRYPT_FAIL_MALFORMED;
    }
    memcpy(&rec->hdr, data, sizeof(rec->hdr));
    rec->flow_id  = le64toh(rec->hdr.flow_id);
    rec->sequence = le64toh(rec->hdr.sequence);
    rec->control  = !!(le16toh(rec->hdr.flags) & CRYPT_RECORD_FLAG_CONTROL);
    if (le16toh(rec->hdr.flags) & ~CRYPT_RECORD_FLAG_CONTROL) {
        return UCT_CRYPT_FAIL_MALFORMED;
    }

    if (rec->hdr.type == CRYPT_RECORD_HELLO) {
        hdr_len += CRYPT_HELLO_EXTRA_LEN;
        /* a flow starts at sequence 0 under its first keys */
        if ((length < hdr_len + CRYPT_RECORD_AM_ID_LEN + CRYPT_AEAD_TAG_LEN) ||
            (rec->sequence != 0) || (rec->hdr.key_generation != 0)) {
            return UCT_CRYPT_FAIL_MALFORMED;
        }
        rec->sender_public = (const uint8_t*)data + CRYPT_RECORD_HDR_LEN;
    } else if (rec->hdr.type != CRYPT_RECORD_DATA) {
        return UCT_CRYPT_FAIL_MALFORMED;
    }

    rec->sealed      = (uint8_t*)data + hdr_len;
    rec->payload_len = length - hdr_len - CRYPT_RECORD_AM_ID_LEN - CRYPT_AEAD_TAG_LEN;
    uct_crypt_record_aad(&rec->aad, &rec->hdr, rec->payload_len);
    return UCT_CRYPT_RECORD_PASS;
}

static int uct_crypt_record_key_is_zero(const uint8_t *key)
{
    uint8_t any = 0;
    size_t i;

    for (i = 0; i < KEYEX_PUBLIC_KEY_LEN; ++i) {
        any |= key[i];
    }
    return any == 0;
}

uct_crypt_fail_reason_t uct_crypt_record_admit(const uct_crypt_record_in_t *rec,
                                               const uct_crypt_record_flow_state_t *flow,
                                               const uint8_t *wire_peer)
{
    if (rec->sender_public != NULL) {
        if (flow != NULL) {
            return UCT_CRYPT_FAIL_REPLAY; /* the live flow stays as it is */
        }
        /* on the own wire a HELLO names no key (zeros, base/format.h);
         * one it names must be the key its connection proved */
        if ((wire_peer != NULL) && !uct_crypt_record_key_is_zero(rec->sender_public) &&
            crypt_memcmp_ct(wire_peer, rec->sender_public, KEYEX_PUBLIC_KEY_LEN)) {
            return UCT_CRYPT_FAIL_HANDSHAKE; /* not the key its connection proved */
        }
        return UCT_CRYPT_RECORD_PASS;
    }

    if ((flow == NULL) ||
        ((wire_peer != NULL) &&
         crypt_memcmp_ct(wire_peer, flow->peer_public, KEYEX_PUBLIC_KEY_LEN))) {
        return UCT_CRYPT_FAIL_UNKNOWN_FLOW;
    }
    if (flow->failed) {
        return UCT_CRYPT_FAIL_FLOW_FAILED;
    }
    if (rec->sequence < flow->next_sequence) {
        return UCT_CRYPT_FAIL_REPLAY;
    }
    return UCT_CRYPT_RECORD_PASS;
}

uct_crypt_record_key_choice_t
uct_crypt_record_key_choice(const uct_crypt_record_in_t *rec, uint32_t generation)
{
    /* the header carries the low 8 bits: a sender is never more than one
     * update ahead of what its receiver has opened, since it updates only
     * after sealing under the previous key (src/keyex/keyex.h) */
    if (rec->hdr.key_generation == (uint8_t)generation) {
        return UCT_CRYPT_RECORD_KEY_CURRENT;
    }
    if (rec->hdr.key_generation == (uint8_t)(generation + 1)) {
        return UCT_CRYPT_RECORD_KEY_NEXT;
    }
    return UCT_CRYPT_RECORD_KEY_NONE;
}

crypt_aead_status_t uct_crypt_record_open(crypt_aead_key_t *aead,
                                          const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                          uct_crypt_record_in_t *rec)
{
    size_t len = CRYPT_RECORD_AM_ID_LEN + rec->payload_len;

    return crypt_record_open(aead, prefix, rec->sequence, &rec->aad,
                             sizeof(rec->aad), rec->sealed, len, rec->sealed,
                             rec->sealed + len);
}

uct_crypt_fail_reason_t uct_crypt_record_check_opened(const uct_crypt_record_in_t *rec,
                                                      uint64_t next_sequence)
{
    if (rec->sequence != next_sequence) {
        return UCT_CRYPT_FAIL_REORDER;
    }
    if (rec->control ? (rec->sealed[0] != 0) :
                       (rec->sealed[0] >= UCT_CRYPT_RECORD_AM_ID_LIMIT)) {
        return UCT_CRYPT_FAIL_MALFORMED;
    }
    return UCT_CRYPT_RECORD_PASS;
}
