/* SPDX-License-Identifier: BSD-3-Clause */
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
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk.h"
#include "uct_crypt/record/record_input.h"

#include <ucs/sys/math.h>
#include <ucs/sys/string.h>
#include <endian.h>

_Static_assert(UCT_CRYPT_RECORD_AM_ID_LIMIT == UCT_AM_ID_MAX, "UCP's AM ids");

/* what goes before UCP's payload: the cleartext header, and the AM id,
 * which is the first byte of the sealed part */
size_t uct_crypt_record_header_len(const uct_crypt_tx_flow_t *tx)
{
    return CRYPT_RECORD_HDR_LEN + (tx->hello_done ? 0 : CRYPT_HELLO_EXTRA_LEN) +
           CRYPT_RECORD_AM_ID_LEN;
}

/* ---- sending ------------------------------------------------------------- */

/* Seal the record at `record` in place under the flow's current keys;
 * `hdr_len` counts the AM id (uct_crypt_record_header_len) */
static int uct_crypt_tx_seal(uct_crypt_tx_flow_t *tx, uint8_t *record,
                             size_t hdr_len, size_t payload_len)
{
    return uct_crypt_record_seal_in_place(&tx->aead, tx->keys->nonce_prefix,
                                          tx->keys->generation, record,
                                          hdr_len - CRYPT_RECORD_AM_ID_LEN,
                                          payload_len);
}

ssize_t uct_crypt_record_seal(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                              uint8_t am_id, uint16_t flags, uint8_t *record,
                              size_t payload_len)
{
    size_t hdr_len   = uct_crypt_record_header_len(tx);
    uint8_t *payload = record + hdr_len;
    uint8_t *sealed  = payload - CRYPT_RECORD_AM_ID_LEN;
    const uint8_t *hello_key;
    crypt_record_hdr_t hdr;

    ucs_assert(payload_len <= UINT32_MAX);
    ucs_assert(!(flags & ~CRYPT_RECORD_FLAG_CONTROL));
    ucs_assert((am_id < UCT_AM_ID_MAX) || (flags & CRYPT_RECORD_FLAG_CONTROL));
    /* UCX_LOG_LEVEL=trace_data: UCP's own dump of what it sends (the
     * plaintext headers, before they are sealed), or crypt's control kind */
    if (flags & CRYPT_RECORD_FLAG_CONTROL) {
        ucs_trace_data("crypt: TX control kind %u len %zu flow 0x%016" PRIx64
                       " seq %" PRIu64, payload[0], payload_len, tx->flow_id,
                       tx->next_sequence);
    } else {
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, am_id,
                           payload, payload_len, "crypt: TX %s flow 0x%016"
                           PRIx64 " seq %" PRIu64, tx->hello_done ? "DATA" :
                           "HELLO", tx->flow_id, tx->next_sequence);
    }

    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = tx->hello_done ? CRYPT_RECORD_DATA : CRYPT_RECORD_HELLO;
    hdr.flags    = htole16(flags);
    hdr.flow_id  = htole64(tx->flow_id);
    hdr.sequence = htole64(tx->next_sequence);
    memcpy(record, &hdr, sizeof(hdr));
    if (!tx->hello_done) {
        /* (where the connection proved our key: zeros, not it in clear) */
        hello_key = iface->inner_ops->hello_key(&iface->keypair);
        if (hello_key != NULL) {
            memcpy(record + CRYPT_RECORD_HDR_LEN, hello_key, KEYEX_PUBLIC_KEY_LEN);
        } else {
            memset(record + CRYPT_RECORD_HDR_LEN, 0, KEYEX_PUBLIC_KEY_LEN);
        }
    }
    /* UCP's AM id goes inside the ciphertext: the inner carries every
     * record on one AM id, and the wire does not tell UCP's protocols
     * (eager, rendezvous, wireup) apart by a cleartext id */
    sealed[0] = (flags & CRYPT_RECORD_FLAG_CONTROL) ? 0 : am_id;

    /* fail closed: a sending half without keys seals nothing, and nothing
     * unsealed is handed on (the senders asked uct_crypt_tx_flow_ready) */
    if ((tx->keys == NULL) || !uct_crypt_tx_seal(tx, record, hdr_len, payload_len)) {
        return UCS_ERR_IO_ERROR;
    }
    return hdr_len + payload_len + CRYPT_AEAD_TAG_LEN;
}

/* A record under the flow's keys: count it towards their limits, which a
 * key update resets before they are reached */
