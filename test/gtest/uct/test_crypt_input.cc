/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the transport reads from outside the process, without UCX
 * (src/uct_crypt/bulk/bulk_input.c, lane/lane_rx.c,
 * wire/wire_frame.c, record/record_input.c): the calibration
 * profile, bulk control records, the range check that stands between a
 * peer and our memory, lane chunk reassembly, the own wire's frames, and
 * records before and after their tag. The fuzz targets
 * (test/fuzz) run the same code on arbitrary input; these pin the cases
 * that matter by name.
 */
#include <gtest/gtest.h>

extern "C" {
#include "uct_crypt/bulk/bulk_input.h"
#include "uct_crypt/lane/lane_rx.h"
#include "uct_crypt/base/format.h"
}

#include <endian.h>
#include <stdarg.h>
#include <stdio.h>

#include <string>
#include <vector>

namespace {

std::vector<std::string> warnings;

void record_warning(const char *fmt, ...)
{
    char message[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    warnings.push_back(message);
}

struct profile_result {
    size_t        segment = 1;
    unsigned long threads = 1;
};

profile_result parse_profile(const std::string &text)
{
    profile_result r;
    FILE *file = fmemopen(const_cast<char*>(text.data()), text.size(), "r");

    warnings.clear();
    EXPECT_NE(file, nullptr);
    uct_crypt_bulk_profile_parse(file, "test.profile", &r.segment, &r.threads,
                                 record_warning);
    fclose(file);
    return r;
}

} // namespace

/* The file crypt_calibrate writes begins with a comment: it was read as a
 * key without a number, which ended the parse, so no calibrated profile
 * was ever applied */
TEST(crypt_profile, as_crypt_calibrate_writes_it)
{
    profile_result r = parse_profile(
        "# written by crypt_calibrate: backend ipsec-mb (avx512)\n"
        "segment 131072\nthreads 3\nseal_GBs_1 3.100\nseal_GBs_best 8.200\n"
        "open_GBs 3.300\n");
    EXPECT_EQ(r.segment, 131072u);
    EXPECT_EQ(r.threads, 3u);
    EXPECT_TRUE(warnings.empty());
}

TEST(crypt_profile, a_line_not_understood_hides_nothing_after_it)
{
    profile_result r = parse_profile("  \n\tsegment\nthreads two\n"
                                     "segment 65536\n" + std::string(300, 'x') +
                                     "\nthreads 4");
    EXPECT_EQ(r.segment, 65536u);
    EXPECT_EQ(r.threads, 4u); /* the last line has no newline */
    ASSERT_EQ(warnings.size(), 3u);
    EXPECT_NE(warnings[0].find("line 2 is not 'key number'"), std::string::npos)
        << warnings[0];
    EXPECT_NE(warnings[2].find("line 5 is too long"), std::string::npos)
        << warnings[2];
}

TEST(crypt_profile, values_out_of_range_leave_the_defaults)
{
    profile_result r = parse_profile("segment 1e300\nthreads 1e300\nsegment nan\n"
                                     "threads -5\nsegment 4095\nthreads 1025\n");
    EXPECT_EQ(r.segment, 1u);
    EXPECT_EQ(r.threads, 1u);
    EXPECT_EQ(warnings.size(), 6u);
}

namespace {

std::vector<uint8_t> segment_record(uint8_t last, uint64_t address, uint64_t length)
{
    crypt_bulk_segment_t s = {};
    s.kind    = CRYPT_CONTROL_SEGMENT;
    s.last    = last;
    s.address = htole64(address);
    s.length  = htole64(length);
    const uint8_t *p = reinterpret_cast<const uint8_t*>(&s);
    return std::vector<uint8_t>(p, p + sizeof(s));
}

std::vector<uint8_t> get_req_record(uint32_t rkey_len, size_t rkey_sent,
                                    uint64_t remote, uint64_t local, uint64_t length)
{
    crypt_bulk_get_req_t r = {};
    r.kind        = CRYPT_CONTROL_GET_REQ;
    r.rkey_length = htole32(rkey_len);
    r.remote_addr = htole64(remote);
    r.local_addr  = htole64(local);
    r.length      = htole64(length);
    const uint8_t *p = reinterpret_cast<const uint8_t*>(&r);
    std::vector<uint8_t> v(p, p + sizeof(r));
    v.resize(sizeof(r) + rkey_sent, 0x5a);
    return v;
}

int kind(const std::vector<uint8_t> &v)
{
    return uct_crypt_bulk_control_kind(v.data(), v.size());
}

/* one byte more or less than a record of a fixed size: refused */
void expect_exact_length(const std::vector<uint8_t> &record)
{
    std::vector<uint8_t> longer = record, shorter = record;
    longer.push_back(0);
    shorter.pop_back();
    EXPECT_EQ(kind(longer), 0);
    EXPECT_EQ(kind(shorter), 0);
}

} // namespace

TEST(crypt_bulk_control, honest_records_of_each_kind)
{
    EXPECT_EQ(kind(segment_record(1, 0x7f0000001000ull, 1u << 30)), CRYPT_CONTROL_SEGMENT);
    crypt_bulk_ack_t ack = {};
    ack.kind = CRYPT_CONTROL_ACK;
    std::vector<uint8_t> a(reinterpret_cast<uint8_t*>(&ack),
                           reinterpret_cast<uint8_t*>(&ack) + sizeof(ack));
    EXPECT_EQ(kind(a), CRYPT_CONTROL_ACK);
    a[0] = 4; /* GET_DONE until wire version 11: a get is done by its data */
    EXPECT_EQ(kind(a), 0);
    EXPECT_EQ(kind(get_req_record(24, 24, 0x1000, 0x2000, 4096)), CRYPT_CONTROL_GET_REQ);
    std::vector<uint8_t> end(sizeof(crypt_flow_end_t), 0);
    end[0] = CRYPT_CONTROL_FLOW_END;
    EXPECT_EQ(kind(end), CRYPT_CONTROL_FLOW_END);
    std::vector<uint8_t> refused(sizeof(crypt_flow_refused_t), 0);
    refused[0] = CRYPT_CONTROL_FLOW_REFUSED;
    refused[1] = CRYPT_FLOW_REFUSED_RESOURCE;
    refused[8] = 0x5a; /* the flow id */
    EXPECT_EQ(kind(refused), CRYPT_CONTROL_FLOW_REFUSED);
}

/* A FLOW_REFUSED is 24 bytes: its kind, a reason it knows, zeros, the
 * flow id, zeros */
TEST(crypt_bulk_control, a_flow_refusal_is_exactly_its_kind_a_reason_and_zeros)
{
    std::vector<uint8_t> refused(sizeof(crypt_flow_refused_t), 0);
    refused[0] = CRYPT_CONTROL_FLOW_REFUSED;
    refused[1] = CRYPT_FLOW_REFUSED_BOUND;
    for (size_t i = 8; i < 16; ++i) {
        refused[i] = 0xff; /* any flow id */
    }
    EXPECT_EQ(kind(refused), CRYPT_CONTROL_FLOW_REFUSED);
    for (uint8_t reason : {0, 3, 255}) {
        std::vector<uint8_t> bad = refused;
        bad[1] = reason;
        EXPECT_EQ(kind(bad), 0) << "reason " << (int)reason;
    }
    for (size_t i : {2, 7, 16, 23}) {
        std::vector<uint8_t> bad = refused;
        bad[i] = 1;
        EXPECT_EQ(kind(bad), 0) << "reserved byte " << i;
    }
    expect_exact_length(refused);
}

/* A FLOW_END is 8 bytes, its kind then zeros: anything else is refused
 * (the record's sender is authenticated; a malformed one fails its flow) */
TEST(crypt_bulk_control, a_flow_end_is_exactly_its_kind_and_zeros)
{
    std::vector<uint8_t> end(sizeof(crypt_flow_end_t), 0);
    end[0] = CRYPT_CONTROL_FLOW_END;
    for (size_t i = 1; i < end.size(); ++i) {
        std::vector<uint8_t> bad = end;
        bad[i] = 1;
        EXPECT_EQ(kind(bad), 0) << "reserved byte " << i;
    }
    expect_exact_length(end);
}

TEST(crypt_bulk_control, malformed_records_are_refused)
{
    std::vector<uint8_t> v = segment_record(0, 0x1000, 4096);
    v.push_back(0);
    EXPECT_EQ(kind(v), 0) << "one byte too many";
    v.resize(v.size() - 2);
    EXPECT_EQ(kind(v), 0) << "one byte short";
    EXPECT_EQ(kind(segment_record(2, 0x1000, 4096)), 0) << "last is a flag";
    EXPECT_EQ(kind(segment_record(0, 0x1000, (1u << 30) + 1)), 0) << "above a put";
    EXPECT_EQ(kind(segment_record(0, UINT64_MAX - 100, 4096)), 0) << "wraps";

    crypt_bulk_ack_t ack = {};
    ack.kind        = CRYPT_CONTROL_ACK;
    ack.reserved[6] = 1;
    std::vector<uint8_t> a(reinterpret_cast<uint8_t*>(&ack),
                           reinterpret_cast<uint8_t*>(&ack) + sizeof(ack));
    EXPECT_EQ(kind(a), 0) << "reserved byte set";

    EXPECT_EQ(kind(get_req_record(24, 23, 0x1000, 0x2000, 4096)), 0) << "key cut short";
    EXPECT_EQ(kind(get_req_record(24, 25, 0x1000, 0x2000, 4096)), 0) << "bytes after the key";
    EXPECT_EQ(kind(get_req_record(15, 15, 0x1000, 0x2000, 4096)), 0) << "no component name";
    EXPECT_EQ(kind(get_req_record(23, 23, 0x1000, 0x2000, 4096)), 0) << "no region token";
    EXPECT_EQ(kind(get_req_record(UINT32_MAX, 24, 0x1000, 0x2000, 4096)), 0);
    EXPECT_EQ(kind(get_req_record(24, 24, UINT64_MAX, 0x2000, 4096)), 0) << "remote wraps";
    EXPECT_EQ(kind(get_req_record(24, 24, 0x1000, UINT64_MAX, 4096)), 0) << "local wraps";
    EXPECT_EQ(kind(get_req_record(24, 24, 0x1000, 0x2000, (1u << 30) + 1)), 0);
    EXPECT_EQ(kind({}), 0);
    EXPECT_EQ(kind({9}), 0) << "unknown kind";
}

TEST(crypt_bulk_control, range_inside_a_region)
{
    EXPECT_TRUE(uct_crypt_range_within(0x1000, 0x1000, 0x1000, 0x1000));
    EXPECT_TRUE(uct_crypt_range_within(0x1800, 0, 0x1000, 0x1000));
    EXPECT_FALSE(uct_crypt_range_within(0xfff, 2, 0x1000, 0x1000)) << "starts before";
    EXPECT_FALSE(uct_crypt_range_within(0x1fff, 2, 0x1000, 0x1000)) << "ends after";
    /* a range whose end wraps would pass a naive end <= region end */
    EXPECT_FALSE(uct_crypt_range_within(0x1800, UINT64_MAX - 0x1000, 0x1000, 0x1000));
    EXPECT_FALSE(uct_crypt_range_within(UINT64_MAX, 1, 0, UINT64_MAX));
    EXPECT_FALSE(uct_crypt_range_within(0x1800, 1, 0x1000, UINT64_MAX)) << "region wraps";
}

namespace {

std::vector<std::string> lane_failures;

void lane_log(uint64_t team, uint32_t src_rank, uct_crypt_lane_rx_event_t event,
              const char *why)
{
    static const char *kinds[] = {"refused: ", "chunk: ", "stream failed: "};
    lane_failures.push_back(std::string(kinds[event]) + why);
}

const uint8_t lane_key[32] = {0x1a, 0x2b, 0x3c};

/* The receiver is rank 0 of every team here (8 ranks, key lane_key);
 * senders[rank] seals what that rank sends, each team added on first
 * use. */
class crypt_lane_rx : public ::testing::Test {
protected:
    void SetUp() override
    {
        lane_failures.clear();
        ASSERT_EQ(crypt_aead_init(CRYPT_AEAD_BACKEND_OPENSSL), CRYPT_AEAD_OK);
        uct_crypt_lane_rx_init(&rx, 64, 100, 4, CRYPT_AEAD_BACKEND_OPENSSL, lane_log);
        for (auto &s : senders) {
            uct_crypt_lane_rx_init(&s, 64, 100, 4, CRYPT_AEAD_BACKEND_OPENSSL, lane_log);
        }
    }
    void TearDown() override
    {
        uct_crypt_lane_rx_cleanup(&rx);
        for (auto &s : senders) {
            uct_crypt_lane_rx_cleanup(&s);
        }
    }
    void team(uint64_t id, const uint8_t *key = lane_key)
    {
        if (uct_crypt_lane_rx_team_add(&rx, id, 0, size, lane_key, 32) == 0) {
            for (uint32_t r = 0; r < size; ++r) {
                uct_crypt_lane_rx_team_add(&senders[r], id, r, size, key, 32);
            }
        }
    }
    /* what rank `rank` of team `id` sends to rank 0: header, body, tag */
    std::vector<uint8_t> chunk(uint64_t id, uint32_t rank, uint32_t flags,
                               uint64_t total, const std::string &body)
    {
        team(id);
        std::vector<uint8_t> v(sizeof(crypt_lane_chunk_hdr_t) + body.size() +
                               CRYPT_LANE_CHUNK_TAG_LEN);
        memcpy(v.data() + sizeof(crypt_lane_chunk_hdr_t), body.data(), body.size());
        const char *why = nullptr;
        EXPECT_EQ(uct_crypt_lane_chunk_seal(&senders[rank], id, 0, flags, total,
                                            v.data(), body.size(), &why), 0) << why;
        return v;
    }
    void feed(const std::vector<uint8_t> &c, const uint8_t *from = nullptr)
    {
        uct_crypt_lane_rx_chunk(&rx, c.data(), c.size(), from);
        EXPECT_EQ(uct_crypt_lane_rx_held(&rx), rx.buffered);
    }
    static const uint32_t size = 8;
    uct_crypt_lane_rx_t rx;
    uct_crypt_lane_rx_t senders[size];
};

} // namespace

TEST_F(crypt_lane_rx, chunks_reassembled_before_and_into_a_posted_receive)
{
    const uint32_t F = CRYPT_LANE_CHUNK_FIRST, L = CRYPT_LANE_CHUNK_LAST;
    char buf[10] = {}, buf2[5] = {};
    feed(chunk(7, 1, F, 10, "01234"));
    ASSERT_EQ(uct_crypt_lane_rx_recv(&rx, 7, 1, nullptr, buf, 10), 0);
    EXPECT_EQ(rx.buffered, 0u) << "the first half moved into the posted buffer";
    feed(chunk(7, 1, L, 10, "56789"));
    ASSERT_EQ(uct_crypt_lane_rx_recv(&rx, 7, 1, nullptr, buf, 10), 1);
    EXPECT_EQ(std::string(buf, 10), "0123456789");
    feed(chunk(7, 1, F | L, 5, "abcde"));
    EXPECT_EQ(rx.buffered, 5u);
    ASSERT_EQ(uct_crypt_lane_rx_recv(&rx, 7, 1, nullptr, buf2, 5), 1);
    EXPECT_EQ(std::string(buf2, 5), "abcde");
    EXPECT_TRUE(lane_failures.empty());
    EXPECT_EQ(rx.chunks_refused, 0u);
}

TEST_F(crypt_lane_rx, a_bad_chunk_fails_its_stream_only)
{
    const uint32_t F = CRYPT_LANE_CHUNK_FIRST, L = CRYPT_LANE_CHUNK_LAST;
    char buf[4];
    feed(chunk(1, 2, F, 4, "ab"));
    feed(chunk(1, 2, L, 4, "cde")); /* beyond its message */
    EXPECT_EQ(uct_crypt_lane_rx_recv(&rx, 1, 2, nullptr, buf, 4), -1);
    EXPECT_EQ(rx.buffered, 0u) << "a failed stream holds nothing";
    feed(chunk(1, 1, F | L, 4, "wxyz"));
    EXPECT_EQ(uct_crypt_lane_rx_recv(&rx, 1, 1, nullptr, buf, 4), 1);
    ASSERT_EQ(lane_failures.size(), 1u);
    EXPECT_EQ(lane_failures[0], "stream failed: a chunk beyond its message's length");
}

/* a chunk too short to name its stream fails none, and says so */
TEST_F(crypt_lane_rx, a_chunk_shorter_than_its_header_and_tag_names_no_stream)
{
    feed(std::vector<uint8_t>(sizeof(crypt_lane_chunk_hdr_t) +
                              CRYPT_LANE_CHUNK_TAG_LEN - 1, 0));
    ASSERT_EQ(lane_failures.size(), 1u);
    EXPECT_EQ(lane_failures[0], "refused: shorter than its header and tag");
    EXPECT_EQ(rx.num_streams, 0u);
    EXPECT_EQ(rx.chunks_refused, 1u);
}

TEST_F(crypt_lane_rx, bounds_on_messages_held_and_streams)
{
    const uint32_t FL = CRYPT_LANE_CHUNK_FIRST | CRYPT_LANE_CHUNK_LAST;
    feed(chunk(1, 1, FL, 65, std::string(65, 'm'))); /* above one message */
    feed(chunk(1, 2, FL, 60, std::string(60, 'a')));
    feed(chunk(1, 3, FL, 60, std::string(60, 'b'))); /* 120 held > 100 */
    EXPECT_EQ(rx.buffered, 60u);
    feed(chunk(1, 4, FL, 1, "c"));
    feed(chunk(1, 5, FL, 1, "d")); /* a fifth stream */
    EXPECT_EQ(rx.num_streams, 4u);
    ASSERT_EQ(lane_failures.size(), 3u);
    EXPECT_EQ(lane_failures[0], "stream failed: message longer than the lane allows");
    EXPECT_EQ(lane_failures[1], "stream failed: the lane holds all it may for receives not posted yet");
    EXPECT_EQ(lane_failures[2], "chunk: too many streams already");
}

TEST_F(crypt_lane_rx, a_stream_is_bound_to_the_peer_it_came_from)
{
    const uint32_t FL = CRYPT_LANE_CHUNK_FIRST | CRYPT_LANE_CHUNK_LAST;
    const uint8_t a[KEYEX_PUBLIC_KEY_LEN] = {1}, b[KEYEX_PUBLIC_KEY_LEN] = {2};
    char buf[1];
    feed(chunk(3, 1, FL, 1, "x"), a);
    feed(chunk(3, 1, FL, 1, "y"), b);
    EXPECT_EQ(uct_crypt_lane_rx_recv(&rx, 3, 1, a, buf, 1), -1);
    feed(chunk(3, 2, FL, 1, "z"), a);
    EXPECT_EQ(uct_crypt_lane_rx_recv(&rx, 3, 2, b, buf, 1), -1)
        << "received as if from another peer";
    EXPECT_EQ(lane_failures.size(), 2u);
}

/* What nobody of the team sent, or sent to another rank, or sent before,
 * is dropped and counted: no stream is made, failed or written, and the
 * honest message that follows arrives whole (issue 29 item 4) */
TEST_F(crypt_lane_rx, what_no_rank_of_the_team_sent_to_us_is_dropped_and_counted)
{
    const uint32_t FL = CRYPT_LANE_CHUNK_FIRST | CRYPT_LANE_CHUNK_LAST;
    char buf[4] = {};
    auto honest = chunk(5, 3, FL, 4, "abcd");
    std::vector<std::vector<uint8_t>> forged;
    for (size_t byte : {size_t(0), size_t(12), size_t(16), size_t(24),
                        size_t(32), sizeof(crypt_lane_chunk_hdr_t),
                        honest.size() - 1}) {
        forged.push_back(honest);
        forged.back()[byte] ^= 1; /* team, dst, sequence, total, flags, body, tag */
    }
    /* a key holder of no team of ours: the same team id under its key */
    uct_crypt_lane_rx_t stranger;
    uct_crypt_lane_rx_init(&stranger, 64, 100, 4, CRYPT_AEAD_BACKEND_OPENSSL, lane_log);
    const uint8_t other_key[32] = {0x77};
    ASSERT_EQ(uct_crypt_lane_rx_team_add(&stranger, 5, 3, size, other_key, 32), 0);
    std::vector<uint8_t> theirs(honest.size());
    memcpy(theirs.data() + sizeof(crypt_lane_chunk_hdr_t), "abcd", 4);
    const char *why;
    ASSERT_EQ(uct_crypt_lane_chunk_seal(&stranger, 5, 0, FL, 4, theirs.data(), 4, &why), 0);
    uct_crypt_lane_rx_cleanup(&stranger);
    forged.push_back(theirs);
    /* a chunk of a team we are not in, and one of ours to another rank */
    uct_crypt_lane_rx_t elsewhere;
    uct_crypt_lane_rx_init(&elsewhere, 64, 100, 4, CRYPT_AEAD_BACKEND_OPENSSL, lane_log);
    ASSERT_EQ(uct_crypt_lane_rx_team_add(&elsewhere, 6, 3, size, lane_key, 32), 0);
    ASSERT_EQ(uct_crypt_lane_rx_team_add(&elsewhere, 5, 3, size, lane_key, 32), 0);
    for (uint64_t t : {6, 5}) {
        std::vector<uint8_t> c(honest.size());
        ASSERT_EQ(uct_crypt_lane_chunk_seal(&elsewhere, t, t == 6 ? 0 : 4, FL, 4,
                                            c.data(), 4, &why), 0);
        forged.push_back(c);
    }
    uct_crypt_lane_rx_cleanup(&elsewhere);

    for (auto &f : forged) {
        feed(f);
    }
    EXPECT_EQ(rx.chunks_refused, forged.size());
    EXPECT_EQ(rx.num_streams, 0u) << "a stranger made a stream";
    EXPECT_EQ(rx.bytes_received, 0u);
    feed(honest);
    ASSERT_EQ(uct_crypt_lane_rx_recv(&rx, 5, 3, nullptr, buf, 4), 1);
    EXPECT_EQ(std::string(buf, 4), "abcd");
    feed(honest); /* again: a replay */
    EXPECT_EQ(rx.chunks_refused, forged.size() + 1);
    EXPECT_EQ(rx.buffered, 0u) << "a replay was kept";
    /* each told to the log as a refusal (the lane limits how often it
     * logs them, as the wire does), none as a stream's failure */
    EXPECT_EQ(lane_failures.size(), rx.chunks_refused);
    for (auto &f : lane_failures) {
        EXPECT_EQ(f.rfind("refused: ", 0), 0u) << "not a refusal: " << f;
    }
}

/* An authentic chunk after a gap shows that chunks were lost (by the
 * network, or by someone on it): the stream cannot go on and fails */
TEST_F(crypt_lane_rx, a_chunk_after_lost_ones_fails_the_stream)
{
    const uint32_t F = CRYPT_LANE_CHUNK_FIRST, L = CRYPT_LANE_CHUNK_LAST;
    char buf[4];
    feed(chunk(2, 1, F, 4, "ab"));
    chunk(2, 1, 0, 4, "c"); /* sealed, never delivered */
    feed(chunk(2, 1, L, 4, "d"));
    EXPECT_EQ(uct_crypt_lane_rx_recv(&rx, 2, 1, nullptr, buf, 4), -1);
    ASSERT_EQ(lane_failures.size(), 1u);
    EXPECT_EQ(lane_failures[0], "stream failed: chunks before it were lost");
}

/* A team removed takes its streams and what they hold with it; its
 * chunks are then a stranger's */
TEST_F(crypt_lane_rx, a_team_removed_frees_its_streams)
{
    const uint32_t FL = CRYPT_LANE_CHUNK_FIRST | CRYPT_LANE_CHUNK_LAST;
    feed(chunk(4, 1, FL, 10, "0123456789"));
    feed(chunk(4, 2, FL, 3, "abc"));
    auto late = chunk(4, 1, FL, 1, "x");
    EXPECT_EQ(rx.num_streams, 2u);
    EXPECT_EQ(rx.buffered, 13u);
    uct_crypt_lane_rx_team_remove(&rx, 4);
    EXPECT_EQ(rx.num_streams, 0u);
    EXPECT_EQ(rx.buffered, 0u);
    feed(late);
    EXPECT_EQ(rx.chunks_refused, 1u);
    char buf[1];
    EXPECT_EQ(uct_crypt_lane_rx_recv(&rx, 4, 1, nullptr, buf, 1), -1);
}

TEST_F(crypt_lane_rx, teams_the_nonce_cannot_hold_are_refused)
{
    uct_crypt_lane_rx_t lane;
    uct_crypt_lane_rx_init(&lane, 64, 100, 4, CRYPT_AEAD_BACKEND_OPENSSL, lane_log);
    EXPECT_EQ(uct_crypt_lane_rx_team_add(&lane, 1, 0, 0, lane_key, 32), -1);
    EXPECT_EQ(uct_crypt_lane_rx_team_add(&lane, 1, 2, 2, lane_key, 32), -1);
    EXPECT_EQ(uct_crypt_lane_rx_team_add(&lane, 1, 0, (1u << 24) + 1, lane_key, 32), -1);
    EXPECT_EQ(uct_crypt_lane_rx_team_add(&lane, 1, 0, 2, lane_key, 32), 0);
    EXPECT_EQ(uct_crypt_lane_rx_team_add(&lane, 1, 0, 2, lane_key, 32), -1)
            << "one id, two teams";
    uct_crypt_lane_rx_cleanup(&lane);
}

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

/* ---- records (record/record_input.c) ----------------------------------- */

extern "C" {
#include "uct_crypt/record/record_input.h"
}

namespace {

class crypt_record_input : public ::testing::Test {
protected:
    void SetUp() override
    {
        static const uint8_t raw[32] = {5, 4, 3};
        ASSERT_EQ(crypt_aead_init(CRYPT_AEAD_BACKEND_OPENSSL), CRYPT_AEAD_OK);
        ASSERT_EQ(crypt_aead_key_init(&key, CRYPT_AEAD_BACKEND_OPENSSL, raw, 32),
                  CRYPT_AEAD_OK);
        memset(sender, 0x51, sizeof(sender));
    }
    void TearDown() override
    {
        crypt_aead_key_cleanup(&key);
    }
    /* a record as uct_crypt_record_seal writes it, sealed under `key` */
    std::vector<uint8_t> seal(uint8_t type, uint64_t sequence, uint8_t am_id,
                              size_t payload_len, uint16_t flags = 0,
                              uint32_t generation = 0)
    {
        size_t hdr_len = CRYPT_RECORD_HDR_LEN +
                         ((type == CRYPT_RECORD_HELLO) ? CRYPT_HELLO_EXTRA_LEN : 0);
        std::vector<uint8_t> r(hdr_len + CRYPT_RECORD_AM_ID_LEN + payload_len +
                               CRYPT_AEAD_TAG_LEN, 0x77);
        crypt_record_hdr_t hdr = {};
        hdr.type     = type;
        hdr.flags    = htole16(flags);
        hdr.flow_id  = htole64(0x42);
        hdr.sequence = htole64(sequence);
        memcpy(r.data(), &hdr, sizeof(hdr));
        if (type == CRYPT_RECORD_HELLO) {
            memcpy(r.data() + CRYPT_RECORD_HDR_LEN, sender, sizeof(sender));
        }
        r[hdr_len] = am_id;
        EXPECT_TRUE(uct_crypt_record_seal_in_place(&key, prefix, generation,
                                                   r.data(), hdr_len, payload_len));
        return r;
    }
    crypt_aead_key_t key;
    const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {1, 2, 3, 4};
    uint8_t sender[KEYEX_PUBLIC_KEY_LEN];
    uct_crypt_record_in_t rec;
};

} // namespace

TEST_F(crypt_record_input, honest_hello_then_data_open_and_pass)
{
    std::vector<uint8_t> hello = seal(CRYPT_RECORD_HELLO, 0, 7, 10);
    ASSERT_EQ(uct_crypt_record_parse(hello.data(), hello.size(), &rec),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(rec.flow_id, 0x42u);
    EXPECT_EQ(rec.payload_len, 10u);
    ASSERT_NE(rec.sender_public, nullptr);
    EXPECT_EQ(memcmp(rec.sender_public, sender, sizeof(sender)), 0);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, nullptr), UCT_CRYPT_RECORD_PASS);
    ASSERT_EQ(uct_crypt_record_open(&key, prefix, &rec), CRYPT_AEAD_OK);
    EXPECT_EQ(rec.sealed[0], 7);
    EXPECT_EQ(rec.sealed[1], 0x77);
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 0), UCT_CRYPT_RECORD_PASS);

    std::vector<uint8_t> data = seal(CRYPT_RECORD_DATA, 1, 3, 0);
    uct_crypt_record_flow_state_t flow = {sender, 1, 0};
    ASSERT_EQ(uct_crypt_record_parse(data.data(), data.size(), &rec),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(rec.sender_public, nullptr);
    EXPECT_EQ(uct_crypt_record_admit(&rec, &flow, sender), UCT_CRYPT_RECORD_PASS);
    ASSERT_EQ(uct_crypt_record_open(&key, prefix, &rec), CRYPT_AEAD_OK);
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 1), UCT_CRYPT_RECORD_PASS);
}

