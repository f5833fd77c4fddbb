/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine of an iface (README.md): encrypted put_zcopy, which gives
 * UCP back its RMA rendezvous (and multi-rail) over crypt; a put cut into
 * segments (CryptMPI's chopping, Naser et al., section IV-B) sealed by the
 * pool and opened in place by the target's, the put completed only once
 * the target acknowledged its last segment. Here: its options, the bounce
 * segments (`depth`, registered once; a put waits, never fails, when all
 * are in flight), the pool, the progress thread's loop (the only thread
 * that calls UCT; it runs the job it waits for when no pool thread took
 * it), sleeping progress, flush and cancel. Above `max_outstanding` puts
 * in flight a put is sealed on the progress thread (CryptMPI's k = 1).
 * Naive mode (the paper's baseline, test builds): the whole put one
 * segment, sealed by the progress thread, sent, then opened.
 */
#include "uct_crypt/bulk/bulk.h"

#include <ucs/sys/string.h>
#include <ucs/sys/math.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <stdarg.h>
#include <stdio.h>

/* ---- configuration and profile ------------------------------------------- */

static void uct_crypt_bulk_profile_warn(const char *fmt, ...)
{
    char message[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    ucs_warn("%s", message);
}

/* A calibration profile (bulk/bulk_input.h), where one is named */
static void uct_crypt_bulk_read_profile(const char *path, size_t *segment,
                                        unsigned long *threads)
{
    FILE *file;

    if ((path == NULL) || (path[0] == '\0')) {
        return;
    }
    file = fopen(path, "r");
    if (file == NULL) {
        ucs_warn("crypt: cannot read UCX_CRYPT_PROFILE=%s (%m): using defaults",
                 path);
        return;
    }
    uct_crypt_bulk_profile_parse(file, path, segment, threads,
                                 uct_crypt_bulk_profile_warn);
    fclose(file);
}

/* Ranks of this job on this node, as MPI launchers announce them (Open
 * MPI, MPICH/hydra, Slurm); 0 if unknown. CryptMPI's T1. */
static unsigned uct_crypt_bulk_local_ranks(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                 "SLURM_NTASKS_PER_NODE"};
    const char *value;
    unsigned i;

    for (i = 0; i < ucs_static_array_size(vars); ++i) {
        value = getenv(vars[i]);
        if ((value != NULL) && (atoi(value) > 0)) {
            return (unsigned)atoi(value);
        }
    }
    return 0;
}

/* On a pool thread, after a job's done flag: wake the progress thread if
 * it is (about to be) asleep. The fence pairs with the one in event_arm:
 * either arm sees the done flag or this sees `armed`. */
static void uct_crypt_bulk_signal(uct_crypt_bulk_t *bulk)
{
    uint64_t one = 1;

    if (write(bulk->wake_fd, &one, sizeof(one)) < 0) {
        /* the counter is full: the fd is readable anyway */
    }
}

static void uct_crypt_bulk_wake(void *arg)
{
    uct_crypt_bulk_t *bulk = arg;

    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&bulk->armed, 0, __ATOMIC_SEQ_CST)) {
        uct_crypt_bulk_signal(bulk);
    }
}

