/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wire handshake (src/keyex/noise.h): two parties with the job secret
 * agree on transport keys; a party without it is refused at mac1; any
 * changed byte of either message is refused; a responder learns the
 * initiator's true static key.
 */
#include "ucx_crypt_config.h"
#include "keyex/noise.h"

#include <gtest/gtest.h>
#include <string.h>

namespace {

struct hs_party {
    keyex_keypair_t s;
    keyex_noise_t   hs{}; /* zero: cleanup is safe before a start */
    hs_party()  { EXPECT_EQ(KEYEX_OK, keyex_keypair_generate(&s)); }
    ~hs_party() { keyex_noise_cleanup(&hs); keyex_keypair_cleanup(&s); }
};

const uint8_t job_a[KEYEX_JOB_SECRET_LEN] = {1, 2, 3};
const keyex_noise_context_t records_128 = {KEYEX_NOISE_ROLE_RECORDS, 16};
const uint8_t job_b[KEYEX_JOB_SECRET_LEN] = {9, 9, 9};

class keyex_noise_test : public ::testing::Test {
protected:
    hs_party ini, rsp;
    keyex_noise_init_msg_t init;
    keyex_noise_response_msg_t resp;
    keyex_noise_transport_t ikeys, rkeys;
    uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN], got_ts[KEYEX_NOISE_TIMESTAMP_LEN];
    uint8_t resp_flags = 0xff;

    void initiate(const uint8_t *ini_job, const uint8_t *rsp_job,
                  const keyex_noise_context_t &ini_context = records_128,
                  const keyex_noise_context_t &rsp_context = records_128)
    {
        keyex_noise_timestamp_now(ts);
        ASSERT_EQ(KEYEX_OK, keyex_noise_start(&ini.hs, &ini.s, ini_job, &ini_context));
        ASSERT_EQ(KEYEX_OK, keyex_noise_start(&rsp.hs, &rsp.s, rsp_job, &rsp_context));
        ASSERT_EQ(KEYEX_OK, keyex_noise_init_create(&ini.hs, &ini.s, ini_job,
                                                    rsp.s.public_key, ts, &init));
    }
};

