/*
 * Encrypted all-gather, core layer (crypt_coll.h). Algorithm names and cost
 * terms follow "Efficient Algorithms for Encrypted All-gather Operation",
 * section IV and Table II.
 *
 * Frames: the block of rank `owner`, sealed by rank `sealer` under the
 * team key with the record nonce of src/aead (4-byte prefix = sealer's
 * rank, 8-byte counter of that sealer: unique per key by construction,
 * SP 800-38D section 8.2.1). AAD = (collective number, owner, sealer,
 * length): a frame cannot be replayed into another collective, moved to
 * another block or cut short.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll.h"
#include "keyex/keyex.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <endian.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t collective;
    uint32_t owner;
    uint32_t sealer;
    uint64_t length;
} __attribute__((packed)) crypt_coll_aad_t;

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

void crypt_coll_task_team_cleanup(crypt_coll_team_t *team); /* crypt_coll_task.c */

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

/* A large buffer of one call, from the team's workspace: kept between
 * calls, because a fresh multi-MiB malloc costs a page fault and the
 * kernel's zeroing per 4 KiB every time (glibc gives freed blocks that
 * large back to the kernel): measured, the packing of C-Ring's 8 MiB
 * local ring took 5 to 13 ms of a 4 MiB all-gather, the copy itself 1.
 * One collective runs on a team at a time (tasks included), so a slot is
 * the call's own; functions that call each other use distinct slots
 * (CRYPT_COLL_WS_*). Contents are not kept. NULL when out of memory. */
enum {
    CRYPT_COLL_WS_FRAMES = 0,   /* naive, O-Ring, Bruck */
    CRYPT_COLL_WS_OUT,
    CRYPT_COLL_WS_IN,
    CRYPT_COLL_WS_MERGED,
    CRYPT_COLL_WS_OUTER_FRAMES, /* C-Ring / C-RD (around Bruck), HS */
    CRYPT_COLL_WS_OUTER_OUT,
    CRYPT_COLL_WS_OUTER_IN
};

/* C-Ring / C-RD's local ring packs blocks below this size into one message */
enum { CRYPT_COLL_RING_PACK_MAX = 64 * 1024 };

static void *crypt_coll_workspace(crypt_coll_team_t *team, int slot, size_t size)
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

/* ---- frames and moves --------------------------------------------------------- */

static void crypt_coll_aad(crypt_coll_aad_t *aad, const crypt_coll_team_t *team,
                           int owner, int sealer, size_t m)
{
    aad->collective = htole64(team->collective);
    aad->owner      = htole32((uint32_t)owner);
    aad->sealer     = htole32((uint32_t)sealer);
    aad->length     = htole64(m);
}

/* frame = be32 sealer || be64 sequence || ciphertext || tag */
static crypt_coll_status_t crypt_coll_seal(crypt_coll_team_t *team, int owner,
                                           const uint8_t *plain, size_t m,
                                           uint8_t *frame)
{
    uint32_t sealer = htobe32((uint32_t)team->rank);
    uint64_t seq    = team->next_nonce++;
    uint64_t be_seq = htobe64(seq);
    crypt_coll_aad_t aad;

    memcpy(frame, &sealer, 4);
    memcpy(frame + 4, &be_seq, 8);
    crypt_coll_aad(&aad, team, owner, team->rank, m);
    if (crypt_record_seal(&team->key, frame, seq, &aad, sizeof(aad), plain, m,
                          frame + CRYPT_COLL_FRAME_HDR,
                          frame + CRYPT_COLL_FRAME_HDR + m) != CRYPT_AEAD_OK) {
        return CRYPT_COLL_ERR_PARAM;
    }
    team->counters.bytes_sealed += m;
    team->counters.seal_calls++;
    return CRYPT_COLL_OK;
}

/* expected_sealer: the only rank the frame may come from, or -1 for any
 * (frames that are forwarded as they are) */
static crypt_coll_status_t crypt_coll_open(crypt_coll_team_t *team, int owner,
                                           int expected_sealer,
                                           const uint8_t *frame, size_t m,
                                           uint8_t *plain)
{
    uint32_t sealer;
    uint64_t seq;
    crypt_coll_aad_t aad;

    memcpy(&sealer, frame, 4);
    memcpy(&seq, frame + 4, 8);
    sealer = be32toh(sealer);
    seq    = be64toh(seq);
    if ((sealer >= (uint32_t)team->size) ||
        ((expected_sealer >= 0) && (sealer != (uint32_t)expected_sealer))) {
        memset(plain, 0, m);
        return CRYPT_COLL_ERR_AUTH;
    }
    crypt_coll_aad(&aad, team, owner, (int)sealer, m);
    team->counters.open_calls++;
    team->counters.bytes_opened += m;
    /* a failed open zeroes `plain` (aead.h) */
    return (crypt_record_open(&team->key, frame, seq, &aad, sizeof(aad),
                              frame + CRYPT_COLL_FRAME_HDR, m, plain,
                              frame + CRYPT_COLL_FRAME_HDR + m) == CRYPT_AEAD_OK) ?
           CRYPT_COLL_OK : CRYPT_COLL_ERR_AUTH;
}

static int crypt_coll_same_node(const crypt_coll_team_t *team, int peer)
{
    return team->node_of[peer] == team->node_of[team->rank];
}

/* crypt_coll_task.c: is a task in flight that this call is not part of? */
int crypt_coll_task_busy(const crypt_coll_team_t *team);

/* crypt_coll_task.c: the same exchange inside a task, yielding */
int crypt_coll_task_move(crypt_coll_team_t *team, int dst, const void *sbuf,
                         size_t slen, int src, void *rbuf, size_t rlen);

/* every move goes through here: plaintext to another node is refused */
static crypt_coll_status_t crypt_coll_move(crypt_coll_team_t *team, int dst,
                                           const void *sbuf, size_t slen,
                                           int sealed, int src, void *rbuf,
                                           size_t rlen)
{
    if ((dst >= 0) && !sealed && !crypt_coll_same_node(team, dst)) {
        team->counters.inter_node_plaintext_bytes += slen;
        return CRYPT_COLL_ERR_PARAM; /* a bug in an algorithm: never send it */
    }
    if (dst >= 0) {
        team->counters.bytes_sent += slen;
    }
    if (team->task != NULL) {
        return (crypt_coll_task_move(team, dst, sbuf, slen, src, rbuf, rlen) == 0) ?
               CRYPT_COLL_OK : CRYPT_COLL_ERR_IO;
    }
    return (team->sendrecv(team->ctx, dst, sbuf, slen, src, rbuf, rlen) == 0) ?
           CRYPT_COLL_OK : CRYPT_COLL_ERR_IO;
}

/* ---- Naive: seal own block, ring on frames, open all -------------------------- */

