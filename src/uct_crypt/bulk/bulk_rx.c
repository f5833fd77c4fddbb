/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The target side of the bulk engine: a SEGMENT record (authenticated and
 * in sequence, like every record) names a segment that the inner transport
 * put in place (or, on crypt's own wire, whose ciphertext follows and is
 * received straight there); only inside memory this process registered or
 * a get window it asked for. The pool opens it there while the progress
 * thread goes on receiving; opened segments are acted on in arrival
 * order, and the last of a put is acknowledged. Also the initiator's
 * handling of ACKs, and the dispatch of every bulk control record.
 */
#include "uct_crypt/bulk/bulk.h"


uct_crypt_ep_t *uct_crypt_bulk_ep_to(uct_crypt_iface_t *iface,
                                     const uint8_t *peer_public)
{
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->peer_known && !ep->failed && !ep->cancelled &&
            !crypt_memcmp_ct(ep->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN)) {
            return ep;
        }
    }
    return NULL;
}

void uct_crypt_bulk_send_pending_acks(uct_crypt_bulk_t *bulk)
{
    uct_crypt_bulk_pending_ack_t *pending, *tmp;
    uct_crypt_ep_t *ep;
    ucs_status_t status;

    ucs_list_for_each_safe(pending, tmp, &bulk->pending_acks, list) {
        ep = uct_crypt_bulk_ep_to(bulk->iface, pending->peer_public);
        if (ep == NULL) {
            /* the peer went away; its put can never complete anyway */
            status = UCS_OK;
        } else {
            status = uct_crypt_ep_send_control(ep, pending->msg,
                                               sizeof(pending->msg));
        }
        if (status == UCS_ERR_NO_RESOURCE) {
            return; /* keep the order */
        }
        ucs_list_del(&pending->list);
        ucs_free(pending);
    }
}

/* A control message back to a peer (ACK, FLOW_REFUSED: 24
 * bytes each): now, or queued in order behind the ones that found no room */
void uct_crypt_bulk_reply(uct_crypt_iface_t *iface,
                          const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                          uint64_t flow_id, const void *msg)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_pending_ack_t *pending;
    uct_crypt_ep_t *ep;

    UCS_STATIC_ASSERT(sizeof(crypt_flow_refused_t) == sizeof(crypt_bulk_ack_t));
    ep = uct_crypt_bulk_ep_to(iface, peer_public);
    if ((ep != NULL) && ((bulk == NULL) || ucs_list_is_empty(&bulk->pending_acks)) &&
        (uct_crypt_ep_send_control(ep, msg, sizeof(crypt_bulk_ack_t)) == UCS_OK)) {
        return;
    }
    if (bulk == NULL) {
        /* (no bulk engine, so no put to acknowledge: a FLOW_REFUSED) */
        ucs_error("crypt: cannot answer " uct_crypt_log_peer_fmt " (control "
                  "kind %u): %s", uct_crypt_log_peer_arg(peer_public, flow_id),
                  *(const uint8_t*)msg, (ep == NULL) ? "no endpoint back to it" :
                  "no room on the endpoint back to it");
        return;
    }
    pending = ucs_malloc(sizeof(*pending), "crypt pending ack");
    if (pending == NULL) {
        /* the peer's put can never complete: its endpoints here fail, and
         * its own keepalive or flush timeout reports it there */
        if (ep != NULL) {
            uct_crypt_ep_fail_local(ep, "out of memory for a reply to it");
        }
        return;
    }
    memcpy(pending->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN);
    memcpy(pending->msg, msg, sizeof(pending->msg));
    ucs_list_add_tail(&bulk->pending_acks, &pending->list);
    if (bulk->progress_id == UCS_CALLBACKQ_ID_NULL) {
        uct_worker_progress_register_safe(&iface->super.worker->super,
                                          uct_crypt_bulk_progress, bulk, 0,
                                          &bulk->progress_id);
    }
}

