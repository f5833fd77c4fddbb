/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt memory domains. A crypt md wraps one (inner md, inner tl) pair; its
 * name is the inner md's name, followed by "/tl" when that differs from the
 * md's name. Registration goes through to the inner md, and the md keeps
 * what this process registered in a map by each region's random token,
 * which its remote key carries: a peer's bulk segment or get may touch
 * only the region whose key it was handed (bulk/bulk_rx.c,
 * bulk/bulk_get.c).
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk_input.h"

#include <ucs/sys/string.h>
#include <pthread.h>
#include <string.h>

ucs_config_field_t uct_crypt_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_crypt_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {NULL}
};

/* ---- md ------------------------------------------------------------------ */

static void uct_crypt_md_close(uct_md_h tl_md)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);

    uct_md_close(md->inner_md);
    kh_destroy_inplace(uct_crypt_regions, &md->regions);
    pthread_mutex_destroy(&md->regions_lock);
    ucs_free(md);
}

/* the md attribute fields: in `cap` up to 1.13, at the top from 1.14 */
#if UCT_CRYPT_HAVE_MD_OPS_V2
#define UCT_CRYPT_MD_CAP(_attr, _field) (_attr)->_field
#else
#define UCT_CRYPT_MD_CAP(_attr, _field) (_attr)->cap._field
#endif

static ucs_status_t uct_crypt_md_query(uct_md_h tl_md, uct_crypt_md_attr_t *attr)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    ucs_status_t status;

    status = uct_crypt_md_inner_query(md->inner_md, attr);
    if (status != UCS_OK) {
        return status;
    }

    /* Registration goes through to the inner md: the bulk engine's inner
     * put writes ciphertext into the target's registered buffer, where it
     * is opened in place. The remote key is the inner's, behind the inner
     * component's name (uct_crypt_rkey_unpack). AM zero-copy ignores the
     * handle: the cipher copies every payload anyway. A get's destination
     * is written by the peer's inner put, so it needs the inner's handle
     * where the inner needs one (rc; tcp does not). */
    UCT_CRYPT_MD_CAP(attr, flags)            = UCT_MD_FLAG_REG |
                                               UCT_MD_FLAG_NEED_RKEY |
                                               (UCT_CRYPT_MD_CAP(attr, flags) &
                                                UCT_MD_FLAG_NEED_MEMH);
    UCT_CRYPT_MD_CAP(attr, reg_mem_types)    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    UCT_CRYPT_MD_CAP(attr, alloc_mem_types)  = 0;
    UCT_CRYPT_MD_CAP(attr, access_mem_types) = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    UCT_CRYPT_MD_CAP(attr, detect_mem_types) = 0;
    UCT_CRYPT_MD_CAP(attr, max_alloc)        = 0;
    attr->rkey_packed_size                  += CRYPT_BULK_RKEY_MIN_LEN;
    return UCS_OK;
}

static ucs_status_t uct_crypt_mem_reg_flags(uct_md_h tl_md, void *address,
                                            size_t length, unsigned flags,
                                            uct_mem_h *memh_p)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    uct_crypt_memh_t *memh;
    ucs_status_t status;
    khiter_t it = 0;
    int ret;

    memh = ucs_malloc(sizeof(*memh), "crypt memh");
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memh->inner   = UCT_MEM_HANDLE_NULL;
    memh->address = (uintptr_t)address;
    memh->length  = length;
    /* what a peer holding its key may do there, as an HCA's rkey carries
     * the registration's remote rights (crypto review N6: a key handed
     * out for a get, on a rendezvous send buffer, let its holder write) */
    memh->access  = flags & UCT_MD_MEM_ACCESS_RMA;
    if (md->inner_reg) {
        status = uct_md_mem_reg(md->inner_md, address, length, flags,
                                &memh->inner);
        if (status != UCS_OK) {
            ucs_free(memh);
            return status;
        }
    }
    /* a capability: unguessable (secret randomness), never 0, unique in
     * this md (a repeat of 64 random bits is drawn again) */
    pthread_mutex_lock(&md->regions_lock);
    do {
        if (!crypt_random_secret(&memh->token, sizeof(memh->token))) {
            ucs_error("crypt: cannot register memory: no randomness for its "
                      "remote key%s", crypt_local_failure_take());
            ret = -1;
            break;
        }
        ret = 0;
        if (memh->token != 0) {
            /* ret: -1 out of memory, 0 the token was there, else added */
            it = kh_put(uct_crypt_regions, &md->regions, memh->token, &ret);
        }
    } while (ret == 0);
    if (ret > 0) {
        kh_value(&md->regions, it) = memh;
    }
    pthread_mutex_unlock(&md->regions_lock);
    if (ret < 0) {
        if (memh->inner != UCT_MEM_HANDLE_NULL) {
            uct_md_mem_dereg(md->inner_md, memh->inner);
        }
        ucs_free(memh);
        return UCS_ERR_NO_RESOURCE;
    }
    *memh_p = memh;
    return UCS_OK;
}

