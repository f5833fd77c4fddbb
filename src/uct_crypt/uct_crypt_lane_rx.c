/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane's receive side: chunk reassembly (uct_crypt_lane_rx.h).
 */
#include "uct_crypt/uct_crypt_lane_rx.h"
#include "uct_crypt/uct_crypt_format.h"

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct uct_crypt_lane_msg {
    struct uct_crypt_lane_msg *next;
    size_t                    len;
    uint8_t                   data[];
} uct_crypt_lane_msg_t;

/* what arrives from one (team, rank) */
struct uct_crypt_lane_stream {
    struct uct_crypt_lane_stream *next;
    uint64_t             team;
    uint32_t             src_rank;
    int                  failed;   /* a malformed chunk: the stream is done */
    /* own wire: the static key of the connection its chunks came on; every
     * later chunk, and the receive, must name the same peer */
    uint8_t              from[KEYEX_PUBLIC_KEY_LEN];
    int                  from_known;
    uct_crypt_lane_msg_t *partial; /* being reassembled */
    size_t               filled;
    uct_crypt_lane_msg_t *head, *tail; /* complete, in arrival order */
    /* the caller's buffer for the stream's next message (a receive that
     * returned 0), until a receive returns non-zero or it is cancelled */
    uint8_t              *posted;
    size_t               posted_len;
    int                  direct;      /* a message is being written there */
    int                  direct_done; /* ... and has all arrived */
};

void uct_crypt_lane_rx_init(uct_crypt_lane_rx_t *rx, size_t msg_max,
                            size_t buffer_max, unsigned max_streams,
                            uct_crypt_lane_rx_log_t log)
{
    memset(rx, 0, sizeof(*rx));
    rx->msg_max     = msg_max;
    rx->buffer_max  = buffer_max;
    rx->max_streams = max_streams;
    rx->log         = log;
}

void uct_crypt_lane_rx_cleanup(uct_crypt_lane_rx_t *rx)
{
    uct_crypt_lane_stream_t *s;
    uct_crypt_lane_msg_t *msg;

    while ((s = rx->streams) != NULL) {
        rx->streams = s->next;
        while ((msg = s->head) != NULL) {
            s->head = msg->next;
            free(msg);
        }
        free(s->partial);
        free(s);
    }
    rx->num_streams = 0;
    rx->buffered    = 0;
}

size_t uct_crypt_lane_rx_held(const uct_crypt_lane_rx_t *rx)
{
    const uct_crypt_lane_stream_t *s;
    const uct_crypt_lane_msg_t *msg;
    size_t held = 0;

    for (s = rx->streams; s != NULL; s = s->next) {
        held += (s->partial != NULL) ? s->partial->len : 0;
        for (msg = s->head; msg != NULL; msg = msg->next) {
            held += msg->len;
        }
    }
    return held;
}

static uct_crypt_lane_stream_t *
uct_crypt_lane_rx_stream(uct_crypt_lane_rx_t *rx, uint64_t team, uint32_t src_rank)
{
    uct_crypt_lane_stream_t *s;

    for (s = rx->streams; s != NULL; s = s->next) {
        if ((s->team == team) && (s->src_rank == src_rank)) {
            return s;
        }
    }
    if (rx->num_streams >= rx->max_streams) {
        rx->log(team, src_rank, 0, "too many streams already");
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s != NULL) {
        s->team     = team;
        s->src_rank = src_rank;
        s->next     = rx->streams;
        rx->streams = s;
        ++rx->num_streams;
    }
    return s;
}

/* a message the lane holds goes (delivered, or its stream failed) */
static void uct_crypt_lane_rx_msg_free(uct_crypt_lane_rx_t *rx,
                                       uct_crypt_lane_msg_t *msg)
{
    if (msg != NULL) {
        rx->buffered -= msg->len;
        free(msg);
    }
}

