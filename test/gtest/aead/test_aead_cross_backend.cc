/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Seal with one backend, open with the other: random sizes 0..1 MiB and
 * random associated data. Two independent implementations agreeing on
 * thousands of random inputs is the check that neither is subtly wrong
 * beyond the known-answer vectors (partial blocks, long AAD, large
 * buffers).
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"
#include "common/test_util.h"

#include <gtest/gtest.h>

using test_util::bytes;

#ifdef HAVE_IPSEC_MB

namespace {

class aead_cross_backend : public ::testing::TestWithParam<unsigned> {
protected:
    void SetUp() override
    {
        bytes raw = test_util::pattern(GetParam(), 7);
        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_key_init(&imb, CRYPT_AEAD_BACKEND_IPSEC_MB,
                                                     raw.data(), raw.size()));
        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_key_init(&ossl, CRYPT_AEAD_BACKEND_OPENSSL,
                                                     raw.data(), raw.size()));
    }

    void TearDown() override
    {
        crypt_aead_key_cleanup(&imb);
        crypt_aead_key_cleanup(&ossl);
    }

    /* seal with `a`, open with `b`, check the plaintext comes back */
    void round_trip(crypt_aead_key_t *a, crypt_aead_key_t *b, size_t len,
                    size_t aad_len, uint32_t seed)
    {
        bytes pt = test_util::pattern(len, seed), aad = test_util::pattern(aad_len, ~seed),
              nonce = test_util::pattern(CRYPT_AEAD_NONCE_LEN, seed * 31),
              ct(len), back(len);
        uint8_t tag_a[CRYPT_AEAD_TAG_LEN], tag_b[CRYPT_AEAD_TAG_LEN];

        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_seal(a, nonce.data(), aad.data(), aad_len,
                                                 pt.data(), len, ct.data(), tag_a));
        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_open(b, nonce.data(), aad.data(), aad_len,
                                                 ct.data(), len, back.data(), tag_a))
                << "len " << len << " aad " << aad_len;
        ASSERT_TRUE(pt == back) << "len " << len;

        /* both produce the same ciphertext and tag */
        bytes ct_b(len);
        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_seal(b, nonce.data(), aad.data(), aad_len,
                                                 pt.data(), len, ct_b.data(), tag_b));
        ASSERT_TRUE(ct == ct_b);
        ASSERT_EQ(0, memcmp(tag_a, tag_b, sizeof(tag_a)));
    }

    crypt_aead_key_t imb, ossl;
};

TEST_P(aead_cross_backend, random_sizes_and_aad_agree)
{
    std::mt19937 gen(GetParam());
    /* the edges first: empty, sub-block, block multiples and off-by-ones */
    const size_t edges[] = {0, 1, 15, 16, 17, 63, 64, 255, 256, 257, 4095, 4096,
                            65535, 65536, 1u << 20};
    for (size_t len : edges) {
        round_trip(&imb, &ossl, len, len % 37, (uint32_t)len);
        round_trip(&ossl, &imb, len, len % 41, (uint32_t)len + 1);
    }
    for (int i = 0; i < 200; ++i) {
        size_t len = (i % 10 == 0) ? (gen() % (1u << 20)) : (gen() % 20000);
        size_t aad_len = gen() % 600;
        if (i % 2) {
            round_trip(&imb, &ossl, len, aad_len, (uint32_t)i);
        } else {
            round_trip(&ossl, &imb, len, aad_len, (uint32_t)i);
        }
    }
}

TEST_P(aead_cross_backend, forgery_from_one_is_refused_by_other)
{
    bytes pt = test_util::pattern(1000, 3), ct(1000), back(1000);
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN] = {1, 2, 3};
    uint8_t tag[CRYPT_AEAD_TAG_LEN];

    ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_seal(&imb, nonce, "hdr", 3, pt.data(), 1000,
                                             ct.data(), tag));
    ct[999] ^= 0x80;
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, crypt_aead_open(&ossl, nonce, "hdr", 3, ct.data(),
                                                   1000, back.data(), tag));
}

} // namespace

INSTANTIATE_TEST_SUITE_P(key_sizes, aead_cross_backend,
                         ::testing::Values(CRYPT_AEAD_KEY_LEN_128, CRYPT_AEAD_KEY_LEN_256),
                         [](const ::testing::TestParamInfo<unsigned> &info) {
                             return "aes" + std::to_string(info.param * 8);
                         });

#endif /* HAVE_IPSEC_MB */
