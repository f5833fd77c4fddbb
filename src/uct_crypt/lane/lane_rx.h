/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane's chunks (lane/lane.c), without UCX: each
 * team's lane key, a chunk's tag made (sending) and checked (receiving),
 * and what arrives reassembled per (team, sending rank), written straight
 * into the buffer a receive posted or held in a bounded buffer until one
 * asks. Everything here is written for input an attacker chose: a chunk
 * that fails its tag, names a team this process is not in or a rank other
 * than ours, or comes again is dropped and counted and costs no stream; an
 * authentic chunk that breaks the framing fails its stream only. libc, the
 * AEAD module and UCS's header-only khash, so the fuzz target
 * (test/fuzz/fuzz_lane_chunk.c) runs this very code.
 *
 * The tag: AES-GCM with nothing to encrypt (GMAC, NIST SP 800-38D section
 * 3) over the chunk's header and bytes as associated data, under the
 * team's lane key (keyex_derive_lane_key: every rank of the team holds
 * it, nobody else). The nonce is SP 800-38D's deterministic construction
 * (section 8.2.1): the fixed field is (source rank, destination rank), 24
 * bits each, the invocation field the chunk's sequence in that direction,
 * 48 bits; so no nonce repeats under the key, teams are at most 2^24
 * ranks, and a direction ends at 2^48 chunks. The sequence makes a
 * replayed or reordered chunk visible before it touches a stream.
 */
#ifndef UCT_CRYPT_LANE_RX_H
#define UCT_CRYPT_LANE_RX_H

#include "aead/aead.h"
#include "keyex/keyex.h"

#include <ucs/datastruct/khash.h>
#include <stddef.h>
#include <stdint.h>

typedef struct uct_crypt_lane_team uct_crypt_lane_team_t;

KHASH_MAP_INIT_INT64(uct_crypt_lane_teams, uct_crypt_lane_team_t*);

enum {
    UCT_CRYPT_LANE_TEAM_MAX_RANKS = 1 << 24  /* the nonce's rank fields */
};

/* What the caller's log is told (never message contents) */
typedef enum {
    /* a chunk no rank of the team sent to this one, or one seen before:
     * a stranger's doing, dropped and counted (src_rank as the chunk
     * claims it, unproven; the caller limits how often it logs these) */
    UCT_CRYPT_LANE_RX_REFUSED,
    /* an authentic chunk the lane could not keep (too many streams) */
    UCT_CRYPT_LANE_RX_DROPPED,
    /* the stream of (team, src_rank) failed */
    UCT_CRYPT_LANE_RX_FAILED
} uct_crypt_lane_rx_event_t;

typedef void (*uct_crypt_lane_rx_log_t)(uint64_t team, uint32_t src_rank,
                                        uct_crypt_lane_rx_event_t event,
                                        const char *why);

typedef struct uct_crypt_lane_rx {
    /* bounds a peer cannot push past: one message, all messages held for
     * receives not posted yet, the number of streams */
    size_t                  msg_max;
    size_t                  buffer_max;
    unsigned                max_streams;
    crypt_aead_backend_t    backend;   /* of the lane keys */
    uct_crypt_lane_rx_log_t log;
    khash_t(uct_crypt_lane_teams) teams;
    unsigned                num_streams;
    size_t                  buffered;   /* held, partial and complete */
    uint64_t                bytes_received;
    uint64_t                chunks_refused; /* dropped unauthenticated,
                                               not ours, or replayed */
} uct_crypt_lane_rx_t;

void uct_crypt_lane_rx_init(uct_crypt_lane_rx_t *rx, size_t msg_max,
                            size_t buffer_max, unsigned max_streams,
                            crypt_aead_backend_t backend,
                            uct_crypt_lane_rx_log_t log);

/* frees every team, its key, its streams and what they hold */
void uct_crypt_lane_rx_cleanup(uct_crypt_lane_rx_t *rx);

/* The team `team` of `size` ranks, this process being `rank`, whose
 * chunks carry tags under `key` (16 or 32 bytes, not kept: expanded into
 * the AEAD's key). 0, or -1: a team of that id already, a size the nonce
 * cannot hold, no memory, the cipher refused the key. */
int uct_crypt_lane_rx_team_add(uct_crypt_lane_rx_t *rx, uint64_t team,
                               uint32_t rank, uint32_t size,
                               const uint8_t *key, size_t key_len);

/* The team is gone: its streams, what they hold and its key too. Later
 * chunks naming it are refused as a stranger's. */
void uct_crypt_lane_rx_team_remove(uct_crypt_lane_rx_t *rx, uint64_t team);

/* 1 when this process is a rank of `team` other than `dst_rank`, which
 * is one of its ranks: what a message needs before its chunks can be
 * sealed */
int uct_crypt_lane_rx_may_send(const uct_crypt_lane_rx_t *rx, uint64_t team,
                               uint32_t dst_rank);

/* Sending: `chunk` holds `body_len` bytes of a message after room for the
 * header; the header (this rank as source, the next sequence towards
 * `dst_rank`) is written in front and the tag behind them
 * (sizeof(crypt_lane_chunk_hdr_t) + body_len + CRYPT_LANE_CHUNK_TAG_LEN
 * bytes in all). 0, or -1 with the reason in `why`: no such team or rank,
 * the direction's sequence is spent, the cipher failed (then the chunk
 * must not be sent). */
int uct_crypt_lane_chunk_seal(uct_crypt_lane_rx_t *rx, uint64_t team,
                              uint32_t dst_rank, uint32_t flags, uint64_t total,
                              uint8_t *chunk, size_t body_len, const char **why);

/* One chunk as it arrived, header and tag included. `from`: on crypt's
 * own wire the static key of the connection it came on (a stream is bound
 * to the first), else NULL. */
void uct_crypt_lane_rx_chunk(uct_crypt_lane_rx_t *rx, const void *data,
                             size_t length,
                             const uint8_t from[KEYEX_PUBLIC_KEY_LEN]);

/* The next message of (team, src_rank) into buf[len]: 1 when it is there,
 * 0 when not yet (the buffer stays posted: chunks go straight into it;
 * call again with the same buffer), -1 when the stream failed or the team
 * is not ours. `peer`: the static key of the peer the rank is at (own
 * wire), or NULL. */
int uct_crypt_lane_rx_recv(uct_crypt_lane_rx_t *rx, uint64_t team,
                           uint32_t src_rank,
                           const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                           void *buf, size_t len);

/* A receive that returned 0 is abandoned: nothing more is written to its
 * buffer (a stream that had begun writing there fails) */
void uct_crypt_lane_rx_cancel(uct_crypt_lane_rx_t *rx, uint64_t team,
                              uint32_t src_rank);

/* The bytes held, counted by walking every stream (what `buffered` must
 * equal: for tests) */
size_t uct_crypt_lane_rx_held(const uct_crypt_lane_rx_t *rx);

#endif
