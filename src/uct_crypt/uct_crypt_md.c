/*
 * The crypt component and its memory domains.
 *
 * Loading: the constructor registers component and tl "crypt" and takes the
 * network components (tcp, ib, rdmacm, ...) off UCT's component list, so
 * UCP can reach the network only through crypt, whatever UCX_TLS says:
 * fail closed. Intra-node components stay visible and untouched.
 *
 * A crypt md wraps one (inner md, inner tl) pair; its name is the inner
 * md's name, followed by "/tl" when that differs from the md's name.
 */
#include "uct_crypt.h"

#include <ucp/api/ucp.h>
#include <ucs/datastruct/string_buffer.h>
#include <ucs/sys/string.h>
#include <openssl/crypto.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

uct_crypt_global_config_t uct_crypt_global;
uint8_t *uct_crypt_job_secret;

static uct_component_h uct_crypt_inner_components[32];
static unsigned uct_crypt_num_inner_components;
static int uct_crypt_registered;

/* Components that never leave the node: left visible. Anything else is
 * treated as a network and hidden behind crypt (an unknown component is
 * hidden too: fail closed). */
static const char *uct_crypt_intra_node_components[] = {
    "self", "sysv", "posix", "cma", "knem", "xpmem", "cuda_cpy", "cuda_ipc",
    "gdr_copy", "rocm_cpy", "rocm_ipc", "ze_copy", "ze_ipc", UCT_CRYPT_NAME,
    NULL
};

/* UCX_TLS words that name intra-node transports or are not transports */
static const char *uct_crypt_not_inner_tls[] = {
    "crypt", "self", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem",
    "cuda", "cuda_copy", "cuda_ipc", "gdr_copy", "rocm", "rocm_copy",
    "rocm_ipc", "all", NULL
};

/* The aliases of ucp_context.c (1.13.1, ucp_tl_aliases) for networks */
static const struct {
    const char *alias;
    const char *tls;
} uct_crypt_tl_aliases[] = {
    {"rc",   "rc_mlx5,rc_verbs"},
    {"rc_x", "rc_mlx5"},
    {"rc_v", "rc_verbs"},
    {"ud",   "ud_mlx5,ud_verbs"},
    {"ud_x", "ud_mlx5"},
    {"ud_v", "ud_verbs"},
    {"dc",   "dc_mlx5"},
    {"dc_x", "dc_mlx5"},
    {"ib",   "rc_mlx5,ud_mlx5,dc_mlx5,rc_verbs,ud_verbs"},
    {NULL,   NULL}
};

