/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What crypt's own wire reads from strangers and peers, without UCX
 * (src/uct_crypt/wire/wire_frame.c, wire_replay.c, wire_admit.c): frames
 * as the receiver takes them, the responder's replay check of
 * initiations, and what a listener grants strangers (half-open slots,
 * ephemerals seen, cookies under load). test/fuzz/fuzz_wire_frames.c runs
 * the frame parser on arbitrary input; these pin the cases that matter by
 * name.
 */
#include <gtest/gtest.h>

#include <endian.h>
#include <string.h>

#include <string>
#include <vector>

/* ---- the own wire's frames (wire/wire_frame.c) ----------------------- */

extern "C" {
#include "uct_crypt/wire/wire_frame.h"
}

namespace {

class crypt_wire_frames : public ::testing::Test {
protected:
    void SetUp() override
    {
        static const uint8_t raw[32] = {9, 8, 7};
        ASSERT_EQ(crypt_aead_init(CRYPT_AEAD_BACKEND_OPENSSL), CRYPT_AEAD_OK);
        ASSERT_EQ(crypt_aead_key_init(&key, CRYPT_AEAD_BACKEND_OPENSSL, raw, 32),
                  CRYPT_AEAD_OK);
        reset();
    }
    /* a fresh connection: nothing taken, no control frame sealed yet */
    void reset()
    {
        rx          = uct_crypt_frame_rx_t();
        rx.ctrl_key = &key;
        seq         = 0;
    }
    void TearDown() override
    {
        crypt_aead_key_cleanup(&key);
    }
    static void append_frame(std::vector<uint8_t> &wire, uint8_t type, size_t len)
    {
        crypt_wire_frame_hdr_t hdr = {};
        hdr.length = htole32((uint32_t)len);
        hdr.type   = type;
        const uint8_t *p = reinterpret_cast<const uint8_t*>(&hdr);
        wire.insert(wire.end(), p, p + sizeof(hdr));
        wire.insert(wire.end(), len, 0x33);
    }
    void append_control(std::vector<uint8_t> &wire, uint8_t type, uint64_t count)
    {
        uint8_t frame[CRYPT_WIRE_FRAME_HDR_LEN + UCT_CRYPT_WIRE_CTRL_LEN];
        ASSERT_EQ(uct_crypt_frame_seal_control(&key, seq++, type, count, frame), 0);
        wire.insert(wire.end(), frame, frame + sizeof(frame));
    }
    /* the verdict on the frame at `offset`, which moves past it */
    uct_crypt_frame_verdict_t next(const std::vector<uint8_t> &wire, size_t &offset)
    {
        size_t frame_len = 0;
        uct_crypt_frame_verdict_t v =
            uct_crypt_frame_next(&rx, wire.data() + offset, wire.size() - offset,
                                 &hdr, &frame_len, why, sizeof(why));
        if ((v == UCT_CRYPT_FRAME_DATA) || (v == UCT_CRYPT_FRAME_CONTROL)) {
            offset += frame_len;
        }
        return v;
    }
    crypt_aead_key_t key;
    uct_crypt_frame_rx_t rx;
    crypt_wire_frame_hdr_t hdr;
    uint64_t seq = 0;
    char why[96];
};

} // namespace

TEST_F(crypt_wire_frames, records_segments_and_control_frames_in_order)
{
    std::vector<uint8_t> wire;
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, 100);
    append_frame(wire, CRYPT_WIRE_FRAME_SEGMENT, 5000);
    append_control(wire, CRYPT_WIRE_FRAME_HEARTBEAT, 2);
    append_control(wire, CRYPT_WIRE_FRAME_CLOSE, 2);
    size_t off = 0;
    EXPECT_EQ(next(std::vector<uint8_t>(wire.begin(), wire.begin() + 50), off),
              UCT_CRYPT_FRAME_MORE) << "half a record";
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_DATA);
    rx.segment_len = 5000; /* the record announced it */
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_DATA);
    EXPECT_EQ(hdr.type, CRYPT_WIRE_FRAME_SEGMENT);
    EXPECT_EQ(rx.segment_len, 0u);
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_CONTROL) << why;
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_CONTROL) << why;
    EXPECT_TRUE(rx.closed);
    EXPECT_EQ(off, wire.size());
}

