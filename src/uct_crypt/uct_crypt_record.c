/*
 * The record layer: seal on the way out, authenticate, sequence-check and
 * open on the way in. Nothing that fails here reaches UCP; the flow is
 * poisoned, the endpoints to that peer are failed through UCT's error path
 * (from progress, never from inside the inner's callback), and the log
 * names the peer and the reason.
 *
 * Replay, reordering and dropping: UCT's reliable transports deliver the
 * AMs of one ep in order, so the receiver accepts exactly the next sequence
 * number of the flow; anything else is an attack or a bug, never a network
 * accident (unlike IPsec over IP, which needs a sliding window, RFC 4303
 * §3.4.3).
 */
#include "uct_crypt.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <ucs/sys/math.h>
#include <endian.h>

/* ---- keys of one flow ----------------------------------------------------- */

static ucs_status_t uct_crypt_flow_keys(uct_crypt_iface_t *iface,
                                        const uint8_t sender[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t receiver[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
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

    /* X25519 with the peer's key, salted with the job secret; a low-order
     * peer key is refused here (keyex_x25519) */
    kstatus = keyex_derive_pair_secret(&iface->keypair, peer,
                                       uct_crypt_job_secret, pair_secret);
    if (kstatus == KEYEX_OK) {
        kstatus = keyex_derive_flow_keys(pair_secret, purpose,
                                         sender, receiver, flow_id,
                                         iface->key_len, keys);
    }
    OPENSSL_cleanse(pair_secret, sizeof(pair_secret));
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
                                 uint64_t flow_id, keyex_traffic_keys_t **keys_p)
{
    return uct_crypt_flow_keys(iface, sender, receiver, peer, flow_id,
                               KEYEX_PURPOSE_BULK, keys_p, NULL);
}

ucs_status_t uct_crypt_tx_flow_init(uct_crypt_iface_t *iface,
                                    uct_crypt_tx_flow_t *tx,
                                    const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN])
{
    memset(tx, 0, sizeof(*tx));
    /* A random flow id: unique among the receiver's flows with overwhelming
     * probability, and unguessable, so a stranger cannot aim a HELLO at a
     * flow that will exist. */
    if (RAND_bytes((uint8_t*)&tx->flow_id, sizeof(tx->flow_id)) != 1) {
        return UCS_ERR_NO_RESOURCE;
    }
    tx->flow_id |= 1; /* flow 0 is never valid */
    return uct_crypt_flow_keys(iface, iface->keypair.public_key, peer_public,
                               peer_public, tx->flow_id, KEYEX_PURPOSE_RECORD,
                               &tx->keys, &tx->aead);
}

void uct_crypt_tx_flow_cleanup(uct_crypt_tx_flow_t *tx)
{
    if (tx->keys != NULL) {
        crypt_aead_key_cleanup(&tx->aead);
        keyex_secure_free(tx->keys, sizeof(*tx->keys));
    }
    memset(tx, 0, sizeof(*tx));
}

size_t uct_crypt_record_header_len(const uct_crypt_tx_flow_t *tx)
{
    return CRYPT_RECORD_HDR_LEN + (tx->hello_done ? 0 : CRYPT_HELLO_EXTRA_LEN);
}

static void uct_crypt_record_aad(crypt_record_aad_t *aad,
                                 const crypt_record_hdr_t *hdr, uint8_t am_id,
                                 size_t payload_len)
{
    memset(aad, 0, sizeof(*aad));
    aad->hdr    = *hdr;
    aad->am_id  = am_id;
    aad->length = htole32((uint32_t)payload_len);
}

/* ---- sending ------------------------------------------------------------- */

ssize_t uct_crypt_record_seal(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                              uint8_t am_id, uint16_t flags, uint8_t *record,
                              size_t payload_len)
{
    size_t hdr_len = uct_crypt_record_header_len(tx);
    crypt_record_hdr_t hdr;
    crypt_record_aad_t aad;
    uint8_t *payload = record + hdr_len;

    hdr.type           = tx->hello_done ? CRYPT_RECORD_DATA : CRYPT_RECORD_HELLO;
    hdr.key_generation = (uint8_t)tx->keys->generation;
    hdr.flags          = htole16(flags);
    hdr.flow_id        = htole64(tx->flow_id);
    hdr.sequence       = htole64(tx->next_sequence);
    memcpy(record, &hdr, sizeof(hdr));
    if (!tx->hello_done) {
        memcpy(record + CRYPT_RECORD_HDR_LEN, iface->keypair.public_key,
               KEYEX_PUBLIC_KEY_LEN);
    }

    uct_crypt_record_aad(&aad, &hdr, am_id, payload_len);
    if (crypt_record_seal(&tx->aead, tx->keys->nonce_prefix, tx->next_sequence,
                          &aad, sizeof(aad), payload, payload_len, payload,
                          payload + payload_len) != CRYPT_AEAD_OK) {
        return UCS_ERR_IO_ERROR;
    }
    return hdr_len + payload_len + CRYPT_AEAD_TAG_LEN;
}

static unsigned long uct_crypt_rekey_records(void)
{
    return uct_crypt_global.rekey_records ? uct_crypt_global.rekey_records :
                                            KEYEX_REKEY_RECORDS;
}

void uct_crypt_record_commit(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                             size_t payload_len)
{
    ++tx->next_sequence;
    tx->hello_done = 1;
    ++tx->records_this_key;
    tx->bytes_this_key += payload_len;
    UCT_CRYPT_STAT_ADD(records_sealed, 1);
    UCT_CRYPT_STAT_ADD(bytes_sealed, payload_len);

    /* Key update before any per-key limit (keyex.h) is reached: the next
     * record goes out under generation + 1, which tells the receiver. */
    if ((tx->records_this_key >= uct_crypt_rekey_records()) ||
        (keyex_usage_check(tx->records_this_key, tx->bytes_this_key, 0) !=
         KEYEX_USAGE_OK)) {
        crypt_aead_key_cleanup(&tx->aead);
        if ((keyex_update_flow_keys(tx->keys) != KEYEX_OK) ||
            (crypt_aead_key_init(&tx->aead, iface->backend, tx->keys->key,
                                 tx->keys->key_len) != CRYPT_AEAD_OK)) {
            /* cannot happen short of memory corruption; sealing under a
             * worn-out key is not an option */
            ucs_fatal("crypt: key update failed");
        }
        tx->records_this_key = 0;
        tx->bytes_this_key   = 0;
        UCT_CRYPT_STAT_ADD(rekeys, 1);
    }
}

/* ---- failing ------------------------------------------------------------- */

static unsigned uct_crypt_fail_eps_progress(void *arg)
{
    uct_crypt_iface_t *iface = arg;
    unsigned count = 0;
    uct_crypt_fail_reason_t reason;
    uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN];
    uint64_t flow_id;
    ucs_status_t status;
    uct_crypt_ep_t *ep;

    iface->fail_pending = 0;
    iface->fail_cb_id   = UCS_CALLBACKQ_ID_NULL;
restart:
    ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->failed == 1) {
            ep->failed = 2; /* reported */
            ++count;
            reason  = ep->fail_reason;
            flow_id = ep->fail_flow_id;
            /* UCP's puts on this ep end with the error, not with a hang */
            uct_crypt_bulk_ep_cancel(ep, UCS_ERR_CONNECTION_RESET);
            memcpy(peer_public, ep->peer_public, sizeof(peer_public));
            status  = uct_iface_handle_ep_err(&iface->super.super,
                                              &ep->super.super,
                                              UCS_ERR_CONNECTION_RESET);
            if (status != UCS_OK) {
                /* Nobody above handles endpoint errors (UCP error mode
                 * "none", Open MPI's default): abort, as UCX's own rc and
                 * cma transports do (uct_base_iface_failure_log_level),
                 * rather than let the job wait forever for the data that
                 * was dropped. */
                ucs_fatal("crypt: endpoint to " uct_crypt_log_peer_fmt
                          " failed (%s) and no error handler took it: "
                          "aborting", uct_crypt_log_peer_arg(peer_public,
                                                             flow_id),
                          uct_crypt_fail_reason_name(reason));
            }
            /* UCP may have destroyed eps from its error handler: walk the
             * list again from its head, never touching `ep` after the call */
            goto restart;
        }
    }
    return count;
}

