/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Noise_IKpsk2_25519_AESGCM_SHA256 (noise.h), written from the Noise
 * Protocol Framework revision 34: §5.1 CipherState, §5.2 SymmetricState,
 * §7.5 IK, §9 psk modifiers (every "e" token also runs MixKey(e) in a psk
 * handshake, §9.2), §12.4 AESGCM nonces, §4.3 HKDF over HMAC-SHA256.
 */
#include "keyex/noise.h"

#include <openssl/crypto.h>
#include <string.h>
#include <time.h>

/* exactly HASHLEN bytes, so h = the name itself (§5.2 InitializeSymmetric) */
static const char keyex_noise_protocol[] = "Noise_IKpsk2_25519_AESGCM_SHA256";
static const char keyex_noise_prologue[] = "ucx-crypt wire";

_Static_assert(sizeof(keyex_noise_protocol) - 1 == KEYEX_SECRET_LEN,
               "protocol name is HASHLEN bytes");

/* ---- §4.3 HKDF(chaining_key, input_key_material, num_outputs) ----------- */

static keyex_status_t keyex_noise_hkdf(const uint8_t ck[KEYEX_SECRET_LEN],
                                       const uint8_t *ikm, size_t ikm_len,
                                       uint8_t *out1, uint8_t *out2, uint8_t *out3)
{
    uint8_t temp[KEYEX_SECRET_LEN], buf[KEYEX_SECRET_LEN + 1];
    uint8_t o1[KEYEX_SECRET_LEN], o2[KEYEX_SECRET_LEN], o3[KEYEX_SECRET_LEN];
    keyex_status_t status;

    status = keyex_mac(ck, ikm, ikm_len, temp);
    buf[0] = 0x01;
    if (status == KEYEX_OK) {
        status = keyex_mac(temp, buf, 1, o1);
    }
    memcpy(buf, o1, KEYEX_SECRET_LEN);
    buf[KEYEX_SECRET_LEN] = 0x02;
    if (status == KEYEX_OK) {
        status = keyex_mac(temp, buf, sizeof(buf), o2);
    }
    if ((status == KEYEX_OK) && (out3 != NULL)) {
        memcpy(buf, o2, KEYEX_SECRET_LEN);
        buf[KEYEX_SECRET_LEN] = 0x03;
        status = keyex_mac(temp, buf, sizeof(buf), o3);
        memcpy(out3, o3, KEYEX_SECRET_LEN);
    }
    if (status == KEYEX_OK) {
        memcpy(out1, o1, KEYEX_SECRET_LEN);
        memcpy(out2, o2, KEYEX_SECRET_LEN);
    }
    OPENSSL_cleanse(temp, sizeof(temp));
    OPENSSL_cleanse(buf, sizeof(buf));
    OPENSSL_cleanse(o1, sizeof(o1));
    OPENSSL_cleanse(o2, sizeof(o2));
    OPENSSL_cleanse(o3, sizeof(o3));
    return status;
}

/* ---- §5.2 SymmetricState ------------------------------------------------ */

static keyex_status_t keyex_noise_mix_hash(keyex_noise_t *hs, const void *data,
                                           size_t len)
{
    uint8_t buf[KEYEX_SECRET_LEN + 128];

    if (len > sizeof(buf) - KEYEX_SECRET_LEN) {
        return KEYEX_ERR_PARAM;
    }
    memcpy(buf, hs->h, KEYEX_SECRET_LEN);
    memcpy(buf + KEYEX_SECRET_LEN, data, len);
    return keyex_hash(buf, KEYEX_SECRET_LEN + len, hs->h);
}

static keyex_status_t keyex_noise_mix_key(keyex_noise_t *hs, const uint8_t *ikm,
                                          size_t len)
{
    hs->has_k = 1;
    hs->n     = 0;
    return keyex_noise_hkdf(hs->ck, ikm, len, hs->ck, hs->k, NULL);
}

static keyex_status_t keyex_noise_mix_key_and_hash(keyex_noise_t *hs,
                                                   const uint8_t *ikm, size_t len)
{
    uint8_t temp_h[KEYEX_SECRET_LEN];
    keyex_status_t status;

    status = keyex_noise_hkdf(hs->ck, ikm, len, hs->ck, temp_h, hs->k);
    hs->has_k = 1;
    hs->n     = 0;
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_hash(hs, temp_h, sizeof(temp_h));
    }
    OPENSSL_cleanse(temp_h, sizeof(temp_h));
    return status;
}