static ucs_config_field_t uct_crypt_global_config_table[] = {
    {"ENABLE", "y",
     "Encrypt network traffic. With 'n' the shim stays out of the way and says\n"
     "so in the log: traffic is then NOT encrypted.",
     ucs_offsetof(uct_crypt_global_config_t, enable), UCS_CONFIG_TYPE_BOOL},

    {"TLS", "",
     "Inner network transports that crypt encrypts over, e.g. tcp or rc.\n"
     "Empty: the network transports named in UCX_TLS beside 'crypt', or every\n"
     "network transport if there are none.",
     ucs_offsetof(uct_crypt_global_config_t, tls), UCS_CONFIG_TYPE_STRING},

    {"KEY_FILE", "",
     "Job secret: a file of 32 random bytes, mode 0600, made by ucx-crypt-keygen.\n"
     "Without one, peers are not authenticated (passive-adversary security only).",
     ucs_offsetof(uct_crypt_global_config_t, key_file), UCS_CONFIG_TYPE_STRING},

    {"KEY_BITS", "128",
     "AES key size of the GCM records: 128 or 256.",
     ucs_offsetof(uct_crypt_global_config_t, key_bits), UCS_CONFIG_TYPE_UINT},

    {"BACKEND", "auto",
     "AES-GCM implementation: auto (ipsec-mb if built in), ipsec-mb, openssl.",
     ucs_offsetof(uct_crypt_global_config_t, backend), UCS_CONFIG_TYPE_STRING},

    {"STATS", "n",
     "Print the record counters (sealed, opened, failures by reason) at exit.",
     ucs_offsetof(uct_crypt_global_config_t, stats), UCS_CONFIG_TYPE_BOOL},

    {"REKEY_RECORDS", "0",
     "Update a flow's key after this many records, and its bulk key after\n"
     "this many bulk segments, at the next put (0: the limits of\n"
     "src/keyex/keyex.h). Lower values are for testing key updates.",
     ucs_offsetof(uct_crypt_global_config_t, rekey_records), UCS_CONFIG_TYPE_ULONG},

    {"COLL_NODES", "",
     "Collectives (MPI adapter): emulate nodes on one machine, N, N:block or\n"
     "N:cyclic. Empty: the MPI library's shared-memory split.",
     ucs_offsetof(uct_crypt_global_config_t, coll_nodes), UCS_CONFIG_TYPE_STRING},

    {"COLL_TUNE", "",
     "Collectives (MPI adapter): algorithm per size, UCC style:\n"
     "allgather:LO-HI:ALG[,...] with ALG in naive, o-ring, o-rd, o-rd2, c-ring,\n"
     "c-rd, hs1, hs2. Empty: the built-in score table.",
     ucs_offsetof(uct_crypt_global_config_t, coll_tune), UCS_CONFIG_TYPE_STRING},

    {"COLL_VERBOSE", "n",
     "Collectives (MPI adapter): print each call's algorithm and crypto counts.",
     ucs_offsetof(uct_crypt_global_config_t, coll_verbose), UCS_CONFIG_TYPE_BOOL},

    {"COLL_FAULT", "",
     "TESTING ONLY (MPI adapter): this rank forges its first frame to another node.",
     ucs_offsetof(uct_crypt_global_config_t, coll_fault), UCS_CONFIG_TYPE_STRING},

    {"COLL_LANE", "auto",
     "Where the MPI adapter sends collective frames between nodes: 'auto' on the\n"
     "collective lane (the network transport under crypt, frames not sealed a\n"
     "second time; src/ucp_crypt/coll/crypt_lane.h) where every rank has one,\n"
     "'transport' through the MPI library (sealed again by crypt).",
     ucs_offsetof(uct_crypt_global_config_t, coll_lane), UCS_CONFIG_TYPE_STRING},

    {NULL}
};

static ucs_config_field_t uct_crypt_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_crypt_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"", "", NULL, ucs_offsetof(uct_crypt_md_config_t, global),
     UCS_CONFIG_TYPE_TABLE(uct_crypt_global_config_table)},

    {NULL}
};

/* ---- statistics ---------------------------------------------------------- */

uct_crypt_stats_t uct_crypt_process_stats;

