# SPDX-License-Identifier: BSD-3-Clause
# The first of a run's listening ports for the test programs' own sockets.
#
#   . test/lib/ports.sh
#   port=$(test_port_base)
#
# Below the kernel's ephemeral range, never in it: every UCX worker binds
# listeners and connects from ephemeral ports before a test program binds
# its own, and a chosen port that a worker already holds made the server's
# bind fail while the client, connecting to that port, reached a listener
# of its own worker and waited on it for ever (the soak once hung so).
# 1000 ports are left above the base for a run to count upwards.
test_port_base() {
    local low high
    read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    [ "$low" -gt 12000 ] || { echo "test_port_base: the ephemeral port range starts" \
        "at $low; leave room below it (sysctl net.ipv4.ip_local_port_range)" >&2; return 1; }
    echo $((10000 + RANDOM % (low - 1000 - 10000)))
}
