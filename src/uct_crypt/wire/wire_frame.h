/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's own wire after the handshake: the frames (base/format.h) as
 * the receiving side takes them from its buffer, and the sealed control
 * frames both sides write, without the connection around them and without
 * UCX, so that the fuzz target (test/fuzz/fuzz_wire_frames.c) runs this
 * very code. A header is checked whole before any of its frame's body is
 * read into place; nothing after the peer's CLOSE is taken; a SEGMENT
 * comes only right behind the record that announced it, of the length
 * announced; a control frame must be authentic and count the records that
 * arrived.
 */
#ifndef UCT_CRYPT_WIRE_FRAME_H
#define UCT_CRYPT_WIRE_FRAME_H

#include "uct_crypt/base/format.h"
#include "aead/aead.h"

#include <stddef.h>
#include <stdint.h>

/* Frame sizes: a record of at most max_bcopy bytes behind the header */
enum {
    UCT_CRYPT_WIRE_MAX_BCOPY   = 262144 + 256,
    UCT_CRYPT_WIRE_FRAME_MAX   = CRYPT_WIRE_FRAME_HDR_LEN + UCT_CRYPT_WIRE_MAX_BCOPY,
    UCT_CRYPT_WIRE_LARGE_FRAME = 16384, /* read alone, to its end */
    /* a control frame's body: the count, sealed */
    UCT_CRYPT_WIRE_CTRL_LEN    = 8 + CRYPT_AEAD_TAG_LEN
};

/* The receiving side's frame state of one established connection */
typedef struct uct_crypt_frame_rx {
    crypt_aead_key_t *ctrl_key;  /* the peer's control frames */
    uint64_t ctrl_seq;       /* control frames taken (their nonces) */
    uint64_t records;        /* RECORD and SEGMENT frames taken */
    size_t   segment_len;    /* the announced SEGMENT's length: it must come
                                next; 0: none may */
    int      closed;         /* the peer's CLOSE came: nothing may follow
                                but a TAKEN */
    uint64_t took;           /* of our records, how many the peer said it
                                took (its TAKEN); 0: none yet */
} uct_crypt_frame_rx_t;

typedef enum {
    UCT_CRYPT_FRAME_MORE,    /* no whole frame at the front yet */
    UCT_CRYPT_FRAME_DATA,    /* a RECORD or SEGMENT (counted; a SEGMENT
                                clears segment_len): the caller hands it on */
    UCT_CRYPT_FRAME_CONTROL, /* a HEARTBEAT or a CLOSE (closed set), authentic
                                and counting every record, or a TAKEN (took
                                set; the caller checks it against what it
                                sent) */
    UCT_CRYPT_FRAME_BAD      /* the connection must fail, for `why` */
} uct_crypt_frame_verdict_t;

/* The frame at the front of buf[len]: its header in *hdr and its whole
 * length (header and body) in *frame_len unless MORE or BAD. */
uct_crypt_frame_verdict_t
uct_crypt_frame_next(uct_crypt_frame_rx_t *rx, const uint8_t *buf, size_t len,
                     crypt_wire_frame_hdr_t *hdr, size_t *frame_len,
                     char *why, size_t why_len);

/* The announced SEGMENT's header at the front of buf[len], whose body the
 * caller receives into the segment's destination: checked as
 * uct_crypt_frame_next checks a header, and counted. DATA: taken, the
 * body (segment_len bytes) follows; MORE: no whole header yet; BAD: the
 * connection must fail, for `why` (anything but that SEGMENT). */
uct_crypt_frame_verdict_t
uct_crypt_frame_segment_header(uct_crypt_frame_rx_t *rx, const uint8_t *buf,
                               size_t len, char *why, size_t why_len);

/* How many bytes to read next into a buffer of UCT_CRYPT_WIRE_FRAME_MAX that
 * holds buf[len]: up to the end of a large frame at its front and no
 * further (it then ends where the buffer's bytes do and is never moved),
 * else all the room there is. */
size_t uct_crypt_frame_rx_room(const uint8_t *buf, size_t len);

/* A control frame of `type` counting `count` records, sealed under `key`
 * with nonce `seq`, into out[CRYPT_WIRE_FRAME_HDR_LEN +
 * UCT_CRYPT_WIRE_CTRL_LEN]. 0 on success. */
int uct_crypt_frame_seal_control(crypt_aead_key_t *key, uint64_t seq,
                                 uint8_t type, uint64_t count, uint8_t *out);

#endif
