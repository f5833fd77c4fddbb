/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Known-answer tests for AES-GCM on every backend.
 *
 * Vectors: McGrew & Viega, "The Galois/Counter Mode of Operation (GCM)",
 * Appendix B test cases 1-4 (AES-128) and 13-16 (AES-256), the vectors NIST
 * publishes with SP 800-38D; plus NIST CAVP gcmEncryptExtIV128.rsp
 * [Keylen=128, IVlen=96, PTlen=0, AADlen=0, Taglen=128] Count=0.
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"
#include "common/aead_backends.h"
#include "common/test_util.h"

#include <gtest/gtest.h>

using test_util::bytes;
using test_util::from_hex;
using test_util::to_hex;

namespace {

struct gcm_vector {
    const char *name;
    const char *key, *iv, *plaintext, *aad, *ciphertext, *tag;
};

const char *P64 = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                  "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
const char *P60 = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                  "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39";
const char *AAD = "feedfacedeadbeeffeedfacedeadbeefabaddad2";
const char *K128 = "feffe9928665731c6d6a8f9467308308";
const char *K256 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
const char *IV   = "cafebabefacedbaddecaf888";
const char *Z96  = "000000000000000000000000";

const gcm_vector vectors[] = {
    {"mv_tc1", "00000000000000000000000000000000", Z96, "", "", "",
     "58e2fccefa7e3061367f1d57a4e7455a"},
    {"mv_tc2", "00000000000000000000000000000000", Z96,
     "00000000000000000000000000000000", "",
     "0388dace60b6a392f328c2b971b2fe78", "ab6e47d42cec13bdf53a67b21257bddf"},
    {"mv_tc3", K128, IV, P64, "",
     "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
     "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
     "4d5c2af327cd64a62cf35abd2ba6fab4"},
    {"mv_tc4", K128, IV, P60, AAD,
     "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
     "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
     "5bc94fbc3221a5db94fae95ae7121a47"},
    {"mv_tc13", "0000000000000000000000000000000000000000000000000000000000000000",
     Z96, "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"},
    {"mv_tc14", "0000000000000000000000000000000000000000000000000000000000000000",
     Z96, "00000000000000000000000000000000", "",
     "cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919"},
    {"mv_tc15", K256, IV, P64, "",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
     "b094dac5d93471bdec1a502270e3cc6c"},
    {"mv_tc16", K256, IV, P60, AAD,
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
     "76fc6ece0f4e1768cddf8853bb2d551b"},
    {"cavp_ext_iv128_0", "11754cd72aec309bf52f7687212e8957",
     "3c819d9a9bed087615030b65", "", "", "",
     "250327c674aaf477aef2675748cf6971"},
};

class aead_vectors : public ::testing::TestWithParam<crypt_aead_backend_t> {
protected:
    void SetUp() override
    {
        ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_init(GetParam()));
    }

    void load(const gcm_vector &v, crypt_aead_key_t *key)
    {
        bytes raw = from_hex(v.key);
        ASSERT_EQ(CRYPT_AEAD_OK,
                  crypt_aead_key_init(key, GetParam(), raw.data(), raw.size()));
    }
};

TEST_P(aead_vectors, seal_matches_known_answers)
{
    for (const gcm_vector &v : vectors) {
        SCOPED_TRACE(v.name);
        crypt_aead_key_t key;
        load(v, &key);
        bytes iv = from_hex(v.iv), pt = from_hex(v.plaintext),
              aad = from_hex(v.aad), ct(pt.size());
        uint8_t tag[CRYPT_AEAD_TAG_LEN];

        ASSERT_EQ(CRYPT_AEAD_OK,
                  crypt_aead_seal(&key, iv.data(), aad.data(), aad.size(),
                                  pt.data(), pt.size(), ct.data(), tag));
        EXPECT_EQ(v.ciphertext, to_hex(ct));
        EXPECT_EQ(v.tag, to_hex(tag, sizeof(tag)));
        crypt_aead_key_cleanup(&key);
    }
}

TEST_P(aead_vectors, open_recovers_known_plaintext)
{
    for (const gcm_vector &v : vectors) {
        SCOPED_TRACE(v.name);
        crypt_aead_key_t key;
        load(v, &key);
        bytes iv = from_hex(v.iv), ct = from_hex(v.ciphertext),
              aad = from_hex(v.aad), tag = from_hex(v.tag), pt(ct.size());

        ASSERT_EQ(CRYPT_AEAD_OK,
                  crypt_aead_open(&key, iv.data(), aad.data(), aad.size(),
                                  ct.data(), ct.size(), pt.data(), tag.data()));
        EXPECT_EQ(v.plaintext, to_hex(pt));
        crypt_aead_key_cleanup(&key);
    }
}

