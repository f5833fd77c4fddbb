/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane's chunk reassembly (src/uct_crypt/uct_crypt_lane_rx.c:
 * the headers of lane chunks are not sealed, so this is where attacker-chosen
 * bytes meet the lane's buffers), with small bounds (the code is the same
 * at any size; short inputs then reach every bound). First input byte:
 *   even (raw): a script of chunks (as given, or with the header built from
 *     the input on a few streams so reassembly goes deep), receives and
 *     cancels. Every receive buffer is allocated at exactly the asked length
 *     and freed as soon as the lane may no longer write to it, so ASan
 *     catches a write past it or after; after each step the bytes the lane
 *     holds must be what it counts, within its bound; at the end everything
 *     is freed (LeakSanitizer).
 *   odd (honest): messages of the lengths the input picks, cut into chunks
 *     of the sizes it picks, streams interleaved and receives posted where
 *     it says: no stream may fail, and every message arrives whole, in order.
 */
#include "ucx_crypt_config.h"
#include "uct_crypt/uct_crypt_lane_rx.h"
#include "uct_crypt/uct_crypt_format.h"
#include "fuzz_common.h"

#include <endian.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    FUZZ_STREAMS  = 8,    /* (team 0..1) x (rank 0..3) */
    FUZZ_MSG_MAX  = 4096, /* honest mode */
    FUZZ_MAX_MSGS = 4,    /* per stream, honest mode */
    /* raw mode: small messages, so that short inputs reach every bound */
    FUZZ_RAW_MSG_MAX = 256
};

static const uint8_t fuzz_peer_a[KEYEX_PUBLIC_KEY_LEN] = {0xa},
                     fuzz_peer_b[KEYEX_PUBLIC_KEY_LEN] = {0xb};
static int fuzz_honest;

static void fuzz_log(uint64_t team, uint32_t src_rank, int stream_failed,
                     const char *why)
{
    if (fuzz_honest) {
        abort(); /* an honest stream failed */
    }
}

static uint16_t fuzz_u16(fuzz_input_t *in)
{
    uint16_t lo = fuzz_u8(in);

    return (uint16_t)(lo | (fuzz_u8(in) << 8));
}

static void fuzz_check_bound(const uct_crypt_lane_rx_t *rx)
{
    if ((uct_crypt_lane_rx_held(rx) != rx->buffered) ||
        (rx->buffered > rx->buffer_max) || (rx->num_streams > rx->max_streams)) {
        abort();
    }
}

static void fuzz_chunk(uct_crypt_lane_rx_t *rx, const crypt_lane_chunk_hdr_t *hdr,
                       const uint8_t *body, size_t body_len, const uint8_t *from)
{
    /* exactly its length: a read past the chunk is caught */
    uint8_t *chunk = malloc(sizeof(*hdr) + body_len);

    memcpy(chunk, hdr, sizeof(*hdr));
    if (body_len > 0) {
        memcpy(chunk + sizeof(*hdr), body, body_len);
    }
    uct_crypt_lane_rx_chunk(rx, chunk, sizeof(*hdr) + body_len, from);
    free(chunk);
}

static void fuzz_hdr(crypt_lane_chunk_hdr_t *hdr, int sid, uint32_t flags,
                     uint64_t total)
{
    hdr->team     = htole64((uint64_t)(sid & 1));
    hdr->src_rank = htole32((uint32_t)(sid >> 1));
    hdr->flags    = htole32(flags);
    hdr->total    = htole64(total);
}

/* ---- raw ------------------------------------------------------------------ */

typedef struct {
    uint8_t *buf;   /* posted: a receive returned 0 on it */
    size_t  len;
} fuzz_posted_t;

