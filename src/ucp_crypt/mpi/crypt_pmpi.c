/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * PMPI front end of the MPI adapter (crypt_mpi.h), for any MPI library:
 * preload it (LD_PRELOAD) or link it before the MPI library; applications
 * do not change. What the adapter declines goes to PMPI_* unchanged.
 * Not reached by Open MPI's Fortran bindings (they call PMPI_* directly)
 * nor by collectives the library calls internally: under Open MPI the coll
 * component (coll_crypt.c) is the complete front end.
 * Nonblocking collectives (MPI_Iallgather, ...) are left to the library
 * here, over its transport (sealed per hop where that is crypt): standard
 * MPI has no hook to progress a request of ours inside MPI_Wait.
 */
#include "crypt_mpi.h"

#include <stddef.h>

/* Built with hidden visibility: what it interposes is exported here, as
 * MPICH's mpi.h does not mark its declarations (Open MPI's does) */
#define CRYPT_PMPI_EXPORT __attribute__((visibility("default")))

/* The coll component stands aside where this library is loaded too */
CRYPT_PMPI_EXPORT const int ucx_crypt_pmpi_adapter = 1;

CRYPT_PMPI_EXPORT
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                  void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int ret = crypt_mpi_allgather(sendbuf, sendcount, sendtype, recvbuf,
                                  recvcount, recvtype, comm, NULL);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                          recvtype, comm);
}

CRYPT_PMPI_EXPORT
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    int ret = crypt_mpi_bcast(buffer, count, datatype, root, comm, NULL);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           PMPI_Bcast(buffer, count, datatype, root, comm);
}

CRYPT_PMPI_EXPORT
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count,
                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    int ret = crypt_mpi_allreduce(sendbuf, recvbuf, count, datatype, op, comm,
                                  NULL);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

CRYPT_PMPI_EXPORT
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int ret = crypt_mpi_alltoall(sendbuf, sendcount, sendtype, recvbuf,
                                 recvcount, recvtype, comm, NULL);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                         recvtype, comm);
}

CRYPT_PMPI_EXPORT
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                   void *recvbuf, const int recvcounts[], const int displs[],
                   MPI_Datatype recvtype, MPI_Comm comm)
{
    int ret = crypt_mpi_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                   displs, recvtype, comm, NULL);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                           recvtype, comm);
}

CRYPT_PMPI_EXPORT
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    int ret = crypt_mpi_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                  recvcounts, rdispls, recvtype, comm, NULL);

    return (ret != CRYPT_MPI_DECLINED) ? ret :
           PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                          rdispls, recvtype, comm);
}
