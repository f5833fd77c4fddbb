/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCC-shaped tasks over the blocking algorithms (crypt_coll.h).
 *
 * A task owns a stack (mmap'd, with a guard page below it) and runs the
 * collective there through ucontext. Every pipe operation of the
 * algorithms goes through crypt_coll_move (crypt_coll.c), which, inside a
 * task, posts the operation on the team's nonblocking pipes and, while it
 * is not complete, switches back to whoever called crypt_coll_task_test.
 * So test() never waits: it runs the collective until the next operation
 * that cannot complete yet, or to its end. No thread, no lock: the task
 * only ever runs inside test() (or post()), on the caller's thread.
 */
#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define CRYPT_COLL_TASK_STACK (512 * 1024)

struct crypt_coll_task {
    crypt_coll_team_t   *team;
    crypt_coll_args_t   args;
    ucontext_t          caller, self;
    uint8_t             *stack_map;   /* guard page + stack */
    size_t              stack_map_len;
    int                 posted, done;
    int                 running;      /* on its own stack, inside test() */
    crypt_coll_status_t status;
};

/* a task's stack goes back to its team for the next task, or away */
static void crypt_coll_task_stack_release(crypt_coll_team_t *team,
                                          crypt_coll_task_t *task)
{
    if (team->task_stack == NULL) {
        team->task_stack     = task->stack_map;
        team->task_stack_len = task->stack_map_len;
    } else {
        munmap(task->stack_map, task->stack_map_len);
    }
}

/* makecontext passes ints only: the task being started is handed over
 * here, read once by the entry function before anything else runs */
static __thread crypt_coll_task_t *crypt_coll_task_starting;

static void crypt_coll_task_entry(void)
{
    crypt_coll_task_t *task = crypt_coll_task_starting;

    task->status     = crypt_coll_run(task->team, &task->args);
    task->done       = 1;
    task->team->task = NULL;
    /* uc_link is the caller's context: returning resumes test() */
}

/* Called by crypt_coll_move inside a task: the exchange, yielding to the
 * caller of test() until it completes. */
int crypt_coll_task_move(crypt_coll_team_t *team, int dst, const void *sbuf,
                         size_t slen, int src, void *rbuf, size_t rlen)
{
    crypt_coll_task_t *task = team->task;
    void *handle;
    int ret;

    if (team->nb->post(team->ctx, dst, sbuf, slen, src, rbuf, rlen, &handle) != 0) {
        return -1;
    }
    while ((ret = team->nb->test(team->ctx, handle)) == 0) {
        swapcontext(&task->self, &task->caller);
    }
    return (ret > 0) ? 0 : -1;
}

int crypt_coll_task_busy(const crypt_coll_team_t *team)
{
    return (team->task != NULL) && !team->task->running;
}

void crypt_coll_team_set_nb(crypt_coll_team_t *team, const crypt_coll_nb_ops_t *nb)
{
    team->nb = nb;
}

crypt_coll_status_t crypt_coll_task_init(crypt_coll_team_t *team,
                                         const crypt_coll_args_t *args,
                                         const char *tune,
                                         crypt_coll_task_t **task_p)
{
    crypt_coll_task_t *task;
    long page = sysconf(_SC_PAGESIZE);

    if ((team->nb == NULL) || (team->task != NULL) || (args->coll >= CRYPT_COLL_LAST)) {
        return CRYPT_COLL_ERR_PARAM;
    }
    task = calloc(1, sizeof(*task));
    if (task == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    task->team = team;
    task->args = *args;
    if ((args->coll == CRYPT_COLL_ALLGATHER) && (args->alg < 0)) {
        task->args.alg = crypt_coll_allgather_select(team, args->m, tune);
    }
    task->stack_map_len = CRYPT_COLL_TASK_STACK + (size_t)page;
    if (team->task_stack != NULL) {
        /* the last finished task's (a syscall and its page faults less
         * per nonblocking collective) */
        task->stack_map  = team->task_stack;
        team->task_stack = NULL;
    } else {
        task->stack_map = mmap(NULL, task->stack_map_len, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if ((task->stack_map == MAP_FAILED) ||
            (mprotect(task->stack_map, (size_t)page, PROT_NONE) != 0)) {
            /* the lowest page stays unmapped: an overflow faults, never
             * corrupts the heap */
            if (task->stack_map != MAP_FAILED) {
                munmap(task->stack_map, task->stack_map_len);
            }
            free(task);
            return CRYPT_COLL_ERR_PARAM;
        }
    }
    if (getcontext(&task->self) != 0) {
        crypt_coll_task_stack_release(team, task);
        free(task);
        return CRYPT_COLL_ERR_PARAM;
    }
    task->self.uc_stack.ss_sp   = task->stack_map + page;
    task->self.uc_stack.ss_size = CRYPT_COLL_TASK_STACK;
    task->self.uc_link          = &task->caller;
    makecontext(&task->self, crypt_coll_task_entry, 0);
    task->status = CRYPT_COLL_INPROGRESS;
    *task_p      = task;
    return CRYPT_COLL_OK;
}

crypt_coll_status_t crypt_coll_task_post(crypt_coll_task_t *task)
{
    if (task->posted || (task->team->task != NULL)) {
        return CRYPT_COLL_ERR_PARAM;
    }
    task->posted     = 1;
    task->team->task = task;
    return crypt_coll_task_test(task);
}

crypt_coll_status_t crypt_coll_task_test(crypt_coll_task_t *task)
{
    if (!task->posted) {
        return CRYPT_COLL_ERR_PARAM;
    }
    if (!task->done) {
        crypt_coll_task_starting = task;
        task->running            = 1;
        swapcontext(&task->caller, &task->self);
        task->running            = 0;
    }
    return task->done ? task->status : CRYPT_COLL_INPROGRESS;
}

crypt_coll_status_t crypt_coll_task_finalize(crypt_coll_task_t *task)
{
    if (task->posted && !task->done) {
        return CRYPT_COLL_ERR_PARAM; /* its stack is in use */
    }
    crypt_coll_task_stack_release(task->team, task);
    free(task);
    return CRYPT_COLL_OK;
}

void crypt_coll_task_team_cleanup(crypt_coll_team_t *team)
{
    if (team->task_stack != NULL) {
        munmap(team->task_stack, team->task_stack_len);
        team->task_stack = NULL;
    }
}
