/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Which handshake initiations the own wire's responder takes from each
 * static key (no UCX, so that the gtests drive it alone).
 *
 * Noise_IKpsk2's initiation carries an encrypted TAI64N timestamp, and
 * WireGuard refuses one not above the last it took from the same peer
 * (whitepaper section 5.1): it has one session per peer. crypt opens many
 * connections between two ifaces at once (workers, UCX_NUM_EPS, threads),
 * and their initiations may arrive out of order. So a responder keeps, per
 * static key, the timestamps it took within a window, and a floor: it takes
 * a timestamp above the floor that it has not taken before and that is
 * not more than the window older than the newest. A replay carries the
 * very timestamp it copies (the initiator's are strictly increasing,
 * keyex_noise_timestamp_now, and authenticated), so it is refused. The
 * window is the initiator's own handshake deadline: an initiation older
 * than that has been given up by its sender. When the per-key list is full,
 * its oldest entry becomes the floor: a flood of honest initiations can
 * refuse some of the oldest ones, never take a replay.
 */
#ifndef UCT_CRYPT_WIRE_REPLAY_H
#define UCT_CRYPT_WIRE_REPLAY_H

#include "keyex/keyex.h"
#include "keyex/noise.h"

#include <stddef.h>
#include <stdint.h>

enum {
    UCT_CRYPT_REPLAY_RECENT = 128 /* timestamps kept per static key */
};

/* s: initiations older than this against the newest from the same key are
 * refused (the initiator's handshake deadline) */
#define UCT_CRYPT_REPLAY_WINDOW_SEC 5.0

/* A key is remembered for the iface's life, since only its floor refuses
 * its old initiations: 64 bytes of it, in a table at most half full. Its
 * timestamps (1 KiB) only while it initiates: once the responder has seen
 * nothing of it for the window (its own clock), they go and the newest
 * becomes the floor; what that initiator sends next is newer, and what it
 * sent before has been given up (red team R5: 1,072 bytes a key for the
 * iface's life, found by a linear scan). */
typedef struct uct_crypt_replay_recent uct_crypt_replay_recent_t;
struct uct_crypt_replay_recent {
    uct_crypt_replay_recent_t *prev, *next;   /* the least recent first */
    double   last_seen;                        /* s, the responder's clock */
    uint64_t hash;                             /* its key's, in the table */
    uint8_t  static_key[KEYEX_PUBLIC_KEY_LEN];
    uint64_t taken[UCT_CRYPT_REPLAY_RECENT];   /* ns, above the floor; 0: free */
};

typedef struct uct_crypt_replay_peer {
    uint8_t  static_key[KEYEX_PUBLIC_KEY_LEN]; /* all zero: a free slot */
    uint64_t hash;                             /* of the key, kept: a table
                                                  that grows hashes nothing */
    uint64_t floor;                            /* ns; at or below: refused */
    uint64_t newest;                           /* ns; the newest taken */
    uct_crypt_replay_recent_t *recent;         /* NULL: idle */
} uct_crypt_replay_peer_t;

/* Keys by a keyed hash (open addressing, linear probing), so that an
 * insider who makes keys at will cannot aim them at one bucket */
typedef struct uct_crypt_replay {
    uct_crypt_replay_peer_t   *peers;
    size_t                    count, slots; /* slots: a power of two */
    uint8_t                   seed[16];     /* the hash's key, random */
    uct_crypt_replay_recent_t *least, *most; /* keys that initiated within
                                                the window */
} uct_crypt_replay_t;

typedef enum {
    UCT_CRYPT_REPLAY_FRESH,  /* taken, and remembered */
    UCT_CRYPT_REPLAY_SEEN,   /* taken before: a replay */
    UCT_CRYPT_REPLAY_STALE,  /* at or below the floor, or older than the
                                window against the newest */
    UCT_CRYPT_REPLAY_NO_MEMORY /* or SHA-256 failed: a local failure */
} uct_crypt_replay_verdict_t;

/* The verdict on an initiation from `static_key` that carried `timestamp`
 * (TAI64N, already authenticated by the handshake), taken at `now` (s, the
 * responder's monotonic clock) */
uct_crypt_replay_verdict_t
uct_crypt_replay_check(uct_crypt_replay_t *replay,
                       const uint8_t static_key[KEYEX_PUBLIC_KEY_LEN],
                       const uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN],
                       double now);

/* Keys seen nothing of for the window by `now` keep their floor alone
 * (from progress too: a burst of keys that stops leaves nothing behind) */
void uct_crypt_replay_expire(uct_crypt_replay_t *replay, double now);

void uct_crypt_replay_cleanup(uct_crypt_replay_t *replay);

#endif