static keyex_status_t keyex_noise_mix_dh(keyex_noise_t *hs,
                                         const keyex_keypair_t *local,
                                         const uint8_t remote[KEYEX_PUBLIC_KEY_LEN])
{
    uint8_t shared[KEYEX_SECRET_LEN];
    keyex_status_t status;

    /* a low-order remote point (all-zero result) is refused by keyex_x25519 */
    status = keyex_x25519(local, remote, shared);
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_key(hs, shared, sizeof(shared));
    }
    OPENSSL_cleanse(shared, sizeof(shared));
    return status;
}

void keyex_noise_nonce(uint64_t n, uint8_t nonce[CRYPT_AEAD_NONCE_LEN])
{
    int i;

    memset(nonce, 0, 4);
    for (i = 0; i < 8; ++i) {
        nonce[4 + i] = (uint8_t)(n >> (56 - 8 * i));
    }
}

/* EncryptAndHash / DecryptAndHash (every call here has a key) */
static keyex_status_t keyex_noise_crypt_and_hash(keyex_noise_t *hs, int encrypt,
                                                 const uint8_t *in, size_t len,
                                                 uint8_t *out)
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    crypt_aead_key_t key;
    crypt_aead_status_t astatus;

    if (!hs->has_k ||
        (crypt_aead_key_init(&key, CRYPT_AEAD_BACKEND_OPENSSL, hs->k,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK)) {
        return KEYEX_ERR_CRYPTO;
    }
    keyex_noise_nonce(hs->n++, nonce);
    if (encrypt) {
        astatus = crypt_aead_seal(&key, nonce, hs->h, KEYEX_SECRET_LEN, in, len,
                                  out, out + len);
    } else {
        astatus = crypt_aead_open(&key, nonce, hs->h, KEYEX_SECRET_LEN, in, len,
                                  out, in + len);
    }
    crypt_aead_key_cleanup(&key);
    if (astatus != CRYPT_AEAD_OK) {
        return (astatus == CRYPT_AEAD_ERR_AUTH) ? KEYEX_ERR_AUTH :
                                                  KEYEX_ERR_CRYPTO;
    }
    /* MixHash(ciphertext) */
    return keyex_noise_mix_hash(hs, encrypt ? out : in, len + CRYPT_AEAD_TAG_LEN);
}

/* ---- job secret: psk and mac1 keys --------------------------------------- */

static const uint8_t keyex_noise_no_secret[KEYEX_JOB_SECRET_LEN];

keyex_status_t keyex_noise_mac1_key(const uint8_t *job_secret,
                                    const uint8_t receiver_static[KEYEX_PUBLIC_KEY_LEN],
                                    uint8_t key[KEYEX_SECRET_LEN])
{
    static const char label[] = "ucx-crypt mac1--";
    uint8_t buf[sizeof(label) - 1 + KEYEX_JOB_SECRET_LEN + KEYEX_PUBLIC_KEY_LEN];
    keyex_status_t status;

    memcpy(buf, label, sizeof(label) - 1);
    memcpy(buf + sizeof(label) - 1,
           (job_secret != NULL) ? job_secret : keyex_noise_no_secret,
           KEYEX_JOB_SECRET_LEN);
    memcpy(buf + sizeof(label) - 1 + KEYEX_JOB_SECRET_LEN, receiver_static,
           KEYEX_PUBLIC_KEY_LEN);
    status = keyex_hash(buf, sizeof(buf), key);
    OPENSSL_cleanse(buf, sizeof(buf));
    return status;
}

/* HMAC-SHA256(key, label || a || b)[0..16): mac1 (no label: the message
 * alone, WireGuard whitepaper §5.4.4), mac2 and the cookie reply's MAC,
 * each of those two under its own label (they never take the same input) */
