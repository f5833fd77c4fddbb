/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine's own state, shared by its files and by no one else:
 *
 *   bulk/bulk.c     the engine of an iface: options, bounce segments,
 *                        the pool, sleeping progress, progress, flush,
 *                        cancel
 *   bulk/bulk_tx.c  an ep's puts: seal, put, announce, fence
 *   bulk/bulk_rx.c  the target: open announced segments in place,
 *                        acknowledge, take ACKs
 *   bulk/bulk_get.c      get = a request that the peer seal and put
 *   record/keys.c     bulk keys and their updates
 *   bulk/bulk_input.c  control records and the profile, checked
 *                        before anything acts on them (no UCX: fuzzed)
 *
 * The wire formats are in base/format.h.
 */
#ifndef UCT_CRYPT_BULK_H
#define UCT_CRYPT_BULK_H

#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk_input.h"
#include "uct_crypt/bulk/pool.h"
#include "uct_crypt/base/compat.h"

#include <endian.h>
#include <string.h>

#define UCT_CRYPT_BULK_DEFAULT_SEGMENT  (256 * 1024)
#define UCT_CRYPT_BULK_RAMP_FIRST       (64 * 1024) /* the first segment's
                                                       most (bulk/bulk_tx.c) */
#define UCT_CRYPT_BULK_DEFAULT_THREADS  2
/* puts in flight above which a new one is sealed by the progress thread
 * (CryptMPI's k = 1 rule; UCX_CRYPT_BULK_MAX_OUTSTANDING in test builds) */
#define UCT_CRYPT_BULK_MAX_OUTSTANDING  8
#define UCT_CRYPT_BULK_REGISTRY_FMT     "/dev/shm/ucx-crypt-threads.%u"

typedef enum {
    UCT_CRYPT_SEG_SEALING,   /* a pool job owns it */
    UCT_CRYPT_SEG_SEALED,    /* ready to put */
    UCT_CRYPT_SEG_PUT,       /* the inner has the ciphertext, SEGMENT not sent */
    UCT_CRYPT_SEG_ANNOUNCED  /* SEGMENT sent; waiting for the inner put */
} uct_crypt_seg_state_t;

typedef struct uct_crypt_bulk_op uct_crypt_bulk_op_t;

typedef struct uct_crypt_bulk_slot {
    ucs_list_link_t       list;
    uint8_t               *buffer;
} uct_crypt_bulk_slot_t;

typedef struct uct_crypt_bulk_segment {
    crypt_pool_job_t      job;
    uct_crypt_bulk_op_t   *op;
    ucs_list_link_t       list;        /* the ep's segments, in send order */
    uct_crypt_seg_state_t state;
    uint32_t              index;
    int                   last;
    size_t                offset;
    size_t                length;
    uct_crypt_bulk_slot_t *slot;       /* NULL in naive mode */
    uint8_t               *bounce;
    uct_mem_h             bounce_memh; /* inner md's */
    int                   put_done;
    int                   tamper;      /* tests: the fault hook's segment */
    uct_completion_t      put_comp;
    crypt_aead_status_t   seal_status;
    const char            *seal_failure; /* why, from the sealing thread */
    uint8_t               tag[CRYPT_AEAD_TAG_LEN];
} uct_crypt_bulk_segment_t;

struct uct_crypt_bulk_op {
    ucs_list_link_t       list;        /* the ep's puts, in order */
    uct_crypt_bulk_tx_t   *tx;
    const uint8_t         *src;
    size_t                length;
    uint64_t              remote_addr;
    uct_rkey_t            inner_rkey;
    uint64_t              token;       /* the target region's (remote key) */
    uct_completion_t      *comp;
    uint64_t              put_id;
    uint16_t              generation;  /* bulk key generation it is sealed under */
    uint32_t              num_segments;
    uint32_t              next_to_seal;
    uint32_t              announced;
    int                   inline_seal;
};