static void uct_crypt_record_sealed(uct_crypt_iface_t *iface,
                                    uct_crypt_tx_flow_t *tx, size_t payload_len)
{
    ++tx->records_this_key;
    tx->bytes_this_key += payload_len;
    UCT_CRYPT_STAT_ADD(records_sealed, 1);
    UCT_CRYPT_STAT_ADD(bytes_sealed, payload_len);
    uct_crypt_tx_flow_rekey_check(iface, tx);
}

void uct_crypt_record_commit(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                             size_t payload_len)
{
    /* (every record is sealed: uct_crypt_tx_flow_ready came first) */
    ucs_assert(tx->keys != NULL);
    ++tx->next_sequence;
    tx->hello_done = 1;
    uct_crypt_record_sealed(iface, tx, payload_len);
}

/* ---- failing ------------------------------------------------------------- */

static unsigned uct_crypt_fail_eps_progress(void *arg)
{
    uct_crypt_iface_t *iface = arg;
    unsigned count = 0;
    uct_crypt_fail_reason_t reason;
    uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN];
    char detail[sizeof(((uct_crypt_ep_t*)NULL)->fail_detail)];
    uint64_t flow_id;
    ucs_status_t status;
    uct_crypt_ep_t *ep;

    iface->fail_pending = 0;
    iface->fail_cb_id   = UCS_CALLBACKQ_ID_NULL;
    /* nothing is opened into a buffer once UCP hears of a failure: it
     * may give the buffer back */
    uct_crypt_bulk_rx_reap(iface, 1);
restart:
    ucs_list_for_each(ep, &iface->eps, list) {
        ucs_assert(ep->failed <= UCT_CRYPT_EP_FAIL_REPORTED);
        if (ep->failed == UCT_CRYPT_EP_FAILED) {
            ep->failed = UCT_CRYPT_EP_FAIL_REPORTED;
            ++count;
            reason  = ep->fail_reason;
            flow_id = ep->fail_flow_id;
            /* UCP's puts on this ep end with the error, not with a hang */
            uct_crypt_bulk_ep_cancel(ep, UCS_ERR_CONNECTION_RESET);
            memcpy(peer_public, ep->peer_public, sizeof(peer_public));
            memcpy(detail, ep->fail_detail, sizeof(detail));
            /* a lost connection is UCS_ERR_ENDPOINT_TIMEOUT, as UCX's tcp
             * reports it (tcp_ep.c, uct_tcp_ep_handle_disconnected) and as
             * UCP then fails every later send on the ep: the application
             * sees one status (UCX's gtest test_ucp_peer_failure checks
             * it). A record that failed its checks is a reset. */
            status  = uct_iface_handle_ep_err(&iface->super.super,
                                              &ep->super.super,
                                              (reason == UCT_CRYPT_FAIL_CONNECTION) ?
                                              UCS_ERR_ENDPOINT_TIMEOUT :
                                              UCS_ERR_CONNECTION_RESET);
            uct_crypt_ep_failure_told(status, peer_public, flow_id, reason,
                                      detail);
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

/* `ep` fails with `reason`; UCP hears it from progress */
static void uct_crypt_ep_mark_failed(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep,
                                     uct_crypt_fail_reason_t reason,
                                     uint64_t flow_id, const char *detail)
{
    ep->failed       = UCT_CRYPT_EP_FAILED;
    ep->fail_reason  = reason;
    ep->fail_flow_id = flow_id;
    ucs_strncpy_zero(ep->fail_detail, detail, sizeof(ep->fail_detail));
    uct_crypt_schedule_fail(iface);
}

/* This side cannot go on with `ep` (out of memory, a key update or a seal
 * failed): the ep fails through UCT's error path, like one whose peer sent
 * a forged record, never the process (nothing on the data path aborts). */
void uct_crypt_ep_fail_local(uct_crypt_ep_t *ep, const char *what)
{
    uct_crypt_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                              uct_crypt_iface_t);

    UCT_CRYPT_STAT_ADD(failures[UCT_CRYPT_FAIL_NO_RESOURCE], 1);
    ucs_error("crypt: endpoint to " uct_crypt_log_peer_fmt " failed: %s%s",
              uct_crypt_log_peer_arg(ep->peer_public, ep->tx.flow_id), what,
              crypt_local_failure_take());
    if (ep->failed == UCT_CRYPT_EP_OK) {
        uct_crypt_ep_mark_failed(iface, ep, UCT_CRYPT_FAIL_NO_RESOURCE,
                                 ep->tx.flow_id, "");
    }
}

/* `flow`'s peer refused a flow of ours (FLOW_REFUSED, authenticated and in
 * sequence): the ep sending on it fails with the reason. Only the peer
 * that flow goes to can refuse it; one that names a flow of ours to
 * another peer breaks the format. */
void uct_crypt_ep_flow_refused(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow,
                               const crypt_flow_refused_t *msg)
{
    uint64_t flow_id   = le64toh(msg->flow_id);
    const char *detail = (msg->reason == CRYPT_FLOW_REFUSED_BOUND) ?
                         "the peer refused the flow: it receives as many as "
                         "it may (UCX_CRYPT_RX_FLOWS, "
                         "UCX_CRYPT_RX_FLOWS_PER_PEER there)" :
                         "the peer could not take the flow (out of memory "
                         "there: its log says why)";
    uct_crypt_ep_t *ep;

    switch (uct_crypt_ep_of_tx_flow(iface, flow, flow_id, &ep)) {
    case UCS_OK:
        if (ep->failed == UCT_CRYPT_EP_OK) {
            UCT_CRYPT_STAT_ADD(failures[UCT_CRYPT_FAIL_HANDSHAKE], 1);
            ucs_error("crypt: endpoint to " uct_crypt_log_peer_fmt " failed: %s",
                      uct_crypt_log_peer_arg(ep->peer_public, flow_id), detail);
            uct_crypt_ep_mark_failed(iface, ep, UCT_CRYPT_FAIL_HANDSHAKE,
                                     flow_id, detail);
        }
        break;
    case UCS_ERR_INVALID_PARAM:
        uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
        break;
    default:
        break; /* (an ep of ours that is gone) */
    }
}

/* Our ep that sends on `flow_id`, for a control record about it (ACK,
 * FLOW_REFUSED) that came on `flow`: UCS_OK and *ep_p;
 * UCS_ERR_NO_ELEM where no ep of ours sends on it any more;
 * UCS_ERR_INVALID_PARAM where it goes to another peer than `flow`'s: only
 * the peer a flow goes to may speak of it. */
ucs_status_t uct_crypt_ep_of_tx_flow(uct_crypt_iface_t *iface,
                                     const uct_crypt_rx_flow_t *flow,
                                     uint64_t flow_id, uct_crypt_ep_t **ep_p)
{
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->tx.flow_id != flow_id) {
            continue;
        }
        if (crypt_memcmp_ct(ep->peer_public, flow->peer_public,
                            KEYEX_PUBLIC_KEY_LEN)) {
            return UCS_ERR_INVALID_PARAM;
        }
        *ep_p = ep;
        return UCS_OK;
    }
    return UCS_ERR_NO_ELEM;
}

