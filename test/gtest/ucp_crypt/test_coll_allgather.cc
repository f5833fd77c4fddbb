/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Encrypted all-gather, core layer, in a harness of real processes: p forked
 * ranks joined by socket pairs, N emulated nodes (block or cyclic), every
 * algorithm, sizes 0 .. 1 MiB, data verified byte by byte, and the crypto
 * accounting of each rank checked against the algorithm's costs in Table II
 * of the paper (per rank where the table gives them, per node always:
 * every foreign block opened exactly once per node by C-Ring), with zero
 * plaintext bytes between nodes. A rank that tampers with its first frame
 * to another node makes the collective fail on every rank, with no data.
 */
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

namespace {

const size_t kSizes[] = {0, 1, 7, 4096, 1 << 20};
const int kNumSizes   = sizeof(kSizes) / sizeof(kSizes[0]);
const int kMaxRanks   = 8;
unsigned kKeyLen      = 16; /* AES-128; a test may set 32 before run_team */
uint64_t kEpochLimit  = 0;  /* frames per epoch; 0: keyex's limits */

struct rank_result {
    int                   status[CRYPT_ALLGATHER_LAST][kNumSizes];
    int                   data_ok[CRYPT_ALLGATHER_LAST][kNumSizes];
    int                   in_place_ok;
    int                   back_to_back_ok;
    crypt_coll_counters_t counters[CRYPT_ALLGATHER_LAST][kNumSizes];
    int                   done;
    /* bcast and allreduce (run_team with only_alg == -2) */
    int                   bcast_ok, allreduce_ok, alltoall_ok;
    crypt_coll_counters_t bcast_counters, allreduce_counters, alltoall_counters;
    /* allgatherv and alltoallv (run_team with only_alg == -4) */
    int                   agv_status, agv_ok, agv_gaps_ok, agv_in_place_ok;
    int                   atv_status, atv_ok;
    crypt_coll_counters_t agv_counters, atv_counters;
    /* teams made through an out-of-band all-gather (only_alg == -5) */
    int                   oob_env_ok, oob_env_nodes, oob_host_ok, oob_host_nodes;
    int                   oob_node_of[kMaxRanks];
    /* tasks (run_team with only_alg == -3; -6: on two threads) */
    int                   tasks_ok, tasks_overlapped, task_misuse_refused;
    uint32_t              epochs;     /* the team's seal epoch at the end */
};

struct pipes {
    int  fd[kMaxRanks];        /* our end towards each rank */
    int  rank;
    const int *node_of;
    int  tamper;               /* flip a bit in the first inter-node send */
};

/* An active adversary on the wire that redirects a frame: the first
 * inter-node message of `sender` is also delivered to `victim`, in place of
 * what `victim` expects from `displaced` (which is swallowed). Set before
 * the ranks fork; -1: no attack. */
struct redirect_attack {
    int sender, victim, displaced;
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

/* An adversary on the bootstrap's out-of-band all-gather (set before the
 * ranks fork) */
enum bootstrap_attack_t {
    BOOTSTRAP_HONEST,
    BOOTSTRAP_ALTER_HOST,   /* rank 1's host identity rewritten on the way */
    BOOTSTRAP_OTHER_SECRET, /* rank 1 holds another job secret */
    BOOTSTRAP_REPLAY,       /* rank 2's message of an earlier team replayed */
    BOOTSTRAP_SPLICE_HOST,  /* rank 0 gets rank 2's message of an earlier
                               team on another host: rank 2 would move off
                               rank 0's node in rank 0's map only */
    BOOTSTRAP_REPLAY_ALL,   /* rank 1 gets an earlier team's whole
                               transcript, its own message included: the
                               old key and nonces again */
    BOOTSTRAP_OTHER_JOB     /* rank 1 is of another job (same secret) */
};
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

/* irregular sizes: some zero, gaps between the blocks */
size_t v_count(int q) { return (q == 1) ? 0 : (size_t)((q * 977 + 13) % 3000); }
size_t v_pair(int src, int dst) { return (size_t)((src * 3 + dst * 5) % 7) * 200 + (src != dst); }

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

} // namespace

struct team_shape {
    int p, N;
    crypt_coll_mapping_t mapping;
};

class crypt_allgather_test : public ::testing::TestWithParam<team_shape> {
};

TEST_P(crypt_allgather_test, every_algorithm_verified_and_accounted)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    std::vector<int> per_node(N, 0);
    for (int r = 0; r < p; ++r) per_node[node_of[r]]++;
    const bool regular = (p % N == 0);

