/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The sending side of the bulk engine: an ep's puts are cut into segments,
 * sealed (by the pool, or inline), put by the inner transport to where
 * their plaintext belongs, and announced by a SEGMENT record, strictly in
 * order per ep; and the ep fence that keeps later sends behind bulk work
 * still inside crypt.
 */
#include "uct_crypt/bulk/bulk.h"

#include <ucs/sys/math.h>

/*
 * Segment sizes ramp: the first is at most UCT_CRYPT_BULK_RAMP_FIRST, each
 * next twice the one before, up to the segment size (CryptMPI's model,
 * Naser et al. section IV-C: a message costs its plaintext time plus one
 * segment sealed before anything is on the wire and one opened after
 * everything arrived; a small first segment puts the first byte on the
 * wire sooner, and large ones later keep the per-segment cost low).
 * Segment `index` of a put starts at the returned offset, *length_p bytes
 * long (what is left of the put, at the end).
 */
static size_t uct_crypt_bulk_span(const uct_crypt_bulk_t *bulk,
                                  const uct_crypt_bulk_op_t *op, uint32_t index,
                                  size_t *length_p)
{
    size_t first = ucs_min(UCT_CRYPT_BULK_RAMP_FIRST, bulk->segment);
    size_t size = first, offset = 0;
    uint32_t i;

    for (i = 0; (i < index) && (size < bulk->segment); ++i) {
        offset += size;
        size    = ucs_min(2 * size, bulk->segment);
    }
    offset   += (size_t)(index - i) * size;
    *length_p = ucs_min(size, op->length - offset);
    return offset;
}

/* Segments of an m-byte put (at least one: an empty put is one empty
 * segment) */
static uint32_t uct_crypt_bulk_num_segments(const uct_crypt_bulk_t *bulk,
                                            size_t length)
{
    size_t size = ucs_min(UCT_CRYPT_BULK_RAMP_FIRST, bulk->segment), done = 0;
    uint32_t n  = 0;

    while ((size < bulk->segment) && (done < length)) {
        done += size;
        size  = ucs_min(2 * size, bulk->segment);
        ++n;
    }
    n += (uint32_t)ucs_div_round_up(length - ucs_min(done, length), size);
    return ucs_max(n, 1);
}

/* On a pool thread (or the progress thread, worker 0) */
static void uct_crypt_bulk_seal_job(crypt_pool_job_t *job, unsigned worker)
{
    uct_crypt_bulk_segment_t *seg = ucs_container_of(job,
                                                     uct_crypt_bulk_segment_t,
                                                     job);
    uct_crypt_bulk_op_t *op       = seg->op;
    uct_crypt_bulk_tx_t *tx       = op->tx;
    crypt_aead_key_t *key         = &tx->aead[worker];
    uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN];
    crypt_bulk_aad_t aad;

    seg->seal_failure = NULL;
    if ((key->impl == NULL) &&
        (crypt_aead_key_init(key, tx->backend, tx->keys->key,
                             tx->keys->key_len) != CRYPT_AEAD_OK)) {
        seg->seal_status  = CRYPT_AEAD_ERR_BACKEND;
        /* (this thread's reason: the progress thread tells it) */
        seg->seal_failure = crypt_local_failure();
        return;
    }
    uct_crypt_bulk_stream_prefix(prefix, op->put_id);
    uct_crypt_bulk_aad(&aad, tx->ep->tx.flow_id, op->put_id,
                       op->remote_addr + seg->offset, seg->length);
    seg->seal_status = crypt_stream_seal_segment(key, prefix, seg->index,
                                                 seg->last, &aad, sizeof(aad),
                                                 op->src + seg->offset,
                                                 seg->length, seg->bounce,
                                                 seg->tag);
    if (seg->seal_status != CRYPT_AEAD_OK) {
        seg->seal_failure = "the cipher failed to seal";
    }
}

static void uct_crypt_bulk_put_done(uct_completion_t *self)
{
    uct_crypt_bulk_segment_t *seg = ucs_container_of(self,
                                                     uct_crypt_bulk_segment_t,
                                                     put_comp);
    seg->put_done = 1;
}

