#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""MPICH's own test suite on crypt, judged by plain UCX tcp.

    run.py MPICH_SRC_TREE PREFIX WORK RESULTS_XML DIR [DIR...]

Each DIR (under MPICH_SRC_TREE/test/mpi, e.g. rma) is built as MPICH's
test harness builds it: the programs its testlist.in names, from the
sources and flags its Makefile.am gives them, linked with the suite's own
util/ files. Every listed run with at most MPICH_SUITE_MAX_NP ranks (2)
runs twice on this host with mpiexec.mpich and UCX's default settings:
UCX_TLS=tcp (the control), then crypt through ucx-crypt-run. A run passes
as MPICH's runtests judges it: exit status 0 and " No Errors" printed.

Verdict per run: the control passed and crypt did not is a failure; the
control failed (or the program did not build here) is skipped with the
reason, as there is nothing to compare. A run of 0 crypt passes fails.
"""

import os
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))
import junit  # noqa: E402 (test/lib, beside report.sh)

MAX_NP = int(os.environ.get("MPICH_SUITE_MAX_NP", "2"))
# Each run gets this long; a test whose testlist.in line asks for longer
# (MPICH's harness: timeLimit=S) is reported skipped with the reason
TIME_LIMIT = int(os.environ.get("MPICH_SUITE_TIME_LIMIT", "30"))

# What the suite's configure finds on Debian 12 with MPICH 4.0.2, for the
# headers util/ and the tests include (configure itself would need the
# whole source tree and minutes).
MPITESTCONF = """\
#define HAVE_STDARG_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_MPI_INIT_THREAD 1
#define HAVE_UNISTD_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_STDIO_H 1
#define HAVE_STDINT_H 1
#define HAVE_INTTYPES_H 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_LONG 1
#define HAVE_MPI_INTEGER16 1
#define STDC_HEADERS 1
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
#define USE_STRICT_MPI 0
"""
UTIL = ("mtest.c", "mtest_common.c", "mtest_single.c")


def makefile_vars(path):
    """Makefile.am's assignments, continuation lines joined."""
    text = open(path).read().replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_]+)\s*\+?=\s*(.*)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), "") + " " + m.group(2)
    return out


def testlist(path):
    """(name, np, args, time limit) for each run testlist.in lists."""
    runs = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("@"):
            continue                 # (@...@: configure's optional lines)
        words = line.split()
        if len(words) < 2 or not words[1].isdigit():
            continue
        args, limit, skip = [], None, None
        for w in words[2:]:
            key, _, value = w.partition("=")
            if key == "arg":
                args.append(value)
            elif key == "timeLimit":
                limit = int(value)
            elif key in ("env", "mpiexecarg", "xfail", "mpiversion",
                         "resultTest", "strict", "mem"):
                skip = "testlist option %s" % key
        runs.append((words[0], int(words[1]), args, limit, skip))
    return runs


def build(src, work, dir_, name, mk, log):
    """The program `name` of test/mpi/dir_, or the reason it is not."""
    exe = os.path.join(work, dir_, name)
    if os.path.exists(exe):
        return exe, None
    ldadd = mk.get(name + "_LDADD", "")
    if "dtpools" in ldadd or "mtest_dtp" in ldadd:
        return None, "needs MPICH's dtpools library (not built here)"
    sources = mk.get(name + "_SOURCES", "").split() or [name + ".c"]
    flags = mk.get(name + "_CPPFLAGS", "").replace("$(AM_CPPFLAGS)", "").split()
    tdir = os.path.join(src, "test", "mpi", dir_)
    cmd = (["mpicc.mpich", "-O1", "-w", "-I" + os.path.join(work, "include"),
            "-I" + os.path.join(src, "test", "mpi", "include"), "-I" + tdir]
           + flags + [os.path.join(tdir, s) for s in sources]
           + [os.path.join(work, "util", u[:-2] + ".o") for u in UTIL]
           + ["-o", exe, "-lm"])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    log.write("$ %s\n%s" % (" ".join(cmd), r.stdout))
    if r.returncode != 0:
        return None, "does not compile here (see %s)" % log.name
    return exe, None


def build_util(src, work):
    os.makedirs(os.path.join(work, "include"), exist_ok=True)
    os.makedirs(os.path.join(work, "util"), exist_ok=True)
    with open(os.path.join(work, "include", "mpitestconf.h"), "w") as f:
        f.write(MPITESTCONF)
    for u in UTIL:
        subprocess.run(["mpicc.mpich", "-O1", "-w", "-c",
                        "-I" + os.path.join(work, "include"),
                        "-I" + os.path.join(src, "test", "mpi", "include"),
                        os.path.join(src, "test", "mpi", "util", u),
                        "-o", os.path.join(work, "util", u[:-2] + ".o")],
                       check=True)


