/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory for secrets: pages of its own (small secrets share them, a page
 * of chunks of one size), excluded from core dumps (MADV_DONTDUMP) and
 * from a forked child (MADV_WIPEONFORK), kept out of swap where
 * RLIMIT_MEMLOCK allows (mlock; said once where it does not), and wiped
 * when freed (OPENSSL_cleanse, which the compiler may not elide). The lowest layer
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static pthread_mutex_t crypt_secure_lock = PTHREAD_MUTEX_INITIALIZER;
static int crypt_secure_wipe_on_fork = 1; /* MADV_WIPEONFORK took (Linux 4.14) */
static int crypt_secure_forked;           /* a child: inherited pages are zero */

/* A fork while another thread holds the lock (a pool thread making a
 * flow's keys) left the child's first secure allocation waiting for ever
 * (crypto review N5): the lock is held across fork() and released on both
 * sides. The child's inherited pages are wiped (MADV_WIPEONFORK): it
 * forgets them and starts afresh. */
static void crypt_secure_atfork_prepare(void)
{
    pthread_mutex_lock(&crypt_secure_lock);
}

static void crypt_secure_atfork_parent(void)
{
    pthread_mutex_unlock(&crypt_secure_lock);
}

static void crypt_secure_forget_pages(void); /* (below) */

static void crypt_secure_atfork_child(void)
{
    if (crypt_secure_wipe_on_fork) {
        crypt_secure_forked = 1;
        crypt_secure_forget_pages();
    }
    pthread_mutex_unlock(&crypt_secure_lock);
}

static void crypt_secure_atfork_register(void)
{
    (void)pthread_atfork(crypt_secure_atfork_prepare, crypt_secure_atfork_parent,
                         crypt_secure_atfork_child);
}

/* mlock failed (RLIMIT_MEMLOCK without CAP_IPC_LOCK): said once, since
 * secrets may then reach swap; the pages stay excluded from dumps */
static void crypt_secure_lock_failed(int err)
{
    static int said;

    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        fprintf(stderr, "ucx-crypt: cannot lock memory for secrets (mlock: %s): "
                "they may be swapped out; raise the locked-memory limit "
                "(ulimit -l, RLIMIT_MEMLOCK)\n", strerror(err));
    }
}

/* Pages of their own: not dumped, not inherited by a child (zero there),
 * locked where the limit allows, zero */
static void *crypt_secure_map(size_t length)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void *ptr;

    (void)pthread_once(&once, crypt_secure_atfork_register);
    ptr = mmap(NULL, length, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
        crypt_local_failure_set(crypt_secure_no_memory);
        return NULL;
    }
#ifdef MADV_DONTDUMP
    (void)madvise(ptr, length, MADV_DONTDUMP);
#endif
#ifdef MADV_WIPEONFORK
    if (madvise(ptr, length, MADV_WIPEONFORK) != 0) {
        crypt_secure_wipe_on_fork = 0; /* (an older kernel: copies, as before) */
    }
#else
    crypt_secure_wipe_on_fork = 0;
#endif
    /* Best effort: an unprivileged process may have a small memlock limit,
     * and failing to lock must not stop the job. */
    if (mlock(ptr, length) != 0) {
        crypt_secure_lock_failed(errno);
    }
    return ptr; /* anonymous pages are zero-filled */
}

static void crypt_secure_unmap(void *ptr, size_t length)
{
    OPENSSL_cleanse(ptr, length);
    (void)munlock(ptr, length);
    (void)munmap(ptr, length);
}

/* A free that names no chunk handed out (twice, or a size of another
 * class): two flows would share one key's memory, a wipe would reach into
 * a neighbour's secret. Memory is corrupt: end here, as glibc does. */
static void crypt_secure_corrupt(const char *what, const void *ptr)
{
    fprintf(stderr, "ucx-crypt: secure memory: %s (%p): aborting\n", what, ptr);
    abort();
}

/*
 * Small secrets share pages (a flow's traffic keys and its AES-GCM
 * schedule are 76 and 1008 bytes; a page each was 8 KiB locked a flow, up
 * to 1 GiB at UCX_CRYPT_RX_FLOWS). Chunks of 64 to 1024 bytes, powers of
 * two, so each is aligned to its size (ipsec-mb's gcm_key_data wants 64);
 * a page holds chunks of one size, at most 64, its first chunk its header
 * with a bit for each chunk in use: no link inside a chunk, and a free is
 * checked against it (size class, offset, in use). A page goes back to
 * the kernel, wiped, when its last chunk is freed, so memory follows what
 * is in use. One lock: allocations come with flows and handshakes, never
 * per record.
 */