static crypt_coll_status_t crypt_allgather_naive(crypt_coll_team_t *team,
                                                 uint8_t *rbuf, size_t m)
{
    const int p = team->size, r = team->rank;
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *frames = crypt_coll_workspace(team, CRYPT_COLL_WS_FRAMES,
                                           frame_len * (size_t)p);
    crypt_coll_status_t status, result = CRYPT_COLL_OK;
    int s, j;

    if (frames == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    status = crypt_coll_seal(team, r, rbuf + (size_t)r * m, m,
                             frames + (size_t)r * frame_len);
    for (s = 0; (status == CRYPT_COLL_OK) && (s < p - 1); ++s) {
        int send_idx = (r - s + p) % p, recv_idx = (r - s - 1 + p) % p;
        status = crypt_coll_move(team, (r + 1) % p,
                                 frames + (size_t)send_idx * frame_len,
                                 frame_len, 1, (r - 1 + p) % p,
                                 frames + (size_t)recv_idx * frame_len, frame_len);
    }
    for (j = 0; (status == CRYPT_COLL_OK) && (j < p); ++j) {
        if ((j != r) &&
            (crypt_coll_open(team, j, -1, frames + (size_t)j * frame_len, m,
                             rbuf + (size_t)j * m) != CRYPT_COLL_OK)) {
            result = CRYPT_COLL_ERR_AUTH; /* keep going: zero every bad block */
        }
    }
    return (status != CRYPT_COLL_OK) ? status : result;
}

/* ---- O-Ring: ring by rank; sealed only where it crosses nodes ------------------ */

static crypt_coll_status_t crypt_allgather_o_ring(crypt_coll_team_t *team,
                                                  uint8_t *rbuf, size_t m)
{
    const int p = team->size, r = team->rank;
    const int right = (r + 1) % p, left = (r - 1 + p) % p;
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *frames = crypt_coll_workspace(team, CRYPT_COLL_WS_FRAMES,
                                           frame_len * (size_t)p);
    uint8_t *out    = crypt_coll_workspace(team, CRYPT_COLL_WS_OUT, frame_len);
    char *have_frame = calloc((size_t)p, 1);
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int s, failed = 0;

    if ((frames == NULL) || (out == NULL) || (have_frame == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (s = 0; (status == CRYPT_COLL_OK) && (s < p - 1); ++s) {
        int send_idx = (r - s + p) % p, recv_idx = (r - s - 1 + p) % p;
        int seal_out = !crypt_coll_same_node(team, right);
        int sealed_in = !crypt_coll_same_node(team, left);
        const uint8_t *sbuf = rbuf + (size_t)send_idx * m;
        size_t slen = m;

        if (seal_out) {
            /* a frame that came from another node goes on as it is: the
             * block is sealed once, by the node that owns it */
            if (have_frame[send_idx]) {
                sbuf = frames + (size_t)send_idx * frame_len;
            } else {
                status = crypt_coll_seal(team, send_idx, sbuf, m, out);
                sbuf   = out;
            }
            slen = frame_len;
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, right, sbuf, slen, seal_out, left,
                                 sealed_in ? frames + (size_t)recv_idx * frame_len :
                                             rbuf + (size_t)recv_idx * m,
                                 sealed_in ? frame_len : m);
        if ((status == CRYPT_COLL_OK) && sealed_in) {
            /* a failed open keeps the schedule going (the peers would wait
             * forever otherwise); the agreement step reports it */
            if (crypt_coll_open(team, recv_idx, -1,
                                frames + (size_t)recv_idx * frame_len, m,
                                rbuf + (size_t)recv_idx * m) != CRYPT_COLL_OK) {
                failed = 1;
            }
            have_frame[recv_idx] = 1;
        }
    }
    free(have_frame);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}

/* ---- Bruck: recursive doubling for any number of members ----------------------- */

/* How blocks cross nodes in a Bruck exchange. */
typedef enum {
    CRYPT_COLL_FRAMES_PER_BLOCK, /* O-RD, C-RD: a block is sealed once, where
                                    it first leaves its node; its frame is
                                    forwarded as it is and opened once by
                                    each rank that receives it */
    CRYPT_COLL_FRAMES_MERGED     /* O-RD2: one frame per inter-node message
                                    (open, merge, seal again) */
} crypt_coll_framing_t;

/*
 * All-gather among `k` members (ranks, `pos` is ours) of the blocks in
 * slots 0..k-1, slot i owned by rank owner[i] (-1: an empty slot, nothing
 * to move). Bruck's algorithm (ceil(lg k) rounds, any k): in round s we
 * send the slots pos .. pos+cnt-1 to member pos - 2^s and receive the
 * slots pos+2^s .. from member pos + 2^s, cnt = min(2^s, k - 2^s).
 * Plaintext blocks live in rbuf at their owner's place; frames[] holds the
 * frame of each slot we have one for.
 */
static crypt_coll_status_t
crypt_coll_bruck(crypt_coll_team_t *team, const int *members, const int *owner,
                 int k, int pos, crypt_coll_framing_t framing, uint8_t *rbuf,
                 size_t m, int *failed)
{
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *frames = crypt_coll_workspace(team, CRYPT_COLL_WS_FRAMES,
                                           frame_len * (size_t)k + 1);
    char *have_frame = calloc((size_t)k + 1, 1);
    uint8_t *out = crypt_coll_workspace(team, CRYPT_COLL_WS_OUT,
                                        (frame_len + m) * (size_t)k +
                                        CRYPT_COLL_FRAME_OVERHEAD);
    uint8_t *in  = crypt_coll_workspace(team, CRYPT_COLL_WS_IN,
                                        (frame_len + m) * (size_t)k +
                                        CRYPT_COLL_FRAME_OVERHEAD);
    uint8_t *merged = crypt_coll_workspace(team, CRYPT_COLL_WS_MERGED,
                                           m * (size_t)k + 1);
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int dist, step = 0;

    if (!frames || !have_frame || !out || !in || !merged) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (dist = 1; (status == CRYPT_COLL_OK) && (dist < k); dist *= 2, ++step) {
        int cnt = (dist < k - dist) ? dist : k - dist, j;
        int to = members[(pos - dist + k) % k], from = members[(pos + dist) % k];
        int seal_out = !crypt_coll_same_node(team, to);
        int sealed_in = !crypt_coll_same_node(team, from);
        size_t out_len = 0, in_len = 0, plain_len = 0;

        /* what goes out */
        for (j = 0; j < cnt; ++j) {
            int slot = (pos + j) % k, o = owner[slot];
            if (o < 0) {
                continue;
            }
            if (!seal_out) {
                memcpy(out + out_len, rbuf + (size_t)o * m, m);
                out_len += m;
            } else if (framing == CRYPT_COLL_FRAMES_MERGED) {
                memcpy(merged + plain_len, rbuf + (size_t)o * m, m);
                plain_len += m;
            } else {
                if (!have_frame[slot]) {
                    status = crypt_coll_seal(team, o, rbuf + (size_t)o * m, m,
                                             frames + (size_t)slot * frame_len);
                    have_frame[slot] = 1;
                }
                memcpy(out + out_len, frames + (size_t)slot * frame_len, frame_len);
                out_len += frame_len;
            }
        }
        if (seal_out && (framing == CRYPT_COLL_FRAMES_MERGED) && (plain_len > 0)) {
            /* owner field: the round, marked, so a merged frame cannot pass
             * for a block (AAD) */
            status = crypt_coll_seal(team, (int)(0x40000000u | (unsigned)step),
                                     merged, plain_len, out);
            out_len = plain_len + CRYPT_COLL_FRAME_OVERHEAD;
        }
        /* what comes in: known from the slots alone */
        for (j = 0, plain_len = 0; j < cnt; ++j) {
            if (owner[(pos + dist + j) % k] >= 0) {
                plain_len += m;
                in_len    += (sealed_in && (framing == CRYPT_COLL_FRAMES_PER_BLOCK)) ?
                             frame_len : m;
            }
        }
        if (sealed_in && (framing == CRYPT_COLL_FRAMES_MERGED) && (plain_len > 0)) {
            in_len = plain_len + CRYPT_COLL_FRAME_OVERHEAD;
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, to, out, out_len, seal_out, from, in, in_len);
        if (status != CRYPT_COLL_OK) {
            break;
        }

        /* unpack */
        if (sealed_in && (framing == CRYPT_COLL_FRAMES_MERGED) && (plain_len > 0) &&
            (crypt_coll_open(team, (int)(0x40000000u | (unsigned)step), -1, in,
                             plain_len, merged) != CRYPT_COLL_OK)) {
            *failed = 1;
        }
        for (j = 0, in_len = 0, plain_len = 0; j < cnt; ++j) {
            int slot = (pos + dist + j) % k, o = owner[slot];
            if (o < 0) {
                continue;
            }
            if (!sealed_in) {
                memcpy(rbuf + (size_t)o * m, in + in_len, m);
                in_len += m;
            } else if (framing == CRYPT_COLL_FRAMES_MERGED) {
                memcpy(rbuf + (size_t)o * m, merged + plain_len, m);
                plain_len += m;
            } else {
                memcpy(frames + (size_t)slot * frame_len, in + in_len, frame_len);
                have_frame[slot] = 1;
                in_len += frame_len;
                if (crypt_coll_open(team, o, -1, frames + (size_t)slot * frame_len, m,
                                    rbuf + (size_t)o * m) != CRYPT_COLL_OK) {
                    *failed = 1; /* keep the schedule; the agreement reports it */
                }
            }
        }
    }
    free(have_frame);
    return status;
}

static crypt_coll_status_t crypt_allgather_o_rd(crypt_coll_team_t *team,
                                                uint8_t *rbuf, size_t m,
                                                crypt_coll_framing_t framing)
{
    int *ranks = malloc(sizeof(int) * (size_t)team->size), r, failed = 0;
    crypt_coll_status_t status;

    if (ranks == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    for (r = 0; r < team->size; ++r) {
        ranks[r] = r;
    }
    status = crypt_coll_bruck(team, ranks, ranks, team->size, team->rank,
                              framing, rbuf, m, &failed);
    free(ranks);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}

/* ---- C-Ring: sealed sub-all-gathers per local index, then a local ring --------- */

typedef struct {
    int num_nodes;
    int *count;     /* ranks per node */
    int **ranks;    /* ranks of each node, ascending */
    int max_local;
} crypt_coll_layout_t;

static int crypt_coll_layout(const crypt_coll_team_t *team, crypt_coll_layout_t *l)
{
    int n, r;

    l->num_nodes = team->num_nodes;
    l->count     = calloc((size_t)l->num_nodes, sizeof(int));
    l->ranks     = calloc((size_t)l->num_nodes, sizeof(int*));
    l->max_local = 0;
    if ((l->count == NULL) || (l->ranks == NULL)) {
        return -1;
    }
    for (r = 0; r < team->size; ++r) {
        l->count[team->node_of[r]]++;
    }
    for (n = 0; n < l->num_nodes; ++n) {
        l->ranks[n] = calloc((size_t)l->count[n] + 1, sizeof(int));
        if (l->ranks[n] == NULL) {
            return -1;
        }
        l->max_local = (l->count[n] > l->max_local) ? l->count[n] : l->max_local;
        l->count[n]  = 0;
    }
    for (r = 0; r < team->size; ++r) {
        n = team->node_of[r];
        l->ranks[n][l->count[n]++] = r;
    }
    return 0;
}

static void crypt_coll_layout_free(crypt_coll_layout_t *l)
{
    int n;

    for (n = 0; l->ranks && (n < l->num_nodes); ++n) {
        free(l->ranks[n]);
    }
    free(l->ranks);
    free(l->count);
}

/* the member of node n in group g: its rank with local index g mod count
 * (a node with fewer ranks lets one rank serve several groups) */
static int crypt_coll_member(const crypt_coll_layout_t *l, int n, int g)
{
    return (l->count[n] > 0) ? l->ranks[n][g % l->count[n]] : -1;
}

/* the owner of group g's block on node n, or -1 */
static int crypt_coll_owner(const crypt_coll_layout_t *l, int n, int g)
{
    return (g < l->count[n]) ? l->ranks[n][g] : -1;
}

/* the owners of the blocks that local rank q passes on in C-Ring / C-RD's
 * local ring (every group it served, from every node), in ring order */
static int crypt_coll_group_blocks(const crypt_coll_layout_t *l, int q,
                                   int nodes_in, int *owners)
{
    int g, n, count = 0;

    for (g = 0; g < l->max_local; ++g) {
        for (n = 0; n < l->num_nodes; ++n) {
            int owner = crypt_coll_owner(l, n, g);
            if ((owner >= 0) && (g % nodes_in == q)) {
                owners[count++] = owner;
            }
        }
    }
    return count;
}

/* C-Ring (ring sub-all-gathers) and C-RD (Bruck sub-all-gathers) */
static crypt_coll_status_t crypt_allgather_concurrent(crypt_coll_team_t *team,
                                                      uint8_t *rbuf, size_t m,
                                                      int use_bruck)
{
    const int r = team->rank, my_node = team->node_of[r];
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *frames = NULL, *pack_out = NULL, *pack_in = NULL;
    int *out_owner = NULL, *in_owner = NULL;
    int N, g, s, my_local = 0, li, nodes_in, failed = 0;

    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N = l.num_nodes;
    for (li = 0; li < l.count[my_node]; ++li) {
        if (l.ranks[my_node][li] == r) {
            my_local = li;
        }
    }
    frames   = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_FRAMES,
                                    frame_len * (size_t)N);
    if (m < CRYPT_COLL_RING_PACK_MAX) { /* the local ring packs (step 2) */
        pack_out = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_OUT,
                                        m * (size_t)N * (size_t)l.max_local + 1);
        pack_in  = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_IN,
                                        m * (size_t)N * (size_t)l.max_local + 1);
    }
    if ((frames == NULL) ||
        ((m < CRYPT_COLL_RING_PACK_MAX) && ((pack_out == NULL) || (pack_in == NULL)))) {
        status = CRYPT_COLL_ERR_PARAM;
    }

    /* step 1: for each group this rank serves, a ring over one member per
     * node (all hops cross nodes): each owner seals its block once, every
     * node opens each foreign block of the group once */
    for (g = 0; (status == CRYPT_COLL_OK) && (g < l.max_local); ++g) {
        if (crypt_coll_member(&l, my_node, g) != r) {
            continue;
        }
        if (use_bruck) {
            int n, members[N > 0 ? N : 1], owners[N > 0 ? N : 1];
            for (n = 0; n < N; ++n) {
                members[n] = crypt_coll_member(&l, n, g);
                owners[n]  = crypt_coll_owner(&l, n, g);
            }
            status = crypt_coll_bruck(team, members, owners, N, my_node,
                                      CRYPT_COLL_FRAMES_PER_BLOCK, rbuf, m,
                                      &failed);
            continue;
        }
        int next = crypt_coll_member(&l, (my_node + 1) % N, g);
        int prev = crypt_coll_member(&l, (my_node - 1 + N) % N, g);
        if ((N > 1) && (crypt_coll_owner(&l, my_node, g) == r)) {
            status = crypt_coll_seal(team, r, rbuf + (size_t)r * m, m,
                                     frames + (size_t)my_node * frame_len);
        }
        for (s = 0; (status == CRYPT_COLL_OK) && (s < N - 1); ++s) {
            int send_node = (my_node - s + N) % N, recv_node = (my_node - s - 1 + N) % N;
            int send_owner = crypt_coll_owner(&l, send_node, g);
            int recv_owner = crypt_coll_owner(&l, recv_node, g);
            status = crypt_coll_move(team, next,
                                     frames + (size_t)send_node * frame_len,
                                     (send_owner >= 0) ? frame_len : 0, 1, prev,
                                     frames + (size_t)recv_node * frame_len,
                                     (recv_owner >= 0) ? frame_len : 0);
            if ((status == CRYPT_COLL_OK) && (recv_owner >= 0) &&
                (crypt_coll_open(team, recv_owner, -1,
                                 frames + (size_t)recv_node * frame_len, m,
                                 rbuf + (size_t)recv_owner * m) != CRYPT_COLL_OK)) {
                failed = 1; /* keep the schedule; the agreement reports it */
            }
        }
    }

    /* step 2: a plaintext ring inside the node; local rank q contributes
     * the blocks of every group it served, from every node. Small blocks
     * go packed, one message a step; large ones one by one, straight from
     * rbuf to rbuf (packing 8 MiB and unpacking it again cost more than
     * the extra messages) */
    nodes_in  = l.count[my_node];
    out_owner = malloc(sizeof(int) * (size_t)N * (size_t)l.max_local + 1);
    in_owner  = malloc(sizeof(int) * (size_t)N * (size_t)l.max_local + 1);
    if ((out_owner == NULL) || (in_owner == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (s = 0; (status == CRYPT_COLL_OK) && (s < nodes_in - 1); ++s) {
        int next = l.ranks[my_node][(my_local + 1) % nodes_in];
        int prev = l.ranks[my_node][(my_local - 1 + nodes_in) % nodes_in];
        int nout = crypt_coll_group_blocks(&l, (my_local - s + nodes_in) % nodes_in,
                                           nodes_in, out_owner);
        int nin  = crypt_coll_group_blocks(&l, (my_local - s - 1 + nodes_in) % nodes_in,
                                           nodes_in, in_owner);
        int i;

        if (m >= CRYPT_COLL_RING_PACK_MAX) {
            for (i = 0; (status == CRYPT_COLL_OK) && (i < nout || i < nin); ++i) {
                status = crypt_coll_move(team, (i < nout) ? next : -1,
                                         (i < nout) ? rbuf + (size_t)out_owner[i] * m : NULL,
                                         (i < nout) ? m : 0, 0, (i < nin) ? prev : -1,
                                         (i < nin) ? rbuf + (size_t)in_owner[i] * m : NULL,
                                         (i < nin) ? m : 0);
            }
            continue;
        }
        for (i = 0; i < nout; ++i) {
            memcpy(pack_out + (size_t)i * m, rbuf + (size_t)out_owner[i] * m, m);
        }
        status = crypt_coll_move(team, next, pack_out, (size_t)nout * m, 0, prev,
                                 pack_in, (size_t)nin * m);
        for (i = 0; (status == CRYPT_COLL_OK) && (i < nin); ++i) {
            memcpy(rbuf + (size_t)in_owner[i] * m, pack_in + (size_t)i * m, m);
        }
    }

    free(in_owner);
    free(out_owner);
    crypt_coll_layout_free(&l);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}

/* ---- HS1 / HS2: hierarchical, through node-shared memory ------------------------ */

size_t crypt_coll_node_shm_size(int size, size_t max_m)
{
    /* plaintext of every block, a frame per rank (HS2; HS1 needs less),
     * a status byte per rank */
    return (size_t)size * max_m +
           (size_t)size * (max_m + CRYPT_COLL_FRAME_OVERHEAD) + (size_t)size + 64;
}

void crypt_coll_team_set_node_shm(crypt_coll_team_t *team, void *base,
                                  size_t bytes)
{
    team->node_shm      = base;
    team->node_shm_size = bytes;
}

/* all ranks of our node have arrived: a token round the node twice */
static crypt_coll_status_t crypt_coll_node_barrier(crypt_coll_team_t *team,
                                                   const crypt_coll_layout_t *l,
                                                   int my_node, int my_local)
{
    const int count = l->count[my_node];
    const int next = l->ranks[my_node][(my_local + 1) % count];
    const int prev = l->ranks[my_node][(my_local - 1 + count) % count];
    crypt_coll_status_t status = CRYPT_COLL_OK;
    uint8_t token = 0;
    int pass;

    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (pass = 0; (count > 1) && (pass < 2) && (status == CRYPT_COLL_OK); ++pass) {
        if (my_local == 0) {
            status = crypt_coll_move(team, next, &token, 1, 0, -1, NULL, 0);
            if (status == CRYPT_COLL_OK) {
                status = crypt_coll_move(team, -1, NULL, 0, 0, prev, &token, 1);
            }
        } else {
            status = crypt_coll_move(team, -1, NULL, 0, 0, prev, &token, 1);
            if (status == CRYPT_COLL_OK) {
                status = crypt_coll_move(team, next, &token, 1, 0, -1, NULL, 0);
            }
        }
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return status;
}

/* Bruck among the node leaders over opaque sealed slots (one per node,
 * slot n at base + off[n], len[n] bytes): frames only, forwarded as they are */
static crypt_coll_status_t crypt_coll_bruck_frames(crypt_coll_team_t *team,
                                                   const int *leaders, int k,
                                                   int pos, uint8_t *base,
                                                   const size_t *off,
                                                   const size_t *len)
{
    crypt_coll_status_t status = CRYPT_COLL_OK;
    uint8_t *out = NULL, *in = NULL;
    size_t total = 0;
    int dist, j;

    for (j = 0; j < k; ++j) {
        total += len[j];
    }
    out = crypt_coll_workspace(team, CRYPT_COLL_WS_OUT, total + 1);
    in  = crypt_coll_workspace(team, CRYPT_COLL_WS_IN, total + 1);
    if ((out == NULL) || (in == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    for (dist = 1; (status == CRYPT_COLL_OK) && (dist < k); dist *= 2) {
        int cnt = (dist < k - dist) ? dist : k - dist;
        size_t out_len = 0, in_len = 0;
        for (j = 0; j < cnt; ++j) {
            int slot = (pos + j) % k;
            memcpy(out + out_len, base + off[slot], len[slot]);
            out_len += len[slot];
            in_len  += len[(pos + dist + j) % k];
        }
        status = crypt_coll_move(team, leaders[(pos - dist + k) % k], out, out_len,
                                 1, leaders[(pos + dist) % k], in, in_len);
        for (j = 0, in_len = 0; (status == CRYPT_COLL_OK) && (j < cnt); ++j) {
            int slot = (pos + dist + j) % k;
            memcpy(base + off[slot], in + in_len, len[slot]);
            in_len += len[slot];
        }
    }
    return status;
}

static crypt_coll_status_t crypt_allgather_hs(crypt_coll_team_t *team,
                                              uint8_t *rbuf, size_t m, int hs2)
{
    const int p = team->size, r = team->rank, my_node = team->node_of[r];
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *plain, *cipher, *flags, *scratch = NULL;
    size_t *off = NULL, *len = NULL;
    int *leaders = NULL;
    int n, q, my_local = 0, N, failed = 0, idx;

    if ((team->node_shm == NULL) ||
        (team->node_shm_size < crypt_coll_node_shm_size(p, m))) {
        return CRYPT_COLL_ERR_PARAM;
    }
    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N = l.num_nodes;
    for (q = 0; q < l.count[my_node]; ++q) {
        my_local = (l.ranks[my_node][q] == r) ? q : my_local;
    }
    plain   = team->node_shm;
    cipher  = plain + (size_t)p * m;
    flags   = cipher + (size_t)p * frame_len;
    off     = calloc((size_t)N, sizeof(*off));
    len     = calloc((size_t)N, sizeof(*len));
    leaders = calloc((size_t)N, sizeof(*leaders));
    scratch = crypt_coll_workspace(team, CRYPT_COLL_WS_OUTER_FRAMES,
                                   (size_t)p * m + 1);
    if (!off || !len || !leaders || !scratch) {
        status = CRYPT_COLL_ERR_PARAM;
        goto out;
    }
    /* node n's slot in the ciphertext area: HS1 one frame of its l_n
     * blocks, HS2 one frame per rank, contiguous per node */
    for (n = 0; n < N; ++n) {
        len[n]     = hs2 ? (size_t)l.count[n] * frame_len :
                           (size_t)l.count[n] * m + CRYPT_COLL_FRAME_OVERHEAD;
        off[n]     = (n > 0) ? off[n - 1] + len[n - 1] : 0;
        leaders[n] = l.ranks[n][0];
    }

    /* 1: our block into the node's plaintext area */
    memcpy(plain + (size_t)r * m, rbuf + (size_t)r * m, m);
    status = crypt_coll_node_barrier(team, &l, my_node, my_local);

    if ((status == CRYPT_COLL_OK) && (N > 1)) {
        /* 2: seal once (HS1: the leader, the node's data; HS2: every rank,
         * its own block) and exchange the node slots among the leaders */
        if (hs2) {
            status = crypt_coll_seal(team, r, plain + (size_t)r * m, m,
                                     cipher + off[my_node] + (size_t)my_local * frame_len);
        } else if (my_local == 0) {
            for (q = 0; q < l.count[my_node]; ++q) {
                memcpy(scratch + (size_t)q * m, plain + (size_t)l.ranks[my_node][q] * m, m);
            }
            status = crypt_coll_seal(team, (int)(0x20000000u | (unsigned)my_node),
                                     scratch, (size_t)l.count[my_node] * m,
                                     cipher + off[my_node]);
        }
        if ((status == CRYPT_COLL_OK) && hs2) {
            status = crypt_coll_node_barrier(team, &l, my_node, my_local);
        }
        if ((status == CRYPT_COLL_OK) && (my_local == 0)) {
            status = crypt_coll_bruck_frames(team, leaders, N, my_node, cipher, off, len);
        }
        if (status == CRYPT_COLL_OK) {
            status = crypt_coll_node_barrier(team, &l, my_node, my_local);
        }
        /* 3: the node's ranks open the foreign frames jointly, round robin */
        for (n = 0, idx = 0; (status == CRYPT_COLL_OK) && (n < N); ++n) {
            if (n == my_node) {
                continue;
            }
            if (!hs2) {
                if ((idx++ % l.count[my_node]) != my_local) {
                    continue;
                }
                if (crypt_coll_open(team, (int)(0x20000000u | (unsigned)n), -1,
                                    cipher + off[n], (size_t)l.count[n] * m,
                                    scratch) != CRYPT_COLL_OK) {
                    failed = 1;
                }
                for (q = 0; q < l.count[n]; ++q) {
                    memcpy(plain + (size_t)l.ranks[n][q] * m, scratch + (size_t)q * m, m);
                }
                continue;
            }
            for (q = 0; q < l.count[n]; ++q) {
                if ((idx++ % l.count[my_node]) == my_local &&
                    (crypt_coll_open(team, l.ranks[n][q], -1,
                                     cipher + off[n] + (size_t)q * frame_len, m,
                                     plain + (size_t)l.ranks[n][q] * m) !=
                     CRYPT_COLL_OK)) {
                    failed = 1;
                }
            }
        }
    }

    /* 4: every rank copies the node's result; statuses through the node */
    flags[r] = failed ? 2 : 1;
    if (status == CRYPT_COLL_OK) {
        status = crypt_coll_node_barrier(team, &l, my_node, my_local);
    }
    for (q = 0; (status == CRYPT_COLL_OK) && (q < l.count[my_node]); ++q) {
        failed |= (flags[l.ranks[my_node][q]] != 1);
    }
    if (status == CRYPT_COLL_OK) {
        memcpy(rbuf, plain, (size_t)p * m);
        /* nobody may start the next collective over this area before all
         * have copied */
        status = crypt_coll_node_barrier(team, &l, my_node, my_local);
    }

out:
    free(leaders);
    free(len);
    free(off);
    crypt_coll_layout_free(&l);
    return ((status == CRYPT_COLL_OK) && failed) ? CRYPT_COLL_ERR_AUTH : status;
}

/* Every rank learns whether any rank failed: an all-gather of one status
 * byte per rank, sealed across nodes like data: O-RD2 (Bruck, merged
 * frames), ceil(log2 p) rounds, so that the step costs every collective
 * a logarithmic number of latencies, not p - 1 as a ring would. Without it a rank
 * that opened its blocks cleanly could return data that a node peer had
 * forwarded after a failed open (zeros), as success. An attacker who
 * tampers with this step itself makes the ranks downstream fail while the
 * others return their data, which they authenticated in full: no finite
 * exchange can make every rank agree against an active network (the two
 * generals), so the MPI adapters abort the job on any failure. */
static crypt_coll_status_t crypt_coll_agree(crypt_coll_team_t *team,
                                            crypt_coll_status_t mine)
{
    uint8_t *flags = calloc((size_t)team->size, 1);
    crypt_coll_status_t status;
    int r, failed = (mine != CRYPT_COLL_OK);

    if (flags == NULL) {
        return CRYPT_COLL_ERR_PARAM;
    }
    crypt_coll_counters_t algorithm = team->counters;

    /* 1 means OK; anything else, including the zero a failed open leaves,
     * is a failure, so tampering with this step cannot pass for success */
    flags[team->rank] = (mine == CRYPT_COLL_OK) ? 1 : 2;
    ++team->collective; /* its own AAD domain */
    status = crypt_allgather_o_rd(team, flags, 1, CRYPT_COLL_FRAMES_MERGED);
    /* the counters describe the algorithm (Table II), not this step; a
     * plaintext leak would still show */
    algorithm.inter_node_plaintext_bytes = team->counters.inter_node_plaintext_bytes;
    team->counters = algorithm;
    for (r = 0; r < team->size; ++r) {
        failed |= (flags[r] != 1);
    }
    free(flags);
    if (status != CRYPT_COLL_OK) {
        return status;
    }
    return failed ? ((mine != CRYPT_COLL_OK) ? mine : CRYPT_COLL_ERR_AUTH) :
                    CRYPT_COLL_OK;
}

/* The end of every collective: the agreement step, and on any failure
 * no data that anyone could take for a result. */
static crypt_coll_status_t crypt_coll_finish(crypt_coll_team_t *team,
                                             crypt_coll_status_t status,
                                             int failed, void *buf, size_t len)
{
    ++team->collective;
    if ((status == CRYPT_COLL_OK) && failed) {
        status = CRYPT_COLL_ERR_AUTH;
    }
    if (status != CRYPT_COLL_ERR_IO) {
        status = crypt_coll_agree(team, status);
    }
    if (status != CRYPT_COLL_OK) {
        memset(buf, 0, len);
    }
    return status;
}

static crypt_coll_status_t crypt_coll_allgather_run(crypt_coll_team_t *team,
                                         crypt_allgather_alg_t alg,
                                         const void *sbuf, void *rbuf, size_t m)
{
    crypt_coll_status_t status;

    if (sbuf != NULL) {
        memmove((uint8_t*)rbuf + (size_t)team->rank * m, sbuf, m);
    }
    switch (alg) {
    case CRYPT_ALLGATHER_NAIVE:
        status = crypt_allgather_naive(team, rbuf, m);
        break;
    case CRYPT_ALLGATHER_O_RING:
        status = crypt_allgather_o_ring(team, rbuf, m);
        break;
    case CRYPT_ALLGATHER_O_RD:
        status = crypt_allgather_o_rd(team, rbuf, m, CRYPT_COLL_FRAMES_PER_BLOCK);
        break;
    case CRYPT_ALLGATHER_O_RD2:
        status = crypt_allgather_o_rd(team, rbuf, m, CRYPT_COLL_FRAMES_MERGED);
        break;
    case CRYPT_ALLGATHER_C_RING:
        status = crypt_allgather_concurrent(team, rbuf, m, 0);
        break;
    case CRYPT_ALLGATHER_C_RD:
        status = crypt_allgather_concurrent(team, rbuf, m, 1);
        break;
    case CRYPT_ALLGATHER_HS1:
    case CRYPT_ALLGATHER_HS2:
        if ((team->node_shm == NULL) ||
            (team->node_shm_size < crypt_coll_node_shm_size(team->size, m))) {
            return CRYPT_COLL_ERR_PARAM; /* not available: nothing was sent */
        }
        status = crypt_allgather_hs(team, rbuf, m, alg == CRYPT_ALLGATHER_HS2);
        break;
    default:
        return CRYPT_COLL_ERR_PARAM;
    }
    return crypt_coll_finish(team, status, 0, rbuf, (size_t)team->size * m);
}

/* ---- broadcast and allreduce: once per node --------------------------------- */

/* The node's first rank sends `buf` to the others (or receives it from the
 * first rank): plaintext, inside the node only. */
static crypt_coll_status_t crypt_coll_node_spread(crypt_coll_team_t *team,
                                                  const crypt_coll_layout_t *l,
                                                  int head, void *buf, size_t m)
{
    const int node = team->node_of[team->rank];
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int q;

    if (team->rank != head) {
        return crypt_coll_move(team, -1, NULL, 0, 0, head, buf, m);
    }
    for (q = 0; (status == CRYPT_COLL_OK) && (q < l->count[node]); ++q) {
        if (l->ranks[node][q] != head) {
            status = crypt_coll_move(team, l->ranks[node][q], buf, m, 0, -1, NULL, 0);
        }
    }
    return status;
}

static crypt_coll_status_t crypt_coll_bcast_run(crypt_coll_team_t *team, void *buf,
                                     size_t m, int root)
{
    const int r = team->rank, my_node = team->node_of[r];
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *frame = NULL;
    int N, root_node, rel, head, mask, failed = 0;

    if ((root < 0) || (root >= team->size) || (crypt_coll_layout(team, &l) != 0)) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N         = l.num_nodes;
    root_node = team->node_of[root];
    rel       = (my_node - root_node + N) % N;
    /* one rank per node talks to other nodes: the root on its node */
    head      = (my_node == root_node) ? root : l.ranks[my_node][0];
    frame     = malloc(frame_len);
    if (frame == NULL) {
        status = CRYPT_COLL_ERR_PARAM;
    }
    if ((status == CRYPT_COLL_OK) && (r == head) && (N > 1)) {
        if (r == root) {
            status = crypt_coll_seal(team, (int)(0x10000000u | (unsigned)root),
                                     buf, m, frame);
        }
        /* binomial tree over the nodes, rooted at the root's node */
        for (mask = 1; (status == CRYPT_COLL_OK) && (mask < N); mask <<= 1) {
            int peer_rel;
            if (rel < mask) {
                peer_rel = rel + mask;
                if (peer_rel < N) {
                    int n = (peer_rel + root_node) % N;
                    status = crypt_coll_move(team, l.ranks[n][0], frame, frame_len, 1,
                                             -1, NULL, 0);
                }
            } else if (rel < 2 * mask) {
                int n = (rel - mask + root_node) % N;
                int from = (n == root_node) ? root : l.ranks[n][0];
                status = crypt_coll_move(team, -1, NULL, 0, 1, from, frame, frame_len);
                if ((status == CRYPT_COLL_OK) &&
                    (crypt_coll_open(team, (int)(0x10000000u | (unsigned)root), -1, frame,
                                     m, buf) != CRYPT_COLL_OK)) {
                    failed = 1; /* the frame still goes on: peers must not wait */
                }
            }
        }
    }
    if (status == CRYPT_COLL_OK) {
        status = crypt_coll_node_spread(team, &l, head, buf, m);
    }
    free(frame);
    crypt_coll_layout_free(&l);
    return crypt_coll_finish(team, status, failed, buf, m);
}

static crypt_coll_status_t crypt_coll_allreduce_run(crypt_coll_team_t *team,
                                         const void *sbuf, void *rbuf,
                                         size_t count, size_t elem_size,
                                         crypt_coll_reduce_t op, void *op_arg)
{
    const int r = team->rank, my_node = team->node_of[r];
    const size_t m = count * elem_size;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    uint8_t *parts = NULL, *tmp = NULL;
    int *leaders = NULL, *nodes = NULL;
    int N, n, q, head, failed = 0;

    if (sbuf != NULL) {
        memmove(rbuf, sbuf, m);
    }
    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N       = l.num_nodes;
    head    = l.ranks[my_node][0];
    parts   = malloc(m * (size_t)N + 1);
    tmp     = malloc(m + 1);
    leaders = malloc(sizeof(int) * (size_t)N);
    nodes   = malloc(sizeof(int) * (size_t)N);
    if (!parts || !tmp || !leaders || !nodes) {
        status = CRYPT_COLL_ERR_PARAM;
    }

    /* 1: the node's partial result at its first rank, in local order */
    if ((status == CRYPT_COLL_OK) && (r != head)) {
        status = crypt_coll_move(team, head, rbuf, m, 0, -1, NULL, 0);
    }
    for (q = 1; (status == CRYPT_COLL_OK) && (r == head) && (q < l.count[my_node]); ++q) {
        status = crypt_coll_move(team, -1, NULL, 0, 0, l.ranks[my_node][q], tmp, m);
        if (status == CRYPT_COLL_OK) {
            op(rbuf, tmp, count, op_arg);
        }
    }

    /* 2: the first ranks all-gather the node partials, sealed once each,
     * opened once per other node, and reduce them in node order */
    if ((status == CRYPT_COLL_OK) && (r == head) && (N > 1)) {
        for (n = 0; n < N; ++n) {
            leaders[n] = l.ranks[n][0];
            nodes[n]   = n;
        }
        memcpy(parts + (size_t)my_node * m, rbuf, m);
        status = crypt_coll_bruck(team, leaders, nodes, N, my_node,
                                  CRYPT_COLL_FRAMES_PER_BLOCK, parts, m, &failed);
        if (status == CRYPT_COLL_OK) {
            memcpy(rbuf, parts, m);
            for (n = 1; n < N; ++n) {
                op(rbuf, parts + (size_t)n * m, count, op_arg);
            }
        }
    }

    /* 3: the result inside the node */
    if (status == CRYPT_COLL_OK) {
        status = crypt_coll_node_spread(team, &l, head, rbuf, m);
    }
    free(nodes);
    free(leaders);
    free(tmp);
    free(parts);
    crypt_coll_layout_free(&l);
    return crypt_coll_finish(team, status, failed, rbuf, m);
}

static crypt_coll_status_t crypt_coll_alltoall_run(crypt_coll_team_t *team,
                                        const void *sbuf, void *rbuf, size_t m)
{
    const int p = team->size, r = team->rank;
    const size_t frame_len = m + CRYPT_COLL_FRAME_OVERHEAD;
    uint8_t *out = malloc(frame_len), *in = malloc(frame_len);
    const uint8_t *src_buf = sbuf;
    uint8_t *dst_buf = rbuf;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    int s, failed = 0;

    if ((out == NULL) || (in == NULL) || (sbuf == rbuf)) {
        status = CRYPT_COLL_ERR_PARAM;
    } else {
        memcpy(dst_buf + (size_t)r * m, src_buf + (size_t)r * m, m);
    }
    for (s = 1; (status == CRYPT_COLL_OK) && (s < p); ++s) {
        int to = (r + s) % p, from = (r - s + p) % p;
        int seal_out = !crypt_coll_same_node(team, to);
        int sealed_in = !crypt_coll_same_node(team, from);

        if (seal_out) {
            /* owner = the destination: a frame cannot be delivered to
             * another rank than the one it was sealed for */
            status = crypt_coll_seal(team, to, src_buf + (size_t)to * m, m, out);
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, to,
                                 seal_out ? out : src_buf + (size_t)to * m,
                                 seal_out ? frame_len : m, seal_out, from,
                                 sealed_in ? in : dst_buf + (size_t)from * m,
                                 sealed_in ? frame_len : m);
        /* sealed for us, and by no other rank than the expected sender; a
         * failed open leaves zeros */
        if ((status == CRYPT_COLL_OK) && sealed_in &&
            (crypt_coll_open(team, r, from, in, m, dst_buf + (size_t)from * m) !=
             CRYPT_COLL_OK)) {
            failed = 1;
        }
    }
    free(in);
    free(out);
    return crypt_coll_finish(team, status, failed, rbuf, (size_t)p * m);
}

/* ---- allgatherv and alltoallv ------------------------------------------------ */

/* The blocks of `ranks` (n of them) packed in that order, or unpacked */
static void crypt_coll_pack_v(uint8_t *packed, const uint8_t *buf, const int *ranks,
                              int n, const size_t *counts, const size_t *displs,
                              int unpack)
{
    size_t off = 0;
    int i;

    for (i = 0; i < n; ++i) {
        if (unpack) {
            memcpy((uint8_t*)buf + displs[ranks[i]], packed + off, counts[ranks[i]]);
        } else {
            memcpy(packed + off, buf + displs[ranks[i]], counts[ranks[i]]);
        }
        off += counts[ranks[i]];
    }
}

/* Leader-based (HS1's shape with messages instead of a shared segment):
 * each node's first rank gathers the node's blocks in plaintext, seals
 * them as one frame, the leaders pass the frames round a ring, each
 * leader opens every other node's frame once, and spreads the result in
 * its node. Per node: s_e = its own bytes, s_d = everyone else's (the
 * bound), r_d = N - 1 at the leader. */
static crypt_coll_status_t crypt_coll_allgatherv_run(crypt_coll_team_t *team,
                                                     const void *sbuf, void *rbuf,
                                                     const size_t *counts,
                                                     const size_t *displs)
{
    const int p = team->size, r = team->rank, my_node = team->node_of[r];
    crypt_coll_status_t status = CRYPT_COLL_OK;
    crypt_coll_layout_t l = {0};
    size_t *node_bytes = NULL, *frame_off = NULL, total = 0, all_frames = 0;
    uint8_t *frames = NULL, *plain = NULL, *out = rbuf;
    int N, n, q, s, head, failed = 0;

    if (sbuf != NULL) {
        memmove(out + displs[r], sbuf, counts[r]);
    }
    if (crypt_coll_layout(team, &l) != 0) {
        crypt_coll_layout_free(&l);
        return CRYPT_COLL_ERR_PARAM;
    }
    N          = l.num_nodes;
    head       = l.ranks[my_node][0];
    node_bytes = calloc((size_t)N, sizeof(size_t));
    frame_off  = calloc((size_t)N + 1, sizeof(size_t));
    if ((node_bytes == NULL) || (frame_off == NULL)) {
        status = CRYPT_COLL_ERR_PARAM;
        goto out;
    }
    for (q = 0; q < p; ++q) {
        node_bytes[team->node_of[q]] += counts[q];
        total                        += counts[q];
    }
    for (n = 0; n < N; ++n) {
        frame_off[n + 1] = frame_off[n] + node_bytes[n] + CRYPT_COLL_FRAME_OVERHEAD;
    }
    all_frames = frame_off[N];
    plain      = malloc(total + 1);
    frames     = (r == head) ? malloc(all_frames) : NULL;
    if ((plain == NULL) || ((r == head) && (frames == NULL))) {
        status = CRYPT_COLL_ERR_PARAM;
        goto out;
    }

    /* 1. the node's blocks to its leader, in plaintext */
    if (r != head) {
        status = crypt_coll_move(team, head, out + displs[r], counts[r], 0, -1, NULL, 0);
    }
    for (q = 1; (r == head) && (status == CRYPT_COLL_OK) && (q < l.count[my_node]); ++q) {
        int from = l.ranks[my_node][q];
        status = crypt_coll_move(team, -1, NULL, 0, 0, from, out + displs[from],
                                 counts[from]);
    }

    /* 2. leaders: seal the node once, ring the frames, open each once */
    if ((r == head) && (N > 1) && (status == CRYPT_COLL_OK)) {
        int next = l.ranks[(my_node + 1) % N][0], prev = l.ranks[(my_node - 1 + N) % N][0];

        crypt_coll_pack_v(plain, out, l.ranks[my_node], l.count[my_node], counts,
                          displs, 0);
        status = crypt_coll_seal(team, head, plain, node_bytes[my_node],
                                 frames + frame_off[my_node]);
        for (s = 0; (status == CRYPT_COLL_OK) && (s < N - 1); ++s) {
            int send_node = (my_node - s + N) % N, recv_node = (my_node - s - 1 + N) % N;
            status = crypt_coll_move(team, next, frames + frame_off[send_node],
                                     node_bytes[send_node] + CRYPT_COLL_FRAME_OVERHEAD,
                                     1, prev, frames + frame_off[recv_node],
                                     node_bytes[recv_node] + CRYPT_COLL_FRAME_OVERHEAD);
        }
        for (n = 0; (status == CRYPT_COLL_OK) && (n < N); ++n) {
            if (n == my_node) {
                continue;
            }
            /* sealed by that node's leader, for this collective, this long */
            if (crypt_coll_open(team, l.ranks[n][0], l.ranks[n][0],
                                frames + frame_off[n], node_bytes[n], plain) !=
                CRYPT_COLL_OK) {
                failed = 1; /* zeros: the blocks are zeroed at the end */
            }
            crypt_coll_pack_v(plain, out, l.ranks[n], l.count[n], counts, displs, 1);
        }
    }

    /* 3. everyone's blocks to the node, in plaintext */
    if (status == CRYPT_COLL_OK) {
        int all[CRYPT_COLL_MAX_RANKS];
        for (q = 0; q < p; ++q) {
            all[q] = q;
        }
        if (r == head) {
            crypt_coll_pack_v(plain, out, all, p, counts, displs, 0);
        }
        status = crypt_coll_node_spread(team, &l, head, plain, total);
        if ((status == CRYPT_COLL_OK) && (r != head)) {
            crypt_coll_pack_v(plain, out, all, p, counts, displs, 1);
        }
    }

out:
    free(frames);
    free(plain);
    free(frame_off);
    free(node_bytes);
    crypt_coll_layout_free(&l);
    status = crypt_coll_finish(team, status, failed, rbuf, 0);
    if (status != CRYPT_COLL_OK) {
        /* the blocks only: what lies between them is not ours to touch */
        for (q = 0; q < p; ++q) {
            memset(out + displs[q], 0, counts[q]);
        }
    }
    return status;
}

/* alltoall with a length per pair: the same pairwise exchange */
static crypt_coll_status_t crypt_coll_alltoallv_run(crypt_coll_team_t *team,
                                                    const void *sbuf,
                                                    const size_t *scounts,
                                                    const size_t *sdispls,
                                                    void *rbuf,
                                                    const size_t *rcounts,
                                                    const size_t *rdispls)
{
    const int p = team->size, r = team->rank;
    const uint8_t *src_buf = sbuf;
    uint8_t *dst_buf = rbuf, *out = NULL, *in = NULL;
    crypt_coll_status_t status = CRYPT_COLL_OK;
    size_t max_s = 0, max_r = 0;
    int s, q, failed = 0;

    for (q = 0; q < p; ++q) {
        max_s = (scounts[q] > max_s) ? scounts[q] : max_s;
        max_r = (rcounts[q] > max_r) ? rcounts[q] : max_r;
    }
    out = malloc(max_s + CRYPT_COLL_FRAME_OVERHEAD);
    in  = malloc(max_r + CRYPT_COLL_FRAME_OVERHEAD);
    if ((out == NULL) || (in == NULL) || (sbuf == rbuf) || (scounts[r] != rcounts[r])) {
        status = CRYPT_COLL_ERR_PARAM;
    } else {
        memcpy(dst_buf + rdispls[r], src_buf + sdispls[r], scounts[r]);
    }
    for (s = 1; (status == CRYPT_COLL_OK) && (s < p); ++s) {
        int to = (r + s) % p, from = (r - s + p) % p;
        int seal_out = !crypt_coll_same_node(team, to);
        int sealed_in = !crypt_coll_same_node(team, from);

        if (seal_out) {
            /* owner = the destination, length = this block's (AAD) */
            status = crypt_coll_seal(team, to, src_buf + sdispls[to], scounts[to], out);
        }
        if (status != CRYPT_COLL_OK) {
            break;
        }
        status = crypt_coll_move(team, to,
                                 seal_out ? out : src_buf + sdispls[to],
                                 scounts[to] + (seal_out ? CRYPT_COLL_FRAME_OVERHEAD : 0),
                                 seal_out, from,
                                 sealed_in ? in : dst_buf + rdispls[from],
                                 rcounts[from] + (sealed_in ? CRYPT_COLL_FRAME_OVERHEAD : 0));
        if ((status == CRYPT_COLL_OK) && sealed_in &&
            (crypt_coll_open(team, r, from, in, rcounts[from],
                             dst_buf + rdispls[from]) != CRYPT_COLL_OK)) {
            failed = 1;
        }
    }
    free(in);
    free(out);
    status = crypt_coll_finish(team, status, failed, rbuf, 0);
    if (status != CRYPT_COLL_OK) {
        for (q = 0; q < p; ++q) {
            memset(dst_buf + rdispls[q], 0, rcounts[q]);
        }
    }
    return status;
}

/* ---- entry points: not while a task of the team is in flight --------------- */

crypt_coll_status_t crypt_coll_allgather(crypt_coll_team_t *team,
                                         crypt_allgather_alg_t alg,
                                         const void *sbuf, void *rbuf, size_t m)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_allgather_run(team, alg, sbuf, rbuf, m);
}

crypt_coll_status_t crypt_coll_bcast(crypt_coll_team_t *team, void *buf,
                                     size_t m, int root)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_bcast_run(team, buf, m, root);
}

crypt_coll_status_t crypt_coll_allreduce(crypt_coll_team_t *team,
                                         const void *sbuf, void *rbuf,
                                         size_t count, size_t elem_size,
                                         crypt_coll_reduce_t op, void *op_arg)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_allreduce_run(team, sbuf, rbuf, count, elem_size, op, op_arg);
}

crypt_coll_status_t crypt_coll_alltoall(crypt_coll_team_t *team,
                                        const void *sbuf, void *rbuf, size_t m)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_alltoall_run(team, sbuf, rbuf, m);
}

crypt_coll_status_t crypt_coll_allgatherv(crypt_coll_team_t *team,
                                          const void *sbuf, void *rbuf,
                                          const size_t *counts,
                                          const size_t *displs)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_allgatherv_run(team, sbuf, rbuf, counts, displs);
}

crypt_coll_status_t crypt_coll_alltoallv(crypt_coll_team_t *team,
                                         const void *sbuf, const size_t *scounts,
                                         const size_t *sdispls, void *rbuf,
                                         const size_t *rcounts,
                                         const size_t *rdispls)
{
    return crypt_coll_task_busy(team) ? CRYPT_COLL_ERR_PARAM :
           crypt_coll_alltoallv_run(team, sbuf, scounts, sdispls, rbuf, rcounts,
                                    rdispls);
}
