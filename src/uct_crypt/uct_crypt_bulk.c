/*
 * The bulk engine: encrypted put_zcopy, which gives UCP back its RMA
 * rendezvous (and multi-rail) over crypt.
 *
 * A put is cut into segments (CryptMPI's chopping, Naser et al., section
 * IV-B). Each segment is sealed by the worker pool into a registered bounce
 * buffer, put by the inner transport to where its plaintext belongs in the
 * target's buffer, and announced by a SEGMENT control record carrying its
 * tag. The target opens it in place from that record's handler, so sealing,
 * transfer and opening of consecutive segments overlap. After the last
 * segment the target sends an ACK and only then does the initiator complete
 * UCP's put: UCP's rendezvous "data arrived" message (sent after the put
 * completes) can never overtake authentication. The wire rules are in
 * crypt_wire.h.
 *
 * Threads: the pool's threads only seal (crypt_pool.h). Every UCT call, every
 * completion and every list here belongs to the progress thread; segments
 * are handed back through their `done` flag, which the iface's progress
 * callback polls while any put is in flight.
 *
 * Resources: `depth` bounce segments per iface, registered once with the
 * inner md. When they are all in flight, further segments wait in their
 * put's queue (nothing fails). Above `max_outstanding` puts in flight a put
 * is sealed on the progress thread instead of the pool (CryptMPI's k = 1
 * rule: enough concurrency already, hand-offs would only add latency).
 *
 * Naive mode (the CryptMPI paper's baseline, for benchmarks): the whole put
 * is one segment in a buffer of its own, sealed by the progress thread,
 * sent, then opened.
 */
#include "uct_crypt.h"
#include "ucp_crypt/crypt_pool.h"

#include <ucs/sys/string.h>
#include <ucs/sys/math.h>

#include <openssl/crypto.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <endian.h>
#include <sched.h>
#include <stdio.h>

#define UCT_CRYPT_BULK_DEFAULT_SEGMENT  (256 * 1024)
#define UCT_CRYPT_BULK_DEFAULT_THREADS  2
#define UCT_CRYPT_BULK_MAX_PUT          (1ul << 30)   /* per put_zcopy call */
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
    uint8_t               tag[CRYPT_AEAD_TAG_LEN];
} uct_crypt_bulk_segment_t;

