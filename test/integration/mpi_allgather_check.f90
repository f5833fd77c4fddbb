! SPDX-License-Identifier: BSD-3-Clause
! mpi_allgather_check.f90: MPI_ALLGATHER and MPI_IALLGATHER from Fortran,
! checked against what every rank computes for itself. Open MPI's Fortran
! bindings call the library directly (not MPI_Allgather), so only the coll
! component reaches these calls; the test looks for the adapter's verbose
! lines.
program mpi_allgather_check_f
    use mpi
    implicit none
    integer, parameter :: n = 1000
    integer :: ierr, rank, nranks, i, r, errors, request
    integer, allocatable :: mine(:), all(:)

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
    allocate(mine(n), all(n * nranks))
    do i = 1, n
        mine(i) = rank * 100000 + i
    end do
    call MPI_Allgather(mine, n, MPI_INTEGER, all, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    errors = 0
    do r = 0, nranks - 1
        do i = 1, n
            if (all(r * n + i) /= r * 100000 + i) errors = errors + 1
        end do
    end do
    ! the nonblocking form, waited for
    all = -1
    call MPI_Iallgather(mine, n, MPI_INTEGER, all, n, MPI_INTEGER, MPI_COMM_WORLD, &
                        request, ierr)
    call MPI_Wait(request, MPI_STATUS_IGNORE, ierr)
    do r = 0, nranks - 1
        do i = 1, n
            if (all(r * n + i) /= r * 100000 + i) errors = errors + 1
        end do
    end do
    if (errors == 0 .and. ierr == MPI_SUCCESS) print '(A,I0)', 'FORTRAN OK rank ', rank
    call MPI_Finalize(ierr)
end program mpi_allgather_check_f