static keyex_status_t keyex_noise_mac16(const uint8_t key[KEYEX_SECRET_LEN],
                                        const char *label,
                                        const void *a, size_t a_len,
                                        const void *b, size_t b_len,
                                        uint8_t out[KEYEX_NOISE_MAC1_LEN])
{
    uint8_t buf[16 + KEYEX_NOISE_COOKIE_LEN + sizeof(keyex_noise_init_msg_t)];
    uint8_t mac[KEYEX_MAC_LEN];
    size_t label_len = strlen(label);
    keyex_status_t status;

    if (label_len + a_len + b_len > sizeof(buf)) {
        return KEYEX_ERR_PARAM;
    }
    memcpy(buf, label, label_len);
    memcpy(buf + label_len, a, a_len);
    if (b_len > 0) {
        memcpy(buf + label_len + a_len, b, b_len);
    }
    status = keyex_mac(key, buf, label_len + a_len + b_len, mac);
    memcpy(out, mac, KEYEX_NOISE_MAC1_LEN);
    OPENSSL_cleanse(mac, sizeof(mac));
    return status;
}

/* KEYEX_OK: `mac` is keyex_noise_mac16 of the same; KEYEX_ERR_AUTH: it is
 * not; another status: the HMAC failed here (a local failure, not the
 * sender's) */
static keyex_status_t keyex_noise_mac16_check(const uint8_t key[KEYEX_SECRET_LEN],
                                              const char *label,
                                              const void *a, size_t a_len,
                                              const void *b, size_t b_len,
                                              const uint8_t mac[KEYEX_NOISE_MAC1_LEN])
{
    uint8_t expected[KEYEX_NOISE_MAC1_LEN];
    keyex_status_t status;

    status = keyex_noise_mac16(key, label, a, a_len, b, b_len, expected);
    if (status != KEYEX_OK) {
        return status;
    }
    return (CRYPTO_memcmp(expected, mac, KEYEX_NOISE_MAC1_LEN) == 0) ?
           KEYEX_OK : KEYEX_ERR_AUTH;
}

/* ---- cookies (noise.h; WireGuard whitepaper §5.3, §5.4.7) ------------------- */

keyex_status_t keyex_noise_cookie_key(const uint8_t *job_secret,
                                      const uint8_t *receiver_static,
                                      uint8_t key[KEYEX_SECRET_LEN])
{
    static const char label[]    = "ucx-crypt cookie";
    static const char cm_label[] = "ucx-crypt cm cookie";
    uint8_t buf[sizeof(cm_label) - 1 + KEYEX_JOB_SECRET_LEN + KEYEX_PUBLIC_KEY_LEN];
    size_t len;
    keyex_status_t status;

    /* the labels differ, and so do the two inputs' lengths */
    if (receiver_static != NULL) {
        memcpy(buf, label, sizeof(label) - 1);
        len = sizeof(label) - 1;
    } else {
        memcpy(buf, cm_label, sizeof(cm_label) - 1);
        len = sizeof(cm_label) - 1;
    }
    memcpy(buf + len, (job_secret != NULL) ? job_secret : keyex_noise_no_secret,
           KEYEX_JOB_SECRET_LEN);
    len += KEYEX_JOB_SECRET_LEN;
    if (receiver_static != NULL) {
        memcpy(buf + len, receiver_static, KEYEX_PUBLIC_KEY_LEN);
        len += KEYEX_PUBLIC_KEY_LEN;
    }
    status = keyex_hash(buf, len, key);
    OPENSSL_cleanse(buf, sizeof(buf));
    return status;
}

keyex_status_t keyex_noise_mac2_set(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                    const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN],
                                    void *msg, size_t len)
{
    if (len < KEYEX_NOISE_MAC1_LEN) {
        return KEYEX_ERR_PARAM;
    }
    return keyex_noise_mac16(cookie_key, "mac2", cookie, KEYEX_NOISE_COOKIE_LEN,
                             msg, len - KEYEX_NOISE_MAC1_LEN,
                             (uint8_t*)msg + len - KEYEX_NOISE_MAC1_LEN);
}

