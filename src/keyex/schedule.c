/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * X25519 and the HKDF-SHA256 key schedule described in keyex.h.
 * Primitives come from OpenSSL 3 (EVP_PKEY X25519, EVP_KDF HKDF).
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "keyex.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <string.h>

#define KEYEX_LABEL_PREFIX "ucx-crypt v1 "

/* ---- X25519 ------------------------------------------------------------- */

/* OpenSSL keeps an X25519 private scalar in its secure heap
 * (ossl_ecx_key_allocate_privkey: OPENSSL_secure_zalloc), which is the
 * ordinary heap until someone sets it up: set up here before the first
 * key, as locked, not dumped, guard-paged memory that OpenSSL wipes on
 * free (CRYPTO_secure_malloc_init(3)). One process-wide heap: an
 * application that set one up already keeps its own. Sized for every
 * handshake a process could have in flight (32 KiB of 32-byte keys);
 * past that a key cannot be made and the endpoint fails with the reason,
 * never a private key on the ordinary heap. Where RLIMIT_MEMLOCK allows
 * no locking the heap is still apart and not dumped (return value 2), as
 * keyex_secure_alloc's pages are. */
#define KEYEX_PRIVATE_HEAP_SIZE (1024 * 1024)
#define KEYEX_PRIVATE_HEAP_MIN  32

static pthread_once_t keyex_private_heap_once = PTHREAD_ONCE_INIT;
static int keyex_private_heap_ok;

static void keyex_private_heap_init(void)
{
    keyex_private_heap_ok =
            CRYPTO_secure_malloc_initialized() ||
            (CRYPTO_secure_malloc_init(KEYEX_PRIVATE_HEAP_SIZE,
                                       KEYEX_PRIVATE_HEAP_MIN) != 0);
}

/* 1 when private keys go to the secure heap; else nothing is made */
static int keyex_private_heap(void)
{
    (void)pthread_once(&keyex_private_heap_once, keyex_private_heap_init);
    if (!keyex_private_heap_ok) {
        crypt_local_failure_set("no secure heap for private keys");
    }
    return keyex_private_heap_ok;
}

static keyex_status_t keyex_keypair_export_public(keyex_keypair_t *keypair)
{
    size_t len = KEYEX_PUBLIC_KEY_LEN;

    if ((EVP_PKEY_get_raw_public_key(keypair->pkey, keypair->public_key,
                                     &len) != 1) ||
        (len != KEYEX_PUBLIC_KEY_LEN)) {
        keyex_keypair_cleanup(keypair);
        return KEYEX_ERR_CRYPTO;
    }
    return KEYEX_OK;
}

keyex_status_t keyex_keypair_generate(keyex_keypair_t *keypair)
{
    memset(keypair, 0, sizeof(*keypair));
    /* private scalar from OpenSSL's DRBG, clamped per RFC 7748 §5 */
    if (!keyex_private_heap()) {
        return KEYEX_ERR_CRYPTO;
    }
    keypair->pkey = CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_KEY_DERIVATION) ? NULL :
                    EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
    if (keypair->pkey == NULL) {
        crypt_local_failure_set("cannot generate an X25519 key");
        return KEYEX_ERR_CRYPTO;
    }
    return keyex_keypair_export_public(keypair);
}

keyex_status_t keyex_keypair_from_private(keyex_keypair_t *keypair,
                                          const uint8_t private_key[KEYEX_PRIVATE_KEY_LEN])
{
    memset(keypair, 0, sizeof(*keypair));
    if (!keyex_private_heap()) {
        return KEYEX_ERR_CRYPTO;
    }
    keypair->pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL,
                                                 private_key,
                                                 KEYEX_PRIVATE_KEY_LEN);
    if (keypair->pkey == NULL) {
        return KEYEX_ERR_CRYPTO;
    }
    return keyex_keypair_export_public(keypair);
}

