/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The process's counters (api/uct_crypt_stats.h), added to from any
 * thread; every layer of the transport counts here, the wire included.
 * Defined in uct_crypt_global.c, which prints and exports them.
 */
#ifndef UCT_CRYPT_COUNTERS_H
#define UCT_CRYPT_COUNTERS_H

#include "uct_crypt/api/uct_crypt_stats.h"

extern uct_crypt_stats_t uct_crypt_process_stats;
#define UCT_CRYPT_STAT_ADD(_field, _n) \
    __atomic_fetch_add(&uct_crypt_process_stats._field, (_n), __ATOMIC_RELAXED)

/* What strangers send is dropped and counted; the n-th refusal is logged
 * only among the first few and then at every power of two, so that a
 * flood cannot fill the log (the wire, the connection manager, the lane) */
static inline int uct_crypt_outsider_logged(uint64_t n)
{
    return (n <= 4) || !(n & (n - 1));
}

#endif
