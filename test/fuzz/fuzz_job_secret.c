/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The job secret file (keyex_job_secret_load): whatever a file holds, an
 * answer; only a file of exactly 32 bytes loads, and then to its bytes.
 */
#include "ucx_crypt_config.h"
#include "keyex/keyex.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/ucx-crypt-fuzz-secret.XXXXXX", error[KEYEX_ERROR_MAX];
    uint8_t secret[KEYEX_JOB_SECRET_LEN];
    keyex_status_t status;
    int fd = mkstemp(path); /* mode 0600, ours */

    if (fd < 0) {
        abort();
    }
    if ((size > 0) && (write(fd, data, size) != (ssize_t)size)) {
        abort();
    }
    close(fd);
    status = keyex_job_secret_load(path, secret, error, sizeof(error));
    unlink(path);
    if ((status == KEYEX_OK) !=
        ((size == KEYEX_JOB_SECRET_LEN) && !memcmp(secret, data, size))) {
        abort();
    }
    if ((status != KEYEX_OK) && (memchr(error, '\0', sizeof(error)) == NULL)) {
        abort(); /* the message is a string */
    }
    return 0;
}