struct uct_crypt_bulk_op {
    ucs_list_link_t       list;        /* the ep's puts, in order */
    uct_crypt_bulk_tx_t   *tx;
    const uint8_t         *src;
    size_t                length;
    uint64_t              remote_addr;
    uct_rkey_t            inner_rkey;
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

/* a get this ep asked its peer for, until GET_DONE */
typedef struct {
    ucs_list_link_t       list;
    uint64_t              get_id;
    uct_completion_t      *comp;
    uintptr_t             address;     /* where the peer will put it */
    size_t                length;
} uct_crypt_bulk_get_t;

/* a get served for a peer: the answering put's completion */
typedef struct {
    uct_completion_t      comp;
    uct_crypt_iface_t     *iface;
    uct_rkey_bundle_t     rkey;         /* the initiator's, for its buffer */
    uint8_t               peer_public[KEYEX_PUBLIC_KEY_LEN];
    crypt_bulk_ack_t      done;         /* GET_DONE */
} uct_crypt_bulk_serve_t;

struct uct_crypt_bulk_tx {
    uct_crypt_ep_t        *ep;
    uct_crypt_bulk_t      *bulk;
    ucs_list_link_t       ops;
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

typedef struct {
    ucs_list_link_t       list;
    uint8_t               peer_public[KEYEX_PUBLIC_KEY_LEN];
    crypt_bulk_ack_t      ack;
} uct_crypt_bulk_pending_ack_t;

struct uct_crypt_bulk {
    uct_crypt_iface_t     *iface;
    int                   naive;
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
    /* waking a progress thread that sleeps in ucp_worker_wait: the pool
     * writes to wake_fd when `armed`; event_fd = epoll(inner's fd, wake_fd) */
    int                   wake_fd;
    int                   event_fd;
    int                   armed;
    /* what a get request carries: our packed key, a handle where needed */
    size_t                rkey_packed_size;
    int                   need_memh;
    uct_worker_cb_id_t    progress_id;
};

/* ---- configuration and profile ------------------------------------------- */

/* A calibration profile (test/perf/crypt_calibrate writes one): "key value"
 * lines; the shim uses segment and threads, the model the rest. */
static void uct_crypt_bulk_read_profile(const char *path, size_t *segment,
                                        unsigned long *threads)
{
    char key[64];
    double value;
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
    while (fscanf(file, "%63s %lf", key, &value) == 2) {
        if (!strcmp(key, "segment") && (value >= 4096)) {
            *segment = (size_t)value;
        } else if (!strcmp(key, "threads") && (value >= 0)) {
            *threads = (unsigned long)value;
        }
    }
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
static void uct_crypt_bulk_wake(void *arg)
{
    uct_crypt_bulk_t *bulk = arg;
    uint64_t one = 1;

    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&bulk->armed, 0, __ATOMIC_SEQ_CST) &&
        (write(bulk->wake_fd, &one, sizeof(one)) < 0)) {
        /* the counter is full: the fd is readable anyway */
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

    iface->bulk = NULL;
    if (!config->bulk ||
        !(iface->inner_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
        return UCS_OK; /* AM only: UCP runs rendezvous over AM */
    }
    if (strcmp(config->bulk_mode, "pipelined") &&
        strcmp(config->bulk_mode, "naive")) {
        ucs_error("crypt: UCX_CRYPT_BULK_MODE=%s: use 'pipelined' or 'naive'",
                  config->bulk_mode);
        return UCS_ERR_INVALID_PARAM;
    }

    uct_crypt_bulk_read_profile(config->profile, &segment, &threads);
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
    if ((segment < 4096) || (segment > UCT_CRYPT_BULK_MAX_PUT)) {
        ucs_error("crypt: UCX_CRYPT_BULK_SEGMENT=%zu: between 4k and 1g", segment);
        return UCS_ERR_INVALID_PARAM;
    }

    bulk = ucs_calloc(1, sizeof(*bulk), "crypt bulk");
    if (bulk == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    bulk->iface           = iface;
    bulk->naive           = !strcmp(config->bulk_mode, "naive");
    status = uct_md_query(&md->super, &md_attr);
    if (status != UCS_OK) {
        close(bulk->wake_fd);
        ucs_free(bulk);
        return status;
    }
    bulk->rkey_packed_size = md_attr.rkey_packed_size;
    bulk->need_memh        = !!(md_attr.cap.flags & UCT_MD_FLAG_NEED_MEMH);
    bulk->segment         = segment;
    bulk->depth           = ucs_max(config->bulk_depth, 2);
    bulk->max_outstanding = config->bulk_max_outstanding;
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
    /* every ep is gone by now (UCT closes eps before their iface) */
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
        OPENSSL_cleanse(bulk->bounce_base, bulk->bounce_length);
    }
    ucs_free(bulk->bounce_base);
    ucs_free(bulk->slots);
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
    if ((status != UCS_OK) || !uct_crypt_bulk_sleeps(bulk)) {
        *fd_p = inner_fd;
        return status; /* no pool threads: only the inner can wake us */
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

/* BUSY where a segment sealed on a pool thread waits for progress */
ucs_status_t uct_crypt_bulk_event_arm(uct_crypt_iface_t *iface)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_segment_t *seg;
    uct_crypt_bulk_tx_t *tx;
    uint64_t drained;

    if (!uct_crypt_bulk_sleeps(bulk)) {
        return UCS_OK;
    }
    if (read(bulk->wake_fd, &drained, sizeof(drained)) < 0) {
        /* EAGAIN: nothing was signalled */
    }
    __atomic_store_n(&bulk->armed, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
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

/* ---- sending ------------------------------------------------------------- */

static unsigned uct_crypt_bulk_progress(void *arg);

static void uct_crypt_bulk_activate(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_bulk_t *bulk = tx->bulk;

    if (!tx->is_active) {
        tx->is_active = 1;
        ucs_list_add_tail(&bulk->active, &tx->active);
    }
    if (bulk->progress_id == UCS_CALLBACKQ_ID_NULL) {
        uct_worker_progress_register_safe(&bulk->iface->super.worker->super,
                                          uct_crypt_bulk_progress, bulk, 0,
                                          &bulk->progress_id);
    }
}

static void uct_crypt_bulk_stream_prefix(uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN],
                                         uint64_t put_id)
{
    uint64_t le = htole64(put_id);

    memcpy(prefix, &le, CRYPT_STREAM_NONCE_PREFIX_LEN);
}

static void uct_crypt_bulk_aad(crypt_bulk_aad_t *aad, uint64_t flow_id,
                               uint64_t put_id, uint64_t address,
                               uint64_t length)
{
    aad->flow_id = htole64(flow_id);
    aad->put_id  = htole64(put_id);
    aad->address = htole64(address);
    aad->length  = htole64(length);
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

    if ((key->impl == NULL) &&
        (crypt_aead_key_init(key, tx->backend, tx->keys->key,
                             tx->keys->key_len) != CRYPT_AEAD_OK)) {
        seg->seal_status = CRYPT_AEAD_ERR_BACKEND;
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
}

static void uct_crypt_bulk_put_done(uct_completion_t *self)
{
    uct_crypt_bulk_segment_t *seg = ucs_container_of(self,
                                                     uct_crypt_bulk_segment_t,
                                                     put_comp);
    seg->put_done = 1;
}

static void uct_crypt_bulk_segment_free(uct_crypt_bulk_t *bulk,
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
    ucs_free(seg);
}

/* Key update between puts, before the bulk key reaches its limits
 * (keyex.h); the SEGMENT records carry the generation, so the target
 * follows. Only when no segment is in flight: a worker may hold the key. */
static int uct_crypt_bulk_tx_key_ready(uct_crypt_bulk_tx_t *tx, size_t length)
{
    unsigned w;

    /* UCX_CRYPT_REKEY_RECORDS, when set, counts bulk segments too (tests) */
    if ((keyex_usage_check(tx->segments_this_key, tx->bytes_this_key,
                           length) == KEYEX_USAGE_OK) &&
        ((uct_crypt_global.rekey_records == 0) ||
         (tx->segments_this_key < uct_crypt_global.rekey_records))) {
        return 1;
    }
    if (!ucs_list_is_empty(&tx->segments)) {
        return 0; /* drain first */
    }
    for (w = 0; w <= CRYPT_POOL_MAX_THREADS; ++w) {
        crypt_aead_key_cleanup(&tx->aead[w]);
    }
    if (keyex_update_flow_keys(tx->keys) != KEYEX_OK) {
        ucs_fatal("crypt: bulk key update failed");
    }
    tx->segments_this_key = 0;
    tx->bytes_this_key    = 0;
    UCT_CRYPT_STAT_ADD(bulk_rekeys, 1);
    return 1;
}

static unsigned uct_crypt_bulk_tx_send(uct_crypt_bulk_tx_t *tx);

/* Start sealing segments while bounce space lasts. */
static void uct_crypt_bulk_tx_seal(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_bulk_t *bulk = tx->bulk;
    uct_crypt_md_t *md = ucs_derived_of(bulk->iface->super.md, uct_crypt_md_t);
    uct_crypt_bulk_segment_t *seg;
    uct_crypt_bulk_op_t *op;
    size_t offset;

    ucs_list_for_each(op, &tx->ops, list) {
        while (op->next_to_seal < op->num_segments) {
            if (!bulk->naive && ucs_list_is_empty(&bulk->free_slots)) {
                return; /* bounded: the rest waits for a free slot */
            }
            if ((op->next_to_seal == 0) &&
                !uct_crypt_bulk_tx_key_ready(tx, op->length)) {
                return;
            }
            seg = ucs_calloc(1, sizeof(*seg), "crypt bulk segment");
            if (seg == NULL) {
                return; /* retried from progress */
            }
            offset        = (size_t)op->next_to_seal * bulk->segment;
            seg->op       = op;
            seg->index    = op->next_to_seal;
            seg->last     = (op->next_to_seal + 1 == op->num_segments);
            seg->offset   = bulk->naive ? 0 : offset;
            seg->length   = bulk->naive ? op->length :
                            ucs_min(bulk->segment, op->length - offset);
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
                    ucs_free(seg);
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
                (crypt_pool_size(bulk->pool) == 0)) {
                seg->job.done = 0;
                uct_crypt_bulk_seal_job(&seg->job, 0);
                seg->job.done = 1;
                /* on this thread: send each segment as soon as it is
                 * sealed, so the target opens it while we seal the next;
                 * and do not seal ahead of a blocked inner (the wire would
                 * idle while we do) */
                uct_crypt_bulk_tx_send(tx);
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

/* TESTING ONLY (UCX_CRYPT_FAULT=bulk_*): is this the segment to tamper
 * with? Counted when a segment leaves for the inner put. */
static int uct_crypt_bulk_fault_due(uct_crypt_iface_t *iface)
{
    return (iface->fault >= UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT) &&
           (++iface->bulk_segments_sent == iface->fault_after);
}

/* Returns 1 if the announcement must not be sent (dropped). */
static int uct_crypt_bulk_fault_announce(uct_crypt_iface_t *iface,
                                         crypt_bulk_segment_t *announce)
{
    switch (iface->fault) {
    case UCT_CRYPT_FAULT_BULK_FLIP_TAG:
        announce->tag[0] ^= 0x01;
        return 0;
    case UCT_CRYPT_FAULT_BULK_DROP:
        return 1;
    case UCT_CRYPT_FAULT_BULK_REORDER:
        announce->index = htole32(le32toh(announce->index) + 1);
        return 0;
    case UCT_CRYPT_FAULT_BULK_TRUNCATE:
        announce->last = !announce->last;
        return 0;
    case UCT_CRYPT_FAULT_BULK_MOVE:
        announce->address = htole64(le64toh(announce->address) + 64);
        return 0;
    case UCT_CRYPT_FAULT_BULK_SPLICE:
        announce->put_id = htole64(le64toh(announce->put_id) + 1);
        return 0;
    default:
        return 0;
    }
}

/* Put sealed segments and announce them, strictly in order. */
static unsigned uct_crypt_bulk_tx_send(uct_crypt_bulk_tx_t *tx)
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
            if (!crypt_pool_job_done(&seg->job)) {
                break;
            }
            if (seg->seal_status != CRYPT_AEAD_OK) {
                ucs_fatal("crypt: sealing a bulk segment failed (%d)",
                          seg->seal_status);
            }
            seg->state = UCT_CRYPT_SEG_SEALED;
            /* once per segment, not per retry of its put */
            seg->tamper = uct_crypt_bulk_fault_due(tx->bulk->iface);
            if (seg->tamper && (seg->length > 0) &&
                (tx->bulk->iface->fault == UCT_CRYPT_FAULT_BULK_FLIP_CIPHERTEXT)) {
                seg->bounce[seg->length / 2] ^= 0x10;
            }
        }
        if (seg->state == UCT_CRYPT_SEG_SEALED) {
            if (seg->length == 0) {
                seg->put_done = 1;
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
            seg->state = UCT_CRYPT_SEG_PUT;
        }
        if (seg->state == UCT_CRYPT_SEG_PUT) {
            /* the announcement must not overtake the data */
            uct_ep_fence(ep->inner, 0);
            memset(&announce, 0, sizeof(announce));
            announce.kind     = CRYPT_CONTROL_SEGMENT;
            announce.last     = seg->last;
            announce.generation = htole16(op->generation);
            announce.index    = htole32(seg->index);
            announce.put_id   = htole64(op->put_id);
            announce.address  = htole64(op->remote_addr + seg->offset);
            announce.length   = htole64(seg->length);
            memcpy(announce.tag, seg->tag, sizeof(announce.tag));
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

static void uct_crypt_bulk_tx_flushes(uct_crypt_bulk_tx_t *tx)
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

static int uct_crypt_bulk_tx_idle(uct_crypt_bulk_tx_t *tx)
{
    return ucs_list_is_empty(&tx->ops) && ucs_list_is_empty(&tx->segments) &&
           ucs_list_is_empty(&tx->flushes) && ucs_list_is_empty(&tx->gets) &&
           (tx->ep->fence == UCT_CRYPT_FENCE_NONE);
}

/* ---- fence ----------------------------------------------------------------
 * uct_ep_fence orders what is posted after it behind what was posted
 * before it. The inner's fence covers the inner's operations, but a bulk
 * put stays inside crypt until its last segment is announced, and a get
 * until the peer's GET_DONE. Behind such work, later sends on the ep answer
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
static void uct_crypt_bulk_tx_fence(uct_crypt_bulk_tx_t *tx)
{
    uct_crypt_ep_t *ep = tx->ep;
    uct_pending_req_priv_queue_t *priv;

    if ((ep->fence == UCT_CRYPT_FENCE_WAIT) && uct_crypt_bulk_fence_clear(tx)) {
        ep->fence = UCT_CRYPT_FENCE_DRAIN;
    }
    if (ep->fence == UCT_CRYPT_FENCE_DRAIN) {
        ep->fence_dispatching = 1;
        uct_pending_queue_dispatch(priv, &ep->fence_pending, 1);
        ep->fence_dispatching = 0;
        if (ucs_queue_is_empty(&ep->fence_pending)) {
            ep->fence = UCT_CRYPT_FENCE_NONE;
        }
    }
}

static void uct_crypt_bulk_send_pending_acks(uct_crypt_bulk_t *bulk);

static unsigned uct_crypt_bulk_progress(void *arg)
{
    uct_crypt_bulk_t *bulk = arg;
    uct_crypt_bulk_tx_t *tx, *tmp;
    unsigned count = 0;

    uct_crypt_bulk_send_pending_acks(bulk);
    ucs_list_for_each_safe(tx, tmp, &bulk->active, active) {
        if (!tx->ep->failed) {
            uct_crypt_bulk_tx_seal(tx);
            count += uct_crypt_bulk_tx_send(tx);
            uct_crypt_bulk_tx_flushes(tx);
            uct_crypt_bulk_tx_fence(tx);
        }
        if (uct_crypt_bulk_tx_idle(tx)) {
            ucs_list_del(&tx->active);
            tx->is_active = 0;
        }
    }
    if (ucs_list_is_empty(&bulk->active) &&
        ucs_list_is_empty(&bulk->pending_acks)) {
        uct_worker_progress_unregister_safe(&bulk->iface->super.worker->super,
                                            &bulk->progress_id);
    }
    return count;
}

static uct_crypt_bulk_tx_t *uct_crypt_bulk_tx_get(uct_crypt_ep_t *ep)
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
    if (uct_crypt_bulk_keys(iface, iface->keypair.public_key, ep->peer_public,
                            ep->peer_public, ep->tx.flow_id,
                            &tx->keys) != UCS_OK) {
        ucs_free(tx);
        return NULL;
    }
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

/* One bulk put of a contiguous span (put_zcopy, and the answer to a get) */
static ucs_status_t uct_crypt_bulk_put(uct_crypt_ep_t *ep, const void *src,
                                       size_t length, uint64_t remote_addr,
                                       uct_rkey_t inner_rkey,
                                       uct_completion_t *comp)
{
    uct_crypt_bulk_tx_t *tx;
    uct_crypt_bulk_op_t *op;

    tx = uct_crypt_bulk_tx_get(ep);
    op = ucs_calloc(1, sizeof(*op), "crypt bulk put");
    if ((tx == NULL) || (op == NULL)) {
        ucs_free(op);
        return UCS_ERR_NO_MEMORY;
    }
    op->tx           = tx;
    op->src          = src;
    op->length       = length;
    op->remote_addr  = remote_addr;
    op->inner_rkey   = inner_rkey;
    op->comp         = comp;
    op->put_id       = tx->next_put_id++;
    op->num_segments = tx->bulk->naive ? 1 :
                       ucs_max(1, ucs_div_round_up(length, tx->bulk->segment));
    op->inline_seal  = (tx->bulk->outstanding >= tx->bulk->max_outstanding);
    ++tx->bulk->outstanding;
    ucs_list_add_tail(&tx->ops, &op->list);

    uct_crypt_bulk_activate(tx);
    uct_crypt_bulk_tx_seal(tx);
    uct_crypt_bulk_tx_send(tx);
    return UCS_INPROGRESS;
}

static ucs_status_t uct_crypt_bulk_check_iov(uct_crypt_ep_t *ep,
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
                              ((uct_crypt_rkey_t*)rkey)->inner.rkey, comp);
}

/* get = ask the peer to seal the range and put it into our buffer
 * (crypt_wire.h); our remote key for the buffer goes with the request */
ucs_status_t uct_crypt_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_crypt_ep_t *ep       = ucs_derived_of(tl_ep, uct_crypt_ep_t);
    uct_crypt_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                              uct_crypt_iface_t);
    ucs_status_t status      = uct_crypt_bulk_check_iov(ep, iov, iovcnt);
    crypt_bulk_get_req_t req;
    uct_crypt_bulk_get_t *get;
    uct_crypt_bulk_tx_t *tx;
    size_t rkey_len;
    uint8_t *request;

    (void)rkey; /* the peer reads its own memory; it checks the range */
    if (status != UCS_OK) {
        return status;
    }
    rkey_len = iface->bulk->rkey_packed_size;
    if (((iov[0].memh == UCT_MEM_HANDLE_NULL) && iface->bulk->need_memh) ||
        (sizeof(req) + rkey_len > iface->inner_attr.cap.am.max_bcopy / 2)) {
        return UCS_ERR_INVALID_PARAM;
    }
    tx      = uct_crypt_bulk_tx_get(ep);
    get     = ucs_calloc(1, sizeof(*get), "crypt bulk get");
    request = ucs_alloca(sizeof(req) + rkey_len);
    if ((tx == NULL) || (get == NULL)) {
        ucs_free(get);
        return UCS_ERR_NO_MEMORY;
    }
    status = uct_crypt_md_pack_rkey(ucs_derived_of(iface->super.md, uct_crypt_md_t),
                                    iov[0].memh, request + sizeof(req));
    if (status != UCS_OK) {
        ucs_free(get);
        return status;
    }
    memset(&req, 0, sizeof(req));
    req.kind        = CRYPT_CONTROL_GET_REQ;
    req.rkey_length = htole32((uint32_t)rkey_len);
    req.get_id      = htole64(tx->next_get_id);
    req.remote_addr = htole64(remote_addr);
    req.local_addr  = htole64((uintptr_t)iov[0].buffer);
    req.length      = htole64(iov[0].length);
    memcpy(request, &req, sizeof(req));
    status = uct_crypt_ep_send_control(ep, request, sizeof(req) + rkey_len);
    if (status != UCS_OK) {
        ucs_free(get); /* NO_RESOURCE: UCP asks again */
        return status;
    }
    get->get_id  = tx->next_get_id++;
    get->comp    = comp;
    get->address = (uintptr_t)iov[0].buffer;
    get->length  = iov[0].length;
    ucs_list_add_tail(&tx->gets, &get->list);
    return UCS_INPROGRESS;
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

int uct_crypt_bulk_iface_busy(uct_crypt_iface_t *iface)
{
    return (iface->bulk != NULL) && !ucs_list_is_empty(&iface->bulk->active);
}

static void uct_crypt_bulk_op_complete(uct_crypt_bulk_tx_t *tx,
                                       uct_crypt_bulk_op_t *op,
                                       ucs_status_t status)
{
    ucs_list_del(&op->list);
    --tx->bulk->outstanding;
    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }
    ucs_free(op);
}

void uct_crypt_bulk_ep_cancel(uct_crypt_ep_t *ep, ucs_status_t status)
{
    uct_crypt_bulk_tx_t *tx = ep->bulk;
    uct_crypt_bulk_segment_t *seg, *stmp;
    uct_crypt_bulk_flush_t *flush, *ftmp;
    uct_crypt_bulk_op_t *op, *otmp;
    uct_crypt_bulk_get_t *get, *gtmp;
    unsigned w;

    /* nothing left to wait for; queued requests stay for pending_purge */
    ep->fence = UCT_CRYPT_FENCE_NONE;
    if (tx == NULL) {
        return;
    }
    /* the pool may still be sealing for us */
    ucs_list_for_each(seg, &tx->segments, list) {
        while (!crypt_pool_job_done(&seg->job)) {
            sched_yield();
        }
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
    for (w = 0; w <= CRYPT_POOL_MAX_THREADS; ++w) {
        crypt_aead_key_cleanup(&tx->aead[w]);
    }
    keyex_secure_free(tx->keys, sizeof(*tx->keys));
    ucs_free(tx);
    ep->bulk = NULL;
}

/* ---- receiving ------------------------------------------------------------ */

static uct_crypt_ep_t *uct_crypt_bulk_ep_to(uct_crypt_iface_t *iface,
                                            const uint8_t *peer_public)
{
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->peer_known && !ep->failed &&
            !CRYPTO_memcmp(ep->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN)) {
            return ep;
        }
    }
    return NULL;
}

static void uct_crypt_bulk_send_pending_acks(uct_crypt_bulk_t *bulk)
{
    uct_crypt_bulk_pending_ack_t *pending, *tmp;
    uct_crypt_ep_t *ep;
    ucs_status_t status;

    ucs_list_for_each_safe(pending, tmp, &bulk->pending_acks, list) {
        ep = uct_crypt_bulk_ep_to(bulk->iface, pending->peer_public);
        if (ep == NULL) {
            /* the peer went away; its put can never complete anyway */
            status = UCS_OK;
        } else {
            status = uct_crypt_ep_send_control(ep, &pending->ack,
                                               sizeof(pending->ack));
        }
        if (status == UCS_ERR_NO_RESOURCE) {
            return; /* keep the order */
        }
        ucs_list_del(&pending->list);
        ucs_free(pending);
    }
}

/* A control message back to a peer (ACK, GET_DONE): now, or queued in
 * order behind the ones that found no room */
static void uct_crypt_bulk_reply(uct_crypt_iface_t *iface,
                                 const uint8_t peer_public[KEYEX_PUBLIC_KEY_LEN],
                                 uint64_t flow_id, const crypt_bulk_ack_t *msg)
{
    uct_crypt_bulk_t *bulk = iface->bulk;
    uct_crypt_bulk_pending_ack_t *pending;
    uct_crypt_ep_t *ep;

    ep = uct_crypt_bulk_ep_to(iface, peer_public);
    if ((ep != NULL) && ((bulk == NULL) || ucs_list_is_empty(&bulk->pending_acks)) &&
        (uct_crypt_ep_send_control(ep, msg, sizeof(*msg)) == UCS_OK)) {
        return;
    }
    if (bulk == NULL) {
        ucs_error("crypt: cannot acknowledge a put from " uct_crypt_log_peer_fmt
                  ": no endpoint back to it", uct_crypt_log_peer_arg(
                  peer_public, flow_id));
        return;
    }
    pending = ucs_malloc(sizeof(*pending), "crypt pending ack");
    if (pending == NULL) {
        ucs_fatal("crypt: out of memory for a bulk acknowledgement");
    }
    memcpy(pending->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN);
    pending->ack = *msg;
    ucs_list_add_tail(&bulk->pending_acks, &pending->list);
    if (bulk->progress_id == UCS_CALLBACKQ_ID_NULL) {
        uct_worker_progress_register_safe(&iface->super.worker->super,
                                          uct_crypt_bulk_progress, bulk, 0,
                                          &bulk->progress_id);
    }
}

static void uct_crypt_bulk_ack(uct_crypt_iface_t *iface,
                               uct_crypt_rx_flow_t *flow, uint64_t put_id)
{
    crypt_bulk_ack_t ack;

    memset(&ack, 0, sizeof(ack));
    ack.kind    = CRYPT_CONTROL_ACK;
    ack.flow_id = htole64(flow->flow_id);
    ack.put_id  = htole64(put_id);
    uct_crypt_bulk_reply(iface, flow->peer_public, flow->flow_id, &ack);
}

/* The bulk key of a received flow: derived on first use, or updated to
 * the next generation. */
static ucs_status_t uct_crypt_bulk_rx_key(uct_crypt_iface_t *iface,
                                          uct_crypt_rx_flow_t *flow, int update)
{
    if (!update) {
        if (uct_crypt_bulk_keys(iface, flow->peer_public,
                                iface->keypair.public_key, flow->peer_public,
                                flow->flow_id, &flow->bulk_keys) != UCS_OK) {
            return UCS_ERR_INVALID_PARAM;
        }
    } else {
        crypt_aead_key_cleanup(&flow->bulk_aead);
        if (keyex_update_flow_keys(flow->bulk_keys) != KEYEX_OK) {
            return UCS_ERR_INVALID_PARAM;
        }
    }
    return (crypt_aead_key_init(&flow->bulk_aead, iface->backend,
                                flow->bulk_keys->key,
                                flow->bulk_keys->key_len) == CRYPT_AEAD_OK) ?
           UCS_OK : UCS_ERR_INVALID_PARAM;
}

/* Is [address, address + length) inside the destination of a get that we
 * asked the peer with this public key for? (UCP does not register a get's
 * destination where the inner needs no handle: tcp.) */
static int uct_crypt_bulk_get_window(uct_crypt_iface_t *iface,
                                     const uint8_t *peer_public,
                                     uint64_t address, uint64_t length)
{
    uct_crypt_bulk_get_t *get;
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if ((ep->bulk == NULL) ||
            CRYPTO_memcmp(ep->peer_public, peer_public, KEYEX_PUBLIC_KEY_LEN)) {
            continue;
        }
        ucs_list_for_each(get, &ep->bulk->gets, list) {
            if ((address >= get->address) && (address + length >= address) &&
                (address + length <= get->address + get->length)) {
                return 1;
            }
        }
    }
    return 0;
}

/* Open one announced segment in place. Everything here came in an
 * authenticated, in-sequence record of `flow`. */
static void uct_crypt_bulk_open_segment(uct_crypt_iface_t *iface,
                                        uct_crypt_rx_flow_t *flow, uint8_t am_id,
                                        const crypt_bulk_segment_t *announce)
{
    uint64_t put_id    = le64toh(announce->put_id);
    uint32_t index     = le32toh(announce->index);
    uint64_t address   = le64toh(announce->address);
    uint64_t length    = le64toh(announce->length);
    uint16_t generation = le16toh(announce->generation);
    uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN];
    crypt_bulk_aad_t aad;

    /* a put's segments come in order, puts come in order, none is skipped:
     * anything else is a dropped, reordered or truncated stream */
    if ((put_id != flow->bulk_next_put) || (index != flow->bulk_next_segment) ||
        (announce->last > 1) || (length > UCT_CRYPT_BULK_MAX_PUT)) {
        uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                                UCT_CRYPT_FAIL_BULK_ORDER);
        return;
    }
    /* the sender updates the bulk key between puts only */
    if (((flow->bulk_keys == NULL) &&
         (uct_crypt_bulk_rx_key(iface, flow, 0) != UCS_OK)) ||
        ((index == 0) &&
         (generation == (uint16_t)(flow->bulk_keys->generation + 1)) &&
         (uct_crypt_bulk_rx_key(iface, flow, 1) != UCS_OK))) {
        uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                                UCT_CRYPT_FAIL_HANDSHAKE);
        return;
    }
    if (generation != (uint16_t)flow->bulk_keys->generation) {
        uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                                UCT_CRYPT_FAIL_AUTH);
        return;
    }
    /* only memory this process registered, or the destination of a get we
     * asked this peer for, is opened (or zeroed, when the open fails): an
     * authenticated peer cannot aim us elsewhere */
    if (!uct_crypt_md_registered(ucs_derived_of(iface->super.md, uct_crypt_md_t),
                                 address, length) &&
        !uct_crypt_bulk_get_window(iface, flow->peer_public, address, length)) {
        ucs_error("crypt: " uct_crypt_log_peer_fmt " announced %" PRIu64
                  " bytes at 0x%" PRIx64 ", outside registered memory",
                  uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                  length, address);
        uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                                UCT_CRYPT_FAIL_MALFORMED);
        return;
    }

