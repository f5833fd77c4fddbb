/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Process-wide state of the crypt transport and every UCX_CRYPT_* option:
 * those of the process (one UCX config table, registered with UCX's list
 * and read once by the loader), those of an iface (the data role's table;
 * the auxiliary role, the lane and the connection manager take its
 * keepalive and flow bounds); the job secret and AES-GCM backend (set up
 * once, by the first md opened), and the record counters
 * (uct_crypt_stats.h).
 */
#include "uct_crypt/uct_crypt.h"

#include <ucs/datastruct/string_buffer.h>
#include <ucs/sys/string.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

uct_crypt_global_config_t uct_crypt_global;
uint8_t *uct_crypt_job_secret;

double uct_crypt_handshake_rate(void)
{
    unsigned long rate = UCT_CRYPT_TEST_KNOB(&uct_crypt_global, handshake_rate,
                                             UCS_ULUNITS_AUTO);

    if (rate == UCS_ULUNITS_INF) {
        return HUGE_VAL;
    } else if (rate == UCS_ULUNITS_AUTO) {
        return UCT_CRYPT_HANDSHAKE_RATE_AUTO;
    }
    return (double)rate;
}


static const char *uct_crypt_abort_on_ep_failure_names[] = {
    [UCT_CRYPT_ABORT_AUTO]      = "auto",
    [UCT_CRYPT_ABORT_UNHANDLED] = "unhandled",
    [UCT_CRYPT_ABORT_DETECTED]  = "detected",
    [UCT_CRYPT_ABORT_LAST]      = NULL
};

