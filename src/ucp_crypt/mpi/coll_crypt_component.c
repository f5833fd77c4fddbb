/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The crypt coll component: its parameters, its progress callback, and the
 * component structure Open MPI loads (coll_crypt.h has what it does).
 */
#include "coll_crypt.h"

#include "opal/runtime/opal_progress.h"

int mca_coll_crypt_priority = 80;
static int mca_coll_crypt_progress_registered;

static int mca_coll_crypt_progress(void)
{
    return crypt_mpi_progress();
}

void mca_coll_crypt_progress_register(void)
{
    if (!mca_coll_crypt_progress_registered) {
        opal_progress_register(mca_coll_crypt_progress);
        mca_coll_crypt_progress_registered = 1;
    }
}

static int mca_coll_crypt_init_query(bool enable_progress_threads,
                                     bool enable_mpi_threads)
{
    (void)enable_progress_threads;
    /* the adapter keeps process-wide state without locks */
    return enable_mpi_threads ? OMPI_ERR_NOT_SUPPORTED : OMPI_SUCCESS;
}

static int mca_coll_crypt_register(void);

static int mca_coll_crypt_close(void)
{
    if (mca_coll_crypt_progress_registered) {
        opal_progress_unregister(mca_coll_crypt_progress);
        mca_coll_crypt_progress_registered = 0;
    }
    return OMPI_SUCCESS;
}

__attribute__((visibility("default")))
mca_coll_base_component_2_0_0_t mca_coll_crypt_component = {
    .collm_version = {
        MCA_COLL_BASE_VERSION_2_0_0,
        .mca_component_name = "crypt",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                              OMPI_RELEASE_VERSION),
        .mca_register_component_params = mca_coll_crypt_register,
        .mca_close_component = mca_coll_crypt_close
    },
    .collm_data = {
        MCA_BASE_METADATA_PARAM_NONE
    },
    .collm_init_query = mca_coll_crypt_init_query,
    .collm_comm_query = mca_coll_crypt_comm_query
};

static int mca_coll_crypt_register(void)
{
    (void)mca_base_component_var_register(
            &mca_coll_crypt_component.collm_version, "priority",
            "Priority of the crypt coll component (encrypted collectives of "
            "ucx-crypt; 0 turns it off)",
            MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6,
            MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_crypt_priority);
    return OMPI_SUCCESS;
}
