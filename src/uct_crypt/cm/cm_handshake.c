/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What travels on a connection manager's connection (cm.h): frames sealed
 * under the handshake's keys and queued, and what arrives, in order: the
 * NNpsk0 messages, then CONNECT, ACCEPT, REJECT, NOTIFY and DISCONNECT,
 * each checked before it is acted on.
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

/* ---- frames ------------------------------------------------------------- */

size_t uct_crypt_cm_frame_max(const uct_crypt_cm_t *cm)
{
    return CRYPT_CM_FRAME_HDR_LEN + cm->max_body + CRYPT_AEAD_TAG_LEN;
}

/* Queue raw bytes (the handshake messages) */
ucs_status_t uct_crypt_cm_ep_queue(uct_crypt_cm_ep_t *ep,
                                   const void *data, size_t len)
{
    if (ep->tx_len + len > ep->tx_cap) {
        return UCS_ERR_NO_RESOURCE;
    }
    memcpy(ep->tx_buf + ep->tx_len, data, len);
    ep->tx_len += len;
    return UCS_OK;
}

/* Queue a frame: header, body sealed in place behind it, tag. The body is
 * given in two pieces (device address part, UCP's data) */
ucs_status_t uct_crypt_cm_ep_queue_frame(uct_crypt_cm_ep_t *ep,
                                         uint8_t type,
                                         const void *head, size_t head_len,
                                         const void *data, size_t data_len)
{
    size_t body_len = head_len + data_len;
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    crypt_cm_frame_hdr_t *hdr;
    uint8_t *body;

    /* sealed under the handshake's transport key: none before it */
    ucs_assert(ep->state & UCT_CRYPT_CM_EP_KEYS);
    if ((body_len > uct_crypt_cm_ep_cm(ep)->max_body) ||
        (ep->tx_len + sizeof(*hdr) + body_len + CRYPT_AEAD_TAG_LEN > ep->tx_cap)) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    hdr           = (crypt_cm_frame_hdr_t*)(ep->tx_buf + ep->tx_len);
    body          = (uint8_t*)(hdr + 1);
    hdr->length   = htole16((uint16_t)(body_len + CRYPT_AEAD_TAG_LEN));
    hdr->type     = type;
    hdr->reserved = 0;
    if (head_len > 0) {
        memcpy(body, head, head_len);
    }
    if (data_len > 0) {
        memcpy(body + head_len, data, data_len);
    }
    keyex_noise_nonce(ep->tx_count++, nonce);
    if (crypt_aead_seal(&ep->tx_key, nonce, hdr, sizeof(*hdr), body, body_len,
                        body, body + body_len) != CRYPT_AEAD_OK) {
        /* a local failure, said with what failed; nothing of the frame
         * stays (it was never counted in tx_len: never sent) */
        ucs_error("crypt: connection manager: connection %s %s: cannot seal "
                  "a frame%s", (ep->state & UCT_CRYPT_CM_EP_SERVER) ? "from" :
                  "to", ep->peer_name, crypt_local_failure_take());
        memset(hdr, 0, sizeof(*hdr) + body_len + CRYPT_AEAD_TAG_LEN);
        return UCS_ERR_IO_ERROR;
    }
    ep->tx_len += sizeof(*hdr) + body_len + CRYPT_AEAD_TAG_LEN;
    return UCS_OK;
}

/* A CONNECT or ACCEPT: our device address on the connection's device,
 * then UCP's private data */
ucs_status_t uct_crypt_cm_ep_queue_addresses(uct_crypt_cm_ep_t *ep,
                                             uint8_t type,
                                             const void *priv,
                                             size_t priv_len)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uint8_t head[UCT_CRYPT_CM_ADDRESSES_HEAD], key[KEYEX_PUBLIC_KEY_LEN];
    char dev_name[UCT_DEVICE_NAME_MAX];
    size_t dev_addr_len;
    ucs_status_t status;

    if (priv_len > cm->priv_data_len) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    status = uct_crypt_cm_device(cm, ep->fd, dev_name, head + 1, &dev_addr_len,
                                 key);
    if (status != UCS_OK) {
        return status;
    }
    head[0] = (uint8_t)dev_addr_len;
    memcpy(head + 1 + dev_addr_len, key, sizeof(key));
    return uct_crypt_cm_ep_queue_frame(ep, type, head,
                                       1 + dev_addr_len + sizeof(key), priv,
                                       priv_len);
}

