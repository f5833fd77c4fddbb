/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The crypt coll module of a communicator: which communicators it takes,
 * and the module below it that gets whatever the adapter declines.
 */
#include "coll_crypt.h"

#include <dlfcn.h>
#include <stdlib.h>

static void mca_coll_crypt_module_construct(mca_coll_crypt_module_t *module)
{
#define MCA_COLL_CRYPT_CLEAR(_name) module->prev_##_name##_module = NULL;
    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_CLEAR)
#undef MCA_COLL_CRYPT_CLEAR
}

static void mca_coll_crypt_module_destruct(mca_coll_crypt_module_t *module)
{
#define MCA_COLL_CRYPT_RELEASE(_name) \
    if (module->prev_##_name##_module != NULL) { \
        OBJ_RELEASE(module->prev_##_name##_module); \
    }
    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_RELEASE)
#undef MCA_COLL_CRYPT_RELEASE
}

OBJ_CLASS_INSTANCE(mca_coll_crypt_module_t, mca_coll_base_module_t,
                   mca_coll_crypt_module_construct, mca_coll_crypt_module_destruct);

/* Modules are enabled in rising priority, each on top of what is in
 * c_coll already (coll_base_comm_select.c): below ours is there now. */
static int mca_coll_crypt_module_enable(mca_coll_base_module_t *module,
                                        struct ompi_communicator_t *comm)
{
    mca_coll_crypt_module_t *m = (mca_coll_crypt_module_t*)module;

#define MCA_COLL_CRYPT_SAVE(_name) \
    m->prev_##_name          = comm->c_coll->coll_##_name; \
    m->prev_##_name##_module = comm->c_coll->coll_##_name##_module; \
    if ((m->prev_##_name == NULL) || (m->prev_##_name##_module == NULL)) { \
        return OMPI_ERR_NOT_FOUND; /* nothing to fall back to */ \
    } \
    OBJ_RETAIN(m->prev_##_name##_module);

    MCA_COLL_CRYPT_FOREACH(MCA_COLL_CRYPT_SAVE)
#undef MCA_COLL_CRYPT_SAVE
    return OMPI_SUCCESS;
}

mca_coll_base_module_t *
mca_coll_crypt_comm_query(struct ompi_communicator_t *comm, int *priority)
{
    mca_coll_crypt_module_t *m;

    if (OMPI_COMM_IS_INTER(comm) || (ompi_comm_size(comm) < 2) ||
        !crypt_mpi_has_job_secret() ||
        (mca_coll_crypt_priority <= 0) ||
        (dlsym(RTLD_DEFAULT, "ucx_crypt_pmpi_adapter") != NULL)) {
        return NULL;
    }
    m = OBJ_NEW(mca_coll_crypt_module_t);
    if (m == NULL) {
        return NULL;
    }
    *priority                    = mca_coll_crypt_priority;
    m->super.coll_module_enable  = mca_coll_crypt_module_enable;
    mca_coll_crypt_module_set_ops(m);
    return &m->super;
}
