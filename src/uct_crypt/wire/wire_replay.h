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
#ifndef UCT_CRYPT_SOCK_REPLAY_H
#define UCT_CRYPT_SOCK_REPLAY_H

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

typedef struct uct_crypt_replay_peer {
    uint8_t  static_key[KEYEX_PUBLIC_KEY_LEN];
    uint64_t floor;                            /* ns; at or below: refused */
    uint64_t newest;                           /* ns; the newest taken */
    uint64_t taken[UCT_CRYPT_REPLAY_RECENT];   /* ns, above the floor; 0: free */
} uct_crypt_replay_peer_t;

typedef struct uct_crypt_replay {
    uct_crypt_replay_peer_t *peers;
    size_t                  count, max;
} uct_crypt_replay_t;

typedef enum {
    UCT_CRYPT_REPLAY_FRESH,  /* taken, and remembered */
    UCT_CRYPT_REPLAY_SEEN,   /* taken before: a replay */
    UCT_CRYPT_REPLAY_STALE,  /* at or below the floor, or older than the
                                window against the newest */
    UCT_CRYPT_REPLAY_NO_MEMORY
} uct_crypt_replay_verdict_t;

/* The verdict on an initiation from `static_key` that carried `timestamp`
 * (TAI64N, already authenticated by the handshake) */
uct_crypt_replay_verdict_t
uct_crypt_replay_check(uct_crypt_replay_t *replay,
                       const uint8_t static_key[KEYEX_PUBLIC_KEY_LEN],
                       const uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN]);

void uct_crypt_replay_cleanup(uct_crypt_replay_t *replay);

#endif
