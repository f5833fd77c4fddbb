/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A small pool of worker threads for the bulk engine: they run sealing and
 * opening jobs and nothing else (no UCX call ever runs on them; UCT is
 * single-threaded under UCP). One queue, FIFO; completion is a flag the
 * submitting thread polls from its progress loop.
 *
 * Thread count: CryptMPI's min(T0 - T1, t) (Naser et al., "CryptMPI: A Fast
 * Encrypted MPI Library", section IV-D): never more threads than the node
 * has PUs left over once every process and every pool thread already
 * registered on the node is counted. Processes register in a small file in
 * /dev/shm (one line per process, alive while the process holds a lock on
 * its slot: the dead are pruned, whatever pid namespace they ran in), so
 * ranks of one node share the spare PUs instead of each taking all of them.
 *
 * Placement: with hwloc, and when the process is bound to a subset of the
 * machine (mpirun --bind-to core), threads are pinned to PUs outside that
 * set, hyper-thread siblings of our own cores first, then the same NUMA
 * node, then the rest. An unbound process is not pinned (pinning would only
 * fight the scheduler).
 */
#ifndef UCX_CRYPT_POOL_H
#define UCX_CRYPT_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CRYPT_POOL_MAX_THREADS = 64 };

typedef struct crypt_pool crypt_pool_t;
typedef struct crypt_pool_job crypt_pool_job_t;

/* `worker` is 1..threads on pool threads, 0 when the submitter runs the job
 * itself (pool of 0 threads): an index for per-thread state such as
 * expanded keys. */
typedef void (*crypt_pool_run_t)(crypt_pool_job_t *job, unsigned worker);

struct crypt_pool_job {
    crypt_pool_run_t run;
    crypt_pool_job_t *next;  /* owned by the pool while queued */
    int              done;   /* written once, with release, after run */
};

typedef struct crypt_pool_params {
    unsigned   threads;       /* wanted; 0: none, jobs run inline */
    int        pin;           /* pin with hwloc (if built in) */
    const char *registry;     /* per-node registry file, NULL: do not count */
    int        oversubscribe; /* benchmarks only: start `threads` threads
                                 even if the node has no PU left for them */
    /* called on the pool thread after a job's done flag is set (may be
     * NULL): wakes a submitter that sleeps instead of polling. Must be
     * async-safe towards the submitter (e.g. a write to an eventfd). */
    void       (*notify)(void *arg);
    void       *notify_arg;
} crypt_pool_params_t;

/* Returns 0, or -1 with a message in `error`. The pool may start fewer
 * threads than asked for (see the top of this file); crypt_pool_size()
 * says how many. */
int crypt_pool_create(const crypt_pool_params_t *params, crypt_pool_t **pool_p,
                      char *error, size_t error_len);
/* Runs what is still queued, joins the threads, leaves the registry. */
void crypt_pool_destroy(crypt_pool_t *pool);

unsigned crypt_pool_size(const crypt_pool_t *pool);
/* Threads that take jobs now (crypt_pool_review); with none, a job
 * submitted runs at once on the submitter */
unsigned crypt_pool_active(const crypt_pool_t *pool);
/* The node's PUs shared again (when the registry changed, looked at no
 * more than every millisecond; or `now`): the pool runs as many of its
 * threads as its share allows, the registry's processes counted, and
 * claims that many; the rest wait. A process that
 * came after us was granted only what we had not claimed: with two ranks
 * on two PUs the first one's thread stays, and fights both for a PU. */
void crypt_pool_review(crypt_pool_t *pool, int now);
/* "pu 3,7" or "unpinned", for logs */
const char *crypt_pool_placement(const crypt_pool_t *pool);

/* Queue `job` (its run field set); with no threads it runs here and now. */
void crypt_pool_submit(crypt_pool_t *pool, crypt_pool_job_t *job);

/* The submitter helps instead of waiting: if no worker has taken `job`
 * yet, it is taken off the queue and run here, as worker 0. Returns 1 when
 * the job is done (here or before), 0 when a worker is running it. A
 * worker that is not scheduled (no spare PU: another process took it, or
 * the node has none) then never holds up the job the caller needs next;
 * with 2 ranks on 2 PUs a queued seal waited milliseconds for its thread. */
int crypt_pool_run_here(crypt_pool_t *pool, crypt_pool_job_t *job);
/* The job done when this returns: run here if no worker took it, else
 * waited for (a worker runs it to its end) */
void crypt_pool_finish(crypt_pool_t *pool, crypt_pool_job_t *job);

static inline int crypt_pool_job_done(const crypt_pool_job_t *job)
{
    return __atomic_load_n(&job->done, __ATOMIC_ACQUIRE);
}

/* Run `job` on the calling thread (worker 0), never queued */
static inline void crypt_pool_run_inline(crypt_pool_job_t *job)
{
    job->done = 0;
    job->run(job, 0);
    __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
}

/* Threads the node can still give a new process that wants `wanted`
 * (CryptMPI's min(T0 - T1, t)), read from `registry` without joining it. */
unsigned crypt_pool_threads_available(const char *registry, unsigned wanted);

#ifdef __cplusplus
}
#endif

#endif