void keyex_keypair_cleanup(keyex_keypair_t *keypair)
{
    EVP_PKEY_free(keypair->pkey);
    memset(keypair, 0, sizeof(*keypair));
}

keyex_status_t keyex_x25519(const keyex_keypair_t *local,
                            const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                            uint8_t shared[KEYEX_SECRET_LEN])
{
    static const uint8_t all_zero[KEYEX_SECRET_LEN] = {0};
    keyex_status_t status = KEYEX_ERR_CRYPTO;
    EVP_PKEY_CTX *ctx     = NULL;
    EVP_PKEY *peer;
    size_t len = KEYEX_SECRET_LEN;

    if (CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_KEY_DERIVATION)) {
        crypt_local_failure_set("X25519 failed");
        OPENSSL_cleanse(shared, KEYEX_SECRET_LEN);
        return KEYEX_ERR_CRYPTO;
    }
    peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer_public,
                                       KEYEX_PUBLIC_KEY_LEN);
    if (peer == NULL) {
        crypt_local_failure_set("X25519 failed");
        return KEYEX_ERR_CRYPTO;
    }

    ctx = EVP_PKEY_CTX_new_from_pkey(NULL, local->pkey, NULL);
    /* OpenSSL's derive refuses an all-zero output itself; the explicit
     * check below keeps RFC 7748 §6.1's requirement visible here. */
    if ((ctx != NULL) && (EVP_PKEY_derive_init(ctx) == 1) &&
        (EVP_PKEY_derive_set_peer(ctx, peer) == 1) &&
        (EVP_PKEY_derive(ctx, shared, &len) == 1) &&
        (len == KEYEX_SECRET_LEN) &&
        (CRYPTO_memcmp(shared, all_zero, KEYEX_SECRET_LEN) != 0)) {
        status = KEYEX_OK;
    } else {
        /* (or a low-order peer key, which OpenSSL refuses the same way:
         * only a job-secret holder gets one this far) */
        crypt_local_failure_set("X25519 failed");
        OPENSSL_cleanse(shared, KEYEX_SECRET_LEN);
    }

    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(peer);
    return status;
}

/* ---- HKDF --------------------------------------------------------------- */

static keyex_status_t keyex_hkdf(int mode, const uint8_t *salt,
                                 size_t salt_len, const uint8_t *key,
                                 size_t key_len, const uint8_t *info,
                                 size_t info_len, uint8_t *out, size_t out_len)
{
    OSSL_PARAM params[6], *p = params;
    keyex_status_t status = KEYEX_ERR_CRYPTO;
    EVP_KDF_CTX *ctx;
    EVP_KDF *kdf;

    kdf = CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_KEY_DERIVATION) ? NULL :
          EVP_KDF_fetch(NULL, "HKDF", NULL);
    ctx = (kdf != NULL) ? EVP_KDF_CTX_new(kdf) : NULL;
    EVP_KDF_free(kdf);
    if (ctx == NULL) {
        crypt_local_failure_set("HKDF failed");
        return KEYEX_ERR_CRYPTO;
    }

    *p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
                                            (char*)"SHA256", 0);
    *p++ = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void*)key,
                                             key_len);
    if (salt_len > 0) {
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                 (void*)salt, salt_len);
    }
    if (info_len > 0) {
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO,
                                                 (void*)info, info_len);
    }
    *p = OSSL_PARAM_construct_end();

    if (EVP_KDF_derive(ctx, out, out_len, params) == 1) {
        status = KEYEX_OK;
    } else {
        crypt_local_failure_set("HKDF failed");
    }
    EVP_KDF_CTX_free(ctx); /* cleanses its copies of key, salt, info */
    return status;
}

keyex_status_t keyex_hkdf_extract(const uint8_t *salt, size_t salt_len,
                                  const uint8_t *ikm, size_t ikm_len,
                                  uint8_t prk[KEYEX_SECRET_LEN])
{
    /* An absent salt is HashLen zero bytes (RFC 5869 §2.2); OpenSSL does
     * that itself when no salt parameter is given. */
    return keyex_hkdf(EVP_KDF_HKDF_MODE_EXTRACT_ONLY, salt, salt_len, ikm,
                      ikm_len, NULL, 0, prk, KEYEX_SECRET_LEN);
}

