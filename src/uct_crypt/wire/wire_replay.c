/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The own wire's replay check of handshake initiations
 * (wire/wire_replay.h).
 */
#include "uct_crypt/wire/wire_replay.h"

#include <stdlib.h>
#include <string.h>

/* TAI64N (cr.yp.to/libtai/tai64.html): a big-endian 64-bit label,
 * 2^62 + 10 + seconds since 1970, then big-endian 32-bit nanoseconds. The
 * initiator writes it (keyex_noise_timestamp_now); 0 for a label before
 * 1970, which no floor takes. */
static uint64_t uct_crypt_replay_ns(const uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN])
{
    const uint64_t label0 = 0x400000000000000aull;
    uint64_t label = 0;
    uint32_t nanos = 0;
    int i;

    for (i = 0; i < 8; ++i) {
        label = (label << 8) | ts[i];
    }
    for (i = 8; i < 12; ++i) {
        nanos = (nanos << 8) | ts[i];
    }
    if ((label < label0) || (label - label0 > UINT64_MAX / 1000000000ull - 1) ||
        (nanos >= 1000000000u)) {
        return 0;
    }
    return (label - label0) * 1000000000ull + nanos;
}

static uct_crypt_replay_peer_t *
uct_crypt_replay_peer(uct_crypt_replay_t *replay,
                      const uint8_t static_key[KEYEX_PUBLIC_KEY_LEN])
{
    uct_crypt_replay_peer_t *peer;
    size_t i, max;

    for (i = 0; i < replay->count; ++i) {
        if (!memcmp(replay->peers[i].static_key, static_key,
                    KEYEX_PUBLIC_KEY_LEN)) {
            return &replay->peers[i];
        }
    }
    if (replay->count == replay->max) {
        max  = (replay->max == 0) ? 16 : 2 * replay->max;
        peer = realloc(replay->peers, max * sizeof(*peer));
        if (peer == NULL) {
            return NULL;
        }
        replay->peers = peer;
        replay->max   = max;
    }
    peer = &replay->peers[replay->count++];
    memset(peer, 0, sizeof(*peer));
    memcpy(peer->static_key, static_key, KEYEX_PUBLIC_KEY_LEN);
    return peer;
}

/* Entries that fell out of the window raise the floor; returns a free
 * slot, or the oldest entry's when none is free (its value is then the
 * floor) */
static uint64_t *uct_crypt_replay_slot(uct_crypt_replay_peer_t *peer,
                                       uint64_t window_start)
{
    uint64_t *free_slot = NULL, *oldest = NULL;
    size_t i;

    for (i = 0; i < UCT_CRYPT_REPLAY_RECENT; ++i) {
        if ((peer->taken[i] != 0) && (peer->taken[i] < window_start)) {
            peer->floor    = (peer->taken[i] > peer->floor) ? peer->taken[i] :
                                                              peer->floor;
            peer->taken[i] = 0;
        }
        if (peer->taken[i] == 0) {
            free_slot = (free_slot == NULL) ? &peer->taken[i] : free_slot;
        } else if ((oldest == NULL) || (peer->taken[i] < *oldest)) {
            oldest = &peer->taken[i];
        }
    }
    if (free_slot != NULL) {
        return free_slot;
    }
    peer->floor = (*oldest > peer->floor) ? *oldest : peer->floor;
    return oldest;
}

uct_crypt_replay_verdict_t
uct_crypt_replay_check(uct_crypt_replay_t *replay,
                       const uint8_t static_key[KEYEX_PUBLIC_KEY_LEN],
                       const uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN])
{
    const uint64_t window = (uint64_t)(UCT_CRYPT_REPLAY_WINDOW_SEC * 1e9);
    uint64_t t = uct_crypt_replay_ns(timestamp), newest, *slot;
    uct_crypt_replay_peer_t *peer;
    size_t i;

    peer = uct_crypt_replay_peer(replay, static_key);
    if (peer == NULL) {
        return UCT_CRYPT_REPLAY_NO_MEMORY;
    }
    newest = (t > peer->newest) ? t : peer->newest;
    if ((t <= peer->floor) || ((newest > window) && (t < newest - window))) {
        return UCT_CRYPT_REPLAY_STALE;
    }
    for (i = 0; i < UCT_CRYPT_REPLAY_RECENT; ++i) {
        if (peer->taken[i] == t) {
            return UCT_CRYPT_REPLAY_SEEN;
        }
    }
    slot = uct_crypt_replay_slot(peer, (newest > window) ? newest - window : 0);
    if (t <= peer->floor) {
        return UCT_CRYPT_REPLAY_STALE; /* older than every one kept */
    }
    *slot        = t;
    peer->newest = newest;
    return UCT_CRYPT_REPLAY_FRESH;
}

void uct_crypt_replay_cleanup(uct_crypt_replay_t *replay)
{
    free(replay->peers);
    memset(replay, 0, sizeof(*replay));
}
