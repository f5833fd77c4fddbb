#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_client_server (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_client_server.sh OBJDIR PREFIX RESULTS_DIR
# Client/server programs over crypt's connection manager (client_server.sh).
. "$(dirname "$0")/../common.sh" "$@"

it_run test_client_server
