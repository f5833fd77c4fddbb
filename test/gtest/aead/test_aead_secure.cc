/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ipsec-mb backend's expanded key schedule stays out of core dumps (the
 * kernel's "dd", MADV_DONTDUMP, flag): it is as secret as the key it came
 * from. (The secure allocator itself: test_keyex_schedule.cc.)
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