TEST_F(keyex_noise_test, both_sides_agree_and_learn_the_static_key) {
    initiate(job_a, job_a);
    ASSERT_TRUE(keyex_noise_init_precheck(rsp.hs.mac1_key_local, &init));
    ASSERT_EQ(KEYEX_OK, keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
    EXPECT_EQ(0, memcmp(ts, got_ts, sizeof(ts)));
    EXPECT_EQ(0, memcmp(rsp.hs.rs, ini.s.public_key, KEYEX_PUBLIC_KEY_LEN));
    ASSERT_EQ(KEYEX_OK, keyex_noise_response_create(&rsp.hs, job_a, 0, &resp, &rkeys));
    ASSERT_EQ(KEYEX_OK, keyex_noise_response_consume(&ini.hs, &ini.s, &resp, &resp_flags, &ikeys));
    EXPECT_EQ(0, memcmp(ikeys.send, rkeys.recv, KEYEX_NOISE_KEY_LEN));
    EXPECT_EQ(0, memcmp(ikeys.recv, rkeys.send, KEYEX_NOISE_KEY_LEN));
    EXPECT_EQ(resp_flags, 0);
    EXPECT_NE(0, memcmp(ikeys.send, ikeys.recv, KEYEX_NOISE_KEY_LEN));
}

/* The exporter secret (what crypt's record and bulk keys of a connection
 * come from): the same on both sides, independent of the transport keys,
 * and fresh per handshake between the same two static keys, because it
 * mixes the two ephemerals (forward secrecy per connection). */
TEST_F(keyex_noise_test, the_exporter_is_shared_and_fresh_per_handshake) {
    uint8_t first[KEYEX_SECRET_LEN];

    for (int round = 0; round < 2; ++round) {
        if (round > 0) { /* a second handshake between the same two keys */
            keyex_noise_cleanup(&ini.hs);
            keyex_noise_cleanup(&rsp.hs);
        }
        initiate(job_a, job_a);
        ASSERT_EQ(KEYEX_OK, keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
        ASSERT_EQ(KEYEX_OK, keyex_noise_response_create(&rsp.hs, job_a, 0, &resp, &rkeys));
        ASSERT_EQ(KEYEX_OK, keyex_noise_response_consume(&ini.hs, &ini.s, &resp,
                                                         &resp_flags, &ikeys));
        EXPECT_EQ(0, memcmp(ikeys.exporter, rkeys.exporter, KEYEX_SECRET_LEN));
        EXPECT_NE(0, memcmp(ikeys.exporter, ikeys.send, KEYEX_NOISE_KEY_LEN));
        EXPECT_NE(0, memcmp(ikeys.exporter, ikeys.recv, KEYEX_NOISE_KEY_LEN));
        if (round == 0) {
            memcpy(first, ikeys.exporter, sizeof(first));
        } else {
            EXPECT_NE(0, memcmp(first, ikeys.exporter, sizeof(first)));
        }
    }
}

TEST_F(keyex_noise_test, the_response_carries_its_flags) {
    initiate(job_a, job_a);
    ASSERT_EQ(KEYEX_OK, keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
    ASSERT_EQ(KEYEX_OK, keyex_noise_response_create(&rsp.hs, job_a,
                                                    KEYEX_NOISE_RESPONSE_REDIRECT,
                                                    &resp, &rkeys));
    ASSERT_EQ(KEYEX_OK, keyex_noise_response_consume(&ini.hs, &ini.s, &resp,
                                                     &resp_flags, &ikeys));
    EXPECT_EQ(resp_flags, KEYEX_NOISE_RESPONSE_REDIRECT);
}

TEST_F(keyex_noise_test, another_job_secret_is_refused_at_mac1) {
    initiate(job_b, job_a);
    EXPECT_FALSE(keyex_noise_init_precheck(rsp.hs.mac1_key_local, &init));
    EXPECT_EQ(KEYEX_ERR_AUTH,
              keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
}

/* The prologue binds the version, the role and the key size: a peer of
 * another key size, or the collective lane's wire for the records' one,
 * fails at the first DH message (its mac1 passes: it holds the secret) */
TEST_F(keyex_noise_test, another_role_or_key_size_is_refused_at_the_handshake) {
    const keyex_noise_context_t records_256 = {KEYEX_NOISE_ROLE_RECORDS, 32};
    const keyex_noise_context_t lane        = {KEYEX_NOISE_ROLE_LANE, 0};

    for (const keyex_noise_context_t &other : {records_256, lane}) {
        keyex_noise_cleanup(&ini.hs);
        keyex_noise_cleanup(&rsp.hs);
        initiate(job_a, job_a, other, records_128);
        EXPECT_TRUE(keyex_noise_init_precheck(rsp.hs.mac1_key_local, &init));
        EXPECT_EQ(KEYEX_ERR_AUTH,
                  keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
    }
    keyex_noise_cleanup(&ini.hs);
    keyex_noise_cleanup(&rsp.hs);
    initiate(job_a, job_a);
    EXPECT_EQ(KEYEX_OK, keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts))
        << "the same context: taken";
}

TEST_F(keyex_noise_test, every_changed_byte_of_the_initiation_is_refused) {
    initiate(job_a, job_a);
    /* (mac2, the last 16 bytes, is the caller's: keyex_noise_cookie_test) */
    for (size_t i = 0; i < offsetof(keyex_noise_init_msg_t, mac2); ++i) {
        keyex_noise_init_msg_t bad = init;
        keyex_noise_t fresh;
        ((uint8_t*)&bad)[i] ^= 0x20;
        ASSERT_EQ(KEYEX_OK, keyex_noise_start(&fresh, &rsp.s, job_a, &records_128));
        EXPECT_NE(KEYEX_OK, keyex_noise_init_consume(&fresh, &rsp.s, &bad, got_ts))
            << "byte " << i;
        keyex_noise_cleanup(&fresh);
    }
}

TEST_F(keyex_noise_test, every_changed_byte_of_the_response_is_refused) {
    initiate(job_a, job_a);
    ASSERT_EQ(KEYEX_OK, keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
    ASSERT_EQ(KEYEX_OK, keyex_noise_response_create(&rsp.hs, job_a, 0, &resp, &rkeys));
    for (size_t i = 0; i < sizeof(resp); ++i) {
        keyex_noise_t copy = ini.hs; /* same ephemeral: a fresh try each */
        keyex_noise_response_msg_t bad = resp;
        ((uint8_t*)&bad)[i] ^= 0x01;
        EXPECT_NE(KEYEX_OK, keyex_noise_response_consume(&copy, &ini.s, &bad, &resp_flags, &ikeys))
            << "byte " << i;
    }
    EXPECT_EQ(KEYEX_OK, keyex_noise_response_consume(&ini.hs, &ini.s, &resp, &resp_flags, &ikeys));
}

TEST_F(keyex_noise_test, a_response_under_another_job_secret_is_refused) {
    initiate(job_a, job_a);
    ASSERT_EQ(KEYEX_OK, keyex_noise_init_consume(&rsp.hs, &rsp.s, &init, got_ts));
    ASSERT_EQ(KEYEX_OK, keyex_noise_response_create(&rsp.hs, job_b, 0, &resp, &rkeys));
    EXPECT_EQ(KEYEX_ERR_AUTH,
              keyex_noise_response_consume(&ini.hs, &ini.s, &resp, &resp_flags, &ikeys));
}

TEST(keyex_noise, timestamps_strictly_increase) {
    uint8_t a[KEYEX_NOISE_TIMESTAMP_LEN], b[KEYEX_NOISE_TIMESTAMP_LEN];
    keyex_noise_timestamp_now(a);
    for (int i = 0; i < 1000; ++i) {
        keyex_noise_timestamp_now(b);
        ASSERT_LT(memcmp(a, b, sizeof(a)), 0);
        memcpy(a, b, sizeof(a));
    }
}

/* ---- the connection manager's handshake (Noise_NNpsk0) ------------------ */

class keyex_noise_cm_test : public ::testing::Test {
protected:
    keyex_noise_t cli{}, srv{};
    keyex_noise_cm_init_msg_t init;
    keyex_noise_cm_msg_t resp;
    keyex_noise_transport_t ckeys, skeys;

    ~keyex_noise_cm_test() { keyex_noise_cleanup(&cli); keyex_noise_cleanup(&srv); }

    void initiate(const uint8_t *cli_job, const uint8_t *srv_job)
    {
        keyex_noise_cleanup(&cli);
        keyex_noise_cleanup(&srv);
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_start(&cli, cli_job));
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_start(&srv, srv_job));
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_init_create(&cli, &init));
    }

    void complete()
    {
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_init_consume(&srv, &init));
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_response_create(&srv, &resp, &skeys));
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_response_consume(&cli, &resp, &ckeys));
    }
};

