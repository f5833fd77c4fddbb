/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Bulk get over crypt: a GET_REQ record asks the peer to seal the range and
 * put it into our buffer (base/format.h). The target serves it only from
 * the registered region whose remote key the initiator names (its token);
 * the initiator opens the answer only inside the window of a get it asked
 * for, and completes the get once the answer's last segment opened and
 * every byte of the window was opened (no round trip more: the data
 * itself says the get is done).
 */
#include "uct_crypt/bulk/bulk.h"


/* get = ask the peer to seal the range and put it into our buffer
 * (crypt_wire.h); our remote key for the buffer goes with the request */
ucs_status_t uct_crypt_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_crypt_ep_t *ep       = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_crypt_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                              uct_crypt_iface_t);
    ucs_status_t status      = uct_crypt_bulk_check_iov(ep, iov, iovcnt);
    crypt_bulk_get_req_t req;
    uct_crypt_bulk_get_t *get;
    uct_crypt_bulk_tx_t *tx;
    size_t rkey_len;
    uint8_t *request;

    /* the peer reads its own memory, inside the region of rkey's token */
    if (status != UCS_OK) {
        return status;
    }
    rkey_len = iface->bulk->rkey_packed_size;
    if (((iov[0].memh == UCT_MEM_HANDLE_NULL) && iface->bulk->need_memh) ||
        (sizeof(req) + rkey_len > iface->inner_attr.cap.am.max_bcopy / 2)) {
        return UCS_ERR_INVALID_PARAM;
    }
    tx      = uct_crypt_bulk_tx_get(ep);
    get     = ucs_calloc(1, sizeof(*get), "crypt bulk get");
    request = ucs_alloca(sizeof(req) + rkey_len);
    if ((tx == NULL) || (get == NULL)) {
        ucs_free(get);
        return UCS_ERR_NO_MEMORY;
    }
    status = uct_crypt_md_pack_rkey(ucs_derived_of(iface->super.md, uct_crypt_md_t),
                                    iov[0].memh, request + sizeof(req));
    if (status != UCS_OK) {
        ucs_free(get);
        return status;
    }
    memset(&req, 0, sizeof(req));
    req.kind        = CRYPT_CONTROL_GET_REQ;
    req.rkey_length = htole32((uint32_t)rkey_len);
    req.get_id      = htole64(tx->next_get_id);
    req.remote_addr = htole64(remote_addr);
    req.remote_token = htole64(((const uct_crypt_rkey_t*)rkey)->token);
    req.local_addr  = htole64((uintptr_t)iov[0].buffer);
    req.length      = htole64(iov[0].length);
    memcpy(request, &req, sizeof(req));
    status = uct_crypt_ep_send_control(ep, request, sizeof(req) + rkey_len);
    if (status != UCS_OK) {
        ucs_free(get); /* NO_RESOURCE: UCP asks again */
        return status;
    }
    get->tx      = tx;
    get->get_id  = tx->next_get_id++;
    get->comp    = comp;
    get->address = (uintptr_t)iov[0].buffer;
    get->length  = iov[0].length;
    ucs_list_add_tail(&tx->gets, &get->list);
    /* outstanding work, so the iface is busy until it lands: UCP's worker
     * flush (ucp_worker_flush_check) asks only uct_iface_flush, and an
     * MPI_Win_fence that returned before the peer's data landed left the
     * destination untouched under UCX 1.22 */
    uct_crypt_bulk_activate(tx);
    return UCS_INPROGRESS;
}

/* The oldest get we asked the peer with this public key for, not landed
 * yet, whose destination holds [address, address + length); NULL if none.
 * (UCP does not register a get's destination where the inner needs no
 * handle: tcp.) */
uct_crypt_bulk_get_t *uct_crypt_bulk_get_of(uct_crypt_iface_t *iface,
                                           const uint8_t *peer_public,
                                           uint64_t address, uint64_t length)
{
    uct_crypt_bulk_get_t *get;
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if ((ep->bulk == NULL) ||
            crypt_memcmp_ct(ep->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN)) {
            continue;
        }
        ucs_list_for_each(get, &ep->bulk->gets, list) {
            if (!get->landed &&
                uct_crypt_range_within(address, length, get->address,
                                       get->length)) {
                return get;
            }
        }
    }
    return NULL;
}

/* A segment of the peer's answer was opened into a get's destination: the
 * get is done when the answer's last segment opened and all of its bytes
 * did. Gets complete in the order they were asked, as the peer answers
 * them (GET_REQs are served in order). The target's put still waits for
 * our ACK; nothing of ours waits for it. */
