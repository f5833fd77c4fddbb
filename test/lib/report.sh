# SPDX-License-Identifier: BSD-3-Clause
# Test outcomes of a shell test script, and their JUnit-style report (what
# contrib/quickstart.sh adds up into "N passed, N failed, N skipped").
#
#   . test/lib/report.sh
#   record NAME pass|fail [REASON]     prints "PASS NAME" or "FAIL NAME: REASON"
#   write_report SUITE FILE            writes the report of everything recorded
#
# REPORT_SKIP (a regex) and REPORT_SKIP_REASON: the tests whose names match
# are reported as skipped with that reason, whatever their outcome (a run
# on another UCX release names what is known not to hold there yet; the
# summary counts them). REPORT_NAME_PREFIX goes before every name (such a
# run's results beside the main run's).

declare -a names=() outcomes=() reasons=() times=()
report_last=$SECONDS # each test's time: since the one before it ended

record() { # name outcome [reason]
    local outcome=$2 reason=${3:-}
    if [ -n "${REPORT_SKIP:-}" ] && [[ $1 =~ $REPORT_SKIP ]]; then
        reason="${REPORT_SKIP_REASON:-skipped} (outcome: $outcome)"
        outcome=skip
    fi
    local name="${REPORT_NAME_PREFIX:-}$1"
    names+=("$name"); outcomes+=("$outcome"); reasons+=("$reason")
    times+=("$((SECONDS - report_last))"); report_last=$SECONDS
    case $outcome in
    pass) echo "PASS $name" ;;
    skip) echo "SKIP $name: $reason" ;;
    *)    echo "FAIL $name: $reason" ;;
    esac
}

write_report() { # suite file
    local suite=$1 file=$2 failures=0 o i
    for o in "${outcomes[@]}"; do [ "$o" = fail ] && failures=$((failures + 1)); done
    mkdir -p "$(dirname "$file")"
    {
        printf '<testsuites tests="%d" failures="%d" errors="0" disabled="0">\n' \
            "${#names[@]}" "$failures"
        printf '<testsuite name="%s" tests="%d" failures="%d">\n' "$suite" \
            "${#names[@]}" "$failures"
        for i in "${!names[@]}"; do
            if [ "${outcomes[$i]}" = pass ]; then
                printf '<testcase name="%s" time="%s"/>\n' "${names[$i]}" "${times[$i]}"
            elif [ "${outcomes[$i]}" = skip ]; then
                printf '<testcase name="%s" time="%s" result="skipped"><skipped message="%s"/></testcase>\n' \
                    "${names[$i]}" "${times[$i]}" \
                    "$(printf '%s' "${reasons[$i]}" | tr -d '<>&"' | tr '\n' ' ')"
            else
                printf '<testcase name="%s" time="%s"><failure message="%s"/></testcase>\n' \
                    "${names[$i]}" "${times[$i]}" \
                    "$(printf '%s' "${reasons[$i]}" | tr -d '<>&"' | tr '\n' ' ')"
            fi
        done
        printf '</testsuite></testsuites>\n'
    } >"$file"
}