TEST_F(keyex_noise_cm_test, both_sides_agree_on_fresh_keys) {
    uint8_t first[KEYEX_NOISE_KEY_LEN];

    for (int round = 0; round < 2; ++round) {
        initiate(job_a, job_a);
        complete();
        EXPECT_EQ(0, memcmp(ckeys.send, skeys.recv, KEYEX_NOISE_KEY_LEN));
        EXPECT_EQ(0, memcmp(ckeys.recv, skeys.send, KEYEX_NOISE_KEY_LEN));
        EXPECT_NE(0, memcmp(ckeys.send, ckeys.recv, KEYEX_NOISE_KEY_LEN));
        EXPECT_EQ(0, memcmp(ckeys.exporter, skeys.exporter, KEYEX_SECRET_LEN));
        if (round == 0) {
            memcpy(first, ckeys.send, sizeof(first));
        } else { /* the same job secret, new ephemerals: new keys */
            EXPECT_NE(0, memcmp(first, ckeys.send, sizeof(first)));
        }
    }
}

/* the server's first check, before any DH: the initiation's tag under
 * the psk; a client of another job, or of none, never gets past it */
TEST_F(keyex_noise_cm_test, another_job_secret_or_none_is_refused_at_the_initiation) {
    initiate(job_b, job_a);
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cm_init_consume(&srv, &init));
    initiate(NULL, job_a);
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cm_init_consume(&srv, &init));
    initiate(job_a, NULL);
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cm_init_consume(&srv, &init));
}

