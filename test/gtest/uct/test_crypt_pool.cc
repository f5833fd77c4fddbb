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
#include "uct_crypt/bulk/pool.h"
#include "common/aead_backends.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <fcntl.h>
#include <sched.h>
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
protected:
    /* exactly GetParam() threads, even on 2 PUs */
    void make_pool(crypt_pool_t **pool)
    {
        crypt_pool_params_t params = {};
        params.threads       = GetParam();
        params.oversubscribe = 1;
        char error[128];
        ASSERT_EQ(crypt_pool_create(&params, pool, error, sizeof(error)), 0) << error;
    }
};

TEST_P(crypt_pool_test, every_job_runs_once_on_a_valid_worker)
{
    crypt_pool_t *pool;
    ASSERT_NO_FATAL_FAILURE(make_pool(&pool));
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
    crypt_pool_t *pool;
    ASSERT_NO_FATAL_FAILURE(make_pool(&pool));
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

/* The submitter helps: a job no worker took yet runs on the caller, as
 * worker 0, once, and leaves the queue (its worker busy with a job that
 * waits); a job a worker already runs is left to it; the middle of the
 * queue can be taken too, and what stays behind still runs */
TEST_P(crypt_pool_test, the_submitter_runs_a_job_no_worker_took)
{
    crypt_pool_t *pool;
    ASSERT_NO_FATAL_FAILURE(make_pool(&pool));

    struct blocking_job {
        crypt_pool_job_t job;
        int              started = 0, release = 0;
    };
    std::vector<blocking_job> blockers(GetParam());
    for (auto &b : blockers) {
        b.job.run = [](crypt_pool_job_t *job, unsigned) {
            auto *b = reinterpret_cast<blocking_job*>(job);
            __atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
            while (!__atomic_load_n(&b->release, __ATOMIC_ACQUIRE)) {
                sched_yield();
            }
        };
        crypt_pool_submit(pool, &b.job);
    }
    for (auto &b : blockers) { /* every worker holds one */
        while (!__atomic_load_n(&b.started, __ATOMIC_ACQUIRE)) {
            sched_yield();
        }
        EXPECT_EQ(crypt_pool_run_here(pool, &b.job), 0) << "a worker runs it";
    }
    std::vector<counting_job> jobs(3);
    for (auto &j : jobs) {
        j.job.run = count_run;
        crypt_pool_submit(pool, &j.job);
    }
    ASSERT_EQ(crypt_pool_run_here(pool, &jobs[1].job), 1);
    EXPECT_EQ(jobs[1].runs, 1);
    EXPECT_EQ(jobs[1].worker, 0u);
    EXPECT_EQ(crypt_pool_run_here(pool, &jobs[1].job), 1) << "done: not again";
    EXPECT_EQ(jobs[1].runs, 1);
    for (auto &b : blockers) {
        __atomic_store_n(&b.release, 1, __ATOMIC_RELEASE);
    }
    for (auto &j : jobs) {
        while (!crypt_pool_job_done(&j.job)) {
            sched_yield();
        }
        EXPECT_EQ(j.runs, 1);
    }
    crypt_pool_destroy(pool);
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

/* A live claim in the registry: its line, and a lock on its slot's byte
 * (bulk/pool.c) held through a file description of our own, as another
 * process's pool holds it */
static int hold_claim(const std::string &path, unsigned slot, unsigned count)
{
    {
        std::ofstream f(path, std::ios::app);
        f << slot << " " << count << "\n";
    }
    int fd = open(path.c_str(), O_RDWR);
    struct flock lk = {};
    lk.l_type   = F_WRLCK;
    lk.l_whence = SEEK_SET;
    lk.l_start  = (1 << 20) + slot;
    lk.l_len    = 1;
    EXPECT_EQ(fcntl(fd, F_OFD_SETLK, &lk), 0);
    return fd;
}

static std::string file_of(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream content;
    content << in.rdbuf();
    return content.str();
}

TEST(crypt_pool_registry, other_processes_claims_leave_fewer_threads)
{
    std::string path = temp_registry();
    /* a live process claims all but one PU: nothing is left */
    int other = hold_claim(path, 0, online_pus() - 1);
    EXPECT_EQ(crypt_pool_threads_available(path.c_str(), 8), 0u);

    crypt_pool_params_t params = {};
    params.threads  = 8;
    params.registry = path.c_str();
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    EXPECT_EQ(crypt_pool_size(pool), 0u) << "must not oversubscribe the node";
    crypt_pool_destroy(pool);
    EXPECT_EQ(file_of(path), "0 " + std::to_string(online_pus() - 1) + "\n")
            << "the other's claim must stay, ours go";
    close(other);
    unlink(path.c_str());
}

TEST(crypt_pool_registry, dead_processes_are_pruned_and_we_leave_on_destroy)
{
    std::string path = temp_registry();
    /* a claim whose slot nobody holds: its process is gone */
    close(hold_claim(path, 0, 1000));
    unsigned expected = std::min(2u, online_pus() - 1);
    EXPECT_EQ(crypt_pool_threads_available(path.c_str(), 2), expected);

    crypt_pool_params_t params = {};
    params.threads  = 2;
    params.registry = path.c_str();
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    EXPECT_EQ(crypt_pool_size(pool), expected);
    /* the dead claim went; ours took its free slot */
    EXPECT_EQ(file_of(path), "0 " + std::to_string(1 + expected) + "\n");

    crypt_pool_destroy(pool);
    EXPECT_EQ(file_of(path), "") << "our claim stayed behind";
    unlink(path.c_str());
}

/* Two processes that share the registry but not a pid namespace (two
 * emulated hosts on one machine, containers sharing /dev/shm) count each
 * other. Each is pid 1 of its own namespace: by pid, the second took the
 * first's claim for its own old line and took the spare PUs too. */
TEST(crypt_pool_registry, processes_in_other_pid_namespaces_are_counted)
{
    if (online_pus() < 2) {
        GTEST_SKIP() << "one PU: nothing spare to share";
    }
    std::string path = temp_registry();
    int ready[2], done[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(done), 0);
    /* in a pid namespace of its own (pid 1 there), claim every spare PU
     * and hold the claim until told */
    auto in_own_pid_namespace = [&](int (*body)(const std::string&, int, int)) {
        pid_t child = fork();
        if (child == 0) {
            if (unshare(CLONE_NEWPID) != 0) {
                _exit(77);
            }
            pid_t inner = fork();
            if (inner == 0) {
                _exit(body(path, ready[1], done[0]));
            }
            int status = 0;
            waitpid(inner, &status, 0);
            _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 99);
        }
        return child;
    };
    pid_t first = in_own_pid_namespace([](const std::string &reg, int r, int d) {
        crypt_pool_params_t params = {};
        params.threads       = 64;
        params.registry      = reg.c_str();
        crypt_pool_t *pool;
        char error[128], byte = 1;
        if ((getpid() != 1) ||
            (crypt_pool_create(&params, &pool, error, sizeof(error)) != 0)) {
            return 2;
        }
        (void)!write(r, &byte, 1);
        (void)!read(d, &byte, 1);
        crypt_pool_destroy(pool);
        return 0;
    });
    char byte = 0;
    ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the first process did not start";
    pid_t second = in_own_pid_namespace([](const std::string &reg, int, int) {
        /* as pid 1 too: the first's claim is not ours */
        return (getpid() == 1) ?
               (int)crypt_pool_threads_available(reg.c_str(), 64) : 100;
    });
    int status = 0;
    waitpid(second, &status, 0);
    (void)!write(done[1], &byte, 1);
    int first_status = 0;
    waitpid(first, &first_status, 0);
    if (WIFEXITED(status) && (WEXITSTATUS(status) == 77)) {
        GTEST_SKIP() << "no pid namespaces here (needs root)";
    }
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
            << "the second process took PUs the first one claimed";
    EXPECT_TRUE(WIFEXITED(first_status) && (WEXITSTATUS(first_status) == 0));
    for (int fd : {ready[0], ready[1], done[0], done[1]}) {
        close(fd);
    }
    unlink(path.c_str());
}

/* A pool that took the node's spare PUs gives them back when another
 * process comes (its share: the PUs left once every process is counted,
 * split evenly), and takes them again when it goes: two ranks on two PUs
 * left the first one's thread running against both */
TEST(crypt_pool_registry, a_process_that_comes_later_gets_its_share)
{
    unsigned pus = online_pus();
    if (pus < 2) {
        GTEST_SKIP() << "one PU: nothing spare to share";
    }
    std::string path = temp_registry();
    crypt_pool_params_t params = {};
    params.threads  = pus - 1;
    params.registry = path.c_str();
    crypt_pool_t *pool;
    char error[128];
    ASSERT_EQ(crypt_pool_create(&params, &pool, error, sizeof(error)), 0) << error;
    ASSERT_EQ(crypt_pool_size(pool), pus - 1);
    EXPECT_EQ(crypt_pool_active(pool), pus - 1);

    int other = hold_claim(path, 1, 1); /* a second process, no threads */
    crypt_pool_review(pool, 1);
    unsigned share = (pus - 2) / 2;
    EXPECT_EQ(crypt_pool_active(pool), share);
    EXPECT_NE(file_of(path).find("0 " + std::to_string(1 + share) + "\n"),
              std::string::npos) << "our claim is not our share: " << file_of(path);
    counting_job job;
    job.job.run = count_run;
    crypt_pool_submit(pool, &job.job);
    if (share == 0) {
        EXPECT_TRUE(crypt_pool_job_done(&job.job)) << "no thread of ours may run";
        EXPECT_EQ(job.worker, 0u);
    }
    while (!crypt_pool_job_done(&job.job)) {
        sched_yield();
    }

    close(other); /* it went */
    crypt_pool_review(pool, 1);
    EXPECT_EQ(crypt_pool_active(pool), pus - 1);
    counting_job again;
    again.job.run = count_run;
    crypt_pool_submit(pool, &again.job);
    while (!crypt_pool_job_done(&again.job)) {
        sched_yield();
    }
    EXPECT_GE(again.worker, 1u) << "our threads did not come back";
    crypt_pool_destroy(pool);
    unlink(path.c_str());
}
