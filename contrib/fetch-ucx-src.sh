#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fetch the UCX source tree that matches the installed libucx, exactly.
#
# A UCT component needs UCX-internal headers (src/uct/base/*.h, ...) that no
# UCX install ships. Debian's own source package of the installed version is
# the one tree whose headers are guaranteed to match the binaries, so we take
# it with `apt-get source` rather than from a git tag. Its test/gtest is
# UCX's own test suite (test/conformance).
#
# Usage: contrib/fetch-ucx-src.sh DESTDIR
# Prints the path of the unpacked tree (DESTDIR/ucx-<upstream version>) on
# the last line. Does nothing if that tree is already there.
exec "$(dirname "$0")/fetch-deb-src.sh" libucx-dev src/uct/base/uct_iface.h "${1:?usage: $0 DESTDIR}"
