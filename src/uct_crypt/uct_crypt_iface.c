/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt iface: opens the inner network iface, takes over its AM handlers,
 * and shows UCP the inner's capabilities minus everything that would move
 * plaintext (RMA, atomics, tag offload) and minus the record overhead.
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk.h"
#include "uct_crypt/wire/wire.h"

#include <stdio.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>
#include <endian.h>

static uct_iface_ops_t uct_crypt_iface_ops;

/* Capabilities passed through from the inner transport; everything else,
 * notably PUT/GET/ATOMIC and TAG offload, would let plaintext bypass the
 * record layer and is never advertised. */
#define UCT_CRYPT_IFACE_FLAGS \
    (UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_PENDING | \
     UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_CONNECT_TO_IFACE | \
     UCT_IFACE_FLAG_CONNECT_TO_EP | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE | \
     UCT_IFACE_FLAG_EP_CHECK | UCT_IFACE_FLAG_EP_KEEPALIVE)

/* The auxiliary role (tl crypt_aux) is what UCP wires connect-to-ep data
 * lanes up with (src/ucp/wireup/select.c, ucp_wireup_fill_aux_criteria):
 * connect-to-iface, AM bcopy, and in UCP 1.13 an iface that announces
 * async callbacks. Its callbacks come from progress (it registers on the
 * inner like the data role), which a handler registered as async-capable
 * accepts; the flag also keeps UCP from closing it in favour of a data
 * iface on the same device (ucp_worker_iface_find_better), which has it
 * masked. It carries no bulk engine. */
#define UCT_CRYPT_AUX_IFACE_FLAGS \
    (UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_PENDING | \
     UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_CB_ASYNC | \
     UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE | \
     UCT_IFACE_FLAG_EP_CHECK)

static ucs_status_t uct_crypt_iface_query(uct_iface_h tl_iface,
                                          uct_iface_attr_t *attr)
{
    uct_crypt_iface_t *iface   = ucs_derived_of(tl_iface, uct_crypt_iface_t);
    const uct_iface_attr_t *in = &iface->inner_attr;

    *attr = *in;
    if (iface->role == UCT_CRYPT_ROLE_AUX) {
        attr->cap.flags = (in->cap.flags & UCT_CRYPT_AUX_IFACE_FLAGS) |
                          UCT_IFACE_FLAG_CB_ASYNC;
    } else {
        attr->cap.flags = in->cap.flags & UCT_CRYPT_IFACE_FLAGS;
#if UCX_CRYPT_FAULT_INJECTION
        if (uct_crypt_global.emulate_connect_to_ep) {
            /* tests: a connect-to-ep data transport, as rc is */
            attr->cap.flags &= ~UCT_IFACE_FLAG_CONNECT_TO_IFACE;
        }
#endif
    }
    attr->cap.event_flags = in->cap.event_flags & ~UCT_IFACE_FLAG_EVENT_ASYNC_CB;
    memset(&attr->cap.put, 0, sizeof(attr->cap.put));
    memset(&attr->cap.get, 0, sizeof(attr->cap.get));
#if UCT_CRYPT_HAVE_INTER_NODE_FLAG
    /* UCP 1.18+ takes a transport to reach other nodes only when it says
     * so (thresholds, address scope): as its inner does */
    attr->cap.flags |= in->cap.flags & UCT_IFACE_FLAG_INTER_NODE;
#endif
    memset(&attr->cap.tag, 0, sizeof(attr->cap.tag));
    memset(&attr->cap.atomic32, 0, sizeof(attr->cap.atomic32));
    memset(&attr->cap.atomic64, 0, sizeof(attr->cap.atomic64));

    /* A record adds at most CRYPT_RECORD_OVERHEAD_MAX bytes; the inner's
     * max_short already counts its own 8-byte header, which carries the
     * first 8 bytes of our record. */
    attr->cap.am.max_short = (in->cap.flags & UCT_IFACE_FLAG_AM_SHORT) ?
            ucs_max((ssize_t)in->cap.am.max_short - CRYPT_RECORD_OVERHEAD_MAX, 0) : 0;
    if (attr->cap.am.max_short < sizeof(uint64_t)) {
        attr->cap.flags       &= ~UCT_IFACE_FLAG_AM_SHORT;
        attr->cap.am.max_short = 0;
    }
    attr->cap.am.max_bcopy = in->cap.am.max_bcopy - CRYPT_RECORD_OVERHEAD_MAX;

    /* Zero-copy AM: the payload is read once, by the cipher, straight into
     * an inner bcopy buffer (see uct_crypt_ep_am_zcopy). */
    if (attr->cap.am.max_bcopy > 2 * UCT_CRYPT_AM_ZCOPY_MAX_HDR) {
        attr->cap.flags          |= UCT_IFACE_FLAG_AM_ZCOPY;
        attr->cap.am.max_hdr      = UCT_CRYPT_AM_ZCOPY_MAX_HDR;
        attr->cap.am.min_zcopy    = 0;
        attr->cap.am.max_zcopy    = attr->cap.am.max_bcopy -
                                    UCT_CRYPT_AM_ZCOPY_MAX_HDR;
        attr->cap.am.opt_zcopy_align = 1;
        attr->cap.am.align_mtu    = 1;
        attr->cap.am.max_iov      = UCT_CRYPT_AM_ZCOPY_MAX_IOV;
    } else {
        attr->cap.am.max_hdr   = 0;
        attr->cap.am.min_zcopy = 0;
        attr->cap.am.max_zcopy = 0;
        attr->cap.am.max_iov   = 1;
    }

    attr->iface_addr_len = sizeof(crypt_iface_addr_t) + iface->inner_iface_addr_len;
    attr->ep_addr_len    = iface->inner_ep_addr_len ?
                           sizeof(crypt_ep_addr_t) + iface->inner_ep_addr_len : 0;
    /* sealing and opening cost about 2x 50 ns per small record here */
    attr->overhead      += 100e-9;
    uct_crypt_bulk_iface_attr(iface, attr);
    return UCS_OK;
}

