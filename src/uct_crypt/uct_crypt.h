/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The crypt UCT transport: what its files share (md, iface, ep, flows) and
 * which file implements what. The layer's rules are in README.md beside
 * this file; the wire formats in base/format.h.
 */
#ifndef UCT_CRYPT_H
#define UCT_CRYPT_H

#include "uct_crypt/base/tls_words.h"
#include "uct_crypt/base/format.h"
#include "uct_crypt/api/uct_crypt_stats.h"
#include "uct_crypt/base/counters.h"
#include "uct_crypt/base/inner_ops.h"
#include "uct_crypt/base/keepalive.h"
#include "uct_crypt/base/compat.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <uct/base/uct_cm.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <pthread.h>

#define UCT_CRYPT_NAME        UCT_CRYPT_TLS_NAME  /* base/tls_words.h */
#define UCT_CRYPT_CONFIG_PREFIX "CRYPT_"

/* AM zero-copy: the most header bytes (UCP's own: a few dozen) and iov
 * entries an ep takes (the record is written into one inner bcopy buffer) */
#define UCT_CRYPT_AM_ZCOPY_MAX_HDR 128
#define UCT_CRYPT_AM_ZCOPY_MAX_IOV 16

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

/* Flows an iface receives at once (record/keys.c): in all, and from
 * one peer key (UCX_CRYPT_RX_FLOWS*, both roles) */
typedef struct uct_crypt_rx_limits {
    unsigned           flows;
    unsigned           flows_per_peer;
} uct_crypt_rx_limits_t;

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
    char               *fault;          /* uct_crypt_fault.c */
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

/* What this process registered, by region token */
typedef struct uct_crypt_memh uct_crypt_memh_t;
KHASH_MAP_INIT_INT64(uct_crypt_regions, uct_crypt_memh_t*);

/* A crypt md wraps one (inner md, inner tl) pair. */
typedef struct uct_crypt_md {
    uct_md_t          super;
    uct_component_h   inner_component;
    uct_md_h          inner_md;
    char              inner_tl[UCT_TL_NAME_MAX];
    int               inner_reg;      /* the inner md registers memory */
    unsigned          roles;          /* UCT_CRYPT_ROLE_* of the inner */
    /* what this process registered, by token: a peer's put or get reaches
     * only the region whose token its remote key carries. (A map, not a
     * list to scan: with a killed rendezvous sender UCP keeps thousands
     * of registrations of one buffer, and every GET searched them.) */
    pthread_mutex_t   regions_lock;
    khash_t(uct_crypt_regions) regions;
} uct_crypt_md_t;

/* Memory handle: the inner md's handle for the same region, and its
 * token (base/format.h, "region tokens"): random, never 0, packed in
 * the region's remote key, so that a peer reaches only memory whose key it
 * was handed. */
struct uct_crypt_memh {
    uct_mem_h         inner;
    uintptr_t         address;
    size_t            length;
    uint64_t          token;          /* its key in the md's regions */
    unsigned          access;         /* UCT_MD_MEM_ACCESS_REMOTE_PUT, _GET
                                         it was registered with */
};

ucs_status_t uct_crypt_md_pack_rkey(uct_crypt_md_t *md, uct_crypt_memh_t *memh,
                                    void *rkey_buffer);

/* Is [address, address + length) inside the registered region whose
 * remote key carries `token`, registered for `access` (a remote put's or
 * get's UCT_MD_MEM_ACCESS_REMOTE_*)? (0 names no region) */
int uct_crypt_md_exposed(uct_crypt_md_t *md, uint64_t token, uint64_t address,
                         uint64_t length, unsigned access);

/* Remote key: the inner component's key and the region's token (rkey
 * buffer = name || token LE64 || inner key, base/format.h). */
typedef struct uct_crypt_rkey {
    uct_component_h   component;
    uint64_t          token;
    uct_rkey_bundle_t inner;
} uct_crypt_rkey_t;

