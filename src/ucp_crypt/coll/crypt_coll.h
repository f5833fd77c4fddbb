/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Encrypted collectives, core layer: a team (ranks, node map, a group key,
 * point-to-point pipes between its ranks) and the all-gather algorithms of
 * "Efficient Algorithms for Encrypted All-gather Operation" (Naive, O-Ring,
 * O-RD, O-RD2, C-Ring, C-RD, HS1, HS2; Naser et al., IPDPS 2021,
 * section IV). Inter-node data is sealed once by the node that owns it and
 * opened once per receiving node; intra-node data moves in plaintext.
 *
 * This layer knows nothing of MPI or UCX: a team moves bytes through the
 * sendrecv callback it is given (a socket harness in the tests; the MPI
 * adapter, which puts frames between nodes on the collective lane of
 * crypt_lane.h), and every byte it hands to that
 * callback between two nodes is a sealed frame: the team checks this itself
 * and counts any violation (inter_node_plaintext_bytes).
 *
 * Each collective exists as a blocking call and, in UCC's shape, as a
 * nonblocking task (crypt_coll_task_init, _post, _test, _finalize; the
 * algorithm from a score table with a UCC-style tune string) for callers
 * that give the team nonblocking pipes (crypt_coll_team_set_nb).
 */
#ifndef UCX_CRYPT_COLL_H
#define UCX_CRYPT_COLL_H

#include "aead/aead.h"
#include "keyex/keyex.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CRYPT_COLL_MAX_RANKS = 4096,
    /* a sealed frame: header (encrypting rank, sequence) || ciphertext || tag */
    CRYPT_COLL_FRAME_HDR = 12,
    CRYPT_COLL_FRAME_OVERHEAD = CRYPT_COLL_FRAME_HDR + CRYPT_AEAD_TAG_LEN,
    CRYPT_COLL_WORKSPACE_SLOTS = 8,
    CRYPT_COLL_TEAM_ID_LEN    = KEYEX_TRANSCRIPT_LEN,
    CRYPT_COLL_EPOCH_KEYS     = 4    /* epoch keys a rank keeps open */
};

/* One epoch's key of a team (crypt_coll_team.c) */
typedef struct crypt_coll_epoch_key {
    int              valid;
    uint32_t         epoch;
    crypt_aead_key_t aead;
} crypt_coll_epoch_key_t;

typedef enum {
    CRYPT_COLL_OK        = 0,
    CRYPT_COLL_ERR_IO    = -1, /* the pipe to a peer failed */
    CRYPT_COLL_ERR_AUTH  = -2, /* a frame failed authentication: forged,
                                  replayed, misplaced */
    CRYPT_COLL_ERR_PARAM = -3,
    CRYPT_COLL_INPROGRESS = 1  /* a task not finished yet */
} crypt_coll_status_t;

typedef enum {
    CRYPT_COLL_MAP_BLOCK  = 0, /* ranks 0..l-1 on node 0, ... */
    CRYPT_COLL_MAP_CYCLIC = 1  /* rank r on node r mod N */
} crypt_coll_mapping_t;

typedef enum {
    CRYPT_ALLGATHER_NAIVE  = 0, /* seal own, ring on ciphertexts, open all */
    CRYPT_ALLGATHER_O_RING,     /* ring; sealed only across nodes */
    CRYPT_ALLGATHER_O_RD,       /* recursive doubling (Bruck's, any p);
                                   each block sealed where it leaves its
                                   node, frames forwarded as they are */
    CRYPT_ALLGATHER_O_RD2,      /* the same, one merged frame per
                                   inter-node message (fewer opens) */
    CRYPT_ALLGATHER_C_RING,     /* one sealed ring per local index, then a
                                   plaintext ring inside each node */
    CRYPT_ALLGATHER_C_RD,       /* the same with recursive doubling */
    CRYPT_ALLGATHER_HS1,        /* node gathers in shared memory, leaders
                                   seal the node's data once and exchange
                                   it, the node's ranks open it jointly */
    CRYPT_ALLGATHER_HS2,        /* the same, every rank sealing its own */
    CRYPT_ALLGATHER_LAST
} crypt_allgather_alg_t;