def run_once(variant, prefix, key, exe, np_, args, limit, log_path):
    """0 when MPICH's harness would pass it; else a short reason."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("UCX_") or k == "LD_PRELOAD":
            del env[k]
    env["UCX_HANDLE_ERRORS"] = "bt"
    cmd = ["mpiexec.mpich", "-n", str(np_), exe] + args
    if variant == "tcp":
        env["UCX_TLS"] = "tcp"
    else:
        env["UCX_TLS"] = "crypt"
        env["UCX_CRYPT_TLS"] = "tcp"
        env["UCX_CRYPT_KEY_FILE"] = key
        cmd = [os.path.join(prefix, "bin", "ucx-crypt-run")] + cmd
    start = time.time()
    with open(log_path, "w") as log:
        log.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        log.flush()
        # (its own session, so that a hung run's ranks go with it)
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            return "hung, killed after %d s" % limit, time.time() - start
    out = open(log_path, errors="replace").read()
    if rc != 0:
        return "exit status %d" % rc, time.time() - start
    if not re.search(r"^\s*No Errors\s*$", out, re.M):
        return "no 'No Errors' line", time.time() - start
    return None, time.time() - start


def write_report(xml, cases):
    os.makedirs(os.path.dirname(os.path.abspath(xml)), exist_ok=True)
    junit.write(xml, "mpich_suite", cases)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    src, prefix, work, xml = sys.argv[1:5]
    dirs = sys.argv[5:]
    work = os.path.abspath(work)
    if not src or not os.path.isdir(os.path.join(src, "test", "mpi")):
        write_report(xml, [("mpich_suite_fetched", "fail",
                            "no MPICH test suite at '%s' (contrib/fetch-deb-src.sh "
                            "mpich test/mpi/rma/testlist.in DEST)" % src)])
        return 1
    logs = os.path.join(work, "logs")
    os.makedirs(logs, exist_ok=True)
    key = os.path.join(work, "job.key")
    if not os.path.exists(key):
        subprocess.run([os.path.join(prefix, "bin", "ucx-crypt-keygen"), key],
                       check=True, stdout=subprocess.DEVNULL)
    build_util(src, work)

    cases = []   # (name, outcome, reason)
    counts = {"tcp": 0, "crypt": 0}
    for dir_ in dirs:
        tdir = os.path.join(src, "test", "mpi", dir_)
        mk = makefile_vars(os.path.join(tdir, "Makefile.am"))
        os.makedirs(os.path.join(work, dir_), exist_ok=True)
        seen = {}
        with open(os.path.join(logs, dir_ + ".build.log"), "w") as blog:
            for name, np_, args, limit, skip in testlist(os.path.join(tdir, "testlist.in")):
                if np_ > MAX_NP:
                    continue
                seen[name] = seen.get(name, 0) + 1
                case = "%s.%s" % (dir_, name) + \
                       ("" if seen[name] == 1 else ".%d" % seen[name])
                if skip is None and limit is not None and limit > TIME_LIMIT:
                    skip = "its time limit (%d s) is past this run's (%d s)" % \
                           (limit, TIME_LIMIT)
                exe = None
                if skip is None:
                    exe, skip = build(src, work, dir_, name, mk, blog)
                if skip is not None:
                    cases.append((case, "skip", skip))
                    print("SKIP %s: %s" % (case, skip), flush=True)
                    continue
                res = {}
                for variant in ("tcp", "crypt"):
                    log = os.path.join(logs, "%s.%s.log" % (variant, case))
                    why, secs = run_once(variant, prefix, key, exe, np_, args,
                                         TIME_LIMIT, log)
                    res[variant] = (why, secs, log)
                    if why is None:
                        counts[variant] += 1
                tcp_why, tcp_s, _ = res["tcp"]
                crypt_why, crypt_s, crypt_log = res["crypt"]
                if tcp_why is not None:
                    reason = "fails on tcp too (%s); crypt: %s" % \
                             (tcp_why, crypt_why or "passed")
                    cases.append((case, "skip", reason))
                    print("SKIP %s: %s" % (case, reason), flush=True)
                elif crypt_why is not None:
                    reason = "tcp passed in %.1f s, crypt: %s (%s)" % \
                             (tcp_s, crypt_why, crypt_log)
                    cases.append((case, "fail", reason))
                    print("FAIL %s: %s" % (case, reason), flush=True)
                else:
                    cases.append((case, "pass", ""))
                    print("PASS %s (tcp %.1f s, crypt %.1f s)" % (case, tcp_s, crypt_s),
                          flush=True)

    failures = sum(1 for c in cases if c[1] == "fail")
    if counts["crypt"] == 0:
        cases.append(("mpich_suite_ran_on_crypt", "fail", "0 runs passed on crypt"))
        failures += 1
    write_report(xml, cases)
    print("MPICH suite (%s): tcp passed %d / crypt passed %d; %d pass, %d fail, "
          "%d skipped" % (" ".join(dirs), counts["tcp"], counts["crypt"],
                          sum(1 for c in cases if c[1] == "pass"), failures,
                          sum(1 for c in cases if c[1] == "skip")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