ucs_status_t uct_crypt_bulk_init(uct_crypt_iface_t *iface,
                                 const uct_crypt_iface_config_t *config)
{
    uct_crypt_md_t *md = ucs_derived_of(iface->super.md, uct_crypt_md_t);
    size_t segment          = UCT_CRYPT_BULK_DEFAULT_SEGMENT;
    unsigned long threads   = UCT_CRYPT_BULK_DEFAULT_THREADS;
    crypt_pool_params_t pool_params;
    uct_md_attr_t md_attr;
    char registry[64], error[128];
    unsigned i, local_ranks, pus;
    uct_crypt_bulk_t *bulk;
    ucs_status_t status;
    int inline_segments = !!(iface->inner_ops->flags &
                             UCT_CRYPT_INNER_INLINE_SEGMENTS);

    iface->bulk = NULL;
    if (!config->bulk ||
        (!(iface->inner_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) &&
         !inline_segments)) {
        return UCS_OK; /* AM only: UCP runs rendezvous over AM */
    }
    uct_crypt_bulk_read_profile(UCT_CRYPT_TEST_KNOB(config, profile, NULL),
                                &segment, &threads);
    if (config->bulk_segment != UCS_MEMUNITS_AUTO) {
        segment = config->bulk_segment;
    }
    if (config->bulk_threads != UCS_ULUNITS_AUTO) {
        threads = config->bulk_threads;
    } else if ((local_ranks = uct_crypt_bulk_local_ranks()) > 0) {
        /* min(T0 - T1, t), the spare PUs shared evenly between the ranks
         * (the registry below still guards against other jobs) */
        pus     = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
        threads = ucs_min(threads, (pus > local_ranks) ?
                                   (pus - local_ranks) / local_ranks : 0);
    }
    if ((segment < UCT_CRYPT_BULK_MIN_SEGMENT) || (segment > UCT_CRYPT_BULK_MAX_PUT)) {
        ucs_error("crypt: UCX_CRYPT_BULK_SEGMENT=%zu: between 4k and 1g", segment);
        return UCS_ERR_INVALID_PARAM;
    }
    if (inline_segments) {
        /* a segment is one frame of the inner (crypt's own wire) */
        if (UCT_CRYPT_TEST_KNOB(config, bulk_mode, UCT_CRYPT_BULK_PIPELINED) ==
            UCT_CRYPT_BULK_NAIVE) {
            ucs_error("crypt: UCX_CRYPT_BULK_MODE=naive needs an inner with "
                      "puts (rc); on Ethernet use pipelined");
            return UCS_ERR_INVALID_PARAM;
        }
        segment = ucs_min(segment, iface->inner_ops->segment_max);
    }

    bulk = ucs_calloc(1, sizeof(*bulk), "crypt bulk");
    if (bulk == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    bulk->iface           = iface;
    bulk->naive           = (UCT_CRYPT_TEST_KNOB(config, bulk_mode,
                                                 UCT_CRYPT_BULK_PIPELINED) ==
                             UCT_CRYPT_BULK_NAIVE);
    bulk->inline_segments = inline_segments;
    status = uct_md_query(&md->super, &md_attr);
    if (status != UCS_OK) {
        ucs_free(bulk);
        return status;
    }
    bulk->rkey_packed_size = md_attr.rkey_packed_size;
    bulk->need_memh        = !!(md_attr.cap.flags & UCT_MD_FLAG_NEED_MEMH);
    bulk->segment         = segment;
    bulk->depth           = ucs_max(config->bulk_depth, 2);
    bulk->max_outstanding = UCT_CRYPT_TEST_KNOB(config, bulk_max_outstanding,
                                                UCT_CRYPT_BULK_MAX_OUTSTANDING);
    bulk->progress_id     = UCS_CALLBACKQ_ID_NULL;
    bulk->event_fd        = -1;
    bulk->wake_fd         = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (bulk->wake_fd < 0) {
        ucs_free(bulk);
        return UCS_ERR_IO_ERROR;
    }
    ucs_list_head_init(&bulk->free_slots);
    ucs_list_head_init(&bulk->active);
    ucs_list_head_init(&bulk->pending_acks);
    ucs_list_head_init(&bulk->opening);

    /* the data path's descriptors: a segment per sealed span, an op per put */
    status = uct_crypt_mpool_init(&bulk->seg_mp, sizeof(uct_crypt_bulk_segment_t),
                                  bulk->depth, "crypt_bulk_segments");
    if (status != UCS_OK) {
        close(bulk->wake_fd);
        ucs_free(bulk);
        return status;
    }
    status = uct_crypt_mpool_init(&bulk->op_mp, sizeof(uct_crypt_bulk_op_t),
                                  bulk->max_outstanding, "crypt_bulk_puts");
    if (status != UCS_OK) {
        ucs_mpool_cleanup(&bulk->seg_mp, 0);
        close(bulk->wake_fd);
        ucs_free(bulk);
        return status;
    }
    /* the target's segments being opened: `depth` at most */
    status = uct_crypt_mpool_init(&bulk->rx_seg_mp, sizeof(uct_crypt_bulk_rx_seg_t),
                                  bulk->depth, "crypt_bulk_opening");
    if (status != UCS_OK) {
        ucs_mpool_cleanup(&bulk->op_mp, 0);
        ucs_mpool_cleanup(&bulk->seg_mp, 0);
        close(bulk->wake_fd);
        ucs_free(bulk);
        return status;
    }

    if (!bulk->naive) {
        /* one bounce area, registered once; first touch by this thread puts
         * it on our NUMA node */
        bulk->bounce_length = (size_t)bulk->depth * segment;
        bulk->bounce_base   = ucs_malloc(bulk->bounce_length, "crypt bounce");
        bulk->slots         = ucs_calloc(bulk->depth, sizeof(*bulk->slots),
                                         "crypt bounce slots");
        if ((bulk->bounce_base == NULL) || (bulk->slots == NULL)) {
            status = UCS_ERR_NO_MEMORY;
            goto err;
        }
        memset(bulk->bounce_base, 0, bulk->bounce_length);
        bulk->bounce_memh = UCT_MEM_HANDLE_NULL;
        if (md->inner_reg) {
            status = uct_md_mem_reg(md->inner_md, bulk->bounce_base,
                                    bulk->bounce_length, UCT_MD_MEM_ACCESS_ALL,
                                    &bulk->bounce_memh);
            if (status != UCS_OK) {
                goto err;
            }
        }
        for (i = 0; i < bulk->depth; ++i) {
            bulk->slots[i].buffer = bulk->bounce_base + (size_t)i * segment;
            ucs_list_add_tail(&bulk->free_slots, &bulk->slots[i].list);
        }

        snprintf(registry, sizeof(registry), UCT_CRYPT_BULK_REGISTRY_FMT,
                 (unsigned)geteuid());
        pool_params.threads       = (unsigned)ucs_min(threads,
                                                      CRYPT_POOL_MAX_THREADS);
        pool_params.pin           = 1;
        pool_params.registry      = registry;
        pool_params.oversubscribe = (config->bulk_threads != UCS_ULUNITS_AUTO);
        pool_params.notify        = uct_crypt_bulk_wake;
        pool_params.notify_arg    = bulk;
        if (crypt_pool_create(&pool_params, &bulk->pool, error,
                              sizeof(error)) != 0) {
            ucs_error("crypt: bulk engine: %s", error);
            status = UCS_ERR_NO_RESOURCE;
            goto err;
        }
    }

    ucs_debug("crypt: bulk engine %s, segment %zu, %u bounce segments, "
              "%u crypto threads (%s)", bulk->naive ? "naive" : "pipelined",
              segment, bulk->naive ? 0 : bulk->depth,
              bulk->pool ? crypt_pool_size(bulk->pool) : 0,
              bulk->pool ? crypt_pool_placement(bulk->pool) : "none");
    iface->bulk = bulk;
    return UCS_OK;

err:
    if (bulk->bounce_memh != UCT_MEM_HANDLE_NULL) {
        uct_md_mem_dereg(md->inner_md, bulk->bounce_memh);
    }
    ucs_free(bulk->slots);
    ucs_free(bulk->bounce_base);
    ucs_mpool_cleanup(&bulk->rx_seg_mp, 1);
    ucs_mpool_cleanup(&bulk->op_mp, 1);
    ucs_mpool_cleanup(&bulk->seg_mp, 1);
    close(bulk->wake_fd);
    ucs_free(bulk);
    return status;
}

void uct_crypt_bulk_cleanup(uct_crypt_iface_t *iface)
{
    uct_crypt_md_t *md     = ucs_derived_of(iface->super.md, uct_crypt_md_t);
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_pending_ack_t *pending, *tmp;

    if (bulk == NULL) {
        return;
    }
    /* every ep is gone by now (UCT closes eps before their iface); what
     * a peer sent is opened before its flows go */
    uct_crypt_bulk_rx_reap(iface, 1);
    if (bulk->progress_id != UCS_CALLBACKQ_ID_NULL) {
        uct_worker_progress_unregister_safe(&iface->super.worker->super,
                                            &bulk->progress_id);
    }
    ucs_list_for_each_safe(pending, tmp, &bulk->pending_acks, list) {
        ucs_free(pending);
    }
    if (bulk->pool != NULL) {
        crypt_pool_destroy(bulk->pool);
    }
    if (bulk->bounce_memh != UCT_MEM_HANDLE_NULL) {
        uct_md_mem_dereg(md->inner_md, bulk->bounce_memh);
    }
    if (bulk->bounce_base != NULL) {
        /* ciphertext only, but leave nothing behind */
        crypt_wipe(bulk->bounce_base, bulk->bounce_length);
    }
    ucs_free(bulk->bounce_base);
    ucs_free(bulk->slots);
    /* leak check: every segment and put went back with its ep */
    ucs_mpool_cleanup(&bulk->rx_seg_mp, 1);
    ucs_mpool_cleanup(&bulk->op_mp, 1);
    ucs_mpool_cleanup(&bulk->seg_mp, 1);
    if (bulk->event_fd >= 0) {
        close(bulk->event_fd);
    }
    close(bulk->wake_fd);
    ucs_free(bulk);
    iface->bulk = NULL;
}

/* ---- sleeping progress threads --------------------------------------------- */

static int uct_crypt_bulk_sleeps(const uct_crypt_bulk_t *bulk)
{
    return (bulk != NULL) && (bulk->pool != NULL) && (crypt_pool_size(bulk->pool) > 0);
}

ucs_status_t uct_crypt_bulk_event_fd_get(uct_crypt_iface_t *iface, int *fd_p)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    struct epoll_event ev = {.events = EPOLLIN};
    ucs_status_t status;
    int inner_fd;

    status = uct_iface_event_fd_get(iface->inner, &inner_fd);
    if ((status != UCS_OK) || (bulk == NULL)) {
        *fd_p = inner_fd;
        return status; /* no bulk engine: only the inner can wake us */
    }
    if (bulk->event_fd < 0) {
        bulk->event_fd = epoll_create1(EPOLL_CLOEXEC);
        if ((bulk->event_fd < 0) ||
            (epoll_ctl(bulk->event_fd, EPOLL_CTL_ADD, inner_fd, &ev) != 0) ||
            (epoll_ctl(bulk->event_fd, EPOLL_CTL_ADD, bulk->wake_fd, &ev) != 0)) {
            ucs_error("crypt: cannot build the iface event fd: %m");
            if (bulk->event_fd >= 0) {
                close(bulk->event_fd);
                bulk->event_fd = -1;
            }
            return UCS_ERR_IO_ERROR;
        }
    }
    *fd_p = bulk->event_fd;
    return UCS_OK;
}

