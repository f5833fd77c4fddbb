/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cs_check: a UCP client/server echo over UCP's sockaddr API
 * (ucp_listener_create, ucp_ep_create by socket address), as Python,
 * storage and RPC stacks on UCX use it, for the connection manager's
 * integration tests. Every byte that comes back is checked; the payload
 * is the marker the wire tests look for in captures.
 *
 *   cs_check -l PORT [-k CLIENTS]                server: serve CLIENTS
 *                                               (0: until killed), exit 0
 *   cs_check -c HOST -p PORT [-s SIZES] [-n N]  client: SIZES comma
 *                                               separated, N round trips each
 *   -u PATH            client: go through SIZES again until PATH exists
 *                      (a test keeps the connection busy while it acts)
 *   -m tag|stream|am   the API (both sides; default tag)
 *   -e none|peer       UCP's error handling mode (default peer)
 *   -6                 server: listen on IPv6 (::)
 *
 * Tag mode serves clients at once (the server names each client with a
 * WELCOME message and the client tags its messages with that name); AM
 * mode too (replies go to the sender's reply ep); stream mode one client
 * after the other. An endpoint error prints "ENDPOINT ERROR: <status>
 * after <s> s" and the process exits 3; a mismatch exits 1.
 */
#include <ucp/api/ucp.h>
#include "ucp_test_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_CLIENTS 1024 /* server_memory.sh serves 151 in sequence */
#define TAG_WELCOME 0xffffffff00000000ull
#define TAG_BYE     (1ull << 32)
#define AM_DATA     1
#define AM_ECHO     2
#define AM_BYE      3
#define STREAM_BYE  UINT64_MAX

enum { MODE_TAG, MODE_STREAM, MODE_AM };

static ucp_context_h context;
static ucp_worker_h worker;
static int mode = MODE_TAG;
static ucp_err_handling_mode_t err_mode = UCP_ERR_HANDLING_MODE_PEER;
static double t_start;

static double now(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "cs_check: %s: %s\n", what, ucs_status_string(status));
    exit(2);
}

static ucp_ep_h closing_ep; /* its end is ours: an error there is expected */
static int peer_closed;     /* ... and came: what we wait for is not coming */

/* the server's endpoints, one per client, and which of them ended (BYE,
 * or an error: UCP reports a client's close or death as one) */
static ucp_ep_h server_eps[MAX_CLIENTS];
static int server_ep_ended[MAX_CLIENTS];
static int num_server_eps, served, target_clients;

static void client_ended(int idx)
{
    if (!server_ep_ended[idx]) {
        server_ep_ended[idx] = 1;
        ++served;
    }
}

/* arg: the server's index of the client + 1; NULL on the client */
static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    if (ep == closing_ep) {
        peer_closed = 1;
        return;
    }
    printf("ENDPOINT ERROR: %s after %.1f s\n", ucs_status_string(status),
           now() - t_start);
    fflush(stdout);
    if (arg == NULL) {
        exit(3);
    }
    client_ended((int)(intptr_t)arg - 1); /* the server goes on */
}



static ucp_ep_params_t ep_params(void *arg)
{
    ucp_ep_params_t params;

    memset(&params, 0, sizeof(params));
    params.field_mask      = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                             UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode        = err_mode;
    params.err_handler.cb  = ep_error;
    params.err_handler.arg = arg;
    return params;
}

static void close_ep(ucp_ep_h ep)
{
    ucp_request_param_t param = {0};

    closing_ep = ep;
    (void)wait_req(ucp_ep_close_nbx(ep, &param));
    closing_ep = NULL;
}

/* ---- AM: what arrived, taken from the callback to the main loop ---------- */

typedef struct {
    int       pending, bye, rndv;
    ucp_ep_h  reply_ep;
    void      *data_desc;
    size_t    length;
    uint8_t   *buf;
} am_msg_t;

static am_msg_t am_in;

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length,
                          void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    am_in.pending  = 1;
    am_in.bye      = (arg != NULL);
    am_in.reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ?
                     param->reply_ep : NULL;
    am_in.length   = length;
    am_in.rndv     = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    if (am_in.rndv) {
        am_in.data_desc = data;
        return UCS_INPROGRESS;
    }
    am_in.buf = malloc(length ? length : 1);
    memcpy(am_in.buf, data, length);
    return UCS_OK;
}

