/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection handshake of crypt's own wire: Noise_IKpsk2 (the Noise
 * Protocol Framework, revision 34, §7.5 pattern IK with the psk2 modifier
 * of §9) over X25519, AES-256-GCM and SHA-256, with the first message
 * guarded by a MAC in the way of WireGuard's mac1 (WireGuard whitepaper
 * §5.4.4) and refused when replayed by its TAI64N timestamp (§5.1, §5.4.2).
 *
 *   <- s                       (the responder's static key: its address)
 *   -> e, es, s, ss, {timestamp}            initiation, 144 bytes
 *   <- e, ee, se, psk, {flags}              response, 69 bytes
 *   (<- cookie reply, 36 bytes, then a new initiation with mac2: below)
 *
 * prologue = "ucx-crypt wire" || version || role || key size (§6:
 *            what both ends must share; keyex_noise_context_t)
 * psk  = HKDF-Expand(HKDF-Extract("ucx-crypt wire psk", job secret), ...)
 * mac1 = HMAC-SHA256(SHA-256("ucx-crypt mac1--" || job secret ||
 *                            receiver static), message up to mac1)[0..16)
 *
 * The responder checks the initiation's size and mac1 before anything else
 * (a party without the job secret never reaches a DH), then its timestamp
 * against the greatest one it took from that static key.
 *
 * Cookies (WireGuard whitepaper §5.3, §5.4.7), for both handshakes here.
 * mac1 keeps out whoever lacks the job secret, but a recorded first message
 * passes it again. A responder under load answers a first message whose
 * mac2 is not valid with a cookie reply instead of a DH; the initiator
 * sends a new first message whose mac2 covers that cookie:
 *   cookie     = HMAC-SHA256(a random secret of the responder, changed
 *                every two minutes, the connection's source address)[0..16)
 *                (the responder's, src/uct_crypt/wire/wire_admit.h)
 *   cookie key = SHA-256("ucx-crypt cookie" || job secret || receiver
 *                static), or SHA-256("ucx-crypt cm cookie" || job secret)
 *   mac2       = HMAC-SHA256(cookie key, "mac2" || cookie || message up to
 *                mac2)[0..16); 16 zero bytes without a cookie
 *   reply      = type, version, two zero bytes, cookie, HMAC-SHA256(cookie
 *                key, "cookie reply" || those 20 bytes || the answered
 *                message's mac1)[0..16)
 * WireGuard encrypts the cookie under a key anyone who knows the
 * responder's public key can make, so that only who received it can use
 * it. Here the cookie travels in clear and mac2 is keyed from the job
 * secret instead: a replayer, whose cookie reply reaches it, still cannot
 * make mac2, so its replay costs no DH; and no cipher with a nonce to
 * keep unique under a long-lived key is needed. The reply's own MAC lets
 * the initiator refuse a cookie reply that no job-secret holder made. Both sides end
 * with a pair of 32-byte transport keys (Split(), §5.2), one per direction,
 * and an exporter secret bound to the transcript (keyex_noise_transport_t).
 * Everything here is pure computation on fixed-size buffers: the messages
 * are built and parsed only here (and fuzzed).
 */
#ifndef UCX_CRYPT_KEYEX_NOISE_H
#define UCX_CRYPT_KEYEX_NOISE_H

#include "keyex/keyex.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    KEYEX_NOISE_KEY_LEN       = 32, /* AES-256 transport keys, Noise §5.1 */
    KEYEX_NOISE_MAC1_LEN      = 16, /* truncated HMAC, as WireGuard's 16 B */
    KEYEX_NOISE_TIMESTAMP_LEN = 12, /* TAI64N, WireGuard §5.4.2 */
    KEYEX_NOISE_COOKIE_LEN    = 16, /* WireGuard §5.4.7 */
    KEYEX_NOISE_INIT_TYPE     = 1,
    KEYEX_NOISE_RESPONSE_TYPE = 2,
    KEYEX_NOISE_COOKIE_TYPE   = 5,  /* a cookie reply, to either handshake */
    KEYEX_NOISE_REFUSAL_TYPE  = 6,  /* a cm server's word before it closes */
    KEYEX_NOISE_VERSION       = 2,  /* 2: mac2 and cookie replies */
    /* response payload: the responder has a connection of its own to the
     * initiator, and asks it to send there (crypt's wire: one connection
     * per pair) */
    KEYEX_NOISE_RESPONSE_REDIRECT = 1,
    /* with REDIRECT: one of those is still being opened (worth waiting
     * for; without it, the initiator moves only to one it already has) */
    KEYEX_NOISE_RESPONSE_OPENING  = 2
};

/* Initiation (144 bytes): type, version, two zero bytes, the initiator's
 * ephemeral key, its static key encrypted (with tag), the timestamp
 * encrypted (with tag), mac1 over everything before it, mac2 over
 * everything before it (zeros without a cookie). */
typedef struct keyex_noise_init_msg {
    uint8_t type;
    uint8_t version;
    uint8_t reserved[2];
    uint8_t ephemeral[KEYEX_PUBLIC_KEY_LEN];
    uint8_t encrypted_static[KEYEX_PUBLIC_KEY_LEN + CRYPT_AEAD_TAG_LEN];
    uint8_t encrypted_timestamp[KEYEX_NOISE_TIMESTAMP_LEN + CRYPT_AEAD_TAG_LEN];
    uint8_t mac1[KEYEX_NOISE_MAC1_LEN];
    uint8_t mac2[KEYEX_NOISE_MAC1_LEN];
} __attribute__((packed)) keyex_noise_init_msg_t;

/* Response (69 bytes): type, version, two zero bytes, the responder's
 * ephemeral key, its one-byte payload encrypted (KEYEX_NOISE_RESPONSE_*
 * flags) with its tag, mac1. */
typedef struct keyex_noise_response_msg {
    uint8_t type;
    uint8_t version;
    uint8_t reserved[2];
    uint8_t ephemeral[KEYEX_PUBLIC_KEY_LEN];
    uint8_t encrypted_flags[1 + CRYPT_AEAD_TAG_LEN];
    uint8_t mac1[KEYEX_NOISE_MAC1_LEN];
} __attribute__((packed)) keyex_noise_response_msg_t;

/* Cookie reply (36 bytes), to a first message of either handshake:
 * type, version, two zero bytes, the cookie, its MAC (above). */
typedef struct keyex_noise_cookie_msg {
    uint8_t type;
    uint8_t version;
    uint8_t reserved[2];
    uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
    uint8_t mac[KEYEX_NOISE_MAC1_LEN];
} __attribute__((packed)) keyex_noise_cookie_msg_t;

#ifndef __cplusplus
_Static_assert(sizeof(keyex_noise_init_msg_t) == 144, "initiation layout");
_Static_assert(sizeof(keyex_noise_response_msg_t) == 69, "response layout");
_Static_assert(sizeof(keyex_noise_cookie_msg_t) == 36, "cookie reply layout");
#endif

/* The state of one handshake (symmetric state of Noise §5.2 plus the
 * local ephemeral). Keep it in secure memory (keyex_secure_alloc); wiped
 * by keyex_noise_cleanup. */
typedef struct keyex_noise {
    uint8_t         ck[KEYEX_SECRET_LEN];
    uint8_t         h[KEYEX_SECRET_LEN];
    uint8_t         k[KEYEX_NOISE_KEY_LEN];
    uint64_t        n;
    int             has_k;
    keyex_keypair_t e;
    uint8_t         re[KEYEX_PUBLIC_KEY_LEN];   /* remote ephemeral */
    uint8_t         rs[KEYEX_PUBLIC_KEY_LEN];   /* remote static */
    uint8_t         psk[KEYEX_SECRET_LEN];
    uint8_t         mac1_key_local[KEYEX_SECRET_LEN];  /* checks what we get */
    uint8_t         mac1_key_remote[KEYEX_SECRET_LEN]; /* marks what we send */
} keyex_noise_t;

/* The transport keys of one connection, one per direction, and its
 * exporter secret: the same on both sides, fresh per handshake (it mixes
 * the two ephemerals' DH), for the keys the layer above derives for what
 * it sends on this connection (keyex_derive_flow_keys). */
typedef struct keyex_noise_transport {
    uint8_t send[KEYEX_NOISE_KEY_LEN];
    uint8_t recv[KEYEX_NOISE_KEY_LEN];
    uint8_t exporter[KEYEX_SECRET_LEN];
} keyex_noise_transport_t;

/* What both ends must agree on besides the keys, bound into the
 * handshake hash as the prologue with the protocol's version (Noise,
 * revision 34, §6: the prologue is data both parties confirm is identical):
 * a peer that differs fails the handshake, instead of a record later. */
enum {
    KEYEX_NOISE_ROLE_RECORDS = 1, /* crypt's records (the data iface) */
    KEYEX_NOISE_ROLE_LANE    = 2  /* the collective lane's chunks */
};
typedef struct keyex_noise_context {
    uint8_t role;      /* KEYEX_NOISE_ROLE_*: which user of the wire */
    uint8_t key_bytes; /* of the keys derived above it: 16 or 32 (0: none) */
} keyex_noise_context_t;

/* Start a handshake: the local static key, the job secret (NULL only
 * where the user chose to run unauthenticated: then psk and mac1 keys
 * are derived from 32 zero bytes and keep out no one), the context. */
keyex_status_t keyex_noise_start(keyex_noise_t *hs, const keyex_keypair_t *s,
                                 const uint8_t *job_secret,
                                 const keyex_noise_context_t *context);

/* The mac1 key of messages sent to `receiver_static` */
keyex_status_t keyex_noise_mac1_key(const uint8_t *job_secret,
                                    const uint8_t receiver_static[KEYEX_PUBLIC_KEY_LEN],
                                    uint8_t key[KEYEX_SECRET_LEN]);

/* Initiator: the initiation to the responder `rs`, carrying `timestamp`. */
keyex_status_t keyex_noise_init_create(keyex_noise_t *hs, const keyex_keypair_t *s,
                                       const uint8_t *job_secret,
                                       const uint8_t rs[KEYEX_PUBLIC_KEY_LEN],
                                       const uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN],
                                       keyex_noise_init_msg_t *msg);

/* The cookie key of first messages sent to `receiver_static` (own wire),
 * or, with NULL, to a connection manager server (which has no static key) */
keyex_status_t keyex_noise_cookie_key(const uint8_t *job_secret,
                                      const uint8_t *receiver_static,
                                      uint8_t key[KEYEX_SECRET_LEN]);

/* Initiator: mac2 of a first message of `len` bytes, written into its
 * last KEYEX_NOISE_MAC1_LEN bytes, over what comes before them. */
keyex_status_t keyex_noise_mac2_set(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                    const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN],
                                    void *msg, size_t len);

/* Responder: KEYEX_OK when the last KEYEX_NOISE_MAC1_LEN bytes of `msg`
 * are mac2 under `cookie`; KEYEX_ERR_AUTH when not; another status: the
 * HMAC failed here. */
keyex_status_t keyex_noise_mac2_check(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                      const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN],
                                      const void *msg, size_t len);