static void uct_crypt_bulk_ack(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow, uint64_t put_id)
{
    crypt_bulk_ack_t ack;

    memset(&ack, 0, sizeof(ack));
    ack.kind    = CRYPT_CONTROL_ACK;
    ack.flow_id = htole64(flow->flow_id);
    ack.put_id  = htole64(put_id);
    uct_crypt_bulk_reply(iface, flow->peer_public, flow->flow_id, &ack);
}

/* On a pool thread (or the progress thread, worker 0): open the segment
 * in place, in its destination. The flow's keys stay while any of its
 * segments is here (uct_crypt_bulk_rx_flow_cleanup and key updates reap
 * first); a worker makes its own expanded key on first use (an OpenSSL
 * context is one thread's, aead.h). A failed open zeroes the destination
 * (aead.h): neither forged plaintext nor ciphertext is left for UCP. */
static void uct_crypt_bulk_open_job(crypt_pool_job_t *job, unsigned worker)
{
    uct_crypt_bulk_rx_seg_t *seg = ucs_container_of(job, uct_crypt_bulk_rx_seg_t,
                                                    job);
    const crypt_bulk_segment_t *announce = &seg->announce;
    uct_crypt_rx_flow_t *flow = seg->flow;
    uint64_t put_id           = le64toh(announce->put_id);
    uint64_t length           = le64toh(announce->length);
    uint8_t *dest             = (uint8_t*)(uintptr_t)le64toh(announce->address);
    crypt_aead_key_t *key     = (worker == 0) ? &flow->bulk_aead :
                                &flow->bulk_aead_workers[worker - 1];
    uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN];
    crypt_bulk_aad_t aad;

    seg->failure = NULL;
    if ((key->impl == NULL) &&
        (crypt_aead_key_init(key, seg->backend, flow->bulk_keys->key,
                             flow->bulk_keys->key_len) != CRYPT_AEAD_OK)) {
        memset(dest, 0, length);
        seg->status  = CRYPT_AEAD_ERR_BACKEND;
        seg->failure = crypt_local_failure(); /* this thread's reason */
        return;
    }
    uct_crypt_bulk_stream_prefix(prefix, put_id);
    uct_crypt_bulk_aad(&aad, flow->flow_id, put_id, (uintptr_t)dest, length);
    seg->status = crypt_stream_open_segment(key, prefix, le32toh(announce->index),
                                            announce->last, &aad, sizeof(aad),
                                            dest, length, dest, announce->tag);
}

/* A segment opened (or not), in arrival order: counted, and the last of a
 * put acknowledged; one that did not open fails its flow, and what of the
 * flow came after it is zeroed where it landed */
static void uct_crypt_bulk_opened(uct_crypt_iface_t *iface,
                                  uct_crypt_bulk_rx_seg_t *seg)
{
    const crypt_bulk_segment_t *announce = &seg->announce;
    uct_crypt_rx_flow_t *flow = seg->flow;
    uint64_t address          = le64toh(announce->address);
    uint64_t length           = le64toh(announce->length);

    if (flow->failed) {
        memset((void*)(uintptr_t)address, 0, length);
        return;
    }
    if (seg->failure != NULL) {
        crypt_local_failure_set(seg->failure);
        ucs_error("crypt: cannot open a bulk segment from " uct_crypt_log_peer_fmt
                  "%s", uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                  crypt_local_failure_take());
        uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_NO_RESOURCE);
        return;
    }
    if (seg->status != CRYPT_AEAD_OK) {
        uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_AUTH);
        return;
    }
    UCT_CRYPT_STAT_ADD(bulk_bytes_opened, length);
    /* the answer to a get of ours is done when its last segment opened */
    uct_crypt_bulk_get_opened(iface, flow, address, length, announce->last);
    if (!flow->failed && announce->last) {
        uct_crypt_bulk_ack(iface, flow, le64toh(announce->put_id));
    }
}

