#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The UCX releases that run nowhere here still compile: the transport's
# sources against each release's own headers (1.14.1, 1.15.0, 1.16.0,
# 1.17.0, 1.19.1, 1.20.1, 1.21.0; 1.13.1, 1.18.1 and 1.22.0 are built and
# tested in full by run.sh).
#
#   test/releases/compile.sh TOP OBJ RESULTS_DIR
#
# OBJ is a configured build (its ucx_crypt_config.h); the sources compile
# as in a test build (fault injection on: every file). Per release: its
# header archive from UCX_CRYPT_UCX_SRC_ARCHIVES (a site's; checked
# against SHA256SUMS: contrib/fetch-ucx-releases.sh), the
# two generated version headers written from their .h.in, and a release
# build's config.h: that of the nearest release built here (run.sh's
# obj-ucx-1.18.1 below 1.19, obj-ucx-1.22.0 from 1.19; else OBJ's own),
# which decides no signature, only the layouts' options. Each source of
# src/uct_crypt compiles with the warnings that mean a wrong signature
# made errors (gcc 14's defaults). JUnit report: RESULTS/ucx_compile.xml.
set -uo pipefail

top=${1:?usage: $0 TOP OBJ RESULTS_DIR}
obj=${2:?}
results=${3:?}
. "$top/test/lib/report.sh"

src_dir=""
d=${UCX_CRYPT_UCX_SRC_ARCHIVES:-}
if [ -n "$d" ] && [ -f "$d/SHA256SUMS" ]; then
    src_dir=$(cd "$d" && pwd)
fi
if [ -z "$src_dir" ]; then
    record other_ucx_releases_compile skip "no UCX header archives here (set UCX_CRYPT_UCX_SRC_ARCHIVES; only Debian's 1.13.1 source is reachable)"
    write_report ucx_compile "$results/ucx_compile.xml"
    exit 0
fi

work=$(mktemp -d /tmp/ucx-crypt-compile.XXXXXX)
trap 'rm -rf "$work"' EXIT
jobs=$(nproc)
flags=(-std=gnu11 -fsyntax-only -DHAVE_CONFIG_H -fvisibility=hidden
       -Wall -Werror=incompatible-pointer-types -Werror=int-conversion
       -Werror=implicit-function-declaration -Werror=return-type
       -Werror=missing-prototypes -Wno-unused-parameter -Wno-sign-compare
       -Wno-missing-field-initializers -fno-strict-aliasing)

for version in 1.14.1 1.15.0 1.16.0 1.17.0 1.19.1 1.20.1 1.21.0; do
    name="ucx-$version-headers.tar.gz"
    if [ ! -f "$src_dir/$name" ]; then
        record "compile_ucx_$version" skip "$name is not in $src_dir"
        continue
    fi
    if ! (cd "$src_dir" && grep " $name\$" SHA256SUMS | sha256sum -c --quiet -) 2>/dev/null; then
        record "compile_ucx_$version" fail "$name does not match SHA256SUMS"
        continue
    fi
    tar xzf "$src_dir/$name" -C "$work"
    tree="$work/ucx-$version/src"
    gen="$work/gen-$version"
    IFS=. read -r major minor patch <<<"$version"
    mkdir -p "$gen/uct/api" "$gen/ucp/api"
    for h in uct/api/version.h ucp/api/ucp_version.h; do
        sed -e "s/@MAJOR_VERSION@/$major/g" -e "s/@MINOR_VERSION@/$minor/g" \
            -e "s/@PATCH_VERSION@/$patch/g" -e "s/@EXTRA_VERSION@//g" \
            -e "s/@VERSION@/$version/g" -e "s/@SCM_VERSION@/0/g" \
            -e "s/@SCM_BRANCH@/v$version/g" "$tree/$h.in" >"$gen/$h"
    done
    config="$obj/ucx_config"
    if [ "$minor" -lt 19 ] && [ -f "$obj/../obj-ucx-1.18.1/ucx_config/config.h" ]; then
        config="$obj/../obj-ucx-1.18.1/ucx_config"
    elif [ "$minor" -ge 19 ] && [ -f "$obj/../obj-ucx-1.22.0/ucx_config/config.h" ]; then
        config="$obj/../obj-ucx-1.22.0/ucx_config"
    fi
    # gen before the tree: the tree has only the .h.in of the two
    find "$top"/src/uct_crypt -name "*.c" | sort >"$work/files"
    if xargs -P "$jobs" -I{} gcc "${flags[@]}" -I"$top/src" -I"$obj" -I"$config" \
           -I"$gen" -I"$tree" -DUCX_CRYPT_BUILT_FOR_UCX="\"$version\"" \
           -DUCX_CRYPT_FAULT_INJECTION=1 {} \
           <"$work/files" >"$work/$version.log" 2>&1; then
        echo "compile UCX $version: $(wc -l <"$work/files") sources, clean (config.h of $(basename "$(dirname "$config")"))"
        record "compile_ucx_$version" pass
    else
        echo "compile UCX $version: FAILED"
        grep -m5 "error" "$work/$version.log"
        record "compile_ucx_$version" fail "$(grep -m3 error "$work/$version.log" | tr '\n' ' ')"
    fi
done

write_report ucx_compile "$results/ucx_compile.xml"
exit 0
