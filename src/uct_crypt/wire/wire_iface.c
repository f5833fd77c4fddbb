/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crypt's own Ethernet wire, the iface (wire/wire.h): one listening
 * socket on the device's address, one epoll set for it and every
 * connection, progress that accepts, reads and writes without blocking,
 * the half-open slots and the handshake deadlines, and the addresses UCP
 * exchanges (device: the IP address; iface and ep: the port).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include "uct_crypt/wire/wire_int.h"

#include <ucs/sys/math.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/sys/uid.h>
#include <ucs/time/time.h>
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* epoll's data for the listening socket and the deadline timer
 * (connections carry their conn) */
static char uct_crypt_wire_listen_marker;
static char uct_crypt_wire_timer_marker;

static uct_iface_ops_t uct_crypt_wire_iface_ops;

/* ---- strangers: drop, count, log rate-limited ----------------------------- */

void uct_crypt_wire_outsider(uct_crypt_wire_iface_t *iface,
                             const uct_crypt_wire_conn_t *conn, const char *what,
                             ucs_log_level_t level)
{
    static uint64_t count;
    uint64_t n = __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);

    UCT_CRYPT_STAT_ADD(wire_refused, 1);
    if (uct_crypt_outsider_logged(n)) {
        ucs_log(level, "crypt: refused a connection from %s: %s (%" PRIu64
                " refused so far; the job goes on)", conn->peer_name, what, n);
    }
}

/* ---- addresses ------------------------------------------------------------ */

static ucs_status_t uct_crypt_wire_dev_sockaddr(const char *dev_name,
                                                struct sockaddr_storage *addr)
{
    struct ifaddrs *ifa, *list;
    int af, found = 0;

    if (getifaddrs(&list) < 0) {
        return UCS_ERR_IO_ERROR;
    }
    /* IPv4 first, as UCX's tcp transport prefers it; else a global IPv6 */
    for (af = AF_INET; !found && (af != 0); af = (af == AF_INET) ? AF_INET6 : 0) {
        for (ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            if ((ifa->ifa_addr == NULL) || (ifa->ifa_addr->sa_family != af) ||
                strcmp(ifa->ifa_name, dev_name)) {
                continue;
            }
            if ((af == AF_INET6) &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6*)ifa->ifa_addr)->sin6_addr)) {
                continue;
            }
            memset(addr, 0, sizeof(*addr));
            memcpy(addr, ifa->ifa_addr, (af == AF_INET) ?
                   sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
            found = 1;
            break;
        }
    }
    freeifaddrs(list);
    return found ? UCS_OK : UCS_ERR_NO_DEVICE;
}

static socklen_t uct_crypt_wire_addr_len(const struct sockaddr_storage *addr)
{
    return (addr->ss_family == AF_INET6) ? sizeof(struct sockaddr_in6) :
                                           sizeof(struct sockaddr_in);
}

static uint16_t uct_crypt_wire_port(const struct sockaddr_storage *addr)
{
    return (addr->ss_family == AF_INET6) ?
           ntohs(((const struct sockaddr_in6*)addr)->sin6_port) :
           ntohs(((const struct sockaddr_in*)addr)->sin_port);
}

static uint8_t uct_crypt_wire_dev_flags(const uct_crypt_wire_iface_t *iface)
{
    return ucs_sockaddr_is_inaddr_loopback((const struct sockaddr*)&iface->addr) ?
           CRYPT_WIRE_DEV_ADDR_FLAG_LOOPBACK : 0;
}

static uint8_t uct_crypt_wire_dev_family(const uct_crypt_wire_iface_t *iface)
{
    return (iface->addr.ss_family == AF_INET6) ? 6 : 4;
}

static ucs_status_t uct_crypt_wire_iface_get_device_address(uct_iface_h tl_iface,
                                                            uct_device_addr_t *addr)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    crypt_wire_dev_addr_t *dev    = (crypt_wire_dev_addr_t*)addr;
    uint8_t *ip                   = (uint8_t*)(dev + 1);

    dev->family = uct_crypt_wire_dev_family(iface);
    dev->flags  = uct_crypt_wire_dev_flags(iface);
    if (dev->family == 6) {
        memcpy(ip, &((struct sockaddr_in6*)&iface->addr)->sin6_addr, 16);
    } else {
        memcpy(ip, &((struct sockaddr_in*)&iface->addr)->sin_addr, 4);
    }
    if (dev->flags & CRYPT_WIRE_DEV_ADDR_FLAG_LOOPBACK) {
        memcpy(ip + ((dev->family == 6) ? 16 : 4), &iface->dev_local,
               sizeof(iface->dev_local));
    }
    return UCS_OK;
}

static ucs_status_t uct_crypt_wire_iface_get_address(uct_iface_h tl_iface,
                                                     uct_iface_addr_t *addr)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    crypt_wire_iface_addr_t *sock = (crypt_wire_iface_addr_t*)addr;

    sock->port = htole16(iface->advertise_port ? iface->advertise_port :
                         uct_crypt_wire_port(&iface->addr));
    return UCS_OK;
}

