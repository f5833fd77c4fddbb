#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Build every fuzz target with libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (clang) and run each for SECONDS:
#
#   test/fuzz/fuzz.sh SRCDIR OBJDIR SECONDS RESULTS_DIR
#
# OBJDIR is a configured build (for ucx_crypt_config.h). Each target starts
# from its corpus in test/fuzz/corpus/TARGET (honest traffic, written by
# make_seeds.c; new inputs go to a scratch copy, not into the tree) and
# prints "fuzz TARGET: N executions, M findings". A finding (a crash, a
# sanitizer report, a broken invariant) is kept under RESULTS_DIR/fuzz/ as
# the input that reproduces it: run the target binary on that file. JUnit
# report: RESULTS_DIR/fuzz.xml.
#
# FUZZ_RUNS=N stops each target after N executions (SECONDS stays the cap);
# FUZZ_TARGETS="a b" runs only those targets; FUZZ_RSS_LIMIT_MB (default
# 2048) is libFuzzer's memory limit: under ASan a target's resident set grows
# with the executions (ASan keeps every allocation's stack), about 260 bytes
# each for fuzz_cm, so a 10^7 run of it needs about 4096.
set -uo pipefail

src=${1:?usage: $0 SRCDIR OBJDIR SECONDS RESULTS_DIR}
obj=${2:?}
seconds=${3:?}
results=${4:?}
here="$src/test/fuzz"
out="$results/fuzz"
work=$(mktemp -d /tmp/ucx-crypt-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

. "$src/test/lib/report.sh"

targets=(fuzz_coll_frame fuzz_coll_hello fuzz_coll_tune fuzz_aead_record fuzz_job_secret
         fuzz_wire_handshake fuzz_cm fuzz_lane_chunk fuzz_bulk_control fuzz_profile
         fuzz_wire_frames fuzz_record)
[ -n "${FUZZ_TARGETS:-}" ] && read -r -a targets <<<"$FUZZ_TARGETS"

# the code under test: everything of src/ that parses network or file input
# and needs neither UCX nor MPI
lib_srcs=("$src"/src/aead/aead.c "$src"/src/aead/aead_openssl.c "$src"/src/aead/secure_mem.c
          "$src"/src/keyex/job_secret.c "$src"/src/keyex/schedule.c \
          "$src"/src/keyex/noise.c "$src"/src/uct_crypt/lane/lane_rx.c
          "$src"/src/uct_crypt/bulk/bulk_input.c "$src"/src/uct_crypt/wire/wire_frame.c
          "$src"/src/uct_crypt/record/record_input.c
          "$src"/src/ucp_crypt/coll/*.c "$src"/src/ucp_crypt/coll/*/*.c)
libs=(-lcrypto -lpthread)
if grep -q '^#define HAVE_IPSEC_MB 1' "$obj/ucx_crypt_config.h"; then
    lib_srcs+=("$src/src/aead/aead_ipsec_mb.c")
    libs+=(-lIPSec_MB)
fi
cflags=(-g -O1 -std=gnu11 -DHAVE_CONFIG_H -I"$src/src" -I"$obj" -I"$here"
        -fno-omit-frame-pointer -Wno-unused-parameter)

if ! command -v clang >/dev/null; then
    record fuzz_targets_build fail "clang not found (contrib/install-deps.sh installs it)"
    write_report fuzz "$results/fuzz.xml"
    exit 0
fi

# the seeds, from honest traffic (plain build: the corpus is not fuzzed)
if ! clang "${cflags[@]}" -o "$work/make_seeds" "$here/make_seeds.c" "${lib_srcs[@]}" \
         "${libs[@]}" 2>"$work/seeds.log" || ! "$work/make_seeds" "$work/corpus"; then
    record fuzz_seeds_generated fail "$(head -3 "$work/seeds.log")"
fi

for t in "${targets[@]}"; do
    if ! clang "${cflags[@]}" -fsanitize=fuzzer,address,undefined \
             -fno-sanitize-recover=undefined -o "$work/$t" "$here/$t.c" \
             "${lib_srcs[@]}" "${libs[@]}" 2>"$work/$t.build.log"; then
        echo "fuzz $t: build failed"
        record "$t" fail "build: $(grep -m2 error "$work/$t.build.log")"
        continue
    fi
    mkdir -p "$work/corpus/$t" "$work/artifacts-$t"
    [ -d "$here/corpus/$t" ] && cp -n "$here/corpus/$t"/* "$work/corpus/$t/" 2>/dev/null
    started=$SECONDS
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$work/$t" -max_total_time="$seconds" ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} \
        -timeout=10 -rss_limit_mb="${FUZZ_RSS_LIMIT_MB:-2048}" \
        -print_final_stats=1 -artifact_prefix="$work/artifacts-$t/" \
        "$work/corpus/$t" >"$work/$t.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$work/$t.log" | tail -1)
    findings=$(find "$work/artifacts-$t" -type f | wc -l)
    [ "$rc" -ne 0 ] && [ "$findings" -eq 0 ] && findings=1
    echo "fuzz $t: ${runs:-0} executions, $findings findings ($((SECONDS - started)) s)"
    if [ "$findings" -eq 0 ] && [ "${runs:-0}" -gt 0 ]; then
        record "$t" pass
    else
        cp "$work/$t.log" "$out/$t.log"
        cp "$work/artifacts-$t"/* "$out/" 2>/dev/null
        record "$t" fail "rc=$rc, ${runs:-0} executions, $findings findings: $out/$t.log"
    fi
done
write_report fuzz "$results/fuzz.xml"
exit 0
