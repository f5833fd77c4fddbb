/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's options (UCX_CRYPT_*), which every room reads and the wrapper
 * parses (the tables: uct_crypt_global.c): the process-wide ones, read
 * once, and an iface's; the job secret; the data role's socket and flow
 * bounds, which the auxiliary role, the lane and the connection manager
 * take (uct_crypt_iface.c); and how a failed endpoint is told.
 * Declarations only: nothing here includes a room.
 */
#ifndef UCT_CRYPT_CONFIG_H
#define UCT_CRYPT_CONFIG_H

#include "uct_crypt/api/uct_crypt_stats.h"
#include "uct_crypt/base/keepalive.h"
#include "uct_crypt/base/format.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/config/parser.h>
#include <stdint.h>

/* Flows an iface receives at once (record/keys.c): in all, and from
 * one peer key (UCX_CRYPT_RX_FLOWS*, both roles) */
typedef struct uct_crypt_rx_limits {
    unsigned           flows;
    unsigned           flows_per_peer;
} uct_crypt_rx_limits_t;

/* Which endpoint failures end the process (UCX_CRYPT_ABORT_ON_EP_FAILURE) */
typedef enum {
    UCT_CRYPT_ABORT_AUTO,      /* DETECTED in an MPI rank, else UNHANDLED */
    UCT_CRYPT_ABORT_UNHANDLED, /* those UCP's error handler gives back */
    UCT_CRYPT_ABORT_DETECTED,  /* ... and every one crypt failed itself */
    UCT_CRYPT_ABORT_LAST
} uct_crypt_abort_on_ep_failure_t;

#if UCX_CRYPT_FAULT_INJECTION
/* TESTING ONLY (UCX_CRYPT_LANE_FAULT, lane/lane.c): next to its first
 * chunk the collective lane sends one more, as an attacker on the network
 * would */
typedef enum {
    UCT_CRYPT_LANE_FAULT_NONE,
    UCT_CRYPT_LANE_FAULT_FORGED_BYTES,  /* a copy, a bit flipped, ahead of it */
    UCT_CRYPT_LANE_FAULT_FORGED_HEADER, /* a copy of another length, ahead */
    UCT_CRYPT_LANE_FAULT_STRANGER,      /* one under a key not the team's */
    UCT_CRYPT_LANE_FAULT_REPLAY,        /* the chunk again, behind it */
    UCT_CRYPT_LANE_FAULT_LAST
} uct_crypt_lane_fault_t;
extern const char *uct_crypt_lane_fault_names[];
#endif

/* A knob only test builds have (a test's switch, a benchmark's baseline):
 * a release build takes _release, the test build's default */
#if UCX_CRYPT_FAULT_INJECTION
#define UCT_CRYPT_TEST_KNOB(_config, _field, _release) ((_config)->_field)
#else
#define UCT_CRYPT_TEST_KNOB(_config, _field, _release) (_release)
#endif

/* Process-wide configuration (UCX_CRYPT_*), read once. */
typedef struct uct_crypt_global_config {
    int                   enable;
    char                  *tls;           /* inner transports, "" = from UCX_TLS */
    char                  *key_file;
    int                   unauthenticated; /* no job secret, on purpose */
    unsigned              key_bits;
    int                   backend;        /* crypt_aead_backend_t */
    int                   stats;
#if UCX_CRYPT_FAULT_INJECTION
    unsigned long         rekey_records;  /* 0: keyex default */
    unsigned long         handshake_rate; /* UCS_ULUNITS_INF: no cookies */
#endif
    int                   abort_on_ep_failure; /* resolved: never AUTO */
    int                   abort_in_mpi_rank;   /* ... because AUTO found one */
    /* read by the collectives' MPI adapter (src/ucp_crypt/mpi), never
     * here; declared so that UCX documents them and does not call them
     * unknown */
    char                  *coll_nodes;
    char                  *coll_tune;
    int                   coll_verbose;
#if UCX_CRYPT_FAULT_INJECTION
    char                  *coll_fault;
    int                   lane_fault;  /* uct_crypt_lane_fault_t */
#endif
    char                  *coll_lane;
#if UCX_CRYPT_FAULT_INJECTION
    int                   emulate_connect_to_ep; /* tests: crypt as rc */
    int                   lane_ucx_tcp;          /* tests: UCX tcp as ud */
    double                test_seal_bandwidth;   /* tests: bytes/s, 0: measure */
#endif
} uct_crypt_global_config_t;

/* The auxiliary tl's iface options: UCT's base ones only; it takes the
 * data role's keepalive and flow bounds (uct_crypt_data_role_options) */
typedef struct uct_crypt_aux_iface_config {
    uct_iface_config_t    super;
} uct_crypt_aux_iface_config_t;

typedef struct uct_crypt_md_config {
    uct_md_config_t super;
} uct_crypt_md_config_t;

/* How the bulk engine seals a put (UCX_CRYPT_BULK_MODE) */
typedef enum {
    UCT_CRYPT_BULK_PIPELINED, /* segments sealed by the pool, sent as ready */
    UCT_CRYPT_BULK_NAIVE,     /* sealed whole by one thread, then sent */
    UCT_CRYPT_BULK_MODE_LAST
} uct_crypt_bulk_mode_t;

/* Per iface (UCX_CRYPT_* too): the bulk engine, and in test builds the
 * fault hook, per iface so that one process can hold a tampering and an
 * honest iface (UCT tests). */
