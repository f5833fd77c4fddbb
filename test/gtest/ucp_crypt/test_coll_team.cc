/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A collectives team as it is made and attacked (coll_harness.h): the
 * bootstrap through an out-of-band all-gather, what the team keeps of its
 * key input, memory over many teams, an adversary on the bootstrap or on
 * the frames (forged, redirected), epochs, the node map and the score
 * table.
 */
#include <gtest/gtest.h>

#include "ucp_crypt/coll_harness.h"
#include "ucp_crypt/coll/crypt_coll_wire.h"
#include "keyex/keyex.h"
#include "common/test_util.h"

#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

/* Teams made, used and cleaned up over and over (a team of one: the
 * bootstrap, the key schedule, the AEAD contexts and the frames are all
 * there): after a warm-up, the heap stays flat. */
int self_oob_allgather(void *, const void *sbuf, void *rbuf, size_t len)
{
    memcpy(rbuf, sbuf, len);
    return 0;
}

/* A team of one whose bootstrap message (its hello: the rank's randoms)
 * the test keeps, to recompute the transcript's hash: the first gather is
 * the hellos, the second the confirmations */
int keeping_oob_allgather(void *ctx, const void *sbuf, void *rbuf, size_t len)
{
    auto kept = static_cast<std::vector<uint8_t>*>(ctx);
    memcpy(rbuf, sbuf, len);
    if (kept->empty()) {
        kept->assign((const uint8_t*)sbuf, (const uint8_t*)sbuf + len);
    }
    return 0;
}

/* A team of one made through the bootstrap, and the transcript's hash,
 * recomputed from the message the test's gather kept */
void team_of_one(crypt_coll_team_t &t, uint8_t seed, unsigned key_len,
                 uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN])
{
    uint8_t secret[32];
    for (size_t i = 0; i < sizeof(secret); ++i) secret[i] = (uint8_t)(i * seed + 3);
    std::vector<uint8_t> hello;
    crypt_coll_oob_t oob = {keeping_oob_allgather, &hello, 0, 1, nullptr};
    ASSERT_EQ(crypt_coll_team_create(&t, &oob, nullptr, secret, key_len,
                                     CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                     nullptr), CRYPT_COLL_OK);
    ASSERT_EQ(keyex_hash(hello.data(), hello.size(), team_id), KEYEX_OK);
}

/* The team's name where others see it (the collective lane's headers) is
 * SHA-256 of a label and the transcript's hash, never bytes of that hash:
 * the transcript is an input of the team key that crosses only inside the
 * MPI library's traffic, so a recording of the lane plus a job secret
 * stolen later must not give it (issue 29 item 5) */
TEST(crypt_coll_team_create, the_public_name_shows_nothing_of_the_key_input)
{
    crypt_coll_team_t t;
    uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN];
    ASSERT_NO_FATAL_FAILURE(team_of_one(t, 11, 16, team_id));
    const char label[] = "ucx-crypt team name";
    std::vector<uint8_t> input(label, label + sizeof(label) - 1);
    input.insert(input.end(), team_id, team_id + CRYPT_COLL_TEAM_ID_LEN);
    uint8_t hash[KEYEX_TRANSCRIPT_LEN];
    ASSERT_EQ(keyex_hash(input.data(), input.size(), hash), KEYEX_OK);
    uint64_t expected;
    memcpy(&expected, hash, sizeof(expected));
    EXPECT_EQ(t.public_id, expected);
    for (size_t at = 0; at + sizeof(uint64_t) <= CRYPT_COLL_TEAM_ID_LEN; ++at) {
        EXPECT_NE(memcmp(&t.public_id, team_id + at, sizeof(uint64_t)), 0)
                << "the name is bytes of the key input, at " << at;
    }
    crypt_coll_team_cleanup(&t);
}

/* The transcript's hash is, beside the job secret, the team key's only
 * input: no copy of it stays in the team, in use or after its cleanup (a
 * core dump or a read of the heap later, plus the key file, gave the lane
 * key: crypto review N2) */
TEST(crypt_coll_team_create, the_team_keeps_no_copy_of_the_key_input)
{
    crypt_coll_team_t t;
    uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN];
    ASSERT_NO_FATAL_FAILURE(team_of_one(t, 7, 32, team_id));
    auto holds_it = [&]() {
        const uint8_t *bytes = reinterpret_cast<const uint8_t*>(&t);
        for (size_t at = 0; at + 8 <= sizeof(t); ++at) {
            if (memcmp(bytes + at, team_id, 8) == 0) return true;
        }
        return false;
    };
    EXPECT_FALSE(holds_it()) << "the team holds the transcript's hash";
    crypt_coll_team_cleanup(&t);
    EXPECT_FALSE(holds_it()) << "the transcript's hash after the cleanup";
}

