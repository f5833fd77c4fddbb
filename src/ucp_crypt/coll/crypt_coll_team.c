/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Teams: the node map, the bootstrap through the caller's out-of-band
 * all-gather (team salt, host identities), the team key, the workspace.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <unistd.h>

#include "keyex/keyex.h"

/* ---- node maps -------------------------------------------------------------- */

int crypt_coll_node_map(int size, int num_nodes, crypt_coll_mapping_t mapping,
                        int *node_of)
{
    int base, extra, r, n, first;

    if ((size <= 0) || (num_nodes <= 0) || (num_nodes > size)) {
        return -1;
    }
    if (mapping == CRYPT_COLL_MAP_CYCLIC) {
        for (r = 0; r < size; ++r) {
            node_of[r] = r % num_nodes;
        }
        return 0;
    }
    base  = size / num_nodes;
    extra = size % num_nodes;
    for (n = 0, first = 0; n < num_nodes; ++n) {
        int count = base + (n < extra);
        for (r = first; r < first + count; ++r) {
            node_of[r] = n;
        }
        first += count;
    }
    return 0;
}

int crypt_coll_node_map_from_env(int size, int *node_of, char *error,
                                 size_t error_len)
{
    const char *value = getenv("UCX_CRYPT_COLL_NODES");
    crypt_coll_mapping_t mapping = CRYPT_COLL_MAP_BLOCK;
    char *end;
    long nodes;

    if (value == NULL) {
        snprintf(error, error_len, "UCX_CRYPT_COLL_NODES is not set");
        return -1;
    }
    nodes = strtol(value, &end, 10);
    if (!strcmp(end, ":cyclic")) {
        mapping = CRYPT_COLL_MAP_CYCLIC;
    } else if ((*end != '\0') && strcmp(end, ":block")) {
        end = NULL;
    }
    if ((end == NULL) || (nodes < 1) || (nodes > size)) {
        snprintf(error, error_len, "UCX_CRYPT_COLL_NODES=%s: use N, N:block or "
                 "N:cyclic with 1 <= N <= %d ranks", value, size);
        return -1;
    }
    return crypt_coll_node_map(size, (int)nodes, mapping, node_of);
}

/* ---- team ------------------------------------------------------------------- */

crypt_coll_status_t crypt_coll_team_init(crypt_coll_team_t *team, int rank,
                                         int size, const int *node_of,
                                         const uint8_t job_secret[32],
                                         const uint8_t team_salt[CRYPT_COLL_TEAM_SALT_LEN],
                                         crypt_aead_backend_t backend,
                                         crypt_coll_sendrecv_t sendrecv,
                                         void *ctx)
{
    static const char salt[] = "ucx-crypt v1 collective";
    uint8_t prk[KEYEX_SECRET_LEN], key[16];
    crypt_aead_status_t astatus;
    int r, max_node = 0;

    memset(team, 0, sizeof(*team));
    if ((rank < 0) || (rank >= size) || (size > CRYPT_COLL_MAX_RANKS)) {
        return CRYPT_COLL_ERR_PARAM;
    }
    team->node_of = malloc(sizeof(int) * (size_t)size);
    if (team->node_of == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    for (r = 0; r < size; ++r) {
        if ((node_of[r] < 0) || (node_of[r] >= size)) {
            free(team->node_of);
            return CRYPT_COLL_ERR_PARAM;
        }
        team->node_of[r] = node_of[r];
        max_node         = (node_of[r] > max_node) ? node_of[r] : max_node;
    }
    team->rank      = rank;
    team->size      = size;
    team->num_nodes = max_node + 1;
    team->sendrecv  = sendrecv;
    team->ctx       = ctx;
    memcpy(team->salt, team_salt, CRYPT_COLL_TEAM_SALT_LEN);

    /* a group key (every node opens what any node sealed): HKDF-SHA256,
     * RFC 5869, from the job secret with its own salt and the fresh team
     * salt as info, so it is independent of every transport key (keyex.h) */
    if ((keyex_hkdf_extract((const uint8_t*)salt, sizeof(salt) - 1, job_secret,
                            KEYEX_JOB_SECRET_LEN, prk) != KEYEX_OK) ||
        (keyex_hkdf_expand(prk, team_salt, CRYPT_COLL_TEAM_SALT_LEN, key,
                           sizeof(key)) !=
         KEYEX_OK)) {
        OPENSSL_cleanse(prk, sizeof(prk));
        free(team->node_of);
        return CRYPT_COLL_ERR_PARAM;
    }
    astatus = crypt_aead_key_init(&team->key, backend, key, sizeof(key));
    OPENSSL_cleanse(prk, sizeof(prk));
    OPENSSL_cleanse(key, sizeof(key));
    if (astatus != CRYPT_AEAD_OK) {
        free(team->node_of);
        return CRYPT_COLL_ERR_PARAM;
    }
    return CRYPT_COLL_OK;
}

void crypt_coll_team_cleanup(crypt_coll_team_t *team)
{
    int i;

    crypt_aead_key_cleanup(&team->key);
    free(team->node_of);
    team->node_of = NULL;
    crypt_coll_task_team_cleanup(team);
    for (i = 0; i < CRYPT_COLL_WORKSPACE_SLOTS; ++i) {
        free(team->workspace[i]);
        team->workspace[i]      = NULL;
        team->workspace_size[i] = 0;
    }
}

void *crypt_coll_workspace(crypt_coll_team_t *team, int slot, size_t size)
{
    if (size > team->workspace_size[slot]) {
        free(team->workspace[slot]);
        team->workspace[slot]      = malloc(size);
        team->workspace_size[slot] = (team->workspace[slot] != NULL) ? size : 0;
    }
    return team->workspace[slot];
}

/* ---- bootstrap through an out-of-band all-gather ------------------------------ */

enum { CRYPT_COLL_HOST_ID_LEN = 128 };

/* what tells hosts apart: the kernel's boot id (as UCX's ucs_get_system_id)
 * and the host name */
static void crypt_coll_host_id(char id[CRYPT_COLL_HOST_ID_LEN])
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    size_t n = 0;

    memset(id, 0, CRYPT_COLL_HOST_ID_LEN);
    if (f != NULL) {
        n = fread(id, 1, 40, f);
        fclose(f);
    }
    id[n] = '|';
    gethostname(id + n + 1, CRYPT_COLL_HOST_ID_LEN - n - 2);
    id[CRYPT_COLL_HOST_ID_LEN - 1] = '\0';
}

