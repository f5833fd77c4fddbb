/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a listener grants strangers (wire/wire_admit.h).
 */
#include "uct_crypt/wire/wire_admit.h"

#include "aead/aead.h"

#include <endian.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* slots per generation: at most half full */
#define UCT_CRYPT_SEEN_SLOTS (2 * UCT_CRYPT_SEEN_KEEP)

static size_t uct_crypt_seen_slot(const uint8_t *key)
{
    uint64_t h;

    /* the key is the start of a random public key that passed a MAC under
     * the job secret: nobody without it chooses where it lands */
    memcpy(&h, key, sizeof(h));
    return (size_t)(h & (UCT_CRYPT_SEEN_SLOTS - 1));
}

static int uct_crypt_seen_empty(const uint8_t *slot)
{
    static const uint8_t zero[UCT_CRYPT_SEEN_KEY_LEN];

    return !memcmp(slot, zero, UCT_CRYPT_SEEN_KEY_LEN);
}

/* Where `key` is in `table`, or the empty slot where it would go */
static uint8_t *uct_crypt_seen_find(uint8_t (*table)[UCT_CRYPT_SEEN_KEY_LEN],
                                    const uint8_t *key)
{
    size_t i = uct_crypt_seen_slot(key);

    while (!uct_crypt_seen_empty(table[i]) &&
           memcmp(table[i], key, UCT_CRYPT_SEEN_KEY_LEN)) {
        i = (i + 1) & (UCT_CRYPT_SEEN_SLOTS - 1);
    }
    return table[i];
}

uct_crypt_seen_verdict_t uct_crypt_seen_check(uct_crypt_seen_t *seen,
                                              const uint8_t *ephemeral)
{
    uint8_t (*swap)[UCT_CRYPT_SEEN_KEY_LEN];
    uint8_t *slot;

    if (uct_crypt_seen_empty(ephemeral)) {
        return UCT_CRYPT_SEEN_AGAIN; /* no honest ephemeral starts so */
    }
    if (seen->current == NULL) {
        seen->current  = calloc(UCT_CRYPT_SEEN_SLOTS, UCT_CRYPT_SEEN_KEY_LEN);
        seen->previous = calloc(UCT_CRYPT_SEEN_SLOTS, UCT_CRYPT_SEEN_KEY_LEN);
        if ((seen->current == NULL) || (seen->previous == NULL)) {
            uct_crypt_seen_cleanup(seen);
            return UCT_CRYPT_SEEN_NO_MEMORY;
        }
    }
    if (!uct_crypt_seen_empty(uct_crypt_seen_find(seen->previous, ephemeral))) {
        return UCT_CRYPT_SEEN_AGAIN;
    }
    slot = uct_crypt_seen_find(seen->current, ephemeral);
    if (!uct_crypt_seen_empty(slot)) {
        return UCT_CRYPT_SEEN_AGAIN;
    }
    if (seen->count == UCT_CRYPT_SEEN_KEEP) {
        /* a new generation: the older one's keys are forgotten */
        swap           = seen->previous;
        seen->previous = seen->current;
        seen->current  = swap;
        memset(seen->current, 0, UCT_CRYPT_SEEN_SLOTS * UCT_CRYPT_SEEN_KEY_LEN);
        seen->count    = 0;
        slot           = uct_crypt_seen_find(seen->current, ephemeral);
    }
    memcpy(slot, ephemeral, UCT_CRYPT_SEEN_KEY_LEN);
    ++seen->count;
    return UCT_CRYPT_SEEN_NEW;
}

void uct_crypt_seen_cleanup(uct_crypt_seen_t *seen)
{
    free(seen->current);
    free(seen->previous);
    memset(seen, 0, sizeof(*seen));
}

uint64_t uct_crypt_admit_source(const struct sockaddr_storage *addr)
{
    const struct in6_addr *a6 = &((const struct sockaddr_in6*)addr)->sin6_addr;
    uint64_t prefix;

    if (addr->ss_family == AF_INET) {
        return ntohl(((const struct sockaddr_in*)addr)->sin_addr.s_addr);
    } else if (addr->ss_family != AF_INET6) {
        return 0;
    } else if (IN6_IS_ADDR_V4MAPPED(a6)) {
        return ntohl(a6->s6_addr32[3]);
    }
    memcpy(&prefix, a6, sizeof(prefix));
    return be64toh(prefix);
}