void uct_crypt_bulk_rx_reap(uct_crypt_iface_t *iface, int wait)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_rx_seg_t *seg;

    while ((bulk != NULL) && !ucs_list_is_empty(&bulk->opening)) {
        seg = ucs_list_head(&bulk->opening, uct_crypt_bulk_rx_seg_t, list);
        /* the segment everything waits for: opened here if no worker took
         * it yet */
        if (wait) {
            crypt_pool_finish(bulk->pool, &seg->job);
        } else if (!crypt_pool_run_here(bulk->pool, &seg->job)) {
            return;
        }
        ucs_list_del(&seg->list);
        --bulk->opening_count;
        uct_crypt_bulk_opened(iface, seg);
        ucs_mpool_put(seg);
    }
}

void uct_crypt_bulk_rx_quiesce(uct_crypt_iface_t *iface)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_rx_seg_t *seg;

    if (bulk == NULL) {
        return;
    }
    ucs_list_for_each(seg, &bulk->opening, list) {
        crypt_pool_finish(bulk->pool, &seg->job);
    }
}

/* The pool's workers' keys of a flow, made on first use: NULL where the
 * pool has no thread (or no memory for them: the progress thread opens) */
static int uct_crypt_bulk_rx_workers(uct_crypt_bulk_t *bulk,
                                     uct_crypt_rx_flow_t *flow)
{
    unsigned threads = (bulk->pool != NULL) ? crypt_pool_size(bulk->pool) : 0;

    if ((threads == 0) || (crypt_pool_active(bulk->pool) == 0)) {
        return 0;
    }
    if (flow->bulk_aead_workers == NULL) {
        flow->bulk_aead_workers = ucs_calloc(threads, sizeof(crypt_aead_key_t),
                                             "crypt rx worker keys");
        flow->bulk_workers      = (flow->bulk_aead_workers != NULL) ? threads : 0;
    }
    return flow->bulk_workers > 0;
}

/* A segment whose ciphertext is in its destination, checked: opened by the
 * pool while the progress thread goes on receiving; at most `depth` at
 * once (the oldest is acted on first) */
static void uct_crypt_bulk_rx_submit(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow,
                                     const crypt_bulk_segment_t *announce)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_rx_seg_t *seg;

    while (bulk->opening_count >= bulk->depth) {
        uct_crypt_bulk_rx_reap(iface, 1);
    }
    seg = ucs_mpool_get(&bulk->rx_seg_mp);
    if (seg == NULL) {
        uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_NO_RESOURCE);
        return;
    }
    seg->flow     = flow;
    seg->backend  = iface->backend;
    seg->announce = *announce;
    seg->job.run  = uct_crypt_bulk_open_job;
    ucs_list_add_tail(&bulk->opening, &seg->list);
    ++bulk->opening_count;
    if (uct_crypt_bulk_rx_workers(bulk, flow)) {
        crypt_pool_submit(bulk->pool, &seg->job);
        uct_crypt_bulk_activate_rx(bulk);
    } else {
        /* no thread to open it: here, and acted on at once */
        crypt_pool_run_inline(&seg->job);
        uct_crypt_bulk_rx_reap(iface, 0);
    }
}

/* crypt's own wire: the SEGMENT frame that followed the announcement, its
 * ciphertext received straight into its destination, then its tag */
static void uct_crypt_bulk_wire_segment(void *arg, const uint8_t *tag)
{
    uct_crypt_rx_flow_t *flow = arg;

    memcpy(flow->wire_announce.tag, tag, CRYPT_AEAD_TAG_LEN);
    uct_crypt_bulk_rx_submit(flow->iface, flow, &flow->wire_announce);
}

/* A segment that cannot be opened: what came before it on the pool is
 * acted on first, so that the flow fails for the first thing wrong (a
 * segment whose tag failed, then the gap it left) */
static void uct_crypt_bulk_rx_refuse(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow,
                                     uct_crypt_fail_reason_t reason)
{
    uct_crypt_bulk_rx_reap(iface, 1);
    if (!flow->failed) {
        uct_crypt_record_reject(iface, flow, reason);
    }
}

