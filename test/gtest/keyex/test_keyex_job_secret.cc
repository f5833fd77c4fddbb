/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The job secret file: what is accepted, what is refused and with which
 * message, and what ucx-crypt-keygen writes.
 */
#include "ucx_crypt_config.h"
#include "keyex/keyex.h"
#include "common/test_util.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace {

class keyex_job_secret : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/ucx-crypt-test-XXXXXX";
        ASSERT_NE(nullptr, mkdtemp(tmpl));
        dir  = tmpl;
        path = dir + "/job.key";
        secret = (uint8_t*)keyex_secure_alloc(KEYEX_JOB_SECRET_LEN);
    }

    void TearDown() override
    {
        unlink(path.c_str());
        rmdir(dir.c_str());
        keyex_secure_free(secret, KEYEX_JOB_SECRET_LEN);
    }

    void write_file(size_t len, mode_t mode)
    {
        test_util::bytes data = test_util::pattern(len, 11);
        unlink(path.c_str());
        int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ((ssize_t)len, write(fd, data.data(), len));
        ASSERT_EQ(0, fchmod(fd, mode));
        close(fd);
    }

    keyex_status_t load()
    {
        return keyex_job_secret_load(path.c_str(), secret, error, sizeof(error));
    }

    std::string dir, path;
    uint8_t *secret;
    char error[KEYEX_ERROR_MAX] = "";
};

} // namespace

TEST_F(keyex_job_secret, loads_owner_only_32_byte_file)
{
    write_file(32, 0600);
    ASSERT_EQ(KEYEX_OK, load()) << error;
    EXPECT_EQ(test_util::pattern(32, 11), test_util::bytes(secret, secret + 32));
    write_file(32, 0400);
    EXPECT_EQ(KEYEX_OK, load()) << error;
}

TEST_F(keyex_job_secret, missing_file_says_how_to_create_one)
{
    EXPECT_EQ(KEYEX_ERR_NO_FILE, load());
    EXPECT_NE(nullptr, strstr(error, "ucx-crypt-keygen")) << error;
    EXPECT_NE(nullptr, strstr(error, path.c_str())) << error;
    EXPECT_EQ(KEYEX_ERR_NO_FILE, keyex_job_secret_load("", secret, error, sizeof(error)));
}

TEST_F(keyex_job_secret, group_or_world_access_is_refused_with_chmod_hint)
{
    for (mode_t mode : {0640, 0604, 0660, 0644, 0610}) {
        write_file(32, mode);
        EXPECT_EQ(KEYEX_ERR_PERMISSIONS, load()) << std::oct << mode;
        EXPECT_NE(nullptr, strstr(error, "chmod 600")) << error;
    }
}

TEST_F(keyex_job_secret, wrong_length_is_refused)
{
    for (size_t len : {0, 16, 31, 33, 64}) {
        write_file(len, 0600);
        EXPECT_EQ(KEYEX_ERR_FORMAT, load()) << len;
        EXPECT_NE(nullptr, strstr(error, "expected exactly 32")) << error;
    }
}

TEST_F(keyex_job_secret, directory_is_refused)
{
    EXPECT_EQ(KEYEX_ERR_FORMAT,
              keyex_job_secret_load(dir.c_str(), secret, error, sizeof(error)));
}

TEST_F(keyex_job_secret, foreign_owner_is_refused)
{
    if (geteuid() != 0) {
        GTEST_SKIP() << "needs root to give the file away";
    }
    write_file(32, 0600);
    ASSERT_EQ(0, chown(path.c_str(), 65534, 65534));
    EXPECT_EQ(KEYEX_ERR_PERMISSIONS, load());
    EXPECT_NE(nullptr, strstr(error, "uid 65534")) << error;
}

TEST_F(keyex_job_secret, keygen_writes_fresh_0600_secret_and_never_overwrites)
{
    struct stat st;
    ASSERT_EQ(KEYEX_OK, keyex_job_secret_generate(path.c_str(), error, sizeof(error)))
            << error;
    ASSERT_EQ(0, stat(path.c_str(), &st));
    EXPECT_EQ(0600u, st.st_mode & 07777);
    EXPECT_EQ(32, st.st_size);
    ASSERT_EQ(KEYEX_OK, load()) << error;
    test_util::bytes first(secret, secret + 32);
    EXPECT_NE(test_util::bytes(32, 0), first);

    EXPECT_EQ(KEYEX_ERR_EXISTS,
              keyex_job_secret_generate(path.c_str(), error, sizeof(error)));
    ASSERT_EQ(KEYEX_OK, load());
    EXPECT_EQ(first, test_util::bytes(secret, secret + 32)) << "file was overwritten";

    unlink(path.c_str());
    ASSERT_EQ(KEYEX_OK, keyex_job_secret_generate(path.c_str(), error, sizeof(error)));
    ASSERT_EQ(KEYEX_OK, load());
    EXPECT_NE(first, test_util::bytes(secret, secret + 32)) << "CSPRNG repeated";
}

TEST_F(keyex_job_secret, keygen_ignores_permissive_umask)
{
    mode_t old = umask(0);
    ASSERT_EQ(KEYEX_OK, keyex_job_secret_generate(path.c_str(), error, sizeof(error)));
    umask(old);
    struct stat st;
    ASSERT_EQ(0, stat(path.c_str(), &st));
    EXPECT_EQ(0600u, st.st_mode & 07777);
}
