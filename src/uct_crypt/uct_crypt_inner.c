/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The inner transports: which UCT components are networks (hidden from UCP
 * behind crypt at load time: fail closed) and which of their transports the
 * user selected for crypt to encrypt over (UCX_CRYPT_TLS, or the network
 * names in UCX_TLS beside "crypt"), in which role: data (the tl "crypt")
 * or auxiliary (the tl "crypt_aux", a connect-to-iface transport that UCP
 * needs to wire up connect-to-ep ones such as rc, as UCX's own "rc" alias
 * adds ud as ":aux").
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/wire/wire.h"
#include "uct_crypt/bulk/bulk.h"

#include <ucs/sys/module.h>
#include <ucs/sys/string.h>
#include <stdlib.h>
#include <string.h>

/* The network components crypt took off UCT's list (their own list link
 * threads them here): no bound, so that none stays visible in clear (F14:
 * past 32 of them the rest were left on UCT's list) */
static UCS_LIST_HEAD(uct_crypt_inner_components);

/* Components that never leave the node: left visible. Anything else is
 * treated as a network and hidden behind crypt (an unknown component is
 * hidden too: fail closed). */
static const char *uct_crypt_intra_node_components[] = {
    "self", "sysv", "posix", "cma", "knem", "xpmem", "cuda_cpy", "cuda_ipc",
    "gdr_copy", "rocm_cpy", "rocm_ipc", "ze_copy", "ze_ipc", UCT_CRYPT_NAME,
    NULL
};

/* The inner tl names of each role, comma-led (",a,b"), into `data` and
 * `aux` (uct_crypt_tls_roles), from UCX_CRYPT_TLS or else UCX_TLS */
static void uct_crypt_inner_tls(char *out, char *aux, size_t max)
{
    const char *source = uct_crypt_global.tls;

    uct_crypt_tls_roles((source[0] != '\0') ? source : getenv("UCX_TLS"), out,
                        aux, max);
#if UCX_CRYPT_FAULT_INJECTION
    if (uct_crypt_global.emulate_connect_to_ep) {
        /* tests: the data inners also serve as their own auxiliaries, as
         * ud does for rc; nothing named: every network transport, in both
         * roles */
        if (out[0] == '\0') {
            ucs_strncpy_zero(aux, "*", max);
        } else {
            uct_crypt_tls_strcat(aux, out, max);
        }
    }
#endif
}

static int uct_crypt_tl_selected(const char *selected, const char *tl_name)
{
    /* nothing named: every network transport */
    return (selected[0] == '\0') || uct_crypt_tls_in_list(selected, tl_name);
}

void uct_crypt_md_name(char *name, const char *inner_md, const char *tl)
{
    if (!strcmp(inner_md, tl)) {
        ucs_snprintf_zero(name, UCT_MD_NAME_MAX, "%s", inner_md);
    } else {
        ucs_snprintf_zero(name, UCT_MD_NAME_MAX, "%s/%s", inner_md, tl);
    }
}

