/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The MPI adapter's settings, read once, each by one typed parser, with the
 * syntax of UCX's own parser (so that what `ucx_info -c -f` prints for them
 * means the same here): booleans y|yes|on|1 and n|no|off|0, sets of values
 * as enums, the empty string as "not set". The crypt plugin declares these
 * names in its UCX config table only so that UCX documents them and does
 * not call them unknown; it never reads them. A value that does not parse
 * ends the job at its first collective with the fix in the message.
 */
#include "crypt_mpi_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static crypt_mpi_config_t crypt_mpi_config_values;
static int crypt_mpi_config_done;

/* UCX's boolean syntax (ucs_config_sscanf_bool); "" is `dflt` */
static int crypt_mpi_config_bool(const char *name, int dflt, char *error,
                                 size_t error_len)
{
    const char *value = getenv(name);

    if ((value == NULL) || (value[0] == '\0')) {
        return dflt;
    }
    if (!strcasecmp(value, "y") || !strcasecmp(value, "yes") ||
        !strcasecmp(value, "on") || !strcmp(value, "1")) {
        return 1;
    }
    if (!strcasecmp(value, "n") || !strcasecmp(value, "no") ||
        !strcasecmp(value, "off") || !strcmp(value, "0")) {
        return 0;
    }
    snprintf(error, error_len, "%s=%s: use y or n", name, value);
    return -1;
}

/* one of `names` (NULL-terminated); "" is the first */
static int crypt_mpi_config_enum(const char *name, const char **names,
                                 char *error, size_t error_len)
{
    const char *value = getenv(name);
    int i;

    if ((value == NULL) || (value[0] == '\0')) {
        return 0;
    }
    for (i = 0; names[i] != NULL; ++i) {
        if (!strcasecmp(value, names[i])) {
            return i;
        }
    }
    snprintf(error, error_len, "%s=%s: use %s%s%s", name, value, names[0],
             names[1] ? " or " : "", names[1] ? names[1] : "");
    return -1;
}

static const char *crypt_mpi_config_string(const char *name)
{
    const char *value = getenv(name);

    return ((value == NULL) || (value[0] == '\0')) ? NULL : value;
}

static int crypt_mpi_config_parse(crypt_mpi_config_t *c, char *error,
                                  size_t error_len)
{
    static const char *lanes[] = {"auto", "transport", NULL};
    static const char *key_bits[] = {"128", "256", NULL};
    const char *value;
    int bits;

    memset(c, 0, sizeof(*c));
    c->key_file = crypt_mpi_config_string("UCX_CRYPT_KEY_FILE");
    bits        = crypt_mpi_config_enum("UCX_CRYPT_KEY_BITS", key_bits, error,
                                        error_len);
    c->verbose  = crypt_mpi_config_bool("UCX_CRYPT_COLL_VERBOSE", 0, error,
                                        error_len);
    c->lane     = (crypt_mpi_lane_mode_t)crypt_mpi_config_enum(
            "UCX_CRYPT_COLL_LANE", lanes, error, error_len);
    c->nodes    = crypt_mpi_config_string("UCX_CRYPT_COLL_NODES");
    c->tune     = crypt_mpi_config_string("UCX_CRYPT_COLL_TUNE");
    if ((bits < 0) || (c->verbose < 0) || ((int)c->lane < 0)) {
        return -1;
    }
    c->key_len = (bits == 1) ? 32 : 16;
    if ((c->tune != NULL) && !crypt_coll_tune_valid(c->tune)) {
        snprintf(error, error_len, "UCX_CRYPT_COLL_TUNE=%s: use "
                 "allgather:LO-HI:ALG[,...] with ALG in naive, o-ring, o-rd, "
                 "o-rd2, c-ring, c-rd, hs1, hs2", c->tune);
        return -1;
    }
    c->fault_rank = -1;
#if UCX_CRYPT_FAULT_INJECTION
    value = crypt_mpi_config_string("UCX_CRYPT_COLL_FAULT");
    if ((value != NULL) && strcasecmp(value, "none")) {
        char *end;
        long rank = strtol(value, &end, 10);
        if ((*end != '\0') || (rank < 0)) {
            snprintf(error, error_len, "UCX_CRYPT_COLL_FAULT=%s: a rank, or "
                     "none", value);
            return -1;
        }
        c->fault_rank = (int)rank;
    }
#else
    (void)value;
#endif
    return 0;
}

const crypt_mpi_config_t *crypt_mpi_config(MPI_Comm comm)
{
    char error[256];

    if (!crypt_mpi_config_done) {
        if (crypt_mpi_config_parse(&crypt_mpi_config_values, error,
                                   sizeof(error)) != 0) {
            crypt_mpi_die(comm, error);
        }
        crypt_mpi_config_done = 1;
    }
    return &crypt_mpi_config_values;
}

int crypt_mpi_has_job_secret(void)
{
    crypt_mpi_config_t config;
    char error[256];

    /* a setting that does not parse counts as "configured": the first
     * collective then ends the job with the message, rather than the
     * library's plaintext-capable collectives running instead */
    return (crypt_mpi_config_parse(&config, error, sizeof(error)) != 0) ||
           (config.key_file != NULL);
}
