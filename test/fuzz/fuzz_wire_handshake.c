/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The handshake of crypt's own wire (src/keyex/noise.h), as a responder
 * and an initiator see it, with real keys (fixed test statics, the fixed
 * test job secret):
 *   raw (mode bit 0 clear): the bytes as an initiation, checked and
 *     consumed the way the responder does (mac1 first): must be refused;
 *     as its mac2 under a cookie, and as a cookie reply to it (what an
 *     initiator under load reads): refused too;
 *   structure-aware (bit 0 set): an honest initiation with the input XORed
 *     over it and, with bit 1, its mac1 computed again over the result (so
 *     the code behind mac1 is reached): it must be refused unless nothing
 *     changed; then the honest response with the rest of the input XORed
 *     over it, consumed by the initiator: refused unless unchanged, and
 *     when both pass, both sides hold the same transport keys.
 */
#include "ucx_crypt_config.h"
#include "keyex/noise.h"
#include "fuzz_common.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static keyex_keypair_t fuzz_ini, fuzz_rsp;
static const keyex_noise_context_t fuzz_context = {KEYEX_NOISE_ROLE_RECORDS, 16};
static int fuzz_ready;

static void fuzz_init(void)
{
    static const uint8_t ini_priv[32] = {1, 1, 1}, rsp_priv[32] = {2, 2, 2};

    if ((keyex_keypair_from_private(&fuzz_ini, ini_priv) != KEYEX_OK) ||
        (keyex_keypair_from_private(&fuzz_rsp, rsp_priv) != KEYEX_OK)) {
        abort();
    }
    fuzz_ready = 1;
}

static void fuzz_xor(uint8_t *msg, size_t len, fuzz_input_t *in, int *changed)
{
    size_t i;

    for (i = 0; (i < len) && (in->size > 0); ++i, ++in->data, --in->size) {
        msg[i] ^= in->data[0];
        *changed |= (in->data[0] != 0);
    }
}

static void fuzz_remac(void *msg, size_t mac_offset, const uint8_t *receiver)
{
    uint8_t key[KEYEX_SECRET_LEN], mac[KEYEX_MAC_LEN];

    if ((keyex_noise_mac1_key(fuzz_job_secret, receiver, key) != KEYEX_OK) ||
        (keyex_mac(key, msg, mac_offset, mac) != KEYEX_OK)) {
        abort();
    }
    memcpy((uint8_t*)msg + mac_offset, mac, KEYEX_NOISE_MAC1_LEN);
}

/* A stranger's bytes as mac2 and as a cookie reply: neither passes */
static void fuzz_stranger_cookies(const keyex_noise_init_msg_t *init,
                                  const uint8_t *data, size_t size)
{
    static const uint8_t cookie[KEYEX_NOISE_COOKIE_LEN] = {7};
    uint8_t key[KEYEX_SECRET_LEN], got[KEYEX_NOISE_COOKIE_LEN];
    keyex_noise_cookie_msg_t reply = {0};

    if (keyex_noise_cookie_key(fuzz_job_secret, fuzz_rsp.public_key, key) != KEYEX_OK) {
        abort();
    }
    if (keyex_noise_mac2_check(key, cookie, init, sizeof(*init)) == KEYEX_OK) {
        abort(); /* a stranger's bytes made a valid mac2 */
    }
    memcpy(&reply, data, (size < sizeof(reply)) ? size : sizeof(reply));
    if (keyex_noise_cookie_reply_consume(key, init->mac1, &reply, got) == KEYEX_OK) {
        abort(); /* a stranger's bytes made a cookie reply */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    keyex_noise_t *ini, *rsp;
    keyex_noise_init_msg_t init, orig;
    keyex_noise_response_msg_t resp;
    keyex_noise_transport_t ikeys, rkeys;
    uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN] = {0x40}, got_ts[KEYEX_NOISE_TIMESTAMP_LEN];
    fuzz_input_t in = {data, size};
    int changed = 0, init_ok, resp_ok;
    uint8_t mode, resp_flags = 0xff;

    if (!fuzz_ready) {
        fuzz_init();
    }
    if (size < 1) {
        return 0;
    }
    mode = data[0];
    in.data++;
    in.size--;
    ini = keyex_secure_alloc(sizeof(*ini));
    rsp = keyex_secure_alloc(sizeof(*rsp));
    if ((ini == NULL) || (rsp == NULL) ||
        (keyex_noise_start(ini, &fuzz_ini, fuzz_job_secret, &fuzz_context) != KEYEX_OK) ||
        (keyex_noise_start(rsp, &fuzz_rsp, fuzz_job_secret, &fuzz_context) != KEYEX_OK)) {
        abort();
    }

    if (!(mode & 1)) {
        memset(&init, 0, sizeof(init));
        memcpy(&init, in.data, (in.size < sizeof(init)) ? in.size : sizeof(init));
        if (keyex_noise_init_precheck(rsp->mac1_key_local, &init) ||
            (keyex_noise_init_consume(rsp, &fuzz_rsp, &init, got_ts) == KEYEX_OK)) {
            abort(); /* a stranger's bytes passed mac1 */
        }
        fuzz_stranger_cookies(&init, in.data, in.size);
        goto out;
    }

    if (keyex_noise_init_create(ini, &fuzz_ini, fuzz_job_secret,
                                fuzz_rsp.public_key, ts, &init) != KEYEX_OK) {
        abort();
    }
    orig = init;
    fuzz_xor((uint8_t*)&init, sizeof(init), &in, &changed);
    if (mode & 2) {
        fuzz_remac(&init, offsetof(keyex_noise_init_msg_t, mac1), fuzz_rsp.public_key);
    }
    init_ok = (keyex_noise_init_consume(rsp, &fuzz_rsp, &init, got_ts) == KEYEX_OK);
    /* (mac2 is the listener's, with its cookies) */
    if (init_ok != !CRYPTO_memcmp(&init, &orig, offsetof(keyex_noise_init_msg_t, mac2))) {
        abort(); /* a changed initiation passed, or the honest one did not */
    }
    if (!init_ok) {
        goto out;
    }
    if (memcmp(rsp->rs, fuzz_ini.public_key, KEYEX_PUBLIC_KEY_LEN) ||
        (keyex_noise_response_create(rsp, fuzz_job_secret, mode >> 4, &resp, &rkeys) != KEYEX_OK)) {
        abort(); /* an initiation that passed named another initiator */
    }
    changed = 0;
    fuzz_xor((uint8_t*)&resp, sizeof(resp), &in, &changed);
    resp_ok = (keyex_noise_response_consume(ini, &fuzz_ini, &resp, &resp_flags, &ikeys) == KEYEX_OK);
    if (resp_ok != !changed) {
        abort();
    }
    if (resp_ok && ((resp_flags != (mode >> 4)) ||
                    CRYPTO_memcmp(ikeys.send, rkeys.recv, sizeof(ikeys.send)) ||
                    CRYPTO_memcmp(ikeys.recv, rkeys.send, sizeof(ikeys.recv)))) {
        abort();
    }

out:
    keyex_noise_cleanup(ini);
    keyex_noise_cleanup(rsp);
    keyex_secure_free(ini, sizeof(*ini));
    keyex_secure_free(rsp, sizeof(*rsp));
    return 0;
}