TEST_F(crypt_wire_frames, what_fails_the_connection)
{
    std::vector<uint8_t> wire;
    size_t off = 0;
    append_frame(wire, 9, 10);
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD);
    EXPECT_STREQ(why, "malformed frame header");

    reset();
    wire.clear(), off = 0;
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, UCT_CRYPT_WIRE_MAX_BCOPY + 1);
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD) << "longer than the wire allows";

    reset();
    wire.clear(), off = 0;
    append_frame(wire, CRYPT_WIRE_FRAME_SEGMENT, 64);
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD);
    EXPECT_STREQ(why, "a bulk segment out of place") << "nobody announced it";

    reset();
    wire.clear(), off = 0;
    rx.segment_len = 64;
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, 64);
    EXPECT_EQ(next(std::vector<uint8_t>(wire.begin(), wire.begin() + 8), off),
              UCT_CRYPT_FRAME_BAD) << "refused at its header, before its body";

    reset();
    wire.clear(), off = 0;
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, 1);
    append_control(wire, CRYPT_WIRE_FRAME_CLOSE, 0); /* counts none */
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_DATA);
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD);
    EXPECT_STREQ(why, "records lost on the way (0 sent, 1 arrived)");

    reset();
    wire.clear(), off = 0;
    append_control(wire, CRYPT_WIRE_FRAME_CLOSE, 0);
    wire[CRYPT_WIRE_FRAME_HDR_LEN] ^= 1;
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD);
    EXPECT_STREQ(why, "forged control frame");

    reset();
    wire.clear(), off = 0;
    append_control(wire, CRYPT_WIRE_FRAME_CLOSE, 0);
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, 1);
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_CONTROL);
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD) << "a record after the CLOSE";
}

/* The answer to a connection's first record (TAKEN) counts the records
 * the peer took, never 0 and never less than before; it is what may
 * follow the peer's CLOSE (its half ended, ours goes on), and it counts
 * no record of its own. */
TEST_F(crypt_wire_frames, a_taken_may_follow_the_close_and_never_goes_back)
{
    std::vector<uint8_t> wire;
    size_t off = 0;
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, 10);
    append_control(wire, CRYPT_WIRE_FRAME_CLOSE, 1);
    append_control(wire, CRYPT_WIRE_FRAME_TAKEN, 3);
    append_control(wire, CRYPT_WIRE_FRAME_TAKEN, 2);
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_DATA);
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_CONTROL) << why;
    ASSERT_EQ(next(wire, off), UCT_CRYPT_FRAME_CONTROL) << why;
    EXPECT_EQ(rx.took, 3u);
    EXPECT_EQ(rx.records, 1u) << "a TAKEN is no record";
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD);
    EXPECT_STREQ(why, "a TAKEN out of order");

    reset();
    wire.clear(), off = 0;
    append_control(wire, CRYPT_WIRE_FRAME_TAKEN, 0);
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD) << "took none";

    reset();
    wire.clear(), off = 0;
    append_control(wire, CRYPT_WIRE_FRAME_TAKEN, 1);
    wire[CRYPT_WIRE_FRAME_HDR_LEN + 2] ^= 4;
    EXPECT_EQ(next(wire, off), UCT_CRYPT_FRAME_BAD);
    EXPECT_STREQ(why, "forged control frame");
}

TEST_F(crypt_wire_frames, a_large_frame_is_read_to_its_end_and_no_further)
{
    std::vector<uint8_t> wire;
    append_frame(wire, CRYPT_WIRE_FRAME_RECORD, 100000);
    EXPECT_EQ(uct_crypt_frame_rx_room(wire.data(), 8), 100000u);
    EXPECT_EQ(uct_crypt_frame_rx_room(wire.data(), 5000), 100008u - 5000);
    std::vector<uint8_t> small;
    append_frame(small, CRYPT_WIRE_FRAME_RECORD, 100);
    EXPECT_EQ(uct_crypt_frame_rx_room(small.data(), 8),
              (size_t)UCT_CRYPT_WIRE_FRAME_MAX - 8) << "small frames: many at a time";
}

/* ---- the own wire's replay check of initiations (wire/wire_replay.c) -- */

extern "C" {
#include "uct_crypt/wire/wire_replay.h"
}

#include <algorithm>
#include <random>