TEST(crypt_coll_team_create, create_destroy_cycles_keep_memory_flat)
{
    if (test_util::under_sanitizer()) {
        GTEST_SKIP() << "a sanitizer's allocator hides what the process "
                        "holds (LeakSanitizer checks the ASan build)";
    }
    const int warmup = 50, cycles = 2000;
    uint8_t secret[32];
    for (size_t i = 0; i < sizeof(secret); ++i) secret[i] = (uint8_t)(i * 37 + 1);
    crypt_coll_oob_t oob = {self_oob_allgather, nullptr, 0, 1};
    auto cycle = [&](int seq) {
        crypt_coll_team_t t;
        ASSERT_EQ(crypt_coll_team_create(&t, &oob, nullptr, secret, (seq & 1) ? 32 : 16,
                                         CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                         nullptr), CRYPT_COLL_OK);
        std::vector<uint8_t> mine(1000, (uint8_t)seq), all(1000, 0);
        EXPECT_EQ(crypt_coll_allgather(&t, CRYPT_ALLGATHER_C_RING, mine.data(), all.data(),
                                       mine.size()), CRYPT_COLL_OK);
        EXPECT_EQ(all, mine);
        crypt_coll_team_cleanup(&t);
    };
    for (int i = 0; i < warmup; ++i) cycle(i);
    size_t heap0 = test_util::heap_in_use();
    for (int i = 0; i < cycles; ++i) {
        cycle(warmup + i);
        ASSERT_FALSE(HasFatalFailure()) << "cycle " << i;
    }
    long growth = (long)test_util::heap_in_use() - (long)heap0;
    printf("  %d teams after %d: heap %+ld bytes\n", cycles, warmup, growth);
    /* a leaked team key or AEAD context is hundreds of bytes a cycle */
    EXPECT_LT(growth, 16L * cycles);
}

TEST(crypt_coll_team_create, bootstrap_through_an_out_of_band_allgather)
{
    const int p = 5;
    std::vector<int> node_of(p), want(p);
    ASSERT_EQ(crypt_coll_node_map(p, 2, CRYPT_COLL_MAP_BLOCK, node_of.data()), 0);
    ASSERT_EQ(crypt_coll_node_map(p, 3, CRYPT_COLL_MAP_CYCLIC, want.data()), 0);
    setenv("UCX_CRYPT_COLL_NODES", "3:cyclic", 1); /* inherited by the ranks */
    auto res = run_team(p, node_of, -1, -5);
    unsetenv("UCX_CRYPT_COLL_NODES");
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].oob_env_ok) << "every rank derived the same key";
        EXPECT_EQ(res[r].oob_env_nodes, 3);
        EXPECT_EQ(std::vector<int>(res[r].oob_node_of, res[r].oob_node_of + p), want);
        EXPECT_TRUE(res[r].oob_host_ok) << "AES-256";
        EXPECT_EQ(res[r].oob_host_nodes, 1) << "one host: one node";
    }
}

/* The bootstrap under attack, on the out-of-band all-gather: an altered
 * or foreign message (another job secret, another job) is refused before
 * anything in it is used; a replayed or spliced message of an earlier team
 * passes its MAC, but the ranks that took it saw other messages than the
 * rest, and the second round (every rank's MAC of its rank and what it
 * saw) tells them all; a rank given a whole old transcript finds its own
 * message replaced. No rank makes a team: no old key, no node map that
 * differs between ranks, no frame in clear. */
class crypt_coll_bootstrap_attack_test : public ::testing::TestWithParam<int> {
};

std::string bootstrap_attack_name(const ::testing::TestParamInfo<int> &info)
{
    const char *names[] = {"honest", "altered_host", "other_secret", "replay",
                           "splice_host", "replay_all", "other_job"};
    return names[info.param];
}

TEST_P(crypt_coll_bootstrap_attack_test, refused_on_every_rank)
{
    const int p = 4;
    std::vector<int> node_of = {0, 0, 1, 1};
    bootstrap_attack = (bootstrap_attack_t)GetParam();
    auto res = run_team(p, node_of, -1, -5);
    const bootstrap_attack_t attack = bootstrap_attack;
    bootstrap_attack = BOOTSTRAP_HONEST;
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        if ((attack == BOOTSTRAP_REPLAY) || (attack == BOOTSTRAP_REPLAY_ALL)) {
            EXPECT_EQ(res[r].oob_env_ok, CRYPT_COLL_OK) << "the first team";
        }
        EXPECT_EQ(res[r].oob_host_ok, CRYPT_COLL_ERR_AUTH)
                << "a rank made a team from what some ranks did not see";
    }
}

