# SPDX-License-Identifier: BSD-3-Clause
# What a standalone integration test group shares: its arguments, the
# emulated hosts, the processes it started, its verdicts and its report.
#
#   . "$(dirname "$0")/../lib/group.sh" NAME "$@"   # OBJDIR PREFIX RESULTS_DIR
#
# gives obj, prefix, results, here (the script's folder), work (a fresh
# folder for logs), netns.sh, report.sh and ports.sh, and:
#   group_hosts NS...       the namespaces to remove at the end
#   pids+=(PID)             a process to stop at the end (stop_tree), by the
#                           PID this script started; one started in a
#                           subshell ($(...)) goes into the file $work/pids
#   verdict NAME OK REASON  OK 1: pass; else fail with REASON and the logs'
#                           folder, which is then kept (also when the name
#                           matches REPORT_SKIP: reported as skipped, the
#                           logs kept for the known-open case)
#   group_finish            writes RESULTS_DIR/NAME.xml and exits non-zero
#                           when a test failed
# KEEP_WORK=1 keeps the logs whatever happened.
set -uo pipefail

group_name=$1
obj=${2:?usage: $0 OBJDIR PREFIX RESULTS_DIR}
prefix=${3:?usage: $0 OBJDIR PREFIX RESULTS_DIR}
results=${4:?usage: $0 OBJDIR PREFIX RESULTS_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../netns.sh"
. "$here/../lib/report.sh"
. "$here/../lib/ports.sh"

work=$(mktemp -d "/tmp/ucx-crypt-$group_name.XXXXXX")
failed=0
keep_logs=0
pids=()
group_namespaces=()

group_hosts() {
    group_namespaces+=("$@")
    netns_down "$@"
}

group_cleanup() {
    local pid
    for pid in "${pids[@]}" $(cat "$work/pids" 2>/dev/null); do
        stop_tree "$pid"
    done
    netns_down "${group_namespaces[@]}"
    if [ "$failed" -eq 0 ] && [ "$keep_logs" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then
        rm -rf "$work"
    else
        echo "$group_name: logs kept in $work"
    fi
}
trap group_cleanup EXIT

verdict() { # NAME OK(0|1) REASON
    if [ "$2" = 1 ]; then
        record "$1" pass
    elif [ -n "${REPORT_SKIP:-}" ] && [[ $1 =~ $REPORT_SKIP ]]; then
        keep_logs=1
        record "$1" fail "$3 (logs: $work)" # reported as skipped
    else
        failed=1
        record "$1" fail "$3 (logs: $work)"
    fi
}

group_finish() {
    write_report "$group_name" "$results/$group_name.xml"
    [ "$failed" -eq 0 ]
    exit
}
