#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Remote-shell agent for MPI launchers (Open MPI plm_rsh_agent, hydra's
# -launcher-exec) that "logs in" to an emulated host of test/netns.sh:
#
#   netns-agent.sh [options] ADDR COMMAND...
#
# NETNS_AGENT_HOSTS maps addresses to hosts: "ADDR=NETNS=DEV ...". The
# command runs as on_host would run it (netns, fresh pid/ipc namespaces,
# UCX_NET_DEVICES=DEV; an empty DEV leaves UCX's default, every device).
# Launcher options (ssh's -x and the like) are ignored.
while [ "${1#-}" != "$1" ]; do shift; done
addr=$1
shift
for entry in ${NETNS_AGENT_HOSTS:-}; do
    if [ "${entry%%=*}" = "$addr" ]; then
        rest=${entry#*=}
        dev=${rest#*=}
        exec ip netns exec "${rest%%=*}" unshare --pid --ipc --fork --mount-proc \
            env ${dev:+UCX_NET_DEVICES="$dev"} sh -c "$*"
    fi
done
echo "netns-agent: no emulated host $addr in NETNS_AGENT_HOSTS" >&2
exit 1
