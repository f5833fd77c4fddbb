/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx-crypt crypto core: AES-GCM records and stream segments.
 *
 * One narrow call per operation, in the manner of ipsec-mb and libsodium.
 * Two backends sit behind it, chosen once at init: Intel ipsec-mb (the data
 * path) and OpenSSL EVP (portable fallback and cross-check). Nothing here
 * knows about UCX; nothing here invents cryptography: every primitive is a
 * call into one of those two libraries.
 *
 * Thread model: crypt_aead_init() once per process; a crypt_aead_key_t may be
 * used by one thread at a time (the OpenSSL backend keeps a cipher context in
 * it). Give each thread its own key object for parallel sealing.
 */
#ifndef UCX_CRYPT_AEAD_H
#define UCX_CRYPT_AEAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CRYPT_AEAD_TAG_LEN          = 16, /* full GCM tag, SP 800-38D §5.2.1.2 */
    CRYPT_AEAD_NONCE_LEN        = 12, /* 96-bit IV, SP 800-38D §8.2 */
    CRYPT_AEAD_KEY_LEN_128      = 16,
    CRYPT_AEAD_KEY_LEN_256      = 32,
    CRYPT_AEAD_KEY_LEN_MAX      = 32,

    /* Record nonce: 4-byte fixed field || 8-byte big-endian sequence number.
     * This is the "deterministic construction" of SP 800-38D §8.2.1 and
     * RFC 5116 §3.2: uniqueness by construction, no birthday bound. */
    CRYPT_RECORD_NONCE_PREFIX_LEN = 4,

    /* Stream nonce: 7-byte per-message prefix || 4-byte big-endian segment
     * index || 1-byte last-segment flag. The STREAM construction of Hoang,
     * Reyhanitabar, Rogaway and Vizar, "Online Authenticated-Encryption and
     * its Nonce-Reuse Misuse-Resistance", CRYPTO 2015, §7 (nonce-based OAE2);
     * the same layout as Tink's AES-GCM streaming AEAD. The index stops
     * reordering and dropping, the flag stops truncation and extension. */
    CRYPT_STREAM_NONCE_PREFIX_LEN = 7,
    CRYPT_STREAM_MAX_SEGMENTS     = 0x7fffffff
};

typedef enum {
    CRYPT_AEAD_OK         = 0,
    CRYPT_AEAD_ERR_AUTH   = -1, /* tag mismatch: forged, corrupted or misplaced */
    CRYPT_AEAD_ERR_PARAM  = -2, /* bad key length, NULL buffer, ... */
    CRYPT_AEAD_ERR_BACKEND= -3, /* the library refused (should not happen) */
    CRYPT_AEAD_ERR_ORDER  = -4  /* stream used out of order (see reader) */
} crypt_aead_status_t;

typedef enum {
    CRYPT_AEAD_BACKEND_AUTO    = 0, /* ipsec-mb if built in, else OpenSSL */
    CRYPT_AEAD_BACKEND_IPSEC_MB,
    CRYPT_AEAD_BACKEND_OPENSSL,
    CRYPT_AEAD_BACKEND_LAST
} crypt_aead_backend_t;

/* An expanded AES-GCM key for one backend. Opaque; sized for the largest
 * backend state (ipsec-mb's struct gcm_key_data is 64-byte aligned). */
typedef struct crypt_aead_key {
    crypt_aead_backend_t backend;
    unsigned             key_len;
    void                 *impl;  /* backend state, allocated by key_init */
} crypt_aead_key_t;

/* Memory for secrets (secure_mem.c): up to 1024 bytes a chunk of a page
 * of its size (aligned to it), more pages of its own; excluded from core
 * dumps (MADV_DONTDUMP) and zero in a forked child (MADV_WIPEONFORK),
 * locked where RLIMIT_MEMLOCK allows, zero-filled, and wiped when freed.
 * `size` at free: the one given at alloc (a free of another size, or of a
 * chunk not in use, aborts: memory is corrupt). The
 * ipsec-mb backend keeps its expanded key schedules here; src/keyex every
 * key it derives. */
