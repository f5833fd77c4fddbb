/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Small helpers shared by the GoogleTest suites.
 */
#ifndef UCX_CRYPT_TEST_UTIL_H
#define UCX_CRYPT_TEST_UTIL_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <malloc.h>
#include <random>
#include <unistd.h>
#include <stdexcept>
#include <string>
#include <vector>

namespace test_util {

typedef std::vector<uint8_t> bytes;

inline bytes from_hex(const std::string &hex)
{
    bytes out;
    if (hex.size() % 2) {
        throw std::invalid_argument("odd hex length");
    }
    for (size_t i = 0; i < hex.size(); i += 2) {
        out.push_back((uint8_t)std::stoul(hex.substr(i, 2), nullptr, 16));
    }
    return out;
}

inline std::string to_hex(const uint8_t *data, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < len; ++i) {
        out += digits[data[i] >> 4];
        out += digits[data[i] & 15];
    }
    return out;
}

inline std::string to_hex(const bytes &data)
{
    return to_hex(data.data(), data.size());
}

/* Deterministic pseudo-random test data (seeded, so failures reproduce). */
inline bytes pattern(size_t len, uint32_t seed)
{
    std::mt19937 gen(seed);
    bytes out(len);
    for (auto &b : out) {
        b = (uint8_t)gen();
    }
    return out;
}

/* A test of the listeners under load runs where UCX_CRYPT_HANDSHAKE_RATE=0
 * puts them there (quickstart.sh's uct_under_load run); elsewhere there is
 * no load to show */
inline bool listeners_under_load()
{
    const char *rate = getenv("UCX_CRYPT_HANDSHAKE_RATE");
    return (rate != nullptr) && (std::string(rate) == "0");
}

/* Built with a sanitizer (ASan, TSan): its allocator keeps freed memory in
 * quarantine, so the process's memory does not show what it holds
 * (LeakSanitizer checks the ASan build instead); and everything runs
 * several times slower. */
extern "C" size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

inline bool under_sanitizer()
{
    return __sanitizer_get_current_allocated_bytes != nullptr;
}

/* how much longer a wall-clock limit (which only stops a hang) may be */
inline double slowdown()
{
    return under_sanitizer() ? 5.0 : 1.0;
}

/* The heap this process holds now: glibc's bytes in use (arena and mmap'd
 * chunks) */
inline size_t heap_in_use()
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* resident set size, which also sees memory mapped outside malloc */
inline size_t rss_bytes()
{
    unsigned long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != nullptr) {
        if (fscanf(f, "%lu %lu", &pages_total, &pages_resident) != 2) {
            pages_resident = 0;
        }
        fclose(f);
    }
    return pages_resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* file descriptors open in this process */
inline size_t open_fds()
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d != nullptr) {
        while (readdir(d) != nullptr) {
            ++n;
        }
        closedir(d);
    }
    return n;
}

} // namespace test_util

#endif
