#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Checks of the built and installed product, not of its behaviour:
#
#   test/integration/build_check.sh SRCDIR PREFIX TEST_PREFIX RESULTS_DIR
#
# SRCDIR the source tree, PREFIX the installation of the release build,
# TEST_PREFIX the installation of the test build (configure
# --enable-fault-injection). Report: RESULTS_DIR/build.xml.
#
# - layering: every folder includes only the layers below it (the rules of
#   src/*/README.md);
# - exports: each shared object exports its entry points and nothing else
#   (hidden visibility: no layer binds to another's private copy);
# - the installed API headers compile on their own, in C and C++;
# - a LICENSE, and an SPDX line in every source file;
# - the tamper hooks exist in the test build and nowhere in the release
#   build (neither the code nor the knobs).
set -uo pipefail

src=${1:?usage: $0 SRCDIR PREFIX TEST_PREFIX RESULTS_DIR}
prefix=${2:?}
prefix_test=${3:?}
results=${4:?}
work=$(mktemp -d /tmp/ucx-crypt-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$(dirname "$0")/../lib/report.sh"

# ---- layering ------------------------------------------------------------------
# FOLDER and an extended regex of what its files must not include
forbidden_includes() {
    local folder=$1 pattern=$2 hits
    hits=$(grep -rnE "^#include [<\"]($pattern)" "$src/$folder" \
               --include='*.c' --include='*.h' 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "$hits" | sed "s|$src/||" | head -5
    fi
}

check_layering() {
    local why=""
    # the crypto core: no UCX, no MPI, nothing of the layers above
    why+=$(forbidden_includes src/aead 'uc[spt]/|uct_crypt/|ucp_crypt/|keyex/|mpi\.h')
    why+=$(forbidden_includes src/keyex 'uc[spt]/|uct_crypt/|ucp_crypt/|mpi\.h')
    # the transport: UCT and UCS, never UCP, the collectives or MPI
    why+=$(forbidden_includes src/uct_crypt 'ucp/|ucp_crypt/|mpi\.h|ompi|opal')
    # the collectives' team layer: no UCX, no MPI; of the transport only
    # its installed contract (api/)
    why+=$(forbidden_includes src/ucp_crypt/coll 'uc[spt]/|mpi\.h|uct_crypt/[^a]')
    # the MPI adapters: the team layer, the keys and the transport's api/
    why+=$(forbidden_includes src/ucp_crypt/mpi 'uc[spt]/|uct_crypt/[^a]|aead/aead_')
    # OpenSSL only behind src/aead and src/keyex: randomness, wiping and
    # constant-time compares through their helpers (crypt_random_*,
    # crypt_wipe, crypt_memcmp_ct)
    why+=$(grep -rnE '^#include <openssl/|\b(OPENSSL_[a-z]|CRYPTO_[a-z]|RAND_[a-z]|EVP_[A-Za-z])' \
               "$src/src/uct_crypt" "$src/src/ucp_crypt" --include='*.c' --include='*.h' |
           sed "s|$src/|calls OpenSSL: |" | head -5)
    if [ -z "$why" ]; then
        record layering_includes_point_down pass
    else
        record layering_includes_point_down fail "$why"
    fi
}

# The rooms of the transport (src/uct_crypt/README.md) and their doors:
# what each room's files may include of the transport, who may open the
# wire, and that nobody tells the wire apart by its function pointers; no
# source or test file is over 1,000 lines (a file a reviewer reads whole).

# TREE ROOM ALLOWED: the includes of TREE/src/uct_crypt/ROOM that name a
# part of the transport not matched by the extended regex ALLOWED
room_includes_beyond() {
    grep -rnE '^#include "uct_crypt/' "$1/src/uct_crypt/$2" \
         --include='*.c' --include='*.h' 2>/dev/null |
        grep -vE "\"uct_crypt/($3)" | sed "s|$1/||" | head -5
}

# TREE: what breaks a room's door in TREE, nothing when every door holds
rooms_broken() {
    local tree=$1
    # base/: what every room shares (byte formats, counters, the UCX
    # release differences, the ops table, the keepalive knobs' type, the
    # TLS words); it includes nothing of a room
    room_includes_beyond "$tree" base 'base/|api/'
    # wire/ and cm/: the listeners, the wire's internals behind its door
    room_includes_beyond "$tree" wire 'wire/|base/|api/'
    room_includes_beyond "$tree" cm 'cm/|base/|api/|wire/wire\.h|wire/wire_admit\.h'
    # record/, bulk/, lane/: the wrapper's structs, base/, and the one
    # header of a room below (record/ hands segments to bulk/; the lane
    # opens the wire)
    room_includes_beyond "$tree" record 'record/|base/|api/|uct_crypt\.h|bulk/bulk\.h'
    # the rooms' doors the wrapper includes (record.h, fault.h): nothing of
    # the transport but base/ and api/
    local door
    for door in record/record.h fault/fault.h; do
        grep -nE '^#include "uct_crypt/' "$tree/src/uct_crypt/$door" 2>/dev/null |
            grep -vE '"uct_crypt/(base/|api/)' | sed "s|^|$door: |" | head -5
    done
    room_includes_beyond "$tree" bulk 'bulk/|base/|api/|uct_crypt\.h'
    room_includes_beyond "$tree" lane 'lane/|base/|api/|uct_crypt\.h|wire/wire\.h'
    # who may open the wire's door: the one place an inner is opened, the
    # two that fill the wire's parameters (the iface, the lane), the
    # connection manager; nobody reaches its internals, tells it apart by
    # pointer, or decides by the tl's name that the inner is the wire
    grep -rln '#include "uct_crypt/wire/wire\.h"' "$tree/src" |
        grep -vE '/src/uct_crypt/(uct_crypt_inner\.c|uct_crypt_iface\.c|lane/lane\.c|cm/|wire/)' |
        sed "s|$tree/|includes wire.h: |" | head -5
    grep -rnE '"tcp"' "$tree/src/uct_crypt" --include='*.c' --include='*.h' |
        grep -v '/src/uct_crypt/uct_crypt_inner\.c:' |
        sed "s|$tree/|decides the wire by name: |" | head -5
    grep -rln 'wire/wire_int\.h' "$tree/src" | grep -v '/src/uct_crypt/wire/' |
        sed "s|$tree/|includes wire_int.h: |" | head -5
    grep -rnE 'iface_progress *==|== *uct_crypt_wire_|uct_crypt_wire_is_own' "$tree/src" |
        sed "s|$tree/|tells the wire apart: |" | head -5
}

check_rooms() {
    local why f room planted missed=""
    why=$(rooms_broken "$src")
    # the wrapper's own files at the top, the rest in rooms
    f=$(find "$src/src/uct_crypt" -maxdepth 1 -type f | wc -l)
    [ "$f" -le 10 ] || why+="src/uct_crypt holds $f files at the top (at most 10) "
    for f in "$src"/src/uct_crypt/*.c; do
        [ "$(wc -l <"$f")" -le 600 ] || why+="${f#$src/}: $(wc -l <"$f") lines (the wrapper's: 600 at most) "
    done
    [ "$(wc -l <"$src/src/uct_crypt/uct_crypt.h")" -lt 300 ] ||
        why+="uct_crypt.h: $(wc -l <"$src/src/uct_crypt/uct_crypt.h") lines (under 300; the rooms' doors hold theirs) "
    for f in $(find "$src/src" "$src/test" "$src/contrib" -name '*.[ch]' -o -name '*.cc' \
                    -o -name '*.sh' -o -name '*.py' | grep -v '/test/fuzz/corpus/'); do
        if [ "$(wc -l <"$f")" -gt 1000 ]; then
            why+="${f#$src/}: $(wc -l <"$f") lines "
        fi
    done
    if [ -z "$why" ]; then
        record every_room_keeps_its_door pass
    else
        record every_room_keeps_its_door fail "$why"
    fi
    # the rules catch a break: a copy of the transport with one include
    # through a wall per room must fail them
    for planted in base:uct_crypt.h wire:record/record_input.h cm:wire/wire_int.h cm:uct_crypt.h \
                   record:lane/lane_rx.h bulk:record/record_input.h lane:bulk/bulk.h \
                   record/record.h:uct_crypt.h lane:wire/wire_int.h; do
        room=${planted%%:*}
        rm -rf "$work/tree" && mkdir -p "$work/tree/src" &&
            cp -r "$src/src/uct_crypt" "$work/tree/src/"
        f=$(ls -d "$work/tree/src/uct_crypt/$room" "$work/tree/src/uct_crypt/$room/"*.c \
                  "$work/tree/src/uct_crypt/$room/"*.h 2>/dev/null | grep '\.[ch]$' | head -1)
        echo "#include \"uct_crypt/${planted#*:}\"" >>"$f"
        [ -n "$(rooms_broken "$work/tree")" ] || missed+="$room ($planted) passed; "
    done
    if [ -z "$missed" ]; then
        record door_rules_catch_an_include_through_a_wall pass
    else
        record door_rules_catch_an_include_through_a_wall fail "$missed"
    fi
}

# Every citation points into the tree or to a public source: nothing
# names a folder beside the checkout (a reader of a clone has none)
check_citations() {
    local hits
    hits=$(grep -rnE '\.\./shared/|/work/' "$src"/src "$src"/test "$src"/docs \
               "$src"/contrib "$src"/README.md "$src"/Makefile.am 2>/dev/null |
           grep -v -e '/test/fuzz/corpus/' -e 'build_check\.sh:' | sed "s|$src/||" | head -5)
    if [ -z "$hits" ]; then
        record citations_stay_in_the_tree pass
    else
        record citations_stay_in_the_tree fail "$hits"
    fi
}

# ---- exports -------------------------------------------------------------------
# LIB and an extended regex that every defined dynamic symbol must match
exports_only() {
    local name=$1 lib=$2 allowed=$3 syms extra
    if [ ! -f "$lib" ]; then
        record "$name" fail "$lib not installed"
        return
    fi
    syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
    extra=$(grep -vxE "$allowed" <<<"$syms" | tr '\n' ' ')
    if [ -n "$syms" ] && [ -z "$extra" ]; then
        record "$name" pass
    else
        record "$name" fail "exports $(wc -w <<<"$syms") symbols; not allowed: ${extra:-none at all}"
    fi
}

check_exports() {
    exports_only plugin_exports_only_its_entry_points "$prefix/lib/libuct_crypt.so" \
        'uct_crypt_(stats_read|fail_reason_name|coll_lane_ops)'
    local mpi
    for mpi in mpich ompi; do
        exports_only "pmpi_${mpi}_exports_only_mpi_calls" \
            "$prefix/lib/libucxcrypt_pmpi_$mpi.so" \
            'MPI_(Allgather|Allgatherv|Allreduce|Alltoall|Alltoallv|Bcast)|ucx_crypt_pmpi_adapter'
    done
    exports_only coll_component_exports_only_its_component \
        "$prefix/lib/openmpi/mca_coll_crypt.so" 'mca_coll_crypt_component'
}

# ---- installed headers ---------------------------------------------------------
check_api_headers() {
    local inc="$prefix/include" ok=1 log="$work/api.log" h
    for h in uct_crypt_lane.h uct_crypt_stats.h; do
        [ -f "$inc/uct_crypt/$h" ] || { ok=0; echo "missing $inc/uct_crypt/$h" >>"$log"; }
    done
    printf '#include <uct_crypt/uct_crypt_lane.h>\n#include <uct_crypt/uct_crypt_stats.h>\nint main(void) { uct_crypt_stats_t s; (void)s; return (int)sizeof(uct_crypt_lane_ops_t) * 0; }\n' \
        >"$work/api.c"
    cp "$work/api.c" "$work/api.cc"
    cc -std=c99 -Wall -Wextra -Werror -I"$inc" -c "$work/api.c" -o "$work/api.o" >>"$log" 2>&1 || ok=0
    c++ -Wall -Wextra -Werror -I"$inc" -c "$work/api.cc" -o "$work/api_cc.o" >>"$log" 2>&1 || ok=0
    if [ $ok = 1 ]; then
        record installed_api_headers_compile_alone pass
    else
        record installed_api_headers_compile_alone fail "$(head -3 "$log")"
    fi
}

# ---- test hooks ----------------------------------------------------------------
# the strings a tamper hook leaves in a binary: its knob names
hook_strings() { # lib...
    strings "$@" 2>/dev/null | grep -cE 'flip_ciphertext|bulk_splice|UCX_CRYPT_COLL_FAULT|TESTING: '
}

# what ucx_info documents of crypt's knobs, with the plugin of PREFIX loaded
fault_knobs() { # prefix
    LD_PRELOAD="$1/lib/libuct_crypt.so" ucx_info -c -f 2>/dev/null |
        grep -cE '^UCX_CRYPT_(FAULT|COLL_FAULT|LANE_FAULT|LANE_UCX_TCP|EMULATE_CONNECT_TO_EP|INNER_UCX_TCP|WIRE_PORT|WIRE_ADVERTISE_PORT)'
}

check_test_hooks() {
    local libs_release=("$prefix/lib/libuct_crypt.so" "$prefix"/lib/libucxcrypt_pmpi_*.so
                        "$prefix/lib/openmpi/mca_coll_crypt.so")
    local libs_test=("$prefix_test/lib/libuct_crypt.so" "$prefix_test"/lib/libucxcrypt_pmpi_*.so
                     "$prefix_test/lib/openmpi/mca_coll_crypt.so")
    local rel tst rel_knobs tst_knobs
    rel=$(hook_strings "${libs_release[@]}")
    tst=$(hook_strings "${libs_test[@]}")
    rel_knobs=$(fault_knobs "$prefix")
    tst_knobs=$(fault_knobs "$prefix_test")
    echo "  tamper hook strings: release $rel, test $tst; UCX_CRYPT_FAULT* knobs: release $rel_knobs, test $tst_knobs"
    if [ "$rel" = 0 ] && [ "$rel_knobs" = 0 ]; then
        record release_build_has_no_tamper_hooks pass
    else
        record release_build_has_no_tamper_hooks fail \
            "$rel hook strings, $rel_knobs UCX_CRYPT_FAULT knobs in the release build"
    fi
    # the other way round, so that the check above cannot pass by looking
    # in the wrong place
    if [ "$tst" -gt 0 ] && [ "$tst_knobs" -gt 0 ]; then
        record test_build_has_tamper_hooks pass
    else
        record test_build_has_tamper_hooks fail "$tst hook strings, $tst_knobs knobs"
    fi
}

# Knobs a user needs: crypt's own UCX_CRYPT_* in a release build, at most
# 25 (UCX tcp has 15); UCX's own that every UCT tl and cm inherits
# (ALLOC, FAILURE, MAX_NUM_EPS, REUSEADDR, under each role's prefix) are
# not crypt's. The test and benchmark switches exist in test builds only.
own_knobs() { # prefix
    LD_PRELOAD="$1/lib/libuct_crypt.so" ucx_info -c -f 2>/dev/null |
        grep -oE '^UCX_CRYPT_[A-Z0-9_]+' | sort -u |
        grep -vE '^UCX_CRYPT_(AUX_|CM_)?(ALLOC|FAILURE|MAX_NUM_EPS|REUSEADDR)$'
}

check_knobs() {
    local rel tst switch missing=""
    rel=$(own_knobs "$prefix")
    tst=$(own_knobs "$prefix_test")
    for switch in BULK_MODE BULK_MAX_OUTSTANDING PROFILE REKEY_RECORDS HANDSHAKE_RATE; do
        grep -qx "UCX_CRYPT_$switch" <<<"$tst" || missing+="$switch not in the test build; "
        grep -qx "UCX_CRYPT_$switch" <<<"$rel" && missing+="$switch in the release build; "
    done
    echo "  crypt's own knobs: release $(grep -c . <<<"$rel"), test $(grep -c . <<<"$tst")"
    if [ "$(grep -c . <<<"$rel")" -le 25 ] && [ "$(grep -c . <<<"$rel")" -ge 10 ] &&
       [ -z "$missing" ]; then
        record release_build_has_at_most_25_knobs pass
    else
        record release_build_has_at_most_25_knobs fail \
            "$(grep -c . <<<"$rel") knobs: $(echo $rel | cut -c1-400); $missing"
    fi
}

# ---- licence -------------------------------------------------------------------
check_licence() {
    local missing
    # config/aux holds what autotools generate
    missing=$(find "$src/src" "$src/test" "$src/contrib" "$src/config" \
                   -path "$src/config/aux" -prune -o \( -name '*.[ch]' -o -name '*.cc' \
                   -o -name '*.sh' -o -name '*.py' -o -name '*.f90' -o -name '*.in' \) \
                   -print 2>/dev/null |
              while read -r f; do
                  head -3 "$f" | grep -q 'SPDX-License-Identifier: BSD-3-Clause' ||
                      echo "${f#"$src"/}"
              done)
    if [ -f "$src/LICENSE" ] && [ -z "$missing" ]; then
        record every_source_file_has_an_spdx_line pass
    else
        record every_source_file_has_an_spdx_line fail \
            "LICENSE $([ -f "$src/LICENSE" ] && echo present || echo missing); no SPDX line: $(echo $missing | cut -c1-300)"
    fi
}

# ---- no abort on the data path ---------------------------------------------------
# Out of memory, a failed key update or seal ends an endpoint through UCT's
# error path (uct_crypt_ep_fail_local), never the process. The aborts
# left come after UCP's error handler was told of a failed endpoint, in
# uct_crypt_ep_failure_told (uct_crypt_global.c): UCX's own rule for an
# error nobody handles (error mode none), and an MPI rank's
# (UCX_CRYPT_ABORT_ON_EP_FAILURE).
check_no_fatal() {
    local hits
    hits=$(grep -rn --include='*.c' 'ucs_fatal' "$src"/src/uct_crypt | grep -v 'uct_crypt_global.c' |
           sed "s|$src/||")
    hits+=$(grep -c 'ucs_fatal' "$src/src/uct_crypt/uct_crypt_global.c" | grep -vx 2)
    if [ -z "$hits" ]; then
        record transport_data_path_never_aborts pass
    else
        record transport_data_path_never_aborts fail "$(echo $hits | cut -c1-300)"
    fi
}

# Every integration group is run: run.sh names them one by one (their
# order), and a group added to groups/ without a line there ran nowhere
check_groups_run() {
    local f group missing=""
    for f in "$src"/test/integration/groups/test_*.sh; do
        group=$(basename "$f" .sh)
        grep -qw "$group" "$src/test/integration/run.sh" || missing+="$group "
    done
    if [ -z "$missing" ]; then
        record every_integration_group_is_run pass
    else
        record every_integration_group_is_run fail "not in test/integration/run.sh: $missing"
    fi
}

check_layering
check_rooms
check_citations
check_groups_run
check_no_fatal
check_licence
check_exports
check_api_headers
check_test_hooks
check_knobs
write_report build "$results/build.xml"
exit 0