keyex_status_t keyex_noise_mac2_check(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                      const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN],
                                      const void *msg, size_t len)
{
    if (len < KEYEX_NOISE_MAC1_LEN) {
        return KEYEX_ERR_PARAM;
    }
    return keyex_noise_mac16_check(cookie_key, "mac2", cookie,
                                   KEYEX_NOISE_COOKIE_LEN, msg,
                                   len - KEYEX_NOISE_MAC1_LEN,
                                   (const uint8_t*)msg + len - KEYEX_NOISE_MAC1_LEN);
}

keyex_status_t keyex_noise_cookie_reply_create(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                               const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN],
                                               const uint8_t answered[KEYEX_NOISE_MAC1_LEN],
                                               keyex_noise_cookie_msg_t *msg)
{
    memset(msg, 0, sizeof(*msg));
    msg->type    = KEYEX_NOISE_COOKIE_TYPE;
    msg->version = KEYEX_NOISE_VERSION;
    memcpy(msg->cookie, cookie, KEYEX_NOISE_COOKIE_LEN);
    return keyex_noise_mac16(cookie_key, "cookie reply", msg,
                             offsetof(keyex_noise_cookie_msg_t, mac), answered,
                             KEYEX_NOISE_MAC1_LEN, msg->mac);
}

keyex_status_t keyex_noise_cookie_reply_consume(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                                const uint8_t answered[KEYEX_NOISE_MAC1_LEN],
                                                const keyex_noise_cookie_msg_t *msg,
                                                uint8_t cookie[KEYEX_NOISE_COOKIE_LEN])
{
    keyex_status_t status;

    if ((msg->type != KEYEX_NOISE_COOKIE_TYPE) ||
        (msg->version != KEYEX_NOISE_VERSION) || (msg->reserved[0] != 0) ||
        (msg->reserved[1] != 0)) {
        return KEYEX_ERR_AUTH;
    }
    status = keyex_noise_mac16_check(cookie_key, "cookie reply", msg,
                                     offsetof(keyex_noise_cookie_msg_t, mac),
                                     answered, KEYEX_NOISE_MAC1_LEN, msg->mac);
    if (status != KEYEX_OK) {
        return status;
    }
    memcpy(cookie, msg->cookie, KEYEX_NOISE_COOKIE_LEN);
    return KEYEX_OK;
}

/* §5.2 InitializeSymmetric(protocol name of exactly HASHLEN bytes) and
 * the psk for `label`: the job secret through its own HKDF, never the
 * secret itself (RFC 5869 §3.1: extract first when the input is used for
 * several purposes; one label per handshake pattern) */
static keyex_status_t keyex_noise_init_symmetric(keyex_noise_t *hs,
                                                 const char *protocol,
                                                 const char *label,
                                                 const uint8_t *job_secret)
{
    uint8_t prk[KEYEX_SECRET_LEN];
    keyex_status_t status;

    memset(hs, 0, sizeof(*hs));
    memcpy(hs->h, protocol, KEYEX_SECRET_LEN);
    memcpy(hs->ck, hs->h, KEYEX_SECRET_LEN);
    status = keyex_hkdf_extract((const uint8_t*)label, strlen(label),
                                (job_secret != NULL) ? job_secret :
                                keyex_noise_no_secret, KEYEX_JOB_SECRET_LEN, prk);
    if (status == KEYEX_OK) {
        status = keyex_hkdf_expand(prk, (const uint8_t*)label, strlen(label),
                                   hs->psk, KEYEX_SECRET_LEN);
    }
    OPENSSL_cleanse(prk, sizeof(prk));
    return status;
}

keyex_status_t keyex_noise_start(keyex_noise_t *hs, const keyex_keypair_t *s,
                                 const uint8_t *job_secret,
                                 const keyex_noise_context_t *context)
{
    uint8_t prologue[sizeof(keyex_noise_prologue) - 1 + 3];
    keyex_status_t status;

    /* the label, then version, role and key size: what a peer must share */
    memcpy(prologue, keyex_noise_prologue, sizeof(keyex_noise_prologue) - 1);
    prologue[sizeof(prologue) - 3] = KEYEX_NOISE_VERSION;
    prologue[sizeof(prologue) - 2] = context->role;
    prologue[sizeof(prologue) - 1] = context->key_bytes;

    status = keyex_noise_init_symmetric(hs, keyex_noise_protocol,
                                        "ucx-crypt wire psk", job_secret);
    if (status == KEYEX_OK) {
        /* what we receive carries a mac1 keyed from our own static key */
        status = keyex_noise_mac1_key(job_secret, s->public_key,
                                      hs->mac1_key_local);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_hash(hs, prologue, sizeof(prologue));
    }
    return status;
}

