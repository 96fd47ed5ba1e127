#!/usr/bin/env python3
"""Indexing between calls, as a user's MCP session sees it: two ctxfs binaries, alternated in one run.

Two scenarios, each a fresh `ctxfs mcp` process driven over stdio (newline-delimited JSON-RPC):

* `left`: a fresh data directory, one search, then one every `--period` seconds (an agent reading
  between searches) until a search says no file is left unindexed, or `--most` searches. Meant for a
  slow embedder (`--embedder minilm`) over a tree it cannot index in a search's 3 s. Reported per
  binary: each search's time and the files it said were left, and when the tree was whole.
* `resume`: as `left`, but a first process is killed (`kill -9`) `--first` seconds after its first
  search, while it indexes in the background; the report is the second process's searches, over the
  index the first left (a session's start readying it and searches arriving meanwhile).
* `found`: a fresh data directory, one search, `--period` seconds of nothing (an agent reading),
  then every question of a held-out set (`--set`, bench/search_queries/heldout/) asked with `limit`
  10: what a user finds while a slow embedder is still indexing. Reported: the files the first
  search and the last said were left, and recall@10 / MRR@10 by kind of question (the set's `words`
  questions name identifiers, its `para` ones paraphrase).
* `first`: every question of a set (`--set`) asked as a session's very first search, each in a fresh
  process over a fresh data directory, with `limit` 10: what an agent's first search finds while a
  slow embedder has barely begun. Reported: recall@10 / MRR@10 by kind of question, the searches'
  median time and the files they said were left (median).
* `start`: an index an earlier process left (`--data`, built beforehand with `ctxfs index`), the
  session initialised, `--wait` seconds of nothing, then three different questions. Reported: each
  search's time and the process's resident memory before the first search and after the third.

Usage: python3 bench/background_index.py left --a OLD --b NEW --root TREE [--embedder minilm] [--period 30] [--most 200]
       python3 bench/background_index.py resume --a OLD --b NEW --root TREE [--first 6] [--period 3] [--trials 3]
       python3 bench/background_index.py found --a OLD --b NEW --root TREE --set SET.json [--period 10]
       python3 bench/background_index.py first --a OLD --b NEW --root TREE --set SET.json
       python3 bench/background_index.py start --a OLD --b NEW --root TREE --data DIR [--wait 20] [--trials 2]
Every process runs in its own process group and is ended with it. Stdlib Python 3 only.
"""

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Mcp, log  # noqa: E402

QUESTIONS = [
    "how does the scheduler wake a parked worker thread",
    "parse a toml table into a map",
    "retry a failed http request with backoff",
]
LEFT = re.compile(r"\[(\d+) new or changed files?")
PASSAGE = re.compile(r"^(/[^\n]*):(\d+)-(\d+)$", re.M)


def server(binary, root, data, log_path, *extra):
    """A `ctxfs mcp` over `root` with its index in `data`, logging at info to `log_path`."""
    return Mcp(binary, root, data, *extra, env={"CTXFS_LOG": "info"}, stderr=log_path)


def search(server, query, limit=5):
    """The answer's text and how long it took."""
    started = time.perf_counter()
    text, _ = server.call("search", {"query": query, "limit": limit})
    return text, time.perf_counter() - started


