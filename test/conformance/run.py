#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Run UCX's own gtest on crypt next to tcp and judge crypt by tcp.

Usage:
  run.py GTEST PREFIX RESULTS SUITES [REPORT]
    GTEST    the binary test/conformance/build.sh made
    PREFIX   ucx-crypt's install prefix (PREFIX/bin/ucx-crypt-run loads crypt)
    RESULTS  where the logs, the JUnit report and the table go
    SUITES   a regular expression over test suite names (without the
             transport), e.g. 'uct_|test_uct_' or 'test_ucp_tag_match$'
    REPORT   the report's name (default: conformance)

Each suite runs twice, in processes of its own: as crypt/SUITE through
ucx-crypt-run with UCX_CRYPT_TLS=tcp, then as tcp/SUITE without the plugin
(the control), both with UCX_HANDLE_ERRORS=bt; with CONFORMANCE_CONTROL=
failed the control runs only the tests crypt did not pass (what it judges). A test that crashes its
process or runs past the per-test limit fails; the rest of its suite is run
again in a fresh process, so one abort hides nothing.

The verdict per test, crypt judged by tcp:
  crypt passed                             pass
  crypt skipped, failed, crashed, hung
      or missing, tcp passed               FAIL, unless excluded.txt lists
                                           it with a reason (then skipped)
  neither passed                           skipped (nothing to compare to)
A run with 0 crypt tests fails (without crypt in the suite's lists UCX
prints "tcp is not available", runs nothing and says PASSED); a suite of
tcp's own (test_uct_tcp) is reported as skipped.