/* Send `slen` bytes to `dst` while receiving `rlen` bytes from `src`
 * (either side may be absent: dst/src < 0). Pipes are reliable and keep the
 * order of one pair's messages. Returns 0 or -1. */
typedef int (*crypt_coll_sendrecv_t)(void *ctx, int dst, const void *sbuf,
                                     size_t slen, int src, void *rbuf,
                                     size_t rlen);

/* Nonblocking pipes, for tasks: `post` starts the same exchange as
 * sendrecv and gives a handle (0 or -1); `test` says 1 (done, handle
 * released), 0 (in flight) or -1 (failed, handle released). */
typedef struct crypt_coll_nb_ops {
    int (*post)(void *ctx, int dst, const void *sbuf, size_t slen, int src,
                void *rbuf, size_t rlen, void **handle);
    int (*test)(void *ctx, void *handle);
} crypt_coll_nb_ops_t;

struct crypt_coll_task;

typedef struct crypt_coll_counters {
    uint64_t bytes_sealed;      /* s_e of the paper */
    uint64_t seal_calls;        /* r_e, counted per sealed frame */
    uint64_t bytes_opened;      /* s_d */
    uint64_t open_calls;        /* r_d */
    uint64_t bytes_sent;
    uint64_t inter_node_plaintext_bytes; /* must stay 0 */
} crypt_coll_counters_t;

typedef struct crypt_coll_team {
    int                   rank;
    int                   size;
    int                   *node_of;     /* owned copy */
    int                   num_nodes;
    crypt_coll_sendrecv_t sendrecv;
    void                  *ctx;
    /* keys (crypt_coll_team.c): a group key per epoch; each rank seals
     * under its own current epoch, which it leaves before its share of
     * the key's usage limits (keyex.h) is spent; receivers follow the
     * epoch in the frame header */
    keyex_traffic_keys_t  *epoch0;      /* the team secret, secure memory;
                                           NULL: no team */
    crypt_aead_backend_t  backend;
    crypt_coll_epoch_key_t keys[CRYPT_COLL_EPOCH_KEYS];
    uint32_t              seal_epoch;
    uint32_t              epoch_seen;   /* highest epoch a frame opened in */
    uint64_t              next_nonce;   /* this rank's, in seal_epoch */
    uint64_t              epoch_bytes;  /* sealed by this rank in seal_epoch */
    uint64_t              epoch_max_records, epoch_max_bytes;
    uint64_t              collective;   /* operations so far (AAD) */
    crypt_coll_counters_t counters;
    uint8_t               *node_shm;    /* shared by the node's ranks */
    size_t                node_shm_size;
    uint64_t              public_id;    /* names the team where others see it
                                           (the lane's headers): a one-way
                                           function of `id` */
    const crypt_coll_nb_ops_t *nb;      /* NULL: blocking pipes only */
    struct crypt_coll_task *task;       /* the task in flight, if any */
    /* a finished task's stack, kept for the next task (crypt_coll_task.c) */
    void                  *task_stack;
    size_t                task_stack_len;
    /* large per-call buffers kept between calls (crypt_coll.c) */
    void                  *workspace[CRYPT_COLL_WORKSPACE_SLOTS];
    size_t                workspace_size[CRYPT_COLL_WORKSPACE_SLOTS];
} crypt_coll_team_t;

/* Node of every rank: N nodes, ranks spread as evenly as they go (the first
 * p mod N nodes get one more). */
int crypt_coll_node_map(int size, int num_nodes, crypt_coll_mapping_t mapping,
                        int *node_of);

/* Node emulation for tests and benchmarks (UCX_CRYPT_COLL_NODES): "N" or
 * "N:block" or "N:cyclic". Returns 0 and fills node_of, or -1 (empty or
 * malformed: `error` says which). */
