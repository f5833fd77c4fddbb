/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's connection manager: the uct_cm that UCP's client/server API
 * (ucp_listener_create, ucp_ep_create with a socket address) runs on, in
 * place of tcp's sockcm, which crypt hides. Shaped like UCX's tcp_sockcm
 * (src/uct/tcp/tcp_sockcm*.c: one TCP connection per client ep, events on
 * the worker's async context, the same callbacks in the same states);
 * unlike it, nothing a peer sends is acted on before it is authenticated:
 *
 * - A connection starts with Noise_NNpsk0 (src/keyex/noise.h): the
 *   server reads exactly the 52-byte initiation and checks its tag (the
 *   psk from the job secret, no DH) before anything else; a stranger's
 *   connection is closed there, counted and logged rate-limited, and the
 *   listener goes on. Until then a connection holds no handshake state
 *   (the tag is checked in the cm's one scratch state) and is half-open:
 *   those are bounded in number and time (UCX_CRYPT_CM_MAX_HALF_OPEN,
 *   _HANDSHAKE_TIMEOUT); when they are all taken, what waits on them is
 *   read first, then one of the silent ones goes (of the source address
 *   that holds the most, the oldest: uct_crypt_admit.h). A first message
 *   whose ephemeral was seen before is a replay, refused before the DH. A
 *   connection whose first message passed is never evicted by one that
 *   did not; those waiting for their CONNECT are bounded by the same
 *   number among themselves.
 * - UCP's private data (its worker and lane addresses) and the device
 *   address each side hands UCP travel only in frames sealed under the
 *   handshake's transport keys (uct_crypt_wire.h). The server's
 *   application sees a connection request only once the client's CONNECT
 *   opened: after the client proved the psk and its fresh ephemeral.
 * - A frame's length is checked against a constant before it is read in;
 *   one that does not open, or comes out of turn, ends the connection.
 *
 * Liveness: TCP keepalive (UCX_CRYPT_KEEPALIVE); a
 * peer that ends (kill, close) ends this connection and UCP hears of it
 * through the disconnect callback, as with tcp_sockcm.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include "uct_crypt.h"
#include "uct_crypt_admit.h"
#include "uct_crypt_sock.h"
#include "keyex/noise.h"

#include <openssl/crypto.h>

#include <uct/base/uct_cm.h>
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

#define UCT_CRYPT_CM_MAX_DEV_ADDR 255   /* one length byte in the body */
#define UCT_CRYPT_CM_MAX_BODY     (UINT16_MAX - CRYPT_AEAD_TAG_LEN)

ucs_config_field_t uct_crypt_cm_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_crypt_cm_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_cm_config_table)},

    {"PRIV_DATA_LEN", "2048",
     "Largest private data (UCP's worker and lane addresses) a connection\n"
     "carries each way, as tcp's TCP_CM_PRIV_DATA_LEN.",
     ucs_offsetof(uct_crypt_cm_config_t, priv_data_len), UCS_CONFIG_TYPE_MEMUNITS},

    {"HANDSHAKE_TIMEOUT", "5s",
     "A connection that has not finished crypt's handshake and its CONNECT\n"
     "within this time is closed (client: the endpoint fails).",
     ucs_offsetof(uct_crypt_cm_config_t, handshake_timeout), UCS_CONFIG_TYPE_TIME},

    {"MAX_HALF_OPEN", "64",
     "Server: connections held before their first message passed its check,\n"
     "and, apart, those that passed and wait for their CONNECT; past it one\n"
     "of the silent ones is closed, of the address that holds the most (a\n"
     "flood of strangers cannot hold the listener).",
     ucs_offsetof(uct_crypt_cm_config_t, max_half_open), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

typedef struct uct_crypt_cm {
    uct_cm_t        super;
    size_t          priv_data_len;
    size_t          max_body;         /* sealed part of a frame, tag excluded */
    ucs_time_t      handshake_timeout;
    unsigned        max_half_open;
    unsigned        half_open;        /* server eps: first message not passed */
    unsigned        proven;           /* ... passed, CONNECT not yet */
    keyex_noise_t   *scratch;         /* secure: where first messages are
                                         checked before an ep holds state */
    keyex_noise_t   *start;           /* secure: the state every server
                                         handshake starts from (it depends
                                         on the job secret only) */
    /* uct_crypt_cm_listener_make_room's lists, max_half_open long */
    const struct sockaddr_storage **admit_sources;
    struct uct_crypt_cm_ep          **admit_silent;
    int             room_fd;          /* epoll of the server eps before their
                                         request went up: one async handler
                                         for all (uct_crypt_cm_room_handler) */
    uct_crypt_seen_t seen;            /* ephemerals of first messages taken */
    ucs_list_link_t eps;              /* every ep of this cm, oldest first */
    int             timer_id;        /* -1: no handshake under way */
    ucs_time_t      timer_interval;
} uct_crypt_cm_t;

typedef struct uct_crypt_cm_listener {
    uct_listener_t                          super;
    int                                     fd;
    uct_cm_listener_conn_request_callback_t conn_request_cb;
    void                                    *user_data;
} uct_crypt_cm_listener_t;

enum {
    UCT_CRYPT_CM_EP_SERVER        = UCS_BIT(0),
    UCT_CRYPT_CM_EP_CLIENT        = UCS_BIT(1),
    UCT_CRYPT_CM_EP_CONNECTING    = UCS_BIT(2),  /* TCP connect() under way */
    UCT_CRYPT_CM_EP_KEYS          = UCS_BIT(3),  /* handshake done */
    UCT_CRYPT_CM_EP_RESOLVED      = UCS_BIT(4),  /* client: resolve/pack called */
    UCT_CRYPT_CM_EP_CONNECT_SENT  = UCS_BIT(5),  /* client: CONNECT queued */
    UCT_CRYPT_CM_EP_CONN_REQ      = UCS_BIT(6),  /* server: the user's now */
    UCT_CRYPT_CM_EP_CREATED       = UCS_BIT(7),  /* server: ACCEPT queued */
    UCT_CRYPT_CM_EP_CONNECTED     = UCS_BIT(8),  /* connect_cb / notify_cb OK */
    UCT_CRYPT_CM_EP_DISCONNECTING = UCS_BIT(9),  /* uct_ep_disconnect called */
    UCT_CRYPT_CM_EP_DISCONNECTED  = UCS_BIT(10), /* disconnect_cb called */
    UCT_CRYPT_CM_EP_FAILED        = UCS_BIT(11), /* no more events */
    UCT_CRYPT_CM_EP_REJECTING     = UCS_BIT(12), /* server: REJECT queued */
    UCT_CRYPT_CM_EP_CB_FAILED     = UCS_BIT(13), /* the user's callback failed */
    UCT_CRYPT_CM_EP_SHUT          = UCS_BIT(14), /* our FIN is out */
    UCT_CRYPT_CM_EP_LOCAL_FAILURE = UCS_BIT(15), /* ended by one of ours, said */
    UCT_CRYPT_CM_EP_PROVEN        = UCS_BIT(16), /* server: first message passed */
    UCT_CRYPT_CM_EP_IN_ROOM       = UCS_BIT(17)  /* its fd in the cm's room_fd */
};

typedef struct uct_crypt_cm_ep {
    uct_cm_base_ep_t        super;
    int                     fd;
    uint32_t                state;
    uct_crypt_cm_listener_t *listener;   /* server: where it arrived */
    ucs_list_link_t         list;        /* uct_crypt_cm_t.eps */
    ucs_time_t              deadline;    /* of the handshake and CONNECT */
    keyex_noise_t           *hs;         /* secure memory, until the keys */
    crypt_aead_key_t        tx_key, rx_key;
    uint64_t                tx_count, rx_count;
    uint8_t                 *rx_buf;     /* one frame */
    size_t                  rx_have;
    uint8_t                 *tx_buf;     /* frames not yet in the kernel */
    size_t                  tx_len, tx_sent, tx_cap;
    char                    peer_name[UCS_SOCKADDR_STRING_LEN];
    struct sockaddr_storage peer_addr;  /* server: the client's */
    char                    dev_name[UCT_DEVICE_NAME_MAX];
} uct_crypt_cm_ep_t;

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_cm_ep_t, uct_ep_t);

