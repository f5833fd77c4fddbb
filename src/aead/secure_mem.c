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
#include <openssl/rand.h>
#include <stdio.h>
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

    /* (each allocation is its own mapping: vm.max_map_count bounds them) */
    ptr = CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_SECURE_MEMORY) ? MAP_FAILED :
          mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
    if (ptr == MAP_FAILED) {
        crypt_local_failure_set("no memory for secrets (mmap failed: the "
                                "memory limit or vm.max_map_count)");
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

static __thread const char *crypt_local_failure_what;

const char *crypt_local_failure(void)
{
    return (crypt_local_failure_what != NULL) ? crypt_local_failure_what : "";
}

void crypt_local_failure_set(const char *what)
{
    crypt_local_failure_what = what;
}

const char *crypt_local_failure_take(void)
{
    static __thread char text[128];

    if (crypt_local_failure_what == NULL) {
        return "";
    }
    snprintf(text, sizeof(text), ": %s", crypt_local_failure_what);
    crypt_local_failure_what = NULL;
    return text;
}

static int crypt_random_done(int ok)
{
    if (!ok) {
        crypt_local_failure_set("the random generator failed");
    }
    return ok;
}

int crypt_random_public(void *buf, size_t len)
{
    return crypt_random_done(!CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_RANDOM) &&
                             (RAND_bytes(buf, (int)len) == 1));
}

int crypt_random_secret(void *buf, size_t len)
{
    return crypt_random_done(!CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_RANDOM) &&
                             (RAND_priv_bytes(buf, (int)len) == 1));
}

void crypt_wipe(void *buf, size_t len)
{
    OPENSSL_cleanse(buf, len);
}

int crypt_memcmp_ct(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len);
}
