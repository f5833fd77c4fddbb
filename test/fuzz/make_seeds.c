/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Seed corpora of the fuzz targets, from honest traffic under the targets'
 * fixed test key: sealed collective frames of several sizes, owners and
 * receivers (raw mode of fuzz_coll_frame), rank 1's bootstrap message of a
 * team of two (raw mode of fuzz_coll_hello), sealed records (raw mode of
 * fuzz_aead_record), and a few inputs of each structure-aware mode
 * (fuzz_cm: the connection manager's handshake and a CONNECT frame;
 * fuzz_lane_chunk: a message in two chunks, receives before and after;
 * fuzz_bulk_control: each kind of control record; fuzz_profile: a
 * calibration profile; fuzz_wire_frames: frames of the own wire, control
 * frames sealed as a sender seals them; fuzz_record: scripts of honest
 * traffic, losses, replays, changed and forged records).
 *
 *   make_seeds CORPUS_DIR
 */
#include "fuzz_common.h"
#include "uct_crypt/base/format.h"
#include "uct_crypt/wire/wire_frame.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static void seed(const char *dir, const char *target, int n, const void *a,
                 size_t a_len, const void *b, size_t b_len)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/honest-%02d", dir, target, n);
    f = fopen(path, "wb");
    if ((f == NULL) || (fwrite(a, 1, a_len, f) != a_len) ||
        ((b_len > 0) && (fwrite(b, 1, b_len, f) != b_len)) || fclose(f)) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    static const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {1, 2, 3, 4};
    static const uint8_t aad[24] = {9}, raw_key[32] = {7, 7, 7};
    static const size_t sizes[] = {0, 1, 16, 333, 4096};
    crypt_coll_team_t team;
    crypt_aead_key_t key;
    crypt_coll_hello_t hello;
    uint8_t mac_key[KEYEX_SECRET_LEN], frame[4096 + CRYPT_COLL_FRAME_OVERHEAD];
    uint8_t plain[4096], header[20], tag[CRYPT_AEAD_TAG_LEN];
    uint32_t words[5];
    int i, n = 0;

    if ((argc != 2) || ((mkdir(argv[1], 0755) != 0) && (errno != EEXIST)) ||
        !fuzz_team(&team, 3, 8, 32) ||
        (crypt_aead_init(CRYPT_AEAD_BACKEND_OPENSSL) != CRYPT_AEAD_OK) ||
        (crypt_aead_key_init(&key, CRYPT_AEAD_BACKEND_OPENSSL, raw_key, 32) !=
         CRYPT_AEAD_OK)) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 1;
    }
    for (i = 0; i < (int)sizeof(plain); ++i) {
        plain[i] = (uint8_t)(i * 7);
    }
    for (i = 0; i < 5; ++i, ++n) {
        /* raw mode (even), owner, sealer 3 (index 4), receiver: any */
        words[0] = 0; words[1] = (uint32_t)i; words[2] = 4; words[3] = 1;
        words[4] = 0;
        if (crypt_coll_seal(&team, i, CRYPT_COLL_DEST_ANY, plain, sizes[i], frame) !=
            CRYPT_COLL_OK) {
            return 1;
        }
        seed(argv[1], "fuzz_coll_frame", n, words, sizeof(words), frame,
             sizes[i] + CRYPT_COLL_FRAME_OVERHEAD);
        /* sealed mode, untouched and flipped */
        words[0] = 1; words[4] = (uint32_t)(i & 1) | ((uint32_t)i << 5);
        seed(argv[1], "fuzz_coll_frame", n + 10, words, sizeof(words), plain,
             sizes[i]);
        /* records */
        memset(header, 0, sizeof(header));
        header[0] = 0;
        memcpy(header + 1, &i, sizeof(i));
        if (crypt_record_seal(&key, prefix, (uint64_t)i, aad, sizeof(aad), plain,
                              sizes[i], frame, tag) != CRYPT_AEAD_OK) {
            return 1;
        }
        memcpy(frame + sizes[i], tag, sizeof(tag));
        seed(argv[1], "fuzz_aead_record", n, header, 9, frame,
             sizes[i] + sizeof(tag));
        header[0] = 1;
        seed(argv[1], "fuzz_aead_record", n + 10, header, 9, plain, sizes[i]);
    }
    /* rank 1's bootstrap message of a team of two */
    memset(&hello, 0, sizeof(hello));
    hello.version = CRYPT_COLL_HELLO_VERSION;
    hello.key_len = 16;
    hello.rank    = htole32(1);
    hello.size    = htole32(2);
    snprintf(hello.host_id, sizeof(hello.host_id), "0123abcd|node-b");
    if ((keyex_derive_bootstrap_key(fuzz_job_secret, NULL, 0, mac_key) != KEYEX_OK) ||
        (keyex_mac(mac_key, &hello, offsetof(crypt_coll_hello_t, mac), hello.mac) !=
         KEYEX_OK)) {
        return 1;
    }
    words[0] = 0;
    seed(argv[1], "fuzz_coll_hello", 0, words, 4, &hello, sizeof(hello));
    {
        uint32_t fields[6] = {1, CRYPT_COLL_HELLO_VERSION, 16, 0, 1, 2};
        seed(argv[1], "fuzz_coll_hello", 1, fields, sizeof(fields), "host-b", 7);
    }
    seed(argv[1], "fuzz_coll_tune", 0, "allgather:0-4k:o-rd2,4k-inf:c-ring", 34, "", 0);
    seed(argv[1], "fuzz_coll_tune", 1, "2:cyclic", 8, "", 0);
    seed(argv[1], "fuzz_job_secret", 0, fuzz_job_secret, sizeof(fuzz_job_secret), "", 0);
    {
        /* fuzz_cm: the honest handshake unchanged (mode 1), then with a
         * CONNECT of a 17-byte device address and 40 bytes of private data
         * (mode 3: the body length byte is a third of the body) */
        /* (68: the first message with mac2; 52: the response) */
        uint8_t cm[1 + 68 + 52 + 1 + 58] = {1};
        size_t i;

        seed(argv[1], "fuzz_cm", 0, cm, 1 + 68 + 52, "", 0);
        cm[0]               = 3;
        cm[1 + 68 + 52]     = 58 / 3 + 1; /* (n * 3) % 769 = 57: near the body */
        cm[2 + 68 + 52]     = 17;
        for (i = 3 + 68 + 52; i < sizeof(cm); ++i) {
            cm[i] = (uint8_t)i;
        }
        seed(argv[1], "fuzz_cm", 1, cm, sizeof(cm), "", 0);
        /* raw: a stranger's first bytes (UCX's tcp_sockcm header) */
        seed(argv[1], "fuzz_cm", 2, "\0\x2c\x01\0\0\0\0\0\0\0", 10, "", 0);
    }
    {
        /* fuzz_lane_chunk raw (mode 0): stream 1 gets a 100-byte message in
         * two chunks (FIRST, then LAST) and a receive of 100 bytes takes
         * it; stream 2 a receive posted first, then one whole chunk */
        uint8_t lane[1 + 4 + 60 + 2 + 40 + 3 + 3 + 4 + 40 + 3] = {0}, *p = lane + 1;
        size_t i;

        *p++ = 1 | (1 << 2) | 0x20;         /* chunk, stream 1, FIRST */
        *p++ = 100; *p++ = 0;               /* total */
        *p++ = 60;                          /* body length */
        for (i = 0; i < 60; ++i) *p++ = (uint8_t)i;
        *p++ = 1 | (1 << 2) | 0x40;         /* chunk, LAST, same total */
        *p++ = 40;
        for (i = 0; i < 40; ++i) *p++ = (uint8_t)(60 + i);
        *p++ = 2 | (1 << 2) | 0x20;         /* receive, a new buffer */
        *p++ = 100; *p++ = 0;
        *p++ = 2 | (2 << 2) | 0x20;         /* receive on stream 2: posted */
        *p++ = 40; *p++ = 0;
        *p++ = 1 | (2 << 2) | 0x20 | 0x40;  /* chunk, FIRST and LAST */
        *p++ = 40; *p++ = 0;
        *p++ = 40;
        for (i = 0; i < 40; ++i) *p++ = (uint8_t)i;
        *p++ = 2 | (2 << 2);                /* the same buffer: it is there */
        *p++ = 3 | (3 << 2);                /* a cancel */
        *p++ = 0;
        seed(argv[1], "fuzz_lane_chunk", 0, lane, (size_t)(p - lane), "", 0);
        /* honest (mode 1): 3 streams of 2, 1 and 3 messages, then chunks
         * and receives interleaved */
        {
            static const uint8_t honest[] = {1, 2, 1, 0x10, 0x01, 0x00, 0x02,
                                             0, 0x00, 0x10, 2, 5, 0, 0, 0,
                                             0x20, 0x03, 3, 9, 5, 2, 1, 7, 0,
                                             4, 3, 11, 2, 4, 0};
            seed(argv[1], "fuzz_lane_chunk", 1, honest, sizeof(honest), "", 0);
        }
    }
    {
        /* fuzz_bulk_control (mode 0): each kind of control record as the
         * bulk engine sends it, then (mode 1) a range inside a region */
        uint8_t rec[1 + sizeof(crypt_bulk_get_req_t) + 24] = {0};
        crypt_bulk_segment_t segment = {0};
        crypt_bulk_get_req_t get_req = {0};
        crypt_bulk_ack_t ack = {0};
        uint64_t range[4] = {htole64(0x10000), htole64(4096), htole64(0x8000),
                             htole64(65536)};

        segment.kind    = CRYPT_CONTROL_SEGMENT;
        segment.last    = 1;
        segment.index   = htole32(3);
        segment.put_id  = htole64(7);
        segment.address = htole64(0x7f0000001000ull);
        segment.length  = htole64(262144);
        memcpy(rec + 1, &segment, sizeof(segment));
        seed(argv[1], "fuzz_bulk_control", 0, rec, 1 + sizeof(segment), "", 0);
        ack.kind    = CRYPT_CONTROL_ACK;
        ack.flow_id = htole64(0x1234);
        ack.put_id  = htole64(7);
        memcpy(rec + 1, &ack, sizeof(ack));
        seed(argv[1], "fuzz_bulk_control", 1, rec, 1 + sizeof(ack), "", 0);
        rec[1] = 4; /* GET_DONE until wire version 11: malformed now */
        seed(argv[1], "fuzz_bulk_control", 2, rec, 1 + sizeof(ack), "", 0);
        get_req.kind        = CRYPT_CONTROL_GET_REQ;
        get_req.rkey_length = htole32(24);
        get_req.get_id      = htole64(2);
        get_req.remote_addr = htole64(0x7f0000200000ull);
        get_req.local_addr  = htole64(0x7f0000400000ull);
        get_req.length      = htole64(1048577);
        memcpy(rec + 1, &get_req, sizeof(get_req));
        memcpy(rec + 1 + sizeof(get_req), "tcp\0\0\0\0\0\0\0\0\0\0\0\0\0rkey0123", 24);
        seed(argv[1], "fuzz_bulk_control", 3, rec, sizeof(rec), "", 0);
        memset(rec, 0, sizeof(rec));
        rec[1] = CRYPT_CONTROL_FLOW_END;
        seed(argv[1], "fuzz_bulk_control", 5, rec, 1 + sizeof(crypt_flow_end_t),
             "", 0);
        rec[1] = CRYPT_CONTROL_FLOW_REFUSED;
        rec[2] = CRYPT_FLOW_REFUSED_BOUND;
        rec[9] = 0x5a; /* the flow id */
        seed(argv[1], "fuzz_bulk_control", 6, rec,
             1 + sizeof(crypt_flow_refused_t), "", 0);
        memset(rec, 0, sizeof(rec));
        rec[0] = 1;
        seed(argv[1], "fuzz_bulk_control", 4, rec, 1, range, sizeof(range));
        /* fuzz_profile: what crypt_calibrate writes */
        seed(argv[1], "fuzz_profile", 0,
             "segment 262144\nthreads 2\nseal_gbps 3.5\nput_gbps 1.1\n", 53, "", 0);
    }
    {
        /* fuzz_wire_frames: raw (mode 0), a record, a heartbeat and the
         * CLOSE as a sender writes them, read whole (the stream's first
         * byte, 0x08, also cuts the first read); honest (mode 1) and
         * changed (mode 3): records, one announcing a segment, heartbeats */
        uint8_t wire[1 + 8 + 10 + 2 * (CRYPT_WIRE_FRAME_HDR_LEN + UCT_CRYPT_WIRE_CTRL_LEN)];
        static const uint8_t honest[] = {1, 2, 10, 1, 3, 0, 0, 6, 2, 2, 40,
                                         0, 0, 9, 9, 9, 9, 9, 9};
        static const uint8_t changed[] = {3, 2, 10, 1, 3, 0, 0, 6, 2, 2, 40,
                                          0, 0, 5, 0, 1, 9, 9, 9};
        crypt_wire_frame_hdr_t hdr = {0};
        crypt_aead_key_t ctrl;

        wire[0]    = 0;
        hdr.length = htole32(10);
        hdr.type   = CRYPT_WIRE_FRAME_RECORD;
        memcpy(wire + 1, &hdr, sizeof(hdr));
        memset(wire + 1 + sizeof(hdr), 0x42, 10);
        if ((crypt_aead_key_init(&ctrl, CRYPT_AEAD_BACKEND_OPENSSL, fuzz_wire_ctrl_key,
                                 sizeof(fuzz_wire_ctrl_key)) != CRYPT_AEAD_OK) ||
            uct_crypt_frame_seal_control(&ctrl, 0, CRYPT_WIRE_FRAME_HEARTBEAT, 1,
                                         wire + 19) ||
            uct_crypt_frame_seal_control(&ctrl, 1, CRYPT_WIRE_FRAME_CLOSE, 1,
                                         wire + 19 + CRYPT_WIRE_FRAME_HDR_LEN +
                                         UCT_CRYPT_WIRE_CTRL_LEN)) {
            return 1;
        }
        crypt_aead_key_cleanup(&ctrl);
        seed(argv[1], "fuzz_wire_frames", 0, wire, sizeof(wire), "", 0);
        seed(argv[1], "fuzz_wire_frames", 1, honest, sizeof(honest), "", 0);
        seed(argv[1], "fuzz_wire_frames", 2, changed, sizeof(changed), "", 0);
    }
    {
        /* fuzz_record: scripts of steps (op: bits 0-2 what, 3-4 the flow,
         * 5-6 the connection); honest traffic on three flows across key
         * updates, then a loss, a replay, a changed record, forgeries */
        static const uint8_t honest[] = {
            0x00, 5, 10, 0x08, 6, 0, 0x10, 0x85, 3,   /* three HELLOs */
            0x00, 1, 64, 0x00, 2, 1, 0x00, 3, 2, 0x00, 4, 0, /* key update */
            0x08, 7, 9, 0x48, 8, 9, 0x68, 9, 9          /* own wire: proved key */
        };
        static const uint8_t faults[] = {
            0x00, 5, 10, 0x00, 6, 10, 0x02, 0,          /* HELLO, DATA, replay */
            0x03, 1, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4,
            0x00, 7, 7,                                 /* after the change */
            0x08, 5, 10, 0x01, 1, 1, 0x00, 2, 2,       /* HELLO, lost, gap */
            0x78, 1, 1                                  /* another's connection */
        };
        static const uint8_t forged[] = {
            0x00, 5, 10,
            0x04, 0x00, 1, 40, 4,     /* sequence ahead */
            0x04, 0x00, 0, 0x21, 4,   /* an AM id UCP never sends */
            0x0c, 0x08, 0, 3, 4,      /* control with an AM id */
            0x14, 0x60, 0, 1, 4,      /* two generations ahead */
            0x14, 0x05, 0, 1, 4,      /* HELLO again */
            0x15, 40, 0x00, 0, 0      /* a stranger's bytes */
        };

        seed(argv[1], "fuzz_record", 0, honest, sizeof(honest), "", 0);
        seed(argv[1], "fuzz_record", 1, faults, sizeof(faults), "", 0);
        seed(argv[1], "fuzz_record", 2, forged, sizeof(forged), "", 0);
    }
    crypt_coll_team_cleanup(&team);
    crypt_aead_key_cleanup(&key);
    return 0;
}
