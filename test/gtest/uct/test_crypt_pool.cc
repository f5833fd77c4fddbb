/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine's worker pool: every job runs exactly once, on a worker
 * index the caller can use for per-thread state; destroy drains the queue;
 * the per-node registry shares spare PUs between processes (CryptMPI's
 * min(T0 - T1, t)). Built twice: in gtest_core, and with ThreadSanitizer in
 * gtest_pool_tsan together with real sealing jobs (per-thread keys).
 */
#include <gtest/gtest.h>

#include "aead/aead.h"
#include "uct_crypt/crypt_pool.h"
#include "common/aead_backends.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct counting_job {
    crypt_pool_job_t job;
    int              runs   = 0;
    unsigned         worker = 0;
};

void count_run(crypt_pool_job_t *job, unsigned worker)
{
    counting_job *j = reinterpret_cast<counting_job*>(job); /* job is first */
    j->runs++;
    j->worker = worker;
}

unsigned online_pus()
{
    return (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
}

std::string temp_registry()
{
    char path[] = "/tmp/ucx-crypt-registry.XXXXXX";
    int fd      = mkstemp(path);
    close(fd);
    return path;
}

} // namespace

class crypt_pool_test : public ::testing::TestWithParam<unsigned> {
};

TEST_P(crypt_pool_test, every_job_runs_once_on_a_valid_worker)
{
    crypt_pool_params_t params = {};
    params.threads       = GetParam();
    params.oversubscribe = 1; /* exactly this many, even on 2 PUs */
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    ASSERT_EQ(crypt_pool_size(pool), GetParam());

    std::vector<counting_job> jobs(5000);
    for (auto &j : jobs) {
        j.job.run = count_run;
        crypt_pool_submit(pool, &j.job);
    }
    for (auto &j : jobs) {
        while (!crypt_pool_job_done(&j.job)) {
        }
        ASSERT_EQ(j.runs, 1);
        if (GetParam() == 0) {
            ASSERT_EQ(j.worker, 0u);
        } else {
            ASSERT_GE(j.worker, 1u);
            ASSERT_LE(j.worker, GetParam());
        }
    }
    crypt_pool_destroy(pool);
}

TEST_P(crypt_pool_test, destroy_runs_what_is_still_queued)
{
    crypt_pool_params_t params = {};
    params.threads       = GetParam();
    params.oversubscribe = 1;
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    std::vector<counting_job> jobs(2000);
    for (auto &j : jobs) {
        j.job.run = count_run;
        crypt_pool_submit(pool, &j.job);
    }
    crypt_pool_destroy(pool);
    for (auto &j : jobs) {
        ASSERT_TRUE(crypt_pool_job_done(&j.job));
        ASSERT_EQ(j.runs, 1);
    }
}

INSTANTIATE_TEST_SUITE_P(threads, crypt_pool_test, ::testing::Values(0u, 1u, 2u, 4u, 8u));

/* ---- real sealing in parallel: per-worker keys, one output per job ------ */

namespace {
struct seal_job {
    crypt_pool_job_t                     job;
    std::vector<std::unique_ptr<crypt_aead_key_t>> *keys;
    crypt_aead_backend_t                 backend;
    const uint8_t                        *raw_key;
    const uint8_t                        *in;
    size_t                               len;
    uint32_t                             index;
    std::vector<uint8_t>                 out;
    uint8_t                              tag[CRYPT_AEAD_TAG_LEN];
    crypt_aead_status_t                  status;
};

void seal_run(crypt_pool_job_t *job, unsigned worker)
{
    seal_job *j = reinterpret_cast<seal_job*>(job);
    crypt_aead_key_t *key = (*j->keys)[worker].get();
    static const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {1, 2, 3, 4, 5, 6, 7};
    if (key->impl == nullptr) { /* lazily, by the worker that owns it */
        crypt_aead_key_init(key, j->backend, j->raw_key, 16);
    }
    j->out.resize(j->len);
    j->status = crypt_stream_seal_segment(key, prefix, j->index, 0, nullptr, 0, j->in,
                                          j->len, j->out.data(), j->tag);
}
} // namespace

class crypt_pool_seal_test : public ::testing::TestWithParam<crypt_aead_backend_t> {
};

