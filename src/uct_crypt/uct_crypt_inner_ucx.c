/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The inner ops of UCX's transports (rc, ud, dc): each record is one AM
 * that names its sender's static key in its HELLO; nothing is bound to a
 * connection, so nothing here has a connection to answer about.
 */
#include "uct_crypt/base/inner_ops.h"

static ucs_status_t
uct_crypt_ucx_ep_set_peer(uct_ep_h ep, const uint8_t peer[KEYEX_PUBLIC_KEY_LEN])
{
    return UCS_OK; /* the record keys prove it: X25519 with that key */
}

static const uint8_t *uct_crypt_ucx_no_secret(uct_ep_h ep)
{
    return NULL;
}

static const uint8_t *uct_crypt_ucx_rx_none(uct_iface_h iface)
{
    return NULL;
}

static const char *uct_crypt_ucx_rx_peer_name(uct_iface_h iface)
{
    return "";
}

static uint64_t uct_crypt_ucx_rx_conn(uct_iface_h iface)
{
    return 0;
}

static int uct_crypt_ucx_ep_failed_locally(uct_ep_h ep)
{
    return 0; /* (UCX's transports fail for the network's reasons) */
}

static void uct_crypt_ucx_rx_reject(uct_iface_h iface, const char *reason)
{
    /* a datagram that failed is dropped by the record layer, which counts it */
}

const uct_crypt_inner_ops_t uct_crypt_ucx_inner_ops = {
    .flags              = 0,
    .ep_set_peer        = uct_crypt_ucx_ep_set_peer,
    .ep_secret          = uct_crypt_ucx_no_secret,
    .ep_failed_locally  = uct_crypt_ucx_ep_failed_locally,
    .rx_secret          = uct_crypt_ucx_rx_none,
    .rx_peer            = uct_crypt_ucx_rx_none,
    .rx_peer_name       = uct_crypt_ucx_rx_peer_name,
    .rx_conn            = uct_crypt_ucx_rx_conn,
    .rx_reject          = uct_crypt_ucx_rx_reject
    /* (no segment ops: without INLINE_SEGMENTS the bulk engine puts) */
};
