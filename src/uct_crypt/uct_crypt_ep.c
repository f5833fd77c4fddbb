/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt ep: one inner ep and the sending half of one flow. Every AM is
 * sealed into one record; a sequence number is consumed only once the inner
 * transport has accepted the record, so a NO_RESOURCE retry neither skips
 * nor reuses a nonce.
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk.h"

#include <uct/base/uct_iov.inl>

static UCS_CLASS_INIT_FUNC(uct_crypt_ep_t, const uct_ep_params_t *params)
{
    uct_crypt_iface_t *iface = ucs_derived_of(params->iface, uct_crypt_iface_t);
    const crypt_iface_addr_t *crypt_addr;
    uct_ep_params_t inner_params;
    ucs_status_t status;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    /* UCS classes are not zero-filled */
    memset(&self->tx, 0, sizeof(self->tx));
    self->peer_known = 0;
    self->failed     = UCT_CRYPT_EP_OK;
    self->cancelled  = 0;
    self->fail_detail[0] = '\0';
    self->inner      = NULL;
    self->bulk       = NULL;
    self->fence      = UCT_CRYPT_FENCE_NONE;
    self->fence_dispatching = 0;
    ucs_queue_head_init(&self->fence_pending);

    inner_params       = *params;
    inner_params.iface = iface->inner;
    if (params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR) {
        crypt_addr = (const crypt_iface_addr_t*)params->iface_addr;
        if (crypt_addr->version != CRYPT_WIRE_VERSION) {
            ucs_error("crypt: peer speaks wire version %u, not %u",
                      crypt_addr->version, CRYPT_WIRE_VERSION);
            return UCS_ERR_UNREACHABLE;
        }
        inner_params.iface_addr = (const uct_iface_addr_t*)(crypt_addr + 1);
        memcpy(self->peer_public, crypt_addr->public_key, KEYEX_PUBLIC_KEY_LEN);
        self->peer_known = 1;
    }

    status = uct_ep_create(&inner_params, &self->inner);
    if (status != UCS_OK) {
        return status;
    }
    if (self->peer_known) {
        status = uct_crypt_tx_flow_init(iface, &self->tx, self->peer_public);
        if (status == UCS_OK) {
            /* (the wire's handshake proves this key before a record goes) */
            status = iface->inner_ops->ep_set_peer(self->inner, self->peer_public);
        }
        if (status == UCS_OK) {
            status = uct_crypt_peer_ep_add(iface, self->peer_public);
        }
        if (status != UCS_OK) {
            uct_crypt_tx_flow_cleanup(&self->tx);
            uct_ep_destroy(self->inner);
            return status;
        }
    }
    ucs_list_add_tail(&iface->eps, &self->list);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_ep_t)
{
    uct_crypt_iface_t *iface = ucs_derived_of(self->super.super.iface,
                                              uct_crypt_iface_t);

    ucs_list_del(&self->list);
    if (uct_crypt_ep_send_flow_end(self, iface)) {
        uct_crypt_fault_flow_ended(iface, self);
        /* (no bulk work in flight: nothing of the inner's refers to us) */
        uct_crypt_ep_close_inner(iface, self->inner);
    } else {
        uct_ep_destroy(self->inner);
    }
    if (self->peer_known) {
        uct_crypt_peer_ep_remove(iface, self->peer_public);
    }
    /* after the inner: no put completion can reach a freed segment */
    uct_crypt_bulk_ep_cancel(self, UCS_ERR_CANCELED);
    uct_crypt_tx_flow_cleanup(&self->tx);
}

UCS_CLASS_DEFINE(uct_crypt_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_ep_t, uct_ep_t);

ucs_status_t uct_crypt_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    uct_crypt_ep_t *ep       = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_crypt_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_crypt_iface_t);
    crypt_ep_addr_t *crypt_addr = (crypt_ep_addr_t*)addr;

    memcpy(crypt_addr->public_key, iface->keypair.public_key,
           KEYEX_PUBLIC_KEY_LEN);
    return uct_ep_get_address(ep->inner, (uct_ep_addr_t*)(crypt_addr + 1));
}