static void uct_crypt_bulk_announce(crypt_bulk_segment_t *announce,
                                    const uct_crypt_bulk_segment_t *seg,
                                    int with_tag)
{
    const uct_crypt_bulk_op_t *op = seg->op;

    memset(announce, 0, sizeof(*announce));
    announce->kind       = CRYPT_CONTROL_SEGMENT;
    announce->last       = seg->last;
    announce->generation = htole16(op->generation);
    announce->index      = htole32(seg->index);
    announce->put_id     = htole64(op->put_id);
    announce->address    = htole64(op->remote_addr + seg->offset);
    announce->length     = htole64(seg->length);
    announce->token      = htole64(op->token);
    if (with_tag) {
        memcpy(announce->tag, seg->tag, sizeof(announce->tag));
    }
}

/* An inner with inline segments (crypt's own wire): the SEGMENT record, then at once the segment's frame,
 * ciphertext and tag: sealed by the pool into a bounce buffer and copied
 * (`seal_here` 0), or sealed here straight into the frame. 0: no room on
 * the connection yet (nothing was sent); -1: the ep failed. */
static int uct_crypt_bulk_wire_send(uct_crypt_bulk_tx_t *tx,
                                    uct_crypt_bulk_segment_t *seg, int seal_here)
{
    uct_crypt_ep_t *ep                = tx->ep;
    const uct_crypt_inner_ops_t *ops  = tx->bulk->iface->inner_ops;
    size_t frame_len                  = seg->length + CRYPT_AEAD_TAG_LEN;
    int skip_announce                 = 0;
    crypt_bulk_segment_t announce;
    uint8_t *frame;

    if (!ops->ep_segment_room(ep->inner,
                              CRYPT_RECORD_OVERHEAD_MAX + sizeof(announce),
                              frame_len)) {
        return 0;
    }
    uct_crypt_bulk_announce(&announce, seg, 0); /* the tag is in the frame */
    if (ucs_unlikely(seg->tamper)) {
        if (uct_crypt_bulk_fault_announce(tx->bulk->iface, &announce)) {
            return 1; /* tests: dropped, with its frame */
        }
        skip_announce = uct_crypt_bulk_fault_frame(tx->bulk->iface, &frame_len);
    }
    if (!skip_announce &&
        (uct_crypt_ep_send_control(ep, &announce, sizeof(announce)) != UCS_OK)) {
        return -1;
    }
    /* (the whole frame: a test hook may have shortened what is sent) */
    frame = ops->ep_segment_reserve(ep->inner, seg->length + CRYPT_AEAD_TAG_LEN);
    if (frame == NULL) {
        /* room was checked: the ep failed under us */
        uct_crypt_ep_fail_local(ep, "no room for a bulk segment behind its "
                                "announcement");
        return -1;
    }
    if (seal_here) {
        seg->bounce = frame;
        uct_crypt_bulk_seal_job(&seg->job, 0);
        if (seg->seal_status != CRYPT_AEAD_OK) {
            crypt_local_failure_set(seg->seal_failure);
            uct_crypt_ep_fail_local(ep, "sealing a bulk segment failed");
            return -1;
        }
        if (ucs_unlikely(seg->tamper)) {
            uct_crypt_bulk_fault_seal(tx->bulk->iface, frame, seg->length);
        }
    } else {
        memcpy(frame, seg->bounce, seg->length);
    }
    memcpy(frame + seg->length, seg->tag, CRYPT_AEAD_TAG_LEN);
    if (ucs_unlikely(seg->tamper)) {
        uct_crypt_bulk_fault_frame_tag(tx->bulk->iface, frame + seg->length);
    }
    ops->ep_segment_commit(ep->inner, frame_len);
    return 1;
}

/* Crypt's own wire, sealing on this thread with nothing queued before it:
 * segments are sealed straight into their frames (no bounce buffer, no
 * copy), each as soon as the connection has room. 0: stop for now. */
