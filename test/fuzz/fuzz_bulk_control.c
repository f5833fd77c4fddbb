/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control records (the bulk engine's, a flow's end and refusal) as the target
 * reads them
 * (src/uct_crypt/bulk/bulk_input.c), against a model written here
 * from the byte diagrams of base/format.h alone, field by field with
 * 128-bit arithmetic. They come only inside authenticated records, so
 * there is no tag to get past: every input is one that an authenticated
 * peer could send. First input byte:
 *   even: the rest is a control record's payload; the library and the
 *     model must agree on its kind (or that it is refused);
 *   odd: four little-endian 64-bit numbers, a range and a region; the
 *     library's "inside" must be the model's.
 */
#include "ucx_crypt_config.h"
#include "uct_crypt/bulk/bulk_input.h"
#include "uct_crypt/base/format.h"
#include "fuzz_common.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef unsigned __int128 fuzz_u128;

static uint64_t fuzz_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    int i;

    for (i = bytes - 1; i >= 0; --i) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int fuzz_zero(const uint8_t *p, size_t n)
{
    while (n-- > 0) {
        if (*p++ != 0) {
            return 0;
        }
    }
    return 1;
}

/* address + length stays below 2^64, and length is at most 1 GiB */
static int fuzz_extent(uint64_t address, uint64_t length)
{
    return (length <= ((uint64_t)1 << 30)) &&
           ((fuzz_u128)address + length < ((fuzz_u128)1 << 64));
}

static int fuzz_model_kind(const uint8_t *p, size_t n)
{
    if (n == 0) {
        return 0;
    }
    switch (p[0]) {
    case 1: /* SEGMENT: kind, last, gen(2), idx(4), put id(8), addr(8), len(8),
             * token(8), tag(16) */
        return ((n == 56) && (p[1] <= 1) &&
                fuzz_extent(fuzz_le(p + 16, 8), fuzz_le(p + 24, 8))) ? 1 : 0;
    case 2: /* ACK: kind, 7 zero bytes, flow id, id (4, GET_DONE, is gone
             * since wire version 12) */
        return ((n == 24) && fuzz_zero(p + 1, 7)) ? 2 : 0;
    case 3: /* GET_REQ: kind, 3 zero, rkey len(4), get id, remote, remote
             * token, local, len, then the rkey: component name (16) and
             * region token (8) at least */
        return ((n >= 48) && fuzz_zero(p + 1, 3) && (fuzz_le(p + 4, 4) >= 24) &&
                ((fuzz_u128)n == 48 + (fuzz_u128)fuzz_le(p + 4, 4)) &&
                fuzz_extent(fuzz_le(p + 16, 8), fuzz_le(p + 40, 8)) &&
                fuzz_extent(fuzz_le(p + 32, 8), fuzz_le(p + 40, 8))) ? 3 : 0;
    case 5: /* FLOW_END: kind, 7 zero bytes */
        return ((n == 8) && fuzz_zero(p + 1, 7)) ? 5 : 0;
    case 6: /* FLOW_REFUSED: kind, reason 1 or 2, 6 zero, flow id, 8 zero */
        return ((n == 24) && ((p[1] == 1) || (p[1] == 2)) && fuzz_zero(p + 2, 6) &&
                fuzz_zero(p + 16, 8)) ? 6 : 0;
    default:
        return 0;
    }
}

static int fuzz_model_within(uint64_t a, uint64_t n, uint64_t b, uint64_t m)
{
    fuzz_u128 end = (fuzz_u128)a + n, base_end = (fuzz_u128)b + m;
    fuzz_u128 top = (fuzz_u128)1 << 64;

    /* a range or region that runs past the top of the address space (its
     * end wraps in 64 bits) contains nothing and is in nothing */
    return (end < top) && (base_end < top) && (a >= b) && (end <= base_end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *payload;
    uint64_t v[4] = {0};

    if (size == 0) {
        return 0;
    }
    if (!(data[0] & 1)) {
        /* exactly the payload's length: a read past it is caught */
        payload = malloc(size - 1 ? size - 1 : 1);
        memcpy(payload, data + 1, size - 1);
        if (uct_crypt_bulk_control_kind(payload, size - 1) !=
            fuzz_model_kind(payload, size - 1)) {
            abort();
        }
        free(payload);
        return 0;
    }
    memcpy(v, data + 1, (size - 1 < sizeof(v)) ? size - 1 : sizeof(v));
    if (uct_crypt_range_within(le64toh(v[0]), le64toh(v[1]), le64toh(v[2]),
                               le64toh(v[3])) !=
        fuzz_model_within(le64toh(v[0]), le64toh(v[1]), le64toh(v[2]),
                          le64toh(v[3]))) {
        abort();
    }
    return 0;
}
