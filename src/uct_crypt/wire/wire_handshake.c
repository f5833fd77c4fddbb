/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Noise_IKpsk2 handshake of one connection of crypt's own wire
 * (src/keyex/noise.h): the initiator's first message made and sent, the
 * responder's checks of what a stranger sent (mac1, the replay set, then
 * the DHs, then freshness per static key), the answer taken; and which
 * of a pair's two connections carries both directions once both are up
 * (REDIRECT). What follows the handshake is wire_conn.c's.
 */
#include "uct_crypt/wire/wire_int.h"

#include <ucs/sys/string.h>
#include <ucs/time/time.h>
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

static ucs_status_t uct_crypt_wire_conn_keys(uct_crypt_wire_conn_t *conn,
                                             const keyex_noise_transport_t *keys)
{
    conn->secret = keyex_secure_alloc(KEYEX_SECRET_LEN);
    if (conn->secret == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(conn->secret, keys->exporter, KEYEX_SECRET_LEN);
    if ((crypt_aead_key_init(&conn->ctrl_send, CRYPT_AEAD_BACKEND_OPENSSL,
                             keys->send, KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK) ||
        (crypt_aead_key_init(&conn->ctrl_recv, CRYPT_AEAD_BACKEND_OPENSSL,
                             keys->recv, KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK)) {
        return UCS_ERR_NO_RESOURCE;
    }
    conn->frames.ctrl_key = &conn->ctrl_recv;
    return UCS_OK;
}

/* Initiator, connected: the initiation goes first in the tx buffer;
 * records follow once the answer came (the ep takes none before). Made
 * now, so that its timestamp says when it left. Made at connect() time,
 * one that waited in the peer's full listen backlog (a SYN retried a
 * second later) arrived behind a hundred newer ones of the same key and
 * was refused as stale (wire/wire_replay.h). */
ucs_status_t uct_crypt_wire_conn_make_init(uct_crypt_wire_conn_t *conn,
                                           const uint8_t *cookie)
{
    uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN];
    uint8_t cookie_key[KEYEX_SECRET_LEN];
    keyex_noise_init_msg_t *msg;
    keyex_status_t kstatus;

    msg = uct_crypt_wire_conn_tx_reserve(conn, 0);
    if (msg == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    msg = (keyex_noise_init_msg_t*)conn->tx_buf;
    keyex_noise_timestamp_now(timestamp);
    kstatus = keyex_noise_init_create(conn->hs, conn->iface->keypair,
                                      conn->iface->job_secret, conn->peer_static,
                                      timestamp, msg);
    if ((kstatus == KEYEX_OK) && (cookie != NULL)) {
        kstatus = keyex_noise_cookie_key(conn->iface->job_secret,
                                         conn->peer_static, cookie_key);
        if (kstatus == KEYEX_OK) {
            kstatus = keyex_noise_mac2_set(cookie_key, cookie, msg, sizeof(*msg));
        }
        crypt_wipe(cookie_key, sizeof(cookie_key));
    }
    if (kstatus != KEYEX_OK) {
        return UCS_ERR_INVALID_PARAM;
    }
    memcpy(conn->init_mac1, msg->mac1, sizeof(conn->init_mac1));
    conn->tx_head   = 0;
    conn->tx_len    = sizeof(*msg);
    conn->init_left = sizeof(*msg);
    uct_crypt_wire_conn_set_state(conn, UCT_CRYPT_WIRE_INIT_SENT);
    return UCS_OK;
}

/* The kernel often has the connection up within connect() (a peer on the
 * same host: loopback connects at once). The initiation then goes now, so
 * that it waits readable at the responder before that one accepts: it
 * reads what waits before it reclaims a half-open slot, and an honest
 * connection is never taken for a silent one (UCX's test_uct_pending opens
 * 2048 eps to one iface before either side progresses; sent from the
 * EPOLLOUT path, the initiations came after the responder had accepted and
 * reclaimed, and honest connections were closed). Not connected yet, or
 * refused: poll says so without consuming the socket's error, and the
 * EPOLLOUT path makes and sends the initiation (uct_crypt_wire_conn_handle).
 * A failed send here is left to that path too. */
ucs_status_t uct_crypt_wire_conn_start(uct_crypt_wire_conn_t *conn)
{
    struct pollfd pfd = { .fd = conn->fd, .events = POLLOUT };
    ucs_status_t status;
    ssize_t sent;

    if ((poll(&pfd, 1, 0) != 1) || (pfd.revents != POLLOUT)) {
        return UCS_OK;
    }
    status = uct_crypt_wire_conn_make_init(conn, NULL);
    if (status != UCS_OK) {
        return status;
    }
    sent = send(conn->fd, conn->tx_buf, conn->init_left, MSG_NOSIGNAL);
    if (sent > 0) {
        conn->init_left -= sent;
        conn->tx_head   += sent;
        conn->tx_len    -= sent;
    }
    return UCS_OK;
}

/* Responder: `len` bytes into a socket that holds nothing of ours yet
 * (the answer to an initiation): never partial in practice; a short write
 * ends the connection rather than buffering for strangers. Returns 0 when
 * the connection is gone. */
static int uct_crypt_wire_conn_send_whole(uct_crypt_wire_conn_t *conn,
                                          const void *msg, size_t len,
                                          const char *what)
{
    if (send(conn->fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len) {
        uct_crypt_wire_conn_fail(conn, what);
        return 0;
    }
    return 1;
}

/* Responder, under load: answer an initiation without a valid mac2 with
 * a cookie reply instead of the DHs (wire/wire_admit.h). The initiator
 * sends a new initiation on this connection; one that still has none
 * after UCT_CRYPT_COOKIE_ROUNDS replies is a stranger's. Returns 0 when
 * the connection is gone. */
static int uct_crypt_wire_conn_send_cookie(uct_crypt_wire_conn_t *conn,
                                           const keyex_noise_init_msg_t *init,
                                           double now)
{
    uct_crypt_wire_iface_t *iface = conn->iface;
    uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
    keyex_noise_cookie_msg_t reply;

    if (conn->cookie_rounds >= UCT_CRYPT_COOKIE_ROUNDS) {
        uct_crypt_wire_conn_fail(conn, "handshake initiation still without a "
                                       "valid mac2 after a cookie reply");
        return 0;
    }
    crypt_local_failure_set(NULL);
    if ((uct_crypt_cookies_make(&iface->cookies, now, &conn->peer_addr,
                                cookie) != 0) ||
        (keyex_noise_cookie_reply_create(iface->cookie_key, cookie, init->mac1,
                                         &reply) != KEYEX_OK)) {
        uct_crypt_wire_conn_fail_local(conn, "cannot make a cookie reply");
        return 0;
    }
    if (!uct_crypt_wire_conn_send_whole(conn, &reply, sizeof(reply),
                                        "cannot send a cookie reply")) {
        return 0;
    }
    if (conn->cookie_rounds++ == 0) {
        /* its initiation passed mac1: out of the half-open set, where a
         * stranger's flood could take its slot (wire/wire_admit.h) */
        ucs_assert((conn->state == UCT_CRYPT_WIRE_WAIT_INIT) &&
                   (iface->half_open > 0));
        --iface->half_open;
        ++iface->cookied;
    }
    UCT_CRYPT_STAT_ADD(cookies_sent, 1);
    return 1;
}

/* Responder, under load: the initiator's host had its share of DHs
 * (uct_crypt_cookies_source_allowed). Its initiation stays in the
 * connection's 144 bytes, nothing more is read, and the iface's timer asks
 * again (uct_crypt_wire_conn_retry_deferred) until the handshake deadline:
 * deferred, not closed, as an honest host's initiators would spend their
 * reconnections in one burst. Returns 1: the connection stays. */
static int uct_crypt_wire_conn_defer(uct_crypt_wire_conn_t *conn)
{
    ucs_assert(conn->cookie_rounds > 0); /* mac2: a cookie went on it */
    if (!conn->dh_deferred) {
        conn->dh_deferred = 1;
        UCT_CRYPT_STAT_ADD(dh_deferred, 1);
        uct_crypt_wire_conn_set_events(conn, 0);
    }
    return 1;
}

/* From the iface's timer: each deferred initiation asks for its DH again,
 * the oldest first. Taking one may move an ep of ours onto it and free
 * another connection, so the walk starts over, each asked once a tick. */
void uct_crypt_wire_conn_retry_deferred(uct_crypt_wire_iface_t *iface)
{
    unsigned round = ++iface->reclaim_round;
    uct_crypt_wire_conn_t *conn;

restart:
    ucs_list_for_each(conn, &iface->conns, list) {
        if (conn->dh_deferred && (conn->reclaim_round != round)) {
            conn->reclaim_round = round;
            (void)uct_crypt_wire_conn_accept_init(conn);
            goto restart;
        }
    }
}

/* Responder: the first 144 bytes (again after a cookie reply, or when a
 * deferred one's turn came). Returns 0 when the connection is gone. */
int uct_crypt_wire_conn_accept_init(uct_crypt_wire_conn_t *conn)
{
    uct_crypt_wire_iface_t *iface = conn->iface;
    keyex_noise_init_msg_t init;
    keyex_noise_response_msg_t resp;
    keyex_noise_transport_t keys;
    uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN];
    uct_crypt_wire_conn_t *waiting;
    keyex_status_t kstatus;
    double now = ucs_time_to_sec(ucs_get_time());
    uint8_t flags;
    int ok;

    memcpy(&init, conn->rx_buf, sizeof(init));
    /* the only bytes of a stranger we look at: size (read exactly),
     * type, version and mac1, before any DH */
    crypt_local_failure_set(NULL);
    if (!keyex_noise_init_precheck(iface->mac1_key, &init)) {
        if (*crypt_local_failure() != '\0') {
            uct_crypt_wire_conn_fail_local(conn, "cannot check the initiation's mac1");
        } else {
            uct_crypt_wire_conn_fail(conn, "handshake initiation without a valid "
                                           "mac1 (not a job-secret holder)");
        }
        return 0;
    }
    /* a replay of one we took: refused by its ephemeral, before any DH
     * (one deferred was taken already) */
    switch (conn->dh_deferred ? UCT_CRYPT_SEEN_NEW :
            uct_crypt_seen_check(&iface->seen, init.ephemeral)) {
    case UCT_CRYPT_SEEN_NEW:
        break;
    case UCT_CRYPT_SEEN_AGAIN:
        UCT_CRYPT_STAT_ADD(replays_refused, 1);
        uct_crypt_wire_conn_fail(conn, "replayed handshake initiation");
        return 0;
    default:
        uct_crypt_wire_conn_fail_local(conn, "no memory for the replay check");
        return 0;
    }
    /* under load, a DH only for who holds the job secret at this address */
    switch (uct_crypt_cookies_mac2_valid(&iface->cookies, now, &conn->peer_addr,
                                         iface->cookie_key, &init, sizeof(init))) {
    case 1:
        if (!uct_crypt_cookies_source_allowed(&iface->cookies, &conn->peer_addr,
                                              now)) {
            return uct_crypt_wire_conn_defer(conn);
        }
        break;
    case 0:
        if (conn->dh_deferred) {
            /* (its cookie's secret went while it waited: it opens another) */
            uct_crypt_wire_conn_refuse(conn, "a deferred initiation's cookie "
                                       "expired", UCS_LOG_LEVEL_DEBUG);
            return 0;
        } else if (!uct_crypt_cookies_dh_allowed(&iface->cookies, now)) {
            return uct_crypt_wire_conn_send_cookie(conn, &init, now);
        }
        break;
    default:
        uct_crypt_wire_conn_fail_local(conn, "cannot check the initiation's mac2");
        return 0;
    }
    if (conn->dh_deferred) {
        /* its turn: the 144 bytes are taken, reading goes on */
        conn->dh_deferred = 0;
        conn->rx_len      = 0;
        uct_crypt_wire_conn_set_events(conn, EPOLLIN);
    }
    if (uct_crypt_wire_conn_start_hs(conn, iface) != UCS_OK) {
        uct_crypt_wire_conn_fail_local(conn, "cannot start the handshake");
        return 0;
    }
    kstatus = keyex_noise_init_consume(conn->hs, iface->keypair, &init, ts);
    if (kstatus == KEYEX_ERR_AUTH) {
        UCT_CRYPT_STAT_ADD(stranger_dh, 1);
        uct_crypt_cookies_stranger(&iface->cookies, now);
        uct_crypt_wire_conn_fail(conn, "handshake initiation did not decrypt");
        return 0;
    } else if (kstatus != KEYEX_OK) {
        uct_crypt_wire_conn_fail_local(conn, "cannot read the handshake initiation");
        return 0;
    }
    switch (uct_crypt_replay_check(&iface->replay, conn->hs->rs, ts, now)) {
    case UCT_CRYPT_REPLAY_FRESH:
        break;
    case UCT_CRYPT_REPLAY_NO_MEMORY:
        uct_crypt_wire_conn_fail_local(conn, "cannot make the replay check");
        return 0;
    case UCT_CRYPT_REPLAY_STALE:
        /* older than what the window keeps: a replay the ephemeral set
         * forgot, or an honest one of a burst that came late, whose
         * initiator opens another (a debug line: UCX's tests fail on a
         * warning, and honest jobs see it) */
        UCT_CRYPT_STAT_ADD(stranger_dh, 1);
        uct_crypt_cookies_stranger(&iface->cookies, now);
        uct_crypt_wire_conn_refuse(conn, "stale handshake initiation",
                                   UCS_LOG_LEVEL_DEBUG);
        return 0;
    default:
        UCT_CRYPT_STAT_ADD(stranger_dh, 1);
        uct_crypt_cookies_stranger(&iface->cookies, now);
        uct_crypt_wire_conn_fail(conn, "replayed handshake initiation");
        return 0;
    }
    /* both sides opened a connection: the one of the lower key carries
     * both directions. Ours may be up and taken by another ep of the
     * peer's already, which the peer knows and we do not: we say whether
     * one is still being opened, and the peer waits only for that one or
     * for one of ours it holds free (it waited the whole deadline for ours
     * that were long up and taken: UCX's test_ucp_wireup_2sided.
     * multi_ep_2sided took 90 s) */
    flags = 0;
    if ((memcmp(iface->keypair->public_key, conn->hs->rs,
                KEYEX_PUBLIC_KEY_LEN) < 0) &&
        (uct_crypt_wire_conn_own_to(iface, conn->hs->rs, 0) != NULL)) {
        flags = KEYEX_NOISE_RESPONSE_REDIRECT;
        if (uct_crypt_wire_conn_own_to(iface, conn->hs->rs, 1) != NULL) {
            flags |= KEYEX_NOISE_RESPONSE_OPENING;
        }
    }
    ok = (keyex_noise_response_create(conn->hs, iface->job_secret, flags, &resp,
                                      &keys) == KEYEX_OK) &&
         (uct_crypt_wire_conn_keys(conn, &keys) == UCS_OK);
    crypt_wipe(&keys, sizeof(keys));
    if (!ok) {
        uct_crypt_wire_conn_fail_local(conn, "cannot answer the handshake");
        return 0;
    }
    if (!uct_crypt_wire_conn_send_whole(conn, &resp, sizeof(resp),
                                        "cannot send the handshake response")) {
        return 0;
    }
    memcpy(conn->peer_static, conn->hs->rs, KEYEX_PUBLIC_KEY_LEN);
    keyex_noise_cleanup(conn->hs);
    keyex_secure_free(conn->hs, sizeof(*conn->hs));
    conn->hs    = NULL;
    uct_crypt_wire_conn_set_state(conn, UCT_CRYPT_WIRE_ESTABLISHED);
    UCT_CRYPT_STAT_ADD(wire_handshakes, 1);
    ucs_debug("crypt: wire connection from %s, peer %02x%02x%02x%02x%s",
              conn->peer_name, conn->peer_static[0], conn->peer_static[1],
              conn->peer_static[2], conn->peer_static[3],
              flags ? " (asked to send here)" : "");
    /* an ep of ours that was asked to send on this one */
    waiting = uct_crypt_wire_conn_redirected_to(iface, conn->peer_static);
    if (waiting != NULL) {
        return uct_crypt_wire_conn_move(waiting, conn);
    }
    return 1;
}

/* Initiator: a cookie reply instead of the response (the responder is
 * under load, wire/wire_admit.h): a new initiation, with mac2, on this
 * connection. Returns 0 when the connection is gone. */
int uct_crypt_wire_conn_accept_cookie(uct_crypt_wire_conn_t *conn)
{
    uint8_t cookie_key[KEYEX_SECRET_LEN], cookie[KEYEX_NOISE_COOKIE_LEN];
    keyex_noise_cookie_msg_t reply;
    keyex_status_t kstatus;

    memcpy(&reply, conn->rx_buf, sizeof(reply));
    if (conn->cookie_rounds >= UCT_CRYPT_COOKIE_ROUNDS) {
        uct_crypt_wire_conn_fail(conn, "the peer asked for a cookie again "
                                       "after it had one");
        return 0;
    }
    kstatus = keyex_noise_cookie_key(conn->iface->job_secret, conn->peer_static,
                                     cookie_key);
    if (kstatus == KEYEX_OK) {
        kstatus = keyex_noise_cookie_reply_consume(cookie_key, conn->init_mac1,
                                                   &reply, cookie);
    }
    crypt_wipe(cookie_key, sizeof(cookie_key));
    if (kstatus == KEYEX_ERR_AUTH) {
        uct_crypt_wire_conn_fail(conn, "cookie reply refused (the peer does "
                                       "not hold the job secret)");
        return 0;
    } else if (kstatus != KEYEX_OK) {
        uct_crypt_wire_conn_fail_local(conn, "cannot read the cookie reply");
        return 0;
    }
    ++conn->cookie_rounds;
    /* a new handshake (Noise: a new ephemeral), its initiation with mac2 */
    ucs_assert(conn->tx_len == 0);
    keyex_noise_cleanup(conn->hs);
    if ((keyex_noise_start(conn->hs, conn->iface->keypair,
                           conn->iface->job_secret, &conn->iface->context) !=
         KEYEX_OK) ||
        (uct_crypt_wire_conn_make_init(conn, cookie) != UCS_OK)) {
        crypt_wipe(cookie, sizeof(cookie));
        uct_crypt_wire_conn_fail_local(conn, "cannot make the handshake "
                                             "initiation");
        return 0;
    }
    crypt_wipe(cookie, sizeof(cookie));
    return uct_crypt_wire_conn_flush(conn) >= 0;
}

/* Initiator: the 69-byte response */
int uct_crypt_wire_conn_accept_response(uct_crypt_wire_conn_t *conn)
{
    keyex_noise_response_msg_t resp;
    keyex_noise_transport_t keys;
    keyex_status_t kstatus;
    uint8_t flags = 0;
    int ok;

    memcpy(&resp, conn->rx_buf, sizeof(resp));
    kstatus = keyex_noise_response_consume(conn->hs, conn->iface->keypair, &resp,
                                           &flags, &keys);
    if (kstatus != KEYEX_OK) {
        crypt_wipe(&keys, sizeof(keys));
        if (kstatus == KEYEX_ERR_AUTH) {
            uct_crypt_wire_conn_fail(conn, "handshake response refused (the "
                                           "peer does not hold the job secret, "
                                           "or not the key its address names)");
        } else {
            uct_crypt_wire_conn_fail_local(conn, "cannot read the handshake "
                                                 "response");
        }
        return 0;
    }
    ok = (uct_crypt_wire_conn_keys(conn, &keys) == UCS_OK);
    crypt_wipe(&keys, sizeof(keys));
    if (!ok) {
        uct_crypt_wire_conn_fail_local(conn, "cannot set up the connection's keys");
        return 0;
    }
    keyex_noise_cleanup(conn->hs);
    keyex_secure_free(conn->hs, sizeof(*conn->hs));
    conn->hs    = NULL;
    uct_crypt_wire_conn_set_state(conn, UCT_CRYPT_WIRE_ESTABLISHED);
    UCT_CRYPT_STAT_ADD(wire_handshakes, 1);
    if ((flags & KEYEX_NOISE_RESPONSE_REDIRECT) && (conn->ep != NULL) &&
        ((flags & KEYEX_NOISE_RESPONSE_OPENING) ||
         (uct_crypt_wire_conn_find_free(conn->iface, conn->peer_static) != NULL))) {
        /* the peer opened one to us too, and its carries both ways: our
         * records wait for it (or for the deadline) */
        conn->redirect_wait    = 1;
        conn->redirect_opening = !!(flags & KEYEX_NOISE_RESPONSE_OPENING);
        conn->deadline      = ucs_get_time() +
                              ucs_time_from_sec(UCT_CRYPT_WIRE_REDIRECT_TIMEOUT);
        /* theirs may be up already: moved from progress, not from inside
         * this connection's parsing */
        conn->iface->redirect_pending = 1;
        return 1;
    }
    return uct_crypt_wire_conn_flush(conn) >= 0;
}

/* ---- one connection per pair ---------------------------------------------- */

/* Our own (initiated) connection to `peer`, still sending or about to;
 * with `opening`, only one whose handshake is still under way */
uct_crypt_wire_conn_t *
uct_crypt_wire_conn_own_to(uct_crypt_wire_iface_t *iface, const uint8_t *peer,
                           int opening)
{
    uct_crypt_wire_conn_t *conn;

    ucs_list_for_each(conn, &iface->conns, list) {
        if (conn->initiator && (conn->ep != NULL) && !conn->tx_closed &&
            (conn->state != UCT_CRYPT_WIRE_CLOSED) &&
            (!opening || (conn->state != UCT_CRYPT_WIRE_ESTABLISHED)) &&
            !memcmp(conn->peer_static, peer, KEYEX_PUBLIC_KEY_LEN)) {
            return conn;
        }
    }
    return NULL;
}

/* Our connection to `peer` that waits for the peer's own */
uct_crypt_wire_conn_t *
uct_crypt_wire_conn_redirected_to(uct_crypt_wire_iface_t *iface,
                                  const uint8_t *peer)
{
    uct_crypt_wire_conn_t *conn;

    ucs_list_for_each(conn, &iface->conns, list) {
        if (conn->redirect_wait && (conn->ep != NULL) &&
            !memcmp(conn->peer_static, peer, KEYEX_PUBLIC_KEY_LEN)) {
            return conn;
        }
    }
    return NULL;
}

uct_crypt_wire_conn_t *uct_crypt_wire_conn_find_free(uct_crypt_wire_iface_t *iface,
                                                     const uint8_t *peer)
{
    uct_crypt_wire_conn_t *conn;

    ucs_list_for_each(conn, &iface->conns, list) {
        if ((conn->state == UCT_CRYPT_WIRE_ESTABLISHED) && (conn->ep == NULL) &&
            !conn->tx_closed && !conn->frames.closed && !conn->closing &&
            !conn->redirect_wait && (conn->tx_records == 0) &&
            !memcmp(conn->peer_static, peer, KEYEX_PUBLIC_KEY_LEN)) {
            return conn;
        }
    }
    return NULL;
}

/* The ep of `from` moves to `to`, the peer's connection; `from` ends with
 * CLOSE(0). Nothing of the ep's waits in `from`: an ep takes no record
 * before its connection is final, and a redirected one is not. Returns 0
 * when `to` is gone. */
int uct_crypt_wire_conn_move(uct_crypt_wire_conn_t *from,
                             uct_crypt_wire_conn_t *to)
{
    uct_crypt_wire_ep_t *ep = from->ep;

    ucs_assert((from->init_left == 0) && (from->tx_records == 0));
    to->ep              = ep;
    ep->conn            = to;
    from->ep            = NULL;
    from->redirect_wait = 0;
    UCT_CRYPT_STAT_ADD(wire_shared, 1);
    ucs_debug("crypt: wire connection to %s now carries both directions",
              to->peer_name);
    uct_crypt_wire_conn_release(from);
    return uct_crypt_wire_conn_flush(to) >= 0;
}

/* From progress: each of our connections that waits for its peer's moves
 * there once that one is up. */
void uct_crypt_wire_conn_redirects(uct_crypt_wire_iface_t *iface)
{
    uct_crypt_wire_conn_t *conn, *theirs;

    iface->redirect_pending = 0;
restart:
    ucs_list_for_each(conn, &iface->conns, list) {
        if (!conn->redirect_wait || (conn->ep == NULL)) {
            continue;
        }
        theirs = uct_crypt_wire_conn_find_free(iface, conn->peer_static);
        if (theirs != NULL) {
            (void)uct_crypt_wire_conn_move(conn, theirs);
            goto restart;
        } else if (!conn->redirect_opening) {
            /* the peer's that was up went to another ep of ours meanwhile:
             * none to wait for (the ep's pending sends go from progress) */
            conn->redirect_wait = 0;
        }
    }
}

void uct_crypt_wire_conn_redirect_expired(uct_crypt_wire_conn_t *conn)
{
    /* the peer's connection did not come: ours carries our records (the
     * ep's pending sends go from the iface's progress) */
    conn->redirect_wait = 0;
    UCT_CRYPT_STAT_ADD(wire_redirects_expired, 1);
}
