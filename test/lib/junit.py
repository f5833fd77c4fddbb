# SPDX-License-Identifier: BSD-3-Clause
"""JUnit XML for the Python test runners, in the shape test/lib/report.sh
writes and contrib/quickstart.sh adds up: the totals on <testsuites>,
result="skipped" on a skipped case, <failure> in a failed one."""

from xml.sax.saxutils import quoteattr


def write(path, suite, cases):
    """cases: (name, "pass"|"fail"|"skip", message)"""
    failures = sum(1 for _, verdict, _ in cases if verdict == "fail")
    with open(path, "w") as f:
        f.write(f'<testsuites tests="{len(cases)}" failures="{failures}" '
                f'errors="0" disabled="0">\n<testsuite name="{suite}">\n')
        for name, verdict, why in cases:
            attr = ' result="skipped"' if verdict == "skip" else ""
            f.write(f'<testcase classname="{suite}" name={quoteattr(name)}{attr}>')
            if verdict == "fail":
                f.write(f'<failure message={quoteattr(why)}/>')
            elif verdict == "skip":
                f.write(f'<skipped message={quoteattr(why)}/>')
            f.write("</testcase>\n")
        f.write("</testsuite>\n</testsuites>\n")
