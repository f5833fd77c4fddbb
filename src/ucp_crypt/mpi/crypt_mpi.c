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
 * transport's), the node's ranks split off, and, for HS1/HS2, a node-shared window
 * (MPI_Win_allocate_shared). Setting a team up calls MPI collectives on
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
 * UCX_CRYPT_COLL_FAULT=R (TESTING ONLY) makes rank R forge its first frame
 * to another node.
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
#include "ucp_crypt/coll/crypt_lane.h"
#include "keyex/keyex.h"

#include <mpi.h>
#include <openssl/crypto.h>

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CRYPT_MPI_TAG          0x5ec2

typedef struct crypt_mpi_team {
    struct crypt_mpi_team *next; /* every live team, for MPI_Finalize */
    MPI_Comm          user_comm;  /* the attribute's owner */
    MPI_Comm          comm;       /* our duplicate */
    MPI_Comm          node_comm;
    MPI_Win           win;
    int               tamper;     /* TESTING ONLY: UCX_CRYPT_COLL_FAULT */
    int               *lane_peer; /* per rank on another node; NULL: no lane */
    uint64_t          lane_team;  /* tells this team's messages apart */
    crypt_coll_team_t team;
} crypt_mpi_team_t;

/* the process's collective lane, shared by its teams */
static const crypt_lane_ops_t *crypt_mpi_lane_ops;
static crypt_lane_t *crypt_mpi_lane;
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
    PMPI_Abort(comm, 1);
}

static int crypt_mpi_on_lane(const crypt_mpi_team_t *t, int peer)
{
    return (peer >= 0) && (t->lane_peer != NULL) && (t->lane_peer[peer] >= 0);
}

static int crypt_mpi_sendrecv(void *ctx, int dst, const void *sbuf, size_t slen,
                               int src, void *rbuf, size_t rlen)
{
    crypt_mpi_team_t *t = ctx;
    const crypt_lane_ops_t *lane = crypt_mpi_lane_ops;
    int send_on_lane = crypt_mpi_on_lane(t, dst);
    int recv_on_lane = crypt_mpi_on_lane(t, src);
    int sent = !send_on_lane, received = !recv_on_lane, mpi_done = 0;
    MPI_Request reqs[2];
    MPI_Status stats[2];
    int n = 0, spins = 0, ret = 0, r;
    uint8_t *forged = NULL;

    if ((slen > (size_t)0x7fffffff) || (rlen > (size_t)0x7fffffff)) {
        return -1;
    }
    if (t->tamper && (dst >= 0) && (slen > 0) &&
        (t->team.node_of[dst] != t->team.node_of[t->team.rank])) {
        /* TESTING ONLY: an attacker on the wire flips the frame's last bit */
        forged = malloc(slen);
        memcpy(forged, sbuf, slen);
        forged[slen - 1] ^= 1;
        sbuf      = forged;
        t->tamper = 0;
    }
    if ((src >= 0) && !recv_on_lane) {
        PMPI_Irecv(rbuf, (int)rlen, MPI_BYTE, src, CRYPT_MPI_TAG, t->comm, &reqs[n++]);
    }
    if ((dst >= 0) && !send_on_lane) {
        PMPI_Isend((void*)sbuf, (int)slen, MPI_BYTE, dst, CRYPT_MPI_TAG, t->comm,
                   &reqs[n++]);
    }
    if (send_on_lane &&
        (lane->send(crypt_mpi_lane, t->lane_peer[dst], t->lane_team,
                    (uint32_t)t->team.rank, sbuf, slen,
                    CRYPT_COLL_FRAME_OVERHEAD) != 0)) {
        ret = -1;
    }

    /* both directions at once: the peer may be doing the same */
    while ((ret == 0) && !(sent && received && mpi_done)) {
        if (!mpi_done) {
            ret = (PMPI_Testall(n, reqs, &mpi_done, stats) ==
                   MPI_SUCCESS) ? 0 : -1;
        }
        if (!sent || !received) {
            lane->progress(crypt_mpi_lane);
        }
        if (!sent && ((r = lane->send_idle(crypt_mpi_lane, t->lane_peer[dst])) != 0)) {
            ret  = (r < 0) ? -1 : ret;
            sent = 1;
        }
        if (!received &&
            ((r = lane->recv(crypt_mpi_lane, t->lane_peer[src], t->lane_team,
                             (uint32_t)src, rbuf, rlen)) != 0)) {
            ret      = (r < 0) ? -1 : ret;
            received = 1;
        }
        if ((++spins & 0xf) == 0) {
            /* ranks may outnumber cores, or share one (emulated hosts,
             * oversubscription): the peer we wait for may need ours */
            sched_yield();
        }
    }
    if ((ret != 0) && !mpi_done) {
        /* never leave MPI writing into a buffer the caller gets back */
        PMPI_Waitall(n, reqs, stats);
    }
    free(forged);
    return ret;
}

