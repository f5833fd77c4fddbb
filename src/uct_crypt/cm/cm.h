/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's connection manager: the uct_cm that UCP's client/server API
 * (ucp_listener_create, ucp_ep_create with a socket address) runs on, in
 * place of tcp's sockcm, which crypt hides. Shaped like UCX's tcp_sockcm
 * (one TCP connection per client ep, events on the worker's async
 * context, the same callbacks in the same states); unlike it, nothing a
 * peer sends is acted on before it is authenticated:
 *
 * - A connection starts with Noise_NNpsk0 (src/keyex/noise.h): the server
 *   reads exactly the 68-byte initiation and checks its tag (the psk, no
 *   DH) before anything else; until then the connection is half-open,
 *   bounded in number and time (UCT_CRYPT_CM_MAX_HALF_OPEN,
 *   UCX_CRYPT_CM_HANDSHAKE_TIMEOUT), and a replay or, under load, a first
 *   message without mac2 gets no DH (wire/wire_admit.h). A connection the
 *   server ends before the handshake is done hears why first.
 * - UCP's private data and the device addresses travel only in frames
 *   sealed under the handshake's keys (base/format.h); the server's
 *   application sees a connection request only once the client's CONNECT
 *   opened.
 * - A frame's length is checked against a constant before it is read in;
 *   one that does not open, or comes out of turn, ends the connection.
 *
 * Liveness: TCP keepalive (UCX_CRYPT_KEEP*, as every socket of crypt's); a
 * peer that ends ends this connection and UCP hears of it through the
 * disconnect callback, as with tcp_sockcm. The detail: README.md.
 */
#ifndef UCT_CRYPT_CM_H
#define UCT_CRYPT_CM_H

#include "uct_crypt/base/config.h"
#include "uct_crypt/base/counters.h"
#include "uct_crypt/base/format.h"
#include "uct_crypt/base/compat.h"
#include "uct_crypt/wire/wire_admit.h"
#include "uct_crypt/wire/wire.h"
#include "keyex/noise.h"

#include <uct/base/uct_cm.h>
#include <ucs/sys/sock.h>
#include <sys/socket.h>

#define UCT_CRYPT_CM_MAX_DEV_ADDR 255   /* one length byte in the body */
/* a CONNECT's or ACCEPT's body before UCP's private data, at most: the
 * length byte, the device address, the data iface's key */
#define UCT_CRYPT_CM_ADDRESSES_HEAD \
    (1 + UCT_CRYPT_CM_MAX_DEV_ADDR + KEYEX_PUBLIC_KEY_LEN)
#define UCT_CRYPT_CM_MAX_BODY     (UINT16_MAX - CRYPT_AEAD_TAG_LEN)


/* Connections a server holds before their first message passed its check,
 * and, apart, those that passed and wait for their CONNECT: past it one of
 * the silent ones is closed, of the address that holds the most (a flood
 * of strangers cannot hold the listener). The wire's half-open slots have
 * no knob either. */
#define UCT_CRYPT_CM_MAX_HALF_OPEN 64
/* connections whose first message passed its tag and got a cookie reply,
 * waiting for the client's answer: as many at once as clients connect
 * under load (no DH was spent on them) */
#define UCT_CRYPT_CM_MAX_COOKIED   1024

/* the connection manager's options (UCX_CRYPT_CM_*) and its open, for the
 * component (uct_crypt_component.c) */
typedef struct uct_crypt_cm_config {
    uct_cm_config_t super;
    size_t          priv_data_len;
    double          handshake_timeout;
} uct_crypt_cm_config_t;

extern ucs_config_field_t uct_crypt_cm_config_table[];
ucs_status_t uct_crypt_cm_open(uct_component_t *component, uct_worker_h worker,
                               const uct_cm_config_t *config, uct_cm_t **cm_p);

typedef struct uct_crypt_cm {
    uct_cm_t        super;
    size_t          priv_data_len;
    size_t          max_body;         /* sealed part of a frame, tag excluded */
    ucs_time_t      handshake_timeout;
    uct_crypt_keepalive_t keepalive;  /* of every connection (UCX_CRYPT_KEEP*) */
    unsigned        half_open;        /* server eps: first message not passed */
    unsigned        cookied;          /* ... passed, a cookie reply sent */
    unsigned        proven;           /* ... passed, DH done, CONNECT not yet */
    unsigned        retry_round;      /* of the timer's deferred walk */
    keyex_noise_t   *scratch;         /* secure: where first messages are
                                         checked before an ep holds state */
    keyex_noise_t   *start;           /* secure: the state every server
                                         handshake starts from (it depends
                                         on the job secret only) */
    /* uct_crypt_cm_listener_make_room's lists, UCT_CRYPT_CM_MAX_HALF_OPEN
     * long */
    const struct sockaddr_storage **admit_sources;
    struct uct_crypt_cm_ep          **admit_silent;
    int             room_fd;          /* epoll of the server eps before their
                                         request went up: one async handler
                                         for all (uct_crypt_cm_room_handler) */
    uct_crypt_seen_t seen;            /* ephemerals of first messages taken */
    uct_crypt_cookies_t cookies;      /* under load (wire/wire_admit.h) */
    uint8_t         *cookie_key;      /* secure: of first messages' mac2 */
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
    UCT_CRYPT_CM_EP_IN_ROOM       = UCS_BIT(17), /* its fd in the cm's room_fd */
    UCT_CRYPT_CM_EP_HOLDING       = UCS_BIT(18)  /* the peer's DISCONNECT read,
                                                    reported once the data
                                                    it names is in */
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
    uint8_t                 init_tag[CRYPT_AEAD_TAG_LEN]; /* client: of the
                                             first message sent, what a
                                             cookie reply answers */
    unsigned                cookie_rounds; /* cookie replies sent (server)
                                              or taken (client) */
    unsigned                retry_round; /* asked again in the cm's */
    int                     dh_deferred; /* server: its host had its share
                                            of DHs under load; its first
                                            message waits in rx_buf, and
                                            nothing more is read */
    uint8_t                 refusal;     /* KEYEX_NOISE_REFUSED_*: server:
                                            what to tell the client when it
                                            ends; client: what the server
                                            said (0: nothing) */
    /* a disconnect after the data (README.md): the key of the peer's data
     * iface (its CONNECT or ACCEPT said), and while HOLDING, the ends of
     * its flows that its DISCONNECT named, and the progress callback that
     * waits for them (until `deadline`) */
    uint8_t                 peer_data_key[KEYEX_PUBLIC_KEY_LEN];
    crypt_cm_flow_mark_t    *held;
    unsigned                held_count;
    uct_worker_cb_id_t      hold_cb_id;
} uct_crypt_cm_ep_t;


/* Where a server ep waits in the listener's hands, each set bounded
 * apart: half-open (its first message has not passed its tag), cookied
 * (it passed, under load, and got a cookie reply: its answer with mac2 is
 * awaited) or proven (a DH done, its CONNECT awaited). Only half-open
 * ones are a stranger's victims (N1 of the crypto review of 2026-12-02:
 * cookied ones were too). */
typedef enum {
    UCT_CRYPT_CM_WAIT_HALF_OPEN,
    UCT_CRYPT_CM_WAIT_COOKIED,
    UCT_CRYPT_CM_WAIT_PROVEN
} uct_crypt_cm_wait_t;

static inline uct_crypt_cm_wait_t uct_crypt_cm_ep_wait(const uct_crypt_cm_ep_t *ep)
{
    return (ep->state & UCT_CRYPT_CM_EP_PROVEN) ? UCT_CRYPT_CM_WAIT_PROVEN :
           (ep->cookie_rounds > 0)             ? UCT_CRYPT_CM_WAIT_COOKIED :
                                                 UCT_CRYPT_CM_WAIT_HALF_OPEN;
}

/* The peer's DISCONNECT read and held, not reported yet (cm_ep.c) */
static inline int uct_crypt_cm_ep_held(const uct_crypt_cm_ep_t *ep)
{
    return (ep->state & (UCT_CRYPT_CM_EP_HOLDING | UCT_CRYPT_CM_EP_DISCONNECTED)) ==
           UCT_CRYPT_CM_EP_HOLDING;
}

static inline uct_crypt_cm_t *uct_crypt_cm_ep_cm(uct_crypt_cm_ep_t *ep)
{
    return ucs_container_of(ep->super.super.super.iface, uct_crypt_cm_t,
                            super.iface);
}

static inline ucs_async_context_t *uct_crypt_cm_async(uct_crypt_cm_t *cm)
{
    return cm->super.iface.worker->async;
}

/* Owned by the cm, not by the user: a server's connection before its
 * request went up, or one being rejected */
static inline int uct_crypt_cm_ep_is_internal(const uct_crypt_cm_ep_t *ep)
{
    return ((ep->state & UCT_CRYPT_CM_EP_SERVER) &&
            !(ep->state & UCT_CRYPT_CM_EP_CONN_REQ)) ||
           (ep->state & UCT_CRYPT_CM_EP_REJECTING);
}

static inline int uct_crypt_cm_ep_in_handshake(const uct_crypt_cm_ep_t *ep)
{
    return (ep->state & UCT_CRYPT_CM_EP_SERVER) ?
           !(ep->state & UCT_CRYPT_CM_EP_CONN_REQ) :
           !(ep->state & UCT_CRYPT_CM_EP_RESOLVED);
}

/* ---- what the files of the cm call in each other ------------------------- */

UCS_CLASS_DECLARE_NEW_FUNC(uct_crypt_cm_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_cm_ep_t, uct_ep_t);
UCS_CLASS_DECLARE_NEW_FUNC(uct_crypt_cm_listener_t, uct_listener_t, uct_cm_h,
                           const struct sockaddr*, socklen_t,
                           const uct_listener_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_cm_listener_t, uct_listener_t);

/* cm.c */
/* Server, a connection ending before its handshake was done: tell the
 * client why (keyex_noise_refusal_msg_t), if ep->refusal says */
void uct_crypt_cm_ep_tell_refusal(uct_crypt_cm_ep_t *ep);

/* The one place an ep's state bits are set (cm_ep.c), asserting what makes
 * them a state machine, as tcp_sockcm_ep.c asserts its flags */
void uct_crypt_cm_ep_set(uct_crypt_cm_ep_t *ep, uint32_t bits);
void uct_crypt_cm_refused(uct_crypt_cm_ep_t *ep, const char *why);
ucs_status_t uct_crypt_cm_device(uct_crypt_cm_t *cm, int fd,
                                 char dev_name[UCT_DEVICE_NAME_MAX],
                                 void *dev_addr, size_t *dev_addr_len,
                                 uint8_t *key);
ucs_status_t uct_crypt_cm_timer_arm(uct_crypt_cm_t *cm);

/* cm_handshake.c */
size_t uct_crypt_cm_frame_max(const uct_crypt_cm_t *cm);
/* Client: make and queue the first message of a new handshake in ep->hs,
 * with mac2 under `cookie` (NULL: none yet) */
ucs_status_t uct_crypt_cm_client_first_message(uct_crypt_cm_ep_t *ep,
                                               const uint8_t *cookie);
ucs_status_t uct_crypt_cm_ep_queue(uct_crypt_cm_ep_t *ep,
                                   const void *data, size_t len);
ucs_status_t uct_crypt_cm_ep_queue_frame(uct_crypt_cm_ep_t *ep,
                                         uint8_t type,
                                         const void *head, size_t head_len,
                                         const void *data, size_t data_len);
ucs_status_t uct_crypt_cm_ep_queue_addresses(uct_crypt_cm_ep_t *ep,
                                             uint8_t type,
                                             const void *priv,
                                             size_t priv_len);
ucs_status_t uct_crypt_cm_ep_queue_packed(uct_crypt_cm_ep_t *ep,
                                          uint8_t type);
ucs_status_t uct_crypt_cm_server_handshake(uct_crypt_cm_ep_t *ep,
                                           const keyex_noise_cm_init_msg_t *in);
void uct_crypt_cm_ep_handler(int fd, ucs_event_set_types_t events,
                             void *arg);

/* cm_ep.c */
void uct_crypt_cm_ep_events(uct_crypt_cm_ep_t *ep);
void uct_crypt_cm_ep_invoke_resolve(uct_crypt_cm_ep_t *ep,
                                    ucs_status_t status);
void uct_crypt_cm_ep_fail(uct_crypt_cm_ep_t *ep, ucs_status_t status,
                          const char *why);
ucs_status_t uct_crypt_cm_errno_status(int err);
ucs_status_t uct_crypt_cm_ep_flush_tx(uct_crypt_cm_ep_t *ep);
void uct_crypt_cm_ep_fail_local(uct_crypt_cm_ep_t *ep, const char *doing);
ucs_status_t uct_crypt_cm_ep_create(const uct_ep_params_t *params,
                                    uct_ep_h *ep_p);
ucs_status_t uct_crypt_cm_ep_connect(uct_ep_h tl_ep,
                                     const uct_ep_connect_params_t *params);
ucs_status_t uct_crypt_cm_ep_conn_notify(uct_ep_h tl_ep);
ucs_status_t uct_crypt_cm_ep_disconnect(uct_ep_h tl_ep, unsigned flags);
/* The peer's DISCONNECT named `count` flow ends (`marks`): report it now
 * or once they are in; and report one held past its deadline */
void uct_crypt_cm_ep_peer_disconnected(uct_crypt_cm_ep_t *ep,
                                       const crypt_cm_flow_mark_t *marks,
                                       unsigned count);
void uct_crypt_cm_ep_report_disconnect(uct_crypt_cm_ep_t *ep);
ucs_status_t uct_crypt_cm_ep_query(uct_ep_h tl_ep, uct_ep_attr_t *attr);

/* cm_listener.c */
void uct_crypt_cm_server_cleanup(uct_crypt_cm_t *cm);
ucs_status_t uct_crypt_cm_listener_reject(uct_listener_h tl_listener,
                                          uct_conn_request_h conn_request);
ucs_status_t uct_crypt_cm_listener_query(uct_listener_h tl_listener,
                                         uct_listener_attr_t *attr);

#endif