/*
 * UCP 1.16+ picks its protocols (eager fragments or rendezvous, AM or
 * put) by the bandwidth each operation's estimate gives. The inner's is
 * the wire's; crypt's own is lower where the cipher cannot keep up: active
 * messages are sealed and opened by the progress threads, one core each
 * way, while the bulk engine's puts and gets are sealed by its pool, all
 * its threads together (uct_crypt_bulk_seal_threads). So the estimate
 * keeps the inner's where the cipher is faster, and is scaled down to the
 * cipher's otherwise (dedicated and shared alike): at an rc site with a
 * wire faster than one core, UCP then sends large messages through the
 * bulk engine, as the rendezvous threshold of UCP 1.13's protocols does.
 */
ucs_status_t uct_crypt_iface_estimate_perf(uct_iface_h tl_iface,
                                           uct_perf_attr_t *perf_attr)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);
    ucs_status_t status      = uct_base_iface_estimate_perf(tl_iface, perf_attr);
    uct_ppn_bandwidth_t *bw  = &perf_attr->bandwidth;
    double cipher, wire;

    if ((status != UCS_OK) || (iface->role != UCT_CRYPT_ROLE_DATA) ||
        !(perf_attr->field_mask & UCT_PERF_ATTR_FIELD_OPERATION) ||
        !(perf_attr->field_mask & UCT_PERF_ATTR_FIELD_BANDWIDTH)) {
        return status;
    }
    switch (perf_attr->operation) {
    case UCT_EP_OP_AM_SHORT:
    case UCT_EP_OP_AM_BCOPY:
    case UCT_EP_OP_AM_ZCOPY:
        cipher = uct_crypt_seal_bandwidth(iface->backend);
        break;
    case UCT_EP_OP_PUT_ZCOPY:
    case UCT_EP_OP_GET_ZCOPY:
        cipher = uct_crypt_seal_bandwidth(iface->backend) *
                 uct_crypt_bulk_seal_threads(iface);
        break;
    default:
        return status;
    }
    wire = bw->dedicated + bw->shared;
    if ((cipher > 0) && (wire > cipher)) {
        bw->dedicated *= cipher / wire;
        bw->shared    *= cipher / wire;
    }
    return status;
}

static ucs_status_t uct_crypt_iface_get_address(uct_iface_h tl_iface,
                                                uct_iface_addr_t *addr)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);
    crypt_iface_addr_t *crypt_addr = (crypt_iface_addr_t*)addr;

    crypt_addr->version       = CRYPT_WIRE_VERSION;
    crypt_addr->flags         = uct_crypt_job_secret ?
                                CRYPT_IFACE_ADDR_FLAG_JOB_SECRET : 0;
    crypt_addr->key_bits_div8 = (uint8_t)iface->key_len;
    crypt_addr->inner_id      = htole32(iface->inner_id);
    memcpy(crypt_addr->public_key, iface->keypair.public_key,
           KEYEX_PUBLIC_KEY_LEN);
    return uct_iface_get_address(iface->inner,
                                 (uct_iface_addr_t*)(crypt_addr + 1));
}