keyex_status_t keyex_hkdf_expand(const uint8_t prk[KEYEX_SECRET_LEN],
                                 const uint8_t *info, size_t info_len,
                                 uint8_t *okm, size_t okm_len)
{
    if ((okm_len == 0) || (okm_len > 255 * KEYEX_SECRET_LEN)) {
        return KEYEX_ERR_PARAM; /* RFC 5869 §2.3: L <= 255*HashLen */
    }
    return keyex_hkdf(EVP_KDF_HKDF_MODE_EXPAND_ONLY, NULL, 0, prk,
                      KEYEX_SECRET_LEN, info, info_len, okm, okm_len);
}

static keyex_status_t keyex_expand_label(const uint8_t secret[KEYEX_SECRET_LEN],
                                         const char *label, uint8_t *out,
                                         size_t out_len)
{
    char info[64];
    int len = snprintf(info, sizeof(info), KEYEX_LABEL_PREFIX "%s", label);

    return keyex_hkdf_expand(secret, (const uint8_t*)info, (size_t)len, out,
                             out_len);
}

/* ---- the schedule -------------------------------------------------------- */

const char *keyex_purpose_name(keyex_purpose_t purpose)
{
    switch (purpose) {
    case KEYEX_PURPOSE_RECORD: return "record";
    case KEYEX_PURPOSE_BULK:   return "bulk";
    default:                   return NULL;
    }
}

keyex_status_t keyex_derive_pair_secret(const keyex_keypair_t *local,
                                        const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t *job_secret,
                                        uint8_t pair_secret[KEYEX_SECRET_LEN])
{
    uint8_t dh[KEYEX_SECRET_LEN];
    keyex_status_t status;

    status = keyex_x25519(local, peer_public, dh);
    if (status == KEYEX_OK) {
        status = keyex_hkdf_extract(job_secret,
                                    job_secret ? KEYEX_JOB_SECRET_LEN : 0, dh,
                                    sizeof(dh), pair_secret);
    }
    OPENSSL_cleanse(dh, sizeof(dh));
    return status;
}

/* key and nonce prefix of the current generation, from keys->secret */
static keyex_status_t keyex_expand_traffic(keyex_traffic_keys_t *keys)
{
    keyex_status_t status;

    status = keyex_expand_label(keys->secret, "key", keys->key, keys->key_len);
    if (status == KEYEX_OK) {
        status = keyex_expand_label(keys->secret, "iv", keys->nonce_prefix,
                                    KEYEX_NONCE_PREFIX_LEN);
    }
    return status;
}

/* keys of generation `generation` whose secret is HKDF-Expand(prk, info):
 * the last step of every derivation below; keys wiped on failure */
static keyex_status_t keyex_derive_traffic(const uint8_t prk[KEYEX_SECRET_LEN],
                                           const uint8_t *info, size_t info_len,
                                           unsigned key_len, uint32_t generation,
                                           keyex_traffic_keys_t *keys)
{
    keyex_status_t status;

    memset(keys, 0, sizeof(*keys));
    keys->key_len    = key_len;
    keys->generation = generation;
    status = keyex_hkdf_expand(prk, info, info_len, keys->secret,
                               KEYEX_SECRET_LEN);
    if (status == KEYEX_OK) {
        status = keyex_expand_traffic(keys);
    }
    if (status != KEYEX_OK) {
        OPENSSL_cleanse(keys, sizeof(*keys));
    }
    return status;
}