/*
 * How fast one thread seals, in bytes a second: AES-GCM over 256 KiB with
 * the backend, the best of three runs (a run the scheduler cut into says
 * nothing of the cipher), measured once per process and backend. The key
 * and nonce are a throwaway all-zero pair over zeros: nothing sealed here
 * leaves the process or is secret.
 */
double uct_crypt_seal_bandwidth(crypt_aead_backend_t backend)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static double measured[CRYPT_AEAD_BACKEND_LAST];
    static const uint8_t zero_key[32], zero_nonce[CRYPT_AEAD_NONCE_LEN];
    const size_t len = 256 * UCS_KBYTE;
    uint8_t tag[CRYPT_AEAD_TAG_LEN], *buf;
    double best = 0, elapsed;
    crypt_aead_key_t key;
    ucs_time_t start;
    int run;

#if UCX_CRYPT_FAULT_INJECTION
    if (uct_crypt_global.test_seal_bandwidth > 0) {
        return uct_crypt_global.test_seal_bandwidth; /* tests: a slow core */
    }
#endif
    if ((unsigned)backend >= CRYPT_AEAD_BACKEND_LAST) {
        return 0;
    }
    pthread_mutex_lock(&lock);
    if ((measured[backend] == 0) &&
        ((buf = ucs_calloc(1, len, "crypt seal bench")) != NULL)) {
        if (crypt_aead_key_init(&key, backend, zero_key, sizeof(zero_key)) ==
            CRYPT_AEAD_OK) {
            for (run = 0; run < 3; ++run) {
                start = ucs_get_time();
                if (crypt_aead_seal(&key, zero_nonce, NULL, 0, buf, len, buf,
                                    tag) != CRYPT_AEAD_OK) {
                    break;
                }
                elapsed = ucs_time_to_sec(ucs_get_time() - start);
                if (elapsed > 0) {
                    best = ucs_max(best, len / elapsed);
                }
            }
            crypt_aead_key_cleanup(&key);
        }
        ucs_free(buf);
        measured[backend] = best;
        ucs_debug("crypt: one thread seals %.2f GB/s (%s)", best / 1e9,
                  crypt_aead_backend_name(backend));
    }
    best = measured[backend];
    pthread_mutex_unlock(&lock);
    return best;
}