/* The socket address of a peer from what UCP gave us; 0 when malformed */
int uct_crypt_wire_dest(const uct_device_addr_t *dev_addr, const void *port_addr,
                        struct sockaddr_storage *dest)
{
    const crypt_wire_dev_addr_t *dev = (const crypt_wire_dev_addr_t*)dev_addr;
    const crypt_wire_iface_addr_t *sock = port_addr;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6*)dest;
    struct sockaddr_in *in   = (struct sockaddr_in*)dest;

    memset(dest, 0, sizeof(*dest));
    if (dev->family == 4) {
        in->sin_family = AF_INET;
        in->sin_port   = htons(le16toh(sock->port));
        memcpy(&in->sin_addr, dev + 1, 4);
        return 1;
    }
    if (dev->family == 6) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port   = htons(le16toh(sock->port));
        memcpy(&in6->sin6_addr, dev + 1, 16);
        return 1;
    }
    return 0;
}

static int uct_crypt_wire_iface_is_reachable(const uct_iface_h tl_iface,
                                             const uct_device_addr_t *dev_addr,
                                             const uct_iface_addr_t *iface_addr)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    const crypt_wire_dev_addr_t *dev = (const crypt_wire_dev_addr_t*)dev_addr;
    crypt_wire_iface_addr_t any_port = {0};
    crypt_wire_dev_local_t peer_local;
    struct sockaddr_storage peer;
    int local_loopback, peer_loopback;

    if ((dev == NULL) || (dev->family != uct_crypt_wire_dev_family(iface)) ||
        !uct_crypt_wire_dest(dev_addr, &any_port, &peer)) {
        return 0;
    }
    /* As UCX's tcp (uct_tcp_iface_is_reachable): loopback reaches only
     * loopback, and only in the same machine and network namespace. Under
     * UCX's default UCX_NET_DEVICES every host opens lo too, and its
     * 127.0.0.1 must never be dialled from another host. An address that
     * is loopback by its bytes counts as one whatever its flags say. */
    local_loopback = !!uct_crypt_wire_dev_flags(iface);
    peer_loopback  = ucs_sockaddr_is_inaddr_loopback((const struct sockaddr*)&peer);
    if (local_loopback != peer_loopback) {
        return 0;
    }
    if (!peer_loopback) {
        return 1; /* as tcp: connect() says whether it answers */
    }
    if (!(dev->flags & CRYPT_WIRE_DEV_ADDR_FLAG_LOOPBACK)) {
        return 0; /* no machine and namespace to compare */
    }
    memcpy(&peer_local, (const uint8_t*)(dev + 1) + ((dev->family == 6) ? 16 : 4),
           sizeof(peer_local));
    return !memcmp(&peer_local, &iface->dev_local, sizeof(peer_local));
}

static ucs_status_t uct_crypt_wire_iface_query(uct_iface_h tl_iface,
                                               uct_iface_attr_t *attr)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    char path[128];
    long mbps = 0;
    FILE *f;

    memset(attr, 0, sizeof(*attr));
    attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                      UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                      UCT_IFACE_FLAG_CONNECT_TO_EP |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                      UCT_IFACE_FLAG_EP_CHECK | UCT_IFACE_FLAG_EP_KEEPALIVE;
#if UCT_CRYPT_HAVE_INTER_NODE_FLAG
    attr->cap.flags |= UCT_IFACE_FLAG_INTER_NODE; /* a network, as tcp */
#endif
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                            UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;
    attr->cap.am.max_short = 8192;
    attr->cap.am.max_bcopy = UCT_CRYPT_WIRE_MAX_BCOPY;
    attr->cap.am.max_iov   = 1;
    attr->device_addr_len  = crypt_wire_dev_addr_len(uct_crypt_wire_dev_family(iface),
                                                     uct_crypt_wire_dev_flags(iface));
    attr->iface_addr_len   = sizeof(crypt_wire_iface_addr_t);
    attr->ep_addr_len      = sizeof(crypt_wire_iface_addr_t);
    attr->max_conn_priv    = 0;
    attr->dev_num_paths    = 1;
    attr->max_num_eps      = SIZE_MAX;
    attr->priority         = 0;

    /* the link's speed where the kernel knows it (not for lo or veth) */
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", iface->dev_name);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &mbps) != 1) {
            mbps = 0;
        }
        fclose(f);
    }
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = ((mbps > 0) ? mbps : 10000) * 1e6 / 8 * 0.95;
    attr->latency.c           = 10e-6;
    attr->latency.m           = 0;
    attr->overhead            = 50e-6; /* a system call per message, as tcp */
    return UCS_OK;
}

/* ---- progress -------------------------------------------------------------- */

/* UCX tcp's knobs and defaults' shape (tcp_iface.c); the sum is 10 s, a
 * dead peer noticed well before a job's own timeouts */
ucs_config_field_t uct_crypt_keepalive_config_table[] = {
    {"KEEPIDLE", "4s",
     "Time a connection of crypt's own sockets (tcp) stays idle before TCP\n"
     "sends keepalive probes, as UCX_TCP_KEEPIDLE. \"inf\" disables keepalive.",
     ucs_offsetof(uct_crypt_keepalive_t, idle), UCS_CONFIG_TYPE_TIME_UNITS},

    {"KEEPCNT", "3",
     "Keepalive probes left unanswered before the connection fails, as\n"
     "UCX_TCP_KEEPCNT (1 to 127; auto: 3). \"inf\" disables keepalive.",
     ucs_offsetof(uct_crypt_keepalive_t, cnt), UCS_CONFIG_TYPE_ULUNITS},

    {"KEEPINTVL", "2s",
     "Time between keepalive probes, as UCX_TCP_KEEPINTVL. A peer host that\n"
     "stops answering, or a cut link, fails the connections to it after\n"
     "KEEPIDLE + KEEPCNT * KEEPINTVL (on a busy connection: no acknowledgement\n"
     "at all for that long). A peer process that is only busy is never failed:\n"
     "its kernel answers. \"inf\" disables keepalive.",
     ucs_offsetof(uct_crypt_keepalive_t, intvl), UCS_CONFIG_TYPE_TIME_UNITS},

    {NULL}
};