    auto res = run_team(p, node_of, -1, -1);
    for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(res[r].done) << "rank " << r << " did not finish";
        EXPECT_TRUE(res[r].in_place_ok) << "rank " << r;
    }
    for (int a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
        const char *name = crypt_allgather_alg_name((crypt_allgather_alg_t)a);
        for (int s = 0; s < kNumSizes; ++s) {
            const uint64_t m = kSizes[s];
            std::vector<uint64_t> node_opened(N, 0), node_sealed(N, 0);
            uint64_t max_sealed = 0;
            for (int r = 0; r < p; ++r) {
                SCOPED_TRACE(std::string(name) + " rank " + std::to_string(r) +
                             " size " + std::to_string(m));
                const crypt_coll_counters_t &c = res[r].counters[a][s];
                ASSERT_EQ(res[r].status[a][s], CRYPT_COLL_OK);
                ASSERT_TRUE(res[r].data_ok[a][s]);
                EXPECT_EQ(c.inter_node_plaintext_bytes, 0u);
                node_opened[node_of[r]] += c.bytes_opened;
                node_sealed[node_of[r]] += c.bytes_sealed;
                max_sealed = std::max(max_sealed, c.bytes_sealed);
                if (a == CRYPT_ALLGATHER_NAIVE) {          /* Table II: s_e = m, s_d = (p-1)m */
                    EXPECT_EQ(c.bytes_sealed, m);
                    EXPECT_EQ(c.bytes_opened, (p - 1) * m);
                    EXPECT_EQ(c.open_calls, (uint64_t)(p - 1));
                } else if (a == CRYPT_ALLGATHER_O_RD) {    /* each block at most once */
                    EXPECT_LE(c.bytes_opened, (p - 1) * m);
                } else if (a == CRYPT_ALLGATHER_O_RD2) {   /* one open per round at most */
                    int rounds = 0;
                    for (int d = 1; d < p; d *= 2) ++rounds;
                    EXPECT_LE(c.open_calls, (uint64_t)rounds);
                } else if (a == CRYPT_ALLGATHER_HS1) {     /* r_d <= ceil((N-1)/l) */
                    int l_n = per_node[node_of[r]];
                    EXPECT_LE(c.open_calls, (uint64_t)((N - 1 + l_n - 1) / l_n));
                    EXPECT_LE(c.seal_calls, 1u);
                } else if (a == CRYPT_ALLGATHER_HS2) {     /* s_e = m, joint opening */
                    int l_n = per_node[node_of[r]];
                    EXPECT_EQ(c.bytes_sealed, N > 1 ? m : 0);
                    EXPECT_LE(c.open_calls, (uint64_t)((p - l_n + l_n - 1) / l_n));
                } else if (a == CRYPT_ALLGATHER_C_RING ||
                           a == CRYPT_ALLGATHER_C_RD) {    /* s_e = m, s_d = (N-1)m */
                    EXPECT_EQ(c.bytes_sealed, N > 1 ? m : 0);
                    if (regular) {
                        EXPECT_EQ(c.bytes_opened, (N - 1) * m);
                        EXPECT_EQ(c.open_calls, (uint64_t)(N - 1));
                    }
                }
            }
            for (int n = 0; n < N; ++n) {
                SCOPED_TRACE(std::string(name) + " node " + std::to_string(n) +
                             " size " + std::to_string(m));
                const uint64_t foreign = (uint64_t)(p - per_node[n]) * m;
                /* the four that reach the lower bound of s_d */
                const bool concurrent = (a == CRYPT_ALLGATHER_C_RING) ||
                                        (a == CRYPT_ALLGATHER_C_RD) ||
                                        (a == CRYPT_ALLGATHER_HS1) ||
                                        (a == CRYPT_ALLGATHER_HS2);
                if (concurrent) {
                    /* decrypt once per node: each foreign block exactly once */
                    EXPECT_EQ(node_opened[n], foreign);
                } else if ((a == CRYPT_ALLGATHER_O_RING) &&
                           (shape.mapping == CRYPT_COLL_MAP_BLOCK)) {
                    /* Table II: the entry process opens every block that
                     * comes round the ring, its node's own included */
                    EXPECT_EQ(node_opened[n], N > 1 ? (p - 1) * m : 0);
                }
                if (concurrent) {
                    /* encrypt once: each block sealed once, by its owner */
                    EXPECT_EQ(node_sealed[n], N > 1 ? per_node[n] * m : 0);
                }
            }
            if ((a == CRYPT_ALLGATHER_O_RING) && (shape.mapping == CRYPT_COLL_MAP_BLOCK) &&
                (N > 1)) {
                bool all_two = true;
                for (int n = 0; n < N; ++n) all_two &= per_node[n] >= 2;
                if (all_two) {
                    EXPECT_EQ(max_sealed, (p - 1) * m) << "O-Ring's exit process, Table II";
                }
            }
        }
    }
}

