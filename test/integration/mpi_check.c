/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mpi_check: MPI point-to-point, one-sided and collective traffic with every
 * byte verified, for the integration tests. Built twice by the test script,
 * once with Open MPI's mpicc and once with MPICH's, so "any UCX-based MPI"
 * is shown with two.
 *
 *   mpiexec -n P mpi_check [-s SIZES]     SIZES comma separated bytes
 *
 * Buffers hold a marker string the wire test looks for in packet captures,
 * interleaved with the sender's rank, the round and the block index, so a
 * block delivered to the wrong place, from the wrong rank or twice fails the
 * check. Every rank prints "MPI OK rank R" and exits 0 only if all matched.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARKER      "UCXCRYPT-MARKER-"
#define MARKER_LEN  (sizeof(MARKER) - 1)
#define BLOCK_LEN   32 /* marker (16) + block index (8) + rank (4) + round (4) */

static int rank, nranks, errors;

static void fill(uint8_t *buf, size_t len, int owner, int round)
{
    uint8_t block[BLOCK_LEN];
    uint64_t index;
    size_t off;

    memcpy(block, MARKER, MARKER_LEN);
    for (off = 0; off < len; off += BLOCK_LEN) {
        index = off / BLOCK_LEN;
        memcpy(block + 16, &index, 8);
        memcpy(block + 24, &owner, 4);
        memcpy(block + 28, &round, 4);
        memcpy(buf + off, block, (len - off < BLOCK_LEN) ? len - off : BLOCK_LEN);
    }
}

static void expect(const char *what, const uint8_t *got, size_t len, int owner,
                   int round)
{
    uint8_t *want = malloc(len ? len : 1);
    size_t i;

    fill(want, len, owner, round);
    for (i = 0; i < len; ++i) {
        if (got[i] != want[i]) {
            fprintf(stderr, "mpi_check: rank %d: %s size %zu from rank %d: "
                    "byte %zu is 0x%02x, expected 0x%02x\n", rank, what, len,
                    owner, i, got[i], want[i]);
            ++errors;
            break;
        }
    }
    free(want);
}

/* ring exchange: everyone sends to the right and receives from the left */
static void check_point_to_point(size_t len, int round)
{
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    uint8_t *sbuf = malloc(len + 1), *rbuf = malloc(len + 1);

    fill(sbuf, len, rank, round);
    memset(rbuf, 0, len + 1);
    MPI_Sendrecv(sbuf, (int)len, MPI_BYTE, right, round, rbuf, (int)len,
                 MPI_BYTE, left, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    expect("sendrecv", rbuf, len, left, round);

    /* nonblocking, in the other direction */
    MPI_Request reqs[2];
    MPI_Status stats[2];
    memset(rbuf, 0, len + 1);
    MPI_Irecv(rbuf, (int)len, MPI_BYTE, right, round + 1, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(sbuf, (int)len, MPI_BYTE, left, round + 1, MPI_COMM_WORLD, &reqs[1]);
    MPI_Waitall(2, reqs, stats);
    expect("isend/irecv", rbuf, len, right, round);
    free(sbuf);
    free(rbuf);
}

/* MPI_Put into the right neighbour's window, MPI_Get from it */
static void check_one_sided(size_t len, int round)
{
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    uint8_t *win_buf = calloc(1, len + 1), *local = malloc(len + 1);
    MPI_Win win;

    /* MPI_Win_create on malloc'd memory: MPICH 4.0.2's MPI_Win_allocate
     * misplaces puts on a node-shared window of odd size (seen here with
     * plain tcp and sm too), which is not what this test is about */
    MPI_Win_create(win_buf, (MPI_Aint)len + 1, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                   &win);
    fill(local, len, rank, round);

    MPI_Win_fence(0, win);
    MPI_Put(local, (int)len, MPI_BYTE, right, 0, (int)len, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    expect("put", win_buf, len, left, round);

    /* now everyone's window holds its left neighbour's pattern: get the
     * right neighbour's window, which holds our own */
    memset(local, 0, len + 1);
    MPI_Get(local, (int)len, MPI_BYTE, right, 0, (int)len, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    expect("get", local, len, rank, round);

    MPI_Win_free(&win);
    free(win_buf);
    free(local);
}

static void check_collectives(size_t len, int round)
{
    uint8_t *sbuf = malloc(len + 1), *rbuf = malloc(len * nranks + 1);
    long long mine = (long long)rank * 1000 + round, sum = 0, want = 0;
    int r;

    fill(sbuf, len, rank, round);
    memset(rbuf, 0, len * nranks + 1);
    MPI_Allgather(sbuf, (int)len, MPI_BYTE, rbuf, (int)len, MPI_BYTE, MPI_COMM_WORLD);
    for (r = 0; r < nranks; ++r) {
        expect("allgather", rbuf + (size_t)r * len, len, r, round);
        want += (long long)r * 1000 + round;
    }
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != want) {
        fprintf(stderr, "mpi_check: rank %d: allreduce %lld, expected %lld\n",
                rank, sum, want);
        ++errors;
    }
    free(sbuf);
    free(rbuf);
}

int main(int argc, char **argv)
{
    const char *sizes = "0,1,8,1000,65536,1048577,4194304";
    char *list, *tok, *save;
    int round = 0, total;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc == 3 && strcmp(argv[1], "-s") == 0) {
        sizes = argv[2];
    }

    list = strdup(sizes);
    for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t len = strtoull(tok, NULL, 0);
        round += 2;
        check_point_to_point(len, round);
        check_one_sided(len, round);
        check_collectives(len, round);
    }
    free(list);

    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total == 0) {
        printf("MPI OK rank %d\n", rank);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
