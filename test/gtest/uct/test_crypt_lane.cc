/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane at the UCT level (src/uct_crypt/api/uct_crypt_lane.h):
 * messages of every size class whole and in order per (team, rank), bounds
 * on buffers, receives posted, cancelled and abandoned, and what a
 * stranger's chunks get. Run twice by quickstart.sh: over crypt's own wire,
 * and with UCX_CRYPT_LANE_UCX_TCP=y (test builds) over UCX's tcp transport,
 * which stands in for ud and dc (no handshake: anyone may send to it).
 */
#include "uct/crypt_test.h"

#include <map>


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
    std::map<uint64_t, uint32_t> x_rank_in; /* team -> x's rank there */
    const uint8_t team_key[32] = {0x5e, 0xc2, 0xe7};

    static bool own_wire()
    {
        const char *ucx_tcp = getenv("UCX_CRYPT_LANE_UCX_TCP");
        return (ucx_tcp == nullptr) || (ucx_tcp[0] != 'y');
    }

    /* x is `rank` of `team`, y is rank + 1, of a team of rank + 2 ranks:
     * both lanes know it and its key */
    void join(uint64_t team, uint32_t rank)
    {
        auto it = x_rank_in.find(team);
        if (it != x_rank_in.end()) {
            ASSERT_EQ(it->second, rank) << "x is one rank of a team";
            return;
        }
        ASSERT_EQ(ops->team_add(x, team, rank, rank + 2, team_key, sizeof(team_key)), 0);
        ASSERT_EQ(ops->team_add(y, team, rank + 1, rank + 2, team_key, sizeof(team_key)), 0);
        x_rank_in[team] = rank;
    }

    /* x, as `rank` of `team`, starts sending to y */
    int send_as(uint64_t team, uint32_t rank, const void *buf, size_t len)
    {
        join(team, rank);
        return ops->send(x, x_to_y, team, rank + 1, buf, len,
                         CRYPT_COLL_FRAME_OVERHEAD);
    }

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
        /* device and iface address lengths, the addresses, and on crypt's
         * own wire the key its handshake proves: the inner asked for */
        ASSERT_EQ(len, 2u + addr[0] + addr[1] + (own_wire() ? 32 : 0))
                << "the lane is not on the inner the test asked for";
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
        EXPECT_EQ(send_as(team, rank, msg.data(), msg.size()), 0);
        uint64_t sent, received = 0, refused;
        deadline limit(20);
        while ((received == 0) && !limit.passed()) {
            ops->progress(x);
            ops->progress(y);
            ops->counters(y, &sent, &received, &refused);
        }
        EXPECT_GT(received, 0u);
        EXPECT_LT(received, msg.size()) << "the message arrived in one progress call";
        return received;
    }

    /* send from x while y receives; returns y's recv verdict */
    int transfer(uint64_t team, uint32_t rank, const std::vector<uint8_t> &msg,
                 std::vector<uint8_t> &out, size_t expect_len)
    {
        EXPECT_EQ(send_as(team, rank, msg.data(), msg.size()), 0);
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
    /* 0, one frame overhead, one chunk, chunk boundaries (own wire), many
     * chunks */
    const size_t per_chunk = sizeof(crypt_lane_chunk_hdr_t) + CRYPT_LANE_CHUNK_TAG_LEN;
    for (size_t len : {size_t(0), size_t(CRYPT_COLL_FRAME_OVERHEAD), size_t(1000),
                       size_t(65536) - per_chunk, size_t(65536) - per_chunk + 1,
                       size_t(65536), size_t(1 << 20) + 3}) {
        auto msg = make_payload(len, len);
        std::vector<uint8_t> out;
        ASSERT_EQ(transfer(42, 3, msg, out, len), 1) << len;
        EXPECT_EQ(out, msg) << len;
    }
    uint64_t sent, received, refused;
    ops->counters(x, &sent, &received, &refused);
    EXPECT_GE(sent, (size_t(1) << 20) + 3);
    ops->counters(y, &sent, &received, &refused);
    EXPECT_EQ(refused, 0u);
}

/* A third lane z, connected both ways with y */
struct third_lane {
    const uct_crypt_lane_ops_t *ops;
    uct_crypt_lane_t *z = nullptr;
    int y_to_z = -1, z_to_y = -1;

    third_lane(const uct_crypt_lane_ops_t *o, uct_crypt_lane_t *y) : ops(o)
    {
        char error[160] = "";
        z = ops->open(error, sizeof(error));
        EXPECT_NE(z, nullptr) << error;
        uint8_t addr[UCT_CRYPT_LANE_ADDR_MAX];
        size_t len = ops->address(z, addr, sizeof(addr));
        y_to_z = ops->connect(y, addr, len);
        len    = ops->address(y, addr, sizeof(addr));
        z_to_y = ops->connect(z, addr, len);
        EXPECT_GE(y_to_z, 0);
        EXPECT_GE(z_to_y, 0);
    }