typedef struct {
    ucs_list_link_t       list;
    uct_completion_t      *comp;
    unsigned              flags;
} uct_crypt_bulk_flush_t;

/* a get this ep asked its peer for, until the answer is opened in full */
typedef struct {
    ucs_list_link_t       list;
    uct_crypt_bulk_tx_t   *tx;
    uint64_t              get_id;
    uct_completion_t      *comp;
    uintptr_t             address;     /* where the peer will put it */
    size_t                length;
    size_t                opened;      /* bytes of the answer opened */
    int                   landed;      /* its last segment opened */
} uct_crypt_bulk_get_t;

/* a get served for a peer: the answering put's completion */
typedef struct {
    uct_completion_t      comp;
    uct_crypt_iface_t     *iface;
    uct_rkey_bundle_t     rkey;         /* the initiator's, for its buffer */
} uct_crypt_bulk_serve_t;

struct uct_crypt_bulk_tx {
    uct_crypt_ep_t        *ep;
    uct_crypt_bulk_t      *bulk;
    ucs_list_link_t       ops;
    /* where sealing goes on in `ops`: the ops before it are all sealed
     * (they are sealed in order), and waiting for the target's ACK may be
     * thousands of them (NULL: from the head) */
    uct_crypt_bulk_op_t   *seal_op;
    ucs_list_link_t       gets;        /* uct_crypt_bulk_get_t, in order */
    uint64_t              next_get_id;
    ucs_list_link_t       segments;
    ucs_list_link_t       flushes;
    ucs_list_link_t       active;      /* in bulk->active while it has work */
    int                   is_active;
    uint64_t              next_put_id;
    uint64_t              fence_put_id;  /* the ep's fence: puts before it */
    uint64_t              fence_get_id;  /* and gets before it */
    uint64_t              segments_this_key;
    uint64_t              bytes_this_key;
    keyex_traffic_keys_t  *keys;       /* secure memory */
    crypt_aead_backend_t  backend;
    /* one expanded key per pool worker (0 = the progress thread): an
     * OpenSSL context must not be shared between threads (aead.h) */
    crypt_aead_key_t      aead[CRYPT_POOL_MAX_THREADS + 1];
};

/* A segment the target opens in place, on the pool (bulk/bulk_rx.c):
 * acted on in arrival order, once opened */
typedef struct uct_crypt_bulk_rx_seg {
    crypt_pool_job_t      job;
    ucs_list_link_t       list;        /* bulk->opening */
    uct_crypt_rx_flow_t   *flow;
    crypt_aead_backend_t  backend;
    crypt_bulk_segment_t  announce;    /* its tag in announce.tag */
    crypt_aead_status_t   status;
    const char            *failure;    /* a local failure's reason, from the
                                          thread that opened it */
} uct_crypt_bulk_rx_seg_t;

/* A reply that found no room (ACK, FLOW_REFUSED: 24 bytes each) */
typedef struct {
    ucs_list_link_t       list;
    uint8_t               peer_public[KEYEX_PUBLIC_KEY_LEN];
    uint8_t               msg[sizeof(crypt_bulk_ack_t)];
} uct_crypt_bulk_pending_ack_t;