void uct_crypt_stats_read(uct_crypt_stats_t *stats)
{
    uint64_t *dst = (uint64_t*)stats;
    uint64_t *src = (uint64_t*)&uct_crypt_process_stats;
    size_t i;

    for (i = 0; i < sizeof(*stats) / sizeof(uint64_t); ++i) {
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
}

const char *uct_crypt_fail_reason_name(uct_crypt_fail_reason_t reason)
{
    static const char *names[] = {
        [UCT_CRYPT_FAIL_AUTH]         = "authentication failed",
        [UCT_CRYPT_FAIL_REPLAY]       = "replayed record",
        [UCT_CRYPT_FAIL_REORDER]      = "reordered or dropped record",
        [UCT_CRYPT_FAIL_UNKNOWN_FLOW] = "record of an unknown flow",
        [UCT_CRYPT_FAIL_MALFORMED]    = "malformed record",
        [UCT_CRYPT_FAIL_HANDSHAKE]    = "handshake refused",
        [UCT_CRYPT_FAIL_FLOW_FAILED]  = "record on a failed flow",
        [UCT_CRYPT_FAIL_BULK_ORDER]   = "bulk segment out of order"
    };
    return (reason < UCT_CRYPT_FAIL_LAST) ? names[reason] : "unknown";
}

static void uct_crypt_stats_print(void)
{
    UCS_STRING_BUFFER_ONSTACK(line, 512);
    uct_crypt_stats_t s;
    int i;

    uct_crypt_stats_read(&s);
    ucs_string_buffer_appendf(&line, "[ucx-crypt pid %d] records sealed %"
                              PRIu64 " (%" PRIu64 " bytes), opened %" PRIu64
                              " (%" PRIu64 " bytes), key updates %" PRIu64
                              ", bulk bytes sealed %" PRIu64 " opened %" PRIu64
                              ", bulk key updates %" PRIu64
                              ", bulk gets served %" PRIu64,
                              getpid(), s.records_sealed, s.bytes_sealed,
                              s.records_opened, s.bytes_opened, s.rekeys,
                              s.bulk_bytes_sealed, s.bulk_bytes_opened,
                              s.bulk_rekeys, s.bulk_gets_served);
    for (i = 0; i < UCT_CRYPT_FAIL_LAST; ++i) {
        ucs_string_buffer_appendf(&line, ", %s %" PRIu64,
                                  uct_crypt_fail_reason_name(
                                          (uct_crypt_fail_reason_t)i),
                                  s.failures[i]);
    }
    ucs_string_buffer_appendf(&line, "\n");
    /* one write: ranks of one job share stderr, lines must not interleave */
    if (write(STDERR_FILENO, ucs_string_buffer_cstr(&line),
              ucs_string_buffer_length(&line)) < 0) {
        /* nothing sensible left to do at exit */
    }
}

/* ---- process-wide init: job secret, backend ------------------------------ */

static ucs_status_t uct_crypt_global_status = UCS_ERR_NO_ELEM;
static pthread_once_t uct_crypt_global_once = PTHREAD_ONCE_INIT;

static void uct_crypt_global_init_once(void)
{
    char error[KEYEX_ERROR_MAX];
    crypt_aead_backend_t backend;

    backend = crypt_aead_backend_from_name(uct_crypt_global.backend);
    if (backend == CRYPT_AEAD_BACKEND_LAST) {
        ucs_error("crypt: UCX_CRYPT_BACKEND=%s is not one of auto, ipsec-mb, "
                  "openssl", uct_crypt_global.backend);
        uct_crypt_global_status = UCS_ERR_INVALID_PARAM;
        return;
    }
    if (crypt_aead_init(backend) != CRYPT_AEAD_OK) {
        ucs_error("crypt: AES-GCM backend '%s' is not available in this build "
                  "(set UCX_CRYPT_BACKEND=openssl)", uct_crypt_global.backend);
        uct_crypt_global_status = UCS_ERR_UNSUPPORTED;
        return;
    }
    if ((uct_crypt_global.key_bits != 128) && (uct_crypt_global.key_bits != 256)) {
        ucs_error("crypt: UCX_CRYPT_KEY_BITS=%u: use 128 or 256",
                  uct_crypt_global.key_bits);
        uct_crypt_global_status = UCS_ERR_INVALID_PARAM;
        return;
    }

    if (uct_crypt_global.key_file[0] == '\0') {
        ucs_warn("crypt: UCX_CRYPT_KEY_FILE is not set: traffic is encrypted "
                 "but peers are not authenticated (an active attacker can "
                 "impersonate them); create a job secret with ucx-crypt-keygen");
    } else {
        uct_crypt_job_secret = keyex_secure_alloc(KEYEX_JOB_SECRET_LEN);
        if (uct_crypt_job_secret == NULL) {
            uct_crypt_global_status = UCS_ERR_NO_MEMORY;
            return;
        }
        if (keyex_job_secret_load(uct_crypt_global.key_file,
                                  uct_crypt_job_secret, error,
                                  sizeof(error)) != KEYEX_OK) {
            ucs_error("crypt: %s", error);
            keyex_secure_free(uct_crypt_job_secret, KEYEX_JOB_SECRET_LEN);
            uct_crypt_job_secret    = NULL;
            uct_crypt_global_status = UCS_ERR_INVALID_PARAM;
            return;
        }
    }

    ucs_debug("crypt: AES-%u-GCM on %s (%s), job secret %s",
              uct_crypt_global.key_bits, crypt_aead_backend_name(
                      crypt_aead_backend_resolve(backend)),
              crypt_aead_backend_arch(backend),
              uct_crypt_job_secret ? "loaded" : "absent");
    uct_crypt_global_status = UCS_OK;
}

ucs_status_t uct_crypt_global_init(void)
{
    pthread_once(&uct_crypt_global_once, uct_crypt_global_init_once);
    return uct_crypt_global_status;
}

/* ---- inner transport selection ------------------------------------------- */

static void uct_crypt_strcat(char *dst, const char *src, size_t max)
{
    size_t len = strlen(dst);

    if (len + 1 < max) {
        ucs_strncpy_zero(dst + len, src, max - len);
    }
}

static int uct_crypt_word_in(const char *word, const char **list)
{
    for (; *list != NULL; ++list) {
        if (!strcmp(word, *list)) {
            return 1;
        }
    }
    return 0;
}

/* A UCX_TLS word without its strict-name '\\' and ":aux" decorations. */
static void uct_crypt_tl_base_name(const char *word, char *name, size_t max)
{
    ucs_strncpy_zero(name, word + (word[0] == '\\'), max);
    name[strcspn(name, ":")] = '\0';
}

/* The inner tl names, comma separated, into `out`. */
static void uct_crypt_inner_tls(char *out, size_t max)
{
    const char *source = uct_crypt_global.tls;
    char *copy, *word, *save = NULL;
    const char *env;
    int i;

    out[0] = '\0';
    if (source[0] == '\0') {
        env    = getenv("UCX_TLS");
        source = ((env != NULL) && (env[0] != '^')) ? env : "";
    }

    copy = strdup(source);
    if (copy == NULL) {
        return;
    }
    for (word = strtok_r(copy, ",", &save); word != NULL;
         word = strtok_r(NULL, ",", &save)) {
        char name[64];
        const char *tls;

        uct_crypt_tl_base_name(word, name, sizeof(name));
        if (uct_crypt_word_in(name, uct_crypt_not_inner_tls)) {
            continue;
        }
        tls = name;
        for (i = 0; uct_crypt_tl_aliases[i].alias != NULL; ++i) {
            if (!strcmp(name, uct_crypt_tl_aliases[i].alias)) {
                tls = uct_crypt_tl_aliases[i].tls;
                break;
            }
        }
        uct_crypt_strcat(out, ",", max);
        uct_crypt_strcat(out, tls, max);
    }
    free(copy);
}

/* Is `tl_name` in the comma-led list `list` (",a,b")? */
static int uct_crypt_tl_in_list(const char *list, const char *tl_name)
{
    char pattern[UCT_TL_NAME_MAX + 2];

    ucs_snprintf_zero(pattern, sizeof(pattern), ",%s", tl_name);
    for (const char *p = strstr(list, pattern); p != NULL;
         p = strstr(p + 1, pattern)) {
        char next = p[strlen(pattern)];
        if ((next == ',') || (next == '\0')) {
            return 1;
        }
    }
    return 0;
}

static int uct_crypt_tl_selected(const char *selected, const char *tl_name)
{
    /* nothing named: every network transport */
    return (selected[0] == '\0') || uct_crypt_tl_in_list(selected, tl_name);
}

static void uct_crypt_md_name(char *name, const char *inner_md, const char *tl)
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
    char selected[512], *word, *save = NULL, seen[512] = "";
    uct_component_attr_t cattr;
    uct_tl_resource_desc_t *tl_rscs;
    unsigned c, m, t, num_tl_rscs;
    uct_md_config_t *md_config;
    uct_md_h md;
    int stop = 0;

    uct_crypt_inner_tls(selected, sizeof(selected));
    for (c = 0; (c < uct_crypt_num_inner_components) && !stop; ++c) {
        uct_component_h component = uct_crypt_inner_components[c];

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
                    if ((tl_rscs[t].dev_type != UCT_DEVICE_TYPE_NET) ||
                        !uct_crypt_tl_selected(selected, tl)) {
                        continue;
                    }
                    uct_crypt_strcat(seen, ",", sizeof(seen));
                    uct_crypt_strcat(seen, tl, sizeof(seen));
                    /* one call per (md, tl): skip other devices of the tl */
                    if ((t > 0) && !strcmp(tl, tl_rscs[t - 1].tl_name)) {
                        continue;
                    }
                    stop = cb(arg, component, md_name, tl);
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
            if (!uct_crypt_tl_in_list(seen, word)) {
                uct_crypt_strcat(unmatched, " ", unmatched_max);
                uct_crypt_strcat(unmatched, word, unmatched_max);
            }
        }
    }
}

