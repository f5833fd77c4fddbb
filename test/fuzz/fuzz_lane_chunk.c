/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane's chunks (src/uct_crypt/lane/lane_rx.c: where
 * attacker-chosen bytes meet the lane's tags and buffers), with small
 * bounds (the code is the same at any size; short inputs then reach every
 * bound). Two teams (0, 1) of five ranks; the lane is rank 4 of both, and
 * ranks 0..3 send (a stream is (team, rank)). First input byte:
 *   even (raw): a script of chunks (as given, which a stranger could
 *     send; or with the header built from the input and tagged by the
 *     sending rank, as a rank of the team gone bad could send, so that
 *     reassembly goes deep), chunks again (replays), chunks tagged and
 *     never delivered (lost), receives and cancels. Every receive buffer
 *     is allocated at exactly the asked length
 *     and freed as soon as the lane may no longer write to it, so ASan
 *     catches a write past it or after; after each step the bytes the lane
 *     holds must be what it counts, within its bound; at the end everything
 *     is freed (LeakSanitizer).
 *   odd (honest): messages of the lengths the input picks, cut into chunks
 *     of the sizes it picks, streams interleaved and receives posted where
 *     it says: no stream may fail, and every message arrives whole, in order.
 */
#include "ucx_crypt_config.h"
#include "uct_crypt/lane/lane_rx.h"
#include "uct_crypt/base/format.h"
#include "fuzz_common.h"

#include <endian.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    FUZZ_STREAMS  = 8,    /* (team 0..1) x (rank 0..3) */
    FUZZ_SENDERS  = 4,
    FUZZ_RANKS    = 5,    /* the lane is rank 4 */
    FUZZ_CHUNK_MAX = sizeof(crypt_lane_chunk_hdr_t) + 4096 + CRYPT_LANE_CHUNK_TAG_LEN,
    FUZZ_MSG_MAX  = 4096, /* honest mode */
    FUZZ_MAX_MSGS = 4,    /* per stream, honest mode */
    /* raw mode: small messages, so that short inputs reach every bound */
    FUZZ_RAW_MSG_MAX = 256
};

static const uint8_t fuzz_peer_a[KEYEX_PUBLIC_KEY_LEN] = {0xa},
                     fuzz_peer_b[KEYEX_PUBLIC_KEY_LEN] = {0xb};
static const uint8_t fuzz_key[32] = {0x1a, 0x2e};
static int fuzz_honest;
/* what ranks 0..3 seal with, and the last chunk made (for replays) */
static uct_crypt_lane_rx_t fuzz_senders[FUZZ_SENDERS];
static uint8_t fuzz_last[FUZZ_CHUNK_MAX];
static size_t fuzz_last_len;