def rss_mb(server):
    for line in open(f"/proc/{server.proc.pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


def left(binary, args, work):
    data = Path(tempfile.mkdtemp(dir=work, prefix="data-"))
    extra = ("--embedder", args.embedder)
    if args.scenario == "resume":
        first = server(binary, args.root, data, data.with_suffix(".first.log"), *extra)
        search(first, QUESTIONS[0], limit=3)
        time.sleep(args.first)
        first.kill()
    session = server(binary, args.root, data, data.with_suffix(".log"), *extra)
    started, rows = time.perf_counter(), []
    try:
        for _ in range(args.most):
            text, took = search(session, QUESTIONS[0], limit=3)
            match = LEFT.search(text)
            rows.append((round(time.perf_counter() - started - took, 1), round(took, 2), int(match.group(1)) if match else 0))
            if not match:
                break
            time.sleep(args.period)
    finally:
        session.kill()
        shutil.rmtree(data, ignore_errors=True)
    whole = round(rows[-1][0] + rows[-1][1], 1) if rows[-1][2] == 0 else None
    return {"searches (s after start, s taken, files left)": rows, "whole after s": whole}


def files_of(text, root):
    """The answer's files, in order, each once, relative to the tree (as a question set names them)."""
    files = []
    for m in PASSAGE.finditer(text):
        path = m.group(1)
        rel = path[len(root) + 1:] if path.startswith(root + "/") else path.lstrip("/")
        if rel not in files:
            files.append(rel)
    return files


def found(binary, args, work):
    data = Path(tempfile.mkdtemp(dir=work, prefix="data-"))
    questions = json.loads(Path(args.set).read_text())["questions"]
    root = str(Path(args.root).resolve())
    session = server(binary, args.root, data, data.with_suffix(".log"), "--embedder", args.embedder)
    try:
        text, _ = search(session, QUESTIONS[0], limit=3)
        first = LEFT.search(text)
        time.sleep(args.period)
        by_kind, last_left, asked = {}, None, time.perf_counter()
        for q in questions:
            text, _ = search(session, q["query"], limit=10)
            match = LEFT.search(text)
            last_left = int(match.group(1)) if match else 0
            files = files_of(text, root)
            rank = next((i for i, f in enumerate(files, 1) if f in q["files"]), None)
            by_kind.setdefault(q["kind"], []).append(rank)
    finally:
        session.kill()
        shutil.rmtree(data, ignore_errors=True)
    return {"left after the first search": int(first.group(1)) if first else 0,
            "left at the last question": last_left, "questions took s": round(time.perf_counter() - asked, 1),
            **recall_and_mrr(by_kind)}


def first(binary, args, work):
    questions = json.loads(Path(args.set).read_text())["questions"]
    root = str(Path(args.root).resolve())
    by_kind, times, lefts = {}, [], []
    for q in questions:
        data = Path(tempfile.mkdtemp(dir=work, prefix="data-"))
        session = server(binary, args.root, data, data.with_suffix(".log"), "--embedder", args.embedder)
        try:
            text, took = search(session, q["query"], limit=10)
        finally:
            session.kill()
            shutil.rmtree(data, ignore_errors=True)
        match = LEFT.search(text)
        lefts.append(int(match.group(1)) if match else 0)
        times.append(took)
        rank = next((i for i, f in enumerate(files_of(text, root), 1) if f in q["files"]), None)
        by_kind.setdefault(q["kind"], []).append(rank)
    return {"search s (median)": round(statistics.median(times), 2), "files left (median)": statistics.median(lefts),
            **recall_and_mrr(by_kind)}


def recall_and_mrr(by_kind):
    """Recall@10 and MRR@10 for each kind of question, from the answer file's rank (or `None`)."""
    return {kind: {"R@10": round(sum(r is not None and r <= 10 for r in ranks) / len(ranks), 3),
                   "MRR@10": round(sum(1 / r for r in ranks if r and r <= 10) / len(ranks), 3), "questions": len(ranks)}
            for kind, ranks in sorted(by_kind.items())}


def start(binary, args, work):
    session = server(binary, args.root, args.data, Path(work) / f"{Path(binary).name}.log")
    try:
        time.sleep(args.wait)
        before = rss_mb(session)
        times = [round(search(session, q)[1], 3) for q in QUESTIONS]
        return {"searches s": times, "rss MB before": before, "rss MB after": rss_mb(session)}
    finally:
        session.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", choices=["left", "resume", "found", "first", "start"])
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--data", help="start: the data directory holding the index")
    parser.add_argument("--set", help="found, first: a held-out question set (bench/search_queries/heldout/*.json)")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--period", type=float, default=30)
    parser.add_argument("--most", type=int, default=200)
    parser.add_argument("--wait", type=float, default=20)
    parser.add_argument("--first", type=float, default=6, help="resume: seconds the first process runs after its search")
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    if args.scenario == "start" and not args.data:
        sys.exit("start needs --data, a data directory an earlier `ctxfs index` filled")
    work = tempfile.mkdtemp(prefix="ctxfs-background-")
    if args.scenario in ("found", "first") and not args.set:
        sys.exit(f"{args.scenario} needs --set, a question set over the tree --root names")
    run = {"start": start, "found": found, "first": first}.get(args.scenario, left)
    for trial in range(args.trials):
        pair = [("a", args.a), ("b", args.b)]
        for name, binary in pair if trial % 2 == 0 else pair[::-1]:
            result = run(binary, args, work)
            log(f"trial {trial + 1}, {name} ({binary}): {json.dumps(result)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