/* Walk every (inner component, md, tl) the user selected (uct_crypt.h). */
void uct_crypt_foreach_inner(uct_crypt_inner_cb_t cb, void *arg,
                             char *unmatched, size_t unmatched_max)
{
    char selected[512], aux[512], *word, *save = NULL, seen[512] = "";
    uct_component_attr_t cattr;
    uct_tl_resource_desc_t *tl_rscs;
    unsigned m, t, num_tl_rscs;
    uct_component_h component;
    uct_md_config_t *md_config;
    uct_md_h md;
    int stop = 0;

    uct_crypt_inner_tls(selected, aux, sizeof(selected));
    ucs_list_for_each(component, &uct_crypt_inner_components, list) {
        if (stop) {
            break;
        }
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(component, &cattr) != UCS_OK) {
            continue;
        }
        cattr.md_resources = ucs_alloca(sizeof(*cattr.md_resources) *
                                        cattr.md_resource_count);
        cattr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        if (uct_component_query(component, &cattr) != UCS_OK) {
            continue;
        }

        for (m = 0; (m < cattr.md_resource_count) && !stop; ++m) {
            const char *md_name = cattr.md_resources[m].md_name;
            if ((uct_md_config_read(component, NULL, NULL, &md_config) != UCS_OK)) {
                continue;
            }
            if (uct_md_open(component, md_name, md_config, &md) != UCS_OK) {
                uct_config_release(md_config);
                continue;
            }
            uct_config_release(md_config);
            if (uct_md_query_tl_resources(md, &tl_rscs, &num_tl_rscs) == UCS_OK) {
                for (t = 0; (t < num_tl_rscs) && !stop; ++t) {
                    const char *tl = tl_rscs[t].tl_name;
                    unsigned roles = 0;
                    if (tl_rscs[t].dev_type != UCT_DEVICE_TYPE_NET) {
                        continue;
                    }
                    roles |= uct_crypt_tl_selected(selected, tl) ?
                             UCT_CRYPT_ROLE_DATA : 0;
                    roles |= (uct_crypt_tls_in_list(aux, tl) || !strcmp(aux, "*")) ?
                             UCT_CRYPT_ROLE_AUX : 0;
                    if (roles == 0) {
                        continue;
                    }
                    if (roles & UCT_CRYPT_ROLE_DATA) {
                        uct_crypt_tls_strcat(seen, ",", sizeof(seen));
                        uct_crypt_tls_strcat(seen, tl, sizeof(seen));
                    }
                    /* one call per (md, tl): skip other devices of the tl */
                    if ((t > 0) && !strcmp(tl, tl_rscs[t - 1].tl_name)) {
                        continue;
                    }
                    stop = cb(arg, component, md_name, tl, roles);
                }
                uct_release_tl_resource_list(tl_rscs);
            }
            uct_md_close(md);
        }
    }

    /* Names the user gave that matched nothing at all */
    if (unmatched != NULL) {
        unmatched[0] = '\0';
        for (word = strtok_r(selected, ",", &save); word != NULL;
             word = strtok_r(NULL, ",", &save)) {
            if (!uct_crypt_tls_in_list(seen, word)) {
                uct_crypt_tls_strcat(unmatched, " ", unmatched_max);
                uct_crypt_tls_strcat(unmatched, word, unmatched_max);
            }
        }
    }
}

/* Which inner transport an iface address belongs to: FNV-1a (32 bits) of
 * "component/tl", a label (not a secret, not a MAC) that keeps UCP from
 * pairing crypt over one inner with a peer's crypt over another. */
uint32_t uct_crypt_inner_id(const uct_crypt_md_t *md)
{
    uct_component_attr_t attr;
    char label[UCT_COMPONENT_NAME_MAX + UCT_TL_NAME_MAX + 2];
    uint32_t hash = 2166136261u;
    const char *p;

    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    if (uct_component_query(md->inner_component, &attr) != UCS_OK) {
        attr.name[0] = '\0';
    }
    ucs_snprintf_zero(label, sizeof(label), "%s/%s", attr.name, md->inner_tl);
    for (p = label; *p != '\0'; ++p) {
        hash = (hash ^ (uint8_t)*p) * 16777619u;
    }
    return hash;
}

uct_component_h uct_crypt_inner_component_find(const char *name)
{
    uct_component_attr_t attr;
    uct_component_h component;

    ucs_list_for_each(component, &uct_crypt_inner_components, list) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(component, &attr) == UCS_OK) &&
            !strcmp(attr.name, name)) {
            return component;
        }
    }
    return NULL;
}

/* ---- at load time --------------------------------------------------------- */

void uct_crypt_inner_hide_network(int from_module_loader)
{
    uct_component_h *components, component, tmp;
    unsigned num_components;
#if UCT_CRYPT_HAVE_PLUGIN_LOADER
    static ucs_init_once_t load_once = UCS_INIT_ONCE_INITIALIZER;
#endif

    /* Loads UCX's own modules (ib, rdmacm, cma) now, so that their
     * components are on the list before we take network ones off. From a
     * preloaded library's constructor, through uct_query_components (no
     * lock is held yet). From UCX's module loader (1.22), which holds
     * UCT's lock inside uct_query_components, through a load of our own
     * (the modules that come after us in its folder scan would otherwise
     * escape; UCX dedups by name, so each loads once). */
    if (from_module_loader) {
#if UCT_CRYPT_HAVE_PLUGIN_LOADER
        ucs_load_modules("uct", "", &load_once, 0);
#endif
    } else if (uct_query_components(&components, &num_components) == UCS_OK) {
        uct_release_component_list(components);
    }

    ucs_list_for_each_safe(component, tmp, &uct_components_list, list) {
        if (uct_crypt_tls_word_in(component->name, uct_crypt_intra_node_components)) {
            continue;
        }
        ucs_list_del(&component->list);
        ucs_list_add_tail(&uct_crypt_inner_components, &component->list);
    }
}

/*
 * UCX_TLS is UCP's, and the launcher's to write (ucx-crypt-run, before the
 * program starts): the plugin only reads it, preloaded or loaded as a
 * module alike (as a module it comes after UCP read it anyway). Where UCP
 * cannot use it as it is, say what to set: network names beside crypt
 * (UCX_TLS=crypt,tcp) are crypt's inners here, and UCP says it has no
 * such transport; an inner that connects only endpoint to endpoint (rc,
 * dc) needs crypt_aux in UCX_TLS, or UCP finds no way to wire it up.
 */
