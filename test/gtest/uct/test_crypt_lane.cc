/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane at the UCT level (src/uct_crypt/api/uct_crypt_lane.h):
 * messages of every size class whole and in order per (team, rank), bounds
 * on streams and buffers, receives posted, cancelled and abandoned.
 */
#include "uct/crypt_test.h"


/* ---- the collective lane (src/uct_crypt/api/uct_crypt_lane.h) ------------------
 * Two lanes in one process over tcp loopback, through the ops the MPI
 * adapter finds with dlsym. */
#include "ucp_crypt/coll/crypt_coll.h"
#include "uct_crypt/api/uct_crypt_lane.h"

class uct_crypt_lane_test : public uct_crypt_test {
protected:
    const uct_crypt_lane_ops_t *ops = nullptr;
    uct_crypt_lane_t *x = nullptr, *y = nullptr;
    int x_to_y = -1, y_to_x = -1;

    void SetUp() override
    {
        uct_crypt_test::SetUp();
        setenv("UCX_NET_DEVICES", "lo", 1);
        ops = static_cast<const uct_crypt_lane_ops_t*>(dlsym(crypt_plugin::handle(), UCT_CRYPT_LANE_OPS_SYMBOL));
        ASSERT_NE(ops, nullptr);
        ASSERT_EQ(ops->version, UCT_CRYPT_LANE_OPS_VERSION);
        char error[160] = "";
        x = ops->open(error, sizeof(error));
        ASSERT_NE(x, nullptr) << error;
        y = ops->open(error, sizeof(error));
        ASSERT_NE(y, nullptr) << error;
        uint8_t addr[UCT_CRYPT_LANE_ADDR_MAX];
        size_t len = ops->address(y, addr, sizeof(addr));
        ASSERT_GT(len, 0u);
        x_to_y = ops->connect(x, addr, len);
        EXPECT_EQ(ops->connect(x, addr, len), x_to_y) << "one peer per address";
        len    = ops->address(x, addr, sizeof(addr));
        y_to_x = ops->connect(y, addr, len);
        ASSERT_GE(x_to_y, 0);
        ASSERT_GE(y_to_x, 0);
    }

    void TearDown() override
    {
        /* as two processes would: y keeps progressing while x closes (x
         * flushes what it sent, which may need y to answer) */
        if (x) {
            std::atomic<bool> closed{false};
            std::thread closer([&] { ops->close(x); closed = true; });
            while (!closed) {
                if (y) ops->progress(y);
            }
            closer.join();
        }
        if (y) ops->close(y);
        unsetenv("UCX_NET_DEVICES");
        uct_crypt_test::TearDown();
    }

    /* both progress, as the two processes would, until x's sending half
     * towards y is idle or `seconds` passed: x's send_idle then */
    int progress_until_sent(double seconds = 20)
    {
        deadline limit(seconds);
        while ((ops->send_idle(x, x_to_y) == 0) && !limit.passed()) {
            ops->progress(x);
            ops->progress(y);
        }
        return ops->send_idle(x, x_to_y);
    }