/* Fail every ep to `peer_public` with `reason`; the key is one that was
 * authenticated (a flow's, or a connection's on crypt's own wire), never
 * one read from a record that did not open. */
static unsigned uct_crypt_fail_peer(uct_crypt_iface_t *iface,
                                    const uint8_t *peer_public, uint64_t flow_id,
                                    uct_crypt_fail_reason_t reason,
                                    const char *detail)
{
    unsigned failed_eps = 0;
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->peer_known && !ep->failed &&
            !crypt_memcmp_ct(ep->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN)) {
            uct_crypt_ep_mark_failed(iface, ep, reason, flow_id, detail);
            ++failed_eps;
        }
    }
    return failed_eps;
}

/*
 * A record that did not open, or opened but must not be delivered. What
 * happens depends on what is authenticated (the rule of src/README.md):
 *  - over an inner transport of UCX (rc, ud, dc): nothing. The record is
 *    dropped and counted; no flow and no ep changes, since anybody who can
 *    put a packet on the fabric could otherwise end them. Only an
 *    authenticated record that betrays a loss (uct_crypt_record_gap) fails
 *    a flow.
 *  - on crypt's own wire: the connection it came on proved its peer in the
 *    handshake, and a stream that carried a bad record cannot go on; the
 *    wire closes it, and the eps to that authenticated peer fail with the
 *    reason. The peer's ep sees its connection end and fails too.
 * Logged rate-limited: a flood of forgeries cannot fill the log.
 */
