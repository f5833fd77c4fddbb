/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Known answers for the primitives under the key schedule:
 * RFC 7748 §5.2 and §6.1 (X25519), RFC 5869 Appendix A (HKDF-SHA256).
 */
#include "ucx_crypt_config.h"
#include "keyex/keyex.h"
#include "common/test_util.h"

#include <gtest/gtest.h>

using test_util::bytes;
using test_util::from_hex;
using test_util::to_hex;

TEST(keyex_vectors, x25519_rfc7748_section_5_2)
{
    bytes scalar = from_hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4");
    bytes u      = from_hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c");
    keyex_keypair_t kp;
    uint8_t out[KEYEX_SECRET_LEN];

    ASSERT_EQ(KEYEX_OK, keyex_keypair_from_private(&kp, scalar.data()));
    ASSERT_EQ(KEYEX_OK, keyex_x25519(&kp, u.data(), out));
    EXPECT_EQ("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552",
              to_hex(out, sizeof(out)));
    keyex_keypair_cleanup(&kp);
}

TEST(keyex_vectors, x25519_rfc7748_section_6_1_diffie_hellman)
{
    bytes alice_priv = from_hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    bytes bob_priv   = from_hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
    keyex_keypair_t alice, bob;
    uint8_t k1[KEYEX_SECRET_LEN], k2[KEYEX_SECRET_LEN];

    ASSERT_EQ(KEYEX_OK, keyex_keypair_from_private(&alice, alice_priv.data()));
    ASSERT_EQ(KEYEX_OK, keyex_keypair_from_private(&bob, bob_priv.data()));
    EXPECT_EQ("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
              to_hex(alice.public_key, KEYEX_PUBLIC_KEY_LEN));
    EXPECT_EQ("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f",
              to_hex(bob.public_key, KEYEX_PUBLIC_KEY_LEN));
    ASSERT_EQ(KEYEX_OK, keyex_x25519(&alice, bob.public_key, k1));
    ASSERT_EQ(KEYEX_OK, keyex_x25519(&bob, alice.public_key, k2));
    const char *shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";
    EXPECT_EQ(shared, to_hex(k1, sizeof(k1)));
    EXPECT_EQ(shared, to_hex(k2, sizeof(k2)));
    keyex_keypair_cleanup(&alice);
    keyex_keypair_cleanup(&bob);
}

TEST(keyex_vectors, x25519_refuses_low_order_point)
{
    /* u = 0 is of small order: the shared secret would be all zero
     * (RFC 7748 §6.1) and independent of our private key */
    bytes zero(KEYEX_PUBLIC_KEY_LEN, 0);
    keyex_keypair_t kp;
    uint8_t out[KEYEX_SECRET_LEN];

    ASSERT_EQ(KEYEX_OK, keyex_keypair_generate(&kp));
    EXPECT_EQ(KEYEX_ERR_CRYPTO, keyex_x25519(&kp, zero.data(), out));
    keyex_keypair_cleanup(&kp);
}

struct hkdf_vector {
    const char *name, *ikm, *salt, *info, *prk, *okm;
};

TEST(keyex_vectors, hkdf_sha256_rfc5869_appendix_a)
{
    const hkdf_vector vectors[] = {
        {"A.1", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b",
         "000102030405060708090a0b0c", "f0f1f2f3f4f5f6f7f8f9",
         "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
         "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
         "34007208d5b887185865"},
        {"A.3", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "", "",
         "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
         "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
         "9d201395faa4b61a96c8"},
    };

    for (const hkdf_vector &v : vectors) {
        SCOPED_TRACE(v.name);
        bytes ikm = from_hex(v.ikm), salt = from_hex(v.salt), info = from_hex(v.info);
        bytes expected_okm = from_hex(v.okm), okm(expected_okm.size());
        uint8_t prk[KEYEX_SECRET_LEN];

        ASSERT_EQ(KEYEX_OK, keyex_hkdf_extract(salt.data(), salt.size(), ikm.data(),
                                               ikm.size(), prk));
        EXPECT_EQ(v.prk, to_hex(prk, sizeof(prk)));
        ASSERT_EQ(KEYEX_OK, keyex_hkdf_expand(prk, info.data(), info.size(), okm.data(),
                                              okm.size()));
        EXPECT_EQ(v.okm, to_hex(okm));
    }
}

TEST(keyex_vectors, hkdf_expand_refuses_oversized_output)
{
    uint8_t prk[KEYEX_SECRET_LEN] = {1};
    bytes okm(255 * 32 + 1);
    EXPECT_EQ(KEYEX_ERR_PARAM, keyex_hkdf_expand(prk, NULL, 0, okm.data(), okm.size()));
}
