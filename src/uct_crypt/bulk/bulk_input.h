/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the bulk engine reads from outside the process, checked before
 * anything acts on it, without UCX (so the fuzz targets run this very
 * code: test/fuzz/fuzz_bulk_control.c, fuzz_profile.c):
 *   - its control records (base/format.h), from the network: a record
 *     is authenticated and in sequence before it gets here, so this stands
 *     between an authenticated peer and our memory;
 *   - the calibration profile (UCX_CRYPT_PROFILE), from a file.
 */
#ifndef UCT_CRYPT_BULK_INPUT_H
#define UCT_CRYPT_BULK_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most one put or get may move (UCT's put/get max_zcopy); above it a
 * control record is refused */
#define UCT_CRYPT_BULK_MAX_PUT             (1ul << 30)
#define UCT_CRYPT_BULK_PROFILE_MAX_THREADS 1024  /* what a profile may ask */
#define UCT_CRYPT_BULK_MIN_SEGMENT         4096

/* The kind of a control record's payload (CRYPT_CONTROL_*) when it
 * has exactly that kind's length, zero reserved bytes and every length
 * and range within bounds; 0 otherwise. The checks that need the flow's
 * state (order, keys, registered memory) are the caller's. */
int uct_crypt_bulk_control_kind(const uint8_t *payload, size_t length);

/* Is [address, address + length) inside [base, base + base_length)? A
 * range that wraps around the address space is in nothing. */
int uct_crypt_range_within(uint64_t address, uint64_t length, uint64_t base,
                           uint64_t base_length);

/* A calibration profile ("key number" lines, '#' comments; test/perf/
 * crypt_calibrate writes one): `segment` and `threads` are set from it
 * where it has them in range; a value out of range, or a line that is not
 * understood, is ignored and reported through `warn` (printf-like). */
typedef void (*uct_crypt_bulk_warn_t)(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
void uct_crypt_bulk_profile_parse(FILE *file, const char *name, size_t *segment,
                                  unsigned long *threads, uct_crypt_bulk_warn_t warn);

#endif