static uct_crypt_cm_t *uct_crypt_cm_ep_cm(uct_crypt_cm_ep_t *ep)
{
    return ucs_container_of(ep->super.super.super.iface, uct_crypt_cm_t,
                            super.iface);
}

static ucs_async_context_t *uct_crypt_cm_async(uct_crypt_cm_t *cm)
{
    return cm->super.iface.worker->async;
}

/* Owned by the cm, not by the user: a server's connection before its
 * request went up, or one being rejected */
static int uct_crypt_cm_ep_is_internal(const uct_crypt_cm_ep_t *ep)
{
    return ((ep->state & UCT_CRYPT_CM_EP_SERVER) &&
            !(ep->state & UCT_CRYPT_CM_EP_CONN_REQ)) ||
           (ep->state & UCT_CRYPT_CM_EP_REJECTING);
}

static int uct_crypt_cm_ep_in_handshake(const uct_crypt_cm_ep_t *ep)
{
    return (ep->state & UCT_CRYPT_CM_EP_SERVER) ?
           !(ep->state & UCT_CRYPT_CM_EP_CONN_REQ) :
           !(ep->state & UCT_CRYPT_CM_EP_RESOLVED);
}

static void uct_crypt_cm_refused(uct_crypt_cm_ep_t *ep, const char *why)
{
    static uint64_t count;
    uint64_t n = __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);

    UCT_CRYPT_STAT_ADD(cm_refused, 1);
    /* the first few, then every power of two: a flood cannot fill the log */
    if ((n <= 4) || !(n & (n - 1))) {
        ucs_warn("crypt: connection manager refused a connection from %s: %s "
                 "(%" PRIu64 " refused so far; the listener goes on)",
                 ep->peer_name, why, n);
    }
}

/* ---- the device a connection runs on ------------------------------------ */

/* The crypt device of the connection on `fd` (the interface of its local
 * address, or the InfiniBand port behind it: IPoIB, RoCE) and the device
 * address of our iface there: UCP picks its lanes by the name and puts
 * the address in place of the one in the peer's worker address */
