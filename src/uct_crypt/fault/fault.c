/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TESTING ONLY: the tamper hooks of the tests (UCX_CRYPT_FAULT,
 * UCX_CRYPT_FAULT_AFTER). A process tampers with its own outgoing records
 * or bulk segments, so that the tests can check that its peer detects
 * every kind of forgery. Compiled only into test builds (configure
 * --enable-fault-injection, which `contrib/quickstart.sh check` uses); a
 * release build has neither this code nor its options, as WireGuard keeps
 * its self-tests behind DEBUG.
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk.h"

#include <ucs/sys/math.h>
#include <endian.h>
#include <string.h>

void uct_crypt_fault_init(uct_crypt_iface_t *iface,
                          const uct_crypt_iface_config_t *config)
{
    static const char *names[] = {
        [UCT_CRYPT_FAULT_NONE]            = "none",
        [UCT_CRYPT_FAULT_FLIP_HEADER]     = "flip_header",
        [UCT_CRYPT_FAULT_FLIP_CIPHERTEXT] = "flip_ciphertext",
        [UCT_CRYPT_FAULT_FLIP_TAG]        = "flip_tag",
        [UCT_CRYPT_FAULT_TRUNCATE]        = "truncate",
        [UCT_CRYPT_FAULT_REPLAY]          = "replay",
        [UCT_CRYPT_FAULT_REORDER]         = "reorder",
        [UCT_CRYPT_FAULT_DROP]            = "drop",
        [UCT_CRYPT_FAULT_INJECT]          = "inject",
        [UCT_CRYPT_FAULT_FORGE_HELLO]     = "forge_hello",
        [UCT_CRYPT_FAULT_REPLAY_ENDED]    = "replay_ended",
        [UCT_CRYPT_FAULT_REPLAY_HELLOS]   = "replay_hellos",
        [UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT] = "bulk_flip_ciphertext",
        [UCT_CRYPT_FAULT_BULK_FLIP_TAG]   = "bulk_flip_tag",
        [UCT_CRYPT_FAULT_BULK_DROP]       = "bulk_drop",
        [UCT_CRYPT_FAULT_BULK_REORDER]    = "bulk_reorder",
        [UCT_CRYPT_FAULT_BULK_TRUNCATE]   = "bulk_truncate",
        [UCT_CRYPT_FAULT_BULK_MOVE]       = "bulk_move",
        [UCT_CRYPT_FAULT_BULK_SPLICE]     = "bulk_splice",
        [UCT_CRYPT_FAULT_BULK_FRAME_ALONE] = "bulk_frame_alone",
        [UCT_CRYPT_FAULT_BULK_FRAME_SHORT] = "bulk_frame_short"
    };
    int i;

    uct_crypt_fault_init_none(iface);
    iface->fault.after = config->fault_after;
    for (i = 0; i < UCT_CRYPT_FAULT_LAST; ++i) {
        if (!strcmp(config->fault, names[i])) {
            iface->fault.kind = (uct_crypt_fault_t)i;
        }
    }
    if (iface->fault.kind != UCT_CRYPT_FAULT_NONE) {
        ucs_warn("crypt: TESTING: will '%s' outgoing record/segment %lu",
                 config->fault, iface->fault.after);
    }
}

typedef struct {
    const uint8_t *data;
    size_t        length;
} uct_crypt_raw_record_t;

static size_t uct_crypt_pack_raw(void *dest, void *arg)
{
    uct_crypt_raw_record_t *raw = arg;

    memcpy(dest, raw->data, raw->length);
    return raw->length;
}

ssize_t uct_crypt_fault_send_raw(uct_crypt_ep_t *ep, const uint8_t *data,
                                 size_t length)
{
    uct_crypt_raw_record_t raw = {data, length};

    return uct_ep_am_bcopy(ep->inner, UCT_CRYPT_RECORD_AM_ID, uct_crypt_pack_raw,
                           &raw, 0);
}