static std::vector<team_shape> all_shapes()
{
    std::vector<team_shape> shapes;
    for (int p = 2; p <= 8; ++p) {
        for (int N = 1; N <= 4 && N <= p; ++N) {
            shapes.push_back({p, N, CRYPT_COLL_MAP_BLOCK});
            if (N > 1 && N < p) shapes.push_back({p, N, CRYPT_COLL_MAP_CYCLIC});
        }
    }
    return shapes;
}

static std::string shape_name(const ::testing::TestParamInfo<team_shape> &info)
{
    return "p" + std::to_string(info.param.p) + "_N" + std::to_string(info.param.N) +
           (info.param.mapping == CRYPT_COLL_MAP_BLOCK ? "_block" : "_cyclic");
}

INSTANTIATE_TEST_SUITE_P(shapes, crypt_allgather_test, ::testing::ValuesIn(all_shapes()),
                         shape_name);

TEST_P(crypt_allgather_test, bcast_allreduce_alltoall_once_per_node)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -2);
    std::vector<uint64_t> node_opened(N, 0), node_sealed(N, 0), ar_opened(N, 0), ar_sealed(N, 0);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].bcast_ok);
        EXPECT_TRUE(res[r].allreduce_ok);
        EXPECT_TRUE(res[r].alltoall_ok);
        EXPECT_EQ(res[r].alltoall_counters.inter_node_plaintext_bytes, 0u);
        /* alltoall: each block to another node sealed once, opened once */
        int foreign = 0;
        for (int j = 0; j < p; ++j) foreign += node_of[j] != node_of[r];
        EXPECT_EQ(res[r].alltoall_counters.bytes_sealed, (uint64_t)foreign * 5000);
        EXPECT_EQ(res[r].alltoall_counters.bytes_opened, (uint64_t)foreign * 5000);
        EXPECT_EQ(res[r].bcast_counters.inter_node_plaintext_bytes, 0u);
        EXPECT_EQ(res[r].allreduce_counters.inter_node_plaintext_bytes, 0u);
        node_opened[node_of[r]] += res[r].bcast_counters.bytes_opened;
        node_sealed[node_of[r]] += res[r].bcast_counters.bytes_sealed;
        ar_opened[node_of[r]]   += res[r].allreduce_counters.bytes_opened;
        ar_sealed[node_of[r]]   += res[r].allreduce_counters.bytes_sealed;
    }
    const uint64_t bm = 300000, am = 100000 * 8; /* the last sizes */
    for (int n = 0; n < N; ++n) {
        SCOPED_TRACE("node " + std::to_string(n));
        bool root_node = (n == node_of[p - 1]);
        /* bcast: sealed once (at the root), opened once by every other node */
        EXPECT_EQ(node_sealed[n], (root_node && N > 1) ? bm : 0);
        EXPECT_EQ(node_opened[n], (root_node || N == 1) ? 0 : bm);
        /* allreduce: each node's result sealed once, the others' opened once */
        EXPECT_EQ(ar_sealed[n], N > 1 ? am : 0);
        EXPECT_EQ(ar_opened[n], (uint64_t)(N - 1) * am);
    }
}

TEST_P(crypt_allgather_test, tasks_of_two_teams_progress_together)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -3);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].tasks_ok);
        EXPECT_TRUE(res[r].task_misuse_refused);
        if (r < p - 1) {
            /* posted while the last rank was late: post returned with both
             * tasks in flight, so neither post nor test waits */
            EXPECT_TRUE(res[r].tasks_overlapped);
        }
    }
}

/* Tasks across threads: a few shapes (one node, several, block and
 * cyclic, odd and even) suffice, and the ThreadSanitizer build runs them */
