/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An ep of crypt's own wire (wire/wire.h): one outgoing connection,
 * opened once both the peer's address and the static key it must prove
 * are known; sends that find its buffer full return NO_RESOURCE and wait
 * on the pending queue; a failure is reported once, from progress.
 */
#include "uct_crypt/wire/wire_int.h"

#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <errno.h>
#include <unistd.h>

typedef struct uct_crypt_wire_flush {
    ucs_queue_elem_t queue;
    uct_completion_t *comp;
} uct_crypt_wire_flush_t;

static ucs_status_t uct_crypt_wire_ep_connect(uct_crypt_wire_ep_t *ep)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                                   uct_crypt_wire_iface_t);
    socklen_t len = (ep->dest.ss_family == AF_INET6) ?
                    sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    uct_crypt_wire_conn_t *conn;
    ucs_status_t status;
    int fd;

    if (!ep->have_dest || !ep->have_peer || (ep->conn != NULL)) {
        return UCS_OK;
    }
    /* the peer's connection to us, with its sending half unused: both
     * directions on one */
    conn = uct_crypt_wire_conn_find_free(iface, ep->peer_static);
    if (conn != NULL) {
        conn->ep = ep;
        ep->conn = conn;
        UCT_CRYPT_STAT_ADD(wire_shared, 1);
        return UCS_OK;
    }
    fd = socket(ep->dest.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return UCS_ERR_IO_ERROR;
    }
    uct_crypt_wire_iface_set_options(iface, fd);
    if ((connect(fd, (struct sockaddr*)&ep->dest, len) < 0) &&
        (errno != EINPROGRESS)) {
        ucs_error("crypt: cannot connect the wire: %m");
        close(fd);
        return UCS_ERR_UNREACHABLE;
    }
    conn = uct_crypt_wire_conn_new(iface, fd, ep, (struct sockaddr*)&ep->dest);
    if (conn == NULL) {
        close(fd);
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }
    memcpy(conn->peer_static, ep->peer_static, KEYEX_PUBLIC_KEY_LEN);
    status = uct_crypt_wire_conn_start(conn);
    if (status != UCS_OK) {
        uct_crypt_wire_conn_close(conn);
        goto err;
    }
    ep->conn = conn;
    return UCS_OK;

err:
    /* (memory, or a local resource the handshake needs) */
    ucs_error("crypt: cannot open a wire connection to peer "
              "%02x%02x%02x%02x: %s%s", ep->peer_static[0], ep->peer_static[1],
              ep->peer_static[2], ep->peer_static[3], ucs_status_string(status),
              crypt_local_failure_take());
    return status;
}

ucs_status_t uct_crypt_wire_ep_reconnect(uct_crypt_wire_ep_t *ep)
{
    ucs_assert(ep->conn == NULL);
    return uct_crypt_wire_ep_connect(ep);
}

static UCS_CLASS_INIT_FUNC(uct_crypt_wire_ep_t, const uct_ep_params_t *params)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(params->iface,
                                                   uct_crypt_wire_iface_t);

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    self->conn          = NULL;
    self->peer_left     = 0;
    self->fail_local    = 0;
    self->have_dest     = 0;
    self->have_peer     = 0;
    self->status        = UCS_OK;
    self->fail_reported = 0;
    self->dispatching   = 0;
    self->connect_retries = 0;
    ucs_queue_head_init(&self->pending);
    ucs_queue_head_init(&self->flushes);
    ucs_list_head_init(&self->busy); /* linked alone: not on the busy list */
    if ((params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR) &&
        (params->field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR)) {
        if (!uct_crypt_wire_dest(params->dev_addr, params->iface_addr,
                                 &self->dest)) {
            return UCS_ERR_INVALID_ADDR;
        }
        self->have_dest = 1;
    }
    ucs_list_add_tail(&iface->eps, &self->list);
    return UCS_OK;
}

/* Every flush waiting on `ep` completes with `status`; returns how many.
 * (not ucs_queue_for_each_extract: it computes the element of an empty
 * queue's NULL head, undefined behaviour that UBSan reports) */