namespace {

class crypt_wire_replay : public ::testing::Test {
protected:
    void TearDown() override
    {
        uct_crypt_replay_cleanup(&replay);
    }
    /* TAI64N of `ns` after the epoch, as keyex_noise_timestamp_now writes */
    static std::vector<uint8_t> tai64n(uint64_t ns)
    {
        uint64_t label = 0x400000000000000aull + ns / 1000000000ull;
        uint32_t nanos = (uint32_t)(ns % 1000000000ull);
        std::vector<uint8_t> ts(KEYEX_NOISE_TIMESTAMP_LEN);

        for (int i = 0; i < 8; ++i) {
            ts[i] = (uint8_t)(label >> (56 - 8 * i));
        }
        for (int i = 0; i < 4; ++i) {
            ts[8 + i] = (uint8_t)(nanos >> (24 - 8 * i));
        }
        return ts;
    }
    uct_crypt_replay_verdict_t check(uint32_t key, uint64_t ns, double now = 0)
    {
        uint8_t static_key[KEYEX_PUBLIC_KEY_LEN] = {1};

        memcpy(static_key + 1, &key, sizeof(key));
        return uct_crypt_replay_check(&replay, static_key, tai64n(ns).data(),
                                      now);
    }
    /* keys whose recent timestamps are kept */
    size_t active_keys() const
    {
        size_t n = 0;
        for (size_t i = 0; i < replay.slots; ++i) {
            n += (replay.peers[i].recent != nullptr);
        }
        return n;
    }

    static constexpr uint64_t t0 = 1795700000ull * 1000000000ull; /* 2026 */
    uct_crypt_replay_t replay = {};
};

/* One process opens many connections to a peer at once (workers,
 * UCX_NUM_EPS): their initiations are taken in any order (the check kept
 * only the greatest timestamp and refused the rest) */
TEST_F(crypt_wire_replay, concurrent_initiations_in_any_order_are_taken)
{
    std::vector<uint64_t> ts;
    for (uint64_t i = 0; i < 64; ++i) {
        ts.push_back(t0 + i * 1000);
    }
    std::shuffle(ts.begin(), ts.end(), std::mt19937(7));
    for (uint64_t t : ts) {
        EXPECT_EQ(check(1, t), UCT_CRYPT_REPLAY_FRESH) << t - t0;
    }
    EXPECT_EQ(check(1, t0 + 2), UCT_CRYPT_REPLAY_FRESH) << "older, not seen";
}

TEST_F(crypt_wire_replay, a_replay_is_refused_before_and_after_newer_ones)
{
    EXPECT_EQ(check(1, t0 + 5), UCT_CRYPT_REPLAY_FRESH);
    EXPECT_EQ(check(1, t0 + 5), UCT_CRYPT_REPLAY_SEEN);
    EXPECT_EQ(check(1, t0 + 9), UCT_CRYPT_REPLAY_FRESH);
    EXPECT_EQ(check(1, t0 + 5), UCT_CRYPT_REPLAY_SEEN);
    EXPECT_EQ(check(2, t0 + 5), UCT_CRYPT_REPLAY_FRESH) << "another key's";
}

TEST_F(crypt_wire_replay, older_than_the_window_is_refused_for_good)
{
    const uint64_t window = (uint64_t)(UCT_CRYPT_REPLAY_WINDOW_SEC * 1e9);

    EXPECT_EQ(check(1, t0), UCT_CRYPT_REPLAY_FRESH);
    EXPECT_EQ(check(1, t0 + window + 10), UCT_CRYPT_REPLAY_FRESH);
    EXPECT_EQ(check(1, t0 + 5), UCT_CRYPT_REPLAY_STALE);
    /* t0 left the window: its replay is refused by the floor it raised */
    EXPECT_EQ(check(1, t0 + 2 * window), UCT_CRYPT_REPLAY_FRESH);
    EXPECT_EQ(check(1, t0), UCT_CRYPT_REPLAY_STALE);
    EXPECT_EQ(check(1, 0), UCT_CRYPT_REPLAY_STALE) << "a label before 1970";
}

/* An insider who completes one handshake from each of many fresh keys
 * (red team R5: 1,072 bytes a key for the iface's life, found by a linear
 * scan): a key idle for the window keeps its floor alone (64 bytes in a
 * table at most half full), and still refuses its old initiations */
TEST_F(crypt_wire_replay, a_key_idle_for_the_window_keeps_only_its_floor)
{
    const uint32_t keys = 20000;
    for (uint32_t k = 0; k < keys; ++k) {
        /* one a millisecond of the responder's clock: 20 s in all */
        ASSERT_EQ(check(k, t0 + k * 1000000ull, k * 1e-3), UCT_CRYPT_REPLAY_FRESH) << k;
    }
    EXPECT_EQ(replay.count, keys);
    /* the window is 5 s: the last 5,000 keys still initiating, none older */
    EXPECT_LE(active_keys(), 5001u);
    EXPECT_LE(replay.slots * sizeof(*replay.peers) / keys, 4 * sizeof(*replay.peers));
    uct_crypt_replay_expire(&replay, 25.0); /* (progress, nothing since) */
    EXPECT_EQ(active_keys(), 0u);
    for (uint32_t k = 0; k < keys; k += 997) {
        EXPECT_NE(check(k, t0 + k * 1000000ull, 21.0), UCT_CRYPT_REPLAY_FRESH)
                << "key " << k << "'s initiation again";
    }
    /* an idle key's next initiation is newer than its floor: taken */
    EXPECT_EQ(check(5, t0 + 30000000000ull, 30.0), UCT_CRYPT_REPLAY_FRESH);
    EXPECT_EQ(check(5, t0 + 30000000000ull, 30.0), UCT_CRYPT_REPLAY_SEEN);
    EXPECT_EQ(check(5, t0 + 5 * 1000000ull - 1, 30.0), UCT_CRYPT_REPLAY_STALE)
            << "older than its floor";
}

/* More initiations within the window than the list keeps: the oldest
 * becomes the floor, so nothing taken can be taken again */
TEST_F(crypt_wire_replay, a_full_list_never_takes_a_replay)
{
    for (uint64_t i = 1; i <= UCT_CRYPT_REPLAY_RECENT + 10; ++i) {
        ASSERT_EQ(check(1, t0 + i), UCT_CRYPT_REPLAY_FRESH) << i;
    }
    for (uint64_t i = 1; i <= UCT_CRYPT_REPLAY_RECENT + 10; ++i) {
        EXPECT_NE(check(1, t0 + i), UCT_CRYPT_REPLAY_FRESH) << i;
    }
    EXPECT_EQ(check(1, t0), UCT_CRYPT_REPLAY_STALE);
}
}