/* ---- component: md resources --------------------------------------------- */

typedef struct {
    uct_md_resource_desc_t *resources;
    unsigned               count;
} uct_crypt_resource_list_t;

static int uct_crypt_add_resource(void *arg, uct_component_h component,
                                  const char *md_name, const char *tl_name)
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

/* ---- md ------------------------------------------------------------------ */

static void uct_crypt_md_close(uct_md_h tl_md)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);

    uct_md_close(md->inner_md);
    pthread_mutex_destroy(&md->regions_lock);
    ucs_free(md);
}

static ucs_status_t uct_crypt_md_query(uct_md_h tl_md, uct_md_attr_t *attr)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    ucs_status_t status;

    status = uct_md_query(md->inner_md, attr);
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
    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY |
                                 (attr->cap.flags & UCT_MD_FLAG_NEED_MEMH);
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.detect_mem_types = 0;
    attr->cap.max_alloc        = 0;
    attr->rkey_packed_size    += UCT_COMPONENT_NAME_MAX;
    return UCS_OK;
}

static ucs_status_t uct_crypt_mem_reg(uct_md_h tl_md, void *address,
                                      size_t length, unsigned flags,
                                      uct_mem_h *memh_p)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    uct_crypt_memh_t *memh;
    ucs_status_t status;

    memh = ucs_malloc(sizeof(*memh), "crypt memh");
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memh->inner   = UCT_MEM_HANDLE_NULL;
    memh->address = (uintptr_t)address;
    memh->length  = length;
    if (md->inner_reg) {
        status = uct_md_mem_reg(md->inner_md, address, length, flags,
                                &memh->inner);
        if (status != UCS_OK) {
            ucs_free(memh);
            return status;
        }
    }
    pthread_mutex_lock(&md->regions_lock);
    ucs_list_add_tail(&md->regions, &memh->list);
    pthread_mutex_unlock(&md->regions_lock);
    *memh_p = memh;
    return UCS_OK;
}

