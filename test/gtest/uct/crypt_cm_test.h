/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection manager's fixture (test_crypt_cm.cc, test_crypt_cm_share.cc):
 * a client and a server side, each with its own worker, async context and
 * crypt iface on lo, as a client and a server process have; the callbacks
 * UCP would register, and raw sockets to the listener for the tests that
 * play strangers and job-secret holders.
 */
#ifndef UCT_CRYPT_CM_TEST_H
#define UCT_CRYPT_CM_TEST_H

#include <gtest/gtest.h>

#include <uct/api/uct.h>
#include "common/test_util.h"
#include "uct/crypt_plugin.h"
#include "uct_crypt/api/uct_crypt_stats.h"
#include "keyex/noise.h"

#include <algorithm>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cm_test {

/* What the callbacks of one side saw. They run on the side's async thread. */
struct cm_side {
    ucs_async_context_t      *async    = nullptr;
    uct_worker_h              worker   = nullptr;
    uct_md_h                  md       = nullptr;
    uct_iface_h               iface    = nullptr;
    uct_cm_h                  cm       = nullptr;
    uct_ep_h                  ep       = nullptr;
    std::atomic<bool>         resolved{false};
    std::atomic<bool>         connected{false};    /* client: connect_cb OK */
    std::atomic<bool>         notified{false};     /* server: notify_cb OK */
    std::atomic<int>          disconnects{0};
    std::atomic<int>          am_at_disconnect{-1}; /* am_received then */
    std::atomic<int>          failures{0};
    std::atomic<uct_conn_request_h> conn_request{nullptr};
};

inline ucs_status_t resolve_cb(void *arg, const uct_cm_ep_resolve_args_t *args)
{
    cm_side *s = static_cast<cm_side*>(arg);
    if (args->status == UCS_OK) {
        s->resolved = true;
    } else {
        ++s->failures;
    }
    return UCS_OK;
}

inline void client_connect_cb(uct_ep_h, void *arg, const uct_cm_ep_client_connect_args_t *args)
{
    cm_side *s = static_cast<cm_side*>(arg);
    if (args->status == UCS_OK) {
        s->connected = true;
    } else {
        ++s->failures;
    }
}

inline void server_notify_cb(uct_ep_h, void *arg, const uct_cm_ep_server_conn_notify_args_t *args)
{
    cm_side *s = static_cast<cm_side*>(arg);
    if (args->status == UCS_OK) {
        s->notified = true;
    } else {
        ++s->failures;
    }
}

/* active messages a test's data ep delivered (count_am) */
inline std::atomic<int> am_received{0};

inline ucs_status_t count_am(void *, void *, size_t, unsigned)
{
    ++am_received;
    return UCS_OK;
}

inline void disconnect_cb(uct_ep_h, void *arg)
{
    static_cast<cm_side*>(arg)->am_at_disconnect = am_received.load();
    ++static_cast<cm_side*>(arg)->disconnects;
}

inline void conn_request_cb(uct_listener_h, void *arg,
                     const uct_cm_listener_conn_request_args_t *args)
{
    static_cast<cm_side*>(arg)->conn_request = args->conn_request;
}

inline const char kPrivateData[] = "ucp's address would be here";

} // namespace cm_test

using namespace cm_test;

class uct_crypt_cm_test : public crypt_plugin::suite {
protected:
    void SetUp() override
    {
        component = crypt_plugin::component(UCT_COMPONENT_FLAG_CM);
        ASSERT_NE(component, nullptr) << "crypt has no connection manager";
        ASSERT_NO_FATAL_FAILURE(open_side(server));
        ASSERT_NO_FATAL_FAILURE(open_side(client));
    }

    void TearDown() override
    {
        for (cm_side *s : {&client, &server}) {
            if (s->ep != nullptr) {
                uct_ep_destroy(s->ep);
            }
        }
        if (listener != nullptr) {
            uct_listener_destroy(listener);
        }
        for (cm_side *s : {&client, &server}) {
            if (s->cm != nullptr) {
                uct_cm_close(s->cm);
            }
            if (s->iface != nullptr) {
                uct_iface_close(s->iface);
            }
            if (s->md != nullptr) {
                uct_md_close(s->md);
            }
            if (s->worker != nullptr) {
                uct_worker_destroy(s->worker);
            }
            if (s->async != nullptr) {
                ucs_async_context_destroy(s->async);
            }
        }
    }

