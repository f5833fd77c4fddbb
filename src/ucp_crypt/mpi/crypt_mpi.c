/*
 * The MPI adapter, shared by its two front ends: PMPI interposition for any
 * MPI library (crypt_pmpi.c, built once per MPI ABI) and Open MPI's coll
 * framework (coll_crypt.c). MPI_Allgather through the encrypted all-gather
 * algorithms, MPI_Allgatherv, MPI_Bcast, MPI_Allreduce, MPI_Alltoall and
 * MPI_Alltoallv sealed once per node (crypt_coll.h). Each entry point returns CRYPT_MPI_DECLINED for
 * what it does not handle, and the front end calls the library's own
 * collective (PMPI_*, or the coll module below ours).
 *
 * Per communicator (cached as an attribute): a duplicate for isolation, a
 * team made by the core's bootstrap with the MPI library as its
 * out-of-band all-gather (rank 0's team salt; nodes from each rank's host
 * identity, or UCX_CRYPT_COLL_NODES to emulate nodes on one machine, given
 * to MPI_COMM_WORLD's ranks), the job secret (UCX_CRYPT_KEY_FILE, the
 * transport's), the node's ranks split off, and, for HS1/HS2, a node-shared
 * segment (POSIX shared memory). Setting a team up calls MPI collectives on
 * the communicator; while it does, every entry point declines, so that a
 * front end inside the library (the coll component) does not recurse.
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
 * The lane: frames between nodes do not go through the MPI library, which
 * may itself run over the crypt transport and would seal them a second
 * time; they take the plugin's collective lane (crypt_lane.h: the network
 * transport under crypt, carrying nothing but sealed frames). Data inside
 * a node goes through the MPI library (shared memory). Without the plugin
 * (the MPI library's transport does not encrypt) or with
 * UCX_CRYPT_COLL_LANE=transport, frames go through the MPI library too.
 */
#include "crypt_mpi.h"
#include "ucp_crypt/coll/crypt_coll.h"
#include "uct_crypt/api/uct_crypt_lane.h"
#include "keyex/keyex.h"

#include <mpi.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CRYPT_MPI_TAG          0x5ec2

typedef struct crypt_mpi_request crypt_mpi_request_t;

typedef struct crypt_mpi_team {
    struct crypt_mpi_team *next; /* every live team, for MPI_Finalize */
    MPI_Comm          user_comm;  /* the attribute's owner */
    MPI_Comm          comm;       /* our duplicate */
    MPI_Comm          node_comm;
    void              *shm;       /* the node's segment (HS1/HS2), mapped */
    size_t            shm_size;
    int               tamper;     /* TESTING ONLY: UCX_CRYPT_COLL_FAULT */
    int               *lane_peer; /* per rank on another node; NULL: no lane */
    uint64_t          lane_team;  /* tells this team's messages apart */
    crypt_mpi_request_t *queue;   /* nonblocking calls, in post order */
    crypt_mpi_request_t **queue_tail;
    crypt_coll_team_t team;
} crypt_mpi_team_t;

/* the process's collective lane, shared by its teams */
static const uct_crypt_lane_ops_t *crypt_mpi_lane_ops;
static uct_crypt_lane_t *crypt_mpi_lane;
static int crypt_mpi_lane_tried;

/* > 0 while a team is set up or freed: its MPI calls reach the library's
 * own collectives */
static int crypt_mpi_bootstrapping;

static int crypt_mpi_keyval = MPI_KEYVAL_INVALID;
static int crypt_mpi_self_keyval = MPI_KEYVAL_INVALID;
static crypt_mpi_team_t *crypt_mpi_teams;

static void crypt_mpi_die(MPI_Comm comm, const char *what)
{
    int rank = -1;

    PMPI_Comm_rank(comm, &rank);
    fprintf(stderr, "ucx-crypt: rank %d: %s\n", rank, what);
    fflush(stderr);
    /* the launcher tears the job down on the first abort and may drop what
     * it had not forwarded yet: give it the reason first (MPICH's hydra
     * lost it about one run in six) */
    usleep(200 * 1000);
    PMPI_Abort(comm, 1);
}

