/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's own Ethernet wire, where the user names tcp: a UCT iface of its
 * own (UCP never sees it) that carries crypt's records as frames on TCP
 * sockets it owns, after a Noise_IKpsk2 handshake (src/keyex/noise.h).
 * UCX's tcp transport is never opened beneath crypt: it acts on its
 * headers (PUT requests write where they say) before anything is checked.
 *
 * This header is the wire's door: uct_crypt_inner_open opens the wire
 * with it, the connection manager takes its socket options, and the
 * record layer and the lane use it only through uct_crypt_wire_inner_ops
 * (base/inner_ops.h). The files of the wire share wire_int.h.
 *
 * What a stranger can make it do: take one of a bounded number of
 * half-open slots until a deadline (wire/wire_admit.h), and have one
 * 144-byte initiation read into a fixed buffer and checked by a keyed hash
 * (mac1), refused if its ephemeral was seen (a replay), answered with a
 * cookie under load. No DH, no allocation. Past the handshake the
 * connection is a job-secret holder's; a frame that fails closes it and
 * fails that peer's endpoints only. One connection per pair of ifaces,
 * CLOSE per direction, keepalive: README.md.
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