ucs_config_field_t uct_crypt_global_config_table[] = {
    {"ENABLE", "y",
     "Encrypt network traffic. With 'n' the shim stays out of the way and says\n"
     "so in the log: traffic is then NOT encrypted.",
     ucs_offsetof(uct_crypt_global_config_t, enable), UCS_CONFIG_TYPE_BOOL},

    {"TLS", "",
     "Inner network transports that crypt encrypts over, e.g. tcp or rc.\n"
     "Empty: the network transports named in UCX_TLS beside 'crypt', or every\n"
     "network transport if there are none.",
     ucs_offsetof(uct_crypt_global_config_t, tls), UCS_CONFIG_TYPE_STRING},

    {"KEY_FILE", "",
     "Job secret: a file of 32 random bytes, mode 0600, made by ucx-crypt-keygen.\n"
     "Required (see UCX_CRYPT_UNAUTHENTICATED).",
     ucs_offsetof(uct_crypt_global_config_t, key_file), UCS_CONFIG_TYPE_STRING},

    {"UNAUTHENTICATED", "n",
     "Run without a job secret (UCX_CRYPT_KEY_FILE unset): traffic is encrypted\n"
     "but peers are NOT authenticated, so an active attacker can impersonate\n"
     "them. Without this, a missing job secret is an error.",
     ucs_offsetof(uct_crypt_global_config_t, unauthenticated), UCS_CONFIG_TYPE_BOOL},

    {"KEY_BITS", "128",
     "AES key size of the GCM records: 128 or 256.",
     ucs_offsetof(uct_crypt_global_config_t, key_bits), UCS_CONFIG_TYPE_UINT},

    {"BACKEND", "auto",
     "AES-GCM implementation: auto (ipsec-mb if built in), ipsec-mb, openssl.",
     ucs_offsetof(uct_crypt_global_config_t, backend),
     UCS_CONFIG_TYPE_ENUM(crypt_aead_backend_names)},

    {"STATS", "n",
     "Print the record counters (sealed, opened, failures by reason) at exit.",
     ucs_offsetof(uct_crypt_global_config_t, stats), UCS_CONFIG_TYPE_BOOL},

    {"ABORT_ON_EP_FAILURE", "auto",
     "Which failed endpoints end the process, after UCP's error handler was told:\n"
     " unhandled - those the handler gives back, as nobody takes them (UCP error\n"
     "             mode none up to UCX 1.18; 1.22 takes every one itself);\n"
     " detected  - those too, and every one that crypt failed itself: a record or\n"
     "             segment that failed its checks (forged, replayed, out of\n"
     "             order, malformed), or this side out of resources. A lost\n"
     "             connection stays UCP's to handle: at a job's end it is a\n"
     "             peer that finished first;\n"
     " auto      - 'detected' in an MPI rank (OMPI_COMM_WORLD_SIZE, PMI_SIZE or\n"
     "             PMIX_RANK set by the launcher), 'unhandled' elsewhere.",
     ucs_offsetof(uct_crypt_global_config_t, abort_on_ep_failure),
     UCS_CONFIG_TYPE_ENUM(uct_crypt_abort_on_ep_failure_names)},

    /* The collectives' settings: read by the MPI adapter
     * (src/ucp_crypt/mpi/crypt_mpi_config.c, one typed parser each), never
     * by the transport; declared here so that UCX documents them and does
     * not call them unknown. Their defaults mean "not set" there. */
    {"COLL_NODES", "",
     "Collectives (MPI adapter): emulate nodes on one machine, N, N:block or\n"
     "N:cyclic. Empty: each rank's node from its host's identity.",
     ucs_offsetof(uct_crypt_global_config_t, coll_nodes), UCS_CONFIG_TYPE_STRING},

    {"COLL_TUNE", "",
     "Collectives (MPI adapter): algorithm per size, UCC style:\n"
     "allgather:LO-HI:ALG[,...] with ALG in naive, o-ring, o-rd, o-rd2, c-ring,\n"
     "c-rd, hs1, hs2. Empty: the built-in score table.",
     ucs_offsetof(uct_crypt_global_config_t, coll_tune), UCS_CONFIG_TYPE_STRING},

    {"COLL_VERBOSE", "n",
     "Collectives (MPI adapter): print each call's algorithm and crypto counts.",
     ucs_offsetof(uct_crypt_global_config_t, coll_verbose), UCS_CONFIG_TYPE_BOOL},

#if UCX_CRYPT_FAULT_INJECTION
    {"HANDSHAKE_RATE", "1000",
     "TESTING ONLY: first messages a second that each of crypt's listeners (its\n"
     "own wire and its connection manager) answers with a Diffie-Hellman. Past\n"
     "that, and for a second after one went to a replayed message, a listener\n"
     "is under load: it answers a first message with a cookie, which only a\n"
     "holder of the job secret can use, and takes the DH when the initiator\n"
     "sends its first message again with it (one more round trip), as WireGuard\n"
     "does; under load each host gets half the rate. 0: always ask (load made\n"
     "for the tests, no host's share); inf: never; auto: 1000.",
     ucs_offsetof(uct_crypt_global_config_t, handshake_rate),
     UCS_CONFIG_TYPE_ULUNITS},

    {"REKEY_RECORDS", "0",
     "TESTING ONLY: update a flow's key after this many records, and its bulk\n"
     "key after this many bulk segments, at the next put (0: the limits of\n"
     "src/keyex/keyex.h).",
     ucs_offsetof(uct_crypt_global_config_t, rekey_records), UCS_CONFIG_TYPE_ULONG},

    {"COLL_FAULT", "",
     "TESTING ONLY (MPI adapter, test builds): this rank forges its first frame\n"
     "to another node. Empty or none: no forgery.",
     ucs_offsetof(uct_crypt_global_config_t, coll_fault), UCS_CONFIG_TYPE_STRING},

    {"LANE_FAULT", "none",
     "TESTING ONLY (test builds): next to its first chunk the collective lane\n"
     "sends one more, as an attacker on the network would: a copy with a bit\n"
     "flipped (forged_bytes) or another length (forged_header) ahead of it, one\n"
     "under a key not the team's (stranger), or the chunk again (replay).",
     ucs_offsetof(uct_crypt_global_config_t, lane_fault),
     UCS_CONFIG_TYPE_ENUM(uct_crypt_lane_fault_names)},
#endif

#if UCX_CRYPT_FAULT_INJECTION
    {"EMULATE_CONNECT_TO_EP", "n",
     "TESTING ONLY (test builds): crypt's data role does not connect to a remote\n"
     "iface, as rc does not, so that UCP wires it up through the auxiliary role\n"
     "(crypt_aux) over the same inner, as it does rc through ud.",
     ucs_offsetof(uct_crypt_global_config_t, emulate_connect_to_ep),
     UCS_CONFIG_TYPE_BOOL},

    {"LANE_UCX_TCP", "n",
     "TESTING ONLY (test builds): the collective lane opens UCX's tcp transport\n"
     "where it would open crypt's own wire, standing in for ud and dc (no\n"
     "handshake: anyone may send to it). For the lane's UCT gtests: in a job,\n"
     "UCX tcp needs both sides' progress to connect, which ud and dc do not.",
     ucs_offsetof(uct_crypt_global_config_t, lane_ucx_tcp), UCS_CONFIG_TYPE_BOOL},

    {"TEST_SEAL_BANDWIDTH", "0",
     "TESTING ONLY (test builds): how many bytes a second one core seals, as\n"
     "UCP's protocol selection is told (UCX 1.16+); 0: measured.",
     ucs_offsetof(uct_crypt_global_config_t, test_seal_bandwidth),
     UCS_CONFIG_TYPE_DOUBLE},
#endif

    {"COLL_LANE", "auto",
     "Where the MPI adapter sends collective frames between nodes: 'auto' on the\n"
     "collective lane (the network transport under crypt, frames not sealed a\n"
     "second time; src/uct_crypt/api/uct_crypt_lane.h) where every rank has one,\n"
     "'transport' through the MPI library (sealed again by crypt).",
     ucs_offsetof(uct_crypt_global_config_t, coll_lane), UCS_CONFIG_TYPE_STRING},

    {NULL}
};