/* The probes the kernel is told to send, which the timer's bound counts
 * too: KEEPCNT within what the kernel takes (1 to INT8_MAX, as tcp_ep.c),
 * 3 where "auto" (a number is needed for the bound: "auto" must not turn
 * keepalive off unseen); 0 where keepalive is off */
static int uct_crypt_keepalive_count(const uct_crypt_keepalive_t *keepalive)
{
    if ((keepalive->idle == UCS_TIME_INFINITY) ||
        (keepalive->intvl == UCS_TIME_INFINITY) ||
        (keepalive->cnt == UCS_ULUNITS_INF)) {
        return 0;
    }
    if (keepalive->cnt == UCS_ULUNITS_AUTO) {
        return 3;
    }
    return (int)ucs_min(ucs_max(keepalive->cnt, 1), INT8_MAX);
}

double uct_crypt_keepalive_seconds(const uct_crypt_keepalive_t *keepalive)
{
    int cnt = uct_crypt_keepalive_count(keepalive);

    return (cnt == 0) ? 0 : ucs_time_to_sec(keepalive->idle) +
                            (cnt * ucs_time_to_sec(keepalive->intvl));
}

/* whole seconds, at least one: what the kernel takes (a time read as
 * "7s" comes back from cycles as 6.99...) */
static int uct_crypt_wire_keepalive_sec(ucs_time_t time)
{
    return ucs_max((int)ucs_min(ucs_time_to_sec(time) + 0.5, INT_MAX), 1);
}

