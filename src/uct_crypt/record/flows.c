/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The lifecycle of flows (README.md): the receiving flows of an iface
 * found by id, grouped by peer key, bounded, asleep and awake, ended and
 * remembered; and at the sending end, over a UCX inner, the FLOW_END
 * record an ep's last words are, its inner ep kept until that record has
 * left. Their keys are keys.c's.
 */
#include "uct_crypt/uct_crypt.h"
#include "uct_crypt/bulk/bulk.h"

#include <ucs/sys/math.h>
#include <limits.h>
#include <string.h>

/* ---- receiving flows ---------------------------------------------------- */

/*
 * The flows an iface receives: found by id, grouped by peer key, bounded
 * (issue 29, item 6).
 *
 * A flow ends with its sender: on crypt's own wire with the connection
 * that carries it (uct_crypt_rx_flows_conn_ended), over a UCX inner with
 * the FLOW_END record its ep sends when destroyed (uct_crypt_rx_flow_end).
 * Then its state and keys go; over a UCX inner its id stays behind (16
 * bytes), since its records would open again under keys that the two
 * static keys and the id still make: a replay of its HELLO is refused by
 * that id. (On the own wire every connection has keys of its own: nothing
 * of an ended connection opens again.)
 *
 * A FLOW_END can be lost: the peer's connection may already be gone when
 * its ep is destroyed (a server that closed first, rc and ud pairs). So a
 * flow over a UCX inner also sleeps when this iface's last ep to its peer
 * goes: its keys are wiped and its locked memory freed, its state (the
 * sequence, the key generations, the bulk counters: some 250 bytes) stays,
 * and a record that comes after all wakes it, its keys made again from
 * the static keys, the id and the generations. Nothing is lost by it.
 *
 * Past either bound the oldest flow asleep (of that peer, then of all) is
 * forgotten to make room, its id kept as an ended flow's: its peer has no
 * ep of ours left, and a record it sends on it after all is refused. With
 * none asleep the new flow is refused: a flow awake is never evicted, and
 * only a holder of the job secret can open flows at all (its HELLO must
 * open). Without forgetting, a long-lived server over rc whose clients'
 * FLOW_ENDs were lost would refuse every client after the bound.
 *
 * A holder of the job secret can make any number of keys, so the bound
 * per key does not stop one from taking the whole table. Where the inner
 * tells the host a flow came from (the own wire: the connection's
 * address), a host holds at most half of what the other hosts leave: a
 * holder on k hosts leaves every other host 2^-k of the table (red team
 * R1).
 */
void uct_crypt_rx_flows_init(uct_crypt_iface_t *iface,
                             const uct_crypt_rx_limits_t *limits)
{
    kh_init_inplace(uct_crypt_rx_flows, &iface->rx_flows);
    kh_init_inplace(uct_crypt_flow_ids, &iface->ended_flows);
    kh_init_inplace(uct_crypt_peers, &iface->peers);
    kh_init_inplace(uct_crypt_sources, &iface->sources);
    ucs_list_head_init(&iface->asleep);
    iface->rx_flows_max      = limits->flows;
    iface->rx_flows_per_peer = limits->flows_per_peer;
    iface->wire_ended_next   = 0;
}

/* The table's key of a peer: the first 8 bytes of its public key (another
 * key with the same 8 bytes takes some 2^64 X25519 to find, and would only
 * share this bookkeeping, never a key) */
static uint64_t uct_crypt_peer_id(const uint8_t *peer_public)
{
    uint64_t id;

    memcpy(&id, peer_public, sizeof(id));
    return id;
}

static uct_crypt_peer_t *uct_crypt_peer_find(uct_crypt_iface_t *iface,
                                             const uint8_t *peer_public,
                                             int create)
{
    uint64_t id = uct_crypt_peer_id(peer_public);
    uct_crypt_peer_t *peer;
    khiter_t iter;
    int ret;

    iter = kh_get(uct_crypt_peers, &iface->peers, id);
    if (iter != kh_end(&iface->peers)) {
        return kh_value(&iface->peers, iter);
    } else if (!create) {
        return NULL;
    }
    peer = ucs_calloc(1, sizeof(*peer), "crypt peer");
    if (peer == NULL) {
        return NULL;
    }
    iter = kh_put(uct_crypt_peers, &iface->peers, id, &ret);
    if (ret < 0) {
        ucs_free(peer);
        return NULL;
    }
    peer->id = id;
    ucs_list_head_init(&peer->flows);
    kh_value(&iface->peers, iter) = peer;
    return peer;
}

