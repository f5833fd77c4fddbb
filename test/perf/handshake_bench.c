/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a stranger's first message costs a crypt listener (issue 29 item
 * 2): the responder's own work per message, one thread, on the code the
 * listeners run (src/keyex/noise.h, src/uct_crypt/wire/wire_admit.h),
 * without sockets. The listeners busy-poll under UCP, so their process
 * CPU says nothing of this; here each path is timed alone:
 *
 *   junk          bytes that fail mac1 (own wire) or the tag (cm)
 *   replay_recent a replay of a first message taken lately: refused by
 *                 its ephemeral, before any DH
 *   replay_old    a replay the listener forgot, not under load: the DHs
 *                 (own wire: then refused by its timestamp; cm: answered)
 *   replay_cookie the same under load: a cookie reply instead of the DH
 *   honest        an honest first message, taken: the whole answer
 *
 * Old replays are honest first messages made beforehand (each with a
 * fresh ephemeral, as a store of recorded ones would be), so the
 * listener's set of ephemerals never knows them.
 *
 * usage: handshake_bench [--csv FILE] [--count N]
 */
#include "ucx_crypt_config.h"
#include "keyex/noise.h"
#include "uct_crypt/wire/wire_admit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cpu_model(char *buf, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    snprintf(buf, len, "unknown");
    while ((f != NULL) && fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "model name", 10) && (strchr(line, ':') != NULL)) {
            snprintf(buf, len, "%s", strchr(line, ':') + 2);
            buf[strcspn(buf, "\n")] = '\0';
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
}

/* One listener of each kind, and the first messages sent to them */
typedef struct {
    uint8_t                   job[KEYEX_JOB_SECRET_LEN];
    keyex_keypair_t           ini_s, rsp_s;       /* own wire: static keys */
    uint8_t                   mac1_key[KEYEX_SECRET_LEN];
    uint8_t                   cookie_key[2][KEYEX_SECRET_LEN]; /* wire, cm */
    keyex_noise_t             cm_start, hs;
    uct_crypt_seen_t          seen;
    uct_crypt_cookies_t       cookies;            /* under load: rate 0 */
    struct sockaddr_storage   from;
    keyex_noise_init_msg_t    *wire, wire_junk;   /* wire[i]: fresh each */
    keyex_noise_cm_init_msg_t *cm, cm_junk;
} bench_t;

typedef int (*bench_path_t)(bench_t *b, size_t i);

/* ---- the own wire (wire/wire_handshake.c, in its order) ---------------- */

static int wire_mac1_and_seen(bench_t *b, const keyex_noise_init_msg_t *msg,
                              uct_crypt_seen_verdict_t expect)
{
    return keyex_noise_init_precheck(b->mac1_key, msg) &&
           (uct_crypt_seen_check(&b->seen, msg->ephemeral) == expect);
}

static int wire_dh(bench_t *b, size_t i, int answer)
{
    uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN];
    keyex_noise_response_msg_t resp;
    keyex_noise_transport_t keys;
    int ok;

    ok = (keyex_noise_start(&b->hs, &b->rsp_s, b->job,
                            &(keyex_noise_context_t){KEYEX_NOISE_ROLE_RECORDS,
                                                     16}) == KEYEX_OK) &&
         (keyex_noise_init_consume(&b->hs, &b->rsp_s, &b->wire[i], ts) ==
          KEYEX_OK) &&
         (!answer || (keyex_noise_response_create(&b->hs, b->job, 0, &resp,
                                                  &keys) == KEYEX_OK));
    keyex_noise_cleanup(&b->hs);
    return ok;
}

static int cookie_reply(bench_t *b, const void *msg, size_t len,
                        const uint8_t *key, const uint8_t *answered)
{
    uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
    keyex_noise_cookie_msg_t reply;
    double t = now();

    return (uct_crypt_cookies_mac2_valid(&b->cookies, t, &b->from, key, msg,
                                         len) == 0) &&
           !uct_crypt_cookies_dh_allowed(&b->cookies, t) &&
           (uct_crypt_cookies_make(&b->cookies, t, &b->from, cookie) == 0) &&
           (keyex_noise_cookie_reply_create(key, cookie, answered, &reply) ==
            KEYEX_OK);
}

static int wire_junk(bench_t *b, size_t i)
{
    return !keyex_noise_init_precheck(b->mac1_key, &b->wire_junk);
}

static int wire_honest(bench_t *b, size_t i)
{
    return wire_mac1_and_seen(b, &b->wire[i], UCT_CRYPT_SEEN_NEW) &&
           wire_dh(b, i, 1);
}

static int wire_replay_recent(bench_t *b, size_t i)
{
    return wire_mac1_and_seen(b, &b->wire[i], UCT_CRYPT_SEEN_AGAIN);
}

