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
#include "uct_crypt/base/config.h"
#include "uct_crypt/base/compat.h"
#include "uct_crypt/record/record.h"
#include "uct_crypt/fault/fault.h"

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

typedef struct uct_crypt_bulk uct_crypt_bulk_t;
typedef struct uct_crypt_bulk_tx uct_crypt_bulk_tx_t;

#define UCT_CRYPT_WIRE_ENDED_RECENT 256

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
    /* the last flows that ended with their wire connection, whose ids
     * ended_flows does not keep, for a DISCONNECT that names them
     * (uct_crypt_flows_delivered) */
    uint64_t                  wire_ended[UCT_CRYPT_WIRE_ENDED_RECENT];
    unsigned                  wire_ended_next;
    khash_t(uct_crypt_peers)  peers;
    khash_t(uct_crypt_sources) sources;
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

/* Opens the inner iface of `tl` on its md `md`: crypt's own wire where tl
 * is tcp (given `wire`: what this user of the wire has of its own; the
 * device, the job secret and the handshake rate are set here), UCX's
 * transport otherwise (the tests' ucx_tcp:
 * UCX's tcp standing in for rc, ud or dc); *ops_p is the ops table that
 * goes with it. The one place where tcp means the wire: the data and
 * auxiliary ifaces and the collective lane open their inner here. */
struct uct_crypt_wire_params;
ucs_status_t uct_crypt_inner_open(uct_md_h md, const char *tl, uct_worker_h worker,
                                  const uct_iface_params_t *params,
                                  const struct uct_crypt_wire_params *wire,
                                  int ucx_tcp, uct_iface_h *iface_p,
                                  const uct_crypt_inner_ops_t **ops_p);

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

/* Our data iface that `worker` opened on `dev_name`, or NULL */
uct_crypt_iface_t *uct_crypt_iface_find(uct_worker_h worker, const char *dev_name);

/* UCP 1.16+'s protocol selection: crypt's bandwidth per operation, the
 * cipher's where the wire is faster (uct_crypt_iface.c) */
ucs_status_t uct_crypt_iface_estimate_perf(uct_iface_h tl_iface,
                                           uct_perf_attr_t *perf_attr);
#if UCT_CRYPT_HAVE_EP_IS_CONNECTED
/* UCP's question whether an ep leads to an address (uct_crypt_compat.c) */
int uct_crypt_ep_is_connected(const uct_ep_h tl_ep,
                              const uct_ep_is_connected_params_t *params);
#endif
#define uct_crypt_log_peer_fmt "peer %02x%02x%02x%02x flow 0x%016" PRIx64
#define uct_crypt_log_peer_arg(_pub, _flow) \
    (_pub)[0], (_pub)[1], (_pub)[2], (_pub)[3], (uint64_t)(_flow)

#endif