/* refused on the bytes alone, before any key is looked for */
TEST_F(crypt_record_input, malformed_before_the_tag)
{
    std::vector<uint8_t> r = seal(CRYPT_RECORD_DATA, 1, 3, 0);
    EXPECT_EQ(uct_crypt_record_parse(r.data(), r.size() - 1, &rec),
              UCT_CRYPT_FAIL_MALFORMED); /* shorter than header, id, tag */
    EXPECT_EQ(uct_crypt_record_parse(r.data(), r.size(), &rec), UCT_CRYPT_RECORD_PASS);

    std::vector<uint8_t> hello = seal(CRYPT_RECORD_HELLO, 0, 3, 0);
    EXPECT_EQ(uct_crypt_record_parse(hello.data(), hello.size() - 1, &rec),
              UCT_CRYPT_FAIL_MALFORMED); /* a HELLO without its whole key */

    EXPECT_EQ(uct_crypt_record_parse(seal(CRYPT_RECORD_HELLO, 1, 3, 0).data(),
                                     hello.size(), &rec),
              UCT_CRYPT_FAIL_MALFORMED); /* a HELLO is sequence 0 ... */
    EXPECT_EQ(uct_crypt_record_parse(seal(CRYPT_RECORD_HELLO, 0, 3, 0, 0, 1).data(),
                                     hello.size(), &rec),
              UCT_CRYPT_FAIL_MALFORMED); /* ... under the first keys */
    EXPECT_EQ(uct_crypt_record_parse(seal(CRYPT_RECORD_DATA, 1, 3, 0, 2).data(),
                                     r.size(), &rec),
              UCT_CRYPT_FAIL_MALFORMED); /* a reserved flag */
    EXPECT_EQ(uct_crypt_record_parse(seal(3, 1, 3, 0).data(), r.size(), &rec),
              UCT_CRYPT_FAIL_MALFORMED); /* no such type */
}

