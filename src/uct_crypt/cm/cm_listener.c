/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection manager's listener (cm.h): what a stranger's connection
 * gets before its first message passed (a place in the room, a deadline,
 * and, when the places are taken, what waits is read before a silent one
 * goes), and the listener's UCT calls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
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

/* ---- listener ----------------------------------------------------------------- */

/* The room: every server connection from its accept until the user has
 * its request lives in one epoll set, with one handler on UCX's async
 * context. With a handler per connection, a stranger's flood (thousands
 * of connections a second, each added and removed) overflowed UCX 1.13's
 * queue of events missed while the context was blocked, which is fatal
 * there (ucs_async_handler_dispatch: "Failed to push event to miss
 * queue"): a stranger aborted the server. One event at a time: handling
 * one may end another, which leaves the set before it could be returned. */
static void uct_crypt_cm_room_handler(int fd, ucs_event_set_types_t events,
                                      void *arg)
{
    uct_crypt_cm_t *cm = arg;
    ucs_event_set_types_t ucs_events;
    struct epoll_event ev;
    int budget = 256; /* then the next call: other handlers get their turn */

    while ((budget-- > 0) && (epoll_wait(cm->room_fd, &ev, 1, 0) == 1)) {
        ucs_events = ((ev.events & EPOLLIN) ? UCS_EVENT_SET_EVREAD : 0) |
                     ((ev.events & EPOLLOUT) ? UCS_EVENT_SET_EVWRITE : 0) |
                     ((ev.events & (EPOLLERR | EPOLLHUP)) ? UCS_EVENT_SET_EVERR : 0);
        uct_crypt_cm_ep_handler(((uct_crypt_cm_ep_t*)ev.data.ptr)->fd,
                                ucs_events, ev.data.ptr);
    }
}

/* A server ep still in the listener's hands, in set `wait` */
static int uct_crypt_cm_ep_waiting(const uct_crypt_cm_ep_t *ep,
                                   uct_crypt_cm_wait_t wait)
{
    return (ep->state & UCT_CRYPT_CM_EP_SERVER) &&
           !(ep->state & (UCT_CRYPT_CM_EP_CONN_REQ | UCT_CRYPT_CM_EP_FAILED)) &&
           (uct_crypt_cm_ep_wait(ep) == wait);
}

/* The oldest of set `wait` of the source address that holds the most of
 * its oldest 64 (uct_crypt_admit_victim), or NULL when the set is empty */
static uct_crypt_cm_ep_t *uct_crypt_cm_listener_victim(uct_crypt_cm_t *cm,
                                                       uct_crypt_cm_wait_t wait)
{
    const struct sockaddr_storage **sources = cm->admit_sources;
    uct_crypt_cm_ep_t **members             = cm->admit_silent;
    uct_crypt_cm_ep_t *ep;
    size_t count = 0;

    ucs_list_for_each(ep, &cm->eps, list) { /* oldest first */
        if (uct_crypt_cm_ep_waiting(ep, wait) &&
            (count < UCT_CRYPT_CM_MAX_HALF_OPEN)) {
            members[count] = ep;
            sources[count] = &ep->peer_addr;
            ++count;
        }
    }
    return (count > 0) ? members[uct_crypt_admit_victim(sources, count)] : NULL;
}

/* Set `wait`, holding `held` of `max`, is full: its victim goes; a silent
 * half-open one hears "busy" first */
static void uct_crypt_cm_listener_evict(uct_crypt_cm_t *cm, uct_crypt_cm_wait_t wait,
                                        unsigned held, unsigned max,
                                        const char *reason)
{
    uct_crypt_cm_ep_t *ep;

    if ((held < max) || ((ep = uct_crypt_cm_listener_victim(cm, wait)) == NULL)) {
        return;
    }
    uct_crypt_cm_refused(ep, reason);
    if (wait == UCT_CRYPT_CM_WAIT_HALF_OPEN) {
        ep->refusal = KEYEX_NOISE_REFUSED_BUSY;
        uct_crypt_cm_ep_tell_refusal(ep);
    }
    UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
}