class crypt_task_thread_test : public crypt_allgather_test {
};

INSTANTIATE_TEST_SUITE_P(shapes, crypt_task_thread_test,
                         ::testing::Values(team_shape{2, 1, CRYPT_COLL_MAP_BLOCK},
                                           team_shape{3, 2, CRYPT_COLL_MAP_BLOCK},
                                           team_shape{5, 2, CRYPT_COLL_MAP_CYCLIC},
                                           team_shape{7, 3, CRYPT_COLL_MAP_BLOCK},
                                           team_shape{8, 4, CRYPT_COLL_MAP_CYCLIC}),
                         shape_name);

TEST_P(crypt_task_thread_test, a_task_finishes_on_another_thread_beside_another_team)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -6);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].tasks_ok);
    }
}

TEST_P(crypt_allgather_test, allgatherv_alltoallv_once_per_node)
{
    const team_shape shape = GetParam();
    const int p = shape.p, N = shape.N;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, shape.mapping, node_of.data()), 0);
    auto res = run_team(p, node_of, -1, -4);
    std::vector<uint64_t> node_bytes(N, 0), sealed(N, 0), opened(N, 0);
    uint64_t total = 0;
    for (int q = 0; q < p; ++q) {
        node_bytes[node_of[q]] += v_count(q);
        total += v_count(q);
    }
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].agv_status, CRYPT_COLL_OK);
        EXPECT_TRUE(res[r].agv_ok);
        EXPECT_TRUE(res[r].agv_gaps_ok) << "bytes between the blocks changed";
        EXPECT_TRUE(res[r].agv_in_place_ok);
        EXPECT_EQ(res[r].atv_status, CRYPT_COLL_OK);
        EXPECT_TRUE(res[r].atv_ok);
        EXPECT_EQ(res[r].agv_counters.inter_node_plaintext_bytes, 0u);
        EXPECT_EQ(res[r].atv_counters.inter_node_plaintext_bytes, 0u);
        sealed[node_of[r]] += res[r].agv_counters.bytes_sealed;
        opened[node_of[r]] += res[r].agv_counters.bytes_opened;
        /* alltoallv: each block to another node sealed once, opened once */
        uint64_t out = 0, in = 0;
        for (int j = 0; j < p; ++j) {
            if (node_of[j] == node_of[r]) continue;
            out += v_pair(r, j);
            in  += v_pair(j, r);
        }
        EXPECT_EQ(res[r].atv_counters.bytes_sealed, out);
        EXPECT_EQ(res[r].atv_counters.bytes_opened, in);
    }
    for (int n = 0; n < N; ++n) {
        SCOPED_TRACE("node " + std::to_string(n));
        /* its own bytes sealed once, every other node's opened once */
        EXPECT_EQ(sealed[n], N > 1 ? node_bytes[n] : 0);
        EXPECT_EQ(opened[n], N > 1 ? total - node_bytes[n] : 0);
    }
}

/* Teams made, used and cleaned up over and over (a team of one: the
 * bootstrap, the key schedule, the AEAD contexts and the frames are all
 * there): after a warm-up, the heap stays flat. */
int self_oob_allgather(void *, const void *sbuf, void *rbuf, size_t len)
{
    memcpy(rbuf, sbuf, len);
    return 0;
}

/* A team of one whose bootstrap message (its hello: the rank's randoms)
 * the test keeps, to recompute the transcript's hash: the first gather is
 * the hellos, the second the confirmations */
int keeping_oob_allgather(void *ctx, const void *sbuf, void *rbuf, size_t len)
{
    auto kept = static_cast<std::vector<uint8_t>*>(ctx);
    memcpy(rbuf, sbuf, len);
    if (kept->empty()) {
        kept->assign((const uint8_t*)sbuf, (const uint8_t*)sbuf + len);
    }
    return 0;
}

/* A team of one made through the bootstrap, and the transcript's hash,
 * recomputed from the message the test's gather kept */
void team_of_one(crypt_coll_team_t &t, uint8_t seed, unsigned key_len,
                 uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN])
{
    uint8_t secret[32];
    for (size_t i = 0; i < sizeof(secret); ++i) secret[i] = (uint8_t)(i * seed + 3);
    std::vector<uint8_t> hello;
    crypt_coll_oob_t oob = {keeping_oob_allgather, &hello, 0, 1, nullptr};
    ASSERT_EQ(crypt_coll_team_create(&t, &oob, nullptr, secret, key_len,
                                     CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                     nullptr), CRYPT_COLL_OK);
    ASSERT_EQ(keyex_hash(hello.data(), hello.size(), team_id), KEYEX_OK);
}

