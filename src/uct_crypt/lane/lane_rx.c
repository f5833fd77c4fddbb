/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane's chunks: tags, teams, reassembly
 * (lane/lane_rx.h).
 */
#include "uct_crypt/lane/lane_rx.h"
#include "uct_crypt/base/format.h"

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UCT_CRYPT_LANE_SEQUENCE_END (UINT64_C(1) << 48) /* the nonce's field */

typedef struct uct_crypt_lane_msg {
    struct uct_crypt_lane_msg *next;
    size_t                    len;
    uint8_t                   data[];
} uct_crypt_lane_msg_t;

/* what arrives from one rank of a team */
typedef struct uct_crypt_lane_stream {
    int                  failed;   /* a malformed chunk: the stream is done */
    uint64_t             next_sequence; /* of the next chunk it takes */
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
} uct_crypt_lane_stream_t;

KHASH_MAP_INIT_INT(uct_crypt_lane_streams, uct_crypt_lane_stream_t*);

struct uct_crypt_lane_team {
    uint64_t         id;
    uint32_t         rank, size;
    crypt_aead_key_t key;          /* the team's lane key, expanded */
    uint64_t         *send_sequence; /* per destination rank */
    khash_t(uct_crypt_lane_streams) streams; /* by source rank */
};

void uct_crypt_lane_rx_init(uct_crypt_lane_rx_t *rx, size_t msg_max,
                            size_t buffer_max, unsigned max_streams,
                            crypt_aead_backend_t backend,
                            uct_crypt_lane_rx_log_t log)
{
    memset(rx, 0, sizeof(*rx));
    rx->msg_max     = msg_max;
    rx->buffer_max  = buffer_max;
    rx->max_streams = max_streams;
    rx->backend     = backend;
    rx->log         = log;
    kh_init_inplace(uct_crypt_lane_teams, &rx->teams);
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

/* everything a stream holds goes back to the bound */
static void uct_crypt_lane_rx_stream_empty(uct_crypt_lane_rx_t *rx,
                                           uct_crypt_lane_stream_t *s)
{
    uct_crypt_lane_rx_msg_free(rx, s->partial);
    s->partial = NULL;
    while (s->head != NULL) {
        uct_crypt_lane_msg_t *msg = s->head;

        s->head = msg->next;
        uct_crypt_lane_rx_msg_free(rx, msg);
    }
    s->tail = NULL;
}

static void uct_crypt_lane_team_free(uct_crypt_lane_rx_t *rx,
                                     uct_crypt_lane_team_t *t)
{
    uct_crypt_lane_stream_t *s;

    kh_foreach_value(&t->streams, s, {
        uct_crypt_lane_rx_stream_empty(rx, s);
        free(s);
        --rx->num_streams;
    });
    kh_destroy_inplace(uct_crypt_lane_streams, &t->streams);
    crypt_aead_key_cleanup(&t->key);
    free(t->send_sequence);
    free(t);
}

void uct_crypt_lane_rx_cleanup(uct_crypt_lane_rx_t *rx)
{
    uct_crypt_lane_team_t *t;

    kh_foreach_value(&rx->teams, t, {
        uct_crypt_lane_team_free(rx, t);
    });
    kh_destroy_inplace(uct_crypt_lane_teams, &rx->teams);
    rx->num_streams = 0;
    rx->buffered    = 0;
}

int uct_crypt_lane_rx_team_add(uct_crypt_lane_rx_t *rx, uint64_t team,
                               uint32_t rank, uint32_t size,
                               const uint8_t *key, size_t key_len)
{
    uct_crypt_lane_team_t *t;
    khiter_t it;
    int ret;

    if ((size == 0) || (size > UCT_CRYPT_LANE_TEAM_MAX_RANKS) ||
        (rank >= size) ||
        (kh_get(uct_crypt_lane_teams, &rx->teams, team) !=
         kh_end(&rx->teams))) {
        return -1;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return -1;
    }
    t->id            = team;
    t->rank          = rank;
    t->size          = size;
    t->send_sequence = calloc(size, sizeof(*t->send_sequence));
    kh_init_inplace(uct_crypt_lane_streams, &t->streams);
    if ((t->send_sequence == NULL) ||
        (crypt_aead_key_init(&t->key, rx->backend, key, key_len) !=
         CRYPT_AEAD_OK)) {
        uct_crypt_lane_team_free(rx, t);
        return -1;
    }
    it = kh_put(uct_crypt_lane_teams, &rx->teams, team, &ret);
    if (ret < 0) {
        uct_crypt_lane_team_free(rx, t);
        return -1;
    }
    kh_value(&rx->teams, it) = t;
    return 0;
}

static uct_crypt_lane_team_t *uct_crypt_lane_rx_team(const uct_crypt_lane_rx_t *rx,
                                                     uint64_t team)
{
    khiter_t it = kh_get(uct_crypt_lane_teams, &rx->teams, team);

    return (it == kh_end(&rx->teams)) ? NULL : kh_value(&rx->teams, it);
}

void uct_crypt_lane_rx_team_remove(uct_crypt_lane_rx_t *rx, uint64_t team)
{
    khiter_t it = kh_get(uct_crypt_lane_teams, &rx->teams, team);

    if (it != kh_end(&rx->teams)) {
        uct_crypt_lane_team_free(rx, kh_value(&rx->teams, it));
        kh_del(uct_crypt_lane_teams, &rx->teams, it);
    }
}

size_t uct_crypt_lane_rx_held(const uct_crypt_lane_rx_t *rx)
{
    const uct_crypt_lane_msg_t *msg;
    uct_crypt_lane_stream_t *s;
    uct_crypt_lane_team_t *t;
    size_t held = 0;

    kh_foreach_value(&rx->teams, t, {
        kh_foreach_value(&t->streams, s, {
            held += (s->partial != NULL) ? s->partial->len : 0;
            for (msg = s->head; msg != NULL; msg = msg->next) {
                held += msg->len;
            }
        });
    });
    return held;
}

/* ---- tags ------------------------------------------------------------------ */

/* SP 800-38D section 8.2.1: fixed field (src, dst), invocation field the
 * sequence; little endian, as everything crypt puts on the network */
static void uct_crypt_lane_nonce(uint8_t nonce[CRYPT_AEAD_NONCE_LEN],
                                 uint32_t src, uint32_t dst, uint64_t sequence)
{
    int i;

    for (i = 0; i < 3; ++i) {
        nonce[i]     = (uint8_t)(src >> (8 * i));
        nonce[3 + i] = (uint8_t)(dst >> (8 * i));
    }
    for (i = 0; i < 6; ++i) {
        nonce[6 + i] = (uint8_t)(sequence >> (8 * i));
    }
}

/* a team of ours and another of its ranks */
static int uct_crypt_lane_team_sends_to(const uct_crypt_lane_team_t *t,
                                        uint32_t dst_rank)
{
    return (t != NULL) && (dst_rank < t->size) && (dst_rank != t->rank);
}

int uct_crypt_lane_rx_may_send(const uct_crypt_lane_rx_t *rx, uint64_t team,
                               uint32_t dst_rank)
{
    return uct_crypt_lane_team_sends_to(uct_crypt_lane_rx_team(rx, team), dst_rank);
}

int uct_crypt_lane_chunk_seal(uct_crypt_lane_rx_t *rx, uint64_t team,
                              uint32_t dst_rank, uint32_t flags, uint64_t total,
                              uint8_t *chunk, size_t body_len, const char **why)
{
    uct_crypt_lane_team_t *t = uct_crypt_lane_rx_team(rx, team);
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    crypt_lane_chunk_hdr_t hdr;
    uint64_t sequence;

    if (!uct_crypt_lane_team_sends_to(t, dst_rank)) {
        *why = "no such team or rank on the lane";
        return -1;
    }
    sequence = t->send_sequence[dst_rank];
    if (sequence >= UCT_CRYPT_LANE_SEQUENCE_END) {
        *why = "the direction's chunk sequence is spent";
        return -1;
    }
    hdr.team     = htole64(team);
    hdr.src_rank = htole32(t->rank);
    hdr.dst_rank = htole32(dst_rank);
    hdr.sequence = htole64(sequence);
    hdr.total    = htole64(total);
    hdr.flags    = htole32(flags);
    hdr.zero     = 0;
    memcpy(chunk, &hdr, sizeof(hdr));
    uct_crypt_lane_nonce(nonce, t->rank, dst_rank, sequence);
    if (crypt_aead_seal(&t->key, nonce, chunk, sizeof(hdr) + body_len, NULL, 0,
                        NULL, chunk + sizeof(hdr) + body_len) != CRYPT_AEAD_OK) {
        *why = "the cipher failed";
        return -1;
    }
    /* a sequence number is spent once its chunk is sealed: a chunk that
     * then never leaves fails its peer (the caller), so none is reused */
    t->send_sequence[dst_rank] = sequence + 1;
    return 0;
}

/* ---- receiving -------------------------------------------------------------- */

/* a chunk nobody authenticated, not for us, or seen before: dropped and
 * counted */
static void uct_crypt_lane_rx_refuse(uct_crypt_lane_rx_t *rx, uint64_t team,
                                     uint32_t src_rank, const char *why)
{
    ++rx->chunks_refused;
    rx->log(team, src_rank, UCT_CRYPT_LANE_RX_REFUSED, why);
}

/* the stream of `src_rank` in team `t` (NULL: none, or no such team) */
static uct_crypt_lane_stream_t *
uct_crypt_lane_stream_find(const uct_crypt_lane_team_t *t, uint32_t src_rank)
{
    khiter_t it;

    if (t == NULL) {
        return NULL;
    }
    it = kh_get(uct_crypt_lane_streams, &t->streams, src_rank);
    return (it == kh_end(&t->streams)) ? NULL : kh_value(&t->streams, it);
}

/* ... or a new one, within the bound */
static uct_crypt_lane_stream_t *
uct_crypt_lane_rx_stream(uct_crypt_lane_rx_t *rx, uct_crypt_lane_team_t *t,
                         uint32_t src_rank)
{
    uct_crypt_lane_stream_t *s = uct_crypt_lane_stream_find(t, src_rank);
    khiter_t it;
    int ret;

    if (s != NULL) {
        return s;
    }
    if (rx->num_streams >= rx->max_streams) {
        rx->log(t->id, src_rank, UCT_CRYPT_LANE_RX_DROPPED,
                "too many streams already");
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    it = kh_put(uct_crypt_lane_streams, &t->streams, src_rank, &ret);
    if (ret < 0) {
        free(s);
        return NULL;
    }
    kh_value(&t->streams, it) = s;
    ++rx->num_streams;
    return s;
}

static void uct_crypt_lane_rx_fail(uct_crypt_lane_rx_t *rx, uint64_t team,
                                   uint32_t src_rank,
                                   uct_crypt_lane_stream_t *s, const char *why)
{
    rx->log(team, src_rank, UCT_CRYPT_LANE_RX_FAILED, why);
    s->failed = 1;
    /* nor is anything it holds ever delivered: its memory goes back to the
     * bound, for the other streams */
    uct_crypt_lane_rx_stream_empty(rx, s);
    s->posted = NULL; /* nothing more is written to the caller's buffer */
    s->direct = 0;
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
                                   const crypt_lane_chunk_hdr_t *hdr,
                                   uct_crypt_lane_stream_t *s)
{
    const char *why;

    if ((s->partial != NULL) || s->direct) {
        why = "a message began inside another";
        goto fail;
    }
    if (hdr->total > rx->msg_max) {
        why = "message longer than the lane allows";
        goto fail;
    }
    s->filled = 0;
    if ((s->posted != NULL) && !s->direct_done && (s->head == NULL) &&
        (hdr->total == s->posted_len)) {
        s->direct = 1; /* the next message, of the length asked for */
        return 1;
    }
    if (hdr->total > rx->buffer_max - rx->buffered) {
        why = "the lane holds all it may for receives not posted yet";
        goto fail;
    }
    s->partial = malloc(sizeof(*s->partial) + hdr->total);
    if (s->partial == NULL) {
        why = "out of memory";
        goto fail;
    }
    s->partial->next = NULL;
    s->partial->len  = hdr->total;
    rx->buffered    += hdr->total;
    return 1;

fail:
    uct_crypt_lane_rx_fail(rx, hdr->team, hdr->src_rank, s, why);
    return 0;
}

/* The chunk's header in host order, its team and its tag checked: NULL
 * (refused and counted) unless a member of a team of ours sent it to us */
static uct_crypt_lane_team_t *
uct_crypt_lane_rx_authentic(uct_crypt_lane_rx_t *rx, const uint8_t *data,
                            size_t length, crypt_lane_chunk_hdr_t *hdr)
{
    uint8_t nonce[CRYPT_AEAD_NONCE_LEN];
    uct_crypt_lane_team_t *t;
    size_t signed_len;

    if (length < sizeof(*hdr) + CRYPT_LANE_CHUNK_TAG_LEN) {
        uct_crypt_lane_rx_refuse(rx, 0, 0, "shorter than its header and tag");
        return NULL;
    }
    memcpy(hdr, data, sizeof(*hdr));
    /* little endian on the wire (base/format.h); host order from here */
    hdr->team     = le64toh(hdr->team);
    hdr->src_rank = le32toh(hdr->src_rank);
    hdr->dst_rank = le32toh(hdr->dst_rank);
    hdr->sequence = le64toh(hdr->sequence);
    hdr->total    = le64toh(hdr->total);
    hdr->flags    = le32toh(hdr->flags);
    t = uct_crypt_lane_rx_team(rx, hdr->team);
    if (t == NULL) {
        uct_crypt_lane_rx_refuse(rx, hdr->team, hdr->src_rank,
                                 "a team this process is not in");
        return NULL;
    }
    if ((hdr->dst_rank != t->rank) || (hdr->src_rank >= t->size) ||
        (hdr->src_rank == t->rank) ||
        (hdr->sequence >= UCT_CRYPT_LANE_SEQUENCE_END)) {
        uct_crypt_lane_rx_refuse(rx, hdr->team, hdr->src_rank,
                                 "not from another rank to this one");
        return NULL;
    }
    signed_len = length - CRYPT_LANE_CHUNK_TAG_LEN;
    uct_crypt_lane_nonce(nonce, hdr->src_rank, hdr->dst_rank, hdr->sequence);
    if (crypt_aead_open(&t->key, nonce, data, signed_len, NULL, 0, NULL,
                        data + signed_len) != CRYPT_AEAD_OK) {
        uct_crypt_lane_rx_refuse(rx, hdr->team, hdr->src_rank,
                                 "failed its tag");
        return NULL;
    }
    return t;
}

void uct_crypt_lane_rx_chunk(uct_crypt_lane_rx_t *rx, const void *data,
                             size_t length,
                             const uint8_t from[KEYEX_PUBLIC_KEY_LEN])
{
    crypt_lane_chunk_hdr_t hdr;
    uct_crypt_lane_stream_t *s;
    uct_crypt_lane_team_t *t;
    size_t chunk, total;
    const char *why;
    uint8_t *dest;

    t = uct_crypt_lane_rx_authentic(rx, data, length, &hdr);
    if (t == NULL) {
        return;
    }
    s = uct_crypt_lane_rx_stream(rx, t, hdr.src_rank);
    if ((s == NULL) || s->failed) {
        return;
    }
    /* authentic from here: a replay is dropped, a gap means that chunks
     * the sender sealed were lost, which the stream cannot get over */
    if (hdr.sequence < s->next_sequence) {
        uct_crypt_lane_rx_refuse(rx, hdr.team, hdr.src_rank, "seen before");
        return;
    }
    if (hdr.sequence > s->next_sequence) {
        why = "chunks before it were lost";
        goto fail;
    }
    s->next_sequence = hdr.sequence + 1;
    if (from != NULL) {
        if (!s->from_known) {
            memcpy(s->from, from, sizeof(s->from));
            s->from_known = 1;
        } else if (memcmp(s->from, from, sizeof(s->from))) {
            why = "a chunk from another peer than the stream's";
            goto fail;
        }
    }

    chunk = length - sizeof(hdr) - CRYPT_LANE_CHUNK_TAG_LEN;
    if (hdr.flags & CRYPT_LANE_CHUNK_FIRST) {
        if (!uct_crypt_lane_rx_begin(rx, &hdr, s)) {
            return;
        }
    } else if ((s->partial == NULL) && !s->direct) {
        why = "a chunk outside its message";
        goto fail;
    }
    dest = uct_crypt_lane_rx_dest(s, &total);
    if (hdr.total != total) {
        why = "a chunk outside its message";
        goto fail;
    }
    if (chunk > total - s->filled) {
        why = "a chunk beyond its message's length";
        goto fail;
    }
    memcpy(dest + s->filled, (const uint8_t*)data + sizeof(hdr), chunk);
    s->filled          += chunk;
    rx->bytes_received += chunk;

    if (hdr.flags & CRYPT_LANE_CHUNK_LAST) {
        if (s->filled != total) {
            why = "message ended short";
            goto fail;
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
    return;

fail:
    uct_crypt_lane_rx_fail(rx, hdr.team, hdr.src_rank, s, why);
}

int uct_crypt_lane_rx_recv(uct_crypt_lane_rx_t *rx, uint64_t team,
                           uint32_t src_rank,
                           const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                           void *buf, size_t len)
{
    uct_crypt_lane_team_t *t = uct_crypt_lane_rx_team(rx, team);
    uct_crypt_lane_stream_t *s;
    uct_crypt_lane_msg_t *msg;
    char why[96];

    if ((t == NULL) || (src_rank >= t->size) ||
        ((s = uct_crypt_lane_rx_stream(rx, t, src_rank)) == NULL) || s->failed) {
        return -1;
    }
    if (s->from_known && (peer != NULL) && memcmp(s->from, peer, sizeof(s->from))) {
        uct_crypt_lane_rx_fail(rx, team, src_rank, s, "it came from another "
                               "peer than the one its rank is at");
        return -1;
    }
    if ((s->direct || s->direct_done) && ((uint8_t*)buf != s->posted)) {
        uct_crypt_lane_rx_fail(rx, team, src_rank, s,
                               "a receive moved its buffer");
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
        uct_crypt_lane_rx_fail(rx, team, src_rank, s, why);
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
    uct_crypt_lane_stream_t *s =
            uct_crypt_lane_stream_find(uct_crypt_lane_rx_team(rx, team), src_rank);

    if (s == NULL) {
        return;
    }
    if (s->direct || s->direct_done) {
        /* part or all of a message went to the abandoned buffer: the
         * stream cannot go on in order */
        uct_crypt_lane_rx_fail(rx, team, src_rank, s, "a receive was abandoned");
    }
    s->posted = NULL;
}