static void am_set_handler(unsigned id, void *arg)
{
    ucp_am_handler_param_t param;

    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id         = id;
    param.cb         = am_cb;
    param.arg        = arg;
    if (ucp_worker_set_am_recv_handler(worker, &param) != UCS_OK) {
        die("ucp_worker_set_am_recv_handler", UCS_ERR_IO_ERROR);
    }
}

/* the payload of the AM that arrived, in am_in.buf */
static void am_take(void)
{
    ucp_request_param_t param = {0};

    while (!am_in.pending && !peer_closed) {
        ucp_worker_progress(worker);
    }
    if (!am_in.pending) {
        return; /* the peer closed first (after our BYE) */
    }
    if (am_in.rndv) {
        am_in.buf = malloc(am_in.length ? am_in.length : 1);
        if (wait_req(ucp_am_recv_data_nbx(worker, am_in.data_desc, am_in.buf,
                                          am_in.length, &param)) != UCS_OK) {
            die("ucp_am_recv_data_nbx", UCS_ERR_IO_ERROR);
        }
    }
}

static void am_release(void)
{
    free(am_in.buf);
    memset(&am_in, 0, sizeof(am_in));
}

/* ---- server ------------------------------------------------------------------ */

static ucp_conn_request_h requests[MAX_CLIENTS];
static int num_requests;
static ucp_listener_h listener;

static void conn_cb(ucp_conn_request_h request, void *arg)
{
    if (num_requests < MAX_CLIENTS) {
        requests[num_requests++] = request;
    } else {
        ucp_listener_reject(listener, request);
    }
}

static ucp_ep_h accept_one(void)
{
    ucp_ep_params_t params = ep_params((void*)(intptr_t)(num_server_eps + 1));
    ucp_ep_h ep;
    ucs_status_t status;

    if (num_server_eps == MAX_CLIENTS) {
        die("server: too many clients", UCS_ERR_EXCEEDS_LIMIT);
    }

    params.field_mask  |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = requests[0];
    memmove(requests, requests + 1, --num_requests * sizeof(requests[0]));
    status = ucp_ep_create(worker, &params, &ep);
    if (status != UCS_OK) {
        die("server ucp_ep_create", status);
    }
    server_eps[num_server_eps++] = ep;
    return ep;
}

static void send_tag(ucp_ep_h ep, const void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t param = {0};

    if (wait_req(ucp_tag_send_nbx(ep, buf, len, tag, &param)) != UCS_OK) {
        die("ucp_tag_send_nbx", UCS_ERR_IO_ERROR);
    }
}

/* to client `name`: a send that fails because that client ended meanwhile
 * (its error callback ran) ends only that client, as a server of many
 * clients must; any other failure is the server's */
static void send_to_client(uint64_t name, const void *buf, size_t len,
                           ucp_tag_t tag)
{
    ucp_request_param_t param = {0};

    if ((wait_req(ucp_tag_send_nbx(server_eps[name], buf, len, tag, &param)) !=
         UCS_OK) && !server_ep_ended[name]) {
        die("ucp_tag_send_nbx", UCS_ERR_IO_ERROR);
    }
}

/* tag: any client's message, tagged with its name (its index); echoed
 * with the same */
static void serve_tag(size_t max)
{
    ucp_request_param_t param = {0};
    ucp_tag_recv_info_t info;
    uint8_t *buf = malloc(max);
    uint64_t name;
    void *req;
    ucs_status_t status = UCS_OK;

    /* always a request, so that ucp_tag_recv_request_test says from whom
     * (UCP 1.13 fills no recv_info on an immediate completion) */
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    req = ucp_tag_recv_nbx(worker, buf, max, 0, 0, &param);
    if (UCS_PTR_IS_ERR(req)) {
        die("server ucp_tag_recv_nbx", UCS_PTR_STATUS(req));
    }
    for (;;) {
        while (num_requests > 0) {
            name = num_server_eps;
            (void)accept_one();
            send_to_client(name, &name, sizeof(name), TAG_WELCOME);
        }
        ucp_worker_progress(worker);
        status = ucp_tag_recv_request_test(req, &info);
        if ((status != UCS_INPROGRESS) ||
            ((served >= target_clients) && (target_clients > 0))) {
            break;
        }
    }
    if (status == UCS_INPROGRESS) {
        ucp_request_cancel(worker, req);
        (void)wait_req(req);
        free(buf);
        return; /* every client ended */
    }
    ucp_request_free(req);
    if (status != UCS_OK) {
        /* a message whose client ended while it came (UCP cancels the
         * receive with the sender's ep): its error callback ends that
         * client, the server goes on with the others */
        printf("a receive ended: %s\n", ucs_status_string(status));
        fflush(stdout);
        free(buf);
        return;
    }
    name = info.sender_tag & 0xffffffffull;
    if (name >= (uint64_t)num_server_eps) {
        die("server: message from a client never welcomed", UCS_ERR_INVALID_PARAM);
    }
    if (info.sender_tag & TAG_BYE) {
        /* the client closes once we answered: nothing of it is in flight */
        send_to_client(name, NULL, 0, info.sender_tag);
        client_ended((int)name);
        close_ep(server_eps[name]);
    } else if (!server_ep_ended[name]) {
        send_to_client(name, buf, info.length, info.sender_tag);
    }
    free(buf);
}

