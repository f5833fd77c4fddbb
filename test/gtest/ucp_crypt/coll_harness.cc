/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The harness of the collectives' tests (coll_harness.h): each rank a
 * forked process running every algorithm, task and bootstrap the test
 * asks for, its results in shared memory.
 */
#include "ucp_crypt/coll_harness.h"

#include <gtest/gtest.h>

#include "ucp_crypt/coll/crypt_coll.h"
#include "ucp_crypt/coll/crypt_coll_wire.h"
#include "keyex/keyex.h"
#include "common/test_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

unsigned kKeyLen     = 16; /* AES-128; a test may set 32 before run_team */
uint64_t kEpochLimit = 0;  /* frames per epoch; 0: keyex's limits */

struct pipes {
    int  fd[kMaxRanks];        /* our end towards each rank */
    int  rank;
    const int *node_of;
    int  tamper;               /* flip a bit in the first inter-node send */
};

redirect_attack redirect = {-1, -1, -1};

int write_all(int fd, const uint8_t *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        if (poll(&pfd, 1, 30000) <= 0) return -1;
        ssize_t w = write(fd, buf + done, len - done);
        if (w > 0) done += (size_t)w;
    }
    return 0;
}

int read_all(int fd, uint8_t *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 30000) <= 0) return -1;
        ssize_t rd = read(fd, buf + done, len - done);
        if (rd <= 0) return -1;
        done += (size_t)rd;
    }
    return 0;
}

uint8_t pattern(int rank, size_t i, int alg, size_t m)
{
    return (uint8_t)(rank * 37 + i * 11 + alg * 5 + m);
}

int harness_sendrecv(void *ctx, int dst, const void *sbuf, size_t slen, int src,
                     void *rbuf, size_t rlen)
{
    pipes *p = static_cast<pipes*>(ctx);
    std::vector<uint8_t> tampered;
    const uint8_t *out = static_cast<const uint8_t*>(sbuf);
    size_t sent = 0, got = 0;
    time_t deadline = time(nullptr) + 30;
    int swallow_from = -1;

    if ((p->rank == redirect.sender) && (dst >= 0) && (slen > 0) &&
        (p->node_of[dst] != p->node_of[p->rank])) {
        /* the adversary copies this frame towards the victim */
        if (write_all(p->fd[redirect.victim], out, slen) != 0) return -1;
        redirect.sender = -1;
    }
    if ((p->rank == redirect.victim) && (src == redirect.displaced)) {
        /* ... and delivers the copy in place of the displaced peer's */
        swallow_from    = src;
        src             = redirect.sender;
        redirect.victim = -1;
    }

    if ((dst >= 0) && (slen > 0) && p->tamper &&
        (p->node_of[dst] != p->node_of[p->rank])) {
        tampered.assign(out, out + slen);
        tampered[slen - 1] ^= 0x01; /* the tag's last bit */
        out       = tampered.data();
        p->tamper = 0;
    }
    while (((dst >= 0) && (sent < slen)) || ((src >= 0) && (got < rlen))) {
        struct pollfd fds[2];
        int n = 0;
        if ((dst >= 0) && (sent < slen)) {
            fds[n++] = {p->fd[dst], POLLOUT, 0};
        }
        if ((src >= 0) && (got < rlen)) {
            fds[n++] = {p->fd[src], POLLIN, 0};
        }
        if ((time(nullptr) > deadline) || (poll(fds, n, 1000) < 0)) {
            return -1;
        }
        for (int k = 0; k < n; ++k) {
            if ((fds[k].revents & POLLOUT) && (fds[k].fd == p->fd[dst]) && (sent < slen)) {
                ssize_t w = write(p->fd[dst], out + sent, slen - sent);
                if (w > 0) sent += (size_t)w;
            }
            if ((fds[k].revents & (POLLIN | POLLHUP)) && (fds[k].fd == p->fd[src]) &&
                (got < rlen)) {
                ssize_t rd = read(p->fd[src], (uint8_t*)rbuf + got, rlen - got);
                if (rd == 0) return -1;
                if (rd > 0) got += (size_t)rd;
            }
        }
    }
    if (swallow_from >= 0) {
        std::vector<uint8_t> swallowed(rlen);
        return read_all(p->fd[swallow_from], swallowed.data(), rlen);
    }
    return 0;
}