void uct_crypt_inner_check_ucx_tls(void)
{
    const char *ucx_tls = getenv("UCX_TLS");
    uct_crypt_tls_env_t env;
    int need_aux = 0;

#if UCX_CRYPT_FAULT_INJECTION
    need_aux = uct_crypt_global.emulate_connect_to_ep;
#endif
    uct_crypt_tls_env(ucx_tls, uct_crypt_global.tls, need_aux, &env);
    if (env.set_ucx_tls) {
        ucs_warn("crypt: UCX_TLS=%s: UCP can use UCX_TLS=%s%s%s (ucx-crypt-run "
                 "sets both; crypt's inners come from UCX_CRYPT_TLS, else from "
                 "the network names in UCX_TLS)", ucx_tls, env.ucx_tls,
                 env.set_crypt_tls ? " UCX_CRYPT_TLS=" : "",
                 env.set_crypt_tls ? env.crypt_tls : "");
    }
}

/* UCP takes its connection managers by component name from
 * UCX_SOCKADDR_TLS_PRIORITY (default "rdmacm,tcp,sockcm", which does not
 * name crypt); crypt hides those, so crypt's is the one to use */
void uct_crypt_inner_cm_to_ucx_config(void)
{
    const char *priority = getenv("UCX_SOCKADDR_TLS_PRIORITY");

    if (priority == NULL) {
        setenv("UCX_SOCKADDR_TLS_PRIORITY", UCT_CRYPT_NAME, 0);
    } else if ((strstr(priority, UCT_CRYPT_NAME) == NULL) &&
               (strchr(priority, '*') == NULL)) {
        ucs_warn("crypt: UCX_SOCKADDR_TLS_PRIORITY=%s leaves out crypt's "
                 "connection manager: client/server connections "
                 "(ucp_listener_create, ucp_ep_create by socket address) find "
                 "none; add \"crypt\" to it", priority);
    }
}

/* Back onto UCT's list, at unload */
void uct_crypt_inner_restore(void)
{
    uct_component_h component, tmp;

    ucs_list_for_each_safe(component, tmp, &uct_crypt_inner_components, list) {
        ucs_list_del(&component->list);
        ucs_list_add_tail(&uct_components_list, &component->list);
    }
}

/* ---- opening an inner ----------------------------------------------------- */

/* The inner transport reports a failed endpoint: fail ours with it. */
ucs_status_t uct_crypt_iface_inner_err(void *arg, uct_ep_h inner_ep,
                                       ucs_status_t status)
{
    uct_crypt_iface_t *iface = arg;
    uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN];
    uint64_t flow_id;
    uct_crypt_ep_t *ep;

    /* no worker writes into a buffer that UCP, told now, gives back */
    uct_crypt_bulk_rx_quiesce(iface);
    ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->inner == inner_ep) {
            if (ep->failed != UCT_CRYPT_EP_OK) {
                /* said once already, or the record layer will say it with
                 * its reason (and abort where nobody handles it) */
                return UCS_OK;
            }
            /* once: a failure the record layer marked is reported here */
            ep->failed = UCT_CRYPT_EP_FAIL_REPORTED;
            if (!iface->inner_ops->ep_failed_locally(inner_ep)) {
                return uct_iface_handle_ep_err(&iface->super.super,
                                               &ep->super.super, status);
            }
            /* This process's own failure (the own wire's handshake had no
             * memory, cipher context or randomness): ended by the rules of
             * a record this side failed (uct_crypt_ep_failure_told), where
             * nobody handles it or in an MPI rank, never left to a job that
             * waits for ever (issue 44: MPICH hung). `ep` may be gone
             * after UCP's handler: what names it is copied first. */
            memcpy(peer_public, ep->peer_public, sizeof(peer_public));
            flow_id = ep->tx.flow_id;
            UCT_CRYPT_STAT_ADD(failures[UCT_CRYPT_FAIL_NO_RESOURCE], 1);
            status = uct_iface_handle_ep_err(&iface->super.super,
                                             &ep->super.super,
                                             UCS_ERR_CONNECTION_RESET);
            uct_crypt_ep_failure_told(status, peer_public, flow_id,
                                      UCT_CRYPT_FAIL_NO_RESOURCE,
                                      "its connection's handshake failed here");
            return UCS_OK;
        }
    }
    /* an inner ep kept for its FLOW_END (its peer died, say): handled here.
     * Not to be given back: rc takes an error no handler took for fatal
     * (uct_base_iface_failure_log_level, UCX 1.13's uct_iface.h) */
    return uct_crypt_iface_closing_failed(iface, inner_ep) ? UCS_OK : status;
}