static unsigned uct_crypt_wire_ep_complete_flushes(uct_crypt_wire_ep_t *ep,
                                                   ucs_status_t status)
{
    uct_crypt_wire_flush_t *flush;
    unsigned count = 0;

    while (!ucs_queue_is_empty(&ep->flushes)) {
        flush = ucs_queue_pull_elem_non_empty(&ep->flushes,
                                              uct_crypt_wire_flush_t, queue);
        uct_invoke_completion(flush->comp, status);
        ucs_free(flush);
        ++count;
    }
    return count;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_wire_ep_t)
{
    ucs_list_del(&self->list);
    ucs_list_del(&self->busy); /* (a no-op when not on the busy list) */
    if (self->conn != NULL) {
        /* a graceful end of our half: the peer learns that this is no
         * failure, and the count of records it should have; what the
         * socket did not take yet still goes, CLOSE last */
        uct_crypt_wire_conn_t *conn = self->conn;
        self->conn = NULL;
        uct_crypt_wire_conn_release(conn);
    }
    (void)uct_crypt_wire_ep_complete_flushes(self, UCS_ERR_CANCELED);
}

UCS_CLASS_DEFINE(uct_crypt_wire_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_wire_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_wire_ep_t, uct_ep_t);

ucs_status_t uct_crypt_wire_ep_set_peer(uct_ep_h tl_ep,
                                        const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN])
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);

    memcpy(ep->peer_static, peer_static, KEYEX_PUBLIC_KEY_LEN);
    ep->have_peer = 1;
    return uct_crypt_wire_ep_connect(ep);
}

const uint8_t *uct_crypt_wire_ep_secret(uct_ep_h tl_ep)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);

    return ((ep->conn != NULL) && uct_crypt_wire_conn_final(ep->conn)) ?
           ep->conn->secret : NULL;
}

int uct_crypt_wire_ep_failed_locally(uct_ep_h tl_ep)
{
    return ucs_derived_of(tl_ep, uct_crypt_wire_ep_t)->fail_local;
}

ucs_status_t uct_crypt_wire_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    /* connect-to-ep is connect-to-iface here: the ep address is the port */
    return uct_iface_get_address(tl_ep->iface, (uct_iface_addr_t*)addr);
}

ucs_status_t uct_crypt_wire_ep_connect_to_ep(uct_ep_h tl_ep,
                                             const uct_device_addr_t *dev_addr,
                                             const uct_ep_addr_t *ep_addr)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);

    if (!uct_crypt_wire_dest(dev_addr, ep_addr, &ep->dest)) {
        return UCS_ERR_INVALID_ADDR;
    }
    ep->have_dest = 1;
    return uct_crypt_wire_ep_connect(ep);
}

/* ---- failures -------------------------------------------------------------- */

void uct_crypt_wire_ep_failed(uct_crypt_wire_ep_t *ep, ucs_status_t status,
                              const char *reason)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                                   uct_crypt_wire_iface_t);
    char dest[64];

    if (ep->status != UCS_OK) {
        return;
    }
    ep->status = status;
    ucs_sockaddr_str((struct sockaddr*)&ep->dest, dest, sizeof(dest));
    ucs_snprintf_zero(ep->fail_reason, sizeof(ep->fail_reason),
                      "connection to %s (peer %02x%02x%02x%02x) ended: %s", dest,
                      ep->peer_static[0], ep->peer_static[1],
                      ep->peer_static[2], ep->peer_static[3], reason);
    ucs_debug("crypt: %s", ep->fail_reason); /* (reported from progress) */
    iface->ep_fail_pending = 1;
}

/* From progress: each failed ep reported once; UCP may destroy eps from
 * its handler, so the walk starts over after each call. */
void uct_crypt_wire_iface_report_failures(uct_crypt_wire_iface_t *iface)
{
    char reason[sizeof(((uct_crypt_wire_ep_t*)NULL)->fail_reason)];
    uct_crypt_wire_ep_t *ep;
    int peer_left;

    iface->ep_fail_pending = 0;
restart:
    ucs_list_for_each(ep, &iface->eps, list) {
        if ((ep->status != UCS_OK) && !ep->fail_reported) {
            ep->fail_reported = 1;
            /* (the handler may destroy the ep) */
            memcpy(reason, ep->fail_reason, sizeof(reason));
            peer_left = ep->peer_left;
            /* (ENDPOINT_TIMEOUT whatever the socket said, as UCX's tcp:
             * the reason is in ours) */
            if ((uct_iface_handle_ep_err(&iface->super.super, &ep->super.super,
                                         UCS_ERR_ENDPOINT_TIMEOUT) == UCS_OK) ||
                peer_left) {
                /* the handler took it, an error the application is told
                 * of, or nobody did but nothing was lost (the peer said
                 * CLOSE and left: the end of a job): no warning here
                 * (UCX's tcp is silent too; UCX's own tests fail on any
                 * warning); ours names the peer and the reason for
                 * whoever turns the log up */
                ucs_diag("crypt: %s", reason);
            } else {
                /* nobody above handles endpoint errors (UCP error mode
                 * "none"): say so plainly; what waits on this peer waits
                 * in vain, as over UCX's tcp (a failure of this process's
                 * own ends it above: uct_crypt_iface_inner_err) */
                ucs_error("crypt: %s; no error handler took it (UCP error "
                          "handling mode none): operations on this endpoint "
                          "will not complete", reason);
            }
            goto restart;
        }
    }
}