static int server_ep_index(ucp_ep_h ep)
{
    int i;

    for (i = 0; i < num_server_eps; ++i) {
        if (server_eps[i] == ep) {
            return i;
        }
    }
    return -1;
}

static void serve_am(void)
{
    ucp_request_param_t param = {0};
    am_msg_t msg;
    int idx;

    while (num_requests > 0) {
        (void)accept_one(); /* replies go to the sender's reply ep */
    }
    if (!am_in.pending) {
        ucp_worker_progress(worker);
        return;
    }
    am_take();
    /* the slot is free again before we progress: the client's next
     * message may arrive while our answer is in flight */
    msg = am_in;
    memset(&am_in, 0, sizeof(am_in));
    idx = server_ep_index(msg.reply_ep);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_REPLY;
    if (msg.bye) {
        if ((msg.reply_ep != NULL) &&
            (wait_req(ucp_am_send_nbx(msg.reply_ep, AM_BYE, NULL, 0, NULL, 0,
                                      &param)) != UCS_OK)) {
            die("server: AM bye answer", UCS_ERR_IO_ERROR);
        }
        if (idx >= 0) {
            client_ended(idx);
        } else {
            ++served;
        }
    } else if (wait_req(ucp_am_send_nbx(msg.reply_ep, AM_ECHO, NULL, 0, msg.buf,
                                       msg.length, &param)) != UCS_OK) {
        die("server ucp_am_send_nbx", UCS_ERR_IO_ERROR);
    }
    free(msg.buf);
}

static void stream_recv_all(ucp_ep_h ep, void *buf, size_t len)
{
    ucp_request_param_t param = {0};
    size_t got;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_STREAM_RECV_FLAG_WAITALL;
    if ((len > 0) &&
        (wait_req(ucp_stream_recv_nbx(ep, buf, len, &got, &param)) != UCS_OK)) {
        die("ucp_stream_recv_nbx", UCS_ERR_IO_ERROR);
    }
}

static void stream_send(ucp_ep_h ep, const void *buf, size_t len)
{
    ucp_request_param_t param = {0};

    if ((len > 0) &&
        (wait_req(ucp_stream_send_nbx(ep, buf, len, &param)) != UCS_OK)) {
        die("ucp_stream_send_nbx", UCS_ERR_IO_ERROR);
    }
}

/* stream: one client, to its BYE */
static void serve_stream(size_t max)
{
    uint8_t *buf = malloc(max);
    uint64_t len;
    ucp_ep_h ep;

    while (num_requests == 0) {
        ucp_worker_progress(worker);
    }
    ep = accept_one();
    for (;;) {
        stream_recv_all(ep, &len, sizeof(len));
        if (len == STREAM_BYE) {
            stream_send(ep, &len, sizeof(len));
            client_ended(num_server_eps - 1);
            break;
        }
        if (len > max) {
            die("server: stream message too long", UCS_ERR_INVALID_PARAM);
        }
        stream_recv_all(ep, buf, len);
        stream_send(ep, &len, sizeof(len));
        stream_send(ep, buf, len);
    }
    close_ep(ep);
    free(buf);
}

