/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The record layer's receive side (src/uct_crypt/record/record_input.c)
 * with real keys, driven the way uct_crypt_record_am_handler drives it
 * (parse, find the flow, admit, key the HELLO's new flow, open under the
 * current or the next key generation, check the opened record), against a
 * model of what an honest receiver must do. Three senders, each with its
 * own static key and flow, send to one receiver; a key update every three
 * records. The input is a script, a step per few bytes:
 *
 *   send     the flow's next honest record (its HELLO first), delivered;
 *   lose     the same, never delivered: the next one shows a gap;
 *   replay   one of the flow's last records again;
 *   change   the next honest record with input bytes XORed over it and
 *            perhaps cut short: lost as far as the sender knows;
 *   forge    a record sealed with the flow's real key of the generation it
 *            names but fields no honest sender writes: a sequence number
 *            off by a few, a key generation one back or two ahead, an AM id
 *            UCP never sends, a control record with an AM id, reserved
 *            flag bits, another type; what stands behind the tag;
 *   raw      the input's bytes as a record, perhaps naming a live flow.
 *
 * and on each, whether it came over crypt's own wire on a connection that
 * proved the sender's key or another one.
 *
 * Checked at every step: a record is delivered exactly when the model
 * says; what is delivered is what was sealed; a record that was changed
 * anywhere, or never sealed with the key, is not delivered and leaves every
 * flow as it was (its existence, sequence number, key and failure); the
 * reason a record is refused is the model's.
 */
#include "ucx_crypt_config.h"
#include "uct_crypt/record/record_input.h"
#include "fuzz_common.h"

#include <openssl/crypto.h>
#include <stddef.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_FLOWS        3
#define FUZZ_HISTORY      4
#define FUZZ_UPDATE_EVERY 3     /* records under one key */
#define FUZZ_MAX_PAYLOAD  64
#define FUZZ_MAX_STEPS    64
#define FUZZ_RECORD_MAX   (CRYPT_RECORD_OVERHEAD_MAX + FUZZ_MAX_PAYLOAD)
#define FUZZ_DELIVERED    (UCT_CRYPT_FAIL_LAST + 1)

/* a record and the fields it was sealed with */
typedef struct {
    uint8_t  bytes[FUZZ_RECORD_MAX];
    size_t   len;
    uint8_t  type, am_id;
    uint16_t flags;
    uint64_t sequence;
    uint32_t generation;
    size_t   payload_len;
} fuzz_record_t;

typedef struct {
    keyex_keypair_t      keypair;
    uint64_t             flow_id;
    keyex_traffic_keys_t first;     /* generation 0, derived once */
    /* per input */
    keyex_traffic_keys_t keys, previous;
    uint64_t             next_sequence;
    unsigned             sealed_this_key;
    fuzz_record_t        history[FUZZ_HISTORY];
    unsigned             num_sent;
} fuzz_sender_t;

typedef struct {
    int                  present, failed;
    uint8_t              peer_public[KEYEX_PUBLIC_KEY_LEN];
    uint64_t             next_sequence;
    keyex_traffic_keys_t keys;
    crypt_aead_key_t     aead;
} fuzz_rx_flow_t;

/* what the model expects the receiver to hold of a flow */
typedef struct {
    int      present, failed;
    uint64_t next_sequence;
    uint32_t generation;
} fuzz_model_flow_t;

static keyex_keypair_t fuzz_receiver, fuzz_stranger;
static fuzz_sender_t fuzz_senders[FUZZ_FLOWS];
static fuzz_rx_flow_t fuzz_rx[FUZZ_FLOWS];
static fuzz_model_flow_t fuzz_model[FUZZ_FLOWS];
static uint8_t fuzz_pair_secrets[FUZZ_FLOWS][KEYEX_SECRET_LEN];
static int fuzz_ready;

static void fuzz_check(int ok)
{
    if (!ok) {
        abort();
    }
}

static void fuzz_derive(const keyex_keypair_t *local, const uint8_t *peer,
                        const uint8_t *sender, const uint8_t *receiver,
                        uint64_t flow_id, keyex_traffic_keys_t *keys)
{
    uint8_t pair[KEYEX_SECRET_LEN];

    fuzz_check((keyex_derive_pair_secret(local, peer, fuzz_job_secret, pair) == KEYEX_OK) &&
               (keyex_derive_flow_keys(pair, KEYEX_PURPOSE_RECORD, sender, receiver,
                                       flow_id, 32, keys) == KEYEX_OK));
}

