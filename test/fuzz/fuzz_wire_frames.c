/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's own wire after the handshake, as the receiving side takes frames
 * from its buffer (src/uct_crypt/wire/wire_frame.c), with a fixed
 * control key. The harness reads the way a connection does
 * (wire/wire_conn.c): into a buffer of UCT_CRYPT_WIRE_FRAME_MAX,
 * each read bounded by uct_crypt_frame_rx_room and cut where the input
 * says, whole frames taken from the front, the rest moved down. First
 * input byte:
 *   raw (bit 0 clear): the rest is the byte stream;
 *   honest (bit 0 set): a stream the harness writes from the input's
 *     choices (records, some announcing a bulk segment that follows,
 *     heartbeats, TAKENs and a last CLOSE, a TAKEN after it, sealed as
 *     a sender seals them), with
 *     bit 1: the input's bytes XORed over it at the places it names.
 *     Unchanged, every frame must arrive as written and in order, and the
 *     CLOSE be taken; changed, a control frame is taken only if it is the
 *     one written for that place in the stream (the rest must be refused
 *     or, records and segments, handed on: their own tags are checked
 *     above this layer).
 * Always: a frame taken lies inside what was read, no longer than the wire
 * allows, never after the CLOSE but a TAKEN, and a segment only where and as long as
 * announced, and nothing else there.
 */
#include "ucx_crypt_config.h"
#include "uct_crypt/wire/wire_frame.h"
#include "keyex/noise.h"
#include "fuzz_common.h"

#include <endian.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    CONTROL_FRAME   = CRYPT_WIRE_FRAME_HDR_LEN + UCT_CRYPT_WIRE_CTRL_LEN,
    FUZZ_MAX_FRAMES = 64,
    FUZZ_MAX_STREAM = 3 * UCT_CRYPT_WIRE_LARGE_FRAME + 4096
};

static crypt_aead_key_t fuzz_key;
static int fuzz_ready;

typedef struct {
    uint8_t type;
    size_t  offset, len;   /* in the honest stream: the whole frame */
    size_t  announce;      /* a RECORD announcing a segment of this length */
} fuzz_frame_t;

typedef struct {
    uint8_t      *bytes;
    size_t       len;
    fuzz_frame_t frames[FUZZ_MAX_FRAMES + 3]; /* (a last pair, CLOSE, TAKEN) */
    int          nframes;
} fuzz_stream_t;

static void fuzz_init(void)
{
    if ((crypt_aead_init(CRYPT_AEAD_BACKEND_OPENSSL) != CRYPT_AEAD_OK) ||
        (crypt_aead_key_init(&fuzz_key, CRYPT_AEAD_BACKEND_OPENSSL,
                             fuzz_wire_ctrl_key, sizeof(fuzz_wire_ctrl_key)) !=
         CRYPT_AEAD_OK)) {
        abort();
    }
    fuzz_ready = 1;
}

static void fuzz_add(fuzz_stream_t *st, uint8_t type, size_t body_len,
                     size_t announce, uint64_t *ctrl_seq, uint64_t records)
{
    fuzz_frame_t *f = &st->frames[st->nframes++];
    crypt_wire_frame_hdr_t hdr = {0};

    f->type     = type;
    f->offset   = st->len;
    f->announce = announce;
    if ((type == CRYPT_WIRE_FRAME_CLOSE) || (type == CRYPT_WIRE_FRAME_HEARTBEAT) ||
        (type == CRYPT_WIRE_FRAME_TAKEN)) {
        f->len = CRYPT_WIRE_FRAME_HDR_LEN + UCT_CRYPT_WIRE_CTRL_LEN;
        if (uct_crypt_frame_seal_control(&fuzz_key, (*ctrl_seq)++, type, records,
                                         st->bytes + st->len) != 0) {
            abort();
        }
    } else {
        f->len      = CRYPT_WIRE_FRAME_HDR_LEN + body_len;
        hdr.length  = htole32((uint32_t)body_len);
        hdr.type    = type;
        memcpy(st->bytes + st->len, &hdr, sizeof(hdr));
        memset(st->bytes + st->len + sizeof(hdr), st->nframes * 7, body_len);
    }
    st->len += f->len;
}