static int run_server(int port, int clients, int ipv6)
{
    ucp_listener_params_t params;
    struct sockaddr_storage addr;
    struct sockaddr_in *in = (struct sockaddr_in*)&addr;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6*)&addr;
    size_t max = 64ull << 20;
    ucs_status_t status;

    memset(&addr, 0, sizeof(addr));
    if (ipv6) {
        in6->sin6_family = AF_INET6;
        in6->sin6_addr   = in6addr_any;
        in6->sin6_port   = htons(port);
    } else {
        in->sin_family      = AF_INET;
        in->sin_addr.s_addr = INADDR_ANY;
        in->sin_port        = htons(port);
    }
    params.field_mask         = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr      = (struct sockaddr*)&addr;
    params.sockaddr.addrlen   = ipv6 ? sizeof(*in6) : sizeof(*in);
    params.conn_handler.cb    = conn_cb;
    params.conn_handler.arg   = NULL;
    status = ucp_listener_create(worker, &params, &listener);
    if (status != UCS_OK) {
        die("ucp_listener_create", status);
    }
    printf("listening on port %d\n", port);
    fflush(stdout);
    target_clients = clients;
    while ((clients == 0) || (served < clients)) {
        if (mode == MODE_TAG) {
            serve_tag(max);
        } else if (mode == MODE_AM) {
            serve_am();
        } else {
            serve_stream(max);
        }
    }
    printf("SERVED %d\n", served);
    ucp_listener_destroy(listener);
    return 0;
}

/* ---- client ---------------------------------------------------------------- */

static void echo_once(ucp_ep_h ep, uint64_t name, uint8_t *out, uint8_t *in,
                      size_t len)
{
    ucp_request_param_t param = {0};
    uint64_t echoed;
    void *sreq, *rreq;

    if (mode == MODE_TAG) {
        rreq = ucp_tag_recv_nbx(worker, in, len, name, 0xffffffffffffffffull,
                                &param);
        sreq = ucp_tag_send_nbx(ep, out, len, name, &param);
        if ((wait_req(sreq) != UCS_OK) || (wait_req(rreq) != UCS_OK)) {
            die("client tag echo", UCS_ERR_IO_ERROR);
        }
    } else if (mode == MODE_STREAM) {
        echoed = len;
        stream_send(ep, &echoed, sizeof(echoed));
        stream_send(ep, out, len);
        stream_recv_all(ep, &echoed, sizeof(echoed));
        if (echoed != len) {
            die("client: stream echo of another length", UCS_ERR_IO_ERROR);
        }
        stream_recv_all(ep, in, len);
    } else {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = UCP_AM_SEND_FLAG_REPLY;
        if (wait_req(ucp_am_send_nbx(ep, AM_DATA, NULL, 0, out, len, &param)) !=
            UCS_OK) {
            die("client ucp_am_send_nbx", UCS_ERR_IO_ERROR);
        }
        am_take();
        if (am_in.length != len) {
            die("client: AM echo of another length", UCS_ERR_IO_ERROR);
        }
        memcpy(in, am_in.buf, len);
        am_release();
    }
}

/* every size of the comma separated SIZES, ITERS round trips each;
 * returns 0 if a byte came back wrong */