void uct_crypt_bulk_get_opened(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow, uint64_t address,
                               uint64_t length, int last)
{
    uct_crypt_bulk_get_t *get = uct_crypt_bulk_get_of(iface, flow->peer_public,
                                                      address, length);
    uct_crypt_bulk_tx_t *tx;

    if (get == NULL) {
        return; /* a put into a region of ours, not a get's answer */
    }
    get->opened += length;
    if (!last) {
        return;
    }
    if (get->opened != get->length) {
        /* an answer that ended short of (or past) the window it was for */
        uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
        return;
    }
    get->landed = 1;
    tx          = get->tx;
    while (!ucs_list_is_empty(&tx->gets) &&
           (get = ucs_list_head(&tx->gets, uct_crypt_bulk_get_t, list))->landed) {
        ucs_list_del(&get->list);
        uct_invoke_completion(get->comp, UCS_OK);
        ucs_free(get);
    }
    uct_crypt_bulk_tx_flushes(tx);
}

/* the put answering a get was acknowledged (or failed with its ep) */
static void uct_crypt_bulk_served(uct_completion_t *self)
{
    uct_crypt_bulk_serve_t *serve = ucs_container_of(self, uct_crypt_bulk_serve_t,
                                                     comp);

    uct_rkey_release(&uct_crypt_component, &serve->rkey);
    ucs_free(serve);
}

/* A peer's GET_REQ, in an authenticated, in-sequence record: seal the
 * range and put it to the peer, if the range lies in the region whose
 * remote key the peer was handed (the token in the request): a get may
 * not read anything else. */
void uct_crypt_bulk_serve_get(uct_crypt_iface_t *iface,
                              uct_crypt_rx_flow_t *flow,
                              const uint8_t *payload, size_t length)
{
    uct_crypt_md_t *md = ucs_derived_of(iface->super.md, uct_crypt_md_t);
    uct_crypt_bulk_serve_t *serve = NULL;
    crypt_bulk_get_req_t req;
    uint64_t get_id, remote_addr, local_addr, get_length, token;
    uct_crypt_ep_t *ep;
    ucs_status_t status;

    memcpy(&req, payload, sizeof(req));
    get_id      = le64toh(req.get_id);
    remote_addr = le64toh(req.remote_addr);
    token       = le64toh(req.remote_token);
    local_addr  = le64toh(req.local_addr);
    get_length  = le64toh(req.length);
    /* its lengths checked (uct_crypt_bulk_control_kind): in order, and
     * a remote key of the size ours have (the same inner component packs
     * it), so that unpacking it reads nothing past the record? */
    if ((get_id != flow->bulk_next_get) || (iface->bulk == NULL) ||
        (length - sizeof(req) != iface->bulk->rkey_packed_size)) {
        goto reject;
    }
    if (!uct_crypt_md_exposed(md, token, remote_addr, get_length,
                              UCT_MD_MEM_ACCESS_REMOTE_GET)) {
        ucs_error("crypt: " uct_crypt_log_peer_fmt " asked to read %" PRIu64
                  " bytes at 0x%" PRIx64 ", outside the registered region its "
                  "remote key names or one not registered for remote reads", uct_crypt_log_peer_arg(flow->peer_public,
                  flow->flow_id), get_length, remote_addr);
        goto reject;
    }
    ++flow->bulk_next_get;
    UCT_CRYPT_STAT_ADD(bulk_gets_served, 1);

    ep    = uct_crypt_bulk_ep_to(iface, flow->peer_public);
    serve = ucs_calloc(1, sizeof(*serve), "crypt bulk get served");
    if ((ep == NULL) || (serve == NULL)) {
        ucs_error("crypt: cannot answer a get from " uct_crypt_log_peer_fmt
                  ": no endpoint back to it", uct_crypt_log_peer_arg(
                  flow->peer_public, flow->flow_id));
        goto reject_free;
    }
    if (uct_rkey_unpack(&uct_crypt_component, payload + sizeof(req),
                        &serve->rkey) != UCS_OK) {
        goto reject_free;
    }
    serve->comp.func   = uct_crypt_bulk_served;
    serve->comp.count  = 1;
    serve->comp.status = UCS_OK;
    serve->iface       = iface;
    status = uct_crypt_bulk_put(ep, (const void*)(uintptr_t)remote_addr,
                                get_length, local_addr,
                                (const uct_crypt_rkey_t*)serve->rkey.rkey,
                                &serve->comp);
    if (status == UCS_INPROGRESS) {
        return;
    }
    uct_rkey_release(&uct_crypt_component, &serve->rkey);
reject_free:
    ucs_free(serve);
reject:
    uct_crypt_record_reject(iface, flow, UCT_CRYPT_FAIL_MALFORMED);
}