/* a peer with neither eps nor flows is forgotten */
static void uct_crypt_peer_release(uct_crypt_iface_t *iface,
                                   uct_crypt_peer_t *peer)
{
    if ((peer->eps == 0) && (peer->num_flows == 0)) {
        kh_del(uct_crypt_peers, &iface->peers,
               kh_get(uct_crypt_peers, &iface->peers, peer->id));
        ucs_free(peer);
    }
}

ucs_status_t uct_crypt_peer_ep_add(uct_crypt_iface_t *iface,
                                   const uint8_t *peer_public)
{
    uct_crypt_peer_t *peer = uct_crypt_peer_find(iface, peer_public, 1);

    if (peer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ++peer->eps;
    return UCS_OK;
}

/* `flow` sleeps: its keys are wiped, its state stays (a flow is asleep,
 * and in iface->asleep, exactly while its keys are NULL) */
void uct_crypt_rx_flow_sleep(uct_crypt_iface_t *iface,
                             uct_crypt_rx_flow_t *flow)
{
    if ((flow->keys == NULL) || (flow->wire_conn != 0)) {
        return; /* (the own wire's flows end with their connection) */
    }
    flow->generation = flow->keys->generation;
    crypt_aead_key_cleanup(&flow->aead);
    keyex_secure_free(flow->keys, sizeof(*flow->keys));
    flow->keys = NULL;
    uct_crypt_bulk_rx_flow_cleanup(flow); /* (bulk_generation stays) */
    ucs_list_add_tail(&iface->asleep, &flow->asleep_list);
    UCT_CRYPT_STAT_ADD(flows_slept, 1);
}

ucs_status_t uct_crypt_rx_flow_wake(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow)
{
    crypt_local_failure_set(NULL);
    if (uct_crypt_rx_flow_key(iface, flow) != UCS_OK) {
        ucs_error("crypt: cannot make the keys of a flow from "
                  uct_crypt_log_peer_fmt " again%s",
                  uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                  crypt_local_failure_take());
        return UCS_ERR_NO_RESOURCE;
    }
    ucs_list_del(&flow->asleep_list);
    UCT_CRYPT_STAT_ADD(flows_woken, 1);
    return UCS_OK;
}

/* This iface's last ep to the peer is gone: its flows sleep */
void uct_crypt_peer_ep_remove(uct_crypt_iface_t *iface,
                              const uint8_t *peer_public)
{
    uct_crypt_peer_t *peer = uct_crypt_peer_find(iface, peer_public, 0);
    uct_crypt_rx_flow_t *flow;

    ucs_assert((peer != NULL) && (peer->eps > 0));
    if ((peer == NULL) || (--peer->eps > 0)) {
        return;
    }
    ucs_list_for_each(flow, &peer->flows, peer_list) {
        uct_crypt_rx_flow_sleep(iface, flow);
    }
    uct_crypt_peer_release(iface, peer);
}

void uct_crypt_rx_flow_free(uct_crypt_rx_flow_t *flow)
{
    uct_crypt_bulk_rx_flow_cleanup(flow);
    if (flow->keys != NULL) {
        crypt_aead_key_cleanup(&flow->aead);
        keyex_secure_free(flow->keys, sizeof(*flow->keys));
    }
    ucs_free(flow);
}

static void uct_crypt_rx_flow_remove(uct_crypt_iface_t *iface, khiter_t iter);

/* The flow ends here, its id kept (as at its FLOW_END) so that a replay of
 * its records is refused; 0 where no more ids can be kept */
static int uct_crypt_rx_flow_retire(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow)
{
    khiter_t iter = kh_get(uct_crypt_rx_flows, &iface->rx_flows, flow->flow_id);
    int ret       = -1;

    ucs_assert(iter != kh_end(&iface->rx_flows));
    if (kh_size(&iface->ended_flows) < UCT_CRYPT_ENDED_FLOWS_MAX) {
        kh_put(uct_crypt_flow_ids, &iface->ended_flows, flow->flow_id, &ret);
    }
    if (ret < 0) {
        return 0;
    }
    uct_crypt_rx_flow_remove(iface, iter);
    return 1;
}

/* A flow asleep makes room for a new one: forgotten, id kept. Its peer has
 * no ep of ours left; should it send on it after all, that is refused. */
static void uct_crypt_rx_flow_forget(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow)
{
    if (uct_crypt_rx_flow_retire(iface, flow)) {
        UCT_CRYPT_STAT_ADD(flows_forgotten, 1);
    }
}

/* The flows from `source` now, where `add` is -1, 0 or 1 more (a host's
 * entry goes with its last flow). UINT_MAX: no memory for the table. */
static unsigned uct_crypt_rx_source_count(uct_crypt_iface_t *iface,
                                          uint64_t source, int add)
{
    khiter_t iter = kh_get(uct_crypt_sources, &iface->sources, source);
    int ret;

    if (iter == kh_end(&iface->sources)) {
        if (add <= 0) {
            return 0;
        }
        iter = kh_put(uct_crypt_sources, &iface->sources, source, &ret);
        if (ret < 0) {
            return UINT_MAX;
        }
        kh_value(&iface->sources, iter) = 0;
    }
    kh_value(&iface->sources, iter) += add;
    if (kh_value(&iface->sources, iter) == 0) {
        kh_del(uct_crypt_sources, &iface->sources, iter);
        return 0;
    }
    return kh_value(&iface->sources, iter);
}

/* Take `flow`, whose HELLO just opened, into the iface's flows; refused
 * (UCS_ERR_EXCEEDS_LIMIT, said and counted) past a bound, or without
 * memory for the tables. The caller frees a refused flow. */
ucs_status_t uct_crypt_rx_flow_add(uct_crypt_iface_t *iface,
                                   uct_crypt_rx_flow_t *flow)
{
    static uint64_t refused;
    uct_crypt_peer_t *peer = uct_crypt_peer_find(iface, flow->peer_public, 0);
    uct_crypt_rx_flow_t *old;
    unsigned source_flows, others;
    khiter_t iter;
    uint64_t n;
    int ret;

    /* room first, from flows asleep: the oldest of that peer, then the
     * oldest of all (the peer entry may go with its last flow) */
    if ((peer != NULL) && (peer->num_flows >= iface->rx_flows_per_peer)) {
        ucs_list_for_each(old, &peer->flows, peer_list) {
            if (old->keys == NULL) {
                uct_crypt_rx_flow_forget(iface, old);
                break;
            }
        }
    }
    if ((kh_size(&iface->rx_flows) >= iface->rx_flows_max) &&
        !ucs_list_is_empty(&iface->asleep)) {
        uct_crypt_rx_flow_forget(iface, ucs_list_head(&iface->asleep,
                                                      uct_crypt_rx_flow_t,
                                                      asleep_list));
    }
    peer = uct_crypt_peer_find(iface, flow->peer_public, 1);
    if (peer == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    /* a host holds at most half of what the other hosts leave: a holder
     * on k hosts leaves every other host 2^-k of the table, not nothing */
    flow->source = iface->inner_ops->rx_source(iface->inner);
    source_flows = (flow->source != 0) ?
                   uct_crypt_rx_source_count(iface, flow->source, 0) : 0;
    others       = kh_size(&iface->rx_flows) - source_flows;
    if ((kh_size(&iface->rx_flows) >= iface->rx_flows_max) ||
        (peer->num_flows >= iface->rx_flows_per_peer) ||
        ((flow->source != 0) &&
         (source_flows >= ucs_max((iface->rx_flows_max - others) / 2, 1)))) {
        n = __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
        UCT_CRYPT_STAT_ADD(flows_refused, 1);
        if (uct_crypt_outsider_logged(n)) {
            ucs_error("crypt: refused a new flow from " uct_crypt_log_peer_fmt
                      ": this iface receives %u flows, %u of them from that "
                      "peer and %u from its host, which may hold half of "
                      "what the other hosts leave "
                      "(UCX_CRYPT_RX_FLOWS=%u, UCX_CRYPT_RX_FLOWS_PER_PEER"
                      "=%u); %s (%" PRIu64 " refused so far)",
                      uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                      (unsigned)kh_size(&iface->rx_flows), peer->num_flows,
                      source_flows,
                      iface->rx_flows_max, iface->rx_flows_per_peer,
                      (flow->wire_conn != 0) ?
                      "its connection is closed" :
                      "its sender is told where an ep of ours goes to it, and "
                      "what it sends on the flow is dropped", n);
        }
        uct_crypt_peer_release(iface, peer);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    if ((flow->source != 0) &&
        (uct_crypt_rx_source_count(iface, flow->source, 1) == UINT_MAX)) {
        uct_crypt_peer_release(iface, peer);
        return UCS_ERR_NO_MEMORY;
    }
    iter = kh_put(uct_crypt_rx_flows, &iface->rx_flows, flow->flow_id, &ret);
    if (ret < 0) {
        if (flow->source != 0) {
            (void)uct_crypt_rx_source_count(iface, flow->source, -1);
        }
        uct_crypt_peer_release(iface, peer);
        return UCS_ERR_NO_MEMORY;
    }
    kh_value(&iface->rx_flows, iter) = flow;
    ucs_list_add_tail(&peer->flows, &flow->peer_list);
    flow->peer = peer;
    ++peer->num_flows;
    return UCS_OK;
}

/* The flow at `iter` is gone: its state and keys are freed */
static void uct_crypt_rx_flow_remove(uct_crypt_iface_t *iface, khiter_t iter)
{
    uct_crypt_rx_flow_t *flow = kh_value(&iface->rx_flows, iter);

    if (flow->keys == NULL) {
        ucs_list_del(&flow->asleep_list);
    }
    ucs_list_del(&flow->peer_list);
    --flow->peer->num_flows;
    if (flow->source != 0) {
        (void)uct_crypt_rx_source_count(iface, flow->source, -1);
    }
    uct_crypt_peer_release(iface, flow->peer);
    kh_del(uct_crypt_rx_flows, &iface->rx_flows, iter);
    uct_crypt_rx_flow_free(flow);
}

/* A FLOW_END opened on `flow`: everything its sender sent came before it */
void uct_crypt_rx_flow_end(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow)
{
    if (flow->wire_conn != 0) {
        return; /* (the own wire: the flow ends with its connection) */
    }
    if (uct_crypt_rx_flow_retire(iface, flow)) {
        UCT_CRYPT_STAT_ADD(flows_ended, 1);
        return;
    }
    /* a flow whose id cannot be kept stays, asleep: a replay of its HELLO
     * must not open it again */
    ucs_diag("crypt: flow of " uct_crypt_log_peer_fmt " ended; its state "
             "stays until the iface closes: %u ended flows remembered",
             uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
             (unsigned)kh_size(&iface->ended_flows));
    uct_crypt_rx_flow_sleep(iface, flow);
}

/* Over a UCX inner, `flow`'s HELLO opened and uct_crypt_rx_flow_add
 * refused it (`status`). Its id is kept as an ended flow's: a replay of
 * that HELLO later, when there is room, opens nothing. Its sender is told
 * (FLOW_REFUSED, on our own flow to the same peer key) where this iface
 * has an ep to that peer, so that its ep fails with the reason instead of
 * sending into a flow whose records are dropped; with none, there is no
 * way back. The caller frees the flow. */
void uct_crypt_rx_flow_refuse(uct_crypt_iface_t *iface,
                              const uct_crypt_rx_flow_t *flow,
                              ucs_status_t status)
{
    crypt_flow_refused_t msg;
    int ret;

    if (kh_size(&iface->ended_flows) < UCT_CRYPT_ENDED_FLOWS_MAX) {
        kh_put(uct_crypt_flow_ids, &iface->ended_flows, flow->flow_id, &ret);
    }
    if (uct_crypt_bulk_ep_to(iface, flow->peer_public) == NULL) {
        return;
    }
    memset(&msg, 0, sizeof(msg));
    msg.kind    = CRYPT_CONTROL_FLOW_REFUSED;
    msg.reason  = (status == UCS_ERR_EXCEEDS_LIMIT) ? CRYPT_FLOW_REFUSED_BOUND :
                                                      CRYPT_FLOW_REFUSED_RESOURCE;
    msg.flow_id = htole64(flow->flow_id);
    uct_crypt_bulk_reply(iface, flow->peer_public, flow->flow_id, &msg);
}

/* Did the sender of `flow_id` end it (FLOW_END), or did we refuse it? Its
 * records are refused */
int uct_crypt_rx_flow_was_ended(uct_crypt_iface_t *iface, uint64_t flow_id)
{
    return kh_get(uct_crypt_flow_ids, &iface->ended_flows, flow_id) !=
           kh_end(&iface->ended_flows);
}

/* crypt's own wire: the connection `conn_id` ended, and the flows whose
 * HELLO came on it with it (a flow's records all take its one connection) */
void uct_crypt_rx_flows_conn_ended(uct_crypt_iface_t *iface, uint64_t conn_id)
{
    khiter_t iter;

    for (iter = kh_begin(&iface->rx_flows); iter != kh_end(&iface->rx_flows);
         ++iter) {
        if (kh_exist(&iface->rx_flows, iter) &&
            (kh_value(&iface->rx_flows, iter)->wire_conn == conn_id)) {
            iface->wire_ended[iface->wire_ended_next++ %
                              UCT_CRYPT_WIRE_ENDED_RECENT] =
                    kh_value(&iface->rx_flows, iter)->flow_id;
            uct_crypt_rx_flow_remove(iface, iter);
        }
    }
}

void uct_crypt_rx_flows_cleanup(uct_crypt_iface_t *iface)
{
    uct_crypt_rx_flow_t *flow;
    uct_crypt_peer_t *peer;

    kh_foreach_value(&iface->rx_flows, flow, uct_crypt_rx_flow_free(flow));
    kh_foreach_value(&iface->peers, peer, ucs_free(peer));
    kh_destroy_inplace(uct_crypt_rx_flows, &iface->rx_flows);
    kh_destroy_inplace(uct_crypt_flow_ids, &iface->ended_flows);
    kh_destroy_inplace(uct_crypt_peers, &iface->peers);
    kh_destroy_inplace(uct_crypt_sources, &iface->sources);
    if (iface->trial_keys != NULL) {
        keyex_secure_free(iface->trial_keys, sizeof(*iface->trial_keys));
        iface->trial_keys = NULL;
    }
}

/* ---- the end of a sending flow over a UCX inner ----------------------------- */

/*
 * The end of a flow over a UCX inner (rc, ud, dc), which has no connection
 * whose end would tell the receiver: its last record says so (FLOW_END,
 * base/format.h), and the receiver frees the flow's state and keys
 * instead of keeping them until its iface closes (issue 29, item 6). The
 * inner ep stays until that record has left (a flush, as UCP discards its
 * own eps: ucp_worker_discard_uct_ep), or UCT_CRYPT_FLOW_END_WAIT while
 * the inner has no room for the flush.
 * Best effort: an ep that failed, never sent, or has bulk work still in
 * flight sends none, and the receiver's bounds (UCX_CRYPT_RX_FLOWS) hold
 * what is left.
 */
#define UCT_CRYPT_FLOW_END_WAIT 2.0 /* seconds */

typedef enum {
    UCT_CRYPT_CLOSING_FLUSH,    /* flush again: the inner had no room */
    UCT_CRYPT_CLOSING_FLUSHING, /* the flush's completion comes */
    UCT_CRYPT_CLOSING_DONE      /* flushed: destroy */
} uct_crypt_closing_state_t;

typedef struct {
    uct_completion_t          comp;
    ucs_list_link_t           list;     /* in iface->closing */
    uct_ep_h                  inner;
    ucs_time_t                deadline;
    uct_crypt_closing_state_t state;
} uct_crypt_closing_t;

static void uct_crypt_closing_flushed(uct_completion_t *self)
{
    ucs_container_of(self, uct_crypt_closing_t, comp)->state =
            UCT_CRYPT_CLOSING_DONE;
}

static int uct_crypt_closing_flush(uct_crypt_closing_t *closing)
{
    ucs_status_t status;

    closing->comp.func   = uct_crypt_closing_flushed;
    closing->comp.count  = 1;
    closing->comp.status = UCS_OK;
    status = uct_ep_flush(closing->inner, UCT_FLUSH_FLAG_LOCAL, &closing->comp);
    if (status == UCS_INPROGRESS) {
        closing->state = UCT_CRYPT_CLOSING_FLUSHING;
    } else if ((status == UCS_ERR_NO_RESOURCE) &&
               (ucs_get_time() < closing->deadline)) {
        closing->state = UCT_CRYPT_CLOSING_FLUSH;
    } else {
        closing->state = UCT_CRYPT_CLOSING_DONE; /* flushed, failed or late */
    }
    return closing->state == UCT_CRYPT_CLOSING_DONE;
}

/* The inner ep goes. A flush still outstanding may complete from inside
 * its destroy (canceled) or, on some inners, later from the inner iface:
 * its completion lives on until the iface closes then
 * (uct_crypt_iface_closing_free). */
static void uct_crypt_closing_destroy(uct_crypt_closing_t *closing)
{
    uct_ep_destroy(closing->inner);
    closing->inner = NULL;
    if (closing->state != UCT_CRYPT_CLOSING_FLUSHING) {
        ucs_list_del(&closing->list);
        ucs_free(closing);
    }
}

static unsigned uct_crypt_iface_closing_progress(void *arg)
{
    uct_crypt_iface_t *iface = arg;
    uct_crypt_closing_t *closing, *tmp;
    unsigned count           = 0;

    ucs_list_for_each_safe(closing, tmp, &iface->closing, list) {
        if ((closing->state == UCT_CRYPT_CLOSING_FLUSH) &&
            !uct_crypt_closing_flush(closing)) {
            continue; /* (uct_crypt_closing_flush: DONE once late) */
        }
        if (closing->state == UCT_CRYPT_CLOSING_DONE) {
            uct_crypt_closing_destroy(closing);
            ++count;
        }
    }
    if (ucs_list_is_empty(&iface->closing)) {
        uct_worker_progress_unregister_safe(&iface->super.worker->super,
                                            &iface->closing_cb_id);
    }
    return count;
}

/* The inner reports an error on `inner_ep`: if it is one kept after its
 * crypt ep went, the error is ours to take (nobody above knows the ep) and
 * the ep goes; a flush outstanding on it completes with the error */
int uct_crypt_iface_closing_failed(uct_crypt_iface_t *iface, uct_ep_h inner_ep)
{
    uct_crypt_closing_t *closing;

    ucs_list_for_each(closing, &iface->closing, list) {
        if (closing->inner == inner_ep) {
            if (closing->state == UCT_CRYPT_CLOSING_FLUSH) {
                closing->state = UCT_CRYPT_CLOSING_DONE;
            }
            return 1;
        }
    }
    return 0;
}

/* The iface closes: the inner eps still kept go now, before the inner
 * iface. Nothing waits here for a peer: a FLOW_END that does not make it
 * is what sleeping flows are for (record/keys.c). */
void uct_crypt_iface_closing_cleanup(uct_crypt_iface_t *iface)
{
    uct_crypt_closing_t *closing, *tmp;

    uct_worker_progress_unregister_safe(&iface->super.worker->super,
                                        &iface->closing_cb_id);
    ucs_list_for_each_safe(closing, tmp, &iface->closing, list) {
        if (closing->inner != NULL) {
            uct_crypt_closing_destroy(closing);
        }
    }
}

/* ... and once the inner iface is closed, no completion can come */
void uct_crypt_iface_closing_free(uct_crypt_iface_t *iface)
{
    uct_crypt_closing_t *closing, *tmp;

    ucs_list_for_each_safe(closing, tmp, &iface->closing, list) {
        ucs_list_del(&closing->list);
        ucs_free(closing);
    }
}

int uct_crypt_ep_send_flow_end(uct_crypt_ep_t *ep, uct_crypt_iface_t *iface)
{
    crypt_flow_end_t end;

    if ((iface->inner_ops->flags & UCT_CRYPT_INNER_PROVES_PEERS) ||
        !ep->tx.hello_done || ep->failed || !uct_crypt_bulk_ep_idle(ep)) {
        return 0;
    }
    memset(&end, 0, sizeof(end));
    end.kind = CRYPT_CONTROL_FLOW_END;
    return uct_crypt_ep_send_control(ep, &end, sizeof(end)) == UCS_OK;
}

/* `inner` goes once what was sent on it has left */
void uct_crypt_ep_close_inner(uct_crypt_iface_t *iface, uct_ep_h inner)
{
    uct_crypt_closing_t *closing = ucs_malloc(sizeof(*closing),
                                              "crypt closing ep");

    if (closing == NULL) {
        uct_ep_destroy(inner);
        return;
    }
    closing->inner    = inner;
    closing->deadline = ucs_get_time() +
                        ucs_time_from_sec(UCT_CRYPT_FLOW_END_WAIT);
    ucs_list_add_tail(&iface->closing, &closing->list);
    if (uct_crypt_closing_flush(closing)) {
        uct_crypt_closing_destroy(closing);
        return;
    }
    uct_worker_progress_register_safe(&iface->super.worker->super,
                                      uct_crypt_iface_closing_progress, iface,
                                      0, &iface->closing_cb_id);
}

/*
 * A disconnect after the data (cm/README.md): UCP 1.13 fails a connected
 * ep at its peer's disconnect and drops the stream data it holds for it
 * (ucp_ep_cm_remote_disconnect_progress), and the connection manager's
 * socket may overtake the data connections. So the DISCONNECT names where
 * each of the sender's flows to our iface ended, and the connection
 * manager reports it only once they have delivered that far.
 */
unsigned uct_crypt_flow_marks(uct_worker_h worker, const char *dev_name,
                              const uint8_t *peer_key,
                              crypt_cm_flow_mark_t *marks, unsigned max)
{
    uct_crypt_iface_t *iface = uct_crypt_iface_find(worker, dev_name);
    unsigned count           = 0;
    uct_crypt_ep_t *ep;

    if (iface == NULL) {
        return 0;
    }
    ucs_list_for_each(ep, &iface->eps, list) {
        if (count == max) {
            break; /* (the rest are not waited for) */
        }
        if (ep->peer_known && ep->tx.hello_done && !ep->failed &&
            !memcmp(ep->peer_public, peer_key, KEYEX_PUBLIC_KEY_LEN)) {
            marks[count].flow_id = htole64(ep->tx.flow_id);
            marks[count].end     = htole64(ep->tx.next_sequence);
            ++count;
        }
    }
    return count;
}

static int uct_crypt_flow_wire_ended(const uct_crypt_iface_t *iface,
                                     uint64_t flow_id)
{
    unsigned i;

    for (i = 0; i < ucs_min(iface->wire_ended_next, UCT_CRYPT_WIRE_ENDED_RECENT); ++i) {
        if (iface->wire_ended[i] == flow_id) {
            return 1;
        }
    }
    return 0;
}

int uct_crypt_flows_delivered(uct_worker_h worker, const char *dev_name,
                              const crypt_cm_flow_mark_t *marks,
                              unsigned count)
{
    uct_crypt_iface_t *iface = uct_crypt_iface_find(worker, dev_name);
    uct_crypt_rx_flow_t *flow;
    uint64_t flow_id;
    khiter_t iter;
    unsigned i;

    for (i = 0; (iface != NULL) && (i < count); ++i) {
        flow_id = le64toh(marks[i].flow_id);
        iter    = kh_get(uct_crypt_rx_flows, &iface->rx_flows, flow_id);
        if (iter == kh_end(&iface->rx_flows)) {
            if (!uct_crypt_rx_flow_was_ended(iface, flow_id) &&
                !uct_crypt_flow_wire_ended(iface, flow_id)) {
                return 0; /* its HELLO is still on its way */
            }
            continue;
        }
        flow = kh_value(&iface->rx_flows, iter);
        if (!flow->failed && (flow->next_sequence < le64toh(marks[i].end))) {
            return 0;
        }
    }
    return 1;
}