static void uct_crypt_schedule_fail(uct_crypt_iface_t *iface)
{
    /* Not from here: we are inside the inner transport's receive callback,
     * and UCP's error handler may destroy the inner ep under it. */
    if (!iface->fail_pending) {
        iface->fail_pending = 1;
        uct_worker_progress_register_safe(&iface->super.worker->super,
                                          uct_crypt_fail_eps_progress, iface,
                                          UCS_CALLBACKQ_FLAG_ONESHOT,
                                          &iface->fail_cb_id);
    }
}

ucs_status_t uct_crypt_record_reject(uct_crypt_iface_t *iface,
                                            uct_crypt_rx_flow_t *flow,
                                            const uint8_t *peer_public,
                                            uint64_t flow_id, uint8_t am_id,
                                            uct_crypt_fail_reason_t reason)
{
    static const uint8_t unknown_peer[KEYEX_PUBLIC_KEY_LEN];
    unsigned failed_eps = 0;
    uct_crypt_ep_t *ep;

    UCT_CRYPT_STAT_ADD(failures[reason], 1);
    if (reason == UCT_CRYPT_FAIL_FLOW_FAILED) {
        return UCS_OK; /* already reported once; drop quietly */
    }

    if (flow != NULL) {
        flow->failed = 1;
        peer_public  = flow->peer_public;
    }
    if (peer_public != NULL) {
        ucs_list_for_each(ep, &iface->eps, list) {
            if (ep->peer_known && !ep->failed &&
                !CRYPTO_memcmp(ep->peer_public, peer_public,
                               KEYEX_PUBLIC_KEY_LEN)) {
                ep->failed      = 1;
                ep->fail_reason = reason;
                ep->fail_flow_id = flow_id;
                ++failed_eps;
            }
        }
    }
    ucs_error("crypt: dropped a record from " uct_crypt_log_peer_fmt
              " (am id %u): %s; %u endpoint(s) to that peer failed",
              uct_crypt_log_peer_arg(peer_public ? peer_public : unknown_peer,
                                     flow_id),
              am_id, uct_crypt_fail_reason_name(reason), failed_eps);
    if (failed_eps > 0) {
        uct_crypt_schedule_fail(iface);
    }
    return UCS_OK; /* to the inner: consumed (and discarded) */
}

