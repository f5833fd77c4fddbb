/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mpi_allgather_check: MPI_Allgather, MPI_Bcast, MPI_Allreduce,
 * MPI_Alltoall, MPI_Allgatherv and MPI_Alltoallv (through the ucx-crypt adapter where it is loaded: the PMPI
 * library or Open MPI's coll component) against results every rank
 * computes for itself, byte for byte (never against the library's own
 * collectives: under the coll component those reach the adapter too):
 * sizes 1 B .. 1 MiB, MPI_INT as well as MPI_BYTE, MPI_IN_PLACE, a split
 * and a duplicated communicator, calls back to back, and the nonblocking
 * forms (MPI_Iallgather, ...) outstanding together. Every rank prints
 * "COLLECTIVES OK rank R" and exits 0 only if all matched.
 * With -m, every buffer is the marker string the wire tests look for;
 * with -n, only the nonblocking forms run (and large ones on two
 * communicators at once).
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

/* The nonblocking forms, all outstanding at once on `comm` and on
 * `other` (posted in the same order on every rank, as MPI requires; the
 * first collective on `other` is one of them), a
 * blocking all-gather posted while they are, progressed by MPI_Testall
 * alone; every result against what it must give */
static void check_nonblocking(MPI_Comm comm, MPI_Comm other, int round)
{
    enum { AG = 65536, BC = 100000, AR = 50000, AA = 1000 };
    int rank, size, orank, osize, q, i, ok, done = 0;
    MPI_Request req[8];
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(other, &orank);
    MPI_Comm_size(other, &osize);

    uint8_t *agm = malloc(AG), *ag = malloc((size_t)AG * size);
    uint8_t *bc = malloc(BC);
    long long *ars = malloc(sizeof(long long) * AR), *arr = malloc(sizeof(long long) * AR);
    int *aas = malloc(sizeof(int) * AA * size), *aar = malloc(sizeof(int) * AA * size);
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size), extent = 0;
    int *sc = malloc(sizeof(int) * size), *sd = malloc(sizeof(int) * size);
    int *rc = malloc(sizeof(int) * size), *rd = malloc(sizeof(int) * size), so = 0, ro = 0;
    uint8_t *om = malloc(3000), *oall = malloc((size_t)3000 * osize);
    int small_mine = rank + round, *small_all = malloc(sizeof(int) * size);

    for (i = 0; i < AG; ++i) agm[i] = (uint8_t)(rank * 31 + i * 7 + round);
    for (i = 0; i < BC; ++i) bc[i] = (uint8_t)(rank == 0 ? i * 5 + round : 0);
    for (i = 0; i < AR; ++i) ars[i] = (long long)(rank + 1) * (i + round);
    for (q = 0; q < size; ++q) for (i = 0; i < AA; ++i) aas[q * AA + i] = rank * 1000 + q + i * 7;
    for (q = 0; q < size; ++q) {
        counts[q] = (q * 37 + round) % 500 + 1;
        displs[q] = extent + 2;
        extent    = displs[q] + counts[q];
        sc[q] = v_pair(rank, q); sd[q] = so; so += sc[q];
        rc[q] = v_pair(q, rank); rd[q] = ro; ro += rc[q];
    }
    int *vm = malloc(sizeof(int) * counts[rank]), *vall = malloc(sizeof(int) * extent);
    int *sb = malloc(sizeof(int) * so), *rb = malloc(sizeof(int) * ro);
    for (i = 0; i < counts[rank]; ++i) vm[i] = rank * 100000 + i + round;
    for (i = 0; i < extent; ++i) vall[i] = -1;
    for (q = 0; q < size; ++q) for (i = 0; i < sc[q]; ++i) sb[sd[q] + i] = rank * 1000000 + q * 1000 + i;
    for (i = 0; i < 3000; ++i) om[i] = (uint8_t)(orank * 13 + i + round);

    MPI_Iallgather(agm, AG, MPI_BYTE, ag, AG, MPI_BYTE, comm, &req[0]);
    MPI_Iallgather(om, 3000, MPI_BYTE, oall, 3000, MPI_BYTE, other, &req[1]);
    MPI_Ibcast(bc, BC, MPI_BYTE, 0, comm, &req[2]);
    MPI_Iallreduce(ars, arr, AR, MPI_LONG_LONG, MPI_SUM, comm, &req[3]);
    /* blocking, behind the four before it on `comm` */
    MPI_Allgather(&small_mine, 1, MPI_INT, small_all, 1, MPI_INT, comm);
    MPI_Ialltoall(aas, AA, MPI_INT, aar, AA, MPI_INT, comm, &req[4]);
    MPI_Iallgatherv(vm, counts[rank], MPI_INT, vall, counts, displs, MPI_INT, comm, &req[5]);
    MPI_Ialltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, comm, &req[6]);
    MPI_Ibcast(om, 3000, MPI_BYTE, osize - 1, other, &req[7]);
    while (!done) {
        MPI_Testall(8, req, &done, MPI_STATUSES_IGNORE);
    }

    ok = 1;
    for (size_t b = 0; b < (size_t)AG * size; ++b)
        ok &= ag[b] == (uint8_t)((b / AG) * 31 + (b % AG) * 7 + round);
    if (!ok) { fprintf(stderr, "iallgather differs\n"); ++errors; }
    ok = 1;
    for (size_t b = 0; b < (size_t)3000 * osize; ++b)
        ok &= oall[b] == (uint8_t)((b / 3000) * 13 + b % 3000 + round);
    for (i = 0; i < 3000; ++i) ok &= om[i] == (uint8_t)((osize - 1) * 13 + i + round);
    if (!ok) { fprintf(stderr, "iallgather/ibcast on the second communicator differ\n"); ++errors; }
    ok = 1;
    for (i = 0; i < BC; ++i) ok &= bc[i] == (uint8_t)(i * 5 + round);
    if (!ok) { fprintf(stderr, "ibcast differs\n"); ++errors; }
    ok = 1;
    for (i = 0; i < AR; ++i) ok &= arr[i] == (long long)(i + round) * size * (size + 1) / 2;
    if (!ok) { fprintf(stderr, "iallreduce differs\n"); ++errors; }
    ok = 1;
    for (q = 0; q < size; ++q) ok &= small_all[q] == q + round;
    if (!ok) { fprintf(stderr, "allgather among nonblocking ones differs\n"); ++errors; }
    ok = 1;
    for (q = 0; q < size; ++q) for (i = 0; i < AA; ++i) ok &= aar[q * AA + i] == q * 1000 + rank + i * 7;
    if (!ok) { fprintf(stderr, "ialltoall differs\n"); ++errors; }
    ok = 1;
    for (q = 0; q < size; ++q) {
        for (i = 0; i < counts[q]; ++i) ok &= vall[displs[q] + i] == q * 100000 + i + round;
        ok &= (vall[displs[q] - 1] == -1) && (vall[displs[q] - 2] == -1);
    }
    if (!ok) { fprintf(stderr, "iallgatherv differs\n"); ++errors; }
    ok = 1;
    for (q = 0; q < size; ++q) for (i = 0; i < rc[q]; ++i) ok &= rb[rd[q] + i] == q * 1000000 + rank * 1000 + i;
    if (!ok) { fprintf(stderr, "ialltoallv differs\n"); ++errors; }

    free(agm); free(ag); free(bc); free(ars); free(arr); free(aas); free(aar);
    free(counts); free(displs); free(sc); free(sd); free(rc); free(rd);
    free(om); free(oall); free(small_all); free(vm); free(vall); free(sb); free(rb);
}