/* Room for one more half-open connection. What the half-open ones sent is
 * read first (an honest client's first message follows its TCP handshake
 * at once: reading it takes the connection out of the set); then, while
 * they are still all taken, a silent one goes: the oldest of the source
 * address that holds the most. Proven and cookied ones, bounded apart,
 * make room only among themselves: an honest client sends its CONNECT (or
 * its answer to the cookie) one round trip later, a replay never does.
 * The proven go by the same rule as the half-open: a job-secret holder
 * that proves connection upon connection and never sends CONNECT took
 * them oldest first, and every honest client between its DH and its
 * CONNECT lost its connection (the red team's R3, 2026-12-02). The
 * cookied go by it too, among their oldest 64: a job-secret holder's
 * connections waiting for their host's share of DHs are its own cost. */
static void uct_crypt_cm_listener_make_room(uct_crypt_cm_t *cm)
{
    if (cm->half_open >= UCT_CRYPT_CM_MAX_HALF_OPEN) {
        /* what the room's epoll says is readable: a read on each of them
         * was a system call per half-open connection per accept */
        uct_crypt_cm_room_handler(cm->room_fd, UCS_EVENT_SET_EVREAD, cm);
    }
    uct_crypt_cm_listener_evict(cm, UCT_CRYPT_CM_WAIT_HALF_OPEN, cm->half_open,
                                UCT_CRYPT_CM_MAX_HALF_OPEN,
                                "half-open connections all taken; a silent one "
                                "of the address that held the most was closed "
                                "(64 at most)");
    uct_crypt_cm_listener_evict(cm, UCT_CRYPT_CM_WAIT_PROVEN, cm->proven,
                                UCT_CRYPT_CM_MAX_HALF_OPEN,
                                "connections waiting for their CONNECT all "
                                "taken; the oldest of the address that held "
                                "the most was closed (64 at most)");
    uct_crypt_cm_listener_evict(cm, UCT_CRYPT_CM_WAIT_COOKIED, cm->cookied,
                                UCT_CRYPT_CM_MAX_COOKIED,
                                "connections waiting for the answer to a cookie "
                                "(or their host's turn) all taken; one of the "
                                "address that held the most was closed");
}

static void uct_crypt_cm_listener_accept(int fd, ucs_event_set_types_t events,
                                         void *arg)
{
    uct_crypt_cm_listener_t *listener = arg;
    uct_crypt_cm_t *cm = ucs_derived_of(listener->super.cm, uct_crypt_cm_t);
    struct sockaddr_storage peer;
    struct epoll_event ev;
    char name[UCS_SOCKADDR_STRING_LEN];
    uct_ep_params_t params;
    uct_crypt_cm_ep_t *ep;
    ucs_status_t status;
    socklen_t len;
    uct_ep_h tl_ep;
    int conn;

    for (;;) {
        len  = sizeof(peer);
        conn = accept4(fd, (struct sockaddr*)&peer, &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (conn < 0) {
            return; /* EAGAIN, or out of descriptors: try at the next event */
        }
        uct_crypt_cm_listener_make_room(cm);

        params.field_mask        = UCT_EP_PARAM_FIELD_CM |
                                   UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS;
        params.cm                = &cm->super;
        params.sockaddr_cb_flags = UCT_CB_FLAG_ASYNC;
        status = UCS_CLASS_NEW_FUNC_NAME(uct_crypt_cm_ep_t)(&params, &tl_ep);
        if (status != UCS_OK) {
            ucs_sockaddr_str((struct sockaddr*)&peer, name, sizeof(name));
            ucs_error("crypt: connection manager: cannot take the connection "
                      "from %s: %s%s", name, ucs_status_string(status),
                      crypt_local_failure_take());
            close(conn);
            continue;
        }
        ep           = ucs_derived_of(tl_ep, uct_crypt_cm_ep_t);
        ep->fd       = conn;
        ep->listener = listener;
        memcpy(&ep->peer_addr, &peer, sizeof(peer));
        ++cm->half_open;
        ucs_sockaddr_str((struct sockaddr*)&peer, ep->peer_name,
                         sizeof(ep->peer_name));
        uct_crypt_wire_set_options(conn, &cm->keepalive);
        ev.events   = EPOLLIN;
        ev.data.ptr = ep;
        if (epoll_ctl(cm->room_fd, EPOLL_CTL_ADD, conn, &ev) < 0) {
            uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_FAILED);
            UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(tl_ep);
            continue;
        }
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_IN_ROOM);
    }
}