static int crypt_mpi_on_lane(const crypt_mpi_team_t *t, int peer)
{
    return (peer >= 0) && (t->lane_peer != NULL) && (t->lane_peer[peer] >= 0);
}

/* One exchange on a team's pipes: frames between nodes on the lane (where
 * there is one), everything else through the MPI library. */
typedef struct crypt_mpi_xfer {
    MPI_Request reqs[2];
    int         n;
    int         dst, src;
    void        *rbuf;
    size_t      rlen;
    const void  *sbuf;        /* the lane send's */
    size_t      slen;
    int         send_started;
    int         sent, received, mpi_done, failed;
    uint8_t     *forged;
} crypt_mpi_xfer_t;

/* the lane send of an exchange. The lane carries one message per peer at
 * a time, and another team's task may have one in flight to the same
 * peer: ours starts once the peer is idle. */
static void crypt_mpi_xfer_send(crypt_mpi_team_t *t, crypt_mpi_xfer_t *x)
{
    const uct_crypt_lane_ops_t *lane = crypt_mpi_lane_ops;
    int peer = t->lane_peer[x->dst], r;

    if (x->sent || x->failed) {
        return;
    }
    if (!x->send_started) {
        if ((r = lane->send_idle(crypt_mpi_lane, peer)) == 0) {
            return; /* busy with another team's message */
        }
        if ((r < 0) ||
            (lane->send(crypt_mpi_lane, peer, t->lane_team, (uint32_t)t->team.rank,
                        x->sbuf, x->slen, CRYPT_COLL_FRAME_OVERHEAD) != 0)) {
            x->failed = 1;
            return;
        }
        x->send_started = 1;
    }
    /* idle: ours is handed over (a later one of another team may be too) */
    if ((r = lane->send_idle(crypt_mpi_lane, peer)) != 0) {
        x->failed |= (r < 0);
        x->sent    = 1;
    }
}

/* the lane receive of an exchange: once it returned 0, the lane may write
 * into rbuf until it returns non-zero or is cancelled (crypt_lane.h) */
static void crypt_mpi_xfer_recv(crypt_mpi_team_t *t, crypt_mpi_xfer_t *x)
{
    int r;

    if (!x->received && !x->failed &&
        ((r = crypt_mpi_lane_ops->recv(crypt_mpi_lane, t->lane_peer[x->src],
                                       t->lane_team, (uint32_t)x->src, x->rbuf,
                                       x->rlen)) != 0)) {
        x->failed  |= (r < 0);
        x->received = 1;
    }
}

static int crypt_mpi_xfer_post(void *ctx, int dst, const void *sbuf, size_t slen,
                               int src, void *rbuf, size_t rlen, void **handle)
{
    crypt_mpi_team_t *t = ctx;
    int send_on_lane = crypt_mpi_on_lane(t, dst);
    int recv_on_lane = crypt_mpi_on_lane(t, src);
    crypt_mpi_xfer_t *x;

    if ((slen > (size_t)0x7fffffff) || (rlen > (size_t)0x7fffffff) ||
        ((x = calloc(1, sizeof(*x))) == NULL)) {
        return -1;
    }
    x->dst      = dst;
    x->src      = src;
    x->rbuf     = rbuf;
    x->rlen     = rlen;
    x->sent     = !send_on_lane;
    x->received = !recv_on_lane;
#if UCX_CRYPT_FAULT_INJECTION
    if (t->tamper && (dst >= 0) && (slen > 0) &&
        (t->team.node_of[dst] != t->team.node_of[t->team.rank]) &&
        ((x->forged = malloc(slen)) != NULL)) {
        /* TESTING ONLY: an attacker on the wire flips the frame's last bit */
        memcpy(x->forged, sbuf, slen);
        x->forged[slen - 1] ^= 1;
        sbuf      = x->forged;
        t->tamper = 0;
    }
#endif
    if ((src >= 0) && !recv_on_lane) {
        PMPI_Irecv(rbuf, (int)rlen, MPI_BYTE, src, CRYPT_MPI_TAG, t->comm,
                   &x->reqs[x->n++]);
    }
    if ((dst >= 0) && !send_on_lane) {
        PMPI_Isend((void*)sbuf, (int)slen, MPI_BYTE, dst, CRYPT_MPI_TAG, t->comm,
                   &x->reqs[x->n++]);
    }
    x->sbuf = sbuf;
    x->slen = slen;
    if (send_on_lane) {
        crypt_mpi_xfer_send(t, x);
    }
    *handle = x;
    crypt_mpi_xfer_recv(t, x); /* posted before the frame comes: no copy */
    return 0;
}