#if UCX_CRYPT_FAULT_INJECTION
/* Fault injection, for the tamper tests (sender side only; test builds). */
typedef enum {
    UCT_CRYPT_FAULT_NONE = 0,
    UCT_CRYPT_FAULT_FLIP_HEADER,
    UCT_CRYPT_FAULT_FLIP_CIPHERTEXT,
    UCT_CRYPT_FAULT_FLIP_TAG,
    UCT_CRYPT_FAULT_TRUNCATE,
    UCT_CRYPT_FAULT_REPLAY,
    UCT_CRYPT_FAULT_REORDER,
    UCT_CRYPT_FAULT_DROP,
    UCT_CRYPT_FAULT_INJECT,
    UCT_CRYPT_FAULT_FORGE_HELLO,  /* a stranger's HELLO naming our own key */
    UCT_CRYPT_FAULT_REPLAY_ENDED, /* a flow's HELLO again after its FLOW_END */
    UCT_CRYPT_FAULT_REPLAY_HELLOS, /* every HELLO twice, at once */
    /* on one bulk segment (UCX_CRYPT_FAULT_AFTER counts segments) */
    UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT, /* a bit of the ciphertext put */
    UCT_CRYPT_FAULT_BULK_FLIP_TAG,        /* a bit of the announced tag */
    UCT_CRYPT_FAULT_BULK_DROP,            /* never announce the segment */
    UCT_CRYPT_FAULT_BULK_REORDER,         /* announce it under the next index */
    UCT_CRYPT_FAULT_BULK_TRUNCATE,        /* announce a last segment as not last */
    UCT_CRYPT_FAULT_BULK_MOVE,            /* announce it 64 bytes further on */
    UCT_CRYPT_FAULT_BULK_SPLICE,          /* announce it as part of another put */
    /* crypt's own wire: the segment's frame */
    UCT_CRYPT_FAULT_BULK_FRAME_ALONE,     /* sent without its announcement */
    UCT_CRYPT_FAULT_BULK_FRAME_SHORT,     /* a byte shorter than announced */
    UCT_CRYPT_FAULT_LAST
} uct_crypt_fault_t;

typedef struct uct_crypt_fault_state {
    uct_crypt_fault_t kind;
    unsigned long     after;              /* records/segments sent intact */
    unsigned long     records_sent;
    unsigned long     bulk_segments_sent;
    uint8_t           *held_record;       /* replay/reorder */
    size_t            held_length;
    uint8_t           *hello_copy;        /* replay_ended */
    size_t            hello_length;
} uct_crypt_fault_state_t;
#endif

/* Sending half of a flow: one per crypt ep. */
typedef struct uct_crypt_tx_flow {
    uint64_t             flow_id;
    uint64_t             next_sequence;
    uint64_t             records_this_key;
    uint64_t             bytes_this_key;
    int                  hello_done;      /* the peer has our HELLO */
    keyex_traffic_keys_t *keys;           /* secure memory */
    crypt_aead_key_t     aead;
} uct_crypt_tx_flow_t;

/* What an iface knows of one peer key: its eps to it, the flows it
 * receives from it (record/keys.c) */
typedef struct uct_crypt_peer {
    uint64_t             id;              /* the key's first 8 bytes */
    unsigned             eps;
    unsigned             num_flows;
    ucs_list_link_t      flows;           /* uct_crypt_rx_flow_t */
} uct_crypt_peer_t;

/* Receiving half of a flow, found by flow id. */
typedef struct uct_crypt_rx_flow {
    uint64_t             flow_id;
    uint64_t             next_sequence;
    int                  failed;
    uint8_t              peer_public[KEYEX_PUBLIC_KEY_LEN];
    uct_crypt_peer_t     *peer;
    ucs_list_link_t      peer_list;       /* in peer->flows */
    ucs_list_link_t      asleep_list;     /* in iface->asleep, while asleep */
    /* NULL while the flow sleeps (no ep of ours to its peer is left); it
     * wakes at `generation` when a record comes */
    keyex_traffic_keys_t *keys;
    crypt_aead_key_t     aead;
    uint32_t             generation;      /* the record key's, asleep */
    uint32_t             bulk_generation; /* the bulk key's, always */
    /* bulk puts received on this flow (derived on first use) */
    keyex_traffic_keys_t *bulk_keys;
    crypt_aead_key_t     bulk_aead;       /* the progress thread's */
    crypt_aead_key_t     *bulk_aead_workers; /* one per pool thread, made by
                                               it on first use */
    unsigned             bulk_workers;
    uint64_t             bulk_next_put;
    uint32_t             bulk_next_segment;
    uint64_t             bulk_next_get;   /* GET_REQs served on this flow */
    struct uct_crypt_iface *iface;        /* that receives it */
    /* crypt's own wire: a segment announced, its SEGMENT frame next */
    crypt_bulk_segment_t wire_announce;
    /* crypt's own wire: the connection its HELLO came on, which carries
     * all its records; the flow ends with it (0: a UCX inner) */
    uint64_t             wire_conn;
} uct_crypt_rx_flow_t;

