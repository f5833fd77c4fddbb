/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucp_check: a UCP ping-pong that verifies every byte, for the integration
 * tests. The server echoes each tagged message; the client checks that what
 * comes back is the pattern it sent. The pattern is a marker string the wire
 * test looks for in packet captures.
 *
 *   ucp_check -l PORT                     server (one client, then exit)
 *   ucp_check -c HOST -p PORT [-s SIZES]  client; SIZES comma separated
 *   -n ITERS   round trips per size (default 3)
 *   -v         client side: buffers as a 3-piece UCP iov (non-contiguous)
 *   -w WINDOW  WINDOW messages of each size outstanding at once, each way
 *              (every one its own tag, buffer and pattern): many
 *              rendezvous in flight together
 *
 * Worker addresses are exchanged over a plain TCP socket (metadata only,
 * like ucx_perftest's). Exit status 0 only if every message matched.
 */
#include <ucp/api/ucp.h>
#include "ucp_test_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


static ucp_context_h context;
static ucp_worker_h worker;

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "ucp_check: %s: %s\n", what, ucs_status_string(status));
    exit(2);
}



static int use_iov; /* -v: the client's buffers as a 3-piece UCP iov */

/* the buffer as three uneven pieces (non-contiguous datatype); returns the
 * buffer/count to pass to UCP and sets the datatype */
static void *as_iov(void *buf, size_t len, ucp_dt_iov_t iov[3], size_t *count,
                    ucp_request_param_t *param)
{
    if (!use_iov) {
        *count = len;
        return buf;
    }
    iov[0].buffer = buf;
    iov[0].length = len / 3;
    iov[1].buffer = (char*)buf + len / 3;
    iov[1].length = len / 2 - len / 3;
    iov[2].buffer = (char*)buf + len / 2;
    iov[2].length = len - len / 2;
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    param->datatype      = ucp_dt_make_iov();
    *count               = 3;
    return iov;
}

static ucs_status_t send_msg(ucp_ep_h ep, void *buf, size_t len)
{
    ucp_request_param_t param = {0};
    ucp_dt_iov_t iov[3];
    size_t count;
    void *what = as_iov(buf, len, iov, &count, &param);
    return wait_req(ucp_tag_send_nbx(ep, what, count, 1, &param));
}

static ucs_status_t recv_msg(void *buf, size_t len)
{
    ucp_request_param_t param = {0};
    ucp_dt_iov_t iov[3];
    size_t count;
    void *what = as_iov(buf, len, iov, &count, &param);
    return wait_req(ucp_tag_recv_nbx(worker, what, count, 1, (ucp_tag_t)-1, &param));
}

/* the pattern of message k of a window: the round's, with k inside */
static void fill_window(uint8_t *buf, size_t len, unsigned round, uint32_t k)
{
    fill(buf, len, round);
    if (len >= 2 * sizeof(k)) {
        memcpy(buf + len / 2, &k, sizeof(k));
    }
}

/* progress until every request of `reqs` completes; the first error */
static ucs_status_t wait_all(void **reqs, int n)
{
    ucs_status_t status = UCS_OK, st;
    int k;

    for (k = 0; k < n; ++k) {
        st = wait_req(reqs[k]);
        if (status == UCS_OK) {
            status = st;
        }
    }
    return status;
}

/* One round of a window: the client sends WINDOW messages and receives
 * them back, the server receives all, then sends each back; all posted
 * before any is waited for. Returns the mismatches, or -1 on an error. */
