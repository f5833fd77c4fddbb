#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Helpers for configure.ac (kept out of m4, whose quoting mangles sed).
#   ucx-probe.sh installed-version UCX_INFO   -> 1.13.1
#   ucx-probe.sh source-version SRCDIR        -> 1.13.1
#   ucx-probe.sh sizes UCX_INFO               -> "type size" lines from ucx_info -y
set -e
case "$1" in
installed-version)
    # "# Version X" up to 1.13, "# Library version: X" from 1.14 on
    "$2" -v | sed -n -e 's/^# Version \([0-9.]*\).*/\1/p' \
                     -e 's/^# Library version: \([0-9.]*\).*/\1/p' ;;
source-version)
    for part in major minor patch; do
        sed -n "s/^define(\[ucx_ver_$part\], *\([0-9]*\)).*/\1/p" "$2/configure.ac"
    done | paste -sd. ;;
sizes)
    "$2" -y | sed -n 's/^ *sizeof(\([a-z_0-9]*\)) = \.* *\([0-9]*\).*/\1 \2/p' ;;
*)
    echo "usage: $0 installed-version|source-version|sizes ARG" >&2; exit 2 ;;
esac
