/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the UCT-level tests of the crypt transport share: two crypt ifaces
 * in one process (over crypt's own wire on loopback, or UCX's tcp standing
 * in for an RDMA inner), driven through the public UCT API the way UCP
 * drives it, with the plugin loaded the way the launcher loads it.
 * test_uct_crypt.cc (the transport), test_crypt_flows.cc (flows over a
 * UCX inner), test_crypt_wire.cc (crypt's own wire), crypt_bulk_test.h
 * (the bulk engine), test_crypt_lane.cc (the collective lane) build on it.
 */
#ifndef UCX_CRYPT_TEST_GTEST_UCT_CRYPT_TEST_H
#define UCX_CRYPT_TEST_GTEST_UCT_CRYPT_TEST_H

#include <gtest/gtest.h>

#include <uct/api/uct.h>
#include <uct/api/version.h>
#include "uct_crypt/api/uct_crypt_stats.h"
#include "uct_crypt/base/format.h" /* the attacker parses the capture */
#include "keyex/noise.h"
#include "common/test_util.h"
#include "uct/crypt_plugin.h"
#include <ucs/async/async_fwd.h>
#include <ucs/sys/compiler_def.h>

#include <dlfcn.h>
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace uct_crypt_testing {

const uint8_t kAmId = 7;

struct received_message {
    uint64_t             header; /* first 8 bytes (am_short's header) */
    std::vector<uint8_t> payload;
};

/* one side: md, iface, what its AM handler received, what its error
 * handler saw */
struct side {
    uct_md_h                      md      = nullptr;
    uct_iface_h                   iface   = nullptr;
    uct_iface_attr_t              attr    = {};
    std::vector<received_message> received;
    std::vector<uct_ep_h>         failed_eps;
    std::function<void()>         on_am;  /* runs as each AM is delivered */
};

inline ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    side *s = static_cast<side*>(arg);
    received_message msg;
    msg.header = 0;
    if (length >= sizeof(uint64_t)) {
        memcpy(&msg.header, data, sizeof(uint64_t));
        msg.payload.assign((uint8_t*)data + sizeof(uint64_t), (uint8_t*)data + length);
    } else {
        msg.payload.assign((uint8_t*)data, (uint8_t*)data + length);
    }
    s->received.push_back(std::move(msg));
    if (s->on_am) {
        s->on_am();
    }
    return UCS_OK;
}

inline ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    static_cast<side*>(arg)->failed_eps.push_back(ep);
    return UCS_OK;
}

/* a wall-clock limit for progress loops: a test fails, it never hangs */
struct deadline {
    explicit deadline(double seconds) :
        end(std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds * test_util::slowdown()))) {}
    bool passed() const { return std::chrono::steady_clock::now() > end; }
    std::chrono::steady_clock::time_point end;
};

/* payload byte i of message `seq`: position and message dependent */
inline uint8_t pattern(uint64_t seq, size_t i)
{
    return (uint8_t)(seq * 131 + i * 7 + (i >> 8));
}

/* A crypt iface option by its name in the table ("BULK"): UCX 1.17 and
 * later match the table's prefix with it ("CRYPT_BULK"), earlier ones the
 * bare name */
inline ucs_status_t config_modify(void *config, const std::string &name,
                           const std::string &value)
{
    ucs_status_t status = uct_config_modify(config, name.c_str(), value.c_str());
    if (status == UCS_ERR_NO_ELEM) {
        status = uct_config_modify(config, ("CRYPT_" + name).c_str(), value.c_str());
    }
    return status;
}

inline std::vector<uint8_t> make_payload(uint64_t seq, size_t len)
{
    std::vector<uint8_t> p(len);
    for (size_t i = 0; i < len; ++i) {
        p[i] = pattern(seq, i);
    }
    return p;
}

struct bcopy_arg {
    uint64_t                    header;
    const std::vector<uint8_t> *payload;
};

inline size_t pack_bcopy(void *dest, void *arg)
{
    bcopy_arg *a = static_cast<bcopy_arg*>(arg);
    memcpy(dest, &a->header, sizeof(a->header));
    if (!a->payload->empty()) {
        memcpy((uint8_t*)dest + sizeof(a->header), a->payload->data(), a->payload->size());
    }
    return sizeof(a->header) + a->payload->size();
}

void completion_cb(uct_completion_t *self);

struct completion {
    uct_completion_t super;
    int              done = 0;
    ucs_status_t     status = UCS_OK;

    completion()
    {
        super.func   = completion_cb;
        super.count  = 1;
        super.status = UCS_OK;
    }
};

inline void completion_cb(uct_completion_t *self)
{
    completion *c = ucs_container_of(self, completion, super);
    c->done   = 1;
    c->status = self->status;
}

} // namespace

using namespace uct_crypt_testing;