KHASH_MAP_INIT_INT64(uct_crypt_rx_flows, uct_crypt_rx_flow_t*);
/* ids of flows their sender ended (FLOW_END): replays of them refused */
KHASH_SET_INIT_INT64(uct_crypt_flow_ids);
KHASH_MAP_INIT_INT64(uct_crypt_peers, uct_crypt_peer_t*);

/* The most flow ids an iface remembers as ended: 16 bytes each, 16 MiB in
 * all. Past it a FLOW_END is not taken: the flow stays, and counts
 * towards the bound of live flows, until the iface closes. */
#define UCT_CRYPT_ENDED_FLOWS_MAX (1u << 20)

typedef struct uct_crypt_iface uct_crypt_iface_t;
typedef struct uct_crypt_ep uct_crypt_ep_t;
typedef struct uct_crypt_bulk uct_crypt_bulk_t;
typedef struct uct_crypt_bulk_tx uct_crypt_bulk_tx_t;

/* The one AM id of the inner that carries records: UCP's own id is sealed
 * inside each record (base/format.h); crypt's control records are told
 * apart by the authenticated header flag */
#define UCT_CRYPT_RECORD_AM_ID 0

struct uct_crypt_iface {
    uct_base_iface_t          super;
    unsigned                  role;           /* UCT_CRYPT_ROLE_DATA or _AUX */
    uint32_t                  inner_id;       /* uct_crypt_inner_id() */
    uct_iface_h               inner;
    const uct_crypt_inner_ops_t *inner_ops; /* what the inner is to the record
                                               layer: chosen with it */
    uct_iface_attr_t          inner_attr;
    keyex_keypair_t           keypair;        /* ephemeral, per iface */
    crypt_aead_backend_t      backend;
    unsigned                  key_len;
    size_t                    inner_iface_addr_len;
    size_t                    inner_ep_addr_len;
    uint8_t                   *scratch;       /* records for am_short */
    size_t                    scratch_len;
    khash_t(uct_crypt_rx_flows) rx_flows;
    khash_t(uct_crypt_flow_ids) ended_flows;
    khash_t(uct_crypt_peers)  peers;
    ucs_list_link_t           asleep;         /* flows asleep, oldest first */
    unsigned                  rx_flows_max;   /* UCX_CRYPT_RX_FLOWS */
    unsigned                  rx_flows_per_peer;
    ucs_list_link_t           eps;            /* uct_crypt_ep_t */
    /* inner eps of destroyed crypt eps, kept until their FLOW_END left
     * (uct_crypt_ep.c) */
    ucs_list_link_t           closing;
    uct_worker_cb_id_t        closing_cb_id;
    keyex_traffic_keys_t      *trial_keys;    /* receiver's next generation */
    uct_worker_cb_id_t        fail_cb_id;
    int                       fail_pending;
#if UCX_CRYPT_FAULT_INJECTION
    uct_crypt_fault_state_t   fault;          /* tests */
#endif
    uct_crypt_bulk_t          *bulk;          /* NULL: no encrypted put */
    char                      dev_name[UCT_DEVICE_NAME_MAX];
    ucs_list_link_t           open_list;      /* uct_crypt_iface_find() */
};