enum {
    CRYPT_SECURE_CHUNK_MIN_SHIFT = 6,  /* 64 bytes */
    CRYPT_SECURE_CHUNK_MAX_SHIFT = 10, /* 1024 bytes */
    CRYPT_SECURE_CHUNKS_MAX      = 64, /* a page's, one bit each */
    CRYPT_SECURE_CLASSES = CRYPT_SECURE_CHUNK_MAX_SHIFT -
                           CRYPT_SECURE_CHUNK_MIN_SHIFT + 1
};

typedef struct crypt_secure_slab crypt_secure_slab_t;
struct crypt_secure_slab {
    crypt_secure_slab_t *prev, *next; /* pages of its size with a free chunk */
    uint64_t            in_use;       /* bit i: chunk i (0: this header) */
    unsigned            used;         /* chunks handed out */
    unsigned            shift;        /* 0: not a page of chunks */
};

static crypt_secure_slab_t *crypt_secure_partial[CRYPT_SECURE_CLASSES];

static void crypt_secure_forget_pages(void)
{
    memset(crypt_secure_partial, 0, sizeof(crypt_secure_partial));
}

/* the chunk size for `size`, as a shift; 0 where it gets pages of its own
 * (more than 1024 bytes, or a page that would hold more than 64 chunks of
 * it) */
static unsigned crypt_secure_shift(size_t size)
{
    unsigned shift = CRYPT_SECURE_CHUNK_MIN_SHIFT;
    size_t page    = crypt_secure_page();

    if ((size > ((size_t)1 << CRYPT_SECURE_CHUNK_MAX_SHIFT)) ||
        (page < ((size_t)2 << CRYPT_SECURE_CHUNK_MAX_SHIFT))) {
        return 0;
    }
    while ((((size_t)1 << shift) < size) ||
           ((page >> shift) > CRYPT_SECURE_CHUNKS_MAX)) {
        ++shift;
    }
    return (shift <= CRYPT_SECURE_CHUNK_MAX_SHIFT) ? shift : 0;
}

/* every chunk of a page of 2^shift bytes, as bits */
static uint64_t crypt_secure_full(unsigned shift)
{
    size_t chunks = crypt_secure_page() >> shift;

    return (chunks >= 64) ? ~(uint64_t)0 : (((uint64_t)1 << chunks) - 1);
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
    crypt_secure_slab_t *slab = crypt_secure_map(crypt_secure_page());

    if (slab == NULL) {
        return NULL;
    }
    slab->shift  = shift;
    slab->in_use = 1; /* the header */
    crypt_secure_slab_link(slab);
    return slab;
}

static void *crypt_secure_chunk_alloc(unsigned shift)
{
    crypt_secure_slab_t *slab;
    unsigned index;

    pthread_mutex_lock(&crypt_secure_lock);
    slab = *crypt_secure_partial_of(shift);
    if (slab == NULL) {
        slab = crypt_secure_slab_new(shift);
    }
    if (slab == NULL) {
        pthread_mutex_unlock(&crypt_secure_lock);
        return NULL;
    }
    index         = (unsigned)__builtin_ctzll(~slab->in_use);
    slab->in_use |= (uint64_t)1 << index;
    ++slab->used;
    if (slab->in_use == crypt_secure_full(shift)) {
        crypt_secure_slab_unlink(slab); /* full */
    }
    pthread_mutex_unlock(&crypt_secure_lock);
    return (char*)slab + ((size_t)index << shift); /* zero: wiped at free */
}

static void crypt_secure_chunk_free(void *chunk, unsigned shift)
{
    crypt_secure_slab_t *slab = (crypt_secure_slab_t*)((uintptr_t)chunk &
                                                       ~(uintptr_t)(crypt_secure_page() - 1));
    size_t offset = (size_t)((char*)chunk - (char*)slab);
    uint64_t bit  = (uint64_t)1 << (offset >> shift);

    pthread_mutex_lock(&crypt_secure_lock);
    if ((slab->shift == 0) && crypt_secure_forked) {
        /* a chunk of the parent's, wiped at fork: nothing to give back */
        pthread_mutex_unlock(&crypt_secure_lock);
        return;
    }
    if ((slab->shift != shift) || (offset == 0) ||
        (offset & (((size_t)1 << shift) - 1)) || !(slab->in_use & bit)) {
        crypt_secure_corrupt((slab->shift != shift) ?
                             "a free of another size than allocated" :
                             "a free of a chunk not in use (twice?)", chunk);
    }
    OPENSSL_cleanse(chunk, (size_t)1 << shift);
    if (slab->in_use == crypt_secure_full(shift)) {
        crypt_secure_slab_link(slab); /* was full */
    }
    slab->in_use &= ~bit;
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
