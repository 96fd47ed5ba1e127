#!/usr/bin/env python3
"""Search quality over a crate nobody here wrote: recall@10 and MRR@10 per ranking.

The corpus is `src/` of a crate from ~/.cargo/registry/src (default clap_builder 4.6.7) with every
doc comment (`///`, `//!`) removed. The queries (bench/search_queries/<crate>.json) are of two kinds:

* `doc`: the first sentence of an item's doc comment (the comment is gone from the indexed copy), and
  the answer is that item: its file, and the line of its definition in the stripped copy. Made by
  `--make-queries` from the original sources (deterministic; at most 12 per file).
* `hand`: natural-language questions written by hand, with the file or files that answer them.

Every ranking runs alone through `CTXFS_SEARCH_RANKINGS` (words, meaning, paths) and fused, each in
its own `ctxfs replay` process over the same index (built once by `ctxfs index`). Peers in the same
run: SQLite FTS5's own bm25() over the very same chunks (read from the index), and `rg -c` per file
(files ranked by how many lines hold a query word) as a naive baseline.

Metrics: *item* (doc queries): a passage hits when it is in the answer's file and its lines hold the
item's definition line; rank = position in the passage list. *file*: rank of the answer's file among
the distinct files of the passage list, in order. recall@10 = share of queries with a hit in the
first 10; MRR@10 = mean of 1/rank (0 past 10).

Usage: python3 bench/search_quality.py [--ctxfs BIN] [--crate NAME-VERSION] [--modes words,meaning,...]
                                      [--embedder static|minilm|none|URL]
       python3 bench/search_quality.py --make-queries    # rewrite the doc queries (hand ones kept)
Stdlib Python 3 only (its sqlite3 must have FTS5), plus rg for the naive baseline.
"""

import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BENCH, build, end, ensure_ripgrep, log, spawn, words  # noqa: E402

REGISTRY = Path.home() / ".cargo" / "registry" / "src"
DEFAULT_CRATE = "clap_builder-4.6.7"
DOC_LINE = re.compile(r"^\s*//[/!](?!/)")
ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|async\s+|unsafe\s+|extern\s+\"C\"\s+)*"
    r"(fn|struct|enum|trait|type|mod|const|static|union)\s+([A-Za-z_][A-Za-z0-9_]*)"
)
MACRO_ITEM = re.compile(r"^\s*macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)")
PER_FILE = 12
DOC_QUERIES = 100
MODES = ["words", "meaning", "paths", "words+meaning", "fused"]
DEPTH = 10
LIMIT = 20


def crate_dir(name):
    for index in sorted(REGISTRY.iterdir()):
        if (index / name).is_dir():
            return index / name
    sys.exit(f"{name} is not in {REGISTRY}")


def rs_files(src):
    return sorted(p for p in src.rglob("*.rs") if p.is_file())


# ---------------------------------------------------------------------------
# The corpus and the queries


def strip_docs(lines):
    """Lines without doc comments, and each original line's number in the stripped text (or None)."""
    kept, where = [], []
    for line in lines:
        if DOC_LINE.match(line):
            where.append(None)
        else:
            kept.append(line)
            where.append(len(kept))
    return kept, where


def make_copy(crate, dest):
    """src/ of the crate with every doc comment removed."""
    src = crate / "src"
    for path in rs_files(src):
        rel = path.relative_to(crate)
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        kept, _ = strip_docs(lines)
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(kept), encoding="utf-8")


def clean_sentence(doc_lines):
    text = " ".join(line.strip() for line in doc_lines)
    text = re.sub(r"\[`?([^\]`]+)`?\]\([^)]*\)", r"\1", text)  # [text](url)
    text = re.sub(r"\[`?([^\]`]+)`?\]\[[^\]]*\]", r"\1", text)  # [text][ref]
    text = re.sub(r"\[`?([^\]`]+)`?\]", r"\1", text)  # [`X`]
    text = text.replace("`", "").replace("*", "")
    text = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].strip()
    return text.rstrip(".:").strip()


def make_doc_queries(crate):
    found = []
    for path in rs_files(crate / "src"):
        rel = str(path.relative_to(crate))
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        _, where = strip_docs(lines)
        i = 0
        while i < len(lines):
            if not re.match(r"^\s*///(?!/)", lines[i]):
                i += 1
                continue
            start = i
            while i < len(lines) and re.match(r"^\s*///(?!/)", lines[i]):
                i += 1
            block = [re.sub(r"^\s*///\s?", "", l) for l in lines[start:i]]
            first = []
            for line in block:
                if not line.strip() or line.strip().startswith(("#", "```")):
                    break
                first.append(line)
            j = i
            while j < len(lines) and (lines[j].strip().startswith("#[") or lines[j].strip() == ""):
                j += 1
            if j >= len(lines):
                continue
            m = ITEM.match(lines[j]) or MACRO_ITEM.match(lines[j])
            if not m or where[j] is None:
                continue
            name = m.group(m.lastindex)
            query = clean_sentence(first)
            n = len(query.split())
            if n < 4 or n > 25 or re.match(r"(?i)^(deprecated|replaced|see |alias|report|note)", query):
                continue
            found.append({"query": query, "file": rel, "line": where[j], "item": name})
    # One query per text (the same sentence on two items answers neither well).
    counts = {}
    for q in found:
        counts[q["query"].lower()] = counts.get(q["query"].lower(), 0) + 1
    found = [q for q in found if counts[q["query"].lower()] == 1]
    rng = random.Random(42)
    by_file = {}
    for q in found:
        by_file.setdefault(q["file"], []).append(q)
    picked = []
    for file in sorted(by_file):
        qs = by_file[file][:]
        rng.shuffle(qs)
        picked.extend(qs[:PER_FILE])
    rng.shuffle(picked)
    picked = sorted(picked[:DOC_QUERIES], key=lambda q: (q["file"], q["line"]))
    for n, q in enumerate(picked, 1):
        q["id"] = f"doc{n:03d}"
    return picked, len(found)