static ucs_status_t uct_crypt_cm_device(uct_crypt_cm_t *cm, int fd,
                                        char dev_name[UCT_DEVICE_NAME_MAX],
                                        void *dev_addr, size_t *dev_addr_len)
{
    uct_worker_h worker = &cm->super.iface.worker->super;
    char ifname[UCT_DEVICE_NAME_MAX], path[256], hca[64];
    struct dirent *entry;
    ucs_status_t status;
    int port = 0;
    DIR *dir;
    FILE *f;

    status = ucs_sockaddr_get_ifname(fd, ifname, sizeof(ifname));
    if (status != UCS_OK) {
        return status;
    }
    ucs_strncpy_zero(dev_name, ifname, UCT_DEVICE_NAME_MAX);
    status = uct_crypt_iface_device_address(worker, dev_name, dev_addr,
                                            UCT_CRYPT_CM_MAX_DEV_ADDR,
                                            dev_addr_len);
    if (status != UCS_ERR_NO_DEVICE) {
        return status;
    }

    /* an inner on the HCA (rc, ud, dc): the port under this netdev, named
     * as UCX names IB devices (mlx5_0:1), as rdmacm reports it */
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/infiniband", ifname);
    dir = opendir(path);
    if (dir == NULL) {
        return UCS_ERR_NO_DEVICE;
    }
    hca[0] = '\0';
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] != '.') {
            ucs_strncpy_zero(hca, entry->d_name, sizeof(hca));
            break;
        }
    }
    closedir(dir);
    snprintf(path, sizeof(path), "/sys/class/net/%s/dev_port", ifname);
    f = fopen(path, "r");
    if ((f != NULL) && (fscanf(f, "%d", &port) != 1)) {
        port = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    if (hca[0] == '\0') {
        return UCS_ERR_NO_DEVICE;
    }
    snprintf(dev_name, UCT_DEVICE_NAME_MAX, "%s:%d", hca, port + 1);
    return uct_crypt_iface_device_address(worker, dev_name, dev_addr,
                                          UCT_CRYPT_CM_MAX_DEV_ADDR,
                                          dev_addr_len);
}

/* ---- frames ------------------------------------------------------------- */

static size_t uct_crypt_cm_frame_max(const uct_crypt_cm_t *cm)
{
    return CRYPT_CM_FRAME_HDR_LEN + cm->max_body + CRYPT_AEAD_TAG_LEN;
}

/* Queue raw bytes (the handshake messages) */
static ucs_status_t uct_crypt_cm_ep_queue(uct_crypt_cm_ep_t *ep,
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
static ucs_status_t uct_crypt_cm_ep_queue_frame(uct_crypt_cm_ep_t *ep,
                                                uint8_t type,
                                                const void *head, size_t head_len,
                                                const void *data, size_t data_len)
{
    size_t body_len = head_len + data_len;
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    crypt_cm_frame_hdr_t *hdr;
    uint8_t *body;

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
        return UCS_ERR_IO_ERROR;
    }
    ep->tx_len += sizeof(*hdr) + body_len + CRYPT_AEAD_TAG_LEN;
    return UCS_OK;
}

/* A CONNECT or ACCEPT: our device address on the connection's device,
 * then UCP's private data */
static ucs_status_t uct_crypt_cm_ep_queue_addresses(uct_crypt_cm_ep_t *ep,
                                                    uint8_t type,
                                                    const void *priv,
                                                    size_t priv_len)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    uint8_t head[1 + UCT_CRYPT_CM_MAX_DEV_ADDR];
    char dev_name[UCT_DEVICE_NAME_MAX];
    size_t dev_addr_len;
    ucs_status_t status;

    if (priv_len > cm->priv_data_len) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    status = uct_crypt_cm_device(cm, ep->fd, dev_name, head + 1, &dev_addr_len);
    if (status != UCS_OK) {
        return status;
    }
    head[0] = (uint8_t)dev_addr_len;
    return uct_crypt_cm_ep_queue_frame(ep, type, head, 1 + dev_addr_len, priv,
                                       priv_len);
}

/* The same with the private data the user's pack callback writes for the
 * connection's device */
static ucs_status_t uct_crypt_cm_ep_queue_packed(uct_crypt_cm_ep_t *ep,
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
        ep->state |= UCT_CRYPT_CM_EP_CB_FAILED;
    }
    ucs_free(priv);
    return status;
}

/* ---- events ------------------------------------------------------------- */