int uct_crypt_fault_apply(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep,
                          uint8_t *record, size_t *length)
{
    size_t hdr_len = CRYPT_RECORD_HDR_LEN;
    uint8_t forged[256];

    if ((iface->fault.kind == UCT_CRYPT_FAULT_REPLAY_ENDED) &&
        (((crypt_record_hdr_t*)record)->type == CRYPT_RECORD_HELLO) &&
        (iface->fault.hello_copy == NULL)) {
        /* kept, to come again after the flow's end */
        iface->fault.hello_copy = ucs_malloc(*length, "crypt fault hello");
        if (iface->fault.hello_copy != NULL) {
            memcpy(iface->fault.hello_copy, record, *length);
            iface->fault.hello_length = *length;
        }
        return 0;
    }
    if ((iface->fault.kind == UCT_CRYPT_FAULT_REPLAY_HELLOS) &&
        (((crypt_record_hdr_t*)record)->type == CRYPT_RECORD_HELLO)) {
        /* the copy first; the record itself follows, the same bytes */
        uct_crypt_fault_send_raw(ep, record, *length);
        return 0;
    }
    if ((((crypt_record_hdr_t*)record)->type == CRYPT_RECORD_HELLO) ||
        (iface->fault.kind >= UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT)) {
        return 0; /* data records of an established flow; bulk: elsewhere */
    }

    if (iface->fault.held_record != NULL) {
        /* reorder: this record goes first, the held one after it */
        uct_crypt_fault_send_raw(ep, record, *length);
        uct_crypt_fault_send_raw(ep, iface->fault.held_record,
                                 iface->fault.held_length);
        ucs_free(iface->fault.held_record);
        iface->fault.held_record = NULL;
        return 1;
    }

    if (++iface->fault.records_sent != iface->fault.after) {
        return 0;
    }

    switch (iface->fault.kind) {
    case UCT_CRYPT_FAULT_FLIP_HEADER:
        record[1] ^= 1; /* key generation: authenticated as AAD */
        return 0;
    case UCT_CRYPT_FAULT_FLIP_CIPHERTEXT:
        record[hdr_len + (*length - hdr_len - CRYPT_AEAD_TAG_LEN) / 2] ^= 0x10;
        return 0;
    case UCT_CRYPT_FAULT_FLIP_TAG:
        record[*length - 1] ^= 0x80;
        return 0;
    case UCT_CRYPT_FAULT_TRUNCATE:
        *length -= 1;
        return 0;
    case UCT_CRYPT_FAULT_REPLAY:
        /* the record, then the same record again */
        uct_crypt_fault_send_raw(ep, record, *length);
        return 0;
    case UCT_CRYPT_FAULT_REORDER:
        iface->fault.held_record = ucs_malloc(*length, "crypt held record");
        if (iface->fault.held_record == NULL) {
            return 0;
        }
        memcpy(iface->fault.held_record, record, *length);
        iface->fault.held_length = *length;
        return 1;
    case UCT_CRYPT_FAULT_DROP:
        return 1;
    case UCT_CRYPT_FAULT_INJECT:
        /* an attacker's record in the flow's place: right header, random
         * body and tag */
        hdr_len = ucs_min(*length, sizeof(forged));
        memcpy(forged, record, CRYPT_RECORD_HDR_LEN);
        (void)crypt_random_public(forged + CRYPT_RECORD_HDR_LEN,
                                  hdr_len - CRYPT_RECORD_HDR_LEN);
        uct_crypt_fault_send_raw(ep, forged, hdr_len);
        return 0;
    case UCT_CRYPT_FAULT_FORGE_HELLO: {
        /* what anybody who can reach the inner could send (issue 12's
         * attack): a HELLO of a new flow, sequence 1, naming the public
         * key of this (honest) sender, with a made-up sealed AM id and
         * tag. Before the drop-don't-fail rule it failed every ep to this
         * sender. */
        crypt_record_hdr_t hello = {.type = CRYPT_RECORD_HELLO,
                                    .sequence = htole64(1)};
        (void)crypt_random_public(&hello.flow_id, sizeof(hello.flow_id));
        memcpy(forged, &hello, sizeof(hello));
        memcpy(forged + sizeof(hello), iface->keypair.public_key,
               KEYEX_PUBLIC_KEY_LEN);
        (void)crypt_random_public(forged + sizeof(hello) + KEYEX_PUBLIC_KEY_LEN,
                                  CRYPT_RECORD_AM_ID_LEN + CRYPT_AEAD_TAG_LEN);
        uct_crypt_fault_send_raw(ep, forged, sizeof(hello) + KEYEX_PUBLIC_KEY_LEN +
                                 CRYPT_RECORD_AM_ID_LEN + CRYPT_AEAD_TAG_LEN);
        return 0;
    }
    default:
        return 0;
    }
}

