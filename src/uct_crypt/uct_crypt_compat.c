/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What differs between UCX releases and needs code (base/compat.h
 * names each difference): the internal ops every iface of ours gives UCT,
 * the configuration parser's entry point, the md attributes, remote keys.
 */
#include "uct_crypt/uct_crypt.h"

#include <pthread.h>
#include <string.h>

/* ---- internal ops ------------------------------------------------------- */

/* What no iface of ours offers, each with its own signature (UCX's empty
 * stubs are declared (void) from 1.19 on) */
static void uct_crypt_iface_vfs_refresh(uct_iface_h iface)
{
}

static ucs_status_t uct_crypt_ep_query(uct_ep_h ep, uct_ep_attr_t *ep_attr)
{
    return UCS_ERR_UNSUPPORTED;
}

#if UCT_CRYPT_HAVE_EP_INVALIDATE_PARAMS
static ucs_status_t uct_crypt_ep_invalidate(uct_ep_h ep,
                                            const uct_ep_invalidate_params_t *params)
#else
static ucs_status_t uct_crypt_ep_invalidate(uct_ep_h ep, unsigned flags)
#endif
{
    return UCS_ERR_UNSUPPORTED;
}

#if UCT_CRYPT_HAVE_MEM_ELEMENT_PACK
static ucs_status_t
uct_crypt_iface_mem_element_pack(const uct_iface_h iface, uct_mem_h memh,
                                 uct_rkey_t rkey,
                                 uct_device_mem_element_t *mem_element)
{
    return UCS_ERR_UNSUPPORTED;
}
#endif

#if UCT_CRYPT_HAVE_GET_DEVICE_EP
static ucs_status_t uct_crypt_ep_get_device_ep(uct_ep_h ep,
                                               uct_device_ep_h *device_ep_p)
{
    return UCS_ERR_UNSUPPORTED; /* no GPU-initiated sends: nothing sealed */
}
#endif

#if UCT_CRYPT_HAVE_PUT_SGL_ZCOPY
static ucs_status_t
uct_crypt_ep_put_sgl_zcopy(uct_ep_h ep, void * const *buffers,
                           const size_t *lengths, uct_mem_h const *memhs,
                           const uint64_t *remote_addrs, uct_rkey_t const *rkeys,
                           const size_t *counts, const size_t *strides,
                           size_t num, uct_completion_t *comp)
{
    return UCS_ERR_UNSUPPORTED; /* not advertised */
}
#endif

#if UCT_CRYPT_HAVE_CONNECT_TO_EP_V2
static ucs_status_t
uct_crypt_ep_connect_to_ep_v2(uct_ep_h ep, const uct_device_addr_t *device_addr,
                              const uct_ep_addr_t *ep_addr,
                              const uct_ep_connect_to_ep_params_t *params)
{
    return ep->iface->ops.ep_connect_to_ep(ep, device_addr, ep_addr);
}
#endif

#if UCT_CRYPT_HAVE_IS_REACHABLE_V2
/* Both addresses are needed to judge (the peer's key and inner in the
 * iface address): UCP 1.15+ passes them, with a scope we do not narrow */
static int
uct_crypt_iface_is_reachable_v2(const uct_iface_h iface,
                                const uct_iface_is_reachable_params_t *params)
{
    const uct_device_addr_t *dev_addr = (params->field_mask &
                                         UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR) ?
                                        params->device_addr : NULL;
    const uct_iface_addr_t *iface_addr = (params->field_mask &
                                          UCT_IFACE_IS_REACHABLE_FIELD_IFACE_ADDR) ?
                                         params->iface_addr : NULL;

    return iface->ops.iface_is_reachable(iface, dev_addr, iface_addr);
}
#endif

void uct_crypt_internal_ops_init(uct_iface_internal_ops_t *ops, int wire)
{
    memset(ops, 0, sizeof(*ops));
#if UCT_CRYPT_HAVE_IFACE_QUERY_V2
    ops->iface_query_v2        = uct_iface_base_query_v2;
#endif
    /* crypt's own iface: the cipher's bandwidth where it is below the
     * wire's; the own wire's sockets: the link's */
    ops->iface_estimate_perf   = wire ? uct_base_iface_estimate_perf :
                                 uct_crypt_iface_estimate_perf;
    ops->iface_vfs_refresh     = uct_crypt_iface_vfs_refresh;
#if UCT_CRYPT_HAVE_MEM_ELEMENT_PACK
    ops->iface_mem_element_pack = uct_crypt_iface_mem_element_pack;
#endif
    ops->ep_query              = uct_crypt_ep_query;
    ops->ep_invalidate         = uct_crypt_ep_invalidate;
#if UCT_CRYPT_HAVE_CONNECT_TO_EP_V2
    ops->ep_connect_to_ep_v2   = uct_crypt_ep_connect_to_ep_v2;
#endif
#if UCT_CRYPT_HAVE_IS_REACHABLE_V2
    ops->iface_is_reachable_v2 = uct_crypt_iface_is_reachable_v2;
#endif
#if UCT_CRYPT_HAVE_EP_IS_CONNECTED
    ops->ep_is_connected       = wire ? uct_base_ep_is_connected :
                                 uct_crypt_ep_is_connected;
#else
    (void)wire;
#endif
#if UCT_CRYPT_HAVE_GET_DEVICE_EP
    ops->ep_get_device_ep      = uct_crypt_ep_get_device_ep;
#endif
#if UCT_CRYPT_HAVE_PUT_SGL_ZCOPY
    ops->ep_put_sgl_zcopy      = uct_crypt_ep_put_sgl_zcopy;
#endif
}