void uct_crypt_wire_set_options(int fd, const uct_crypt_keepalive_t *keepalive)
{
    int one = 1, idle, intvl, cnt = uct_crypt_keepalive_count(keepalive);

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (cnt == 0) {
        return;
    }
    /* The peer's kernel answers probes whether or not its process reads,
     * as with UCX tcp's keepalive (tcp_ep.c, uct_tcp_ep_keepalive_enable).
     * No TCP_USER_TIMEOUT (RFC 5482): Linux applies it to zero-window
     * probes too ("tcp: fix TCP_USER_TIMEOUT with zero window", 2021), so
     * a peer busy computing for that long, with our data filling its
     * buffers, failed as if it were dead (UCX's own
     * test_ucp_sockaddr_protocols_err_sender showed it); UCX tcp never
     * fails a busy peer. On the wire's connections, data that gets no
     * acknowledgement at all (a cut link, a dead host) is found by
     * uct_crypt_wire_unanswered; the connection manager's carry a few
     * small frames and are idle otherwise. */
    idle  = uct_crypt_wire_keepalive_sec(keepalive->idle);
    intvl = uct_crypt_wire_keepalive_sec(keepalive->intvl);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

void uct_crypt_wire_iface_set_options(uct_crypt_wire_iface_t *iface, int fd)
{
    uct_crypt_wire_set_options(fd, &iface->keepalive);
    /* (as tcp_iface.c: best effort, the kernel bounds and doubles them) */
    (void)ucs_socket_set_buffer_size(fd, iface->sndbuf, iface->rcvbuf);
}

/* While strangers' connections wait for their initiation, a timer in the
 * epoll set fires once a second: it makes the epoll fd readable, which
 * brings a progress call (UCP polls or waits on that fd; an iface no
 * endpoint uses is progressed only when it is readable), and the progress
 * enforces their deadline (uct_crypt_wire_timers). Without it, a process
 * that had no endpoint yet held a stranger's silent connections for ever. */
static void uct_crypt_wire_timer_arm(uct_crypt_wire_iface_t *iface, int on)
{
    struct itimerspec its;

    if (on == iface->timer_armed) {
        return;
    }
    memset(&its, 0, sizeof(its));
    if (on) {
        its.it_value.tv_sec    = 1;
        its.it_interval.tv_sec = 1;
    }
    if (timerfd_settime(iface->timer_fd, 0, &its, NULL) == 0) {
        iface->timer_armed = on;
    }
}

static void uct_crypt_wire_accept(uct_crypt_wire_iface_t *iface)
{
    struct sockaddr_storage peer;
    uct_crypt_wire_conn_t *conn;
    socklen_t len;
    int fd;

    /* Strangers can fill the listen backlog: take at most a second set of
     * half-open slots per call (the oldest are reclaimed after it), so
     * that neither memory nor descriptors follow a flood; what is left
     * waits in the kernel for the next call */
    while (iface->half_open < 2 * UCT_CRYPT_WIRE_HALF_OPEN_MAX) {
        len = sizeof(peer);
        fd  = accept4(iface->listen_fd, (struct sockaddr*)&peer, &len,
                      SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if ((errno != EAGAIN) && (errno != EWOULDBLOCK) && (errno != EINTR)) {
                ucs_debug("crypt: accept on the wire failed: %m");
            }
            return;
        }
        uct_crypt_wire_iface_set_options(iface, fd);
        conn = uct_crypt_wire_conn_new(iface, fd, NULL, (struct sockaddr*)&peer);
        if (conn == NULL) {
            close(fd);
            continue;
        }
        ++iface->half_open;
        uct_crypt_wire_timer_arm(iface, 1);
    }
}

/* The oldest of the source address that holds the most among the oldest
 * silent (`cookied` 0) or cookied connections waiting for an initiation */
static uct_crypt_wire_conn_t *
uct_crypt_wire_reclaim_victim(uct_crypt_wire_iface_t *iface, int cookied)
{
    const struct sockaddr_storage *sources[2 * UCT_CRYPT_WIRE_HALF_OPEN_MAX];
    uct_crypt_wire_conn_t *members[2 * UCT_CRYPT_WIRE_HALF_OPEN_MAX];
    uct_crypt_wire_conn_t *conn;
    size_t count = 0;

    ucs_list_for_each(conn, &iface->conns, list) { /* oldest first */
        if ((conn->state == UCT_CRYPT_WIRE_WAIT_INIT) &&
            ((conn->cookie_rounds > 0) == cookied) &&
            (count < ucs_static_array_size(members))) {
            members[count]   = conn;
            sources[count++] = &conn->peer_addr;
        }
    }
    return (count > 0) ? members[uct_crypt_admit_victim(sources, count)] : NULL;
}

/* Half-open slots over the limit. What the peers already sent is read
 * first: an honest initiator sends its initiation with its first segment,
 * so reading it takes its connection out of the half-open set, and no
 * honest connection is closed while its initiation waits unread (one
 * progress call handles 16 events, one accept call takes up to 128
 * connections: many endpoints opened at once to one process, UCX's gtest
 * test_uct_pending and multi_ep_2sided, had theirs closed). Then silent
 * ones go (uct_crypt_admit_victim): a stranger's flood from one host costs
 * its own connections, not an honest peer's. */
static void uct_crypt_wire_reclaim_half_open(uct_crypt_wire_iface_t *iface)
{
    unsigned round = ++iface->reclaim_round;
    uct_crypt_wire_conn_t *conn;

restart:
    ucs_list_for_each(conn, &iface->conns, list) {
        if ((conn->state == UCT_CRYPT_WIRE_WAIT_INIT) &&
            (conn->reclaim_round != round)) {
            conn->reclaim_round = round;
            /* (nothing there: EAGAIN, the connection stays as it is; the
             * read may close this connection or move another's records, so
             * the walk starts over, each connection read once) */
            uct_crypt_wire_conn_handle(conn, EPOLLIN);
            goto restart;
        }
    }
    /* (an honest initiator whose initiation had not come yet opens
     * another connection: only a debug line) */
    while ((iface->half_open > UCT_CRYPT_WIRE_HALF_OPEN_MAX) &&
           ((conn = uct_crypt_wire_reclaim_victim(iface, 0)) != NULL)) {
        uct_crypt_wire_conn_refuse(conn, "half-open slots full, reclaimed from "
                                   "the address that held the most",
                                   UCS_LOG_LEVEL_DEBUG);
    }
    /* those that passed mac1 and wait for the answer to a cookie reply (or
     * for their host's turn at a DH) go only for one another, by the same
     * rule among the oldest: a job-secret holder's flood costs its own */
    while ((iface->cookied > UCT_CRYPT_WIRE_COOKIED_MAX) &&
           ((conn = uct_crypt_wire_reclaim_victim(iface, 1)) != NULL)) {
        uct_crypt_wire_conn_refuse(conn, "connections waiting for their "
                                   "cookie's answer all taken; one of the "
                                   "address that held the most was closed",
                                   UCS_LOG_LEVEL_DEBUG);
    }
}

/* Has the peer's host stopped answering while our data waits for its
 * acknowledgement? Keepalive covers idle connections only; on a busy one
 * the kernel retransmits for many minutes (tcp_retries2). A peer process
 * that is only busy still has its kernel acknowledge, window probes
 * included (last_ack_recv stays fresh), and is never failed here: what
 * TCP_USER_TIMEOUT does not tell apart (uct_crypt_wire_set_options). */
static int uct_crypt_wire_unanswered(const uct_crypt_wire_conn_t *conn,
                                     double keepalive)
{
    struct tcp_info info;
    socklen_t len = sizeof(info);

    memset(&info, 0, sizeof(info));
    return (getsockopt(conn->fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) &&
           (info.tcpi_unacked > 0) &&
           (info.tcpi_last_ack_recv > (uint32_t)(keepalive * 1000));
}

static void uct_crypt_wire_timers(uct_crypt_wire_iface_t *iface, ucs_time_t now)
{
    uct_crypt_wire_conn_t *conn, *tmp;
    int liveness = 0;

    if ((iface->keepalive_s > 0) && (now > iface->next_liveness)) {
        /* (a getsockopt per connection: twice a keepalive period) */
        iface->next_liveness = now + ucs_time_from_sec(iface->keepalive_s / 2);
        liveness             = 1;
    }

    ucs_list_for_each_safe(conn, tmp, &iface->conns, list) {
        /* A stranger's silence has a deadline. Our own initiations have
         * none: the peer answers from its progress, and a peer busy
         * computing answers late, as over UCX's tcp, whose connection
         * waits for its peer's answer as long as the kernel keeps it (a
         * dead host: keepalive and the check below). */
        if ((conn->state == UCT_CRYPT_WIRE_WAIT_INIT) && (now > conn->deadline)) {
            uct_crypt_wire_conn_fail(conn, "handshake timed out");
        } else if (conn->closing && (now > conn->deadline)) {
            /* our half is done; the peer neither read the rest nor closed
             * its own in time */
            uct_crypt_wire_conn_close(conn);
        } else if (conn->redirect_wait && (now > conn->deadline)) {
            uct_crypt_wire_conn_redirect_expired(conn);
        } else if (liveness && ((conn->state == UCT_CRYPT_WIRE_ESTABLISHED) ||
                                (conn->state == UCT_CRYPT_WIRE_INIT_SENT)) &&
                   uct_crypt_wire_unanswered(conn, iface->keepalive_s)) {
            uct_crypt_wire_conn_fail(conn, "the peer's host stopped answering "
                                           "(no acknowledgement within "
                                           "KEEPIDLE + KEEPCNT * KEEPINTVL with "
                                           "data in flight: a cut link or a "
                                           "dead host)");
        } else {
            uct_crypt_wire_conn_heartbeat(conn);
        }
    }
    uct_crypt_wire_conn_retry_deferred(iface);
    if ((iface->half_open == 0) && (iface->cookied == 0)) {
        uct_crypt_wire_timer_arm(iface, 0);
    }
}

static unsigned uct_crypt_wire_iface_progress(uct_iface_h tl_iface)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    struct epoll_event events[16];
    uct_crypt_wire_ep_t *ep, *tmp;
    uint64_t expirations;
    unsigned count = 0;
    ucs_time_t now;
    int i, n;

    n = epoll_wait(iface->epfd, events, ucs_static_array_size(events), 0);
    for (i = 0; i < n; ++i) {
        if (events[i].data.ptr == &uct_crypt_wire_listen_marker) {
            uct_crypt_wire_accept(iface);
        } else if (events[i].data.ptr == &uct_crypt_wire_timer_marker) {
            /* (its count of expirations, read so that it stops firing; the
             * deadlines are checked below) */
            if (read(iface->timer_fd, &expirations, sizeof(expirations)) < 0) {
                expirations = 0;
            }
            iface->next_timer = 0;
        } else {
            uct_crypt_wire_conn_handle(events[i].data.ptr, events[i].events);
        }
        ++count;
    }
    if ((iface->half_open > UCT_CRYPT_WIRE_HALF_OPEN_MAX) ||
        (iface->cookied > UCT_CRYPT_WIRE_COOKIED_MAX)) {
        uct_crypt_wire_reclaim_half_open(iface);
    }

    /* pending sends and flushes, where the tx buffers have room again */
    ucs_list_for_each_safe(ep, tmp, &iface->busy_eps, busy) {
        count += uct_crypt_wire_ep_progress_tx(ep);
    }

    now = ucs_get_time();
    if (now > iface->next_timer) {
        iface->next_timer = now + ucs_time_from_msec(250);
        uct_crypt_wire_timers(iface, now);
        /* keys idle for the replay window keep their floor alone */
        uct_crypt_replay_expire(&iface->replay, ucs_time_to_sec(now));
        uct_crypt_wire_give_heap_back(iface);
    }
    if (iface->redirect_pending) {
        uct_crypt_wire_conn_redirects(iface);
    }
    while (iface->reject_pending) {
        uct_crypt_wire_iface_rejects(iface);
    }
    if (iface->ep_fail_pending) {
        uct_crypt_wire_iface_report_failures(iface);
    }
    for (i = 0; i < (int)iface->ended_count; ++i) {
        iface->conn_ended(iface->conn_ended_arg, iface->ended[i]);
    }
    iface->ended_count = 0;
    return count;
}

static ucs_status_t uct_crypt_wire_iface_event_fd_get(uct_iface_h tl_iface,
                                                      int *fd_p)
{
    *fd_p = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t)->epfd;
    return UCS_OK;
}

