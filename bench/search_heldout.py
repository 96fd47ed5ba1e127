#!/usr/bin/env python3
"""Search quality on held-out questions: which file answers, ctxfs against whole-file BM25 and FTS5.

The question sets (bench/search_queries/heldout/<crate>.json) were written by hand before any
tuning, over crates nobody here wrote (tokio, rusqlite, tokenizers from ~/.cargo/registry/src; a
fourth, tower, a fifth, ureq, and a sixth, tokio-util, each written later, before any run over it, to
check levers afresh once the older sets' tuning halves had been used for many choices): `para` questions say what code does in other words,
`words` questions use its identifiers. Each set is split into a `tune` half (which tuning may look
at) and a `held` half (reported, never tuned on). The corpus is the crate's `src/` as published,
doc comments kept.

For every question ctxfs is asked with `limit` 10 (and 40); the passages' files, deduplicated in
order, are the ranking. Metrics: recall@10 (share of questions with an answering file in the first
10 files) and MRR@10 (mean of 1/rank, 0 past 10), per half and per kind; and each ctxfs ranking's
MRR as a ratio to whole-file BM25's, per set and pooled over the sets, with a 90 % paired-bootstrap
interval (a half of ~28 questions is only good to about ±0.2 in that ratio).

Peers in the same run, over the very same files:
* whole-file BM25 in plain Python (k1 1.2, b 0.75, words split like ctxfs's: identifiers cut at `_`
  and case changes, lower-cased; every query word, OR-ed);
* SQLite FTS5's bm25() over whole files (the same words, OR-ed);
* whole-file BM25 with every word reduced to its Snowball English stem, as ctxfs's words are (only
  when the `snowballstemmer` package is importable: `pip install snowballstemmer`), so a gain that
  stemming alone would give any BM25 is told apart from the rest.

Each ctxfs mode is a value of the benchmarking knob CTXFS_SEARCH_RANKINGS, run in its own
`ctxfs replay` process over one index built by `ctxfs index`.

Usage: python3 bench/search_heldout.py [--ctxfs BIN] [--sets tokio,rusqlite,...] [--modes fused,words,...]
                                        [--embedder static|minilm|none] [--half held|tune|all] [--json FILE]
Stdlib Python 3 only (its sqlite3 with FTS5).
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

try:
    import snowballstemmer
    STEMMER = snowballstemmer.stemmer("english")
except ImportError:
    STEMMER = None

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BENCH, build, log, words  # noqa: E402
from search_quality import Replay  # noqa: E402

REGISTRY = Path.home() / ".cargo" / "registry" / "src"
SETS = BENCH / "search_queries" / "heldout"
DEPTH = 10
# The peer every ctxfs ranking is measured against.
PEER = "whole-file BM25 (Python, peer)"
LIMITS = (10, 40)
PASSAGE = re.compile(r"^(/[^\n]*):(\d+)-(\d+)$", re.M)


def crate_dir(name):
    for index in sorted(REGISTRY.iterdir()):
        if (index / name).is_dir():
            return index / name
    sys.exit(f"{name} is not in {REGISTRY} (run `cargo fetch` in a project that depends on it)")


def corpus_files(root):
    return sorted(p for p in (root / "src").rglob("*") if p.is_file())


# ---------------------------------------------------------------------------
# Peers


def bm25_files(root, queries, k1=1.2, b=0.75, stem=None):
    """Whole-file BM25 in plain Python: the peer the issue measured against (`stem`: each word's stem)."""
    split = words if stem is None else (lambda text: [stem(w) for w in words(text)])
    docs = {}
    for p in corpus_files(root):
        docs[str(p.relative_to(root))] = Counter(split(p.read_text(encoding="utf-8", errors="replace")))
    rank_by = bm25_ranker(docs, k1, b)
    return {q["id"]: rank_by(set(split(q["query"]))) for q in queries}


def bm25_ranker(docs, k1=1.2, b=0.75):
    """BM25 over `docs` (name → word counts): a function from a query's terms to the best 40 names, best first."""
    n = len(docs)
    lengths = {d: sum(c.values()) for d, c in docs.items()}
    avg = (sum(lengths.values()) / n if n else 0.0) or 1.0
    df = Counter()
    for c in docs.values():
        df.update(c.keys())

    def rank_by(terms):
        scores = {}
        for d, c in docs.items():
            s = 0.0
            for t in terms:
                tf = c.get(t, 0)
                if tf:
                    idf = math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1)
                    s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[d] / avg))
            if s > 0:
                scores[d] = s
        return sorted(scores, key=lambda d: (-scores[d], d))[:40]
    return rank_by


