/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The key schedule: two parties agree, a third with another job secret
 * does not, and every key it hands out is distinct per direction, purpose,
 * flow and generation.
 */
#include "ucx_crypt_config.h"
#include "keyex/keyex.h"
#include "common/test_util.h"

#include <gtest/gtest.h>
#include <openssl/crypto.h>
#include <set>
#include <vector>
#include <sys/mman.h>

using test_util::bytes;
using test_util::to_hex;

namespace {

struct party {
    party(const bytes &job)
    {
        EXPECT_EQ(KEYEX_OK, keyex_keypair_generate(&kp));
        job_secret = (uint8_t*)keyex_secure_alloc(KEYEX_JOB_SECRET_LEN);
        memcpy(job_secret, job.data(), KEYEX_JOB_SECRET_LEN);
    }
    ~party()
    {
        keyex_keypair_cleanup(&kp);
        keyex_secure_free(job_secret, KEYEX_JOB_SECRET_LEN);
    }

    /* keys for the flow this party sends to `peer` */
    std::string send_keys(const party &peer, keyex_purpose_t purpose, uint64_t flow,
                          const uint8_t *job = nullptr)
    {
        return keys(peer, purpose, flow, kp.public_key, peer.kp.public_key, job);
    }
    /* keys for the flow `peer` sends to this party */
    std::string recv_keys(const party &peer, keyex_purpose_t purpose, uint64_t flow)
    {
        return keys(peer, purpose, flow, peer.kp.public_key, kp.public_key, nullptr);
    }

    std::string keys(const party &peer, keyex_purpose_t purpose, uint64_t flow,
                     const uint8_t *sender, const uint8_t *receiver, const uint8_t *job)
    {
        uint8_t pair[KEYEX_SECRET_LEN];
        keyex_traffic_keys_t k;
        EXPECT_EQ(KEYEX_OK, keyex_derive_pair_secret(&kp, peer.kp.public_key,
                                                     job ? job : job_secret, pair));
        EXPECT_EQ(KEYEX_OK, keyex_derive_flow_keys(pair, purpose, sender, receiver,
                                                   flow, 16, &k));
        return to_hex(k.key, k.key_len) + "/" +
               to_hex(k.nonce_prefix, KEYEX_NONCE_PREFIX_LEN);
    }

    keyex_keypair_t kp;
    uint8_t *job_secret;
};

} // namespace

TEST(keyex_schedule, two_parties_derive_matching_keys)
{
    bytes job = test_util::pattern(32, 1);
    party a(job), b(job);

    EXPECT_EQ(a.send_keys(b, KEYEX_PURPOSE_RECORD, 5), b.recv_keys(a, KEYEX_PURPOSE_RECORD, 5));
    EXPECT_EQ(b.send_keys(a, KEYEX_PURPOSE_RECORD, 9), a.recv_keys(b, KEYEX_PURPOSE_RECORD, 9));
    EXPECT_EQ(a.send_keys(b, KEYEX_PURPOSE_BULK, 5), b.recv_keys(a, KEYEX_PURPOSE_BULK, 5));
}

TEST(keyex_schedule, third_party_with_other_job_secret_disagrees)
{
    bytes job = test_util::pattern(32, 1), other = test_util::pattern(32, 2);
    party a(job), b(job), mallory(other);

    /* mallory talks to b with her own key pair and job secret: b's view of
     * that flow (with the real job secret) differs from mallory's */
    EXPECT_NE(mallory.send_keys(b, KEYEX_PURPOSE_RECORD, 1),
              b.recv_keys(mallory, KEYEX_PURPOSE_RECORD, 1));
    /* and with a's public key but not a's private key she gets nowhere:
     * the same job secret and public keys are not enough */
    EXPECT_NE(a.send_keys(b, KEYEX_PURPOSE_RECORD, 1),
              mallory.keys(b, KEYEX_PURPOSE_RECORD, 1, a.kp.public_key,
                           b.kp.public_key, job.data()));
}

TEST(keyex_schedule, no_job_secret_still_agrees_but_differs_from_psk)
{
    bytes job = test_util::pattern(32, 1);
    party a(job), b(job);
    uint8_t pair_a[KEYEX_SECRET_LEN], pair_b[KEYEX_SECRET_LEN], pair_psk[KEYEX_SECRET_LEN];

    ASSERT_EQ(KEYEX_OK, keyex_derive_pair_secret(&a.kp, b.kp.public_key, NULL, pair_a));
    ASSERT_EQ(KEYEX_OK, keyex_derive_pair_secret(&b.kp, a.kp.public_key, NULL, pair_b));
    ASSERT_EQ(KEYEX_OK, keyex_derive_pair_secret(&a.kp, b.kp.public_key, a.job_secret,
                                                 pair_psk));
    EXPECT_EQ(0, memcmp(pair_a, pair_b, KEYEX_SECRET_LEN));
    EXPECT_NE(0, memcmp(pair_a, pair_psk, KEYEX_SECRET_LEN));
}

