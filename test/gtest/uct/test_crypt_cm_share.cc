/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection manager's listener under load gives each host a share of
 * its DHs (wire/wire_admit.h, uct_crypt_cookies_source_allowed), as the
 * own wire does (test_crypt_wire_share.cc): a job-secret holder, which
 * answers cookies, has its first messages past its host's share wait for
 * their turn, and they cost only its own connections. Runs where
 * UCX_CRYPT_HANDSHAKE_RATE=8 (quickstart.sh's uct_host_share run): 4 DHs
 * a second a host.
 */
#include "uct/crypt_cm_test.h"
#include "uct/listener_share.h"

class uct_crypt_cm_share_test : public uct_crypt_cm_test {
protected:
    void SetUp() override
    {
        uct_crypt_cm_test::SetUp();
        ASSERT_EQ(crypt_plugin::job_secret().size(), (size_t)KEYEX_JOB_SECRET_LEN);
        ASSERT_EQ(KEYEX_OK, keyex_noise_cookie_key(crypt_plugin::job_secret().data(),
                                                   nullptr, cookie_key));
        stats_read = (stats_read_t)dlsym(crypt_plugin::handle(), "uct_crypt_stats_read");
        ASSERT_NE(stats_read, nullptr);
    }

    uint64_t stranger_dh()
    {
        uct_crypt_stats_t s = {};
        stats_read(&s);
        return s.stranger_dh;
    }

    /* a holder's first message on `fd`, with mac2 under `cookie` if any */
    keyex_noise_cm_init_msg_t first(int fd, const uint8_t *cookie)
    {
        keyex_noise_t hs;
        keyex_noise_cm_init_msg_t msg;

        EXPECT_EQ(KEYEX_OK, keyex_noise_cm_start(&hs, crypt_plugin::job_secret().data()));
        EXPECT_EQ(KEYEX_OK, keyex_noise_cm_init_create(&hs, &msg));
        keyex_noise_cleanup(&hs);
        if (cookie != nullptr) {
            EXPECT_EQ(KEYEX_OK, keyex_noise_mac2_set(cookie_key, cookie, &msg,
                                                     sizeof(msg)));
        }
        EXPECT_EQ(write(fd, &msg, sizeof(msg)), (ssize_t)sizeof(msg));
        return msg;
    }

    /* the cookie of `reply` to the first message of tag `mac`; false if none */
    bool take_cookie(const std::string &reply, const uint8_t *mac, uint8_t *cookie)
    {
        return (reply.size() == sizeof(keyex_noise_cookie_msg_t)) &&
               (keyex_noise_cookie_reply_consume(cookie_key, mac,
                                                 (const keyex_noise_cookie_msg_t*)
                                                 reply.data(), cookie) == KEYEX_OK);
    }

    /* Load: a DH for a client that never goes on (it closes), for a
     * second; through a cookie where the listener has no DH to spare
     * without one */
    void make_load()
    {
        const uint64_t before = stranger_dh();
        int fd                = connect_listener(INADDR_LOOPBACK + 9);
        bool closed           = false;
        uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];

        keyex_noise_cm_init_msg_t sent = first(fd, nullptr);
        std::string reply              = read_answer(fd, &closed);
        if (take_cookie(reply, sent.msg.tag, cookie)) {
            first(fd, cookie);
            read_answer(fd, &closed);
        }
        close(fd);
        progress_until([&] { return stranger_dh() > before; });
    }

    /* connections from `from` through a cookie into w (listener_share.h) */
    void through_cookies(uint32_t from, size_t count, bool answer, size_t batch = 1)
    {
        listener_share::holder_ops ops;
        ops.open = [&](std::vector<uint8_t> *mac) {
            int fd                        = connect_listener(from);
            keyex_noise_cm_init_msg_t msg = first(fd, nullptr);
            mac->assign(msg.msg.tag, msg.msg.tag + sizeof(msg.msg.tag));
            return fd;
        };
        ops.take = [&](const std::string &reply, const std::vector<uint8_t> &mac,
                       uint8_t *cookie) { return take_cookie(reply, mac.data(), cookie); };
        ops.answer    = [&](int fd, const uint8_t *cookie) { first(fd, cookie); };
        ops.make_load = [&] { make_load(); };
        listener_share::through_cookies(w, ops, [&](std::function<bool()> done) {
            progress_until(done, 60);
        }, count, answer, batch);
    }

    size_t answered(size_t first_fd, size_t *closed = nullptr)
    {
        return w.answered(first_fd, sizeof(keyex_noise_cm_msg_t), closed);
    }

    typedef void (*stats_read_t)(uct_crypt_stats_t*);
    stats_read_t            stats_read = nullptr;
    uint8_t                 cookie_key[KEYEX_SECRET_LEN];
    listener_share::waiting w;
};

/* A holder's eight first messages with mac2, twice its host's share: four
 * answered at once, the rest as the share refills, none closed; another
 * host's is answered meanwhile. Before, all eight took their DH at once. */
TEST_F(uct_crypt_cm_share_test, under_load_a_holders_host_waits_for_its_share_of_dhs)
{
    SKIP_UNLESS_SHARE_RATE();
    ASSERT_NO_FATAL_FAILURE(connect_pair()); /* the listener */
    make_load();
    const size_t count = 8;
    ASSERT_NO_FATAL_FAILURE(through_cookies(INADDR_LOOPBACK + 1, count, true));

    /* another host's, meanwhile */
    ASSERT_NO_FATAL_FAILURE(through_cookies(INADDR_LOOPBACK + 2, 1, true));
    progress_until([&] { return answered(count) == 1; });
    EXPECT_EQ(answered(count), 1u) << "another host's first message had no answer";
    EXPECT_LT(answered(0) - answered(count), count)
            << "the holder's host took a DH for every connection at once";

    size_t closed = 0;
    progress_until([&] { return answered(0, &closed) + closed == count + 1; });
    EXPECT_EQ(answered(0, &closed), count + 1) << "deferred first messages were not answered";
    EXPECT_EQ(closed, 0u) << "a deferred connection was closed";
}

/* Connections waiting for their cookie's answer or their host's turn are
 * bounded (1024); past the bound one of the address that holds the most
 * among the oldest 64 goes. An honest host's connection, the oldest, waits
 * for its cookie's answer while a holder's deferred ones fill the set: it
 * stays, and its answer gets its DH. Before, the oldest went: the honest
 * one. */
TEST_F(uct_crypt_cm_share_test, a_holders_waiting_connections_cost_only_its_own)
{
    SKIP_UNLESS_SHARE_RATE();
    if (!listener_share::raise_fd_limit()) {
        GTEST_SKIP() << "needs 4096 file descriptors (ulimit -n)";
    }
    ASSERT_NO_FATAL_FAILURE(connect_pair()); /* the listener */
    make_load();
    ASSERT_NO_FATAL_FAILURE(through_cookies(INADDR_LOOPBACK + 2, 1, false));

    const size_t flood = 1024 + 32; /* past the bound, 4 answered at once */
    ASSERT_NO_FATAL_FAILURE(through_cookies(INADDR_LOOPBACK + 1, flood, true, 64));
    listener_share::expect_the_first_stays(
            w, sizeof(keyex_noise_cm_msg_t),
            [&](std::function<bool()> done) { progress_until(done); }, [&] {
        first(w.fds[0], w.cookies[0].data());
    });
}