/* what the flow and the connection allow, still before the tag */
TEST_F(crypt_record_input, admitted_by_flow_and_connection)
{
    static const uint8_t other[KEYEX_PUBLIC_KEY_LEN] = {9};
    std::vector<uint8_t> hello = seal(CRYPT_RECORD_HELLO, 0, 3, 0);
    std::vector<uint8_t> data  = seal(CRYPT_RECORD_DATA, 4, 3, 0);
    uct_crypt_record_flow_state_t flow = {sender, 5, 0};

    ASSERT_EQ(uct_crypt_record_parse(hello.data(), hello.size(), &rec),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(uct_crypt_record_admit(&rec, &flow, nullptr), UCT_CRYPT_FAIL_REPLAY);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, other), UCT_CRYPT_FAIL_HANDSHAKE);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, sender), UCT_CRYPT_RECORD_PASS);

    ASSERT_EQ(uct_crypt_record_parse(data.data(), data.size(), &rec),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, nullptr), UCT_CRYPT_FAIL_UNKNOWN_FLOW);
    EXPECT_EQ(uct_crypt_record_admit(&rec, &flow, other), UCT_CRYPT_FAIL_UNKNOWN_FLOW);
    EXPECT_EQ(uct_crypt_record_admit(&rec, &flow, sender), UCT_CRYPT_FAIL_REPLAY);
    flow.next_sequence = 4;
    EXPECT_EQ(uct_crypt_record_admit(&rec, &flow, sender), UCT_CRYPT_RECORD_PASS);
    flow.failed = 1;
    EXPECT_EQ(uct_crypt_record_admit(&rec, &flow, sender), UCT_CRYPT_FAIL_FLOW_FAILED);
}