ucs_status_t uct_crypt_ep_connect_to_ep(uct_ep_h tl_ep,
                                        const uct_device_addr_t *dev_addr,
                                        const uct_ep_addr_t *ep_addr)
{
    uct_crypt_ep_t *ep       = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_crypt_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_crypt_iface_t);
    const crypt_ep_addr_t *crypt_addr = (const crypt_ep_addr_t*)ep_addr;
    ucs_status_t status;

    if (ep->peer_known) {
        return UCS_ERR_ALREADY_EXISTS; /* (connected once, to an iface or ep) */
    }
    memcpy(ep->peer_public, crypt_addr->public_key, KEYEX_PUBLIC_KEY_LEN);
    status = uct_crypt_peer_ep_add(iface, ep->peer_public);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_crypt_tx_flow_init(iface, &ep->tx, ep->peer_public);
    if (status != UCS_OK) {
        uct_crypt_peer_ep_remove(iface, ep->peer_public);
        return status;
    }
    ep->peer_known = 1;
    status = iface->inner_ops->ep_set_peer(ep->inner, ep->peer_public);
    if (status != UCS_OK) {
        return status;
    }
    return uct_ep_connect_to_ep(ep->inner, dev_addr,
                                (const uct_ep_addr_t*)(crypt_addr + 1));
}

/* A caller's mistake is refused in every build (the checks guard our
 * buffers; UCX compiles its UCT_CHECK_* out of builds without params
 * checking, as the PyPI wheels are), and said in UCX's words where UCX
 * checks parameters, as its own transports say it (UCT_CHECK_PARAM,
 * uct_iface.h; UCX's gtest uct_p2p_err_test looks for these words). */
#define UCT_CRYPT_EP_INVALID_PARAM(_fmt, ...) \
    ({ \
        if (ENABLE_PARAMS_CHECK) { \
            ucs_error(_fmt, ## __VA_ARGS__); \
        } \
        UCS_ERR_INVALID_PARAM; \
    })

/* crypt's own control records pass a fence: they carry the work before it */
static ucs_status_t uct_crypt_ep_check_sendable(uct_crypt_ep_t *ep, uint8_t id,
                                                int control)
{
    if (ucs_unlikely(id >= UCT_AM_ID_MAX)) {
        return UCT_CRYPT_EP_INVALID_PARAM("Invalid active message id (valid "
                                          "range: 0..%d)",
                                          (int)UCT_AM_ID_MAX - 1);
    }
    if (ucs_unlikely(ep->failed)) {
        return UCS_ERR_CONNECTION_RESET;
    }
    if (ucs_unlikely(!ep->peer_known)) {
        return UCS_ERR_NOT_CONNECTED;
    }
    if (ucs_unlikely(!control && uct_crypt_ep_fenced(ep))) {
        return UCS_ERR_NO_RESOURCE;
    }
    /* keys first: over the own wire a record waits (NO_RESOURCE) until its
     * connection is final, and keys that cannot be made fail the ep */
    return uct_crypt_tx_flow_ready(ucs_derived_of(ep->super.super.iface,
                                                  uct_crypt_iface_t), &ep->tx);
}

static ucs_status_t uct_crypt_ep_send_short(uct_crypt_ep_t *ep,
                                            uint8_t *record, size_t length)
{
    uint64_t first8;

    memcpy(&first8, record, sizeof(first8));
    return uct_ep_am_short(ep->inner, UCT_CRYPT_RECORD_AM_ID, first8,
                           record + sizeof(first8),
                           (unsigned)(length - sizeof(first8)));
}

ucs_status_t uct_crypt_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                   const void *payload, unsigned length)
{
    uct_crypt_ep_t *ep       = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_crypt_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_crypt_iface_t);
    size_t hdr_len           = uct_crypt_record_header_len(&ep->tx);
    size_t payload_len       = sizeof(header) + length;
    uint8_t *record          = iface->scratch;
    ucs_status_t status;
    ssize_t record_len;

    status = uct_crypt_ep_check_sendable(ep, id, 0);
    if (status != UCS_OK) {
        return status;
    }
    /* what we advertise, and memory safety, whatever UCX's params check */
    if (ucs_unlikely((payload_len + CRYPT_RECORD_OVERHEAD_MAX >
                      iface->inner_attr.cap.am.max_short) ||
                     (hdr_len + payload_len + CRYPT_AEAD_TAG_LEN >
                      iface->scratch_len))) {
        return UCT_CRYPT_EP_INVALID_PARAM("Invalid am_short length: %u "
                                          "(expected: <= %zu)", length,
                                          iface->inner_attr.cap.am.max_short -
                                          CRYPT_RECORD_OVERHEAD_MAX -
                                          sizeof(header));
    }

    memcpy(record + hdr_len, &header, sizeof(header));
    if (length > 0) { /* UCP passes NULL for an empty payload */
        memcpy(record + hdr_len + sizeof(header), payload, length);
    }
    record_len = uct_crypt_record_seal(iface, &ep->tx, id, 0, record,
                                       payload_len);
    if (ucs_unlikely(record_len < 0)) {
        /* the cipher failed: nothing left, no plaintext stays behind, and
         * the ep fails with the reason (a key that cannot seal now will not
         * seal the next record either) */
        memset(record, 0, hdr_len + payload_len + CRYPT_AEAD_TAG_LEN);
        uct_crypt_ep_fail_local(ep, "cannot seal a record");
        return (ucs_status_t)record_len;
    }

    /* The test-only fault hook acts on short records alone: it may send
     * extra records, which it must not do from inside an inner pack
     * callback; and on sealed ones (not those that wait for the own
     * wire's handshake) */
    if (ucs_unlikely(uct_crypt_fault_enabled(iface)) && (ep->tx.keys != NULL) &&
        uct_crypt_fault_apply(iface, ep, record, (size_t*)&record_len)) {
        uct_crypt_record_commit(iface, &ep->tx, payload_len);
        return UCS_OK; /* held back or dropped by the test hook */
    }

    status = uct_crypt_ep_send_short(ep, record, record_len);
    if (status == UCS_OK) {
        uct_crypt_record_commit(iface, &ep->tx, payload_len);
    }
    return status;
}