ucs_status_t uct_crypt_record_drop(uct_crypt_iface_t *iface,
                                   const uint8_t *flow_peer, uint64_t flow_id,
                                   uct_crypt_fail_reason_t reason)
{
    static const uint8_t unknown_peer[KEYEX_PUBLIC_KEY_LEN];
    static uint64_t dropped;
    const uint8_t *wire_peer = iface->inner_ops->rx_peer(iface->inner);
    const uint8_t *peer      = (wire_peer != NULL) ? wire_peer :
                               (flow_peer != NULL) ? flow_peer : unknown_peer;
    uint64_t n               = __atomic_add_fetch(&dropped, 1, __ATOMIC_RELAXED);
    unsigned failed_eps      = 0;

    ucs_assert(reason < UCT_CRYPT_FAIL_LAST);
    UCT_CRYPT_STAT_ADD(failures[reason], 1);
    if (wire_peer != NULL) {
        iface->inner_ops->rx_reject(iface->inner, uct_crypt_fail_reason_name(reason));
        failed_eps = uct_crypt_fail_peer(iface, wire_peer, flow_id, reason, "");
    }
    if ((wire_peer != NULL) || (n <= 4) || !(n & (n - 1))) {
        ucs_error("crypt: dropped a record from " uct_crypt_log_peer_fmt
                  "%s%s: %s; %s (%" PRIu64 " dropped so far)",
                  uct_crypt_log_peer_arg(peer, flow_id),
                  (wire_peer != NULL) ? " at " : "",
                  (wire_peer != NULL) ? iface->inner_ops->rx_peer_name(iface->inner) : "",
                  uct_crypt_fail_reason_name(reason),
                  (wire_peer != NULL) ?
                  "its connection is closed, the endpoints to that peer fail" :
                  "nothing else changes", n);
    }
    (void)failed_eps;
    return UCS_OK; /* to the inner: consumed (and discarded) */
}

/* A violation inside an authenticated record of `flow`: its sequence
 * number is ahead (records were lost in between: dropped or forged on the
 * way, and so dropped here), or a bulk control record that does not match
 * its segments. The data cannot be recovered: the flow and the eps to its
 * peer fail, with the reason. */
ucs_status_t uct_crypt_record_reject(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow,
                                     uct_crypt_fail_reason_t reason)
{
    unsigned failed_eps;

    ucs_assert(reason < UCT_CRYPT_FAIL_LAST);
    UCT_CRYPT_STAT_ADD(failures[reason], 1);
    if (flow->failed) {
        return UCS_OK; /* reported once already */
    }
    flow->failed = 1;
    /* the flow's segments still on the pool are zeroed now, before
     * anyone hears of the failure (uct_crypt_bulk_opened) */
    uct_crypt_bulk_rx_reap(iface, 1);
    if ((iface->inner_ops->rx_peer(iface->inner) != NULL) &&
        (iface->inner_ops->rx_conn(iface->inner) == flow->wire_conn)) {
        iface->inner_ops->rx_reject(iface->inner, uct_crypt_fail_reason_name(reason));
    } else if ((flow->wire_conn != 0) && (iface->inner_ops->rx_reject_conn != NULL)) {
        /* (a bulk segment opened on the pool, acted on later) */
        iface->inner_ops->rx_reject_conn(iface->inner, flow->wire_conn,
                                         uct_crypt_fail_reason_name(reason));
    }
    failed_eps = uct_crypt_fail_peer(iface, flow->peer_public, flow->flow_id,
                                     reason, "");
    ucs_error("crypt: dropped a record from " uct_crypt_log_peer_fmt
              "%s%s: %s; %u endpoint(s) to that peer failed",
              uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
              iface->inner_ops->rx_peer(iface->inner) ? " at " : "",
              iface->inner_ops->rx_peer(iface->inner) ?
              iface->inner_ops->rx_peer_name(iface->inner) : "",
              uct_crypt_fail_reason_name(reason), failed_eps);
    return UCS_OK;
}

/* crypt's own wire: a connection ended. The flows whose HELLO came on it
 * carry nothing more (a flow's records all take its one connection), so
 * their state and keys go now, not when the iface closes: a server that
 * serves client after client kept 8 KiB of locked memory per client
 * (issue 29, item 6), and keyex.h says a flow's keys end with it. Told
 * from the wire's progress, outside any delivery. */
void uct_crypt_record_conn_ended(void *arg, uint64_t conn_id)
{
    uct_crypt_rx_flows_conn_ended(arg, conn_id);
}