ucs_status_t uct_crypt_inner_open(uct_md_h md, const char *tl, uct_worker_h worker,
                                  const uct_iface_params_t *params,
                                  const uct_crypt_wire_params_t *wire, int ucx_tcp,
                                  uct_iface_h *iface_p,
                                  const uct_crypt_inner_ops_t **ops_p)
{
    uct_iface_config_t *config;
    ucs_status_t status;

    status = uct_md_iface_config_read(md, tl, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    if (!strcmp(tl, "tcp") && !ucx_tcp) {
        /* Ethernet: crypt's own wire, never UCX's tcp transport, which acts
         * on its headers (a PUT request's address among them) before
         * anything is authenticated (wire/wire.h). What every wire of the
         * process has is set here: its device, the job secret (the psk),
         * the listeners' handshake rate. */
        uct_crypt_wire_params_t own = *wire;

        own.dev_name       = params->mode.device.dev_name;
        own.job_secret     = uct_crypt_job_secret;
        own.handshake_rate = uct_crypt_handshake_rate();
        status = uct_crypt_wire_iface_open(md, worker, params, config, &own,
                                           iface_p);
        *ops_p = &uct_crypt_wire_inner_ops;
    } else {
        status = uct_iface_open(md, worker, params, config, iface_p);
        *ops_p = &uct_crypt_ucx_inner_ops;
    }
    uct_config_release(config);
    return status;
}

/* ---- the inner ops of UCX's transports (rc, ud, dc) -------------------------
 * Each record is one AM that names its sender's static key in its HELLO;
 * nothing is bound to a connection, so nothing here has a connection to
 * answer about (the wire's table: wire/wire_ops.c). */

static ucs_status_t
uct_crypt_ucx_ep_set_peer(uct_ep_h ep, const uint8_t peer[KEYEX_PUBLIC_KEY_LEN])
{
    return UCS_OK; /* the record keys prove it: X25519 with that key */
}

/* X25519 with the peer's static key, salted with the job secret (a
 * low-order peer key is refused there: keyex_x25519) */
static keyex_status_t
uct_crypt_ucx_flow_secret(const keyex_keypair_t *own,
                          const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                          const uint8_t *conn_secret,
                          uint8_t secret[KEYEX_SECRET_LEN])
{
    return keyex_derive_pair_secret(own, peer, uct_crypt_job_secret, secret);
}

/* Nothing proved our key: the HELLO names it, under the record's tag */
static const uint8_t *uct_crypt_ucx_hello_key(const keyex_keypair_t *own)
{
    return own->public_key;
}

/* No connection: a flow is keyed at once, from the static keys */
static int uct_crypt_ucx_ep_ready(uct_ep_h ep, const uint8_t **secret_p)
{
    *secret_p = NULL;
    return 1;
}

static const uint8_t *uct_crypt_ucx_rx_none(uct_iface_h iface)
{
    return NULL;
}

static const char *uct_crypt_ucx_rx_peer_name(uct_iface_h iface)
{
    return "";
}

static uint64_t uct_crypt_ucx_rx_conn(uct_iface_h iface)
{
    return 0;
}

static int uct_crypt_ucx_ep_failed_locally(uct_ep_h ep)
{
    return 0; /* (UCX's transports fail for the network's reasons) */
}

static void uct_crypt_ucx_rx_reject(uct_iface_h iface, const char *reason)
{
    /* a datagram that failed is dropped by the record layer, which counts it */
}

const uct_crypt_inner_ops_t uct_crypt_ucx_inner_ops = {
    .flags              = 0,
    .ep_set_peer        = uct_crypt_ucx_ep_set_peer,
    .flow_secret        = uct_crypt_ucx_flow_secret,
    .hello_key          = uct_crypt_ucx_hello_key,
    .ep_ready           = uct_crypt_ucx_ep_ready,
    .ep_failed_locally  = uct_crypt_ucx_ep_failed_locally,
    .rx_secret          = uct_crypt_ucx_rx_none,
    .rx_peer            = uct_crypt_ucx_rx_none,
    .rx_peer_name       = uct_crypt_ucx_rx_peer_name,
    .rx_conn            = uct_crypt_ucx_rx_conn,
    .rx_source          = uct_crypt_ucx_rx_conn, /* (none: 0) */
    .rx_reject          = uct_crypt_ucx_rx_reject
    /* (no segment ops: without INLINE_SEGMENTS the bulk engine puts) */
};
