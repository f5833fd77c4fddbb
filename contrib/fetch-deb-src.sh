#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fetch the Debian source package of an installed package, exactly its
# version: the one tree that is guaranteed to match the binaries (UCX's
# internal headers and test suite, MPICH's test suite).
#
# Usage: contrib/fetch-deb-src.sh INSTALLED_PACKAGE PROBE DESTDIR
#   PROBE  a path inside the tree that must be there after the download
# Prints the path of the unpacked tree (DESTDIR/SOURCE-UPSTREAM_VERSION) on
# the last line. Does nothing if that tree is already there.
set -euo pipefail

pkg=${1:?usage: $0 INSTALLED_PACKAGE PROBE DESTDIR}
probe=${2:?}
dest=${3:?}
me=fetch-deb-src

fields=$(dpkg-query -W -f='${source:Package} ${source:Version} ${source:Upstream-Version}' \
         "$pkg" 2>/dev/null || true)
read -r src version upstream <<<"$fields"
if [ -z "${upstream:-}" ]; then
    echo "$me: $pkg is not installed; run contrib/install-deps.sh" >&2
    exit 1
fi
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
tree="$dest/$src-$upstream"
if [ -e "$tree/$probe" ]; then
    echo "$tree"
    exit 0
fi

# Debian keeps source packages in separate "deb-src" indexes. Add one for
# the running release beside the binary ones (never alone: an update with
# only a deb-src list drops the binary package lists) for the time of the
# download, then remove it again.
. /etc/os-release
codename=${VERSION_CODENAME:?cannot tell the Debian release}
srcfile=/etc/apt/sources.list.d/ucx-crypt-deb-src.sources
cleanup() { rm -f "$srcfile"; }
trap cleanup EXIT
cat >"$srcfile" <<LIST
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
LIST
apt-get update -qq
(cd "$dest" && apt-get source -q "$src=$version" >"$dest/apt-source-$src.log" 2>&1) || {
    echo "$me: 'apt-get source $src=$version' failed, see $dest/apt-source-$src.log" >&2
    exit 1
}
if [ ! -e "$tree/$probe" ]; then
    echo "$me: expected $tree/$probe after apt-get source" >&2
    exit 1
fi
echo "$tree"