static int echo_sizes(ucp_ep_h ep, uint64_t name, const char *sizes, int iters)
{
    char *list, *tok, *save;
    uint8_t *out, *in;
    size_t len;
    int i, ok = 1;

    list = strdup(sizes);
    for (tok = strtok_r(list, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        len = strtoull(tok, NULL, 0);
        out = malloc(len ? len : 1);
        in  = malloc(len ? len : 1);
        for (i = 0; i < iters; ++i) {
            fill(out, len, i);
            memset(in, 0, len);
            echo_once(ep, name, out, in, len);
            if (memcmp(out, in, len) != 0) {
                printf("size %zu round %d: MISMATCH\n", len, i);
                ok = 0;
            }
        }
        printf("size %zu: %d round trips%s\n", len, iters, ok ? "" : " FAILED");
        fflush(stdout);
        free(out);
        free(in);
    }
    free(list);
    return ok;
}

static int run_client(const char *host, int port, const char *sizes, int iters,
                      const char *until)
{
    ucp_ep_params_t params = ep_params(NULL);
    ucp_request_param_t rparam = {0};
    struct addrinfo hints, *ai;
    char port_str[16];
    uint64_t name = 0, bye = STREAM_BYE;
    ucp_request_param_t sparam = {0};
    ucp_ep_h ep;
    size_t len;
    int ok;
    ucs_status_t status;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port_str, sizeof(port_str), "%d", port);
    if (getaddrinfo(host, port_str, &hints, &ai) != 0) {
        die("getaddrinfo", UCS_ERR_INVALID_ADDR);
    }
    params.field_mask      |= UCP_EP_PARAM_FIELD_FLAGS |
                              UCP_EP_PARAM_FIELD_SOCK_ADDR;
    params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr    = ai->ai_addr;
    params.sockaddr.addrlen = ai->ai_addrlen;
    t_start = now();
    status  = ucp_ep_create(worker, &params, &ep);
    freeaddrinfo(ai);
    if (status != UCS_OK) {
        die("client ucp_ep_create", status);
    }
    if (mode == MODE_TAG) {
        if (wait_req(ucp_tag_recv_nbx(worker, &name, sizeof(name), TAG_WELCOME,
                                      0xffffffffffffffffull, &rparam)) != UCS_OK) {
            die("client: no WELCOME", UCS_ERR_IO_ERROR);
        }
    }
    printf("connected (name %lu) after %.2f s\n", (unsigned long)name,
           now() - t_start);
    fflush(stdout);

    do {
        ok = echo_sizes(ep, name, sizes, iters);
    } while (ok && (until != NULL) && (access(until, F_OK) != 0));

    /* BYE, and its answer before the close: UCP may report the peer's
     * close before it delivers what came ahead of it. From here the
     * server's end is expected. */
    closing_ep = ep;
    if (mode == MODE_TAG) {
        void *rreq = ucp_tag_recv_nbx(worker, NULL, 0, name | TAG_BYE,
                                      0xffffffffffffffffull, &rparam);
        send_tag(ep, NULL, 0, name | TAG_BYE);
        while (!peer_closed && (ucp_request_check_status(rreq) == UCS_INPROGRESS)) {
            ucp_worker_progress(worker);
        }
        if (ucp_request_check_status(rreq) == UCS_INPROGRESS) {
            ucp_request_cancel(worker, rreq);
        }
        (void)wait_req(rreq);
    } else if (mode == MODE_STREAM) {
        stream_send(ep, &bye, sizeof(bye));
        (void)wait_req(ucp_stream_recv_nbx(ep, &bye, sizeof(bye), &len, &sparam));
    } else {
        rparam.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rparam.flags        = UCP_AM_SEND_FLAG_REPLY;
        if (wait_req(ucp_am_send_nbx(ep, AM_BYE, NULL, 0, NULL, 0,
                                     &rparam)) != UCS_OK) {
            die("client AM bye", UCS_ERR_IO_ERROR);
        }
        am_take();
        am_release();
    }
    close_ep(ep);
    if (ok) {
        printf("DATA OK\n");
    }
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *host = NULL, *until = NULL;
    const char *sizes = "0,1,8,1000,65536,1048577";
    int port = 0, listen_port = -1, iters = 3, clients = 1, ipv6 = 0, c, ret;
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_config_t *config;
    ucs_status_t status;

    while ((c = getopt(argc, argv, "l:c:p:s:n:k:m:e:u:6")) != -1) {
        switch (c) {
        case 'l': listen_port = atoi(optarg); break;
        case 'c': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 's': sizes = optarg; break;
        case 'n': iters = atoi(optarg); break;
        case 'k': clients = atoi(optarg); break;
        case 'u': until = optarg; break;
        case '6': ipv6 = 1; break;
        case 'm':
            mode = !strcmp(optarg, "stream") ? MODE_STREAM :
                   !strcmp(optarg, "am") ? MODE_AM : MODE_TAG;
            break;
        case 'e':
            err_mode = !strcmp(optarg, "none") ? UCP_ERR_HANDLING_MODE_NONE :
                                                 UCP_ERR_HANDLING_MODE_PEER;
            break;
        default:
            fprintf(stderr, "usage: see the comment at the top of cs_check.c\n");
            return 2;
        }
    }
    t_start = now();
    if ((listen_port < 0) && (host == NULL)) {
        fprintf(stderr, "cs_check: -l PORT or -c HOST -p PORT\n");
        return 2;
    }

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        die("ucp_config_read", status);
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_AM;
    status = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(context, &wparams, &worker);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }
    am_set_handler(AM_DATA, NULL);
    am_set_handler(AM_ECHO, NULL);
    am_set_handler(AM_BYE, (void*)1);

    ret = (listen_port >= 0) ? run_server(listen_port, clients, ipv6) :
                               run_client(host, port, sizes, iters, until);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return ret;
}
