#!/usr/bin/env python3
"""The search after an outside edit, two ctxfs binaries over one index, alternated in one run.

Each trial starts a `ctxfs replay` process of A, then of B (the order flips every trial, so a machine
that gets busier or quieter favours neither) over the same tree and index. A process asks `--warm`
queries that are not timed (the first loads the index; the file watcher is built meanwhile), waits for
the watcher, asks once more, then `--edits` times: appends a comment line to one `.rs` file from outside
(the next of the trial's files, the same files and lines for A and B), waits `--pause` seconds (default 0.3:
the watcher's delay; longer, as an agent's next search comes after a user's save), and times one
search (fused, limit 10; four questions in turn).

Reported per binary: p50 and p95 over all its searches, each trial's median, memory after the trial,
and whether A and B answered every search alike (result ids left out: they move between processes).
Each process starts from the same tree (the edited files are put back after it) and makes the same
edits, so the answers must be the same unless the change was meant to change them.

Usage: python3 bench/outside_edit_ab.py --a OLD --b NEW --root TREE --data DIR [--data-b DIR] [--trials 4]
       [--edits 8] [--warm 2] [--pause 0.3] [--json FILE]
Note: it appends lines to files under TREE (a copy made for benchmarks, such as search_speed.py's).
Stdlib Python 3 only.
"""

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import log, report  # noqa: E402
from search_speed import Replay, pct  # noqa: E402

QUESTIONS = ["parse a duration from a string", "retry a failed request", "escape html entities", "read a config file"]


def trial(binary, root, data, files, warm, pause):
    r = Replay(binary, root, data, "")
    for n in range(warm):
        r.call("search", {"query": f"warm up the index {n}", "limit": 10})
    time.sleep(4)
    r.call("search", {"query": "warm up again", "limit": 10})
    times, answers = [], []
    originals = [path.read_bytes() for path in files]
    try:
        for n, path in enumerate(files):
            with open(path, "a") as f:
                f.write(f"\n// edited for a benchmark, {n}\n")
            time.sleep(pause)
            took, answer = r.call("search", {"query": QUESTIONS[n % len(QUESTIONS)], "limit": 10})
            if answer["is_error"]:
                sys.exit(answer["text"])
            times.append(took * 1000)
            answers.append(re.sub(r"\[#[0-9a-f]+\]", "[#]", answer["text"]))
        rss = r.rss_mb()[0]
    finally:
        r.close()
        # Each process starts from the same tree and makes the same edits, so both answer alike.
        for path, original in zip(files, originals):
            path.write_bytes(original)
    return times, answers, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--data-b", help="B's own index, when the change moves the index's format (default: --data)")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--edits", type=int, default=8)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between an edit and the search after it")
    ap.add_argument("--json")
    args = ap.parse_args()
    candidates = sorted(Path(args.root).rglob("lib.rs"))
    if len(candidates) < args.trials * args.edits:
        sys.exit(f"{args.root} has {len(candidates)} lib.rs files; {args.trials * args.edits} are needed")
    figures = {side: {"times": [], "trial_p50": [], "rss_mb": []} for side in ("a", "b")}
    same = total = 0
    for t in range(args.trials):
        files = candidates[t * args.edits:(t + 1) * args.edits]
        got = {}
        for side in ("a", "b") if t % 2 == 0 else ("b", "a"):
            data = args.data_b if side == "b" and args.data_b else args.data
            times, answers, rss = trial(getattr(args, side), args.root, data, files, args.warm, args.pause)
            got[side] = answers
            figures[side]["times"].extend(times)
            figures[side]["trial_p50"].append(statistics.median(times))
            figures[side]["rss_mb"].append(rss)
            log(f"trial {t} {side}: median {statistics.median(times):.0f} ms, RSS {rss:.0f} MiB")
        total += len(got["a"])
        same += sum(x == y for x, y in zip(got["a"], got["b"]))
    out = {"same_answers": same, "searches": total}
    for side in ("a", "b"):
        xs = figures[side]["times"]
        out[side] = {"binary": getattr(args, side), "p50_ms": pct([x / 1000 for x in xs], 0.5),
                     "p95_ms": pct([x / 1000 for x in xs], 0.95), **figures[side]}
    report(out, args.json)


if __name__ == "__main__":
    main()