/* the same pipes, nonblocking, for tasks */
struct nb_op {
    int                  dst, src;
    const uint8_t        *out;
    size_t               slen, sent;
    uint8_t              *in;
    size_t               rlen, got;
    std::vector<uint8_t> tampered;
};

int harness_post(void *ctx, int dst, const void *sbuf, size_t slen, int src,
                 void *rbuf, size_t rlen, void **handle)
{
    pipes *p = static_cast<pipes*>(ctx);
    nb_op *op = new nb_op{dst, src, static_cast<const uint8_t*>(sbuf), slen, 0,
                          static_cast<uint8_t*>(rbuf), rlen, 0, {}};
    if ((dst >= 0) && (slen > 0) && p->tamper &&
        (p->node_of[dst] != p->node_of[p->rank])) {
        op->tampered.assign(op->out, op->out + slen);
        op->tampered[slen - 1] ^= 0x01;
        op->out   = op->tampered.data();
        p->tamper = 0;
    }
    *handle = op;
    return 0;
}

int harness_test(void *ctx, void *handle)
{
    pipes *p = static_cast<pipes*>(ctx);
    nb_op *op = static_cast<nb_op*>(handle);
    int failed = 0;

    if ((op->dst >= 0) && (op->sent < op->slen)) {
        ssize_t w = write(p->fd[op->dst], op->out + op->sent, op->slen - op->sent);
        if (w > 0) op->sent += (size_t)w;
        else if ((w < 0) && (errno != EAGAIN)) failed = 1;
    }
    if ((op->src >= 0) && (op->got < op->rlen)) {
        ssize_t rd = read(p->fd[op->src], op->in + op->got, op->rlen - op->got);
        if (rd > 0) op->got += (size_t)rd;
        else if ((rd == 0) || (errno != EAGAIN)) failed = 1;
    }
    if (failed || (((op->dst < 0) || (op->sent == op->slen)) &&
                   ((op->src < 0) || (op->got == op->rlen)))) {
        delete op;
        return failed ? -1 : 1;
    }
    return 0;
}

const crypt_coll_nb_ops_t harness_nb = {harness_post, harness_test};

void sum_u64(void *inout, const void *in, size_t count, void *)
{
    uint64_t *a = static_cast<uint64_t*>(inout);
    const uint64_t *b = static_cast<const uint64_t*>(in);
    for (size_t i = 0; i < count; ++i) a[i] += b[i];
}

void run_tasks(int rank, int p, const int *node_of, const uint8_t *secret,
               const uint8_t *salt, crypt_coll_team_t &team, pipes &io2,
               rank_result *res, bool second_thread);

/* the bootstrap's OOB all-gather: a ring over the harness pipes */
struct oob_ctx {
    pipes *io;
    int   rank, p;
};

int harness_oob_allgather(void *ctx, const void *sbuf, void *rbuf, size_t len)
{
    oob_ctx *o = static_cast<oob_ctx*>(ctx);
    uint8_t *out = static_cast<uint8_t*>(rbuf);
    memcpy(out + (size_t)o->rank * len, sbuf, len);
    for (int s = 0; s < o->p - 1; ++s) {
        int send_idx = (o->rank - s + o->p) % o->p, recv_idx = (o->rank - s - 1 + o->p) % o->p;
        if (harness_sendrecv(o->io, (o->rank + 1) % o->p, out + (size_t)send_idx * len, len,
                             (o->rank - 1 + o->p) % o->p, out + (size_t)recv_idx * len,
                             len) != 0) {
            return -1;
        }
    }
    return 0;
}

/* a team made with crypt_coll_team_create: node map from the environment,
 * then from the host identity (one real host: one node); an all-gather on
 * it proves every rank derived the same key */
int oob_team_works(crypt_coll_team_t &t, int rank, int p)
{
    const size_t m = 777;
    std::vector<uint8_t> mine(m), all(m * p, 0xAA);
    for (size_t i = 0; i < m; ++i) mine[i] = pattern(rank, i, 90, m);
    int ok = crypt_coll_allgather(&t, CRYPT_ALLGATHER_C_RING, mine.data(), all.data(), m) ==
             CRYPT_COLL_OK;
    for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < m; ++i) ok &= all[r * m + i] == pattern(r, i, 90, m);
    return ok && (t.counters.inter_node_plaintext_bytes == 0);
}