/* On the own wire a HELLO names no key (zeros): the connection proved
 * it. One that names a key must name the connection's. */
TEST_F(crypt_record_input, own_wire_hello_names_no_key)
{
    static const uint8_t other[KEYEX_PUBLIC_KEY_LEN] = {9};
    const std::vector<uint8_t> proven(sender, sender + sizeof(sender));
    memset(sender, 0, sizeof(sender));
    std::vector<uint8_t> hello = seal(CRYPT_RECORD_HELLO, 0, 3, 0);

    ASSERT_EQ(uct_crypt_record_parse(hello.data(), hello.size(), &rec),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, proven.data()),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, other), UCT_CRYPT_RECORD_PASS)
        << "names none: the caller keys it from the connection's key";
    memcpy(sender, other, sizeof(sender));
    hello = seal(CRYPT_RECORD_HELLO, 0, 3, 0);
    ASSERT_EQ(uct_crypt_record_parse(hello.data(), hello.size(), &rec),
              UCT_CRYPT_RECORD_PASS);
    EXPECT_EQ(uct_crypt_record_admit(&rec, nullptr, proven.data()),
              UCT_CRYPT_FAIL_HANDSHAKE) << "names another key than the proven one";
}

/* the header carries 8 bits of the generation: the next one after 255 is 0 */
TEST_F(crypt_record_input, key_generation_choice_wraps)
{
    rec = uct_crypt_record_in_t();
    rec.hdr.key_generation = 0;
    EXPECT_EQ(uct_crypt_record_key_choice(&rec, 256), UCT_CRYPT_RECORD_KEY_CURRENT);
    EXPECT_EQ(uct_crypt_record_key_choice(&rec, 255), UCT_CRYPT_RECORD_KEY_NEXT);
    EXPECT_EQ(uct_crypt_record_key_choice(&rec, 254), UCT_CRYPT_RECORD_KEY_NONE);
    EXPECT_EQ(uct_crypt_record_key_choice(&rec, 1), UCT_CRYPT_RECORD_KEY_NONE);
}