/* The same with the private data the user's pack callback writes for the
 * connection's device */
ucs_status_t uct_crypt_cm_ep_queue_packed(uct_crypt_cm_ep_t *ep,
                                          uint8_t type)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uct_cm_ep_priv_data_pack_args_t pack_args;
    size_t priv_len;
    ucs_status_t status;
    void *priv;

    priv = ucs_malloc(cm->priv_data_len, "crypt cm priv");
    if (priv == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    pack_args.field_mask = UCT_CM_EP_PRIV_DATA_PACK_ARGS_FIELD_DEVICE_NAME;
    ucs_strncpy_zero(pack_args.dev_name, ep->dev_name, UCT_DEVICE_NAME_MAX);
    status = uct_cm_ep_pack_cb(&ep->super, ep->super.user_data, &pack_args,
                               priv, cm->priv_data_len, &priv_len);
    if (status == UCS_OK) {
        status = uct_crypt_cm_ep_queue_addresses(ep, type, priv, priv_len);
    } else {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CB_FAILED);
    }
    ucs_free(priv);
    return status;
}

/* ---- what arrives ---------------------------------------------------------- */

static ucs_status_t uct_crypt_cm_ep_take_keys(uct_crypt_cm_ep_t *ep,
                                              keyex_noise_transport_t *keys)
{
    ucs_status_t status = UCS_OK;

    ucs_assert(!(ep->state & UCT_CRYPT_CM_EP_KEYS)); /* keys are taken once */
    if ((crypt_aead_key_init(&ep->tx_key, CRYPT_AEAD_BACKEND_OPENSSL, keys->send,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK) ||
        (crypt_aead_key_init(&ep->rx_key, CRYPT_AEAD_BACKEND_OPENSSL, keys->recv,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK)) {
        status = UCS_ERR_IO_ERROR;
    }
    crypt_wipe(keys, sizeof(*keys));
    keyex_noise_cleanup(ep->hs);
    keyex_secure_free(ep->hs, sizeof(*ep->hs));
    ep->hs     = NULL;
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_KEYS);
    UCT_CRYPT_STAT_ADD(cm_handshakes, 1);
    return status;
}

/* Client: the handshake is done; tell UCP the device (it then gives us its
 * private data through uct_ep_connect), or pack it ourselves */
static ucs_status_t uct_crypt_cm_client_resolve(uct_crypt_cm_ep_t *ep)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uint8_t dev_addr[UCT_CRYPT_CM_MAX_DEV_ADDR];
    size_t dev_addr_len;
    ucs_status_t status;

    status = uct_crypt_cm_device(cm, ep->fd, ep->dev_name, dev_addr,
                                 &dev_addr_len, NULL);
    if (status != UCS_OK) {
        ucs_error("crypt: connection manager: the connection to %s runs on a "
                  "device where this process has no crypt interface: add it "
                  "to UCX_NET_DEVICES", ep->peer_name);
        return UCS_ERR_UNREACHABLE;
    }
    if (ep->super.resolve_cb != NULL) {
        uct_crypt_cm_ep_invoke_resolve(ep, UCS_OK);
        return UCS_ERR_CANCELED;
    }

    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_RESOLVED);
    status = uct_crypt_cm_ep_queue_packed(ep, CRYPT_CM_FRAME_CONNECT);
    if (status == UCS_OK) {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CONNECT_SENT);
    }
    return status;
}

ucs_status_t uct_crypt_cm_client_first_message(uct_crypt_cm_ep_t *ep,
                                               const uint8_t *cookie)
{
    uint8_t cookie_key[KEYEX_SECRET_LEN];
    keyex_noise_cm_init_msg_t msg;
    keyex_status_t kstatus;

    kstatus = keyex_noise_cm_start(ep->hs, uct_crypt_job_secret);
    if (kstatus == KEYEX_OK) {
        kstatus = keyex_noise_cm_init_create(ep->hs, &msg);
    }
    if ((kstatus == KEYEX_OK) && (cookie != NULL)) {
        kstatus = keyex_noise_cookie_key(uct_crypt_job_secret, NULL, cookie_key);
        if (kstatus == KEYEX_OK) {
            kstatus = keyex_noise_mac2_set(cookie_key, cookie, &msg, sizeof(msg));
        }
        crypt_wipe(cookie_key, sizeof(cookie_key));
    }
    if (kstatus != KEYEX_OK) {
        return UCS_ERR_IO_ERROR;
    }
    memcpy(ep->init_tag, msg.msg.tag, sizeof(ep->init_tag));
    return uct_crypt_cm_ep_queue(ep, &msg, sizeof(msg));
}

