/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection manager itself (cm.h): its options, the uct_cm and the
 * "iface" UCP sees, the device a connection runs on, and the deadline
 * timer of connections whose handshake is under way.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include "uct_crypt/cm/cm.h"

#include <ucs/async/async.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

ucs_config_field_t uct_crypt_cm_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_crypt_cm_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_cm_config_table)},

    {"PRIV_DATA_LEN", "2048",
     "Largest private data (UCP's worker and lane addresses) a connection\n"
     "carries each way, as tcp's TCP_CM_PRIV_DATA_LEN.",
     ucs_offsetof(uct_crypt_cm_config_t, priv_data_len), UCS_CONFIG_TYPE_MEMUNITS},

    {"HANDSHAKE_TIMEOUT", "5s",
     "A connection that has not finished crypt's handshake and its CONNECT\n"
     "within this time is closed (client: the endpoint fails).",
     ucs_offsetof(uct_crypt_cm_config_t, handshake_timeout), UCS_CONFIG_TYPE_TIME},

    {NULL}
};

void uct_crypt_cm_ep_tell_refusal(uct_crypt_cm_ep_t *ep)
{
    keyex_noise_refusal_msg_t msg = {KEYEX_NOISE_REFUSAL_TYPE,
                                     KEYEX_NOISE_VERSION, ep->refusal, 0};

    /* best effort: 4 bytes into a socket that holds nothing of ours yet
     * (nothing before the handshake's answer), never waiting */
    if ((ep->refusal != 0) && (ep->fd >= 0) &&
        (ep->state & UCT_CRYPT_CM_EP_SERVER) && !(ep->state & UCT_CRYPT_CM_EP_KEYS)) {
        (void)!send(ep->fd, &msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
}

void uct_crypt_cm_refused(uct_crypt_cm_ep_t *ep, const char *why)
{
    static uint64_t count;
    uint64_t n = __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);

    UCT_CRYPT_STAT_ADD(cm_refused, 1);
    if (uct_crypt_outsider_logged(n)) {
        ucs_warn("crypt: connection manager refused a connection from %s: %s "
                 "(%" PRIu64 " refused so far; the listener goes on)",
                 ep->peer_name, why, n);
    }
}

/* ---- the device a connection runs on ------------------------------------ */

/* The crypt device of the connection on `fd` (the interface of its local
 * address, or the InfiniBand port behind it: IPoIB, RoCE) and the device
 * address of our iface there: UCP picks its lanes by the name and puts
 * the address in place of the one in the peer's worker address */
ucs_status_t uct_crypt_cm_device(uct_crypt_cm_t *cm, int fd,
                                 char dev_name[UCT_DEVICE_NAME_MAX],
                                 void *dev_addr, size_t *dev_addr_len,
                                 uint8_t *key)
{
    uct_worker_h worker = &cm->super.iface.worker->super;
    char ifname[UCT_DEVICE_NAME_MAX], path[256], hca[64];
    struct dirent *entry;
    ucs_status_t status;
    int port = 0;
    DIR *dir;
    FILE *f;

    status = ucs_sockaddr_get_ifname(fd, ifname, sizeof(ifname));
    if (status != UCS_OK) {
        return status;
    }
    ucs_strncpy_zero(dev_name, ifname, UCT_DEVICE_NAME_MAX);
    status = uct_crypt_iface_device_address(worker, dev_name, dev_addr,
                                            UCT_CRYPT_CM_MAX_DEV_ADDR,
                                            dev_addr_len, key);
    if (status != UCS_ERR_NO_DEVICE) {
        return status;
    }

    /* an inner on the HCA (rc, ud, dc): the port under this netdev, named
     * as UCX names IB devices (mlx5_0:1), as rdmacm reports it */
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/infiniband", ifname);
    dir = opendir(path);
    if (dir == NULL) {
        return UCS_ERR_NO_DEVICE;
    }
    hca[0] = '\0';
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] != '.') {
            ucs_strncpy_zero(hca, entry->d_name, sizeof(hca));
            break;
        }
    }
    closedir(dir);
    snprintf(path, sizeof(path), "/sys/class/net/%s/dev_port", ifname);
    f = fopen(path, "r");
    if ((f != NULL) && (fscanf(f, "%d", &port) != 1)) {
        port = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    if (hca[0] == '\0') {
        return UCS_ERR_NO_DEVICE;
    }
    snprintf(dev_name, UCT_DEVICE_NAME_MAX, "%s:%d", hca, port + 1);
    return uct_crypt_iface_device_address(worker, dev_name, dev_addr,
                                          UCT_CRYPT_CM_MAX_DEV_ADDR,
                                          dev_addr_len, key);
}