/* Why an ep stops sending: a record of its peer failed authentication
 * (uct_crypt_record_reject or the wire marks it; reported from progress, where UCP's
 * error handler may destroy it) */
typedef enum {
    UCT_CRYPT_EP_OK = 0,
    UCT_CRYPT_EP_FAILED,       /* marked; the error is not reported yet */
    UCT_CRYPT_EP_FAIL_REPORTED /* uct_iface_handle_ep_err was called */
} uct_crypt_ep_fail_state_t;

/* An ep fence behind bulk work still inside crypt (bulk/bulk.c) */
typedef enum {
    UCT_CRYPT_FENCE_NONE = 0,
    UCT_CRYPT_FENCE_WAIT,     /* sends wait for the work before the fence */
    UCT_CRYPT_FENCE_DRAIN     /* cleared: the requests that waited go first */
} uct_crypt_fence_state_t;

struct uct_crypt_ep {
    uct_base_ep_t             super;
    uct_ep_h                  inner;
    ucs_list_link_t           list;
    uint8_t                   peer_public[KEYEX_PUBLIC_KEY_LEN];
    int                       peer_known;     /* connect-to-ep: after connect */
    uct_crypt_ep_fail_state_t failed;
    int                       cancelled;      /* flushed with CANCEL: UCP
                                                 destroys it next
                                                 (ucp_worker_discard_uct_ep);
                                                 it answers no peer's get */
    uct_crypt_fail_reason_t   fail_reason;    /* why, once failed */
    uint64_t                  fail_flow_id;   /* the peer's flow that failed */
    char                      fail_detail[128]; /* what ended the connection,
                                                   for a fatal message */
    uct_crypt_tx_flow_t       tx;
    uct_crypt_bulk_tx_t       *bulk;          /* puts of this ep, lazily */
    uct_crypt_fence_state_t   fence;
    int                       fence_dispatching; /* sends of fence_pending pass */
    ucs_queue_head_t          fence_pending;  /* uct_pending_req_t, in order */
};

/* Sends on `ep` must wait behind a fence (NO_RESOURCE, then pending) */
static inline int uct_crypt_ep_fenced(const uct_crypt_ep_t *ep)
{
    return (ep->fence != UCT_CRYPT_FENCE_NONE) && !ep->fence_dispatching;
}

extern uct_component_t uct_crypt_component;
extern uct_tl_t uct_crypt_tl;
extern uct_tl_t uct_crypt_aux_tl;
#define UCT_CRYPT_AUX_NAME UCT_CRYPT_TLS_AUX_NAME  /* base/tls_words.h */
extern uct_crypt_global_config_t uct_crypt_global;

/* UCX_CRYPT_HANDSHAKE_RATE as the listeners take it (wire/wire_admit.h):
 * a listener spends at most a second's worth of DHs on a replay flood
 * before it is under load; 1000 is some 15% of a core for X25519 (a
 * replayed initiation cost the own wire about 160 us of DHs: issue 29) */
#define UCT_CRYPT_HANDSHAKE_RATE_AUTO 1000.0
double uct_crypt_handshake_rate(void);
/* UCX_CRYPT_REKEY_RECORDS (test builds; 0: the limits of keyex.h) */
unsigned long uct_crypt_rekey_records(void);
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

ucs_status_t uct_crypt_iface_device_address(uct_worker_h worker,
                                            const char *dev_name,
                                            void *addr, size_t max,
                                            size_t *length);

/* the connection manager (cm/) */
typedef struct uct_crypt_cm_config {
    uct_cm_config_t super;
    size_t          priv_data_len;
    double          handshake_timeout;
} uct_crypt_cm_config_t;

extern ucs_config_field_t uct_crypt_cm_config_table[];
ucs_status_t uct_crypt_cm_open(uct_component_t *component, uct_worker_h worker,
                               const uct_cm_config_t *config, uct_cm_t **cm_p);

/* process-wide (uct_crypt_global.c) */
extern ucs_config_field_t uct_crypt_global_config_table[];
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

/* inner transports (uct_crypt_inner.c) */
/* Where UCX_TLS names crypt: network names beside it to UCX_CRYPT_TLS,
 * and "crypt_aux:aux" where an auxiliary inner is selected, as UCP's own
 * "rc" alias adds "ud_mlx5:aux" (uct_crypt_tls_env) */
