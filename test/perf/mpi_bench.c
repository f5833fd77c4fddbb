/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * MPI benchmarks for the bulk engine, in the manner of the OSU micro
 * benchmarks: ping-pong latency (osu_latency) and multi-pair bandwidth
 * (osu_mbw_mr: the first half of the ranks send windows of messages to the
 * second half). Data is verified once per size, so a fast wrong answer
 * cannot pass for a result.
 *
 *   mpiexec -n 2P mpi_bench [-s SIZES] [-w WINDOW] [-i ITERS]
 *
 * Prints "size latency_us pairs_bw_MBs" rows on rank 0.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *sizes = "65536,262144,1048576,4194304,16777216";
    int rank, nranks, window = 16, iters = 20, opt, pairs, peer, sender;
    char *list, *tok, *save;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (opt = 1; opt + 1 < argc; opt += 2) {
        if (!strcmp(argv[opt], "-s")) sizes = argv[opt + 1];
        else if (!strcmp(argv[opt], "-w")) window = atoi(argv[opt + 1]);
        else if (!strcmp(argv[opt], "-i")) iters = atoi(argv[opt + 1]);
    }
    pairs  = nranks / 2;
    sender = rank < pairs;
    peer   = sender ? rank + pairs : rank - pairs;
    if (rank == 0) {
        printf("# pairs %d, window %d, iterations %d\n", pairs, window, iters);
        printf("%10s %14s %16s\n", "size", "latency_us", "aggregate_MBs");
    }

    list = strdup(sizes);
    for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t len = strtoull(tok, NULL, 0), i;
        uint8_t *buf = malloc(len * window), *rbuf = malloc(len);
        MPI_Request *reqs = malloc(sizeof(*reqs) * window);
        double t0, lat = 0, bw;
        int w, it, bad = 0, allbad;

        for (i = 0; i < len * window; ++i) buf[i] = (uint8_t)(i * 13 + rank);

        /* ping-pong between rank 0 and its peer (the others wait) */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 || rank == pairs) {
            int other = rank == 0 ? pairs : 0;
            for (it = -2; it < iters; ++it) { /* two warm-up rounds */
                if (it == 0) t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(buf, (int)len, MPI_BYTE, other, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)len, MPI_BYTE, other, 1, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, (int)len, MPI_BYTE, other, 1, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    MPI_Send(rbuf, (int)len, MPI_BYTE, other, 1, MPI_COMM_WORLD);
                }
            }
            lat = (MPI_Wtime() - t0) / iters / 2 * 1e6;
            if (rank == 0) {
                for (i = 0; i < len; ++i) {
                    if (rbuf[i] != buf[i]) { bad = 1; break; }
                }
            }
        }

        /* multi-pair bandwidth: windows of nonblocking sends, one ack each */
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (it = 0; it < iters; ++it) {
            for (w = 0; w < window; ++w) {
                if (sender) {
                    MPI_Isend(buf + (size_t)w * len, (int)len, MPI_BYTE, peer, 2,
                              MPI_COMM_WORLD, &reqs[w]);
                } else {
                    MPI_Irecv(buf + (size_t)w * len, (int)len, MPI_BYTE, peer, 2,
                              MPI_COMM_WORLD, &reqs[w]);
                }
            }
            MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
            if (sender) {
                MPI_Recv(rbuf, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Send(rbuf, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
            }
        }
        bw = (double)len * window * iters * pairs / (MPI_Wtime() - t0) / 1e6;
        if (!sender) {
            for (i = 0; i < len; ++i) { /* the last window's first message */
                if (buf[i] != (uint8_t)(i * 13 + peer)) { bad = 1; break; }
            }
        }
        MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &bw, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("%10zu %14.2f %16.1f%s\n", len, lat, bw, allbad ? "  DATA MISMATCH" : "");
        }
        free(buf);
        free(rbuf);
        free(reqs);
    }
    free(list);
    MPI_Finalize();
    return 0;
}