/* The team's name where others see it (the collective lane's headers) is
 * SHA-256 of a label and the transcript's hash, never bytes of that hash:
 * the transcript is an input of the team key that crosses only inside the
 * MPI library's traffic, so a recording of the lane plus a job secret
 * stolen later must not give it (issue 29 item 5) */
TEST(crypt_coll_team_create, the_public_name_shows_nothing_of_the_key_input)
{
    crypt_coll_team_t t;
    uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN];
    ASSERT_NO_FATAL_FAILURE(team_of_one(t, 11, 16, team_id));
    const char label[] = "ucx-crypt team name";
    std::vector<uint8_t> input(label, label + sizeof(label) - 1);
    input.insert(input.end(), team_id, team_id + CRYPT_COLL_TEAM_ID_LEN);
    uint8_t hash[KEYEX_TRANSCRIPT_LEN];
    ASSERT_EQ(keyex_hash(input.data(), input.size(), hash), KEYEX_OK);
    uint64_t expected;
    memcpy(&expected, hash, sizeof(expected));
    EXPECT_EQ(t.public_id, expected);
    for (size_t at = 0; at + sizeof(uint64_t) <= CRYPT_COLL_TEAM_ID_LEN; ++at) {
        EXPECT_NE(memcmp(&t.public_id, team_id + at, sizeof(uint64_t)), 0)
                << "the name is bytes of the key input, at " << at;
    }
    crypt_coll_team_cleanup(&t);
}

/* The transcript's hash is, beside the job secret, the team key's only
 * input: no copy of it stays in the team, in use or after its cleanup (a
 * core dump or a read of the heap later, plus the key file, gave the lane
 * key: crypto review N2) */
TEST(crypt_coll_team_create, the_team_keeps_no_copy_of_the_key_input)
{
    crypt_coll_team_t t;
    uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN];
    ASSERT_NO_FATAL_FAILURE(team_of_one(t, 7, 32, team_id));
    auto holds_it = [&]() {
        const uint8_t *bytes = reinterpret_cast<const uint8_t*>(&t);
        for (size_t at = 0; at + 8 <= sizeof(t); ++at) {
            if (memcmp(bytes + at, team_id, 8) == 0) return true;
        }
        return false;
    };
    EXPECT_FALSE(holds_it()) << "the team holds the transcript's hash";
    crypt_coll_team_cleanup(&t);
    EXPECT_FALSE(holds_it()) << "the transcript's hash after the cleanup";
}

TEST(crypt_coll_team_create, create_destroy_cycles_keep_memory_flat)
{
    if (test_util::under_sanitizer()) {
        GTEST_SKIP() << "a sanitizer's allocator hides what the process "
                        "holds (LeakSanitizer checks the ASan build)";
    }
    const int warmup = 50, cycles = 2000;
    uint8_t secret[32];
    for (size_t i = 0; i < sizeof(secret); ++i) secret[i] = (uint8_t)(i * 37 + 1);
    crypt_coll_oob_t oob = {self_oob_allgather, nullptr, 0, 1};
    auto cycle = [&](int seq) {
        crypt_coll_team_t t;
        ASSERT_EQ(crypt_coll_team_create(&t, &oob, nullptr, secret, (seq & 1) ? 32 : 16,
                                         CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                         nullptr), CRYPT_COLL_OK);
        std::vector<uint8_t> mine(1000, (uint8_t)seq), all(1000, 0);
        EXPECT_EQ(crypt_coll_allgather(&t, CRYPT_ALLGATHER_C_RING, mine.data(), all.data(),
                                       mine.size()), CRYPT_COLL_OK);
        EXPECT_EQ(all, mine);
        crypt_coll_team_cleanup(&t);
    };
    for (int i = 0; i < warmup; ++i) cycle(i);
    size_t heap0 = test_util::heap_in_use();
    for (int i = 0; i < cycles; ++i) {
        cycle(warmup + i);
        ASSERT_FALSE(HasFatalFailure()) << "cycle " << i;
    }
    long growth = (long)test_util::heap_in_use() - (long)heap0;
    printf("  %d teams after %d: heap %+ld bytes\n", cycles, warmup, growth);
    /* a leaked team key or AEAD context is hundreds of bytes a cycle */
    EXPECT_LT(growth, 16L * cycles);
}

