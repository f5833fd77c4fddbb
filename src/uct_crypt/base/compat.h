/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Differences between the UCX releases the transport compiles against
 * (1.13 to 1.22), named by what they are, keyed on the version of the
 * headers being compiled (uct/api/version.h). Code elsewhere tests these
 * names, never a version; what needs code of its own per release lives in
 * uct_crypt_compat.c. docs/ucx-releases.md keeps the facts per release.
 */
#ifndef UCT_CRYPT_COMPAT_H
#define UCT_CRYPT_COMPAT_H

#include <uct/api/version.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/arch/cpu.h>
#include <ucs/config/parser.h>
#include <ucs/datastruct/mpool.h>
#include <limits.h>

#define UCT_CRYPT_UCX_AT_LEAST(_major, _minor) \
    ((UCT_VERNO_MAJOR > (_major)) || \
     ((UCT_VERNO_MAJOR == (_major)) && (UCT_VERNO_MINOR >= (_minor))))

#define UCT_CRYPT_UCX_EXACTLY(_major, _minor) \
    ((UCT_VERNO_MAJOR == (_major)) && (UCT_VERNO_MINOR == (_minor)))

/* 1.14: ucs_mpool_init takes a ucs_mpool_params_t */
#define UCT_CRYPT_HAVE_MPOOL_PARAMS          UCT_CRYPT_UCX_AT_LEAST(1, 14)
/* 1.14: an md's query op fills uct_md_attr_v2_t, its mem_reg op takes
 * uct_md_mem_reg_params_t (the public v1 calls stay) */
#define UCT_CRYPT_HAVE_MD_OPS_V2             UCT_CRYPT_UCX_AT_LEAST(1, 14)
/* 1.14: UCP connects connect-to-ep lanes with uct_ep_connect_to_ep_v2,
 * an internal op */
#define UCT_CRYPT_HAVE_CONNECT_TO_EP_V2      UCT_CRYPT_UCX_AT_LEAST(1, 14)
/* 1.15: UCP asks uct_iface_is_reachable_v2, an internal op */
#define UCT_CRYPT_HAVE_IS_REACHABLE_V2       UCT_CRYPT_UCX_AT_LEAST(1, 15)
/* 1.15: ucs_config_parser_fill_opts takes the table's global-list entry */
#define UCT_CRYPT_HAVE_CONFIG_ENTRY_FILL     UCT_CRYPT_UCX_AT_LEAST(1, 15)
/* 1.16: no shared uct_base_iface_internal_ops: each transport has its own */
#define UCT_CRYPT_HAVE_BASE_INTERNAL_OPS     (!UCT_CRYPT_UCX_AT_LEAST(1, 16))
/* 1.16: UCP asks uct_ep_is_connected (wireup reconfiguration), internal */
#define UCT_CRYPT_HAVE_EP_IS_CONNECTED       UCT_CRYPT_UCX_AT_LEAST(1, 16)
/* 1.16: a component must compare remote keys (NULL crashes ucp_rkey_compare) */
#define UCT_CRYPT_HAVE_RKEY_COMPARE          UCT_CRYPT_UCX_AT_LEAST(1, 16)
/* 1.16: mkey_pack op gets the address and length; md op
 * is_sockaddr_accessible gone */
#define UCT_CRYPT_HAVE_MKEY_PACK_RANGE       UCT_CRYPT_UCX_AT_LEAST(1, 16)
#define UCT_CRYPT_HAVE_MD_SOCKADDR_OP        (!UCT_CRYPT_UCX_AT_LEAST(1, 16))
/* 1.17: uct_config_modify matches the table's prefix and the name
 * ("TCP_TX_SEG_SIZE"); a bare name is ignored */
#define UCT_CRYPT_HAVE_PREFIXED_CONFIG_MODIFY UCT_CRYPT_UCX_AT_LEAST(1, 17)
/* 1.18: UCP takes a transport to be inter-node only if it says so */
#define UCT_CRYPT_HAVE_INTER_NODE_FLAG       UCT_CRYPT_UCX_AT_LEAST(1, 18)
/* 1.19: component rkey_unpack takes uct_rkey_unpack_params_t; tcp has no
 * registration and no remote keys (its rkey_unpack is UNSUPPORTED) */