bootstrap_attack_t bootstrap_attack = BOOTSTRAP_HONEST;

struct attacked_oob_ctx {
    oob_ctx              oob;
    std::vector<uint8_t> recorded; /* of the first team: rank 2's message,
                                      or rank 1's whole transcript */
    int                  calls;
    const uint8_t        *secret;
};

/* Rank 2's message of an earlier team, sent from another host: what a
 * recording of the same job (same secret, no job id) holds */
std::vector<uint8_t> message_from_another_host(const uint8_t *secret, int p)
{
    crypt_coll_hello_t hello = {};
    uint8_t mac_key[KEYEX_SECRET_LEN];
    hello.version = CRYPT_COLL_HELLO_VERSION;
    hello.key_len = 16;
    hello.rank    = htole32(2);
    hello.size    = htole32((uint32_t)p);
    memset(hello.random, 0x5a, sizeof(hello.random));
    snprintf(hello.host_id, sizeof(hello.host_id), "another-boot-id|host-b");
    EXPECT_EQ(keyex_derive_bootstrap_key(secret, NULL, 0, mac_key), KEYEX_OK);
    EXPECT_EQ(keyex_mac(mac_key, &hello, offsetof(crypt_coll_hello_t, mac), hello.mac),
              KEYEX_OK);
    const uint8_t *bytes = reinterpret_cast<const uint8_t*>(&hello);
    return std::vector<uint8_t>(bytes, bytes + sizeof(hello));
}

int attacked_oob_allgather(void *ctx, const void *sbuf, void *rbuf, size_t len)
{
    attacked_oob_ctx *a = static_cast<attacked_oob_ctx*>(ctx);
    uint8_t *slots = static_cast<uint8_t*>(rbuf);
    if (harness_oob_allgather(&a->oob, sbuf, rbuf, len) != 0) return -1;
    /* the bootstrap messages are the first round (calls 1, 3: two teams) */
    const bool hellos = (len == sizeof(crypt_coll_hello_t));
    const int team    = hellos ? ++a->calls : a->calls;
    if (!hellos) {
        return 0; /* the confirmations pass untouched */
    }
    if ((bootstrap_attack == BOOTSTRAP_ALTER_HOST) && (a->oob.rank != 1)) {
        slots[len + 60] ^= 0x01; /* a byte of rank 1's host identity */
    }
    if (bootstrap_attack == BOOTSTRAP_REPLAY) {
        if (team == 1) {
            a->recorded.assign(slots + 2 * len, slots + 3 * len);
        } else if (a->oob.rank != 2) {
            memcpy(slots + 2 * len, a->recorded.data(), len);
        }
    }
    if ((bootstrap_attack == BOOTSTRAP_SPLICE_HOST) && (a->oob.rank == 0)) {
        auto other = message_from_another_host(a->secret, a->oob.p);
        memcpy(slots + 2 * len, other.data(), len);
    }
    if ((bootstrap_attack == BOOTSTRAP_REPLAY_ALL) && (a->oob.rank == 1)) {
        if (team == 1) {
            a->recorded.assign(slots, slots + (size_t)a->oob.p * len);
        } else {
            memcpy(slots, a->recorded.data(), a->recorded.size());
        }
    }
    return 0;
}

