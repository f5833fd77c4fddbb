/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the integration tests' UCP programs (ucp_check, cs_check) share:
 * the marker payload the wire tests look for in captures, and waiting on
 * a request. Each program defines its own `worker` before including this.
 */
#ifndef UCX_CRYPT_UCP_TEST_UTIL_H
#define UCX_CRYPT_UCP_TEST_UTIL_H

#include <ucp/api/ucp.h>
#include <stddef.h>
#include <stdint.h>

#define MARKER "UCXCRYPT-MARKER-"

/* the marker, over and over; the last byte is the round (each differs) */
static inline void fill(uint8_t *buf, size_t len, unsigned round)
{
    size_t i;

    for (i = 0; i < len; ++i) {
        buf[i] = (uint8_t)MARKER[i % (sizeof(MARKER) - 1)];
    }
    if (len > 0) {
        buf[len - 1] = (uint8_t)round;
    }
}

/* progress `worker` until `req` (of a *_nbx call) completes; its status */
static inline ucs_status_t wait_req_on(ucp_worker_h worker, void *req)
{
    ucs_status_t status;

    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    do {
        ucp_worker_progress(worker);
        status = ucp_request_check_status(req);
    } while (status == UCS_INPROGRESS);
    ucp_request_free(req);
    return status;
}

#define wait_req(_req) wait_req_on(worker, (_req))

#endif