/* One table for the process, registered with UCX's list as its own global
 * options are (global_opts.c), so that `ucx_info -c` documents it once;
 * read once, by the loader (uct_crypt_global_config_read) */
UCS_CONFIG_REGISTER_TABLE(uct_crypt_global_config_table, "Crypt",
                          UCT_CRYPT_CONFIG_PREFIX, uct_crypt_global_config_t,
                          &ucs_config_global_list)

/* ---- statistics ---------------------------------------------------------- */

uct_crypt_stats_t uct_crypt_process_stats;

void uct_crypt_stats_read(uct_crypt_stats_t *stats)
{
    uint64_t *dst = (uint64_t*)stats;
    uint64_t *src = (uint64_t*)&uct_crypt_process_stats;
    size_t i;

    for (i = 0; i < sizeof(*stats) / sizeof(uint64_t); ++i) {
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
}

const char *uct_crypt_fail_reason_name(uct_crypt_fail_reason_t reason)
{
    static const char *names[] = {
        [UCT_CRYPT_FAIL_AUTH]         = "authentication failed",
        [UCT_CRYPT_FAIL_REPLAY]       = "replayed record",
        [UCT_CRYPT_FAIL_REORDER]      = "reordered or dropped record",
        [UCT_CRYPT_FAIL_UNKNOWN_FLOW] = "record of an unknown flow",
        [UCT_CRYPT_FAIL_MALFORMED]    = "malformed record",
        [UCT_CRYPT_FAIL_HANDSHAKE]    = "handshake refused",
        [UCT_CRYPT_FAIL_FLOW_FAILED]  = "record on a failed flow",
        [UCT_CRYPT_FAIL_BULK_ORDER]   = "bulk segment out of order",
        [UCT_CRYPT_FAIL_NO_RESOURCE]  = "out of resources on this side",
        [UCT_CRYPT_FAIL_CONNECTION]   = "connection lost"
    };
    return (reason < UCT_CRYPT_FAIL_LAST) ? names[reason] : "unknown";
}

void uct_crypt_stats_print(void)
{
    UCS_STRING_BUFFER_ONSTACK(line, 1024); /* the whole line, newline included */
    uct_crypt_stats_t s;
    int i;

    uct_crypt_stats_read(&s);
    ucs_string_buffer_appendf(&line, "[ucx-crypt pid %d] records sealed %"
                              PRIu64 " (%" PRIu64 " bytes), opened %" PRIu64
                              " (%" PRIu64 " bytes), key updates %" PRIu64
                              ", bulk bytes sealed %" PRIu64 " opened %" PRIu64
                              ", bulk key updates %" PRIu64
                              ", bulk gets served %" PRIu64,
                              getpid(), s.records_sealed, s.bytes_sealed,
                              s.records_opened, s.bytes_opened, s.rekeys,
                              s.bulk_bytes_sealed, s.bulk_bytes_opened,
                              s.bulk_rekeys, s.bulk_gets_served);
    for (i = 0; i < UCT_CRYPT_FAIL_LAST; ++i) {
        ucs_string_buffer_appendf(&line, ", %s %" PRIu64,
                                  uct_crypt_fail_reason_name(
                                          (uct_crypt_fail_reason_t)i),
                                  s.failures[i]);
    }
    ucs_string_buffer_appendf(&line, ", wire: strangers refused %" PRIu64
                              ", handshakes %" PRIu64 ", connections failed %"
                              PRIu64 ", shared both ways %" PRIu64
                              ", redirects expired %" PRIu64
                              ", cm: refused %" PRIu64 ", handshakes %" PRIu64
                              ", replays refused %" PRIu64 ", stranger DH %"
                              PRIu64 ", cookie replies %" PRIu64
                              ", flows ended %" PRIu64 ", refused %" PRIu64
                              ", slept %" PRIu64 ", woken %" PRIu64
                              ", forgotten %" PRIu64
                              ", handshakes deferred %" PRIu64 "\n",
                              s.wire_refused, s.wire_handshakes,
                              s.wire_failed, s.wire_shared,
                              s.wire_redirects_expired, s.cm_refused,
                              s.cm_handshakes, s.replays_refused, s.stranger_dh,
                              s.cookies_sent, s.flows_ended, s.flows_refused,
                              s.flows_slept, s.flows_woken, s.flows_forgotten,
                              s.dh_deferred);
    /* one write: ranks of one job share stderr, lines must not interleave */
    if (write(STDERR_FILENO, ucs_string_buffer_cstr(&line),
              ucs_string_buffer_length(&line)) < 0) {
        /* nothing sensible left to do at exit */
    }
}

/* ---- process-wide init: job secret, backend ------------------------------ */

static ucs_status_t uct_crypt_global_status = UCS_ERR_NO_ELEM;
static pthread_once_t uct_crypt_global_once = PTHREAD_ONCE_INIT;

static void uct_crypt_global_init_once(void)
{
    char error[KEYEX_ERROR_MAX];
    crypt_aead_backend_t backend = (crypt_aead_backend_t)uct_crypt_global.backend;

    if (crypt_aead_init(backend) != CRYPT_AEAD_OK) {
        ucs_error("crypt: AES-GCM backend '%s' is not available in this build "
                  "(set UCX_CRYPT_BACKEND=openssl)",
                  crypt_aead_backend_name(backend));
        uct_crypt_global_status = UCS_ERR_UNSUPPORTED;
        return;
    }
    if ((uct_crypt_global.key_bits != 128) && (uct_crypt_global.key_bits != 256)) {
        ucs_error("crypt: UCX_CRYPT_KEY_BITS=%u: use 128 or 256",
                  uct_crypt_global.key_bits);
        uct_crypt_global_status = UCS_ERR_INVALID_PARAM;
        return;
    }

    if ((uct_crypt_global.key_file[0] == '\0') &&
        !uct_crypt_global.unauthenticated) {
        /* without a job secret anyone can talk to us as a peer: refuse,
         * unless the user asked for exactly that, by name */
        ucs_error("crypt: UCX_CRYPT_KEY_FILE is not set: make a job secret "
                  "with ucx-crypt-keygen and point UCX_CRYPT_KEY_FILE at it "
                  "on every rank (or, to encrypt without authenticating "
                  "peers, set UCX_CRYPT_UNAUTHENTICATED=y)");
        uct_crypt_global_status = UCS_ERR_INVALID_PARAM;
        return;
    } else if (uct_crypt_global.key_file[0] == '\0') {
        ucs_warn("crypt: UCX_CRYPT_UNAUTHENTICATED=y and no job secret: traffic "
                 "is encrypted but peers are not authenticated (an active "
                 "attacker can impersonate them); create a job secret with "
                 "ucx-crypt-keygen");
    } else {
        uct_crypt_job_secret = keyex_secure_alloc(KEYEX_JOB_SECRET_LEN);
        if (uct_crypt_job_secret == NULL) {
            ucs_error("crypt: cannot hold the job secret%s",
                      crypt_local_failure_take());
            uct_crypt_global_status = UCS_ERR_NO_MEMORY;
            return;
        }
        if (keyex_job_secret_load(uct_crypt_global.key_file,
                                  uct_crypt_job_secret, error,
                                  sizeof(error)) != KEYEX_OK) {
            ucs_error("crypt: %s", error);
            keyex_secure_free(uct_crypt_job_secret, KEYEX_JOB_SECRET_LEN);
            uct_crypt_job_secret    = NULL;
            uct_crypt_global_status = UCS_ERR_INVALID_PARAM;
            return;
        }
    }

    ucs_debug("crypt: AES-%u-GCM on %s (%s), job secret %s",
              uct_crypt_global.key_bits, crypt_aead_backend_name(
                      crypt_aead_backend_resolve(backend)),
              crypt_aead_backend_arch(backend),
              uct_crypt_job_secret ? "loaded" : "absent");
    uct_crypt_global_status = UCS_OK;
}

ucs_status_t uct_crypt_global_init(void)
{
    pthread_once(&uct_crypt_global_once, uct_crypt_global_init_once);
    return uct_crypt_global_status;
}

/* UCX_CRYPT_* into uct_crypt_global; a bad value ends the process with a
 * hint: this runs from the loader, before anything could report an error */
void uct_crypt_global_config_read(void)
{
    ucs_status_t status;

    status = uct_crypt_config_fill(&uct_crypt_global,
                                   uct_crypt_global_config_table,
                                   sizeof(uct_crypt_global), "crypt",
                                   UCT_CRYPT_CONFIG_PREFIX);
    if (status != UCS_OK) {
        fprintf(stderr, "ucx-crypt: FATAL: invalid UCX_CRYPT_* setting (%s); "
                "'ucx_info -c -f' documents them\n", ucs_status_string(status));
        _exit(1);
    }
    uct_crypt_global.abort_on_ep_failure =
            uct_crypt_abort_on_ep_failure_resolve(
                    uct_crypt_global.abort_on_ep_failure,
                    &uct_crypt_global.abort_in_mpi_rank);
}

/* AUTO made concrete. MPI's default error handler (MPI_ERRORS_ARE_FATAL,
 * MPI 4.0 section 9.3) ends the job on any communication error, so in an
 * MPI rank an endpoint that crypt failed (a forged record) ends the
 * process, whether or not UCP says somebody took it: UCP 1.22 takes every
 * endpoint error itself (ucp_worker_iface_error_handler returns UCS_OK in
 * error mode none too), and the ranks would otherwise wait for the dropped
 * data until the job's time runs out. What the launchers set in every
 * rank's environment says "MPI rank": Open MPI's, MPICH's Hydra and
 * Slurm's PMI, PMIx's. */
uct_crypt_abort_on_ep_failure_t
uct_crypt_abort_on_ep_failure_resolve(uct_crypt_abort_on_ep_failure_t configured,
                                      int *in_mpi_rank)
{
    static const char *rank_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                      "PMIX_RANK"};
    unsigned i;

    *in_mpi_rank = 0;
    if (configured != UCT_CRYPT_ABORT_AUTO) {
        return configured;
    }
    for (i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); ++i) {
        if (getenv(rank_vars[i]) != NULL) {
            *in_mpi_rank = 1;
            return UCT_CRYPT_ABORT_DETECTED;
        }
    }
    return UCT_CRYPT_ABORT_UNHANDLED;
}