/* ---- deadlines ------------------------------------------------------------- */

/* The timer runs only while an endpoint is in its handshake: UCX's async
 * thread keeps all the process's timers in one queue of bounded size
 * (ucs_async_dispatch_timerq: about 300), and a worker each with an idle
 * connection manager would fill it. Runs, and is armed, with the async
 * context held. */
static void uct_crypt_cm_timer(int id, ucs_event_set_types_t events, void *arg)
{
    uct_crypt_cm_t *cm = arg;
    ucs_time_t now     = ucs_get_time();
    uct_crypt_cm_ep_t *ep, *tmp;
    int waiting        = 0;

    ucs_list_for_each_safe(ep, tmp, &cm->eps, list) {
        if (uct_crypt_cm_ep_held(ep)) {
            /* a disconnect whose data is late (cm_ep.c) */
            if (now > ep->deadline) {
                ucs_diag("crypt: connection manager: %s disconnected before "
                         "all it sent arrived; reported after "
                         "UCX_CRYPT_CM_HANDSHAKE_TIMEOUT", ep->peer_name);
                uct_crypt_cm_ep_report_disconnect(ep);
            } else {
                waiting = 1;
            }
            continue;
        }
        if ((ep->state & UCT_CRYPT_CM_EP_FAILED) || !uct_crypt_cm_ep_in_handshake(ep)) {
            continue;
        }
        if (now > ep->deadline) {
            uct_crypt_cm_ep_fail(ep, UCS_ERR_TIMED_OUT,
                                 "no crypt handshake within "
                                 "UCX_CRYPT_CM_HANDSHAKE_TIMEOUT");
        } else {
            waiting = 1;
        }
    }
    /* deferred first messages, the oldest first: their host's turn?
     * (uct_crypt_cm_server_handshake) Handling one may end another ep, so
     * the walk starts over, each asked once a tick */
    ++cm->retry_round;
restart:
    ucs_list_for_each(ep, &cm->eps, list) {
        if (ep->dh_deferred && !(ep->state & UCT_CRYPT_CM_EP_FAILED) &&
            (ep->retry_round != cm->retry_round)) {
            ep->retry_round = cm->retry_round;
            uct_crypt_cm_ep_handler(ep->fd, UCS_EVENT_SET_EVREAD, ep);
            goto restart;
        }
    }
    if (!waiting && (cm->timer_id == id)) {
        /* (from its own callback: without waiting for itself) */
        (void)ucs_async_remove_handler(id, 0);
        cm->timer_id = -1;
    }
}

ucs_status_t uct_crypt_cm_timer_arm(uct_crypt_cm_t *cm)
{
    ucs_async_context_t *async = uct_crypt_cm_async(cm);
    ucs_status_t status        = UCS_OK;

    UCS_ASYNC_BLOCK(async);
    if (cm->timer_id < 0) {
        status = ucs_async_add_timer(async->mode, cm->timer_interval,
                                     uct_crypt_cm_timer, cm, async, &cm->timer_id);
        if (status != UCS_OK) {
            cm->timer_id = -1;
        }
    }
    UCS_ASYNC_UNBLOCK(async);
    return status;
}

/* ---- the cm -------------------------------------------------------------------- */

