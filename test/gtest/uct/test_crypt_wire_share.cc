/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The own wire's listener under load gives each host a share of its DHs
 * (wire/wire_admit.h, uct_crypt_cookies_source_allowed): a job-secret
 * holder, which makes a valid mac2 for every connection it opens, has its
 * connections past its host's share wait for their turn, neither answered
 * at once nor closed, and another host's handshake goes through meanwhile.
 * Runs where UCX_CRYPT_HANDSHAKE_RATE=8 (quickstart.sh's uct_host_share
 * run): 4 DHs a second a host.
 */
#include "uct/crypt_test.h"
#include "uct/listener_share.h"

namespace {

/* A job-secret holder on host `from` (127.0.0.2 on: a host of its own)
 * that opens connections to one iface's own wire, as crypt's wire does */
struct wire_holder {
    std::vector<uint8_t>  job;
    uint8_t               responder[KEYEX_PUBLIC_KEY_LEN];
    keyex_keypair_t       self = {}; /* (copies share it: h cleans up) */
    uint16_t              port;
    uint32_t              from;

    /* An initiation made with `context`, on `fd` or a new connection; -1
     * if the connection could not be made */
    int initiate(const keyex_noise_context_t &context, keyex_noise_init_msg_t *msg,
                 const uint8_t *cookie = nullptr, int fd = -1)
    {
        keyex_noise_t hs;
        uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN], cookie_key[KEYEX_SECRET_LEN];

        fd = (fd < 0) ? connect_loopback(port, from) : fd;
        keyex_noise_timestamp_now(ts);
        EXPECT_EQ(KEYEX_OK, keyex_noise_start(&hs, &self, job.data(), &context));
        EXPECT_EQ(KEYEX_OK, keyex_noise_init_create(&hs, &self, job.data(),
                                                    responder, ts, msg));
        keyex_noise_cleanup(&hs);
        if (cookie != nullptr) {
            EXPECT_EQ(KEYEX_OK, keyex_noise_cookie_key(job.data(), responder,
                                                       cookie_key));
            EXPECT_EQ(KEYEX_OK, keyex_noise_mac2_set(cookie_key, cookie, msg,
                                                     sizeof(*msg)));
        }
        EXPECT_EQ(write(fd, msg, sizeof(*msg)), (ssize_t)sizeof(*msg));
        return fd;
    }

    /* the cookie of `reply` to the initiation of mac1 `mac`; false if none */
    bool take_cookie(const std::string &reply, const uint8_t *mac, uint8_t *cookie)
    {
        uint8_t key[KEYEX_SECRET_LEN];

        return (reply.size() == sizeof(keyex_noise_cookie_msg_t)) &&
               (keyex_noise_cookie_key(job.data(), responder, key) == KEYEX_OK) &&
               (keyex_noise_cookie_reply_consume(key, mac, (const keyex_noise_cookie_msg_t*)
                                                 reply.data(), cookie) == KEYEX_OK);
    }
};

const keyex_noise_context_t records = {KEYEX_NOISE_ROLE_RECORDS, 16};

} // namespace

class uct_crypt_wire_share_test : public uct_crypt_test {
protected:
    /* a and b, b on a port of its own; the holder on 127.0.0.2; under load */
    void open_under_load()
    {
        open_side(a);
        open_side_with(b, {{"WIRE_PORT", std::to_string(h.port = free_loopback_port())}});
        std::vector<uint8_t> dev, iface;
        ASSERT_NO_FATAL_FAILURE(addresses_of(b, dev, iface));
        h.job = crypt_plugin::job_secret();
        ASSERT_EQ(h.job.size(), (size_t)KEYEX_JOB_SECRET_LEN);
        memcpy(h.responder, ((const crypt_iface_addr_t*)iface.data())->public_key,
               KEYEX_PUBLIC_KEY_LEN);
        ASSERT_EQ(KEYEX_OK, keyex_keypair_generate(&h.self));
        h.from = INADDR_LOOPBACK + 1;
        make_load();
    }

    void TearDown() override
    {
        keyex_keypair_cleanup(&h.self);
        uct_crypt_test::TearDown();
    }