/* Every data iface open in the process, for the connection manager */
static UCS_LIST_HEAD(uct_crypt_open_ifaces);
static pthread_mutex_t uct_crypt_open_ifaces_lock = PTHREAD_MUTEX_INITIALIZER;

/* (uct_crypt_open_ifaces_lock held) */
static uct_crypt_iface_t *uct_crypt_iface_lookup(uct_worker_h worker,
                                                 const char *dev_name)
{
    uct_crypt_iface_t *iface;

    ucs_list_for_each(iface, &uct_crypt_open_ifaces, open_list) {
        if ((iface->role == UCT_CRYPT_ROLE_DATA) &&
            (&iface->super.worker->super == worker) &&
            !strcmp(iface->dev_name, dev_name)) {
            return iface;
        }
    }
    return NULL;
}

uct_crypt_iface_t *uct_crypt_iface_find(uct_worker_h worker, const char *dev_name)
{
    uct_crypt_iface_t *iface;

    pthread_mutex_lock(&uct_crypt_open_ifaces_lock);
    iface = uct_crypt_iface_lookup(worker, dev_name);
    pthread_mutex_unlock(&uct_crypt_open_ifaces_lock);
    return iface;
}

void uct_crypt_iface_wake(uct_worker_h worker, const char *dev_name)
{
    uct_crypt_iface_t *iface;

    /* (under the lock: an iface leaves the list before its fds close) */
    pthread_mutex_lock(&uct_crypt_open_ifaces_lock);
    iface = uct_crypt_iface_lookup(worker, dev_name);
    if (iface != NULL) {
        uct_crypt_bulk_poke(iface);
    }
    pthread_mutex_unlock(&uct_crypt_open_ifaces_lock);
}

ucs_status_t uct_crypt_iface_device_address(uct_worker_h worker,
                                            const char *dev_name,
                                            void *addr, size_t max,
                                            size_t *length, uint8_t *key)
{
    uct_crypt_iface_t *iface = uct_crypt_iface_find(worker, dev_name);

    if (iface == NULL) {
        return UCS_ERR_NO_DEVICE;
    }
    if (iface->inner_attr.device_addr_len > max) {
        return UCS_ERR_BUFFER_TOO_SMALL;
    }
    *length = iface->inner_attr.device_addr_len;
    if (key != NULL) {
        memcpy(key, iface->keypair.public_key, KEYEX_PUBLIC_KEY_LEN);
    }
    return uct_iface_get_device_address(iface->inner, addr);
}

static ucs_status_t uct_crypt_iface_get_device_address(uct_iface_h tl_iface,
                                                       uct_device_addr_t *addr)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);

    return uct_iface_get_device_address(iface->inner, addr);
}

static int uct_crypt_iface_is_reachable(const uct_iface_h tl_iface,
                                        const uct_device_addr_t *dev_addr,
                                        const uct_iface_addr_t *iface_addr)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);
    const crypt_iface_addr_t *crypt_addr = (const crypt_iface_addr_t*)iface_addr;
    int have_secret = (uct_crypt_job_secret != NULL);

    if (crypt_addr == NULL) {
        return 0;
    }
    if (le32toh(crypt_addr->inner_id) != iface->inner_id) {
        ucs_debug("crypt: peer unreachable: its address is of another inner "
                  "transport (id %08x, ours %08x)",
                  le32toh(crypt_addr->inner_id), iface->inner_id);
        return 0;
    }
    if ((crypt_addr->version != CRYPT_WIRE_VERSION) ||
        (crypt_addr->key_bits_div8 != iface->key_len) ||
        (!!(crypt_addr->flags & CRYPT_IFACE_ADDR_FLAG_JOB_SECRET) != have_secret)) {
        ucs_debug("crypt: peer unreachable: wire version %u/%u, key %u/%u "
                  "bytes, job secret %d/%d (peer/local)", crypt_addr->version,
                  CRYPT_WIRE_VERSION, crypt_addr->key_bits_div8, iface->key_len,
                  !!(crypt_addr->flags & CRYPT_IFACE_ADDR_FLAG_JOB_SECRET),
                  have_secret);
        return 0;
    }
    return uct_iface_is_reachable(iface->inner, dev_addr,
                                  (const uct_iface_addr_t*)(crypt_addr + 1));
}

