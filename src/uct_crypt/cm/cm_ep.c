/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A connection manager's endpoints (cm.h), client and server: their
 * events on the worker's async context, their failures, the UCT calls of
 * the sockaddr flow (create, connect, notify, disconnect, query).
 */
#include "uct_crypt/cm/cm.h"

#include <ucs/async/async.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- state -------------------------------------------------------------- */

#define UCT_CRYPT_CM_EP_SERVER_ONLY (UCT_CRYPT_CM_EP_PROVEN | \
                                     UCT_CRYPT_CM_EP_CONN_REQ | \
                                     UCT_CRYPT_CM_EP_CREATED | \
                                     UCT_CRYPT_CM_EP_REJECTING)
#define UCT_CRYPT_CM_EP_CLIENT_ONLY (UCT_CRYPT_CM_EP_CONNECTING | \
                                     UCT_CRYPT_CM_EP_RESOLVED | \
                                     UCT_CRYPT_CM_EP_CONNECT_SENT)
/* set once: the handshake's end, and each of the user's callbacks */
#define UCT_CRYPT_CM_EP_ONCE        (UCT_CRYPT_CM_EP_KEYS | \
                                     UCT_CRYPT_CM_EP_PROVEN | \
                                     UCT_CRYPT_CM_EP_CONN_REQ | \
                                     UCT_CRYPT_CM_EP_CONNECTED | \
                                     UCT_CRYPT_CM_EP_HOLDING | \
                                     UCT_CRYPT_CM_EP_DISCONNECTED)

void uct_crypt_cm_ep_set(uct_crypt_cm_ep_t *ep, uint32_t bits)
{
    uint32_t state = ep->state | bits;

    ucs_assertv(!(ep->state & bits & UCT_CRYPT_CM_EP_ONCE),
                "crypt cm ep %p: state 0x%x set 0x%x again", ep, ep->state, bits);
    /* one role, and only its own bits */
    ucs_assert(!((state & UCT_CRYPT_CM_EP_SERVER) && (state & UCT_CRYPT_CM_EP_CLIENT)));
    ucs_assert(!(state & UCT_CRYPT_CM_EP_SERVER_ONLY) || (state & UCT_CRYPT_CM_EP_SERVER));
    ucs_assert(!(state & UCT_CRYPT_CM_EP_CLIENT_ONLY) || (state & UCT_CRYPT_CM_EP_CLIENT));
    /* the protocol's order: nothing the user hears before the handshake's
     * keys; an ep the server's user made or refused came as a request; a
     * disconnect only of what was connected */
    ucs_assert(!(state & (UCT_CRYPT_CM_EP_CONN_REQ | UCT_CRYPT_CM_EP_CONNECTED)) ||
               (state & UCT_CRYPT_CM_EP_KEYS));
    ucs_assert(!(state & (UCT_CRYPT_CM_EP_CREATED | UCT_CRYPT_CM_EP_REJECTING)) ||
               (state & UCT_CRYPT_CM_EP_CONN_REQ));
    ucs_assert(!(bits & (UCT_CRYPT_CM_EP_HOLDING | UCT_CRYPT_CM_EP_DISCONNECTED)) ||
               (state & UCT_CRYPT_CM_EP_CONNECTED));
    ucs_trace("crypt cm ep %p %s: state 0x%x + 0x%x", ep, ep->peer_name,
              ep->state, bits);
    ep->state = state;
}

/* ---- events ------------------------------------------------------------- */

void uct_crypt_cm_ep_events(uct_crypt_cm_ep_t *ep)
{
    ucs_event_set_types_t events = ep->dh_deferred ? 0 : UCS_EVENT_SET_EVREAD;
    struct epoll_event ev;

    if ((ep->state & UCT_CRYPT_CM_EP_CONNECTING) || (ep->tx_sent < ep->tx_len)) {
        events |= UCS_EVENT_SET_EVWRITE;
    }
    if (ep->state & UCT_CRYPT_CM_EP_IN_ROOM) {
        ev.events   = ((events & UCS_EVENT_SET_EVREAD) ? EPOLLIN : 0) |
                      ((events & UCS_EVENT_SET_EVWRITE) ? EPOLLOUT : 0);
        ev.data.ptr = ep;
        (void)epoll_ctl(uct_crypt_cm_ep_cm(ep)->room_fd, EPOLL_CTL_MOD, ep->fd, &ev);
        return;
    }
    (void)ucs_async_modify_handler(ep->fd, events);
}