/* Large nonblocking all-gathers on two communicators at once: both
 * teams' frames to the same peer are in flight together (the lane takes
 * one message per peer at a time, so one has to wait for the other) */
static void check_concurrent_large(MPI_Comm a, MPI_Comm b, int round)
{
    const size_t m = 8u << 20;
    int rank, size, p, done = 0, ok = 1;
    MPI_Request req[2];
    MPI_Comm_rank(a, &rank);
    MPI_Comm_size(a, &size);
    uint8_t *sa = malloc(m), *sb = malloc(m);
    uint8_t *ra = malloc(m * size), *rb = malloc(m * size);
    memset(sa, rank * 5 + round, m);
    memset(sb, rank * 7 + round + 1, m);
    MPI_Iallgather(sa, (int)m, MPI_BYTE, ra, (int)m, MPI_BYTE, a, &req[0]);
    MPI_Iallgather(sb, (int)m, MPI_BYTE, rb, (int)m, MPI_BYTE, b, &req[1]);
    while (!done) {
        MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE);
    }
    for (p = 0; p < size; ++p) {
        for (size_t i = 0; i < m; i += 4093) {
            ok &= (ra[(size_t)p * m + i] == (uint8_t)(p * 5 + round)) &&
                  (rb[(size_t)p * m + i] == (uint8_t)(p * 7 + round + 1));
        }
    }
    if (!ok) { fprintf(stderr, "concurrent large iallgathers differ\n"); ++errors; }
    free(sa); free(sb); free(ra); free(rb);
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
    /* first: Open MPI agrees on the new context id with MPI_Iallreduce on
     * MPI_COMM_WORLD, before anything set up a team there */
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    use_marker = (argc > 1) && !strcmp(argv[1], "-m");
    if ((argc > 1) && !strcmp(argv[1], "-n")) {
        /* -n: the nonblocking forms only, on communicators whose first
         * collective they are (a forged frame then meets them first) */
        MPI_Comm fresh;
        MPI_Comm_dup(MPI_COMM_WORLD, &fresh);
        check_nonblocking(dup, fresh, 1);
        check_concurrent_large(dup, fresh, 2);
        MPI_Comm_free(&fresh);
        MPI_Comm_free(&dup);
        MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (total == 0) printf("NONBLOCKING OK rank %d\n", rank);
        MPI_Finalize();
        return total ? 1 : 0;
    }
    if ((argc > 3) && !strcmp(argv[1], "-s")) {
        MPI_Comm_free(&dup);
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
    check(split, 3000, MPI_BYTE, 0, ++round, "split communicator");
    check(dup, 3000, MPI_BYTE, 0, ++round, "duplicated communicator");
    check(dup, 3000, MPI_BYTE, 0, ++round, "back to back");
    if (!use_marker) {
        check_bcast_allreduce(MPI_COMM_WORLD, ++round);
        check_bcast_allreduce(split, ++round);
        check_v(MPI_COMM_WORLD, ++round);
        check_v(split, ++round);
        /* a fresh communicator: a nonblocking call is its first collective */
        MPI_Comm fresh;
        MPI_Comm_dup(MPI_COMM_WORLD, &fresh);
        check_nonblocking(MPI_COMM_WORLD, fresh, ++round);
        MPI_Comm_free(&fresh);
    }
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);

    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total == 0) printf("COLLECTIVES OK rank %d\n", rank);
    MPI_Finalize();
    return total ? 1 : 0;
}