/* ---- sending ------------------------------------------------------------- */

/* Like UCX's tcp (tcp_ep.c, uct_tcp_ep_check_tx_res): no frame before the
 * connection is final (tcp: before CONNECTED), and a new frame only once
 * the kernel took every byte queued before it, so that a send UCP sees
 * complete leaves at most its own tail here, never a backlog: an
 * application that closes or stops progressing after its last send (a
 * barrier on a side channel, exit) strands nothing else. 0: not idle, or
 * the connection ended (ep->conn NULL). */
static int uct_crypt_wire_ep_tx_idle(uct_crypt_wire_ep_t *ep)
{
    uct_crypt_wire_conn_t *conn = ep->conn;

    if (!uct_crypt_wire_conn_final(conn)) {
        return 0;
    }
    return (conn->tx_len == 0) || (uct_crypt_wire_conn_flush(conn) > 0);
}

/* A send waits behind the pending queue, as on ud
 * (uct_ud_ep_is_connected_and_no_pending): resources that came back in a
 * progress call (a handshake's answer) go to the queue first, not to a
 * send made from a handler in that same call. UCP relies on it: its
 * wireup REPLY must not overtake the REQUEST queued before it. */
static inline int uct_crypt_wire_ep_behind_pending(const uct_crypt_wire_ep_t *ep)
{
    return !ucs_queue_is_empty(&ep->pending) && !ep->dispatching;
}

/* The connection to send on now, or a status for the caller */
static inline ucs_status_t uct_crypt_wire_ep_sendable(uct_crypt_wire_ep_t *ep,
                                                      uint8_t id,
                                                      uct_crypt_wire_conn_t **conn_p)
{
    if (ucs_unlikely(ep->status != UCS_OK)) {
        return ep->status;
    }
    if (ucs_unlikely(id != UCT_CRYPT_WIRE_AM_ID)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(ep->conn == NULL)) {
        return ep->have_dest && ep->have_peer ? UCS_ERR_CONNECTION_RESET :
                                                UCS_ERR_NO_RESOURCE;
    }
    if (uct_crypt_wire_ep_behind_pending(ep) || !uct_crypt_wire_ep_tx_idle(ep)) {
        return (ep->status != UCS_OK) ? ep->status :
               (ep->conn == NULL) ? UCS_ERR_CONNECTION_RESET : UCS_ERR_NO_RESOURCE;
    }
    *conn_p = ep->conn;
    return UCS_OK;
}

static void uct_crypt_wire_ep_sent(uct_crypt_wire_conn_t *conn)
{
    ucs_assert(uct_crypt_wire_conn_final(conn));
    (void)uct_crypt_wire_conn_flush(conn);
}

ucs_status_t uct_crypt_wire_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                        uint64_t header, const void *payload,
                                        unsigned length)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);
    uct_crypt_wire_conn_t *conn;
    ucs_status_t status;
    uint8_t *body;

    status = uct_crypt_wire_ep_sendable(ep, id, &conn);
    if (status != UCS_OK) {
        return status;
    }
    body = uct_crypt_wire_conn_tx_reserve(conn, sizeof(header) + length);
    if (body == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }
    memcpy(body, &header, sizeof(header));
    memcpy(body + sizeof(header), payload, length);
    uct_crypt_wire_conn_tx_commit(conn, CRYPT_WIRE_FRAME_RECORD,
                                  sizeof(header) + length);
    uct_crypt_wire_ep_sent(conn);
    return UCS_OK;
}

