/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the files of the team layer share, and nobody else: the frame layer
 * (seal, open, move), the workspace, the node layout, the building blocks
 * several algorithms use, and each collective's run function. One
 * algorithm or collective per file, as UCC's tl/ucp does:
 *
 *   crypt_coll.c            entry points (blocking, crypt_coll_run), the
 *                           agreement step that ends every collective
 *   crypt_coll_team.c       teams: node maps, bootstrap, key, workspace
 *   crypt_coll_frame.c      frames: seal, open, move (crypt_coll_wire.h)
 *   crypt_coll_layout.c     ranks per node, spreading inside a node
 *   crypt_coll_score.c      the score table and its tune string
 *   crypt_coll_task.c       nonblocking tasks
 *   allgather/              the eight all-gather algorithms
 *   allgatherv/, alltoall/, alltoallv/, bcast/, allreduce/
 */
#ifndef UCX_CRYPT_COLL_PRIV_H
#define UCX_CRYPT_COLL_PRIV_H

#include "ucp_crypt/coll/crypt_coll.h"
#include "ucp_crypt/coll/crypt_coll_wire.h"

/* A large buffer of one call, from the team's workspace: kept between
 * calls, because a fresh multi-MiB malloc costs a page fault and the
 * kernel's zeroing per 4 KiB every time (glibc gives freed blocks that
 * large back to the kernel): measured, the packing of C-Ring's 8 MiB
 * local ring took 5 to 13 ms of a 4 MiB all-gather, the copy itself 1.
 * One collective runs on a team at a time (tasks included), so a slot is
 * the call's own; functions that call each other use distinct slots
 * (CRYPT_COLL_WS_*). Contents are not kept. NULL when out of memory. */
enum {
    CRYPT_COLL_WS_FRAMES = 0,   /* naive, O-Ring, Bruck */
    CRYPT_COLL_WS_OUT,
    CRYPT_COLL_WS_IN,
    CRYPT_COLL_WS_MERGED,
    CRYPT_COLL_WS_OUTER_FRAMES, /* C-Ring / C-RD (around Bruck), HS */
    CRYPT_COLL_WS_OUTER_OUT,
    CRYPT_COLL_WS_OUTER_IN
};

/* how far ahead of the epochs a rank knows a frame's epoch may be */
enum { CRYPT_COLL_EPOCH_WINDOW = 16 };

static inline uint32_t crypt_coll_max_u32(uint32_t a, uint32_t b)
{
    return (a > b) ? a : b;
}

/* ---- crypt_coll_team.c ---- */
void *crypt_coll_workspace(crypt_coll_team_t *team, int slot, size_t size);
/* the team key of `epoch`, NULL when it cannot be had */
crypt_aead_key_t *crypt_coll_epoch_key(crypt_coll_team_t *team, uint32_t epoch);

/* ---- crypt_coll_frame.c ---- */
/* Seal the block of `owner` (m bytes) for `dest` (a rank, or
 * CRYPT_COLL_DEST_ANY for a frame several ranks open) into `frame` (m +
 * overhead). */
crypt_coll_status_t crypt_coll_seal(crypt_coll_team_t *team, int owner,
                                    int dest, const uint8_t *plain, size_t m,
                                    uint8_t *frame);
/* `sealer`: the only rank the frame may come from, or, for one rank's
 * block forwarded as it is, CRYPT_COLL_SEALER_ANY (the block may be sealed
 * again where it crosses nodes a second time, but its owner in the tag
 * binds it to its place, and its bytes are the owner's whoever seals
 * them); a frame of several blocks (CRYPT_COLL_OWNER_*) must name its
 * sealer. `dest` as sealed. A failed open zeroes `plain`. */
#define CRYPT_COLL_SEALER_ANY (-1)
crypt_coll_status_t crypt_coll_open(crypt_coll_team_t *team, int owner,
                                    int sealer, int dest, const uint8_t *frame,
                                    size_t m, uint8_t *plain);
int crypt_coll_same_node(const crypt_coll_team_t *team, int peer);
/* every move goes through here: plaintext to another node is refused */
crypt_coll_status_t crypt_coll_move(crypt_coll_team_t *team, int dst,
                                    const void *sbuf, size_t slen, int sealed,
                                    int src, void *rbuf, size_t rlen);

/* ---- crypt_coll_layout.c ---- */
typedef struct {
    int num_nodes;
    int *count;     /* ranks per node */
    int **ranks;    /* ranks of each node, ascending */
    int max_local;
} crypt_coll_layout_t;

