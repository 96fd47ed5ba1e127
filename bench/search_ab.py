#!/usr/bin/env python3
"""Query latency of two ctxfs binaries over one index, alternated in one run (before/after a change).

The binaries read one index, built once (with --index, by binary A), or, when a change moves the index's
format, each its own: `--data-b` names B's, and --index then builds both, reporting each build's time,
CPU, peak memory and size on disk (the first-index figures of the change). Each trial then runs
search_speed.py's query set in a fresh `ctxfs replay` process of A, then of B (the order flips every trial, so a machine that gets busier or quieter does not favour one). A process first
asks `--warm` queries that are not timed (the first loads the index into memory; the file watcher's first
build over a large tree runs meanwhile), then times every query of the set `--rounds` times.

Reported per binary: p50 and p95 over all its trials' queries, each trial's p50, p50 and p95 of each
process's first round (its words' postings not yet in memory), the mean time of each stage over the
timed queries from the index's debug log, the process's memory after them (resident, anonymous,
file-backed, peak), and whether both binaries answered every query with the same passages (they must,
unless the change was meant to change results; when not, which questions differ and the mean share of
A's passages B's answers hold).

Usage: python3 bench/search_ab.py --a OLD --b NEW --root TREE --data DIR [--data-b DIR] [--index] [--trials 3]
       [--rounds 2] [--warm 3] [--rankings fused] [--rankings-b KNOB] [--questions N] [--rg rg] [--json FILE]
Stdlib Python 3 only.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import log, report  # noqa: E402
import search_speed  # noqa: E402
from search_speed import QUERIES, Replay, index_tree, pct, rg_latency, rss_kb, timed_rounds  # noqa: E402
from search_candidates import questions  # noqa: E402


def trial(binary, root, data, rankings, rounds, warm):
    r = Replay(binary, root, data, rankings)
    for n in range(warm):
        r.call("search", {"query": f"warm up the index {n}", "limit": 10})
    times, first_round, lists = timed_rounds(r, rounds)
    memory = {field: (rss_kb(r.p.pid, field) or 0) / 1024 for field in ("VmRSS", "RssAnon", "RssFile", "VmHWM")}
    r.close()
    # Stages of the timed queries alone (the warm-up ones walk the tree and load the index).
    return times, first_round, lists, r.stages(skip=warm), memory


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the binary before the change")
    ap.add_argument("--b", required=True, help="the binary after the change")
    ap.add_argument("--root", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--data-b", help="B's own index, when the change moves the index's format (default: --data)")
    ap.add_argument("--index", action="store_true", help="index the tree with A first")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--rankings", default="fused")
    ap.add_argument("--rankings-b", help="B's CTXFS_SEARCH_RANKINGS, to compare one binary with itself under "
                    "another knob (for example `fused+together` against `fused`; default: --rankings)")
    ap.add_argument("--questions", type=int, default=0,
                    help="ask search_candidates.py's first N questions (the ten, then the held-out sets') "
                    "instead of the ten")
    ap.add_argument("--json")
    ap.add_argument("--rg", help="also time this ripgrep over the tree, the peer (rg -i -c per query word)")
    args = ap.parse_args()
    data = {"a": args.data, "b": args.data_b or args.data}
    asked = questions(args.questions) if args.questions else QUERIES
    # timed_rounds asks search_speed's list: it asks these instead.
    search_speed.QUERIES[:] = asked
    knob = {"a": args.rankings, "b": args.rankings_b or args.rankings}
    builds = {}
    if args.index:
        for side in ("a", "b") if args.data_b else ("a",):
            log(f"indexing with {side.upper()}")
            built = index_tree(getattr(args, side), args.root, data[side])
            built["index_mb"] = sum(f.stat().st_size for f in Path(data[side]).glob("index.db*")) / 1e6
            built.pop("rss_samples", None)
            builds[side] = built
            log(f"{built['summary']} ({built['wall_s']:.0f} s, {built['cpu_s']:.0f} s CPU, "
                f"peak {built['peak_rss_mb']:.0f} MB, index {built['index_mb']:.0f} MB)")
    runs = {"a": [], "b": []}
    firsts = {"a": [], "b": []}
    lists = {"a": {}, "b": {}}
    stages = {"a": [], "b": []}
    memories = {"a": [], "b": []}
    for t in range(args.trials):
        for side in (["a", "b"] if t % 2 == 0 else ["b", "a"]):
            times, first, got, st, memory = trial(getattr(args, side), args.root, data[side], knob[side], args.rounds, args.warm)
            runs[side].append(times)
            firsts[side].extend(first)
            lists[side].update(got)
            stages[side].append(st)
            memories[side].append(memory)
            log(f"trial {t + 1} {side.upper()}: p50 {pct(times, 0.5):.1f} ms, p95 {pct(times, 0.95):.1f} ms, "
                f"stages {', '.join(f'{k} {v:.1f}' for k, v in st.items())}, load {os.getloadavg()[0]:.2f}")
    res = {"load_at_end": os.getloadavg(), "same_passages": lists["a"] == lists["b"], "builds": builds}
    for side in ("a", "b"):
        every = [x for times in runs[side] for x in times]
        names = sorted({k for st in stages[side] for k in st})
        res[side] = {
            "binary": getattr(args, side),
            "rankings": knob[side],
            "p50_ms": pct(every, 0.5),
            "p95_ms": pct(every, 0.95),
            "trial_p50_ms": [pct(times, 0.5) for times in runs[side]],
            "first_round_p50_ms": pct(firsts[side], 0.5),
            "first_round_p95_ms": pct(firsts[side], 0.95),
            "stages_ms": {k: sum(st.get(k, 0.0) for st in stages[side]) / len(stages[side]) for k in names},
            # MiB after the timed queries, the largest of the trials: resident, of it anonymous (the
            # process's own) and file-backed (the index's pages mapped, shared with the OS's cache), peak.
            "memory_mib": {k: max(m[k] for m in memories[side]) for k in memories[side][0]},
        }
    if args.rg:
        res["rg_i_c"] = rg_latency(args.rg, args.root)
        log(f"peer rg -i -c: p50 {res['rg_i_c']['p50_ms']:.1f} ms, p95 {res['rg_i_c']['p95_ms']:.1f} ms")
    if not res["same_passages"]:
        differ = [q for q in asked if lists["a"].get(q) != lists["b"].get(q)]
        res["queries_answered_differently"] = differ
        # The mean share of A's passages (top 10) that B's answer holds too.
        kept = [len(set(lists["a"][q]) & set(lists["b"].get(q, []))) / len(lists["a"][q])
                for q in asked if lists["a"].get(q)]
        res["passages_of_a_kept_by_b"] = sum(kept) / max(1, len(kept))
    report(res, args.json)


if __name__ == "__main__":
    main()