int uct_crypt_md_registered(uct_crypt_md_t *md, uint64_t address, uint64_t length)
{
    uct_crypt_memh_t *memh;
    int found = 0;

    if (address + length < address) {
        return 0; /* wraps around */
    }
    pthread_mutex_lock(&md->regions_lock);
    ucs_list_for_each(memh, &md->regions, list) {
        if ((address >= memh->address) &&
            (address + length <= memh->address + memh->length)) {
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&md->regions_lock);
    return found;
}

static ucs_status_t uct_crypt_mem_dereg(uct_md_h tl_md,
                                        const uct_md_mem_dereg_params_t *params)
{
    uct_crypt_md_t *md     = ucs_derived_of(tl_md, uct_crypt_md_t);
    uct_crypt_memh_t *memh = params->memh;
    ucs_status_t status    = UCS_OK;

    pthread_mutex_lock(&md->regions_lock);
    ucs_list_del(&memh->list);
    pthread_mutex_unlock(&md->regions_lock);
    if (memh->inner != UCT_MEM_HANDLE_NULL) {
        status = uct_md_mem_dereg(md->inner_md, memh->inner);
    }
    ucs_free(memh);
    return status;
}

/* The packed remote key: the inner component's name, then the inner's key
 * (none where the inner needs none, or for a get's unregistered buffer on
 * such an inner: memh may be NULL there) */
ucs_status_t uct_crypt_md_pack_rkey(uct_crypt_md_t *md, uct_crypt_memh_t *memh,
                                    void *rkey_buffer)
{
    uct_component_attr_t attr;

    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    uct_component_query(md->inner_component, &attr);
    memset(rkey_buffer, 0, UCT_COMPONENT_NAME_MAX);
    ucs_strncpy_zero(rkey_buffer, attr.name, UCT_COMPONENT_NAME_MAX);
    if ((memh == NULL) || (memh->inner == UCT_MEM_HANDLE_NULL)) {
        return UCS_OK; /* the inner needs no key (tcp) */
    }
    return uct_md_mkey_pack(md->inner_md, memh->inner,
                            UCS_PTR_BYTE_OFFSET(rkey_buffer,
                                                UCT_COMPONENT_NAME_MAX));
}

static ucs_status_t uct_crypt_mkey_pack(uct_md_h tl_md, uct_mem_h tl_memh,
                                        const uct_md_mkey_pack_params_t *params,
                                        void *rkey_buffer)
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
    .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
    .detect_memory_type     = ucs_empty_function_return_unsupported
};

typedef struct {
    const char     *wanted;
    uct_crypt_md_t *md;
    ucs_status_t   status;
} uct_crypt_md_open_arg_t;