keyex_status_t keyex_derive_flow_keys(const uint8_t pair_secret[KEYEX_SECRET_LEN],
                                      keyex_purpose_t purpose,
                                      const uint8_t sender_public[KEYEX_PUBLIC_KEY_LEN],
                                      const uint8_t receiver_public[KEYEX_PUBLIC_KEY_LEN],
                                      uint64_t flow_id, unsigned key_len,
                                      keyex_traffic_keys_t *keys)
{
    uint8_t info[64 + 2 * KEYEX_PUBLIC_KEY_LEN + 8];
    const char *purpose_name = keyex_purpose_name(purpose);
    size_t info_len;
    int i;

    if ((purpose_name == NULL) || ((key_len != 16) && (key_len != 32))) {
        return KEYEX_ERR_PARAM;
    }

    info_len = (size_t)snprintf((char*)info, 64, KEYEX_LABEL_PREFIX "%s",
                                purpose_name);
    memcpy(info + info_len, sender_public, KEYEX_PUBLIC_KEY_LEN);
    info_len += KEYEX_PUBLIC_KEY_LEN;
    memcpy(info + info_len, receiver_public, KEYEX_PUBLIC_KEY_LEN);
    info_len += KEYEX_PUBLIC_KEY_LEN;
    for (i = 7; i >= 0; --i) {
        info[info_len++] = (uint8_t)(flow_id >> (8 * i));
    }

    return keyex_derive_traffic(pair_secret, info, info_len, key_len, 0, keys);
}

keyex_status_t keyex_update_flow_keys(keyex_traffic_keys_t *keys)
{
    uint8_t next[KEYEX_SECRET_LEN];
    keyex_status_t status;

    status = keyex_expand_label(keys->secret, "key update", next, sizeof(next));
    if (status != KEYEX_OK) {
        return status;
    }
    memcpy(keys->secret, next, sizeof(next));
    OPENSSL_cleanse(next, sizeof(next));
    OPENSSL_cleanse(keys->key, sizeof(keys->key));
    ++keys->generation;
    return keyex_expand_traffic(keys);
}

keyex_usage_t keyex_usage_check(uint64_t records_done, uint64_t bytes_done,
                                uint64_t bytes)
{
    if ((records_done >= KEYEX_MAX_RECORDS_PER_KEY) ||
        (bytes > KEYEX_MAX_BYTES_PER_KEY) ||
        (bytes_done > KEYEX_MAX_BYTES_PER_KEY - bytes)) {
        return KEYEX_USAGE_EXHAUSTED;
    }
    if ((records_done + 1 >= KEYEX_REKEY_RECORDS) ||
        (bytes_done + bytes >= KEYEX_REKEY_BYTES)) {
        return KEYEX_USAGE_REKEY;
    }
    return KEYEX_USAGE_OK;
}

/* ---- collective teams (keyex.h) ------------------------------------------ */

static keyex_status_t keyex_team_prk(const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                     uint8_t prk[KEYEX_SECRET_LEN])
{
    static const char salt[] = "ucx-crypt v2 collective";

    return keyex_hkdf_extract((const uint8_t*)salt, sizeof(salt) - 1,
                              job_secret, KEYEX_JOB_SECRET_LEN, prk);
}

keyex_status_t keyex_derive_bootstrap_key(const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                          const void *job_id, size_t job_id_len,
                                          uint8_t key[KEYEX_SECRET_LEN])
{
    static const char label[] = "ucx-crypt v2 bootstrap";
    uint8_t prk[KEYEX_SECRET_LEN], info[sizeof(label) + KEYEX_JOB_ID_MAX];
    size_t info_len = sizeof(label) - 1;
    keyex_status_t status;

    if (job_id_len > KEYEX_JOB_ID_MAX) {
        return KEYEX_ERR_PARAM;
    }
    memcpy(info, label, info_len);
    if (job_id_len > 0) {
        info[info_len++] = 0; /* the label ends: no job id makes another's */
        memcpy(info + info_len, job_id, job_id_len);
        info_len += job_id_len;
    }
    status = keyex_team_prk(job_secret, prk);
    if (status == KEYEX_OK) {
        status = keyex_hkdf_expand(prk, info, info_len, key, KEYEX_SECRET_LEN);
    }
    OPENSSL_cleanse(prk, sizeof(prk));
    return status;
}