struct uct_crypt_bulk {
    uct_crypt_iface_t     *iface;
    int                   naive;
    int                   inline_segments; /* segments are frames of the
                                              inner (crypt's own wire), not
                                              inner puts */
    size_t                segment;
    unsigned              depth;
    unsigned              max_outstanding;
    unsigned              outstanding;  /* puts in flight on this iface */
    crypt_pool_t          *pool;
    uint8_t               *bounce_base;
    size_t                bounce_length;
    uct_mem_h             bounce_memh;
    uct_crypt_bulk_slot_t *slots;
    ucs_list_link_t       free_slots;
    ucs_list_link_t       active;       /* uct_crypt_bulk_tx_t with work */
    ucs_list_link_t       pending_acks;
    ucs_list_link_t       opening;      /* uct_crypt_bulk_rx_seg_t, in order */
    unsigned              opening_count;/* at most `depth` */
    /* waking a progress thread that sleeps in ucp_worker_wait: the pool
     * writes to wake_fd when `armed`, the connection manager when it holds
     * a disconnect (uct_crypt_bulk_poke); event_fd = epoll(inner's fd,
     * wake_fd) */
    int                   wake_fd;
    int                   event_fd;
    int                   armed;
    /* what a get request carries: our packed key, a handle where needed */
    size_t                rkey_packed_size;
    int                   need_memh;
    uct_worker_cb_id_t    progress_id;
    ucs_mpool_t           seg_mp;       /* uct_crypt_bulk_segment_t */
    ucs_mpool_t           op_mp;        /* uct_crypt_bulk_op_t */
    ucs_mpool_t           rx_seg_mp;    /* uct_crypt_bulk_rx_seg_t */
};

/* The nonce prefix and associated data of a segment (base/format.h) */
static inline void
uct_crypt_bulk_stream_prefix(uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                             uint64_t put_id)
{
    uint64_t le = htole64(put_id);

    memcpy(prefix, &le, CRYPT_STREAM_NONCE_PREFIX_LEN);
}

static inline void uct_crypt_bulk_aad(crypt_bulk_aad_t *aad, uint64_t flow_id,
                                      uint64_t put_id, uint64_t address,
                                      uint64_t length)
{
    aad->flow_id = htole64(flow_id);
    aad->put_id  = htole64(put_id);
    aad->address = htole64(address);
    aad->length  = htole64(length);
}

/* bulk/bulk.c */
void uct_crypt_bulk_activate(uct_crypt_bulk_tx_t *tx);
/* progress runs while segments are being opened for us */
void uct_crypt_bulk_activate_rx(uct_crypt_bulk_t *bulk);
unsigned uct_crypt_bulk_progress(void *arg);
uct_crypt_bulk_tx_t *uct_crypt_bulk_tx_get(uct_crypt_ep_t *ep);
void uct_crypt_bulk_op_complete(uct_crypt_bulk_tx_t *tx, uct_crypt_bulk_op_t *op,
                                ucs_status_t status);
void uct_crypt_bulk_segment_free(uct_crypt_bulk_t *bulk,
                                 uct_crypt_bulk_segment_t *seg);

/* bulk/bulk_tx.c */
void uct_crypt_bulk_tx_seal(uct_crypt_bulk_tx_t *tx);
unsigned uct_crypt_bulk_tx_send(uct_crypt_bulk_tx_t *tx, int help);
void uct_crypt_bulk_tx_flushes(uct_crypt_bulk_tx_t *tx);
int uct_crypt_bulk_tx_idle(uct_crypt_bulk_tx_t *tx);
void uct_crypt_bulk_tx_fence(uct_crypt_bulk_tx_t *tx);
/* One bulk put of a contiguous span (put_zcopy, and the answer to a get) */
ucs_status_t uct_crypt_bulk_put(uct_crypt_ep_t *ep, const void *src,
                                size_t length, uint64_t remote_addr,
                                const uct_crypt_rkey_t *rkey,
                                uct_completion_t *comp);
ucs_status_t uct_crypt_bulk_check_iov(uct_crypt_ep_t *ep, const uct_iov_t *iov,
                                      size_t iovcnt);

/* bulk/bulk_rx.c */

uct_crypt_ep_t *uct_crypt_bulk_ep_to(uct_crypt_iface_t *iface,
                                     const uint8_t *peer_public);
void uct_crypt_bulk_send_pending_acks(uct_crypt_bulk_t *bulk);
void uct_crypt_bulk_reply(uct_crypt_iface_t *iface,
                          const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                          uint64_t flow_id, const void *msg);
