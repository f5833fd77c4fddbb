/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the transport reads from outside the process, without UCX
 * (src/uct_crypt/bulk/bulk_input.c, lane/lane_rx.c,
 * record/record_input.c, base/tls_words.c): the calibration profile, bulk
 * control records, the range check that stands between a peer and our
 * memory, lane chunk reassembly, records before and after their tag, the
 * words of UCX_TLS (the wire's: test_crypt_wire_input.cc). The fuzz targets
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