namespace uct_crypt_testing {
typedef void (*stats_read_t)(uct_crypt_stats_t*);
}

class uct_crypt_test : public crypt_plugin::suite {
protected:
    void SetUp() override
    {
        ASSERT_EQ(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), UCS_OK);
        ASSERT_EQ(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), UCS_OK);
        find_crypt_resource();
    }

    void destroy_eps()
    {
        for (uct_ep_h ep : eps) {
            uct_ep_destroy(ep);
        }
        eps.clear();
    }

    /* (its eps first: an iface closes with none left) */
    void close_side(side &s)
    {
        for (auto it = eps.begin(); it != eps.end();) {
            if ((s.iface != nullptr) && ((*it)->iface == s.iface)) {
                uct_ep_destroy(*it);
                it = eps.erase(it);
            } else {
                ++it;
            }
        }
        if (s.iface) {
            uct_iface_close(s.iface);
        }
        if (s.md) {
            uct_md_close(s.md);
        }
        s = side();
    }

    void TearDown() override
    {
        destroy_eps();
        close_side(a);
        close_side(b);
        uct_worker_destroy(worker);
        ucs_async_context_destroy(async);
    }

    /* the crypt md wrapping tcp, and its loopback device */
    void find_crypt_resource()
    {
        uct_component_h *components;
        unsigned count;
        ASSERT_EQ(uct_query_components(&components, &count), UCS_OK);
        for (unsigned i = 0; i < count; ++i) {
            uct_component_attr_t attr = {};
            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                              UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
            ASSERT_EQ(uct_component_query(components[i], &attr), UCS_OK);
            EXPECT_STRNE(attr.name, "tcp") << "plaintext tcp still visible";
            if (strcmp(attr.name, "crypt") != 0) {
                continue;
            }
            std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
            attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
            attr.md_resources = mds.data();
            ASSERT_EQ(uct_component_query(components[i], &attr), UCS_OK);
            for (auto &md : mds) {
                if (std::string(md.md_name) == "tcp") {
                    component = components[i];
                    md_name   = md.md_name;
                }
            }
        }
        uct_release_component_list(components);
        ASSERT_NE(component, nullptr) << "no crypt md wrapping tcp";
    }

    typedef std::vector<std::pair<std::string, std::string>> settings_t;

    void open_side(side &s, const char *fault = nullptr, const char *fault_after = nullptr)
    {
        settings_t settings;
        if (fault) {
            settings.emplace_back("FAULT", fault);
            settings.emplace_back("FAULT_AFTER", fault_after);
        }
        open_side_with(s, settings);
    }

    void open_side_with(side &s, const settings_t &settings)
    {
        uct_md_config_t *md_config;
        ASSERT_EQ(uct_md_config_read(component, NULL, NULL, &md_config), UCS_OK);
        ASSERT_EQ(uct_md_open(component, md_name.c_str(), md_config, &s.md), UCS_OK);
        uct_config_release(md_config);

        uct_tl_resource_desc_t *resources;
        unsigned count;
        std::string dev;
        ASSERT_EQ(uct_md_query_tl_resources(s.md, &resources, &count), UCS_OK);
        for (unsigned i = 0; i < count; ++i) {
            EXPECT_STREQ(resources[i].tl_name, "crypt");
            if (dev.empty() || !strcmp(resources[i].dev_name, "lo")) {
                dev = resources[i].dev_name;
            }
        }
        uct_release_tl_resource_list(resources);
        ASSERT_FALSE(dev.empty());

        uct_iface_config_t *config;
        ASSERT_EQ(uct_md_iface_config_read(s.md, "crypt", NULL, NULL, &config), UCS_OK);
        settings_t all = base_settings;
        all.insert(all.end(), settings.begin(), settings.end());
        for (auto &kv : all) {
            ASSERT_EQ(config_modify(config, kv.first, kv.second), UCS_OK)
                    << kv.first;
        }
        uct_iface_params_t params = {};
        params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                            UCT_IFACE_PARAM_FIELD_DEVICE |
                            UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                            UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                            UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.open_mode                  = UCT_IFACE_OPEN_MODE_DEVICE;
        params.mode.device.tl_name        = "crypt";
        params.mode.device.dev_name       = dev.c_str();
        params.err_handler                = err_handler;
        params.err_handler_arg            = &s;
        params.err_handler_flags          = 0;
        ucs_status_t status = uct_iface_open(s.md, worker, &params, config, &s.iface);
        uct_config_release(config);
        ASSERT_EQ(status, UCS_OK);
        ASSERT_EQ(uct_iface_query(s.iface, &s.attr), UCS_OK);
        ASSERT_EQ(uct_iface_set_am_handler(s.iface, kAmId, am_handler, &s, 0), UCS_OK);
        uct_iface_progress_enable(s.iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    }

    uct_ep_h connect(side &from, side &to)
    {
        std::vector<uint8_t> dev_addr(to.attr.device_addr_len),
                             iface_addr(to.attr.iface_addr_len);
        EXPECT_TRUE(to.attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE);
        EXPECT_EQ(uct_iface_get_device_address(to.iface, (uct_device_addr_t*)dev_addr.data()), UCS_OK);
        EXPECT_EQ(uct_iface_get_address(to.iface, (uct_iface_addr_t*)iface_addr.data()), UCS_OK);
        EXPECT_TRUE(uct_iface_is_reachable(from.iface, (uct_device_addr_t*)dev_addr.data(),
                                           (uct_iface_addr_t*)iface_addr.data()));
        uct_ep_params_t params = {};
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                            UCT_EP_PARAM_FIELD_IFACE_ADDR;
        params.iface      = from.iface;
        params.dev_addr   = (uct_device_addr_t*)dev_addr.data();
        params.iface_addr = (uct_iface_addr_t*)iface_addr.data();
        uct_ep_h ep = nullptr;
        EXPECT_EQ(uct_ep_create(&params, &ep), UCS_OK);
        eps.push_back(ep);
        return ep;
    }

    void open_pair(const settings_t &settings_a = {}, const settings_t &settings_b = {})
    {
        open_side_with(a, settings_a);
        open_side_with(b, settings_b);
        ab = connect(a, b);
        ba = connect(b, a);
    }

    /* a pair whose connection is up both ways: one message each way */
    void open_pair_and_exchange_one_each_way()
    {
        open_pair();
        auto payload = make_payload(1, 64);
        send_retrying([&] { return uct_ep_am_short(ab, kAmId, 1, payload.data(), 64); });
        progress_until([&] { return b.received.size() == 1u; });
        send_retrying([&] { return uct_ep_am_short(ba, kAmId, 1, payload.data(), 64); });
        progress_until([&] { return a.received.size() == 1u; });
    }

    /* the device and iface addresses UCP would send of `s` */
    void addresses_of(side &s, std::vector<uint8_t> &dev, std::vector<uint8_t> &iface)
    {
        dev.resize(s.attr.device_addr_len);
        iface.resize(s.attr.iface_addr_len);
        ASSERT_EQ(uct_iface_get_device_address(s.iface, (uct_device_addr_t*)dev.data()),
                  UCS_OK);
        ASSERT_EQ(uct_iface_get_address(s.iface, (uct_iface_addr_t*)iface.data()), UCS_OK);
    }

    void progress_until(const std::function<bool()> &done, double seconds = 20)
    {
        deadline limit(seconds);
        while (!done() && !limit.passed()) {
            uct_worker_progress(worker);
        }
        ASSERT_TRUE(done()) << "timed out";
    }

    /* retry while the inner has no room, progressing meanwhile */
    template <typename Send> void send_retrying(Send send)
    {
        ucs_status_t status;
        deadline limit(20);
        while (((status = send()) == UCS_ERR_NO_RESOURCE) && (!limit.passed())) {
            uct_worker_progress(worker);
        }
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS))
                << ucs_status_string(status);
    }

    /* `count` new eps from `from` to `to`, each sending one 64-byte message
     * (header i): a flow each at `to` */
    std::vector<uct_ep_h> flows_of_one_message(side &from, side &to, size_t count)
    {
        std::vector<uct_ep_h> many;
        for (size_t i = 0; i < count; ++i) {
            many.push_back(connect(from, to));
        }
        auto payload = make_payload(7, 64);
        for (size_t i = 0; i < many.size(); ++i) {
            send_retrying([&] { return uct_ep_am_short(many[i], kAmId, i, payload.data(), 64); });
        }
        return many;
    }

    /* one message on each of many eps from a to b: each is delivered, no
     * ep of a's fails (an honest connection refused or closed) */
    void expect_one_message_on_each(const std::vector<uct_ep_h> &many)
    {
        auto payload = make_payload(7, 64);
        for (size_t i = 0; i < many.size(); ++i) {
            send_retrying([&] { return uct_ep_am_short(many[i], kAmId, i, payload.data(), 64); });
        }
        progress_until([&] { return (b.received.size() == many.size()) ||
                                    !a.failed_eps.empty(); });
        EXPECT_TRUE(a.failed_eps.empty()) << a.failed_eps.size()
                                          << " honest connections failed";
        EXPECT_EQ(b.received.size(), many.size());
    }

    void flush(uct_ep_h ep)
    {
        completion comp;
        ucs_status_t status;
        deadline limit(20);
        while (((status = uct_ep_flush(ep, 0, &comp.super)) == UCS_ERR_NO_RESOURCE) &&
               (!limit.passed())) {
            uct_worker_progress(worker);
        }
        if (status == UCS_INPROGRESS) {
            progress_until([&] { return comp.done != 0; });
            status = comp.status;
        }
        ASSERT_EQ(status, UCS_OK);
    }

    void expect_message(const received_message &m, uint64_t seq, size_t len)
    {
        ASSERT_EQ(m.header, seq);
        ASSERT_EQ(m.payload, make_payload(seq, len)) << "payload of " << len << " bytes";
    }

    /* sizes to cover up to `max`: every size to 64, both sides of each power
     * of two, and the maximum itself */
    static std::vector<size_t> sizes_up_to(size_t max)
    {
        std::vector<size_t> sizes;
        for (size_t s = 0; s <= max && s <= 64; ++s) {
            sizes.push_back(s);
        }
        for (size_t p = 128; p < max; p *= 2) {
            sizes.push_back(p - 1);
            sizes.push_back(p);
            sizes.push_back(p + 1);
        }
        sizes.push_back(max - 1);
        sizes.push_back(max);
        return sizes;
    }

    uint64_t failures(uct_crypt_fail_reason_t reason)
    {
        auto read = (stats_read_t)dlsym(crypt_plugin::handle(), "uct_crypt_stats_read");
        EXPECT_NE(read, nullptr);
        uct_crypt_stats_t stats = {};
        read(&stats);
        return stats.failures[reason];
    }

    uint64_t wire_stat(uint64_t uct_crypt_stats_t::*field)
    {
        auto read = (stats_read_t)dlsym(crypt_plugin::handle(), "uct_crypt_stats_read");
        EXPECT_NE(read, nullptr);
        uct_crypt_stats_t stats = {};
        read(&stats);
        return stats.*field;
    }

    ucs_async_context_t *async = nullptr;
    uct_worker_h worker = nullptr;
    uct_component_h component = nullptr;
    std::string md_name;
    side a, b;
    uct_ep_h ab = nullptr, ba = nullptr;
    std::vector<uct_ep_h> eps;
    /* applied to every iface this test opens (before its own settings) */
    settings_t base_settings;
};

