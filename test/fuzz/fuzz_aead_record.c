/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The record and stream-segment openers of src/aead, on both backends:
 *   raw:    the bytes as ciphertext and tag, opened: a failed open zeroes
 *           its output; an open that succeeds (the honest seeds) must give
 *           the plaintext that seals back to exactly these bytes;
 *   sealed: the bytes as plaintext, sealed, a bit flipped where the input
 *           says (or none), opened: only an untouched record opens, to
 *           exactly the plaintext, and both backends agree.
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static crypt_aead_key_t fuzz_keys[2];
static int fuzz_backends;

static void fuzz_init(void)
{
    static const uint8_t raw[32] = {7, 7, 7};
    crypt_aead_backend_t b[2] = {CRYPT_AEAD_BACKEND_OPENSSL, CRYPT_AEAD_BACKEND_IPSEC_MB};
    int i;

    for (i = 0; i < 2; ++i) {
        if ((crypt_aead_init(b[i]) == CRYPT_AEAD_OK) &&
            (crypt_aead_key_init(&fuzz_keys[fuzz_backends], b[i], raw, 32) ==
             CRYPT_AEAD_OK)) {
            ++fuzz_backends;
        }
    }
    if (fuzz_backends == 0) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {1, 2, 3, 4};
    static const uint8_t aad[24] = {9};
    uint8_t tag[CRYPT_AEAD_TAG_LEN], flip = 0, mode;
    uint8_t *sealed, *opened;
    uint64_t seq;
    size_t m;
    int k;

    if (fuzz_backends == 0) {
        fuzz_init();
    }
    if (size < 1 + 8) {
        return 0;
    }
    mode = data[0];
    memcpy(&seq, data + 1, 8);
    data += 9;
    size -= 9;
    if ((mode & 1) && (size > 0)) {
        flip = data[0];
        ++data;
        --size;
    }
    m      = size;
    sealed = malloc(m + 1);
    opened = malloc(m + 1);
    for (k = 0; k < fuzz_backends; ++k) {
        crypt_aead_status_t status;
        if ((mode & 1) == 0) {
            if (m < CRYPT_AEAD_TAG_LEN) {
                break;
            }
            memset(opened, 0xAA, m);
            status = crypt_record_open(&fuzz_keys[k], prefix, seq, aad, sizeof(aad),
                                       data, m - CRYPT_AEAD_TAG_LEN, opened,
                                       data + m - CRYPT_AEAD_TAG_LEN);
            if (status == CRYPT_AEAD_OK) {
                if ((crypt_record_seal(&fuzz_keys[k], prefix, seq, aad, sizeof(aad),
                                       opened, m - CRYPT_AEAD_TAG_LEN, sealed,
                                       tag) != CRYPT_AEAD_OK) ||
                    memcmp(sealed, data, m - CRYPT_AEAD_TAG_LEN) ||
                    memcmp(tag, data + m - CRYPT_AEAD_TAG_LEN, sizeof(tag))) {
                    abort(); /* opened to something else than was sealed */
                }
                continue;
            }
            for (size_t i = 0; i < m - CRYPT_AEAD_TAG_LEN; ++i) {
                if (opened[i] != 0) abort(); /* failed opens zero their output */
            }
            continue;
        }
        if (crypt_record_seal(&fuzz_keys[k], prefix, seq, aad, sizeof(aad), data,
                              m, sealed, tag) != CRYPT_AEAD_OK) {
            abort();
        }
        if (flip & 1) {
            size_t bit = (flip >> 1) % ((m + sizeof(tag)) * 8);
            if (bit / 8 < m) {
                sealed[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            } else {
                tag[bit / 8 - m] ^= (uint8_t)(1u << (bit % 8));
            }
        }
        status = crypt_record_open(&fuzz_keys[k], prefix, seq, aad, sizeof(aad),
                                   sealed, m, opened, tag);
        if ((flip & 1) ? (status == CRYPT_AEAD_OK) :
                         ((status != CRYPT_AEAD_OK) || memcmp(opened, data, m))) {
            abort();
        }
    }
    free(sealed);
    free(opened);
    return 0;
}