/* 1: done, 0: in flight, -1: failed; the handle is released unless 0.
 * Both directions move at once: the peer may be doing the same. */
static int crypt_mpi_xfer_test(void *ctx, void *handle)
{
    crypt_mpi_team_t *t = ctx;
    const uct_crypt_lane_ops_t *lane = crypt_mpi_lane_ops;
    crypt_mpi_xfer_t *x = handle;
    MPI_Status stats[2];
    int ret;

    if (!x->failed && !x->mpi_done) {
        x->failed = (PMPI_Testall(x->n, x->reqs, &x->mpi_done, stats) != MPI_SUCCESS);
    }
    if (!x->failed && (!x->sent || !x->received)) {
        lane->progress(crypt_mpi_lane);
        crypt_mpi_xfer_send(t, x);
        crypt_mpi_xfer_recv(t, x);
    }
    if (!x->failed && !(x->sent && x->received && x->mpi_done)) {
        return 0;
    }
    if (x->failed && !x->mpi_done) {
        /* never leave MPI writing into a buffer the caller gets back */
        PMPI_Waitall(x->n, x->reqs, stats);
    }
    if (x->failed && crypt_mpi_on_lane(t, x->src)) {
        /* nor the lane */
        lane->recv_cancel(crypt_mpi_lane, t->lane_team, (uint32_t)x->src);
    }
    ret = x->failed ? -1 : 1;
    free(x->forged);
    free(x);
    return ret;
}

static const crypt_coll_nb_ops_t crypt_mpi_nb_ops = {
    .post = crypt_mpi_xfer_post,
    .test = crypt_mpi_xfer_test
};

static int crypt_mpi_sendrecv(void *ctx, int dst, const void *sbuf, size_t slen,
                              int src, void *rbuf, size_t rlen)
{
    int spins = 0, ret;
    void *handle;

    if (crypt_mpi_xfer_post(ctx, dst, sbuf, slen, src, rbuf, rlen, &handle) != 0) {
        return -1;
    }
    while ((ret = crypt_mpi_xfer_test(ctx, handle)) == 0) {
        if ((++spins & 0xf) == 0) {
            /* ranks may outnumber cores, or share one (emulated hosts,
             * oversubscription): the peer we wait for may need ours */
            sched_yield();
        }
    }
    return (ret > 0) ? 0 : -1;
}

static void crypt_mpi_team_drain(crypt_mpi_team_t *t);

