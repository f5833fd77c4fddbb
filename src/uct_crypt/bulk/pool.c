/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Worker pool of the bulk engine; see bulk/pool.h for the rules.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, cpu_set_t */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "uct_crypt/bulk/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif

struct crypt_pool {
    pthread_mutex_t  lock;
    pthread_cond_t   wake;
    crypt_pool_job_t *head, *tail;
    int              stopping;
    unsigned         nthreads;
    unsigned         active;         /* workers 1..active take jobs; the
                                        rest wait (crypt_pool_review) */
    int              oversubscribe;  /* benchmarks: never reviewed */
    double           next_look;      /* s, CLOCK_MONOTONIC: at the registry */
    double           next_review;    /* ... and a review all the same (an
                                        mtime may not change within a tick) */
    struct timespec  seen;           /* its mtime when we last reviewed */
    pthread_t        threads[CRYPT_POOL_MAX_THREADS];
    int              pu[CRYPT_POOL_MAX_THREADS];  /* -1: unpinned */
    char             placement[256];
    char             registry[256];
    int              registry_fd;    /* open while we claim: holds our slot */
    long             registry_slot;
    void             (*notify)(void *arg);
    void             *notify_arg;
};

typedef struct {
    crypt_pool_t *pool;
    unsigned     index;   /* 1-based worker index */
} crypt_pool_thread_arg_t;

/* ---- per-node registry ---------------------------------------------------- */

static unsigned crypt_pool_online_pus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return (n > 0) ? (unsigned)n : 1;
}

/* A process's claim is a line "slot count" (count: 1 + its threads). Its
 * slot is one byte, past the lines, that it holds an open-file-description
 * write lock on for as long as its pool lives: the kernel drops the lock
 * when the process ends, however it ends, and the lock is seen from every
 * pid namespace that shares the file. A pid was not: two emulated hosts
 * (or containers) sharing /dev/shm each ran as pid 2 in its own namespace,
 * took the other's line for its own, and both took the node's spare PUs. */
enum { CRYPT_POOL_SLOT_BASE = 1 << 20, CRYPT_POOL_SLOTS = 4096 };

static int crypt_pool_slot_lock(int fd, int cmd, short type, unsigned slot)
{
    struct flock lk = {.l_type = type, .l_whence = SEEK_SET,
                       .l_start = CRYPT_POOL_SLOT_BASE + (off_t)slot, .l_len = 1};

    if (fcntl(fd, cmd, &lk) != 0) {
        return -1;
    }
    return (cmd == F_OFD_GETLK) ? (lk.l_type != F_UNLCK) : 0;
}

/* PUs claimed by live processes other than us (`own`: our slot, or -1),
 * from the registry open at `fd`; their lines are copied to *kept (if kept
 * != NULL) so that a rewrite drops the dead and our own old line. */
static unsigned crypt_pool_registry_scan(int fd, long own, char **kept,
                                         size_t *kept_len, unsigned *procs)
{
    char line[64], *buf = NULL;
    size_t used = 0, cap = 0;
    unsigned others = 0;
    long slot, count;
    FILE *file;

    /* (a joined pool's fd was read before: its offset is shared with the
     * dup) */
    (void)lseek(fd, 0, SEEK_SET);
    file = fdopen(dup(fd), "r");

    while ((file != NULL) && fgets(line, sizeof(line), file)) {
        if ((sscanf(line, "%ld %ld", &slot, &count) != 2) || (slot < 0) ||
            (slot >= CRYPT_POOL_SLOTS) || (count < 0) || (count > 4096) ||
            (slot == own) ||
            (crypt_pool_slot_lock(fd, F_OFD_GETLK, F_WRLCK, (unsigned)slot) != 1)) {
            continue; /* ours, or nobody holds the slot: gone */
        }
        others += (unsigned)count;
        if (procs != NULL) {
            ++*procs;
        }
        if (kept == NULL) {
            continue;
        }
        if (used + sizeof(line) >= cap) {
            char *grown = realloc(buf, 2 * cap + 4096);
            if (grown == NULL) {
                break;
            }
            buf = grown;
            cap = 2 * cap + 4096;
        }
        used += (size_t)snprintf(buf + used, cap - used, "%ld %ld\n", slot, count);
    }
    if (file != NULL) {
        fclose(file);
    }
    if (kept != NULL) {
        *kept     = buf;
        *kept_len = used;
    }
    return others;
}

