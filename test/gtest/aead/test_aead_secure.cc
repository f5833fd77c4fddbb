/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ipsec-mb backend's expanded key schedule stays out of core dumps (the
 * kernel's "dd", MADV_DONTDUMP, flag): it is as secret as the key it came
 * from. The secure allocator's chunks and pages (more of it:
 * test_keyex_schedule.cc).
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

/* The VmFlags of the mapping that holds `addr` (/proc/self/smaps) */
std::string vm_flags_of(const void *addr)
{
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    bool inside = false;

    while (std::getline(smaps, line)) {
        unsigned long start, end;
        if ((sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) &&
            (line.find(':') > line.find(' '))) {
            inside = (a >= start) && (a < end);
        } else if (inside && (line.rfind("VmFlags:", 0) == 0)) {
            return line.substr(8) + " ";
        }
    }
    return "";
}

bool excluded_from_dumps(const void *addr)
{
    return vm_flags_of(addr).find(" dd ") != std::string::npos;
}

int on_heap = 0;

} // namespace

#ifdef HAVE_IPSEC_MB
TEST(crypt_aead_key, ipsec_mb_key_schedule_is_excluded_from_core_dumps)
{
    const uint8_t raw[32] = {1, 2, 3};
    crypt_aead_key_t key;

    ASSERT_EQ(crypt_aead_init(CRYPT_AEAD_BACKEND_IPSEC_MB), CRYPT_AEAD_OK);
    for (size_t len : {size_t(16), size_t(32)}) {
        ASSERT_EQ(crypt_aead_key_init(&key, CRYPT_AEAD_BACKEND_IPSEC_MB, raw, len),
                  CRYPT_AEAD_OK);
        EXPECT_TRUE(excluded_from_dumps(key.impl)) << vm_flags_of(key.impl);
        EXPECT_FALSE(excluded_from_dumps(&on_heap)) << "the check tells them apart";
        crypt_aead_key_cleanup(&key);
    }
}
#endif

namespace {

bool mapped(const void *page)
{
    /* msync on an address range that is not mapped fails with ENOMEM */
    return msync(const_cast<void*>(page), 1, MS_ASYNC) == 0;
}

} // namespace

/* Small secrets share pages: a chunk of a power-of-two size, aligned to
 * it, zero-filled, out of core dumps; freed, it is wiped, and its page
 * goes back to the kernel with the page's last chunk */
TEST(crypt_secure_mem, small_secrets_share_pages_that_go_back_when_empty)
{
    const size_t size = 100, chunk = 128;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t per_page = page / chunk - 1; /* the first holds the page's header */
    std::map<uintptr_t, std::vector<uint8_t*>> by_page;
    std::vector<uint8_t*> all;

    for (size_t i = 0; i < 3 * per_page; ++i) {
        uint8_t *p = static_cast<uint8_t*>(crypt_secure_alloc(size));
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % chunk, 0u);
        EXPECT_EQ(std::vector<uint8_t>(p, p + size), std::vector<uint8_t>(size, 0));
        memset(p, 0x5a, size);
        by_page[reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)(page - 1)].push_back(p);
        all.push_back(p);
    }
    EXPECT_LE(by_page.size(), 4u) << "chunks of one size share pages";
    EXPECT_TRUE(excluded_from_dumps(all[0])) << vm_flags_of(all[0]);

    /* a page whose chunks are all ours */
    auto full = std::find_if(by_page.begin(), by_page.end(),
                             [&](const std::pair<const uintptr_t, std::vector<uint8_t*>> &e) {
                                 return e.second.size() == per_page; });
    ASSERT_NE(full, by_page.end());
    std::vector<uint8_t*> mine = full->second;
    const void *its_page = reinterpret_cast<const void*>(full->first);
    for (size_t i = 0; i + 1 < mine.size(); ++i) {
        crypt_secure_free(mine[i], size);
        /* wiped, all of it (no link inside a free chunk) */
        EXPECT_EQ(std::vector<uint8_t>(mine[i], mine[i] + chunk),
                  std::vector<uint8_t>(chunk, 0)) << "chunk " << i;
    }
    EXPECT_TRUE(mapped(its_page)) << "one chunk still in use";
    crypt_secure_free(mine.back(), size);
    EXPECT_FALSE(mapped(its_page)) << "its last chunk freed, the page went back";

    for (uint8_t *p : all) {
        if (std::find(mine.begin(), mine.end(), p) == mine.end()) {
            crypt_secure_free(p, size);
        }
    }
}

