/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The segment stream (Hoang et al. 2015 STREAM): every way an attacker can
 * rearrange segments must fail to open, and a well-formed stream opens.
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"
#include "common/aead_backends.h"
#include "common/test_util.h"

#include <gtest/gtest.h>

using test_util::bytes;

namespace {

/* A receiver that opens segments strictly in order and knows whether the
 * stream ended properly, as the bulk engine's target does: the caller says
 * where it believes a segment sits (is_last from its framing); a lie about
 * that fails authentication, and a failure poisons the stream. */
struct stream_reader {
    crypt_aead_key_t *key;
    const uint8_t    *prefix;
    uint32_t         next_index = 0;
    int              finished   = 0;  /* the last segment was opened */
    int              failed     = 0;

    crypt_aead_status_t open(int is_last, const void *aad, size_t aad_len,
                             const void *in, size_t len, void *out,
                             const uint8_t tag[CRYPT_AEAD_TAG_LEN])
    {
        if (finished || failed) {
            /* after the last: an extension; after a failure: a splice */
            failed = 1;
            return CRYPT_AEAD_ERR_ORDER;
        }
        crypt_aead_status_t status =
                crypt_stream_open_segment(key, prefix, next_index, is_last, aad,
                                          aad_len, in, len, out, tag);
        if (status != CRYPT_AEAD_OK) {
            failed = 1;
            return status;
        }
        ++next_index;
        finished = !!is_last;
        return CRYPT_AEAD_OK;
    }

    /* a stream that ends without its last segment was truncated */
    crypt_aead_status_t finish() const
    {
        return failed ? CRYPT_AEAD_ERR_AUTH :
               finished ? CRYPT_AEAD_OK : CRYPT_AEAD_ERR_ORDER;
    }
};

struct sealed_segment {
    bytes   ciphertext;
    uint8_t tag[CRYPT_AEAD_TAG_LEN];
    int     is_last;
};

class aead_stream : public ::testing::TestWithParam<crypt_aead_backend_t> {
protected:
    void SetUp() override
    {
        bytes raw = test_util::pattern(16, 99);
        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_key_init(&key, GetParam(), raw.data(), 16));
        message = test_util::pattern(10 * 1000 + 123, 5);
        segments = seal(message, prefix, 1000);
    }

    void TearDown() override { crypt_aead_key_cleanup(&key); }

    std::vector<sealed_segment> seal(const bytes &msg, const uint8_t *pfx,
                                     size_t seg_len)
    {
        std::vector<sealed_segment> out;
        size_t count = (msg.size() + seg_len - 1) / seg_len;
        count = count ? count : 1;
        /* seal back to front: segments are independent given their index */
        out.resize(count);
        for (size_t i = count; i-- > 0;) {
            size_t off = i * seg_len, len = std::min(seg_len, msg.size() - off);
            sealed_segment &s = out[i];
            s.ciphertext.resize(len);
            s.is_last = (i == count - 1);
            EXPECT_EQ(CRYPT_AEAD_OK,
                      crypt_stream_seal_segment(&key, pfx, (uint32_t)i, s.is_last,
                                                "ad", 2, msg.data() + off, len,
                                                s.ciphertext.data(), s.tag));
        }
        return out;
    }

    /* Open as a receiver would, following the framing's is_last claim;
     * returns OK only if every segment opened and the stream finished. */
    crypt_aead_status_t read(const std::vector<sealed_segment> &segs, bytes *out,
                             const uint8_t *pfx = nullptr)
    {
        stream_reader reader = {&key, pfx ? pfx : prefix};
        out->clear();
        for (const sealed_segment &s : segs) {
            bytes pt(s.ciphertext.size());
            crypt_aead_status_t st = reader.open(s.is_last, "ad", 2,
                                                 s.ciphertext.data(), pt.size(),
                                                 pt.data(), s.tag);
            if (st != CRYPT_AEAD_OK) {
                return st;
            }
            out->insert(out->end(), pt.begin(), pt.end());
        }
        return reader.finish();
    }

    crypt_aead_key_t key;
    const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {0, 0, 0, 0, 0, 0, 42};
    bytes message;
    std::vector<sealed_segment> segments;
};

TEST_P(aead_stream, intact_stream_opens)
{
    bytes out;
    ASSERT_EQ(11u, segments.size());
    EXPECT_EQ(CRYPT_AEAD_OK, read(segments, &out));
    EXPECT_TRUE(out == message);
}

