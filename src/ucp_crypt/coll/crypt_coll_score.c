/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The score table (UCC's coll_score): which all-gather algorithm for which
 * message size, the defaults of the paper's Table III, and the UCC-style
 * tune string that overrides them (UCX_CRYPT_COLL_TUNE).
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

const char *crypt_allgather_alg_name(crypt_allgather_alg_t alg)
{
    switch (alg) {
    case CRYPT_ALLGATHER_NAIVE:  return "naive";
    case CRYPT_ALLGATHER_O_RING: return "o-ring";
    case CRYPT_ALLGATHER_O_RD:   return "o-rd";
    case CRYPT_ALLGATHER_O_RD2:  return "o-rd2";
    case CRYPT_ALLGATHER_C_RING: return "c-ring";
    case CRYPT_ALLGATHER_C_RD:   return "c-rd";
    case CRYPT_ALLGATHER_HS1:    return "hs1";
    case CRYPT_ALLGATHER_HS2:    return "hs2";
    default:                     return NULL;
    }
}

static size_t crypt_coll_tune_size(const char *s, char **end)
{
    double v;

    if (!strncmp(s, "inf", 3)) {
        *end = (char*)s + 3;
        return (size_t)-1;
    }
    v = strtod(s, end);
    if ((*end == s) || !(v >= 0)) {
        /* not a size (negative, NaN, no digits): no progress, so the entry
         * does not parse (a negative double to size_t is undefined; the
         * fuzzer found "-11111") */
        *end = (char*)s;
        return 0;
    }
    if ((**end == 'k') || (**end == 'K')) { v *= 1024; ++*end; }
    else if ((**end == 'm') || (**end == 'M')) { v *= 1024 * 1024; ++*end; }
    return (v >= (double)SIZE_MAX) ? SIZE_MAX : (size_t)v;
}

int crypt_allgather_alg_by_name(const char *name, size_t len)
{
    int a;

    for (a = 0; a < CRYPT_ALLGATHER_LAST; ++a) {
        const char *n = crypt_allgather_alg_name((crypt_allgather_alg_t)a);
        if ((strlen(n) == len) && !strncmp(n, name, len)) {
            return a;
        }
    }
    return -1;
}

/* One tune entry, "LO-HI:ALG" or "ALG": the algorithm if it applies to m */
static int crypt_coll_tune_entry(const char *entry, size_t len, size_t m)
{
    const char *colon = memchr(entry, ':', len);
    size_t lo = 0, hi = (size_t)-1;
    char *end;

    if (colon != NULL) {
        lo = crypt_coll_tune_size(entry, &end);
        if (end == entry) {
            return -1; /* no lower bound: not a range */
        }
        hi = (*end == '-') ? crypt_coll_tune_size(end + 1, &end) : lo;
        if (end != colon) {
            return -1;
        }
        len  -= (size_t)(colon + 1 - entry);
        entry = colon + 1;
    }
    return ((m >= lo) && (m <= hi)) ? crypt_allgather_alg_by_name(entry, len) : -1;
}

static int crypt_coll_hs_fits(const crypt_coll_team_t *team, size_t m)
{
    return (team->node_shm != NULL) &&
           (team->node_shm_size >= crypt_coll_node_shm_size(team->size, m));
}

crypt_allgather_alg_t crypt_coll_allgather_select(const crypt_coll_team_t *team,
                                                  size_t m, const char *tune)
{
    const char *p, *stop;
    int a = -1;

    if ((tune != NULL) && !strncmp(tune, "allgather:", 10)) {
        for (p = tune + 10; (*p != '\0') && (a < 0); p = (*stop == ',') ? stop + 1 : stop) {
            stop = strchr(p, ',');
            stop = (stop != NULL) ? stop : p + strlen(p);
            a    = crypt_coll_tune_entry(p, (size_t)(stop - p), m);
        }
    }
    if (a < 0) {
        a = (m < 4096) ? CRYPT_ALLGATHER_O_RD2 :
            ((m <= CRYPT_COLL_HS_DEFAULT_MAX) && crypt_coll_hs_fits(team, m)) ?
            CRYPT_ALLGATHER_HS2 : CRYPT_ALLGATHER_C_RING;
    }
    if (((a == CRYPT_ALLGATHER_HS1) || (a == CRYPT_ALLGATHER_HS2)) &&
        !crypt_coll_hs_fits(team, m)) {
        a = CRYPT_ALLGATHER_C_RING; /* no segment big enough */
    }
    return (crypt_allgather_alg_t)a;
}

static int crypt_coll_tune_entry_valid(const char *entry, size_t len)
{
    const char *colon = memchr(entry, ':', len);
    char *end;

    if (colon != NULL) {
        if ((colon == entry) || !((*entry >= '0' && *entry <= '9') ||
                                  !strncmp(entry, "inf", 3))) {
            return 0;
        }
        crypt_coll_tune_size(entry, &end);
        if ((*end == '-') && (end + 1 < colon)) {
            crypt_coll_tune_size(end + 1, &end);
        }
        if (end != colon) {
            return 0;
        }
        len  -= (size_t)(colon + 1 - entry);
        entry = colon + 1;
    }
    return crypt_allgather_alg_by_name(entry, len) >= 0;
}

int crypt_coll_tune_valid(const char *tune)
{
    const char *p, *stop;

    if (strncmp(tune, "allgather:", 10) || (tune[10] == '\0')) {
        return 0;
    }
    for (p = tune + 10; *p != '\0'; p = (*stop == ',') ? stop + 1 : stop) {
        stop = strchr(p, ',');
        stop = (stop != NULL) ? stop : p + strlen(p);
        if (!crypt_coll_tune_entry_valid(p, (size_t)(stop - p))) {
            return 0;
        }
        if ((*stop == ',') && (stop[1] == '\0')) {
            return 0; /* a trailing comma */
        }
    }
    return 1;
}