/* ---- what a listener grants strangers (wire/wire_admit.c) ----------------- */

extern "C" {
#include "uct_crypt/wire/wire_admit.h"
}

#include <arpa/inet.h>
#include <netinet/in.h>

namespace {

class crypt_admit_seen : public ::testing::Test {
protected:
    void TearDown() override
    {
        uct_crypt_seen_cleanup(&seen);
    }
    /* the i-th of a series of distinct, random-looking ephemerals */
    static std::vector<uint8_t> ephemeral(uint64_t i)
    {
        std::vector<uint8_t> e(32);
        std::mt19937_64 rng(i * 0x9e3779b97f4a7c15ull + 1);

        for (size_t j = 0; j < e.size(); j += 8) {
            uint64_t r = rng();
            memcpy(&e[j], &r, 8);
        }
        return e;
    }
    uct_crypt_seen_verdict_t check(uint64_t i)
    {
        return uct_crypt_seen_check(&seen, ephemeral(i).data());
    }

    uct_crypt_seen_t seen = {};
};

/* A first message sent again (its ephemeral taken before) is refused
 * before any DH; another is taken */
TEST_F(crypt_admit_seen, a_replayed_ephemeral_is_refused)
{
    EXPECT_EQ(check(1), UCT_CRYPT_SEEN_NEW);
    EXPECT_EQ(check(1), UCT_CRYPT_SEEN_AGAIN);
    EXPECT_EQ(check(2), UCT_CRYPT_SEEN_NEW);
    EXPECT_EQ(check(1), UCT_CRYPT_SEEN_AGAIN);
    std::vector<uint8_t> zero(32, 0);
    EXPECT_EQ(uct_crypt_seen_check(&seen, zero.data()), UCT_CRYPT_SEEN_AGAIN)
        << "no honest ephemeral starts with 16 zero bytes";
}

/* The last UCT_CRYPT_SEEN_KEEP are always remembered, however many came
 * before; the set's memory stays bounded (two fixed tables) */
TEST_F(crypt_admit_seen, the_most_recent_are_remembered_past_any_number)
{
    const uint64_t total = 5 * UCT_CRYPT_SEEN_KEEP + 123;

    for (uint64_t i = 0; i < total; ++i) {
        ASSERT_EQ(check(i), UCT_CRYPT_SEEN_NEW) << i;
    }
    for (uint64_t i = total - UCT_CRYPT_SEEN_KEEP; i < total; ++i) {
        ASSERT_EQ(check(i), UCT_CRYPT_SEEN_AGAIN) << i;
    }
}

/* IPv4 or IPv6 addresses by their text, each with a port of its own */
std::vector<sockaddr_storage> addresses(const std::vector<const char*> &ips)
{
    std::vector<sockaddr_storage> out(ips.size());

    for (size_t i = 0; i < ips.size(); ++i) {
        sockaddr_in *in   = (sockaddr_in*)&out[i];
        sockaddr_in6 *in6 = (sockaddr_in6*)&out[i];
        uint16_t port     = htons((uint16_t)(40000 + i)); /* ports differ */

        memset(&out[i], 0, sizeof(out[i]));
        if (inet_pton(AF_INET, ips[i], &in->sin_addr) == 1) {
            in->sin_family = AF_INET;
            in->sin_port   = port;
        } else {
            in6->sin6_family = AF_INET6;
            in6->sin6_port   = port;
            EXPECT_EQ(inet_pton(AF_INET6, ips[i], &in6->sin6_addr), 1) << ips[i];
        }
    }
    return out;
}

size_t victim(const std::vector<sockaddr_storage> &addrs)
{
    std::vector<const sockaddr_storage*> p;

    for (const auto &a : addrs) {
        p.push_back(&a);
    }
    return uct_crypt_admit_victim(p.data(), p.size());
}

/* Oldest first: the flooder's oldest connection goes, never the honest
 * peer's, however old the honest one is */
TEST(crypt_admit_victim, the_address_that_holds_the_most_loses_its_oldest)
{
    EXPECT_EQ(victim(addresses({"10.0.0.2", "10.0.0.3", "10.0.0.3", "10.0.0.3"})), 1u);
    EXPECT_EQ(victim(addresses({"10.0.0.3", "10.0.0.2", "10.0.0.3"})), 0u);
    /* a tie: the oldest of all */
    EXPECT_EQ(victim(addresses({"10.0.0.2", "10.0.0.3"})), 0u);
    /* one address (a stranger on the honest peer's own host): the oldest */
    EXPECT_EQ(victim(addresses({"10.0.0.3", "10.0.0.3", "10.0.0.3"})), 0u);
}

/* One host holds a whole IPv6 /64 (crypto review N1: a flood spread over
 * a /64 made every address hold one, and the oldest, honest, went). A
 * /64 is one source, as WireGuard's ratelimiter keys IPv6 by its /64;
 * IPv4-mapped addresses (a dual-stack listener) stay one source each. */
TEST(crypt_admit_victim, an_ipv6_64_is_one_source)
{
    EXPECT_EQ(victim(addresses({"2001:db8:1::2", "2001:db8:2::1", "2001:db8:2::2",
                                 "2001:db8:2::3"})), 1u);
    EXPECT_EQ(victim(addresses({"2001:db8:2::1", "2001:db8:1::2", "2001:db8:2::2"})), 0u);
    EXPECT_EQ(victim(addresses({"::ffff:10.0.0.2", "::ffff:10.0.0.3", "::ffff:10.0.0.4",
                                 "::ffff:10.0.0.4"})), 2u);
}

/* The host a flow table counts (uct_crypt_admit_source): an IPv4
 * address, as itself or IPv4-mapped; an IPv6 address by its /64 */
TEST(crypt_admit_victim, a_host_is_its_ipv4_address_or_its_ipv6_64)
{
    auto v4 = addresses({"10.0.0.3", "10.0.0.4"});
    auto v6 = addresses({"::ffff:10.0.0.3", "2001:db8:2::1", "2001:db8:2:0:ff::9",
                          "2001:db8:3::1"});
    EXPECT_EQ(uct_crypt_admit_source(&v4[0]), 0x0a000003u);
    EXPECT_EQ(uct_crypt_admit_source(&v6[0]), 0x0a000003u) << "IPv4-mapped";
    EXPECT_NE(uct_crypt_admit_source(&v4[0]), uct_crypt_admit_source(&v4[1]));
    EXPECT_EQ(uct_crypt_admit_source(&v6[1]), uct_crypt_admit_source(&v6[2]))
            << "one /64";
    EXPECT_NE(uct_crypt_admit_source(&v6[1]), uct_crypt_admit_source(&v6[3]));
    EXPECT_EQ(uct_crypt_admit_source(&v6[1]), 0x20010db800020000ull);
}
}