/* ---- receiving ----------------------------------------------------------- */

static void uct_crypt_rx_flow_free(uct_crypt_rx_flow_t *flow)
{
    uct_crypt_bulk_rx_flow_cleanup(flow);
    crypt_aead_key_cleanup(&flow->aead);
    keyex_secure_free(flow->keys, sizeof(*flow->keys));
    ucs_free(flow);
}

void uct_crypt_rx_flows_cleanup(uct_crypt_iface_t *iface)
{
    uct_crypt_rx_flow_t *flow;

    kh_foreach_value(&iface->rx_flows, flow, uct_crypt_rx_flow_free(flow));
    kh_clear(uct_crypt_rx_flows, &iface->rx_flows);
    if (iface->trial_keys != NULL) {
        keyex_secure_free(iface->trial_keys, sizeof(*iface->trial_keys));
        iface->trial_keys = NULL;
    }
}

static uct_crypt_rx_flow_t *
uct_crypt_rx_flow_create(uct_crypt_iface_t *iface, uint64_t flow_id,
                         const uint8_t sender_public[KEYEX_PUBLIC_KEY_LEN])
{
    uct_crypt_rx_flow_t *flow;

    flow = ucs_calloc(1, sizeof(*flow), "crypt rx flow");
    if (flow == NULL) {
        return NULL;
    }
    flow->flow_id = flow_id;
    memcpy(flow->peer_public, sender_public, KEYEX_PUBLIC_KEY_LEN);
    if (uct_crypt_flow_keys(iface, sender_public, iface->keypair.public_key,
                            sender_public, flow_id, KEYEX_PURPOSE_RECORD,
                            &flow->keys, &flow->aead) != UCS_OK) {
        ucs_free(flow);
        return NULL;
    }
    return flow;
}

