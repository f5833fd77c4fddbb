/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One connection of crypt's own wire (wire/wire.h): its state machine on
 * a non-blocking socket (the handshake's messages: wire_handshake.c), then
 * frames. Reads go into one fixed buffer per connection
 * (UCT_CRYPT_WIRE_FRAME_MAX): a frame's header is checked before its body
 * is waited for, so no length from the network ever sizes an allocation;
 * writes go through one fixed buffer per connection, and a sender that
 * finds it full gets NO_RESOURCE (UCT's pending path), never a larger
 * buffer.
 */
#include "uct_crypt/wire/wire_int.h"

#include <ucs/sys/math.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>
#include <endian.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

/* A stranger gets this long to send a valid initiation (an initiator
 * waits for the response as long as the kernel keeps the connection:
 * uct_crypt_wire_timers) */
#define UCT_CRYPT_WIRE_HANDSHAKE_TIMEOUT 5.0

/* ---- buffers: taken when a connection has bytes to hold, given back when
 * it has none, a few kept for the next (no malloc per message) -------- */

void *uct_crypt_wire_buf_get(uct_crypt_wire_buf_cache_t *cache, size_t size)
{
    return (cache->count > 0) ? cache->bufs[--cache->count] :
                                ucs_malloc(size, "crypt sock buffer");
}

void uct_crypt_wire_buf_put(uct_crypt_wire_iface_t *iface,
                            uct_crypt_wire_buf_cache_t *cache, uint8_t **buf_p)
{
    if (*buf_p == NULL) {
        return;
    }
    if (cache->count < ucs_static_array_size(cache->bufs)) {
        cache->bufs[cache->count++] = *buf_p;
    } else {
        ucs_free(*buf_p);
    }
    *buf_p = NULL;
}

ucs_status_t uct_crypt_wire_conn_start_hs(uct_crypt_wire_conn_t *conn,
                                          uct_crypt_wire_iface_t *iface)
{
    conn->hs = keyex_secure_alloc(sizeof(*conn->hs));
    if ((conn->hs == NULL) ||
        (keyex_noise_start(conn->hs, iface->keypair, iface->job_secret,
                           &iface->context) !=
         KEYEX_OK)) {
        return UCS_ERR_NO_RESOURCE;
    }
    return UCS_OK;
}

uct_crypt_wire_conn_t *uct_crypt_wire_conn_new(uct_crypt_wire_iface_t *iface,
                                               int fd, uct_crypt_wire_ep_t *ep,
                                               const struct sockaddr *peer)
{
    uct_crypt_wire_conn_t *conn;
    struct epoll_event ev;

    conn = ucs_calloc(1, sizeof(*conn), "crypt sock conn");
    if (conn == NULL) {
        return NULL;
    }
    /* a responder's handshake state (secure memory, key derivations) is
     * made only for an initiation that passed mac1: a stranger costs this
     * struct and a slot, nothing more */
    if ((ep != NULL) && (uct_crypt_wire_conn_start_hs(conn, iface) != UCS_OK)) {
        goto err;
    }
    conn->iface    = iface;
    conn->fd       = fd;
    conn->id       = ++iface->next_conn_id;
    conn->ep        = ep;
    conn->initiator = (ep != NULL);
    conn->state     = (ep != NULL) ? UCT_CRYPT_WIRE_CONNECTING :
                                     UCT_CRYPT_WIRE_WAIT_INIT;
    conn->deadline = ucs_get_time() +
                     ucs_time_from_sec(UCT_CRYPT_WIRE_HANDSHAKE_TIMEOUT);
    memcpy(&conn->peer_addr, peer, (peer->sa_family == AF_INET6) ?
           sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    ucs_sockaddr_str(peer, conn->peer_name, sizeof(conn->peer_name));

    conn->events = EPOLLIN | ((ep != NULL) ? EPOLLOUT : 0);
    ev.events    = conn->events;
    ev.data.ptr  = conn;
    if (epoll_ctl(iface->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        goto err;
    }
    ucs_list_add_tail(&iface->conns, &conn->list);
    return conn;

err:
    if (conn->hs != NULL) {
        keyex_noise_cleanup(conn->hs);
        keyex_secure_free(conn->hs, sizeof(*conn->hs));
    }
    ucs_free(conn);
    return NULL;
}

void uct_crypt_wire_conn_set_events(uct_crypt_wire_conn_t *conn, unsigned events)
{
    struct epoll_event ev;

    if ((conn->events == events) || (conn->fd < 0)) {
        return;
    }
    ev.events    = events;
    ev.data.ptr  = conn;
    conn->events = events;
    (void)epoll_ctl(conn->iface->epfd, EPOLL_CTL_MOD, conn->fd, &ev);
}

static void uct_crypt_wire_conn_free_keys(uct_crypt_wire_conn_t *conn)
{
    if (conn->hs != NULL) {
        keyex_noise_cleanup(conn->hs);
        keyex_secure_free(conn->hs, sizeof(*conn->hs));
        conn->hs = NULL;
    }
    crypt_aead_key_cleanup(&conn->ctrl_send);
    crypt_aead_key_cleanup(&conn->ctrl_recv);
    keyex_secure_free(conn->secret, KEYEX_SECRET_LEN); /* wipes */
    conn->secret = NULL;
}

/* An established connection ended: told from progress (a record being
 * delivered may be what ends it, and the layer above frees per-connection
 * state). Without memory to remember it, that state stays until the iface
 * closes, as it did before connections told their end. */
static void uct_crypt_wire_conn_ended(uct_crypt_wire_iface_t *iface, uint64_t id)
{
    uint64_t *ended;
    size_t max;

    if (iface->conn_ended == NULL) {
        return;
    }
    if (iface->ended_count == iface->ended_max) {
        max   = ucs_max(16, 2 * iface->ended_max);
        ended = ucs_realloc(iface->ended, max * sizeof(*ended), "crypt ended");
        if (ended == NULL) {
            return;
        }
        iface->ended     = ended;
        iface->ended_max = max;
    }
    iface->ended[iface->ended_count++] = id;
}

/* The receive buffer goes back once it holds nothing (the cache's, once
 * established; the handshake's own is the connection's) */
static void uct_crypt_wire_conn_rx_release(uct_crypt_wire_conn_t *conn)
{
    if (conn->rx_buf == conn->hs_rx) {
        conn->rx_buf = NULL;
    } else {
        uct_crypt_wire_buf_put(conn->iface, &conn->iface->rx_cache,
                               &conn->rx_buf);
    }
}

static const char *uct_crypt_wire_state_names[] = {
    [UCT_CRYPT_WIRE_CONNECTING]  = "connecting",
    [UCT_CRYPT_WIRE_INIT_SENT]   = "initiation sent",
    [UCT_CRYPT_WIRE_WAIT_INIT]   = "waiting for the initiation",
    [UCT_CRYPT_WIRE_ESTABLISHED] = "established",
    [UCT_CRYPT_WIRE_CLOSED]      = "closed"
};

/* as UCX tcp's uct_tcp_cm_change_conn_state: the only writer of `state`
 * after a connection is made, tracing and asserting each change; a
 * responder stops counting as half-open when it leaves WAIT_INIT */
void uct_crypt_wire_conn_set_state(uct_crypt_wire_conn_t *conn,
                                   uct_crypt_wire_state_t state)
{
    static const unsigned next[] = {
        [UCT_CRYPT_WIRE_CONNECTING]  = UCS_BIT(UCT_CRYPT_WIRE_INIT_SENT) |
                                       UCS_BIT(UCT_CRYPT_WIRE_CLOSED),
        [UCT_CRYPT_WIRE_INIT_SENT]   = UCS_BIT(UCT_CRYPT_WIRE_INIT_SENT) |
                                       UCS_BIT(UCT_CRYPT_WIRE_ESTABLISHED) |
                                       UCS_BIT(UCT_CRYPT_WIRE_CLOSED),
        [UCT_CRYPT_WIRE_WAIT_INIT]   = UCS_BIT(UCT_CRYPT_WIRE_ESTABLISHED) |
                                       UCS_BIT(UCT_CRYPT_WIRE_CLOSED),
        [UCT_CRYPT_WIRE_ESTABLISHED] = UCS_BIT(UCT_CRYPT_WIRE_CLOSED),
        [UCT_CRYPT_WIRE_CLOSED]      = 0
    };
    uct_crypt_wire_state_t old = conn->state;

    ucs_assertv((old < UCT_CRYPT_WIRE_STATE_LAST) && (next[old] & UCS_BIT(state)),
                "crypt wire conn %p: %s -> %s", conn,
                uct_crypt_wire_state_names[old], uct_crypt_wire_state_names[state]);
    ucs_assert((state != UCT_CRYPT_WIRE_ESTABLISHED) || (conn->hs == NULL));
    ucs_trace("crypt wire conn %p %s: %s -> %s", conn, conn->peer_name,
              uct_crypt_wire_state_names[old], uct_crypt_wire_state_names[state]);
    if ((old == UCT_CRYPT_WIRE_WAIT_INIT) && (state != old)) {
        if (conn->cookie_rounds > 0) {
            ucs_assert(conn->iface->cookied > 0);
            --conn->iface->cookied;
        } else {
            ucs_assert(conn->iface->half_open > 0);
            --conn->iface->half_open;
        }
    }
    conn->state = state;
}

/* The end of a connection, whatever its reason (uct_crypt_wire_conn_fail
 * reports the ones that are failures before it calls this). */
void uct_crypt_wire_conn_close(uct_crypt_wire_conn_t *conn)
{
    uct_crypt_wire_iface_t *iface = conn->iface;

    if (conn->state == UCT_CRYPT_WIRE_ESTABLISHED) {
        uct_crypt_wire_conn_ended(iface, conn->id);
        ++iface->closed_since_trim;
    }
    if (conn->fd >= 0) {
        (void)epoll_ctl(iface->epfd, EPOLL_CTL_DEL, conn->fd, NULL);
        close(conn->fd);
        conn->fd = -1;
    }
    uct_crypt_wire_conn_set_state(conn, UCT_CRYPT_WIRE_CLOSED);
    uct_crypt_wire_conn_free_keys(conn);
    if (conn->ep != NULL) {
        conn->ep->conn = NULL;
    }
    if (iface->rx_conn == conn) {
        iface->rx_conn = NULL;
    }
    ucs_list_del(&conn->list);
    uct_crypt_wire_buf_put(iface, &iface->tx_cache, &conn->tx_buf);
    uct_crypt_wire_conn_rx_release(conn);
    ucs_free(conn);
}

/* What many ended connections held (their flows' state, buffers: about
 * 12 KiB each) goes back to the system, not only to the heap, where it
 * stayed in RSS for the process's life (red team R2): glibc's
 * malloc_trim returns the free pages of every arena, once a 250 ms tick
 * at most, after 16 connections ended */
void uct_crypt_wire_give_heap_back(uct_crypt_wire_iface_t *iface)
{
    if (iface->closed_since_trim < 16) {
        return;
    }
    iface->closed_since_trim = 0;
#ifdef __GLIBC__
    (void)malloc_trim(0);
#endif
}

void uct_crypt_wire_conn_refuse(uct_crypt_wire_conn_t *conn, const char *reason,
                                ucs_log_level_t level)
{
    uct_crypt_wire_outsider(conn->iface, conn, reason, level);
    uct_crypt_wire_conn_close(conn);
}

/* A connection that cannot go on: its ep (initiator) or the eps to its
 * authenticated peer (responder) fail, and the log says who and why. */
void uct_crypt_wire_conn_fail(uct_crypt_wire_conn_t *conn, const char *reason)
{
    uct_crypt_wire_iface_t *iface = conn->iface;
    uint8_t peer[KEYEX_PUBLIC_KEY_LEN];
    char name[sizeof(conn->peer_name)];
    int established = (conn->state == UCT_CRYPT_WIRE_ESTABLISHED);
    /* the peer's half carried records that may now be lost */
    int peer_lost   = established && !conn->frames.closed && (conn->frames.records > 0);
    uct_crypt_wire_ep_t *ep = conn->ep;
    char untaken[256];

    if (!established && (ep == NULL) && !conn->initiator) {
        /* a stranger's connection: nothing of ours depended on it */
        uct_crypt_wire_conn_refuse(conn, reason, UCS_LOG_LEVEL_WARN);
        return;
    }
    if ((ep == NULL) && !peer_lost) {
        /* nothing of ours sends on it and nothing of the peer's was cut */
        ucs_debug("crypt: wire connection %s %s ended: %s",
                  conn->initiator ? "to" : "from", conn->peer_name, reason);
        uct_crypt_wire_conn_close(conn);
        return;
    }

    if ((ep != NULL) && established && (conn->tx_records > 0) &&
        (conn->frames.took == 0)) {
        /* what our ep sent is lost: the peer refused its flow (R1), or
         * went first */
        ucs_snprintf_zero(untaken, sizeof(untaken), "%s, before the peer "
                          "took this endpoint's first record: a flow it "
                          "refused (its log says why: UCX_CRYPT_RX_FLOWS?) "
                          "or a peer that left", reason);
        reason = untaken;
    }
    UCT_CRYPT_STAT_ADD(wire_failed, 1);
    memcpy(peer, conn->peer_static, sizeof(peer));
    memcpy(name, conn->peer_name, sizeof(name));
    uct_crypt_wire_conn_close(conn);
    if (ep != NULL) {
        uct_crypt_wire_ep_failed(ep, UCS_ERR_CONNECTION_RESET, reason);
    }
    if (peer_lost && (iface->peer_failed != NULL)) {
        iface->peer_failed(iface->peer_failed_arg, peer, name, reason);
    }
}

/* A local resource failed while `doing` (memory for secrets, a cipher
 * context, randomness, a key derivation: crypt_local_failure_take says
 * which). No peer and no network caused it: said at error level whoever's
 * connection it was, and never counted as a refused stranger. Ours fails
 * its ep; a peer's ends, and its initiator opens another
 * (uct_crypt_wire_conn_handshake_lost). */
void uct_crypt_wire_conn_fail_local(uct_crypt_wire_conn_t *conn,
                                    const char *doing)
{
    char reason[160];

    ucs_snprintf_zero(reason, sizeof(reason), "%s%s", doing,
                      crypt_local_failure_take());
    ucs_error("crypt: wire connection %s %s: %s", conn->initiator ? "to" : "from",
              conn->peer_name, reason);
    if ((conn->ep != NULL) && (conn->ep->status == UCS_OK)) {
        conn->ep->fail_local = 1;
    }
    if ((conn->ep == NULL) && !conn->initiator &&
        (conn->state != UCT_CRYPT_WIRE_ESTABLISHED)) {
        uct_crypt_wire_conn_close(conn);
        return;
    }
    uct_crypt_wire_conn_fail(conn, reason);
}

/* The peer closed a connection before its handshake was done. Ours: the
 * responder reclaimed a half-open slot, or took our initiation for a stale
 * one (a burst of initiations arriving out of order); as UCX's tcp opens a
 * connection reset while it is set up again (tcp_ep.c, conn_retries), the
 * ep opens a new one with a fresh initiation, a bounded number of times.
 * Nothing of the ep's went on the old one: no record leaves before the
 * answer. A peer that refuses us for good (another job secret) closes each
 * of them, and the ep fails after the last. */
static void uct_crypt_wire_conn_handshake_lost(uct_crypt_wire_conn_t *conn,
                                               const char *reason)
{
    uct_crypt_wire_ep_t *ep = conn->ep;

    if (!conn->initiator || (ep == NULL) ||
        (ep->connect_retries >= UCT_CRYPT_WIRE_CONNECT_RETRIES)) {
        uct_crypt_wire_conn_fail(conn, reason);
        return;
    }
    ++ep->connect_retries;
    ucs_debug("crypt: wire connection to %s %s, opening another (%u of %d)",
              conn->peer_name, reason, ep->connect_retries,
              UCT_CRYPT_WIRE_CONNECT_RETRIES);
    uct_crypt_wire_conn_close(conn);
    if (uct_crypt_wire_ep_reconnect(ep) != UCS_OK) {
        uct_crypt_wire_ep_failed(ep, UCS_ERR_CONNECTION_RESET, reason);
    }
}

/* ---- writing ------------------------------------------------------------- */

/* Write what the tx buffer holds; 1 when it is empty, -1 on failure (the
 * connection is then gone). */
int uct_crypt_wire_conn_flush(uct_crypt_wire_conn_t *conn)
{
    size_t may;
    ssize_t sent;

    while (conn->tx_len > 0) {
        /* before the handshake's answer (and while the peer's connection
         * is awaited) only the initiation leaves: records wait */
        may = uct_crypt_wire_conn_final(conn) ?
              conn->tx_len : ucs_min(conn->tx_len, conn->init_left);
        if (may == 0) {
            uct_crypt_wire_conn_set_events(conn, EPOLLIN);
            return 0;
        }
        sent = send(conn->fd, conn->tx_buf + conn->tx_head, may, MSG_NOSIGNAL);
        if (sent < 0) {
            if ((errno == EAGAIN) || (errno == EWOULDBLOCK) || (errno == EINTR)) {
                uct_crypt_wire_conn_set_events(conn, EPOLLIN | EPOLLOUT);
                return 0;
            }
            if (((errno == EPIPE) || (errno == ECONNRESET)) &&
                (conn->state == UCT_CRYPT_WIRE_ESTABLISHED) && !conn->frames.closed) {
                /* The peer closed. What it sent before (its last records,
                 * its CLOSE, most often, at the end of a job) still waits
                 * in the socket and is read first: delivered, and it
                 * decides whether this is a failure. Nothing more is
                 * written; what waits here stays (no flush completes
                 * over it) until the read that follows ends the
                 * connection and says what was lost. */
                uct_crypt_wire_conn_set_events(conn, EPOLLIN);
                return 0;
            }
            if (((errno == EPIPE) || (errno == ECONNRESET)) &&
                (conn->state == UCT_CRYPT_WIRE_INIT_SENT)) {
                uct_crypt_wire_conn_handshake_lost(conn, strerror(errno));
            } else {
                uct_crypt_wire_conn_fail(conn, strerror(errno));
            }
            return -1;
        }
        conn->init_left -= ucs_min(conn->init_left, (size_t)sent);
        conn->tx_head   += sent;
        conn->tx_len    -= sent;
    }
    conn->tx_head = 0;
    /* idle connections hold no buffer: memory follows the busy ones */
    uct_crypt_wire_buf_put(conn->iface, &conn->iface->tx_cache, &conn->tx_buf);
    if (conn->closing && conn->frames.closed) {
        uct_crypt_wire_conn_close(conn); /* both halves done */
        return -1;
    }
    uct_crypt_wire_conn_set_events(conn, EPOLLIN);
    return 1;
}

/* Is there room for a frame of up to `max` body bytes, behind what is
 * queued once that is moved to the front? An ep's frames are taken only
 * when the kernel took everything before them (wire/wire_ep.c), so
 * what is moved is little: a control frame's, or what waits for the
 * handshake's answer. */
int uct_crypt_wire_conn_tx_room(const uct_crypt_wire_conn_t *conn, size_t max)
{
    return conn->tx_len + CRYPT_WIRE_FRAME_HDR_LEN + max <= UCT_CRYPT_WIRE_TX_BUF;
}

/* Room for a frame of up to `max` body bytes: a pointer to its body, or
 * NULL (no room: NO_RESOURCE). */
void *uct_crypt_wire_conn_tx_reserve(uct_crypt_wire_conn_t *conn, size_t max)
{
    size_t need = CRYPT_WIRE_FRAME_HDR_LEN + max;

    if ((conn->tx_buf == NULL) &&
        ((conn->tx_buf = uct_crypt_wire_buf_get(&conn->iface->tx_cache,
                                                UCT_CRYPT_WIRE_TX_BUF)) == NULL)) {
        return NULL;
    }
    if (conn->tx_head + conn->tx_len + need > UCT_CRYPT_WIRE_TX_BUF) {
        if (!uct_crypt_wire_conn_tx_room(conn, max)) {
            return NULL;
        }
        memmove(conn->tx_buf, conn->tx_buf + conn->tx_head, conn->tx_len);
        conn->tx_head = 0;
    }
    return conn->tx_buf + conn->tx_head + conn->tx_len + CRYPT_WIRE_FRAME_HDR_LEN;
}

void uct_crypt_wire_conn_tx_commit(uct_crypt_wire_conn_t *conn, uint8_t type,
                                   size_t length)
{
    crypt_wire_frame_hdr_t hdr = {0};

    ucs_assert(length <= UCT_CRYPT_WIRE_MAX_BCOPY);
    hdr.length   = htole32((uint32_t)length);
    hdr.type     = type;
    memcpy(conn->tx_buf + conn->tx_head + conn->tx_len, &hdr, sizeof(hdr));
    conn->tx_len += sizeof(hdr) + length;
    conn->tx_records += (type == CRYPT_WIRE_FRAME_RECORD) ||
                        (type == CRYPT_WIRE_FRAME_SEGMENT);
}

int uct_crypt_wire_conn_final(const uct_crypt_wire_conn_t *conn)
{
    return (conn->state == UCT_CRYPT_WIRE_ESTABLISHED) && !conn->redirect_wait &&
           (conn->secret != NULL);
}

/* Final, not only up: one that waits for the peer's (REDIRECT) takes no
 * send yet, and after a flush UCX's tcp takes one (tcp_ep.c: its flush
 * answers NO_RESOURCE until the ep is CONNECTED). Taken: a flow the peer
 * refused closes the connection, and its sender hears it at the flush
 * (a sender that flushed and closed at once lost its messages unknowing,
 * red team R1). */
int uct_crypt_wire_conn_flushed(const uct_crypt_wire_conn_t *conn)
{
    return uct_crypt_wire_conn_final(conn) && (conn->tx_len == 0) &&
           ((conn->tx_records == 0) || (conn->frames.took > 0));
}

/* ---- frames --------------------------------------------------------------- */

/* A control frame (base/format.h): `count` sealed under the
 * connection's Noise transport key, the frame header as associated data */
static int uct_crypt_wire_conn_send_ctrl(uct_crypt_wire_conn_t *conn,
                                         uint8_t type, uint64_t count)
{
    uint8_t *body;

    if ((conn->state != UCT_CRYPT_WIRE_ESTABLISHED) ||
        ((body = uct_crypt_wire_conn_tx_reserve(conn, UCT_CRYPT_WIRE_CTRL_LEN)) ==
         NULL)) {
        return 1;
    }
    if (uct_crypt_frame_seal_control(&conn->ctrl_send, conn->ctrl_send_seq++,
                                     type, count,
                                     body - CRYPT_WIRE_FRAME_HDR_LEN) != 0) {
        /* a local failure: said; the frame is not sent (the peer sees the
         * connection end without it, as after a crash) */
        ucs_error("crypt: wire connection %s %s: cannot seal a control "
                  "frame%s", conn->initiator ? "to" : "from", conn->peer_name,
                  crypt_local_failure_take());
        return 1;
    }
    conn->tx_len += CRYPT_WIRE_FRAME_HDR_LEN + UCT_CRYPT_WIRE_CTRL_LEN;
    return uct_crypt_wire_conn_flush(conn) >= 0;
}

/* The graceful end: what this side sent so far, then CLOSE. 0 when the
 * connection is gone (it failed on the way). */
int uct_crypt_wire_conn_send_close(uct_crypt_wire_conn_t *conn)
{
    return uct_crypt_wire_conn_send_ctrl(conn, CRYPT_WIRE_FRAME_CLOSE,
                                         conn->tx_records);
}

void uct_crypt_wire_conn_release(uct_crypt_wire_conn_t *conn)
{
    conn->ep = NULL;
    if (conn->tx_closed) {
        return;
    }
    conn->tx_closed = 1;
    conn->closing   = 1;
    conn->deadline  = ucs_get_time() +
                      ucs_time_from_sec(UCT_CRYPT_WIRE_DRAIN_TIMEOUT);
    if (conn->state != UCT_CRYPT_WIRE_ESTABLISHED) {
        uct_crypt_wire_conn_close(conn); /* nothing of ours went yet */
        return;
    }
    if (!uct_crypt_wire_conn_send_close(conn)) {
        return; /* gone on the way */
    }
    if ((conn->tx_len == 0) && conn->frames.closed) {
        uct_crypt_wire_conn_close(conn); /* both halves done */
    }
}

/* The peer's first record was taken (or, owed, the tick tries again):
 * TAKEN, once a control frame may go and there is room for it. 0 when
 * the connection is gone. */
static int uct_crypt_wire_conn_tell_taken(uct_crypt_wire_conn_t *conn)
{
    if (!conn->taken_owed || !uct_crypt_wire_conn_final(conn) ||
        !uct_crypt_wire_conn_tx_room(conn, UCT_CRYPT_WIRE_CTRL_LEN)) {
        return 1;
    }
    conn->taken_owed = 0;
    conn->taken_told = 1;
    return uct_crypt_wire_conn_send_ctrl(conn, CRYPT_WIRE_FRAME_TAKEN,
                                         conn->frames.records);
}

/* From the iface's timer: records went out since the last heartbeat. A
 * relay that cuts a record out of the stream cleanly (at frame
 * boundaries) leaves nothing for the record layer to see when no record
 * follows; the count does. */
void uct_crypt_wire_conn_heartbeat(uct_crypt_wire_conn_t *conn)
{
    /* (not while records wait for a redirect: they may move to the
     * peer's connection, and this frame, under our transport key, with
     * them; and never after our CLOSE, which told the count and after
     * which the peer takes nothing, while its own half may keep the
     * connection open) */
    if (uct_crypt_wire_conn_final(conn) && !conn->tx_closed &&
        (conn->tx_records != conn->tx_records_told)) {
        conn->tx_records_told = conn->tx_records;
        (void)uct_crypt_wire_conn_send_ctrl(conn, CRYPT_WIRE_FRAME_HEARTBEAT,
                                            conn->tx_records);
    }
    (void)uct_crypt_wire_conn_tell_taken(conn);
}

/* A RECORD frame (uct_crypt_frame_next took it) to the record layer, or
 * (body NULL) an announced segment, whole in its destination, to the bulk
 * engine. 0 when the connection is gone. */
static int uct_crypt_wire_conn_deliver(uct_crypt_wire_conn_t *conn,
                                       uint8_t *body, size_t length)
{
    uct_crypt_wire_iface_t *iface = conn->iface;
    uct_crypt_wire_segment_cb_t cb;
    char why[96];

    iface->rx_conn = conn;
    conn->reject   = NULL;
    if (body == NULL) {
        cb               = conn->segment_cb;
        conn->segment_cb = NULL;
        conn->seg_body   = 0;
        cb(conn->segment_arg, conn->seg_tag);
    } else {
        /* a record: crypt's record layer checks its tag before it acts on
         * it, and tells us (uct_crypt_wire_rx_reject) when it fails */
        uct_iface_invoke_am(&iface->super, UCT_CRYPT_WIRE_AM_ID, body,
                            (unsigned)length, 0);
    }
    if (iface->rx_conn != conn) {
        return 0; /* closed from inside the handler (iface going away) */
    }
    iface->rx_conn = NULL;
    if (conn->reject != NULL) {
        ucs_snprintf_zero(why, sizeof(why), "the record layer refused a %s: %s",
                          (body == NULL) ? "bulk segment" : "record",
                          conn->reject);
        uct_crypt_wire_conn_fail(conn, why);
        return 0;
    }
    if ((body != NULL) && !conn->taken_told) {
        conn->taken_owed = 1;
        return uct_crypt_wire_conn_tell_taken(conn);
    }
    return 1;
}

/* An announced segment's body still to come (ciphertext, then tag) */
static size_t uct_crypt_wire_conn_seg_left(const uct_crypt_wire_conn_t *conn)
{
    return conn->seg_len + CRYPT_AEAD_TAG_LEN - conn->seg_got;
}

/* Where the next bytes of an announced segment's body go, and how many
 * may: its destination up to the ciphertext's end, then the tag */
static uint8_t *uct_crypt_wire_conn_seg_place(uct_crypt_wire_conn_t *conn,
                                              size_t *room)
{
    if (conn->seg_got < conn->seg_len) {
        *room = conn->seg_len - conn->seg_got;
        return conn->seg_dest + conn->seg_got;
    }
    *room = uct_crypt_wire_conn_seg_left(conn);
    return conn->seg_tag + (conn->seg_got - conn->seg_len);
}

/* Bytes of the body that came into the receive buffer with what preceded
 * it (the rest is received in place): copied where they belong */
static size_t uct_crypt_wire_conn_seg_take(uct_crypt_wire_conn_t *conn,
                                           const uint8_t *src, size_t len)
{
    size_t taken = 0, room, n;
    uint8_t *place;

    while ((taken < len) && (uct_crypt_wire_conn_seg_left(conn) > 0)) {
        place = uct_crypt_wire_conn_seg_place(conn, &room);
        n     = ucs_min(room, len - taken);
        memcpy(place, src + taken, n);
        conn->seg_got += n;
        taken         += n;
    }
    return taken;
}

/* Parse what the rx buffer holds. 0 when the connection is gone. */
static int uct_crypt_wire_conn_parse(uct_crypt_wire_conn_t *conn)
{
    uct_crypt_frame_verdict_t verdict;
    crypt_wire_frame_hdr_t hdr;
    size_t offset = 0, frame_len, need;
    char why[96];

    for (;;) {
        switch (conn->state) {
        case UCT_CRYPT_WIRE_WAIT_INIT:
            need = sizeof(keyex_noise_init_msg_t);
            break;
        case UCT_CRYPT_WIRE_INIT_SENT:
            /* the response, or a cookie reply (its type says) */
            need = ((conn->rx_len > offset) &&
                    (conn->rx_buf[offset] == KEYEX_NOISE_COOKIE_TYPE)) ?
                   sizeof(keyex_noise_cookie_msg_t) :
                   sizeof(keyex_noise_response_msg_t);
            break;
        case UCT_CRYPT_WIRE_ESTABLISHED:
            need = conn->seg_body ? 1 : CRYPT_WIRE_FRAME_HDR_LEN;
            break;
        default:
            return 0;
        }
        if (conn->rx_len - offset < need) {
            break;
        }
        if (conn->state == UCT_CRYPT_WIRE_WAIT_INIT) {
            memmove(conn->rx_buf, conn->rx_buf + offset, conn->rx_len - offset);
            conn->rx_len -= offset;
            offset = 0;
            if (!uct_crypt_wire_conn_accept_init(conn)) {
                return 0;
            } else if (conn->dh_deferred) {
                return 1; /* its initiation kept for its turn */
            }
            offset = need;
            continue;
        }
        if (conn->state == UCT_CRYPT_WIRE_INIT_SENT) {
            memmove(conn->rx_buf, conn->rx_buf + offset, conn->rx_len - offset);
            conn->rx_len -= offset;
            offset = 0;
            if (!((need == sizeof(keyex_noise_cookie_msg_t)) ?
                  uct_crypt_wire_conn_accept_cookie(conn) :
                  uct_crypt_wire_conn_accept_response(conn))) {
                return 0;
            }
            offset = need;
            continue;
        }

        /* established: an announced segment's header, then its body
         * straight into its destination */
        if ((conn->segment_cb != NULL) && !conn->seg_body) {
            verdict = uct_crypt_frame_segment_header(&conn->frames,
                                                     conn->rx_buf + offset,
                                                     conn->rx_len - offset,
                                                     why, sizeof(why));
            if (verdict == UCT_CRYPT_FRAME_MORE) {
                break;
            } else if (verdict == UCT_CRYPT_FRAME_BAD) {
                uct_crypt_wire_conn_fail(conn, why);
                return 0;
            }
            offset        += CRYPT_WIRE_FRAME_HDR_LEN;
            conn->seg_body = 1;
            continue;
        }
        if (conn->seg_body) {
            offset += uct_crypt_wire_conn_seg_take(conn, conn->rx_buf + offset,
                                                   conn->rx_len - offset);
            if (uct_crypt_wire_conn_seg_left(conn) > 0) {
                break; /* the rest is received in place */
            }
            if (!uct_crypt_wire_conn_deliver(conn, NULL, 0)) {
                return 0;
            }
            continue;
        }
        /* the frames (wire/wire_frame.c decides) */
        verdict = uct_crypt_frame_next(&conn->frames, conn->rx_buf + offset,
                                       conn->rx_len - offset, &hdr, &frame_len,
                                       why, sizeof(why));
        if (verdict == UCT_CRYPT_FRAME_MORE) {
            break;
        }
        if (verdict == UCT_CRYPT_FRAME_BAD) {
            uct_crypt_wire_conn_fail(conn, why);
            return 0;
        }
        /* (a SEGMENT frame is taken above, never here) */
        if ((verdict == UCT_CRYPT_FRAME_DATA) &&
            !uct_crypt_wire_conn_deliver(conn, conn->rx_buf + offset +
                                         CRYPT_WIRE_FRAME_HDR_LEN,
                                         frame_len - CRYPT_WIRE_FRAME_HDR_LEN)) {
            return 0;
        }
        offset += frame_len;
        if ((verdict == UCT_CRYPT_FRAME_CONTROL) &&
            (hdr.type == CRYPT_WIRE_FRAME_TAKEN) &&
            (conn->frames.took > conn->tx_records)) {
            uct_crypt_wire_conn_fail(conn, "the peer took records never sent");
            return 0;
        }
        if ((verdict == UCT_CRYPT_FRAME_CONTROL) &&
            (hdr.type == CRYPT_WIRE_FRAME_CLOSE)) {
            /* the peer's half is done; ours goes on while an ep sends */
            ucs_debug("crypt: the peer at %s closed its half", conn->peer_name);
            if ((conn->ep == NULL) && (conn->tx_len == 0)) {
                uct_crypt_wire_conn_close(conn);
                return 0;
            }
        }
    }
    if (offset > 0) {
        memmove(conn->rx_buf, conn->rx_buf + offset, conn->rx_len - offset);
        conn->rx_len -= offset;
    }
    return 1;
}

/* Read up to the end of a large frame and no further (uct_crypt_frame_rx_room:
 * a bulk segment's bytes are copied once, by the kernel); small frames are
 * read many at a time */
static size_t uct_crypt_wire_conn_rx_room(const uct_crypt_wire_conn_t *conn)
{
    if ((conn->segment_cb != NULL) && (conn->rx_len < CRYPT_WIRE_FRAME_HDR_LEN)) {
        /* an announced segment's header alone: its body goes straight to
         * its destination */
        return CRYPT_WIRE_FRAME_HDR_LEN - conn->rx_len;
    }
    switch (conn->state) {
    case UCT_CRYPT_WIRE_ESTABLISHED:
        return uct_crypt_frame_rx_room(conn->rx_buf, conn->rx_len);
    case UCT_CRYPT_WIRE_WAIT_INIT:
        /* nothing a stranger sends beyond 144 bytes is read at all */
        return sizeof(keyex_noise_init_msg_t) - conn->rx_len;
    default:
        /* the response, or a cookie reply, and nothing after it: what
         * follows the response is a frame, read into a frame's buffer */
        if (conn->rx_len == 0) {
            return ucs_min(sizeof(keyex_noise_cookie_msg_t),
                           sizeof(keyex_noise_response_msg_t));
        }
        return ((conn->rx_buf[0] == KEYEX_NOISE_COOKIE_TYPE) ?
                sizeof(keyex_noise_cookie_msg_t) :
                sizeof(keyex_noise_response_msg_t)) - conn->rx_len;
    }
}

static void uct_crypt_wire_conn_read(uct_crypt_wire_conn_t *conn)
{
    uct_crypt_wire_ep_t *ep;
    uint8_t *place;
    size_t room;
    ssize_t got;

    for (;;) {
        if (conn->seg_body) {
            /* an announced segment's body: in place (the receive buffer
             * is empty, what came with the record was taken) */
            ucs_assert(conn->rx_len == 0);
            place = uct_crypt_wire_conn_seg_place(conn, &room);
        } else {
            /* during the handshake its message alone is read, into the
             * connection's own 144 bytes: a half-open stranger costs no
             * frame buffer (F13: 262 KiB each) */
            if ((conn->rx_buf == NULL) &&
                (conn->state != UCT_CRYPT_WIRE_ESTABLISHED)) {
                conn->rx_buf = conn->hs_rx;
            } else if ((conn->rx_buf == conn->hs_rx) &&
                       (conn->state == UCT_CRYPT_WIRE_ESTABLISHED)) {
                /* (never: a handshake's message is read to its end and no
                 * further; were a byte left, it moves to a frame buffer) */
                if ((conn->rx_buf = uct_crypt_wire_buf_get(&conn->iface->rx_cache,
                                                           UCT_CRYPT_WIRE_FRAME_MAX)) == NULL) {
                    conn->rx_buf = conn->hs_rx;
                    uct_crypt_wire_conn_fail(conn, "out of memory");
                    return;
                }
                memcpy(conn->rx_buf, conn->hs_rx, conn->rx_len);
            } else if ((conn->rx_buf == NULL) &&
                       ((conn->rx_buf = uct_crypt_wire_buf_get(&conn->iface->rx_cache,
                                                               UCT_CRYPT_WIRE_FRAME_MAX)) == NULL)) {
                uct_crypt_wire_conn_fail(conn, "out of memory");
                return;
            }
            room  = uct_crypt_wire_conn_rx_room(conn);
            place = conn->rx_buf + conn->rx_len;
        }
        if (room == 0) {
            return; /* a whole frame is waiting for the parser: cannot be */
        }
        got = recv(conn->fd, place, room, 0);
        if (got == 0) {
            if ((conn->state == UCT_CRYPT_WIRE_ESTABLISHED) && conn->frames.closed &&
                ((conn->ep == NULL) || conn->tx_closed)) {
                uct_crypt_wire_conn_close(conn); /* both halves done */
            } else if ((conn->state == UCT_CRYPT_WIRE_ESTABLISHED) &&
                       conn->frames.closed && uct_crypt_wire_conn_flushed(conn)) {
                /* The peer ended its half in order and left while our ep
                 * has nothing unsent or untaken: as UCX's tcp fails an ep that sends
                 * when its peer's end closes (tcp_ep.c,
                 * uct_tcp_ep_handle_recv_err -> uct_tcp_ep_set_failed),
                 * ours fails now, not at its next send: UCP's keepalive
                 * and an RMA flush learn of a departed peer at once. */
                ep = conn->ep;
                uct_crypt_wire_conn_close(conn);
                ep->peer_left = 1;
                uct_crypt_wire_ep_failed(ep, UCS_ERR_CONNECTION_RESET,
                                         "the peer closed the connection");
            } else if ((conn->state == UCT_CRYPT_WIRE_ESTABLISHED) && conn->frames.closed) {
                uct_crypt_wire_conn_fail(conn, "the peer closed the connection "
                                               "while this side still had "
                                               "records for it");
            } else if (conn->state == UCT_CRYPT_WIRE_ESTABLISHED) {
                uct_crypt_wire_conn_fail(conn, "the peer closed the connection "
                                               "without a CLOSE (it exited or "
                                               "was killed)");
            } else {
                uct_crypt_wire_conn_handshake_lost(conn, "connection closed "
                                                         "during the handshake");
            }
            return;
        }
        if (got < 0) {
            if ((errno == EAGAIN) || (errno == EWOULDBLOCK) || (errno == EINTR)) {
                return;
            }
            if ((errno == ECONNRESET) && (conn->state != UCT_CRYPT_WIRE_ESTABLISHED)) {
                uct_crypt_wire_conn_handshake_lost(conn, strerror(errno));
            } else {
                uct_crypt_wire_conn_fail(conn, strerror(errno));
            }
            return;
        }
        if (conn->seg_body) {
            conn->seg_got += got;
            if ((uct_crypt_wire_conn_seg_left(conn) == 0) &&
                !uct_crypt_wire_conn_deliver(conn, NULL, 0)) {
                return;
            }
            if ((size_t)got < room) {
                return; /* drained */
            }
            continue;
        }
        conn->rx_len += got;
        if (!uct_crypt_wire_conn_parse(conn)) {
            return;
        }
        if (conn->rx_len == 0) {
            uct_crypt_wire_conn_rx_release(conn);
        }
        if ((size_t)got < room) {
            return; /* drained */
        }
    }
}

void uct_crypt_wire_conn_handle(uct_crypt_wire_conn_t *conn, unsigned events)
{
    int err       = 0;
    socklen_t len = sizeof(err);

    if (conn->dh_deferred) {
        /* its initiation waits for its turn; the initiator left */
        if (events & (EPOLLERR | EPOLLHUP)) {
            uct_crypt_wire_conn_fail(conn, "connection closed during the "
                                           "handshake");
        }
        return;
    }
    if (conn->state == UCT_CRYPT_WIRE_CONNECTING) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
            return;
        }
        if ((getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) ||
            (err != 0)) {
            uct_crypt_wire_conn_fail(conn, strerror(err ? err : errno));
            return;
        }
        if (uct_crypt_wire_conn_make_init(conn, NULL) != UCS_OK) {
            uct_crypt_wire_conn_fail_local(conn, "cannot make the handshake "
                                                 "initiation");
            return;
        }
    }
    if (events & (EPOLLERR | EPOLLHUP)) {
        /* the peer closed or reset: what it sent before (its CLOSE, most
         * often, at the end of a job) is read first, and decides whether
         * this is a failure; a write now would only fail */
        uct_crypt_wire_conn_read(conn);
        return;
    }
    /* the ep's pending sends get the room from the iface's progress */
    if ((events & EPOLLOUT) && (uct_crypt_wire_conn_flush(conn) < 0)) {
        return;
    }
    if (events & EPOLLIN) {
        uct_crypt_wire_conn_read(conn);
    }
}
