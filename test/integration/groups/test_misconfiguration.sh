#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_misconfiguration (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_misconfiguration.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# ---- misconfiguration fails at startup with a fix ---------------------------
expect_startup_error() { # name pattern env...
    local name=$1 pattern=$2; shift 2
    local out
    out=$(env LD_PRELOAD="$preload" UCX_TLS=crypt UCX_NET_DEVICES=lo "$@" \
          timeout 20 ucx_perftest -l -t tag_lat -n 10 2>&1)
    if [ $? -ne 0 ] && grep -q -- "$pattern" <<<"$out"; then
        record "$name" pass
    else
        record "$name" fail "$(tail -2 <<<"$out")"
    fi
}

test_misconfiguration() {
    head -c 32 /dev/urandom >"$work/open.key"; chmod 644 "$work/open.key"
    head -c 16 /dev/urandom >"$work/short.key"; chmod 600 "$work/short.key"
    expect_startup_error missing_key_file_fails_with_hint "ucx-crypt-keygen" \
        UCX_CRYPT_KEY_FILE="$work/absent.key"
    expect_startup_error readable_key_file_fails_with_hint "chmod 600" \
        UCX_CRYPT_KEY_FILE="$work/open.key"
    expect_startup_error short_key_file_fails_with_hint "expected exactly 32" \
        UCX_CRYPT_KEY_FILE="$work/short.key"
    expect_startup_error unknown_inner_transport_fails_with_hint "UCX_CRYPT_TLS" \
        UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_TLS=nosuchtl
    # a knob with a set of values (UCS_CONFIG_TYPE_ENUM) names them
    expect_startup_error unknown_backend_fails_with_the_choices "auto|ipsec-mb|openssl" \
        UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_BACKEND=nosuch
    expect_startup_error unknown_bulk_mode_fails_with_the_choices "pipelined|naive" \
        UCX_CRYPT_KEY_FILE="$work/job.key" UCX_CRYPT_BULK_MODE=fast

    # UCX_TLS is UCP's and the launcher's: the plugin reads it, never
    # writes it, and where UCP cannot use it as it is, says what to set
    # (a preloaded `env` prints the environment the program was given)
    local out
    out=$(env LD_PRELOAD="$preload" UCX_TLS=crypt,tcp UCX_CRYPT_KEY_FILE="$work/job.key" \
          env 2>&1)
    if grep -qx "UCX_TLS=crypt,tcp" <<<"$out" && ! grep -q "^UCX_CRYPT_TLS=" <<<"$out" &&
       grep -q "UCP can use UCX_TLS=crypt UCX_CRYPT_TLS=tcp" <<<"$out"; then
        record plugin_leaves_ucx_tls_to_the_launcher_and_names_the_fix pass
    else
        record plugin_leaves_ucx_tls_to_the_launcher_and_names_the_fix fail \
            "$(grep -E "^UCX_(CRYPT_)?TLS=|crypt:" <<<"$out" | head -3 | tr '\n' ' ')"
    fi
}

it_run test_misconfiguration
