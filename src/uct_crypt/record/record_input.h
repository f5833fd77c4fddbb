/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A record's bytes (crypt_record_hdr_t, base/format.h), without UCX:
 * sealed in place on the way out, and on the way in split and checked in
 * three steps around the tag, so that nothing in the cleartext is acted on
 * before the tag is checked except to find the key:
 *
 *   uct_crypt_record_parse    the bytes alone: length, type, flags, a
 *                             HELLO's fixed fields;
 *   uct_crypt_record_admit    against the flow the id names (if any) and
 *                             the peer the connection proved: which key
 *                             opens it, or why it is dropped unopened;
 *   (open: uct_crypt_record_open, under the flow's key generation or the
 *    next one, uct_crypt_record_key_choice)
 *   uct_crypt_record_check_opened  an authenticated record that must still
 *                             not be delivered: out of sequence, or an AM
 *                             id UCP never sends.
 *
 * The record layer (record/record.c) keeps the flows, counts and logs,
 * and fails endpoints; the fuzz target (test/fuzz/fuzz_record.c) runs this
 * very code against a model of honest senders.
 */
#ifndef UCT_CRYPT_RECORD_INPUT_H
#define UCT_CRYPT_RECORD_INPUT_H

#include "uct_crypt/base/format.h"
#include "uct_crypt/api/uct_crypt_stats.h"

#include <stddef.h>
#include <stdint.h>

/* UCT's AM ids are below this (UCT_AM_ID_MAX, asserted in
 * record/record.c): UCP sends no other */
#define UCT_CRYPT_RECORD_AM_ID_LIMIT 32

/* what the checks answer when a record may go on; anything else is the
 * reason it is dropped (before the tag) or rejected (after it) */
#define UCT_CRYPT_RECORD_PASS UCT_CRYPT_FAIL_LAST

/* A received record, split by uct_crypt_record_parse; points into the
 * buffer it was parsed from */
typedef struct uct_crypt_record_in {
    crypt_record_hdr_t hdr;            /* as on the wire (little endian) */
    uint64_t           flow_id;
    uint64_t           sequence;
    int                control;        /* CRYPT_RECORD_FLAG_CONTROL */
    const uint8_t      *sender_public; /* a HELLO's; NULL in DATA */
    uint8_t            *sealed;        /* the AM id, then the payload, then
                                          the tag */
    size_t             payload_len;    /* without the AM id */
    crypt_record_aad_t aad;
} uct_crypt_record_in_t;

/* What the receiver holds of the flow a record names */
typedef struct uct_crypt_record_flow_state {
    const uint8_t *peer_public;    /* the key its HELLO carried */
    uint64_t      next_sequence;
    int           failed;
} uct_crypt_record_flow_state_t;

typedef enum {
    UCT_CRYPT_RECORD_KEY_CURRENT, /* the flow's key generation */
    UCT_CRYPT_RECORD_KEY_NEXT,    /* the one after: open with a trial key,
                                     keep it only if the record opens */
    UCT_CRYPT_RECORD_KEY_NONE     /* no key of ours: refused unopened */
} uct_crypt_record_key_choice_t;

/* The AAD of a record: its cleartext header and its payload length */
void uct_crypt_record_aad(crypt_record_aad_t *aad, const crypt_record_hdr_t *hdr,
                          size_t payload_len);

/* Seal `record` in place: its header (and a HELLO's key) is written,
 * `hdr_len` long, followed by the AM id and `payload_len` bytes of
 * payload, with room for the tag after them. The header gets `generation`
 * (the low 8 bits of the key's) and is authenticated with the payload
 * length; the nonce is the key's prefix and the header's sequence number. */
int uct_crypt_record_seal_in_place(crypt_aead_key_t *aead,
                                   const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                   uint32_t generation, uint8_t *record,
                                   size_t hdr_len, size_t payload_len);

/* Split the `length` bytes at `data` into `rec`; UCT_CRYPT_RECORD_PASS, or
 * UCT_CRYPT_FAIL_MALFORMED: too short for its type, an unknown type or
 * flag, a HELLO with a sequence number or key generation other than 0 */
uct_crypt_fail_reason_t uct_crypt_record_parse(void *data, size_t length,
                                               uct_crypt_record_in_t *rec);

/* May the record be opened? `flow`: the state of the flow its id names,
 * NULL if there is none; `wire_peer`: on crypt's own wire the static key
 * its connection proved, else NULL. UCT_CRYPT_RECORD_PASS (for a HELLO: a
 * new flow of the sender's key may be keyed and tried: `wire_peer` on the
 * own wire, whose HELLO names no key, else `rec->sender_public`), or:
 *   REPLAY        a HELLO for a live flow, or a sequence number passed;
 *   HANDSHAKE     a HELLO that names a key other than the connection's;
 *   UNKNOWN_FLOW  DATA of no flow, or of another peer's than the
 *                 connection's;
 *   FLOW_FAILED   DATA of a flow that failed (reported already). */
uct_crypt_fail_reason_t uct_crypt_record_admit(const uct_crypt_record_in_t *rec,
                                               const uct_crypt_record_flow_state_t *flow,
                                               const uint8_t *wire_peer);

/* Which key of a flow at key generation `generation` may open the record */
uct_crypt_record_key_choice_t
uct_crypt_record_key_choice(const uct_crypt_record_in_t *rec, uint32_t generation);

/* Open `rec` in place under `aead` and `prefix`: CRYPT_AEAD_OK when the
 * tag matched; the AM id and payload are then in the clear */
crypt_aead_status_t uct_crypt_record_open(crypt_aead_key_t *aead,
                                          const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                          uct_crypt_record_in_t *rec);

/* An opened record of a flow that expects `next_sequence`: PASS when it
 * is to be delivered (rec->sealed[0] is the AM id, or 0 in a control
 * record), REORDER when it is not the next one (records in between were
 * lost), MALFORMED when its AM id is one UCP never sends. Both mean a peer
 * that holds the key broke the protocol, or records were dropped: the flow
 * cannot go on. */
uct_crypt_fail_reason_t uct_crypt_record_check_opened(const uct_crypt_record_in_t *rec,
                                                      uint64_t next_sequence);

#endif