TEST(keyex_schedule, keys_distinct_per_direction_purpose_and_flow)
{
    bytes job = test_util::pattern(32, 1);
    party a(job), b(job);
    std::set<std::string> seen;

    for (int p = 0; p < KEYEX_PURPOSE_LAST; ++p) {
        for (uint64_t flow : {0ull, 1ull, 1ull << 40}) {
            auto purpose = (keyex_purpose_t)p;
            EXPECT_TRUE(seen.insert(a.send_keys(b, purpose, flow)).second);
            EXPECT_TRUE(seen.insert(b.send_keys(a, purpose, flow)).second);
        }
    }
    EXPECT_EQ(2u * 3u * KEYEX_PURPOSE_LAST, seen.size());
}

TEST(keyex_schedule, update_ratchets_to_new_keys_both_sides)
{
    uint8_t pair[KEYEX_SECRET_LEN];
    uint8_t sender[KEYEX_PUBLIC_KEY_LEN] = {1}, receiver[KEYEX_PUBLIC_KEY_LEN] = {2};
    keyex_traffic_keys_t tx, rx;
    std::set<std::string> seen;

    memset(pair, 7, sizeof(pair));
    ASSERT_EQ(KEYEX_OK, keyex_derive_flow_keys(pair, KEYEX_PURPOSE_RECORD, sender,
                                               receiver, 3, 32, &tx));
    ASSERT_EQ(KEYEX_OK, keyex_derive_flow_keys(pair, KEYEX_PURPOSE_RECORD, sender,
                                               receiver, 3, 32, &rx));
    for (int gen = 0; gen < 4; ++gen) {
        EXPECT_EQ((uint32_t)gen, tx.generation);
        EXPECT_EQ(0, memcmp(tx.key, rx.key, 32));
        EXPECT_EQ(0, memcmp(tx.nonce_prefix, rx.nonce_prefix, KEYEX_NONCE_PREFIX_LEN));
        EXPECT_TRUE(seen.insert(to_hex(tx.key, 32)).second) << "generation " << gen;
        ASSERT_EQ(KEYEX_OK, keyex_update_flow_keys(&tx));
        ASSERT_EQ(KEYEX_OK, keyex_update_flow_keys(&rx));
    }
}

TEST(keyex_schedule, flow_keys_reject_bad_parameters)
{
    uint8_t pair[KEYEX_SECRET_LEN] = {0}, pub[KEYEX_PUBLIC_KEY_LEN] = {0};
    keyex_traffic_keys_t k;
    EXPECT_EQ(KEYEX_ERR_PARAM, keyex_derive_flow_keys(pair, KEYEX_PURPOSE_LAST, pub, pub,
                                                      0, 16, &k));
    EXPECT_EQ(KEYEX_ERR_PARAM, keyex_derive_flow_keys(pair, KEYEX_PURPOSE_RECORD, pub,
                                                      pub, 0, 24, &k));
}

TEST(keyex_schedule, usage_limits)
{
    EXPECT_EQ(KEYEX_USAGE_OK, keyex_usage_check(0, 0, 1 << 20));
    EXPECT_EQ(KEYEX_USAGE_REKEY, keyex_usage_check(KEYEX_REKEY_RECORDS - 1, 0, 1));
    EXPECT_EQ(KEYEX_USAGE_REKEY, keyex_usage_check(10, KEYEX_REKEY_BYTES - 10, 10));
    EXPECT_EQ(KEYEX_USAGE_EXHAUSTED, keyex_usage_check(KEYEX_MAX_RECORDS_PER_KEY, 0, 1));
    EXPECT_EQ(KEYEX_USAGE_EXHAUSTED,
              keyex_usage_check(10, KEYEX_MAX_BYTES_PER_KEY - 5, 10));
    EXPECT_EQ(KEYEX_USAGE_EXHAUSTED,
              keyex_usage_check(0, 0, KEYEX_MAX_BYTES_PER_KEY + 1));
}

TEST(keyex_secure_mem, excluded_from_core_dumps_and_wiped_on_free)
{
    const size_t len = 100;
    uint8_t *p = (uint8_t*)keyex_secure_alloc(len);
    ASSERT_NE(nullptr, p);
    EXPECT_EQ(bytes(len, 0), bytes(p, p + len));
    memset(p, 0x5a, len);

    /* /proc/self/smaps marks the mapping "dd" (don't dump) */
    char line[512];
    bool in_mapping = false, dontdump = false;
    FILE *smaps = fopen("/proc/self/smaps", "r");
    ASSERT_NE(nullptr, smaps);
    while (fgets(line, sizeof(line), smaps)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in_mapping = ((uintptr_t)p >= lo) && ((uintptr_t)p < hi);
        } else if (in_mapping && !strncmp(line, "VmFlags:", 8)) {
            dontdump = strstr(line, " dd") != nullptr;
        }
    }
    fclose(smaps);
    EXPECT_TRUE(dontdump);
    keyex_secure_free(p, len);
}