    uct_crypt_bulk_stream_prefix(prefix, put_id);
    uct_crypt_bulk_aad(&aad, flow->flow_id, put_id, address, length);
    /* in place: the inner put left the ciphertext where the plaintext
     * belongs; a failed open zeroes it (aead.h), so neither forged plaintext
     * nor ciphertext is left for UCP */
    if (crypt_stream_open_segment(&flow->bulk_aead, prefix, index,
                                  announce->last, &aad, sizeof(aad),
                                  (void*)(uintptr_t)address, length,
                                  (void*)(uintptr_t)address,
                                  announce->tag) != CRYPT_AEAD_OK) {
        uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                                UCT_CRYPT_FAIL_AUTH);
        return;
    }
    UCT_CRYPT_STAT_ADD(bulk_bytes_opened, length);

    if (announce->last) {
        flow->bulk_next_put++;
        flow->bulk_next_segment = 0;
        uct_crypt_bulk_ack(iface, flow, put_id);
    } else {
        flow->bulk_next_segment++;
    }
}

/* The bulk state of our ep whose sending flow is `flow_id`, if the reply
 * about it came from the peer that ep talks to (ACK, GET_DONE) */
static uct_crypt_bulk_tx_t *uct_crypt_bulk_tx_of(uct_crypt_iface_t *iface,
                                                 uct_crypt_rx_flow_t *flow,
                                                 uint64_t flow_id)
{
    uct_crypt_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        if ((ep->tx.flow_id == flow_id) && (ep->bulk != NULL) && !ep->failed) {
            return CRYPTO_memcmp(ep->peer_public, flow->peer_public,
                                 KEYEX_PUBLIC_KEY_LEN) ? NULL : ep->bulk;
        }
    }
    return NULL;
}