static int uct_crypt_bulk_wire_direct(uct_crypt_bulk_tx_t *tx,
                                      uct_crypt_bulk_op_t *op)
{
    uct_crypt_bulk_t *bulk = tx->bulk;
    uct_crypt_bulk_segment_t *seg;
    size_t length, offset = uct_crypt_bulk_span(bulk, op, op->next_to_seal,
                                                &length);
    int ret;

    seg = ucs_mpool_get(&bulk->seg_mp);
    if (seg == NULL) {
        return 0; /* retried from progress */
    }
    memset(seg, 0, sizeof(*seg));
    seg->op     = op;
    seg->index  = op->next_to_seal;
    seg->last   = (op->next_to_seal + 1 == op->num_segments);
    seg->offset = offset;
    seg->length = length;
    if (op->next_to_seal == 0) {
        op->generation = (uint16_t)tx->keys->generation;
    }
    seg->tamper = uct_crypt_bulk_fault_due(bulk->iface);
    ret         = uct_crypt_bulk_wire_send(tx, seg, 1);
    if (ret > 0) {
        tx->segments_this_key++;
        tx->bytes_this_key += seg->length;
    }
    ucs_mpool_put(seg);
    if (ret <= 0) {
        return 0;
    }
    ++op->next_to_seal;
    ++op->announced;
    return 1;
}

/* Start sealing segments while bounce space lasts. */
void uct_crypt_bulk_tx_seal(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_bulk_t *bulk = tx->bulk;
    uct_crypt_md_t *md = ucs_derived_of(bulk->iface->super.md, uct_crypt_md_t);
    uct_crypt_bulk_segment_t *seg;
    uct_crypt_bulk_op_t *op;
    size_t offset, length;

    op = (tx->seal_op != NULL) ? tx->seal_op :
         ucs_list_head(&tx->ops, uct_crypt_bulk_op_t, list);
    for (; &op->list != &tx->ops;
         op = ucs_list_next(&op->list, uct_crypt_bulk_op_t, list)) {
        tx->seal_op = op;
        while (op->next_to_seal < op->num_segments) {
            if (!bulk->naive && ucs_list_is_empty(&bulk->free_slots)) {
                return; /* bounded: the rest waits for a free slot */
            }
            if ((op->next_to_seal == 0) &&
                !uct_crypt_bulk_tx_key_ready(tx, op->length)) {
                return;
            }
            if (bulk->inline_segments && ucs_list_is_empty(&tx->segments) &&
                (op->inline_seal || (bulk->pool == NULL) ||
                 (crypt_pool_active(bulk->pool) == 0))) {
                if (!uct_crypt_bulk_wire_direct(tx, op)) {
                    return;
                }
                continue;
            }
            seg = ucs_mpool_get(&bulk->seg_mp);
            if (seg == NULL) {
                return; /* retried from progress */
            }
            memset(seg, 0, sizeof(*seg));
            offset        = uct_crypt_bulk_span(bulk, op, op->next_to_seal,
                                                &length);
            seg->op       = op;
            seg->index    = op->next_to_seal;
            seg->last     = (op->next_to_seal + 1 == op->num_segments);
            seg->offset   = bulk->naive ? 0 : offset;
            seg->length   = bulk->naive ? op->length : length;
            seg->put_comp.func   = uct_crypt_bulk_put_done;
            seg->put_comp.count  = 1;
            seg->put_comp.status = UCS_OK;
            seg->bounce_memh     = bulk->bounce_memh;
            if (bulk->naive) {
                /* the baseline: a buffer for the whole message */
                seg->bounce      = ucs_malloc(ucs_max(seg->length, 1),
                                              "crypt naive bounce");
                seg->bounce_memh = UCT_MEM_HANDLE_NULL;
                if ((seg->bounce == NULL) ||
                    (md->inner_reg &&
                     (uct_md_mem_reg(md->inner_md, seg->bounce,
                                     ucs_max(seg->length, 1),
                                     UCT_MD_MEM_ACCESS_ALL,
                                     &seg->bounce_memh) != UCS_OK))) {
                    ucs_free(seg->bounce);
                    ucs_mpool_put(seg);
                    return;
                }
            } else {
                seg->slot   = ucs_list_extract_head(&bulk->free_slots,
                                                    uct_crypt_bulk_slot_t, list);
                seg->bounce = seg->slot->buffer;
            }
            if (op->next_to_seal == 0) {
                op->generation = (uint16_t)tx->keys->generation;
            }
            tx->segments_this_key++;
            tx->bytes_this_key += seg->length;
            ++op->next_to_seal;
            seg->state   = UCT_CRYPT_SEG_SEALING;
            seg->job.run = uct_crypt_bulk_seal_job;
            ucs_list_add_tail(&tx->segments, &seg->list);
            if (op->inline_seal || (bulk->pool == NULL) ||
                (crypt_pool_active(bulk->pool) == 0)) {
                crypt_pool_run_inline(&seg->job);
                /* on this thread: send each segment as soon as it is
                 * sealed, so the target opens it while we seal the next;
                 * and do not seal ahead of a blocked inner (the wire would
                 * idle while we do) */
                uct_crypt_bulk_tx_send(tx, 0);
                if (!ucs_list_is_empty(&tx->segments) &&
                    (ucs_list_tail(&tx->segments, uct_crypt_bulk_segment_t,
                                   list)->state < UCT_CRYPT_SEG_PUT)) {
                    return;
                }
            } else {
                crypt_pool_submit(bulk->pool, &seg->job);
            }
        }
    }
}

