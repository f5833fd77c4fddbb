# SPDX-License-Identifier: BSD-3-Clause
# Test outcomes of a shell test script, and their JUnit-style report (what
# contrib/quickstart.sh adds up into "N passed, N failed, N skipped").
#
#   . test/lib/report.sh
#   record NAME pass|fail [REASON]     prints "PASS NAME" or "FAIL NAME: REASON"
#   write_report SUITE FILE            writes the report of everything recorded

declare -a names=() outcomes=() reasons=()

record() { # name outcome [reason]
    names+=("$1"); outcomes+=("$2"); reasons+=("${3:-}")
    if [ "$2" = pass ]; then echo "PASS $1"; else echo "FAIL $1: ${3:-}"; fi
}

write_report() { # suite file
    local suite=$1 file=$2 failures=0 o i
    for o in "${outcomes[@]}"; do [ "$o" = pass ] || failures=$((failures + 1)); done
    mkdir -p "$(dirname "$file")"
    {
        printf '<testsuites tests="%d" failures="%d" errors="0" disabled="0">\n' \
            "${#names[@]}" "$failures"
        printf '<testsuite name="%s" tests="%d" failures="%d">\n' "$suite" \
            "${#names[@]}" "$failures"
        for i in "${!names[@]}"; do
            if [ "${outcomes[$i]}" = pass ]; then
                printf '<testcase name="%s"/>\n' "${names[$i]}"
            else
                printf '<testcase name="%s"><failure message="%s"/></testcase>\n' \
                    "${names[$i]}" \
                    "$(printf '%s' "${reasons[$i]}" | tr -d '<>&"' | tr '\n' ' ')"
            fi
        done
        printf '</testsuite></testsuites>\n'
    } >"$file"
}