ucs_status_t uct_crypt_bulk_tx_of(uct_crypt_iface_t *iface,
                                  uct_crypt_rx_flow_t *flow, uint64_t flow_id,
                                  uct_crypt_bulk_tx_t **tx_p);

/* bulk/bulk_get.c */
uct_crypt_bulk_get_t *uct_crypt_bulk_get_of(uct_crypt_iface_t *iface,
                                           const uint8_t *peer_public,
                                           uint64_t address, uint64_t length);
void uct_crypt_bulk_get_opened(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow, uint64_t address,
                               uint64_t length, int last);
void uct_crypt_bulk_serve_get(uct_crypt_iface_t *iface,
                              uct_crypt_rx_flow_t *flow,
                              const uint8_t *payload, size_t length);

/* record/keys.c */
ucs_status_t uct_crypt_bulk_rx_key(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow, int update);
int uct_crypt_bulk_tx_key_ready(uct_crypt_bulk_tx_t *tx, size_t length);
void uct_crypt_bulk_tx_keys_cleanup(uct_crypt_bulk_tx_t *tx);

/* ---- what the wrapper and the record layer call ---------------------------- */

ucs_status_t uct_crypt_bulk_init(uct_crypt_iface_t *iface,
                                 const uct_crypt_iface_config_t *config);
void uct_crypt_bulk_cleanup(uct_crypt_iface_t *iface);
void uct_crypt_bulk_iface_attr(uct_crypt_iface_t *iface, uct_iface_attr_t *attr);
ucs_status_t uct_crypt_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_crypt_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);
/* UCS_OK: no put outstanding, flush the inner; else INPROGRESS (comp kept) */
ucs_status_t uct_crypt_bulk_ep_flush(uct_crypt_ep_t *ep, unsigned flags,
                                     uct_completion_t *comp);
/* ep fence: later sends wait until earlier bulk work has left crypt */
void uct_crypt_bulk_ep_fence(uct_crypt_ep_t *ep);
/* Event fd and arm: pool threads wake a progress thread that sleeps */
ucs_status_t uct_crypt_bulk_event_fd_get(uct_crypt_iface_t *iface, int *fd_p);
void uct_crypt_bulk_poke(uct_crypt_iface_t *iface);
ucs_status_t uct_crypt_bulk_event_arm(uct_crypt_iface_t *iface);
/* An ep of the iface has bulk work outstanding (a put, a get until its
 * answer landed, a flush, a fence): uct_iface_flush is not done */
int uct_crypt_bulk_iface_busy(uct_crypt_iface_t *iface);
int uct_crypt_bulk_ep_idle(uct_crypt_ep_t *ep);
/* ep going away or failed: wait for its jobs, complete its puts with status */
void uct_crypt_bulk_ep_cancel(uct_crypt_ep_t *ep, ucs_status_t status);
void uct_crypt_bulk_control(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow,
                            uint8_t *payload, size_t length);
void uct_crypt_bulk_rx_flow_cleanup(uct_crypt_rx_flow_t *flow);
/* Acts on the segments being opened for the iface, in arrival order: those
 * at the head that are opened; with `wait`, every one (the progress thread
 * opens those no worker took). Nothing where the iface has no bulk engine */
void uct_crypt_bulk_rx_reap(uct_crypt_iface_t *iface, int wait);
/* No worker writes into a destination any more (a failure is about to be
 * told, and UCP may then give buffers back): every segment being opened is
 * done, here where no worker took it; acted on later, in order */
void uct_crypt_bulk_rx_quiesce(uct_crypt_iface_t *iface);
/* how many threads seal the bulk engine's segments together (its pool's,
 * or the progress thread alone); 0 without the engine */
unsigned uct_crypt_bulk_seal_threads(const uct_crypt_iface_t *iface);
/* how fast one thread seals with `backend`, bytes a second (measured once
 * per process; 0 if it cannot be) */
double uct_crypt_seal_bandwidth(crypt_aead_backend_t backend);

#endif