/* frames from the input's choices, each fitting in what is left */
static void fuzz_honest_stream(fuzz_stream_t *st, fuzz_input_t *in)
{
    uint64_t ctrl_seq = 0, records = 0, took = 0;
    size_t body, room;
    uint8_t op;

    while ((in->size > 0) && (st->nframes < FUZZ_MAX_FRAMES)) {
        op   = fuzz_u8(in);
        body = (size_t)fuzz_u8(in) * ((op & 4) ? 97 : 1);
        /* what is left, less the places of the last CLOSE and TAKEN */
        room = FUZZ_MAX_STREAM - st->len - 2 * CONTROL_FRAME;
        if ((op & 3) == 0) {
            if (CONTROL_FRAME > room) {
                break;
            }
            if (op & 8) {
                fuzz_add(st, CRYPT_WIRE_FRAME_TAKEN, 0, 0, &ctrl_seq, ++took);
            } else {
                fuzz_add(st, CRYPT_WIRE_FRAME_HEARTBEAT, 0, 0, &ctrl_seq, records);
            }
        } else if (((op & 3) == 1) &&
                   (2 * CRYPT_WIRE_FRAME_HDR_LEN + 64 + body + CRYPT_AEAD_TAG_LEN <= room)) {
            /* a record that announces a segment, then the segment */
            fuzz_add(st, CRYPT_WIRE_FRAME_RECORD, 64, body + CRYPT_AEAD_TAG_LEN,
                     &ctrl_seq, records++);
            fuzz_add(st, CRYPT_WIRE_FRAME_SEGMENT, body + CRYPT_AEAD_TAG_LEN, 0,
                     &ctrl_seq, records++);
        } else if (CRYPT_WIRE_FRAME_HDR_LEN + body <= room) {
            fuzz_add(st, CRYPT_WIRE_FRAME_RECORD, body, 0, &ctrl_seq, records++);
        }
    }
    fuzz_add(st, CRYPT_WIRE_FRAME_CLOSE, 0, 0, &ctrl_seq, records);
    fuzz_add(st, CRYPT_WIRE_FRAME_TAKEN, 0, 0, &ctrl_seq, ++took);
}

/* Read `stream` as a connection does; returns whether the CLOSE was taken.
 * `honest`: every frame must be the one written. `changed`: control frames
 * taken must be the ones written for their place. */
