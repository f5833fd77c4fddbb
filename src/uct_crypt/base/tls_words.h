/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The words of UCX_TLS and UCX_CRYPT_TLS, without UCX: which name a network
 * transport crypt encrypts over, in which role (data, or auxiliary: the
 * connect-to-iface transport UCP needs to wire up connect-to-ep ones such
 * as rc, as UCX's own "rc" alias adds ud as ":aux"), and the UCX_TLS and
 * UCX_CRYPT_TLS a program runs with when UCX_TLS names crypt. The plugin
 * (uct_crypt_inner.c) and the launcher's helper (contrib/site/
 * ucx-crypt-tls.c, for ucx-crypt-run) share this, so both read the words
 * alike.
 */
#ifndef UCT_CRYPT_TLS_WORDS_H
#define UCT_CRYPT_TLS_WORDS_H

#include <stddef.h>

#define UCT_CRYPT_TLS_NAME     "crypt"
#define UCT_CRYPT_TLS_AUX_NAME "crypt_aux"
#define UCT_CRYPT_TLS_MAX      512   /* the longest list taken */

/* dst += src, cut at max - 1 characters */
void uct_crypt_tls_strcat(char *dst, const char *src, size_t max);

/* Is `word` one of the NULL-ended `list`? */
int uct_crypt_tls_word_in(const char *word, const char **list);

/* Is `tl_name` in the comma-led list `list` (",a,b")? */
int uct_crypt_tls_in_list(const char *list, const char *tl_name);

/* The inner tl names of each role in `source` (UCX_CRYPT_TLS, or UCX_TLS
 * where that is unset; a "^" exclusion names none), comma-led (",a,b"),
 * into `data` and `aux`: aliases expanded ("rc" is rc_mlx5,rc_verbs with
 * ud_mlx5,ud_verbs as auxiliaries), a word with ":aux" for the auxiliary
 * role only; words of intra-node transports and of crypt skipped. */
void uct_crypt_tls_roles(const char *source, char *data, char *aux, size_t max);

/* What a program runs with, from the user's UCX_TLS and UCX_CRYPT_TLS
 * (either NULL when unset): when UCX_TLS names crypt, the network names
 * beside it (UCX_TLS=crypt,tcp is the user's syntax: 'tcp' there names the
 * wire crypt encrypts over) go to UCX_CRYPT_TLS unless that is set, and
 * UCX_TLS keeps what UCP resolves itself; "crypt_aux:aux" is added when
 * an inner needs an auxiliary (or `need_aux`) and UCX_TLS does not name
 * crypt_aux already. Otherwise nothing changes. */
typedef struct uct_crypt_tls_env {
    char ucx_tls[UCT_CRYPT_TLS_MAX + 32];
    char crypt_tls[UCT_CRYPT_TLS_MAX];
    int  set_ucx_tls, set_crypt_tls;    /* the values above are new */
} uct_crypt_tls_env_t;

void uct_crypt_tls_env(const char *ucx_tls, const char *crypt_tls, int need_aux,
                       uct_crypt_tls_env_t *env);

#endif