void run_oob(int rank, int p, const uint8_t *secret, pipes &io, rank_result *res)
{
    oob_ctx o = {&io, rank, p};
    crypt_coll_oob_t oob = {harness_oob_allgather, &o, rank, p, nullptr};
    crypt_coll_team_t t;
    char error[128];

    if (bootstrap_attack != BOOTSTRAP_HONEST) {
        attacked_oob_ctx a = {o, {}, 0, secret};
        std::vector<int> two_nodes(p); /* so that frames cross nodes */
        crypt_coll_node_map(p, 2, CRYPT_COLL_MAP_BLOCK, two_nodes.data());
        /* the splice moves a rank between nodes: the host identities
         * decide them there */
        const int *node_of = (bootstrap_attack == BOOTSTRAP_SPLICE_HOST) ?
                             nullptr : two_nodes.data();
        uint8_t other[32];
        memcpy(other, secret, sizeof(other));
        other[0] ^= (bootstrap_attack == BOOTSTRAP_OTHER_SECRET) && (rank == 1);
        const char *job = ((bootstrap_attack == BOOTSTRAP_OTHER_JOB) && (rank == 1)) ?
                          "pmix:job-b" : "pmix:job-a";
        oob = {attacked_oob_allgather, &a, rank, p,
               (bootstrap_attack == BOOTSTRAP_OTHER_JOB) ? job : nullptr};
        if ((bootstrap_attack == BOOTSTRAP_REPLAY) ||
            (bootstrap_attack == BOOTSTRAP_REPLAY_ALL)) {
            /* the first team, whose messages the adversary records */
            res->oob_env_ok = crypt_coll_team_create(&t, &oob, node_of, other, 16,
                                                     CRYPT_AEAD_BACKEND_OPENSSL,
                                                     harness_sendrecv, &io);
            if (res->oob_env_ok == CRYPT_COLL_OK) crypt_coll_team_cleanup(&t);
        }
        res->oob_host_ok = crypt_coll_team_create(&t, &oob, node_of, other, 16,
                                                  CRYPT_AEAD_BACKEND_OPENSSL,
                                                  harness_sendrecv, &io);
        if (res->oob_host_ok == CRYPT_COLL_OK) {
            crypt_coll_team_cleanup(&t);
        }
        return;
    }

    std::vector<int> nodes(p);
    if ((crypt_coll_node_map_parse(getenv("UCX_CRYPT_COLL_NODES"), p, nodes.data(),
                                   error, sizeof(error)) == 0) &&
        (crypt_coll_team_create(&t, &oob, nodes.data(), secret, 16,
                                CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                &io) == CRYPT_COLL_OK)) {
        res->oob_env_nodes = t.num_nodes;
        for (int r = 0; r < p; ++r) res->oob_node_of[r] = t.node_of[r];
        res->oob_env_ok = oob_team_works(t, rank, p);
        crypt_coll_team_cleanup(&t);
    }
    oob.job_id = "pmix:honest"; /* the same launcher's job id on every rank */
    if (crypt_coll_team_create(&t, &oob, nullptr, secret, 32, CRYPT_AEAD_BACKEND_OPENSSL,
                               harness_sendrecv, &io) == CRYPT_COLL_OK) {
        res->oob_host_nodes = t.num_nodes;
        res->oob_host_ok    = oob_team_works(t, rank, p);
        crypt_coll_team_cleanup(&t);
    }
}

void run_v(int rank, int p, crypt_coll_team_t &team, rank_result *res)
{
    std::vector<size_t> counts(p), displs(p);
    size_t extent = 0;
    for (int q = 0; q < p; ++q) {
        counts[q] = v_count(q);
        displs[q] = extent + 5; /* 5 bytes of gap before each block */
        extent    = displs[q] + counts[q];
    }
    std::vector<uint8_t> mine(counts[rank]), all(extent + 5, 0xAA);
    for (size_t i = 0; i < counts[rank]; ++i) mine[i] = pattern(rank, i, 70, counts[rank]);
    team.counters   = crypt_coll_counters_t();
    res->agv_status = crypt_coll_allgatherv(&team, mine.data(), all.data(), counts.data(),
                                            displs.data());
    res->agv_counters = team.counters;
    int ok = 1, gaps = 1;
    for (int q = 0; q < p; ++q) {
        for (size_t i = 0; i < counts[q]; ++i) ok &= all[displs[q] + i] == pattern(q, i, 70, counts[q]);
        for (size_t i = 1; i <= 5; ++i) gaps &= all[displs[q] - i] == 0xAA;
    }
    res->agv_ok      = ok;
    res->agv_gaps_ok = gaps;
    /* in place: the own block is already where it belongs */
    std::vector<uint8_t> inplace(extent + 5, 0xAA);
    for (size_t i = 0; i < counts[rank]; ++i) inplace[displs[rank] + i] = pattern(rank, i, 71, counts[rank]);
    ok = crypt_coll_allgatherv(&team, nullptr, inplace.data(), counts.data(), displs.data()) ==
         CRYPT_COLL_OK;
    for (int q = 0; q < p; ++q)
        for (size_t i = 0; i < counts[q]; ++i) ok &= inplace[displs[q] + i] == pattern(q, i, 71, counts[q]);
    res->agv_in_place_ok = ok;

    std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
    size_t soff = 0, roff = 0;
    for (int j = 0; j < p; ++j) {
        sc[j] = v_pair(rank, j); sd[j] = soff; soff += sc[j];
        rc[j] = v_pair(j, rank); rd[j] = roff + 3; roff = rd[j] + rc[j];
    }
    std::vector<uint8_t> sb(soff + 1), rb(roff + 1, 0xAA);
    for (int j = 0; j < p; ++j)
        for (size_t i = 0; i < sc[j]; ++i) sb[sd[j] + i] = pattern(rank, i, 80 + j, sc[j]);
    team.counters   = crypt_coll_counters_t();
    res->atv_status = crypt_coll_alltoallv(&team, sb.data(), sc.data(), sd.data(), rb.data(),
                                           rc.data(), rd.data());
    res->atv_counters = team.counters;
    ok = 1;
    for (int j = 0; j < p; ++j)
        for (size_t i = 0; i < rc[j]; ++i) ok &= rb[rd[j] + i] == pattern(j, i, 80 + rank, rc[j]);
    res->atv_ok = ok;
}