/* Out of the room (called with the async context blocked, which the
 * room's handler runs under too: never while it runs) */
static void uct_crypt_cm_ep_leave_room(uct_crypt_cm_ep_t *ep)
{
    if (ep->state & UCT_CRYPT_CM_EP_IN_ROOM) {
        (void)epoll_ctl(uct_crypt_cm_ep_cm(ep)->room_fd, EPOLL_CTL_DEL, ep->fd,
                        NULL);
        ep->state &= ~UCT_CRYPT_CM_EP_IN_ROOM;
    }
}

static void uct_crypt_cm_ep_remove_handler(uct_crypt_cm_ep_t *ep)
{
    if (ep->state & UCT_CRYPT_CM_EP_IN_ROOM) {
        uct_crypt_cm_ep_leave_room(ep);
    } else if (!(ep->state & UCT_CRYPT_CM_EP_FAILED) && (ep->fd >= 0)) {
        (void)ucs_async_remove_handler(ep->fd, 1);
    }
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_FAILED);
}

void uct_crypt_cm_ep_invoke_resolve(uct_crypt_cm_ep_t *ep,
                                    ucs_status_t status)
{
    uct_cm_ep_resolve_args_t args;

    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_RESOLVED);
    args.field_mask = UCT_CM_EP_RESOLVE_ARGS_FIELD_DEV_NAME |
                      UCT_CM_EP_RESOLVE_ARGS_FIELD_STATUS;
    args.status     = status;
    ucs_strncpy_zero(args.dev_name, ep->dev_name, UCT_DEVICE_NAME_MAX);
    if (uct_cm_ep_resolve_cb(&ep->super, &args) != UCS_OK) {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CB_FAILED);
    }
}

/* Client: what ended a connection before its handshake was done, in the
 * words of what the server said (keyex_noise_refusal_msg_t: in clear, not
 * authenticated; it only picks the words) */
static const char *uct_crypt_cm_client_refusal(const uct_crypt_cm_ep_t *ep)
{
    switch (ep->refusal) {
    case KEYEX_NOISE_REFUSED_AUTH:
        return "the server refused the handshake: it holds another job "
               "secret (compare UCX_CRYPT_KEY_FILE on both sides)";
    case KEYEX_NOISE_REFUSED_BUSY:
        return "the server closed the connection unanswered: all its slots "
               "for connections still in their handshake were taken (a flood "
               "of connections at the server?); try again";
    case KEYEX_NOISE_REFUSED_LOCAL:
        return "the server failed to answer (its log says why)";
    default:
        return NULL;
    }
}

/* The connection is over for `status`: tell the user what tcp_sockcm
 * tells it in the same state, or, for a connection of ours, just end it.
 * The caller returns right after: the ep may be gone. */
