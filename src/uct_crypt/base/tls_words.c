/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The words of UCX_TLS and UCX_CRYPT_TLS (base/tls_words.h). libc only:
 * the launcher's helper links it without UCX.
 */
#include "uct_crypt/base/tls_words.h"

#include <stdlib.h>
#include <string.h>

/* UCX_TLS words that name intra-node transports or are not transports:
 * UCP's aliases of intra-node transports (ucp_context.c, ucp_tl_aliases:
 * mm, sm, shm, cuda, rocm) and every member they stand for */
static const char *uct_crypt_not_inner_tls[] = {
    UCT_CRYPT_TLS_NAME, UCT_CRYPT_TLS_AUX_NAME, "self", "mm", "sm", "shm",
    "posix", "sysv", "cma", "knem", "xpmem", "cuda", "cuda_copy", "cuda_ipc",
    "gdr_copy", "rocm", "rocm_copy", "rocm_ipc", "rocm_gdr", "all", NULL
};

/* The aliases of ucp_context.c (1.13.1, ucp_tl_aliases) for networks: the
 * data transports, and the ones UCP's alias adds as ":aux". "ib" lists ud
 * as data already, but UCP closes an iface whose capabilities another one
 * on the device has (ucp_worker_iface_find_better), and every crypt data
 * iface has the same tl name: ud must come as crypt_aux to survive. */
static const struct {
    const char *alias;
    const char *tls;
    const char *aux;
} uct_crypt_tl_aliases[] = {
    {"rc",   "rc_mlx5,rc_verbs",                          "ud_mlx5,ud_verbs"},
    {"rc_x", "rc_mlx5",                                   "ud_mlx5"},
    {"rc_v", "rc_verbs",                                  "ud_verbs"},
    {"ud",   "ud_mlx5,ud_verbs",                          ""},
    {"ud_x", "ud_mlx5",                                   ""},
    {"ud_v", "ud_verbs",                                  ""},
    {"dc",   "dc_mlx5",                                   "ud_mlx5"},
    {"dc_x", "dc_mlx5",                                   "ud_mlx5"},
    {"ib",   "rc_mlx5,ud_mlx5,dc_mlx5,rc_verbs,ud_verbs", "ud_mlx5,ud_verbs"},
    {NULL,   NULL,                                        NULL}
};

void uct_crypt_tls_strcat(char *dst, const char *src, size_t max)
{
    size_t len = strlen(dst), n = strlen(src);

    if (len + 1 >= max) {
        return;
    }
    if (n > max - len - 1) {
        n = max - len - 1;
    }
    memcpy(dst + len, src, n);
    dst[len + n] = '\0';
}

int uct_crypt_tls_word_in(const char *word, const char **list)
{
    for (; *list != NULL; ++list) {
        if (!strcmp(word, *list)) {
            return 1;
        }
    }
    return 0;
}

/* A UCX_TLS word without its strict-name '\\' and ":aux" decorations. */
static void uct_crypt_tls_base_name(const char *word, char *name, size_t max)
{
    name[0] = '\0';
    uct_crypt_tls_strcat(name, word + (word[0] == '\\'), max);
    name[strcspn(name, ":")] = '\0';
}

int uct_crypt_tls_in_list(const char *list, const char *tl_name)
{
    size_t len = strlen(tl_name);
    const char *p;

    for (p = strchr(list, ','); p != NULL; p = strchr(p + 1, ',')) {
        if (!strncmp(p + 1, tl_name, len) &&
            ((p[1 + len] == ',') || (p[1 + len] == '\0'))) {
            return 1;
        }
    }
    return 0;
}

