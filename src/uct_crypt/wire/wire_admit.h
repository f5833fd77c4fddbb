/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What crypt's two listeners (its own wire, wire/wire_iface.c, and its
 * connection manager, cm/cm_listener.c) grant a connection that has proven
 * nothing yet; wire/README.md tells the rules. No UCX here, so that the
 * gtests drive it alone.
 *
 * Half-open slots: when they are all taken, what waits on each is read
 * first (an honest initiator sends right behind the TCP handshake), then a
 * silent one goes (uct_crypt_admit_victim). A connection whose first
 * message passed its MAC is out of that set, also while it answers a
 * cookie reply, and is evicted only for another that passed.
 *
 * Replays: an initiation's ephemeral is fresh per honest handshake (Noise,
 * revision 34, section 7), so the listener refuses one it saw before any
 * DH (uct_crypt_seen_*); an older one than the set keeps meets the DH,
 * where the wire's timestamp refuses it and the cm's answer is useless
 * without the ephemeral's secret.
 *
 * Cookies under load (WireGuard whitepaper section 5.3): past a bucket of
 * DHs (a job's wireup is a burst, not load), or for a second after a DH
 * went to a stranger (as WireGuard's receive.c stays under load for a
 * second), a first message needs a valid mac2 before its DH. The cookie is
 * an HMAC of the source address and port under a secret changed every two
 * minutes (COOKIE_SECRET_MAX_AGE), so nothing is kept per cookie; only a
 * job-secret holder can make mac2 from it. Over TCP the connection proves
 * the address; the port binds the cookie to this connection. A holder can
 * make mac2 for every connection it opens: under load each host draws its
 * DHs from a share of its own (uct_crypt_cookies_source_allowed).
 */
#ifndef UCT_CRYPT_ADMIT_H
#define UCT_CRYPT_ADMIT_H

#include "keyex/noise.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    UCT_CRYPT_SEEN_KEEP    = 4096, /* ephemerals remembered at least */
    UCT_CRYPT_SEEN_KEY_LEN = 16    /* of a 32-byte ephemeral: random, and
                                      only MAC-checked ones go in */
};

/* Two generations of an open-addressing set: the current one takes up to
 * KEEP keys, then becomes the previous one (whose keys are dropped) */
typedef struct uct_crypt_seen {
    uint8_t (*current)[UCT_CRYPT_SEEN_KEY_LEN];
    uint8_t (*previous)[UCT_CRYPT_SEEN_KEY_LEN];
    size_t  count;            /* keys in current */
} uct_crypt_seen_t;

typedef enum {
    UCT_CRYPT_SEEN_NEW,       /* not seen: now remembered */
    UCT_CRYPT_SEEN_AGAIN,     /* seen before: a replay */
    UCT_CRYPT_SEEN_NO_MEMORY
} uct_crypt_seen_verdict_t;

/* The verdict on a first message whose MAC passed, by its ephemeral key
 * (the first UCT_CRYPT_SEEN_KEY_LEN bytes are looked at) */
uct_crypt_seen_verdict_t uct_crypt_seen_check(uct_crypt_seen_t *seen,
                                              const uint8_t *ephemeral);

void uct_crypt_seen_cleanup(uct_crypt_seen_t *seen);

/* The host an address names, as a number: an IPv4 address (or an
 * IPv4-mapped IPv6 one) whole, an IPv6 address by its /64, which one host
 * may hold whole (WireGuard's ratelimiter keys IPv6 by its /64,
 * ratelimiter.c). The two never meet: a /64 whose first 32 bits are zero
 * lies in 0000::/8, which IANA's IPv6 address space registry keeps
 * reserved by the IETF (RFC 4291). 0: no IP address (or ::/64). */
uint64_t uct_crypt_admit_source(const struct sockaddr_storage *addr);

/* Which of `count` silent half-open connections goes: `sources[i]` is the
 * peer address of the i-th, the oldest first. Returns an index into it:
 * of the source address (IP, without the port) that holds the most, the
 * oldest one. */
