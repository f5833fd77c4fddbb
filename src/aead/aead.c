/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx-crypt crypto core: backend dispatch, record and stream framing.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "aead_backend.h"

#include <openssl/crypto.h>
#include <string.h>
#include <strings.h>

static const crypt_aead_backend_ops_t *
crypt_aead_backend_ops(crypt_aead_backend_t backend)
{
    switch (backend) {
#ifdef HAVE_IPSEC_MB
    case CRYPT_AEAD_BACKEND_IPSEC_MB:
        return &crypt_aead_ipsec_mb_ops;
#endif
    case CRYPT_AEAD_BACKEND_OPENSSL:
        return &crypt_aead_openssl_ops;
    default:
        return NULL;
    }
}

crypt_aead_backend_t crypt_aead_backend_resolve(crypt_aead_backend_t backend)
{
    if (backend != CRYPT_AEAD_BACKEND_AUTO) {
        return backend;
    }
#ifdef HAVE_IPSEC_MB
    return CRYPT_AEAD_BACKEND_IPSEC_MB;
#else
    return CRYPT_AEAD_BACKEND_OPENSSL;
#endif
}

const char *crypt_aead_backend_names[CRYPT_AEAD_BACKEND_LAST + 1] = {
    [CRYPT_AEAD_BACKEND_AUTO]     = "auto",
    [CRYPT_AEAD_BACKEND_IPSEC_MB] = "ipsec-mb",
    [CRYPT_AEAD_BACKEND_OPENSSL]  = "openssl",
    [CRYPT_AEAD_BACKEND_LAST]     = NULL
};

const char *crypt_aead_backend_name(crypt_aead_backend_t backend)
{
    return ((unsigned)backend < CRYPT_AEAD_BACKEND_LAST) ?
           crypt_aead_backend_names[backend] : "unknown";
}

crypt_aead_backend_t crypt_aead_backend_from_name(const char *name)
{
    crypt_aead_backend_t backend;

    for (backend = CRYPT_AEAD_BACKEND_AUTO; backend < CRYPT_AEAD_BACKEND_LAST;
         ++backend) {
        if (!strcasecmp(name, crypt_aead_backend_name(backend))) {
            return backend;
        }
    }
    return CRYPT_AEAD_BACKEND_LAST;
}

crypt_aead_status_t crypt_aead_init(crypt_aead_backend_t backend)
{
    const crypt_aead_backend_ops_t *ops =
            crypt_aead_backend_ops(crypt_aead_backend_resolve(backend));

    return (ops == NULL) ? CRYPT_AEAD_ERR_PARAM : ops->init();
}

const char *crypt_aead_backend_arch(crypt_aead_backend_t backend)
{
    const crypt_aead_backend_ops_t *ops =
            crypt_aead_backend_ops(crypt_aead_backend_resolve(backend));

    return (ops == NULL) ? "unavailable" : ops->arch();
}

crypt_aead_status_t crypt_aead_key_init(crypt_aead_key_t *key,
                                        crypt_aead_backend_t backend,
                                        const uint8_t *raw, size_t raw_len)
{
    const crypt_aead_backend_ops_t *ops;
    crypt_aead_status_t status;

    memset(key, 0, sizeof(*key));
    crypt_local_failure_set(NULL); /* a backend may say more (its memory) */
    if (CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_CIPHER_CONTEXT)) {
        crypt_local_failure_set("cannot make a cipher context");
        return CRYPT_AEAD_ERR_BACKEND;
    }
    backend = crypt_aead_backend_resolve(backend);
    ops     = crypt_aead_backend_ops(backend);
    if ((ops == NULL) || (raw == NULL) ||
        ((raw_len != CRYPT_AEAD_KEY_LEN_128) &&
         (raw_len != CRYPT_AEAD_KEY_LEN_256))) {
        return CRYPT_AEAD_ERR_PARAM;
    }

    status = ops->init();
    if (status != CRYPT_AEAD_OK) {
        return status;
    }

    key->backend = backend;
    key->key_len = (unsigned)raw_len;
    status       = ops->key_init(key, raw, raw_len);
    if ((status != CRYPT_AEAD_OK) && (*crypt_local_failure() == '\0')) {
        crypt_local_failure_set("cannot make a cipher context");
    }
    return status;
}

void crypt_aead_key_cleanup(crypt_aead_key_t *key)
{
    const crypt_aead_backend_ops_t *ops = crypt_aead_backend_ops(key->backend);

    if ((ops != NULL) && (key->impl != NULL)) {
        ops->key_cleanup(key);
    }
    memset(key, 0, sizeof(*key));
}