TEST(crypt_coll_team_create, bootstrap_through_an_out_of_band_allgather)
{
    const int p = 5;
    std::vector<int> node_of(p), want(p);
    ASSERT_EQ(crypt_coll_node_map(p, 2, CRYPT_COLL_MAP_BLOCK, node_of.data()), 0);
    ASSERT_EQ(crypt_coll_node_map(p, 3, CRYPT_COLL_MAP_CYCLIC, want.data()), 0);
    setenv("UCX_CRYPT_COLL_NODES", "3:cyclic", 1); /* inherited by the ranks */
    auto res = run_team(p, node_of, -1, -5);
    unsetenv("UCX_CRYPT_COLL_NODES");
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_TRUE(res[r].oob_env_ok) << "every rank derived the same key";
        EXPECT_EQ(res[r].oob_env_nodes, 3);
        EXPECT_EQ(std::vector<int>(res[r].oob_node_of, res[r].oob_node_of + p), want);
        EXPECT_TRUE(res[r].oob_host_ok) << "AES-256";
        EXPECT_EQ(res[r].oob_host_nodes, 1) << "one host: one node";
    }
}

/* The bootstrap under attack, on the out-of-band all-gather: an altered
 * or foreign message (another job secret, another job) is refused before
 * anything in it is used; a replayed or spliced message of an earlier team
 * passes its MAC, but the ranks that took it saw other messages than the
 * rest, and the second round (every rank's MAC of its rank and what it
 * saw) tells them all; a rank given a whole old transcript finds its own
 * message replaced. No rank makes a team: no old key, no node map that
 * differs between ranks, no frame in clear. */
class crypt_coll_bootstrap_attack_test : public ::testing::TestWithParam<int> {
};

std::string bootstrap_attack_name(const ::testing::TestParamInfo<int> &info)
{
    const char *names[] = {"honest", "altered_host", "other_secret", "replay",
                           "splice_host", "replay_all", "other_job"};
    return names[info.param];
}

TEST_P(crypt_coll_bootstrap_attack_test, refused_on_every_rank)
{
    const int p = 4;
    std::vector<int> node_of = {0, 0, 1, 1};
    bootstrap_attack = (bootstrap_attack_t)GetParam();
    auto res = run_team(p, node_of, -1, -5);
    const bootstrap_attack_t attack = bootstrap_attack;
    bootstrap_attack = BOOTSTRAP_HONEST;
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        if ((attack == BOOTSTRAP_REPLAY) || (attack == BOOTSTRAP_REPLAY_ALL)) {
            EXPECT_EQ(res[r].oob_env_ok, CRYPT_COLL_OK) << "the first team";
        }
        EXPECT_EQ(res[r].oob_host_ok, CRYPT_COLL_ERR_AUTH)
                << "a rank made a team from what some ranks did not see";
    }
}

INSTANTIATE_TEST_SUITE_P(attacks, crypt_coll_bootstrap_attack_test,
                         ::testing::Values((int)BOOTSTRAP_ALTER_HOST,
                                           (int)BOOTSTRAP_OTHER_SECRET,
                                           (int)BOOTSTRAP_REPLAY,
                                           (int)BOOTSTRAP_SPLICE_HOST,
                                           (int)BOOTSTRAP_REPLAY_ALL,
                                           (int)BOOTSTRAP_OTHER_JOB),
                         bootstrap_attack_name);

/* Every algorithm on AES-256 team keys that move to a new epoch every two
 * frames a rank seals: ranks cross epochs at their own pace, receivers
 * follow the epoch in the frame header, data verified. */
TEST(crypt_coll_epochs, every_algorithm_across_many_epochs_aes256)
{
    const int p = 6;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, 3, CRYPT_COLL_MAP_CYCLIC, node_of.data()), 0);
    kKeyLen     = 32;
    kEpochLimit = 2;
    auto res = run_team(p, node_of, -1, -1);
    kKeyLen     = 16;
    kEpochLimit = 0;
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        for (int a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
            for (int s = 0; s < kNumSizes; ++s) {
                EXPECT_EQ(res[r].status[a][s], CRYPT_COLL_OK) << crypt_allgather_alg_name(
                        (crypt_allgather_alg_t)a) << " size " << kSizes[s];
                EXPECT_TRUE(res[r].data_ok[a][s]);
            }
        }
        EXPECT_GT(res[r].epochs, 10u) << "the epochs moved on";
    }
}

