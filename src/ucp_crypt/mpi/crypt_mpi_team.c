/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A communicator's team (cached as an attribute): a duplicate for
 * isolation, a team made by the core's bootstrap with the MPI library as
 * its out-of-band all-gather (rank 0's team salt; nodes from each rank's
 * host identity, or UCX_CRYPT_COLL_NODES to emulate nodes on one machine,
 * given to MPI_COMM_WORLD's ranks), the job secret (UCX_CRYPT_KEY_FILE, the
 * transport's), the node's ranks split off, and, for HS1/HS2, a
 * node-shared segment (POSIX shared memory). Setting a team up calls MPI
 * collectives on the communicator; while it does, every entry point
 * declines, so that a front end inside the library (the coll component)
 * does not recurse.
 */
#include "crypt_mpi_priv.h"
#include "keyex/keyex.h"


#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

crypt_mpi_team_t *crypt_mpi_teams;
int crypt_mpi_bootstrapping;
static int crypt_mpi_keyval = MPI_KEYVAL_INVALID;
static int crypt_mpi_self_keyval = MPI_KEYVAL_INVALID;

void crypt_mpi_die(MPI_Comm comm, const char *what)
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
    crypt_mpi_lane_team_remove(t);
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
    crypt_mpi_lane_close();
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
    if (crypt_coll_node_map_parse(crypt_mpi_config(comm)->nodes, world_size,
                                  world_node, error, sizeof(error)) != 0) {
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
 * share it (a hand-made node map could join ranks of two hosts): `proven`
 * gets each rank's answer, and a rank without one becomes a node of its
 * own (crypt_mpi_unproven_apart). HS1/HS2 only where every rank of the
 * team has its node's segment: the choice of algorithm must be the same on
 * every rank. Returns 1 when every rank proved it. */
static int crypt_mpi_node_shm(crypt_mpi_team_t *t, int *proven)
{
    size_t size = crypt_coll_node_shm_size(t->team.size, CRYPT_COLL_HS_DEFAULT_MAX);
    struct {
        char    name[48];
        uint8_t token[16];
    } id;
    void *base = MAP_FAILED;
    int node_rank, ok = 0, all, fd = -1, r;

    PMPI_Comm_rank(t->node_comm, &node_rank);
    memset(&id, 0, sizeof(id));
    if (node_rank == 0) {
        uint64_t nonce;
        if (crypt_random_secret(id.token, sizeof(id.token)) &&
            crypt_random_public(&nonce, sizeof(nonce))) {
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
    PMPI_Allgather(&ok, 1, MPI_INT, proven, 1, MPI_INT, t->comm);
    for (r = 0, all = 1; r < t->team.size; ++r) {
        all &= proven[r];
    }
    if (base != MAP_FAILED) {
        t->shm      = base;
        t->shm_size = size;
    }
    if (all) {
        crypt_coll_team_set_node_shm(&t->team, base, size);
    }
    return all;
}

/* The node map with every rank that could not show it shares its node's
 * memory (crypt_mpi_node_shm) on a node of its own, renumbered in rank
 * order (`key`: the caller's scratch, one int a rank); 0 where that
 * changes nothing (such ranks were alone already). A
 * node map that joins ranks of two hosts (UCX_CRYPT_COLL_NODES by hand,
 * or host identities that lie) would otherwise let the algorithms send
 * blocks in clear between those hosts, as inside a node. */
static int crypt_mpi_unproven_apart(const crypt_mpi_team_t *t, const int *proven,
                                    int *key, int *node_of)
{
    const int size = t->team.size;
    int r, q, next = 0, changed = 0;

    for (r = 0; r < size; ++r) {
        /* a rank apart keeps a key no node number has: -1 - r */
        key[r] = proven[r] ? t->team.node_of[r] : -1 - r;
        for (q = 0; !proven[r] && (q < size); ++q) {
            changed |= (q != r) && (t->team.node_of[q] == t->team.node_of[r]);
        }
    }
    for (r = 0; r < size; ++r) {
        node_of[r] = -1;
        for (q = 0; (q < r) && (node_of[r] < 0); ++q) {
            if (key[q] == key[r]) {
                node_of[r] = node_of[q];
            }
        }
        if (node_of[r] < 0) {
            node_of[r] = next++;
        }
    }
    return changed;
}

/* The core's bootstrap of t's team on `node_of` (NULL: host identities),
 * then its node communicator; the job ends with the reason on failure */
static void crypt_mpi_team_bootstrap(crypt_mpi_team_t *t, MPI_Comm comm,
                                     const crypt_coll_oob_t *oob,
                                     const int *node_of, const uint8_t *secret,
                                     unsigned key_len)
{
    crypt_coll_status_t status;

    status = crypt_coll_team_create(&t->team, oob, node_of, secret, key_len,
                                    CRYPT_AEAD_BACKEND_AUTO, crypt_mpi_sendrecv, t);
    if (status == CRYPT_COLL_ERR_AUTH) {
        crypt_mpi_die(comm, "the collectives' bootstrap failed authentication: "
                      "every rank needs the same UCX_CRYPT_KEY_FILE and "
                      "UCX_CRYPT_KEY_BITS and to be of the same job, and the "
                      "bootstrap traffic was not altered");
    } else if (status != CRYPT_COLL_OK) {
        crypt_mpi_die(comm, "cannot set up the collective keys");
    }
    crypt_coll_team_set_nb(&t->team, &crypt_mpi_nb_ops);
    t->queue_tail = &t->queue;
    PMPI_Comm_split(t->comm, t->team.node_of[oob->rank], oob->rank, &t->node_comm);
}

/* The launcher's identity of this job, bound into the collectives'
 * bootstrap key (keyex_derive_bootstrap_key): PMIx's namespace (Open MPI,
 * PMIx launchers), else Slurm's job and step; "" where the launcher names
 * none (MPICH's Hydra). Every rank of a team must see the same: a
 * communicator that spans two jobs (MPI_Comm_spawn, then
 * MPI_Intercomm_merge) fails its bootstrap. */
static const char *crypt_mpi_job_id(char *buf, size_t max)
{
    const char *ns    = getenv("PMIX_NAMESPACE");
    const char *job   = getenv("SLURM_JOB_ID");
    const char *step  = getenv("SLURM_STEP_ID");

    buf[0] = '\0';
    if ((ns != NULL) && (ns[0] != '\0')) {
        snprintf(buf, max, "pmix:%s", ns);
    } else if ((job != NULL) && (job[0] != '\0')) {
        snprintf(buf, max, "slurm:%s.%s", job, (step != NULL) ? step : "");
    }
    return buf;
}

crypt_mpi_team_t *crypt_mpi_team(MPI_Comm comm)
{
    const crypt_mpi_config_t *config = crypt_mpi_config(comm);
    crypt_coll_oob_t oob;
    uint8_t *secret;
    int rank, size, found, *node_of = NULL, *proven;
    crypt_mpi_team_t *t;
    char error[256], job_id[KEYEX_JOB_ID_MAX + 1];

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
    if (config->key_file == NULL) {
        crypt_mpi_die(comm, "UCX_CRYPT_KEY_FILE is not set: make a job secret "
                       "with ucx-crypt-keygen and point UCX_CRYPT_KEY_FILE at it");
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        crypt_mpi_die(comm, "out of memory");
    }
    PMPI_Comm_dup(comm, &t->comm);
#if UCX_CRYPT_FAULT_INJECTION
    if (config->fault_rank == rank) {
        fprintf(stderr, "ucx-crypt: TESTING: rank %d forges its first frame to "
                "another node\n", rank);
        t->tamper = 1;
    }
#endif

    /* nodes: emulated (given to MPI_COMM_WORLD's ranks), or the core's
     * host identity gathered through the OOB (NULL) */
    if (config->nodes != NULL) {
        node_of = malloc(sizeof(int) * (size_t)size);
        if (node_of == NULL) {
            crypt_mpi_die(comm, "out of memory");
        }
        crypt_mpi_emulated_nodes(comm, size, node_of);
    }

    /* the core's bootstrap (authenticated under the job secret, the team
     * key from every rank's contribution) with the MPI library as the
     * out-of-band all-gather */
    oob.allgather = crypt_mpi_oob_allgather;
    oob.ctx       = t;
    oob.rank      = rank;
    oob.size      = size;
    oob.job_id    = crypt_mpi_job_id(job_id, sizeof(job_id));
    /* the job secret lives in secure memory (not dumped, wiped on free)
     * from here to the free below, and no path between them leaves without
     * freeing it */
    secret = keyex_secure_alloc(KEYEX_JOB_SECRET_LEN);
    if (secret == NULL) {
        crypt_mpi_die(comm, "out of memory");
    }
    if (keyex_job_secret_load(config->key_file, secret, error, sizeof(error)) !=
        KEYEX_OK) {
        keyex_secure_free(secret, KEYEX_JOB_SECRET_LEN);
        crypt_mpi_die(comm, error);
    }
    crypt_mpi_team_bootstrap(t, comm, &oob, node_of, secret, config->key_len);
    free(node_of);

    /* every rank that shares a node proves it shares its memory, or is a
     * node of its own (one more bootstrap, on the new node map) */
    /* (one allocation, checked before the first collective of the proof:
     * nothing after it can fail on one rank only and leave the others
     * waiting in a bootstrap it did not join) */
    proven = malloc(3 * sizeof(int) * (size_t)size);
    if (proven == NULL) {
        keyex_secure_free(secret, KEYEX_JOB_SECRET_LEN);
        crypt_mpi_die(comm, "out of memory");
    }
    node_of = proven + size;
    if (!crypt_mpi_node_shm(t, proven) &&
        crypt_mpi_unproven_apart(t, proven, node_of + size, node_of)) {
        if (!proven[rank]) {
            fprintf(stderr, "ucx-crypt: rank %d cannot show that it shares its "
                    "node's memory (another host, or no shared memory there): "
                    "it is a node of its own for the collectives\n", rank);
        }
        crypt_coll_team_cleanup(&t->team);
        PMPI_Comm_free(&t->node_comm);
        if (t->shm != NULL) {
            munmap(t->shm, t->shm_size);
            t->shm = NULL;
        }
        crypt_mpi_team_bootstrap(t, comm, &oob, node_of, secret, config->key_len);
    }
    keyex_secure_free(secret, KEYEX_JOB_SECRET_LEN);
    free(proven);
    if (config->verbose) {
        fprintf(stderr, "ucx-crypt: team of %d ranks on %d nodes, rank %d on "
                "node %d\n", size, t->team.num_nodes, rank, t->team.node_of[rank]);
    }
    t->lane_team = t->team.public_id;
    crypt_mpi_lane_setup(t, comm);
    t->user_comm     = comm;
    t->next          = crypt_mpi_teams;
    crypt_mpi_teams = t;
    PMPI_Comm_set_attr(comm, crypt_mpi_keyval, t);
    --crypt_mpi_bootstrapping;
    return t;
}

int crypt_mpi_contiguous(MPI_Datatype type, int *size)
{
    MPI_Aint lb, extent;

    PMPI_Type_size(type, size);
    PMPI_Type_get_extent(type, &lb, &extent);
    return (extent == *size) && (lb == 0);
}

void crypt_mpi_check(MPI_Comm comm, crypt_coll_status_t status,
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
crypt_mpi_team_t *crypt_mpi_encrypting_team(MPI_Comm comm, int may_set_up)
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
int crypt_mpi_declines(MPI_Comm comm)
{
    int inter = 0;

    if (crypt_mpi_bootstrapping) {
        return 1;
    }
    PMPI_Comm_test_inter(comm, &inter);
    return inter;
}
