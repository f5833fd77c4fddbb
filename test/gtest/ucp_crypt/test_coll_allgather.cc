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

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

const size_t kSizes[] = {0, 1, 7, 4096, 1 << 20};
const int kNumSizes   = sizeof(kSizes) / sizeof(kSizes[0]);
const int kMaxRanks   = 8;

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
};

struct pipes {
    int  fd[kMaxRanks];        /* our end towards each rank */
    int  rank;
    const int *node_of;
    int  tamper;               /* flip a bit in the first inter-node send */
};

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
    return 0;
}

void sum_u64(void *inout, const void *in, size_t count, void *)
{
    uint64_t *a = static_cast<uint64_t*>(inout);
    const uint64_t *b = static_cast<const uint64_t*>(in);
    for (size_t i = 0; i < count; ++i) a[i] += b[i];
}

void run_rank(int rank, int p, const int *node_of, const uint8_t *secret,
              const uint8_t *salt, pipes &io, rank_result *res, int only_alg,
              void *node_shm, size_t node_shm_size)
{
    crypt_coll_team_t team;
    if (crypt_coll_team_init(&team, rank, p, node_of, secret, salt,
                             CRYPT_AEAD_BACKEND_OPENSSL, harness_sendrecv, &io) !=
        CRYPT_COLL_OK) {
        return;
    }
    crypt_coll_team_set_node_shm(&team, node_shm, node_shm_size);
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

/* fork p ranks; returns their results (shared memory) */
std::vector<rank_result> run_team(int p, const std::vector<int> &node_of, int tamper_rank,
                                  int only_alg)
{
    size_t bytes = sizeof(rank_result) * p;
    auto *shared = (rank_result*)mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(shared, 0, bytes);
    int fds[kMaxRanks][kMaxRanks];
    for (int i = 0; i < p; ++i) {
        for (int j = i + 1; j < p; ++j) {
            int sv[2];
            socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
            fcntl(sv[0], F_SETFL, O_NONBLOCK);
            fcntl(sv[1], F_SETFL, O_NONBLOCK);
            fds[i][j] = sv[0];
            fds[j][i] = sv[1];
        }
    }
    uint8_t secret[32], salt[CRYPT_COLL_TEAM_SALT_LEN];
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
            pipes io = {};
            io.rank    = r;
            io.node_of = node_of.data();
            io.tamper  = (r == tamper_rank);
            for (int j = 0; j < p; ++j) {
                io.fd[j] = (j == r) ? -1 : fds[r][j];
            }
            alarm(120); /* a hang fails the test instead of blocking CI */
            run_rank(r, p, node_of.data(), secret, salt, io, &shared[r], only_alg,
                     node_shm[node_of[r]], shm_size);
            _exit(0);
        }
        pids.push_back(pid);
    }
    for (int i = 0; i < p; ++i) {
        for (int j = 0; j < p; ++j) {
            if (i != j) close(fds[i][j]);
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

INSTANTIATE_TEST_SUITE_P(shapes, crypt_allgather_test, ::testing::ValuesIn(all_shapes()),
                         [](const ::testing::TestParamInfo<team_shape> &info) {
                             return "p" + std::to_string(info.param.p) + "_N" +
                                    std::to_string(info.param.N) +
                                    (info.param.mapping == CRYPT_COLL_MAP_BLOCK ?
                                     "_block" : "_cyclic");
                         });

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
    setenv("UCX_CRYPT_COLL_NODES", "2:cyclic", 1);
    ASSERT_EQ(crypt_coll_node_map_from_env(4, node_of, error, sizeof(error)), 0);
    EXPECT_EQ(std::vector<int>(node_of, node_of + 4), (std::vector<int>{0, 1, 0, 1}));
    setenv("UCX_CRYPT_COLL_NODES", "2:diagonal", 1);
    EXPECT_NE(crypt_coll_node_map_from_env(4, node_of, error, sizeof(error)), 0);
    EXPECT_NE(std::string(error).find("N:cyclic"), std::string::npos) << error;
    unsetenv("UCX_CRYPT_COLL_NODES");
}