static void fuzz_raw(fuzz_input_t *in)
{
    static const uint8_t *froms[4] = {NULL, fuzz_peer_a, fuzz_peer_b, NULL};
    fuzz_posted_t posted[FUZZ_STREAMS] = {{0}};
    uint64_t totals[FUZZ_STREAMS] = {0};
    crypt_lane_chunk_hdr_t hdr;
    uct_crypt_lane_rx_t rx;
    uint8_t op, *buf;
    size_t len;
    int sid, ret;

    uct_crypt_lane_rx_init(&rx, FUZZ_RAW_MSG_MAX, 2 * FUZZ_RAW_MSG_MAX,
                           FUZZ_STREAMS, fuzz_log);
    while (in->size > 0) {
        op  = fuzz_u8(in);
        sid = (op >> 2) & 7;
        switch (op & 3) {
        case 0: /* a chunk as given: header and body */
            len = fuzz_u16(in) % (sizeof(hdr) + FUZZ_RAW_MSG_MAX + 16);
            len = (len < in->size) ? len : in->size;
            buf = malloc(len ? len : 1);
            memcpy(buf, in->data, len);
            in->data += len;
            in->size -= len;
            uct_crypt_lane_rx_chunk(&rx, buf, len, froms[op >> 6]);
            free(buf);
            break;
        case 1: /* a chunk on one of the streams, header from the input: the
                 * total of the stream's message unless the op says otherwise,
                 * so a message goes on over several chunks */
            if ((op & 0x20) || (op & 0x80)) {
                totals[sid] = fuzz_u16(in) % (FUZZ_RAW_MSG_MAX + 16);
            }
            fuzz_hdr(&hdr, sid, (op >> 5) & 3, totals[sid]);
            len = fuzz_u8(in) % (FUZZ_RAW_MSG_MAX / 2 + 16);
            len = (len < in->size) ? len : in->size;
            fuzz_chunk(&rx, &hdr, in->data, len,
                       (op & 0x40) && (op & 0x80) ? fuzz_peer_b : fuzz_peer_a);
            in->data += len;
            in->size -= len;
            break;
        case 2: /* a receive: the posted buffer again, or a new one */
            buf = posted[sid].buf;
            len = posted[sid].len;
            if ((buf == NULL) || (op & 0x20)) {
                len = fuzz_u16(in) % (FUZZ_RAW_MSG_MAX + 16);
                buf = malloc(len ? len : 1);
            }
            ret = uct_crypt_lane_rx_recv(&rx, (uint64_t)(sid & 1), (uint32_t)(sid >> 1),
                                         (op & 0x40) ? fuzz_peer_b : fuzz_peer_a,
                                         buf, len);
            /* whatever buffer the lane no longer holds goes now */
            if (posted[sid].buf != buf) {
                free(posted[sid].buf);
            }
            if (ret == 0) {
                posted[sid].buf = buf;
                posted[sid].len = len;
            } else {
                free(buf);
                posted[sid].buf = NULL;
            }
            break;
        default: /* the receive abandoned */
            uct_crypt_lane_rx_cancel(&rx, (uint64_t)(sid & 1), (uint32_t)(sid >> 1));
            free(posted[sid].buf);
            posted[sid].buf = NULL;
            break;
        }
        fuzz_check_bound(&rx);
    }
    uct_crypt_lane_rx_cleanup(&rx);
    for (sid = 0; sid < FUZZ_STREAMS; ++sid) {
        free(posted[sid].buf);
    }
}

/* ---- honest --------------------------------------------------------------- */

static uint8_t fuzz_pattern(int sid, int m, size_t i)
{
    return (uint8_t)(sid * 31 + m * 7 + i * 13 + (i >> 8));
}

typedef struct {
    size_t  len[FUZZ_MAX_MSGS];
    int     nmsgs;
    int     sent, offset;  /* sender: message, bytes of it sent */
    int     received;      /* receiver: messages received */
    uint8_t *posted;
} fuzz_stream_t;

