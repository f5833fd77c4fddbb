/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Secrets stay out of core dumps: the secure allocator's pages carry the
 * kernel's "dd" (MADV_DONTDUMP) flag, and so does the ipsec-mb backend's
 * expanded key schedule, which is as secret as the key it came from.
 */
#include "ucx_crypt_config.h"
#include "aead/aead.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

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

} // namespace

TEST(crypt_secure_alloc, pages_are_excluded_from_core_dumps_and_zeroed)
{
    auto *p = static_cast<uint8_t*>(crypt_secure_alloc(100));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(excluded_from_dumps(p)) << vm_flags_of(p);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(p[i], 0);
    crypt_secure_free(p, 100);

    int on_heap = 0;
    EXPECT_FALSE(excluded_from_dumps(&on_heap)) << "the check tells them apart";
}

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
        crypt_aead_key_cleanup(&key);
    }
}
#endif
