/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Collective frames (crypt_coll_wire.h) as a receiving rank opens them.
 * Input: mode, owner, sealer and receiver choices, then the frame.
 *   raw:    the bytes as a frame, opened as every algorithm would;
 *   sealed: the bytes as plaintext, sealed by another rank of the team
 *           (the harness holds the key), then bits flipped where the input
 *           says, then opened: only an untouched frame may open, and then
 *           to exactly the plaintext.
 */
#include "fuzz_common.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static crypt_coll_team_t sealer_team, opener_team;
    static int ready;
    fuzz_input_t in = {data, size};
    uint32_t mode, owner, sealer, dest, flip;
    crypt_coll_status_t status;
    uint8_t *frame, *plain;
    size_t m;

    if (!ready) {
        if (!fuzz_team(&sealer_team, 3, 8, 32) || !fuzz_team(&opener_team, 1, 8, 32)) {
            abort();
        }
        crypt_coll_team_set_epoch_limit(&sealer_team, 5);
        ready = 1;
    }
    mode   = fuzz_u32(&in);
    owner  = fuzz_u32(&in);
    sealer = fuzz_u32(&in);
    dest   = fuzz_u32(&in);
    flip   = fuzz_u32(&in);
    owner  = (owner & 0x80000000u) ? owner : owner % 8;
    sealer = (sealer % 10) - 1; /* -1 (any) .. 8 (out of range) */
    dest   = (dest & 1) ? (uint32_t)CRYPT_COLL_DEST_ANY : 1;

    if ((mode & 1) == 0) {
        /* raw bytes as a frame */
        if (in.size < CRYPT_COLL_FRAME_OVERHEAD) {
            return 0;
        }
        m     = in.size - CRYPT_COLL_FRAME_OVERHEAD;
        plain = malloc(m + 1);
        status = crypt_coll_open(&opener_team, (int)owner, (int)sealer, (int)dest,
                                 in.data, m, plain);
        if ((status != CRYPT_COLL_OK) && (status != CRYPT_COLL_ERR_AUTH)) {
            abort();
        }
        free(plain);
        return 0;
    }

    /* structure-aware: a real frame of rank 3, then tampered with */
    m     = in.size;
    frame = malloc(m + CRYPT_COLL_FRAME_OVERHEAD);
    plain = malloc(m + 1);
    if (crypt_coll_seal(&sealer_team, (int)owner, (int)dest, in.data, m, frame) !=
        CRYPT_COLL_OK) {
        free(frame);
        free(plain);
        return 0;
    }
    if (flip & 1) {
        size_t bit = (flip >> 1) % ((m + CRYPT_COLL_FRAME_OVERHEAD) * 8);
        frame[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    status = crypt_coll_open(&opener_team, (int)owner, 3, (int)dest, frame, m, plain);
    if ((flip & 1) ? (status == CRYPT_COLL_OK) :
                     ((status != CRYPT_COLL_OK) || memcmp(plain, in.data, m))) {
        abort(); /* a tampered frame opened, or an honest one did not */
    }
    free(frame);
    free(plain);
    return 0;
}
