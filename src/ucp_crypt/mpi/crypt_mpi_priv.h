/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the MPI adapter's files share: a communicator's team and the
 * process-wide state of the adapter.
 *
 *   crypt_mpi.c       the entry points: one call, blocking or queued
 *   crypt_mpi_team.c  a communicator's team: bootstrap, job secret, nodes,
 *                     node segment, teardown
 *   crypt_mpi_pipe.c  a team's pipes: the collective lane between nodes,
 *                     the MPI library inside a node (or everywhere)
 *   crypt_mpi_config.c  the adapter's settings, one typed parser each
 */
#ifndef UCX_CRYPT_MPI_PRIV_H
#define UCX_CRYPT_MPI_PRIV_H

#include "crypt_mpi.h"
#include "ucp_crypt/coll/crypt_coll.h"

#include <stdint.h>

#define CRYPT_MPI_TAG          0x5ec2

typedef struct crypt_mpi_request crypt_mpi_request_t;

typedef struct crypt_mpi_team {
    struct crypt_mpi_team *next; /* every live team, for MPI_Finalize */
    MPI_Comm          user_comm;  /* the attribute's owner */
    MPI_Comm          comm;       /* our duplicate */
    MPI_Comm          node_comm;
    void              *shm;       /* the node's segment (HS1/HS2), mapped */
    size_t            shm_size;
    int               tamper;     /* TESTING ONLY: UCX_CRYPT_COLL_FAULT */
    int               *lane_peer; /* per rank on another node; NULL: no lane */
    uint64_t          lane_team;  /* tells this team's messages apart */
    int               lane_added; /* the lane knows the team and its key */
    crypt_mpi_request_t *queue;   /* nonblocking calls, in post order */
    crypt_mpi_request_t **queue_tail;
    crypt_coll_team_t team;
} crypt_mpi_team_t;

/* crypt_mpi_config.c: the settings, parsed on first use (a bad value ends
 * the job with the fix) */
typedef enum {
    CRYPT_MPI_LANE_AUTO = 0,    /* the collective lane where every rank has it */
    CRYPT_MPI_LANE_TRANSPORT    /* frames through the MPI library */
} crypt_mpi_lane_mode_t;

typedef struct crypt_mpi_config {
    const char            *key_file;  /* UCX_CRYPT_KEY_FILE, NULL: none */
    unsigned              key_len;    /* UCX_CRYPT_KEY_BITS / 8 */
    int                   verbose;    /* UCX_CRYPT_COLL_VERBOSE */
    crypt_mpi_lane_mode_t lane;       /* UCX_CRYPT_COLL_LANE */
    const char            *nodes;     /* UCX_CRYPT_COLL_NODES, NULL: hosts */
    const char            *tune;      /* UCX_CRYPT_COLL_TUNE, NULL: table */
    int                   fault_rank; /* UCX_CRYPT_COLL_FAULT (tests), -1 */
} crypt_mpi_config_t;

const crypt_mpi_config_t *crypt_mpi_config(MPI_Comm comm);

/* every live team, for MPI_Finalize (crypt_mpi_team.c) */
extern crypt_mpi_team_t *crypt_mpi_teams;
/* > 0 while a team is set up or freed: its MPI calls reach the library's
 * own collectives */
extern int crypt_mpi_bootstrapping;

/* crypt_mpi_team.c */
/* the reason on stderr, then MPI_Abort */
void crypt_mpi_die(MPI_Comm comm, const char *what);
/* the team of `comm`, set up on first use */
crypt_mpi_team_t *crypt_mpi_team(MPI_Comm comm);
/* The team that encrypts on `comm`, or NULL where the library's own
 * collective is right: intercommunicators (checked by the caller's type
 * tests first) and teams on one node, which need no crypto. With
 * `may_set_up` 0, only a team that exists already (see crypt_mpi_allreduce). */
crypt_mpi_team_t *crypt_mpi_encrypting_team(MPI_Comm comm, int may_set_up);
/* Not ours: a team being set up (its own calls), intercommunicators */
int crypt_mpi_declines(MPI_Comm comm);
int crypt_mpi_contiguous(MPI_Datatype type, int *size);
/* a failed collective aborts the job, with the reason */
void crypt_mpi_check(MPI_Comm comm, crypt_coll_status_t status,
                     const char *call);

/* crypt_mpi_pipe.c */
extern const crypt_coll_nb_ops_t crypt_mpi_nb_ops;
int crypt_mpi_sendrecv(void *ctx, int dst, const void *sbuf, size_t slen,
                       int src, void *rbuf, size_t rlen);
/* Every rank of the team on the lane, or none */
void crypt_mpi_lane_setup(crypt_mpi_team_t *t, MPI_Comm comm);
/* what the process's lane sent and received so far (0 without one) */
void crypt_mpi_lane_counters(uint64_t *sent, uint64_t *received,
                             uint64_t *refused);
/* the team off the lane (its key and streams), where it was on it */
void crypt_mpi_lane_team_remove(crypt_mpi_team_t *t);
void crypt_mpi_lane_close(void);

/* crypt_mpi.c */
/* finish the team's queued nonblocking calls (MPI completes what was
 * posted before a communicator is freed) */
void crypt_mpi_team_drain(crypt_mpi_team_t *t);

#endif