/* crypt's own wire: an authenticated peer's connection ended badly */
void uct_crypt_record_peer_failed(void *arg,
                                const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN],
                                const char *peer_name, const char *reason)
{
    uct_crypt_iface_t *iface = arg;
    char detail[sizeof(((uct_crypt_ep_t*)NULL)->fail_detail)];
    unsigned failed_eps;

    UCT_CRYPT_STAT_ADD(failures[UCT_CRYPT_FAIL_CONNECTION], 1);
    ucs_snprintf_zero(detail, sizeof(detail), "connection from %s (peer "
                      "%02x%02x%02x%02x) ended: %s", peer_name, peer_static[0],
                      peer_static[1], peer_static[2], peer_static[3], reason);
    failed_eps = uct_crypt_fail_peer(iface, peer_static, 0,
                                     UCT_CRYPT_FAIL_CONNECTION, detail);
    /* Each failed ep is reported on its own: to its error handler, or,
     * with none, as a fatal error (uct_crypt_ep_failure_told). So this line
     * is a diagnostic, as UCX's tcp says nothing when a peer's connection
     * ends (UCX's own tests fail on any warning). */
    ucs_diag("crypt: %s; %u endpoint(s) to that peer failed", detail,
             failed_eps);
}

/* ---- receiving ----------------------------------------------------------- */