int crypt_coll_node_map_parse(const char *value, int size, int *node_of,
                              char *error, size_t error_len);

/* A team whose bootstrap is done: its key is derived in src/keyex
 * (keyex_derive_team_keys) from the job secret and `team_id`, the hash of
 * the bootstrap transcript, which must never repeat under one job secret
 * (crypt_coll_team_create makes it from every rank's fresh contribution):
 * nonces restart at 0 with every team. key_len: 16 (AES-128) or 32
 * (AES-256). Separate from every transport key. */
crypt_coll_status_t crypt_coll_team_init(crypt_coll_team_t *team, int rank,
                                         int size, const int *node_of,
                                         const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                         const uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN],
                                         unsigned key_len,
                                         crypt_aead_backend_t backend,
                                         crypt_coll_sendrecv_t sendrecv,
                                         void *ctx);
/* Tests: leave an epoch after `records` frames sealed in it (0: the
 * limits of keyex.h, shared among the team's ranks) */
void crypt_coll_team_set_epoch_limit(crypt_coll_team_t *team, uint64_t records);
void crypt_coll_team_cleanup(crypt_coll_team_t *team);

/* Bootstrap, UCC's shape (ucc_oob_coll_t): an out-of-band all-gather
 * among the team's ranks, blocking, called by every rank with the same
 * length; 0 or -1. */
typedef struct crypt_coll_oob {
    int        (*allgather)(void *ctx, const void *sbuf, void *rbuf, size_t len);
    void       *ctx;
    int        rank, size;
    const char *job_id; /* the launcher's id of the job; NULL or "": none */
} crypt_coll_oob_t;

/* A team over the OOB's ranks. Every rank sends one bootstrap message
 * (crypt_coll_hello_t: its rank, the team size, the key size, 32 fresh
 * random bytes and its host identity) MACed under a key derived from the
 * job secret and the job id; every rank checks every message (a party
 * without the job secret can neither forge nor alter one), its own among
 * them, and derives the team key from the hash of all of them (keyex.h,
 * "collective teams"). A second round confirms the transcript: each rank
 * sends a MAC of its rank and that hash, and checks every rank's, so that
 * no rank makes a team unless all saw the same messages (one spliced or
 * replayed towards some ranks only fails the team on every rank). Both
 * rounds run on every rank whatever it found: a rank that refuses sends a
 * confirmation that matches nothing, and no rank waits for ever. Refused:
 * CRYPT_COLL_ERR_AUTH, on every rank (fail closed). The node map is
 * `node_of` if given, else the authenticated host identities, nodes
 * numbered in rank order. What the OOB carries is an input of the team
 * key: an OOB sealed by crypt keeps a recording closed to a job secret
 * stolen later; an OOB in the clear leaves the key to the job secret. */
crypt_coll_status_t crypt_coll_team_create(crypt_coll_team_t *team,
                                           const crypt_coll_oob_t *oob,
                                           const int *node_of,
                                           const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                           unsigned key_len,
                                           crypt_aead_backend_t backend,
                                           crypt_coll_sendrecv_t sendrecv,
                                           void *ctx);

/* The name a team shows where others see it (the collective lane's
 * headers): one-way from the transcript's hash, which stays secret */
int crypt_coll_team_public_id(const uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN],
                              uint64_t *public_id);

/* The key that authenticates the team's chunks on the collective lane
 * (keyex_derive_lane_key): `key_len` bytes into `key`, which the caller
 * keeps in secure memory and wipes. 0 or -1. */
int crypt_coll_team_lane_key(const crypt_coll_team_t *team,
                             uint8_t key[KEYEX_SECRET_LEN], unsigned *key_len);

