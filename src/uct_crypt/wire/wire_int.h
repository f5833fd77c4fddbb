/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of crypt's own wire share: the state of a connection, the
 * iface and ep structs, and the functions one file calls in another.
 * Nothing outside wire/ includes it (wire.h is the door).
 */
#ifndef UCT_CRYPT_WIRE_INT_H
#define UCT_CRYPT_WIRE_INT_H

#include "uct_crypt/wire/wire.h"
#include "uct_crypt/base/format.h"
#include "uct_crypt/base/counters.h"
#include "uct_crypt/base/compat.h"
#include "uct_crypt/wire/wire_frame.h"
#include "uct_crypt/wire/wire_replay.h"
#include "uct_crypt/wire/wire_admit.h"

#include <uct/base/uct_iface.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/queue.h>
#include <net/if.h>
#include <sys/socket.h>

/* Frame sizes (wire/wire_frame.h): a record of at most max_bcopy
 * bytes behind the header. The wire carries one AM id: each of its ifaces
 * has one user (crypt's records, or the collective lane), and the frame
 * header names none. */
enum {
    UCT_CRYPT_WIRE_AM_ID       = 0,
    UCT_CRYPT_WIRE_TX_BUF      = 4 * UCT_CRYPT_WIRE_FRAME_MAX,
    UCT_CRYPT_WIRE_WIRE_SEGMENT_MAX = 262144, /* a bulk segment's frame */
    UCT_CRYPT_WIRE_HALF_OPEN_MAX = 64,
    /* connections that passed mac1 and wait for the answer to a cookie
     * reply: a job's wireup under load makes as many at once as it opens
     * connections to this iface (100 in a gtest lost some at 64) */
    UCT_CRYPT_WIRE_COOKIED_MAX = 1024,
    UCT_CRYPT_WIRE_DRAIN_TIMEOUT = 10,  /* s: a closing connection's last bytes */
    UCT_CRYPT_WIRE_REDIRECT_TIMEOUT = 2, /* s: for the peer's own connection */
    /* connections an ep opens again when the peer closed them before it
     * answered (UCX tcp's UCX_TCP_MAX_CONN_RETRIES default) */
    UCT_CRYPT_WIRE_CONNECT_RETRIES = 25
};

/*
 * Forward secrecy per connection: crypt derives the keys of what it sends
 * and receives on a connection from that connection's Noise exporter
 * secret (keyex_noise_transport_t), not from the static keys alone. As
 * UCX's tcp before its connection is up (uct_tcp_ep_check_tx_res), an ep
 * takes no frame until its connection is final (the handshake answered,
 * no redirect pending): sends return NO_RESOURCE and wait on the pending
 * queue. So a send UCP sees complete is sealed and in the kernel (or, its
 * tail, in the send buffer that the connection drains as it closes), and
 * no close can drop it.
 */
/* The exporter secret of the ep's connection once it is final, else NULL
 * (the ep takes no record yet) */
const uint8_t *uct_crypt_wire_ep_secret(uct_ep_h tl_ep);
/* Did the ep fail for a reason of this process's own (its handshake could
 * not get memory, a cipher context, randomness)? */
int uct_crypt_wire_ep_failed_locally(uct_ep_h tl_ep);
/* The responder static key crypt's ep is to prove before the wire's ep
 * sends anything: given at ep creation (connect-to-iface) or at
 * connect_to_ep, through the ops table's ep_set_peer. */
ucs_status_t uct_crypt_wire_ep_set_peer(uct_ep_h tl_ep,
                                        const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN]);

/* Inside the AM handler of a wire iface: the static key the connection
 * of the record being delivered proved (NULL outside a delivery) */
const uint8_t *uct_crypt_wire_rx_peer(uct_iface_h tl_iface);

/* Inside crypt's AM handler: the exporter secret of the connection the
 * record came on (NULL outside a sock iface's delivery) */
const uint8_t *uct_crypt_wire_rx_secret(uct_iface_h tl_iface);

/* ... and that connection's peer address ("" outside a delivery) */
const char *uct_crypt_wire_rx_peer_name(uct_iface_h tl_iface);
/* ... and its id, which uct_crypt_wire_conn_ended_cb_t names when it ends
 * (0 outside a delivery; never 0 inside one) */
uint64_t uct_crypt_wire_rx_conn(uct_iface_h tl_iface);
void uct_crypt_wire_rx_reject(uct_iface_h tl_iface, const char *reason);
/* ... and outside a delivery, by the connection's id: failed from progress
 * (uct_crypt_wire_iface_rejects) */