/* authenticated but not to be delivered */
TEST_F(crypt_record_input, opened_but_out_of_sequence_or_foreign_id)
{
    std::vector<uint8_t> r;
    auto opened = [&](std::vector<uint8_t> bytes) {
        r = bytes;
        EXPECT_EQ(uct_crypt_record_parse(r.data(), r.size(), &rec), UCT_CRYPT_RECORD_PASS);
        EXPECT_EQ(uct_crypt_record_open(&key, prefix, &rec), CRYPT_AEAD_OK);
    };

    opened(seal(CRYPT_RECORD_DATA, 6, 3, 4));
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 5), UCT_CRYPT_FAIL_REORDER);
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 6), UCT_CRYPT_RECORD_PASS);
    opened(seal(CRYPT_RECORD_DATA, 6, UCT_CRYPT_RECORD_AM_ID_LIMIT, 4));
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 6), UCT_CRYPT_FAIL_MALFORMED);
    opened(seal(CRYPT_RECORD_DATA, 6, 0, 4, CRYPT_RECORD_FLAG_CONTROL));
    EXPECT_TRUE(rec.control);
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 6), UCT_CRYPT_RECORD_PASS);
    opened(seal(CRYPT_RECORD_DATA, 6, 1, 4, CRYPT_RECORD_FLAG_CONTROL));
    EXPECT_EQ(uct_crypt_record_check_opened(&rec, 6), UCT_CRYPT_FAIL_MALFORMED);
}