/* A memory segment shared by the team's ranks on this node (the same for
 * all of them), for HS1/HS2: at least crypt_coll_node_shm_size(p, m) bytes
 * for messages of up to m bytes. Without one, HS1/HS2 return
 * CRYPT_COLL_ERR_PARAM (a caller falls back to another algorithm). */
size_t crypt_coll_node_shm_size(int size, size_t max_m);
void crypt_coll_team_set_node_shm(crypt_coll_team_t *team, void *base,
                                  size_t bytes);

/* rbuf receives size * m bytes, rank r's block at r * m. sbuf may be NULL
 * for MPI_IN_PLACE (the rank's block is already at rank * m in rbuf). On
 * CRYPT_COLL_ERR_AUTH nothing unauthenticated is left in rbuf (the blocks
 * it could not open are zero). */
crypt_coll_status_t crypt_coll_allgather(crypt_coll_team_t *team,
                                         crypt_allgather_alg_t alg,
                                         const void *sbuf, void *rbuf, size_t m);

const char *crypt_allgather_alg_name(crypt_allgather_alg_t alg);

/* buf (m bytes) from `root` to every rank: the root seals it once, a
 * binomial tree over one rank per node forwards the frame as it is, each
 * other node opens it once and spreads the plaintext inside the node.
 * Costs: s_e = m at the root, s_d = m per other node. */
crypt_coll_status_t crypt_coll_bcast(crypt_coll_team_t *team, void *buf,
                                     size_t m, int root);

/* rank r's block j (sbuf + j*m) ends up at rank j's rbuf + r*m. Blocks to
 * another node are sealed once by their sender and opened once by their
 * receiver (each block goes to one rank: that is already once per node);
 * blocks inside a node stay plaintext. Pairwise exchange, p-1 rounds. */
crypt_coll_status_t crypt_coll_alltoall(crypt_coll_team_t *team,
                                        const void *sbuf, void *rbuf, size_t m);

/* inout = inout (op) in, for `count` elements: the caller's operation,
 * associative and commutative like MPI's predefined ones. */
typedef void (*crypt_coll_reduce_t)(void *inout, const void *in, size_t count,
                                    void *arg);

/* rbuf = the reduction of every rank's sbuf (sbuf NULL: in place). Each
 * node reduces in plaintext to its first rank, those ranks exchange the
 * node results sealed (each sealed once, opened once per other node) and
 * reduce them in node order, then share the result inside the node: every
 * rank gets the same bits. Costs per node: s_e = m, s_d = (N-1)m. */
crypt_coll_status_t crypt_coll_allreduce(crypt_coll_team_t *team,
                                         const void *sbuf, void *rbuf,
                                         size_t count, size_t elem_size,
                                         crypt_coll_reduce_t op, void *op_arg);

/* Rank r's counts[r] bytes land at rbuf + displs[r] on every rank (sbuf
 * NULL: in place, already there). Each node's first rank gathers its
 * node's blocks, seals them once as one frame, the first ranks pass the
 * frames round a ring and open every other node's once, then spread the
 * result inside their node: per node s_e = its bytes, s_d = all others'.
 * On failure the blocks (not the gaps between them) are zero. */
crypt_coll_status_t crypt_coll_allgatherv(crypt_coll_team_t *team,
                                          const void *sbuf, void *rbuf,
                                          const size_t *counts,
                                          const size_t *displs);

/* Rank r's block for rank j (scounts[j] bytes at sbuf + sdispls[j]) lands
 * at rank j's rbuf + rdispls[r] (rcounts[r] bytes, equal to it): pairwise,
 * a block to another node sealed for its destination and opened by it. */
crypt_coll_status_t crypt_coll_alltoallv(crypt_coll_team_t *team,
                                         const void *sbuf, const size_t *scounts,
                                         const size_t *sdispls, void *rbuf,
                                         const size_t *rcounts,
                                         const size_t *rdispls);

