/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The keys of flows: the keys of every flow (a sending half per ep, a
 * receiving half per flow id, found by the HELLO that opens it) from the
 * per-iface X25519 key pair (made in uct_crypt_iface.c), their updates
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

/* `wire_secret`: the exporter of the own wire's connection (NULL over a
 * UCX inner, where it is never used) */
static ucs_status_t uct_crypt_flow_keys(uct_crypt_iface_t *iface,
                                        const uint8_t sender[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t receiver[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t *wire_secret,
                                        uint64_t flow_id,
                                        keyex_purpose_t purpose,
                                        keyex_traffic_keys_t **keys_p,
                                        crypt_aead_key_t *aead)
{
    uint8_t pair_secret[KEYEX_SECRET_LEN];
    keyex_traffic_keys_t *keys;
    keyex_status_t kstatus;

    if ((iface->inner_ops->flags & UCT_CRYPT_INNER_CONN_KEYS) &&
        (wire_secret == NULL)) {
        return UCS_ERR_INVALID_PARAM; /* (never the static keys alone) */
    }
    keys = keyex_secure_alloc(sizeof(*keys));
    if (keys == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    if (iface->inner_ops->flags & UCT_CRYPT_INNER_CONN_KEYS) {
        memcpy(pair_secret, wire_secret, sizeof(pair_secret));
        kstatus = KEYEX_OK;
    } else {
        /* X25519 with the peer's key, salted with the job secret; a
         * low-order peer key is refused here (keyex_x25519) */
        kstatus = keyex_derive_pair_secret(&iface->keypair, peer,
                                           uct_crypt_job_secret, pair_secret);
    }
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
                                 const uint8_t *wire_secret, uint64_t flow_id,
                                 keyex_traffic_keys_t **keys_p)
{
    return uct_crypt_flow_keys(iface, sender, receiver, peer, wire_secret,
                               flow_id, KEYEX_PURPOSE_BULK, keys_p, NULL);
}

/* The record keys of a sending half, from `wire_secret` on the own wire */
ucs_status_t uct_crypt_tx_flow_derive(uct_crypt_iface_t *iface,
                                      uct_crypt_tx_flow_t *tx,
                                      const uint8_t *wire_secret)
{
    uct_crypt_ep_t *ep = ucs_container_of(tx, uct_crypt_ep_t, tx);

    ucs_assert(tx->keys == NULL);
    return uct_crypt_flow_keys(iface, iface->keypair.public_key,
                               ep->peer_public, ep->peer_public, wire_secret,
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
    /* (over a UCX inner the keys come with the flow: none is a failure) */
    if (iface->inner_ops->flags & UCT_CRYPT_INNER_CONN_KEYS) {
        secret = iface->inner_ops->ep_secret(ep->inner);
        if (secret == NULL) {
            return UCS_ERR_NO_RESOURCE; /* the connection is not final */
        }
        if (uct_crypt_tx_flow_derive(iface, tx, secret) == UCS_OK) {
            return UCS_OK;
        }
    }
    uct_crypt_ep_fail_local(ep, "cannot derive the record keys");
    return UCS_ERR_IO_ERROR;
}

ucs_status_t uct_crypt_tx_flow_init(uct_crypt_iface_t *iface,
                                    uct_crypt_tx_flow_t *tx,
                                    const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN])
{
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
    if (iface->inner_ops->flags & UCT_CRYPT_INNER_CONN_KEYS) {
        return UCS_OK; /* keyed once its connection is final */
    }
    status = uct_crypt_flow_keys(iface, iface->keypair.public_key, peer_public,
                                 peer_public, NULL, tx->flow_id,
                                 KEYEX_PURPOSE_RECORD, &tx->keys, &tx->aead);
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

/* ---- receiving flows ---------------------------------------------------- */

/*
 * The flows an iface receives: found by id, grouped by peer key, bounded
 * (issue 29, item 6).
 *
 * A flow ends with its sender: on crypt's own wire with the connection
 * that carries it (uct_crypt_rx_flows_conn_ended), over a UCX inner with
 * the FLOW_END record its ep sends when destroyed (uct_crypt_rx_flow_end).
 * Then its state and keys go; over a UCX inner its id stays behind (16
 * bytes), since its records would open again under keys that the two
 * static keys and the id still make: a replay of its HELLO is refused by
 * that id. (On the own wire every connection has keys of its own: nothing
 * of an ended connection opens again.)
 *
 * A FLOW_END can be lost: the peer's connection may already be gone when
 * its ep is destroyed (a server that closed first, rc and ud pairs). So a
 * flow over a UCX inner also sleeps when this iface's last ep to its peer
 * goes: its keys are wiped and its locked memory freed, its state (the
 * sequence, the key generations, the bulk counters: some 250 bytes) stays,
 * and a record that comes after all wakes it, its keys made again from
 * the static keys, the id and the generations. Nothing is lost by it.
 *
 * Past either bound the oldest flow asleep (of that peer, then of all) is
 * forgotten to make room, its id kept as an ended flow's: its peer has no
 * ep of ours left, and a record it sends on it after all is refused. With
 * none asleep the new flow is refused: a flow awake is never evicted, and
 * only a holder of the job secret can open flows at all (its HELLO must
 * open). Without forgetting, a long-lived server over rc whose clients'
 * FLOW_ENDs were lost would refuse every client after the bound.
 */
void uct_crypt_rx_flows_init(uct_crypt_iface_t *iface,
                             const uct_crypt_rx_limits_t *limits)
{
    kh_init_inplace(uct_crypt_rx_flows, &iface->rx_flows);
    kh_init_inplace(uct_crypt_flow_ids, &iface->ended_flows);
    kh_init_inplace(uct_crypt_peers, &iface->peers);
    ucs_list_head_init(&iface->asleep);
    iface->rx_flows_max      = limits->flows;
    iface->rx_flows_per_peer = limits->flows_per_peer;
}

/* The table's key of a peer: the first 8 bytes of its public key (another
 * key with the same 8 bytes takes some 2^64 X25519 to find, and would only
 * share this bookkeeping, never a key) */
static uint64_t uct_crypt_peer_id(const uint8_t *peer_public)
{
    uint64_t id;

    memcpy(&id, peer_public, sizeof(id));
    return id;
}

static uct_crypt_peer_t *uct_crypt_peer_find(uct_crypt_iface_t *iface,
                                             const uint8_t *peer_public,
                                             int create)
{
    uint64_t id = uct_crypt_peer_id(peer_public);
    uct_crypt_peer_t *peer;
    khiter_t iter;
    int ret;

    iter = kh_get(uct_crypt_peers, &iface->peers, id);
    if (iter != kh_end(&iface->peers)) {
        return kh_value(&iface->peers, iter);
    } else if (!create) {
        return NULL;
    }
    peer = ucs_calloc(1, sizeof(*peer), "crypt peer");
    if (peer == NULL) {
        return NULL;
    }
    iter = kh_put(uct_crypt_peers, &iface->peers, id, &ret);
    if (ret < 0) {
        ucs_free(peer);
        return NULL;
    }
    peer->id = id;
    ucs_list_head_init(&peer->flows);
    kh_value(&iface->peers, iter) = peer;
    return peer;
}

/* a peer with neither eps nor flows is forgotten */
static void uct_crypt_peer_release(uct_crypt_iface_t *iface,
                                   uct_crypt_peer_t *peer)
{
    if ((peer->eps == 0) && (peer->num_flows == 0)) {
        kh_del(uct_crypt_peers, &iface->peers,
               kh_get(uct_crypt_peers, &iface->peers, peer->id));
        ucs_free(peer);
    }
}

ucs_status_t uct_crypt_peer_ep_add(uct_crypt_iface_t *iface,
                                   const uint8_t *peer_public)
{
    uct_crypt_peer_t *peer = uct_crypt_peer_find(iface, peer_public, 1);

    if (peer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ++peer->eps;
    return UCS_OK;
}

/* The record keys of `flow` at its generation (a flow that wakes may have
 * had its keys updated before it slept) */
static ucs_status_t uct_crypt_rx_flow_key(uct_crypt_iface_t *iface,
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

/* `flow` sleeps: its keys are wiped, its state stays (a flow is asleep,
 * and in iface->asleep, exactly while its keys are NULL) */
void uct_crypt_rx_flow_sleep(uct_crypt_iface_t *iface,
                             uct_crypt_rx_flow_t *flow)
{
    if ((flow->keys == NULL) || (flow->wire_conn != 0)) {
        return; /* (the own wire's flows end with their connection) */
    }
    flow->generation = flow->keys->generation;
    crypt_aead_key_cleanup(&flow->aead);
    keyex_secure_free(flow->keys, sizeof(*flow->keys));
    flow->keys = NULL;
    uct_crypt_bulk_rx_flow_cleanup(flow); /* (bulk_generation stays) */
    ucs_list_add_tail(&iface->asleep, &flow->asleep_list);
    UCT_CRYPT_STAT_ADD(flows_slept, 1);
}

ucs_status_t uct_crypt_rx_flow_wake(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow)
{
    crypt_local_failure_set(NULL);
    if (uct_crypt_rx_flow_key(iface, flow) != UCS_OK) {
        ucs_error("crypt: cannot make the keys of a flow from "
                  uct_crypt_log_peer_fmt " again%s",
                  uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                  crypt_local_failure_take());
        return UCS_ERR_NO_RESOURCE;
    }
    ucs_list_del(&flow->asleep_list);
    UCT_CRYPT_STAT_ADD(flows_woken, 1);
    return UCS_OK;
}

/* This iface's last ep to the peer is gone: its flows sleep */
void uct_crypt_peer_ep_remove(uct_crypt_iface_t *iface,
                              const uint8_t *peer_public)
{
    uct_crypt_peer_t *peer = uct_crypt_peer_find(iface, peer_public, 0);
    uct_crypt_rx_flow_t *flow;

    ucs_assert((peer != NULL) && (peer->eps > 0));
    if ((peer == NULL) || (--peer->eps > 0)) {
        return;
    }
    ucs_list_for_each(flow, &peer->flows, peer_list) {
        uct_crypt_rx_flow_sleep(iface, flow);
    }
    uct_crypt_peer_release(iface, peer);
}

void uct_crypt_rx_flow_free(uct_crypt_rx_flow_t *flow)
{
    uct_crypt_bulk_rx_flow_cleanup(flow);
    if (flow->keys != NULL) {
        crypt_aead_key_cleanup(&flow->aead);
        keyex_secure_free(flow->keys, sizeof(*flow->keys));
    }
    ucs_free(flow);
}

static void uct_crypt_rx_flow_remove(uct_crypt_iface_t *iface, khiter_t iter);

/* The flow ends here, its id kept (as at its FLOW_END) so that a replay of
 * its records is refused; 0 where no more ids can be kept */
static int uct_crypt_rx_flow_retire(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow)
{
    khiter_t iter = kh_get(uct_crypt_rx_flows, &iface->rx_flows, flow->flow_id);
    int ret       = -1;

    ucs_assert(iter != kh_end(&iface->rx_flows));
    if (kh_size(&iface->ended_flows) < UCT_CRYPT_ENDED_FLOWS_MAX) {
        kh_put(uct_crypt_flow_ids, &iface->ended_flows, flow->flow_id, &ret);
    }
    if (ret < 0) {
        return 0;
    }
    uct_crypt_rx_flow_remove(iface, iter);
    return 1;
}

/* A flow asleep makes room for a new one: forgotten, id kept. Its peer has
 * no ep of ours left; should it send on it after all, that is refused. */
static void uct_crypt_rx_flow_forget(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow)
{
    if (uct_crypt_rx_flow_retire(iface, flow)) {
        UCT_CRYPT_STAT_ADD(flows_forgotten, 1);
    }
}

/* Take `flow`, whose HELLO just opened, into the iface's flows; refused
 * (UCS_ERR_EXCEEDS_LIMIT, said and counted) past a bound, or without
 * memory for the tables. The caller frees a refused flow. */
ucs_status_t uct_crypt_rx_flow_add(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow)
{
    static uint64_t refused;
    uct_crypt_peer_t *peer = uct_crypt_peer_find(iface, flow->peer_public, 0);
    uct_crypt_rx_flow_t *old;
    khiter_t iter;
    uint64_t n;
    int ret;

    /* room first, from flows asleep: the oldest of that peer, then the
     * oldest of all (the peer entry may go with its last flow) */
    if ((peer != NULL) && (peer->num_flows >= iface->rx_flows_per_peer)) {
        ucs_list_for_each(old, &peer->flows, peer_list) {
            if (old->keys == NULL) {
                uct_crypt_rx_flow_forget(iface, old);
                break;
            }
        }
    }
    if ((kh_size(&iface->rx_flows) >= iface->rx_flows_max) &&
        !ucs_list_is_empty(&iface->asleep)) {
        uct_crypt_rx_flow_forget(iface, ucs_list_head(&iface->asleep,
                                                      uct_crypt_rx_flow_t,
                                                      asleep_list));
    }
    peer = uct_crypt_peer_find(iface, flow->peer_public, 1);
    if (peer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    if ((kh_size(&iface->rx_flows) >= iface->rx_flows_max) ||
        (peer->num_flows >= iface->rx_flows_per_peer)) {
        n = __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
        UCT_CRYPT_STAT_ADD(flows_refused, 1);
        if (uct_crypt_outsider_logged(n)) {
            ucs_error("crypt: refused a new flow from " uct_crypt_log_peer_fmt
                      ": this iface receives %u flows, %u of them from that "
                      "peer (UCX_CRYPT_RX_FLOWS=%u, UCX_CRYPT_RX_FLOWS_PER_PEER"
                      "=%u); %s (%" PRIu64 " refused so far)",
                      uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                      (unsigned)kh_size(&iface->rx_flows), peer->num_flows,
                      iface->rx_flows_max, iface->rx_flows_per_peer,
                      (flow->wire_conn != 0) ?
                      "its connection is closed" :
                      "its sender is told where an ep of ours goes to it, and "
                      "what it sends on the flow is dropped", n);
        }
        uct_crypt_peer_release(iface, peer);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    iter = kh_put(uct_crypt_rx_flows, &iface->rx_flows, flow->flow_id, &ret);
    if (ret < 0) {
        uct_crypt_peer_release(iface, peer);
        return UCS_ERR_NO_MEMORY;
    }
    kh_value(&iface->rx_flows, iter) = flow;
    ucs_list_add_tail(&peer->flows, &flow->peer_list);
    flow->peer = peer;
    ++peer->num_flows;
    return UCS_OK;
}

/* The flow at `iter` is gone: its state and keys are freed */
static void uct_crypt_rx_flow_remove(uct_crypt_iface_t *iface, khiter_t iter)
{
    uct_crypt_rx_flow_t *flow = kh_value(&iface->rx_flows, iter);

    if (flow->keys == NULL) {
        ucs_list_del(&flow->asleep_list);
    }
    ucs_list_del(&flow->peer_list);
    --flow->peer->num_flows;
    uct_crypt_peer_release(iface, flow->peer);
    kh_del(uct_crypt_rx_flows, &iface->rx_flows, iter);
    uct_crypt_rx_flow_free(flow);
}

/* A FLOW_END opened on `flow`: everything its sender sent came before it */
void uct_crypt_rx_flow_end(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow)
{
    if (flow->wire_conn != 0) {
        return; /* (the own wire: the flow ends with its connection) */
    }
    if (uct_crypt_rx_flow_retire(iface, flow)) {
        UCT_CRYPT_STAT_ADD(flows_ended, 1);
        return;
    }
    /* a flow whose id cannot be kept stays, asleep: a replay of its HELLO
     * must not open it again */
    ucs_diag("crypt: flow of " uct_crypt_log_peer_fmt " ended; its state "
             "stays until the iface closes: %u ended flows remembered",
             uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
             (unsigned)kh_size(&iface->ended_flows));
    uct_crypt_rx_flow_sleep(iface, flow);
}

/* Over a UCX inner, `flow`'s HELLO opened and uct_crypt_rx_flow_add
 * refused it (`status`). Its id is kept as an ended flow's: a replay of
 * that HELLO later, when there is room, opens nothing. Its sender is told
 * (FLOW_REFUSED, on our own flow to the same peer key) where this iface
 * has an ep to that peer, so that its ep fails with the reason instead of
 * sending into a flow whose records are dropped; with none, there is no
 * way back. The caller frees the flow. */
void uct_crypt_rx_flow_refuse(uct_crypt_iface_t *iface,
                              const uct_crypt_rx_flow_t *flow,
                              ucs_status_t status)
{
    crypt_flow_refused_t msg;
    int ret;

    if (kh_size(&iface->ended_flows) < UCT_CRYPT_ENDED_FLOWS_MAX) {
        kh_put(uct_crypt_flow_ids, &iface->ended_flows, flow->flow_id, &ret);
    }
    if (uct_crypt_bulk_ep_to(iface, flow->peer_public) == NULL) {
        return;
    }
    memset(&msg, 0, sizeof(msg));
    msg.kind    = CRYPT_CONTROL_FLOW_REFUSED;
    msg.reason  = (status == UCS_ERR_EXCEEDS_LIMIT) ? CRYPT_FLOW_REFUSED_BOUND :
                                                      CRYPT_FLOW_REFUSED_RESOURCE;
    msg.flow_id = htole64(flow->flow_id);
    uct_crypt_bulk_reply(iface, flow->peer_public, flow->flow_id, &msg);
}

/* Did the sender of `flow_id` end it (FLOW_END), or did we refuse it? Its
 * records are refused */
int uct_crypt_rx_flow_was_ended(uct_crypt_iface_t *iface, uint64_t flow_id)
{
    return kh_get(uct_crypt_flow_ids, &iface->ended_flows, flow_id) !=
           kh_end(&iface->ended_flows);
}

/* crypt's own wire: the connection `conn_id` ended, and the flows whose
 * HELLO came on it with it (a flow's records all take its one connection) */
void uct_crypt_rx_flows_conn_ended(uct_crypt_iface_t *iface, uint64_t conn_id)
{
    khiter_t iter;

    for (iter = kh_begin(&iface->rx_flows); iter != kh_end(&iface->rx_flows);
         ++iter) {
        if (kh_exist(&iface->rx_flows, iter) &&
            (kh_value(&iface->rx_flows, iter)->wire_conn == conn_id)) {
            uct_crypt_rx_flow_remove(iface, iter);
        }
    }
}

void uct_crypt_rx_flows_cleanup(uct_crypt_iface_t *iface)
{
    uct_crypt_rx_flow_t *flow;
    uct_crypt_peer_t *peer;

    kh_foreach_value(&iface->rx_flows, flow, uct_crypt_rx_flow_free(flow));
    kh_foreach_value(&iface->peers, peer, ucs_free(peer));
    kh_destroy_inplace(uct_crypt_rx_flows, &iface->rx_flows);
    kh_destroy_inplace(uct_crypt_flow_ids, &iface->ended_flows);
    kh_destroy_inplace(uct_crypt_peers, &iface->peers);
    if (iface->trial_keys != NULL) {
        keyex_secure_free(iface->trial_keys, sizeof(*iface->trial_keys));
        iface->trial_keys = NULL;
    }
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
    unsigned w;

    if (ucs_unlikely(tx->keys == NULL)) {
        /* first use; on the own wire, once the ep's connection is final
         * (the put waits until then, retried from progress) */
        if ((iface->inner_ops->flags & UCT_CRYPT_INNER_CONN_KEYS) &&
            ((secret = iface->inner_ops->ep_secret(ep->inner)) == NULL)) {
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
    if ((keyex_usage_check(tx->segments_this_key, tx->bytes_this_key,
                           length) == KEYEX_USAGE_OK) &&
        ((uct_crypt_rekey_records() == 0) ||
         (tx->segments_this_key < uct_crypt_rekey_records()))) {
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
