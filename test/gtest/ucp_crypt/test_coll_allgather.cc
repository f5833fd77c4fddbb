/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Encrypted all-gather, core layer, in a harness of real processes: p forked
 * ranks joined by socket pairs, N emulated nodes (block or cyclic), every
 * algorithm, sizes 0 .. 1 MiB, data verified byte by byte, and the crypto
 * accounting of each rank checked against the algorithm's costs in Table II
 * of the paper (per rank where the table gives them, per node always:
 * every foreign block opened exactly once per node by C-Ring), with zero
 * plaintext bytes between nodes. A rank that tampers with its first frame
 * to another node makes the collective fail on every rank, with no data.
 */
#include <gtest/gtest.h>

#include "ucp_crypt/coll_harness.h"

#include <string>
#include <vector>

struct team_shape {
    int p, N;
    crypt_coll_mapping_t mapping;
};

class crypt_allgather_test : public ::testing::TestWithParam<team_shape> {
};

TEST_P(crypt_allgather_test, every_algorithm_verified_and_accounted)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    std::vector<int> per_node(N, 0);
    for (int r = 0; r < p; ++r) per_node[node_of[r]]++;
    const bool regular = (p % N == 0);

    auto res = run_team(p, node_of, -1, -1);
    for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(res[r].done) << "rank " << r << " did not finish";
        EXPECT_TRUE(res[r].in_place_ok) << "rank " << r;
    }
    for (int a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
        const char *name = crypt_allgather_alg_name((crypt_allgather_alg_t)a);
        for (int s = 0; s < kNumSizes; ++s) {
            const uint64_t m = kSizes[s];
            std::vector<uint64_t> node_opened(N, 0), node_sealed(N, 0);
            uint64_t max_sealed = 0;
            for (int r = 0; r < p; ++r) {
                SCOPED_TRACE(std::string(name) + " rank " + std::to_string(r) +
                             " size " + std::to_string(m));
                const crypt_coll_counters_t &c = res[r].counters[a][s];
                ASSERT_EQ(res[r].status[a][s], CRYPT_COLL_OK);
                ASSERT_TRUE(res[r].data_ok[a][s]);
                EXPECT_EQ(c.inter_node_plaintext_bytes, 0u);
                node_opened[node_of[r]] += c.bytes_opened;
                node_sealed[node_of[r]] += c.bytes_sealed;
                max_sealed = std::max(max_sealed, c.bytes_sealed);
                if (a == CRYPT_ALLGATHER_NAIVE) {          /* Table II: s_e = m, s_d = (p-1)m */
                    EXPECT_EQ(c.bytes_sealed, m);
                    EXPECT_EQ(c.bytes_opened, (p - 1) * m);
                    EXPECT_EQ(c.open_calls, (uint64_t)(p - 1));
                } else if (a == CRYPT_ALLGATHER_O_RD) {    /* each block at most once */
                    EXPECT_LE(c.bytes_opened, (p - 1) * m);
                } else if (a == CRYPT_ALLGATHER_O_RD2) {   /* one open per round at most */
                    int rounds = 0;
                    for (int d = 1; d < p; d *= 2) ++rounds;
                    EXPECT_LE(c.open_calls, (uint64_t)rounds);
                } else if (a == CRYPT_ALLGATHER_HS1) {     /* r_d <= ceil((N-1)/l) */
                    int l_n = per_node[node_of[r]];
                    EXPECT_LE(c.open_calls, (uint64_t)((N - 1 + l_n - 1) / l_n));
                    EXPECT_LE(c.seal_calls, 1u);
                } else if (a == CRYPT_ALLGATHER_HS2) {     /* s_e = m, joint opening */
                    int l_n = per_node[node_of[r]];
                    EXPECT_EQ(c.bytes_sealed, N > 1 ? m : 0);
                    EXPECT_LE(c.open_calls, (uint64_t)((p - l_n + l_n - 1) / l_n));
                } else if (a == CRYPT_ALLGATHER_C_RING ||
                           a == CRYPT_ALLGATHER_C_RD) {    /* s_e = m, s_d = (N-1)m */
                    EXPECT_EQ(c.bytes_sealed, N > 1 ? m : 0);
                    if (regular) {
                        EXPECT_EQ(c.bytes_opened, (N - 1) * m);
                        EXPECT_EQ(c.open_calls, (uint64_t)(N - 1));
                    }
                }
            }
            for (int n = 0; n < N; ++n) {
                SCOPED_TRACE(std::string(name) + " node " + std::to_string(n) +
                             " size " + std::to_string(m));
                const uint64_t foreign = (uint64_t)(p - per_node[n]) * m;
                /* the four that reach the lower bound of s_d */
                const bool concurrent = (a == CRYPT_ALLGATHER_C_RING) ||
                                        (a == CRYPT_ALLGATHER_C_RD) ||
                                        (a == CRYPT_ALLGATHER_HS1) ||
                                        (a == CRYPT_ALLGATHER_HS2);
                if (concurrent) {
                    /* decrypt once per node: each foreign block exactly once */
                    EXPECT_EQ(node_opened[n], foreign);
                } else if ((a == CRYPT_ALLGATHER_O_RING) &&
                           (shape.mapping == CRYPT_COLL_MAP_BLOCK)) {
                    /* Table II: the entry process opens every block that
                     * comes round the ring, its node's own included */
                    EXPECT_EQ(node_opened[n], N > 1 ? (p - 1) * m : 0);
                }
                if (concurrent) {
                    /* encrypt once: each block sealed once, by its owner */
                    EXPECT_EQ(node_sealed[n], N > 1 ? per_node[n] * m : 0);
                }
            }
            if ((a == CRYPT_ALLGATHER_O_RING) && (shape.mapping == CRYPT_COLL_MAP_BLOCK) &&
                (N > 1)) {
                bool all_two = true;
                for (int n = 0; n < N; ++n) all_two &= per_node[n] >= 2;
                if (all_two) {
                    EXPECT_EQ(max_sealed, (p - 1) * m) << "O-Ring's exit process, Table II";
                }
            }
        }
    }
}