/* the next chunk of stream `sid`, of up to `want` bytes; 0 when all sent */
static int fuzz_send_chunk(uct_crypt_lane_rx_t *rx, fuzz_stream_t *st, int sid,
                           size_t want)
{
    uint8_t body[FUZZ_MSG_MAX];
    crypt_lane_chunk_hdr_t hdr;
    size_t len, chunk, i;
    uint32_t flags = 0;

    if (st->sent == st->nmsgs) {
        return 0;
    }
    len   = st->len[st->sent];
    chunk = len - st->offset;
    chunk = (want < chunk) ? want : chunk;
    flags |= (st->offset == 0) ? CRYPT_LANE_CHUNK_FIRST : 0;
    flags |= (st->offset + chunk == len) ? CRYPT_LANE_CHUNK_LAST : 0;
    for (i = 0; i < chunk; ++i) {
        body[i] = fuzz_pattern(sid, st->sent, st->offset + i);
    }
    fuzz_hdr(&hdr, sid, flags, len);
    fuzz_chunk(rx, &hdr, body, chunk, fuzz_peer_a);
    st->offset += chunk;
    if (st->offset == len) {
        ++st->sent;
        st->offset = 0;
    }
    return 1;
}

/* a receive of stream `sid`'s next message: 1 when it came (checked) */
static int fuzz_recv(uct_crypt_lane_rx_t *rx, fuzz_stream_t *st, int sid)
{
    size_t len, i;
    int ret;

    if (st->received == st->nmsgs) {
        return 0;
    }
    len = st->len[st->received];
    if (st->posted == NULL) {
        st->posted = malloc(len ? len : 1);
    }
    ret = uct_crypt_lane_rx_recv(rx, (uint64_t)(sid & 1), (uint32_t)(sid >> 1),
                                 fuzz_peer_a, st->posted, len);
    if (ret < 0) {
        abort();
    }
    if (ret == 0) {
        return 0;
    }
    for (i = 0; i < len; ++i) {
        if (st->posted[i] != fuzz_pattern(sid, st->received, i)) {
            abort(); /* not what was sent */
        }
    }
    free(st->posted);
    st->posted = NULL;
    ++st->received;
    return 1;
}

static void fuzz_honest_run(fuzz_input_t *in)
{
    fuzz_stream_t streams[FUZZ_STREAMS] = {{{0}}};
    int nstreams = 1 + fuzz_u8(in) % FUZZ_STREAMS, sid, m, progress;
    uct_crypt_lane_rx_t rx;
    uint8_t op;

    /* room for everything at once: an honest sender never meets the bound */
    uct_crypt_lane_rx_init(&rx, FUZZ_MSG_MAX,
                           (size_t)FUZZ_STREAMS * FUZZ_MAX_MSGS * FUZZ_MSG_MAX,
                           FUZZ_STREAMS, fuzz_log);
    for (sid = 0; sid < nstreams; ++sid) {
        streams[sid].nmsgs = 1 + fuzz_u8(in) % FUZZ_MAX_MSGS;
        for (m = 0; m < streams[sid].nmsgs; ++m) {
            streams[sid].len[m] = fuzz_u16(in) % (FUZZ_MSG_MAX + 1);
        }
    }
    while (in->size > 0) {
        op  = fuzz_u8(in);
        sid = (op >> 1) % nstreams;
        if (op & 1) {
            fuzz_send_chunk(&rx, &streams[sid], sid, 1 + fuzz_u8(in) * 16u);
        } else {
            fuzz_recv(&rx, &streams[sid], sid);
        }
        fuzz_check_bound(&rx);
    }
    /* the rest: everything sent, everything received */
    do {
        progress = 0;
        for (sid = 0; sid < nstreams; ++sid) {
            progress |= fuzz_send_chunk(&rx, &streams[sid], sid, FUZZ_MSG_MAX);
            progress |= fuzz_recv(&rx, &streams[sid], sid);
        }
    } while (progress);
    for (sid = 0; sid < nstreams; ++sid) {
        if (streams[sid].received != streams[sid].nmsgs) {
            abort();
        }
    }
    if (rx.buffered != 0) {
        abort(); /* all delivered: nothing may be held */
    }
    uct_crypt_lane_rx_cleanup(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};

    if (size == 0) {
        return 0;
    }
    fuzz_honest = data[0] & 1;
    ++in.data;
    --in.size;
    if (fuzz_honest) {
        fuzz_honest_run(&in);
    } else {
        fuzz_raw(&in);
    }
    return 0;
}