static void fuzz_init(void)
{
    uint8_t priv[KEYEX_PRIVATE_KEY_LEN] = {9};
    int i;

    fuzz_check(crypt_aead_init(CRYPT_AEAD_BACKEND_OPENSSL) == CRYPT_AEAD_OK);
    fuzz_check(keyex_keypair_from_private(&fuzz_receiver, priv) == KEYEX_OK);
    priv[0] = 10;
    fuzz_check(keyex_keypair_from_private(&fuzz_stranger, priv) == KEYEX_OK);
    for (i = 0; i < FUZZ_FLOWS; ++i) {
        priv[0] = (uint8_t)(20 + i);
        fuzz_check(keyex_keypair_from_private(&fuzz_senders[i].keypair, priv) == KEYEX_OK);
        fuzz_senders[i].flow_id = 0x1000 + (uint64_t)i;
        fuzz_derive(&fuzz_senders[i].keypair, fuzz_receiver.public_key,
                    fuzz_senders[i].keypair.public_key, fuzz_receiver.public_key,
                    fuzz_senders[i].flow_id, &fuzz_senders[i].first);
        fuzz_check(keyex_derive_pair_secret(&fuzz_receiver,
                                            fuzz_senders[i].keypair.public_key,
                                            fuzz_job_secret, fuzz_pair_secrets[i]) ==
                   KEYEX_OK);
    }
    fuzz_ready = 1;
}

/* ---- the receiver: what uct_crypt_record_am_handler does ---------------- */

/* The receiver's X25519 with a sender's key is the same every time: done
 * once per sender in fuzz_init (any other key is computed as it comes) */
static int fuzz_known_pair_secret(const uint8_t *sender_public, uint8_t *pair)
{
    int i;

    for (i = 0; i < FUZZ_FLOWS; ++i) {
        if (!memcmp(sender_public, fuzz_senders[i].keypair.public_key,
                    KEYEX_PUBLIC_KEY_LEN)) {
            memcpy(pair, fuzz_pair_secrets[i], KEYEX_SECRET_LEN);
            return 1;
        }
    }
    return 0;
}

static int fuzz_rx_flow_index(uint64_t flow_id)
{
    int i;

    for (i = 0; i < FUZZ_FLOWS; ++i) {
        if (fuzz_senders[i].flow_id == flow_id) {
            return i;
        }
    }
    return -1;
}

static crypt_aead_status_t fuzz_rx_open(fuzz_rx_flow_t *flow,
                                        uct_crypt_record_in_t *rec)
{
    keyex_traffic_keys_t trial;
    crypt_aead_key_t next_aead;
    crypt_aead_status_t status;

    switch (uct_crypt_record_key_choice(rec, flow->keys.generation)) {
    case UCT_CRYPT_RECORD_KEY_CURRENT:
        return uct_crypt_record_open(&flow->aead, flow->keys.nonce_prefix, rec);
    case UCT_CRYPT_RECORD_KEY_NEXT:
        break;
    default:
        return CRYPT_AEAD_ERR_AUTH;
    }
    trial = flow->keys;
    fuzz_check((keyex_update_flow_keys(&trial) == KEYEX_OK) &&
               (crypt_aead_key_init(&next_aead, CRYPT_AEAD_BACKEND_OPENSSL, trial.key,
                                    trial.key_len) == CRYPT_AEAD_OK));
    status = uct_crypt_record_open(&next_aead, trial.nonce_prefix, rec);
    if (status == CRYPT_AEAD_OK) {
        crypt_aead_key_cleanup(&flow->aead);
        flow->aead = next_aead;
        flow->keys = trial;
    } else {
        crypt_aead_key_cleanup(&next_aead);
    }
    return status;
}

/* The record's fate: a uct_crypt_fail_reason_t, or FUZZ_DELIVERED with
 * its opened part at *rec */
