/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory for secrets: pages of its own (small secrets share them, a page
 * of chunks of one size), excluded from core dumps (MADV_DONTDUMP), kept
 * out of swap where RLIMIT_MEMLOCK allows (mlock), and wiped when freed
 * (OPENSSL_cleanse, which the compiler may not elide). The lowest layer
 * has it, so that the backends' expanded key schedules live there as well
 * as every key keyex derives.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "aead.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static const char crypt_secure_no_memory[] = "no memory for secrets (mmap "
                                             "failed: the memory limit or "
                                             "vm.max_map_count)";

static size_t crypt_secure_page(void)
{
    static size_t page; /* (the same in every thread that sets it) */
    size_t value = __atomic_load_n(&page, __ATOMIC_RELAXED);

    if (value == 0) {
        value = (size_t)sysconf(_SC_PAGESIZE);
        __atomic_store_n(&page, value, __ATOMIC_RELAXED);
    }
    return value;
}

static size_t crypt_secure_round(size_t size)
{
    size_t page = crypt_secure_page();

    return (size + page - 1) & ~(page - 1);
}

/* Pages of their own: not dumped, locked where the limit allows, zero */
static void *crypt_secure_map(size_t length)
{
    void *ptr = mmap(NULL, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (ptr == MAP_FAILED) {
        crypt_local_failure_set(crypt_secure_no_memory);
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

static void crypt_secure_unmap(void *ptr, size_t length)
{
    OPENSSL_cleanse(ptr, length);
    (void)munlock(ptr, length);
    (void)munmap(ptr, length);
}

/*
 * Small secrets share pages (a flow's traffic keys and its AES-GCM
 * schedule are 76 and 1008 bytes; a page each was 8 KiB locked a flow, up
 * to 1 GiB at UCX_CRYPT_RX_FLOWS). Chunks of 64 to 1024 bytes, powers of
 * two, so each is aligned to its size (ipsec-mb's gcm_key_data wants 64);
 * a page holds chunks of one size, its first chunk its header. A page
 * goes back to the kernel, wiped, when its last chunk is freed, so memory
 * follows what is in use. One lock: allocations come with flows and
 * handshakes, never per record.
 */
enum {
    CRYPT_SECURE_CHUNK_MIN_SHIFT = 6,  /* 64 bytes */
    CRYPT_SECURE_CHUNK_MAX_SHIFT = 10, /* 1024 bytes */
    CRYPT_SECURE_CLASSES = CRYPT_SECURE_CHUNK_MAX_SHIFT -
                           CRYPT_SECURE_CHUNK_MIN_SHIFT + 1
};

typedef struct crypt_secure_slab crypt_secure_slab_t;
struct crypt_secure_slab {
    crypt_secure_slab_t *prev, *next; /* pages of its size with a free chunk */
    void                *free;        /* its free chunks, linked through
                                         their first bytes */
    unsigned            used;
    unsigned            shift;
};

static crypt_secure_slab_t *crypt_secure_partial[CRYPT_SECURE_CLASSES];
static pthread_mutex_t crypt_secure_lock = PTHREAD_MUTEX_INITIALIZER;

/* the chunk size for `size`, as a shift; 0 where it gets pages of its own */
static unsigned crypt_secure_shift(size_t size)
{
    unsigned shift = CRYPT_SECURE_CHUNK_MIN_SHIFT;

    if ((size > ((size_t)1 << CRYPT_SECURE_CHUNK_MAX_SHIFT)) ||
        (crypt_secure_page() < ((size_t)2 << CRYPT_SECURE_CHUNK_MAX_SHIFT))) {
        return 0;
    }
    while (((size_t)1 << shift) < size) {
        ++shift;
    }
    return shift;
}

/* the pages of chunks of 2^shift bytes that have a free one */
static crypt_secure_slab_t **crypt_secure_partial_of(unsigned shift)
{
    return &crypt_secure_partial[shift - CRYPT_SECURE_CHUNK_MIN_SHIFT];
}

static void crypt_secure_slab_unlink(crypt_secure_slab_t *slab)
{
    crypt_secure_slab_t **head = crypt_secure_partial_of(slab->shift);

    if (slab->prev != NULL) {
        slab->prev->next = slab->next;
    } else {
        *head = slab->next;
    }
    if (slab->next != NULL) {
        slab->next->prev = slab->prev;
    }
    slab->prev = slab->next = NULL;
}

static void crypt_secure_slab_link(crypt_secure_slab_t *slab)
{
    crypt_secure_slab_t **head = crypt_secure_partial_of(slab->shift);

    slab->prev = NULL;
    slab->next = *head;
    if (*head != NULL) {
        (*head)->prev = slab;
    }
    *head = slab;
}

/* A new page of chunks of 2^shift bytes, its first the header (locked) */
static crypt_secure_slab_t *crypt_secure_slab_new(unsigned shift)
{
    size_t page = crypt_secure_page(), chunk = (size_t)1 << shift;
    crypt_secure_slab_t *slab = crypt_secure_map(page);
    size_t offset;

    if (slab == NULL) {
        return NULL;
    }
    slab->shift = shift;
    for (offset = page - chunk; offset >= chunk; offset -= chunk) {
        *(void**)((char*)slab + offset) = slab->free;
        slab->free = (char*)slab + offset;
    }
    crypt_secure_slab_link(slab);
    return slab;
}

static void *crypt_secure_chunk_alloc(unsigned shift)
{
    crypt_secure_slab_t *slab;
    void *chunk;

    pthread_mutex_lock(&crypt_secure_lock);
    slab = *crypt_secure_partial_of(shift);
    if (slab == NULL) {
        slab = crypt_secure_slab_new(shift);
    }
    if (slab == NULL) {
        pthread_mutex_unlock(&crypt_secure_lock);
        return NULL;
    }
    chunk       = slab->free;
    slab->free  = *(void**)chunk;
    *(void**)chunk = NULL; /* zero, as a new page's */
    ++slab->used;
    if (slab->free == NULL) {
        crypt_secure_slab_unlink(slab); /* full */
    }
    pthread_mutex_unlock(&crypt_secure_lock);
    return chunk;
}

static void crypt_secure_chunk_free(void *chunk, unsigned shift)
{
    crypt_secure_slab_t *slab = (crypt_secure_slab_t*)((uintptr_t)chunk &
                                                       ~(uintptr_t)(crypt_secure_page() - 1));

    OPENSSL_cleanse(chunk, (size_t)1 << shift);
    pthread_mutex_lock(&crypt_secure_lock);
    if (slab->free == NULL) {
        crypt_secure_slab_link(slab); /* was full */
    }
    *(void**)chunk = slab->free;
    slab->free     = chunk;
    if (--slab->used == 0) {
        crypt_secure_slab_unlink(slab);
        crypt_secure_unmap(slab, crypt_secure_page());
    }
    pthread_mutex_unlock(&crypt_secure_lock);
}

void *crypt_secure_alloc(size_t size)
{
    unsigned shift = crypt_secure_shift(size ? size : 1);

    if (CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_SECURE_MEMORY)) {
        crypt_local_failure_set(crypt_secure_no_memory);
        return NULL;
    }
    return (shift != 0) ? crypt_secure_chunk_alloc(shift) :
           crypt_secure_map(crypt_secure_round(size)); /* (each its own mapping) */
}

void crypt_secure_free(void *ptr, size_t size)
{
    unsigned shift = crypt_secure_shift(size ? size : 1);

    if (ptr == NULL) {
        return;
    }
    if (shift != 0) {
        crypt_secure_chunk_free(ptr, shift);
    } else {
        crypt_secure_unmap(ptr, crypt_secure_round(size));
    }
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