/* then refused by its timestamp */
static int wire_replay_old(bench_t *b, size_t i)
{
    return wire_mac1_and_seen(b, &b->wire[i], UCT_CRYPT_SEEN_NEW) &&
           wire_dh(b, i, 0);
}

static int wire_replay_cookie(bench_t *b, size_t i)
{
    return wire_mac1_and_seen(b, &b->wire[i], UCT_CRYPT_SEEN_NEW) &&
           cookie_reply(b, &b->wire[i], sizeof(b->wire[i]), b->cookie_key[0],
                        b->wire[i].mac1);
}

/* ---- the connection manager (cm/cm_handshake.c, in its order) ---------- */

static int cm_tag_and_seen(bench_t *b, const keyex_noise_cm_init_msg_t *msg,
                           uct_crypt_seen_verdict_t expect)
{
    int ok;

    memcpy(&b->hs, &b->cm_start, sizeof(b->hs));
    ok = (keyex_noise_cm_init_consume(&b->hs, msg) == KEYEX_OK) &&
         (uct_crypt_seen_check(&b->seen, msg->msg.ephemeral) == expect);
    return ok;
}

static int cm_answer(bench_t *b)
{
    keyex_noise_transport_t keys;
    keyex_noise_cm_msg_t resp;
    int ok;

    ok = (keyex_noise_cm_response_create(&b->hs, &resp, &keys) == KEYEX_OK);
    keyex_noise_cleanup(&b->hs);
    return ok;
}

static int cm_junk(bench_t *b, size_t i)
{
    int refused;

    memcpy(&b->hs, &b->cm_start, sizeof(b->hs));
    refused = (keyex_noise_cm_init_consume(&b->hs, &b->cm_junk) == KEYEX_ERR_AUTH);
    keyex_noise_cleanup(&b->hs);
    return refused;
}

/* (a replay answered never goes on to its CONNECT) */
static int cm_honest_or_old(bench_t *b, size_t i)
{
    return cm_tag_and_seen(b, &b->cm[i], UCT_CRYPT_SEEN_NEW) && cm_answer(b);
}

static int cm_replay_recent(bench_t *b, size_t i)
{
    int ok = cm_tag_and_seen(b, &b->cm[i], UCT_CRYPT_SEEN_AGAIN);

    keyex_noise_cleanup(&b->hs);
    return ok;
}

static int cm_replay_cookie(bench_t *b, size_t i)
{
    int ok = cm_tag_and_seen(b, &b->cm[i], UCT_CRYPT_SEEN_NEW) &&
             cookie_reply(b, &b->cm[i], sizeof(b->cm[i]), b->cookie_key[1],
                          b->cm[i].msg.tag);

    keyex_noise_cleanup(&b->hs);
    return ok;
}

/* ---- timing ------------------------------------------------------------ */

typedef struct {
    const char   *name;
    bench_path_t wire, cm;
    int          forget;   /* the listener forgot what it saw before */
    double       us[2];
} bench_row_t;

static double bench_time(bench_t *b, bench_path_t path, size_t count,
                         const char *name)
{
    double start = now();
    size_t i;

    for (i = 0; i < count; ++i) {
        if (!path(b, i)) {
            fprintf(stderr, "handshake_bench: %s: message %zu went another way\n",
                    name, i);
            exit(1);
        }
    }
    return (now() - start) / count * 1e6;
}