static void uct_crypt_bulk_acked(uct_crypt_iface_t *iface,
                                 uct_crypt_rx_flow_t *flow, uint8_t am_id,
                                 const crypt_bulk_ack_t *ack)
{
    uct_crypt_bulk_tx_t *tx = uct_crypt_bulk_tx_of(iface, flow,
                                                   le64toh(ack->flow_id));
    uct_crypt_bulk_op_t *op;

    /* acknowledged in order, only once all of it was announced, and only
     * by the peer it was sent to */
    if ((tx != NULL) && !ucs_list_is_empty(&tx->ops)) {
        op = ucs_list_head(&tx->ops, uct_crypt_bulk_op_t, list);
        if ((op->put_id == le64toh(ack->put_id)) &&
            (op->announced == op->num_segments)) {
            UCT_CRYPT_STAT_ADD(bulk_bytes_sealed, op->length);
            uct_crypt_bulk_op_complete(tx, op, UCS_OK);
            uct_crypt_bulk_tx_flushes(tx);
            return;
        }
    }
    uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                            UCT_CRYPT_FAIL_MALFORMED);
}

/* the put answering a get was acknowledged: tell the initiator */
static void uct_crypt_bulk_served(uct_completion_t *self)
{
    uct_crypt_bulk_serve_t *serve = ucs_container_of(self, uct_crypt_bulk_serve_t,
                                                     comp);

    if (self->status == UCS_OK) {
        uct_crypt_bulk_reply(serve->iface, serve->peer_public,
                             le64toh(serve->done.flow_id), &serve->done);
    }
    uct_rkey_release(&uct_crypt_component, &serve->rkey);
    ucs_free(serve);
}