int uct_crypt_md_exposed(uct_crypt_md_t *md, uint64_t token, uint64_t address,
                         uint64_t length, unsigned access)
{
    khiter_t it;
    int found;

    /* A wrong guess fails the guesser's flow (the caller rejects it), so
     * probing tokens costs a handshake each; the map's lookup time says
     * at most whether some token shares a bucket with the guess. */
    pthread_mutex_lock(&md->regions_lock);
    it    = kh_get(uct_crypt_regions, &md->regions, token);
    found = (token != 0) && (it != kh_end(&md->regions)) &&
            ((kh_value(&md->regions, it)->access & access) == access) &&
            uct_crypt_range_within(address, length,
                                   kh_value(&md->regions, it)->address,
                                   kh_value(&md->regions, it)->length);
    pthread_mutex_unlock(&md->regions_lock);
    return found;
}

static ucs_status_t uct_crypt_mem_dereg(uct_md_h tl_md,
                                        const uct_md_mem_dereg_params_t *params)
{
    uct_crypt_md_t *md     = ucs_derived_of(tl_md, uct_crypt_md_t);
    uct_crypt_memh_t *memh = params->memh;
    ucs_status_t status    = UCS_OK;
    khiter_t it;

    pthread_mutex_lock(&md->regions_lock);
    it = kh_get(uct_crypt_regions, &md->regions, memh->token);
    if (it != kh_end(&md->regions)) {
        kh_del(uct_crypt_regions, &md->regions, it);
    }
    pthread_mutex_unlock(&md->regions_lock);
    if (memh->inner != UCT_MEM_HANDLE_NULL) {
        status = uct_md_mem_dereg(md->inner_md, memh->inner);
    }
    ucs_free(memh);
    return status;
}

/* The packed remote key: the inner component's name, then the inner's key
 * (none where the inner needs none, or for a get's unregistered buffer on
 * such an inner: memh may be NULL there, and the token is 0) */
ucs_status_t uct_crypt_md_pack_rkey(uct_crypt_md_t *md, uct_crypt_memh_t *memh,
                                    void *rkey_buffer)
{
    uint64_t token = htole64((memh != NULL) ? memh->token : 0);
    uct_component_attr_t attr;

    UCS_STATIC_ASSERT(CRYPT_BULK_RKEY_NAME_LEN == UCT_COMPONENT_NAME_MAX);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    uct_component_query(md->inner_component, &attr);
    memset(rkey_buffer, 0, UCT_COMPONENT_NAME_MAX);
    ucs_strncpy_zero(rkey_buffer, attr.name, UCT_COMPONENT_NAME_MAX);
    memcpy(UCS_PTR_BYTE_OFFSET(rkey_buffer, CRYPT_BULK_RKEY_NAME_LEN), &token,
           sizeof(token));
    if ((memh == NULL) || (memh->inner == UCT_MEM_HANDLE_NULL)) {
        return UCS_OK; /* the inner needs no key (tcp) */
    }
    return uct_md_mkey_pack(md->inner_md, memh->inner,
                            UCS_PTR_BYTE_OFFSET(rkey_buffer,
                                                CRYPT_BULK_RKEY_MIN_LEN));
}

#if UCT_CRYPT_HAVE_MD_OPS_V2
static ucs_status_t uct_crypt_mem_reg(uct_md_h tl_md, void *address,
                                      size_t length,
                                      const uct_md_mem_reg_params_t *params,
                                      uct_mem_h *memh_p)
{
    return uct_crypt_mem_reg_flags(tl_md, address, length,
                                   (params->field_mask &
                                    UCT_MD_MEM_REG_FIELD_FLAGS) ?
                                   params->flags : 0, memh_p);
}
#else
#define uct_crypt_mem_reg uct_crypt_mem_reg_flags
#endif

static ucs_status_t uct_crypt_detect_memory_type(uct_md_h md, const void *address,
                                                 size_t length,
                                                 ucs_memory_type_t *mem_type_p)
{
    return UCS_ERR_UNSUPPORTED;
}

#if UCT_CRYPT_HAVE_MKEY_PACK_RANGE
static ucs_status_t uct_crypt_mkey_pack(uct_md_h tl_md, uct_mem_h tl_memh,
                                        void *address, size_t length,
                                        const uct_md_mkey_pack_params_t *params,
                                        void *rkey_buffer)
#else
static ucs_status_t uct_crypt_mkey_pack(uct_md_h tl_md, uct_mem_h tl_memh,
                                        const uct_md_mkey_pack_params_t *params,
                                        void *rkey_buffer)
#endif
{
    return uct_crypt_md_pack_rkey(ucs_derived_of(tl_md, uct_crypt_md_t), tl_memh,
                                  rkey_buffer);
}

static uct_md_ops_t uct_crypt_md_ops = {
    .close                  = uct_crypt_md_close,
    .query                  = uct_crypt_md_query,
    .mem_reg                = uct_crypt_mem_reg,
    .mem_dereg              = uct_crypt_mem_dereg,
    .mkey_pack              = uct_crypt_mkey_pack,
#if UCT_CRYPT_HAVE_MD_SOCKADDR_OP
    .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
#endif
    .detect_memory_type     = uct_crypt_detect_memory_type
};

