/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the tests of each host's share of the DHs under load have in
 * common for both listeners (test_crypt_wire_share.cc,
 * test_crypt_cm_share.cc): connections that got a cookie reply, raw
 * sockets read without waiting, and the rate they run under.
 */
#ifndef UCT_CRYPT_LISTENER_SHARE_H
#define UCT_CRYPT_LISTENER_SHARE_H

#include <gtest/gtest.h>
#include "keyex/noise.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace listener_share {

/* quickstart.sh's uct_host_share run: 4 DHs a second a host under load */
inline bool rate_set()
{
    const char *rate = getenv("UCX_CRYPT_HANDSHAKE_RATE");
    return (rate != nullptr) && (std::string(rate) == "8");
}

#define SKIP_UNLESS_SHARE_RATE() \
    if (!listener_share::rate_set()) { \
        GTEST_SKIP() << "runs with UCX_CRYPT_HANDSHAKE_RATE=8 (4 DHs a " \
                        "second a host under load)"; \
    }

/* a thousand connections and their peers' ends in this process */
inline bool raise_fd_limit()
{
    rlimit limit;

    if ((getrlimit(RLIMIT_NOFILE, &limit) != 0) || (limit.rlim_max < 4096)) {
        return false;
    }
    limit.rlim_cur = std::max<rlim_t>(limit.rlim_cur, 4096);
    return setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

/* What came on `fd` so far, without waiting; *closed at its end */
inline size_t read_some(int fd, std::string *got, bool *closed)
{
    char buf[256];
    ssize_t n;

    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        got->append(buf, n);
    }
    *closed = *closed || (n == 0);
    return got->size();
}

/* A holder's connections that got a cookie reply, oldest first */
struct waiting {
    std::vector<int>                  fds;
    std::vector<std::string>          got;
    std::vector<std::vector<uint8_t>> cookies; /* each one's */
    std::chrono::steady_clock::time_point first_at; /* the first's cookie */

    ~waiting()
    {
        for (int fd : fds) {
            close(fd);
        }
    }

    /* Of those from `first` on: how many have `response_len` bytes of
     * answer (*closed: how many ended) */
    size_t answered(size_t first, size_t response_len, size_t *closed = nullptr)
    {
        size_t n = 0, ended = 0;

        got.resize(fds.size());
        for (size_t i = first; i < fds.size(); ++i) {
            bool end = false;
            n     += (read_some(fds[i], &got[i], &end) >= response_len);
            ended += end;
        }
        if (closed != nullptr) {
            *closed = ended;
        }
        return n;
    }
};

/* The listener's two ways of talking to a holder */
struct holder_ops {
    /* a first message on a new connection: its fd; *mac the mac1 (the
     * cm's tag) a cookie reply answers */
    std::function<int(std::vector<uint8_t> *mac)> open;
    /* the cookie of `reply` to the message of `mac`; false if none */
    std::function<bool(const std::string &reply, const std::vector<uint8_t> &mac,
                       uint8_t cookie[KEYEX_NOISE_COOKIE_LEN])> take;
    /* the first message again on `fd`, with mac2 under `cookie` */
    std::function<void(int fd, const uint8_t *cookie)> answer;
    /* a DH that comes to nothing: the listener under load for a second */
    std::function<void()> make_load;
};

/* `count` more connections into `w` that got their cookie reply, `batch`
 * at a time; with `answer`, each answers it. Where a first message got its
 * DH without a cookie (a slow machine, past its second of load), load is
 * made again. */
template <typename Progress>
void through_cookies(waiting &w, const holder_ops &ops, Progress progress_until,
                     size_t count, bool answer, size_t batch = 1)
{
    for (size_t tries = 0, done = 0; done < count; ++tries) {
        ASSERT_LT(tries, 3 * count) << "the listener was never under load";
        size_t n = std::min(batch, count - done);
        std::vector<int> fds(n);
        std::vector<std::vector<uint8_t>> macs(n);
        std::vector<std::string> replies(n);
        for (size_t i = 0; i < n; ++i) {
            fds[i] = ops.open(&macs[i]);
            ASSERT_GE(fds[i], 0);
        }
        progress_until([&] {
            size_t in = 0;
            for (size_t i = 0; i < n; ++i) {
                bool end = false;
                in += (read_some(fds[i], &replies[i], &end) >=
                       sizeof(keyex_noise_cookie_msg_t)) || end;
            }
            return in == n;
        });
        bool unloaded = false;
        for (size_t i = 0; i < n; ++i) {
            uint8_t cookie[KEYEX_NOISE_COOKIE_LEN];
            if ((replies[i].size() != sizeof(keyex_noise_cookie_msg_t)) ||
                !ops.take(replies[i], macs[i], cookie)) {
                close(fds[i]); /* its DH without load */
                unloaded = true;
                continue;
            }
            if (answer) {
                ops.answer(fds[i], cookie);
            }
            if (w.fds.empty()) {
                w.first_at = std::chrono::steady_clock::now();
            }
            w.fds.push_back(fds[i]);
            w.cookies.emplace_back(cookie, cookie + sizeof(cookie));
            ++done;
        }
        if (unloaded) {
            ops.make_load();
        }
    }
}

/* After a flood past the bound: some of w past its first went, its first
 * (an honest host's, silent until now) did not; `answer_first` sends its
 * answer to its cookie, which gets its DH */
template <typename Progress>
void expect_the_first_stays(waiting &w, size_t response_len, Progress progress_until,
                            const std::function<void()> &answer_first)
{
    size_t closed = 0;
    bool first_closed = false;
    std::string nothing;

    progress_until([&] { w.answered(1, response_len, &closed); return closed > 0; });
    EXPECT_GT(closed, 0u) << "nothing went past the bound";
    read_some(w.fds[0], &nothing, &first_closed);
    if (first_closed &&
        (std::chrono::steady_clock::now() - w.first_at > std::chrono::seconds(4))) {
        /* (a machine too busy to flood within the first's handshake
         * deadline, 5 s: its end says nothing of the eviction rule) */
        GTEST_SKIP() << "the flood outlasted the handshake deadline";
    }
    ASSERT_FALSE(first_closed) << "the honest host's connection was evicted";
    answer_first();
    progress_until([&] {
        return (read_some(w.fds[0], &w.got[0], &first_closed) >= response_len) ||
               first_closed;
    });
    EXPECT_GE(w.got[0].size(), response_len)
            << "the honest host's answer to its cookie got no DH";
}

} // namespace listener_share

#endif