/* ---- cookies under load (wire/wire_admit.h) ---------------------------------- */

namespace {

class crypt_admit_cookies : public ::testing::Test {
protected:
    void SetUp() override
    {
        memset(job, 0x5c, sizeof(job));
        memset(own_static, 0x21, sizeof(own_static));
        ASSERT_EQ(KEYEX_OK, keyex_noise_cookie_key(job, own_static, key));
        from = addresses({"10.0.0.2", "10.0.0.3"});
        for (size_t i = 0; i < sizeof(msg); ++i) {
            msg[i] = (uint8_t)(i * 13 + 1);
        }
    }
    void TearDown() override
    {
        uct_crypt_cookies_cleanup(&cookies);
    }
    /* the initiator: mac2 under the cookie the listener gave `to` */
    void answer(const sockaddr_storage &to, double now, const uint8_t *with_key)
    {
        uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
        ASSERT_EQ(0, uct_crypt_cookies_make(&cookies, now, &to, cookie));
        ASSERT_EQ(KEYEX_OK, keyex_noise_mac2_set(with_key, cookie, msg, sizeof(msg)));
    }
    int valid(const sockaddr_storage &from_addr, double now)
    {
        return uct_crypt_cookies_mac2_valid(&cookies, now, &from_addr, key,
                                            msg, sizeof(msg));
    }