/* every byte is authenticated: the header through the AAD, the length too */
TEST_F(crypt_record_input, a_changed_byte_or_length_does_not_open)
{
    std::vector<uint8_t> honest = seal(CRYPT_RECORD_DATA, 9, 3, 12);
    for (size_t i = 0; i < honest.size(); ++i) {
        if (i == offsetof(crypt_record_hdr_t, key_generation)) {
            continue; /* (chooses the key: another generation's does not open) */
        }
        std::vector<uint8_t> r = honest;
        r[i] ^= 0x01;
        if (uct_crypt_record_parse(r.data(), r.size(), &rec) == UCT_CRYPT_RECORD_PASS) {
            EXPECT_NE(uct_crypt_record_open(&key, prefix, &rec), CRYPT_AEAD_OK)
                << "byte " << i;
        }
    }
    std::vector<uint8_t> r = honest;
    r.resize(r.size() - 1);
    ASSERT_EQ(uct_crypt_record_parse(r.data(), r.size(), &rec), UCT_CRYPT_RECORD_PASS);
    EXPECT_NE(uct_crypt_record_open(&key, prefix, &rec), CRYPT_AEAD_OK);
}

/* ---- UCX_TLS and UCX_CRYPT_TLS (base/tls_words.c) -------------------- */

extern "C" {
#include "uct_crypt/base/tls_words.h"
}