void run_rank(int rank, int p, const int *node_of, const uint8_t *secret,
              const uint8_t *salt, pipes &io, pipes &io2, rank_result *res,
              int only_alg, void *node_shm, size_t node_shm_size)
{
    crypt_coll_team_t team;
    if (crypt_coll_team_init(&team, rank, p, node_of, secret, salt, kKeyLen,
                             CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv, &io) !=
        CRYPT_COLL_OK) {
        return;
    }
    crypt_coll_team_set_node_shm(&team, node_shm, node_shm_size);
    crypt_coll_team_set_epoch_limit(&team, kEpochLimit);
    if (only_alg == -5) {
        run_oob(rank, p, secret, io, res);
        crypt_coll_team_cleanup(&team);
        res->done = 1;
        return;
    }
    if (only_alg == -4) {
        run_v(rank, p, team, res);
        crypt_coll_team_cleanup(&team);
        res->done = 1;
        return;
    }
    if ((only_alg == -3) || (only_alg == -6)) {
        run_tasks(rank, p, node_of, secret, salt, team, io2, res, only_alg == -6);
        crypt_coll_team_cleanup(&team);
        res->done = 1;
        return;
    }
    if (only_alg == -2) {
        /* bcast from the last rank, then a 64-bit sum, each 3 sizes */
        int ok = 1;
        for (size_t m : {(size_t)1, (size_t)4096, (size_t)300000}) {
            std::vector<uint8_t> buf(m);
            for (size_t i = 0; i < m; ++i) {
                buf[i] = (rank == p - 1) ? pattern(p - 1, i, 9, m) : 0xEE;
            }
            team.counters = crypt_coll_counters_t();
            ok &= crypt_coll_bcast(&team, buf.data(), m, p - 1) == CRYPT_COLL_OK;
            for (size_t i = 0; i < m; ++i) ok &= buf[i] == pattern(p - 1, i, 9, m);
        }
        res->bcast_ok       = ok;
        res->bcast_counters = team.counters; /* of the last size */
        ok = 1;
        for (size_t count : {(size_t)1, (size_t)1000, (size_t)100000}) {
            std::vector<uint64_t> in(count), out(count, 7);
            for (size_t i = 0; i < count; ++i) in[i] = (uint64_t)(rank + 1) * (i + 3);
            team.counters = crypt_coll_counters_t();
            ok &= crypt_coll_allreduce(&team, in.data(), out.data(), count, 8,
                                       sum_u64, nullptr) == CRYPT_COLL_OK;
            for (size_t i = 0; i < count; ++i) {
                ok &= out[i] == (uint64_t)p * (p + 1) / 2 * (i + 3);
            }
        }
        res->allreduce_ok       = ok;
        res->allreduce_counters = team.counters;
        ok = 1;
        for (size_t m : {(size_t)1, (size_t)5000}) {
            std::vector<uint8_t> sb(m * p), rb(m * p, 0xEE);
            for (int j = 0; j < p; ++j) {
                for (size_t i = 0; i < m; ++i) sb[j * m + i] = pattern(rank, i, 20 + j, m);
            }
            team.counters = crypt_coll_counters_t();
            ok &= crypt_coll_alltoall(&team, sb.data(), rb.data(), m) == CRYPT_COLL_OK;
            for (int j = 0; j < p; ++j) {
                for (size_t i = 0; i < m; ++i) ok &= rb[j * m + i] == pattern(j, i, 20 + rank, m);
            }
        }
        res->alltoall_ok       = ok;
        res->alltoall_counters = team.counters;
        crypt_coll_team_cleanup(&team);
        res->done = 1;
        return;
    }
    for (int a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
        if ((only_alg >= 0) && (a != only_alg)) continue;
        /* tamper runs: one collective of 4 KiB (index 3) */
        for (int s = (only_alg >= 0) ? 3 : 0; s < kNumSizes; ++s) {
            size_t m = kSizes[s];
            std::vector<uint8_t> sbuf(m + 1), rbuf(m * p + 1, 0xAA);
            for (size_t i = 0; i < m; ++i) sbuf[i] = pattern(rank, i, a, m);
            team.counters = crypt_coll_counters_t();
            res->status[a][s] = crypt_coll_allgather(&team, (crypt_allgather_alg_t)a,
                                                     sbuf.data(), rbuf.data(), m);
            res->counters[a][s] = team.counters;
            int ok = 1;
            for (int r = 0; r < p && ok; ++r) {
                for (size_t i = 0; i < m; ++i) {
                    if (rbuf[r * m + i] != pattern(r, i, a, m)) { ok = 0; break; }
                }
            }
            res->data_ok[a][s] = ok;
            if (only_alg >= 0) break; /* tamper runs: one collective */
        }
    }
    res->epochs = team.seal_epoch;
    if (only_alg < 0) {
        /* MPI_IN_PLACE and two collectives back to back (fresh AAD each) */
        size_t m = 333;
        std::vector<uint8_t> rbuf(m * p);
        int ok = 1;
        for (int round = 0; round < 2; ++round) {
            for (size_t i = 0; i < m; ++i) rbuf[rank * m + i] = pattern(rank, i, round, m);
            ok &= crypt_coll_allgather(&team, CRYPT_ALLGATHER_C_RING, nullptr, rbuf.data(),
                                       m) == CRYPT_COLL_OK;
            for (int r = 0; r < p; ++r) {
                for (size_t i = 0; i < m; ++i) ok &= rbuf[r * m + i] == pattern(r, i, round, m);
            }
        }
        res->in_place_ok = res->back_to_back_ok = ok;
    }
    crypt_coll_team_cleanup(&team);
    res->done = 1;
}

