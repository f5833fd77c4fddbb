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

/* Sanitizers follow a stack switch only when told, through their fiber
 * interfaces (sanitizer/common_interface_defs.h, tsan_interface.h):
 * AddressSanitizer which stack is live (or it takes the task's frames for
 * the caller's and reports falsely), ThreadSanitizer which fiber's clock
 * and shadow stack run. GCC says __SANITIZE_*__, clang __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#  define CRYPT_COLL_TASK_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#  define CRYPT_COLL_TASK_TSAN 1
#endif
#if defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define CRYPT_COLL_TASK_ASAN 1
#  endif
#  if __has_feature(thread_sanitizer)
#    define CRYPT_COLL_TASK_TSAN 1
#  endif
#endif
#ifdef CRYPT_COLL_TASK_ASAN
#  include <sanitizer/common_interface_defs.h>
#endif
#ifdef CRYPT_COLL_TASK_TSAN
#  include <sanitizer/tsan_interface.h>
#endif

struct crypt_coll_task {
    crypt_coll_team_t   *team;
    crypt_coll_args_t   args;
    ucontext_t          caller, self;
    uint8_t             *stack_map;   /* guard page + stack */
    size_t              stack_map_len;
    int                 posted, done;
    int                 running;      /* on its own stack, inside test() */
    crypt_coll_status_t status;
#ifdef CRYPT_COLL_TASK_ASAN
    void                *asan_fake_stack; /* the task's, while it is away */
    const void          *caller_stack;    /* the stack test() was called on */
    size_t              caller_stack_size;
#endif
#ifdef CRYPT_COLL_TASK_TSAN
    void                *tsan_fiber, *tsan_caller;
#endif
};

/* ---- telling the sanitizers about the switches (nothing otherwise) ------ */

/* Inlined always: ThreadSanitizer's function-exit hook of a function that
 * switched fibers would run on the other fiber's shadow stack. */
#define CRYPT_COLL_TASK_SWITCH static inline __attribute__((always_inline))

/* test(): from the caller's stack onto the task's, and back */
CRYPT_COLL_TASK_SWITCH void crypt_coll_task_run_self(crypt_coll_task_t *task)
{
#ifdef CRYPT_COLL_TASK_ASAN
    void *caller_fake_stack;

    __sanitizer_start_switch_fiber(&caller_fake_stack, task->self.uc_stack.ss_sp,
                                   task->self.uc_stack.ss_size);
#endif
#ifdef CRYPT_COLL_TASK_TSAN
    task->tsan_caller = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(task->tsan_fiber, 0);
#endif
    swapcontext(&task->caller, &task->self);
#ifdef CRYPT_COLL_TASK_ASAN
    __sanitizer_finish_switch_fiber(caller_fake_stack, NULL, NULL);
#endif
}

/* on the task's stack, just arrived from test(); `first`: in the entry */
CRYPT_COLL_TASK_SWITCH void crypt_coll_task_arrived(crypt_coll_task_t *task, int first)
{
#ifdef CRYPT_COLL_TASK_ASAN
    __sanitizer_finish_switch_fiber(first ? NULL : task->asan_fake_stack,
                                    &task->caller_stack, &task->caller_stack_size);
#endif
    (void)task;
    (void)first;
}

/* on the task's stack, about to go back to test()'s caller; `ending`: the
 * task returns through uc_link and its stack is never resumed */
CRYPT_COLL_TASK_SWITCH void crypt_coll_task_leaving(crypt_coll_task_t *task, int ending)
{
#ifdef CRYPT_COLL_TASK_ASAN
    __sanitizer_start_switch_fiber(ending ? NULL : &task->asan_fake_stack,
                                   task->caller_stack, task->caller_stack_size);
#endif
#ifdef CRYPT_COLL_TASK_TSAN
    __tsan_switch_to_fiber(task->tsan_caller, 0);
#endif
    (void)task;
    (void)ending;
}

/* ---- tasks ---------------------------------------------------------------- */

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

    crypt_coll_task_arrived(task, 1);
    task->status     = crypt_coll_run(task->team, &task->args);
    task->done       = 1;
    task->team->task = NULL;
    /* back into test(), as returning through uc_link would, but without
     * leaving this frame after the sanitizers were told of the switch */
    crypt_coll_task_leaving(task, 1);
    setcontext(&task->caller);
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
        crypt_coll_task_leaving(task, 0);
        swapcontext(&task->self, &task->caller);
        crypt_coll_task_arrived(task, 0);
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
#ifdef CRYPT_COLL_TASK_TSAN
    task->tsan_fiber = __tsan_create_fiber(0);
#endif
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
        crypt_coll_task_run_self(task);
        task->running            = 0;
    }
    return task->done ? task->status : CRYPT_COLL_INPROGRESS;
}

crypt_coll_status_t crypt_coll_task_finalize(crypt_coll_task_t *task)
{
    if (task->posted && !task->done) {
        return CRYPT_COLL_ERR_PARAM; /* its stack is in use */
    }
#ifdef CRYPT_COLL_TASK_TSAN
    __tsan_destroy_fiber(task->tsan_fiber);
#endif
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