TEST(crypt_allgatherv_tamper, forged_node_frame_fails_every_rank_with_no_data)
{
    const int p = 6, N = 3;
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, CRYPT_COLL_MAP_BLOCK, node_of.data()), 0);
    auto res = run_team(p, node_of, 2 /* node 1's leader */, -4);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].agv_status, CRYPT_COLL_ERR_AUTH);
        EXPECT_FALSE(res[r].agv_ok);
        EXPECT_TRUE(res[r].agv_gaps_ok) << "failure zeroes the blocks, not the gaps";
        EXPECT_EQ(res[r].atv_status, CRYPT_COLL_OK) << "the next collective is fine";
    }
}

class crypt_allgather_tamper_test : public ::testing::TestWithParam<int> {
};

TEST_P(crypt_allgather_tamper_test, forged_frame_fails_every_rank_with_no_data)
{
    const int p = 6, N = 3, alg = GetParam();
    std::vector<int> node_of(p);
    ASSERT_EQ(crypt_coll_node_map(p, N, CRYPT_COLL_MAP_BLOCK, node_of.data()), 0);
    /* rank 1 is its node's exit (HS: rank 0 is its node's leader, the
     * only rank that talks to other nodes): its first frame is forged */
    int tamperer = (alg == CRYPT_ALLGATHER_HS1 || alg == CRYPT_ALLGATHER_HS2) ? 0 : 1;
    auto res = run_team(p, node_of, tamperer, alg);
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].status[alg][3], CRYPT_COLL_ERR_AUTH);
        EXPECT_FALSE(res[r].data_ok[alg][3]) << "an error must come with no data";
    }
}

/* O-RD2 with every rank on its own node: in round 0 rank r receives the
 * merged frame of rank r + 1. The adversary hands rank 0 the frame rank 2
 * sealed for rank 1 instead. Same collective, same round, same length: only
 * the sealer and the receiver tell the two apart, so a frame accepted from
 * any sealer would put block 2 where block 1 belongs, as success. */
TEST(crypt_allgather_redirect, frame_of_another_sender_fails_every_rank_with_no_data)
{
    const int p = 4;
    std::vector<int> node_of = {0, 1, 2, 3};
    redirect = {2, 0, 1};
    auto res = run_team(p, node_of, -1, CRYPT_ALLGATHER_O_RD2);
    redirect = {-1, -1, -1};
    for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(res[r].done);
        EXPECT_EQ(res[r].status[CRYPT_ALLGATHER_O_RD2][3], CRYPT_COLL_ERR_AUTH);
        EXPECT_FALSE(res[r].data_ok[CRYPT_ALLGATHER_O_RD2][3])
                << "an error must come with no data";
    }
}

INSTANTIATE_TEST_SUITE_P(algorithms, crypt_allgather_tamper_test,
                         ::testing::Range(0, (int)CRYPT_ALLGATHER_LAST),
                         [](const ::testing::TestParamInfo<int> &info) {
                             std::string n = crypt_allgather_alg_name(
                                     (crypt_allgather_alg_t)info.param);
                             for (auto &ch : n) if (ch == '-') ch = '_';
                             return n;
                         });

TEST(crypt_coll_node_map, block_cyclic_and_environment)
{
    int node_of[7];
    ASSERT_EQ(crypt_coll_node_map(7, 3, CRYPT_COLL_MAP_BLOCK, node_of), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 7), (std::vector<int>{0, 0, 0, 1, 1, 2, 2}));
    ASSERT_EQ(crypt_coll_node_map(7, 3, CRYPT_COLL_MAP_CYCLIC, node_of), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 7), (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
    EXPECT_NE(crypt_coll_node_map(3, 4, CRYPT_COLL_MAP_BLOCK, node_of), 0);

    char error[128];
    ASSERT_EQ(crypt_coll_node_map_parse("2:cyclic", 4, node_of, error, sizeof(error)), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 4), (std::vector<int>{0, 1, 0, 1}));
    EXPECT_NE(crypt_coll_node_map_parse("2:diagonal", 4, node_of, error, sizeof(error)), 0);
    EXPECT_NE(std::string(error).find("N:cyclic"), std::string::npos) << error;
    EXPECT_NE(crypt_coll_node_map_parse("", 4, node_of, error, sizeof(error)), 0);
}