ssize_t uct_crypt_wire_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                   uct_pack_callback_t pack_cb, void *arg,
                                   unsigned flags)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);
    uct_crypt_wire_conn_t *conn;
    ucs_status_t status;
    size_t length;
    void *body;

    status = uct_crypt_wire_ep_sendable(ep, id, &conn);
    if (status != UCS_OK) {
        return status;
    }
    body = uct_crypt_wire_conn_tx_reserve(conn, UCT_CRYPT_WIRE_MAX_BCOPY);
    if (body == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }
    length = pack_cb(body, arg);
    ucs_assert(length <= UCT_CRYPT_WIRE_MAX_BCOPY);
    uct_crypt_wire_conn_tx_commit(conn, CRYPT_WIRE_FRAME_RECORD, length);
    uct_crypt_wire_ep_sent(conn);
    return length;
}

/* ---- bulk segments ---------------------------------------------------------- */

int uct_crypt_wire_ep_segment_room(uct_ep_h tl_ep, size_t record_max,
                                   size_t length)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);

    /* (the flush in tx_idle may end the connection: looked at again) */
    if ((ep->status != UCS_OK) || (ep->conn == NULL) ||
        uct_crypt_wire_ep_behind_pending(ep) ||
        (length > UCT_CRYPT_WIRE_MAX_BCOPY) || !uct_crypt_wire_ep_tx_idle(ep) ||
        (ep->conn == NULL)) {
        return 0;
    }
    /* the record goes through am_bcopy, which asks for a whole frame; the
     * segment's frame must then fit behind the record */
    return uct_crypt_wire_conn_tx_room(ep->conn, UCT_CRYPT_WIRE_MAX_BCOPY) &&
           uct_crypt_wire_conn_tx_room(ep->conn, CRYPT_WIRE_FRAME_HDR_LEN +
                                       record_max + length);
}

void *uct_crypt_wire_ep_segment_reserve(uct_ep_h tl_ep, size_t length)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);
    uct_crypt_wire_conn_t *conn;

    /* right behind its announcement, which may not have left yet: no
     * wait for the kernel here (segment_room made room for both) */
    if ((length > UCT_CRYPT_WIRE_MAX_BCOPY) || (ep->status != UCS_OK) ||
        ((conn = ep->conn) == NULL)) {
        return NULL;
    }
    return uct_crypt_wire_conn_tx_reserve(conn, length);
}

void uct_crypt_wire_ep_segment_commit(uct_ep_h tl_ep, size_t length)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);

    uct_crypt_wire_conn_tx_commit(ep->conn, CRYPT_WIRE_FRAME_SEGMENT, length);
    uct_crypt_wire_ep_sent(ep->conn);
}

/* ---- pending, flush -------------------------------------------------------- */

/* On the iface's busy list: progress looks at these eps only, not at
 * every ep on every call */
static void uct_crypt_wire_ep_mark_busy(uct_crypt_wire_ep_t *ep)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                                   uct_crypt_wire_iface_t);

    if (ucs_list_is_empty(&ep->busy)) {
        ucs_list_add_tail(&iface->busy_eps, &ep->busy);
    }
}

/* Room for a frame now: the kernel took everything before it (a flush
 * there may end the connection: looked at again) */
/* Room for a send, looked at without writing: as tcp's pending_add looks
 * at its tx buffer and writes nothing (uct_tcp_ep_check_tx_res), resources
 * come back in progress (uct_crypt_wire_ep_progress_tx), so a pending_add
 * right after NO_RESOURCE queues; UCX's test_uct_peer_failure.
 * purge_failed_peer counts on it (its first add returned BUSY once the
 * kernel had taken the bytes, and one request was counted twice) */
static int uct_crypt_wire_ep_has_room(uct_crypt_wire_ep_t *ep)
{
    uct_crypt_wire_conn_t *conn = ep->conn;

    return (conn != NULL) && uct_crypt_wire_conn_final(conn) &&
           (conn->tx_len == 0) &&
           uct_crypt_wire_conn_tx_room(conn, UCT_CRYPT_WIRE_MAX_BCOPY);
}