void uct_crypt_inner_check_ucx_tls(void);
/* Every network component off UCT's list; from_module_loader: we are
 * being loaded by UCX's module loader (UCX_PLUGIN_PATH, 1.22+) */
void uct_crypt_inner_hide_network(int from_module_loader);
/* UCX_SOCKADDR_TLS_PRIORITY names crypt's connection manager */
void uct_crypt_inner_cm_to_ucx_config(void);
void uct_crypt_inner_restore(void);
struct uct_crypt_md;
uint32_t uct_crypt_inner_id(const struct uct_crypt_md *md);
uct_component_h uct_crypt_inner_component_find(const char *name);
/* the crypt md name of an (inner md, inner tl) pair, UCT_MD_NAME_MAX */
void uct_crypt_md_name(char *name, const char *inner_md, const char *tl);

/* md (uct_crypt_md.c) */
extern ucs_config_field_t uct_crypt_md_config_table[];
ucs_status_t uct_crypt_md_open(uct_component_t *component, const char *md_name,
                               const uct_md_config_t *config, uct_md_h *md_p);
ucs_status_t uct_crypt_query_tl_devices(uct_md_h tl_md,
                                        uct_tl_device_resource_t **devices_p,
                                        unsigned *num_devices_p);
ucs_status_t uct_crypt_query_aux_devices(uct_md_h tl_md,
                                         uct_tl_device_resource_t **devices_p,
                                         unsigned *num_devices_p);

/* Walk every (inner component, md, tl) the user selected; `cb` returns
 * non-zero to stop. Opens each inner md for the duration of the call;
 * `unmatched` (may be NULL) gets the selected names that matched nothing. */
/* The roles of an inner (md, tl): data (tl "crypt") and/or auxiliary (tl
 * "crypt_aux": connect-to-iface, for UCP's wireup of connect-to-ep data
 * transports) */
enum {
    UCT_CRYPT_ROLE_DATA = UCS_BIT(0),
    UCT_CRYPT_ROLE_AUX  = UCS_BIT(1)
};
typedef int (*uct_crypt_inner_cb_t)(void *arg, uct_component_h component,
                                    const char *md_name, const char *tl_name,
                                    unsigned roles);
void uct_crypt_foreach_inner(uct_crypt_inner_cb_t cb, void *arg,
                             char *unmatched, size_t unmatched_max);

/* iface (uct_crypt_iface.c) */
ucs_status_t uct_crypt_iface_inner_err(void *arg, uct_ep_h inner_ep,
                                       ucs_status_t status);

/* ep (uct_crypt_ep.c) */
UCS_CLASS_DECLARE_NEW_FUNC(uct_crypt_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_ep_t, uct_ep_t);
ucs_status_t uct_crypt_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                   const void *payload, unsigned length);
ssize_t uct_crypt_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                              uct_pack_callback_t pack_cb, void *arg,
                              unsigned flags);
ucs_status_t uct_crypt_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                   unsigned header_length, const uct_iov_t *iov,
                                   size_t iovcnt, unsigned flags,
                                   uct_completion_t *comp);
ucs_status_t uct_crypt_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);
ucs_status_t uct_crypt_ep_connect_to_ep(uct_ep_h tl_ep,
                                        const uct_device_addr_t *dev_addr,
                                        const uct_ep_addr_t *ep_addr);
ucs_status_t uct_crypt_ep_send_control(uct_crypt_ep_t *ep, const void *payload,
                                       unsigned length);
ucs_status_t uct_crypt_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                      unsigned flags);
void uct_crypt_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                                void *arg);
ucs_status_t uct_crypt_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp);
ucs_status_t uct_crypt_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_crypt_ep_check(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp);

/* bulk engine (uct_crypt_bulk*.c, bulk/bulk_get.c; its own state is in
 * bulk/bulk.h) */
ucs_status_t uct_crypt_bulk_init(uct_crypt_iface_t *iface,
                                 const uct_crypt_iface_config_t *config);