TEST(crypt_coll_score, default_table_and_tune_strings)
{
    crypt_coll_team_t team;
    const int node_of[4] = {0, 0, 1, 1};
    uint8_t secret[32] = {1}, salt[CRYPT_COLL_TEAM_ID_LEN] = {2};
    ASSERT_EQ(crypt_coll_team_init(&team, 0, 4, node_of, secret, salt, 16,
                                   CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv,
                                   nullptr), CRYPT_COLL_OK);
    auto sel = [&](size_t m, const char *tune) {
        return std::string(crypt_allgather_alg_name(
                crypt_coll_allgather_select(&team, m, tune)));
    };
    /* Table III without a node segment: O-RD2 small, C-Ring from 4 KiB */
    EXPECT_EQ(sel(0, nullptr), "o-rd2");
    EXPECT_EQ(sel(4095, nullptr), "o-rd2");
    EXPECT_EQ(sel(4096, nullptr), "c-ring");
    EXPECT_EQ(sel(1 << 20, nullptr), "c-ring");
    /* with a segment that holds 64 KiB: HS2 up to there */
    std::vector<uint8_t> seg(crypt_coll_node_shm_size(4, CRYPT_COLL_HS_DEFAULT_MAX));
    crypt_coll_team_set_node_shm(&team, seg.data(), seg.size());
    EXPECT_EQ(sel(8192, nullptr), "hs2");
    EXPECT_EQ(sel(CRYPT_COLL_HS_DEFAULT_MAX, nullptr), "hs2");
    EXPECT_EQ(sel(CRYPT_COLL_HS_DEFAULT_MAX + 1, nullptr), "c-ring");
    /* tune strings, UCC style: first matching entry wins */
    EXPECT_EQ(sel(100, "allgather:c-rd"), "c-rd");
    EXPECT_EQ(sel(100, "allgather:0-4k:naive,4k-inf:o-ring"), "naive");
    EXPECT_EQ(sel(5000, "allgather:0-4k:naive,4k-inf:o-ring"), "o-ring");
    EXPECT_EQ(sel(3 << 20, "allgather:0-1m:naive,1m-2m:o-rd"), "c-ring") << "no entry: table";
    EXPECT_EQ(sel(1 << 20, "allgather:0-1m:naive"), "naive") << "ranges are inclusive";
    EXPECT_EQ(sel(100, "allgather:0-4k:nonsense,hs1"), "hs1") << "unknown names skipped";
    EXPECT_EQ(sel(100, "bcast:0-inf:naive"), "o-rd2") << "another collective's string";
    EXPECT_EQ(sel(100, "allgather:12x-3:naive"), "o-rd2") << "malformed range";
    /* HS asked for, but the segment cannot hold the message */
    EXPECT_EQ(sel(1 << 20, "allgather:hs1"), "c-ring");
    crypt_coll_team_set_node_shm(&team, nullptr, 0);
    EXPECT_EQ(sel(100, "allgather:hs2"), "c-ring");
    EXPECT_EQ(crypt_allgather_alg_by_name("c-rd", 4), CRYPT_ALLGATHER_C_RD);
    EXPECT_EQ(crypt_allgather_alg_by_name("c-r", 3), -1);
    /* sizes that are no sizes (the fuzzer found the negative one: it was
     * converted to size_t, which is undefined) */
    EXPECT_EQ(sel(100, "allgather:-11111:naive"), "o-rd2");
    EXPECT_EQ(sel(100, "allgather:nan-inf:naive"), "o-rd2");
    EXPECT_EQ(sel(100, "allgather:0-1e400:naive"), "naive") << "huge: the largest";
    EXPECT_FALSE(crypt_coll_tune_valid("allgather:-5:naive"));
    EXPECT_FALSE(crypt_coll_tune_valid("allgather:0-4k:naive,"));
    EXPECT_FALSE(crypt_coll_tune_valid("allgather:0-4k:nonsense"));
    EXPECT_TRUE(crypt_coll_tune_valid("allgather:0-4k:naive,4k-inf:o-ring"));
    EXPECT_TRUE(crypt_coll_tune_valid("allgather:hs2"));
    crypt_coll_team_cleanup(&team);
}