static void fuzz_log(uint64_t team, uint32_t src_rank, uct_crypt_lane_rx_event_t event,
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

/* The lane (rank 4 of teams 0 and 1) and its senders */
static void fuzz_teams_init(uct_crypt_lane_rx_t *rx, size_t msg_max,
                            size_t buffer_max)
{
    crypt_aead_backend_t backend = crypt_aead_backend_resolve(CRYPT_AEAD_BACKEND_AUTO);
    uint64_t team;
    int r;

    if (crypt_aead_init(backend) != CRYPT_AEAD_OK) {
        abort();
    }
    uct_crypt_lane_rx_init(rx, msg_max, buffer_max, FUZZ_STREAMS, backend,
                           fuzz_log);
    for (r = 0; r < FUZZ_SENDERS; ++r) {
        uct_crypt_lane_rx_init(&fuzz_senders[r], 0, 0, 0, backend, fuzz_log);
    }
    for (team = 0; team < 2; ++team) {
        if (uct_crypt_lane_rx_team_add(rx, team, FUZZ_RANKS - 1, FUZZ_RANKS,
                                       fuzz_key, sizeof(fuzz_key)) != 0) {
            abort();
        }
        for (r = 0; r < FUZZ_SENDERS; ++r) {
            if (uct_crypt_lane_rx_team_add(&fuzz_senders[r], team, (uint32_t)r,
                                           FUZZ_RANKS, fuzz_key,
                                           sizeof(fuzz_key)) != 0) {
                abort();
            }
        }
    }
    fuzz_last_len = 0;
}

static void fuzz_teams_cleanup(uct_crypt_lane_rx_t *rx)
{
    int r;

    uct_crypt_lane_rx_cleanup(rx);
    for (r = 0; r < FUZZ_SENDERS; ++r) {
        uct_crypt_lane_rx_cleanup(&fuzz_senders[r]);
    }
}

/* a chunk of stream `sid` tagged by its rank (kept as the last one made)
 * and, with `from`, delivered; exactly its length, so a read past the
 * chunk is caught */
static void fuzz_chunk(uct_crypt_lane_rx_t *rx, int sid, uint32_t flags,
                       uint64_t total, const uint8_t *body, size_t body_len,
                       const uint8_t *from, int deliver)
{
    size_t len = sizeof(crypt_lane_chunk_hdr_t) + body_len + CRYPT_LANE_CHUNK_TAG_LEN;
    uint8_t *chunk = malloc(len);
    const char *why;

    if (body_len > 0) {
        memcpy(chunk + sizeof(crypt_lane_chunk_hdr_t), body, body_len);
    }
    if (uct_crypt_lane_chunk_seal(&fuzz_senders[sid >> 1], (uint64_t)(sid & 1),
                                  FUZZ_RANKS - 1, flags, total, chunk, body_len,
                                  &why) != 0) {
        abort();
    }
    memcpy(fuzz_last, chunk, len);
    fuzz_last_len = len;
    if (deliver) {
        uct_crypt_lane_rx_chunk(rx, chunk, len, from);
    }
    free(chunk);
}

static void fuzz_bytes(uct_crypt_lane_rx_t *rx, const uint8_t *data, size_t len,
                       const uint8_t *from)
{
    uint8_t *buf = malloc(len ? len : 1);

    memcpy(buf, data, len);
    uct_crypt_lane_rx_chunk(rx, buf, len, from);
    free(buf);
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
    uct_crypt_lane_rx_t rx;
    uint8_t op, *buf;
    size_t len;
    int sid, ret;

    fuzz_teams_init(&rx, FUZZ_RAW_MSG_MAX, 2 * FUZZ_RAW_MSG_MAX);
    while (in->size > 0) {
        op  = fuzz_u8(in);
        sid = (op >> 2) & 7;
        switch (op & 3) {
        case 0: /* a chunk as given: header, body and tag */
            len = fuzz_u16(in) % (FUZZ_CHUNK_MAX + 16);
            len = (len < in->size) ? len : in->size;
            fuzz_bytes(&rx, in->data, len, froms[op >> 6]);
            in->data += len;
            in->size -= len;
            break;
        case 1: /* a chunk on one of the streams, header from the input and
                 * tagged by its rank: the total of the stream's message
                 * unless the op says otherwise, so a message goes on over
                 * several chunks */
            if ((op & 0x20) || (op & 0x80)) {
                totals[sid] = fuzz_u16(in) % (FUZZ_RAW_MSG_MAX + 16);
            }
            len = fuzz_u8(in) % (FUZZ_RAW_MSG_MAX / 2 + 16);
            len = (len < in->size) ? len : in->size;
            fuzz_chunk(&rx, sid, (op >> 5) & 3, totals[sid], in->data, len,
                       (op & 0x40) && (op & 0x80) ? fuzz_peer_b : fuzz_peer_a, 1);
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
        default:
            if (op & 0x20) { /* the last chunk made, again */
                fuzz_bytes(&rx, fuzz_last, fuzz_last_len,
                           (op & 0x40) ? fuzz_peer_b : fuzz_peer_a);
            } else if (op & 0x40) { /* a chunk tagged, lost on the way */
                fuzz_chunk(&rx, sid, CRYPT_LANE_CHUNK_FIRST, totals[sid], NULL, 0,
                           NULL, 0);
            } else { /* the receive abandoned */
                uct_crypt_lane_rx_cancel(&rx, (uint64_t)(sid & 1),
                                         (uint32_t)(sid >> 1));
                free(posted[sid].buf);
                posted[sid].buf = NULL;
            }
            break;
        }
        fuzz_check_bound(&rx);
    }
    fuzz_teams_cleanup(&rx);
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
    fuzz_chunk(rx, sid, flags, len, body, chunk, fuzz_peer_a, 1);
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
    fuzz_teams_init(&rx, FUZZ_MSG_MAX,
                    (size_t)FUZZ_STREAMS * FUZZ_MAX_MSGS * FUZZ_MSG_MAX);
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
    if ((rx.buffered != 0) || (rx.chunks_refused != 0)) {
        abort(); /* all delivered: nothing held, nothing refused */
    }
    fuzz_teams_cleanup(&rx);
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
