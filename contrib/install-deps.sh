#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Install the Debian 12 packages that ucx-crypt builds, tests and benchmarks
# with. Idempotent: packages already installed are not touched, and apt is
# only contacted when something is missing.
set -euo pipefail

PACKAGES=(
    # toolchain and autotools, as UCX itself
    build-essential autoconf automake libtool pkg-config dpkg-dev
    # the host: UCX 1.13.1 (headers, libraries, ucx_info, ucx_perftest)
    libucx-dev ucx-utils
    # cryptography: ipsec-mb for the AES-GCM data path, OpenSSL for X25519,
    # HKDF, the CSPRNG and the portable AES-GCM fallback
    libipsec-mb-dev libssl-dev
    # topology for the bulk engine, verbs/psm2 for inner transports at sites
    libhwloc-dev libnuma-dev libibverbs-dev libpsm2-dev
    # tests; clang for the fuzz targets (libFuzzer, ASan, UBSan)
    googletest libgtest-dev libtsan2 clang libclang-rt-14-dev
    # MPI libraries that run over UCX (Open MPI pml ucx, MPICH ch4:ucx)
    openmpi-bin libopenmpi-dev mpich libmpich-dev
    # Fortran: the coll component reaches Fortran callers (a test proves it)
    gfortran
    # two emulated hosts: namespaces, veth, captures
    iproute2 tcpdump util-linux procps
    # benchmark plots (model vs measured); NetPIPE over both MPIs
    python3 python3-matplotlib netpipe-openmpi netpipe-mpich2
    # the other UCX releases the tests run on come as PyPI wheels
    python3-pip
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PACKAGES[@]} packages present"
    exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
    --no-install-recommends "${missing[@]}"
