/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The collective lane (src/uct_crypt/api/uct_crypt_lane.h): the collective
 * layer's sealed frames on the inner network transport, not sealed again.
 *
 * The plugin hides the network components from UCP (uct_crypt_md.c), so it
 * is the only place that can open them; it opens one iface for the lane on
 * the first selected inner transport that connects to a remote iface and
 * has am_bcopy with synchronous callbacks (tcp, ud, dc). A message goes as
 * am_bcopy chunks of that iface, each behind a small header (team, source
 * and destination rank, sequence, first/last, total length) and followed
 * by a tag under the team's lane key (crypt_lane_chunk_hdr_t,
 * base/format.h; lane/lane_rx.h). The receiver checks the tag
 * before anything else, then writes a message straight into the buffer
 * the collective posted for it (a receive that found nothing yet: one
 * copy less, no allocation); otherwise it reassembles per (team, rank) and
 * keeps complete messages until the collective asks.
 *
 * Why the lane is not a second UCP context: UCP would put its own protocol
 * on the wire in plaintext (wireup, rendezvous with remote addresses and
 * keys), which an active attacker could rewrite. Here nothing crosses but
 * chunk headers and frames, the lane never registers memory nor exposes a
 * remote key, and the only thing it does with a chunk is append it to a
 * bounded buffer.
 *
 * Why every chunk carries a tag, though its frames are sealed already: on
 * ud and dc anyone who can address the lane's iface can send to it, and
 * on crypt's own wire anyone who reads a TCP stream can inject into it
 * (the wire authenticates its records, not the lane's frames). Without a
 * tag a stranger's chunk naming a live (team, rank) failed that stream,
 * and with it the collective and the job. With it, only a rank of the
 * team can make a chunk that is taken, and only once (the sequence); a
 * stranger's is dropped and counted (`counters`). The cost is GHASH over
 * the collective's bytes once more on each side, at about twice the speed
 * of the sealing itself (test/perf/crypt_engine_bench, lane_tag). The
 * bytes are in the tag, not only the header: an injector who read a
 * chunk's header could otherwise race a copy with other bytes ahead of it.
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/lane/lane_rx.h"
#include "uct_crypt/wire/wire.h"
#include "uct_crypt/api/uct_crypt_lane.h"

#include <ucs/async/async.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#define UCT_CRYPT_LANE_MSG_MAX   (1ul << 31) /* what one MPI count can hold */
#define UCT_CRYPT_LANE_MAX_PEERS 4096
/* What the lane holds for receives not posted yet, all streams together,
 * and how many streams it keeps: bounds that a peer cannot push past
 * (a stream that would is failed; the collective layer then fails the
 * collective, never the process) */
#define UCT_CRYPT_LANE_BUFFER_MAX  (1ul << 30)
#define UCT_CRYPT_LANE_MAX_STREAMS 65536
#define UCT_CRYPT_LANE_CLOSE_SEC 5

typedef struct uct_crypt_lane_peer {
    uct_ep_h             ep;
    uint8_t              peer_static[KEYEX_PUBLIC_KEY_LEN]; /* own wire */
    uint8_t              addr[UCT_CRYPT_LANE_ADDR_MAX];
    size_t               addr_len;
    int                  failed;
    /* the message being sent */
    const uint8_t        *buf;
    size_t               len, offset;
    uint64_t             team;
    uint32_t             dst_rank;
    int                  busy;
    int                  used;     /* anything was ever sent to it */
} uct_crypt_lane_peer_t;

#if UCX_CRYPT_FAULT_INJECTION
const char *uct_crypt_lane_fault_names[] = {
    [UCT_CRYPT_LANE_FAULT_NONE]          = "none",
    [UCT_CRYPT_LANE_FAULT_FORGED_BYTES]  = "forged_bytes",
    [UCT_CRYPT_LANE_FAULT_FORGED_HEADER] = "forged_header",
    [UCT_CRYPT_LANE_FAULT_STRANGER]      = "stranger",
    [UCT_CRYPT_LANE_FAULT_REPLAY]        = "replay",
    [UCT_CRYPT_LANE_FAULT_LAST]          = NULL
};
#endif

struct uct_crypt_lane {
    ucs_async_context_t     *async;
    uct_worker_h            worker;
    uct_md_h                md;
    uct_iface_h             iface;
    const uct_crypt_inner_ops_t *inner_ops; /* uct_crypt_inner_open's */
    keyex_keypair_t         keypair;   /* its handshake key (own wire) */
    uct_iface_attr_t        attr;
    char                    tl_name[UCT_TL_NAME_MAX];
    char                    dev_name[UCT_DEVICE_NAME_MAX];
    uct_crypt_lane_peer_t   *peers;
    int                     num_peers;
    uct_crypt_lane_rx_t     rx;        /* teams, keys, what arrives
                                          (lane/lane_rx.h) */
    uint64_t                bytes_sent;
#if UCX_CRYPT_FAULT_INJECTION
    uct_crypt_lane_fault_t  fault;
    uct_crypt_lane_peer_t   *fault_peer;      /* where they go */
    uint8_t                 *fault_chunks[2]; /* to send before anything */
    size_t                  fault_length;     /* of each */
    unsigned                fault_queued, fault_sent;
#endif
};

/* Does the lane's inner prove each peer's static key (crypt's own wire)?
 * Then a peer's address carries that key and its chunks must come from it */
static int uct_crypt_lane_proves_peers(const uct_crypt_lane_t *lane)
{
    return (lane->iface != NULL) &&
           (lane->inner_ops->flags & UCT_CRYPT_INNER_PROVES_PEERS);
}

/* ---- receiving ------------------------------------------------------------ */

static void uct_crypt_lane_rx_log(uint64_t team, uint32_t src_rank,
                                  uct_crypt_lane_rx_event_t event,
                                  const char *why)
{
    static uint64_t refused;
    uint64_t n;

    if (event != UCT_CRYPT_LANE_RX_REFUSED) {
        ucs_error("crypt lane: %s of rank %u (team %016" PRIx64 "): %s",
                  (event == UCT_CRYPT_LANE_RX_FAILED) ? "dropping the stream" :
                  "dropped a chunk", src_rank, team, why);
        return;
    }
    /* a stranger's: as the wire's and the connection manager's refusals
     * (the rank it claims is not shown: nothing proved it) */
    n = __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
    if (uct_crypt_outsider_logged(n)) {
        ucs_warn("crypt lane: refused a chunk (team %016" PRIx64 "): %s (%"
                 PRIu64 " refused so far; the collectives go on)", team, why, n);
    }
}

static ucs_status_t uct_crypt_lane_am(void *arg, void *data, size_t length,
                                      unsigned flags)
{
    uct_crypt_lane_t *lane = arg;

    uct_crypt_lane_rx_chunk(&lane->rx, data, length,
                            lane->inner_ops->rx_peer(lane->iface));
    return UCS_OK;
}

/* The worker, and what the async thread could not do while we held the
 * context (UCP does the same in ucp_worker_progress; a UCT user must). */
static void uct_crypt_lane_worker_progress(uct_crypt_lane_t *lane)
{
    ucs_async_check_miss(lane->async);
    uct_worker_progress(lane->worker);
}

/* the peer's static key when a rank's messages must come from it (own
 * wire), else NULL */
static const uint8_t *uct_crypt_lane_peer_key(uct_crypt_lane_t *lane, int peer)
{
    return (uct_crypt_lane_proves_peers(lane) && (peer >= 0) &&
            (peer < lane->num_peers)) ?
           lane->peers[peer].peer_static : NULL;
}

static int uct_crypt_lane_team_add(uct_crypt_lane_t *lane, uint64_t team,
                                   uint32_t rank, uint32_t size,
                                   const uint8_t *key, size_t key_len)
{
    return uct_crypt_lane_rx_team_add(&lane->rx, team, rank, size, key, key_len);
}

static void uct_crypt_lane_team_remove(uct_crypt_lane_t *lane, uint64_t team)
{
    uct_crypt_lane_rx_team_remove(&lane->rx, team);
}

static int uct_crypt_lane_recv(uct_crypt_lane_t *lane, int peer, uint64_t team,
                               uint32_t src_rank, void *buf, size_t len)
{
    int ret;

    uct_crypt_lane_worker_progress(lane);
    ret = uct_crypt_lane_rx_recv(&lane->rx, team, src_rank,
                                 uct_crypt_lane_peer_key(lane, peer), buf, len);
    /* not there yet, from a peer that failed: it never will be */
    return ((ret == 0) && (peer >= 0) && (peer < lane->num_peers) &&
            lane->peers[peer].failed) ? -1 : ret;
}

static void uct_crypt_lane_recv_cancel(uct_crypt_lane_t *lane, uint64_t team,
                                       uint32_t src_rank)
{
    uct_crypt_lane_rx_cancel(&lane->rx, team, src_rank);
}

/* ---- sending -------------------------------------------------------------- */

typedef struct {
    uct_crypt_lane_t      *lane;
    uct_crypt_lane_peer_t *peer;
    size_t                chunk;
    const char            *why;  /* set: sealing failed */
} uct_crypt_lane_pack_arg_t;

/* The chunk's bytes, then its header and tag around them. A chunk that
 * could not be sealed goes as zeros (am_bcopy cannot be called off once
 * it packs), which the peer drops; the caller fails the peer. */
static size_t uct_crypt_lane_pack(void *dest, void *arg)
{
    uct_crypt_lane_pack_arg_t *a = arg;
    uct_crypt_lane_peer_t *peer  = a->peer;
    uint8_t *chunk               = dest;
    size_t length = sizeof(crypt_lane_chunk_hdr_t) + a->chunk +
                    CRYPT_LANE_CHUNK_TAG_LEN;
    uint32_t flags = ((peer->offset == 0) ? CRYPT_LANE_CHUNK_FIRST : 0) |
                     ((peer->offset + a->chunk == peer->len) ?
                      CRYPT_LANE_CHUNK_LAST : 0);

    if (a->chunk > 0) { /* an empty message may have no buffer */
        memcpy(chunk + sizeof(crypt_lane_chunk_hdr_t),
               peer->buf + peer->offset, a->chunk);
    }
    if (uct_crypt_lane_chunk_seal(&a->lane->rx, peer->team, peer->dst_rank,
                                  flags, peer->len, chunk, a->chunk,
                                  &a->why) != 0) {
        memset(chunk, 0, length);
    }
    return length;
}

#if UCX_CRYPT_FAULT_INJECTION
static size_t uct_crypt_lane_pack_copy(void *dest, void *arg)
{
    uct_crypt_lane_t *lane = arg;
    unsigned i             = lane->fault_sent;

    memcpy(dest, lane->fault_chunks[i], lane->fault_length);
    return lane->fault_length;
}

/* The lane's first chunk, sealed into a copy, and the attacker's chunk
 * next to it, queued to go before anything else; 0 where there is
 * nothing to do (the chunk then goes as usual) */
static int uct_crypt_lane_fault_queue(uct_crypt_lane_t *lane,
                                      uct_crypt_lane_pack_arg_t *arg)
{
    size_t length = sizeof(crypt_lane_chunk_hdr_t) + arg->chunk +
                    CRYPT_LANE_CHUNK_TAG_LEN;
    uint8_t *real, *forged;
    crypt_lane_chunk_hdr_t hdr;
    uint8_t key[32];

    if ((lane->fault == UCT_CRYPT_LANE_FAULT_NONE) || (lane->fault_queued > 0)) {
        return 0;
    }
    real   = ucs_malloc(length, "lane fault");
    forged = ucs_malloc(length, "lane fault");
    ucs_assert_always((real != NULL) && (forged != NULL));
    uct_crypt_lane_pack(real, arg);
    ucs_assert_always(arg->why == NULL);
    lane->bytes_sent += arg->chunk;
    memcpy(forged, real, length);
    switch (lane->fault) {
    case UCT_CRYPT_LANE_FAULT_FORGED_BYTES:
        forged[length - CRYPT_LANE_CHUNK_TAG_LEN - 1] ^= 1;
        break;
    case UCT_CRYPT_LANE_FAULT_FORGED_HEADER:
        memcpy(&hdr, forged, sizeof(hdr));
        hdr.total = htole64(le64toh(hdr.total) + 1);
        memcpy(forged, &hdr, sizeof(hdr));
        break;
    case UCT_CRYPT_LANE_FAULT_STRANGER: {
        /* a key holder of no team of ours: its own team under its key,
         * named as ours */
        uct_crypt_lane_rx_t stranger;
        const char *why;

        uct_crypt_lane_rx_init(&stranger, 0, 0, 0, lane->rx.backend,
                               uct_crypt_lane_rx_log);
        memset(key, 0x5a, sizeof(key));
        memcpy(&hdr, real, sizeof(hdr));
        ucs_assert_always(uct_crypt_lane_rx_team_add(
                &stranger, le64toh(hdr.team), le32toh(hdr.src_rank),
                ucs_max(le32toh(hdr.src_rank), le32toh(hdr.dst_rank)) + 1,
                key, sizeof(key)) == 0);
        ucs_assert_always(uct_crypt_lane_chunk_seal(
                &stranger, le64toh(hdr.team), le32toh(hdr.dst_rank),
                le32toh(hdr.flags), le64toh(hdr.total), forged, arg->chunk,
                &why) == 0);
        uct_crypt_lane_rx_cleanup(&stranger);
        break;
    }
    default:
        break;
    }
    ucs_warn("crypt lane: TESTING: '%s' next to the first chunk",
             uct_crypt_lane_fault_names[lane->fault]);
    if (lane->fault == UCT_CRYPT_LANE_FAULT_REPLAY) {
        memcpy(forged, real, length);
        lane->fault_chunks[0] = real;
        lane->fault_chunks[1] = forged;
    } else {
        lane->fault_chunks[0] = forged;
        lane->fault_chunks[1] = real;
    }
    lane->fault_length = length;
    lane->fault_queued = 2;
    lane->fault_peer   = arg->peer;
    return 1;
}

/* 1 while what the fault queued for `peer` has not all left */
static int uct_crypt_lane_fault_pending(uct_crypt_lane_t *lane,
                                        uct_crypt_lane_peer_t *peer)
{
    return (peer == lane->fault_peer) && (lane->fault_sent < lane->fault_queued);
}

/* what the fault queued goes first: 0 once it all left */
static int uct_crypt_lane_fault_push(uct_crypt_lane_t *lane,
                                     uct_crypt_lane_peer_t *peer)
{
    ssize_t packed;

    while (uct_crypt_lane_fault_pending(lane, peer) && !peer->failed) {
        packed = uct_ep_am_bcopy(peer->ep, UCT_CRYPT_LANE_AM_ID,
                                 uct_crypt_lane_pack_copy, lane, 0);
        if (packed < 0) {
            peer->failed = (packed != UCS_ERR_NO_RESOURCE);
            return 1;
        }
        ucs_free(lane->fault_chunks[lane->fault_sent]);
        lane->fault_chunks[lane->fault_sent++] = NULL;
    }
    return 0;
}
#endif

/* hand as many chunks to the transport as it takes now */
static void uct_crypt_lane_push(uct_crypt_lane_t *lane, uct_crypt_lane_peer_t *peer)
{
    size_t max_chunk = lane->attr.cap.am.max_bcopy -
                       sizeof(crypt_lane_chunk_hdr_t) - CRYPT_LANE_CHUNK_TAG_LEN;
    uct_crypt_lane_pack_arg_t arg;
    ssize_t packed;

#if UCX_CRYPT_FAULT_INJECTION
    if (uct_crypt_lane_fault_push(lane, peer)) {
        return;
    }
#endif
    while (peer->busy && !peer->failed) {
        arg.lane  = lane;
        arg.peer  = peer;
        arg.chunk = ucs_min(max_chunk, peer->len - peer->offset);
        arg.why   = NULL;
#if UCX_CRYPT_FAULT_INJECTION
        if (uct_crypt_lane_fault_queue(lane, &arg)) {
            peer->offset += arg.chunk; /* it is in the queue */
            peer->busy    = (peer->offset != peer->len);
            if (uct_crypt_lane_fault_push(lane, peer)) {
                return;
            }
            continue;
        }
#endif
        packed = uct_ep_am_bcopy(peer->ep, UCT_CRYPT_LANE_AM_ID,
                                 uct_crypt_lane_pack, &arg, 0);
        if (packed == UCS_ERR_NO_RESOURCE) {
            return;
        }
        if ((packed < 0) || (arg.why != NULL)) {
            ucs_error("crypt lane: send to a peer failed: %s",
                      (arg.why != NULL) ? arg.why :
                      ucs_status_string((ucs_status_t)packed));
            peer->failed = 1;
            return;
        }
        peer->offset     += arg.chunk;
        lane->bytes_sent += arg.chunk;
        if (peer->offset == peer->len) {
            peer->busy = 0;
        }
    }
}

static int uct_crypt_lane_send(uct_crypt_lane_t *lane, int peer_index, uint64_t team,
                               uint32_t dst_rank, const void *buf, size_t len,
                               size_t min_frame)
{
    uct_crypt_lane_peer_t *peer;

    if ((peer_index < 0) || (peer_index >= lane->num_peers)) {
        return -1;
    }
    peer = &lane->peers[peer_index];
    /* only sealed frames travel here: a message shorter than one frame's
     * overhead cannot be one (crypt_lane.h) */
    if (peer->busy || peer->failed || (len > UCT_CRYPT_LANE_MSG_MAX) ||
        ((len != 0) && (len < min_frame))) {
        ucs_error("crypt lane: refusing a %zu-byte message (not a sealed "
                  "frame, or the peer is busy or failed)", len);
        return -1;
    }
    if (!uct_crypt_lane_rx_may_send(&lane->rx, team, dst_rank)) {
        ucs_error("crypt lane: refusing a message of team %016" PRIx64 " to "
                  "rank %u: not a team of this process, or no other rank of "
                  "it", team, dst_rank);
        return -1;
    }
    peer->buf      = buf;
    peer->len      = len;
    peer->offset   = 0;
    peer->team     = team;
    peer->dst_rank = dst_rank;
    peer->busy     = 1;
    peer->used     = 1;
    uct_crypt_lane_push(lane, peer);
    return peer->failed ? -1 : 0;
}

/* Idle once the transport holds nothing of the message either: a rank
 * leaves a collective as soon as its own part is done, and then may not
 * progress the lane for a long time (another MPI call, MPI_Finalize), so
 * bytes still buffered in the process (crypt's own wire holds records
 * while its handshake is answered, or behind a partial write) would never
 * reach the peer that waits for them. */
static int uct_crypt_lane_send_idle(uct_crypt_lane_t *lane, int peer_index)
{
    uct_crypt_lane_peer_t *peer = &lane->peers[peer_index];
    ucs_status_t status;

    uct_crypt_lane_push(lane, peer);
    if (peer->failed) {
        return -1;
    }
    if (peer->busy) {
        return 0;
    }
#if UCX_CRYPT_FAULT_INJECTION
    if (uct_crypt_lane_fault_pending(lane, peer)) {
        return 0;
    }
#endif
    if (!peer->used) {
        return 1;
    }
    status = uct_ep_flush(peer->ep, UCT_FLUSH_FLAG_LOCAL, NULL);
    if ((status == UCS_INPROGRESS) || (status == UCS_ERR_NO_RESOURCE)) {
        return 0;
    }
    if (status != UCS_OK) {
        ucs_error("crypt lane: send to a peer failed: %s",
                  ucs_status_string(status));
        peer->failed = 1;
        return -1;
    }
    return 1;
}

static void uct_crypt_lane_progress(uct_crypt_lane_t *lane)
{
    int i;

    uct_crypt_lane_worker_progress(lane);
    for (i = 0; i < lane->num_peers; ++i) {
        uct_crypt_lane_push(lane, &lane->peers[i]);
    }
}

/* ---- peers ---------------------------------------------------------------- */

static ucs_status_t uct_crypt_lane_ep_err(void *arg, uct_ep_h ep,
                                          ucs_status_t status)
{
    uct_crypt_lane_t *lane = arg;
    int i;

    for (i = 0; i < lane->num_peers; ++i) {
        if (lane->peers[i].ep == ep) {
            lane->peers[i].failed = 1;
            ucs_debug("crypt lane: peer %d failed: %s", i,
                      ucs_status_string(status));
        }
    }
    return UCS_OK;
}

/* The lane's address: device and iface address lengths (a byte each), the
 * addresses, and on crypt's own wire the static key its handshake proves */
static size_t uct_crypt_lane_key_len(const uct_crypt_lane_t *lane)
{
    return uct_crypt_lane_proves_peers(lane) ? KEYEX_PUBLIC_KEY_LEN : 0;
}

/* crypt's own wire: a peer's connection to us ended badly */
static void uct_crypt_lane_peer_failed(void *arg,
                                       const uint8_t peer_static[KEYEX_PUBLIC_KEY_LEN],
                                       const char *peer_name, const char *reason)
{
    uct_crypt_lane_t *lane = arg;
    int i;

    for (i = 0; i < lane->num_peers; ++i) {
        if (!memcmp(lane->peers[i].peer_static, peer_static,
                    KEYEX_PUBLIC_KEY_LEN)) {
            lane->peers[i].failed = 1;
        }
    }
    ucs_diag("crypt lane: connection from %s ended: %s", peer_name, reason);
}

static size_t uct_crypt_lane_address(uct_crypt_lane_t *lane, void *buf, size_t max)
{
    size_t dev_len = lane->attr.device_addr_len, if_len = lane->attr.iface_addr_len;
    uint8_t *p = buf;

    if (2 + dev_len + if_len + uct_crypt_lane_key_len(lane) > max) {
        return 0;
    }
    memcpy(p + 2 + dev_len + if_len, lane->keypair.public_key,
           uct_crypt_lane_key_len(lane));
    p[0] = (uint8_t)dev_len;
    p[1] = (uint8_t)if_len;
    if ((uct_iface_get_device_address(lane->iface, (uct_device_addr_t*)(p + 2)) != UCS_OK) ||
        (uct_iface_get_address(lane->iface,
                               (uct_iface_addr_t*)(p + 2 + dev_len)) != UCS_OK)) {
        return 0;
    }
    return 2 + dev_len + if_len + uct_crypt_lane_key_len(lane);
}

static int uct_crypt_lane_connect(uct_crypt_lane_t *lane, const void *addr, size_t len)
{
    const uint8_t *p = addr;
    uct_crypt_lane_peer_t *grown, *peer;
    uct_ep_params_t params;
    int i;

    if ((len < 2) || (len > UCT_CRYPT_LANE_ADDR_MAX) ||
        (2u + p[0] + p[1] + uct_crypt_lane_key_len(lane) != len) ||
        (p[0] + p[1] == 0)) {
        return -1;
    }
    for (i = 0; i < lane->num_peers; ++i) {
        if ((lane->peers[i].addr_len == len) && !memcmp(lane->peers[i].addr, addr, len)) {
            return i;
        }
    }
    if (lane->num_peers == UCT_CRYPT_LANE_MAX_PEERS) {
        return -1;
    }
    grown = ucs_realloc(lane->peers, sizeof(*grown) * (lane->num_peers + 1),
                        "crypt lane peers");
    if (grown == NULL) {
        return -1;
    }
    lane->peers = grown;
    peer        = &grown[lane->num_peers];
    memset(peer, 0, sizeof(*peer));
    memcpy(peer->addr, addr, len);
    peer->addr_len = len;
    memcpy(peer->peer_static, p + 2 + p[0] + p[1], uct_crypt_lane_key_len(lane));

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = lane->iface;
    params.dev_addr   = (const uct_device_addr_t*)(p + 2);
    params.iface_addr = (const uct_iface_addr_t*)(p + 2 + p[0]);
    if (!uct_iface_is_reachable(lane->iface, params.dev_addr, params.iface_addr) ||
        (uct_ep_create(&params, &peer->ep) != UCS_OK) ||
        (lane->inner_ops->ep_set_peer(peer->ep, peer->peer_static) != UCS_OK)) {
        ucs_error("crypt lane: cannot reach a peer over %s/%s", lane->tl_name,
                  lane->dev_name);
        return -1;
    }
    return lane->num_peers++;
}

/* ---- open and close -------------------------------------------------------- */

static int uct_crypt_lane_device_allowed(const char *dev_name)
{
    const char *list = getenv("UCX_NET_DEVICES");
    char *copy, *word, *save = NULL;
    int allowed = 0;

    if ((list == NULL) || (list[0] == '\0') || !strcmp(list, "all")) {
        return 1;
    }
    copy = strdup(list);
    for (word = (copy != NULL) ? strtok_r(copy, ",", &save) : NULL; word != NULL;
         word = strtok_r(NULL, ",", &save)) {
        allowed |= !strcmp(word, dev_name);
    }
    free(copy);
    return allowed;
}

static void uct_crypt_lane_drop_key(uct_crypt_lane_t *lane)
{
    if (lane->keypair.pkey != NULL) {
        keyex_keypair_cleanup(&lane->keypair);
    }
}

static ucs_status_t uct_crypt_lane_open_iface(uct_crypt_lane_t *lane, const char *tl,
                                              const char *dev)
{
    uct_crypt_wire_params_t wire = {0};
    uct_iface_params_t params;
    ucs_status_t status;
    const uint64_t need = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_BCOPY |
                          UCT_IFACE_FLAG_CB_SYNC;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = tl;
    params.mode.device.dev_name = dev;
    params.err_handler          = uct_crypt_lane_ep_err;
    params.err_handler_arg      = lane;
    params.err_handler_flags    = 0;
    /* where the inner is crypt's own wire (as for the records: only
     * job-secret holders get past its handshake), with the crypt iface's
     * keepalive (UCX_CRYPT_KEEP*): the lane is the same wire to the same
     * hosts */
    status = uct_crypt_data_role_options(&wire.keepalive, NULL);
    if (status != UCS_OK) {
        return status;
    }
    if (keyex_keypair_generate(&lane->keypair) != KEYEX_OK) {
        return UCS_ERR_NO_RESOURCE;
    }
    wire.keypair         = &lane->keypair;
    wire.context.role    = KEYEX_NOISE_ROLE_LANE;
    wire.peer_failed     = uct_crypt_lane_peer_failed;
    wire.peer_failed_arg = lane;
    wire.sndbuf          = UCS_MEMUNITS_AUTO;
    wire.rcvbuf          = UCS_MEMUNITS_AUTO;
    /* (tests: UCX's own tcp transport stands in for ud and dc, where anyone
     * who reaches the iface may send to it) */
    status = uct_crypt_inner_open(lane->md, tl, lane->worker, &params, &wire,
                                  UCT_CRYPT_TEST_KNOB(&uct_crypt_global,
                                                      lane_ucx_tcp, 0),
                                  &lane->iface, &lane->inner_ops);
    if (status != UCS_OK) {
        uct_crypt_lane_drop_key(lane);
        return status;
    }
    if ((uct_iface_query(lane->iface, &lane->attr) != UCS_OK) ||
        ((lane->attr.cap.flags & need) != need) ||
        (lane->attr.cap.am.max_bcopy <= 2 * sizeof(crypt_lane_chunk_hdr_t) +
                                        CRYPT_LANE_CHUNK_TAG_LEN) ||
        (2 + lane->attr.device_addr_len + lane->attr.iface_addr_len >
         UCT_CRYPT_LANE_ADDR_MAX) ||
        (uct_iface_set_am_handler(lane->iface, UCT_CRYPT_LANE_AM_ID,
                                  uct_crypt_lane_am, lane, 0) != UCS_OK)) {
        uct_iface_close(lane->iface);
        lane->iface = NULL;
        uct_crypt_lane_drop_key(lane);
        return UCS_ERR_UNSUPPORTED;
    }
    uct_iface_progress_enable(lane->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ucs_strncpy_zero(lane->tl_name, tl, sizeof(lane->tl_name));
    ucs_strncpy_zero(lane->dev_name, dev, sizeof(lane->dev_name));
    return UCS_OK;
}

/* uct_crypt_foreach_inner callback: the first (tl, device) that works */
static int uct_crypt_lane_try(void *arg, uct_component_h component,
                              const char *md_name, const char *tl_name,
                              unsigned roles)
{
    uct_crypt_lane_t *lane = arg;
    uct_tl_resource_desc_t *rscs;
    uct_md_config_t *md_config;
    unsigned i, num;

    if (uct_md_config_read(component, NULL, NULL, &md_config) != UCS_OK) {
        return 0;
    }
    if (uct_md_open(component, md_name, md_config, &lane->md) != UCS_OK) {
        uct_config_release(md_config);
        lane->md = NULL;
        return 0;
    }
    uct_config_release(md_config);
    if (uct_md_query_tl_resources(lane->md, &rscs, &num) == UCS_OK) {
        for (i = 0; (i < num) && (lane->iface == NULL); ++i) {
            if (!strcmp(rscs[i].tl_name, tl_name) &&
                (rscs[i].dev_type == UCT_DEVICE_TYPE_NET) &&
                uct_crypt_lane_device_allowed(rscs[i].dev_name)) {
                uct_crypt_lane_open_iface(lane, tl_name, rscs[i].dev_name);
            }
        }
        uct_release_tl_resource_list(rscs);
    }
    if (lane->iface != NULL) {
        return 1;
    }
    uct_md_close(lane->md);
    lane->md = NULL;
    return 0;
}

static void uct_crypt_lane_close(uct_crypt_lane_t *lane);

static uct_crypt_lane_t *uct_crypt_lane_open(char *error, size_t error_len)
{
    uct_crypt_lane_t *lane;

    if (!uct_crypt_global.enable) {
        ucs_snprintf_zero(error, error_len, "the crypt transport is disabled");
        return NULL;
    }
    lane = ucs_calloc(1, sizeof(*lane), "crypt lane");
    if (lane == NULL) {
        ucs_snprintf_zero(error, error_len, "out of memory");
        return NULL;
    }
    uct_crypt_lane_rx_init(&lane->rx, UCT_CRYPT_LANE_MSG_MAX,
                           UCT_CRYPT_LANE_BUFFER_MAX, UCT_CRYPT_LANE_MAX_STREAMS,
                           crypt_aead_backend_resolve(
                                   (crypt_aead_backend_t)uct_crypt_global.backend),
                           uct_crypt_lane_rx_log);
#if UCX_CRYPT_FAULT_INJECTION
    lane->fault = (uct_crypt_lane_fault_t)uct_crypt_global.lane_fault;
#endif
    if ((ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                  &lane->async) != UCS_OK) ||
        (uct_worker_create(lane->async, UCS_THREAD_MODE_SINGLE,
                           &lane->worker) != UCS_OK)) {
        ucs_snprintf_zero(error, error_len, "cannot create a UCT worker");
        uct_crypt_lane_close(lane);
        return NULL;
    }
    uct_crypt_foreach_inner(uct_crypt_lane_try, lane, NULL, 0);
    if (lane->iface == NULL) {
        ucs_snprintf_zero(error, error_len, "no inner transport connects to a "
                          "remote iface with am_bcopy (tcp, ud, dc do; rc "
                          "alone does not)");
        uct_crypt_lane_close(lane);
        return NULL;
    }
    ucs_debug("crypt lane: open over %s/%s", lane->tl_name, lane->dev_name);
    return lane;
}

static void uct_crypt_lane_close(uct_crypt_lane_t *lane)
{
    ucs_time_t deadline;
    int i;

    /* What was handed over reaches the peer before its ep goes, within a
     * bound: a peer that stopped progressing (it finished, or died) must
     * not hang this process's MPI_Finalize. */
    deadline = ucs_get_time() + ucs_time_from_sec(UCT_CRYPT_LANE_CLOSE_SEC);
    for (i = 0; i < lane->num_peers; ++i) {
        uct_crypt_lane_peer_t *peer = &lane->peers[i];
        while (peer->busy && !peer->failed && (ucs_get_time() < deadline)) {
            uct_crypt_lane_progress(lane);
        }
        /* an ep that never carried anything has nothing to deliver */
        while (peer->used && !peer->failed && !peer->busy &&
               (ucs_get_time() < deadline)) {
            ucs_status_t status = uct_ep_flush(peer->ep, 0, NULL);
            if ((status != UCS_ERR_NO_RESOURCE) && (status != UCS_INPROGRESS)) {
                break;
            }
            uct_crypt_lane_worker_progress(lane);
        }
        if (ucs_get_time() >= deadline) {
            ucs_warn("crypt lane: a peer did not take everything sent to it "
                     "within %d s of closing", UCT_CRYPT_LANE_CLOSE_SEC);
        }
        uct_ep_destroy(peer->ep);
    }
    ucs_free(lane->peers);
    uct_crypt_lane_rx_cleanup(&lane->rx);
#if UCX_CRYPT_FAULT_INJECTION
    ucs_free(lane->fault_chunks[0]);
    ucs_free(lane->fault_chunks[1]);
#endif
    if (lane->iface != NULL) {
        uct_iface_close(lane->iface);
    }
    uct_crypt_lane_drop_key(lane);
    if (lane->md != NULL) {
        uct_md_close(lane->md);
    }
    if (lane->worker != NULL) {
        uct_worker_destroy(lane->worker);
    }
    if (lane->async != NULL) {
        ucs_async_context_destroy(lane->async);
    }
    ucs_free(lane);
}

static void uct_crypt_lane_counters(uct_crypt_lane_t *lane, uint64_t *sent,
                                    uint64_t *received, uint64_t *refused)
{
    *sent     = lane->bytes_sent;
    *received = lane->rx.bytes_received;
    *refused  = lane->rx.chunks_refused;
}

/* Found by front ends with dlsym (crypt_lane.h) */
__attribute__((visibility("default")))
const uct_crypt_lane_ops_t uct_crypt_coll_lane_ops = {
    .version   = UCT_CRYPT_LANE_OPS_VERSION,
    .open      = uct_crypt_lane_open,
    .close     = uct_crypt_lane_close,
    .address   = uct_crypt_lane_address,
    .connect   = uct_crypt_lane_connect,
    .team_add  = uct_crypt_lane_team_add,
    .team_remove = uct_crypt_lane_team_remove,
    .send      = uct_crypt_lane_send,
    .send_idle = uct_crypt_lane_send_idle,
    .recv      = uct_crypt_lane_recv,
    .recv_cancel = uct_crypt_lane_recv_cancel,
    .progress  = uct_crypt_lane_progress,
    .counters  = uct_crypt_lane_counters
};