typedef struct uct_crypt_iface_config {
    uct_iface_config_t super;
#if UCX_CRYPT_FAULT_INJECTION
    char               *fault;          /* fault/fault.c */
    unsigned long      fault_after;
    char               *fault_static_key; /* hex: a known iface key */
    int                inner_ucx_tcp;   /* UCX's tcp stands in for rc */
    unsigned           wire_port;       /* own wire: listen here */
    unsigned           wire_advertise_port; /* ... and name this one */
    /* the bulk engine's test and benchmark switches (bulk/bulk.c) */
    int                bulk_mode;       /* uct_crypt_bulk_mode_t */
    unsigned           bulk_max_outstanding; /* above: seal inline (k=1) */
    char               *profile;        /* calibration file, "" = none */
#endif
    /* the bulk engine (bulk/bulk.c) */
    int                bulk;            /* advertise encrypted put_zcopy */
    size_t             bulk_segment;    /* bytes per segment (auto: profile) */
    unsigned long      bulk_threads;    /* auto: profile, else min(T0-T1, 2) */
    unsigned           bulk_depth;      /* bounce segments per iface */
    /* crypt's own wire: its sockets' buffers and keepalive, as UCX tcp's
     * SNDBUF, RCVBUF, KEEPIDLE, KEEPCNT, KEEPINTVL */
    size_t             sndbuf;          /* UCS_MEMUNITS_AUTO: the kernel's */
    size_t             rcvbuf;
    uct_crypt_keepalive_t keepalive;
    uct_crypt_rx_limits_t rx_limits;
} uct_crypt_iface_config_t;

extern uct_crypt_global_config_t uct_crypt_global;
extern uct_crypt_global_config_t uct_crypt_global;

/* UCX_CRYPT_HANDSHAKE_RATE as the listeners take it (wire/wire_admit.h):
 * a listener spends at most a second's worth of DHs on a replay flood
 * before it is under load; 1000 is some 15% of a core for X25519 (a
 * replayed initiation cost the own wire about 160 us of DHs: issue 29) */
#define UCT_CRYPT_HANDSHAKE_RATE_AUTO 1000.0
double uct_crypt_handshake_rate(void);
/* UCX_CRYPT_REKEY_RECORDS (test builds; 0: the limits of keyex.h): read
 * per record, so a constant in a release build */
#define uct_crypt_rekey_records() \
    UCT_CRYPT_TEST_KNOB(&uct_crypt_global, rekey_records, 0UL)
extern uint8_t *uct_crypt_job_secret;  /* NULL: none configured */


/* The device address of the data iface of ours that `worker` opened on
 * `dev_name` (the connection manager hands it to UCP, which puts it in
 * place of the peer's own); UCS_ERR_NO_DEVICE where there is none.
 * uct_crypt_iface.c */
/* The data role's keepalive and flow bounds (UCX_CRYPT_KEEP*,
 * UCX_CRYPT_RX_FLOWS*), read from the environment for what has no table
 * of its own: the auxiliary role, the lane, the connection manager (one
 * set of knobs for every socket and flow table of the process); either
 * may be NULL. uct_crypt_iface.c */
ucs_status_t uct_crypt_data_role_options(uct_crypt_keepalive_t *keepalive,
                                         uct_crypt_rx_limits_t *rx_limits);

/* From any thread: wake `worker` where it sleeps on our data iface on
 * `dev_name`'s event fd (a progress callback the connection manager
 * registered from its async thread must run). uct_crypt_iface.c */
void uct_crypt_iface_wake(uct_worker_h worker, const char *dev_name);

/* (`key`, when not NULL: the iface's public key) */
ucs_status_t uct_crypt_iface_device_address(uct_worker_h worker,
                                            const char *dev_name,
                                            void *addr, size_t max,
                                            size_t *length, uint8_t *key);

/* A disconnect after the data (cm/README.md). The sending end: where
 * the flows of `worker`'s data iface on `dev_name` to the iface whose key
 * is `peer_key` stand, at most `max` (how many it wrote). The receiving
 * end: whether the flows `marks` name have delivered that far into our
 * data iface on `dev_name` (or ended, or failed). record/flows.c */
unsigned uct_crypt_flow_marks(uct_worker_h worker, const char *dev_name,
                              const uint8_t *peer_key,
                              crypt_cm_flow_mark_t *marks, unsigned max);
int uct_crypt_flows_delivered(uct_worker_h worker, const char *dev_name,
                              const crypt_cm_flow_mark_t *marks,
                              unsigned count);

/* process-wide, and the ifaces' options (uct_crypt_global.c) */
extern ucs_config_field_t uct_crypt_global_config_table[];
extern ucs_config_field_t uct_crypt_iface_config_table[];
extern ucs_config_field_t uct_crypt_aux_iface_config_table[];
void uct_crypt_global_config_read(void);
void uct_crypt_global_config_release(void);
uct_crypt_abort_on_ep_failure_t
uct_crypt_abort_on_ep_failure_resolve(uct_crypt_abort_on_ep_failure_t configured,
                                      int *in_mpi_rank);
void uct_crypt_ep_failure_told(ucs_status_t ucp_status, const uint8_t *peer_public,
                               uint64_t flow_id, uct_crypt_fail_reason_t reason,
                               const char *detail);
ucs_status_t uct_crypt_global_init(void);
void uct_crypt_global_cleanup(void);
void uct_crypt_stats_print(void);

#endif