/* Client: the server is under load and asks for a cookie (wire/wire_admit.h):
 * a new handshake, its first message with mac2 */
static ucs_status_t uct_crypt_cm_client_cookie(uct_crypt_cm_ep_t *ep,
                                               const keyex_noise_cookie_msg_t *in)
{
    uint8_t cookie_key[KEYEX_SECRET_LEN], cookie[KEYEX_NOISE_COOKIE_LEN];
    keyex_status_t kstatus;
    ucs_status_t status;

    if (ep->cookie_rounds++ >= UCT_CRYPT_COOKIE_ROUNDS) {
        uct_crypt_cm_ep_fail(ep, UCS_ERR_UNREACHABLE, "the server asked for a "
                             "cookie again after it had one");
        return UCS_ERR_CANCELED;
    }
    kstatus = keyex_noise_cookie_key(uct_crypt_job_secret, NULL, cookie_key);
    if (kstatus == KEYEX_OK) {
        kstatus = keyex_noise_cookie_reply_consume(cookie_key, ep->init_tag, in,
                                                   cookie);
    }
    crypt_wipe(cookie_key, sizeof(cookie_key));
    if (kstatus == KEYEX_ERR_AUTH) {
        return UCS_ERR_UNREACHABLE; /* the caller says why */
    } else if (kstatus != KEYEX_OK) {
        uct_crypt_cm_ep_fail_local(ep, "cannot read the server's cookie reply");
        return UCS_ERR_CANCELED;
    }
    keyex_noise_cleanup(ep->hs);
    status = uct_crypt_cm_client_first_message(ep, cookie);
    crypt_wipe(cookie, sizeof(cookie));
    if (status != UCS_OK) {
        uct_crypt_cm_ep_fail_local(ep, "cannot start the handshake again");
        return UCS_ERR_CANCELED;
    }
    return UCS_OK;
}

/* Server, under load: a cookie reply instead of the DH. The connection
 * stays half-open for the client's next first message. */
static ucs_status_t uct_crypt_cm_server_cookie(uct_crypt_cm_ep_t *ep,
                                               const keyex_noise_cm_init_msg_t *in,
                                               double now)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
    keyex_noise_cookie_msg_t reply;

    if (ep->cookie_rounds >= UCT_CRYPT_COOKIE_ROUNDS) {
        uct_crypt_cm_ep_fail(ep, UCS_ERR_REJECTED, "its first message still "
                             "had no valid mac2 after a cookie reply");
        return UCS_ERR_CANCELED;
    }
    crypt_local_failure_set(NULL);
    if ((uct_crypt_cookies_make(&cm->cookies, now, &ep->peer_addr, cookie) != 0) ||
        (keyex_noise_cookie_reply_create(cm->cookie_key, cookie, in->msg.tag,
                                         &reply) != KEYEX_OK)) {
        uct_crypt_cm_ep_fail_local(ep, "cannot make a cookie reply");
        return UCS_ERR_CANCELED;
    }
    if (ep->cookie_rounds++ == 0) {
        /* its tag passed: out of the half-open set, where a stranger's
         * flood could take its slot (wire/wire_admit.h) */
        --cm->half_open;
        ++cm->cookied;
    }
    UCT_CRYPT_STAT_ADD(cookies_sent, 1);
    return uct_crypt_cm_ep_queue(ep, &reply, sizeof(reply));
}

/* Server: a connection's first message. Its tag is checked in the cm's
 * scratch state (two HKDFs and an AES-GCM open, no DH, nothing allocated
 * for the sender), its ephemeral against the ones taken before; only then
 * does the connection get handshake state of its own, and the DH. */
