/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What crypt's two listeners (its own wire, wire/wire_iface.c, and its
 * connection manager, cm/cm_listener.c) grant a connection that has proven
 * nothing yet. No UCX here, so that the gtests drive it alone.
 *
 * Half-open slots. A listener holds a bounded number of connections whose
 * first message has not passed its MAC check. When they are all taken and
 * another arrives, one must go; the listener reads what waits on each of
 * them first (an honest initiator sends its first message right behind
 * the TCP handshake), and only then picks one of those still silent, by
 * uct_crypt_admit_victim: one of the source address (an IPv6 /64 counts
 * as one) that holds the most of them, the oldest of those. A stranger who opens many connections
 * from one address loses its own; an honest peer, one connection from
 * another address, never holds the most. A connection whose first message
 * passed the MAC check is out of the half-open set, and never evicted by
 * a stranger: also under load, while it waits for the initiator's answer
 * to a cookie reply (below). Those connections are bounded apart; the
 * oldest goes only to make room for another that passed the MAC check.
 *
 * Replayed first messages. A first message that passes its MAC check came
 * from a job-secret holder once, but maybe not now: anyone on the path can
 * record and send it again. Its ephemeral key is fresh per honest
 * handshake (Noise, revision 34, §7: "e" is generated anew for each
 * handshake), so the listener remembers the ephemerals of the first
 * messages it took and refuses one it saw, before any Diffie-Hellman
 * (WireGuard whitepaper §5.3 makes a replay cost no DH with its cookies
 * under load; this is the cheaper half: a recent replay is known by its
 * key). The set keeps the last UCT_CRYPT_SEEN_KEEP at least: an older one
 * comes back to the DH, where the own wire's timestamp check refuses it
 * and the connection manager's answer is useless without the ephemeral's
 * secret.
 *
 * Cookies under load (WireGuard whitepaper §5.3). A listener spends up to
 * `rate` DHs a second on first messages that passed their MAC, from a
 * bucket that holds UCT_CRYPT_HANDSHAKE_BURST of them (or one second's,
 * if more): a job's wireup opens thousands of connections to one rank at
 * once, and an honest burst is not load (64 workers opening 64 endpoints
 * each to one peer got 3,160 cookie replies from a bucket of one second's
 * 1000). A store of recorded first messages older than the set above
 * spends at most the burst, once: on the own wire the first of them is
 * found out at its DH (its timestamp), at the connection manager when its
 * client never goes on (the handshake deadline); either empties the
 * bucket. Past that, or for a second after a DH
 * went to a stranger (a replay the set above forgot, found out by its
 * timestamp or by a client that never went on), it is under load, as
 * WireGuard's receive path stays under load for a second after its
 * handshake queue was full (the Linux driver's receive.c): a first
 * message then needs a valid mac2 before the DH. Whoever has none gets a
 * cookie reply (src/keyex/noise.h); the cookie is an HMAC of the
 * connection's source address and port under a random secret changed
 * every two minutes (WireGuard's COOKIE_SECRET_MAX_AGE), so the listener
 * keeps nothing per cookie it gives. A replayer gets its cookie too, but
 * cannot make mac2 without the job secret: its replay costs no DH. Over
 * TCP the address is proven by the connection itself; the port binds the
 * cookie to this connection, where the initiator answers it.
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
    UCT_CRYPT_HANDSHAKE_BURST   = 4096 /* DHs at once before cookies */
};

typedef struct uct_crypt_cookies {
    double  rate;            /* DHs a second before cookies (0: always) */
    double  burst;           /* the bucket: DHs at once */
    double  tokens;          /* DHs that may go now, up to `burst` */
    double  tokens_at;       /* when `tokens` was last brought up to date */
    double  calm_at;         /* under load until then */
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
