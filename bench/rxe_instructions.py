#!/usr/bin/env python3
"""Helper of bench/rxe_instructions.sh: reads callgrind dumps, prints the table.

  rxe_instructions.py count OUT NAME WRS   one result line for OUT/NAME.{cg.1,cg.2,stats}
  rxe_instructions.py table RESULTS WRS    the table of every result line
  rxe_instructions.py objects FILE         per-object instruction counts of one dump

A dump's instructions are summed per object (ELF file) from its self-cost lines; the
window helper's own object (librxe_window.so) is left out. The provider's empty polls
inside the window (the helper's `empty` count) are subtracted per object with the cost
of one empty poll measured on the same CQ after the window (dump 2 / `calib` polls).
"""
import os
import sys

SHIM = "librxe_window"


def objects(path):
    """Self instructions (first event) per object name in one callgrind dump."""
    names = {}      # "(id)" -> name, for ob= and cob= (one namespace)
    per = {}
    ob = "?"
    skip_next = False
    npos = 1  # position columns before the costs: "line", or "instr line" (--dump-instr=yes)
    with open(path, errors="replace") as f:
        for line in f:
            if not line or line == "\n":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if skip_next:  # the inclusive cost line after calls=
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) > npos:
                    per[ob] = per.get(ob, 0) + int(parts[npos])
                continue
            if line.startswith("positions:"):
                npos = len(line.split()) - 1
            elif line.startswith("ob="):
                ob = _name(names, line[3:].strip())
            elif line.startswith("cob="):
                _name(names, line[4:].strip())
            elif line.startswith("calls="):
                skip_next = True
    return per


def _name(names, v):
    if v.startswith("("):
        i = v.index(")")
        key, rest = v[: i + 1], v[i + 1:].strip()
        if rest:
            names[key] = rest
        return names.get(key, key)
    return v


def category(ob, program):
    base = os.path.basename(ob)
    if SHIM in base:
        return None
    if base.startswith("libibverbs"):
        return "ibverbs"
    if base.startswith("librxe"):
        return "provider"
    if base.startswith("libc.so") or base.startswith("libc-"):
        return "libc"
    if base == os.path.basename(program) or base in ("raw_verbs_write", "ib_write_bw", "rdmakit-perf", "rdmakit_write"):
        return "program"
    return "other"


CATS = ["program", "ibverbs", "provider", "libc", "other"]


def read_stats(path):
    d = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if v.strip():
                d[k] = int(v)
    return d


def count(out, name, wrs):
    wrs = int(wrs)
    st = read_stats(os.path.join(out, name + ".stats"))
    problems = []
    if st.get("window_closed") != 1:
        problems.append("the window never closed")
    if st.get("wrs") != wrs or st.get("completed") != wrs:
        problems.append("posted %s and completed %s WRs, wanted %d" % (st.get("wrs"), st.get("completed"), wrs))
    if st.get("status_errors"):
        problems.append("%d failed completions" % st["status_errors"])
    if st.get("calib_nonempty"):
        problems.append("the calibration polls found completions")
    win = os.path.join(out, name + ".cg.1")
    cal = os.path.join(out, name + ".cg.2")
    for p in (win, cal):
        if not os.path.exists(p):
            problems.append("no callgrind dump " + p)
    if problems:
        print("rxe_instructions: %s: %s" % (name, "; ".join(problems)), file=sys.stderr)
        sys.exit(1)
    w, c = objects(win), objects(cal)
    by = {k: 0.0 for k in CATS}
    empty_cost = {k: 0.0 for k in CATS}
    for ob, v in w.items():
        k = category(ob, name)
        if k:
            by[k] += v
    for ob, v in c.items():
        k = category(ob, name)
        if k:
            empty_cost[k] += v / st["calib"]
    e1 = sum(empty_cost.values())
    for k in CATS:
        by[k] -= st["empty"] * empty_cost[k]
    prog, _, l = name.rpartition(".l")
    total = sum(by.values())
    print(" ".join([prog, l, "%.2f" % (total / wrs)] + ["%.2f" % (by[k] / wrs) for k in CATS] +
                   [str(st["posts"]), str(st["polls"]), str(st["cqes"]), str(st["empty"]), "%.1f" % e1]))


def table(results, wrs):
    rows = {}
    with open(results) as f:
        for line in f:
            p = line.split()
            if len(p) >= 13:
                rows[(p[0], p[1])] = p
    lists = sorted({l for _, l in rows}, key=int)
    label = {"raw": "raw", "perftest": "ib_write_bw", "rdmakit": "rdmakit-perf", "rkloop": "rdmakit_write",
             "rkprep": "rdmakit_write -P"}
    print("Instructions per 64 B RDMA WRITE (sender, user space, %s WRs per run, empty polls excluded)" % wrs)
    print("%-9s %8s %12s %13s %14s %17s %12s %20s %23s %13s" % (
        "post list", "raw", "ib_write_bw", "rdmakit-perf", "rdmakit_write", "rdmakit_write -P", "rdmakit/raw",
        "rdmakit_write/raw", "rdmakit_write -P/raw", "raw/perftest"))

    def v(p, l):
        r = rows.get((p, l))
        return float(r[2]) if r else None

    def fmt(x):
        return "%.1f" % x if x is not None else "FAIL"

    def ratio(a, b):
        return "%.3f" % (a / b) if a is not None and b else "-"

    for l in lists:
        r, pt, rk, rw, rp = v("raw", l), v("perftest", l), v("rdmakit", l), v("rkloop", l), v("rkprep", l)
        print("%-9s %8s %12s %13s %14s %17s %12s %20s %23s %13s" % (
            l, fmt(r), fmt(pt), fmt(rk), fmt(rw), fmt(rp), ratio(rk, r), ratio(rw, r), ratio(rp, r), ratio(r, pt)))
    print()
    print("Per WR by object, and the run's counts (posts = ibv_post_send calls, polls = polls with")
    print("completions, empty = the provider's empty polls subtracted at e instructions each):")
    print("%-17s %4s %9s %9s %9s %9s %9s %9s %7s %6s %6s %7s %6s" % (
        "program", "list", "total", "program", "ibverbs", "provider", "libc", "other", "posts", "polls", "cqes",
        "empty", "e"))
    for l in lists:
        for p in ("raw", "perftest", "rdmakit", "rkloop", "rkprep"):
            r = rows.get((p, l))
            if r:
                print("%-17s %4s %9s %9s %9s %9s %9s %9s %7s %6s %6s %7s %6s" % ((label[p], l) + tuple(r[2:13])))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "count" and len(sys.argv) == 5:
        count(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "table" and len(sys.argv) == 4:
        table(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "objects":
        for ob, v in sorted(objects(sys.argv[2]).items(), key=lambda x: -x[1]):
            print("%12d %s" % (v, ob))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
