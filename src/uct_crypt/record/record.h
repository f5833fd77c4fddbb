/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The record layer's door (README.md): flows and their keys (keys.c),
 * records sealed and received (record.c). The wrapper's structs embed the
 * flows (uct_crypt.h includes this); everything here takes the wrapper's
 * iface and ep by pointer.
 */
#ifndef UCT_CRYPT_RECORD_H
#define UCT_CRYPT_RECORD_H

#include "uct_crypt/api/uct_crypt_stats.h"
#include "uct_crypt/base/format.h"
#include "uct_crypt/base/config.h"
#include "aead/aead.h"
#include "keyex/keyex.h"

#include <uct/api/uct.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>

typedef struct uct_crypt_iface uct_crypt_iface_t;
typedef struct uct_crypt_ep uct_crypt_ep_t;

/* Sending half of a flow: one per crypt ep. */
typedef struct uct_crypt_tx_flow {
    uint64_t             flow_id;
    uint64_t             next_sequence;
    uint64_t             records_this_key;
    uint64_t             bytes_this_key;
    int                  hello_done;      /* the peer has our HELLO */
    keyex_traffic_keys_t *keys;           /* secure memory */
    crypt_aead_key_t     aead;
} uct_crypt_tx_flow_t;

/* What an iface knows of one peer key: its eps to it, the flows it
 * receives from it (record/keys.c) */
typedef struct uct_crypt_peer {
    uint64_t             id;              /* the key's first 8 bytes */
    unsigned             eps;
    unsigned             num_flows;
    ucs_list_link_t      flows;           /* uct_crypt_rx_flow_t */
} uct_crypt_peer_t;

/* Receiving half of a flow, found by flow id. */
typedef struct uct_crypt_rx_flow {
    uint64_t             flow_id;
    uint64_t             next_sequence;
    int                  failed;
    uint8_t              peer_public[KEYEX_PUBLIC_KEY_LEN];
    uct_crypt_peer_t     *peer;
    ucs_list_link_t      peer_list;       /* in peer->flows */
    ucs_list_link_t      asleep_list;     /* in iface->asleep, while asleep */
    /* NULL while the flow sleeps (no ep of ours to its peer is left); it
     * wakes at `generation` when a record comes */
    keyex_traffic_keys_t *keys;
    crypt_aead_key_t     aead;
    uint32_t             generation;      /* the record key's, asleep */
    uint32_t             bulk_generation; /* the bulk key's, always */
    /* bulk puts received on this flow (derived on first use) */
    keyex_traffic_keys_t *bulk_keys;
    crypt_aead_key_t     bulk_aead;       /* the progress thread's */
    crypt_aead_key_t     *bulk_aead_workers; /* one per pool thread, made by
                                               it on first use */
    unsigned             bulk_workers;
    uint64_t             bulk_next_put;
    uint32_t             bulk_next_segment;
    uint64_t             bulk_next_get;   /* GET_REQs served on this flow */
    struct uct_crypt_iface *iface;        /* that receives it */
    /* crypt's own wire: a segment announced, its SEGMENT frame next */
    crypt_bulk_segment_t wire_announce;
    /* crypt's own wire: the connection its HELLO came on, which carries
     * all its records; the flow ends with it (0: a UCX inner) */
    uint64_t             wire_conn;
    uint64_t             source;          /* its host (0: none told) */
} uct_crypt_rx_flow_t;

KHASH_MAP_INIT_INT64(uct_crypt_rx_flows, uct_crypt_rx_flow_t*);
/* ids of flows their sender ended (FLOW_END): replays of them refused */
KHASH_SET_INIT_INT64(uct_crypt_flow_ids);
KHASH_MAP_INIT_INT64(uct_crypt_peers, uct_crypt_peer_t*);
/* flows received from each host (uct_crypt_admit_source), where the inner
 * tells it */
KHASH_MAP_INIT_INT64(uct_crypt_sources, unsigned);

/* The most flow ids an iface remembers as ended: 16 bytes each, 16 MiB in
 * all. Past it a FLOW_END is not taken: the flow stays, and counts
 * towards the bound of live flows, until the iface closes. */
#define UCT_CRYPT_ENDED_FLOWS_MAX (1u << 20)

/* The one AM id of the inner that carries records: UCP's own id is sealed
 * inside each record (base/format.h); crypt's control records are told
 * apart by the authenticated header flag */
#define UCT_CRYPT_RECORD_AM_ID 0