void keyex_noise_cleanup(keyex_noise_t *hs)
{
    if (hs->e.pkey != NULL) {
        keyex_keypair_cleanup(&hs->e);
    }
    OPENSSL_cleanse(hs, sizeof(*hs));
}

/* The exporter secret: what the layer above derives its own keys of this
 * connection from. The same HKDF over the final chaining key as Split(),
 * with a label and the handshake hash h as input instead of Split()'s
 * empty one, so it is independent of the transport keys (HMAC-SHA256 as a
 * PRF on another input) and bound to the whole transcript (h: Noise §11.2,
 * channel binding), as TLS 1.3 exports keys from its master secret and
 * transcript hash (RFC 8446 §7.5). ck holds ee: once both ephemerals are
 * wiped, nobody re-derives it from the static keys and the job secret. */
static keyex_status_t keyex_noise_exporter(const keyex_noise_t *hs,
                                           uint8_t exporter[KEYEX_SECRET_LEN])
{
    static const char label[] = "ucx-crypt v1 exporter";
    uint8_t ikm[sizeof(label) - 1 + KEYEX_SECRET_LEN], unused[KEYEX_SECRET_LEN];
    keyex_status_t status;

    memcpy(ikm, label, sizeof(label) - 1);
    memcpy(ikm + sizeof(label) - 1, hs->h, KEYEX_SECRET_LEN);
    status = keyex_noise_hkdf(hs->ck, ikm, sizeof(ikm), exporter, unused, NULL);
    OPENSSL_cleanse(unused, sizeof(unused));
    return status;
}

static keyex_status_t keyex_noise_split(keyex_noise_t *hs, int initiator,
                                        keyex_noise_transport_t *keys)
{
    uint8_t k1[KEYEX_SECRET_LEN], k2[KEYEX_SECRET_LEN];
    keyex_status_t status;

    /* §5.2 Split(): k1 for the initiator's sending, k2 for the responder's */
    status = keyex_noise_hkdf(hs->ck, NULL, 0, k1, k2, NULL);
    if (status == KEYEX_OK) {
        memcpy(keys->send, initiator ? k1 : k2, KEYEX_NOISE_KEY_LEN);
        memcpy(keys->recv, initiator ? k2 : k1, KEYEX_NOISE_KEY_LEN);
        status = keyex_noise_exporter(hs, keys->exporter);
    }
    OPENSSL_cleanse(k1, sizeof(k1));
    OPENSSL_cleanse(k2, sizeof(k2));
    return status;
}

/* ---- the tokens both messages share ------------------------------------------ */

/* "e", sent: a fresh ephemeral, MixHash(e) and, in a psk handshake,
 * MixKey(e) (§9.2) */
static keyex_status_t keyex_noise_write_e(keyex_noise_t *hs,
                                          uint8_t out[KEYEX_PUBLIC_KEY_LEN])
{
    keyex_status_t status;

    status = keyex_keypair_generate(&hs->e);
    if (status == KEYEX_OK) {
        memcpy(out, hs->e.public_key, KEYEX_PUBLIC_KEY_LEN);
        status = keyex_noise_mix_hash(hs, out, KEYEX_PUBLIC_KEY_LEN);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_key(hs, out, KEYEX_PUBLIC_KEY_LEN);
    }
    return status;
}

/* "e", received */
static keyex_status_t keyex_noise_read_e(keyex_noise_t *hs,
                                         const uint8_t in[KEYEX_PUBLIC_KEY_LEN])
{
    keyex_status_t status;

    memcpy(hs->re, in, KEYEX_PUBLIC_KEY_LEN);
    status = keyex_noise_mix_hash(hs, hs->re, KEYEX_PUBLIC_KEY_LEN);
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_key(hs, hs->re, KEYEX_PUBLIC_KEY_LEN);
    }
    return status;
}

/* ---- the messages ---------------------------------------------------------- */

