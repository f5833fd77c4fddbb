/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a listener grants strangers (wire/wire_admit.h).
 */
#include "uct_crypt/wire/wire_admit.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* slots per generation: at most half full */
#define UCT_CRYPT_SEEN_SLOTS (2 * UCT_CRYPT_SEEN_KEEP)

static size_t uct_crypt_seen_slot(const uint8_t *key)
{
    uint64_t h;

    /* the key is the start of a random public key that passed a MAC under
     * the job secret: nobody without it chooses where it lands */
    memcpy(&h, key, sizeof(h));
    return (size_t)(h & (UCT_CRYPT_SEEN_SLOTS - 1));
}

static int uct_crypt_seen_empty(const uint8_t *slot)
{
    static const uint8_t zero[UCT_CRYPT_SEEN_KEY_LEN];

    return !memcmp(slot, zero, UCT_CRYPT_SEEN_KEY_LEN);
}

/* Where `key` is in `table`, or the empty slot where it would go */
static uint8_t *uct_crypt_seen_find(uint8_t (*table)[UCT_CRYPT_SEEN_KEY_LEN],
                                    const uint8_t *key)
{
    size_t i = uct_crypt_seen_slot(key);

    while (!uct_crypt_seen_empty(table[i]) &&
           memcmp(table[i], key, UCT_CRYPT_SEEN_KEY_LEN)) {
        i = (i + 1) & (UCT_CRYPT_SEEN_SLOTS - 1);
    }
    return table[i];
}

uct_crypt_seen_verdict_t uct_crypt_seen_check(uct_crypt_seen_t *seen,
                                              const uint8_t *ephemeral)
{
    uint8_t (*swap)[UCT_CRYPT_SEEN_KEY_LEN];
    uint8_t *slot;

    if (uct_crypt_seen_empty(ephemeral)) {
        return UCT_CRYPT_SEEN_AGAIN; /* no honest ephemeral starts so */
    }
    if (seen->current == NULL) {
        seen->current  = calloc(UCT_CRYPT_SEEN_SLOTS, UCT_CRYPT_SEEN_KEY_LEN);
        seen->previous = calloc(UCT_CRYPT_SEEN_SLOTS, UCT_CRYPT_SEEN_KEY_LEN);
        if ((seen->current == NULL) || (seen->previous == NULL)) {
            uct_crypt_seen_cleanup(seen);
            return UCT_CRYPT_SEEN_NO_MEMORY;
        }
    }
    if (!uct_crypt_seen_empty(uct_crypt_seen_find(seen->previous, ephemeral))) {
        return UCT_CRYPT_SEEN_AGAIN;
    }
    slot = uct_crypt_seen_find(seen->current, ephemeral);
    if (!uct_crypt_seen_empty(slot)) {
        return UCT_CRYPT_SEEN_AGAIN;
    }
    if (seen->count == UCT_CRYPT_SEEN_KEEP) {
        /* a new generation: the older one's keys are forgotten */
        swap           = seen->previous;
        seen->previous = seen->current;
        seen->current  = swap;
        memset(seen->current, 0, UCT_CRYPT_SEEN_SLOTS * UCT_CRYPT_SEEN_KEY_LEN);
        seen->count    = 0;
        slot           = uct_crypt_seen_find(seen->current, ephemeral);
    }
    memcpy(slot, ephemeral, UCT_CRYPT_SEEN_KEY_LEN);
    ++seen->count;
    return UCT_CRYPT_SEEN_NEW;
}

void uct_crypt_seen_cleanup(uct_crypt_seen_t *seen)
{
    free(seen->current);
    free(seen->previous);
    memset(seen, 0, sizeof(*seen));
}

/* Same host: the address family and IP, not the port */
static int uct_crypt_admit_same_source(const struct sockaddr_storage *a,
                                       const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) {
        return 0;
    }
    if (a->ss_family == AF_INET) {
        return ((const struct sockaddr_in*)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in*)b)->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        return !memcmp(&((const struct sockaddr_in6*)a)->sin6_addr,
                       &((const struct sockaddr_in6*)b)->sin6_addr,
                       sizeof(struct in6_addr));
    }
    return 1; /* no address to tell them apart: one source */
}

size_t uct_crypt_admit_victim(const struct sockaddr_storage *const *sources,
                              size_t count)
{
    size_t i, j, held, most = 0, victim = 0;

    /* (a few hundred at most: quadratic is cheaper than a table) */
    for (i = 0; i < count; ++i) {
        held = 0;
        for (j = 0; j < count; ++j) {
            held += uct_crypt_admit_same_source(sources[i], sources[j]);
        }
        /* the first, the oldest, of the source that holds the most */
        if (held > most) {
            most   = held;
            victim = i;
        }
    }
    return victim;
}
