/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collectives' one wire format: the sealed frame, and what its tag
 * authenticates. Frames travel between nodes on whatever pipe the caller
 * gives the team (the collective lane of uct_crypt/api/uct_crypt_lane.h,
 * or the MPI library); inside a node blocks move in plaintext.
 *
 * Frame (CRYPT_COLL_FRAME_OVERHEAD + m bytes):
 *
 *   0        2        4                          12
 *   +--------+--------+--------------------------+------------------+-----+
 *   | epoch  | sealer | sequence (BE64)          | ciphertext (m)   | tag |
 *   | (BE16) | (BE16) |                          |                  |     |
 *   +--------+--------+--------------------------+------------------+-----+
 *
 * The 12-byte header is the GCM nonce itself, sent verbatim: the
 * deterministic construction of NIST SP 800-38D section 8.2.1, fixed field
 * = the sealer's epoch and rank, invocation field = that rank's counter
 * under the epoch's key, big endian as src/aead builds every record nonce.
 * A nonce is therefore unique per key by construction, never random. The
 * epoch names the team key the frame is sealed under (each rank leaves an
 * epoch before its share of the key's usage limits is spent).
 *
 * The tag also covers crypt_coll_aad_t (not sent, both sides build it):
 * the team's collective number, the block's owner, the sealing rank, the
 * receiving rank and the plaintext length, little endian: a frame cannot be
 * replayed into another collective, moved to another block, taken from
 * another sender, delivered to another receiver or cut short. Owners above
 * the rank range name aggregate frames (CRYPT_COLL_OWNER_*); a frame that
 * is forwarded and opened by several ranks names no receiver
 * (CRYPT_COLL_DEST_ANY). A frame of several blocks is opened only from
 * the one rank that may have sealed it.
 */
#ifndef UCX_CRYPT_COLL_WIRE_H
#define UCX_CRYPT_COLL_WIRE_H

#include "ucp_crypt/coll/crypt_coll.h"

#include <stdint.h>

typedef struct crypt_coll_frame_hdr {
    uint16_t epoch;          /* big endian: nonce fixed field, */
    uint16_t sealer;         /* ... the sealing rank's */
    uint64_t sequence;       /* big endian: nonce invocation field */
} __attribute__((packed)) crypt_coll_frame_hdr_t;

/*
 * Bootstrap message (crypt_coll_team_create), one per rank, through the
 * caller's out-of-band all-gather (CRYPT_COLL_HELLO_LEN bytes, fixed):
 *
 *   0       1       2        4          8          12            44
 *   +-------+-------+--------+----------+----------+-------------+
 *   | vers. | key   | zero   | rank     | size     | random (32) |
 *   |       | bytes | (2)    | (LE32)   | (LE32)   |             |
 *   +-------+-------+--------+----------+----------+-------------+
 *   | host identity (128, NUL padded)  | HMAC-SHA256 (32) of all before |
 *   +----------------------------------+------------------------------+
 *   44                                 172                            204
 *
 * The MAC key is derived from the job secret (keyex_derive_bootstrap_key);
 * the team key from the hash of all ranks' messages in rank order.
 */
enum {
    CRYPT_COLL_HELLO_VERSION = 2,
    CRYPT_COLL_HOST_ID_LEN   = 128,
    CRYPT_COLL_HELLO_LEN     = 204
};

typedef struct crypt_coll_hello {
    uint8_t  version;
    uint8_t  key_len;
    uint8_t  reserved[2];
    uint32_t rank;
    uint32_t size;
    uint8_t  random[32];
    char     host_id[CRYPT_COLL_HOST_ID_LEN];
    uint8_t  mac[KEYEX_MAC_LEN];
} __attribute__((packed)) crypt_coll_hello_t;

/*
 * Bootstrap confirmation, the second round: rank r sends the HMAC-SHA256,
 * under the bootstrap key, of crypt_coll_confirm_input_t: a label, r and
 * the hash of every rank's message as r received them (the team id). The
 * rank in it stops a confirmation being copied from one slot to another;
 * the label keeps it apart from a bootstrap message's MAC.
 */
#define CRYPT_COLL_CONFIRM_LABEL "ucx-crypt confirm"

typedef struct crypt_coll_confirm_input {
    char     label[sizeof(CRYPT_COLL_CONFIRM_LABEL) - 1];
    uint32_t rank;           /* LE32 */
    uint8_t  transcript[KEYEX_TRANSCRIPT_LEN];
} __attribute__((packed)) crypt_coll_confirm_input_t;

typedef struct crypt_coll_aad {
    uint64_t collective;     /* little endian, from here on */
    uint32_t owner;
    uint32_t sealer;
    uint32_t dest;           /* the receiving rank, or CRYPT_COLL_DEST_ANY */
    uint64_t length;
} __attribute__((packed)) crypt_coll_aad_t;

/* a frame that several ranks open (forwarded as it is) */
#define CRYPT_COLL_DEST_ANY               (-1)

/* owners of frames that carry more than one rank's block */
#define CRYPT_COLL_OWNER_BCAST(_root)     (0x10000000u | (unsigned)(_root))
#define CRYPT_COLL_OWNER_NODE(_node)      (0x20000000u | (unsigned)(_node))
#define CRYPT_COLL_OWNER_MERGED(_round)   (0x40000000u | (unsigned)(_round))

#ifdef __cplusplus /* (the tests read these layouts too) */
#define CRYPT_COLL_WIRE_ASSERT static_assert
#else
#define CRYPT_COLL_WIRE_ASSERT _Static_assert
#endif
CRYPT_COLL_WIRE_ASSERT(sizeof(crypt_coll_frame_hdr_t) == CRYPT_COLL_FRAME_HDR,
               "frame header layout");
CRYPT_COLL_WIRE_ASSERT((int)CRYPT_COLL_FRAME_HDR == (int)CRYPT_AEAD_NONCE_LEN,
               "the frame header is the GCM nonce");
CRYPT_COLL_WIRE_ASSERT(sizeof(crypt_coll_aad_t) == 28, "frame associated data layout");
CRYPT_COLL_WIRE_ASSERT(sizeof(crypt_coll_hello_t) == CRYPT_COLL_HELLO_LEN,
                       "bootstrap message layout");
CRYPT_COLL_WIRE_ASSERT(sizeof(crypt_coll_confirm_input_t) == 17 + 4 + 32,
                       "bootstrap confirmation layout");

#endif
