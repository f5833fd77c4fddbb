/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The crypt component and its loading.
 *
 * Loading: the constructor registers the component, its tls "crypt" (data)
 * and "crypt_aux" (auxiliary, uct_crypt_iface.c), and takes the network
 * components (tcp, ib, rdmacm, ...) off UCT's component list
 * (uct_crypt_inner.c), so UCP can reach the network only through crypt,
 * whatever UCX_TLS says: fail closed. Intra-node components stay visible
 * and untouched.
 *
 * The component offers one md per selected (inner md, inner tl) pair
 * (uct_crypt_md.c); its remote keys are the inner's, behind the inner
 * component's name.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/cm/cm.h"

#include <uct/api/version.h>
#include <ucs/sys/module.h>
#include <ucs/sys/string.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int uct_crypt_registered;

/* ---- component: md resources --------------------------------------------- */

typedef struct {
    uct_md_resource_desc_t *resources;
    unsigned               count;
} uct_crypt_resource_list_t;

static int uct_crypt_add_resource(void *arg, uct_component_h component,
                                  const char *md_name, const char *tl_name,
                                  unsigned roles)
{
    uct_crypt_resource_list_t *list = arg;
    uct_md_resource_desc_t *grown;

    grown = ucs_realloc(list->resources, sizeof(*grown) * (list->count + 1),
                        "crypt md resources");
    if (grown == NULL) {
        return 1;
    }
    list->resources = grown;
    uct_crypt_md_name(grown[list->count++].md_name, md_name, tl_name);
    return 0;
}

static ucs_status_t
uct_crypt_query_md_resources(uct_component_t *component,
                             uct_md_resource_desc_t **resources_p,
                             unsigned *num_resources_p)
{
    uct_crypt_resource_list_t list = {NULL, 0};
    char unmatched[256];

    uct_crypt_foreach_inner(uct_crypt_add_resource, &list, unmatched,
                            sizeof(unmatched));
    /* An alias names several transports, of which a host has some: only
     * when nothing at all matched is the configuration wrong. */
    if ((list.count == 0) && (unmatched[0] != '\0')) {
        /* misconfiguration: say so, loudly, and offer nothing for it */
        ucs_error("crypt: inner transport(s)%s not available on this host; "
                  "set UCX_CRYPT_TLS (or the network transports in UCX_TLS) "
                  "to ones 'ucx_info -d' lists under crypt, e.g. tcp or rc",
                  unmatched);
    }
    *resources_p     = list.resources;
    *num_resources_p = list.count;
    return UCS_OK;
}

/* ---- remote keys ---------------------------------------------------------- */

/* The rkey names the inner component: unpack with it, keep the bundle. */
#if UCT_CRYPT_HAVE_RKEY_UNPACK_PARAMS
static ucs_status_t uct_crypt_rkey_unpack(uct_component_t *component,
                                          const void *rkey_buffer,
                                          const uct_rkey_unpack_params_t *params,
                                          uct_rkey_t *rkey_p, void **handle_p)
#else
static ucs_status_t uct_crypt_rkey_unpack(uct_component_t *component,
                                          const void *rkey_buffer,
                                          uct_rkey_t *rkey_p, void **handle_p)
#endif
{
    char name[UCT_COMPONENT_NAME_MAX + 1];
    uct_component_h inner;
    uct_crypt_rkey_t *rkey;
    ucs_status_t status;

    ucs_strncpy_zero(name, rkey_buffer, sizeof(name));
    inner = uct_crypt_inner_component_find(name);
    if (inner == NULL) {
        ucs_error("crypt: remote key for unknown inner component '%s'", name);
        return UCS_ERR_INVALID_PARAM;
    }

    rkey = ucs_malloc(sizeof(*rkey), "crypt rkey");
    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    rkey->component = inner;
    memcpy(&rkey->token, UCS_PTR_BYTE_OFFSET(rkey_buffer, CRYPT_BULK_RKEY_NAME_LEN),
           sizeof(rkey->token));
    rkey->token     = le64toh(rkey->token);
    status = uct_crypt_inner_rkey_unpack(rkey->component,
                                         UCS_PTR_BYTE_OFFSET(rkey_buffer,
                                                             CRYPT_BULK_RKEY_MIN_LEN),
                                         &rkey->inner);
    if (status != UCS_OK) {
        ucs_free(rkey);
        return status;
    }
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = rkey;
    return UCS_OK;
}