size_t uct_crypt_admit_victim(const struct sockaddr_storage *const *sources,
                              size_t count);

enum {
    UCT_CRYPT_COOKIE_SECRET_AGE = 120, /* s: WireGuard's COOKIE_SECRET_MAX_AGE */
    UCT_CRYPT_UNDER_LOAD_AFTER  = 1,   /* s: under load after a stranger's DH */
    UCT_CRYPT_COOKIE_ROUNDS     = 2,   /* cookie replies per connection: an
                                          honest initiator needs one */
    UCT_CRYPT_HANDSHAKE_BURST   = 4096,/* DHs at once before cookies */
    UCT_CRYPT_SOURCE_BUCKETS    = 64   /* hosts weighed at once */
};

/* A token bucket: `rate` a second, up to `burst` */
typedef struct uct_crypt_bucket {
    double   tokens;
    double   at;             /* when `tokens` was last brought up to date */
    uint64_t source;         /* whose (uct_crypt_admit_source), per host */
} uct_crypt_bucket_t;

typedef struct uct_crypt_cookies {
    double  rate;            /* DHs a second before cookies (0: always) */
    double  burst;           /* the bucket: DHs at once */
    uct_crypt_bucket_t bucket;
    double  calm_at;         /* under load until then */
    double  source_rate;     /* under load, DHs a second per host: half the
                                listener's (none with 0, which asks for
                                cookies always), a second's worth at once */
    uct_crypt_bucket_t sources[UCT_CRYPT_SOURCE_BUCKETS];
    uint8_t *secrets;        /* current and previous secret (secure memory,
                                made at the first cookie) */
    double  secret_at;       /* when the current one was made */
} uct_crypt_cookies_t;

/* `rate`: DHs a second before cookies are asked; 0 asks always */
void uct_crypt_cookies_init(uct_crypt_cookies_t *cookies, double rate,
                            double now);

/* A first message passed its MAC, and its mac2 did not: may it have a DH
 * now (1, and one DH is spent), or is the listener under load (0: answer
 * with a cookie reply)? */
int uct_crypt_cookies_dh_allowed(uct_crypt_cookies_t *cookies, double now);

/* Under load, a first message from `from` passed its mac2: may it have a
 * DH now (1, and one of its host's is spent), or did its host have its
 * share (0: it waits, its connection kept, and asks again)? As WireGuard's
 * ratelimiter.c, per IPv4 address or IPv6 /64: a job-secret holder makes
 * a valid mac2 for every connection it opens, and its host must not take
 * the DHs every other host's connections wait for. */
int uct_crypt_cookies_source_allowed(uct_crypt_cookies_t *cookies,
                                     const struct sockaddr_storage *from,
                                     double now);

/* A DH went to a stranger: under load for the next second */
void uct_crypt_cookies_stranger(uct_crypt_cookies_t *cookies, double now);

/* The cookie of a connection from `from`. 0 on success; -1 when the
 * secret cannot be made (memory, randomness: crypt_local_failure says) */
int uct_crypt_cookies_make(uct_crypt_cookies_t *cookies, double now,
                           const struct sockaddr_storage *from,
                           uint8_t cookie[KEYEX_NOISE_COOKIE_LEN]);

/* Is the mac2 of the first message `msg` (`len` bytes, mac2 last) valid
 * for a cookie this listener gave `from` lately? 1 yes, 0 no, -1 a local
 * failure. */
int uct_crypt_cookies_mac2_valid(uct_crypt_cookies_t *cookies, double now,
                                 const struct sockaddr_storage *from,
                                 const uint8_t cookie_key[KEYEX_SECRET_LEN],
                                 const void *msg, size_t len);

void uct_crypt_cookies_cleanup(uct_crypt_cookies_t *cookies);

#ifdef __cplusplus
}
#endif

#endif