/* Two teams on two sets of pipes, a task on each, progressed together by
 * one thread: team A runs every all-gather algorithm (HS on the node
 * segment), team B at the same time a bcast, allreduce, alltoall or a
 * score-table all-gather in turn. With `second_thread`, as a
 * multithreaded MPI program may: team B's task, posted here, is tested to
 * its end by another thread while this one tests team A's (the task's
 * stack moves between threads; the two teams run at the same time; the
 * ThreadSanitizer build checks both). */
void run_tasks(int rank, int p, const int *node_of, const uint8_t *secret,
               const uint8_t *salt, crypt_coll_team_t &team, pipes &io2,
               rank_result *res, bool second_thread)
{
    crypt_coll_team_t team_b;
    uint8_t salt_b[CRYPT_COLL_TEAM_ID_LEN];
    memcpy(salt_b, salt, sizeof(salt_b));
    salt_b[0] ^= 0x5a; /* another team: another salt */
    if (crypt_coll_team_init(&team_b, rank, p, node_of, secret, salt_b, kKeyLen,
                             CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv, &io2) !=
        CRYPT_COLL_OK) {
        return;
    }
    int ok = 1, overlapped = 0, refused = 1;
    crypt_coll_task_t *ta, *tb;
    crypt_coll_args_t args = {};

    /* misuse: no nonblocking pipes yet */
    args.coll = CRYPT_COLL_ALLGATHER;
    args.alg  = CRYPT_ALLGATHER_C_RING;
    refused &= crypt_coll_task_init(&team, &args, nullptr, &ta) == CRYPT_COLL_ERR_PARAM;
    crypt_coll_team_set_nb(&team, &harness_nb);
    crypt_coll_team_set_nb(&team_b, &harness_nb);

    const size_t m = 5000;
    for (int a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
        std::vector<uint8_t> sa(m), ra(m * p, 0xAA);
        for (size_t i = 0; i < m; ++i) sa[i] = pattern(rank, i, a, m);
        crypt_coll_args_t aa = {};
        aa.coll = CRYPT_COLL_ALLGATHER;
        aa.alg  = a;
        aa.sbuf = sa.data();
        aa.rbuf = ra.data();
        aa.m    = m;

        const int kind = a % 4; /* what team B runs meanwhile */
        std::vector<uint8_t> bb(7000), sb(300 * p), rb(300 * p, 0xEE);
        std::vector<uint64_t> in(3000), out(3000, 7);
        crypt_coll_args_t ab = {};
        const int root = a % p;
        if (kind == 0) {
            ab.coll = CRYPT_COLL_BCAST;
            for (size_t i = 0; i < bb.size(); ++i) bb[i] = rank == root ? pattern(root, i, 40, 7000) : 0;
            ab.rbuf = bb.data();
            ab.m    = bb.size();
            ab.root = root;
        } else if (kind == 1) {
            ab.coll = CRYPT_COLL_ALLREDUCE;
            for (size_t i = 0; i < in.size(); ++i) in[i] = (uint64_t)(rank + 1) * (i + 3);
            ab.sbuf      = in.data();
            ab.rbuf      = out.data();
            ab.m         = in.size();
            ab.elem_size = 8;
            ab.op        = sum_u64;
        } else if (kind == 2) {
            ab.coll = CRYPT_COLL_ALLTOALL;
            for (int j = 0; j < p; ++j)
                for (size_t i = 0; i < 300; ++i) sb[j * 300 + i] = pattern(rank, i, 50 + j, 300);
            ab.sbuf = sb.data();
            ab.rbuf = rb.data();
            ab.m    = 300;
        } else {
            ab.coll = CRYPT_COLL_ALLGATHER;
            ab.alg  = -1; /* the score table */
            for (size_t i = 0; i < 300; ++i) sb[i] = pattern(rank, i, 60, 300);
            ab.sbuf = sb.data();
            ab.rbuf = rb.data();
            ab.m    = 300;
        }
        if ((a == 0) && (rank == p - 1)) {
            /* the last rank comes late to the first pair of collectives:
             * every other rank must then see both its tasks in flight
             * (each collective ends with an agreement of all ranks) */
            usleep(100000);
        }
        if ((crypt_coll_task_init(&team, &aa, nullptr, &ta) != CRYPT_COLL_OK) ||
            (crypt_coll_task_init(&team_b, &ab, nullptr, &tb) != CRYPT_COLL_OK)) {
            ok = 0;
            break;
        }
        crypt_coll_status_t st_a = crypt_coll_task_post(ta);
        crypt_coll_status_t st_b = crypt_coll_task_post(tb);
        if (a == 0) {
            /* misuse while in flight: a second task, finalizing, a blocking call */
            crypt_coll_task_t *extra;
            if (st_a == CRYPT_COLL_INPROGRESS) {
                refused &= crypt_coll_task_init(&team, &aa, nullptr, &extra) ==
                           CRYPT_COLL_ERR_PARAM;
                refused &= crypt_coll_task_finalize(ta) == CRYPT_COLL_ERR_PARAM;
                refused &= crypt_coll_allgather(&team, CRYPT_ALLGATHER_C_RING, sa.data(),
                                                ra.data(), m) == CRYPT_COLL_ERR_PARAM;
            }
        }
        if (a == 0) {
            overlapped = (st_a == CRYPT_COLL_INPROGRESS) && (st_b == CRYPT_COLL_INPROGRESS);
        }
        std::thread other;
        if (second_thread) {
            other = std::thread([&st_b, tb] {
                while (st_b == CRYPT_COLL_INPROGRESS) st_b = crypt_coll_task_test(tb);
            });
            while (st_a == CRYPT_COLL_INPROGRESS) st_a = crypt_coll_task_test(ta);
            other.join();
        }
        while ((st_a == CRYPT_COLL_INPROGRESS) || (st_b == CRYPT_COLL_INPROGRESS)) {
            if (st_a == CRYPT_COLL_INPROGRESS) st_a = crypt_coll_task_test(ta);
            if (st_b == CRYPT_COLL_INPROGRESS) st_b = crypt_coll_task_test(tb);
        }
        ok &= (st_a == CRYPT_COLL_OK) && (st_b == CRYPT_COLL_OK);
        ok &= crypt_coll_task_finalize(ta) == CRYPT_COLL_OK;
        ok &= crypt_coll_task_finalize(tb) == CRYPT_COLL_OK;
        for (int r = 0; r < p; ++r)
            for (size_t i = 0; i < m; ++i) ok &= ra[r * m + i] == pattern(r, i, a, m);
        if (kind == 0) {
            for (size_t i = 0; i < bb.size(); ++i) ok &= bb[i] == pattern(root, i, 40, 7000);
        } else if (kind == 1) {
            for (size_t i = 0; i < out.size(); ++i) ok &= out[i] == (uint64_t)p * (p + 1) / 2 * (i + 3);
        } else if (kind == 2) {
            for (int j = 0; j < p; ++j)
                for (size_t i = 0; i < 300; ++i) ok &= rb[j * 300 + i] == pattern(j, i, 50 + rank, 300);
        } else {
            for (int r = 0; r < p; ++r)
                for (size_t i = 0; i < 300; ++i) ok &= rb[r * 300 + i] == pattern(r, i, 60, 300);
        }
        ok &= team.counters.inter_node_plaintext_bytes == 0;
        ok &= team_b.counters.inter_node_plaintext_bytes == 0;
    }
    res->tasks_ok            = ok;
    res->tasks_overlapped    = overlapped;
    res->task_misuse_refused = refused;
    crypt_coll_team_cleanup(&team_b);
}

