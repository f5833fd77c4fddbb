/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Small helpers shared by the GoogleTest suites.
 */
#ifndef UCX_CRYPT_TEST_UTIL_H
#define UCX_CRYPT_TEST_UTIL_H

#include <cstdint>
#include <random>
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

} // namespace test_util

#endif