/* Open under the flow's keys, or under the next generation's when the
 * sender announces a key update; the update is kept only if it opens. */
static crypt_aead_status_t uct_crypt_rx_open(uct_crypt_iface_t *iface,
                                             uct_crypt_rx_flow_t *flow,
                                             const crypt_record_hdr_t *hdr,
                                             const crypt_record_aad_t *aad,
                                             uint8_t *payload, size_t payload_len)
{
    const uint64_t sequence = le64toh(hdr->sequence);
    crypt_aead_key_t next_aead;
    crypt_aead_status_t status;

    if (hdr->key_generation == (uint8_t)flow->keys->generation) {
        return crypt_record_open(&flow->aead, flow->keys->nonce_prefix,
                                 sequence, aad, sizeof(*aad), payload,
                                 payload_len, payload, payload + payload_len);
    }
    if (hdr->key_generation != (uint8_t)(flow->keys->generation + 1)) {
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
        OPENSSL_cleanse(iface->trial_keys, sizeof(*iface->trial_keys));
        return CRYPT_AEAD_ERR_BACKEND;
    }
    status = crypt_record_open(&next_aead, iface->trial_keys->nonce_prefix,
                               sequence, aad, sizeof(*aad), payload, payload_len,
                               payload, payload + payload_len);
    if (status == CRYPT_AEAD_OK) {
        crypt_aead_key_cleanup(&flow->aead);
        flow->aead   = next_aead;
        *flow->keys  = *iface->trial_keys;
    } else {
        crypt_aead_key_cleanup(&next_aead);
    }
    OPENSSL_cleanse(iface->trial_keys, sizeof(*iface->trial_keys));
    return status;
}