/* ---- UCC-shaped tasks and the score table ------------------------------------
 * A task runs one collective without blocking its caller: post starts it,
 * each test moves it as far as the pipes allow and returns
 * CRYPT_COLL_INPROGRESS until it ends with the collective's status. One
 * task in flight per team (a team's frames and counters are one ordered
 * stream); tasks of different teams progress independently, in any order
 * of tests. How: the task runs the blocking algorithm on a stack of its
 * own (ucontext) and gives control back to test() wherever a pipe
 * operation has not completed yet; the algorithms stay written once. */

typedef enum {
    CRYPT_COLL_ALLGATHER = 0,
    CRYPT_COLL_BCAST,
    CRYPT_COLL_ALLREDUCE,
    CRYPT_COLL_ALLTOALL,
    CRYPT_COLL_ALLGATHERV,
    CRYPT_COLL_ALLTOALLV,
    CRYPT_COLL_LAST
} crypt_coll_type_t;

typedef struct crypt_coll_args {
    crypt_coll_type_t   coll;
    int                 alg;       /* allgather: crypt_allgather_alg_t, or
                                      -1 for the score table */
    const void          *sbuf;     /* NULL: in place (allgather, allreduce) */
    void                *rbuf;     /* bcast: the buffer */
    size_t              m;         /* bytes per rank (allgather, alltoall,
                                      bcast); elements (allreduce) */
    size_t              elem_size; /* allreduce */
    crypt_coll_reduce_t op;        /* allreduce */
    void                *op_arg;
    int                 root;      /* bcast */
    const size_t        *counts, *displs;   /* allgatherv; alltoallv: send */
    const size_t        *rcounts, *rdispls; /* alltoallv: receive */
} crypt_coll_args_t;

typedef struct crypt_coll_task crypt_coll_task_t;

/* The collective `args` names, blocking (allgather with alg -1: the score
 * table without a tune string). The same call as the task runs. */
crypt_coll_status_t crypt_coll_run(crypt_coll_team_t *team,
                                   const crypt_coll_args_t *args);

/* PARAM if the team has no nonblocking pipes or a task in flight. */
crypt_coll_status_t crypt_coll_task_init(crypt_coll_team_t *team,
                                         const crypt_coll_args_t *args,
                                         const char *tune,
                                         crypt_coll_task_t **task_p);
crypt_coll_status_t crypt_coll_task_post(crypt_coll_task_t *task);
crypt_coll_status_t crypt_coll_task_test(crypt_coll_task_t *task);
/* Only a finished (or never posted) task can be finalized. */
crypt_coll_status_t crypt_coll_task_finalize(crypt_coll_task_t *task);

void crypt_coll_team_set_nb(crypt_coll_team_t *team,
                            const crypt_coll_nb_ops_t *nb);

/* The score table: the all-gather algorithm for m bytes per rank on this
 * team. `tune` (may be NULL) overrides it UCC-style:
 * "allgather:LO-HI:ALG[,LO-HI:ALG...]", entries tried in order, sizes with
 * k/m suffixes or "inf", an entry without a range applies to every size.
 * Defaults (the paper's Table III): below 4 KiB O-RD2 (fewest opens), up to
 * 64 KiB HS2 where the team's node segment holds the message, above
 * C-Ring. An HS choice without a big enough segment becomes C-Ring. */
enum { CRYPT_COLL_HS_DEFAULT_MAX = 64 * 1024 };
/* 1 if `tune` is a well-formed tune string: "allgather:" followed by
 * comma-separated entries "LO-HI:ALG", "N:ALG" or "ALG", sizes with k/m
 * suffixes or "inf", ALG a name crypt_allgather_alg_name gives */
int crypt_coll_tune_valid(const char *tune);
crypt_allgather_alg_t crypt_coll_allgather_select(const crypt_coll_team_t *team,
                                                  size_t m, const char *tune);
/* The algorithm named `name` (crypt_allgather_alg_name), or -1. */
int crypt_allgather_alg_by_name(const char *name, size_t len);

#ifdef __cplusplus
}
#endif

#endif
