#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The other UCX releases the tests run on, next to Debian's 1.13.1: the
# binaries from the PyPI wheels (libucx-cu11 1.18.1, libucx-cu12 1.22.0:
# libraries, ucx_info, ucx_perftest, public headers; no InfiniBand) and
# the internal headers of the same release from a UCX source archive a
# site supplies (UCX_CRYPT_UCX_SRC_ARCHIVES: a folder of
# ucx-<version>-headers.tar.gz with SHA256SUMS). Only Debian's 1.13.1
# source is reachable from the package registries, so without that folder
# the release stages skip and say so.
#
# Usage: contrib/fetch-ucx-releases.sh DESTDIR
# Prints one line per release: "VERSION PREFIX SOURCE_TREE". Exits 3 with a
# message when the source archives are not there (the caller skips).
set -euo pipefail

dest=${1:?usage: $0 DESTDIR}
archives=${UCX_CRYPT_UCX_SRC_ARCHIVES:-}
releases=("1.18.1 libucx-cu11" "1.22.0 libucx-cu12")
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

if [ ! -f "$archives/SHA256SUMS" ]; then
    echo "fetch-ucx-releases: no UCX source archives${archives:+ in $archives} (set" \
         "UCX_CRYPT_UCX_SRC_ARCHIVES to a folder of ucx-<version>-headers.tar.gz" \
         "with SHA256SUMS)" >&2
    exit 3
fi

for release in "${releases[@]}"; do
    read -r version wheel <<<"$release"
    prefix="$dest/$wheel-$version/libucx"
    tree="$dest/ucx-$version"
    if [ ! -x "$prefix/bin/ucx_info" ]; then
        # pip only downloads (Debian's python3 installs nothing here)
        /usr/bin/python3 -m pip download --quiet --no-deps --dest "$dest/wheels" \
            "$wheel==$version" >&2
        rm -rf "$dest/$wheel-$version"
        /usr/bin/python3 -m zipfile -e "$dest/wheels/${wheel//-/_}-$version"-*.whl \
            "$dest/$wheel-$version"
        chmod +x "$prefix"/bin/*
        # their libtool archives name the wheel builder's paths: unusable
        rm -f "$prefix"/lib/*.la "$prefix"/lib/ucx/*.la
    fi
    if [ ! -f "$tree/src/uct/base/uct_iface.h" ]; then
        archive="ucx-$version-headers.tar.gz"
        (cd "$archives" && grep " $archive\$" SHA256SUMS | sha256sum --check --quiet) || {
            echo "fetch-ucx-releases: $archives/$archive does not match SHA256SUMS" >&2
            exit 1; }
        tar -xzf "$archives/$archive" -C "$dest"
    fi
    echo "$version $prefix $tree"
done
