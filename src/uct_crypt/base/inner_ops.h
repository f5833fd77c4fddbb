/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the record layer, the keys and the bulk engine ask of the inner
 * transport they wrap, beyond UCT: one table per iface, chosen once at
 * iface init (the shape of UCX's uct_iface_internal_ops_t). Two
 * implementations:
 *
 * - UCX's transports (rc, ud, dc: uct_crypt_inner.c). A record is one
 *   AM the inner carries as it is; a flow's keys come from the two static
 *   keys and the job secret, so the first record needs no round trip; bulk
 *   segments are the inner's puts.
 * - crypt's own wire (wire/wire_ops.c). Its connections are Noise
 *   handshakes that prove the peer's static key and give each connection
 *   a secret of its own (forward secrecy); bulk segments are frames right
 *   behind the record that announces them.
 *
 * Only UCT and keyex types here: the wire implements the table without
 * seeing the record layer.
 */
#ifndef UCT_CRYPT_INNER_OPS_H
#define UCT_CRYPT_INNER_OPS_H

#include "keyex/keyex.h"

#include <uct/api/uct.h>
#include <stddef.h>
#include <stdint.h>

enum {
    /* Each connection proves its peer's static key (ep_set_peer names it,
     * rx_peer tells it) and its flows end with it (no FLOW_END record): a
     * lane's address carries the key its handshake must prove. */
    UCT_CRYPT_INNER_PROVES_PEERS    = UCS_BIT(0),
    /* A bulk segment is the frame right behind the record that announces
     * it (ep_segment_*, rx_expect_segment), not an inner put. */
    UCT_CRYPT_INNER_INLINE_SEGMENTS = UCS_BIT(1),
    /* An am_zcopy completes once the inner took its record (the inner is
     * asked for a local flush): what a stream needs, where UCP completes
     * a rendezvous sent as AM fragments on the last one. Without it the
     * record is out of the user's buffer when am_zcopy returns. */
    UCT_CRYPT_INNER_ZCOPY_FLUSH     = UCS_BIT(2)
};

/* A bulk segment received (rx_expect_segment): its ciphertext is in its
 * destination, its tag here */
typedef void (*uct_crypt_inner_segment_cb_t)(void *arg, const uint8_t *tag);

typedef struct uct_crypt_inner_ops {
    unsigned     flags;      /* UCT_CRYPT_INNER_* */
    /* INLINE_SEGMENTS: the largest segment the sender seals into one
     * frame, and the largest (ciphertext and tag) a receiver takes */
    size_t       segment_max;
    size_t       segment_frame_max;

    /* The secret a flow's keys come from (keys.c, with the flow's id):
     * the secret of the connection that carries the flow (`conn_secret`:
     * ep_ready's or rx_secret's), never the static keys alone, where the
     * inner has connections; else X25519 of `own` and `peer`, salted with
     * the job secret (conn_secret NULL). */
    keyex_status_t (*flow_secret)(const keyex_keypair_t *own,
                                  const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                                  const uint8_t *conn_secret,
                                  uint8_t secret[KEYEX_SECRET_LEN]);
    /* The static key a flow's HELLO names: `own`'s, or NULL where the
     * connection proved it (the HELLO names none) */
    const uint8_t *(*hello_key)(const keyex_keypair_t *own);

    /* The static key the inner ep must prove before it sends anything
     * (given once the peer's address names it). */
    ucs_status_t (*ep_set_peer)(uct_ep_h ep,
                                const uint8_t peer[KEYEX_PUBLIC_KEY_LEN]);
    /* May the ep's flow be keyed? 1 with *secret_p its connection's
     * secret once final (NULL where the inner has no connections); 0
     * while it is not (the ep takes no record yet: its sends wait on
     * pending). */
    int          (*ep_ready)(uct_ep_h ep, const uint8_t **secret_p);
    /* Did the inner ep fail for a reason of this process's own (memory,
     * a cipher context, randomness: its handshake), not the network's or
     * the peer's? Asked from crypt's error handler (0 where it cannot) */
    int          (*ep_failed_locally)(uct_ep_h ep);
    /* INLINE_SEGMENTS: room for an announcing record of at most
     * `record_max` bytes and a segment frame of `length` behind it; the
     * frame reserved, written in place (sealed into), then committed. */
    int          (*ep_segment_room)(uct_ep_h ep, size_t record_max,
                                    size_t length);
    void         *(*ep_segment_reserve)(uct_ep_h ep, size_t length);
    void         (*ep_segment_commit)(uct_ep_h ep, size_t length);

    /* Inside crypt's AM handler, about the record being delivered: the
     * secret of the connection it came on (NULL: none), the static key
     * that connection proved and its peer's address (NULL and "" where
     * the inner proves none), the connection's id (0: none; ended ones are
     * reported to uct_crypt_record_conn_ended), and a refusal that closes
     * that connection (nothing where records are datagrams). */
    const uint8_t *(*rx_secret)(uct_iface_h iface);
    const uint8_t *(*rx_peer)(uct_iface_h iface);
    const char   *(*rx_peer_name)(uct_iface_h iface);
    uint64_t     (*rx_conn)(uct_iface_h iface);
    /* ... and the host it came from: its IP address, an IPv6 /64 as one
     * (uct_crypt_admit_source); 0 where the inner tells none */
    uint64_t     (*rx_source)(uct_iface_h iface);
    void         (*rx_reject)(uct_iface_h iface, const char *reason);
    /* The same refusal of a connection by its id, outside its delivery (a
     * bulk segment that failed on the pool): closed from the inner's next
     * progress (NULL where records are datagrams) */
    void         (*rx_reject_conn)(uct_iface_h iface, uint64_t conn,
                                   const char *reason);
    /* INLINE_SEGMENTS, on a record that announced a segment: the next
     * frame of its connection is that segment, `length` bytes of
     * ciphertext and a tag; the ciphertext is received straight into
     * `dest` (no copy through a receive buffer), then `cb` has the tag;
     * anything else closes the connection. */
    void         (*rx_expect_segment)(uct_iface_h iface, void *dest,
                                      size_t length,
                                      uct_crypt_inner_segment_cb_t cb,
                                      void *arg);
} uct_crypt_inner_ops_t;

/* UCX's transports (uct_crypt_inner.c) */
extern const uct_crypt_inner_ops_t uct_crypt_ucx_inner_ops;

#endif
