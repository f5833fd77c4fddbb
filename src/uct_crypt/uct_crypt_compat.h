/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Differences between the UCX releases the transport compiles against,
 * named by what they are, keyed on the version of the headers being
 * compiled (uct/api/version.h). Code elsewhere tests these names, never a
 * version. ../shared/research/ucx-versions.md has the evidence per release.
 */
#ifndef UCT_CRYPT_COMPAT_H
#define UCT_CRYPT_COMPAT_H

#include <uct/api/version.h>
#include <ucs/arch/cpu.h>
#include <ucs/datastruct/mpool.h>
#include <limits.h>

#define UCT_CRYPT_UCX_AT_LEAST(_major, _minor) \
    ((UCT_VERNO_MAJOR > (_major)) || \
     ((UCT_VERNO_MAJOR == (_major)) && (UCT_VERNO_MINOR >= (_minor))))

/* 1.14: ucs_mpool_init takes a ucs_mpool_params_t */
#define UCT_CRYPT_HAVE_MPOOL_PARAMS UCT_CRYPT_UCX_AT_LEAST(1, 14)

/* A pool of `elem_size`-byte descriptors from malloc'd chunks, unbounded */
static inline ucs_status_t
uct_crypt_mpool_init(ucs_mpool_t *mp, size_t elem_size, unsigned per_chunk,
                     const char *name)
{
    static ucs_mpool_ops_t ops = {
        .chunk_alloc   = ucs_mpool_chunk_malloc,
        .chunk_release = ucs_mpool_chunk_free,
        .obj_init      = NULL,
        .obj_cleanup   = NULL
    };
#if UCT_CRYPT_HAVE_MPOOL_PARAMS
    ucs_mpool_params_t params;

    ucs_mpool_params_reset(&params);
    params.elem_size       = elem_size;
    params.elems_per_chunk = per_chunk;
    params.ops             = &ops;
    params.name            = name;
    return ucs_mpool_init(&params, mp);
#else
    return ucs_mpool_init(mp, 0, elem_size, 0, UCS_SYS_CACHE_LINE_SIZE,
                          per_chunk, UINT_MAX, &ops, name);
#endif
}

#endif
