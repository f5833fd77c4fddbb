/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane: the one contract the crypt transport offers the
 * layers above it (installed as <uct_crypt/uct_crypt_lane.h>). It carries the collective layer's sealed frames between
 * nodes on the network transport *underneath* crypt, so that a frame sealed
 * once under the team key is not sealed a second time by the transport
 * (no double encryption). The crypt plugin implements it (src/uct_crypt/lane/lane.c)
 * because only the plugin holds the network components it hides from UCP;
 * front ends find it at run time, so that nothing above links the plugin:
 *
 *     const uct_crypt_lane_ops_t *ops = dlsym(RTLD_DEFAULT, UCT_CRYPT_LANE_OPS_SYMBOL);
 *
 * Versioning: `version` is UCT_CRYPT_LANE_OPS_VERSION of the plugin; a
 * caller compiled against another version must not use the table. A change
 * of any member's meaning or the table's layout bumps it.
 *
 * and, without it (plugin not loaded: the MPI library's transport does not
 * encrypt), send frames through the MPI library as before.
 *
 * What the lane accepts is narrow on purpose: whole messages of sealed
 * collective frames (at least one frame's overhead, or nothing), to a rank
 * of a team the caller added, on another node. Each chunk carries a tag
 * under the team's lane key (crypt_coll_team_lane_key), so the lane takes
 * only what a rank of that team sent to this one, once and in order, and
 * drops the rest (counted); the collective layer still opens the frames
 * (crypt_coll_open checks key, nonce, sealer and position), and a message
 * the lane could not reassemble fails the receive. One thread per lane
 * (the caller's), like the collectives.
 */
#ifndef UCT_CRYPT_LANE_H
#define UCT_CRYPT_LANE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UCT_CRYPT_LANE_OPS_SYMBOL  "uct_crypt_coll_lane_ops"
#define UCT_CRYPT_LANE_OPS_VERSION 3u

enum {
    UCT_CRYPT_LANE_ADDR_MAX = 128   /* a lane address, as exchanged */
};

typedef struct uct_crypt_lane uct_crypt_lane_t;

typedef struct uct_crypt_lane_ops {
    unsigned version;           /* UCT_CRYPT_LANE_OPS_VERSION */

    /* The process's lane on the first inner network transport that can
     * connect to a remote iface (tcp, ud, dc; not rc, which connects ep to
     * ep). NULL with a reason in `error` where there is none. */
    uct_crypt_lane_t *(*open)(char *error, size_t error_len);
    void          (*close)(uct_crypt_lane_t *lane); /* flushes what is sent */

    /* This lane's address (at most UCT_CRYPT_LANE_ADDR_MAX bytes). */
    size_t (*address)(uct_crypt_lane_t *lane, void *buf, size_t max);
    /* A peer by its address (the same address gives the same peer); < 0 on
     * error. */
    int    (*connect)(uct_crypt_lane_t *lane, const void *addr, size_t len);

    /* A team on the lane: its id (the same on every rank, shown on the
     * network), this process's rank in it, its size (at most 2^24) and
     * the key of its chunks' tags (16 or 32 bytes; the lane expands it and
     * keeps nothing of `key`: the caller wipes it). Every rank adds the
     * team before any rank sends on it (the MPI adapter adds it before the
     * collective that ends the team's set-up). 0, or -1: an id the lane
     * has already, a bad size, no memory, the cipher refused the key. */
    int  (*team_add)(uct_crypt_lane_t *lane, uint64_t team, uint32_t rank,
                     uint32_t size, const uint8_t *key, size_t key_len);
    /* The team is gone: its key, its streams and what they hold with it */
    void (*team_remove)(uct_crypt_lane_t *lane, uint64_t team);

    /* Start sending one message of `team` from this process's rank to
     * `dst_rank`, at `peer` (`len` is 0 or at least min_frame bytes; `buf`
     * stays the caller's until send_idle says 1). One message per peer at
     * a time. 0 or -1. */
    int (*send)(uct_crypt_lane_t *lane, int peer, uint64_t team, uint32_t dst_rank,
                const void *buf, size_t len, size_t min_frame);
    /* 1: the message to `peer` has left the process (the transport
     * flushed it locally: nothing of it waits for this process's
     * progress); 0: not yet; -1: the peer failed. */
    int (*send_idle)(uct_crypt_lane_t *lane, int peer);
    /* The next message of (team, src_rank) into buf, which must be its
     * exact length: 1 delivered, 0 not arrived yet, -1 failed (peer gone,
     * malformed or of another length). After 0, `buf` is posted: the lane
     * may write the message straight into it (no copy), so the caller
     * asks again with the same buffer until 1 or -1, or gives the buffer
     * back with recv_cancel. */
    int (*recv)(uct_crypt_lane_t *lane, int peer, uint64_t team, uint32_t src_rank,
                void *buf, size_t len);
    /* The buffer of a posted receive is the caller's again; a message
     * already being written there fails the stream. */
    void (*recv_cancel)(uct_crypt_lane_t *lane, uint64_t team, uint32_t src_rank);
    void (*progress)(uct_crypt_lane_t *lane);

    /* Bytes this lane sent and received (tests: the frames took the lane),
     * and the chunks it dropped: a tag that failed, a team or rank not
     * ours, a chunk seen before (what strangers sent). */
    void (*counters)(uct_crypt_lane_t *lane, uint64_t *sent, uint64_t *received,
                     uint64_t *refused);
} uct_crypt_lane_ops_t;

#ifdef __cplusplus
}
#endif

#endif
