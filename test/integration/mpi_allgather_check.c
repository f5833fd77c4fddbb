/*
 * mpi_allgather_check: MPI_Allgather, MPI_Bcast, MPI_Allreduce,
 * MPI_Alltoall, MPI_Allgatherv and MPI_Alltoallv (through the ucx-crypt adapter where it is loaded: the PMPI
 * library or Open MPI's coll component) against results every rank
 * computes for itself, byte for byte (never against the library's own
 * collectives: under the coll component those reach the adapter too):
 * sizes 1 B .. 1 MiB, MPI_INT as well as MPI_BYTE, MPI_IN_PLACE, a split
 * and a duplicated communicator, calls back to back. Every rank prints
 * "COLLECTIVES OK rank R" and exits 0 only if all matched.
 * With -m, every buffer is the marker string the wire tests look for.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors, use_marker;
static const char marker[] = "UCXCRYPT-MARKER-";

static void check(MPI_Comm comm, size_t count, MPI_Datatype type, int in_place,
                  int round, const char *what)
{
    int rank, size, tsize, i;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Type_size(type, &tsize);
    size_t m = count * (size_t)tsize;
    uint8_t *mine = malloc(m + 1), *got = malloc(m * size + 1), *want = malloc(m * size + 1);

    for (size_t b = 0; b < m; ++b) {
        mine[b] = use_marker ? (uint8_t)marker[b % (sizeof(marker) - 1)] :
                               (uint8_t)(rank * 31 + b * 7 + round);
    }
    memset(got, 0xEE, m * size);
    if (in_place) {
        memcpy(got + (size_t)rank * m, mine, m);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got, (int)count, type, comm);
    } else {
        MPI_Allgather(mine, (int)count, type, got, (int)count, type, comm);
    }
    if (use_marker) {
        /* no reference call: it would put plaintext on the wire itself */
        for (size_t b = 0; b < m * size; ++b) {
            want[b] = (uint8_t)marker[(b % m) % (sizeof(marker) - 1)];
        }
    } else {
        for (size_t b = 0; b < m * size; ++b) {
            want[b] = (uint8_t)((b / m) * 31 + (b % m) * 7 + round);
        }
    }
    if (memcmp(got, want, m * size)) {
        for (i = 0; i < (int)(m * size) && got[i] == want[i]; ++i) {}
        fprintf(stderr, "mpi_allgather_check: rank %d: %s, %zu bytes: differs at %d\n",
                rank, what, m, i);
        ++errors;
    }
    free(mine);
    free(got);
    free(want);
}