def fts5_files(root, queries):
    """SQLite FTS5's own bm25() over whole files, the same words OR-ed."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(path UNINDEXED, words, tokenize='unicode61 remove_diacritics 0')")
    for p in corpus_files(root):
        text = " ".join(words(p.read_text(encoding="utf-8", errors="replace")))
        db.execute("INSERT INTO t (path, words) VALUES (?, ?)", (str(p.relative_to(root)), text))
    out = {}
    for q in queries:
        terms = sorted(set(words(q["query"])))
        match = " OR ".join('"' + t + '"' for t in terms)
        rows = db.execute("SELECT path FROM t WHERE t MATCH ? ORDER BY bm25(t), path LIMIT 40", (match,)).fetchall()
        out[q["id"]] = [r[0] for r in rows]
    return out


# ---------------------------------------------------------------------------
# ctxfs


def ctxfs_files(binary, root, data, mode, queries, embedder, limit, weights=""):
    env = dict(os.environ, CTXFS_SEARCH_RANKINGS=mode, CTXFS_SEARCH_WEIGHTS=weights)
    r = Replay(binary, root, data, env, embedder)
    out, times = {}, []
    for q in queries:
        r.step({"event": "new_request", "carries_earlier": False})
        start = time.perf_counter()
        answer = r.step({"call": "search", "args": {"query": q["query"], "limit": limit}})
        times.append(time.perf_counter() - start)
        files = []
        for m in PASSAGE.finditer(answer["text"]):
            path = m.group(1)
            if path.startswith(str(root) + "/"):
                rel = path[len(str(root)) + 1:]
                if rel not in files:
                    files.append(rel)
        out[q["id"]] = files
    r.close()
    return out, times


# ---------------------------------------------------------------------------
# Metrics


def rank(q, files):
    return next((i for i, f in enumerate(files, 1) if f in q["files"]), None)


def reciprocal(r):
    """A question's part of MRR@10: 1/rank, 0 past `DEPTH` or not found."""
    return 1 / r if r and r <= DEPTH else 0.0


def metrics(qs, ranking):
    rs = [rank(q, ranking[q["id"]]) for q in qs]
    hit = [r for r in rs if r is not None and r <= DEPTH]
    n = len(rs) or 1
    return len(hit) / n, sum(1 / r for r in hit) / n


