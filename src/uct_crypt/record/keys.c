/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The keys of flows: the keys of every flow (a sending half per ep, a
 * receiving half per flow id, found by the HELLO that opens it) from the
 * per-iface X25519 key pair (made at iface init), their updates
 * before the per-key usage limits of src/keyex/keyex.h, and their wiping.
 * The handshakes that prove a connection live in their rooms: the wire's
 * Noise_IKpsk2 in wire/wire_handshake.c, the connection manager's
 * Noise_NNpsk0 in cm/cm_handshake.c. Keys live in secure memory (keyex_secure_alloc) and are wiped
 * with crypt_wipe when they are replaced or freed.
 *
 * Key derivation (src/keyex/schedule.c): a pair secret, then HKDF-SHA256
 * (RFC 5869) bound to the purpose (record or bulk), both public keys and
 * the flow id. Over a UCX inner the pair secret is X25519 (RFC 7748)
 * between the two iface keys, salted with the job secret: the first record
 * goes without a round trip, so its keys can only come from long-lived
 * keys (as TLS 1.3's 0-RTT data, RFC 8446 §2.3, has no forward secrecy).
 * Over crypt's own wire it is the exporter secret of the Noise handshake
 * of the connection that carries the flow (keyex_noise_transport_t): it
 * mixes both ephemerals, so once that connection is gone nobody, not even
 * with the iface key and the job secret, re-derives its flows' keys. A
 * sending half there is keyed when its connection is final, and sends
 * nothing before (uct_crypt_tx_flow_ready).
 * A key update is HKDF over the current key (keyex_update_flow_keys); the
 * record header's 8-bit generation tells the receiver, which tries the next
 * generation only when the header announces it and keeps it only if the
 * record opens (uct_crypt_rx_flow_open).
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk.h"
#include "uct_crypt/record/record_input.h"

#include <string.h>

/* ---- keys of one flow ----------------------------------------------------- */

/* `conn_secret`: the secret of the connection that carries the flow (NULL
 * where the inner has none: inner_ops->flow_secret) */
static ucs_status_t uct_crypt_flow_keys(uct_crypt_iface_t *iface,
                                        const uint8_t sender[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t receiver[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t *conn_secret,
                                        uint64_t flow_id,
                                        keyex_purpose_t purpose,
                                        keyex_traffic_keys_t **keys_p,
                                        crypt_aead_key_t *aead)
{
    uint8_t pair_secret[KEYEX_SECRET_LEN];
    keyex_traffic_keys_t *keys;
    keyex_status_t kstatus;

    keys = keyex_secure_alloc(sizeof(*keys));
    if (keys == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    kstatus = iface->inner_ops->flow_secret(&iface->keypair, peer, conn_secret,
                                            pair_secret);
    if (kstatus == KEYEX_OK) {
        kstatus = keyex_derive_flow_keys(pair_secret, purpose,
                                         sender, receiver, flow_id,
                                         iface->key_len, keys);
    }
    crypt_wipe(pair_secret, sizeof(pair_secret));
    if ((kstatus != KEYEX_OK) ||
        ((aead != NULL) &&
         (crypt_aead_key_init(aead, iface->backend, keys->key, keys->key_len) !=
          CRYPT_AEAD_OK))) {
        keyex_secure_free(keys, sizeof(*keys));
        return UCS_ERR_INVALID_PARAM;
    }
    *keys_p = keys;
    return UCS_OK;
}

/* The bulk keys of a flow, on first use (the bulk engine) */
ucs_status_t uct_crypt_bulk_keys(uct_crypt_iface_t *iface,
                                 const uint8_t sender[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t receiver[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t *conn_secret, uint64_t flow_id,
                                 keyex_traffic_keys_t **keys_p)
{
    return uct_crypt_flow_keys(iface, sender, receiver, peer, conn_secret,
                               flow_id, KEYEX_PURPOSE_BULK, keys_p, NULL);
}

/* The record keys of a sending half whose inner ep is ready, from its
 * connection's `secret` (NULL: from the static keys; inner_ops->ep_ready) */
static ucs_status_t uct_crypt_tx_flow_derive(uct_crypt_iface_t *iface,
                                             uct_crypt_tx_flow_t *tx,
                                             const uint8_t *secret)
{
    uct_crypt_ep_t *ep = ucs_container_of(tx, uct_crypt_ep_t, tx);

    ucs_assert(tx->keys == NULL);
    return uct_crypt_flow_keys(iface, iface->keypair.public_key,
                               ep->peer_public, ep->peer_public, secret,
                               tx->flow_id, KEYEX_PURPOSE_RECORD, &tx->keys,
                               &tx->aead);
}

ucs_status_t uct_crypt_tx_flow_ready(uct_crypt_iface_t *iface,
                                     uct_crypt_tx_flow_t *tx)
{
    uct_crypt_ep_t *ep = ucs_container_of(tx, uct_crypt_ep_t, tx);
    const uint8_t *secret;

    if (ucs_likely(tx->keys != NULL)) {
        return UCS_OK;
    }
    if (!iface->inner_ops->ep_ready(ep->inner, &secret)) {
        return UCS_ERR_NO_RESOURCE; /* the connection is not final */
    }
    if (uct_crypt_tx_flow_derive(iface, tx, secret) == UCS_OK) {
        return UCS_OK;
    }
    uct_crypt_ep_fail_local(ep, "cannot derive the record keys");
    return UCS_ERR_IO_ERROR;
}

ucs_status_t uct_crypt_tx_flow_init(uct_crypt_iface_t *iface,
                                    uct_crypt_tx_flow_t *tx,
                                    const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN])
{
    uct_crypt_ep_t *ep = ucs_container_of(tx, uct_crypt_ep_t, tx);
    const uint8_t *secret;
    ucs_status_t status;

    memset(tx, 0, sizeof(*tx));
    /* A random flow id: unique among the receiver's flows with overwhelming
     * probability, and unguessable, so a stranger cannot aim a HELLO at a
     * flow that will exist. */
    if (!crypt_random_public(&tx->flow_id, sizeof(tx->flow_id))) {
        ucs_error("crypt: cannot open a flow to peer %02x%02x%02x%02x: no flow "
                  "id%s", peer_public[0], peer_public[1], peer_public[2],
                  peer_public[3], crypt_local_failure_take());
        return UCS_ERR_NO_RESOURCE;
    }
    tx->flow_id |= 1; /* flow 0 is never valid */
    if (!iface->inner_ops->ep_ready(ep->inner, &secret) || (secret != NULL)) {
        /* keyed from its connection's secret at its first send
         * (uct_crypt_tx_flow_ready): an ep UCP never sends on costs none */
        return UCS_OK;
    }
    status = uct_crypt_tx_flow_derive(iface, tx, NULL);
    if (status != UCS_OK) {
        ucs_error("crypt: cannot open a flow to peer %02x%02x%02x%02x: cannot "
                  "derive its keys%s", peer_public[0], peer_public[1],
                  peer_public[2], peer_public[3], crypt_local_failure_take());
    }
    return status;
}

void uct_crypt_tx_flow_cleanup(uct_crypt_tx_flow_t *tx)
{
    if (tx->keys != NULL) {
        crypt_aead_key_cleanup(&tx->aead);
        keyex_secure_free(tx->keys, sizeof(*tx->keys));
    }
    memset(tx, 0, sizeof(*tx));
}

static unsigned long uct_crypt_records_per_key(void)
{
    return uct_crypt_rekey_records() ? uct_crypt_rekey_records() :
                                       KEYEX_REKEY_RECORDS;
}

/* After a record left: update the flow's key before any per-key limit
 * (keyex.h) is reached; the next record goes out under generation + 1,
 * which tells the receiver. */
void uct_crypt_tx_flow_rekey_check(uct_crypt_iface_t *iface,
                                   uct_crypt_tx_flow_t *tx)
{
    if ((tx->records_this_key < uct_crypt_records_per_key()) &&
        (keyex_usage_check(tx->records_this_key, tx->bytes_this_key, 0) ==
         KEYEX_USAGE_OK)) {
        return;
    }
    crypt_aead_key_cleanup(&tx->aead);
    if ((keyex_update_flow_keys(tx->keys) != KEYEX_OK) ||
        (crypt_aead_key_init(&tx->aead, iface->backend, tx->keys->key,
                             tx->keys->key_len) != CRYPT_AEAD_OK)) {
        /* sealing under a worn-out key is not an option: the ep ends (it
         * seals nothing more: its key object is gone) */
        uct_crypt_ep_fail_local(ucs_container_of(tx, uct_crypt_ep_t, tx),
                                "the record key update failed");
        return;
    }
    tx->records_this_key = 0;
    tx->bytes_this_key   = 0;
    UCT_CRYPT_STAT_ADD(rekeys, 1);
}

/* ---- receiving flows' keys (their lifecycle: flows.c) -------------------- */

/* The record keys of `flow` at its generation (a flow that wakes may have
 * had its keys updated before it slept) */
ucs_status_t uct_crypt_rx_flow_key(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow)
{
    uint32_t i;

    /* (on the own wire: the connection this HELLO came on) */
    if (uct_crypt_flow_keys(iface, flow->peer_public, iface->keypair.public_key,
                            flow->peer_public,
                            iface->inner_ops->rx_secret(iface->inner),
                            flow->flow_id, KEYEX_PURPOSE_RECORD, &flow->keys,
                            NULL) != UCS_OK) {
        return UCS_ERR_NO_RESOURCE;
    }
    for (i = 0; i < flow->generation; ++i) {
        if (keyex_update_flow_keys(flow->keys) != KEYEX_OK) {
            goto err;
        }
    }
    if (crypt_aead_key_init(&flow->aead, iface->backend, flow->keys->key,
                            flow->keys->key_len) != CRYPT_AEAD_OK) {
        goto err;
    }
    return UCS_OK;

err:
    keyex_secure_free(flow->keys, sizeof(*flow->keys));
    flow->keys = NULL;
    return UCS_ERR_NO_RESOURCE;
}

uct_crypt_rx_flow_t *
uct_crypt_rx_flow_create(uct_crypt_iface_t *iface, uint64_t flow_id,
                         const uint8_t sender_public[KEYEX_PUBLIC_KEY_LEN])
{
    uct_crypt_rx_flow_t *flow;

    flow = ucs_calloc(1, sizeof(*flow), "crypt rx flow");
    if (flow == NULL) {
        return NULL;
    }
    flow->flow_id = flow_id;
    flow->iface   = iface;
    memcpy(flow->peer_public, sender_public, KEYEX_PUBLIC_KEY_LEN);
    if (uct_crypt_rx_flow_key(iface, flow) != UCS_OK) {
        ucs_free(flow);
        return NULL;
    }
    return flow;
}

/* Open under the flow's keys, or under the next generation's when the
 * sender announces a key update; the update is kept only if it opens. */
crypt_aead_status_t uct_crypt_rx_flow_open(uct_crypt_iface_t *iface,
                                           uct_crypt_rx_flow_t *flow,
                                           uct_crypt_record_in_t *rec)
{
    crypt_aead_key_t next_aead;
    crypt_aead_status_t status;

    switch (uct_crypt_record_key_choice(rec, flow->keys->generation)) {
    case UCT_CRYPT_RECORD_KEY_CURRENT:
        return uct_crypt_record_open(&flow->aead, flow->keys->nonce_prefix, rec);
    case UCT_CRYPT_RECORD_KEY_NEXT:
        break;
    default:
        return CRYPT_AEAD_ERR_AUTH;
    }

    if (iface->trial_keys == NULL) {
        iface->trial_keys = keyex_secure_alloc(sizeof(*iface->trial_keys));
        if (iface->trial_keys == NULL) {
            return CRYPT_AEAD_ERR_BACKEND;
        }
    }
    *iface->trial_keys = *flow->keys;
    if ((keyex_update_flow_keys(iface->trial_keys) != KEYEX_OK) ||
        (crypt_aead_key_init(&next_aead, iface->backend, iface->trial_keys->key,
                             iface->trial_keys->key_len) != CRYPT_AEAD_OK)) {
        crypt_wipe(iface->trial_keys, sizeof(*iface->trial_keys));
        return CRYPT_AEAD_ERR_BACKEND;
    }
    status = uct_crypt_record_open(&next_aead, iface->trial_keys->nonce_prefix,
                                   rec);
    if (status == CRYPT_AEAD_OK) {
        crypt_aead_key_cleanup(&flow->aead);
        flow->aead   = next_aead;
        *flow->keys  = *iface->trial_keys;
    } else {
        crypt_aead_key_cleanup(&next_aead);
    }
    crypt_wipe(iface->trial_keys, sizeof(*iface->trial_keys));
    return status;
}

/* ---- bulk keys ------------------------------------------------------------ */

/* The bulk key of a received flow: derived on first use, or updated to
 * the next generation. */
ucs_status_t uct_crypt_bulk_rx_key(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow, int update)
{
    uint32_t i;

    if (!update) {
        /* first use, or after the flow slept: at the generation it had */
        if (uct_crypt_bulk_keys(iface, flow->peer_public,
                                iface->keypair.public_key, flow->peer_public,
                                iface->inner_ops->rx_secret(iface->inner),
                                flow->flow_id, &flow->bulk_keys) != UCS_OK) {
            return UCS_ERR_INVALID_PARAM;
        }
        for (i = 0; i < flow->bulk_generation; ++i) {
            if (keyex_update_flow_keys(flow->bulk_keys) != KEYEX_OK) {
                goto err_free;
            }
        }
    } else {
        /* (the workers' keys are of the old generation: made again) */
        uct_crypt_bulk_rx_reap(iface, 1);
        crypt_aead_key_cleanup(&flow->bulk_aead);
        for (i = 0; i < flow->bulk_workers; ++i) {
            crypt_aead_key_cleanup(&flow->bulk_aead_workers[i]);
        }
        if (keyex_update_flow_keys(flow->bulk_keys) != KEYEX_OK) {
            goto err_free;
        }
        flow->bulk_generation = flow->bulk_keys->generation;
    }
    if (crypt_aead_key_init(&flow->bulk_aead, iface->backend,
                            flow->bulk_keys->key,
                            flow->bulk_keys->key_len) == CRYPT_AEAD_OK) {
        return UCS_OK;
    }

err_free:
    /* (no aead context is left: none was made, or it was cleaned up) */
    keyex_secure_free(flow->bulk_keys, sizeof(*flow->bulk_keys));
    flow->bulk_keys = NULL;
    return UCS_ERR_INVALID_PARAM;
}

/* Bulk key update between puts, before the bulk key reaches its limits
 * (keyex.h); the SEGMENT records carry the generation, so the target
 * follows. Only when no segment is in flight: a pool worker may hold the
 * key. Returns 1 when `length` more bytes may be sealed under the key. */
int uct_crypt_bulk_tx_key_ready(uct_crypt_bulk_tx_t *tx, size_t length)
{
    uct_crypt_iface_t *iface = tx->bulk->iface;
    uct_crypt_ep_t *ep       = tx->ep;
    const uint8_t *secret    = NULL;
    unsigned long rekey;
    unsigned w;

    if (ucs_unlikely(tx->keys == NULL)) {
        /* first use; on the own wire, once the ep's connection is final
         * (the put waits until then, retried from progress) */
        if (!iface->inner_ops->ep_ready(ep->inner, &secret)) {
            return 0;
        }
        if (uct_crypt_bulk_keys(iface, iface->keypair.public_key,
                                ep->peer_public, ep->peer_public, secret,
                                ep->tx.flow_id, &tx->keys) != UCS_OK) {
            uct_crypt_ep_fail_local(ep, "cannot derive the bulk keys");
            return 0;
        }
    }

    /* UCX_CRYPT_REKEY_RECORDS, when set, counts bulk segments too (tests) */
    rekey = uct_crypt_rekey_records();
    if ((keyex_usage_check(tx->segments_this_key, tx->bytes_this_key,
                           length) == KEYEX_USAGE_OK) &&
        ((rekey == 0) || (tx->segments_this_key < rekey))) {
        return 1;
    }
    if (!ucs_list_is_empty(&tx->segments)) {
        return 0; /* drain first */
    }
    for (w = 0; w <= CRYPT_POOL_MAX_THREADS; ++w) {
        crypt_aead_key_cleanup(&tx->aead[w]);
    }
    if (keyex_update_flow_keys(tx->keys) != KEYEX_OK) {
        uct_crypt_ep_fail_local(tx->ep, "the bulk key update failed");
        return 0;
    }
    tx->segments_this_key = 0;
    tx->bytes_this_key    = 0;
    UCT_CRYPT_STAT_ADD(bulk_rekeys, 1);
    return 1;
}

/* The sending half's bulk keys, wiped (the ep is going away) */
void uct_crypt_bulk_tx_keys_cleanup(uct_crypt_bulk_tx_t *tx)
{
    unsigned w;

    for (w = 0; w <= CRYPT_POOL_MAX_THREADS; ++w) {
        crypt_aead_key_cleanup(&tx->aead[w]);
    }
    keyex_secure_free(tx->keys, sizeof(*tx->keys));
    tx->keys = NULL;
}

void uct_crypt_bulk_rx_flow_cleanup(uct_crypt_rx_flow_t *flow)
{
    unsigned w;

    if (flow->iface != NULL) {
        /* no worker may hold the keys, nor write into a destination, once
         * the flow sleeps or goes */
        uct_crypt_bulk_rx_reap(flow->iface, 1);
    }
    for (w = 0; w < flow->bulk_workers; ++w) {
        crypt_aead_key_cleanup(&flow->bulk_aead_workers[w]);
    }
    ucs_free(flow->bulk_aead_workers);
    flow->bulk_aead_workers = NULL;
    flow->bulk_workers      = 0;
    if (flow->bulk_keys != NULL) {
        crypt_aead_key_cleanup(&flow->bulk_aead);
        keyex_secure_free(flow->bulk_keys, sizeof(*flow->bulk_keys));
        flow->bulk_keys = NULL;
    }
}