void uct_crypt_wire_rx_reject_conn(uct_iface_h tl_iface, uint64_t conn_id,
                                   const char *reason);
void uct_crypt_wire_iface_rejects(uct_crypt_wire_iface_t *iface);

/* Bulk segments on the wire (the bulk engine, uct_crypt_bulk_*.c): the
 * sender puts a SEGMENT frame right behind the record that announces it;
 * room for both is checked first, so nothing goes between them. The frame
 * is reserved, written in place (sealed into), then committed. */
int uct_crypt_wire_ep_segment_room(uct_ep_h tl_ep, size_t record_max,
                                   size_t length);
void *uct_crypt_wire_ep_segment_reserve(uct_ep_h tl_ep, size_t length);
void uct_crypt_wire_ep_segment_commit(uct_ep_h tl_ep, size_t length);
/* Inside crypt's AM handler, on a record that announced a segment: the next
 * frame of its connection must be that segment, `length` bytes of
 * ciphertext received into `dest`, then its tag, which `cb` gets (and may
 * reject, as for a record); anything else closes the connection. */
typedef uct_crypt_inner_segment_cb_t uct_crypt_wire_segment_cb_t;
void uct_crypt_wire_rx_expect_segment(uct_iface_h tl_iface, void *dest,
                                      size_t length,
                                      uct_crypt_wire_segment_cb_t cb, void *arg);



/* A connection's states; uct_crypt_wire_conn_set_state is the one place
 * they change, and asserts each change is one of these:
 *   CONNECTING -> INIT_SENT -> ESTABLISHED -> CLOSED   (initiator)
 *   WAIT_INIT -> ESTABLISHED -> CLOSED                  (responder)
 *   INIT_SENT -> INIT_SENT (again, with a cookie), any -> CLOSED.
 * Flags refine ESTABLISHED: closing, tx_closed, frames.closed (the CLOSE
 * exchange), redirect_wait, redirect_opening (one connection per pair). */
typedef enum {
    UCT_CRYPT_WIRE_CONNECTING,   /* initiator: connect() in progress */
    UCT_CRYPT_WIRE_INIT_SENT,    /* initiator: waiting for the response */
    UCT_CRYPT_WIRE_WAIT_INIT,    /* responder: half-open, nothing proved */
    UCT_CRYPT_WIRE_ESTABLISHED,  /* both proved: records and segments flow,
                                    under the exporter's keys */
    UCT_CRYPT_WIRE_CLOSED,       /* the socket closed, the keys wiped; the
                                    conn is freed right after */
    UCT_CRYPT_WIRE_STATE_LAST
} uct_crypt_wire_state_t;