TEST_F(keyex_noise_cm_test, every_changed_byte_of_the_initiation_is_refused) {
    initiate(job_a, job_a);
    /* (mac2, the last 16 bytes, is the caller's: cookies, below) */
    for (size_t i = 0; i < sizeof(init.msg); ++i) {
        keyex_noise_cm_init_msg_t bad = init;
        keyex_noise_t fresh;
        ((uint8_t*)&bad)[i] ^= 0x20;
        ASSERT_EQ(KEYEX_OK, keyex_noise_cm_start(&fresh, job_a));
        EXPECT_NE(KEYEX_OK, keyex_noise_cm_init_consume(&fresh, &bad)) << "byte " << i;
        keyex_noise_cleanup(&fresh);
    }
}

TEST_F(keyex_noise_cm_test, every_changed_byte_of_the_response_is_refused) {
    initiate(job_a, job_a);
    ASSERT_EQ(KEYEX_OK, keyex_noise_cm_init_consume(&srv, &init));
    ASSERT_EQ(KEYEX_OK, keyex_noise_cm_response_create(&srv, &resp, &skeys));
    for (size_t i = 0; i < sizeof(resp); ++i) {
        keyex_noise_t copy = cli; /* same ephemeral: a fresh try each */
        keyex_noise_cm_msg_t bad = resp;
        ((uint8_t*)&bad)[i] ^= 0x01;
        EXPECT_NE(KEYEX_OK, keyex_noise_cm_response_consume(&copy, &bad, &ckeys))
            << "byte " << i;
    }
    EXPECT_EQ(KEYEX_OK, keyex_noise_cm_response_consume(&cli, &resp, &ckeys));
}

/* a replayed initiation gets an answer, but the replayer cannot use it:
 * the server's keys for it differ from every earlier connection's, and
 * only the holder of the original ephemeral could derive them */
TEST_F(keyex_noise_cm_test, a_replayed_initiation_yields_keys_of_its_own) {
    initiate(job_a, job_a);
    complete();
    keyex_noise_t again{};
    keyex_noise_cm_msg_t resp2;
    keyex_noise_transport_t keys2;
    ASSERT_EQ(KEYEX_OK, keyex_noise_cm_start(&again, job_a));
    ASSERT_EQ(KEYEX_OK, keyex_noise_cm_init_consume(&again, &init));
    ASSERT_EQ(KEYEX_OK, keyex_noise_cm_response_create(&again, &resp2, &keys2));
    EXPECT_NE(0, memcmp(keys2.recv, skeys.recv, KEYEX_NOISE_KEY_LEN));
    EXPECT_NE(0, memcmp(resp2.ephemeral, resp.ephemeral, KEYEX_PUBLIC_KEY_LEN));
    keyex_noise_cleanup(&again);
}

TEST_F(keyex_noise_cm_test, a_wire_initiation_is_not_a_cm_initiation) {
    /* the two handshakes share primitives, not keys: each has its own
     * protocol name, prologue and psk label */
    initiate(job_a, job_a);
    keyex_noise_cm_init_msg_t forged = init;
    forged.msg.type = KEYEX_NOISE_INIT_TYPE;
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cm_init_consume(&srv, &forged));
}

/* Cookies (noise.h, WireGuard whitepaper §5.3): only a job-secret holder
 * makes a cookie reply the initiator takes, or a mac2 the responder takes;
 * both are bound to what they answer and to the receiver. */
class keyex_noise_cookie_test : public ::testing::Test {
protected:
    uint8_t job_a[KEYEX_JOB_SECRET_LEN], job_b[KEYEX_JOB_SECRET_LEN];
    uint8_t rs[KEYEX_PUBLIC_KEY_LEN], other_rs[KEYEX_PUBLIC_KEY_LEN];
    uint8_t cookie[KEYEX_NOISE_COOKIE_LEN], answered[KEYEX_NOISE_MAC1_LEN];

    void SetUp() override
    {
        memset(job_a, 0xa1, sizeof(job_a));
        memset(job_b, 0xb2, sizeof(job_b));
        memset(rs, 0x11, sizeof(rs));
        memset(other_rs, 0x12, sizeof(other_rs));
        memset(cookie, 0xc0, sizeof(cookie));
        memset(answered, 0x3a, sizeof(answered));
    }

