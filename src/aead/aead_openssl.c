/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * AES-GCM on OpenSSL EVP: the portable fallback and the cross-check.
 *
 * Each key keeps two cipher contexts (seal, open) with the key schedule
 * loaded once; a call only sets the nonce. EVP contexts are not shareable
 * between threads, hence the one-thread-per-key rule in aead.h.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "aead_backend.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <limits.h>
#include <stdlib.h>

typedef struct crypt_openssl_key {
    EVP_CIPHER_CTX *seal_ctx;
    EVP_CIPHER_CTX *open_ctx;
} crypt_openssl_key_t;

static crypt_aead_status_t crypt_openssl_init(void)
{
    return CRYPT_AEAD_OK;
}

static const char *crypt_openssl_arch(void)
{
    return OpenSSL_version(OPENSSL_VERSION);
}

static const EVP_CIPHER *crypt_openssl_cipher(size_t key_len)
{
    return (key_len == CRYPT_AEAD_KEY_LEN_128) ? EVP_aes_128_gcm() :
                                                 EVP_aes_256_gcm();
}

static void crypt_openssl_key_cleanup(crypt_aead_key_t *key)
{
    crypt_openssl_key_t *impl = key->impl;

    /* EVP_CIPHER_CTX_free cleanses the key schedule it holds. */
    EVP_CIPHER_CTX_free(impl->seal_ctx);
    EVP_CIPHER_CTX_free(impl->open_ctx);
    free(impl);
    key->impl = NULL;
}

static crypt_aead_status_t crypt_openssl_key_init(crypt_aead_key_t *key,
                                                  const uint8_t *raw,
                                                  size_t raw_len)
{
    const EVP_CIPHER *cipher = crypt_openssl_cipher(raw_len);
    crypt_openssl_key_t *impl;

    impl = calloc(1, sizeof(*impl));
    if (impl == NULL) {
        return CRYPT_AEAD_ERR_BACKEND;
    }
    key->impl      = impl;
    impl->seal_ctx = EVP_CIPHER_CTX_new();
    impl->open_ctx = EVP_CIPHER_CTX_new();
    if ((impl->seal_ctx == NULL) || (impl->open_ctx == NULL) ||
        /* 96-bit IVs are GCM's default length in EVP */
        (EVP_EncryptInit_ex(impl->seal_ctx, cipher, NULL, raw, NULL) != 1) ||
        (EVP_DecryptInit_ex(impl->open_ctx, cipher, NULL, raw, NULL) != 1)) {
        crypt_openssl_key_cleanup(key);
        return CRYPT_AEAD_ERR_BACKEND;
    }
    return CRYPT_AEAD_OK;
}

/* EVP lengths are int: feed long buffers in pieces. */
static int crypt_openssl_update(EVP_CIPHER_CTX *ctx, uint8_t *out,
                                const uint8_t *in, size_t len)
{
    const size_t piece_max = (size_t)INT_MAX & ~(size_t)15;
    int out_len;

    while (len > 0) {
        size_t piece = (len < piece_max) ? len : piece_max;
        if (EVP_CipherUpdate(ctx, out, &out_len, in, (int)piece) != 1) {
            return 0;
        }
        if (out != NULL) {
            out += piece;
        }
        in  += piece;
        len -= piece;
    }
    return 1;
}

static crypt_aead_status_t crypt_openssl_seal(crypt_aead_key_t *key,
                                              const uint8_t *nonce,
                                              const void *aad, size_t aad_len,
                                              const void *in, size_t len,
                                              void *out, uint8_t *tag)
{
    EVP_CIPHER_CTX *ctx = ((crypt_openssl_key_t*)key->impl)->seal_ctx;
    uint8_t final_block[16]; /* GCM's Final writes nothing; EVP wants room */
    int out_len;

    if ((EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1) ||
        !crypt_openssl_update(ctx, NULL, aad, aad_len) ||
        !crypt_openssl_update(ctx, out, in, len) ||
        (EVP_EncryptFinal_ex(ctx, final_block, &out_len) != 1) ||
        (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, CRYPT_AEAD_TAG_LEN,
                             tag) != 1)) {
        return CRYPT_AEAD_ERR_BACKEND;
    }
    return CRYPT_AEAD_OK;
}

static crypt_aead_status_t crypt_openssl_open(crypt_aead_key_t *key,
                                              const uint8_t *nonce,
                                              const void *aad, size_t aad_len,
                                              const void *in, size_t len,
                                              void *out, const uint8_t *tag)
{
    EVP_CIPHER_CTX *ctx = ((crypt_openssl_key_t*)key->impl)->open_ctx;
    uint8_t final_block[16];
    int out_len;

    if ((EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1) ||
        (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, CRYPT_AEAD_TAG_LEN,
                             (void*)tag) != 1) ||
        !crypt_openssl_update(ctx, NULL, aad, aad_len) ||
        !crypt_openssl_update(ctx, out, in, len)) {
        return CRYPT_AEAD_ERR_BACKEND;
    }
    /* DecryptFinal verifies the tag (in constant time) */
    return (EVP_DecryptFinal_ex(ctx, final_block, &out_len) == 1) ?
                   CRYPT_AEAD_OK : CRYPT_AEAD_ERR_AUTH;
}

const crypt_aead_backend_ops_t crypt_aead_openssl_ops = {
    .name        = "openssl",
    .init        = crypt_openssl_init,
    .arch        = crypt_openssl_arch,
    .key_init    = crypt_openssl_key_init,
    .key_cleanup = crypt_openssl_key_cleanup,
    .seal        = crypt_openssl_seal,
    .open        = crypt_openssl_open
};