static ucs_status_t uct_crypt_cm_query(uct_cm_h tl_cm, uct_cm_attr_t *attr)
{
    uct_crypt_cm_t *cm = ucs_derived_of(tl_cm, uct_crypt_cm_t);

    if (attr->field_mask & UCT_CM_ATTR_FIELD_MAX_CONN_PRIV) {
        attr->max_conn_priv = cm->priv_data_len;
    }
    return UCS_OK;
}

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_crypt_cm_t, uct_cm_t);

static uct_cm_ops_t uct_crypt_cm_ops = {
    .close            = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_t),
    .cm_query         = uct_crypt_cm_query,
    .listener_create  = UCS_CLASS_NEW_FUNC_NAME(uct_crypt_cm_listener_t),
    .listener_reject  = uct_crypt_cm_listener_reject,
    .listener_query   = uct_crypt_cm_listener_query,
    .listener_destroy = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_listener_t),
    .ep_create        = uct_crypt_cm_ep_create
};

static ucs_status_t uct_crypt_cm_unsupported(void)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t uct_crypt_cm_ep_flush(uct_ep_h ep, unsigned flags,
                                          uct_completion_t *comp)
{
    return UCS_OK; /* nothing of the user's travels here */
}

static void uct_crypt_cm_nothing(void)
{
}

static unsigned uct_crypt_cm_iface_progress(uct_iface_h iface)
{
    return 0; /* events come on the worker's async context */
}

/* What a cm's "iface" offers: the ep calls of the sockaddr flow; every
 * data call is UNSUPPORTED, as in tcp_sockcm */
static uct_iface_ops_t uct_crypt_cm_iface_ops;
static uct_iface_internal_ops_t uct_crypt_cm_iface_internal_ops;

static void uct_crypt_cm_iface_ops_init(void)
{
    uct_iface_ops_t *ops = &uct_crypt_cm_iface_ops;
    void (**op)(void);
    size_t i;

    /* every slot UNSUPPORTED first, whatever this UCX's table holds */
    for (i = 0, op = (void (**)(void))ops; i < sizeof(*ops) / sizeof(*op); ++i) {
        op[i] = (void (*)(void))uct_crypt_cm_unsupported;
    }
    ops->ep_pending_purge       = (uct_ep_pending_purge_func_t)uct_crypt_cm_nothing;
    ops->ep_connect             = uct_crypt_cm_ep_connect;
    ops->ep_disconnect          = uct_crypt_cm_ep_disconnect;
    ops->cm_ep_conn_notify      = uct_crypt_cm_ep_conn_notify;
    ops->ep_destroy             = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t);
    ops->ep_flush               = uct_crypt_cm_ep_flush;
    ops->iface_progress_enable  = (uct_iface_progress_enable_func_t)uct_crypt_cm_nothing;
    ops->iface_progress_disable = (uct_iface_progress_disable_func_t)uct_crypt_cm_nothing;
    ops->iface_progress         = uct_crypt_cm_iface_progress;
    ops->iface_close            = (uct_iface_close_func_t)uct_crypt_cm_nothing;

    uct_crypt_internal_ops_init(&uct_crypt_cm_iface_internal_ops, 1);
    uct_crypt_cm_iface_internal_ops.ep_query = uct_crypt_cm_ep_query;
}

