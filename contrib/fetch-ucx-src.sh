#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fetch the UCX source tree that matches the installed libucx, exactly.
#
# A UCT component needs UCX-internal headers (src/uct/base/*.h, ...) that no
# UCX install ships. Debian's own source package of the installed version is
# the one tree whose headers are guaranteed to match the binaries, so we take
# it with `apt-get source` rather than from a git tag.
#
# Usage: contrib/fetch-ucx-src.sh DESTDIR
# Prints the path of the unpacked tree (DESTDIR/ucx-<upstream version>) on
# the last line. Does nothing if that tree is already there.
set -euo pipefail

dest=${1:?usage: $0 DESTDIR}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

deb_version=$(dpkg-query -W -f='${Version}' libucx-dev 2>/dev/null || true)
if [ -z "$deb_version" ]; then
    echo "fetch-ucx-src: libucx-dev is not installed; run contrib/install-deps.sh" >&2
    exit 1
fi
upstream=${deb_version%%-*}
tree="$dest/ucx-$upstream"

if [ -f "$tree/src/uct/base/uct_iface.h" ]; then
    echo "$tree"
    exit 0
fi

# Debian keeps source packages in separate "deb-src" indexes. Add one for the
# running release only for the time of the download, then remove it again.
. /etc/os-release
codename=${VERSION_CODENAME:?cannot tell the Debian release}
srcfile=/etc/apt/sources.list.d/ucx-crypt-deb-src.sources
cleanup() { rm -f "$srcfile"; }
trap cleanup EXIT
cat >"$srcfile" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt-get update -qq
(cd "$dest" && apt-get source -q "ucx=$deb_version" >"$dest/apt-source.log" 2>&1) || {
    echo "fetch-ucx-src: 'apt-get source ucx=$deb_version' failed, see $dest/apt-source.log" >&2
    exit 1
}
if [ ! -f "$tree/src/uct/base/uct_iface.h" ]; then
    echo "fetch-ucx-src: expected $tree/src/uct/base/uct_iface.h after apt-get source" >&2
    exit 1
fi
echo "$tree"
