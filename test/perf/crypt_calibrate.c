/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Calibration of the bulk engine's crypto side, and its thread-scaling
 * benchmark: how fast the worker pool seals (and a single thread opens) a
 * message cut into stream segments, for 1, 2, 4, 8 threads and message
 * sizes 64 KiB .. 16 MiB. Writes a table, a CSV, and the profile the shim
 * reads (UCX_CRYPT_PROFILE): "key value" lines.
 *
 *   crypt_calibrate [--csv FILE] [--profile FILE] [--backend NAME]
 *                   [--segment BYTES] [--threads 1,2,4,8] [--min-time S]
 *
 * Threads beyond the PUs this machine has are still started (the point is
 * to see the curve flatten); the profile recommends at most the PUs left
 * to one rank (bulk/pool.h). Not a test: nothing here asserts.
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"
#include "uct_crypt/bulk/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS CRYPT_POOL_MAX_THREADS

typedef struct {
    crypt_pool_job_t job;
    crypt_aead_key_t *keys;     /* one per worker */
    const uint8_t    *in;
    uint8_t          *out;
    size_t           len;
    uint32_t         index;
    int              last;
    uint8_t          tag[CRYPT_AEAD_TAG_LEN];
} seg_job_t;

static const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {9, 8, 7, 6, 5, 4, 3};

