/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The MPI adapter's entry points (crypt_mpi.c), called by the front ends:
 * PMPI interposition (crypt_pmpi.c) and Open MPI's coll component
 * (coll_crypt.c). Same arguments as the MPI calls; MPI_SUCCESS, or
 * CRYPT_MPI_DECLINED where the front end must call the library's own
 * collective instead. An authentication failure aborts the job.
 *
 * Each entry point is the blocking call with `nb` NULL, and the
 * nonblocking one (MPI_Iallgather, ...) with `nb` given: it returns once
 * the collective is queued on the communicator's team, and `nb->complete`
 * runs when it has ended, from inside crypt_mpi_progress. The front end
 * calls crypt_mpi_progress from its library's progress loop. A team runs
 * its nonblocking collectives one at a time in post order (MPI's rule
 * that every rank posts them in the same order makes that deadlock-free);
 * a blocking collective on the team first finishes those queued before it.
 */
#ifndef UCX_CRYPT_MPI_H
#define UCX_CRYPT_MPI_H

#include <mpi.h>

#define CRYPT_MPI_DECLINED (-1)

typedef struct crypt_mpi_nb {
    void (*complete)(void *arg);  /* the collective ended successfully */
    void *arg;
} crypt_mpi_nb_t;

/* Whether a job secret is configured (UCX_CRYPT_KEY_FILE): without one
 * the front ends stand aside */
int crypt_mpi_has_job_secret(void);

/* Moves every queued nonblocking collective as far as it can without
 * waiting; returns how many ended. Does nothing when called from inside
 * itself (its own MPI calls run the library's progress loop). */
int crypt_mpi_progress(void);

int crypt_mpi_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype,
                        MPI_Comm comm, const crypt_mpi_nb_t *nb);
int crypt_mpi_bcast(void *buffer, int count, MPI_Datatype datatype, int root,
                    MPI_Comm comm, const crypt_mpi_nb_t *nb);
int crypt_mpi_allreduce(const void *sendbuf, void *recvbuf, int count,
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                        const crypt_mpi_nb_t *nb);
int crypt_mpi_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                       void *recvbuf, int recvcount, MPI_Datatype recvtype,
                       MPI_Comm comm, const crypt_mpi_nb_t *nb);

int crypt_mpi_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm,
                         const crypt_mpi_nb_t *nb);
int crypt_mpi_alltoallv(const void *sendbuf, const int sendcounts[],
                        const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
                        const int recvcounts[], const int rdispls[],
                        MPI_Datatype recvtype, MPI_Comm comm,
                        const crypt_mpi_nb_t *nb);

#endif