static void uct_crypt_lane_rx_fail(uct_crypt_lane_rx_t *rx,
                                   uct_crypt_lane_stream_t *s, const char *why)
{
    rx->log(s->team, s->src_rank, 1, why);
    s->failed = 1;
    uct_crypt_lane_rx_msg_free(rx, s->partial);
    s->partial = NULL;
    /* nor is anything it holds ever delivered: its memory goes back to the
     * bound, for the other streams */
    while (s->head != NULL) {
        uct_crypt_lane_msg_t *msg = s->head;

        s->head = msg->next;
        uct_crypt_lane_rx_msg_free(rx, msg);
    }
    s->tail    = NULL;
    s->posted  = NULL; /* nothing more is written to the caller's buffer */
    s->direct  = 0;
}

/* where the current message's bytes go: the posted buffer or the partial */
static uint8_t *uct_crypt_lane_rx_dest(uct_crypt_lane_stream_t *s, size_t *total)
{
    if (s->direct) {
        *total = s->posted_len;
        return s->posted;
    }
    *total = s->partial->len;
    return s->partial->data;
}

/* a FIRST chunk: the message goes to the posted buffer when it is the one
 * asked for, or into a new held message within the bounds. 0: failed. */
static int uct_crypt_lane_rx_begin(uct_crypt_lane_rx_t *rx,
                                   uct_crypt_lane_stream_t *s, uint64_t total)
{
    if ((s->partial != NULL) || s->direct) {
        uct_crypt_lane_rx_fail(rx, s, "a message began inside another");
        return 0;
    }
    if (total > rx->msg_max) {
        uct_crypt_lane_rx_fail(rx, s, "message longer than the lane allows");
        return 0;
    }
    s->filled = 0;
    if ((s->posted != NULL) && !s->direct_done && (s->head == NULL) &&
        (total == s->posted_len)) {
        s->direct = 1; /* the next message, of the length asked for */
        return 1;
    }
    if (total > rx->buffer_max - rx->buffered) {
        uct_crypt_lane_rx_fail(rx, s, "the lane holds all it may for receives "
                               "not posted yet");
        return 0;
    }
    s->partial = malloc(sizeof(*s->partial) + total);
    if (s->partial == NULL) {
        uct_crypt_lane_rx_fail(rx, s, "out of memory");
        return 0;
    }
    s->partial->next = NULL;
    s->partial->len  = total;
    rx->buffered    += total;
    return 1;
}

void uct_crypt_lane_rx_chunk(uct_crypt_lane_rx_t *rx, const void *data,
                             size_t length,
                             const uint8_t from[KEYEX_PUBLIC_KEY_LEN])
{
    crypt_lane_chunk_hdr_t hdr;
    uct_crypt_lane_stream_t *s;
    size_t chunk, total;
    uint8_t *dest;

    if (length < sizeof(hdr)) {
        rx->log(0, UCT_CRYPT_LANE_RX_NO_RANK, 0, "shorter than its header");
        return;
    }
    memcpy(&hdr, data, sizeof(hdr));
    /* little endian on the wire (uct_crypt_format.h); host order from here */
    hdr.team     = le64toh(hdr.team);
    hdr.src_rank = le32toh(hdr.src_rank);
    hdr.flags    = le32toh(hdr.flags);
    hdr.total    = le64toh(hdr.total);
    chunk = length - sizeof(hdr);
    s     = uct_crypt_lane_rx_stream(rx, hdr.team, hdr.src_rank);
    if ((s == NULL) || s->failed) {
        return;
    }
    if (from != NULL) {
        if (!s->from_known) {
            memcpy(s->from, from, sizeof(s->from));
            s->from_known = 1;
        } else if (memcmp(s->from, from, sizeof(s->from))) {
            uct_crypt_lane_rx_fail(rx, s, "a chunk from another peer than the "
                                   "stream's");
            return;
        }
    }

    if (hdr.flags & CRYPT_LANE_CHUNK_FIRST) {
        if (!uct_crypt_lane_rx_begin(rx, s, hdr.total)) {
            return;
        }
    } else if ((s->partial == NULL) && !s->direct) {
        uct_crypt_lane_rx_fail(rx, s, "a chunk outside its message");
        return;
    }
    dest = uct_crypt_lane_rx_dest(s, &total);
    if (hdr.total != total) {
        uct_crypt_lane_rx_fail(rx, s, "a chunk outside its message");
        return;
    }
    if (chunk > total - s->filled) {
        uct_crypt_lane_rx_fail(rx, s, "a chunk beyond its message's length");
        return;
    }
    memcpy(dest + s->filled, (const uint8_t*)data + sizeof(hdr), chunk);
    s->filled          += chunk;
    rx->bytes_received += chunk;

    if (hdr.flags & CRYPT_LANE_CHUNK_LAST) {
        if (s->filled != total) {
            uct_crypt_lane_rx_fail(rx, s, "message ended short");
            return;
        }
        if (s->direct) {
            s->direct      = 0;
            s->direct_done = 1;
            return;
        }
        if (s->tail != NULL) {
            s->tail->next = s->partial;
        } else {
            s->head = s->partial;
        }
        s->tail    = s->partial;
        s->partial = NULL;
    }
}

