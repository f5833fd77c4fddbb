/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx-crypt key management: job secret, X25519 handshakes, HKDF schedule.
 *
 * No UCX dependency. Everything secret lives in memory from
 * keyex_secure_alloc() (not dumped, locked where allowed, wiped on free).
 *
 * Schedule (all HKDF is HKDF-SHA256, RFC 5869):
 *
 *   dh            = X25519(local_private, peer_public)          RFC 7748 §6.1
 *   pair_secret   = HKDF-Extract(salt = job_secret, IKM = dh)  RFC 5869 §2.2
 *                   (crypt's own wire: the connection's Noise exporter
 *                   secret instead, noise.h, forward secret)
 *   traffic[0]    = HKDF-Expand(pair_secret,
 *                     "ucx-crypt v1 " || purpose || sender_public ||
 *                     receiver_public || be64(flow_id), 32)
 *   traffic[g+1]  = HKDF-Expand(traffic[g], "ucx-crypt v1 key update", 32)
 *   key[g]        = HKDF-Expand(traffic[g], "ucx-crypt v1 key", 16|32)
 *   nonce_prefix  = HKDF-Expand(traffic[g], "ucx-crypt v1 iv", 4)
 *
 * The job secret as salt means a party without it derives unrelated keys
 * (authentication by pre-shared key, as WireGuard's optional PSK mixes into
 * its chaining key). The ordered pair of public keys in the info makes the
 * two directions distinct, and the purpose separates record, bulk and
 * collective keys (CryptMPI §IV insists on that separation). The update step
 * follows TLS 1.3's traffic secret update (RFC 8446 §7.2): the old secret is
 * wiped.
 *
 * What forward secrecy this gives, exactly:
 *
 * - Over crypt's own wire (Ethernet) pair_secret is not the X25519 of the
 *   static keys above but the exporter secret of the Noise_IKpsk2
 *   handshake of the connection that carries the flow (noise.h): it mixes
 *   the DH of both sides' ephemeral keys, which are wiped when the
 *   handshake ends, and the connection's copy of it is wiped when the
 *   connection ends. A recording of a connection therefore stays closed to
 *   whoever later obtains the static private keys and the job secret,
 *   from that connection's end on (test: uct_crypt_wire_test.
 *   recorded_wire_stays_closed_to_the_static_keys_and_the_job_secret). While
 *   the connection lives, its exporter (and the current traffic secrets)
 *   are in the process, so a running process that is read opens that
 *   connection's traffic, as with any protocol.
 * - Over a UCX inner (rc, ud, dc) the first record of a flow goes without a
 *   round trip, so its keys come from the static keys and the job secret,
 *   as TLS 1.3's 0-RTT data has no forward secrecy (RFC 8446 §2.3, §8):
 *   whoever obtains the transport's X25519 private key (alive as long as
 *   its iface) and the job secret re-derives traffic[0] of every flow and
 *   ratchets forward. Ending the iface ends that exposure.
 * - Within a flow, on both: a traffic secret of generation g does not
 *   reveal those before g (the ratchet is one-way).
 * - A collective team's epoch-0 secret lives as long as the team.
 */
#ifndef UCX_CRYPT_KEYEX_H
#define UCX_CRYPT_KEYEX_H

#include "aead/aead.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    KEYEX_JOB_SECRET_LEN     = 32, /* 256-bit pre-shared job secret */
    KEYEX_PUBLIC_KEY_LEN     = 32, /* X25519 u-coordinate, RFC 7748 §5 */
    KEYEX_PRIVATE_KEY_LEN    = 32,
    KEYEX_SECRET_LEN         = 32, /* SHA-256 output: PRK and traffic secrets */
    KEYEX_NONCE_PREFIX_LEN   = 4,  /* fixed field of the record nonce */
    KEYEX_ERROR_MAX          = 512
};

/*
 * Usage limits per traffic key.
 *
 * AES-GCM's confidentiality bound degrades with the total number of blocks
 * encrypted under one key: roughly (sigma + q)^2 / 2^129 for sigma blocks
 * in q messages (draft-irtf-cfrg-aead-limits, §5.1). Capping a key at 2^32
 * records and 2^38 bytes (2^34 blocks) keeps that near 2^-60, in line with
 * TLS 1.3's limit for AES-GCM of 2^24.5 full-size records, about 2^38.5
 * bytes (RFC 8446 §5.5). Counter nonces never repeat below 2^64, so the
 * nonce space is not what binds (SP 800-38D §8.2.1). We rekey at half the
 * hard limit, so a busy flow never reaches it.
 */
#define KEYEX_MAX_RECORDS_PER_KEY    (1ull << 32)
#define KEYEX_MAX_BYTES_PER_KEY      (1ull << 38)
#define KEYEX_REKEY_RECORDS          (KEYEX_MAX_RECORDS_PER_KEY / 2)
#define KEYEX_REKEY_BYTES            (KEYEX_MAX_BYTES_PER_KEY / 2)