static ucs_status_t uct_crypt_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                          uct_completion_t *comp)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);

    if (uct_crypt_bulk_iface_busy(iface)) {
        /* like tcp: no completion for an iface flush, poll instead */
        return (comp == NULL) ? UCS_INPROGRESS : UCS_ERR_UNSUPPORTED;
    }
    return uct_iface_flush(iface->inner, flags, comp);
}

static ucs_status_t uct_crypt_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        uct_crypt_bulk_ep_fence(ep);
    }
    return uct_iface_fence(iface->inner, flags);
}

static void uct_crypt_iface_progress_enable(uct_iface_h tl_iface, unsigned flags)
{
    uct_iface_progress_enable(ucs_derived_of(tl_iface, uct_crypt_iface_t)->inner,
                              flags);
}

static void uct_crypt_iface_progress_disable(uct_iface_h tl_iface, unsigned flags)
{
    uct_iface_progress_disable(ucs_derived_of(tl_iface, uct_crypt_iface_t)->inner,
                               flags);
}

static unsigned uct_crypt_iface_progress(uct_iface_h tl_iface)
{
    return uct_iface_progress(ucs_derived_of(tl_iface, uct_crypt_iface_t)->inner);
}

static ucs_status_t uct_crypt_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    /* the inner's fd, or one that pool threads can wake as well */
    return uct_crypt_bulk_event_fd_get(ucs_derived_of(tl_iface, uct_crypt_iface_t),
                                       fd_p);
}

static ucs_status_t uct_crypt_iface_event_arm(uct_iface_h tl_iface,
                                              unsigned events)
{
    uct_crypt_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_iface_t);
    ucs_status_t status      = uct_crypt_bulk_event_arm(iface);

    return (status != UCS_OK) ? status : uct_iface_event_arm(iface->inner, events);
}

static UCS_CLASS_INIT_FUNC(uct_crypt_iface_t, uct_md_h tl_md, uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    int aux = !strcmp(params->mode.device.tl_name, UCT_CRYPT_AUX_NAME);
    /* crypt's own options: the data role's (the auxiliary role has none) */
    const uct_crypt_iface_config_t *config =
            aux ? NULL : ucs_derived_of(tl_config, uct_crypt_iface_config_t);
    uct_crypt_wire_params_t wire = {0};
    uct_iface_params_t inner_params;
    uct_crypt_keepalive_t keepalive;
    uct_crypt_rx_limits_t rx_limits;
    ucs_status_t status;

    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("crypt: only UCT_IFACE_OPEN_MODE_DEVICE is supported "
                  "(client/server sockaddr connections are not wrapped)");
        return UCS_ERR_UNSUPPORTED;
    }
    if (aux) {
        /* the auxiliary role has no table of crypt's own: the data role's */
        status = uct_crypt_data_role_options(&keepalive, &rx_limits);
        if (status != UCS_OK) {
            return status;
        }
    } else {
        keepalive = config->keepalive;
        rx_limits = config->rx_limits;
    }

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_crypt_iface_ops,
                              uct_crypt_internal_ops(0), tl_md, worker,
                              params, tl_config
                              UCS_STATS_ARG(params->stats_root)
                              UCS_STATS_ARG(UCT_CRYPT_NAME));

    /* UCS classes are not zero-filled */
    self->inner        = NULL;
    self->scratch      = NULL;
    self->trial_keys   = NULL;
    self->fail_pending = 0;
    ucs_list_head_init(&self->eps);
    ucs_list_head_init(&self->closing);
    self->closing_cb_id = UCS_CALLBACKQ_ID_NULL;
    self->backend = crypt_aead_backend_resolve(
            (crypt_aead_backend_t)uct_crypt_global.backend);
    self->key_len = uct_crypt_global.key_bits / 8;
    self->fail_cb_id = UCS_CALLBACKQ_ID_NULL;
    self->role       = aux ? UCT_CRYPT_ROLE_AUX : UCT_CRYPT_ROLE_DATA;
    self->inner_id   = uct_crypt_inner_id(md);
    uct_crypt_rx_flows_init(self, &rx_limits);
    self->bulk       = NULL;
    if (!aux) {
        uct_crypt_fault_init(self, config);
    } else {
        uct_crypt_fault_init_none(self);
    }

    /* a fresh key pair per iface (its traffic's forward secrecy: see
     * record/keys.c) */
    if (uct_crypt_fault_keypair(self, config) != KEYEX_OK) {
        ucs_error("crypt: cannot generate an X25519 key pair%s",
                  crypt_local_failure_take());
        status = UCS_ERR_NO_RESOURCE;
        goto err;
    }

    inner_params = *params;
    inner_params.mode.device.tl_name = md->inner_tl;
    inner_params.err_handler         = uct_crypt_iface_inner_err;
    inner_params.err_handler_arg     = self;
    inner_params.err_handler_flags   = 0;
    inner_params.field_mask         |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                       UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                       UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    /* no tag offload (it would move plaintext), and no alignment request:
     * the inner's payload is our record, not UCP's data */
    inner_params.field_mask &= ~(UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB |
                                 UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG |
                                 UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB |
                                 UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG |
                                 UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT |
                                 UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET);

    /* where the inner is crypt's own wire (uct_crypt_inner_open decides) */
    wire.keypair           = &self->keypair;
    wire.context.role      = KEYEX_NOISE_ROLE_RECORDS;
    wire.context.key_bytes = (uint8_t)self->key_len;
    wire.peer_failed       = uct_crypt_record_peer_failed;
    wire.peer_failed_arg   = self;
    wire.conn_ended        = uct_crypt_record_conn_ended;
    wire.conn_ended_arg    = self;
    wire.sndbuf            = aux ? UCS_MEMUNITS_AUTO : config->sndbuf;
    wire.rcvbuf            = aux ? UCS_MEMUNITS_AUTO : config->rcvbuf;
    wire.keepalive         = keepalive;