static int fuzz_receive(uint8_t *bytes, size_t len, const uint8_t *wire_peer,
                        uct_crypt_record_in_t *rec)
{
    uct_crypt_record_flow_state_t state, *known = NULL;
    fuzz_rx_flow_t fresh, *flow = NULL;
    uct_crypt_fail_reason_t reason;
    int index;

    reason = uct_crypt_record_parse(bytes, len, rec);
    if (reason != UCT_CRYPT_RECORD_PASS) {
        return reason;
    }
    index = fuzz_rx_flow_index(rec->flow_id);
    if ((index >= 0) && fuzz_rx[index].present) {
        flow                = &fuzz_rx[index];
        state.peer_public   = flow->peer_public;
        state.next_sequence = flow->next_sequence;
        state.failed        = flow->failed;
        known               = &state;
    }
    reason = uct_crypt_record_admit(rec, known, wire_peer);
    if (reason != UCT_CRYPT_RECORD_PASS) {
        return reason;
    }
    if (rec->sender_public != NULL) {
        uint8_t pair[KEYEX_SECRET_LEN];

        memset(&fresh, 0, sizeof(fresh));
        if (!fuzz_known_pair_secret(rec->sender_public, pair) &&
            (keyex_derive_pair_secret(&fuzz_receiver, rec->sender_public,
                                      fuzz_job_secret, pair) != KEYEX_OK)) {
            return UCT_CRYPT_FAIL_HANDSHAKE; /* a low-order key */
        }
        fuzz_check(keyex_derive_flow_keys(pair, KEYEX_PURPOSE_RECORD,
                                          rec->sender_public, fuzz_receiver.public_key,
                                          rec->flow_id, 32, &fresh.keys) == KEYEX_OK);
        fuzz_check(crypt_aead_key_init(&fresh.aead, CRYPT_AEAD_BACKEND_OPENSSL,
                                       fresh.keys.key, fresh.keys.key_len) ==
                   CRYPT_AEAD_OK);
        memcpy(fresh.peer_public, rec->sender_public, KEYEX_PUBLIC_KEY_LEN);
        flow = &fresh;
    }
    if (fuzz_rx_open(flow, rec) != CRYPT_AEAD_OK) {
        if (flow == &fresh) {
            crypt_aead_key_cleanup(&fresh.aead);
        }
        return UCT_CRYPT_FAIL_AUTH;
    }
    if (flow == &fresh) {
        /* opened: only one of our senders holds a key that opens it */
        fuzz_check(index >= 0);
        fresh.present  = 1;
        fuzz_rx[index] = fresh;
        flow           = &fuzz_rx[index];
    }
    reason = uct_crypt_record_check_opened(rec, flow->next_sequence);
    if (reason != UCT_CRYPT_RECORD_PASS) {
        flow->failed = 1;
        return reason;
    }
    ++flow->next_sequence;
    return FUZZ_DELIVERED;
}

/* ---- senders -------------------------------------------------------------- */

static void fuzz_payload(uint8_t *p, size_t len, uint64_t sequence)
{
    size_t i;

    for (i = 0; i < len; ++i) {
        p[i] = (uint8_t)(sequence * 31 + i);
    }
}

/* A record of flow `s` sealed under `keys` (its header names their
 * generation): what an honest sender writes when the fields are its own */
static void fuzz_seal(const fuzz_sender_t *s, const keyex_traffic_keys_t *keys,
                      uint8_t type, uint16_t flags, uint64_t sequence,
                      uint8_t am_id, size_t payload_len, fuzz_record_t *out)
{
    size_t hdr_len = CRYPT_RECORD_HDR_LEN +
                     ((type == CRYPT_RECORD_HELLO) ? CRYPT_HELLO_EXTRA_LEN : 0);
    crypt_record_hdr_t hdr;
    crypt_aead_key_t aead;

    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = type;
    hdr.flags    = htole16(flags);
    hdr.flow_id  = htole64(s->flow_id);
    hdr.sequence = htole64(sequence);
    memcpy(out->bytes, &hdr, sizeof(hdr));
    memcpy(out->bytes + CRYPT_RECORD_HDR_LEN, s->keypair.public_key,
           CRYPT_HELLO_EXTRA_LEN); /* (overwritten by the AM id in DATA) */
    out->bytes[hdr_len] = am_id;
    fuzz_payload(out->bytes + hdr_len + CRYPT_RECORD_AM_ID_LEN, payload_len, sequence);
    fuzz_check((crypt_aead_key_init(&aead, CRYPT_AEAD_BACKEND_OPENSSL, keys->key,
                                    keys->key_len) == CRYPT_AEAD_OK) &&
               uct_crypt_record_seal_in_place(&aead, keys->nonce_prefix,
                                              keys->generation, out->bytes,
                                              hdr_len, payload_len));
    crypt_aead_key_cleanup(&aead);
    out->len         = hdr_len + CRYPT_RECORD_AM_ID_LEN + payload_len + CRYPT_AEAD_TAG_LEN;
    out->type        = type;
    out->am_id       = am_id;
    out->flags       = flags;
    out->sequence    = sequence;
    out->generation  = keys->generation;
    out->payload_len = payload_len;
}

