/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TESTING ONLY: the tamper hooks (README.md), compiled into test builds
 * (configure --enable-fault-injection): an iface tampers with its own
 * outgoing records and bulk segments, as an attacker on the network
 * would, so that tests check its peer detects each kind. A release build
 * has none of it (test/integration/build_check.sh checks that).
 */
#ifndef UCT_CRYPT_FAULT_H
#define UCT_CRYPT_FAULT_H

#include "uct_crypt/base/format.h"
#include "aead/aead.h"
#include "keyex/keyex.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct uct_crypt_iface uct_crypt_iface_t;
typedef struct uct_crypt_ep uct_crypt_ep_t;
struct uct_crypt_iface_config;

#if UCX_CRYPT_FAULT_INJECTION
/* Fault injection, for the tamper tests (sender side only; test builds). */
typedef enum {
    UCT_CRYPT_FAULT_NONE = 0,
    UCT_CRYPT_FAULT_FLIP_HEADER,
    UCT_CRYPT_FAULT_FLIP_CIPHERTEXT,
    UCT_CRYPT_FAULT_FLIP_TAG,
    UCT_CRYPT_FAULT_TRUNCATE,
    UCT_CRYPT_FAULT_REPLAY,
    UCT_CRYPT_FAULT_REORDER,
    UCT_CRYPT_FAULT_DROP,
    UCT_CRYPT_FAULT_INJECT,
    UCT_CRYPT_FAULT_FORGE_HELLO,  /* a stranger's HELLO naming our own key */
    UCT_CRYPT_FAULT_REPLAY_ENDED, /* a flow's HELLO again after its FLOW_END */
    UCT_CRYPT_FAULT_REPLAY_HELLOS, /* every HELLO twice, at once */
    /* on one bulk segment (UCX_CRYPT_FAULT_AFTER counts segments) */
    UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT, /* a bit of the ciphertext put */
    UCT_CRYPT_FAULT_BULK_FLIP_TAG,        /* a bit of the announced tag */
    UCT_CRYPT_FAULT_BULK_DROP,            /* never announce the segment */
    UCT_CRYPT_FAULT_BULK_REORDER,         /* announce it under the next index */
    UCT_CRYPT_FAULT_BULK_TRUNCATE,        /* announce a last segment as not last */
    UCT_CRYPT_FAULT_BULK_MOVE,            /* announce it 64 bytes further on */
    UCT_CRYPT_FAULT_BULK_SPLICE,          /* announce it as part of another put */
    /* crypt's own wire: the segment's frame */
    UCT_CRYPT_FAULT_BULK_FRAME_ALONE,     /* sent without its announcement */
    UCT_CRYPT_FAULT_BULK_FRAME_SHORT,     /* a byte shorter than announced */
    UCT_CRYPT_FAULT_LAST
} uct_crypt_fault_t;

typedef struct uct_crypt_fault_state {
    uct_crypt_fault_t kind;
    unsigned long     after;              /* records/segments sent intact */
    unsigned long     records_sent;
    unsigned long     bulk_segments_sent;
    uint8_t           *held_record;       /* replay/reorder */
    size_t            held_length;
    uint8_t           *hello_copy;        /* replay_ended */
    size_t            hello_length;
} uct_crypt_fault_state_t;
#endif

/* the hooks (fault.c); without fault injection they are no-ops the
 * compiler removes */
#if UCX_CRYPT_FAULT_INJECTION
void uct_crypt_fault_init(uct_crypt_iface_t *iface,
                          const struct uct_crypt_iface_config *config);
void uct_crypt_fault_cleanup(uct_crypt_iface_t *iface);
/* an iface without the hook (the auxiliary role) */
void uct_crypt_fault_init_none(uct_crypt_iface_t *iface);
/* After a record was sealed: apply the fault, if configured. Returns 1 if
 * the caller must not send `record` (it is held or dropped). */
int uct_crypt_fault_apply(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep,
                          uint8_t *record, size_t *length);
/* Send `length` bytes of an already sealed record as they are: the
 * inner's am_bcopy result */
ssize_t uct_crypt_fault_send_raw(uct_crypt_ep_t *ep, const uint8_t *data,
                                 size_t length);
/* The ep's FLOW_END left: replay_ended sends its HELLO behind it */
void uct_crypt_fault_flow_ended(uct_crypt_iface_t *iface, uct_crypt_ep_t *ep);
/* Is the bulk segment leaving now the one to tamper with? */
int uct_crypt_bulk_fault_due(uct_crypt_iface_t *iface);
void uct_crypt_bulk_fault_seal(uct_crypt_iface_t *iface, uint8_t *bounce,
                               size_t length);
void uct_crypt_bulk_fault_frame_tag(uct_crypt_iface_t *iface,
                                    uint8_t tag[CRYPT_AEAD_TAG_LEN]);
/* crypt's own wire: 1 if the announcement is to be left out; may shorten
 * the frame */
int uct_crypt_bulk_fault_frame(uct_crypt_iface_t *iface, size_t *frame_len);
/* Returns 1 if the announcement must not be sent (dropped). */
int uct_crypt_bulk_fault_announce(uct_crypt_iface_t *iface,
                                  crypt_bulk_segment_t *announce);
keyex_status_t uct_crypt_fault_keypair(uct_crypt_iface_t *iface,
                                       const struct uct_crypt_iface_config *config);
#define uct_crypt_fault_enabled(_iface) \
    ((_iface)->fault.kind != UCT_CRYPT_FAULT_NONE)
#else
#define uct_crypt_fault_enabled(_iface)                   0
/* a fresh key pair for the iface */
#define uct_crypt_fault_keypair(_iface, _config) \
    keyex_keypair_generate(&(_iface)->keypair)
#define uct_crypt_fault_init(_iface, _config)             do {} while (0)
#define uct_crypt_fault_init_none(_iface)                 do {} while (0)
#define uct_crypt_fault_cleanup(_iface)                   do {} while (0)
#define uct_crypt_fault_apply(_iface, _ep, _rec, _l)      0
#define uct_crypt_fault_flow_ended(_iface, _ep)           do {} while (0)
#define uct_crypt_bulk_fault_due(_iface)                  0
#define uct_crypt_bulk_fault_seal(_iface, _bounce, _l)    do {} while (0)
#define uct_crypt_bulk_fault_frame_tag(_iface, _tag)      do {} while (0)
#define uct_crypt_bulk_fault_frame(_iface, _len)          0
#define uct_crypt_bulk_fault_announce(_iface, _announce)  0
#endif

#endif