#if UCX_CRYPT_FAULT_INJECTION
    if (!aux) {
        wire.listen_port    = (uint16_t)config->wire_port;
        wire.advertise_port = (uint16_t)config->wire_advertise_port;
    }
#endif
    status = uct_crypt_inner_open(md->inner_md, md->inner_tl, worker,
                                  &inner_params, &wire,
                                  !aux && UCT_CRYPT_TEST_KNOB(config, inner_ucx_tcp, 0),
                                  &self->inner, &self->inner_ops);
    if (status != UCS_OK) {
        ucs_error("crypt: cannot open inner transport %s on %s: %s",
                  md->inner_tl, params->mode.device.dev_name,
                  ucs_status_string(status));
        goto err_keypair;
    }

    status = uct_iface_query(self->inner, &self->inner_attr);
    if (status != UCS_OK) {
        goto err_inner;
    }
    if (!(self->inner_attr.cap.flags & UCT_IFACE_FLAG_AM_BCOPY) ||
        (self->inner_attr.cap.am.max_bcopy <= 4 * CRYPT_RECORD_OVERHEAD_MAX)) {
        ucs_error("crypt: inner transport %s has no usable am_bcopy",
                  md->inner_tl);
        status = UCS_ERR_UNSUPPORTED;
        goto err_inner;
    }
    self->inner_iface_addr_len = self->inner_attr.iface_addr_len;
    self->inner_ep_addr_len    = self->inner_attr.ep_addr_len;
    if (sizeof(crypt_iface_addr_t) + self->inner_iface_addr_len > 63) {
        /* UCP's address format has 6 bits for an iface address */
        ucs_error("crypt: inner %s iface address (%zu bytes) leaves no room "
                  "for the public key", md->inner_tl, self->inner_iface_addr_len);
        status = UCS_ERR_UNSUPPORTED;
        goto err_inner;
    }

    self->scratch_len = self->inner_attr.cap.am.max_short + CRYPT_RECORD_OVERHEAD_MAX;
    self->scratch     = ucs_malloc(self->scratch_len, "crypt scratch");
    if (self->scratch == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_inner;
    }

    /* Every record arrives on one AM id of the inner and goes through the
     * record layer first; sync delivery (from progress) where the inner
     * can do it. */
    status = uct_iface_set_am_handler(
            self->inner, UCT_CRYPT_RECORD_AM_ID, uct_crypt_record_am_handler,
            self, (self->inner_attr.cap.flags & UCT_IFACE_FLAG_CB_SYNC) ?
            0 : UCT_CB_FLAG_ASYNC);
    if (status != UCS_OK) {
        goto err_scratch;
    }

    status = aux ? UCS_OK : uct_crypt_bulk_init(self, config);
    if (status != UCS_OK) {
        goto err_scratch;
    }

    ucs_strncpy_zero(self->dev_name, params->mode.device.dev_name,
                     sizeof(self->dev_name));
    pthread_mutex_lock(&uct_crypt_open_ifaces_lock);
    ucs_list_add_tail(&uct_crypt_open_ifaces, &self->open_list);
    pthread_mutex_unlock(&uct_crypt_open_ifaces_lock);

    ucs_debug("crypt: iface %p over %s/%s, AES-%u-GCM on %s", self,
              md->inner_tl, params->mode.device.dev_name, self->key_len * 8,
              crypt_aead_backend_name(self->backend));
    return UCS_OK;