    void close(uct_crypt_lane_t *y)
    {
        std::atomic<bool> closed{false};
        std::thread closer([&] { ops->close(z); closed = true; });
        while (!closed) {
            ops->progress(y);
        }
        closer.join();
    }
};

/* On crypt's own wire each connection proved its peer's key: a stream
 * (team, rank) is bound to the peer its first chunk came from, and a
 * receive that expects that rank at another peer fails, as does a chunk of
 * that stream from another peer, though both come from key holders of the
 * team. */
TEST_F(uct_crypt_lane_test, a_rank_speaks_only_through_its_own_peer)
{
    if (!own_wire()) {
        GTEST_SKIP() << "peers are proven only on crypt's own wire";
    }
    third_lane t(ops, y);
    ASSERT_GE(t.y_to_z, 0);
    ASSERT_NE(t.y_to_z, y_to_x);

    auto msg = make_payload(7, 2000);
    ASSERT_EQ(send_as(7, 3, msg.data(), msg.size()), 0);
    /* one message per peer at a time (uct_crypt_lane.h): the next once
     * send_idle says the first left */
    ASSERT_EQ(progress_until_sent(), 1);
    auto other = make_payload(8, 2000);
    ASSERT_EQ(send_as(8, 4, other.data(), other.size()), 0);
    std::vector<uint8_t> out(msg.size());
    int got = 0;
    deadline limit(20);
    while (!got && !limit.passed()) {
        ops->progress(x);
        ops->progress(t.z);
        /* rank 3 of team 7 is expected at z, but spoke through x */
        got = ops->recv(y, t.y_to_z, 7, 3, out.data(), out.size());
    }
    EXPECT_EQ(got, -1) << "a rank's message taken from another peer";

    /* z, a rank of team 8 too, now speaks for rank 4, whose stream x
     * began: its first chunk comes again in that stream (dropped as seen
     * before), its next fails the stream */
    ASSERT_EQ(ops->team_add(t.z, 8, 4, 6, team_key, sizeof(team_key)), 0);
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(ops->send(t.z, t.z_to_y, 8, 5, msg.data(), 100,
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        limit = deadline(20);
        while ((ops->send_idle(t.z, t.z_to_y) == 0) && !limit.passed()) {
            ops->progress(t.z);
            ops->progress(y);
        }
    }
    got = 0;
    limit = deadline(20);
    while ((got == 0) && !limit.passed()) {
        ops->progress(x);
        ops->progress(t.z);
        got = ops->recv(y, y_to_x, 8, 4, out.data(), out.size());
        if ((got == 1) && (out == other)) {
            got = 0; /* x's own message first; then z's must not come */
            out.assign(out.size(), 0);
        }
    }
    EXPECT_EQ(got, -1) << "a chunk of x's stream from z was taken";
    t.close(y);
}

/* A stranger who can reach the lane (any process on ud or dc; on crypt's
 * own wire a job-secret holder, or anyone injecting into its TCP stream)
 * but holds no key of the team sends chunks that name a live stream:
 * each is dropped and counted, no stream fails, the honest message
 * arrives whole (issue 29 item 4). Before chunks carried tags, the
 * stranger's chunk failed the stream and with it the collective. */
TEST_F(uct_crypt_lane_test, a_strangers_chunks_are_dropped_and_the_stream_goes_on)
{
    third_lane t(ops, y);
    const uint8_t other_key[32] = {0xba, 0xd};
    join(21, 1);
    /* z names team 21, rank 1 towards y's rank 2: the stream x will use */
    ASSERT_EQ(ops->team_add(t.z, 21, 1, 3, other_key, sizeof(other_key)), 0);
    auto forged = make_payload(66, 5000);
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(ops->send(t.z, t.z_to_y, 21, 2, forged.data(), forged.size(),
                            CRYPT_COLL_FRAME_OVERHEAD), 0);
        deadline limit(20);
        while ((ops->send_idle(t.z, t.z_to_y) == 0) && !limit.passed()) {
            ops->progress(t.z);
            ops->progress(y);
        }
    }
    uint64_t sent, received, refused = 0;
    deadline limit(20);
    while ((refused < 3) && !limit.passed()) {
        ops->progress(t.z);
        ops->progress(y);
        ops->counters(y, &sent, &received, &refused);
    }
    EXPECT_EQ(refused, 3u) << "the stranger's chunks were not all refused";
    EXPECT_EQ(received, 0u);

    auto msg = make_payload(21, 5000);
    std::vector<uint8_t> out;
    ASSERT_EQ(transfer(21, 1, msg, out, msg.size()), 1) << "the stream failed";
    EXPECT_EQ(out, msg);
    t.close(y);
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
        ASSERT_EQ(send_as(11, 0, msg.data(), msg.size()), 0);
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
    /* x sends as team 1 rank 0, team 2 rank 0, team 3 rank 5, team 1 rank
     * 0 again; y asks in another order and gets each stream's own, in
     * order */
    std::vector<std::vector<uint8_t>> msgs;
    const uint64_t teams[] = {1, 2, 3, 1};
    const uint32_t ranks[] = {0, 0, 5, 0};
    for (int i = 0; i < 4; ++i) {
        msgs.push_back(make_payload(100 + i, 3000 + i));
        ASSERT_EQ(send_as(teams[i], ranks[i], msgs[i].data(), msgs[i].size()), 0);
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

/* A team removed: its streams and what they hold go, and what comes for
 * it later is a stranger's (dropped, counted) */
TEST_F(uct_crypt_lane_test, a_team_removed_takes_its_streams_and_refuses_later_chunks)
{
    auto msg = make_payload(31, 3000);
    ASSERT_EQ(send_as(31, 0, msg.data(), msg.size()), 0);
    ASSERT_EQ(progress_until_sent(), 1);
    uint64_t sent, received = 0, refused;
    deadline limit(20);
    while ((received < msg.size()) && !limit.passed()) {
        ops->progress(x);
        ops->progress(y);
        ops->counters(y, &sent, &received, &refused);
    }
    ops->team_remove(y, 31);
    std::vector<uint8_t> out(msg.size());
    EXPECT_EQ(ops->recv(y, y_to_x, 31, 0, out.data(), out.size()), -1);
    ASSERT_EQ(send_as(31, 0, msg.data(), msg.size()), 0);
    ASSERT_EQ(progress_until_sent(), 1);
    limit = deadline(20);
    while ((refused == 0) && !limit.passed()) {
        ops->progress(x);
        ops->progress(y);
        ops->counters(y, &sent, &received, &refused);
    }
    EXPECT_EQ(refused, 1u);
    ops->team_remove(x, 31);
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
        ASSERT_EQ(send_as(5, 1, msg.data(), msg.size()), 0);
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
    EXPECT_EQ(send_as(1, 0, small, sizeof(small)), -1);
    EXPECT_EQ(ops->send(x, 99, 1, 1, small, 0, CRYPT_COLL_FRAME_OVERHEAD), -1)
            << "unknown peer";
    uint8_t bad_addr[4] = {0, 0, 0, 0};
    EXPECT_LT(ops->connect(x, bad_addr, 2), 0);
    EXPECT_LT(ops->connect(x, bad_addr, sizeof(bad_addr)), 0);
    EXPECT_EQ(ops->team_add(x, 1, 0, 2, team_key, sizeof(team_key)), -1)
            << "one id, two teams";
    EXPECT_EQ(ops->team_add(x, 2, 0, 2, team_key, 7), -1) << "a 7-byte key";
}

/* A team's message to a rank the lane cannot tag for (no such team, x's
 * own rank, past the team) is refused before anything leaves, and the
 * peer stays usable */
TEST_F(uct_crypt_lane_test, a_message_to_no_rank_of_a_known_team_is_refused_before_it_leaves)
{
    auto msg = make_payload(3, 1000);
    join(40, 0);
    EXPECT_EQ(ops->send(x, x_to_y, 40, 5, msg.data(), msg.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), -1);
    EXPECT_EQ(ops->send(x, x_to_y, 40, 0, msg.data(), msg.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), -1) << "to itself";
    EXPECT_EQ(ops->send(x, x_to_y, 41, 1, msg.data(), msg.size(),
                        CRYPT_COLL_FRAME_OVERHEAD), -1) << "no such team";
    uint64_t sent, received, refused;
    ops->counters(x, &sent, &received, &refused);
    EXPECT_EQ(sent, 0u);
    std::vector<uint8_t> out;
    EXPECT_EQ(transfer(40, 0, msg, out, msg.size()), 1) << "the peer failed";
    EXPECT_EQ(out, msg);
}

/* A posted receive (recv said 0) may be written in place; recv_cancel
 * gives the buffer back before anything arrived, and the message then
 * waits for the next receive */
TEST_F(uct_crypt_lane_test, a_cancelled_receive_leaves_its_buffer_alone)
{
    auto msg = make_payload(11, 200000);
    std::vector<uint8_t> abandoned(msg.size(), 0), out(msg.size(), 0);
    join(5, 1);
    ASSERT_EQ(ops->recv(y, y_to_x, 5, 1, abandoned.data(), abandoned.size()), 0);
    ops->recv_cancel(y, 5, 1);
    ASSERT_EQ(send_as(5, 1, msg.data(), msg.size()), 0);
    uint64_t sent, received = 0, refused;
    deadline limit(20);
    while ((ops->send_idle(x, x_to_y) == 0 || received < msg.size()) &&
           !limit.passed()) {
        ops->progress(x);
        ops->progress(y);
        ops->counters(y, &sent, &received, &refused);
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
    join(7, 3);
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