namespace {

/* "UCX_TLS|UCX_CRYPT_TLS" a program runs with; "-" for one left as it is */
std::string tls_env(const char *ucx_tls, const char *crypt_tls, int need_aux = 0)
{
    uct_crypt_tls_env_t env;
    uct_crypt_tls_env(ucx_tls, crypt_tls, need_aux, &env);
    return std::string(env.set_ucx_tls ? env.ucx_tls : "-") + "|" +
           (env.set_crypt_tls ? env.crypt_tls : "-");
}

std::string tls_roles(const char *source)
{
    char data[UCT_CRYPT_TLS_MAX], aux[UCT_CRYPT_TLS_MAX];
    uct_crypt_tls_roles(source, data, aux, sizeof(data));
    return std::string(data) + "|" + aux;
}

} // namespace

TEST(crypt_tls_words, network_names_beside_crypt_move_to_crypt_tls)
{
    EXPECT_EQ(tls_env("crypt,tcp", nullptr), "crypt|tcp");
    EXPECT_EQ(tls_env("self,sm,crypt,\\tcp", nullptr), "self,sm,crypt|tcp");
    EXPECT_EQ(tls_env("crypt,tcp", "rc"), "crypt,crypt_aux:aux|-")
        << "a UCX_CRYPT_TLS of the user's stands";
    EXPECT_EQ(tls_env("crypt", "tcp"), "-|-");
}