err_scratch:
    ucs_free(self->scratch);
err_inner:
    uct_iface_close(self->inner);
err_keypair:
    keyex_keypair_cleanup(&self->keypair);
err:
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_iface_t)
{
    pthread_mutex_lock(&uct_crypt_open_ifaces_lock);
    ucs_list_del(&self->open_list);
    pthread_mutex_unlock(&uct_crypt_open_ifaces_lock);
    uct_crypt_iface_closing_cleanup(self);
    uct_worker_progress_unregister_safe(&self->super.worker->super,
                                        &self->fail_cb_id);
    uct_crypt_bulk_cleanup(self);
    uct_iface_close(self->inner);
    uct_crypt_iface_closing_free(self);
    uct_crypt_rx_flows_cleanup(self);
    keyex_keypair_cleanup(&self->keypair);
    uct_crypt_fault_cleanup(self);
    ucs_free(self->scratch);
}

UCS_CLASS_DEFINE(uct_crypt_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_iface_t, uct_iface_t);

static uct_iface_ops_t uct_crypt_iface_ops = {
    .ep_am_short              = uct_crypt_ep_am_short,
    .ep_am_short_iov          = uct_base_ep_am_short_iov,
    .ep_am_bcopy              = uct_crypt_ep_am_bcopy,
    .ep_am_zcopy              = uct_crypt_ep_am_zcopy,
    .ep_put_zcopy             = uct_crypt_ep_put_zcopy,
    .ep_get_zcopy             = uct_crypt_ep_get_zcopy,
    .ep_pending_add           = uct_crypt_ep_pending_add,
    .ep_pending_purge         = uct_crypt_ep_pending_purge,
    .ep_flush                 = uct_crypt_ep_flush,
    .ep_fence                 = uct_crypt_ep_fence,
    .ep_check                 = uct_crypt_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_crypt_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_ep_t),
    .ep_get_address           = uct_crypt_ep_get_address,
    .ep_connect_to_ep         = uct_crypt_ep_connect_to_ep,
    .iface_flush              = uct_crypt_iface_flush,
    .iface_fence              = uct_crypt_iface_fence,
    .iface_progress_enable    = uct_crypt_iface_progress_enable,
    .iface_progress_disable   = uct_crypt_iface_progress_disable,
    .iface_progress           = uct_crypt_iface_progress,
    .iface_event_fd_get       = uct_crypt_iface_event_fd_get,
    .iface_event_arm          = uct_crypt_iface_event_arm,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_iface_t),
    .iface_query              = uct_crypt_iface_query,
    .iface_get_device_address = uct_crypt_iface_get_device_address,
    .iface_get_address        = uct_crypt_iface_get_address,
    .iface_is_reachable       = uct_crypt_iface_is_reachable
};

UCT_TL_DEFINE_ENTRY(&uct_crypt_component, crypt, uct_crypt_query_tl_devices,
                    uct_crypt_iface_t, UCT_CRYPT_CONFIG_PREFIX,
                    uct_crypt_iface_config_table, uct_crypt_iface_config_t);

/* The auxiliary role: the same iface class, its own tl name (so that UCP
 * neither mixes its addresses with the data role's nor closes it) */
UCT_TL_DEFINE_ENTRY(&uct_crypt_component, crypt_aux, uct_crypt_query_aux_devices,
                    uct_crypt_iface_t, "CRYPT_AUX_",
                    uct_crypt_aux_iface_config_table,
                    uct_crypt_aux_iface_config_t);