struct uct_crypt_wire_conn {
    ucs_list_link_t          list;         /* in the iface's conns */
    uct_crypt_wire_iface_t   *iface;
    int                      fd;
    uint64_t                 id;           /* 1, 2, ... per iface */
    uct_crypt_wire_state_t   state;
    uct_crypt_wire_ep_t      *ep;          /* initiator's ep; NULL: responder */
    unsigned                 events;       /* EPOLL* registered */
    ucs_time_t               deadline;     /* half-open / handshake */
    struct sockaddr_storage  peer_addr;
    char                     peer_name[64];
    uint8_t                  peer_static[KEYEX_PUBLIC_KEY_LEN];
    keyex_noise_t            *hs;          /* during the handshake, secure */
    uint8_t                  *secret;      /* the exporter, once established:
                                              secure memory */
    crypt_aead_key_t         ctrl_send, ctrl_recv; /* CLOSE frames */
    uint64_t                 ctrl_send_seq;
    uct_crypt_frame_rx_t     frames;       /* what was taken: counts, the
                                              peer's CLOSE, an announced
                                              segment's length */
    uint8_t                  *rx_buf;      /* FRAME_MAX once established,
                                              hs_rx before; NULL when empty */
    size_t                   rx_len;
    uint8_t                  hs_rx[sizeof(keyex_noise_init_msg_t)]; /* a
                                              handshake message: what a
                                              half-open stranger may make
                                              this side hold (the largest,
                                              the initiation) */
    uint8_t                  *tx_buf;      /* TX_BUF; NULL when empty */
    size_t                   tx_head, tx_len;
    const char               *reject;      /* why the record layer refused
                                              what was just handed up */
    const char               *reject_later;/* ... or something it handed up
                                              before (progress fails it) */
    /* the record just delivered announced a bulk segment: the next frame
     * (set with frames.segment_len, which the frame reader checks), its
     * ciphertext received straight into seg_dest, then its tag */
    uct_crypt_wire_segment_cb_t segment_cb;  /* NULL: none announced */
    void                     *segment_arg;
    uint8_t                  *seg_dest;
    size_t                   seg_len;      /* ciphertext bytes */
    size_t                   seg_got;      /* of the body, once its header
                                              was taken (seg_body) */
    int                      seg_body;
    uint8_t                  seg_tag[CRYPT_AEAD_TAG_LEN];
    int                      initiator;    /* we opened it */
    unsigned                 reclaim_round;/* read in this reclaim round (or
                                              asked again, deferred) */
    int                      closing;      /* our half is done: drain, then
                                              close once the peer's is too */
    int                      tx_closed;    /* we sent CLOSE */
    int                      redirect_wait;/* the peer asked us to send on its
                                              connection: records held */
    int                      redirect_opening; /* ... and it was still being
                                                  opened: held to the deadline */
    size_t                   init_left;    /* initiation bytes not sent yet */
    uint8_t                  init_mac1[KEYEX_NOISE_MAC1_LEN]; /* of the last
                                              initiation sent: what a cookie
                                              reply answers */
    unsigned                 cookie_rounds;/* cookie replies sent (responder)
                                              or taken (initiator) */
    int                      dh_deferred;  /* its host had its share of DHs
                                              under load: the initiation
                                              waits in hs_rx, unread past */
    uint64_t                 tx_records, tx_records_told;
    int                      taken_owed;   /* the peer's first record was
                                              taken: TAKEN not sent yet */
    int                      taken_told;
};

typedef struct uct_crypt_wire_buf_cache {
    void     *bufs[8];
    unsigned count;
} uct_crypt_wire_buf_cache_t;

struct uct_crypt_wire_iface {
    uct_base_iface_t                super;
    uct_crypt_wire_buf_cache_t      rx_cache, tx_cache;
    int                             listen_fd;
    int                             epfd;
    struct sockaddr_storage         addr;   /* bound: device address, port */
    uint16_t                        advertise_port; /* tests: a relay's */
    const keyex_keypair_t           *keypair;
    const uint8_t                   *job_secret;
    keyex_noise_context_t           context;
    uint8_t                         *mac1_key; /* of initiations to us:
                                                  secure memory */
    uint8_t                         *cookie_key; /* of their mac2: secure */
    uct_crypt_cookies_t             cookies;  /* under load (wire_admit.h) */
    uct_crypt_keepalive_t           keepalive;
    double                          keepalive_s; /* 0: off */
    size_t                          sndbuf, rcvbuf; /* sockets' buffers */
    uct_crypt_wire_peer_failed_cb_t peer_failed;
    void                            *peer_failed_arg;
    uct_crypt_wire_conn_ended_cb_t  conn_ended;
    void                            *conn_ended_arg;
    uint64_t                        next_conn_id;
    uint64_t                        *ended;   /* ids to tell from progress */
    size_t                          ended_count, ended_max;
    ucs_list_link_t                 conns;
    ucs_list_link_t                 eps;
    ucs_list_link_t                 busy_eps; /* with pending or flushes */
    unsigned                        half_open;
    /* responder connections whose initiation passed mac1 and got a cookie
     * reply: waiting for the initiation with mac2, out of the half-open
     * set (never a stranger's victim), bounded apart (N1 of the crypto
     * review of 2026-12-02) */
    unsigned                        cookied;
    unsigned                        reclaim_round;
    uct_crypt_wire_conn_t           *rx_conn; /* delivering a record now */
    uct_crypt_replay_t              replay; /* initiations taken, per key */
    unsigned                        closed_since_trim; /* connections ended since
                                              the heap was given back */
    uct_crypt_seen_t                seen;   /* their ephemerals */
    int                             timer_fd; /* in epfd: the deadlines of
                                                 half-open connections */
    int                             timer_armed;
    crypt_wire_dev_local_t          dev_local; /* this machine and netns */
    ucs_time_t                      next_timer;
    ucs_time_t                      next_liveness; /* uct_crypt_wire_unanswered */
    int                             ep_fail_pending;
    int                             reject_pending; /* a conn's reject_later */
    int                             redirect_pending;
    char                            dev_name[IFNAMSIZ];
};

