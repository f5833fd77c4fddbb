/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The own wire's replay check of handshake initiations
 * (wire/wire_replay.h).
 */
#include "uct_crypt/wire/wire_replay.h"

#include "aead/aead.h"

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

static const uint8_t uct_crypt_replay_free[KEYEX_PUBLIC_KEY_LEN];

/* The hash of `key`: SHA-256 of the table's random seed and the key
 * (FIPS 180-4; keyed, so that keys an insider chooses spread). Taken once
 * a key, when it first comes; returns 0 where SHA-256 failed (a local
 * failure, which the caller says) */
static int uct_crypt_replay_hash(const uct_crypt_replay_t *replay,
                                 const uint8_t key[KEYEX_PUBLIC_KEY_LEN],
                                 uint64_t *hash_p)
{
    uint8_t input[sizeof(replay->seed) + KEYEX_PUBLIC_KEY_LEN];
    uint8_t hash[KEYEX_TRANSCRIPT_LEN];

    memcpy(input, replay->seed, sizeof(replay->seed));
    memcpy(input + sizeof(replay->seed), key, KEYEX_PUBLIC_KEY_LEN);
    if (keyex_hash(input, sizeof(input), hash) != KEYEX_OK) {
        return 0;
    }
    memcpy(hash_p, hash, sizeof(*hash_p));
    return 1;
}

/* The slot of `key` (of `hash`) or the free one where it goes, probed
 * linearly */
static uct_crypt_replay_peer_t *
uct_crypt_replay_find(const uct_crypt_replay_t *replay,
                      const uint8_t key[KEYEX_PUBLIC_KEY_LEN], uint64_t hash)
{
    uct_crypt_replay_peer_t *peer;
    size_t i;

    for (i = (size_t)hash & (replay->slots - 1);; i = (i + 1) & (replay->slots - 1)) {
        peer = &replay->peers[i];
        if (!memcmp(peer->static_key, key, KEYEX_PUBLIC_KEY_LEN) ||
            !memcmp(peer->static_key, uct_crypt_replay_free,
                    KEYEX_PUBLIC_KEY_LEN)) {
            return peer;
        }
    }
}

/* Twice the slots (or the first 64), every key moved over */
static int uct_crypt_replay_grow(uct_crypt_replay_t *replay)
{
    uct_crypt_replay_t bigger = *replay;
    size_t i;

    if ((replay->slots == 0) &&
        !crypt_random_public(replay->seed, sizeof(replay->seed))) {
        return 0;
    }
    memcpy(bigger.seed, replay->seed, sizeof(bigger.seed));
    bigger.slots = (replay->slots == 0) ? 64 : 2 * replay->slots;
    bigger.peers = calloc(bigger.slots, sizeof(*bigger.peers));
    if (bigger.peers == NULL) {
        return 0;
    }
    for (i = 0; i < replay->slots; ++i) {
        if (memcmp(replay->peers[i].static_key, uct_crypt_replay_free,
                   KEYEX_PUBLIC_KEY_LEN)) {
            *uct_crypt_replay_find(&bigger, replay->peers[i].static_key,
                                   replay->peers[i].hash) = replay->peers[i];
        }
    }
    free(replay->peers);
    replay->peers = bigger.peers;
    replay->slots = bigger.slots;
    return 1;
}

static void uct_crypt_replay_unlink(uct_crypt_replay_t *replay,
                                    uct_crypt_replay_recent_t *recent)
{
    *((recent->prev != NULL) ? &recent->prev->next : &replay->least) = recent->next;
    *((recent->next != NULL) ? &recent->next->prev : &replay->most)  = recent->prev;
    recent->prev = recent->next = NULL;
}

static void uct_crypt_replay_append(uct_crypt_replay_t *replay,
                                    uct_crypt_replay_recent_t *recent)
{
    recent->prev = replay->most;
    recent->next = NULL;
    *((replay->most != NULL) ? &replay->most->next : &replay->least) = recent;
    replay->most = recent;
}

void uct_crypt_replay_expire(uct_crypt_replay_t *replay, double now)
{
    uct_crypt_replay_recent_t *recent;
    uct_crypt_replay_peer_t *peer;

    while (((recent = replay->least) != NULL) &&
           (now - recent->last_seen > UCT_CRYPT_REPLAY_WINDOW_SEC)) {
        peer         = uct_crypt_replay_find(replay, recent->static_key,
                                             recent->hash);
        peer->floor  = (peer->newest > peer->floor) ? peer->newest : peer->floor;
        peer->recent = NULL;
        uct_crypt_replay_unlink(replay, recent);
        free(recent);
    }
}