/* From any thread: the iface's event fd wakes a worker asleep in
 * ucp_worker_wait, and its next arm says BUSY (the connection manager
 * registered a progress callback from its async thread) */
void uct_crypt_bulk_poke(uct_crypt_iface_t *iface)
{
    if (iface->bulk != NULL) {
        uct_crypt_bulk_signal(iface->bulk);
    }
}

/* BUSY after a wake, or where a segment sealed on a pool thread waits for
 * progress */
ucs_status_t uct_crypt_bulk_event_arm(uct_crypt_iface_t *iface)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_segment_t *seg;
    uct_crypt_bulk_tx_t *tx;
    uint64_t drained;

    /* (an eventfd reads whole, its counter never 0; EAGAIN: none came) */
    if ((bulk != NULL) &&
        (read(bulk->wake_fd, &drained, sizeof(drained)) == sizeof(drained))) {
        return UCS_ERR_BUSY; /* woken: progress first */
    }
    if (!uct_crypt_bulk_sleeps(bulk)) {
        return UCS_OK;
    }
    __atomic_store_n(&bulk->armed, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!ucs_list_is_empty(&bulk->opening) &&
        crypt_pool_job_done(&ucs_list_head(&bulk->opening, uct_crypt_bulk_rx_seg_t,
                                           list)->job)) {
        __atomic_store_n(&bulk->armed, 0, __ATOMIC_SEQ_CST);
        return UCS_ERR_BUSY;
    }
    ucs_list_for_each(tx, &bulk->active, active) {
        ucs_list_for_each(seg, &tx->segments, list) {
            if ((seg->state == UCT_CRYPT_SEG_SEALING) &&
                crypt_pool_job_done(&seg->job)) {
                __atomic_store_n(&bulk->armed, 0, __ATOMIC_SEQ_CST);
                return UCS_ERR_BUSY;
            }
        }
    }
    return UCS_OK;
}