ucs_status_t uct_crypt_record_am_handler(void *arg, void *data, size_t length,
                                         unsigned flags)
{
    uct_crypt_am_ctx_t *ctx  = arg;
    uct_crypt_iface_t *iface = ctx->iface;
    uct_crypt_rx_flow_t *flow = NULL;
    const uint8_t *sender_public = NULL;
    crypt_record_hdr_t hdr;
    crypt_record_aad_t aad;
    uint64_t flow_id, sequence;
    size_t hdr_len, payload_len;
    uint8_t *payload;
    khiter_t iter;
    int ret;

    if (length < CRYPT_RECORD_HDR_LEN + CRYPT_AEAD_TAG_LEN) {
        return uct_crypt_record_reject(iface, NULL, NULL, 0, ctx->am_id,
                                       UCT_CRYPT_FAIL_MALFORMED);
    }
    memcpy(&hdr, data, sizeof(hdr));
    flow_id  = le64toh(hdr.flow_id);
    sequence = le64toh(hdr.sequence);
    iter     = kh_get(uct_crypt_rx_flows, &iface->rx_flows, flow_id);
    if (iter != kh_end(&iface->rx_flows)) {
        flow = kh_value(&iface->rx_flows, iter);
    }

    if (le16toh(hdr.flags) & ~CRYPT_RECORD_FLAG_CONTROL) {
        return uct_crypt_record_reject(iface, flow, NULL, flow_id, ctx->am_id,
                                       UCT_CRYPT_FAIL_MALFORMED);
    }

    if (hdr.type == CRYPT_RECORD_HELLO) {
        hdr_len = CRYPT_RECORD_HDR_LEN + CRYPT_HELLO_EXTRA_LEN;
        if (length < hdr_len + CRYPT_AEAD_TAG_LEN) {
            return uct_crypt_record_reject(iface, flow, NULL, flow_id,
                                           ctx->am_id, UCT_CRYPT_FAIL_MALFORMED);
        }
        sender_public = (const uint8_t*)data + CRYPT_RECORD_HDR_LEN;
        if (flow != NULL) {
            /* a second HELLO for a live flow is a replay of the first */
            return uct_crypt_record_reject(iface, flow, NULL, flow_id,
                                           ctx->am_id, UCT_CRYPT_FAIL_REPLAY);
        }
        if ((sequence != 0) || (hdr.key_generation != 0)) {
            return uct_crypt_record_reject(iface, NULL, sender_public, flow_id,
                                           ctx->am_id, UCT_CRYPT_FAIL_MALFORMED);
        }
        flow = uct_crypt_rx_flow_create(iface, flow_id, sender_public);
        if (flow == NULL) {
            return uct_crypt_record_reject(iface, NULL, sender_public, flow_id,
                                           ctx->am_id, UCT_CRYPT_FAIL_HANDSHAKE);
        }
    } else if (hdr.type == CRYPT_RECORD_DATA) {
        hdr_len = CRYPT_RECORD_HDR_LEN;
        if (flow == NULL) {
            return uct_crypt_record_reject(iface, NULL, NULL, flow_id,
                                           ctx->am_id,
                                           UCT_CRYPT_FAIL_UNKNOWN_FLOW);
        }
        if (flow->failed) {
            return uct_crypt_record_reject(iface, flow, NULL, flow_id,
                                           ctx->am_id,
                                           UCT_CRYPT_FAIL_FLOW_FAILED);
        }
        if (sequence != flow->next_sequence) {
            return uct_crypt_record_reject(iface, flow, NULL, flow_id,
                                           ctx->am_id,
                                           (sequence < flow->next_sequence) ?
                                           UCT_CRYPT_FAIL_REPLAY :
                                           UCT_CRYPT_FAIL_REORDER);
        }
    } else {
        return uct_crypt_record_reject(iface, flow, NULL, flow_id, ctx->am_id,
                                       UCT_CRYPT_FAIL_MALFORMED);
    }

    payload     = (uint8_t*)data + hdr_len;
    payload_len = length - hdr_len - CRYPT_AEAD_TAG_LEN;
    uct_crypt_record_aad(&aad, &hdr, ctx->am_id, payload_len);
    if (uct_crypt_rx_open(iface, flow, &hdr, &aad, payload, payload_len) !=
        CRYPT_AEAD_OK) {
        if (hdr.type == CRYPT_RECORD_HELLO) {
            /* never installed: a forged HELLO leaves no state behind */
            uct_crypt_rx_flow_free(flow);
            return uct_crypt_record_reject(iface, NULL, sender_public, flow_id,
                                           ctx->am_id, UCT_CRYPT_FAIL_AUTH);
        }
        return uct_crypt_record_reject(iface, flow, NULL, flow_id, ctx->am_id,
                                       UCT_CRYPT_FAIL_AUTH);
    }

    if (hdr.type == CRYPT_RECORD_HELLO) {
        iter = kh_put(uct_crypt_rx_flows, &iface->rx_flows, flow_id, &ret);
        if (ret < 0) {
            uct_crypt_rx_flow_free(flow);
            return uct_crypt_record_reject(iface, NULL, sender_public, flow_id,
                                           ctx->am_id, UCT_CRYPT_FAIL_HANDSHAKE);
        }
        kh_value(&iface->rx_flows, iter) = flow;
    }
    ++flow->next_sequence;
    UCT_CRYPT_STAT_ADD(records_opened, 1);
    UCT_CRYPT_STAT_ADD(bytes_opened, payload_len);

    if (le16toh(hdr.flags) & CRYPT_RECORD_FLAG_CONTROL) {
        uct_crypt_bulk_control(iface, flow, ctx->am_id, payload, payload_len);
        return UCS_OK;
    }

    /* UCP may keep the data only by copying it: the buffer is the inner's,
     * and our header sits where UCP's descriptor would go. */
    uct_iface_invoke_am(&iface->super, ctx->am_id, payload, (unsigned)payload_len,
                        flags & ~UCT_CB_PARAM_FLAG_DESC);
    return UCS_OK;
}