/* min(T0 - T1, t): PUs left once the others and we ourselves are counted */
static unsigned crypt_pool_grant(unsigned others, unsigned wanted)
{
    unsigned pus  = crypt_pool_online_pus();
    unsigned left = (pus > others + 1) ? pus - others - 1 : 0;

    return (wanted < left) ? wanted : left;
}

/* What a pool that runs already may keep now that `procs` processes (us
 * among them) share the node's PUs and the others claim `others`: its
 * share, and no more than is left (a process that came after us was
 * granted what we had not claimed: two ranks on two PUs left the first
 * one's thread fighting both for a PU, the wire idle while it waited) */
static unsigned crypt_pool_share(unsigned others, unsigned procs, unsigned wanted)
{
    unsigned pus  = crypt_pool_online_pus();
    unsigned fair = (pus > procs) ? (pus - procs) / procs : 0;
    unsigned left = crypt_pool_grant(others, wanted);

    return (fair < left) ? fair : left;
}

enum { CRYPT_POOL_JOIN, CRYPT_POOL_REVIEW, CRYPT_POOL_LEAVE };

/* Join: open the registry, take a free slot, grant threads and write our
 * claim; review: our share again, our claim rewritten (*granted: the
 * threads we may run); leave: drop our line and the slot. Under the file
 * lock; dead claims are dropped on the way. */
static int crypt_pool_registry_update(crypt_pool_t *pool, int op,
                                      unsigned wanted, unsigned *granted)
{
    char line[64], *kept = NULL;
    size_t kept_len = 0;
    struct stat st;
    unsigned slot, procs = 1, others;
    int join = (op == CRYPT_POOL_JOIN);
    int fd   = pool->registry_fd, n;

    if (join) {
        fd = open(pool->registry, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            return -1;
        }
        /* someone else's file could lie to us: do not use it */
        if ((fstat(fd, &st) != 0) || (st.st_uid != geteuid())) {
            close(fd);
            return -1;
        }
    }
    if (flock(fd, LOCK_EX) != 0) {
        if (join) {
            close(fd);
        }
        return -1;
    }
    if (join) {
        for (slot = 0; (slot < CRYPT_POOL_SLOTS) &&
                       (crypt_pool_slot_lock(fd, F_OFD_SETLK, F_WRLCK, slot) != 0);
             ++slot) {
        }
        if (slot == CRYPT_POOL_SLOTS) {
            flock(fd, LOCK_UN);
            close(fd);
            return -1;
        }
        pool->registry_fd   = fd;
        pool->registry_slot = (long)slot;
    }
    others   = crypt_pool_registry_scan(fd, pool->registry_slot, &kept, &kept_len,
                                        &procs);
    *granted = (op == CRYPT_POOL_REVIEW) ? crypt_pool_share(others, procs, wanted) :
                                           crypt_pool_grant(others, wanted);
    if (ftruncate(fd, 0) == 0) {
        /* best effort: a lost line only makes the others less careful */
        if ((kept_len > 0) && (pwrite(fd, kept, kept_len, 0) < 0)) {
            kept_len = 0;
        }
        if (op != CRYPT_POOL_LEAVE) {
            n = snprintf(line, sizeof(line), "%ld %u\n", pool->registry_slot,
                         1 + *granted);
            if (pwrite(fd, line, (size_t)n, (off_t)kept_len) < 0) {
                /* our claim is lost: the others may take our PUs too */
            }
        }
    }
    free(kept);
    flock(fd, LOCK_UN);
    if (op == CRYPT_POOL_LEAVE) {
        close(fd); /* and with it our slot's lock */
        pool->registry_fd = -1;
    }
    return 0;
}

