#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration group test_plugin_path (test/integration/common.sh; run.sh runs every group):
#
#   test/integration/groups/test_plugin_path.sh OBJDIR PREFIX RESULTS_DIR
. "$(dirname "$0")/../common.sh" "$@"

# ---- loaded by UCX's own module loader (UCX_PLUGIN_PATH, 1.22+) ---------------
# No LD_PRELOAD: UCX loads PREFIX/lib/ucx-crypt/plugins/libuct_crypt.so.0
# from inside uct_query_components; crypt loads the other modules itself,
# takes every network component off the list before UCP's snapshot, and
# registers. UCP parsed its configuration before: UCX_TLS=crypt with the
# inner in UCX_CRYPT_TLS, and UCX_SOCKADDR_TLS_PRIORITY=crypt, as the
# launcher sets them.
test_plugin_path() {
    local version minor
    version=$(ucx_runtime_version)
    minor=$(echo "$version" | cut -d. -f2)
    if [ "${minor:-0}" -lt 22 ]; then
        record plugin_path_loading skip "UCX $version has no plugin loader (UCX_PLUGIN_PATH is 1.22+); LD_PRELOAD there"
        return
    fi
    local penv=(UCX_PLUGIN_PATH="$plugin_dir" UCX_CRYPT_KEY_FILE="$work/job.key")
    local info
    info=$(env "${penv[@]}" UCX_TLS=crypt UCX_CRYPT_TLS=tcp ucx_info -d 2>&1)
    if grep -q "Component: crypt" <<<"$info" && grep -q "Connection manager: crypt" <<<"$info" &&
       ! grep -q "Component: tcp" <<<"$info" && ! grep -q "Transport: tcp" <<<"$info"; then
        record plugin_path_ucx_info_shows_crypt_and_no_network pass
    else
        record plugin_path_ucx_info_shows_crypt_and_no_network fail \
            "$(grep "Component:" <<<"$info" | tr '\n' ' ')"
    fi
    # preloaded and named by UCX_PLUGIN_PATH at once (a launcher's preload
    # in a site that also sets the path): one crypt, no hang
    info=$(env "${penv[@]}" LD_PRELOAD="$preload" UCX_TLS=crypt UCX_CRYPT_TLS=tcp \
           timeout 60 ucx_info -d 2>&1)
    if [ "$(grep -c "Component: crypt" <<<"$info")" = 1 ] &&
       ! grep -q "Component: tcp" <<<"$info"; then
        record plugin_path_and_preload_together_one_crypt pass
    else
        record plugin_path_and_preload_together_one_crypt fail \
            "$(grep "Component:" <<<"$info" | tr '\n' ' ')"
    fi
    # fail closed: a program that asks for tcp gets no transport
    if env "${penv[@]}" UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 30 "$check" -c 127.0.0.1 \
           -p "$(next_port)" -s 8 -n 1 >"$work/plugin-closed.log" 2>&1; then
        record plugin_path_ucx_tls_tcp_refuses_plaintext fail "ucp_check succeeded over UCX_TLS=tcp"
    elif grep -q "ucp_init: No such device" "$work/plugin-closed.log"; then
        record plugin_path_ucx_tls_tcp_refuses_plaintext pass
    else
        record plugin_path_ucx_tls_tcp_refuses_plaintext fail "$(tail -2 "$work/plugin-closed.log")"
    fi
    # connect-to-ep data lanes (the rc emulation): the plugin never adds
    # "crypt_aux:aux" to UCX_TLS (the launcher does); without it UCP
    # fails as it fails for rc without ud, with it the data is verified
    local tls rc port
    for tls in crypt crypt,crypt_aux:aux; do
        port=$(next_port)
        env "${penv[@]}" "${aux_envs[@]}" UCX_TLS=$tls UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo \
            timeout 60 "$check" -l "$port" >"$work/plugin-aux.s.log" 2>&1 &
        local srv=$!
        wait_listening - "$port" "$!"
        env "${penv[@]}" "${aux_envs[@]}" UCX_TLS=$tls UCX_CRYPT_TLS=tcp UCX_NET_DEVICES=lo \
            timeout 60 "$check" -c 127.0.0.1 -p "$port" -s 0,1000,1048577 -n 2 \
            >"$work/plugin-aux.$tls.log" 2>&1
        rc=$?
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        if [ "$tls" = crypt ]; then
            if [ $rc != 0 ] && grep -q "no auxiliary transport" "$work/plugin-aux.$tls.log"; then
                record plugin_path_connect_to_ep_without_crypt_aux_fails_as_rc_does pass
            else
                record plugin_path_connect_to_ep_without_crypt_aux_fails_as_rc_does fail \
                    "rc $rc; $(tail -2 "$work/plugin-aux.$tls.log" | tr '\n' ' ')"
            fi
        elif [ $rc = 0 ] && grep -q "DATA OK" "$work/plugin-aux.$tls.log"; then
            record plugin_path_connect_to_ep_with_crypt_aux_verified pass
        else
            record plugin_path_connect_to_ep_with_crypt_aux_verified fail \
                "rc $rc; $(tail -2 "$work/plugin-aux.$tls.log" | tr '\n' ' ')"
        fi
    done

    two_hosts_up plugin_path_setup || return
    local res
    res=$(wire_run plugin plugin 0,8,65536,1048576,16777216)
    if [ "$res" = "0 0" ] && grep -q "DATA OK" "$work/plugin.c.log"; then
        record plugin_path_data_verified_marker_never_on_wire pass
    else
        record plugin_path_data_verified_marker_never_on_wire fail \
            "rc/markers $res; $(grep -m2 'ERROR\|ucp_check' "$work/plugin.c.log")"
    fi
    res=$(cs_pair cs-plugin "${penv[*]} UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_SOCKADDR_TLS_PRIORITY=crypt UCX_CRYPT_STATS=y" \
          "${penv[*]} UCX_TLS=crypt UCX_CRYPT_TLS=tcp UCX_SOCKADDR_TLS_PRIORITY=crypt UCX_CRYPT_STATS=y" \
          -- -c 10.77.0.1 -s 0,1000,1048577 -n 2)
    cs_verdict plugin_path_client_server_verified "$res" cs-plugin
    netns_down ucxc-h1 ucxc-h2
}

it_run test_plugin_path