/* Same host: the address family and its uct_crypt_admit_source, not the
 * port (no address to tell them apart: one source) */
static int uct_crypt_admit_same_source(const struct sockaddr_storage *a,
                                       const struct sockaddr_storage *b)
{
    return (a->ss_family == b->ss_family) &&
           (uct_crypt_admit_source(a) == uct_crypt_admit_source(b));
}

size_t uct_crypt_admit_victim(const struct sockaddr_storage *const *sources,
                              size_t count)
{
    size_t i, j, held, most = 0, victim = 0;

    /* (a few hundred at most: quadratic is cheaper than a table) */
    for (i = 0; i < count; ++i) {
        held = 0;
        for (j = 0; j < count; ++j) {
            held += uct_crypt_admit_same_source(sources[i], sources[j]);
        }
        /* the first, the oldest, of the source that holds the most */
        if (held > most) {
            most   = held;
            victim = i;
        }
    }
    return victim;
}

/* ---- cookies under load ------------------------------------------------------ */

/* Brings `bucket` up to `now`; 1 and a token spent, or 0 when empty */
static int uct_crypt_bucket_take(uct_crypt_bucket_t *bucket, double rate,
                                 double burst, double now)
{
    if (now > bucket->at) {
        bucket->tokens += (now - bucket->at) * rate;
        bucket->tokens  = (bucket->tokens > burst) ? burst : bucket->tokens;
        bucket->at     = now;
    }
    if (bucket->tokens < 1.0) {
        return 0;
    }
    bucket->tokens -= 1.0;
    return 1;
}

void uct_crypt_cookies_init(uct_crypt_cookies_t *cookies, double rate,
                            double now)
{
    size_t i;

    memset(cookies, 0, sizeof(*cookies));
    cookies->rate          = rate;
    cookies->burst         = (rate <= 0) ? 0 :
                             (rate > UCT_CRYPT_HANDSHAKE_BURST) ? rate :
                             UCT_CRYPT_HANDSHAKE_BURST;
    cookies->bucket.tokens = cookies->burst;
    cookies->bucket.at     = now;
    cookies->source_rate   = (rate > 0) ? (rate / 2) : HUGE_VAL;
    for (i = 0; i < UCT_CRYPT_SOURCE_BUCKETS; ++i) {
        cookies->sources[i].at = -HUGE_VAL; /* full when first used */
    }
}

int uct_crypt_cookies_dh_allowed(uct_crypt_cookies_t *cookies, double now)
{
    return (now >= cookies->calm_at) &&
           uct_crypt_bucket_take(&cookies->bucket, cookies->rate,
                                 cookies->burst, now);
}

int uct_crypt_cookies_source_allowed(uct_crypt_cookies_t *cookies,
                                     const struct sockaddr_storage *from,
                                     double now)
{
    uint64_t source                = uct_crypt_admit_source(from);
    double burst                   = (cookies->source_rate > 1.0) ?
                                     cookies->source_rate : 1.0;
    uct_crypt_bucket_t *bucket, *b = cookies->sources;
    size_t i;

    /* the host's bucket; else the one idle longest, which starts full
     * (WireGuard's table drops entries once they refilled; a holder on
     * more hosts than UCT_CRYPT_SOURCE_BUCKETS has its debt forgotten:
     * wire/README.md's known limits) */
    bucket = b;
    for (i = 0; i < UCT_CRYPT_SOURCE_BUCKETS; ++i) {
        if (b[i].source == source) {
            bucket = &b[i];
            break;
        } else if (b[i].at < bucket->at) {
            bucket = &b[i];
        }
    }
    if (bucket->source != source) {
        bucket->source = source;
        bucket->tokens = burst;
        bucket->at     = now;
    }
    return uct_crypt_bucket_take(bucket, cookies->source_rate, burst, now);
}

void uct_crypt_cookies_stranger(uct_crypt_cookies_t *cookies, double now)
{
    cookies->bucket.tokens = 0;
    cookies->calm_at = now + UCT_CRYPT_UNDER_LOAD_AFTER;
}

/* The secret of now (a new one every COOKIE_SECRET_AGE; the one before it
 * still checks the cookies it gave) */