static ucs_status_t uct_crypt_rkey_release(uct_component_t *component,
                                           uct_rkey_t tl_rkey, void *handle)
{
    uct_crypt_rkey_t *rkey = handle;
    ucs_status_t status    = UCS_OK;

    if (rkey->inner.rkey != UCT_INVALID_RKEY) {
        status = uct_rkey_release(rkey->component, &rkey->inner);
    }
    ucs_free(rkey);
    return status;
}

#if UCT_CRYPT_HAVE_RKEY_COMPARE
/* ucp_rkey_compare: keys of another inner component differ; the inner
 * compares its own */
static ucs_status_t uct_crypt_rkey_compare(uct_component_t *component,
                                           uct_rkey_t tl_rkey1,
                                           uct_rkey_t tl_rkey2,
                                           const uct_rkey_compare_params_t *params,
                                           int *result)
{
    const uct_crypt_rkey_t *rkey1 = (const uct_crypt_rkey_t*)tl_rkey1;
    const uct_crypt_rkey_t *rkey2 = (const uct_crypt_rkey_t*)tl_rkey2;

    if (rkey1->component != rkey2->component) {
        *result = ((uintptr_t)rkey1->component < (uintptr_t)rkey2->component) ?
                  -1 : 1;
        return UCS_OK;
    }
    if (rkey1->token != rkey2->token) {
        *result = (rkey1->token < rkey2->token) ? -1 : 1;
        return UCS_OK;
    }
    if ((rkey1->inner.rkey == UCT_INVALID_RKEY) ||
        (rkey2->inner.rkey == UCT_INVALID_RKEY)) {
        *result = (rkey1->inner.rkey > rkey2->inner.rkey) -
                  (rkey1->inner.rkey < rkey2->inner.rkey);
        return UCS_OK;
    }
    return uct_rkey_compare(rkey1->component, rkey1->inner.rkey,
                            rkey2->inner.rkey, params, result);
}
#endif

static ucs_status_t uct_crypt_rkey_ptr(uct_component_t *component,
                                       uct_rkey_t rkey, void *handle,
                                       uint64_t raddr, void **laddr_p)
{
    return UCS_ERR_UNSUPPORTED; /* a peer's memory is never ours to touch */
}

uct_component_t uct_crypt_component = {
    .query_md_resources = uct_crypt_query_md_resources,
    .md_open            = uct_crypt_md_open,
    .cm_open            = uct_crypt_cm_open,
    .rkey_unpack        = uct_crypt_rkey_unpack,
    .rkey_ptr           = uct_crypt_rkey_ptr,
    .rkey_release       = uct_crypt_rkey_release,
#if UCT_CRYPT_HAVE_RKEY_COMPARE
    .rkey_compare       = uct_crypt_rkey_compare,
#endif
    .name               = UCT_CRYPT_NAME,
    .md_config          = {
        .name           = "Crypt memory domain",
        .prefix         = UCT_CRYPT_CONFIG_PREFIX,
        .table          = uct_crypt_md_config_table,
        .size           = sizeof(uct_crypt_md_config_t),
    },
    .cm_config          = {
        .name           = "Crypt connection manager",
        .prefix         = UCT_CRYPT_CONFIG_PREFIX "CM_",
        .table          = uct_crypt_cm_config_table,
        .size           = sizeof(uct_crypt_cm_config_t),
    },
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_crypt_component),
    .flags              = UCT_COMPONENT_FLAG_CM,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function
};

/* ---- loading ------------------------------------------------------------- */

/* Refuse to run inside another UCX release than the one we were compiled
 * against: the internal struct layouts we embed would not match. */
static void uct_crypt_check_ucx_version(void)
{
    void (*get_version)(unsigned*, unsigned*, unsigned*);
    unsigned major, minor, release;

    get_version = (void (*)(unsigned*, unsigned*, unsigned*))
            dlsym(RTLD_DEFAULT, "ucp_get_version");
    if (get_version == NULL) {
        return; /* a UCT-only program: libuct's soname pins the ABI */
    }
    get_version(&major, &minor, &release);
    if ((major != UCT_VERNO_MAJOR) || (minor != UCT_VERNO_MINOR)) {
        fprintf(stderr, "ucx-crypt: FATAL: built for UCX %s but running with "
                "UCX %u.%u.%u: rebuild ucx-crypt against this UCX (configure "
                "--with-ucx/--with-ucx-src) or run with the UCX it was built "
                "for\n", UCX_CRYPT_BUILT_FOR_UCX, major, minor, release);
        _exit(1);
    }
}

/* Register crypt and hide the network: from the constructor when
 * preloaded (every release), from ucs_module_global_init when UCX's own
 * loader opened us (UCX_PLUGIN_PATH, 1.22+). UCX_TLS is the launcher's to
 * set (ucx-crypt-run, the site configuration), never ours; loaded as a
 * module we come after UCP parsed its configuration anyway. */