void uct_crypt_bulk_cleanup(uct_crypt_iface_t *iface);
void uct_crypt_bulk_iface_attr(uct_crypt_iface_t *iface, uct_iface_attr_t *attr);
ucs_status_t uct_crypt_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_crypt_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);
/* UCS_OK: no put outstanding, flush the inner; else INPROGRESS (comp kept) */
ucs_status_t uct_crypt_bulk_ep_flush(uct_crypt_ep_t *ep, unsigned flags,
                                     uct_completion_t *comp);
/* ep fence: later sends wait until earlier bulk work has left crypt */
void uct_crypt_bulk_ep_fence(uct_crypt_ep_t *ep);
/* Event fd and arm: pool threads wake a progress thread that sleeps */
ucs_status_t uct_crypt_bulk_event_fd_get(uct_crypt_iface_t *iface, int *fd_p);
ucs_status_t uct_crypt_bulk_event_arm(uct_crypt_iface_t *iface);
/* An ep of the iface has bulk work outstanding (a put, a get until its
 * answer landed, a flush, a fence): uct_iface_flush is not done */
int uct_crypt_bulk_iface_busy(uct_crypt_iface_t *iface);
int uct_crypt_bulk_ep_idle(uct_crypt_ep_t *ep);
/* ep going away or failed: wait for its jobs, complete its puts with status */
void uct_crypt_bulk_ep_cancel(uct_crypt_ep_t *ep, ucs_status_t status);
void uct_crypt_bulk_control(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow,
                            uint8_t *payload, size_t length);
void uct_crypt_bulk_rx_flow_cleanup(uct_crypt_rx_flow_t *flow);
/* Acts on the segments being opened for the iface, in arrival order: those
 * at the head that are opened; with `wait`, every one (the progress thread
 * opens those no worker took). Nothing where the iface has no bulk engine */
void uct_crypt_bulk_rx_reap(uct_crypt_iface_t *iface, int wait);
/* No worker writes into a destination any more (a failure is about to be
 * told, and UCP may then give buffers back): every segment being opened is
 * done, here where no worker took it; acted on later, in order */
void uct_crypt_bulk_rx_quiesce(uct_crypt_iface_t *iface);

