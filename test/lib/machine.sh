# SPDX-License-Identifier: BSD-3-Clause
# The line every benchmark's CSV starts with: the machine, and the UCX the
# benchmark ran on (its version and build flags: assertions, parameter
# checks, statistics change what is measured).
#
#   . test/lib/machine.sh
#   echo "# $(bench_machine)" >"$csv"
#   version=$(ucx_runtime_version)
#   is_test_build PREFIX && ...     # the plugin has the test-only knobs
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

# Is the plugin of PREFIX a test build (configure --enable-fault-injection)?
# Its tamper knob is there; the benchmarks' test-only rows need one.
is_test_build() {
    LD_PRELOAD="$1/lib/libuct_crypt.so" ucx_info -c -f 2>/dev/null |
        grep -q '^UCX_CRYPT_FAULT='
}