static int crypt_mpi_team_free(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    crypt_mpi_team_t *t = attr;

    crypt_mpi_team_t **pp;

    (void)comm; (void)keyval; (void)extra;
    crypt_mpi_team_drain(t); /* MPI completes what was posted before a free */
    ++crypt_mpi_bootstrapping;
    for (pp = &crypt_mpi_teams; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    crypt_coll_team_cleanup(&t->team);
    free(t->lane_peer);
    if (t->shm != NULL) {
        munmap(t->shm, t->shm_size);
    }
    PMPI_Comm_free(&t->node_comm);
    PMPI_Comm_free(&t->comm);
    free(t);
    --crypt_mpi_bootstrapping;
    return MPI_SUCCESS;
}

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still
 * works (MPI 3.1 section 8.7.1): free every team there, not later from
 * MPI_COMM_WORLD's attribute, when windows can no longer be freed. */
static int crypt_mpi_finalize_hook(MPI_Comm comm, int keyval, void *attr,
                                    void *extra)
{
    (void)comm; (void)keyval; (void)attr; (void)extra;
    while (crypt_mpi_teams != NULL) {
        PMPI_Comm_delete_attr(crypt_mpi_teams->user_comm, crypt_mpi_keyval);
    }
    if (crypt_mpi_lane != NULL) {
        crypt_mpi_lane_ops->close(crypt_mpi_lane);
        crypt_mpi_lane = NULL;
    }
    return MPI_SUCCESS;
}

/* the bootstrap's out-of-band all-gather: the MPI library, on our dup */
static int crypt_mpi_oob_allgather(void *ctx, const void *sbuf, void *rbuf,
                                   size_t len)
{
    crypt_mpi_team_t *t = ctx;

    return (PMPI_Allgather(sbuf, (int)len, MPI_BYTE, rbuf, (int)len, MPI_BYTE,
                           t->comm) == MPI_SUCCESS) ? 0 : -1;
}

/* The process's lane, opened once: NULL where there is none or where the
 * user asked for frames through the MPI library. */
static uct_crypt_lane_t *crypt_mpi_lane_get(void)
{
    const char *mode = getenv("UCX_CRYPT_COLL_LANE");
    char error[160];

    if (crypt_mpi_lane_tried) {
        return crypt_mpi_lane;
    }
    crypt_mpi_lane_tried = 1;
    if ((mode != NULL) && !strcmp(mode, "transport")) {
        return NULL;
    }
    if ((mode != NULL) && (mode[0] != '\0') && strcmp(mode, "auto")) {
        fprintf(stderr, "ucx-crypt: UCX_CRYPT_COLL_LANE=%s is not one of auto, "
                "transport\n", mode);
        exit(1);
    }
    crypt_mpi_lane_ops = dlsym(RTLD_DEFAULT, UCT_CRYPT_LANE_OPS_SYMBOL);
    if ((crypt_mpi_lane_ops == NULL) ||
        (crypt_mpi_lane_ops->version != UCT_CRYPT_LANE_OPS_VERSION)) {
        return NULL; /* no crypt plugin: the MPI library's wire is not sealed */
    }
    crypt_mpi_lane = crypt_mpi_lane_ops->open(error, sizeof(error));
    if ((crypt_mpi_lane == NULL) && getenv("UCX_CRYPT_COLL_VERBOSE")) {
        fprintf(stderr, "ucx-crypt: no collective lane (%s): frames between "
                "nodes go through the MPI library and its transport seals them "
                "again\n", error);
    }
    return crypt_mpi_lane;
}

/* Every rank of the team on the lane, or none: a frame sent on the lane
 * must be received from it. Peers on the same node are never on it. The
 * lane's addresses are opaque here: each rank sends its length with it. */
typedef struct {
    uint32_t len;
    uint8_t  addr[UCT_CRYPT_LANE_ADDR_MAX];
} crypt_mpi_lane_addr_t;

static void crypt_mpi_lane_setup(crypt_mpi_team_t *t, MPI_Comm comm)
{
    int rank = t->team.rank, size = t->team.size, ok, all, r;
    crypt_mpi_lane_addr_t *addrs;

    ok    = (crypt_mpi_lane_get() != NULL);
    addrs = calloc((size_t)size, sizeof(*addrs));
    t->lane_peer = malloc(sizeof(int) * (size_t)size);
    if ((addrs == NULL) || (t->lane_peer == NULL)) {
        crypt_mpi_die(comm, "out of memory");
    }
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, t->comm);
    if (all) {
        /* through the MPI library: authenticated by its transport */
        addrs[rank].len = (uint32_t)crypt_mpi_lane_ops->address(
                crypt_mpi_lane, addrs[rank].addr, sizeof(addrs[rank].addr));
        PMPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, addrs, (int)sizeof(*addrs),
                       MPI_BYTE, t->comm);
        ok = (addrs[rank].len > 0);
        for (r = 0; r < size; ++r) {
            t->lane_peer[r] = -1;
            if (ok && (t->team.node_of[r] != t->team.node_of[rank])) {
                ok = (addrs[r].len > 0) &&
                     (addrs[r].len <= sizeof(addrs[r].addr));
                t->lane_peer[r] = ok ? crypt_mpi_lane_ops->connect(
                        crypt_mpi_lane, addrs[r].addr, addrs[r].len) : -1;
                ok = ok && (t->lane_peer[r] >= 0);
            }
        }
        PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, t->comm);
    }
    if (!all) {
        free(t->lane_peer);
        t->lane_peer = NULL;
    }
    free(addrs);
}