/* The key's entry, with its recent timestamps */
static uct_crypt_replay_peer_t *
uct_crypt_replay_peer(uct_crypt_replay_t *replay,
                      const uint8_t static_key[KEYEX_PUBLIC_KEY_LEN],
                      double now)
{
    uct_crypt_replay_peer_t *peer;
    uint64_t hash;

    if (!memcmp(static_key, uct_crypt_replay_free, KEYEX_PUBLIC_KEY_LEN)) {
        return NULL; /* (no X25519 public key of a handshake is all zero) */
    }
    if ((2 * (replay->count + 1) > replay->slots) &&
        !uct_crypt_replay_grow(replay)) {
        return NULL;
    }
    if (!uct_crypt_replay_hash(replay, static_key, &hash)) {
        return NULL;
    }
    peer = uct_crypt_replay_find(replay, static_key, hash);
    if (!memcmp(peer->static_key, uct_crypt_replay_free, KEYEX_PUBLIC_KEY_LEN)) {
        memcpy(peer->static_key, static_key, KEYEX_PUBLIC_KEY_LEN);
        peer->hash = hash;
        ++replay->count;
    }
    if (peer->recent == NULL) {
        peer->recent = calloc(1, sizeof(*peer->recent));
        if (peer->recent == NULL) {
            return NULL;
        }
        memcpy(peer->recent->static_key, static_key, KEYEX_PUBLIC_KEY_LEN);
        peer->recent->hash      = hash;
        peer->recent->last_seen = now;
        uct_crypt_replay_append(replay, peer->recent);
    }
    return peer;
}

/* Entries that fell out of the window raise the floor; returns a free
 * slot, or the oldest entry's when none is free (its value is then the
 * floor) */
static uint64_t *uct_crypt_replay_slot(uct_crypt_replay_peer_t *peer,
                                       uint64_t window_start)
{
    uint64_t *taken = peer->recent->taken, *free_slot = NULL, *oldest = NULL;
    size_t i;

    for (i = 0; i < UCT_CRYPT_REPLAY_RECENT; ++i) {
        if ((taken[i] != 0) && (taken[i] < window_start)) {
            peer->floor = (taken[i] > peer->floor) ? taken[i] : peer->floor;
            taken[i]    = 0;
        }
        if (taken[i] == 0) {
            free_slot = (free_slot == NULL) ? &taken[i] : free_slot;
        } else if ((oldest == NULL) || (taken[i] < *oldest)) {
            oldest = &taken[i];
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
                       const uint8_t timestamp[KEYEX_NOISE_TIMESTAMP_LEN],
                       double now)
{
    const uint64_t window = (uint64_t)(UCT_CRYPT_REPLAY_WINDOW_SEC * 1e9);
    uint64_t t = uct_crypt_replay_ns(timestamp), newest, *slot;
    uct_crypt_replay_peer_t *peer;
    size_t i;

    uct_crypt_replay_expire(replay, now);
    peer = uct_crypt_replay_peer(replay, static_key, now);
    if (peer == NULL) {
        return UCT_CRYPT_REPLAY_NO_MEMORY;
    }
    newest = (t > peer->newest) ? t : peer->newest;
    if ((t <= peer->floor) || ((newest > window) && (t < newest - window))) {
        return UCT_CRYPT_REPLAY_STALE;
    }
    for (i = 0; i < UCT_CRYPT_REPLAY_RECENT; ++i) {
        if (peer->recent->taken[i] == t) {
            return UCT_CRYPT_REPLAY_SEEN;
        }
    }
    slot = uct_crypt_replay_slot(peer, (newest > window) ? newest - window : 0);
    if (t <= peer->floor) {
        return UCT_CRYPT_REPLAY_STALE; /* older than every one kept */
    }
    *slot        = t;
    peer->newest = newest;
    /* (taken: the key is the most recent) */
    peer->recent->last_seen = now;
    uct_crypt_replay_unlink(replay, peer->recent);
    uct_crypt_replay_append(replay, peer->recent);
    return UCT_CRYPT_REPLAY_FRESH;
}

void uct_crypt_replay_cleanup(uct_crypt_replay_t *replay)
{
    uct_crypt_replay_recent_t *recent;

    while ((recent = replay->least) != NULL) {
        uct_crypt_replay_unlink(replay, recent);
        free(recent);
    }
    free(replay->peers);
    memset(replay, 0, sizeof(*replay));
}
