# SPDX-License-Identifier: BSD-3-Clause
# The line every benchmark's CSV starts with: the machine, and the UCX the
# benchmark ran on (its version and build flags: assertions, parameter
# checks, statistics change what is measured).
#
#   . test/lib/machine.sh
#   echo "# $(bench_machine)" >"$csv"
#   version=$(ucx_runtime_version)
# The version of the UCX in PATH (1.13 prints "# Version X", 1.14+ "#
# Library version: X")
ucx_runtime_version() {
    ucx_info -v 2>/dev/null | sed -n 's/^# \(Library version\|Version\):* *//p' | head -1
}

bench_machine() {
    local version flags
    version=$(ucx_runtime_version)
    flags=$(ucx_info -b 2>/dev/null |
            sed -n 's/^#define  *\(ENABLE_[A-Z_]*\)  *1$/\1/p' | tr '\n' ' ')
    flags=${flags% }
    printf '%s, %s cpus, %s, UCX %s (%s), %s' "$(hostname)" "$(nproc)" \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" \
        "${version:-?}" "${flags:-no debug flags}" "$(date -u +%FT%TZ)"
}
