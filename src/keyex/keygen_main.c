/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx-crypt-keygen FILE: create a job secret for UCX_CRYPT_KEY_FILE.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "keyex.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    char error[KEYEX_ERROR_MAX];

    if ((argc != 2) || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(stderr,
                "usage: %s FILE\n"
                "Create FILE (mode 0600) holding a new 256-bit job secret.\n"
                "Give every process of the job the same file through\n"
                "UCX_CRYPT_KEY_FILE=FILE; a new file per job is best.\n",
                argv[0]);
        return (argc == 2) ? 0 : 2;
    }

    if (keyex_job_secret_generate(argv[1], error, sizeof(error)) != KEYEX_OK) {
        fprintf(stderr, "ucx-crypt-keygen: %s\n", error);
        return 1;
    }
    return 0;
}