crypt_aead_status_t crypt_aead_seal(crypt_aead_key_t *key,
                                    const uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                                    const void *aad, size_t aad_len,
                                    const void *in, size_t len, void *out,
                                    uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    const crypt_aead_backend_ops_t *ops = crypt_aead_backend_ops(key->backend);

    if ((ops == NULL) || (key->impl == NULL) ||
        ((len > 0) && ((in == NULL) || (out == NULL))) ||
        ((aad_len > 0) && (aad == NULL))) {
        return CRYPT_AEAD_ERR_PARAM;
    }
    if (CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_SEAL)) {
        crypt_local_failure_set("the cipher failed to seal");
        return CRYPT_AEAD_ERR_BACKEND;
    }
    return ops->seal(key, nonce, aad, aad_len, in, len, out, tag);
}

crypt_aead_status_t crypt_aead_open(crypt_aead_key_t *key,
                                    const uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                                    const void *aad, size_t aad_len,
                                    const void *in, size_t len, void *out,
                                    const uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    const crypt_aead_backend_ops_t *ops = crypt_aead_backend_ops(key->backend);
    crypt_aead_status_t status;

    if ((ops == NULL) || (key->impl == NULL) ||
        ((len > 0) && ((in == NULL) || (out == NULL))) ||
        ((aad_len > 0) && (aad == NULL))) {
        return CRYPT_AEAD_ERR_PARAM;
    }

    status = ops->open(key, nonce, aad, aad_len, in, len, out, tag);
    if ((status != CRYPT_AEAD_OK) && (len > 0)) {
        /* Release no unverified plaintext (SP 800-38D §7.2, step 8: the
         * output of a failed decryption is FAIL, nothing else). */
        OPENSSL_cleanse(out, len);
    }
    return status;
}

/* ---- records ----------------------------------------------------------- */

static void crypt_store_be64(uint8_t *dst, uint64_t value)
{
    int i;

    for (i = 7; i >= 0; --i) {
        dst[i] = (uint8_t)value;
        value >>= 8;
    }
}

static void crypt_store_be32(uint8_t *dst, uint32_t value)
{
    int i;

    for (i = 3; i >= 0; --i) {
        dst[i] = (uint8_t)value;
        value >>= 8;
    }
}

void crypt_record_nonce(uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                        const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                        uint64_t sequence)
{
    memcpy(nonce, prefix, CRYPT_RECORD_NONCE_PREFIX_LEN);
    crypt_store_be64(nonce + CRYPT_RECORD_NONCE_PREFIX_LEN, sequence);
}

crypt_aead_status_t crypt_record_seal(crypt_aead_key_t *key,
                                      const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                      uint64_t sequence,
                                      const void *aad, size_t aad_len,
                                      const void *in, size_t len, void *out,
                                      uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];

    crypt_record_nonce(nonce, prefix, sequence);
    return crypt_aead_seal(key, nonce, aad, aad_len, in, len, out, tag);
}

crypt_aead_status_t crypt_record_open(crypt_aead_key_t *key,
                                      const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                      uint64_t sequence,
                                      const void *aad, size_t aad_len,
                                      const void *in, size_t len, void *out,
                                      const uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];

    crypt_record_nonce(nonce, prefix, sequence);
    return crypt_aead_open(key, nonce, aad, aad_len, in, len, out, tag);
}

/* ---- streams ----------------------------------------------------------- */

void crypt_stream_nonce(uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                        const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                        uint32_t segment_index, int is_last)
{
    memcpy(nonce, prefix, CRYPT_STREAM_NONCE_PREFIX_LEN);
    crypt_store_be32(nonce + CRYPT_STREAM_NONCE_PREFIX_LEN, segment_index);
    nonce[CRYPT_AEAD_NONCE_LEN - 1] = is_last ? 1 : 0;
}

crypt_aead_status_t crypt_stream_seal_segment(crypt_aead_key_t *key,
                                              const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                                              uint32_t segment_index, int is_last,
                                              const void *aad, size_t aad_len,
                                              const void *in, size_t len, void *out,
                                              uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];

    if (segment_index > CRYPT_STREAM_MAX_SEGMENTS) {
        return CRYPT_AEAD_ERR_PARAM;
    }
    crypt_stream_nonce(nonce, prefix, segment_index, is_last);
    return crypt_aead_seal(key, nonce, aad, aad_len, in, len, out, tag);
}

crypt_aead_status_t crypt_stream_open_segment(crypt_aead_key_t *key,
                                              const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                                              uint32_t segment_index, int is_last,
                                              const void *aad, size_t aad_len,
                                              const void *in, size_t len, void *out,
                                              const uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];

    if (segment_index > CRYPT_STREAM_MAX_SEGMENTS) {
        return CRYPT_AEAD_ERR_PARAM;
    }
    crypt_stream_nonce(nonce, prefix, segment_index, is_last);
    return crypt_aead_open(key, nonce, aad, aad_len, in, len, out, tag);
}