    void open_side(cm_side &s)
    {
        ASSERT_EQ(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &s.async),
                  UCS_OK);
        ASSERT_EQ(uct_worker_create(s.async, UCS_THREAD_MODE_SINGLE, &s.worker), UCS_OK);
        ASSERT_NO_FATAL_FAILURE(crypt_plugin::open_iface(s.worker, "lo", &s.md, &s.iface));
        uct_cm_config_t *config;
        ASSERT_EQ(uct_cm_config_read(component, NULL, NULL, &config), UCS_OK);
        ucs_status_t status = uct_cm_open(component, s.worker, config, &s.cm);
        uct_config_release(config);
        ASSERT_EQ(status, UCS_OK);
    }

    void progress()
    {
        uct_worker_progress(client.worker);
        uct_worker_progress(server.worker);
    }

    /* progress both until `done` or the limit (a test fails, never hangs) */
    template <typename Pred>
    bool progress_until(Pred done, double seconds = 10)
    {
        auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(seconds * test_util::slowdown()));
        while (!done()) {
            if (std::chrono::steady_clock::now() > end) {
                return false;
            }
            progress();
            usleep(100);
        }
        return true;
    }

    /* a client ep of `cm` to `addr`, its callbacks counted in `side` */
    static ucs_status_t client_ep(uct_cm_h cm, cm_side *side,
                                  const struct sockaddr_in &addr, uct_ep_h *ep)
    {
        ucs_sock_addr_t remote = {(const struct sockaddr*)&addr, sizeof(addr)};
        uct_ep_params_t cparams = {};
        cparams.field_mask = UCT_EP_PARAM_FIELD_CM |
                             UCT_EP_PARAM_FIELD_USER_DATA |
                             UCT_EP_PARAM_FIELD_SOCKADDR |
                             UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS |
                             UCT_EP_PARAM_FIELD_CM_RESOLVE_CB |
                             UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT |
                             UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB;
        cparams.cm                 = cm;
        cparams.user_data          = side;
        cparams.sockaddr           = &remote;
        cparams.sockaddr_cb_flags  = UCT_CB_FLAG_ASYNC;
        cparams.cm_resolve_cb      = resolve_cb;
        cparams.sockaddr_cb_client = client_connect_cb;
        cparams.disconnect_cb      = disconnect_cb;
        return uct_ep_create(&cparams, ep);
    }

    /* a listener on 127.0.0.1, a client connected to it, both notified */
    void connect_pair()
    {
        struct sockaddr_in addr = {};
        addr.sin_family      = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

        uct_listener_params_t lparams = {};
        lparams.field_mask = UCT_LISTENER_PARAM_FIELD_CONN_REQUEST_CB |
                             UCT_LISTENER_PARAM_FIELD_USER_DATA;
        lparams.conn_request_cb = conn_request_cb;
        lparams.user_data       = &server;
        ASSERT_EQ(uct_listener_create(server.cm, (struct sockaddr*)&addr, sizeof(addr),
                                      &lparams, &listener), UCS_OK);
        uct_listener_attr_t lattr = {};
        lattr.field_mask = UCT_LISTENER_ATTR_FIELD_SOCKADDR;
        ASSERT_EQ(uct_listener_query(listener, &lattr), UCS_OK);
        addr.sin_port = ((struct sockaddr_in*)&lattr.sockaddr)->sin_port;

        ASSERT_EQ(client_ep(client.cm, &client, addr, &client.ep), UCS_OK);

        /* the client's private data once it resolved (ucp_cm_client_resolve_cb) */
        ASSERT_TRUE(progress_until([&] { return client.resolved.load(); }))
                << "client never resolved";
        uct_ep_connect_params_t connect = {};
        connect.field_mask          = UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA |
                                      UCT_EP_CONNECT_PARAM_FIELD_PRIVATE_DATA_LENGTH;
        connect.private_data        = kPrivateData;
        connect.private_data_length = sizeof(kPrivateData);
        ASSERT_EQ(uct_ep_connect(client.ep, &connect), UCS_OK);

        /* the server's ep from the request, with its answer */
        ASSERT_TRUE(progress_until([&] { return server.conn_request.load() != nullptr; }))
                << "no connection request";
        uct_ep_params_t sparams = {};
        sparams.field_mask = UCT_EP_PARAM_FIELD_CM |
                             UCT_EP_PARAM_FIELD_CONN_REQUEST |
                             UCT_EP_PARAM_FIELD_USER_DATA |
                             UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS |
                             UCT_EP_PARAM_FIELD_SOCKADDR_NOTIFY_CB_SERVER |
                             UCT_EP_PARAM_FIELD_SOCKADDR_DISCONNECT_CB |
                             UCT_EP_PARAM_FIELD_PRIV_DATA |
                             UCT_EP_PARAM_FIELD_PRIV_DATA_LENGTH;
        sparams.cm                  = server.cm;
        sparams.conn_request        = server.conn_request.load();
        sparams.user_data           = &server;
        sparams.sockaddr_cb_flags   = UCT_CB_FLAG_ASYNC;
        sparams.sockaddr_cb_server  = server_notify_cb;
        sparams.disconnect_cb       = disconnect_cb;
        sparams.private_data        = kPrivateData;
        sparams.private_data_length = sizeof(kPrivateData);
        ASSERT_EQ(uct_ep_create(&sparams, &server.ep), UCS_OK);

        /* the client notifies once connected (ucp_cm_client_connect_progress) */
        ASSERT_TRUE(progress_until([&] { return client.connected.load(); }))
                << "client never connected";
        ASSERT_EQ(uct_cm_client_ep_conn_notify(client.ep), UCS_OK);
        ASSERT_TRUE(progress_until([&] { return server.notified.load(); }))
                << "server never notified";
        ASSERT_EQ(client.failures + server.failures, 0);
    }

    /* `first` disconnects; `second` sees it, and only once the peer's
     * whole end has been read (its FIN too: the async thread reads it at
     * once) disconnects in turn. Both must hear the other's disconnect. */
    void disconnect_after_the_peers_end(cm_side &first, cm_side &second)
    {
        ASSERT_NO_FATAL_FAILURE(connect_pair());
        ASSERT_EQ(uct_ep_disconnect(first.ep, 0), UCS_OK);
        ASSERT_TRUE(progress_until([&] { return second.disconnects.load() == 1; }))
                << "the peer's disconnect never arrived";
        /* (no event says that the FIN was read; the async thread reads it
         * in microseconds, a tenth of a second leaves it no doubt) */
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        progress();
        ASSERT_EQ(uct_ep_disconnect(second.ep, 0), UCS_OK);
        EXPECT_TRUE(progress_until([&] { return first.disconnects.load() == 1; }))
                << "our disconnect after the peer's end never reached the peer "
                   "(its flush-mode close would wait for ever)";
        EXPECT_EQ(second.disconnects.load(), 1);
        EXPECT_EQ(client.failures + server.failures, 0);
    }

    /* a plain TCP connection to the crypt listener, as a stranger opens
     * one, from `from` (any of 127/8: a host of its own) */
    int connect_listener(uint32_t from = INADDR_LOOPBACK)
    {
        uct_listener_attr_t lattr = {};
        lattr.field_mask = UCT_LISTENER_ATTR_FIELD_SOCKADDR;
        EXPECT_EQ(uct_listener_query(listener, &lattr), UCS_OK);
        struct sockaddr_in sa = {}, src = {};
        sa.sin_family       = AF_INET;
        sa.sin_port         = ((struct sockaddr_in*)&lattr.sockaddr)->sin_port;
        sa.sin_addr.s_addr  = htonl(INADDR_LOOPBACK);
        src.sin_family      = AF_INET;
        src.sin_addr.s_addr = htonl(from);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (from != INADDR_LOOPBACK) {
            EXPECT_EQ(bind(fd, (struct sockaddr*)&src, sizeof(src)), 0);
        }
        EXPECT_EQ(::connect(fd, (struct sockaddr*)&sa, sizeof(sa)), 0);
        return fd;
    }

    /* what the listener answers on `fd`, read while the cms progress:
     * up to a cookie reply's worth, or the connection's end (*closed) */
    std::string read_answer(int fd, bool *closed)
    {
        std::string answer;
        progress_until([&] {
            char buf[256];
            ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n > 0) {
                answer.append(buf, n);
            } else if (n == 0) {
                *closed = true;
            }
            return *closed || (answer.size() >= sizeof(keyex_noise_cookie_msg_t));
        });
        return answer;
    }

    /* a first message of a client of this job that the crypt listener
     * never saw: a cm client's, taken by a plain listener of ours */
    void unseen_first_message(keyex_noise_cm_init_msg_t *first)
    {
        int taker = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in ta = {};
        socklen_t ta_len   = sizeof(ta);
        ta.sin_family      = AF_INET;
        ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(bind(taker, (struct sockaddr*)&ta, sizeof(ta)), 0);
        ASSERT_EQ(listen(taker, 1), 0);
        ASSERT_EQ(getsockname(taker, (struct sockaddr*)&ta, &ta_len), 0);
        cm_side stray;
        uct_ep_h stray_ep;
        ASSERT_EQ(client_ep(client.cm, &stray, ta, &stray_ep), UCS_OK);
        size_t got = 0;
        pollfd pfd = {taker, POLLIN, 0};
        ASSERT_TRUE(progress_until([&] { return poll(&pfd, 1, 0) == 1; }));
        int taken = accept(taker, nullptr, nullptr);
        ASSERT_GE(taken, 0);
        progress_until([&] {
            ssize_t n = recv(taken, (char*)first + got, sizeof(*first) - got, MSG_DONTWAIT);
            got += (n > 0) ? n : 0;
            return got == sizeof(*first);
        });
        close(taken);
        close(taker);
        ASSERT_EQ(got, sizeof(*first));
        EXPECT_EQ(first->msg.type, KEYEX_NOISE_CM_INIT_TYPE);
        progress_until([&] { return stray.failures.load() > 0; });
        uct_ep_destroy(stray_ep);
    }

    /* whether the listener closed our raw connection `s` (what it sent
     * before is read and dropped) */
    static bool closed(int s)
    {
        char buf[64];
        ssize_t n;
        while ((n = recv(s, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        }
        return (n == 0) || ((errno != EAGAIN) && (errno != EWOULDBLOCK));
    }

    /* progress until `want` of `crowd` are closed, or `kept` is; how many
     * of `crowd` are */
    size_t closed_until(const std::vector<int> &crowd, size_t want, int kept)
    {
        size_t gone = 0;
        progress_until([&] {
            gone = std::count_if(crowd.begin(), crowd.end(), closed);
            return (gone >= want) || closed(kept);
        });
        return gone;
    }

    /* The client's data ep (to the server's iface, as UCP's lanes) has sent
     * `count` AMs after a first one, all out of the client; the server's
     * worker has delivered only the first. The caller keeps the ep. */
    void send_unprogressed(int count, std::unique_ptr<uct_ep, void(*)(uct_ep_h)> &data_ep)
    {
        am_received = 0;
        ASSERT_EQ(uct_iface_set_am_handler(server.iface, 5, count_am, nullptr, 0), UCS_OK);
        for (cm_side *side : {&client, &server}) {
            uct_iface_progress_enable(side->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
        }
        uct_iface_attr_t attr;
        ASSERT_EQ(uct_iface_query(server.iface, &attr), UCS_OK);
        std::vector<uint8_t> dev(attr.device_addr_len), ifa(attr.iface_addr_len);
        ASSERT_EQ(uct_iface_get_device_address(server.iface, (uct_device_addr_t*)dev.data()),
                  UCS_OK);
        ASSERT_EQ(uct_iface_get_address(server.iface, (uct_iface_addr_t*)ifa.data()), UCS_OK);
        uct_ep_params_t params = {};
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                            UCT_EP_PARAM_FIELD_IFACE_ADDR;
        params.iface      = client.iface;
        params.dev_addr   = (const uct_device_addr_t*)dev.data();
        params.iface_addr = (const uct_iface_addr_t*)ifa.data();
        uct_ep_h ep;
        ASSERT_EQ(uct_ep_create(&params, &ep), UCS_OK);
        data_ep.reset(ep);
        /* the first message sets the data connection up (both progressed) */
        uint64_t first = 0;
        ASSERT_TRUE(progress_until([&] {
            return uct_ep_am_short(ep, 5, first, &first, sizeof(first)) == UCS_OK;
        }));
        ASSERT_TRUE(progress_until([&] { return am_received.load() == 1; }));
        /* the rest sent and out of the client; the server's worker not
         * progressed */
        int sent = 0;
        for (int i = 0; (sent < count) && (i < 1000000); ++i) {
            uint64_t header = sent;
            ucs_status_t status = uct_ep_am_short(ep, 5, header, &header,
                                                  sizeof(header));
            ASSERT_TRUE((status == UCS_OK) || (status == UCS_ERR_NO_RESOURCE));
            sent += (status == UCS_OK);
            uct_worker_progress(client.worker);
        }
        ASSERT_EQ(sent, count);
        ucs_status_t flushed = UCS_INPROGRESS;
        for (int i = 0; (flushed != UCS_OK) && (i < 1000000); ++i) {
            uct_worker_progress(client.worker);
            flushed = uct_ep_flush(ep, 0, nullptr);
        }
        ASSERT_EQ(flushed, UCS_OK);
        EXPECT_EQ(am_received.load(), 1);
    }

    uct_component_h component = nullptr;
    uct_listener_h  listener  = nullptr;
    cm_side         client, server;
};

#endif
