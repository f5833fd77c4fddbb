/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TESTING ONLY: fail the N-th local resource call of a process
 * (CRYPT_TEST_FAIL_CALL=N) or seal (CRYPT_TEST_FAIL_SEAL=N), or the next
 * call of one kind (crypt_fallible_fail_next), so that a test can show every caller fails
 * closed: no record leaves unsealed, the endpoint fails with the reason,
 * nothing hangs. Compiled only into test builds (--enable-fault-injection).
 *
 * Each call prints nothing; the failed one prints one line to stderr, the
 * kind and the site as OBJECT+OFFSET (addr2line turns it into a function),
 * and the process prints its count at exit, so that a sweep knows where to
 * stop and how many sites it reached. Every copy of this library linked
 * into a process (the plugin, an MPI adapter) counts on its own.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "aead.h"

#if UCX_CRYPT_FAULT_INJECTION

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *crypt_fallible_names[] = {
    [CRYPT_FALLIBLE_SECURE_MEMORY]  = "secure_memory",
    [CRYPT_FALLIBLE_CIPHER_CONTEXT] = "cipher_context",
    [CRYPT_FALLIBLE_RANDOM]         = "random",
    [CRYPT_FALLIBLE_KEY_DERIVATION] = "key_derivation",
    [CRYPT_FALLIBLE_SEAL]           = "seal"
};

/* Resource calls and seals are counted apart, each against its own N */
static unsigned long crypt_fallible_calls[2];
static long crypt_fallible_fail_at[2] = {-1, -1}; /* -1: not read yet */
static int crypt_fallible_next        = -1; /* a kind armed, or -1 */
static const char *crypt_fallible_vars[2] = {"CRYPT_TEST_FAIL_CALL",
                                             "CRYPT_TEST_FAIL_SEAL"};

static long crypt_fallible_target(int counter)
{
    long target = __atomic_load_n(&crypt_fallible_fail_at[counter],
                                  __ATOMIC_RELAXED);
    const char *value;

    if (target < 0) {
        /* 0 (or unset): count only */
        value  = getenv(crypt_fallible_vars[counter]);
        target = (value != NULL) ? strtol(value, NULL, 10) : 0;
        __atomic_store_n(&crypt_fallible_fail_at[counter], target,
                         __ATOMIC_RELAXED);
    }
    return target;
}

int crypt_fallible_fail(crypt_fallible_t kind, const void *site)
{
    int counter        = (kind == CRYPT_FALLIBLE_SEAL);
    unsigned long call = __atomic_add_fetch(&crypt_fallible_calls[counter], 1,
                                            __ATOMIC_RELAXED);
    const char *object = "?";
    int armed          = (int)kind;
    Dl_info info;

    if (((long)call != crypt_fallible_target(counter)) &&
        !__atomic_compare_exchange_n(&crypt_fallible_next, &armed, -1, 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        return 0;
    }
    memset(&info, 0, sizeof(info));
    if ((dladdr(site, &info) != 0) && (info.dli_fname != NULL)) {
        object = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 :
                                                info.dli_fname;
    }
    fprintf(stderr, "crypt: TESTING: failing %s %lu (%s) at %s+0x%lx\n",
            counter ? "seal" : "call", call, crypt_fallible_names[kind], object,
            (unsigned long)((const char*)site - (const char*)info.dli_fbase));
    return 1;
}

/* Exported from the shared object (a test finds it with dlsym): an
 * in-process test aims one failure at the path it drives, where counting
 * calls over the whole process could not */
__attribute__((visibility("default")))
void crypt_fallible_fail_next(crypt_fallible_t kind)
{
    __atomic_store_n(&crypt_fallible_next, (int)kind, __ATOMIC_RELAXED);
}

__attribute__((destructor)) static void crypt_fallible_report(void)
{
    if ((getenv("CRYPT_TEST_FAIL_CALL") != NULL) ||
        (getenv("CRYPT_TEST_FAIL_SEAL") != NULL)) {
        fprintf(stderr, "crypt: TESTING: %lu fallible calls, %lu seals\n",
                __atomic_load_n(&crypt_fallible_calls[0], __ATOMIC_RELAXED),
                __atomic_load_n(&crypt_fallible_calls[1], __ATOMIC_RELAXED));
    }
}

#endif