static void uct_crypt_load(int from_module_loader)
{
    static int loading;

    /* once; and the module loader's call to ucs_module_global_init while
     * we load (a preloaded library that UCX_PLUGIN_PATH also names, our
     * own module load) finds us at work and returns */
    if (loading) {
        return;
    }
    loading = 1;
    /* before any call into UCX's internals, whose layouts and signatures
     * differ between releases: a build for another UCX stops here, saying
     * why, instead of crashing in them */
    uct_crypt_check_ucx_version();
    uct_crypt_global_config_read();
    if (!uct_crypt_global.enable) {
        ucs_warn("crypt: disabled by UCX_CRYPT_ENABLE=n: network traffic is "
                 "NOT encrypted");
        return;
    }

    uct_crypt_inner_check_ucx_tls();
    uct_crypt_inner_hide_network(from_module_loader);
    uct_tl_register(&uct_crypt_component, &uct_crypt_tl);
    uct_tl_register(&uct_crypt_component, &uct_crypt_aux_tl);
    uct_crypt_inner_cm_to_ucx_config();
    uct_component_register(&uct_crypt_component);
    uct_crypt_registered = 1;
    if (uct_crypt_global.stats) {
        atexit(uct_crypt_stats_print);
    }
}

#if UCT_CRYPT_HAVE_PLUGIN_LOADER
/* Is `dir` (resolved) the folder we were loaded from? */
static int uct_crypt_same_dir(const char *dir, const char *ours)
{
    char resolved[PATH_MAX];

    return (realpath(dir, resolved) != NULL) && !strcmp(resolved, ours);
}

/* Opened by UCX's module loader (rather than preloaded or dlopen'ed by a
 * program): we were loaded from one of the folders it scans, the entries
 * of UCX_PLUGIN_PATH, dirname(libucs)/ucx and UCX_MODULE_DIR. The loader
 * runs inside uct_query_components with UCT's lock held, where the
 * constructor's work would deadlock; it calls ucs_module_global_init next. */
static int uct_crypt_loaded_by_ucx(void)
{
    const char *env = getenv("UCX_PLUGIN_PATH");
    char ours[PATH_MAX], dir[PATH_MAX], *copy, *entry, *save = NULL;
    Dl_info self, ucs;
    int found = 0;
    size_t len;

    /* the folder of the name we were opened by (a plugin folder holds a
     * link to the library) */
    if (!dladdr((void*)uct_crypt_loaded_by_ucx, &self) || (self.dli_fname == NULL)) {
        return 0;
    }
    ucs_strncpy_zero(ours, self.dli_fname, sizeof(ours));
    if ((strrchr(ours, '/') == NULL) || (realpath(dirname(ours), dir) == NULL)) {
        return 0;
    }
    if ((env != NULL) && ((copy = strdup(env)) != NULL)) {
        for (entry = strtok_r(copy, ":", &save); !found && (entry != NULL);
             entry = strtok_r(NULL, ":", &save)) {
            found = uct_crypt_same_dir(entry, dir);
        }
        free(copy);
    }
    env = getenv("UCX_MODULE_DIR");
    found = found || ((env != NULL) && uct_crypt_same_dir(env, dir));
    if (!found && dladdr((void*)ucs_load_modules, &ucs) && (ucs.dli_fname != NULL)) {
        ucs_strncpy_zero(ours, ucs.dli_fname, sizeof(ours));
        if ((strrchr(ours, '/') != NULL) && (dirname(ours) == ours)) {
            len = strlen(ours);
            snprintf(ours + len, sizeof(ours) - len, "/ucx");
            found = uct_crypt_same_dir(ours, dir);
        }
    }
    return found;
}

UCS_MODULE_INIT(); /* (the loader finds it by name) */
UCS_MODULE_INIT()
{
    uct_crypt_load(1); /* nothing if preloaded: the constructor did it */
    return UCS_OK;
}
#endif

static void UCS_F_CTOR uct_crypt_init(void)
{
#if UCT_CRYPT_HAVE_PLUGIN_LOADER
    if (uct_crypt_loaded_by_ucx()) {
        return; /* UCS_MODULE_INIT, when the loader calls it */
    }
#endif
    uct_crypt_load(0);
}

static void UCS_F_DTOR uct_crypt_cleanup(void)
{
    if (uct_crypt_registered) {
        uct_component_unregister(&uct_crypt_component);
        uct_crypt_inner_restore();
    }
    uct_crypt_global_cleanup();
}