static ucs_status_t uct_crypt_wire_iface_event_arm(uct_iface_h tl_iface,
                                                   unsigned events)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    /* level-triggered epoll: anything unread keeps the fd readable; only
     * failures not yet reported need a progress call first */
    return (iface->ep_fail_pending || iface->reject_pending) ? UCS_ERR_BUSY :
                                                                UCS_OK;
}

static ucs_status_t uct_crypt_wire_iface_flush(uct_iface_h tl_iface,
                                               unsigned flags,
                                               uct_completion_t *comp)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    uct_crypt_wire_ep_t *ep;

    /* an ep's connection still being set up counts, as tcp's CONNECTING
     * and WAITING_ACK eps count in its iface's outstanding: after an iface
     * flush an ep takes a send (UCX's test_uct_event and test_uct_pending
     * connect, flush, then send). Strangers' half-open connections have no
     * ep and do not count. */
    ucs_list_for_each(ep, &iface->eps, list) {
        if (((ep->conn != NULL) && !uct_crypt_wire_conn_flushed(ep->conn)) ||
            !ucs_queue_is_empty(&ep->pending)) {
            /* as tcp: no completion for an iface flush, poll instead */
            return (comp == NULL) ? UCS_INPROGRESS : UCS_ERR_UNSUPPORTED;
        }
    }
    return UCS_OK;
}