struct uct_crypt_wire_ep {
    uct_base_ep_t         super;
    ucs_list_link_t       list;            /* in the iface's eps */
    uct_crypt_wire_conn_t *conn;           /* NULL until connected */
    struct sockaddr_storage dest;
    int                   have_dest;
    uint8_t               peer_static[KEYEX_PUBLIC_KEY_LEN];
    int                   have_peer;
    ucs_status_t          status;          /* UCS_OK or why it failed */
    int                   peer_left;       /* the failure is the peer's
                                              orderly end (CLOSE, then its
                                              end of the socket) */
    int                   fail_local;      /* the failure is this process's
                                              own (memory, cipher, random) */
    char                  fail_reason[256];
    int                   fail_reported;
    ucs_queue_head_t      pending;         /* uct_pending_req_t */
    int                   dispatching;     /* progress runs a pending
                                              request: it may send */
    ucs_queue_head_t      flushes;         /* uct_crypt_wire_flush_t */
    ucs_list_link_t       busy;            /* in the iface's busy_eps while
                                              it has pending or flushes */
    unsigned              connect_retries; /* connections the peer closed
                                              before it answered */
};

/* wire/wire_conn.c */
void *uct_crypt_wire_buf_get(uct_crypt_wire_buf_cache_t *cache, size_t size);
void uct_crypt_wire_buf_put(uct_crypt_wire_iface_t *iface,
                            uct_crypt_wire_buf_cache_t *cache, uint8_t **buf_p);
uct_crypt_wire_conn_t *uct_crypt_wire_conn_new(uct_crypt_wire_iface_t *iface,
                                               int fd, uct_crypt_wire_ep_t *ep,
                                               const struct sockaddr *peer);
void uct_crypt_wire_conn_close(uct_crypt_wire_conn_t *conn);
/* The one place a connection's state changes (the transitions above) */
void uct_crypt_wire_conn_set_state(uct_crypt_wire_conn_t *conn,
                                   uct_crypt_wire_state_t state);
/* Once many connections ended, their memory back to the system (from
 * the iface's 250 ms tick) */
void uct_crypt_wire_give_heap_back(uct_crypt_wire_iface_t *iface);
void uct_crypt_wire_conn_fail(uct_crypt_wire_conn_t *conn, const char *reason);
/* A connection of no proven peer closed (counted; logged at `level`) */
void uct_crypt_wire_conn_refuse(uct_crypt_wire_conn_t *conn, const char *reason,
                                ucs_log_level_t level);
void uct_crypt_wire_conn_handle(uct_crypt_wire_conn_t *conn, unsigned events);
int uct_crypt_wire_conn_flush(uct_crypt_wire_conn_t *conn);
/* Everything of ours is in the kernel and the peer took our first record
 * (its TAKEN): an ep's flush and an iface flush wait for both */
int uct_crypt_wire_conn_flushed(const uct_crypt_wire_conn_t *conn);
/* May the records of its ep go out sealed now (handshake answered, no
 * redirect pending)? */
int uct_crypt_wire_conn_final(const uct_crypt_wire_conn_t *conn);
int uct_crypt_wire_conn_tx_room(const uct_crypt_wire_conn_t *conn, size_t max);
void *uct_crypt_wire_conn_tx_reserve(uct_crypt_wire_conn_t *conn, size_t max);
void uct_crypt_wire_conn_tx_commit(uct_crypt_wire_conn_t *conn, uint8_t type,
                                   size_t length);
void uct_crypt_wire_conn_set_events(uct_crypt_wire_conn_t *conn, unsigned events);
ucs_status_t uct_crypt_wire_conn_start(uct_crypt_wire_conn_t *conn);
int uct_crypt_wire_conn_send_close(uct_crypt_wire_conn_t *conn);
void uct_crypt_wire_conn_heartbeat(uct_crypt_wire_conn_t *conn);
/* Our half of `conn` is done (its ep left): CLOSE, then the socket closes
 * once drained and the peer's half is done too */
void uct_crypt_wire_conn_release(uct_crypt_wire_conn_t *conn);
/* An established connection from `peer` whose sending half nobody uses,
 * for a new ep to attach to; NULL if none */
uct_crypt_wire_conn_t *uct_crypt_wire_conn_find_free(uct_crypt_wire_iface_t *iface,
                                                     const uint8_t *peer);