static int fuzz_receive(const uint8_t *stream, size_t stream_len,
                        const fuzz_stream_t *st, int honest, int changed,
                        fuzz_input_t *cuts)
{
    uct_crypt_frame_rx_t rx = {.ctrl_key = &fuzz_key};
    /* (static: a fresh 256 KiB per input costs more than the parse; ASan
     * still guards its ends) */
    static uint8_t buf[UCT_CRYPT_WIRE_FRAME_MAX];
    uct_crypt_frame_verdict_t verdict;
    size_t fed = 0, len = 0, offset, frame_len, room, cut, announced;
    int next = 0, controls = 0, control_index, k, closed = 0;
    crypt_wire_frame_hdr_t hdr;
    char why[96];

    while (fed < stream_len) {
        room = uct_crypt_frame_rx_room(buf, len);
        if ((room == 0) || (room > UCT_CRYPT_WIRE_FRAME_MAX - len)) {
            abort(); /* a full buffer with no whole frame, or past its end */
        }
        /* where the input has no more say, reads take all there is */
        cut  = (cuts->size > 0) ? 1 + (size_t)fuzz_u8(cuts) * 131 : room;
        cut  = (cut < room) ? cut : room;
        cut  = (cut < stream_len - fed) ? cut : stream_len - fed;
        memcpy(buf + len, stream + fed, cut);
        fed += cut;
        len += cut;
        for (offset = 0;;) {
            announced = rx.segment_len;
            if (announced != 0) {
                /* an announced segment: its header alone decides (the
                 * wire receives the body into the segment's destination;
                 * here it is looked at once all of it is in) */
                if (len - offset < CRYPT_WIRE_FRAME_HDR_LEN) {
                    break;
                }
                memcpy(&hdr, buf + offset, sizeof(hdr));
                if ((len - offset < CRYPT_WIRE_FRAME_HDR_LEN + announced) &&
                    (le32toh(hdr.length) == announced) &&
                    (hdr.type == CRYPT_WIRE_FRAME_SEGMENT)) {
                    break; /* a good header: its body is still coming */
                }
                verdict = uct_crypt_frame_segment_header(&rx, buf + offset,
                                                         len - offset, why,
                                                         sizeof(why));
                frame_len = CRYPT_WIRE_FRAME_HDR_LEN + announced;
            } else {
                verdict = uct_crypt_frame_next(&rx, buf + offset, len - offset,
                                               &hdr, &frame_len, why, sizeof(why));
            }
            if (verdict == UCT_CRYPT_FRAME_MORE) {
                break;
            }
            if (verdict == UCT_CRYPT_FRAME_BAD) {
                if (honest && !changed) {
                    abort(); /* an honest stream refused */
                }
                return 0;
            }
            if ((frame_len > len - offset) ||
                (frame_len > UCT_CRYPT_WIRE_FRAME_MAX) ||
                (closed && (hdr.type != CRYPT_WIRE_FRAME_TAKEN)) ||
                /* a segment where announced, as long as announced, and
                 * nothing else in its place */
                ((hdr.type == CRYPT_WIRE_FRAME_SEGMENT) !=
                 (announced != 0)) ||
                ((announced != 0) &&
                 (frame_len != CRYPT_WIRE_FRAME_HDR_LEN + announced))) {
                abort();
            }
            if (verdict == UCT_CRYPT_FRAME_CONTROL) {
                /* the control frame written for this place, unchanged */
                control_index = 0;
                for (k = 0; (k < st->nframes) && changed; ++k) {
                    if ((st->frames[k].type != CRYPT_WIRE_FRAME_CLOSE) &&
                        (st->frames[k].type != CRYPT_WIRE_FRAME_HEARTBEAT) &&
                        (st->frames[k].type != CRYPT_WIRE_FRAME_TAKEN)) {
                        continue;
                    }
                    if (control_index++ == controls) {
                        if ((frame_len != st->frames[k].len) ||
                            memcmp(buf + offset, st->bytes + st->frames[k].offset,
                                   frame_len)) {
                            abort(); /* a forged control frame was taken */
                        }
                        break;
                    }
                }
                ++controls;
                closed |= (hdr.type == CRYPT_WIRE_FRAME_CLOSE);
            } else if ((hdr.type != CRYPT_WIRE_FRAME_RECORD) &&
                       (hdr.type != CRYPT_WIRE_FRAME_SEGMENT)) {
                abort();
            }
            if (honest && !changed) {
                /* the next frame as written */
                if ((next >= st->nframes) || (hdr.type != st->frames[next].type) ||
                    (frame_len != st->frames[next].len) ||
                    memcmp(buf + offset, st->bytes + st->frames[next].offset,
                           frame_len)) {
                    abort();
                }
            }
            /* what the record layer does for an authentic announcement: a
             * segment of that length must come next */
            if ((verdict == UCT_CRYPT_FRAME_DATA) &&
                (hdr.type == CRYPT_WIRE_FRAME_RECORD) && honest &&
                (next < st->nframes) && (st->frames[next].announce > 0)) {
                rx.segment_len = st->frames[next].announce;
            }
            ++next;
            offset += frame_len;
        }
        memmove(buf, buf + offset, len - offset);
        len -= offset;
    }
    if (honest && !changed && (!closed || (next != st->nframes) || (len != 0))) {
        abort(); /* not everything written arrived */
    }
    return closed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    fuzz_stream_t st = {0};
    uint8_t mode, *sent;
    size_t at;
    int changed = 0;

    if (!fuzz_ready) {
        fuzz_init();
    }
    if (size == 0) {
        return 0;
    }
    mode = fuzz_u8(&in);
    if (!(mode & 1)) {
        fuzz_receive(in.data, in.size, &st, 0, 1, &in);
        return 0;
    }
    st.bytes = malloc(FUZZ_MAX_STREAM);
    /* the first half of what is left chooses the frames, the rest cuts
     * the reads (and names the changes) */
    {
        fuzz_input_t choices = {in.data, in.size / 2};

        fuzz_honest_stream(&st, &choices);
        in.data += in.size / 2;
        in.size -= in.size / 2;
    }
    /* what goes on the wire: the stream as written, changed where the
     * input says (the frames as written stay, to compare against) */
    sent = malloc(st.len);
    memcpy(sent, st.bytes, st.len);
    while ((mode & 2) && (in.size >= 3)) {
        at = ((size_t)in.data[0] | ((size_t)in.data[1] << 8)) % st.len;
        sent[at] ^= in.data[2];
        changed |= (in.data[2] != 0);
        in.data += 3;
        in.size -= 3;
        if (in.data[-3] & 1) {
            break; /* the rest cuts the reads */
        }
    }
    fuzz_receive(sent, st.len, &st, 1, changed, &in);
    free(sent);
    free(st.bytes);
    return 0;
}