TEST_P(aead_stream, single_segment_and_empty_streams_open)
{
    for (size_t len : {0ul, 1ul, 999ul, 1000ul}) {
        bytes msg = test_util::pattern(len, 1), out;
        auto segs = seal(msg, prefix, 1000);
        ASSERT_EQ(1u, segs.size());
        EXPECT_EQ(CRYPT_AEAD_OK, read(segs, &out)) << len;
        EXPECT_TRUE(out == msg);
    }
}

TEST_P(aead_stream, reordered_segments_fail)
{
    auto segs = segments;
    std::swap(segs[2], segs[3]);
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, read(segs, &out));
}

TEST_P(aead_stream, dropped_segment_fails)
{
    auto segs = segments;
    segs.erase(segs.begin() + 4);
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, read(segs, &out));
}

TEST_P(aead_stream, truncated_stream_fails)
{
    /* drop the tail: every remaining segment authenticates, but the stream
     * never reaches its last segment */
    auto segs = segments;
    segs.resize(segs.size() - 1);
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_ORDER, read(segs, &out));
}

TEST_P(aead_stream, truncation_with_forged_last_flag_fails)
{
    auto segs = segments;
    segs.resize(5);
    segs.back().is_last = 1; /* the attacker rewrites the framing */
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, read(segs, &out));
}

TEST_P(aead_stream, flipped_last_flag_fails)
{
    auto segs = segments;
    segs.back().is_last = 0;
    bytes out;
    EXPECT_NE(CRYPT_AEAD_OK, read(segs, &out));
}

TEST_P(aead_stream, duplicated_segment_fails)
{
    auto segs = segments;
    segs.insert(segs.begin() + 3, segs[2]);
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, read(segs, &out));
}

TEST_P(aead_stream, extended_stream_fails)
{
    /* a segment appended after the last one, even a genuine one */
    auto segs = segments;
    segs.push_back(segs[0]);
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_ORDER, read(segs, &out));
}

TEST_P(aead_stream, segment_spliced_from_another_message_fails)
{
    const uint8_t other_prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {0, 0, 0, 0, 0, 0, 43};
    auto other = seal(message, other_prefix, 1000);
    auto segs = segments;
    segs[6] = other[6]; /* same position, same key, other message */
    bytes out;
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, read(segs, &out));
}

TEST_P(aead_stream, nonce_layout_is_prefix_index_flag)
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    const uint8_t pfx[CRYPT_STREAM_NONCE_PREFIX_LEN] = {1, 2, 3, 4, 5, 6, 7};
    crypt_stream_nonce(nonce, pfx, 0x0a0b0c0d, 1);
    EXPECT_EQ("01020304050607" "0a0b0c0d" "01", test_util::to_hex(nonce, sizeof(nonce)));
    crypt_stream_nonce(nonce, pfx, 5, 0);
    EXPECT_EQ("01020304050607" "00000005" "00", test_util::to_hex(nonce, sizeof(nonce)));
}

} // namespace

CRYPT_TEST_ALL_BACKENDS(aead_stream);

TEST(aead_record, nonce_is_prefix_then_big_endian_sequence)
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {0xaa, 0xbb, 0xcc, 0xdd};
    crypt_record_nonce(nonce, prefix, 0x0102030405060708ull);
    EXPECT_EQ("aabbccdd0102030405060708", test_util::to_hex(nonce, sizeof(nonce)));
}

TEST(aead_record, sequence_number_binds_the_record)
{
    crypt_aead_key_t key;
    bytes raw = test_util::pattern(32, 1), msg = test_util::pattern(100, 2), ct(100);
    const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {9, 9, 9, 9};
    uint8_t tag[CRYPT_AEAD_TAG_LEN];

    ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_key_init(&key, CRYPT_AEAD_BACKEND_AUTO,
                                                 raw.data(), 32));
    ASSERT_EQ(CRYPT_AEAD_OK, crypt_record_seal(&key, prefix, 7, "h", 1, msg.data(),
                                               100, ct.data(), tag));
    bytes out(100);
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, crypt_record_open(&key, prefix, 8, "h", 1,
                                                     ct.data(), 100, out.data(), tag));
    EXPECT_EQ(CRYPT_AEAD_OK, crypt_record_open(&key, prefix, 7, "h", 1, ct.data(),
                                               100, out.data(), tag));
    EXPECT_TRUE(out == msg);
    crypt_aead_key_cleanup(&key);
}