/* keys (record/keys.c) */
ucs_status_t uct_crypt_bulk_keys(uct_crypt_iface_t *iface,
                                 const uint8_t sender[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t receiver[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t peer[KEYEX_PUBLIC_KEY_LEN],
                                 const uint8_t *conn_secret, uint64_t flow_id,
                                 keyex_traffic_keys_t **keys_p);
ucs_status_t uct_crypt_tx_flow_init(uct_crypt_iface_t *iface,
                                    uct_crypt_tx_flow_t *tx,
                                    const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN]);
void uct_crypt_tx_flow_cleanup(uct_crypt_tx_flow_t *tx);
/* May the sending half seal a record now? UCS_OK: it has its keys, or
 * made them (once its inner ep is ready: inner_ops->ep_ready);
 * UCS_ERR_NO_RESOURCE: the own wire's connection is not final yet (retry,
 * as tcp's sends before it is connected); another error: the keys cannot
 * be made, and the ep is failed with that reason. */
ucs_status_t uct_crypt_tx_flow_ready(uct_crypt_iface_t *iface,
                                     uct_crypt_tx_flow_t *tx);
void uct_crypt_tx_flow_rekey_check(uct_crypt_iface_t *iface,
                                   uct_crypt_tx_flow_t *tx);
uct_crypt_rx_flow_t *
uct_crypt_rx_flow_create(uct_crypt_iface_t *iface, uint64_t flow_id,
                         const uint8_t sender_public[KEYEX_PUBLIC_KEY_LEN]);
void uct_crypt_rx_flow_free(uct_crypt_rx_flow_t *flow);
void uct_crypt_rx_flows_init(uct_crypt_iface_t *iface,
                             const uct_crypt_rx_limits_t *limits);
ucs_status_t uct_crypt_rx_flow_add(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow);
void uct_crypt_rx_flow_end(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow);
void uct_crypt_rx_flow_refuse(uct_crypt_iface_t *iface,
                              const uct_crypt_rx_flow_t *flow,
                              ucs_status_t status);
ucs_status_t uct_crypt_rx_flow_wake(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow);
/* keys wiped, state kept (a no-op on the own wire and when asleep) */
void uct_crypt_rx_flow_sleep(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow);
/* our eps to a peer key, counted: when the last goes, its flows sleep */
ucs_status_t uct_crypt_peer_ep_add(uct_crypt_iface_t *iface,
                                   const uint8_t *peer_public);
void uct_crypt_peer_ep_remove(uct_crypt_iface_t *iface,
                              const uint8_t *peer_public);
int uct_crypt_rx_flow_was_ended(uct_crypt_iface_t *iface, uint64_t flow_id);
void uct_crypt_rx_flows_conn_ended(uct_crypt_iface_t *iface, uint64_t conn_id);
void uct_crypt_rx_flows_cleanup(uct_crypt_iface_t *iface);
/* The record keys of `flow` at its generation (keys.c; a flow that wakes
 * may have had its keys updated before it slept) */
ucs_status_t uct_crypt_rx_flow_key(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow);
/* The end of a sending flow over a UCX inner (flows.c): its FLOW_END sent
 * (0: none is, as on the wire or for an ep that failed or never sent),
 * then its inner ep closed once what was sent on it left */
int uct_crypt_ep_send_flow_end(uct_crypt_ep_t *ep, uct_crypt_iface_t *iface);
void uct_crypt_ep_close_inner(uct_crypt_iface_t *iface, uct_ep_h inner);
/* inner eps kept after their crypt ep went, until its FLOW_END left
 * (flows.c): destroyed when the iface closes */
void uct_crypt_iface_closing_cleanup(uct_crypt_iface_t *iface);
void uct_crypt_iface_closing_free(uct_crypt_iface_t *iface);
int uct_crypt_iface_closing_failed(uct_crypt_iface_t *iface, uct_ep_h inner_ep);
/* Open under the flow's keys, or under the next generation's when the
 * sender announces a key update; the update is kept only if it opens. */
struct uct_crypt_record_in;
crypt_aead_status_t uct_crypt_rx_flow_open(uct_crypt_iface_t *iface,
                                           uct_crypt_rx_flow_t *flow,
                                           struct uct_crypt_record_in *rec);

/* record layer (record/record.c) */
/* The ep fails for a local failure while `what`: said at error level with
 * the reason (crypt_local_failure_take), reported to UCP from progress */
void uct_crypt_ep_fail_local(uct_crypt_ep_t *ep, const char *what);
ucs_status_t uct_crypt_ep_of_tx_flow(uct_crypt_iface_t *iface,
                                     const uct_crypt_rx_flow_t *flow,
                                     uint64_t flow_id, uct_crypt_ep_t **ep_p);
void uct_crypt_ep_flow_refused(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow,
                               const crypt_flow_refused_t *msg);
/* A violation inside an authenticated record: fail the flow and the eps
 * to its peer (record/record.c says when that is the rule) */
ucs_status_t uct_crypt_record_reject(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow,
                                     uct_crypt_fail_reason_t reason);
/* A record that is not authenticated: dropped and counted, nothing fails
 * (on crypt's own wire: its connection closes) */
ucs_status_t uct_crypt_record_drop(uct_crypt_iface_t *iface,
                                   const uint8_t *flow_peer, uint64_t flow_id,
                                   uct_crypt_fail_reason_t reason);
/* crypt's own wire: an authenticated peer's connection ended badly */
/* crypt's own wire: one of its connections ended (wire/wire.h) */
void uct_crypt_record_conn_ended(void *arg, uint64_t conn_id);
void uct_crypt_record_peer_failed(void *arg,
                                const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN],
                                const char *peer_name, const char *reason);
size_t uct_crypt_record_header_len(const uct_crypt_tx_flow_t *tx);
/* Seal `payload_len` bytes at record + header_len in place, write the header
 * in front and the tag behind, under the flow's next sequence number;
 * returns the record length or a negative status (never a record that is
 * not sealed: uct_crypt_tx_flow_ready says when one can be). */
ssize_t uct_crypt_record_seal(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                              uint8_t am_id, uint16_t flags, uint8_t *record,
                              size_t payload_len);
/* The inner transport took the record: consume its sequence number, count
 * it, and update the key when its usage limit is near. */
void uct_crypt_record_commit(uct_crypt_iface_t *iface, uct_crypt_tx_flow_t *tx,
                             size_t payload_len);
ucs_status_t uct_crypt_record_am_handler(void *arg, void *data, size_t length,
                                         unsigned flags);

#endif