unsigned uct_crypt_bulk_seal_threads(const uct_crypt_iface_t *iface)
{
    if (iface->bulk == NULL) {
        return 0;
    }
    return (iface->bulk->pool != NULL) ? ucs_max(crypt_pool_size(iface->bulk->pool), 1) : 1;
}

void uct_crypt_bulk_iface_attr(uct_crypt_iface_t *iface, uct_iface_attr_t *attr)
{
    if (iface->bulk == NULL) {
        return;
    }
    /* contiguous buffers only: a segment is sealed from one span */
    attr->cap.flags              |= UCT_IFACE_FLAG_PUT_ZCOPY;
    attr->cap.put.min_zcopy       = 0;
    attr->cap.put.max_zcopy       = UCT_CRYPT_BULK_MAX_PUT;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu       = 1;
    attr->cap.put.max_iov         = 1;
    /* get = the peer seals and puts (crypt_wire.h) */
    attr->cap.flags              |= UCT_IFACE_FLAG_GET_ZCOPY;
    attr->cap.get.min_zcopy       = 0;
    attr->cap.get.max_zcopy       = UCT_CRYPT_BULK_MAX_PUT;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu       = 1;
    attr->cap.get.max_iov         = 1;
}

void uct_crypt_bulk_activate(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_bulk_t *bulk = tx->bulk;

    if (!tx->is_active) {
        tx->is_active = 1;
        ucs_list_add_tail(&bulk->active, &tx->active);
    }
    uct_crypt_bulk_activate_rx(bulk);
}