/* keys (record/keys.c) */
ucs_status_t uct_crypt_bulk_keys(uct_crypt_iface_t *iface,
                                 const uint8_t sender[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t receiver[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t *wire_secret, uint64_t flow_id,
                                 keyex_traffic_keys_t **keys_p);
ucs_status_t uct_crypt_tx_flow_init(uct_crypt_iface_t *iface,
                                    uct_crypt_tx_flow_t *tx,
                                    const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN]);
void uct_crypt_tx_flow_cleanup(uct_crypt_tx_flow_t *tx);
/* May the sending half seal a record now? UCS_OK: it has its keys, or
 * made them (over the own wire, once its connection is final);
 * UCS_ERR_NO_RESOURCE: the own wire's connection is not final yet (retry,
 * as tcp's sends before it is connected); another error: the keys cannot
 * be made, and the ep is failed with that reason. */
ucs_status_t uct_crypt_tx_flow_ready(uct_crypt_iface_t *iface,
                                     uct_crypt_tx_flow_t *tx);
ucs_status_t uct_crypt_tx_flow_derive(uct_crypt_iface_t *iface,
                                      uct_crypt_tx_flow_t *tx,
                                      const uint8_t *wire_secret);
void uct_crypt_tx_flow_rekey_check(uct_crypt_iface_t *iface,
                                   uct_crypt_tx_flow_t *tx);
uct_crypt_rx_flow_t *
uct_crypt_rx_flow_create(uct_crypt_iface_t *iface, uint64_t flow_id,
                         const uint8_t sender_public[KEYEX_PUBLIC_KEY_LEN]);
void uct_crypt_rx_flow_free(uct_crypt_rx_flow_t *flow);
void uct_crypt_rx_flows_init(uct_crypt_iface_t *iface,
                             const uct_crypt_rx_limits_t *limits);
ucs_status_t uct_crypt_rx_flow_add(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow);
void uct_crypt_rx_flow_end(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow);
void uct_crypt_rx_flow_refuse(uct_crypt_iface_t *iface,
                              const uct_crypt_rx_flow_t *flow,
                              ucs_status_t status);
ucs_status_t uct_crypt_rx_flow_wake(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow);
/* keys wiped, state kept (a no-op on the own wire and when asleep) */
void uct_crypt_rx_flow_sleep(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow);
/* our eps to a peer key, counted: when the last goes, its flows sleep */
ucs_status_t uct_crypt_peer_ep_add(uct_crypt_iface_t *iface,
                                   const uint8_t *peer_public);
void uct_crypt_peer_ep_remove(uct_crypt_iface_t *iface,
                              const uint8_t *peer_public);
int uct_crypt_rx_flow_was_ended(uct_crypt_iface_t *iface, uint64_t flow_id);
void uct_crypt_rx_flows_conn_ended(uct_crypt_iface_t *iface, uint64_t conn_id);
void uct_crypt_rx_flows_cleanup(uct_crypt_iface_t *iface);
/* inner eps kept after their crypt ep went, until its FLOW_END left
 * (uct_crypt_ep.c): destroyed when the iface closes */
void uct_crypt_iface_closing_cleanup(uct_crypt_iface_t *iface);
void uct_crypt_iface_closing_free(uct_crypt_iface_t *iface);
int uct_crypt_iface_closing_failed(uct_crypt_iface_t *iface, uct_ep_h inner_ep);
/* Open under the flow's keys, or under the next generation's when the
 * sender announces a key update; the update is kept only if it opens. */
struct uct_crypt_record_in;
crypt_aead_status_t uct_crypt_rx_flow_open(uct_crypt_iface_t *iface,
                                           uct_crypt_rx_flow_t *flow,
                                           struct uct_crypt_record_in *rec);

/* UCP 1.16+'s protocol selection: crypt's bandwidth per operation, the
 * cipher's where the wire is faster (uct_crypt_iface.c) */
ucs_status_t uct_crypt_iface_estimate_perf(uct_iface_h tl_iface,
                                           uct_perf_attr_t *perf_attr);
/* how many threads seal the bulk engine's segments together (its pool's,
 * or the progress thread alone); 0 without the engine */
unsigned uct_crypt_bulk_seal_threads(const uct_crypt_iface_t *iface);

/* record layer (record/record.c) */
/* The ep fails for a local failure while `what`: said at error level with
 * the reason (crypt_local_failure_take), reported to UCP from progress */
void uct_crypt_ep_fail_local(uct_crypt_ep_t *ep, const char *what);
ucs_status_t uct_crypt_ep_of_tx_flow(uct_crypt_iface_t *iface,
                                     const uct_crypt_rx_flow_t *flow,
                                     uint64_t flow_id, uct_crypt_ep_t **ep_p);
void uct_crypt_ep_flow_refused(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow,
                               const crypt_flow_refused_t *msg);
#if UCT_CRYPT_HAVE_EP_IS_CONNECTED
/* UCP's question whether an ep leads to an address (uct_crypt_compat.c) */
int uct_crypt_ep_is_connected(const uct_ep_h tl_ep,
                              const uct_ep_is_connected_params_t *params);
#endif
/* A violation inside an authenticated record: fail the flow and the eps
 * to its peer (record/record.c says when that is the rule) */
ucs_status_t uct_crypt_record_reject(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow,
                                     uct_crypt_fail_reason_t reason);
/* A record that is not authenticated: dropped and counted, nothing fails
 * (on crypt's own wire: its connection closes) */
ucs_status_t uct_crypt_record_drop(uct_crypt_iface_t *iface,
                                   const uint8_t *flow_peer, uint64_t flow_id,
                                   uct_crypt_fail_reason_t reason);
/* crypt's own wire: an authenticated peer's connection ended badly */
/* crypt's own wire: one of its connections ended (wire/wire.h) */
void uct_crypt_record_conn_ended(void *arg, uint64_t conn_id);
void uct_crypt_record_peer_failed(void *arg,
                                const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN],
                                const char *peer_name, const char *reason);
