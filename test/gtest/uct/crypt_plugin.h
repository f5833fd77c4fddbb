/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The plugin under test, loaded as the launcher loads it, with a job
 * secret of its own. Shared by the UCT-level suites of gtest_uct.
 */
#ifndef UCX_CRYPT_TEST_CRYPT_PLUGIN_H
#define UCX_CRYPT_TEST_CRYPT_PLUGIN_H

#include <gtest/gtest.h>
#include <uct/api/uct.h>

#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

namespace crypt_plugin {

/* the job secret's file while a suite runs */
inline std::string &key_path()
{
    static std::string path;
    return path;
}

/* the loaded plugin (dlsym handle) */
inline void *&handle()
{
    static void *plugin = nullptr;
    return plugin;
}

/* The job secret, the same in every suite's key file: the plugin reads
 * the first one, once (a test that plays a job-secret holder takes it) */
inline std::vector<uint8_t> &job_secret()
{
    static std::vector<uint8_t> secret;
    return secret;
}

/* A job secret as a deployment has one (32 random bytes, mode 0600), the
 * inner tcp, and the plugin loaded before UCT is first queried: it
 * registers itself when it is loaded. Call with ASSERT_NO_FATAL_FAILURE
 * semantics: a failure here fails the suite's set-up. */
inline void load()
{
    char path[] = "/tmp/ucx-crypt-gtest-key.XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> &secret = job_secret();
    if (secret.empty()) {
        secret.resize(32);
        FILE *urandom = fopen("/dev/urandom", "rb");
        ASSERT_NE(urandom, nullptr);
        ASSERT_EQ(fread(secret.data(), 1, secret.size(), urandom), secret.size());
        fclose(urandom);
    }
    ASSERT_EQ(write(fd, secret.data(), secret.size()), (ssize_t)secret.size());
    fchmod(fd, 0600);
    close(fd);
    key_path() = path;
    setenv("UCX_CRYPT_KEY_FILE", path, 1);
    setenv("UCX_CRYPT_TLS", "tcp", 1);

    if (handle() == nullptr) {
        handle() = dlopen(UCT_CRYPT_PLUGIN, RTLD_NOW | RTLD_GLOBAL);
        ASSERT_NE(handle(), nullptr) << dlerror();
    }
}

/* the key file goes; the plugin stays loaded: UCX keeps pointers into it */
inline void unload_key()
{
    unlink(key_path().c_str());
}

/* crypt's component (its md over the inner and its connection manager) */
inline uct_component_h component(uint64_t need_flags = 0)
{
    uct_component_h *components, found = nullptr;
    unsigned count;
    if (uct_query_components(&components, &count) != UCS_OK) {
        return nullptr;
    }
    for (unsigned i = 0; i < count; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                          UCT_COMPONENT_ATTR_FIELD_FLAGS;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            !strcmp(attr.name, "crypt") &&
            ((attr.flags & need_flags) == need_flags)) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

/* A suite of tests that use the plugin: loaded once for all of them */
class suite : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        load();
    }

    static void TearDownTestSuite()
    {
        unload_key();
    }
};

/* A crypt iface on `dev` with the default settings, as UCP opens one in a
 * worker: the connection manager answers only on a device where its
 * worker has one (it sends that iface's device address) */
inline void open_iface(uct_worker_h worker, const char *dev, uct_md_h *md,
                       uct_iface_h *iface)
{
    uct_component_h crypt = component();
    ASSERT_NE(crypt, nullptr);
    uct_md_config_t *md_config;
    ASSERT_EQ(uct_md_config_read(crypt, NULL, NULL, &md_config), UCS_OK);
    ucs_status_t status = uct_md_open(crypt, "tcp", md_config, md);
    uct_config_release(md_config);
    ASSERT_EQ(status, UCS_OK);

    uct_iface_config_t *config;
    ASSERT_EQ(uct_md_iface_config_read(*md, "crypt", NULL, NULL, &config), UCS_OK);
    uct_iface_params_t params = {};
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "crypt";
    params.mode.device.dev_name = dev;
    status = uct_iface_open(*md, worker, &params, config, iface);
    uct_config_release(config);
    ASSERT_EQ(status, UCS_OK);
}

/* The TCP sockets of this process that are connected, by fd: a test
 * takes the ones that were not there before it connected */
inline std::set<int> connected_tcp_sockets()
{
    std::set<int> fds;
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *entry;
    while ((dir != nullptr) && ((entry = readdir(dir)) != nullptr)) {
        int fd = atoi(entry->d_name), type = 0;
        socklen_t len = sizeof(type);
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        if ((entry->d_name[0] != '.') && (fd != dirfd(dir)) &&
            (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0) &&
            (type == SOCK_STREAM) &&
            (getpeername(fd, (struct sockaddr*)&peer, &peer_len) == 0)) {
            fds.insert(fd);
        }
    }
    if (dir != nullptr) {
        closedir(dir);
    }
    return fds;
}

/* `fd`'s TCP keepalive: off, or on with these seconds and count */
inline void expect_keepalive(int fd, int on, int idle, int cnt, int intvl)
{
    int value = -1;
    socklen_t len = sizeof(value);
    ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &value, &len), 0);
    EXPECT_EQ(value, on) << "SO_KEEPALIVE of fd " << fd;
    if (!on) {
        return;
    }
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &value, &len), 0);
    EXPECT_EQ(value, idle) << "TCP_KEEPIDLE of fd " << fd;
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &value, &len), 0);
    EXPECT_EQ(value, cnt) << "TCP_KEEPCNT of fd " << fd;
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &value, &len), 0);
    EXPECT_EQ(value, intvl) << "TCP_KEEPINTVL of fd " << fd;
}

} // namespace crypt_plugin

#endif