static int uct_crypt_md_open_inner(void *arg, uct_component_h component,
                                   const char *md_name, const char *tl_name)
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
    ucs_strncpy_zero(open_arg->md->inner_tl, tl_name,
                     sizeof(open_arg->md->inner_tl));
    return 1;
}

static ucs_status_t uct_crypt_md_open(uct_component_t *component,
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
    ucs_list_head_init(&md->regions);

    arg.wanted = md_name;
    arg.md     = md;
    arg.status = UCS_ERR_NO_DEVICE;
    uct_crypt_foreach_inner(uct_crypt_md_open_inner, &arg, NULL, 0);
    if (arg.status != UCS_OK) {
        ucs_error("crypt: cannot open inner memory domain for '%s': %s",
                  md_name, ucs_status_string(arg.status));
        pthread_mutex_destroy(&md->regions_lock);
        ucs_free(md);
        return arg.status;
    }

    *md_p = &md->super;
    return UCS_OK;
}

/* ---- tl devices ----------------------------------------------------------- */

ucs_status_t
uct_crypt_query_tl_devices(uct_md_h tl_md, uct_tl_device_resource_t **devices_p,
                           unsigned *num_devices_p)
{
    uct_crypt_md_t *md = ucs_derived_of(tl_md, uct_crypt_md_t);
    uct_tl_device_resource_t *devices;
    uct_tl_resource_desc_t *rscs;
    unsigned i, num_rscs, count = 0;
    ucs_status_t status;

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

/* The rkey names the inner component: unpack with it, keep the bundle. */
static ucs_status_t uct_crypt_rkey_unpack(uct_component_t *component,
                                          const void *rkey_buffer,
                                          uct_rkey_t *rkey_p, void **handle_p)
{
    char name[UCT_COMPONENT_NAME_MAX + 1];
    uct_crypt_rkey_t *rkey;
    uct_component_attr_t attr;
    ucs_status_t status;
    unsigned i;

    ucs_strncpy_zero(name, rkey_buffer, sizeof(name));
    for (i = 0; i < uct_crypt_num_inner_components; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        uct_component_query(uct_crypt_inner_components[i], &attr);
        if (!strcmp(attr.name, name)) {
            break;
        }
    }
    if (i == uct_crypt_num_inner_components) {
        ucs_error("crypt: remote key for unknown inner component '%s'", name);
        return UCS_ERR_INVALID_PARAM;
    }

    rkey = ucs_malloc(sizeof(*rkey), "crypt rkey");
    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    rkey->component = uct_crypt_inner_components[i];
    status = uct_rkey_unpack(rkey->component,
                             UCS_PTR_BYTE_OFFSET(rkey_buffer,
                                                 UCT_COMPONENT_NAME_MAX),
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
    ucs_status_t status;

    status = uct_rkey_release(rkey->component, &rkey->inner);
    ucs_free(rkey);
    return status;
}

uct_component_t uct_crypt_component = {
    .query_md_resources = uct_crypt_query_md_resources,
    .md_open            = uct_crypt_md_open,
    .cm_open            = ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_crypt_rkey_unpack,
    .rkey_ptr           = ucs_empty_function_return_unsupported,
    .rkey_release       = uct_crypt_rkey_release,
    .name               = UCT_CRYPT_NAME,
    .md_config          = {
        .name           = "Crypt memory domain",
        .prefix         = UCT_CRYPT_CONFIG_PREFIX,
        .table          = uct_crypt_md_config_table,
        .size           = sizeof(uct_crypt_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_crypt_component),
    .flags              = 0,
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
    if ((major != UCP_API_MAJOR) || (minor != UCP_API_MINOR)) {
        fprintf(stderr, "ucx-crypt: FATAL: built for UCX %s but running with "
                "UCX %u.%u.%u: rebuild ucx-crypt against this UCX (configure "
                "--with-ucx/--with-ucx-src) or run with the UCX it was built "
                "for\n", UCX_CRYPT_BUILT_FOR_UCX, major, minor, release);
        _exit(1);
    }
}

static void uct_crypt_hide_network_components(void)
{
    uct_component_h *components, component, tmp;
    unsigned num_components;

    /* Loads UCX's own modules (ib, rdmacm, cma) now, so that their
     * components are on the list before we take network ones off. Safe from
     * a preloaded library's constructor on 1.13 (no module-loading lock is
     * held here). */
    if (uct_query_components(&components, &num_components) == UCS_OK) {
        uct_release_component_list(components);
    }

    ucs_list_for_each_safe(component, tmp, &uct_components_list, list) {
        if (uct_crypt_word_in(component->name, uct_crypt_intra_node_components) ||
            (uct_crypt_num_inner_components ==
             ucs_static_array_size(uct_crypt_inner_components))) {
            continue;
        }
        ucs_list_del(&component->list);
        uct_crypt_inner_components[uct_crypt_num_inner_components++] = component;
    }
}

/*
 * UCX_TLS=crypt,tcp is the user's syntax: 'tcp' there names the wire crypt
 * encrypts over. UCP would find no tl named tcp (we hide it) and warn, so
 * hand those names to UCX_CRYPT_TLS (unless it is set) and leave UCP only
 * the names it can resolve. Runs before UCP reads its configuration.
 */
static void uct_crypt_take_inner_from_ucx_tls(void)
{
    char *copy, *word, *save = NULL, keep[512] = "", inner[512] = "";
    const char *env = getenv("UCX_TLS");
    int has_crypt   = 0;

    if ((env == NULL) || (env[0] == '^')) {
        return;
    }
    copy = strdup(env);
    if (copy == NULL) {
        return;
    }
    for (word = strtok_r(copy, ",", &save); word != NULL;
         word = strtok_r(NULL, ",", &save)) {
        char name[64];

        uct_crypt_tl_base_name(word, name, sizeof(name));
        has_crypt |= !strcmp(name, UCT_CRYPT_NAME);
        if (uct_crypt_word_in(name, uct_crypt_not_inner_tls)) {
            uct_crypt_strcat(keep, keep[0] ? "," : "", sizeof(keep));
            uct_crypt_strcat(keep, word, sizeof(keep));
        } else {
            uct_crypt_strcat(inner, inner[0] ? "," : "", sizeof(inner));
            uct_crypt_strcat(inner, name, sizeof(inner));
        }
    }
    free(copy);

    if (has_crypt && (inner[0] != '\0')) {
        setenv("UCX_CRYPT_TLS", inner, 0);
        setenv("UCX_TLS", keep, 1);
    }
}

static void uct_crypt_read_config(void)
{
    ucs_status_t status;

    status = ucs_config_parser_fill_opts(&uct_crypt_global,
                                         uct_crypt_global_config_table, "UCX_",
                                         UCT_CRYPT_CONFIG_PREFIX, 0);
    if (status != UCS_OK) {
        fprintf(stderr, "ucx-crypt: FATAL: invalid UCX_CRYPT_* setting (%s); "
                "'ucx_info -c -f' documents them\n", ucs_status_string(status));
        _exit(1);
    }
}

static void UCS_F_CTOR uct_crypt_init(void)
{
    uct_crypt_read_config();
    if (!uct_crypt_global.enable) {
        ucs_warn("crypt: disabled by UCX_CRYPT_ENABLE=n: network traffic is "
                 "NOT encrypted");
        return;
    }

    /* may set UCX_CRYPT_TLS: read the configuration again */
    uct_crypt_take_inner_from_ucx_tls();
    ucs_config_parser_release_opts(&uct_crypt_global,
                                   uct_crypt_global_config_table);
    uct_crypt_read_config();

    uct_crypt_check_ucx_version();
    uct_crypt_hide_network_components();
    uct_tl_register(&uct_crypt_component, &uct_crypt_tl);
    uct_component_register(&uct_crypt_component);
    uct_crypt_registered = 1;
    if (uct_crypt_global.stats) {
        atexit(uct_crypt_stats_print);
    }
}

static void UCS_F_DTOR uct_crypt_cleanup(void)
{
    unsigned i;

    if (uct_crypt_registered) {
        uct_component_unregister(&uct_crypt_component);
        for (i = 0; i < uct_crypt_num_inner_components; ++i) {
            ucs_list_add_tail(&uct_components_list,
                              &uct_crypt_inner_components[i]->list);
        }
    }
    if (uct_crypt_job_secret != NULL) {
        keyex_secure_free(uct_crypt_job_secret, KEYEX_JOB_SECRET_LEN);
        uct_crypt_job_secret = NULL;
    }
    ucs_config_parser_release_opts(&uct_crypt_global,
                                   uct_crypt_global_config_table);
}