INSTANTIATE_TEST_SUITE_P(attacks, crypt_coll_bootstrap_attack_test,
                         ::testing::Values((int)BOOTSTRAP_ALTER_HOST,
                                           (int)BOOTSTRAP_OTHER_SECRET,
                                           (int)BOOTSTRAP_REPLAY,
                                           (int)BOOTSTRAP_SPLICE_HOST,
                                           (int)BOOTSTRAP_REPLAY_ALL,
                                           (int)BOOTSTRAP_OTHER_JOB),
                         bootstrap_attack_name);

/* Every algorithm on AES-256 team keys that move to a new epoch every two
 * frames a rank seals: ranks cross epochs at their own pace, receivers
 * follow the epoch in the frame header, data verified. */
TEST(crypt_coll_epochs, every_algorithm_across_many_epochs_aes256)
{
    const int p = 6;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, 3, CRYPT_COLL_MAP_CYCLIC, node_of.data()), 0);
    kKeyLen     = 32;
    kEpochLimit = 2;
    auto res = run_team(p, node_of, -1, -1);
    kKeyLen     = 16;
    kEpochLimit = 0;
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        for (int a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
            for (int s = 0; s < kNumSizes; ++s) {
                EXPECT_EQ(res[r].status[a][s], CRYPT_COLL_OK) << crypt_allgather_alg_name(
                        (crypt_allgather_alg_t)a) << " size " << kSizes[s];
                EXPECT_TRUE(res[r].data_ok[a][s]);
            }
        }
        EXPECT_GT(res[r].epochs, 10u) << "the epochs moved on";
    }
}

TEST(crypt_allgatherv_tamper, forged_node_frame_fails_every_rank_with_no_data)
{
    const int p = 6, N = 3;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, CRYPT_COLL_MAP_BLOCK, node_of.data()), 0);
    auto res = run_team(p, node_of, 2 /* node 1's leader */, -4);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].agv_status, CRYPT_COLL_ERR_AUTH);
        EXPECT_FALSE(res[r].agv_ok);
        EXPECT_TRUE(res[r].agv_gaps_ok) << "failure zeroes the blocks, not the gaps";
        EXPECT_EQ(res[r].atv_status, CRYPT_COLL_OK) << "the next collective is fine";
    }
}

class crypt_allgather_tamper_test : public ::testing::TestWithParam<int> {
};

TEST_P(crypt_allgather_tamper_test, forged_frame_fails_every_rank_with_no_data)
{
    const int p = 6, N = 3, alg = GetParam();
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, CRYPT_COLL_MAP_BLOCK, node_of.data()), 0);
    /* rank 1 is its node's exit (HS: rank 0 is its node's leader, the
     * only rank that talks to other nodes): its first frame is forged */
    int tamperer = (alg == CRYPT_ALLGATHER_HS1 || alg == CRYPT_ALLGATHER_HS2) ? 0 : 1;
    auto res = run_team(p, node_of, tamperer, alg);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].status[alg][3], CRYPT_COLL_ERR_AUTH);
        EXPECT_FALSE(res[r].data_ok[alg][3]) << "an error must come with no data";
    }
}

/* O-RD2 with every rank on its own node: in round 0 rank r receives the
 * merged frame of rank r + 1. The adversary hands rank 0 the frame rank 2
 * sealed for rank 1 instead. Same collective, same round, same length: only
 * the sealer and the receiver tell the two apart, so a frame accepted from
 * any sealer would put block 2 where block 1 belongs, as success. */
TEST(crypt_allgather_redirect, frame_of_another_sender_fails_every_rank_with_no_data)
{
    const int p = 4;
    std::vector<int> node_of = {0, 1, 2, 3};
    redirect = {2, 0, 1};
    auto res = run_team(p, node_of, -1, CRYPT_ALLGATHER_O_RD2);
    redirect = {-1, -1, -1};
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].status[CRYPT_ALLGATHER_O_RD2][3], CRYPT_COLL_ERR_AUTH);
        EXPECT_FALSE(res[r].data_ok[CRYPT_ALLGATHER_O_RD2][3])
                << "an error must come with no data";
    }
}

INSTANTIATE_TEST_SUITE_P(algorithms, crypt_allgather_tamper_test,
                         ::testing::Range(0, (int)CRYPT_ALLGATHER_LAST),
                         [](const ::testing::TestParamInfo<int> &info) {
                             std::string n = crypt_allgather_alg_name(
                                     (crypt_allgather_alg_t)info.param);
                             for (auto &ch : n) if (ch == '-') ch = '_';
                             return n;
                         });