/* A peer's GET_REQ, in an authenticated, in-sequence record: seal the
 * range and put it to the peer, if the range is memory we registered (a
 * get may not read anything else, whatever the peer's key says). */
static void uct_crypt_bulk_serve_get(uct_crypt_iface_t *iface,
                                     uct_crypt_rx_flow_t *flow, uint8_t am_id,
                                     const uint8_t *payload, size_t length)
{
    uct_crypt_md_t *md = ucs_derived_of(iface->super.md, uct_crypt_md_t);
    uct_crypt_bulk_serve_t *serve = NULL;
    crypt_bulk_get_req_t req;
    uint64_t get_id, remote_addr, local_addr, get_length;
    uct_crypt_ep_t *ep;
    ucs_status_t status;

    memcpy(&req, payload, sizeof(req));
    get_id      = le64toh(req.get_id);
    remote_addr = le64toh(req.remote_addr);
    local_addr  = le64toh(req.local_addr);
    get_length  = le64toh(req.length);
    if ((length != sizeof(req) + le32toh(req.rkey_length)) ||
        (le32toh(req.rkey_length) < UCT_COMPONENT_NAME_MAX) ||
        (get_id != flow->bulk_next_get) || (get_length > UCT_CRYPT_BULK_MAX_PUT) ||
        (iface->bulk == NULL)) {
        goto reject;
    }
    if (!uct_crypt_md_registered(md, remote_addr, get_length)) {
        ucs_error("crypt: " uct_crypt_log_peer_fmt " asked to read %" PRIu64
                  " bytes at 0x%" PRIx64 ", outside registered memory",
                  uct_crypt_log_peer_arg(flow->peer_public, flow->flow_id),
                  get_length, remote_addr);
        goto reject;
    }
    ++flow->bulk_next_get;
    UCT_CRYPT_STAT_ADD(bulk_gets_served, 1);

    ep    = uct_crypt_bulk_ep_to(iface, flow->peer_public);
    serve = ucs_calloc(1, sizeof(*serve), "crypt bulk get served");
    if ((ep == NULL) || (serve == NULL)) {
        ucs_error("crypt: cannot answer a get from " uct_crypt_log_peer_fmt
                  ": no endpoint back to it", uct_crypt_log_peer_arg(
                  flow->peer_public, flow->flow_id));
        goto reject_free;
    }
    if (uct_rkey_unpack(&uct_crypt_component, payload + sizeof(req),
                        &serve->rkey) != UCS_OK) {
        goto reject_free;
    }
    serve->comp.func   = uct_crypt_bulk_served;
    serve->comp.count  = 1;
    serve->comp.status = UCS_OK;
    serve->iface       = iface;
    memcpy(serve->peer_public, flow->peer_public, KEYEX_PUBLIC_KEY_LEN);
    serve->done.kind    = CRYPT_CONTROL_GET_DONE;
    serve->done.flow_id = htole64(flow->flow_id);
    serve->done.put_id  = htole64(get_id);
    status = uct_crypt_bulk_put(ep, (const void*)(uintptr_t)remote_addr,
                                get_length, local_addr,
                                ((uct_crypt_rkey_t*)serve->rkey.rkey)->inner.rkey,
                                &serve->comp);
    if (status == UCS_INPROGRESS) {
        return;
    }
    uct_rkey_release(&uct_crypt_component, &serve->rkey);
reject_free:
    ucs_free(serve);
reject:
    uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                            UCT_CRYPT_FAIL_MALFORMED);
}