size_t uct_crypt_record_header_len(const uct_crypt_tx_flow_t *tx);
/* Seal `payload_len` bytes at record + header_len in place, write the header
 * in front and the tag behind, under the flow's next sequence number;
 * returns the record length or a negative status (never a record that is
 * not sealed: uct_crypt_tx_flow_ready says when one can be). */
ssize_t uct_crypt_record_seal(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                              uint8_t am_id, uint16_t flags, uint8_t *record,
                              size_t payload_len);
/* The inner transport took the record: consume its sequence number, count
 * it, and update the key when its usage limit is near. */
void uct_crypt_record_commit(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                             size_t payload_len);
ucs_status_t uct_crypt_record_am_handler(void *arg, void *data, size_t length,
                                         unsigned flags);

/* fault injection (uct_crypt_fault.c, test builds only; without it these
 * are no-ops the compiler removes) */
#if UCX_CRYPT_FAULT_INJECTION
void uct_crypt_fault_init(uct_crypt_iface_t *iface,
                          const uct_crypt_iface_config_t *config);
void uct_crypt_fault_cleanup(uct_crypt_iface_t *iface);
/* an iface without the hook (the auxiliary role) */
void uct_crypt_fault_init_none(uct_crypt_iface_t *iface);
/* After a record was sealed: apply the fault, if configured. Returns 1 if
 * the caller must not send `record` (it is held or dropped). */
int uct_crypt_fault_apply(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep,
                          uint8_t *record, size_t *length);
/* Send `length` bytes of an already sealed record as they are: the
 * inner's am_bcopy result */
ssize_t uct_crypt_fault_send_raw(uct_crypt_ep_t *ep, const uint8_t *data,
                                 size_t length);
/* The ep's FLOW_END left: replay_ended sends its HELLO behind it */
void uct_crypt_fault_flow_ended(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep);
/* Is the bulk segment leaving now the one to tamper with? */
int uct_crypt_bulk_fault_due(uct_crypt_iface_t *iface);
void uct_crypt_bulk_fault_seal(uct_crypt_iface_t *iface, uint8_t *bounce,
                               size_t length);
void uct_crypt_bulk_fault_frame_tag(uct_crypt_iface_t *iface,
                                    uint8_t tag[CRYPT_AEAD_TAG_LEN]);
/* crypt's own wire: 1 if the announcement is to be left out; may shorten
 * the frame */
int uct_crypt_bulk_fault_frame(uct_crypt_iface_t *iface, size_t *frame_len);
/* Returns 1 if the announcement must not be sent (dropped). */
int uct_crypt_bulk_fault_announce(uct_crypt_iface_t *iface,
                                  crypt_bulk_segment_t *announce);
#define uct_crypt_fault_enabled(_iface) \
    ((_iface)->fault.kind != UCT_CRYPT_FAULT_NONE)
#else
#define uct_crypt_fault_enabled(_iface)                   0
#define uct_crypt_fault_init(_iface, _config)             do {} while (0)
#define uct_crypt_fault_init_none(_iface)                 do {} while (0)
#define uct_crypt_fault_cleanup(_iface)                   do {} while (0)
#define uct_crypt_fault_apply(_iface, _ep, _rec, _l)      0
#define uct_crypt_fault_flow_ended(_iface, _ep)           do {} while (0)
#define uct_crypt_bulk_fault_due(_iface)                  0
#define uct_crypt_bulk_fault_seal(_iface, _bounce, _l)    do {} while (0)
#define uct_crypt_bulk_fault_frame_tag(_iface, _tag)      do {} while (0)
#define uct_crypt_bulk_fault_frame(_iface, _len)          0
#define uct_crypt_bulk_fault_announce(_iface, _announce)  0
#endif

#define uct_crypt_log_peer_fmt "peer %02x%02x%02x%02x flow 0x%016" PRIx64
#define uct_crypt_log_peer_arg(_pub, _flow) \
    (_pub)[0], (_pub)[1], (_pub)[2], (_pub)[3], (uint64_t)(_flow)

#endif