Environment: CONFORMANCE_TEST_TIMEOUT (seconds a test may run, 120),
CONFORMANCE_REPEAT (run each suite N times, 1; a test passes only if it
passed every time), CONFORMANCE_CONTROL (all, the default, or failed),
CONFORMANCE_EXCLUDED (the exclusion file),
CONFORMANCE_OMIT (':'-separated patterns of tests not run in this set, for
time; reported as skipped).
"""
import fnmatch
import os
import re
import selectors
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))
import junit  # noqa: E402 (test/lib, beside report.sh)

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r'^\[ *(RUN|OK|FAILED|SKIP) *\] ([^\s,]+)?')


def list_tests(cmd, env, tl):
    """Full names tl/Suite.test/N, in the order gtest runs them."""
    out = subprocess.run(cmd + ["--gtest_list_tests", f"--gtest_filter={tl}/*"],
                         env=env, capture_output=True, text=True, timeout=300)
    tests, suite = [], None
    for line in out.stdout.splitlines():
        if not line or line.startswith("["):
            continue
        if not line.startswith(" "):
            suite = line.strip()
        elif suite:
            tests.append(suite + line.split()[0])
    return tests


def run_tests(cmd, env, tests, log, limit):
    """Run the given tests in one process; results by name. Returns
    (results, rest): rest are the tests that did not run because the
    process died or was killed."""
    results, current = {}, None
    proc = subprocess.Popen(cmd + ["--gtest_filter=" + ":".join(tests)],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    started, skip, buf, hung = time.monotonic(), False, b"", False
    while True:
        if current and time.monotonic() - started > limit:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            break
        if not sel.select(timeout=1.0):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        log.write(chunk)
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            m = LINE.match(raw.decode("utf-8", "replace"))
            if not m:
                continue
            kind, name = m.group(1), m.group(2)
            if kind == "RUN":
                current, skip, started = name, False, time.monotonic()
            elif kind == "SKIP":
                skip = True
            elif kind in ("OK", "FAILED") and name == current:
                results[name] = "skipped" if (kind == "OK" and skip) else \
                    ("passed" if kind == "OK" else "failed")
                current = None
    proc.wait()
    if current:
        why = f"hung (killed after {limit} s)" if hung else \
              f"crashed (exit status {proc.returncode})"
        results[current] = why
        log.write(f"\n[conformance] {current}: {why}\n".encode())
    rest = [t for t in tests if t not in results]
    return results, rest


def run_suite(cmd, env, tests, log, limit):
    results, todo = {}, list(tests)
    for _ in range(len(tests) + 1):
        if not todo:
            break
        got, todo = run_tests(cmd, env, todo, log, limit)
        results.update(got)
        if not got:                      # nothing ran at all: do not loop
            for t in todo:
                results[t] = "not run"
            break
    return results


def worse(old, new):
    """Over repeated runs a test keeps its worst result."""
    if old is None or (old in ("passed", "skipped") and
                       new not in ("passed", "skipped")):
        return new
    return old


def load_excluded(path):
    rules = []
    if not os.path.exists(path):
        return rules
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition(" ")
            reason = reason.strip().lstrip("#").strip()
            if not reason:
                sys.exit(f"conformance: {path}: '{pattern}' has no reason")
            rules.append((pattern, reason))
    return rules


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    gtest, prefix, results_dir, suites = sys.argv[1:5]
    report = sys.argv[5] if len(sys.argv) > 5 else "conformance"
    limit = int(os.environ.get("CONFORMANCE_TEST_TIMEOUT", "120"))
    control = os.environ.get("CONFORMANCE_CONTROL", "all")
    if control not in ("all", "failed"):
        sys.exit(f"conformance: CONFORMANCE_CONTROL is all or failed, not '{control}'")
    repeat = int(os.environ.get("CONFORMANCE_REPEAT", "1"))
    excluded = load_excluded(os.environ.get(
        "CONFORMANCE_EXCLUDED", os.path.join(HERE, "excluded.txt")))
    os.makedirs(results_dir, exist_ok=True)
    logdir = os.path.join(results_dir, report)
    os.makedirs(logdir, exist_ok=True)

    base = dict(os.environ, UCX_HANDLE_ERRORS="bt")
    for k in ("LD_PRELOAD", "UCX_TLS", "UCX_CRYPT_TLS", "UCX_NET_DEVICES"):
        base.pop(k, None)
    key = os.path.join(logdir, "job.key")
    if not os.path.exists(key):
        subprocess.run([os.path.join(prefix, "bin", "ucx-crypt-keygen"), key],
                       check=True, capture_output=True)
    # (unbuffered, as UCX's own "make test" runs it: a crash must not
    # take the lines that say which test was running)
    unbuffered = ["stdbuf", "-o0", "-e0"]
    runs = {
        "tcp": (unbuffered + [gtest], base),
        "crypt": ([os.path.join(prefix, "bin", "ucx-crypt-run")] + unbuffered + [gtest],
                  dict(base, UCX_CRYPT_TLS="tcp", UCX_CRYPT_KEY_FILE=key)),
    }
    listed = {tl: list_tests(cmd, env, tl) for tl, (cmd, env) in runs.items()}
    pick = re.compile(suites)

    def suite_of(name):
        return name.split("/", 1)[1].split(".", 1)[0]

    omit = [p for p in os.environ.get("CONFORMANCE_OMIT", "").split(":") if p]

    def omitted(name):
        return any(fnmatch.fnmatchcase(name.split("/", 1)[1], p) for p in omit)

    chosen = sorted({suite_of(t) for t in listed["tcp"] if pick.search(suite_of(t))})
    if not chosen:
        sys.exit(f"conformance: no tcp suite matches '{suites}'")

    outcome = {}                           # (tl, test without tl) -> result

    def run(tl, tests, suite):
        cmd, env = runs[tl]
        t0 = time.monotonic()
        with open(os.path.join(logdir, f"{tl}.{suite}.log"), "ab") as log:
            for _ in range(repeat):
                for name, res in run_suite(cmd, env, tests, log, limit).items():
                    key_ = (tl, name.split("/", 1)[1])
                    outcome[key_] = worse(outcome.get(key_), res)
        n_pass = sum(1 for t in tests if outcome.get((tl, t.split("/", 1)[1])) == "passed")
        print(f"  {tl:5} {suite:45} {n_pass:4}/{len(tests):<4} passed "
              f"({time.monotonic() - t0:.0f} s)", flush=True)

    for suite in chosen:
        mine = {tl: [t for t in listed[tl] if suite_of(t) == suite and not omitted(t)]
                for tl in runs}
        run("crypt", mine["crypt"], suite)
        if control == "failed" and not mine["crypt"]:
            continue                       # (tcp's own suite: nothing to judge)
        if control == "failed":
            # the control judges what crypt did not pass: those tests only
            mine["tcp"] = [t for t in mine["tcp"] if outcome.get(
                ("crypt", t.split("/", 1)[1])) != "passed"]
        if mine["tcp"]:
            run("tcp", mine["tcp"], suite)

    cases, counts = [], {"pass": 0, "fail": 0, "excluded": 0, "no control": 0,
                         "not run": 0}
    for name in sorted({t.split("/", 1)[1] for t in listed["tcp"]
                        if suite_of(t) in chosen and omitted(t)}):
        cases.append((name, "skip", "omitted from this set for time "
                      "(contrib/quickstart.sh conformance runs it)"))
        counts["not run"] += 1
    for suite in chosen:
        names = sorted({n for (tl, n) in outcome if n.split(".", 1)[0] == suite})
        crypt_ran = [n for n in names if ("crypt", n) in outcome]
        if not crypt_ran:
            # a suite of tcp's own (test_uct_tcp) has no crypt variant
            cases.append((f"{suite}.(crypt variant)", "skip",
                          "the suite instantiates no crypt variant"))
            counts["not run"] += 1
            continue
        for n in names:
            tcp, crypt = outcome.get(("tcp", n), "missing"), outcome.get(("crypt", n), "missing")
            if crypt == "passed":
                cases.append((n, "pass", "crypt passed"))
                counts["pass"] += 1
            elif tcp != "passed":
                cases.append((n, "skip", f"crypt {crypt}, tcp {tcp}: no control"))
                counts["no control"] += 1
            else:
                rule = next((r for p, r in excluded if fnmatch.fnmatchcase(n, p)), None)
                if rule:
                    cases.append((n, "skip", f"excluded: {rule} (crypt {crypt})"))
                    counts["excluded"] += 1
                else:
                    cases.append((n, "fail", f"tcp passed, crypt {crypt}; log: "
                                  f"{logdir}/crypt.{n.split('.', 1)[0]}.log"))
                    counts["fail"] += 1

    tcp_passed = sum(1 for (tl, _), r in outcome.items() if tl == "tcp" and r == "passed")
    crypt_passed = sum(1 for (tl, _), r in outcome.items() if tl == "crypt" and r == "passed")
    if not any(tl == "crypt" for (tl, _) in outcome):
        # without crypt in the suite's lists UCX prints "tcp is not
        # available", runs nothing and says PASSED: that is a failure here
        cases.append(("(crypt variants)", "fail",
                      "0 crypt tests ran: is crypt in the suite's lists "
                      "(patch_gtest.py) and does ucx-crypt-run load it?"))
        counts["fail"] += 1
    junit.write(os.path.join(results_dir, f"{report}.xml"), report,
                [("crypt/" + name, verdict,
                  (name + ": " + why) if verdict == "fail" else why)
                 for name, verdict, why in cases])
    for name, verdict, why in cases:
        if verdict == "fail":
            print(f"  FAIL {name}: {why}")
    print(f"conformance ({report}): tcp passed {tcp_passed} / crypt passed "
          f"{crypt_passed} / excluded {counts['excluded']}; "
          f"{counts['pass']} pass, {counts['fail']} fail, "
          f"{counts['no control']} without a tcp control, "
          f"{counts['not run']} not run on crypt (omitted, or no crypt variant)")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