/* Put sealed segments and announce them, strictly in order; with `help`
 * (from progress, where this thread would otherwise wait) the segment the
 * wire waits for is sealed here if no pool thread took it yet. */
unsigned uct_crypt_bulk_tx_send(uct_crypt_bulk_tx_t *tx, int help)
{
    uct_crypt_ep_t *ep = tx->ep;
    uct_crypt_bulk_segment_t *seg, *tmp;
    crypt_bulk_segment_t announce;
    uct_crypt_bulk_op_t *op;
    ucs_status_t status;
    unsigned count = 0;
    uct_iov_t iov;

    ucs_list_for_each_safe(seg, tmp, &tx->segments, list) {
        op = seg->op;
        if (seg->state == UCT_CRYPT_SEG_SEALING) {
            if (!(help ? crypt_pool_run_here(tx->bulk->pool, &seg->job) :
                  crypt_pool_job_done(&seg->job))) {
                break;
            }
            if (seg->seal_status != CRYPT_AEAD_OK) {
                crypt_local_failure_set(seg->seal_failure);
                uct_crypt_ep_fail_local(ep, "sealing a bulk segment failed");
                break;
            }
            ucs_assert((op != NULL) && (op->tx == tx));
            seg->state = UCT_CRYPT_SEG_SEALED;
            /* tests: once per segment, not per retry of its put */
            seg->tamper = uct_crypt_bulk_fault_due(tx->bulk->iface);
            if (ucs_unlikely(seg->tamper)) {
                uct_crypt_bulk_fault_seal(tx->bulk->iface, seg->bounce,
                                          seg->length);
            }
        }
        if (seg->state == UCT_CRYPT_SEG_SEALED) {
            if (seg->length == 0) {
                seg->put_done = 1;
            } else if (tx->bulk->inline_segments) {
                /* crypt's own wire: the data goes behind its announcement */
            } else {
                iov.buffer = seg->bounce;
                iov.length = seg->length;
                iov.memh   = seg->bounce_memh;
                iov.stride = 0;
                iov.count  = 1;
                status = uct_ep_put_zcopy(ep->inner, &iov, 1,
                                          op->remote_addr + seg->offset,
                                          op->inner_rkey, &seg->put_comp);
                if (status == UCS_ERR_NO_RESOURCE) {
                    break;
                } else if (status == UCS_OK) {
                    seg->put_done = 1;
                } else if (status != UCS_INPROGRESS) {
                    /* the inner ep failed: its error handler reports it */
                    break;
                }
            }
            ucs_assert(seg->state == UCT_CRYPT_SEG_SEALED);
            seg->state = UCT_CRYPT_SEG_PUT;
        }
        if ((seg->state == UCT_CRYPT_SEG_PUT) && tx->bulk->inline_segments) {
            /* crypt's own wire: the data follows its announcement, in the
             * very next frame */
            if (uct_crypt_bulk_wire_send(tx, seg, 0) <= 0) {
                break; /* again from progress, once the socket drained */
            }
            seg->put_done = 1;
            seg->state    = UCT_CRYPT_SEG_ANNOUNCED;
            ++op->announced;
            ++count;
        } else if (seg->state == UCT_CRYPT_SEG_PUT) {
            /* the announcement must not overtake the data */
            uct_ep_fence(ep->inner, 0);
            uct_crypt_bulk_announce(&announce, seg, 1);
            if (ucs_unlikely(seg->tamper) &&
                uct_crypt_bulk_fault_announce(tx->bulk->iface, &announce)) {
                status = UCS_OK; /* "sent" */
            } else {
                status = uct_crypt_ep_send_control(ep, &announce,
                                                   sizeof(announce));
            }
            if (status != UCS_OK) {
                break; /* NO_RESOURCE: again from progress */
            }
            ucs_assert(op->announced < op->num_segments);
            seg->state = UCT_CRYPT_SEG_ANNOUNCED;
            ++op->announced;
            ++count;
        }
        if (seg->put_done) {
            ucs_list_del(&seg->list);
            uct_crypt_bulk_segment_free(tx->bulk, seg);
        }
    }
    return count;
}