/* the sender's next honest record; the sender moves on */
static void fuzz_send_next(fuzz_sender_t *s, fuzz_input_t *in, fuzz_record_t *out)
{
    uint8_t am_id     = fuzz_u8(in);
    int control       = am_id & 0x80;
    size_t len        = fuzz_u8(in) % (FUZZ_MAX_PAYLOAD + 1);

    fuzz_seal(s, &s->keys, (s->next_sequence == 0) ? CRYPT_RECORD_HELLO : CRYPT_RECORD_DATA,
              control ? CRYPT_RECORD_FLAG_CONTROL : 0, s->next_sequence,
              control ? 0 : (am_id % UCT_CRYPT_RECORD_AM_ID_LIMIT), len, out);
    s->history[s->num_sent++ % FUZZ_HISTORY] = *out;
    ++s->next_sequence;
    if (++s->sealed_this_key == FUZZ_UPDATE_EVERY) {
        s->previous = s->keys;
        fuzz_check(keyex_update_flow_keys(&s->keys) == KEYEX_OK);
        s->sealed_this_key = 0;
    }
}

/* ---- the model ---------------------------------------------------------- */

/* The fate of a record that flow `f`'s key of generation `generation`
 * sealed with these fields, and what the receiver then holds */
static int fuzz_expect(const fuzz_record_t *r, int wire_other, fuzz_model_flow_t *m)
{
    const uint8_t type        = r->type;
    const uint16_t flags      = r->flags;
    const uint64_t sequence   = r->sequence;
    const uint32_t generation = r->generation;
    const uint8_t am_id       = r->am_id;
    const int control         = flags & CRYPT_RECORD_FLAG_CONTROL;

    if ((flags & ~CRYPT_RECORD_FLAG_CONTROL) ||
        ((type != CRYPT_RECORD_HELLO) && (type != CRYPT_RECORD_DATA)) ||
        ((type == CRYPT_RECORD_HELLO) && ((sequence != 0) || ((uint8_t)generation != 0)))) {
        return UCT_CRYPT_FAIL_MALFORMED;
    }
    if (type == CRYPT_RECORD_HELLO) {
        if (m->present) {
            return UCT_CRYPT_FAIL_REPLAY;
        }
        if (wire_other) {
            return UCT_CRYPT_FAIL_HANDSHAKE;
        }
        if (generation != 0) {
            return UCT_CRYPT_FAIL_AUTH; /* 256 updates on: another key */
        }
        m->present       = 1;
        m->failed        = 0;
        m->next_sequence = 0;
        m->generation    = 0;
    } else {
        if (!m->present || wire_other) {
            return UCT_CRYPT_FAIL_UNKNOWN_FLOW;
        }
        if (m->failed) {
            return UCT_CRYPT_FAIL_FLOW_FAILED;
        }
        if (sequence < m->next_sequence) {
            return UCT_CRYPT_FAIL_REPLAY;
        }
        if ((generation != m->generation) && (generation != m->generation + 1)) {
            return UCT_CRYPT_FAIL_AUTH;
        }
        m->generation = generation;
    }
    if (sequence != m->next_sequence) {
        m->failed = 1;
        return UCT_CRYPT_FAIL_REORDER;
    }
    if (control ? (am_id != 0) : (am_id >= UCT_CRYPT_RECORD_AM_ID_LIMIT)) {
        m->failed = 1;
        return UCT_CRYPT_FAIL_MALFORMED;
    }
    ++m->next_sequence;
    return FUZZ_DELIVERED;
}