void uct_crypt_cm_ep_fail(uct_crypt_cm_ep_t *ep, ucs_status_t status,
                          const char *why)
{
    uct_cm_remote_data_t remote_data;
    /* (a local failure was said already, at error level) */
    int said = !!(ep->state & UCT_CRYPT_CM_EP_LOCAL_FAILURE);

    if (uct_crypt_cm_ep_is_internal(ep)) {
        if (!(ep->state & UCT_CRYPT_CM_EP_REJECTING) && !said) {
            uct_crypt_cm_refused(ep, why);
        }
        uct_crypt_cm_ep_tell_refusal(ep);
        UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        return;
    }
    if (ep->state & UCT_CRYPT_CM_EP_FAILED) {
        return;
    }
    uct_crypt_cm_ep_remove_handler(ep);
    if (ep->state & UCT_CRYPT_CM_EP_CB_FAILED) {
        return; /* the user knows: its own callback failed */
    }

    if (ep->state & UCT_CRYPT_CM_EP_CONNECTED) {
        if (!said) {
            ucs_diag("crypt: connection manager: connection %s %s ended: %s",
                     (ep->state & UCT_CRYPT_CM_EP_SERVER) ? "from" : "to",
                     ep->peer_name, why);
        }
        if (!(ep->state & (UCT_CRYPT_CM_EP_DISCONNECTED |
                           UCT_CRYPT_CM_EP_HOLDING))) {
            uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_DISCONNECTED);
            uct_cm_ep_disconnect_cb(&ep->super);
        } /* (one held is reported when its data is in, or late) */
    } else if (ep->state & UCT_CRYPT_CM_EP_CLIENT) {
        if (ep->state & UCT_CRYPT_CM_EP_CONNECTING) {
            /* the network's answer (refused, unreachable): UCX_CRYPT_CM_FAILURE */
            uct_cm_peer_error(&uct_crypt_cm_ep_cm(ep)->super,
                              "crypt: connection manager: cannot connect to "
                              "%s: %s", ep->peer_name, why);
        } else if (said) {
            /* (said) */
        } else if (!(ep->state & UCT_CRYPT_CM_EP_KEYS)) {
            /* a listener that does not speak crypt's handshake under this
             * job's secret (a configuration to fix), or one that failed:
             * from here the two look alike, so both are named */
            /* a crypt server says why it refused; one that says nothing
             * is not crypt's (or of another version), or went away */
            ucs_error("crypt: connection manager: cannot connect to %s: %s%s",
                      ep->peer_name,
                      (uct_crypt_cm_client_refusal(ep) != NULL) ?
                      uct_crypt_cm_client_refusal(ep) : why,
                      (uct_crypt_cm_client_refusal(ep) != NULL) ? "" :
                      ", before the handshake was done, with no word from the "
                      "server: not a crypt server (or one of another "
                      "version), or one that went away");
        } else {
            uct_cm_peer_error(&uct_crypt_cm_ep_cm(ep)->super,
                              "crypt: connection manager: connection to %s "
                              "ended before it was established: %s",
                              ep->peer_name, why);
        }
        if (!(ep->state & UCT_CRYPT_CM_EP_RESOLVED) &&
            (ep->super.resolve_cb != NULL)) {
            uct_crypt_cm_ep_invoke_resolve(ep, status);
        } else {
            uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_RESOLVED);
            remote_data.field_mask = 0;
            uct_cm_ep_client_connect_cb(&ep->super, &remote_data, status);
        }
    } else if (ep->state & UCT_CRYPT_CM_EP_CREATED) {
        if (!said) {
            uct_cm_peer_error(&uct_crypt_cm_ep_cm(ep)->super,
                              "crypt: connection manager: connection from %s "
                              "ended before it was established: %s",
                              ep->peer_name, why);
        }
        uct_cm_ep_server_conn_notify_cb(&ep->super, status);
    }
    /* else a request the user holds: uct_ep_create or the reject tells */
}

ucs_status_t uct_crypt_cm_errno_status(int err)
{
    switch (err) {
    case ECONNREFUSED:
        return UCS_ERR_NOT_CONNECTED;
    case ECONNRESET:
    case EPIPE:
        return UCS_ERR_CONNECTION_RESET;
    case ETIMEDOUT:
    case ENETUNREACH:
    case EHOSTUNREACH:
        return UCS_ERR_UNREACHABLE;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

/* Write what is queued; after a DISCONNECT went out, our FIN */
ucs_status_t uct_crypt_cm_ep_flush_tx(uct_crypt_cm_ep_t *ep)
{
    ssize_t n;

    while (ep->tx_sent < ep->tx_len) {
        n = send(ep->fd, ep->tx_buf + ep->tx_sent, ep->tx_len - ep->tx_sent,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if ((errno == EAGAIN) || (errno == EWOULDBLOCK)) {
                return UCS_OK;
            } else if (errno == EINTR) {
                continue;
            }
            return uct_crypt_cm_errno_status(errno);
        }
        ep->tx_sent += n;
    }
    ep->tx_sent = ep->tx_len = 0;
    if ((ep->state & UCT_CRYPT_CM_EP_DISCONNECTING) &&
        !(ep->state & UCT_CRYPT_CM_EP_SHUT)) {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_SHUT);
        (void)shutdown(ep->fd, SHUT_WR);
    }
    return UCS_OK;
}

/* A local resource failed while `doing` (memory for secrets, a cipher
 * context, randomness, a key derivation: crypt_local_failure_take says
 * which). No peer and no network caused it: said at error level whoever's
 * connection it was, never counted as a refused stranger; the connection
 * ends as any other (the user is told, with UCS_ERR_IO_ERROR). */
void uct_crypt_cm_ep_fail_local(uct_crypt_cm_ep_t *ep, const char *doing)
{
    ucs_error("crypt: connection manager: connection %s %s: %s%s",
              (ep->state & UCT_CRYPT_CM_EP_SERVER) ? "from" : "to",
              ep->peer_name, doing, crypt_local_failure_take());
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_LOCAL_FAILURE);
    if (ep->state & UCT_CRYPT_CM_EP_SERVER) {
        ep->refusal = KEYEX_NOISE_REFUSED_LOCAL;
    }
    uct_crypt_cm_ep_fail(ep, UCS_ERR_IO_ERROR, doing);
}