unsigned crypt_pool_threads_available(const char *registry, unsigned wanted)
{
    unsigned others = 0;
    int fd;

    if (registry != NULL) {
        fd = open(registry, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            others = crypt_pool_registry_scan(fd, -1, NULL, NULL, NULL);
            close(fd);
        }
    }
    return crypt_pool_grant(others, wanted);
}

/* ---- placement ------------------------------------------------------------ */

/* Fill pool->pu[] with PUs outside our binding: siblings of our cores
 * first, then our NUMA node, then anything. */
static void crypt_pool_place(crypt_pool_t *pool, int pin)
{
    unsigned i;

    for (i = 0; i < CRYPT_POOL_MAX_THREADS; ++i) {
        pool->pu[i] = -1;
    }
    snprintf(pool->placement, sizeof(pool->placement), "unpinned");
#ifdef HAVE_HWLOC
    hwloc_topology_t topo;
    hwloc_bitmap_t ours, candidates, tier;
    hwloc_obj_t obj;
    int pu, n = 0, len;
    unsigned t;

    if (!pin || (pool->nthreads == 0) || (hwloc_topology_init(&topo) != 0)) {
        return;
    }
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    ours       = hwloc_bitmap_alloc();
    candidates = hwloc_bitmap_alloc();
    tier       = hwloc_bitmap_alloc();
    if ((hwloc_get_cpubind(topo, ours, HWLOC_CPUBIND_PROCESS) == 0) &&
        !hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), ours)) {
        /* tier 1: PUs of the cores we run on (hyper-thread siblings) */
        hwloc_bitmap_zero(tier);
        obj = NULL;
        while ((obj = hwloc_get_next_obj_covering_cpuset_by_type(
                        topo, ours, HWLOC_OBJ_CORE, obj)) != NULL) {
            hwloc_bitmap_or(tier, tier, obj->cpuset);
        }
        hwloc_bitmap_andnot(tier, tier, ours);
        hwloc_bitmap_or(candidates, candidates, tier);
        hwloc_bitmap_foreach_begin(pu, tier) {
            if (n < CRYPT_POOL_MAX_THREADS) pool->pu[n++] = pu;
        } hwloc_bitmap_foreach_end();
        /* tier 2: our NUMA node(s); tier 3: the rest of the machine */
        for (t = 0; t < 2; ++t) {
            hwloc_bitmap_zero(tier);
            if (t == 0) {
                obj = NULL;
                while ((obj = hwloc_get_next_obj_covering_cpuset_by_type(
                                topo, ours, HWLOC_OBJ_NUMANODE, obj)) != NULL) {
                    hwloc_bitmap_or(tier, tier, obj->cpuset);
                }
            } else {
                hwloc_bitmap_copy(tier, hwloc_topology_get_allowed_cpuset(topo));
            }
            hwloc_bitmap_andnot(tier, tier, ours);
            hwloc_bitmap_andnot(tier, tier, candidates);
            hwloc_bitmap_or(candidates, candidates, tier);
            hwloc_bitmap_foreach_begin(pu, tier) {
                if (n < CRYPT_POOL_MAX_THREADS) pool->pu[n++] = pu;
            } hwloc_bitmap_foreach_end();
        }
    }
    if (n > 0) {
        len = snprintf(pool->placement, sizeof(pool->placement), "pu");
        for (t = 0; t < pool->nthreads; ++t) {
            pool->pu[t] = pool->pu[t % (unsigned)n];
            if ((len > 0) && ((size_t)len < sizeof(pool->placement))) {
                len += snprintf(pool->placement + len,
                                sizeof(pool->placement) - (size_t)len, "%s%d",
                                t ? "," : " ", pool->pu[t]);
            }
        }
        for (t = pool->nthreads; t < CRYPT_POOL_MAX_THREADS; ++t) {
            pool->pu[t] = -1;
        }
    }
    hwloc_bitmap_free(tier);
    hwloc_bitmap_free(candidates);
    hwloc_bitmap_free(ours);
    hwloc_topology_destroy(topo);
