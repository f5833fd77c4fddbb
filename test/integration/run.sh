#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration tests of the crypt transport: real processes, real UCX. Runs
# every group of test/integration/groups/ in turn (each also runs alone,
# with the same arguments); what they share is test/integration/common.sh.
#
#   test/integration/run.sh OBJDIR PREFIX RESULTS_DIR
#
# IT_ONLY=REGEX runs only the groups whose name matches. Reports:
# RESULTS_DIR/${IT_REPORT:-integration}_GROUP.xml. Exits non-zero when a
# test failed; that group's logs are kept (the path is printed).
set -uo pipefail

obj=${1:?usage: $0 OBJDIR PREFIX RESULTS_DIR}
prefix=${2:?}
results=${3:?}
here=$(cd "$(dirname "$0")" && pwd)
failed=0
for group in test_ucp_sizes_verified test_many_rendezvous test_key_update test_perftest \
             test_fail_closed test_misconfiguration test_tamper test_plaintext_peer \
             test_mpi test_collectives test_site_config_tool test_wire \
             test_aux_lane test_attacker test_peer_failure test_relay \
             test_client_server test_plugin_path test_leaks test_wireup_storm; do
    if [ -z "${IT_ONLY:-}" ] || [[ $group =~ $IT_ONLY ]]; then
        "$here/groups/$group.sh" "$obj" "$prefix" "$results" || failed=1
    fi
done
exit $failed