/* ---- fault injection (tests) -------------------------------------------- */

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
        [UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT] = "bulk_flip_ciphertext",
        [UCT_CRYPT_FAULT_BULK_FLIP_TAG]   = "bulk_flip_tag",
        [UCT_CRYPT_FAULT_BULK_DROP]       = "bulk_drop",
        [UCT_CRYPT_FAULT_BULK_REORDER]    = "bulk_reorder",
        [UCT_CRYPT_FAULT_BULK_TRUNCATE]   = "bulk_truncate",
        [UCT_CRYPT_FAULT_BULK_MOVE]       = "bulk_move",
        [UCT_CRYPT_FAULT_BULK_SPLICE]     = "bulk_splice"
    };
    int i;

    iface->fault       = UCT_CRYPT_FAULT_NONE;
    iface->fault_after = config->fault_after;
    for (i = 0; i < UCT_CRYPT_FAULT_LAST; ++i) {
        if (!strcmp(config->fault, names[i])) {
            iface->fault = (uct_crypt_fault_t)i;
        }
    }
    if (iface->fault != UCT_CRYPT_FAULT_NONE) {
        ucs_warn("crypt: TESTING: will '%s' outgoing record/segment %lu",
                 config->fault, iface->fault_after);
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

static void uct_crypt_fault_send_raw(uct_crypt_ep_t *ep, uint8_t am_id,
                                     const uint8_t *data, size_t length)
{
    uct_crypt_raw_record_t raw = {data, length};

    (void)uct_ep_am_bcopy(ep->inner, am_id, uct_crypt_pack_raw, &raw, 0);
}

int uct_crypt_fault_apply(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep,
                          uint8_t am_id, uint8_t *record, size_t *length)
{
    size_t hdr_len = CRYPT_RECORD_HDR_LEN;
    uint8_t forged[256];

    if ((((crypt_record_hdr_t*)record)->type == CRYPT_RECORD_HELLO) ||
        (iface->fault >= UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT)) {
        return 0; /* data records of an established flow; bulk: elsewhere */
    }

    if (iface->held_record != NULL) {
        /* reorder: this record goes first, the held one after it */
        uct_crypt_fault_send_raw(ep, am_id, record, *length);
        uct_crypt_fault_send_raw(ep, iface->held_am_id, iface->held_record,
                                 iface->held_length);
        ucs_free(iface->held_record);
        iface->held_record = NULL;
        return 1;
    }

    if (++iface->records_sent != iface->fault_after) {
        return 0;
    }

    switch (iface->fault) {
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
        uct_crypt_fault_send_raw(ep, am_id, record, *length);
        return 0;
    case UCT_CRYPT_FAULT_REORDER:
        iface->held_record = ucs_malloc(*length, "crypt held record");
        if (iface->held_record == NULL) {
            return 0;
        }
        memcpy(iface->held_record, record, *length);
        iface->held_length = *length;
        iface->held_am_id  = am_id;
        return 1;
    case UCT_CRYPT_FAULT_DROP:
        return 1;
    case UCT_CRYPT_FAULT_INJECT:
        /* an attacker's record in the flow's place: right header, random
         * body and tag */
        hdr_len = ucs_min(*length, sizeof(forged));
        memcpy(forged, record, CRYPT_RECORD_HDR_LEN);
        RAND_bytes(forged + CRYPT_RECORD_HDR_LEN, (int)(hdr_len - CRYPT_RECORD_HDR_LEN));
        uct_crypt_fault_send_raw(ep, am_id, forged, hdr_len);
        return 0;
    default:
        return 0;
    }
}