ucs_status_t uct_crypt_cm_server_handshake(uct_crypt_cm_ep_t *ep,
                                           const keyex_noise_cm_init_msg_t *in)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    double now         = ucs_time_to_sec(ucs_get_time());
    keyex_noise_transport_t keys;
    keyex_noise_cm_msg_t out;
    keyex_status_t kstatus;

    ucs_assert((ep->state & UCT_CRYPT_CM_EP_SERVER) &&
               !(ep->state & UCT_CRYPT_CM_EP_KEYS));
    memcpy(cm->scratch, cm->start, sizeof(*cm->scratch));
    kstatus = keyex_noise_cm_init_consume(cm->scratch, in);
    if (kstatus == KEYEX_ERR_AUTH) {
        keyex_noise_cleanup(cm->scratch);
        ep->refusal = KEYEX_NOISE_REFUSED_AUTH;
        uct_crypt_cm_ep_fail(ep, UCS_ERR_REJECTED, "its first message did "
                             "not authenticate (not a crypt client of this "
                             "job: no job secret, another job's, or not crypt)");
        return UCS_ERR_CANCELED;
    } else if (kstatus != KEYEX_OK) {
        keyex_noise_cleanup(cm->scratch);
        uct_crypt_cm_ep_fail_local(ep, "cannot check the handshake's first message");
        return UCS_ERR_CANCELED;
    }
    /* (one deferred was taken already) */
    switch (ep->dh_deferred ? UCT_CRYPT_SEEN_NEW :
            uct_crypt_seen_check(&cm->seen, in->msg.ephemeral)) {
    case UCT_CRYPT_SEEN_NEW:
        break;
    case UCT_CRYPT_SEEN_AGAIN:
        keyex_noise_cleanup(cm->scratch);
        UCT_CRYPT_STAT_ADD(replays_refused, 1);
        uct_crypt_cm_ep_fail(ep, UCS_ERR_REJECTED, "its first message is a "
                             "replay of one taken before");
        return UCS_ERR_CANCELED;
    default:
        keyex_noise_cleanup(cm->scratch);
        uct_crypt_cm_ep_fail_local(ep, "no memory for the replay check");
        return UCS_ERR_CANCELED;
    }
    /* under load, a DH only for who holds the job secret at this address */
    switch (uct_crypt_cookies_mac2_valid(&cm->cookies, now, &ep->peer_addr,
                                         cm->cookie_key, in, sizeof(*in))) {
    case 1:
        if (!uct_crypt_cookies_source_allowed(&cm->cookies, &ep->peer_addr, now)) {
            /* its host had its share (wire/wire_admit.h): the message
             * waits in rx_buf for the timer to ask again, deferred, not
             * closed, as the wire does (uct_crypt_wire_conn_defer) */
            keyex_noise_cleanup(cm->scratch);
            if (!ep->dh_deferred) {
                ep->dh_deferred = 1;
                UCT_CRYPT_STAT_ADD(dh_deferred, 1);
                uct_crypt_cm_ep_events(ep);
            }
            return UCS_OK;
        }
        ep->dh_deferred = 0;
        break;
    case 0:
        if (ep->dh_deferred) {
            /* (its cookie's secret went while it waited: it opens another) */
            keyex_noise_cleanup(cm->scratch);
            uct_crypt_cm_ep_fail(ep, UCS_ERR_REJECTED, "a deferred first "
                                 "message's cookie expired");
            return UCS_ERR_CANCELED;
        } else if (!uct_crypt_cookies_dh_allowed(&cm->cookies, now)) {
            keyex_noise_cleanup(cm->scratch);
            return uct_crypt_cm_server_cookie(ep, in, now);
        }
        break;
    default:
        keyex_noise_cleanup(cm->scratch);
        uct_crypt_cm_ep_fail_local(ep, "cannot check the first message's mac2");
        return UCS_ERR_CANCELED;
    }

    /* proven: out of the half-open (or cookied) set, and never evicted
     * by it */
    if (uct_crypt_cm_ep_wait(ep) == UCT_CRYPT_CM_WAIT_COOKIED) {
        --cm->cookied;
    } else {
        --cm->half_open;
    }
    ++cm->proven;
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_PROVEN);
    ep->hs     = keyex_secure_alloc(sizeof(*ep->hs));
    if (ep->hs != NULL) {
        memcpy(ep->hs, cm->scratch, sizeof(*ep->hs));
    }
    keyex_noise_cleanup(cm->scratch);
    if ((ep->hs == NULL) ||
        (keyex_noise_cm_response_create(ep->hs, &out, &keys) != KEYEX_OK)) {
        crypt_wipe(&keys, sizeof(keys));
        uct_crypt_cm_ep_fail_local(ep, "cannot answer the handshake");
        return UCS_ERR_CANCELED;
    }
    if (uct_crypt_cm_ep_take_keys(ep, &keys) != UCS_OK) {
        uct_crypt_cm_ep_fail_local(ep, "cannot set up the connection's keys");
        return UCS_ERR_CANCELED;
    }
    return uct_crypt_cm_ep_queue(ep, &out, sizeof(out));
}