/* GET_DONE: our oldest get on that flow is in place and opened */
static void uct_crypt_bulk_get_done(uct_crypt_iface_t *iface,
                                    uct_crypt_rx_flow_t *flow, uint8_t am_id,
                                    const crypt_bulk_ack_t *done)
{
    uct_crypt_bulk_tx_t *tx = uct_crypt_bulk_tx_of(iface, flow,
                                                   le64toh(done->flow_id));
    uct_crypt_bulk_get_t *get;

    /* in order, and only from the peer we asked */
    if ((tx != NULL) && !ucs_list_is_empty(&tx->gets)) {
        get = ucs_list_head(&tx->gets, uct_crypt_bulk_get_t, list);
        if (get->get_id == le64toh(done->put_id)) {
            ucs_list_del(&get->list);
            uct_invoke_completion(get->comp, UCS_OK);
            ucs_free(get);
            uct_crypt_bulk_tx_flushes(tx);
            return;
        }
    }
    uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                            UCT_CRYPT_FAIL_MALFORMED);
}

void uct_crypt_bulk_control(uct_crypt_iface_t *iface, uct_crypt_rx_flow_t *flow,
                            uint8_t am_id, uint8_t *payload, size_t length)
{
    crypt_bulk_segment_t announce;
    crypt_bulk_ack_t ack;

    if ((length == sizeof(announce)) && (payload[0] == CRYPT_CONTROL_SEGMENT)) {
        memcpy(&announce, payload, sizeof(announce));
        uct_crypt_bulk_open_segment(iface, flow, am_id, &announce);
    } else if ((length == sizeof(ack)) && (payload[0] == CRYPT_CONTROL_ACK)) {
        memcpy(&ack, payload, sizeof(ack));
        uct_crypt_bulk_acked(iface, flow, am_id, &ack);
    } else if ((length == sizeof(ack)) && (payload[0] == CRYPT_CONTROL_GET_DONE)) {
        memcpy(&ack, payload, sizeof(ack));
        uct_crypt_bulk_get_done(iface, flow, am_id, &ack);
    } else if ((length >= sizeof(crypt_bulk_get_req_t)) &&
               (payload[0] == CRYPT_CONTROL_GET_REQ)) {
        uct_crypt_bulk_serve_get(iface, flow, am_id, payload, length);
    } else {
        uct_crypt_record_reject(iface, flow, NULL, flow->flow_id, am_id,
                                UCT_CRYPT_FAIL_MALFORMED);
    }
}

void uct_crypt_bulk_rx_flow_cleanup(uct_crypt_rx_flow_t *flow)
{
    if (flow->bulk_keys != NULL) {
        crypt_aead_key_cleanup(&flow->bulk_aead);
        keyex_secure_free(flow->bulk_keys, sizeof(*flow->bulk_keys));
        flow->bulk_keys = NULL;
    }
}