    /* Load: a DH that came to nothing (an initiation made for the
     * collective lane, from a host of its own: the records' iface refuses
     * it after the DH), for a second; through a cookie where the listener
     * has no DH to spare without one */
    void make_load()
    {
        const uint64_t before = wire_stat(&uct_crypt_stats_t::stranger_dh);
        const keyex_noise_context_t lane_context = {KEYEX_NOISE_ROLE_LANE, 16};
        keyex_noise_init_msg_t init;
        uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
        std::string reply;
        bool end         = false;
        wire_holder lane = h;
        lane.from        = INADDR_LOOPBACK + 9;
        int fd           = lane.initiate(lane_context, &init);
        progress_until([&] {
            return (listener_share::read_some(fd, &reply, &end) >=
                    sizeof(keyex_noise_cookie_msg_t)) || end ||
                   (wire_stat(&uct_crypt_stats_t::stranger_dh) > before);
        });
        if (lane.take_cookie(reply, init.mac1, cookie)) {
            lane.initiate(lane_context, &init, cookie, fd);
        }
        progress_until([&] {
            return wire_stat(&uct_crypt_stats_t::stranger_dh) > before;
        });
        close(fd);
    }

    /* `who`'s connections through a cookie into w (listener_share.h) */
    void through_cookies(wire_holder &who, size_t count, bool answer,
                         size_t batch = 1)
    {
        listener_share::holder_ops ops;
        ops.open = [&](std::vector<uint8_t> *mac) {
            keyex_noise_init_msg_t init;
            int fd = who.initiate(records, &init);
            mac->assign(init.mac1, init.mac1 + sizeof(init.mac1));
            return fd;
        };
        ops.take = [&](const std::string &reply, const std::vector<uint8_t> &mac,
                       uint8_t *cookie) { return who.take_cookie(reply, mac.data(), cookie); };
        ops.answer = [&](int fd, const uint8_t *cookie) {
            keyex_noise_init_msg_t init;
            who.initiate(records, &init, cookie, fd);
        };
        ops.make_load = [&] { make_load(); };
        listener_share::through_cookies(w, ops, [&](std::function<bool()> done) {
            progress_until(done);
        }, count, answer, batch);
    }

    size_t answered(size_t first, size_t *closed = nullptr)
    {
        return w.answered(first, sizeof(keyex_noise_response_msg_t), closed);
    }

    wire_holder              h;
    listener_share::waiting  w;
};

/* Eight connections of a holder's host, twice its share: four
 * answered at once, the rest held (not one closed) and answered as the
 * host's share refills; an honest iface on another host connects and
 * delivers meanwhile. Before, all eight took their DH at once. */
TEST_F(uct_crypt_wire_share_test, a_holders_host_waits_for_its_share_of_dhs)
{
    SKIP_UNLESS_SHARE_RATE();
    ASSERT_NO_FATAL_FAILURE(open_under_load());
    const size_t count = 8;
    ASSERT_NO_FATAL_FAILURE(through_cookies(h, count, true));

    /* another host's handshake and first record, meanwhile */
    ab = connect(a, b);
    auto payload = make_payload(1, 64);
    send_retrying([&] { return uct_ep_am_short(ab, kAmId, 1, payload.data(), 64); });
    progress_until([&] { return (b.received.size() == 1u) || !a.failed_eps.empty(); });
    EXPECT_EQ(b.received.size(), 1u) << "the honest host's message";
    EXPECT_LT(answered(0), count) << "the holder's host took a DH for every "
                                     "connection at once";

    size_t closed = 0;
    progress_until([&] { return answered(0, &closed) + closed == count; });
    EXPECT_EQ(answered(0, &closed), count) << "deferred connections were not answered";
    EXPECT_EQ(closed, 0u) << "a deferred connection was closed";
    EXPECT_GE(wire_stat(&uct_crypt_stats_t::dh_deferred), 1u);
}

/* Connections waiting for their cookie's answer or their host's turn are
 * bounded (1024); past the bound one of the address that holds the most
 * among the oldest goes. An honest host's connection, the oldest, waits
 * for its cookie's answer while a holder's deferred ones fill the set: it
 * stays, and its answer gets its DH. Before, the oldest went: the honest
 * one. */
TEST_F(uct_crypt_wire_share_test, a_holders_waiting_connections_cost_only_its_own)
{
    SKIP_UNLESS_SHARE_RATE();
    if (!listener_share::raise_fd_limit()) {
        GTEST_SKIP() << "needs 4096 file descriptors (ulimit -n)";
    }
    ASSERT_NO_FATAL_FAILURE(open_under_load());
    wire_holder honest = h;
    honest.from        = INADDR_LOOPBACK + 2;
    ASSERT_NO_FATAL_FAILURE(through_cookies(honest, 1, false));

    const size_t flood = 1024 + 32; /* past the bound, 4 answered at once */
    ASSERT_NO_FATAL_FAILURE(through_cookies(h, flood, true, 64));
    listener_share::expect_the_first_stays(
            w, sizeof(keyex_noise_response_msg_t),
            [&](std::function<bool()> done) { progress_until(done); }, [&] {
        keyex_noise_init_msg_t init;
        honest.initiate(records, &init, w.cookies[0].data(), w.fds[0]);
    });
}