/* Emulated nodes are assigned to MPI_COMM_WORLD's ranks, so that every
 * communicator sees the same placement; a communicator's nodes are then
 * numbered in the order its ranks first meet them. */
static void crypt_mpi_emulated_nodes(MPI_Comm comm, int size, int *node_of)
{
    int world_size, r, n, next = 0, *world_node, *ranks, *world_ranks, *renumber;
    MPI_Group group, world_group;
    char error[256];

    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    world_node  = malloc(sizeof(int) * (size_t)world_size);
    renumber    = malloc(sizeof(int) * (size_t)world_size);
    ranks       = malloc(sizeof(int) * (size_t)size);
    world_ranks = malloc(sizeof(int) * (size_t)size);
    if ((world_node == NULL) || (renumber == NULL) || (ranks == NULL) ||
        (world_ranks == NULL)) {
        crypt_mpi_die(comm, "out of memory");
    }
    if (crypt_coll_node_map_from_env(world_size, world_node, error,
                                     sizeof(error)) != 0) {
        crypt_mpi_die(comm, error);
    }
    PMPI_Comm_group(comm, &group);
    PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
    for (r = 0; r < size; ++r) {
        ranks[r] = r;
    }
    PMPI_Group_translate_ranks(group, size, ranks, world_group, world_ranks);
    for (n = 0; n < world_size; ++n) {
        renumber[n] = -1;
    }
    for (r = 0; r < size; ++r) {
        n = world_node[world_ranks[r]];
        if (renumber[n] < 0) {
            renumber[n] = next++;
        }
        node_of[r] = renumber[n];
    }
    PMPI_Group_free(&group);
    PMPI_Group_free(&world_group);
    free(world_node);
    free(renumber);
    free(ranks);
    free(world_ranks);
}

/* The node's shared segment for HS1/HS2: POSIX shared memory, created by
 * the node's first rank (mode 0600), mapped by the others, unlinked once
 * all have it. Not MPI_Win_allocate_shared: MPICH 4.0.2 over UCX 1.13
 * hangs in MPI_Finalize now and then after a shared window was freed
 * (plaintext too: MPI_Win_allocate_shared, MPI_Win_free, MPI_Finalize is
 * enough), and Open MPI's osc ucx has no shared windows. A random token
 * written by the first rank and read back by the others proves that they
 * share it (a hand-made node map could join ranks of two hosts). HS1/HS2
 * only where every rank of the team has its node's segment: the choice of
 * algorithm must be the same on every rank. */