    uct_crypt_cookies_t cookies = {};
    uint8_t job[KEYEX_JOB_SECRET_LEN], own_static[KEYEX_PUBLIC_KEY_LEN];
    uint8_t key[KEYEX_SECRET_LEN];
    uint8_t msg[sizeof(keyex_noise_init_msg_t)];
    std::vector<sockaddr_storage> from;
};

} // namespace

/* A burst of UCT_CRYPT_HANDSHAKE_BURST DHs at once (a job's wireup to one
 * rank), or one second's worth where the rate is higher; then `rate` a
 * second, under load until the bucket refills */
TEST_F(crypt_admit_cookies, dhs_past_the_burst_wait_for_a_cookie)
{
    auto at_once = [&](double now, int tries) {
        int allowed = 0;
        for (int i = 0; i < tries; ++i) {
            allowed += uct_crypt_cookies_dh_allowed(&cookies, now);
        }
        return allowed;
    };
    uct_crypt_cookies_init(&cookies, 3, 100.0);
    EXPECT_EQ(UCT_CRYPT_HANDSHAKE_BURST, at_once(100.0, UCT_CRYPT_HANDSHAKE_BURST + 10))
            << "a wireup's burst, not a second's 3";
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 100.1));
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 100.5));
    /* a long quiet gives the burst back, not more */
    EXPECT_EQ(UCT_CRYPT_HANDSHAKE_BURST, at_once(1e5, 2 * UCT_CRYPT_HANDSHAKE_BURST));

    const int fast = 3 * UCT_CRYPT_HANDSHAKE_BURST;
    uct_crypt_cookies_init(&cookies, fast, 100.0);
    EXPECT_EQ(fast, at_once(100.0, fast + 10)) << "one second's worth";
    EXPECT_EQ(fast / 2, at_once(100.5, fast));

    uct_crypt_cookies_init(&cookies, 0, 0.0);
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 0.0)) << "0: always a cookie";
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 1e6));
    uct_crypt_cookies_init(&cookies, HUGE_VAL, 0.0);
    for (int i = 0; i < 100000; ++i) {
        ASSERT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 1.0 + i * 1e-9)) << "inf: never";
    }
}

/* A DH that went to a stranger (a replay found out after it) puts the
 * listener under load for a second, whatever the rate */
TEST_F(crypt_admit_cookies, a_stranger_s_dh_puts_the_listener_under_load_for_a_second)
{
    uct_crypt_cookies_init(&cookies, 1000, 10.0);
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 10.0));
    uct_crypt_cookies_stranger(&cookies, 10.0);
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 10.0));
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 10.9));
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 11.1));
    uct_crypt_cookies_init(&cookies, HUGE_VAL, 10.0);
    uct_crypt_cookies_stranger(&cookies, 10.0);
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 10.5)) << "also with no rate limit";
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 11.5));
}

