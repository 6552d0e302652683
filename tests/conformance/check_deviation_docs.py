#!/usr/bin/env python3
"""The deviation table in the docs lists exactly the scenarios deviations.hpp has rows for.

usage: check_deviation_docs.py tests/conformance/deviations.hpp docs/semantics.md

Every scenario id of deviations.hpp must have a `spec` and an `rxe` row there and one
line in semantics.md's table (section 13), and the table must name no other id: the
table a reader sees is the table the suite checks. Exit 1 naming each difference.
"""
import re
import sys


def main(header_path: str, doc_path: str) -> int:
    header = open(header_path, encoding="utf-8").read()
    ids = dict(re.findall(r'inline constexpr std::string_view (\w+) = "([^"]+)";', header))
    rows = re.findall(r'deviation_row\{ids::(\w+), "(\w+)"', header)
    problems = []
    for name, profile in rows:
        if name not in ids:
            problems.append(f"deviations.hpp: a row names ids::{name}, which is not declared")
    for name, scenario in ids.items():
        have = {p for n, p in rows if n == name}
        for want in ("spec", "rxe"):
            if want not in have:
                problems.append(f"deviations.hpp: {scenario} has no '{want}' row")
    doc = open(doc_path, encoding="utf-8").read()
    start = doc.find('<a id="rxe-differs">')
    if start < 0:
        problems.append(f"{doc_path}: no section with the anchor rxe-differs")
        documented = set()
    else:
        documented = set(re.findall(r"^\| `([\w.]+)` \|", doc[start:], re.M))
    declared = set(ids.values())
    for s in sorted(declared - documented):
        problems.append(f"{doc_path}: the deviation table has no line for {s} (add one to section 13)")
    for s in sorted(documented - declared):
        problems.append(f"{doc_path}: the deviation table lists {s}, which deviations.hpp does not have")
    for p in problems:
        print(p)
    if not problems:
        print(f"{len(declared)} scenarios, each with a spec and an rxe row, all in {doc_path}")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