/* UCP's error handler was told that crypt failed the endpoint to this peer
 * for `reason` and answered ucp_status: end the process where that is the
 * rule, naming the peer and why, rather than let the job wait for data
 * that was dropped. UCX's own rc and cma transports abort where nobody
 * handles an endpoint error (uct_base_iface_failure_log_level). A lost
 * connection is never "detected": at the end of an MPI job it is a peer
 * whose rank finished first while UCP was closing the endpoint to it. */
void uct_crypt_ep_failure_told(ucs_status_t ucp_status, const uint8_t *peer_public,
                               uint64_t flow_id, uct_crypt_fail_reason_t reason,
                               const char *detail)
{
    if (ucp_status != UCS_OK) {
        /* nobody above handles endpoint errors (UCP error mode "none" up
         * to UCX 1.18, Open MPI's default); `detail` says which connection
         * ended and why, logged only at diag level where a handler took it */
        ucs_fatal("crypt: endpoint to " uct_crypt_log_peer_fmt " failed (%s) "
                  "and no error handler took it: aborting%s%s%s",
                  uct_crypt_log_peer_arg(peer_public, flow_id),
                  uct_crypt_fail_reason_name(reason),
                  (detail[0] != '\0') ? " (crypt: " : "", detail,
                  (detail[0] != '\0') ? ")" : "");
    }
    if ((uct_crypt_global.abort_on_ep_failure == UCT_CRYPT_ABORT_DETECTED) &&
        (reason != UCT_CRYPT_FAIL_CONNECTION)) {
        ucs_fatal("crypt: endpoint to " uct_crypt_log_peer_fmt " failed (%s): "
                  "aborting (UCX_CRYPT_ABORT_ON_EP_FAILURE=%s)",
                  uct_crypt_log_peer_arg(peer_public, flow_id),
                  uct_crypt_fail_reason_name(reason),
                  uct_crypt_global.abort_in_mpi_rank ? "auto, in an MPI rank" :
                                                       "detected");
    }
}