/* Every single-bit change of tag, ciphertext, AAD or nonce must fail, and
 * a failed open must leave no plaintext behind. */
TEST_P(aead_vectors, any_flipped_bit_fails_and_wipes_output)
{
    const gcm_vector &v = vectors[3]; /* tc4: has AAD and a partial block */
    crypt_aead_key_t key;
    load(v, &key);
    const bytes iv = from_hex(v.iv), ct = from_hex(v.ciphertext),
                aad = from_hex(v.aad), tag = from_hex(v.tag);

    auto try_open = [&](bytes iv2, bytes ct2, bytes aad2, bytes tag2) {
        bytes pt(ct2.size(), 0xa5);
        crypt_aead_status_t status =
                crypt_aead_open(&key, iv2.data(), aad2.data(), aad2.size(),
                                ct2.data(), ct2.size(), pt.data(), tag2.data());
        EXPECT_EQ(bytes(ct2.size(), 0), pt) << "plaintext left after failure";
        return status;
    };

    for (size_t bit = 0; bit < tag.size() * 8; bit += 7) {
        bytes t = tag;
        t[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, try_open(iv, ct, aad, t)) << "tag bit " << bit;
    }
    for (size_t bit = 0; bit < ct.size() * 8; bit += 13) {
        bytes c = ct;
        c[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, try_open(iv, c, aad, tag)) << "ct bit " << bit;
    }
    for (size_t bit = 0; bit < aad.size() * 8; bit += 11) {
        bytes a = aad;
        a[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, try_open(iv, ct, a, tag)) << "aad bit " << bit;
    }
    for (size_t bit = 0; bit < iv.size() * 8; bit += 5) {
        bytes n = iv;
        n[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, try_open(n, ct, aad, tag)) << "iv bit " << bit;
    }
    /* truncated ciphertext */
    bytes shorter(ct.begin(), ct.end() - 1);
    EXPECT_EQ(CRYPT_AEAD_ERR_AUTH, try_open(iv, shorter, aad, tag));
    crypt_aead_key_cleanup(&key);
}

TEST_P(aead_vectors, seal_in_place_equals_out_of_place)
{
    const gcm_vector &v = vectors[2];
    crypt_aead_key_t key;
    load(v, &key);
    bytes iv = from_hex(v.iv), buf = from_hex(v.plaintext);
    uint8_t tag[CRYPT_AEAD_TAG_LEN];

    ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_seal(&key, iv.data(), NULL, 0, buf.data(),
                                             buf.size(), buf.data(), tag));
    EXPECT_EQ(v.ciphertext, to_hex(buf));
    ASSERT_EQ(CRYPT_AEAD_OK, crypt_aead_open(&key, iv.data(), NULL, 0, buf.data(),
                                             buf.size(), buf.data(), tag));
    EXPECT_EQ(v.plaintext, to_hex(buf));
    crypt_aead_key_cleanup(&key);
}

TEST_P(aead_vectors, rejects_bad_key_length)
{
    crypt_aead_key_t key;
    uint8_t raw[24] = {0};
    EXPECT_EQ(CRYPT_AEAD_ERR_PARAM, crypt_aead_key_init(&key, GetParam(), raw, 24));
    EXPECT_EQ(CRYPT_AEAD_ERR_PARAM, crypt_aead_key_init(&key, GetParam(), raw, 0));
}

} // namespace

CRYPT_TEST_ALL_BACKENDS(aead_vectors);

TEST(aead_backend, names_round_trip_and_arch_is_reported)
{
    EXPECT_EQ(CRYPT_AEAD_BACKEND_OPENSSL, crypt_aead_backend_from_name("openssl"));
    EXPECT_EQ(CRYPT_AEAD_BACKEND_IPSEC_MB, crypt_aead_backend_from_name("ipsec-mb"));
    EXPECT_EQ(CRYPT_AEAD_BACKEND_AUTO, crypt_aead_backend_from_name("auto"));
    EXPECT_EQ(CRYPT_AEAD_BACKEND_LAST, crypt_aead_backend_from_name("rot13"));
#ifdef HAVE_IPSEC_MB
    EXPECT_EQ(CRYPT_AEAD_BACKEND_IPSEC_MB,
              crypt_aead_backend_resolve(CRYPT_AEAD_BACKEND_AUTO));
    std::string arch = crypt_aead_backend_arch(CRYPT_AEAD_BACKEND_IPSEC_MB);
    EXPECT_NE("unavailable", arch);
    EXPECT_NE("unknown", arch);
    RecordProperty("ipsec_mb_arch", arch);
#endif
}
