/*
 * The MPI adapter's entry points (crypt_mpi.c), called by the front ends:
 * PMPI interposition (crypt_pmpi.c) and Open MPI's coll component
 * (coll_crypt.c). Same arguments as the MPI calls; MPI_SUCCESS, or
 * CRYPT_MPI_DECLINED where the front end must call the library's own
 * collective instead. An authentication failure aborts the job.
 */
#ifndef UCX_CRYPT_MPI_H
#define UCX_CRYPT_MPI_H

#include <mpi.h>

#define CRYPT_MPI_DECLINED (-1)

int crypt_mpi_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype,
                        MPI_Comm comm);
int crypt_mpi_bcast(void *buffer, int count, MPI_Datatype datatype, int root,
                    MPI_Comm comm);
int crypt_mpi_allreduce(const void *sendbuf, void *recvbuf, int count,
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int crypt_mpi_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                       void *recvbuf, int recvcount, MPI_Datatype recvtype,
                       MPI_Comm comm);

int crypt_mpi_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm);
int crypt_mpi_alltoallv(const void *sendbuf, const int sendcounts[],
                        const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
                        const int recvcounts[], const int rdispls[],
                        MPI_Datatype recvtype, MPI_Comm comm);

#endif