void uct_crypt_global_config_release(void)
{
    ucs_config_parser_release_opts(&uct_crypt_global,
                                   uct_crypt_global_config_table);
}

void uct_crypt_global_cleanup(void)
{
    if (uct_crypt_job_secret != NULL) {
        keyex_secure_free(uct_crypt_job_secret, KEYEX_JOB_SECRET_LEN);
        uct_crypt_job_secret = NULL;
    }
    uct_crypt_global_config_release();
}

/* ---- the ifaces' options (the tl entries are uct_crypt_iface.c's) -------- */

#if UCX_CRYPT_FAULT_INJECTION
static const char *uct_crypt_bulk_mode_names[] = {
    [UCT_CRYPT_BULK_PIPELINED]  = "pipelined",
    [UCT_CRYPT_BULK_NAIVE]      = "naive",
    [UCT_CRYPT_BULK_MODE_LAST]  = NULL
};
#endif

static ucs_config_field_t uct_crypt_rx_limits_config_table[] = {
    {"RX_FLOWS", "65536",
     "Flows one crypt iface receives at once (each an endpoint of a peer that\n"
     "sent to it; their keys take locked memory). A flow ends when its sender's\n"
     "endpoint goes, or, on crypt's own wire, its connection. Past the bound the\n"
     "oldest flow whose peer this process has no endpoint to any more is\n"
     "forgotten; with none, a new flow's first record is refused, counted and\n"
     "logged, and what its sender sends on it is lost: raise it for jobs where\n"
     "one process hears from more endpoints than this.",
     ucs_offsetof(uct_crypt_rx_limits_t, flows), UCS_CONFIG_TYPE_UINT},

    {"RX_FLOWS_PER_PEER", "4096",
     "Flows one crypt iface receives at once from one peer key (one iface of\n"
     "another process), within UCX_CRYPT_RX_FLOWS; past it the same holds.",
     ucs_offsetof(uct_crypt_rx_limits_t, flows_per_peer), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

ucs_status_t uct_crypt_data_role_options(uct_crypt_keepalive_t *keepalive,
                                         uct_crypt_rx_limits_t *rx_limits)
{
    ucs_status_t status = UCS_OK;

    if (keepalive != NULL) {
        status = uct_crypt_config_fill(keepalive, uct_crypt_keepalive_config_table,
                                       sizeof(*keepalive), "crypt keepalive",
                                       UCT_CRYPT_CONFIG_PREFIX);
    }
    if ((status == UCS_OK) && (rx_limits != NULL)) {
        status = uct_crypt_config_fill(rx_limits, uct_crypt_rx_limits_config_table,
                                       sizeof(*rx_limits), "crypt flow bounds",
                                       UCT_CRYPT_CONFIG_PREFIX);
    }
    return status;
}

ucs_config_field_t uct_crypt_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_crypt_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

#if UCX_CRYPT_FAULT_INJECTION
    {"FAULT", "none",
     "TESTING ONLY: tamper with this process's own outgoing records to check\n"
     "that peers detect it: none, flip_header, flip_ciphertext, flip_tag,\n"
     "truncate, replay, reorder, drop, inject, forge_hello, replay_ended (a flow's\n"
     "first record again after the flow ended), replay_hellos (every flow's first\n"
     "record twice) (am_short records);\n"
     "bulk_flip_ciphertext,\n"
     "bulk_flip_tag, bulk_drop, bulk_reorder, bulk_truncate, bulk_move,\n"
     "bulk_splice (bulk segments); bulk_frame_alone, bulk_frame_short (a\n"
     "segment's frame on crypt's own wire).",
     ucs_offsetof(uct_crypt_iface_config_t, fault), UCS_CONFIG_TYPE_STRING},

    {"INNER_UCX_TCP", "n",
     "TESTING ONLY: beneath crypt, UCX's own tcp transport instead of crypt's own\n"
     "wire, standing in for an RDMA inner (rc) whose puts carry the bulk engine.\n"
     "Never safe where an attacker can reach the network: UCX's tcp acts on its\n"
     "headers before anything is authenticated.",
     ucs_offsetof(uct_crypt_iface_config_t, inner_ucx_tcp), UCS_CONFIG_TYPE_BOOL},

    {"WIRE_PORT", "0",
     "TESTING ONLY: the port crypt's own wire listens on (0: any).",
     ucs_offsetof(uct_crypt_iface_config_t, wire_port), UCS_CONFIG_TYPE_UINT},

    {"WIRE_ADVERTISE_PORT", "0",
     "TESTING ONLY: the port put in this iface's address instead of the one it\n"
     "listens on, as behind a port-forwarding middlebox: the on-path relay of\n"
     "the tests sits there.",
     ucs_offsetof(uct_crypt_iface_config_t, wire_advertise_port), UCS_CONFIG_TYPE_UINT},

    {"FAULT_STATIC_KEY", "",
     "TESTING ONLY: this iface's X25519 private key, 64 hex digits, instead of\n"
     "a fresh one: the forward-secrecy test plays an attacker who learns it.",
     ucs_offsetof(uct_crypt_iface_config_t, fault_static_key), UCS_CONFIG_TYPE_STRING},

    {"FAULT_AFTER", "100",
     "TESTING ONLY: number of records (bulk faults: segments) sent intact\n"
     "before UCX_CRYPT_FAULT applies.",
     ucs_offsetof(uct_crypt_iface_config_t, fault_after), UCS_CONFIG_TYPE_ULONG},

    {"BULK_MODE", "pipelined",
     "TESTING ONLY: pipelined: segments sealed by the worker pool and sent as\n"
     "each is ready. naive: the whole put sealed by one thread, then sent, then\n"
     "opened (the CryptMPI paper's baseline, for benchmarks).",
     ucs_offsetof(uct_crypt_iface_config_t, bulk_mode),
     UCS_CONFIG_TYPE_ENUM(uct_crypt_bulk_mode_names)},

    {"BULK_MAX_OUTSTANDING", "8",
     "TESTING ONLY: puts in flight on an iface above which a new put is sealed\n"
     "by the progress thread instead of the pool (CryptMPI's k = 1 rule).",
     ucs_offsetof(uct_crypt_iface_config_t, bulk_max_outstanding), UCS_CONFIG_TYPE_UINT},

    {"PROFILE", "",
     "TESTING ONLY: the calibration profile written by test/perf/crypt_calibrate\n"
     "(segment size, threads, model parameters). Empty: built-in defaults.",
     ucs_offsetof(uct_crypt_iface_config_t, profile), UCS_CONFIG_TYPE_STRING},
#endif

    {"SNDBUF", "auto",
     "Socket send buffer size of crypt's own wire's connections, as UCX tcp's\n"
     "UCX_TCP_SNDBUF (auto: the kernel's).",
     ucs_offsetof(uct_crypt_iface_config_t, sndbuf), UCS_CONFIG_TYPE_MEMUNITS},

    {"RCVBUF", "auto",
     "Socket receive buffer size of crypt's own wire's connections, as UCX\n"
     "tcp's UCX_TCP_RCVBUF (auto: the kernel's).",
     ucs_offsetof(uct_crypt_iface_config_t, rcvbuf), UCS_CONFIG_TYPE_MEMUNITS},

    {"", "", NULL, ucs_offsetof(uct_crypt_iface_config_t, keepalive),
     UCS_CONFIG_TYPE_TABLE(uct_crypt_keepalive_config_table)},

    {"", "", NULL, ucs_offsetof(uct_crypt_iface_config_t, rx_limits),
     UCS_CONFIG_TYPE_TABLE(uct_crypt_rx_limits_config_table)},

    {"BULK", "y",
     "Offer encrypted put_zcopy and get_zcopy (the bulk engine), which give UCP\n"
     "its RMA rendezvous back: segments sealed in parallel, put by the inner\n"
     "transport, opened in place by the target (a get asks the peer to seal and\n"
     "put). With 'n' large messages go as AM fragments.",
     ucs_offsetof(uct_crypt_iface_config_t, bulk), UCS_CONFIG_TYPE_BOOL},

    {"BULK_SEGMENT", "auto",
     "Bytes per bulk segment. auto: 256k. On crypt's own Ethernet wire a segment\n"
     "is one frame: at most 256k.",
     ucs_offsetof(uct_crypt_iface_config_t, bulk_segment), UCS_CONFIG_TYPE_MEMUNITS},

    {"BULK_THREADS", "auto",
     "Crypto worker threads per iface. auto: 2, capped by CryptMPI's\n"
     "min(T0 - T1, t): the node's spare PUs shared by the job's ranks on it\n"
     "(OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE) and\n"
     "what other processes registered in /dev/shm. A number is taken as is.",
     ucs_offsetof(uct_crypt_iface_config_t, bulk_threads), UCS_CONFIG_TYPE_ULUNITS},

    {"BULK_DEPTH", "16",
     "Bounce segments per iface, registered with the inner md once; puts wait\n"
     "(never fail) when all are in flight.",
     ucs_offsetof(uct_crypt_iface_config_t, bulk_depth), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

/* UCT's base options only: what crypt's own are the data role's
 * (uct_crypt_data_role_options) */
ucs_config_field_t uct_crypt_aux_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_crypt_aux_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {NULL}
};