static ucs_status_t uct_crypt_cm_ep_handshake(uct_crypt_cm_ep_t *ep)
{
    const keyex_noise_cm_msg_t *in = (const keyex_noise_cm_msg_t*)ep->rx_buf;
    keyex_noise_transport_t keys;
    keyex_status_t kstatus;

    if (ep->state & UCT_CRYPT_CM_EP_SERVER) {
        return uct_crypt_cm_server_handshake(ep,
                                             (const keyex_noise_cm_init_msg_t*)
                                             ep->rx_buf);
    }
    if (in->type == KEYEX_NOISE_COOKIE_TYPE) {
        return uct_crypt_cm_client_cookie(ep, (const keyex_noise_cookie_msg_t*)
                                              ep->rx_buf);
    } else if (in->type == KEYEX_NOISE_REFUSAL_TYPE) {
        /* the server's word before it closes (the caller says it) */
        ep->refusal = ((const keyex_noise_refusal_msg_t*)ep->rx_buf)->reason;
        return UCS_ERR_UNREACHABLE;
    }

    kstatus = keyex_noise_cm_response_consume(ep->hs, in, &keys);
    if (kstatus != KEYEX_OK) {
        crypt_wipe(&keys, sizeof(keys));
        if (kstatus == KEYEX_ERR_AUTH) {
            return UCS_ERR_UNREACHABLE; /* the caller says why */
        }
        uct_crypt_cm_ep_fail_local(ep, "cannot read the handshake's answer");
        return UCS_ERR_CANCELED;
    }
    if (uct_crypt_cm_ep_take_keys(ep, &keys) != UCS_OK) {
        uct_crypt_cm_ep_fail_local(ep, "cannot set up the connection's keys");
        return UCS_ERR_CANCELED;
    }
    return uct_crypt_cm_client_resolve(ep);
}

/* What UCP gets of the peer's CONNECT or ACCEPT */
static void uct_crypt_cm_remote_data(const crypt_cm_addresses_t *peer,
                                     uct_cm_remote_data_t *remote_data)
{
    remote_data->field_mask            = UCT_CM_REMOTE_DATA_FIELD_DEV_ADDR |
                                         UCT_CM_REMOTE_DATA_FIELD_DEV_ADDR_LENGTH |
                                         UCT_CM_REMOTE_DATA_FIELD_CONN_PRIV_DATA |
                                         UCT_CM_REMOTE_DATA_FIELD_CONN_PRIV_DATA_LENGTH;
    remote_data->dev_addr              = (const uct_device_addr_t*)peer->dev_addr;
    remote_data->dev_addr_length       = peer->dev_addr_len;
    remote_data->conn_priv_data        = peer->priv;
    remote_data->conn_priv_data_length = peer->priv_len;
}

