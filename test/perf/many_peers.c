/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * many_peers: one process talking to many peers, as a rank of a large job
 * does. Two roles, run on two emulated hosts by many_peers.sh:
 *
 *   many_peers -s N -f FILE   the peers: N UCP workers in this process (each
 *                             its own crypt iface, its own peer to the hub),
 *                             their addresses written to FILE; each answers
 *                             the hub's hello on an endpoint back to it
 *   many_peers -c -f FILE     the hub: one worker, an endpoint to each peer
 *                             in FILE, a hello to each (carrying the hub's
 *                             address), every answer awaited and checked
 *
 * The hub prints one line: peers, the time from the first endpoint to the
 * last answer (every connection made, every handshake done, a message
 * each way), the time to close them all, and its own memory and file
 * descriptors before and after, per peer.
 *
 * A wireup storm, the other way round (ranks of many nodes wiring up to
 * rank 0 at once):
 *
 *   many_peers -r W*E -f FILE the hub: one worker, its address written to
 *                             FILE; takes W*E messages, each index once
 *   many_peers -w W -e E -f FILE
 *                             W workers in this process, each opens E
 *                             endpoints to the hub at once and sends one
 *                             message on each; ends once the hub has all
 *
 * The hub prints one line: flows, the time from the storm's first
 * endpoint to its last message (CLOCK_MONOTONIC: both hosts are one
 * machine), and its memory and file descriptors before and after.
 * A benchmark: nothing here asserts on time.
 */
#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#define HELLO_TAG  0x4d50000000000000ull /* | peer index */
#define ANSWER_TAG 0x4d51000000000000ull /* | peer index */
#define STORM_TAG  0x4d52000000000000ull /* | flow index */
#define TAG_MASK   0xffff000000000000ull
#define MSG_MAX    4096

