/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared by the fuzz targets: a fixed test key (fuzzing needs reproducible
 * runs; nothing here protects anything), a team over it, and a reader of
 * the fuzzer's bytes.
 */
#ifndef UCX_CRYPT_FUZZ_COMMON_H
#define UCX_CRYPT_FUZZ_COMMON_H

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const uint8_t fuzz_job_secret[KEYEX_JOB_SECRET_LEN] = {
    0x66, 0x75, 0x7a, 0x7a, 0x2d, 0x74, 0x65, 0x73, 0x74, 0x2d, 0x6b, 0x65,
    0x79, 0x2d, 0x6e, 0x6f, 0x74, 0x2d, 0x61, 0x2d, 0x73, 0x65, 0x63, 0x72,
    0x65, 0x74, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21
};

/* the own wire's control frame key of fuzz_wire_frames (and its seeds) */
static const uint8_t fuzz_wire_ctrl_key[32] = {4, 4, 4};

typedef struct {
    const uint8_t *data;
    size_t        size;
} fuzz_input_t;

static inline uint32_t fuzz_u32(fuzz_input_t *in)
{
    uint32_t v = 0;
    size_t n = (in->size < 4) ? in->size : 4;

    memcpy(&v, in->data, n);
    in->data += n;
    in->size -= n;
    return v;
}

static inline uint8_t fuzz_u8(fuzz_input_t *in)
{
    uint8_t v = 0;

    if (in->size > 0) {
        v = in->data[0];
        ++in->data;
        --in->size;
    }
    return v;
}

static inline int fuzz_sendrecv(void *ctx, int dst, const void *sbuf,
                                size_t slen, int src, void *rbuf, size_t rlen)
{
    return -1; /* the targets never move data */
}

/* Rank `rank` of a team of `size` on `nodes` nodes (block), AES-`bits` */
static inline int fuzz_team(crypt_coll_team_t *team, int rank, int size,
                            unsigned key_len)
{
    static const uint8_t id[CRYPT_COLL_TEAM_ID_LEN] = {1, 2, 3};
    int node_of[64], r;

    for (r = 0; r < size; ++r) {
        node_of[r] = r / 2;
    }
    return crypt_coll_team_init(team, rank, size, node_of, fuzz_job_secret, id,
                                key_len, CRYPT_AEAD_BACKEND_OPENSSL,
                                fuzz_sendrecv, NULL) == CRYPT_COLL_OK;
}

#endif