static std::vector<team_shape> all_shapes()
{
    std::vector<team_shape> shapes;
    for (int p = 2; p <= 8; ++p) {
        for (int N = 1; N <= 4 && N <= p; ++N) {
            shapes.push_back({p, N, CRYPT_COLL_MAP_BLOCK});
            if (N > 1 && N < p) shapes.push_back({p, N, CRYPT_COLL_MAP_CYCLIC});
        }
    }
    return shapes;
}

static std::string shape_name(const ::testing::TestParamInfo<team_shape> &info)
{
    return "p" + std::to_string(info.param.p) + "_N" + std::to_string(info.param.N) +
           (info.param.mapping == CRYPT_COLL_MAP_BLOCK ? "_block" : "_cyclic");
}

INSTANTIATE_TEST_SUITE_P(shapes, crypt_allgather_test, ::testing::ValuesIn(all_shapes()),
                         shape_name);

TEST_P(crypt_allgather_test, bcast_allreduce_alltoall_once_per_node)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -2);
    std::vector<uint64_t> node_opened(N, 0), node_sealed(N, 0), ar_opened(N, 0), ar_sealed(N, 0);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].bcast_ok);
        EXPECT_TRUE(res[r].allreduce_ok);
        EXPECT_TRUE(res[r].alltoall_ok);
        EXPECT_EQ(res[r].alltoall_counters.inter_node_plaintext_bytes, 0u);
        /* alltoall: each block to another node sealed once, opened once */
        int foreign = 0;
        for (int j = 0; j < p; ++j) foreign += node_of[j] != node_of[r];
        EXPECT_EQ(res[r].alltoall_counters.bytes_sealed, (uint64_t)foreign * 5000);
        EXPECT_EQ(res[r].alltoall_counters.bytes_opened, (uint64_t)foreign * 5000);
        EXPECT_EQ(res[r].bcast_counters.inter_node_plaintext_bytes, 0u);
        EXPECT_EQ(res[r].allreduce_counters.inter_node_plaintext_bytes, 0u);
        node_opened[node_of[r]] += res[r].bcast_counters.bytes_opened;
        node_sealed[node_of[r]] += res[r].bcast_counters.bytes_sealed;
        ar_opened[node_of[r]]   += res[r].allreduce_counters.bytes_opened;
        ar_sealed[node_of[r]]   += res[r].allreduce_counters.bytes_sealed;
    }
    const uint64_t bm = 300000, am = 100000 * 8; /* the last sizes */
    for (int n = 0; n < N; ++n) {
        SCOPED_TRACE("node " + std::to_string(n));
        bool root_node = (n == node_of[p - 1]);
        /* bcast: sealed once (at the root), opened once by every other node */
        EXPECT_EQ(node_sealed[n], (root_node && N > 1) ? bm : 0);
        EXPECT_EQ(node_opened[n], (root_node || N == 1) ? 0 : bm);
        /* allreduce: each node's result sealed once, the others' opened once */
        EXPECT_EQ(ar_sealed[n], N > 1 ? am : 0);
        EXPECT_EQ(ar_opened[n], (uint64_t)(N - 1) * am);
    }
}