keyex_status_t keyex_noise_init_create(keyex_noise_t *hs, const keyex_keypair_t *s,
                                       const uint8_t *job_secret,
                                       const uint8_t rs[KEYEX_PUBLIC_KEY_LEN],
                                       const uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN],
                                       keyex_noise_init_msg_t *msg)
{
    keyex_status_t status;

    memset(msg, 0, sizeof(*msg));
    msg->type    = KEYEX_NOISE_INIT_TYPE;
    msg->version = KEYEX_NOISE_VERSION;
    memcpy(hs->rs, rs, KEYEX_PUBLIC_KEY_LEN);

    /* <- s */
    status = keyex_noise_mix_hash(hs, rs, KEYEX_PUBLIC_KEY_LEN);
    /* -> e */
    if (status == KEYEX_OK) {
        status = keyex_noise_write_e(hs, msg->ephemeral);
    }
    /* es */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, &hs->e, rs);
    }
    /* s */
    if (status == KEYEX_OK) {
        status = keyex_noise_crypt_and_hash(hs, 1, s->public_key,
                                            KEYEX_PUBLIC_KEY_LEN,
                                            msg->encrypted_static);
    }
    /* ss */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, s, rs);
    }
    /* payload: the timestamp */
    if (status == KEYEX_OK) {
        status = keyex_noise_crypt_and_hash(hs, 1, timestamp,
                                            KEYEX_NOISE_TIMESTAMP_LEN,
                                            msg->encrypted_timestamp);
    }
    /* mac1, keyed from the job secret and the responder's static key */
    if (status == KEYEX_OK) {
        status = keyex_noise_mac1_key(job_secret, rs, hs->mac1_key_remote);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_mac16(hs->mac1_key_remote, "", msg,
                                   offsetof(keyex_noise_init_msg_t, mac1), NULL,
                                   0, msg->mac1);
    }
    return status;
}

/* An initiation's type, version, reserved bytes and mac1: KEYEX_ERR_AUTH
 * for the sender's fault, another status for a local failure */
static keyex_status_t keyex_noise_init_check(const uint8_t mac1_key[KEYEX_SECRET_LEN],
                                             const keyex_noise_init_msg_t *msg)
{
    if ((msg->type != KEYEX_NOISE_INIT_TYPE) ||
        (msg->version != KEYEX_NOISE_VERSION) || (msg->reserved[0] != 0) ||
        (msg->reserved[1] != 0)) {
        return KEYEX_ERR_AUTH;
    }
    return keyex_noise_mac16_check(mac1_key, "", msg,
                                   offsetof(keyex_noise_init_msg_t, mac1), NULL,
                                   0, msg->mac1);
}

int keyex_noise_init_precheck(const uint8_t mac1_key[KEYEX_SECRET_LEN],
                              const keyex_noise_init_msg_t *msg)
{
    return keyex_noise_init_check(mac1_key, msg) == KEYEX_OK;
}

keyex_status_t keyex_noise_init_consume(keyex_noise_t *hs, const keyex_keypair_t *s,
                                        const keyex_noise_init_msg_t *msg,
                                        uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN])
{
    keyex_status_t status;

    status = keyex_noise_init_check(hs->mac1_key_local, msg);
    if (status != KEYEX_OK) {
        return status;
    }
    /* <- s (our own) */
    status = keyex_noise_mix_hash(hs, s->public_key, KEYEX_PUBLIC_KEY_LEN);
    /* -> e */
    if (status == KEYEX_OK) {
        status = keyex_noise_read_e(hs, msg->ephemeral);
    }
    /* es (our static with their ephemeral) */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, s, hs->re);
    }
    /* s */
    if (status == KEYEX_OK) {
        status = keyex_noise_crypt_and_hash(hs, 0, msg->encrypted_static,
                                            KEYEX_PUBLIC_KEY_LEN, hs->rs);
    }
    /* ss */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, s, hs->rs);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_crypt_and_hash(hs, 0, msg->encrypted_timestamp,
                                            KEYEX_NOISE_TIMESTAMP_LEN, timestamp);
    }
    return status;
}

