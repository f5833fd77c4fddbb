#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Generate configure and Makefile.in, as UCX's own autogen.sh does.
set -e
cd "$(dirname "$0")"
mkdir -p config/m4 config/aux
autoreconf --install --force -Wall
