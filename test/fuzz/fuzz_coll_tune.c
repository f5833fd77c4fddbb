/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The settings strings of the collectives: the tune string
 * (UCX_CRYPT_COLL_TUNE, crypt_coll_tune_valid and the score table that
 * reads it) and the node map (UCX_CRYPT_COLL_NODES): whatever the bytes, an
 * answer, and a valid tune string selects a valid algorithm.
 */
#include "fuzz_common.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static crypt_coll_team_t team;
    static int ready;
    char *text = malloc(size + 1), error[160];
    int node_of[64];
    size_t m;

    if (!ready) {
        if (!fuzz_team(&team, 0, 8, 16)) {
            abort();
        }
        ready = 1;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    for (m = 0; m < (1u << 22); m = m * 4 + 1) {
        crypt_allgather_alg_t alg = crypt_coll_allgather_select(&team, m, text);
        if ((alg < 0) || (alg >= CRYPT_ALLGATHER_LAST)) {
            abort();
        }
    }
    (void)crypt_coll_tune_valid(text);
    if ((crypt_coll_node_map_parse(text, 8, node_of, error, sizeof(error)) == 0)) {
        for (m = 0; m < 8; ++m) {
            if ((node_of[m] < 0) || (node_of[m] >= 8)) {
                abort();
            }
        }
    }
    free(text);
    return 0;
}
