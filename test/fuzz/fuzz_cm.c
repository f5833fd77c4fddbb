/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's connection manager as a server and a client see it
 * (src/keyex/noise.h NNpsk0, then the frames of base/format.h), with
 * the fixed test job secret:
 *   raw (mode bit 0 clear): the bytes as a client's initiation: must be
 *     refused (a stranger never gets past the first message's tag);
 *   structure-aware (bit 0 set): an honest initiation and response with
 *     the input XORed over them: each refused unless unchanged, and when
 *     both pass the two sides hold the same keys; then (bit 1) a CONNECT
 *     frame sealed under the client's key, its body taken from the input,
 *     with the rest of the input XORed over the sealed frame, read the way
 *     the server reads it (header checked against the limit, opened,
 *     split, or counted as a DISCONNECT's flow marks): a changed frame
 *     never opens, an unchanged one opens to what was sealed, and the
 *     split stays inside the body.
 * Honest messages are compared with CRYPTO_memcmp, which libFuzzer does
 * not trace: a traced memcmp hands their bytes to the fuzzer, which then
 * replays an honest initiation in raw mode (found so, in 70000 runs).
 */
#include "ucx_crypt_config.h"
#include "keyex/noise.h"
#include "uct_crypt/base/format.h"
#include "fuzz_common.h"

#include <openssl/crypto.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { FUZZ_MAX_PRIV = 512,
       FUZZ_MAX_BODY = 1 + 255 + KEYEX_PUBLIC_KEY_LEN + FUZZ_MAX_PRIV };

static void fuzz_xor(uint8_t *msg, size_t len, fuzz_input_t *in, int *changed)
{
    size_t i;

    for (i = 0; (i < len) && (in->size > 0); ++i, ++in->data, --in->size) {
        msg[i] ^= in->data[0];
        *changed |= (in->data[0] != 0);
    }
}

/* a CONNECT from the client to the server under their keys */
static void fuzz_frame(const keyex_noise_transport_t *ckeys,
                       const keyex_noise_transport_t *skeys, fuzz_input_t *in)
{
    uint8_t frame[CRYPT_CM_FRAME_HDR_LEN + FUZZ_MAX_BODY + CRYPT_AEAD_TAG_LEN];
    uint8_t body[FUZZ_MAX_BODY], nonce[CRYPT_AEAD_NONCE_LEN];
    crypt_cm_frame_hdr_t *hdr = (crypt_cm_frame_hdr_t*)frame;
    crypt_aead_key_t tx = {0}, rx = {0};
    crypt_cm_addresses_t peer;
    size_t body_len, frame_len;
    int changed = 0, opened;
    long len;

    body_len = (in->size > 0) ? (in->data[0] * 3u) % (FUZZ_MAX_BODY + 1) : 0;
    if (in->size > 0) {
        ++in->data;
        --in->size;
    }
    for (size_t i = 0; i < body_len; ++i) {
        body[i] = (in->size > 0) ? (--in->size, *in->data++) : (uint8_t)i;
    }
    if ((crypt_aead_key_init(&tx, CRYPT_AEAD_BACKEND_OPENSSL, ckeys->send,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK) ||
        (crypt_aead_key_init(&rx, CRYPT_AEAD_BACKEND_OPENSSL, skeys->recv,
                             KEYEX_NOISE_KEY_LEN) != CRYPT_AEAD_OK)) {
        abort();
    }
    hdr->length   = htole16((uint16_t)(body_len + CRYPT_AEAD_TAG_LEN));
    hdr->type     = CRYPT_CM_FRAME_CONNECT;
    hdr->reserved = 0;
    keyex_noise_nonce(0, nonce);
    if (crypt_aead_seal(&tx, nonce, hdr, sizeof(*hdr), body, body_len,
                        frame + sizeof(*hdr),
                        frame + sizeof(*hdr) + body_len) != CRYPT_AEAD_OK) {
        abort();
    }
    frame_len = sizeof(*hdr) + body_len + CRYPT_AEAD_TAG_LEN;
    fuzz_xor(frame, frame_len, in, &changed);

    /* the server's side */
    len = crypt_cm_frame_body_len(hdr, FUZZ_MAX_BODY);
    if (len < 0) {
        if (!changed) {
            abort(); /* an honest header refused */
        }
        goto out;
    }
    if (sizeof(*hdr) + (size_t)len + CRYPT_AEAD_TAG_LEN > sizeof(frame)) {
        abort(); /* the check let a frame past the buffer it is read into */
    }
    if ((size_t)len != body_len) {
        goto out; /* a changed length: the server would read another frame */
    }
    opened = (crypt_aead_open(&rx, nonce, hdr, sizeof(*hdr), frame + sizeof(*hdr),
                              body_len, frame + sizeof(*hdr),
                              frame + sizeof(*hdr) + body_len) == CRYPT_AEAD_OK);
    if (opened != !changed) {
        abort(); /* a changed frame opened, or the honest one did not */
    }
    if (opened && CRYPTO_memcmp(frame + sizeof(*hdr), body, body_len)) {
        abort();
    }
    if (opened && crypt_cm_addresses_parse(frame + sizeof(*hdr), body_len,
                                           FUZZ_MAX_PRIV, &peer)) {
        if ((peer.dev_addr_len == 0) || (peer.priv_len > FUZZ_MAX_PRIV) ||
            (1 + peer.dev_addr_len + KEYEX_PUBLIC_KEY_LEN + peer.priv_len !=
             body_len) ||
            (peer.data_key != peer.dev_addr + peer.dev_addr_len) ||
            (peer.priv != peer.data_key + KEYEX_PUBLIC_KEY_LEN)) {
            abort(); /* the split left the body */
        }
    }
    /* the same body as a DISCONNECT: whole marks, never past the body */
    if (opened && (crypt_cm_disconnect_marks(body_len) >= 0) &&
        ((size_t)crypt_cm_disconnect_marks(body_len) *
         sizeof(crypt_cm_flow_mark_t) != body_len)) {
        abort();
    }
out:
    crypt_aead_key_cleanup(&tx);
    crypt_aead_key_cleanup(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    keyex_noise_t *cli, *srv;
    keyex_noise_cm_init_msg_t init, orig;
    keyex_noise_cm_msg_t resp;
    keyex_noise_transport_t ckeys, skeys;
    fuzz_input_t in = {data, size};
    int changed = 0, init_ok, resp_ok;
    uint8_t mode;

    if (size < 1) {
        return 0;
    }
    mode = data[0];
    in.data++;
    in.size--;
    cli = keyex_secure_alloc(sizeof(*cli));
    srv = keyex_secure_alloc(sizeof(*srv));
    if ((cli == NULL) || (srv == NULL) ||
        (keyex_noise_cm_start(cli, fuzz_job_secret) != KEYEX_OK) ||
        (keyex_noise_cm_start(srv, fuzz_job_secret) != KEYEX_OK)) {
        abort();
    }

    if (!(mode & 1)) {
        memset(&init, 0, sizeof(init));
        memcpy(&init, in.data, (in.size < sizeof(init)) ? in.size : sizeof(init));
        if (keyex_noise_cm_init_consume(srv, &init) == KEYEX_OK) {
            abort(); /* a stranger's bytes passed the first message's tag */
        }
        goto out;
    }

    if (keyex_noise_cm_init_create(cli, &init) != KEYEX_OK) {
        abort();
    }
    orig = init;
    fuzz_xor((uint8_t*)&init, sizeof(init), &in, &changed);
    init_ok = (keyex_noise_cm_init_consume(srv, &init) == KEYEX_OK);
    /* (mac2 is the listener's, with its cookies: fuzz_cookie_reply) */
    if (init_ok != !CRYPTO_memcmp(&init.msg, &orig.msg, sizeof(init.msg))) {
        abort();
    }
    if (!init_ok) {
        goto out;
    }
    if (keyex_noise_cm_response_create(srv, &resp, &skeys) != KEYEX_OK) {
        abort();
    }
    changed = 0;
    fuzz_xor((uint8_t*)&resp, sizeof(resp), &in, &changed);
    resp_ok = (keyex_noise_cm_response_consume(cli, &resp, &ckeys) == KEYEX_OK);
    if (resp_ok != !changed) {
        abort();
    }
    if (!resp_ok) {
        goto out;
    }
    if (CRYPTO_memcmp(ckeys.send, skeys.recv, sizeof(ckeys.send)) ||
        CRYPTO_memcmp(ckeys.recv, skeys.send, sizeof(ckeys.recv))) {
        abort();
    }
    if (mode & 2) {
        fuzz_frame(&ckeys, &skeys, &in);
    }

out:
    keyex_noise_cleanup(cli);
    keyex_noise_cleanup(srv);
    keyex_secure_free(cli, sizeof(*cli));
    keyex_secure_free(srv, sizeof(*srv));
    return 0;
}