/* One announced segment. Everything here came in an authenticated,
 * in-sequence record of `flow`. */
static void uct_crypt_bulk_open_segment(uct_crypt_iface_t *iface,
                                        uct_crypt_rx_flow_t *flow,
                                        const crypt_bulk_segment_t *announce)
{
    uint64_t put_id    = le64toh(announce->put_id);
    uint32_t index     = le32toh(announce->index);
    uint64_t address   = le64toh(announce->address);
    uint64_t length    = le64toh(announce->length);
    uint16_t generation = le16toh(announce->generation);

    /* a put's segments come in order, puts come in order, none is skipped:
     * anything else is a dropped, reordered or truncated stream */
    if ((put_id != flow->bulk_next_put) || (index != flow->bulk_next_segment)) {
        uct_crypt_bulk_rx_refuse(iface, flow, UCT_CRYPT_FAIL_BULK_ORDER);
        return;
    }
    /* the sender updates the bulk key between puts only */
    if (((flow->bulk_keys == NULL) &&
         (uct_crypt_bulk_rx_key(iface, flow, 0) != UCS_OK)) ||
        ((index == 0) &&
         (generation == (uint16_t)(flow->bulk_keys->generation + 1)) &&
         (uct_crypt_bulk_rx_key(iface, flow, 1) != UCS_OK))) {
        /* the flow is proven by the records it opened: only this side
         * can fail here (memory for secrets, a key derivation) */
        ucs_error("crypt: cannot derive the bulk keys of a flow from "
                  uct_crypt_log_peer_fmt "%s", uct_crypt_log_peer_arg(
                  flow->peer_public, flow->flow_id), crypt_local_failure_take());
        uct_crypt_bulk_rx_refuse(iface, flow, UCT_CRYPT_FAIL_NO_RESOURCE);
        return;
    }
    if (generation != (uint16_t)flow->bulk_keys->generation) {
        uct_crypt_bulk_rx_refuse(iface, flow, UCT_CRYPT_FAIL_AUTH);
        return;
    }
    /* only the registered region whose remote key the put was given (its
     * token), or the destination of a get we asked this peer for, is
     * opened (or zeroed, when the open fails): an authenticated peer cannot
     * aim us at memory it was not handed */
    if ((uct_crypt_bulk_get_of(iface, flow->peer_public, address, length) ==
         NULL) &&
        !uct_crypt_md_exposed(ucs_derived_of(iface->super.md, uct_crypt_md_t),
                              le64toh(announce->token), address, length,
                              UCT_MD_MEM_ACCESS_REMOTE_PUT)) {
        ucs_error("crypt: " uct_crypt_log_peer_fmt " announced %" PRIu64
                  " bytes at 0x%" PRIx64 ", outside the registered region its "
                  "remote key names or one not registered for remote writes",
                  uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                  length, address);
        uct_crypt_bulk_rx_refuse(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
        return;
    }
    if (announce->last) {
        flow->bulk_next_put++;
        flow->bulk_next_segment = 0;
    } else {
        flow->bulk_next_segment++;
    }

    if (iface->bulk->inline_segments) {
        /* ciphertext and tag are the next frame on this connection: the
         * ciphertext is received straight into the destination, then
         * opened there (no copy through a receive buffer) */
        if (length + CRYPT_AEAD_TAG_LEN > iface->inner_ops->segment_frame_max) {
            uct_crypt_bulk_rx_refuse(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
            return;
        }
        flow->wire_announce = *announce;
        iface->inner_ops->rx_expect_segment(iface->inner,
                                            (void*)(uintptr_t)address, length,
                                            uct_crypt_bulk_wire_segment, flow);
        return;
    }
    /* in place: the inner put left the ciphertext where the plaintext
     * belongs */
    uct_crypt_bulk_rx_submit(iface, flow, announce);
}

/* The bulk state of our ep whose sending flow is `flow_id`, for a reply
 * about it (ACK): UCS_OK and *tx_p; UCS_ERR_NO_ELEM where no
 * live ep sends on that flow any more (destroyed, failed, or cancelled
 * and about to be: the peer replied before it could know, and the
 * operations were completed with an error already); UCS_ERR_INVALID_PARAM
 * where the ep talks to another peer than the reply's. */
ucs_status_t uct_crypt_bulk_tx_of(uct_crypt_iface_t *iface,
                                  uct_crypt_rx_flow_t *flow, uint64_t flow_id,
                                  uct_crypt_bulk_tx_t **tx_p)
{
    ucs_status_t status;
    uct_crypt_ep_t *ep;

    status = uct_crypt_ep_of_tx_flow(iface, flow, flow_id, &ep);
    if (status != UCS_OK) {
        return status;
    }
    if ((ep->bulk == NULL) || ep->failed || ep->cancelled) {
        return UCS_ERR_NO_ELEM;
    }
    *tx_p = ep->bulk;
    return UCS_OK;
}

static void uct_crypt_bulk_acked(uct_crypt_iface_t *iface,
                                 uct_crypt_rx_flow_t *flow,
                                 const crypt_bulk_ack_t *ack)
{
    uct_crypt_bulk_tx_t *tx;
    uct_crypt_bulk_op_t *op;
    ucs_status_t status;

    status = uct_crypt_bulk_tx_of(iface, flow, le64toh(ack->flow_id), &tx);
    if (status == UCS_ERR_NO_ELEM) {
        return; /* for an ep of ours that is gone: nothing to complete */
    }
    /* acknowledged in order, only once all of it was announced, and only
     * by the peer it was sent to */
    if ((status == UCS_OK) && !ucs_list_is_empty(&tx->ops)) {
        op = ucs_list_head(&tx->ops, uct_crypt_bulk_op_t, list);
        if ((op->put_id == le64toh(ack->put_id)) &&
            (op->announced == op->num_segments)) {
            UCT_CRYPT_STAT_ADD(bulk_bytes_sealed, op->length);
            uct_crypt_bulk_op_complete(tx, op, UCS_OK);
            uct_crypt_bulk_tx_flushes(tx);
            return;
        }
    }
    uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
}

void uct_crypt_bulk_control(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow,
                            uint8_t *payload, size_t length)
{
    crypt_bulk_segment_t announce;
    crypt_flow_refused_t refused;
    crypt_bulk_ack_t ack;
    int kind;

    /* well formed first (bulk/bulk_input.c), then checked against
     * the flow's state; what came before it is opened first, as a record
     * after a put's segments is delivered after them (the ep fence counts
     * on it) */
    kind = uct_crypt_bulk_control_kind(payload, length);
    if (kind != CRYPT_CONTROL_SEGMENT) {
        uct_crypt_bulk_rx_reap(iface, 1);
        if (flow->failed) {
            return;
        }
    }
    switch (kind) {
    case CRYPT_CONTROL_SEGMENT:
        if (iface->bulk == NULL) {
            /* no bulk engine here (UCX_CRYPT_BULK=n): no put was offered */
            uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
            break;
        }
        memcpy(&announce, payload, sizeof(announce));
        uct_crypt_bulk_open_segment(iface, flow, &announce);
        break;
    case CRYPT_CONTROL_ACK:
        memcpy(&ack, payload, sizeof(ack));
        uct_crypt_bulk_acked(iface, flow, &ack);
        break;
    case CRYPT_CONTROL_GET_REQ:
        uct_crypt_bulk_serve_get(iface, flow, payload, length);
        break;
    case CRYPT_CONTROL_FLOW_END:
        uct_crypt_rx_flow_end(iface, flow); /* `flow` may be gone after it */
        break;
    case CRYPT_CONTROL_FLOW_REFUSED:
        memcpy(&refused, payload, sizeof(refused));
        uct_crypt_ep_flow_refused(iface, flow, &refused);
        break;
    default:
        uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
        break;
    }
}