static void bench_setup(bench_t *b, size_t count)
{
    static const keyex_noise_context_t context = {KEYEX_NOISE_ROLE_RECORDS, 16};
    struct sockaddr_in *in = (struct sockaddr_in*)&b->from;
    uint8_t ts[KEYEX_NOISE_TIMESTAMP_LEN];
    size_t i;

    memset(b->job, 0x4a, sizeof(b->job));
    in->sin_family = AF_INET;
    in->sin_port   = htons(40000);
    inet_pton(AF_INET, "10.81.0.3", &in->sin_addr);
    b->wire = calloc(count, sizeof(*b->wire));
    b->cm   = calloc(count, sizeof(*b->cm));
    if ((b->wire == NULL) || (b->cm == NULL) ||
        (keyex_keypair_generate(&b->ini_s) != KEYEX_OK) ||
        (keyex_keypair_generate(&b->rsp_s) != KEYEX_OK) ||
        (keyex_noise_mac1_key(b->job, b->rsp_s.public_key, b->mac1_key) != KEYEX_OK) ||
        (keyex_noise_cookie_key(b->job, b->rsp_s.public_key, b->cookie_key[0]) !=
         KEYEX_OK) ||
        (keyex_noise_cookie_key(b->job, NULL, b->cookie_key[1]) != KEYEX_OK) ||
        (keyex_noise_cm_start(&b->cm_start, b->job) != KEYEX_OK)) {
        fprintf(stderr, "handshake_bench: set-up failed\n");
        exit(1);
    }
    /* what a store of recorded first messages holds: fresh ephemerals */
    for (i = 0; i < count; ++i) {
        keyex_noise_timestamp_now(ts);
        if ((keyex_noise_start(&b->hs, &b->ini_s, b->job, &context) != KEYEX_OK) ||
            (keyex_noise_init_create(&b->hs, &b->ini_s, b->job, b->rsp_s.public_key,
                                     ts, &b->wire[i]) != KEYEX_OK)) {
            exit(1);
        }
        keyex_noise_cleanup(&b->hs);
        if ((keyex_noise_cm_start(&b->hs, b->job) != KEYEX_OK) ||
            (keyex_noise_cm_init_create(&b->hs, &b->cm[i]) != KEYEX_OK)) {
            exit(1);
        }
        keyex_noise_cleanup(&b->hs);
    }
    /* junk with a right header: the checks go as far as the MAC */
    b->wire_junk          = b->wire[0];
    b->wire_junk.mac1[0] ^= 1;
    b->cm_junk            = b->cm[0];
    b->cm_junk.msg.tag[0] ^= 1;
}

int main(int argc, char **argv)
{
    bench_row_t rows[] = {
        {"junk",          wire_junk,          cm_junk,          1},
        {"honest",        wire_honest,        cm_honest_or_old, 1},
        {"replay_recent", wire_replay_recent, cm_replay_recent, 0},
        {"replay_old",    wire_replay_old,    cm_honest_or_old, 1},
        {"replay_cookie", wire_replay_cookie, cm_replay_cookie, 1}
    };
    const size_t nrows = sizeof(rows) / sizeof(rows[0]);
    const char *csv_path = NULL;
    size_t count = 2000, r;
    char cpu[256], host[128];
    bench_t b = {};
    int round, i;
    FILE *csv;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--csv") && (i + 1 < argc)) {
            csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--count") && (i + 1 < argc)) {
            count = strtoul(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [--csv FILE] [--count N]\n", argv[0]);
            return 2;
        }
    }
    if (count == 0) {
        return 2;
    }
    bench_setup(&b, count);

    /* twice: the first round warms caches and the clock up, the second is
     * reported */
    for (round = 0; round < 2; ++round) {
        for (r = 0; r < nrows; ++r) {
            if (rows[r].forget) {
                uct_crypt_seen_cleanup(&b.seen);
            }
            uct_crypt_cookies_cleanup(&b.cookies);
            uct_crypt_cookies_init(&b.cookies, 0, now()); /* under load */
            rows[r].us[0] = bench_time(&b, rows[r].wire, count, rows[r].name);
            rows[r].us[1] = bench_time(&b, rows[r].cm, count, rows[r].name);
        }
    }

    cpu_model(cpu, sizeof(cpu));
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    printf("# host %s, cpu \"%s\", %ld online cpus, %zu messages per path\n",
           host, cpu, sysconf(_SC_NPROCESSORS_ONLN), count);
    printf("# a listener's own work per first message, one thread\n");
    printf("%-14s %12s %12s %14s %14s\n", "path", "own_wire_us", "cm_us",
           "own_wire_per_s", "cm_per_s");
    for (r = 0; r < nrows; ++r) {
        printf("%-14s %12.1f %12.1f %14.0f %14.0f\n", rows[r].name,
               rows[r].us[0], rows[r].us[1], 1e6 / rows[r].us[0],
               1e6 / rows[r].us[1]);
    }
    if (csv_path != NULL) {
        csv = fopen(csv_path, "w");
        if (csv == NULL) {
            perror(csv_path);
            return 1;
        }
        fprintf(csv, "# host=%s cpu=\"%s\" cpus=%ld count=%zu\n", host, cpu,
                sysconf(_SC_NPROCESSORS_ONLN), count);
        fprintf(csv, "path,own_wire_us,cm_us\n");
        for (r = 0; r < nrows; ++r) {
            fprintf(csv, "%s,%.3f,%.3f\n", rows[r].name, rows[r].us[0],
                    rows[r].us[1]);
        }
        fclose(csv);
        printf("CSV written to %s\n", csv_path);
    }

    uct_crypt_cookies_cleanup(&b.cookies);
    uct_crypt_seen_cleanup(&b.seen);
    keyex_noise_cleanup(&b.cm_start);
    keyex_keypair_cleanup(&b.ini_s);
    keyex_keypair_cleanup(&b.rsp_s);
    free(b.wire);
    free(b.cm);
    return 0;
}