/* X25519 private keys live in OpenSSL's secure heap (locked, not dumped,
 * wiped on free), which keyex sets up before the first key: the heap in use
 * grows by the private scalar when a key pair is made, and shrinks back
 * when it is freed */
TEST(keyex_secure_mem, x25519_private_keys_in_the_secure_heap)
{
    keyex_keypair_t kp;

    ASSERT_EQ(KEYEX_OK, keyex_keypair_generate(&kp));
    keyex_keypair_cleanup(&kp); /* (the heap is set up by the first key) */
    ASSERT_TRUE(CRYPTO_secure_malloc_initialized());
    size_t before = CRYPTO_secure_used();
    ASSERT_EQ(KEYEX_OK, keyex_keypair_generate(&kp));
    EXPECT_GE(CRYPTO_secure_used(), before + KEYEX_PRIVATE_KEY_LEN);
    keyex_keypair_cleanup(&kp);
    EXPECT_EQ(before, CRYPTO_secure_used());
}

/* A collective team's epoch keys: one step from the team secret, distinct
 * per epoch, the team's key size, the same on every rank */
TEST(keyex_team, epoch_keys_distinct_per_epoch_and_reproducible)
{
    const uint8_t secret[KEYEX_JOB_SECRET_LEN] = {1, 2, 3};
    const uint8_t transcript[KEYEX_TRANSCRIPT_LEN] = {9};
    keyex_traffic_keys_t team, a, b, c;

    for (unsigned key_len : {16u, 32u}) {
        ASSERT_EQ(keyex_derive_team_keys(secret, transcript, key_len, &team), KEYEX_OK);
        ASSERT_EQ(keyex_derive_epoch_keys(&team, 7, &a), KEYEX_OK);
        ASSERT_EQ(keyex_derive_epoch_keys(&team, 7, &b), KEYEX_OK);
        ASSERT_EQ(keyex_derive_epoch_keys(&team, 65535, &c), KEYEX_OK);
        EXPECT_EQ(a.key_len, key_len);
        EXPECT_EQ(a.generation, 7u);
        EXPECT_EQ(0, memcmp(a.key, b.key, key_len)) << "reproducible";
        EXPECT_NE(0, memcmp(a.key, c.key, key_len)) << "distinct per epoch";
        EXPECT_NE(0, memcmp(a.key, team.key, key_len)) << "not the team key";
    }
    const uint8_t other[KEYEX_TRANSCRIPT_LEN] = {8};
    ASSERT_EQ(keyex_derive_team_keys(secret, other, 16, &team), KEYEX_OK);
    ASSERT_EQ(keyex_derive_epoch_keys(&team, 7, &c), KEYEX_OK);
    ASSERT_EQ(keyex_derive_team_keys(secret, transcript, 16, &team), KEYEX_OK);
    ASSERT_EQ(keyex_derive_epoch_keys(&team, 7, &a), KEYEX_OK);
    EXPECT_NE(0, memcmp(a.key, c.key, 16)) << "another transcript, another key";
}

/* The key of a team's lane chunks: the same on every rank, the team's key
 * size, none of the frames' keys, another per team */
TEST(keyex_team, lane_key_is_its_own_and_per_team)
{
    const uint8_t secret[KEYEX_JOB_SECRET_LEN] = {1, 2, 3};
    const uint8_t transcript[KEYEX_TRANSCRIPT_LEN] = {9}, other[KEYEX_TRANSCRIPT_LEN] = {8};
    uint8_t lane[KEYEX_SECRET_LEN], again[KEYEX_SECRET_LEN], theirs[KEYEX_SECRET_LEN];
    keyex_traffic_keys_t team, epoch;

    for (unsigned key_len : {16u, 32u}) {
        memset(lane, 0, sizeof(lane));
        ASSERT_EQ(keyex_derive_team_keys(secret, transcript, key_len, &team), KEYEX_OK);
        ASSERT_EQ(keyex_derive_lane_key(&team, lane), KEYEX_OK);
        ASSERT_EQ(keyex_derive_lane_key(&team, again), KEYEX_OK);
        EXPECT_EQ(0, memcmp(lane, again, key_len)) << "reproducible";
        EXPECT_EQ(std::vector<uint8_t>(lane + key_len, lane + sizeof(lane)),
                  std::vector<uint8_t>(sizeof(lane) - key_len, 0)) << "the team's size";
        for (uint32_t e : {0u, 1u}) {
            ASSERT_EQ(keyex_derive_epoch_keys(&team, e, &epoch), KEYEX_OK);
            EXPECT_NE(0, memcmp(lane, epoch.key, key_len)) << "an epoch's key";
        }
        EXPECT_NE(0, memcmp(lane, team.key, key_len)) << "the team key";
        ASSERT_EQ(keyex_derive_team_keys(secret, other, key_len, &team), KEYEX_OK);
        ASSERT_EQ(keyex_derive_lane_key(&team, theirs), KEYEX_OK);
        EXPECT_NE(0, memcmp(lane, theirs, key_len)) << "another team, another key";
    }
}