/* ---- endpoints ---------------------------------------------------------------- */

/* Client: the handshake state and the first message (a server's
 * connection gets its state once its first message passed,
 * uct_crypt_cm_server_handshake) */
static ucs_status_t uct_crypt_cm_ep_start_handshake(uct_crypt_cm_ep_t *ep)
{
    ep->hs = keyex_secure_alloc(sizeof(*ep->hs));
    if ((ep->hs == NULL) ||
        (uct_crypt_cm_client_first_message(ep, NULL) != UCS_OK)) {
        /* the ep's creation fails with it: the user is told so */
        ucs_error("crypt: connection manager: connection to %s: cannot "
                  "start the handshake%s", ep->peer_name,
                  crypt_local_failure_take());
        return (ep->hs == NULL) ? UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

static ucs_status_t uct_crypt_cm_client_init(uct_crypt_cm_ep_t *ep,
                                             const uct_ep_params_t *params)
{
    uct_crypt_cm_t *cm          = uct_crypt_cm_ep_cm(ep);
    ucs_async_context_t *async  = uct_crypt_cm_async(cm);
    const struct sockaddr *addr = params->sockaddr->addr;
    ucs_status_t status;

    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CLIENT | UCT_CRYPT_CM_EP_CONNECTING);
    status = UCT_CM_SET_CB(params, UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT,
                           ep->super.client.connect_cb, params->sockaddr_cb_client,
                           uct_cm_ep_client_connect_callback_t, ucs_empty_function);
    if (status != UCS_OK) {
        return status;
    }
    ucs_sockaddr_str(addr, ep->peer_name, sizeof(ep->peer_name));
    status = uct_crypt_cm_ep_start_handshake(ep);
    if (status != UCS_OK) {
        return status;
    }
    ep->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ep->fd < 0) {
        ucs_error("crypt: connection manager: socket: %m");
        return UCS_ERR_IO_ERROR;
    }
    uct_crypt_wire_set_options(ep->fd, &cm->keepalive);
    if ((params->field_mask & UCT_EP_PARAM_FIELD_LOCAL_SOCKADDR) &&
        (bind(ep->fd, params->local_sockaddr->addr,
              params->local_sockaddr->addrlen) < 0)) {
        ucs_error("crypt: connection manager: cannot bind to the local "
                  "address given: %m");
        return UCS_ERR_IO_ERROR;
    }
    status = ucs_socket_connect(ep->fd, addr);
    if (UCS_STATUS_IS_ERR(status)) {
        return status;
    }
    return ucs_async_set_event_handler(async->mode, ep->fd,
                                       UCS_EVENT_SET_EVWRITE,
                                       uct_crypt_cm_ep_handler, ep, async);
}

/* What an ep holds, given back (cleanup, and a failed init, which UCS
 * does not clean up) */
static void uct_crypt_cm_ep_release(uct_crypt_cm_ep_t *ep, uct_crypt_cm_t *cm)
{
    uct_worker_progress_unregister_safe(&cm->super.iface.worker->super,
                                        &ep->hold_cb_id);
    ucs_free(ep->held);
    ep->held = NULL;
    uct_crypt_cm_ep_remove_handler(ep);
    if (ep->fd >= 0) {
        close(ep->fd);
        ep->fd = -1;
    }
    if (ep->hs != NULL) {
        keyex_noise_cleanup(ep->hs);
        keyex_secure_free(ep->hs, sizeof(*ep->hs));
        ep->hs = NULL;
    }
    crypt_aead_key_cleanup(&ep->tx_key);
    crypt_aead_key_cleanup(&ep->rx_key);
    if (ep->rx_buf != NULL) {
        crypt_wipe(ep->rx_buf, uct_crypt_cm_frame_max(cm));
    }
    ucs_free(ep->rx_buf);
    ucs_free(ep->tx_buf);
    ep->rx_buf = ep->tx_buf = NULL;
}