    std::vector<uint8_t> key(const uint8_t *job, const uint8_t *receiver)
    {
        std::vector<uint8_t> k(KEYEX_SECRET_LEN);
        EXPECT_EQ(KEYEX_OK, keyex_noise_cookie_key(job, receiver, k.data()));
        return k;
    }
};

TEST_F(keyex_noise_cookie_test, a_cookie_reply_is_taken_only_from_a_job_secret_holder) {
    auto k = key(job_a, rs);
    keyex_noise_cookie_msg_t reply;
    uint8_t got[KEYEX_NOISE_COOKIE_LEN] = {};

    ASSERT_EQ(KEYEX_OK, keyex_noise_cookie_reply_create(k.data(), cookie, answered, &reply));
    EXPECT_EQ(KEYEX_NOISE_COOKIE_TYPE, reply.type);
    EXPECT_EQ(KEYEX_OK, keyex_noise_cookie_reply_consume(k.data(), answered, &reply, got));
    EXPECT_EQ(0, memcmp(got, cookie, sizeof(got)));

    /* another job's, another receiver's (or the cm's) key, another message */
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cookie_reply_consume(key(job_b, rs).data(),
                                                               answered, &reply, got));
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cookie_reply_consume(key(job_a, other_rs).data(),
                                                               answered, &reply, got));
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cookie_reply_consume(key(job_a, NULL).data(),
                                                               answered, &reply, got));
    uint8_t other[KEYEX_NOISE_MAC1_LEN];
    memcpy(other, answered, sizeof(other));
    other[0] ^= 1;
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cookie_reply_consume(k.data(), other, &reply, got));
    for (size_t i = 0; i < sizeof(reply); ++i) {
        keyex_noise_cookie_msg_t bad = reply;
        ((uint8_t*)&bad)[i] ^= 0x04;
        EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_cookie_reply_consume(k.data(), answered, &bad, got))
                << "byte " << i;
    }
}

TEST_F(keyex_noise_cookie_test, mac2_is_bound_to_the_cookie_the_message_and_the_job_secret) {
    auto k = key(job_a, rs);
    uint8_t msg[sizeof(keyex_noise_init_msg_t)];

    for (size_t i = 0; i < sizeof(msg); ++i) {
        msg[i] = (uint8_t)(i * 7);
    }
    ASSERT_EQ(KEYEX_OK, keyex_noise_mac2_set(k.data(), cookie, msg, sizeof(msg)));
    EXPECT_EQ(KEYEX_OK, keyex_noise_mac2_check(k.data(), cookie, msg, sizeof(msg)));

    /* who knows the cookie but not the job secret (a replayer that got the
     * cookie reply to its own connection) cannot make it */
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_mac2_check(key(job_b, rs).data(), cookie,
                                                     msg, sizeof(msg)));
    uint8_t other_cookie[KEYEX_NOISE_COOKIE_LEN];
    memcpy(other_cookie, cookie, sizeof(other_cookie));
    other_cookie[5] ^= 1;
    EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_mac2_check(k.data(), other_cookie, msg,
                                                     sizeof(msg)));
    for (size_t i = 0; i < sizeof(msg); ++i) {
        uint8_t bad[sizeof(msg)];
        memcpy(bad, msg, sizeof(msg));
        bad[i] ^= 0x80;
        EXPECT_EQ(KEYEX_ERR_AUTH, keyex_noise_mac2_check(k.data(), cookie, bad, sizeof(bad)))
                << "byte " << i;
    }
}

TEST_F(keyex_noise_cookie_test, the_wire_and_the_cm_have_cookie_keys_of_their_own) {
    auto wire = key(job_a, rs), cm = key(job_a, NULL);
    uint8_t mac1_key[KEYEX_SECRET_LEN];

    EXPECT_NE(wire, cm);
    EXPECT_NE(wire, key(job_a, other_rs));
    EXPECT_NE(cm, key(job_b, NULL));
    ASSERT_EQ(KEYEX_OK, keyex_noise_mac1_key(job_a, rs, mac1_key));
    EXPECT_NE(0, memcmp(mac1_key, wire.data(), KEYEX_SECRET_LEN));
}

} // namespace