void *crypt_secure_alloc(size_t size);
void crypt_secure_free(void *ptr, size_t size);

/* Randomness from OpenSSL's DRBG (NIST SP 800-90A CTR_DRBG, seeded by the
 * kernel's getrandom). crypt_random_public for values that are sent or
 * shown (ids, tokens), crypt_random_secret for secrets (RAND_priv_bytes:
 * a separate DRBG instance, so a public output never precedes a secret one
 * from the same state). Return 1 on success, 0 if the generator failed:
 * the caller must then not go on. */
int crypt_random_public(void *buf, size_t len);
int crypt_random_secret(void *buf, size_t len);

/* Wiping and comparing secrets, so that no layer above calls OpenSSL for
 * them: crypt_wipe zeroes in a way the compiler cannot drop as a dead
 * store (OPENSSL_cleanse); crypt_memcmp_ct is 0 when the two are equal,
 * in a time that does not depend on where they differ (CRYPTO_memcmp;
 * what a MAC or a token must be compared with). */
void crypt_wipe(void *buf, size_t len);
int crypt_memcmp_ct(const void *a, const void *b, size_t len);

/* Why the last local resource call of this thread failed: "" if none has,
 * else a constant phrase ("no memory for secrets", "the random generator
 * failed", ...). The transport puts it after what it was doing, so that a
 * local failure is told apart from what a peer or the network did. */
const char *crypt_local_failure(void);
void crypt_local_failure_set(const char *what);
/* The same as ": <what>", to end a message, or "" if nothing was recorded;
 * taken once, so that no later message repeats a stale one */
const char *crypt_local_failure_take(void);

/* ---- local failures, on purpose (test builds) --------------------------- */

/* The local resources whose failure the code must survive closed: memory
 * for secrets, a cipher context, randomness, a key derivation (src/keyex).
 * Each such call asks CRYPT_FALLIBLE_FAILS first. A test build
 * (--enable-fault-injection) counts these calls in the process and fails
 * the N-th when CRYPT_TEST_FAIL_CALL=N (test/integration/failure_sweep.sh
 * sweeps N, as SQLite's tests sweep out-of-memory); a release build has
 * neither the counter nor the variable. A seal is counted apart
 * (CRYPT_TEST_FAIL_SEAL=N): every record makes one, and the resource
 * calls a sweep steps through one by one would drown among them. */
typedef enum {
    CRYPT_FALLIBLE_SECURE_MEMORY = 0, /* crypt_secure_alloc */
    CRYPT_FALLIBLE_CIPHER_CONTEXT,    /* crypt_aead_key_init */
    CRYPT_FALLIBLE_RANDOM,            /* crypt_random_public, _secret */
    CRYPT_FALLIBLE_KEY_DERIVATION,    /* keyex: X25519 and key generation,
                                         HKDF, HMAC, SHA-256 */
    CRYPT_FALLIBLE_SEAL,              /* crypt_aead_seal: a provider error,
                                         a FIPS self-test state */
    CRYPT_FALLIBLE_LAST
} crypt_fallible_t;

#if UCX_CRYPT_FAULT_INJECTION
/* 1: fail this call. `site`: where it was made (a return address) */
int crypt_fallible_fail(crypt_fallible_t kind, const void *site);
/* Fail the next call of `kind` in this process, once */
void crypt_fallible_fail_next(crypt_fallible_t kind);
#define CRYPT_FALLIBLE_FAILS(_kind) \
    crypt_fallible_fail((_kind), __builtin_return_address(0))
#else
#define CRYPT_FALLIBLE_FAILS(_kind) 0
#endif

/* Process-wide init of a backend (ipsec-mb: CPU dispatch). Idempotent and
 * thread-safe. Returns CRYPT_AEAD_ERR_PARAM if the backend is not built in. */
crypt_aead_status_t crypt_aead_init(crypt_aead_backend_t backend);