static UCS_CLASS_INIT_FUNC(uct_crypt_cm_t, uct_component_h component,
                           uct_worker_h worker, const uct_cm_config_t *config)
{
    const uct_crypt_cm_config_t *cm_config =
            ucs_derived_of(config, uct_crypt_cm_config_t);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    ucs_status_t status;

    (void)pthread_once(&once, uct_crypt_cm_iface_ops_init);
    UCS_CLASS_CALL_SUPER_INIT(uct_cm_t, &uct_crypt_cm_ops, &uct_crypt_cm_iface_ops,
                              &uct_crypt_cm_iface_internal_ops,
                              worker, component, config);

    status = uct_crypt_global_init(); /* the job secret: the psk */
    if (status != UCS_OK) {
        return status;
    }
    status = uct_crypt_data_role_options(&self->keepalive, NULL);
    if (status != UCS_OK) {
        return status;
    }
    if ((cm_config->priv_data_len == 0) ||
        (cm_config->priv_data_len >
         UCT_CRYPT_CM_MAX_BODY - UCT_CRYPT_CM_ADDRESSES_HEAD)) {
        ucs_error("crypt: UCX_CRYPT_CM_PRIV_DATA_LEN=%zu: give 1 to %d bytes",
                  cm_config->priv_data_len,
                  UCT_CRYPT_CM_MAX_BODY - UCT_CRYPT_CM_ADDRESSES_HEAD);
        return UCS_ERR_INVALID_PARAM;
    }
    if (cm_config->handshake_timeout <= 0) {
        ucs_error("crypt: UCX_CRYPT_CM_HANDSHAKE_TIMEOUT must be above zero");
        return UCS_ERR_INVALID_PARAM;
    }
    self->priv_data_len     = cm_config->priv_data_len;
    self->max_body          = ucs_max(UCT_CRYPT_CM_ADDRESSES_HEAD +
                                      self->priv_data_len,
                                      CRYPT_CM_DISCONNECT_MARKS_MAX *
                                      sizeof(crypt_cm_flow_mark_t));
    self->handshake_timeout = ucs_time_from_sec(cm_config->handshake_timeout);
    self->half_open         = 0;
    self->cookied           = 0;
    self->proven            = 0;
    self->retry_round       = 0;
    memset(&self->seen, 0, sizeof(self->seen));
    ucs_list_head_init(&self->eps);
    /* (what only a server needs comes with its first listener: UCP 1.13
     * asserts in ucp_listener_create when the cm failed to open) */
    self->room_fd           = -1;
    self->start             = NULL;
    self->scratch           = NULL;
    self->cookie_key        = NULL;
    memset(&self->cookies, 0, sizeof(self->cookies));
    self->admit_sources     = NULL;
    self->admit_silent      = NULL;

    self->timer_interval    = ucs_time_from_sec(ucs_min(0.5,
                                        cm_config->handshake_timeout / 4));
    self->timer_id          = -1; /* armed by the first handshake */
    ucs_debug("crypt: connection manager %p opened", self);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_cm_t)
{
    uct_crypt_cm_ep_t *ep, *tmp;
    int timer_id;

    UCS_ASYNC_BLOCK(uct_crypt_cm_async(self));
    timer_id       = self->timer_id;
    self->timer_id = -1; /* the callback no longer removes it itself */
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(self));
    if (timer_id >= 0) {
        (void)ucs_async_remove_handler(timer_id, 1);
    }
    if (self->room_fd >= 0) {
        (void)ucs_async_remove_handler(self->room_fd, 1);
    }
    UCS_ASYNC_BLOCK(uct_crypt_cm_async(self));
    ucs_list_for_each_safe(ep, tmp, &self->eps, list) {
        if (uct_crypt_cm_ep_is_internal(ep)) {
            UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_cm_ep_t)(&ep->super.super.super);
        } else {
            /* the user's: it must destroy it before the cm */
            ucs_warn("crypt: connection manager closed with an endpoint to %s "
                     "still open", ep->peer_name);
            ucs_list_del(&ep->list);
            ucs_list_head_init(&ep->list);
        }
    }
    UCS_ASYNC_UNBLOCK(uct_crypt_cm_async(self));
    if (self->room_fd >= 0) {
        close(self->room_fd);
    }
    uct_crypt_cm_server_cleanup(self);
    uct_crypt_seen_cleanup(&self->seen);
}

UCS_CLASS_DEFINE(uct_crypt_cm_t, uct_cm_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_cm_t, uct_cm_t, uct_component_h,
                                 uct_worker_h, const uct_cm_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_cm_t, uct_cm_t);

ucs_status_t uct_crypt_cm_open(uct_component_t *component, uct_worker_h worker,
                               const uct_cm_config_t *config, uct_cm_t **cm_p)
{
    return UCS_CLASS_NEW_FUNC_NAME(uct_crypt_cm_t)(component, worker, config,
                                                   cm_p);
}