/* Server: a client's CONNECT opened: its request goes to the user */
static ucs_status_t uct_crypt_cm_server_connect(uct_crypt_cm_ep_t *ep,
                                                const uint8_t *body, size_t len)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uint8_t local_dev_addr[UCT_CRYPT_CM_MAX_DEV_ADDR];
    uct_cm_listener_conn_request_args_t args;
    uct_cm_remote_data_t remote_data;
    struct sockaddr_storage client;
    socklen_t client_len = sizeof(client);
    size_t local_dev_addr_len;
    uct_crypt_cm_listener_t *listener;
    crypt_cm_addresses_t peer;

    if (!crypt_cm_addresses_parse(body, len, cm->priv_data_len, &peer)) {
        uct_crypt_cm_ep_fail(ep, UCS_ERR_INVALID_PARAM, "malformed CONNECT");
        return UCS_ERR_CANCELED;
    }
    memcpy(ep->peer_data_key, peer.data_key, sizeof(ep->peer_data_key));
    if (uct_crypt_cm_device(cm, ep->fd, ep->dev_name, local_dev_addr,
                            &local_dev_addr_len, NULL) != UCS_OK) {
        ucs_error("crypt: connection manager: a connection from %s arrived on "
                  "a device where this process has no crypt interface: add it "
                  "to UCX_NET_DEVICES", ep->peer_name);
        uct_crypt_cm_ep_fail(ep, UCS_ERR_NO_DEVICE, "no crypt interface there");
        return UCS_ERR_CANCELED;
    }
    if (getpeername(ep->fd, (struct sockaddr*)&client, &client_len) < 0) {
        uct_crypt_cm_ep_fail(ep, UCS_ERR_IO_ERROR, "getpeername failed");
        return UCS_ERR_CANCELED;
    }

    uct_crypt_cm_remote_data(&peer, &remote_data);

    args.field_mask             = UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_DEV_NAME |
                                  UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_CONN_REQUEST |
                                  UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_REMOTE_DATA |
                                  UCT_CM_LISTENER_CONN_REQUEST_ARGS_FIELD_CLIENT_ADDR;
    args.conn_request           = ep;
    args.remote_data            = &remote_data;
    args.client_address.addr    = (struct sockaddr*)&client;
    args.client_address.addrlen = client_len;
    ucs_strncpy_zero(args.dev_name, ep->dev_name, UCT_DEVICE_NAME_MAX);

    /* from here the ep is the user's: uct_ep_create or a reject */
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CONN_REQ);
    --cm->proven;
    listener = ep->listener;
    ep->listener = NULL;
    listener->conn_request_cb(&listener->super, listener->user_data, &args);
    return UCS_ERR_CANCELED; /* the user may have answered: read no further */
}

static ucs_status_t uct_crypt_cm_client_accept(uct_crypt_cm_ep_t *ep,
                                               const uint8_t *body, size_t len)
{
    uct_cm_remote_data_t remote_data;
    crypt_cm_addresses_t peer;

    if (!crypt_cm_addresses_parse(body, len, uct_crypt_cm_ep_cm(ep)->priv_data_len,
                                  &peer)) {
        return UCS_ERR_INVALID_PARAM;
    }
    memcpy(ep->peer_data_key, peer.data_key, sizeof(ep->peer_data_key));
    uct_crypt_cm_remote_data(&peer, &remote_data);
    uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CONNECTED);
    uct_cm_ep_client_connect_cb(&ep->super, &remote_data, UCS_OK);
    return UCS_ERR_CANCELED;
}

/* One frame opened: act on its type where the state allows it.
 * UCS_ERR_CANCELED after calling up: the user may have destroyed the ep,
 * so nothing more is read in this event (what is left in the kernel
 * raises the next one; the events are level-triggered). */