/* does the receiver hold what the model says of every flow? */
static void fuzz_check_state(void)
{
    int i;

    for (i = 0; i < FUZZ_FLOWS; ++i) {
        fuzz_check(fuzz_rx[i].present == fuzz_model[i].present);
        if (fuzz_model[i].present) {
            fuzz_check((fuzz_rx[i].failed == fuzz_model[i].failed) &&
                       (fuzz_rx[i].next_sequence == fuzz_model[i].next_sequence) &&
                       (fuzz_rx[i].keys.generation == fuzz_model[i].generation) &&
                       !memcmp(fuzz_rx[i].peer_public,
                               fuzz_senders[i].keypair.public_key,
                               KEYEX_PUBLIC_KEY_LEN));
        }
    }
}

/* A record sealed with fields the harness knows (by flow `f`'s key of the
 * generation it names): its fate must be the model's, and a delivered one
 * must hold what was sealed */
static void fuzz_deliver_known(int f, fuzz_record_t *r, const uint8_t *wire_peer,
                               int wire_other)
{
    uint8_t payload[FUZZ_MAX_PAYLOAD];
    uct_crypt_record_in_t rec;
    int expected;

    expected = fuzz_expect(r, wire_other, &fuzz_model[f]);
    fuzz_check(fuzz_receive(r->bytes, r->len, wire_peer, &rec) == expected);
    if (expected == FUZZ_DELIVERED) {
        fuzz_payload(payload, r->payload_len, r->sequence);
        fuzz_check((rec.flow_id == fuzz_senders[f].flow_id) &&
                   (rec.sequence == r->sequence) &&
                   (rec.control == !!(r->flags & CRYPT_RECORD_FLAG_CONTROL)) &&
                   (rec.sealed[0] == r->am_id) &&
                   (rec.payload_len == r->payload_len) &&
                   !memcmp(rec.sealed + CRYPT_RECORD_AM_ID_LEN, payload,
                           r->payload_len));
    }
    fuzz_check_state();
}

/* A record nobody sealed as it is: never delivered, nothing changes */
static void fuzz_deliver_unknown(uint8_t *bytes, size_t len, const uint8_t *wire_peer)
{
    uct_crypt_record_in_t rec;

    fuzz_check(fuzz_receive(bytes, len, wire_peer, &rec) != FUZZ_DELIVERED);
    fuzz_check_state();
}

/* a record like flow `s`'s next but with fields of the input's choosing,
 * sealed with the flow's key of the generation it names */
static void fuzz_forge(fuzz_sender_t *s, fuzz_input_t *in, fuzz_record_t *out)
{
    static const uint8_t types[8] = {
        CRYPT_RECORD_DATA, CRYPT_RECORD_DATA, CRYPT_RECORD_DATA, CRYPT_RECORD_DATA,
        CRYPT_RECORD_DATA, CRYPT_RECORD_HELLO, CRYPT_RECORD_HELLO, 0
    };
    uint8_t what = fuzz_u8(in), type = types[what & 7];
    int8_t delta = (int8_t)fuzz_u8(in);
    uint8_t am_id = fuzz_u8(in);
    size_t len = fuzz_u8(in) % (FUZZ_MAX_PAYLOAD + 1);
    uint16_t flags = (what >> 3) & CRYPT_RECORD_FLAG_CONTROL;
    keyex_traffic_keys_t keys;
    uint64_t sequence;
    int ahead;

    if (type == 0) {
        type = (uint8_t)(3 + fuzz_u8(in)); /* no type of ours (or 0) */
    }
    if (what & 0x10) {
        flags |= (uint16_t)(fuzz_u8(in) << 1) | ((what & 0x80) ? 0x8000 : 0);
    }
    /* an honest HELLO is sequence 0; a forged one may say otherwise */
    sequence = (type == CRYPT_RECORD_HELLO) ? (uint64_t)(delta & 1) :
               (((int64_t)s->next_sequence + (delta % 4) < 0) ? 0 :
                (uint64_t)((int64_t)s->next_sequence + (delta % 4)));
    switch ((what >> 5) & 3) {
    case 0: keys = s->keys; break;
    case 1: keys = s->previous; break;
    default:
        keys = s->keys;
        for (ahead = 0; ahead < ((what >> 5) & 3) - 1; ++ahead) {
            fuzz_check(keyex_update_flow_keys(&keys) == KEYEX_OK);
        }
        break;
    }
    fuzz_seal(s, &keys, type, flags, sequence, am_id, len, out);
    OPENSSL_cleanse(&keys, sizeof(keys));
}