static UCS_CLASS_INIT_FUNC(uct_crypt_cm_ep_t, const uct_ep_params_t *params)
{
    uct_crypt_cm_t *cm;
    ucs_status_t status;

    UCS_CLASS_CALL_SUPER_INIT(uct_cm_base_ep_t, params);

    cm             = uct_crypt_cm_ep_cm(self);
    self->fd       = -1;
    self->state    = 0;
    self->listener = NULL;
    self->hs       = NULL;
    self->rx_have  = 0;
    self->tx_len   = self->tx_sent = 0;
    self->tx_count = self->rx_count = 0;
    self->cookie_rounds = 0;
    self->dh_deferred   = 0;
    self->retry_round   = 0;
    self->refusal       = 0;
    self->held          = NULL;
    self->held_count    = 0;
    self->hold_cb_id    = UCS_CALLBACKQ_ID_NULL;
    memset(self->peer_data_key, 0, sizeof(self->peer_data_key));
    memset(self->init_tag, 0, sizeof(self->init_tag));
    self->deadline = ucs_get_time() + cm->handshake_timeout;
    memset(&self->tx_key, 0, sizeof(self->tx_key));
    memset(&self->rx_key, 0, sizeof(self->rx_key));
    ucs_strncpy_zero(self->peer_name, "<unknown>", sizeof(self->peer_name));
    self->dev_name[0] = '\0';
    /* two frames may wait (an ACCEPT behind the handshake's response, a
     * DISCONNECT behind a NOTIFY) */
    self->tx_cap = 2 * uct_crypt_cm_frame_max(cm);
    self->rx_buf = ucs_malloc(uct_crypt_cm_frame_max(cm), "crypt cm rx");
    self->tx_buf = ucs_malloc(self->tx_cap, "crypt cm tx");
    if ((self->rx_buf == NULL) || (self->tx_buf == NULL)) {
        status = UCS_ERR_NO_MEMORY;
    } else if (params->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR) {
        status = uct_crypt_cm_client_init(self, params);
    } else {
        /* no state until it proves */
        uct_crypt_cm_ep_set(self, UCT_CRYPT_CM_EP_SERVER);
        status       = UCS_OK;
    }
    if (status == UCS_OK) {
        status = uct_crypt_cm_timer_arm(cm); /* the handshake's deadline */
    }
    if (status != UCS_OK) {
        /* no handler, or gone with it */
        uct_crypt_cm_ep_set(self, UCT_CRYPT_CM_EP_FAILED);
        if (self->fd >= 0) {
            (void)ucs_async_remove_handler(self->fd, 1);
        }
        uct_crypt_cm_ep_release(self, cm);
        return status;
    }
    ucs_list_add_tail(&cm->eps, &self->list);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_cm_ep_t)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(self);

    UCS_ASYNC_BLOCK(uct_crypt_cm_async(cm));
    if ((self->state & UCT_CRYPT_CM_EP_SERVER) &&
        !(self->state & UCT_CRYPT_CM_EP_CONN_REQ)) {
        if (self->state & UCT_CRYPT_CM_EP_PROVEN) {
            /* a DH for a client that never sent its CONNECT: an old
             * replay, or an honest client that went away */
            --cm->proven;
            UCT_CRYPT_STAT_ADD(stranger_dh, 1);
            uct_crypt_cookies_stranger(&cm->cookies,
                                       ucs_time_to_sec(ucs_get_time()));
        } else if (uct_crypt_cm_ep_wait(self) == UCT_CRYPT_CM_WAIT_COOKIED) {
            --cm->cookied; /* a cookie reply, no DH */
        } else {
            --cm->half_open;
        }
    }
    ucs_list_del(&self->list);
    uct_crypt_cm_ep_release(self, cm);
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(cm));
}

UCS_CLASS_DEFINE(uct_crypt_cm_ep_t, uct_cm_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_cm_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_cm_ep_t, uct_ep_t);