static int window_round(ucp_ep_h ep, int server, size_t len, int window,
                        unsigned round)
{
    enum { TAG_OUT = 0x1000000, TAG_BACK = 0x2000000 };
    const ucp_tag_t mask = (ucp_tag_t)-1;
    uint8_t **bufs  = calloc(window, sizeof(*bufs));
    uint8_t **backs = calloc(window, sizeof(*backs));
    void **reqs = calloc(2 * window, sizeof(*reqs));
    uint8_t *expect = malloc(len ? len : 1);
    ucp_request_param_t param = {0};
    int k, bad = 0;
    ucs_status_t status;

    for (k = 0; k < window; ++k) {
        bufs[k]  = malloc(len ? len : 1);
        backs[k] = malloc(len ? len : 1);
        if (server) {
            reqs[k] = ucp_tag_recv_nbx(worker, bufs[k], len, TAG_OUT + k, mask, &param);
        } else {
            fill_window(bufs[k], len, round, (uint32_t)k);
            memset(backs[k], 0, len);
            reqs[k] = ucp_tag_send_nbx(ep, bufs[k], len, TAG_OUT + k, &param);
            reqs[window + k] = ucp_tag_recv_nbx(worker, backs[k], len,
                                                TAG_BACK + k, mask, &param);
        }
    }
    if (server) {
        status = wait_all(reqs, window);
        for (k = 0; (k < window) && (status == UCS_OK); ++k) {
            reqs[window + k] = ucp_tag_send_nbx(ep, bufs[k], len, TAG_BACK + k,
                                                &param);
        }
        if (status == UCS_OK) {
            status = wait_all(reqs + window, window);
        }
    } else {
        status = wait_all(reqs, 2 * window);
        for (k = 0; (k < window) && (status == UCS_OK); ++k) {
            fill_window(expect, len, round, (uint32_t)k);
            if (memcmp(backs[k], expect, len)) {
                fprintf(stderr, "ucp_check: size %zu round %u message %d of %d: "
                        "DATA MISMATCH\n", len, round, k, window);
                ++bad;
            }
        }
    }
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_check: size %zu, window of %d: %s\n", len, window,
                ucs_status_string(status));
        bad = -1;
    }
    for (k = 0; k < window; ++k) {
        free(bufs[k]);
        free(backs[k]);
    }
    free(bufs);
    free(backs);
    free(reqs);
    free(expect);
    return bad;
}

static int full_io(int fd, void *buf, size_t len, int writing)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = writing ? write(fd, (char*)buf + done, len - done) :
                              read(fd, (char*)buf + done, len - done);
        if (n <= 0) {
            return -1;
        }
        done += (size_t)n;
    }
    return 0;
}

/* swap worker addresses over `fd`; returns the peer's ep */
static ucp_ep_h connect_peer(int fd)
{
    ucp_address_t *addr, *peer_addr;
    ucp_ep_params_t ep_params;
    size_t addr_len;
    uint64_t len64;
    ucs_status_t status;
    ucp_ep_h ep;

    status = ucp_worker_get_address(worker, &addr, &addr_len);
    if (status != UCS_OK) {
        die("ucp_worker_get_address", status);
    }
    len64 = addr_len;
    if (full_io(fd, &len64, sizeof(len64), 1) || full_io(fd, addr, addr_len, 1) ||
        full_io(fd, &len64, sizeof(len64), 0)) {
        fprintf(stderr, "ucp_check: address exchange failed\n");
        exit(2);
    }
    peer_addr = malloc(len64);
    if (full_io(fd, peer_addr, len64, 0)) {
        fprintf(stderr, "ucp_check: address exchange failed\n");
        exit(2);
    }
    ucp_worker_release_address(worker, addr);

    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = peer_addr;
    status = ucp_ep_create(worker, &ep_params, &ep);
    free(peer_addr);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
    return ep;
}