static ucs_status_t uct_crypt_cm_ep_dispatch(uct_crypt_cm_ep_t *ep, uint8_t type,
                                             const uint8_t *body, size_t len)
{
    uint32_t s = ep->state;
    int marks  = (type == CRYPT_CM_FRAME_DISCONNECT) ?
                 crypt_cm_disconnect_marks(len) : -1;

    if (s & (UCT_CRYPT_CM_EP_DISCONNECTED | UCT_CRYPT_CM_EP_HOLDING)) {
        return UCS_OK; /* nothing more is taken from a peer that ended */
    }
    if ((type == CRYPT_CM_FRAME_CONNECT) && (s & UCT_CRYPT_CM_EP_SERVER) &&
        !(s & UCT_CRYPT_CM_EP_CONN_REQ)) {
        return uct_crypt_cm_server_connect(ep, body, len);
    }
    if ((type == CRYPT_CM_FRAME_NOTIFY) && (len == 0) &&
        (s & UCT_CRYPT_CM_EP_CREATED) && !(s & UCT_CRYPT_CM_EP_CONNECTED)) {
        uct_crypt_cm_ep_set(ep, UCT_CRYPT_CM_EP_CONNECTED);
        uct_cm_ep_server_conn_notify_cb(&ep->super, UCS_OK);
        return UCS_ERR_CANCELED;
    }
    if ((s & UCT_CRYPT_CM_EP_CLIENT) && (s & UCT_CRYPT_CM_EP_CONNECT_SENT) &&
        !(s & UCT_CRYPT_CM_EP_CONNECTED)) {
        if (type == CRYPT_CM_FRAME_ACCEPT) {
            return uct_crypt_cm_client_accept(ep, body, len);
        }
        if ((type == CRYPT_CM_FRAME_REJECT) && (len == 0)) {
            return UCS_ERR_REJECTED;
        }
    }
    if ((marks >= 0) && (s & UCT_CRYPT_CM_EP_CONNECTED)) {
        uct_crypt_cm_ep_peer_disconnected(ep, (const crypt_cm_flow_mark_t*)body,
                                          marks);
        return UCS_ERR_CANCELED;
    }
    if (marks >= 0) {
        /* the peer gave up before the connection was established (its side
         * failed, or was closed at once): a reset, as tcp_sockcm reports a
         * peer that closes then (uct_tcp_sockcm_ep_handle_remote_disconnect) */
        return UCS_ERR_CONNECTION_RESET;
    }
    return UCS_ERR_INVALID_PARAM; /* out of turn */
}

/* How many bytes the next thing to read has, all told */
static size_t uct_crypt_cm_ep_rx_need(const uct_crypt_cm_ep_t *ep)
{
    const crypt_cm_frame_hdr_t *hdr = (const crypt_cm_frame_hdr_t*)ep->rx_buf;

    if (!(ep->state & UCT_CRYPT_CM_EP_KEYS)) {
        if (ep->state & UCT_CRYPT_CM_EP_SERVER) {
            return sizeof(keyex_noise_cm_init_msg_t);
        }
        /* client: the response, or a cookie reply (its first byte says) */
        if (ep->rx_have == 0) {
            return 1;
        }
        return (ep->rx_buf[0] == KEYEX_NOISE_COOKIE_TYPE) ?
               sizeof(keyex_noise_cookie_msg_t) :
               (ep->rx_buf[0] == KEYEX_NOISE_REFUSAL_TYPE) ?
               sizeof(keyex_noise_refusal_msg_t) : sizeof(keyex_noise_cm_msg_t);
    }
    if (ep->rx_have < sizeof(*hdr)) {
        return sizeof(*hdr);
    }
    return sizeof(*hdr) + le16toh(hdr->length);
}

/* Read and act on what arrived. UCS_ERR_CANCELED: the ep is gone or has
 * reported already; another error: the caller fails the ep with it. */
