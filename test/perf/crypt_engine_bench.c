/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Crypto engine benchmark: throughput of our record seal/open and stream
 * segment seal/open, per backend, single thread, next to the raw library
 * call on the same buffers. The ratio ours/raw shows what our framing
 * costs (target: >= 0.90 from 16 KiB up). lane_tag is what the collective
 * lane adds to a chunk of that size already sealed above: AES-GCM with
 * nothing to encrypt over its bytes (GMAC, lane/lane_rx.h).
 *
 * usage: crypt_engine_bench [--csv FILE] [--min-time SECONDS] [--key-bits 128|256]
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"

#ifdef HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif
#include <openssl/evp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum {
    OP_RECORD_SEAL,
    OP_RECORD_OPEN,
    OP_STREAM_SEAL,
    OP_STREAM_OPEN,
    OP_RAW_SEAL,
    OP_LANE_TAG,
    OP_LAST
} bench_op_t;

static const char *op_names[] = {"record_seal", "record_open", "stream_seal",
                                 "stream_open", "raw_seal", "lane_tag"};

typedef struct {
    crypt_aead_backend_t backend;
    crypt_aead_key_t     key;
    uint8_t              raw_key[32];
    unsigned             key_len;
    uint8_t              *in, *out;
    uint8_t              tag[CRYPT_AEAD_TAG_LEN];
    uint8_t              aad[24];
#ifdef HAVE_IPSEC_MB
    IMB_MGR              *imb;
    struct gcm_key_data  *imb_key;
#endif
    EVP_CIPHER_CTX       *evp;
} bench_ctx_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The library called directly, the way an application without our
 * framing would: ipsec-mb's direct GCM API, or EVP with a nonce reset. */
static void raw_seal(bench_ctx_t *ctx, size_t len)
{
    static const uint8_t iv[12] = {1, 2, 3};
#ifdef HAVE_IPSEC_MB
    if (ctx->backend == CRYPT_AEAD_BACKEND_IPSEC_MB) {
        struct gcm_context_data gctx;
        if (ctx->key_len == 16) {
            IMB_AES128_GCM_ENC(ctx->imb, ctx->imb_key, &gctx, ctx->out, ctx->in,
                               len, iv, ctx->aad, sizeof(ctx->aad), ctx->tag, 16);
        } else {
            IMB_AES256_GCM_ENC(ctx->imb, ctx->imb_key, &gctx, ctx->out, ctx->in,
                               len, iv, ctx->aad, sizeof(ctx->aad), ctx->tag, 16);
        }
        return;
    }
#endif
    int outl;
    EVP_EncryptInit_ex(ctx->evp, NULL, NULL, NULL, iv);
    EVP_EncryptUpdate(ctx->evp, NULL, &outl, ctx->aad, sizeof(ctx->aad));
    EVP_EncryptUpdate(ctx->evp, ctx->out, &outl, ctx->in, (int)len);
    EVP_EncryptFinal_ex(ctx->evp, ctx->out + len, &outl);
    EVP_CIPHER_CTX_ctrl(ctx->evp, EVP_CTRL_GCM_GET_TAG, 16, ctx->tag);
}

static int run_op(bench_ctx_t *ctx, bench_op_t op, size_t len, uint64_t i)
{
    static const uint8_t record_prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {9, 8, 7, 6};
    static const uint8_t stream_prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {1};

    switch (op) {
    case OP_RECORD_SEAL:
        return crypt_record_seal(&ctx->key, record_prefix, i, ctx->aad,
                                 sizeof(ctx->aad), ctx->in, len, ctx->out, ctx->tag);
    case OP_RECORD_OPEN:
        /* open a record sealed once before the loop (same sequence) */
        return crypt_record_open(&ctx->key, record_prefix, 0, ctx->aad,
                                 sizeof(ctx->aad), ctx->out, len, ctx->in, ctx->tag);
    case OP_STREAM_SEAL:
        return crypt_stream_seal_segment(&ctx->key, stream_prefix, (uint32_t)i, 0,
                                         NULL, 0, ctx->in, len, ctx->out, ctx->tag);
    case OP_STREAM_OPEN:
        return crypt_stream_open_segment(&ctx->key, stream_prefix, 0, 0, NULL, 0,
                                         ctx->out, len, ctx->in, ctx->tag);
    case OP_RAW_SEAL:
        raw_seal(ctx, len);
        return 0;
    case OP_LANE_TAG:
        return crypt_record_seal(&ctx->key, record_prefix, i, ctx->in, len, NULL,
                                 0, NULL, ctx->tag);
    default:
        return -1;
    }
}

