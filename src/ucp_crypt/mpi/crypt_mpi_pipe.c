/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A team's pipes (crypt_coll.h's sendrecv and nonblocking post/test):
 * frames between nodes on the process's collective lane (the network
 * transport under the crypt plugin, uct_crypt/api/uct_crypt_lane.h, which
 * carries nothing but sealed frames), everything else through the MPI
 * library. Without the plugin (the MPI library's transport does not
 * encrypt) or with UCX_CRYPT_COLL_LANE=transport, frames go through the
 * MPI library too.
 */
#include "crypt_mpi_priv.h"
#include "uct_crypt/api/uct_crypt_lane.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the process's collective lane, shared by its teams */
static const uct_crypt_lane_ops_t *crypt_mpi_lane_ops;
static uct_crypt_lane_t *crypt_mpi_lane;
static int crypt_mpi_lane_tried;

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
    int peer, r;

    if (x->sent || x->failed) {
        return; /* (also where there is no send: dst is then -1) */
    }
    peer = t->lane_peer[x->dst];
    if (!x->send_started) {
        if ((r = lane->send_idle(crypt_mpi_lane, peer)) == 0) {
            return; /* busy with another team's message */
        }
        if ((r < 0) ||
            (lane->send(crypt_mpi_lane, peer, t->lane_team, (uint32_t)x->dst,
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

const crypt_coll_nb_ops_t crypt_mpi_nb_ops = {
    .post = crypt_mpi_xfer_post,
    .test = crypt_mpi_xfer_test
};

int crypt_mpi_sendrecv(void *ctx, int dst, const void *sbuf, size_t slen,
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

/* The process's lane, opened once: NULL where there is none or where the
 * user asked for frames through the MPI library. */
static uct_crypt_lane_t *crypt_mpi_lane_get(MPI_Comm comm)
{
    const crypt_mpi_config_t *config = crypt_mpi_config(comm);
    char error[160];

    if (crypt_mpi_lane_tried) {
        return crypt_mpi_lane;
    }
    crypt_mpi_lane_tried = 1;
    if (config->lane == CRYPT_MPI_LANE_TRANSPORT) {
        return NULL;
    }
    crypt_mpi_lane_ops = dlsym(RTLD_DEFAULT, UCT_CRYPT_LANE_OPS_SYMBOL);
    if ((crypt_mpi_lane_ops == NULL) ||
        (crypt_mpi_lane_ops->version != UCT_CRYPT_LANE_OPS_VERSION)) {
        return NULL; /* no crypt plugin: the MPI library's wire is not sealed */
    }
    crypt_mpi_lane = crypt_mpi_lane_ops->open(error, sizeof(error));
    if ((crypt_mpi_lane == NULL) && config->verbose) {
        fprintf(stderr, "ucx-crypt: no collective lane (%s): frames between "
                "nodes go through the MPI library and its transport seals them "
                "again\n", error);
    }
    return crypt_mpi_lane;
}

/* The team on the lane with its key (crypt_coll_team_lane_key): 1, or 0
 * where it cannot be */
static int crypt_mpi_lane_team_add(crypt_mpi_team_t *t)
{
    uint8_t *key = keyex_secure_alloc(KEYEX_SECRET_LEN);
    unsigned key_len;
    int ok;

    ok = (key != NULL) && (crypt_coll_team_lane_key(&t->team, key, &key_len) == 0) &&
         (crypt_mpi_lane_ops->team_add(crypt_mpi_lane, t->lane_team,
                                       (uint32_t)t->team.rank,
                                       (uint32_t)t->team.size, key, key_len) == 0);
    keyex_secure_free(key, KEYEX_SECRET_LEN);
    return ok;
}

/* Every rank of the team on the lane, or none: a frame sent on the lane
 * must be received from it. Peers on the same node are never on it. The
 * lane's addresses are opaque here: each rank sends its length with it.
 * Every rank adds the team to its lane before the all-reduce that ends
 * this, so no chunk of the team reaches a lane that does not know it. */
typedef struct {
    uint32_t len;
    uint8_t  addr[UCT_CRYPT_LANE_ADDR_MAX];
} crypt_mpi_lane_addr_t;

void crypt_mpi_lane_setup(crypt_mpi_team_t *t, MPI_Comm comm)
{
    int rank = t->team.rank, size = t->team.size, ok, all, r;
    crypt_mpi_lane_addr_t *addrs;

    ok    = (crypt_mpi_lane_get(comm) != NULL);
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
        t->lane_added = ok && crypt_mpi_lane_team_add(t);
        ok            = t->lane_added;
        PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, t->comm);
    }
    if (!all) {
        crypt_mpi_lane_team_remove(t);
        free(t->lane_peer);
        t->lane_peer = NULL;
    }
    free(addrs);
}

void crypt_mpi_lane_team_remove(crypt_mpi_team_t *t)
{
    if (t->lane_added) {
        crypt_mpi_lane_ops->team_remove(crypt_mpi_lane, t->lane_team);
        t->lane_added = 0;
    }
}

void crypt_mpi_lane_counters(uint64_t *sent, uint64_t *received,
                             uint64_t *refused)
{
    *sent     = 0;
    *received = 0;
    *refused  = 0;
    if (crypt_mpi_lane != NULL) {
        crypt_mpi_lane_ops->counters(crypt_mpi_lane, sent, received, refused);
    }
}

void crypt_mpi_lane_close(void)
{
    if (crypt_mpi_lane != NULL) {
        crypt_mpi_lane_ops->close(crypt_mpi_lane);
        crypt_mpi_lane = NULL;
    }
}