void uct_crypt_bulk_tx_flushes(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_bulk_flush_t *flush, *tmp;
    ucs_status_t status;

    if (!ucs_list_is_empty(&tx->ops) || !ucs_list_is_empty(&tx->gets)) {
        return;
    }
    ucs_list_for_each_safe(flush, tmp, &tx->flushes, list) {
        status = uct_ep_flush(tx->ep->inner, flush->flags, flush->comp);
        if (status == UCS_ERR_NO_RESOURCE) {
            return;
        }
        if (status != UCS_INPROGRESS) {
            uct_invoke_completion(flush->comp, status);
        }
        ucs_list_del(&flush->list);
        ucs_free(flush);
    }
}

int uct_crypt_bulk_tx_idle(uct_crypt_bulk_tx_t *tx)
{
    return ucs_list_is_empty(&tx->ops) && ucs_list_is_empty(&tx->segments) &&
           ucs_list_is_empty(&tx->flushes) && ucs_list_is_empty(&tx->gets) &&
           (tx->ep->fence == UCT_CRYPT_FENCE_NONE);
}

/* ---- fence ----------------------------------------------------------------
 * uct_ep_fence orders what is posted after it behind what was posted
 * before it. The inner's fence covers the inner's operations, but a bulk
 * put stays inside crypt until its last segment is announced, and a get
 * until its answer landed. Behind such work, later sends on the ep answer
 * NO_RESOURCE and their pending requests wait in the ep's own queue until
 * the fence is clear:
 * - a put must be announced: the target opens segments in flow order,
 *   before any record sent after them is delivered;
 * - a get must be done: the target reads (seals) the range on its pool,
 *   possibly after later records were delivered to it. */
void uct_crypt_bulk_ep_fence(uct_crypt_ep_t *ep)
{
    uct_crypt_bulk_tx_t *tx = ep->bulk;

    if ((tx == NULL) || ep->failed ||
        (ucs_list_is_empty(&tx->ops) && ucs_list_is_empty(&tx->gets))) {
        return; /* nothing inside crypt to wait for */
    }
    tx->fence_put_id = tx->next_put_id;
    tx->fence_get_id = tx->next_get_id;
    ep->fence        = UCT_CRYPT_FENCE_WAIT;
    /* posted by a request dispatched from behind the last fence (UCP's
     * fenced rendezvous posts the next message's puts, a fence and its
     * ATP from there): what follows waits for this one, and so do the
     * requests still queued. Letting the dispatch go on let that ATP out
     * ahead of its puts; the target completed a receive whose data was
     * not in place (UCX's test_ucp_tag_match_rndv.bidir_multi_exp_post) */
    ep->fence_dispatching = 0;
    uct_crypt_bulk_activate(tx);
}

static int uct_crypt_bulk_fence_clear(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_bulk_op_t *op;
    uct_crypt_bulk_get_t *get;

    ucs_list_for_each(op, &tx->ops, list) {      /* in put_id order */
        if (op->put_id >= tx->fence_put_id) {
            break;
        }
        if (op->announced < op->num_segments) {
            return 0;
        }
    }
    if (!ucs_list_is_empty(&tx->gets)) {          /* done in get_id order */
        get = ucs_list_head(&tx->gets, uct_crypt_bulk_get_t, list);
        if (get->get_id < tx->fence_get_id) {
            return 0;
        }
    }
    return 1;
}