static int uct_crypt_cookies_secret(uct_crypt_cookies_t *cookies, double now)
{
    if (cookies->secrets == NULL) {
        cookies->secrets = keyex_secure_alloc(2 * KEYEX_SECRET_LEN);
        if ((cookies->secrets == NULL) ||
            !crypt_random_secret(cookies->secrets, 2 * KEYEX_SECRET_LEN)) {
            uct_crypt_cookies_cleanup(cookies);
            return -1;
        }
        cookies->secret_at = now;
    } else if (now - cookies->secret_at >= 2 * UCT_CRYPT_COOKIE_SECRET_AGE) {
        /* both too old: no cookie of either is good any more */
        if (!crypt_random_secret(cookies->secrets, 2 * KEYEX_SECRET_LEN)) {
            return -1;
        }
        cookies->secret_at = now;
    } else if (now - cookies->secret_at >= UCT_CRYPT_COOKIE_SECRET_AGE) {
        memcpy(cookies->secrets + KEYEX_SECRET_LEN, cookies->secrets,
               KEYEX_SECRET_LEN);
        if (!crypt_random_secret(cookies->secrets, KEYEX_SECRET_LEN)) {
            return -1;
        }
        cookies->secret_at = now;
    }
    return 0;
}

/* HMAC-SHA256(secret, family || address || port)[0..16) */
static int uct_crypt_cookie_of(const uint8_t *secret,
                               const struct sockaddr_storage *from,
                               uint8_t cookie[KEYEX_NOISE_COOKIE_LEN])
{
    uint8_t buf[1 + sizeof(struct in6_addr) + sizeof(uint16_t)];
    uint8_t mac[KEYEX_MAC_LEN];
    size_t len = 1;
    int ok;

    buf[0] = (uint8_t)from->ss_family;
    if (from->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in*)from;
        memcpy(buf + len, &in->sin_addr, sizeof(in->sin_addr));
        len += sizeof(in->sin_addr);
        memcpy(buf + len, &in->sin_port, sizeof(in->sin_port));
        len += sizeof(in->sin_port);
    } else if (from->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6*)from;
        memcpy(buf + len, &in6->sin6_addr, sizeof(in6->sin6_addr));
        len += sizeof(in6->sin6_addr);
        memcpy(buf + len, &in6->sin6_port, sizeof(in6->sin6_port));
        len += sizeof(in6->sin6_port);
    }
    ok = (keyex_mac(secret, buf, len, mac) == KEYEX_OK);
    memcpy(cookie, mac, KEYEX_NOISE_COOKIE_LEN);
    crypt_wipe(mac, sizeof(mac));
    return ok ? 0 : -1;
}

int uct_crypt_cookies_make(uct_crypt_cookies_t *cookies, double now,
                           const struct sockaddr_storage *from,
                           uint8_t cookie[KEYEX_NOISE_COOKIE_LEN])
{
    if (uct_crypt_cookies_secret(cookies, now) != 0) {
        return -1;
    }
    return uct_crypt_cookie_of(cookies->secrets, from, cookie);
}

int uct_crypt_cookies_mac2_valid(uct_crypt_cookies_t *cookies, double now,
                                 const struct sockaddr_storage *from,
                                 const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                 const void *msg, size_t len)
{
    static const uint8_t none[KEYEX_NOISE_MAC1_LEN];
    uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
    keyex_status_t status;
    int i;

    /* no cookie was given, or the message says it has none */
    if ((cookies->secrets == NULL) ||
        !memcmp((const uint8_t*)msg + len - KEYEX_NOISE_MAC1_LEN, none,
                sizeof(none))) {
        return 0;
    }
    if (uct_crypt_cookies_secret(cookies, now) != 0) {
        return -1;
    }
    for (i = 0; i < 2; ++i) {
        if (uct_crypt_cookie_of(cookies->secrets + i * KEYEX_SECRET_LEN, from,
                                cookie) != 0) {
            return -1;
        }
        status = keyex_noise_mac2_check(cookie_key, cookie, msg, len);
        if (status == KEYEX_OK) {
            return 1;
        } else if (status != KEYEX_ERR_AUTH) {
            return -1;
        }
    }
    return 0;
}

void uct_crypt_cookies_cleanup(uct_crypt_cookies_t *cookies)
{
    if (cookies->secrets != NULL) {
        keyex_secure_free(cookies->secrets, 2 * KEYEX_SECRET_LEN);
        cookies->secrets = NULL;
    }
}