/* Responder: the cookie reply to the first message whose mac1 (the cm's:
 * its tag) is `answered`. */
keyex_status_t keyex_noise_cookie_reply_create(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                               const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN],
                                               const uint8_t answered[KEYEX_NOISE_MAC1_LEN],
                                               keyex_noise_cookie_msg_t *msg);

/* Initiator: check a cookie reply to the message of mac1 `answered` and
 * take its cookie (KEYEX_ERR_AUTH: not from a job-secret holder, or not
 * to that message). */
keyex_status_t keyex_noise_cookie_reply_consume(const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                                const uint8_t answered[KEYEX_NOISE_MAC1_LEN],
                                                const keyex_noise_cookie_msg_t *msg,
                                                uint8_t cookie[KEYEX_NOISE_COOKIE_LEN]);

/* Responder, step 1 (cheap, no handshake state needed): type, version,
 * reserved bytes and mac1, under `mac1_key` = keyex_noise_mac1_key(job
 * secret, the responder's own static key), the same for every initiation
 * it receives. 0 also when the HMAC failed here, which crypt_local_failure
 * then says (a local failure, not the sender's). */
int keyex_noise_init_precheck(const uint8_t mac1_key[KEYEX_SECRET_LEN],
                              const keyex_noise_init_msg_t *msg);

