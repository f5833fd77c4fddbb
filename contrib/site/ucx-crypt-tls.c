/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx-crypt-tls: the UCX_TLS and UCX_CRYPT_TLS a program runs with, from
 * the ones in the environment (src/uct_crypt/base/tls_words.h, which
 * the plugin reads them with too), for ucx-crypt-run to set before the
 * program starts: the launcher is the only writer of UCX_TLS, the plugin
 * only reads it. Prints a line "UCX_TLS=..." and/or "UCX_CRYPT_TLS=..."
 * for each that changes, nothing when neither does.
 */
#include "uct_crypt/base/tls_words.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* Test builds: crypt's data role emulates an inner that connects only
 * endpoint to endpoint (UCX_CRYPT_EMULATE_CONNECT_TO_EP, a UCX boolean),
 * which needs crypt_aux as rc does */
static int need_aux(void)
{
#if UCX_CRYPT_FAULT_INJECTION
    const char *value = getenv("UCX_CRYPT_EMULATE_CONNECT_TO_EP");

    return (value != NULL) &&
           (!strcasecmp(value, "y") || !strcasecmp(value, "yes") ||
            !strcasecmp(value, "on") || !strcasecmp(value, "1"));
#else
    return 0;
#endif
}

int main(int argc, char **argv)
{
    uct_crypt_tls_env_t env;

    if (argc != 1) {
        fprintf(stderr, "usage: %s (reads UCX_TLS and UCX_CRYPT_TLS)\n", argv[0]);
        return 2;
    }
    uct_crypt_tls_env(getenv("UCX_TLS"), getenv("UCX_CRYPT_TLS"), need_aux(), &env);
    if (env.set_ucx_tls) {
        printf("UCX_TLS=%s\n", env.ucx_tls);
    }
    if (env.set_crypt_tls) {
        printf("UCX_CRYPT_TLS=%s\n", env.crypt_tls);
    }
    return (fflush(stdout) == 0) ? 0 : 1;
}
