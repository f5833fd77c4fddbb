/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collectives' bootstrap (crypt_coll_team_create) as rank 0 of a team
 * of two sees it, with rank 1's message coming from the input:
 *   raw:    the bytes as rank 1's message (CRYPT_COLL_HELLO_LEN of them):
 *           a team only if the harness, holding the key, finds the MAC
 *           and the fields right (the honest seeds), else refused;
 *   sealed: the bytes edit the fields of a message the harness builds and
 *           MACs with the job secret's key (as a rank holding the secret
 *           would), so the checks behind the MAC run: a team is made only
 *           from a message of rank 1 of a team of two with our key size.
 * The second round (the confirmations) gets rank 1's as an honest rank 1
 * that received the same two messages would send it.
 */
#include "fuzz_common.h"

#include <endian.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t      *peer;  /* rank 1's message */
    const uint8_t      *mac_key;
    int                round;
    crypt_coll_hello_t hellos[2];
} fuzz_oob_t;

static int fuzz_oob_allgather(void *ctx, const void *sbuf, void *rbuf, size_t len)
{
    fuzz_oob_t *o = ctx;
    crypt_coll_confirm_input_t input;

    memcpy(rbuf, sbuf, len);
    if (o->round++ == 0) {
        memcpy((uint8_t*)rbuf + len, o->peer, len);
        memcpy(o->hellos, rbuf, sizeof(o->hellos));
        return 0;
    }
    /* rank 1's confirmation of the same two messages (crypt_coll_wire.h) */
    memcpy(input.label, CRYPT_COLL_CONFIRM_LABEL, sizeof(input.label));
    input.rank = htole32(1);
    if ((keyex_hash(o->hellos, sizeof(o->hellos), input.transcript) != KEYEX_OK) ||
        (keyex_mac(o->mac_key, &input, sizeof(input), (uint8_t*)rbuf + len) !=
         KEYEX_OK)) {
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    crypt_coll_hello_t hello;
    crypt_coll_team_t team;
    crypt_coll_oob_t oob;
    crypt_coll_status_t status;
    uint8_t mac_key[KEYEX_SECRET_LEN];
    fuzz_oob_t o;
    int expect_ok;
    uint32_t mode = fuzz_u32(&in);

    memset(&hello, 0, sizeof(hello));
    if (keyex_derive_bootstrap_key(fuzz_job_secret, NULL, 0, mac_key) != KEYEX_OK) {
        abort();
    }
    if ((mode & 1) == 0) {
        uint8_t mac[KEYEX_MAC_LEN];
        memcpy(&hello, in.data, (in.size < sizeof(hello)) ? in.size : sizeof(hello));
        if (keyex_mac(mac_key, &hello, offsetof(crypt_coll_hello_t, mac), mac) !=
            KEYEX_OK) {
            abort();
        }
        expect_ok = !memcmp(mac, hello.mac, sizeof(mac));
    } else {
        hello.version = (uint8_t)fuzz_u32(&in);
        hello.key_len = (uint8_t)fuzz_u32(&in);
        hello.reserved[0] = (uint8_t)fuzz_u32(&in);
        hello.rank    = htole32(fuzz_u32(&in));
        hello.size    = htole32(fuzz_u32(&in));
        memcpy(hello.host_id, in.data,
               (in.size < sizeof(hello.host_id)) ? in.size : sizeof(hello.host_id));
        if (keyex_mac(mac_key, &hello, offsetof(crypt_coll_hello_t, mac),
                      hello.mac) != KEYEX_OK) {
            abort();
        }
        expect_ok = 1;
    }
    /* (raw inputs reach here too: libFuzzer learns the MAC from the
     * comparison above, so every field is checked as the library does) */
    expect_ok = expect_ok && (hello.version == CRYPT_COLL_HELLO_VERSION) &&
                    (hello.key_len == 16) && (hello.reserved[0] == 0) &&
                    (hello.reserved[1] == 0) &&
                    (le32toh(hello.rank) == 1) && (le32toh(hello.size) == 2) &&
                    (memchr(hello.host_id, '\0', sizeof(hello.host_id)) != NULL);
    o.peer        = (const uint8_t*)&hello;
    o.mac_key     = mac_key;
    o.round       = 0;
    oob.allgather = fuzz_oob_allgather;
    oob.ctx       = &o;
    oob.rank      = 0;
    oob.size      = 2;
    oob.job_id    = NULL;
    status = crypt_coll_team_create(&team, &oob, NULL, fuzz_job_secret, 16,
                                    CRYPT_AEAD_BACKEND_OPENSSL, fuzz_sendrecv,
                                    NULL);
    if (status == CRYPT_COLL_OK) {
        if (!expect_ok) {
            abort(); /* a team from a message that must be refused */
        }
        crypt_coll_team_cleanup(&team);
    } else if (expect_ok || (status != CRYPT_COLL_ERR_AUTH)) {
        abort();
    }
    return 0;
}