void uct_crypt_tls_roles(const char *source, char *data, char *aux, size_t max)
{
    char *copy, *word, *save = NULL;
    int i;

    data[0] = '\0';
    aux[0]  = '\0';
    if ((source == NULL) || (source[0] == '^') || ((copy = strdup(source)) == NULL)) {
        return;
    }
    for (word = strtok_r(copy, ",", &save); word != NULL;
         word = strtok_r(NULL, ",", &save)) {
        const char *tls, *aux_tls = "";
        char name[64];

        uct_crypt_tls_base_name(word, name, sizeof(name));
        if (uct_crypt_tls_word_in(name, uct_crypt_not_inner_tls)) {
            continue;
        }
        tls = name;
        for (i = 0; uct_crypt_tl_aliases[i].alias != NULL; ++i) {
            if (!strcmp(name, uct_crypt_tl_aliases[i].alias)) {
                tls     = uct_crypt_tl_aliases[i].tls;
                aux_tls = uct_crypt_tl_aliases[i].aux;
                break;
            }
        }
        if (!strcmp(word + strcspn(word, ":"), ":aux")) {
            aux_tls = tls; /* auxiliary only, as UCP reads "ud:aux" */
            tls     = "";
        }
        if (tls[0] != '\0') {
            uct_crypt_tls_strcat(data, ",", max);
            uct_crypt_tls_strcat(data, tls, max);
        }
        if (aux_tls[0] != '\0') {
            uct_crypt_tls_strcat(aux, ",", max);
            uct_crypt_tls_strcat(aux, aux_tls, max);
        }
    }
    free(copy);
}

void uct_crypt_tls_env(const char *ucx_tls, const char *crypt_tls, int need_aux,
                       uct_crypt_tls_env_t *env)
{
    char keep[UCT_CRYPT_TLS_MAX] = "", inner[UCT_CRYPT_TLS_MAX] = "";
    char data[UCT_CRYPT_TLS_MAX], aux[UCT_CRYPT_TLS_MAX];
    int has_crypt = 0, has_aux = 0;
    char *copy, *word, *save = NULL;

    memset(env, 0, sizeof(*env));
    if ((ucx_tls == NULL) || (ucx_tls[0] == '^') || (strlen(ucx_tls) >= UCT_CRYPT_TLS_MAX) ||
        ((copy = strdup(ucx_tls)) == NULL)) {
        return; /* every transport: nothing to move, nothing to add */
    }
    /* the words UCP resolves (`keep`, as given) and the network names
     * (`inner`, ":aux" kept) */
    for (word = strtok_r(copy, ",", &save); word != NULL;
         word = strtok_r(NULL, ",", &save)) {
        char name[64];

        uct_crypt_tls_base_name(word, name, sizeof(name));
        has_crypt |= !strcmp(name, UCT_CRYPT_TLS_NAME);
        has_aux   |= !strcmp(name, UCT_CRYPT_TLS_AUX_NAME);
        if (uct_crypt_tls_word_in(name, uct_crypt_not_inner_tls)) {
            uct_crypt_tls_strcat(keep, keep[0] ? "," : "", sizeof(keep));
            uct_crypt_tls_strcat(keep, word, sizeof(keep));
        } else {
            uct_crypt_tls_strcat(inner, inner[0] ? "," : "", sizeof(inner));
            uct_crypt_tls_strcat(inner, word + (word[0] == '\\'), sizeof(inner));
        }
    }
    free(copy);
    if (!has_crypt) {
        return;
    }

    uct_crypt_tls_strcat(env->ucx_tls, (inner[0] != '\0') ? keep : ucx_tls,
                         sizeof(env->ucx_tls));
    env->set_ucx_tls = (inner[0] != '\0');
    if ((crypt_tls != NULL) && (crypt_tls[0] != '\0')) {
        uct_crypt_tls_strcat(env->crypt_tls, crypt_tls, sizeof(env->crypt_tls));
    } else if (inner[0] != '\0') {
        uct_crypt_tls_strcat(env->crypt_tls, inner, sizeof(env->crypt_tls));
        env->set_crypt_tls = 1;
    }
    /* an inner that needs an auxiliary gets crypt's (UCP wires rc up
     * through an aux lane; without one it finds no way to connect) */
    uct_crypt_tls_roles((env->crypt_tls[0] != '\0') ? env->crypt_tls : ucx_tls,
                        data, aux, sizeof(data));
    if (!has_aux && (need_aux || (aux[0] != '\0'))) {
        uct_crypt_tls_strcat(env->ucx_tls, "," UCT_CRYPT_TLS_AUX_NAME ":aux",
                             sizeof(env->ucx_tls));
        env->set_ucx_tls = 1;
    }
}