/* AUTO resolved to a concrete backend, and names for logs. The names, in
 * crypt_aead_backend_t's order and NULL-terminated (a UCX enum's table). */
extern const char *crypt_aead_backend_names[CRYPT_AEAD_BACKEND_LAST + 1];
crypt_aead_backend_t crypt_aead_backend_resolve(crypt_aead_backend_t backend);
const char *crypt_aead_backend_name(crypt_aead_backend_t backend);
/* Parse "auto", "ipsec-mb", "openssl"; returns CRYPT_AEAD_BACKEND_LAST if
 * the name is unknown. */
crypt_aead_backend_t crypt_aead_backend_from_name(const char *name);
/* The code path the backend runs on this CPU: "avx512", "avx2", "sse",
 * "no-aesni" for ipsec-mb, the OpenSSL version string for OpenSSL. */
const char *crypt_aead_backend_arch(crypt_aead_backend_t backend);

/* Expand a raw 16- or 32-byte key for `backend`. The raw key is not kept. */
crypt_aead_status_t crypt_aead_key_init(crypt_aead_key_t *key,
                                        crypt_aead_backend_t backend,
                                        const uint8_t *raw, size_t raw_len);
/* Wipe and free the expanded key. Safe on a zeroed or cleaned-up key. */
void crypt_aead_key_cleanup(crypt_aead_key_t *key);

/* AEAD with associated data: out = AES-GCM(key, nonce, aad, in), tag.
 * `out` may equal `in` (in place). `len` may be 0. */
crypt_aead_status_t crypt_aead_seal(crypt_aead_key_t *key,
                                    const uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                                    const void *aad, size_t aad_len,
                                    const void *in, size_t len, void *out,
                                    uint8_t tag[CRYPT_AEAD_TAG_LEN]);

/* Verify and decrypt. On CRYPT_AEAD_ERR_AUTH, `out` is zeroed so that no
 * unauthenticated plaintext survives the call. Tags compare in constant
 * time. */
crypt_aead_status_t crypt_aead_open(crypt_aead_key_t *key,
                                    const uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                                    const void *aad, size_t aad_len,
                                    const void *in, size_t len, void *out,
                                    const uint8_t tag[CRYPT_AEAD_TAG_LEN]);

/* ---- records: one AEAD message per transport message ------------------- */

void crypt_record_nonce(uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                        const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                        uint64_t sequence);

crypt_aead_status_t crypt_record_seal(crypt_aead_key_t *key,
                                      const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                      uint64_t sequence,
                                      const void *aad, size_t aad_len,
                                      const void *in, size_t len, void *out,
                                      uint8_t tag[CRYPT_AEAD_TAG_LEN]);

crypt_aead_status_t crypt_record_open(crypt_aead_key_t *key,
                                      const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN],
                                      uint64_t sequence,
                                      const void *aad, size_t aad_len,
                                      const void *in, size_t len, void *out,
                                      const uint8_t tag[CRYPT_AEAD_TAG_LEN]);

/* ---- streams: one large message as a chain of segments ----------------- */

void crypt_stream_nonce(uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                        const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                        uint32_t segment_index, int is_last);

/* Segments may be sealed in any order and in parallel (each is independent
 * given its index); the index and the last flag bind its position. */
crypt_aead_status_t crypt_stream_seal_segment(crypt_aead_key_t *key,
                                              const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                                              uint32_t segment_index, int is_last,
                                              const void *aad, size_t aad_len,
                                              const void *in, size_t len, void *out,
                                              uint8_t tag[CRYPT_AEAD_TAG_LEN]);

crypt_aead_status_t crypt_stream_open_segment(crypt_aead_key_t *key,
                                              const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                                              uint32_t segment_index, int is_last,
                                              const void *aad, size_t aad_len,
                                              const void *in, size_t len, void *out,
                                              const uint8_t tag[CRYPT_AEAD_TAG_LEN]);

#ifdef __cplusplus
}
#endif

#endif