/* a plain TCP connection to `port` on 127.0.0.1, as a stranger opens one,
 * from `from` (any of 127/8: a host of its own); -1 if it cannot */
inline int connect_loopback(uint16_t port, uint32_t from = INADDR_LOOPBACK)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa = {}, src = {};
    sa.sin_family       = AF_INET;
    sa.sin_port         = htons(port);
    sa.sin_addr.s_addr  = htonl(INADDR_LOOPBACK);
    src.sin_family      = AF_INET;
    src.sin_addr.s_addr = htonl(from);
    if ((fd >= 0) && (((from != INADDR_LOOPBACK) &&
                       (bind(fd, (sockaddr*)&src, sizeof(src)) != 0)) ||
                      (::connect(fd, (sockaddr*)&sa, sizeof(sa)) != 0))) {
        close(fd);
        return -1;
    }
    return fd;
}

inline uint16_t free_loopback_port()
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa = {};
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len      = sizeof(sa);
    bind(fd, (sockaddr*)&sa, sizeof(sa));
    getsockname(fd, (sockaddr*)&sa, &len);
    close(fd);
    return ntohs(sa.sin_port);
}

/* UCX's tcp beneath crypt, standing in for an RDMA inner (rc): the bulk
 * engine needs an inner with puts, and the record layer's rules for a UCX
 * inner are tested there (test builds only: INNER_UCX_TCP) */
