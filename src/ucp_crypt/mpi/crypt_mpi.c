/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The MPI adapter, shared by its two front ends: PMPI interposition for any
 * MPI library (crypt_pmpi.c, built once per MPI ABI) and Open MPI's coll
 * framework (coll_crypt.c). MPI_Allgather through the encrypted all-gather
 * algorithms, MPI_Allgatherv, MPI_Bcast, MPI_Allreduce, MPI_Alltoall and
 * MPI_Alltoallv sealed once per node (crypt_coll.h). Each entry point
 * returns CRYPT_MPI_DECLINED for what it does not handle, and the front end
 * calls the library's own collective (PMPI_*, or the coll module below
 * ours).
 *
 * Algorithm choice (a score table, overridable UCC-style with
 * UCX_CRYPT_COLL_TUNE="allgather:LO-HI:ALG[,LO-HI:ALG...]", sizes with
 * k/m suffixes, "inf"): one node, no crypto (the library's own
 * all-gather); below 4 KiB O-RD2 (fewest opens), up to 64 KiB HS2 (node
 * shared memory), above C-Ring (the paper's Table III picks). Anything the
 * adapter does not handle (non-contiguous or mismatched types, counts
 * beyond an int, intercommunicators) is declined.
 *
 * A frame that fails authentication aborts the job (MPI_Abort) with the
 * reason on stderr: a collective never returns forged data.
 * UCX_CRYPT_COLL_FAULT=R (TESTING ONLY, test builds: configure
 * --enable-fault-injection) makes rank R forge its first frame to another
 * node.
 *
 * The team of a communicator is in crypt_mpi_team.c, its pipes (the
 * collective lane) in crypt_mpi_pipe.c.
 */
#include "crypt_mpi_priv.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one call, blocking or queued ------------------------------------------- */

typedef struct {
    MPI_Datatype type;
    MPI_Op       op;
} crypt_mpi_reduce_arg_t;

/* What an entry point hands over: the core's arguments and what they
 * point to that must live as long as the call (byte counts, the op) */
typedef struct {
    crypt_mpi_team_t       *t;
    MPI_Comm               comm;      /* the user's: errors abort it */
    int                    nonblocking;
    crypt_coll_args_t      args;
    size_t                 *arrays;   /* counts and displacements, owned */
    crypt_mpi_reduce_arg_t reduce;
} crypt_mpi_call_t;

struct crypt_mpi_request {
    crypt_mpi_request_t *next;        /* the team's queue */
    crypt_mpi_call_t    call;
    crypt_coll_task_t   *task;        /* NULL until it is the team's turn */
    crypt_mpi_nb_t      nb;
};

static void crypt_mpi_reduce(void *inout, const void *in, size_t count, void *arg)
{
    crypt_mpi_reduce_arg_t *o = arg;

    PMPI_Reduce_local((void*)in, inout, (int)count, o->type, o->op);
}

static void crypt_mpi_call_start(crypt_mpi_call_t *c)
{
    memset(&c->t->team.counters, 0, sizeof(c->t->team.counters));
    c->args.op_arg = &c->reduce; /* the call may have moved since */
}

/* The MPI call `c` stands for, as errors name it */
static const char *crypt_mpi_call_name(const crypt_mpi_call_t *c)
{
    static const char *names[CRYPT_COLL_LAST][2] = {
        [CRYPT_COLL_ALLGATHER]  = {"MPI_Allgather",  "MPI_Iallgather"},
        [CRYPT_COLL_BCAST]      = {"MPI_Bcast",      "MPI_Ibcast"},
        [CRYPT_COLL_ALLREDUCE]  = {"MPI_Allreduce",  "MPI_Iallreduce"},
        [CRYPT_COLL_ALLTOALL]   = {"MPI_Alltoall",   "MPI_Ialltoall"},
        [CRYPT_COLL_ALLGATHERV] = {"MPI_Allgatherv", "MPI_Iallgatherv"},
        [CRYPT_COLL_ALLTOALLV]  = {"MPI_Alltoallv",  "MPI_Ialltoallv"}
    };

    return names[c->args.coll][c->nonblocking];
}

/* UCX_CRYPT_COLL_VERBOSE: what a call did, on which lane, with its crypto
 * counts (the tests read these lines; blocking bcast, allreduce and
 * alltoall print none) */
static void crypt_mpi_verbose(const crypt_mpi_call_t *c)
{
    const crypt_mpi_team_t *t = c->t;
    const crypt_coll_args_t *a = &c->args;
    const char *i = c->nonblocking ? "i" : "";
    uint64_t lane_sent = 0, lane_received = 0, lane_refused = 0;
    char what[64];

    if (!crypt_mpi_config(c->comm)->verbose) {
        return;
    }
    switch (a->coll) {
    case CRYPT_COLL_ALLGATHER:
        snprintf(what, sizeof(what), "%sallgather %zu B by %s", i, a->m,
                 crypt_allgather_alg_name((crypt_allgather_alg_t)a->alg));
        break;
    case CRYPT_COLL_ALLGATHERV:
    case CRYPT_COLL_ALLTOALLV:
        snprintf(what, sizeof(what), "%s%s", i,
                 (a->coll == CRYPT_COLL_ALLGATHERV) ? "allgatherv" : "alltoallv");
        break;
    default: /* bcast, allreduce, alltoall: the nonblocking forms only */
        if (!c->nonblocking) {
            return;
        }
        /* MPI_Ibcast -> "ibcast" */
        snprintf(what, sizeof(what), "i%s %zu B",
                 crypt_mpi_call_name(c) + sizeof("MPI_I") - 1,
                 (a->coll == CRYPT_COLL_ALLREDUCE) ? a->m * a->elem_size : a->m);
        break;
    }
    if (t->lane_peer != NULL) {
        crypt_mpi_lane_counters(&lane_sent, &lane_received, &lane_refused);
    }
    fprintf(stderr, "ucx-crypt: %s on the %s lane (sent there so far %llu, "
            "chunks refused %llu): sealed %llu opened %llu plaintext across "
            "nodes %llu\n", what, (t->lane_peer != NULL) ? "collective" : "MPI",
            (unsigned long long)lane_sent, (unsigned long long)lane_refused,
            (unsigned long long)t->team.counters.bytes_sealed,
            (unsigned long long)t->team.counters.bytes_opened,
            (unsigned long long)t->team.counters.inter_node_plaintext_bytes);
}

static void crypt_mpi_call_end(crypt_mpi_call_t *c, crypt_coll_status_t status)
{
    crypt_mpi_check(c->comm, status, crypt_mpi_call_name(c));
    crypt_mpi_verbose(c);
    free(c->arrays);
}

/* Moves the team's oldest nonblocking calls on; returns how many ended */
static int crypt_mpi_team_progress(crypt_mpi_team_t *t)
{
    crypt_mpi_request_t *req;
    crypt_coll_status_t status;
    int ended = 0;

    while ((req = t->queue) != NULL) {
        if (req->task == NULL) {
            crypt_mpi_call_start(&req->call);
            if (crypt_coll_task_init(&t->team, &req->call.args, NULL,
                                     &req->task) != CRYPT_COLL_OK) {
                crypt_mpi_die(req->call.comm, "cannot start a nonblocking "
                              "collective (out of memory?)");
            }
            status = crypt_coll_task_post(req->task);
        } else {
            status = crypt_coll_task_test(req->task);
        }
        if (status == CRYPT_COLL_INPROGRESS) {
            break;
        }
        crypt_coll_task_finalize(req->task);
        crypt_mpi_call_end(&req->call, status);
        if ((t->queue = req->next) == NULL) {
            t->queue_tail = &t->queue;
        }
        req->nb.complete(req->nb.arg);
        free(req);
        ++ended;
    }
    return ended;
}

static int crypt_mpi_progressing;

int crypt_mpi_progress(void)
{
    crypt_mpi_team_t *t;
    int ended = 0;

    if (crypt_mpi_progressing) {
        return 0; /* our own PMPI calls run the library's progress loop */
    }
    crypt_mpi_progressing = 1;
    for (t = crypt_mpi_teams; t != NULL; t = t->next) {
        if (t->queue != NULL) {
            ended += crypt_mpi_team_progress(t);
        }
    }
    crypt_mpi_progressing = 0;
    return ended;
}

void crypt_mpi_team_drain(crypt_mpi_team_t *t)
{
    int spins = 0;

    while (t->queue != NULL) {
        crypt_mpi_progress();
        if ((++spins & 0xf) == 0) {
            sched_yield();
        }
    }
}

/* Run `c` now (nb NULL) or queue it on its team */
static int crypt_mpi_issue(crypt_mpi_call_t *c, const crypt_mpi_nb_t *nb)
{
    crypt_mpi_request_t *req;

    c->nonblocking = (nb != NULL);
    if ((c->args.coll == CRYPT_COLL_ALLGATHER) && (c->args.alg < 0)) {
        c->args.alg = crypt_coll_allgather_select(&c->t->team, c->args.m,
                                                  crypt_mpi_config(c->comm)->tune);
    }
    if (nb == NULL) {
        crypt_mpi_team_drain(c->t); /* what was posted before goes first */
        crypt_mpi_call_start(c);
        crypt_mpi_call_end(c, crypt_coll_run(&c->t->team, &c->args));
        return MPI_SUCCESS;
    }
    if ((req = calloc(1, sizeof(*req))) == NULL) {
        crypt_mpi_die(c->comm, "out of memory");
    }
    req->call      = *c;
    req->nb        = *nb;
    *c->t->queue_tail = req;
    c->t->queue_tail  = &req->next;
    crypt_mpi_progress(); /* start it if it is the team's turn */
    return MPI_SUCCESS;
}

/* The entry points: only what the core layer handles (contiguous types,
 * matching lengths, intracommunicators over several nodes) */

int crypt_mpi_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype,
                        MPI_Comm comm, const crypt_mpi_nb_t *nb)
{
    crypt_mpi_call_t c = {.comm = comm};
    int rsize, ssize = 0;

    if (crypt_mpi_declines(comm) || !crypt_mpi_contiguous(recvtype, &rsize) ||
        ((sendbuf != MPI_IN_PLACE) &&
         (!crypt_mpi_contiguous(sendtype, &ssize) ||
          ((size_t)sendcount * (size_t)ssize != (size_t)recvcount * (size_t)rsize))) ||
        ((c.t = crypt_mpi_encrypting_team(comm, 1)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    c.args.coll = CRYPT_COLL_ALLGATHER;
    c.args.alg  = -1;
    c.args.sbuf = (sendbuf == MPI_IN_PLACE) ? NULL : sendbuf;
    c.args.rbuf = recvbuf;
    c.args.m    = (size_t)recvcount * (size_t)rsize;
    return crypt_mpi_issue(&c, nb);
}

/* ---- MPI_Bcast, MPI_Allreduce, MPI_Alltoall: sealed once per node ------------ */

int crypt_mpi_bcast(void *buffer, int count, MPI_Datatype datatype, int root,
                    MPI_Comm comm, const crypt_mpi_nb_t *nb)
{
    crypt_mpi_call_t c = {.comm = comm};
    int tsize;

    if (crypt_mpi_declines(comm) || !crypt_mpi_contiguous(datatype, &tsize) ||
        ((c.t = crypt_mpi_encrypting_team(comm, 1)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    c.args.coll = CRYPT_COLL_BCAST;
    c.args.rbuf = buffer;
    c.args.m    = (size_t)count * (size_t)tsize;
    c.args.root = root;
    return crypt_mpi_issue(&c, nb);
}

int crypt_mpi_allreduce(const void *sendbuf, void *recvbuf, int count,
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                        const crypt_mpi_nb_t *nb)
{
    crypt_mpi_call_t c = {.comm = comm, .reduce = {datatype, op}};
    int tsize, commute = 0;

    /* Open MPI agrees on a new communicator's context id with nonblocking
     * allreduces of one MPI_INT (MAX, MIN) on the parent, from inside
     * MPI_Comm_dup/split (ompi/communicator/comm_cid.c): setting a team up
     * there would nest our own MPI_Comm_dup, which hangs. Such a call uses
     * a team that exists, and never sets one up. */
    int cid_like = (nb != NULL) && (count == 1) && (datatype == MPI_INT) &&
                   ((op == MPI_MAX) || (op == MPI_MIN));

    PMPI_Op_commutative(op, &commute);
    /* the node partials are combined in node order: commutative ops only */
    if (crypt_mpi_declines(comm) || !commute ||
        !crypt_mpi_contiguous(datatype, &tsize) ||
        ((c.t = crypt_mpi_encrypting_team(comm, !cid_like)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    c.args.coll      = CRYPT_COLL_ALLREDUCE;
    c.args.sbuf      = (sendbuf == MPI_IN_PLACE) ? NULL : sendbuf;
    c.args.rbuf      = recvbuf;
    c.args.m         = (size_t)count;
    c.args.elem_size = (size_t)tsize;
    c.args.op        = crypt_mpi_reduce;
    return crypt_mpi_issue(&c, nb);
}

int crypt_mpi_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                       void *recvbuf, int recvcount, MPI_Datatype recvtype,
                       MPI_Comm comm, const crypt_mpi_nb_t *nb)
{
    crypt_mpi_call_t c = {.comm = comm};
    int ssize, rsize;

    if (crypt_mpi_declines(comm) || (sendbuf == MPI_IN_PLACE) ||
        !crypt_mpi_contiguous(sendtype, &ssize) ||
        !crypt_mpi_contiguous(recvtype, &rsize) ||
        ((size_t)sendcount * (size_t)ssize != (size_t)recvcount * (size_t)rsize) ||
        ((c.t = crypt_mpi_encrypting_team(comm, 1)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    c.args.coll = CRYPT_COLL_ALLTOALL;
    c.args.sbuf = sendbuf;
    c.args.rbuf = recvbuf;
    c.args.m    = (size_t)recvcount * (size_t)rsize;
    return crypt_mpi_issue(&c, nb);
}

/* ---- the v-variants: per-rank lengths, in bytes for the core ---------------- */

/* counts[i] * size and displs[i] * size as bytes, for `n` ranks, into
 * out[0..n) and out[n..2n); NULL where a value is negative */
static size_t *crypt_mpi_bytes(int n, const int *counts, const int *displs,
                               int size, size_t *out)
{
    int i;

    for (i = 0; i < n; ++i) {
        if ((counts[i] < 0) || (displs[i] < 0)) {
            return NULL;
        }
        out[i]     = (size_t)counts[i] * (size_t)size;
        out[n + i] = (size_t)displs[i] * (size_t)size;
    }
    return out;
}

int crypt_mpi_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm,
                         const crypt_mpi_nb_t *nb)
{
    crypt_mpi_call_t c = {.comm = comm};
    int rsize, ssize = 0, rank, size;

    if (crypt_mpi_declines(comm) || !crypt_mpi_contiguous(recvtype, &rsize)) {
        return CRYPT_MPI_DECLINED;
    }
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &size);
    if (((sendbuf != MPI_IN_PLACE) &&
         (!crypt_mpi_contiguous(sendtype, &ssize) ||
          ((size_t)sendcount * (size_t)ssize != (size_t)recvcounts[rank] * (size_t)rsize))) ||
        ((c.arrays = malloc(sizeof(size_t) * 2 * (size_t)size)) == NULL) ||
        (crypt_mpi_bytes(size, recvcounts, displs, rsize, c.arrays) == NULL) ||
        ((c.t = crypt_mpi_encrypting_team(comm, 1)) == NULL)) {
        free(c.arrays);
        return CRYPT_MPI_DECLINED;
    }
    c.args.coll   = CRYPT_COLL_ALLGATHERV;
    c.args.sbuf   = (sendbuf == MPI_IN_PLACE) ? NULL : sendbuf;
    c.args.rbuf   = recvbuf;
    c.args.counts = c.arrays;
    c.args.displs = c.arrays + size;
    return crypt_mpi_issue(&c, nb);
}

int crypt_mpi_alltoallv(const void *sendbuf, const int sendcounts[],
                        const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
                        const int recvcounts[], const int rdispls[],
                        MPI_Datatype recvtype, MPI_Comm comm,
                        const crypt_mpi_nb_t *nb)
{
    crypt_mpi_call_t c = {.comm = comm};
    int ssize, rsize, size;

    if (crypt_mpi_declines(comm) || (sendbuf == MPI_IN_PLACE) ||
        !crypt_mpi_contiguous(sendtype, &ssize) ||
        !crypt_mpi_contiguous(recvtype, &rsize)) {
        return CRYPT_MPI_DECLINED;
    }
    PMPI_Comm_size(comm, &size);
    if (((c.arrays = malloc(sizeof(size_t) * 4 * (size_t)size)) == NULL) ||
        (crypt_mpi_bytes(size, sendcounts, sdispls, ssize, c.arrays) == NULL) ||
        (crypt_mpi_bytes(size, recvcounts, rdispls, rsize,
                         c.arrays + 2 * size) == NULL) ||
        ((c.t = crypt_mpi_encrypting_team(comm, 1)) == NULL)) {
        free(c.arrays);
        return CRYPT_MPI_DECLINED;
    }
    c.args.coll    = CRYPT_COLL_ALLTOALLV;
    c.args.sbuf    = sendbuf;
    c.args.rbuf    = recvbuf;
    c.args.counts  = c.arrays;
    c.args.displs  = c.arrays + size;
    c.args.rcounts = c.arrays + 2 * size;
    c.args.rdispls = c.arrays + 3 * size;
    return crypt_mpi_issue(&c, nb);
}