    /* x starts sending `msg` (16 MiB: more than one progress call takes);
     * both progress until some, not all, of it reached y, which is
     * returned */
    uint64_t send_until_partly_arrived(uint64_t team, uint32_t rank,
                                       const std::vector<uint8_t> &msg)
    {
        EXPECT_EQ(ops->send(x, x_to_y, team, rank, msg.data(), msg.size(),
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        uint64_t sent, received = 0;
        deadline limit(20);
        while ((received == 0) && !limit.passed()) {
            ops->progress(x);
            ops->progress(y);
            ops->counters(y, &sent, &received);
        }
        EXPECT_GT(received, 0u);
        EXPECT_LT(received, msg.size()) << "the message arrived in one progress call";
        return received;
    }

    /* send from x while y receives; returns y's recv verdict */
    int transfer(uint64_t team, uint32_t rank, const std::vector<uint8_t> &msg,
                 std::vector<uint8_t> &out, size_t expect_len)
    {
        EXPECT_EQ(ops->send(x, x_to_y, team, rank, msg.data(), msg.size(),
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        out.assign(expect_len, 0);
        int got = 0, sent = 0;
        deadline limit(20);
        while (!(got && sent) && !limit.passed()) {
            ops->progress(x);
            ops->progress(y);
            if (!sent) sent = ops->send_idle(x, x_to_y);
            if (!got) got = ops->recv(y, y_to_x, team, rank, out.data(), expect_len);
        }
        EXPECT_EQ(sent, 1);
        return got;
    }
};

TEST_F(uct_crypt_lane_test, messages_of_every_size_class_arrive_whole)
{
    /* 0, one frame overhead, one chunk, chunk boundaries, many chunks */
    for (size_t len : {size_t(0), size_t(CRYPT_COLL_FRAME_OVERHEAD), size_t(1000), size_t(65536 - 24),
                       size_t(65536 - 23), size_t(65536), size_t(1 << 20) + 3}) {
        auto msg = make_payload(len, len);
        std::vector<uint8_t> out;
        ASSERT_EQ(transfer(42, 3, msg, out, len), 1) << len;
        EXPECT_EQ(out, msg) << len;
    }
    uint64_t sent, received;
    ops->counters(x, &sent, &received);
    EXPECT_GE(sent, (size_t(1) << 20) + 3);
}

/* On crypt's own wire each connection proved its peer's key: a stream
 * (team, rank) is bound to the peer its first chunk came from, and a
 * receive that expects that rank at another peer fails, as does a chunk of
 * that stream from another peer. */
TEST_F(uct_crypt_lane_test, a_rank_speaks_only_through_its_own_peer)
{
    char error[160] = "";
    uct_crypt_lane_t *z = ops->open(error, sizeof(error));
    ASSERT_NE(z, nullptr) << error;
    uint8_t addr[UCT_CRYPT_LANE_ADDR_MAX];
    size_t len = ops->address(z, addr, sizeof(addr));
    int y_to_z = ops->connect(y, addr, len);
    ASSERT_GE(y_to_z, 0);
    ASSERT_NE(y_to_z, y_to_x);
    len = ops->address(y, addr, sizeof(addr));
    int z_to_y = ops->connect(z, addr, len);
    ASSERT_GE(z_to_y, 0);

    auto msg = make_payload(7, 2000);
    ASSERT_EQ(ops->send(x, x_to_y, 7, 3, msg.data(), msg.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), 0);
    /* one message per peer at a time (uct_crypt_lane.h): the next once
     * send_idle says the first left */
    ASSERT_EQ(progress_until_sent(), 1);
    auto other = make_payload(8, 2000);
    ASSERT_EQ(ops->send(x, x_to_y, 7, 4, other.data(), other.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), 0);
    std::vector<uint8_t> out(msg.size());
    int got = 0;
    deadline limit(20);
    while (!got && !limit.passed()) {
        ops->progress(x);
        ops->progress(z);
        /* rank 3 of team 7 is expected at z, but spoke through x */
        got = ops->recv(y, y_to_z, 7, 3, out.data(), out.size());
    }
    EXPECT_EQ(got, -1) << "a rank's message taken from another peer";

    /* z now speaks for rank 4, whose stream x began: refused too */
    ASSERT_EQ(ops->send(z, z_to_y, 7, 4, msg.data(), msg.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), 0);
    got = 0;
    limit = deadline(20);
    while ((got == 0) && !limit.passed()) {
        ops->progress(x);
        ops->progress(z);
        got = ops->recv(y, y_to_x, 7, 4, out.data(), out.size());
        if ((got == 1) && (out == other)) {
            got = 0; /* x's own message first; then z's must not come */
            out.assign(out.size(), 0);
        }
    }
    EXPECT_EQ(got, -1) << "a chunk of x's stream from z was taken";

    std::atomic<bool> closed{false};
    std::thread closer([&] { ops->close(z); closed = true; });
    while (!closed) {
        ops->progress(y);
    }
    closer.join();
}

/* A peer cannot make the lane keep streams without end: past 65536
 * (team, rank) streams a new one's chunks are dropped and its receive
 * fails; the streams kept go on working. */
TEST_F(uct_crypt_lane_test, streams_past_the_bound_are_refused)
{
    const uint32_t bound = 65536;
    auto msg = make_payload(3, 64);
    for (uint32_t rank = 0; rank <= bound; ++rank) {
        ASSERT_EQ(ops->send(x, x_to_y, 9, rank, msg.data(), msg.size(),
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        ASSERT_EQ(progress_until_sent(), 1);
    }
    for (int i = 0; i < 1000; ++i) {
        ops->progress(x);
        ops->progress(y);
    }
    std::vector<uint8_t> out(msg.size());
    EXPECT_EQ(ops->recv(y, y_to_x, 9, bound, out.data(), out.size()), -1)
            << "a stream past the bound was kept";
    int got = 0;
    deadline limit(20);
    while (!got && !limit.passed()) {
        ops->progress(x);
        got = ops->recv(y, y_to_x, 9, 0, out.data(), out.size());
    }
    EXPECT_EQ(got, 1);
    EXPECT_EQ(out, msg);
}

/* What the lane holds for receives not posted yet is bounded (1 GiB, all
 * streams together): the stream whose message would pass it fails (the
 * collective layer then fails that collective), its memory is given back,
 * and the other streams go on */
TEST_F(uct_crypt_lane_test, bytes_past_the_buffer_bound_fail_the_stream_not_the_lane)
{
    const size_t len = size_t(128) << 20; /* 9 of them: past 1 GiB */
    std::vector<uint8_t> msg(len, 0x5a);
    for (int i = 0; i < 9; ++i) {
        ASSERT_EQ(ops->send(x, x_to_y, 11, 0, msg.data(), msg.size(),
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        ASSERT_EQ(progress_until_sent(60), 1) << i;
    }
    for (int i = 0; i < 1000; ++i) {
        ops->progress(x);
        ops->progress(y);
    }
    std::vector<uint8_t> out(len);
    EXPECT_EQ(ops->recv(y, y_to_x, 11, 0, out.data(), out.size()), -1)
            << "a stream past the byte bound was kept";
    /* the memory is back: another stream gets a message of that size */
    auto small = make_payload(4, 1 << 20);
    std::vector<uint8_t> got_small(small.size());
    EXPECT_EQ(transfer(12, 0, small, got_small, small.size()), 1);
    EXPECT_EQ(got_small, small);
}

TEST_F(uct_crypt_lane_test, streams_of_teams_and_ranks_kept_apart_and_in_order)
{
    /* x sends team 1 rank 0, team 2 rank 0, team 1 rank 5, team 1 rank 0
     * again; y asks in another order and gets each stream's own, in order */
    std::vector<std::vector<uint8_t>> msgs;
    const uint64_t teams[] = {1, 2, 1, 1};
    const uint32_t ranks[] = {0, 0, 5, 0};
    for (int i = 0; i < 4; ++i) {
        msgs.push_back(make_payload(100 + i, 3000 + i));
        ASSERT_EQ(ops->send(x, x_to_y, teams[i], ranks[i], msgs[i].data(),
                            msgs[i].size(), CRYPT_COLL_FRAME_OVERHEAD), 0);
        /* y progresses too, as the peer process would (a new connection
         * needs both sides) */
        ASSERT_EQ(progress_until_sent(), 1);
    }
    const int order[] = {2, 1, 0, 3};
    for (int i : order) {
        std::vector<uint8_t> out(msgs[i].size());
        int got = 0;
        deadline limit(20);
        while (!got && !limit.passed()) {
            ops->progress(x);
            got = ops->recv(y, y_to_x, teams[i], ranks[i], out.data(), out.size());
        }
        ASSERT_EQ(got, 1) << i;
        EXPECT_EQ(out, msgs[i]) << i;
    }
}

TEST_F(uct_crypt_lane_test, a_sender_idle_leaves_nothing_that_needs_its_progress)
{
    /* A rank leaves the collective once send_idle says 1 and may then not
     * progress the lane for a long time (another MPI call, finalize): its
     * message must reach the peer by the peer's progress alone, both the
     * first one on a new connection (held while the handshake is
     * answered) and one larger than one write takes */
    for (size_t len : {size_t(1000), size_t(16) << 20}) {
        auto msg = make_payload(77, len);
        ASSERT_EQ(ops->send(x, x_to_y, 5, 1, msg.data(), msg.size(),
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        ASSERT_EQ(progress_until_sent(), 1) << len;
        std::vector<uint8_t> out(len);
        int got = 0;
        deadline alone(20);
        while (!got && !alone.passed()) {
            ops->progress(y); /* x stays away */
            got = ops->recv(y, y_to_x, 5, 1, out.data(), out.size());
        }
        ASSERT_EQ(got, 1) << len << " bytes stranded in the sender";
        EXPECT_EQ(out, msg) << len;
    }
}

TEST_F(uct_crypt_lane_test, a_message_of_another_length_fails_the_receive)
{
    auto msg = make_payload(7, 4096);
    std::vector<uint8_t> out;
    EXPECT_EQ(transfer(9, 1, msg, out, 4095), -1);
    EXPECT_EQ(out, std::vector<uint8_t>(4095, 0)) << "nothing copied out";
}

TEST_F(uct_crypt_lane_test, refuses_what_cannot_be_a_sealed_frame)
{
    uint8_t small[CRYPT_COLL_FRAME_OVERHEAD - 1] = {};
    EXPECT_EQ(ops->send(x, x_to_y, 1, 0, small, sizeof(small),
                        CRYPT_COLL_FRAME_OVERHEAD), -1);
    EXPECT_EQ(ops->send(x, 99, 1, 0, small, 0, CRYPT_COLL_FRAME_OVERHEAD), -1)
            << "unknown peer";
    uint8_t bad_addr[4] = {0, 0, 0, 0};
    EXPECT_LT(ops->connect(x, bad_addr, 2), 0);
    EXPECT_LT(ops->connect(x, bad_addr, sizeof(bad_addr)), 0);
}

/* A posted receive (recv said 0) may be written in place; recv_cancel
 * gives the buffer back before anything arrived, and the message then
 * waits for the next receive */
TEST_F(uct_crypt_lane_test, a_cancelled_receive_leaves_its_buffer_alone)
{
    auto msg = make_payload(11, 200000);
    std::vector<uint8_t> abandoned(msg.size(), 0), out(msg.size(), 0);
    ASSERT_EQ(ops->recv(y, y_to_x, 5, 1, abandoned.data(), abandoned.size()), 0);
    ops->recv_cancel(y, 5, 1);
    ASSERT_EQ(ops->send(x, x_to_y, 5, 1, msg.data(), msg.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), 0);
    uint64_t sent, received = 0;
    deadline limit(20);
    while ((ops->send_idle(x, x_to_y) == 0 || received < msg.size()) &&
           !limit.passed()) {
        ops->progress(x);
        ops->progress(y);
        ops->counters(y, &sent, &received);
    }
    ASSERT_EQ(received, msg.size());
    EXPECT_EQ(abandoned, std::vector<uint8_t>(msg.size(), 0))
            << "the lane wrote into a cancelled receive's buffer";
    EXPECT_EQ(ops->recv(y, y_to_x, 5, 1, out.data(), out.size()), 1);
    EXPECT_EQ(out, msg);
}

/* the chunks of a message that began before its receive was posted
 * continue in the posted buffer; the whole message arrives */
TEST_F(uct_crypt_lane_test, a_receive_posted_mid_message_gets_all_of_it)
{
    auto msg = make_payload(12, 16 << 20);
    std::vector<uint8_t> out(msg.size(), 0);
    send_until_partly_arrived(6, 2, msg);
    deadline limit(20);
    int got = 0, done = 0;
    while (!(got && done) && !limit.passed()) {
        ops->progress(x);
        if (!got) got = ops->recv(y, y_to_x, 6, 2, out.data(), out.size());
        if (!done) done = ops->send_idle(x, x_to_y);
    }
    ASSERT_EQ(got, 1);
    EXPECT_EQ(out, msg);
}

/* abandoning a receive while its message is being written there fails the
 * stream: the message cannot be delivered whole, nor the next in order */
TEST_F(uct_crypt_lane_test, abandoning_a_receive_mid_message_fails_the_stream)
{
    auto msg = make_payload(13, 16 << 20);
    std::vector<uint8_t> abandoned(msg.size(), 0);
    ASSERT_EQ(ops->recv(y, y_to_x, 7, 3, abandoned.data(), abandoned.size()), 0);
    uint64_t at_cancel = send_until_partly_arrived(7, 3, msg);
    ops->recv_cancel(y, 7, 3);
    progress_until_sent();
    std::vector<uint8_t> out(msg.size());
    EXPECT_EQ(ops->recv(y, y_to_x, 7, 3, out.data(), out.size()), -1);
    /* nothing written past what had arrived when it was cancelled */
    EXPECT_EQ(std::vector<uint8_t>(abandoned.begin() + at_cancel, abandoned.end()),
              std::vector<uint8_t>(msg.size() - at_cancel, 0));
}
