/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The own wire's frames: taken from the receive buffer, control frames
 * sealed and opened (wire/wire_frame.h).
 */
#include "uct_crypt/wire/wire_frame.h"
#include "keyex/noise.h"

#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static uct_crypt_frame_verdict_t uct_crypt_frame_bad(char *why, size_t why_len,
                                                     const char *reason)
{
    snprintf(why, why_len, "%s", reason);
    return UCT_CRYPT_FRAME_BAD;
}

/* A HEARTBEAT or CLOSE, whole: authentic, and counting what arrived; a
 * TAKEN: authentic, its count at least 1 and never below the last. The
 * control nonce is a counter of control frames (Noise's n, noise.h), the
 * associated data the frame header. */
static uct_crypt_frame_verdict_t
uct_crypt_frame_control(uct_crypt_frame_rx_t *rx, const crypt_wire_frame_hdr_t *hdr,
                        const uint8_t *body, size_t length, char *why, size_t why_len)
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    uint64_t count;

    keyex_noise_nonce(rx->ctrl_seq++, nonce);
    if ((length != UCT_CRYPT_WIRE_CTRL_LEN) ||
        (crypt_aead_open(rx->ctrl_key, nonce, hdr, sizeof(*hdr), body,
                         sizeof(count), &count, body + sizeof(count)) !=
         CRYPT_AEAD_OK)) {
        return uct_crypt_frame_bad(why, why_len, "forged control frame");
    }
    if (hdr->type == CRYPT_WIRE_FRAME_TAKEN) {
        if ((le64toh(count) == 0) || (le64toh(count) < rx->took)) {
            return uct_crypt_frame_bad(why, why_len, "a TAKEN out of order");
        }
        rx->took = le64toh(count);
        return UCT_CRYPT_FRAME_CONTROL;
    }
    if (le64toh(count) != rx->records) {
        snprintf(why, why_len, "records lost on the way (%" PRIu64 " sent, %"
                 PRIu64 " arrived)", le64toh(count), rx->records);
        return UCT_CRYPT_FRAME_BAD;
    }
    if (hdr->type == CRYPT_WIRE_FRAME_CLOSE) {
        rx->closed = 1;
    }
    return UCT_CRYPT_FRAME_CONTROL;
}

/* The header at the front of buf (whole), checked before anything of its
 * body is read: a verdict of BAD, or MORE to go on */
static uct_crypt_frame_verdict_t
uct_crypt_frame_header(const uct_crypt_frame_rx_t *rx, const uint8_t *buf,
                       crypt_wire_frame_hdr_t *hdr, char *why, size_t why_len)
{
    size_t length;

    memcpy(hdr, buf, sizeof(*hdr));
    length = le32toh(hdr->length);
    if ((length > UCT_CRYPT_WIRE_MAX_BCOPY) ||
        (hdr->reserved[0] | hdr->reserved[1] | hdr->reserved[2]) ||
        ((hdr->type != CRYPT_WIRE_FRAME_RECORD) &&
         (hdr->type != CRYPT_WIRE_FRAME_CLOSE) &&
         (hdr->type != CRYPT_WIRE_FRAME_HEARTBEAT) &&
         (hdr->type != CRYPT_WIRE_FRAME_SEGMENT) &&
         (hdr->type != CRYPT_WIRE_FRAME_TAKEN)) ||
        (rx->closed && (hdr->type != CRYPT_WIRE_FRAME_TAKEN))) {
        /* nothing may follow the peer's CLOSE but its answer to our first
         * record (our half may go on after its half ended) */
        return uct_crypt_frame_bad(why, why_len, "malformed frame header");
    }
    /* a segment comes right behind the record that announced it, of the
     * length announced, and nowhere else */
    if ((hdr->type == CRYPT_WIRE_FRAME_SEGMENT) ?
        ((rx->segment_len == 0) || (length != rx->segment_len)) :
        (rx->segment_len != 0)) {
        return uct_crypt_frame_bad(why, why_len, "a bulk segment out of place");
    }
    return UCT_CRYPT_FRAME_MORE;
}