ucs_status_t uct_crypt_wire_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                           unsigned flags)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);

    if ((ep->status == UCS_OK) && ucs_queue_is_empty(&ep->pending) &&
        uct_crypt_wire_ep_has_room(ep)) {
        return UCS_ERR_BUSY; /* send now */
    }
    ucs_queue_push(&ep->pending, (ucs_queue_elem_t*)req->priv);
    uct_crypt_wire_ep_mark_busy(ep);
    return UCS_OK;
}

void uct_crypt_wire_ep_pending_purge(uct_ep_h tl_ep,
                                     uct_pending_purge_callback_t cb, void *arg)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);
    uct_pending_req_t *req;

    /* (a loop of its own, as in uct_crypt_wire_ep_complete_flushes) */
    while (!ucs_queue_is_empty(&ep->pending)) {
        req = ucs_queue_pull_elem_non_empty(&ep->pending, uct_pending_req_t,
                                            priv);
        if (cb != NULL) {
            cb(req, arg);
        }
    }
}

/* From the iface's progress: pending requests while there is room, then
 * the flushes that are done. Returns the number of requests dispatched. */
unsigned uct_crypt_wire_ep_progress_tx(uct_crypt_wire_ep_t *ep)
{
    uct_pending_req_t *req;
    ucs_status_t status;
    unsigned count = 0;

    /* what the kernel takes now is room again (released here, in progress) */
    if ((ep->conn != NULL) && uct_crypt_wire_conn_final(ep->conn) &&
        (ep->conn->tx_len > 0)) {
        (void)uct_crypt_wire_conn_flush(ep->conn);
    }
    while (!ucs_queue_is_empty(&ep->pending) &&
           (ep->status == UCS_OK) && uct_crypt_wire_ep_has_room(ep)) {
        req = ucs_queue_pull_elem_non_empty(&ep->pending, uct_pending_req_t,
                                            priv);
        ep->dispatching = 1;
        status          = req->func(req);
        ep->dispatching = 0;
        ++count;
        if (status == UCS_OK) {
            continue; /* done, and off the queue */
        }
        /* UCT's pending contract (uct.h, uct_pending_callback_t): kept
         * at the head either way; INPROGRESS goes on, anything else stops */
        ucs_queue_push_head(&ep->pending, (ucs_queue_elem_t*)req->priv);
        if (status != UCS_INPROGRESS) {
            break;
        }
    }

    if ((ep->status != UCS_OK) ||
        ((ep->conn != NULL) && uct_crypt_wire_conn_flushed(ep->conn))) {
        count += uct_crypt_wire_ep_complete_flushes(ep, ep->status);
    }
    if (ucs_queue_is_empty(&ep->pending) && ucs_queue_is_empty(&ep->flushes)) {
        ucs_list_del(&ep->busy);
        ucs_list_head_init(&ep->busy);
    }
    return count;
}

ucs_status_t uct_crypt_wire_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                     uct_completion_t *comp)
{
    uct_crypt_wire_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_wire_ep_t);
    uct_crypt_wire_flush_t *flush;

    if (ep->status != UCS_OK) {
        return ep->status;
    }
    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        return UCS_OK;
    }
    /* behind what waits, but not behind what waits behind it: UCP's own
     * flush request, dispatched from the head of the queue, asks again
     * (ucp_ep_flush_progress_pending); refused there, it stayed at the
     * head for ever, ahead of the sends its peer waited for */
    if (uct_crypt_wire_ep_behind_pending(ep)) {
        return UCS_ERR_NO_RESOURCE;
    }
    if ((ep->conn == NULL) || uct_crypt_wire_conn_flushed(ep->conn)) {
        return UCS_OK;
    }
    if (comp != NULL) {
        flush = ucs_malloc(sizeof(*flush), "crypt sock flush");
        if (flush == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
        flush->comp = comp;
        ucs_queue_push(&ep->flushes, &flush->queue);
        uct_crypt_wire_ep_mark_busy(ep);
    }
    return UCS_INPROGRESS;
}

ucs_status_t uct_crypt_wire_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    return UCS_OK; /* one ordered stream */
}

ucs_status_t uct_crypt_wire_ep_check(uct_ep_h tl_ep, unsigned flags,
                                     uct_completion_t *comp)
{
    /* liveness is the kernel's TCP keepalive (UCX_CRYPT_KEEPIDLE...), which
     * runs without progress; a connection it ends fails the ep from
     * progress. Here: what is already known. */
    return ucs_derived_of(tl_ep, uct_crypt_wire_ep_t)->status;
}