/* mac2 counts only for the address and port the cookie was given to, only
 * from a job-secret holder, and only while the listener's secret is that
 * of now or the one before (two minutes each) */
TEST_F(crypt_admit_cookies, mac2_counts_for_its_connection_and_two_minutes)
{
    uct_crypt_cookies_init(&cookies, 0, 0.0);
    EXPECT_EQ(0, valid(from[0], 1.0)) << "no cookie given yet";

    answer(from[0], 1.0, key);
    EXPECT_EQ(1, valid(from[0], 1.0));
    EXPECT_EQ(0, valid(from[1], 1.0)) << "another address";
    sockaddr_storage other_port = from[0];
    ((sockaddr_in*)&other_port)->sin_port = htons(1);
    EXPECT_EQ(0, valid(other_port, 1.0)) << "another connection of the same host";

    /* the cookie, but not the job secret: a replayer that read its reply */
    uint8_t stranger_key[KEYEX_SECRET_LEN];
    uint8_t other_job[KEYEX_JOB_SECRET_LEN];
    memset(other_job, 0x77, sizeof(other_job));
    ASSERT_EQ(KEYEX_OK, keyex_noise_cookie_key(other_job, own_static, stranger_key));
    answer(from[0], 1.0, stranger_key);
    EXPECT_EQ(0, valid(from[0], 1.0));

    /* 16 zero bytes: no cookie */
    answer(from[0], 1.0, key);
    memset(msg + sizeof(msg) - KEYEX_NOISE_MAC1_LEN, 0, KEYEX_NOISE_MAC1_LEN);
    EXPECT_EQ(0, valid(from[0], 1.0));

    answer(from[0], 1.0, key);
    EXPECT_EQ(1, valid(from[0], 1.0 + UCT_CRYPT_COOKIE_SECRET_AGE + 1))
            << "made just before the secret changed";
    EXPECT_EQ(0, valid(from[0], 1.0 + 2 * UCT_CRYPT_COOKIE_SECRET_AGE + 2))
            << "two secrets later";

    /* the same with nothing asked in between: still two secrets later */
    answer(from[0], 1000.0, key);
    EXPECT_EQ(0, valid(from[0], 1000.0 + 2 * UCT_CRYPT_COOKIE_SECRET_AGE + 2))
            << "a cookie of four minutes ago";
}

/* Under load each host's DHs come from a bucket of its own, half the
 * listener's rate and a second's worth at once (WireGuard's
 * ratelimiter.c, by IPv4 address or IPv6 /64): a job-secret holder makes
 * a valid mac2 for every connection it opens, and another host's DHs must
 * not wait behind its flood. A rate of 0 (cookies always) bounds none. */
TEST_F(crypt_admit_cookies, under_load_a_host_gets_half_the_listeners_dhs)
{
    auto hosts = addresses({"10.0.0.2", "10.0.0.2", "10.0.0.3", "2001:db8:1::2",
                            "2001:db8:1::ff:3"});
    auto allowed = [&](const sockaddr_storage &host, double now) {
        return uct_crypt_cookies_source_allowed(&cookies, &host, now);
    };

    uct_crypt_cookies_init(&cookies, 8, 10.0); /* 4 a second a host */
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(1, allowed(hosts[i % 2], 10.0)) << i; /* one host, two ports */
    }
    EXPECT_EQ(0, allowed(hosts[0], 10.0)) << "the host had its share";
    EXPECT_EQ(1, allowed(hosts[2], 10.0)) << "another host";
    EXPECT_EQ(0, allowed(hosts[1], 10.1)) << "not a token yet";
    EXPECT_EQ(1, allowed(hosts[1], 10.3)) << "one a quarter second";
    EXPECT_EQ(0, allowed(hosts[0], 10.3));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(1, allowed(hosts[3], 10.3)) << i;
    }
    EXPECT_EQ(0, allowed(hosts[4], 10.3)) << "the same IPv6 /64";
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(1, allowed(hosts[0], 20.0)) << i;
    }
    EXPECT_EQ(0, allowed(hosts[0], 20.0)) << "ten seconds idle: a second's worth";

    uct_crypt_cookies_init(&cookies, 0, 10.0);
    for (int i = 0; i < 10000; ++i) {
        ASSERT_EQ(1, allowed(hosts[0], 10.0)) << "rate 0: no share " << i;
    }
}