typedef enum {
    KEYEX_OK = 0,
    KEYEX_ERR_NO_FILE,      /* missing or unreadable key file */
    KEYEX_ERR_PERMISSIONS,  /* group/other access or foreign owner */
    KEYEX_ERR_FORMAT,       /* wrong length, not a regular file */
    KEYEX_ERR_EXISTS,       /* keygen refuses to overwrite */
    KEYEX_ERR_CRYPTO,       /* the library failed, or an invalid peer key */
    KEYEX_ERR_NO_MEMORY,
    KEYEX_ERR_PARAM,
    KEYEX_ERR_AUTH          /* a handshake message failed its MAC or tag */
} keyex_status_t;

typedef enum {
    KEYEX_PURPOSE_RECORD = 0,  /* eager / AM records of the transport */
    KEYEX_PURPOSE_BULK,        /* segment streams of the bulk engine */
    KEYEX_PURPOSE_LAST
} keyex_purpose_t;

typedef enum {
    KEYEX_USAGE_OK = 0,
    KEYEX_USAGE_REKEY,      /* past the soft limit: update the key now */
    KEYEX_USAGE_EXHAUSTED   /* the key must not seal this */
} keyex_usage_t;

/* ---- secure memory ------------------------------------------------------ */

/* src/aead's secure memory (crypt_secure_alloc), for what keyex derives */
static inline void *keyex_secure_alloc(size_t size)
{
    return crypt_secure_alloc(size);
}

static inline void keyex_secure_free(void *ptr, size_t size)
{
    crypt_secure_free(ptr, size);
}

/* ---- job secret --------------------------------------------------------- */

/* Load exactly KEYEX_JOB_SECRET_LEN raw bytes from `path` into `secret`
 * (which should come from keyex_secure_alloc). Refuses files that group or
 * others can access, files of another owner, and any other length. On error
 * `error` says what is wrong and how to fix it. */
keyex_status_t keyex_job_secret_load(const char *path,
                                     uint8_t secret[KEYEX_JOB_SECRET_LEN],
                                     char *error, size_t error_len);

/* Create `path` (mode 0600, O_EXCL) holding a fresh secret from the OS
 * CSPRNG (crypt_random_secret: OpenSSL's RAND_priv_bytes). */
keyex_status_t keyex_job_secret_generate(const char *path, char *error,
                                         size_t error_len);

/* ---- X25519 ------------------------------------------------------------- */

typedef struct keyex_keypair {
    void    *pkey; /* EVP_PKEY: its private key in OpenSSL's secure heap
                      (locked, not dumped, set up by keyex before the
                      first key), wiped when freed */
    uint8_t public_key[KEYEX_PUBLIC_KEY_LEN];
} keyex_keypair_t;

keyex_status_t keyex_keypair_generate(keyex_keypair_t *keypair);
/* For test vectors only: a key pair from a known private scalar. */
keyex_status_t keyex_keypair_from_private(keyex_keypair_t *keypair,
                                          const uint8_t private_key[KEYEX_PRIVATE_KEY_LEN]);
void keyex_keypair_cleanup(keyex_keypair_t *keypair);

/* Raw X25519 shared secret. Fails (KEYEX_ERR_CRYPTO) on the all-zero result
 * of a low-order peer point, as RFC 7748 §6.1 allows and recommends. */
keyex_status_t keyex_x25519(const keyex_keypair_t *local,
                            const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                            uint8_t shared[KEYEX_SECRET_LEN]);

/* ---- HKDF --------------------------------------------------------------- */

keyex_status_t keyex_hkdf_extract(const uint8_t *salt, size_t salt_len,
                                  const uint8_t *ikm, size_t ikm_len,
                                  uint8_t prk[KEYEX_SECRET_LEN]);
keyex_status_t keyex_hkdf_expand(const uint8_t prk[KEYEX_SECRET_LEN],
                                 const uint8_t *info, size_t info_len,
                                 uint8_t *okm, size_t okm_len);

/* ---- the schedule -------------------------------------------------------- */

/* pair_secret from our key pair, the peer's public key and the job secret
 * (NULL: no job secret; then only a passive adversary is kept out). */
keyex_status_t keyex_derive_pair_secret(const keyex_keypair_t *local,
                                        const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                                        const uint8_t *job_secret,
                                        uint8_t pair_secret[KEYEX_SECRET_LEN]);

/* The keys of one direction of one flow, for one purpose. Allocate with
 * keyex_secure_alloc(sizeof(keyex_traffic_keys_t)). */
typedef struct keyex_traffic_keys {
    uint8_t  secret[KEYEX_SECRET_LEN];
    uint8_t  key[KEYEX_SECRET_LEN];
    unsigned key_len;                     /* 16 (AES-128) or 32 (AES-256) */
    uint8_t  nonce_prefix[KEYEX_NONCE_PREFIX_LEN];
    uint32_t generation;                  /* number of updates so far */
} keyex_traffic_keys_t;