static void fuzz_step(fuzz_input_t *in)
{
    uint8_t op        = fuzz_u8(in);
    int f             = ((op >> 3) & 3) % FUZZ_FLOWS;
    fuzz_sender_t *s  = &fuzz_senders[f];
    int wire_other    = ((op >> 5) & 3) == 3;
    const uint8_t *wire_peer = (((op >> 5) & 3) < 2) ? NULL :
                               wire_other ? fuzz_stranger.public_key :
                               s->keypair.public_key;
    uint8_t raw[FUZZ_RECORD_MAX];
    fuzz_record_t r;
    size_t len, i;
    int changed;

    switch (op & 7) {
    case 1: /* lost on the way */
        fuzz_send_next(s, in, &r);
        break;
    case 2: /* again */
        if (s->num_sent > 0) {
            i = fuzz_u8(in) % ((s->num_sent < FUZZ_HISTORY) ? s->num_sent : FUZZ_HISTORY);
            r = s->history[(s->num_sent - 1 - i) % FUZZ_HISTORY];
            fuzz_deliver_known(f, &r, wire_peer, wire_other);
        }
        break;
    case 3: /* changed on the way: XORed, perhaps cut short */
        fuzz_send_next(s, in, &r);
        len     = r.len - (fuzz_u8(in) % 4 == 0 ? fuzz_u8(in) % (r.len + 1) : 0);
        changed = (len != r.len);
        for (i = 0; (i < len) && (in->size > 0); ++i) {
            uint8_t x = fuzz_u8(in);

            r.bytes[i] ^= x;
            changed    |= (x != 0);
        }
        if (changed) {
            fuzz_deliver_unknown(r.bytes, len, wire_peer);
        } else {
            fuzz_deliver_known(f, &r, wire_peer, wire_other);
        }
        break;
    case 4: /* sealed with the key, fields of the input's choosing */
        fuzz_forge(s, in, &r);
        fuzz_deliver_known(f, &r, wire_peer, wire_other);
        break;
    case 5: /* a stranger's bytes, perhaps naming a live flow and its key */
        len = fuzz_u8(in) % (FUZZ_RECORD_MAX + 1);
        memset(raw, 0, sizeof(raw));
        for (i = 0; (i < len) && (in->size > 0); ++i) {
            raw[i] = fuzz_u8(in);
        }
        if ((op & 0x80) && (len >= CRYPT_RECORD_HDR_LEN + CRYPT_HELLO_EXTRA_LEN)) {
            uint64_t flow_id = htole64(s->flow_id);

            memcpy(raw + offsetof(crypt_record_hdr_t, flow_id), &flow_id, sizeof(flow_id));
            memcpy(raw + CRYPT_RECORD_HDR_LEN, s->keypair.public_key, KEYEX_PUBLIC_KEY_LEN);
        }
        fuzz_deliver_unknown(raw, len, wire_peer);
        break;
    default: /* the next honest record */
        fuzz_send_next(s, in, &r);
        fuzz_deliver_known(f, &r, wire_peer, wire_other);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    int i, steps;

    if (!fuzz_ready) {
        fuzz_init();
    }
    for (i = 0; i < FUZZ_FLOWS; ++i) {
        fuzz_senders[i].keys            = fuzz_senders[i].first;
        fuzz_senders[i].previous        = fuzz_senders[i].first;
        fuzz_senders[i].next_sequence   = 0;
        fuzz_senders[i].sealed_this_key = 0;
        fuzz_senders[i].num_sent        = 0;
        memset(&fuzz_rx[i], 0, sizeof(fuzz_rx[i]));
        memset(&fuzz_model[i], 0, sizeof(fuzz_model[i]));
    }
    for (steps = 0; (steps < FUZZ_MAX_STEPS) && (in.size > 0); ++steps) {
        fuzz_step(&in);
    }
    for (i = 0; i < FUZZ_FLOWS; ++i) {
        if (fuzz_rx[i].present) {
            crypt_aead_key_cleanup(&fuzz_rx[i].aead);
        }
    }
    return 0;
}
