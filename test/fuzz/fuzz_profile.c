/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The calibration profile (UCX_CRYPT_PROFILE; test/perf/crypt_calibrate
 * writes one) as the bulk engine reads it
 * (src/uct_crypt/bulk/bulk_input.c), from the input as a file. What
 * it takes must be in range whatever the file says (a value past its type
 * is undefined to convert): segment 4 KiB..1 GiB, threads 0..1024;
 * everything else leaves the defaults and is warned about or ignored.
 */
#include "ucx_crypt_config.h"
#include "uct_crypt/bulk/bulk_input.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_warn(const char *fmt, ...)
{
    char message[256];
    va_list ap;

    /* formatted as the real warning is (ucs_warn), into a bounded buffer */
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const size_t default_segment = 12345;
    const unsigned long default_threads = 777777;
    unsigned long threads = default_threads;
    size_t segment = default_segment;
    FILE *file;

    if (size == 0) {
        return 0; /* fmemopen refuses an empty buffer */
    }
    file = fmemopen((void*)data, size, "r");
    if (file == NULL) {
        abort();
    }
    uct_crypt_bulk_profile_parse(file, "fuzz.profile", &segment, &threads,
                                 fuzz_warn);
    fclose(file);
    if (((segment != default_segment) &&
         ((segment < UCT_CRYPT_BULK_MIN_SEGMENT) ||
          (segment > UCT_CRYPT_BULK_MAX_PUT))) ||
        ((threads != default_threads) &&
         (threads > UCT_CRYPT_BULK_PROFILE_MAX_THREADS))) {
        abort();
    }
    return 0;
}