static ucp_context_h context;

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "many_peers: %s: %s\n", what, ucs_status_string(status));
    exit(1);
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long rss_kib(void)
{
    long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if ((f == NULL) || (fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2)) {
        pages_resident = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    return pages_resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n  = 0;

    while ((d != NULL) && (readdir(d) != NULL)) {
        ++n;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

static ucp_worker_h new_worker(void)
{
    ucp_worker_params_t params = {0};
    ucp_worker_h worker;
    ucs_status_t status;

    params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(context, &params, &worker);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }
    return worker;
}

static ucp_ep_h new_ep(ucp_worker_h worker, const void *address)
{
    ucp_ep_params_t params = {0};
    ucp_ep_h ep;
    ucs_status_t status;

    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address    = address;
    status = ucp_ep_create(worker, &params, &ep);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
    return ep;
}

static void *send_nb(ucp_ep_h ep, const void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t param = {0};

    return ucp_tag_send_nbx(ep, buf, len, tag, &param);
}

static void *recv_nb(ucp_worker_h worker, void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t param = {0};

    return ucp_tag_recv_nbx(worker, buf, len, tag, ~0ull, &param);
}

/* done, or still in flight (0); dies on an error */
static int test_req(void *req, const char *what)
{
    ucs_status_t status;

    if (req == NULL) {
        return 1;
    }
    if (UCS_PTR_IS_ERR(req)) {
        die(what, UCS_PTR_STATUS(req));
    }
    status = ucp_request_check_status(req);
    if (status == UCS_INPROGRESS) {
        return 0;
    }
    ucp_request_free(req);
    if (status != UCS_OK) {
        die(what, status);
    }
    return 1;
}

/* Progress `workers` until every close request in `reqs` ended (any
 * status: a close completes however its peer stands) */
static void wait_closed(ucp_worker_h *workers, int count, void **reqs, size_t n)
{
    size_t i, done;
    int w;

    for (done = 0; done < n;) {
        for (w = 0; w < count; ++w) {
            ucp_worker_progress(workers[w]);
        }
        for (i = 0, done = 0; i < n; ++i) {
            if ((reqs[i] != NULL) && (UCS_PTR_IS_ERR(reqs[i]) ||
                (ucp_request_check_status(reqs[i]) != UCS_INPROGRESS))) {
                if (!UCS_PTR_IS_ERR(reqs[i])) {
                    ucp_request_free(reqs[i]);
                }
                reqs[i] = NULL;
            }
            done += (reqs[i] == NULL);
        }
    }
}

typedef struct {
    ucp_worker_h worker;
    uint8_t      hello[MSG_MAX];
    void         *recv_req, *send_req;
    ucp_ep_h     ep;
    int          answered;
} peer_t;

static int run_peers(int n, const char *file)
{
    peer_t *peers = calloc((size_t)n, sizeof(*peers));
    char tmp[4096];
    FILE *f;
    int i, answered = 0;

    snprintf(tmp, sizeof(tmp), "%s.tmp", file);
    f = fopen(tmp, "w");
    if ((peers == NULL) || (f == NULL)) {
        die("setup", UCS_ERR_NO_MEMORY);
    }
    for (i = 0; i < n; ++i) {
        ucp_address_t *address;
        size_t length;
        ucs_status_t status;

        peers[i].worker = new_worker();
        status = ucp_worker_get_address(peers[i].worker, &address, &length);
        if (status != UCS_OK) {
            die("ucp_worker_get_address", status);
        }
        fwrite(&length, sizeof(length), 1, f);
        fwrite(address, 1, length, f);
        ucp_worker_release_address(peers[i].worker, address);
        peers[i].recv_req = recv_nb(peers[i].worker, peers[i].hello, MSG_MAX,
                                    HELLO_TAG | (ucp_tag_t)i);
    }
    fclose(f);
    rename(tmp, file); /* the hub starts once the whole file is there */
    printf("peers: %d workers listening\n", n);
    fflush(stdout);

    /* answer each hello, then keep the endpoints up until killed */
    for (;;) {
        for (i = 0; i < n; ++i) {
            peer_t *p = &peers[i];

            ucp_worker_progress(p->worker);
            if ((p->ep == NULL) && test_req(p->recv_req, "hello")) {
                p->recv_req = NULL;
                p->ep       = new_ep(p->worker, p->hello + sizeof(uint32_t));
                memcpy(p->hello, &i, sizeof(i)); /* the answer: our index */
                p->send_req = send_nb(p->ep, p->hello, sizeof(i),
                                      ANSWER_TAG | (ucp_tag_t)i);
            }
            if ((p->ep != NULL) && !p->answered && test_req(p->send_req, "answer")) {
                p->answered = 1;
                if (++answered == n) {
                    printf("peers: all %d answered\n", n);
                    fflush(stdout);
                }
            }
        }
    }
    return 0;
}

static int run_hub(const char *file)
{
    ucp_worker_h worker = new_worker();
    ucp_address_t *address;
    size_t length, n = 0, i, cap = 0, done;
    uint8_t **addresses = NULL, *hello;
    ucp_ep_h *eps;
    void **sends, **recvs;
    uint32_t *answers;
    long rss0, rss1, rss2;
    int fds0, fds1, fds2;
    double t0, t1, t2;
    ucs_status_t status;
    FILE *f = fopen(file, "r");

    if (f == NULL) {
        die(file, UCS_ERR_NO_ELEM);
    }
    while (fread(&length, sizeof(length), 1, f) == 1) {
        if (n == cap) {
            cap       = cap ? 2 * cap : 64;
            addresses = realloc(addresses, cap * sizeof(*addresses));
        }
        addresses[n] = malloc(length);
        if (fread(addresses[n], 1, length, f) != length) {
            die("short address file", UCS_ERR_IO_ERROR);
        }
        ++n;
    }
    fclose(f);

    status = ucp_worker_get_address(worker, &address, &length);
    if ((status != UCS_OK) || (length + sizeof(uint32_t) > MSG_MAX)) {
        die("ucp_worker_get_address", status);
    }
    hello = malloc(sizeof(uint32_t) + length);
    memcpy(hello + sizeof(uint32_t), address, length);
    ucp_worker_release_address(worker, address);
    eps     = calloc(n, sizeof(*eps));
    sends   = calloc(n, sizeof(*sends));
    recvs   = calloc(n, sizeof(*recvs));
    answers = calloc(n, sizeof(*answers));

    rss0 = rss_kib();
    fds0 = open_fds();
    t0   = now();
    for (i = 0; i < n; ++i) {
        eps[i]   = new_ep(worker, addresses[i]);
        recvs[i] = recv_nb(worker, &answers[i], sizeof(answers[i]),
                           ANSWER_TAG | (ucp_tag_t)i);
        sends[i] = send_nb(eps[i], hello, sizeof(uint32_t) + length,
                           HELLO_TAG | (ucp_tag_t)i);
    }
    for (done = 0; done < 2 * n;) {
        ucp_worker_progress(worker);
        for (i = 0, done = 0; i < n; ++i) {
            if ((sends[i] != NULL) && test_req(sends[i], "hello")) {
                sends[i] = NULL;
            }
            if ((recvs[i] != NULL) && test_req(recvs[i], "answer")) {
                recvs[i] = NULL;
                if (answers[i] != i) {
                    fprintf(stderr, "many_peers: peer %zu answered as %u\n", i,
                            answers[i]);
                    return 1;
                }
            }
            done += (sends[i] == NULL) + (recvs[i] == NULL);
        }
    }
    t1   = now();
    rss1 = rss_kib();
    fds1 = open_fds();

    for (i = 0; i < n; ++i) {
        ucp_request_param_t param = {0}; /* flush, then close */

        sends[i] = ucp_ep_close_nbx(eps[i], &param);
    }
    wait_closed(&worker, 1, sends, n);
    t2   = now();
    rss2 = rss_kib();
    fds2 = open_fds();

    printf("hub: peers %zu setup_s %.3f close_s %.3f rss_kib %ld %ld %ld "
           "per_peer_kib %.1f fds %d %d %d\n",
           n, t1 - t0, t2 - t1, rss0, rss1, rss2,
           (double)(rss1 - rss0) / (double)n, fds0, fds1, fds2);
    ucp_worker_destroy(worker);
    return 0;
}

/* FILE with `suffix`, written whole or not at all (the reader polls) */
static void publish(const char *file, const char *suffix, const void *data,
                    size_t len)
{
    char path[4096], tmp[4200];
    FILE *f;

    snprintf(path, sizeof(path), "%s%s", file, suffix);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if ((f == NULL) || (fwrite(data, 1, len, f) != len) || fclose(f)) {
        die(path, UCS_ERR_IO_ERROR);
    }
    rename(tmp, path);
}

static int published(const char *file, const char *suffix, void *data,
                     size_t len)
{
    char path[4096];
    FILE *f;
    int ok;

    snprintf(path, sizeof(path), "%s%s", file, suffix);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    ok = (len == 0) || (fread(data, 1, len, f) == len);
    fclose(f);
    return ok;
}

static int run_storm_hub(long total, const char *file)
{
    ucp_worker_h worker = new_worker();
    uint8_t *seen       = calloc((size_t)total, 1);
    ucp_request_param_t param = {0};
    ucp_address_t *address;
    uint32_t index;
    size_t length;
    long received = 0;
    long rss0, rss1;
    int fds0, fds1;
    double start, end;
    void *req;
    ucs_status_t status;

    status = ucp_worker_get_address(worker, &address, &length);
    if ((status != UCS_OK) || (seen == NULL)) {
        die("ucp_worker_get_address", status);
    }
    publish(file, "", address, length);
    ucp_worker_release_address(worker, address);
    rss0 = rss_kib();
    fds0 = open_fds();
    printf("hub: waiting for %ld flows\n", total);
    fflush(stdout);

    while (received < total) {
        req = ucp_tag_recv_nbx(worker, &index, sizeof(index), STORM_TAG,
                               TAG_MASK, &param);
        if (UCS_PTR_IS_ERR(req)) {
            die("storm message", UCS_PTR_STATUS(req));
        }
        while (!test_req(req, "storm message")) {
            ucp_worker_progress(worker);
        }
        if ((index >= total) || seen[index]) {
            fprintf(stderr, "many_peers: flow %u arrived twice or unknown\n",
                    index);
            return 1;
        }
        seen[index] = 1;
        ++received;
    }
    end  = now();
    rss1 = rss_kib();
    fds1 = open_fds();
    publish(file, ".done", "", 0);
    if (!published(file, ".start", &start, sizeof(start))) {
        die("the storm's start time", UCS_ERR_NO_ELEM);
    }
    printf("hub: flows %ld setup_s %.3f rss_kib %ld %ld per_flow_kib %.2f "
           "fds %d %d\n", total, end - start, rss0, rss1,
           (double)(rss1 - rss0) / (double)total, fds0, fds1);
    fflush(stdout);
    ucp_worker_destroy(worker);
    free(seen);
    return 0;
}

static int run_storm(int workers, int eps_each, const char *file)
{
    size_t total = (size_t)workers * (size_t)eps_each, i, done;
    ucp_worker_h *worker = calloc((size_t)workers, sizeof(*worker));
    ucp_ep_h *eps        = calloc(total, sizeof(*eps));
    void **sends         = calloc(total, sizeof(*sends));
    uint32_t *index      = calloc(total, sizeof(*index));
    uint8_t address[MSG_MAX];
    ucp_request_param_t param = {0};
    double start;
    int w, spins = 0;
    long length;
    FILE *f;

    if ((worker == NULL) || (eps == NULL) || (sends == NULL) || (index == NULL)) {
        die("setup", UCS_ERR_NO_MEMORY);
    }
    while ((f = fopen(file, "r")) == NULL) {
        usleep(10000);
    }
    length = (long)fread(address, 1, sizeof(address), f);
    fclose(f);
    for (w = 0; w < workers; ++w) {
        worker[w] = new_worker();
    }
    printf("storm: %d workers, %d endpoints each, %ld-byte hub address\n",
           workers, eps_each, length);
    fflush(stdout);

    /* all at once: every endpoint, then every send, then progress */
    start = now();
    publish(file, ".start", &start, sizeof(start));
    for (i = 0; i < total; ++i) {
        eps[i] = new_ep(worker[i / (size_t)eps_each], address);
    }
    for (i = 0; i < total; ++i) {
        index[i] = (uint32_t)i;
        sends[i] = send_nb(eps[i], &index[i], sizeof(index[i]), STORM_TAG | i);
    }
    for (done = 0; done < total;) {
        for (w = 0; w < workers; ++w) {
            ucp_worker_progress(worker[w]);
        }
        for (i = 0, done = 0; i < total; ++i) {
            if ((sends[i] != NULL) && test_req(sends[i], "storm message")) {
                sends[i] = NULL;
            }
            done += (sends[i] == NULL);
        }
    }
    printf("storm: all %zu sent\n", total);
    fflush(stdout);

    /* the endpoints stay until the hub has every message */
    while (!published(file, ".done", NULL, 0)) {
        for (w = 0; w < workers; ++w) {
            ucp_worker_progress(worker[w]);
        }
        if ((++spins % 64) == 0) {
            usleep(1000);
        }
    }
    for (i = 0; i < total; ++i) {
        sends[i] = ucp_ep_close_nbx(eps[i], &param);
    }
    wait_closed(worker, workers, sends, total);
    for (w = 0; w < workers; ++w) {
        ucp_worker_destroy(worker[w]);
    }
    printf("storm: closed\n");
    free(worker); free(eps); free(sends); free(index);
    return 0;
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: %s -s N -f FILE | -c -f FILE | "
                                "-r FLOWS -f FILE | -w W -e E -f FILE\n";
    ucp_params_t params = {0};
    const char *file = NULL;
    int peers = 0, hub = 0, workers = 0, eps_each = 0, c, ret;
    long storm_flows = 0;
    ucs_status_t status;

    while ((c = getopt(argc, argv, "s:cf:r:w:e:")) != -1) {
        switch (c) {
        case 's': peers = atoi(optarg); break;
        case 'c': hub = 1; break;
        case 'f': file = optarg; break;
        case 'r': storm_flows = atol(optarg); break;
        case 'w': workers = atoi(optarg); break;
        case 'e': eps_each = atoi(optarg); break;
        default:
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
    }
    if ((file == NULL) ||
        (!hub && (peers <= 0) && (storm_flows <= 0) &&
         ((workers <= 0) || (eps_each <= 0)))) {
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status = ucp_init(&params, NULL, &context);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }
    if (hub) {
        ret = run_hub(file);
    } else if (storm_flows > 0) {
        ret = run_storm_hub(storm_flows, file);
    } else if (workers > 0) {
        ret = run_storm(workers, eps_each, file);
    } else {
        ret = run_peers(peers, file);
    }
    ucp_cleanup(context);
    return ret;
}