static void crypt_mpi_node_shm(crypt_mpi_team_t *t)
{
    size_t size = crypt_coll_node_shm_size(t->team.size, CRYPT_COLL_HS_DEFAULT_MAX);
    struct {
        char    name[48];
        uint8_t token[16];
    } id;
    void *base = MAP_FAILED;
    int node_rank, ok = 0, all = 0, fd = -1;

    PMPI_Comm_rank(t->node_comm, &node_rank);
    memset(&id, 0, sizeof(id));
    if (node_rank == 0) {
        uint64_t nonce;
        if ((RAND_bytes(id.token, sizeof(id.token)) == 1) &&
            (RAND_bytes((unsigned char*)&nonce, sizeof(nonce)) == 1)) {
            snprintf(id.name, sizeof(id.name), "/ucx-crypt-coll.%d.%016llx",
                     (int)getpid(), (unsigned long long)nonce);
            fd = shm_open(id.name, O_CREAT | O_EXCL | O_RDWR, 0600);
        }
        if ((fd >= 0) && (ftruncate(fd, (off_t)size) != 0)) {
            close(fd);
            shm_unlink(id.name);
            fd = -1;
        }
        if (fd < 0) {
            id.name[0] = '\0'; /* no segment on this node */
        }
    } else {
        PMPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, t->node_comm);
        if (id.name[0] != '\0') {
            fd = shm_open(id.name, O_RDWR, 0);
        }
    }
    if (node_rank == 0) {
        if (fd >= 0) {
            base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (base != MAP_FAILED) {
                memcpy(base, id.token, sizeof(id.token));
            }
        }
        PMPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, t->node_comm);
    } else if (fd >= 0) {
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (fd >= 0) {
        close(fd);
    }
    ok = (base != MAP_FAILED) && !memcmp(base, id.token, sizeof(id.token));
    PMPI_Barrier(t->node_comm); /* everyone mapped it (or gave up) */
    if ((node_rank == 0) && (id.name[0] != '\0')) {
        shm_unlink(id.name);
    }
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, t->comm);
    if (base != MAP_FAILED) {
        t->shm      = base;
        t->shm_size = size;
    }
    if (all) {
        crypt_coll_team_set_node_shm(&t->team, base, size);
    }
}

static crypt_mpi_team_t *crypt_mpi_team(MPI_Comm comm)
{
    uint8_t secret[KEYEX_JOB_SECRET_LEN];
    crypt_coll_oob_t oob;
    const char *key_file = getenv("UCX_CRYPT_KEY_FILE");
    int rank, size, found, *node_of = NULL;
    crypt_mpi_team_t *t;
    char error[256];

    if (crypt_mpi_keyval == MPI_KEYVAL_INVALID) {
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, crypt_mpi_team_free,
                                &crypt_mpi_keyval, NULL);
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, crypt_mpi_finalize_hook,
                                &crypt_mpi_self_keyval, NULL);
        PMPI_Comm_set_attr(MPI_COMM_SELF, crypt_mpi_self_keyval, NULL);
    }
    PMPI_Comm_get_attr(comm, crypt_mpi_keyval, &t, &found);
    if (found) {
        return t;
    }

    ++crypt_mpi_bootstrapping;
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &size);
    if ((key_file == NULL) || (key_file[0] == '\0')) {
        crypt_mpi_die(comm, "UCX_CRYPT_KEY_FILE is not set: make a job secret "
                       "with ucx-crypt-keygen and point UCX_CRYPT_KEY_FILE at it");
    }
    if (keyex_job_secret_load(key_file, secret, error, sizeof(error)) != KEYEX_OK) {
        crypt_mpi_die(comm, error);
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        crypt_mpi_die(comm, "out of memory");
    }
    PMPI_Comm_dup(comm, &t->comm);
#if UCX_CRYPT_FAULT_INJECTION
    if ((getenv("UCX_CRYPT_COLL_FAULT") != NULL) &&
        (atoi(getenv("UCX_CRYPT_COLL_FAULT")) == rank)) {
        fprintf(stderr, "ucx-crypt: TESTING: rank %d forges its first frame to "
                "another node\n", rank);
        t->tamper = 1;
    }