TEST_P(crypt_pool_seal_test, parallel_segments_equal_sequential_ones)
{
    const unsigned threads = 4;
    crypt_aead_backend_t backend = GetParam();
    ASSERT_EQ(crypt_aead_init(backend), CRYPT_AEAD_OK);
    uint8_t raw[16];
    for (unsigned i = 0; i < sizeof(raw); ++i) raw[i] = (uint8_t)(i * 17 + 3);
    std::vector<uint8_t> data(64 * 4096);
    for (size_t i = 0; i < data.size(); ++i) data[i] = (uint8_t)(i * 31 + (i >> 9));

    std::vector<std::unique_ptr<crypt_aead_key_t>> keys;
    for (unsigned w = 0; w <= threads; ++w) {
        keys.emplace_back(new crypt_aead_key_t());
    }
    crypt_pool_params_t params = {};
    params.threads       = threads;
    params.oversubscribe = 1;
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;

    std::vector<seal_job> jobs(64);
    for (uint32_t i = 0; i < jobs.size(); ++i) {
        jobs[i].job.run = seal_run;
        jobs[i].keys    = &keys;
        jobs[i].backend = backend;
        jobs[i].raw_key = raw;
        jobs[i].in      = data.data() + i * 4096;
        jobs[i].len     = 4096;
        jobs[i].index   = i;
        crypt_pool_submit(pool, &jobs[i].job);
    }
    crypt_pool_destroy(pool);

    crypt_aead_key_t seq_key = {};
    ASSERT_EQ(crypt_aead_key_init(&seq_key, backend, raw, 16), CRYPT_AEAD_OK);
    static const uint8_t prefix[CRYPT_STREAM_NONCE_PREFIX_LEN] = {1, 2, 3, 4, 5, 6, 7};
    for (auto &j : jobs) {
        ASSERT_EQ(j.status, CRYPT_AEAD_OK);
        std::vector<uint8_t> out(j.len);
        uint8_t tag[CRYPT_AEAD_TAG_LEN];
        ASSERT_EQ(crypt_stream_seal_segment(&seq_key, prefix, j.index, 0, nullptr, 0, j.in,
                                            j.len, out.data(), tag), CRYPT_AEAD_OK);
        ASSERT_EQ(out, j.out) << "segment " << j.index;
        ASSERT_EQ(0, memcmp(tag, j.tag, sizeof(tag)));
    }
    crypt_aead_key_cleanup(&seq_key);
    for (auto &k : keys) {
        crypt_aead_key_cleanup(k.get());
    }
}

CRYPT_TEST_ALL_BACKENDS(crypt_pool_seal_test);

/* ---- per-node registry: min(T0 - T1, t) ------------------------------------ */

TEST(crypt_pool_registry, other_processes_claims_leave_fewer_threads)
{
    std::string path = temp_registry();
    /* a live process (our parent) claims all but one PU: nothing is left */
    {
        std::ofstream f(path);
        f << getppid() << " " << (online_pus() - 1) << "\n";
    }
    EXPECT_EQ(crypt_pool_threads_available(path.c_str(), 8), 0u);

    crypt_pool_params_t params = {};
    params.threads  = 8;
    params.registry = path.c_str();
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    EXPECT_EQ(crypt_pool_size(pool), 0u) << "must not oversubscribe the node";
    crypt_pool_destroy(pool);
    unlink(path.c_str());
}

TEST(crypt_pool_registry, dead_processes_are_pruned_and_we_leave_on_destroy)
{
    std::string path = temp_registry();
    pid_t child = fork();
    if (child == 0) {
        _exit(0);
    }
    waitpid(child, nullptr, 0); /* now certainly dead */
    {
        std::ofstream f(path);
        f << child << " " << 1000 << "\n";
    }
    unsigned expected = std::min(2u, online_pus() - 1);
    EXPECT_EQ(crypt_pool_threads_available(path.c_str(), 2), expected);

    crypt_pool_params_t params = {};
    params.threads  = 2;
    params.registry = path.c_str();
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    EXPECT_EQ(crypt_pool_size(pool), expected);

    std::ifstream in(path);
    std::stringstream content;
    content << in.rdbuf();
    EXPECT_EQ(content.str().find(std::to_string(child) + " "), std::string::npos)
            << "dead pid kept: " << content.str();
    EXPECT_NE(content.str().find(std::to_string(getpid()) + " " +
                                 std::to_string(1 + expected)), std::string::npos)
            << content.str();

    crypt_pool_destroy(pool);
    std::ifstream after(path);
    std::stringstream rest;
    rest << after.rdbuf();
    EXPECT_EQ(rest.str(), "") << "our claim stayed behind";
    unlink(path.c_str());
}
