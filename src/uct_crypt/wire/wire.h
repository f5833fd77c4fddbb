/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's own Ethernet wire: the inner transport of crypt where the user
 * names tcp. A small UCT iface of its own (never registered with UCT, so
 * UCP never sees it; crypt opens it directly) that carries crypt's records
 * as frames on TCP sockets it owns, after a Noise_IKpsk2 handshake
 * (src/keyex/noise.h). UCX's tcp transport is never opened beneath crypt:
 * it would act on its wire headers (PUT requests write where they say)
 * before anything is authenticated.
 *
 * This header is the wire's door: the crypt iface and the collective lane
 * open the wire with it, the connection manager takes its socket options,
 * and the record layer uses the wire only through uct_crypt_wire_inner_ops
 * (base/inner_ops.h). The files of the wire share wire_int.h.
 *
 * What a stranger can make this code do: accept a connection into one of a
 * bounded number of half-open slots (when they are full, what waits on
 * them is read first, then one of the silent ones goes: of the source
 * address that holds the most, the oldest, wire/wire_admit.h; every one
 * goes at a deadline, which a timer in the epoll set enforces whether or
 * not anything else wakes the process), read at most one 144-byte
 * initiation into a fixed buffer and check its size, type and mac1 (a
 * keyed hash: no DH, no allocation), and refuse it, still before any DH,
 * if its ephemeral key was seen before (a replay), or, under load, answer
 * it with a cookie reply (two keyed hashes: wire/wire_admit.h). Nothing
 * else. Once an initiation passes, the
 * connection belongs to the job-secret holder whose static key the
 * handshake proved; its frames are length-checked against a constant before
 * a byte is read into place, and each is a crypt record whose tag the
 * record layer checks before it acts on it. A frame that fails there closes
 * the connection (a stream cannot resynchronise) and fails the endpoints
 * of that authenticated peer; no other connection is touched.
 *
 * One connection per pair of ifaces carries both directions (as UCX's own
 * tcp does: a pure ACK per one-way record costs microseconds): an ep opens
 * one to its peer's iface (initiator) unless the peer's connection to us
 * is there already with its sending half unused (the ep attaches to it).
 * When both open at once, the responder with the lower static key answers
 * with REDIRECT (the Noise response's payload): the other side holds its
 * records (no record goes before the handshake's answer) and moves them to
 * the lower side's connection once that is up, or uses its own after a
 * deadline. It waits only where the lower side said its connection is still
 * being opened (OPENING) or where one of the lower side's is here and free;
 * a connection of the lower side's that is up and taken by another ep is
 * nothing to wait for. A record therefore never has two connections to
 * take, and the record layer's strict order holds. Each direction ends with its own
 * CLOSE, authenticated under the connection's transport key and carrying
 * the count of records sent; the socket closes once both halves are done.
 * Any other end of a half that carried records is a failure that both
 * sides report. Dead peers and cut links: TCP keepalive
 * (UCX_CRYPT_KEEPIDLE, KEEPCNT, KEEPINTVL), as UCX tcp's; a busy peer is
 * never one.
 */
#ifndef UCT_CRYPT_WIRE_H
#define UCT_CRYPT_WIRE_H

#include "uct_crypt/base/inner_ops.h"
#include "uct_crypt/base/keepalive.h"
#include "keyex/noise.h"

#include <uct/api/uct.h>

typedef struct uct_crypt_wire_iface uct_crypt_wire_iface_t;
typedef struct uct_crypt_wire_conn  uct_crypt_wire_conn_t;
typedef struct uct_crypt_wire_ep    uct_crypt_wire_ep_t;

/* An authenticated peer's connection ended badly, or delivered a record
 * that failed: crypt fails its endpoints to that peer. */
typedef void (*uct_crypt_wire_peer_failed_cb_t)(void *arg,
                                                const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN],
                                                const char *peer_name,
                                                const char *reason);

/* A connection that was established has ended: what the layer above keeps
 * per connection (its received flows) goes. Called from progress, never
 * inside a delivery. */
typedef void (*uct_crypt_wire_conn_ended_cb_t)(void *arg, uint64_t conn_id);

typedef struct uct_crypt_wire_params {
    const char                      *dev_name;
    const keyex_keypair_t           *keypair;     /* crypt iface's static */
    const uint8_t                   *job_secret;  /* NULL: unauthenticated */
    keyex_noise_context_t           context;      /* what peers must share */
    uct_crypt_keepalive_t           keepalive;
    uct_crypt_wire_peer_failed_cb_t peer_failed;
    void                            *peer_failed_arg;
    uct_crypt_wire_conn_ended_cb_t  conn_ended;   /* NULL: not told */
    void                            *conn_ended_arg;
    uint16_t                        listen_port;    /* 0: any (tests: fixed) */
    uint16_t                        advertise_port; /* 0: the listening one */
    size_t                          sndbuf;         /* UCS_MEMUNITS_AUTO: */
    size_t                          rcvbuf;         /* the kernel's */
    double                          handshake_rate; /* DHs a second before
                                                       cookies (wire_admit.h) */
} uct_crypt_wire_params_t;


/* Open the wire on a network device. `md` is crypt's md (used by the base
 * iface only). */
ucs_status_t uct_crypt_wire_iface_open(uct_md_h md, uct_worker_h worker,
                                       const uct_iface_params_t *params,
                                       const uct_iface_config_t *config,
                                       const uct_crypt_wire_params_t *sock_params,
                                       uct_iface_h *iface_p);

/* TCP_NODELAY, and keepalive that fails an unanswering peer after
 * uct_crypt_keepalive_seconds (off: the kernel's defaults); also the
 * connection manager's */
void uct_crypt_wire_set_options(int fd, const uct_crypt_keepalive_t *keepalive);

/* What crypt's record layer asks of the wire (wire_ops.c;
 * base/inner_ops.h) */
extern const uct_crypt_inner_ops_t uct_crypt_wire_inner_ops;

#endif
