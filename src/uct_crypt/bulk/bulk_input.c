/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine's parsers of control records and profiles
 * (bulk/bulk_input.h).
 */
#include "uct_crypt/bulk/bulk_input.h"
#include "uct_crypt/base/format.h"

#include <endian.h>
#include <string.h>

static int uct_crypt_bulk_zero(const uint8_t *bytes, size_t length)
{
    uint8_t any = 0;
    size_t i;

    for (i = 0; i < length; ++i) {
        any |= bytes[i];
    }
    return any == 0;
}

/* a length one put or get may have, at a place that does not wrap */
static int uct_crypt_bulk_extent_ok(uint64_t address, uint64_t length)
{
    return (length <= UCT_CRYPT_BULK_MAX_PUT) && (address + length >= address);
}

int uct_crypt_range_within(uint64_t address, uint64_t length, uint64_t base,
                           uint64_t base_length)
{
    return (address + length >= address) && (base + base_length >= base) &&
           (address >= base) && (address + length <= base + base_length);
}

int uct_crypt_bulk_control_kind(const uint8_t *payload, size_t length)
{
    crypt_bulk_segment_t segment;
    crypt_bulk_get_req_t get_req;
    crypt_bulk_ack_t ack;
    crypt_flow_refused_t refused;
    crypt_flow_end_t end;

    if (length == 0) {
        return 0;
    }
    switch (payload[0]) {
    case CRYPT_CONTROL_SEGMENT:
        if (length != sizeof(segment)) {
            return 0;
        }
        memcpy(&segment, payload, sizeof(segment));
        return ((segment.last <= 1) &&
                uct_crypt_bulk_extent_ok(le64toh(segment.address),
                                         le64toh(segment.length))) ?
               CRYPT_CONTROL_SEGMENT : 0;
    case CRYPT_CONTROL_ACK:
        if (length != sizeof(ack)) {
            return 0;
        }
        memcpy(&ack, payload, sizeof(ack));
        return uct_crypt_bulk_zero(ack.reserved, sizeof(ack.reserved)) ?
               CRYPT_CONTROL_ACK : 0;
    case CRYPT_CONTROL_GET_REQ:
        if (length < sizeof(get_req)) {
            return 0;
        }
        memcpy(&get_req, payload, sizeof(get_req));
        /* the packed remote key follows, all of it and nothing more */
        return (uct_crypt_bulk_zero(get_req.reserved, sizeof(get_req.reserved)) &&
                (le32toh(get_req.rkey_length) >= CRYPT_BULK_RKEY_MIN_LEN) &&
                (length - sizeof(get_req) == le32toh(get_req.rkey_length)) &&
                uct_crypt_bulk_extent_ok(le64toh(get_req.remote_addr),
                                         le64toh(get_req.length)) &&
                uct_crypt_bulk_extent_ok(le64toh(get_req.local_addr),
                                         le64toh(get_req.length))) ?
               CRYPT_CONTROL_GET_REQ : 0;
    case CRYPT_CONTROL_FLOW_END:
        if (length != sizeof(end)) {
            return 0;
        }
        memcpy(&end, payload, sizeof(end));
        return uct_crypt_bulk_zero(end.reserved, sizeof(end.reserved)) ?
               CRYPT_CONTROL_FLOW_END : 0;
    case CRYPT_CONTROL_FLOW_REFUSED:
        if (length != sizeof(refused)) {
            return 0;
        }
        memcpy(&refused, payload, sizeof(refused));
        return (((refused.reason == CRYPT_FLOW_REFUSED_BOUND) ||
                 (refused.reason == CRYPT_FLOW_REFUSED_RESOURCE)) &&
                uct_crypt_bulk_zero(refused.reserved, sizeof(refused.reserved)) &&
                (refused.reserved2 == 0)) ? CRYPT_CONTROL_FLOW_REFUSED : 0;
    default:
        return 0;
    }
}

void uct_crypt_bulk_profile_parse(FILE *file, const char *name, size_t *segment,
                                  unsigned long *threads, uct_crypt_bulk_warn_t warn)
{
    char line[256], key[64];
    unsigned number = 0;
    const char *p;
    double value;
    size_t len;
    int c;

    /* line by line: crypt_calibrate's first line is a comment, and one
     * line the shim does not understand must not hide the ones after it */
    while (fgets(line, sizeof(line), file) != NULL) {
        ++number;
        len = strlen(line);
        if (((len == 0) || (line[len - 1] != '\n')) && !feof(file)) {
            /* longer than any line a profile has (or a NUL inside) */
            while (((c = fgetc(file)) != EOF) && (c != '\n')) {
            }
            warn("crypt: UCX_CRYPT_PROFILE=%s: line %u is too long: ignored",
                 name, number);
            continue;
        }
        p = line + strspn(line, " \t");
        if ((*p == '#') || (*p == '\n') || (*p == '\0')) {
            continue;
        }
        if (sscanf(p, "%63s %lf", key, &value) != 2) {
            warn("crypt: UCX_CRYPT_PROFILE=%s: line %u is not 'key number': "
                 "ignored", name, number);
            continue;
        }
        /* the shim uses segment and threads, the cost model the rest; in
         * range before the conversion, which is undefined beyond it */
        if (!strcmp(key, "segment")) {
            if ((value >= UCT_CRYPT_BULK_MIN_SEGMENT) &&
                (value <= UCT_CRYPT_BULK_MAX_PUT)) {
                *segment = (size_t)value;
            } else {
                warn("crypt: UCX_CRYPT_PROFILE=%s: segment %g is not between "
                     "4k and 1g: ignored", name, value);
            }
        } else if (!strcmp(key, "threads")) {
            if ((value >= 0) && (value <= UCT_CRYPT_BULK_PROFILE_MAX_THREADS)) {
                *threads = (unsigned long)value;
            } else {
                warn("crypt: UCX_CRYPT_PROFILE=%s: threads %g is not between 0 "
                     "and %d: ignored", name, value,
                     UCT_CRYPT_BULK_PROFILE_MAX_THREADS);
            }
        }
    }
}