static ucs_status_t uct_crypt_wire_iface_fence(uct_iface_h tl_iface,
                                               unsigned flags)
{
    return UCS_OK; /* one ordered stream per ep */
}

/* ---- open / close ----------------------------------------------------------- */

static UCS_CLASS_INIT_FUNC(uct_crypt_wire_iface_t, uct_md_h md,
                           uct_worker_h worker, const uct_iface_params_t *params,
                           const uct_iface_config_t *config,
                           const uct_crypt_wire_params_t *sock_params)
{
    struct epoll_event ev;
    socklen_t len;
    ucs_status_t status;
    int one = 1;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_crypt_wire_iface_ops,
                              uct_crypt_internal_ops(1), md, worker, params,
                              config UCS_STATS_ARG(params->stats_root)
                              UCS_STATS_ARG("crypt_wire"));

    self->listen_fd       = -1;
    self->epfd            = -1;
    self->timer_fd        = -1;
    self->timer_armed     = 0;
    self->keypair         = sock_params->keypair;
    self->job_secret      = sock_params->job_secret;
    self->context         = sock_params->context;
    self->mac1_key        = NULL;
    self->cookie_key      = NULL;
    memset(&self->cookies, 0, sizeof(self->cookies));
    self->keepalive       = sock_params->keepalive;
    self->keepalive_s     = uct_crypt_keepalive_seconds(&sock_params->keepalive);
    self->sndbuf          = sock_params->sndbuf;
    self->rcvbuf          = sock_params->rcvbuf;
    self->peer_failed     = sock_params->peer_failed;
    self->peer_failed_arg = sock_params->peer_failed_arg;
    self->conn_ended      = sock_params->conn_ended;
    self->conn_ended_arg  = sock_params->conn_ended_arg;
    self->next_conn_id    = 0;
    self->ended           = NULL;
    self->ended_count     = 0;
    self->ended_max       = 0;
    self->half_open       = 0;
    self->cookied         = 0;
    self->closed_since_trim = 0;
    self->reclaim_round   = 0;
    self->rx_conn         = NULL;
    memset(&self->replay, 0, sizeof(self->replay));
    memset(&self->seen, 0, sizeof(self->seen));
    /* this machine and network namespace, as a loopback device address
     * says (fixed for the iface's life: computed once) */
    self->dev_local.system_id = htole64(ucs_get_system_id());
    self->dev_local.net_ns    = htole32((uint32_t)ucs_sys_get_ns(UCS_SYS_NS_TYPE_NET));
    self->next_timer      = 0;
    self->next_liveness   = 0;
    self->ep_fail_pending = 0;
    self->reject_pending  = 0;
    self->redirect_pending = 0;
    self->advertise_port  = sock_params->advertise_port;
    self->rx_cache.count  = 0;
    self->tx_cache.count  = 0;
    ucs_list_head_init(&self->conns);
    ucs_list_head_init(&self->eps);
    ucs_list_head_init(&self->busy_eps);
    ucs_strncpy_zero(self->dev_name, sock_params->dev_name,
                     sizeof(self->dev_name));

    /* every initiation to us carries mac1 under the same key: derived once */
    self->mac1_key = keyex_secure_alloc(KEYEX_SECRET_LEN);
    if ((self->mac1_key == NULL) ||
        (keyex_noise_mac1_key(self->job_secret, self->keypair->public_key,
                              self->mac1_key) != KEYEX_OK)) {
        ucs_error("crypt: cannot make the wire's mac1 key on %s%s",
                  sock_params->dev_name, crypt_local_failure_take());
        status = UCS_ERR_NO_RESOURCE;
        goto err;
    }
    self->cookie_key = keyex_secure_alloc(KEYEX_SECRET_LEN);
    if ((self->cookie_key == NULL) ||
        (keyex_noise_cookie_key(self->job_secret, self->keypair->public_key,
                                self->cookie_key) != KEYEX_OK)) {
        ucs_error("crypt: cannot make the wire's cookie key on %s%s",
                  sock_params->dev_name, crypt_local_failure_take());
        status = UCS_ERR_NO_RESOURCE;
        goto err;
    }
    uct_crypt_cookies_init(&self->cookies, sock_params->handshake_rate,
                           ucs_time_to_sec(ucs_get_time()));

    status = uct_crypt_wire_dev_sockaddr(sock_params->dev_name, &self->addr);
    if (status != UCS_OK) {
        ucs_error("crypt: network device %s has no IP address for the wire",
                  sock_params->dev_name);
        goto err;
    }

    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    self->listen_fd = socket(self->addr.ss_family,
                             SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if ((self->epfd < 0) || (self->listen_fd < 0)) {
        status = UCS_ERR_IO_ERROR;
        goto err;
    }
    (void)setsockopt(self->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (self->addr.ss_family == AF_INET6) {
        ((struct sockaddr_in6*)&self->addr)->sin6_port = htons(sock_params->listen_port);
    } else {
        ((struct sockaddr_in*)&self->addr)->sin_port = htons(sock_params->listen_port);
    }
    len = uct_crypt_wire_addr_len(&self->addr);
    /* the backlog UCX's tcp asks (tcp_iface.c: ucs_socket_max_conn, the
     * system's somaxconn): at 1024 a job's wireup to one rank overflowed
     * it, and the SYNs the kernel dropped came again a second later */
    if ((bind(self->listen_fd, (struct sockaddr*)&self->addr, len) < 0) ||
        (listen(self->listen_fd, ucs_socket_max_conn()) < 0) ||
        (getsockname(self->listen_fd, (struct sockaddr*)&self->addr, &len) < 0)) {
        ucs_error("crypt: cannot listen on %s: %m", sock_params->dev_name);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }
    ev.events   = EPOLLIN;
    ev.data.ptr = &uct_crypt_wire_listen_marker;
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->listen_fd, &ev) < 0) {
        status = UCS_ERR_IO_ERROR;
        goto err;
    }
    self->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ev.events      = EPOLLIN;
    ev.data.ptr    = &uct_crypt_wire_timer_marker;
    if ((self->timer_fd < 0) ||
        (epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->timer_fd, &ev) < 0)) {
        ucs_error("crypt: cannot make the wire's deadline timer: %m");
        status = UCS_ERR_IO_ERROR;
        goto err;
    }
    ucs_debug("crypt: wire on %s listening at port %u", sock_params->dev_name,
              uct_crypt_wire_port(&self->addr));
    return UCS_OK;

