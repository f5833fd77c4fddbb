#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Build UCX's own gtest (the UCT and UCP suites of the release the plugin is
# built against) with crypt added where it lists transports, linked against
# the installed UCX libraries: the binaries a user runs, not a second build
# of UCX.
#
# Usage: test/conformance/build.sh UCX_SRC_TREE UCX_CONFIG_H_DIR WORK
#   UCX_SRC_TREE      the tree contrib/fetch-ucx-src.sh fetched
#   UCX_CONFIG_H_DIR  the installed build's config.h (ucx_info -b), as the
#                     plugin's own build keeps it (OBJ/ucx_config)
#   WORK              where the patched copy, objects and WORK/gtest go
# Objects are rebuilt only when their source changed (make).
#
# Left out: UCS and UCM suites (crypt is a UCT transport), the perf suites
# (they need libucxperf, which Debian does not ship) and the InfiniBand and
# GPU suites (none here), UCT tag offload (uct/test_tag.cc: InfiniBand
# only; at -O1 GCC 12 refuses one of its always-inline calls).
set -euo pipefail

src=${1:?usage: $0 UCX_SRC_TREE UCX_CONFIG_H_DIR WORK}
config_dir=${2:?usage: $0 UCX_SRC_TREE UCX_CONFIG_H_DIR WORK}
work=${3:?usage: $0 UCX_SRC_TREE UCX_CONFIG_H_DIR WORK}
here=$(cd "$(dirname "$0")" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)

if [ ! -d "$src/test/gtest/uct" ]; then
    echo "conformance: $src has no test/gtest (fetch it with contrib/fetch-ucx-src.sh)" >&2
    exit 1
fi
src=$(cd "$src" && pwd)
config_dir=$(cd "$config_dir" && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
# The patched copy keeps the suite's own place under test/, so that its
# includes ("gtest/common/...") find the copy, never the original
tree="$work/test/gtest"

# The patched copy is made again only when the source or the patch changed,
# so that make sees unchanged sources as up to date.
stamp="$work/gtest.patched"
if [ ! -f "$stamp" ] || [ "$here/patch_gtest.py" -nt "$stamp" ] ||
   [ "$src/test/gtest/ucp/ucp_test.h" -nt "$stamp" ]; then
    rm -rf "$tree"
    mkdir -p "$work/test"
    cp -r "$src/test/gtest" "$tree"
    python3 "$here/patch_gtest.py" "$tree"
    touch "$stamp"
fi

cd "$tree"
sources=$(ls common/*.cc common/googletest/*.cc uct/*.cc uct/v2/*.cc \
              uct/tcp/*.cc ucp/*.cc |
          grep -v -e 'common/test_perf.cc' -e 'googletest/gtest_main.cc' \
                  -e 'uct/test_uct_perf.cc' -e 'ucp/test_ucp_perf.cc' \
                  -e 'uct/test_tag.cc')

# ucp_test.cc calls into ud's iface (uct_ud_iface_flush), which lives in
# UCX's ib module: link it from where the installed UCX keeps its modules.
libuct=$(g++ -print-file-name=libuct.so)
moddir=$(dirname "$(readlink -f "$libuct")")/ucx
if [ ! -e "$moddir/libuct_ib.so" ]; then
    echo "conformance: no libuct_ib.so in $moddir (libucx0 installs it)" >&2
    exit 1
fi
{
    echo "CXXFLAGS = -O1 -g -w -std=c++11 -fopenmp -DHAVE_CONFIG_H \\"
    echo "  -I$config_dir -I$src/src -I$work/test -I$tree -I$tree/common/googletest \\"
    echo "  -DTOP_SRCDIR=\\\"$src\\\" -DGTEST_UCM_HOOK_LIB_DIR=\\\"/nonexistent\\\""
    printf 'OBJS ='
    for s in $sources; do printf ' \\\n  %s' "obj/${s%.cc}.o"; done
    echo
    echo "$work/gtest: \$(OBJS)"
    echo "	\$(CXX) -fopenmp -o \$@ \$(OBJS) -lucp -luct -lucs -lucm \\"
    echo "	  -L$moddir -Wl,-rpath,$moddir -luct_ib -lpthread -ldl -lrt"
    echo "obj/%.o: %.cc"
    echo "	@mkdir -p \$(dir \$@)"
    echo "	@echo '  CXX \$<'"
    echo "	@\$(CXX) \$(CXXFLAGS) -c \$< -o \$@"
} >"$work/Makefile.new"
if ! cmp -s "$work/Makefile.new" "$work/Makefile"; then
    mv "$work/Makefile.new" "$work/Makefile"
else
    rm -f "$work/Makefile.new"
fi
make -C "$tree" -f "$work/Makefile" -j"$jobs" --no-print-directory "$work/gtest"
echo "conformance: built $work/gtest"
