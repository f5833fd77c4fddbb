/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * TCP keepalive of crypt's own sockets (its wire, its connection manager):
 * the knobs of UCX tcp (tcp_iface.c: KEEPIDLE, KEEPCNT, KEEPINTVL), in the
 * table of the crypt iface (UCX_CRYPT_KEEP*); the auxiliary role, the lane
 * and the connection manager take the same (uct_crypt_data_role_options).
 * The table is defined by the wire (wire_iface.c), which applies it.
 */
#ifndef UCT_CRYPT_KEEPALIVE_H
#define UCT_CRYPT_KEEPALIVE_H

#include <ucs/config/parser.h>
#include <ucs/time/time.h>

typedef struct uct_crypt_keepalive {
    ucs_time_t    idle;  /* silence before the first probe; inf: off */
    unsigned long cnt;   /* probes unanswered before the failure; inf: off */
    ucs_time_t    intvl; /* between probes; inf: off */
} uct_crypt_keepalive_t;

extern ucs_config_field_t uct_crypt_keepalive_config_table[];

/* How long a peer's host may stay silent before its connections fail:
 * idle + cnt * intvl, in seconds; 0 when keepalive is off */
double uct_crypt_keepalive_seconds(const uct_crypt_keepalive_t *keepalive);

#endif