int uct_crypt_lane_rx_recv(uct_crypt_lane_rx_t *rx, uint64_t team,
                           uint32_t src_rank,
                           const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                           void *buf, size_t len)
{
    uct_crypt_lane_stream_t *s = uct_crypt_lane_rx_stream(rx, team, src_rank);
    uct_crypt_lane_msg_t *msg;
    char why[96];

    if ((s == NULL) || s->failed) {
        return -1;
    }
    if (s->from_known && (peer != NULL) && memcmp(s->from, peer, sizeof(s->from))) {
        uct_crypt_lane_rx_fail(rx, s, "it came from another peer than the one "
                               "its rank is at");
        return -1;
    }
    if ((s->direct || s->direct_done) && ((uint8_t*)buf != s->posted)) {
        uct_crypt_lane_rx_fail(rx, s, "a receive moved its buffer");
        return -1;
    }
    if (s->direct_done) {
        s->direct_done = 0;
        s->posted      = NULL;
        return 1;
    }
    msg = s->head;
    if (msg == NULL) {
        if (!s->direct) {
            s->posted     = buf;
            s->posted_len = len;
            if ((s->partial != NULL) && (s->partial->len == len)) {
                /* begun before the receive: the rest goes there too */
                memcpy(buf, s->partial->data, s->filled);
                uct_crypt_lane_rx_msg_free(rx, s->partial);
                s->partial = NULL;
                s->direct  = 1;
            }
        }
        return 0;
    }
    if (msg->len != len) {
        snprintf(why, sizeof(why), "it sent %zu bytes where %zu were expected",
                 msg->len, len);
        uct_crypt_lane_rx_fail(rx, s, why);
        return -1;
    }
    s->posted = NULL;
    s->head   = msg->next;
    if (s->head == NULL) {
        s->tail = NULL;
    }
    if (len > 0) { /* an empty message may have no buffer */
        memcpy(buf, msg->data, len);
    }
    uct_crypt_lane_rx_msg_free(rx, msg);
    return 1;
}

void uct_crypt_lane_rx_cancel(uct_crypt_lane_rx_t *rx, uint64_t team,
                              uint32_t src_rank)
{
    uct_crypt_lane_stream_t *s = uct_crypt_lane_rx_stream(rx, team, src_rank);

    if (s == NULL) {
        return;
    }
    if (s->direct || s->direct_done) {
        /* part or all of a message went to the abandoned buffer: the
         * stream cannot go on in order */
        uct_crypt_lane_rx_fail(rx, s, "a receive was abandoned");
    }
    s->posted = NULL;
}