err:
    if (self->timer_fd >= 0) {
        close(self->timer_fd);
    }
    if (self->listen_fd >= 0) {
        close(self->listen_fd);
    }
    if (self->epfd >= 0) {
        close(self->epfd);
    }
    keyex_secure_free(self->mac1_key, KEYEX_SECRET_LEN);
    keyex_secure_free(self->cookie_key, KEYEX_SECRET_LEN);
    uct_crypt_cookies_cleanup(&self->cookies);
    return status;
}

/* At the end: what the kernel did not take yet (the CLOSE of each half our
 * eps released, most often) gets a short grace to leave before the sockets
 * close; a peer that sees our half end without its CLOSE counts the
 * connection as lost. Bounded: a peer that does not read is not waited for. */
static void uct_crypt_wire_iface_drain(uct_crypt_wire_iface_t *iface)
{
    ucs_time_t deadline = ucs_get_time() + ucs_time_from_msec(200);
    uct_crypt_wire_conn_t *conn, *tmp;
    struct pollfd pfd;
    int left;

    ucs_list_for_each_safe(conn, tmp, &iface->conns, list) {
        while ((conn->tx_len > 0) && uct_crypt_wire_conn_final(conn) &&
               (uct_crypt_wire_conn_flush(conn) == 0)) {
            left = (int)ucs_time_to_msec(deadline - ucs_min(deadline,
                                                            ucs_get_time()));
            pfd.fd     = conn->fd;
            pfd.events = POLLOUT;
            if ((left <= 0) || (poll(&pfd, 1, left) <= 0)) {
                return;
            }
        }
    }
}

/* A socket closed with bytes it never read ends with a reset, and the
 * kernel then drops what it had not transmitted yet (our CLOSE, at the end
 * of a job, while the peer still writes to us): the peer would report a
 * lost connection. Our FIN goes behind what we sent; what came in unread
 * is discarded (nobody is left to read it) before the close. */
static void uct_crypt_wire_iface_quiet_close(uct_crypt_wire_conn_t *conn)
{
    uint8_t discard[4096];
    int reads = 256; /* bounded: a peer that keeps writing is not waited for */

    if (conn->fd >= 0) {
        (void)shutdown(conn->fd, SHUT_WR);
        while ((reads-- > 0) &&
               (recv(conn->fd, discard, sizeof(discard), MSG_DONTWAIT) > 0)) {
        }
    }
    uct_crypt_wire_conn_close(conn);
}

static UCS_CLASS_CLEANUP_FUNC(uct_crypt_wire_iface_t)
{
    uct_crypt_wire_conn_t *conn, *tmp;

    /* off the worker's progress before anything here goes */
    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ucs_assert(ucs_list_is_empty(&self->eps));
    uct_crypt_wire_iface_drain(self);
    ucs_list_for_each_safe(conn, tmp, &self->conns, list) {
        uct_crypt_wire_iface_quiet_close(conn);
    }
    close(self->listen_fd);
    close(self->timer_fd);
    close(self->epfd);
    keyex_secure_free(self->mac1_key, KEYEX_SECRET_LEN);
    keyex_secure_free(self->cookie_key, KEYEX_SECRET_LEN);
    uct_crypt_cookies_cleanup(&self->cookies);
    uct_crypt_replay_cleanup(&self->replay);
    uct_crypt_seen_cleanup(&self->seen);
    ucs_free(self->ended); /* (the layer above frees the rest at its close) */
    while (self->rx_cache.count > 0) {
        ucs_free(self->rx_cache.bufs[--self->rx_cache.count]);
    }
    while (self->tx_cache.count > 0) {
        ucs_free(self->tx_cache.bufs[--self->tx_cache.count]);
    }
}