def overlap(q, root):
    """Share of the question's words (function words left out) that occur in its first answer file."""
    stop = {"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by", "with", "as", "at",
            "it", "its", "this", "that", "from", "when", "if", "into", "not", "no", "do", "does", "how", "what",
            "which", "where", "so", "they", "them", "my", "own", "one", "all", "every", "each", "can", "may"}
    terms = {t for t in words(q["query"]) if t not in stop}
    text = set(words((root / q["files"][0]).read_text(encoding="utf-8", errors="replace")))
    return sum(t in text for t in terms) / max(1, len(terms))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctxfs", help="the ctxfs binary (default: cargo build --release)")
    ap.add_argument("--sets", default="", help="comma-separated crate names (prefixes); default all")
    ap.add_argument("--modes", default="fused", help="CTXFS_SEARCH_RANKINGS values, comma-separated")
    ap.add_argument("--embedder", default="static")
    ap.add_argument("--half", default="all", choices=["held", "tune", "all"])
    ap.add_argument("--limits", default="10,40")
    ap.add_argument("--weights", default="", help="CTXFS_SEARCH_WEIGHTS for ctxfs (tuning knob: name=value,...)")
    ap.add_argument("--work", help="keep copies and indexes here (reused when present)")
    ap.add_argument("--json", help="write every figure and per-question rank here")
    ap.add_argument("--show", default="", help="print the questions a mode misses (mode name)")
    args = ap.parse_args()
    binary = args.ctxfs or str(build())
    limits = [int(x) for x in args.limits.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ctxfs-heldout-"))
    work.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "embedder": args.embedder, "weights": args.weights, "sets": {},
              "questions": []}
    for path in sorted(SETS.glob("*.json")):
        data = json.loads(path.read_text())
        crate = data["crate"]
        if args.sets and not any(crate.startswith(s) for s in args.sets.split(",")):
            continue
        root = work / crate
        if not root.exists():
            shutil.copytree(crate_dir(crate) / "src", root / "src")
        root = root.resolve()
        data_dir = work / f"data-{crate}-{args.embedder}"
        start = time.perf_counter()
        res = subprocess.run([binary, "index", "--root", str(root), "--data", str(data_dir), "--embedder", args.embedder],
                             capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(res.stderr)
        log(crate, res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "", f"({time.perf_counter() - start:.1f} s)")
        qs = [q for q in data["questions"] if args.half == "all" or q["half"] == args.half]
        report["questions"].append(qs)
        rankings = {PEER: bm25_files(root, qs), "FTS5 bm25, whole files (peer)": fts5_files(root, qs)}
        if STEMMER is not None:
            rankings["whole-file BM25, stemmed (Python)"] = bm25_files(root, qs, stem=STEMMER.stemWord)
        latency = {}
        for mode in modes:
            for limit in limits:
                name = f"ctxfs {mode}" + ("" if limit == 10 else f" (limit {limit})")
                rankings[name], times = ctxfs_files(binary, root, data_dir, mode, qs, args.embedder, limit, args.weights)
                latency[name] = sorted(times)[len(times) // 2] * 1000
        entry = {"files": len(corpus_files(root)), "questions": len(qs), "rows": {}, "ranks": {},
                 "overlap_para": sum(overlap(q, root) for q in qs if q["kind"] == "para") / max(1, sum(q["kind"] == "para" for q in qs)),
                 "overlap_words": sum(overlap(q, root) for q in qs if q["kind"] == "words") / max(1, sum(q["kind"] == "words" for q in qs)),
                 "latency_p50_ms": latency}
        for name, ranking in rankings.items():
            row = {}
            for half in ("tune", "held"):
                for kind in ("all", "para", "words"):
                    sub = [q for q in qs if q["half"] == half and (kind == "all" or q["kind"] == kind)]
                    if sub:
                        row[f"{half}/{kind}"] = metrics(sub, ranking)
            entry["rows"][name] = row
            entry["ranks"][name] = {q["id"]: rank(q, ranking[q["id"]]) for q in qs}
        report["sets"][crate] = entry
        print(f"\n{crate}: {entry['files']} files, {len(qs)} questions; words of a para question found in its answer: "
              f"{entry['overlap_para']:.2f} (words questions: {entry['overlap_words']:.2f})")
        cols = [c for c in ("held/all", "held/para", "held/words", "tune/all", "tune/para", "tune/words")
                if any(c in r for r in entry["rows"].values())]
        print("| ranking | " + " | ".join(f"{c} R@10 / MRR" for c in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for name, row in entry["rows"].items():
            print(f"| {name} | " + " | ".join(f"{row[c][0]:.2f} / {row[c][1]:.2f}" if c in row else "–" for c in cols) + " |")
        for name, ms in latency.items():
            print(f"latency p50 {name}: {ms:.1f} ms")
        entry["ratios"] = ratios(entry, qs)
        for name, cells in entry["ratios"].items():
            print(f"MRR ratio to whole-file BM25, {name}: {ratio_cells(cells)}")
        if args.show:
            for q in qs:
                r = entry["ranks"].get(args.show, {}).get(q["id"])
                if r is None or r > 3:
                    peer = entry["ranks"][PEER][q["id"]]
                    print(f"  {q['id']} [{q['half']}/{q['kind']}] rank {r} (BM25 {peer}): {q['query']} -> {q['files'][0]}")
    pooled(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


def ratios(entry, qs, rounds=4000, seed=1):
    """Each ctxfs ranking's MRR@10 over the peer's (whole-file BM25), by half and over both, with a 90 %
    paired-bootstrap interval: the questions are drawn again with replacement `rounds` times (a fixed seed,
    so a rerun prints the same) and the ratio taken each time. With ~28 questions a half the interval is
    about ±0.2 wide, which is what a half's ratio can be trusted to."""
    out = {}
    for name, ranks in entry["ranks"].items():
        if not name.startswith("ctxfs"):
            continue
        cells = {}
        for half in ("held", "tune", "both"):
            sub = [q["id"] for q in qs if half in ("both", q["half"])]
            ours, peer = [reciprocal(ranks[i]) for i in sub], [reciprocal(entry["ranks"][PEER][i]) for i in sub]
            if not sub or not sum(peer):
                continue
            draw, samples = random.Random(seed), []
            for _ in range(rounds):
                picks = [draw.randrange(len(sub)) for _ in sub]
                base = sum(peer[p] for p in picks)
                samples.append(sum(ours[p] for p in picks) / base if base else 0.0)
            samples.sort()
            cells[half] = (sum(ours) / sum(peer), samples[int(rounds * 0.05)], samples[int(rounds * 0.95) - 1])
        out[name] = cells
    return out


def ratio_cells(cells):
    """`ratios`' cells of one ranking as text: each half's ratio with its interval."""
    return ", ".join(f"{half} {r:.2f} [{lo:.2f}, {hi:.2f}]" for half, (r, lo, hi) in cells.items())


def pooled(report):
    """MRR of every ranking over all sets' questions together, by half and kind."""
    entries = list(report["sets"].values())
    if len(entries) < 2:
        return
    print("\npooled over the sets (MRR):")
    for name in entries[0]["ranks"]:
        cells = []
        for half in ("held", "tune"):
            for kind in ("all", "para"):
                rr = []
                for entry, qs in zip(entries, report["questions"]):
                    for q in qs:
                        if q["half"] == half and kind in ("all", q["kind"]):
                            r = entry["ranks"][name][q["id"]]
                            rr.append(reciprocal(r))
                if rr:
                    cells.append(f"{half}/{kind} {sum(rr) / len(rr):.3f}")
        print(f"  {name}: " + ", ".join(cells))
    # Each ctxfs ranking's ratio to the peer over every set's questions, with its interval.
    merged = {"ranks": {name: {} for name in entries[0]["ranks"]}}
    qs_all = []
    for n, (entry, qs) in enumerate(zip(entries, report["questions"])):
        for q in qs:
            key = f"{n}:{q['id']}"
            qs_all.append({"id": key, "half": q["half"]})
            for name in merged["ranks"]:
                merged["ranks"][name][key] = entry["ranks"][name][q["id"]]
    for name, cells in ratios(merged, qs_all).items():
        print(f"  MRR ratio to whole-file BM25, {name}: {ratio_cells(cells)}")


if __name__ == "__main__":
    main()