static int crypt_mpi_team_free(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    crypt_mpi_team_t *t = attr;

    crypt_mpi_team_t **pp;

    (void)comm; (void)keyval; (void)extra;
    ++crypt_mpi_bootstrapping;
    for (pp = &crypt_mpi_teams; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    crypt_coll_team_cleanup(&t->team);
    free(t->lane_peer);
    if (t->win != MPI_WIN_NULL) {
        PMPI_Win_free(&t->win);
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
static crypt_lane_t *crypt_mpi_lane_get(void)
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
    crypt_mpi_lane_ops = dlsym(RTLD_DEFAULT, CRYPT_LANE_OPS_SYMBOL);
    if ((crypt_mpi_lane_ops == NULL) ||
        (crypt_mpi_lane_ops->version != CRYPT_LANE_OPS_VERSION)) {
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
 * must be received from it. Peers on the same node are never on it. */
static void crypt_mpi_lane_setup(crypt_mpi_team_t *t, MPI_Comm comm)
{
    int rank = t->team.rank, size = t->team.size, ok, all, r;
    uint8_t *addrs;
    size_t len;

    ok    = (crypt_mpi_lane_get() != NULL);
    addrs = calloc((size_t)size, CRYPT_LANE_ADDR_MAX);
    t->lane_peer = malloc(sizeof(int) * (size_t)size);
    if ((addrs == NULL) || (t->lane_peer == NULL)) {
        crypt_mpi_die(comm, "out of memory");
    }
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, t->comm);
    if (all) {
        /* through the MPI library: authenticated by its transport */
        len = crypt_mpi_lane_ops->address(crypt_mpi_lane,
                                           addrs + (size_t)rank * CRYPT_LANE_ADDR_MAX,
                                           CRYPT_LANE_ADDR_MAX);
        PMPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, addrs, CRYPT_LANE_ADDR_MAX,
                       MPI_BYTE, t->comm);
        ok = (len > 0);
        for (r = 0; r < size; ++r) {
            const uint8_t *a = addrs + (size_t)r * CRYPT_LANE_ADDR_MAX;
            t->lane_peer[r] = -1;
            if (ok && (t->team.node_of[r] != t->team.node_of[rank])) {
                t->lane_peer[r] = crypt_mpi_lane_ops->connect(
                        crypt_mpi_lane, a, 2u + a[0] + a[1]);
                ok = (t->lane_peer[r] >= 0);
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

static crypt_mpi_team_t *crypt_mpi_team(MPI_Comm comm)
{
    uint8_t secret[KEYEX_JOB_SECRET_LEN];
    crypt_coll_oob_t oob;
    const char *key_file = getenv("UCX_CRYPT_KEY_FILE");
    int rank, size, found, *node_of = NULL;
    crypt_mpi_team_t *t;
    char error[256];
    MPI_Aint shm_size;
    void *shm = NULL;

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
    t->win = MPI_WIN_NULL;
    PMPI_Comm_dup(comm, &t->comm);
    if ((getenv("UCX_CRYPT_COLL_FAULT") != NULL) &&
        (atoi(getenv("UCX_CRYPT_COLL_FAULT")) == rank)) {
        fprintf(stderr, "ucx-crypt: TESTING: rank %d forges its first frame to "
                "another node\n", rank);
        t->tamper = 1;
    }

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
    PMPI_Comm_split(t->comm, t->team.node_of[rank], rank, &t->node_comm);
    memcpy(&t->lane_team, t->team.salt, sizeof(t->lane_team));
    crypt_mpi_lane_setup(t, comm);

    /* node-shared memory for HS1/HS2 */
    shm_size = (MPI_Aint)crypt_coll_node_shm_size(size, CRYPT_COLL_HS_DEFAULT_MAX);
    {
        int node_rank;
        PMPI_Comm_rank(t->node_comm, &node_rank);
        /* not every one-sided component has shared windows (Open MPI's osc
         * ucx has not): without one, HS1/HS2 are simply not chosen */
        PMPI_Comm_set_errhandler(t->node_comm, MPI_ERRORS_RETURN);
        if (PMPI_Win_allocate_shared(node_rank == 0 ? shm_size : 0, 1, MPI_INFO_NULL,
                                     t->node_comm, &shm, &t->win) == MPI_SUCCESS) {
            MPI_Aint sz;
            int disp;
            PMPI_Win_shared_query(t->win, 0, &sz, &disp, &shm);
            crypt_coll_team_set_node_shm(&t->team, shm, (size_t)sz);
        }
    }
    {
        /* HS1/HS2 only where every node has its segment: the choice of
         * algorithm must be the same on every rank */
        int have = (t->team.node_shm != NULL), all;
        PMPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, t->comm);
        if (!all) {
            crypt_coll_team_set_node_shm(&t->team, NULL, 0);
        }
    }
    t->user_comm     = comm;
    t->next          = crypt_mpi_teams;
    crypt_mpi_teams = t;
    PMPI_Comm_set_attr(comm, crypt_mpi_keyval, t);
    --crypt_mpi_bootstrapping;
    return t;
}

/* UCX_CRYPT_COLL_VERBOSE: what a call did, on which lane, with its crypto
 * counts (the tests read these lines) */
static void crypt_mpi_verbose(const crypt_mpi_team_t *t, const char *what)
{
    uint64_t lane_sent = 0, lane_received = 0;

    if (getenv("UCX_CRYPT_COLL_VERBOSE") == NULL) {
        return;
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
 * tests first) and teams on one node, which need no crypto. */
static crypt_mpi_team_t *crypt_mpi_encrypting_team(MPI_Comm comm)
{
    crypt_mpi_team_t *t = crypt_mpi_team(comm);

    if (t->team.num_nodes == 1) {
        return NULL;
    }
    memset(&t->team.counters, 0, sizeof(t->team.counters));
    return t;
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

int crypt_mpi_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype,
                        MPI_Comm comm)
{
    int rsize, ssize = 0, alg;
    crypt_mpi_team_t *t;
    size_t m;

    /* only what the core layer handles: contiguous bytes of equal length */
    if (crypt_mpi_declines(comm) || !crypt_mpi_contiguous(recvtype, &rsize) ||
        ((sendbuf != MPI_IN_PLACE) &&
         (!crypt_mpi_contiguous(sendtype, &ssize) ||
          ((size_t)sendcount * (size_t)ssize != (size_t)recvcount * (size_t)rsize))) ||
        ((t = crypt_mpi_encrypting_team(comm)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    m   = (size_t)recvcount * (size_t)rsize;
    alg = crypt_coll_allgather_select(&t->team, m, getenv("UCX_CRYPT_COLL_TUNE"));
    crypt_mpi_check(comm, crypt_coll_allgather(&t->team, (crypt_allgather_alg_t)alg,
                                                (sendbuf == MPI_IN_PLACE) ? NULL : sendbuf,
                                                recvbuf, m),
                     "MPI_Allgather");
    if (getenv("UCX_CRYPT_COLL_VERBOSE")) {
        char what[96];
        snprintf(what, sizeof(what), "allgather %zu B by %s", m,
                 crypt_allgather_alg_name((crypt_allgather_alg_t)alg));
        crypt_mpi_verbose(t, what);
    }
    return MPI_SUCCESS;
}

/* ---- MPI_Bcast and MPI_Allreduce: sealed once per node ---------------------- */

int crypt_mpi_bcast(void *buffer, int count, MPI_Datatype datatype, int root,
                    MPI_Comm comm)
{
    crypt_mpi_team_t *t;
    int tsize;

    if (crypt_mpi_declines(comm) || !crypt_mpi_contiguous(datatype, &tsize) ||
        ((t = crypt_mpi_encrypting_team(comm)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    crypt_mpi_check(comm, crypt_coll_bcast(&t->team, buffer,
                                            (size_t)count * (size_t)tsize, root),
                     "MPI_Bcast");
    return MPI_SUCCESS;
}

typedef struct {
    MPI_Datatype type;
    MPI_Op       op;
} crypt_mpi_op_t;

static void crypt_mpi_reduce(void *inout, const void *in, size_t count, void *arg)
{
    crypt_mpi_op_t *o = arg;

    PMPI_Reduce_local((void*)in, inout, (int)count, o->type, o->op);
}

int crypt_mpi_allreduce(const void *sendbuf, void *recvbuf, int count,
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    crypt_mpi_op_t o = {datatype, op};
    crypt_mpi_team_t *t;
    int tsize, commute = 0;

    PMPI_Op_commutative(op, &commute);
    /* the node partials are combined in node order: commutative ops only */
    if (crypt_mpi_declines(comm) || !commute ||
        !crypt_mpi_contiguous(datatype, &tsize) ||
        ((t = crypt_mpi_encrypting_team(comm)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    crypt_mpi_check(comm, crypt_coll_allreduce(&t->team,
                                                (sendbuf == MPI_IN_PLACE) ? NULL : sendbuf,
                                                recvbuf, (size_t)count, (size_t)tsize,
                                                crypt_mpi_reduce, &o),
                     "MPI_Allreduce");
    return MPI_SUCCESS;
}

int crypt_mpi_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                       void *recvbuf, int recvcount, MPI_Datatype recvtype,
                       MPI_Comm comm)
{
    crypt_mpi_team_t *t;
    int ssize, rsize;

    if (crypt_mpi_declines(comm) || (sendbuf == MPI_IN_PLACE) ||
        !crypt_mpi_contiguous(sendtype, &ssize) ||
        !crypt_mpi_contiguous(recvtype, &rsize) ||
        ((size_t)sendcount * (size_t)ssize != (size_t)recvcount * (size_t)rsize) ||
        ((t = crypt_mpi_encrypting_team(comm)) == NULL)) {
        return CRYPT_MPI_DECLINED;
    }
    crypt_mpi_check(comm, crypt_coll_alltoall(&t->team, sendbuf, recvbuf,
                                               (size_t)recvcount * (size_t)rsize),
                     "MPI_Alltoall");
    return MPI_SUCCESS;
}

/* ---- the v-variants: per-rank lengths, in bytes for the core ---------------- */

/* counts[i] * size and displs[i] * size as bytes, for `n` ranks */
static int crypt_mpi_bytes(int n, const int *counts, const int *displs, int size,
                           size_t **bcounts, size_t **bdispls)
{
    int i;

    *bcounts = malloc(sizeof(size_t) * (size_t)n);
    *bdispls = malloc(sizeof(size_t) * (size_t)n);
    if ((*bcounts == NULL) || (*bdispls == NULL)) {
        return -1;
    }
    for (i = 0; i < n; ++i) {
        if ((counts[i] < 0) || (displs[i] < 0)) {
            return -1;
        }
        (*bcounts)[i] = (size_t)counts[i] * (size_t)size;
        (*bdispls)[i] = (size_t)displs[i] * (size_t)size;
    }
    return 0;
}

int crypt_mpi_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm)
{
    size_t *counts = NULL, *bdispls = NULL;
    int rsize, ssize = 0, rank, size, ret = CRYPT_MPI_DECLINED;
    crypt_mpi_team_t *t;

    if (crypt_mpi_declines(comm) || !crypt_mpi_contiguous(recvtype, &rsize)) {
        return CRYPT_MPI_DECLINED;
    }
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &size);
    if (((sendbuf == MPI_IN_PLACE) ||
         (crypt_mpi_contiguous(sendtype, &ssize) &&
          ((size_t)sendcount * (size_t)ssize == (size_t)recvcounts[rank] * (size_t)rsize))) &&
        (crypt_mpi_bytes(size, recvcounts, displs, rsize, &counts, &bdispls) == 0) &&
        ((t = crypt_mpi_encrypting_team(comm)) != NULL)) {
        crypt_mpi_check(comm, crypt_coll_allgatherv(&t->team,
                                                    (sendbuf == MPI_IN_PLACE) ? NULL : sendbuf,
                                                    recvbuf, counts, bdispls),
                        "MPI_Allgatherv");
        crypt_mpi_verbose(t, "allgatherv");
        ret = MPI_SUCCESS;
    }
    free(counts);
    free(bdispls);
    return ret;
}

int crypt_mpi_alltoallv(const void *sendbuf, const int sendcounts[],
                        const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
                        const int recvcounts[], const int rdispls[],
                        MPI_Datatype recvtype, MPI_Comm comm)
{
    size_t *sc = NULL, *sd = NULL, *rc = NULL, *rd = NULL;
    int ssize, rsize, size, ret = CRYPT_MPI_DECLINED;
    crypt_mpi_team_t *t;

    if (crypt_mpi_declines(comm) || (sendbuf == MPI_IN_PLACE) ||
        !crypt_mpi_contiguous(sendtype, &ssize) ||
        !crypt_mpi_contiguous(recvtype, &rsize)) {
        return CRYPT_MPI_DECLINED;
    }
    PMPI_Comm_size(comm, &size);
    if ((crypt_mpi_bytes(size, sendcounts, sdispls, ssize, &sc, &sd) == 0) &&
        (crypt_mpi_bytes(size, recvcounts, rdispls, rsize, &rc, &rd) == 0) &&
        ((t = crypt_mpi_encrypting_team(comm)) != NULL)) {
        crypt_mpi_check(comm, crypt_coll_alltoallv(&t->team, sendbuf, sc, sd, recvbuf,
                                                   rc, rd),
                        "MPI_Alltoallv");
        crypt_mpi_verbose(t, "alltoallv");
        ret = MPI_SUCCESS;
    }
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    return ret;
}
