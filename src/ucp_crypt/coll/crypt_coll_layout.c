/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The node layout of a team: its ranks per node, in rank order, and the
 * plaintext spreading of a buffer inside one node.
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "ucp_crypt/coll/crypt_coll_priv.h"

#include <stdlib.h>
#include <string.h>

int crypt_coll_layout(const crypt_coll_team_t *team, crypt_coll_layout_t *l)
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

void crypt_coll_layout_free(crypt_coll_layout_t *l)
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
int crypt_coll_member(const crypt_coll_layout_t *l, int n, int g)
{
    return (l->count[n] > 0) ? l->ranks[n][g % l->count[n]] : -1;
}

/* the owner of group g's block on node n, or -1 */
int crypt_coll_owner(const crypt_coll_layout_t *l, int n, int g)
{
    return (g < l->count[n]) ? l->ranks[n][g] : -1;
}

/* The node's first rank sends `buf` to the others (or receives it from the
 * first rank): plaintext, inside the node only. */
crypt_coll_status_t crypt_coll_node_spread(crypt_coll_team_t *team,
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