/* Over 1024 bytes a secret has pages of its own (as ipsec-mb's key
 * schedule had before it fit a chunk) */
TEST(crypt_secure_mem, a_large_secret_has_pages_of_its_own)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p = static_cast<uint8_t*>(crypt_secure_alloc(page + 1));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % page, 0u);
    EXPECT_EQ(std::vector<uint8_t>(p, p + page + 1), std::vector<uint8_t>(page + 1, 0));
    EXPECT_TRUE(excluded_from_dumps(p)) << vm_flags_of(p);
    crypt_secure_free(p, page + 1);
    EXPECT_FALSE(mapped(p));
}

/* A free that names no chunk handed out, of another size class than its
 * allocation, or twice, would let two flows share one key's memory or
 * wipe a neighbour's secret: the process ends there (crypto review N5) */
TEST(crypt_secure_mem_death, a_free_of_another_size_or_twice_aborts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    uint8_t *p = static_cast<uint8_t*>(crypt_secure_alloc(100));
    uint8_t *q = static_cast<uint8_t*>(crypt_secure_alloc(100));
    ASSERT_NE(p, nullptr);
    ASSERT_NE(q, nullptr);
    EXPECT_DEATH(crypt_secure_free(p, 1000), "another size");
    EXPECT_DEATH(crypt_secure_free(p + 64, 100), "not in use");
    EXPECT_DEATH({ crypt_secure_free(q, 100); crypt_secure_free(q, 100); },
                 "not in use");
    crypt_secure_free(q, 100);
    crypt_secure_free(p, 100);
}

/* A forked child gets no secret of its parent (MADV_WIPEONFORK: the pages
 * are zero there, "wf" in smaps), can free what it inherited and allocate
 * anew; and a fork while another thread allocates (a pool thread making a
 * flow's keys) never leaves the child waiting for the allocator's lock */
TEST(crypt_secure_mem, a_forked_child_gets_no_secret_and_never_waits)
{
    uint8_t *p = static_cast<uint8_t*>(crypt_secure_alloc(100));
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, 100);
    EXPECT_NE(vm_flags_of(p).find(" wf "), std::string::npos) << vm_flags_of(p);

    std::atomic<bool> stop{false};
    pthread_t busy;
    auto churn = [](void *arg) -> void* {
        auto stop = static_cast<std::atomic<bool>*>(arg);
        while (!stop->load()) {
            void *x = crypt_secure_alloc(200);
            crypt_secure_free(x, 200);
        }
        return nullptr;
    };
    ASSERT_EQ(pthread_create(&busy, nullptr, churn, &stop), 0);
    int hung = 0, leaked = 0, failed = 0;
    for (int i = 0; i < 200; ++i) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10); /* a child that waits for the lock dies of SIGALRM */
            int seen = (p[0] == 0x5a);
            crypt_secure_free(p, 100);
            void *x = crypt_secure_alloc(300);
            _exit((x == nullptr) ? 3 : seen ? 2 : 0);
        }
        ASSERT_GT(pid, 0);
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGALRM)) {
            ++hung;
        } else if (WIFEXITED(status) && (WEXITSTATUS(status) == 2)) {
            ++leaked;
        } else if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0)) {
            ++failed;
        }
    }
    stop = true;
    pthread_join(busy, nullptr);
    EXPECT_EQ(hung, 0) << "children that waited for the allocator's lock";
    EXPECT_EQ(leaked, 0) << "children that read their parent's secret";
    EXPECT_EQ(failed, 0);
    EXPECT_EQ(p[0], 0x5a) << "the parent's secret stays the parent's";
    crypt_secure_free(p, 100);
}