static const std::pair<std::string, std::string> ucx_inner = {"INNER_UCX_TCP", "y"};


/* the bulk engine's get, on every release: one contiguous buffer */
inline void expect_bulk_get(const uct_iface_attr_t &attr)
{
    EXPECT_TRUE(attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY);
    EXPECT_EQ(attr.cap.get.max_iov, 1u);
}

namespace uct_crypt_testing {
inline ucs_status_t pending_send(uct_pending_req_t *self);

struct pending_sender {
    uct_pending_req_t     super;
    uct_ep_h              ep;
    std::vector<uint8_t> *payload;
    uint64_t              seq;
    int                   sent = 0;

    /* once dispatched, it sends `what` on `on` with header `header` */
    void init(uct_ep_h on, std::vector<uint8_t> *what, uint64_t header)
    {
        super.func = pending_send;
        ep         = on;
        payload    = what;
        seq        = header;
    }
};

inline ucs_status_t pending_send(uct_pending_req_t *self)
{
    pending_sender *p = ucs_container_of(self, pending_sender, super);
    bcopy_arg arg = {p->seq, p->payload};
    ssize_t packed = uct_ep_am_bcopy(p->ep, kAmId, pack_bcopy, &arg, 0);
    if (packed == UCS_ERR_NO_RESOURCE) {
        return UCS_ERR_NO_RESOURCE; /* stays queued */
    }
    p->sent = packed > 0;
    return UCS_OK;
}
} // namespace


#endif
