/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Everything the crypt transport puts on the network, declared once, in
 * the style of WireGuard's messages.h: every on-wire struct with its byte
 * diagram, its size asserted, every multi-byte field little endian (the
 * code converts with htole/le*toh at the point of packing and parsing; no
 * struct here is used in host order). Nothing else in src/uct_crypt
 * defines or parses a wire format.
 *
 * Wires:
 *   - records (record/record.c): every AM of UCP, and crypt's own
 *     control messages, on the inner transport;
 *   - addresses exchanged by UCP (uct_crypt_iface.c, uct_crypt_ep.c);
 *   - bulk segments and their control records (uct_crypt_bulk_*.c,
 *     bulk/bulk_get.c);
 *   - collective lane chunks (lane/lane.c);
 *   - crypt's own TCP wire (wire/): the Noise handshake
 *     messages (src/keyex/noise.h), then frames.
 *
 * Record (one per active message the inner transport carries):
 *
 *   0        1        2        4                12               20
 *   +--------+--------+--------+----------------+----------------+
 *   | type   | keygen | flags  | flow id (LE64) | sequence (LE64)|
 *   |        |        | (LE16) |                |                |
 *   +--------+--------+--------+----------------+----------------+
 *   [ sender X25519 public key, 32 bytes: HELLO records only;    ]
 *   [ zero on crypt's own wire, whose connection proved the key  ]
 *   [ ciphertext of: UCP's AM id (1 byte; 0 in a control record), ]
 *   [ then the AM payload as UCP gave it (for am_short: the       ]
 *   [ 8-byte header first); same length as that plaintext         ]
 *   [ GCM tag, 16 bytes                                          ]
 *
 * The cleartext part is authenticated as associated data together with
 * the payload length (crypt_record_aad_t), so none of it can be changed.
 * UCP's AM id is sealed with the payload: every record travels on one AM
 * id of the inner (UCT_CRYPT_RECORD_AM_ID), so an observer cannot tell
 * UCP's protocols (wireup, eager, rendezvous) apart by a cleartext id, and
 * a record cannot be moved to another id.
 *
 * The flow id names the sending endpoint: UCT does not tell an AM handler
 * who sent a message, so the record must (like IPsec's SPI). The first
 * record of a flow is a HELLO carrying the sender's public key, from which
 * the receiver derives the flow's keys; later records are DATA. On crypt's
 * own wire the HELLO's key field is zero: the connection's Noise IK
 * handshake proved the sender's static key and hid it from observers
 * (Noise, revision 34, §7.7: IK encrypts the initiator's static key), and
 * a key in clear in the first record would undo that; the receiver takes
 * the key its connection proved.
 *
 * Addresses: the crypt iface address is crypt_iface_addr_t followed by the
 * inner iface address; the crypt ep address (connect-to-ep inners such as
 * rc) is the public key followed by the inner ep address.
 */
#ifndef UCT_CRYPT_FORMAT_H
#define UCT_CRYPT_FORMAT_H

#include "aead/aead.h"
#include "keyex/keyex.h"

#include <endian.h>
#include <stdint.h>
#include <string.h>

enum {
    CRYPT_WIRE_VERSION    = 14, /* 10: a flow ends with FLOW_END; 11: a
                                   refused one is told (FLOW_REFUSED);
                                   12: a get is done when its answer
                                   opened (no GET_DONE); 13: the cm's
                                   CONNECT/ACCEPT carry the data iface's
                                   key, a DISCONNECT where flows ended;
                                   14: the own wire's TAKEN */

    CRYPT_RECORD_DATA     = 1,
    CRYPT_RECORD_HELLO    = 2,

    CRYPT_RECORD_HDR_LEN  = 20,
    CRYPT_HELLO_EXTRA_LEN = KEYEX_PUBLIC_KEY_LEN,
    CRYPT_RECORD_AM_ID_LEN = 1,   /* sealed, in front of the payload */
    /* most a record adds to a payload: HELLO header, public key, AM id, tag */
    CRYPT_RECORD_OVERHEAD_MAX = CRYPT_RECORD_HDR_LEN + CRYPT_HELLO_EXTRA_LEN +
                                CRYPT_RECORD_AM_ID_LEN + CRYPT_AEAD_TAG_LEN,

    CRYPT_IFACE_ADDR_FLAG_JOB_SECRET = 1, /* the sender uses a job secret */

    /* record header flags */
    CRYPT_RECORD_FLAG_CONTROL = 1, /* payload is for crypt, not for UCP */

    /* control record kinds (first payload byte) */
    CRYPT_CONTROL_SEGMENT = 1,     /* a bulk segment was put: open it */
    CRYPT_CONTROL_ACK     = 2,     /* a bulk put was opened in full */
    CRYPT_CONTROL_GET_REQ = 3,     /* seal a range of yours and put it here */
    /* 4 was GET_DONE (wire version 11 and before): a malformed kind now */
    CRYPT_CONTROL_FLOW_END = 5,    /* the sender's ep is gone: forget the flow */
    CRYPT_CONTROL_FLOW_REFUSED = 6, /* your flow was refused: its ep fails */

    /* why a flow was refused (crypt_flow_refused_t) */
    CRYPT_FLOW_REFUSED_BOUND    = 1, /* UCX_CRYPT_RX_FLOWS(_PER_PEER) reached */
    CRYPT_FLOW_REFUSED_RESOURCE = 2, /* the receiver failed locally (memory) */

    /* a packed remote key (uct_crypt_md.c; a GET_REQ carries one): the
     * inner component's name (UCT_COMPONENT_NAME_MAX bytes), the region's
     * token (LE64), then the inner's own key */
    CRYPT_BULK_RKEY_NAME_LEN  = 16,
    CRYPT_BULK_RKEY_TOKEN_LEN = 8,
    CRYPT_BULK_RKEY_MIN_LEN   = CRYPT_BULK_RKEY_NAME_LEN + CRYPT_BULK_RKEY_TOKEN_LEN
};

typedef struct crypt_record_hdr {
    uint8_t  type;
    uint8_t  key_generation; /* low 8 bits of the flow's key generation */
    uint16_t flags;          /* CRYPT_RECORD_FLAG_*, others must be zero */
    uint64_t flow_id;
    uint64_t sequence;
} __attribute__((packed)) crypt_record_hdr_t;

/* associated data of a record */
typedef struct crypt_record_aad {
    crypt_record_hdr_t hdr;
    uint8_t            reserved[4]; /* zero */
    uint32_t           length;   /* payload length (UCP's, without the id) */
} __attribute__((packed)) crypt_record_aad_t;

/* The crypt iface address: whose key, which inner transport (an address
 * of another inner is unreachable: with several inners, crypt(ud) must
 * not take crypt(rc)'s entry), then the inner's own address. */
typedef struct crypt_iface_addr {
    uint8_t  version;
    uint8_t  flags;
    uint8_t  key_bits_div8;  /* 16 or 32: both sides must agree */
    uint8_t  public_key[KEYEX_PUBLIC_KEY_LEN];
    uint32_t inner_id;       /* LE: FNV-1a of "component/tl" of the inner */
    /* inner iface address follows */
} __attribute__((packed)) crypt_iface_addr_t;

typedef struct crypt_ep_addr {
    uint8_t public_key[KEYEX_PUBLIC_KEY_LEN];
    /* inner ep address follows */
} __attribute__((packed)) crypt_ep_addr_t;

/*
 * Bulk put (the bulk engine, bulk/bulk_tx.c / bulk/bulk_rx.c). The initiator seals segment
 * i of put P into a bounce buffer, puts the ciphertext with the inner
 * transport to where the plaintext belongs, then sends a SEGMENT control
 * record (sealed and sequenced like every record) with the segment's
 * place and tag. The target opens the segment in place; after the last
 * one it returns an ACK, and only then does the initiator complete the put.
 *
 * Segment AEAD: key = the flow's bulk key (purpose "bulk", separate from
 * the record key), nonce = STREAM nonce with prefix = put id (7 low bytes,
 * little endian), segment index and last flag (src/aead/aead.h), AAD =
 * crypt_bulk_aad_t. The index and flag stop reordering, dropping and
 * truncation inside a put; the put id in the nonce and AAD stops splicing
 * between puts; the address and length in the AAD stop moving a segment.
 *
 * Region tokens: every region registered with crypt's md has a random
 * 64-bit token, packed in its remote key. A SEGMENT names the token of the
 * remote key its put was given, a GET_REQ the token of the memory it
 * reads, and the target opens or serves only inside the region of that
 * token: a peer reaches the memory whose remote key it was handed, not
 * whatever else this process registered (a capability, as an RDMA rkey is
 * one). A put answering our own get names our buffer's token (0 where the
 * buffer was not registered) and is taken inside that get's window.
 */
/*
 * SEGMENT control record payload (56 bytes):
 *
 *   0      1      2          4          8                16
 *   +------+------+----------+----------+----------------+
 *   | kind | last | gen LE16 | idx LE32 | put id (LE64)  |
 *   +------+------+----------+----------+----------------+
 *   16               24               32               40
 *   +----------------+----------------+----------------+
 *   | address (LE64) | length (LE64)  | token (LE64)   |
 *   +----------------+----------------+----------------+
 *   40                                56
 *   +---------------------------------+
 *   | GCM tag (16)                    |
 *   +---------------------------------+
 */
typedef struct crypt_bulk_segment {
    uint8_t  kind;           /* CRYPT_CONTROL_SEGMENT */
    uint8_t  last;           /* 1 on the put's last segment */
    uint16_t generation;     /* bulk key generation (updates between puts) */
    uint32_t index;          /* segment index within the put */
    uint64_t put_id;         /* per sending flow, from 0, no gaps */
    uint64_t address;        /* target virtual address of this segment */
    uint64_t length;         /* bytes of this segment */
    uint64_t token;          /* the target region's, from the remote key */
    uint8_t  tag[CRYPT_AEAD_TAG_LEN];
} __attribute__((packed)) crypt_bulk_segment_t;

/* ACK control record payload (24 bytes):
 *   kind (1) | reserved, zero (7) | flow id (LE64) | put or get id (LE64) */
typedef struct crypt_bulk_ack {
    uint8_t  kind;           /* CRYPT_CONTROL_ACK */
    uint8_t  reserved[7];
    uint64_t flow_id;        /* the initiator's (sending) flow */
    uint64_t put_id;
} __attribute__((packed)) crypt_bulk_ack_t;

/*
 * Bulk get = a request for the peer to seal and put. The initiator sends a
 * GET_REQ (sealed, sequenced) with the range it wants from the target's
 * memory, where it wants it, and its own packed remote key for that place;
 * the target checks that the range lies in memory it registered, puts it
 * to the initiator as an ordinary bulk put on its own flow (segments
 * sealed, opened in place by the initiator, acknowledged). The get is done
 * at the initiator when the answer's last segment opened and every byte of
 * the window did: the answer's segments, authenticated and in order, say
 * so, and no message more is on the critical path. Nothing reaches the
 * initiator's buffer that was not sealed by the target.
 */
typedef struct crypt_bulk_get_req {
    uint8_t  kind;           /* CRYPT_CONTROL_GET_REQ */
    uint8_t  reserved[3];
    uint32_t rkey_length;    /* bytes of packed remote key that follow */
    uint64_t get_id;         /* per sending flow, from 0, no gaps */
    uint64_t remote_addr;    /* the target's memory to read */
    uint64_t remote_token;   /* its region's token, from the remote key */
    uint64_t local_addr;     /* the initiator's buffer */
    uint64_t length;
    /* the initiator's packed remote key for local_addr follows */
} __attribute__((packed)) crypt_bulk_get_req_t;

/*
 * FLOW_END control record payload (8 bytes): kind (1) | reserved, zero (7).
 * The last record of a flow over a UCX inner (rc, ud, dc), sent when its
 * ep is destroyed: sealed and sequenced like any record, so only the
 * flow's sender can end it, and only after everything it sent before. The
 * receiver frees the flow's state and keys and remembers its id alone, so
 * a replay of any of its records is refused (record/keys.c). On crypt's
 * own wire a flow ends with its connection instead.
 */
typedef struct crypt_flow_end {
    uint8_t  kind;           /* CRYPT_CONTROL_FLOW_END */
    uint8_t  reserved[7];
} __attribute__((packed)) crypt_flow_end_t;

/*
 * FLOW_REFUSED control record payload (24 bytes, an ACK's size, so that it
 * waits in the same queue where the inner has no room):
 *   kind (1) | reason (1) | reserved, zero (6) | flow id (LE64) |
 *   reserved, zero (8)
 * Over a UCX inner, the receiver of a flow whose HELLO opened but which it
 * cannot take (past UCX_CRYPT_RX_FLOWS or UCX_CRYPT_RX_FLOWS_PER_PEER, or
 * out of memory) sends it on its own flow to the same peer key, where it
 * has an ep to that peer: sealed and sequenced like any record, so only
 * that peer can say it, and only of a flow of ours to it. The sender's ep
 * on that flow fails with the reason, instead of sending into a flow whose
 * records are dropped. The receiver keeps the refused id as an ended
 * flow's: a replay of that HELLO later, when there is room, opens nothing.
 */
typedef struct crypt_flow_refused {
    uint8_t  kind;           /* CRYPT_CONTROL_FLOW_REFUSED */
    uint8_t  reason;         /* CRYPT_FLOW_REFUSED_BOUND or _RESOURCE */
    uint8_t  reserved[6];
    uint64_t flow_id;        /* the refused flow: its sender's id for it */
    uint64_t reserved2;
} __attribute__((packed)) crypt_flow_refused_t;

/* GCM associated data of a bulk segment (not sent: both sides build it) */
typedef struct crypt_bulk_aad {
    uint64_t flow_id;
    uint64_t put_id;
    uint64_t address;
    uint64_t length;
} __attribute__((packed)) crypt_bulk_aad_t;

/*
 * Collective lane chunk (lane/lane.c; the contract is
 * api/uct_crypt_lane.h). A lane message (sealed collective frames, opened
 * by the collective layer, not here) goes as am_bcopy chunks on AM id
 * UCT_CRYPT_LANE_AM_ID of the lane's own inner iface, each behind this
 * header (40 bytes) and followed by a tag (16 bytes):
 *
 *   0             8          12         16            24            32       36
 *   +-------------+----------+----------+-------------+-------------+--------+--------+
 *   | team (LE64) | src rank | dst rank | sequence    | total       | flags  | zero   |
 *   |             | (LE32)   | (LE32)   | (LE64)      | length LE64 | (LE32) | (LE32) |
 *   +-------------+----------+----------+-------------+-------------+--------+--------+
 *   | chunk bytes ...                                       | tag (16)                |
 *   +-------------------------------------------------------+-------------------------+
 *
 * flags: CRYPT_LANE_CHUNK_FIRST on a message's first chunk, _LAST on its
 * last; total is the whole message's length, repeated in every chunk;
 * sequence counts the chunks of (team, src -> dst) from 0. The tag is
 * AES-GCM's with nothing to encrypt (GMAC) under the team's lane key, over
 * header and chunk bytes as associated data (lane/lane_rx.h).
 */
enum {
    UCT_CRYPT_LANE_AM_ID   = 0,
    CRYPT_LANE_CHUNK_FIRST = 1,
    CRYPT_LANE_CHUNK_LAST  = 2,
    CRYPT_LANE_CHUNK_TAG_LEN = 16
};

typedef struct crypt_lane_chunk_hdr {
    uint64_t team;
    uint32_t src_rank;
    uint32_t dst_rank;
    uint64_t sequence;
    uint64_t total;
    uint32_t flags;
    uint32_t zero;
} __attribute__((packed)) crypt_lane_chunk_hdr_t;

/*
 * crypt's own TCP wire (wire/wire.h). After the two handshake
 * messages (fixed sizes, src/keyex/noise.h), the stream is a sequence of
 * frames (8-byte header):
 *
 *   0                4        5                 8
 *   +----------------+--------+-----------------+-----------------------+
 *   | length (LE32)  | type   | zero (3 bytes)  | length bytes          |
 *   +----------------+--------+-----------------+-----------------------+
 *
 * RECORD: a crypt record (the record layer checks its tag; UCP's AM id is
 * sealed inside it; records flow both ways on one connection), or on the
 * collective lane's connections a lane chunk. HEARTBEAT
 * (while records flow, every 250 ms) and CLOSE (the graceful end of the
 * sender's direction; each side sends its own): length 24, the number of
 * RECORD frames sent
 * so far on the connection (LE64) sealed under the connection's transport
 * key (Noise Split()), nonce = 32 zero bits || BE64 counter of control
 * frames, associated data = the frame header, then the tag. A count that
 * differs from the records received fails the connection (SEGMENT frames
 * count with RECORD frames). TAKEN: the same frame, sent once a
 * connection's first RECORD from the peer was taken by the layer above
 * (its flow accepted), counting the records taken so far; it may follow
 * the sender's CLOSE, and the peer's flush waits for it, so that a flow
 * refused (its connection closed) fails its sender's flush instead of
 * being lost behind one that said all was well (red team R1). SEGMENT: a bulk segment's ciphertext then its
 * GCM tag (the bulk engine's STREAM segment under the flow's bulk key; its
 * place and length travel in the SEGMENT control record, a RECORD, right
 * before it, whose tag field is zero here): accepted only directly behind
 * the record that announced it and only of the length announced, its
 * ciphertext received straight into the registered destination and opened
 * there, never acted on otherwise. A length above
 * UCT_CRYPT_WIRE_MAX_BCOPY, an unknown type, a SEGMENT nobody announced or
 * a non-zero reserved field closes the connection before any of the
 * frame's body is read into place.
 */
enum {
    CRYPT_WIRE_FRAME_HDR_LEN = 8,
    CRYPT_WIRE_FRAME_RECORD    = 1,
    CRYPT_WIRE_FRAME_CLOSE     = 2,
    CRYPT_WIRE_FRAME_HEARTBEAT = 3,
    CRYPT_WIRE_FRAME_SEGMENT   = 4,
    CRYPT_WIRE_FRAME_TAKEN     = 5
};

/* Its addresses. Device: crypt_wire_dev_addr_t, then the IP address (4 or
 * 16 bytes by family), then, for a loopback address, the machine and the
 * network namespace where it means this process (crypt_wire_dev_local_t;
 * as UCX's tcp device address, uct_tcp_device_addr_t: 127.0.0.1 of another
 * host or namespace is someone else). At most 30 bytes: UCP packs a device
 * address's length in 5 bits. Iface and ep: the listening port (LE16). */
enum {
    CRYPT_WIRE_DEV_ADDR_FLAG_LOOPBACK = 1
};

typedef struct crypt_wire_dev_addr {
    uint8_t family;  /* 4 or 6 */
    uint8_t flags;   /* CRYPT_WIRE_DEV_ADDR_FLAG_* */
} __attribute__((packed)) crypt_wire_dev_addr_t;

typedef struct crypt_wire_dev_local {
    uint64_t system_id; /* LE64: ucs_get_system_id() */
    uint32_t net_ns;    /* LE32: the network namespace's inode number
                           (ucs_sys_get_ns; the kernel's are 32 bits) */
} __attribute__((packed)) crypt_wire_dev_local_t;

static inline size_t crypt_wire_dev_addr_len(uint8_t family, uint8_t flags)
{
    return sizeof(crypt_wire_dev_addr_t) + ((family == 6) ? 16 : 4) +
           ((flags & CRYPT_WIRE_DEV_ADDR_FLAG_LOOPBACK) ?
            sizeof(crypt_wire_dev_local_t) : 0);
}

typedef struct crypt_wire_iface_addr {
    uint16_t port;
} __attribute__((packed)) crypt_wire_iface_addr_t;

typedef struct crypt_wire_frame_hdr {
    uint32_t length;
    uint8_t  type;
    uint8_t  reserved[3];
} __attribute__((packed)) crypt_wire_frame_hdr_t;

/*
 * The connection manager (client/server programs: UCP's sockaddr API), on
 * a TCP connection of its own from the client to the server's listener:
 *
 *   client                                   server
 *   keyex_noise_cm_init_msg_t initiation ->  (68 bytes, tag checked)
 *                                    <-----  keyex_noise_cm_msg_t response
 *                                            (under load: a cookie reply,
 *                                            then a new initiation with
 *                                            mac2; before it closes a
 *                                            connection unanswered, the
 *                                            server says why in 4 bytes)
 *   CONNECT {device address, UCP's private data}  ----->  conn_request
 *                                    <-----  ACCEPT {device address, data}
 *                                            or REJECT {}
 *   NOTIFY {}                        ----->  notify
 *   DISCONNECT {marks} (either side, then the sender's FIN)
 *
 * After the handshake every message is a frame: a 4-byte header (length
 * of what follows, LE16; type; a zero byte), then the body sealed with
 * AES-256-GCM under the handshake's transport key of the sender's
 * direction, nonce = 32 zero bits and a 64-bit big-endian counter of the
 * frames sent that way (keyex_noise_nonce), the header as associated
 * data, then the tag. The length is checked against the largest body the
 * configuration allows before anything is read into place; the type is
 * acted on only once the frame opened. CONNECT and ACCEPT bodies: one
 * byte, the length of the sender's device address (the address of its
 * crypt iface on the device the connection runs on, which UCP puts in
 * place of the one in its own address), the address, that iface's public
 * key (32 bytes: the flows a DISCONNECT names are those to it), then
 * UCP's private data to the end. A DISCONNECT body: up to
 * CRYPT_CM_DISCONNECT_MARKS_MAX marks, one per flow of the sender's to
 * the receiver's iface, each the flow id and the sequence number of the
 * record it would send next (LE64 each): the receiver reports the
 * disconnect once its flows have delivered that far (cm/README.md).
 */
enum {
    CRYPT_CM_FRAME_HDR_LEN   = 4,
    CRYPT_CM_FRAME_CONNECT    = 1,
    CRYPT_CM_FRAME_ACCEPT     = 2,
    CRYPT_CM_FRAME_REJECT     = 3,
    CRYPT_CM_FRAME_NOTIFY     = 4,
    CRYPT_CM_FRAME_DISCONNECT = 5
};

typedef struct crypt_cm_frame_hdr {
    uint16_t length;     /* of the body and its tag */
    uint8_t  type;
    uint8_t  reserved;
} __attribute__((packed)) crypt_cm_frame_hdr_t;

/* A frame header, checked before its body is read in: the length of the
 * body (tag excluded), or -1 when the header is malformed */
static inline long crypt_cm_frame_body_len(const crypt_cm_frame_hdr_t *hdr,
                                           size_t max_body)
{
    size_t length = le16toh(hdr->length);

    if ((hdr->reserved != 0) || (length < CRYPT_AEAD_TAG_LEN) ||
        (length > max_body + CRYPT_AEAD_TAG_LEN)) {
        return -1;
    }
    return (long)(length - CRYPT_AEAD_TAG_LEN);
}

/* An opened CONNECT or ACCEPT body, split into the sender's device
 * address (1 to 255 bytes) and UCP's private data (up to max_priv bytes);
 * 0 when malformed */
typedef struct crypt_cm_addresses {
    const uint8_t *dev_addr;
    size_t        dev_addr_len;
    const uint8_t *data_key;     /* KEYEX_PUBLIC_KEY_LEN */
    const uint8_t *priv;
    size_t        priv_len;
} crypt_cm_addresses_t;

/* A flow's end as a DISCONNECT names it */
typedef struct crypt_cm_flow_mark {
    uint64_t flow_id;            /* LE64 */
    uint64_t end;                /* LE64: the sender's next sequence number */
} __attribute__((packed)) crypt_cm_flow_mark_t;

#define CRYPT_CM_DISCONNECT_MARKS_MAX 64

/* The number of marks in an opened DISCONNECT body; -1 when malformed */
static inline int crypt_cm_disconnect_marks(size_t len)
{
    if ((len % sizeof(crypt_cm_flow_mark_t)) ||
        (len > CRYPT_CM_DISCONNECT_MARKS_MAX * sizeof(crypt_cm_flow_mark_t))) {
        return -1;
    }
    return (int)(len / sizeof(crypt_cm_flow_mark_t));
}

static inline int crypt_cm_addresses_parse(const uint8_t *body, size_t len,
                                           size_t max_priv,
                                           crypt_cm_addresses_t *out)
{
    if ((len < 1 + KEYEX_PUBLIC_KEY_LEN) || (body[0] == 0) ||
        (body[0] > len - 1 - KEYEX_PUBLIC_KEY_LEN) ||
        (len - 1 - body[0] - KEYEX_PUBLIC_KEY_LEN > max_priv)) {
        return 0;
    }
    out->dev_addr     = body + 1;
    out->dev_addr_len = body[0];
    out->data_key     = body + 1 + body[0];
    out->priv         = out->data_key + KEYEX_PUBLIC_KEY_LEN;
    out->priv_len     = len - 1 - body[0] - KEYEX_PUBLIC_KEY_LEN;
    return 1;
}

/* (C and C++: the tests parse the wire with these structs too) */
#ifdef __cplusplus
#define CRYPT_WIRE_ASSERT static_assert
#else
#define CRYPT_WIRE_ASSERT _Static_assert
#endif
CRYPT_WIRE_ASSERT(sizeof(crypt_wire_frame_hdr_t) == CRYPT_WIRE_FRAME_HDR_LEN,
               "frame header layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_record_hdr_t) == CRYPT_RECORD_HDR_LEN,
               "record header layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_record_aad_t) == CRYPT_RECORD_HDR_LEN + 8,
               "record associated data layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_iface_addr_t) == 7 + KEYEX_PUBLIC_KEY_LEN,
               "iface address layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_ep_addr_t) == KEYEX_PUBLIC_KEY_LEN,
               "ep address layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_bulk_segment_t) == 40 + CRYPT_AEAD_TAG_LEN,
               "bulk SEGMENT layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_bulk_ack_t) == 24, "bulk ACK layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_bulk_get_req_t) == 48, "bulk GET_REQ layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_flow_end_t) == 8, "FLOW_END layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_flow_refused_t) == 24,
               "FLOW_REFUSED layout (an ACK's size: the reply queue's)");
CRYPT_WIRE_ASSERT(sizeof(crypt_bulk_aad_t) == 32, "bulk associated data layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_lane_chunk_hdr_t) == 40, "lane chunk layout");
CRYPT_WIRE_ASSERT(sizeof(crypt_cm_frame_hdr_t) == CRYPT_CM_FRAME_HDR_LEN,
               "cm frame header layout");

#endif