#endif

    /* nodes: emulated (given to MPI_COMM_WORLD's ranks), or the core's
     * host identity gathered through the OOB (NULL) */
    if (getenv("UCX_CRYPT_COLL_NODES") != NULL) {
        node_of = malloc(sizeof(int) * (size_t)size);
        if (node_of == NULL) {
            crypt_mpi_die(comm, "out of memory");
        }
        crypt_mpi_emulated_nodes(comm, size, node_of);
    }

    /* the core's bootstrap (fresh team salt from rank 0) with the MPI
     * library as the out-of-band all-gather */
    oob.allgather = crypt_mpi_oob_allgather;
    oob.ctx       = t;
    oob.rank      = rank;
    oob.size      = size;
    if (crypt_coll_team_create(&t->team, &oob, node_of, secret,
                               CRYPT_AEAD_BACKEND_AUTO, crypt_mpi_sendrecv, t) !=
        CRYPT_COLL_OK) {
        crypt_mpi_die(comm, "cannot set up the collective keys");
    }
    OPENSSL_cleanse(secret, sizeof(secret));
    free(node_of);
    crypt_coll_team_set_nb(&t->team, &crypt_mpi_nb_ops);
    t->queue_tail = &t->queue;
    PMPI_Comm_split(t->comm, t->team.node_of[rank], rank, &t->node_comm);
    memcpy(&t->lane_team, t->team.salt, sizeof(t->lane_team));
    crypt_mpi_lane_setup(t, comm);

    crypt_mpi_node_shm(t);
    t->user_comm     = comm;
    t->next          = crypt_mpi_teams;
    crypt_mpi_teams = t;
    PMPI_Comm_set_attr(comm, crypt_mpi_keyval, t);
    --crypt_mpi_bootstrapping;
    return t;
}

static int crypt_mpi_contiguous(MPI_Datatype type, int *size)
{
    MPI_Aint lb, extent;

    PMPI_Type_size(type, size);
    PMPI_Type_get_extent(type, &lb, &extent);
    return (extent == *size) && (lb == 0);
}

static void crypt_mpi_check(MPI_Comm comm, crypt_coll_status_t status,
                             const char *call)
{
    char what[160];

    if (status == CRYPT_COLL_ERR_AUTH) {
        snprintf(what, sizeof(what), "%s: a ciphertext from another node failed "
                 "authentication (forged, replayed or misplaced)", call);
        crypt_mpi_die(comm, what);
    } else if (status != CRYPT_COLL_OK) {
        snprintf(what, sizeof(what), "%s: the encrypted collective failed", call);
        crypt_mpi_die(comm, what);
    }
}

/* The team that encrypts on `comm`, or NULL where the library's own
 * collective is right: intercommunicators (checked by the caller's type
 * tests first) and teams on one node, which need no crypto. With
 * `may_set_up` 0, only a team that exists already (see crypt_mpi_allreduce). */
static crypt_mpi_team_t *crypt_mpi_encrypting_team(MPI_Comm comm, int may_set_up)
{
    crypt_mpi_team_t *t;
    int found;

    if (may_set_up) {
        t = crypt_mpi_team(comm);
    } else if ((crypt_mpi_keyval == MPI_KEYVAL_INVALID) ||
               (PMPI_Comm_get_attr(comm, crypt_mpi_keyval, &t, &found) !=
                MPI_SUCCESS) || !found) {
        return NULL;
    }
    return (t->team.num_nodes == 1) ? NULL : t;
}

/* Not ours: a team being set up (its own calls), intercommunicators */
static int crypt_mpi_declines(MPI_Comm comm)
{
    int inter = 0;

    if (crypt_mpi_bootstrapping) {
        return 1;
    }
    PMPI_Comm_test_inter(comm, &inter);
    return inter;
}

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
    uint64_t lane_sent = 0, lane_received = 0;
    char what[64];

    if (getenv("UCX_CRYPT_COLL_VERBOSE") == NULL) {
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
        crypt_mpi_lane_ops->counters(crypt_mpi_lane, &lane_sent, &lane_received);
    }
    fprintf(stderr, "ucx-crypt: %s on the %s lane (sent there so far %llu): "
            "sealed %llu opened %llu plaintext across nodes %llu\n", what,
            (t->lane_peer != NULL) ? "collective" : "MPI",
            (unsigned long long)lane_sent,
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

static void crypt_mpi_team_drain(crypt_mpi_team_t *t)
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
                                                  getenv("UCX_CRYPT_COLL_TUNE"));
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