keyex_status_t keyex_noise_response_create(keyex_noise_t *hs,
                                           const uint8_t *job_secret,
                                           uint8_t flags,
                                           keyex_noise_response_msg_t *msg,
                                           keyex_noise_transport_t *keys)
{
    keyex_status_t status;

    memset(msg, 0, sizeof(*msg));
    msg->type    = KEYEX_NOISE_RESPONSE_TYPE;
    msg->version = KEYEX_NOISE_VERSION;

    /* <- e */
    status = keyex_noise_write_e(hs, msg->ephemeral);
    /* ee */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, &hs->e, hs->re);
    }
    /* se (their static with our ephemeral) */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, &hs->e, hs->rs);
    }
    /* psk */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_key_and_hash(hs, hs->psk, KEYEX_SECRET_LEN);
    }
    /* payload: the flags */
    if (status == KEYEX_OK) {
        status = keyex_noise_crypt_and_hash(hs, 1, &flags, 1,
                                            msg->encrypted_flags);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_mac1_key(job_secret, hs->rs, hs->mac1_key_remote);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_mac16(hs->mac1_key_remote, "", msg,
                                   offsetof(keyex_noise_response_msg_t, mac1),
                                   NULL, 0, msg->mac1);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_split(hs, 0, keys);
    }
    return status;
}

keyex_status_t keyex_noise_response_consume(keyex_noise_t *hs,
                                            const keyex_keypair_t *s,
                                            const keyex_noise_response_msg_t *msg,
                                            uint8_t *flags,
                                            keyex_noise_transport_t *keys)
{
    keyex_status_t status;

    if ((msg->type != KEYEX_NOISE_RESPONSE_TYPE) ||
        (msg->version != KEYEX_NOISE_VERSION) || (msg->reserved[0] != 0) ||
        (msg->reserved[1] != 0)) {
        return KEYEX_ERR_AUTH;
    }
    status = keyex_noise_mac16_check(hs->mac1_key_local, "", msg,
                                     offsetof(keyex_noise_response_msg_t, mac1),
                                     NULL, 0, msg->mac1);
    if (status != KEYEX_OK) {
        return status;
    }
    /* <- e */
    status = keyex_noise_read_e(hs, msg->ephemeral);
    /* ee */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, &hs->e, hs->re);
    }
    /* se (our static with their ephemeral) */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, s, hs->re);
    }
    /* psk */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_key_and_hash(hs, hs->psk, KEYEX_SECRET_LEN);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_crypt_and_hash(hs, 0, msg->encrypted_flags, 1,
                                            flags);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_split(hs, 1, keys);
    }
    return status;
}

/* ---- the connection manager's handshake: Noise_NNpsk0 ----------------------- */

static const char keyex_noise_cm_protocol[] = "Noise_NNpsk0_25519_AESGCM_SHA256";
/* (the label and the version: the cm's own keys are always 256-bit, and it
 * has one user) */
static const char keyex_noise_cm_prologue[] = "ucx-crypt cm\x02";
_Static_assert(KEYEX_NOISE_VERSION == 2, "the cm prologue names the version");

_Static_assert(sizeof(keyex_noise_cm_protocol) - 1 == KEYEX_SECRET_LEN,
               "cm protocol name is HASHLEN bytes");

keyex_status_t keyex_noise_cm_start(keyex_noise_t *hs, const uint8_t *job_secret)
{
    keyex_status_t status;

    status = keyex_noise_init_symmetric(hs, keyex_noise_cm_protocol,
                                        "ucx-crypt cm psk", job_secret);
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_hash(hs, keyex_noise_cm_prologue,
                                      sizeof(keyex_noise_cm_prologue) - 1);
    }
    return status;
}

static int keyex_noise_cm_header_ok(const keyex_noise_cm_msg_t *msg, uint8_t type)
{
    return (msg->type == type) && (msg->version == KEYEX_NOISE_VERSION) &&
           (msg->reserved[0] == 0) && (msg->reserved[1] == 0);
}

/* the empty payload: only its tag goes on the wire */
static keyex_status_t keyex_noise_cm_seal_empty(keyex_noise_t *hs,
                                                uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    return keyex_noise_crypt_and_hash(hs, 1, tag, 0, tag);
}