/* Prepare `out`/`tag` so that the open ops find a valid record/segment. */
static void prepare_open(bench_ctx_t *ctx, bench_op_t op, size_t len)
{
    static const uint8_t record_prefix[CRYPT_RECORD_NONCE_PREFIX_LEN] = {9, 8, 7, 6};
    static const uint8_t stream_prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {1};

    if (op == OP_RECORD_OPEN) {
        crypt_record_seal(&ctx->key, record_prefix, 0, ctx->aad, sizeof(ctx->aad),
                          ctx->in, len, ctx->out, ctx->tag);
    } else if (op == OP_STREAM_OPEN) {
        crypt_stream_seal_segment(&ctx->key, stream_prefix, 0, 0, NULL, 0, ctx->in,
                                  len, ctx->out, ctx->tag);
    }
}

static double measure(bench_ctx_t *ctx, bench_op_t op, size_t len, double min_time)
{
    uint64_t iters = 0, batch = 1, i;
    double start, elapsed;

    prepare_open(ctx, op, len);
    /* warm up caches and the CPU clock */
    for (i = 0; i < 16; ++i) {
        run_op(ctx, op, len, i);
    }
    if ((op == OP_RECORD_OPEN) || (op == OP_STREAM_OPEN)) {
        prepare_open(ctx, op, len); /* in-place opens above changed `in` */
    }

    start = now();
    do {
        for (i = 0; i < batch; ++i) {
            if (run_op(ctx, op, len, iters + i) != 0) {
                fprintf(stderr, "%s failed at %zu bytes\n", op_names[op], len);
                exit(1);
            }
        }
        iters  += batch;
        batch  *= 2;
        elapsed = now() - start;
    } while (elapsed < min_time);

    return (double)len * iters / elapsed / 1e9; /* GB/s */
}

static void cpu_model(char *buf, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    snprintf(buf, len, "unknown");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p != NULL) {
                snprintf(buf, len, "%s", p + 2);
                buf[strcspn(buf, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536, 262144,
                                   1048576, 4194304};
    const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    crypt_aead_backend_t backends[2];
    int nbackends = 0, b, op, worst_ok = 1;
    const char *csv_path = NULL;
    double min_time = 0.15;
    unsigned key_bits = 128;
    char cpu[256], host[128];
    bench_ctx_t ctx;
    FILE *csv = NULL;
    size_t s;

    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--csv") && (i + 1 < argc)) {
            csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--min-time") && (i + 1 < argc)) {
            min_time = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--key-bits") && (i + 1 < argc)) {
            key_bits = (unsigned)atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--csv FILE] [--min-time SECONDS] "
                    "[--key-bits 128|256]\n", argv[0]);
            return 2;
        }
    }
    if ((key_bits != 128) && (key_bits != 256)) {
        fprintf(stderr, "--key-bits must be 128 or 256\n");
        return 2;
    }

#ifdef HAVE_IPSEC_MB
    backends[nbackends++] = CRYPT_AEAD_BACKEND_IPSEC_MB;