TEST(crypt_tls_words, an_inner_that_needs_an_aux_lane_gets_crypt_aux)
{
    EXPECT_EQ(tls_env("crypt,rc", nullptr), "crypt,crypt_aux:aux|rc");
    EXPECT_EQ(tls_env("crypt", "dc_x"), "crypt,crypt_aux:aux|-");
    EXPECT_EQ(tls_env("crypt,ud:aux,rc_v", nullptr), "crypt,crypt_aux:aux|ud:aux,rc_v");
    EXPECT_EQ(tls_env("crypt,crypt_aux:aux", "rc"), "-|-") << "named already";
    EXPECT_EQ(tls_env("crypt", "ud"), "-|-") << "ud connects to an iface";
    EXPECT_EQ(tls_env("crypt", nullptr, 1), "crypt,crypt_aux:aux|-");
}

/* UCP's own aliases of intra-node transports (ucp_context.c,
 * ucp_tl_aliases: mm, sm, shm, cuda, rocm) and their members stay UCP's:
 * none is a network for crypt to wrap */
TEST(crypt_tls_words, ucp_intra_node_aliases_stay_with_ucp)
{
    EXPECT_EQ(tls_env("crypt,mm", nullptr), "-|-");
    EXPECT_EQ(tls_env("self,mm,crypt,tcp", nullptr), "self,mm,crypt|tcp");
    EXPECT_EQ(tls_env("crypt,rocm_gdr,cuda", nullptr), "-|-");
    EXPECT_EQ(tls_roles("mm,sm,shm,rocm_gdr,tcp"), ",tcp|");
}

TEST(crypt_tls_words, left_alone_without_crypt)
{
    EXPECT_EQ(tls_env(nullptr, nullptr), "-|-") << "unset: every transport";
    EXPECT_EQ(tls_env("^ib", "rc"), "-|-");
    EXPECT_EQ(tls_env("tcp", nullptr), "-|-") << "fail closed: the plugin hides tcp";
    EXPECT_EQ(tls_env("self,sm", nullptr), "-|-");
}

TEST(crypt_tls_words, roles_of_aliases_and_aux_words)
{
    EXPECT_EQ(tls_roles("rc"), ",rc_mlx5,rc_verbs|,ud_mlx5,ud_verbs");
    EXPECT_EQ(tls_roles("tcp,ud:aux"), ",tcp|,ud_mlx5,ud_verbs");
    EXPECT_EQ(tls_roles("crypt,self,sm,cuda_copy"), "|");
    EXPECT_EQ(tls_roles("^tcp"), "|");
    EXPECT_EQ(tls_roles(nullptr), "|");
    EXPECT_TRUE(uct_crypt_tls_in_list(",rc_mlx5,rc_verbs", "rc_verbs"));
    EXPECT_FALSE(uct_crypt_tls_in_list(",rc_mlx5,rc_verbs", "rc"));
    EXPECT_FALSE(uct_crypt_tls_in_list(",rc_mlx5", "rc_mlx"));
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

std::vector<sockaddr_storage> addresses(const std::vector<const char*> &ips)
{
    std::vector<sockaddr_storage> out(ips.size());

    for (size_t i = 0; i < ips.size(); ++i) {
        sockaddr_in *in = (sockaddr_in*)&out[i];

        memset(&out[i], 0, sizeof(out[i]));
        in->sin_family = AF_INET;
        in->sin_port   = htons((uint16_t)(40000 + i)); /* ports differ */
        inet_pton(AF_INET, ips[i], &in->sin_addr);
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

/* `rate` DHs a second, one second's worth at once; then under load until
 * the bucket refills */
TEST_F(crypt_admit_cookies, dhs_past_the_rate_wait_for_a_cookie)
{
    uct_crypt_cookies_init(&cookies, 3, 100.0);
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 100.0));
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 100.0));
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 100.0));
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 100.0));
    EXPECT_EQ(0, uct_crypt_cookies_dh_allowed(&cookies, 100.1));
    EXPECT_EQ(1, uct_crypt_cookies_dh_allowed(&cookies, 100.5));
    /* a long quiet gives one second's worth, not more */
    int allowed = 0;
    for (int i = 0; i < 10; ++i) {
        allowed += uct_crypt_cookies_dh_allowed(&cookies, 200.0);
    }
    EXPECT_EQ(3, allowed);

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
