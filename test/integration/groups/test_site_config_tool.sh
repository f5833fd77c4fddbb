#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_site_config_tool (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_site_config_tool.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# the site configuration tool edits only its own block of the file
test_site_config_tool() {
    local conf="$work/openmpi-mca-params.conf" tool="$prefix/bin/ucx-crypt-site-config"
    printf '# site file\nbtl_tcp_if_include = eth0\n' >"$conf"
    cp "$conf" "$work/orig.conf"
    "$tool" enable "$conf" >/dev/null && "$tool" enable "$conf" >/dev/null
    local enabled; enabled=$("$tool" show "$conf")
    if [ "$(grep -c '^pml = ucx$' "$conf")" = 1 ] && grep -q "^btl_tcp_if_include = eth0" "$conf" &&
       grep -q "ucx-crypt-run$" "$conf" && [[ $enabled == *"enabled in"* ]] &&
       "$tool" disable "$conf" >/dev/null && cmp -s "$conf" "$work/orig.conf" &&
       [[ $("$tool" show "$conf") == *"not enabled"* ]]; then
        record site_config_enable_disable_round_trip pass
    else
        record site_config_enable_disable_round_trip fail "$(cat "$conf")"
    fi

    # ucx-crypt-run sets UCX_TLS and UCX_CRYPT_TLS as UCP must read them
    # before the program starts (a 1.22 plugin comes too late to change them)
    local run="$prefix/bin/ucx-crypt-run" got=""
    launched() { # UCX_TLS [UCX_CRYPT_TLS] -> "UCX_TLS|UCX_CRYPT_TLS" the program sees
        env -u UCX_TLS -u UCX_CRYPT_TLS ${1:+UCX_TLS=$1} ${2:+UCX_CRYPT_TLS=$2} \
            "$run" sh -c 'echo "${UCX_TLS-unset}|${UCX_CRYPT_TLS-unset}"'
    }
    got="$(launched crypt,tcp) $(launched crypt,rc) $(launched crypt dc) $(launched '') $(launched tcp)"
    if [ "$got" = "crypt|tcp crypt,crypt_aux:aux|rc crypt,crypt_aux:aux|dc unset|unset tcp|unset" ]; then
        record launcher_sets_ucx_tls_and_crypt_tls pass
    else
        record launcher_sets_ucx_tls_and_crypt_tls fail "got: $got"
    fi
}

it_run test_site_config_tool