keyex_status_t keyex_derive_team_keys(const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                      const uint8_t transcript[KEYEX_TRANSCRIPT_LEN],
                                      unsigned key_len, keyex_traffic_keys_t *keys)
{
    static const char label[] = "ucx-crypt v2 collective";
    uint8_t prk[KEYEX_SECRET_LEN], info[sizeof(label) - 1 + KEYEX_TRANSCRIPT_LEN];
    keyex_status_t status;

    if ((key_len != 16) && (key_len != 32)) {
        return KEYEX_ERR_PARAM;
    }
    memcpy(info, label, sizeof(label) - 1);
    memcpy(info + sizeof(label) - 1, transcript, KEYEX_TRANSCRIPT_LEN);
    status = keyex_team_prk(job_secret, prk);
    if (status == KEYEX_OK) {
        status = keyex_derive_traffic(prk, info, sizeof(info), key_len, 0, keys);
    }
    OPENSSL_cleanse(prk, sizeof(prk));
    return status;
}

keyex_status_t keyex_derive_epoch_keys(const keyex_traffic_keys_t *team,
                                       uint32_t epoch, keyex_traffic_keys_t *keys)
{
    static const char label[] = KEYEX_LABEL_PREFIX "epoch";
    uint8_t info[sizeof(label) - 1 + 4];

    memcpy(info, label, sizeof(label) - 1);
    info[sizeof(label) - 1] = (uint8_t)(epoch >> 24);
    info[sizeof(label)]     = (uint8_t)(epoch >> 16);
    info[sizeof(label) + 1] = (uint8_t)(epoch >> 8);
    info[sizeof(label) + 2] = (uint8_t)epoch;
    return keyex_derive_traffic(team->secret, info, sizeof(info), team->key_len,
                                epoch, keys);
}

keyex_status_t keyex_derive_lane_key(const keyex_traffic_keys_t *team,
                                     uint8_t key[KEYEX_SECRET_LEN])
{
    /* its own HKDF output (RFC 5869 section 3.2, info as the context):
     * the lane's GMAC nonces (src, dst, sequence) never meet the frames'
     * nonces under one key */
    return keyex_expand_label(team->secret, "lane", key, team->key_len);
}

keyex_status_t keyex_mac(const uint8_t key[KEYEX_SECRET_LEN], const void *data,
                         size_t len, uint8_t mac[KEYEX_MAC_LEN])
{
    size_t out_len = 0;

    /* HMAC-SHA256 (RFC 2104, FIPS 198-1) through OpenSSL's EVP_MAC; Noise's
     * HKDF (src/keyex/noise.c) is made of it */
    if (CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_KEY_DERIVATION) ||
        (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, KEYEX_SECRET_LEN,
                   data, len, mac, KEYEX_MAC_LEN, &out_len) == NULL) ||
        (out_len != KEYEX_MAC_LEN)) {
        crypt_local_failure_set("HMAC-SHA256 failed");
        return KEYEX_ERR_CRYPTO;
    }
    return KEYEX_OK;
}

int keyex_mac_equal(const uint8_t a[KEYEX_MAC_LEN], const uint8_t b[KEYEX_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, KEYEX_MAC_LEN) == 0;
}

keyex_status_t keyex_hash(const void *data, size_t len,
                          uint8_t out[KEYEX_TRANSCRIPT_LEN])
{
    unsigned out_len = 0;

    if (CRYPT_FALLIBLE_FAILS(CRYPT_FALLIBLE_KEY_DERIVATION) ||
        (EVP_Digest(data, len, out, &out_len, EVP_sha256(), NULL) != 1) ||
        (out_len != KEYEX_TRANSCRIPT_LEN)) {
        crypt_local_failure_set("SHA-256 failed");
        return KEYEX_ERR_CRYPTO;
    }
    return KEYEX_OK;
}
