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

#include <endian.h>
#include <stddef.h>
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

int crypt_coll_node_map_parse(const char *value, int size, int *node_of,
                              char *error, size_t error_len)
{
    crypt_coll_mapping_t mapping = CRYPT_COLL_MAP_BLOCK;
    char *end;
    long nodes;

    if ((value == NULL) || (value[0] == '\0')) {
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

/* ---- team and its keys ------------------------------------------------------- */

/* The team's public name: the first 8 bytes of SHA-256 over a label and
 * the transcript's hash. The transcript stays an input of the team key
 * that nobody sees (it crosses only inside the MPI library's traffic,
 * sealed by crypt where the plugin is loaded), so a recording plus a job
 * secret stolen later does not give the team key; the name shows nothing
 * of it (FIPS 180-4 preimage resistance). */
int crypt_coll_team_public_id(const uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN],
                              uint64_t *public_id)
{
    static const char label[] = "ucx-crypt team name";
    uint8_t input[sizeof(label) - 1 + CRYPT_COLL_TEAM_ID_LEN];
    uint8_t hash[KEYEX_TRANSCRIPT_LEN];
    int ok;

    memcpy(input, label, sizeof(label) - 1);
    memcpy(input + sizeof(label) - 1, team_id, CRYPT_COLL_TEAM_ID_LEN);
    ok = (keyex_hash(input, sizeof(input), hash) == KEYEX_OK);
    memcpy(public_id, hash, sizeof(*public_id));
    crypt_wipe(input, sizeof(input));
    return ok ? 0 : -1;
}

crypt_coll_status_t crypt_coll_team_init(crypt_coll_team_t *team, int rank,
                                         int size, const int *node_of,
                                         const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                         const uint8_t team_id[CRYPT_COLL_TEAM_ID_LEN],
                                         unsigned key_len,
                                         crypt_aead_backend_t backend,
                                         crypt_coll_sendrecv_t sendrecv,
                                         void *ctx)
{
    int r, max_node = 0;

    memset(team, 0, sizeof(*team));
    if ((rank < 0) || (rank >= size) || (size > CRYPT_COLL_MAX_RANKS) ||
        ((key_len != 16) && (key_len != 32))) {
        return CRYPT_COLL_ERR_PARAM;
    }
    team->node_of = malloc(sizeof(int) * (size_t)size);
    team->epoch0  = keyex_secure_alloc(sizeof(*team->epoch0));
    if ((team->node_of == NULL) || (team->epoch0 == NULL)) {
        goto err;
    }
    for (r = 0; r < size; ++r) {
        if ((node_of[r] < 0) || (node_of[r] >= size)) {
            goto err;
        }
        team->node_of[r] = node_of[r];
        max_node         = (node_of[r] > max_node) ? node_of[r] : max_node;
    }
    team->rank      = rank;
    team->size      = size;
    team->num_nodes = max_node + 1;
    team->sendrecv  = sendrecv;
    team->ctx       = ctx;
    team->backend   = backend;
    crypt_coll_team_set_epoch_limit(team, 0);
    if (crypt_coll_team_public_id(team_id, &team->public_id) != 0) {
        goto err;
    }

    /* a group key (every node opens what any node sealed), derived in
     * src/keyex from the job secret and the bootstrap transcript */
    if (keyex_derive_team_keys(job_secret, team_id, key_len, team->epoch0) !=
        KEYEX_OK) {
        goto err;
    }
    return CRYPT_COLL_OK;

err:
    if (team->epoch0 != NULL) {
        keyex_secure_free(team->epoch0, sizeof(*team->epoch0));
    }
    free(team->node_of);
    memset(team, 0, sizeof(*team));
    return CRYPT_COLL_ERR_PARAM;
}

int crypt_coll_team_lane_key(const crypt_coll_team_t *team,
                             uint8_t key[KEYEX_SECRET_LEN], unsigned *key_len)
{
    if ((team->epoch0 == NULL) ||
        (keyex_derive_lane_key(team->epoch0, key) != KEYEX_OK)) {
        return -1;
    }
    *key_len = team->epoch0->key_len;
    return 0;
}

void crypt_coll_team_set_epoch_limit(crypt_coll_team_t *team, uint64_t records)
{
    /* Every rank seals under the same key with a nonce of its own, so the
     * key's limits (keyex.h: records and bytes per key, for AES-GCM's
     * confidentiality bound) are shared: each rank takes its 1/size. */
    team->epoch_max_records = records ? records :
                              KEYEX_REKEY_RECORDS / (uint64_t)team->size;
    team->epoch_max_bytes   = KEYEX_REKEY_BYTES / (uint64_t)team->size;
}

/* The key of `epoch`, kept open in a small cache, derived from the team
 * secret in one step (keyex_derive_epoch_keys), whatever the epoch: ranks
 * move through epochs at their own pace. NULL when it cannot be had. */
crypt_aead_key_t *crypt_coll_epoch_key(crypt_coll_team_t *team, uint32_t epoch)
{
    crypt_coll_epoch_key_t *slot = &team->keys[epoch % CRYPT_COLL_EPOCH_KEYS];
    keyex_traffic_keys_t *keys;
    crypt_aead_status_t status;

    if (slot->valid && (slot->epoch == epoch)) {
        return &slot->aead;
    }
    if (team->epoch0 == NULL) {
        return NULL;
    }
    keys = keyex_secure_alloc(sizeof(*keys));
    if ((keys == NULL) ||
        (keyex_derive_epoch_keys(team->epoch0, epoch, keys) != KEYEX_OK)) {
        keyex_secure_free(keys, sizeof(*keys));
        return NULL;
    }
    if (slot->valid) {
        crypt_aead_key_cleanup(&slot->aead);
        slot->valid = 0;
    }
    status = crypt_aead_key_init(&slot->aead, team->backend, keys->key,
                                 keys->key_len);
    keyex_secure_free(keys, sizeof(*keys));
    if (status != CRYPT_AEAD_OK) {
        return NULL;
    }
    slot->valid = 1;
    slot->epoch = epoch;
    return &slot->aead;
}

void crypt_coll_team_cleanup(crypt_coll_team_t *team)
{
    int i;

    for (i = 0; i < CRYPT_COLL_EPOCH_KEYS; ++i) {
        if (team->keys[i].valid) {
            crypt_aead_key_cleanup(&team->keys[i].aead);
            team->keys[i].valid = 0;
        }
    }
    if (team->epoch0 != NULL) {
        keyex_secure_free(team->epoch0, sizeof(*team->epoch0));
        team->epoch0 = NULL;
    }
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

/* This rank's bootstrap message, MACed (crypt_coll_wire.h) */
static int crypt_coll_hello_make(crypt_coll_hello_t *hello, int rank, int size,
                                 unsigned key_len,
                                 const uint8_t mac_key[KEYEX_SECRET_LEN])
{
    memset(hello, 0, sizeof(*hello));
    hello->version = CRYPT_COLL_HELLO_VERSION;
    hello->key_len = (uint8_t)key_len;
    hello->rank    = htole32((uint32_t)rank);
    hello->size    = htole32((uint32_t)size);
    crypt_coll_host_id(hello->host_id);
    /* fresh from the CSPRNG: no two teams share a transcript, and (sent
     * only inside the MPI library's traffic) it is a secret input of the
     * team key: the secret generator */
    return crypt_random_secret(hello->random, sizeof(hello->random)) &&
           (keyex_mac(mac_key, hello, offsetof(crypt_coll_hello_t, mac),
                      hello->mac) == KEYEX_OK);
}

/* Is `hello` rank r's of this team, MACed under the job secret's key? */
static int crypt_coll_hello_valid(const crypt_coll_hello_t *hello, int r,
                                  int size, unsigned key_len,
                                  const uint8_t mac_key[KEYEX_SECRET_LEN])
{
    uint8_t mac[KEYEX_MAC_LEN];
    int ok;

    ok = (keyex_mac(mac_key, hello, offsetof(crypt_coll_hello_t, mac), mac) ==
          KEYEX_OK) && keyex_mac_equal(mac, hello->mac);
    crypt_wipe(mac, sizeof(mac));
    /* only authenticated fields are read, and only after the MAC */
    return ok && (hello->version == CRYPT_COLL_HELLO_VERSION) &&
           (hello->key_len == key_len) && (hello->reserved[0] == 0) &&
           (hello->reserved[1] == 0) && (le32toh(hello->rank) == (uint32_t)r) &&
           (le32toh(hello->size) == (uint32_t)size) &&
           (memchr(hello->host_id, '\0', sizeof(hello->host_id)) != NULL);
}

/* nodes numbered in rank order by (authenticated) host identity */
static void crypt_coll_nodes_from_hellos(const crypt_coll_hello_t *hellos,
                                         int size, int *nodes)
{
    int r, q, next = 0;

    for (r = 0; r < size; ++r) {
        nodes[r] = -1;
        for (q = 0; (q < r) && (nodes[r] < 0); ++q) {
            if (!memcmp(hellos[q].host_id, hellos[r].host_id,
                        CRYPT_COLL_HOST_ID_LEN)) {
                nodes[r] = nodes[q];
            }
        }
        if (nodes[r] < 0) {
            nodes[r] = next++;
        }
    }
}

/* Rank r's confirmation of a transcript (crypt_coll_wire.h) */
static int crypt_coll_confirm_make(const uint8_t mac_key[KEYEX_SECRET_LEN], int r,
                                   const uint8_t transcript[KEYEX_TRANSCRIPT_LEN],
                                   uint8_t confirm[KEYEX_MAC_LEN])
{
    crypt_coll_confirm_input_t input;
    int ok;

    memcpy(input.label, CRYPT_COLL_CONFIRM_LABEL, sizeof(input.label));
    input.rank = htole32((uint32_t)r);
    memcpy(input.transcript, transcript, sizeof(input.transcript));
    ok = (keyex_mac(mac_key, &input, sizeof(input), confirm) == KEYEX_OK);
    crypt_wipe(&input, sizeof(input)); /* (the transcript: a key input) */
    return ok;
}

/* The first round's verdict on what this rank received: every message
 * MACed, its fields right, its own message back as it sent it */
static int crypt_coll_hellos_valid(const crypt_coll_hello_t *hellos,
                                   const crypt_coll_hello_t *mine, int rank,
                                   int size, unsigned key_len,
                                   const uint8_t mac_key[KEYEX_SECRET_LEN])
{
    int r;

    for (r = 0; r < size; ++r) {
        if (!crypt_coll_hello_valid(&hellos[r], r, size, key_len, mac_key)) {
            fprintf(stderr, "ucx-crypt: the collective bootstrap message of "
                    "rank %d failed authentication (another job secret, key "
                    "size or job, or altered on the way): no team\n", r);
            return 0;
        }
    }
    /* a whole earlier transcript replayed to this rank brings back an old
     * message of its own: the old team key and nonces again */
    if (crypt_memcmp_ct(&hellos[rank], mine, sizeof(*mine)) != 0) {
        fprintf(stderr, "ucx-crypt: rank %d's own collective bootstrap message "
                "came back as another (an earlier team's, replayed): no "
                "team\n", rank);
        return 0;
    }
    return 1;
}

crypt_coll_status_t crypt_coll_team_create(crypt_coll_team_t *team,
                                           const crypt_coll_oob_t *oob,
                                           const int *node_of,
                                           const uint8_t job_secret[KEYEX_JOB_SECRET_LEN],
                                           unsigned key_len,
                                           crypt_aead_backend_t backend,
                                           crypt_coll_sendrecv_t sendrecv,
                                           void *ctx)
{
    const int size      = oob->size;
    const char *job_id  = (oob->job_id != NULL) ? oob->job_id : "";
    crypt_coll_status_t status = CRYPT_COLL_ERR_PARAM;
    uint8_t confirm[KEYEX_MAC_LEN], (*confirms)[KEYEX_MAC_LEN] = NULL;
    crypt_coll_hello_t *hellos = NULL;
    int *nodes = NULL, r, valid;
    /* Every rank's randoms and their hash are an input of the team key,
     * beside the job secret (its forward secrecy, crypto review N2): in
     * secure memory (not dumped, wiped when freed), as keyex keeps what
     * it derives; never a copy in the team. The MPI library's buffers that
     * carried the hellos are its own (docs/threat-model.md). */
    struct {
        uint8_t            mac_key[KEYEX_SECRET_LEN];
        uint8_t            team_id[CRYPT_COLL_TEAM_ID_LEN];
        crypt_coll_hello_t mine;
    } *secret = NULL;
    const size_t hellos_len = sizeof(*hellos) * (size_t)size;

    memset(team, 0, sizeof(*team));
    if ((size < 1) || (size > CRYPT_COLL_MAX_RANKS) || (oob->rank < 0) ||
        (oob->rank >= size) || (strlen(job_id) > KEYEX_JOB_ID_MAX)) {
        return CRYPT_COLL_ERR_PARAM;
    }
    secret   = keyex_secure_alloc(sizeof(*secret));
    hellos   = keyex_secure_alloc(hellos_len);
    confirms = calloc((size_t)size, sizeof(*confirms));
    nodes    = malloc(sizeof(int) * (size_t)size);
    if ((secret == NULL) || (hellos == NULL) || (confirms == NULL) ||
        (nodes == NULL) ||
        (keyex_derive_bootstrap_key(job_secret, job_id, strlen(job_id),
                                    secret->mac_key) != KEYEX_OK) ||
        !crypt_coll_hello_make(&secret->mine, oob->rank, size, key_len,
                               secret->mac_key)) {
        goto out;
    }
    if (oob->allgather(oob->ctx, &secret->mine, hellos, sizeof(secret->mine)) != 0) {
        status = CRYPT_COLL_ERR_IO;
        goto out;
    }
    /* every rank's message, MACed under the job secret and job id, before
     * anything in it is used: a party without the secret changes nothing */
    valid = crypt_coll_hellos_valid(hellos, &secret->mine, oob->rank, size,
                                    key_len, secret->mac_key) &&
            (keyex_hash(hellos, hellos_len, secret->team_id) == KEYEX_OK) &&
            crypt_coll_confirm_make(secret->mac_key, oob->rank,
                                    secret->team_id, confirm);
    if (!valid) {
        memset(confirm, 0, sizeof(confirm)); /* matches no rank's MAC */
    }
    /* the second round, on every rank: did all see the same messages? */
    if (oob->allgather(oob->ctx, confirm, confirms, sizeof(confirm)) != 0) {
        status = CRYPT_COLL_ERR_IO;
        goto out;
    }
    status = CRYPT_COLL_ERR_AUTH;
    for (r = 0; valid && (r < size); ++r) {
        if (!crypt_coll_confirm_make(secret->mac_key, r, secret->team_id,
                                     confirm)) {
            status = CRYPT_COLL_ERR_PARAM;
            goto out;
        }
        if (!keyex_mac_equal(confirm, confirms[r])) {
            fprintf(stderr, "ucx-crypt: rank %d saw other collective bootstrap "
                    "messages than rank %d (one altered, spliced or replayed "
                    "on the way, or refused there): no team\n", r, oob->rank);
            goto out;
        }
    }
    if (!valid) {
        goto out;
    }

    /* the team key from every rank's contribution: the transcript's hash */
    if (node_of == NULL) {
        crypt_coll_nodes_from_hellos(hellos, size, nodes);
        node_of = nodes;
    }
    status = crypt_coll_team_init(team, oob->rank, size, node_of, job_secret,
                                  secret->team_id, key_len, backend, sendrecv,
                                  ctx);
out:
    crypt_wipe(confirm, sizeof(confirm));
    if (secret != NULL) {
        keyex_secure_free(secret, sizeof(*secret));
    }
    if (hellos != NULL) {
        keyex_secure_free(hellos, hellos_len);
    }
    free(confirms);
    free(nodes);
    return status;
}