TEST_P(crypt_allgather_test, tasks_of_two_teams_progress_together)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -3);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].tasks_ok);
        EXPECT_TRUE(res[r].task_misuse_refused);
        if (r < p - 1) {
            /* posted while the last rank was late: post returned with both
             * tasks in flight, so neither post nor test waits */
            EXPECT_TRUE(res[r].tasks_overlapped);
        }
    }
}

/* Tasks across threads: a few shapes (one node, several, block and
 * cyclic, odd and even) suffice, and the ThreadSanitizer build runs them */
class crypt_task_thread_test : public crypt_allgather_test {
};

INSTANTIATE_TEST_SUITE_P(shapes, crypt_task_thread_test,
                         ::testing::Values(team_shape{2, 1, CRYPT_COLL_MAP_BLOCK},
                                           team_shape{3, 2, CRYPT_COLL_MAP_BLOCK},
                                           team_shape{5, 2, CRYPT_COLL_MAP_CYCLIC},
                                           team_shape{7, 3, CRYPT_COLL_MAP_BLOCK},
                                           team_shape{8, 4, CRYPT_COLL_MAP_CYCLIC}),
                         shape_name);

TEST_P(crypt_task_thread_test, a_task_finishes_on_another_thread_beside_another_team)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -6);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].tasks_ok);
    }
}

TEST_P(crypt_allgather_test, allgatherv_alltoallv_once_per_node)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -4);
    std::vector<uint64_t> node_bytes(N, 0), sealed(N, 0), opened(N, 0);
    uint64_t total = 0;
    for (int q = 0; q < p; ++q) {
        node_bytes[node_of[q]] += v_count(q);
        total += v_count(q);
    }
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].agv_status, CRYPT_COLL_OK);
        EXPECT_TRUE(res[r].agv_ok);
        EXPECT_TRUE(res[r].agv_gaps_ok) << "bytes between the blocks changed";
        EXPECT_TRUE(res[r].agv_in_place_ok);
        EXPECT_EQ(res[r].atv_status, CRYPT_COLL_OK);
        EXPECT_TRUE(res[r].atv_ok);
        EXPECT_EQ(res[r].agv_counters.inter_node_plaintext_bytes, 0u);
        EXPECT_EQ(res[r].atv_counters.inter_node_plaintext_bytes, 0u);
        sealed[node_of[r]] += res[r].agv_counters.bytes_sealed;
        opened[node_of[r]] += res[r].agv_counters.bytes_opened;
        /* alltoallv: each block to another node sealed once, opened once */
        uint64_t out = 0, in = 0;
        for (int j = 0; j < p; ++j) {
            if (node_of[j] == node_of[r]) continue;
            out += v_pair(r, j);
            in  += v_pair(j, r);
        }
        EXPECT_EQ(res[r].atv_counters.bytes_sealed, out);
        EXPECT_EQ(res[r].atv_counters.bytes_opened, in);
    }
    for (int n = 0; n < N; ++n) {
        SCOPED_TRACE("node " + std::to_string(n));
        /* its own bytes sealed once, every other node's opened once */
        EXPECT_EQ(sealed[n], N > 1 ? node_bytes[n] : 0);
        EXPECT_EQ(opened[n], N > 1 ? total - node_bytes[n] : 0);
    }
}