static ucs_status_t uct_crypt_cm_ep_recv(uct_crypt_cm_ep_t *ep, const char **why)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    crypt_cm_frame_hdr_t *hdr = (crypt_cm_frame_hdr_t*)ep->rx_buf;
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    size_t need, body_len;
    ucs_status_t status;
    ssize_t n;

    for (;;) {
        if (ep->dh_deferred) {
            /* its first message's turn? (the cm's timer asks: the ep reads
             * nothing else meanwhile) */
            *why   = "its answer was not crypt's handshake under this "
                     "job's secret";
            status = uct_crypt_cm_ep_handshake(ep);
            if ((status != UCS_OK) || ep->dh_deferred) {
                return status;
            }
        }
        need = uct_crypt_cm_ep_rx_need(ep);
        n    = recv(ep->fd, ep->rx_buf + ep->rx_have, need - ep->rx_have,
                    MSG_DONTWAIT);
        if (n == 0) {
            *why = "the peer closed the connection";
            return UCS_ERR_CONNECTION_RESET;
        } else if (n < 0) {
            if ((errno == EAGAIN) || (errno == EWOULDBLOCK)) {
                return UCS_OK;
            } else if (errno == EINTR) {
                continue;
            }
            *why = strerror(errno);
            return uct_crypt_cm_errno_status(errno);
        }
        ep->rx_have += n;
        if ((ep->rx_have < need) ||
            (!(ep->state & UCT_CRYPT_CM_EP_KEYS) &&
             (ep->rx_have < uct_crypt_cm_ep_rx_need(ep)))) {
            continue; /* (a client's first byte said how much more) */
        }

        if (!(ep->state & UCT_CRYPT_CM_EP_KEYS)) {
            ep->rx_have = 0;
            *why        = "its answer was not crypt's handshake under "
                          "this job's secret";
            status      = uct_crypt_cm_ep_handshake(ep);
            if ((status == UCS_OK) && ep->dh_deferred) {
                return status; /* (an ep that failed may be gone) */
            }
        } else if (need == sizeof(*hdr)) {
            /* the length, against a constant, before anything is read in */
            if (crypt_cm_frame_body_len(hdr, cm->max_body) < 0) {
                *why = "malformed frame header";
                return UCS_ERR_INVALID_PARAM;
            }
            continue;
        } else {
            body_len = (size_t)crypt_cm_frame_body_len(hdr, cm->max_body);
            keyex_noise_nonce(ep->rx_count++, nonce);
            ep->rx_have = 0;
            if (crypt_aead_open(&ep->rx_key, nonce, hdr, sizeof(*hdr), hdr + 1,
                                body_len, hdr + 1,
                                (uint8_t*)(hdr + 1) + body_len) != CRYPT_AEAD_OK) {
                *why = "a frame did not authenticate (forged or corrupted)";
                return UCS_ERR_INVALID_PARAM;
            }
            *why   = (hdr->type == CRYPT_CM_FRAME_REJECT) ?
                     "the server rejected the connection" :
                     (hdr->type == CRYPT_CM_FRAME_DISCONNECT) ?
                     "the peer disconnected before the connection was "
                     "established" : "frame out of turn";
            status = uct_crypt_cm_ep_dispatch(ep, hdr->type,
                                              (const uint8_t*)(hdr + 1), body_len);
        }
        if (status != UCS_OK) {
            return status;
        }
    }
}

void uct_crypt_cm_ep_handler(int fd, ucs_event_set_types_t events,
                             void *arg)
{
    uct_crypt_cm_ep_t *ep = arg;
    const char *why       = "";
    ucs_status_t status   = UCS_OK;
    int err               = 0;
    socklen_t len         = sizeof(err);

    if (ep->state & UCT_CRYPT_CM_EP_FAILED) {
        return;
    } else if (ep->dh_deferred && (events & UCS_EVENT_SET_EVERR)) {
        uct_crypt_cm_ep_fail(ep, UCS_ERR_CONNECTION_RESET,
                             "the peer closed the connection");
        return;
    }
    if (ep->state & UCT_CRYPT_CM_EP_CONNECTING) {
        if (!(events & (UCS_EVENT_SET_EVWRITE | UCS_EVENT_SET_EVERR))) {
            return;
        }
        if ((getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) || err) {
            uct_crypt_cm_ep_fail(ep, uct_crypt_cm_errno_status(err ? err : errno),
                                 strerror(err ? err : errno));
            return;
        }
        ep->state &= ~UCT_CRYPT_CM_EP_CONNECTING;
    }

    /* read first: an error or the peer's end decides before we write */
    if (events & (UCS_EVENT_SET_EVREAD | UCS_EVENT_SET_EVERR)) {
        status = uct_crypt_cm_ep_recv(ep, &why);
    }
    if (status == UCS_OK) {
        if ((ep->state & UCT_CRYPT_CM_EP_FAILED) &&
            !uct_crypt_cm_ep_is_internal(ep)) {
            return;
        }
        status = uct_crypt_cm_ep_flush_tx(ep);
        why    = "send failed";
    }
    if (status == UCS_ERR_CANCELED) {
        return;
    }
    if ((status == UCS_OK) && (ep->state & UCT_CRYPT_CM_EP_REJECTING) &&
        (ep->tx_len == 0)) {
        /* the REJECT is in the kernel: the connection is done */
        UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        return;
    }
    if (status != UCS_OK) {
        uct_crypt_cm_ep_fail(ep, status, why);
        return;
    }
    uct_crypt_cm_ep_events(ep);
}