/* fork p ranks; returns their results (shared memory) */
std::vector<rank_result> run_team(int p, const std::vector<int> &node_of, int tamper_rank,
                                  int only_alg)
{
    size_t bytes = sizeof(rank_result) * p;
    auto *shared = (rank_result*)mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(shared, 0, bytes);
    /* two sets of pipes: the second for a second team (tasks) */
    int fds[2][kMaxRanks][kMaxRanks];
    for (int set = 0; set < 2; ++set) {
        for (int i = 0; i < p; ++i) {
            for (int j = i + 1; j < p; ++j) {
                int sv[2];
                socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
                fcntl(sv[0], F_SETFL, O_NONBLOCK);
                fcntl(sv[1], F_SETFL, O_NONBLOCK);
                fds[set][i][j] = sv[0];
                fds[set][j][i] = sv[1];
            }
        }
    }
    uint8_t secret[32], salt[CRYPT_COLL_TEAM_ID_LEN];
    for (int i = 0; i < 32; ++i) secret[i] = (uint8_t)(i * 7 + 1);
    FILE *urandom = fopen("/dev/urandom", "rb");
    if (!urandom || fread(salt, 1, sizeof(salt), urandom) != sizeof(salt)) abort();
    fclose(urandom);

    /* one shared segment per emulated node, for HS1/HS2 */
    const size_t shm_size = crypt_coll_node_shm_size(p, kSizes[kNumSizes - 1]);
    std::vector<void*> node_shm;
    for (int n = 0; n <= *std::max_element(node_of.begin(), node_of.end()); ++n) {
        node_shm.push_back(mmap(nullptr, shm_size, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    }

    std::vector<pid_t> pids;
    for (int r = 0; r < p; ++r) {
        pid_t pid = fork();
        if (pid == 0) {
            pipes io = {}, io2 = {};
            io.rank    = io2.rank = r;
            io.node_of = io2.node_of = node_of.data();
            io.tamper  = (r == tamper_rank);
            for (int j = 0; j < p; ++j) {
                io.fd[j]  = (j == r) ? -1 : fds[0][r][j];
                io2.fd[j] = (j == r) ? -1 : fds[1][r][j];
            }
            alarm(120); /* a hang fails the test instead of blocking CI */
            run_rank(r, p, node_of.data(), secret, salt, io, io2, &shared[r], only_alg,
                     node_shm[node_of[r]], shm_size);
            _exit(0);
        }
        pids.push_back(pid);
    }
    for (int set = 0; set < 2; ++set) {
        for (int i = 0; i < p; ++i) {
            for (int j = 0; j < p; ++j) {
                if (i != j) close(fds[set][i][j]);
            }
        }
    }
    for (pid_t pid : pids) {
        waitpid(pid, nullptr, 0);
    }
    std::vector<rank_result> out(shared, shared + p);
    munmap(shared, bytes);
    for (void *seg : node_shm) {
        munmap(seg, shm_size);
    }
    return out;
}