/* Server: the user answers a connection request with an ep */
static ucs_status_t uct_crypt_cm_server_create(uct_crypt_cm_ep_t *ep,
                                               const uct_ep_params_t *params)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uct_crypt_cm_t *new_cm;
    ucs_async_context_t *async;
    ucs_status_t status;

    if (!(params->field_mask & UCT_EP_PARAM_FIELD_CM) || (params->cm == NULL)) {
        ucs_error("crypt: connection manager: uct_ep_create on a connection "
                  "request needs UCT_EP_PARAM_FIELD_CM");
        return UCS_ERR_INVALID_PARAM;
    }
    if (ep->state & UCT_CRYPT_CM_EP_FAILED) {
        return UCS_ERR_CONNECTION_RESET;
    }
    status = uct_cm_ep_set_common_data(&ep->super, params);
    if (status != UCS_OK) {
        return status;
    }
    status = UCT_CM_SET_CB(params, UCT_EP_PARAM_FIELD_SOCKADDR_NOTIFY_CB_SERVER,
                           ep->super.server.notify_cb, params->sockaddr_cb_server,
                           uct_cm_ep_server_conn_notify_callback_t,
                           ucs_empty_function);
    if (status != UCS_OK) {
        return status;
    }

    /* the user's now: out of the listener's room, into a handler of its
     * own on the async context of the user's cm (maybe another worker's) */
    uct_crypt_cm_ep_leave_room(ep);
    if (params->cm != &cm->super) {
        new_cm = ucs_derived_of(params->cm, uct_crypt_cm_t);
        ucs_list_del(&ep->list);
        uct_ep_set_iface(&ep->super.super.super, &new_cm->super.iface.super);
        ucs_list_add_tail(&new_cm->eps, &ep->list);
        cm = new_cm;
    }
    async  = uct_crypt_cm_async(cm);
    status = ucs_async_set_event_handler(async->mode, ep->fd,
                                         UCS_EVENT_SET_EVREAD,
                                         uct_crypt_cm_ep_handler, ep, async);
    if (status != UCS_OK) {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_FAILED);
        return status;
    }

    if (ucs_test_all_flags(params->field_mask, UCT_EP_PARAM_FIELD_PRIV_DATA |
                                               UCT_EP_PARAM_FIELD_PRIV_DATA_LENGTH)) {
        status = uct_crypt_cm_ep_queue_addresses(ep, CRYPT_CM_FRAME_ACCEPT,
                                                 params->private_data,
                                                 params->private_data_length);
    } else if (params->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB) {
        status = uct_crypt_cm_ep_queue_packed(ep, CRYPT_CM_FRAME_ACCEPT);
    } else {
        status = uct_crypt_cm_ep_queue_addresses(ep, CRYPT_CM_FRAME_ACCEPT,
                                                 NULL, 0);
    }
    if (status != UCS_OK) {
        return status;
    }
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CREATED);
    status = uct_crypt_cm_ep_flush_tx(ep);
    if (status != UCS_OK) {
        return status;
    }
    uct_crypt_cm_ep_events(ep);
    return UCS_OK;
}

ucs_status_t uct_crypt_cm_ep_create(const uct_ep_params_t *params,
                                    uct_ep_h *ep_p)
{
    uct_crypt_cm_ep_t *ep;
    ucs_async_context_t *async;
    ucs_status_t status;

    if (params->field_mask & UCT_EP_PARAM_FIELD_SOCKADDR) {
        return UCS_CLASS_NEW_FUNC_NAME(uct_crypt_cm_ep_t)(params, ep_p);
    }
    if (!(params->field_mask & UCT_EP_PARAM_FIELD_CONN_REQUEST)) {
        ucs_error("crypt: connection manager: uct_ep_create needs a socket "
                  "address or a connection request");
        return UCS_ERR_INVALID_PARAM;
    }

    ep    = (uct_crypt_cm_ep_t*)params->conn_request;
    async = uct_crypt_cm_async(uct_crypt_cm_ep_cm(ep));
    UCS_ASYNC_BLOCK(async);
    status = uct_crypt_cm_server_create(ep, params);
    UCS_ASYNC_UNBLOCK(async);
    if (status != UCS_OK) {
        UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        return status;
    }
    *ep_p = &ep->super.super.super;
    return UCS_OK;
}