/* What a cm needs to serve, made with its first listener: the room, the
 * state every handshake starts from and the scratch state where first
 * messages are checked, the lists of the make-room step (sized by
 * UCT_CRYPT_CM_MAX_HALF_OPEN: on the heap, not the stack) */
void uct_crypt_cm_server_cleanup(uct_crypt_cm_t *cm)
{
    keyex_noise_t **state[] = {&cm->start, &cm->scratch};
    size_t i;

    for (i = 0; i < ucs_static_array_size(state); ++i) {
        if (*state[i] != NULL) {
            keyex_noise_cleanup(*state[i]);
            keyex_secure_free(*state[i], sizeof(**state[i]));
            *state[i] = NULL;
        }
    }
    keyex_secure_free(cm->cookie_key, KEYEX_SECRET_LEN);
    cm->cookie_key = NULL;
    uct_crypt_cookies_cleanup(&cm->cookies);
    ucs_free(cm->admit_sources);
    ucs_free(cm->admit_silent);
    cm->admit_sources = NULL;
    cm->admit_silent  = NULL;
}

static ucs_status_t uct_crypt_cm_server_init(uct_crypt_cm_t *cm)
{
    ucs_async_context_t *async = uct_crypt_cm_async(cm);
    ucs_status_t status        = UCS_OK;
    int fd;

    UCS_ASYNC_BLOCK(async);
    if (cm->scratch == NULL) {
        cm->start         = keyex_secure_alloc(sizeof(*cm->start));
        cm->scratch       = keyex_secure_alloc(sizeof(*cm->scratch));
        cm->admit_sources = ucs_calloc(UCT_CRYPT_CM_MAX_HALF_OPEN,
                                       sizeof(*cm->admit_sources), "crypt cm");
        cm->admit_silent  = ucs_calloc(UCT_CRYPT_CM_MAX_HALF_OPEN,
                                       sizeof(*cm->admit_silent), "crypt cm");
        cm->cookie_key    = keyex_secure_alloc(KEYEX_SECRET_LEN);
        uct_crypt_cookies_init(&cm->cookies, uct_crypt_handshake_rate(),
                               ucs_time_to_sec(ucs_get_time()));
        if ((cm->start == NULL) || (cm->scratch == NULL) ||
            (cm->admit_sources == NULL) || (cm->admit_silent == NULL) ||
            (cm->cookie_key == NULL) ||
            (keyex_noise_cm_start(cm->start, uct_crypt_job_secret) != KEYEX_OK) ||
            (keyex_noise_cookie_key(uct_crypt_job_secret, NULL,
                                    cm->cookie_key) != KEYEX_OK)) {
            ucs_error("crypt: connection manager: cannot listen: no memory "
                      "for its handshake state%s", crypt_local_failure_take());
            uct_crypt_cm_server_cleanup(cm);
            status = UCS_ERR_NO_MEMORY;
        }
    }
    if ((status == UCS_OK) && (cm->room_fd < 0)) {
        fd = epoll_create1(EPOLL_CLOEXEC);
        if ((fd < 0) ||
            (ucs_async_set_event_handler(async->mode, fd, UCS_EVENT_SET_EVREAD,
                                         uct_crypt_cm_room_handler, cm,
                                         async) != UCS_OK)) {
            ucs_error("crypt: connection manager: cannot listen: cannot watch "
                      "its connections: %m");
            if (fd >= 0) {
                close(fd);
            }
            status = UCS_ERR_IO_ERROR;
        } else {
            cm->room_fd = fd;
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

static UCS_CLASS_INIT_FUNC(uct_crypt_cm_listener_t, uct_cm_h cm,
                           const struct sockaddr *saddr, socklen_t socklen,
                           const uct_listener_params_t *params)
{
    uct_crypt_cm_t *crypt_cm   = ucs_derived_of(cm, uct_crypt_cm_t);
    ucs_async_context_t *async = uct_crypt_cm_async(crypt_cm);
    char name[UCS_SOCKADDR_STRING_LEN];
    ucs_status_t status;
    int backlog;

    UCS_CLASS_CALL_SUPER_INIT(uct_listener_t, cm);

    self->conn_request_cb = params->conn_request_cb;
    self->user_data       = (params->field_mask & UCT_LISTENER_PARAM_FIELD_USER_DATA) ?
                            params->user_data : NULL;
    status = uct_crypt_cm_server_init(crypt_cm);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_listener_backlog_adjust(params, ucs_socket_max_conn(), &backlog);
    if (status != UCS_OK) {
        return status;
    }
    status = ucs_socket_server_init(saddr, socklen, backlog, 0,
                                    crypt_cm->super.config.reuse_addr,
                                    &self->fd);
    if (status != UCS_OK) {
        return status;
    }
    status = ucs_async_set_event_handler(async->mode, self->fd,
                                         UCS_EVENT_SET_EVREAD,
                                         uct_crypt_cm_listener_accept, self,
                                         async);
    if (status != UCS_OK) {
        close(self->fd);
        return status;
    }
    ucs_debug("crypt: connection manager listening on %s",
              ucs_sockaddr_str(saddr, name, sizeof(name)));
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_cm_listener_t)
{
    uct_crypt_cm_t *cm = ucs_derived_of(self->super.cm, uct_crypt_cm_t);
    uct_crypt_cm_ep_t *ep, *tmp;

    (void)ucs_async_remove_handler(self->fd, 1);
    close(self->fd);
    UCS_ASYNC_BLOCK(uct_crypt_cm_async(cm));
    ucs_list_for_each_safe(ep, tmp, &cm->eps, list) {
        if (ep->listener == self) {
            UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        }
    }
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(cm));
}

UCS_CLASS_DEFINE(uct_crypt_cm_listener_t, uct_listener_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_cm_listener_t, uct_listener_t, uct_cm_h,
                                 const struct sockaddr*, socklen_t,
                                 const uct_listener_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_cm_listener_t, uct_listener_t);

ucs_status_t uct_crypt_cm_listener_reject(uct_listener_h tl_listener,
                                          uct_conn_request_h conn_request)
{
    uct_crypt_cm_ep_t *ep      = (uct_crypt_cm_ep_t*)conn_request;
    ucs_async_context_t *async = uct_crypt_cm_async(uct_crypt_cm_ep_cm(ep));
    ucs_status_t status;

    UCS_ASYNC_BLOCK(async);
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_REJECTING);
    if (ep->state & UCT_CRYPT_CM_EP_FAILED) {
        status = UCS_ERR_NOT_CONNECTED;
    } else {
        status = uct_crypt_cm_ep_queue_frame(ep, CRYPT_CM_FRAME_REJECT, NULL, 0,
                                             NULL, 0);
        if (status == UCS_OK) {
            status = uct_crypt_cm_ep_flush_tx(ep);
        }
    }
    if ((status != UCS_OK) || (ep->tx_len == 0)) {
        UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
    } else {
        uct_crypt_cm_ep_events(ep); /* deleted once the REJECT is out */
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

ucs_status_t uct_crypt_cm_listener_query(uct_listener_h tl_listener,
                                         uct_listener_attr_t *attr)
{
    uct_crypt_cm_listener_t *listener = ucs_derived_of(tl_listener,
                                                       uct_crypt_cm_listener_t);
    socklen_t len = sizeof(attr->sockaddr);

    if ((attr->field_mask & UCT_LISTENER_ATTR_FIELD_SOCKADDR) &&
        (getsockname(listener->fd, (struct sockaddr*)&attr->sockaddr, &len) < 0)) {
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

