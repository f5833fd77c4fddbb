/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory for secrets: its own pages, excluded from core dumps
 * (MADV_DONTDUMP), kept out of swap where RLIMIT_MEMLOCK allows (mlock),
 * and wiped before it is returned (OPENSSL_cleanse, which the compiler may
 * not elide). The lowest layer has it, so that the backends' expanded key
 * schedules live there as well as every key keyex derives.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "aead.h"

#include <openssl/crypto.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t crypt_secure_round(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    return (size + page - 1) & ~(page - 1);
}

void *crypt_secure_alloc(size_t size)
{
    size_t length = crypt_secure_round(size ? size : 1);
    void *ptr;

    ptr = mmap(NULL, length, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
        return NULL;
    }
#ifdef MADV_DONTDUMP
    (void)madvise(ptr, length, MADV_DONTDUMP);
#endif
    /* Best effort: an unprivileged process may have a small memlock limit,
     * and failing to lock must not stop the job. */
    (void)mlock(ptr, length);
    return ptr; /* anonymous pages are zero-filled */
}

void crypt_secure_free(void *ptr, size_t size)
{
    size_t length = crypt_secure_round(size ? size : 1);

    if (ptr == NULL) {
        return;
    }
    OPENSSL_cleanse(ptr, length);
    (void)munlock(ptr, length);
    (void)munmap(ptr, length);
}