static void seal_job(crypt_pool_job_t *job, unsigned worker)
{
    seg_job_t *j = (seg_job_t*)job;
    crypt_stream_seal_segment(&j->keys[worker], prefix, j->index, j->last, NULL, 0,
                              j->in, j->len, j->out, j->tag);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* seconds to seal one message of `size` as segments on `pool` */
static double seal_message(crypt_pool_t *pool, seg_job_t *jobs, crypt_aead_key_t *keys,
                           const uint8_t *in, uint8_t *out, size_t size,
                           size_t segment, double min_time)
{
    size_t nseg = (size + segment - 1) / segment, i;
    double start = now(), elapsed;
    unsigned reps = 0;

    do {
        for (i = 0; i < nseg; ++i) {
            jobs[i].job.run = seal_job;
            jobs[i].keys    = keys;
            jobs[i].in      = in + i * segment;
            jobs[i].out     = out + i * segment;
            jobs[i].len     = (i + 1 == nseg) ? size - i * segment : segment;
            jobs[i].index   = (uint32_t)i;
            jobs[i].last    = (i + 1 == nseg);
            crypt_pool_submit(pool, &jobs[i].job);
        }
        for (i = 0; i < nseg; ++i) {
            while (!crypt_pool_job_done(&jobs[i].job)) {
            }
        }
        ++reps;
        elapsed = now() - start;
    } while (elapsed < min_time);
    return elapsed / reps;
}

/* seconds for one thread to open `size` in segments, in place */
static double open_message(crypt_aead_key_t *key, uint8_t *buf, const uint8_t *sealed,
                           seg_job_t *jobs, size_t size, size_t segment,
                           double min_time)
{
    size_t nseg = (size + segment - 1) / segment, i;
    double start = now(), elapsed, copy = 0, t0;
    unsigned reps = 0;

    do {
        t0 = now();
        memcpy(buf, sealed, size); /* fresh ciphertext each time (not timed) */
        copy += now() - t0;
        for (i = 0; i < nseg; ++i) {
            if (crypt_stream_open_segment(key, prefix, (uint32_t)i, i + 1 == nseg, NULL,
                                          0, buf + i * segment, jobs[i].len,
                                          buf + i * segment,
                                          jobs[i].tag) != CRYPT_AEAD_OK) {
                fprintf(stderr, "crypt_calibrate: open failed\n");
                exit(1);
            }
        }
        ++reps;
        elapsed = now() - start;
    } while (elapsed < min_time);
    return (elapsed - copy) / reps;
}

int main(int argc, char **argv)
{
    const char *csv_path = NULL, *profile_path = NULL, *thread_list = "1,2,4,8";
    crypt_aead_backend_t backend = CRYPT_AEAD_BACKEND_AUTO;
    size_t segment = 256 * 1024, size, sizes[] = {65536, 262144, 1 << 20, 4 << 20, 16 << 20};
    double min_time = 0.2, best_rate[MAX_THREADS + 1] = {0}, open_rate = 0;
    unsigned threads[16], nthreads = 0, t, s, w;
    crypt_aead_key_t keys[MAX_THREADS + 1];
    uint8_t raw[16], *in, *out, *buf;
    seg_job_t *jobs;
    FILE *csv = NULL;
    char *list, *tok;
    int i;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
            csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            profile_path = argv[++i];
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            backend = crypt_aead_backend_from_name(argv[++i]);
        } else if (!strcmp(argv[i], "--segment") && i + 1 < argc) {
            segment = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            thread_list = argv[++i];
        } else if (!strcmp(argv[i], "--min-time") && i + 1 < argc) {
            min_time = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--csv FILE] [--profile FILE] [--backend NAME] "
                    "[--segment BYTES] [--threads LIST] [--min-time S]\n", argv[0]);
            return 2;
        }
    }
    backend = crypt_aead_backend_resolve(backend);
    if ((backend == CRYPT_AEAD_BACKEND_LAST) || (crypt_aead_init(backend) != CRYPT_AEAD_OK)) {
        fprintf(stderr, "crypt_calibrate: backend not available\n");
        return 1;
    }
    list = strdup(thread_list);
    for (tok = strtok(list, ","); tok && nthreads < 16; tok = strtok(NULL, ",")) {
        t = (unsigned)atoi(tok);
        if (t >= 1 && t <= MAX_THREADS) {
            threads[nthreads++] = t;
        }
    }
    free(list);

    for (w = 0; w < sizeof(raw); ++w) raw[w] = (uint8_t)(w * 29 + 1);
    memset(keys, 0, sizeof(keys));
    for (w = 0; w <= MAX_THREADS; ++w) {
        crypt_aead_key_init(&keys[w], backend, raw, sizeof(raw));
    }
    size = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
    in   = malloc(size);
    out  = malloc(size);
    buf  = malloc(size);
    jobs = calloc(size / 4096 + 1, sizeof(*jobs));
    for (size_t k = 0; k < size; ++k) in[k] = (uint8_t)(k * 7);

    if (csv_path) {
        csv = fopen(csv_path, "w");
        fprintf(csv, "# %s, %ld cpus, backend %s (%s), segment %zu\n",
                "crypt_calibrate", sysconf(_SC_NPROCESSORS_ONLN),
                crypt_aead_backend_name(backend), crypt_aead_backend_arch(backend), segment);
        fprintf(csv, "threads,size,seal_GBs,speedup_vs_1\n");
    }
    printf("# backend %s (%s), segment %zu bytes, %ld PUs online\n",
           crypt_aead_backend_name(backend), crypt_aead_backend_arch(backend), segment,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("%8s %10s %10s %10s\n", "threads", "size", "seal GB/s", "x 1 thread");

    double one[8] = {0};
    for (t = 0; t < nthreads; ++t) {
        crypt_pool_params_t params = {0};
        crypt_pool_t *pool;
        char error[128];
        params.threads       = threads[t];
        params.oversubscribe = 1;
        if (crypt_pool_create(&params, &pool, error, sizeof(error)) != 0) {
            fprintf(stderr, "crypt_calibrate: %s\n", error);
            return 1;
        }
        for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
            double sec  = seal_message(pool, jobs, keys, in, out, sizes[s], segment, min_time);
            double rate = sizes[s] / sec / 1e9;
            if (threads[t] == 1) one[s] = rate;
            if (rate > best_rate[threads[t]]) best_rate[threads[t]] = rate;
            printf("%8u %10zu %10.2f %10.2f\n", threads[t], sizes[s], rate,
                   one[s] > 0 ? rate / one[s] : 0);
            if (csv) fprintf(csv, "%u,%zu,%.3f,%.3f\n", threads[t], sizes[s], rate,
                             one[s] > 0 ? rate / one[s] : 0);
        }
        crypt_pool_destroy(pool);
    }

    /* the target opens on its progress thread, in place */
    {
        crypt_pool_params_t params = {0};
        crypt_pool_t *pool;
        char error[128];
        crypt_pool_create(&params, &pool, error, sizeof(error)); /* 0: inline */
        /* fresh ciphertext and tags for the open loop */
        seal_message(pool, jobs, keys, in, out, 4 << 20, segment, 0);
        crypt_pool_destroy(pool);
        open_rate = (4 << 20) / open_message(&keys[0], buf, out, jobs, 4 << 20, segment,
                                             min_time) / 1e9;
        printf("open (1 thread, in place), 4 MiB: %.2f GB/s\n", open_rate);
    }

    if (profile_path) {
        FILE *p = fopen(profile_path, "w");
        unsigned best_t = 1;
        long pus = sysconf(_SC_NPROCESSORS_ONLN);
        for (t = 0; t < nthreads; ++t) {
            /* the smallest thread count within 5% of the best rate that the
             * node can give one rank */
            if ((threads[t] < (unsigned)pus) &&
                (best_rate[threads[t]] > 1.05 * best_rate[best_t])) {
                best_t = threads[t];
            }
        }
        fprintf(p, "# written by crypt_calibrate: backend %s (%s)\n",
                crypt_aead_backend_name(backend), crypt_aead_backend_arch(backend));
        fprintf(p, "segment %zu\nthreads %u\nseal_GBs_1 %.3f\nseal_GBs_best %.3f\n"
                "open_GBs %.3f\n", segment, best_t, best_rate[1], best_rate[best_t],
                open_rate);
        fclose(p);
        printf("profile: %s (segment %zu, threads %u)\n", profile_path, segment, best_t);
    }
    if (csv) {
        fclose(csv);
    }
    for (w = 0; w <= MAX_THREADS; ++w) {
        crypt_aead_key_cleanup(&keys[w]);
    }
    free(in);
    free(out);
    free(buf);
    free(jobs);
    return 0;
}