void uct_crypt_fault_flow_ended(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep)
{
    if ((iface->fault.kind != UCT_CRYPT_FAULT_REPLAY_ENDED) ||
        (iface->fault.hello_copy == NULL)) {
        return;
    }
    (void)uct_crypt_fault_send_raw(ep, iface->fault.hello_copy,
                                   iface->fault.hello_length);
    ucs_free(iface->fault.hello_copy);
    iface->fault.hello_copy = NULL;
}

int uct_crypt_bulk_fault_due(uct_crypt_iface_t *iface)
{
    return (iface->fault.kind >= UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT) &&
           (++iface->fault.bulk_segments_sent == iface->fault.after);
}

/* Returns 1 if the announcement must not be sent (dropped). */
int uct_crypt_bulk_fault_announce(uct_crypt_iface_t *iface,
                                  crypt_bulk_segment_t *announce)
{
    switch (iface->fault.kind) {
    case UCT_CRYPT_FAULT_BULK_FLIP_TAG:
        announce->tag[0] ^= 0x01;
        return 0;
    case UCT_CRYPT_FAULT_BULK_DROP:
        return 1;
    case UCT_CRYPT_FAULT_BULK_REORDER:
        announce->index = htole32(le32toh(announce->index) + 1);
        return 0;
    case UCT_CRYPT_FAULT_BULK_TRUNCATE:
        announce->last = !announce->last;
        return 0;
    case UCT_CRYPT_FAULT_BULK_MOVE:
        announce->address = htole64(le64toh(announce->address) + 64);
        return 0;
    case UCT_CRYPT_FAULT_BULK_SPLICE:
        announce->put_id = htole64(le64toh(announce->put_id) + 1);
        return 0;
    default:
        return 0;
    }
}


void uct_crypt_bulk_fault_seal(uct_crypt_iface_t *iface, uint8_t *bounce,
                               size_t length)
{
    if ((iface->fault.kind == UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT) &&
        (length > 0)) {
        bounce[length / 2] ^= 0x10;
    }
}

int uct_crypt_bulk_fault_frame(uct_crypt_iface_t *iface, size_t *frame_len)
{
    if ((iface->fault.kind == UCT_CRYPT_FAULT_BULK_FRAME_SHORT) &&
        (*frame_len > 0)) {
        --*frame_len;
    }
    return iface->fault.kind == UCT_CRYPT_FAULT_BULK_FRAME_ALONE;
}

/* crypt's own wire: the tag travels in the segment's frame */
void uct_crypt_bulk_fault_frame_tag(uct_crypt_iface_t *iface,
                                    uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    if (iface->fault.kind == UCT_CRYPT_FAULT_BULK_FLIP_TAG) {
        tag[0] ^= 0x01;
    }
}

void uct_crypt_fault_init_none(uct_crypt_iface_t *iface)
{
    /* UCS classes are not zero-filled */
    memset(&iface->fault, 0, sizeof(iface->fault));
    iface->fault.kind = UCT_CRYPT_FAULT_NONE;
}

void uct_crypt_fault_cleanup(uct_crypt_iface_t *iface)
{
    ucs_free(iface->fault.held_record);
    iface->fault.held_record = NULL;
    ucs_free(iface->fault.hello_copy);
    iface->fault.hello_copy = NULL;
}

/* The iface's key pair: a fresh one, or the one UCX_CRYPT_FAULT_STATIC_KEY
 * names (the forward-secrecy test plays an attacker who learns it) */
keyex_status_t uct_crypt_fault_keypair(uct_crypt_iface_t *iface,
                                       const uct_crypt_iface_config_t *config)
{
    uint8_t private_key[KEYEX_PRIVATE_KEY_LEN];
    keyex_status_t status;
    unsigned i, byte;

    /* (the data role's config only: the fault options are not in the
     * others', as for uct_crypt_fault_init) */
    if ((config != NULL) && (strlen(config->fault_static_key) > 0)) {
        if (strlen(config->fault_static_key) != 2 * sizeof(private_key)) {
            return KEYEX_ERR_CRYPTO;
        }
        for (i = 0; i < sizeof(private_key); ++i) {
            if (sscanf(config->fault_static_key + 2 * i, "%2x", &byte) != 1) {
                return KEYEX_ERR_CRYPTO;
            }
            private_key[i] = (uint8_t)byte;
        }
        ucs_warn("crypt: TESTING: a known iface key (UCX_CRYPT_FAULT_STATIC_KEY)");
        status = keyex_keypair_from_private(&iface->keypair, private_key);
        crypt_wipe(private_key, sizeof(private_key));
        return status;
    }
    return keyex_keypair_generate(&iface->keypair);
}
