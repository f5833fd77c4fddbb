/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx-crypt-ucx-version: print "MAJOR.MINOR" of the UCP library that a
 * program started from here would load (the dynamic linker's choice under
 * the same LD_LIBRARY_PATH; no rpath of its own), for ucx-crypt-run to
 * preload the crypt build made for that UCX. Public API only, stable
 * across the releases crypt supports.
 */
#include <ucp/api/ucp.h>
#include <stdio.h>

int main(void)
{
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    printf("%u.%u\n", major, minor);
    return 0;
}
