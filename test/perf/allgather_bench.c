/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * OSU-style all-gather latency (osu_allgather): the average time of
 * MPI_Allgather per size, after warm-up, the maximum over ranks. With the
 * ucx-crypt PMPI adapter preloaded it measures the encrypted algorithm
 * UCX_CRYPT_COLL_TUNE picks; without it, the library's plaintext one.
 * With -n, MPI_Iallgather then MPI_Wait (the nonblocking path: under the
 * coll component, the adapter's tasks).
 *
 *   mpiexec -n P allgather_bench [-i ITERS] [-n]
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 64, 1024, 16384, 65536, 262144, 1048576, 4194304};
    int rank, nranks, iters = 20, it, nonblocking = 0, a;
    MPI_Request req;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "-i") && (a + 1 < argc)) iters = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-n")) nonblocking = 1;
    }
    for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
        size_t m = sizes[s];
        char *sbuf = malloc(m), *rbuf = malloc(m * nranks);
        int n = (m >= 1048576) ? iters / 4 + 2 : iters;
        double t0 = 0, t, tmax;
        memset(sbuf, rank, m);
        for (it = -2; it < n; ++it) {
            if (it == 0) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            if (nonblocking) {
                MPI_Iallgather(sbuf, (int)m, MPI_BYTE, rbuf, (int)m, MPI_BYTE,
                               MPI_COMM_WORLD, &req);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
            } else {
                MPI_Allgather(sbuf, (int)m, MPI_BYTE, rbuf, (int)m, MPI_BYTE,
                              MPI_COMM_WORLD);
            }
        }
        t = (MPI_Wtime() - t0) / n * 1e6;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%zu %.2f\n", m, tmax);
        free(sbuf);
        free(rbuf);
    }
    MPI_Finalize();
    return 0;
}
