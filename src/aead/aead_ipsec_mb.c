/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * AES-GCM on Intel ipsec-mb: the data path.
 *
 * We use the library's "direct" GCM API (IMB_AES*_GCM_ENC/DEC): one call per
 * message, key schedule precomputed once by IMB_AES*_GCM_PRE. The manager is
 * process-wide and read-only after init (it only holds the function pointers
 * chosen for this CPU), so any number of threads may call through it, each
 * with its own gcm_context_data on the stack.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "aead_backend.h"

#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static IMB_MGR *crypt_imb_mgr;
static pthread_once_t crypt_imb_once = PTHREAD_ONCE_INIT;

static void crypt_imb_init_once(void)
{
    IMB_MGR *mgr = alloc_mb_mgr(0);

    if (mgr == NULL) {
        return;
    }
    /* Picks the widest code path this CPU runs (AVX-512/VAES, AVX2, AVX,
     * SSE); the choice is reported through used_arch. */
    init_mb_mgr_auto(mgr, NULL);
    if (imb_get_errno(mgr) != 0) {
        free_mb_mgr(mgr);
        return;
    }
    crypt_imb_mgr = mgr;
}

static crypt_aead_status_t crypt_imb_init(void)
{
    pthread_once(&crypt_imb_once, crypt_imb_init_once);
    return (crypt_imb_mgr == NULL) ? CRYPT_AEAD_ERR_BACKEND : CRYPT_AEAD_OK;
}

static const char *crypt_imb_arch(void)
{
    if (crypt_imb_init() != CRYPT_AEAD_OK) {
        return "unavailable";
    }
    switch (crypt_imb_mgr->used_arch) {
    case IMB_ARCH_NOAESNI: return "no-aesni";
    case IMB_ARCH_SSE:     return "sse";
    case IMB_ARCH_AVX:     return "avx";
    case IMB_ARCH_AVX2:    return "avx2";
    case IMB_ARCH_AVX512:  return "avx512";
    default:               return "unknown";
    }
}

static crypt_aead_status_t crypt_imb_key_init(crypt_aead_key_t *key,
                                              const uint8_t *raw,
                                              size_t raw_len)
{
    struct gcm_key_data *key_data;

    /* The expanded key schedule and GHASH tables are as secret as the key:
     * secure memory (not dumped, wiped). Page-aligned, so also aligned for
     * the GCM code's vector loads. */
    key_data = crypt_secure_alloc(sizeof(*key_data));
    if (key_data == NULL) {
        return CRYPT_AEAD_ERR_BACKEND;
    }

    if (raw_len == CRYPT_AEAD_KEY_LEN_128) {
        IMB_AES128_GCM_PRE(crypt_imb_mgr, raw, key_data);
    } else {
        IMB_AES256_GCM_PRE(crypt_imb_mgr, raw, key_data);
    }
    key->impl = key_data;
    return CRYPT_AEAD_OK;
}

static void crypt_imb_key_cleanup(crypt_aead_key_t *key)
{
    crypt_secure_free(key->impl, sizeof(struct gcm_key_data));
    key->impl = NULL;
}

/* ipsec-mb's parameter checks reject NULL buffers even for zero lengths. */
static const uint8_t crypt_imb_empty[1];
#define CRYPT_IMB_BUF(_ptr) ((_ptr) != NULL ? (const void*)(_ptr) : crypt_imb_empty)

static crypt_aead_status_t crypt_imb_seal(crypt_aead_key_t *key,
                                          const uint8_t *nonce,
                                          const void *aad, size_t aad_len,
                                          const void *in, size_t len,
                                          void *out, uint8_t *tag)
{
    struct gcm_context_data ctx;

    aad = CRYPT_IMB_BUF(aad);
    in  = CRYPT_IMB_BUF(in);
    out = (out != NULL) ? out : (void*)crypt_imb_empty;
    if (key->key_len == CRYPT_AEAD_KEY_LEN_128) {
        IMB_AES128_GCM_ENC(crypt_imb_mgr, key->impl, &ctx, out, in, len,
                           nonce, aad, aad_len, tag, CRYPT_AEAD_TAG_LEN);
    } else {
        IMB_AES256_GCM_ENC(crypt_imb_mgr, key->impl, &ctx, out, in, len,
                           nonce, aad, aad_len, tag, CRYPT_AEAD_TAG_LEN);
    }
    /* The context holds keystream and hash state of this message. */
    OPENSSL_cleanse(&ctx, sizeof(ctx));
    return CRYPT_AEAD_OK;
}

static crypt_aead_status_t crypt_imb_open(crypt_aead_key_t *key,
                                          const uint8_t *nonce,
                                          const void *aad, size_t aad_len,
                                          const void *in, size_t len,
                                          void *out, const uint8_t *tag)
{
    struct gcm_context_data ctx;
    uint8_t computed[CRYPT_AEAD_TAG_LEN];
    int mismatch;

    aad = CRYPT_IMB_BUF(aad);
    in  = CRYPT_IMB_BUF(in);
    out = (out != NULL) ? out : (void*)crypt_imb_empty;
    if (key->key_len == CRYPT_AEAD_KEY_LEN_128) {
        IMB_AES128_GCM_DEC(crypt_imb_mgr, key->impl, &ctx, out, in, len,
                           nonce, aad, aad_len, computed, CRYPT_AEAD_TAG_LEN);
    } else {
        IMB_AES256_GCM_DEC(crypt_imb_mgr, key->impl, &ctx, out, in, len,
                           nonce, aad, aad_len, computed, CRYPT_AEAD_TAG_LEN);
    }
    OPENSSL_cleanse(&ctx, sizeof(ctx));

    /* ipsec-mb returns the computed tag; the comparison is ours and must
     * not leak through timing how many bytes matched. */
    mismatch = CRYPTO_memcmp(computed, tag, CRYPT_AEAD_TAG_LEN);
    OPENSSL_cleanse(computed, sizeof(computed));
    return mismatch ? CRYPT_AEAD_ERR_AUTH : CRYPT_AEAD_OK;
}

const crypt_aead_backend_ops_t crypt_aead_ipsec_mb_ops = {
    .name        = "ipsec-mb",
    .init        = crypt_imb_init,
    .arch        = crypt_imb_arch,
    .key_init    = crypt_imb_key_init,
    .key_cleanup = crypt_imb_key_cleanup,
    .seal        = crypt_imb_seal,
    .open        = crypt_imb_open
};