UCS_CLASS_DEFINE(uct_crypt_wire_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_crypt_wire_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*,
                                 const uct_crypt_wire_params_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_crypt_wire_iface_t, uct_iface_t);

static uct_iface_ops_t uct_crypt_wire_iface_ops = {
    .ep_am_short              = uct_crypt_wire_ep_am_short,
    .ep_am_short_iov          = uct_base_ep_am_short_iov,
    .ep_am_bcopy              = uct_crypt_wire_ep_am_bcopy,
    .ep_pending_add           = uct_crypt_wire_ep_pending_add,
    .ep_pending_purge         = uct_crypt_wire_ep_pending_purge,
    .ep_flush                 = uct_crypt_wire_ep_flush,
    .ep_fence                 = uct_crypt_wire_ep_fence,
    .ep_check                 = uct_crypt_wire_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_crypt_wire_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_wire_ep_t),
    .ep_get_address           = uct_crypt_wire_ep_get_address,
    .ep_connect_to_ep         = uct_crypt_wire_ep_connect_to_ep,
    .iface_flush              = uct_crypt_wire_iface_flush,
    .iface_fence              = uct_crypt_wire_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_crypt_wire_iface_progress,
    .iface_event_fd_get       = uct_crypt_wire_iface_event_fd_get,
    .iface_event_arm          = uct_crypt_wire_iface_event_arm,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(uct_crypt_wire_iface_t),
    .iface_query              = uct_crypt_wire_iface_query,
    .iface_get_device_address = uct_crypt_wire_iface_get_device_address,
    .iface_get_address        = uct_crypt_wire_iface_get_address,
    .iface_is_reachable       = uct_crypt_wire_iface_is_reachable
};

ucs_status_t uct_crypt_wire_iface_open(uct_md_h md, uct_worker_h worker,
                                       const uct_iface_params_t *params,
                                       const uct_iface_config_t *config,
                                       const uct_crypt_wire_params_t *sock_params,
                                       uct_iface_h *iface_p)
{
    return UCS_CLASS_NEW_FUNC_NAME(uct_crypt_wire_iface_t)(md, worker, params,
                                                           config, sock_params,
                                                           iface_p);
}

const uint8_t *uct_crypt_wire_rx_peer(uct_iface_h tl_iface)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    return (iface->rx_conn != NULL) ? iface->rx_conn->peer_static : NULL;
}

const uint8_t *uct_crypt_wire_rx_secret(uct_iface_h tl_iface)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    return (iface->rx_conn != NULL) ? iface->rx_conn->secret : NULL;
}

uint64_t uct_crypt_wire_rx_conn(uct_iface_h tl_iface)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    return (iface->rx_conn != NULL) ? iface->rx_conn->id : 0;
}

const char *uct_crypt_wire_rx_peer_name(uct_iface_h tl_iface)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    return (iface->rx_conn != NULL) ? iface->rx_conn->peer_name : "";
}

void uct_crypt_wire_rx_reject(uct_iface_h tl_iface, const char *reason)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);

    if (iface->rx_conn != NULL) {
        iface->rx_conn->reject = reason; /* (a static name) */
    }
}

void uct_crypt_wire_rx_reject_conn(uct_iface_h tl_iface, uint64_t conn_id,
                                   const char *reason)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    uct_crypt_wire_conn_t *conn;

    ucs_list_for_each(conn, &iface->conns, list) {
        if (conn->id == conn_id) {
            conn->reject_later    = reason; /* (a static name) */
            iface->reject_pending = 1;
            return;
        }
    }
}

/* From progress, outside any delivery: connections whose records the
 * record layer refused after it had them */
void uct_crypt_wire_iface_rejects(uct_crypt_wire_iface_t *iface)
{
    uct_crypt_wire_conn_t *conn, *tmp;
    char why[96];

    iface->reject_pending = 0;
    ucs_list_for_each_safe(conn, tmp, &iface->conns, list) {
        if (conn->reject_later != NULL) {
            ucs_snprintf_zero(why, sizeof(why), "the record layer refused a "
                              "bulk segment: %s", conn->reject_later);
            conn->reject_later = NULL;
            uct_crypt_wire_conn_fail(conn, why);
            /* (failing one may close others: from the top) */
            iface->reject_pending = 1;
            return;
        }
    }
}

void uct_crypt_wire_rx_expect_segment(uct_iface_h tl_iface, void *dest,
                                      size_t length,
                                      uct_crypt_wire_segment_cb_t cb, void *arg)
{
    uct_crypt_wire_iface_t *iface = ucs_derived_of(tl_iface, uct_crypt_wire_iface_t);
    uct_crypt_wire_conn_t *conn   = iface->rx_conn;

    ucs_assert(conn != NULL);
    /* segment_len != 0 is what lets the frame reader take a SEGMENT frame
     * (uct_crypt_frame_segment_header); it clears it as it does, and the
     * connection clears segment_cb as it hands the tag on */
    ucs_assert(length + CRYPT_AEAD_TAG_LEN <= UCT_CRYPT_WIRE_MAX_BCOPY);
    conn->segment_cb         = cb;
    conn->segment_arg        = arg;
    conn->seg_dest           = dest;
    conn->seg_len            = length;
    conn->seg_got            = 0;
    conn->seg_body           = 0;
    conn->frames.segment_len = length + CRYPT_AEAD_TAG_LEN;
}
