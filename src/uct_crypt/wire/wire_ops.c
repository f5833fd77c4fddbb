/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wire as crypt's record layer sees it (base/inner_ops.h): keys
 * from each connection's Noise exporter, the proven peer of the record
 * being delivered, bulk segments as frames behind their records.
 */
#include "uct_crypt/wire/wire_int.h"

#include <string.h>

/* A flow's keys come from the connection that carries it (its exporter
 * secret), never from the static keys alone */
static keyex_status_t
uct_crypt_wire_flow_secret(const keyex_keypair_t *own,
                           const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                           const uint8_t *conn_secret,
                           uint8_t secret[KEYEX_SECRET_LEN])
{
    if (conn_secret == NULL) {
        return KEYEX_ERR_PARAM;
    }
    memcpy(secret, conn_secret, KEYEX_SECRET_LEN);
    return KEYEX_OK;
}

/* The connection proved our static key: the HELLO names none */
static const uint8_t *uct_crypt_wire_hello_key(const keyex_keypair_t *own)
{
    return NULL;
}

/* The host of the record being delivered: its connection's address */
static uint64_t uct_crypt_wire_rx_source(uct_iface_h tl_iface)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    return (iface->rx_conn != NULL) ?
           uct_crypt_admit_source(&iface->rx_conn->peer_addr) : 0;
}

static int uct_crypt_wire_ep_ready(uct_ep_h ep, const uint8_t **secret_p)
{
    *secret_p = uct_crypt_wire_ep_secret(ep);
    return *secret_p != NULL;
}

const uct_crypt_inner_ops_t uct_crypt_wire_inner_ops = {
    .flags              = UCT_CRYPT_INNER_PROVES_PEERS |
                          UCT_CRYPT_INNER_INLINE_SEGMENTS |
                          UCT_CRYPT_INNER_ZCOPY_FLUSH,
    .segment_max        = UCT_CRYPT_WIRE_WIRE_SEGMENT_MAX,
    .segment_frame_max  = UCT_CRYPT_WIRE_MAX_BCOPY,
    .ep_set_peer        = uct_crypt_wire_ep_set_peer,
    .flow_secret        = uct_crypt_wire_flow_secret,
    .hello_key          = uct_crypt_wire_hello_key,
    .ep_ready           = uct_crypt_wire_ep_ready,
    .ep_failed_locally  = uct_crypt_wire_ep_failed_locally,
    .ep_segment_room    = uct_crypt_wire_ep_segment_room,
    .ep_segment_reserve = uct_crypt_wire_ep_segment_reserve,
    .ep_segment_commit  = uct_crypt_wire_ep_segment_commit,
    .rx_secret          = uct_crypt_wire_rx_secret,
    .rx_peer            = uct_crypt_wire_rx_peer,
    .rx_peer_name       = uct_crypt_wire_rx_peer_name,
    .rx_conn            = uct_crypt_wire_rx_conn,
    .rx_source          = uct_crypt_wire_rx_source,
    .rx_reject          = uct_crypt_wire_rx_reject,
    .rx_reject_conn     = uct_crypt_wire_rx_reject_conn,
    .rx_expect_segment  = uct_crypt_wire_rx_expect_segment
};