void uct_crypt_bulk_activate_rx(uct_crypt_bulk_t *bulk)
{
    if (bulk->progress_id == UCS_CALLBACKQ_ID_NULL) {
        uct_worker_progress_register_safe(&bulk->iface->super.worker->super,
                                          uct_crypt_bulk_progress, bulk, 0,
                                          &bulk->progress_id);
    }
}

unsigned uct_crypt_bulk_progress(void *arg)
{
    uct_crypt_bulk_t *bulk = arg;
    uct_crypt_bulk_tx_t *tx, *tmp;
    unsigned count         = bulk->opening_count;

    uct_crypt_bulk_rx_reap(bulk->iface, 0);
    count -= bulk->opening_count; /* segments opened and acted on */
    if (bulk->pool != NULL) {
        crypt_pool_review(bulk->pool, 0); /* processes that came or went */
    }
    uct_crypt_bulk_send_pending_acks(bulk);
    ucs_list_for_each_safe(tx, tmp, &bulk->active, active) {
        if (!tx->ep->failed) {
            uct_crypt_bulk_tx_seal(tx);
            count += uct_crypt_bulk_tx_send(tx, 1);
            uct_crypt_bulk_tx_flushes(tx);
            uct_crypt_bulk_tx_fence(tx);
        }
        if (uct_crypt_bulk_tx_idle(tx)) {
            ucs_list_del(&tx->active);
            tx->is_active = 0;
        }
    }
    if (ucs_list_is_empty(&bulk->active) &&
        ucs_list_is_empty(&bulk->pending_acks) &&
        ucs_list_is_empty(&bulk->opening)) {
        uct_worker_progress_unregister_safe(&bulk->iface->super.worker->super,
                                            &bulk->progress_id);
    }
    return count;
}

uct_crypt_bulk_tx_t *uct_crypt_bulk_tx_get(uct_crypt_ep_t *ep)
{
    uct_crypt_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                              uct_crypt_iface_t);
    uct_crypt_bulk_tx_t *tx;

    if (ep->bulk != NULL) {
        return ep->bulk;
    }
    tx = ucs_calloc(1, sizeof(*tx), "crypt bulk tx");
    if (tx == NULL) {
        return NULL;
    }
    /* (the keys on first use: uct_crypt_bulk_tx_key_ready) */
    tx->ep      = ep;
    tx->bulk    = iface->bulk;
    tx->backend = iface->backend;
    ucs_list_head_init(&tx->ops);
    ucs_list_head_init(&tx->gets);
    ucs_list_head_init(&tx->segments);
    ucs_list_head_init(&tx->flushes);
    ep->bulk = tx;
    return tx;
}

ucs_status_t uct_crypt_bulk_ep_flush(uct_crypt_ep_t *ep, unsigned flags,
                                     uct_completion_t *comp)
{
    uct_crypt_bulk_tx_t *tx = ep->bulk;
    uct_crypt_bulk_flush_t *flush;

    if ((tx == NULL) || uct_crypt_bulk_tx_idle(tx)) {
        return UCS_OK;
    }
    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        uct_crypt_bulk_ep_cancel(ep, UCS_ERR_CANCELED);
        return UCS_OK;
    }
    if (uct_crypt_ep_fenced(ep)) {
        return UCS_ERR_NO_RESOURCE; /* behind the requests that wait */
    }
    if (comp == NULL) {
        return UCS_INPROGRESS;
    }
    flush = ucs_malloc(sizeof(*flush), "crypt bulk flush");
    if (flush == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    flush->comp  = comp;
    flush->flags = flags;
    ucs_list_add_tail(&tx->flushes, &flush->list);
    uct_crypt_bulk_activate(tx);
    return UCS_INPROGRESS;
}

