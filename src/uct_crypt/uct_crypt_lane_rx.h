/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane's receive side (uct_crypt_lane.c), without UCX: lane
 * chunks (crypt_lane_chunk_hdr_t, uct_crypt_format.h) reassembled per (team,
 * sending rank), written straight into the buffer a receive posted or held
 * in a bounded buffer until one asks. Chunk headers are not sealed (the
 * frames they carry are): everything here is written for input an
 * attacker chose, and a bad chunk fails its stream only. libc only, so the
 * fuzz target (test/fuzz/fuzz_lane_chunk.c) runs this very code.
 */
#ifndef UCT_CRYPT_LANE_RX_H
#define UCT_CRYPT_LANE_RX_H

#include "keyex/keyex.h"

#include <stddef.h>
#include <stdint.h>

typedef struct uct_crypt_lane_stream uct_crypt_lane_stream_t;

/* A chunk was refused, and with `stream_failed` its stream failed: for
 * the caller's log (never with message contents). A chunk too short to
 * name its stream comes with src_rank UCT_CRYPT_LANE_RX_NO_RANK. */
#define UCT_CRYPT_LANE_RX_NO_RANK UINT32_MAX
typedef void (*uct_crypt_lane_rx_log_t)(uint64_t team, uint32_t src_rank,
                                        int stream_failed, const char *why);

typedef struct uct_crypt_lane_rx {
    /* bounds a peer cannot push past: one message, all messages held for
     * receives not posted yet, the number of streams */
    size_t                  msg_max;
    size_t                  buffer_max;
    unsigned                max_streams;
    uct_crypt_lane_rx_log_t log;
    uct_crypt_lane_stream_t *streams;
    unsigned                num_streams;
    size_t                  buffered;   /* held, partial and complete */
    uint64_t                bytes_received;
} uct_crypt_lane_rx_t;

void uct_crypt_lane_rx_init(uct_crypt_lane_rx_t *rx, size_t msg_max,
                            size_t buffer_max, unsigned max_streams,
                            uct_crypt_lane_rx_log_t log);

/* frees every stream and what it holds */
void uct_crypt_lane_rx_cleanup(uct_crypt_lane_rx_t *rx);

/* One chunk as it arrived, header included. `from`: on crypt's own wire
 * the static key of the connection it came on (a stream is bound to the
 * first), else NULL. A malformed chunk fails its stream and is logged. */
void uct_crypt_lane_rx_chunk(uct_crypt_lane_rx_t *rx, const void *data,
                             size_t length,
                             const uint8_t from[KEYEX_PUBLIC_KEY_LEN]);

/* The next message of (team, src_rank) into buf[len]: 1 when it is there,
 * 0 when not yet (the buffer stays posted: chunks go straight into it;
 * call again with the same buffer), -1 when the stream failed. `peer`:
 * the static key of the peer the rank is at (own wire), or NULL. */
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
