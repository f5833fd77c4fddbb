/*
 * mpi_allgather_check: MPI_Allgather (through the ucx-crypt PMPI adapter
 * when it is preloaded) against PMPI_Allgather (the library's own), byte
 * for byte: sizes 1 B .. 1 MiB, MPI_INT as well as MPI_BYTE, MPI_IN_PLACE,
 * a split and a duplicated communicator, calls back to back. Every rank
 * prints "ALLGATHER OK rank R" and exits 0 only if all matched.
 * With -m, every buffer is the marker string the wire tests look for, and
 * the result is checked against that pattern instead of PMPI_Allgather
 * (which would send the marker in plaintext itself).
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
        PMPI_Allgather(mine, (int)count, type, want, (int)count, type, comm);
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

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 7, 4096, 65536, 1 << 20};
    int rank, total, round = 0;
    MPI_Comm split, dup;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    use_marker = (argc > 1) && !strcmp(argv[1], "-m");
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
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);

    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total == 0) printf("ALLGATHER OK rank %d\n", rank);
    MPI_Finalize();
    return total ? 1 : 0;
}
