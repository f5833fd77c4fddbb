/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Counters of the crypt transport, readable through uct_crypt_stats_read()
 * (found with dlsym in the loaded plugin) and printed at exit with
 * UCX_CRYPT_STATS=y. Installed as <uct_crypt/uct_crypt_stats.h>: no UCX
 * includes.
 */
#ifndef UCT_CRYPT_STATS_H
#define UCT_CRYPT_STATS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin is built with hidden visibility: what it offers the layers
 * above (the stats calls, the lane ops table) is marked with this. */
#define UCT_CRYPT_API __attribute__((visibility("default")))

typedef enum {
    UCT_CRYPT_FAIL_AUTH = 0,    /* tag mismatch: forged or corrupted */
    UCT_CRYPT_FAIL_REPLAY,      /* sequence number already seen */
    UCT_CRYPT_FAIL_REORDER,     /* sequence number ahead: dropped or reordered */
    UCT_CRYPT_FAIL_UNKNOWN_FLOW,/* DATA for a flow with no HELLO */
    UCT_CRYPT_FAIL_MALFORMED,   /* too short, bad type or reserved bits */
    UCT_CRYPT_FAIL_HANDSHAKE,   /* HELLO refused (bad key, repeated flow) */
    UCT_CRYPT_FAIL_FLOW_FAILED, /* record on a flow that already failed */
    UCT_CRYPT_FAIL_BULK_ORDER,  /* bulk segment missing, reordered, truncated */
    UCT_CRYPT_FAIL_NO_RESOURCE, /* this side could not go on: out of memory,
                                   a key update or a seal failed */
    UCT_CRYPT_FAIL_CONNECTION,  /* crypt's own wire: an authenticated peer's
                                   connection ended without a CLOSE */
    UCT_CRYPT_FAIL_LAST
} uct_crypt_fail_reason_t;

typedef struct uct_crypt_stats {
    uint64_t records_sealed;
    uint64_t bytes_sealed;
    uint64_t records_opened;
    uint64_t bytes_opened;
    uint64_t rekeys;
    uint64_t bulk_bytes_sealed;   /* bulk puts acknowledged by the target */
    uint64_t bulk_bytes_opened;   /* bulk segments opened in place */
    uint64_t bulk_rekeys;         /* bulk key updates (sender side) */
    uint64_t bulk_gets_served;    /* peers' gets answered (sealed and put) */
    uint64_t failures[UCT_CRYPT_FAIL_LAST];
    /* crypt's own wire (tcp): connections of strangers closed before a
     * handshake passed (garbage, wrong job secret, replays, half-open
     * slots reclaimed), handshakes completed, connections closed because
     * an authenticated peer's record failed or the peer went away */
    uint64_t wire_refused;
    uint64_t wire_handshakes;
    uint64_t wire_failed;
    uint64_t wire_shared;   /* an ep took the peer's connection: both ways */
    uint64_t wire_redirects_expired; /* an ep waited for the peer's connection
                                      * the whole deadline, then used its own */
    /* the connection manager (client/server programs): connections
     * refused before their CONNECT opened (strangers, wrong job secret,
     * half-open slots reclaimed), handshakes completed */
    uint64_t cm_refused;
    uint64_t cm_handshakes;
    /* both listeners: first messages that passed their MAC but were
     * refused as replays before any Diffie-Hellman, and those that cost a
     * Diffie-Hellman and came to nothing (a replay older than the
     * listener remembers: the cost strangers put on this process) */
    uint64_t replays_refused;
    uint64_t stranger_dh;
    /* both listeners, under load: first messages answered with a cookie
     * reply instead of a Diffie-Hellman (src/uct_crypt/wire/wire_admit.h) */
    uint64_t cookies_sent;
    /* received flows over a UCX inner: ended by their sender (FLOW_END);
     * refused at their HELLO because the iface already receives
     * UCX_CRYPT_RX_FLOWS flows, or UCX_CRYPT_RX_FLOWS_PER_PEER from that
     * peer's key (the own wire too); put to sleep (keys wiped) when our
     * last ep to their peer went, woken by a record after that, and
     * forgotten asleep to make room for a new flow past a bound */
    uint64_t flows_ended;
    uint64_t flows_refused;
    uint64_t flows_slept;
    uint64_t flows_woken;
    uint64_t flows_forgotten;
    /* both listeners, under load: first messages with a valid mac2 whose
     * host had its share of Diffie-Hellmans, held for their turn */
    uint64_t dh_deferred;
} uct_crypt_stats_t;

/* Sum over every crypt iface of the process, open or closed. */
UCT_CRYPT_API void uct_crypt_stats_read(uct_crypt_stats_t *stats);
UCT_CRYPT_API const char *uct_crypt_fail_reason_name(uct_crypt_fail_reason_t reason);

#ifdef __cplusplus
}
#endif

#endif
