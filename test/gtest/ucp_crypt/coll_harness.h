/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The harness of the collectives' tests (coll_harness.cc): p forked ranks
 * joined by socket pairs, N emulated nodes, what each rank saw in shared
 * memory, and the adversaries a test sets before the ranks fork.
 */
#ifndef UCX_CRYPT_COLL_HARNESS_H
#define UCX_CRYPT_COLL_HARNESS_H

#include "ucp_crypt/coll/crypt_coll.h"

#include <stddef.h>
#include <stdint.h>
#include <vector>

const size_t kSizes[] = {0, 1, 7, 4096, 1 << 20};
const int kNumSizes   = sizeof(kSizes) / sizeof(kSizes[0]);
const int kMaxRanks   = 8;
extern unsigned kKeyLen;     /* AES-128; a test may set 32 before run_team */
extern uint64_t kEpochLimit; /* frames per epoch; 0: keyex's limits */

struct rank_result {
    int                   status[CRYPT_ALLGATHER_LAST][kNumSizes];
    int                   data_ok[CRYPT_ALLGATHER_LAST][kNumSizes];
    int                   in_place_ok;
    int                   back_to_back_ok;
    crypt_coll_counters_t counters[CRYPT_ALLGATHER_LAST][kNumSizes];
    int                   done;
    /* bcast and allreduce (run_team with only_alg == -2) */
    int                   bcast_ok, allreduce_ok, alltoall_ok;
    crypt_coll_counters_t bcast_counters, allreduce_counters, alltoall_counters;
    /* allgatherv and alltoallv (run_team with only_alg == -4) */
    int                   agv_status, agv_ok, agv_gaps_ok, agv_in_place_ok;
    int                   atv_status, atv_ok;
    crypt_coll_counters_t agv_counters, atv_counters;
    /* teams made through an out-of-band all-gather (only_alg == -5) */
    int                   oob_env_ok, oob_env_nodes, oob_host_ok, oob_host_nodes;
    int                   oob_node_of[kMaxRanks];
    /* tasks (run_team with only_alg == -3; -6: on two threads) */
    int                   tasks_ok, tasks_overlapped, task_misuse_refused;
    uint32_t              epochs;     /* the team's seal epoch at the end */
};

/* An active adversary on the wire that redirects a frame: the first
 * inter-node message of `sender` is also delivered to `victim`, in place of
 * what `victim` expects from `displaced` (which is swallowed). Set before
 * the ranks fork; -1: no attack. */
struct redirect_attack {
    int sender, victim, displaced;
};
extern redirect_attack redirect;

/* An adversary on the bootstrap's out-of-band all-gather (set before the
 * ranks fork) */
enum bootstrap_attack_t {
    BOOTSTRAP_HONEST,
    BOOTSTRAP_ALTER_HOST,   /* rank 1's host identity rewritten on the way */
    BOOTSTRAP_OTHER_SECRET, /* rank 1 holds another job secret */
    BOOTSTRAP_REPLAY,       /* rank 2's message of an earlier team replayed */
    BOOTSTRAP_SPLICE_HOST,  /* rank 0 gets rank 2's message of an earlier
                               team on another host: rank 2 would move off
                               rank 0's node in rank 0's map only */
    BOOTSTRAP_REPLAY_ALL,   /* rank 1 gets an earlier team's whole
                               transcript, its own message included: the
                               old key and nonces again */
    BOOTSTRAP_OTHER_JOB     /* rank 1 is of another job (same secret) */
};
extern bootstrap_attack_t bootstrap_attack;

/* irregular sizes: some zero, gaps between the blocks */
inline size_t v_count(int q) { return (q == 1) ? 0 : (size_t)((q * 977 + 13) % 3000); }
inline size_t v_pair(int src, int dst) { return (size_t)((src * 3 + dst * 5) % 7) * 200 + (src != dst); }

/* a send and a receive between two ranks of the harness (ctx: the
 * rank's pipes), as crypt_coll's sendrecv callback */
int harness_sendrecv(void *ctx, int dst, const void *sbuf, size_t slen, int src,
                     void *rbuf, size_t rlen);

/* fork p ranks; returns their results (shared memory) */
std::vector<rank_result> run_team(int p, const std::vector<int> &node_of, int tamper_rank,
                                  int only_alg);

#endif