crypt_coll_status_t crypt_coll_team_create(crypt_coll_team_t *team,
                                           const crypt_coll_oob_t *oob,
                                           const int *node_of,
                                           const uint8_t job_secret[32],
                                           crypt_aead_backend_t backend,
                                           crypt_coll_sendrecv_t sendrecv,
                                           void *ctx)
{
    const int size = oob->size;
    uint8_t salt[CRYPT_COLL_TEAM_SALT_LEN] = {0}, *salts;
    crypt_coll_status_t status = CRYPT_COLL_ERR_PARAM;
    char id[CRYPT_COLL_HOST_ID_LEN], *ids = NULL, error[160];
    int *nodes = NULL, r, q, next = 0;

    memset(team, 0, sizeof(*team));
    if ((size < 1) || (size > CRYPT_COLL_MAX_RANKS) || (oob->rank < 0) ||
        (oob->rank >= size)) {
        return CRYPT_COLL_ERR_PARAM;
    }
    salts = malloc((size_t)size * sizeof(salt));
    if (salts == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    /* a salt must never repeat under one job secret (crypt_coll_team_init):
     * rank 0's, fresh from the CSPRNG */
    if ((oob->rank == 0) && (RAND_bytes(salt, sizeof(salt)) != 1)) {
        goto out;
    }
    if (oob->allgather(oob->ctx, salt, salts, sizeof(salt)) != 0) {
        status = CRYPT_COLL_ERR_IO;
        goto out;
    }
    memcpy(salt, salts, sizeof(salt));

    if (node_of == NULL) {
        nodes = malloc(sizeof(int) * (size_t)size);
        if (nodes == NULL) {
            goto out;
        }
        if (getenv("UCX_CRYPT_COLL_NODES") != NULL) {
            if (crypt_coll_node_map_from_env(size, nodes, error, sizeof(error)) != 0) {
                fprintf(stderr, "ucx-crypt: %s\n", error);
                goto out;
            }
        } else {
            ids = malloc((size_t)size * CRYPT_COLL_HOST_ID_LEN);
            if (ids == NULL) {
                goto out;
            }
            crypt_coll_host_id(id);
            if (oob->allgather(oob->ctx, id, ids, CRYPT_COLL_HOST_ID_LEN) != 0) {
                status = CRYPT_COLL_ERR_IO;
                goto out;
            }
            for (r = 0; r < size; ++r) {
                nodes[r] = -1;
                for (q = 0; (q < r) && (nodes[r] < 0); ++q) {
                    if (!memcmp(ids + (size_t)q * CRYPT_COLL_HOST_ID_LEN,
                                ids + (size_t)r * CRYPT_COLL_HOST_ID_LEN,
                                CRYPT_COLL_HOST_ID_LEN)) {
                        nodes[r] = nodes[q];
                    }
                }
                if (nodes[r] < 0) {
                    nodes[r] = next++;
                }
            }
        }
        node_of = nodes;
    }
    status = crypt_coll_team_init(team, oob->rank, size, node_of, job_secret, salt,
                                  backend, sendrecv, ctx);
out:
    free(ids);
    free(nodes);
    free(salts);
    return status;
}