#define UCT_CRYPT_HAVE_RKEY_UNPACK_PARAMS    UCT_CRYPT_UCX_AT_LEAST(1, 19)
/* 1.21: ep_invalidate takes uct_ep_invalidate_params_t */
#define UCT_CRYPT_HAVE_EP_INVALIDATE_PARAMS  UCT_CRYPT_UCX_AT_LEAST(1, 21)
/* 1.20 and 1.22 (not 1.21, which reverted it): iface_query_v2 is the first
 * internal op; 1.20 only: iface_mem_element_pack; 1.20+: ep_get_device_ep;
 * 1.22: ep_put_sgl_zcopy */
#define UCT_CRYPT_HAVE_IFACE_QUERY_V2        (UCT_CRYPT_UCX_EXACTLY(1, 20) || \
                                              UCT_CRYPT_UCX_AT_LEAST(1, 22))
#define UCT_CRYPT_HAVE_MEM_ELEMENT_PACK      UCT_CRYPT_UCX_EXACTLY(1, 20)
#define UCT_CRYPT_HAVE_GET_DEVICE_EP         UCT_CRYPT_UCX_AT_LEAST(1, 20)
#define UCT_CRYPT_HAVE_PUT_SGL_ZCOPY         UCT_CRYPT_UCX_AT_LEAST(1, 22)
/* 1.22: UCT loads every lib<uct>_<name> it finds in UCX_PLUGIN_PATH (then
 * its own module folder) from inside uct_query_components, with its
 * loading lock held, and then calls the module's ucs_module_global_init */
#define UCT_CRYPT_HAVE_PLUGIN_LOADER         UCT_CRYPT_UCX_AT_LEAST(1, 22)

#if UCT_CRYPT_HAVE_MD_OPS_V2
typedef uct_md_attr_v2_t uct_crypt_md_attr_t;
#else
typedef uct_md_attr_t uct_crypt_md_attr_t;
#endif

/* A pool of `elem_size`-byte descriptors from malloc'd chunks, unbounded */
static inline ucs_status_t
uct_crypt_mpool_init(ucs_mpool_t *mp, size_t elem_size, unsigned per_chunk,
                     const char *name)
{
    static ucs_mpool_ops_t ops = {
        .chunk_alloc   = ucs_mpool_chunk_malloc,
        .chunk_release = ucs_mpool_chunk_free,
        .obj_init      = NULL,
        .obj_cleanup   = NULL
    };
#if UCT_CRYPT_HAVE_MPOOL_PARAMS
    ucs_mpool_params_t params;

    ucs_mpool_params_reset(&params);
    params.elem_size       = elem_size;
    params.elems_per_chunk = per_chunk;
    params.ops             = &ops;
    params.name            = name;
    return ucs_mpool_init(&params, mp);
#else
    return ucs_mpool_init(mp, 0, elem_size, 0, UCS_SYS_CACHE_LINE_SIZE,
                          per_chunk, UINT_MAX, &ops, name);
#endif
}

/* ---- uct_crypt_compat.c ---------------------------------------------------- */

/* The internal ops of an iface of ours, crypt's or (wire) the own
 * wire's: the members this UCX has, the v2 entry points that UCP calls
 * forwarded to the iface's public ops, crypt's own ep_is_connected */
uct_iface_internal_ops_t *uct_crypt_internal_ops(int wire);

/* Fill such a table (the connection manager's "iface" starts from the
 * own wire's, with its own ep_query) */
void uct_crypt_internal_ops_init(uct_iface_internal_ops_t *ops, int wire);

/* Fill `opts` from the environment (UCX_<prefix><name>), by `table` */
ucs_status_t uct_crypt_config_fill(void *opts, ucs_config_field_t *table,
                                   size_t size, const char *name,
                                   const char *prefix);

/* The md's registration by length and access flags, whatever the md op's
 * signature; and the inner md's attributes as the md op returns them */
ucs_status_t uct_crypt_md_inner_query(uct_md_h inner, uct_crypt_md_attr_t *attr);

/* Unpack an inner component's remote key; UNSUPPORTED from an inner that
 * has no keys (tcp from 1.19) leaves rkey->rkey UCT_INVALID_RKEY */
ucs_status_t uct_crypt_inner_rkey_unpack(uct_component_h component,
                                         const void *buffer,
                                         uct_rkey_bundle_t *rkey);

#endif