int main(int argc, char **argv)
{
    const char *host = NULL, *sizes = "0,1,8,1000,8192,65536,1048576";
    int port = 0, listen_port = 0, iters = 3, window = 0, opt, fd, mismatches = 0;
    ucp_params_t params = {0};
    ucp_worker_params_t wparams = {0};
    ucs_status_t status;
    ucp_ep_h ep;

    /* -C: a canary an attacker is told the address of (the attack tests):
     * nothing from the network may change it */
    static uint8_t canary[4096];
    int with_canary = 0;

    while ((opt = getopt(argc, argv, "l:c:p:s:n:w:vC")) != -1) {
        switch (opt) {
        case 'l': listen_port = atoi(optarg); break;
        case 'c': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 's': sizes = optarg; break;
        case 'n': iters = atoi(optarg); break;
        case 'w': window = atoi(optarg); break;
        case 'v': use_iov = 1; break;
        case 'C': with_canary = 1; break;
        default:
            fprintf(stderr, "usage: %s -l PORT | -c HOST -p PORT [-s SIZES] [-n N] [-w WINDOW] [-v]\n",
                    argv[0]);
            return 2;
        }
    }

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status = ucp_init(&params, NULL, &context);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(context, &wparams, &worker);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }

    if (with_canary) {
        memset(canary, 0xc5, sizeof(canary));
        printf("CANARY 0x%lx %zu\n", (unsigned long)(uintptr_t)canary,
               sizeof(canary));
        fflush(stdout);
    }

    if (listen_port) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(listen_port),
                                 .sin_addr.s_addr = INADDR_ANY};
        int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(lfd, (struct sockaddr*)&sa, sizeof(sa)) || listen(lfd, 1)) {
            perror("ucp_check: bind/listen");
            return 2;
        }
        fd = accept(lfd, NULL, NULL);
        close(lfd);
    } else {
        struct addrinfo *ai, hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
        char port_str[16];
        snprintf(port_str, sizeof(port_str), "%d", port);
        if (!host || getaddrinfo(host, port_str, &hints, &ai)) {
            fprintf(stderr, "ucp_check: cannot resolve %s\n", host ? host : "(none)");
            return 2;
        }
        fd = socket(AF_INET, SOCK_STREAM, 0);
        for (int tries = 0; connect(fd, ai->ai_addr, ai->ai_addrlen); ++tries) {
            if (tries > 100) {
                perror("ucp_check: connect");
                return 2;
            }
            usleep(50000);
        }
        freeaddrinfo(ai);
    }
    ep = connect_peer(fd);

    /* the size list travels from client to server over the socket */
    char size_list[1024];
    uint32_t list_len;
    if (!listen_port) {
        snprintf(size_list, sizeof(size_list), "%s", sizes);
        list_len = (uint32_t)strlen(size_list) + 1;
        full_io(fd, &list_len, sizeof(list_len), 1);
        full_io(fd, size_list, list_len, 1);
        full_io(fd, &iters, sizeof(iters), 1);
        full_io(fd, &window, sizeof(window), 1);
    } else {
        full_io(fd, &list_len, sizeof(list_len), 0);
        if (list_len > sizeof(size_list) || full_io(fd, size_list, list_len, 0)) {
            return 2;
        }
        full_io(fd, &iters, sizeof(iters), 0);
        full_io(fd, &window, sizeof(window), 0);
        if ((window < 0) || (window > 65536)) {
            return 2;
        }
    }

    char *save = NULL;
    for (char *tok = strtok_r(size_list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t len = strtoull(tok, NULL, 0);
        uint8_t *buf = malloc(len ? len : 1), *expect = malloc(len ? len : 1);
        for (int i = 0; (i < iters) && (window > 0); ++i) {
            int bad = window_round(ep, listen_port != 0, len, window, (unsigned)i);
            if (bad < 0) {
                return 1;
            }
            mismatches += bad;
        }
        for (int i = 0; (i < iters) && (window == 0); ++i) {
            fill(expect, len, (unsigned)i);
            if (listen_port) {
                status = recv_msg(buf, len);
                if (status == UCS_OK) {
                    status = send_msg(ep, buf, len);
                }
            } else {
                status = send_msg(ep, expect, len);
                if (status == UCS_OK) {
                    memset(buf, 0, len);
                    status = recv_msg(buf, len);
                }
            }
            if (status != UCS_OK) {
                fprintf(stderr, "ucp_check: size %zu: %s\n", len, ucs_status_string(status));
                return 1;
            }
            if (memcmp(buf, expect, len)) {
                fprintf(stderr, "ucp_check: size %zu round %d: DATA MISMATCH\n", len, i);
                ++mismatches;
            }
        }
        if (!listen_port) {
            printf("size %zu: %d round trips%s %s\n", len, iters,
                   window ? " of a window" : "", mismatches ? "MISMATCH" : "ok");
        }
        free(buf);
        free(expect);
    }

    /* end-of-run handshake on the socket, so neither side tears down early */
    char done = 'd';
    full_io(fd, &done, 1, 1);
    full_io(fd, &done, 1, 0);
    close(fd);

    ucp_request_param_t cparam = {0};
    wait_req(ucp_ep_close_nbx(ep, &cparam));
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    if (!listen_port) {
        printf("%s\n", mismatches ? "DATA MISMATCH" : "DATA OK");
    }
    if (with_canary) {
        int intact = 1;
        for (size_t i = 0; i < sizeof(canary); ++i) {
            intact &= (canary[i] == 0xc5);
        }
        printf("%s\n", intact ? "CANARY INTACT" : "CANARY CHANGED");
        mismatches += !intact;
    }
    return mismatches ? 1 : 0;
}