# ---------------------------------------------------------------------------
# Running ctxfs

PASSAGE = re.compile(r"^(/[^\n]*):(\d+)-(\d+)$", re.M)
RECALL = re.compile(r"^\[#\w+ recall #\w+ lines (\d+)-(\d+) of (\d+)\]")


class Replay:
    def __init__(self, binary, root, data, env, embedder):
        self.p = spawn([binary, "replay", "--root", str(root), "--data", str(data), "--host", "fresh",
                        "--embedder", embedder, "-"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env)

    def step(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def call(self, tool, args):
        return self.step({"call": tool, "args": args})

    def full_text(self, answer):
        """The whole stored text of an answer (the model may see it capped)."""
        if "elided" not in answer["text"]:
            return answer["text"]
        parts, offset = [], 1
        while True:
            rec = self.call("recall", {"id": answer["id"], "offset": offset, "limit": 2000})
            head, _, body = rec["text"].partition("\n")
            m = RECALL.match(head)
            if not m:
                raise RuntimeError(f"unexpected recall answer: {head}")
            parts.append(body)
            last, total = int(m.group(2)), int(m.group(3))
            if last >= total:
                return "\n".join(parts)
            offset = last + 1

    def close(self):
        end(self.p)


def search_all(binary, root, data, mode, queries, embedder):
    env = dict(os.environ, CTXFS_SEARCH_RANKINGS=mode)
    r = Replay(binary, root, data, env, embedder)
    out, times = {}, []
    for q in queries:
        r.step({"event": "new_request", "carries_earlier": False})
        start = time.perf_counter()
        answer = r.call("search", {"query": q["query"], "limit": LIMIT})
        times.append(time.perf_counter() - start)
        text = r.full_text(answer)
        hits = [(m.group(1)[len(root) + 1:], int(m.group(2)), int(m.group(3))) for m in PASSAGE.finditer(text)
                if m.group(1).startswith(root + "/")]
        out[q["id"]] = hits
    r.close()
    return out, times


# ---------------------------------------------------------------------------
# Peers


def fts5_peer(index_db, root, queries):
    """SQLite FTS5's own bm25() over ctxfs's chunks (the same texts and lines)."""
    src = sqlite3.connect(f"file:{index_db}?mode=ro", uri=True)
    mem = sqlite3.connect(":memory:")
    mem.execute("CREATE VIRTUAL TABLE t USING fts5(words, tokenize='unicode61 remove_diacritics 0')")
    meta = {}
    rows = src.execute("SELECT f.path, c.id, c.first_line, c.last_line, c.text FROM files f JOIN chunks c ON c.blob = f.blob")
    for n, (path, _cid, first, last, text) in enumerate(rows):
        mem.execute("INSERT INTO t (rowid, words) VALUES (?, ?)", (n, " ".join(words(text))))
        meta[n] = (path[len(root) + 1:], first, last)
    out = {}
    for q in queries:
        terms = sorted(set(words(q["query"])))
        if not terms:
            out[q["id"]] = []
            continue
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        got = mem.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid LIMIT ?", (match, LIMIT)).fetchall()
        out[q["id"]] = [meta[r[0]] for r in got]
    return out, len(meta)


def rg_peer(rg, root, queries):
    """Files ranked by how many lines hold any query word (`rg -c -i -w`)."""
    out = {}
    for q in queries:
        terms = sorted(set(w for w in words(q["query"])))
        args = [rg, "-c", "-i", "-w", "-F", "--no-ignore"]
        for t in terms:
            args += ["-e", t]
        res = subprocess.run(args + ["."], cwd=root, capture_output=True, text=True)
        counts = []
        for line in res.stdout.splitlines():
            path, _, n = line.rpartition(":")
            counts.append((-int(n), path.removeprefix("./")))
        counts.sort()
        out[q["id"]] = [(p, 0, 0) for _, p in counts[:LIMIT]]
    return out


# ---------------------------------------------------------------------------
# Metrics


def ranks(q, hits):
    """(item rank, file rank), 1-based, or None."""
    files = q["files"] if "files" in q else [q["file"]]
    item = None
    if "line" in q:
        for i, (path, first, last) in enumerate(hits, 1):
            if path == q["file"] and first <= q["line"] <= last:
                item = i
                break
    distinct = []
    for path, _, _ in hits:
        if path not in distinct:
            distinct.append(path)
    file = next((i for i, path in enumerate(distinct, 1) if path in files), None)
    return item, file


def score(rs):
    hit = [r for r in rs if r is not None and r <= DEPTH]
    n = len(rs)
    return (len(hit) / n if n else float("nan"), sum(1 / r for r in hit) / n if n else float("nan"))


def table(results, queries):
    doc = [q for q in queries if q["kind"] == "doc"]
    hand = [q for q in queries if q["kind"] == "hand"]
    lines = ["| ranking | doc: item R@10 | doc: item MRR@10 | doc: file R@10 | doc: file MRR@10 | hand: file R@10 | hand: file MRR@10 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    summary = {}
    for name, hits in results.items():
        di = [ranks(q, hits[q["id"]])[0] for q in doc]
        df = [ranks(q, hits[q["id"]])[1] for q in doc]
        hf = [ranks(q, hits[q["id"]])[1] for q in hand]
        row = (score(di), score(df), score(hf))
        summary[name] = row
        cells = []
        for k, (r, m) in enumerate(row):
            if name.startswith("rg") and k == 0:
                cells += ["–", "–"]
            else:
                cells += [f"{r:.3f}", f"{m:.3f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines), summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctxfs", help="the ctxfs binary (default: cargo build --release)")
    ap.add_argument("--crate", default=DEFAULT_CRATE)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--embedder", default="static", help="ctxfs's --embedder for indexing and searching (default static)")
    ap.add_argument("--make-queries", action="store_true")
    ap.add_argument("--keep", help="keep the stripped copy and index in this directory")
    ap.add_argument("--json", help="write per-query ranks here")
    ap.add_argument("--show", type=int, default=0, help="print the N worst doc queries of the fused ranking")
    args = ap.parse_args()

    crate = crate_dir(args.crate)
    qfile = BENCH / "search_queries" / f"{args.crate}.json"
    if args.make_queries:
        doc, eligible = make_doc_queries(crate)
        data = json.loads(qfile.read_text()) if qfile.exists() else {"hand": []}
        data.update({"crate": args.crate, "source": str(crate.relative_to(Path.home())).replace(os.sep, "/"),
                     "about": "doc: first sentences of items' doc comments (removed from the indexed copy); "
                              "line is the item's definition line in the stripped copy. hand: written by hand.",
                     "eligible_doc_sentences": eligible, "doc": doc})
        qfile.parent.mkdir(parents=True, exist_ok=True)
        qfile.write_text(json.dumps(data, indent=1) + "\n")
        log(f"wrote {len(doc)} doc queries (of {eligible} eligible) and kept {len(data['hand'])} hand ones in {qfile}")
        return
    data = json.loads(qfile.read_text())
    queries = [dict(q, kind="doc") for q in data["doc"]] + [dict(q, kind="hand") for q in data["hand"]]
    binary = args.ctxfs or str(build())
    rg = ensure_ripgrep()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ctxfs-sq-"))
    root, dat = work / "crate", work / "data"
    if root.exists():
        shutil.rmtree(root)
    make_copy(crate, root)
    root = str(root.resolve())
    start = time.perf_counter()
    res = subprocess.run([binary, "index", "--root", root, "--data", str(dat), "--embedder", args.embedder],
                         capture_output=True, text=True, check=True)
    log(res.stdout.strip(), f"({time.perf_counter() - start:.1f} s)")

    results, latency = {}, {}
    for mode in args.modes.split(","):
        log(f"searching: {mode}")
        results[mode], latency[mode] = search_all(binary, root, str(dat), mode, queries, args.embedder)
    log("peers: FTS5 bm25(), rg -c")
    results["FTS5 bm25() (peer)"], nchunks = fts5_peer(dat / "index.db", root, queries)
    results["rg -c per file (naive)"] = rg_peer(rg, root, queries)

    text, summary = table(results, queries)
    print(f"crate {args.crate} (src/, doc comments removed), embedder {args.embedder}: {len(data['doc'])} doc queries, "
          f"{len(data['hand'])} hand queries; {nchunks} chunks")
    print(text)
    for mode, ts in latency.items():
        ts = sorted(ts)
        print(f"latency {mode}: p50 {ts[len(ts) // 2] * 1000:.1f} ms, p95 {ts[int(len(ts) * 0.95)] * 1000:.1f} ms")
    if args.json:
        per = {name: {q["id"]: ranks(q, hits[q["id"]]) for q in queries} for name, hits in results.items()}
        Path(args.json).write_text(json.dumps({"summary": summary, "ranks": per}, indent=1))
    if args.show and "fused" in results:
        worst = [q for q in queries if q["kind"] == "doc"]
        worst.sort(key=lambda q: -(ranks(q, results["fused"][q["id"]])[0] or 99))
        for q in worst[:args.show]:
            print(q["id"], q["query"], "->", q["file"], q["line"], q["item"],
                  {m: ranks(q, results[m][q["id"]]) for m in results})
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