TEST(crypt_coll_node_map, block_cyclic_and_environment)
{
    int node_of[7];
    ASSERT_EQ(crypt_coll_node_map(7, 3, CRYPT_COLL_MAP_BLOCK, node_of), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 7), (std::vector<int>{0, 0, 0, 1, 1, 2, 2}));
    ASSERT_EQ(crypt_coll_node_map(7, 3, CRYPT_COLL_MAP_CYCLIC, node_of), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 7), (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
    EXPECT_NE(crypt_coll_node_map(3, 4, CRYPT_COLL_MAP_BLOCK, node_of), 0);

    char error[128];
    ASSERT_EQ(crypt_coll_node_map_parse("2:cyclic", 4, node_of, error, sizeof(error)), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 4), (std::vector<int>{0, 1, 0, 1}));
    EXPECT_NE(crypt_coll_node_map_parse("2:diagonal", 4, node_of, error, sizeof(error)), 0);
    EXPECT_NE(std::string(error).find("N:cyclic"), std::string::npos) << error;
    EXPECT_NE(crypt_coll_node_map_parse("", 4, node_of, error, sizeof(error)), 0);
}

TEST(crypt_coll_score, default_table_and_tune_strings)
{
    crypt_coll_team_t team;
    const int node_of[4] = {0, 0, 1, 1};
    uint8_t secret[32] = {1}, salt[CRYPT_COLL_TEAM_ID_LEN] = {2};
    ASSERT_EQ(crypt_coll_team_init(&team, 0, 4, node_of, secret, salt, 16,
                                   CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                   nullptr), CRYPT_COLL_OK);
    auto sel = [&](size_t m, const char *tune) {
        return std::string(crypt_allgather_alg_name(
                crypt_coll_allgather_select(&team, m, tune)));
    };
    /* Table III without a node segment: O-RD2 small, C-Ring from 4 KiB */
    EXPECT_EQ(sel(0, nullptr), "o-rd2");
    EXPECT_EQ(sel(4095, nullptr), "o-rd2");
    EXPECT_EQ(sel(4096, nullptr), "c-ring");
    EXPECT_EQ(sel(1 << 20, nullptr), "c-ring");
    /* with a segment that holds 64 KiB: HS2 up to there */
    std::vector<uint8_t> seg(crypt_coll_node_shm_size(4, CRYPT_COLL_HS_DEFAULT_MAX));
    crypt_coll_team_set_node_shm(&team, seg.data(), seg.size());
    EXPECT_EQ(sel(8192, nullptr), "hs2");
    EXPECT_EQ(sel(CRYPT_COLL_HS_DEFAULT_MAX, nullptr), "hs2");
    EXPECT_EQ(sel(CRYPT_COLL_HS_DEFAULT_MAX + 1, nullptr), "c-ring");
    /* tune strings, UCC style: first matching entry wins */
    EXPECT_EQ(sel(100, "allgather:c-rd"), "c-rd");
    EXPECT_EQ(sel(100, "allgather:0-4k:naive,4k-inf:o-ring"), "naive");
    EXPECT_EQ(sel(5000, "allgather:0-4k:naive,4k-inf:o-ring"), "o-ring");
    EXPECT_EQ(sel(3 << 20, "allgather:0-1m:naive,1m-2m:o-rd"), "c-ring") << "no entry: table";
    EXPECT_EQ(sel(1 << 20, "allgather:0-1m:naive"), "naive") << "ranges are inclusive";
    EXPECT_EQ(sel(100, "allgather:0-4k:nonsense,hs1"), "hs1") << "unknown names skipped";
    EXPECT_EQ(sel(100, "bcast:0-inf:naive"), "o-rd2") << "another collective's string";
    EXPECT_EQ(sel(100, "allgather:12x-3:naive"), "o-rd2") << "malformed range";
    /* HS asked for, but the segment cannot hold the message */
    EXPECT_EQ(sel(1 << 20, "allgather:hs1"), "c-ring");
    crypt_coll_team_set_node_shm(&team, nullptr, 0);
    EXPECT_EQ(sel(100, "allgather:hs2"), "c-ring");
    EXPECT_EQ(crypt_allgather_alg_by_name("c-rd", 4), CRYPT_ALLGATHER_C_RD);
    EXPECT_EQ(crypt_allgather_alg_by_name("c-r", 3), -1);
    /* sizes that are no sizes (the fuzzer found the negative one: it was
     * converted to size_t, which is undefined) */
    EXPECT_EQ(sel(100, "allgather:-11111:naive"), "o-rd2");
    EXPECT_EQ(sel(100, "allgather:nan-inf:naive"), "o-rd2");
    EXPECT_EQ(sel(100, "allgather:0-1e400:naive"), "naive") << "huge: the largest";
    EXPECT_FALSE(crypt_coll_tune_valid("allgather:-5:naive"));
    EXPECT_FALSE(crypt_coll_tune_valid("allgather:0-4k:naive,"));
    EXPECT_FALSE(crypt_coll_tune_valid("allgather:0-4k:nonsense"));
    EXPECT_TRUE(crypt_coll_tune_valid("allgather:0-4k:naive,4k-inf:o-ring"));
    EXPECT_TRUE(crypt_coll_tune_valid("allgather:hs2"));
    crypt_coll_team_cleanup(&team);
}