static uct_iface_internal_ops_t uct_crypt_iface_ops_table, uct_crypt_wire_ops_table;

static void uct_crypt_internal_ops_tables_init(void)
{
    uct_crypt_internal_ops_init(&uct_crypt_iface_ops_table, 0);
    uct_crypt_internal_ops_init(&uct_crypt_wire_ops_table, 1);
}

uct_iface_internal_ops_t *uct_crypt_internal_ops(int wire)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    (void)pthread_once(&once, uct_crypt_internal_ops_tables_init);
    return wire ? &uct_crypt_wire_ops_table : &uct_crypt_iface_ops_table;
}

/* ---- ep ------------------------------------------------------------------- */

/* UCP (1.16+) asks whether an ep already leads to an address (wireup
 * reconfiguration): ours does when the address names our peer's key and
 * the inner ep leads to the inner part of it */
#if UCT_CRYPT_HAVE_EP_IS_CONNECTED
int uct_crypt_ep_is_connected(const uct_ep_h tl_ep,
                              const uct_ep_is_connected_params_t *params)
{
    const uct_crypt_ep_t *ep = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_ep_is_connected_params_t inner = *params;
    const uint8_t *peer_public         = NULL;

    if ((params->field_mask & UCT_EP_IS_CONNECTED_FIELD_EP_ADDR) &&
        (params->ep_addr != NULL)) {
        peer_public    = ((const crypt_ep_addr_t*)params->ep_addr)->public_key;
        inner.ep_addr  = (const uct_ep_addr_t*)((const crypt_ep_addr_t*)
                                                params->ep_addr + 1);
    }
    if ((params->field_mask & UCT_EP_IS_CONNECTED_FIELD_IFACE_ADDR) &&
        (params->iface_addr != NULL)) {
        peer_public      = ((const crypt_iface_addr_t*)
                            params->iface_addr)->public_key;
        inner.iface_addr = (const uct_iface_addr_t*)((const crypt_iface_addr_t*)
                                                     params->iface_addr + 1);
    }
    return ep->peer_known && (peer_public != NULL) &&
           !memcmp(peer_public, ep->peer_public, KEYEX_PUBLIC_KEY_LEN) &&
           uct_ep_is_connected(ep->inner, &inner);
}
#endif

/* ---- configuration -------------------------------------------------------- */

ucs_status_t uct_crypt_config_fill(void *opts, ucs_config_field_t *table,
                                   size_t size, const char *name,
                                   const char *prefix)
{
#if UCT_CRYPT_HAVE_CONFIG_ENTRY_FILL
    ucs_config_global_list_entry_t entry;

    memset(&entry, 0, sizeof(entry));
    entry.name   = name;
    entry.prefix = prefix;
    entry.table  = table;
    entry.size   = size;
    return ucs_config_parser_fill_opts(opts, &entry, "UCX_", 0);
#else
    (void)size;
    (void)name;
    return ucs_config_parser_fill_opts(opts, table, "UCX_", prefix, 0);
#endif
}

/* ---- md attributes -------------------------------------------------------- */

ucs_status_t uct_crypt_md_inner_query(uct_md_h inner, uct_crypt_md_attr_t *attr)
{
#if UCT_CRYPT_HAVE_MD_OPS_V2
    memset(attr, 0, sizeof(*attr));
    attr->field_mask = UINT64_MAX; /* every field this UCX knows */
    return uct_md_query_v2(inner, attr);
#else
    return uct_md_query(inner, attr);
#endif
}

/* ---- remote keys ---------------------------------------------------------- */

ucs_status_t uct_crypt_inner_rkey_unpack(uct_component_h component,
                                         const void *buffer,
                                         uct_rkey_bundle_t *rkey)
{
    ucs_status_t status = uct_rkey_unpack(component, buffer, rkey);

#if UCT_CRYPT_HAVE_RKEY_UNPACK_PARAMS
    if (status == UCS_ERR_UNSUPPORTED) {
        /* an inner without keys (tcp): none is needed, none is used */
        rkey->rkey   = UCT_INVALID_RKEY;
        rkey->handle = NULL;
        rkey->type   = NULL;
        return UCS_OK;
    }
#endif
    return status;
}