int crypt_coll_layout(const crypt_coll_team_t *team, crypt_coll_layout_t *l);
void crypt_coll_layout_free(crypt_coll_layout_t *l);
/* the member of node n in group g: its rank with local index g mod count
 * (a node with fewer ranks lets one rank serve several groups) */
int crypt_coll_member(const crypt_coll_layout_t *l, int n, int g);
/* the owner of group g's block on node n, or -1 */
int crypt_coll_owner(const crypt_coll_layout_t *l, int n, int g);
/* The node's first rank sends `buf` to the others (or receives it from the
 * first rank): plaintext, inside the node only. */
crypt_coll_status_t crypt_coll_node_spread(crypt_coll_team_t *team,
                                           const crypt_coll_layout_t *l,
                                           int head, void *buf, size_t m);

/* ---- crypt_coll.c ---- */
/* The end of every collective: the agreement step, and on any failure
 * no data that anyone could take for a result. */
crypt_coll_status_t crypt_coll_finish(crypt_coll_team_t *team,
                                      crypt_coll_status_t status, int failed,
                                      void *buf, size_t len);

/* ---- crypt_coll_task.c ---- */
/* is a task in flight that this call is not part of? */
int crypt_coll_task_busy(const crypt_coll_team_t *team);
/* the same exchange inside a task, yielding */
int crypt_coll_task_move(crypt_coll_team_t *team, int dst, const void *sbuf,
                         size_t slen, int src, void *rbuf, size_t rlen);
void crypt_coll_task_team_cleanup(crypt_coll_team_t *team);

/* ---- allgather/ ---- */
/* How blocks cross nodes in a Bruck exchange. */
typedef enum {
    CRYPT_COLL_FRAMES_PER_BLOCK, /* O-RD, C-RD: a block is sealed once, where
                                    it first leaves its node; its frame is
                                    forwarded as it is and opened once by
                                    each rank that receives it */
    CRYPT_COLL_FRAMES_MERGED     /* O-RD2: one frame per inter-node message
                                    (open, merge, seal again) */
} crypt_coll_framing_t;

/* Bruck's all-gather among `k` members (allgather_bruck.c) */
crypt_coll_status_t
crypt_coll_bruck(crypt_coll_team_t *team, const int *members, const int *owner,
                 int k, int pos, crypt_coll_framing_t framing, uint8_t *rbuf,
                 size_t m, int *failed);
crypt_coll_status_t crypt_coll_bruck_frames(crypt_coll_team_t *team,
                                            const int *leaders, int k, int pos,
                                            uint8_t *base, const size_t *off,
                                            const size_t *len);
crypt_coll_status_t crypt_allgather_naive(crypt_coll_team_t *team,
                                          uint8_t *rbuf, size_t m);
crypt_coll_status_t crypt_allgather_o_ring(crypt_coll_team_t *team,
                                           uint8_t *rbuf, size_t m);
crypt_coll_status_t crypt_allgather_o_rd(crypt_coll_team_t *team, uint8_t *rbuf,
                                         size_t m, crypt_coll_framing_t framing);
crypt_coll_status_t crypt_allgather_concurrent(crypt_coll_team_t *team,
                                               uint8_t *rbuf, size_t m,
                                               int use_bruck);
crypt_coll_status_t crypt_allgather_hs(crypt_coll_team_t *team, uint8_t *rbuf,
                                       size_t m, int hs2);

/* ---- one file per collective: the blocking call, no task check ---- */
crypt_coll_status_t crypt_coll_allgather_run(crypt_coll_team_t *team,
                                             crypt_allgather_alg_t alg,
                                             const void *sbuf, void *rbuf,
                                             size_t m);
crypt_coll_status_t crypt_coll_bcast_run(crypt_coll_team_t *team, void *buf,
                                         size_t m, int root);
crypt_coll_status_t crypt_coll_allreduce_run(crypt_coll_team_t *team,
                                             const void *sbuf, void *rbuf,
                                             size_t count, size_t elem_size,
                                             crypt_coll_reduce_t op,
                                             void *op_arg);
crypt_coll_status_t crypt_coll_alltoall_run(crypt_coll_team_t *team,
                                            const void *sbuf, void *rbuf,
                                            size_t m);
crypt_coll_status_t crypt_coll_allgatherv_run(crypt_coll_team_t *team,
                                              const void *sbuf, void *rbuf,
                                              const size_t *counts,
                                              const size_t *displs);
crypt_coll_status_t crypt_coll_alltoallv_run(crypt_coll_team_t *team,
                                             const void *sbuf,
                                             const size_t *scounts,
                                             const size_t *sdispls, void *rbuf,
                                             const size_t *rcounts,
                                             const size_t *rdispls);

#endif