#endif
    backends[nbackends++] = CRYPT_AEAD_BACKEND_OPENSSL;

    cpu_model(cpu, sizeof(cpu));
    gethostname(host, sizeof(host));
    printf("# ucx-crypt crypto engine benchmark, AES-%u-GCM, one thread\n", key_bits);
    printf("# host %s, cpu \"%s\", %ld online cpus\n", host, cpu,
           sysconf(_SC_NPROCESSORS_ONLN));

    if (csv_path != NULL) {
        csv = fopen(csv_path, "w");
        if (csv == NULL) {
            perror(csv_path);
            return 1;
        }
        fprintf(csv, "# host=%s cpu=\"%s\" cpus=%ld key_bits=%u min_time=%.2f\n",
                host, cpu, sysconf(_SC_NPROCESSORS_ONLN), key_bits, min_time);
        fprintf(csv, "backend,arch,size,lane_tag_gbs,record_seal_gbs,record_open_gbs,"
                     "stream_seal_gbs,stream_open_gbs,raw_seal_gbs,"
                     "record_seal_vs_raw\n");
    }

    for (b = 0; b < nbackends; ++b) {
        memset(&ctx, 0, sizeof(ctx));
        ctx.backend = backends[b];
        ctx.key_len = key_bits / 8;
        memset(ctx.raw_key, 0x42, sizeof(ctx.raw_key));
        if (crypt_aead_key_init(&ctx.key, ctx.backend, ctx.raw_key, ctx.key_len) !=
            CRYPT_AEAD_OK) {
            fprintf(stderr, "cannot init backend %s\n",
                    crypt_aead_backend_name(ctx.backend));
            return 1;
        }
        ctx.in  = aligned_alloc(64, sizes[nsizes - 1] + 64);
        ctx.out = aligned_alloc(64, sizes[nsizes - 1] + 64);
        memset(ctx.in, 0x17, sizes[nsizes - 1]);
#ifdef HAVE_IPSEC_MB
        ctx.imb = alloc_mb_mgr(0);
        init_mb_mgr_auto(ctx.imb, NULL);
        ctx.imb_key = aligned_alloc(64, sizeof(*ctx.imb_key));
        if (ctx.key_len == 16) {
            IMB_AES128_GCM_PRE(ctx.imb, ctx.raw_key, ctx.imb_key);
        } else {
            IMB_AES256_GCM_PRE(ctx.imb, ctx.raw_key, ctx.imb_key);
        }
#endif
        ctx.evp = EVP_CIPHER_CTX_new();
        EVP_EncryptInit_ex(ctx.evp, ctx.key_len == 16 ? EVP_aes_128_gcm() :
                                                        EVP_aes_256_gcm(),
                           NULL, ctx.raw_key, NULL);

        printf("\nbackend %s (%s)\n", crypt_aead_backend_name(ctx.backend),
               crypt_aead_backend_arch(ctx.backend));
        printf("%9s %12s %12s %12s %12s %12s %9s %12s\n", "size", "rec_seal", "rec_open",
               "strm_seal", "strm_open", "raw_seal", "ours/raw", "lane_tag");
        printf("%9s %12s %12s %12s %12s %12s %9s %12s\n", "", "GB/s", "GB/s", "GB/s",
               "GB/s", "GB/s", "", "GB/s");
        for (s = 0; s < nsizes; ++s) {
            double gbs[OP_LAST], ratio;
            for (op = 0; op < OP_LAST; ++op) {
                gbs[op] = measure(&ctx, (bench_op_t)op, sizes[s], min_time);
            }
            ratio = gbs[OP_RECORD_SEAL] / gbs[OP_RAW_SEAL];
            if ((sizes[s] >= 16384) && (ratio < 0.90)) {
                worst_ok = 0;
            }
            printf("%9zu %12.2f %12.2f %12.2f %12.2f %12.2f %9.3f %12.2f\n", sizes[s],
                   gbs[OP_RECORD_SEAL], gbs[OP_RECORD_OPEN], gbs[OP_STREAM_SEAL],
                   gbs[OP_STREAM_OPEN], gbs[OP_RAW_SEAL], ratio, gbs[OP_LANE_TAG]);
            if (csv != NULL) {
                fprintf(csv, "%s,%s,%zu,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n",
                        crypt_aead_backend_name(ctx.backend),
                        crypt_aead_backend_arch(ctx.backend), sizes[s], gbs[OP_LANE_TAG],
                        gbs[OP_RECORD_SEAL], gbs[OP_RECORD_OPEN], gbs[OP_STREAM_SEAL],
                        gbs[OP_STREAM_OPEN], gbs[OP_RAW_SEAL], ratio);
            }
            fflush(stdout);
        }
        crypt_aead_key_cleanup(&ctx.key);
        EVP_CIPHER_CTX_free(ctx.evp);
#ifdef HAVE_IPSEC_MB
        free(ctx.imb_key);
        free_mb_mgr(ctx.imb);
#endif
        free(ctx.in);
        free(ctx.out);
    }

    printf("\nframing overhead target (record seal >= 0.90 of raw from 16 KiB): %s\n",
           worst_ok ? "met" : "NOT met on this run (noisy machine? rerun)");
    if (csv != NULL) {
        fclose(csv);
        printf("CSV written to %s\n", csv_path);
    }
    return 0;
}