keyex_status_t keyex_derive_flow_keys(const uint8_t pair_secret[KEYEX_SECRET_LEN],
                                      keyex_purpose_t purpose,
                                      const uint8_t sender_public[KEYEX_PUBLIC_KEY_LEN],
                                      const uint8_t receiver_public[KEYEX_PUBLIC_KEY_LEN],
                                      uint64_t flow_id, unsigned key_len,
                                      keyex_traffic_keys_t *keys);

/* Ratchet to the next generation; the previous secret and key are wiped. */
keyex_status_t keyex_update_flow_keys(keyex_traffic_keys_t *keys);

/* Account for sealing one more record of `bytes` under a key that has so far
 * sealed `records_done` records and `bytes_done` bytes. */
keyex_usage_t keyex_usage_check(uint64_t records_done, uint64_t bytes_done,
                                uint64_t bytes);

const char *keyex_purpose_name(keyex_purpose_t purpose);

/* ---- collective teams ----------------------------------------------------
 *
 *   team_prk      = HKDF-Extract(salt = "ucx-crypt v2 collective",
 *                                IKM = job_secret)
 *   bootstrap_key = HKDF-Expand(team_prk, "ucx-crypt v2 bootstrap", 32)
 *   team          = HKDF-Expand(team_prk, "ucx-crypt v2 collective" ||
 *                               transcript, 32)
 *   epoch[e]      = HKDF-Expand(team, "ucx-crypt v1 epoch" || be32(e), 32)
 *   key[e]        = HKDF-Expand(epoch[e], "ucx-crypt v1 key", 16|32)
 *   lane          = HKDF-Expand(team, "ucx-crypt v1 lane", 16|32)
 *
 * An epoch's key is derived from the team secret directly (not by a
 * ratchet), so any epoch costs one HKDF whatever its number: ranks move
 * through epochs at their own pace (each by what it seals), and a
 * receiver must open any of them. The team secret lives as long as the
 * team.
 *
 * Every rank's bootstrap message is MACed (HMAC-SHA256, RFC 2104) under
 * bootstrap_key, so a party without the job secret can neither forge nor
 * alter one; the transcript is the SHA-256 (FIPS 180-4) of every rank's
 * message in rank order, each carrying fresh randomness of its own, so the
 * team key depends on every rank's contribution. Every rank confirms the
 * transcript with an HMAC of its rank and the transcript under the same
 * key before any team key is used (src/ucp_crypt/coll/crypt_coll_wire.h):
 * a replayed old message is refused on every rank, and no old key is used
 * again with nonces from 0. */
enum {
    KEYEX_MAC_LEN        = 32, /* HMAC-SHA256 */
    KEYEX_TRANSCRIPT_LEN = 32, /* SHA-256 */
    KEYEX_JOB_ID_MAX     = 64  /* bytes of a launcher's job id */
};

/* `job_id` (job_id_len bytes, 0: none) is the launcher's identity of the
 * job (PMIx namespace, Slurm job.step): bootstrap messages of another job
 * under the same job secret fail their MAC, and through the MACs inside
 * the transcript the team key depends on it too. HKDF info = label, then
 * a zero byte and the job id where there is one (RFC 5869 section 3.2:
 * info binds the key to its context). */
keyex_status_t keyex_derive_bootstrap_key(const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                          const void *job_id, size_t job_id_len,
                                          uint8_t key[KEYEX_SECRET_LEN]);
keyex_status_t keyex_derive_team_keys(const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                      const uint8_t transcript[KEYEX_TRANSCRIPT_LEN],
                                      unsigned key_len, keyex_traffic_keys_t *keys);
/* The keys of `epoch` of a team (generation = epoch) */
keyex_status_t keyex_derive_epoch_keys(const keyex_traffic_keys_t *team,
                                       uint32_t epoch, keyex_traffic_keys_t *keys);
/* The key of the team's collective lane chunks (16 or 32 bytes, as the
 * team's): lane = HKDF-Expand(team, "ucx-crypt v1 lane", key_len) */
keyex_status_t keyex_derive_lane_key(const keyex_traffic_keys_t *team,
                                     uint8_t key[KEYEX_SECRET_LEN]);
/* HMAC-SHA256 of `len` bytes under a 32-byte key */
keyex_status_t keyex_mac(const uint8_t key[KEYEX_SECRET_LEN], const void *data,
                         size_t len, uint8_t mac[KEYEX_MAC_LEN]);
/* constant-time comparison of two MACs: 1 when equal */
int keyex_mac_equal(const uint8_t a[KEYEX_MAC_LEN], const uint8_t b[KEYEX_MAC_LEN]);
/* SHA-256 */
keyex_status_t keyex_hash(const void *data, size_t len,
                          uint8_t out[KEYEX_TRANSCRIPT_LEN]);

#ifdef __cplusplus
}
#endif

#endif