/* Does the ep have no bulk work at all (no put, get, segment or flush)? */
int uct_crypt_bulk_ep_idle(uct_crypt_ep_t *ep)
{
    uct_crypt_bulk_tx_t *tx = ep->bulk;

    return (tx == NULL) ||
           (ucs_list_is_empty(&tx->ops) && ucs_list_is_empty(&tx->gets) &&
            ucs_list_is_empty(&tx->segments) && ucs_list_is_empty(&tx->flushes));
}

int uct_crypt_bulk_iface_busy(uct_crypt_iface_t *iface)
{
    return (iface->bulk != NULL) && !ucs_list_is_empty(&iface->bulk->active);
}

void uct_crypt_bulk_op_complete(uct_crypt_bulk_tx_t *tx,
                                uct_crypt_bulk_op_t *op,
                                ucs_status_t status)
{
    if (tx->seal_op == op) {
        tx->seal_op = (op->list.next != &tx->ops) ?
                      ucs_list_next(&op->list, uct_crypt_bulk_op_t, list) : NULL;
    }
    ucs_list_del(&op->list);
    --tx->bulk->outstanding;
    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }
    ucs_mpool_put(op);
}

void uct_crypt_bulk_ep_cancel(uct_crypt_ep_t *ep, ucs_status_t status)
{
    uct_crypt_bulk_tx_t *tx = ep->bulk;
    uct_crypt_bulk_segment_t *seg, *stmp;
    uct_crypt_bulk_flush_t *flush, *ftmp;
    uct_crypt_bulk_op_t *op, *otmp;
    uct_crypt_bulk_get_t *get, *gtmp;

    /* nothing left to wait for; queued requests stay for pending_purge */
    ep->fence = UCT_CRYPT_FENCE_NONE;
    if (tx == NULL) {
        return;
    }
    /* the pool may still be sealing for us */
    ucs_list_for_each(seg, &tx->segments, list) {
        crypt_pool_finish(tx->bulk->pool, &seg->job);
    }
    /* segments whose inner put is still in flight stay until the inner ep
     * is gone (it completes or drops them); the rest is freed now */
    ucs_list_for_each_safe(seg, stmp, &tx->segments, list) {
        if (seg->put_done || (seg->state < UCT_CRYPT_SEG_PUT)) {
            ucs_list_del(&seg->list);
            uct_crypt_bulk_segment_free(tx->bulk, seg);
        } else {
            seg->op = NULL;
        }
    }
    ucs_list_for_each_safe(op, otmp, &tx->ops, list) {
        uct_crypt_bulk_op_complete(tx, op, status);
    }
    ucs_list_for_each_safe(get, gtmp, &tx->gets, list) {
        ucs_list_del(&get->list);
        uct_invoke_completion(get->comp, status);
        ucs_free(get);
    }
    ucs_list_for_each_safe(flush, ftmp, &tx->flushes, list) {
        uct_invoke_completion(flush->comp, status);
        ucs_list_del(&flush->list);
        ucs_free(flush);
    }
    if (status != UCS_ERR_CANCELED) {
        return; /* failed, not destroyed: the ep still exists */
    }
    /* destroy: called after the inner ep is gone */
    ucs_list_for_each_safe(seg, stmp, &tx->segments, list) {
        ucs_list_del(&seg->list);
        uct_crypt_bulk_segment_free(tx->bulk, seg);
    }
    if (tx->is_active) {
        ucs_list_del(&tx->active);
    }
    uct_crypt_bulk_tx_keys_cleanup(tx);
    ucs_free(tx);
    ep->bulk = NULL;
}

void uct_crypt_bulk_segment_free(uct_crypt_bulk_t *bulk,
                                 uct_crypt_bulk_segment_t *seg)
{
    uct_crypt_md_t *md = ucs_derived_of(bulk->iface->super.md, uct_crypt_md_t);

    if (seg->slot != NULL) {
        ucs_list_add_tail(&bulk->free_slots, &seg->slot->list);
    } else if (seg->bounce != NULL) {
        if (seg->bounce_memh != UCT_MEM_HANDLE_NULL) {
            uct_md_mem_dereg(md->inner_md, seg->bounce_memh);
        }
        ucs_free(seg->bounce);
    }
    ucs_mpool_put(seg);
}