typedef struct {
    const char     *wanted;
    uct_crypt_md_t *md;
    ucs_status_t   status;
} uct_crypt_md_open_arg_t;

static int uct_crypt_md_open_inner(void *arg, uct_component_h component,
                                   const char *md_name, const char *tl_name,
                                   unsigned roles)
{
    uct_crypt_md_open_arg_t *open_arg = arg;
    char name[UCT_MD_NAME_MAX];
    uct_md_config_t *md_config;

    uct_crypt_md_name(name, md_name, tl_name);
    if (strcmp(name, open_arg->wanted)) {
        return 0;
    }

    open_arg->status = uct_md_config_read(component, NULL, NULL, &md_config);
    if (open_arg->status != UCS_OK) {
        return 1;
    }
    open_arg->status = uct_md_open(component, md_name, md_config,
                                   &open_arg->md->inner_md);
    uct_config_release(md_config);
    if (open_arg->status == UCS_OK) {
        uct_md_attr_t attr;
        open_arg->md->inner_reg = (uct_md_query(open_arg->md->inner_md,
                                                &attr) == UCS_OK) &&
                                  (attr.cap.flags & UCT_MD_FLAG_REG);
    }
    open_arg->md->inner_component = component;
    open_arg->md->roles           = roles;
    ucs_strncpy_zero(open_arg->md->inner_tl, tl_name,
                     sizeof(open_arg->md->inner_tl));
    return 1;
}

ucs_status_t uct_crypt_md_open(uct_component_t *component,
                               const char *md_name,
                               const uct_md_config_t *config,
                               uct_md_h *md_p)
{
    uct_crypt_md_open_arg_t arg;
    ucs_status_t status;
    uct_crypt_md_t *md;

    status = uct_crypt_global_init();
    if (status != UCS_OK) {
        return status;
    }

    md = ucs_calloc(1, sizeof(*md), "crypt md");
    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    md->super.ops       = &uct_crypt_md_ops;
    md->super.component = &uct_crypt_component;
    pthread_mutex_init(&md->regions_lock, NULL);
    kh_init_inplace(uct_crypt_regions, &md->regions);

    arg.wanted = md_name;
    arg.md     = md;
    arg.status = UCS_ERR_NO_DEVICE;
    uct_crypt_foreach_inner(uct_crypt_md_open_inner, &arg, NULL, 0);
    if (arg.status != UCS_OK) {
        ucs_error("crypt: cannot open inner memory domain for '%s': %s",
                  md_name, ucs_status_string(arg.status));
        kh_destroy_inplace(uct_crypt_regions, &md->regions);
        pthread_mutex_destroy(&md->regions_lock);
        ucs_free(md);
        return arg.status;
    }

    *md_p = &md->super;
    return UCS_OK;
}

/* ---- tl devices ----------------------------------------------------------- */

/* The inner's devices, for the tl of `role` when the md's inner has it */
static ucs_status_t
uct_crypt_query_role_devices(uct_md_h tl_md, unsigned role,
                             uct_tl_device_resource_t **devices_p,
                             unsigned *num_devices_p)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    uct_tl_device_resource_t *devices;
    uct_tl_resource_desc_t *rscs;
    unsigned i, num_rscs, count = 0;
    ucs_status_t status;

    if (!(md->roles & role)) {
        *devices_p     = NULL;
        *num_devices_p = 0;
        return UCS_OK;
    }
    status = uct_md_query_tl_resources(md->inner_md, &rscs, &num_rscs);
    if (status != UCS_OK) {
        return status;
    }

    devices = ucs_calloc(num_rscs ? num_rscs : 1, sizeof(*devices),
                         "crypt devices");
    if (devices == NULL) {
        uct_release_tl_resource_list(rscs);
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; i < num_rscs; ++i) {
        if (strcmp(rscs[i].tl_name, md->inner_tl)) {
            continue;
        }
        /* the same device names, so UCX_NET_DEVICES keeps working */
        ucs_strncpy_zero(devices[count].name, rscs[i].dev_name,
                         sizeof(devices[count].name));
        devices[count].type       = rscs[i].dev_type;
        devices[count].sys_device = rscs[i].sys_device;
        ++count;
    }
    uct_release_tl_resource_list(rscs);

    *devices_p     = devices;
    *num_devices_p = count;
    return UCS_OK;
}

ucs_status_t
uct_crypt_query_tl_devices(uct_md_h tl_md, uct_tl_device_resource_t **devices_p,
                           unsigned *num_devices_p)
{
    return uct_crypt_query_role_devices(tl_md, UCT_CRYPT_ROLE_DATA, devices_p,
                                        num_devices_p);
}

ucs_status_t
uct_crypt_query_aux_devices(uct_md_h tl_md, uct_tl_device_resource_t **devices_p,
                            unsigned *num_devices_p)
{
    return uct_crypt_query_role_devices(tl_md, UCT_CRYPT_ROLE_AUX, devices_p,
                                        num_devices_p);
}