/* MPI_Bcast, MPI_Allreduce and MPI_Alltoall against what they must give */
static void check_bcast_allreduce(MPI_Comm comm, int round)
{
    int rank, size, i, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (n = 1; n <= 200000; n *= 50) {
        long long *a = malloc(sizeof(*a) * n), *b = malloc(sizeof(*b) * n);
        double *x = malloc(sizeof(*x) * n), *y = malloc(sizeof(*y) * n);
        int *mx = malloc(sizeof(*mx) * n), *my = malloc(sizeof(*my) * n);
        unsigned char *bb = malloc(n), *bw = malloc(n);
        for (i = 0; i < n; ++i) {
            a[i] = (long long)(rank + 1) * (i + round);
            x[i] = (rank + 1) * 0.5 + i;
            mx[i] = (rank * 7 + i) % 13;
            bb[i] = bw[i] = (unsigned char)(rank == size - 1 ? i * 3 + round : 0);
        }
        MPI_Allreduce(a, b, n, MPI_LONG_LONG, MPI_SUM, comm);
        long long *ref = malloc(sizeof(*ref) * n);
        for (i = 0; i < n; ++i) ref[i] = (long long)(i + round) * size * (size + 1) / 2;
        if (memcmp(b, ref, sizeof(*b) * n)) { fprintf(stderr, "allreduce sum differs\n"); ++errors; }
        MPI_Allreduce(x, y, n, MPI_DOUBLE, MPI_SUM, comm);
        /* halves and integers: exact in any order of summation */
        double *dref = malloc(sizeof(*dref) * n);
        for (i = 0; i < n; ++i) dref[i] = 0.5 * size * (size + 1) / 2 + (double)size * i;
        for (i = 0; i < n; ++i) {
            if (y[i] < dref[i] * (1 - 1e-12) - 1e-12 || y[i] > dref[i] * (1 + 1e-12) + 1e-12) {
                fprintf(stderr, "allreduce double differs at %d\n", i); ++errors; break;
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, mx, n, MPI_INT, MPI_MAX, comm);
        int *iref = malloc(sizeof(*iref) * n);
        for (i = 0; i < n; ++i) iref[i] = ((size - 1) * 7 + i) % 13;
        for (int r = 0; r < size; ++r) for (i = 0; i < n; ++i)
            if ((r * 7 + i) % 13 > iref[i]) iref[i] = (r * 7 + i) % 13;
        if (memcmp(mx, iref, sizeof(*mx) * n)) { fprintf(stderr, "allreduce max differs\n"); ++errors; }
        {
            /* alltoall: rank r's block j is r*1000+j, repeated */
            int per = n < 1000 ? n : 1000;
            int *as = malloc(sizeof(int) * per * size), *ar = malloc(sizeof(int) * per * size);
            int *aw = malloc(sizeof(int) * per * size);
            for (int j = 0; j < size; ++j) for (i = 0; i < per; ++i) as[j * per + i] = rank * 1000 + j + i * 7;
            MPI_Alltoall(as, per, MPI_INT, ar, per, MPI_INT, comm);
            for (int r = 0; r < size; ++r) for (i = 0; i < per; ++i) aw[r * per + i] = r * 1000 + rank + i * 7;
            if (memcmp(ar, aw, sizeof(int) * per * size)) { fprintf(stderr, "alltoall differs\n"); ++errors; }
            free(as); free(ar); free(aw);
        }
        MPI_Bcast(bb, n, MPI_BYTE, size - 1, comm);
        for (i = 0; i < n; ++i) bw[i] = (unsigned char)(i * 3 + round);
        if (memcmp(bb, bw, n)) { fprintf(stderr, "bcast differs\n"); ++errors; }
        (void)my;
        free(a); free(b); free(x); free(y); free(mx); free(my); free(bb); free(bw);
        free(ref); free(dref); free(iref);
    }
}

/* MPI_Allgatherv (gaps between the blocks, an empty block, in place) and
 * MPI_Alltoallv (a length per pair) against what they must give */
static int v_pair(int src, int dst) { return ((src * 3 + dst * 5) % 7) * 100 + 1; }

static void check_v(MPI_Comm comm, int round)
{
    int rank, size, q, i, extent = 0, ok = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (size == 1) {
        /* MPICH 4.0.2 places a one-rank MPI_Allgatherv at offset 0 whatever
         * the displacement (plain MPICH, no adapter: the adapter leaves
         * one-node communicators to the library) */
        return;
    }
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    for (q = 0; q < size; ++q) {
        counts[q] = (q == 1) ? 0 : (q * 37 + round) % 500 + 1;
        displs[q] = extent + 2; /* two ints of gap before each block */
        extent    = displs[q] + counts[q];
    }
    int *mine = malloc(sizeof(int) * (counts[rank] + 1)), *all = malloc(sizeof(int) * extent);
    for (i = 0; i < counts[rank]; ++i) mine[i] = rank * 100000 + i + round;
    for (int pass = 0; pass < 2; ++pass) { /* separate buffers, then in place */
        for (i = 0; i < extent; ++i) all[i] = -1;
        if (pass == 0) {
            MPI_Allgatherv(mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT, comm);
        } else {
            memcpy(all + displs[rank], mine, sizeof(int) * counts[rank]);
            MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_INT, comm);
        }
        for (q = 0; q < size; ++q) {
            for (i = 0; i < counts[q]; ++i) ok &= all[displs[q] + i] == q * 100000 + i + round;
            ok &= (all[displs[q] - 1] == -1) && (all[displs[q] - 2] == -1);
        }
    }
    if (!ok) { fprintf(stderr, "allgatherv differs\n"); ++errors; }

    int *sc = malloc(sizeof(int) * size), *sd = malloc(sizeof(int) * size);
    int *rc = malloc(sizeof(int) * size), *rd = malloc(sizeof(int) * size), so = 0, ro = 0;
    for (q = 0; q < size; ++q) {
        sc[q] = v_pair(rank, q); sd[q] = so; so += sc[q];
        rc[q] = v_pair(q, rank); rd[q] = ro; ro += rc[q];
    }
    int *sb = malloc(sizeof(int) * so), *rb = malloc(sizeof(int) * ro);
    for (q = 0; q < size; ++q) for (i = 0; i < sc[q]; ++i) sb[sd[q] + i] = rank * 1000000 + q * 1000 + i;
    MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, comm);
    ok = 1;
    for (q = 0; q < size; ++q) for (i = 0; i < rc[q]; ++i) ok &= rb[rd[q] + i] == q * 1000000 + rank * 1000 + i;
    if (!ok) { fprintf(stderr, "alltoallv differs\n"); ++errors; }
    free(counts); free(displs); free(mine); free(all);
    free(sc); free(sd); free(rc); free(rd); free(sb); free(rb);
}

