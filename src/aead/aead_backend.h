/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal: what a backend of the crypto core provides. Each backend is a
 * table of five calls over raw AES-GCM; framing (nonces, streams, zeroing on
 * failure) lives once in aead.c.
 */
#ifndef UCX_CRYPT_AEAD_BACKEND_H
#define UCX_CRYPT_AEAD_BACKEND_H

#include "aead.h"

typedef struct crypt_aead_backend_ops {
    const char *name;
    crypt_aead_status_t (*init)(void);
    const char *(*arch)(void);
    crypt_aead_status_t (*key_init)(crypt_aead_key_t *key, const uint8_t *raw,
                                    size_t raw_len);
    void (*key_cleanup)(crypt_aead_key_t *key);
    crypt_aead_status_t (*seal)(crypt_aead_key_t *key, const uint8_t *nonce,
                                const void *aad, size_t aad_len, const void *in,
                                size_t len, void *out, uint8_t *tag);
    /* Writes the plaintext and returns OK or ERR_AUTH; zeroing `out` on
     * failure is the caller's (aead.c) job. */
    crypt_aead_status_t (*open)(crypt_aead_key_t *key, const uint8_t *nonce,
                                const void *aad, size_t aad_len, const void *in,
                                size_t len, void *out, const uint8_t *tag);
} crypt_aead_backend_ops_t;

extern const crypt_aead_backend_ops_t crypt_aead_openssl_ops;
#ifdef HAVE_IPSEC_MB
extern const crypt_aead_backend_ops_t crypt_aead_ipsec_mb_ops;
#endif

#endif