typedef struct {
    uct_crypt_iface_t   *iface;
    uct_crypt_ep_t      *ep;
    uint8_t             am_id;
    uint16_t            record_flags;  /* CRYPT_RECORD_FLAG_* */
    /* where the plaintext comes from: a UCP pack callback or an iov */
    uct_pack_callback_t pack_cb;
    void                *pack_arg;
    const void          *header;
    unsigned            header_length;
    const uct_iov_t     *iov;
    size_t              iovcnt;
    size_t              payload_len;   /* out */
    int                 seal_failed;   /* out */
} uct_crypt_bcopy_ctx_t;

/* An AM header and an iov, one after the other, as uct_iov_to_buffer
 * copies them, but passing memcpy no empty part: UCP gives those a NULL
 * buffer, and memcpy from NULL is undefined even for 0 bytes (UBSan). */
static size_t uct_crypt_gather(uint8_t *dest, const void *header,
                               size_t header_length, const uct_iov_t *iov,
                               size_t iovcnt)
{
    size_t length = 0, i;

    if (header_length > 0) {
        memcpy(dest, header, header_length);
        length = header_length;
    }
    for (i = 0; i < iovcnt; ++i) {
        if (iov[i].length > 0) {
            memcpy(dest + length, iov[i].buffer, iov[i].length);
            length += iov[i].length;
        }
    }
    return length;
}

/* Called by the inner transport once it has committed to sending: write
 * the plaintext after our header, seal it in place, add the tag. */
static size_t uct_crypt_bcopy_pack(void *dest, void *arg)
{
    uct_crypt_bcopy_ctx_t *ctx = arg;
    size_t hdr_len = uct_crypt_record_header_len(&ctx->ep->tx);
    uint8_t *plain = (uint8_t*)dest + hdr_len;
    ssize_t record_len;

    if (ctx->pack_cb != NULL) {
        ctx->payload_len = ctx->pack_cb(plain, ctx->pack_arg);
    } else {
        ctx->payload_len = uct_crypt_gather(plain, ctx->header,
                                            ctx->header_length, ctx->iov,
                                            ctx->iovcnt);
    }

    record_len = uct_crypt_record_seal(ctx->iface, &ctx->ep->tx, ctx->am_id,
                                       ctx->record_flags, dest, ctx->payload_len);
    if (ucs_unlikely(record_len < 0)) {
        /* The cipher failed (a provider error, a FIPS self-test state)
         * after the inner committed to sending: the record goes as zeros,
         * which the peer drops as malformed, never as plaintext; the send
         * and the ep fail with the reason, the process goes on */
        record_len = hdr_len + ctx->payload_len + CRYPT_AEAD_TAG_LEN;
        memset(dest, 0, record_len);
        ctx->seal_failed = 1;
        uct_crypt_ep_fail_local(ctx->ep, "cannot seal a record");
        return record_len;
    }
    uct_crypt_record_commit(ctx->iface, &ctx->ep->tx, ctx->payload_len);

    return record_len;
}

#if UCX_CRYPT_FAULT_INJECTION
/* TESTING ONLY: a sealed record of UCP's under the tamper hook. UCP sends
 * small messages as am_short up to 1.13 and as am_zcopy from 1.16 on; the
 * hook acts on sealed records either way: sealed into a buffer of its own
 * first (fault/fault.c may hold, drop or repeat it), then copied. */
