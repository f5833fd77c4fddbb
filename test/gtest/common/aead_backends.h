/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Run a parameterized suite once per AES-GCM backend built in.
 */
#ifndef UCX_CRYPT_TEST_AEAD_BACKENDS_H
#define UCX_CRYPT_TEST_AEAD_BACKENDS_H

#include "ucx_crypt_config.h"
#include "aead/aead.h"

#include <gtest/gtest.h>
#include <string>

inline std::string
crypt_test_backend_name(const ::testing::TestParamInfo<crypt_aead_backend_t> &info)
{
    return info.param == CRYPT_AEAD_BACKEND_OPENSSL ? "openssl" : "ipsec_mb";
}

#ifdef HAVE_IPSEC_MB
#define CRYPT_TEST_BACKENDS \
    ::testing::Values(CRYPT_AEAD_BACKEND_IPSEC_MB, CRYPT_AEAD_BACKEND_OPENSSL)
#else
#define CRYPT_TEST_BACKENDS ::testing::Values(CRYPT_AEAD_BACKEND_OPENSSL)
#endif

#define CRYPT_TEST_ALL_BACKENDS(_suite) \
    INSTANTIATE_TEST_SUITE_P(backends, _suite, CRYPT_TEST_BACKENDS, \
                             crypt_test_backend_name)

#endif