static keyex_status_t keyex_noise_cm_open_empty(keyex_noise_t *hs,
                                                const uint8_t tag[CRYPT_AEAD_TAG_LEN])
{
    uint8_t none[1];

    return keyex_noise_crypt_and_hash(hs, 0, tag, 0, none);
}

keyex_status_t keyex_noise_cm_init_create(keyex_noise_t *hs,
                                          keyex_noise_cm_init_msg_t *init)
{
    keyex_noise_cm_msg_t *msg = &init->msg;
    keyex_status_t status;

    memset(init, 0, sizeof(*init));
    msg->type    = KEYEX_NOISE_CM_INIT_TYPE;
    msg->version = KEYEX_NOISE_VERSION;
    /* -> psk */
    status = keyex_noise_mix_key_and_hash(hs, hs->psk, KEYEX_SECRET_LEN);
    /* e */
    if (status == KEYEX_OK) {
        status = keyex_noise_write_e(hs, msg->ephemeral);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_cm_seal_empty(hs, msg->tag);
    }
    return status;
}

keyex_status_t keyex_noise_cm_init_consume(keyex_noise_t *hs,
                                           const keyex_noise_cm_init_msg_t *init)
{
    const keyex_noise_cm_msg_t *msg = &init->msg;
    keyex_status_t status;

    if (!keyex_noise_cm_header_ok(msg, KEYEX_NOISE_CM_INIT_TYPE)) {
        return KEYEX_ERR_AUTH;
    }
    status = keyex_noise_mix_key_and_hash(hs, hs->psk, KEYEX_SECRET_LEN);
    if (status == KEYEX_OK) {
        status = keyex_noise_read_e(hs, msg->ephemeral);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_cm_open_empty(hs, msg->tag);
    }
    return status;
}

keyex_status_t keyex_noise_cm_response_create(keyex_noise_t *hs,
                                              keyex_noise_cm_msg_t *msg,
                                              keyex_noise_transport_t *keys)
{
    keyex_status_t status;

    memset(msg, 0, sizeof(*msg));
    msg->type    = KEYEX_NOISE_CM_RESPONSE_TYPE;
    msg->version = KEYEX_NOISE_VERSION;
    /* <- e */
    status = keyex_noise_write_e(hs, msg->ephemeral);
    /* ee */
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, &hs->e, hs->re);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_cm_seal_empty(hs, msg->tag);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_split(hs, 0, keys);
    }
    return status;
}

keyex_status_t keyex_noise_cm_response_consume(keyex_noise_t *hs,
                                               const keyex_noise_cm_msg_t *msg,
                                               keyex_noise_transport_t *keys)
{
    keyex_status_t status;

    if (!keyex_noise_cm_header_ok(msg, KEYEX_NOISE_CM_RESPONSE_TYPE)) {
        return KEYEX_ERR_AUTH;
    }
    status = keyex_noise_read_e(hs, msg->ephemeral);
    if (status == KEYEX_OK) {
        status = keyex_noise_mix_dh(hs, &hs->e, hs->re);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_cm_open_empty(hs, msg->tag);
    }
    if (status == KEYEX_OK) {
        status = keyex_noise_split(hs, 1, keys);
    }
    return status;
}

void keyex_noise_timestamp_now(uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN])
{
    /* strictly increasing within the process, even for two handshakes in
     * one clock tick: the responder refuses a timestamp that is not above
     * the last one it took from the same static key */
    static uint64_t last_ns;
    struct timespec now;
    uint64_t ns, prev, secs;
    uint32_t nanos;
    int i;

    clock_gettime(CLOCK_REALTIME, &now);
    ns   = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    prev = __atomic_load_n(&last_ns, __ATOMIC_RELAXED);
    do {
        if (ns <= prev) {
            ns = prev + 1;
        }
    } while (!__atomic_compare_exchange_n(&last_ns, &prev, ns, 0,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    secs  = 0x400000000000000aull + ns / 1000000000ull; /* TAI64 label */
    nanos = (uint32_t)(ns % 1000000000ull);
    for (i = 0; i < 8; ++i) {
        timestamp[i] = (uint8_t)(secs >> (56 - 8 * i));
    }
    for (i = 0; i < 4; ++i) {
        timestamp[8 + i] = (uint8_t)(nanos >> (24 - 8 * i));
    }
}