static ssize_t uct_crypt_ep_bcopy_faulty(uct_crypt_bcopy_ctx_t *ctx)
{
    size_t max    = ctx->iface->inner_attr.cap.am.max_bcopy;
    uint8_t *copy = ucs_malloc(max, "crypt fault record");
    size_t record_len;
    ssize_t packed;

    if (copy == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    record_len = uct_crypt_bcopy_pack(copy, ctx); /* seals and commits */
    if (ctx->seal_failed) {
        packed = UCS_ERR_IO_ERROR;
    } else if (uct_crypt_fault_apply(ctx->iface, ctx->ep, copy, &record_len)) {
        packed = (ssize_t)ctx->payload_len; /* held back or dropped */
    } else {
        /* (NO_RESOURCE here would lose a committed record: the tests
         * that tamper send little, and fail loudly if it happens) */
        packed = uct_crypt_fault_send_raw(ctx->ep, copy, record_len);
        packed = (packed < 0) ? packed : (ssize_t)ctx->payload_len;
    }
    ucs_free(copy);
    return packed;
}
#endif

/* am_bcopy and am_zcopy: the inner's bcopy with our pack callback */
static ssize_t uct_crypt_ep_bcopy(uct_crypt_bcopy_ctx_t *ctx)
{
    ucs_status_t status;
    ssize_t packed;

    status = uct_crypt_ep_check_sendable(ctx->ep, ctx->am_id,
                                         ctx->record_flags &
                                         CRYPT_RECORD_FLAG_CONTROL);
    if (status != UCS_OK) {
        return status;
    }
#if UCX_CRYPT_FAULT_INJECTION
    if (ucs_unlikely(uct_crypt_fault_enabled(ctx->iface)) &&
        !(ctx->record_flags & CRYPT_RECORD_FLAG_CONTROL) &&
        (ctx->ep->tx.keys != NULL) &&
        (ctx->iface->fault.kind < UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT)) {
        return uct_crypt_ep_bcopy_faulty(ctx);
    }
#endif
    packed = uct_ep_am_bcopy(ctx->ep->inner, UCT_CRYPT_RECORD_AM_ID,
                             uct_crypt_bcopy_pack, ctx, 0);
    if (ucs_unlikely(ctx->seal_failed)) {
        return UCS_ERR_IO_ERROR;
    }
    /* UCP wants its own payload length back, not the record's */
    return (packed < 0) ? packed : (ssize_t)ctx->payload_len;
}

ssize_t uct_crypt_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                              uct_pack_callback_t pack_cb, void *arg,
                              unsigned flags)
{
    uct_crypt_bcopy_ctx_t ctx = {
        .iface    = ucs_derived_of(tl_ep->iface, uct_crypt_iface_t),
        .ep       = ucs_derived_of(tl_ep, uct_crypt_ep_t),
        .am_id    = id,
        .pack_cb  = pack_cb,
        .pack_arg = arg
    };

    return uct_crypt_ep_bcopy(&ctx);
}

/* Zero-copy from UCP's point of view: the cipher reads the user's iov once
 * and writes the record into the inner's send buffer, so the user's buffer
 * is free on return. Over a UCX inner the operation is complete then. On
 * crypt's own wire it completes once the kernel took the record (`comp`),
 * as UCX's tcp completes its zcopy sends: UCP completes a rendezvous sent
 * as AM fragments on the last one, and an application that stops
 * progressing then (a barrier on a side channel) must not leave the tail
 * of its message in this process. */