uct_crypt_frame_verdict_t
uct_crypt_frame_next(uct_crypt_frame_rx_t *rx, const uint8_t *buf, size_t len,
                     crypt_wire_frame_hdr_t *hdr, size_t *frame_len,
                     char *why, size_t why_len)
{
    size_t length;

    if (len < CRYPT_WIRE_FRAME_HDR_LEN) {
        return UCT_CRYPT_FRAME_MORE;
    }
    if (uct_crypt_frame_header(rx, buf, hdr, why, why_len) == UCT_CRYPT_FRAME_BAD) {
        return UCT_CRYPT_FRAME_BAD;
    }
    length = le32toh(hdr->length);
    if (len - CRYPT_WIRE_FRAME_HDR_LEN < length) {
        return UCT_CRYPT_FRAME_MORE;
    }
    *frame_len = CRYPT_WIRE_FRAME_HDR_LEN + length;
    if ((hdr->type == CRYPT_WIRE_FRAME_CLOSE) ||
        (hdr->type == CRYPT_WIRE_FRAME_HEARTBEAT) ||
        (hdr->type == CRYPT_WIRE_FRAME_TAKEN)) {
        return uct_crypt_frame_control(rx, hdr, buf + CRYPT_WIRE_FRAME_HDR_LEN,
                                       length, why, why_len);
    }
    if (hdr->type == CRYPT_WIRE_FRAME_SEGMENT) {
        rx->segment_len = 0;
    }
    ++rx->records;
    return UCT_CRYPT_FRAME_DATA;
}

uct_crypt_frame_verdict_t
uct_crypt_frame_segment_header(uct_crypt_frame_rx_t *rx, const uint8_t *buf,
                               size_t len, char *why, size_t why_len)
{
    crypt_wire_frame_hdr_t hdr;

    if (len < CRYPT_WIRE_FRAME_HDR_LEN) {
        return UCT_CRYPT_FRAME_MORE;
    }
    if ((uct_crypt_frame_header(rx, buf, &hdr, why, why_len) == UCT_CRYPT_FRAME_BAD) ||
        (hdr.type != CRYPT_WIRE_FRAME_SEGMENT)) {
        return uct_crypt_frame_bad(why, why_len, "a bulk segment out of place");
    }
    rx->segment_len = 0;
    ++rx->records;
    return UCT_CRYPT_FRAME_DATA;
}

size_t uct_crypt_frame_rx_room(const uint8_t *buf, size_t len)
{
    crypt_wire_frame_hdr_t hdr;
    size_t frame;

    if (len >= CRYPT_WIRE_FRAME_HDR_LEN) {
        memcpy(&hdr, buf, sizeof(hdr));
        frame = CRYPT_WIRE_FRAME_HDR_LEN + le32toh(hdr.length);
        if ((frame >= UCT_CRYPT_WIRE_LARGE_FRAME) &&
            (frame <= UCT_CRYPT_WIRE_FRAME_MAX) && (frame > len)) {
            return frame - len;
        }
    }
    return UCT_CRYPT_WIRE_FRAME_MAX - len;
}

int uct_crypt_frame_seal_control(crypt_aead_key_t *key, uint64_t seq,
                                 uint8_t type, uint64_t count, uint8_t *out)
{
    crypt_wire_frame_hdr_t hdr = {0};
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    uint64_t le_count = htole64(count);
    uint8_t *body = out + sizeof(hdr);

    hdr.length = htole32(UCT_CRYPT_WIRE_CTRL_LEN);
    hdr.type   = type;
    memcpy(out, &hdr, sizeof(hdr));
    keyex_noise_nonce(seq, nonce);
    return (crypt_aead_seal(key, nonce, &hdr, sizeof(hdr), &le_count,
                            sizeof(le_count), body, body + sizeof(le_count)) ==
            CRYPT_AEAD_OK) ? 0 : -1;
}