static void uct_crypt_cm_ep_events(uct_crypt_cm_ep_t *ep)
{
    ucs_event_set_types_t events = UCS_EVENT_SET_EVREAD;
    struct epoll_event ev;

    if ((ep->state & UCT_CRYPT_CM_EP_CONNECTING) || (ep->tx_sent < ep->tx_len)) {
        events |= UCS_EVENT_SET_EVWRITE;
    }
    if (ep->state & UCT_CRYPT_CM_EP_IN_ROOM) {
        ev.events   = EPOLLIN | ((events & UCS_EVENT_SET_EVWRITE) ? EPOLLOUT : 0);
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
    ep->state |= UCT_CRYPT_CM_EP_FAILED;
}

static void uct_crypt_cm_ep_invoke_resolve(uct_crypt_cm_ep_t *ep,
                                           ucs_status_t status)
{
    uct_cm_ep_resolve_args_t args;

    ep->state      |= UCT_CRYPT_CM_EP_RESOLVED;
    args.field_mask = UCT_CM_EP_RESOLVE_ARGS_FIELD_DEV_NAME |
                      UCT_CM_EP_RESOLVE_ARGS_FIELD_STATUS;
    args.status     = status;
    ucs_strncpy_zero(args.dev_name, ep->dev_name, UCT_DEVICE_NAME_MAX);
    if (uct_cm_ep_resolve_cb(&ep->super, &args) != UCS_OK) {
        ep->state |= UCT_CRYPT_CM_EP_CB_FAILED;
    }
}

/* The connection is over for `status`: tell the user what tcp_sockcm
 * tells it in the same state, or, for a connection of ours, just end it.
 * The caller returns right after: the ep may be gone. */
static void uct_crypt_cm_ep_fail(uct_crypt_cm_ep_t *ep, ucs_status_t status,
                                 const char *why)
{
    uct_cm_remote_data_t remote_data;
    /* (a local failure was said already, at error level) */
    int said = !!(ep->state & UCT_CRYPT_CM_EP_LOCAL_FAILURE);

    if (uct_crypt_cm_ep_is_internal(ep)) {
        if (!(ep->state & UCT_CRYPT_CM_EP_REJECTING) && !said) {
            uct_crypt_cm_refused(ep, why);
        }
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
        if (!(ep->state & UCT_CRYPT_CM_EP_DISCONNECTED)) {
            ep->state |= UCT_CRYPT_CM_EP_DISCONNECTED;
            uct_cm_ep_disconnect_cb(&ep->super);
        }
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
            ucs_error("crypt: connection manager: cannot connect to %s: %s, "
                      "before the handshake was done: a server of another job "
                      "secret (compare UCX_CRYPT_KEY_FILE), not a crypt "
                      "server, or one that could not answer (its log says "
                      "why)", ep->peer_name, why);
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
            ep->state |= UCT_CRYPT_CM_EP_RESOLVED;
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

static ucs_status_t uct_crypt_cm_errno_status(int err)
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
static ucs_status_t uct_crypt_cm_ep_flush_tx(uct_crypt_cm_ep_t *ep)
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
        ep->state |= UCT_CRYPT_CM_EP_SHUT;
        (void)shutdown(ep->fd, SHUT_WR);
    }
    return UCS_OK;
}

/* A local resource failed while `doing` (memory for secrets, a cipher
 * context, randomness, a key derivation: crypt_local_failure_take says
 * which). No peer and no network caused it: said at error level whoever's
 * connection it was, never counted as a refused stranger; the connection
 * ends as any other (the user is told, with UCS_ERR_IO_ERROR). */
static void uct_crypt_cm_ep_fail_local(uct_crypt_cm_ep_t *ep, const char *doing)
{
    ucs_error("crypt: connection manager: connection %s %s: %s%s",
              (ep->state & UCT_CRYPT_CM_EP_SERVER) ? "from" : "to",
              ep->peer_name, doing, crypt_local_failure_take());
    ep->state |= UCT_CRYPT_CM_EP_LOCAL_FAILURE;
    uct_crypt_cm_ep_fail(ep, UCS_ERR_IO_ERROR, doing);
}

/* ---- what arrives ---------------------------------------------------------- */

static ucs_status_t uct_crypt_cm_ep_take_keys(uct_crypt_cm_ep_t *ep,
                                              keyex_noise_transport_t *keys)
{
    ucs_status_t status = UCS_OK;

    if ((crypt_aead_key_init(&ep->tx_key, CRYPT_AEAD_BACKEND_OPENSSL, keys->send,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK) ||
        (crypt_aead_key_init(&ep->rx_key, CRYPT_AEAD_BACKEND_OPENSSL, keys->recv,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK)) {
        status = UCS_ERR_IO_ERROR;
    }
    OPENSSL_cleanse(keys, sizeof(*keys));
    keyex_noise_cleanup(ep->hs);
    keyex_secure_free(ep->hs, sizeof(*ep->hs));
    ep->hs     = NULL;
    ep->state |= UCT_CRYPT_CM_EP_KEYS;
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
                                 &dev_addr_len);
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

    ep->state |= UCT_CRYPT_CM_EP_RESOLVED;
    status = uct_crypt_cm_ep_queue_packed(ep, CRYPT_CM_FRAME_CONNECT);
    if (status == UCS_OK) {
        ep->state |= UCT_CRYPT_CM_EP_CONNECT_SENT;
    }
    return status;
}

/* Server: a connection's first message. Its tag is checked in the cm's
 * scratch state (two HKDFs and an AES-GCM open, no DH, nothing allocated
 * for the sender), its ephemeral against the ones taken before; only then
 * does the connection get handshake state of its own, and the DH. */
static ucs_status_t uct_crypt_cm_server_handshake(uct_crypt_cm_ep_t *ep,
                                                  const keyex_noise_cm_msg_t *in)
{
    uct_crypt_cm_t *cm = uct_crypt_cm_ep_cm(ep);
    keyex_noise_transport_t keys;
    keyex_noise_cm_msg_t out;
    keyex_status_t kstatus;

    memcpy(cm->scratch, cm->start, sizeof(*cm->scratch));
    kstatus = keyex_noise_cm_init_consume(cm->scratch, in);
    if (kstatus == KEYEX_ERR_AUTH) {
        keyex_noise_cleanup(cm->scratch);
        uct_crypt_cm_ep_fail(ep, UCS_ERR_REJECTED, "its first message did "
                             "not authenticate (not a crypt client of this "
                             "job: no job secret, another job's, or not crypt)");
        return UCS_ERR_CANCELED;
    } else if (kstatus != KEYEX_OK) {
        keyex_noise_cleanup(cm->scratch);
        uct_crypt_cm_ep_fail_local(ep, "cannot check the handshake's first message");
        return UCS_ERR_CANCELED;
    }
    switch (uct_crypt_seen_check(&cm->seen, in->ephemeral)) {
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

    /* proven: out of the half-open set, and never evicted by it */
    --cm->half_open;
    ++cm->proven;
    ep->state |= UCT_CRYPT_CM_EP_PROVEN;
    ep->hs     = keyex_secure_alloc(sizeof(*ep->hs));
    if (ep->hs != NULL) {
        memcpy(ep->hs, cm->scratch, sizeof(*ep->hs));
    }
    keyex_noise_cleanup(cm->scratch);
    if ((ep->hs == NULL) ||
        (keyex_noise_cm_response_create(ep->hs, &out, &keys) != KEYEX_OK)) {
        OPENSSL_cleanse(&keys, sizeof(keys));
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
        return uct_crypt_cm_server_handshake(ep, in);
    }

    kstatus = keyex_noise_cm_response_consume(ep->hs, in, &keys);
    if (kstatus != KEYEX_OK) {
        OPENSSL_cleanse(&keys, sizeof(keys));
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
    if (uct_crypt_cm_device(cm, ep->fd, ep->dev_name, local_dev_addr,
                            &local_dev_addr_len) != UCS_OK) {
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
    ep->state |= UCT_CRYPT_CM_EP_CONN_REQ;
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
    uct_crypt_cm_remote_data(&peer, &remote_data);
    ep->state |= UCT_CRYPT_CM_EP_CONNECTED;
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

    if (s & UCT_CRYPT_CM_EP_DISCONNECTED) {
        return UCS_OK; /* nothing more is taken from a peer that ended */
    }
    if ((type == CRYPT_CM_FRAME_CONNECT) && (s & UCT_CRYPT_CM_EP_SERVER) &&
        !(s & UCT_CRYPT_CM_EP_CONN_REQ)) {
        return uct_crypt_cm_server_connect(ep, body, len);
    }
    if ((type == CRYPT_CM_FRAME_NOTIFY) && (len == 0) &&
        (s & UCT_CRYPT_CM_EP_CREATED) && !(s & UCT_CRYPT_CM_EP_CONNECTED)) {
        ep->state |= UCT_CRYPT_CM_EP_CONNECTED;
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
    if ((type == CRYPT_CM_FRAME_DISCONNECT) && (len == 0) &&
        (s & UCT_CRYPT_CM_EP_CONNECTED)) {
        ucs_debug("crypt: connection manager: %s disconnected", ep->peer_name);
        ep->state |= UCT_CRYPT_CM_EP_DISCONNECTED;
        uct_cm_ep_disconnect_cb(&ep->super);
        return UCS_ERR_CANCELED;
    }
    if ((type == CRYPT_CM_FRAME_DISCONNECT) && (len == 0)) {
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
        return sizeof(keyex_noise_cm_msg_t);
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
        if (ep->rx_have < need) {
            continue;
        }

        if (!(ep->state & UCT_CRYPT_CM_EP_KEYS)) {
            ep->rx_have = 0;
            *why        = "its answer was not crypt's handshake under "
                          "this job's secret";
            status      = uct_crypt_cm_ep_handshake(ep);
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

static void uct_crypt_cm_ep_handler(int fd, ucs_event_set_types_t events,
                                    void *arg)
{
    uct_crypt_cm_ep_t *ep = arg;
    const char *why       = "";
    ucs_status_t status   = UCS_OK;
    int err               = 0;
    socklen_t len         = sizeof(err);

    if (ep->state & UCT_CRYPT_CM_EP_FAILED) {
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

/* ---- deadlines ------------------------------------------------------------- */

/* The timer runs only while an endpoint is in its handshake: UCX's async
 * thread keeps all the process's timers in one queue of bounded size
 * (ucs_async_dispatch_timerq: about 300), and a worker each with an idle
 * connection manager would fill it. Runs, and is armed, with the async
 * context held. */
static void uct_crypt_cm_timer(int id, ucs_event_set_types_t events, void *arg)
{
    uct_crypt_cm_t *cm = arg;
    ucs_time_t now     = ucs_get_time();
    uct_crypt_cm_ep_t *ep, *tmp;
    int waiting        = 0;

    ucs_list_for_each_safe(ep, tmp, &cm->eps, list) {
        if ((ep->state & UCT_CRYPT_CM_EP_FAILED) || !uct_crypt_cm_ep_in_handshake(ep)) {
            continue;
        }
        if (now > ep->deadline) {
            uct_crypt_cm_ep_fail(ep, UCS_ERR_TIMED_OUT,
                                 "no crypt handshake within "
                                 "UCX_CRYPT_CM_HANDSHAKE_TIMEOUT");
        } else {
            waiting = 1;
        }
    }
    if (!waiting && (cm->timer_id == id)) {
        /* (from its own callback: without waiting for itself) */
        (void)ucs_async_remove_handler(id, 0);
        cm->timer_id = -1;
    }
}

static ucs_status_t uct_crypt_cm_timer_arm(uct_crypt_cm_t *cm)
{
    ucs_async_context_t *async = uct_crypt_cm_async(cm);
    ucs_status_t status        = UCS_OK;

    UCS_ASYNC_BLOCK(async);
    if (cm->timer_id < 0) {
        status = ucs_async_add_timer(async->mode, cm->timer_interval,
                                     uct_crypt_cm_timer, cm, async, &cm->timer_id);
        if (status != UCS_OK) {
            cm->timer_id = -1;
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

/* ---- endpoints ---------------------------------------------------------------- */

/* Client: the handshake state and the first message (a server's
 * connection gets its state once its first message passed,
 * uct_crypt_cm_server_handshake) */
static ucs_status_t uct_crypt_cm_ep_start_handshake(uct_crypt_cm_ep_t *ep)
{
    keyex_noise_cm_msg_t msg;

    ep->hs = keyex_secure_alloc(sizeof(*ep->hs));
    if ((ep->hs == NULL) ||
        (keyex_noise_cm_start(ep->hs, uct_crypt_job_secret) != KEYEX_OK) ||
        (keyex_noise_cm_init_create(ep->hs, &msg) != KEYEX_OK)) {
        /* the ep's creation fails with it: the user is told so */
        ucs_error("crypt: connection manager: connection to %s: cannot "
                  "start the handshake%s", ep->peer_name,
                  crypt_local_failure_take());
        return (ep->hs == NULL) ? UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
    }
    return uct_crypt_cm_ep_queue(ep, &msg, sizeof(msg));
}

static ucs_status_t uct_crypt_cm_client_init(uct_crypt_cm_ep_t *ep,
                                             const uct_ep_params_t *params)
{
    uct_crypt_cm_t *cm          = uct_crypt_cm_ep_cm(ep);
    ucs_async_context_t *async  = uct_crypt_cm_async(cm);
    const struct sockaddr *addr = params->sockaddr->addr;
    ucs_status_t status;

    ep->state |= UCT_CRYPT_CM_EP_CLIENT | UCT_CRYPT_CM_EP_CONNECTING;
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
    uct_crypt_sock_set_options(ep->fd, uct_crypt_global.keepalive);
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
        OPENSSL_cleanse(ep->rx_buf, uct_crypt_cm_frame_max(cm));
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
        self->state |= UCT_CRYPT_CM_EP_SERVER; /* no state until it proves */
        status       = UCS_OK;
    }
    if (status == UCS_OK) {
        status = uct_crypt_cm_timer_arm(cm); /* the handshake's deadline */
    }
    if (status != UCS_OK) {
        self->state |= UCT_CRYPT_CM_EP_FAILED; /* no handler, or gone with it */
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
        } else {
            --cm->half_open;
        }
    }
    ucs_list_del(&self->list);
    uct_crypt_cm_ep_release(self, cm);
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(cm));
}

UCS_CLASS_DEFINE(uct_crypt_cm_ep_t, uct_cm_base_ep_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_cm_ep_t, uct_ep_t, const uct_ep_params_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_cm_ep_t, uct_ep_t);

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
        ep->state |= UCT_CRYPT_CM_EP_FAILED;
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
    ep->state |= UCT_CRYPT_CM_EP_CREATED;
    status = uct_crypt_cm_ep_flush_tx(ep);
    if (status != UCS_OK) {
        return status;
    }
    uct_crypt_cm_ep_events(ep);
    return UCS_OK;
}

static ucs_status_t uct_crypt_cm_ep_create(const uct_ep_params_t *params,
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
static ucs_status_t uct_crypt_cm_ep_connect(uct_ep_h tl_ep,
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
            ep->state |= UCT_CRYPT_CM_EP_CONNECT_SENT;
            status     = uct_crypt_cm_ep_flush_tx(ep);
        }
        if (status == UCS_OK) {
            uct_crypt_cm_ep_events(ep);
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

static ucs_status_t uct_crypt_cm_ep_conn_notify(uct_ep_h tl_ep)
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

static ucs_status_t uct_crypt_cm_ep_disconnect(uct_ep_h tl_ep, unsigned flags)
{
    uct_crypt_cm_ep_t *ep      = ucs_derived_of(tl_ep, uct_crypt_cm_ep_t);
    ucs_async_context_t *async = uct_crypt_cm_async(uct_crypt_cm_ep_cm(ep));
    ucs_status_t status;

    UCS_ASYNC_BLOCK(async);
    if ((ep->state & UCT_CRYPT_CM_EP_FAILED) &&
        !(ep->state & UCT_CRYPT_CM_EP_DISCONNECTED)) {
        status = UCS_ERR_NOT_CONNECTED;
    } else if (ep->state & UCT_CRYPT_CM_EP_DISCONNECTING) {
        status = (ep->state & UCT_CRYPT_CM_EP_DISCONNECTED) ?
                 UCS_ERR_NOT_CONNECTED : UCS_INPROGRESS;
    } else if (!(ep->state & UCT_CRYPT_CM_EP_CONNECTED)) {
        status = UCS_ERR_BUSY;
    } else {
        ep->state |= UCT_CRYPT_CM_EP_DISCONNECTING;
        status = UCS_OK;
        /* A sealed DISCONNECT, then our FIN once it left. Also after the
         * peer's own end was read (DISCONNECTED, handler gone): the peer
         * waits for ours to complete its close, as tcp_sockcm's peer waits
         * for the shutdown that uct_tcp_sockcm_ep_disconnect always makes. */
        if ((uct_crypt_cm_ep_queue_frame(ep, CRYPT_CM_FRAME_DISCONNECT, NULL,
                                         0, NULL, 0) != UCS_OK) ||
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

static ucs_status_t uct_crypt_cm_ep_query(uct_ep_h tl_ep, uct_ep_attr_t *attr)
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

/* A server ep still in the listener's hands: half-open (its first
 * message has not passed) or proven (waiting for its CONNECT) */
static int uct_crypt_cm_ep_waiting(const uct_crypt_cm_ep_t *ep, uint32_t proven)
{
    return (ep->state & UCT_CRYPT_CM_EP_SERVER) &&
           !(ep->state & (UCT_CRYPT_CM_EP_CONN_REQ | UCT_CRYPT_CM_EP_FAILED)) &&
           ((ep->state & UCT_CRYPT_CM_EP_PROVEN) == proven);
}

/* Room for one more half-open connection. What the half-open ones sent is
 * read first (an honest client's first message follows its TCP handshake
 * at once: reading it takes the connection out of the set); then, while
 * they are still all taken, a silent one goes: the oldest of the source
 * address that holds the most (uct_crypt_admit_victim). Proven ones,
 * bounded apart, make room only among themselves, the oldest first: an
 * honest client sends its CONNECT one round trip after its first message,
 * a replay never does. */
static void uct_crypt_cm_listener_make_room(uct_crypt_cm_t *cm)
{
    const struct sockaddr_storage **sources = cm->admit_sources;
    uct_crypt_cm_ep_t **silent              = cm->admit_silent;
    uct_crypt_cm_ep_t *ep;
    size_t count;

    if (cm->half_open >= cm->max_half_open) {
        /* what the room's epoll says is readable: a read on each of them
         * was a system call per half-open connection per accept */
        uct_crypt_cm_room_handler(cm->room_fd, UCS_EVENT_SET_EVREAD, cm);
    }
    if (cm->half_open >= cm->max_half_open) {
        count = 0;
        ucs_list_for_each(ep, &cm->eps, list) { /* oldest first */
            if (uct_crypt_cm_ep_waiting(ep, 0) && (count < cm->max_half_open)) {
                silent[count]  = ep;
                sources[count] = &ep->peer_addr;
                ++count;
            }
        }
        if (count > 0) {
            ep = silent[uct_crypt_admit_victim(sources, count)];
            uct_crypt_cm_refused(ep, "half-open connections all taken; a silent "
                                 "one of the address that held the most was "
                                 "closed (UCX_CRYPT_CM_MAX_HALF_OPEN)");
            UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        }
    }
    if (cm->proven >= cm->max_half_open) {
        ucs_list_for_each(ep, &cm->eps, list) {
            if (uct_crypt_cm_ep_waiting(ep, UCT_CRYPT_CM_EP_PROVEN)) {
                uct_crypt_cm_refused(ep, "connections waiting for their "
                                     "CONNECT all taken; the oldest was closed "
                                     "(UCX_CRYPT_CM_MAX_HALF_OPEN)");
                UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
                break;
            }
        }
    }
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
        uct_crypt_sock_set_options(conn, uct_crypt_global.keepalive);
        ev.events   = EPOLLIN;
        ev.data.ptr = ep;
        if (epoll_ctl(cm->room_fd, EPOLL_CTL_ADD, conn, &ev) < 0) {
            ep->state |= UCT_CRYPT_CM_EP_FAILED;
            UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(tl_ep);
            continue;
        }
        ep->state |= UCT_CRYPT_CM_EP_IN_ROOM;
    }
}

/* What a cm needs to serve, made with its first listener: the room, the
 * state every handshake starts from and the scratch state where first
 * messages are checked, the lists of the make-room step (sized by
 * UCX_CRYPT_CM_MAX_HALF_OPEN: on the heap, not the stack) */
static void uct_crypt_cm_server_cleanup(uct_crypt_cm_t *cm)
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
        cm->admit_sources = ucs_calloc(cm->max_half_open,
                                       sizeof(*cm->admit_sources), "crypt cm");
        cm->admit_silent  = ucs_calloc(cm->max_half_open,
                                       sizeof(*cm->admit_silent), "crypt cm");
        if ((cm->start == NULL) || (cm->scratch == NULL) ||
            (cm->admit_sources == NULL) || (cm->admit_silent == NULL) ||
            (keyex_noise_cm_start(cm->start, uct_crypt_job_secret) != KEYEX_OK)) {
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
static UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_cm_listener_t, uct_listener_t, uct_cm_h,
                                 const struct sockaddr*, socklen_t,
                                 const uct_listener_params_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_cm_listener_t, uct_listener_t);

static ucs_status_t uct_crypt_cm_listener_reject(uct_listener_h tl_listener,
                                                 uct_conn_request_h conn_request)
{
    uct_crypt_cm_ep_t *ep      = (uct_crypt_cm_ep_t*)conn_request;
    ucs_async_context_t *async = uct_crypt_cm_async(uct_crypt_cm_ep_cm(ep));
    ucs_status_t status;

    UCS_ASYNC_BLOCK(async);
    ep->state |= UCT_CRYPT_CM_EP_REJECTING;
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

static ucs_status_t uct_crypt_cm_listener_query(uct_listener_h tl_listener,
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

/* ---- the cm -------------------------------------------------------------------- */

static ucs_status_t uct_crypt_cm_query(uct_cm_h tl_cm, uct_cm_attr_t *attr)
{
    uct_crypt_cm_t *cm = ucs_derived_of(tl_cm, uct_crypt_cm_t);

    if (attr->field_mask & UCT_CM_ATTR_FIELD_MAX_CONN_PRIV) {
        attr->max_conn_priv = cm->priv_data_len;
    }
    return UCS_OK;
}

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_cm_t, uct_cm_t);

static uct_cm_ops_t uct_crypt_cm_ops = {
    .close            = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_t),
    .cm_query         = uct_crypt_cm_query,
    .listener_create  = UCS_CLASS_NEW_FUNC_NAME(uct_crypt_cm_listener_t),
    .listener_reject  = uct_crypt_cm_listener_reject,
    .listener_query   = uct_crypt_cm_listener_query,
    .listener_destroy = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_listener_t),
    .ep_create        = uct_crypt_cm_ep_create
};

static ucs_status_t uct_crypt_cm_unsupported(void)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t uct_crypt_cm_ep_flush(uct_ep_h ep, unsigned flags,
                                          uct_completion_t *comp)
{
    return UCS_OK; /* nothing of the user's travels here */
}

static void uct_crypt_cm_nothing(void)
{
}

static unsigned uct_crypt_cm_iface_progress(uct_iface_h iface)
{
    return 0; /* events come on the worker's async context */
}

/* What a cm's "iface" offers: the ep calls of the sockaddr flow; every
 * data call is UNSUPPORTED, as in tcp_sockcm */
static uct_iface_ops_t uct_crypt_cm_iface_ops;
static uct_iface_internal_ops_t uct_crypt_cm_iface_internal_ops;

static void uct_crypt_cm_iface_ops_init(void)
{
    uct_iface_ops_t *ops = &uct_crypt_cm_iface_ops;
    void (**op)(void);
    size_t i;

    /* every slot UNSUPPORTED first, whatever this UCX's table holds */
    for (i = 0, op = (void (**)(void))ops; i < sizeof(*ops) / sizeof(*op); ++i) {
        op[i] = (void (*)(void))uct_crypt_cm_unsupported;
    }
    ops->ep_pending_purge       = (uct_ep_pending_purge_func_t)uct_crypt_cm_nothing;
    ops->ep_connect             = uct_crypt_cm_ep_connect;
    ops->ep_disconnect          = uct_crypt_cm_ep_disconnect;
    ops->cm_ep_conn_notify      = uct_crypt_cm_ep_conn_notify;
    ops->ep_destroy             = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t);
    ops->ep_flush               = uct_crypt_cm_ep_flush;
    ops->iface_progress_enable  = (uct_iface_progress_enable_func_t)uct_crypt_cm_nothing;
    ops->iface_progress_disable = (uct_iface_progress_disable_func_t)uct_crypt_cm_nothing;
    ops->iface_progress         = uct_crypt_cm_iface_progress;
    ops->iface_close            = (uct_iface_close_func_t)uct_crypt_cm_nothing;

    uct_crypt_internal_ops_init(&uct_crypt_cm_iface_internal_ops, 1);
    uct_crypt_cm_iface_internal_ops.ep_query = uct_crypt_cm_ep_query;
}

static UCS_CLASS_INIT_FUNC(uct_crypt_cm_t, uct_component_h component,
                           uct_worker_h worker, const uct_cm_config_t *config)
{
    const uct_crypt_cm_config_t *cm_config =
            ucs_derived_of(config, uct_crypt_cm_config_t);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    ucs_status_t status;

    (void)pthread_once(&once, uct_crypt_cm_iface_ops_init);
    UCS_CLASS_CALL_SUPER_INIT(uct_cm_t, &uct_crypt_cm_ops, &uct_crypt_cm_iface_ops,
                              &uct_crypt_cm_iface_internal_ops,
                              worker, component, config);

    status = uct_crypt_global_init(); /* the job secret: the psk */
    if (status != UCS_OK) {
        return status;
    }
    if ((cm_config->priv_data_len == 0) ||
        (cm_config->priv_data_len >
         UCT_CRYPT_CM_MAX_BODY - 1 - UCT_CRYPT_CM_MAX_DEV_ADDR)) {
        ucs_error("crypt: UCX_CRYPT_CM_PRIV_DATA_LEN=%zu: give 1 to %d bytes",
                  cm_config->priv_data_len,
                  UCT_CRYPT_CM_MAX_BODY - 1 - UCT_CRYPT_CM_MAX_DEV_ADDR);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((cm_config->max_half_open == 0) || (cm_config->handshake_timeout <= 0)) {
        ucs_error("crypt: UCX_CRYPT_CM_MAX_HALF_OPEN and "
                  "UCX_CRYPT_CM_HANDSHAKE_TIMEOUT must be above zero");
        return UCS_ERR_INVALID_PARAM;
    }
    self->priv_data_len     = cm_config->priv_data_len;
    self->max_body          = 1 + UCT_CRYPT_CM_MAX_DEV_ADDR + self->priv_data_len;
    self->handshake_timeout = ucs_time_from_sec(cm_config->handshake_timeout);
    self->max_half_open     = cm_config->max_half_open;
    self->half_open         = 0;
    self->proven            = 0;
    memset(&self->seen, 0, sizeof(self->seen));
    ucs_list_head_init(&self->eps);
    /* (what only a server needs comes with its first listener: UCP 1.13
     * asserts in ucp_listener_create when the cm failed to open) */
    self->room_fd           = -1;
    self->start             = NULL;
    self->scratch           = NULL;
    self->admit_sources     = NULL;
    self->admit_silent      = NULL;

    self->timer_interval    = ucs_time_from_sec(ucs_min(0.5,
                                        cm_config->handshake_timeout / 4));
    self->timer_id          = -1; /* armed by the first handshake */
    ucs_debug("crypt: connection manager %p opened", self);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_cm_t)
{
    uct_crypt_cm_ep_t *ep, *tmp;
    int timer_id;

    UCS_ASYNC_BLOCK(uct_crypt_cm_async(self));
    timer_id       = self->timer_id;
    self->timer_id = -1; /* the callback no longer removes it itself */
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(self));
    if (timer_id >= 0) {
        (void)ucs_async_remove_handler(timer_id, 1);
    }
    if (self->room_fd >= 0) {
        (void)ucs_async_remove_handler(self->room_fd, 1);
    }
    UCS_ASYNC_BLOCK(uct_crypt_cm_async(self));
    ucs_list_for_each_safe(ep, tmp, &self->eps, list) {
        if (uct_crypt_cm_ep_is_internal(ep)) {
            UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        } else {
            /* the user's: it must destroy it before the cm */
            ucs_warn("crypt: connection manager closed with an endpoint to %s "
                     "still open", ep->peer_name);
            ucs_list_del(&ep->list);
            ucs_list_head_init(&ep->list);
        }
    }
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(self));
    if (self->room_fd >= 0) {
        close(self->room_fd);
    }
    uct_crypt_cm_server_cleanup(self);
    uct_crypt_seen_cleanup(&self->seen);
}

UCS_CLASS_DEFINE(uct_crypt_cm_t, uct_cm_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_cm_t, uct_cm_t, uct_component_h,
                                 uct_worker_h, const uct_cm_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_cm_t, uct_cm_t);

ucs_status_t uct_crypt_cm_open(uct_component_t *component, uct_worker_h worker,
                               const uct_cm_config_t *config, uct_cm_t **cm_p)
{
    return UCS_CLASS_NEW_FUNC_NAME(uct_crypt_cm_t)(component, worker, config,
                                                   cm_p);
}
