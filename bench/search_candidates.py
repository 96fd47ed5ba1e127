#!/usr/bin/env python3
"""How many passages the meaning ranking should score exactly: top-10 overlap with exact scoring, and latency.

The meaning ranking compares the sign bits of every visible passage's vector with the query's, then
reads the `i8` vectors of the N that agree most from the index and scores those exactly (N is 2,000
by default). This asks one index the same questions with N = each of --counts and with every vector
scored exactly (`exact`, seconds a query at a million passages), for the meaning ranking alone and for
the fused search, and reports per N: the mean share of the exact top 10 that N's top 10 holds
(overlap@10, passages as `path:first-last`), how many questions kept their whole top 10, and query
p50/p95 (each N in its own `ctxfs replay` process; `--rounds` timed rounds after --warm untimed queries).

Questions: search_speed.py's ten, then the held-out sets' questions (bench/search_queries/heldout, both
halves, in file order) up to --questions in all.

`--knobs` runs each N once per knob added to the rankings (`--knobs ,every-code`: as it is, and with
every passage's sign bits scanned where they are in lists), rows named `N` or `N+knob`.

Usage: python3 bench/search_candidates.py --ctxfs BIN --root TREE --data DIR [--counts 2000,1000,500]
       [--modes meaning,fused] [--knobs ,every-code] [--questions 40] [--rounds 2] [--warm 3] [--json FILE]
Stdlib Python 3 only.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import log, report  # noqa: E402
from search_speed import QUERIES, PASSAGE, Replay, pct  # noqa: E402

HELDOUT = Path(__file__).resolve().parent / "search_queries" / "heldout"


def questions(count):
    out = list(QUERIES)
    for path in sorted(HELDOUT.glob("*.json")):
        out.extend(q["query"] for q in json.loads(path.read_text())["questions"])
    return out[:count]


def ask(binary, root, data, rankings, asked, rounds, warm):
    """Each question's top 10 passages (first round) and every timed answer's seconds."""
    r = Replay(binary, root, data, rankings)
    try:
        for n in range(warm):
            r.call("search", {"query": f"warm up the index {n}", "limit": 10})
        tops, times = {}, []
        for round_ in range(rounds):
            for q in asked:
                t, answer = r.call("search", {"query": q, "limit": 10})
                if answer["is_error"]:
                    sys.exit(f"{rankings}: {answer['text']}")
                times.append(t)
                if round_ == 0:
                    tops[q] = [m.group(0) for m in PASSAGE.finditer(answer["text"])]
        return tops, times
    finally:
        r.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctxfs", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--counts", default="2000,1000,500")
    ap.add_argument("--modes", default="meaning,fused")
    ap.add_argument("--knobs", default="", help="comma-separated knobs each N is also run with (empty: as it is)")
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    asked = questions(args.questions)
    counts = [int(c) for c in args.counts.split(",")]
    res = {"questions": len(asked), "modes": {}}
    for mode in args.modes.split(","):
        log(f"{mode}: every vector scored exactly")
        exact, _ = ask(args.ctxfs, args.root, args.data, f"{mode}+exact", asked, 1, 1)
        if not all(exact[q] for q in asked):
            sys.exit(f"{mode}+exact answered no passage for some question: is the index built with vectors?")
        rows = {}
        for count, knob in [(c, k) for c in counts for k in args.knobs.split(",")]:
            name = f"{count}+{knob}" if knob else str(count)
            rankings = f"{mode}+candidates={count}" + (f"+{knob}" if knob else "")
            tops, times = ask(args.ctxfs, args.root, args.data, rankings, asked, args.rounds, args.warm)
            shares = [len(set(tops[q]) & set(exact[q])) / len(exact[q]) for q in asked]
            rows[name] = {
                "overlap_at_10": sum(shares) / len(shares),
                "whole_top_10_kept": sum(1 for q in asked if tops[q] == exact[q]),
                "p50_ms": pct(times, 0.5),
                "p95_ms": pct(times, 0.95),
            }
            log(f"{mode} N={name}: {rows[name]}")
        res["modes"][mode] = rows
    report(res, args.json)


if __name__ == "__main__":
    main()
