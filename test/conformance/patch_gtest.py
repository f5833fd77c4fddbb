#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Add crypt to a copy of UCX's own gtest where the suite lists transports.

Usage: patch_gtest.py GTEST_DIR   (a copy of UCX's test/gtest, edited in place)

Three edits, each one a rule rather than a list of tests:
  - UCT: crypt beside tcp in the compile-time transport list and in the
    connection-manager list (uct_test.h);
  - UCP: an instantiation named crypt with UCX_TLS=crypt beside every one
    named tcp with UCX_TLS=tcp, wherever the suite writes one;
  - where a test asks has_transport("tcp") (a tcp-specific limit or skip),
    a crypt variant answers yes: crypt runs on tcp here and presents tcp's
    semantics (issue 28).
Every edit must find what it edits: a UCX release whose suite is written
differently fails here, loudly, not with 0 crypt tests that pass.
"""
import pathlib
import re
import sys


def edit(path, old, new, count=1):
    text = path.read_text()
    found = text.count(old)
    if found != count:
        sys.exit(f"patch_gtest: {path}: expected {count} of {old!r}, found {found}")
    path.write_text(text.replace(old, new))


def add_crypt_instantiations(path):
    """Put a crypt instantiation before each tcp one. The added line ends in
    a backslash, so it joins the statement that follows: inside a macro it
    stays in the macro, outside it is a statement of its own on the same
    logical line. Returns how many were added."""
    pattern = re.compile(
        r'^([ \t]*)UCP_INSTANTIATE_TEST_CASE_TLS(_GPU_AWARE)?\(\s*(\w+),'
        r'\s*(?:\\\s*)?tcp,\s*(?:\\\s*)?"tcp"\)', re.M)
    text = path.read_text()
    out, last, added = [], 0, 0
    for m in pattern.finditer(text):
        indent, gpu, case = m.group(1), m.group(2) or "", m.group(3)
        out.append(text[last:m.start()])
        out.append(f'{indent}UCP_INSTANTIATE_TEST_CASE_TLS{gpu}({case}, crypt, "crypt") \\\n')
        last = m.start()
        added += 1
    out.append(text[last:])
    path.write_text("".join(out))
    return added


def main():
    top = pathlib.Path(sys.argv[1])
    uct_h = top / "uct" / "uct_test.h"
    edit(uct_h, "#define UCT_TEST_CMS rdmacm, tcp\n",
         "#define UCT_TEST_CMS rdmacm, tcp, crypt\n")
    edit(uct_h, "    tcp,                     \\\n",
         "    tcp,                     \\\n    crypt,                   \\\n")
    edit(top / "uct" / "uct_test.cc",
         "    return (GetParam()->tl_name == tl_name);\n",
         "    return (GetParam()->tl_name == tl_name) ||\n"
         "           ((tl_name == \"tcp\") && (GetParam()->tl_name == \"crypt\"));\n")
    edit(top / "ucp" / "ucp_test.cc",
         "    return check_transport(tl_name, GetParam().transports);\n",
         "    return check_transport(tl_name, GetParam().transports) ||\n"
         "           ((tl_name == \"tcp\") &&\n"
         "            check_transport(\"crypt\", GetParam().transports));\n")
    total = 0
    for path in sorted((top / "ucp").glob("*.[ch]*")):
        total += add_crypt_instantiations(path)
    if total < 3:
        sys.exit(f"patch_gtest: only {total} UCP tcp instantiations found")
    print(f"patch_gtest: crypt added to the UCT lists and beside {total} UCP tcp instantiations")


if __name__ == "__main__":
    main()