int uct_crypt_wire_conn_move(uct_crypt_wire_conn_t *from,
                             uct_crypt_wire_conn_t *to);
/* Our own (initiated) connection to `peer`, still sending or about to;
 * with `opening`, only one whose handshake is still under way */
uct_crypt_wire_conn_t *uct_crypt_wire_conn_own_to(uct_crypt_wire_iface_t *iface,
                                                  const uint8_t *peer,
                                                  int opening);
/* Our connection to `peer` that waits for the peer's own */
uct_crypt_wire_conn_t *
uct_crypt_wire_conn_redirected_to(uct_crypt_wire_iface_t *iface,
                                  const uint8_t *peer);
/* A failure of this process, not of the peer (memory, cipher, randomness):
 * said with its reason; fails our ep, ends a peer's connection */
void uct_crypt_wire_conn_fail_local(uct_crypt_wire_conn_t *conn,
                                    const char *doing);
ucs_status_t uct_crypt_wire_conn_start_hs(uct_crypt_wire_conn_t *conn,
                                          uct_crypt_wire_iface_t *iface);

/* wire_handshake.c: the initiation made (initiator, connected), with mac2
 * under `cookie` (NULL: none yet); the responder's 144 bytes and the
 * initiator's 69-byte answer or 36-byte cookie reply taken (0: the
 * connection is gone) */
ucs_status_t uct_crypt_wire_conn_make_init(uct_crypt_wire_conn_t *conn,
                                           const uint8_t *cookie);
int uct_crypt_wire_conn_accept_init(uct_crypt_wire_conn_t *conn);
void uct_crypt_wire_conn_retry_deferred(uct_crypt_wire_iface_t *iface);
int uct_crypt_wire_conn_accept_response(uct_crypt_wire_conn_t *conn);
int uct_crypt_wire_conn_accept_cookie(uct_crypt_wire_conn_t *conn);
void uct_crypt_wire_conn_redirects(uct_crypt_wire_iface_t *iface);
/* The deadline of a connection waiting for its peer's (redirect) passed */
void uct_crypt_wire_conn_redirect_expired(uct_crypt_wire_conn_t *conn);

/* wire/wire_iface.c */
int uct_crypt_wire_dest(const uct_device_addr_t *dev_addr, const void *port_addr,
                        struct sockaddr_storage *dest);
void uct_crypt_wire_iface_set_options(uct_crypt_wire_iface_t *iface, int fd);

/* wire/wire_ep.c (progress_tx takes a busy ep off the busy list when
 * it has nothing left) */
UCS_CLASS_DECLARE_NEW_FUNC(uct_crypt_wire_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_wire_ep_t, uct_ep_t);
ucs_status_t uct_crypt_wire_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                        uint64_t header, const void *payload,
                                        unsigned length);
ssize_t uct_crypt_wire_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                   uct_pack_callback_t pack_cb, void *arg,
                                   unsigned flags);
ucs_status_t uct_crypt_wire_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                           unsigned flags);
void uct_crypt_wire_ep_pending_purge(uct_ep_h tl_ep,
                                     uct_pending_purge_callback_t cb, void *arg);
ucs_status_t uct_crypt_wire_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                     uct_completion_t *comp);
ucs_status_t uct_crypt_wire_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_crypt_wire_ep_check(uct_ep_h tl_ep, unsigned flags,
                                     uct_completion_t *comp);
ucs_status_t uct_crypt_wire_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);
ucs_status_t uct_crypt_wire_ep_connect_to_ep(uct_ep_h tl_ep,
                                             const uct_device_addr_t *dev_addr,
                                             const uct_ep_addr_t *ep_addr);
/* A new connection for `ep`, whose last one ended before the handshake's
 * answer */
ucs_status_t uct_crypt_wire_ep_reconnect(uct_crypt_wire_ep_t *ep);
void uct_crypt_wire_ep_failed(uct_crypt_wire_ep_t *ep, ucs_status_t status,
                              const char *reason);
unsigned uct_crypt_wire_ep_progress_tx(uct_crypt_wire_ep_t *ep);
void uct_crypt_wire_iface_report_failures(uct_crypt_wire_iface_t *iface);

/* drop-and-count accounting (rate-limited log) */
void uct_crypt_wire_outsider(uct_crypt_wire_iface_t *iface,
                             const uct_crypt_wire_conn_t *conn, const char *what,
                             ucs_log_level_t level);

#endif