/* Client: UCP's private data, once resolve_cb told it the device */
ucs_status_t uct_crypt_cm_ep_connect(uct_ep_h tl_ep,
                                     const uct_ep_connect_params_t *params)
{
    uct_crypt_cm_ep_t *ep      = ucs_derived_of(tl_ep, uct_crypt_cm_ep_t);
    ucs_async_context_t *async = uct_crypt_cm_async(uct_crypt_cm_ep_cm(ep));
    const void *priv;
    size_t priv_len;
    ucs_status_t status;

    uct_ep_connect_params_get(params, &priv, &priv_len);
    UCS_ASYNC_BLOCK(async);
    if (ep->state & UCT_CRYPT_CM_EP_FAILED) {
        status = UCS_ERR_NOT_CONNECTED;
    } else if (!(ep->state & UCT_CRYPT_CM_EP_RESOLVED) ||
               (ep->state & UCT_CRYPT_CM_EP_CONNECT_SENT)) {
        status = UCS_ERR_INVALID_PARAM;
    } else {
        status = uct_crypt_cm_ep_queue_addresses(ep, CRYPT_CM_FRAME_CONNECT,
                                                 priv, priv_len);
        if (status == UCS_OK) {
            uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CONNECT_SENT);
            status     = uct_crypt_cm_ep_flush_tx(ep);
        }
        if (status == UCS_OK) {
            uct_crypt_cm_ep_events(ep);
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

ucs_status_t uct_crypt_cm_ep_conn_notify(uct_ep_h tl_ep)
{
    uct_crypt_cm_ep_t *ep      = ucs_derived_of(tl_ep, uct_crypt_cm_ep_t);
    ucs_async_context_t *async = uct_crypt_cm_async(uct_crypt_cm_ep_cm(ep));
    ucs_status_t status;

    UCS_ASYNC_BLOCK(async);
    if (ep->state & (UCT_CRYPT_CM_EP_DISCONNECTING | UCT_CRYPT_CM_EP_FAILED)) {
        status = UCS_ERR_NOT_CONNECTED;
    } else {
        status = uct_crypt_cm_ep_queue_frame(ep, CRYPT_CM_FRAME_NOTIFY, NULL, 0,
                                             NULL, 0);
        if (status == UCS_OK) {
            status = uct_crypt_cm_ep_flush_tx(ep);
        }
        if (status == UCS_OK) {
            uct_crypt_cm_ep_events(ep);
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

/* ---- a disconnect after the data ----------------------------------------
 * UCP 1.13 fails a connected ep when its peer disconnects and drops the
 * stream data it holds for the application
 * (ucp_ep_cm_remote_disconnect_progress); the peer's last data may still
 * be on the data connections, which this socket can overtake. So a
 * DISCONNECT names where the sender's flows to our data iface ended, and
 * the disconnect callback waits until they have delivered that far (in
 * the worker's progress, where records are delivered), or until the
 * handshake's deadline (UCX_CRYPT_CM_HANDSHAKE_TIMEOUT) passes. */

void uct_crypt_cm_ep_report_disconnect(uct_crypt_cm_ep_t *ep)
{
    uct_worker_progress_unregister_safe(
            &uct_crypt_cm_ep_cm(ep)->super.iface.worker->super, &ep->hold_cb_id);
    ucs_free(ep->held);
    ep->held       = NULL;
    ep->held_count = 0;
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_DISCONNECTED);
    uct_cm_ep_disconnect_cb(&ep->super);
}

static unsigned uct_crypt_cm_ep_hold_progress(void *arg)
{
    uct_crypt_cm_ep_t *ep      = arg;
    uct_crypt_cm_t *cm         = uct_crypt_cm_ep_cm(ep);
    ucs_async_context_t *async = uct_crypt_cm_async(cm);
    unsigned reported          = 0;

    UCS_ASYNC_BLOCK(async);
    if (uct_crypt_cm_ep_held(ep) &&
        uct_crypt_flows_delivered(&cm->super.iface.worker->super, ep->dev_name,
                                  ep->held, ep->held_count)) {
        uct_crypt_cm_ep_report_disconnect(ep);
        reported = 1;
    }
    UCS_ASYNC_UNBLOCK(async);
    return reported;
}

void uct_crypt_cm_ep_peer_disconnected(uct_crypt_cm_ep_t *ep,
                                       const crypt_cm_flow_mark_t *marks,
                                       unsigned count)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);

    ucs_debug("crypt: connection manager: %s disconnected (%u flows named)",
              ep->peer_name, count);
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_HOLDING);
    if (count > 0) {
        ep->held = ucs_malloc(count * sizeof(*marks), "crypt cm held");
    }
    if ((ep->held == NULL) || (uct_crypt_cm_timer_arm(cm) != UCS_OK)) {
        /* (nothing named, or no room to wait: as before, at once) */
        uct_crypt_cm_ep_report_disconnect(ep);
        return;
    }
    memcpy(ep->held, marks, count * sizeof(*marks));
    ep->held_count = count;
    ep->deadline   = ucs_get_time() + cm->handshake_timeout;
    uct_worker_progress_register_safe(&cm->super.iface.worker->super,
                                      uct_crypt_cm_ep_hold_progress, ep, 0,
                                      &ep->hold_cb_id);
    /* a worker asleep in ucp_worker_wait runs it now, not at its next
     * event or the deadline (the data may be in already) */
    uct_crypt_iface_wake(&cm->super.iface.worker->super, ep->dev_name);
}

ucs_status_t uct_crypt_cm_ep_disconnect(uct_ep_h tl_ep, unsigned flags)
{
    uct_crypt_cm_ep_t *ep      = ucs_derived_of(tl_ep, uct_crypt_cm_ep_t);
    uct_crypt_cm_t *cm         = uct_crypt_cm_ep_cm(ep);
    ucs_async_context_t *async = uct_crypt_cm_async(cm);
    crypt_cm_flow_mark_t marks[CRYPT_CM_DISCONNECT_MARKS_MAX];
    unsigned count;
    ucs_status_t status;

    UCS_ASYNC_BLOCK(async);
    if ((ep->state & UCT_CRYPT_CM_EP_FAILED) &&
        !(ep->state & (UCT_CRYPT_CM_EP_DISCONNECTED | UCT_CRYPT_CM_EP_HOLDING))) {
        /* (failed, not ended by the peer's DISCONNECT: its FIN after that
         * fails the socket too, and the peer still waits for ours) */
        status = UCS_ERR_NOT_CONNECTED;
    } else if (ep->state & UCT_CRYPT_CM_EP_DISCONNECTING) {
        status = (ep->state & UCT_CRYPT_CM_EP_DISCONNECTED) ?
                 UCS_ERR_NOT_CONNECTED : UCS_INPROGRESS;
    } else if (!(ep->state & UCT_CRYPT_CM_EP_CONNECTED)) {
        status = UCS_ERR_BUSY;
    } else {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_DISCONNECTING);
        status = UCS_OK;
        /* A sealed DISCONNECT, then our FIN once it left. Also after the
         * peer's own end was read (DISCONNECTED, handler gone): the peer
         * waits for ours to complete its close, as tcp_sockcm's peer waits
         * for the shutdown that uct_tcp_sockcm_ep_disconnect always makes. */
        count = uct_crypt_flow_marks(&cm->super.iface.worker->super,
                                     ep->dev_name, ep->peer_data_key, marks,
                                     CRYPT_CM_DISCONNECT_MARKS_MAX);
        if ((uct_crypt_cm_ep_queue_frame(ep, CRYPT_CM_FRAME_DISCONNECT, marks,
                                         count * sizeof(*marks), NULL,
                                         0) != UCS_OK) ||
            (uct_crypt_cm_ep_flush_tx(ep) != UCS_OK) ||
            (ep->state & UCT_CRYPT_CM_EP_FAILED)) {
            /* (no handler left to finish a partial frame: the FIN now;
             * the peer reads a cut frame and then its end as a disconnect) */
            (void)shutdown(ep->fd, SHUT_WR);
        } else {
            uct_crypt_cm_ep_events(ep);
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

ucs_status_t uct_crypt_cm_ep_query(uct_ep_h tl_ep, uct_ep_attr_t *attr)
{
    uct_crypt_cm_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_cm_ep_t);
    socklen_t len;

    if (attr->field_mask & UCT_EP_ATTR_FIELD_LOCAL_SOCKADDR) {
        len = sizeof(attr->local_address);
        if (getsockname(ep->fd, (struct sockaddr*)&attr->local_address, &len) < 0) {
            return UCS_ERR_IO_ERROR;
        }
    }
    if (attr->field_mask & UCT_EP_ATTR_FIELD_REMOTE_SOCKADDR) {
        len = sizeof(attr->remote_address);
        if (getpeername(ep->fd, (struct sockaddr*)&attr->remote_address, &len) < 0) {
            return UCS_ERR_IO_ERROR;
        }
    }
    return UCS_OK;
}