/* -s BYTES ITER: steady state, the adapter's MPI_Allgather only (no
 * reference run through the MPI library), every block checked against the
 * pattern its owner wrote; the test compares the transport's sealed bytes
 * of such a run with and without the collective lane. */
static int steady(size_t n, int iters)
{
    int rank, size, it, r;
    uint8_t *mine, *all;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mine = malloc(n);
    all  = malloc(n * (size_t)size);
    for (it = 0; it < iters; ++it) {
        for (size_t i = 0; i < n; ++i) mine[i] = (uint8_t)(rank * 31 + it * 7 + i);
        MPI_Allgather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, MPI_COMM_WORLD);
        for (r = 0; r < size; ++r) {
            for (size_t i = 0; i < n; ++i) {
                if (all[(size_t)r * n + i] != (uint8_t)(r * 31 + it * 7 + i)) {
                    fprintf(stderr, "steady: rank %d block %d byte %zu differs\n",
                            rank, r, i);
                    ++errors;
                    break;
                }
            }
        }
    }
    free(mine);
    free(all);
    return errors;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 7, 4096, 65536, 1 << 20};
    int rank, total, round = 0;
    MPI_Comm split, dup;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    use_marker = (argc > 1) && !strcmp(argv[1], "-m");
    if ((argc > 3) && !strcmp(argv[1], "-s")) {
        steady((size_t)atol(argv[2]), atoi(argv[3]));
        MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (total == 0) printf("STEADY OK rank %d\n", rank);
        MPI_Finalize();
        return total ? 1 : 0;
    }
    for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
        check(MPI_COMM_WORLD, sizes[s], MPI_BYTE, 0, ++round, "bytes");
        check(MPI_COMM_WORLD, sizes[s], MPI_BYTE, 1, ++round, "in place");
    }
    check(MPI_COMM_WORLD, 1000, MPI_INT, 0, ++round, "ints");
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    check(split, 3000, MPI_BYTE, 0, ++round, "split communicator");
    check(dup, 3000, MPI_BYTE, 0, ++round, "duplicated communicator");
    check(dup, 3000, MPI_BYTE, 0, ++round, "back to back");
    if (!use_marker) {
        check_bcast_allreduce(MPI_COMM_WORLD, ++round);
        check_bcast_allreduce(split, ++round);
        check_v(MPI_COMM_WORLD, ++round);
        check_v(split, ++round);
    }
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);

    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total == 0) printf("COLLECTIVES OK rank %d\n", rank);
    MPI_Finalize();
    return total ? 1 : 0;
}