/* Once clear, the requests that waited go first, in order; a request the
 * inner refuses stays at the head and sends stay blocked until it went */
void uct_crypt_bulk_tx_fence(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_ep_t *ep = tx->ep;
    uct_pending_req_priv_queue_t *priv;

    if ((ep->fence == UCT_CRYPT_FENCE_WAIT) && uct_crypt_bulk_fence_clear(tx)) {
        ucs_assert(!ep->fence_dispatching);
        ep->fence = UCT_CRYPT_FENCE_DRAIN;
    }
    if (ep->fence == UCT_CRYPT_FENCE_DRAIN) {
        /* (a fence that a dispatched request posts ends the dispatch:
         * uct_crypt_bulk_ep_fence clears fence_dispatching) */
        ep->fence_dispatching = 1;
        uct_pending_queue_dispatch(priv, &ep->fence_pending,
                                   ep->fence_dispatching);
        ep->fence_dispatching = 0;
        if ((ep->fence == UCT_CRYPT_FENCE_DRAIN) &&
            ucs_queue_is_empty(&ep->fence_pending)) {
            ep->fence = UCT_CRYPT_FENCE_NONE;
        }
    }
}

/* One bulk put of a contiguous span (put_zcopy, and the answer to a get) */
ucs_status_t uct_crypt_bulk_put(uct_crypt_ep_t *ep, const void *src,
                                size_t length, uint64_t remote_addr,
                                const uct_crypt_rkey_t *rkey,
                                uct_completion_t *comp)
{
    uct_crypt_bulk_tx_t *tx;
    uct_crypt_bulk_op_t *op;

    tx = uct_crypt_bulk_tx_get(ep);
    op = (tx != NULL) ? ucs_mpool_get(&tx->bulk->op_mp) : NULL;
    if (op == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memset(op, 0, sizeof(*op));
    op->tx           = tx;
    op->src          = src;
    op->length       = length;
    op->remote_addr  = remote_addr;
    op->inner_rkey   = rkey->inner.rkey;
    op->token        = rkey->token;
    op->comp         = comp;
    op->put_id       = tx->next_put_id++;
    op->num_segments = tx->bulk->naive ? 1 :
                       uct_crypt_bulk_num_segments(tx->bulk, length);
    op->inline_seal  = (tx->bulk->outstanding >= tx->bulk->max_outstanding);
    ++tx->bulk->outstanding;
    ucs_list_add_tail(&tx->ops, &op->list);

    uct_crypt_bulk_activate(tx);
    uct_crypt_bulk_tx_seal(tx);
    uct_crypt_bulk_tx_send(tx, 0);
    return UCS_INPROGRESS;
}

ucs_status_t uct_crypt_bulk_check_iov(uct_crypt_ep_t *ep,
                                      const uct_iov_t *iov, size_t iovcnt)
{
    if (ucs_unlikely(ep->failed)) {
        return UCS_ERR_CONNECTION_RESET;
    }
    if (ucs_unlikely(!ep->peer_known)) {
        return UCS_ERR_NOT_CONNECTED;
    }
    if (ucs_unlikely(uct_crypt_ep_fenced(ep))) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (ucs_unlikely((iovcnt != 1) || (iov[0].count != 1) ||
                     (iov[0].length > UCT_CRYPT_BULK_MAX_PUT))) {
        return UCS_ERR_INVALID_PARAM; /* as advertised: one contiguous span */
    }
    return UCS_OK;
}

ucs_status_t uct_crypt_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_crypt_ep_t *ep  = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    ucs_status_t status = uct_crypt_bulk_check_iov(ep, iov, iovcnt);

    if (status != UCS_OK) {
        return status;
    }
    return uct_crypt_bulk_put(ep, iov[0].buffer, iov[0].length, remote_addr,
                              (const uct_crypt_rkey_t*)rkey, comp);
}