ucs_status_t uct_crypt_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                   unsigned header_length, const uct_iov_t *iov,
                                   size_t iovcnt, unsigned flags,
                                   uct_completion_t *comp)
{
    uct_crypt_bcopy_ctx_t ctx = {
        .iface         = ucs_derived_of(tl_ep->iface, uct_crypt_iface_t),
        .ep            = ucs_derived_of(tl_ep, uct_crypt_ep_t),
        .am_id         = id,
        .header        = header,
        .header_length = header_length,
        .iov           = iov,
        .iovcnt        = iovcnt
    };
    ssize_t packed;
    ucs_status_t status;
    size_t length;

    /* the record is written into the inner's bcopy buffer: never more than
     * we advertised (uct_crypt_iface_query) */
    if (ucs_unlikely(header_length > UCT_CRYPT_AM_ZCOPY_MAX_HDR)) {
        return UCT_CRYPT_EP_INVALID_PARAM("Invalid am_zcopy header length: "
                                          "%u (expected: <= %d)", header_length,
                                          UCT_CRYPT_AM_ZCOPY_MAX_HDR);
    }
    if (ucs_unlikely(iovcnt > UCT_CRYPT_AM_ZCOPY_MAX_IOV)) {
        return UCT_CRYPT_EP_INVALID_PARAM("iovcnt(%zu) should be limited by "
                                          "%d in am_zcopy", iovcnt,
                                          UCT_CRYPT_AM_ZCOPY_MAX_IOV);
    }
    length = header_length + uct_iov_total_length(iov, iovcnt);
    if (ucs_unlikely(length + CRYPT_RECORD_OVERHEAD_MAX >
                     ctx.iface->inner_attr.cap.am.max_bcopy)) {
        return UCT_CRYPT_EP_INVALID_PARAM("Invalid am_zcopy length: %zu "
                                          "(expected: <= %zu)", length,
                                          ctx.iface->inner_attr.cap.am.max_bcopy -
                                          CRYPT_RECORD_OVERHEAD_MAX);
    }
    packed = uct_crypt_ep_bcopy(&ctx);
    if (packed < 0) {
        return (ucs_status_t)packed;
    }
    if ((comp == NULL) ||
        !(ctx.iface->inner_ops->flags & UCT_CRYPT_INNER_ZCOPY_FLUSH)) {
        return UCS_OK;
    }
    status = uct_ep_flush(ctx.ep->inner, UCT_FLUSH_FLAG_LOCAL, comp);
    /* (NO_RESOURCE: others wait to send on the wire's ep; the record is
     * out of the user's buffer all the same) */
    return (status == UCS_INPROGRESS) ? UCS_INPROGRESS : UCS_OK;
}

/* A control record for crypt itself (bulk segments and acknowledgements):
 * sealed and sequenced in the same flow as UCP's AMs, flagged in the
 * authenticated header so the peer never hands it to UCP. */
ucs_status_t uct_crypt_ep_send_control(uct_crypt_ep_t *ep, const void *payload,
                                       unsigned length)
{
    uct_crypt_bcopy_ctx_t ctx = {
        .iface         = ucs_derived_of(ep->super.super.iface, uct_crypt_iface_t),
        .ep            = ep,
        .am_id         = 0, /* sealed as 0; the header flag says control */
        .record_flags  = CRYPT_RECORD_FLAG_CONTROL,
        .header        = payload,
        .header_length = length,
        .iov           = NULL,
        .iovcnt        = 0
    };
    ssize_t packed = uct_crypt_ep_bcopy(&ctx);

    return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
}

/* ---- ops that the inner ep does, behind crypt's own bulk work ---------- */

/* Behind a fence, requests wait in the ep's own queue (bulk/bulk.c
 * dispatches it once the fence clears); otherwise in the inner's. */
ucs_status_t uct_crypt_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                      unsigned flags)
{
    uct_crypt_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_ep_t);

    if (ep->fence != UCT_CRYPT_FENCE_NONE) {
        uct_pending_req_queue_push(&ep->fence_pending, req);
        return UCS_OK;
    }
    return uct_ep_pending_add(ep->inner, req, flags);
}

void uct_crypt_ep_pending_purge(uct_ep_h tl_ep,
                                uct_pending_purge_callback_t cb, void *arg)
{
    uct_crypt_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_pending_req_priv_queue_t *priv;

    uct_pending_queue_purge(priv, &ep->fence_pending, 1, cb, arg);
    uct_ep_pending_purge(ep->inner, cb, arg);
}

ucs_status_t uct_crypt_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp)
{
    uct_crypt_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    ucs_status_t status;

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        ep->cancelled = 1;
    }
    /* bulk puts first (they complete when the target acknowledges), then
     * whatever the inner still holds */
    status = uct_crypt_bulk_ep_flush(ep, flags, comp);
    if (status != UCS_OK) {
        return status;
    }
    return uct_ep_flush(ep->inner, flags, comp);
}


ucs_status_t uct_crypt_ep_check(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp)
{
    return uct_ep_check(ucs_derived_of(tl_ep, uct_crypt_ep_t)->inner, flags, comp);
}

/* The inner's fence orders the inner's operations; bulk work still inside
 * crypt is fenced by crypt itself */
ucs_status_t uct_crypt_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    uct_crypt_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_ep_t);

    uct_crypt_bulk_ep_fence(ep);
    return uct_ep_fence(ep->inner, flags);
}