#else
    (void)pin;
#endif
}

static void crypt_pool_pin_self(int pu)
{
#ifdef HAVE_HWLOC
    /* pthread affinity by PU index: hwloc's os_index equals the Linux CPU
     * number, which is what the cpuset bitmaps above hold */
    cpu_set_t set;

    if (pu < 0) {
        return;
    }
    CPU_ZERO(&set);
    CPU_SET(pu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
#else
    (void)pu;
#endif
}

/* ---- the pool --------------------------------------------------------------- */

static void *crypt_pool_thread(void *arg)
{
    crypt_pool_thread_arg_t *targ = arg;
    crypt_pool_t *pool = targ->pool;
    unsigned index     = targ->index;
    crypt_pool_job_t *job;

    free(targ);
    crypt_pool_pin_self(pool->pu[index - 1]);
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (((pool->head == NULL) || (index > pool->active)) &&
               !pool->stopping) {
            pthread_cond_wait(&pool->wake, &pool->lock);
        }
        job = pool->head;
        if (job == NULL) {
            break; /* stopping and drained */
        }
        pool->head = job->next;
        if (pool->head == NULL) {
            pool->tail = NULL;
        }
        pthread_mutex_unlock(&pool->lock);

        job->run(job, index);
        __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
        if (pool->notify != NULL) {
            pool->notify(pool->notify_arg);
        }

        pthread_mutex_lock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

int crypt_pool_create(const crypt_pool_params_t *params, crypt_pool_t **pool_p,
                      char *error, size_t error_len)
{
    crypt_pool_t *pool;
    crypt_pool_thread_arg_t *targ;
    unsigned wanted = params->threads, granted, i;

    if (wanted > CRYPT_POOL_MAX_THREADS) {
        snprintf(error, error_len, "at most %d crypto threads, not %u",
                 CRYPT_POOL_MAX_THREADS, wanted);
        return -1;
    }
    pool = calloc(1, sizeof(*pool));
    if (pool == NULL) {
        snprintf(error, error_len, "out of memory");
        return -1;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pool->notify        = params->notify;
    pool->notify_arg    = params->notify_arg;
    pool->registry_fd   = -1;
    pool->registry_slot = -1;

    granted = crypt_pool_threads_available(NULL, wanted);
    if (params->registry != NULL) {
        snprintf(pool->registry, sizeof(pool->registry), "%s", params->registry);
        if (crypt_pool_registry_update(pool, CRYPT_POOL_JOIN, wanted,
                                       &granted) != 0) {
            pool->registry[0] = '\0'; /* cannot count: take what was asked */
            granted           = crypt_pool_threads_available(NULL, wanted);
        }
    }
    pool->nthreads      = params->oversubscribe ? wanted : granted;
    pool->active        = pool->nthreads;
    pool->oversubscribe = params->oversubscribe;
    crypt_pool_place(pool, params->pin);

    for (i = 0; i < pool->nthreads; ++i) {
        targ = malloc(sizeof(*targ));
        if (targ == NULL) {
            break;
        }
        targ->pool  = pool;
        targ->index = i + 1;
        if (pthread_create(&pool->threads[i], NULL, crypt_pool_thread, targ) != 0) {
            free(targ);
            break;
        }
    }
    if (i < pool->nthreads) {
        snprintf(error, error_len, "cannot start crypto thread %u: %s", i + 1,
                 strerror(errno));
        pool->nthreads = i;
        crypt_pool_destroy(pool);
        return -1;
    }
    *pool_p = pool;
    return 0;
}

void crypt_pool_destroy(crypt_pool_t *pool)
{
    unsigned i, granted;

    pthread_mutex_lock(&pool->lock);
    pool->stopping = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (i = 0; i < pool->nthreads; ++i) {
        pthread_join(pool->threads[i], NULL);
    }
    if (pool->registry_fd >= 0) {
        crypt_pool_registry_update(pool, CRYPT_POOL_LEAVE, 0, &granted);
    }
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

unsigned crypt_pool_size(const crypt_pool_t *pool)
{
    return pool->nthreads;
}

const char *crypt_pool_placement(const crypt_pool_t *pool)
{
    return pool->placement;
}

int crypt_pool_run_here(crypt_pool_t *pool, crypt_pool_job_t *job)
{
    crypt_pool_job_t **link, *prev = NULL;

    if (crypt_pool_job_done(job)) {
        return 1;
    }
    if (pool == NULL) {
        return 0;
    }
    pthread_mutex_lock(&pool->lock);
    for (link = &pool->head; (*link != NULL) && (*link != job);
         link = &(*link)->next) {
        prev = *link;
    }
    if (*link == NULL) {
        pthread_mutex_unlock(&pool->lock);
        return 0; /* a worker runs it */
    }
    *link = job->next;
    if (pool->tail == job) {
        pool->tail = prev;
    }
    pthread_mutex_unlock(&pool->lock);
    crypt_pool_run_inline(job);
    return 1;
}

void crypt_pool_finish(crypt_pool_t *pool, crypt_pool_job_t *job)
{
    if (!crypt_pool_run_here(pool, job)) {
        while (!crypt_pool_job_done(job)) {
            sched_yield();
        }
    }
}

static double crypt_pool_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

unsigned crypt_pool_active(const crypt_pool_t *pool)
{
    return __atomic_load_n(&pool->active, __ATOMIC_RELAXED);
}

void crypt_pool_review(crypt_pool_t *pool, int now)
{
    unsigned share;
    struct stat st;
    double t;

    if ((pool->registry_fd < 0) || (pool->nthreads == 0) || pool->oversubscribe) {
        return; /* not counted, or a number of threads the user set */
    }
    /* a look (fstat) at most every millisecond; a review (the file
     * locked and read) only when a process came, went or claimed anew */
    t = crypt_pool_now();
    if (!now && (t < pool->next_look)) {
        return;
    }
    pool->next_look = t + 0.001;
    if ((fstat(pool->registry_fd, &st) != 0) ||
        (!now && (t < pool->next_review) &&
         (st.st_mtim.tv_sec == pool->seen.tv_sec) &&
         (st.st_mtim.tv_nsec == pool->seen.tv_nsec))) {
        return;
    }
    pool->next_review = t + 0.1;
    if (crypt_pool_registry_update(pool, CRYPT_POOL_REVIEW, pool->nthreads,
                                   &share) != 0) {
        return;
    }
    if (fstat(pool->registry_fd, &st) == 0) {
        pool->seen = st.st_mtim; /* our own claim, rewritten */
    }
    pthread_mutex_lock(&pool->lock);
    if (share != pool->active) {
        __atomic_store_n(&pool->active, share, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&pool->wake);
    }
    pthread_mutex_unlock(&pool->lock);
}

void crypt_pool_submit(crypt_pool_t *pool, crypt_pool_job_t *job)
{
    job->next = NULL;
    if (crypt_pool_active(pool) == 0) {
        crypt_pool_run_inline(job);
        return;
    }
    job->done = 0;
    pthread_mutex_lock(&pool->lock);
    if (pool->tail != NULL) {
        pool->tail->next = job;
    } else {
        pool->head = job;
    }
    pool->tail = job;
    pthread_cond_signal(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
}