/* Responder, step 2: decrypt the initiator's static key into hs->rs and
 * the timestamp; the caller then refuses a timestamp not above the last
 * one of hs->rs before answering. */
keyex_status_t keyex_noise_init_consume(keyex_noise_t *hs, const keyex_keypair_t *s,
                                        const keyex_noise_init_msg_t *msg,
                                        uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN]);

/* Responder: the response carrying `flags`, and the transport keys. */
keyex_status_t keyex_noise_response_create(keyex_noise_t *hs,
                                           const uint8_t *job_secret,
                                           uint8_t flags,
                                           keyex_noise_response_msg_t *msg,
                                           keyex_noise_transport_t *keys);

/* Initiator: check the response (mac1 first): its flags, and the
 * transport keys. */
keyex_status_t keyex_noise_response_consume(keyex_noise_t *hs,
                                            const keyex_keypair_t *s,
                                            const keyex_noise_response_msg_t *msg,
                                            uint8_t *flags,
                                            keyex_noise_transport_t *keys);

/*
 * The connection manager's handshake (client/server programs, which know
 * a socket address but not the peer's static key): Noise_NNpsk0 over the
 * same primitives (§7.4 NN with the psk0 modifier of §9):
 *
 *   -> psk, e, {}          initiation, 68 bytes (with mac2)
 *   <- e, ee, {}           response, 52 bytes (or a cookie reply)
 *
 * The initiation's empty payload is sealed under a key that mixes the psk
 * and the initiator's ephemeral: the responder checks its tag with two
 * HKDFs and one AES-GCM open, no DH (the "MAC-checked first message" of
 * the trust boundary); a party without the job secret never gets past it.
 * Both sides then hold transport keys that mix both ephemerals (forward
 * secrecy); what the connection manager exchanges travels under them.
 * A replayed initiation gets the replayer nothing: without the
 * initiator's ephemeral secret it cannot derive the keys, and nothing is
 * delivered to the application before the initiator has proven them by a
 * sealed message. The responder refuses a replay of one it took recently
 * by its ephemeral, before the DH (src/uct_crypt/wire/wire_admit.h); an
 * older one costs it one DH, unless the server is under load: then a
 * first message needs a valid mac2 (cookies, above) before the DH.
 */
