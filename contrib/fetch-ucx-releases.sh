#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The other UCX releases the tests run on, next to Debian's 1.13.1: the
# binaries from the PyPI wheels (libucx-cu11 1.18.1, libucx-cu12 1.22.0:
# libraries, ucx_info, ucx_perftest, public headers; no InfiniBand) and
# the internal headers of the same release from a UCX source archive
# (UCX_CRYPT_UCX_SRC_ARCHIVES, default ../shared/ucx-src next to the
# checkout or /work/shared/ucx-src: ucx-<version>-headers.tar.gz with
# SHA256SUMS).
#
# Usage: contrib/fetch-ucx-releases.sh DESTDIR
# Prints one line per release: "VERSION PREFIX SOURCE_TREE". Exits 3 with a
# message when the source archives are not there (the caller skips).
set -euo pipefail

dest=${1:?usage: $0 DESTDIR}
top=$(cd "$(dirname "$0")/.." && pwd)
# (next to the checkout, or the workplace's shared folder for a clone
# made elsewhere, as CI's)
archives=${UCX_CRYPT_UCX_SRC_ARCHIVES:-}
if [ -z "$archives" ]; then
    for archives in "$top/../shared/ucx-src" /work/shared/ucx-src; do
        [ -f "$archives/SHA256SUMS" ] && break
    done
fi
releases=("1.18.1 libucx-cu11" "1.22.0 libucx-cu12")
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

if [ ! -f "$archives/SHA256SUMS" ]; then
    echo "fetch-ucx-releases: no UCX source archives in $archives (set" \
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