ucs_status_t uct_crypt_record_am_handler(void *arg, void *data, size_t length,
                                         unsigned flags)
{
    uct_crypt_iface_t *iface         = arg;
    const uint8_t *wire_peer         = iface->inner_ops->rx_peer(iface->inner);
    uct_crypt_rx_flow_t *flow        = NULL;
    uct_crypt_record_flow_state_t state, *known = NULL;
    uct_crypt_fail_reason_t reason;
    uct_crypt_record_in_t rec;
    khiter_t iter;
    uint8_t am_id;
    int woken                        = 0;
    ucs_status_t status;

    /* Nothing in the header is acted on before the tag is checked, except
     * to find the key: the flow id (and for a HELLO the sender's key), and
     * the sequence number, which only ever refuses (record/record_input.h) */
    reason = uct_crypt_record_parse(data, length, &rec);
    if (reason != UCT_CRYPT_RECORD_PASS) {
        return uct_crypt_record_drop(iface, NULL, rec.flow_id, reason);
    }
    iter = kh_get(uct_crypt_rx_flows, &iface->rx_flows, rec.flow_id);
    if (iter != kh_end(&iface->rx_flows)) {
        flow                = kh_value(&iface->rx_flows, iter);
        state.peer_public   = flow->peer_public;
        state.next_sequence = flow->next_sequence;
        state.failed        = flow->failed;
        known               = &state;
    } else if (uct_crypt_rx_flow_was_ended(iface, rec.flow_id)) {
        /* its sender ended it (FLOW_END): whatever comes now, its HELLO
         * included, is a copy of what came before */
        return uct_crypt_record_drop(iface, NULL, rec.flow_id,
                                     UCT_CRYPT_FAIL_REPLAY);
    }
    reason = uct_crypt_record_admit(&rec, known, wire_peer);
    if (reason == UCT_CRYPT_FAIL_FLOW_FAILED) {
        UCT_CRYPT_STAT_ADD(failures[UCT_CRYPT_FAIL_FLOW_FAILED], 1);
        return UCS_OK; /* reported once already; dropped quietly */
    } else if (reason != UCT_CRYPT_RECORD_PASS) {
        return uct_crypt_record_drop(iface,
                                     (reason == UCT_CRYPT_FAIL_REPLAY) &&
                                     (rec.sender_public == NULL) ?
                                     flow->peer_public : NULL,
                                     rec.flow_id, reason);
    }

    if (rec.sender_public != NULL) {
        if (wire_peer != NULL) {
            rec.sender_public = wire_peer; /* the HELLO names none */
        }
        crypt_local_failure_set(NULL);
        flow = uct_crypt_rx_flow_create(iface, rec.flow_id, rec.sender_public);
        if ((flow == NULL) && (wire_peer != NULL)) {
            /* the connection proved this peer: only this side can fail
             * here (memory for secrets, a cipher context, a derivation) */
            ucs_error("crypt: cannot open a flow from " uct_crypt_log_peer_fmt
                      "%s", uct_crypt_log_peer_arg(rec.sender_public, rec.flow_id),
                      crypt_local_failure_take());
            return uct_crypt_record_drop(iface, NULL, rec.flow_id,
                                         UCT_CRYPT_FAIL_NO_RESOURCE);
        } else if (flow == NULL) {
            /* (over a UCX inner also a forged HELLO's low-order key) */
            return uct_crypt_record_drop(iface, NULL, rec.flow_id,
                                         UCT_CRYPT_FAIL_HANDSHAKE);
        }
    }
    if (flow->keys == NULL) {
        /* asleep: our eps to its peer are gone, and it sends after all.
         * Nothing here is authenticated yet: keys that cannot be made
         * drop the record (counted, said), never fail the flow, which a
         * stranger who read its id could then do. Were the record the
         * peer's, the next one shows the gap and fails the flow, with
         * its authenticated reason. */
        if (uct_crypt_rx_flow_wake(iface, flow) != UCS_OK) {
            return uct_crypt_record_drop(iface, NULL, rec.flow_id,
                                         UCT_CRYPT_FAIL_NO_RESOURCE);
        }
        woken = 1;
    }
    if (uct_crypt_rx_flow_open(iface, flow, &rec) != CRYPT_AEAD_OK) {
        if (rec.sender_public != NULL) {
            /* never installed: a forged HELLO leaves no state behind, and
             * no ep of the key it names is touched */
            uct_crypt_rx_flow_free(flow);
        } else if (woken) {
            /* back to sleep: forged records cannot keep keys in memory
             * (each costs an X25519, as a forged HELLO does) */
            uct_crypt_rx_flow_sleep(iface, flow);
        }
        return uct_crypt_record_drop(iface, NULL, rec.flow_id, UCT_CRYPT_FAIL_AUTH);
    }

    if (rec.sender_public != NULL) {
        flow->wire_conn = iface->inner_ops->rx_conn(iface->inner);
        status = uct_crypt_rx_flow_add(iface, flow);
        if (status != UCS_OK) {
            /* past a bound (said and counted there), or no memory: the
             * flow is refused, never another evicted. On the own wire its
             * connection closes and the peer's eps fail with the reason;
             * over a UCX inner its sender is told where we have an ep to
             * it, and its records are dropped and counted. */
            if (wire_peer == NULL) {
                uct_crypt_rx_flow_refuse(iface, flow, status);
            }
            uct_crypt_rx_flow_free(flow);
            return ((status == UCS_ERR_EXCEEDS_LIMIT) && (wire_peer == NULL)) ?
                   UCS_OK :
                   uct_crypt_record_drop(iface, NULL, rec.flow_id,
                                         UCT_CRYPT_FAIL_NO_RESOURCE);
        }
    }
    reason = uct_crypt_record_check_opened(&rec, flow->next_sequence);
    if (reason != UCT_CRYPT_RECORD_PASS) {
        /* authenticated, so the peer's own doing (an AM id UCP never
         * sends), or records of the flow were lost in between */
        return uct_crypt_record_reject(iface, flow, reason);
    }
    ++flow->next_sequence;
    UCT_CRYPT_STAT_ADD(records_opened, 1);
    UCT_CRYPT_STAT_ADD(bytes_opened, rec.payload_len);
    am_id = rec.sealed[0];

    if (rec.control) {
        ucs_trace_data("crypt: RX control kind %u len %zu flow 0x%016" PRIx64
                       " seq %" PRIu64, (rec.payload_len > 0) ? rec.sealed[1] : 0,
                       rec.payload_len, rec.flow_id, rec.sequence);
        uct_crypt_bulk_control(iface, flow, rec.sealed + CRYPT_RECORD_AM_ID_LEN,
                               rec.payload_len);
        return UCS_OK;
    }
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, am_id,
                       rec.sealed + CRYPT_RECORD_AM_ID_LEN, rec.payload_len,
                       "crypt: RX %s flow 0x%016" PRIx64 " seq %" PRIu64,
                       (rec.sender_public != NULL) ? "HELLO" : "DATA",
                       rec.flow_id, rec.sequence);

    /* delivered after every segment that came before it is opened (the
     * pool opens them while the wire goes on): a put's data is in place
     * before anything the peer sent after it, as the ep fence promises */
    uct_crypt_bulk_rx_reap(iface, 1);
    if (flow->failed) {
        return UCS_OK;
    }
    /* UCP may keep the data only by copying it: the buffer is the inner's,
     * and our header sits where UCP's descriptor would go. */
    uct_iface_invoke_am(&iface->super, am_id, rec.sealed + CRYPT_RECORD_AM_ID_LEN,
                        (unsigned)rec.payload_len, flags & ~UCT_CB_PARAM_FLAG_DESC);
    return UCS_OK;
}