typedef struct keyex_noise_cm_msg {
    uint8_t type;
    uint8_t version;
    uint8_t reserved[2];
    uint8_t ephemeral[KEYEX_PUBLIC_KEY_LEN];
    uint8_t tag[CRYPT_AEAD_TAG_LEN];   /* the sealed empty payload */
} __attribute__((packed)) keyex_noise_cm_msg_t;

/* The client's first message: the same, and mac2 over it (the tag is what
 * a cookie reply names as the message's mac1) */
typedef struct keyex_noise_cm_init_msg {
    keyex_noise_cm_msg_t msg;
    uint8_t              mac2[KEYEX_NOISE_MAC1_LEN];
} __attribute__((packed)) keyex_noise_cm_init_msg_t;

enum {
    KEYEX_NOISE_CM_INIT_TYPE     = 3,
    KEYEX_NOISE_CM_RESPONSE_TYPE = 4
};

#ifndef __cplusplus
_Static_assert(sizeof(keyex_noise_cm_msg_t) == 52, "cm handshake layout");
_Static_assert(sizeof(keyex_noise_cm_init_msg_t) == 68, "cm first message layout");
#endif

/* What a connection manager server says, in clear, when it ends a
 * connection before the handshake was done, so that the client can tell
 * its user what happened instead of listing every cause. It is not
 * authenticated (it cannot be: the client may hold another secret): an
 * attacker on the path could send it, as it could reset the connection;
 * it changes only the words of an error. 4 bytes: type, version, reason,
 * zero. */
typedef struct keyex_noise_refusal_msg {
    uint8_t type;
    uint8_t version;
    uint8_t reason;   /* KEYEX_NOISE_REFUSED_* */
    uint8_t reserved;
} __attribute__((packed)) keyex_noise_refusal_msg_t;

enum {
    KEYEX_NOISE_REFUSED_AUTH  = 1, /* the first message failed its tag */
    KEYEX_NOISE_REFUSED_BUSY  = 2, /* half-open slots all taken: closed */
    KEYEX_NOISE_REFUSED_LOCAL = 3  /* the server failed (its log says) */
};

/* Start a connection manager handshake (the job secret as in
 * keyex_noise_start; a psk of its own label) */
keyex_status_t keyex_noise_cm_start(keyex_noise_t *hs, const uint8_t *job_secret);

/* Client: the initiation (mac2 zero: keyex_noise_mac2_set adds one) */
keyex_status_t keyex_noise_cm_init_create(keyex_noise_t *hs,
                                          keyex_noise_cm_init_msg_t *msg);

/* Server: check and take the initiation (KEYEX_ERR_AUTH: not from a
 * holder of the job secret, or not an initiation at all); mac2 is the
 * caller's to check */
keyex_status_t keyex_noise_cm_init_consume(keyex_noise_t *hs,
                                           const keyex_noise_cm_init_msg_t *msg);

/* Server: the response, and the transport keys (exporter included) */
keyex_status_t keyex_noise_cm_response_create(keyex_noise_t *hs,
                                              keyex_noise_cm_msg_t *msg,
                                              keyex_noise_transport_t *keys);

/* Client: check the response, and the transport keys */
keyex_status_t keyex_noise_cm_response_consume(keyex_noise_t *hs,
                                               const keyex_noise_cm_msg_t *msg,
                                               keyex_noise_transport_t *keys);

void keyex_noise_cleanup(keyex_noise_t *hs);

/* The AESGCM nonce of the n-th message under one key (§5.1 CipherState,
 * §12.4): 32 zero bits, then n big endian. Also what the layers above
 * seal their frames under a handshake's transport keys with. */
void keyex_noise_nonce(uint64_t n, uint8_t nonce[CRYPT_AEAD_NONCE_LEN]);

/* TAI64N of the wall clock (WireGuard §5.4.2). */
void keyex_noise_timestamp_now(uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN]);

#ifdef __cplusplus
}
#endif

#endif
